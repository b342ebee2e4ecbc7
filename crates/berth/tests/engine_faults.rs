//! Engine answers berth must not guess, on the real Engine behind berth-testkit's fault-injecting
//! proxy (issue 24): a failed image inspect is not "absent" (no pull over a local image); a
//! create or start whose answer is lost is decided by asking Docker; an acknowledged stop is
//! durable, even while a resync's inspect hangs; health says degraded, with why, while the Engine
//! does not answer.

mod common;

use berth_testkit::berth_run::test_container;
use berth_testkit::engine_proxy::{EngineProxy, Fault, Rule};
use berth_testkit::{FamilyGuard, docker_cli, family_containers, test_image, unique_name};
use common::agent::Agent;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const SERVE: &str = "trap 'exit 0' TERM; while true; do sleep 0.2; done";

/// A locally built image (a tag of the test image under a name no registry has), removed when
/// dropped.
struct LocalImage(String);

impl LocalImage {
    fn new() -> LocalImage {
        let name = format!("{}:local", unique_name("berth-local-only-"));
        docker_cli(&["tag", &test_image(), &name]);
        LocalImage(name)
    }
}

impl Drop for LocalImage {
    fn drop(&mut self) {
        let _ = std::process::Command::new("docker")
            .args(["rmi", &self.0])
            .output();
    }
}

/// The pull requests berth sent through the proxy.
fn pulls(proxy: &EngineProxy) -> Vec<String> {
    proxy
        .seen()
        .into_iter()
        .filter(|l| l.contains("/images/create"))
        .collect()
}

fn local_image_task(family: &str, image: &str) -> Value {
    let mut c = test_container("app", SERVE);
    c["image"] = json!(image);
    json!({"family": family, "containerDefinitions": [c]})
}

#[test]
fn a_refused_image_inspect_is_asked_again_and_never_pulls_over_the_local_image() {
    let dir = tempfile::tempdir().expect("tmp");
    let proxy = EngineProxy::start(dir.path());
    let image = LocalImage::new();
    let name = image.0.split(':').next().unwrap_or_default().to_string();
    // prefer-cached (the harness's default): the image is here, so nothing may be pulled.
    let agent = Agent::start_with("1h", &["--docker-host", &proxy.url()]);
    proxy.add_rule(Rule::new("GET", &format!("/images/{name}"), Fault::Refuse));
    let family = unique_name("engine-faults-inspect-");
    let _g = FamilyGuard(family.clone());
    let id = agent.submit(&local_image_task(&family, &image.0));
    // The Engine refuses the inspect for a while (a 503), then answers again.
    let t = Instant::now();
    while proxy.faulted() < 2 {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "berth never asked for the image twice: {:?}\n{}",
            proxy.seen(),
            agent.log()
        );
        let v = agent.task(&id);
        assert_ne!(v["known"], "STOPPED", "{v}");
        std::thread::sleep(Duration::from_millis(50));
    }
    proxy.clear();
    let v = agent.wait_for(&id, "ran", |v| {
        assert_ne!(v["known"], "STOPPED", "{v}");
        v["known"] == "RUNNING"
    });
    let docker_id = v["containers"][0]["dockerId"].as_str().expect("created");
    let used = docker_cli(&["inspect", "-f", "{{.Config.Image}}", docker_id]);
    assert_eq!(used.trim(), image.0, "the container runs the local image");
    assert!(pulls(&proxy).is_empty(), "pulled: {:?}", pulls(&proxy));
    let log = agent.log();
    assert!(
        log.lines()
            .any(|l| l.contains("image inspect") && l.contains("asking again")),
        "{log}"
    );
}

