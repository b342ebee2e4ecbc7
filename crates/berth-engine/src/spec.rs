//! Turning a container definition into the engine-neutral [`ContainerSpec`] the runtime creates.
//!
//! Pure: names, labels, mounts, limits, health check units (ECS seconds → nanoseconds) are all decided
//! here, so they are unit-tested without Docker. The runtime only translates field by field.
//!
//! This module gives a create spec its definition's part ([`container_spec_with_values`]: the
//! container's own fields, the task's namespaces, the volume mounts, the metadata endpoint's
//! variables, the labels with the task's [`TaskState::extra_labels`]). The spec a container is
//! created from is assembled in one place, [`crate::create_spec::build`], which adds FireLens,
//! the operator's pause image, the data-directory label and the metadata file's mount to this
//! part; it sits above this module because [`crate::firelens`] and
//! [`crate::container_metadata`] build on this module's types.

use crate::pause::{self, Shares};
use crate::secrets::ContainerValues;
use crate::state::TaskState;
use berth_model::{EfsVolumeConfiguration, NetworkMode, VolumeKind, VolumeScope};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const LABEL_TASK: &str = "berth.task";
pub const LABEL_CONTAINER: &str = "berth.container";
pub const LABEL_FAMILY: &str = "berth.family";
pub const LABEL_REVISION: &str = "berth.revision";
/// The data directory of the berth process that created the container (`berth gc --containers`
/// only touches its own data directory's containers).
pub const LABEL_DATA_DIR: &str = "berth.data-dir";
/// Marks task-scoped Docker volumes berth created (value: the task id).
pub const LABEL_VOLUME_TASK: &str = "berth.task";

const NANOS_PER_SEC: i64 = 1_000_000_000;

/// A Docker health check, durations in nanoseconds as the Engine API takes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthSpec {
    /// `["CMD-SHELL", cmd]` or `["CMD", prog, args...]`.
    pub test: Vec<String>,
    pub interval_ns: i64,
    pub timeout_ns: i64,
    pub retries: i64,
    pub start_period_ns: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSpec {
    pub container_port: u16,
    pub protocol: &'static str,
    /// None = an ephemeral port chosen by Docker.
    pub host_port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UlimitSpec {
    pub name: String,
    pub soft: i64,
    pub hard: i64,
}

/// Everything needed to create one container.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ContainerSpec {
    pub name: String,
    pub image: String,
    pub cmd: Option<Vec<String>>,
    pub entrypoint: Option<Vec<String>>,
    /// `NAME=value`, in definition order.
    pub env: Vec<String>,
    pub labels: BTreeMap<String, String>,
    pub working_dir: Option<String>,
    pub user: Option<String>,
    pub hostname: Option<String>,
    /// Bind mounts of host paths and Docker volume mounts. Explicit mounts rather than `-v` bind
    /// strings: a missing host path is an error at create (Docker's legacy binds would silently
    /// create it as root), and paths containing `:` need no escaping.
    pub mounts: Vec<MountSpec>,
    /// Docker names of containers to take volumes from, with `:ro` where read-only.
    pub volumes_from: Vec<String>,
    /// Docker links, `<Docker name of the target>:<alias>`, in `links` order.
    pub links: Vec<String>,
    pub ports: Vec<PortSpec>,
    pub network_mode: String,
    pub cpu_shares: Option<i64>,
    pub memory_bytes: Option<i64>,
    pub memory_reservation_bytes: Option<i64>,
    pub readonly_rootfs: bool,
    pub privileged: bool,
    pub ulimits: Vec<UlimitSpec>,
    pub log_driver: Option<String>,
    pub log_options: BTreeMap<String, String>,
    pub health: Option<HealthSpec>,
    pub stop_timeout_secs: Option<u32>,
    /// From `linuxParameters`; all empty when it is absent.
    pub linux: LinuxSpec,
    /// Docker `Dns`: `dnsServers`.
    pub dns: Vec<String>,
    /// Docker `DnsSearch`: `dnsSearchDomains`.
    pub dns_search: Vec<String>,
    /// Docker `ExtraHosts`: `hostname:ipAddress` for each `extraHosts` entry.
    pub extra_hosts: Vec<String>,
    /// Docker `Sysctls`: `systemControls`.
    pub sysctls: BTreeMap<String, String>,
    /// Docker `SecurityOpt`: `dockerSecurityOptions`.
    pub security_opt: Vec<String>,
    /// Docker `OpenStdin`: `interactive`.
    pub open_stdin: bool,
    /// Docker `Tty`: `pseudoTerminal`.
    pub tty: bool,
    /// Docker `NetworkDisabled`: `disableNetworking`.
    pub network_disabled: bool,
    /// Docker `PidMode` (`host`), from the task's `pidMode`.
    pub pid_mode: Option<String>,
    /// Docker `IpcMode` (`host`, `none`), from the task's `ipcMode`.
    pub ipc_mode: Option<String>,
    /// GPUs to ask Docker for (`resourceRequirements` GPU): a device request of this count with
    /// the `gpu` capability; -1 = every GPU; None = no device request.
    pub gpu_count: Option<i64>,
}

