//! The validated task definition: plain data that the rest of berth consumes.
//!
//! Values that come out of [`crate::parse()`] hold every invariant checked by validation (names
//! unique and well-formed, dependencies acyclic and pointing at known containers, mount points
//! naming defined volumes, numbers in range). The fields are public and
//! [`ContainerDefinition::new`] exists for tests and tools that build definitions by hand: such
//! values carry no promise until they have been through validation. They serialize with ECS's camelCase names so the
//! store can keep them and the API can show them.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A whole task definition (ECS `RegisterTaskDefinition` shape, the subset berth honours).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskDefinition {
    pub family: String,
    /// ECS revision; 0 when the file does not say.
    pub revision: u32,
    pub container_definitions: Vec<ContainerDefinition>,
    pub volumes: Vec<Volume>,
    pub network_mode: NetworkMode,
    /// Task-level CPU units, as ECS writes them (a string such as "256" or "1 vCPU").
    pub cpu: Option<String>,
    /// Task-level memory, as ECS writes it (a string such as "512" (MiB) or "1 GB").
    pub memory: Option<String>,
    /// `pidMode`; None = each container has its own PID namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_mode: Option<PidMode>,
    /// `ipcMode`; None = each container has its own (private) IPC namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipc_mode: Option<IpcMode>,
    /// The task's tags (`TaskTags` of the metadata endpoint): the definition's `tags` (the
    /// `describe-task-definition` wrapper's, or `RegisterTaskDefinition`'s beside `family`), then
    /// those given with the task (`berth run --tag`, `berth submit --tag`), which win per key.
    /// Tasks stored before tags existed load with none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<crate::tags::Tag>,
    /// `taskRoleArn`: the IAM role (a full ARN or a role name, checked by [`crate::role`]) whose
    /// credentials the task's containers get from the credentials endpoint. Absent in states saved
    /// before berth served roles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_role_arn: Option<String>,
    /// `executionRoleArn`: the role berth itself uses for the task (secrets, images, awslogs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_role_arn: Option<String>,
}

/// `pidMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PidMode {
    /// Every container uses the host's PID namespace (Docker `PidMode: host`).
    Host,
    /// One PID namespace shared by the task's containers, owned by the task's pause container.
    Task,
}

/// `ipcMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IpcMode {
    /// Every container uses the host's IPC namespace (Docker `IpcMode: host`).
    Host,
    /// Private IPC namespaces with no `/dev/shm` mounted (Docker `IpcMode: none`).
    None,
    /// One IPC namespace shared by the task's containers, owned by the task's pause container.
    Task,
}

impl TaskDefinition {
    /// A task of these containers with every other field as a definition that leaves it out has
    /// it: revision 0 (not said), no volumes, `bridge` network mode, no task-level cpu or memory,
    /// private PID and IPC namespaces, no tags.
    pub fn new(family: impl Into<String>, container_definitions: Vec<ContainerDefinition>) -> Self {
        TaskDefinition {
            family: family.into(),
            revision: 0,
            container_definitions,
            volumes: Vec::new(),
            network_mode: NetworkMode::Bridge,
            cpu: None,
            memory: None,
            pid_mode: None,
            ipc_mode: None,
            tags: Vec::new(),
            task_role_arn: None,
            execution_role_arn: None,
        }
    }

    /// The container with this name, if any.
    pub fn container(&self, name: &str) -> Option<&ContainerDefinition> {
        self.container_definitions.iter().find(|c| c.name == name)
    }

