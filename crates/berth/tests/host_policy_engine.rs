//! What an agent lets a task or a local user reach on its host, seen where the user sees it (the
//! data directory's modes, the agent's log, `berth submit`'s answer, `berth inspect`, the
//! container's own environment) with a real agent on the real Docker Engine: the data directory
//! and the state store are private; environment files are read only where the operator allows,
//! never from /proc, and no value of one reaches a reason or a log; the task policy refuses what
//! it does not allow (privileged containers, host volumes on `/`; ECS_DISABLE_PRIVILEGED) at
//! submit, with the field's path, and a cluster node is restricted by default (on a real
//! 3-member etcd); a task has at most 10 containers unless the agent says more.

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

/// The exit code of the task's first container once it has stopped.
fn exit_code(agent: &Agent, id: &str) -> Value {
    let v = agent.wait_for(id, "stopped", stopped);
    v["containers"][0]["exitCode"].clone()
}

/// Every byte berth keeps or shows about its tasks: the store, the agent's log, `berth ps` and
/// `berth inspect` of every task.
fn everything_berth_shows(agent: &Agent) -> Vec<(String, Vec<u8>)> {
    let mut out = vec![
        (
            "the store".to_string(),
            std::fs::read(agent.data().join("berth.redb")).unwrap_or_default(),
        ),
        ("the agent's log".to_string(), agent.log().into_bytes()),
    ];
    let (_, ps, _) = agent.cli(&["ps", "-a", "--output", "json"]);
    let tasks: Vec<Value> = serde_json::from_str(&ps).unwrap_or_default();
    for t in tasks {
        let id = t["task"].as_str().unwrap_or_default().to_string();
        let (_, inspect, _) = agent.cli(&["inspect", "--output", "json", &id]);
        out.push((format!("berth inspect {id}"), inspect.into_bytes()));
    }
    out.push(("berth ps".to_string(), ps.into_bytes()));
    out
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

/// A value only the agent's own environment holds: what /proc/self/environ would hand a task.
const AGENT_SECRET: &str = "agent-only-v4lue-5c2e91";

#[test]
fn an_environment_file_under_proc_is_refused_at_submit_and_its_values_go_nowhere() {
    let family = unique_name("berth-envproc-");
    let _guard = FamilyGuard(family.clone());
    let dir = tempfile::tempdir().expect("tmp");
    // A symlink planted where files are allowed, leading to the agent's environment.
    let allowed = dir.path().join("env");
    std::fs::create_dir(&allowed).expect("mkdir");
    std::os::unix::fs::symlink("/proc/self/environ", allowed.join("planted.env")).expect("symlink");
    let agent = Agent::start_launch(
        "1s",
        Launch::default(),
        &[
            "--environment-files-allow",
            allowed.to_str().expect("utf-8"),
        ],
        &[("BERTH_PROBE_SECRET", AGENT_SECRET)],
    );
    for (value, rule) in [
        (
            "/proc/self/environ".to_string(),
            "under /proc, which environment files are never read from",
        ),
        (
            allowed.join("planted.env").display().to_string(),
            "under /proc, which environment files are never read from",
        ),
        (
            "/etc/passwd".to_string(),
            "start the agent with --environment-files-allow DIR",
        ),
    ] {
        let mut c = test_container("app", "env; exit 0");
        c["environmentFiles"] = json!([{"value": value, "type": "s3"}]);
        let def = json!({"family": family, "containerDefinitions": [c]});
        let (code, out, err) = try_submit(&agent, &def);
        assert_eq!(code, 65, "{value}: refused as invalid: {out}{err}");
        assert!(
            err.contains("containerDefinitions[0].environmentFiles[0].value: refused:")
                && err.contains(rule),
            "{value}: the path, the rule and how to allow it: {err}"
        );
        assert!(
            !err.contains(AGENT_SECRET),
            "{value}: the answer holds the agent's value: {err}"
        );
    }
    assert!(
        family_containers(&family).is_empty(),
        "no container was created"
    );
    for (what, bytes) in everything_berth_shows(&agent) {
        assert!(
            !bytes
                .windows(AGENT_SECRET.len())
                .any(|w| w == AGENT_SECRET.as_bytes()),
            "{what} holds the agent's environment value"
        );
    }
}

#[test]
fn an_environment_file_under_the_allowed_directory_reaches_the_container() {
    let family = unique_name("berth-envok-");
    let _guard = FamilyGuard(family.clone());
    let dir = tempfile::tempdir().expect("tmp");
    let allowed = dir.path().join("env");
    std::fs::create_dir(&allowed).expect("mkdir");
    std::fs::write(allowed.join("app.env"), "FROM_FILE=from-the-file\n").expect("write");
    // A line with a NUL byte (as a copy of /proc/PID/environ has) is refused by its number.
    std::fs::write(allowed.join("nul.env"), "A=1\nB=x\0C=y\n").expect("write");
    let agent = Agent::start_launch(
        "1s",
        Launch::default(),
        &[
            "--environment-files-allow",
            allowed.to_str().expect("utf-8"),
        ],
        &[],
    );
    let mut c = test_container(
        "app",
        r#"[ "$FROM_FILE" = from-the-file ] && exit 42; env; exit 1"#,
    );
    c["environmentFiles"] =
        json!([{"value": allowed.join("app.env").display().to_string(), "type": "s3"}]);
    let id = agent.submit(&json!({"family": family, "containerDefinitions": [c]}));
    assert_eq!(
        exit_code(&agent, &id),
        42,
        "the file's variable in the container"
    );

    let mut c = test_container("app", "exit 0");
    c["environmentFiles"] =
        json!([{"value": allowed.join("nul.env").display().to_string(), "type": "s3"}]);
    let id = agent.submit(&json!({"family": family, "containerDefinitions": [c]}));
    let v = agent.wait_for(&id, "stopped", stopped);
    let reason = v["stoppedReason"].as_str().unwrap_or_default().to_string();
    assert!(
        reason.contains("line 2 of") && reason.contains("NUL byte") && !reason.contains("C=y"),
        "the line named, not shown: {v}"
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

#[cfg(feature = "cluster")]
#[test]
fn a_cluster_node_is_restricted_by_default_and_stores_a_privileged_assignment_stopped() {
    use common::cluster::{Fleet, NodeOpts};
    use std::time::Duration;
    let mut fleet = Fleet::start("policy-node");
    fleet.controller("c1");
    fleet.node("n1", NodeOpts::default());
    fleet.wait_until(Duration::from_secs(30), "node n1 to register", || {
        let nodes = fleet.nodes();
        if nodes.len() == 1 {
            Ok(())
        } else {
            Err(format!("{nodes:#?}"))
        }
    });
    let mut c = test_container("app", "sleep 600");
    c["memory"] = json!(64);
    c["privileged"] = json!(true);
    let family = unique_name("berth-policy-node-");
    let ids = fleet.submit(&json!({"family": family, "containerDefinitions": [c]}), &[]);
    let id = ids.first().expect("a task id").clone();
    let agent = fleet.agent("n1");
    let v = fleet.wait_until(
        Duration::from_secs(60),
        "the node to store the task stopped",
        || {
            let (_, out, _) = agent.cli(&["inspect", "--output", "json", &id]);
            match serde_json::from_str::<Value>(&out) {
                Ok(v) if stopped(&v) => Ok(v),
                other => Err(format!("{other:?}")),
            }
        },
    );
    let reason = v["stoppedReason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("refused by this node's task policy")
            && reason.contains("containerDefinitions[0].privileged")
            && reason.contains("--task-policy-allow privileged"),
        "the refusal as the reason: {v}"
    );
    assert!(
        v["containers"][0]["dockerId"].is_null(),
        "no container was created: {v}"
    );
    assert!(
        fleet.docker_running(&[("berth.node", "n1")]).is_empty(),
        "nothing runs"
    );
}
