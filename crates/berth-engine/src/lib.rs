//! berth-engine: runs tasks. A pure decision core ([`decide`](mod@decide)) over plain task state
//! ([`state`]), the per-task actor that performs its effects ([`actor`]) through the
//! [`runtime::Runtime`] trait, the container restart rule ([`restart`]), the one task cleanup
//! ([`cleanup`]), the one retry schedule ([`retry`]), create specs ([`spec`], assembled in one
//! place by [`create_spec`]), the agent's ECS identity and its ARNs
//! ([`identity`]), the secret provider seam
//! ([`secrets`]), the task role seam ([`roles`]) and its variable in containers ([`role_env`]), image cleanup ([`image_gc`], with the leases and records of [`image_use`]),
//! image references read by Docker's rules ([`image_ref`]), the reports people and tools read
//! ([`report`]), the Engine's health as the agent reports it ([`engine_health`]), which task a
//! full data directory stops ([`scratch`]) and berth's offline pause image ([`pause_image`],
//! imported by [`pause_provision`]).
//!
//! This crate never talks to Docker itself (`berth-docker` implements the runtime) and never
//! unmounts or deletes directory trees itself ([`cleanup`] asks `berth-fs`).

pub mod actor;
pub mod auth;
pub mod awslogs;
pub mod cleanup;
pub mod container_metadata;
pub mod create_spec;
pub mod decide;
pub mod engine_health;
pub mod failpoint;
#[cfg(any(feature = "fake", doc))]
pub mod fake;
pub mod firelens;
pub mod gpu;
pub mod identity;
pub mod image_gc;
pub mod image_ref;
pub mod image_use;
pub mod pause;
pub mod pause_image;
pub mod pause_provision;
pub mod pull;
pub mod remote;
pub mod report;
pub mod restart;
pub mod retry;
pub mod role_env;
pub mod roles;
pub mod runtime;
pub mod scratch;
pub mod secrets;
pub mod sources;
pub mod spec;
pub mod state;

/// The error of a seam's implementor (the store's, for `Persist`, `PullRecord` and
/// `ImageRecords`), carried as the `source` of the seam's own error: the engine does not know
/// the implementor's type.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

pub use actor::{
    Command, EngineMetrics, Persist, PersistError, RunConfig, SavedAck, adopt, run_task,
};
pub use auth::{AuthError, RegistryAuth, RegistryAuthResolver, SecretLookup};
pub use cleanup::{CleanupReport, Refusal, cleanup_docker, cleanup_task};
pub use decide::{Action, Decision, Event, Options, decide};
pub use identity::Identity;
pub use pull::{PullBehavior, PullRecord, PullRecordError};
pub use retry::RetryPolicy;
pub use runtime::{
    ContainerDetails, ContainerInfo, NetworkInfo, Object, Runtime, RuntimeError, RuntimeEvent,
};
pub use state::{
    ContainerState, Health, Millis, PendingExit, Status, StopKind, TaskState, new_task_id,
};
