//! A node agent's side of the cluster: registration under a lease, the assignment watch, the
//! status reports. Generic over what runs the tasks on the node ([`Local`]), so the same code
//! drives `berth agent --etcd … --node …` (the engine on Docker, its memory in the state store)
//! and the benchmark's simulated fleet (the engine on its fake runtime).
//!
//! What to do with an assignment (accept, stop, ignore another fence, release) is decided by the
//! pure [`decide`] module, with its own table and property tests; this module reads etcd and the
//! node's memory, asks [`decide`], and performs what it returns.
//!
//! **What the node remembers** ([`Memory`], durable on the `Local` side): its lease, the etcd
//! revision its assignments are processed up to, and every assignment it has accepted (task id →
//! fence) until that assignment is deleted. Accepting an assignment (the task stored and started)
//! and recording its revision is one durable write, so after a crash the watch resumes after the
//! last assignment processed: none is missed, and none runs twice, because an accepted id is
//! never started again (even once its task finished and was cleaned up locally).
//!
//! **A session per lease** ([`run`]):
//! 1. The stored lease is kept if etcd still has it (an agent restarted within the TTL is the
//!    same node to the controller: nothing was lost). Otherwise the node was lost, or is new:
//!    its assignments are read in full (the *resync*) before it registers again: accepted tasks
//!    whose assignment is gone are stopped (the controller closed them as lost and may have
//!    placed replacements elsewhere: *orphans*), and the node waits for them to stop (at most
//!    [`NodeConfig::stop_wait`]) before a new lease and node record make it a candidate again. So
//!    once a lost node is back, no copy of a replaced task runs beside its replacement. Before
//!    the resync, the node's name must be free: a registration under another lease (a second
//!    agent started with this node's name) is waited for to expire (at most that lease's TTL
//!    and a margin: its agent may be gone), and one still renewed then refuses this agent
//!    ([`Refused`], the end of [`run`]) before it has accepted anything.
//! 2. The node record is written under the lease, only if the name is free or held by this
//!    same lease (a guarded transaction: two agents can never both hold one node), and every
//!    accepted task's status.
//! 3. The assignment watch runs from the stored revision + 1 (a compacted revision means a
//!    resync); an assignment is accepted and started, an assignment that says STOPPED stops its
//!    task, a deleted one is released (its task stopped if it still runs, its status removed).
//!    The lease is renewed every third of its TTL ([`LeaseSession`]); statuses are written when
//!    they change, all changes since the last write in one transaction (coalesced), under the
//!    lease, so they go with it. The watch asks etcd for a progress answer every [`PROBE`]: a
//!    connection that carries nothing is replaced.
//! 4. Cut off from etcd, nothing stops: tasks keep running (as a kubelet's do), renewals and
//!    writes fail and are tried again (a lease not renewed for a TTL is only *lost* to a
//!    controller; the node waits for etcd to say it is *gone*). Back in touch: a lease still
//!    alive continues the session; an expired one starts the next session (step 1).
//! 5. A failure of etcd or of the node's own store ([`LocalError`]: which operation, with the
//!    store's error) ends the session ([`SessionError`] says which); the next one starts a
//!    second later, from what the node remembers.
//!
//! A shutdown does not revoke the lease: an agent restarted within the TTL keeps its tasks; one
//! that stays down is lost when the lease expires.

use crate::keys;
use crate::lease::LeaseSession;
use crate::now_ms;
use crate::record::{
    self, Assignment, HealthStatus, LastStatus, NodeRecord, Resources, StatusRecord,
};
use crate::store::{Cluster, ClusterError, WatchEvent};
use berth_engine::{Health, RetryPolicy, Status, StopKind, TaskState};
use decide::Step;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub mod decide;

/// How often the assignment watch asks for a progress answer; one that does not come within
/// this time again means the watch's connection is dead.
pub const PROBE: Duration = Duration::from_secs(5);

/// The delays between attempts to connect to etcd: 200 ms, doubling, at most 5 s, for as long as
/// it takes (berth's one retry schedule, the engine's `RetryPolicy`).
const CONNECT_RETRY: RetryPolicy = RetryPolicy {
    first: Duration::from_millis(200),
    max: Duration::from_secs(5),
};

