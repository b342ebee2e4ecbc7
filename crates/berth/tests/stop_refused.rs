//! A stop is done when Docker says so, on the real Engine: berth (the agent, and `berth run`) is
//! pointed at the tests' engine proxy, which refuses `POST …/stop` and `…/kill` (503) for a while.
//! Meanwhile no container is reported STOPPED while Docker (asked on its own socket) still runs
//! it, the last stop error is shown, and `berth stop` says the task is still stopping; once the
//! proxy lets the calls through, the task reaches STOPPED within the retry delay and Docker has
//! really stopped its containers.

mod common;

use berth_testkit::berth_run::{BerthRun, test_container};
use berth_testkit::engine_proxy::{EngineProxy, Fault, Rule};
use berth_testkit::{FamilyGuard, family_containers, unique_name};
use common::agent::Agent;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

const SERVE: &str = "trap 'exit 0' TERM; while true; do sleep 0.2; done";

fn refuse_stops(proxy: &EngineProxy) {
    proxy.set_rules(vec![
        Rule::new("POST", "/stop", Fault::Refuse),
        Rule::new("POST", "/kill", Fault::Refuse),
    ]);
}

/// Does Docker (its own socket, not the proxy) run this container?
fn docker_running(id: &str) -> bool {
    let out = std::process::Command::new("docker")
        .args(["-H", "unix:///var/run/docker.sock", "inspect", "-f"])
        .arg("{{.State.Running}}")
        .arg(id)
        .output()
        .expect("the docker CLI runs");
    assert!(
        out.status.success(),
        "docker inspect {id}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim() == "true"
}

/// berth's view of the task, then Docker's: a container berth calls STOPPED must not be running
/// in Docker (checked after berth answered, so a container that stops in between is no false
/// alarm, and one berth calls STOPPED too early is caught).
fn check_never_stopped_while_running(v: &Value) {
    for c in v["containers"].as_array().expect("containers") {
        if c["known"] == "STOPPED"
            && let Some(id) = c["dockerId"].as_str()
        {
            assert!(
                !docker_running(id),
                "berth says {} is STOPPED while Docker runs it: {v}",
                c["name"]
            );
        }
    }
}

#[test]
fn a_refused_stop_keeps_the_task_stopping_until_the_engine_answers() {
    let proxy_dir = tempfile::tempdir().expect("tmp");
    let proxy = EngineProxy::start(proxy_dir.path());
    let agent = Agent::start_with("1h", &["--docker-host", &proxy.url()]);
    let family = unique_name("stop-refused-");
    let _g = FamilyGuard(family.clone());
    let db = test_container("db", SERVE);
    let mut app = test_container("app", SERVE);
    app["dependsOn"] = json!([{"containerName": "db", "condition": "START"}]);
    let id = agent.submit(&json!({"family": family, "containerDefinitions": [db, app]}));
    let v = agent.wait_for(&id, "ran", |v| v["known"] == "RUNNING");
    let ids: Vec<String> = v["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .map(|c| c["dockerId"].as_str().expect("created").to_string())
        .collect();

    refuse_stops(&proxy);
    let (code, out, err) = agent.cli(&["stop", &id]);
    assert!(out.contains(&format!("stopping {id}")), "{out}{err}");
    assert!(
        code == 0 || code == 75,
        "the first stop: {code} {err}\n{}",
        agent.log()
    );

    // 8 s of refusals: berth keeps the task stopping, shows the error, never says STOPPED.
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(8) {
        let v = agent.task(&id);
        check_never_stopped_while_running(&v);
        assert_ne!(v["known"], "STOPPED", "{v}");
        assert_eq!(v["desired"], "STOPPED", "{v}");
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(
        ids.iter().all(|i| docker_running(i)),
        "the proxy refused every stop"
    );
    let v = agent.task(&id);
    // app is stopped first (it depends on db); db waits for it.
    let app_view = &v["containers"][1];
    assert_eq!(app_view["name"], "app");
    assert_eq!(app_view["known"], "RUNNING", "{v}");
    let error = app_view["stopError"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("CannotStopContainerError: ") && error.contains("refused for the test"),
        "{v}"
    );
    // Attempts at 0, 1, 3 and 7 s (1 s doubling): at least 3 within 8 s, not a flood.
    let failures = app_view["stopFailures"].as_u64().unwrap_or(0);
    assert!((3..=5).contains(&failures), "{failures} failures: {v}");
    assert!(app_view["stopRetryAt"].is_string(), "{v}");
    assert_eq!(
        v["containers"][0]["stopError"],
        Value::Null,
        "db was not asked"
    );
    let stops = proxy
        .seen()
        .iter()
        .filter(|l| l.starts_with("POST") && l.contains("/stop"))
        .count();
    assert!((3..=5).contains(&stops), "{stops} stops sent");

    // ps shows it stopping, with the error.
    let (code, ps, _) = agent.cli(&["ps"]);
    assert_eq!(code, 0);
    let row = ps
        .lines()
        .find(|l| l.starts_with(&id[..12]))
        .unwrap_or_else(|| panic!("{ps}"));
    assert!(row.contains("STOPPING"), "{ps}");
    assert!(row.contains("stop of app failed"), "{ps}");
    let (_, inspect, _) = agent.cli(&["inspect", &id]);
    assert!(inspect.contains("app: still running"), "{inspect}");

    // berth stop of a task still stopping is not a silent no-op: it says why, exit 75, and the
    // stop goes out at once.
    let before = proxy.faulted();
    let (code, out, err) = agent.cli(&["stop", &id[..12]]);
    assert_eq!(code, 75, "{out}{err}");
    assert!(out.contains(&format!("stopping {id}")), "{out}");
    assert!(
        err.contains("is still stopping")
            && err.contains("container app")
            && err.contains("refused for the test"),
        "{err}"
    );
    let t = Instant::now();
    while proxy.faulted() == before {
        assert!(
            t.elapsed() < Duration::from_millis(900),
            "the stop was not sent again at once"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // The Engine answers again: the task reaches STOPPED within the retry delay (the count
    // started over at the last `berth stop`: a few seconds at most).
    proxy.clear();
    let t = Instant::now();
    let v = agent.wait_for(&id, "stopped", |v| {
        check_never_stopped_while_running(v);
        v["known"] == "STOPPED"
    });
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    for i in &ids {
        assert!(!docker_running(i), "{i} still runs");
    }
    for c in v["containers"].as_array().expect("containers") {
        assert_eq!(c["exitCode"], 0, "stopped by SIGTERM: {v}");
    }
    assert_eq!(family_containers(&family).len(), 2, "nothing recreated");
    assert_eq!(agent.cli(&["stop", &id]).0, 1, "now it is stopped");
}

#[test]
fn berth_run_does_not_report_stopped_while_docker_runs_the_task() {
    let proxy_dir = tempfile::tempdir().expect("tmp");
    let proxy = EngineProxy::start(proxy_dir.path());
    let data = tempfile::tempdir().expect("tmp");
    let family = unique_name("stop-refused-run-");
    let _g = FamilyGuard(family.clone());
    // The essential container exits after 2 s; the sidecar must then be stopped.
    let web = test_container("web", "sleep 2; exit 3");
    let mut side = test_container("side", SERVE);
    side["essential"] = json!(false);
    refuse_stops(&proxy);
    let file = data.path().join("task.json");
    let run = BerthRun::new(
        env!("CARGO_BIN_EXE_berth"),
        &file,
        &json!({"family": family, "containerDefinitions": [web, side]}),
    )
    .prefer_cached()
    .data_dir(data.path())
    .args(["--docker-host", &proxy.url()]);
    let mut child = run
        .command()
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("berth run starts");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str(&line) {
                let _ = tx.send(v);
            }
        }
    });

    // Until the refusals end, no line says the task or the sidecar STOPPED, and a stopFailed
    // line comes for each failed attempt.
    let mut stop_failed = 0;
    let mut side_id: Option<String> = None;
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(8) {
        let Ok(v) = rx.recv_timeout(Duration::from_millis(200)) else {
            continue;
        };
        match v["event"].as_str() {
            Some("task") | Some("summary") => assert_ne!(v["known"], "STOPPED", "{v}"),
            Some("container") if v["container"] == "side" => {
                if let Some(id) = v["dockerId"].as_str() {
                    side_id = Some(id.to_string());
                }
                assert_ne!(v["known"], "STOPPED", "{v}");
            }
            Some("stopFailed") => {
                assert_eq!(v["container"], "side", "{v}");
                assert!(
                    v["error"]
                        .as_str()
                        .is_some_and(|e| e.contains("refused for the test")),
                    "{v}"
                );
                stop_failed += 1;
            }
            _ => {}
        }
    }
    assert!(child.try_wait().expect("wait").is_none(), "berth run ended");
    let side_id = side_id.expect("side was created");
    assert!(docker_running(&side_id));
    assert!(
        (2..=5).contains(&stop_failed),
        "{stop_failed} stopFailed lines"
    );

    proxy.clear();
    let t = Instant::now();
    let mut summary = None;
    while summary.is_none() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "berth run never ended"
        );
        if let Ok(v) = rx.recv_timeout(Duration::from_millis(200))
            && v["event"] == "summary"
        {
            summary = Some(v);
        }
    }
    let summary = summary.expect("summary");
    assert_eq!(summary["known"], "STOPPED", "{summary}");
    let status = child.wait().expect("berth run exits");
    assert_eq!(
        status.code(),
        Some(3),
        "the essential container's exit code"
    );
    // berth run cleaned up after the stop went through: nothing of the task is left.
    assert!(
        family_containers(&family).is_empty(),
        "{:?}",
        family_containers(&family)
    );
}

