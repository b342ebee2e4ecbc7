//! Table tests of the pure decision core: every condition × every state of the dependency.

mod common;

use berth_engine::decide::{Action, Event, Options, decide};
use berth_engine::state::{EXIT_CODE_NOT_RUN, Health, Status, StopKind, TaskState};
use berth_model::Condition;
use common::*;

/// The states a dependency can be in, as seen by its dependent.
#[derive(Debug, Clone, Copy)]
enum DepState {
    NotCreated,
    Created,
    Running,
    RunningHealthy,
    RunningUnhealthy,
    Exited0,
    Exited1,
    StoppedNeverRan,
}

/// What the dependent (known PULLED, or CREATED) is told to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Wait,
    Create,
    Start,
    Never,
}

fn put(state: &mut TaskState, i: usize, dep: DepState) {
    let evs: Vec<Event> = match dep {
        DepState::NotCreated => vec![],
        DepState::Created => vec![created(i)],
        DepState::Running => vec![created(i), started(i)],
        DepState::RunningHealthy => vec![created(i), started(i), health(i, Health::Healthy)],
        DepState::RunningUnhealthy => {
            vec![created(i), started(i), health(i, Health::Unhealthy)]
        }
        DepState::Exited0 => vec![created(i), started(i), exited(i, 0)],
        DepState::Exited1 => vec![created(i), started(i), exited(i, 1)],
        DepState::StoppedNeverRan => vec![Event::CreateFailed {
            container: i,
            at: 5,
            message: "boom".into(),
        }],
    };
    for e in evs {
        state.apply(&e);
    }
}

fn created(i: usize) -> Event {
    Event::Created {
        container: i,
        docker_id: format!("id{i}"),
        at: 2,
    }
}
fn started(i: usize) -> Event {
    Event::Started {
        container: i,
        at: 3,
    }
}
fn health(i: usize, health: Health) -> Event {
    Event::Health {
        container: i,
        health,
    }
}
fn exited(i: usize, code: i64) -> Event {
    Event::Exited {
        container: i,
        exit_code: Some(code),
        started_at: None,
        at: 4,
    }
}

fn outcome(state: &TaskState) -> Expect {
    let d = decide(state, Options::default(), 10);
    for a in &d.actions {
        match a {
            Action::Create(1) => return Expect::Create,
            Action::Start(1) => return Expect::Start,
            Action::MarkStopped {
                container: 1,
                exit_code,
                reason,
            } => {
                assert_eq!(*exit_code, Some(EXIT_CODE_NOT_RUN));
                assert!(
                    reason.as_deref().unwrap_or("").contains("dependency a"),
                    "reason names the dependency: {reason:?}"
                );
                return Expect::Never;
            }
            _ => {}
        }
    }
    Expect::Wait
}

fn run_case(condition: Condition, dep: DepState, dependent_created: bool) -> Expect {
    let a = healthy(non_essential(container("a")));
    let b = depends(container("b"), "a", condition);
    let mut s = state(vec![a, b]);
    s.apply(&Event::Pulled {
        container: 0,
        at: 1,
    });
    s.apply(&Event::Pulled {
        container: 1,
        at: 1,
    });
    if dependent_created {
        s.apply(&created(1));
    }
    put(&mut s, 0, dep);
    outcome(&s)
}

