//! The node's decisions about its assignments, as pure functions over what it remembers
//! ([`Memory`]) and what etcd holds: no etcd call, no local side, no clock. The node loop
//! ([`crate::node`]) reads, calls these, and performs what they return.
//!
//! The rule, for one assignment `a` of task `t` (ECS's task placed on this node with fence `f`):
//! - `t` not accepted: **accept** it (read its task and run it, recording `f`); when `a` says
//!   STOPPED, accept it already asked to stop (recorded, nothing runs);
//! - `t` accepted with fence `f` and `a` says STOPPED: **stop** it;
//! - `t` accepted with fence `f`, RUNNING: nothing new;
//! - `t` accepted with another fence: **ignored**, with a warning (a task id is placed once; the
//!   fence the node accepted is never overwritten, so a second placement never runs beside the
//!   first);
//! - a deleted assignment of an accepted task: **release** it (forget it; a task still running
//!   is stopped: the controller closed it).
//!
//! A resync ([`resync`]: the node's whole list of assignments read at once, after a compacted
//! watch or a lost lease) is the same rule over the list, plus: every accepted task whose
//! assignment is absent is released (an *orphan*). An assignment listed twice (two keys naming
//! one task: another writer's) counts once, the first.

use super::Memory;
use crate::record::{Assignment, DesiredStatus};
use std::collections::BTreeSet;

/// The reason a task is stopped with when its STOPPED assignment gives none.
pub const STOPPED_REASON: &str = "Task stopped";

/// What to do with one assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Not accepted yet: accept it (its task read and run, its fence recorded); with `stop`,
    /// recorded already asked to stop with that reason (nothing runs).
    Accept { stop: Option<String> },
    /// Accepted with this fence, and it says STOPPED: ask the task to stop.
    Stop { reason: String },
    /// Accepted with this fence, nothing new.
    Keep,
    /// Accepted with another fence (`accepted`): ignored, with a warning.
    OtherFence { accepted: i64 },
}

/// The stop reason an assignment carries, when it says STOPPED.
fn stop_reason(a: &Assignment) -> Option<String> {
    (a.desired_status == DesiredStatus::Stopped).then(|| {
        a.reason
            .clone()
            .unwrap_or_else(|| STOPPED_REASON.to_owned())
    })
}

/// What the node does with assignment `a` (put in etcd), given what it remembers.
pub fn on_assignment(memory: &Memory, a: &Assignment) -> Step {
    let stop = stop_reason(a);
    match memory.accepted.get(&a.task) {
        None => Step::Accept { stop },
        Some(&accepted) if accepted != a.fence => Step::OtherFence { accepted },
        Some(_) => match stop {
            Some(reason) => Step::Stop { reason },
            None => Step::Keep,
        },
    }
}

/// Whether a deleted assignment of `task` is released: only one the node accepted.
pub fn on_delete(memory: &Memory, task: &str) -> bool {
    memory.accepted.contains_key(task)
}

/// What a resync does: every decision for the node's whole list of assignments at once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diff {
    /// Assignments to accept, in the list's order, each with its stop reason when it says
    /// STOPPED.
    pub accept: Vec<(Assignment, Option<String>)>,
    /// Accepted tasks to ask to stop, with the reason: `(task, reason)`.
    pub stop: Vec<(String, String)>,
    /// Accepted tasks whose assignment is gone, in id order: released (orphans).
    pub release: Vec<String>,
    /// Assignments with another fence than the accepted one: `(task, accepted, listed)`.
    pub ignored: Vec<(String, i64, i64)>,
}

/// The decisions for `assignments`, the node's whole list (read at one revision), given what it
/// remembers.
pub fn resync(memory: &Memory, assignments: &[Assignment]) -> Diff {
    let mut diff = Diff::default();
    let mut present: BTreeSet<&str> = BTreeSet::new();
    for a in assignments {
        if !present.insert(a.task.as_str()) {
            continue;
        }
        match on_assignment(memory, a) {
            Step::Accept { stop } => diff.accept.push((a.clone(), stop)),
            Step::Stop { reason } => diff.stop.push((a.task.clone(), reason)),
            Step::Keep => {}
            Step::OtherFence { accepted } => {
                diff.ignored.push((a.task.clone(), accepted, a.fence));
            }
        }
    }
    diff.release = memory
        .accepted
        .keys()
        .filter(|id| !present.contains(id.as_str()))
        .cloned()
        .collect();
    diff
}

#[cfg(test)]
mod tests;
