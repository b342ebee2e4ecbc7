//! The introspection API's JSON answers, with the ECS agent's key names, key order and omission
//! rules (`ecs-agent/introspection/v1/response.go`; `omitempty` there is `skip_serializing_if`
//! here), and ECS's rules for what a task shows (`agent/handlers/v1/response.go`):
//!
//! - task statuses are ECS's backend names: `RUNNING`, `STOPPED`, and `PENDING` for anything
//!   before RUNNING; `DesiredStatus` is left out when it says less than the known status
//!   (known STOPPED but desired not, or known RUNNING and desired PENDING);
//! - a container is listed from the moment its `create` is sent (`DockerId` is `""` until Docker
//!   answers, as ECS lists it once it has decided the name); the pause container never is;
//! - `Ports`: the bindings Docker reports for the container, else the definition's port
//!   mappings (host mode: host port = container port); in `awsvpc` mode the definition's mappings
//!   on host port = container port, and `Networks` is the task's address (the pause container's);
//!   other modes have no `Networks`, as ECS shows them only for a task's network interface;
//! - `Volumes`: every mount Docker reports for the container.
//!
//! Pure: built from a task snapshot plus the runtime's [`ContainerDetails`], which may be missing
//! for any container (it is then listed without them).

use berth_engine::Identity;
use berth_engine::report::rfc3339;
use berth_engine::runtime::ContainerDetails;
use berth_engine::state::{Op, Status, TaskState};
use berth_model::NetworkMode;
use serde::Serialize;

/// `GET /v1/metadata`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgentMetadataResponse {
    /// The cluster's name (not its ARN), as ECS's agent configuration has it.
    #[serde(rename = "Cluster")]
    pub cluster: String,
    /// ECS: `null` until the instance is registered; berth's is known from the start.
    #[serde(rename = "ContainerInstanceArn")]
    pub container_instance_arn: Option<String>,
    #[serde(rename = "Version")]
    pub version: String,
}

impl AgentMetadataResponse {
    pub fn new(identity: &Identity, version: &str) -> Self {
        AgentMetadataResponse {
            cluster: identity.cluster.clone(),
            container_instance_arn: Some(identity.container_instance_arn()),
            version: version.to_string(),
        }
    }
}

/// `GET /v1/tasks`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TasksResponse {
    #[serde(rename = "Tasks")]
    pub tasks: Vec<TaskResponse>,
}

/// One task (`GET /v1/tasks?…`, and each element of `Tasks`). The default value is ECS's empty
/// answer of a failed lookup (`Containers` is then `null`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct TaskResponse {
    #[serde(rename = "Arn")]
    pub arn: String,
    #[serde(rename = "DesiredStatus", skip_serializing_if = "str::is_empty")]
    pub desired_status: &'static str,
    #[serde(rename = "KnownStatus")]
    pub known_status: &'static str,
    #[serde(rename = "Family")]
    pub family: String,
    /// The task definition's revision, as a string.
    #[serde(rename = "Version")]
    pub version: String,
    #[serde(rename = "Containers")]
    pub containers: Option<Vec<ContainerResponse>>,
}

/// One container of a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContainerResponse {
    #[serde(rename = "DockerId")]
    pub docker_id: String,
    #[serde(rename = "DockerName")]
    pub docker_name: String,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Image")]
    pub image: String,
    /// Docker's image id (`sha256:…`); `""` while unknown.
    #[serde(rename = "ImageID")]
    pub image_id: String,
    #[serde(rename = "CreatedAt", skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    #[serde(rename = "StartedAt", skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(rename = "Ports", skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<Port>,
    #[serde(rename = "Networks", skip_serializing_if = "Vec::is_empty")]
    pub networks: Vec<Network>,
    #[serde(rename = "Volumes", skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<Volume>,
    /// Restarts under the container's restart policy; only when the policy is enabled, last (as
    /// ECS's `ContainerResponse` has it).
    #[serde(rename = "RestartCount", skip_serializing_if = "Option::is_none")]
    pub restart_count: Option<u32>,
}

/// A port and a network: the metadata endpoint's (ECS shares `PortResponse` and `Network` between
/// both APIs); the introspection API never sets a port's `HostIp`, so it is left out.
pub use crate::metadata::json::{Network, Port};

