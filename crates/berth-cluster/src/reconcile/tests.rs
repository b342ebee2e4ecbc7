//! Tests of [`plan`], the controller's decisions:
//!
//! - one unit test per rule of the module's header, each asserting the exact actions (reasons
//!   and stop codes included) for a small view built with [`Views`];
//! - model-based property tests (`cluster_model`, `every_rolling_update_finishes`): a tiny
//!   simulated cluster ([`Sim`]) in which each plan's actions are applied as etcd and the node
//!   agents would apply them, under random faults (nodes lost or drained, tasks exiting or
//!   stopped by a user, slow agents) and service changes (desired counts, rolling updates with
//!   random percentages, removals); ECS's rolling-update bounds and placement's rules are
//!   checked after every pass ([`check_pass`]), and convergence once the faults stop
//!   ([`check_settled`]).

use super::*;
use crate::record::{HealthStatus, LastStatus, NodeRecord, Resources, StatusRecord, Strategy};
use berth_model::TaskDefinition;
use proptest::prelude::{Just, ProptestConfig, any, prop, prop_assert, prop_oneof, proptest};
use proptest::strategy::Strategy as _;
use proptest::test_runner::TestCaseError;

// ---------------------------------------------------------------------------------------------
// Builders

/// Every task of these tests reserves one slot: 256 CPU units and 256 MiB.
const SLOT: u64 = 256;
/// The services' current deployment, and an older one.
const DEPLOYMENT: &str = "ecs-svc/2";
const OLD: &str = "ecs-svc/1";
/// The retention of the unit tests (the default, an hour).
const RETENTION: u64 = 3_600_000;
const NOW: u64 = 10_000;

fn definition(family: &str, health_check: bool) -> TaskDefinition {
    let check = if health_check {
        r#","healthCheck":{"command":["CMD","true"]}"#
    } else {
        ""
    };
    let json = format!(
        r#"{{"family":"{family}","containerDefinitions":[{{"name":"app","image":"busybox","cpu":{SLOT},"memory":{SLOT}{check}}}]}}"#
    );
    berth_model::parse(&json)
        .expect("a valid definition")
        .definition
}

fn node_record(name: &str, slots: u64) -> NodeRecord {
    NodeRecord {
        name: name.to_owned(),
        capacity: Resources {
            cpu: slots * SLOT,
            memory_mib: slots * SLOT,
        },
        attributes: BTreeMap::new(),
        version: "test".to_owned(),
        registered_at_ms: 1,
        lease: 1,
    }
}

/// An ACTIVE service of deployment [`DEPLOYMENT`] without health check.
fn service(name: &str, desired: u32, min: u32, max: u32) -> ServiceRecord {
    ServiceRecord {
        name: name.to_owned(),
        definition: definition(name, false),
        desired_count: desired,
        placement_constraints: Vec::new(),
        placement_strategy: Vec::new(),
        minimum_healthy_percent: min,
        maximum_percent: max,
        created_at_ms: 1,
        status: ServiceStatus::Active,
        deployment: DEPLOYMENT.to_owned(),
        launched: 0,
        updated_at_ms: 1,
    }
}

fn status(task: &str, fence: i64, last_status: LastStatus, health: HealthStatus) -> StatusRecord {
    StatusRecord {
        task: task.to_owned(),
        fence,
        last_status,
        health_status: health,
        stopped_reason: None,
        failed_to_start: false,
        updated_at_ms: 1,
    }
}

/// A view under construction; every write gets the next revision, as etcd gives them.
#[derive(Debug, Clone, Default)]
struct Views {
    view: ClusterView,
}

impl Views {
    fn write(&mut self) -> i64 {
        self.view.revision += 1;
        self.view.revision
    }

    fn node(mut self, name: &str, slots: u64) -> Self {
        self.write();
        self.view
            .nodes
            .insert(name.to_owned(), node_record(name, slots));
        self
    }

    fn drain(mut self, name: &str) -> Self {
        self.write();
        self.view.drains.insert(name.to_owned());
        self
    }

    fn service(mut self, svc: ServiceRecord) -> Self {
        let mod_revision = self.write();
        self.view.services.insert(
            svc.name.clone(),
            Versioned {
                value: svc,
                mod_revision,
            },
        );
        self
    }

    fn task(mut self, task: TaskRecord) -> Self {
        let mod_revision = self.write();
        self.view.tasks.insert(
            task.id.clone(),
            Versioned {
                value: task,
                mod_revision,
            },
        );
        self
    }

    fn edit(mut self, id: &str, change: impl FnOnce(&mut TaskRecord)) -> Self {
        let mod_revision = self.write();
        let t = self.view.tasks.get_mut(id).expect("a task of this view");
        change(&mut t.value);
        t.mod_revision = mod_revision;
        self
    }

    /// A pending task of `svc` (a service of this view) started for `deployment`.
    fn pending(self, svc: &str, id: &str, created: u64, deployment: &str) -> Self {
        let mut task = self.view.services[svc]
            .value
            .task(id.to_owned(), created)
            .expect("a valid service");
        task.started_by = Some(deployment.to_owned());
        self.task(task)
    }

    /// A pending standalone task of family `solo`.
    fn standalone(self, id: &str, created: u64) -> Self {
        let task = TaskRecord::pending(
            id.to_owned(),
            definition("solo", false),
            Vec::new(),
            Vec::new(),
            created,
        )
        .expect("a valid task");
        self.task(task)
    }

    /// Places a task as [`crate::txns::placing`] does: its fence is its revision when read.
    fn place(self, id: &str, node: &str) -> Self {
        let fence = self.view.tasks[id].mod_revision;
        self.edit(id, |t| {
            t.node = Some(node.to_owned());
            t.fence = Some(fence);
            t.reason = None;
        })
    }

    /// The task's node reports it, with the task's fence.
    fn report(self, id: &str, last_status: LastStatus, health: HealthStatus) -> Self {
        let t = &self.view.tasks[id].value;
        let fence = t.fence.expect("a placed task");
        let node = t.node.clone().expect("a placed task");
        self.status(&node, status(id, fence, last_status, health))
    }

    fn status(mut self, node: &str, status: StatusRecord) -> Self {
        self.write();
        self.view
            .statuses
            .insert((node.to_owned(), status.task.clone()), status);
        self
    }

    /// A task of `svc` started for `deployment`, placed on `node` and reported RUNNING (and
    /// HEALTHY when its definition has a health check).
    fn running(self, svc: &str, id: &str, created: u64, deployment: &str, node: &str) -> Self {
        let checked = self.view.services[svc]
            .value
            .definition
            .container_definitions
            .iter()
            .any(|c| c.health_check.is_some());
        let health = if checked {
            HealthStatus::Healthy
        } else {
            HealthStatus::Unknown
        };
        self.pending(svc, id, created, deployment)
            .place(id, node)
            .report(id, LastStatus::Running, health)
    }

    /// Asked to stop as [`crate::txns::stopping`] does for a placed task.
    fn stopping(self, id: &str, reason: &str) -> Self {
        self.edit(id, |t| {
            t.desired_status = DesiredStatus::Stopped;
            t.reason = Some(reason.to_owned());
            t.stop_code = Some(StopCode::ServiceSchedulerInitiated);
        })
    }

    /// Closed as [`crate::txns::closing`] does, at `at`.
    fn closed(self, id: &str, at: Option<u64>) -> Self {
        self.edit(id, |t| {
            t.desired_status = DesiredStatus::Stopped;
            t.last_status = Some(LastStatus::Stopped);
            t.stop_code
                .get_or_insert(StopCode::EssentialContainerExited);
            t.stopped_at_ms = at;
        })
    }
}

fn settings() -> Settings {
    Settings {
        stopped_retention_ms: RETENTION,
        max_starts: 127,
        ..Settings::default()
    }
}

/// The plan at `now`; new tasks are named `new1`, `new2`, …
fn plan_with(view: &ClusterView, settings: &Settings, now: u64) -> Plan {
    let mut n = 0;
    plan(view, settings, now, &mut || {
        n += 1;
        format!("new{n}")
    })
}

fn plan_at(view: &ClusterView, now: u64) -> Plan {
    plan_with(view, &settings(), now)
}

/// The tasks `svc` of `view` starts at `now`, named `new1`… in order, each with `reason` (the
/// reason placement gave, for those it could not place).
fn started(view: &ClusterView, svc: &str, reasons: &[Option<&str>]) -> Action {
    let record = &view.services[svc].value;
    let tasks = reasons
        .iter()
        .enumerate()
        .map(|(i, reason)| {
            let mut t = record
                .task(format!("new{}", i + 1), NOW)
                .expect("a valid service");
            t.reason = reason.map(str::to_owned);
            t
        })
        .collect();
    Action::Start {
        service: svc.to_owned(),
        tasks,
    }
}

fn place(task: &str, node: &str) -> Action {
    Action::Place {
        task: task.to_owned(),
        node: node.to_owned(),
    }
}

