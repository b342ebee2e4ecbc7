//! The whole cluster as one value at one etcd revision: nodes, drain requests, tasks, statuses
//! and services, decoded. [`crate::store::Cluster::view`] reads it (every prefix at the same
//! revision, in pages); [`ClusterView::put`] and [`ClusterView::delete`] keep it current, event by
//! event, from one watch on `/berth/` (the controller's mirror, [`crate::controller::Mirror`]); the controller's pure decisions
//! ([`crate::reconcile`]) and `berth cluster ps|nodes` read it.
//!
//! A value that does not decode is kept out of the view and listed in [`ClusterView::bad`] with
//! its error, never a panic: etcd is shared and another writer may have put anything there.

use crate::keys;
use crate::record::{self, LastStatus, NodeRecord, ServiceRecord, StatusRecord, TaskRecord};
use crate::store::Versioned;
use std::collections::{BTreeMap, BTreeSet};

/// The cluster at `revision`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterView {
    /// The etcd revision this view is complete up to.
    pub revision: i64,
    pub nodes: BTreeMap<String, NodeRecord>,
    /// Nodes asked to drain.
    pub drains: BTreeSet<String>,
    pub tasks: BTreeMap<String, Versioned<TaskRecord>>,
    /// `(node, task id)` → what that node last reported.
    pub statuses: BTreeMap<(String, String), StatusRecord>,
    pub services: BTreeMap<String, Versioned<ServiceRecord>>,
    /// Keys whose value did not decode, with the error.
    pub bad: BTreeMap<String, String>,
}

impl ClusterView {
    /// Applies a put of `key` (at `mod_revision`): the value replaces what the view had.
    pub fn put(&mut self, key: &str, value: &[u8], mod_revision: i64) {
        self.bad.remove(key);
        let result = if let Some(name) = keys::leaf(keys::NODES, key) {
            record::decode::<NodeRecord>(key, "node record", value).map(|n| {
                self.nodes.insert(name.to_owned(), n);
            })
        } else if let Some(name) = keys::leaf(keys::DRAIN, key) {
            self.drains.insert(name.to_owned());
            Ok(())
        } else if let Some(id) = keys::leaf(keys::TASKS, key) {
            record::decode::<TaskRecord>(key, "task record", value).map(|t| {
                self.tasks.insert(
                    id.to_owned(),
                    Versioned {
                        value: t,
                        mod_revision,
                    },
                );
            })
        } else if let Some((node, id)) = keys::node_and_task(keys::STATUS, key) {
            record::decode::<StatusRecord>(key, "task status", value).map(|s| {
                self.statuses.insert((node.to_owned(), id.to_owned()), s);
            })
        } else if let Some(name) = keys::leaf(keys::SERVICES, key) {
            record::decode::<ServiceRecord>(key, "service record", value).map(|s| {
                self.services.insert(
                    name.to_owned(),
                    Versioned {
                        value: s,
                        mod_revision,
                    },
                );
            })
        } else {
            // Assignments, the election, anything else under /berth/: not part of the view.
            Ok(())
        };
        if let Err(e) = result {
            // The old value is no longer what etcd holds either.
            self.delete(key);
            self.bad.insert(key.to_owned(), e.to_string());
        }
    }

    /// Applies a delete of `key`.
    pub fn delete(&mut self, key: &str) {
        self.bad.remove(key);
        if let Some(name) = keys::leaf(keys::NODES, key) {
            self.nodes.remove(name);
        } else if let Some(name) = keys::leaf(keys::DRAIN, key) {
            self.drains.remove(name);
        } else if let Some(id) = keys::leaf(keys::TASKS, key) {
            self.tasks.remove(id);
        } else if let Some((node, id)) = keys::node_and_task(keys::STATUS, key) {
            self.statuses.remove(&(node.to_owned(), id.to_owned()));
        } else if let Some(name) = keys::leaf(keys::SERVICES, key) {
            self.services.remove(name);
        }
    }

    /// What the task's node reports of it: the status under its node with its fence (a report
    /// of another placement does not count).
    pub fn status_of(&self, task: &TaskRecord) -> Option<&StatusRecord> {
        let node = task.node.as_ref()?;
        self.statuses
            .get(&(node.clone(), task.id.clone()))
            .filter(|s| Some(s.fence) == task.fence)
    }