/// The Docker settings that come from `linuxParameters`, in Docker's units.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LinuxSpec {
    /// Docker `Init` (`docker-init` as PID 1).
    pub init: bool,
    pub cap_add: Vec<String>,
    pub cap_drop: Vec<String>,
    pub devices: Vec<DeviceSpec>,
    /// Container path → Docker tmpfs options (`noexec,size=64m`).
    pub tmpfs: BTreeMap<String, String>,
    pub shm_size_bytes: Option<i64>,
    /// Docker `MemorySwap`: memory + maxSwap, in bytes.
    pub memory_swap_bytes: Option<i64>,
    pub memory_swappiness: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSpec {
    pub host_path: String,
    pub container_path: String,
    /// `rwm` letters.
    pub permissions: String,
}

/// The [`LinuxSpec`] of a container: ECS's units (MiB) become Docker's (bytes); a tmpfs gets its
/// mount options followed by `size=<n>m`; `maxSwap` is added to `memory` (validation made sure
/// `memory` is set).
pub fn linux_spec(def: &berth_model::ContainerDefinition) -> LinuxSpec {
    let Some(lp) = &def.linux_parameters else {
        return LinuxSpec::default();
    };
    let mib = |v: u64| i64::try_from(v.saturating_mul(1024 * 1024)).unwrap_or(i64::MAX);
    LinuxSpec {
        init: lp.init_process_enabled,
        cap_add: lp.capabilities_add.clone(),
        cap_drop: lp.capabilities_drop.clone(),
        devices: lp
            .devices
            .iter()
            .map(|d| DeviceSpec {
                host_path: d.host_path.clone(),
                container_path: d
                    .container_path
                    .clone()
                    .unwrap_or_else(|| d.host_path.clone()),
                permissions: d.permissions.clone(),
            })
            .collect(),
        tmpfs: lp
            .tmpfs
            .iter()
            .map(|t| {
                let mut options = t.mount_options.clone();
                options.push(format!("size={}m", t.size));
                (t.container_path.clone(), options.join(","))
            })
            .collect(),
        shm_size_bytes: lp.shared_memory_size.map(mib),
        memory_swap_bytes: lp
            .max_swap
            .and_then(|swap| def.memory.map(|m| mib(m.saturating_add(swap)))),
        memory_swappiness: lp.swappiness.map(i64::from),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MountKind {
    /// A host path.
    Bind,
    /// A Docker volume, by name.
    Volume,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountSpec {
    pub kind: MountKind,
    pub source: String,
    pub target: String,
    pub read_only: bool,
}

/// A Docker volume to create for a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeSpec {
    pub name: String,
    pub driver: String,
    pub driver_opts: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
}

/// How a task volume is provided to containers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumePlan {
    /// A host directory (given, or the task's scratch directory).
    HostPath(PathBuf),
    /// A Docker volume to create for this task and remove at cleanup.
    TaskVolume(VolumeSpec),
    /// A shared Docker volume: used if it exists, created only when `autoprovision` is true.
    SharedVolume {
        spec: VolumeSpec,
        autoprovision: bool,
    },
    /// Cannot be provided (the message says why).
    Unsupported(String),
}

impl VolumePlan {
    /// The mount source: a host path or a Docker volume name.
    fn source(&self) -> Option<(MountKind, String)> {
        match self {
            VolumePlan::HostPath(p) => Some((MountKind::Bind, p.display().to_string())),
            VolumePlan::TaskVolume(s) => Some((MountKind::Volume, s.name.clone())),
            VolumePlan::SharedVolume { spec, .. } => Some((MountKind::Volume, spec.name.clone())),
            VolumePlan::Unsupported(_) => None,
        }
    }
}

/// The Docker CPU shares of a container: none for 0 or unset CPU units (Docker's default weight),
/// else the units, at least Docker's minimum of 2. The metadata endpoint shows the same number
/// (0 for none). ECS gives 0 and unset 2 shares instead; berth keeps Docker's default.
pub fn cpu_shares(def: &berth_model::ContainerDefinition) -> Option<i64> {
    def.cpu.filter(|c| *c > 0).map(|c| i64::from(c.max(2)))
}

/// This machine's host name (`/proc/sys/kernel/hostname`), `localhost` when unreadable (part of
/// the container instance id, [`crate::identity::container_instance_id`]).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// The task's directory: `<data-dir>/tasks/<task-id>`.
pub fn task_dir(data_dir: &Path, task_id: &str) -> PathBuf {
    data_dir.join("tasks").join(task_id)
}

/// The directory behind a scratch volume: `<data-dir>/tasks/<task-id>/volumes/<name>`.
pub fn scratch_dir(data_dir: &Path, task_id: &str, volume: &str) -> PathBuf {
    task_dir(data_dir, task_id).join("volumes").join(volume)
}

/// The Docker name of a task-scoped volume: `berth-<first 12 of task id>-<volume>`.
pub fn task_volume_name(task_id: &str, volume: &str) -> String {
    let short: String = task_id.chars().take(12).collect();
    format!("berth-{short}-{volume}")
}

/// The default driver name of berth's volume plugin (the stem of its socket file).
pub const DEFAULT_VOLUME_PLUGIN: &str = "berth";

/// The Docker names of the volumes berth creates for this task and removes at its cleanup
/// (task-scoped `dockerVolumeConfiguration` and EFS volumes).
pub fn task_volume_names(state: &TaskState) -> Vec<String> {
    state
        .definition
        .volumes
        .iter()
        .filter(|v| match &v.kind {
            VolumeKind::Docker(cfg) => cfg.scope == VolumeScope::Task,
            VolumeKind::Efs(_) => true,
            VolumeKind::Host { .. } | VolumeKind::Scratch => false,
        })
        .map(|v| task_volume_name(&state.id, &v.name))
        .collect()
}

/// The volume plugin options for an EFS volume, as ECS builds them for its plugin:
/// `type=efs`, `device=<fileSystemId>[:<rootDirectory>]`, `o=tls,iam,accesspoint=<id>` (each
/// present only when configured).
pub fn efs_driver_opts(cfg: &EfsVolumeConfiguration) -> BTreeMap<String, String> {
    let mut opts = BTreeMap::new();
    opts.insert("type".to_string(), "efs".to_string());
    let device = if cfg.root_directory.is_empty() || cfg.root_directory == "/" {
        cfg.file_system_id.clone()
    } else {
        format!("{}:{}", cfg.file_system_id, cfg.root_directory)
    };
    opts.insert("device".to_string(), device);
    let mut o = Vec::new();
    if cfg.transit_encryption {
        o.push("tls".to_string());
    }
    if cfg.iam {
        o.push("iam".to_string());
    }
    if let Some(ap) = &cfg.access_point_id {
        o.push(format!("accesspoint={ap}"));
    }
    if !o.is_empty() {
        opts.insert("o".to_string(), o.join(","));
    }
    opts
}

/// Decide how each of the task's volumes is provided, in definition order. EFS volumes become
/// task-scoped volumes of berth's volume plugin, whose driver name is `volume_plugin`.
pub fn plan_volumes(
    state: &TaskState,
    data_dir: &Path,
    volume_plugin: &str,
) -> Vec<(String, VolumePlan)> {
    state
        .definition
        .volumes
        .iter()
        .map(|v| {
            let plan = match &v.kind {
                VolumeKind::Host { source_path } => {
                    VolumePlan::HostPath(PathBuf::from(source_path))
                }
                VolumeKind::Scratch => {
                    VolumePlan::HostPath(scratch_dir(data_dir, &state.id, &v.name))
                }
                VolumeKind::Docker(cfg) => {
                    let mut labels = cfg.labels.clone();
                    let name = match cfg.scope {
                        VolumeScope::Task => {
                            labels.insert(LABEL_VOLUME_TASK.to_string(), state.id.clone());
                            task_volume_name(&state.id, &v.name)
                        }
                        VolumeScope::Shared => v.name.clone(),
                    };
                    let spec = VolumeSpec {
                        name,
                        driver: cfg.driver.clone(),
                        driver_opts: cfg.driver_opts.clone(),
                        labels,
                    };
                    match cfg.scope {
                        VolumeScope::Task => VolumePlan::TaskVolume(spec),
                        VolumeScope::Shared => VolumePlan::SharedVolume {
                            spec,
                            autoprovision: cfg.autoprovision,
                        },
                    }
                }
                VolumeKind::Efs(cfg) => {
                    let mut labels = BTreeMap::new();
                    labels.insert(LABEL_VOLUME_TASK.to_string(), state.id.clone());
                    VolumePlan::TaskVolume(VolumeSpec {
                        name: task_volume_name(&state.id, &v.name),
                        driver: volume_plugin.to_string(),
                        driver_opts: efs_driver_opts(cfg),
                        labels,
                    })
                }
            };
            (v.name.clone(), plan)
        })
        .collect()
}

/// Where containers reach the task metadata endpoint: base URLs without a trailing slash, e.g.
/// `http://172.17.0.1:51679` (bridge gateway) and `http://127.0.0.1:51679` (host network).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataEndpoint {
    /// For containers on a Docker bridge network.
    pub bridge_base: String,
    /// For containers in the host's network namespace.
    pub host_base: String,
}

