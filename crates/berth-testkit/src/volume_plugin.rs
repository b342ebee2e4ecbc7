//! `berth volume-plugin` as a process of its own, for tests that drive it through dockerd or the
//! CLI: spawned with its socket, state file and mount root, waited for until it listens, killed
//! (SIGKILL) or terminated (SIGTERM), restarted with the same arguments, its log read.
//!
//! The test passes the path of the `berth` binary (`env!("CARGO_BIN_EXE_berth")`). Invariant: a
//! [`PluginProcess`] never outlives its value: dropping it kills the process and removes the
//! socket. Limits: one process at a time per value; the log (stderr, `BERTH_LOG=info`) is appended
//! to `<dir>/plugin.log` across restarts; `start` waits up to 20 s for the socket to accept.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The plugin process. Killed (SIGKILL) and its socket removed on drop.
pub struct PluginProcess {
    berth: PathBuf,
    child: Option<Child>,
    args: Vec<String>,
    socket: PathBuf,
    log: PathBuf,
}

fn text(path: &Path) -> String {
    path.to_str()
        .unwrap_or_else(|| panic!("{} is not UTF-8", path.display()))
        .to_owned()
}

impl PluginProcess {
    /// Starts `berth volume-plugin` (binary `berth`) on `socket`, with its state file and mount
    /// root inside `dir` (`state/volume-plugin.json`, `volumes/`) and, when given, a mount helper;
    /// returns once the socket accepts connections.
    ///
    /// # Panics
    ///
    /// When the process cannot start, exits, or does not listen within 20 s (with its log).
    pub fn spawn(
        berth: impl Into<PathBuf>,
        socket: &Path,
        dir: &Path,
        helper: Option<&Path>,
    ) -> PluginProcess {
        let mut args = vec![
            "volume-plugin".to_owned(),
            "--socket".to_owned(),
            text(socket),
            "--state-file".to_owned(),
            text(&dir.join("state/volume-plugin.json")),
            "--mount-root".to_owned(),
            text(&dir.join("volumes")),
        ];
        if let Some(h) = helper {
            args.push("--mount-helper".to_owned());
            args.push(text(h));
        }
        let mut p = PluginProcess {
            berth: berth.into(),
            child: None,
            args,
            socket: socket.to_path_buf(),
            log: dir.join("plugin.log"),
        };
        p.start();
        p
    }

    /// Starts the process (again) with the same arguments and waits until it listens.
    ///
    /// # Panics
    ///
    /// As [`PluginProcess::spawn`].
    pub fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open the plugin log");
        let child = Command::new(&self.berth)
            .args(&self.args)
            .env("BERTH_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn berth volume-plugin");
        let child = self.child.insert(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::os::unix::net::UnixStream::connect(&self.socket).is_err() {
            if let Some(status) = child.try_wait().expect("wait for the plugin") {
                panic!("plugin exited ({status}); log:\n{}", log_text(&self.log));
            }
            assert!(
                Instant::now() < deadline,
                "plugin did not listen; log:\n{}",
                log_text(&self.log)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL, and reap it (nothing when it is not running).
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM; the exit status.
    ///
    /// # Panics
    ///
    /// When it is not running or cannot be signalled.
    pub fn terminate(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let pid = i32::try_from(child.id())
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .expect("a valid pid");
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
        child.wait().expect("wait for the plugin")
    }

    /// What the process logged so far (all runs).
    pub fn log_text(&self) -> String {
        log_text(&self.log)
    }

    /// `berth volume-plugin ARGS` (a client subcommand such as `release`): whether it succeeded,
    /// and its stdout followed by its stderr.
    ///
    /// # Panics
    ///
    /// When it cannot run.
    pub fn berth(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new(&self.berth)
            .arg("volume-plugin")
            .args(args)
            .output()
            .expect("berth volume-plugin runs");
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }
}

fn log_text(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

impl Drop for PluginProcess {
    fn drop(&mut self) {
        self.kill9();
        // The killed plugin's socket is stale now: removed the way berth removes one.
        let _ = berth_fs::socket::claim(&self.socket);
    }
}