#[test]
fn an_image_inspect_that_keeps_failing_says_so_and_pulls_nothing() {
    let dir = tempfile::tempdir().expect("tmp");
    let proxy = EngineProxy::start(dir.path());
    let image = LocalImage::new();
    let name = image.0.split(':').next().unwrap_or_default().to_string();
    let agent = Agent::start_with("1h", &["--docker-host", &proxy.url()]);
    proxy.add_rule(Rule::new("GET", &format!("/images/{name}"), Fault::Refuse));
    let family = unique_name("engine-faults-inspect-down-");
    let _g = FamilyGuard(family.clone());
    let id = agent.submit(&local_image_task(&family, &image.0));
    let v = agent.wait_for(&id, "stopped", |v| v["known"] == "STOPPED");
    let reason = v["containers"][0]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with(&format!(
            "CannotPullContainerError: cannot tell whether image {} is present locally",
            image.0
        )) && reason.contains("failed 5 times")
            && reason.contains("refused for the test"),
        "{v}"
    );
    assert!(pulls(&proxy).is_empty(), "pulled: {:?}", pulls(&proxy));
    assert_eq!(proxy.faulted(), 5, "{:?}", proxy.seen());
}

/// Does Docker (its own socket, not the proxy) run this container?
fn docker_running(id: &str) -> bool {
    docker_cli(&[
        "-H",
        "unix:///var/run/docker.sock",
        "inspect",
        "-f",
        "{{.State.Running}}",
        id,
    ])
    .trim()
        == "true"
}

#[test]
fn a_create_and_a_start_whose_answers_are_lost_are_decided_by_asking_docker() {
    let dir = tempfile::tempdir().expect("tmp");
    let proxy = EngineProxy::start(dir.path());
    let agent = Agent::start_with("1h", &["--docker-host", &proxy.url()]);
    // Docker's events do not reach the agent (its `start` event would come late; the stream hangs,
    // so no resync comes either), and the answers
    // to the create and the start are lost after Docker acted on them.
    proxy.set_rules(vec![
        Rule::new("GET", "/events", Fault::Hang),
        Rule::new("POST", "/containers/create", Fault::LoseAnswer),
        Rule::new("POST", "/start", Fault::LoseAnswer),
    ]);
    let family = unique_name("engine-faults-lost-");
    let _g = FamilyGuard(family.clone());
    let id = agent.submit(&json!({"family": family,
        "containerDefinitions": [test_container("web", SERVE)]}));
    let v = agent.wait_for(&id, "ran", |v| {
        assert_ne!(
            v["known"], "STOPPED",
            "stopped although Docker runs it: {v}"
        );
        v["known"] == "RUNNING"
    });
    let seen = proxy.seen();
    assert!(
        seen.iter().any(|l| l.contains("/containers/create"))
            && seen.iter().any(|l| l.contains("/start")),
        "{seen:?}"
    );
    let containers = family_containers(&family);
    assert_eq!(containers.len(), 1, "one container: {containers:?}");
    let docker_id = v["containers"][0]["dockerId"].as_str().expect("an id");
    assert!(
        containers[0].starts_with(&docker_id[..12]),
        "{containers:?} {v}"
    );
    assert!(docker_running(docker_id), "Docker runs it");
    // A few seconds on, it is still RUNNING (nothing decided it stopped) and still one container.
    std::thread::sleep(Duration::from_secs(3));
    let v = agent.task(&id);
    assert_eq!(v["known"], "RUNNING", "{v}");
    assert_eq!(family_containers(&family).len(), 1);
    let log = agent.log();
    assert!(log.contains("the create's answer was lost"), "{log}");
    assert!(log.contains("the start's answer was lost"), "{log}");

    // A stop whose answer is lost: Docker's inspect says it stopped.
    proxy.set_rules(vec![
        Rule::new("GET", "/events", Fault::Hang),
        Rule::new("POST", "/stop", Fault::LoseAnswer),
    ]);
    let (code, out, err) = agent.cli(&["stop", &id]);
    assert!(code == 0 || code == 75, "{code} {out}{err}");
    agent.wait_for(&id, "stopped", |v| v["known"] == "STOPPED");
    assert!(!docker_running(docker_id));
}

