//! The controller's decisions as one pure function: [`plan`] takes the cluster as it is (a
//! [`ClusterView`] at one revision) and the time, and returns what to write. No I/O, no clock:
//! the controller ([`crate::controller`]) performs the [`Action`]s through guarded transactions,
//! so a plan made from a view that has since changed writes nothing stale.
//!
//! In order:
//! 1. **Close** what is over: a placed task whose node record is gone (its lease expired: the
//!    node is lost; ECS's `TerminationNotice`), or whose node reports it STOPPED (with the node's
//!    reason; `TaskFailedToStart` when it never ran, else `EssentialContainerExited`, unless it
//!    was asked to stop and keeps that code). Closed tasks are forgotten after the retention.
//! 2. **Services** (ECS's REPLICA scheduler): with `D` the desired count (0 while the service is
//!    being removed), the service's open tasks are *current* (started for its deployment, on a
//!    node that is not draining, or pending), *to replace* (an older deployment, or on a
//!    draining node) or *stopping* (asked to stop, not yet reported stopped). Healthy = RUNNING
//!    on its node (and HEALTHY when an essential container has a health check). Then:
//!    - stop current tasks beyond `D` and tasks to replace, not-running ones first, while the
//!      healthy tasks left stay at least `ceil(D × minimumHealthyPercent / 100)`; which current
//!      tasks go is the service's placement strategy's choice, as ECS's scale-in makes it
//!      ([`crate::placement::choose_stops`]: `spread` stops from the node or attribute value
//!      with the most of the service's tasks, `binpack` from the least packed node);
//!    - start `D − current` new tasks, while everything that may run (current, to replace,
//!      stopping) stays at most `floor(D × maximumPercent / 100)`; when neither a stop nor a
//!      start is allowed, nothing is stopping and no current task is on its way to healthy
//!      (the rounding of a small `D` can do that), one task is started above the maximum, or
//!      the deployment could never finish (so never more than one over);
//!    - a service being removed with no open task left is deleted;
//!    - an ACTIVE service whose record breaks ECS's rules ([`crate::service::check_record`]:
//!      the count at most 5,000, the minimum at most 100 %, the maximum at least 100 % and
//!      above the minimum) is a problem of the plan: no stop, no start for it;
//!    - **throttle** (as ECS slows a service whose tasks keep failing): a task that failed to
//!      start, or whose essential container exited, within [`FAILED_LAUNCH_MS`] of its start is
//!      a failed launch (one this pass closes counts too, stopped now: the pass that learns of a
//!      failure starts no replacement the throttle forbids); from the second one within
//!      [`THROTTLE_WINDOW_MS`] the service starts nothing for [`Settings::throttle_base_ms`]
//!      after its last failure, doubling with each further one up to
//!      [`Settings::throttle_max_ms`] (stops go on).
//! 3. **Place** the pending tasks (the new ones included), oldest first, with
//!    [`crate::placement::place`] over the nodes' loads: every open task on a node reserves its
//!    demand there until it is closed (a stopping task still runs). A task that cannot be
//!    placed keeps the reason why.

use crate::placement::{self, NodeLoad, Request};
use crate::record::{
    DesiredStatus, HealthStatus, LastStatus, ServiceRecord, ServiceStatus, StopCode, TaskRecord,
};
use crate::store::Versioned;
use crate::view::ClusterView;
use std::collections::{BTreeMap, BTreeSet};

/// ECS's reason for a task whose essential container exited, when the node gave none.
pub const ESSENTIAL_EXITED: &str = "Essential container in task exited";
/// The reason of a task stopped because its node was drained.
pub const DRAINING: &str = "Task stopped during instance draining";

/// The reason a lost node's tasks get (modelled on ECS's `Host EC2 (instance i-…) terminated.`).
pub fn lost(node: &str) -> String {
    format!("Host node (instance {node}) lost: its lease expired.")
}

/// The reason the service scheduler gives a task it stops (ECS's wording).
pub fn scaling(deployment: &str) -> String {
    format!("Scaling activity initiated by (deployment {deployment})")
}

/// A service task that stopped (failed to start, or its essential container exited) less than
/// this long after the scheduler started it counts as a failed launch for the throttle.
pub const FAILED_LAUNCH_MS: u64 = 60_000;
/// Failed launches older than this do not count any more.
pub const THROTTLE_WINDOW_MS: u64 = 900_000;

