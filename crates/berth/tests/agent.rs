//! `berth agent` end to end on the real Engine: crash (kill -9) and restart while tasks run or
//! start, containers removed behind the agent's back, cleanup after the wait, many tasks at once.

mod common;

use berth_testkit::{FamilyGuard, family_containers, test_image, unique_name};
use common::agent::{Agent, Launch};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const SERVE: &str = "trap 'exit 0' TERM; while true; do sleep 0.2; done";

fn container(name: &str, script: &str) -> Value {
    json!({"name": name, "image": test_image(), "command": ["sh", "-c", script],
           "stopTimeout": 2, "dockerLabels": {"berth.test": "1"}})
}

/// A chain of `n` containers, each START-depending on the previous; the last is essential.
fn chain(family: &str, n: usize) -> Value {
    let cs: Vec<Value> = (0..n)
        .map(|i| {
            let mut c = container(&format!("c{i}"), SERVE);
            c["essential"] = json!(i == n - 1);
            if i > 0 {
                c["dependsOn"] =
                    json!([{"containerName": format!("c{}", i - 1), "condition": "START"}]);
            }
            c
        })
        .collect();
    json!({"family": family, "containerDefinitions": cs})
}

fn running(v: &Value) -> bool {
    v["known"] == "RUNNING"
}

fn stopped(v: &Value) -> bool {
    v["known"] == "STOPPED"
}

#[test]
fn kill_9_while_a_task_runs_then_restart_adopts_it_and_stop_works() {
    let mut agent = Agent::start("1h");
    let family = unique_name("agent-kill-");
    let _g = FamilyGuard(family.clone());
    let id = agent.submit(&chain(&family, 2));
    agent.wait_for(&id, "ran", running);
    agent.kill9();
    agent.restart();
    let v = agent.wait_for(&id, "was adopted", running);
    assert_eq!(
        family_containers(&family).len(),
        2,
        "one Docker container per task container: {v}"
    );
    let (code, _, err) = agent.cli(&["stop", &id]);
    assert_eq!(code, 0, "{err}");
    let v = agent.wait_for(&id, "stopped", stopped);
    assert_eq!(v["stoppedReason"], "stopped through the API");
    assert_eq!(v["exitCode"], 0);
    let (_, ps, _) = agent.cli(&["ps", "-a"]);
    assert!(ps.contains(&id[..12]) && ps.contains("STOPPED"), "{ps}");
}

#[test]
fn sigterm_leaves_tasks_running_and_the_next_agent_adopts_them() {
    let mut agent = Agent::start("1h");
    let family = unique_name("agent-term-");
    let _g = FamilyGuard(family.clone());
    let running_id = agent.submit(&chain(&family, 2));
    // A stopped task waiting for its cleanup (1 h) must not hold the shutdown either.
    let done_id = agent
        .submit(&json!({"family": family, "containerDefinitions": [container("d", "exit 0")]}));
    agent.wait_for(&running_id, "ran", running);
    agent.wait_for(&done_id, "stopped", stopped);
    let (code, took) = agent.term();
    assert_eq!(code, Some(0), "exit status after SIGTERM: {}", agent.log());
    assert!(
        took < Duration::from_secs(15),
        "SIGTERM took {took:?}: {}",
        agent.log()
    );
    assert!(!agent.socket().exists(), "the control socket is removed");
    let names = family_containers(&family);
    assert_eq!(names.len(), 3, "nothing removed: {names:?}");
    let running_now = Command::new("docker")
        .args([
            "ps",
            "-q",
            "--filter",
            &format!("label=berth.family={family}"),
        ])
        .output()
        .expect("docker ps");
    assert_eq!(
        String::from_utf8_lossy(&running_now.stdout).lines().count(),
        2,
        "the running task's containers keep running"
    );
    agent.restart();
    agent.wait_for(&running_id, "was adopted", running);
    let v = agent.task(&done_id);
    assert_eq!(v["known"], "STOPPED", "{v}");
    assert_eq!(family_containers(&family).len(), 3, "nothing created twice");
    let (code, _, err) = agent.cli(&["stop", &running_id]);
    assert_eq!(code, 0, "{err}");
    agent.wait_for(&running_id, "stopped", stopped);
}

#[test]
fn a_crash_at_each_step_of_a_start_creates_nothing_twice() {
    // The agent aborts (like kill -9) exactly: after c2's name is stored and before its create,
    // right after its create, right after its start.
    for point in ["before-create", "after-create", "after-start"] {
        let mut agent = Agent::start_env("1h", &[("BERTH_FAILPOINT", &format!("{point}:c2"))]);
        let family = unique_name("agent-crash-");
        let _g = FamilyGuard(family.clone());
        let id = agent.submit(&chain(&family, 5));
        let t = Instant::now();
        let child = agent.child.as_mut().expect("agent");
        while child.try_wait().expect("wait").is_none() {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "{point}: the agent never reached the failpoint"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        agent.child = None;
        let before = family_containers(&family).len();
        // START dependents are created while their dependency starts (pipelining): at c2's
        // create, c0 and c1 exist; after it, c2 too; after c2's start, c3 and c4 may exist too.
        let expected = match point {
            "before-create" => 2..=2,
            "after-create" => 3..=3,
            _ => 3..=5,
        };
        assert!(
            expected.contains(&before),
            "{point}: {before} containers at the crash"
        );
        agent.restart();
        let v = agent.wait_for(&id, "ran after the restart", running);
        assert_eq!(
            family_containers(&family).len(),
            5,
            "{point}: no orphan, no duplicate: {v}"
        );
        let (code, _, _) = agent.cli(&["rm", &id]);
        assert_eq!(code, 0);
    }
}

#[test]
fn kill_9_in_the_middle_of_starting_five_containers_creates_nothing_twice() {
    // Kill at several points of the start: the agent persists every container name before create,
    // so the restarted agent adopts what exists and creates only what is missing.
    for delay_ms in [0u64, 150, 400, 800] {
        let mut agent = Agent::start("1h");
        let family = unique_name("agent-mid-");
        let _g = FamilyGuard(family.clone());
        let id = agent.submit(&chain(&family, 5));
        std::thread::sleep(Duration::from_millis(delay_ms));
        agent.kill9();
        agent.restart();
        let v = agent.wait_for(&id, "ran after the restart", running);
        let ids = family_containers(&family);
        assert_eq!(
            ids.len(),
            5,
            "no orphan, no duplicate (kill after {delay_ms} ms): {v}"
        );
        let docker_ids: Vec<&str> = v["containers"]
            .as_array()
            .expect("containers")
            .iter()
            .filter_map(|c| c["dockerId"].as_str())
            .collect();
        assert_eq!(docker_ids.len(), 5);
        for d in docker_ids {
            assert!(
                ids.iter().any(|i| d.starts_with(i.as_str())),
                "{d} is the one in Docker"
            );
        }
        let (code, _, _) = agent.cli(&["rm", &id]);
        assert_eq!(code, 0);
    }
}

#[test]
fn a_container_removed_behind_the_agents_back_stops_the_task() {
    let agent = Agent::start("1h");
    let family = unique_name("agent-rmf-");
    let _g = FamilyGuard(family.clone());
    let id = agent.submit(&chain(&family, 2));
    let v = agent.wait_for(&id, "ran", running);
    let essential = v["containers"][1]["dockerId"]
        .as_str()
        .expect("id")
        .to_string();
    let out = Command::new("docker")
        .args(["rm", "-f", &essential])
        .output()
        .expect("docker");
    assert!(out.status.success());
    let v = agent.wait_for(&id, "stopped", stopped);
    let reason = v["containers"][1]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("removed from Docker"), "{v}");
}

