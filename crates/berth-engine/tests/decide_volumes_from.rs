//! The decision core on `volumesFrom` (which orders creation and shutdown like a dependency) and
//! on references that name no container (only a hand-built state can have them).

mod common;

use berth_engine::decide::{Action, Event, Options, decide};
use berth_engine::state::{EXIT_CODE_NOT_RUN, Status, StopKind, TaskState};
use berth_model::{Condition, ContainerDefinition, VolumeFrom};
use common::*;

fn volumes_from(mut c: ContainerDefinition, source: &str) -> ContainerDefinition {
    c.volumes_from.push(VolumeFrom {
        source_container: source.to_string(),
        read_only: false,
    });
    c
}

/// `data` (0) is the source; `app` (1) takes its volumes.
fn data_and_app() -> TaskState {
    state(vec![
        non_essential(container("data")),
        volumes_from(container("app"), "data"),
    ])
}

#[test]
fn the_user_is_created_and_started_only_once_the_source_exists() {
    let mut s = data_and_app();
    pulled(&mut s, 0);
    pulled(&mut s, 1);
    assert_eq!(
        decide(&s, Options::default(), 10).actions,
        vec![Action::Create(0)]
    );
    created(&mut s, 0);
    // The source exists (it need not run): the user may be created, and the source started.
    assert_eq!(
        decide(&s, Options::default(), 10).actions,
        vec![Action::Start(0), Action::Create(1)]
    );
    created(&mut s, 1);
    started(&mut s, 0);
    assert_eq!(
        decide(&s, Options::default(), 10).actions,
        vec![Action::Start(1)]
    );
}

#[test]
fn the_user_is_not_pulled_before_the_source_exists() {
    let s = data_and_app();
    assert_eq!(
        decide(&s, Options::default(), 10).actions,
        vec![Action::Pull(0)]
    );
}

#[test]
fn a_source_that_was_never_created_stops_the_user_without_running_it() {
    let mut s = data_and_app();
    pulled(&mut s, 1);
    s.apply(&Event::PullFailed {
        container: 0,
        at: 5,
        message: "no image".into(),
        stop_task: false,
    });
    assert_eq!(
        decide(&s, Options::default(), 10).actions,
        vec![Action::MarkStopped {
            container: 1,
            reason: Some("volumesFrom source data was never created".into()),
            exit_code: Some(EXIT_CODE_NOT_RUN),
        }]
    );
}

#[test]
fn the_source_stops_only_after_its_user() {
    let mut s = data_and_app();
    for i in 0..2 {
        pulled(&mut s, i);
        created(&mut s, i);
        started(&mut s, i);
    }
    s.request_stop("user", StopKind::Requested);
    let (effects, _) = s.step(Options::default(), 10);
    assert_eq!(
        effects,
        vec![Action::Stop {
            container: 1,
            timeout_secs: 30
        }]
    );
    s.apply(&Event::Exited {
        container: 1,
        exit_code: Some(0),
        started_at: None,
        at: 11,
    });
    let (effects, _) = s.step(Options::default(), 12);
    assert_eq!(
        effects,
        vec![Action::Stop {
            container: 0,
            timeout_secs: 30
        }]
    );
    assert_eq!(s.containers[1].known, Status::Stopped);
}

#[test]
fn a_reference_to_no_container_can_never_be_met() {
    for (c, reason) in [
        (
            depends(container("app"), "ghost", Condition::Start),
            "dependency ghost is not in the task",
        ),
        (
            volumes_from(container("app"), "ghost"),
            "volumesFrom source ghost is not in the task",
        ),
    ] {
        let s = state(vec![non_essential(container("other")), c]);
        let actions = decide(&s, Options::default(), 10).actions;
        assert!(
            actions.contains(&Action::MarkStopped {
                container: 1,
                reason: Some(reason.into()),
                exit_code: Some(EXIT_CODE_NOT_RUN),
            }),
            "{actions:?}"
        );
    }
}

#[test]
fn a_state_read_back_from_its_saved_form_decides_the_same() {
    let mut s = data_and_app();
    pulled(&mut s, 0);
    pulled(&mut s, 1);
    created(&mut s, 0);
    let saved = serde_json::to_string(&s).expect("serialize");
    let loaded: TaskState = serde_json::from_str(&saved).expect("deserialize");
    assert_eq!(loaded, s);
    assert_eq!(
        decide(&loaded, Options::default(), 10),
        decide(&s, Options::default(), 10)
    );
}

/// A task state as berth saved it before references were resolved to indexes (written by that
/// version): db (0) created, app (1) pulled, waiting for db through dependsOn and volumesFrom.
const SAVED_BEFORE_WIRING: &str = include_str!("fixtures/state-saved-before-wiring.json");

#[test]
fn a_state_saved_by_an_older_berth_loads_resumes_and_saves_the_same() {
    let loaded: TaskState = serde_json::from_str(SAVED_BEFORE_WIRING).expect("deserialize");
    assert_eq!(
        decide(&loaded, Options::default(), 10).actions,
        vec![Action::Start(0), Action::Create(1)]
    );
    let written = serde_json::to_value(&loaded).expect("serialize");
    let read: serde_json::Value = serde_json::from_str(SAVED_BEFORE_WIRING).expect("json");
    assert_eq!(written, read, "the saved format is unchanged");
}
