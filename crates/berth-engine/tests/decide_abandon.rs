//! A pull given up because the task is stopping (`Event::PullAbandoned`): the container never
//! runs, gets the shutdown's reason (not a pull failure), and the task finishes with nothing in
//! flight and nothing more to do.

use berth_engine::decide::{Action, Event, Options};
use berth_engine::state::{Status, StopKind, TaskState};

fn two_containers() -> TaskState {
    let json = r#"{"family": "f", "containerDefinitions": [
        {"name": "a", "image": "img"},
        {"name": "b", "image": "img", "essential": false}]}"#;
    let def = berth_model::parse(json).expect("valid").definition;
    TaskState::new("0123456789abcdef0123456789abcdef".into(), def, 0)
}

#[test]
fn a_stop_during_pulls_ends_the_task_once_the_pulls_are_given_up() {
    let mut s = two_containers();
    let (effects, _) = s.step(Options::default(), 1);
    assert_eq!(effects, [Action::Pull(0), Action::Pull(1)]);
    s.request_stop("stopped through the API", StopKind::Requested);
    // While the pulls are in flight nothing is decided for their containers.
    let (effects, _) = s.step(Options::default(), 2);
    assert!(effects.is_empty(), "{effects:?}");
    assert!(!s.is_finished());
    s.apply(&Event::PullAbandoned {
        container: 0,
        at: 3,
    });
    // One pull finished just before it could be given up: it counts as pulled, and the container
    // still never runs.
    s.apply(&Event::Pulled {
        container: 1,
        at: 3,
    });
    let (effects, _) = s.step(Options::default(), 4);
    assert!(effects.is_empty(), "nothing is created: {effects:?}");
    assert!(s.is_finished());
    assert_eq!(s.stopped_reason.as_deref(), Some("stopped through the API"));
    for c in &s.containers {
        assert_eq!(
            (c.known, c.in_flight, c.docker_id.as_deref()),
            (Status::Stopped, None, None)
        );
        assert_eq!(
            c.reason.as_deref(),
            Some("task stopped before the container started"),
            "{}",
            c.name
        );
    }
    assert_eq!(s.containers[0].pull_stopped_at, Some(3));
}