/// The metadata environment of container `i`: `ECS_CONTAINER_METADATA_URI_V4` and
/// `ECS_CONTAINER_METADATA_URI` (v3), pointing at an address that container can reach. Empty in
/// `none` network mode (nothing is reachable).
pub fn metadata_env(state: &TaskState, i: usize, endpoint: &MetadataEndpoint) -> Vec<String> {
    let base = match state.definition.network_mode {
        NetworkMode::Bridge | NetworkMode::Awsvpc => &endpoint.bridge_base,
        NetworkMode::Host => &endpoint.host_base,
        NetworkMode::None => return Vec::new(),
    };
    let id = &state.containers[i].metadata_id;
    vec![
        format!("ECS_CONTAINER_METADATA_URI_V4={base}/v4/{id}"),
        format!("ECS_CONTAINER_METADATA_URI={base}/v3/{id}"),
    ]
}

/// The Docker labels of container `i`: its `dockerLabels`, then the task's
/// [`TaskState::extra_labels`] (none on the pause container), then berth's own (`berth.task`,
/// `berth.container`, `berth.family`, `berth.revision`); a later one wins over an earlier one of
/// the same key.
pub fn container_labels(state: &TaskState, i: usize) -> BTreeMap<String, String> {
    let def = state.def(i);
    let task = &state.definition;
    let mut labels: BTreeMap<String, String> = def.docker_labels.clone();
    if !state.is_pause(i) {
        labels.extend(
            state
                .extra_labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone())),
        );
    }
    labels.insert(LABEL_TASK.into(), state.id.clone());
    labels.insert(LABEL_CONTAINER.into(), def.name.clone());
    labels.insert(LABEL_FAMILY.into(), task.family.clone());
    labels.insert(LABEL_REVISION.into(), task.revision.to_string());
    labels
}

