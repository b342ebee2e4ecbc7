//! Task role credentials on the real Engine, observed from inside the containers: with
//! `--task-role-dir`, a container of a bridge, a host and an awsvpc task reads its role's keys at
//! `http://169.254.170.2$AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` (busybox wget, as an SDK would);
//! a container of another task using the first task's id, and an unknown id, get ECS's 400; a
//! task without a role has no variable; the agent's own AWS keys are in no container's
//! environment or `docker inspect`; the audit log has a line per request and no secret; and once
//! berth exits, `lo` no longer has 169.254.170.2. Both `berth agent` and `berth run`. Bridge and
//! awsvpc containers also read their task at `/v2/metadata` (task metadata v2, by address), and
//! botocore (PyPI) in a container finds the role through its container provider
//! (`container-role`), not the agent's keys.
//!
//! The tests bind 169.254.170.2:80, so they hold a process-wide lock and an flock on
//! /tmp/berth-credentials-endpoint.lock (other test binaries may run at once). They need root
//! (adding the address to lo), as the agent does.

mod common;

use berth_testkit::berth_run::{BerthRun, test_container};
use berth_testkit::{FamilyGuard, docker_cli, family_containers, unique_name};
use common::agent::{Agent, Launch};
use common::credentials::{endpoint_lock, lo_has_endpoint};
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

const AGENT_SECRET: &str = "agent-s3cret-9f1d2e";
const AGENT_KEY: &str = "AKIAAGENTKEY0042";
const ROLE_SECRET: &str = "role-s3cret-4b7c1a";
const ROLE_TOKEN: &str = "role-t0ken-8e2f6d";

/// DIR/app.json: the role `app`'s keys.
fn role_dir(root: &Path) -> PathBuf {
    let dir = root.join("roles");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(
        dir.join("app.json"),
        format!(
            r#"{{"AccessKeyId": "AKIDROLEAPP", "SecretAccessKey": "{ROLE_SECRET}", "Token": "{ROLE_TOKEN}", "Expiration": "2030-01-01T00:00:00Z"}}"#
        ),
    )
    .expect("write");
    std::fs::set_permissions(dir.join("app.json"), std::fs::Permissions::from_mode(0o600))
        .expect("chmod");
    dir
}

/// Prints the URI, the credentials as wget reads them, and the environment.
const READ_CREDENTIALS: &str = r#"echo "uri=$AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"
for i in 1 2 3 4 5; do out=$(wget -qO- "http://169.254.170.2$AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") && break; sleep 0.5; done
echo "creds=$out"; echo "--env"; env"#;

/// Prints the task metadata v2 answer (found by the caller's address).
const READ_V2: &str = r#"echo "v2=$(wget -qO- http://169.254.170.2/v2/metadata)""#;

/// The v2 answer names `task`.
fn assert_v2(log: &str, task: &str, what: &str) {
    let line = log
        .lines()
        .find_map(|l| l.strip_prefix("v2="))
        .unwrap_or_else(|| panic!("{what}: no v2 line: {log}"));
    let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{what}: {e}: {line}"));
    assert!(
        v["TaskARN"].as_str().is_some_and(|a| a.ends_with(task)),
        "{what}: {v}"
    );
    assert_eq!(v["Containers"][0]["Name"], "app", "{what}: {v}");
}

/// A raw GET of `path` through busybox nc: the status line and body (wget does not print a 4xx
/// body).
fn raw_get(path_expr: &str) -> String {
    // stdin stays open a while: busybox nc quits at its end, before a slower answer arrives.
    format!(
        r#"(printf "GET {path_expr} HTTP/1.0\r\nHost: 169.254.170.2\r\n\r\n"; sleep 3) | nc 169.254.170.2 80"#
    )
}

fn task(family: &str, mode: &str, role: bool, script: &str) -> Value {
    let mut def = json!({
        "family": family,
        "networkMode": mode,
        "containerDefinitions": [test_container("app", script)],
    });
    if role {
        def["taskRoleArn"] = json!("app");
    }
    def
}

fn assert_served(log: &str, what: &str) {
    let line = log
        .lines()
        .find_map(|l| l.strip_prefix("creds="))
        .unwrap_or_else(|| panic!("{what}: no creds line: {log}"));
    let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{what}: {e}: {line}"));
    assert_eq!(
        v,
        json!({
            "RoleArn": "arn:aws:iam::000000000000:role/app",
            "AccessKeyId": "AKIDROLEAPP",
            "SecretAccessKey": ROLE_SECRET,
            "Token": ROLE_TOKEN,
            "Expiration": "2030-01-01T00:00:00Z"
        }),
        "{what}"
    );
}

