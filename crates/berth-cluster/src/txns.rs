//! The transactions that change tasks and services, each guarded so that a writer working from
//! an old read writes nothing (and reads again):
//!
//! - [`Cluster::submit`]: a new task, only if its id is free (a repeated submit whose first answer
//!   was lost recognises its own write);
//! - the controller's writes, built as [`Guarded`] values and committed by
//!   [`Cluster::commit_all`] (as many per transaction as etcd allows, several transactions in
//!   flight; a batch whose guard fails is written again one by one): [`placing`] (the task
//!   unchanged since it was read → the task with its node and fence, and the assignment under
//!   that node), [`reasoning`] (why a pending task is not placed), [`stopping`] (desired STOPPED
//!   with a reason; a placed task's assignment says STOPPED too, a pending task is closed at
//!   once), [`closing`] (the task is over: closed and its assignment deleted; for a lost node
//!   also guarded on the node record's absence), [`forgetting`] (a closed task deleted after the
//!   retention), [`removing_service`];
//! - [`Cluster::stop`]: [`stopping`] for `berth cluster stop`;
//! - nodes: [`Cluster::drain_node`] (a drain record only for a registered node),
//!   [`Cluster::remove_node`] (`berth cluster node rm`: refused while the node's lease lives
//!   unless forced; its tasks closed, its drain record and assignments deleted);
//! - services: [`Cluster::service`] (one, with its revision), [`Cluster::create_service`] (only
//!   if the name is free), [`Cluster::update_service`] (guarded), and
//!   [`Cluster::start_service_tasks`], which writes the service record (its `launched` count) in
//!   the same transaction as the new tasks, guarded by the service's revision, so one shortfall
//!   is never filled twice.

use crate::keys;
use crate::record::{
    self, Assignment, DesiredStatus, LastStatus, ServiceRecord, StopCode, TaskRecord,
};
use crate::store::{Cluster, ClusterError, Versioned};
use etcd_client::{Compare, CompareOp, Txn, TxnOp};

/// The most operations berth puts in one transaction (etcd's `--max-txn-ops` default is 128).
pub const MAX_OPS: usize = 128;

/// Transactions [`Cluster::commit_all`] keeps in flight at once (etcd commits concurrent
/// proposals together, so a few in flight cost about as much as one).
pub const IN_FLIGHT: usize = 8;

fn unchanged(key: String, read: i64) -> Compare {
    Compare::mod_revision(key, CompareOp::Equal, read)
}

/// One guarded write: its comparisons and its operations, applied together or not at all.
/// Several are committed in one transaction by [`Cluster::commit_all`].
pub struct Guarded {
    what: &'static str,
    guards: Vec<Compare>,
    /// The keys written, with their operations (no transaction may write a key twice).
    ops: Vec<(String, TxnOp)>,
}

impl Guarded {
    fn new(what: &'static str) -> Guarded {
        Guarded {
            what,
            guards: Vec::new(),
            ops: Vec::new(),
        }
    }
    fn put(mut self, key: String, value: Vec<u8>) -> Guarded {
        self.ops.push((key.clone(), TxnOp::put(key, value, None)));
        self
    }
    fn delete(mut self, key: String) -> Guarded {
        self.ops.push((key.clone(), TxnOp::delete(key, None)));
        self
    }
    fn when(mut self, guard: Compare) -> Guarded {
        self.guards.push(guard);
        self
    }
    fn txn(items: &[&Guarded]) -> Txn {
        Txn::new()
            .when(
                items
                    .iter()
                    .flat_map(|g| g.guards.iter().cloned())
                    .collect::<Vec<_>>(),
            )
            .and_then(
                items
                    .iter()
                    .flat_map(|g| g.ops.iter().map(|(_, op)| op.clone()))
                    .collect::<Vec<_>>(),
            )
    }
}

