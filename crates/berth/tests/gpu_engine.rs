//! End-to-end tests of `resourceRequirements` of type GPU on a Docker Engine without a GPU
//! runtime (this machine's): berth asks Docker for the GPUs as `docker run --gpus <n>` does, the
//! Engine refuses to start the container, and the container stops with a reason that names the
//! requirement and keeps Docker's words; an essential one stops the task.
//!
//! Run only through `scripts/test -p berth --test gpu_engine` (it sets up the test image).

use berth_testkit::berth_run::{BerthRun, RunOutput, test_container};
use berth_testkit::{FamilyGuard, docker_cli, family_containers, unique_name};
use serde_json::{Value, json};

/// Docker 20.10's words when no device driver serves a GPU request.
const NO_DRIVER: &str = r#"could not select device driver "" with capabilities: [[gpu]]"#;

fn gpu(mut c: Value, value: &str) -> Value {
    c["resourceRequirements"] = json!([{"type": "GPU", "value": value}]);
    c
}

fn berth_run(family: &str, containers: Vec<Value>, keep: bool) -> (RunOutput, tempfile::TempDir) {
    let def = json!({"family": family, "containerDefinitions": containers});
    let data_dir = tempfile::tempdir().expect("temp dir");
    let file = data_dir.path().join("task.json");
    let mut run = BerthRun::new(env!("CARGO_BIN_EXE_berth"), file, &def)
        .prefer_cached()
        .data_dir(data_dir.path());
    if keep {
        run = run.arg("--keep");
    }
    (run.output(), data_dir)
}

fn summary_container(summary: &Value, name: &str) -> Value {
    summary["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == name).cloned())
        .unwrap_or_else(|| panic!("no container {name} in {summary:#}"))
}

fn reason(value: &str) -> String {
    format!(
        "CannotStartContainerError: resourceRequirements GPU {value}: this Docker Engine has no GPU runtime (Docker: {NO_DRIVER})"
    )
}

#[tokio::test]
async fn an_essential_gpu_container_without_gpu_runtime_stops_the_task_with_a_clear_reason() {
    let family = unique_name("gpu-essential-");
    let _guard = FamilyGuard(family.clone());
    let (out, _dir) = berth_run(
        &family,
        vec![gpu(test_container("trainer", "exit 0"), "1"), {
            let mut side = test_container("side", "exec sleep 300");
            side["essential"] = json!(false);
            side
        }],
        false,
    );
    let summary = out
        .summary()
        .unwrap_or_else(|| panic!("no summary; stderr:\n{}", out.stderr));
    let trainer = summary_container(&summary, "trainer");
    assert_eq!(
        trainer["reason"],
        reason("1"),
        "{summary:#}\nstderr:\n{}",
        out.stderr
    );
    assert_eq!(trainer["known"], "STOPPED", "{trainer:#}");
    assert_eq!(summary["stoppedReason"], reason("1"), "{summary:#}");
    assert_eq!(summary["known"], "STOPPED", "{summary:#}");
    // The sidecar was running: the essential container's failure stopped it.
    let side = summary_container(&summary, "side");
    assert_eq!(side["known"], "STOPPED", "{side:#}");
    assert!(side["startedAt"].is_string(), "the sidecar ran: {side:#}");
    assert_eq!(out.code, Some(125), "stderr:\n{}", out.stderr);
    assert_eq!(
        family_containers(&family),
        Vec::<String>::new(),
        "nothing left behind"
    );
}

#[tokio::test]
async fn docker_receives_the_gpu_device_request() {
    let family = unique_name("gpu-request-");
    let _guard = FamilyGuard(family.clone());
    // Both GPU containers have no dependencies, so both are created before either start fails;
    // the essential one waits for them and never runs.
    let one = {
        let mut c = gpu(test_container("one", "exit 0"), "1");
        c["essential"] = json!(false);
        c
    };
    let all = {
        let mut c = gpu(test_container("all", "exit 0"), "ALL");
        c["essential"] = json!(false);
        c
    };
    let mut main = test_container("main", "exit 0");
    main["dependsOn"] = json!([
        {"containerName": "one", "condition": "COMPLETE"},
        {"containerName": "all", "condition": "COMPLETE"}
    ]);
    let (out, _dir) = berth_run(&family, vec![one, all, main], true);
    let summary = out
        .summary()
        .unwrap_or_else(|| panic!("no summary; stderr:\n{}", out.stderr));
    for (name, value, count) in [("one", "1", 1), ("all", "ALL", -1)] {
        let c = summary_container(&summary, name);
        assert_eq!(c["reason"], reason(value), "{summary:#}");
        let id = c["dockerId"]
            .as_str()
            .unwrap_or_else(|| panic!("{name} was created: {c:#}"));
        let inspect: Value = serde_json::from_str(&docker_cli(&[
            "inspect",
            "--format",
            "{{json .HostConfig.DeviceRequests}}",
            id,
        ]))
        .expect("inspect prints JSON");
        assert_eq!(
            inspect,
            json!([{"Driver": "", "Count": count, "DeviceIDs": null, "Capabilities": [["gpu"]], "Options": {}}]),
            "{name}: what `docker run --gpus {value}` sends"
        );
        let state = docker_cli(&[
            "inspect",
            "--format",
            "{{.State.Status}} {{.State.Error}}",
            id,
        ]);
        assert_eq!(state.trim(), format!("created {NO_DRIVER}"), "{name}");
    }
    let main = summary_container(&summary, "main");
    assert_eq!(
        main["dockerId"],
        Value::Null,
        "main never created: {main:#}"
    );
    assert_eq!(out.code, Some(125), "stderr:\n{}", out.stderr);
}
