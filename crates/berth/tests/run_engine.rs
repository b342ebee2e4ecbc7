//! End-to-end tests of `berth run` against the real Docker Engine: dependency conditions (checked
//! with Docker's own timestamps), terminal dependency failures, essential and non-essential exits,
//! reverse-order shutdown, stop timeouts, create/start/pull failures and cleanup.

use berth_testkit::berth_run::{BerthRun, test_container};
use berth_testkit::bollard;
use berth_testkit::{FamilyGuard, docker, family_containers, registry, unique_name};
use bollard::Docker;
use serde_json::{Value, json};
use std::process::Command;
use std::time::{Duration, Instant};

/// A finished `berth run`: its exit status and its JSON lines.
struct Run {
    code: i32,
    lines: Vec<Value>,
    stderr: String,
    family: String,
    _data_dir: tempfile::TempDir,
    /// Removes what the run left (with --keep) when the test ends.
    _guard: FamilyGuard,
}

impl Run {
    fn summary(&self) -> &Value {
        self.lines
            .iter()
            .find(|l| l["event"] == "summary")
            .unwrap_or_else(|| panic!("no summary line; stderr:\n{}", self.stderr))
    }

    fn container(&self, name: &str) -> &Value {
        self.summary()["containers"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["name"] == name))
            .unwrap_or_else(|| panic!("no container {name} in summary"))
    }

    fn docker_id(&self, name: &str) -> String {
        self.container(name)["dockerId"]
            .as_str()
            .unwrap_or_else(|| panic!("{name} has no docker id"))
            .to_string()
    }

    /// Containers of this run that Docker still has.
    fn leftovers(&self) -> Vec<String> {
        family_containers(&self.family)
    }
}

/// A container definition running `script` in the test image, labelled for leak cleanup.
fn c(name: &str, script: &str) -> Value {
    test_container(name, script)
}

/// A shell loop that ends promptly on SIGTERM (sh as PID 1 ignores signals without a trap).
const SERVE: &str = "trap 'exit 0' TERM; while true; do sleep 0.1; done";

fn berth_run(prefix: &str, containers: Vec<Value>, extra: &[&str]) -> Run {
    let family = unique_name(prefix);
    let def = json!({"family": family, "containerDefinitions": containers});
    berth_run_def(family, def, extra)
}

fn berth_run_def(family: String, def: Value, extra: &[&str]) -> Run {
    let data_dir = tempfile::tempdir().expect("temp dir");
    let file = data_dir.path().join("task.json");
    // The test image exists only locally: use it without asking any registry.
    let out = BerthRun::new(env!("CARGO_BIN_EXE_berth"), file, &def)
        .prefer_cached()
        .data_dir(data_dir.path())
        .args(extra)
        .output();
    Run {
        code: out.code.unwrap_or(-1),
        lines: out.lines(),
        stderr: out.stderr,
        _guard: FamilyGuard(family.clone()),
        family,
        _data_dir: data_dir,
    }
}

/// Docker's own (started, finished) timestamps of a container, as RFC 3339 strings comparable as text
/// once normalised to nanoseconds.
async fn docker_times(d: &Docker, id: &str) -> (String, String) {
    let r = d.inspect_container(id, None).await.expect("inspect");
    let s = r.state.expect("state");
    (
        norm(&s.started_at.unwrap_or_default()),
        norm(&s.finished_at.unwrap_or_default()),
    )
}

/// Normalise Docker's RFC 3339 times to a fixed width so string order is time order.
fn norm(t: &str) -> String {
    let (main, frac) = t
        .trim_end_matches('Z')
        .split_once('.')
        .unwrap_or((t.trim_end_matches('Z'), "0"));
    format!("{main}.{frac:0<9}Z")
}

#[tokio::test]
async fn start_condition_starts_the_dependent_after_the_dependency() {
    let d = docker().await;
    let mut b = c("b", "sleep 0.5");
    b["dependsOn"] = json!([{"containerName": "a", "condition": "START"}]);
    let mut a = c("a", SERVE);
    a["essential"] = json!(false);
    let run = berth_run("start", vec![a, b], &["--keep"]);
    assert_eq!(run.code, 0, "stderr: {}", run.stderr);
    let (a_started, _) = docker_times(&d, &run.docker_id("a")).await;
    let (b_started, _) = docker_times(&d, &run.docker_id("b")).await;
    assert!(b_started > a_started, "b {b_started} after a {a_started}");
}

