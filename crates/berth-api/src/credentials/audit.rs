//! The credentials audit log: one line per credentials request, in the ECS agent's format
//! (`agent/logger/audit`, version 2 of its GetCredentials entry):
//!
//! ```text
//! <time RFC 3339> <status> <source addr:port> "<path>" "<user agent>" <task ARN> <event> 2 <cluster> <container instance ARN>
//! ```
//!
//! `<path>` is `/v2/credentials` without the id (as ECS logs it: the id is the credential);
//! `<event>` is `GetCredentials` (task role) or `GetCredentialsExecutionRole`; for an id that
//! names no task, ECS writes nothing after the ARN field, and so does berth. An empty field is
//! `-`. berth adds one field ECS does not have: when it refused a caller by its address (the
//! caller rule), the line ends with the reason in quotes (`"refused: …"`). No credential, id or
//! secret is ever written. The file is 0600 and rotated at [`ROTATE_AT`] to `PATH.1`
//! ([`berth_fs::private::PrivateLog`]).

use crate::lock;
use berth_engine::roles::RoleKind;
use berth_fs::private::PrivateLog;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Mutex;

/// The size at which the log is rotated.
pub const ROTATE_AT: u64 = 10 * 1024 * 1024;

/// ECS's version of its GetCredentials audit entry.
const ENTRY_VERSION: u32 = 2;

/// One request, as the log records it.
pub struct Entry<'a> {
    pub status: u16,
    pub source: Option<SocketAddr>,
    pub path: &'a str,
    pub user_agent: Option<&'a str>,
    /// The task's ARN when the id named a task.
    pub task_arn: Option<&'a str>,
    pub kind: Option<RoleKind>,
    /// Why the caller was refused (the caller rule), if it was.
    pub refused: Option<&'a str>,
}

/// The log's writer (None: off).
pub struct AuditLog {
    log: Option<Mutex<PrivateLog>>,
    cluster: String,
    container_instance_arn: String,
}

impl AuditLog {
    pub fn new(path: Option<PathBuf>, cluster: String, container_instance_arn: String) -> AuditLog {
        AuditLog {
            log: path.map(|p| Mutex::new(PrivateLog::new(p, ROTATE_AT))),
            cluster,
            container_instance_arn,
        }
    }

    /// Write `entry` (a failure is logged, and the request still answered).
    pub fn record(&self, entry: &Entry<'_>) {
        let Some(log) = &self.log else {
            return;
        };
        let line = self.line(entry, &now_rfc3339());
        let mut log = lock(log);
        if let Err(e) = log.append(&line) {
            tracing::warn!(error = %e, "credentials audit log: cannot write");
        }
    }

    /// The line for `entry` at `time`.
    pub fn line(&self, e: &Entry<'_>, time: &str) -> String {
        let path = if e.path.starts_with("/v2/credentials/") {
            "/v2/credentials"
        } else {
            e.path
        };
        let mut line = format!(
            "{time} {} {} \"{}\" \"{}\" {}",
            e.status,
            e.source.map_or_else(|| "-".to_string(), |a| a.to_string()),
            field(path),
            field(e.user_agent.unwrap_or("")),
            e.task_arn.map_or_else(|| "-".to_string(), field),
        );
        match e.kind {
            Some(kind) => {
                let event = match kind {
                    RoleKind::Task => "GetCredentials",
                    RoleKind::Execution => "GetCredentialsExecutionRole",
                };
                line.push_str(&format!(
                    " {event} {ENTRY_VERSION} {} {}",
                    field(&self.cluster),
                    field(&self.container_instance_arn)
                ));
            }
            // ECS: an unknown role type writes an empty type part.
            None => line.push(' '),
        }
        if let Some(why) = e.refused {
            line.push_str(&format!(" \"refused: {}\"", field(why)));
        }
        line
    }
}

/// A value for one field: `-` when empty; control characters and quotes escaped, so a caller's
/// user agent cannot split or forge lines. (Hand-written: a few characters.)
fn field(s: &str) -> String {
    if s.is_empty() {
        return "-".to_string();
    }
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() || c == '"' || c == '\\' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

fn now_rfc3339() -> String {
    let ms = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0),
    )
    .unwrap_or(0);
    super::json::rfc3339(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log() -> AuditLog {
        AuditLog::new(
            None,
            "default".into(),
            "arn:aws:ecs:local-1:000000000000:container-instance/default/abc".into(),
        )
    }

    #[test]
    fn lines_are_in_ecss_format_without_the_id() {
        let line = log().line(
            &Entry {
                status: 200,
                source: Some("172.17.0.5:40000".parse().expect("addr")),
                path: "/v2/credentials/0123456789abcdef",
                user_agent: Some("Boto3/1.0"),
                task_arn: Some("arn:aws:ecs:local-1:000000000000:task/default/t1"),
                kind: Some(RoleKind::Task),
                refused: None,
            },
            "2026-12-02T12:00:00Z",
        );
        assert_eq!(
            line,
            "2026-12-02T12:00:00Z 200 172.17.0.5:40000 \"/v2/credentials\" \"Boto3/1.0\" arn:aws:ecs:local-1:000000000000:task/default/t1 GetCredentials 2 default arn:aws:ecs:local-1:000000000000:container-instance/default/abc"
        );
    }

    #[test]
    fn unknown_ids_and_refusals_are_recorded_as_such() {
        let unknown = log().line(
            &Entry {
                status: 400,
                source: None,
                path: "/v2/credentials/nope",
                user_agent: Some("evil\"\nforged line"),
                task_arn: None,
                kind: None,
                refused: None,
            },
            "T",
        );
        assert_eq!(
            unknown,
            "T 400 - \"/v2/credentials\" \"evil\\\"\\nforged line\" - "
        );
        let refused = log().line(
            &Entry {
                status: 400,
                source: None,
                path: "/v2/credentials/x",
                user_agent: None,
                task_arn: Some("arn:t"),
                kind: Some(RoleKind::Execution),
                refused: Some("asked from 172.17.0.9"),
            },
            "T",
        );
        assert!(
            refused.contains("GetCredentialsExecutionRole 2"),
            "{refused}"
        );
        assert!(
            refused.ends_with(" \"refused: asked from 172.17.0.9\""),
            "{refused}"
        );
    }
}