/// The reason an orphan is stopped with.
pub const ORPHANED: &str = "Task stopped: its assignment was removed from the cluster while the node was out of touch (it was lost and its tasks closed)";

/// The node's identity and what it offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeConfig {
    pub name: String,
    pub capacity: Resources,
    pub attributes: BTreeMap<String, String>,
    /// berth's version, for `berth cluster nodes`.
    pub version: String,
    /// The node lease's TTL (whole seconds, at least 1).
    pub lease_ttl: Duration,
    /// How long a node back from being lost waits for its orphans to stop before it registers.
    pub stop_wait: Duration,
}

/// ECS's `ecs.cpu-architecture` value for this build (`x86_64`, `arm64`, …).
pub fn cpu_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "aarch64" => "arm64",
        other => other,
    }
}

/// The attributes berth gives every node, ECS's built-in ones: `ecs.os-type` (`linux`),
/// `ecs.os-family` (`LINUX`), `ecs.cpu-architecture` ([`cpu_architecture`]) and
/// `ecs.availability-zone` (the agent's). A user's attribute cannot take the `ecs.` prefix
/// ([`crate::keys::check_attribute`]), so these are never overridden.
pub fn builtin_attributes(availability_zone: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("ecs.os-type".to_owned(), "linux".to_owned()),
        ("ecs.os-family".to_owned(), "LINUX".to_owned()),
        (
            "ecs.cpu-architecture".to_owned(),
            cpu_architecture().to_owned(),
        ),
        (
            "ecs.availability-zone".to_owned(),
            availability_zone.to_owned(),
        ),
    ])
}

/// What a node keeps across restarts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Memory {
    /// The lease of its last registration.
    pub lease: Option<i64>,
    /// Assignments are processed up to this etcd revision (0: never).
    pub revision: i64,
    /// Accepted assignments, task id → fence, kept until the assignment is deleted.
    pub accepted: BTreeMap<String, i64>,
}

/// A task as the node sees it, for its status record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalStatus {
    /// ECS's `lastStatus`: PENDING, RUNNING or STOPPED.
    pub last_status: LastStatus,
    /// HEALTHY, UNHEALTHY or UNKNOWN.
    pub health_status: HealthStatus,
    pub stopped_reason: Option<String>,
    pub failed_to_start: bool,
}

impl LocalStatus {
    /// A task's status for its status record, from the engine's state: ECS's `lastStatus`
    /// (PENDING until every container has run, RUNNING, STOPPED once every container is), its
    /// `healthStatus` (the engine's task health), and once STOPPED why, and whether it never ran.
    pub fn of(state: &TaskState) -> LocalStatus {
        let stopped = state.known() == Status::Stopped;
        LocalStatus {
            last_status: match state.known() {
                Status::Stopped => LastStatus::Stopped,
                Status::Running => LastStatus::Running,
                _ => LastStatus::Pending,
            },
            health_status: match state.health_status() {
                Health::Healthy => HealthStatus::Healthy,
                Health::Unhealthy => HealthStatus::Unhealthy,
                // A task's health is never STARTING (that is a container's, while its check
                // has no result): ECS says UNKNOWN then.
                Health::Unknown | Health::Starting => HealthStatus::Unknown,
            },
            stopped_reason: stopped.then(|| state.stopped_reason.clone()).flatten(),
            failed_to_start: state.stop_kind == Some(StopKind::Failed),
        }
    }
}

