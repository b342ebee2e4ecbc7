//! The seed's 32-row table (`pull-dependent-containers-upfront.txt`) against the real Engine and a
//! real registry on 127.0.0.1: for every pull behaviour × where B's image is available × whether B
//! is essential, does the task stop because of the pull?
//!
//! The task is the seed's: A (non-essential) and B, which waits for A to SUCCEED; images are pulled
//! up front. Rows with a non-essential B add an essential C that runs for a few seconds, so the task
//! has an essential container (ECS requires one). "Task stopped" means stopped *by the pull*: the
//! task's stop reason is `CannotPullContainerError: …`.

use berth_testkit::berth_run::BerthRun;
use berth_testkit::{docker_cli as docker, registry, test_image, unique_name};
use serde_json::{Value, json};
use std::process::Command;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Avail {
    RemoteAndLocal,
    RemoteOnly,
    LocalOnly,
    /// Local only, and this agent (same data directory) pulled it earlier through berth.
    LocalOnlyHasPulled,
    NotAvailable,
}

/// Delete `repo:tag` from the registry (its manifest), through the registry's HTTP API.
fn delete_remote(reg: &str, repo: &str, tag: &str) {
    let head = Command::new("curl")
        .args([
            "-fsSI",
            "-H",
            "Accept: application/vnd.docker.distribution.manifest.v2+json",
        ])
        .arg(format!("http://{reg}/v2/{repo}/manifests/{tag}"))
        .output()
        .expect("curl runs");
    let headers = String::from_utf8_lossy(&head.stdout);
    let digest = headers
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("docker-content-digest")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_else(|| panic!("no digest for {repo}:{tag}: {headers}"));
    let del = Command::new("curl")
        .args(["-fsS", "-X", "DELETE"])
        .arg(format!("http://{reg}/v2/{repo}/manifests/{digest}"))
        .output()
        .expect("curl runs");
    assert!(
        del.status.success(),
        "delete {repo}@{digest}: {}",
        String::from_utf8_lossy(&del.stderr)
    );
}

/// Removes the row's local image tag at the end, even when the row fails.
struct LocalTag(String);
impl Drop for LocalTag {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rmi", "-f", &self.0]).output();
    }
}

fn berth_run(data_dir: &std::path::Path, behavior: &str, def: &Value) -> (i32, Vec<Value>, String) {
    let file = data_dir.join(format!("{}.json", unique_name("task-")));
    let out = BerthRun::new(env!("CARGO_BIN_EXE_berth"), file, def)
        .args(["--pull-dependent-upfront", "--pull-behavior", behavior])
        .data_dir(data_dir)
        .env_remove("ECS_IMAGE_PULL_BEHAVIOR")
        .env_remove("BERTH_IMAGE_PULL_BEHAVIOR")
        .output();
    (out.code.unwrap_or(-1), out.lines(), out.stderr)
}

fn container(name: &str, image: &str, script: &str) -> Value {
    json!({"name": name, "image": image, "command": ["sh", "-c", script],
           "dockerLabels": {"berth.test": "1"}, "stopTimeout": 1})
}