#[test]
fn every_condition_against_every_dependency_state() {
    use Condition as C;
    use DepState::*;
    use Expect::*;
    // (condition, dependency state, expected for a PULLED dependent, expected for a CREATED one)
    let table = [
        (C::Start, NotCreated, Wait, Wait),
        (C::Start, Created, Create, Wait),
        (C::Start, Running, Create, Start),
        (C::Start, Exited0, Create, Start),
        (C::Start, Exited1, Create, Start),
        (C::Start, StoppedNeverRan, Never, Never),
        (C::Complete, NotCreated, Wait, Wait),
        (C::Complete, Created, Wait, Wait),
        (C::Complete, Running, Wait, Wait),
        (C::Complete, Exited0, Create, Start),
        (C::Complete, Exited1, Create, Start),
        (C::Complete, StoppedNeverRan, Never, Never),
        (C::Success, NotCreated, Wait, Wait),
        (C::Success, Created, Wait, Wait),
        (C::Success, Running, Wait, Wait),
        (C::Success, Exited0, Create, Start),
        (C::Success, Exited1, Never, Never),
        (C::Success, StoppedNeverRan, Never, Never),
        (C::Healthy, NotCreated, Wait, Wait),
        (C::Healthy, Created, Wait, Wait),
        (C::Healthy, Running, Wait, Wait),
        (C::Healthy, RunningHealthy, Create, Start),
        (C::Healthy, RunningUnhealthy, Never, Never),
        (C::Healthy, Exited0, Never, Never),
        (C::Healthy, StoppedNeverRan, Never, Never),
    ];
    for (cond, dep, pulled, created) in table {
        assert_eq!(
            run_case(cond, dep, false),
            pulled,
            "{cond:?} with dependency {dep:?}, dependent PULLED"
        );
        assert_eq!(
            run_case(cond, dep, true),
            created,
            "{cond:?} with dependency {dep:?}, dependent CREATED"
        );
    }
}

#[test]
fn start_timeout_makes_a_waiting_dependency_terminal_and_sets_a_timer() {
    let mut a = healthy(non_essential(container("a")));
    a.start_timeout = Some(5);
    let b = depends(container("b"), "a", Condition::Healthy);
    let mut s = state(vec![a, b]);
    for i in 0..2 {
        s.apply(&Event::Pulled {
            container: i,
            at: 0,
        });
    }
    s.apply(&created(0));
    s.apply(&Event::Started {
        container: 0,
        at: 1_000,
    });
    let d = decide(&s, Options::default(), 2_000);
    assert_eq!(d.wake_at, Some(6_000), "timer at start + startTimeout");
    assert!(d.actions.is_empty());
    let d = decide(&s, Options::default(), 6_000);
    match &d.actions[..] {
        [
            Action::MarkStopped {
                container: 1,
                reason: Some(r),
                exit_code: Some(143),
            },
        ] => assert!(r.contains("startTimeout of 5s"), "{r}"),
        other => panic!("expected b to be stopped, got {other:?}"),
    }
}

#[test]
fn essential_stop_stops_the_task_and_shutdown_runs_in_reverse_order() {
    // c depends on b depends on a; all running; a (essential) exits.
    let a = container("a");
    let b = depends(container("b"), "a", Condition::Start);
    let c = depends(container("c"), "b", Condition::Start);
    let mut s = state(vec![a, b, c]);
    for i in 0..3 {
        s.apply(&Event::Pulled {
            container: i,
            at: 0,
        });
        s.apply(&created(i));
        s.apply(&started(i));
    }
    assert_eq!(s.known(), Status::Running);
    s.apply(&exited(0, 0));
    let (effects, _) = s.step(Options::default(), 10);
    assert_eq!(s.desired, Status::Stopped);
    assert_eq!(
        s.stopped_reason.as_deref(),
        Some("Essential container in task exited")
    );
    // Only c (no dependents) is stopped first.
    assert_eq!(
        effects,
        vec![Action::Stop {
            container: 2,
            timeout_secs: 30
        }]
    );
    s.apply(&exited(2, 143));
    let (effects, _) = s.step(Options::default(), 11);
    assert_eq!(
        effects,
        vec![Action::Stop {
            container: 1,
            timeout_secs: 30
        }]
    );
    s.apply(&exited(1, 143));
    let (effects, _) = s.step(Options::default(), 12);
    assert!(effects.is_empty());
    assert!(s.is_finished());
    assert_eq!(berth_engine::report::task_exit_code(&s), 0);
}

