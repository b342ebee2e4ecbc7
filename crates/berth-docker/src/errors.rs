//! Translating bollard's errors into the engine's [`RuntimeError`] kinds, keeping Docker's
//! message: 404 → not found and 409 → conflict, each naming the call's object (a call about no
//! object, such as a list, has neither: its 404 or 409 is other), other HTTP errors → other, transport errors (I/O,
//! HTTP, a missing socket) → unavailable, bollard's request timeout → timeout. Pull failures are
//! classified apart ([`pull_error`]): a missing repository, tag or manifest, an authentication
//! refusal or a malformed reference is permanent; anything else (a refused connection, a registry
//! 5xx) is retriable. The classification reads Docker's message text, which is not a stable API:
//! an unknown wording is treated as retriable.
//!
//! Call-specific answers that mean success (304 on stop, 404 on remove, 409 "already in progress")
//! are decided by the calls themselves in [`crate::runtime`].

use berth_engine::runtime::{Object, RuntimeError};
use bollard::errors::Error as BollardError;

/// Classify a pull error: a missing repository or tag, or an authentication refusal, cannot be
/// cured by retrying.
pub(crate) fn pull_error(engine: &str, image: &str, e: BollardError) -> RuntimeError {
    let (message, status) = match e {
        BollardError::DockerResponseServerError {
            status_code,
            message,
        } => (message, Some(status_code)),
        BollardError::DockerStreamError { error } => (error, None),
        e @ (BollardError::IOError { .. }
        | BollardError::HyperResponseError { .. }
        | BollardError::HyperLegacyError { .. }
        | BollardError::SocketNotFoundError(_)) => {
            (crate::connection::unreachable(engine, &describe(&e)), None)
        }
        other => (other.to_string(), None),
    };
    let lower = message.to_lowercase();
    let permanent = status == Some(404)
        || lower.contains("manifest unknown")
        || lower.contains("not found")
        || lower.contains("repository does not exist")
        || is_auth_refusal(&message)
        || lower.contains("invalid reference format");
    RuntimeError::PullFailed {
        image: image.to_string(),
        message,
        retriable: !permanent,
    }
}

/// Whether Docker's pull message is a registry refusing the login (or wanting one): the registry's
/// `unauthorized: …` / `denied: …`, Docker's `no basic auth credentials` when none was sent.
pub(crate) fn is_auth_refusal(message: &str) -> bool {
    let lower = message.to_lowercase();
    lower.contains("unauthorized")
        || lower.contains("authentication required")
        || lower.contains("no basic auth credentials")
        || lower.contains("access denied")
        || lower.contains("denied:")
}

/// Translate a bollard error into a runtime error kind, keeping Docker's message; a 404 or 409
/// names `object`, the call's object.
pub(crate) fn translate(e: BollardError, object: Option<&Object>) -> RuntimeError {
    match (e, object) {
        (
            BollardError::DockerResponseServerError {
                status_code: 404,
                message,
            },
            Some(object),
        ) => RuntimeError::not_found(object.clone(), message),
        (
            BollardError::DockerResponseServerError {
                status_code: 409,
                message,
            },
            Some(object),
        ) => RuntimeError::conflict(object.clone(), message),
        (e, _) => translate_other(e),
    }
}

/// A bollard error that names no object of the engine's.
fn translate_other(e: BollardError) -> RuntimeError {
    match e {
        BollardError::DockerResponseServerError { message, .. } => RuntimeError::Other(message),
        BollardError::RequestTimeoutError => {
            RuntimeError::Timeout("docker request timed out".into())
        }
        e @ (BollardError::IOError { .. }
        | BollardError::HyperResponseError { .. }
        | BollardError::HyperLegacyError { .. }
        | BollardError::SocketNotFoundError(_)) => RuntimeError::Unavailable(describe(&e)),
        other => RuntimeError::Other(other.to_string()),
    }
}

/// What a create's 404 is about, from Docker's words: the network the spec joins (`network …
/// not found`), a container it names (`No such container: …`, e.g. `container:<id>` networking),
/// else the spec's image (`No such image: …`, the usual one).
pub(crate) fn create_missing(image: &str, network: &str, message: &str) -> Object {
    let lower = message.to_lowercase();
    if let Some(rest) = message.strip_prefix("No such container: ") {
        Object::Container(rest.trim().to_string())
    } else if lower.starts_with("network ") && lower.contains("not found") {
        Object::Network(network.to_string())
    } else {
        Object::Image(image.to_string())
    }
}

