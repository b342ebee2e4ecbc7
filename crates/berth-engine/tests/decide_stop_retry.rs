//! A stop is done when Docker says so: the decision core's transitions for a stop that fails. The
//! container stays RUNNING (stopping) with the error, the stop is sent again on `STOP_RETRY`'s
//! schedule (the timer `step` returns), at once when asked again, and only an exit or a vanished
//! container makes it STOPPED.

mod common;

use berth_engine::decide::{Action, Event, Options, STOP_RETRY};
use berth_engine::state::{Status, StopKind, TaskState};
use common::*;

/// A running one-container task asked to stop: its stop is sent (at `now` = 100).
fn stopping_task() -> TaskState {
    let mut s = state(vec![container("web")]);
    started(&mut s, 0);
    s.request_stop("user", StopKind::Requested);
    let (effects, _) = s.step(Options::default(), 100);
    assert!(
        matches!(effects.as_slice(), [Action::Stop { container: 0, .. }]),
        "{effects:?}"
    );
    s
}

fn refused(at: i64) -> Event {
    Event::StopFailed {
        container: 0,
        at,
        message: "CannotStopContainerError: refused".into(),
    }
}

fn ms(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).expect("small")
}

#[test]
fn a_failed_stop_leaves_the_container_running_with_the_error_and_a_retry_timer() {
    let mut s = stopping_task();
    s.apply(&refused(200));
    let c = &s.containers[0];
    assert_eq!((c.known, c.desired), (Status::Running, Status::Stopped));
    assert!(c.stopping());
    assert_eq!(
        c.stop_error.as_deref(),
        Some("CannotStopContainerError: refused")
    );
    assert_eq!(c.stop_failures, 1);
    assert_eq!(c.in_flight, None);
    assert_eq!(c.reason, None, "a failed stop is no stop reason");
    assert_eq!(s.known(), Status::Running, "the task is not STOPPED");
    assert!(!s.is_finished());

    // Before the retry time: nothing to do, and the timer says when to look again.
    let first = 200 + ms(STOP_RETRY.first);
    let (effects, wake_at) = s.step(Options::default(), first - 1);
    assert!(effects.is_empty(), "{effects:?}");
    assert_eq!(wake_at, Some(first));
    // At the retry time the stop is sent again.
    let (effects, _) = s.step(Options::default(), first);
    assert!(
        matches!(effects.as_slice(), [Action::Stop { container: 0, .. }]),
        "{effects:?}"
    );
}

#[test]
fn the_retry_delay_doubles_up_to_its_maximum() {
    let mut s = stopping_task();
    let mut now = 200;
    let mut delays = Vec::new();
    for _ in 0..8 {
        s.apply(&refused(now));
        let (effects, wake_at) = s.step(Options::default(), now);
        assert!(effects.is_empty(), "{effects:?}");
        let t = wake_at.expect("a retry timer");
        delays.push((t - now) / 1000);
        now = t;
        let (effects, _) = s.step(Options::default(), now);
        assert_eq!(effects.len(), 1, "sent again at {now}");
    }
    assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30, 30]);
    assert_eq!(s.containers[0].known, Status::Running);
}

#[test]
fn asked_again_the_stop_is_sent_now_and_the_delay_starts_over() {
    let mut s = stopping_task();
    for at in [200, 2_000, 5_000] {
        s.apply(&refused(at));
        let c = &mut s.containers[0];
        // Pretend each retry was sent (as `step` would at the retry time).
        c.stop_retry_at = Some(at);
        let (effects, _) = s.step(Options::default(), at);
        assert_eq!(effects.len(), 1);
    }
    s.apply(&refused(6_000));
    assert_eq!(s.containers[0].stop_failures, 4);
    assert!(s.retry_stops_now(), "a failed stop was waiting");
    let (effects, _) = s.step(Options::default(), 6_001);
    assert!(
        matches!(effects.as_slice(), [Action::Stop { container: 0, .. }]),
        "{effects:?}"
    );
    s.apply(&refused(6_100));
    assert_eq!(s.containers[0].stop_failures, 1, "the count starts over");
    assert_eq!(
        s.containers[0].stop_retry_at,
        Some(6_100 + ms(STOP_RETRY.first))
    );
    // Nothing is waiting while the stop is in flight or once the container has stopped.
    assert!(s.retry_stops_now());
    let _ = s.step(Options::default(), 6_200);
    assert!(!s.retry_stops_now(), "in flight");
}

#[test]
fn a_resync_that_finds_it_running_sends_it_again_without_resetting_the_delay() {
    let mut s = stopping_task();
    s.apply(&refused(200));
    s.apply(&refused(200));
    assert!(s.retry_stop_now(0, false));
    assert_eq!(s.containers[0].stop_failures, 2);
    let (effects, _) = s.step(Options::default(), 201);
    assert_eq!(effects.len(), 1, "{effects:?}");
}

#[test]
fn only_docker_saying_so_stops_it_an_exit_or_a_vanished_container() {
    let mut s = stopping_task();
    s.apply(&refused(200));
    s.apply(&Event::Exited {
        container: 0,
        exit_code: Some(143),
        started_at: None,
        at: 300,
    });
    let c = &s.containers[0];
    assert_eq!(c.known, Status::Stopped);
    assert_eq!(c.stop_retry_at, None);
    assert_eq!(
        c.stop_error.as_deref(),
        Some("CannotStopContainerError: refused"),
        "kept for inspect"
    );
    assert_eq!(
        c.reason, None,
        "its exit was berth's stop, nothing to explain"
    );
    assert!(s.is_finished());
    // A stop failure that comes after the exit changes nothing.
    s.apply(&refused(400));
    assert_eq!(s.containers[0].known, Status::Stopped);
    assert!(!s.retry_stops_now());

    let mut s = stopping_task();
    s.apply(&refused(200));
    s.apply(&Event::Vanished {
        container: 0,
        at: 300,
        reason: "gone".into(),
    });
    assert_eq!(s.containers[0].known, Status::Stopped);
    assert!(s.is_finished());
}

#[test]
fn a_dependency_waits_while_its_dependents_stop_keeps_failing() {
    let db = container("db");
    let app = depends(container("app"), "db", berth_model::Condition::Start);
    let mut s = state(vec![db, app]);
    started(&mut s, 0);
    started(&mut s, 1);
    s.request_stop("user", StopKind::Requested);
    let (effects, _) = s.step(Options::default(), 100);
    assert!(
        matches!(effects.as_slice(), [Action::Stop { container: 1, .. }]),
        "{effects:?}"
    );
    s.apply(&Event::StopFailed {
        container: 1,
        at: 150,
        message: "CannotStopContainerError: refused".into(),
    });
    // app still runs: db is not stopped under it.
    let (effects, wake_at) = s.step(Options::default(), 200);
    assert!(effects.is_empty(), "{effects:?}");
    assert_eq!(wake_at, Some(150 + ms(STOP_RETRY.first)));
    assert_eq!(s.known(), Status::Running);
}