/// The hostname of every container of an awsvpc task: the first 12 characters of the task id
/// (the pause container's hostname, which containers joining its network namespace take; Docker
/// maps it to the task's address in the shared `/etc/hosts`).
pub fn task_hostname(task_id: &str) -> String {
    task_id.chars().take(12).collect()
}

/// The Docker network mode container `i` is created with: the pause container's `bridge` in
/// awsvpc mode (else `none`: it owns only PID or IPC namespaces); a container of an awsvpc task
/// joins it (`container:<pause's Docker name>`); otherwise the task's network mode.
pub fn network_mode(state: &TaskState, i: usize) -> String {
    let shares = Shares::of(&state.definition);
    if state.is_pause(i) {
        return if shares.network { "bridge" } else { "none" }.to_string();
    }
    let join = state
        .pause_index()
        .filter(|_| shares.network)
        .map(|p| format!("container:{}", state.containers[p].docker_name));
    match (state.definition.network_mode, join) {
        (NetworkMode::Awsvpc, Some(pause)) => pause,
        // Only a hand-built state has awsvpc without its pause container.
        (NetworkMode::Bridge | NetworkMode::Awsvpc, _) => "bridge".to_string(),
        (NetworkMode::Host, _) => "host".to_string(),
        (NetworkMode::None, _) => "none".to_string(),
    }
}

