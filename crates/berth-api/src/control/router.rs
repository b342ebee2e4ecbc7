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
//!
//! Invariants: the limits are checked before routing, so every refusal is a JSON
//! [`ControlError`]; they are below hyper's own (a 64 KiB URI, about 400 KiB of head, 100 headers),
//! which answer with an empty body and are reached only by requests far beyond these limits.
//! Limits: HTTP/1 only; the socket's mode (0600) is the only access control.

use super::ControlPlane;
use super::error::ControlError;
use super::handlers;
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
    #[error("creating {path}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("another agent answers on {path}")]
    InUse { path: PathBuf },
    #[error("removing stale {path}")]
    RemoveStale {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
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

/// Bind the control socket: parent directory created, a stale socket (nobody answering) replaced,
/// mode 0600. A socket something answers on is left alone ([`BindError::InUse`]).
pub async fn bind(path: &Path) -> Result<tokio::net::UnixListener, BindError> {
    use std::os::unix::fs::PermissionsExt;
    let at = || path.to_path_buf();
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|source| BindError::CreateDir {
            path: parent.to_path_buf(),
            source,
        })?;
    }
    if path.exists() {
        if tokio::net::UnixStream::connect(path).await.is_ok() {
            return Err(BindError::InUse { path: at() });
        }
        std::fs::remove_file(path)
            .map_err(|source| BindError::RemoveStale { path: at(), source })?;
    }
    let listener = tokio::net::UnixListener::bind(path)
        .map_err(|source| BindError::Bind { path: at(), source })?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|source| BindError::Mode { path: at(), source })?;
    Ok(listener)
}

/// Serve the control API on `listener`; returns only on an accept error. To stop, drop the future
/// (connections under way are dropped with it: open event streams would otherwise never end).
pub async fn serve<C: ControlPlane>(
    listener: tokio::net::UnixListener,
    plane: Arc<C>,
) -> std::io::Result<()> {
    axum::serve(listener, router(plane)).await
}