/// The controller's settings that decisions depend on.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// How long a closed task's record is kept (ECS shows stopped tasks for about an hour).
    pub stopped_retention_ms: u64,
    /// The most tasks one service starts in one pass (one transaction writes them).
    pub max_starts: usize,
    /// The service throttle: after the second failed launch within [`THROTTLE_WINDOW_MS`], a
    /// service starts no task for this long after its last failure, twice as long with each
    /// further failure, up to `throttle_max_ms` (0: no throttle).
    pub throttle_base_ms: u64,
    pub throttle_max_ms: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            stopped_retention_ms: 3_600_000,
            max_starts: crate::txns::MAX_OPS - 1,
            throttle_base_ms: 10_000,
            throttle_max_ms: 900_000,
        }
    }
}

/// Until when a service starts no task (its launches keep failing), or None. `closing` are the
/// tasks the pass being planned closes, with the stop code it closes them with: they count as
/// closed at `now_ms` (as [`crate::txns::closing`] writes them), so the failures a pass learns of
/// throttle that very pass's starts.
pub fn throttled_until(
    view: &ClusterView,
    svc: &ServiceRecord,
    settings: &Settings,
    now_ms: u64,
    closing: &BTreeMap<&str, StopCode>,
) -> Option<u64> {
    if settings.throttle_base_ms == 0 {
        return None;
    }
    let failures: Vec<u64> = view
        .tasks
        .values()
        .map(|t| &t.value)
        .filter(|t| t.service.as_deref() == Some(svc.name.as_str()))
        .filter_map(|t| {
            if t.is_closed() {
                Some((t, t.stop_code?, t.stopped_at_ms?))
            } else {
                // Closed by this pass: a task asked to stop keeps the code it was asked with.
                let code = closing.get(t.id.as_str())?;
                Some((t, t.stop_code.unwrap_or(*code), now_ms))
            }
        })
        .filter(|(_, code, _)| {
            matches!(
                code,
                StopCode::TaskFailedToStart | StopCode::EssentialContainerExited
            )
        })
        .filter_map(|(t, _, at)| {
            (at.saturating_sub(t.created_at_ms) < FAILED_LAUNCH_MS
                && now_ms.saturating_sub(at) < THROTTLE_WINDOW_MS)
                .then_some(at)
        })
        .collect();
    let last = *failures.iter().max()?;
    let n = failures.len();
    if n < 2 {
        return None;
    }
    let shift = u32::try_from(n - 2).unwrap_or(u32::MAX).min(40);
    let delay = settings
        .throttle_base_ms
        .saturating_mul(1u64 << shift)
        .min(settings.throttle_max_ms);
    let until = last.saturating_add(delay);
    (now_ms < until).then_some(until)
}

/// One decision.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// The task is over: closed with this reason and code, its assignment deleted; with
    /// `node_gone`, only if its node record is still absent.
    Close {
        task: String,
        reason: String,
        code: StopCode,
        node_gone: bool,
    },
    /// Ask the task to stop.
    Stop {
        task: String,
        reason: String,
        code: StopCode,
    },
    /// Delete a closed task's record (past the retention).
    Forget { task: String },
    /// Write new tasks for a service, with its `launched` count, guarded by its revision.
    Start {
        service: String,
        tasks: Vec<TaskRecord>,
    },
    /// Delete a removed service's record (no open task left).
    RemoveService { service: String },
    /// Place a pending task (an existing one, or one of this plan's `Start`s) on a node.
    Place { task: String, node: String },
    /// Record why an existing pending task is not placed (only when the reason changed).
    Unplaced { task: String, reason: String },
}

/// What [`plan`] decided, and the problems it met (records it could not use).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub actions: Vec<Action>,
    pub problems: Vec<String>,
    /// Services that would start tasks but are throttled, with the time they may again.
    pub throttled: Vec<(String, u64)>,
}

/// Whether the node reports the task RUNNING and, when an essential container has a health
/// check, HEALTHY (ECS counts a task healthy for `minimumHealthyPercent` that way).
pub fn healthy(view: &ClusterView, task: &TaskRecord) -> bool {
    let Some(status) = view.status_of(task) else {
        return false;
    };
    if status.last_status != LastStatus::Running || task.desired_status != DesiredStatus::Running {
        return false;
    }
    let checked = task
        .definition
        .container_definitions
        .iter()
        .any(|c| c.essential && c.health_check.is_some());
    if checked {
        status.health_status == HealthStatus::Healthy
    } else {
        status.health_status != HealthStatus::Unhealthy
    }
}

