//! The `berth agent` harness the binary's Docker tests share: an agent process on a fresh data
//! directory (its control socket, log and a loopback metadata port beside it), restarted, killed
//! (SIGKILL or SIGTERM) and driven through the CLI (`berth ps`, `inspect`, `submit`, `stop`, …).
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
    /// The loopback port of its introspection API (each agent its own, never ECS's 51678, so
    /// agents of parallel tests do not compete for it).
    pub introspection_port: u16,
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
        let mut a = Agent {
            dir: tempfile::tempdir().expect("tmp"),
            child: None,
            cleanup_wait,
            port: free_port(),
            introspection_port: free_port(),
        };
        a.restart_with(extra);
        a
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("api.sock")
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
        let child = Command::new(env!("CARGO_BIN_EXE_berth"))
            .args(["agent", "--cleanup-wait", self.cleanup_wait, "--data-dir"])
            .arg(self.dir.path())
            .arg("--api-socket")
            .arg(self.socket())
            .args(["--metadata-addr", &format!("127.0.0.1:{}", self.port)])
            .args([
                "--introspection-addr",
                &format!("127.0.0.1:{}", self.introspection_port),
            ])
            .args(extra)
            .envs(env.iter().copied())
            .env("BERTH_IMAGE_PULL_BEHAVIOR", "prefer-cached")
            .env("BERTH_LOG", "info")
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
