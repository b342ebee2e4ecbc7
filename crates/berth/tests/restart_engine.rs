//! Container restart policies end to end: `berth agent` on the real Engine, the attempt period
//! shortened to 1.5 s through the test-only `BERTH_TEST_RESTART_ATTEMPT_PERIOD_MS` (ECS's minimum
//! is 60 s). A restart is the same Docker container started again (its writable layer keeps the
//! file its first run left), counted in `berth inspect`, the metadata, `/metrics`; the task keeps
//! running. An ignored exit code and an exit before the period are not restarted; a stop during a
//! restart wins; a kill -9 between the exit and the restart, or while the container exits, ends in
//! exactly one restart.

mod common;

use berth_testkit::{FamilyGuard, docker_cli, family_containers, test_image, unique_name};
use common::agent::{Agent, Introspection, Launch};
use serde_json::{Value, json};
use std::process::Command;
use std::time::{Duration, Instant};

/// The shortened attempt period, in milliseconds.
const PERIOD_MS: &str = "1500";

/// Runs until stopped (exit 143 on SIGTERM).
const SERVE: &str = "trap 'exit 143' TERM; while true; do sleep 0.2; done";

/// First run: leave a mark, run 2.5 s (past the period), exit 1. Every later run (the restart):
/// print the container's metadata once it shows a restart, then serve.
const EXIT_ONCE_THEN_SERVE: &str = "trap 'exit 143' TERM
if [ -f /tmp/ran ]; then
  for i in $(seq 50); do out=$(wget -qO- $ECS_CONTAINER_METADATA_URI_V4) && echo \"$out\" | grep -q '\"RestartCount\":1' && echo \"$out\" && break; sleep 0.2; done
  while true; do sleep 0.2; done
fi
touch /tmp/ran; sleep 2.5; exit 1";

/// An agent (with the shortened attempt period and these extra variables) as this file has always
/// started it: no `--introspection-addr`.
fn start(env: &[(&str, &str)]) -> Agent {
    let launch = Launch {
        introspection: Introspection::Unset,
        env: vec![(
            "BERTH_TEST_RESTART_ATTEMPT_PERIOD_MS".into(),
            PERIOD_MS.into(),
        )],
        ..Launch::default()
    };
    Agent::start_launch("1h", launch, &[], env)
}

fn container(name: &str, script: &str) -> Value {
    json!({"name": name, "image": test_image(), "command": ["sh", "-c", script],
           "stopTimeout": 2, "dockerLabels": {"berth.test": "1"}})
}

fn with_policy(mut c: Value, policy: Value) -> Value {
    c["restartPolicy"] = policy;
    c
}

