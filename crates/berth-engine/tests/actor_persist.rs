//! A failed save performs nothing: the actor holds its task (no runtime call) and lists it as
//! degraded until a save succeeds; a task that reached STOPPED is never started again, whenever
//! the saves fail and whenever the agent restarts (the restart resumes from what was durable).

mod common;

use berth_engine::fake::{FakeRuntime, Script};
use berth_engine::{
    Command, EngineMetrics, Persist, PersistError, RetryPolicy, RunConfig, Status, TaskState,
    run_task,
};
use common::*;
use futures_util::future::BoxFuture;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// A store whose disk can fill up: once `trigger` accepts a state (or `failing` is set by the
/// test), every save fails until the test sets `failing` back; the durable copy keeps the last
/// state that was saved.
#[derive(Default)]
struct FlakyStore {
    failing: AtomicBool,
    trigger: Mutex<Option<Trigger>>,
    durable: Mutex<Option<TaskState>>,
    failures: std::sync::atomic::AtomicU64,
}

type Trigger = Box<dyn Fn(&TaskState) -> bool + Send>;

impl FlakyStore {
    fn failing_from(trigger: impl Fn(&TaskState) -> bool + Send + 'static) -> Arc<Self> {
        let s = FlakyStore::default();
        *s.trigger.lock().expect("lock") = Some(Box::new(trigger));
        Arc::new(s)
    }
    fn durable(&self) -> Option<TaskState> {
        self.durable.lock().expect("lock").clone()
    }
    fn failures(&self) -> u64 {
        self.failures.load(Ordering::SeqCst)
    }
}

impl Persist for FlakyStore {
    fn save(&self, state: &TaskState) -> BoxFuture<'static, Result<(), PersistError>> {
        {
            let mut trigger = self.trigger.lock().expect("lock");
            if trigger.as_ref().is_some_and(|t| t(state)) {
                self.failing.store(true, Ordering::SeqCst);
                *trigger = None;
            }
        }
        let out = if self.failing.load(Ordering::SeqCst) {
            self.failures.fetch_add(1, Ordering::SeqCst);
            Err(PersistError::save(
                &state.id,
                "No space left on device (os error 28)",
            ))
        } else {
            *self.durable.lock().expect("lock") = Some(state.clone());
            Ok(())
        };
        Box::pin(async move { out })
    }
}

fn config(store: &Arc<FlakyStore>, metrics: &Arc<EngineMetrics>) -> RunConfig {
    RunConfig {
        persist: Some(store.clone()),
        metrics: metrics.clone(),
        save_retry: RetryPolicy {
            first: Duration::from_millis(20),
            max: Duration::from_millis(50),
        },
        ..RunConfig::new(std::env::temp_dir().join("berth-engine-persist-tests"))
    }
}

fn count(calls: &[String], prefix: &str) -> usize {
    calls.iter().filter(|c| c.starts_with(prefix)).count()
}

