//! The decision core and create specs of a task whose containers share namespaces through its pause
//! container (awsvpc, `pidMode: task`, `ipcMode: task`): the pause container is appended to the
//! task, pulled (provisioned) alongside the others, created and running before any other container
//! is created or started, essential, and stopped only after every other container; the others join
//! it as `container:<pause>`, and it publishes the task's ports on host port = container port.

mod common;

use berth_engine::decide::{Action, Event, Options, decide};
use berth_engine::pause::PAUSE_CONTAINER;
use berth_engine::spec::{PortSpec, container_spec};
use berth_engine::state::{Status, StopKind, TaskState};
use berth_model::{IpcMode, NetworkMode, PidMode, PortMapping, Protocol};
use common::*;

fn awsvpc() -> TaskState {
    let mut web = container("web");
    web.port_mappings.push(PortMapping {
        container_port: 8080,
        host_port: None,
        protocol: Protocol::Tcp,
    });
    let mut side = non_essential(container("side"));
    side.port_mappings.push(PortMapping {
        container_port: 4317,
        host_port: Some(4317),
        protocol: Protocol::Udp,
    });
    let mut t = task(vec![web, side]);
    t.network_mode = NetworkMode::Awsvpc;
    TaskState::new("0123456789abcdef0123456789abcdef".into(), t, 0)
}

fn now(s: &TaskState) -> Vec<Action> {
    decide(s, Options::default(), 10).actions
}

#[test]
fn the_pause_container_is_appended_and_only_when_namespaces_are_shared() {
    let s = awsvpc();
    assert_eq!(s.containers.len(), 3);
    assert_eq!(s.pause_index(), Some(2));
    assert_eq!(s.containers[2].name, PAUSE_CONTAINER);
    assert_eq!(
        s.containers[2].docker_name,
        "berth-fam-1-pause.0123456789ab"
    );
    assert!(s.def(2).essential);
    assert_eq!(s.wiring(2).dependents, vec![0, 1]);
    assert_eq!(s.wiring(0).namespace_owner, Some(2));
    assert!(state(vec![container("a")]).pause_index().is_none());
    for (pid, ipc) in [(Some(PidMode::Task), None), (None, Some(IpcMode::Task))] {
        let mut t = task(vec![container("a")]);
        t.pid_mode = pid;
        t.ipc_mode = ipc;
        let s = TaskState::new("0123456789abcdef0123456789abcdef".into(), t, 0);
        assert_eq!(s.pause_index(), Some(1));
    }
}

#[test]
fn containers_are_pulled_at_once_but_created_after_the_pause_container_and_started_after_it_runs() {
    let mut s = awsvpc();
    assert_eq!(
        now(&s),
        vec![Action::Pull(0), Action::Pull(1), Action::Pull(2)]
    );
    for i in 0..3 {
        pulled(&mut s, i);
    }
    assert_eq!(now(&s), vec![Action::Create(2)], "only the pause container");
    created(&mut s, 2);
    assert_eq!(
        now(&s),
        vec![Action::Create(0), Action::Create(1), Action::Start(2)]
    );
    created(&mut s, 0);
    created(&mut s, 1);
    assert_eq!(
        now(&s),
        vec![Action::Start(2)],
        "nothing starts before it runs"
    );
    started(&mut s, 2);
    assert_eq!(now(&s), vec![Action::Start(0), Action::Start(1)]);
}

#[test]
fn a_pause_container_that_cannot_start_stops_the_task_and_nothing_else_runs() {
    let mut s = awsvpc();
    for i in 0..3 {
        pulled(&mut s, i);
    }
    created(&mut s, 2);
    s.apply(&Event::StartFailed {
        container: 2,
        at: 5,
        message: "CannotStartContainerError: port is already allocated".into(),
    });
    let (actions, _) = s.step(Options::default(), 10);
    assert!(actions.is_empty(), "{actions:?}");
    assert_eq!(s.stop_kind, Some(StopKind::Failed));
    assert_eq!(
        s.stopped_reason.as_deref(),
        Some("CannotStartContainerError: port is already allocated")
    );
    assert!(s.containers.iter().all(|c| c.known == Status::Stopped));
    assert!(s.containers[..2].iter().all(|c| !c.ran()));
}

