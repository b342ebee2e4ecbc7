//! The typed values stored under the keys of [`crate::keys`]: serde JSON, camelCase like ECS's
//! API, one struct per key kind. Placement constraints and strategies keep ECS's JSON shapes
//! (`{"type": "memberOf", "expression": …}`, `{"type": "spread", "field": …}`), so a RunTask or
//! CreateService request's `placementConstraints`/`placementStrategy` arrays read as they are.
//!
//! A value that does not decode is an error naming its key ([`decode`]), never a panic: etcd is
//! shared, and another writer may have put anything there.

use berth_model::TaskDefinition;
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use std::collections::BTreeMap;

/// Resources, of a node (capacity) or a task (demand): CPU units (1024 per core, as ECS counts)
/// and memory in MiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resources {
    pub cpu: u64,
    pub memory_mib: u64,
}

/// CPU units per core, as ECS counts them.
pub const CPU_UNITS_PER_CORE: u64 = 1024;

impl Resources {
    /// A whole host's resources: every core (ECS's units) and all its memory (what a node offers
    /// unless its options say less).
    pub fn host(cores: u64, memory_mib: u64) -> Resources {
        Resources {
            cpu: cores.saturating_mul(CPU_UNITS_PER_CORE),
            memory_mib,
        }
    }
    pub fn saturating_add(self, other: Resources) -> Resources {
        Resources {
            cpu: self.cpu.saturating_add(other.cpu),
            memory_mib: self.memory_mib.saturating_add(other.memory_mib),
        }
    }
    pub fn saturating_sub(self, other: Resources) -> Resources {
        Resources {
            cpu: self.cpu.saturating_sub(other.cpu),
            memory_mib: self.memory_mib.saturating_sub(other.memory_mib),
        }
    }
}

/// `/berth/nodes/<name>`: a registered node (ECS's container instance), written by its agent
/// under the node's lease, so it disappears when the agent stops renewing it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRecord {
    pub name: String,
    /// What the node offers to tasks (the whole host unless the agent's options say less).
    pub capacity: Resources,
    /// ECS container instance attributes: the built-in `ecs.*` ones and `--node-attribute k=v`.
    #[serde(default)]
    pub attributes: BTreeMap<String, String>,
    /// The agent's version (berth's package version).
    pub version: String,
    /// When the agent registered, milliseconds since the epoch.
    pub registered_at_ms: u64,
    /// The node's lease (hex in `berth cluster nodes`); its status keys are under it too.
    pub lease: i64,
}

/// `/berth/drain/<name>`: a drain request (ECS's container instance status DRAINING). No lease:
/// a drained node stays drained across its agent's restarts until the request is deleted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DrainRecord {
    pub requested_at_ms: u64,
}

/// A task's desired status (ECS's `desiredStatus`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum DesiredStatus {
    #[default]
    Running,
    Stopped,
}

impl DesiredStatus {
    /// ECS's word: `RUNNING` or `STOPPED`.
    pub fn as_str(self) -> &'static str {
        match self {
            DesiredStatus::Running => "RUNNING",
            DesiredStatus::Stopped => "STOPPED",
        }
    }
}

/// Why a task stopped, as ECS's `stopCode` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StopCode {
    /// The task never ran: a pull, create or start failed, or a dependency could never be met.
    TaskFailedToStart,
    /// An essential container exited.
    EssentialContainerExited,
    /// `berth cluster stop`.
    UserInitiated,
    /// The service scheduler stopped it: scale-in, a rolling update, a drain.
    ServiceSchedulerInitiated,
    /// Its node was lost (ECS uses this code for a host that went away).
    TerminationNotice,
}

/// ECS's task `lastStatus`, in ECS's upper-case words on the wire. A node reports `PENDING`,
/// `RUNNING` or `STOPPED` ([`StatusRecord::last_status`]); the controller closes a task
/// `STOPPED` ([`TaskRecord::last_status`]: ECS keeps stopped tasks visible for a while, berth for
/// `--stopped-retention`); `PROVISIONING` is never written, only shown for a task placed whose
/// node has reported nothing yet ([`crate::view::ClusterView::last_status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum LastStatus {
    Provisioning,
    Pending,
    Running,
    Stopped,
}

impl LastStatus {
    /// ECS's word, as on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            LastStatus::Provisioning => "PROVISIONING",
            LastStatus::Pending => "PENDING",
            LastStatus::Running => "RUNNING",
            LastStatus::Stopped => "STOPPED",
        }
    }
}