    /// The volume with this name, if any.
    pub fn volume(&self, name: &str) -> Option<&Volume> {
        self.volumes.iter().find(|v| v.name == name)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    #[default]
    Bridge,
    Host,
    None,
    /// One network namespace per task, owned by the task's pause container on the Docker bridge;
    /// every container joins it (ECS's awsvpc on EC2, without the elastic network interface).
    Awsvpc,
}

impl NetworkMode {
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkMode::Bridge => "bridge",
            NetworkMode::Host => "host",
            NetworkMode::None => "none",
            NetworkMode::Awsvpc => "awsvpc",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerDefinition {
    pub name: String,
    pub image: String,
    /// Defaults to true, as in ECS.
    pub essential: bool,
    pub command: Option<Vec<String>>,
    pub entry_point: Option<Vec<String>>,
    /// In the order given; later duplicates win when handed to Docker.
    pub environment: Vec<EnvVar>,
    /// `secrets`: environment variables whose values come from a secret source when the container
    /// is created. Only the references are kept (and saved), never the values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<Secret>,
    /// `environmentFiles`, in order (the first file that sets a variable wins; `environment` and
    /// `secrets` win over every file).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub environment_files: Vec<EnvironmentFile>,
    pub working_directory: Option<String>,
    pub user: Option<String>,
    pub depends_on: Vec<Dependency>,
    pub health_check: Option<HealthCheck>,
    pub mount_points: Vec<MountPoint>,
    pub volumes_from: Vec<VolumeFrom>,
    /// Docker links to other containers of the task (`bridge` network mode only), in `links`
    /// order. Absent from states saved before berth read `links`, hence the default.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<Link>,
    pub port_mappings: Vec<PortMapping>,
    /// CPU units (1024 = one core), mapped to Docker CPU shares.
    pub cpu: Option<u32>,
    /// Hard memory limit in MiB.
    pub memory: Option<u64>,
    /// Soft memory limit in MiB.
    pub memory_reservation: Option<u64>,
    /// Seconds between SIGTERM and SIGKILL; None = the agent default (30 s).
    pub stop_timeout: Option<u32>,
    /// Seconds this container may take to reach its dependents' condition; None = no limit.
    pub start_timeout: Option<u32>,
    pub docker_labels: BTreeMap<String, String>,
    pub readonly_root_filesystem: bool,
    pub privileged: bool,
    pub hostname: Option<String>,
    pub ulimits: Vec<Ulimit>,
    pub log_configuration: Option<LogConfiguration>,
    /// `linuxParameters`; None when absent (then left out when saved, so states saved before
    /// berth read it keep their format).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linux_parameters: Option<crate::linux::LinuxParameters>,
    /// `dnsServers`: IP addresses, in order (Docker `Dns`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns_servers: Vec<String>,
    /// `dnsSearchDomains`, in order (Docker `DnsSearch`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns_search_domains: Vec<String>,
    /// `extraHosts` (Docker `ExtraHosts`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_hosts: Vec<ExtraHost>,
    /// `systemControls`: sysctl name → value (Docker `Sysctls`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub system_controls: BTreeMap<String, String>,
    /// `dockerSecurityOptions`, as written (Docker `SecurityOpt`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub docker_security_options: Vec<String>,
    /// `interactive`: Docker `OpenStdin` (stdin stays open).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interactive: bool,
    /// `pseudoTerminal`: Docker `Tty`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pseudo_terminal: bool,
    /// `disableNetworking`: Docker `NetworkDisabled` (only the loopback interface).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disable_networking: bool,
    /// `resourceRequirements` of type `GPU`: how many GPUs the container asks Docker for; None
    /// when it asks for none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuRequest>,
    /// `repositoryCredentials`: the secret holding the registry login for this container's image
    /// (resolved through the secret provider when the image is pulled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository_credentials: Option<RepositoryCredentials>,
    /// `firelensConfiguration`: this container is the task's log router.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firelens_configuration: Option<crate::firelens::FirelensConfiguration>,
    /// `restartPolicy`: whether (and when) the container is restarted in place after it exits.
    /// None when absent (left out when saved, so states saved before berth read it load alike).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<RestartPolicy>,
}

/// ECS's default `restartAttemptPeriod`: a container must have run 300 s before it is restarted.
pub const DEFAULT_RESTART_ATTEMPT_PERIOD: u32 = 300;

/// `restartPolicy`: ECS's container restart policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RestartPolicy {
    /// Restarts happen only when true.
    pub enabled: bool,
    /// Exit codes after which the container is not restarted (at most 50), as written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignored_exit_codes: Vec<i64>,
    /// Seconds the container must have run since its start (or its last restart) before an exit
    /// restarts it (ECS: 60 – 1800, default [`DEFAULT_RESTART_ATTEMPT_PERIOD`]).
    pub restart_attempt_period: u32,
}

impl RestartPolicy {
    /// The policy of a container, when it has one and it is enabled.
    pub fn enabled_of(container: &ContainerDefinition) -> Option<&RestartPolicy> {
        container.restart_policy.as_ref().filter(|p| p.enabled)
    }
}

/// A `resourceRequirements` entry of type `GPU`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum GpuRequest {
    /// A number of GPUs, at least 1 (`"value": "2"`).
    Count(u32),
    /// Every GPU of the host (`"value": "ALL"`).
    All,
}