/// The create spec of the task's pause container `p` ([`crate::pause`]): berth's pause image
/// ([`crate::pause_image::image_name`]; [`crate::create_spec::build`] puts the operator's in its
/// place when there is one);
/// in awsvpc mode on the Docker bridge, with the task's hostname and every container's port
/// mappings published on host port = container port; otherwise with no network of its own
/// (`none`: it owns only PID or IPC namespaces); `shareable` IPC with `ipcMode: task`.
pub fn pause_spec(state: &TaskState, p: usize) -> ContainerSpec {
    let shares = Shares::of(&state.definition);
    let ports = if shares.network {
        state
            .definition
            .container_definitions
            .iter()
            .flat_map(|d| &d.port_mappings)
            .map(|m| PortSpec {
                container_port: m.container_port,
                protocol: m.protocol.as_str(),
                host_port: Some(m.container_port),
            })
            .collect()
    } else {
        Vec::new()
    };
    ContainerSpec {
        name: state.containers[p].docker_name.clone(),
        image: crate::pause_image::image_name(),
        labels: container_labels(state, p),
        hostname: shares.network.then(|| task_hostname(&state.id)),
        ports,
        network_mode: network_mode(state, p),
        ipc_mode: shares.ipc.then(|| "shareable".to_string()),
        stop_timeout_secs: Some(pause::PAUSE_STOP_TIMEOUT_SECS),
        ..ContainerSpec::default()
    }
}

/// The definition's part of container `i`'s create spec (see the module docs; a container is
/// created from [`crate::create_spec::build`]). `volumes` comes from [`plan_volumes`]; `metadata`,
/// when the metadata endpoint is served, adds its environment variables. For a container with
/// `secrets`, `secretOptions` or `environmentFiles` use [`container_spec_with_values`].
pub fn container_spec(
    state: &TaskState,
    i: usize,
    volumes: &[(String, VolumePlan)],
    metadata: Option<&MetadataEndpoint>,
) -> ContainerSpec {
    container_spec_with_values(state, i, volumes, metadata, &crate::secrets::NO_VALUES)
}

