//! Reading a task definition from a file or standard input (`-`) and reporting what is wrong with
//! it, the same way for every subcommand that takes one (`validate`, `run`).

use berth_model::logging::LogPolicy;
use berth_model::{Parsed, Problem};
use std::io::{Read, Write};
use std::path::Path;
use std::process::ExitCode;

/// Exit status for an invalid task definition (sysexits EX_DATAERR).
pub const EXIT_INVALID: u8 = 65;
/// Exit status when the task definition cannot be read (sysexits EX_NOINPUT).
pub const EXIT_NO_INPUT: u8 = 66;

/// Print warnings (ignored fields) to standard error, one `warning: PATH: message` per line.
pub fn print_warnings(warnings: &[Problem]) {
    let mut stderr = std::io::stderr().lock();
    for w in warnings {
        // Nothing useful can be done if standard error is gone.
        let _ = writeln!(stderr, "warning: {w}");
    }
}

/// Read and parse a task definition, then resolve its log drivers for this host (`policy`: the
/// same for `validate` and `run`, so both say and do the same). On failure everything is already
/// reported on standard error (every problem as `PATH: message`, then the warnings that may
/// explain them) and the exit code to use is returned: 66 unreadable, 65 invalid.
pub fn load(path: &Path, policy: &LogPolicy) -> Result<Parsed, ExitCode> {
    let from_stdin = path.as_os_str() == "-";
    let read = if from_stdin {
        let mut bytes = Vec::new();
        std::io::stdin()
            .lock()
            .read_to_end(&mut bytes)
            .map(|_| bytes)
    } else {
        std::fs::read(path)
    };
    let bytes = match read {
        Ok(bytes) => bytes,
        Err(err) => {
            let what = if from_stdin {
                "standard input".to_owned()
            } else {
                path.display().to_string()
            };
            eprintln!("berth: error: cannot read {what}: {err}");
            return Err(ExitCode::from(EXIT_NO_INPUT));
        }
    };
    match berth_model::parse_bytes(&bytes) {
        Ok(mut parsed) => {
            berth_model::logging::apply_to_parsed(&mut parsed, policy);
            print_warnings(&parsed.warnings);
            Ok(parsed)
        }
        Err(invalid) => {
            let mut stderr = std::io::stderr().lock();
            for problem in &invalid.problems {
                let _ = writeln!(stderr, "{problem}");
            }
            drop(stderr);
            print_warnings(&invalid.warnings);
            Err(ExitCode::from(EXIT_INVALID))
        }
    }
}
