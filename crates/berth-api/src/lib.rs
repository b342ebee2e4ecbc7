//! berth-api: the HTTP interfaces berth serves. For now the task metadata endpoint
//! ([`metadata`]): ECS's `/v4/<id>` (and `/v3/<id>`) routes that containers read through
//! `$ECS_CONTAINER_METADATA_URI_V4`, so monitoring sidecars and exporters written for ECS work
//! unchanged.
//!
//! Answers are built from each task actor's published snapshot (a `watch` channel) plus
//! dynamic details asked of the [`berth_engine::Runtime`]; nothing here holds a lock the engine uses.

pub mod metadata;