fn stop(task: &str, reason: &str) -> Action {
    Action::Stop {
        task: task.to_owned(),
        reason: reason.to_owned(),
        code: StopCode::ServiceSchedulerInitiated,
    }
}

fn close(task: &str, reason: &str, code: StopCode, node_gone: bool) -> Action {
    Action::Close {
        task: task.to_owned(),
        reason: reason.to_owned(),
        code,
        node_gone,
    }
}

/// The reason placement gives when every node (`n` of them) lacks the CPU.
fn no_cpu(n: usize) -> String {
    let s = if n == 1 { "" } else { "s" };
    format!("no node met all of the task's requirements: RESOURCE:CPU ({n} node{s})")
}

// ---------------------------------------------------------------------------------------------
// Rule by rule

#[test]
fn a_quiet_cluster_gets_no_action_at_all() {
    // Services at their count, standalone tasks running, a closed task within the retention,
    // and a pending task that fits no node, its reason already recorded.
    let v = Views::default()
        .node("a", 4)
        .node("b", 4)
        .node("full", 0)
        .service(service("web", 2, 100, 200))
        .running("web", "w1", 1, DEPLOYMENT, "a")
        .running("web", "w2", 2, DEPLOYMENT, "b")
        .standalone("s1", 3)
        .place("s1", "a")
        .report("s1", LastStatus::Running, HealthStatus::Unknown)
        .standalone("s2", 4)
        .place("s2", "b")
        .report("s2", LastStatus::Stopped, HealthStatus::Unknown)
        .closed("s2", Some(NOW - 1))
        .standalone("big", 5)
        .edit("big", |t| {
            t.demand.cpu = 5 * SLOT;
            t.reason = Some(no_cpu(3));
        });
    assert_eq!(plan_at(&v.view, NOW), Plan::default());
}

#[test]
fn a_task_whose_node_is_lost_is_closed_with_termination_notice() {
    let v = Views::default()
        .node("a", 4)
        .node("gone", 4)
        .standalone("s1", 1)
        .place("s1", "gone")
        .report("s1", LastStatus::Running, HealthStatus::Unknown);
    let mut v = v;
    v.view.nodes.remove("gone");
    v.view.statuses.retain(|(node, _), _| node != "gone");
    assert_eq!(
        lost("gone"),
        "Host node (instance gone) lost: its lease expired."
    );
    assert_eq!(
        plan_at(&v.view, NOW).actions,
        vec![close(
            "s1",
            &lost("gone"),
            StopCode::TerminationNotice,
            true
        )]
    );
}

#[test]
fn a_service_task_on_a_lost_node_is_replaced_in_the_same_pass() {
    let mut v = Views::default()
        .node("a", 4)
        .node("gone", 4)
        .service(service("web", 1, 100, 200))
        .running("web", "w1", 1, DEPLOYMENT, "gone");
    v.view.nodes.remove("gone");
    v.view.statuses.clear();
    assert_eq!(
        plan_at(&v.view, NOW).actions,
        vec![
            close("w1", &lost("gone"), StopCode::TerminationNotice, true),
            started(&v.view, "web", &[None]),
            place("new1", "a"),
        ]
    );
}

#[test]
fn a_task_its_node_reports_stopped_is_closed_with_the_nodes_reason() {
    let v = Views::default()
        .node("a", 4)
        .standalone("s1", 1)
        .place("s1", "a")
        .standalone("s2", 2)
        .place("s2", "a")
        .standalone("s3", 3)
        .place("s3", "a");
    let fence = |id: &str| v.view.tasks[id].value.fence.expect("placed");
    let exited = StatusRecord {
        stopped_reason: Some("Essential container in task exited: app exit code 3".into()),
        ..status(
            "s1",
            fence("s1"),
            LastStatus::Stopped,
            HealthStatus::Unknown,
        )
    };
    let never_ran = StatusRecord {
        stopped_reason: Some("CannotPullContainerError: no such image".into()),
        failed_to_start: true,
        ..status(
            "s2",
            fence("s2"),
            LastStatus::Stopped,
            HealthStatus::Unknown,
        )
    };
    let silent = status(
        "s3",
        fence("s3"),
        LastStatus::Stopped,
        HealthStatus::Unknown,
    );
    let v = v
        .status("a", exited)
        .status("a", never_ran)
        .status("a", silent);
    assert_eq!(
        plan_at(&v.view, NOW).actions,
        vec![
            close(
                "s1",
                "Essential container in task exited: app exit code 3",
                StopCode::EssentialContainerExited,
                false
            ),
            close(
                "s2",
                "CannotPullContainerError: no such image",
                StopCode::TaskFailedToStart,
                false
            ),
            close(
                "s3",
                ESSENTIAL_EXITED,
                StopCode::EssentialContainerExited,
                false
            ),
        ]
    );
}

#[test]
fn a_status_with_another_fence_does_not_count() {
    let v = Views::default()
        .node("a", 4)
        .service(service("web", 1, 100, 200))
        .running("web", "w1", 1, DEPLOYMENT, "a")
        .standalone("s1", 2)
        .place("s1", "a");
    let stale_fence = v.view.tasks["s1"].value.fence.expect("placed") - 1;
    // A STOPPED report of an older placement of s1, and w1 placed again since its RUNNING
    // report (that report is now another placement's).
    let v = v
        .status(
            "a",
            status(
                "s1",
                stale_fence,
                LastStatus::Stopped,
                HealthStatus::Unknown,
            ),
        )
        .edit("w1", |t| t.fence = t.fence.map(|f| f + 100));
    let w1 = &v.view.tasks["w1"].value;
    assert!(!healthy(&v.view, w1));
    assert_eq!(v.view.last_status(w1), LastStatus::Provisioning);
    // Nothing is closed, and w1 (current, merely not healthy yet) is left alone.
    assert_eq!(plan_at(&v.view, NOW), Plan::default());
}

#[test]
fn a_pending_task_left_asked_to_stop_is_closed_as_the_user_asked() {
    let v = Views::default()
        .node("a", 4)
        .standalone("s1", 1)
        .edit("s1", |t| {
            t.desired_status = DesiredStatus::Stopped;
            t.reason = Some("Task stopped by user".into());
        });
    assert_eq!(
        plan_at(&v.view, NOW).actions,
        vec![close(
            "s1",
            "Task stopped by user",
            StopCode::UserInitiated,
            false
        )]
    );
}

#[test]
fn closed_tasks_are_forgotten_after_the_retention_and_not_before() {
    let v = Views::default()
        .node("a", 4)
        .standalone("due", 1)
        .closed("due", Some(5_000))
        .standalone("young", 2)
        .closed("young", Some(5_001))
        // Closed by an older berth, without a stop time: counted from its creation.
        .standalone("undated", 5_000)
        .closed("undated", None);
    assert_eq!(
        plan_at(&v.view, 5_000 + RETENTION).actions,
        vec![
            Action::Forget { task: "due".into() },
            Action::Forget {
                task: "undated".into()
            },
        ]
    );
    assert_eq!(plan_at(&v.view, 4_999 + RETENTION), Plan::default());
}

#[test]
fn a_service_below_its_count_starts_the_shortfall_and_places_it() {
    let v = Views::default()
        .node("a", 4)
        .node("b", 4)
        .node("c", 4)
        .service(service("web", 3, 100, 200));
    let p = plan_at(&v.view, NOW);
    assert_eq!(
        p.actions,
        vec![
            started(&v.view, "web", &[None, None, None]),
            place("new1", "a"),
            place("new2", "b"),
            place("new3", "c"),
        ]
    );
    let Action::Start { tasks, .. } = &p.actions[0] else {
        panic!("a start first: {p:?}");
    };
    for t in tasks {
        assert_eq!(t.service.as_deref(), Some("web"));
        assert_eq!(t.group, "service:web");
        assert_eq!(t.started_by.as_deref(), Some(DEPLOYMENT));
        assert_eq!(t.created_at_ms, NOW);
    }
}

#[test]
fn starts_per_pass_are_capped_by_max_starts() {
    let v = Views::default()
        .node("a", 8)
        .service(service("web", 5, 100, 200));
    let capped = Settings {
        max_starts: 2,
        ..settings()
    };
    assert_eq!(
        plan_with(&v.view, &capped, NOW).actions,
        vec![
            started(&v.view, "web", &[None, None]),
            place("new1", "a"),
            place("new2", "a"),
        ]
    );
}

#[test]
fn new_tasks_that_cannot_be_placed_are_written_with_their_reason() {
    let v = Views::default()
        .node("a", 1)
        .service(service("web", 2, 100, 200));
    assert_eq!(
        plan_at(&v.view, NOW).actions,
        vec![
            started(&v.view, "web", &[None, Some(&no_cpu(1))]),
            place("new1", "a"),
        ]
    );
}