/// [`container_spec`] with the container's resolved values: the environment in ECS's precedence
/// (secrets over `environment` over environment files, [`ContainerValues::environment`]) and the
/// secret log options added to the log options (a secret with an empty value adds none, as on
/// ECS). The spec then holds secret values: it is handed to the runtime and never saved or logged.
pub fn container_spec_with_values(
    state: &TaskState,
    i: usize,
    volumes: &[(String, VolumePlan)],
    metadata: Option<&MetadataEndpoint>,
    values: &ContainerValues,
) -> ContainerSpec {
    if state.is_pause(i) {
        return pause_spec(state, i);
    }
    // The namespaces the pause container owns are joined as `container:<pause>`.
    let shares = Shares::of(&state.definition);
    let join = state
        .pause_index()
        .map(|p| format!("container:{}", state.containers[p].docker_name));
    let joined = |owned: bool| join.clone().filter(|_| owned);
    let def = state.def(i);
    let task = &state.definition;
    let labels = container_labels(state, i);

    let mounts = def
        .mount_points
        .iter()
        .filter_map(|m| {
            let (kind, source) = volumes
                .iter()
                .find(|(n, _)| n == &m.source_volume)
                .and_then(|(_, p)| p.source())?;
            Some(MountSpec {
                kind,
                source,
                target: m.container_path.clone(),
                read_only: m.read_only,
            })
        })
        .collect();

    let volumes_from = def
        .volumes_from
        .iter()
        .filter_map(|v| {
            let j = state.index_of(&v.source_container)?;
            let ro = if v.read_only { ":ro" } else { "" };
            Some(format!("{}{ro}", state.containers[j].docker_name))
        })
        .collect();

    let links = def
        .links
        .iter()
        .filter_map(|link| {
            let j = state.index_of(&link.container_name)?;
            Some(format!(
                "{}:{}",
                state.containers[j].docker_name, link.alias
            ))
        })
        .collect();

    let health = def.health_check.as_ref().map(|h| HealthSpec {
        test: h.command.clone(),
        interval_ns: i64::from(h.interval) * NANOS_PER_SEC,
        timeout_ns: i64::from(h.timeout) * NANOS_PER_SEC,
        retries: i64::from(h.retries),
        start_period_ns: i64::from(h.start_period) * NANOS_PER_SEC,
    });

    let mib = |v: u64| i64::try_from(v.saturating_mul(1024 * 1024)).unwrap_or(i64::MAX);
    ContainerSpec {
        name: state.containers[i].docker_name.clone(),
        image: def.image.clone(),
        cmd: def.command.clone(),
        entrypoint: def.entry_point.clone(),
        env: values
            .environment(&def.environment)
            .into_iter()
            .chain(
                metadata
                    .map(|m| metadata_env(state, i, m))
                    .unwrap_or_default(),
            )
            .collect(),
        labels,
        working_dir: def.working_directory.clone(),
        user: def.user.clone(),
        hostname: def.hostname.clone(),
        mounts,
        volumes_from,
        links,
        // In awsvpc mode the pause container publishes the task's ports.
        ports: def
            .port_mappings
            .iter()
            .filter(|_| !shares.network)
            .map(|p| PortSpec {
                container_port: p.container_port,
                protocol: p.protocol.as_str(),
                host_port: p.host_port.filter(|h| *h != 0),
            })
            .collect(),
        network_mode: network_mode(state, i),
        cpu_shares: cpu_shares(def),
        memory_bytes: def.memory.map(mib),
        memory_reservation_bytes: def.memory_reservation.map(mib),
        readonly_rootfs: def.readonly_root_filesystem,
        privileged: def.privileged,
        ulimits: def
            .ulimits
            .iter()
            .map(|u| UlimitSpec {
                name: u.name.clone(),
                soft: u.soft_limit,
                hard: u.hard_limit,
            })
            .collect(),
        log_driver: def.log_driver().map(str::to_string),
        log_options: {
            let mut options = def.log_options();
            for (name, value) in &values.log_options {
                if !value.expose().is_empty() {
                    options.insert(name.clone(), value.expose().to_owned());
                }
            }
            options
        },
        health,
        stop_timeout_secs: def.stop_timeout,
        linux: linux_spec(def),
        dns: def.dns_servers.clone(),
        dns_search: def.dns_search_domains.clone(),
        extra_hosts: def
            .extra_hosts
            .iter()
            .map(|h| format!("{}:{}", h.hostname, h.ip_address))
            .collect(),
        sysctls: def.system_controls.clone(),
        security_opt: def.docker_security_options.clone(),
        open_stdin: def.interactive,
        tty: def.pseudo_terminal,
        network_disabled: def.disable_networking,
        pid_mode: task.pid_mode.and_then(|m| match m {
            berth_model::PidMode::Host => Some("host".to_string()),
            berth_model::PidMode::Task => joined(shares.pid),
        }),
        ipc_mode: task.ipc_mode.and_then(|m| match m {
            berth_model::IpcMode::Host => Some("host".to_string()),
            berth_model::IpcMode::None => Some("none".to_string()),
            berth_model::IpcMode::Task => joined(shares.ipc),
        }),
        gpu_count: def.gpu.map(crate::gpu::docker_count),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::{ContainerDefinition, Device, LinuxParameters, Tmpfs};

    const TASK: &str = "0123456789abcdef0123456789abcdef";

    fn state(mode: NetworkMode, pid_task: bool) -> TaskState {
        let mut def = berth_model::TaskDefinition::new(
            "fam",
            vec![
                ContainerDefinition::new("a", "img"),
                ContainerDefinition::new("b", "img"),
            ],
        );
        def.network_mode = mode;
        def.pid_mode = pid_task.then_some(berth_model::PidMode::Task);
        TaskState::new(TASK.into(), def, 0)
    }

    #[test]
    fn the_network_mode_joins_the_pause_container_only_in_awsvpc_mode() {
        let s = state(NetworkMode::Awsvpc, false);
        let pause = s.pause_index().expect("a pause container");
        assert_eq!(network_mode(&s, pause), "bridge");
        let join = format!("container:{}", s.containers[pause].docker_name);
        assert_eq!(network_mode(&s, 0), join);
        assert_eq!(network_mode(&s, 1), join);
        let s = state(NetworkMode::Bridge, true);
        let pause = s.pause_index().expect("a pause container");
        assert_eq!(network_mode(&s, pause), "none");
        assert_eq!(network_mode(&s, 0), "bridge");
        for (mode, name) in [
            (NetworkMode::Bridge, "bridge"),
            (NetworkMode::Host, "host"),
            (NetworkMode::None, "none"),
        ] {
            let s = state(mode, false);
            assert_eq!(s.pause_index(), None);
            assert_eq!(network_mode(&s, 0), name);
        }
        // What the create spec says.
        for s in [
            state(NetworkMode::Awsvpc, false),
            state(NetworkMode::Host, true),
        ] {
            for i in 0..s.containers.len() {
                assert_eq!(
                    container_spec(&s, i, &[], None).network_mode,
                    network_mode(&s, i)
                );
            }
        }
    }

    #[test]
    fn extra_labels_are_on_the_definitions_containers_between_theirs_and_berths() {
        let mut s = state(NetworkMode::Awsvpc, false);
        s.definition.container_definitions[0].docker_labels = BTreeMap::from([
            ("berth.node".to_string(), "mine".to_string()),
            ("team".to_string(), "a".to_string()),
        ]);
        s.extra_labels = BTreeMap::from([
            ("berth.node".to_string(), "n1".to_string()),
            (LABEL_TASK.to_string(), "not the task".to_string()),
        ]);
        let labels = container_labels(&s, 0);
        assert_eq!(labels["berth.node"], "n1", "over the definition's");
        assert_eq!(labels["team"], "a");
        assert_eq!(labels[LABEL_TASK], TASK, "berth's own win");
        assert_eq!(container_labels(&s, 1)["berth.node"], "n1");
        let pause = s.pause_index().expect("a pause container");
        assert!(!container_labels(&s, pause).contains_key("berth.node"));
        assert_eq!(container_spec(&s, 0, &[], None).labels, labels);
    }

    #[test]
    fn linux_parameters_become_docker_units() {
        let mut def = ContainerDefinition::new("c", "busybox");
        assert_eq!(linux_spec(&def), LinuxSpec::default());
        def.memory = Some(64);
        def.linux_parameters = Some(LinuxParameters {
            init_process_enabled: true,
            capabilities_add: vec!["NET_ADMIN".into()],
            capabilities_drop: vec!["CHOWN".into()],
            devices: vec![Device {
                host_path: "/dev/null".into(),
                container_path: None,
                permissions: "rw".into(),
            }],
            tmpfs: vec![Tmpfs {
                container_path: "/scratch".into(),
                size: 16,
                mount_options: vec!["noexec".into(), "mode=1770".into()],
            }],
            shared_memory_size: Some(32),
            max_swap: Some(32),
            swappiness: Some(10),
        });
        let spec = linux_spec(&def);
        assert!(spec.init);
        assert_eq!(spec.cap_add, vec!["NET_ADMIN"]);
        assert_eq!(spec.cap_drop, vec!["CHOWN"]);
        assert_eq!(
            spec.devices,
            vec![DeviceSpec {
                host_path: "/dev/null".into(),
                container_path: "/dev/null".into(),
                permissions: "rw".into(),
            }]
        );
        assert_eq!(
            spec.tmpfs.get("/scratch").map(String::as_str),
            Some("noexec,mode=1770,size=16m")
        );
        assert_eq!(spec.shm_size_bytes, Some(32 << 20));
        assert_eq!(spec.memory_swap_bytes, Some(96 << 20));
        assert_eq!(spec.memory_swappiness, Some(10));
    }
}