#[test]
fn cleanup_after_the_wait_removes_containers_directory_and_the_task() {
    let agent = Agent::start("1s");
    let family = unique_name("agent-clean-");
    let _g = FamilyGuard(family.clone());
    let mut c = container("a", "echo done > /data/f");
    c["mountPoints"] = json!([{"sourceVolume": "scratch", "containerPath": "/data"}]);
    let def = json!({"family": family, "containerDefinitions": [c],
                     "volumes": [{"name": "scratch", "host": {}}]});
    let id = agent.submit(&def);
    let task_dir: PathBuf = agent.dir.path().join("tasks").join(&id);
    agent.wait_forgotten(&id);
    assert!(family_containers(&family).is_empty(), "containers removed");
    assert!(!Path::new(&task_dir).exists(), "task directory removed");
}

#[test]
fn two_hundred_tasks_at_once_all_end_with_their_exit_codes_in_bounded_memory() {
    let agent = Agent::start("1h");
    let family = unique_name("agent-many-");
    let _g = FamilyGuard(family.clone());
    // Submitted at once, from 8 clients.
    let ids: Vec<(String, i64)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|w| {
                let (agent, family) = (&agent, &family);
                scope.spawn(move || {
                    (0..200)
                        .filter(|i| i % 8 == w)
                        .map(|i| {
                            let code = i % 3;
                            let def = json!({"family": family, "containerDefinitions": [container("a", &format!("exit {code}"))]});
                            (agent.submit(&def), code)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("submitter"))
            .collect()
    });
    for (id, code) in &ids {
        let v = agent.wait_for(id, "stopped", stopped);
        assert_eq!(v["exitCode"], *code, "{v}");
    }
    let (_, ps, _) = agent.cli(&["ps", "-a", "--output", "json", "--family", &family]);
    let tasks: Vec<Value> = serde_json::from_str(&ps).expect("JSON");
    assert_eq!(tasks.len(), 200, "the store has them all");
    let pid = agent.child.as_ref().expect("agent").id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let rss_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS");
    assert!(
        rss_kib < 200 * 1024,
        "agent resident memory {rss_kib} KiB after 200 tasks"
    );
}

/// A Unix-socket proxy in front of the Docker socket whose connections the test can cut, as a
/// Docker restart would (without restarting the machine's Docker).
struct Proxy {
    path: PathBuf,
    cut: tokio::sync::watch::Sender<u64>,
    _thread: std::thread::JoinHandle<()>,
}

impl Proxy {
    fn start(dir: &Path) -> Proxy {
        let path = dir.join("docker-proxy.sock");
        let (cut, rx) = tokio::sync::watch::channel(0u64);
        let p = path.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::UnixListener::bind(&p).expect("bind proxy");
                let _ = ready_tx.send(());
                loop {
                    let Ok((mut client, _)) = listener.accept().await else {
                        return;
                    };
                    let mut rx = rx.clone();
                    rx.borrow_and_update();
                    tokio::spawn(async move {
                        let Ok(mut docker) =
                            tokio::net::UnixStream::connect("/var/run/docker.sock").await
                        else {
                            return;
                        };
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut client, &mut docker) => {}
                            _ = rx.changed() => {}
                        }
                    });
                }
            });
        });
        ready_rx
            .recv_timeout(Duration::from_secs(5))
            .expect("proxy ready");
        Proxy {
            path,
            cut,
            _thread: thread,
        }
    }

    /// Drop every open connection (event streams included).
    fn cut(&self) {
        self.cut.send_modify(|g| *g += 1);
    }
}

#[test]
fn a_broken_docker_event_stream_is_resubscribed_and_nothing_is_lost_or_duplicated() {
    let dir = tempfile::tempdir().expect("tmp");
    let proxy = Proxy::start(dir.path());
    let mut agent = Agent::unstarted_in(dir, "1h", Launch::default());
    let host = format!("unix://{}", proxy.path.display());
    agent.restart_with(&["--docker-host", &host]);
    let family = unique_name("agent-events-");
    let _g = FamilyGuard(family.clone());
    // a exits by itself 3 s after it starts: only an event (or a re-sync) can tell the agent.
    let mut a = container("a", "sleep 3; exit 5");
    a["essential"] = json!(false);
    let b = container("b", SERVE);
    let id = agent.submit(&json!({"family": family, "containerDefinitions": [a, b]}));
    agent.wait_for(&id, "ran", running);
    proxy.cut();
    std::thread::sleep(Duration::from_millis(300));
    proxy.cut();
    let v = agent.wait_for(&id, "saw a exit", |v| {
        v["containers"][0]["known"] == "STOPPED"
    });
    assert_eq!(v["containers"][0]["exitCode"], 5, "{v}");
    assert_eq!(v["known"], "RUNNING", "a is not essential");
    assert_eq!(family_containers(&family).len(), 2, "nothing duplicated");
    assert!(
        agent.log().contains("docker event stream ended"),
        "{}",
        agent.log()
    );
    let (code, _, _) = agent.cli(&["stop", &id]);
    assert_eq!(code, 0);
    agent.wait_for(&id, "stopped", stopped);
}

/// GET a path on the agent's HTTP listener (loopback), the body as text.
fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    out
}

