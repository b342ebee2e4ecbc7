//! The control API's request and response bodies, shared by the server (the handlers) and the CLI
//! client (`crates/berth/src/client.rs`): one definition of every field name on the wire.
//!
//! Invariants: the JSON these types produce is the JSON docs/api.yaml documents (camelCase keys;
//! optional values are `null`, never left out, except `cleanup` on a task and `problems` on an
//! error, which are absent when there is nothing to say). The round-trip tests below pin the
//! documented shapes. Statuses are [`berth_engine::Status`] (`NONE` … `STOPPED`), so a status the
//! engine does not know fails to deserialize instead of becoming an empty column.
//!
//! Limits: the event stream (`GET /v1/events`) carries berth-engine's [`berth_engine::report::Report`]
//! objects; only the fields the client reads are typed here ([`EventHead`]).

use berth_engine::report::{self, task_exit_code};
use berth_engine::{Millis, Status, TaskState};
use serde::{Deserialize, Serialize};

/// A nullable field that must be present: `null` reads as `None`, a missing key is an error (serde
/// would otherwise read a missing `Option` as `None`, and a renamed field would go unnoticed).
fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d)
}

/// One task as `GET /v1/tasks` and `GET /v1/tasks/{id}` show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskView {
    /// 32 lowercase hex characters.
    pub task: String,
    pub family: String,
    pub revision: u32,
    pub known: Status,
    pub desired: Status,
    #[serde(deserialize_with = "present")]
    pub stopped_reason: Option<String>,
    /// `berth run`'s exit status for this task, once it is STOPPED (`null` before).
    #[serde(deserialize_with = "present")]
    pub exit_code: Option<i64>,
    /// RFC 3339, UTC, milliseconds.
    pub created_at: String,
    pub containers: Vec<ContainerView>,
    /// The cleanup state, when the agent keeps one for the task (it always does for stored tasks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleanup: Option<CleanupView>,
}

/// One container of a [`TaskView`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerView {
    /// The name in the task definition.
    pub name: String,
    pub known: Status,
    pub desired: Status,
    #[serde(deserialize_with = "present")]
    pub exit_code: Option<i64>,
    #[serde(deserialize_with = "present")]
    pub reason: Option<String>,
    /// `null` until the container is created.
    #[serde(deserialize_with = "present")]
    pub docker_id: Option<String>,
    pub docker_name: String,
    /// Restarts in place under the container's `restartPolicy` (ECS `RestartCount`); 0 from an
    /// agent that predates restarts.
    #[serde(default)]
    pub restart_count: u32,
    /// When berth last restarted it (RFC 3339), or `null`.
    #[serde(default)]
    pub last_restart_at: Option<String>,
    /// The last failed stop's error (`CannotStopContainerError: …`), `null` when no stop failed.
    /// While the container is RUNNING with desired STOPPED, the stop is retried; once it is
    /// STOPPED the error stays as history.
    #[serde(deserialize_with = "present")]
    pub stop_error: Option<String>,
    /// Failed stops in a row since the stop was last asked for.
    pub stop_failures: u32,
    /// When the failed stop is sent again (RFC 3339), `null` when none is waiting.
    #[serde(deserialize_with = "present")]
    pub stop_retry_at: Option<String>,
}

impl ContainerView {
    /// Docker still runs the container although it is to stop (desired STOPPED, known RUNNING).
    pub fn stopping(&self) -> bool {
        self.desired == Status::Stopped && self.known == Status::Running
    }
}

/// Where a task's cleanup stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CleanupView {
    /// The last refusal (`cleanup: refused: …`), kept until a retry succeeds.
    #[serde(deserialize_with = "present")]
    pub refused: Option<String>,
    /// Cleanup attempts so far.
    pub attempts: u32,
    /// When the task was seen STOPPED (RFC 3339); the cleanup wait counts from here.
    #[serde(deserialize_with = "present")]
    pub stopped_at: Option<String>,
}

impl CleanupView {
    /// The view of a cleanup record (`stopped_at` in Unix milliseconds).
    pub fn new(refused: Option<String>, attempts: u32, stopped_at: Option<Millis>) -> Self {
        CleanupView {
            refused,
            attempts,
            stopped_at: stopped_at.map(report::rfc3339),
        }
    }
}

