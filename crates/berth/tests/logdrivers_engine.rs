//! Log drivers on the real Engine through `berth run`: a driver this host lacks (`awslogs`) is
//! replaced by the fallback, the task runs and Docker holds the fallback; a driver declared
//! available reaches Docker with its options (`HostConfig.LogConfig`) and its destination gets
//! the container's output.
//!
//! Run only through `scripts/test -p berth --test logdrivers_engine`.

use berth_testkit::berth_run::{BerthRun, test_container};
use berth_testkit::{FamilyGuard, docker_cli, family_containers, unique_name};
use serde_json::{Value, json};
use std::time::Duration;

/// Docker's `HostConfig.LogConfig` of the family's one container.
fn log_config(family: &str) -> Value {
    let ids = family_containers(family);
    assert_eq!(ids.len(), 1, "one container of {family}: {ids:?}");
    let out = docker_cli(&["inspect", "-f", "{{json .HostConfig.LogConfig}}", &ids[0]]);
    serde_json::from_str(out.trim()).expect("LogConfig JSON")
}

/// `berth run --keep` of `def` with `args`; the exit code and standard error.
fn run_kept(def: &Value, args: &[&str]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = BerthRun::new(env!("CARGO_BIN_EXE_berth"), dir.path().join("t.json"), def)
        .prefer_cached()
        .data_dir(dir.path())
        .arg("--keep")
        .args(args)
        .env_remove("ECS_AVAILABLE_LOGGING_DRIVERS")
        .env_remove("BERTH_AVAILABLE_LOG_DRIVERS")
        .env_remove("BERTH_LOG_DRIVER_FALLBACK")
        .output();
    (out.code, out.stderr)
}

#[test]
fn an_awslogs_task_runs_with_the_fallback_driver() {
    let family = unique_name("logs-aws-");
    let _g = FamilyGuard(family.clone());
    // The awslogs shape of the ECS developer guide's "Using the awslogs log driver" example and
    // of aws-samples/aws-containers-task-definitions: group, region, stream prefix.
    let mut c = test_container("web", "echo hello-from-awslogs");
    c["logConfiguration"] = json!({
        "logDriver": "awslogs",
        "options": {
            "awslogs-group": "/ecs/berth-test",
            "awslogs-region": "us-east-1",
            "awslogs-stream-prefix": "ecs"
        }
    });
    let def = json!({"family": family, "containerDefinitions": [c]});
    let (code, stderr) = run_kept(&def, &["--log-driver-fallback", "local"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("warning: containerDefinitions[0].logConfiguration.logDriver: log driver \"awslogs\" is not available on this host (available: json-file, local, none); the container logs to \"local\" instead without its options (awslogs-group, awslogs-region, awslogs-stream-prefix)"),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("is not available on this host").count(),
        1,
        "one warning: {stderr}"
    );
    let log = log_config(&family);
    assert_eq!(log["Type"], "local", "{log}");
    assert!(
        log["Config"]
            .as_object()
            .is_none_or(|c| !c.contains_key("awslogs-group")),
        "{log}"
    );
    let id = &family_containers(&family)[0];
    assert_eq!(docker_cli(&["logs", id]), "hello-from-awslogs\n");
}

#[test]
fn an_available_drivers_options_reach_docker_and_its_destination() {
    let family = unique_name("logs-syslog-");
    let _g = FamilyGuard(family.clone());
    // A syslog "server" of the test's own on loopback: dockerd (on the host's network) sends to it.
    let server = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind udp");
    server
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let addr = format!("udp://{}", server.local_addr().expect("addr"));
    let tag = format!("berth-{}", &family[family.len() - 8..]);
    let mut c = test_container("web", "echo hello-over-syslog");
    c["logConfiguration"] = json!({
        "logDriver": "syslog",
        "options": {"syslog-address": addr, "tag": tag}
    });
    let def = json!({"family": family, "containerDefinitions": [c]});
    let (code, stderr) = run_kept(
        &def,
        &["--available-log-drivers", r#"["json-file","syslog"]"#],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("is not available"), "{stderr}");
    let log = log_config(&family);
    assert_eq!(log["Type"], "syslog", "{log}");
    assert_eq!(log["Config"]["syslog-address"], addr.as_str(), "{log}");
    assert_eq!(log["Config"]["tag"], tag.as_str(), "{log}");
    let mut buf = [0u8; 2048];
    let n = server.recv(&mut buf).expect("a syslog message");
    let msg = String::from_utf8_lossy(&buf[..n]);
    assert!(
        msg.contains(&tag) && msg.contains("hello-over-syslog"),
        "{msg}"
    );
}

#[test]
fn a_declared_driver_the_engine_lacks_is_warned_about_and_fails_at_create_with_dockers_words() {
    let family = unique_name("logs-nosuch-");
    let _g = FamilyGuard(family.clone());
    let mut c = test_container("web", "echo never");
    c["logConfiguration"] = json!({"logDriver": "berth-no-such-driver"});
    let def = json!({"family": family, "containerDefinitions": [c]});
    let dir = tempfile::tempdir().expect("temp dir");
    let out = BerthRun::new(env!("CARGO_BIN_EXE_berth"), dir.path().join("t.json"), &def)
        .prefer_cached()
        .data_dir(dir.path())
        .args(["--available-log-drivers", "json-file,berth-no-such-driver"])
        .env_remove("ECS_AVAILABLE_LOGGING_DRIVERS")
        .env_remove("BERTH_AVAILABLE_LOG_DRIVERS")
        .env_remove("BERTH_LOG_DRIVER_FALLBACK")
        .output();
    assert!(
        out.stderr.contains("log driver \"berth-no-such-driver\" is declared available (--available-log-drivers) but this Docker Engine does not have it (it has: "),
        "{}",
        out.stderr
    );
    assert_eq!(out.code, Some(125), "{}", out.stderr);
    let summary = out.summary().expect("a summary");
    let reason = summary["containers"][0]["reason"]
        .as_str()
        .unwrap_or_default();
    assert!(
        reason.starts_with("CannotCreateContainerError: ")
            && reason.contains("error looking up logging plugin berth-no-such-driver"),
        "{summary}"
    );
}