impl GpuRequest {
    /// The value as ECS writes it: `"2"`, `"ALL"`.
    pub fn ecs_value(self) -> String {
        match self {
            GpuRequest::Count(n) => n.to_string(),
            GpuRequest::All => "ALL".to_owned(),
        }
    }
}

/// `repositoryCredentials`: where the registry login for a private image is kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RepositoryCredentials {
    /// The secret's ARN or name (ECS: a Secrets Manager secret whose value is
    /// `{"username": "...", "password": "..."}`); names the secret, holds no secret itself.
    pub credentials_parameter: String,
}

/// One `extraHosts` entry: a line added to the container's `/etc/hosts`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtraHost {
    pub hostname: String,
    pub ip_address: String,
}

impl ContainerDefinition {
    /// A container with only a name and an image; every other field has the value ECS gives it
    /// when the definition leaves it out (`essential` true, everything else absent or empty).
    pub fn new(name: impl Into<String>, image: impl Into<String>) -> Self {
        ContainerDefinition {
            name: name.into(),
            image: image.into(),
            essential: true,
            command: None,
            entry_point: None,
            environment: Vec::new(),
            secrets: Vec::new(),
            environment_files: Vec::new(),
            working_directory: None,
            user: None,
            depends_on: Vec::new(),
            health_check: None,
            mount_points: Vec::new(),
            volumes_from: Vec::new(),
            links: Vec::new(),
            port_mappings: Vec::new(),
            cpu: None,
            memory: None,
            memory_reservation: None,
            stop_timeout: None,
            start_timeout: None,
            docker_labels: BTreeMap::new(),
            readonly_root_filesystem: false,
            privileged: false,
            hostname: None,
            ulimits: Vec::new(),
            log_configuration: None,
            linux_parameters: None,
            dns_servers: Vec::new(),
            dns_search_domains: Vec::new(),
            extra_hosts: Vec::new(),
            system_controls: BTreeMap::new(),
            docker_security_options: Vec::new(),
            interactive: false,
            pseudo_terminal: false,
            disable_networking: false,
            gpu: None,
            repository_credentials: None,
            firelens_configuration: None,
            restart_policy: None,
        }
    }

    /// The Docker log driver name, when the definition sets one.
    pub fn log_driver(&self) -> Option<&str> {
        self.log_configuration
            .as_ref()
            .map(|l| l.log_driver.as_str())
    }

    /// The log options that come from secrets (empty when there is no log configuration).
    pub fn log_secret_options(&self) -> &[Secret] {
        self.log_configuration
            .as_ref()
            .map(|l| l.secret_options.as_slice())
            .unwrap_or_default()
    }

    /// The log driver's options (empty when there is no log configuration).
    pub fn log_options(&self) -> BTreeMap<String, String> {
        self.log_configuration
            .as_ref()
            .map(|l| l.options.clone())
            .unwrap_or_default()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvVar {
    pub name: String,
    pub value: String,
}

/// One `secrets` or `logConfiguration.secretOptions` entry: the environment variable (or log
/// option) `name` gets the value of the secret `value_from` refers to (an ARN or a parameter name;
/// [`crate::secret::SecretReference`] reads it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Secret {
    pub name: String,
    pub value_from: String,
}

/// One `environmentFiles` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvironmentFile {
    /// An S3 object ARN or an absolute path ([`crate::secret::EnvironmentFileLocation`]).
    pub value: String,
    /// ECS's only type, `s3`.
    #[serde(rename = "type")]
    pub file_type: EnvironmentFileType,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EnvironmentFileType {
    S3,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Dependency {
    pub container_name: String,
    pub condition: Condition,
}

/// A `dependsOn` condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Condition {
    /// The dependency has started (or already ran and stopped).
    Start,
    /// The dependency has stopped, whatever its exit code.
    Complete,
    /// The dependency has stopped with exit code 0.
    Success,
    /// The dependency's health check reports healthy.
    Healthy,
}

impl Condition {
    pub const ALL: [Condition; 4] = [
        Condition::Start,
        Condition::Complete,
        Condition::Success,
        Condition::Healthy,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Condition::Start => "START",
            Condition::Complete => "COMPLETE",
            Condition::Success => "SUCCESS",
            Condition::Healthy => "HEALTHY",
        }
    }
}

