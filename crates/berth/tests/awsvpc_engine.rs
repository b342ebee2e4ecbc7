//! `awsvpc` and the task-shared namespaces end to end, against the real Docker Engine, observed from
//! inside the containers (each exits 42 when what it checks holds, as the ECS agent's functional
//! tests do) and from the host:
//! - the containers of an awsvpc task reach each other on `localhost`, share the task's hostname
//!   (resolving to the task's address), read their metadata (mode `awsvpc`, the task's IPv4
//!   address, no pause container listed), and the task's port is published on the host;
//! - two awsvpc tasks side by side do not see each other's `localhost`, and a second task that
//!   wants a host port the first holds stops at once with Docker's reason;
//! - `pidMode: task` puts every container in one PID namespace whose PID 1 is berth's pause
//!   program; `ipcMode: task` shares `/dev/shm` and System V IPC;
//! - nothing (no container) is left once a run ends.
//!
//! Network traffic stays on loopback and the default Docker bridge.

use berth_testkit::berth_run::{BerthRun, RunOutput, test_container};
use berth_testkit::{FamilyGuard, family_containers, unique_name};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// Serves `body` on `port` with busybox httpd and ends promptly on SIGTERM.
fn server(port: u16, body: &str) -> String {
    format!(
        "mkdir -p /www && echo {body} > /www/index.html && httpd -p {port} -h /www && \
         trap 'exit 0' TERM; while true; do sleep 0.1; done"
    )
}

fn task(family: &str, containers: Vec<Value>) -> Value {
    json!({"family": family, "networkMode": "awsvpc", "containerDefinitions": containers})
}

fn run(dir: &tempfile::TempDir, def: &Value) -> BerthRun {
    BerthRun::new(
        env!("CARGO_BIN_EXE_berth"),
        dir.path().join(format!("{}.json", unique_name("t-"))),
        def,
    )
    .prefer_cached()
    .data_dir(dir.path().join("data"))
}

fn summary(out: &RunOutput) -> Value {
    out.summary().unwrap_or_else(|| {
        panic!(
            "no summary; stdout:\n{}\nstderr:\n{}",
            out.stdout, out.stderr
        )
    })
}

fn exit_code(summary: &Value, name: &str) -> Value {
    summary["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == name))
        .map(|c| c["exitCode"].clone())
        .unwrap_or_else(|| panic!("{name} not in summary {summary}"))
}

/// One HTTP GET to 127.0.0.1:`port`; the body when it answered.
fn http_get(port: u16) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.split("\r\n\r\n").nth(1).map(|b| b.trim().to_string())
}

