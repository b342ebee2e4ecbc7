//! Image cleanup against the fake runtime: the race with a task start (the task waits for the
//! removal, then pulls the image again per its pull behaviour and runs), a removal skipped
//! because a task holds the image, and what a removal leaves behind (the pull record forgotten,
//! the bytes counted). The same rules run on the real Engine in `crates/berth/tests/image_gc_engine.rs`.

mod common;

use berth_engine::fake::FakeRuntime;
use berth_engine::image_gc::{self, Mode, Settings};
use berth_engine::image_use::{ImageLeases, ImageRecords, ImageTracking, MemoryImageRecords};
use berth_engine::{
    Command, PullBehavior, PullRecord, RunConfig, Runtime, Status, TaskState, run_task,
};
use common::*;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

fn settings() -> Settings {
    Settings {
        minimum_age_ms: 0,
        untracked_minimum_age_ms: 0,
        per_cycle: 5,
        exclude: Vec::new(),
        untracked: false,
    }
}

struct Running {
    snapshots: watch::Receiver<TaskState>,
    commands: mpsc::Sender<Command>,
    done: tokio::task::JoinHandle<TaskState>,
}

fn start(
    rt: &FakeRuntime,
    image: &str,
    records: &Arc<MemoryImageRecords>,
    leases: &Arc<ImageLeases>,
) -> Running {
    let mut c = container("app");
    c.image = image.to_string();
    let s = state(vec![c]);
    let config = RunConfig {
        pull_behavior: PullBehavior::Once,
        pull_record: records.clone(),
        images: Some(ImageTracking {
            leases: leases.clone(),
            records: records.clone(),
        }),
        ..RunConfig::new(std::env::temp_dir())
    };
    let (rtx, _rrx) = mpsc::unbounded_channel();
    let (ctx, crx) = mpsc::channel(4);
    let (stx, srx) = watch::channel(s.clone());
    let done = tokio::spawn(run_task(Arc::new(rt.clone()), s, config, rtx, crx, stx));
    Running {
        snapshots: srx,
        commands: ctx,
        done,
    }
}

async fn until_running(r: &mut Running) {
    tokio::time::timeout(
        Duration::from_secs(10),
        r.snapshots.wait_for(|s| s.known() == Status::Running),
    )
    .await
    .expect("the task runs within 10 s")
    .expect("snapshots");
}

#[tokio::test]
async fn a_task_starting_during_a_removal_waits_then_pulls_again_and_runs() {
    let rt = FakeRuntime::new();
    rt.add_image("app:1");
    rt.add_remote("app:1");
    let records = Arc::new(MemoryImageRecords::default());
    records.pulled("app:1", 0);
    let leases = ImageLeases::new();

    // Cleanup has begun removing app:1 (its removal is in progress when the task arrives).
    let survey = image_gc::survey(&rt, &*records).await.expect("survey");
    let plan = survey.plan(&[], &settings(), Mode::Cycle, 10);
    assert_eq!(plan.removals().count(), 1, "app:1 is a candidate: {plan:?}");
    let removal = leases
        .begin_removal(&["app:1".to_string()])
        .expect("nobody holds app:1");

    let mut task = start(&rt, "app:1", &records, &leases);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !rt.calls()
            .iter()
            .any(|c| c.starts_with("pull") || c.starts_with("create")),
        "the task waits for the removal: {:?}",
        rt.calls()
    );
    rt.remove_image("app:1").await.expect("removed");
    records.forget("app:1").expect("forgotten");
    drop(removal);

    until_running(&mut task).await;
    let calls = rt.calls();
    let removed = calls.iter().position(|c| c == "remove-image app:1");
    let pulled = calls.iter().position(|c| c == "pull app:1");
    assert!(
        removed.is_some() && pulled > removed,
        "pulled again after the removal (once forgot it): {calls:?}"
    );
    assert!(records.pulled_before("app:1"), "the new pull is recorded");
    let _ = task
        .commands
        .send(Command::Stop {
            reason: "test".into(),
        })
        .await;
    let done = task.done.await.expect("joined");
    assert!(done.is_finished());
}

#[tokio::test]
async fn cleanup_skips_an_image_a_task_holds_and_counts_what_it_frees() {
    let rt = FakeRuntime::new();
    rt.add_image_sized("held:1", 700);
    rt.add_image_sized("free:1", 300);
    rt.add_remote("held:1");
    let records = Arc::new(MemoryImageRecords::default());
    records.pulled("held:1", 0);
    records.pulled("free:1", 1);
    let leases = ImageLeases::new();

    // The plan is made before the task is known (the snapshot race): both are candidates.
    let survey = image_gc::survey(&rt, &*records).await.expect("survey");
    let plan = survey.plan(&[], &settings(), Mode::Prune, 10);
    assert_eq!(plan.removals().count(), 2);

    let mut task = start(&rt, "held:1", &records, &leases);
    until_running(&mut task).await;
    let outcomes = image_gc::remove(&rt, &*records, &leases, &plan).await;
    assert_eq!(outcomes.len(), 2);
    let held = &outcomes[0];
    assert_eq!(held.names, ["held:1"]);
    assert!(
        held.error
            .as_deref()
            .is_some_and(|e| e.contains("a task is starting with held:1")),
        "{held:?}"
    );
    assert_eq!(held.bytes, 0);
    let free = &outcomes[1];
    assert_eq!((free.error.as_deref(), free.bytes), (None, 300));
    assert_eq!(rt.images(), ["held:1"]);
    assert!(
        !records.pulled_before("free:1"),
        "a removed image is forgotten"
    );
    assert_eq!(
        records
            .tracked()
            .expect("tracked")
            .iter()
            .map(|t| t.reference.as_str())
            .collect::<Vec<_>>(),
        ["held:1"]
    );
    let _ = task
        .commands
        .send(Command::Stop {
            reason: "test".into(),
        })
        .await;
    let done = task.done.await.expect("joined");
    assert!(done.is_finished());
    let t = records.tracked().expect("tracked");
    assert!(
        t[0].last_used > 0 && t[0].tasks == [done.id.clone()],
        "the task's use is recorded: {t:?}"
    );
}
