//! The actor's loop, [`run_task`]: subscribe to the task's Docker events, adopt its containers
//! (on resume), prepare its volumes, values and files, then, until the task has stopped: step the
//! decision core, save, perform the effects, publish, and wait for the next effect result, Docker
//! event, command, timer or cancellation.
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
//! Commands while a call is in flight: a `stop` or `kill` is received at any time. Volume
//! preparation (the Docker volume calls before the first decision) runs concurrently with the
//! command channel and cancellation: a command or cancellation drops it (the call in flight is
//! abandoned, nothing is created after it; a volume Docker created meanwhile is the cleanup's, as
//! every task volume is). Once the task's desired status is STOPPED (by a command, or because an
//! essential container stopped), pulls in flight are given up ([`Event::PullAbandoned`]: the
//! request to Docker is dropped, the container is marked STOPPED without running), so a stop never
//! waits for a slow pull.
//!
//! A stop is durable when answered: [`Command::StopSaved`]'s sender is answered after the save
//! that follows it (or with that save's error), so a `berth stop` the client saw succeed survives
//! a kill -9. The re-sync after a broken event stream runs its inspects as an effect: a stalled
//! Engine holds no command meanwhile.
//!
//! Limits: subscribing and adoption (with the metadata files' refresh) are awaited inline, each
//! call bounded by the runtime's timeouts, and are not interrupted by commands or cancellation;
//! they are seen as soon as those calls end. A create,
//! start or stop in flight is waited for (its answer names the container the cleanup must remove).

use super::access;
use super::adoption::{
    adopt, after_unexpected_die, resync_apply, resync_inspect, resync_targets, translate,
};
use super::effects::{Context, Effects, spawn_effect};
use super::files::{prepare_firelens, refresh_metadata_files};
use super::images::{hold_images, release_images};
use super::values::{read_secrets_and_environment_files, stop_before_create};
use super::volumes::{provide_volumes, stop_volume_users};
use super::{Command, EngineMetrics, Reports, RunConfig, SavedAck};
use crate::decide::{Action, Event};
use crate::report::{self, now_ms};
use crate::retry::{Backoff, RetryPolicy};
use crate::runtime::{ContainerInfo, Runtime, RuntimeError, RuntimeEvent};
use crate::secrets::TaskValues;
use crate::spec;
use crate::state::{Status, StopKind, TaskState};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// How long to wait before subscribing again after the event stream broke: 100 ms doubling to
/// 5 s while it keeps breaking, from the start again at the next event.
const RECONNECT: RetryPolicy = RetryPolicy {
    first: Duration::from_millis(100),
    max: Duration::from_secs(5),
};

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
    // Stops received whose senders wait for the save that makes them durable.
    let mut acks: Vec<SavedAck> = Vec::new();
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
                        kill_pending |= receive(&mut state, cmd, &mut acks);
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
    let volumes = plans;
    // A task that is stopping creates nothing: no secret to read, no log router to configure.
    let stopping = state.desired == Status::Stopped || config.cancel.is_cancelled();
    // With AWS access, what the execution role is for is fetched first (bounded; see `access`).
    let fetched = if stopping {
        None
    } else {
        match access::fetch(&state, &config).await {
            access::Outcome::Nothing => None,
            access::Outcome::Fetched(f) => Some(Arc::new(f)),
            access::Outcome::Failed(reason) => {
                tracing::warn!(task = %state.id, %reason, "task stopped: its AWS resources cannot be had");
                stop_before_create(&mut state, &reason);
                None
            }
        }
    };
    let config = match &fetched {
        Some(f) => RunConfig {
            registry_auth: Some(Arc::new(access::TaskLogins::new(
                f.clone(),
                config.registry_auth.clone(),
            ))),
            ..config
        },
        None => config,
    };
    let stopping = stopping || state.desired == Status::Stopped;
    let values = if stopping {
        TaskValues::default()
    } else {
        read_secrets_and_environment_files(&mut state, &config, fetched.as_ref())
    };
    if !stopping {
        prepare_firelens(&mut state, &config);
    }
    if config.resume {
        refresh_metadata_files(&*rt, &state, &config).await;
    }
    if let Some(ready) = &config.ready {
        let _ = ready.send(state.id.clone());
    }
    let mut saved: Option<TaskState> = None;
    let mut reconnect = RECONNECT.backoff();
    let mut reconnect_delay = reconnect.next_delay();
    // Effects decided but not yet performed because the state they follow from is not durable.
    let mut held: Vec<Action> = Vec::new();
    let mut save_backoff: Option<Backoff> = None;
    // A resync's inspects run as an effect (a stalled Engine holds no command); their answers
    // come here.
    let (resync_tx, mut resync_rx) = mpsc::unbounded_channel::<Resynced>();

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
                for ack in acks.drain(..) {
                    ack.answer(Ok(()));
                }
                if save_backoff.take().is_some() {
                    config.metrics.clear_degraded(&state.id);
                    tracing::info!(task = %state.id, "the task state is saved again; the task goes on");
                }
                let cx = Context {
                    rt: &rt,
                    config: &config,
                    state: &state,
                    volumes: &volumes,
                    values: &values,
                    reports: &reports,
                    effects: &effects,
                };
                for action in held.drain(..) {
                    spawn_effect(&cx, action);
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
                for ack in acks.drain(..) {
                    ack.answer(Err(e.to_string()));
                }
                EngineMetrics::count(&config.metrics.save_failures);
                config.metrics.set_degraded(&state.id, &e.cause());
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
                    reconnect = RECONNECT.backoff();
                    reconnect_delay = reconnect.next_delay();
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
                    let (rt, tx) = (rt.clone(), resync_tx.clone());
                    let targets = resync_targets(&state);
                    effects.spawn(async move {
                        let _ = tx.send(resync_inspect(&*rt, targets).await);
                    });
                    reconnect_delay = reconnect.next_delay();
                    tracing::info!(task = %state.id, "re-subscribed to docker events and re-synced");
                }
            },
            Some(inspected) = resync_rx.recv() => resync_apply(&mut state, inspected),
            cmd = commands.recv(), if commands_open => match cmd {
                Some(cmd) => kill_pending |= receive(&mut state, cmd, &mut acks),
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

/// A resync's answers: each container's index, the Docker id asked, and Docker's inspect.
type Resynced = Vec<(usize, String, Result<ContainerInfo, RuntimeError>)>;

/// Take in a command: the task's desired status becomes STOPPED. True for a kill, whose kills
/// the loop sends once the state is saved. A stop that waits for its save leaves its
/// acknowledgement in `acks`, answered after the next save.
fn receive(state: &mut TaskState, cmd: Command, acks: &mut Vec<SavedAck>) -> bool {
    match cmd {
        Command::StopSaved { reason, saved } => {
            acks.push(saved);
            receive(state, Command::Stop { reason }, acks)
        }
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
) -> Result<(), super::PersistError> {
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
