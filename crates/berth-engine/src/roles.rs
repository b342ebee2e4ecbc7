//! Task IAM roles as the engine sees them: the [`RoleSource`] seam (who turns a role ARN into
//! temporary credentials: berth-aws through STS `AssumeRole`, or a local directory for hosts that
//! cannot reach STS), the credentials themselves ([`RoleCredentials`], secrets redacted in
//! `Debug`), the task's credential ids ([`RoleIds`], saved in the task state) and the session name
//! that names the task ([`session_name`]). Pure apart from the trait: nothing here calls AWS.
//!
//! The ids are the only credential a container holds for the credentials endpoint
//! (`/v2/credentials/<id>`, served by berth-api): 128 random bits each, never derived from the
//! task id or anything a container can see.

use crate::secrets::SecretValue;
use crate::state::new_task_id;
use berth_model::TaskDefinition;
use serde::{Deserialize, Serialize};

/// The path under which the credentials endpoint serves an id, as ECS's agent does; containers
/// get it in `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`.
pub const CREDENTIALS_PATH: &str = "/v2/credentials/";

/// The variable every AWS SDK reads to find the credentials endpoint in an ECS task.
pub const RELATIVE_URI_VARIABLE: &str = "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI";

/// The task's credential ids: one for its `taskRoleArn` (served to its containers) and one for
/// its `executionRoleArn` (served to the Docker Engine's `awslogs` driver only). Saved with the
/// task, so containers created before an agent restart keep a working id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoleIds {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution: Option<String>,
}

impl RoleIds {
    /// Fresh ids for the roles the definition names.
    pub fn for_definition(def: &TaskDefinition) -> RoleIds {
        RoleIds {
            task: def.task_role_arn.as_ref().map(|_| new_task_id()),
            execution: def.execution_role_arn.as_ref().map(|_| new_task_id()),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.task.is_none() && self.execution.is_none()
    }

    /// The relative URI a task container gets, when the task has a role.
    pub fn relative_uri(&self) -> Option<String> {
        self.task
            .as_ref()
            .map(|id| format!("{CREDENTIALS_PATH}{id}"))
    }
}

/// Which of a task's roles an id stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoleKind {
    /// `taskRoleArn`: the application's own credentials.
    Task,
    /// `executionRoleArn`: berth's (and the Engine's awslogs driver's) work for the task.
    Execution,
}

/// One request for a role's credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleRequest {
    /// The full role ARN (a role name already completed with the host's account and partition).
    pub role_arn: String,
    /// The STS session name ([`session_name`]).
    pub session_name: String,
}

/// Temporary credentials of a role, in ECS's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleCredentials {
    pub role_arn: String,
    pub access_key_id: String,
    pub secret_access_key: SecretValue,
    /// Absent only for long-term keys of a local source.
    pub session_token: Option<SecretValue>,
    /// When they expire, milliseconds since the epoch.
    pub expiration_ms: i64,
}

/// Why a role's credentials cannot be had. The text names the role, the service and endpoint
/// where there is one, and AWS's own words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RoleError {
    /// The service answered with an error (`AccessDenied`, …): the code and message are AWS's.
    #[error("{service} refused role {role_arn} at {endpoint}: {code}: {message}")]
    Refused {
        role_arn: String,
        service: String,
        endpoint: String,
        code: String,
        message: String,
    },
    /// The service could not be reached (connect, TLS, timeout).
    #[error("cannot reach {service} at {endpoint} for role {role_arn}: {message}")]
    Unreachable {
        role_arn: String,
        service: String,
        endpoint: String,
        message: String,
    },
    /// This host has no source for the role (no AWS access, no local file).
    #[error("no credentials for role {role_arn}: {why}")]
    Unavailable { role_arn: String, why: String },
}

/// The boxed future the seam returns (object-safe), as the engine's other seams do.
pub use futures_util::future::BoxFuture;

/// A source of role credentials. Implementations cache and refresh as they see fit; the engine and
/// the credentials endpoint ask it on every request and serve what it answers.
pub trait RoleSource: Send + Sync + 'static {
    fn credentials<'a>(
        &'a self,
        request: &'a RoleRequest,
    ) -> BoxFuture<'a, Result<RoleCredentials, RoleError>>;

    /// What this source is, for logs and `berth validate` ("STS at http://…", "files in DIR").
    fn describe(&self) -> String;
}

/// The STS session name for a task's role: names the task (`berth-<family>-<first 12 of the task
/// id>`), cut to STS's 64 characters and to its characters (`\w+=,.@-`).
pub fn session_name(family: &str, task_id: &str) -> String {
    let short: String = task_id.chars().take(12).collect();
    let mut s: String = format!("berth-{family}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_+=,.@-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    s.truncate(64 - short.len() - 1);
    format!("{s}-{short}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_name_names_the_task_within_stss_rules() {
        assert_eq!(
            session_name("web", "0123456789abcdef0123456789abcdef"),
            "berth-web-0123456789ab"
        );
        let long = session_name(&"f".repeat(255), "0123456789abcdef");
        assert_eq!(long.len(), 64);
        assert!(long.ends_with("-0123456789ab"));
    }

    #[test]
    fn ids_exist_for_the_roles_named_and_are_random() {
        let mut def = TaskDefinition::new("t", Vec::new());
        assert!(RoleIds::for_definition(&def).is_empty());
        def.task_role_arn = Some("arn:aws:iam::123456789012:role/app".into());
        let a = RoleIds::for_definition(&def);
        let b = RoleIds::for_definition(&def);
        assert!(a.execution.is_none());
        assert_ne!(a.task, b.task);
        assert_eq!(a.task.as_ref().map(String::len), Some(32));
        assert!(a.relative_uri().unwrap().starts_with("/v2/credentials/"));
    }
}