async fn wait_for(what: &str, f: impl Fn() -> bool) {
    for _ in 0..500 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

struct Running {
    actor: tokio::task::JoinHandle<TaskState>,
    cancel: tokio_util::sync::CancellationToken,
}

fn spawn(rt: &FakeRuntime, s: TaskState, mut config: RunConfig) -> Running {
    let (rtx, _rrx) = mpsc::unbounded_channel();
    let (ctx, crx) = mpsc::channel::<Command>(1);
    let (stx, _srx) = watch::channel(s.clone());
    let cancel = config.cancel.clone();
    config.cancel = cancel.clone();
    let rt = Arc::new(rt.clone());
    let actor = tokio::spawn(async move {
        let _commands = ctx;
        run_task(rt, s, config, rtx, crx, stx).await
    });
    Running { actor, cancel }
}

async fn finish(r: Running) -> TaskState {
    tokio::time::timeout(Duration::from_secs(10), r.actor)
        .await
        .expect("task ends")
        .expect("actor")
}

fn runtime() -> FakeRuntime {
    let rt = FakeRuntime::new();
    rt.add_image("img");
    rt.script(
        "app",
        Script {
            exit_code: Some(0),
            ..Default::default()
        },
    );
    rt
}

/// The first save fails (the disk is full before anything is created): nothing is pulled or
/// created, the task is degraded, and once saves succeed it runs once and ends.
#[tokio::test]
async fn a_failed_first_save_creates_nothing_until_a_save_succeeds() {
    let rt = runtime();
    let store = FlakyStore::failing_from(|_| true);
    let metrics = Arc::new(EngineMetrics::default());
    let s = state(vec![container("app")]);
    let id = s.id.clone();
    let running = spawn(&rt, s, config(&store, &metrics));
    wait_for("three failed saves", || store.failures() >= 3).await;
    let calls = rt.calls();
    assert_eq!(count(&calls, "pull"), 0, "{calls:?}");
    assert_eq!(count(&calls, "create"), 0, "{calls:?}");
    let degraded = metrics.degraded();
    assert_eq!(degraded.len(), 1, "{degraded:?}");
    assert_eq!(degraded[0].0, id);
    assert!(degraded[0].1.contains("No space left"), "{degraded:?}");
    assert!(!running.actor.is_finished());

    store.failing.store(false, Ordering::SeqCst);
    let done = finish(running).await;
    assert_eq!(done.known(), Status::Stopped);
    let calls = rt.calls();
    assert_eq!(count(&calls, "create berth-fam-1-app"), 1, "{calls:?}");
    assert_eq!(count(&calls, "start berth-fam-1-app"), 1, "{calls:?}");
    assert!(metrics.degraded().is_empty());
    assert_eq!(store.durable(), Some(done));
}

/// The save of "the essential container stopped" fails: the sidecar is not stopped and the actor
/// does not return (the agent cleans up only after it returns, so nothing is removed under a store
/// that still says RUNNING); once a save succeeds the stop goes on and the durable state is the
/// finished one.
#[tokio::test]
async fn a_failed_save_at_stop_holds_the_stop_and_the_end() {
    let rt = runtime();
    let store = FlakyStore::failing_from(|s: &TaskState| s.containers[1].known == Status::Stopped);
    let metrics = Arc::new(EngineMetrics::default());
    let s = state(vec![non_essential(container("side")), container("app")]);
    let running = spawn(&rt, s, config(&store, &metrics));
    wait_for("failed saves at stop", || store.failures() >= 3).await;
    let calls = rt.calls();
    assert_eq!(count(&calls, "stop berth-fam-1-side"), 0, "{calls:?}");
    assert_eq!(metrics.degraded().len(), 1);
    assert!(!running.actor.is_finished());
    let durable = store.durable().expect("saved before the disk filled");
    assert_ne!(durable.containers[1].known, Status::Stopped);

    store.failing.store(false, Ordering::SeqCst);
    let done = finish(running).await;
    assert!(done.is_finished());
    assert_eq!(count(&rt.calls(), "stop berth-fam-1-side"), 1);
    assert_eq!(count(&rt.calls(), "start berth-fam-1-app"), 1);
    assert!(metrics.degraded().is_empty());
    assert_eq!(store.durable(), Some(done));
}

/// The agent is stopped (or killed) while saves fail, at several moments of the task's life, and
/// a new agent resumes from what was durable: no container is created twice, and `app`, which
/// exits 0, is never started again.
#[tokio::test]
async fn a_restart_while_saves_fail_never_runs_anything_twice() {
    type Moment = fn(&TaskState) -> bool;
    let moments: [(&str, Moment); 4] = [
        ("before anything", |_| true),
        ("after the pulls", |s| {
            s.containers.iter().all(|c| c.known >= Status::Pulled)
        }),
        ("after app's create", |s| {
            s.containers[1].docker_id.is_some()
        }),
        ("at app's exit", |s| {
            s.containers[1].known == Status::Stopped
        }),
    ];
    for (moment, trigger) in moments {
        let rt = runtime();
        let store = FlakyStore::failing_from(trigger);
        let metrics = Arc::new(EngineMetrics::default());
        let s = state(vec![non_essential(container("side")), container("app")]);
        let running = spawn(&rt, s, config(&store, &metrics));
        wait_for("failed saves", || store.failures() >= 2).await;
        running.cancel.cancel();
        let left = finish(running).await;
        assert!(!left.is_finished(), "{moment}");

        // The next agent: the disk has room again; it resumes what the store holds.
        store.failing.store(false, Ordering::SeqCst);
        let resumed = store
            .durable()
            .unwrap_or_else(|| state(vec![non_essential(container("side")), container("app")]));
        let config = RunConfig {
            resume: true,
            ..config(&store, &metrics)
        };
        let done = finish(spawn(&rt, resumed, config)).await;
        assert!(done.is_finished(), "{moment}");
        let calls = rt.calls();
        for c in ["side", "app"] {
            assert_eq!(
                count(&calls, &format!("create berth-fam-1-{c}")),
                1,
                "{moment}: {calls:?}"
            );
            assert_eq!(
                count(&calls, &format!("start berth-fam-1-{c}")),
                1,
                "{moment}: {calls:?}"
            );
        }
        assert_eq!(store.durable(), Some(done), "{moment}");
    }
}