    /// A service's tasks the controller has not closed, as ECS counts them: `(runningCount,
    /// pendingCount)`: last status RUNNING, and not yet running (not placed, or placed and not
    /// reported RUNNING or STOPPED).
    pub fn service_counts(&self, service: &str) -> (usize, usize) {
        let (mut running, mut pending) = (0, 0);
        for t in self.tasks.values().map(|t| &t.value) {
            if t.service.as_deref() != Some(service) || t.is_closed() {
                continue;
            }
            match self.last_status(t) {
                LastStatus::Running => running += 1,
                LastStatus::Stopped => {}
                LastStatus::Provisioning | LastStatus::Pending => pending += 1,
            }
        }
        (running, pending)
    }

    /// ECS's `lastStatus` of a task as the cluster knows it: what the controller closed it
    /// with, else its node's report, else `PENDING` (not placed) or `PROVISIONING` (placed,
    /// nothing reported yet; ECS's first status of a task on an instance).
    pub fn last_status(&self, task: &TaskRecord) -> LastStatus {
        if let Some(s) = task.last_status {
            return s;
        }
        match (self.status_of(task), &task.node) {
            (Some(s), _) => s.last_status,
            (None, Some(_)) => LastStatus::Provisioning,
            (None, None) => LastStatus::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Resources, encode};

    fn node(name: &str) -> NodeRecord {
        NodeRecord {
            name: name.into(),
            capacity: Resources {
                cpu: 1024,
                memory_mib: 512,
            },
            attributes: BTreeMap::new(),
            version: "t".into(),
            registered_at_ms: 1,
            lease: 7,
        }
    }

    #[test]
    fn puts_and_deletes_land_in_their_maps() {
        let mut v = ClusterView::default();
        v.put(&keys::node("n1"), &encode(&node("n1")), 5);
        v.put(&keys::drain("n1"), b"{\"requestedAtMs\":1}", 6);
        v.put("/berth/assign/n1/t", b"{}", 7);
        assert!(v.nodes.contains_key("n1"));
        assert!(v.drains.contains("n1"));
        v.delete(&keys::drain("n1"));
        v.delete(&keys::node("n1"));
        assert!(v.nodes.is_empty() && v.drains.is_empty());
        assert!(v.bad.is_empty());
    }

    #[test]
    fn a_services_tasks_are_counted_as_ecs_counts_them() {
        let definition = crate::testing::definition();
        let mut v = ClusterView::default();
        let mut add = |id: &str, service: &str, node: Option<&str>, report: Option<LastStatus>| {
            let mut t =
                TaskRecord::pending(id.into(), definition.clone(), vec![], vec![], 1).unwrap();
            t.service = Some(service.into());
            t.node = node.map(str::to_owned);
            t.fence = node.map(|_| 7);
            if let (Some(node), Some(last_status)) = (node, report) {
                v.statuses.insert(
                    (node.into(), id.into()),
                    StatusRecord {
                        task: id.into(),
                        fence: 7,
                        last_status,
                        health_status: record::HealthStatus::Unknown,
                        stopped_reason: None,
                        failed_to_start: false,
                        updated_at_ms: 1,
                    },
                );
            }
            v.tasks.insert(
                id.into(),
                Versioned {
                    value: t,
                    mod_revision: 1,
                },
            );
        };
        add("running", "web", Some("n1"), Some(LastStatus::Running));
        add("pending", "web", None, None);
        add("provisioning", "web", Some("n1"), None);
        add("starting", "web", Some("n1"), Some(LastStatus::Pending));
        add("stopped", "web", Some("n1"), Some(LastStatus::Stopped));
        add("other", "db", Some("n1"), Some(LastStatus::Running));
        assert_eq!(v.service_counts("web"), (1, 3));
        assert_eq!(v.service_counts("db"), (1, 0));
        v.tasks.get_mut("running").unwrap().value.last_status = Some(LastStatus::Stopped);
        assert_eq!(v.service_counts("web"), (0, 3));
    }

    #[test]
    fn a_bad_value_is_listed_and_replaces_the_old_one() {
        let mut v = ClusterView::default();
        v.put(&keys::node("n1"), &encode(&node("n1")), 5);
        v.put(&keys::node("n1"), b"not json", 6);
        assert!(v.nodes.is_empty());
        let why = v.bad.get(&keys::node("n1")).expect("listed");
        assert!(why.contains("not a valid node record"), "{why}");
        v.put(&keys::node("n1"), &encode(&node("n1")), 7);
        assert!(v.bad.is_empty() && v.nodes.contains_key("n1"));
    }
}
