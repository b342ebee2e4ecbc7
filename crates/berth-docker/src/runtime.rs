//! [`DockerRuntime`]: the engine's [`Runtime`] over the Docker Engine API, one method per call.
//!
//! Each call runs under its timeout ([`crate::connection::timed`]) and applies the call-specific
//! rules that make it idempotent for the engine: stop treats 304 (already stopped) as success and
//! retries a timed-out or unavailable Engine up to five times with backoff (backon, on the engine's
//! one schedule); kill treats 409 (not
//! running) as success; container and volume removal treat 404 as success, container removal 409
//! "already in progress" too; image and volume inspect answer 404 as "absent". Pulls go through
//! [`crate::pull`]; an image import (`fromSrc=-`) sends its tar and reads the Engine's progress
//! stream to the end, an error entry in it failing the import. Bodies are built by
//! [`crate::body`], answers are read by [`crate::inspect`], events come from [`crate::events`].
//! Image removal is never forced (an image a container uses stays, as `docker rmi` leaves it).
//! Also: the list of managed containers, the Engine's data root and container logs (used by the agent and `berth run`,
//! not part of the trait).

use backon::Retryable;
use berth_engine::image_ref::{DEFAULT_TAG, ImageRef};
use berth_engine::retry::RetryPolicy;
use berth_engine::runtime::{
    ContainerDetails, ContainerInfo, ContainerSummary, ImageSummary, NetworkInfo, Object,
    ProgressSink, RegistryAuth, Runtime, RuntimeError, RuntimeEvent,
};
use berth_engine::spec::{ContainerSpec, LABEL_TASK, VolumeSpec};
use bollard::Docker;
use bollard::errors::Error as BollardError;
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, CreateImageOptionsBuilder, KillContainerOptionsBuilder,
    RemoveContainerOptionsBuilder, RemoveVolumeOptionsBuilder, StatsOptionsBuilder,
    StopContainerOptionsBuilder,
};
use futures_util::stream::{BoxStream, StreamExt};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::body::{create_body, volume_create_body};
use crate::connection::{
    Timeouts, Verdict, call_on, engine_address, judge, overran, timed, unreachable,
};
use crate::errors::{create_missing, translate};
use crate::events::task_events;
use crate::inspect::{
    ManagedContainer, details_of, image_of, info_of, listed_of, managed_of, network_info_of,
};
use crate::pull::{PullRetry, Pulls, split_reference};

/// How many times a stop is sent while the Engine is unreachable or the call times out (ECS: 5).
const STOP_ATTEMPTS: usize = 5;

/// The waits between those attempts: 0.5 s doubling, at most 8 s.
const STOP_RETRY: RetryPolicy = RetryPolicy {
    first: Duration::from_millis(500),
    max: Duration::from_secs(8),
};

/// An unreachable Engine's error names the address tried and what to check.
pub(crate) fn name_engine(engine: &str, e: RuntimeError) -> RuntimeError {
    match e {
        RuntimeError::Unavailable(cause) => RuntimeError::Unavailable(unreachable(engine, &cause)),
        other => other,
    }
}

/// The Docker runtime. Cheap to clone.
#[derive(Clone)]
pub struct DockerRuntime {
    docker: Docker,
    timeouts: Timeouts,
    retry: PullRetry,
    /// Pulls in flight, by image reference: a second request for the same image joins the first.
    pulls: Pulls,
    /// The Engine's address as the user gave it (`--docker-host`, `DOCKER_HOST` or the default
    /// socket), named in every error that says the Engine could not be reached.
    engine: Arc<str>,
}

impl DockerRuntime {
    pub fn new(docker: Docker) -> Self {
        DockerRuntime {
            docker,
            timeouts: Timeouts::default(),
            retry: PullRetry::default(),
            pulls: Pulls::default(),
            engine: engine_address(None).into(),
        }
    }

    /// The address `docker` was connected to (see [`crate::engine_address`]), for error messages;
    /// without it the `DOCKER_HOST`/default address is named.
    pub fn with_engine(mut self, address: impl Into<String>) -> Self {
        self.engine = address.into().into();
        self
    }

