//! What the engine tells the outside world: status-change events and the final summary, in the exact
//! JSON shapes `berth run --output json` prints (and the agent's event stream will serve).
//!
//! Events are derived by comparing two snapshots of a task ([`changes`]), so the actor never has to
//! remember to report a change: whatever changed between two published states is reported. The
//! exceptions are about Docker calls rather than statuses, and are sent by the effect that makes
//! the call: pulls, and restarts ([`Report::Restarted`], once per `docker start` of a restart that
//! succeeded; a restart keeps the container RUNNING, so no status changes).

use crate::state::{Millis, Status, StopKind, TaskState};
use serde::Serialize;

/// RFC 3339 UTC with millisecond precision, e.g. `2026-11-30T01:23:45.678Z`.
pub fn rfc3339(ms: Millis) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    match time::OffsetDateTime::from_unix_timestamp_nanos(nanos) {
        Ok(t) => {
            let (y, mo, d) = (t.year(), u8::from(t.month()), t.day());
            let (h, mi, s, milli) = (t.hour(), t.minute(), t.second(), t.millisecond());
            format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{milli:03}Z")
        }
        // Out of range only for times thousands of years away; show the raw value rather than fail.
        Err(_) => format!("@{ms}ms"),
    }
}

/// The current wall-clock time in Unix milliseconds.
pub fn now_ms() -> Millis {
    let now = time::OffsetDateTime::now_utc();
    i64::try_from(now.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX)
}

/// One line of `--output json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum Report {
    Task {
        time: String,
        task: String,
        family: String,
        known: Status,
        desired: Status,
    },
    Container {
        time: String,
        task: String,
        container: String,
        known: Status,
        desired: Status,
        #[serde(rename = "exitCode")]
        exit_code: Option<i64>,
        reason: Option<String>,
        #[serde(rename = "dockerId")]
        docker_id: Option<String>,
    },
    Pull {
        time: String,
        task: String,
        container: String,
        image: String,
        phase: PullPhase,
        reason: Option<String>,
    },
    /// A container restarted in place under its restart policy, after an exit with `exit_code`;
    /// `restart_count` counts this restart.
    Restarted {
        time: String,
        task: String,
        container: String,
        #[serde(rename = "restartCount")]
        restart_count: u32,
        #[serde(rename = "exitCode")]
        exit_code: Option<i64>,
        #[serde(rename = "dockerId")]
        docker_id: String,
    },
    /// A stop failed: the container still runs (known RUNNING, desired STOPPED) and the stop is
    /// sent again at `retryAt`. One per failed attempt.
    #[serde(rename = "stopFailed")]
    StopFailed {
        time: String,
        task: String,
        container: String,
        /// The stop's error (`CannotStopContainerError: …`, Docker's words).
        error: String,
        /// Failed stops in a row (since the stop was last asked for).
        attempt: u32,
        #[serde(rename = "retryAt")]
        retry_at: Option<String>,
    },
    /// Bytes and layers of a pull in progress.
    #[serde(rename = "pullProgress")]
    PullProgress {
        task: String,
        container: String,
        image: String,
        layers: u32,
        #[serde(rename = "layersDone")]
        layers_done: u32,
        bytes: u64,
        #[serde(rename = "bytesTotal")]
        bytes_total: u64,
    },
    /// Image cleanup removed an image (the agent's event stream).
    #[serde(rename = "image-removed")]
    ImageRemoved {
        time: String,
        /// Its first name, or its id when it had none.
        image: String,
        #[serde(rename = "imageId")]
        image_id: String,
        names: Vec<String>,
        /// Bytes freed: Docker's size of the image.
        bytes: u64,
        /// What removed it: `cycle` (the periodic cleanup), `disk-pressure` or `prune`.
        trigger: String,
    },
}