#[tokio::test]
async fn complete_condition_is_met_by_a_failing_exit() {
    let d = docker().await;
    let mut a = c("a", "sleep 0.5; exit 3");
    a["essential"] = json!(false);
    let mut b = c("b", "true");
    b["dependsOn"] = json!([{"containerName": "a", "condition": "COMPLETE"}]);
    let run = berth_run("complete", vec![a, b], &["--keep"]);
    assert_eq!(run.code, 0, "stderr: {}", run.stderr);
    assert_eq!(run.container("a")["exitCode"], 3);
    let (_, a_finished) = docker_times(&d, &run.docker_id("a")).await;
    let (b_started, _) = docker_times(&d, &run.docker_id("b")).await;
    assert!(
        b_started > a_finished,
        "b {b_started} after a finished {a_finished}"
    );
}

#[tokio::test]
async fn success_condition_waits_for_exit_zero() {
    let d = docker().await;
    let mut a = c("a", "sleep 0.5; exit 0");
    a["essential"] = json!(false);
    let mut b = c("b", "exit 7");
    b["dependsOn"] = json!([{"containerName": "a", "condition": "SUCCESS"}]);
    let run = berth_run("success", vec![a, b], &["--keep"]);
    assert_eq!(
        run.code, 7,
        "the essential container's exit code; stderr: {}",
        run.stderr
    );
    let (_, a_finished) = docker_times(&d, &run.docker_id("a")).await;
    let (b_started, _) = docker_times(&d, &run.docker_id("b")).await;
    assert!(b_started > a_finished);
}

#[tokio::test]
async fn healthy_condition_waits_for_docker_health() {
    let d = docker().await;
    let mut a = c("a", &format!("sleep 1; touch /tmp/ready; {SERVE}"));
    a["essential"] = json!(false);
    a["healthCheck"] = json!({"command": ["CMD-SHELL", "test -f /tmp/ready"], "interval": 5, "timeout": 2, "retries": 3});
    let mut b = c("b", "true");
    b["dependsOn"] = json!([{"containerName": "a", "condition": "HEALTHY"}]);
    let run = berth_run("healthy", vec![a, b], &["--keep"]);
    assert_eq!(run.code, 0, "stderr: {}", run.stderr);
    let r = d
        .inspect_container(&run.docker_id("a"), None)
        .await
        .expect("inspect a");
    let log = r
        .state
        .and_then(|s| s.health)
        .and_then(|h| h.log)
        .unwrap_or_default();
    let first_ok = log
        .iter()
        .find(|l| l.exit_code == Some(0))
        .and_then(|l| l.end.clone())
        .expect("a passed a health check");
    let (b_started, _) = docker_times(&d, &run.docker_id("b")).await;
    assert!(
        b_started > norm(&first_ok),
        "b {b_started} after a healthy {first_ok}"
    );
}

#[tokio::test]
async fn success_on_a_failed_dependency_never_creates_the_dependent() {
    let mut a = c("a", "exit 1");
    a["essential"] = json!(false);
    let mut b = c("b", "true");
    b["dependsOn"] = json!([{"containerName": "a", "condition": "SUCCESS"}]);
    let run = berth_run("success-fail", vec![a, b], &[]);
    assert_eq!(run.code, 125, "stderr: {}", run.stderr);
    let b = run.container("b");
    assert_eq!(b["dockerId"], Value::Null, "b was never created");
    assert_eq!(b["exitCode"], 143);
    let reason = b["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("dependency a exited with code 1"),
        "{reason}"
    );
    assert_eq!(run.summary()["stoppedReason"], b["reason"]);
    assert!(run.leftovers().is_empty(), "cleanup removed a");
}

