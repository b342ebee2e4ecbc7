//! Task and container state: the plain, serializable data the decision core reads and the actor owns.
//!
//! Invariants kept by every method here: a container's known status and desired status only ever move
//! forward (a request to move backwards is ignored), and the task's desired status only moves forward.
//! The task's known status is never stored: it is derived from the containers ([`TaskState::known`]).
//! Times are Unix milliseconds (wall clock), so the state survives a restart and can be shown to people.
//! Fields added after the first stored format (a container's stop retry: `stopError`,
//! `stopFailures`, `stopRetryAt`; the task's `extraLabels`) have serde defaults, so states stored before them still load, and
//! are left out while they hold their default, so a state that never needed them is saved exactly
//! as before.
//!
//! References between containers (`dependsOn`, `volumesFrom`, `links`) are resolved to container indexes
//! once, through the model's [`DependencyGraph`]: when a state is built ([`TaskState::new`]), or
//! on first use after it was read back from the store ([`TaskState::wiring`]). The resolution is
//! derived data, never saved, so the saved format is the one older berths wrote and read. It
//! assumes the definition's containers and their references do not change after the state is
//! built (nothing in berth changes them).

use crate::pause;
use berth_model::{Condition, ContainerDefinition, DependencyGraph, TaskDefinition};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::OnceLock;

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
    /// `docker start` of the same container after it exited, under its restart policy.
    Restart,
}

/// An exit of a container with an enabled restart policy, not judged yet: the container stays
/// known RUNNING (a restart is not a stop) until the decision core restarts it or settles it
/// STOPPED ([`crate::restart::judge`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingExit {
    pub exit_code: Option<i64>,
    /// When it exited (Docker's time).
    pub at: Millis,
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
    /// True while a stop is sent to Docker and not answered (so it is not sent twice); false
    /// again after a failed stop, which is retried.
    pub stop_sent: bool,
    /// The last failed stop's error, kept after the container stops (history for `inspect`).
    /// A failed stop never makes a container STOPPED: only Docker saying it no longer runs
    /// does (an exit, `die`, an inspect, not found).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_error: Option<String>,
    /// Stops that failed in a row since the stop was last asked for (`berth stop` starts the
    /// count again); the next attempt waits [`crate::decide::STOP_RETRY`]'s delay for it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stop_failures: u32,
    /// When the next stop may be sent after a failed one (None: now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_retry_at: Option<Millis>,
    pub pull_started_at: Option<Millis>,
    pub pull_stopped_at: Option<Millis>,
    pub created_at: Option<Millis>,
    pub started_at: Option<Millis>,
    pub finished_at: Option<Millis>,
    /// Restarts under the container's `restartPolicy` (ECS `RestartCount`), counted when decided,
    /// before `docker start`, as ECS counts them. Absent from states saved before berth restarted
    /// containers, hence the defaults.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub restart_count: u32,
    /// When berth last decided to restart it (ECS `LastRestartAt`): the attempt period counts from
    /// here once there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_restart_at: Option<Millis>,
    /// The exit code of the exit that led to the last restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_restart_exit_code: Option<i64>,
    /// An exit waiting for the restart rule (see [`PendingExit`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_exit: Option<PendingExit>,
    /// A restart decided and counted whose `docker start` is not confirmed yet: performed (not
    /// counted again) by the next decision, or by the next agent after a crash.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub restart_owed: bool,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
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
            stop_error: None,
            stop_failures: 0,
            stop_retry_at: None,
            pull_started_at: None,
            pull_stopped_at: None,
            created_at: None,
            started_at: None,
            finished_at: None,
            restart_count: 0,
            last_restart_at: None,
            last_restart_exit_code: None,
            pending_exit: None,
            restart_owed: false,
        }
    }

    /// True when the container's process ran (it reached RUNNING at some point).
    pub fn ran(&self) -> bool {
        self.started_at.is_some()
    }

    /// True once berth has sent this container a stop (answered or not, failed or not): its exit
    /// is berth's doing, not something to explain.
    pub fn stop_asked(&self) -> bool {
        self.stop_sent || self.stop_error.is_some()
    }

    /// True while Docker still runs the container although it is to stop (desired STOPPED,
    /// known RUNNING): `berth ps` shows it as STOPPING.
    pub fn stopping(&self) -> bool {
        self.desired == Status::Stopped && self.known == Status::Running
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

/// How one container is wired to the others, by container index: derived from the definition
/// through the model's [`DependencyGraph`] (a name resolves to the first container with that name).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Wiring {
    /// What the container waits for (`dependsOn`), in `dependsOn` order, with the condition.
    pub depends_on: Vec<(usize, Condition)>,
    /// Whose volumes it mounts (`volumesFrom`), in `volumesFrom` order.
    pub volumes_from: Vec<usize>,
    /// The containers it links to (`links`), in `links` order: each gates it like a `START`
    /// dependency (created before it is created, running before it starts).
    pub links: Vec<usize>,
    /// The task's pause container, when it has one and this is another container: the owner of
    /// the namespaces this container joins (`container:<pause>`). It gates like a link: created
    /// before this one is created, running before it starts (see [`crate::pause`]).
    pub namespace_owner: Option<usize>,
    /// Who must stop before it stops: every other container that waits for it, mounts its
    /// volumes or links to it (for the pause container: every other container), ascending, each
    /// once.
    pub dependents: Vec<usize>,
    /// Set when a reference names no container in the task (only a hand-built definition can have
    /// one; validation rejects it): why the container can never run. The first unknown `dependsOn`
    /// name is reported, else the first unknown `volumesFrom` source, else the first unknown link.
    pub unresolved: Option<String>,
}