/// Places `read` on `node`: if the task key is unchanged, the task with its node and fence (the
/// revision compared against) and the assignment `/berth/assign/<node>/<id>` with that fence.
pub fn placing(read: &Versioned<TaskRecord>, node: &str) -> Guarded {
    let mut task = read.value.clone();
    task.node = Some(node.to_owned());
    task.fence = Some(read.mod_revision);
    task.reason = None;
    let assignment = Assignment {
        task: task.id.clone(),
        fence: read.mod_revision,
        desired_status: DesiredStatus::Running,
        reason: None,
    };
    let key = keys::task(&task.id);
    Guarded::new("place")
        .when(unchanged(key.clone(), read.mod_revision))
        .put(key, record::encode(&task))
        .put(keys::assign(node, &task.id), record::encode(&assignment))
}

/// Records why a pending task is not placed.
pub fn reasoning(read: &Versioned<TaskRecord>, reason: &str) -> Guarded {
    let mut task = read.value.clone();
    task.reason = Some(reason.to_owned());
    let key = keys::task(&task.id);
    Guarded::new("set reason")
        .when(unchanged(key.clone(), read.mod_revision))
        .put(key, record::encode(&task))
}

/// Asks a task to stop: desired STOPPED with `reason` and `code`. A placed task's assignment
/// says STOPPED too (its node stops it, reports STOPPED, and the controller then closes it); a
/// pending task is closed at once (`now_ms`).
pub fn stopping(
    read: &Versioned<TaskRecord>,
    reason: &str,
    code: StopCode,
    now_ms: u64,
) -> Guarded {
    let mut task = read.value.clone();
    task.desired_status = DesiredStatus::Stopped;
    task.reason = Some(reason.to_owned());
    task.stop_code = Some(code);
    let key = keys::task(&task.id);
    let assignment = task.node.as_ref().map(|node| {
        (
            keys::assign(node, &task.id),
            Assignment {
                task: task.id.clone(),
                fence: task.fence.unwrap_or(0),
                desired_status: DesiredStatus::Stopped,
                reason: Some(reason.to_owned()),
            },
        )
    });
    if assignment.is_none() {
        task.last_status = Some(LastStatus::Stopped);
        task.stopped_at_ms = Some(now_ms);
    }
    let mut g = Guarded::new("stop")
        .when(unchanged(key.clone(), read.mod_revision))
        .put(key, record::encode(&task));
    if let Some((k, a)) = assignment {
        g = g.put(k, record::encode(&a));
    }
    g
}

/// Closes a task: desired and last status STOPPED, `reason` (a task already asked to stop keeps
/// the reason it was asked with), `code` (likewise), stopped at `now_ms`, its assignment
/// deleted. With `node_gone`, also guarded on the node record's absence (a node that came back
/// meanwhile keeps its task).
pub fn closing(
    read: &Versioned<TaskRecord>,
    reason: &str,
    code: StopCode,
    now_ms: u64,
    node_gone: bool,
) -> Guarded {
    let mut task = read.value.clone();
    if task.desired_status != DesiredStatus::Stopped || task.reason.is_none() {
        task.reason = Some(reason.to_owned());
    }
    task.desired_status = DesiredStatus::Stopped;
    task.stop_code.get_or_insert(code);
    task.last_status = Some(LastStatus::Stopped);
    task.stopped_at_ms = Some(now_ms);
    let key = keys::task(&task.id);
    let mut g = Guarded::new("close").when(unchanged(key.clone(), read.mod_revision));
    if let Some(node) = &task.node {
        g = g.delete(keys::assign(node, &task.id));
        if node_gone {
            g = g.when(Compare::create_revision(
                keys::node(node),
                CompareOp::Equal,
                0,
            ));
        }
    }
    g.put(key, record::encode(&task))
}

/// Deletes a closed task's record.
pub fn forgetting(read: &Versioned<TaskRecord>) -> Guarded {
    let key = keys::task(&read.value.id);
    Guarded::new("forget")
        .when(unchanged(key.clone(), read.mod_revision))
        .delete(key)
}

/// Deletes a service record (a draining service with no task left).
pub fn removing_service(read: &Versioned<ServiceRecord>) -> Guarded {
    let key = keys::service(&read.value.name);
    Guarded::new("remove service")
        .when(unchanged(key.clone(), read.mod_revision))
        .delete(key)
}