#[test]
fn an_acknowledged_stop_survives_a_kill_while_a_resync_inspect_hangs() {
    let dir = tempfile::tempdir().expect("tmp");
    let proxy = EngineProxy::start(dir.path());
    let mut agent = Agent::start_with("1h", &["--docker-host", &proxy.url()]);
    let family = unique_name("engine-faults-stop-");
    let _g = FamilyGuard(family.clone());
    let id = agent.submit(&json!({"family": family,
        "containerDefinitions": [test_container("web", SERVE)]}));
    let v = agent.wait_for(&id, "ran", |v| v["known"] == "RUNNING");
    let docker_id = v["containers"][0]["dockerId"]
        .as_str()
        .expect("created")
        .to_string();
    // The Engine stalls on the container's inspect; the event stream breaks, so the agent
    // re-subscribes and re-syncs, and the resync's inspect hangs.
    let inspect = format!("/containers/{docker_id}/json");
    proxy.add_rule(Rule::new("GET", &inspect, Fault::Hang));
    let before = proxy.faulted();
    assert!(proxy.cut() >= 1, "the agent's event stream was open");
    let t = Instant::now();
    while proxy.faulted() == before {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the resync never inspected: {:?}\n{}",
            proxy.seen(),
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The stop is answered while the inspect hangs, and only once it is saved.
    let t = Instant::now();
    let (code, out, err) = agent.cli(&["stop", &id]);
    assert_eq!(code, 0, "{out}{err}\n{}", agent.log());
    assert!(out.contains(&format!("stopping {id}")), "{out}");
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "the stop waited {:?} for the hung inspect",
        t.elapsed()
    );
    agent.kill9();
    // The restarted agent (the Engine answering again) stops the task: the stop was durable.
    proxy.clear();
    agent.restart();
    let v = agent.wait_for(&id, "stopped", |v| v["known"] == "STOPPED");
    assert_eq!(v["desired"], "STOPPED", "{v}");
    assert_eq!(v["stoppedReason"], "stopped through the API", "{v}");
    assert!(!docker_running(&docker_id), "Docker still runs it");
}

fn wait_health(agent: &Agent, status: u16, limit: Duration) -> Value {
    let t = Instant::now();
    loop {
        let (s, body) = agent.health();
        if s == status {
            return body;
        }
        assert!(
            t.elapsed() < limit,
            "health never {status}: {s} {body}\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn health_says_degraded_with_why_while_the_engine_does_not_answer_and_ok_once_it_does() {
    let dir = tempfile::tempdir().expect("tmp");
    let proxy = EngineProxy::start(dir.path());
    let agent = Agent::start_with(
        "1h",
        &[
            "--docker-host",
            &proxy.url(),
            "--engine-unhealthy-after",
            "2s",
        ],
    );
    let (status, body) = agent.health();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "ok", "{body}");

    // An Engine that refuses every call.
    proxy.set_rules(vec![Rule::new("", "/", Fault::Refuse)]);
    // Not at once: one refusal is no outage.
    let (status, body) = agent.health();
    assert_eq!(status, 200, "{body}");
    let body = wait_health(&agent, 503, Duration::from_secs(20));
    assert_eq!(body["status"], "degraded", "{body}");
    let reason = body["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("the Docker Engine has not answered since ")
            && reason.contains("refused for the test")
            && reason.contains(&proxy.url()),
        "{body}"
    );
    proxy.clear();
    let body = wait_health(&agent, 200, Duration::from_secs(20));
    assert_eq!(body["status"], "ok", "{body}");

    // An Engine that stalls: its ping hangs.
    proxy.set_rules(vec![Rule::new("", "/_ping", Fault::Hang)]);
    let body = wait_health(&agent, 503, Duration::from_secs(20));
    let reason = body["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("the Docker Engine has not answered since ")
            && reason.contains("/_ping got no answer"),
        "{body}"
    );
    proxy.clear();
    wait_health(&agent, 200, Duration::from_secs(20));
    assert!(agent.log().contains("the Docker Engine answers again"));
}