/// Nothing of the agent's own keys in any container of `family`: its environment as Docker
/// keeps it (`docker inspect`).
fn assert_no_agent_keys(family: &str) {
    for id in family_containers(family) {
        let inspect = docker_cli(&["inspect", &id]);
        assert!(
            !inspect.contains(AGENT_SECRET) && !inspect.contains(AGENT_KEY),
            "{family}: the agent's keys are in docker inspect of {id}"
        );
    }
}

fn assert_audit(path: &Path, want_200: usize) -> String {
    let text = std::fs::read_to_string(path).expect("the audit log exists");
    let mode = std::fs::metadata(path).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "audit log mode");
    for secret in [ROLE_SECRET, ROLE_TOKEN, "AKIDROLEAPP", AGENT_SECRET] {
        assert!(
            !text.contains(secret),
            "the audit log holds {secret}: {text}"
        );
    }
    let ok = text
        .lines()
        .filter(|l| l.split(' ').nth(1) == Some("200"))
        .count();
    assert!(
        ok >= want_200,
        "{ok} answered lines, want {want_200}: {text}"
    );
    text
}

#[test]
fn the_agent_serves_each_tasks_role_to_its_own_containers_only() {
    let _lock = endpoint_lock();
    let dir = tempfile::tempdir().expect("tmp");
    let roles = role_dir(dir.path());
    let families: Vec<String> = ["bridge", "host", "awsvpc", "other"]
        .iter()
        .map(|m| unique_name(&format!("berth-roles-{m}-")))
        .collect();
    let _guards: Vec<FamilyGuard> = families.iter().cloned().map(FamilyGuard).collect();
    let mut agent = Agent::start_launch(
        "1h",
        Launch::default(),
        // The agent's keys are in its environment, but it is told to use the local sources.
        &[
            "--aws",
            "off",
            "--task-role-dir",
            roles.to_str().expect("utf-8"),
        ],
        &[
            ("AWS_SECRET_ACCESS_KEY", AGENT_SECRET),
            ("AWS_ACCESS_KEY_ID", AGENT_KEY),
        ],
    );
    assert!(
        lo_has_endpoint(),
        "the agent put 169.254.170.2 on lo: {}",
        agent.log()
    );

    // The bridge task stays up, so the other task can try its id.
    let bridge = agent.submit(&task(
        &families[0],
        "bridge",
        true,
        &format!("{READ_V2}\n{READ_CREDENTIALS}\necho done; sleep 300"),
    ));
    let host = agent.submit(&task(&families[1], "host", true, READ_CREDENTIALS));
    let awsvpc = agent.submit(&task(
        &families[2],
        "awsvpc",
        true,
        &format!("{READ_V2}\n{READ_CREDENTIALS}"),
    ));
    let log_of = |id: &str, until: &str| -> String {
        let t = std::time::Instant::now();
        loop {
            let log = agent.logs(id, "app");
            if log.contains(until) {
                return log;
            }
            assert!(
                t.elapsed() < Duration::from_secs(90),
                "task {id} never printed {until:?}: {log}\n{}",
                agent.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let bridge_log = log_of(&bridge, "done");
    assert_served(&bridge_log, "bridge");
    assert_served(&log_of(&host, "--env"), "host");
    let awsvpc_log = log_of(&awsvpc, "--env");
    assert_served(&awsvpc_log, "awsvpc");
    // Task metadata v2, found by the caller's address, in both modes that have one.
    assert_v2(&bridge_log, &bridge, "bridge");
    assert_v2(&awsvpc_log, &awsvpc, "awsvpc");
    let uri = bridge_log
        .lines()
        .find_map(|l| l.strip_prefix("uri="))
        .expect("uri line")
        .to_string();
    assert!(
        uri.starts_with("/v2/credentials/") && uri.len() > 20,
        "{uri}"
    );

    // Another task's container with the bridge task's id, and with an unknown id: ECS's 400,
    // the same answer; without a role it has no variable.
    let mut other = task(
        &families[3],
        "bridge",
        false,
        &format!(
            "{}; echo; echo ---; {}; echo; echo --env; env; echo end",
            raw_get("$OTHER_URI"),
            raw_get("/v2/credentials/00000000000000000000000000000000")
        ),
    );
    other["containerDefinitions"][0]["environment"] = json!([{"name": "OTHER_URI", "value": uri}]);
    let other = agent.submit(&other);
    let other_log = log_of(&other, "end");
    let (answers, env) = other_log.split_once("--env").expect("env part");
    let not_found =
        r#"{"code":"InvalidIdInRequest","message":"CredentialsV2Request: Credentials not found"}"#;
    let parts: Vec<&str> = answers.split("---").collect();
    assert_eq!(parts.len(), 2, "{other_log}");
    for p in parts {
        assert!(
            p.contains(" 400 Bad Request") && p.contains(not_found),
            "{other_log}"
        );
    }
    assert!(
        !env.contains("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"),
        "{env}"
    );
    assert!(!other_log.contains(ROLE_SECRET), "{other_log}");

    // The agent's keys: in no container's environment, inspect or output.
    for (family, log) in families.iter().zip([&bridge_log, &other_log]) {
        assert!(
            !log.contains(AGENT_SECRET) && !log.contains(AGENT_KEY),
            "{log}"
        );
        assert_no_agent_keys(family);
    }
    for f in &families[1..3] {
        assert_no_agent_keys(f);
    }

    let audit = assert_audit(&agent.data().join("credentials-audit.log"), 3);
    let refused = audit
        .lines()
        .find(|l| l.contains("refused:"))
        .unwrap_or_else(|| panic!("no refusal recorded: {audit}"));
    assert!(
        refused.contains(" 400 ") && refused.contains(&bridge),
        "{refused}"
    );

    agent.cli(&["stop", &bridge]);
    let (code, _) = agent.term();
    assert_eq!(code, Some(0), "{}", agent.log());
    assert!(
        !lo_has_endpoint(),
        "169.254.170.2 is still on lo after the agent exited"
    );
}

#[test]
fn berth_run_serves_its_tasks_role_and_removes_the_address_at_exit() {
    let _lock = endpoint_lock();
    let dir = tempfile::tempdir().expect("tmp");
    let roles = role_dir(dir.path());
    let family = unique_name("berth-roles-run-");
    let _guard = FamilyGuard(family.clone());
    let def = task(&family, "bridge", true, READ_CREDENTIALS);
    let out = BerthRun::new(
        env!("CARGO_BIN_EXE_berth"),
        dir.path().join("task.json"),
        &def,
    )
    .prefer_cached()
    .data_dir(dir.path().join("data"))
    .env("AWS_SECRET_ACCESS_KEY", AGENT_SECRET)
    .args([
        "--keep",
        "--aws",
        "off",
        "--task-role-dir",
        roles.to_str().expect("utf-8"),
    ])
    .output();
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(
        !lo_has_endpoint(),
        "169.254.170.2 is still on lo after berth run exited"
    );
    let ids = family_containers(&family);
    assert_eq!(ids.len(), 1);
    let log = docker_cli(&["logs", &ids[0]]);
    assert_served(&log, "berth run, bridge");
    assert!(!log.contains(AGENT_SECRET), "{log}");
    assert_no_agent_keys(&family);
    assert_audit(&dir.path().join("data/credentials-audit.log"), 1);
}

#[test]
fn without_a_role_source_a_roles_task_gets_no_variable_and_a_warning() {
    let _lock = endpoint_lock();
    let dir = tempfile::tempdir().expect("tmp");
    let family = unique_name("berth-roles-none-");
    let _guard = FamilyGuard(family.clone());
    let def = task(&family, "bridge", true, "env; exit 0");
    let out = BerthRun::new(
        env!("CARGO_BIN_EXE_berth"),
        dir.path().join("task.json"),
        &def,
    )
    .prefer_cached()
    .data_dir(dir.path().join("data"))
    .args(["--keep"])
    .output();
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("taskRoleArn app") && out.stderr.contains("--task-role-dir"),
        "{}",
        out.stderr
    );
    let ids = family_containers(&family);
    let log = docker_cli(&["logs", &ids[0]]);
    assert!(
        !log.contains("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"),
        "{log}"
    );
    assert!(!lo_has_endpoint());
}

/// botocore's own credential chain in the container: what it found and how.
const BOTOCORE_PROBE: &str = r#"
import json, traceback
try:
    import botocore.session
    creds = botocore.session.get_session().get_credentials()
    frozen = creds.get_frozen_credentials()
    out = {"method": creds.method, "access_key": frozen.access_key,
           "secret_key": frozen.secret_key, "token": frozen.token}
    with open("/out/probe.json", "w") as f:
        json.dump(out, f)
except Exception:
    with open("/out/error.txt", "w") as f:
        f.write(traceback.format_exc())
    raise
"#;

const BOTOCORE: &str = "botocore==1.44.8";

/// botocore (PyPI) in a bridge container of a `berth run` task finds the role's credentials
/// through its container provider (`container-role`), not the agent's keys; it runs on the
/// host's Debian Python through read-only bind mounts, as metadata_clients does.
#[test]
fn botocore_in_a_container_gets_the_task_role_from_the_endpoint() {
    let dir = tempfile::tempdir().expect("tmp");
    let root = dir.path().canonicalize().expect("canonical");
    let venv = root.join("venv");
    let ok = std::process::Command::new("/usr/bin/python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .expect("/usr/bin/python3 runs (scripts/test installs python3-venv)");
    assert!(ok.success(), "/usr/bin/python3 -m venv failed");
    let pip = std::process::Command::new(venv.join("bin/pip"))
        .args(["install", "-q", "--disable-pip-version-check", BOTOCORE])
        .output()
        .expect("pip runs");
    assert!(
        pip.status.success(),
        "pip install {BOTOCORE} failed:\n{}",
        String::from_utf8_lossy(&pip.stderr)
    );
    let out = root.join("out");
    std::fs::create_dir(&out).expect("out");
    std::fs::write(out.join("probe.py"), BOTOCORE_PROBE).expect("probe");
    let roles = role_dir(&root);
    let venv_path = venv.display().to_string();
    let volume = |name: &str, host: &str, at: &str, read_only: bool| {
        (
            json!({"name": name, "host": {"sourcePath": host}}),
            json!({"sourceVolume": name, "containerPath": at, "readOnly": read_only}),
        )
    };
    let mounts = [
        volume("usr", "/usr", "/usr", true),
        volume("lib", "/usr/lib", "/lib", true),
        volume("lib64", "/usr/lib64", "/lib64", true),
        volume("venv", &venv_path, &venv_path, true),
        volume("out", &out.display().to_string(), "/out", false),
    ];
    let family = unique_name("berth-roles-botocore-");
    let _guard = FamilyGuard(family.clone());
    let mut container = test_container("app", "unused");
    container["command"] = json!([format!("{venv_path}/bin/python"), "/out/probe.py"]);
    container["mountPoints"] = json!(mounts.iter().map(|m| m.1.clone()).collect::<Vec<_>>());
    let def = json!({
        "family": family,
        "networkMode": "bridge",
        "taskRoleArn": "arn:aws:iam::123456789012:role/app",
        "volumes": mounts.iter().map(|m| m.0.clone()).collect::<Vec<_>>(),
        "containerDefinitions": [container],
    });
    let _lock = endpoint_lock();
    let run = BerthRun::new(env!("CARGO_BIN_EXE_berth"), root.join("task.json"), &def)
        .prefer_cached()
        .data_dir(root.join("data"))
        .env("AWS_SECRET_ACCESS_KEY", AGENT_SECRET)
        .env("AWS_ACCESS_KEY_ID", AGENT_KEY)
        .args([
            "--aws",
            "off",
            "--task-role-dir",
            roles.to_str().expect("utf-8"),
        ])
        .output();
    let error = std::fs::read_to_string(out.join("error.txt")).unwrap_or_default();
    assert_eq!(
        run.code,
        Some(0),
        "the probe failed:\n{error}\n{}\n{}",
        run.stdout,
        run.stderr
    );
    let probe: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("probe.json")).expect("probe.json"))
            .expect("JSON");
    assert_eq!(
        probe,
        json!({"method": "container-role", "access_key": "AKIDROLEAPP", "secret_key": ROLE_SECRET, "token": ROLE_TOKEN})
    );
    let audit = assert_audit(&root.join("data/credentials-audit.log"), 1);
    // botocore fetches through urllib3, under its user agent.
    assert!(audit.contains("\"python-urllib3/"), "{audit}");
}

/// Port 80 of the address held by another process: berth refuses to start, naming it, creates
/// nothing, and leaves an address it did not add (no `lo:berth` label) where it was.
#[test]
fn a_taken_port_is_refused_naming_its_holder() {
    let _lock = endpoint_lock();
    let dir = tempfile::tempdir().expect("tmp");
    let roles = role_dir(dir.path());
    let added = std::process::Command::new("ip")
        .args(["-4", "addr", "add", "169.254.170.2/32", "dev", "lo"])
        .status()
        .expect("ip runs");
    assert!(added.success(), "ip addr add (needs root)");
    let holder = std::net::TcpListener::bind("169.254.170.2:80").expect("bind 169.254.170.2:80");
    let family = unique_name("berth-roles-taken-");
    let _guard = FamilyGuard(family.clone());
    let def = task(&family, "bridge", true, "exit 0");
    let out = BerthRun::new(
        env!("CARGO_BIN_EXE_berth"),
        dir.path().join("task.json"),
        &def,
    )
    .prefer_cached()
    .data_dir(dir.path().join("data"))
    .args(["--task-role-dir", roles.to_str().expect("utf-8")])
    .output();
    assert_ne!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("169.254.170.2:80")
            && out.stderr.contains(&format!("pid {}", std::process::id()))
            && out.stderr.contains("--credentials-endpoint off"),
        "{}",
        out.stderr
    );
    assert!(
        family_containers(&family).is_empty(),
        "a container was created"
    );
    assert!(
        lo_has_endpoint(),
        "berth removed an address it had not added"
    );
    drop(holder);
    // The lock's drop removes the address.
}

