//! Task and container state: the plain, serializable data the decision core reads and the actor owns.
//!
//! Invariants kept by every method here: a container's known status and desired status only ever move
//! forward (a request to move backwards is ignored), and the task's desired status only moves forward.
//! The task's known status is never stored: it is derived from the containers ([`TaskState::known`]).
//! Times are Unix milliseconds (wall clock), so the state survives a restart and can be shown to people.

use berth_model::{ContainerDefinition, TaskDefinition};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Unix time in milliseconds.
pub type Millis = i64;

/// The exit code ECS gives a container that was stopped before it could run (dependency failure).
pub const EXIT_CODE_NOT_RUN: i64 = 143;

/// Container (and task) status, ordered: comparisons use the order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Status {
    None,
    Pulled,
    Created,
    Running,
    Stopped,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::None => "NONE",
            Status::Pulled => "PULLED",
            Status::Created => "CREATED",
            Status::Running => "RUNNING",
            Status::Stopped => "STOPPED",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Docker health status as reported by `health_status` events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    /// No health check, or no result yet.
    #[default]
    Unknown,
    Starting,
    Healthy,
    Unhealthy,
}

impl Health {
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Unknown => "UNKNOWN",
            Health::Starting => "STARTING",
            Health::Healthy => "HEALTHY",
            Health::Unhealthy => "UNHEALTHY",
        }
    }
}

/// Why a task's desired status became STOPPED.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StopKind {
    /// An essential container ran and exited.
    EssentialExited,
    /// Something failed before the task's essential containers could run: a pull, create, start,
    /// a dependency that can never be met, a volume.
    Failed,
    /// Someone asked (Ctrl-C, the API).
    Requested,
}

/// The Docker operation currently in flight for a container (at most one at a time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Pull,
    Create,
    Start,
    Stop,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerState {
    /// The name in the task definition.
    pub name: String,
    /// The Docker container name, decided before `create` is ever called.
    pub docker_name: String,
    /// The container's credential for the task metadata endpoint (`/v4/<id>`): 128 random bits,
    /// never derived from anything a container can see or guess.
    pub metadata_id: String,
    pub docker_id: Option<String>,
    pub desired: Status,
    pub known: Status,
    pub health: Health,
    pub exit_code: Option<i64>,
    /// Why the container stopped (or will stop), when berth decided it.
    pub reason: Option<String>,
    /// The operation in flight, if any; nothing else is started for this container meanwhile.
    pub in_flight: Option<Op>,
    /// True once a stop has been sent to Docker (so it is not sent twice).
    pub stop_sent: bool,
    pub pull_started_at: Option<Millis>,
    pub pull_stopped_at: Option<Millis>,
    pub created_at: Option<Millis>,
    pub started_at: Option<Millis>,
    pub finished_at: Option<Millis>,
}

impl ContainerState {
    fn new(name: &str, docker_name: String) -> Self {
        ContainerState {
            name: name.to_string(),
            docker_name,
            metadata_id: new_task_id(),
            docker_id: None,
            desired: Status::Running,
            known: Status::None,
            health: Health::Unknown,
            exit_code: None,
            reason: None,
            in_flight: None,
            stop_sent: false,
            pull_started_at: None,
            pull_stopped_at: None,
            created_at: None,
            started_at: None,
            finished_at: None,
        }
    }

    /// True when the container's process ran (it reached RUNNING at some point).
    pub fn ran(&self) -> bool {
        self.started_at.is_some()
    }

    /// Raise the known status; lower values are ignored. Returns whether it changed.
    pub fn raise_known(&mut self, status: Status) -> bool {
        if status > self.known {
            self.known = status;
            true
        } else {
            false
        }
    }

    /// Raise the desired status; lower values are ignored. Returns whether it changed.
    pub fn raise_desired(&mut self, status: Status) -> bool {
        if status > self.desired {
            self.desired = status;
            true
        } else {
            false
        }
    }
}