#[tokio::test]
async fn start_timeout_ends_a_task_whose_dependency_never_gets_healthy() {
    let mut a = c("a", SERVE);
    a["essential"] = json!(false);
    a["startTimeout"] = json!(2);
    a["healthCheck"] = json!({"command": ["CMD-SHELL", "false"], "interval": 30, "retries": 10});
    let mut b = c("b", "true");
    b["dependsOn"] = json!([{"containerName": "a", "condition": "HEALTHY"}]);
    let t = Instant::now();
    let run = berth_run("start-timeout", vec![a, b], &[]);
    assert_eq!(run.code, 125, "stderr: {}", run.stderr);
    let reason = run.container("b")["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(reason.contains("startTimeout of 2s"), "{reason}");
    assert!(
        t.elapsed().as_secs() < 20,
        "ended by the timer, not by health retries"
    );
    assert_eq!(run.summary()["known"], "STOPPED");
}

#[tokio::test]
async fn essential_exit_stops_the_rest_in_reverse_order_and_kills_what_ignores_sigterm() {
    let d = docker().await;
    // a <- b (START); c is essential and exits; b ignores SIGTERM and has stopTimeout 2.
    let mut a = c("a", SERVE);
    a["essential"] = json!(false);
    let mut b = c("b", "trap '' TERM; while true; do sleep 0.1; done");
    b["essential"] = json!(false);
    b["dependsOn"] = json!([{"containerName": "a", "condition": "START"}]);
    let mut cc = c("c", "sleep 1; exit 4");
    cc["dependsOn"] = json!([{"containerName": "b", "condition": "START"}]);
    let run = berth_run("essential", vec![a, b, cc], &["--keep"]);
    assert_eq!(run.code, 4, "stderr: {}", run.stderr);
    assert_eq!(
        run.summary()["stoppedReason"],
        "Essential container in task exited"
    );
    assert_eq!(
        run.container("b")["exitCode"],
        137,
        "b was killed after its stopTimeout"
    );
    let (_, a_fin) = docker_times(&d, &run.docker_id("a")).await;
    let (b_started, b_fin) = docker_times(&d, &run.docker_id("b")).await;
    assert!(
        a_fin > b_fin,
        "a ({a_fin}) stopped after its dependent b ({b_fin})"
    );
    let (b_s, b_f) = (
        time::OffsetDateTime::parse(&b_started, &time::format_description::well_known::Rfc3339),
        time::OffsetDateTime::parse(&b_fin, &time::format_description::well_known::Rfc3339),
    );
    if let (Ok(s), Ok(f)) = (b_s, b_f) {
        assert!(
            (f - s).whole_milliseconds() >= 2_900,
            "b lived through c's 1 s and its 2 s stopTimeout"
        );
    }
}

#[tokio::test]
async fn non_essential_exit_leaves_the_task_running() {
    let mut a = c("a", "exit 3");
    a["essential"] = json!(false);
    let b = c("b", "sleep 1.5");
    let run = berth_run("non-essential", vec![a, b], &[]);
    assert_eq!(run.code, 0, "stderr: {}", run.stderr);
    // The task was RUNNING after a had already exited, and stopped only with b.
    let a_stopped = run
        .lines
        .iter()
        .position(|l| l["event"] == "container" && l["container"] == "a" && l["known"] == "STOPPED")
        .expect("a stopped");
    let desired_stopped = run
        .lines
        .iter()
        .position(|l| l["event"] == "task" && l["desired"] == "STOPPED")
        .expect("task stopped");
    let b_stopped = run
        .lines
        .iter()
        .position(|l| l["event"] == "container" && l["container"] == "b" && l["known"] == "STOPPED")
        .expect("b stopped");
    assert!(a_stopped < desired_stopped && b_stopped <= desired_stopped + 1);
    assert_eq!(run.container("a")["exitCode"], 3);
    assert!(run.leftovers().is_empty());
}

#[tokio::test]
async fn create_failure_stops_the_task_with_dockers_reason_and_leaves_nothing() {
    // A bind mount of a host path that does not exist: Docker refuses the create (berth uses explicit
    // mounts, so Docker does not quietly create the path as root).
    let family = unique_name("create-fail");
    let missing = format!("/nonexistent-berth-test/{family}");
    let mut a = c("a", "true");
    a["mountPoints"] = json!([{"sourceVolume": "v", "containerPath": "/v"}]);
    let def = json!({"family": family, "containerDefinitions": [a],
                     "volumes": [{"name": "v", "host": {"sourcePath": missing}}]});
    let run = berth_run_def(family, def, &[]);
    assert_eq!(run.code, 125, "stderr: {}", run.stderr);
    let reason = run.container("a")["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        reason.starts_with("CannotCreateContainerError: "),
        "{reason}"
    );
    assert!(
        reason.contains("does not exist"),
        "Docker's message is kept: {reason}"
    );
    assert!(run.leftovers().is_empty());
    assert!(
        !std::path::Path::new(&missing).exists(),
        "the missing path was not created"
    );
}

#[tokio::test]
async fn start_failure_stops_the_task_with_dockers_reason_and_leaves_nothing() {
    let mut a = c("a", "true");
    a["command"] = json!(["/bin/does-not-exist"]);
    let run = berth_run("start-fail", vec![a], &[]);
    assert_eq!(run.code, 125, "stderr: {}", run.stderr);
    let reason = run.container("a")["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        reason.starts_with("CannotStartContainerError: "),
        "{reason}"
    );
    assert!(reason.contains("does-not-exist"), "{reason}");
    assert!(
        run.leftovers().is_empty(),
        "the created container was removed"
    );
}

#[tokio::test]
async fn missing_image_is_a_cannot_pull_error() {
    let mut a = c("a", "true");
    a["image"] = json!(format!("{}/berth-no-such-repo:1", registry()));
    let run = berth_run("pull-fail", vec![a], &[]);
    assert_eq!(run.code, 125, "stderr: {}", run.stderr);
    let reason = run.container("a")["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(reason.starts_with("CannotPullContainerError: "), "{reason}");
    assert!(
        reason.contains("manifest unknown") || reason.contains("not found"),
        "{reason}"
    );
    assert_eq!(
        run.summary()["stoppedReason"].as_str(),
        Some(reason.as_str())
    );
    let pulls: Vec<&Value> = run.lines.iter().filter(|l| l["event"] == "pull").collect();
    assert!(pulls.iter().any(|p| p["phase"] == "failed"));
}

#[tokio::test]
async fn scratch_volume_is_shared_and_the_task_directory_removed() {
    let mut a = c("a", "echo hi > /data/f");
    a["essential"] = json!(false);
    a["mountPoints"] = json!([{"sourceVolume": "scratch", "containerPath": "/data"}]);
    let mut b = c("b", "test \"$(cat /data/f)\" = hi");
    b["dependsOn"] = json!([{"containerName": "a", "condition": "SUCCESS"}]);
    b["mountPoints"] =
        json!([{"sourceVolume": "scratch", "containerPath": "/data", "readOnly": true}]);
    let family = unique_name("scratch");
    let def = json!({"family": family, "containerDefinitions": [a, b], "volumes": [{"name": "scratch", "host": {}}]});
    let dir = tempfile::tempdir().expect("tmp");
    let out = BerthRun::new(env!("CARGO_BIN_EXE_berth"), dir.path().join("t.json"), &def)
        .prefer_cached()
        .data_dir(dir.path())
        .output();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let tasks: Vec<_> = std::fs::read_dir(dir.path().join("tasks"))
        .expect("tasks dir")
        .collect();
    assert!(tasks.is_empty(), "task directory removed after the run");
}

#[test]
fn invalid_definition_exits_65_and_starts_nothing() {
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("bad.json");
    std::fs::write(
        &file,
        r#"{"family": "x", "containerDefinitions": [{"name": "a"}]}"#,
    )
    .expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["run", "--data-dir"])
        .arg(dir.path())
        .arg(&file)
        .output()
        .expect("berth runs");
    assert_eq!(out.status.code(), Some(65));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("containerDefinitions[0].image"), "{err}");
}