impl std::fmt::Display for LastStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// ECS's task `healthStatus`: `HEALTHY`, `UNHEALTHY`, or `UNKNOWN` (no essential container has a
/// health check, or none has a result yet; also what a status written without one means).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum HealthStatus {
    Healthy,
    Unhealthy,
    #[default]
    Unknown,
}

impl HealthStatus {
    /// ECS's word, as on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            HealthStatus::Healthy => "HEALTHY",
            HealthStatus::Unhealthy => "UNHEALTHY",
            HealthStatus::Unknown => "UNKNOWN",
        }
    }
}

impl std::fmt::Display for HealthStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One ECS placement constraint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum Constraint {
    /// Only nodes the cluster query language expression selects (see [`crate::expr`]).
    #[serde(rename = "memberOf")]
    MemberOf { expression: String },
    /// No two tasks of the task's group on one node.
    #[serde(rename = "distinctInstance")]
    DistinctInstance,
}

/// One ECS placement strategy; several are applied in order, each breaking the previous one's ties.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum Strategy {
    /// Even over the values of `field`: `instanceId` (or `host`) or `attribute:<name>`.
    #[serde(rename = "spread")]
    Spread { field: String },
    /// Fewest remaining units of `field` (`cpu` or `memory`) after placing.
    #[serde(rename = "binpack")]
    Binpack { field: String },
    /// Any feasible node (berth: chosen by a hash of task id and node name, so it is reproducible).
    #[serde(rename = "random")]
    Random,
}

/// `/berth/tasks/<id>`: a task as wanted. Written by `berth cluster submit` (no node) and by the
/// controller (placement, stop, lost node); the agent only reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskRecord {
    pub id: String,
    /// The validated definition (log policy applied, as the single-host agent stores it).
    pub definition: TaskDefinition,
    /// ECS's task group: `family:<family>` for a standalone task, `service:<name>` for a
    /// service's; `distinctInstance` and `spread` count tasks of the same group.
    pub group: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    pub desired_status: DesiredStatus,
    /// What placement reserves on a node ([`crate::demand`]).
    pub demand: Resources,
    /// The host ports it holds on its node (`"tcp/80"`, [`crate::demand::host_ports`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_ports: Vec<String>,
    #[serde(default)]
    pub placement_constraints: Vec<Constraint>,
    #[serde(default)]
    pub placement_strategy: Vec<Strategy>,
    /// The node it is placed on; None while pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Its assignment's fence (written with `node` by the placing transaction): the node's
    /// status counts only with this fence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<i64>,
    /// Why it could not be placed yet (the last attempt), or why it stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub created_at_ms: u64,
    /// ECS's `startedBy`: a service task's deployment (`ecs-svc/<digits>`, the
    /// [`ServiceRecord::deployment`] it was started for); None for a standalone task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_by: Option<String>,
    /// `STOPPED` once the controller has closed the task (its node reported it stopped, it was
    /// never placed, or its node was lost); None while its node's report is what counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_status: Option<LastStatus>,
    /// Why it stopped, in ECS's codes; set with the desired status STOPPED or when closed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_code: Option<StopCode>,
    /// When the controller closed it (the retention counts from here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_at_ms: Option<u64>,
}

impl TaskRecord {
    /// A new pending task of standalone group `family:<family>` (ECS's default task group),
    /// its reservation computed from the definition; the constraints and strategies are checked
    /// here so a bad one is refused at submit, naming its JSON path.
    pub fn pending(
        id: String,
        definition: TaskDefinition,
        placement_constraints: Vec<Constraint>,
        placement_strategy: Vec<Strategy>,
        now_ms: u64,
    ) -> Result<TaskRecord, String> {
        crate::placement::compile(&placement_constraints)?;
        crate::placement::check_strategy(&placement_strategy)?;
        let demand = crate::demand::of(&definition)?;
        let host_ports = crate::demand::host_ports(&definition);
        Ok(TaskRecord {
            id,
            group: format!("family:{}", definition.family),
            definition,
            service: None,
            desired_status: DesiredStatus::Running,
            demand,
            host_ports,
            placement_constraints,
            placement_strategy,
            node: None,
            fence: None,
            reason: None,
            created_at_ms: now_ms,
            started_by: None,
            last_status: None,
            stop_code: None,
            stopped_at_ms: None,
        })
    }

    /// Whether the controller has closed it: nothing runs it any more and only the retention
    /// keeps the record.
    pub fn is_closed(&self) -> bool {
        self.last_status == Some(LastStatus::Stopped)
    }
}

