//! The decision core on `links`: a link orders the start like a `START` dependency (its target is
//! created before the linking container is created, and runs before it starts), a target that
//! stopped first means the link can never resolve, and shutdown stops the linking container before
//! its target. Also the create spec's `Links` entries.

mod common;

use berth_engine::decide::{Action, Event, Options, decide};
use berth_engine::spec::container_spec;
use berth_engine::state::{EXIT_CODE_NOT_RUN, Status, StopKind, TaskState};
use berth_model::{ContainerDefinition, Link};
use common::*;

fn link(mut c: ContainerDefinition, to: &str, alias: &str) -> ContainerDefinition {
    c.links.push(Link::with_alias(to, alias));
    c
}

fn exited(s: &mut TaskState, i: usize, at: i64) {
    s.apply(&Event::Exited {
        container: i,
        exit_code: Some(0),
        started_at: None,
        at,
    });
}

/// `app` (0) links to `db` (1) as `database`: the linking container comes first in the definition.
fn app_and_db() -> TaskState {
    state(vec![
        link(container("app"), "db", "database"),
        non_essential(container("db")),
    ])
}

fn now(s: &TaskState) -> Vec<Action> {
    decide(s, Options::default(), 10).actions
}

#[test]
fn the_linking_container_is_created_once_the_target_exists_and_started_once_it_runs() {
    let mut s = app_and_db();
    assert_eq!(now(&s), vec![Action::Pull(1)], "app is not even pulled yet");
    pulled(&mut s, 1);
    assert_eq!(now(&s), vec![Action::Create(1)]);
    created(&mut s, 1);
    // The target exists: the linking container may be pulled and created (pipelining, as START).
    assert_eq!(now(&s), vec![Action::Pull(0), Action::Start(1)]);
    pulled(&mut s, 0);
    created(&mut s, 0);
    assert_eq!(now(&s), vec![Action::Start(1)], "app waits for db to run");
    started(&mut s, 1);
    assert_eq!(now(&s), vec![Action::Start(0)]);
}

#[test]
fn a_target_that_never_ran_stops_the_linking_container_without_running_it() {
    let mut s = app_and_db();
    s.apply(&Event::PullFailed {
        container: 1,
        at: 5,
        message: "no image".into(),
        stop_task: false,
    });
    assert_eq!(
        now(&s),
        vec![Action::MarkStopped {
            container: 0,
            reason: Some("link target db stopped before it started".into()),
            exit_code: Some(EXIT_CODE_NOT_RUN),
        }]
    );
}

#[test]
fn a_target_that_exited_before_the_linking_container_started_can_never_be_linked_to() {
    let mut s = app_and_db();
    for i in [1, 0] {
        pulled(&mut s, i);
        created(&mut s, i);
    }
    started(&mut s, 1);
    exited(&mut s, 1, 4);
    assert_eq!(
        now(&s),
        vec![Action::MarkStopped {
            container: 0,
            reason: Some(
                "link target db exited before this container started; Docker links only to a running container"
                    .into()
            ),
            exit_code: Some(EXIT_CODE_NOT_RUN),
        }]
    );
}

#[test]
fn shutdown_stops_the_linking_container_before_its_target() {
    let mut s = app_and_db();
    for i in [1, 0] {
        pulled(&mut s, i);
        created(&mut s, i);
        started(&mut s, i);
    }
    assert_eq!(s.wiring(1).dependents, vec![0]);
    s.request_stop("user", StopKind::Requested);
    let (effects, _) = s.step(Options::default(), 10);
    assert_eq!(
        effects,
        vec![Action::Stop {
            container: 0,
            timeout_secs: 30
        }]
    );
    exited(&mut s, 0, 11);
    let (effects, _) = s.step(Options::default(), 12);
    assert_eq!(
        effects,
        vec![Action::Stop {
            container: 1,
            timeout_secs: 30
        }]
    );
    assert_eq!(s.containers[0].known, Status::Stopped);
}

#[test]
fn a_link_to_no_container_can_never_be_met() {
    let s = state(vec![
        non_essential(container("other")),
        link(container("app"), "ghost", "ghost"),
    ]);
    assert!(
        now(&s).contains(&Action::MarkStopped {
            container: 1,
            reason: Some("link target ghost is not in the task".into()),
            exit_code: Some(EXIT_CODE_NOT_RUN),
        }),
        "{:?}",
        now(&s)
    );
}

#[test]
fn the_create_spec_links_the_targets_docker_name_to_the_alias() {
    let s = state(vec![
        link(link(container("app"), "db", "database"), "cache", "cache"),
        non_essential(container("db")),
        non_essential(container("cache")),
    ]);
    let spec = container_spec(&s, 0, &[], None);
    assert_eq!(
        spec.links,
        vec![
            format!("{}:database", s.containers[1].docker_name),
            format!("{}:cache", s.containers[2].docker_name),
        ]
    );
    assert_eq!(
        s.containers[1].docker_name, "berth-fam-1-db-0123456789ab",
        "the target's Docker name, decided before create"
    );
    assert!(container_spec(&s, 1, &[], None).links.is_empty());
}