#[test]
fn non_essential_exit_leaves_the_task_running() {
    let a = non_essential(container("a"));
    let b = container("b");
    let mut s = state(vec![a, b]);
    for i in 0..2 {
        s.apply(&Event::Pulled {
            container: i,
            at: 0,
        });
        s.apply(&created(i));
        s.apply(&started(i));
    }
    s.apply(&exited(0, 3));
    let (effects, _) = s.step(Options::default(), 10);
    assert!(effects.is_empty());
    assert_eq!(s.desired, Status::Running);
    assert_eq!(s.known(), Status::Running);
}

#[test]
fn pull_failure_of_an_essential_container_stops_the_task_with_the_reason() {
    let a = container("a");
    let b = depends(container("b"), "a", Condition::Success);
    let mut s = state(vec![a, b]);
    let (effects, _) = s.step(Options::default(), 0);
    assert_eq!(
        effects,
        vec![Action::Pull(0)],
        "b waits for a before its pull"
    );
    s.apply(&Event::PullFailed {
        container: 0,
        at: 1,
        message: "CannotPullContainerError: manifest unknown".into(),
        stop_task: false,
    });
    let (effects, _) = s.step(Options::default(), 2);
    assert!(effects.is_empty());
    assert_eq!(
        s.stopped_reason.as_deref(),
        Some("CannotPullContainerError: manifest unknown")
    );
    assert!(s.is_finished());
    assert_eq!(berth_engine::report::task_exit_code(&s), 125);
}

#[test]
fn pull_upfront_pulls_every_image_at_once() {
    let a = container("a");
    let b = depends(container("b"), "a", Condition::Success);
    let mut s = state(vec![a, b]);
    let (effects, _) = s.step(
        Options {
            pull_upfront: true,
            ..Options::default()
        },
        0,
    );
    assert_eq!(effects, vec![Action::Pull(0), Action::Pull(1)]);
}

#[test]
fn known_status_never_decreases_on_late_events() {
    let mut s = state(vec![container("a")]);
    s.apply(&Event::Pulled {
        container: 0,
        at: 0,
    });
    s.apply(&created(0));
    s.apply(&exited(0, 2));
    s.apply(&started(0));
    s.apply(&Event::Pulled {
        container: 0,
        at: 9,
    });
    assert_eq!(s.containers[0].known, Status::Stopped);
    assert_eq!(s.containers[0].exit_code, Some(2));
}

#[test]
fn a_user_stop_before_anything_ran_ends_without_docker_calls() {
    let mut s = state(vec![
        container("a"),
        depends(container("b"), "a", Condition::Start),
    ]);
    s.request_stop("stopped by user", StopKind::Requested);
    let (effects, _) = s.step(Options::default(), 0);
    assert!(effects.is_empty());
    assert!(s.is_finished());
    assert_eq!(s.stopped_reason.as_deref(), Some("stopped by user"));
}

// ---- Restart policies -------------------------------------------------------------------------

/// A policy with this period (seconds) and these ignored exit codes.
fn restarting(
    mut c: berth_model::ContainerDefinition,
    period: u32,
    ignored: &[i64],
) -> berth_model::ContainerDefinition {
    c.restart_policy = Some(berth_model::RestartPolicy {
        enabled: true,
        ignored_exit_codes: ignored.to_vec(),
        restart_attempt_period: period,
    });
    c
}

/// Container 0 of `s` pulled, created, started at 1 000 ms and running.
fn running_since_one_second(s: &mut TaskState) {
    pulled(s, 0);
    s.apply(&Event::Created {
        container: 0,
        docker_id: "id0".into(),
        at: 500,
    });
    s.apply(&Event::Started {
        container: 0,
        at: 1_000,
    });
}

fn exit_at(i: usize, code: i64, at: i64) -> Event {
    Event::Exited {
        container: i,
        exit_code: Some(code),
        started_at: None,
        at,
    }
}