impl TaskView {
    /// The view of a task's state (its latest snapshot, or what the store holds).
    pub fn new(state: &TaskState, cleanup: Option<CleanupView>) -> Self {
        let known = state.known();
        TaskView {
            task: state.id.clone(),
            family: state.definition.family.clone(),
            revision: state.definition.revision,
            known,
            desired: state.desired,
            stopped_reason: state.stopped_reason.clone(),
            exit_code: (known == Status::Stopped).then(|| task_exit_code(state)),
            created_at: report::rfc3339(state.created_at),
            containers: state
                .containers
                .iter()
                .map(|c| ContainerView {
                    name: c.name.clone(),
                    known: c.known,
                    desired: c.desired,
                    exit_code: c.exit_code,
                    reason: c.reason.clone(),
                    docker_id: c.docker_id.clone(),
                    docker_name: c.docker_name.clone(),
                    restart_count: c.restart_count,
                    last_restart_at: c.last_restart_at.map(report::rfc3339),
                    stop_error: c.stop_error.clone(),
                    stop_failures: c.stop_failures,
                    stop_retry_at: c.stop_retry_at.map(report::rfc3339),
                })
                .collect(),
            cleanup,
        }
    }

    /// The container with this definition name.
    pub fn container(&self, name: &str) -> Option<&ContainerView> {
        self.containers.iter().find(|c| c.name == name)
    }
}

/// `POST /v1/tasks` → 201.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmitResponse {
    /// The new task's id.
    pub task: String,
    /// What the definition check warned about (`PATH: message`); the task runs anyway.
    pub warnings: Vec<String>,
}

/// `POST /v1/tasks/{id}/stop` and `DELETE /v1/tasks/{id}` → 202: the request is taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accepted {
    pub task: String,
}

/// Every error answer (4xx and 5xx).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong, for people.
    pub error: String,
    /// For an invalid task definition (400): every problem, `PATH: message`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problems: Option<Vec<String>>,
}

/// The query of `GET /v1/tasks`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListQuery {
    /// Only tasks whose known status is this one (case-insensitive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Only tasks of this family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
}

impl ListQuery {
    /// True when the task passes every filter given.
    pub fn matches(&self, t: &TaskView) -> bool {
        self.status
            .as_deref()
            .is_none_or(|s| t.known.as_str().eq_ignore_ascii_case(s))
            && self.family.as_deref().is_none_or(|f| t.family == f)
    }
}

/// `GET /v1/health` → 200 when `ok`, 503 when `degraded`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    /// `ok`, or `degraded` while the agent cannot do its work safely (its state store cannot be
    /// written: tasks are held, submits refused).
    pub status: HealthStatus,
    /// Tasks the agent tracks.
    pub tasks: usize,
    /// Why the agent is degraded (absent when `ok`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The tasks held (no Docker call) until their state can be saved, in id order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_tasks: Vec<String>,
}

