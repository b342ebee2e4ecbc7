//! The pull decision on the fake runtime, for every behaviour × where the image is × essential:
//! whether the task stops because of the pull, with which reason, and which pulls were made.
//! (The same table runs against a real registry in `crates/berth/tests/pull_table.rs`.)

mod common;

use berth_engine::fake::{FakeRuntime, Script};
use berth_engine::pull::MemoryPullRecord;
use berth_engine::{Command, Options, PullBehavior, PullRecord, RunConfig, run_task};
use berth_model::Condition;
use common::*;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Avail {
    RemoteAndLocal,
    RemoteOnly,
    LocalOnly,
    LocalOnlyHasPulled,
    NotAvailable,
}

const ALL: [Avail; 5] = [
    Avail::RemoteAndLocal,
    Avail::RemoteOnly,
    Avail::LocalOnly,
    Avail::LocalOnlyHasPulled,
    Avail::NotAvailable,
];

/// The seed's outcome: does the task stop because of B's pull?
fn expected(behavior: PullBehavior, avail: Avail, essential: bool) -> bool {
    use Avail::*;
    use PullBehavior::*;
    match (behavior, avail) {
        (_, RemoteAndLocal | RemoteOnly) => false,
        (Always, LocalOnly | LocalOnlyHasPulled) => true,
        (Once, LocalOnly) => true, // never pulled by this agent: a pull is needed and fails
        (_, LocalOnly | LocalOnlyHasPulled) => false,
        (Always | Once, NotAvailable) => true,
        (Default | PreferCached, NotAvailable) => essential,
    }
}

async fn run_row(
    behavior: PullBehavior,
    avail: Avail,
    essential: bool,
) -> (Option<String>, Vec<String>) {
    let rt = FakeRuntime::new();
    rt.add_image("base");
    rt.add_remote("base");
    let record = Arc::new(MemoryPullRecord::default());
    record.record_pull("base").expect("record");
    if matches!(avail, Avail::RemoteAndLocal | Avail::RemoteOnly) {
        rt.add_remote("img");
    }
    if matches!(
        avail,
        Avail::RemoteAndLocal | Avail::LocalOnly | Avail::LocalOnlyHasPulled
    ) {
        rt.add_image("img");
    }
    if avail == Avail::LocalOnlyHasPulled {
        record.record_pull("img").expect("record");
    }
    rt.script(
        "a",
        Script {
            exit_code: Some(0),
            ..Default::default()
        },
    );
    rt.script(
        "b",
        Script {
            exit_code: Some(0),
            ..Default::default()
        },
    );
    // c (essential when b is not) runs until the test stops the task.
    let mut a = non_essential(container("a"));
    a.image = "base".into();
    let mut b = depends(container("b"), "a", Condition::Success);
    b.image = "img".into();
    b.essential = essential;
    let mut defs = vec![a, b];
    if !essential {
        let mut c = container("c");
        c.image = "base".into();
        defs.push(c);
    }
    let s = state(defs);
    let (rtx, _rrx) = mpsc::unbounded_channel();
    let (ctx, crx) = mpsc::channel(1);
    let (stx, _srx) = watch::channel(s.clone());
    let config = RunConfig {
        options: Options {
            pull_upfront: true,
            ..Options::default()
        },
        pull_behavior: behavior,
        pull_record: record,
        ..RunConfig::new(std::env::temp_dir())
    };
    let task = tokio::spawn(run_task(Arc::new(rt.clone()), s, config, rtx, crx, stx));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let _ = ctx
        .send(Command::Stop {
            reason: "stopped by the test".into(),
        })
        .await;
    let done = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("task ends")
        .expect("actor");
    (done.stopped_reason, rt.calls())
}

#[tokio::test]
async fn every_behavior_availability_and_essential_combination() {
    for behavior in PullBehavior::ALL {
        for avail in ALL {
            for essential in [true, false] {
                let (reason, calls) = run_row(behavior, avail, essential).await;
                let reason = reason.unwrap_or_default();
                let ctx =
                    format!("{behavior} {avail:?} essential={essential}: {reason:?} {calls:?}");
                let stopped = reason.starts_with("CannotPullContainerError: ");
                assert_eq!(stopped, expected(behavior, avail, essential), "{ctx}");
                if stopped {
                    assert!(
                        reason.contains("manifest for img not found"),
                        "Docker's message: {ctx}"
                    );
                }
                // Which pulls were asked of the registry.
                let pulled_b = calls.iter().any(|c| c == "pull img");
                let should_pull = match behavior {
                    PullBehavior::Default | PullBehavior::Always => true,
                    PullBehavior::Once => avail != Avail::LocalOnlyHasPulled,
                    PullBehavior::PreferCached => !matches!(
                        avail,
                        Avail::RemoteAndLocal | Avail::LocalOnly | Avail::LocalOnlyHasPulled
                    ),
                };
                assert_eq!(pulled_b, should_pull, "{ctx}");
            }
        }
    }
}