/// A mount: the metadata endpoint's (ECS shares `VolumeResponse` between both APIs).
pub use crate::metadata::json::Volume;

/// A failed lookup: ECS's empty task object, plus `Error` saying why (ECS writes the reason only
/// to its log; a client decoding the body as a task ignores the extra key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorResponse {
    #[serde(flatten)]
    pub task: TaskResponse,
    #[serde(rename = "Error")]
    pub error: String,
}

impl ErrorResponse {
    pub fn new(error: impl Into<String>) -> Self {
        ErrorResponse {
            task: TaskResponse::default(),
            error: error.into(),
        }
    }
}

/// ECS's backend name of a task status: what ECS's API shows for a task.
pub fn backend_status(s: Status) -> &'static str {
    match s {
        Status::Running => "RUNNING",
        Status::Stopped => "STOPPED",
        Status::None | Status::Pulled | Status::Created => "PENDING",
    }
}

/// Whether container `i` is listed: created, or being created; never the pause container.
pub fn listed(state: &TaskState, i: usize) -> bool {
    let c = &state.containers[i];
    !state.is_pause(i) && (c.docker_id.is_some() || c.in_flight == Some(Op::Create))
}

/// The task as the introspection API shows it. `details[i]` belongs to container `i` (missing
/// entries are None); the pause container's details give an `awsvpc` task its address.
pub fn task_response(
    state: &TaskState,
    details: &[Option<&ContainerDetails>],
    identity: &Identity,
) -> TaskResponse {
    let known = backend_status(state.known());
    let mut desired = backend_status(state.desired);
    if (known == "STOPPED" && desired != "STOPPED") || (known == "RUNNING" && desired == "PENDING")
    {
        desired = "";
    }
    let pause = state
        .pause_index()
        .and_then(|p| details.get(p).copied().flatten());
    TaskResponse {
        arn: identity.task_arn(&state.id),
        desired_status: desired,
        known_status: known,
        family: state.definition.family.clone(),
        version: state.definition.revision.to_string(),
        containers: Some(
            (0..state.containers.len())
                .filter(|&i| listed(state, i))
                .map(|i| container_response(state, i, details.get(i).copied().flatten(), pause))
                .collect(),
        ),
    }
}

/// Container `i` as the introspection API shows it.
pub fn container_response(
    state: &TaskState,
    i: usize,
    details: Option<&ContainerDetails>,
    pause: Option<&ContainerDetails>,
) -> ContainerResponse {
    let c = &state.containers[i];
    let def = state.def(i);
    let mode = state.definition.network_mode;
    let from_definition = |host_port: &dyn Fn(u16, Option<u16>) -> u16| -> Vec<Port> {
        def.port_mappings
            .iter()
            .map(|p| Port {
                container_port: p.container_port,
                protocol: p.protocol.as_str().to_string(),
                host_port: host_port(p.container_port, p.host_port),
                host_ip: String::new(),
            })
            .collect()
    };
    let bound = details.filter(|d| !d.ports.is_empty());
    let ports = match (mode, bound) {
        (NetworkMode::Awsvpc, _) => from_definition(&|container, _| container),
        (_, Some(d)) => d
            .ports
            .iter()
            .map(|p| Port {
                container_port: p.container_port,
                protocol: p.protocol.clone(),
                host_port: p.host_port.unwrap_or(0),
                host_ip: String::new(),
            })
            .collect(),
        (NetworkMode::Host, None) => from_definition(&|container, _| container),
        (_, None) => from_definition(&|_, host| host.unwrap_or(0)),
    };
    let networks = if mode == NetworkMode::Awsvpc {
        vec![Network {
            network_mode: mode.as_str().to_string(),
            ipv4_addresses: crate::metadata::json::task_addresses(pause),
        }]
    } else {
        Vec::new()
    };
    let volumes = crate::metadata::json::volumes(details);
    ContainerResponse {
        docker_id: c.docker_id.clone().unwrap_or_default(),
        docker_name: c.docker_name.clone(),
        name: c.name.clone(),
        image: def.image.clone(),
        image_id: details.and_then(|d| d.image_id.clone()).unwrap_or_default(),
        created_at: c.created_at.map(rfc3339),
        started_at: c.started_at.map(rfc3339),
        ports,
        networks,
        volumes,
        restart_count: berth_model::RestartPolicy::enabled_of(def).map(|_| c.restart_count),
    }
}
