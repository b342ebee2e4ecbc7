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
    let (effects, _) = s.step(Options { pull_upfront: true }, 0);
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
