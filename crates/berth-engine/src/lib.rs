//! berth-engine: runs tasks. A pure decision core ([`decide`]) over plain task state ([`state`]),
//! the per-task actor that performs its effects ([`actor`]) through the [`runtime::Runtime`] trait,
//! create specs ([`spec`]) and the reports people and tools read ([`report`]).
//!
//! This crate never talks to Docker itself (`berth-docker` implements the runtime) and never deletes
//! directory trees (`berth-fs` does).

pub mod actor;
pub mod decide;
pub mod failpoint;
#[cfg(any(feature = "fake", doc))]
pub mod fake;
pub mod pull;
pub mod report;
pub mod runtime;
pub mod spec;
pub mod state;

pub use actor::{
    CleanupReport, Command, EngineMetrics, Persist, RunConfig, adopt, cleanup_docker, run_task,
};
pub use decide::{Action, Decision, Event, Options, decide};
pub use pull::{PullBehavior, PullRecord};
pub use runtime::{
    ContainerDetails, ContainerInfo, NetworkInfo, Runtime, RuntimeError, RuntimeEvent,
};
pub use state::{ContainerState, Health, Millis, Status, StopKind, TaskState, new_task_id};
