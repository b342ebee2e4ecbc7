//! A real full disk under a running agent: its data directory is a small tmpfs, filled to ENOSPC
//! at moments of a task's life. Nothing Docker does may get ahead of what the store knows: while
//! saves fail the task is held (no container created, none stopped), `/v1/health` answers 503
//! degraded with the reason, a submit answers 503; once space is freed the agent goes on by itself
//! (no restart); and after a kill -9 and a restart no container is ever created twice — counted
//! from Docker's own `create` events.
//!
//! Each test runs as root in a private mount namespace (`berth_testkit::ns_test!`); the agent runs
//! as its child there. `chattr +i` is not tried: tmpfs has no immutable flag (FS_IOC_SETFLAGS
//! fails with ENOTTY there); the store's reopen treats the EPERM it would give like any I/O error.

mod common;

use berth_testkit::{FamilyGuard, family_containers, ns_test, test_image, unique_name};
use common::agent::{Introspection, Launch};
use serde_json::{Value, json};
use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const SERVE: &str = "trap 'exit 0' TERM; while true; do sleep 0.2; done";

/// The shared agent harness with its data directory on a small tmpfs (its socket and log stay
/// off it), launched as this file has always done: `--cleanup-wait 1s`, `--introspection-addr off`
/// (not ECS's port 51678: these tests do not read the introspection API).
struct Agent {
    // Dropped first: the agent is killed before its tmpfs is detached.
    agent: common::agent::Agent,
    scratch: berth_testkit::mount::Scratch,
}

impl std::ops::Deref for Agent {
    type Target = common::agent::Agent;
    fn deref(&self) -> &common::agent::Agent {
        &self.agent
    }
}

impl std::ops::DerefMut for Agent {
    fn deref_mut(&mut self) -> &mut common::agent::Agent {
        &mut self.agent
    }
}

impl Agent {
    /// An agent whose data directory is a fresh 8 MiB tmpfs.
    fn start() -> Agent {
        let scratch = berth_testkit::mount::Scratch::with_prefix("berth-persist-test.");
        let data = scratch.join("data");
        std::fs::create_dir(&data).expect("data dir");
        berth_testkit::mount::tmpfs("berth-test-persist", &data, c"size=8m");
        let launch = Launch {
            introspection: Introspection::Off,
            data_dir: Some(data),
            ..Launch::default()
        };
        Agent {
            agent: common::agent::Agent::start_launch("1s", launch, &[], &[]),
            scratch,
        }
    }

    /// Submit; (exit code, stdout, stderr).
    fn try_submit(&self, def: &Value) -> (i32, String, String) {
        let file = self.dir.path().join(format!("{}.json", unique_name("t-")));
        std::fs::write(&file, def.to_string()).expect("write");
        self.cli(&["submit", file.to_str().expect("utf-8")])
    }

    fn submit(&self, def: &Value) -> String {
        let (code, out, err) = self.try_submit(def);
        assert_eq!(code, 0, "{err}\n{}", self.log());
        out.trim().to_string()
    }