fn row(n: u32, behavior: &str, avail: Avail, essential: bool, expect_stopped: bool) {
    let reg = registry();
    let repo = format!("berth-row{n:02}-{}", unique_name(""));
    let image = format!("{reg}/{repo}:1");
    let _tag = LocalTag(image.clone());
    let data_dir = tempfile::tempdir().expect("data dir");
    // A and C come from the registry too: under `always` and `once` every image is pulled, and
    // nothing may be pulled from anywhere but the loopback registry.
    let base = format!("{reg}/berth-test-base-row{n:02}:1");
    let _base_tag = LocalTag(base.clone());
    docker(&["tag", &test_image(), &base]);
    docker(&["push", "-q", &base]);

    // Put the image where the row says.
    let remote = matches!(
        avail,
        Avail::RemoteAndLocal | Avail::RemoteOnly | Avail::LocalOnlyHasPulled
    );
    let local = matches!(
        avail,
        Avail::RemoteAndLocal | Avail::LocalOnly | Avail::LocalOnlyHasPulled
    );
    if remote || local {
        docker(&["tag", &test_image(), &image]);
    }
    if remote {
        docker(&["push", "-q", &image]);
    }
    if avail == Avail::LocalOnlyHasPulled {
        // The earlier successful pull must really go through berth, in this agent's data directory.
        docker(&["rmi", &image]);
        let prime = json!({"family": format!("prime{n}"), "containerDefinitions": [container("p", &image, "true")]});
        let (code, lines, stderr) = berth_run(data_dir.path(), "once", &prime);
        assert_eq!(code, 0, "row {n}: priming pull failed: {stderr}");
        assert!(
            lines
                .iter()
                .any(|l| l["event"] == "pull" && l["phase"] == "done"),
            "row {n}: berth pulled the image while priming"
        );
        delete_remote(&reg, &repo, "1");
    }
    if !local {
        let _ = Command::new("docker").args(["rmi", &image]).output();
    }

    // The seed's task.
    let mut a = container("a", &base, "true");
    a["essential"] = json!(false);
    let mut b = container("b", &image, "true");
    b["essential"] = json!(essential);
    b["dependsOn"] = json!([{"containerName": "a", "condition": "SUCCESS"}]);
    let mut containers = vec![a, b];
    if !essential {
        containers.push(container("c", &base, "sleep 3"));
    }
    let def = json!({"family": format!("row{n}"), "containerDefinitions": containers});
    let (code, lines, stderr) = berth_run(data_dir.path(), behavior, &def);

    let summary = lines
        .iter()
        .find(|l| l["event"] == "summary")
        .unwrap_or_else(|| panic!("row {n}: no summary; stderr: {stderr}"));
    let reason = summary["stoppedReason"].as_str().unwrap_or_default();
    let stopped_by_pull = reason.starts_with("CannotPullContainerError: ");
    let ctx = format!(
        "row {n} ({behavior}, {avail:?}, B essential {essential}): reason {reason:?}, exit {code}; stderr: {stderr}"
    );
    assert_eq!(stopped_by_pull, expect_stopped, "{ctx}");
    let b = summary["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == "b"))
        .unwrap_or_else(|| panic!("{ctx}: no b"));
    if expect_stopped {
        assert_eq!(code, 125, "{ctx}");
        assert_eq!(b["dockerId"], Value::Null, "{ctx}: b never created");
    } else if avail == Avail::NotAvailable {
        // Non-essential B without an image just stops; the task ends with C, normally.
        let b_reason = b["reason"].as_str().unwrap_or_default();
        assert!(
            b_reason.starts_with("CannotPullContainerError: "),
            "{ctx}: b {b_reason}"
        );
        assert_eq!(code, 0, "{ctx}");
        assert_eq!(reason, "Essential container in task exited", "{ctx}");
    } else {
        assert_eq!(b["exitCode"], 0, "{ctx}: b ran");
        assert_eq!(code, 0, "{ctx}");
    }
}

macro_rules! rows {
    ($($name:ident: $n:expr, $behavior:expr, $avail:ident, $essential:expr, $stopped:expr;)*) => {
        $(
            #[test]
            fn $name() {
                row($n, $behavior, Avail::$avail, $essential, $stopped);
            }
        )*
    };
}

rows! {
    row_01_default_remote_and_local_essential: 1, "default", RemoteAndLocal, true, false;
    row_02_always_remote_and_local_essential: 2, "always", RemoteAndLocal, true, false;
    row_03_once_remote_and_local_essential: 3, "once", RemoteAndLocal, true, false;
    row_04_prefer_cached_remote_and_local_essential: 4, "prefer-cached", RemoteAndLocal, true, false;
    row_05_default_remote_only_essential: 5, "default", RemoteOnly, true, false;
    row_06_always_remote_only_essential: 6, "always", RemoteOnly, true, false;
    row_07_once_remote_only_essential: 7, "once", RemoteOnly, true, false;
    row_08_prefer_cached_remote_only_essential: 8, "prefer-cached", RemoteOnly, true, false;
    row_09_default_local_only_essential: 9, "default", LocalOnly, true, false;
    row_10_always_local_only_essential: 10, "always", LocalOnly, true, true;
    row_11_once_local_only_has_pulled_essential: 11, "once", LocalOnlyHasPulled, true, false;
    row_12_prefer_cached_local_only_essential: 12, "prefer-cached", LocalOnly, true, false;
    row_13_default_not_available_essential: 13, "default", NotAvailable, true, true;
    row_14_always_not_available_essential: 14, "always", NotAvailable, true, true;
    row_15_once_not_available_essential: 15, "once", NotAvailable, true, true;
    row_16_prefer_cached_not_available_essential: 16, "prefer-cached", NotAvailable, true, true;
    row_17_default_remote_and_local_non_essential: 17, "default", RemoteAndLocal, false, false;
    row_18_always_remote_and_local_non_essential: 18, "always", RemoteAndLocal, false, false;
    row_19_once_remote_and_local_non_essential: 19, "once", RemoteAndLocal, false, false;
    row_20_prefer_cached_remote_and_local_non_essential: 20, "prefer-cached", RemoteAndLocal, false, false;
    row_21_default_remote_only_non_essential: 21, "default", RemoteOnly, false, false;
    row_22_always_remote_only_non_essential: 22, "always", RemoteOnly, false, false;
    row_23_once_remote_only_non_essential: 23, "once", RemoteOnly, false, false;
    row_24_prefer_cached_remote_only_non_essential: 24, "prefer-cached", RemoteOnly, false, false;
    row_25_default_local_only_non_essential: 25, "default", LocalOnly, false, false;
    row_26_always_local_only_non_essential: 26, "always", LocalOnly, false, true;
    row_27_once_local_only_has_pulled_non_essential: 27, "once", LocalOnlyHasPulled, false, false;
    row_28_prefer_cached_local_only_non_essential: 28, "prefer-cached", LocalOnly, false, false;
    row_29_default_not_available_non_essential: 29, "default", NotAvailable, false, false;
    row_30_always_not_available_non_essential: 30, "always", NotAvailable, false, true;
    row_31_once_not_available_non_essential: 31, "once", NotAvailable, false, true;
    row_32_prefer_cached_not_available_non_essential: 32, "prefer-cached", NotAvailable, false, false;
}
