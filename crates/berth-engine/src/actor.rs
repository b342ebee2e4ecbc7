//! The task actor: owns one task's state, performs the decision core's effects through the
//! [`Runtime`], and folds results and Docker events back in until the task has stopped.
//!
//! One actor per task; no lock is shared between tasks, and none is held across an `.await`. Effects
//! run concurrently as tracked tasks (a `tokio_util` `TaskTracker`) that report back on a channel;
//! the loop wakes only for an effect result, a Docker event, a command, a `startTimeout` timer or
//! cancellation — never to poll. Snapshots are published on a `watch` channel after every change;
//! status-change reports are derived from consecutive snapshots.
//!
//! Shutdown: [`run_task`] never returns while one of its effects runs. It waits for them when the
//! task has stopped, and when [`RunConfig::cancel`] is cancelled (the agent shutting down): then it
//! stops deciding and acting at once, waits up to [`RunConfig::shutdown_grace`] for the effects in
//! flight, folds in and saves what they reported, and returns the task as it is — its containers
//! keep running, for a restarted agent to adopt. Effects still running after the grace are
//! abandoned: their futures are dropped, so they make no further runtime call (a Docker request
//! already sent may still complete in Docker; adoption finds a container created that way by its
//! name). Dropping the `run_task` future abandons its effects the same way.
//!
//! Persist before acting: every state change is saved (through [`RunConfig::persist`]) before the
//! effects it leads to are performed. A save that fails performs nothing: the effects stay marked in
//! flight and held, the task is listed in [`EngineMetrics::degraded`] with the error, and the save
//! is retried on [`RunConfig::save_retry`]'s schedule (and at every result, event or command
//! meanwhile); the held effects run once a save succeeds. The actor never returns a finished task
//! whose final state is not durable, so the agent's cleanup never removes containers the store
//! still lists as running. Invariant: Docker is never more than the in-flight effects ahead of the
//! store, and every one of those is named in it (containers by their Docker name), so an agent
//! restarted at any moment adopts them instead of creating or starting anything again.
//!
//! Files: the actor writes the task's files through `berth_fs::write_atomic` (never deleting
//! any; the task cleanup removes the task directory): FireLens's router configuration before the
//! first create, and with [`RunConfig::container_metadata`] each container's metadata file
//! ([`crate::container_metadata`]) in the create effect before the create, then READY in the start
//! effect after the start is reported (and again after adoption when it is not READY).
//!
//! Restarts under a `restartPolicy` are decided by the decision core; the actor performs one as
//! `Runtime::start` of the same container (held by `BERTH_FAILPOINT_DELAY` at `before-restart`
//! in tests) and sends its `restarted` report; [`adopt`] finishes a restart a crash interrupted.
//!
//! Commands while a call is in flight: a `stop` or `kill` is received at any time. Volume
//! preparation (the Docker volume calls before the first decision) runs concurrently with the
//! command channel and cancellation: a command or cancellation drops it (the call in flight is
//! abandoned, nothing is created after it; a volume Docker created meanwhile is the cleanup's, as
//! every task volume is). Once the task's desired status is STOPPED (by a command, or because an
//! essential container stopped), pulls in flight are given up ([`Event::PullAbandoned`]: the
//! request to Docker is dropped, the container is marked STOPPED without running), so a stop never
//! waits for a slow pull.
//!
//! Images: with [`RunConfig::images`] the actor leases every image its containers name before it
//! subscribes, pulls or creates anything (waiting while image cleanup removes one, then pulling it
//! again per the pull behaviour), records the use, and at the end records the last use of a
//! finished task and drops the leases (see [`crate::image_use`]).
//!
//! A stop is done when Docker says so: after every stop call, failed or not, one inspect decides
//! ([`stop_container`]): not running is the exit, not found is a vanished container, anything else
//! is a failed stop that leaves the container RUNNING with its error, sent again on the decision
//! core's retry timer, at once when a `Stop` or `Kill` command comes, and at once after an
//! event-stream resync that finds it still running.
//!
//! Limits: subscribing, adoption (with the metadata files' refresh) and the re-sync after a broken
//! event stream are awaited inline, each call bounded by the runtime's timeouts, and are not
//! interrupted by commands or cancellation; they are seen as soon as those calls end. A create,
//! start or stop in flight is waited for (its answer names the container the cleanup must remove).

use crate::auth::{AuthError, RegistryAuth, RegistryAuthResolver};
use crate::cleanup::{Backoff, RetryPolicy};
use crate::container_metadata::{self, Paths as MetadataPaths, TaskFacts};
use crate::decide::{Action, Event, Options};
use crate::gpu;
use crate::pull::{self as pulls, AfterFailure, PullBehavior, PullRecord};
use crate::report::{self, PullPhase, Report, now_ms};
use crate::runtime::{PullProgress, Runtime, RuntimeError, RuntimeEvent};
use crate::secrets::{self, SecretProvider, TaskValues};
use crate::spec::{self, VolumePlan};
use crate::state::{Status, StopKind, TaskState};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

const MIN_RECONNECT_DELAY: Duration = Duration::from_millis(100);
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(5);

/// How long a cancelled actor waits for its effects in flight, by default.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Requests to a running task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Stop the task cleanly (reverse dependency order, stop timeouts).
    Stop { reason: String },
    /// Kill every running container now.
    Kill,
}

/// Settings of one task run.
#[derive(Clone)]
pub struct RunConfig {
    pub data_dir: PathBuf,
    pub options: Options,
    pub pull_behavior: PullBehavior,
    /// The pause container's image when the operator names one (obtained with the pull
    /// behaviour); None = berth's own, imported offline ([`crate::pause_image`]).
    pub pause_image: Option<String>,
    /// The images this agent pulled before (for `once`); updated after every successful pull.
    pub pull_record: Arc<dyn PullRecord>,
    /// Finds the registry login for each pull (see [`crate::auth`]). `None`: every pull is
    /// anonymous, and a container with `repositoryCredentials` cannot be pulled.
    pub registry_auth: Option<Arc<dyn RegistryAuthResolver>>,
    /// The Docker volume driver name of berth's volume plugin (EFS volumes use it).
    pub volume_plugin: String,
    /// Where containers reach the task metadata endpoint, when it is served.
    pub metadata: Option<spec::MetadataEndpoint>,
    /// Saves every state change before the actions it leads to (the agent's store).
    pub persist: Option<Arc<dyn Persist>>,
    /// How often a failed save is tried again. While saves fail the actor performs no effect
    /// (it holds the task: nothing Docker does may get ahead of what the store knows) and the
    /// task is listed in [`EngineMetrics::degraded`]. Default: 1 s doubling to 30 s.
    pub save_retry: RetryPolicy,
    /// The state comes from a store after a restart: adopt its containers from Docker first.
    pub resume: bool,
    /// Counters for `/metrics`.
    pub metrics: Arc<EngineMetrics>,
    /// Cancelled when the caller shuts down: the actor stops acting, waits for its effects in
    /// flight (up to `shutdown_grace`) and returns, leaving the containers running. Default: a
    /// token of its own that nobody cancels.
    pub cancel: CancellationToken,
    /// How long a cancelled actor waits for its effects in flight before abandoning them.
    pub shutdown_grace: Duration,
    /// Told the task's id once the actor's state reflects Docker: after adopting its containers
    /// (on resume) and preparing its volumes, before its first decision. The agent counts these
    /// to say when a restart's reconciliation is done.
    pub ready: Option<mpsc::UnboundedSender<String>>,
    /// Where `secrets` and `secretOptions` are read from. Default: no source (a task with secrets
    /// stops with a reason saying how to configure one).
    pub secrets: Arc<dyn SecretProvider>,
    /// The directory standing in for S3: `environmentFiles` ARN `arn:aws:s3:::<bucket>/<key>` is
    /// read from `<dir>/<bucket>/<key>`. None: only absolute paths can be read.
    pub environment_files_dir: Option<PathBuf>,
    /// The cluster, region and account FireLens's `ecs_cluster` and `ecs_task_arn` record fields
    /// show (the metadata endpoint's). Default: [`crate::Identity::default`].
    pub identity: crate::Identity,
    /// Write each container's metadata file and mount it (`--container-metadata`, ECS's
    /// `ECS_ENABLE_CONTAINER_METADATA`; see [`crate::container_metadata`]). None: no file.
    pub container_metadata: Option<crate::container_metadata::Settings>,
    /// Image tracking for image cleanup: the actor leases every image the task names from its
    /// start until it returns and records each use ([`crate::image_use`]). None (the default,
    /// and `berth run`): nothing is leased or recorded.
    pub images: Option<crate::image_use::ImageTracking>,
}