/// What runs the tasks on a node. Every method that changes [`Memory`] is durable when it
/// returns `Ok`; an error (the local store cannot be read or written) leaves the revision where
/// it was, and the node tries again (the session names the operation: [`LocalError`]).
pub trait Local: Send + Sync + 'static {
    /// What the local store fails with.
    type Error: std::error::Error + Send + Sync + 'static;
    /// What the node remembers.
    fn memory(&self) -> impl Future<Output = Result<Memory, Self::Error>> + Send;
    /// Accepts an assignment and starts its task, durably recording it with `fence` and the
    /// watch `revision`; with `stop`, the task is recorded already asked to stop (nothing runs).
    /// An accepted id is never started again.
    fn run(
        &self,
        task: record::TaskRecord,
        fence: i64,
        revision: i64,
        stop: Option<String>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;
    /// Asks an accepted task to stop.
    fn stop(&self, id: &str, reason: &str) -> impl Future<Output = ()> + Send;
    /// Forgets an accepted assignment (it was deleted), recording `revision`; a task that still
    /// runs is asked to stop with `reason` first.
    fn release(
        &self,
        id: &str,
        revision: i64,
        reason: &str,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;
    /// Records that the watch has processed everything up to `revision`.
    fn seen(&self, revision: i64) -> impl Future<Output = Result<(), Self::Error>> + Send;
    /// Records the lease of the current registration.
    fn save_lease(&self, lease: i64) -> impl Future<Output = Result<(), Self::Error>> + Send;
    /// Resolves once none of `ids` runs any more.
    fn settled(&self, ids: &[String]) -> impl Future<Output = ()> + Send;
    /// Every accepted task's fence and status now.
    fn statuses(&self) -> BTreeMap<String, (i64, LocalStatus)>;
    /// Changes whenever a status may have changed.
    fn changes(&self) -> watch::Receiver<u64>;
}

/// Which operation of the node's local side failed, with the local store's error (`E`, its
/// [`Local::Error`]) as the source. The message includes the store's, so one line in the log
/// says what failed and why.
#[derive(Debug, thiserror::Error)]
pub enum LocalError<E: std::error::Error + 'static> {
    #[error("the node's local store: reading the node's memory: {source}")]
    Memory {
        #[source]
        source: E,
    },
    #[error("the node's local store: accepting task {task}: {source}")]
    Accept {
        task: String,
        #[source]
        source: E,
    },
    #[error("the node's local store: releasing task {task}: {source}")]
    Release {
        task: String,
        #[source]
        source: E,
    },
    #[error("the node's local store: recording revision {revision}: {source}")]
    Revision {
        revision: i64,
        #[source]
        source: E,
    },
    #[error("the node's local store: saving lease {lease:x}: {source}")]
    Lease {
        lease: i64,
        #[source]
        source: E,
    },
}

/// Another agent holds the node's name: its registration is under another lease, alive (a
/// second agent started with the same node name). Final: the node loop ends with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "node {node} is already registered by another agent (its lease {:x} is alive; registered at {} ms since the epoch, berth {}): two agents cannot be one node, so this one does not join; if that agent is gone, its registration expires within its lease TTL",
    holder.lease,
    holder.registered_at_ms,
    holder.version
)]
pub struct Refused {
    pub node: String,
    /// The registration that holds the name.
    pub holder: NodeRecord,
}

/// Why a node session failed: etcd (connection, a call, a record), or the node's own store (the
/// next session starts a second later); or the name is another agent's (final).
#[derive(Debug, thiserror::Error)]
pub enum SessionError<E: std::error::Error + 'static> {
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error(transparent)]
    Local(#[from] LocalError<E>),
    #[error(transparent)]
    Refused(#[from] Refused),
}

/// Why a session ended.
enum End {
    /// The lease is gone: the next session resyncs and registers again.
    LeaseLost,
    Shutdown,
}

/// Runs the node until `shutdown`: connects (again and again while etcd does not answer), then
/// one session per lease. `etcd` says how to reach it (its rule already applied by the caller).
/// Errors are logged and retried: a node agent outlives any outage of etcd. The one error
/// returned: the node's name is held by another agent's live registration
/// ([`Refused`]); nothing of that node was accepted (the name is checked before the
/// assignments are read; two agents registering the same new name at the same instant is the
/// exception, and then the node has no assignment yet).
pub async fn run<L: Local>(
    etcd: crate::connect::Settings,
    config: NodeConfig,
    local: Arc<L>,
    shutdown: CancellationToken,
) -> Result<(), Refused> {
    let mut delays = CONNECT_RETRY.backoff();
    let cluster = loop {
        match Cluster::open(&etcd).await {
            Ok(c) => break c,
            Err(e) => {
                tracing::warn!(error = %e, node = %config.name, "cannot reach etcd; trying again");
                tokio::select! {
                    () = tokio::time::sleep(delays.next_delay()) => {}
                    () = shutdown.cancelled() => return Ok(()),
                }
            }
        }
    };
    let mut lost = false;
    loop {
        match session(&cluster, &config, &local, &shutdown, lost).await {
            Ok(End::Shutdown) => return Ok(()),
            Err(SessionError::Refused(refused)) => {
                tracing::error!(node = %config.name, error = %refused, "refused: the node's name is another agent's");
                return Err(refused);
            }
            Ok(End::LeaseLost) => {
                tracing::warn!(node = %config.name, "the node's lease is gone: resyncing before registering again");
                lost = true;
            }
            Err(e) => {
                match &e {
                    SessionError::Cluster(e) => {
                        tracing::warn!(node = %config.name, error = %e, "node session failed; starting again");
                    }
                    SessionError::Local(e) => {
                        tracing::warn!(node = %config.name, error = %e, "the node's local store failed; starting the session again");
                    }
                    SessionError::Refused(_) => {}
                }
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    () = shutdown.cancelled() => return Ok(()),
                }
            }
        }
    }
}

