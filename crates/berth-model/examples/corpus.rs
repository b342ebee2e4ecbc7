//! Runs berth's parser over every `*.json` file under a directory (recursively) and classifies
//! each outcome: valid, valid with warnings, invalid (and by which errors). Prints one line per
//! file (with `--files`), then the figures: how many validate, the most common refusals, the
//! refusals that alone keep a file out, and the most common warnings, with the
//! path's indexes and the quoted values folded so that like counts with like.
//!
//! `cargo run -p berth-model --example corpus -- DIR [--files]`. For surveying collections of
//! real task definitions; it reads files and nothing else.

use berth_model::{Problem, parse_bytes};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(dir) = args.next() else {
        eprintln!("usage: corpus DIR [--files]");
        return ExitCode::from(2);
    };
    let per_file = args.any(|a| a == "--files");
    let mut files = Vec::new();
    if let Err(e) = collect(Path::new(&dir), &mut files) {
        eprintln!("corpus: cannot read {dir}: {e}");
        return ExitCode::from(66);
    }
    files.sort();
    let (mut valid, mut clean, mut invalid) = (0usize, 0usize, 0usize);
    let mut refusals: BTreeMap<String, usize> = BTreeMap::new();
    let mut alone: BTreeMap<String, usize> = BTreeMap::new();
    let mut warnings: BTreeMap<String, usize> = BTreeMap::new();
    for file in &files {
        let bytes = match std::fs::read(file) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("corpus: cannot read {}: {e}", file.display());
                continue;
            }
        };
        let (outcome, errors, warns) = match parse_bytes(&bytes) {
            Ok(parsed) => {
                valid += 1;
                if parsed.warnings.is_empty() {
                    clean += 1;
                }
                ("valid", Vec::new(), parsed.warnings)
            }
            Err(bad) => {
                invalid += 1;
                ("invalid", bad.problems, bad.warnings)
            }
        };
        // Count each kind once per file: "how many files does this refuse".
        let mut kinds: Vec<String> = errors.iter().map(fold).collect();
        kinds.sort();
        kinds.dedup();
        for k in &kinds {
            *refusals.entry(k.clone()).or_default() += 1;
        }
        if let [only] = kinds.as_slice() {
            *alone.entry(only.clone()).or_default() += 1;
        }
        let mut wkinds: Vec<String> = warns.iter().map(fold).collect();
        wkinds.sort();
        wkinds.dedup();
        for k in &wkinds {
            *warnings.entry(k.clone()).or_default() += 1;
        }
        if per_file {
            println!(
                "{outcome:7} {:>2}e {:>2}w {}{}",
                errors.len(),
                warns.len(),
                file.display(),
                errors
                    .first()
                    .map(|p| format!("  [{p}]"))
                    .unwrap_or_default()
            );
        }
    }
    println!(
        "\n{} files: {valid} valid ({clean} without a warning), {invalid} invalid",
        files.len()
    );
    print_top("refusals (files refused by each kind of error)", &refusals);
    print_top(
        "sole refusals (files that only this kind of error refuses)",
        &alone,
    );
    print_top("warnings (files warned by each kind)", &warnings);
    ExitCode::SUCCESS
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "json") {
            out.push(path);
        }
    }
    Ok(())
}

/// `containerDefinitions[3].logConfiguration.logDriver: log driver "awslogs" ...` →
/// `containerDefinitions[].logConfiguration.logDriver: log driver "…" ...`.
fn fold(p: &Problem) -> String {
    let path = p
        .path
        .strip_prefix("taskDefinition.")
        .unwrap_or(&p.path)
        .to_owned();
    format!("{}: {}", strip_indexes(&path), strip_quoted(&p.message))
}

fn strip_indexes(s: &str) -> String {
    let mut out = String::new();
    let mut skipping = false;
    for ch in s.chars() {
        match ch {
            '[' => {
                skipping = true;
                out.push('[');
            }
            ']' => {
                skipping = false;
                out.push(']');
            }
            _ if skipping && ch.is_ascii_digit() => {}
            _ => out.push(ch),
        }
    }
    out
}

fn strip_quoted(s: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    let mut escaped = false;
    for ch in s.chars() {
        if inside {
            if escaped {
                escaped = false;
            } else if ch == '\\' {
                escaped = true;
            } else if ch == '"' {
                inside = false;
                out.push_str("…\"");
            }
        } else if ch == '"' {
            inside = true;
            out.push('"');
        } else {
            out.push(ch);
        }
    }
    out
}

fn print_top(title: &str, counts: &BTreeMap<String, usize>) {
    let mut list: Vec<(&String, &usize)> = counts.iter().collect();
    list.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    println!("\n{title}:");
    for (kind, n) in list.iter().take(40) {
        println!("{n:5}  {kind}");
    }
}