#[test]
fn scaling_in_stops_the_newest_with_the_scheduler_reason() {
    let v = Views::default()
        .node("a", 4)
        .service(service("web", 1, 100, 200))
        .running("web", "w1", 1, DEPLOYMENT, "a")
        .running("web", "w2", 2, DEPLOYMENT, "a")
        .running("web", "w3", 3, DEPLOYMENT, "a");
    assert_eq!(
        scaling(DEPLOYMENT),
        "Scaling activity initiated by (deployment ecs-svc/2)"
    );
    assert_eq!(
        plan_at(&v.view, NOW).actions,
        vec![
            stop("w3", &scaling(DEPLOYMENT)),
            stop("w2", &scaling(DEPLOYMENT))
        ]
    );
}

#[test]
fn scaling_in_stops_tasks_that_do_not_run_before_running_ones() {
    // Scaled from 3 to 1: w1 (the oldest) is still pending, for want of room; w2 and w3 run.
    // Stopping w1 costs nothing, so it goes first, then one running task.
    let v = Views::default()
        .node("a", 2)
        .service(service("web", 1, 100, 200))
        .pending("web", "w1", 1, DEPLOYMENT)
        .edit("w1", |t| t.reason = Some(no_cpu(1)))
        .running("web", "w2", 2, DEPLOYMENT, "a")
        .running("web", "w3", 3, DEPLOYMENT, "a");
    assert_eq!(
        plan_at(&v.view, NOW).actions,
        vec![
            stop("w1", &scaling(DEPLOYMENT)),
            stop("w3", &scaling(DEPLOYMENT))
        ]
    );
}

#[test]
fn minimum_healthy_percent_rounds_up() {
    // D = 3, 50 %: 1.5 healthy tasks round up to 2, so one old task of three is stopped; the
    // maximum (100 %: 3) leaves no room to start while it stops.
    let v = Views::default()
        .node("a", 4)
        .service(service("web", 3, 50, 100))
        .running("web", "o1", 1, OLD, "a")
        .running("web", "o2", 2, OLD, "a")
        .running("web", "o3", 3, OLD, "a");
    assert_eq!(
        plan_at(&v.view, NOW).actions,
        vec![stop("o1", &scaling(DEPLOYMENT))]
    );
}

#[test]
fn maximum_percent_rounds_down() {
    // D = 3, 150 %: 4.5 tasks round down to 4, so one new task is started beside the three old
    // ones, none of which may stop (100 % of 3 must stay healthy).
    let v = Views::default()
        .node("a", 4)
        .node("b", 4)
        .service(service("web", 3, 100, 150))
        .running("web", "o1", 1, OLD, "a")
        .running("web", "o2", 2, OLD, "a")
        .running("web", "o3", 3, OLD, "a");
    assert_eq!(
        plan_at(&v.view, NOW).actions,
        vec![started(&v.view, "web", &[None]), place("new1", "b")]
    );
}

#[test]
fn a_rolling_update_stops_tasks_that_do_not_run_first() {
    // o2 of the old deployment is placed but has not run yet: it is stopped whatever the
    // minimum; o1 runs healthy and must stay (100 % of 2).
    let v = Views::default()
        .node("a", 4)
        .node("b", 4)
        .service(service("web", 2, 100, 200))
        .running("web", "o1", 1, OLD, "a")
        .pending("web", "o2", 2, OLD)
        .place("o2", "a");
    assert_eq!(
        plan_at(&v.view, NOW).actions,
        vec![
            stop("o2", &scaling(DEPLOYMENT)),
            started(&v.view, "web", &[None, None]),
            place("new1", "b"),
            place("new2", "b"),
        ]
    );
}

#[test]
fn a_rolling_update_replaces_old_tasks_once_new_ones_are_healthy() {
    // D = 2, 100 %–150 %: c1 runs healthy beside o1 and o2, so one old task may stop;
    // nothing starts while the three may run (the maximum is 3).
    let v = Views::default()
        .node("a", 4)
        .service(service("web", 2, 100, 150))
        .running("web", "o1", 1, OLD, "a")
        .running("web", "o2", 2, OLD, "a")
        .running("web", "c1", 3, DEPLOYMENT, "a");
    assert_eq!(
        plan_at(&v.view, NOW).actions,
        vec![stop("o1", &scaling(DEPLOYMENT))]
    );
    // Once o1 is stopping, nothing more happens until its node reports it stopped.
    let v = v.stopping("o1", &scaling(DEPLOYMENT));
    assert_eq!(plan_at(&v.view, NOW), Plan::default());
    // Then it is closed, and the room it leaves is filled in the same pass.
    let v = v.report("o1", LastStatus::Stopped, HealthStatus::Unknown);
    assert_eq!(
        plan_at(&v.view, NOW).actions,
        vec![
            close(
                "o1",
                ESSENTIAL_EXITED,
                StopCode::EssentialContainerExited,
                false
            ),
            started(&v.view, "web", &[None]),
            place("new1", "a"),
        ]
    );
}

#[test]
fn the_escape_starts_one_task_above_the_maximum_when_nothing_else_can_move() {
    // D = 1 with 50 %–150 %: one must stay healthy and at most one may run, so no stop and no
    // start are allowed; one task is started above the maximum.
    let v = Views::default()
        .node("a", 4)
        .node("b", 4)
        .service(service("web", 1, 50, 150))
        .running("web", "o1", 1, OLD, "a");
    assert_eq!(
        plan_at(&v.view, NOW).actions,
        vec![started(&v.view, "web", &[None]), place("new1", "b")]
    );
    // With a task stopping, the escape waits for it.
    let v = Views::default()
        .node("a", 4)
        .service(service("web", 3, 67, 100))
        .running("web", "o1", 1, OLD, "a")
        .running("web", "o2", 2, OLD, "a")
        .running("web", "o3", 3, OLD, "a")
        .running("web", "x", 4, OLD, "a")
        .stopping("x", &scaling(DEPLOYMENT));
    assert_eq!(plan_at(&v.view, NOW), Plan::default());
}

#[test]
fn the_escape_waits_for_the_task_it_started() {
    // D = 3 with 67 %–100 %: both bounds are 3, so the rolling update goes one task over the
    // maximum at a time: c1 was started that way and is not running yet.
    let v = Views::default()
        .node("a", 8)
        .service(service("web", 3, 67, 100))
        .running("web", "o1", 1, OLD, "a")
        .running("web", "o2", 2, OLD, "a")
        .running("web", "o3", 3, OLD, "a")
        .pending("web", "c1", 4, DEPLOYMENT)
        .place("c1", "a");
    assert_eq!(plan_at(&v.view, NOW), Plan::default());
    // Once it runs, an old task may stop (4 healthy, 3 needed), and still nothing starts.
    let v = v.report("c1", LastStatus::Running, HealthStatus::Unknown);
    assert_eq!(
        plan_at(&v.view, NOW).actions,
        vec![stop("o1", &scaling(DEPLOYMENT))]
    );
    // The same when the rounding leaves room for one: 4 at 100 %–125 % may run 5, and the
    // fifth is pending: no sixth.
    let v = Views::default()
        .node("a", 8)
        .service(service("web", 4, 100, 125))
        .running("web", "o1", 1, OLD, "a")
        .running("web", "o2", 2, OLD, "a")
        .running("web", "o3", 3, OLD, "a")
        .running("web", "o4", 4, OLD, "a")
        .pending("web", "c1", 5, DEPLOYMENT)
        .place("c1", "a");
    assert_eq!(plan_at(&v.view, NOW), Plan::default());
}

#[test]
fn tasks_on_a_draining_node_are_replaced_then_stopped_with_draining() {
    // w1 runs on the draining node a: it is replaced first (100 % of 1 must stay healthy),
    // elsewhere; the standalone s1 there is left alone (ECS drains services only).
    let v = Views::default()
        .node("a", 4)
        .node("b", 4)
        .service(service("web", 1, 100, 200))
        .running("web", "w1", 1, DEPLOYMENT, "a")
        .standalone("s1", 2)
        .place("s1", "a")
        .report("s1", LastStatus::Running, HealthStatus::Unknown)
        .drain("a");
    assert_eq!(
        plan_at(&v.view, NOW).actions,
        vec![started(&v.view, "web", &[None]), place("new1", "b")]
    );
    let v = v.running("web", "new1", NOW, DEPLOYMENT, "b");
    assert_eq!(plan_at(&v.view, NOW).actions, vec![stop("w1", DRAINING)]);
    // With no minimum, it is stopped at once.
    let mut v = v;
    v.view.tasks.remove("new1");
    v.view
        .services
        .get_mut("web")
        .expect("web")
        .value
        .minimum_healthy_percent = 0;
    assert_eq!(
        plan_at(&v.view, NOW).actions,
        vec![
            stop("w1", DRAINING),
            started(&v.view, "web", &[None]),
            place("new1", "b")
        ]
    );
}