/// A transport error as the user can act on it: the innermost causes, not bollard's wrapper
/// ("Error in the hyper legacy client: client error (Connect)" says nothing on its own). Each
/// cause in the `source()` chain is kept once: a wrapper that repeats its source's text is dropped.
pub(crate) fn describe(e: &BollardError) -> String {
    if let BollardError::SocketNotFoundError(path) = e {
        return format!("no socket at {path}");
    }
    let mut parts: Vec<String> = Vec::new();
    let mut cause: Option<&(dyn std::error::Error + 'static)> = match e {
        BollardError::HyperLegacyError { err } => Some(err),
        BollardError::IOError { err } => Some(err),
        BollardError::HyperResponseError { err } => Some(err),
        _ => None,
    };
    if cause.is_none() {
        return e.to_string();
    }
    while let Some(c) = cause {
        let text = c.to_string();
        if !text.is_empty() && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cause = c.source();
    }
    // The innermost cause is the one that says what happened (e.g. "Connection refused").
    let mut parts: Vec<String> = parts
        .into_iter()
        .filter(|p| p != "client error (Connect)")
        .collect();
    if parts.is_empty() {
        parts.push(e.to_string());
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_404_and_a_409_name_the_object_and_without_one_are_other() {
        let server = |status_code: u16| BollardError::DockerResponseServerError {
            status_code,
            message: "No such container: c1".into(),
        };
        let c1 = Object::Container("c1".into());
        assert_eq!(
            translate(server(404), Some(&c1)),
            RuntimeError::not_found(c1.clone(), "No such container: c1")
        );
        assert_eq!(
            translate(server(409), Some(&c1)),
            RuntimeError::conflict(c1, "No such container: c1")
        );
        assert_eq!(
            translate(server(404), None),
            RuntimeError::Other("No such container: c1".into())
        );
        assert_eq!(
            translate(server(500), None),
            RuntimeError::Other("No such container: c1".into())
        );
    }

    #[test]
    fn a_create_404_names_the_missing_image_network_or_container() {
        assert_eq!(
            create_missing("app:1", "bridge", "No such image: app:1"),
            Object::Image("app:1".into())
        );
        assert_eq!(
            create_missing("app:1", "mine", "network mine not found"),
            Object::Network("mine".into())
        );
        assert_eq!(
            create_missing("app:1", "container:p", "No such container: p"),
            Object::Container("p".into())
        );
    }

    #[test]
    fn refused_logins_are_not_retriable() {
        for message in [
            "unauthorized: authentication required",
            "Head \"http://127.0.0.1:5001/v2/p/manifests/1\": no basic auth credentials",
            "denied: requested access to the resource is denied",
        ] {
            let e = pull_error(
                "unix:///var/run/docker.sock",
                "127.0.0.1:5001/p:1",
                BollardError::DockerResponseServerError {
                    status_code: 500,
                    message: message.into(),
                },
            );
            assert_eq!(
                e,
                RuntimeError::PullFailed {
                    image: "127.0.0.1:5001/p:1".into(),
                    message: message.into(),
                    retriable: false
                }
            );
        }
    }

    #[test]
    fn missing_manifest_is_not_retriable_but_refused_connection_is() {
        let e = pull_error(
            "unix:///var/run/docker.sock",
            "127.0.0.1:5000/nope:1",
            BollardError::DockerResponseServerError {
                status_code: 404,
                message: "manifest for 127.0.0.1:5000/nope:1 not found: manifest unknown".into(),
            },
        );
        assert!(matches!(
            e,
            RuntimeError::PullFailed {
                retriable: false,
                ..
            }
        ));
        let e = pull_error(
            "unix:///var/run/docker.sock",
            "127.0.0.1:5000/nope:1",
            BollardError::DockerResponseServerError {
                status_code: 500,
                message: "Get \"http://127.0.0.1:5000/v2/\": dial tcp 127.0.0.1:5000: connect: connection refused".into(),
            },
        );
        assert!(matches!(
            e,
            RuntimeError::PullFailed {
                retriable: true,
                ..
            }
        ));
    }
}
