//! The JSON answers of the metadata endpoint, with ECS's exact key names, value formats and
//! omission rules (the ECS agent's `omitempty`, `ecs-agent/tmds/handlers/v2/response.go` and
//! `v4/state/response.go`): times are RFC 3339 UTC and left out when unset; `Revision` is a
//! string; `DockerId` and `ImageID` are always present (`""` until known); `Limits.CPU` is a number
//! (for a container the CPU shares Docker was given, as ECS shows them: 1 becomes 2, 0 when none
//! are set; vCPUs for the task) written without a fraction when whole, as Go writes it; `Health` is there for every container with a health
//! check, its `status` left out until Docker has a result (`{}` at first), `exitCode` 0 and empty
//! `output` left out.
//!
//! v3 and v4 differ as in ECS ([`Version`]): only v4 has `ContainerARN`, `LogDriver`,
//! `LogOptions`, the ports' `HostIp`, the task's `LaunchType` and `FaultInjectionEnabled`.
//! `TaskTags` and `ContainerInstanceTags` only in the `taskWithTags` answers, left out when empty.
//!
//! Pure: built from a task snapshot plus the runtime's [`ContainerDetails`] (which may be missing
//! for any container: the container is still listed, without its dynamic fields).

use berth_engine::report::rfc3339;
use berth_engine::runtime::ContainerDetails;
use berth_engine::spec::container_labels;
use berth_engine::state::{Health, Status, TaskState};
use berth_model::NetworkMode;
use berth_model::tags::{Tag, to_map};
use serde::{Serialize, Serializer};
use std::collections::BTreeMap;

/// Task-level settings of the endpoint (what ECS takes from the agent's configuration).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskInfo {
    /// `Cluster`, `AvailabilityZone` and every ARN (default: [`Identity::default`]).
    pub identity: Identity,
    /// `LaunchType` (default `EC2`).
    pub launch_type: String,
    /// `ContainerInstanceTags` of the `taskWithTags` answers (the agent's configuration; ECS's
    /// `ECS_CONTAINER_INSTANCE_TAGS`).
    pub container_instance_tags: Vec<Tag>,
}

impl Default for TaskInfo {
    fn default() -> Self {
        TaskInfo {
            identity: Identity::default(),
            launch_type: "EC2".to_string(),
            container_instance_tags: Vec::new(),
        }
    }
}

/// Which endpoint version answers: ECS's v3 handlers build the same responses without the v4
/// fields (`includeV4Metadata` false in `agent/handlers/v2/response.go`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Version {
    V3,
    V4,
}

// Every ARN is the engine's identity's (FireLens's record fields show the same task ARN), so there
// is one format.
pub use berth_engine::Identity;

/// A number as Go's `encoding/json` writes a float64: no fraction when whole.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Number(pub f64);

impl Serialize for Number {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let v = self.0;
        // Whole values within i64's exact range are written as integers (256, not 256.0).
        if v.fract() == 0.0 && v.abs() < 9.0e15 {
            #[allow(clippy::cast_possible_truncation)]
            s.serialize_i64(v as i64)
        } else {
            s.serialize_f64(v)
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Limits {
    #[serde(rename = "CPU", skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Number>,
    #[serde(rename = "Memory", skip_serializing_if = "Option::is_none")]
    pub memory: Option<i64>,
}

/// A port (ECS's `PortResponse`), in the metadata endpoint and the introspection API alike.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Port {
    #[serde(rename = "ContainerPort", skip_serializing_if = "is_zero_u16")]
    pub container_port: u16,
    #[serde(rename = "Protocol", skip_serializing_if = "String::is_empty")]
    pub protocol: String,
    #[serde(rename = "HostPort", skip_serializing_if = "is_zero_u16")]
    pub host_port: u16,
    #[serde(rename = "HostIp", skip_serializing_if = "String::is_empty")]
    pub host_ip: String,
}

fn is_zero_u16(v: &u16) -> bool {
    *v == 0
}

fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}

/// A network, in the metadata endpoint and the introspection API alike (the introspection API
/// shows only an `awsvpc` task's, whose mode is never empty).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Network {
    #[serde(rename = "NetworkMode")]
    pub network_mode: String,
    #[serde(rename = "IPv4Addresses", skip_serializing_if = "Vec::is_empty")]
    pub ipv4_addresses: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HealthStatus {
    /// `HEALTHY` or `UNHEALTHY`; left out (as ECS does) until Docker has a first result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<&'static str>,
    #[serde(rename = "statusSince", skip_serializing_if = "Option::is_none")]
    pub status_since: Option<String>,
    #[serde(rename = "exitCode", skip_serializing_if = "is_zero_i64")]
    pub exit_code: i64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub output: String,
}