/// The node's memory, or which operation failed.
async fn read_memory<L: Local>(local: &L) -> Result<Memory, LocalError<L::Error>> {
    local
        .memory()
        .await
        .map_err(|source| LocalError::Memory { source })
}

/// What the node's lease is called in the log.
const WHAT: &str = "the node's lease";

/// Registers the node under `lease`: only if the name is free or already held by `lease`
/// ([`Cluster::register_node`]); another agent's registration refuses it.
async fn register<E: std::error::Error + 'static>(
    cluster: &Cluster,
    config: &NodeConfig,
    lease: i64,
) -> Result<(), SessionError<E>> {
    let record = NodeRecord {
        name: config.name.clone(),
        capacity: config.capacity,
        attributes: config.attributes.clone(),
        version: config.version.clone(),
        registered_at_ms: now_ms(),
        lease,
    };
    cluster.register_node(&record).await?.map_err(|holder| {
        SessionError::Refused(Refused {
            node: config.name.clone(),
            holder,
        })
    })
}

/// Before a node with no live lease of its own reads its assignments: waits until no other
/// agent's registration holds its name. A registration whose lease is not renewed (its agent
/// is gone) expires within its TTL, so the wait lasts at most the holder's granted TTL and a
/// margin; one still there then is renewed by a live agent: refused.
async fn name_free<E: std::error::Error + 'static>(
    cluster: &Cluster,
    config: &NodeConfig,
    shutdown: &CancellationToken,
) -> Result<(), SessionError<E>> {
    let started = tokio::time::Instant::now();
    let mut logged = false;
    loop {
        let Some(holder) = cluster.node(&config.name).await? else {
            return Ok(());
        };
        let granted = match cluster.lease_ttl(holder.lease).await? {
            Some((granted, _left)) => Duration::from_secs(u64::try_from(granted).unwrap_or(0)),
            // Its lease is gone: the record goes with it.
            None => Duration::ZERO,
        };
        if started.elapsed() > granted + NAME_WAIT_MARGIN {
            return Err(SessionError::Refused(Refused {
                node: config.name.clone(),
                holder,
            }));
        }
        if !logged {
            tracing::warn!(node = %config.name, lease = holder.lease, wait = ?(granted + NAME_WAIT_MARGIN), "the node's name is registered under another lease: waiting for it to expire (its agent gone) before refusing (its agent alive)");
            logged = true;
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            () = shutdown.cancelled() => return Ok(()),
        }
    }
}

/// How much longer than the holder's TTL [`name_free`] waits.
const NAME_WAIT_MARGIN: Duration = Duration::from_secs(2);

