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
//! - [`credentials`]: the credentials endpoint (`169.254.170.2`): task IAM role credentials at
//!   `/v2/credentials/<id>` as ECS serves them, with a caller rule and ECS's audit log, and the
//!   task metadata endpoint v2 (`/v2/metadata`, `/v2/stats`), found by the caller's address.
//!
//! - [`serve`]: the accept loop every listener shares, with connection limits, a header-read (and idle)
//!   timeout and a bounded read buffer ([`serve::ServerLimits`]); the TCP listeners' start and
//!   shutdown the metadata endpoint and the introspection API share.
//! - `details`: the containers' Docker details both task APIs read, cached by each server's rule.
//!
//! Neither needs the state store or Docker directly: the agent provides both behind traits.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use std::sync::{Mutex, MutexGuard, PoisonError};

pub mod control;
pub mod credentials;
mod details;
pub mod introspection;
pub mod metadata;
pub mod serve;

/// Every mutex in this crate guards values replaced whole under the lock (counts, cache entries,
/// index maps): a panic elsewhere cannot leave them half-written, so a poisoned lock's data is
/// still good.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `body` as a JSON answer with `status`; should it not encode, a 500 whose JSON body is what
/// `error` makes of the reason (each API answers errors in its own shape).
pub(crate) fn json_response<T, E>(
    status: StatusCode,
    body: &T,
    error: impl FnOnce(String) -> E,
) -> Response
where
    T: Serialize + ?Sized,
    E: Serialize,
{
    let json = [(header::CONTENT_TYPE, "application/json")];
    match serde_json::to_vec(body) {
        Ok(bytes) => (status, json, bytes).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            json,
            serde_json::to_vec(&error(format!("cannot encode the answer: {e}")))
                .unwrap_or_default(),
        )
            .into_response(),
    }
}