/// The decisions for the cluster as `view` shows it at `now_ms`. `new_id` gives the ids of the
/// tasks services start.
pub fn plan(
    view: &ClusterView,
    settings: &Settings,
    now_ms: u64,
    new_id: &mut dyn FnMut() -> String,
) -> Plan {
    let mut out = Plan::default();
    // Tasks this plan closes or stops: neither is a service's open task any more (a stopping
    // task still is, as `stopping`), nor pending.
    let mut closed_now: BTreeMap<&str, StopCode> = BTreeMap::new();
    let mut stopped_now: BTreeSet<&str> = BTreeSet::new();

    // 1. Close what is over; forget what has been closed long enough.
    for t in view.tasks.values() {
        let task = &t.value;
        if task.is_closed() {
            let since = task.stopped_at_ms.unwrap_or(task.created_at_ms);
            if now_ms >= since.saturating_add(settings.stopped_retention_ms) {
                out.actions.push(Action::Forget {
                    task: task.id.clone(),
                });
            }
            continue;
        }
        let close = match &task.node {
            Some(node) if !view.nodes.contains_key(node) => {
                Some((lost(node), StopCode::TerminationNotice, true))
            }
            Some(_) => view
                .status_of(task)
                .filter(|s| s.last_status == LastStatus::Stopped)
                .map(|s| {
                    let code = if s.failed_to_start {
                        StopCode::TaskFailedToStart
                    } else {
                        StopCode::EssentialContainerExited
                    };
                    let reason = s
                        .stopped_reason
                        .clone()
                        .unwrap_or_else(|| ESSENTIAL_EXITED.to_owned());
                    (reason, code, false)
                }),
            // A pending task asked to stop is closed by the stop itself; one left over (written
            // by an older berth) is closed here.
            None if task.desired_status == DesiredStatus::Stopped => Some((
                task.reason.clone().unwrap_or_default(),
                StopCode::UserInitiated,
                false,
            )),
            None => None,
        };
        if let Some((reason, code, node_gone)) = close {
            closed_now.insert(&task.id, code);
            out.actions.push(Action::Close {
                task: task.id.clone(),
                reason,
                code,
                node_gone,
            });
        }
    }

    // The nodes' loads: every open task on a node (a stopping one still runs) reserves its
    // demand there; scale-in (2) and placement (3) both read them.
    let mut loads: Vec<NodeLoad> = view
        .nodes
        .values()
        .map(|n| NodeLoad {
            draining: view.drains.contains(&n.name),
            name: n.name.clone(),
            attributes: n.attributes.clone(),
            capacity: n.capacity,
            ..NodeLoad::default()
        })
        .collect();
    let index: BTreeMap<String, usize> = loads
        .iter()
        .enumerate()
        .map(|(i, l)| (l.name.clone(), i))
        .collect();
    for t in view.tasks.values() {
        let task = &t.value;
        if task.is_closed() || closed_now.contains_key(task.id.as_str()) {
            continue;
        }
        if let Some(&i) = task.node.as_ref().and_then(|n| index.get(n)) {
            loads[i].reserve(&task.group, task.demand);
            loads[i].reserve_ports(&task.host_ports);
        }
    }
    let pass = Pass {
        view,
        settings,
        now_ms,
        closing: &closed_now,
        loads: &loads,
        index: &index,
    };

    // 2. Services.
    let mut new_tasks: Vec<(String, TaskRecord)> = Vec::new();
    for s in view.services.values() {
        let svc = &s.value;
        let tasks: Vec<&Versioned<TaskRecord>> = view
            .tasks
            .values()
            .filter(|t| {
                t.value.service.as_deref() == Some(svc.name.as_str())
                    && !t.value.is_closed()
                    && !closed_now.contains_key(t.value.id.as_str())
            })
            .collect();
        if svc.status == ServiceStatus::Draining && tasks.is_empty() {
            out.actions.push(Action::RemoveService {
                service: svc.name.clone(),
            });
            continue;
        }
        // The rules below rely on ECS's ranges (the maximum above the minimum): a record that
        // breaks them (another writer's) is not acted on. A DRAINING service's count is 0, so
        // its percentages do not matter: it is still wound down.
        if svc.status == ServiceStatus::Active
            && let Err(e) = crate::service::check_record(svc)
        {
            out.problems.push(format!("service {}: {e}", svc.name));
            continue;
        }
        let decided = service(&pass, svc, &tasks, new_id);
        match decided {
            Ok((stops, starts, throttled)) => {
                if let Some(until) = throttled {
                    out.throttled.push((svc.name.clone(), until));
                }
                for (id, reason) in stops {
                    if let Some(t) = view.tasks.get(&id) {
                        stopped_now.insert(t.value.id.as_str());
                    }
                    out.actions.push(Action::Stop {
                        task: id,
                        reason,
                        code: StopCode::ServiceSchedulerInitiated,
                    });
                }
                new_tasks.extend(starts.into_iter().map(|t| (svc.name.clone(), t)));
            }
            Err(problem) => out.problems.push(problem),
        }
    }

    // 3. Placement over the nodes' loads.
    // Existing pending tasks (with their versions) and the new ones, oldest first.
    let mut pending: Vec<(&TaskRecord, Option<&Versioned<TaskRecord>>)> = Vec::new();
    for t in view.tasks.values() {
        let task = &t.value;
        if task.is_closed()
            || closed_now.contains_key(task.id.as_str())
            || task.node.is_some()
            || task.desired_status != DesiredStatus::Running
            || stopped_now.contains(task.id.as_str())
        {
            continue;
        }
        pending.push((task, Some(t)));
    }
    let mut new_reasons: BTreeMap<String, String> = BTreeMap::new();
    pending.extend(new_tasks.iter().map(|(_, t)| (t, None)));
    pending.sort_by(|a, b| (a.0.created_at_ms, &a.0.id).cmp(&(b.0.created_at_ms, &b.0.id)));
    for (task, existing) in pending {
        let chosen = placement::check_strategy(&task.placement_strategy)
            .and_then(|()| placement::compile(&task.placement_constraints))
            .and_then(|constraints| {
                let req = Request {
                    id: &task.id,
                    group: &task.group,
                    demand: task.demand,
                    ports: &task.host_ports,
                    constraints: &constraints,
                    strategy: &task.placement_strategy,
                };
                placement::place(&req, &loads)
            });
        match chosen {
            Ok(i) => {
                loads[i].reserve(&task.group, task.demand);
                loads[i].reserve_ports(&task.host_ports);
                out.actions.push(Action::Place {
                    task: task.id.clone(),
                    node: loads[i].name.clone(),
                });
            }
            Err(reason) => match existing {
                Some(_) if task.reason.as_deref() == Some(reason.as_str()) => {}
                Some(_) => out.actions.push(Action::Unplaced {
                    task: task.id.clone(),
                    reason,
                }),
                None => {
                    new_reasons.insert(task.id.clone(), reason);
                }
            },
        }
    }

    // The new tasks are written with their reason when they could not be placed; the starts
    // come before the placements that name them.
    let mut starts: BTreeMap<String, Vec<TaskRecord>> = BTreeMap::new();
    for (service, mut task) in new_tasks {
        task.reason = new_reasons.remove(&task.id);
        starts.entry(service).or_default().push(task);
    }
    let first_place = out
        .actions
        .iter()
        .position(|a| matches!(a, Action::Place { .. } | Action::Unplaced { .. }))
        .unwrap_or(out.actions.len());
    out.actions.splice(
        first_place..first_place,
        starts
            .into_iter()
            .map(|(service, tasks)| Action::Start { service, tasks }),
    );
    out
}