async fn session<L: Local>(
    cluster: &Cluster,
    config: &NodeConfig,
    local: &Arc<L>,
    shutdown: &CancellationToken,
    lost: bool,
) -> Result<End, SessionError<L::Error>> {
    let memory = read_memory(local.as_ref()).await?;
    let stored = match memory.lease {
        Some(lease) => LeaseSession::reclaim(cluster, lease, config.lease_ttl, WHAT).await?,
        None => None,
    };
    let mut lease = match stored {
        Some(lease) => {
            tracing::info!(node = %config.name, lease = lease.id(), "the node's lease is alive: resuming");
            if memory.revision == 0 {
                resync(cluster, config, local.as_ref()).await?;
            }
            lease
        }
        None => {
            name_free(cluster, config, shutdown).await?;
            if shutdown.is_cancelled() {
                return Ok(End::Shutdown);
            }
            let orphans = resync(cluster, config, local.as_ref()).await?;
            if !orphans.is_empty() {
                tracing::warn!(node = %config.name, orphans = orphans.len(), lost, "stopping tasks whose assignments are gone before registering");
                if tokio::time::timeout(config.stop_wait, local.settled(&orphans))
                    .await
                    .is_err()
                {
                    tracing::warn!(node = %config.name, wait = ?config.stop_wait, "orphans still stopping; registering anyway");
                }
            }
            let lease = LeaseSession::grant(cluster, config.lease_ttl, WHAT).await?;
            local
                .save_lease(lease.id())
                .await
                .map_err(|source| LocalError::Lease {
                    lease: lease.id(),
                    source,
                })?;
            lease
        }
    };
    register(cluster, config, lease.id()).await?;
    tracing::info!(node = %config.name, lease = lease.id(), "node registered");

    let reporter = tokio::spawn(report_statuses(
        cluster.clone(),
        config.name.clone(),
        lease.id(),
        local.clone(),
    ));
    let _reporter = AbortOnDrop(reporter);
    loop {
        let from = read_memory(local.as_ref()).await?.revision + 1;
        let mut watch = match cluster
            .watch(&keys::assign_prefix(&config.name), from)
            .await
        {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(node = %config.name, error = %e, "cannot watch the assignments; trying again");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    () = shutdown.cancelled() => return Ok(End::Shutdown),
                    () = lease.gone() => return Ok(End::LeaseLost),
                }
                continue;
            }
        };
        let mut probe = tokio::time::interval(PROBE);
        probe.tick().await;
        let mut answered = true;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return Ok(End::Shutdown),
                // A lease only unsure (not renewed for a TTL) keeps the session: tasks keep
                // running, and etcd says whether it is gone once it answers again.
                () = lease.gone() => return Ok(End::LeaseLost),
                _ = probe.tick() => {
                    if !answered {
                        tracing::warn!(node = %config.name, "the assignment watch gave no progress answer; watching again");
                        break;
                    }
                    answered = false;
                    if watch.request_progress().await.is_err() {
                        break;
                    }
                }
                next = watch.next() => match next {
                    Ok((events, seen)) => {
                        answered = true;
                        apply(cluster, config, local.as_ref(), events, seen).await?;
                    }
                    Err(ClusterError::Compacted { .. }) => {
                        tracing::warn!(node = %config.name, "the assignments' revision was compacted: resyncing");
                        resync(cluster, config, local.as_ref()).await?;
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(node = %config.name, error = %e, "the assignment watch ended; watching again");
                        tokio::select! {
                            () = tokio::time::sleep(Duration::from_millis(500)) => {}
                            () = shutdown.cancelled() => return Ok(End::Shutdown),
                        }
                        break;
                    }
                },
            }
        }
    }
}

/// Aborts a spawned task when dropped (the session's status reporter ends with the session).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Accepts `a` (decided by [`decide`]): reads its task and has the local side run it (recorded
/// with its fence and `revision`; with `stop`, recorded already asked to stop). False when etcd
/// has no such task (nothing is accepted).
async fn accept<L: Local>(
    cluster: &Cluster,
    local: &L,
    a: &Assignment,
    revision: i64,
    stop: Option<String>,
) -> Result<bool, SessionError<L::Error>> {
    let Some(task) = cluster.task(&a.task).await? else {
        tracing::warn!(task = %a.task, "assigned, but no such task: ignored");
        return Ok(false);
    };
    local
        .run(task.value, a.fence, revision, stop)
        .await
        .map_err(|source| LocalError::Accept {
            task: a.task.clone(),
            source,
        })?;
    Ok(true)
}

/// Has the local side release `task` (its assignment is gone), recording `revision`.
async fn release<L: Local>(
    local: &L,
    task: &str,
    revision: i64,
) -> Result<(), SessionError<L::Error>> {
    local
        .release(task, revision, ORPHANED)
        .await
        .map_err(|source| LocalError::Release {
            task: task.to_owned(),
            source,
        })?;
    Ok(())
}

