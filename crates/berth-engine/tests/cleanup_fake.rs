//! The one task cleanup on the fake runtime: containers, task-scoped volumes and the task
//! directory go, in that order; a task that has not finished is refused whole.

mod common;

use berth_engine::fake::{FakeRuntime, Script};
use berth_engine::{Command, Refusal, RunConfig, Status, TaskState, cleanup_task, run_task, spec};
use std::sync::Arc;
use tokio::sync::{mpsc, watch};

fn definition() -> berth_model::TaskDefinition {
    let json = r#"{"family": "fam", "containerDefinitions": [
        {"name": "a", "image": "img", "mountPoints": [
            {"sourceVolume": "scratch", "containerPath": "/s"},
            {"sourceVolume": "data", "containerPath": "/d"}]}],
        "volumes": [{"name": "scratch"},
                    {"name": "data", "dockerVolumeConfiguration": {"scope": "task"}}]}"#;
    berth_model::parse(json).expect("valid").definition
}

async fn run(rt: &FakeRuntime, s: TaskState, data_dir: &std::path::Path) -> TaskState {
    let (rtx, _rrx) = mpsc::unbounded_channel();
    let (_ctx, crx) = mpsc::channel::<Command>(1);
    let (stx, _srx) = watch::channel(s.clone());
    let config = RunConfig::new(data_dir.to_path_buf());
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        run_task(Arc::new(rt.clone()), s, config, rtx, crx, stx),
    )
    .await
    .expect("task ends")
}

#[tokio::test]
async fn a_finished_task_loses_its_containers_volumes_and_directory() {
    let data = tempfile::tempdir().expect("tmp");
    let rt = FakeRuntime::new();
    rt.add_image("img");
    rt.script(
        "a",
        Script {
            exit_code: Some(0),
            ..Default::default()
        },
    );
    let s = TaskState::new(berth_engine::new_task_id(), definition(), 0);
    let done = run(&rt, s, data.path()).await;
    assert_eq!(done.known(), Status::Stopped);
    let scratch = spec::scratch_dir(data.path(), &done.id, "scratch");
    assert!(scratch.is_dir(), "the actor made the scratch directory");
    std::fs::write(scratch.join("out"), b"x").expect("write");

    let report = cleanup_task(&rt, &done, data.path()).await;
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(
        report.removed_containers,
        [done.containers[0].docker_name.clone()]
    );
    assert_eq!(report.removed_volumes, spec::task_volume_names(&done));
    assert_eq!(report.directory.as_ref().map(|d| d.removed.files), Some(1));
    assert!(!spec::task_dir(data.path(), &done.id).exists());
    assert_eq!(rt.container_count(), 0);
    let calls = rt.calls();
    let pos = |p: &str| {
        calls
            .iter()
            .position(|c| c.starts_with(p))
            .unwrap_or_else(|| panic!("no {p:?} call in {calls:?}"))
    };
    assert!(pos("remove ") < pos("volume-remove "), "{calls:?}");
}

#[tokio::test]
async fn a_task_that_has_not_finished_is_refused_with_nothing_removed() {
    let data = tempfile::tempdir().expect("tmp");
    let rt = FakeRuntime::new();
    let s = TaskState::new(berth_engine::new_task_id(), definition(), 0);
    let dir = spec::scratch_dir(data.path(), &s.id, "scratch");
    std::fs::create_dir_all(&dir).expect("dir");

    let report = cleanup_task(&rt, &s, data.path()).await;
    assert!(!report.is_complete());
    assert!(
        matches!(
            report.refused.as_slice(),
            [Refusal::NotFinished {
                known: Status::None,
                ..
            }]
        ),
        "{report:?}"
    );
    assert!(report.refused[0].to_string().contains("has not finished"));
    assert!(rt.calls().is_empty(), "{:?}", rt.calls());
    assert!(dir.is_dir(), "the directory is kept");
}
