//! The `berth agent` harness the binary's Docker tests share: an agent process on a fresh data
//! directory (its control socket, log and a loopback metadata port beside it), restarted, killed
//! (SIGKILL or SIGTERM) and driven through the CLI (`berth ps`, `inspect`, `submit`, `stop`, …).
//!
//! How a start is launched (the cleanup wait flag, the introspection address, the pull behaviour
//! variable, the log level, a data directory elsewhere, arguments and variables for every start)
//! is the agent's [`Launch`], so that each suite keeps exactly the command line it always had.
//!
//! Not every test uses every method.
#![allow(dead_code)]

use berth_testkit::unique_name;
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Agent {
    pub dir: tempfile::TempDir,
    pub child: Option<Child>,
    pub cleanup_wait: &'static str,
    /// The loopback port of the agent's /metrics listener.
    pub port: u16,
    /// The loopback port of its introspection API under [`Introspection::Own`], the default
    /// (each agent its own, never ECS's 51678, so agents of parallel tests do not compete for it).
    pub introspection_port: u16,
    /// How every start of this agent is launched (what differs between the test files).
    pub launch: Launch,
}

/// Which `--introspection-addr` the agent is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Introspection {
    /// `127.0.0.1:<Agent::introspection_port>`.
    Own,
    /// `off`: the test does not read the introspection API.
    Off,
    /// No flag: the agent's default.
    Unset,
}

/// What a start passes besides the data directory, socket and metadata port. The default is what
/// [`Agent::start`] has always done.
#[derive(Clone, Debug)]
pub struct Launch {
    /// Pass `--cleanup-wait <Agent::cleanup_wait>` (false: the agent's default).
    pub cleanup_wait: bool,
    pub introspection: Introspection,
    /// Set `BERTH_IMAGE_PULL_BEHAVIOR=prefer-cached`.
    pub prefer_cached: bool,
    /// `BERTH_LOG`.
    pub log_level: &'static str,
    /// Variables given to every start, before the start's own.
    pub env: Vec<(String, String)>,
    /// Arguments given to every start, after the common ones and before the start's own.
    pub args: Vec<String>,
    /// The data directory, when it is not `dir` (the socket and log stay in `dir`).
    pub data_dir: Option<PathBuf>,
}