/// The wiring of every container of `definition`, in definition order.
fn wire(definition: &TaskDefinition) -> Vec<Wiring> {
    let graph = DependencyGraph::new(definition);
    let known = |name: &str| graph.index_of(name).is_some();
    let mut wiring = definition
        .container_definitions
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut dependents: Vec<usize> = graph
                .dependents(i)
                .iter()
                .map(|&(j, _)| j)
                .chain(graph.volume_users(i).iter().copied())
                .chain(graph.link_users(i).iter().copied())
                .filter(|&j| j != i)
                .collect();
            dependents.sort_unstable();
            dependents.dedup();
            let unresolved = c
                .depends_on
                .iter()
                .find(|d| !known(&d.container_name))
                .map(|d| format!("dependency {} is not in the task", d.container_name))
                .or_else(|| {
                    c.volumes_from
                        .iter()
                        .find(|v| !known(&v.source_container))
                        .map(|v| {
                            format!(
                                "volumesFrom source {} is not in the task",
                                v.source_container
                            )
                        })
                })
                .or_else(|| {
                    c.links
                        .iter()
                        .find(|l| !known(&l.container_name))
                        .map(|l| format!("link target {} is not in the task", l.container_name))
                });
            Wiring {
                depends_on: graph.dependencies(i).to_vec(),
                volumes_from: graph.volumes_from(i).to_vec(),
                links: graph.links(i).iter().map(|(j, _)| *j).collect(),
                namespace_owner: None,
                dependents,
                unresolved,
            }
        })
        .collect::<Vec<_>>();
    // The pause container owns the namespaces every other container joins: it comes first and
    // goes last.
    if let Some(p) = pause_index_of(definition) {
        let others: Vec<usize> = (0..wiring.len()).filter(|&j| j != p).collect();
        for &j in &others {
            wiring[j].namespace_owner = Some(p);
        }
        wiring[p].dependents = others;
    }
    wiring
}

/// The index of the pause container in a definition, if it has one.
fn pause_index_of(definition: &TaskDefinition) -> Option<usize> {
    definition
        .container_definitions
        .iter()
        .position(|c| pause::is_pause(&c.name))
}

/// The wiring of a task's containers, built at most once from the definition. Not saved (an empty
/// cell after loading is filled on first use) and left out of comparisons: it is a function of the
/// definition, which the comparison already covers.
#[derive(Clone, Default)]
struct WiringCell(OnceLock<Vec<Wiring>>);