#[test]
fn the_pause_container_stops_after_every_other_container() {
    let mut s = awsvpc();
    for i in [2, 0, 1] {
        pulled(&mut s, i);
        created(&mut s, i);
        started(&mut s, i);
    }
    s.request_stop("asked", StopKind::Requested);
    let stops: Vec<usize> = now(&s)
        .iter()
        .filter_map(|a| match a {
            Action::Stop { container, .. } => Some(*container),
            _ => None,
        })
        .collect();
    assert_eq!(stops, vec![0, 1], "the pause container waits");
    for i in [0, 1] {
        s.apply(&Event::Exited {
            container: i,
            exit_code: Some(0),
            started_at: None,
            at: 20,
        });
    }
    assert!(matches!(
        now(&s).as_slice(),
        [Action::Stop { container: 2, .. }]
    ));
}

#[test]
fn a_pause_container_gone_before_a_container_started_means_it_never_runs() {
    let mut s = awsvpc();
    for i in 0..3 {
        pulled(&mut s, i);
    }
    created(&mut s, 2);
    started(&mut s, 2);
    s.apply(&Event::Exited {
        container: 2,
        exit_code: Some(137),
        started_at: None,
        at: 9,
    });
    let (_, _) = s.step(Options::default(), 10);
    assert_eq!(
        s.stopped_reason.as_deref(),
        Some("Essential container in task exited")
    );
    let web = &s.containers[0];
    assert_eq!(web.known, Status::Stopped);
    assert_eq!(web.exit_code, None);
    assert_eq!(
        web.reason.as_deref(),
        Some("task stopped before the container started")
    );
}

#[test]
fn specs_join_the_pause_container_which_publishes_the_ports() {
    let s = awsvpc();
    let pause = container_spec(&s, 2, &[], None);
    assert_eq!(pause.network_mode, "bridge");
    assert_eq!(pause.hostname.as_deref(), Some("0123456789ab"));
    assert!(pause.image.starts_with("berth/pause:"), "{}", pause.image);
    assert_eq!(
        pause.ports,
        vec![
            PortSpec {
                container_port: 8080,
                protocol: "tcp",
                host_port: Some(8080)
            },
            PortSpec {
                container_port: 4317,
                protocol: "udp",
                host_port: Some(4317)
            },
        ]
    );
    assert!(pause.env.is_empty() && pause.ipc_mode.is_none());
    let web = container_spec(&s, 0, &[], None);
    assert_eq!(web.network_mode, "container:berth-fam-1-pause.0123456789ab");
    assert!(web.ports.is_empty() && web.hostname.is_none());
    assert!(web.pid_mode.is_none() && web.ipc_mode.is_none());

    let mut t = task(vec![container("a")]);
    t.pid_mode = Some(PidMode::Task);
    t.ipc_mode = Some(IpcMode::Task);
    let s = TaskState::new("0123456789abcdef0123456789abcdef".into(), t, 0);
    let pause = container_spec(&s, 1, &[], None);
    assert_eq!(
        pause.network_mode, "none",
        "it owns no network in bridge mode"
    );
    assert_eq!(pause.ipc_mode.as_deref(), Some("shareable"));
    assert!(pause.hostname.is_none() && pause.ports.is_empty());
    let a = container_spec(&s, 0, &[], None);
    assert_eq!(a.network_mode, "bridge");
    assert_eq!(
        a.pid_mode.as_deref(),
        Some("container:berth-fam-1-pause.0123456789ab")
    );
    assert_eq!(
        a.ipc_mode.as_deref(),
        Some("container:berth-fam-1-pause.0123456789ab")
    );
}
