//! The engine proxy against the real Engine: calls pass through (keep-alive clients included),
//! a refused call answers 503 without reaching Docker, a delayed one answers after the delay.

use berth_testkit::engine_proxy::{EngineProxy, Fault, Rule};
use std::time::{Duration, Instant};

fn docker_via(proxy: &EngineProxy, args: &[&str]) -> std::process::Output {
    std::process::Command::new("docker")
        .arg("-H")
        .arg(proxy.url())
        .args(args)
        .output()
        .expect("the docker CLI runs")
}

#[test]
fn the_proxy_forwards_refuses_and_delays_real_engine_calls() {
    let dir = tempfile::tempdir().expect("temp dir");
    let proxy = EngineProxy::start(dir.path());

    let ok = docker_via(&proxy, &["version", "--format", "{{.Server.APIVersion}}"]);
    assert!(ok.status.success(), "{ok:?}");
    assert!(proxy.forwarded() >= 1);

    // `docker ps` twice on one client: every request is judged, not only a connection's first.
    proxy.set_rules(vec![Rule::new("GET", "/containers/json", Fault::Refuse)]);
    let refused = docker_via(&proxy, &["ps"]);
    assert!(!refused.status.success(), "{refused:?}");
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("refused for the test"), "{err}");
    assert!(proxy.faulted() >= 1);
    assert!(
        docker_via(&proxy, &["version"]).status.success(),
        "other calls still pass"
    );

    proxy.set_rules(vec![Rule::new(
        "GET",
        "/containers/json",
        Fault::Delay(Duration::from_millis(1500)),
    )]);
    let t = Instant::now();
    let slow = docker_via(&proxy, &["ps"]);
    assert!(slow.status.success(), "{slow:?}");
    assert!(
        t.elapsed() >= Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );

    proxy.clear();
    assert!(docker_via(&proxy, &["ps"]).status.success());
    assert!(
        proxy.seen().iter().any(|l| l.contains("/containers/json")),
        "{:?}",
        proxy.seen()
    );
}

#[test]
fn a_cut_ends_an_open_event_stream_and_later_calls_still_pass() {
    let dir = tempfile::tempdir().expect("temp dir");
    let proxy = EngineProxy::start(dir.path());
    let mut events = std::process::Command::new("docker")
        .arg("-H")
        .arg(proxy.url())
        .args(["events", "--filter", "label=berth.test.proxy-cut"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("docker events runs");
    let t = Instant::now();
    while !proxy.seen().iter().any(|l| l.contains("/events")) {
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", proxy.seen());
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        events.try_wait().expect("wait").is_none(),
        "the stream is open"
    );
    assert!(proxy.cut() >= 1, "the event stream was open");
    let t = Instant::now();
    while events.try_wait().expect("wait").is_none() {
        if t.elapsed() > Duration::from_secs(5) {
            let _ = events.kill();
            panic!("docker events still runs after the cut");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(docker_via(&proxy, &["version"]).status.success());
}