impl Health {
    /// A healthy agent tracking `tasks` tasks.
    pub fn ok(tasks: usize) -> Health {
        Health {
            status: HealthStatus::Ok,
            tasks,
            reason: None,
            held_tasks: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthStatus {
    Ok,
    Degraded,
}

/// Why the agent cannot work safely now (see [`Health`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Degraded {
    /// What fails and what to do, e.g. `the state store cannot be written: … (free space in …)`.
    pub reason: String,
    /// Tasks held until their state can be saved.
    pub held_tasks: Vec<String>,
}

/// The fields of an event line (`GET /v1/events`) the client reads; the rest is ignored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventHead {
    /// `task`, `container` or `pull`.
    pub event: String,
    pub task: String,
    /// Present on `task` and `container` events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub known: Option<Status>,
}

impl EventHead {
    /// True for the event that says task `id` has stopped.
    pub fn is_task_stopped(&self, id: &str) -> bool {
        self.event == "task" && self.task == id && self.known == Some(Status::Stopped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// Serialize, compare with the documented JSON, read it back, compare with the value.
    fn round_trip<T>(value: &T, documented: Value)
    where
        T: Serialize + for<'de> Deserialize<'de> + PartialEq + std::fmt::Debug,
    {
        let wire = serde_json::to_value(value).expect("serializes");
        assert_eq!(wire, documented, "the documented JSON");
        let back: T = serde_json::from_value(documented).expect("deserializes");
        assert_eq!(&back, value);
    }

    fn task() -> TaskView {
        TaskView {
            task: "0123456789abcdef0123456789abcdef".into(),
            family: "web".into(),
            revision: 3,
            known: Status::Stopped,
            desired: Status::Stopped,
            stopped_reason: Some("Essential container in task exited".into()),
            exit_code: Some(0),
            created_at: "2026-11-30T01:23:45.678Z".into(),
            containers: vec![
                ContainerView {
                    name: "app".into(),
                    known: Status::Stopped,
                    desired: Status::Stopped,
                    exit_code: Some(0),
                    reason: None,
                    docker_id: Some("d0cce7".into()),
                    docker_name: "berth-web-3-app-0123456789ab".into(),
                    restart_count: 2,
                    last_restart_at: Some("2026-11-30T01:23:50.000Z".into()),
                    stop_error: Some("CannotStopContainerError: refused".into()),
                    stop_failures: 1,
                    stop_retry_at: None,
                },
                ContainerView {
                    name: "side".into(),
                    known: Status::None,
                    desired: Status::Stopped,
                    exit_code: None,
                    reason: Some("dependency app can never be met".into()),
                    docker_id: None,
                    docker_name: "berth-web-3-side-0123456789ab".into(),
                    restart_count: 0,
                    last_restart_at: None,
                    stop_error: None,
                    stop_failures: 0,
                    stop_retry_at: None,
                },
            ],
            cleanup: Some(CleanupView {
                refused: None,
                attempts: 0,
                stopped_at: Some("2026-11-30T01:24:00.000Z".into()),
            }),
        }
    }

    #[test]
    fn a_task_is_the_documented_json() {
        round_trip(
            &task(),
            json!({
                "task": "0123456789abcdef0123456789abcdef",
                "family": "web",
                "revision": 3,
                "known": "STOPPED",
                "desired": "STOPPED",
                "stoppedReason": "Essential container in task exited",
                "exitCode": 0,
                "createdAt": "2026-11-30T01:23:45.678Z",
                "containers": [
                    {"name": "app", "known": "STOPPED", "desired": "STOPPED", "exitCode": 0,
                     "reason": null, "dockerId": "d0cce7", "dockerName": "berth-web-3-app-0123456789ab",
                     "restartCount": 2, "lastRestartAt": "2026-11-30T01:23:50.000Z",
                     "stopError": "CannotStopContainerError: refused", "stopFailures": 1,
                     "stopRetryAt": null},
                    {"name": "side", "known": "NONE", "desired": "STOPPED", "exitCode": null,
                     "reason": "dependency app can never be met", "dockerId": null,
                     "dockerName": "berth-web-3-side-0123456789ab",
                     "restartCount": 0, "lastRestartAt": null, "stopError": null,
                     "stopFailures": 0, "stopRetryAt": null}
                ],
                "cleanup": {"refused": null, "attempts": 0, "stoppedAt": "2026-11-30T01:24:00.000Z"}
            }),
        );
    }

    #[test]
    fn a_running_task_has_nulls_and_no_cleanup_when_none_is_kept() {
        let mut t = task();
        t.known = Status::Running;
        t.desired = Status::Running;
        t.stopped_reason = None;
        t.exit_code = None;
        t.containers.truncate(0);
        t.cleanup = None;
        round_trip(
            &t,
            json!({
                "task": "0123456789abcdef0123456789abcdef", "family": "web", "revision": 3,
                "known": "RUNNING", "desired": "RUNNING", "stoppedReason": null, "exitCode": null,
                "createdAt": "2026-11-30T01:23:45.678Z", "containers": []
            }),
        );
    }

    #[test]
    fn a_renamed_or_missing_field_fails_instead_of_becoming_empty() {
        let mut v = serde_json::to_value(task()).expect("serializes");
        v["stopped_reason"] = v["stoppedReason"].take();
        v.as_object_mut().expect("object").remove("stoppedReason");
        assert!(serde_json::from_value::<TaskView>(v).is_err());
        let mut v = serde_json::to_value(task()).expect("serializes");
        v["containers"][1]
            .as_object_mut()
            .expect("object")
            .remove("dockerId");
        assert!(serde_json::from_value::<TaskView>(v).is_err());
        let mut v = serde_json::to_value(task()).expect("serializes");
        v["known"] = json!("EXITED");
        assert!(serde_json::from_value::<TaskView>(v).is_err());
    }

    #[test]
    fn the_view_of_a_state_derives_known_and_the_exit_code() {
        let def = berth_model::parse(
            r#"{"family": "f", "containerDefinitions": [{"name": "a", "image": "busybox"}]}"#,
        )
        .expect("valid")
        .definition;
        let mut state = TaskState::new("ab".repeat(16), def, 0);
        let v = TaskView::new(&state, None);
        assert_eq!(v.known, Status::None);
        assert_eq!(v.exit_code, None);
        assert_eq!(v.created_at, "1970-01-01T00:00:00.000Z");
        assert_eq!(v.containers[0].docker_name, state.containers[0].docker_name);
        state.containers[0].known = Status::Stopped;
        state.containers[0].exit_code = Some(0);
        state.containers[0].started_at = Some(1);
        let v = TaskView::new(&state, Some(CleanupView::new(None, 2, Some(1000))));
        assert_eq!(v.known, Status::Stopped);
        assert_eq!(v.exit_code, Some(task_exit_code(&state)));
        assert_eq!(
            v.cleanup.and_then(|c| c.stopped_at).as_deref(),
            Some("1970-01-01T00:00:01.000Z")
        );
    }

    #[test]
    fn submit_accepted_health_and_errors_are_the_documented_json() {
        round_trip(
            &SubmitResponse {
                task: "ab".into(),
                warnings: vec!["containerDefinitions[0].memory: low".into()],
            },
            json!({"task": "ab", "warnings": ["containerDefinitions[0].memory: low"]}),
        );
        round_trip(&Accepted { task: "ab".into() }, json!({"task": "ab"}));
        round_trip(&Health::ok(2), json!({"status": "ok", "tasks": 2}));
        round_trip(
            &ErrorBody {
                error: "no task x".into(),
                problems: None,
            },
            json!({"error": "no task x"}),
        );
        round_trip(
            &ErrorBody {
                error: "invalid task definition".into(),
                problems: Some(vec!["family: required".into()]),
            },
            json!({"error": "invalid task definition", "problems": ["family: required"]}),
        );
    }

    #[test]
    fn the_list_query_filters_by_status_and_family() {
        let t = task();
        assert!(ListQuery::default().matches(&t));
        let q = |status: Option<&str>, family: Option<&str>| ListQuery {
            status: status.map(Into::into),
            family: family.map(Into::into),
        };
        assert!(q(Some("stopped"), Some("web")).matches(&t));
        assert!(!q(Some("RUNNING"), None).matches(&t));
        assert!(!q(None, Some("db")).matches(&t));
    }

    #[test]
    fn event_lines_of_the_engine_are_read_by_their_head() {
        let line = json!({"event": "task", "time": "2026-11-30T01:23:45.678Z", "task": "ab",
                          "family": "f", "known": "STOPPED", "desired": "STOPPED"});
        let head: EventHead = serde_json::from_value(line).expect("event");
        assert!(head.is_task_stopped("ab"));
        assert!(!head.is_task_stopped("cd"));
        let pull = json!({"event": "pull", "time": "t", "task": "ab", "container": "a",
                          "image": "i", "phase": "done", "reason": null});
        let head: EventHead = serde_json::from_value(pull).expect("event");
        assert_eq!(head.known, None);
        assert!(!head.is_task_stopped("ab"));
    }
}

/// One image as `GET /v1/images` shows it: what Docker has, what berth tracks, and whether image
/// cleanup would remove it now (`candidate`) or why not (`reason`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageView {
    pub image_id: String,
    /// Docker's names of the image (`repository:tag`); empty for an untagged image.
    pub names: Vec<String>,
    pub size: u64,
    /// berth pulled it or a task of berth's used it.
    pub tracked: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_pulled: Option<String>,
    /// Last use (tracked), or when Docker created it (untracked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used: Option<String>,
    /// Tasks that used it, most recent last.
    #[serde(default)]
    pub tasks: Vec<String>,
    /// `berth images prune` would remove it now.
    pub candidate: bool,
    /// Why it stays, when it is not a candidate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `GET /v1/images`: Docker's images, candidates first in removal order; tracked references
/// Docker no longer has.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImagesView {
    pub images: Vec<ImageView>,
    #[serde(default)]
    pub absent: Vec<String>,
}

/// The query of `POST /v1/images/prune`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PruneQuery {
    /// Only say what would be removed.
    #[serde(default)]
    pub dry_run: bool,
}

/// One image a prune removed (or would remove, or failed to).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrunedImage {
    pub image_id: String,
    pub names: Vec<String>,
    /// Bytes freed (Docker's size of the image); the image's size in a dry run.
    pub bytes: u64,
    /// Why it was not removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `POST /v1/images/prune`'s answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PruneResponse {
    pub dry_run: bool,
    pub images: Vec<PrunedImage>,
    pub bytes_freed: u64,
}