#[test]
fn a_resync_after_the_event_stream_breaks_sends_a_failed_stop_again_at_once() {
    let proxy_dir = tempfile::tempdir().expect("tmp");
    let proxy = EngineProxy::start(proxy_dir.path());
    let agent = Agent::start_with("1h", &["--docker-host", &proxy.url()]);
    let family = unique_name("stop-refused-resync-");
    let _g = FamilyGuard(family.clone());
    let id = agent.submit(&json!({"family": family,
        "containerDefinitions": [test_container("web", SERVE)]}));
    let v = agent.wait_for(&id, "ran", |v| v["known"] == "RUNNING");
    let docker_id = v["containers"][0]["dockerId"]
        .as_str()
        .expect("created")
        .to_string();
    refuse_stops(&proxy);
    agent.cli(&["stop", &id]);
    // Four failures (0, 1, 3, 7 s): the next attempt is 8 s away.
    let v = agent.wait_for(&id, "failed to stop four times", |v| {
        check_never_stopped_while_running(v);
        v["containers"][0]["stopFailures"].as_u64() >= Some(4)
    });
    let retry_at = v["containers"][0]["stopRetryAt"]
        .as_str()
        .expect("a retry time")
        .to_string();
    // The Engine "restarts": it answers again and every open connection (the agent's event
    // stream) is dropped. The agent re-subscribes, re-syncs, finds web running and stops it at
    // once, long before its scheduled retry.
    proxy.clear();
    let cut = proxy.cut();
    assert!(cut >= 1, "the agent's event stream was open");
    let t = Instant::now();
    let v = agent.wait_for(&id, "stopped", |v| {
        check_never_stopped_while_running(v);
        v["known"] == "STOPPED"
    });
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "stopped after {:?}, the scheduled retry was at {retry_at}",
        t.elapsed()
    );
    assert!(!docker_running(&docker_id));
    assert_eq!(v["containers"][0]["exitCode"], 0, "{v}");
    let log = agent.log();
    assert!(
        log.contains("re-subscribed") && log.contains("stopping it again"),
        "{log}"
    );
}
