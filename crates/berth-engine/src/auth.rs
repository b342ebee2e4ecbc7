//! Registry credentials, as the engine sees them: the login a pull sends ([`RegistryAuth`]), the
//! seam that finds one for an image ([`RegistryAuthResolver`]), and the seam a secret provider
//! plugs into to resolve `repositoryCredentials.credentialsParameter` ([`SecretLookup`]).
//!
//! The engine asks the resolver once per pull it makes (never for a cached image it does not
//! pull), passing the container's `credentialsParameter` when it has one, and hands the answer to
//! [`crate::runtime::Runtime::pull`]. The credential chain itself (ECS's engine auth data, the
//! Docker client's `config.json` and its credential helpers) lives in `berth-docker`, which owns
//! Docker's formats; the engine only knows the trait.
//!
//! Secrets never appear in `Debug` output: [`RegistryAuth`]'s `Debug` shows the user name, the
//! registry and where the login came from, never the password or token.

use futures_util::future::BoxFuture;
use std::sync::Arc;

/// A registry login to send with one pull (Docker's `X-Registry-Auth`).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RegistryAuth {
    pub username: String,
    pub password: String,
    /// An identity (refresh) token instead of a password: what a credential helper answers with
    /// the user name `<token>`.
    pub identity_token: Option<String>,
    /// The registry the login is for, as Docker names it (`127.0.0.1:5000`,
    /// `https://index.docker.io/v1/` for Docker Hub).
    pub server: String,
    /// Where berth found it, for messages: e.g. `ECS_ENGINE_AUTH_DATA`,
    /// `credential helper docker-credential-pass (/root/.docker/config.json)`. Never a secret.
    pub source: String,
}

impl std::fmt::Debug for RegistryAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryAuth")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .field(
                "identity_token",
                &self.identity_token.as_ref().map(|_| "<redacted>"),
            )
            .field("server", &self.server)
            .field("source", &self.source)
            .finish()
    }
}

/// Why no login could be found for a pull. Each message names what was looked at and how to fix
/// it; none contains a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The container names a secret in `repositoryCredentials`, but berth has no secret provider
    /// to resolve it with.
    #[error(
        "repositoryCredentials.credentialsParameter {parameter:?} names a secret, but no secret provider is configured to resolve it; configure one, or remove repositoryCredentials and give the registry login through ECS_ENGINE_AUTH_DATA or the Docker config file"
    )]
    NoSecretProvider { parameter: String },
    /// The secret provider could not resolve the secret (its error, which names where it
    /// looked).
    #[error("repositoryCredentials.credentialsParameter {parameter:?}: {source}")]
    Secret {
        parameter: String,
        #[source]
        source: crate::secrets::SecretError,
    },
    /// The secret resolved, but its value is not ECS's `{"username": ..., "password": ...}`.
    #[error(
        "repositoryCredentials.credentialsParameter {parameter:?}: the secret's value {problem}; it must be a JSON object {{\"username\": \"...\", \"password\": \"...\"}}"
    )]
    BadSecret { parameter: String, problem: String },
    /// A credential source is misconfigured or failed (a Docker config file that cannot be read,
    /// a credential helper that failed): `origin` says which, `message` what happened.
    #[error("{origin}: {message}")]
    Source { origin: String, message: String },
}

/// Finds the login for a pull. Implemented by `berth-docker`'s credential chain; the engine calls
/// it before every pull it makes.
pub trait RegistryAuthResolver: Send + Sync + 'static {
    /// The login to pull `image` with (`None`: pull anonymously). `credentials_parameter` is the
    /// container's `repositoryCredentials.credentialsParameter`, which comes first when given.
    fn resolve(
        &self,
        image: &str,
        credentials_parameter: Option<&str>,
    ) -> BoxFuture<'static, Result<Option<RegistryAuth>, AuthError>>;
}

/// The secret provider, as the credential chain needs it: resolve a secret reference (an ARN or a
/// name, as written in `credentialsParameter`) to its value, or say why not (the error names
/// where the secret was looked for).
pub type SecretLookup = Arc<
    dyn Fn(&str) -> BoxFuture<'static, Result<String, crate::secrets::SecretError>> + Send + Sync,
>;

/// Read ECS's registry secret: a JSON object with non-empty string fields `username` and
/// `password` (other fields are ignored, as ECS ignores them).
pub fn login_from_secret(
    parameter: &str,
    value: &str,
    server: &str,
) -> Result<RegistryAuth, AuthError> {
    let bad = |problem: &str| AuthError::BadSecret {
        parameter: parameter.to_string(),
        problem: problem.to_string(),
    };
    let json: serde_json::Value = serde_json::from_str(value).map_err(|_| bad("is not JSON"))?;
    let object = json
        .as_object()
        .ok_or_else(|| bad("is not a JSON object"))?;
    let field = |name: &str| -> Result<String, AuthError> {
        match object.get(name) {
            Some(serde_json::Value::String(s)) if !s.is_empty() => Ok(s.clone()),
            Some(serde_json::Value::String(_)) => Err(bad(&format!("has an empty {name:?}"))),
            Some(_) => Err(bad(&format!("has a {name:?} that is not a string"))),
            None => Err(bad(&format!("has no {name:?}"))),
        }
    };
    Ok(RegistryAuth {
        username: field("username")?,
        password: field("password")?,
        identity_token: None,
        server: server.to_string(),
        source: format!("repositoryCredentials.credentialsParameter {parameter:?}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_secret() {
        let auth = RegistryAuth {
            username: "alice".into(),
            password: "hunter2".into(),
            identity_token: Some("tok3n".into()),
            server: "127.0.0.1:5000".into(),
            source: "ECS_ENGINE_AUTH_DATA".into(),
        };
        let shown = format!("{auth:?}");
        assert!(
            shown.contains("alice") && shown.contains("127.0.0.1:5000"),
            "{shown}"
        );
        assert!(
            !shown.contains("hunter2") && !shown.contains("tok3n"),
            "{shown}"
        );
    }

    #[test]
    fn the_ecs_secret_is_username_and_password() {
        let auth = login_from_secret("reg", r#"{"username":"u","password":"p","x":1}"#, "h:1")
            .expect("valid");
        assert_eq!((auth.username.as_str(), auth.password.as_str()), ("u", "p"));
        assert_eq!(auth.server, "h:1");
        for (value, problem) in [
            ("nope", "is not JSON"),
            ("[]", "is not a JSON object"),
            (r#"{"password":"p"}"#, "has no \"username\""),
            (
                r#"{"username":"","password":"p"}"#,
                "has an empty \"username\"",
            ),
            (
                r#"{"username":"u","password":7}"#,
                "has a \"password\" that is not a string",
            ),
        ] {
            let err = login_from_secret("reg", value, "h").expect_err(value);
            assert_eq!(
                err.to_string(),
                format!(
                    "repositoryCredentials.credentialsParameter \"reg\": the secret's value {problem}; it must be a JSON object {{\"username\": \"...\", \"password\": \"...\"}}"
                )
            );
            assert!(
                !err.to_string().contains("\"p\""),
                "no secret in the message"
            );
        }
    }
}