impl PartialEq for WiringCell {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl fmt::Debug for WiringCell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("WiringCell").field(&self.0.get()).finish()
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
    /// Docker labels for each of the definition's containers besides its `dockerLabels` (a cluster
    /// node's `berth.node` and `berth.service`): on the containers and in the metadata endpoint's
    /// `Labels` as if they were in every container's `dockerLabels`, where an entry of the same key
    /// gives way to them ([`crate::spec::container_labels`]). The pause container, which berth
    /// adds, has none. Left out of the saved state while empty, and empty when absent.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra_labels: BTreeMap<String, String>,
    /// The client token the submit carried (`berth submit --client-token`, ECS RunTask's
    /// `clientToken`): a retried submit with the same token is answered with this task's id
    /// instead of creating another task. Left out of the saved state while absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_token: Option<String>,
    /// The ids of the task's roles at the credentials endpoint ([`crate::roles::RoleIds`]), made
    /// with the state from the roles the definition names. Absent in states saved before berth
    /// served roles (such a task's containers have no credentials).
    #[serde(default, skip_serializing_if = "crate::roles::RoleIds::is_empty")]
    pub role_ids: crate::roles::RoleIds,
    /// One entry per container, in definition order: derived from `definition`, never saved.
    #[serde(skip)]
    wiring: WiringCell,
}

/// A fresh random task id: 128 random bits as 32 lowercase hex characters.
pub fn new_task_id() -> String {
    let bits: u128 = rand::random();
    format!("{bits:032x}")
}

/// The deterministic Docker name of a container:
/// `berth-<family>-<revision>-<container>-<first 12 characters of the task id>`.
/// The pause container's is `berth-<family>-<revision>-pause.<first 12 of the task id>`: the dot
/// keeps it apart from every container name (ECS names have no dots).
pub fn docker_name(def: &TaskDefinition, container: &ContainerDefinition, task_id: &str) -> String {
    let short: String = task_id.chars().take(12).collect();
    if pause::is_pause(&container.name) {
        return format!("berth-{}-{}-pause.{short}", def.family, def.revision);
    }
    format!(
        "berth-{}-{}-{}-{}",
        def.family, def.revision, container.name, short
    )
}