#[test]
fn a_removed_service_stops_every_task_then_goes_away() {
    let mut svc = service("web", 2, 100, 200);
    svc.status = ServiceStatus::Draining;
    let v = Views::default()
        .node("a", 4)
        .service(svc)
        .running("web", "w1", 1, DEPLOYMENT, "a")
        .pending("web", "w2", 2, DEPLOYMENT);
    // The pending one first, then the running one (no minimum while removed); w2 is not placed.
    assert_eq!(
        plan_at(&v.view, NOW).actions,
        vec![
            stop("w2", &scaling(DEPLOYMENT)),
            stop("w1", &scaling(DEPLOYMENT))
        ]
    );
    // w2 was closed at once; w1's node reports it stopped: closed, and the service removed in
    // the same pass.
    let v = v
        .closed("w2", Some(NOW))
        .stopping("w1", &scaling(DEPLOYMENT))
        .report("w1", LastStatus::Stopped, HealthStatus::Unknown);
    assert_eq!(
        plan_at(&v.view, NOW).actions,
        vec![
            close(
                "w1",
                ESSENTIAL_EXITED,
                StopCode::EssentialContainerExited,
                false
            ),
            Action::RemoveService {
                service: "web".into()
            },
        ]
    );
}

#[test]
fn an_active_service_with_no_task_is_kept() {
    let v = Views::default()
        .node("a", 4)
        .service(service("web", 0, 100, 200));
    assert_eq!(plan_at(&v.view, NOW), Plan::default());
}

#[test]
fn pending_tasks_are_placed_oldest_first_and_keep_their_reason() {
    let v = Views::default()
        .node("a", 1)
        .standalone("p1", 2)
        .standalone("p2", 1);
    let p = plan_at(&v.view, NOW);
    assert_eq!(
        p.actions,
        vec![
            place("p2", "a"),
            Action::Unplaced {
                task: "p1".into(),
                reason: no_cpu(1)
            },
        ]
    );
    // The same reason already recorded is not written again.
    let v = v.edit("p1", |t| t.reason = Some(no_cpu(1)));
    assert_eq!(plan_at(&v.view, NOW).actions, vec![place("p2", "a")]);
    // With no node at all, ECS's words.
    let v = Views::default().standalone("p1", 1);
    assert_eq!(
        plan_at(&v.view, NOW).actions,
        vec![Action::Unplaced {
            task: "p1".into(),
            reason: "No Container Instances were found in your cluster.".into()
        }]
    );
}

#[test]
fn a_stopping_task_keeps_its_reservation_until_closed() {
    let v = Views::default()
        .node("a", 1)
        .standalone("s1", 1)
        .place("s1", "a")
        .report("s1", LastStatus::Running, HealthStatus::Unknown)
        .stopping("s1", "Task stopped by user")
        .standalone("p1", 2);
    assert_eq!(
        plan_at(&v.view, NOW).actions,
        vec![Action::Unplaced {
            task: "p1".into(),
            reason: no_cpu(1)
        }]
    );
    // Once its node reports it stopped, it is closed and its room is used in the same pass.
    let v = v.report("s1", LastStatus::Stopped, HealthStatus::Unknown);
    assert_eq!(
        plan_at(&v.view, NOW).actions,
        vec![
            close(
                "s1",
                ESSENTIAL_EXITED,
                StopCode::EssentialContainerExited,
                false
            ),
            place("p1", "a"),
        ]
    );
}

#[test]
fn healthy_means_running_and_healthy_when_checked() {
    let mut checked = service("api", 1, 100, 200);
    checked.definition = definition("api", true);
    let v = Views::default()
        .node("a", 8)
        .service(service("web", 1, 100, 200))
        .service(checked)
        .running("web", "w-running", 1, DEPLOYMENT, "a")
        .pending("web", "w-unhealthy", 2, DEPLOYMENT)
        .place("w-unhealthy", "a")
        .report("w-unhealthy", LastStatus::Running, HealthStatus::Unhealthy)
        .pending("web", "w-pending", 3, DEPLOYMENT)
        .place("w-pending", "a")
        .report("w-pending", LastStatus::Pending, HealthStatus::Unknown)
        .running("web", "w-stopping", 4, DEPLOYMENT, "a")
        .stopping("w-stopping", "Task stopped by user")
        .running("api", "a-healthy", 5, DEPLOYMENT, "a")
        .pending("api", "a-unknown", 6, DEPLOYMENT)
        .place("a-unknown", "a")
        .report("a-unknown", LastStatus::Running, HealthStatus::Unknown);
    let is = |id: &str| healthy(&v.view, &v.view.tasks[id].value);
    assert!(is("w-running"));
    assert!(!is("w-unhealthy"));
    assert!(!is("w-pending"));
    assert!(!is("w-stopping"));
    assert!(is("a-healthy"));
    assert!(!is("a-unknown"));
}

#[test]
fn a_service_whose_record_cannot_make_tasks_is_a_problem_not_an_action() {
    let mut svc = service("web", 1, 100, 200);
    svc.definition.cpu = Some("lots".into());
    let v = Views::default().node("a", 4).service(svc);
    assert_eq!(
        plan_at(&v.view, NOW),
        Plan {
            actions: Vec::new(),
            problems: vec![
                "service web: cpu: \"lots\" is not CPU units (\"256\") or vCPUs (\"0.5 vCPU\")"
                    .into()
            ],
            throttled: Vec::new(),
        }
    );
}

#[test]
fn an_active_service_that_breaks_ecs_rules_is_a_problem_and_left_alone() {
    // max not above min: a rolling update could never make progress. Its running task is
    // kept, nothing is started, and the pending one is still placed.
    let v = Views::default()
        .node("a", 4)
        .service(service("web", 3, 100, 100))
        .running("web", "w1", 1, OLD, "a")
        .pending("web", "w2", 2, DEPLOYMENT);
    assert_eq!(
        plan_at(&v.view, NOW),
        Plan {
            actions: vec![place("w2", "a")],
            problems: vec![
                "service web: --maximum-percent: 100 is not above --minimum-healthy-percent 100: a rolling update could never make progress (it could neither stop an old task nor start a new one); raise --maximum-percent (e.g. 200) or lower --minimum-healthy-percent"
                    .into()
            ],
            throttled: Vec::new(),
        }
    );
    // Being removed, the same record is wound down: its count is 0.
    let v = v.view.clone();
    let mut v = Views { view: v };
    v.view.services.get_mut("web").unwrap().value.status = ServiceStatus::Draining;
    let p = plan_at(&v.view, NOW);
    assert!(p.problems.is_empty(), "{p:?}");
    assert!(
        p.actions
            .iter()
            .any(|a| matches!(a, Action::Stop { task, .. } if task == "w1")),
        "{p:?}"
    );
}

/// A service task of the current deployment created at `created` and closed at `stopped` with
/// `code`.
fn failed(v: Views, id: &str, created: u64, stopped: u64, code: StopCode) -> Views {
    v.pending("web", id, created, DEPLOYMENT)
        .place(id, "a")
        .edit(id, |t| {
            t.desired_status = DesiredStatus::Stopped;
            t.last_status = Some(LastStatus::Stopped);
            t.stop_code = Some(code);
            t.stopped_at_ms = Some(stopped);
        })
}

#[test]
fn a_service_whose_launches_keep_failing_is_throttled_and_the_delay_doubles() {
    const T: u64 = 1_000_000;
    let base = Views::default()
        .node("a", 8)
        .service(service("web", 1, 100, 200));
    // One failed launch: replaced at once.
    let v = failed(base.clone(), "f1", T, T + 500, StopCode::TaskFailedToStart);
    let p = plan_at(&v.view, T + 1_000);
    assert!(p.throttled.is_empty(), "{p:?}");
    assert!(matches!(p.actions[0], Action::Start { .. }), "{p:?}");
    // Two: nothing starts until 10 s after the last one.
    let v = failed(
        v,
        "f2",
        T + 1_000,
        T + 2_000,
        StopCode::EssentialContainerExited,
    );
    let p = plan_at(&v.view, T + 3_000);
    assert_eq!(p.actions, Vec::new());
    assert_eq!(p.throttled, vec![("web".to_owned(), T + 12_000)]);
    assert!(matches!(
        plan_at(&v.view, T + 12_000).actions[0],
        Action::Start { .. }
    ));
    // Three: 20 s.
    let v = failed(v, "f3", T + 12_000, T + 13_000, StopCode::TaskFailedToStart);
    assert_eq!(
        plan_at(&v.view, T + 14_000).throttled,
        vec![("web".to_owned(), T + 33_000)]
    );
    // Capped at the maximum.
    let mut v = v;
    for i in 4..20 {
        v = failed(
            v,
            &format!("f{i}"),
            T + 13_000,
            T + 14_000,
            StopCode::TaskFailedToStart,
        );
    }
    assert_eq!(
        plan_at(&v.view, T + 15_000).throttled,
        vec![("web".to_owned(), T + 14_000 + 900_000)]
    );
}

