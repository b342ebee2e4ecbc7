//! A data directory whose disk stops answering under a running agent: a real ext4 file system on
//! a loop device, frozen with `fsfreeze -f` (every write to it blocks, as on a hung disk). The
//! agent must see it: a submit is answered 503 within `--store-write-timeout` (not left hanging),
//! `/v1/health` says degraded with why; and once the disk answers again a retry with the same
//! `--client-token` is answered with the task the first submit's late write stored, so exactly one
//! task runs (counted in Docker by its family label). A `berth stop` while the disk is frozen is
//! refused (503), not acknowledged; after a kill -9 and a restart the token still names its task.
//!
//! Runs as root in a private mount namespace (`berth_testkit::ns_test!`); the agent runs as its
//! child there. The file system is thawed before anything else is dropped (a process blocked on
//! a frozen file system cannot die), then the agent is killed and the file system unmounted (the
//! loop device is freed with it).

mod common;

use berth_testkit::mount::{LoopFs, Scratch};
use berth_testkit::{FamilyGuard, family_containers, ns_test, test_image, unique_name};
use common::agent::{Introspection, Launch};
use serde_json::{Value, json};
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The agent's store write bound in this test.
const BOUND: &str = "2s";

struct Agent {
    // Dropped first: the agent is killed before its file system is unmounted.
    agent: common::agent::Agent,
    fs: LoopFs,
    _scratch: Scratch,
}

impl Agent {
    fn start() -> Agent {
        let scratch = Scratch::with_prefix("berth-hung-test.");
        let data = scratch.join("data");
        std::fs::create_dir(&data).expect("data dir");
        let fs = LoopFs::ext4(&scratch.join("disk.img"), 64, &data);
        let launch = Launch {
            introspection: Introspection::Off,
            data_dir: Some(data),
            args: vec!["--store-write-timeout".into(), BOUND.into()],
            ..Launch::default()
        };
        Agent {
            agent: common::agent::Agent::start_launch("1s", launch, &[], &[]),
            fs,
            _scratch: scratch,
        }
    }

    /// `berth submit --client-token TOKEN FILE`, killed after `limit`.
    fn submit(&self, def: &Value, token: &str, limit: Duration) -> Option<(i32, String, String)> {
        let file = self
            .agent
            .dir
            .path()
            .join(format!("{}.json", unique_name("t-")));
        std::fs::write(&file, def.to_string()).expect("write");
        let file = file.display().to_string();
        self.bounded(&["submit", "--client-token", token, &file], limit)
    }

    /// `berth ARGS`, killed after `limit`: (exit code, stdout, stderr), or None when it had not
    /// answered by then.
    fn bounded(&self, args: &[&str], limit: Duration) -> Option<(i32, String, String)> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_berth"))
            .args(args)
            .arg("--agent")
            .arg(self.agent.socket())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("berth submit runs");
        let t = Instant::now();
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                let mut out = String::new();
                let mut err = String::new();
                let _ = child.stdout.take().map(|mut s| s.read_to_string(&mut out));
                let _ = child.stderr.take().map(|mut s| s.read_to_string(&mut err));
                return Some((status.code().unwrap_or(-1), out.trim().to_string(), err));
            }
            if t.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `GET /v1/health`: (HTTP status, body), or None when it does not answer within 10 s.
    fn health(&self) -> Option<(u16, Value)> {
        self.agent.health_within(Duration::from_secs(10))
    }
}

fn serve(family: &str) -> Value {
    json!({"family": family, "containerDefinitions": [{
        "name": "app", "image": test_image(),
        "command": ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.2; done"],
        "stopTimeout": 2, "dockerLabels": {"berth.test": "1"}}]})
}