fn web(v: &Value) -> &Value {
    v["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == "web"))
        .expect("a web container")
}

fn restarts(v: &Value) -> u64 {
    web(v)["restartCount"].as_u64().unwrap_or(0)
}

fn stopped(v: &Value) -> bool {
    v["known"] == "STOPPED"
}

/// Docker's word on a container: (running, start time).
fn docker_state(id: &str) -> (bool, String) {
    let out = docker_cli(&[
        "inspect",
        "--format",
        "{{.State.Running}} {{.State.StartedAt}}",
        id,
    ]);
    let (running, started) = out.trim().split_once(' ').expect("two fields");
    (running == "true", started.to_string())
}

/// A task whose essential `web` exits 1 after its period, then serves once restarted, with a
/// `side` container that START-depends on it.
fn exit_once_task(family: &str) -> Value {
    let web = with_policy(
        container("web", EXIT_ONCE_THEN_SERVE),
        json!({"enabled": true, "restartAttemptPeriod": 60}),
    );
    let mut side = container("side", SERVE);
    side["essential"] = json!(false);
    side["dependsOn"] = json!([{"containerName": "web", "condition": "START"}]);
    json!({"family": family, "containerDefinitions": [web, side]})
}

#[test]
fn an_exit_after_the_period_restarts_the_same_container_and_the_task_keeps_running() {
    let agent = start(&[]);
    let family = unique_name("restart-");
    let _g = FamilyGuard(family.clone());
    // Follow the agent's event stream from before the submit.
    let events_file = agent.dir.path().join("events.jsonl");
    let mut events = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["events", "--agent"])
        .arg(agent.socket())
        .stdout(std::fs::File::create(&events_file).expect("events file"))
        .spawn()
        .expect("berth events");
    std::thread::sleep(Duration::from_millis(300));
    let id = agent.submit(&exit_once_task(&family));
    let v = agent.wait_for(&id, "running", |v| web(v)["known"] == "RUNNING");
    let docker_id = web(&v)["dockerId"].as_str().expect("created").to_string();
    let (_, first_start) = docker_state(&docker_id);
    let side_id = v["containers"][1]["dockerId"].clone();

    let v = agent.wait_for(&id, "restarted", |v| restarts(v) == 1);
    assert_eq!(
        web(&v)["dockerId"],
        docker_id.as_str(),
        "the same container"
    );
    assert_eq!(web(&v)["known"], "RUNNING", "{v}");
    assert!(web(&v)["lastRestartAt"].is_string(), "{v}");
    assert_eq!(
        v["known"], "RUNNING",
        "a restart does not stop the task: {v}"
    );
    assert_eq!(v["desired"], "RUNNING", "{v}");
    assert_eq!(
        v["containers"][1]["known"], "RUNNING",
        "the dependent keeps running: {v}"
    );
    assert_eq!(v["containers"][1]["dockerId"], side_id);
    assert_eq!(family_containers(&family).len(), 2, "nothing created again");
    let t = Instant::now();
    loop {
        let (running, started) = docker_state(&docker_id);
        if running && started != first_start {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "Docker never showed {docker_id} started again: {running} {started}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // The restarted run found its first run's file and read its metadata: RestartCount 1.
    let t = Instant::now();
    let logs = loop {
        let logs = agent.logs(&id, "web");
        if logs.contains("\"RestartCount\":1") || t.elapsed() > Duration::from_secs(15) {
            break logs;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let meta: Value = logs
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("the container printed its metadata: {logs}"));
    assert_eq!(meta["RestartCount"], 1, "{meta}");
    assert_eq!(meta["DockerId"], docker_id.as_str(), "{meta}");
    assert_eq!(meta["KnownStatus"], "RUNNING", "{meta}");

    let metrics = agent.metrics();
    assert!(
        metrics.contains("berth_container_restarts_total 1"),
        "{metrics}"
    );
    // One `restarted` event with the exit code, and no STOPPED event for web: a restart is not
    // a stop.
    let _ = events.kill();
    let _ = events.wait();
    let text = std::fs::read_to_string(&events_file).expect("events");
    let lines: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|e: &Value| e["task"] == id.as_str())
        .collect();
    let restarted: Vec<&Value> = lines.iter().filter(|e| e["event"] == "restarted").collect();
    assert_eq!(restarted.len(), 1, "{text}");
    assert_eq!(restarted[0]["container"], "web", "{text}");
    assert_eq!(restarted[0]["restartCount"], 1, "{text}");
    assert_eq!(restarted[0]["exitCode"], 1, "{text}");
    assert_eq!(restarted[0]["dockerId"], docker_id.as_str(), "{text}");
    assert!(
        !lines
            .iter()
            .any(|e| e["container"] == "web" && e["known"] == "STOPPED"),
        "{text}"
    );
    let (_, ps, _) = agent.cli(&["ps"]);
    assert!(ps.contains("RESTARTS"), "{ps}");
    let (_, text, _) = agent.cli(&["inspect", &id]);
    assert!(text.contains("LAST RESTART"), "{text}");

    // Still one restart a period later: the restarted run keeps running.
    std::thread::sleep(Duration::from_millis(2000));
    let v = agent.task(&id);
    assert_eq!(restarts(&v), 1, "{v}");
    let (code, _, err) = agent.cli(&["stop", &id]);
    assert_eq!(code, 0, "{err}");
    let v = agent.wait_for(&id, "stopped", stopped);
    assert_eq!(web(&v)["exitCode"], 143, "stopped by berth: {v}");
    assert_eq!(restarts(&v), 1, "{v}");
}

#[test]
fn an_ignored_exit_code_and_an_exit_before_the_period_are_not_restarted() {
    let agent = start(&[]);
    let ignored_family = unique_name("restart-ignored-");
    let early_family = unique_name("restart-early-");
    let _g1 = FamilyGuard(ignored_family.clone());
    let _g2 = FamilyGuard(early_family.clone());
    // Past the period, but exit code 0 is ignored.
    let ignored = json!({"family": ignored_family, "containerDefinitions": [with_policy(
        container("web", "sleep 2.5; exit 0"),
        json!({"enabled": true, "ignoredExitCodes": [0], "restartAttemptPeriod": 60}),
    )]});
    // Exit code 1 (not ignored), but before the period.
    let early = json!({"family": early_family, "containerDefinitions": [with_policy(
        container("web", "sleep 0.2; exit 1"),
        json!({"enabled": true, "ignoredExitCodes": [0], "restartAttemptPeriod": 60}),
    )]});
    let a = agent.submit(&ignored);
    let b = agent.submit(&early);
    for (id, code) in [(&a, 0), (&b, 1)] {
        let v = agent.wait_for(id, "stopped", stopped);
        assert_eq!(restarts(&v), 0, "{v}");
        assert_eq!(web(&v)["exitCode"], code, "{v}");
        assert_eq!(
            v["stoppedReason"], "Essential container in task exited",
            "{v}"
        );
        assert!(web(&v)["lastRestartAt"].is_null(), "{v}");
        let (running, _) = docker_state(web(&v)["dockerId"].as_str().expect("created"));
        assert!(!running, "{v}");
    }
    let metrics = agent.metrics();
    assert!(
        metrics.contains("berth_container_restarts_total 0"),
        "{metrics}"
    );
}

#[test]
fn a_stop_during_a_restart_wins() {
    // The restart's `docker start` is held 3 s after the restart is decided and saved: the stop
    // comes meanwhile.
    let agent = start(&[("BERTH_FAILPOINT_DELAY", "before-restart:web:3000")]);
    let family = unique_name("restart-stop-");
    let _g = FamilyGuard(family.clone());
    let id = agent.submit(&exit_once_task(&family));
    let v = agent.wait_for(&id, "decided a restart", |v| restarts(v) == 1);
    let docker_id = web(&v)["dockerId"].as_str().expect("created").to_string();
    assert_eq!(v["known"], "RUNNING", "{v}");
    let (running, _) = docker_state(&docker_id);
    assert!(!running, "the restart is held before docker start: {v}");
    let (code, out, err) = agent.cli(&["stop", &id]);
    assert_eq!(code, 0, "{out}{err}");
    let v = agent.wait_for(&id, "stopped", stopped);
    assert_eq!(web(&v)["known"], "STOPPED", "{v}");
    assert_eq!(restarts(&v), 1, "{v}");
    let (running, _) = docker_state(&docker_id);
    assert!(!running, "the stop won: the container is not running: {v}");
    // It stays so.
    std::thread::sleep(Duration::from_millis(1500));
    let (running, _) = docker_state(&docker_id);
    assert!(!running, "{v}");
    assert_eq!(agent.task(&id)["known"], "STOPPED");
}

#[test]
fn kill_9_between_the_exit_and_the_restart_then_restart_gives_exactly_one_restart() {
    let mut agent = start(&[("BERTH_FAILPOINT", "before-restart:web")]);
    let family = unique_name("restart-crash-");
    let _g = FamilyGuard(family.clone());
    let id = agent.submit(&exit_once_task(&family));
    // The agent decides the restart, saves it, and aborts before `docker start`.
    agent.wait_aborted("before-restart:web");
    let ids = family_containers(&family);
    let web_id = ids
        .iter()
        .find(|c| docker_cli(&["inspect", "--format", "{{.Name}}", c]).contains("-web-"))
        .expect("the web container")
        .clone();
    let (running, started_before) = docker_state(&web_id);
    assert!(!running, "it exited; nothing restarted it yet");

    agent.restart();
    let v = agent.wait_for(&id, "restarted after the agent's restart", |v| {
        restarts(v) == 1 && web(v)["known"] == "RUNNING" && docker_state(&web_id).0
    });
    assert!(
        web(&v)["dockerId"]
            .as_str()
            .is_some_and(|d| web_id.starts_with(d) || d.starts_with(web_id.as_str())),
        "{v}"
    );
    let (_, started_after) = docker_state(&web_id);
    assert_ne!(started_before, started_after, "started again");
    assert_eq!(v["known"], "RUNNING", "{v}");
    // Exactly one: a period later it is still 1, and Docker shows the same start.
    std::thread::sleep(Duration::from_millis(2500));
    let v = agent.task(&id);
    assert_eq!(restarts(&v), 1, "{v}\n{}", agent.log());
    assert_eq!(docker_state(&web_id), (true, started_after));
    assert_eq!(family_containers(&family).len(), 2, "nothing created again");
    let (code, _, _) = agent.cli(&["rm", &id]);
    assert_eq!(code, 0);
}

#[test]
fn a_container_that_exits_while_the_agent_is_down_is_judged_on_adoption() {
    let mut agent = start(&[]);
    let family = unique_name("restart-down-");
    let _g = FamilyGuard(family.clone());
    let id = agent.submit(&exit_once_task(&family));
    let v = agent.wait_for(&id, "running", |v| web(v)["known"] == "RUNNING");
    let docker_id = web(&v)["dockerId"].as_str().expect("created").to_string();
    agent.kill9();
    // web exits 1 after 2.5 s, past its period, while no agent runs.
    let t = Instant::now();
    while docker_state(&docker_id).0 {
        assert!(t.elapsed() < Duration::from_secs(20), "web never exited");
        std::thread::sleep(Duration::from_millis(100));
    }
    agent.restart();
    let v = agent.wait_for(&id, "restarted on adoption", |v| {
        restarts(v) == 1 && docker_state(&docker_id).0
    });
    assert_eq!(web(&v)["dockerId"], docker_id.as_str(), "{v}");
    assert_eq!(v["known"], "RUNNING", "{v}");
    std::thread::sleep(Duration::from_millis(2000));
    assert_eq!(restarts(&agent.task(&id)), 1);
    let (code, _, _) = agent.cli(&["rm", &id]);
    assert_eq!(code, 0);
}
