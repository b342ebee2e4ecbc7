//! What a cluster node agent remembers across restarts (berth-cluster's `node::Memory`), in two
//! tables of the same database as its tasks:
//!
//! - `cluster_node`: `node` (the node name this data directory belongs to: another name is
//!   refused, so one directory never serves two nodes), `lease` (the lease of the last
//!   registration), `revision` (the etcd revision the assignment watch has processed);
//! - `cluster_assignments`: task id → fence, for every assignment the node accepted, kept until
//!   the assignment is deleted from etcd, even after the task itself was cleaned up locally.
//!
//! Accepting an assignment writes the task (as a submit does), its fence and the revision in one
//! transaction: after a crash the node has either all three or none, so an assignment is never
//! missed and never started twice. Both tables are new in schema 3 databases that serve a
//! cluster node; nothing else reads them, so no schema change was needed.

use crate::StoreError;
use crate::db::{Store, TASKS, TaskRecord, corrupt};
use redb::{ReadableDatabase, ReadableTable, TableDefinition};
use std::collections::BTreeMap;

const NODE: TableDefinition<&str, &[u8]> = TableDefinition::new("cluster_node");
const ASSIGNMENTS: TableDefinition<&str, i64> = TableDefinition::new("cluster_assignments");
const NODE_NAME: &str = "node";
const LEASE: &str = "lease";
const REVISION: &str = "revision";

/// A node's memory as stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterMemory {
    pub node: Option<String>,
    pub lease: Option<i64>,
    pub revision: i64,
    /// Task id → fence.
    pub accepted: BTreeMap<String, i64>,
}

fn number(bytes: &[u8]) -> Option<i64> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

impl Store {
    /// The node's memory (empty on a data directory that never served a cluster node).
    pub fn cluster_memory(&self) -> Result<ClusterMemory, StoreError> {
        let err = |e: redb::Error| self.h.err(e);
        self.h.with(|db| {
            let txn = db.begin_read().map_err(|e| err(e.into()))?;
            let mut out = ClusterMemory::default();
            match txn.open_table(NODE) {
                Ok(t) => {
                    let get = |k: &str| -> Result<Option<Vec<u8>>, StoreError> {
                        Ok(t.get(k)
                            .map_err(|e| err(e.into()))?
                            .map(|v| v.value().to_vec()))
                    };
                    if let Some(v) = get(NODE_NAME)? {
                        out.node = Some(
                            String::from_utf8(v).map_err(|e| corrupt(&self.path, NODE_NAME, e))?,
                        );
                    }
                    if let Some(v) = get(LEASE)? {
                        out.lease = Some(
                            number(&v).ok_or_else(|| corrupt(&self.path, LEASE, "not a number"))?,
                        );
                    }
                    if let Some(v) = get(REVISION)? {
                        out.revision = number(&v)
                            .ok_or_else(|| corrupt(&self.path, REVISION, "not a number"))?;
                    }
                }
                Err(redb::TableError::TableDoesNotExist(_)) => {}
                Err(e) => return Err(err(e.into())),
            }
            match txn.open_table(ASSIGNMENTS) {
                Ok(t) => {
                    for entry in t.iter().map_err(|e| err(e.into()))? {
                        let (k, v) = entry.map_err(|e| err(e.into()))?;
                        out.accepted.insert(k.value().to_owned(), v.value());
                    }
                }
                Err(redb::TableError::TableDoesNotExist(_)) => {}
                Err(e) => return Err(err(e.into())),
            }
            Ok(out)
        })
    }

    /// One write transaction over the cluster tables (and the tasks, for an acceptance).
    fn cluster_write(
        &self,
        f: impl Fn(&redb::WriteTransaction) -> Result<(), redb::Error>,
    ) -> Result<(), StoreError> {
        let err = |e: redb::Error| self.h.err(e);
        self.h.with(|db| {
            let txn = db.begin_write().map_err(|e| err(e.into()))?;
            f(&txn).map_err(err)?;
            txn.commit().map_err(|e| err(e.into()))
        })
    }