#[test]
fn a_failure_learnt_in_a_pass_throttles_that_very_pass() {
    // Two failed launches; the wait after them is over, so one task is started again, and its
    // node reports that it failed too. The pass that closes it must not start another at once:
    // that failure is the third, and the next start waits 20 s after it.
    const T: u64 = 1_000_000;
    let v = Views::default()
        .node("a", 8)
        .service(service("web", 1, 100, 200));
    let v = failed(v, "f1", T, T + 500, StopCode::TaskFailedToStart);
    let v = failed(v, "f2", T + 1_000, T + 2_000, StopCode::TaskFailedToStart);
    let v = v
        .pending("web", "f3", T + 12_000, DEPLOYMENT)
        .place("f3", "a");
    let fence = v.view.tasks["f3"].value.fence.expect("placed");
    let v = v.status(
        "a",
        StatusRecord {
            stopped_reason: Some("CannotPullContainerError".to_owned()),
            failed_to_start: true,
            ..status("f3", fence, LastStatus::Stopped, HealthStatus::Unknown)
        },
    );
    let p = plan_at(&v.view, T + 13_000);
    assert_eq!(
        p.actions,
        vec![close(
            "f3",
            "CannotPullContainerError",
            StopCode::TaskFailedToStart,
            false
        )]
    );
    assert_eq!(p.throttled, vec![("web".to_owned(), T + 33_000)]);
    // A task asked to stop by the scheduler keeps its code when it is closed: not a failure.
    let v = v.edit("f3", |t| {
        t.desired_status = DesiredStatus::Stopped;
        t.stop_code = Some(StopCode::ServiceSchedulerInitiated);
        t.reason = Some(scaling(DEPLOYMENT));
    });
    let p = plan_at(&v.view, T + 13_000);
    assert!(p.throttled.is_empty(), "{p:?}");
    assert!(
        p.actions.iter().any(|a| matches!(a, Action::Start { .. })),
        "{p:?}"
    );
}

#[test]
fn what_does_not_count_as_a_failed_launch() {
    const T: u64 = 1_000_000;
    let base = Views::default()
        .node("a", 8)
        .service(service("web", 1, 100, 200));
    // Tasks that ran a minute or more, were stopped by a user or the scheduler, or whose node
    // was lost: no throttle.
    let v = failed(
        base.clone(),
        "long1",
        T,
        T + 60_000,
        StopCode::EssentialContainerExited,
    );
    let v = failed(
        v,
        "long2",
        T,
        T + 61_000,
        StopCode::EssentialContainerExited,
    );
    let v = failed(v, "user", T, T + 100, StopCode::UserInitiated);
    let v = failed(v, "lost", T, T + 100, StopCode::TerminationNotice);
    let v = failed(v, "sched", T, T + 100, StopCode::ServiceSchedulerInitiated);
    let p = plan_at(&v.view, T + 62_000);
    assert!(p.throttled.is_empty(), "{p:?}");
    assert!(matches!(p.actions[0], Action::Start { .. }), "{p:?}");
    // Failures older than the window: forgotten by the throttle.
    let v = failed(base, "old1", T, T + 100, StopCode::TaskFailedToStart);
    let v = failed(v, "old2", T, T + 200, StopCode::TaskFailedToStart);
    assert!(!plan_at(&v.view, T + 10_000).throttled.is_empty());
    assert!(
        plan_at(&v.view, T + 200 + THROTTLE_WINDOW_MS)
            .throttled
            .is_empty()
    );
    // Off: nothing throttled.
    let off = Settings {
        throttle_base_ms: 0,
        ..settings()
    };
    assert!(plan_with(&v.view, &off, T + 300).throttled.is_empty());
}

// ---------------------------------------------------------------------------------------------
// The model

/// A service's settings as the script sets them.
#[derive(Debug, Clone)]
struct Spec {
    desired: u32,
    min: u32,
    max: u32,
    health_check: bool,
}

/// Something that happens to the cluster between two passes.
#[derive(Debug, Clone)]
enum Event {
    /// The i-th node (of those still registered) loses its lease: record and statuses gone.
    LoseNode(usize),
    /// The i-th node is asked to drain.
    DrainNode(usize),
    /// The i-th task reported RUNNING exits on its own (its node reports it STOPPED).
    Crash(usize),
    /// A user stops the i-th open task (`berth cluster stop`).
    UserStop(usize),
    /// A standalone task is submitted.
    Submit,
    /// The i-th service's desired count changes.
    Scale(usize, u32),
    /// The i-th service gets a new deployment with these settings (a rolling update).
    Deploy(usize, Spec),
    /// The i-th service is removed (DRAINING until its tasks are gone).
    Remove(usize),
}

/// Passes the model's controller runs at most, once the faults stop, before every service has
/// settled and every closed task is forgotten. The slowest rolling update goes one task over
/// the maximum at a time, four passes each: a pass starts and places the task, its node reports
/// it running after the next pass, the pass after asks an old task to stop, its node reports
/// that after the next pass, and the pass after closes the old task and starts the next one.
/// For 8 tasks, 32 passes; then the retention, after which the last closed task is forgotten;
/// and a margin for what was under way when the faults stopped.
const SETTLE_PASSES: usize = 4 * 8 + RETENTION_PASSES as usize + 8;
/// The model's retention, in passes of one second.
const RETENTION_PASSES: u64 = 5;
const STEP_MS: u64 = 1_000;
const USER_STOP: &str = crate::run_task::USER_STOP_REASON;

/// The simulated cluster: the view as etcd would hold it after each write.
struct Sim {
    view: ClusterView,
    settings: Settings,
    now: u64,
    ids: u64,
    deployments: u64,
}

fn spec_strategy() -> impl proptest::strategy::Strategy<Value = Spec> {
    (0..=8u32, 0..=100u32, 0..=100u32, any::<bool>()).prop_map(|(desired, min, extra, hc)| {
        Spec {
            desired,
            min,
            // ECS's ranges: the maximum at least 100 % and above the minimum.
            max: 100u32.max(min + 1) + extra,
            health_check: hc,
        }
    })
}

fn event_strategy() -> impl proptest::strategy::Strategy<Value = Event> {
    prop_oneof![
        1 => (0..6usize).prop_map(Event::LoseNode),
        1 => (0..6usize).prop_map(Event::DrainNode),
        2 => (0..64usize).prop_map(Event::Crash),
        1 => (0..64usize).prop_map(Event::UserStop),
        1 => Just(Event::Submit),
        3 => (0..3usize, 0..=8u32).prop_map(|(s, d)| Event::Scale(s, d)),
        3 => (0..3usize, spec_strategy()).prop_map(|(s, spec)| Event::Deploy(s, spec)),
        1 => (0..3usize).prop_map(Event::Remove),
    ]
}

impl Sim {
    fn new(node_slots: &[u64], services: &[Spec], max_starts: usize) -> Sim {
        let mut sim = Sim {
            view: ClusterView::default(),
            settings: Settings {
                stopped_retention_ms: RETENTION_PASSES * STEP_MS,
                max_starts,
                // Crashes are faults of the model, not launches that keep failing: the
                // throttle has unit tests of its own.
                throttle_base_ms: 0,
                ..Settings::default()
            },
            now: 1_000_000,
            ids: 0,
            deployments: 0,
        };
        for (i, slots) in node_slots.iter().enumerate() {
            sim.add_node(&format!("n{i}"), *slots);
        }
        for (i, spec) in services.iter().enumerate() {
            let name = format!("svc{i}");
            let mut svc = service(&name, spec.desired, spec.min, spec.max);
            svc.definition = definition(&name, spec.health_check);
            svc.deployment = sim.deployment();
            let mod_revision = sim.write();
            sim.view.services.insert(
                name,
                Versioned {
                    value: svc,
                    mod_revision,
                },
            );
        }
        sim
    }

    fn write(&mut self) -> i64 {
        self.view.revision += 1;
        self.view.revision
    }

    fn deployment(&mut self) -> String {
        self.deployments += 1;
        format!("ecs-svc/{}", self.deployments)
    }

    fn add_node(&mut self, name: &str, slots: u64) {
        self.write();
        self.view
            .nodes
            .insert(name.to_owned(), node_record(name, slots));
    }

    fn edit_task(&mut self, id: &str, change: impl FnOnce(&mut TaskRecord)) {
        let rev = self.write();
        if let Some(t) = self.view.tasks.get_mut(id) {
            change(&mut t.value);
            t.mod_revision = rev;
        }
    }

    fn edit_service(&mut self, i: usize, change: impl FnOnce(&mut ServiceRecord, &mut Sim)) {
        let Some(name) = self.view.services.keys().nth(i).cloned() else {
            return;
        };
        let mut svc = self.view.services[&name].value.clone();
        if svc.status == ServiceStatus::Draining {
            return;
        }
        change(&mut svc, self);
        let mod_revision = self.write();
        self.view.services.insert(
            name,
            Versioned {
                value: svc,
                mod_revision,
            },
        );
    }

