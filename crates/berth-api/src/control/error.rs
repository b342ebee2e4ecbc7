//! The control API's errors and their HTTP answers: one exhaustive match from [`ControlError`] to
//! a status code, every body an [`ErrorBody`] (JSON), whatever the error.
//!
//! Invariants: each variant has exactly one status; adding a variant fails to compile until it has
//! one. Messages are lower-case and say what was wrong (and, where there is one, what to do).
//! Limits: requests hyper itself cannot parse (a head over hyper's buffer, about 400 KiB, more
//! than 100 headers, a URI over 64 KiB) are answered by hyper before any of this runs, with an empty
//! body; the router's own, lower limits ([`super::router`]) make that unreachable for anything
//! short of those sizes.

use super::types::ErrorBody;
use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// Why the control API refused or failed a request.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// No task with this id (never submitted, or already cleaned up).
    #[error("no task {task}")]
    NotFound { task: String },
    /// A task id prefix that more than one task's id starts with.
    #[error(
        "task id prefix {prefix} matches {} tasks: {}; give more of the id",
        matches.len(),
        matches.join(", ")
    )]
    Ambiguous {
        prefix: String,
        matches: Vec<String>,
    },
    /// The submitted task definition is invalid; every problem, `PATH: message`.
    #[error("invalid task definition")]
    Invalid { problems: Vec<String> },
    /// `stop` of a task that has already stopped: nothing to stop.
    #[error("task {task} is already stopped")]
    AlreadyStopped { task: String },
    /// The agent's state store failed.
    #[error("state store: {message}")]
    Store { message: String },
    /// The agent cannot work safely now (its state store cannot be written): nothing was done;
    /// try again once the reason is gone.
    #[error("the agent is degraded: {reason}")]
    Degraded { reason: String },
    /// The task's actor is gone although the task has not stopped (a bug, or the agent is exiting).
    #[error("task {task} no longer takes commands (the agent may be stopping)")]
    ActorGone { task: String },
    /// The request body is larger than the limit.
    #[error("the request body is larger than {limit} bytes")]
    BodyTooLarge { limit: usize },
    /// The request could not be read (bad body, bad path segment, bad query).
    #[error("bad request: {message}")]
    BadRequest { message: String },
    /// No route has this path.
    #[error("no route {path} (see docs/api.yaml)")]
    NoRoute { path: String },
    /// The route exists but not with this method.
    #[error("{method} is not allowed on {path}")]
    MethodNotAllowed { method: String, path: String },
    /// The Docker Engine failed a call the route needs (its message).
    #[error("docker: {message}")]
    Runtime { message: String },
    /// The request target is longer than the limit.
    #[error("the request URI is longer than {limit} bytes")]
    UriTooLong { limit: usize },
    /// The request's headers are larger (in bytes, or in number) than the limits.
    #[error("the request headers exceed {limit_bytes} bytes or {limit_count} headers")]
    HeadersTooLarge {
        limit_bytes: usize,
        limit_count: usize,
    },
}

impl ControlError {
    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        match self {
            ControlError::NotFound { .. } | ControlError::NoRoute { .. } => StatusCode::NOT_FOUND,
            ControlError::Invalid { .. }
            | ControlError::BadRequest { .. }
            | ControlError::Ambiguous { .. } => StatusCode::BAD_REQUEST,
            ControlError::AlreadyStopped { .. } => StatusCode::CONFLICT,
            ControlError::Store { .. } | ControlError::ActorGone { .. } => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
            ControlError::Degraded { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ControlError::Runtime { .. } => StatusCode::BAD_GATEWAY,
            ControlError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ControlError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ControlError::UriTooLong { .. } => StatusCode::URI_TOO_LONG,
            ControlError::HeadersTooLarge { .. } => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        }
    }

    /// The JSON body of this error.
    pub fn body(&self) -> ErrorBody {
        let problems = match self {
            ControlError::Invalid { problems } => Some(problems.clone()),
            _ => None,
        };
        ErrorBody {
            error: self.to_string(),
            problems,
        }
    }
}

impl IntoResponse for ControlError {
    fn into_response(self) -> Response {
        (self.status(), Json(self.body())).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_keep_their_wire_text() {
        let e = ControlError::NotFound { task: "x".into() };
        assert_eq!(e.status(), StatusCode::NOT_FOUND);
        assert_eq!(e.body().error, "no task x");
        let e = ControlError::Store {
            message: "disk full".into(),
        };
        assert_eq!(e.body().error, "state store: disk full");
        let e = ControlError::Invalid {
            problems: vec!["family: required".into()],
        };
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            e.body(),
            ErrorBody {
                error: "invalid task definition".into(),
                problems: Some(vec!["family: required".into()])
            }
        );
        let e = ControlError::AlreadyStopped { task: "x".into() };
        assert_eq!(e.status(), StatusCode::CONFLICT);
        assert_eq!(e.body().error, "task x is already stopped");
    }
}
