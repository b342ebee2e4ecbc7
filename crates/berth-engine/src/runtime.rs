//! The runtime seam: everything the engine asks of a container engine, as a trait.
//!
//! `berth-docker` implements it over the Docker Engine API; [`crate::fake::FakeRuntime`] implements it
//! in memory for engine tests. Errors are a small enum so the engine can decide by kind, never by
//! parsing text; a missing object or a conflict names the container, image, volume or network
//! ([`Object`]); messages keep Docker's own words for people.

pub use crate::auth::RegistryAuth;
use crate::spec::{ContainerSpec, VolumeSpec};
use crate::state::{Health, Millis};
use futures_util::stream::BoxStream;
use std::future::Future;

/// The object a runtime call found missing or in conflict, by kind, with the name or id the
/// call was given.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Object {
    Container(String),
    Image(String),
    Volume(String),
    Network(String),
}

impl Object {
    /// The name or id, as the call was given it.
    pub fn name(&self) -> &str {
        match self {
            Object::Container(n) | Object::Image(n) | Object::Volume(n) | Object::Network(n) => n,
        }
    }

    /// `container`, `image`, `volume` or `network`.
    pub fn kind(&self) -> &'static str {
        match self {
            Object::Container(_) => "container",
            Object::Image(_) => "image",
            Object::Volume(_) => "volume",
            Object::Network(_) => "network",
        }
    }
}

impl std::fmt::Display for Object {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind(), self.name())
    }
}

/// What went wrong in the runtime, by kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuntimeError {
    /// The container, image, volume or network `object` does not exist; `message` is the
    /// engine's.
    #[error("not found: {message}")]
    NotFound { object: Object, message: String },
    /// A name is taken, or `object` is in the wrong state for the request (an image or volume in
    /// use, a container being removed); `message` is the engine's.
    #[error("conflict: {message}")]
    Conflict { object: Object, message: String },
    /// The image could not be pulled; `message` is Docker's.
    #[error("{message}")]
    PullFailed {
        image: String,
        message: String,
        /// False when retrying cannot help (missing repository or tag, authentication).
        retriable: bool,
    },
    /// The engine did not answer in time; the message names the call, its limit and whether the
    /// Engine answers other calls (slow) or none (down).
    #[error("{0}")]
    Timeout(String),
    /// The engine cannot be reached (the message names the address tried).
    #[error("{0}")]
    Unavailable(String),
    /// Any other error the engine reported (its message, unchanged).
    #[error("{0}")]
    Other(String),
}

impl RuntimeError {
    /// [`RuntimeError::NotFound`] of `object`.
    pub fn not_found(object: Object, message: impl Into<String>) -> Self {
        RuntimeError::NotFound {
            object,
            message: message.into(),
        }
    }

    /// [`RuntimeError::Conflict`] over `object`.
    pub fn conflict(object: Object, message: impl Into<String>) -> Self {
        RuntimeError::Conflict {
            object,
            message: message.into(),
        }
    }

    /// The object a [`RuntimeError::NotFound`] or [`RuntimeError::Conflict`] is about.
    pub fn object(&self) -> Option<&Object> {
        match self {
            RuntimeError::NotFound { object, .. } | RuntimeError::Conflict { object, .. } => {
                Some(object)
            }
            _ => None,
        }
    }
}

/// Progress of one pull, summed over its layers (from the engine's pull stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PullProgress {
    pub layers: u32,
    pub layers_done: u32,
    pub bytes: u64,
    pub bytes_total: u64,
}

/// Where a pull reports its progress (best effort: a merged pull reports to its first caller).
pub type ProgressSink = tokio::sync::mpsc::UnboundedSender<PullProgress>;

/// What `inspect` tells the engine about a container.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ContainerInfo {
    pub id: String,
    pub name: String,
    pub running: bool,
    /// Set once the container has exited.
    pub exit_code: Option<i64>,
    pub started_at: Option<Millis>,
    pub finished_at: Option<Millis>,
    pub health: Option<Health>,
    pub labels: std::collections::BTreeMap<String, String>,
    /// Docker is removing the container (`docker rm -f`: removal is marked in progress before the
    /// kill, so an inspect after its `die` event says so, or answers not found).
    pub removing: bool,
    /// The kernel's OOM killer ended the container (Docker `State.OOMKilled`).
    pub oom_killed: bool,
    /// Docker's own error about the container (`State.Error`), when it has one.
    pub state_error: Option<String>,
}