/// A mount as ECS shows it (`VolumeResponse`), in the metadata endpoint and the introspection API
/// alike.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Volume {
    #[serde(rename = "DockerName", skip_serializing_if = "String::is_empty")]
    pub docker_name: String,
    #[serde(rename = "Source", skip_serializing_if = "String::is_empty")]
    pub source: String,
    #[serde(rename = "Destination", skip_serializing_if = "String::is_empty")]
    pub destination: String,
}

/// One container (`GET /v4/<id>`, and each element of `Containers`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContainerResponse {
    /// `""` until the container is created (ECS sends the key, empty).
    #[serde(rename = "DockerId")]
    pub docker_id: String,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "DockerName")]
    pub docker_name: String,
    #[serde(rename = "Image")]
    pub image: String,
    /// `""` until Docker is asked (ECS sends the key, empty).
    #[serde(rename = "ImageID")]
    pub image_id: String,
    #[serde(rename = "Ports", skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<Port>,
    #[serde(rename = "Labels", skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(rename = "DesiredStatus")]
    pub desired_status: &'static str,
    #[serde(rename = "KnownStatus")]
    pub known_status: &'static str,
    #[serde(rename = "ExitCode", skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    #[serde(rename = "Limits")]
    pub limits: Limits,
    #[serde(rename = "CreatedAt", skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    #[serde(rename = "StartedAt", skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(rename = "FinishedAt", skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    #[serde(rename = "Type")]
    pub kind: &'static str,
    #[serde(rename = "Networks", skip_serializing_if = "Vec::is_empty")]
    pub networks: Vec<Network>,
    #[serde(rename = "Health", skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthStatus>,
    #[serde(rename = "Volumes", skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<Volume>,
    #[serde(rename = "LogDriver", skip_serializing_if = "Option::is_none")]
    pub log_driver: Option<String>,
    #[serde(rename = "LogOptions", skip_serializing_if = "BTreeMap::is_empty")]
    pub log_options: BTreeMap<String, String>,
    /// v4 only.
    #[serde(rename = "ContainerARN", skip_serializing_if = "Option::is_none")]
    pub container_arn: Option<String>,
    /// Restarts under the container's restart policy; only for a container whose policy is
    /// enabled, last, as ECS's v4 container response has it (`agent/handlers/v4/response.go`).
    #[serde(rename = "RestartCount", skip_serializing_if = "Option::is_none")]
    pub restart_count: Option<u32>,
}

/// The task (`GET /v4/<id>/task`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskResponse {
    #[serde(rename = "Cluster")]
    pub cluster: String,
    #[serde(rename = "TaskARN")]
    pub task_arn: String,
    #[serde(rename = "Family")]
    pub family: String,
    #[serde(rename = "Revision")]
    pub revision: String,
    #[serde(rename = "DesiredStatus")]
    pub desired_status: &'static str,
    #[serde(rename = "KnownStatus")]
    pub known_status: &'static str,
    #[serde(rename = "Limits", skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
    #[serde(rename = "PullStartedAt", skip_serializing_if = "Option::is_none")]
    pub pull_started_at: Option<String>,
    #[serde(rename = "PullStoppedAt", skip_serializing_if = "Option::is_none")]
    pub pull_stopped_at: Option<String>,
    #[serde(rename = "ExecutionStoppedAt", skip_serializing_if = "Option::is_none")]
    pub execution_stopped_at: Option<String>,
    #[serde(rename = "AvailabilityZone", skip_serializing_if = "Option::is_none")]
    pub availability_zone: Option<String>,
    /// `taskWithTags` only.
    #[serde(rename = "TaskTags", skip_serializing_if = "BTreeMap::is_empty")]
    pub task_tags: BTreeMap<String, String>,
    /// `taskWithTags` only.
    #[serde(
        rename = "ContainerInstanceTags",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub container_instance_tags: BTreeMap<String, String>,
    /// v4 only.
    #[serde(rename = "LaunchType", skip_serializing_if = "String::is_empty")]
    pub launch_type: String,
    /// Left out while no container is listed, as ECS does.
    #[serde(rename = "Containers", skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<ContainerResponse>,
    /// v4 only, always sent there (ECS has no `omitempty` on it): berth has no fault injection
    /// endpoints, so it is `false` (a definition's `enableFaultInjection` is ignored with a warning).
    #[serde(
        rename = "FaultInjectionEnabled",
        skip_serializing_if = "Option::is_none"
    )]
    pub fault_injection_enabled: Option<bool>,
}

/// ECS's container health status names; None for ECS's `UNKNOWN` (Docker's `starting`, or no
/// result yet), which ECS leaves out.
fn health_name(h: Health) -> Option<&'static str> {
    match h {
        Health::Healthy => Some("HEALTHY"),
        Health::Unhealthy => Some("UNHEALTHY"),
        Health::Unknown | Health::Starting => None,
    }
}

