//! Scenarios of the task actor on the fake runtime: the whole loop (effects, events, reports,
//! cleanup) without Docker.

mod common;

use berth_engine::fake::{FakeRuntime, Script};
use berth_engine::spec::container_spec;
use berth_engine::{Command, RunConfig, Status, TaskState, cleanup_docker, run_task};
use berth_model::{Condition, GpuRequest};
use common::*;
use std::sync::Arc;
use tokio::sync::{mpsc, watch};

async fn run(rt: &FakeRuntime, s: TaskState) -> (TaskState, Vec<berth_engine::report::Report>) {
    let (rtx, mut rrx) = mpsc::unbounded_channel();
    let (_ctx, crx) = mpsc::channel::<Command>(1);
    let (stx, _srx) = watch::channel(s.clone());
    let config = RunConfig::new(std::env::temp_dir().join("berth-engine-fake-tests"));
    let done = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        run_task(Arc::new(rt.clone()), s, config, rtx, crx, stx),
    )
    .await
    .expect("task ends");
    let mut reports = Vec::new();
    while let Ok(r) = rrx.try_recv() {
        reports.push(r);
    }
    (done, reports)
}

#[tokio::test]
async fn a_chain_runs_in_order_and_cleans_up() {
    let rt = FakeRuntime::new();
    rt.add_image("img");
    rt.script(
        "init",
        Script {
            exit_code: Some(0),
            ..Default::default()
        },
    );
    rt.script(
        "web",
        Script {
            exit_code: Some(0),
            ..Default::default()
        },
    );
    rt.script(
        "side",
        Script {
            healthy: true,
            ..Default::default()
        },
    );
    let init = non_essential(container("init"));
    let side = healthy(non_essential(container("side")));
    let web = depends(
        depends(container("web"), "init", Condition::Success),
        "side",
        Condition::Healthy,
    );
    let s = state(vec![init, side, web]);
    let (done, reports) = run(&rt, s).await;
    assert_eq!(done.known(), Status::Stopped);
    assert_eq!(berth_engine::report::task_exit_code(&done), 0);
    let calls = rt.calls();
    let pos = |c: &str| {
        calls
            .iter()
            .position(|x| x.starts_with(c))
            .unwrap_or(usize::MAX)
    };
    assert!(pos("start berth-fam-1-init") < pos("create berth-fam-1-web"));
    assert!(pos("start berth-fam-1-side") < pos("start berth-fam-1-web"));
    assert!(
        calls.iter().any(|c| c.starts_with("stop berth-fam-1-side")),
        "{calls:?}"
    );
    assert!(!reports.is_empty());
    cleanup_docker(&rt, &done).await;
    assert_eq!(rt.container_count(), 0);
}

#[tokio::test]
async fn start_failure_of_essential_stops_everything() {
    let rt = FakeRuntime::new();
    rt.add_image("img");
    rt.script(
        "a",
        Script {
            start_error: Some("exec: not found".into()),
            ..Default::default()
        },
    );
    let s = state(vec![container("a"), non_essential(container("b"))]);
    let (done, _) = run(&rt, s).await;
    assert_eq!(done.known(), Status::Stopped);
    assert_eq!(
        done.stopped_reason.as_deref(),
        Some("CannotStartContainerError: exec: not found")
    );
    assert_eq!(berth_engine::report::task_exit_code(&done), 125);
}

#[tokio::test]
async fn a_gpu_container_on_an_engine_without_gpu_runtime_names_its_requirement() {
    let docker = r#"could not select device driver "" with capabilities: [[gpu]]"#;
    let rt = FakeRuntime::new();
    rt.add_image("img");
    rt.script(
        "a",
        Script {
            start_error: Some(docker.into()),
            ..Default::default()
        },
    );
    let mut a = container("a");
    a.gpu = Some(GpuRequest::Count(2));
    let s = state(vec![a, non_essential(container("b"))]);
    assert_eq!(container_spec(&s, 0, &[], None).gpu_count, Some(2));
    assert_eq!(container_spec(&s, 1, &[], None).gpu_count, None);
    let (done, _) = run(&rt, s).await;
    assert_eq!(done.known(), Status::Stopped);
    let expected = format!(
        "CannotStartContainerError: resourceRequirements GPU 2: this Docker Engine has no GPU runtime (Docker: {docker})"
    );
    assert_eq!(
        done.containers[0].reason.as_deref(),
        Some(expected.as_str())
    );
    assert_eq!(done.stopped_reason.as_deref(), Some(expected.as_str()));
}

#[tokio::test]
async fn an_oom_killed_container_gets_ecs_out_of_memory_reason() {
    let rt = FakeRuntime::new();
    rt.add_image("img");
    rt.script(
        "a",
        Script {
            exit_code: Some(137),
            oom_killed: true,
            ..Default::default()
        },
    );
    rt.script(
        "b",
        Script {
            exit_code: Some(137),
            ..Default::default()
        },
    );
    let s = state(vec![container("a"), non_essential(container("b"))]);
    let (done, _) = run(&rt, s).await;
    assert_eq!(done.known(), Status::Stopped);
    assert_eq!(done.containers[0].exit_code, Some(137));
    assert_eq!(
        done.containers[0].reason.as_deref(),
        Some("OutOfMemoryError: Container killed due to memory usage")
    );
    // A plain SIGKILL exit (137 without OOMKilled) has no reason.
    assert_eq!(done.containers[1].reason, None);
    // The task's reason is still ECS's: its essential container exited.
    assert_eq!(
        done.stopped_reason.as_deref(),
        Some("Essential container in task exited")
    );
}

/// A task stored as finished (the agent stopped while it waited for its cleanup) is resumed
/// without touching Docker: no volume is provisioned again, nothing is created or started, and
/// the state comes back as it was.
#[tokio::test]
async fn a_finished_task_is_resumed_without_any_runtime_call() {
    let def = berth_model::parse(
        r#"{"family": "done", "containerDefinitions": [
              {"name": "a", "image": "img", "mountPoints": [{"sourceVolume": "v", "containerPath": "/v"}]}],
            "volumes": [{"name": "v", "dockerVolumeConfiguration": {"scope": "task", "driver": "local"}}]}"#,
    )
    .expect("valid")
    .definition;
    let rt = FakeRuntime::new();
    rt.add_image("img");
    rt.script(
        "a",
        Script {
            exit_code: Some(0),
            ..Default::default()
        },
    );
    let (done, _) = run(&rt, TaskState::new(berth_engine::new_task_id(), def, 1)).await;
    assert!(done.is_finished());
    assert!(
        rt.calls().iter().any(|c| c.starts_with("volume-create")),
        "{:?}",
        rt.calls()
    );

    let fresh = FakeRuntime::new();
    let (ready_tx, mut ready_rx) = mpsc::unbounded_channel();
    let (rtx, _rrx) = mpsc::unbounded_channel();
    let (_ctx, crx) = mpsc::channel::<Command>(1);
    let (stx, _srx) = watch::channel(done.clone());
    let config = RunConfig {
        resume: true,
        ready: Some(ready_tx),
        ..RunConfig::new(std::env::temp_dir().join("berth-engine-fake-tests"))
    };
    let again = run_task(Arc::new(fresh.clone()), done.clone(), config, rtx, crx, stx).await;
    assert_eq!(again, done, "nothing changed");
    assert_eq!(fresh.calls(), Vec::<String>::new(), "no runtime call");
    assert_eq!(
        ready_rx.recv().await,
        Some(done.id.clone()),
        "ready was sent"
    );
}