    /// [`timed`]: `call` on `object` (a container, a volume; None for a call about none) under
    /// `limit`, naming the Engine when it could not be reached, the object when Docker answers
    /// 404 or 409, and judging the Engine when the call overran.
    async fn timed<T>(
        &self,
        call: &str,
        object: impl Into<Option<Object>>,
        limit: Duration,
        fut: impl std::future::Future<Output = Result<T, BollardError>>,
    ) -> Result<T, RuntimeError> {
        let object = object.into();
        let call = call_on(call, object.as_ref().map_or("", Object::name));
        timed(
            &self.docker,
            &self.engine,
            &self.timeouts,
            (&call, object.as_ref()),
            limit,
            fut,
        )
        .await
        .map_err(|e| name_engine(&self.engine, e))
    }

    /// The error of `call` on `object` that overran `limit` (for calls not made through
    /// [`Self::timed`]: streams).
    async fn overran(&self, call: &str, object: &str, limit: Duration) -> RuntimeError {
        overran(
            &self.docker,
            &self.engine,
            self.timeouts.ping,
            &call_on(call, object),
            limit,
        )
        .await
    }

    /// [`translate`], naming the Engine when it could not be reached.
    fn translate(&self, e: BollardError, object: &Object) -> RuntimeError {
        name_engine(&self.engine, translate(e, Some(object)))
    }

    pub fn with_timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// The limits the calls run under.
    pub fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    pub fn with_pull_retry(mut self, retry: PullRetry) -> Self {
        self.retry = retry;
        self
    }

    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    /// Ping the Engine (`/_ping`, at most `limit`): `Ok` when it answers, else why not, the
    /// Engine's address named (the agent's Engine health, see `berth_engine::engine_health`).
    pub async fn ping(&self, limit: Duration) -> Result<(), String> {
        match judge(&self.docker, limit).await {
            Verdict::Slow => Ok(()),
            Verdict::Dead(why) => Err(format!("the Engine at {}: {why}", self.engine)),
        }
    }

    /// Every container berth created (label `berth.task`), running or not.
    pub async fn list_managed(&self) -> Result<Vec<ManagedContainer>, RuntimeError> {
        let mut filters: HashMap<String, Vec<String>> = HashMap::new();
        filters.insert("label".into(), vec![LABEL_TASK.to_string()]);
        let opts = bollard::query_parameters::ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        let list = self
            .timed(
                "container list",
                None,
                self.timeouts.call,
                self.docker.list_containers(Some(opts)),
            )
            .await?;
        Ok(list.into_iter().map(managed_of).collect())
    }

    /// The Engine's data root (`docker info` → `DockerRootDir`), where images and containers live:
    /// the file system image cleanup watches.
    pub async fn data_root(&self) -> Result<String, RuntimeError> {
        let info = self
            .timed("info", None, self.timeouts.call, self.docker.info())
            .await?;
        info.docker_root_dir
            .filter(|d| !d.is_empty())
            .ok_or_else(|| RuntimeError::Other("docker info reports no DockerRootDir".into()))
    }