impl Cluster {
    /// Creates `key` with `value` only if it does not exist. `Some(revision)` when it was
    /// created, or when it already holds exactly `value` (a call repeated after a lost answer
    /// whose first attempt landed); `None` when the key holds something else.
    async fn create(
        &self,
        what: &'static str,
        key: String,
        value: Vec<u8>,
    ) -> Result<Option<i64>, ClusterError> {
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), value.clone(), None)])
            .or_else([TxnOp::get(key, None)]);
        let resp = self.txn(what, txn).await?;
        let revision = resp.header().map_or(0, |h| h.revision());
        if resp.succeeded() {
            return Ok(Some(revision));
        }
        let ours = resp.op_responses().iter().any(|r| match r {
            etcd_client::TxnOpResponse::Get(g) => g.kvs().iter().any(|kv| kv.value() == value),
            _ => false,
        });
        Ok(ours.then_some(revision))
    }

    /// Writes a new task; [`ClusterError::Exists`] when its id is taken (never overwrites).
    pub async fn submit(&self, task: &TaskRecord) -> Result<i64, ClusterError> {
        self.create("submit", keys::task(&task.id), record::encode(task))
            .await?
            .ok_or_else(|| ClusterError::Exists(task.id.clone()))
    }

    /// Every task with its `mod_revision`, and the store's revision of the read.
    pub async fn tasks(&self) -> Result<(Vec<Versioned<TaskRecord>>, i64), ClusterError> {
        let (list, revision) = self.list::<TaskRecord>(keys::TASKS, "task record").await?;
        Ok((list.into_iter().map(|(_, v)| v).collect(), revision))
    }

    /// One service with its `mod_revision`, None when there is no such service.
    pub async fn service(
        &self,
        name: &str,
    ) -> Result<Option<Versioned<ServiceRecord>>, ClusterError> {
        self.get(&keys::service(name), "service record").await
    }

    /// Commits guarded writes, as many per transaction as [`MAX_OPS`] allows (a transaction
    /// never writes one key twice), [`IN_FLIGHT`] transactions at a time when no key is written
    /// twice in the whole call (a plan's writes never are), one after another otherwise. A
    /// transaction whose guards fail (one of its writes is stale) is committed again one write
    /// at a time, so only the stale write is skipped. Returns, per write, whether it was applied,
    /// and the highest revision of those applied.
    pub async fn commit_all(&self, writes: &[Guarded]) -> Result<(Vec<bool>, i64), ClusterError> {
        use futures_util::StreamExt as _;
        // Cut the writes into transactions.
        let mut batches: Vec<std::ops::Range<usize>> = Vec::new();
        let mut everywhere = std::collections::HashSet::new();
        let mut repeated = false;
        let mut start = 0;
        while start < writes.len() {
            let mut end = start;
            let (mut ops, mut guards) = (0, 0);
            let mut written = std::collections::HashSet::new();
            while end < writes.len() {
                let g = &writes[end];
                let fits = ops + g.ops.len() <= MAX_OPS
                    && guards + g.guards.len() <= MAX_OPS
                    && g.ops.iter().all(|(k, _)| !written.contains(k));
                if !fits && end > start {
                    break;
                }
                ops += g.ops.len();
                guards += g.guards.len();
                for (k, _) in &g.ops {
                    written.insert(k.clone());
                    repeated |= !everywhere.insert(k.clone());
                }
                end += 1;
            }
            batches.push(start..end);
            start = end;
        }
        let in_flight = if repeated { 1 } else { IN_FLIGHT };
        // Per transaction: its writes, and whether it applied and at which revision.
        type Outcome = (std::ops::Range<usize>, Result<(bool, i64), ClusterError>);
        let results: Vec<Outcome> = futures_util::stream::iter(batches)
            .map(|range| async move {
                let batch: Vec<&Guarded> = writes[range.clone()].iter().collect();
                let resp = self.txn(batch[0].what, Guarded::txn(&batch)).await;
                let out = resp.map(|r| (r.succeeded(), r.header().map_or(0, |h| h.revision())));
                (range, out)
            })
            .buffered(in_flight)
            .collect()
            .await;
        let mut done = vec![false; writes.len()];
        let mut revision = 0;
        for (range, result) in results {
            let (ok, rev) = result?;
            if ok {
                revision = revision.max(rev);
                done[range].fill(true);
            } else if range.len() > 1 {
                for i in range {
                    let g = &writes[i];
                    let resp = self.txn(g.what, Guarded::txn(&[g])).await?;
                    if resp.succeeded() {
                        revision = revision.max(resp.header().map_or(0, |h| h.revision()));
                        done[i] = true;
                    }
                }
            }
        }
        Ok((done, revision))
    }

    async fn commit_one(&self, write: Guarded) -> Result<bool, ClusterError> {
        Ok(self
            .commit_all(&[write])
            .await?
            .0
            .first()
            .copied()
            .unwrap_or(false))
    }

    /// Asks one task to stop ([`stopping`]); false when it changed since it was read.
    pub async fn stop(
        &self,
        read: &Versioned<TaskRecord>,
        reason: &str,
        code: StopCode,
        now_ms: u64,
    ) -> Result<bool, ClusterError> {
        self.commit_one(stopping(read, reason, code, now_ms)).await
    }

    /// Writes a new service; [`ClusterError::ServiceExists`] when the name is taken.
    pub async fn create_service(&self, service: &ServiceRecord) -> Result<i64, ClusterError> {
        self.create(
            "create service",
            keys::service(&service.name),
            record::encode(service),
        )
        .await?
        .ok_or_else(|| ClusterError::ServiceExists(service.name.clone()))
    }

    /// Replaces a service read at `read.mod_revision` by `new`; false when it changed since.
    pub async fn update_service(
        &self,
        read: &Versioned<ServiceRecord>,
        new: &ServiceRecord,
    ) -> Result<bool, ClusterError> {
        let key = keys::service(&new.name);
        let txn = Txn::new()
            .when([unchanged(key.clone(), read.mod_revision)])
            .and_then([TxnOp::put(key, record::encode(new), None)]);
        Ok(self.txn("update service", txn).await?.succeeded())
    }

    /// Starts new tasks for a service: the service record with `launched` counted up and every
    /// task (each only if its id is free), in one transaction guarded by the service's revision.
    /// False when the service changed since it was read (another controller started them, or
    /// the user updated it): nothing was written. Returns the revision of the write.
    pub async fn start_service_tasks(
        &self,
        read: &Versioned<ServiceRecord>,
        tasks: &[TaskRecord],
    ) -> Result<Option<i64>, ClusterError> {
        let mut service = read.value.clone();
        service.launched += tasks.len() as u64;
        let key = keys::service(&service.name);
        let mut guards = vec![unchanged(key.clone(), read.mod_revision)];
        let mut ops = vec![TxnOp::put(key, record::encode(&service), None)];
        for t in tasks {
            let k = keys::task(&t.id);
            guards.push(Compare::create_revision(k.clone(), CompareOp::Equal, 0));
            ops.push(TxnOp::put(k, record::encode(t), None));
        }
        let resp = self
            .txn("start service tasks", Txn::new().when(guards).and_then(ops))
            .await?;
        Ok(resp
            .succeeded()
            .then(|| resp.header().map_or(0, |h| h.revision())))
    }
}

