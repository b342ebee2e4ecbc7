//! The controller ([`run`], what `berth controller` does): campaign for leadership
//! ([`crate::election`]); while leading, keep a [`ClusterView`] current (one full read, then one
//! watch on `/berth/` applied event by event; a compacted or broken watch means a full read
//! again), and every interval run one pass: [`crate::reconcile::plan`] over the view, then
//! [`execute`] its actions through guarded transactions ([`crate::txns`]), each pass logged
//! ([`log_pass`]). A lost lease ends the term at once (another controller may lead by then) and
//! the controller campaigns again, as it does while etcd is away: it outlives any outage; a
//! cancellation resigns, so the next controller leads without waiting for the TTL.
//!
//! A pass never runs on a view older than the controller's own last write: after writing, the
//! next pass waits until the watch has brought the view to that revision (a full read after
//! [`CATCH_UP`]). Otherwise a service's shortfall could be seen, and filled, twice. Another
//! controller that wrongly believes it leads is stopped by the guards (each task placed once;
//! each shortfall started once: the service record's revision guards its starts).

use crate::election::{self, Leadership};
use crate::keys;
use crate::reconcile::{self, Action, Settings};
use crate::record::TaskRecord;
use crate::store::{Cluster, ClusterError, Versioned, Watch};
use crate::txns::{self, Guarded};
use crate::view::ClusterView;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long a pass waits for the watch to bring the view up to the controller's last write
/// before it reads everything again.
pub const CATCH_UP: Duration = Duration::from_secs(5);

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PassReport {
    /// `(task id, node)` placed by this pass.
    pub placed: Vec<(String, String)>,
    /// `(task id, reason)` still pending.
    pub unplaced: Vec<(String, String)>,
    /// `(task id, reason)` closed.
    pub closed: Vec<(String, String)>,
    /// `(task id, reason)` asked to stop.
    pub stopped: Vec<(String, String)>,
    /// `(service, task ids)` started.
    pub started: Vec<(String, Vec<String>)>,
    /// Closed tasks whose records were deleted.
    pub forgotten: usize,
    /// Services removed.
    pub removed: Vec<String>,
    /// Writes skipped because what they were decided from changed meanwhile.
    pub conflicts: usize,
    /// Records the plan could not use.
    pub problems: Vec<String>,
    /// Services whose starts are throttled, with the time they may start again.
    pub throttled: Vec<(String, u64)>,
    /// The revision of the pass's last write (0: it wrote nothing).
    pub revision: i64,
}

impl PassReport {
    /// Whether the pass wrote nothing and found nothing to say.
    pub fn is_quiet(&self) -> bool {
        self.revision == 0
            && self.unplaced.is_empty()
            && self.problems.is_empty()
            && self.throttled.is_empty()
    }
}

/// What a write of a pass's first batch was, for its report.
enum Written {
    Closed,
    Stopped,
    Forgotten,
    Removed,
    Unplaced,
}