ns_test! {
    /// The disk freezes: a submit with a client token answers 503 within the bound and health is
    /// degraded, naming the store and why. Thawed: the same token is answered with one task id,
    /// again and again, and exactly one task (one container of the family) runs.
    fn a_frozen_data_disk_answers_503_and_a_token_retry_runs_the_task_once() {
        let mut agent = Agent::start();
        let family = unique_name("hung-");
        let _g = FamilyGuard(family.clone());
        let token = unique_name("token-");
        let (status, body) = agent.health().expect("health answers");
        assert_eq!(status, 200, "{body}");
        // A task running before the freeze, to be stopped while the disk is frozen.
        let before = unique_name("hung-before-");
        let _b = FamilyGuard(before.clone());
        let (code, running, err) = agent
            .submit(&serve(&before), &unique_name("token-"), Duration::from_secs(30))
            .expect("answers");
        assert_eq!(code, 0, "{err}");
        agent
            .agent
            .wait_for(&running, "running", |v| v["known"] == "RUNNING");

        let frozen = agent.fs.freeze();
        // The bound is 2 s: the answer comes well within 30 s (the machine may be loaded).
        let t = Instant::now();
        let first = agent.submit(&serve(&family), &token, Duration::from_secs(30));
        let (code, _, err) = first.unwrap_or_else(|| {
            panic!("the submit hung on the frozen disk: {}", agent.agent.log())
        });
        eprintln!("first submit after {:?}: {err}", t.elapsed());
        assert_ne!(code, 0, "accepted on a frozen disk: {err}");
        assert!(err.contains("503") || err.contains("degraded"), "{err}");
        let (status, body) = agent
            .health()
            .unwrap_or_else(|| panic!("health hung: {}", agent.agent.log()));
        assert_eq!(status, 503, "health on a frozen disk: {body}");
        assert_eq!(body["status"], "degraded", "{body}");
        let reason = body["reason"].as_str().unwrap_or("");
        assert!(
            reason.contains("berth.redb") && reason.contains("has not finished"),
            "{body}"
        );
        // A retry while still frozen: refused again, quickly.
        let again = agent.submit(&serve(&family), &token, Duration::from_secs(30));
        let (code, _, err) = again.unwrap_or_else(|| panic!("the retry hung: {}", agent.agent.log()));
        assert_ne!(code, 0, "{err}");
        assert!(family_containers(&family).is_empty(), "a container on a frozen disk");
        // A stop cannot be made durable: refused, not acknowledged; the task runs on.
        let stop = agent.bounded(&["stop", &running], Duration::from_secs(30));
        let (code, _, err) = stop.unwrap_or_else(|| panic!("the stop hung: {}", agent.agent.log()));
        assert_ne!(code, 0, "a stop acknowledged on a frozen disk: {err}");
        assert!(err.contains("degraded"), "{err}");

        drop(frozen);
        // The late write completes; a retry with the same token learns its task's id.
        let t = Instant::now();
        let id = loop {
            let (code, out, err) = agent
                .submit(&serve(&family), &token, Duration::from_secs(30))
                .unwrap_or_else(|| panic!("a submit hung after the thaw: {}", agent.agent.log()));
            if code == 0 {
                break out;
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "never accepted after the thaw: {err}\n{}",
                agent.agent.log()
            );
            std::thread::sleep(Duration::from_millis(300));
        };
        let (code, out, err) = agent
            .submit(&serve(&family), &token, Duration::from_secs(30))
            .expect("answers");
        assert_eq!((code, out.as_str()), (0, id.as_str()), "{err}");
        agent
            .agent
            .wait_for(&id, "running", |v| v["known"] == "RUNNING");
        // Give a second task, if one had been stored, time to show.
        std::thread::sleep(Duration::from_secs(3));
        let containers = family_containers(&family);
        assert_eq!(containers.len(), 1, "{containers:?}\n{}", agent.agent.log());
        let (_, ps, _) = agent.agent.cli(&["ps", "-a", "--output", "json"]);
        let tasks: Vec<Value> = serde_json::from_str(&ps).expect("ps json");
        let ours: Vec<&Value> = tasks.iter().filter(|t| t["family"] == family).collect();
        assert_eq!(ours.len(), 1, "{ps}");
        let (status, body) = agent.health().expect("health answers");
        assert_eq!(status, 200, "{body}");
        // The token is stored with the task: a restarted agent still answers it.
        agent.agent.kill9();
        agent.agent.restart();
        let (code, out, err) = agent
            .submit(&serve(&family), &token, Duration::from_secs(30))
            .expect("answers");
        assert_eq!((code, out.as_str()), (0, id.as_str()), "{err}");
        std::thread::sleep(Duration::from_secs(2));
        assert_eq!(family_containers(&family).len(), 1, "{}", agent.agent.log());
        for id in [&id, &running] {
            let (code, _, err) = agent.agent.cli(&["stop", id]);
            assert_eq!(code, 0, "{err}");
            agent.agent.wait_for(id, "stopped", |v| v["known"] == "STOPPED");
        }
    }
}