/// Applies one batch of assignment events, in order, each as [`decide`] says; then records
/// `seen`.
async fn apply<L: Local>(
    cluster: &Cluster,
    config: &NodeConfig,
    local: &L,
    events: Vec<WatchEvent>,
    seen: i64,
) -> Result<(), SessionError<L::Error>> {
    let prefix = keys::assign_prefix(&config.name);
    let mut memory = read_memory(local).await?;
    // A progress answer moves nothing: the revision is saved with the next change.
    let mut saved = if events.is_empty() {
        seen
    } else {
        memory.revision
    };
    for e in events {
        let Some(id) = keys::leaf(&prefix, e.key()).map(str::to_owned) else {
            continue;
        };
        match e {
            WatchEvent::Put {
                key,
                value,
                mod_revision,
            } => {
                let a: Assignment = match record::decode(&key, "assignment", &value) {
                    Ok(a) => a,
                    Err(err) => {
                        tracing::warn!(error = %err, "ignored");
                        continue;
                    }
                };
                match decide::on_assignment(&memory, &a) {
                    Step::Accept { stop } => {
                        if accept(cluster, local, &a, mod_revision, stop).await? {
                            memory.accepted.insert(a.task.clone(), a.fence);
                            saved = mod_revision;
                        }
                    }
                    Step::Stop { reason } => local.stop(&a.task, &reason).await,
                    Step::Keep => {}
                    Step::OtherFence { accepted } => other_fence(&a.task, accepted, a.fence),
                }
            }
            WatchEvent::Delete { revision, .. } => {
                if decide::on_delete(&memory, &id) {
                    memory.accepted.remove(&id);
                    release(local, &id, revision).await?;
                    saved = revision;
                }
            }
        }
    }
    if seen > saved {
        local
            .seen(seen)
            .await
            .map_err(|source| LocalError::Revision {
                revision: seen,
                source,
            })?;
    }
    Ok(())
}

fn other_fence(task: &str, accepted: i64, listed: i64) {
    tracing::warn!(
        task,
        fence = accepted,
        new = listed,
        "an assignment with another fence for an accepted task: ignored (a task id is placed once)"
    );
}

/// Reads every assignment of the node and brings the node in line as [`decide::resync`] says:
/// new ones accepted, STOPPED ones stopped, accepted ones that are gone released. Returns the
/// released ones, which may still run (the orphans). The revision is recorded last, so a crash
/// in the middle resyncs again.
async fn resync<L: Local>(
    cluster: &Cluster,
    config: &NodeConfig,
    local: &L,
) -> Result<Vec<String>, SessionError<L::Error>> {
    let (list, revision) = cluster.assignments(&config.name).await?;
    let memory = read_memory(local).await?;
    let diff = decide::resync(&memory, &list);
    let mut accepted = 0usize;
    for (a, stop) in diff.accept {
        if accept(cluster, local, &a, memory.revision, stop).await? {
            accepted += 1;
        }
    }
    for (task, reason) in &diff.stop {
        local.stop(task, reason).await;
    }
    for (task, accepted, listed) in &diff.ignored {
        other_fence(task, *accepted, *listed);
    }
    for task in &diff.release {
        release(local, task, memory.revision).await?;
    }
    local
        .seen(revision)
        .await
        .map_err(|source| LocalError::Revision { revision, source })?;
    tracing::info!(node = %config.name, assignments = list.len(), accepted, released = diff.release.len(), revision, "assignments resynced");
    Ok(diff.release)
}