    fn wait_health(&self, status: u16) -> Value {
        let t = Instant::now();
        loop {
            let (s, body) = self.health();
            if s == status {
                return body;
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "health never {status}: {body}\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Fill the data directory's tmpfs to ENOSPC.
    fn fill(&self) {
        let mut f = std::fs::File::create(self.scratch.join("data/filler")).expect("filler");
        let chunk = vec![0u8; 64 * 1024];
        loop {
            if let Err(e) = f.write_all(&chunk) {
                assert_eq!(e.raw_os_error(), Some(28), "expected ENOSPC: {e}");
                break;
            }
        }
    }

    /// Make the full disk bite: a small commit can reuse pages the store's file already has, so
    /// submit large tasks (another family, ~600 KiB each) until one is refused with 503. From
    /// then on the store is degraded until space is freed (a reopen must write 1 MiB first).
    fn force_a_failed_write(&self, family: &str) {
        let big = "x".repeat(600 * 1024);
        let def = json!({"family": family, "containerDefinitions": [
            {"name": "big", "image": test_image(), "command": ["true", big],
             "dockerLabels": {"berth.test": "1"}}]});
        for _ in 0..20 {
            let (code, _, err) = self.try_submit(&def);
            if code != 0 {
                assert!(
                    err.contains("degraded") && err.contains("No space left"),
                    "{err}"
                );
                return;
            }
        }
        panic!("20 large submits fit on the full disk: {}", self.log());
    }

    fn free(&self) {
        std::fs::remove_file(self.scratch.join("data/filler")).expect("free space");
    }
}

fn container(name: &str, script: &str) -> Value {
    json!({"name": name, "image": test_image(), "command": ["sh", "-c", script],
           "stopTimeout": 2, "dockerLabels": {"berth.test": "1"}})
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

/// The names of the containers Docker created for `family` since `since` (Unix seconds), one
/// entry per `create` event.
fn creates(family: &str, since: u64) -> Vec<String> {
    let out = Command::new("docker")
        .args(["events", "--since", &since.to_string(), "--until"])
        .arg((now_s() + 1).to_string())
        .args(["--filter", "type=container", "--filter", "event=create"])
        .arg("--filter")
        .arg(format!("label=berth.family={family}"))
        .args(["--format", "{{.Actor.Attributes.name}}"])
        .output()
        .expect("docker events");
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    names.sort();
    names
}

fn is_running(id: &str) -> bool {
    Command::new("docker")
        .args(["inspect", "-f", "{{.State.Running}}", id])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "true")
}

fn known(v: &Value, i: usize) -> String {
    v["containers"][i]["known"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// Every container was created exactly once.
fn assert_created_once(family: &str, since: u64, containers: usize, log: &str) {
    let names = creates(family, since);
    let mut unique = names.clone();
    unique.dedup();
    assert_eq!(
        names.len(),
        unique.len(),
        "a container was created twice: {names:?}\n{log}"
    );
    assert_eq!(names.len(), containers, "{names:?}\n{log}");
}

fn assert_degraded(agent: &Agent, id: &str) {
    let t = Instant::now();
    let body = loop {
        let body = agent.wait_health(503);
        if body["heldTasks"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t == id))
        {
            break body;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "task {id} never held: {body}\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(body["status"], "degraded", "{body}");
    let reason = body["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains("No space left on device") && reason.contains("berth.redb"),
        "{body}"
    );
    assert!(
        body["heldTasks"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t == id)),
        "{body}"
    );
}

ns_test! {
    /// The disk fills while `init` runs: its exit cannot be saved, so `app` (SUCCESS on init) is
    /// not created; health is degraded and a submit answers 503. Space freed: `app` is created
    /// once and runs, without a restart. After the task is stopped and cleaned up, a kill -9 and
    /// restart creates nothing again.
    fn full_before_start_holds_the_create_and_recovers_without_restart() {
        let mut agent = Agent::start();
        let family = unique_name("persist-start-");
        let _g = FamilyGuard(family.clone());
        let big = unique_name("persist-big-");
        let _b = FamilyGuard(big.clone());
        let since = now_s();
        let mut init = container("init", "sleep 6; exit 0");
        init["essential"] = json!(false);
        let mut app = container("app", SERVE);
        app["dependsOn"] = json!([{"containerName": "init", "condition": "SUCCESS"}]);
        let id = agent.submit(&json!({"family": family, "containerDefinitions": [init, app]}));
        agent.wait_for(&id, "started init", |v| known(v, 0) == "RUNNING");
        agent.fill();
        agent.force_a_failed_write(&big);
        assert_degraded(&agent, &id);
        // init has exited in Docker; app was never created.
        std::thread::sleep(Duration::from_secs(2));
        assert_eq!(family_containers(&family).len(), 1, "{}", agent.log());
        let (code, _, err) =
            agent.try_submit(&json!({"family": family, "containerDefinitions": [container("x", "exit 0")]}));
        assert_ne!(code, 0);
        assert!(err.contains("degraded") && err.contains("No space left"), "{err}");

        agent.free();
        agent.wait_for(&id, "started app", |v| known(v, 1) == "RUNNING");
        let body = agent.wait_health(200);
        assert_eq!(body["status"], "ok", "{body}");
        let (code, _, err) = agent.cli(&["stop", &id]);
        assert_eq!(code, 0, "{err}");
        agent.wait_for(&id, "stopped", |v| v["known"] == "STOPPED");
        // Cleaned up after the 1 s wait; then a crash and a restart must create nothing.
        let t = Instant::now();
        while !family_containers(&family).is_empty() {
            assert!(t.elapsed() < Duration::from_secs(30), "not cleaned up: {}", agent.log());
            std::thread::sleep(Duration::from_millis(200));
        }
        agent.kill9();
        agent.restart();
        std::thread::sleep(Duration::from_secs(3));
        assert!(family_containers(&family).is_empty(), "{}", agent.log());
        assert_created_once(&family, since, 2, &agent.log());
    }
}

ns_test! {
    /// The disk fills while the task runs and `berth stop` is asked: the stop is refused (503,
    /// not durable) but held (both containers keep running in Docker, the task is degraded)
    /// until space is freed, then it stops with the API's reason, without a restart.
    fn full_at_stop_holds_the_stop_until_space_is_freed() {
        let agent = Agent::start();
        let family = unique_name("persist-stop-");
        let _g = FamilyGuard(family.clone());
        let big = unique_name("persist-big-");
        let _b = FamilyGuard(big.clone());
        let since = now_s();
        let mut side = container("side", SERVE);
        side["essential"] = json!(false);
        let id = agent.submit(&json!({"family": family,
            "containerDefinitions": [side, container("app", SERVE)]}));
        let v = agent.wait_for(&id, "ran", |v| v["known"] == "RUNNING");
        let ids: Vec<String> = (0..2)
            .map(|i| v["containers"][i]["dockerId"].as_str().expect("docker id").to_string())
            .collect();
        agent.fill();
        agent.force_a_failed_write(&big);
        // Not durable, so not acknowledged: refused with 503 and the reason, like a submit (the
        // stop is taken in all the same and saved at the next retry).
        let (code, out, err) = agent.cli(&["stop", &id]);
        assert_ne!(code, 0, "{out}{err}");
        assert!(
            err.contains("the agent is degraded") && err.contains("cannot be written"),
            "{err}"
        );
        assert_degraded(&agent, &id);
        std::thread::sleep(Duration::from_secs(2));
        for d in &ids {
            assert!(is_running(d), "{d} was stopped although the stop is not durable: {}", agent.log());
        }

        agent.free();
        let v = agent.wait_for(&id, "stopped", |v| v["known"] == "STOPPED");
        assert_eq!(v["stoppedReason"], "stopped through the API", "{v}");
        agent.wait_health(200);
        assert_created_once(&family, since, 2, &agent.log());
    }
}

ns_test! {
    /// The essential container exits by itself while the disk is full (STOPPED cannot be saved),
    /// the agent is killed (-9) while degraded, space is freed and the agent restarted: it finds
    /// the exit in Docker and the task ends — nothing is started or created again.
    fn a_restart_after_an_unsaved_stop_never_runs_the_task_again() {
        let mut agent = Agent::start();
        let family = unique_name("persist-restart-");
        let _g = FamilyGuard(family.clone());
        let big = unique_name("persist-big-");
        let _b = FamilyGuard(big.clone());
        let since = now_s();
        let mut side = container("side", SERVE);
        side["essential"] = json!(false);
        let id = agent.submit(&json!({"family": family,
            "containerDefinitions": [side, container("app", "sleep 6; exit 0")]}));
        agent.wait_for(&id, "ran", |v| v["known"] == "RUNNING");
        agent.fill();
        agent.force_a_failed_write(&big);
        assert_degraded(&agent, &id);
        agent.kill9();
        agent.free();
        agent.restart();
        let v = agent.wait_for(&id, "stopped", |v| v["known"] == "STOPPED");
        assert_eq!(v["containers"][1]["exitCode"], 0, "{v}");
        let t = Instant::now();
        while !family_containers(&family).is_empty() {
            assert!(t.elapsed() < Duration::from_secs(30), "not cleaned up: {}", agent.log());
            std::thread::sleep(Duration::from_millis(200));
        }
        agent.kill9();
        agent.restart();
        std::thread::sleep(Duration::from_secs(3));
        assert!(family_containers(&family).is_empty(), "{}", agent.log());
        assert_created_once(&family, since, 2, &agent.log());
    }
}