/// Performs a plan made from `view`: the closes, stops, forgets, removals and reasons in batched
/// guarded transactions, then the service starts (one guarded transaction per service), then
/// the placements (batched; a new task is placed only if its start was written).
pub async fn execute(
    cluster: &Cluster,
    view: &ClusterView,
    plan: reconcile::Plan,
    now_ms: u64,
) -> Result<PassReport, ClusterError> {
    let mut report = PassReport {
        problems: plan.problems,
        throttled: plan.throttled,
        ..PassReport::default()
    };
    let task = |id: &str| view.tasks.get(id);
    let mut first: Vec<Guarded> = Vec::new();
    // What each write in `first` was, for the report.
    let mut first_what: Vec<(Written, String, String)> = Vec::new();
    let mut starts: Vec<(String, Vec<TaskRecord>)> = Vec::new();
    let mut places: Vec<(String, String)> = Vec::new();
    for action in plan.actions {
        match action {
            Action::Close {
                task: id,
                reason,
                code,
                node_gone,
            } => {
                if let Some(t) = task(&id) {
                    first.push(txns::closing(t, &reason, code, now_ms, node_gone));
                    first_what.push((Written::Closed, id, reason));
                }
            }
            Action::Stop {
                task: id,
                reason,
                code,
            } => {
                if let Some(t) = task(&id) {
                    first.push(txns::stopping(t, &reason, code, now_ms));
                    first_what.push((Written::Stopped, id, reason));
                }
            }
            Action::Forget { task: id } => {
                if let Some(t) = task(&id) {
                    first.push(txns::forgetting(t));
                    first_what.push((Written::Forgotten, id, String::new()));
                }
            }
            Action::RemoveService { service } => {
                if let Some(s) = view.services.get(&service) {
                    first.push(txns::removing_service(s));
                    first_what.push((Written::Removed, service, String::new()));
                }
            }
            Action::Unplaced { task: id, reason } => {
                if let Some(t) = task(&id) {
                    first.push(txns::reasoning(t, &reason));
                    first_what.push((Written::Unplaced, id, reason));
                }
            }
            Action::Start { service, tasks } => starts.push((service, tasks)),
            Action::Place { task: id, node } => places.push((id, node)),
        }
    }
    let (done, revision) = cluster.commit_all(&first).await?;
    report.revision = report.revision.max(revision);
    for ((kind, id, reason), ok) in first_what.into_iter().zip(done) {
        if !ok {
            report.conflicts += 1;
            continue;
        }
        match kind {
            Written::Closed => report.closed.push((id, reason)),
            Written::Stopped => report.stopped.push((id, reason)),
            Written::Forgotten => report.forgotten += 1,
            Written::Removed => report.removed.push(id),
            Written::Unplaced => report.unplaced.push((id, reason)),
        }
    }

    // New tasks, at the revision their start wrote them.
    let mut created: BTreeMap<String, Versioned<TaskRecord>> = BTreeMap::new();
    for (service, tasks) in starts {
        let Some(read) = view.services.get(&service) else {
            continue;
        };
        match cluster.start_service_tasks(read, &tasks).await? {
            Some(rev) => {
                report.revision = report.revision.max(rev);
                report.started.push((
                    service.clone(),
                    tasks.iter().map(|t| t.id.clone()).collect(),
                ));
                for t in tasks {
                    if let Some(reason) = &t.reason {
                        report.unplaced.push((t.id.clone(), reason.clone()));
                    }
                    created.insert(
                        t.id.clone(),
                        Versioned {
                            value: t,
                            mod_revision: rev,
                        },
                    );
                }
            }
            None => report.conflicts += 1,
        }
    }

    let mut placing: Vec<(String, String)> = Vec::new();
    let mut writes: Vec<Guarded> = Vec::new();
    for (id, node) in places {
        if let Some(t) = created.get(&id).or_else(|| task(&id)) {
            writes.push(txns::placing(t, &node));
            placing.push((id, node));
        }
    }
    let (done, revision) = cluster.commit_all(&writes).await?;
    report.revision = report.revision.max(revision);
    for (p, ok) in placing.into_iter().zip(done) {
        if ok {
            report.placed.push(p);
        } else {
            report.conflicts += 1;
        }
    }
    Ok(report)
}

/// One pass from a fresh read (no mirror): what `berth controller` does every interval, in a
/// form tests can call directly. `new_id` names the tasks services start.
pub async fn pass(
    cluster: &Cluster,
    settings: &Settings,
    now_ms: u64,
    new_id: &mut dyn FnMut() -> String,
) -> Result<PassReport, ClusterError> {
    let view = cluster.view().await?;
    let plan = reconcile::plan(&view, settings, now_ms, new_id);
    execute(cluster, &view, plan, now_ms).await
}

/// The controller's view of the cluster, kept current by a watch.
pub struct Mirror {
    cluster: Cluster,
    view: ClusterView,
    watch: Watch,
}

impl Mirror {
    /// A full read, and a watch from the revision after it.
    pub async fn start(cluster: &Cluster) -> Result<Mirror, ClusterError> {
        let view = cluster.view().await?;
        let watch = cluster.watch(keys::ROOT, view.revision + 1).await?;
        Ok(Mirror {
            cluster: cluster.clone(),
            view,
            watch,
        })
    }

    /// The view as the watch has brought it so far.
    pub fn view(&self) -> &ClusterView {
        &self.view
    }

    async fn reload(&mut self) -> Result<(), ClusterError> {
        let view = self.cluster.view().await?;
        self.watch = self.cluster.watch(keys::ROOT, view.revision + 1).await?;
        self.view = view;
        Ok(())
    }

    fn apply(&mut self, events: Vec<crate::store::WatchEvent>, seen: i64) {
        for e in events {
            match e {
                crate::store::WatchEvent::Put {
                    key,
                    value,
                    mod_revision,
                } => self.view.put(&key, &value, mod_revision),
                crate::store::WatchEvent::Delete { key, .. } => self.view.delete(&key),
            }
        }
        self.view.revision = self.view.revision.max(seen);
    }