/// Writes the statuses that changed since the last write, whenever the local side says
/// something changed (all changes since the last write in one transaction); deletes the statuses
/// of tasks no longer accepted. A failed write is tried again a second later.
async fn report_statuses<L: Local>(cluster: Cluster, node: String, lease: i64, local: Arc<L>) {
    let mut changes = local.changes();
    let mut reported: BTreeMap<String, (i64, LocalStatus)> = BTreeMap::new();
    loop {
        let now = local.statuses();
        let changed: Vec<StatusRecord> = now
            .iter()
            .filter(|(id, s)| reported.get(id.as_str()) != Some(*s))
            .map(|(id, (fence, s))| StatusRecord {
                task: id.clone(),
                fence: *fence,
                last_status: s.last_status,
                health_status: s.health_status,
                stopped_reason: s.stopped_reason.clone(),
                failed_to_start: s.failed_to_start,
                updated_at_ms: now_ms(),
            })
            .collect();
        let gone: Vec<String> = reported
            .keys()
            .filter(|id| !now.contains_key(*id))
            .cloned()
            .collect();
        let mut ok = true;
        if !changed.is_empty() {
            match cluster.put_statuses(&node, lease, &changed).await {
                Ok(_) => {
                    for st in &changed {
                        if let Some(s) = now.get(&st.task) {
                            reported.insert(st.task.clone(), s.clone());
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(node, error = %e, "writing task statuses failed; trying again");
                    ok = false;
                }
            }
        }
        if !gone.is_empty() {
            match cluster.delete_statuses(&node, &gone).await {
                Ok(()) => {
                    for id in &gone {
                        reported.remove(id);
                    }
                }
                Err(e) => {
                    tracing::warn!(node, error = %e, "deleting task statuses failed; trying again");
                    ok = false;
                }
            }
        }
        if ok {
            if changes.changed().await.is_err() {
                return;
            }
        } else {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_status_is_ecs_words_from_the_engine_state() {
        let definition = crate::testing::definition();
        let mut state = TaskState::new("t1".into(), definition, 1);
        assert_eq!(
            LocalStatus::of(&state),
            LocalStatus {
                last_status: LastStatus::Pending,
                health_status: HealthStatus::Unknown,
                stopped_reason: None,
                failed_to_start: false,
            }
        );
        // Asked to stop before it ran: its container is marked STOPPED with no Docker call.
        state.request_stop("Task stopped", StopKind::Requested);
        state.step(berth_engine::Options::default(), 2);
        assert_eq!(
            LocalStatus::of(&state),
            LocalStatus {
                last_status: LastStatus::Stopped,
                health_status: HealthStatus::Unknown,
                stopped_reason: Some("Task stopped".into()),
                failed_to_start: false,
            }
        );
    }

    #[test]
    fn a_local_store_failure_says_which_operation_and_keeps_the_stores_error() {
        use std::error::Error as _;
        let e: SessionError<std::io::Error> = LocalError::Accept {
            task: "t1".into(),
            source: std::io::Error::other("disk full"),
        }
        .into();
        assert!(matches!(e, SessionError::Local(LocalError::Accept { .. })));
        assert_eq!(
            e.to_string(),
            "the node's local store: accepting task t1: disk full"
        );
        assert_eq!(
            e.source().map(ToString::to_string).as_deref(),
            Some("disk full")
        );
        for (e, wanted) in [
            (
                LocalError::Memory {
                    source: std::io::Error::other("x"),
                },
                "the node's local store: reading the node's memory: x",
            ),
            (
                LocalError::Release {
                    task: "t2".into(),
                    source: std::io::Error::other("x"),
                },
                "the node's local store: releasing task t2: x",
            ),
            (
                LocalError::Revision {
                    revision: 42,
                    source: std::io::Error::other("x"),
                },
                "the node's local store: recording revision 42: x",
            ),
            (
                LocalError::Lease {
                    lease: 255,
                    source: std::io::Error::other("x"),
                },
                "the node's local store: saving lease ff: x",
            ),
        ] {
            assert_eq!(e.to_string(), wanted);
        }
    }

    #[test]
    fn connecting_is_retried_after_200_ms_doubling_to_5_s() {
        let mut backoff = CONNECT_RETRY.backoff();
        let delays: Vec<u64> = (0..8)
            .map(|_| u64::try_from(backoff.next_delay().as_millis()).unwrap())
            .collect();
        assert_eq!(delays, [200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
    }

    #[test]
    fn every_node_carries_ecs_builtin_attributes() {
        let a = builtin_attributes("eu-1a");
        assert_eq!(
            a.keys().map(String::as_str).collect::<Vec<_>>(),
            [
                "ecs.availability-zone",
                "ecs.cpu-architecture",
                "ecs.os-family",
                "ecs.os-type"
            ]
        );
        assert_eq!(a["ecs.os-type"], "linux");
        assert_eq!(a["ecs.os-family"], "LINUX");
        assert_eq!(a["ecs.availability-zone"], "eu-1a");
        assert_ne!(a["ecs.cpu-architecture"], "aarch64");
        // None of them is an attribute a user may set.
        for (k, v) in &a {
            assert!(crate::keys::check_attribute(k, v).is_err(), "{k}");
        }
        assert_eq!(
            Resources::host(2, 512),
            Resources {
                cpu: 2048,
                memory_mib: 512
            }
        );
    }
}