/// Task-level CPU in vCPUs: `"256"` (CPU units) → 0.25, `"0.5 vCPU"` → 0.5.
pub fn task_cpu_vcpus(cpu: &str) -> Option<f64> {
    let t = cpu.trim();
    let lower = t.to_ascii_lowercase();
    if let Some(v) = lower.strip_suffix("vcpu") {
        return v.trim().parse::<f64>().ok();
    }
    t.parse::<f64>().ok().map(|units| units / 1024.0)
}

/// Task-level memory in MiB: `"512"` → 512, `"1 GB"` → 1024.
pub fn task_memory_mib(memory: &str) -> Option<i64> {
    let t = memory.trim();
    let lower = t.to_ascii_lowercase();
    if let Some(v) = lower.strip_suffix("gb") {
        let gb: f64 = v.trim().parse().ok()?;
        #[allow(clippy::cast_possible_truncation)]
        return Some((gb * 1024.0).round() as i64);
    }
    t.parse::<i64>().ok()
}

/// Container `i` of the task as ECS shows it. `details` may be None (not created yet, or the
/// runtime could not answer): the dynamic fields are then taken from the definition or left out.
/// `pause` is the task's pause container's details: in awsvpc mode the task's address and
/// published ports are the pause container's.
pub fn container_response(
    state: &TaskState,
    i: usize,
    details: Option<&ContainerDetails>,
    pause: Option<&ContainerDetails>,
    info: &TaskInfo,
    version: Version,
) -> ContainerResponse {
    let mode = state.definition.network_mode;
    let mut r = own_container_response(state, i, details);
    if mode == NetworkMode::Awsvpc {
        let def = state.def(i);
        let created = state.containers[i].docker_id.is_some();
        r.ports = awsvpc_ports(def, pause);
        r.networks = if created {
            vec![Network {
                network_mode: mode.as_str().to_string(),
                ipv4_addresses: task_addresses(pause),
            }]
        } else {
            Vec::new()
        };
    }
    match version {
        Version::V4 => {
            r.container_arn = Some(info.identity.container_arn(&state.id, &r.name));
        }
        Version::V3 => {
            r.log_driver = None;
            r.log_options.clear();
            for p in &mut r.ports {
                p.host_ip.clear();
            }
        }
    }
    r
}

/// Container `i` as ECS shows it, from its own details only.
fn own_container_response(
    state: &TaskState,
    i: usize,
    details: Option<&ContainerDetails>,
) -> ContainerResponse {
    let c = &state.containers[i];
    let def = state.def(i);
    let mode = state.definition.network_mode;
    let created = c.docker_id.is_some();

    let ports = match details.filter(|d| !d.ports.is_empty()) {
        Some(d) => d
            .ports
            .iter()
            .map(|p| Port {
                container_port: p.container_port,
                protocol: p.protocol.clone(),
                host_port: p.host_port.unwrap_or(0),
                host_ip: p.host_ip.clone().unwrap_or_default(),
            })
            .collect(),
        // From the definition: in host mode the container's port is the host's.
        None => def
            .port_mappings
            .iter()
            .filter(|_| mode != NetworkMode::None)
            .map(|p| Port {
                container_port: p.container_port,
                protocol: p.protocol.as_str().to_string(),
                host_port: match mode {
                    NetworkMode::Host => p.container_port,
                    _ => p.host_port.unwrap_or(0),
                },
                host_ip: String::new(),
            })
            .collect(),
    };

    let networks = match details.filter(|d| !d.networks.is_empty()) {
        Some(d) => d
            .networks
            .iter()
            .map(|n| Network {
                network_mode: n.network.clone(),
                ipv4_addresses: n.ipv4_addresses.clone(),
            })
            .collect(),
        None if created => vec![Network {
            network_mode: mode.as_str().to_string(),
            ipv4_addresses: Vec::new(),
        }],
        None => Vec::new(),
    };

    let health = def.health_check.as_ref().map(|_| {
        let d = details.and_then(|d| d.health.as_ref());
        HealthStatus {
            status: health_name(c.health),
            status_since: d.and_then(|h| h.since).map(rfc3339),
            exit_code: d.and_then(|h| h.exit_code).unwrap_or(0),
            output: d.and_then(|h| h.output.clone()).unwrap_or_default(),
        }
    });

    let volumes = volumes(details);

    ContainerResponse {
        docker_id: c.docker_id.clone().unwrap_or_default(),
        name: c.name.clone(),
        docker_name: c.docker_name.clone(),
        image: def.image.clone(),
        image_id: details.and_then(|d| d.image_id.clone()).unwrap_or_default(),
        ports,
        labels: container_labels(state, i),
        desired_status: c.desired.as_str(),
        known_status: c.known.as_str(),
        exit_code: c.exit_code,
        limits: Limits {
            // The shares Docker was given, as ECS shows them (0: none set).
            #[allow(clippy::cast_precision_loss)]
            cpu: Some(Number(
                berth_engine::spec::cpu_shares(def).unwrap_or(0) as f64
            )),
            memory: Some(def.memory.and_then(|m| i64::try_from(m).ok()).unwrap_or(0)),
        },
        created_at: c.created_at.map(rfc3339),
        started_at: c.started_at.map(rfc3339),
        finished_at: c.finished_at.map(rfc3339),
        kind: "NORMAL",
        networks,
        health,
        volumes,
        log_driver: def.log_driver().map(str::to_string),
        log_options: def.log_options(),
        container_arn: None,
        restart_count: berth_model::RestartPolicy::enabled_of(def).map(|_| c.restart_count),
    }
}