    fn event(&mut self, event: &Event) {
        match event {
            Event::LoseNode(i) => {
                if let Some(name) = self.view.nodes.keys().nth(*i).cloned() {
                    self.write();
                    self.view.nodes.remove(&name);
                    self.view.statuses.retain(|(node, _), _| *node != name);
                }
            }
            Event::DrainNode(i) => {
                if let Some(name) = self.view.nodes.keys().nth(*i).cloned() {
                    self.write();
                    self.view.drains.insert(name);
                }
            }
            Event::Crash(i) => {
                let running: Vec<(String, i64, String)> = self
                    .view
                    .tasks
                    .values()
                    .map(|t| &t.value)
                    .filter(|t| !t.is_closed() && t.desired_status == DesiredStatus::Running)
                    .filter_map(|t| {
                        let s = self.view.status_of(t)?;
                        (s.last_status == LastStatus::Running)
                            .then(|| (t.id.clone(), s.fence, t.node.clone().unwrap_or_default()))
                    })
                    .collect();
                if !running.is_empty() {
                    let (id, fence, node) = running[i % running.len()].clone();
                    self.write();
                    let mut report = status(&id, fence, LastStatus::Stopped, HealthStatus::Unknown);
                    report.stopped_reason = Some("Essential container in task exited".into());
                    self.view.statuses.insert((node, id), report);
                }
            }
            Event::UserStop(i) => {
                let open: Vec<String> = self
                    .view
                    .tasks
                    .values()
                    .filter(|t| {
                        !t.value.is_closed() && t.value.desired_status == DesiredStatus::Running
                    })
                    .map(|t| t.value.id.clone())
                    .collect();
                if !open.is_empty() {
                    let id = open[i % open.len()].clone();
                    let now = self.now;
                    self.edit_task(&id, |t| {
                        stop_task(t, USER_STOP, StopCode::UserInitiated, now)
                    });
                }
            }
            Event::Submit => {
                self.ids += 1;
                let task = TaskRecord::pending(
                    format!("solo{}", self.ids),
                    definition("solo", false),
                    Vec::new(),
                    Vec::new(),
                    self.now,
                )
                .expect("a valid task");
                let mod_revision = self.write();
                self.view.tasks.insert(
                    task.id.clone(),
                    Versioned {
                        value: task,
                        mod_revision,
                    },
                );
            }
            Event::Scale(i, desired) => self.edit_service(*i, |svc, _| {
                svc.desired_count = *desired;
            }),
            Event::Deploy(i, spec) => self.edit_service(*i, |svc, sim| {
                svc.desired_count = spec.desired;
                svc.minimum_healthy_percent = spec.min;
                svc.maximum_percent = spec.max;
                svc.definition = definition(&svc.name, spec.health_check);
                svc.deployment = sim.deployment();
            }),
            Event::Remove(i) => self.edit_service(*i, |svc, _| {
                svc.status = ServiceStatus::Draining;
            }),
        }
    }

    /// The node agents, after a pass, act on what was written before it (up to revision
    /// `seen`): a placed task starts (RUNNING, and HEALTHY when checked), a task asked to stop
    /// stops. So the next pass sees a task placed or stopped one pass before it as not yet
    /// running or still stopping, and the pass after sees the node's report. A node whose bit
    /// (`n<i>`: bit i) is set in `slow` does nothing this time. Returns how many reports changed.
    fn agents(&mut self, seen: i64, slow: u8) -> usize {
        let is_slow = |node: &str| {
            node.strip_prefix('n')
                .and_then(|i| i.parse::<u32>().ok())
                .is_some_and(|i| slow & (1 << i) != 0)
        };
        let mut reports: Vec<(String, StatusRecord)> = Vec::new();
        for t in self.view.tasks.values() {
            let task = &t.value;
            let (Some(node), Some(fence)) = (&task.node, task.fence) else {
                continue;
            };
            if task.is_closed()
                || t.mod_revision > seen
                || is_slow(node)
                || !self.view.nodes.contains_key(node)
            {
                continue;
            }
            let now = self.view.status_of(task).map(|s| s.last_status);
            let report = match (task.desired_status, now) {
                (DesiredStatus::Running, None) => {
                    let checked = task
                        .definition
                        .container_definitions
                        .iter()
                        .any(|c| c.essential && c.health_check.is_some());
                    let health = if checked {
                        HealthStatus::Healthy
                    } else {
                        HealthStatus::Unknown
                    };
                    status(&task.id, fence, LastStatus::Running, health)
                }
                (DesiredStatus::Stopped, s) if s != Some(LastStatus::Stopped) => StatusRecord {
                    stopped_reason: task.reason.clone(),
                    ..status(&task.id, fence, LastStatus::Stopped, HealthStatus::Unknown)
                },
                _ => continue,
            };
            reports.push((node.clone(), report));
        }
        let changed = reports.len();
        for (node, report) in reports {
            self.write();
            self.view
                .statuses
                .insert((node, report.task.clone()), report);
        }
        changed
    }

    /// One controller pass (plan, apply, check), then the node agents' turn (nodes in `slow`
    /// skip it). Returns the plan and how many reports the agents changed.
    fn pass(&mut self, slow: u8) -> Result<(Plan, usize), TestCaseError> {
        let before = self.view.clone();
        let mut ids = self.ids;
        let decided = plan(&before, &self.settings, self.now, &mut || {
            ids += 1;
            format!("t{ids}")
        });
        self.ids = ids;
        prop_assert!(
            decided.problems.is_empty(),
            "problems: {:?}",
            decided.problems
        );
        self.apply(&before, &decided)?;
        check_pass(&before, &self.view, &decided)?;
        let reports = self.agents(before.revision, slow);
        self.now += STEP_MS;
        Ok((decided, reports))
    }

    /// Applies a plan as [`crate::controller::execute`] and [`crate::txns`] would: every write
    /// guarded by the revision its record had in the view the plan was made from.
    fn apply(&mut self, before: &ClusterView, decided: &Plan) -> Result<(), TestCaseError> {
        let now = self.now;
        // Tasks written by this plan: a second write of one would fail its guard.
        let mut written: BTreeSet<String> = BTreeSet::new();
        let mut new: BTreeSet<String> = BTreeSet::new();
        for action in &decided.actions {
            match action {
                Action::Close {
                    task,
                    reason,
                    code,
                    node_gone,
                } => {
                    prop_assert!(written.insert(task.clone()), "{task} written twice");
                    let t = &before.tasks[task].value;
                    prop_assert!(!t.is_closed(), "{task} closed twice");
                    if *node_gone {
                        let node = t.node.clone().unwrap_or_default();
                        prop_assert!(!before.nodes.contains_key(&node));
                    }
                    self.edit_task(task, |t| {
                        if t.desired_status != DesiredStatus::Stopped || t.reason.is_none() {
                            t.reason = Some(reason.clone());
                        }
                        t.desired_status = DesiredStatus::Stopped;
                        t.stop_code.get_or_insert(*code);
                        t.last_status = Some(LastStatus::Stopped);
                        t.stopped_at_ms = Some(now);
                    });
                }
                Action::Stop { task, reason, code } => {
                    prop_assert!(written.insert(task.clone()), "{task} written twice");
                    let t = &before.tasks[task].value;
                    prop_assert!(
                        !t.is_closed() && t.desired_status == DesiredStatus::Running,
                        "{task} stopped again: {t:?}"
                    );
                    self.edit_task(task, |t| stop_task(t, reason, *code, now));
                }
                Action::Forget { task } => {
                    prop_assert!(written.insert(task.clone()), "{task} written twice");
                    let t = &before.tasks[task].value;
                    prop_assert!(t.is_closed(), "{task} forgotten while open");
                    prop_assert!(
                        t.stopped_at_ms.unwrap_or(0) + self.settings.stopped_retention_ms <= now
                    );
                    self.write();
                    self.view.tasks.remove(task);
                }
                Action::Start { service, tasks } => {
                    let svc = &before.services[service].value;
                    prop_assert!(svc.status == ServiceStatus::Active);
                    let rev = self.write();
                    for t in tasks {
                        prop_assert!(!before.tasks.contains_key(&t.id), "{} reused", t.id);
                        prop_assert!(t.started_by.as_deref() == Some(svc.deployment.as_str()));
                        prop_assert!(t.node.is_none());
                        new.insert(t.id.clone());
                        self.view.tasks.insert(
                            t.id.clone(),
                            Versioned {
                                value: t.clone(),
                                mod_revision: rev,
                            },
                        );
                    }
                    if let Some(s) = self.view.services.get_mut(service) {
                        s.value.launched += tasks.len() as u64;
                        s.mod_revision = rev;
                    }
                }
                Action::RemoveService { service } => {
                    prop_assert!(
                        before.services[service].value.status == ServiceStatus::Draining,
                        "{service} removed while active"
                    );
                    self.write();
                    self.view.services.remove(service);
                }
                Action::Place { task, node } => {
                    // A new task is placed from the revision its start wrote.
                    prop_assert!(
                        new.contains(task) || written.insert(task.clone()),
                        "{task} written twice"
                    );
                    prop_assert!(
                        self.view.tasks.contains_key(task),
                        "{task} placed before it was started"
                    );
                    let t = &self.view.tasks[task];
                    prop_assert!(
                        t.value.node.is_none() && !t.value.is_closed(),
                        "{task} placed twice: {t:?}"
                    );
                    prop_assert!(t.value.desired_status == DesiredStatus::Running);
                    prop_assert!(
                        before.nodes.contains_key(node) && !before.drains.contains(node),
                        "{task} placed on {node}, unknown or draining"
                    );
                    let fence = t.mod_revision;
                    self.edit_task(task, |t| {
                        t.node = Some(node.clone());
                        t.fence = Some(fence);
                        t.reason = None;
                    });
                }
                Action::Unplaced { task, reason } => {
                    prop_assert!(written.insert(task.clone()), "{task} written twice");
                    let t = &before.tasks[task].value;
                    prop_assert!(t.node.is_none() && !t.is_closed());
                    prop_assert!(t.reason.as_deref() != Some(reason.as_str()));
                    self.edit_task(task, |t| t.reason = Some(reason.clone()));
                }
            }
        }
        Ok(())
    }