/// What [`Cluster::remove_node`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeRemoval {
    /// Nothing in the cluster names the node: no registration, drain record, assignment or task.
    NoSuchNode,
    /// The node is registered under a live lease (its agent runs) and `force` was not given:
    /// nothing was changed.
    Alive { lease: i64 },
    /// Removed: its registration (with `force`, its lease revoked: its record and statuses went
    /// with it), its drain record and its assignments; `closed`, its open tasks, closed.
    Removed {
        was_alive: bool,
        was_draining: bool,
        closed: Vec<String>,
    },
}

impl Cluster {
    /// Asks for node `name` to be drained (`on`) or no longer: the drain record is written only
    /// while the node is registered, deleted only if it exists. False when there is no such node
    /// (not registered, and for `on == false` no drain record either): nothing was written.
    pub async fn drain_node(
        &self,
        name: &str,
        on: bool,
        now_ms: u64,
    ) -> Result<bool, ClusterError> {
        let (node, drain) = (keys::node(name), keys::drain(name));
        let txn = if on {
            let value = record::encode(&record::DrainRecord {
                requested_at_ms: now_ms,
            });
            Txn::new()
                .when([Compare::create_revision(node, CompareOp::Greater, 0)])
                .and_then([TxnOp::put(drain, value, None)])
        } else {
            Txn::new()
                .when([Compare::create_revision(
                    drain.clone(),
                    CompareOp::Greater,
                    0,
                )])
                .and_then([TxnOp::delete(drain, None)])
                .or_else([TxnOp::get(node, None)])
        };
        let resp = self.txn("drain", txn).await?;
        if resp.succeeded() {
            return Ok(true);
        }
        // Undoing a drain nobody asked for is done already, if the node exists.
        Ok(!on
            && resp.op_responses().iter().any(|r| match r {
                etcd_client::TxnOpResponse::Get(g) => !g.kvs().is_empty(),
                _ => false,
            }))
    }