    /// Applies the watch's events until `deadline`; a broken or compacted watch is replaced by
    /// a full read.
    pub async fn follow_until(&mut self, deadline: tokio::time::Instant) {
        loop {
            match tokio::time::timeout_at(deadline, self.watch.next()).await {
                Err(_) => return,
                Ok(Ok((events, seen))) => self.apply(events, seen),
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "the controller's watch ended; reading everything again");
                    if let Err(e) = self.reload().await {
                        tracing::warn!(error = %e, "reading the cluster failed");
                        tokio::time::sleep_until(deadline).await;
                        return;
                    }
                }
            }
        }
    }

    /// Waits until the view has reached `revision` (the controller's own last write); after
    /// [`CATCH_UP`] without it, reads everything again.
    pub async fn catch_up(&mut self, revision: i64) -> Result<(), ClusterError> {
        let deadline = tokio::time::Instant::now() + CATCH_UP;
        if self.view.revision < revision {
            // Ask for a progress answer: writes under other prefixes do not reach this watch
            // as events, but the answer still says the watch has seen up to them.
            let _ = self.watch.request_progress().await;
        }
        while self.view.revision < revision {
            match tokio::time::timeout_at(deadline, self.watch.next()).await {
                Ok(Ok((events, seen))) => self.apply(events, seen),
                Ok(Err(_)) | Err(_) => return self.reload().await,
            }
        }
        Ok(())
    }
}

/// How a controller runs ([`run`]).
pub struct Config {
    /// Its name in the election.
    pub name: String,
    /// Its lease: how long after a crash the next controller takes over (whole seconds, at
    /// least 1).
    pub lease_ttl: Duration,
    /// Time between passes while leading (at least 1 ms).
    pub interval: Duration,
    /// What the decisions depend on.
    pub settings: Settings,
    /// Names the tasks services start (`berth controller` gives the engine's task ids).
    pub new_id: Box<dyn FnMut() -> String + Send>,
}

/// How a controller's [`run`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Cancelled: before it led, or while leading (it resigned: the next one leads at once).
    Cancelled,
}

/// Whether a failure is etcd being away (unreachable, no member answering in time, an election
/// under way), which waiting mends, rather than etcd's refusal.
pub fn transient(e: &ClusterError) -> bool {
    match e {
        ClusterError::Timeout { .. } | ClusterError::WatchEnded { .. } => true,
        // A lease that expired under a campaign is mended by campaigning with a new one.
        ClusterError::Etcd { error, .. } => {
            crate::store::retriable(error) || error.to_string().contains("lease not found")
        }
        _ => false,
    }
}

/// The longest wait between two campaigns while etcd is away.
const CAMPAIGN_RETRY_MAX: Duration = Duration::from_secs(5);

/// Runs a controller until `cancel`: campaigns as `config.name`; once leading, starts the
/// [`Mirror`] (tried again every interval while etcd does not answer), then one pass per
/// interval, each waiting for the view to reach its previous pass's last write, each logged
/// ([`log_pass`]); a pass that fails is logged and the next one reads again. A leader that
/// loses its lease (not renewed for a TTL through an etcd outage, or gone) stops at once
/// (another controller may lead by then) and campaigns again, with a new lease: a controller
/// outlives any outage of etcd. A campaign that fails because etcd is away is tried again
/// (200 ms, doubling, at most [`CAMPAIGN_RETRY_MAX`]). The error: the campaign failed for a
/// reason waiting does not mend (etcd refused it).
pub async fn run(
    cluster: &Cluster,
    mut config: Config,
    cancel: CancellationToken,
) -> Result<Ended, ClusterError> {
    let name = config.name.clone();
    let mut delay = Duration::from_millis(200);
    loop {
        tracing::info!(name, endpoints = %cluster.endpoints(), "campaigning");
        let leadership = tokio::select! {
            l = election::campaign(cluster, &name, config.lease_ttl) => l,
            () = cancel.cancelled() => return Ok(Ended::Cancelled),
        };
        let leadership = match leadership {
            Ok(l) => l,
            Err(e) if transient(&e) => {
                tracing::warn!(name, error = %e, retry_in = ?delay, "campaigning failed: etcd is away; campaigning again");
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = cancel.cancelled() => return Ok(Ended::Cancelled),
                }
                delay = (delay * 2).min(CAMPAIGN_RETRY_MAX);
                continue;
            }
            Err(e) => return Err(e),
        };
        delay = Duration::from_millis(200);
        match lead(cluster, &mut config, leadership, &cancel).await {
            Led::Cancelled => return Ok(Ended::Cancelled),
            Led::Lost => {}
        }
    }
}