    /// Runs passes with no fault until the cluster is quiet, then checks it is where it should
    /// be.
    fn settle(&mut self) -> Result<(), TestCaseError> {
        for _ in 0..SETTLE_PASSES {
            let (decided, reports) = self.pass(0)?;
            let all_open = self.view.tasks.values().all(|t| !t.value.is_closed());
            if decided.actions.is_empty() && reports == 0 && all_open {
                return check_settled(&self.view);
            }
        }
        Err(TestCaseError::fail(format!(
            "not settled after {SETTLE_PASSES} passes: {}",
            describe(&self.view)
        )))
    }
}

/// What `berth cluster stop` and the scheduler's stop write ([`crate::txns::stopping`]).
fn stop_task(t: &mut TaskRecord, reason: &str, code: StopCode, now: u64) {
    t.desired_status = DesiredStatus::Stopped;
    t.reason = Some(reason.to_owned());
    t.stop_code = Some(code);
    if t.node.is_none() {
        t.last_status = Some(LastStatus::Stopped);
        t.stopped_at_ms = Some(now);
    }
}

fn bounds(svc: &ServiceRecord) -> (u64, u64, u64) {
    let d = match svc.status {
        ServiceStatus::Active => u64::from(svc.desired_count),
        ServiceStatus::Draining => 0,
    };
    let min = (d * u64::from(svc.minimum_healthy_percent)).div_ceil(100);
    let max = d * u64::from(svc.maximum_percent) / 100;
    (d, min, max)
}

fn open_of<'v>(view: &'v ClusterView, svc: &'v str) -> impl Iterator<Item = &'v TaskRecord> {
    view.tasks
        .values()
        .map(|t| &t.value)
        .filter(move |t| !t.is_closed() && t.service.as_deref() == Some(svc))
}

/// The properties of one pass: `before` is what the plan saw, `after` the cluster once its
/// actions are written (before any node acts on them).
fn check_pass(
    before: &ClusterView,
    after: &ClusterView,
    decided: &Plan,
) -> Result<(), TestCaseError> {
    // Placement: never beyond a node's capacity (every open task placed there reserves). That
    // a task is placed once only, on a registered node that is not draining, is checked as
    // the plan is applied ([`Sim::apply`]).
    for node in after.nodes.values() {
        let used = after
            .tasks
            .values()
            .map(|t| &t.value)
            .filter(|t| !t.is_closed() && t.node.as_deref() == Some(node.name.as_str()))
            .fold(Resources::default(), |sum, t| sum.saturating_add(t.demand));
        prop_assert!(
            used.cpu <= node.capacity.cpu && used.memory_mib <= node.capacity.memory_mib,
            "node {} over capacity: {used:?} of {:?}",
            node.name,
            node.capacity
        );
    }
    let closed: BTreeSet<&str> = decided
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Close { task, .. } => Some(task.as_str()),
            _ => None,
        })
        .collect();
    for (name, s) in &before.services {
        let svc = &s.value;
        let (_, min_healthy, max_total) = bounds(svc);
        let started = decided
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::Start { service, tasks } if service == name => Some(tasks.len()),
                _ => None,
            })
            .sum::<usize>() as u64;
        let stopped: Vec<&str> = decided
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::Stop { task, .. }
                    if before.tasks[task].value.service.as_deref() == Some(name) =>
                {
                    Some(task.as_str())
                }
                _ => None,
            })
            .collect();
        // The maximum: a start never takes what may run above floor(D × max / 100), except
        // the one escape: one task over, when nothing else could move (no stop now, none under
        // way, no task on its way to healthy).
        let may_run = open_of(after, name).count() as u64;
        if started > 0 && may_run > max_total {
            let settling: Vec<&str> = open_of(before, name)
                .filter(|t| !healthy(before, t) && !closed.contains(t.id.as_str()))
                .map(|t| t.id.as_str())
                .collect();
            prop_assert!(
                started == 1
                    && may_run == max_total + 1
                    && stopped.is_empty()
                    && settling.is_empty(),
                "{name}: {may_run} may run after {started} starts, maximum {max_total} \
                 (stops {stopped:?}, not healthy {settling:?}): {}",
                describe(before)
            );
        }
        // The minimum: the plan's stops never take the healthy tasks below
        // ceil(D × min / 100), nor lower when they already are (node losses, exits and user
        // stops happen between passes and are not the plan's).
        let healthy_before = open_of(before, name).filter(|t| healthy(before, t)).count() as u64;
        let healthy_after = open_of(after, name).filter(|t| healthy(after, t)).count() as u64;
        prop_assert!(
            healthy_after >= healthy_before.min(min_healthy),
            "{name}: healthy {healthy_before} → {healthy_after} with minimum {min_healthy} \
             (stops {stopped:?}): {}",
            describe(before)
        );
    }
    Ok(())
}

/// Once quiet: every active service runs exactly D healthy tasks of its deployment on nodes
/// that are not draining, nothing else of it is open; removed services are gone; every
/// standalone task is placed on a live node.
fn check_settled(view: &ClusterView) -> Result<(), TestCaseError> {
    for s in view.services.values() {
        let svc = &s.value;
        prop_assert!(
            svc.status == ServiceStatus::Active,
            "{} removed but still there: {}",
            svc.name,
            describe(view)
        );
        let open: Vec<&TaskRecord> = open_of(view, &svc.name).collect();
        prop_assert!(
            open.len() == svc.desired_count as usize,
            "{}: {} open tasks, {} desired: {}",
            svc.name,
            open.len(),
            svc.desired_count,
            describe(view)
        );
        for t in open {
            prop_assert!(
                t.started_by.as_deref() == Some(svc.deployment.as_str())
                    && healthy(view, t)
                    && !t.node.as_ref().is_some_and(|n| view.drains.contains(n)),
                "{}: {} is not a healthy task of {} on an active node: {}",
                svc.name,
                t.id,
                svc.deployment,
                describe(view)
            );
        }
    }
    for t in view.tasks.values().map(|t| &t.value) {
        let live = t.node.as_ref().is_some_and(|n| view.nodes.contains_key(n));
        prop_assert!(live, "{} is not on a live node: {}", t.id, describe(view));
        if let Some(svc) = &t.service {
            prop_assert!(view.services.contains_key(svc), "{} outlived {svc}", t.id);
        }
    }
    Ok(())
}

