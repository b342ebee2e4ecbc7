//! The broken-definition fixtures: every `tests/fixtures/invalid/NAME.json` must be rejected with
//! exactly the problems in `NAME.expected`, one `PATH: message` per line, in order.
//!
//! After changing a message on purpose, run with `BERTH_BLESS=1` to rewrite the expected files
//! from the current output, and review the diff.

use berth_model::parse_bytes;
use std::fs;
use std::path::{Path, PathBuf};

fn fixtures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/invalid");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_invalid_fixture_reports_exactly_the_expected_problems() {
    let bless = std::env::var_os("BERTH_BLESS").is_some();
    let files = fixtures();
    assert!(files.len() >= 20, "only {} fixtures found", files.len());
    let mut failures = Vec::new();
    for file in &files {
        let bytes = fs::read(file).unwrap();
        let actual = match parse_bytes(&bytes) {
            Ok(parsed) => {
                failures.push(format!(
                    "{}: accepted, but it is an invalid fixture (warnings: {:?})",
                    file.display(),
                    parsed.warnings
                ));
                continue;
            }
            Err(invalid) => invalid
                .problems
                .iter()
                .map(|p| format!("{p}\n"))
                .collect::<String>(),
        };
        let expected_file = file.with_extension("expected");
        if bless {
            fs::write(&expected_file, &actual).unwrap();
            continue;
        }
        let expected = fs::read_to_string(&expected_file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", expected_file.display()));
        if actual != expected {
            failures.push(format!(
                "{}:\n--- expected\n{expected}--- actual\n{actual}",
                file.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_expected_file_has_a_fixture() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/invalid");
    for entry in fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "expected") {
            assert!(
                path.with_extension("json").exists(),
                "{} has no .json",
                path.display()
            );
        }
    }
}