#[test]
fn logs_come_from_docker_and_metrics_count_what_happened() {
    let agent = Agent::start("1h");
    let family = unique_name("agent-logs-");
    let _g = FamilyGuard(family.clone());
    let def = json!({"family": family, "containerDefinitions": [container("a", "echo hello-logs; echo to-stderr >&2")]});
    let id = agent.submit(&def);
    agent.wait_for(&id, "stopped", stopped);
    let out = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["logs", &id, "a", "--agent"])
        .arg(agent.socket())
        .output()
        .expect("berth logs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello-logs\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("to-stderr"));
    let metrics = http_get(agent.port, "/metrics");
    assert!(
        metrics.contains("berth_tasks{status=\"STOPPED\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("berth_tasks_submitted_total 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("berth_container_transitions_total"),
        "{metrics}"
    );
    assert!(
        metrics.contains("berth_event_stream_reconnects_total 0"),
        "{metrics}"
    );
}

#[test]
fn gc_keeps_the_directories_of_tasks_the_store_still_has() {
    let mut agent = Agent::start("1h");
    let family = unique_name("agent-gc-");
    let _g = FamilyGuard(family.clone());
    let mut a = container("a", SERVE);
    a["mountPoints"] = json!([{"sourceVolume": "scratch", "containerPath": "/data"}]);
    let def = json!({"family": family, "containerDefinitions": [a],
                     "volumes": [{"name": "scratch", "host": {}}]});
    let id = agent.submit(&def);
    agent.wait_for(&id, "ran", running);
    // While the agent runs, gc cannot take the data directory.
    let gc = |dir: &Path| {
        Command::new(env!("CARGO_BIN_EXE_berth"))
            .args(["gc", "--data-dir"])
            .arg(dir)
            .output()
            .expect("gc runs")
    };
    assert_eq!(gc(agent.dir.path()).status.code(), Some(75));
    agent.kill9();
    // A leftover beside the task's own directory.
    let leftover = agent
        .dir
        .path()
        .join("tasks")
        .join("ffffffffffffffffffffffffffffffff");
    std::fs::create_dir_all(&leftover).expect("leftover");
    let out = gc(agent.dir.path());
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(!leftover.exists(), "the leftover is removed");
    assert!(
        agent.dir.path().join("tasks").join(&id).exists(),
        "the stored task's directory is kept: {text}"
    );
    agent.restart();
    let (code, _, _) = agent.cli(&["rm", &id]);
    assert_eq!(code, 0);
}

#[test]
fn configuration_layers_file_then_environment_then_flags() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = dir.path().join("berth.toml");
    std::fs::write(
        &cfg,
        "cleanup-wait = \"10m\"\npull-behavior = \"once\"\npull-attempts = 3\npull-dependent-upfront = true\nmetadata-addr = \"127.0.0.1:6000\"\navailable-log-drivers = [\"json-file\", \"syslog\"]\n",
    )
    .expect("config");
    let print = |env: &[(&str, &str)], flags: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_berth"));
        cmd.args(["agent", "--print-config", "--config"])
            .arg(&cfg)
            .args(flags);
        for k in [
            "BERTH_CLEANUP_WAIT",
            "ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION",
            "BERTH_IMAGE_PULL_BEHAVIOR",
            "ECS_IMAGE_PULL_BEHAVIOR",
            "BERTH_METADATA_ADDR",
            "BERTH_AVAILABLE_LOG_DRIVERS",
            "ECS_AVAILABLE_LOGGING_DRIVERS",
            "BERTH_LOG_DRIVER_FALLBACK",
        ] {
            cmd.env_remove(k);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("berth runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let t: toml::Table = String::from_utf8_lossy(&out.stdout).parse().expect("TOML");
        t
    };
    let t = print(&[], &[]);
    assert_eq!(t["cleanup-wait"].as_str(), Some("10m"), "{t}");
    assert_eq!(t["pull-behavior"].as_str(), Some("once"));
    assert_eq!(t["pull-attempts"].as_integer(), Some(3));
    assert_eq!(t["pull-dependent-upfront"].as_bool(), Some(true));
    assert_eq!(
        t["available-log-drivers"].to_string(),
        r#"["json-file", "syslog"]"#
    );
    assert_eq!(t["log-driver-fallback"].as_str(), Some("json-file"));
    let t = print(
        &[
            ("ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION", "20m"),
            ("BERTH_IMAGE_PULL_BEHAVIOR", "always"),
            ("ECS_AVAILABLE_LOGGING_DRIVERS", r#"["awslogs"]"#),
        ],
        &[],
    );
    assert_eq!(
        t["available-log-drivers"].to_string(),
        r#"["awslogs"]"#,
        "ECS's variable beats the file"
    );
    assert_eq!(
        t["cleanup-wait"].as_str(),
        Some("20m"),
        "the environment (ECS name) beats the file"
    );
    assert_eq!(t["pull-behavior"].as_str(), Some("always"));
    let t = print(
        &[("BERTH_CLEANUP_WAIT", "20m")],
        &["--cleanup-wait", "30s", "--metadata-addr", "127.0.0.1:6001"],
    );
    assert_eq!(t["cleanup-wait"].as_str(), Some("30s"), "flags beat both");
    assert_eq!(t["metadata-addr"].as_str(), Some("127.0.0.1:6001"));
    // A bad key is an error naming it.
    std::fs::write(&cfg, "cleanup_wait = \"1m\"\n").expect("config");
    let out = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["agent", "--print-config", "--config"])
        .arg(&cfg)
        .output()
        .expect("berth runs");
    assert_eq!(out.status.code(), Some(78));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown option \"cleanup_wait\""));
}

/// A switch the file turns on is turned off by `--switch=false`, `--print-config` names the layer
/// of each value, and `berth cluster …` and `berth controller` take the file's `etcd` (the
/// variable beats it, the flag beats both). (No Docker needed.)
#[test]
fn a_flag_turns_off_a_file_switch_and_cluster_commands_take_the_files_etcd() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = dir.path().join("berth.toml");
    std::fs::write(
        &cfg,
        "pull-dependent-upfront = true\ncontainer-metadata = true\n",
    )
    .expect("config");
    // The cluster's clients and controller (an agent given it would be a node and need --node).
    let cluster_cfg = dir.path().join("cluster.toml");
    std::fs::write(&cluster_cfg, "etcd = \"file.example:1\"\n").expect("config");
    let berth = |args: &[&str], env: &[(&str, &str)]| -> std::process::Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_berth"));
        let file = if args[0] == "agent" {
            &cfg
        } else {
            &cluster_cfg
        };
        cmd.args(args).arg("--config").arg(file);
        for k in [
            "BERTH_PULL_DEPENDENT_CONTAINERS_UPFRONT",
            "ECS_PULL_DEPENDENT_CONTAINERS_UPFRONT",
            "BERTH_ENABLE_CONTAINER_METADATA",
            "ECS_ENABLE_CONTAINER_METADATA",
            "BERTH_ETCD",
        ] {
            cmd.env_remove(k);
        }
        cmd.envs(env.iter().copied());
        cmd.output().expect("berth runs")
    };
    let out = berth(
        &["agent", "--print-config", "--pull-dependent-upfront=false"],
        &[],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t: toml::Table = text.parse().expect("TOML");
    assert_eq!(t["pull-dependent-upfront"].as_bool(), Some(false), "{text}");
    assert_eq!(t["container-metadata"].as_bool(), Some(true));
    assert!(
        text.contains("pull-dependent-upfront = false  # flag --pull-dependent-upfront\n"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "container-metadata = true  # file {}\n",
            cfg.display()
        )),
        "{text}"
    );
    assert!(
        text.contains("pull-timeout = \"2h\"  # default\n"),
        "{text}"
    );
    // Built without the cluster feature, there is no `berth cluster` or `berth controller`.
    if !cfg!(feature = "cluster") {
        return;
    }
    let refused = |out: std::process::Output| {
        assert_eq!(out.status.code(), Some(1));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = refused(berth(&["cluster", "ps"], &[]));
    assert!(
        err.contains("--etcd: \"file.example:1\" is not an etcd client URL"),
        "{err}"
    );
    let err = refused(berth(&["controller"], &[("BERTH_ETCD", "env.example:2")]));
    assert!(
        err.contains("\"env.example:2\""),
        "the variable beats the file: {err}"
    );
    let err = refused(berth(
        &["controller", "--etcd", "flag.example:3"],
        &[("BERTH_ETCD", "env.example:2")],
    ));
    assert!(
        err.contains("\"flag.example:3\""),
        "the flag beats both: {err}"
    );
}