/// `/berth/assign/<node>/<id>`: "run this task here", written in the transaction that places the
/// task. `fence` is the task key's `mod_revision` that transaction compared against: every
/// placement changes the task key, so fences are unique and grow with each placement of a task.
/// A status that carries another fence than the task's assignment is a stale copy's.
///
/// `desiredStatus` becomes STOPPED when the task is to stop (a user's stop, the service
/// scheduler): the node stops it and reports STOPPED, then the controller closes the task and
/// deletes the assignment. A deleted assignment whose task still runs on the node (the node was
/// lost and came back) is stopped by the node at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Assignment {
    pub task: String,
    pub fence: i64,
    #[serde(default)]
    pub desired_status: DesiredStatus,
    /// Why it is to stop (with desired STOPPED): the task's stop reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `/berth/status/<node>/<id>`: what the node's agent last saw of the task, written only when it
/// changes, under the node's lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusRecord {
    pub task: String,
    pub fence: i64,
    /// ECS's `lastStatus`: PENDING (pulling, creating), RUNNING, STOPPED.
    pub last_status: LastStatus,
    /// ECS's task `healthStatus`: HEALTHY, UNHEALTHY or UNKNOWN (from the essential containers'
    /// health checks; UNKNOWN when none has one, and in a record written without it).
    #[serde(default)]
    pub health_status: HealthStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_reason: Option<String>,
    /// Whether the task stopped before its essential containers ran (ECS's `TaskFailedToStart`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed_to_start: bool,
    pub updated_at_ms: u64,
}

/// A service's status (ECS: ACTIVE, DRAINING while it is deleted; INACTIVE services are gone).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ServiceStatus {
    #[default]
    Active,
    /// `berth cluster service rm`: its tasks are stopped, then the record is deleted.
    Draining,
}

/// `/berth/services/<name>`: a service (ECS `CreateService`'s fields berth honours).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceRecord {
    pub name: String,
    pub definition: TaskDefinition,
    pub desired_count: u32,
    #[serde(default)]
    pub placement_constraints: Vec<Constraint>,
    #[serde(default)]
    pub placement_strategy: Vec<Strategy>,
    /// ECS's deploymentConfiguration, defaults 100 and 200.
    pub minimum_healthy_percent: u32,
    pub maximum_percent: u32,
    pub created_at_ms: u64,
    #[serde(default)]
    pub status: ServiceStatus,
    /// The current deployment, `ecs-svc/<digits>`: a new one with each new definition or
    /// placement; the service's tasks carry theirs as `startedBy`, and tasks of an older one are
    /// replaced (a rolling update, within the two percentages).
    pub deployment: String,
    /// Tasks the scheduler has started for this service so far. Every start writes the record
    /// (guarded by its revision), so two controllers that both think they lead cannot both start
    /// the replacement for one lost task.
    #[serde(default)]
    pub launched: u64,
    pub updated_at_ms: u64,
}

impl ServiceRecord {
    /// ECS's task group of the service's tasks.
    pub fn group(&self) -> String {
        format!("service:{}", self.name)
    }

    /// A new pending task of the service's current deployment (`startedBy` = the deployment,
    /// group `service:<name>`), with the service's constraints and strategy. The error (a
    /// record another writer put there) names the field.
    pub fn task(&self, id: String, now_ms: u64) -> Result<TaskRecord, String> {
        let mut task = TaskRecord::pending(
            id,
            self.definition.clone(),
            self.placement_constraints.clone(),
            self.placement_strategy.clone(),
            now_ms,
        )?;
        task.group = self.group();
        task.service = Some(self.name.clone());
        task.started_by = Some(self.deployment.clone());
        Ok(task)
    }
}

/// A value that is not what its key should hold.
#[derive(Debug, thiserror::Error)]
#[error("etcd key {key}: not a valid {what}: {source}")]
pub struct DecodeError {
    pub key: String,
    pub what: &'static str,
    #[source]
    pub source: serde_json::Error,
}

/// Decodes the JSON value of `key`; `what` names the record kind in the error.
pub fn decode<T: DeserializeOwned>(
    key: &str,
    what: &'static str,
    value: &[u8],
) -> Result<T, DecodeError> {
    serde_json::from_slice(value).map_err(|source| DecodeError {
        key: key.to_owned(),
        what,
        source,
    })
}