/// The view in a few lines, for failure messages.
fn describe(view: &ClusterView) -> String {
    let mut out = String::new();
    for s in view.services.values().map(|s| &s.value) {
        out += &format!(
            "\n  service {} {:?} D={} min={} max={} {}",
            s.name,
            s.status,
            s.desired_count,
            s.minimum_healthy_percent,
            s.maximum_percent,
            s.deployment
        );
    }
    for n in view.nodes.values() {
        let drain = if view.drains.contains(&n.name) {
            " draining"
        } else {
            ""
        };
        out += &format!("\n  node {} {} slots{drain}", n.name, n.capacity.cpu / SLOT);
    }
    for t in view.tasks.values().map(|t| &t.value) {
        out += &format!(
            "\n  task {} {} {} on {} desired {} last {} healthy {}",
            t.id,
            t.service.as_deref().unwrap_or("-"),
            t.started_by.as_deref().unwrap_or("-"),
            t.node.as_deref().unwrap_or("-"),
            t.desired_status.as_str(),
            view.last_status(t),
            healthy(view, t)
        );
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The model: random nodes and services, a script of faults and changes pass by pass (each
    /// pass checked), then a spare node joins and the faults stop: every service settles.
    #[test]
    fn cluster_model(
        node_slots in prop::collection::vec(1..=4u64, 1..=6),
        services in prop::collection::vec(spec_strategy(), 1..=3),
        max_starts in prop_oneof![Just(1usize), Just(3), Just(127)],
        script in prop::collection::vec(
            (
                prop::collection::vec(event_strategy(), 0..=2),
                prop_oneof![3 => Just(0u8), 1 => any::<u8>()],
            ),
            0..=30,
        ),
    ) {
        let mut sim = Sim::new(&node_slots, &services, max_starts);
        for (events, slow) in &script {
            for e in events {
                sim.event(e);
            }
            sim.pass(*slow)?;
        }
        // Room for everything that may run at once: every service at its maximum plus one,
        // and every standalone task.
        sim.add_node("spare", 3 * 17 + 64);
        sim.settle()?;
    }

    /// Rolling updates from a steady state, to random counts and percentages, while one node
    /// may drain: each finishes within the bound, and every pass keeps to the two percentages.
    #[test]
    fn every_rolling_update_finishes(
        node_slots in prop::collection::vec(1..=4u64, 1..=6),
        first in prop::collection::vec(spec_strategy(), 1..=3),
        second in prop::collection::vec(spec_strategy(), 3),
        drain in prop::option::of(0..6usize),
    ) {
        let mut sim = Sim::new(&node_slots, &first, 127);
        sim.add_node("spare", 3 * 17);
        sim.settle()?;
        for (i, spec) in second.iter().enumerate() {
            sim.event(&Event::Deploy(i, spec.clone()));
        }
        if let Some(n) = drain {
            sim.view.drains.insert(format!("n{}", n % node_slots.len()));
        }
        sim.settle()?;
    }
}

// ---------------------------------------------------------------------------------------------
// Scale-in and the placement strategy

/// Nodes `n0`…: node `i` has attribute `zone = z<zones[i]>` and room for 64 tasks; `counts[i]`
/// running tasks of service `web` (desired `desired`, `strategy`) on node `i`, created in turn
/// round the nodes, or (`node_by_node`) all of `n0`'s first, then `n1`'s…, so that the newest
/// tasks are on the last nodes.
fn spread_view(
    zones: &[usize],
    counts: &[usize],
    desired: u32,
    strategy: Vec<Strategy>,
    node_by_node: bool,
) -> Views {
    let mut v = Views::default();
    for (i, zone) in zones.iter().enumerate() {
        let name = format!("n{i}");
        v = v.node(&name, 64);
        if let Some(n) = v.view.nodes.get_mut(&name) {
            n.attributes.insert("zone".to_owned(), format!("z{zone}"));
        }
    }
    v = v.service(ServiceRecord {
        placement_strategy: strategy,
        ..service("web", desired, 100, 200)
    });
    let mut order: Vec<usize> = Vec::new();
    if node_by_node {
        for (i, count) in counts.iter().enumerate() {
            order.extend(std::iter::repeat_n(i, *count));
        }
    } else {
        let most = counts.iter().copied().max().unwrap_or(0);
        for round in 0..most {
            order.extend((0..counts.len()).filter(|&i| round < counts[i]));
        }
    }
    for (created, i) in (1u64..).zip(order) {
        let id = format!("t{created:03}");
        v = v.running("web", &id, created, DEPLOYMENT, &format!("n{i}"));
    }
    v
}

/// How many of `web`'s tasks the plan leaves on each spread value of `field` (`instanceId` or
/// `attribute:zone`), every value of the view's nodes listed, and how many it took from each.
fn left_per_value(
    view: &ClusterView,
    p: &Plan,
    field: &str,
) -> (BTreeMap<String, usize>, BTreeMap<String, usize>) {
    let value = |node: &str| match field.strip_prefix("attribute:") {
        Some(name) => view.nodes[node].attributes[name].clone(),
        None => node.to_owned(),
    };
    let stopped: BTreeSet<&str> = p
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Stop { task, .. } => Some(task.as_str()),
            _ => None,
        })
        .collect();
    let mut left: BTreeMap<String, usize> = view.nodes.keys().map(|n| (value(n), 0)).collect();
    let mut taken: BTreeMap<String, usize> = BTreeMap::new();
    for t in view.tasks.values().map(|t| &t.value) {
        let node = t.node.as_deref().expect("placed");
        if stopped.contains(t.id.as_str()) {
            *taken.entry(value(node)).or_default() += 1;
        } else {
            *left.entry(value(node)).or_default() += 1;
        }
    }
    (left, taken)
}

fn spread_of(counts: &BTreeMap<String, usize>) -> usize {
    let max = counts.values().copied().max().unwrap_or(0);
    let min = counts.values().copied().min().unwrap_or(0);
    max - min
}

#[test]
fn scaling_in_a_spread_service_keeps_it_spread_over_its_nodes() {
    // 3/4/2 tasks on three nodes, the newest on the last two, scaled to 3. Stopping the newest
    // left 3/0/0; spread leaves one on each.
    let v = spread_view(&[0, 1, 2], &[3, 4, 2], 3, Vec::new(), true);
    let p = plan_at(&v.view, NOW);
    let (left, _) = left_per_value(&v.view, &p, "instanceId");
    assert_eq!(
        left.values().copied().collect::<Vec<_>>(),
        [1, 1, 1],
        "{p:?}"
    );
    // Every stop has the scheduler's reason.
    assert!(p.actions.iter().all(
        |a| matches!(a, Action::Stop { reason, code, .. } if *reason == scaling(DEPLOYMENT) && *code == StopCode::ServiceSchedulerInitiated)
    ));
}

#[test]
fn scaling_in_spread_over_an_attribute_balances_the_values_not_the_nodes() {
    // Zone z0 has two nodes with 2 tasks each, z1 one node with 2: scaled to 3, two stops come
    // from z0 (4 tasks) until the zones are even, the third from either (the newest task).
    let strategy = vec![Strategy::Spread {
        field: "attribute:zone".to_owned(),
    }];
    let v = spread_view(&[0, 0, 1], &[2, 2, 2], 3, strategy.clone(), false);
    let p = plan_at(&v.view, NOW);
    let (left, taken) = left_per_value(&v.view, &p, "attribute:zone");
    assert_eq!(taken.get("z0"), Some(&2), "{p:?}");
    assert_eq!(left["z0"] + left["z1"], 3);
    assert!(spread_of(&left) <= 1, "{left:?}");
}

#[test]
fn scaling_in_binpack_stops_on_the_least_packed_node() {
    // Binpack on memory: n1 holds one task, n0 three; scaled from 4 to 3, the task on n1 goes
    // (that node then has the most memory free), though it is not the newest.
    let strategy = vec![Strategy::Binpack {
        field: "memory".to_owned(),
    }];
    let v = spread_view(&[0, 1], &[3, 1], 3, strategy, false);
    let p = plan_at(&v.view, NOW);
    let (left, taken) = left_per_value(&v.view, &p, "instanceId");
    assert_eq!(taken, BTreeMap::from([("n1".to_owned(), 1)]), "{p:?}");
    assert_eq!(left["n0"], 3);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Scale-in of a spread service, over instances or an attribute, from any distribution of
    /// its tasks: it stops exactly the excess, each stop from a value among the fullest (no
    /// value ends more than one below the fullest that lost a task), and what stays is never
    /// less even than before (a balanced service stays balanced).
    #[test]
    fn scale_in_keeps_a_spread_service_balanced(
        nodes in prop::collection::vec((0..3usize, 0..6usize), 1..=5),
        desired_share in 0..=100u32,
        on_attribute in any::<bool>(),
        node_by_node in any::<bool>(),
    ) {
        let zones: Vec<usize> = nodes.iter().map(|(z, _)| *z).collect();
        let counts: Vec<usize> = nodes.iter().map(|(_, c)| *c).collect();
        let total: usize = counts.iter().sum();
        let desired = u32::try_from(total).unwrap_or(0) * desired_share / 100;
        let field = if on_attribute { "attribute:zone" } else { "instanceId" };
        let strategy = vec![Strategy::Spread { field: field.to_owned() }];
        let v = spread_view(&zones, &counts, desired, strategy, node_by_node);
        let p = plan_at(&v.view, NOW);
        let (left, taken) = left_per_value(&v.view, &p, field);
        let before: BTreeMap<String, usize> = left
            .iter()
            .map(|(k, n)| (k.clone(), n + taken.get(k).copied().unwrap_or(0)))
            .collect();
        prop_assert!(p.problems.is_empty(), "{:?}", p);
        prop_assert!(
            taken.values().sum::<usize>() == total - desired as usize,
            "stopped {:?} of {:?} to reach {}", taken, before, desired
        );
        let fullest = left.values().copied().max().unwrap_or(0);
        for value in taken.keys() {
            prop_assert!(
                left[value] + 1 >= fullest,
                "took from {} which kept {}, while another kept {}: {:?} -> {:?}",
                value, left[value], fullest, before, left
            );
        }
        prop_assert!(
            spread_of(&left) <= spread_of(&before).max(1),
            "{:?} -> {:?}", before, left
        );
    }
}