#[test]
fn the_api_rejects_bad_input_with_clear_answers() {
    let agent = Agent::start("1h");
    let bad = agent.dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"family": "x", "containerDefinitions": [{"name": "a", "image": "i", "dependsOn": [{"containerName": "db", "condition": "START"}]}]}"#).expect("write");
    let (code, _, err) = agent.cli(&["submit", bad.to_str().expect("utf-8")]);
    assert_eq!(code, 65);
    assert_eq!(
        err.trim(),
        r#"containerDefinitions[0].dependsOn[0].containerName: no container named "db" (known: a)"#
    );
    let (code, _, err) = agent.cli(&["inspect", "00000000000000000000000000000000"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("no task 00000000000000000000000000000000"),
        "{err}"
    );
    let (code, _, err) = agent.cli(&["stop", "nope"]);
    assert_eq!(code, 1);
    assert!(err.contains("no task nope"), "{err}");
    // The socket is the only door: not readable or writable by anyone else.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(agent.socket())
        .expect("socket")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn submit_wait_follows_the_task_and_exits_with_its_status() {
    let agent = Agent::start("1h");
    let family = unique_name("agent-wait-");
    let _g = FamilyGuard(family.clone());
    let file = agent.dir.path().join("w.json");
    let def =
        json!({"family": family, "containerDefinitions": [container("a", "sleep 1; exit 3")]});
    std::fs::write(&file, def.to_string()).expect("write");
    let (code, out, err) = agent.cli(&["submit", "--wait", file.to_str().expect("utf-8")]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        out.contains("STOPPED") && out.contains("Essential container in task exited"),
        "{out}"
    );
}

#[test]
fn gc_containers_removes_orphans_of_a_lost_store_and_only_those() {
    let mut agent = Agent::start("1h");
    let family = unique_name("agent-orphan-");
    let _g = FamilyGuard(family.clone());
    let id = agent.submit(&chain(&family, 2));
    agent.wait_for(&id, "ran", running);
    agent.kill9();
    // The store is lost: its containers now belong to no task.
    std::fs::remove_file(agent.dir.path().join("berth.redb")).expect("remove the store");
    assert_eq!(family_containers(&family).len(), 2);
    let out = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["gc", "--containers", "--dry-run", "--data-dir"])
        .arg(agent.dir.path())
        .output()
        .expect("gc");
    assert!(String::from_utf8_lossy(&out.stdout).contains("would remove"));
    assert_eq!(
        family_containers(&family).len(),
        2,
        "dry run changes nothing"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["gc", "--containers", "--data-dir"])
        .arg(agent.dir.path())
        .output()
        .expect("gc");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains(&format!("task {id} is not in the store")),
        "{text}"
    );
    assert!(family_containers(&family).is_empty(), "orphans removed");
}

#[test]
fn two_tasks_submitted_together_with_one_image_cause_one_pull() {
    let reg = berth_testkit::registry();
    let log =
        berth_testkit::registry_log().expect("BERTH_TEST_REGISTRY_LOG: run through scripts/test");
    let repo = unique_name("berth-agent-shared-");
    let image = format!("{reg}/{repo}:1");
    let docker = |args: &[&str]| {
        let out = Command::new("docker").args(args).output().expect("docker");
        assert!(
            out.status.success(),
            "docker {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    docker(&["tag", &test_image(), &image]);
    docker(&["push", "-q", &image]);
    docker(&["rmi", &image]);
    let requests = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .matches(&format!("\"HEAD /v2/{repo}/manifests/1 "))
            .count()
    };
    let before = requests();
    let agent = Agent::start("1h");
    let family = unique_name("agent-pull-");
    let _g = FamilyGuard(family.clone());
    let def = json!({"family": family, "containerDefinitions": [
        {"name": "a", "image": image, "command": ["true"], "dockerLabels": {"berth.test": "1"}}]});
    let ids: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2).map(|_| s.spawn(|| agent.submit(&def))).collect();
        hs.into_iter().map(|h| h.join().expect("submit")).collect()
    });
    for id in &ids {
        let v = agent.wait_for(id, "stopped", stopped);
        assert_eq!(v["exitCode"], 0, "{v}");
    }
    std::thread::sleep(Duration::from_millis(300));
    let _ = Command::new("docker").args(["rmi", "-f", &image]).output();
    assert_eq!(
        requests() - before,
        1,
        "one pull in the registry's log for two tasks"
    );
}

#[test]
fn containers_of_the_agent_read_their_task_metadata() {
    let agent = Agent::start("1h");
    let family = unique_name("agent-meta-");
    let _g = FamilyGuard(family.clone());
    // Bridge mode: the container reaches the agent on the Docker bridge's address.
    // It polls until it sees itself RUNNING: its process starts a moment before Docker's start
    // event reaches the agent.
    let script = "for i in $(seq 50); do out=$(wget -qO- $ECS_CONTAINER_METADATA_URI_V4/task) && echo \"$out\" | grep -q '\"KnownStatus\":\"RUNNING\"' && echo \"$out\" && exit 0; sleep 0.2; done; exit 1";
    let def = json!({"family": family, "containerDefinitions": [container("a", script)]});
    let id = agent.submit(&def);
    let v = agent.wait_for(&id, "stopped", stopped);
    assert_eq!(
        v["exitCode"],
        0,
        "the container read its metadata: {v}\n{}",
        agent.log()
    );
    let out = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["logs", &id, "a", "--agent"])
        .arg(agent.socket())
        .output()
        .expect("berth logs");
    let task: Value = serde_json::from_slice(&out.stdout).expect("the task JSON");
    assert_eq!(task["Family"], family.as_str());
    assert_eq!(task["Cluster"], "default");
    assert!(
        task["TaskARN"].as_str().unwrap_or_default().ends_with(&id),
        "{task}"
    );
    assert_eq!(task["Containers"][0]["Name"], "a");
    assert_eq!(task["Containers"][0]["KnownStatus"], "RUNNING");
}

