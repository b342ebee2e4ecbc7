//! Robust pulls against a real registry: retries until the registry comes back, no retry for a
//! missing repository, and one pull for two tasks that need the same image at the same time.

use berth_engine::{Command, PullBehavior, RunConfig, TaskState, run_task};
use berth_testkit::{registry, registry_log, test_image, unique_name};

/// `docker ARGS`, which must succeed.
fn docker(args: &[&str]) {
    berth_testkit::docker_cli(args);
}
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command as Proc, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// A registry of this test's own (so it can be stopped and started), on a free loopback port.
struct OwnRegistry {
    dir: tempfile::TempDir,
    addr: String,
    child: Option<Child>,
}

impl OwnRegistry {
    fn new() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let dir = tempfile::tempdir().expect("tmp");
        let addr = format!("127.0.0.1:{port}");
        let config = format!(
            "version: 0.1\nlog: {{level: info}}\nstorage: {{filesystem: {{rootdirectory: {}}}, delete: {{enabled: true}}}}\nhttp: {{addr: {addr}}}\n",
            dir.path().join("data").display()
        );
        std::fs::write(dir.path().join("config.yml"), config).expect("config");
        let mut r = OwnRegistry {
            dir,
            addr,
            child: None,
        };
        r.start();
        r
    }

    fn start(&mut self) {
        let log = std::fs::File::create(self.dir.path().join("log")).expect("log");
        let child = Proc::new("docker-registry")
            .arg("serve")
            .arg(self.dir.path().join("config.yml"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("docker-registry starts (scripts/test installs Debian's docker-registry)");
        self.child = Some(child);
        let t = Instant::now();
        while std::net::TcpStream::connect(&self.addr).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "registry did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for OwnRegistry {
    fn drop(&mut self) {
        self.stop();
    }
}

struct LocalTag(String);
impl Drop for LocalTag {
    fn drop(&mut self) {
        let _ = Proc::new("docker").args(["rmi", "-f", &self.0]).output();
    }
}

fn task_file(dir: &std::path::Path, image: &str) -> std::path::PathBuf {
    let def = json!({"family": unique_name("pull-"), "containerDefinitions": [
        {"name": "a", "image": image, "command": ["true"], "dockerLabels": {"berth.test": "1"}}]});
    let file = dir.join("task.json");
    std::fs::write(&file, def.to_string()).expect("write");
    file
}

#[test]
fn a_pull_that_fails_twice_then_succeeds_ends_in_a_running_task() {
    let mut reg = OwnRegistry::new();
    let image = format!("{}/berth-retry:1", reg.addr);
    let _tag = LocalTag(image.clone());
    docker(&["tag", &test_image(), &image]);
    docker(&["push", "-q", &image]);
    docker(&["rmi", &image]);
    reg.stop();

    let dir = tempfile::tempdir().expect("tmp");
    let file = task_file(dir.path(), &image);
    let mut child = Proc::new(env!("CARGO_BIN_EXE_berth"))
        .args(["run", "--output", "json", "--data-dir"])
        .arg(dir.path())
        .arg(&file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("berth runs");
    // Restart the registry once berth has failed twice (it then waits ≥ 1.1 s before attempt 3).
    let stderr = child.stderr.take().expect("stderr");
    let mut failures = Vec::new();
    for line in BufReader::new(stderr).lines() {
        let line = line.expect("stderr line");
        if line.contains("pull failed") {
            failures.push(line.clone());
            if line.contains("attempt=2") {
                reg.start();
                break;
            }
        }
    }
    let out = child.wait_with_output().expect("berth ends");
    assert_eq!(failures.len(), 2, "two failed attempts: {failures:?}");
    assert!(
        failures.iter().all(|l| l.contains("retriable=true")),
        "{failures:?}"
    );
    assert!(
        failures[0].contains("connection refused"),
        "the registry's answer: {failures:?}"
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l["event"] == "pull" && l["phase"] == "done")
    );
    assert!(
        lines
            .iter()
            .any(|l| l["event"] == "task" && l["known"] == "RUNNING"),
        "the task ran"
    );
}

#[test]
fn a_missing_repository_is_tried_once() {
    let reg = registry();
    let image = format!("{reg}/{}:1", unique_name("berth-missing-"));
    let dir = tempfile::tempdir().expect("tmp");
    let file = task_file(dir.path(), &image);
    let t = Instant::now();
    let out = Proc::new(env!("CARGO_BIN_EXE_berth"))
        .args(["run", "--output", "json", "--data-dir"])
        .arg(dir.path())
        .arg(&file)
        .output()
        .expect("berth runs");
    let elapsed = t.elapsed();
    assert_eq!(out.status.code(), Some(125));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let failures: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("pull failed"))
        .collect();
    assert_eq!(failures.len(), 1, "one attempt only: {stderr}");
    assert!(failures[0].contains("retriable=false"), "{stderr}");
    assert!(
        failures[0].contains("manifest unknown"),
        "the registry's answer: {stderr}"
    );
    // A retry would have waited at least 0.55 s.
    assert!(elapsed < Duration::from_millis(3000), "took {elapsed:?}");
    let summary: Value = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["event"] == "summary")
        .expect("summary");
    let reason = summary["stoppedReason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&image),
        "the message names the image: {reason}"
    );
}

/// Pull requests for `repo:1` in the registry's access log.
fn manifest_requests(log: &std::path::Path, repo: &str) -> usize {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let needle = format!("\"HEAD /v2/{repo}/manifests/1 ");
    text.matches(&needle).count()
}

#[tokio::test]
async fn two_tasks_needing_the_same_image_cause_one_pull() {
    let reg = registry();
    let log = registry_log().expect("BERTH_TEST_REGISTRY_LOG: run through scripts/test");
    let repo = unique_name("berth-shared-");
    let image = format!("{reg}/{repo}:1");
    let _tag = LocalTag(image.clone());
    docker(&["tag", &test_image(), &image]);
    docker(&["push", "-q", &image]);
    docker(&["rmi", &image]);
    let before = manifest_requests(&log, &repo);

    let docker = berth_docker::connect(None).await.expect("docker");
    let rt = Arc::new(berth_docker::DockerRuntime::new(docker));
    let data_dir = tempfile::tempdir().expect("tmp");
    let mut runs = Vec::new();
    for _ in 0..2 {
        let def = berth_model::parse(
            &json!({"family": unique_name("shared-"), "containerDefinitions": [
                {"name": "a", "image": image, "command": ["true"], "dockerLabels": {"berth.test": "1"}}]})
            .to_string(),
        )
        .expect("valid")
        .definition;
        let state = TaskState::new(berth_engine::new_task_id(), def, 0);
        let (rtx, _rrx) = mpsc::unbounded_channel();
        let (_ctx, crx) = mpsc::channel::<Command>(1);
        let (stx, _srx) = watch::channel(state.clone());
        let config = RunConfig {
            pull_behavior: PullBehavior::Always,
            ..RunConfig::new(data_dir.path().to_path_buf())
        };
        let rt2 = rt.clone();
        runs.push(tokio::spawn(async move {
            let done = run_task(rt2.clone(), state, config, rtx, crx, stx).await;
            berth_engine::cleanup_docker(&*rt2, &done).await;
            done
        }));
    }
    for r in runs {
        let done = r.await.expect("task");
        assert_eq!(berth_engine::report::task_exit_code(&done), 0, "{done:?}");
    }
    // The registry writes its access log line when the answer is sent; give it a moment.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        manifest_requests(&log, &repo) - before,
        1,
        "one pull in the registry's log"
    );
}