    /// The log drivers this Engine has: its built-in ones (`docker info` → `Plugins.Log`) and the
    /// enabled log driver plugins (`docker plugin ls`, named as installed and without a
    /// `:latest` tag, as a task definition names them).
    pub async fn log_drivers(&self) -> Result<Vec<String>, RuntimeError> {
        let info = self
            .timed("info", None, self.timeouts.call, self.docker.info())
            .await?;
        let mut drivers: Vec<String> = info.plugins.and_then(|p| p.log).unwrap_or_default();
        let plugins = self
            .timed(
                "plugin list",
                None,
                self.timeouts.call,
                self.docker.list_plugins(None),
            )
            .await?;
        for p in plugins {
            // Interface types are `docker.logdriver/1.0`, `docker.volumedriver/1.0`, ...
            let is_logger = p
                .config
                .interface
                .types
                .iter()
                .any(|t| t.starts_with("docker.logdriver/"));
            if p.enabled && is_logger {
                if let Some(short) = p.name.strip_suffix(":latest") {
                    drivers.push(short.to_string());
                }
                drivers.push(p.name);
            }
        }
        Ok(drivers)
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
        let engine = Arc::clone(&self.engine);
        let container = Object::Container(id.to_string());
        self.docker
            .logs(id, Some(opts))
            .map(move |r| match r {
                Ok(bollard::container::LogOutput::StdErr { message }) => Ok((true, message)),
                Ok(
                    bollard::container::LogOutput::StdOut { message }
                    | bollard::container::LogOutput::Console { message }
                    | bollard::container::LogOutput::StdIn { message },
                ) => Ok((false, message)),
                Err(e) => Err(name_engine(&engine, translate(e, Some(&container)))),
            })
            .boxed()
    }
}