#[test]
fn metrics_are_served_to_the_operator_and_not_on_the_bridge_listener() {
    let agent = Agent::start("1h");
    let family = unique_name("agent-metrics-");
    let _g = FamilyGuard(family.clone());
    // A bridge-mode container reaches the metadata endpoint on the Docker bridge's address: its
    // metadata answers there (polled until it shows RUNNING, so the agent has seen the task
    // start), /metrics does not (404).
    let script = r#"for i in $(seq 50); do wget -qO- "$ECS_CONTAINER_METADATA_URI_V4/task" | grep -q '"KnownStatus":"RUNNING"' && break; sleep 0.2; done
base=${ECS_CONTAINER_METADATA_URI_V4%/v4/*}
if out=$(wget -qO- "$base/metrics" 2>&1); then echo "served on $base: $out"; exit 3; fi
echo "$out" | grep -q '404' || { echo "$base: $out"; exit 4; }
wget -qO- "$ECS_CONTAINER_METADATA_URI_V4" >/dev/null || exit 5"#;
    let def = json!({"family": family, "containerDefinitions": [container("a", script)]});
    let id = agent.submit(&def);
    let v = agent.wait_for(&id, "stopped", stopped);
    let logs = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["logs", &id, "a", "--agent"])
        .arg(agent.socket())
        .output()
        .expect("berth logs");
    assert_eq!(
        v["exitCode"],
        0,
        "the bridge listener must answer 404 for /metrics: {v}\n{}\n{}",
        String::from_utf8_lossy(&logs.stdout),
        agent.log()
    );
    // The operator's (loopback) listener serves it, with the histograms.
    let metrics = http_get(agent.port, "/metrics");
    assert!(metrics.starts_with("HTTP/1.1 200 OK"), "{metrics}");
    for line in [
        "berth_tasks{status=\"STOPPED\"} 1",
        "berth_tasks_submitted_total 1",
        "berth_task_start_duration_seconds_count 1",
        "berth_docker_request_duration_seconds_count{operation=\"create\"} 1",
        "berth_docker_request_duration_seconds_count{operation=\"start\"} 1",
        "# TYPE berth_pull_duration_seconds histogram",
        "# EOF",
    ] {
        assert!(metrics.contains(line), "no {line} in:\n{metrics}");
    }
}

#[test]
fn stop_of_a_stopped_task_says_so_and_rm_still_cleans_it_up() {
    let agent = Agent::start("1h");
    let family = unique_name("agent-stopped-");
    let _g = FamilyGuard(family.clone());
    let def = json!({"family": family, "containerDefinitions": [container("a", "exit 0")]});
    let id = agent.submit(&def);
    agent.wait_for(&id, "stopped", stopped);
    let (code, out, err) = agent.cli(&["stop", &id]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains(&format!("task {id} is already stopped")),
        "{err}"
    );
    assert!(!out.contains("stopping"), "{out}");
    let (code, out, err) = agent.cli(&["rm", &id]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), format!("removing {id}"));
    agent.wait_forgotten(&id);
    assert!(family_containers(&family).is_empty(), "containers removed");
    let (code, _, err) = agent.cli(&["rm", &id]);
    assert_eq!(code, 1);
    assert!(err.contains(&format!("no task {id}")), "{err}");
}

#[test]
fn an_api_socket_path_that_is_a_regular_file_is_refused_and_kept() {
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("precious");
    std::fs::write(&file, b"data").expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["agent", "--data-dir"])
        .arg(dir.path().join("data"))
        .arg("--api-socket")
        .arg(&file)
        .args(["--metadata-addr", "127.0.0.1:0"])
        .output()
        .expect("berth agent runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "{} exists and is a regular file, not a socket; refusing to replace it",
            file.display()
        )),
        "{err}"
    );
    assert_eq!(std::fs::read(&file).expect("kept"), b"data");
}

/// `berth logs TASK CONTAINER` against the agent: exit code, stdout, stderr.
fn berth_logs(agent: &Agent, id: &str, container: &str) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["logs", id, container, "--agent"])
        .arg(agent.socket())
        .output()
        .expect("berth logs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_awslogs_task_is_submitted_with_a_warning_and_berth_logs_shows_its_output() {
    let agent = Agent::start("1h");
    let family = unique_name("agent-awslogs-");
    let _g = FamilyGuard(family.clone());
    // Shaped like the awslogs containers of aws-samples/aws-containers-task-definitions and the
    // ECS developer guide's awslogs example (group, region, stream prefix, create-group).
    // The container also reads its own metadata: it shows the driver Docker was given.
    let script = r#"echo hello-awslogs; echo err-awslogs >&2
for i in $(seq 50); do out=$(wget -qO- "$ECS_CONTAINER_METADATA_URI_V4") && break; sleep 0.2; done
echo "$out" | grep -o '"Log[A-Za-z]*":[^,}]*'"#;
    let mut c = container("app", script);
    c["logConfiguration"] = json!({"logDriver": "awslogs", "options": {
        "awslogs-group": "/ecs/berth-agent-test", "awslogs-region": "eu-west-1",
        "awslogs-stream-prefix": "app", "awslogs-create-group": "true"}});
    let def = json!({"family": family, "containerDefinitions": [c]});
    let file = agent.dir.path().join("awslogs.json");
    std::fs::write(&file, def.to_string()).expect("write");
    let (code, out, err) = agent.cli(&["submit", file.to_str().expect("utf-8")]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        err,
        "warning: containerDefinitions[0].logConfiguration.logDriver: log driver \"awslogs\" is not available on this host (available: json-file, local, none); the container logs to \"json-file\" instead without its options (awslogs-create-group, awslogs-group, awslogs-region, awslogs-stream-prefix); declare the driver available with --available-log-drivers (ECS_AVAILABLE_LOGGING_DRIVERS), or choose the replacement with --log-driver-fallback\n"
    );
    let id = out.trim().to_string();
    let v = agent.wait_for(&id, "stopped", stopped);
    assert_eq!(v["exitCode"], 0, "{v}\n{}", agent.log());
    let docker_id = v["containers"][0]["dockerId"].as_str().expect("created");
    let log =
        berth_testkit::docker_cli(&["inspect", "-f", "{{.HostConfig.LogConfig.Type}}", docker_id]);
    assert_eq!(log.trim(), "json-file");
    let (code, out, err) = berth_logs(&agent, &id, "app");
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out, "hello-awslogs\n\"LogDriver\":\"json-file\"\n",
        "the metadata shows the resolved driver, without awslogs options"
    );
    assert_eq!(err, "err-awslogs\n");
}

#[test]
fn berth_logs_says_when_docker_keeps_no_logs_and_when_it_reads_a_local_copy() {
    // syslog is declared available; the test's own UDP socket is the syslog server, so the
    // driver accepts every line and Docker's dual-logging copy holds them all.
    let server = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind udp");
    let addr = format!("udp://{}", server.local_addr().expect("addr"));
    let agent = Agent::start_with(
        "1h",
        &[
            "--available-log-drivers",
            r#"["json-file","none","syslog"]"#,
        ],
    );
    let family = unique_name("agent-nologs-");
    let _g = FamilyGuard(family.clone());
    let with_log = |name: &str, log: Value| {
        let mut c = container(name, &format!("echo from-{name}"));
        c["essential"] = json!(false);
        c["logConfiguration"] = log;
        c
    };
    let mut last = container("last", "sleep 0.5");
    last["dependsOn"] = json!([
        {"containerName": "quiet", "condition": "COMPLETE"},
        {"containerName": "relayed", "condition": "COMPLETE"},
        {"containerName": "uncached", "condition": "COMPLETE"}
    ]);
    let def = json!({"family": family, "containerDefinitions": [
        with_log("quiet", json!({"logDriver": "none"})),
        with_log("relayed", json!({"logDriver": "syslog", "options": {"syslog-address": addr}})),
        with_log("uncached", json!({"logDriver": "syslog", "options": {"syslog-address": addr, "cache-disabled": "true"}})),
        last,
    ]});
    let id = agent.submit(&def);
    let v = agent.wait_for(&id, "stopped", stopped);
    assert_eq!(v["exitCode"], 0, "{v}\n{}", agent.log());

    let (code, out, err) = berth_logs(&agent, &id, "quiet");
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert_eq!(
        err,
        "berth: error: container quiet logs through the \"none\" driver: Docker keeps nothing, so there are no logs to show (give it json-file or local, in its logConfiguration or as --log-driver-fallback, to keep them)\n"
    );
    let (code, out, err) = berth_logs(&agent, &id, "uncached");
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert_eq!(
        err,
        "berth: error: container uncached logs through the \"syslog\" driver and Docker keeps no local copy (its dual-logging cache is disabled): read the logs where the driver delivers them\n"
    );
    let (code, out, err) = berth_logs(&agent, &id, "relayed");
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "from-relayed\n");
    assert_eq!(
        err,
        "berth: note: container relayed logs through the \"syslog\" driver, which sends its output elsewhere; what follows is Docker's local copy (dual logging), which holds only what the driver accepted\n"
    );
}

#[test]
fn kill_9_while_an_awsvpc_task_starts_then_restart_adopts_its_pause_container() {
    // The pause container is stored and adopted like any container: whenever the agent dies, the
    // restarted agent finds it, creates nothing twice, and cleanup removes it with the rest.
    for delay_ms in [0u64, 250, 600] {
        let mut agent = Agent::start("1h");
        let family = unique_name("agent-awsvpc-");
        let _g = FamilyGuard(family.clone());
        let mut def = chain(&family, 3);
        def["networkMode"] = json!("awsvpc");
        let id = agent.submit(&def);
        std::thread::sleep(Duration::from_millis(delay_ms));
        agent.kill9();
        agent.restart();
        let v = agent.wait_for(&id, "ran after the restart", running);
        let ids = family_containers(&family);
        assert_eq!(
            ids.len(),
            4,
            "three containers and one pause container, none twice (kill after {delay_ms} ms): {v}"
        );
        let pause = berth_testkit::docker_cli(&[
            "ps",
            "-q",
            "--no-trunc",
            "--filter",
            &format!("label=berth.family={family}"),
            "--filter",
            "label=berth.container=~internal~berth~pause",
        ]);
        let pause = pause.trim();
        assert_eq!(pause.lines().count(), 1, "one running pause container");
        for c in ["c0", "c1", "c2"] {
            let mode = berth_testkit::docker_cli(&[
                "ps",
                "-aq",
                "--filter",
                &format!("label=berth.family={family}"),
                "--filter",
                &format!("label=berth.container={c}"),
                "--format",
                "{{.ID}}",
            ]);
            let mode = berth_testkit::docker_cli(&[
                "inspect",
                "--format",
                "{{.HostConfig.NetworkMode}}",
                mode.trim(),
            ]);
            // Docker records the joined container by its full id.
            assert_eq!(
                mode.trim(),
                format!("container:{pause}"),
                "{c} joins the pause container's network namespace"
            );
            let state = berth_testkit::docker_cli(&[
                "ps",
                "-a",
                "--filter",
                &format!("label=berth.family={family}"),
                "--format",
                "{{.Names}} {{.Status}}",
            ]);
            assert!(
                v["containers"]
                    .as_array()
                    .is_some_and(|cs| cs.iter().all(|c| c["known"] == "RUNNING")),
                "every container runs after the restart (kill after {delay_ms} ms): {v}\n{state}\n{}",
                agent.log()
            );
        }
        let (code, _, err) = agent.cli(&["rm", &id]);
        assert_eq!(code, 0, "{err}");
        agent.wait_forgotten(&id);
        assert!(
            family_containers(&family).is_empty(),
            "cleanup removed every container, the pause container too"
        );
    }
}

/// The Docker bridge's gateway address as the agent computes it (the network's gateway, else the
/// first address of its subnet).
fn bridge_gateway() -> std::net::Ipv4Addr {
    let out = berth_testkit::docker_cli(&[
        "network",
        "inspect",
        "bridge",
        "--format",
        "{{json .IPAM.Config}}",
    ]);
    let config: Value = serde_json::from_str(out.trim()).expect("IPAM JSON");
    let entry = config
        .as_array()
        .and_then(|a| {
            a.iter()
                .find(|c| c["Subnet"].as_str().is_some_and(|s| !s.contains(':')))
        })
        .expect("an IPv4 subnet on bridge");
    if let Some(g) = entry["Gateway"].as_str().filter(|g| !g.is_empty()) {
        return g.parse().expect("gateway");
    }
    let subnet = entry["Subnet"].as_str().expect("subnet");
    let base: std::net::Ipv4Addr = subnet.split('/').next().expect("base").parse().expect("ip");
    std::net::Ipv4Addr::from(u32::from(base) + 1)
}

#[test]
fn a_bridge_listener_that_cannot_bind_is_a_warning_and_host_tasks_still_run() {
    let dir = tempfile::tempdir().expect("tmp");
    // Someone else holds the agent's port on the bridge's gateway: its bridge listener cannot bind.
    let taken = std::net::TcpListener::bind((bridge_gateway(), 0)).expect("bind on the bridge");
    let port = taken.local_addr().expect("addr").port();
    let mut agent = Agent::unstarted_in(dir, "1h", Launch::default());
    agent.port = port;
    agent.restart();
    let log = agent.log();
    let warning = log
        .lines()
        .find(|l| l.contains("cannot listen on the Docker bridge's gateway"))
        .unwrap_or_else(|| panic!("no warning: {log}"));
    assert!(warning.contains("WARN"), "{warning}");
    assert!(warning.contains("--metadata-advertise"), "{warning}");
    assert!(
        warning.contains("host and none tasks are not affected"),
        "{warning}"
    );
    assert_eq!(
        warning.matches("Address already in use").count(),
        1,
        "the errno once: {warning}"
    );
    let family = unique_name("agent-nobridge-");
    let _g = FamilyGuard(family.clone());
    let mut c = container("a", "echo ran-on-the-host-network");
    c["essential"] = json!(true);
    let def = json!({"family": family, "networkMode": "host", "containerDefinitions": [c]});
    let id = agent.submit(&def);
    let v = agent.wait_for(&id, "stopped", stopped);
    assert_eq!(v["exitCode"], 0, "{v}\n{}", agent.log());
    // The operator's main listener still answers on loopback.
    assert!(
        http_get(port, "/metrics").contains("berth_"),
        "{}",
        agent.log()
    );
}

#[test]
fn a_metadata_port_in_use_on_loopback_stops_the_agent_with_the_errno_once() {
    let dir = tempfile::tempdir().expect("tmp");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["agent", "--data-dir"])
        .arg(dir.path().join("data"))
        .arg("--api-socket")
        .arg(dir.path().join("api.sock"))
        .args(["--metadata-addr", &addr])
        .output()
        .expect("berth agent runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains(&format!("cannot listen on {addr}: ")), "{err}");
    assert_eq!(err.matches("Address already in use").count(), 1, "{err}");
}

#[test]
fn the_id_prefix_ps_prints_works_for_inspect_logs_stop_and_rm() {
    let agent = Agent::start("1h");
    let family = unique_name("agent-prefix-");
    let _g = FamilyGuard(family.clone());
    let mut c = container("a", &format!("echo prefix-logs; {SERVE}"));
    c["essential"] = json!(true);
    let id = agent.submit(&json!({"family": family, "containerDefinitions": [c]}));
    agent.wait_for(&id, "ran", running);
    // The id as `berth ps` prints it.
    let (_, ps, _) = agent.cli(&["ps"]);
    let short = ps
        .lines()
        .find(|l| l.contains(&family))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("no row for {family}: {ps}"))
        .to_string();
    assert!(
        short.len() < id.len() && id.starts_with(&short),
        "{short} {id}"
    );
    let (code, out, err) = agent.cli(&["inspect", "--output", "json", &short]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&out).expect("JSON")["task"],
        id.as_str()
    );
    let (code, out, err) = berth_logs(&agent, &short, "a");
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("prefix-logs"), "{out}");
    let (code, out, err) = agent.cli(&["stop", &short]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), format!("stopping {id}"));
    let v = agent.wait_for(&id, "stopped", stopped);
    assert_eq!(v["stoppedReason"], "stopped through the API");
    let (code, out, err) = agent.cli(&["rm", &short]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), format!("removing {id}"));
    agent.wait_forgotten(&id);
    assert!(family_containers(&family).is_empty(), "containers removed");
    let (code, _, err) = agent.cli(&["stop", &short]);
    assert_eq!(code, 1);
    assert!(err.contains(&format!("no task {short}")), "{err}");
}

/// `berth submit --tag` reaches the task's `TaskTags` and ECS's `ECS_CONTAINER_INSTANCE_TAGS` the
/// agent's `ContainerInstanceTags`: a host-mode container reads its `/taskWithTags` from inside.
#[test]
fn submit_tags_and_the_agents_instance_tags_reach_task_with_tags() {
    let mut agent = Agent::start("1h");
    agent.kill9();
    agent.restart_env(&[], &[("ECS_CONTAINER_INSTANCE_TAGS", r#"{"rack":"r9"}"#)]);
    let family = unique_name("agent-tags-");
    let _g = FamilyGuard(family.clone());
    let out = agent.dir.path().join("out");
    std::fs::create_dir(&out).expect("out dir");
    let mut reader = container(
        "reader",
        "wget -qO /out/tags.json \"$ECS_CONTAINER_METADATA_URI_V4/taskWithTags\"",
    );
    reader["mountPoints"] = json!([{"sourceVolume": "out", "containerPath": "/out"}]);
    let def = json!({
        "family": family,
        "networkMode": "host",
        "tags": [{"key": "team", "value": "db"}, {"key": "env", "value": "prod"}],
        "volumes": [{"name": "out", "host": {"sourcePath": out.display().to_string()}}],
        "containerDefinitions": [reader],
    });
    let file = agent.dir.path().join("t.json");
    std::fs::write(&file, def.to_string()).expect("write");
    let path = file.to_str().expect("utf-8");
    let (code, stdout, err) = agent.cli(&["submit", "--wait", "--tag", "team=web", path]);
    assert_eq!(code, 0, "{stdout}{err}\n{}", agent.log());
    let text = std::fs::read_to_string(out.join("tags.json")).expect("tags.json written");
    let v: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(v["TaskTags"], json!({"env": "prod", "team": "web"}), "{v}");
    assert_eq!(v["ContainerInstanceTags"], json!({"rack": "r9"}), "{v}");
    // A bad tag is a usage error of the client naming the option (the agent checks it again:
    // crates/berth-api/tests/control_http.rs); nothing is submitted.
    let (code, _, err) = agent.cli(&["submit", "--tag", "aws:x=1", path]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("'--tag <KEY=VALUE>'") && err.contains("aws: prefix is reserved"),
        "{err}"
    );
}

/// GET a path of the agent's introspection API: (status, the JSON body).
fn introspect(agent: &Agent, path: &str) -> (u16, Value) {
    let out = http_get(agent.introspection_port, path);
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let v = serde_json::from_str(body).unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {out}"));
    (status, v)
}

/// `docker inspect -f FORMAT NAME`, trimmed.
fn docker_inspect(name: &str, format: &str) -> String {
    let out = Command::new("docker")
        .args(["inspect", "-f", format, name])
        .output()
        .expect("docker inspect");
    assert!(out.status.success(), "docker inspect {name}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Removes a family's containers, then a task volume of theirs, when dropped (also when the test
/// fails before `berth rm` cleans them up).
struct TaskVolumeGuard {
    family: String,
    volume: String,
}

impl Drop for TaskVolumeGuard {
    fn drop(&mut self) {
        drop(FamilyGuard(self.family.clone()));
        let _ = Command::new("docker")
            .args(["volume", "rm", "-f", &self.volume])
            .output();
    }
}

#[test]
fn the_introspection_api_lists_the_agents_tasks_with_their_docker_ids() {
    let mut agent = Agent::start("1h");
    let family = unique_name("agent-introspect-");
    let _g = FamilyGuard(family.clone());
    let mut web = container("web", SERVE);
    web["portMappings"] = json!([{"containerPort": 8080, "hostPort": 0}]);
    web["mountPoints"] = json!([{"sourceVolume": "data", "containerPath": "/data"}]);
    let mut side = container("side", SERVE);
    side["essential"] = json!(false);
    let def = json!({"family": family, "revision": 4, "containerDefinitions": [web, side],
                     "volumes": [{"name": "data",
                                  "dockerVolumeConfiguration": {"scope": "task", "driver": "local"}}]});
    let id = agent.submit(&def);
    // berth names a task's volume `berth-<first 12 of the task id>-<volume>`.
    let _v = TaskVolumeGuard {
        family: family.clone(),
        volume: format!("berth-{}-data", &id[..12]),
    };
    agent.wait_within(Duration::from_secs(240), &id, "running", running);

    let (status, meta) = introspect(&agent, "/v1/metadata");
    assert_eq!(status, 200, "{meta}");
    assert_eq!(meta["Cluster"], "default");
    let instance = meta["ContainerInstanceArn"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let prefix = "arn:aws:ecs:local-1:000000000000:container-instance/default/";
    assert!(
        instance.starts_with(prefix)
            && instance[prefix.len()..].len() == 32
            && instance[prefix.len()..]
                .bytes()
                .all(|b| b.is_ascii_hexdigit()),
        "{meta}"
    );
    assert!(
        meta["Version"]
            .as_str()
            .is_some_and(|v| v.starts_with(&format!("berth - v{}", env!("CARGO_PKG_VERSION")))),
        "{meta}"
    );

    let (status, all) = introspect(&agent, "/v1/tasks");
    assert_eq!(status, 200, "{all}");
    let tasks = all["Tasks"].as_array().expect("Tasks");
    assert_eq!(tasks.len(), 1, "{all}");
    let task = &tasks[0];
    let arn = task["Arn"].as_str().unwrap_or_default().to_string();
    assert_eq!(
        arn,
        format!("arn:aws:ecs:local-1:000000000000:task/default/{id}")
    );
    assert_eq!(task["Family"], family.as_str());
    assert_eq!(task["Version"], "4", "the revision, as a string");
    assert_eq!(
        (task["KnownStatus"].as_str(), task["DesiredStatus"].as_str()),
        (Some("RUNNING"), Some("RUNNING"))
    );
    let containers = task["Containers"].as_array().expect("Containers");
    let mut names: Vec<&str> = containers
        .iter()
        .filter_map(|c| c["Name"].as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["side", "web"]);
    // Every id, name, image id, mount and binding is Docker's own.
    for c in containers {
        let docker_name = c["DockerName"].as_str().expect("DockerName");
        assert_eq!(c["DockerId"], docker_inspect(docker_name, "{{.Id}}"), "{c}");
        assert_eq!(
            c["ImageID"],
            docker_inspect(docker_name, "{{.Image}}"),
            "{c}"
        );
        assert_eq!(c["Image"], test_image(), "{c}");
        assert!(
            c["CreatedAt"].is_string() && c["StartedAt"].is_string(),
            "{c}"
        );
        assert!(
            c.get("Networks").is_none(),
            "bridge mode has no Networks: {c}"
        );
    }
    let web = containers.iter().find(|c| c["Name"] == "web").expect("web");
    let web_name = web["DockerName"].as_str().unwrap_or_default();
    let volume = docker_inspect(
        web_name,
        "{{range .Mounts}}{{if eq .Destination \"/data\"}}{{.Name}}{{end}}{{end}}",
    );
    assert_eq!(
        volume,
        format!("berth-{}-data", &id[..12]),
        "the task volume is mounted"
    );
    assert!(
        web["Volumes"].as_array().is_some_and(|v| v
            .iter()
            .any(|m| m["DockerName"] == volume.as_str() && m["Destination"] == "/data")),
        "{web}"
    );
    let host_port: u64 = docker_inspect(
        web_name,
        "{{(index (index .NetworkSettings.Ports \"8080/tcp\") 0).HostPort}}",
    )
    .parse()
    .expect("a bound host port");
    let ports = web["Ports"].as_array().expect("Ports");
    assert!(!ports.is_empty(), "{web}");
    for p in ports {
        assert_eq!(
            p,
            &json!({"ContainerPort": 8080, "Protocol": "tcp", "HostPort": host_port})
        );
    }

    // The lookups find it by a 12-character prefix, the whole id, and its ARN.
    let web_id = web["DockerId"].as_str().unwrap_or_default().to_string();
    for query in [
        format!("dockerid={}", &web_id[..12]),
        format!("dockerid={web_id}"),
        format!("taskarn={arn}"),
    ] {
        let (status, t) = introspect(&agent, &format!("/v1/tasks?{query}"));
        assert_eq!(
            (status, t["Arn"].as_str()),
            (200, Some(arn.as_str())),
            "{query}: {t}"
        );
        assert_eq!(t["Containers"].as_array().map(Vec::len), Some(2), "{query}");
    }
    // Unknown ones are 404, both at once 400, each with ECS's empty task and the reason.
    for (query, code) in [
        ("dockerid=zzzzzzzzzzzz".to_string(), 404),
        (format!("taskarn={arn}0"), 404),
        (format!("dockerid={web_id}&taskarn={arn}"), 400),
    ] {
        let (status, t) = introspect(&agent, &format!("/v1/tasks?{query}"));
        assert_eq!(status, code, "{query}: {t}");
        assert_eq!(t["Arn"], "", "{query}");
        assert!(t["Error"].is_string(), "{query}: {t}");
    }

    // After a restart the resumed task is listed with the same ids, the instance keeps its ARN.
    agent.kill9();
    agent.restart();
    agent.wait_within(Duration::from_secs(240), &id, "running", running);
    let (_, meta) = introspect(&agent, "/v1/metadata");
    assert_eq!(meta["ContainerInstanceArn"], instance.as_str());
    let (status, t) = introspect(&agent, &format!("/v1/tasks?dockerid={web_id}"));
    assert_eq!(
        (status, t["Arn"].as_str()),
        (200, Some(arn.as_str())),
        "{t}"
    );

    // Stopped, it is still listed until it is cleaned up; then it is gone.
    let (code, _, err) = agent.cli(&["stop", &id]);
    assert_eq!(code, 0, "{err}");
    agent.wait_within(Duration::from_secs(240), &id, "stopped", stopped);
    // The introspection API reads the actor's published snapshot, which can trail the control
    // API's answer by a moment: it must agree within a few seconds.
    let t0 = Instant::now();
    let t = loop {
        let (_, t) = introspect(&agent, &format!("/v1/tasks?taskarn={arn}"));
        if t["KnownStatus"] == "STOPPED" || t0.elapsed() > Duration::from_secs(5) {
            break t;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(t["KnownStatus"], "STOPPED", "{t}");
    assert_eq!(t["DesiredStatus"], "STOPPED", "{t}");
    let (code, _, err) = agent.cli(&["rm", &id]);
    assert_eq!(code, 0, "{err}");
    agent.wait_forgotten(&id);
    assert_eq!(introspect(&agent, "/v1/tasks").1, json!({"Tasks": []}));
    assert_eq!(
        introspect(&agent, &format!("/v1/tasks?taskarn={arn}")).0,
        404
    );
    let out = Command::new("docker")
        .args(["volume", "inspect", &volume])
        .output()
        .expect("docker volume inspect");
    assert!(
        !out.status.success(),
        "the cleanup removed the task volume {volume}"
    );
}

#[test]
fn an_introspection_port_in_use_is_a_warning_and_served_once_free() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let mut agent = Agent::start("1h");
    agent.kill9();
    agent.introspection_port = port;
    agent.restart();
    // The agent answers (restart waited for `ps`) although the port is taken.
    let log = agent.log();
    assert!(
        log.contains(&format!(
            "cannot listen on 127.0.0.1:{port} for the introspection API: Address already in use (os error 98); retrying in 1s"
        )),
        "{log}"
    );
    drop(taken);
    let t = Instant::now();
    loop {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the introspection API never listened: {}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(introspect(&agent, "/v1/tasks"), (200, json!({"Tasks": []})));
    // SIGTERM: the agent exits 0 and nothing answers on the port any more.
    assert_eq!(agent.term().0, Some(0));
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
}