/// How a term as leader ended.
enum Led {
    Cancelled,
    Lost,
}

/// One term as leader: the mirror, then a pass per interval, until the lease is lost or
/// `cancel` (then it resigns).
async fn lead(
    cluster: &Cluster,
    config: &mut Config,
    mut leadership: Leadership,
    cancel: &CancellationToken,
) -> Led {
    let name = config.name.clone();
    let interval = config.interval.max(Duration::from_millis(1));
    tracing::info!(name, "leading");
    let mut mirror = loop {
        match Mirror::start(cluster).await {
            Ok(m) => break m,
            Err(e) => {
                tracing::warn!(error = %e, "reading the cluster failed; trying again");
                tokio::select! {
                    () = tokio::time::sleep(interval) => {}
                    () = leadership.lost() => return lost(leadership, &name).await,
                    () = cancel.cancelled() => return resign(leadership, &name).await,
                }
            }
        }
    };
    let mut last_write = 0;
    loop {
        let next = tokio::time::Instant::now() + interval;
        let began = tokio::time::Instant::now();
        let pass = async {
            mirror.catch_up(last_write).await?;
            let now = crate::now_ms();
            let plan = reconcile::plan(mirror.view(), &config.settings, now, &mut config.new_id);
            execute(cluster, mirror.view(), plan, now).await
        };
        // A pass stalled by an outage stops as soon as the lease is lost.
        let outcome = tokio::select! {
            r = pass => r,
            () = leadership.lost() => return lost(leadership, &name).await,
        };
        match outcome {
            Ok(report) => {
                last_write = last_write.max(report.revision);
                log_pass(&report, began.elapsed());
            }
            // etcd unreachable or a member lost: the next pass reads again.
            Err(e) => tracing::warn!(error = %e, "controller pass failed"),
        }
        tokio::select! {
            () = mirror.follow_until(next) => {}
            () = leadership.lost() => return lost(leadership, &name).await,
            () = cancel.cancelled() => return resign(leadership, &name).await,
        }
    }
}

/// How long a controller that lost its lease tries to revoke it (so that its old election key
/// does not stand before its new campaign until the TTL ends) before it campaigns anyway.
const REVOKE_LOST: Duration = Duration::from_secs(2);

async fn lost(leadership: Leadership, name: &str) -> Led {
    tracing::error!(
        name,
        "lost the controller lease; another controller may lead now: stopped leading, campaigning again"
    );
    // Best effort: a lease etcd still has would hold the old election key for a TTL.
    let _ = tokio::time::timeout(REVOKE_LOST, leadership.resign()).await;
    Led::Lost
}

async fn resign(leadership: Leadership, name: &str) -> Led {
    if let Err(e) = leadership.resign().await {
        tracing::warn!(error = %e, "resigning failed; the next controller leads when the lease expires");
    }
    tracing::info!(name, "resigned");
    Led::Cancelled
}

/// Logs what a pass did, one line per change, and a summary line (`controller pass`, with its
/// counts and `took_ms`) unless the pass was quiet.
pub fn log_pass(report: &PassReport, took: Duration) {
    for (task, reason) in &report.closed {
        tracing::info!(task, reason, "closed");
    }
    for (task, reason) in &report.stopped {
        tracing::info!(task, reason, "stopping");
    }
    for (service, tasks) in &report.started {
        tracing::info!(service, count = tasks.len(), "started service tasks");
    }
    for (task, node) in &report.placed {
        tracing::info!(task, node, "placed");
    }
    for service in &report.removed {
        tracing::info!(service, "service removed");
    }
    for (service, until) in &report.throttled {
        tracing::info!(
            service,
            until_ms = until,
            "service throttled: its launches keep failing"
        );
    }
    for problem in &report.problems {
        tracing::warn!(problem, "cannot use a record");
    }
    if !report.is_quiet() {
        tracing::info!(
            placed = report.placed.len(),
            pending = report.unplaced.len(),
            closed = report.closed.len(),
            stopped = report.stopped.len(),
            started = report.started.iter().map(|(_, t)| t.len()).sum::<usize>(),
            conflicts = report.conflicts,
            forgotten = report.forgotten,
            took_ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
            "controller pass"
        );
    }
}