impl Runtime for DockerRuntime {
    async fn image_present(&self, image: &str) -> Result<bool, RuntimeError> {
        match self
            .timed(
                "image inspect",
                Object::Image(image.to_string()),
                self.timeouts.call,
                self.docker.inspect_image(image),
            )
            .await
        {
            Ok(_) => Ok(true),
            Err(RuntimeError::NotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn pull(
        &self,
        image: &str,
        auth: Option<&RegistryAuth>,
        progress: Option<ProgressSink>,
    ) -> Result<(), RuntimeError> {
        self.pulls
            .pull(
                &self.docker,
                &self.engine,
                image,
                auth,
                self.retry,
                self.timeouts.pull_inactivity,
                self.timeouts.pull,
                progress,
            )
            .await
    }

    /// `POST /images/create?fromSrc=-&repo=…&tag=…&changes=…` with the tar as the body (what
    /// `docker import` does). The Engine answers a JSON progress stream, read to its end: an
    /// `error` entry in it is the import's failure. Bounded like a create.
    async fn import_image(
        &self,
        image: &str,
        rootfs: Vec<u8>,
        changes: Vec<String>,
    ) -> Result<(), RuntimeError> {
        let (repo, tag) = import_reference(image)?;
        let opts = CreateImageOptionsBuilder::default()
            .from_src("-")
            .repo(repo)
            .tag(tag)
            .changes(changes)
            .build();
        let mut stream =
            self.docker
                .create_image(Some(opts), Some(bollard::body_full(rootfs.into())), None);
        let read = async {
            // bollard turns an entry with an `errorDetail` (the Engine sends one with every
            // `error`) into `DockerStreamError`, which ends the import.
            while let Some(message) = stream.next().await {
                match message {
                    Ok(_) => {}
                    Err(BollardError::DockerStreamError { error }) => {
                        return Err(RuntimeError::Other(format!("import of {image}: {error}")));
                    }
                    Err(e) => {
                        return Err(match self.translate(e, &Object::Image(image.to_string())) {
                            RuntimeError::Other(m) => {
                                RuntimeError::Other(format!("import of {image}: {m}"))
                            }
                            other => other,
                        });
                    }
                }
            }
            Ok(())
        };
        match tokio::time::timeout(self.timeouts.create, read).await {
            Ok(r) => r,
            Err(_) => Err(self
                .overran("image import", image, self.timeouts.create)
                .await),
        }
    }

    async fn create(&self, spec: &ContainerSpec) -> Result<String, RuntimeError> {
        let opts = CreateContainerOptionsBuilder::default()
            .name(&spec.name)
            .build();
        let body = create_body(spec);
        let resp = self
            .timed(
                "container create",
                Object::Container(spec.name.clone()),
                self.timeouts.create,
                self.docker.create_container(Some(opts), body),
            )
            .await
            .map_err(|e| match e {
                // Docker's 404 is about what the spec names: its image, network or a container.
                RuntimeError::NotFound { message, .. } => RuntimeError::not_found(
                    create_missing(&spec.image, &spec.network_mode, &message),
                    message,
                ),
                other => other,
            })?;
        Ok(resp.id)
    }

    async fn start(&self, id: &str) -> Result<(), RuntimeError> {
        self.timed(
            "container start",
            Object::Container(id.to_string()),
            self.timeouts.start,
            self.docker.start_container(id, None),
        )
        .await
    }

    /// Tried up to [`STOP_ATTEMPTS`] times while the Engine is unreachable or the call times out,
    /// on [`STOP_RETRY`].
    async fn stop(&self, id: &str, timeout_secs: u32) -> Result<(), RuntimeError> {
        let t = i32::try_from(timeout_secs).unwrap_or(i32::MAX);
        let opts = StopContainerOptionsBuilder::default().t(t).build();
        let limit = Duration::from_secs(u64::from(timeout_secs)) + self.timeouts.stop_extra;
        let once = || async {
            match tokio::time::timeout(limit, self.docker.stop_container(id, Some(opts.clone())))
                .await
            {
                Ok(Ok(())) => Ok(()),
                // 304 Not Modified: the container was already stopped.
                Ok(Err(BollardError::DockerResponseServerError {
                    status_code: 304, ..
                })) => Ok(()),
                Ok(Err(e)) => Err(self.translate(e, &Object::Container(id.to_string()))),
                Err(_) => Err(RuntimeError::Timeout(format!(
                    "container stop did not finish within {}s",
                    limit.as_secs()
                ))),
            }
        };
        let mut attempt = 0u32;
        once.retry(STOP_RETRY.exponential().with_max_times(STOP_ATTEMPTS - 1))
            .sleep(tokio::time::sleep)
            .when(|e| matches!(e, RuntimeError::Unavailable(_) | RuntimeError::Timeout(_)))
            .notify(|e, _| {
                attempt += 1;
                tracing::warn!(container = %id, attempt, error = %e, "stop failed; retrying");
            })
            .await
    }

    async fn kill(&self, id: &str) -> Result<(), RuntimeError> {
        let opts = KillContainerOptionsBuilder::default()
            .signal("KILL")
            .build();
        match self
            .timed(
                "container kill",
                Object::Container(id.to_string()),
                self.timeouts.call,
                self.docker.kill_container(id, Some(opts)),
            )
            .await
        {
            Ok(()) | Err(RuntimeError::Conflict { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn inspect(&self, id: &str) -> Result<ContainerInfo, RuntimeError> {
        let r = self
            .timed(
                "container inspect",
                Object::Container(id.to_string()),
                self.timeouts.call,
                self.docker.inspect_container(id, None),
            )
            .await?;
        Ok(info_of(r))
    }

    async fn remove(&self, id: &str) -> Result<(), RuntimeError> {
        let opts = RemoveContainerOptionsBuilder::default()
            .force(true)
            .v(true)
            .build();
        match self
            .timed(
                "container remove",
                Object::Container(id.to_string()),
                self.timeouts.remove,
                self.docker.remove_container(id, Some(opts)),
            )
            .await
        {
            Ok(()) | Err(RuntimeError::NotFound { .. }) => Ok(()),
            // Removal already in progress (Docker answers 409): it will be gone.
            Err(RuntimeError::Conflict { message, .. })
                if message.contains("already in progress") =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    async fn ensure_volume(&self, spec: &VolumeSpec) -> Result<bool, RuntimeError> {
        if self.volume_exists(&spec.name).await? {
            return Ok(false);
        }
        let req = volume_create_body(spec);
        self.timed(
            "volume create",
            Object::Volume(spec.name.clone()),
            self.timeouts.volume,
            self.docker.create_volume(req),
        )
        .await?;
        Ok(true)
    }

    async fn volume_exists(&self, name: &str) -> Result<bool, RuntimeError> {
        match self
            .timed(
                "volume inspect",
                Object::Volume(name.to_string()),
                self.timeouts.volume,
                self.docker.inspect_volume(name),
            )
            .await
        {
            Ok(_) => Ok(true),
            Err(RuntimeError::NotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn remove_volume(&self, name: &str) -> Result<(), RuntimeError> {
        let opts = RemoveVolumeOptionsBuilder::default().force(false).build();
        match self
            .timed(
                "volume remove",
                Object::Volume(name.to_string()),
                self.timeouts.volume,
                self.docker.remove_volume(name, Some(opts)),
            )
            .await
        {
            Ok(()) | Err(RuntimeError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn events(
        &self,
        task_id: &str,
    ) -> Result<BoxStream<'static, RuntimeEvent>, RuntimeError> {
        Ok(task_events(&self.docker, &self.engine, task_id))
    }

    async fn inspect_details(&self, id: &str) -> Result<ContainerDetails, RuntimeError> {
        let r = self
            .timed(
                "container inspect",
                Object::Container(id.to_string()),
                self.timeouts.call,
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
        let sample = match tokio::time::timeout(self.timeouts.call, stream.next()).await {
            Ok(Some(r)) => r.map_err(|e| translate(e, Some(&Object::Container(id.to_string()))))?,
            Ok(None) => {
                return Err(RuntimeError::Other(format!(
                    "stats of {id}: the engine sent nothing"
                )));
            }
            Err(_) => {
                return Err(self
                    .overran("container stats", id, self.timeouts.call)
                    .await);
            }
        };
        serde_json::to_value(sample).map_err(|e| RuntimeError::Other(format!("stats of {id}: {e}")))
    }

    async fn list_images(&self) -> Result<Vec<ImageSummary>, RuntimeError> {
        let opts = bollard::query_parameters::ListImagesOptionsBuilder::default()
            .all(false)
            .build();
        let list = self
            .timed(
                "image list",
                None,
                self.timeouts.call,
                self.docker.list_images(Some(opts)),
            )
            .await?;
        Ok(list.into_iter().map(image_of).collect())
    }

    async fn list_containers(&self) -> Result<Vec<ContainerSummary>, RuntimeError> {
        let opts = bollard::query_parameters::ListContainersOptionsBuilder::default()
            .all(true)
            .build();
        let list = self
            .timed(
                "container list",
                None,
                self.timeouts.call,
                self.docker.list_containers(Some(opts)),
            )
            .await?;
        Ok(list.into_iter().map(listed_of).collect())
    }

    /// `DELETE /images/{name}` without `force` (and pruning untagged parents, as `docker rmi`
    /// does): 409 when a container uses it, 404 when it is missing.
    async fn remove_image(&self, image: &str) -> Result<bool, RuntimeError> {
        let opts = bollard::query_parameters::RemoveImageOptionsBuilder::default()
            .force(false)
            .noprune(false)
            .build();
        let answer = self
            .timed(
                "image remove",
                Object::Image(image.to_string()),
                self.timeouts.remove,
                self.docker.remove_image(image, Some(opts), None),
            )
            .await?;
        Ok(answer.iter().any(|item| item.deleted.is_some()))
    }

    async fn inspect_network(&self, name: &str) -> Result<NetworkInfo, RuntimeError> {
        let n = self
            .timed(
                "network inspect",
                Object::Network(name.to_string()),
                self.timeouts.call,
                self.docker.inspect_network(name, None),
            )
            .await?;
        Ok(network_info_of(n, name))
    }
}

/// `repository:tag` of an image to import (`latest` when no tag is given), checked by Docker's
/// grammar ([`ImageRef::parse`]). A digest cannot be given: the Engine computes the imported
/// image's digest.
fn import_reference(image: &str) -> Result<(&str, &str), RuntimeError> {
    let refuse = |why: String| {
        RuntimeError::Other(format!(
            "cannot import an image as {image:?}: expected repository[:tag], e.g. berth/pause:1 \
             ({why})"
        ))
    };
    let r = ImageRef::parse(image).map_err(|e| refuse(e.to_string()))?;
    if r.digest().is_some() {
        return Err(refuse(
            "an imported image is named by repository and tag; the Engine computes its digest"
                .to_string(),
        ));
    }
    let (repo, tag) = split_reference(image);
    Ok((repo, tag.unwrap_or(DEFAULT_TAG)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_import_is_named_by_repository_and_tag() {
        assert_eq!(
            import_reference("berth/pause:1-abc").expect("ok"),
            ("berth/pause", "1-abc")
        );
        assert_eq!(
            import_reference("127.0.0.1:5000/p").expect("ok"),
            ("127.0.0.1:5000/p", "latest")
        );
        for bad in ["berth/pause@sha256:00", "", ":x", "berth/pause:"] {
            let e = import_reference(bad).expect_err(bad);
            assert!(e.to_string().contains("repository[:tag]"), "{e}");
        }
    }
}

#[cfg(test)]
mod engine_address_tests {
    use super::*;

    /// A socket file nothing listens on: connecting is refused at once.
    fn dead_socket(dir: &std::path::Path) -> String {
        let path = dir.join("dead.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        drop(listener);
        format!("unix://{}", path.display())
    }

    #[tokio::test]
    async fn an_engine_that_went_away_is_named_in_every_call_error() {
        let dir = tempfile::tempdir().expect("tmp");
        let address = dead_socket(dir.path());
        // Connecting without the ping, as if the Engine had answered it and then gone away.
        let docker = Docker::connect_with_host(&address).expect("client");
        let rt = DockerRuntime::new(docker)
            .with_engine(address.clone())
            .with_pull_retry(PullRetry {
                attempts: 1,
                ..PullRetry::default()
            });
        let e = rt.image_present("busybox").await.expect_err("no engine");
        let RuntimeError::Unavailable(message) = &e else {
            panic!("expected unavailable, got {e:?}");
        };
        assert!(
            message.starts_with(&format!(
                "cannot connect to the Docker Engine at {address}: "
            )),
            "{message}"
        );
        assert!(message.contains("Connection refused"), "{message}");
        assert!(!message.contains("hyper"), "{message}");
        let e = rt
            .pull("busybox:1", None, None)
            .await
            .expect_err("no engine");
        assert!(e.to_string().contains(&address), "{e}");
    }

    #[tokio::test]
    async fn a_call_to_an_engine_that_accepts_and_never_answers_says_it_does_not_answer() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("silent.sock");
        let listener = tokio::net::UnixListener::bind(&path).expect("bind");
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                held.push(conn);
            }
        });
        let address = format!("unix://{}", path.display());
        let docker = Docker::connect_with_host(&address).expect("client");
        let limit = Duration::from_millis(200);
        let rt = DockerRuntime::new(docker)
            .with_engine(address.clone())
            .with_timeouts(Timeouts {
                call: limit,
                volume: limit,
                ping: limit,
                ..Timeouts::default()
            });
        let e = rt.inspect("c1").await.expect_err("no answer");
        assert_eq!(
            e,
            RuntimeError::Timeout(format!(
                "docker container inspect c1 did not answer within 200ms (the Engine at {address} \
                 does not answer: its /_ping got no answer within 200ms; is dockerd running?)"
            ))
        );
        let e = rt.volume_exists("v").await.expect_err("no answer");
        assert!(
            e.to_string()
                .starts_with("docker volume inspect v did not answer within 200ms"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn connect_names_the_socket_it_tried() {
        let dir = tempfile::tempdir().expect("tmp");
        let missing = format!("unix://{}", dir.path().join("none.sock").display());
        let e = crate::connect(Some(&missing)).await.expect_err("no socket");
        assert_eq!(
            e.to_string(),
            format!(
                "cannot connect to the Docker Engine at {missing}: no socket at {}; is dockerd \
                 running? (--docker-host or DOCKER_HOST choose another Engine)",
                dir.path().join("none.sock").display()
            )
        );
        let dead = dead_socket(dir.path());
        let e = crate::connect(Some(&dead)).await.expect_err("refused");
        assert!(e.to_string().contains(&format!("at {dead}: ")), "{e}");
        assert!(e.to_string().contains("Connection refused"), "{e}");
    }
}
