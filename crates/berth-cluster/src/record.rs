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

impl Resources {
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum DesiredStatus {
    Running,
    Stopped,
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
    #[serde(default)]
    pub placement_constraints: Vec<Constraint>,
    #[serde(default)]
    pub placement_strategy: Vec<Strategy>,
    /// The node it is placed on; None while pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Why it could not be placed yet (the last attempt), or why it stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub created_at_ms: u64,
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
        Ok(TaskRecord {
            id,
            group: format!("family:{}", definition.family),
            definition,
            service: None,
            desired_status: DesiredStatus::Running,
            demand,
            placement_constraints,
            placement_strategy,
            node: None,
            reason: None,
            created_at_ms: now_ms,
        })
    }
}

/// `/berth/assign/<node>/<id>`: "run this task here", written in the transaction that places the
/// task. `fence` is the task key's `mod_revision` that transaction compared against: every
/// placement changes the task key, so fences are unique and grow with each placement of a task.
/// A status that carries an older fence than the task's current assignment is a stale copy's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Assignment {
    pub task: String,
    pub fence: i64,
}

/// `/berth/status/<node>/<id>`: what the node's agent last saw of the task, written only when it
/// changes, under the node's lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusRecord {
    pub task: String,
    pub fence: i64,
    /// ECS's `lastStatus` (PENDING, RUNNING, STOPPED, …).
    pub last_status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_reason: Option<String>,
    pub updated_at_ms: u64,
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