/// An awsvpc container's ports: its own port mappings, on host port = container port (the pause
/// container publishes them), with the host address Docker bound when the pause container has
/// started.
fn awsvpc_ports(
    def: &berth_model::ContainerDefinition,
    pause: Option<&ContainerDetails>,
) -> Vec<Port> {
    def.port_mappings
        .iter()
        .map(|m| {
            let protocol = m.protocol.as_str();
            let bound = pause.and_then(|p| {
                p.ports
                    .iter()
                    .find(|b| b.container_port == m.container_port && b.protocol == protocol)
            });
            Port {
                container_port: m.container_port,
                protocol: protocol.to_string(),
                host_port: bound.and_then(|b| b.host_port).unwrap_or(m.container_port),
                host_ip: bound.and_then(|b| b.host_ip.clone()).unwrap_or_default(),
            }
        })
        .collect()
}

/// The task as ECS shows it. `details[i]` belongs to container `i` (missing entries are None).
/// Containers still NONE (not pulled) are left out, as ECS does, and so is the task's pause
/// container (ECS hides its own). `with_tags`: the `taskWithTags` answer (`TaskTags` from the
/// task's definition, `ContainerInstanceTags` from `info`).
pub fn task_response(
    state: &TaskState,
    details: &[Option<&ContainerDetails>],
    info: &TaskInfo,
    version: Version,
    with_tags: bool,
) -> TaskResponse {
    let def = &state.definition;
    let cpu = def.cpu.as_deref().and_then(task_cpu_vcpus);
    let memory = def.memory.as_deref().and_then(task_memory_mib);
    let pause = state
        .pause_index()
        .and_then(|p| details.get(p).copied().flatten());
    TaskResponse {
        cluster: info.identity.cluster.clone(),
        task_arn: info.identity.task_arn(&state.id),
        family: def.family.clone(),
        revision: def.revision.to_string(),
        desired_status: state.desired.as_str(),
        known_status: state.known().as_str(),
        limits: (cpu.is_some() || memory.is_some()).then_some(Limits {
            cpu: cpu.map(Number),
            memory,
        }),
        pull_started_at: state.pull_started_at().map(rfc3339),
        pull_stopped_at: state.pull_stopped_at().map(rfc3339),
        execution_stopped_at: state.execution_stopped_at.map(rfc3339),
        availability_zone: Some(info.identity.availability_zone.clone()),
        task_tags: if with_tags {
            to_map(&def.tags)
        } else {
            BTreeMap::new()
        },
        container_instance_tags: if with_tags {
            to_map(&info.container_instance_tags)
        } else {
            BTreeMap::new()
        },
        launch_type: match version {
            Version::V4 => info.launch_type.clone(),
            Version::V3 => String::new(),
        },
        containers: state
            .containers
            .iter()
            .enumerate()
            .filter(|(i, c)| c.known > Status::None && !state.is_pause(*i))
            .map(|(i, _)| {
                let d = details.get(i).copied().flatten();
                container_response(state, i, d, pause, info, version)
            })
            .collect(),
        fault_injection_enabled: (version == Version::V4).then_some(false),
    }
}

/// An awsvpc task's addresses: its pause container's (none while its details are unknown).
pub fn task_addresses(pause: Option<&ContainerDetails>) -> Vec<String> {
    pause
        .map(|p| {
            p.networks
                .iter()
                .flat_map(|n| n.ipv4_addresses.iter().cloned())
                .collect()
        })
        .unwrap_or_default()
}

/// Every mount Docker reports for the container (none without details).
pub fn volumes(details: Option<&ContainerDetails>) -> Vec<Volume> {
    details
        .map(|d| {
            d.mounts
                .iter()
                .map(|m| Volume {
                    docker_name: m.name.clone().unwrap_or_default(),
                    source: m.source.clone().unwrap_or_default(),
                    destination: m.destination.clone(),
                })
                .collect()
        })
        .unwrap_or_default()
}
