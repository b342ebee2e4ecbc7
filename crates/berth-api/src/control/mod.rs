//! The agent's control API: HTTP/JSON on a Unix socket (docs/api.yaml), written against the
//! [`ControlPlane`] trait the agent implements, so this crate needs neither the state store nor
//! Docker.
//!
//! - [`types`]: the request and response bodies, shared with the CLI client.
//! - [`error`]: [`ControlError`] and its one exhaustive mapping to HTTP statuses (JSON bodies).
//! - [`handlers`]: one function per route, plus the (command, phase) rule ([`handlers::answer`]).
//! - [`router`]: the routes, the size limits, JSON answers for unknown routes and wrong methods,
//!   [`bind`] (the socket, mode 0600) and [`serve`].
//!
//! Invariants: every answer the router produces is JSON (events: newline-delimited JSON), error or
//! not; the plane is only asked for what a route needs and never under a lock of this crate (it
//! has none). Limits: authorisation is the socket's file mode; there is no other.

pub mod error;
pub mod handlers;
pub mod router;
pub mod types;

pub use error::ControlError;
pub use router::{BindError, OwnSocket, bind, router, serve, serve_with_limits};
pub use types::{
    Accepted, CleanupView, ContainerView, Degraded, ErrorBody, EventHead, Health, HealthStatus,
    ImageView, ImagesView, ListQuery, PruneQuery, PruneResponse, PrunedImage, SubmitResponse,
    TaskView,
};

use berth_engine::Status;
use berth_model::TaskDefinition;
use std::future::Future;

/// Where a task stands, as far as commands care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Desired RUNNING: starting or running.
    Active,
    /// Desired STOPPED, not all containers stopped yet.
    Stopping,
    /// Known STOPPED: every container has stopped (its cleanup may be pending).
    Stopped,
}

impl Phase {
    /// The phase of a task with these known and desired statuses.
    pub fn of(known: Status, desired: Status) -> Phase {
        if known == Status::Stopped {
            Phase::Stopped
        } else if desired == Status::Stopped {
            Phase::Stopping
        } else {
            Phase::Active
        }
    }
}

/// A submitted task: its id, and what the plane warns about beyond the definition check (for
/// example a log driver this host does not have, replaced by its fallback), `PATH: message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submitted {
    pub task: String,
    pub warnings: Vec<String>,
}

/// What the control API needs from the agent. Implemented by `berth agent` (the task table, the
/// store, the actors) and by fakes in tests.
///
/// Every method answers for one moment: a task may change phase between two calls, and the
/// implementation reports what it finds when it acts (e.g. [`ControlError::AlreadyStopped`] from
/// [`ControlPlane::stop`] when the task stopped meanwhile).
pub trait ControlPlane: Send + Sync + 'static {
    /// Store a new task of this (valid) definition and start it; its id and the plane's own
    /// warnings (it may adapt the definition to the host first, as the agent does with log drivers).
    /// With a `client_token` (checked by [`handlers::check_client_token`]) that a task the plane
    /// keeps was submitted with, nothing new is created: that task's id is the answer.
    fn submit(
        &self,
        definition: TaskDefinition,
        client_token: Option<String>,
    ) -> impl Future<Output = Result<Submitted, ControlError>> + Send;

    /// Every task the agent keeps (until its cleanup), unfiltered.
    fn list(&self) -> impl Future<Output = Result<Vec<TaskView>, ControlError>> + Send;

    /// One task, or `None` when the agent keeps no task with this id.
    fn get(&self, id: &str) -> impl Future<Output = Result<Option<TaskView>, ControlError>> + Send;

    /// The phase of a task that takes commands, or `None` when there is no such task.
    fn phase(&self, id: &str) -> Option<Phase>;

    /// Ask the task's actor to stop the task (reverse dependency order, stop timeouts).
    fn stop(&self, id: &str, reason: &str)
    -> impl Future<Output = Result<(), ControlError>> + Send;

    /// Clean the task up now rather than after the cleanup wait (at once when it has stopped,
    /// else as soon as it has).
    fn clean_up_now(&self, id: &str) -> Result<(), ControlError>;

    /// A new subscription to the event stream: one JSON object per item, without newline.
    fn events(&self) -> tokio::sync::broadcast::Receiver<String>;

    /// How many tasks the agent tracks.
    fn task_count(&self) -> usize;

    /// Docker's images with image cleanup's verdict on each (`GET /v1/images`).
    fn images(&self) -> impl Future<Output = Result<ImagesView, ControlError>> + Send;

    /// Remove every image that is a cleanup candidate now, or with `dry_run` only say which
    /// (`POST /v1/images/prune`).
    fn prune(
        &self,
        dry_run: bool,
    ) -> impl Future<Output = Result<PruneResponse, ControlError>> + Send;

    /// Why the agent cannot work safely now (its state store cannot be written), or `None`.
    /// `GET /v1/health` reports it (503).
    fn degraded(&self) -> Option<Degraded>;

    /// The limits a submitted definition is parsed with (the most containers per task): by
    /// default berth-model's, ECS's.
    fn limits(&self) -> berth_model::Limits {
        berth_model::Limits::default()
    }
}