impl Default for Launch {
    fn default() -> Launch {
        Launch {
            cleanup_wait: true,
            introspection: Introspection::Own,
            prefer_cached: true,
            log_level: "info",
            env: Vec::new(),
            args: Vec::new(),
            data_dir: None,
        }
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

impl Agent {
    pub fn start(cleanup_wait: &'static str) -> Agent {
        Self::start_with(cleanup_wait, &[])
    }

    /// An agent started with extra arguments (`--docker-host`, …) from its first start.
    pub fn start_with(cleanup_wait: &'static str, extra: &[&str]) -> Agent {
        Self::start_launch(cleanup_wait, Launch::default(), extra, &[])
    }

    /// An agent started with extra variables from its first start.
    pub fn start_env(cleanup_wait: &'static str, env: &[(&str, &str)]) -> Agent {
        Self::start_launch(cleanup_wait, Launch::default(), &[], env)
    }

    /// An agent launched its own way (see [`Launch`]), with these extra arguments and variables
    /// at its first start.
    pub fn start_launch(
        cleanup_wait: &'static str,
        launch: Launch,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Agent {
        let mut a = Self::unstarted_in(tempfile::tempdir().expect("tmp"), cleanup_wait, launch);
        a.restart_env(extra, env);
        a
    }

    /// An agent on `dir`, not started yet (start it with a `restart_*`).
    pub fn unstarted_in(
        dir: tempfile::TempDir,
        cleanup_wait: &'static str,
        launch: Launch,
    ) -> Agent {
        Agent {
            dir,
            child: None,
            cleanup_wait,
            port: free_port(),
            introspection_port: free_port(),
            launch,
        }
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("api.sock")
    }

    /// `GET /v1/health` on the control socket: (HTTP status, body), or None when the agent does
    /// not answer within `limit` (or answers no JSON).
    pub fn health_within(&self, limit: Duration) -> Option<(u16, Value)> {
        use std::io::{Read, Write};
        let mut s = std::os::unix::net::UnixStream::connect(self.socket()).ok()?;
        s.set_read_timeout(Some(limit)).ok()?;
        s.write_all(b"GET /v1/health HTTP/1.1\r\nHost: berth\r\nConnection: close\r\n\r\n")
            .ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        let status = out.split(' ').nth(1).and_then(|c| c.parse().ok())?;
        let body = out.split("\r\n\r\n").nth(1).unwrap_or("");
        // The body may be chunked; take the JSON object in it.
        let start = body.find('{')?;
        let end = body.rfind('}')?;
        Some((status, serde_json::from_str(&body[start..=end]).ok()?))
    }

    /// `GET /v1/health`: (HTTP status, body); it must answer within 10 s.
    pub fn health(&self) -> (u16, Value) {
        self.health_within(Duration::from_secs(10))
            .unwrap_or_else(|| {
                panic!(
                    "GET /v1/health: no JSON answer within 10 s; log: {}",
                    self.log()
                )
            })
    }

    /// The agent's data directory.
    pub fn data(&self) -> PathBuf {
        self.launch
            .data_dir
            .clone()
            .unwrap_or_else(|| self.dir.path().to_path_buf())
    }

    pub fn restart(&mut self) {
        self.restart_with(&[]);
    }

    pub fn restart_with(&mut self, extra: &[&str]) {
        self.restart_env(extra, &[]);
    }

    pub fn restart_env(&mut self, extra: &[&str], env: &[(&str, &str)]) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("agent.log"))
            .expect("log");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_berth"));
        cmd.arg("agent");
        if self.launch.cleanup_wait {
            cmd.args(["--cleanup-wait", self.cleanup_wait]);
        }
        cmd.arg("--data-dir")
            .arg(self.data())
            .arg("--api-socket")
            .arg(self.socket())
            .args(["--metadata-addr", &format!("127.0.0.1:{}", self.port)]);
        match self.launch.introspection {
            Introspection::Own => {
                cmd.args([
                    "--introspection-addr",
                    &format!("127.0.0.1:{}", self.introspection_port),
                ]);
            }
            Introspection::Off => {
                cmd.args(["--introspection-addr", "off"]);
            }
            Introspection::Unset => {}
        }
        cmd.args(&self.launch.args)
            .args(extra)
            .envs(self.launch.env.iter().map(|(k, v)| (k, v)))
            .envs(env.iter().copied());
        if self.launch.prefer_cached {
            cmd.env("BERTH_IMAGE_PULL_BEHAVIOR", "prefer-cached");
        }
        let child = cmd
            .env("BERTH_LOG", self.launch.log_level)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("agent starts");
        self.child = Some(child);
        let t = Instant::now();
        while self.cli(&["ps"]).0 != 0 {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "agent did not answer: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM the agent and wait for it to exit; returns its exit code and how long it took.
    pub fn term(&mut self) -> (Option<i32>, Duration) {
        let mut c = self.child.take().expect("agent runs");
        let pid = c.id().to_string();
        let t = Instant::now();
        let sent = Command::new("kill").args(["-TERM", &pid]).status();
        assert!(sent.is_ok_and(|s| s.success()), "kill -TERM {pid}");
        loop {
            if let Some(status) = c.try_wait().expect("wait") {
                return (status.code(), t.elapsed());
            }
            if t.elapsed() > Duration::from_secs(60) {
                let _ = c.kill();
                let _ = c.wait();
                panic!(
                    "the agent did not exit within 60 s of SIGTERM: {}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait (30 s at most) until the agent process ended on its own (a failpoint aborted it) and
    /// check its log says it reached failpoint `what`.
    pub fn wait_aborted(&mut self, what: &str) {
        let t = Instant::now();
        let child = self.child.as_mut().expect("agent runs");
        while child.try_wait().expect("wait").is_none() {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "the agent never reached {what}: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.child = None;
        assert!(
            self.log().contains(&format!("failpoint {what} reached")),
            "aborted at the failpoint: {}",
            self.log()
        );
    }

    /// Wait (30 s at most) until the agent no longer lists the task: it was cleaned up.
    pub fn wait_forgotten(&self, id: &str) {
        let t = Instant::now();
        loop {
            let (_, ps, _) = self.cli(&["ps", "-a", "--output", "json"]);
            let tasks: Vec<Value> = serde_json::from_str(&ps).expect("JSON");
            if !tasks.iter().any(|t| t["task"] == id) {
                return;
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "not cleaned up: {ps}\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("agent.log")).unwrap_or_default()
    }

    pub fn cli(&self, args: &[&str]) -> (i32, String, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_berth"))
            .args(args)
            .arg("--agent")
            .arg(self.socket())
            .output()
            .expect("berth runs");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// `berth logs <id> <container>`: its stdout.
    pub fn logs(&self, id: &str, container: &str) -> String {
        self.cli(&["logs", id, container]).1
    }

    /// The agent's `/metrics` page (the whole HTTP answer).
    pub fn metrics(&self) -> String {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .expect("send");
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    pub fn submit(&self, def: &Value) -> String {
        let file = self.dir.path().join(format!("{}.json", unique_name("t-")));
        std::fs::write(&file, def.to_string()).expect("write");
        let (code, out, err) = self.cli(&["submit", file.to_str().expect("utf-8")]);
        assert_eq!(code, 0, "{err}");
        out.trim().to_string()
    }

    pub fn task(&self, id: &str) -> Value {
        let (code, out, err) = self.cli(&["inspect", "--output", "json", id]);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str(&out).expect("JSON")
    }

    pub fn wait_for(&self, id: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        self.wait_within(Duration::from_secs(60), id, what, pred)
    }

    /// [`Agent::wait_for`] with another limit: for a bridge-mode start while other tests load the
    /// Engine (two hundred tasks starting at once kept Docker's starts queued for over a minute).
    pub fn wait_within(
        &self,
        limit: Duration,
        id: &str,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let t = Instant::now();
        loop {
            let v = self.task(id);
            if pred(&v) {
                return v;
            }
            assert!(
                t.elapsed() < limit,
                "task {id} never {what}: {v}\nlog: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill9();
    }
}
