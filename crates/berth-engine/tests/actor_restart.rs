//! Restart policies through the task actor on the fake runtime: a restart is `start` of the same
//! container (created once), reported as a `restarted` event, counted in the state; a stop while
//! the container keeps exiting and being restarted wins, and the task ends STOPPED.

mod common;

use berth_engine::fake::{FakeRuntime, Script};
use berth_engine::report::Report;
use berth_engine::{Command, Options, RunConfig, Status, run_task};
use common::*;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

#[tokio::test]
async fn restarts_start_the_same_container_until_a_stop_wins() {
    let rt = FakeRuntime::new();
    rt.add_image("img");
    // The fake's container exits 1 right after every start.
    rt.script(
        "web",
        Script {
            exit_code: Some(1),
            ..Default::default()
        },
    );
    let mut web = container("web");
    web.restart_policy = Some(berth_model::RestartPolicy {
        enabled: true,
        ignored_exit_codes: vec![0],
        restart_attempt_period: 60,
    });
    let s = state(vec![web]);
    let (rtx, mut rrx) = mpsc::unbounded_channel();
    let (ctx, crx) = mpsc::channel::<Command>(1);
    let (stx, mut srx) = watch::channel(s.clone());
    let mut config = RunConfig::new(std::env::temp_dir().join("berth-engine-fake-tests"));
    // No time passes in the fake between a start and its exit: a zero period restarts every exit.
    config.options = Options {
        restart_period_override_ms: Some(0),
        ..Options::default()
    };
    let actor = tokio::spawn(run_task(Arc::new(rt.clone()), s, config, rtx, crx, stx));
    // Once it has been restarted three times, stop the task.
    tokio::time::timeout(
        Duration::from_secs(10),
        srx.wait_for(|s| s.containers[0].restart_count >= 3),
    )
    .await
    .expect("three restarts")
    .expect("the actor runs");
    ctx.send(Command::Stop {
        reason: "stopped by test".into(),
    })
    .await
    .expect("the actor takes commands");
    let done = tokio::time::timeout(Duration::from_secs(10), actor)
        .await
        .expect("the task ends")
        .expect("no panic");
    assert!(done.is_finished());
    let c = &done.containers[0];
    assert_eq!(c.known, Status::Stopped);
    assert_eq!(c.exit_code, Some(1), "the exit that was not restarted");
    assert_eq!(done.stopped_reason.as_deref(), Some("stopped by test"));
    let calls = rt.calls();
    let creates = calls.iter().filter(|c| c.starts_with("create ")).count();
    let starts = calls.iter().filter(|c| c.starts_with("start ")).count();
    assert_eq!(creates, 1, "restarted in place: {calls:?}");
    assert_eq!(
        starts,
        1 + c.restart_count as usize,
        "one start per restart counted: {calls:?}"
    );
    let mut restarted = Vec::new();
    while let Ok(r) = rrx.try_recv() {
        if let Report::Restarted {
            restart_count,
            exit_code,
            docker_id,
            ..
        } = r
        {
            assert_eq!(exit_code, Some(1));
            assert_eq!(Some(docker_id), c.docker_id);
            restarted.push(restart_count);
        }
    }
    let expected: Vec<u32> = (1..=c.restart_count).collect();
    assert_eq!(restarted, expected, "one event per restart, in order");
}