/// Every reason a restart policy restarts or keeps a container stopped, judged at `now`.
#[test]
fn restart_policy_table() {
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Want {
        Restart,
        Stopped,
    }
    // (policy: Some((enabled, period s, ignored)), exit code, judged at ms, want)
    type Row = (Option<(bool, u32, &'static [i64])>, i64, i64, Want);
    let rows: &[Row] = &[
        (Some((true, 60, &[])), 1, 61_000, Want::Restart),
        (Some((true, 60, &[])), 0, 61_000, Want::Restart),
        (Some((true, 60, &[])), 137, 61_000, Want::Restart),
        (Some((true, 60, &[])), 1, 60_999, Want::Stopped),
        (Some((true, 60, &[0])), 0, 61_000, Want::Stopped),
        (Some((true, 60, &[0, 1])), 1, 61_000, Want::Stopped),
        (Some((true, 300, &[])), 1, 61_000, Want::Stopped),
        (Some((true, 300, &[])), 1, 301_000, Want::Restart),
        (Some((false, 60, &[])), 1, 61_000, Want::Stopped),
        (None, 1, 61_000, Want::Stopped),
    ];
    for &(policy, code, now, want) in rows {
        let mut c = non_essential(container("a"));
        if let Some((enabled, period, ignored)) = policy {
            c = restarting(c, period, ignored);
            if let Some(p) = c.restart_policy.as_mut() {
                p.enabled = enabled;
            }
        }
        let mut s = state(vec![c, container("b")]);
        running_since_one_second(&mut s);
        s.apply(&exit_at(0, code, now - 10));
        let (effects, _) = s.step(Options::default(), now);
        let c = &s.containers[0];
        let got = if effects.contains(&Action::Restart(0)) {
            assert_eq!(c.known, Status::Running, "a restart is not a stop");
            assert_eq!(c.restart_count, 1);
            assert_eq!(c.last_restart_at, Some(now));
            assert_eq!(c.last_restart_exit_code, Some(code));
            Want::Restart
        } else {
            assert_eq!(c.known, Status::Stopped);
            assert_eq!(c.exit_code, Some(code));
            assert_eq!(c.finished_at, Some(now - 10), "Docker's exit time");
            assert_eq!(c.restart_count, 0);
            Want::Stopped
        };
        assert_eq!(got, want, "policy {policy:?}, exit {code}, judged at {now}");
    }
}

#[test]
fn a_restarted_essential_container_keeps_the_task_and_its_dependents_running() {
    let web = restarting(container("web"), 60, &[]);
    let side = depends(container("side"), "web", Condition::Start);
    let mut s = state(vec![web, side]);
    running_since_one_second(&mut s);
    pulled(&mut s, 1);
    s.apply(&created(1));
    s.apply(&started(1));
    s.apply(&exit_at(0, 1, 70_000));
    let (effects, _) = s.step(Options::default(), 70_001);
    assert_eq!(effects, vec![Action::Restart(0)]);
    assert_eq!(s.desired, Status::Running, "the task does not stop");
    assert_eq!(s.known(), Status::Running);
    assert_eq!(
        s.containers[1].desired,
        Status::Running,
        "the dependent keeps running"
    );
    s.apply(&Event::Restarted {
        container: 0,
        at: 70_100,
    });
    let (effects, _) = s.step(Options::default(), 70_200);
    assert!(effects.is_empty(), "{effects:?}");
    let c = &s.containers[0];
    assert_eq!(
        (c.in_flight, c.restart_owed, c.restart_count),
        (None, false, 1)
    );
    // An exit sooner than the period after the restart is not restarted: the task stops as
    // without a policy.
    s.apply(&exit_at(0, 1, 100_000));
    let (effects, _) = s.step(Options::default(), 100_001);
    assert_eq!(s.containers[0].known, Status::Stopped);
    assert_eq!(
        s.stopped_reason.as_deref(),
        Some("Essential container in task exited")
    );
    assert!(
        matches!(effects.as_slice(), [Action::Stop { container: 1, .. }]),
        "{effects:?}"
    );
    // The die of the first run, replayed by Docker's event stream, changes nothing.
    let before = s.clone();
    s.apply(&exit_at(0, 1, 70_000));
    assert_eq!(s, before);
}

#[test]
fn a_stop_during_a_restart_wins() {
    let mut s = state(vec![restarting(container("web"), 60, &[])]);
    running_since_one_second(&mut s);
    s.apply(&exit_at(0, 1, 70_000));
    let (effects, _) = s.step(Options::default(), 70_001);
    assert_eq!(effects, vec![Action::Restart(0)]);
    // The stop comes while `docker start` is in flight: once it answers, the container is stopped.
    s.request_stop("stopped by user", StopKind::Requested);
    let (effects, _) = s.step(Options::default(), 70_002);
    assert!(
        effects.is_empty(),
        "nothing while the restart is in flight: {effects:?}"
    );
    s.apply(&Event::Restarted {
        container: 0,
        at: 70_010,
    });
    let (effects, _) = s.step(Options::default(), 70_020);
    assert!(
        matches!(effects.as_slice(), [Action::Stop { container: 0, .. }]),
        "{effects:?}"
    );
    s.apply(&exit_at(0, 143, 70_030));
    let (effects, _) = s.step(Options::default(), 70_040);
    assert!(effects.is_empty());
    assert!(s.is_finished());
    assert_eq!(s.containers[0].exit_code, Some(143));
}

#[test]
fn a_stop_before_a_pending_or_owed_restart_is_performed_wins_without_docker_calls() {
    // Pending: the exit is not judged yet when the stop comes.
    let mut s = state(vec![restarting(container("web"), 60, &[])]);
    running_since_one_second(&mut s);
    s.apply(&exit_at(0, 1, 70_000));
    s.request_stop("stopped by user", StopKind::Requested);
    let (effects, _) = s.step(Options::default(), 70_001);
    assert!(effects.is_empty(), "{effects:?}");
    assert!(s.is_finished());
    assert_eq!(s.containers[0].exit_code, Some(1));
    assert_eq!(s.containers[0].restart_count, 0);
    // Owed: decided and counted, `docker start` not confirmed (an agent crash in between).
    let mut s = state(vec![restarting(container("web"), 60, &[])]);
    running_since_one_second(&mut s);
    s.apply(&exit_at(0, 1, 70_000));
    let (effects, _) = s.step(Options::default(), 70_001);
    assert_eq!(effects, vec![Action::Restart(0)]);
    s.containers[0].in_flight = None; // what adoption does
    s.request_stop("stopped by user", StopKind::Requested);
    let (effects, _) = s.step(Options::default(), 70_002);
    assert!(effects.is_empty(), "{effects:?}");
    assert!(s.is_finished());
    assert_eq!(s.containers[0].exit_code, Some(1));
    assert_eq!(
        s.containers[0].restart_count, 1,
        "counted once, never started"
    );
}

#[test]
fn an_owed_restart_is_performed_once_and_counted_once() {
    let mut s = state(vec![restarting(container("web"), 60, &[])]);
    running_since_one_second(&mut s);
    s.apply(&exit_at(0, 1, 70_000));
    let (effects, _) = s.step(Options::default(), 70_001);
    assert_eq!(effects, vec![Action::Restart(0)]);
    // The agent died before `docker start`; the next one forgets the in-flight operation and
    // sees Docker's (old) exit again.
    s.containers[0].in_flight = None;
    s.apply(&exit_at(0, 1, 70_000));
    let (effects, _) = s.step(Options::default(), 90_000);
    assert_eq!(effects, vec![Action::Restart(0)]);
    let c = &s.containers[0];
    assert_eq!((c.restart_count, c.last_restart_at), (1, Some(70_001)));
}

#[test]
fn a_failed_restart_stops_the_container_with_its_exit_code() {
    let mut s = state(vec![restarting(container("web"), 60, &[])]);
    running_since_one_second(&mut s);
    s.apply(&exit_at(0, 3, 70_000));
    let (effects, _) = s.step(Options::default(), 70_001);
    assert_eq!(effects, vec![Action::Restart(0)]);
    s.apply(&Event::RestartFailed {
        container: 0,
        at: 70_002,
        message: "CannotStartContainerError: restart failed: boom".into(),
    });
    let (effects, _) = s.step(Options::default(), 70_003);
    assert!(effects.is_empty());
    let c = &s.containers[0];
    assert_eq!((c.known, c.exit_code), (Status::Stopped, Some(3)));
    assert_eq!(
        c.reason.as_deref(),
        Some("CannotStartContainerError: restart failed: boom")
    );
    assert_eq!(
        s.stopped_reason.as_deref(),
        Some("Essential container in task exited")
    );
    assert!(s.is_finished());
}

#[test]
fn complete_and_success_wait_while_the_dependency_is_restarted() {
    for condition in [Condition::Complete, Condition::Success] {
        let init = restarting(non_essential(container("init")), 60, &[0]);
        let web = depends(container("web"), "init", condition);
        let mut s = state(vec![init, web]);
        running_since_one_second(&mut s);
        pulled(&mut s, 1);
        // Exit 1 after the period: restarted, so web waits.
        s.apply(&exit_at(0, 1, 70_000));
        let (effects, _) = s.step(Options::default(), 70_001);
        assert_eq!(effects, vec![Action::Restart(0)], "{condition:?}");
        s.apply(&Event::Restarted {
            container: 0,
            at: 70_002,
        });
        let (effects, _) = s.step(Options::default(), 70_003);
        assert!(effects.is_empty(), "{condition:?} waits: {effects:?}");
        // Exit 0 is ignored: init stays STOPPED and web goes on.
        s.apply(&exit_at(0, 0, 80_000));
        let (effects, _) = s.step(Options::default(), 80_001);
        assert_eq!(effects, vec![Action::Create(1)], "{condition:?}");
    }
}

#[test]
fn the_test_override_shortens_the_period() {
    let mut s = state(vec![restarting(container("web"), 1800, &[])]);
    running_since_one_second(&mut s);
    s.apply(&exit_at(0, 1, 3_000));
    let opts = Options {
        restart_period_override_ms: Some(2_000),
        ..Options::default()
    };
    let (effects, _) = s.step(opts, 3_001);
    assert_eq!(effects, vec![Action::Restart(0)]);
}

#[test]
fn a_task_saved_before_restart_policies_loads_with_no_restarts() {
    let s = state(vec![container("web")]);
    let mut saved = serde_json::to_value(&s).expect("serialize");
    let c = &saved["containers"][0];
    for key in [
        "restartCount",
        "lastRestartAt",
        "lastRestartExitCode",
        "pendingExit",
        "restartOwed",
    ] {
        assert!(
            c.get(key).is_none(),
            "{key} is not written while unused: {c}"
        );
    }
    saved["containers"][0]
        .as_object_mut()
        .expect("an object")
        .remove("restartCount");
    let loaded: TaskState = serde_json::from_value(saved).expect("an older state loads");
    assert_eq!(loaded.containers[0].restart_count, 0);
    assert_eq!(loaded, s);
}

#[test]
fn dockers_reason_for_an_exit_is_kept_only_when_the_exit_is_not_restarted() {
    let oom = "OutOfMemoryError: Container killed due to memory usage";
    for (now, restarted) in [(70_001, true), (30_000, false)] {
        let mut s = state(vec![restarting(container("web"), 60, &[])]);
        running_since_one_second(&mut s);
        s.apply(&exit_at(0, 137, now - 1));
        s.apply(&Event::ExitReason {
            container: 0,
            reason: oom.into(),
        });
        let (effects, _) = s.step(Options::default(), now);
        let c = &s.containers[0];
        if restarted {
            assert_eq!(effects, vec![Action::Restart(0)]);
            assert_eq!(c.reason, None, "the restarted run has no stop reason");
        } else {
            assert_eq!(c.known, Status::Stopped);
            assert_eq!(c.reason.as_deref(), Some(oom));
        }
    }
}
