//! berth-docker: the [`Runtime`] over the Docker Engine API (bollard). The only crate in berth that
//! talks to Docker.
//!
//! It owns: connecting (with API version negotiation, so an older Engine such as API 1.41 works),
//! translating bollard's errors into [`RuntimeError`] kinds (404 → not found, 409 → conflict, 304 on
//! stop → success, transport errors → unavailable), a timeout on every call (ECS's defaults), merging
//! concurrent pulls of one image into one, retrying retriable pull failures with backoff and jitter,
//! and mapping the engine-neutral [`ContainerSpec`] to Docker's create body field by field.

use berth_engine::runtime::{
    BoundPort, ContainerDetails, ContainerInfo, HealthDetails, IpamConfig, MountDetails,
    NetworkAttachment, NetworkInfo, ProgressSink, PullProgress, Runtime, RuntimeError,
    RuntimeEvent,
};
use berth_engine::spec::{ContainerSpec, LABEL_DATA_DIR, LABEL_TASK, MountKind, VolumeSpec};
use berth_engine::state::{Health, Millis};
use bollard::Docker;
use bollard::errors::Error as BollardError;
use bollard::models::{
    ContainerCreateBody, HealthConfig, HealthStatusEnum, HostConfig, HostConfigLogConfig, Mount,
    MountType, PortBinding, ResourcesUlimits, VolumeCreateRequest,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, CreateImageOptionsBuilder, EventsOptionsBuilder,
    KillContainerOptionsBuilder, RemoveContainerOptionsBuilder, RemoveVolumeOptionsBuilder,
    StatsOptionsBuilder, StopContainerOptionsBuilder,
};
use futures_util::future::{BoxFuture, FutureExt, Shared};
use futures_util::stream::{BoxStream, StreamExt};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A container berth created, as listed by [`DockerRuntime::list_managed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedContainer {
    pub id: String,
    pub name: String,
    /// Its `berth.task` label.
    pub task: String,
    /// Its `berth.data-dir` label (absent on containers of older berths).
    pub data_dir: Option<String>,
}

/// Timeouts for Docker calls (ECS's defaults where ECS has one).
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub create: Duration,
    pub start: Duration,
    pub inspect: Duration,
    pub remove: Duration,
    /// Added to a container's stop timeout: how long Docker may take beyond the grace period.
    pub stop_extra: Duration,
    /// A whole pull, all retries included.
    pub pull: Duration,
    /// A pull that shows no progress for this long is aborted.
    pub pull_inactivity: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            create: Duration::from_secs(4 * 60),
            start: Duration::from_secs(3 * 60),
            inspect: Duration::from_secs(30),
            remove: Duration::from_secs(5 * 60),
            stop_extra: Duration::from_secs(30),
            pull: Duration::from_secs(2 * 60 * 60),
            pull_inactivity: Duration::from_secs(60),
        }
    }
}

/// How pulls are retried.
#[derive(Debug, Clone, Copy)]
pub struct PullRetry {
    /// Attempts in all (ECS: 5).
    pub attempts: u32,
    pub min_backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for PullRetry {
    fn default() -> Self {
        PullRetry {
            attempts: 5,
            min_backoff: Duration::from_millis(1100),
            max_backoff: Duration::from_secs(5),
        }
    }
}

type PullFuture = Shared<BoxFuture<'static, Result<(), RuntimeError>>>;

/// The Docker runtime. Cheap to clone.
#[derive(Clone)]
pub struct DockerRuntime {
    docker: Docker,
    timeouts: Timeouts,
    retry: PullRetry,
    /// Pulls in flight, by image reference: a second request for the same image joins the first.
    pulls: Arc<Mutex<HashMap<String, PullFuture>>>,
}

/// Connect to the engine at `host` (a `unix://` path or `tcp://` / `http://` address; None = the
/// `DOCKER_HOST` environment variable or the local socket) and negotiate the API version.
pub async fn connect(host: Option<&str>) -> Result<Docker, RuntimeError> {
    let docker = match host {
        Some(h) => Docker::connect_with_host(h),
        None => Docker::connect_with_defaults(),
    }
    .map_err(|e| RuntimeError::Unavailable(e.to_string()))?;
    let docker = tokio::time::timeout(Duration::from_secs(10), docker.negotiate_version())
        .await
        .map_err(|_| {
            RuntimeError::Unavailable("no answer from the docker engine within 10s".into())
        })?
        .map_err(|e| RuntimeError::Unavailable(e.to_string()))?;
    // negotiate_version does not fail when nothing listens; a ping tells.
    docker
        .ping()
        .await
        .map_err(|e| RuntimeError::Unavailable(e.to_string()))?;
    Ok(docker)
}

impl DockerRuntime {
    pub fn new(docker: Docker) -> Self {
        DockerRuntime {
            docker,
            timeouts: Timeouts::default(),
            retry: PullRetry::default(),
            pulls: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    pub fn with_timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    pub fn with_pull_retry(mut self, retry: PullRetry) -> Self {
        self.retry = retry;
        self
    }

    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    /// Every container berth created (label `berth.task`), running or not.
    pub async fn list_managed(&self) -> Result<Vec<ManagedContainer>, RuntimeError> {
        let mut filters: HashMap<String, Vec<String>> = HashMap::new();
        filters.insert("label".into(), vec![LABEL_TASK.to_string()]);
        let opts = bollard::query_parameters::ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        let list = timed(
            "container list",
            self.timeouts.inspect,
            self.docker.list_containers(Some(opts)),
        )
        .await?;
        Ok(list
            .into_iter()
            .map(|c| {
                let name = c
                    .names
                    .and_then(|n| n.into_iter().next())
                    .unwrap_or_default()
                    .trim_start_matches('/')
                    .to_string();
                let mut labels = c.labels.unwrap_or_default();
                ManagedContainer {
                    id: c.id.unwrap_or_default(),
                    name,
                    task: labels.remove(LABEL_TASK).unwrap_or_default(),
                    data_dir: labels.remove(LABEL_DATA_DIR),
                }
            })
            .collect())
    }

    /// A container's output, as (is stderr, bytes) chunks; `follow` keeps streaming until it exits.
    pub fn logs(
        &self,
        id: &str,
        follow: bool,
    ) -> BoxStream<'static, Result<(bool, bytes::Bytes), RuntimeError>> {
        let opts = bollard::query_parameters::LogsOptionsBuilder::default()
            .follow(follow)
            .stdout(true)
            .stderr(true)
            .build();
        self.docker
            .logs(id, Some(opts))
            .map(|r| match r {
                Ok(bollard::container::LogOutput::StdErr { message }) => Ok((true, message)),
                Ok(
                    bollard::container::LogOutput::StdOut { message }
                    | bollard::container::LogOutput::Console { message }
                    | bollard::container::LogOutput::StdIn { message },
                ) => Ok((false, message)),
                Err(e) => Err(translate(e)),
            })
            .boxed()
    }

    async fn pull_with_retries(
        docker: Docker,
        image: String,
        retry: PullRetry,
        inactivity: Duration,
        progress: Option<ProgressSink>,
    ) -> Result<(), RuntimeError> {
        let mut last = None;
        for attempt in 1..=retry.attempts.max(1) {
            match pull_once(&docker, &image, inactivity, progress.as_ref()).await {
                Ok(()) => return Ok(()),
                Err(e) => {
                    let retriable = matches!(
                        e,
                        RuntimeError::PullFailed {
                            retriable: true,
                            ..
                        }
                    );
                    tracing::warn!(%image, attempt, error = %e, retriable, "pull failed");
                    last = Some(e);
                    if !retriable || attempt == retry.attempts {
                        break;
                    }
                    tokio::time::sleep(backoff(retry, attempt)).await;
                }
            }
        }
        Err(last.unwrap_or_else(|| RuntimeError::Other(format!("pull of {image} made no attempt"))))
    }
}

/// Exponential backoff with jitter: min * 2^(attempt-1), capped, then scaled by a random 0.5..1.0.
fn backoff(retry: PullRetry, attempt: u32) -> Duration {
    let exp = retry
        .min_backoff
        .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
        .min(retry.max_backoff);
    let jitter: f64 = 0.5 + rand_unit() * 0.5;
    exp.mul_f64(jitter)
}

/// A random number in [0, 1) from the system clock's nanoseconds (jitter only, not security).
fn rand_unit() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    f64::from(nanos % 1000) / 1000.0
}

/// Per-layer progress of one pull, summed for the progress sink.
#[derive(Default)]
struct LayerProgress {
    layers: HashMap<String, (u64, u64, bool)>,
}

impl LayerProgress {
    /// Fold one message of the pull stream in; returns the new sum when it changed.
    fn update(&mut self, info: &bollard::models::CreateImageInfo) -> Option<PullProgress> {
        let id = info.id.as_deref()?;
        let status = info.status.as_deref().unwrap_or_default();
        // Layer lines carry a short hex id; the first line ("Pulling from ...") carries the tag.
        if id.len() != 12 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let entry = self.layers.entry(id.to_string()).or_default();
        if let Some(d) = &info.progress_detail
            && status.starts_with("Downloading")
        {
            entry.0 = u64::try_from(d.current.unwrap_or(0)).unwrap_or(0);
            entry.1 = u64::try_from(d.total.unwrap_or(0)).unwrap_or(0);
        }
        if status == "Download complete" {
            entry.0 = entry.1;
        }
        if status == "Pull complete" || status == "Already exists" {
            entry.2 = true;
        }
        let layers = u32::try_from(self.layers.len()).unwrap_or(u32::MAX);
        Some(PullProgress {
            layers,
            layers_done: u32::try_from(self.layers.values().filter(|l| l.2).count())
                .unwrap_or(layers),
            bytes: self.layers.values().map(|l| l.0).sum(),
            bytes_total: self.layers.values().map(|l| l.1).sum(),
        })
    }
}

/// One pull attempt, aborted when the stream shows no progress for `inactivity`.
async fn pull_once(
    docker: &Docker,
    image: &str,
    inactivity: Duration,
    progress: Option<&ProgressSink>,
) -> Result<(), RuntimeError> {
    let mut layers = LayerProgress::default();
    let (from_image, tag) = split_reference(image);
    let mut opts = CreateImageOptionsBuilder::default().from_image(from_image);
    if let Some(tag) = tag {
        opts = opts.tag(tag);
    }
    let mut stream = docker.create_image(Some(opts.build()), None, None);
    loop {
        match tokio::time::timeout(inactivity, stream.next()).await {
            Err(_) => {
                return Err(RuntimeError::PullFailed {
                    image: image.to_string(),
                    message: format!(
                        "pull of {image} made no progress for {}s",
                        inactivity.as_secs()
                    ),
                    retriable: true,
                });
            }
            Ok(None) => return Ok(()),
            Ok(Some(Ok(info))) => {
                if let (Some(sink), Some(p)) = (progress, layers.update(&info)) {
                    let _ = sink.send(p);
                }
            }
            Ok(Some(Err(e))) => return Err(pull_error(image, e)),
        }
    }
}

/// Split `repo[:tag][@digest]` into the `fromImage` and `tag` parameters of `POST /images/create`.
/// A registry port (`host:5000/repo`) is not a tag; no tag means `latest`.
pub fn split_reference(image: &str) -> (&str, Option<&str>) {
    if image.contains('@') {
        return (image, None);
    }
    let last_slash = image.rfind('/').map_or(0, |i| i + 1);
    match image[last_slash..].rfind(':') {
        Some(i) => {
            let at = last_slash + i;
            (&image[..at], Some(&image[at + 1..]))
        }
        None => (image, Some("latest")),
    }
}

/// Classify a pull error: a missing repository or tag, or an authentication refusal, cannot be
/// cured by retrying.
fn pull_error(image: &str, e: BollardError) -> RuntimeError {
    let (message, status) = match e {
        BollardError::DockerResponseServerError {
            status_code,
            message,
        } => (message, Some(status_code)),
        BollardError::DockerStreamError { error } => (error, None),
        other => (other.to_string(), None),
    };
    let lower = message.to_lowercase();
    let permanent = status == Some(404)
        || lower.contains("manifest unknown")
        || lower.contains("not found")
        || lower.contains("repository does not exist")
        || lower.contains("unauthorized")
        || lower.contains("access denied")
        || lower.contains("denied:")
        || lower.contains("invalid reference format");
    RuntimeError::PullFailed {
        image: image.to_string(),
        message,
        retriable: !permanent,
    }
}

/// Translate a bollard error into a runtime error kind, keeping Docker's message.
fn translate(e: BollardError) -> RuntimeError {
    match e {
        BollardError::DockerResponseServerError {
            status_code: 404,
            message,
        } => RuntimeError::NotFound(message),
        BollardError::DockerResponseServerError {
            status_code: 409,
            message,
        } => RuntimeError::Conflict(message),
        BollardError::DockerResponseServerError { message, .. } => RuntimeError::Other(message),
        BollardError::RequestTimeoutError => RuntimeError::Timeout("docker request".into()),
        BollardError::IOError { err } => RuntimeError::Unavailable(err.to_string()),
        BollardError::HyperResponseError { err } => RuntimeError::Unavailable(err.to_string()),
        BollardError::SocketNotFoundError(s) => {
            RuntimeError::Unavailable(format!("docker socket not found: {s}"))
        }
        other => RuntimeError::Other(other.to_string()),
    }
}

/// Run a Docker call under a timeout, translating its error.
async fn timed<T>(
    what: &str,
    limit: Duration,
    fut: impl Future<Output = Result<T, BollardError>>,
) -> Result<T, RuntimeError> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r.map_err(translate),
        Err(_) => Err(RuntimeError::Timeout(format!(
            "{what} did not finish within {}s",
            limit.as_secs()
        ))),
    }
}