/// Start `berth run` on `containers`, wait until the task is RUNNING, and return the child with its
/// JSON lines so far.
fn start_until_running(
    prefix: &str,
    containers: Vec<Value>,
) -> (std::process::Child, Vec<Value>, tempfile::TempDir, String) {
    use std::io::BufRead;
    let family = unique_name(prefix);
    let def = json!({"family": family, "containerDefinitions": containers});
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("t.json");
    std::fs::write(&file, def.to_string()).expect("write");
    let mut child = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args([
            "run",
            "--output",
            "json",
            "--pull-behavior",
            "prefer-cached",
            "--pull-attempts",
            "1",
            "--data-dir",
        ])
        .arg(dir.path())
        .arg(&file)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("berth runs");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = Vec::new();
    let mut reader = std::io::BufReader::new(stdout);
    loop {
        let mut line = String::new();
        let n = reader.read_line(&mut line).expect("read");
        assert!(n > 0, "berth ended before the task ran: {lines:?}");
        let v: Value = serde_json::from_str(&line).expect("JSON");
        let running = v["event"] == "task" && v["known"] == "RUNNING";
        lines.push(v);
        if running {
            break;
        }
    }
    // Keep draining in the background so berth never blocks on a full pipe.
    std::thread::spawn(move || reader.lines().map_while(Result::ok).for_each(drop));
    (child, lines, dir, family)
}