impl ContainerInfo {
    /// The reason ECS gives a container that exited in this state, if any: an OOM kill is
    /// `OutOfMemoryError: Container killed due to memory usage`; otherwise a Docker state error is
    /// `DockerStateError: <Docker's message>` (the ECS agent checks the error first and lets an OOM
    /// kill override it).
    pub fn exit_reason(&self) -> Option<String> {
        if self.oom_killed {
            return Some(OOM_REASON.to_string());
        }
        self.state_error
            .as_deref()
            .filter(|e| !e.is_empty())
            .map(|e| format!("DockerStateError: {e}"))
    }
}

/// ECS's reason for a container the kernel's OOM killer ended.
pub const OOM_REASON: &str = "OutOfMemoryError: Container killed due to memory usage";

/// What the task metadata endpoint needs to know about a created container beyond the task state
/// (from `inspect`): dynamic details Docker decides, such as addresses and bound host ports.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ContainerDetails {
    /// The image's content id, e.g. `sha256:…`.
    pub image_id: Option<String>,
    /// The networks the container is attached to (empty before it starts).
    pub networks: Vec<NetworkAttachment>,
    /// Ports actually bound on the host (bridge mode; empty before the container starts).
    pub ports: Vec<BoundPort>,
    /// The health check's last result, when the container has a health check.
    pub health: Option<HealthDetails>,
    pub mounts: Vec<MountDetails>,
    /// Docker's `HostConfig.LogConfig.Type`: the log driver the container logs through (its
    /// definition's, as resolved for this host, or the daemon's default when it sets none).
    pub log_driver: Option<String>,
    /// Docker's `HostConfig.LogConfig.Config` (the daemon's default options merged in).
    pub log_options: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NetworkAttachment {
    /// The Docker network name, e.g. `bridge`.
    pub network: String,
    pub ipv4_addresses: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BoundPort {
    pub container_port: u16,
    /// `tcp` or `udp`.
    pub protocol: String,
    pub host_port: Option<u16>,
    pub host_ip: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HealthDetails {
    pub status: Health,
    /// When the current status began (first check of the trailing run of like results).
    pub since: Option<Millis>,
    /// Exit code of the last check.
    pub exit_code: Option<i64>,
    /// Output of the last check.
    pub output: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MountDetails {
    /// The Docker volume name (None for bind mounts).
    pub name: Option<String>,
    pub source: Option<String>,
    pub destination: String,
}

/// What `inspect_network` tells about a Docker network.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NetworkInfo {
    pub name: String,
    pub ipam: Vec<IpamConfig>,
    /// The host interface of a bridge network (`com.docker.network.bridge.name`), e.g. `docker0`.
    pub bridge_interface: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IpamConfig {
    /// CIDR, e.g. `172.17.0.0/16`.
    pub subnet: Option<String>,
    pub gateway: Option<String>,
}

/// An image the engine has, as its image list shows it (for image cleanup).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ImageSummary {
    /// The content id, e.g. `sha256:…`.
    pub id: String,
    /// Its names (`repository:tag`); empty for an untagged image (Docker's `<none>:<none>` is
    /// left out).
    pub repo_tags: Vec<String>,
    /// Bytes on disk as the engine counts them (layers shared with other images included).
    pub size: u64,
    /// When the image was built (Unix milliseconds).
    pub created: Millis,
    pub labels: std::collections::BTreeMap<String, String>,
}

/// A container the engine has, running or not, as its container list shows it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ContainerSummary {
    pub id: String,
    pub name: String,
    /// The image as the container was created with it (a name or an id).
    pub image: String,
    /// The content id of that image.
    pub image_id: String,
    pub running: bool,
    pub labels: std::collections::BTreeMap<String, String>,
}

/// A container event from the engine's event stream, already filtered to one task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeEvent {
    Start {
        id: String,
        at: Millis,
    },
    Die {
        id: String,
        exit_code: Option<i64>,
        at: Millis,
    },
    Health {
        id: String,
        health: Health,
    },
    Destroy {
        id: String,
        at: Millis,
    },
}