/// The whole state of one task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskState {
    /// 32 lowercase hex characters.
    pub id: String,
    pub definition: TaskDefinition,
    /// One entry per container definition, in definition order.
    pub containers: Vec<ContainerState>,
    /// RUNNING or STOPPED.
    pub desired: Status,
    /// Why the task stopped (set once, when its desired status first became STOPPED).
    pub stopped_reason: Option<String>,
    /// The kind of that reason.
    pub stop_kind: Option<StopKind>,
    /// When the first essential container stopped.
    pub execution_stopped_at: Option<Millis>,
    pub created_at: Millis,
}

/// A fresh random task id: 128 random bits as 32 lowercase hex characters.
pub fn new_task_id() -> String {
    let bits: u128 = rand::random();
    format!("{bits:032x}")
}

/// The deterministic Docker name of a container:
/// `berth-<family>-<revision>-<container>-<first 12 characters of the task id>`.
pub fn docker_name(def: &TaskDefinition, container: &ContainerDefinition, task_id: &str) -> String {
    let short: String = task_id.chars().take(12).collect();
    format!(
        "berth-{}-{}-{}-{}",
        def.family, def.revision, container.name, short
    )
}

impl TaskState {
    /// A new task in status NONE, every container's Docker name already decided.
    pub fn new(id: String, definition: TaskDefinition, now: Millis) -> Self {
        let containers = definition
            .container_definitions
            .iter()
            .map(|c| ContainerState::new(&c.name, docker_name(&definition, c, &id)))
            .collect();
        TaskState {
            id,
            definition,
            containers,
            desired: Status::Running,
            stopped_reason: None,
            stop_kind: None,
            execution_stopped_at: None,
            created_at: now,
        }
    }

    /// The task's known status, derived from its containers: STOPPED when every container is
    /// STOPPED; otherwise the lowest known status, where a STOPPED container counts as RUNNING (it
    /// has passed RUNNING, or will never run and so holds nothing back).
    pub fn known(&self) -> Status {
        if self.containers.iter().all(|c| c.known == Status::Stopped) {
            return Status::Stopped;
        }
        self.containers
            .iter()
            .map(|c| c.known.min(Status::Running))
            .min()
            .unwrap_or(Status::Stopped)
    }

    /// Index of the container with this definition name.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.containers.iter().position(|c| c.name == name)
    }

    /// Index of the container with this Docker id.
    pub fn index_of_docker_id(&self, id: &str) -> Option<usize> {
        self.containers
            .iter()
            .position(|c| c.docker_id.as_deref() == Some(id))
    }

    /// The definition of container `i` (same index as `containers`).
    pub fn def(&self, i: usize) -> &ContainerDefinition {
        &self.definition.container_definitions[i]
    }

    /// True once the task is STOPPED and nothing is in flight: the actor may finish.
    pub fn is_finished(&self) -> bool {
        self.known() == Status::Stopped && self.containers.iter().all(|c| c.in_flight.is_none())
    }

    /// Ask the task to stop (idempotent; the first reason wins).
    pub fn request_stop(&mut self, reason: &str, kind: StopKind) {
        if self.desired < Status::Stopped {
            self.desired = Status::Stopped;
            self.stopped_reason = Some(reason.to_string());
            self.stop_kind = Some(kind);
        }
        for c in &mut self.containers {
            c.raise_desired(Status::Stopped);
        }
    }

    /// When the task's first pull started (ECS `PullStartedAt`).
    pub fn pull_started_at(&self) -> Option<Millis> {
        self.containers
            .iter()
            .filter_map(|c| c.pull_started_at)
            .min()
    }

    /// When the task's last pull ended (ECS `PullStoppedAt`).
    pub fn pull_stopped_at(&self) -> Option<Millis> {
        self.containers
            .iter()
            .filter_map(|c| c.pull_stopped_at)
            .max()
    }

    /// The essential container whose stop ended the task, if any: the first one (by time) that stopped.
    pub fn stopping_essential(&self) -> Option<&ContainerState> {
        self.containers
            .iter()
            .enumerate()
            .filter(|(i, c)| self.def(*i).essential && c.known == Status::Stopped)
            .min_by_key(|(_, c)| c.finished_at.unwrap_or(i64::MAX))
            .map(|(_, c)| c)
    }
}
