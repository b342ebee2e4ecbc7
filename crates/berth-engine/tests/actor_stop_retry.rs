//! The actor with stops the runtime refuses (the fake's `stop_refusals`): the container is never
//! published STOPPED while the runtime still runs it, each refusal is one `stopFailed` report,
//! the stop is sent again on its schedule or at once when asked again, and the task ends STOPPED
//! once a stop goes through.

mod common;

use berth_engine::fake::{FakeRuntime, Script};
use berth_engine::report::Report;
use berth_engine::{Command, RunConfig, Runtime as _, Status, TaskState, run_task};
use common::*;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

struct Running {
    actor: tokio::task::JoinHandle<TaskState>,
    commands: mpsc::Sender<Command>,
    reports: mpsc::UnboundedReceiver<Report>,
    snapshots: watch::Receiver<TaskState>,
}

fn start(rt: &FakeRuntime, refusals: u32) -> Running {
    rt.add_image("img");
    rt.script(
        "web",
        Script {
            stop_refusals: refusals,
            ..Default::default()
        },
    );
    let s = state(vec![container("web")]);
    let (rtx, reports) = mpsc::unbounded_channel();
    let (commands, crx) = mpsc::channel::<Command>(4);
    let (stx, snapshots) = watch::channel(s.clone());
    let config = RunConfig::new(std::env::temp_dir().join("berth-engine-fake-tests"));
    let actor = tokio::spawn(run_task(Arc::new(rt.clone()), s, config, rtx, crx, stx));
    Running {
        actor,
        commands,
        reports,
        snapshots,
    }
}

impl Running {
    async fn wait_until(&mut self, what: &str, pred: impl Fn(&TaskState) -> bool) {
        let mut rx = self.snapshots.clone();
        let waited = tokio::time::timeout(Duration::from_secs(10), rx.wait_for(|s| pred(s))).await;
        match waited {
            Ok(Ok(_)) => {}
            _ => panic!("never {what}: {:#?}", *self.snapshots.borrow()),
        }
    }

    /// The stop failures reported so far: (attempt, error).
    fn stop_failures(&mut self) -> Vec<(u32, String)> {
        let mut out = Vec::new();
        while let Ok(r) = self.reports.try_recv() {
            if let Report::StopFailed { attempt, error, .. } = r {
                out.push((attempt, error));
            }
        }
        out
    }
}

/// Every snapshot published while the fake still runs `web` shows it RUNNING, never STOPPED.
async fn watch_never_stopped_while_running(
    rt: FakeRuntime,
    mut snapshots: watch::Receiver<TaskState>,
) -> usize {
    let mut seen = 0;
    while snapshots.changed().await.is_ok() {
        let s = snapshots.borrow_and_update().clone();
        seen += 1;
        if s.containers[0].known == Status::Stopped {
            let id = s.containers[0].docker_id.clone().expect("an id");
            let info = rt.inspect(&id).await.expect("inspect");
            assert!(!info.running, "published STOPPED while running: {s:#?}");
        }
        if s.is_finished() {
            break;
        }
    }
    seen
}

#[tokio::test]
async fn refused_stops_are_retried_on_their_schedule_until_one_goes_through() {
    let rt = FakeRuntime::new();
    let mut run = start(&rt, 2);
    let watcher = tokio::spawn(watch_never_stopped_while_running(
        rt.clone(),
        run.snapshots.clone(),
    ));
    run.wait_until("running", |s| s.known() == Status::Running)
        .await;
    run.commands
        .send(Command::Stop {
            reason: "user".into(),
        })
        .await
        .expect("send");
    run.wait_until("stopping with an error", |s| {
        s.containers[0].stop_error.is_some() && s.containers[0].known == Status::Running
    })
    .await;
    let t = Instant::now();
    let done = tokio::time::timeout(Duration::from_secs(10), &mut run.actor)
        .await
        .expect("the task ends")
        .expect("the actor");
    // Two refusals: retried after 1 s, then 2 s.
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_millis(2_800) && waited < Duration::from_secs(6),
        "{waited:?}"
    );
    assert!(done.is_finished());
    let c = &done.containers[0];
    assert_eq!((c.known, c.exit_code), (Status::Stopped, Some(143)));
    assert_eq!(c.stop_failures, 2);
    assert_eq!(
        c.stop_error.as_deref(),
        Some(
            "CannotStopContainerError: the fake Engine refuses to stop ".to_string()
                + &c.docker_name
        )
        .as_deref()
    );
    let calls = rt.calls().iter().filter(|c| c.starts_with("stop ")).count();
    assert_eq!(calls, 3, "{:?}", rt.calls());
    let failures = run.stop_failures();
    assert_eq!(
        failures.iter().map(|(a, _)| *a).collect::<Vec<_>>(),
        [1, 2],
        "one report per failed attempt"
    );
    assert!(watcher.await.expect("watcher") > 0);
}