impl Report {
    /// Progress reports are for people (progress bars); `--output json` leaves them out.
    pub fn is_progress(&self) -> bool {
        matches!(self, Report::PullProgress { .. })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PullPhase {
    Started,
    Done,
    Failed,
    Cached,
}

/// The status changes between two snapshots of the same task (containers first, then the task),
/// and each stop that failed between them.
pub fn changes(before: Option<&TaskState>, after: &TaskState, now: Millis) -> Vec<Report> {
    let time = rfc3339(now);
    let mut out = Vec::new();
    for (i, c) in after.containers.iter().enumerate() {
        let prev = before.and_then(|b| b.containers.get(i));
        let changed = match prev {
            None => true,
            Some(p) => {
                p.known != c.known
                    || p.desired != c.desired
                    || p.exit_code != c.exit_code
                    || p.reason != c.reason
                    || p.docker_id != c.docker_id
            }
        };
        let failures_before = prev.map_or(0, |p| p.stop_failures);
        if c.stop_failures > failures_before
            && let Some(error) = &c.stop_error
        {
            out.push(Report::StopFailed {
                time: time.clone(),
                task: after.id.clone(),
                container: c.name.clone(),
                error: error.clone(),
                attempt: c.stop_failures,
                retry_at: c.stop_retry_at.map(rfc3339),
            });
        }
        if changed {
            out.push(Report::Container {
                time: time.clone(),
                task: after.id.clone(),
                container: c.name.clone(),
                known: c.known,
                desired: c.desired,
                exit_code: c.exit_code,
                reason: c.reason.clone(),
                docker_id: c.docker_id.clone(),
            });
        }
    }
    let task_changed = match before {
        None => true,
        Some(b) => b.known() != after.known() || b.desired != after.desired,
    };
    if task_changed {
        out.push(Report::Task {
            time,
            task: after.id.clone(),
            family: after.definition.family.clone(),
            known: after.known(),
            desired: after.desired,
        });
    }
    out
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerSummary {
    pub name: String,
    pub known: Status,
    pub exit_code: Option<i64>,
    pub reason: Option<String>,
    pub docker_id: Option<String>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
}

/// The last line of `--output json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub event: &'static str,
    pub time: String,
    pub task: String,
    pub known: Status,
    pub stopped_reason: Option<String>,
    pub exit_code: i64,
    pub pull_started_at: Option<String>,
    pub pull_stopped_at: Option<String>,
    pub containers: Vec<ContainerSummary>,
}

/// The exit status of `berth run` for a stopped task: the exit code of the essential container whose
/// exit stopped the task, or 125 when the task stopped because something failed before its
/// essential containers could run (pull, create, start, dependency, volume).
pub fn task_exit_code(state: &TaskState) -> i64 {
    if state.stop_kind == Some(StopKind::Failed) {
        return 125;
    }
    match state.stopping_essential() {
        Some(c) if c.ran() => c.exit_code.map_or(125, |code| code.clamp(0, 255)),
        Some(_) => 125,
        // No essential container stopped on its own: the task was stopped from outside.
        None => {
            let essentials_ran = state
                .containers
                .iter()
                .enumerate()
                .filter(|(i, _)| state.def(*i).essential)
                .all(|(_, c)| c.ran());
            if essentials_ran { 0 } else { 125 }
        }
    }
}

pub fn summary(state: &TaskState, now: Millis) -> Summary {
    Summary {
        event: "summary",
        time: rfc3339(now),
        task: state.id.clone(),
        known: state.known(),
        stopped_reason: state.stopped_reason.clone(),
        exit_code: task_exit_code(state),
        pull_started_at: state.pull_started_at().map(rfc3339),
        pull_stopped_at: state.pull_stopped_at().map(rfc3339),
        containers: state
            .containers
            .iter()
            .map(|c| ContainerSummary {
                name: c.name.clone(),
                known: c.known,
                exit_code: c.exit_code,
                reason: c.reason.clone(),
                docker_id: c.docker_id.clone(),
                started_at: c.started_at.map(rfc3339),
                finished_at: c.finished_at.map(rfc3339),
            })
            .collect(),
    }
}