/// What one pass's service decisions read besides the service.
#[derive(Clone, Copy)]
struct Pass<'a> {
    view: &'a ClusterView,
    settings: &'a Settings,
    now_ms: u64,
    /// The tasks this pass closes, with their stop code.
    closing: &'a BTreeMap<&'a str, StopCode>,
    /// The nodes' loads before this pass's changes, and their index by name.
    loads: &'a [NodeLoad],
    index: &'a BTreeMap<String, usize>,
}

/// One service's stops (task id, reason), new tasks, and until when its starts are throttled
/// (when it would start some).
#[allow(clippy::type_complexity)]
fn service(
    pass: &Pass<'_>,
    svc: &ServiceRecord,
    tasks: &[&Versioned<TaskRecord>],
    new_id: &mut dyn FnMut() -> String,
) -> Result<(Vec<(String, String)>, Vec<TaskRecord>, Option<u64>), String> {
    let Pass {
        view,
        settings,
        now_ms,
        closing,
        loads,
        index,
    } = *pass;
    let desired = match svc.status {
        ServiceStatus::Active => u64::from(svc.desired_count),
        ServiceStatus::Draining => 0,
    };
    let min_healthy = (desired * u64::from(svc.minimum_healthy_percent)).div_ceil(100);
    let max_total = desired * u64::from(svc.maximum_percent) / 100;
    let mut current: Vec<&TaskRecord> = Vec::new();
    let mut replace: Vec<(&TaskRecord, &'static str)> = Vec::new();
    let mut stopping = 0u64;
    for t in tasks {
        let task = &t.value;
        if task.desired_status == DesiredStatus::Stopped {
            stopping += 1;
            continue;
        }
        let draining = task.node.as_ref().is_some_and(|n| view.drains.contains(n));
        if draining {
            replace.push((task, DRAINING));
        } else if task.started_by.as_deref() != Some(svc.deployment.as_str()) {
            replace.push((task, ""));
        } else {
            current.push(task);
        }
    }
    let mut healthy_left = tasks.iter().filter(|t| healthy(view, &t.value)).count() as u64;
    let scaling_reason = scaling(&svc.deployment);
    let mut stops: Vec<(String, String)> = Vec::new();

    // Stop candidates: every task to replace, and current ones beyond `desired`, chosen as the
    // service's placement strategy says (`placement::choose_stops`: those that do not run
    // healthy first, since stopping them costs nothing, then what keeps the strategy's balance);
    // tasks that do not run healthy first.
    let excess = current
        .len()
        .saturating_sub(usize::try_from(desired).unwrap_or(usize::MAX));
    let stoppable: Vec<placement::Stoppable<'_>> = current
        .iter()
        .map(|t| placement::Stoppable {
            id: &t.id,
            node: t.node.as_ref().and_then(|n| index.get(n).copied()),
            healthy: healthy(view, t),
            created_at_ms: t.created_at_ms,
            demand: t.demand,
        })
        .collect();
    let by_strategy = placement::choose_stops(&stoppable, excess, loads, &svc.placement_strategy);
    // Each candidate with whether it is a current task (else one to replace).
    let mut candidates: Vec<(&TaskRecord, &str, bool)> =
        replace.iter().map(|(t, why)| (*t, *why, false)).collect();
    candidates.extend(by_strategy.into_iter().map(|i| (current[i], "", true)));
    candidates.sort_by_key(|(t, _, _)| healthy(view, t));
    let mut current_left = current.len() as u64;
    let mut replacing = replace.len() as u64;
    for (task, why, is_current) in candidates {
        let is_healthy = healthy(view, task);
        if is_healthy && healthy_left <= min_healthy {
            continue;
        }
        if is_healthy {
            healthy_left -= 1;
        }
        if is_current {
            current_left -= 1;
        } else {
            replacing -= 1;
        }
        stopping += 1;
        let reason = if why.is_empty() {
            scaling_reason.clone()
        } else {
            why.to_owned()
        };
        stops.push((task.id.clone(), reason));
    }

    // Starts, within the maximum.
    let may_run = current_left + replacing + stopping;
    let wanted = desired.saturating_sub(current_left);
    let mut room = max_total.saturating_sub(may_run);
    // A current task not healthy yet is on its way: once healthy, it lets an old one stop.
    let settling = current.iter().any(|t| !healthy(view, t));
    if wanted > 0 && room == 0 && stops.is_empty() && stopping == 0 && !settling {
        // Neither a stop nor a start is allowed, and nothing is on its way: one start above
        // the maximum lets the deployment go on (the new task, once healthy, frees an old
        // one; until then it is on its way, so this happens once at a time).
        room = 1;
    }
    let mut count = wanted.min(room).min(settings.max_starts as u64);
    let throttled = if count > 0 {
        throttled_until(view, svc, settings, now_ms, closing)
    } else {
        None
    };
    if throttled.is_some() {
        count = 0;
    }
    let mut starts = Vec::new();
    for _ in 0..count {
        starts.push(
            svc.task(new_id(), now_ms)
                .map_err(|e| format!("service {}: {e}", svc.name))?,
        );
    }
    Ok((stops, starts, throttled))
}

#[cfg(test)]
mod tests;
