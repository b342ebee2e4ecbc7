//! What an agent lets a task or a local user reach on its host, seen where the user sees it (the
//! data directory's modes, the agent's log, `berth submit`'s answer, `berth inspect`, the
//! container's own environment) with a real agent on the real Docker Engine: the data directory
//! and the state store are private; the task policy refuses what
//! it does not allow (privileged containers, host volumes on `/`; ECS_DISABLE_PRIVILEGED) at
//! submit, with the field's path; a task has at most 10 containers unless the agent says more.

mod common;

use berth_testkit::berth_run::test_container;
use berth_testkit::{FamilyGuard, family_containers, unique_name};
use common::agent::{Agent, Launch};
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

/// Submit; (exit code, stdout, stderr).
fn try_submit(agent: &Agent, def: &Value) -> (i32, String, String) {
    let file = agent.dir.path().join(format!("{}.json", unique_name("t-")));
    std::fs::write(&file, def.to_string()).expect("write");
    agent.cli(&["submit", file.to_str().expect("utf-8")])
}

fn stopped(v: &Value) -> bool {
    v["known"] == "STOPPED"
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("stat {}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn the_data_directory_and_the_store_are_private_and_open_ones_are_narrowed_with_a_warning() {
    let dir = tempfile::tempdir().expect("tmp");
    let data = dir.path().join("data");
    let launch = Launch {
        data_dir: Some(data.clone()),
        ..Launch::default()
    };
    // A fresh data directory: created 0700, its store 0600, and no warning.
    let mut agent = Agent::start_launch("1s", launch, &[], &[]);
    let store = data.join("berth.redb");
    assert_eq!(mode(&data), 0o700, "a new data directory");
    assert_eq!(mode(&store), 0o600, "a new state store");
    assert!(
        !agent.log().contains("open to other users"),
        "{}",
        agent.log()
    );
    agent.term();

    // As an older berth left them: the directory 0755, the store 0644.
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    agent.restart();
    assert_eq!(mode(&data), 0o700, "the data directory after a start");
    assert_eq!(mode(&store), 0o600, "the state store after a start");
    let log = agent.log();
    let warned = |path: &Path, old: &str| {
        log.lines().any(|l| {
            l.contains("WARN")
                && l.contains("open to other users")
                && l.contains(&path.display().to_string())
                && l.contains(old)
        })
    };
    assert!(
        warned(&data, "0755"),
        "a warning naming {} and 0755:\n{log}",
        data.display()
    );
    assert!(
        warned(&store, "0644"),
        "a warning naming {} and 0644:\n{log}",
        store.display()
    );
}

/// A container asking for the host: privileged, with the host's `/` mounted.
fn host_grabbing(family: &str) -> Value {
    let mut c = test_container("app", "test -d /host/etc && exit 42; exit 1");
    c["privileged"] = json!(true);
    c["mountPoints"] =
        json!([{"sourceVolume": "root", "containerPath": "/host", "readOnly": true}]);
    json!({"family": family, "containerDefinitions": [c],
           "volumes": [{"name": "root", "host": {"sourcePath": "/"}}]})
}

#[test]
fn a_restricted_policy_refuses_privileged_and_a_host_root_volume_with_their_paths() {
    let family = unique_name("berth-policy-");
    let _guard = FamilyGuard(family.clone());
    let agent = Agent::start_with("1s", &["--task-policy", "restricted"]);
    let (code, out, err) = try_submit(&agent, &host_grabbing(&family));
    assert_eq!(code, 65, "refused: {out}{err}");
    for (path, grant) in [
        (
            "containerDefinitions[0].privileged:",
            "--task-policy-allow privileged",
        ),
        (
            "volumes[0].host.sourcePath:",
            "--task-policy-allow docker-socket",
        ),
    ] {
        assert!(
            err.lines()
                .any(|l| l.starts_with(path) && l.contains("restricted") && l.contains(grant)),
            "{path} refused with the rule and {grant}: {err}"
        );
    }
    assert!(family_containers(&family).is_empty(), "nothing was created");

    // Granted, the same task is accepted and handed to Docker as asked (whether this machine's
    // runtime may then give a container every capability is Docker's answer, not berth's).
    let agent = Agent::start_with(
        "1s",
        &[
            "--task-policy",
            "restricted",
            "--task-policy-allow",
            "privileged,docker-socket",
        ],
    );
    let id = agent.submit(&host_grabbing(&family));
    let v = agent.wait_for(&id, "created in Docker", |v| {
        v["containers"][0]["dockerId"].is_string() || stopped(v)
    });
    assert!(v["containers"][0]["dockerId"].is_string(), "created: {v}");
    // And a task granted the host's / alone runs with it mounted.
    let mut def = host_grabbing(&family);
    def["containerDefinitions"][0]["privileged"] = json!(false);
    let id = agent.submit(&def);
    let v = agent.wait_for(&id, "stopped", stopped);
    assert_eq!(
        v["containers"][0]["exitCode"], 42,
        "the host's / mounted in the container: {v}"
    );
}

#[test]
fn ecs_disable_privileged_refuses_a_privileged_container() {
    let family = unique_name("berth-noprivileged-");
    let _guard = FamilyGuard(family.clone());
    let mut c = test_container("app", "exit 0");
    c["privileged"] = json!(true);
    let def = json!({"family": family, "containerDefinitions": [c]});
    let agent = Agent::start_env("1s", &[("ECS_DISABLE_PRIVILEGED", "true")]);
    let (code, out, err) = try_submit(&agent, &def);
    assert_eq!(code, 65, "refused: {out}{err}");
    assert!(
        err.contains("containerDefinitions[0].privileged:")
            && err.contains("ECS_DISABLE_PRIVILEGED=true"),
        "the path and the rule: {err}"
    );
    assert!(family_containers(&family).is_empty(), "nothing was created");
}

#[test]
fn a_task_of_more_containers_than_the_limit_is_refused_with_the_path() {
    let family = unique_name("berth-wide-");
    let _guard = FamilyGuard(family.clone());
    let def = |n: usize| {
        let cs: Vec<Value> = (0..n)
            .map(|i| {
                let mut c = test_container(&format!("c{i}"), "exit 0");
                c["essential"] = json!(i == 0);
                c
            })
            .collect();
        json!({"family": family, "containerDefinitions": cs})
    };
    let agent = Agent::start("1s");
    let (code, out, err) = try_submit(&agent, &def(11));
    assert_eq!(code, 65, "refused: {out}{err}");
    assert!(
        err.contains("containerDefinitions: lists 11 containers; a task may have at most 10")
            && err.contains("--max-containers-per-task"),
        "the path, the limit and how to raise it: {err}"
    );
    assert!(family_containers(&family).is_empty(), "nothing was created");
    let (code, _, err) = try_submit(&agent, &def(10));
    assert_eq!(code, 0, "10 containers are fine: {err}");

    let agent = Agent::start_with("1s", &["--max-containers-per-task", "12"]);
    let (code, _, err) = try_submit(&agent, &def(11));
    assert_eq!(code, 0, "accepted under a raised limit: {err}");
}
