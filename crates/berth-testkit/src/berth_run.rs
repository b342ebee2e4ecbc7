//! `berth run --output json`, as the binary crate's end-to-end tests run it: the task definition
//! written to a file, the flags a test adds, then the JSON lines parsed; and the container
//! definition those tests build their tasks from ([`test_container`]).
//!
//! The test passes the path of the `berth` binary (`env!("CARGO_BIN_EXE_berth")`, which only the
//! binary crate's tests have). The argument order is always
//! `run --output json <flags in the order added> <task file>`.
//!
//! Limits: [`BerthRun::output`] waits for the process to end (no timeout of its own); tests that
//! read events while the task runs take [`BerthRun::command`] and spawn it themselves.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// A container definition that runs `script` with `sh -c` in the offline test image, labelled
/// for leak cleanup (`berth.test`), with a 2 s stop timeout.
pub fn test_container(name: &str, script: &str) -> Value {
    serde_json::json!({
        "name": name,
        "image": crate::test_image(),
        "command": ["sh", "-c", script],
        "dockerLabels": {crate::TEST_LABEL: "1"},
        "stopTimeout": 2,
    })
}

/// A `berth run --output json` invocation being built.
#[derive(Debug, Clone)]
pub struct BerthRun {
    berth: PathBuf,
    file: PathBuf,
    args: Vec<OsString>,
    envs: Vec<(OsString, Option<OsString>)>,
}

impl BerthRun {
    /// Writes `def` to `file` and runs it with the `berth` binary at `berth`.
    ///
    /// # Panics
    ///
    /// When the file cannot be written.
    pub fn new(berth: impl Into<PathBuf>, file: impl Into<PathBuf>, def: &Value) -> BerthRun {
        let file = file.into();
        std::fs::write(&file, def.to_string()).expect("write task");
        BerthRun {
            berth: berth.into(),
            file,
            args: Vec::new(),
            envs: Vec::new(),
        }
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> BerthRun {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> BerthRun
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// `--pull-behavior prefer-cached`: the offline test image exists only locally, so use it
    /// without asking any registry.
    pub fn prefer_cached(self) -> BerthRun {
        self.args(["--pull-behavior", "prefer-cached"])
    }

    /// `--data-dir DIR`.
    pub fn data_dir(self, dir: impl AsRef<Path>) -> BerthRun {
        self.arg("--data-dir").arg(dir.as_ref())
    }

    /// Sets an environment variable of the process.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> BerthRun {
        self.envs
            .push((key.as_ref().to_owned(), Some(value.as_ref().to_owned())));
        self
    }

    /// Removes an environment variable from the process.
    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> BerthRun {
        self.envs.push((key.as_ref().to_owned(), None));
        self
    }

    /// The command, to spawn with the caller's own pipes.
    pub fn command(&self) -> Command {
        let mut command = Command::new(&self.berth);
        command
            .args(["run", "--output", "json"])
            .args(&self.args)
            .arg(&self.file);
        for (key, value) in &self.envs {
            match value {
                Some(value) => command.env(key, value),
                None => command.env_remove(key),
            };
        }
        command
    }

    /// Runs it to the end.
    ///
    /// # Panics
    ///
    /// When `berth` cannot be started.
    pub fn output(&self) -> RunOutput {
        let out = self.command().output().expect("berth runs");
        RunOutput {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// What a finished `berth run` printed, and its exit code (None when a signal ended it).
#[derive(Debug, Clone)]
pub struct RunOutput {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl RunOutput {
    /// Every stdout line as JSON.
    ///
    /// # Panics
    ///
    /// When a line is not JSON.
    pub fn lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect()
    }

    /// The `summary` event among the lines that are JSON, if there is one.
    pub fn summary(&self) -> Option<Value> {
        self.stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|l| l["event"] == "summary")
    }
}
