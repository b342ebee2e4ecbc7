//! Commands while a Docker call is in flight, and Engine-call timeouts that tell a slow Engine from
//! a dead one, on the real Engine behind berth-testkit's fault-injecting proxy: a volume inspect
//! that is delayed (slow Engine) succeeds within `--docker-volume-timeout` and fails past it with
//! "slow, not down"; one whose Engine stops answering its ping says "does not answer"; a `stop` or
//! `rm` while a volume call or a pull hangs ends the task at once, with nothing created and the
//! hung call dropped.

mod common;

use berth_testkit::berth_run::{BerthRun, test_container};
use berth_testkit::engine_proxy::{EngineProxy, Fault, Rule};
use berth_testkit::{VolumeGuard, docker_cli, unique_name};
use common::agent::{Agent, Introspection, Launch};
use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BERTH: &str = env!("CARGO_BIN_EXE_berth");

/// A task whose one container runs `script` with the shared Docker volume `volume` (ECS names a
/// shared volume's Docker volume after the task's volume; autoprovisioned, labelled for leak
/// cleanup) at /data.
fn shared_volume_task(family: &str, volume: &str, script: &str) -> Value {
    let mut c = test_container("app", script);
    c["mountPoints"] = json!([{"sourceVolume": volume, "containerPath": "/data"}]);
    json!({
        "family": family,
        "containerDefinitions": [c],
        "volumes": [{"name": volume, "dockerVolumeConfiguration": {
            "scope": "shared", "autoprovision": true, "driver": "local",
            "labels": {"berth.test": "1"}}}]
    })
}