#[tokio::test]
async fn a_stop_asked_again_is_sent_at_once() {
    let rt = FakeRuntime::new();
    let mut run = start(&rt, 1);
    run.wait_until("running", |s| s.known() == Status::Running)
        .await;
    let stop = Command::Stop {
        reason: "user".into(),
    };
    run.commands.send(stop.clone()).await.expect("send");
    run.wait_until("stopping with an error", |s| {
        s.containers[0].stop_error.is_some()
    })
    .await;
    run.commands.send(stop).await.expect("send");
    // The second stop went out at once, not after the 1 s retry delay.
    let t = Instant::now();
    let done = tokio::time::timeout(Duration::from_secs(10), run.actor)
        .await
        .expect("the task ends")
        .expect("the actor");
    assert!(
        t.elapsed() < Duration::from_millis(700),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(done.containers[0].known, Status::Stopped);
}

#[tokio::test]
async fn after_a_restart_a_failed_stop_is_sent_again_at_once() {
    let rt = FakeRuntime::new();
    rt.add_image("img");
    rt.script(
        "web",
        Script {
            stop_refusals: 1_000,
            ..Default::default()
        },
    );
    let s = state(vec![container("web")]);
    let (rtx, _reports) = mpsc::unbounded_channel();
    let (commands, crx) = mpsc::channel::<Command>(4);
    let (stx, mut snapshots) = watch::channel(s.clone());
    let config = RunConfig::new(std::env::temp_dir().join("berth-engine-fake-tests"));
    let cancel = config.cancel.clone();
    let actor = tokio::spawn(run_task(Arc::new(rt.clone()), s, config, rtx, crx, stx));
    tokio::time::timeout(
        Duration::from_secs(10),
        snapshots.wait_for(|s| s.known() == Status::Running),
    )
    .await
    .expect("runs")
    .expect("published");
    commands
        .send(Command::Stop {
            reason: "user".into(),
        })
        .await
        .expect("send");
    tokio::time::timeout(
        Duration::from_secs(10),
        snapshots.wait_for(|s| s.containers[0].stop_error.is_some()),
    )
    .await
    .expect("a stop failed")
    .expect("published");
    // The agent shuts down with the stop failing; the task is stored as it was.
    cancel.cancel();
    let mut stored = actor.await.expect("the actor");
    assert_eq!(stored.containers[0].known, Status::Running);
    stored.containers[0].stop_retry_at = Some(berth_engine::report::now_ms() + 3_600_000);

    // The next agent: the Engine answers again, and the stop goes out at once, not in an hour.
    rt.script("web", Script::default());
    let (rtx, _reports) = mpsc::unbounded_channel();
    let (_commands, crx) = mpsc::channel::<Command>(4);
    let (stx, _snapshots) = watch::channel(stored.clone());
    let config = RunConfig {
        resume: true,
        ..RunConfig::new(std::env::temp_dir().join("berth-engine-fake-tests"))
    };
    let done = tokio::time::timeout(
        Duration::from_secs(2),
        run_task(Arc::new(rt.clone()), stored, config, rtx, crx, stx),
    )
    .await
    .expect("stopped at once after the restart");
    assert!(done.is_finished());
    assert_eq!(done.containers[0].known, Status::Stopped);
}