fn signal(child: &std::process::Child, sig: &str) {
    let status = Command::new("kill")
        .args([format!("-{sig}"), child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
}

#[test]
fn ctrl_c_stops_the_task_cleanly_and_removes_its_containers() {
    let mut a = c("a", SERVE);
    a["essential"] = json!(false);
    let mut b = c("b", SERVE);
    b["dependsOn"] = json!([{"containerName": "a", "condition": "START"}]);
    let (mut child, _lines, _dir, family) = start_until_running("ctrl-c", vec![a, b]);
    let t = Instant::now();
    signal(&child, "INT");
    let status = child.wait().expect("berth ends");
    assert!(
        t.elapsed() < Duration::from_secs(15),
        "clean stop took {:?}",
        t.elapsed()
    );
    // b's trap exits 0 on SIGTERM: the essential container's exit code is berth's.
    assert_eq!(status.code(), Some(0));
    assert!(family_containers(&family).is_empty(), "containers removed");
}

#[test]
fn a_second_ctrl_c_kills_what_ignores_sigterm() {
    // b ignores SIGTERM and would get 30 s of grace: the second Ctrl-C must not wait for it.
    let mut b = c("b", "trap '' TERM; while true; do sleep 0.1; done");
    b["stopTimeout"] = json!(30);
    let (mut child, _lines, _dir, family) = start_until_running("ctrl-c-twice", vec![b]);
    let t = Instant::now();
    signal(&child, "INT");
    std::thread::sleep(Duration::from_millis(500));
    signal(&child, "INT");
    let status = child.wait().expect("berth ends");
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "kill took {:?}",
        t.elapsed()
    );
    assert_eq!(status.code(), Some(137), "SIGKILL's exit code");
    assert!(family_containers(&family).is_empty(), "containers removed");
}

#[test]
fn berth_gc_waits_while_a_run_uses_the_data_directory() {
    let (mut child, _lines, dir, _family) = start_until_running("gc-lock", vec![c("a", SERVE)]);
    let gc = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["gc", "--data-dir"])
        .arg(dir.path())
        .output()
        .expect("berth gc runs");
    signal(&child, "INT");
    let _ = child.wait();
    assert_eq!(
        gc.status.code(),
        Some(75),
        "{}",
        String::from_utf8_lossy(&gc.stderr)
    );
}

/// `berth run --keep` with text output: its exit code and standard output.
fn berth_run_text_keep(def: &Value, data_dir: &std::path::Path) -> (i32, String, String) {
    let file = data_dir.join("task.json");
    std::fs::write(&file, def.to_string()).expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args([
            "run",
            "--keep",
            "--pull-behavior",
            "prefer-cached",
            "--pull-attempts",
            "1",
            "--data-dir",
        ])
        .arg(data_dir)
        .arg(&file)
        .output()
        .expect("berth run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_kept_line_names_only_what_exists() {
    // No task-scoped volume: containers kept, no task directory was ever created.
    let family = unique_name("kept-nodir-");
    let _g = FamilyGuard(family.clone());
    let data = tempfile::tempdir().expect("tmp");
    let def = json!({"family": family, "containerDefinitions": [c("a", "exit 0")]});
    let (code, out, err) = berth_run_text_keep(&def, data.path());
    assert_eq!(code, 0, "{out}{err}");
    let kept: Vec<&str> = out.lines().filter(|l| l.starts_with("kept:")).collect();
    assert_eq!(kept.len(), 1, "{out}");
    assert!(
        kept[0].starts_with("kept: containers labelled berth.task="),
        "{out}"
    );
    assert!(!kept[0].contains(" and "), "no directory named: {out}");
    assert_eq!(family_containers(&family).len(), 1, "the container is kept");
    let tasks = data.path().join("tasks");
    assert!(
        std::fs::read_dir(&tasks).map_or(true, |mut d| d.next().is_none()),
        "no task directory"
    );
    // A scratch volume: its task directory exists and is named.
    let family = unique_name("kept-dir-");
    let _g2 = FamilyGuard(family.clone());
    let mut a = c("a", "echo x > /scratch/f");
    a["mountPoints"] = json!([{"sourceVolume": "s", "containerPath": "/scratch"}]);
    let def = json!({"family": family, "volumes": [{"name": "s"}], "containerDefinitions": [a]});
    let (code, out, err) = berth_run_text_keep(&def, data.path());
    assert_eq!(code, 0, "{out}{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with("kept:"))
        .unwrap_or_else(|| panic!("no kept line: {out}"));
    let (_, dir) = line.split_once(" and ").unwrap_or_else(|| panic!("{line}"));
    assert!(
        std::path::Path::new(dir).join("volumes/s/f").is_file(),
        "{line}"
    );
    // Nothing created (the image is missing): no kept line at all.
    let family = unique_name("kept-none-");
    let _g3 = FamilyGuard(family.clone());
    let mut a = c("a", "exit 0");
    a["image"] = json!("127.0.0.1:1/berth-no-such-image:1");
    let def = json!({"family": family, "containerDefinitions": [a]});
    let (code, out, err) = berth_run_text_keep(&def, data.path());
    assert_eq!(code, 125, "{out}{err}");
    assert!(!out.contains("kept:"), "{out}");
}