/// Encodes a record. Serializing these types cannot fail (no maps with non-string keys, no
/// non-finite floats); an error would be a bug, reported as an empty object rather than a panic.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constraints_and_strategies_read_ecs_json() {
        let c: Vec<Constraint> = serde_json::from_str(
            r#"[{"type":"memberOf","expression":"attribute:zone == a"},{"type":"distinctInstance"}]"#,
        )
        .unwrap();
        assert_eq!(
            c,
            vec![
                Constraint::MemberOf {
                    expression: "attribute:zone == a".into()
                },
                Constraint::DistinctInstance
            ]
        );
        let s: Vec<Strategy> = serde_json::from_str(
            r#"[{"type":"spread","field":"instanceId"},{"type":"binpack","field":"memory"},{"type":"random"}]"#,
        )
        .unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(
            serde_json::to_string(&s[1]).unwrap(),
            r#"{"type":"binpack","field":"memory"}"#
        );
    }

    #[test]
    fn statuses_are_ecs_words_on_the_wire_and_old_records_decode() {
        // A status as berth has always written it: the same bytes back.
        let written = r#"{"task":"t1","fence":7,"lastStatus":"STOPPED","healthStatus":"UNHEALTHY","stoppedReason":"exited","failedToStart":true,"updatedAtMs":9}"#;
        let s: StatusRecord =
            decode("/berth/status/n/t1", "task status", written.as_bytes()).expect("decodes");
        assert_eq!(
            (s.last_status, s.health_status),
            (LastStatus::Stopped, HealthStatus::Unhealthy)
        );
        assert_eq!(encode(&s), written.as_bytes());
        // One written before `healthStatus` existed: UNKNOWN.
        let old = r#"{"task":"t1","fence":7,"lastStatus":"RUNNING","updatedAtMs":9}"#;
        let s: StatusRecord = decode("/berth/status/n/t1", "task status", old.as_bytes()).unwrap();
        assert_eq!(
            (s.last_status, s.health_status),
            (LastStatus::Running, HealthStatus::Unknown)
        );
        assert_eq!(
            String::from_utf8(encode(&s)).unwrap(),
            r#"{"task":"t1","fence":7,"lastStatus":"RUNNING","healthStatus":"UNKNOWN","updatedAtMs":9}"#
        );
        for (status, word) in [
            (LastStatus::Provisioning, "PROVISIONING"),
            (LastStatus::Pending, "PENDING"),
            (LastStatus::Running, "RUNNING"),
            (LastStatus::Stopped, "STOPPED"),
        ] {
            assert_eq!(
                serde_json::to_string(&status).unwrap(),
                format!("\"{word}\"")
            );
            assert_eq!(status.to_string(), word);
        }
        for (health, word) in [
            (HealthStatus::Healthy, "HEALTHY"),
            (HealthStatus::Unhealthy, "UNHEALTHY"),
            (HealthStatus::Unknown, "UNKNOWN"),
        ] {
            assert_eq!(
                serde_json::to_string(&health).unwrap(),
                format!("\"{word}\"")
            );
            assert_eq!(health.to_string(), word);
        }
        // Something else is refused naming the key, as any bad value is.
        let err = decode::<StatusRecord>(
            "/berth/status/n/t1",
            "task status",
            br#"{"task":"t1","fence":7,"lastStatus":"running","updatedAtMs":9}"#,
        )
        .unwrap_err();
        assert!(
            err.to_string().starts_with("etcd key /berth/status/n/t1"),
            "{err}"
        );
    }

    #[test]
    fn a_closed_task_record_says_stopped_as_before() {
        let definition = crate::testing::definition();
        let mut t = TaskRecord::pending("t1".into(), definition, vec![], vec![], 1).unwrap();
        assert!(!t.is_closed());
        let open = String::from_utf8(encode(&t)).unwrap();
        assert!(!open.contains("lastStatus"), "{open}");
        t.last_status = Some(LastStatus::Stopped);
        assert!(t.is_closed());
        let closed = String::from_utf8(encode(&t)).unwrap();
        assert!(closed.contains(r#""lastStatus":"STOPPED""#), "{closed}");
        let back: TaskRecord = decode("/berth/tasks/t1", "task record", closed.as_bytes()).unwrap();
        assert_eq!(back, t);
    }

    #[test]
    fn a_bad_value_names_its_key() {
        let err =
            decode::<NodeRecord>("/berth/nodes/x", "node record", b"{\"name\":1}").unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("etcd key /berth/nodes/x: not a valid node record:"),
            "{text}"
        );
    }
}
