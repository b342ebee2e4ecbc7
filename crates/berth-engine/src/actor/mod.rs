//! The task actor: owns one task's state, performs the decision core's effects through the
//! [`Runtime`](crate::runtime::Runtime), and folds results and Docker events back in until the
//! task has stopped.
//!
//! One actor per task; no lock is shared between tasks, and none is held across an `.await`. Effects
//! run concurrently as tracked tasks (a `tokio_util` `TaskTracker`) that report back on a channel;
//! the loop wakes only for an effect result, a Docker event, a command, a `startTimeout` timer or
//! cancellation — never to poll. Snapshots are published on a `watch` channel after every change;
//! status-change reports are derived from consecutive snapshots. Every state change is saved before
//! the effects it leads to are performed, so Docker is never more than the effects in flight ahead
//! of the store.
//!
//! The parts, each a module of this directory:
//! - `run`: the loop ([`run_task`]): subscribing, preparing, step, save, perform, publish, wait;
//!   commands ([`Command`]), shutdown on [`RunConfig::cancel`], persist before acting;
//! - `config`: the run's settings ([`RunConfig`]) and the store's seam ([`Persist`], failing with
//!   [`PersistError`]);
//! - `metrics`: [`EngineMetrics`], shared by every task of an agent;
//! - `effects`: the tracker effects run on and the dispatcher from a decided action to its
//!   effect, one function each: `pull` (and the pause image), `create`, `start` (start and
//!   restart), `stop`;
//! - `adoption`: [`adopt`] after an agent restart, the resync after a broken event stream,
//!   Docker's events as the engine's;
//! - `files`: the files the actor writes (FireLens's router configuration, the container metadata
//!   files);
//! - `volumes`, `access`, `values`, `images`: what the actor prepares before its first decision
//!   (the task's volumes; what its execution role fetches from AWS when berth has AWS access; its
//!   secrets and environment files) and the image leases it holds while it runs.
//!
//! The create spec of a container is assembled in one place, [`crate::create_spec::build`]: the
//! create effect only supplies its facts.

mod access;
mod adoption;
mod config;
mod create;
mod effects;
mod files;
mod images;
mod metrics;
mod pull;
mod run;
mod start;
mod stop;
mod values;
mod volumes;

pub use adoption::adopt;
pub use config::{DEFAULT_SHUTDOWN_GRACE, Persist, PersistError, RunConfig};
pub use metrics::EngineMetrics;
pub use pull::{AUTH_FAILURE_PREFIX, PULL_ABANDONED};
pub use run::run_task;
pub use stop::STOP_FAILURE_PREFIX;

use crate::report::Report;
use crate::retry::RetryPolicy;
use crate::runtime::RuntimeError;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Requests to a running task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Stop the task cleanly (reverse dependency order, stop timeouts).
    Stop { reason: String },
    /// [`Command::Stop`], answered on `saved` once the desired status STOPPED is durable (the
    /// save after it was taken in succeeded) or with the save's error: what a client is told
    /// "stopping" on survives a kill -9 of the agent.
    StopSaved { reason: String, saved: SavedAck },
    /// Kill every running container now.
    Kill,
}

/// Where an actor answers a [`Command::StopSaved`]: `Ok` once the stop is saved, `Err` with the
/// save's error when the save after it failed (the stop is still taken in and saved again on the
/// retry schedule, but not durable yet). Dropped unanswered when the actor ends first.
#[derive(Clone)]
pub struct SavedAck(Arc<Mutex<Option<AckSender>>>);

/// The sender a [`SavedAck`] answers on once.
type AckSender = oneshot::Sender<Result<(), String>>;

impl SavedAck {
    /// An acknowledgement and the receiver its answer arrives on.
    pub fn new() -> (SavedAck, oneshot::Receiver<Result<(), String>>) {
        let (tx, rx) = oneshot::channel();
        (SavedAck(Arc::new(Mutex::new(Some(tx)))), rx)
    }

    /// Answer (once; later answers are ignored).
    fn answer(&self, outcome: Result<(), String>) {
        let tx = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(tx) = tx {
            let _ = tx.send(outcome);
        }
    }
}

impl PartialEq for SavedAck {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SavedAck {}

impl std::fmt::Debug for SavedAck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SavedAck")
    }
}

/// Where the actor sends what happens.
pub type Reports = mpsc::UnboundedSender<Report>;

/// The reason of a container removed from Docker by someone else.
const VANISHED_REASON: &str = "container removed from Docker behind berth's back";

/// How a call that decides what an earlier failure left behind (an image inspect before a pull, a
/// container inspect after a failed create or start) is asked again while it fails: after 1, 2, 4
/// and 8 s, [`ASK_AGAIN_ATTEMPTS`] attempts in all. A stop gives the wait up with its effect.
const ASK_AGAIN: RetryPolicy = RetryPolicy {
    first: Duration::from_secs(1),
    max: Duration::from_secs(8),
};
const ASK_AGAIN_ATTEMPTS: u32 = 5;

/// Run `call` until it succeeds or Docker says the object does not exist
/// ([`RuntimeError::NotFound`], returned at once), at most [`ASK_AGAIN_ATTEMPTS`] times on
/// [`ASK_AGAIN`]; the last error when every attempt failed.
async fn ask_again<T, F, Fut>(what: &str, mut call: F) -> Result<T, RuntimeError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, RuntimeError>>,
{
    let mut backoff = ASK_AGAIN.backoff();
    let mut attempt = 1;
    loop {
        match call().await {
            Ok(v) => return Ok(v),
            Err(e @ RuntimeError::NotFound { .. }) => return Err(e),
            Err(e) if attempt >= ASK_AGAIN_ATTEMPTS => return Err(e),
            Err(e) => {
                let wait = backoff.next_delay();
                tracing::warn!(call = what, error = %e, attempt, ?wait, "a call that decides what Docker did failed; asking again");
                tokio::time::sleep(wait).await;
                attempt += 1;
            }
        }
    }
}

/// What the modules' unit tests share.
#[cfg(test)]
mod test_support {
    use crate::state::TaskState;

    /// A task of one essential container, `a`, in status NONE.
    pub(super) fn one_container() -> TaskState {
        let json = r#"{"family": "f", "containerDefinitions": [{"name": "a", "image": "img"}]}"#;
        let def = berth_model::parse(json).expect("valid").definition;
        TaskState::new("0123456789abcdef0123456789abcdef".into(), def, 0)
    }
}