    /// Removes node `name` from the cluster, as ECS's `DeregisterContainerInstance`: refused
    /// while it is registered under a live lease (its agent runs), unless `force`, which revokes
    /// that lease (the record and statuses go with it; an agent still running learns its lease
    /// is gone, stops the node's tasks, whose assignments are gone, and registers again as a
    /// new node). Then every task placed on it that is not closed is closed with `reason` (code
    /// `UserInitiated`; a task asked to stop keeps its reason), so a service replaces it; and its
    /// drain record and assignments are deleted, guarded on its record's absence (a node that
    /// registered again meanwhile keeps them). A task that changed under a close is read and
    /// closed again (a few rounds).
    pub async fn remove_node(
        &self,
        name: &str,
        force: bool,
        reason: &str,
        now_ms: u64,
    ) -> Result<NodeRemoval, ClusterError> {
        let view = self.view().await?;
        let (assignments, _) = self.assignments(name).await?;
        let on_node = |t: &TaskRecord| t.node.as_deref() == Some(name);
        let registered = view.nodes.get(name);
        let was_draining = view.drains.contains(name);
        let known = registered.is_some()
            || was_draining
            || !assignments.is_empty()
            || view.tasks.values().any(|t| on_node(&t.value));
        if !known {
            return Ok(NodeRemoval::NoSuchNode);
        }
        let was_alive = registered.is_some();
        if let Some(node) = registered {
            if !force {
                return Ok(NodeRemoval::Alive { lease: node.lease });
            }
            match self.revoke(node.lease).await {
                Ok(()) => {}
                // Expired meanwhile: its keys are gone all the same.
                Err(ClusterError::Etcd { error, .. })
                    if error.to_string().contains("not found") => {}
                Err(e) => return Err(e),
            }
        }
        let mut closed = Vec::new();
        let mut view = view;
        for round in 0..5 {
            if round > 0 {
                view = self.view().await?;
            }
            let open: Vec<&Versioned<TaskRecord>> = view
                .tasks
                .values()
                .filter(|t| on_node(&t.value) && !t.value.is_closed())
                .collect();
            if open.is_empty() {
                break;
            }
            let writes: Vec<Guarded> = open
                .iter()
                .map(|t| closing(t, reason, StopCode::UserInitiated, now_ms, true))
                .collect();
            let (done, _) = self.commit_all(&writes).await?;
            for (t, ok) in open.iter().zip(done) {
                if ok {
                    closed.push(t.value.id.clone());
                }
            }
        }
        let txn = Txn::new()
            .when([Compare::create_revision(
                keys::node(name),
                CompareOp::Equal,
                0,
            )])
            .and_then([
                TxnOp::delete(keys::drain(name), None),
                TxnOp::delete(
                    keys::assign_prefix(name),
                    Some(etcd_client::DeleteOptions::new().with_prefix()),
                ),
            ]);
        self.txn("remove node", txn).await?;
        Ok(NodeRemoval::Removed {
            was_alive,
            was_draining,
            closed,
        })
    }
}