/// An agent killed with SIGKILL leaves the address on lo; the next agent reuses it (its
/// label), serves the running task's saved id again, and removes the address at its exit.
#[test]
fn a_restarted_agent_serves_the_saved_ids_on_the_address_a_killed_one_left() {
    let _lock = endpoint_lock();
    let dir = tempfile::tempdir().expect("tmp");
    let roles = role_dir(dir.path());
    let family = unique_name("berth-roles-restart-");
    let _guard = FamilyGuard(family.clone());
    let launch = Launch {
        args: vec![
            "--task-role-dir".into(),
            roles.to_str().expect("utf-8").into(),
        ],
        ..Launch::default()
    };
    let mut agent = Agent::start_launch("1h", launch, &[], &[]);
    let script = r#"i=0; while true; do i=$((i+1)); if out=$(wget -qO- "http://169.254.170.2$AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"); then echo "ok $i $out"; else echo "fail $i"; fi; sleep 0.3; done"#;
    let id = agent.submit(&task(&family, "bridge", true, script));
    // Read from Docker: the CLI cannot ask a dead agent.
    let container_log = || {
        family_containers(&family)
            .first()
            .map(|c| docker_cli(&["logs", c]))
            .unwrap_or_default()
    };
    let last_ok = || -> usize {
        container_log()
            .lines()
            .filter_map(|l| l.strip_prefix("ok "))
            .filter(|l| l.contains("AKIDROLEAPP"))
            .filter_map(|l| l.split(' ').next()?.parse().ok())
            .max()
            .unwrap_or(0)
    };
    let wait_ok_after = |agent: &Agent, n: usize, what: &str| {
        let t = std::time::Instant::now();
        while last_ok() <= n {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "{what}: no answer after request {n}: {}\n{}",
                container_log(),
                agent.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    wait_ok_after(&agent, 0, "first agent");
    agent.kill9();
    assert!(lo_has_endpoint(), "the killed agent's address is gone");
    // With no agent, requests fail; every answer from now on is the restarted agent's.
    std::thread::sleep(Duration::from_secs(1));
    let log = container_log();
    let failed = log
        .lines()
        .filter_map(|l| l.strip_prefix("fail "))
        .filter_map(|n| n.trim().parse::<usize>().ok())
        .max()
        .unwrap_or_else(|| panic!("no request failed while no agent ran: {log}"));
    agent.restart();
    wait_ok_after(&agent, failed, "restarted agent");
    agent.cli(&["stop", &id]);
    let (code, _) = agent.term();
    assert_eq!(code, Some(0), "{}", agent.log());
    assert!(
        !lo_has_endpoint(),
        "169.254.170.2 is still on lo after the restarted agent exited"
    );
}
