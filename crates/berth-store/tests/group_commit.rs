//! The group-committing writer: many tasks' saves at once share transactions, every acknowledged
//! save is on disk (a reopened store reads it), the last state of a task wins, and a task keeps
//! its cleanup record across saves of its state.

use berth_engine::{Persist, TaskState};
use berth_store::{Store, TaskRecord};
use std::sync::Arc;

fn task(id: usize, created_at: i64) -> TaskState {
    let def = berth_model::parse(
        r#"{"family": "gc", "containerDefinitions": [{"name": "a", "image": "busybox"}]}"#,
    )
    .expect("valid")
    .definition;
    TaskState::new(format!("{id:032x}"), def, created_at)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_saves_share_commits_and_all_are_durable() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = Arc::new(Store::open(dir.path()).expect("open"));
    let before = store.group_commits();
    let n = 200;
    let saves: Vec<_> = (0..n)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move { Persist::save(&*store, &task(i, 1)).await })
        })
        .collect();
    for s in saves {
        s.await.expect("join").expect("saved");
    }
    let commits = store.group_commits() - before;
    assert!(commits >= 1 && commits <= n as u64, "{commits} commits");
    eprintln!("{n} concurrent saves in {commits} transactions");
    drop(store);
    let reopened = Store::open(dir.path()).expect("reopen");
    assert_eq!(reopened.tasks().expect("tasks").len(), n);
}

#[tokio::test]
async fn the_last_state_wins_and_the_cleanup_record_is_kept() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = Store::open(dir.path()).expect("open");
    let mut rec = TaskRecord {
        state: task(1, 1),
        cleanup: Default::default(),
    };
    rec.cleanup.attempts = 3;
    store.save_task(&rec).expect("save");
    let (a, b) = (task(1, 2), task(1, 3));
    let (ra, rb) = tokio::join!(store.save_state_grouped(&a), store.save_state_grouped(&b));
    ra.expect("a");
    rb.expect("b");
    let got = store.get_task(&a.id).expect("read").expect("there");
    assert_eq!(got.state.created_at, 3, "the later save wins");
    assert_eq!(got.cleanup.attempts, 3, "the cleanup record is kept");
}