/// Waits until 127.0.0.1:`port` answers `body` (30 s at most).
fn wait_served(port: u16, body: &str, child: &mut Child) {
    let t = Instant::now();
    loop {
        if http_get(port).as_deref() == Some(body) {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("berth run ended ({status}) before port {port} answered");
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "port {port} never answered {body}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Interrupts a background `berth run` (SIGINT: it stops the task and cleans up) and waits.
fn interrupt(mut child: Child) {
    let pid = child.id().to_string();
    let _ = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status();
    let t = Instant::now();
    while child.try_wait().ok().flatten().is_none() {
        if t.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("berth run did not end within 60 s of SIGINT");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The first awsvpc run of this test binary, alone: it imports berth's pause image, so the tests
/// that then run in parallel (each its own `berth run` process) do not import it side by side and
/// leave an untagged copy behind.
fn first_awsvpc_run_alone() {
    static FIRST: std::sync::Once = std::sync::Once::new();
    FIRST.call_once(|| {
        let family = unique_name("berth-awsvpc-first-");
        let _g = FamilyGuard(family.clone());
        let dir = tempfile::tempdir().expect("temp dir");
        let out = run(&dir, &task(&family, vec![test_container("c", "exit 42")])).output();
        assert_eq!(exit_code(&summary(&out), "c"), json!(42), "{}", out.stderr);
    });
}

fn spawn(r: &BerthRun) -> Child {
    r.command()
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("berth run starts")
}

#[test]
fn containers_share_localhost_hostname_and_metadata_and_the_port_is_published() {
    first_awsvpc_run_alone();
    let family = unique_name("berth-awsvpc-");
    let _g = FamilyGuard(family.clone());
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let mut srv = test_container("server", &server(port, "awsvpc-ok"));
    srv["essential"] = json!(false);
    srv["portMappings"] = json!([{"containerPort": port}]);
    // The client checks, in order: the server answers on localhost (else 3); the hostname is the
    // task's and resolves to the task's address in /etc/hosts (else 4); its metadata says awsvpc
    // with that address and lists no pause container (else 5); then it stays up 4 s so the host
    // can reach the published port.
    let client = test_container(
        "client",
        &format!(
            "for i in $(seq 100); do out=$(wget -qO- http://localhost:{port}/ 2>/dev/null) && break; sleep 0.1; done; \
             [ \"$out\" = awsvpc-ok ] || exit 3; \
             ip=$(ip -4 -o addr show eth0 | awk '{{print $4}}' | cut -d/ -f1); \
             grep -q \"^$ip[[:space:]]*$(hostname)\" /etc/hosts || {{ cat /etc/hosts; exit 4; }}; \
             t=$(wget -qO- $ECS_CONTAINER_METADATA_URI_V4/task) || exit 5; \
             echo \"$t\" | grep -q '\"NetworkMode\":\"awsvpc\",\"IPv4Addresses\":\\[\"'$ip'\"\\]' || {{ echo \"$t\"; exit 5; }}; \
             echo \"$t\" | grep -q internal && {{ echo \"$t\"; exit 5; }}; \
             c=$(wget -qO- $ECS_CONTAINER_METADATA_URI_V4) || exit 5; \
             echo \"$c\" | grep -q '\"Name\":\"client\"' || exit 5; \
             sleep 4; exit 42"
        ),
    );
    let r = run(&dir, &task(&family, vec![srv, client])).args(["--metadata-addr", "127.0.0.1:0"]);
    let mut child = r
        .command()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run");
    wait_served(port, "awsvpc-ok", &mut child);
    let out = child.wait_with_output().expect("berth run ends");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let s = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["event"] == "summary")
        .unwrap_or_else(|| {
            panic!(
                "no summary: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    assert_eq!(exit_code(&s, "client"), json!(42), "summary {s}");
    assert!(
        family_containers(&family).is_empty(),
        "nothing is left, the pause container included"
    );
}

#[test]
fn two_awsvpc_tasks_do_not_share_localhost_and_a_taken_host_port_fails_at_once() {
    first_awsvpc_run_alone();
    let family = unique_name("berth-awsvpc-two-");
    let _g = FamilyGuard(family.clone());
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let mut srv = test_container("server", &server(port, "first-task"));
    srv["portMappings"] = json!([{"containerPort": port}]);
    let first = spawn(&run(&dir, &task(&family, vec![srv.clone()])));
    let mut first = first;
    wait_served(port, "first-task", &mut first);

    // A second task: nothing listens on its own localhost:port (exit 42 when refused).
    let probe = test_container(
        "probe",
        &format!("wget -T 2 -qO- http://localhost:{port}/ && exit 1; exit 42"),
    );
    let out = run(&dir, &task(&family, vec![probe])).output();
    assert_eq!(
        exit_code(&summary(&out), "probe"),
        json!(42),
        "{}",
        out.stderr
    );

    // A third task wants the same host port: it stops at once with Docker's words, never runs.
    let t = Instant::now();
    let out = run(&dir, &task(&family, vec![srv])).output();
    let s = summary(&out);
    assert!(t.elapsed() < Duration::from_secs(30), "no hang");
    let reason = s["stoppedReason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("port is already allocated") || reason.contains("address already in use"),
        "reason names the port conflict: {s}"
    );
    assert_eq!(exit_code(&s, "server"), Value::Null, "it never ran: {s}");
    assert_eq!(http_get(port).as_deref(), Some("first-task"));
    interrupt(first);
    assert!(family_containers(&family).is_empty(), "nothing is left");
}

#[test]
fn pid_mode_task_shares_one_pid_namespace_whose_pid_1_is_the_pause_program() {
    first_awsvpc_run_alone();
    let family = unique_name("berth-pidtask-");
    let _g = FamilyGuard(family.clone());
    let dir = tempfile::tempdir().expect("temp dir");
    let mut sleeper = test_container("sleeper", "exec sleep 1234");
    sleeper["essential"] = json!(false);
    let looker = test_container(
        "looker",
        "for i in $(seq 50); do ps | grep -q '[s]leep 1234' && break; sleep 0.1; done; \
         ps | grep -q '[s]leep 1234' || { ps; exit 3; }; \
         [ \"$(tr '\\0' ' ' < /proc/1/cmdline)\" = '/pause ' ] || { cat /proc/1/cmdline; exit 4; }; exit 42",
    );
    let def = json!({"family": family, "pidMode": "task",
                     "containerDefinitions": [sleeper, looker]});
    let out = run(&dir, &def).output();
    let s = summary(&out);
    assert_eq!(exit_code(&s, "looker"), json!(42), "{s}\n{}", out.stderr);
    assert!(family_containers(&family).is_empty());
}

#[test]
fn ipc_mode_task_shares_dev_shm_between_containers() {
    first_awsvpc_run_alone();
    let family = unique_name("berth-ipctask-");
    let _g = FamilyGuard(family.clone());
    let dir = tempfile::tempdir().expect("temp dir");
    let mut writer = test_container(
        "writer",
        "echo shared-$$ > /dev/shm/marker && trap 'exit 0' TERM; while true; do sleep 0.1; done",
    );
    writer["essential"] = json!(false);
    let reader = test_container(
        "reader",
        "for i in $(seq 50); do grep -q shared- /dev/shm/marker 2>/dev/null && exit 42; sleep 0.1; done; ls -la /dev/shm; exit 3",
    );
    let mut reader = reader;
    reader["dependsOn"] = json!([{"containerName": "writer", "condition": "START"}]);
    let def = json!({"family": family, "ipcMode": "task",
                     "containerDefinitions": [writer, reader]});
    let out = run(&dir, &def).output();
    let s = summary(&out);
    assert_eq!(exit_code(&s, "reader"), json!(42), "{s}\n{}", out.stderr);
    assert!(family_containers(&family).is_empty());
}
