//! berth-api: the HTTP interfaces berth serves.
//!
//! - [`control`]: the agent's control API on its Unix socket (submit, list, inspect, stop, remove,
//!   events, health), written against the [`control::ControlPlane`] trait the agent implements,
//!   with the request/response types the CLI client shares.
//! - [`metadata`]: the task metadata endpoint, ECS's `/v4/<id>` (and `/v3/<id>`) routes that
//!   containers read through `$ECS_CONTAINER_METADATA_URI_V4`, so monitoring sidecars and
//!   exporters written for ECS work unchanged. Answers are built from each task actor's published
//!   snapshot (a `watch` channel) plus dynamic details asked of the [`berth_engine::Runtime`];
//!   nothing here holds a lock the engine uses.
//!
//! - [`introspection`]: the agent introspection API, ECS's `:51678` `/v1/metadata` and
//!   `/v1/tasks` (by Docker id or task ARN), which monitoring agents read to map Docker
//!   containers to tasks; built from the metadata endpoint's task directory.
//!
//! - [`serve`]: the accept loop every listener shares, with connection limits, a header-read (and idle)
//!   timeout and a bounded read buffer ([`serve::ServerLimits`]).
//!
//! Neither needs the state store or Docker directly: the agent provides both behind traits.

pub mod control;
pub mod introspection;
pub mod metadata;
pub mod serve;
