//! Task role credentials on the real Engine, observed from inside the containers: with
//! `--task-role-dir`, a container of a bridge, a host and an awsvpc task reads its role's keys at
//! `http://169.254.170.2$AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` (busybox wget, as an SDK would);
//! a container of another task using the first task's id, and an unknown id, get ECS's 400; a
//! task without a role has no variable; the agent's own AWS keys are in no container's
//! environment or `docker inspect`; the audit log has a line per request and no secret; and once
//! berth exits, `lo` no longer has 169.254.170.2. Both `berth agent` and `berth run`.
//!
//! The tests bind 169.254.170.2:80, so they hold a process-wide lock and an flock on
//! /tmp/berth-credentials-endpoint.lock (other test binaries may run at once). They need root
//! (adding the address to lo), as the agent does.

mod common;

use berth_testkit::berth_run::{BerthRun, test_container};
use berth_testkit::{FamilyGuard, docker_cli, family_containers, unique_name};
use common::agent::{Agent, Launch};
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

const AGENT_SECRET: &str = "agent-s3cret-9f1d2e";
const AGENT_KEY: &str = "AKIAAGENTKEY0042";
const ROLE_SECRET: &str = "role-s3cret-4b7c1a";
const ROLE_TOKEN: &str = "role-t0ken-8e2f6d";

static IN_PROCESS: Mutex<()> = Mutex::new(());

/// Holds 169.254.170.2:80 for this test: a process-wide mutex and an flock across test binaries.
struct EndpointLock {
    _file: std::fs::File,
    _guard: std::sync::MutexGuard<'static, ()>,
}

fn endpoint_lock() -> EndpointLock {
    let guard = IN_PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open("/tmp/berth-credentials-endpoint.lock")
        .expect("lock file");
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive).expect("flock");
    let lock = EndpointLock {
        _file: file,
        _guard: guard,
    };
    assert!(
        !lo_has_endpoint(),
        "169.254.170.2 is on lo before the test: something else (a berth left running?) holds it"
    );
    lock
}

impl Drop for EndpointLock {
    /// A test that failed with berth still running (killed, not stopped) leaves the address:
    /// removed here, once berth is gone (the lock is the first value of each test, so dropped
    /// last), so the machine is left as it was.
    fn drop(&mut self) {
        if lo_has_endpoint() {
            let _ = std::process::Command::new("ip")
                .args(["-4", "addr", "del", "169.254.170.2/32", "dev", "lo"])
                .status();
        }
    }
}

fn lo_has_endpoint() -> bool {
    let out = std::process::Command::new("ip")
        .args(["-4", "addr", "show", "dev", "lo"])
        .output()
        .expect("ip runs (iproute2)");
    String::from_utf8_lossy(&out.stdout).contains("169.254.170.2")
}

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
        &["--task-role-dir", roles.to_str().expect("utf-8")],
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
        &format!("{READ_CREDENTIALS}\necho done; sleep 300"),
    ));
    let host = agent.submit(&task(&families[1], "host", true, READ_CREDENTIALS));
    let awsvpc = agent.submit(&task(&families[2], "awsvpc", true, READ_CREDENTIALS));
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
    assert_served(&log_of(&awsvpc, "--env"), "awsvpc");
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
    .args(["--keep", "--task-role-dir", roles.to_str().expect("utf-8")])
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