/// Counters the engine keeps for `/metrics` (shared by every task of an agent), and which tasks
/// are held because their state cannot be saved.
#[derive(Debug, Default)]
pub struct EngineMetrics {
    /// Docker event streams re-subscribed after breaking.
    pub event_stream_reconnects: std::sync::atomic::AtomicU64,
    /// Docker calls that failed (pull, create, start, stop, inspect during adoption).
    pub docker_errors: std::sync::atomic::AtomicU64,
    /// Saves of a task state that failed (each retry counts).
    pub save_failures: std::sync::atomic::AtomicU64,
    /// Tasks whose last save failed, with that error: each is held (no effect performed) until a
    /// save succeeds.
    degraded: std::sync::Mutex<std::collections::BTreeMap<String, String>>,
}

impl EngineMetrics {
    fn count(counter: &std::sync::atomic::AtomicU64) {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn degraded_map(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<String, String>> {
        // The map is consistent between statements; a panic elsewhere cannot corrupt it.
        self.degraded.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Tasks held because their state cannot be saved, each with the save's last error, in id
    /// order. Empty when every save succeeds.
    pub fn degraded(&self) -> Vec<(String, String)> {
        self.degraded_map()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    fn set_degraded(&self, task: &str, error: &str) {
        self.degraded_map()
            .insert(task.to_string(), error.to_string());
    }

    fn clear_degraded(&self, task: &str) {
        self.degraded_map().remove(task);
    }
}

/// Durable storage of task state, as the actor needs it.
pub trait Persist: Send + Sync + 'static {
    /// Save the state; durable when the future resolves `Ok`. The actor awaits it before it acts
    /// on the change, so an implementation may batch saves (the agent's store group-commits them).
    fn save(
        &self,
        state: &TaskState,
    ) -> futures_util::future::BoxFuture<'static, Result<(), String>>;
}

impl RunConfig {
    /// Defaults: no pulls up front, pull behaviour `default`, an in-memory pull record, no
    /// registry logins, the
    /// volume plugin named `berth`, never cancelled, a shutdown grace of
    /// [`DEFAULT_SHUTDOWN_GRACE`].
    pub fn new(data_dir: PathBuf) -> Self {
        RunConfig {
            data_dir,
            options: Options::default(),
            pull_behavior: PullBehavior::Default,
            pause_image: None,
            pull_record: Arc::new(pulls::MemoryPullRecord::default()),
            registry_auth: None,
            volume_plugin: spec::DEFAULT_VOLUME_PLUGIN.to_string(),
            metadata: None,
            persist: None,
            save_retry: RetryPolicy {
                first: Duration::from_secs(1),
                max: Duration::from_secs(30),
            },
            resume: false,
            metrics: Arc::new(EngineMetrics::default()),
            cancel: CancellationToken::new(),
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            ready: None,
            secrets: Arc::new(secrets::Providers::default()),
            environment_files_dir: None,
            identity: crate::Identity::default(),
            container_metadata: None,
            images: None,
        }
    }
}

/// The actor's effects: every one runs as a task of `tracker`, reports its result on `results`,
/// and stops at its next `.await` once `abandon` is cancelled.
struct Effects {
    tracker: TaskTracker,
    abandon: CancellationToken,
    results: mpsc::UnboundedSender<Event>,
    /// Cancelled once the task's desired status is STOPPED: pulls in flight give up.
    stopping: CancellationToken,
}

impl Effects {
    fn new(results: mpsc::UnboundedSender<Event>) -> Self {
        Effects {
            tracker: TaskTracker::new(),
            abandon: CancellationToken::new(),
            results,
            stopping: CancellationToken::new(),
        }
    }

    fn spawn(&self, effect: impl Future<Output = ()> + Send + 'static) {
        self.tracker
            .spawn(self.abandon.clone().run_until_cancelled_owned(effect));
    }

    /// Let no new effect start, wait up to `grace` for those in flight, then abandon the rest
    /// and wait until they are gone (dropped at their next `.await`). Returns how many were
    /// abandoned.
    async fn finish(&self, grace: Duration) -> usize {
        self.tracker.close();
        if tokio::time::timeout(grace, self.tracker.wait())
            .await
            .is_ok()
        {
            return 0;
        }
        let abandoned = self.tracker.len();
        self.abandon.cancel();
        self.tracker.wait().await;
        abandoned
    }
}

/// Where the actor sends what happens.
pub type Reports = mpsc::UnboundedSender<Report>;

/// Run a task to STOPPED, or until `config.cancel` is cancelled (see the module docs). Returns the
/// final state — STOPPED with nothing in flight ([`TaskState::is_finished`]) unless cancelled.
/// `snapshots` receives every published state.
pub async fn run_task<R: Runtime>(
    rt: Arc<R>,
    mut state: TaskState,
    config: RunConfig,
    reports: Reports,
    mut commands: mpsc::Receiver<Command>,
    snapshots: watch::Sender<TaskState>,
) -> TaskState {
    let (tx, mut rx) = mpsc::unbounded_channel::<Event>();
    let mut published: Option<TaskState> = None;
    let mut commands_open = true;
    if config.cancel.is_cancelled() {
        return state;
    }
    let effects = Effects::new(tx);
    // Should this future be dropped, its effects stop too.
    let _abandon_on_drop = effects.abandon.clone().drop_guard();

    // A task stored as finished (waiting for its cleanup when the agent stopped) needs nothing of
    // Docker: no event stream, no adoption, no volumes. With a thousand of them in the store this
    // keeps a restart's reconciliation to the tasks that still run.
    if config.resume && state.is_finished() {
        if let Some(ready) = &config.ready {
            let _ = ready.send(state.id.clone());
        }
        publish(&state, &mut published, &reports, &snapshots);
        return state;
    }
    // Hold every image the task names before anything is pulled or created, so image cleanup
    // never removes one under it (see `crate::image_use`).
    let image_leases = hold_images(&config, &state).await;
    // Subscribe before anything is created, so no event of this task can be missed.
    let mut events = subscribe(&*rt, &state.id).await;
    if config.resume {
        adopt(&*rt, &mut state).await;
    }
    // A kill received but not yet performed (the kills are sent once the state is saved).
    let mut kill_pending = false;
    let plans = spec::plan_volumes(&state, &config.data_dir, &config.volume_plugin);
    // The volumes are provided while commands are received: a stop of a task whose volume call
    // hangs (a slow Engine, a volume driver that does not answer) ends it now, not after the call.
    let provided = {
        let task_id = state.id.clone();
        let provide = provide_volumes(&*rt, &task_id, &config.data_dir, &plans);
        tokio::pin!(provide);
        loop {
            tokio::select! {
                failures = &mut provide => break Some(failures),
                () = config.cancel.cancelled() => break None,
                cmd = commands.recv(), if commands_open => match cmd {
                    Some(cmd) => {
                        kill_pending |= receive(&mut state, cmd);
                        break None;
                    }
                    None => commands_open = false,
                },
            }
        }
    };
    match provided {
        Some(failures) => stop_volume_users(&mut state, &failures),
        None if config.cancel.is_cancelled() => {}
        None => {
            tracing::info!(task = %state.id, "task stopped while its volumes were being prepared; the volume call in flight is abandoned");
        }
    }
    let volumes = Arc::new(plans);
    // A task that is stopping creates nothing: no secret to read, no log router to configure.
    let stopping = state.desired == Status::Stopped || config.cancel.is_cancelled();
    let values = if stopping {
        TaskValues::default()
    } else {
        read_secrets_and_environment_files(&mut state, &config)
    };
    if !stopping {
        prepare_firelens(&mut state, &config);
    }
    if config.resume {
        refresh_metadata_files(&*rt, &state, &config, &volumes, &values).await;
    }
    if let Some(ready) = &config.ready {
        let _ = ready.send(state.id.clone());
    }
    let mut saved: Option<TaskState> = None;
    let mut reconnect_delay = MIN_RECONNECT_DELAY;
    // Effects decided but not yet performed because the state they follow from is not durable.
    let mut held: Vec<Action> = Vec::new();
    let mut save_backoff: Option<Backoff> = None;

    loop {
        if config.cancel.is_cancelled() {
            break;
        }
        let now = now_ms();
        let (actions, wake_at) = state.step(config.options, now);
        held.extend(actions);
        if state.desired == Status::Stopped {
            // No container will be created any more: a pull in flight is given up.
            effects.stopping.cancel();
        }
        // Persist before acting: a restarted agent must know every container name it may have
        // created and every stop it decided. A failed save performs nothing: the effects wait
        // (marked in flight, so `step` does not decide them twice) until a retry succeeds.
        let retry_in = match save(&config, &state, &mut saved).await {
            Ok(()) => {
                if save_backoff.take().is_some() {
                    config.metrics.clear_degraded(&state.id);
                    tracing::info!(task = %state.id, "the task state is saved again; the task goes on");
                }
                for action in held.drain(..) {
                    spawn_effect(
                        &rt, &config, &state, &volumes, &values, action, &reports, &effects,
                    );
                }
                if std::mem::take(&mut kill_pending) {
                    // Saved before the kills, like every effect; while saves fail the kill
                    // waits (the stop decided with it is held too).
                    for c in &state.containers {
                        if let (Some(id), Status::Running) = (&c.docker_id, c.known) {
                            let (rt, id) = (rt.clone(), id.clone());
                            effects.spawn(async move {
                                let _ = rt.kill(&id).await;
                            });
                        }
                    }
                }
                None
            }
            Err(e) => {
                EngineMetrics::count(&config.metrics.save_failures);
                config.metrics.set_degraded(&state.id, &e);
                let delay = save_backoff
                    .get_or_insert_with(|| config.save_retry.backoff())
                    .next_delay();
                tracing::error!(task = %state.id, error = %e, held = held.len(), retry_in = ?delay, "cannot save the task state; the task is held (no Docker call) until a save succeeds");
                Some(delay)
            }
        };
        publish(&state, &mut published, &reports, &snapshots);
        if state.is_finished() && retry_in.is_none() {
            break;
        }
        let wake_at = match retry_in {
            Some(d) => {
                let retry_at =
                    now_ms().saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
                Some(wake_at.map_or(retry_at, |t| t.min(retry_at)))
            }
            None => wake_at,
        };
        let sleep = async {
            match wake_at {
                Some(t) => {
                    let ms = u64::try_from((t - now_ms()).max(0)).unwrap_or(0);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            () = config.cancel.cancelled() => {}
            Some(ev) = rx.recv() => fold_result(&config, &mut state, &ev),
            ev = next_event(&mut events, reconnect_delay) => match ev {
                Some(ev) => {
                    reconnect_delay = MIN_RECONNECT_DELAY;
                    if let Some(ev) = translate(&state, ev) {
                        state.apply(&ev);
                        if let Some(why) = after_unexpected_die(&*rt, &state, &ev).await {
                            state.apply(&why);
                        }
                    }
                }
                // The stream broke (Docker restarted, connection lost): wait, then subscribe again
                // and re-sync from `inspect`, with a growing delay while it keeps failing.
                None if events.is_some() => {
                    tracing::warn!(task = %state.id, retry_in = ?reconnect_delay, "docker event stream ended");
                    events = None;
                }
                None => {
                    EngineMetrics::count(&config.metrics.event_stream_reconnects);
                    events = subscribe(&*rt, &state.id).await;
                    resync(&*rt, &mut state).await;
                    reconnect_delay = (reconnect_delay * 2).min(MAX_RECONNECT_DELAY);
                    tracing::info!(task = %state.id, "re-subscribed to docker events and re-synced");
                }
            },
            cmd = commands.recv(), if commands_open => match cmd {
                Some(cmd) => kill_pending |= receive(&mut state, cmd),
                None => commands_open = false,
            },
            () = sleep => {}
        }
    }
    let abandoned = effects.finish(config.shutdown_grace).await;
    if abandoned > 0 {
        tracing::warn!(task = %state.id, abandoned, grace = ?config.shutdown_grace, "effects still in flight after the shutdown grace were abandoned");
    }
    if !state.is_finished() {
        // Cancelled: take in what the finished effects reported (the id of a container created
        // just now, say), save it for the next agent, decide nothing more.
        while let Ok(ev) = rx.try_recv() {
            fold_result(&config, &mut state, &ev);
        }
        if let Err(e) = save(&config, &state, &mut saved).await {
            tracing::error!(task = %state.id, error = %e, "cannot save the task state at shutdown; the next agent adopts its containers by name");
        }
        publish(&state, &mut published, &reports, &snapshots);
        tracing::info!(task = %state.id, known = %state.known(), "task actor cancelled; its containers keep running");
    }
    release_images(&config, &state, image_leases).await;
    state
}

/// Take in a command: the task's desired status becomes STOPPED. True for a kill, whose kills
/// the loop sends once the state is saved.
fn receive(state: &mut TaskState, cmd: Command) -> bool {
    match cmd {
        Command::Stop { reason } => {
            state.request_stop(&reason, StopKind::Requested);
            // Asked again while a stop keeps failing: send it now, the delay from its start.
            if state.retry_stops_now() {
                tracing::info!(task = %state.id, "stop asked again: the failed stops are sent again now");
            }
            false
        }
        Command::Kill => {
            state.request_stop("task killed", StopKind::Requested);
            state.retry_stops_now();
            true
        }
    }
}

/// The images a task's containers name (its pause container's excepted: cleanup never removes a
/// pause image), each once.
fn task_images(state: &TaskState) -> Vec<String> {
    let mut images: Vec<String> = Vec::new();
    for i in 0..state.containers.len() {
        if state.is_pause(i) {
            continue;
        }
        let image = &state.def(i).image;
        if !images.contains(image) {
            images.push(image.clone());
        }
    }
    images
}

/// Take a lease on each of the task's images (waiting while cleanup removes one) and record the
/// use. Nothing when the agent tracks no images.
async fn hold_images(config: &RunConfig, state: &TaskState) -> Vec<crate::image_use::Lease> {
    let Some(tracking) = &config.images else {
        return Vec::new();
    };
    let mut leases = Vec::new();
    for image in task_images(state) {
        leases.push(tracking.leases.acquire(&image).await);
        record_use(tracking, &image, &state.id).await;
    }
    leases
}

/// Record a use now, off the async threads (the store commits, an fsync); a failure is logged.
async fn record_use(tracking: &crate::image_use::ImageTracking, image: &str, task: &str) {
    let (records, image, task) = (
        tracking.records.clone(),
        image.to_string(),
        task.to_string(),
    );
    let at = now_ms();
    let outcome = tokio::task::spawn_blocking(move || {
        records
            .used(&image, &task, at)
            .map_err(|e| format!("{image}: {e}"))
    })
    .await;
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "cannot record the image's use"),
        Err(e) => tracing::warn!(error = %e, "cannot record the image's use"),
    }
}

/// A finished task stops using its images now (their last use); the leases go with it.
async fn release_images(
    config: &RunConfig,
    state: &TaskState,
    leases: Vec<crate::image_use::Lease>,
) {
    if let (Some(tracking), true) = (&config.images, state.is_finished()) {
        for image in task_images(state) {
            record_use(tracking, &image, &state.id).await;
        }
    }
    drop(leases);
}

/// Fold an effect's result into the state, counting Docker failures.
fn fold_result(config: &RunConfig, state: &mut TaskState, ev: &Event) {
    if matches!(
        ev,
        Event::PullFailed { .. }
            | Event::CreateFailed { .. }
            | Event::StartFailed { .. }
            | Event::StopFailed { .. }
            | Event::RestartFailed { .. }
    ) {
        EngineMetrics::count(&config.metrics.docker_errors);
    }
    state.apply(ev);
}

/// Save the state through `config.persist` unless it is what was saved last (only a save that
/// succeeded counts as saved).
async fn save(
    config: &RunConfig,
    state: &TaskState,
    saved: &mut Option<TaskState>,
) -> Result<(), String> {
    if let Some(p) = &config.persist
        && saved.as_ref() != Some(state)
    {
        p.save(state).await?;
        *saved = Some(state.clone());
    }
    Ok(())
}

fn publish(
    state: &TaskState,
    published: &mut Option<TaskState>,
    reports: &Reports,
    snapshots: &watch::Sender<TaskState>,
) {
    if published.as_ref() == Some(state) {
        return;
    }
    for r in report::changes(published.as_ref(), state, now_ms()) {
        let _ = reports.send(r);
    }
    snapshots.send_replace(state.clone());
    *published = Some(state.clone());
}

/// Subscribe to the task's Docker events (the request is made when the stream is first polled).
async fn subscribe<R: Runtime>(rt: &R, task_id: &str) -> Option<BoxStream<'static, RuntimeEvent>> {
    match rt.events(task_id).await {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(task = %task_id, error = %e, "cannot subscribe to docker events");
            None
        }
    }
}

/// The next Docker event; `None` when the stream ended, or — when there is no stream — after
/// `delay`, as the signal to subscribe again.
async fn next_event(
    events: &mut Option<BoxStream<'static, RuntimeEvent>>,
    delay: Duration,
) -> Option<RuntimeEvent> {
    match events {
        Some(s) => s.next().await,
        None => {
            tokio::time::sleep(delay).await;
            None
        }
    }
}

/// After a restart: forget operations that were in flight when the agent died, find each
/// container in Docker (by id, or by the name decided before `create`), and raise known statuses
/// from `inspect`; containers that vanished are STOPPED with a reason, and a stop that failed
/// before the restart is sent again at once. Nothing is created twice:
/// a container whose create may have happened is found by its name.
///
/// Restarts: a restart decided and saved before the crash (`restart_owed`) happened when Docker's
/// start time is not before it was decided; otherwise it is still owed and the next decision
/// performs it, uncounted. A container that exited while the agent was down is judged by the
/// restart rule at the next decision, like any exit. So an agent restart neither loses nor
/// repeats a restart.
pub async fn adopt<R: Runtime>(rt: &R, state: &mut TaskState) {
    for i in 0..state.containers.len() {
        let c = &mut state.containers[i];
        c.in_flight = None;
        let restart_owed = c.restart_owed;
        let restart_decided_at = c.last_restart_at;
        if c.known == Status::Stopped {
            continue;
        }
        // A stop decided before the crash is sent again.
        c.stop_sent = false;
        let target = c.docker_id.clone().unwrap_or_else(|| c.docker_name.clone());
        let had_id = c.docker_id.is_some();
        let name = c.name.clone();
        match rt.inspect(&target).await {
            Ok(info) => {
                let at = now_ms();
                if !had_id {
                    state.apply(&Event::Created {
                        container: i,
                        docker_id: info.id.clone(),
                        at,
                    });
                }
                if restart_owed
                    && let (Some(started), Some(decided)) = (info.started_at, restart_decided_at)
                    && started >= decided
                {
                    state.apply(&Event::Restarted {
                        container: i,
                        at: started,
                    });
                }
                if info.running {
                    state.apply(&Event::Started {
                        container: i,
                        at: info.started_at.unwrap_or(at),
                    });
                    // A stop that kept failing before the restart is sent again at once.
                    state.retry_stop_now(i, false);
                    if let Some(h) = info.health {
                        state.apply(&Event::Health {
                            container: i,
                            health: h,
                        });
                    }
                } else if info.finished_at.is_some() {
                    state.apply(&Event::Exited {
                        container: i,
                        exit_code: info.exit_code,
                        started_at: info.started_at,
                        at: info.finished_at.unwrap_or(at),
                    });
                    if let Some(reason) = info.exit_reason() {
                        state.apply(&Event::ExitReason {
                            container: i,
                            reason,
                        });
                    }
                }
            }
            Err(RuntimeError::NotFound(_)) if had_id => state.apply(&Event::Vanished {
                container: i,
                at: now_ms(),
                reason: "container vanished while the agent was down".into(),
            }),
            // Never created (the crash came before `create`): the engine creates it now.
            Err(RuntimeError::NotFound(_)) => {}
            Err(e) => {
                tracing::warn!(task = %state.id, container = %name, error = %e, "cannot inspect while adopting");
            }
        }
    }
}

/// Raise known statuses from `inspect` after the event stream broke (never lowering them): a
/// container that no longer runs is STOPPED, one that still runs although its stop failed is
/// stopped again at once.
async fn resync<R: Runtime>(rt: &R, state: &mut TaskState) {
    for i in 0..state.containers.len() {
        let c = &state.containers[i];
        let Some(id) = c.docker_id.clone() else {
            continue;
        };
        if c.known == Status::Stopped {
            continue;
        }
        let ev = match rt.inspect(&id).await {
            Ok(info) if info.running => {
                // Still running although a stop failed: the Engine is back, send it again now.
                if state.retry_stop_now(i, false) {
                    tracing::info!(task = %state.id, container = %state.containers[i].name, "still running after a failed stop; stopping it again");
                }
                info.started_at
                    .map(|at| Event::Started { container: i, at })
            }
            Ok(info) if info.exit_code.is_some() || info.finished_at.is_some() => {
                state.apply(&Event::Exited {
                    container: i,
                    exit_code: info.exit_code,
                    started_at: info.started_at,
                    at: info.finished_at.unwrap_or_else(now_ms),
                });
                info.exit_reason().map(|reason| Event::ExitReason {
                    container: i,
                    reason,
                })
            }
            Ok(_) => None,
            Err(RuntimeError::NotFound(_)) => Some(Event::Vanished {
                container: i,
                at: now_ms(),
                reason: VANISHED_REASON.into(),
            }),
            Err(e) => {
                tracing::warn!(task = %state.id, container = %state.containers[i].name, error = %e, "inspect failed during resync");
                None
            }
        };
        if let Some(ev) = ev {
            state.apply(&ev);
        }
    }
}

/// Map a Docker event (by container id) to an engine event (by container index).
fn translate(state: &TaskState, ev: RuntimeEvent) -> Option<Event> {
    Some(match ev {
        RuntimeEvent::Start { id, at } => Event::Started {
            container: state.index_of_docker_id(&id)?,
            at,
        },
        RuntimeEvent::Die { id, exit_code, at } => Event::Exited {
            container: state.index_of_docker_id(&id)?,
            exit_code,
            started_at: None,
            at,
        },
        RuntimeEvent::Health { id, health } => Event::Health {
            container: state.index_of_docker_id(&id)?,
            health,
        },
        RuntimeEvent::Destroy { id, at } => {
            let i = state.index_of_docker_id(&id)?;
            Event::Vanished {
                container: i,
                at,
                reason: VANISHED_REASON.into(),
            }
        }
    })
}

/// After a `die` berth did not cause (no stop sent), one inspect says why it died. Is Docker
/// removing the container (`docker rm -f` behind berth's back)? Its `destroy` event may come only
/// after the task has finished, so not found, or marked as being removed, is a vanished container
/// (the reason says so). Otherwise, an OOM kill or a Docker state error becomes the container's
/// reason, as ECS gives it ([`crate::runtime::ContainerInfo::exit_reason`]); anything else is an ordinary exit.
async fn after_unexpected_die<R: Runtime>(rt: &R, state: &TaskState, ev: &Event) -> Option<Event> {
    let Event::Exited { container, at, .. } = ev else {
        return None;
    };
    let c = &state.containers[*container];
    if c.stop_asked() {
        return None;
    }
    let id = c.docker_id.as_deref()?;
    let removed = match rt.inspect(id).await {
        Ok(info) if !info.removing => {
            return info.exit_reason().map(|reason| Event::ExitReason {
                container: *container,
                reason,
            });
        }
        Ok(_) | Err(RuntimeError::NotFound(_)) => true,
        Err(_) => false,
    };
    removed.then(|| Event::Vanished {
        container: *container,
        at: *at,
        reason: VANISHED_REASON.into(),
    })
}

/// The reason of a container removed from Docker by someone else.
const VANISHED_REASON: &str = "container removed from Docker behind berth's back";

/// The metadata file's task facts and paths for container `i`, when the option is on (the pause
/// container, the agent's own, gets none, as ECS's internal containers get none).
fn metadata_file(
    state: &TaskState,
    config: &RunConfig,
    i: usize,
) -> Option<(TaskFacts, MetadataPaths)> {
    let settings = config.container_metadata.as_ref()?;
    if state.is_pause(i) {
        return None;
    }
    Some((
        TaskFacts::new(&config.identity, settings, state),
        MetadataPaths::new(&config.data_dir, &state.id, &state.containers[i].name),
    ))
}

/// Container `i`'s network mode as Docker's `HostConfig.NetworkMode` shows it (the READY file
/// names it when Docker lists no network, as for a container joined to the pause container's):
/// the mode it is created with, where Docker keeps a joined container's target as
/// `container:<id>`.
fn container_network_mode(
    state: &TaskState,
    i: usize,
    volumes: &[(String, VolumePlan)],
    values: &TaskValues,
) -> String {
    let mode =
        spec::container_spec_with_values(state, i, volumes, None, values.container(i)).network_mode;
    let pause = state.pause_index().map(|p| &state.containers[p]);
    match pause {
        Some(p) if mode == format!("container:{}", p.docker_name) => p
            .docker_id
            .as_ref()
            .map_or(mode, |id| format!("container:{id}")),
        _ => mode,
    }
}

/// Create the container's metadata directory and replace its file (a temporary file renamed over
/// it, through berth-fs), off the async threads.
async fn write_metadata_file(paths: MetadataPaths, text: Vec<u8>) -> Result<(), String> {
    let dir = paths.dir.clone();
    tokio::task::spawn_blocking(move || {
        std::fs::create_dir_all(&paths.dir)
            .map_err(|e| format!("cannot create {}: {e}", paths.dir.display()))?;
        berth_fs::write_atomic(&paths.file, &text).map_err(|e| e.to_string())
    })
    .await
    .unwrap_or_else(|e| Err(format!("writing in {}: {e}", dir.display())))
}

/// What the READY metadata file of one container needs besides Docker's answers.
struct ReadyFile {
    facts: TaskFacts,
    paths: MetadataPaths,
    container: String,
    image: String,
    network_mode: String,
}

impl ReadyFile {
    /// Inspect the running container and write its READY file. Not running (it exited already),
    /// or a failed inspect: nothing is written (ECS's rule), with a warning for a failure.
    async fn write<R: Runtime>(self, rt: &R, id: &str) {
        let facts = match rt.inspect(id).await {
            Ok(info) if info.running => info,
            Ok(_) => return,
            Err(e) => {
                tracing::warn!(task = %self.facts.task_id, container = %self.container, error = %e, "cannot inspect the container for its metadata file");
                return;
            }
        };
        let details = match rt.inspect_details(id).await {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(task = %self.facts.task_id, container = %self.container, error = %e, "cannot inspect the container for its metadata file");
                return;
            }
        };
        let docker = container_metadata::DockerFacts {
            id: facts.id,
            // Docker's own form of the name, with the leading slash inspect gives.
            name: format!("/{}", facts.name),
            image_name: self.image,
            network_mode: self.network_mode,
            details,
        };
        let text = container_metadata::ready(&self.facts, &self.container, &docker);
        if let Err(e) = write_metadata_file(self.paths, text).await {
            tracing::warn!(task = %self.facts.task_id, container = %self.container, error = %e, "cannot write the container metadata file");
        }
    }
}