/// A health check in ECS units (seconds).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheck {
    /// `["CMD-SHELL", "..."]` or `["CMD", "prog", "arg"...]`, as in ECS and Docker.
    pub command: Vec<String>,
    /// Seconds; ECS default 30.
    pub interval: u32,
    /// Seconds; ECS default 5.
    pub timeout: u32,
    /// ECS default 3.
    pub retries: u32,
    /// Seconds; ECS default 0.
    pub start_period: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MountPoint {
    pub source_volume: String,
    pub container_path: String,
    pub read_only: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeFrom {
    pub source_container: String,
    pub read_only: bool,
}

/// One `links` entry: ECS writes it `"name"` or `"name:alias"`; the alias defaults to the name.
/// It becomes Docker's `HostConfig.Links` entry `<Docker name of the target>:<alias>`, which puts
/// the alias in the linking container's `/etc/hosts`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Link {
    /// The linked container's name in the task definition.
    pub container_name: String,
    /// The host name the linking container reaches it by.
    pub alias: String,
}

impl Link {
    /// A link by the target's own name (`"db"` → alias `db`).
    pub fn new(container_name: impl Into<String>) -> Self {
        let container_name = container_name.into();
        Link {
            alias: container_name.clone(),
            container_name,
        }
    }

    /// A link with an alias (`"db:database"`).
    pub fn with_alias(container_name: impl Into<String>, alias: impl Into<String>) -> Self {
        Link {
            container_name: container_name.into(),
            alias: alias.into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    #[default]
    Tcp,
    Udp,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PortMapping {
    pub container_port: u16,
    /// None or 0 = an ephemeral host port chosen by Docker (bridge mode).
    pub host_port: Option<u16>,
    pub protocol: Protocol,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ulimit {
    pub name: String,
    pub soft_limit: i64,
    pub hard_limit: i64,
}

/// A Docker log driver name as the definition (or the host's log policy) gives it: one of Docker's
/// or ECS's drivers (`json-file`, `awslogs`, …) or a log plugin's name. Which of them a host can
/// use is the [`crate::logging::LogPolicy`]'s decision, not the parser's. Saved as the bare string
/// (states saved when this was a closed enum of three names load unchanged).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LogDriver(String);

impl LogDriver {
    pub const JSON_FILE: &'static str = "json-file";
    pub const LOCAL: &'static str = "local";
    pub const NONE: &'static str = "none";
    pub const JOURNALD: &'static str = "journald";
    pub const AWSFIRELENS: &'static str = "awsfirelens";

    /// A driver of this name. The parser and [`crate::logging::LogPolicy::new`] check the name
    /// first ([`crate::logging::check_driver_name`]).
    pub fn new(name: impl Into<String>) -> Self {
        LogDriver(name.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for LogDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogConfiguration {
    pub log_driver: LogDriver,
    pub options: BTreeMap<String, String>,
    /// `secretOptions`: log options whose values come from a secret source (references only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_options: Vec<Secret>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Volume {
    pub name: String,
    pub kind: VolumeKind,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum VolumeKind {
    /// A host path bind-mounted into containers.
    Host {
        source_path: String,
    },
    /// `host` without `sourcePath` (or no configuration at all): a directory private to the task.
    Scratch,
    Docker(DockerVolumeConfiguration),
    Efs(EfsVolumeConfiguration),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum VolumeScope {
    /// Created for the task and removed at its cleanup.
    #[default]
    Task,
    /// Outlives tasks; created only with `autoprovision` when missing.
    Shared,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DockerVolumeConfiguration {
    pub scope: VolumeScope,
    pub autoprovision: bool,
    /// Defaults to "local".
    pub driver: String,
    pub driver_opts: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EfsVolumeConfiguration {
    pub file_system_id: String,
    /// Defaults to "/".
    pub root_directory: String,
    pub transit_encryption: bool,
    pub access_point_id: Option<String>,
    pub iam: bool,
}
