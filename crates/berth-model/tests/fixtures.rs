//! The broken-definition fixtures: every `tests/fixtures/invalid/NAME.json` must be rejected with
//! exactly the problems in `NAME.expected`, one `PATH: message` per line, in order.
//!
//! After changing a message on purpose, run with `BERTH_BLESS=1` to rewrite the expected files
//! from the current output, and review the diff.

use berth_model::parse_bytes;
use std::fs;
use std::path::Path;

mod common;

use common::{check_expected, fixtures};

#[test]
fn every_invalid_fixture_reports_exactly_the_expected_problems() {
    let files = fixtures("invalid");
    assert!(files.len() >= 20, "only {} fixtures found", files.len());
    check_expected(&files, |file| {
        let bytes = fs::read(file).unwrap();
        match parse_bytes(&bytes) {
            Ok(parsed) => Err(format!(
                "{}: accepted, but it is an invalid fixture (warnings: {:?})",
                file.display(),
                parsed.warnings
            )),
            Err(invalid) => Ok(invalid
                .problems
                .iter()
                .map(|p| format!("{p}\n"))
                .collect::<String>()),
        }
    });
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