/// After a restart: a running container whose metadata file was written (its directory exists:
/// it was created with the mount) but is not READY gets its READY file now (the agent may have
/// stopped between the start and the write).
async fn refresh_metadata_files<R: Runtime>(
    rt: &R,
    state: &TaskState,
    config: &RunConfig,
    volumes: &[(String, VolumePlan)],
    values: &TaskValues,
) {
    for i in 0..state.containers.len() {
        let c = &state.containers[i];
        let (Some(id), Status::Running) = (&c.docker_id, c.known) else {
            continue;
        };
        let Some((facts, paths)) = metadata_file(state, config, i) else {
            continue;
        };
        if !paths.dir.is_dir()
            || std::fs::read(&paths.file).is_ok_and(|t| container_metadata::is_ready(&t))
        {
            continue;
        }
        let ready = ReadyFile {
            facts,
            paths,
            container: c.name.clone(),
            image: state.def(i).image.clone(),
            network_mode: container_network_mode(state, i, volumes, values),
        };
        ready.write(rt, id).await;
    }
}

/// Write the log router's configuration and create its socket directory, when the task has a
/// router whose containers are not created yet (an adopted router keeps what it has). A failure
/// stops the router without running it (and so, through their `START` dependency, the containers
/// that log to it) with a reason naming the file.
fn prepare_firelens(state: &mut TaskState, config: &RunConfig) {
    let Some(r) = berth_model::firelens::router(&state.definition) else {
        return;
    };
    let i = r;
    if state.containers[i].docker_id.is_some() || state.containers[i].known >= Status::Created {
        return;
    }
    let paths = crate::firelens::Paths::new(&config.data_dir, &state.id);
    let identity = crate::firelens::TaskIdentity::new(&config.identity, &state.id);
    let result = paths.check().and_then(|()| {
        let text = crate::firelens::generate(&state.definition, &identity).unwrap_or_default();
        let owner = crate::firelens::socket_owner(state.def(i).user.as_deref())?;
        std::fs::create_dir_all(&paths.config_dir)
            .and_then(|()| std::fs::create_dir_all(&paths.socket_dir))
            .map_err(|e| format!("cannot create {}: {e}", paths.dir.display()))?;
        if let Some((uid, gid)) = owner {
            // ECS: the router's user must be able to create its socket there.
            std::os::unix::fs::chown(&paths.socket_dir, Some(uid), gid).map_err(|e| {
                format!(
                    "cannot give {} to user {uid}: {e}",
                    paths.socket_dir.display()
                )
            })?;
        }
        berth_fs::write_atomic(&paths.config_file, text.as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", paths.config_file.display()))
    });
    if let Err(message) = result {
        tracing::warn!(task = %state.id, %message, "firelens");
        state.begin(
            &Action::MarkStopped {
                container: i,
                reason: Some(format!("FireLens: {message}")),
                exit_code: None,
            },
            now_ms(),
        );
    }
}

/// Create the task's scratch directories and Docker volumes as `plans` say. Returns the volumes
/// that cannot be provided, each with its reason (see [`stop_volume_users`]). Borrows no task
/// state, so the actor receives commands while it runs.
async fn provide_volumes<R: Runtime>(
    rt: &R,
    task_id: &str,
    data_dir: &std::path::Path,
    plans: &[(String, VolumePlan)],
) -> Vec<(String, String)> {
    let mut failures = Vec::new();
    for (name, plan) in plans {
        let failure = match plan {
            VolumePlan::HostPath(path) => {
                let scratch = spec::scratch_dir(data_dir, task_id, name);
                if *path == scratch {
                    std::fs::create_dir_all(path)
                        .err()
                        .map(|e| format!("volume {name}: cannot create {}: {e}", path.display()))
                } else {
                    None
                }
            }
            VolumePlan::TaskVolume(spec) => rt.ensure_volume(spec).await.err().map(|e| {
                format!(
                    "volume {name}: cannot create docker volume {}: {e}",
                    spec.name
                )
            }),
            VolumePlan::SharedVolume {
                spec,
                autoprovision,
            } => match rt.volume_exists(&spec.name).await {
                Ok(true) => None,
                Ok(false) if *autoprovision => rt.ensure_volume(spec).await.err().map(|e| {
                    format!(
                        "volume {name}: cannot create docker volume {}: {e}",
                        spec.name
                    )
                }),
                Ok(false) => Some(format!(
                    "volume {name}: shared docker volume {} does not exist and autoprovision is false",
                    spec.name
                )),
                Err(e) => Some(format!("volume {name}: {e}")),
            },
            VolumePlan::Unsupported(why) => Some(why.clone()),
        };
        if let Some(message) = failure {
            failures.push((name.clone(), message));
        }
    }
    failures
}

/// A volume that cannot be provided stops every container that mounts it (and so the task, if
/// one of them is essential), with the volume's reason.
fn stop_volume_users(state: &mut TaskState, failures: &[(String, String)]) {
    let now = now_ms();
    for (name, message) in failures {
        for i in 0..state.containers.len() {
            if state
                .def(i)
                .mount_points
                .iter()
                .any(|m| &m.source_volume == name)
            {
                state.begin(
                    &Action::MarkStopped {
                        container: i,
                        reason: Some(message.clone()),
                        exit_code: None,
                    },
                    now,
                );
            }
        }
    }
}

/// Read, once and before anything is pulled or created, the secrets and environment files of every
/// container not created yet (ECS's secret and environment-file task resources). The values stay
/// in memory, for the create calls. A failure stops the task with ECS's
/// `ResourceInitializationError` reason: every container not created yet is marked STOPPED with it,
/// so none is created.
fn read_secrets_and_environment_files(state: &mut TaskState, config: &RunConfig) -> TaskValues {
    let needed = state.containers.iter().enumerate().any(|(i, _)| {
        let def = state.def(i);
        !def.secrets.is_empty()
            || !def.environment_files.is_empty()
            || !def.log_secret_options().is_empty()
    });
    if !needed {
        return TaskValues::default();
    }
    match secrets::resolve_task(
        state,
        &*config.secrets,
        config.environment_files_dir.as_deref(),
    ) {
        Ok(values) => values,
        Err(reason) => {
            // The reason names secrets and places, never a value.
            tracing::warn!(task = %state.id, %reason, "task stopped: secrets or environment files cannot be read");
            state.request_stop(&reason, StopKind::Failed);
            let now = now_ms();
            for i in 0..state.containers.len() {
                let c = &state.containers[i];
                if c.docker_id.is_none() && c.known < Status::Created {
                    state.begin(
                        &Action::MarkStopped {
                            container: i,
                            reason: Some(reason.clone()),
                            exit_code: None,
                        },
                        now,
                    );
                }
            }
            TaskValues::default()
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn spawn_effect<R: Runtime>(
    rt: &Arc<R>,
    config: &RunConfig,
    state: &TaskState,
    volumes: &Arc<Vec<(String, VolumePlan)>>,
    values: &TaskValues,
    action: Action,
    reports: &Reports,
    effects: &Effects,
) {
    let rt = rt.clone();
    let tx = effects.results.clone();
    match action {
        Action::Pull(i) if state.is_pause(i) && config.pause_image.is_none() => {
            effects.spawn(async move {
                let ev = match crate::pause_image::ensure_pause_image(&*rt).await {
                    Ok(_) => Event::Pulled {
                        container: i,
                        at: now_ms(),
                    },
                    Err(e) => Event::PullFailed {
                        container: i,
                        at: now_ms(),
                        message: format!(
                            "CannotPullContainerError: cannot provision berth's pause image: {e}"
                        ),
                        stop_task: true,
                    },
                };
                let _ = tx.send(ev);
            });
        }
        Action::Pull(i) => {
            let image = match &config.pause_image {
                Some(own) if state.is_pause(i) => own.clone(),
                _ => state.def(i).image.clone(),
            };
            let reports = reports.clone();
            let (task, container) = (state.id.clone(), state.containers[i].name.clone());
            let (behavior, record) = (config.pull_behavior, config.pull_record.clone());
            let resolver = config.registry_auth.clone();
            let parameter = state
                .def(i)
                .repository_credentials
                .as_ref()
                .map(|c| c.credentials_parameter.clone());
            let stopping = effects.stopping.clone();
            effects.spawn(async move {
                let report = |phase, reason: Option<String>| {
                    let _ = reports.send(Report::Pull {
                        time: report::rfc3339(now_ms()),
                        task: task.clone(),
                        container: container.clone(),
                        image: image.clone(),
                        phase,
                        reason,
                    });
                };
                let progress = |p: PullProgress| {
                    let _ = reports.send(Report::PullProgress {
                        task: task.clone(),
                        container: container.clone(),
                        image: image.clone(),
                        layers: p.layers,
                        layers_done: p.layers_done,
                        bytes: p.bytes,
                        bytes_total: p.bytes_total,
                    });
                };
                let login = Login {
                    resolver: resolver.as_deref(),
                    parameter: parameter.as_deref(),
                };
                let pull = pull_image(
                    &*rt, &image, behavior, &*record, login, i, &progress, &report,
                );
                // A stop while the pull is in flight gives it up: dropping the pull drops the
                // request to Docker (a pull merged with another task's goes on for that one).
                let ev = tokio::select! {
                    ev = pull => ev,
                    () = stopping.cancelled() => {
                        report(PullPhase::Failed, Some(PULL_ABANDONED.to_string()));
                        Event::PullAbandoned { container: i, at: now_ms() }
                    }
                };
                let _ = tx.send(ev);
            });
        }
        Action::Create(i) => {
            let mut spec = spec::container_spec_with_values(
                state,
                i,
                volumes,
                config.metadata.as_ref(),
                values.container(i),
            );
            crate::firelens::apply(
                &mut spec,
                &state.definition,
                i,
                &state.id,
                &crate::firelens::Paths::new(&config.data_dir, &state.id),
                values,
            );
            if let Some(own) = config.pause_image.as_ref().filter(|_| state.is_pause(i)) {
                spec.image = own.clone();
            }
            spec.labels.insert(
                spec::LABEL_DATA_DIR.to_string(),
                config.data_dir.display().to_string(),
            );
            let name = state.containers[i].name.clone();
            let gpu = state.def(i).gpu;
            let metadata_file = metadata_file(state, config, i).map(|(facts, paths)| {
                let text = container_metadata::initial(&facts, &name);
                (facts.task_id, paths, text)
            });
            effects.spawn(async move {
                // ECS: written before the create; one that cannot be written is a warning, and
                // the container is created without the mount and the variable.
                if let Some((task, paths, text)) = metadata_file {
                    match write_metadata_file(paths.clone(), text).await {
                        Ok(()) => container_metadata::apply(&mut spec, &paths, &task, &name),
                        Err(e) => {
                            tracing::warn!(%task, container = %name, error = %e, "cannot write the container metadata file; the container gets none");
                        }
                    }
                }
                crate::failpoint::hit("before-create", &name);
                let created = rt.create(&spec).await;
                crate::failpoint::hit("after-create", &name);
                let ev = match created {
                    Ok(docker_id) => Event::Created {
                        container: i,
                        docker_id,
                        at: now_ms(),
                    },
                    Err(e) => Event::CreateFailed {
                        container: i,
                        at: now_ms(),
                        message: gpu::failure_reason(
                            "CannotCreateContainerError",
                            gpu,
                            &e.to_string(),
                        ),
                    },
                };
                let _ = tx.send(ev);
            });
        }
        Action::Start(i) => {
            let id = match docker_id_for(state, i, NeedsId::Start) {
                Ok(id) => id,
                Err(failure) => {
                    let _ = tx.send(failure);
                    return;
                }
            };
            let name = state.containers[i].name.clone();
            let gpu = state.def(i).gpu;
            let ready = metadata_file(state, config, i).map(|(facts, paths)| ReadyFile {
                facts,
                paths,
                container: name.clone(),
                image: state.def(i).image.clone(),
                network_mode: container_network_mode(state, i, volumes, values),
            });
            effects.spawn(async move {
                let started = rt.start(&id).await;
                crate::failpoint::hit("after-start", &name);
                let ok = started.is_ok();
                let ev = match started {
                    Ok(()) => Event::Started {
                        container: i,
                        at: now_ms(),
                    },
                    Err(e) => Event::StartFailed {
                        container: i,
                        at: now_ms(),
                        message: gpu::failure_reason(
                            "CannotStartContainerError",
                            gpu,
                            &e.to_string(),
                        ),
                    },
                };
                let _ = tx.send(ev);
                // After the start is reported, as ECS does it (in the background, not delaying
                // the task); still an effect, so the task's cleanup waits for it.
                if let Some(ready) = ready.filter(|_| ok) {
                    ready.write(&*rt, &id).await;
                }
            });
        }
        Action::Restart(i) => {
            let id = match docker_id_for(state, i, NeedsId::Restart) {
                Ok(id) => id,
                Err(failure) => {
                    let _ = tx.send(failure);
                    return;
                }
            };
            let c = &state.containers[i];
            let (name, count, exit_code) =
                (c.name.clone(), c.restart_count, c.last_restart_exit_code);
            let task = state.id.clone();
            let reports = reports.clone();
            effects.spawn(async move {
                // The restart is decided, counted and saved: a crash here leaves it owed.
                crate::failpoint::hit("before-restart", &name);
                if let Some(hold) = crate::failpoint::delay("before-restart", &name) {
                    tokio::time::sleep(hold).await;
                }
                let started = rt.start(&id).await;
                let ev = match started {
                    Ok(()) => {
                        tracing::info!(task = %task, container = %name, restart_count = count, exit_code = ?exit_code, "restarted container under its restart policy");
                        let at = now_ms();
                        let _ = reports.send(Report::Restarted {
                            time: report::rfc3339(at),
                            task,
                            container: name,
                            restart_count: count,
                            exit_code,
                            docker_id: id,
                        });
                        Event::Restarted { container: i, at }
                    }
                    Err(e) => Event::RestartFailed {
                        container: i,
                        at: now_ms(),
                        message: format!("CannotStartContainerError: restart failed: {e}"),
                    },
                };
                let _ = tx.send(ev);
            });
        }
        Action::Stop {
            container: i,
            timeout_secs,
        } => {
            let target = stop_target(state, i);
            effects.spawn(async move {
                let ev = stop_container(&*rt, &target, i, timeout_secs).await;
                let _ = tx.send(ev);
            });
        }
        Action::MarkStopped { .. } | Action::StopTask { .. } => {}
    }
}

/// Who a stop is sent to: the container's Docker id, or — should the id be missing, which only an
/// engine bug can cause — its Docker name, decided before `create` and unique to this task.
fn stop_target(state: &TaskState, i: usize) -> String {
    let c = &state.containers[i];
    c.docker_id.clone().unwrap_or_else(|| {
        tracing::error!(task = %state.id, container = %c.name, "no Docker id to stop; stopping by name (please report this)");
        c.docker_name.clone()
    })
}

/// Stop a container and say what Docker says about it afterwards. A stop is done when Docker
/// says so: an inspect that finds it not running (after a stop that succeeded, or one that
/// failed: a 304 or a lost answer may hide a stop that happened) is its exit; "no such container"
/// means it is gone; anything else — the stop refused, a timeout, the Engine unreachable, the
/// container still running — is a failed stop, which leaves it RUNNING to be stopped again.
async fn stop_container<R: Runtime>(rt: &R, target: &str, i: usize, timeout_secs: u32) -> Event {
    let stopped = rt.stop(target, timeout_secs).await;
    if let Err(RuntimeError::NotFound(_)) = stopped {
        return Event::Vanished {
            container: i,
            at: now_ms(),
            reason: VANISHED_REASON.into(),
        };
    }
    let failure = match (stopped, rt.inspect(target).await) {
        (_, Ok(info)) if !info.running => {
            return Event::Exited {
                container: i,
                exit_code: info.exit_code,
                started_at: info.started_at,
                at: info.finished_at.unwrap_or_else(now_ms),
            };
        }
        (_, Err(RuntimeError::NotFound(_))) => {
            return Event::Vanished {
                container: i,
                at: now_ms(),
                reason: VANISHED_REASON.into(),
            };
        }
        (Err(e), _) => e.to_string(),
        (Ok(()), Ok(_)) => "Docker answered the stop but still runs the container".to_string(),
        (Ok(()), Err(e)) => format!("the stop was answered, but the inspect after it failed: {e}"),
    };
    Event::StopFailed {
        container: i,
        at: now_ms(),
        message: format!("{STOP_FAILURE_PREFIX}: {failure}"),
    }
}

/// The prefix of a failed stop's error (ECS's error name).
pub const STOP_FAILURE_PREFIX: &str = "CannotStopContainerError";

/// An effect that acts on an existing container.
#[derive(Debug, Clone, Copy)]
enum NeedsId {
    Start,
    Restart,
}

/// The Docker id of container `i`, or the failure its effect reports instead of calling the runtime.
///
/// The decision core starts only a container it knows as CREATED, and the `Created` event that
/// makes it so records the id, so a missing id is a bug in the engine, not an answer of Docker's.
/// It is not sent to Docker as an empty id: it becomes the start's failure, with an
/// internal-error reason, which the state machine folds in like any failed start (the container
/// STOPPED with that reason; the task stopping if it is essential). A stop needs no id: it goes
/// to the container's name ([`stop_target`]).
fn docker_id_for(state: &TaskState, i: usize, needs: NeedsId) -> Result<String, Event> {
    let c = &state.containers[i];
    if let Some(id) = &c.docker_id {
        return Ok(id.clone());
    }
    let verb = match needs {
        NeedsId::Start => "start",
        NeedsId::Restart => "restart",
    };
    let message = format!(
        "internal error: berth has no Docker id for container {} to {verb} (please report this)",
        c.name
    );
    tracing::error!(task = %state.id, container = %c.name, "{message}");
    let at = now_ms();
    Err(match needs {
        NeedsId::Start => Event::StartFailed {
            container: i,
            at,
            message: format!("CannotStartContainerError: {message}"),
        },
        NeedsId::Restart => Event::RestartFailed {
            container: i,
            at,
            message: format!("CannotStartContainerError: {message}"),
        },
    })
}

/// Where a container's registry login comes from.
#[derive(Clone, Copy)]
struct Login<'a> {
    resolver: Option<&'a dyn RegistryAuthResolver>,
    /// The container's `repositoryCredentials.credentialsParameter`.
    parameter: Option<&'a str>,
}

impl Login<'_> {
    /// The login for `image`: asked of the resolver; without one, anonymous unless the container
    /// names a secret (then an error saying what is missing).
    async fn resolve(self, image: &str) -> Result<Option<RegistryAuth>, AuthError> {
        match (self.resolver, self.parameter) {
            (Some(r), parameter) => r.resolve(image, parameter).await,
            (None, Some(parameter)) => Err(AuthError::NoSecretProvider {
                parameter: parameter.to_string(),
            }),
            (None, None) => Ok(None),
        }
    }
}

/// The pull report's reason when a stop gave the pull up.
pub const PULL_ABANDONED: &str = "pull abandoned: the task is stopping";

/// The reason ECS gives a task whose secrets or registry login cannot be obtained.
pub const AUTH_FAILURE_PREFIX: &str =
    "ResourceInitializationError: unable to pull secrets or registry auth";

/// Obtain a container's image according to the pull behaviour: find its registry login and pull
/// if needed, fall back to the cached image where the behaviour allows, and say what the container
/// (or task) does otherwise. A login that cannot be found (a secret that does not resolve, a
/// failing credential helper) stops the task, as ECS stops it, whatever the behaviour.
#[allow(clippy::too_many_arguments)]
async fn pull_image<R: Runtime>(
    rt: &R,
    image: &str,
    behavior: PullBehavior,
    record: &dyn PullRecord,
    login: Login<'_>,
    container: usize,
    progress: impl Fn(PullProgress),
    report: impl Fn(PullPhase, Option<String>),
) -> Event {
    let present = rt.image_present(image).await.unwrap_or(false);
    if !pulls::pull_needed(behavior, present, record.pulled_before(image)) {
        report(PullPhase::Cached, None);
        return Event::Pulled {
            container,
            at: now_ms(),
        };
    }
    let auth = match login.resolve(image).await {
        Ok(auth) => auth,
        Err(e) => {
            let message = format!("{AUTH_FAILURE_PREFIX}: {e}");
            report(PullPhase::Failed, Some(message.clone()));
            return Event::PullFailed {
                container,
                at: now_ms(),
                message,
                stop_task: true,
            };
        }
    };
    report(PullPhase::Started, None);
    // Drive the pull and pass its progress on as it comes, all of it before the final phase.
    let (ptx, mut prx) = mpsc::unbounded_channel::<PullProgress>();
    let pull = rt.pull(image, auth.as_ref(), Some(ptx));
    tokio::pin!(pull);
    let result = loop {
        tokio::select! {
            r = &mut pull => break r,
            Some(p) = prx.recv() => progress(p),
        }
    };
    while let Ok(p) = prx.try_recv() {
        progress(p);
    }
    let error = match result {
        Ok(()) => {
            if let Err(e) = record.record_pull(image) {
                tracing::warn!(%image, error = %e, "cannot record the pull (needed by pull behavior once)");
            }
            report(PullPhase::Done, None);
            return Event::Pulled {
                container,
                at: now_ms(),
            };
        }
        Err(e) => e,
    };
    let message = format!("CannotPullContainerError: {error}");
    // The pull may have failed after another one brought the image: look again.
    let present_now = rt.image_present(image).await.unwrap_or(present);
    match pulls::after_failure(behavior, present_now) {
        AfterFailure::UseCached => {
            report(
                PullPhase::Cached,
                Some(format!("{message}; using the cached image")),
            );
            Event::Pulled {
                container,
                at: now_ms(),
            }
        }
        outcome => {
            report(PullPhase::Failed, Some(message.clone()));
            Event::PullFailed {
                container,
                at: now_ms(),
                message,
                stop_task: outcome == AfterFailure::TaskStops,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_container() -> TaskState {
        let json = r#"{"family": "f", "containerDefinitions": [{"name": "a", "image": "img"}]}"#;
        let def = berth_model::parse(json).expect("valid").definition;
        TaskState::new("0123456789abcdef0123456789abcdef".into(), def, 0)
    }

    #[test]
    fn a_known_docker_id_is_the_target() {
        let mut s = one_container();
        s.containers[0].docker_id = Some("abc".into());
        assert_eq!(
            docker_id_for(&s, 0, NeedsId::Start).ok(),
            Some("abc".into())
        );
    }

    #[test]
    fn a_start_without_docker_id_fails_the_container_with_an_internal_error() {
        let mut s = one_container();
        s.begin(&Action::Start(0), 1);
        let failure = docker_id_for(&s, 0, NeedsId::Start).expect_err("no id");
        let Event::StartFailed { message, .. } = &failure else {
            panic!("a start failure: {failure:?}");
        };
        assert_eq!(
            message,
            "CannotStartContainerError: internal error: berth has no Docker id for container a to start (please report this)"
        );
        s.apply(&failure);
        let c = &s.containers[0];
        assert_eq!((c.known, c.in_flight), (Status::Stopped, None));
        assert_eq!(c.reason.as_deref(), Some(message.as_str()));
        // The essential container will never run: the task stops, with nothing more to do.
        let (effects, _) = s.step(Options::default(), 2);
        assert!(effects.is_empty(), "{effects:?}");
        assert_eq!(s.desired, Status::Stopped);
        assert_eq!(s.stopped_reason.as_deref(), Some(message.as_str()));
        assert!(s.is_finished());
    }

    #[test]
    fn a_stop_without_docker_id_goes_to_the_containers_docker_name() {
        let mut s = one_container();
        assert_eq!(stop_target(&s, 0), s.containers[0].docker_name);
        s.containers[0].docker_id = Some("abc".into());
        assert_eq!(stop_target(&s, 0), "abc");
    }
}
