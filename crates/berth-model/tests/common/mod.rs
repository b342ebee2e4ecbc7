//! Golden files for the fixture tests: the `.json` fixtures of a directory, and the check of each
//! one's outcome against its `.expected` file (rewritten instead when `BERTH_BLESS` is set).
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};

/// The `.json` files of `tests/fixtures/<sub>`, sorted.
pub fn fixtures(sub: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(sub);
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

/// Compare `outcome(file)` with `file.expected` for each file (or, with `BERTH_BLESS`, write it
/// there); `outcome` returns `Err` for a failure of its own. Panics listing every difference.
pub fn check_expected(files: &[PathBuf], outcome: impl Fn(&Path) -> Result<String, String>) {
    let bless = std::env::var_os("BERTH_BLESS").is_some();
    let mut failures = Vec::new();
    for file in files {
        let actual = match outcome(file) {
            Ok(a) => a,
            Err(failure) => {
                failures.push(failure);
                continue;
            }
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