/// The container engine, as the task engine sees it. Every method is idempotent where the engine
/// allows it (removing a missing container succeeds, stopping a stopped one succeeds).
pub trait Runtime: Send + Sync + 'static {
    /// Whether the image is present locally.
    fn image_present(&self, image: &str)
    -> impl Future<Output = Result<bool, RuntimeError>> + Send;
    /// Pull the image with the registry login `auth` (anonymously when `None`), reporting
    /// progress to `progress` when given. Merging concurrent pulls of one image is the
    /// implementation's job; pulls with different logins must not share a result. A refused
    /// login is a [`RuntimeError::PullFailed`] that is not retriable, with the registry's message.
    fn pull(
        &self,
        image: &str,
        auth: Option<&RegistryAuth>,
        progress: Option<ProgressSink>,
    ) -> impl Future<Output = Result<(), RuntimeError>> + Send;
    /// Create the image `image` (`repository:tag`) from a root filesystem: `rootfs` is a tar
    /// stream, `changes` Dockerfile instructions applied to the image's configuration (`CMD`,
    /// `LABEL`, `ENV`, …; Docker 20.10 refuses `STOPSIGNAL` here), as `docker import --change`
    /// does. An image already under that name loses the name to the new one.
    fn import_image(
        &self,
        image: &str,
        rootfs: Vec<u8>,
        changes: Vec<String>,
    ) -> impl Future<Output = Result<(), RuntimeError>> + Send;
    /// Create a container; returns its id.
    fn create(
        &self,
        spec: &ContainerSpec,
    ) -> impl Future<Output = Result<String, RuntimeError>> + Send;
    fn start(&self, id: &str) -> impl Future<Output = Result<(), RuntimeError>> + Send;
    /// Stop with SIGTERM, then SIGKILL after `timeout_secs`; returns once the container has exited.
    fn stop(
        &self,
        id: &str,
        timeout_secs: u32,
    ) -> impl Future<Output = Result<(), RuntimeError>> + Send;
    /// SIGKILL now.
    fn kill(&self, id: &str) -> impl Future<Output = Result<(), RuntimeError>> + Send;
    fn inspect(&self, id: &str)
    -> impl Future<Output = Result<ContainerInfo, RuntimeError>> + Send;
    /// Remove a container and its anonymous volumes, forcibly. A missing container is success.
    fn remove(&self, id: &str) -> impl Future<Output = Result<(), RuntimeError>> + Send;
    /// Create a volume unless it exists; returns true when it was created now.
    fn ensure_volume(
        &self,
        spec: &VolumeSpec,
    ) -> impl Future<Output = Result<bool, RuntimeError>> + Send;
    fn volume_exists(&self, name: &str) -> impl Future<Output = Result<bool, RuntimeError>> + Send;
    /// Remove a volume. A missing volume is success.
    fn remove_volume(&self, name: &str) -> impl Future<Output = Result<(), RuntimeError>> + Send;
    /// Subscribe to container events of one task (label `berth.task=<task_id>`). The stream ends
    /// when the connection breaks; the caller re-subscribes and re-syncs.
    fn events(
        &self,
        task_id: &str,
    ) -> impl Future<Output = Result<BoxStream<'static, RuntimeEvent>, RuntimeError>> + Send;

    // --- For the task metadata endpoint. No defaults: every runtime (and every wrapper of one,
    // such as the agent's timing decorator) says what it does, so a wrapper cannot silently answer
    // "not supported" for a call its inner runtime serves.

    /// Dynamic details of a created container (addresses, bound ports, image id, health output).
    fn inspect_details(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<ContainerDetails, RuntimeError>> + Send;

    /// One sample of the container's resource statistics, in the engine's own JSON (Docker's
    /// `GET /containers/{id}/stats?stream=false&one-shot=true`).
    fn stats(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<serde_json::Value, RuntimeError>> + Send;

    // --- For image cleanup.

    /// Every image the engine has.
    fn list_images(&self) -> impl Future<Output = Result<Vec<ImageSummary>, RuntimeError>> + Send;

    /// Every container the engine has, berth's or not, running or not.
    fn list_containers(
        &self,
    ) -> impl Future<Output = Result<Vec<ContainerSummary>, RuntimeError>> + Send;

    /// Remove one image reference, a name (`repository:tag`) or an id, never forcibly (what
    /// `docker rmi` does): a name is untagged, and the image itself is deleted once no name is left
    /// (answers true then, false when only the name went). An image a container uses, running or
    /// not, is a [`RuntimeError::Conflict`], and so is an id with several names; a missing image
    /// is [`RuntimeError::NotFound`].
    fn remove_image(&self, image: &str) -> impl Future<Output = Result<bool, RuntimeError>> + Send;

    /// Inspect a network by name (e.g. `bridge`, to find its gateway address).
    fn inspect_network(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<NetworkInfo, RuntimeError>> + Send;
}