impl TaskState {
    /// A new task in status NONE, every container's Docker name already decided. A task whose
    /// containers share namespaces gets the pause container appended ([`crate::pause`]).
    pub fn new(id: String, mut definition: TaskDefinition, now: Millis) -> Self {
        if pause::needs_pause(&definition) && pause_index_of(&definition).is_none() {
            definition
                .container_definitions
                .push(pause::pause_definition());
        }
        let containers = definition
            .container_definitions
            .iter()
            .map(|c| ContainerState::new(&c.name, docker_name(&definition, c, &id)))
            .collect();
        let wiring = WiringCell(OnceLock::from(wire(&definition)));
        let role_ids = crate::roles::RoleIds::for_definition(&definition);
        TaskState {
            id,
            definition,
            containers,
            desired: Status::Running,
            stopped_reason: None,
            stop_kind: None,
            execution_stopped_at: None,
            created_at: now,
            extra_labels: BTreeMap::new(),
            client_token: None,
            role_ids,
            wiring,
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

    /// ECS's task `healthStatus`: UNHEALTHY when an essential container with a health check is,
    /// HEALTHY when every one of them is, UNKNOWN otherwise (none has a check, or no result yet).
    pub fn health_status(&self) -> Health {
        let checked: Vec<Health> = self
            .containers
            .iter()
            .zip(&self.definition.container_definitions)
            .filter(|(_, d)| d.essential && d.health_check.is_some())
            .map(|(c, _)| c.health)
            .collect();
        if checked.contains(&Health::Unhealthy) {
            Health::Unhealthy
        } else if !checked.is_empty() && checked.iter().all(|h| *h == Health::Healthy) {
            Health::Healthy
        } else {
            Health::Unknown
        }
    }

    /// Index of the container with this definition name.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.containers.iter().position(|c| c.name == name)
    }

    /// Index of the task's pause container, if it has one (always the last container).
    pub fn pause_index(&self) -> Option<usize> {
        self.containers
            .iter()
            .rposition(|c| pause::is_pause(&c.name))
    }

    /// True for the task's pause container (internal: hidden where ECS hides it).
    pub fn is_pause(&self, i: usize) -> bool {
        self.containers
            .get(i)
            .is_some_and(|c| pause::is_pause(&c.name))
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

    /// How container `i` is wired to the others (same index as `containers`). Resolved when the
    /// state was built, or on the first call after it was read back.
    pub fn wiring(&self, i: usize) -> &Wiring {
        &self.wiring.0.get_or_init(|| wire(&self.definition))[i]
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

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::{Dependency, VolumeFrom};

    fn definition() -> TaskDefinition {
        let db = ContainerDefinition::new("db", "img");
        let mut app = ContainerDefinition::new("app", "img");
        app.depends_on.push(Dependency {
            container_name: "db".into(),
            condition: Condition::Start,
        });
        app.volumes_from.push(VolumeFrom {
            source_container: "db".into(),
            read_only: true,
        });
        let mut sidecar = ContainerDefinition::new("sidecar", "img");
        sidecar.volumes_from.push(VolumeFrom {
            source_container: "app".into(),
            read_only: false,
        });
        TaskDefinition {
            revision: 1,
            ..TaskDefinition::new("f", vec![db, app, sidecar])
        }
    }

    #[test]
    fn references_are_resolved_to_indexes_when_the_state_is_built() {
        let s = TaskState::new("0123456789abcdef0123456789abcdef".into(), definition(), 0);
        assert_eq!(
            s.wiring(0).dependents,
            vec![1],
            "app waits for db and uses its volumes"
        );
        assert_eq!(s.wiring(1).depends_on, vec![(0, Condition::Start)]);
        assert_eq!(s.wiring(1).volumes_from, vec![0]);
        assert_eq!(s.wiring(1).dependents, vec![2]);
        assert_eq!(s.wiring(2).volumes_from, vec![1]);
        assert!(s.wiring(2).dependents.is_empty());
        assert!((0..3).all(|i| s.wiring(i).unresolved.is_none()));
    }

    #[test]
    fn a_failed_stop_is_saved_and_read_back_and_its_fields_are_absent_until_then() {
        let mut s = TaskState::new("0123456789abcdef0123456789abcdef".into(), definition(), 0);
        let fresh = serde_json::to_value(&s.containers[0]).expect("serialize");
        for key in ["stopError", "stopFailures", "stopRetryAt"] {
            assert!(fresh.get(key).is_none(), "{key} in {fresh}");
        }
        let c = &mut s.containers[0];
        c.stop_error = Some("CannotStopContainerError: refused".into());
        c.stop_failures = 2;
        c.stop_retry_at = Some(1234);
        let saved = serde_json::to_string(&s).expect("serialize");
        let loaded: TaskState = serde_json::from_str(&saved).expect("deserialize");
        assert_eq!(loaded, s);
        assert_eq!(loaded.containers[0].stop_failures, 2);
        assert_eq!(loaded.containers[0].stop_retry_at, Some(1234));
    }

    #[test]
    fn the_wiring_is_not_saved_and_is_rebuilt_after_loading() {
        let s = TaskState::new("0123456789abcdef0123456789abcdef".into(), definition(), 0);
        let saved = serde_json::to_value(&s).expect("serialize");
        let mut keys: Vec<&String> = saved.as_object().expect("an object").keys().collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "containers",
                "createdAt",
                "definition",
                "desired",
                "executionStoppedAt",
                "id",
                "stopKind",
                "stoppedReason"
            ]
        );
        let loaded: TaskState = serde_json::from_value(saved).expect("deserialize");
        assert_eq!(loaded, s);
        for i in 0..3 {
            assert_eq!(loaded.wiring(i), s.wiring(i));
        }
    }

    #[test]
    fn extra_labels_are_saved_when_set_and_absent_from_older_states() {
        let mut s = TaskState::new("0123456789abcdef0123456789abcdef".into(), definition(), 0);
        s.extra_labels.insert("berth.node".into(), "n1".into());
        let saved = serde_json::to_value(&s).expect("serialize");
        assert_eq!(
            saved["extraLabels"],
            serde_json::json!({"berth.node": "n1"})
        );
        let loaded: TaskState = serde_json::from_value(saved.clone()).expect("deserialize");
        assert_eq!(loaded, s);
        // A state saved before the field existed loads with none.
        let mut older = saved;
        older
            .as_object_mut()
            .expect("an object")
            .remove("extraLabels");
        let loaded: TaskState = serde_json::from_value(older).expect("deserialize");
        assert!(loaded.extra_labels.is_empty());
    }
}
