//! The control API's routes and its server: size limits, JSON for unknown routes and wrong
//! methods, binding the Unix socket and serving it.
//!
//! | route                        | handler                    |
//! |------------------------------|----------------------------|
//! | `POST /v1/tasks`             | [`handlers::submit`]       |
//! | `GET /v1/tasks`              | [`handlers::list`]         |
//! | `GET /v1/tasks/{id}`         | [`handlers::inspect`]      |
//! | `DELETE /v1/tasks/{id}`      | [`handlers::remove`]       |
//! | `POST /v1/tasks/{id}/stop`   | [`handlers::stop`]         |
//! | `GET /v1/events`             | [`handlers::events`]       |
//! | `GET /v1/health`             | [`handlers::health`]       |
//! | `GET /v1/images`             | [`handlers::images`]       |
//! | `POST /v1/images/prune`      | [`handlers::prune`]        |
//!
//! Invariants: the limits are checked before routing, so every refusal is a JSON
//! [`ControlError`]; they are below hyper's own (a 64 KiB URI, a 64 KiB head — the read buffer of
//! [`ServerLimits::CONTROL`] — 100 headers), which answer with an empty body and are reached only
//! by requests far beyond these limits. Connections: at most 128 at once, 10 s for a request head
//! and between requests of a keep-alive connection ([`crate::serve`]).
//! Limits: HTTP/1 only; the socket's mode (0600) is the only access control.

use super::ControlPlane;
use super::error::ControlError;
use super::handlers;
use crate::serve::ServerLimits;
use axum::Router;
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Largest request body (a task definition) the API accepts.
pub const MAX_BODY: usize = 1024 * 1024;
/// Longest request target (path and query).
pub const MAX_URI: usize = 8 * 1024;
/// Largest header section, counting each header as `name: value\r\n`.
pub const MAX_HEADER_BYTES: usize = 32 * 1024;
/// Most headers in one request.
pub const MAX_HEADERS: usize = 64;

/// The control API's routes over `plane`.
pub fn router<C: ControlPlane>(plane: Arc<C>) -> Router {
    Router::new()
        .route(
            "/v1/tasks",
            post(handlers::submit::<C>).get(handlers::list::<C>),
        )
        .route(
            "/v1/tasks/{id}",
            get(handlers::inspect::<C>).delete(handlers::remove::<C>),
        )
        .route("/v1/tasks/{id}/stop", post(handlers::stop::<C>))
        .route("/v1/events", get(handlers::events::<C>))
        .route("/v1/health", get(handlers::health::<C>))
        .route("/v1/images", get(handlers::images::<C>))
        .route("/v1/images/prune", post(handlers::prune::<C>))
        .fallback(handlers::no_route)
        .method_not_allowed_fallback(handlers::wrong_method)
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::from_fn(limits))
        .with_state(plane)
}

/// Refuse a request whose target or headers exceed the limits, before any route runs.
async fn limits(req: Request, next: Next) -> Response {
    let uri_len = req.uri().path_and_query().map_or(0, |pq| pq.as_str().len());
    if uri_len > MAX_URI {
        return ControlError::UriTooLong { limit: MAX_URI }.into_response();
    }
    let headers = req.headers();
    let header_bytes: usize = headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 4)
        .sum();
    if headers.len() > MAX_HEADERS || header_bytes > MAX_HEADER_BYTES {
        return ControlError::HeadersTooLarge {
            limit_bytes: MAX_HEADER_BYTES,
            limit_count: MAX_HEADERS,
        }
        .into_response();
    }
    next.run(req).await
}

/// Why the control socket could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// The path is taken: another agent answers there, or it is not a socket (never removed).
    #[error(transparent)]
    Claim(#[from] berth_fs::socket::SocketError),
    #[error("binding {path}")]
    Bind {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("setting the mode of {path}")]
    Mode {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The control socket's file as this agent bound it, so that only this socket is removed at exit
/// ([`OwnSocket::release`]; another agent may have replaced it meanwhile).
#[derive(Debug)]
pub struct OwnSocket {
    path: PathBuf,
    id: berth_fs::socket::SocketId,
}

impl OwnSocket {
    /// Remove the socket file if it is still this one.
    pub fn release(&self) {
        if let Err(e) = berth_fs::socket::release(&self.path, self.id) {
            tracing::warn!(error = %e, "cannot remove the control socket");
        }
    }
}

/// Bind the control socket through `berth_fs::socket::claim`: parent directory created, a stale
/// socket (nobody answering) replaced, a socket something answers on left alone, anything that is
/// not a socket never removed; mode 0600.
pub async fn bind(path: &Path) -> Result<(tokio::net::UnixListener, OwnSocket), BindError> {
    use std::os::unix::fs::PermissionsExt;
    let at = || path.to_path_buf();
    let owned = path.to_path_buf();
    // A blocking probe and unlink: off the async threads.
    let claimed = tokio::task::spawn_blocking(move || berth_fs::socket::claim(&owned))
        .await
        .map_err(|e| BindError::Bind {
            path: at(),
            source: std::io::Error::other(e),
        })??;
    if claimed == berth_fs::socket::Claimed::ReplacedStale {
        tracing::warn!(socket = %path.display(), "replaced a stale control socket");
    }
    let listener = tokio::net::UnixListener::bind(path)
        .map_err(|source| BindError::Bind { path: at(), source })?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|source| BindError::Mode { path: at(), source })?;
    let id = berth_fs::socket::identity(path)?;
    Ok((listener, OwnSocket { path: at(), id }))
}

/// Serve the control API on `listener` within [`ServerLimits::CONTROL`]; it does not return. To
/// stop, drop the future: connections under way are dropped with it (open event streams would
/// otherwise never end).
pub async fn serve<C: ControlPlane>(
    listener: tokio::net::UnixListener,
    plane: Arc<C>,
) -> std::io::Result<()> {
    serve_with_limits(listener, plane, ServerLimits::CONTROL).await
}

/// [`serve`] within other limits (tests).
pub async fn serve_with_limits<C: ControlPlane>(
    listener: tokio::net::UnixListener,
    plane: Arc<C>,
    limits: ServerLimits,
) -> std::io::Result<()> {
    crate::serve::serve(
        listener,
        router(plane),
        limits,
        std::future::pending(),
        "control API",
    )
    .await;
    Ok(())
}
