//! The task metadata endpoint end to end, against the real Docker Engine: a container of a
//! `berth run` task reads its own task's metadata from inside (busybox `wget`), in host and in
//! bridge network mode, and what it read matches the task (names, statuses, Docker ids, the exit
//! code of a container that already exited, the health of a health-checked one). Then a real
//! third-party client, the PyPI package `ecs-container-exporter`, installed in a throwaway
//! virtualenv, turns berth's `/task` and `/task/stats` into its container CPU and memory metrics.
//!
//! Every server listens on 127.0.0.1 (port 0) or on the Docker bridge's own gateway address.

use berth_testkit::berth_run::{BerthRun, test_container};
use berth_testkit::{FamilyGuard, test_image, unique_name};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A shell loop that ends promptly on SIGTERM.
const SERVE: &str = "trap 'exit 0' TERM; while true; do sleep 0.1; done";

/// A container definition running `script` in the test image, labelled for leak cleanup.
fn container(name: &str, script: &str) -> Value {
    test_container(name, script)
}

/// Run a task whose `reader` container writes what it read from the endpoint to a host directory;
/// returns (berth's summary line, task JSON, own-container JSON, the URI the container was given).
fn read_from_inside(mode: &str) -> (Value, Value, Value, String) {
    let family = unique_name(&format!("berth-meta-{mode}-"));
    let _cleanup = FamilyGuard(family.clone());
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("out");
    std::fs::create_dir(&out).expect("out dir");
    // Read until the task as a whole is RUNNING (this container's start is confirmed by Docker's
    // event a moment after its process runs), then read this container's own answer.
    let reader = "for i in $(seq 100); do wget -qO /out/task.json \"$ECS_CONTAINER_METADATA_URI_V4/task\" && \
         grep -q '\"Revision\":\"0\",\"DesiredStatus\":\"RUNNING\",\"KnownStatus\":\"RUNNING\"' /out/task.json && break; \
         sleep 0.1; done; wget -qO /out/self.json \"$ECS_CONTAINER_METADATA_URI_V4\"; \
         echo \"$ECS_CONTAINER_METADATA_URI_V4\" > /out/uri";
    let mut checked = container("checked", SERVE);
    checked["essential"] = json!(false);
    checked["healthCheck"] =
        json!({"command": ["CMD-SHELL", "true"], "interval": 5, "timeout": 2, "retries": 1});
    let mut done = container("done", "exit 3");
    done["essential"] = json!(false);
    let mut reader = container("reader", reader);
    reader["dependsOn"] = json!([
        {"containerName": "done", "condition": "COMPLETE"},
        {"containerName": "checked", "condition": "HEALTHY"}
    ]);
    reader["mountPoints"] = json!([{"sourceVolume": "out", "containerPath": "/out"}]);
    let def = json!({
        "family": family,
        "networkMode": mode,
        "volumes": [{"name": "out", "host": {"sourcePath": out.display().to_string()}}],
        "containerDefinitions": [done, checked, reader],
    });
    let run = BerthRun::new(
        env!("CARGO_BIN_EXE_berth"),
        dir.path().join("task.json"),
        &def,
    )
    .prefer_cached()
    .args(["--metadata-addr", "127.0.0.1:0", "--cluster", "testcluster"])
    .data_dir(dir.path().join("data"))
    .output();
    let (stdout, stderr) = (&run.stdout, &run.stderr);
    assert_eq!(run.code, Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let summary: Value = run
        .summary()
        .unwrap_or_else(|| panic!("no summary; stderr:\n{stderr}"));
    let read = |name: &str| -> Value {
        let text = std::fs::read_to_string(out.join(name))
            .unwrap_or_else(|e| panic!("{name} not written ({e}); stderr:\n{stderr}"));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: not JSON ({e}): {text}"))
    };
    let uri = std::fs::read_to_string(out.join("uri")).expect("uri written");
    (
        summary,
        read("task.json"),
        read("self.json"),
        uri.trim().to_string(),
    )
}

fn check_read(mode: &str, summary: &Value, task: &Value, me: &Value) {
    let docker_id = |name: &str| -> Value {
        summary["containers"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["name"] == name))
            .map(|c| c["dockerId"].clone())
            .unwrap_or_else(|| panic!("{name} not in summary {summary}"))
    };
    let task_id = summary["task"].as_str().expect("task id");
    assert_eq!(task["Cluster"], "testcluster");
    assert!(
        task["TaskARN"]
            .as_str()
            .is_some_and(|a| a.starts_with("arn:aws:ecs:local-1:000000000000:")
                && a.ends_with(&format!(":task/testcluster/{task_id}"))),
        "{task}"
    );
    assert_eq!(task["Revision"], "0");
    assert_eq!(task["DesiredStatus"], "RUNNING");
    assert_eq!(task["KnownStatus"], "RUNNING");
    assert_eq!(task["LaunchType"], "EC2");
    assert!(
        task["PullStartedAt"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{task}"
    );
    let cs = task["Containers"].as_array().expect("containers");
    let names: Vec<&str> = cs.iter().filter_map(|c| c["Name"].as_str()).collect();
    assert_eq!(names, ["done", "checked", "reader"], "{task}");
    for c in cs {
        let name = c["Name"].as_str().unwrap_or_default();
        assert_eq!(c["DockerId"], docker_id(name), "{name}");
        assert_eq!(c["Type"], "NORMAL");
        assert_eq!(c["Image"], test_image());
        assert!(
            c["ImageID"]
                .as_str()
                .is_some_and(|i| i.starts_with("sha256:")),
            "{c}"
        );
        assert_eq!(c["Labels"]["berth.test"], "1");
        assert!(
            c["CreatedAt"].is_string() && c["StartedAt"].is_string(),
            "{c}"
        );
        assert_eq!(c["Networks"][0]["NetworkMode"], mode, "{c}");
    }
    let (done, checked, reader) = (&cs[0], &cs[1], &cs[2]);
    assert_eq!(done["KnownStatus"], "STOPPED");
    assert_eq!(done["ExitCode"], 3);
    assert!(done["FinishedAt"].is_string());
    assert_eq!(checked["KnownStatus"], "RUNNING");
    assert_eq!(checked["Health"]["status"], "HEALTHY", "{checked}");
    assert!(checked["Health"]["statusSince"].is_string(), "{checked}");
    assert!(checked.get("ExitCode").is_none());
    assert_eq!(reader["KnownStatus"], "RUNNING");
    assert_eq!(reader["Volumes"][0]["Destination"], "/out", "{reader}");
    if mode == "bridge" {
        // Running containers have their bridge address.
        assert!(
            reader["Networks"][0]["IPv4Addresses"][0].is_string(),
            "{reader}"
        );
    }
    // The container's own answer is itself.
    assert_eq!(me["Name"], "reader");
    assert_eq!(me["DockerId"], docker_id("reader"));
    assert_eq!(me["DockerName"], reader["DockerName"]);
}

#[test]
fn a_host_mode_container_reads_its_task_from_inside() {
    let (summary, task, me, uri) = read_from_inside("host");
    assert!(uri.starts_with("http://127.0.0.1:"), "{uri}");
    check_read("host", &summary, &task, &me);
}

#[test]
fn a_bridge_mode_container_reads_its_task_through_the_bridge_gateway() {
    let (summary, task, me, uri) = read_from_inside("bridge");
    assert!(
        !uri.starts_with("http://127."),
        "bridge containers cannot reach loopback: {uri}"
    );
    check_read("bridge", &summary, &task, &me);
}

/// Kills a child process we started (by its own handle) when dropped.
struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// GET http://127.0.0.1:port/path (HTTP/1.0, read to EOF); None when nothing answers.
fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    Some(text)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Runs the exporter on 127.0.0.1 only (its CLI would listen on every address), without its
/// cache file in /tmp (so a stale cache of another run cannot be read).
const EXPORTER: &str = "
import prometheus_client
import ecs_container_exporter.main as m
m.start_http_server = lambda port: prometheus_client.start_http_server(port, addr='127.0.0.1')
m.ECSContainerExporter.cache_load_task_metadata = lambda self: None
m.ECSContainerExporter.cache_write_task_metadata = lambda self, data: None
m.main()
";

#[test]
fn ecs_container_exporter_reads_cpu_and_memory_from_berth() {
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("temp dir");
    // The exporter, from PyPI, in a virtualenv removed with the temp dir.
    let venv = dir.path().join("venv");
    let ok = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .expect("python3 runs (scripts/test installs python3-venv)");
    assert!(ok.success(), "python3 -m venv failed");
    let pip = Command::new(venv.join("bin/pip"))
        .args([
            "install",
            "-q",
            "--disable-pip-version-check",
            "ecs-container-exporter==2.3.0",
        ])
        .output()
        .expect("pip runs");
    assert!(
        pip.status.success(),
        "pip install ecs-container-exporter failed:\n{}",
        String::from_utf8_lossy(&pip.stderr)
    );

    let family = unique_name("berth-meta-exporter-");
    let _cleanup = FamilyGuard(family.clone());
    let mut app = container("app", SERVE);
    app["cpu"] = json!(128);
    app["memory"] = json!(64);
    let mut busy = container("busy", "trap 'exit 0' TERM; while true; do :; done");
    busy["essential"] = json!(false);
    let def = json!({"family": family, "containerDefinitions": [app, busy]});
    let berth = BerthRun::new(
        env!("CARGO_BIN_EXE_berth"),
        dir.path().join("task.json"),
        &def,
    )
    .prefer_cached()
    .args(["--metadata-addr", "127.0.0.1:0"])
    .data_dir(dir.path().join("data"))
    .command()
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .expect("berth starts");
    let mut berth = Kill(berth);

    // The exporter is pointed at the URI berth gave the app container.
    let deadline = Instant::now() + Duration::from_secs(30);
    let uri = loop {
        let out = Command::new("docker")
            .args(["ps", "-q", "--filter"])
            .arg(format!("label=berth.family={family}"))
            .args(["--filter", "label=berth.container=app"])
            .output()
            .expect("docker ps");
        let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !id.is_empty() {
            let env = Command::new("docker")
                .args(["inspect", "--format", "{{json .Config.Env}}", &id])
                .output()
                .expect("docker inspect");
            let env: Vec<String> = serde_json::from_slice(&env.stdout).unwrap_or_default();
            if let Some(v) = env
                .iter()
                .find_map(|e| e.strip_prefix("ECS_CONTAINER_METADATA_URI="))
            {
                break v.to_string();
            }
        }
        assert!(Instant::now() < deadline, "the app container did not start");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(uri.contains("/v3/"), "{uri}");

    let port = free_port();
    let exporter = Command::new(venv.join("bin/python"))
        .args(["-c", EXPORTER])
        .env("ECS_CONTAINER_METADATA_URI", &uri)
        .env("EXPORTER_PORT", port.to_string())
        .env("INTERVAL", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("exporter starts");
    let mut exporter = Kill(exporter);

    // It waits 5 s before its first read of /task, then serves; each scrape samples /task/stats
    // twice, INTERVAL apart.
    let deadline = Instant::now() + Duration::from_secs(40);
    let metrics = loop {
        if let Some(text) = http_get(port, "/metrics")
            && text.contains("ecs_task_cpu_usage_ratio{container_name=\"app\"}")
        {
            break text;
        }
        if let Ok(Some(status)) = exporter.0.try_wait() {
            let mut err = String::new();
            if let Some(mut e) = exporter.0.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            panic!("the exporter exited ({status}):\n{err}");
        }
        assert!(
            Instant::now() < deadline,
            "no container metrics from the exporter in time"
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    let value = |line_start: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(line_start))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {line_start} in:\n{metrics}"))
    };
    for name in ["app", "busy"] {
        let cpu = value(&format!(
            "ecs_task_cpu_usage_ratio{{container_name=\"{name}\"}}"
        ));
        let mem = value(&format!("ecs_task_mem_usage{{container_name=\"{name}\"}}"));
        assert!(
            cpu >= 0.0 && mem > 0.0,
            "{name}: cpu {cpu} mem {mem}\n{metrics}"
        );
    }
    // The limits come from /task (container CPU units and memory MiB).
    assert_eq!(value("ecs_task_cpu_limit{container_name=\"app\"}"), 128.0);
    assert_eq!(value("ecs_task_mem_limit{container_name=\"app\"}"), 64.0);
    // The busy loop shows as CPU use.
    assert!(
        value("ecs_task_cpu_usage_ratio{container_name=\"busy\"}") > 0.0,
        "{metrics}"
    );
    assert_eq!(value("ecs_task_exporter_status "), 1.0, "{metrics}");

    drop(exporter);
    // Stop the task cleanly (SIGTERM to our own child) and let berth clean up.
    let _ = Command::new("kill")
        .args(["-TERM", &berth.0.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(20);
    while berth.0.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("exporter test took {:?}", started.elapsed());
}