    /// Records the node name this data directory serves. Refuses another name than the one
    /// recorded (the error says which and how to start over).
    pub fn claim_cluster_node(&self, node: &str) -> Result<(), StoreError> {
        let memory = self.cluster_memory()?;
        match memory.node.as_deref() {
            Some(n) if n == node => Ok(()),
            Some(n) => Err(StoreError::Database {
                path: self.path.clone(),
                message: format!(
                    "this data directory belongs to cluster node {n:?}, not {node:?}: start the agent with --node {n}, or give node {node:?} a data directory of its own"
                ),
            }),
            None => self.cluster_write(|txn| {
                txn.open_table(NODE)?.insert(NODE_NAME, node.as_bytes())?;
                Ok(())
            }),
        }
    }

    /// Accepts an assignment: the task (with an empty cleanup record, as a submit stores it), its
    /// fence and the watch revision, in one transaction.
    pub fn accept_cluster_task(
        &self,
        rec: &TaskRecord,
        fence: i64,
        revision: i64,
    ) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(rec).map_err(|e| crate::handle::db_err(&self.path, e))?;
        let id = rec.state.id.as_str();
        let rev = revision.to_string();
        self.cluster_write(|txn| {
            txn.open_table(TASKS)?.insert(id, bytes.as_slice())?;
            txn.open_table(ASSIGNMENTS)?.insert(id, fence)?;
            txn.open_table(NODE)?.insert(REVISION, rev.as_bytes())?;
            Ok(())
        })
    }

    /// Forgets an accepted assignment (it was deleted in etcd) and records the revision.
    pub fn release_cluster_task(&self, id: &str, revision: i64) -> Result<(), StoreError> {
        let rev = revision.to_string();
        self.cluster_write(|txn| {
            txn.open_table(ASSIGNMENTS)?.remove(id)?;
            txn.open_table(NODE)?.insert(REVISION, rev.as_bytes())?;
            Ok(())
        })
    }

    /// Records the revision the assignment watch has processed.
    pub fn save_cluster_revision(&self, revision: i64) -> Result<(), StoreError> {
        let rev = revision.to_string();
        self.cluster_write(|txn| {
            txn.open_table(NODE)?.insert(REVISION, rev.as_bytes())?;
            Ok(())
        })
    }

    /// Records the lease of the node's registration.
    pub fn save_cluster_lease(&self, lease: i64) -> Result<(), StoreError> {
        let lease = lease.to_string();
        self.cluster_write(|txn| {
            txn.open_table(NODE)?.insert(LEASE, lease.as_bytes())?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        (dir, store)
    }

    fn record(id: &str) -> TaskRecord {
        let def = berth_model::parse(
            r#"{"family":"f","containerDefinitions":[{"name":"a","image":"i"}]}"#,
        )
        .unwrap()
        .definition;
        TaskRecord {
            state: berth_engine::TaskState::new(id.into(), def, 1),
            cleanup: Default::default(),
        }
    }

    #[test]
    fn acceptance_writes_task_fence_and_revision_together_and_survives_a_reopen() {
        let (dir, s) = store();
        assert_eq!(s.cluster_memory().unwrap(), ClusterMemory::default());
        s.claim_cluster_node("n1").unwrap();
        s.accept_cluster_task(&record("t1"), 7, 9).unwrap();
        s.save_cluster_lease(42).unwrap();
        drop(s);
        let s = Store::open(dir.path()).unwrap();
        let m = s.cluster_memory().unwrap();
        assert_eq!(m.node.as_deref(), Some("n1"));
        assert_eq!(m.lease, Some(42));
        assert_eq!(m.revision, 9);
        assert_eq!(m.accepted, BTreeMap::from([("t1".to_owned(), 7)]));
        assert!(s.get_task("t1").unwrap().is_some());
        // The task's cleanup does not forget the assignment; a release does.
        s.delete_task("t1").unwrap();
        assert_eq!(s.cluster_memory().unwrap().accepted.len(), 1);
        s.release_cluster_task("t1", 12).unwrap();
        let m = s.cluster_memory().unwrap();
        assert!(m.accepted.is_empty());
        assert_eq!(m.revision, 12);
        s.save_cluster_revision(15).unwrap();
        assert_eq!(s.cluster_memory().unwrap().revision, 15);
    }

    #[test]
    fn a_data_directory_serves_one_node() {
        let (_dir, s) = store();
        s.claim_cluster_node("n1").unwrap();
        s.claim_cluster_node("n1").unwrap();
        let err = s.claim_cluster_node("n2").unwrap_err().to_string();
        assert!(err.contains("belongs to cluster node \"n1\""), "{err}");
        assert!(err.contains("--node n1"), "{err}");
    }
}
