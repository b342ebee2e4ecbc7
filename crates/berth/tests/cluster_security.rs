//! etcd's TLS and authentication, end to end on a real 3-member etcd served with TLS (client
//! certificates required) and authentication on, its users and roles created from what `berth
//! cluster auth-setup` prints (`Fleet::start_secure`): a controller, a node agent and the CLI,
//! each as its role's user, place and run a task; a command without credentials, or with a
//! wrong password, is refused saying why; a node's user cannot create a service (etcd refuses,
//! berth says which user and where the roles are); every process refuses a plain etcd unless
//! `--etcd-insecure`, which it then warns about; and a user given to an etcd whose authentication
//! is off is refused. Run: `scripts/test -p berth --test
//! cluster_security` (Docker, the test images, etcd, openssl).

mod common;

use common::cluster::{BERTH, Fleet, NodeOpts, path_str};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `berth ARGS` with none of the etcd variables of the caller's environment (so nothing says
/// `--etcd-insecure` but the arguments).
fn berth_bare(args: &[&str]) -> Output {
    let mut cmd = Command::new(BERTH);
    cmd.args(args);
    for var in [
        "BERTH_ETCD",
        "BERTH_ETCD_INSECURE",
        "BERTH_ETCD_CACERT",
        "BERTH_ETCD_CERT",
        "BERTH_ETCD_KEY",
        "BERTH_ETCD_USER",
        "BERTH_ETCD_PASSWORD_FILE",
    ] {
        cmd.env_remove(var);
    }
    cmd.output().expect("run berth")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn controller_node_and_cli_with_tls_and_their_roles_run_a_task_and_others_are_refused() {
    let mut fleet = Fleet::start_secure("etcd-secure", &["n1"]);
    fleet.controller("c1");
    fleet.node("n1", NodeOpts::default().lease_ttl("3s"));
    fleet.wait_until(Duration::from_secs(30), "node n1 to register", || {
        let nodes = fleet.nodes();
        match nodes.as_slice() {
            [n] if n["node"] == "n1" => Ok(()),
            _ => Err(format!("{nodes:#?}")),
        }
    });
    let def = serde_json::json!({
        "family": "secure-sleep",
        "containerDefinitions": [{
            "name": "app",
            "image": berth_testkit::test_image(),
            "memory": 64,
            "command": ["sleep", "600"]
        }]
    });
    let id = fleet.submit(&def, &[])[0].clone();
    fleet.wait_until(Duration::from_secs(60), "the task to run on n1", || {
        let task = fleet.task(&id);
        let containers = fleet.docker_running(&[("berth.node", "n1")]);
        match &task {
            Some(t) if t["lastStatus"] == "RUNNING" && containers.len() == 1 => Ok(()),
            _ => Err(format!("task: {task:#?}\ncontainers: {containers:#?}")),
        }
    });
    for (who, log) in [
        ("controller", fleet.controllers["c1"].log()),
        ("agent", fleet.agent("n1").log()),
    ] {
        assert!(
            !log.contains("--etcd-insecure"),
            "no insecure warning from the {who}: {log}"
        );
    }

    let endpoints = fleet.endpoints();
    let tls = fleet.etcd.tls().expect("TLS").clone();
    // No user: refused before anything is sent, naming what is missing and the way out.
    let out = berth_bare(&[
        "cluster",
        "ps",
        "--etcd",
        &endpoints,
        "--etcd-cacert",
        path_str(&tls.ca),
        "--etcd-cert",
        path_str(&tls.client_cert),
        "--etcd-key",
        path_str(&tls.client_key),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(
            "refusing to use etcd without TLS and authentication: no etcd user given (--etcd-user)"
        ),
        "{err}"
    );
    assert!(err.contains("--etcd-insecure"), "{err}");
    // Even when the operator accepts that: etcd itself refuses a client without a user.
    let out = berth_bare(&[
        "cluster",
        "ps",
        "--etcd",
        &endpoints,
        "--etcd-cacert",
        path_str(&tls.ca),
        "--etcd-cert",
        path_str(&tls.client_cert),
        "--etcd-key",
        path_str(&tls.client_key),
        "--etcd-insecure",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("refused") && err.contains("etcd requires authentication: give --etcd-user"),
        "{err}"
    );
    // A wrong password.
    let wrong = fleet.dir.path().join("wrong.password");
    std::fs::write(&wrong, "not-it\n").expect("write");
    // Left readable by others: warned about (with how to fix) before etcd's refusal.
    std::fs::set_permissions(&wrong, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .expect("chmod");
    let mut args: Vec<String> = ["cluster", "ps", "--etcd", &endpoints]
        .map(str::to_owned)
        .to_vec();
    args.extend(fleet.etcd_args("berth-operator"));
    let at = args
        .iter()
        .position(|a| a == "--etcd-password-file")
        .expect("password option");
    args[at + 1] = path_str(&wrong).to_owned();
    let out = berth_bare(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("etcd refused etcd user \"berth-operator\"'s name or password"),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "--etcd-password-file {}: other users can read it (mode 0644); make it private: chmod 600",
            wrong.display()
        )),
        "{err}"
    );

    // A node's user reads what it must but cannot write the operator's keys.
    let file = fleet.definition_file(&def);
    let out = fleet.cluster_as(
        "berth-node-n1",
        &[
            "service",
            "create",
            "web",
            path_str(&file),
            "--desired-count",
            "1",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("permission denied"), "{err}");
    assert!(
        err.contains("etcd user \"berth-node-n1\" is not allowed to do this: its etcd role lacks the permission"),
        "{err}"
    );
    let services = fleet.cluster_json(&["service", "ls"]);
    assert_eq!(
        services["services"].as_array().map(Vec::len),
        Some(0),
        "{services}"
    );
    // Nor another node's keys: n1's user cannot drain (or register as) anything.
    let out = fleet.cluster_as("berth-node-n1", &["drain", "n1"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("permission denied"),
        "{}",
        stderr(&out)
    );
}

/// Runs `berth ARGS` in the background, its stderr in `log`, until it exits or `limit` passes
/// (then it is killed); its exit code (None: still running at the limit) and its log.
fn run_for(args: &[String], log: &std::path::Path, limit: Duration) -> (Option<i32>, String) {
    let file = std::fs::File::create(log).expect("log");
    let mut cmd = Command::new(BERTH);
    cmd.args(args);
    for var in ["BERTH_ETCD", "BERTH_ETCD_INSECURE", "BERTH_ETCD_USER"] {
        cmd.env_remove(var);
    }
    let mut child = cmd
        .env("BERTH_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(file)
        .spawn()
        .expect("spawn berth");
    let deadline = Instant::now() + limit;
    let code = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    (code, std::fs::read_to_string(log).unwrap_or_default())
}

#[test]
fn a_plain_etcd_is_refused_without_etcd_insecure_and_warned_about_with_it() {
    let etcd = berth_testkit::etcd::EtcdCluster::start("etcd-plain", 1);
    let endpoints = etcd.endpoints();
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let socket = dir.path().join("berth.sock");
    let metadata = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        format!("127.0.0.1:{}", l.local_addr().expect("address").port())
    };
    let agent = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = [
            "agent",
            "--data-dir",
            path_str(&data),
            "--api-socket",
            path_str(&socket),
            "--introspection-addr",
            "off",
            "--metadata-addr",
            &metadata,
            "--etcd",
            &endpoints,
            "--node",
            "plain-1",
        ]
        .map(str::to_owned)
        .to_vec();
        a.extend(extra.iter().map(|e| (*e).to_owned()));
        a
    };
    let controller = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = ["controller", "--etcd", &endpoints, "--lease-ttl", "2s"]
            .map(str::to_owned)
            .to_vec();
        a.extend(extra.iter().map(|e| (*e).to_owned()));
        a
    };
    let cli = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = ["cluster", "ps", "--etcd", &endpoints]
            .map(str::to_owned)
            .to_vec();
        a.extend(extra.iter().map(|e| (*e).to_owned()));
        a
    };
    let want =
        "refusing to use etcd without TLS and authentication: etcd is reached over plain HTTP";
    for (what, args) in [
        ("agent", agent(&[])),
        ("controller", controller(&[])),
        ("cluster ps", cli(&[])),
    ] {
        let log = dir.path().join(format!("{what}.refused.log"));
        let (code, text) = run_for(&args, &log, Duration::from_secs(30));
        assert_eq!(code, Some(1), "{what} must refuse: {text}");
        assert!(text.contains(want), "{what}: {text}");
        assert!(
            text.contains("or pass --etcd-insecure (BERTH_ETCD_INSECURE=true)"),
            "{what}: {text}"
        );
    }
    let warning = "--etcd-insecure: etcd is reached over plain HTTP";
    // The CLI runs and warns.
    let log = dir.path().join("cli.log");
    let (code, text) = run_for(&cli(&["--etcd-insecure"]), &log, Duration::from_secs(30));
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains(warning), "{text}");
    // The controller and the agent start, warn, and run (killed at the limit).
    for (what, args) in [
        ("controller", controller(&["--etcd-insecure"])),
        ("agent", agent(&["--etcd-insecure=true"])),
    ] {
        let log = dir.path().join(format!("{what}.log"));
        let (code, text) = run_for(&args, &log, Duration::from_secs(4));
        assert_eq!(code, None, "{what} keeps running: {text}");
        assert!(text.contains(warning), "{what}: {text}");
        assert!(
            text.contains("no etcd user given (--etcd-user): no authentication"),
            "{what}: {text}"
        );
    }

    // TLS and a user, but etcd's authentication is off: refused, not taken for secure.
    let tls_etcd = berth_testkit::etcd::EtcdCluster::start_tls("etcd-noauth", 1);
    let tls = tls_etcd.tls().expect("TLS");
    let password = dir.path().join("pw");
    std::fs::write(&password, "whatever\n").expect("write");
    let out = berth_bare(&[
        "cluster",
        "ps",
        "--etcd",
        &tls_etcd.endpoints(),
        "--etcd-cacert",
        path_str(&tls.ca),
        "--etcd-cert",
        path_str(&tls.client_cert),
        "--etcd-key",
        path_str(&tls.client_key),
        "--etcd-user",
        "berth-operator",
        "--etcd-password-file",
        path_str(&password),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(
            "etcd has authentication turned off: anyone who reaches it controls every node"
        ),
        "{err}"
    );
}