/// Parse Docker's RFC 3339 timestamps; the zero time (`0001-01-01T00:00:00Z`) means unset.
pub fn parse_docker_time(s: &str) -> Option<Millis> {
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()?;
    if t.year() <= 1 {
        return None;
    }
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}

fn health_of(status: Option<HealthStatusEnum>) -> Option<Health> {
    match status? {
        HealthStatusEnum::HEALTHY => Some(Health::Healthy),
        HealthStatusEnum::UNHEALTHY => Some(Health::Unhealthy),
        HealthStatusEnum::STARTING => Some(Health::Starting),
        HealthStatusEnum::EMPTY | HealthStatusEnum::NONE => None,
    }
}

/// Map the engine-neutral spec to Docker's create body.
pub fn create_body(spec: &ContainerSpec) -> ContainerCreateBody {
    let mut exposed = Vec::new();
    let mut bindings: HashMap<String, Option<Vec<PortBinding>>> = HashMap::new();
    for p in &spec.ports {
        let key = format!("{}/{}", p.container_port, p.protocol);
        exposed.push(key.clone());
        bindings
            .entry(key)
            .or_insert_with(|| Some(Vec::new()))
            .get_or_insert_with(Vec::new)
            .push(PortBinding {
                host_ip: None,
                host_port: Some(p.host_port.map(|h| h.to_string()).unwrap_or_default()),
            });
    }
    let host_config = HostConfig {
        mounts: (!spec.mounts.is_empty()).then(|| {
            spec.mounts
                .iter()
                .map(|m| Mount {
                    typ: Some(match m.kind {
                        MountKind::Bind => MountType::BIND,
                        MountKind::Volume => MountType::VOLUME,
                    }),
                    source: Some(m.source.clone()),
                    target: Some(m.target.clone()),
                    read_only: Some(m.read_only),
                    ..Default::default()
                })
                .collect()
        }),
        volumes_from: (!spec.volumes_from.is_empty()).then(|| spec.volumes_from.clone()),
        port_bindings: (!bindings.is_empty() && spec.network_mode == "bridge").then_some(bindings),
        network_mode: Some(spec.network_mode.clone()),
        cpu_shares: spec.cpu_shares,
        memory: spec.memory_bytes,
        memory_reservation: spec.memory_reservation_bytes,
        readonly_rootfs: Some(spec.readonly_rootfs),
        privileged: Some(spec.privileged),
        ulimits: (!spec.ulimits.is_empty()).then(|| {
            spec.ulimits
                .iter()
                .map(|u| ResourcesUlimits {
                    name: Some(u.name.clone()),
                    soft: Some(u.soft),
                    hard: Some(u.hard),
                })
                .collect()
        }),
        log_config: spec.log_driver.as_ref().map(|d| HostConfigLogConfig {
            typ: Some(d.clone()),
            config: Some(spec.log_options.clone().into_iter().collect()),
        }),
        ..Default::default()
    };
    ContainerCreateBody {
        image: Some(spec.image.clone()),
        cmd: spec.cmd.clone(),
        entrypoint: spec.entrypoint.clone(),
        env: (!spec.env.is_empty()).then(|| spec.env.clone()),
        labels: Some(spec.labels.clone().into_iter().collect()),
        working_dir: spec.working_dir.clone(),
        user: spec.user.clone(),
        hostname: spec.hostname.clone(),
        exposed_ports: (!exposed.is_empty()).then_some(exposed),
        healthcheck: spec.health.as_ref().map(|h| HealthConfig {
            test: Some(h.test.clone()),
            interval: Some(h.interval_ns),
            timeout: Some(h.timeout_ns),
            retries: Some(h.retries),
            start_period: Some(h.start_period_ns),
            start_interval: None,
        }),
        stop_timeout: spec.stop_timeout_secs.map(i64::from),
        host_config: Some(host_config),
        ..Default::default()
    }
}