/// Wait (at most `limit`) until the proxy has seen a request line containing `what`.
fn wait_seen(proxy: &EngineProxy, what: &str, limit: Duration) {
    let t = Instant::now();
    while !proxy.seen().iter().any(|l| l.contains(what)) {
        assert!(
            t.elapsed() < limit,
            "berth never asked {what} within {limit:?}; seen: {:?}",
            proxy.seen()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Containers Docker has (in any state) with the task's label.
fn task_containers(task: &str) -> String {
    docker_cli(&["ps", "-aq", "--filter", &format!("label=berth.task={task}")])
}

#[test]
fn a_slow_volume_inspect_succeeds_within_its_limit_and_past_it_says_slow_not_down() {
    let dir = tempfile::tempdir().expect("tmp");
    let proxy = EngineProxy::start(dir.path());
    let volume = unique_name("berth-inflight-slow-");
    let _volume = VolumeGuard::new(&volume);
    // A slow but working Engine: every inspect of this volume answers after 3 s.
    proxy.add_rule(Rule::new(
        "GET",
        &format!("/volumes/{volume}"),
        Fault::Delay(Duration::from_secs(3)),
    ));
    let def = shared_volume_task(&unique_name("inflight-slow"), &volume, "echo ok > /data/f");
    let run = |limit: &str, file: &str| {
        BerthRun::new(BERTH, dir.path().join(file), &def)
            .prefer_cached()
            .data_dir(dir.path().join("data"))
            .args([
                "--docker-host",
                &proxy.url(),
                "--docker-volume-timeout",
                limit,
            ])
            .output()
    };
    // The limit leaves room for the Engine's own slowness on top of the proxy's 3 s: with a
    // legacy volume plugin registered and gone (berth's own suites register theirs with Engines
    // of their own since issue 24, but a machine's Engine may remember one from elsewhere),
    // dockerd itself takes 15-45 s to say a volume is missing.
    let t = Instant::now();
    let out = run("2m", "ok.json");
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(
        t.elapsed() >= Duration::from_secs(3),
        "the inspect was delayed"
    );
    assert!(proxy.faulted() >= 1);

    let out = run("1s", "late.json");
    assert_eq!(out.code, Some(125), "{}\n{}", out.stdout, out.stderr);
    let summary = out.summary().expect("a summary");
    let reason = summary["stoppedReason"].as_str().expect("a reason");
    assert_eq!(
        reason,
        format!(
            "volume {volume}: docker volume inspect {volume} did not answer within 1s (the Engine at \
             {} answers other calls: it is slow, not down; --docker-timeout and \
             --docker-volume-timeout give calls longer)",
            proxy.url()
        ),
        "{}",
        out.stdout
    );
    assert_eq!(
        summary["containers"][0]["exitCode"],
        Value::Null,
        "never ran"
    );
}

#[test]
fn a_volume_inspect_to_an_engine_that_stops_answering_says_it_does_not_answer() {
    let dir = tempfile::tempdir().expect("tmp");
    let proxy = EngineProxy::start(dir.path());
    let volume = unique_name("berth-inflight-dead-");
    let _volume = VolumeGuard::new(&volume);
    proxy.add_rule(Rule::new("GET", &format!("/volumes/{volume}"), Fault::Hang));
    let def = shared_volume_task(&unique_name("inflight-dead"), &volume, "true");
    let mut child = BerthRun::new(BERTH, dir.path().join("t.json"), &def)
        .prefer_cached()
        .data_dir(dir.path().join("data"))
        .args([
            "--docker-host",
            &proxy.url(),
            "--docker-volume-timeout",
            "2s",
        ])
        .command()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("berth runs");
    // Once berth has connected and asked for the volume, the Engine stops answering at all.
    wait_seen(
        &proxy,
        &format!("/volumes/{volume}"),
        Duration::from_secs(20),
    );
    proxy.add_rule(Rule::new("", "/_ping", Fault::Hang));
    let t = Instant::now();
    let out = loop {
        if child.try_wait().expect("wait").is_some() {
            break child.wait_with_output().expect("output");
        }
        if t.elapsed() > Duration::from_secs(40) {
            let _ = child.kill();
            panic!("berth run did not end");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary: Value = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["event"] == "summary")
        .unwrap_or_else(|| {
            panic!(
                "no summary: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    assert_eq!(
        summary["stoppedReason"].as_str(),
        Some(
            format!(
                "volume {volume}: docker volume inspect {volume} did not answer within 2s (the Engine \
                 at {} does not answer: its /_ping got no answer within 5s; is dockerd running?)",
                proxy.url()
            )
            .as_str()
        ),
        "{stdout}"
    );
}

#[test]
fn sigint_to_berth_run_while_a_volume_call_hangs_ends_the_run_at_once() {
    let dir = tempfile::tempdir().expect("tmp");
    let proxy = EngineProxy::start(dir.path());
    let volume = unique_name("berth-inflight-int-");
    let _volume = VolumeGuard::new(&volume);
    proxy.add_rule(Rule::new("GET", &format!("/volumes/{volume}"), Fault::Hang));
    let def = shared_volume_task(&unique_name("inflight-int"), &volume, "sleep 30");
    let mut child = BerthRun::new(BERTH, dir.path().join("t.json"), &def)
        .prefer_cached()
        .data_dir(dir.path().join("data"))
        .args(["--docker-host", &proxy.url()])
        .command()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("berth runs");
    wait_seen(
        &proxy,
        &format!("/volumes/{volume}"),
        Duration::from_secs(20),
    );
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    assert!(sent.is_ok_and(|s| s.success()), "kill -INT");
    let t = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if t.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("berth run did not end after SIGINT");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = t.elapsed();
    let out = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        took < Duration::from_secs(2),
        "ended after {took:?}: {stdout}"
    );
    assert_eq!(out.status.code(), Some(125), "never ran: {stdout}");
    let summary: Value = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["event"] == "summary")
        .unwrap_or_else(|| panic!("no summary: {stdout}"));
    assert_eq!(
        summary["stoppedReason"], "stopped by user (SIGINT)",
        "{stdout}"
    );
    assert!(
        !proxy
            .seen()
            .iter()
            .any(|l| l.contains("/containers/create")),
        "berth asked for a create: {:?}",
        proxy.seen()
    );
}

/// An agent as this file has always started it: no `--introspection-addr`, no pull behaviour
/// variable (the tests pass `--pull-behavior`), with these extra arguments.
fn start(extra: &[&str]) -> Agent {
    let launch = Launch {
        introspection: Introspection::Unset,
        prefer_cached: false,
        ..Launch::default()
    };
    Agent::start_launch("1h", launch, extra, &[])
}

/// The task as `berth inspect` shows it; None once the agent no longer lists it.
fn listed(agent: &Agent, id: &str) -> Option<Value> {
    let (code, out, _) = agent.cli(&["inspect", "--output", "json", id]);
    (code == 0).then(|| serde_json::from_str(&out).expect("JSON"))
}

/// Wait until the task is STOPPED; returns it and how long that took.
fn wait_stopped(agent: &Agent, id: &str, limit: Duration) -> (Value, Duration) {
    let t = Instant::now();
    loop {
        let v = listed(agent, id).expect("the task is listed");
        if v["known"] == "STOPPED" {
            return (v, t.elapsed());
        }
        assert!(
            t.elapsed() < limit,
            "task {id} not STOPPED within {limit:?}: {v}\nlog: {}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn stop_and_rm_while_a_volume_call_hangs_end_the_task_at_once_with_nothing_created() {
    let dir = tempfile::tempdir().expect("tmp");
    let proxy = EngineProxy::start(dir.path());
    let agent = start(&[
        "--docker-host",
        &proxy.url(),
        "--pull-behavior",
        "prefer-cached",
    ]);
    for verb in ["stop", "rm"] {
        let volume = unique_name("berth-inflight-held-");
        let _volume = VolumeGuard::new(&volume);
        let faulted = proxy.faulted();
        proxy.add_rule(Rule::new("GET", &format!("/volumes/{volume}"), Fault::Hang));
        let id = agent.submit(&shared_volume_task(
            &unique_name("inflight-held"),
            &volume,
            "sleep 30",
        ));
        wait_seen(
            &proxy,
            &format!("/volumes/{volume}"),
            Duration::from_secs(20),
        );
        assert_eq!(proxy.faulted(), faulted + 1, "the inspect is held");
        let released = proxy.released();
        let t = Instant::now();
        let (code, _, err) = agent.cli(&[verb, &id]);
        assert_eq!(code, 0, "{verb}: {err}");
        if verb == "stop" {
            let (task, took) = wait_stopped(&agent, &id, Duration::from_secs(5));
            assert!(
                took < Duration::from_secs(2),
                "stopped after {took:?}, not at once: {task}"
            );
            assert_eq!(task["stoppedReason"], "stopped through the API", "{task}");
            let app = &task["containers"][0];
            assert_eq!(app["known"], "STOPPED", "{task}");
            assert_eq!(app["dockerId"], Value::Null, "never created: {task}");
            assert_eq!(
                app["reason"], "task stopped before the container started",
                "{task}"
            );
        } else {
            // rm: stopped and cleaned up at once, so the agent forgets it.
            while listed(&agent, &id).is_some() {
                assert!(
                    t.elapsed() < Duration::from_secs(3),
                    "rm did not end the task at once: {:?}\n{}",
                    listed(&agent, &id),
                    agent.log()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        // The hung call was dropped, not left waiting for its 5 min limit.
        let dropped = Instant::now();
        while proxy.released() == released {
            assert!(
                dropped.elapsed() < Duration::from_secs(2),
                "{verb}: the held volume inspect was never closed by berth"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // Nothing after the stop: no container, no volume created for it.
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(task_containers(&id), "", "{verb}: a container was created");
        assert_eq!(
            docker_cli(&["volume", "ls", "-q", "--filter", &format!("name={volume}")]),
            "",
            "{verb}: the volume was created after the stop"
        );
        assert!(
            !proxy
                .seen()
                .iter()
                .any(|l| l.starts_with("POST") && l.contains("/containers/create")),
            "{verb}: berth asked for a create: {:?}",
            proxy.seen()
        );
    }
}

#[test]
fn stop_while_a_pull_hangs_ends_the_task_at_once_and_drops_the_pull() {
    let dir = tempfile::tempdir().expect("tmp");
    let proxy = EngineProxy::start(dir.path());
    // The pull never answers (a registry or Engine that does not progress); the pull inactivity
    // limit (1 min) is far away.
    proxy.add_rule(Rule::new("POST", "/images/create", Fault::Hang));
    let agent = start(&["--docker-host", &proxy.url(), "--pull-behavior", "always"]);
    let def = json!({"family": unique_name("inflight-pull"),
                     "containerDefinitions": [test_container("app", "sleep 30")]});
    let id = agent.submit(&def);
    wait_seen(&proxy, "/images/create", Duration::from_secs(20));
    let released = proxy.released();
    let (code, _, err) = agent.cli(&["stop", &id]);
    assert_eq!(code, 0, "{err}");
    let (task, took) = wait_stopped(&agent, &id, Duration::from_secs(5));
    assert!(
        took < Duration::from_secs(2),
        "stopped after {took:?}: {task}"
    );
    assert_eq!(task["stoppedReason"], "stopped through the API", "{task}");
    let app = &task["containers"][0];
    assert_eq!(app["dockerId"], Value::Null, "never created: {task}");
    assert_eq!(
        app["reason"], "task stopped before the container started",
        "{task}"
    );
    let t = Instant::now();
    while proxy.released() == released {
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "the held pull was never closed by berth"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(task_containers(&id), "", "a container was created");
    assert!(
        !proxy
            .seen()
            .iter()
            .any(|l| l.contains("/containers/create")),
        "berth asked for a create: {:?}",
        proxy.seen()
    );
}

#[test]
fn the_agent_counts_a_volume_call_past_its_limit_and_names_it_in_the_reason() {
    let dir = tempfile::tempdir().expect("tmp");
    let proxy = EngineProxy::start(dir.path());
    let volume = unique_name("berth-inflight-count-");
    let _volume = VolumeGuard::new(&volume);
    proxy.add_rule(Rule::new(
        "GET",
        &format!("/volumes/{volume}"),
        Fault::Delay(Duration::from_secs(3)),
    ));
    let agent = start(&[
        "--docker-host",
        &proxy.url(),
        "--pull-behavior",
        "prefer-cached",
        "--docker-volume-timeout",
        "1s",
    ]);
    let id = agent.submit(&shared_volume_task(
        &unique_name("inflight-count"),
        &volume,
        "true",
    ));
    let (task, _) = wait_stopped(&agent, &id, Duration::from_secs(20));
    let reason = task["stoppedReason"].as_str().expect("a reason");
    assert!(
        reason.starts_with(&format!(
            "volume {volume}: docker volume inspect {volume} did not answer within 1s"
        )) && reason.contains("it is slow, not down"),
        "{task}"
    );
    let metrics = agent.metrics();
    assert!(
        metrics.contains("berth_docker_timeouts_total{operation=\"volume_exists\"} 1"),
        "{metrics}"
    );
}