fn event_time(ev: &bollard::models::EventMessage) -> Millis {
    match (ev.time_nano, ev.time) {
        (Some(ns), _) => ns / 1_000_000,
        (None, Some(s)) => s * 1000,
        (None, None) => berth_engine::report::now_ms(),
    }
}

impl Runtime for DockerRuntime {
    async fn image_present(&self, image: &str) -> Result<bool, RuntimeError> {
        match timed(
            "image inspect",
            self.timeouts.inspect,
            self.docker.inspect_image(image),
        )
        .await
        {
            Ok(_) => Ok(true),
            Err(RuntimeError::NotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn pull(&self, image: &str, progress: Option<ProgressSink>) -> Result<(), RuntimeError> {
        let fut = {
            let mut pulls = self.pulls.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(f) = pulls.get(image) {
                f.clone()
            } else {
                let (docker, img, retry, inactivity, overall) = (
                    self.docker.clone(),
                    image.to_string(),
                    self.retry,
                    self.timeouts.pull_inactivity,
                    self.timeouts.pull,
                );
                let pulls_map = self.pulls.clone();
                let f = async move {
                    let key = img.clone();
                    let r = match tokio::time::timeout(
                        overall,
                        DockerRuntime::pull_with_retries(
                            docker,
                            img.clone(),
                            retry,
                            inactivity,
                            progress,
                        ),
                    )
                    .await
                    {
                        Ok(r) => r,
                        Err(_) => Err(RuntimeError::PullFailed {
                            image: img.clone(),
                            message: format!(
                                "pull of {img} did not finish within {}s",
                                overall.as_secs()
                            ),
                            retriable: false,
                        }),
                    };
                    pulls_map
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&key);
                    r
                }
                .boxed()
                .shared();
                pulls.insert(image.to_string(), f.clone());
                f
            }
        };
        fut.await
    }

    async fn create(&self, spec: &ContainerSpec) -> Result<String, RuntimeError> {
        let opts = CreateContainerOptionsBuilder::default()
            .name(&spec.name)
            .build();
        let body = create_body(spec);
        let resp = timed(
            "container create",
            self.timeouts.create,
            self.docker.create_container(Some(opts), body),
        )
        .await?;
        Ok(resp.id)
    }

    async fn start(&self, id: &str) -> Result<(), RuntimeError> {
        timed(
            "container start",
            self.timeouts.start,
            self.docker.start_container(id, None),
        )
        .await
    }

    async fn stop(&self, id: &str, timeout_secs: u32) -> Result<(), RuntimeError> {
        let t = i32::try_from(timeout_secs).unwrap_or(i32::MAX);
        let opts = StopContainerOptionsBuilder::default().t(t).build();
        let limit = Duration::from_secs(u64::from(timeout_secs)) + self.timeouts.stop_extra;
        let mut delay = Duration::from_millis(500);
        for attempt in 1..=5 {
            let result = match tokio::time::timeout(
                limit,
                self.docker.stop_container(id, Some(opts.clone())),
            )
            .await
            {
                Ok(Ok(())) => Ok(()),
                // 304 Not Modified: the container was already stopped.
                Ok(Err(BollardError::DockerResponseServerError {
                    status_code: 304, ..
                })) => Ok(()),
                Ok(Err(e)) => Err(translate(e)),
                Err(_) => Err(RuntimeError::Timeout(format!(
                    "container stop did not finish within {}s",
                    limit.as_secs()
                ))),
            };
            match result {
                Ok(()) => return Ok(()),
                Err(e @ (RuntimeError::Unavailable(_) | RuntimeError::Timeout(_)))
                    if attempt < 5 =>
                {
                    tracing::warn!(container = %id, attempt, error = %e, "stop failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(8));
                }
                Err(e) => return Err(e),
            }
        }
        Err(RuntimeError::Timeout(format!(
            "stop of {id} failed 5 times"
        )))
    }

    async fn kill(&self, id: &str) -> Result<(), RuntimeError> {
        let opts = KillContainerOptionsBuilder::default()
            .signal("KILL")
            .build();
        match timed(
            "container kill",
            self.timeouts.inspect,
            self.docker.kill_container(id, Some(opts)),
        )
        .await
        {
            Ok(()) | Err(RuntimeError::Conflict(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn inspect(&self, id: &str) -> Result<ContainerInfo, RuntimeError> {
        let r = timed(
            "container inspect",
            self.timeouts.inspect,
            self.docker.inspect_container(id, None),
        )
        .await?;
        let state = r.state.unwrap_or_default();
        let finished_at = state.finished_at.as_deref().and_then(parse_docker_time);
        let running = state.running.unwrap_or(false);
        Ok(ContainerInfo {
            id: r.id.unwrap_or_default(),
            name: r
                .name
                .unwrap_or_default()
                .trim_start_matches('/')
                .to_string(),
            running,
            exit_code: if running || finished_at.is_none() {
                None
            } else {
                state.exit_code
            },
            started_at: state.started_at.as_deref().and_then(parse_docker_time),
            finished_at,
            health: health_of(state.health.and_then(|h| h.status)),
            labels: r
                .config
                .and_then(|c| c.labels)
                .unwrap_or_default()
                .into_iter()
                .collect(),
        })
    }

    async fn remove(&self, id: &str) -> Result<(), RuntimeError> {
        let opts = RemoveContainerOptionsBuilder::default()
            .force(true)
            .v(true)
            .build();
        match timed(
            "container remove",
            self.timeouts.remove,
            self.docker.remove_container(id, Some(opts)),
        )
        .await
        {
            Ok(()) | Err(RuntimeError::NotFound(_)) => Ok(()),
            // Removal already in progress (Docker answers 409): it will be gone.
            Err(RuntimeError::Conflict(m)) if m.contains("already in progress") => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn ensure_volume(&self, spec: &VolumeSpec) -> Result<bool, RuntimeError> {
        if self.volume_exists(&spec.name).await? {
            return Ok(false);
        }
        let req = VolumeCreateRequest {
            name: Some(spec.name.clone()),
            driver: Some(spec.driver.clone()),
            driver_opts: Some(spec.driver_opts.clone().into_iter().collect()),
            labels: Some(spec.labels.clone().into_iter().collect()),
            ..Default::default()
        };
        timed(
            "volume create",
            self.timeouts.create,
            self.docker.create_volume(req),
        )
        .await?;
        Ok(true)
    }

    async fn volume_exists(&self, name: &str) -> Result<bool, RuntimeError> {
        match timed(
            "volume inspect",
            self.timeouts.inspect,
            self.docker.inspect_volume(name),
        )
        .await
        {
            Ok(_) => Ok(true),
            Err(RuntimeError::NotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn remove_volume(&self, name: &str) -> Result<(), RuntimeError> {
        let opts = RemoveVolumeOptionsBuilder::default().force(false).build();
        match timed(
            "volume remove",
            self.timeouts.remove,
            self.docker.remove_volume(name, Some(opts)),
        )
        .await
        {
            Ok(()) | Err(RuntimeError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn events(
        &self,
        task_id: &str,
    ) -> Result<BoxStream<'static, RuntimeEvent>, RuntimeError> {
        let mut filters: HashMap<String, Vec<String>> = HashMap::new();
        filters.insert("type".into(), vec!["container".into()]);
        filters.insert("label".into(), vec![format!("{LABEL_TASK}={task_id}")]);
        // Replay from a second ago: the request is only sent when the stream is first polled, and
        // events are idempotent for the engine, so a replayed one costs nothing while a lost one
        // would leave a container's status behind.
        let since = berth_engine::report::now_ms() - 1000;
        let since = format!("{}.{:03}", since / 1000, since % 1000);
        let opts = EventsOptionsBuilder::default()
            .filters(&filters)
            .since(&since)
            .build();
        let stream = self.docker.events(Some(opts)).filter_map(|ev| async move {
            let ev = match ev {
                Ok(ev) => ev,
                Err(e) => {
                    tracing::warn!(error = %e, "docker event stream error");
                    return None;
                }
            };
            let at = event_time(&ev);
            let actor = ev.actor.as_ref()?;
            let id = actor.id.clone()?;
            let action = ev.action.as_deref()?;
            match action {
                "start" => Some(RuntimeEvent::Start { id, at }),
                "die" => {
                    let exit_code = actor
                        .attributes
                        .as_ref()
                        .and_then(|a| a.get("exitCode"))
                        .and_then(|c| c.parse().ok());
                    Some(RuntimeEvent::Die { id, exit_code, at })
                }
                "destroy" => Some(RuntimeEvent::Destroy { id, at }),
                a if a.starts_with("health_status") => {
                    let health = match a.rsplit(':').next().map(str::trim) {
                        Some("healthy") => Health::Healthy,
                        Some("unhealthy") => Health::Unhealthy,
                        _ => Health::Starting,
                    };
                    Some(RuntimeEvent::Health { id, health })
                }
                _ => None,
            }
        });
        Ok(stream.boxed())
    }

    async fn inspect_details(&self, id: &str) -> Result<ContainerDetails, RuntimeError> {
        let r = timed(
            "container inspect",
            self.timeouts.inspect,
            self.docker.inspect_container(id, None),
        )
        .await?;
        Ok(details_of(r))
    }

    async fn stats(&self, id: &str) -> Result<serde_json::Value, RuntimeError> {
        // One sample, answered at once (`one-shot`, API 1.41+): no wait for a second cycle.
        let opts = StatsOptionsBuilder::default()
            .stream(false)
            .one_shot(true)
            .build();
        let mut stream = self.docker.stats(id, Some(opts));
        let sample = match tokio::time::timeout(self.timeouts.inspect, stream.next()).await {
            Ok(Some(r)) => r.map_err(translate)?,
            Ok(None) => {
                return Err(RuntimeError::Other(format!(
                    "stats of {id}: the engine sent nothing"
                )));
            }
            Err(_) => {
                return Err(RuntimeError::Timeout(format!(
                    "stats of {id} did not answer within {}s",
                    self.timeouts.inspect.as_secs()
                )));
            }
        };
        serde_json::to_value(sample).map_err(|e| RuntimeError::Other(format!("stats of {id}: {e}")))
    }

    async fn inspect_network(&self, name: &str) -> Result<NetworkInfo, RuntimeError> {
        let n = timed(
            "network inspect",
            self.timeouts.inspect,
            self.docker.inspect_network(name, None),
        )
        .await?;
        Ok(NetworkInfo {
            name: n.name.unwrap_or_else(|| name.to_string()),
            ipam: n
                .ipam
                .and_then(|i| i.config)
                .unwrap_or_default()
                .into_iter()
                .map(|c| IpamConfig {
                    subnet: c.subnet.filter(|s| !s.is_empty()),
                    gateway: c.gateway.filter(|g| !g.is_empty()),
                })
                .collect(),
            bridge_interface: n
                .options
                .and_then(|o| o.get("com.docker.network.bridge.name").cloned()),
        })
    }
}

/// The metadata endpoint's view of `docker inspect`: image id, networks, bound ports, health
/// result, mounts. Missing parts are left empty, never an error.
pub fn details_of(r: bollard::models::ContainerInspectResponse) -> ContainerDetails {
    let settings = r.network_settings.unwrap_or_default();
    let mut networks: Vec<NetworkAttachment> = settings
        .networks
        .unwrap_or_default()
        .into_iter()
        .map(|(network, ep)| NetworkAttachment {
            network,
            ipv4_addresses: ep
                .ip_address
                .filter(|a| !a.is_empty())
                .into_iter()
                .collect(),
        })
        .collect();
    networks.sort_by(|a, b| a.network.cmp(&b.network));
    let mut ports = Vec::new();
    for (key, bindings) in settings.ports.unwrap_or_default() {
        let (port, protocol) = key.split_once('/').unwrap_or((key.as_str(), "tcp"));
        let Ok(container_port) = port.parse::<u16>() else {
            continue;
        };
        for b in bindings.unwrap_or_default() {
            ports.push(BoundPort {
                container_port,
                protocol: protocol.to_string(),
                host_port: b.host_port.as_deref().and_then(|p| p.parse().ok()),
                host_ip: b.host_ip.filter(|h| !h.is_empty()),
            });
        }
    }
    ports.sort_by(|a, b| {
        (a.container_port, &a.protocol, &a.host_ip).cmp(&(
            b.container_port,
            &b.protocol,
            &b.host_ip,
        ))
    });
    let health = r.state.and_then(|s| s.health).map(|h| {
        let status = health_of(h.status).unwrap_or_default();
        let log = h.log.unwrap_or_default();
        let last = log.last();
        // The trailing run of results with the same outcome (pass or fail) began the status.
        let passed = |e: &bollard::models::HealthcheckResult| e.exit_code == Some(0);
        let since = last.and_then(|l| {
            let outcome = passed(l);
            log.iter()
                .rev()
                .take_while(|e| passed(e) == outcome)
                .last()
                .and_then(|e| e.end.as_deref().and_then(parse_docker_time))
        });
        HealthDetails {
            status,
            since,
            exit_code: last.and_then(|l| l.exit_code),
            output: last.and_then(|l| l.output.clone()),
        }
    });
    let mounts = r
        .mounts
        .unwrap_or_default()
        .into_iter()
        .map(|m| MountDetails {
            name: m.name.filter(|n| !n.is_empty()),
            source: m.source.filter(|s| !s.is_empty()),
            destination: m.destination.unwrap_or_default(),
        })
        .collect();
    ContainerDetails {
        image_id: r.image.filter(|i| !i.is_empty()),
        networks,
        ports,
        health,
        mounts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_split_into_repo_and_tag() {
        assert_eq!(split_reference("busybox"), ("busybox", Some("latest")));
        assert_eq!(split_reference("busybox:1"), ("busybox", Some("1")));
        assert_eq!(
            split_reference("127.0.0.1:5000/busybox"),
            ("127.0.0.1:5000/busybox", Some("latest"))
        );
        assert_eq!(
            split_reference("127.0.0.1:5000/a/b:2"),
            ("127.0.0.1:5000/a/b", Some("2"))
        );
        assert_eq!(split_reference("x@sha256:abc"), ("x@sha256:abc", None));
    }

    #[test]
    fn docker_zero_time_is_unset() {
        assert_eq!(parse_docker_time("0001-01-01T00:00:00Z"), None);
        assert_eq!(
            parse_docker_time("2026-11-30T01:00:00.5Z"),
            Some(1_796_000_400_500)
        );
    }

    #[test]
    fn missing_manifest_is_not_retriable_but_refused_connection_is() {
        let e = pull_error(
            "127.0.0.1:5000/nope:1",
            BollardError::DockerResponseServerError {
                status_code: 404,
                message: "manifest for 127.0.0.1:5000/nope:1 not found: manifest unknown".into(),
            },
        );
        assert!(matches!(
            e,
            RuntimeError::PullFailed {
                retriable: false,
                ..
            }
        ));
        let e = pull_error(
            "127.0.0.1:5000/nope:1",
            BollardError::DockerResponseServerError {
                status_code: 500,
                message: "Get \"http://127.0.0.1:5000/v2/\": dial tcp 127.0.0.1:5000: connect: connection refused".into(),
            },
        );
        assert!(matches!(
            e,
            RuntimeError::PullFailed {
                retriable: true,
                ..
            }
        ));
    }
}
