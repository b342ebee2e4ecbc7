//! An in-memory [`Runtime`] for engine tests: records every call, can be told to fail, and plays each
//! container's life from a script (exit code after start, health, ignoring SIGTERM).
//!
//! It follows the real runtime's contract, and `berth-testkit`'s runtime contract suite holds it to
//! that: the same scenarios run on it and on the Docker Engine. Like Docker: remove is idempotent,
//! takes an id or a name, and kills a running container first (`die` 137, then `destroy`); stop of a
//! stopped container succeeds; a stopped program exits 143 (137 when it ignores SIGTERM, or is
//! killed); `inspect` takes an id or a name and reports start and finish times and, for a container
//! with a health check, its health; a volume a container mounts cannot be removed (conflict).
//! Events for start/die/health/destroy go to the subscribers of the container's `berth.task`.
//!
//! A stopped container can be started again (a restart in place): same id, new start time, the
//! script played again.
//! Failure injection (a script's `create_error`, `start_error`, `stop_refusals`) makes a call fail
//! as the Engine would, without changing the container.
//!
//! Not modelled: container processes (commands are not run; the script decides), time (the clock
//! is the wall clock in milliseconds, made strictly increasing across calls: no time passes
//! between a start and a scripted exit), Docker creating a missing named volume at create, bind
//! sources that do not exist, merged pulls, registries (an image is pullable, pullable only with one
//! login, or not), the contents of an imported image (an import only makes the image present).
//! End-to-end behaviour is still proven against the real Docker Engine in the binary crate's tests.
//!
//! Compiled only with the `fake` cargo feature, which test crates enable in their
//! dev-dependencies, and for rustdoc: the berth binary does not contain it.

use crate::runtime::{
    BoundPort, ContainerDetails, ContainerInfo, ContainerSummary, HealthDetails, ImageSummary,
    IpamConfig, MountDetails, NetworkAttachment, NetworkInfo, Object, RegistryAuth, Runtime,
    RuntimeError, RuntimeEvent,
};
use crate::spec::{ContainerSpec, LABEL_CONTAINER, LABEL_TASK, MountKind, VolumeSpec};
use crate::state::Health;
use futures_util::stream::BoxStream;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::mpsc;

/// How a fake container behaves once started (keyed by its definition name).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Script {
    /// Exit with this code right after starting; None = run until stopped.
    pub exit_code: Option<i64>,
    /// Report healthy right after starting.
    pub healthy: bool,
    /// Report unhealthy right after starting.
    pub unhealthy: bool,
    /// Fail `create` with this message.
    pub create_error: Option<String>,
    /// Fail `start` with this message.
    pub start_error: Option<String>,
    /// Ignore SIGTERM: a stop kills it once the grace period is over (exit code 137).
    pub ignores_sigterm: bool,
    /// With `exit_code`: the exit is the kernel's OOM killer's (inspect says `oom_killed`).
    pub oom_killed: bool,
    /// Refuse this many `stop` calls (as an Engine that does not answer: unavailable), leaving the
    /// container running; each refusal counts down.
    pub stop_refusals: u32,
}

#[derive(Debug)]
struct FakeContainer {
    spec: ContainerSpec,
    running: bool,
    exit_code: Option<i64>,
    started_at: Option<i64>,
    finished_at: Option<i64>,
    /// The scripted health status once started (None: no health check in the spec).
    health: Option<Health>,
    oom_killed: bool,
}

#[derive(Default)]
struct Inner {
    images: BTreeSet<String>,
    /// Sizes given with [`FakeRuntime::add_image_sized`] (others list as 1000 bytes).
    sizes: HashMap<String, u64>,
    pullable: BTreeSet<String>,
    /// Images pullable only with this (username, password).
    private: HashMap<String, (String, String)>,
    /// The login each pull was made with: (image, username).
    logins: Vec<(String, Option<String>)>,
    scripts: HashMap<String, Script>,
    containers: BTreeMap<String, FakeContainer>,
    volumes: BTreeSet<String>,
    subscribers: Vec<(String, mpsc::UnboundedSender<RuntimeEvent>)>,
    calls: Vec<String>,
    clock: i64,
    /// Stats calls so far: the stats' counters grow with it.
    stats_calls: u64,
    next_id: u64,
}

/// The fake runtime. Cheap to clone (shared state).
#[derive(Clone, Default)]
pub struct FakeRuntime {
    inner: Arc<Mutex<Inner>>,
}

impl FakeRuntime {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding this lock only happens in a failing test; keep going with the data.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Make an image present locally.
    pub fn add_image(&self, image: &str) {
        self.lock().images.insert(image.to_string());
    }

    /// Make an image present locally with this size (what `list_images` reports).
    pub fn add_image_sized(&self, image: &str, size: u64) {
        let mut inner = self.lock();
        inner.images.insert(image.to_string());
        inner.sizes.insert(image.to_string(), size);
    }

    /// The images present locally, by name.
    pub fn images(&self) -> Vec<String> {
        self.lock().images.iter().cloned().collect()
    }

    /// The id the fake gives the image named `image` (each name is its own image).
    pub fn image_id(image: &str) -> String {
        format!("sha256:fake-{image}")
    }

    /// Make an image pullable from a registry.
    pub fn add_remote(&self, image: &str) {
        self.lock().pullable.insert(image.to_string());
    }

    /// Make an image pullable only with this login (any other login, or none, is refused as a
    /// registry refuses it: `unauthorized: authentication required`, not retriable).
    pub fn add_private(&self, image: &str, username: &str, password: &str) {
        self.lock().private.insert(
            image.to_string(),
            (username.to_string(), password.to_string()),
        );
    }

    /// The login of every pull, in order: (image, username or None for an anonymous pull).
    pub fn pull_logins(&self) -> Vec<(String, Option<String>)> {
        self.lock().logins.clone()
    }

    pub fn script(&self, container: &str, script: Script) {
        self.lock().scripts.insert(container.to_string(), script);
    }

    /// How many `import_image` calls were made (successful or not).
    pub fn imports(&self) -> usize {
        self.lock()
            .calls
            .iter()
            .filter(|c| c.starts_with("import "))
            .count()
    }

    /// Every call made, in order, as `verb container-name` strings (`pull <image>`,
    /// `import <image>`, `create <name>`, …).
    pub fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    /// The create specs of every container that exists, in no particular order.
    pub fn created_specs(&self) -> Vec<ContainerSpec> {
        self.lock()
            .containers
            .values()
            .map(|c| c.spec.clone())
            .collect()
    }

    pub fn container_count(&self) -> usize {
        self.lock().containers.len()
    }

    fn emit(inner: &mut Inner, task: &str, ev: RuntimeEvent) {
        inner
            .subscribers
            .retain(|(t, tx)| t != task || tx.send(ev.clone()).is_ok());
    }

    fn tick(inner: &mut Inner) -> i64 {
        // Docker's times are wall-clock times the engine compares with its own (a restart's
        // decision time with a later exit or start), so the fake's are too: strictly increasing.
        inner.clock = (inner.clock + 1).max(crate::report::now_ms());
        inner.clock
    }

    /// Ends a running container with `exit_code` and emits its `die` event; nothing when it is
    /// not running.
    fn exit(inner: &mut Inner, id: &str, exit_code: i64) {
        if !inner.containers.get(id).is_some_and(|c| c.running) {
            return;
        }
        let at = Self::tick(inner);
        let mut task = String::new();
        if let Some(c) = inner.containers.get_mut(id) {
            c.running = false;
            c.exit_code = Some(exit_code);
            c.finished_at = Some(at);
            task = c.spec.labels.get(LABEL_TASK).cloned().unwrap_or_default();
        }
        Self::emit(
            inner,
            &task,
            RuntimeEvent::Die {
                id: id.into(),
                exit_code: Some(exit_code),
                at,
            },
        );
    }
}

/// The key (id) of the container with this id or name, as Docker resolves either.
fn resolve(inner: &Inner, id_or_name: &str) -> Option<String> {
    if inner.containers.contains_key(id_or_name) {
        return Some(id_or_name.to_string());
    }
    inner
        .containers
        .iter()
        .find(|(_, c)| c.spec.name == id_or_name)
        .map(|(k, _)| k.clone())
}

fn not_found(id: &str) -> RuntimeError {
    RuntimeError::not_found(
        Object::Container(id.to_string()),
        format!("no such container: {id}"),
    )
}

/// The container's id, name, task label and definition name.
fn name_of(
    inner: &Inner,
    id_or_name: &str,
) -> Result<(String, String, String, String), RuntimeError> {
    let id = resolve(inner, id_or_name).ok_or_else(|| not_found(id_or_name))?;
    let c = inner.containers.get(&id).ok_or_else(|| not_found(&id))?;
    Ok((
        id.clone(),
        c.spec.name.clone(),
        c.spec.labels.get(LABEL_TASK).cloned().unwrap_or_default(),
        c.spec
            .labels
            .get(LABEL_CONTAINER)
            .cloned()
            .unwrap_or_default(),
    ))
}

impl Runtime for FakeRuntime {
    async fn image_present(&self, image: &str) -> Result<bool, RuntimeError> {
        Ok(self.lock().images.contains(image))
    }

    async fn pull(
        &self,
        image: &str,
        auth: Option<&RegistryAuth>,
        _progress: Option<crate::runtime::ProgressSink>,
    ) -> Result<(), RuntimeError> {
        let mut inner = self.lock();
        inner.calls.push(format!("pull {image}"));
        inner
            .logins
            .push((image.to_string(), auth.map(|a| a.username.clone())));
        if let Some((user, password)) = inner.private.get(image) {
            let accepted = auth.is_some_and(|a| &a.username == user && &a.password == password);
            if !accepted {
                return Err(RuntimeError::PullFailed {
                    image: image.to_string(),
                    message: "unauthorized: authentication required".to_string(),
                    retriable: false,
                });
            }
            inner.images.insert(image.to_string());
            Ok(())
        } else if inner.pullable.contains(image) {
            inner.images.insert(image.to_string());
            Ok(())
        } else {
            Err(RuntimeError::PullFailed {
                image: image.to_string(),
                message: format!("manifest for {image} not found: manifest unknown"),
                retriable: false,
            })
        }
    }

    /// The image becomes present (the call is recorded as `import <image>`). The tar and the
    /// changes are not read (Docker, too, imports an empty body as an empty image).
    async fn import_image(
        &self,
        image: &str,
        _rootfs: Vec<u8>,
        _changes: Vec<String>,
    ) -> Result<(), RuntimeError> {
        let mut inner = self.lock();
        inner.calls.push(format!("import {image}"));
        inner.images.insert(image.to_string());
        Ok(())
    }

    async fn create(&self, spec: &ContainerSpec) -> Result<String, RuntimeError> {
        let mut inner = self.lock();
        inner.calls.push(format!("create {}", spec.name));
        let def_name = spec
            .labels
            .get(LABEL_CONTAINER)
            .cloned()
            .unwrap_or_default();
        if let Some(msg) = inner
            .scripts
            .get(&def_name)
            .and_then(|s| s.create_error.clone())
        {
            return Err(RuntimeError::Other(msg));
        }
        if !inner.images.contains(&spec.image) {
            return Err(RuntimeError::not_found(
                Object::Image(spec.image.clone()),
                format!("no such image: {}", spec.image),
            ));
        }
        if inner.containers.values().any(|c| c.spec.name == spec.name) {
            return Err(RuntimeError::conflict(
                Object::Container(spec.name.clone()),
                format!("name {} in use", spec.name),
            ));
        }
        inner.next_id += 1;
        let id = format!("fake{:060}", inner.next_id);
        inner.containers.insert(
            id.clone(),
            FakeContainer {
                spec: spec.clone(),
                running: false,
                exit_code: None,
                started_at: None,
                finished_at: None,
                health: None,
                oom_killed: false,
            },
        );
        Ok(id)
    }

    async fn start(&self, id: &str) -> Result<(), RuntimeError> {
        let mut inner = self.lock();
        let (id, name, task, def_name) = name_of(&inner, id)?;
        let id = id.as_str();
        inner.calls.push(format!("start {name}"));
        let script = inner.scripts.get(&def_name).cloned().unwrap_or_default();
        if let Some(msg) = script.start_error {
            return Err(RuntimeError::Other(msg));
        }
        let at = Self::tick(&mut inner);
        let health = if script.healthy {
            Some(Health::Healthy)
        } else if script.unhealthy {
            Some(Health::Unhealthy)
        } else {
            None
        };
        if let Some(c) = inner.containers.get_mut(id) {
            c.running = true;
            c.exit_code = None;
            c.started_at = Some(at);
            c.finished_at = None;
            c.health = c
                .spec
                .health
                .as_ref()
                .map(|_| health.unwrap_or(Health::Starting));
        }
        Self::emit(&mut inner, &task, RuntimeEvent::Start { id: id.into(), at });
        if let Some(health) = health {
            Self::emit(
                &mut inner,
                &task,
                RuntimeEvent::Health {
                    id: id.into(),
                    health,
                },
            );
        }
        if let Some(code) = script.exit_code {
            let at = Self::tick(&mut inner);
            if let Some(c) = inner.containers.get_mut(id) {
                c.running = false;
                c.exit_code = Some(code);
                c.finished_at = Some(at);
                c.oom_killed = script.oom_killed;
            }
            Self::emit(
                &mut inner,
                &task,
                RuntimeEvent::Die {
                    id: id.into(),
                    exit_code: Some(code),
                    at,
                },
            );
        }
        Ok(())
    }

    async fn stop(&self, id: &str, _timeout_secs: u32) -> Result<(), RuntimeError> {
        let mut inner = self.lock();
        let (id, name, _, def_name) = name_of(&inner, id)?;
        inner.calls.push(format!("stop {name}"));
        if let Some(script) = inner.scripts.get_mut(&def_name)
            && script.stop_refusals > 0
        {
            script.stop_refusals -= 1;
            return Err(RuntimeError::Unavailable(format!(
                "the fake Engine refuses to stop {name}"
            )));
        }
        let ignores = inner
            .scripts
            .get(&def_name)
            .is_some_and(|s| s.ignores_sigterm);
        // SIGTERM ends the program (143), or SIGKILL after the grace period does (137).
        Self::exit(&mut inner, &id, if ignores { 137 } else { 143 });
        Ok(())
    }

    async fn kill(&self, id: &str) -> Result<(), RuntimeError> {
        let mut inner = self.lock();
        let (id, name, _, _) = name_of(&inner, id)?;
        inner.calls.push(format!("kill {name}"));
        // Docker answers 409 for a container that is not running; the runtime takes that as done.
        Self::exit(&mut inner, &id, 137);
        Ok(())
    }

    async fn inspect(&self, id: &str) -> Result<ContainerInfo, RuntimeError> {
        let inner = self.lock();
        let key = resolve(&inner, id).ok_or_else(|| not_found(id))?;
        let c = inner.containers.get(&key).ok_or_else(|| not_found(id))?;
        Ok(ContainerInfo {
            id: key.clone(),
            name: c.spec.name.clone(),
            running: c.running,
            exit_code: c.exit_code,
            started_at: c.started_at,
            finished_at: c.finished_at,
            health: c.health,
            labels: c.spec.labels.clone(),
            // The fake removes in one step: after a remove's `die` the container is not found.
            removing: false,
            oom_killed: c.oom_killed,
            state_error: None,
        })
    }

    async fn remove(&self, id: &str) -> Result<(), RuntimeError> {
        let mut inner = self.lock();
        inner.calls.push(format!("remove {id}"));
        if let Some(key) = resolve(&inner, id) {
            // Forced, as berth removes: a running container is killed first.
            Self::exit(&mut inner, &key, 137);
            if let Some(c) = inner.containers.remove(&key) {
                let task = c.spec.labels.get(LABEL_TASK).cloned().unwrap_or_default();
                let at = Self::tick(&mut inner);
                Self::emit(&mut inner, &task, RuntimeEvent::Destroy { id: key, at });
            }
        }
        Ok(())
    }

    async fn ensure_volume(&self, spec: &VolumeSpec) -> Result<bool, RuntimeError> {
        let mut inner = self.lock();
        inner.calls.push(format!("volume-create {}", spec.name));
        Ok(inner.volumes.insert(spec.name.clone()))
    }

    async fn volume_exists(&self, name: &str) -> Result<bool, RuntimeError> {
        Ok(self.lock().volumes.contains(name))
    }

    async fn remove_volume(&self, name: &str) -> Result<(), RuntimeError> {
        let mut inner = self.lock();
        inner.calls.push(format!("volume-remove {name}"));
        let users: Vec<&str> = inner
            .containers
            .iter()
            .filter(|(_, c)| {
                c.spec
                    .mounts
                    .iter()
                    .any(|m| m.kind == MountKind::Volume && m.source == name)
            })
            .map(|(id, _)| id.as_str())
            .collect();
        if !users.is_empty() {
            // Docker's words (409).
            return Err(RuntimeError::conflict(
                Object::Volume(name.to_string()),
                format!("remove {name}: volume is in use - [{}]", users.join(", ")),
            ));
        }
        inner.volumes.remove(name);
        Ok(())
    }

    async fn list_images(&self) -> Result<Vec<ImageSummary>, RuntimeError> {
        let inner = self.lock();
        Ok(inner
            .images
            .iter()
            .map(|name| ImageSummary {
                id: Self::image_id(name),
                repo_tags: vec![name.clone()],
                size: inner.sizes.get(name).copied().unwrap_or(1000),
                created: 0,
                labels: BTreeMap::new(),
            })
            .collect())
    }

    async fn list_containers(&self) -> Result<Vec<ContainerSummary>, RuntimeError> {
        let inner = self.lock();
        Ok(inner
            .containers
            .iter()
            .map(|(id, c)| ContainerSummary {
                id: id.clone(),
                name: c.spec.name.clone(),
                image: c.spec.image.clone(),
                image_id: Self::image_id(&c.spec.image),
                running: c.running,
                labels: c.spec.labels.clone(),
            })
            .collect())
    }

    /// By name or by the fake's id; refused (Docker's 409 words) while a container uses it.
    async fn remove_image(&self, image: &str) -> Result<bool, RuntimeError> {
        let mut inner = self.lock();
        inner.calls.push(format!("remove-image {image}"));
        let name = image
            .strip_prefix("sha256:fake-")
            .unwrap_or(image)
            .to_string();
        if !inner.images.contains(&name) {
            return Err(RuntimeError::not_found(
                Object::Image(image.to_string()),
                format!("No such image: {image}"),
            ));
        }
        if let Some((id, _)) = inner.containers.iter().find(|(_, c)| c.spec.image == name) {
            return Err(RuntimeError::conflict(
                Object::Image(image.to_string()),
                format!(
                    "conflict: unable to remove repository reference \"{image}\" (must force) - container {id} is using its referenced image"
                ),
            ));
        }
        inner.images.remove(&name);
        inner.sizes.remove(&name);
        Ok(true)
    }

    async fn events(
        &self,
        task_id: &str,
    ) -> Result<BoxStream<'static, RuntimeEvent>, RuntimeError> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.lock().subscribers.push((task_id.to_string(), tx));
        let stream =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|ev| (ev, rx)) },
            );
        Ok(Box::pin(stream))
    }

    /// Made-up but consistent details: bridge containers get `172.17.0.<n>` and bound ports
    /// (the given host port, else `32768 + n`) once running; scripted health reports `ok`.
    async fn inspect_details(&self, id: &str) -> Result<ContainerDetails, RuntimeError> {
        let inner = self.lock();
        let (n, c) = inner
            .containers
            .iter()
            .enumerate()
            .find(|(_, (k, _))| k.as_str() == id)
            .map(|(n, (_, c))| (n, c))
            .ok_or_else(|| not_found(id))?;
        let def_name = c
            .spec
            .labels
            .get(LABEL_CONTAINER)
            .cloned()
            .unwrap_or_default();
        let script = inner.scripts.get(&def_name).cloned().unwrap_or_default();
        let bridge = c.spec.network_mode == "bridge";
        let networks = if c.running {
            let ipv4_addresses = if bridge {
                vec![format!("172.17.0.{}", n + 2)]
            } else {
                Vec::new()
            };
            vec![NetworkAttachment {
                network: c.spec.network_mode.clone(),
                ipv4_addresses,
            }]
        } else {
            Vec::new()
        };
        let ports = if c.running && bridge {
            c.spec
                .ports
                .iter()
                .enumerate()
                .map(|(k, p)| BoundPort {
                    container_port: p.container_port,
                    protocol: p.protocol.to_string(),
                    host_port: Some(
                        p.host_port
                            .unwrap_or_else(|| 32768 + u16::try_from(k).unwrap_or(0)),
                    ),
                    host_ip: Some("0.0.0.0".to_string()),
                })
                .collect()
        } else {
            Vec::new()
        };
        let health = c.spec.health.as_ref().map(|_| HealthDetails {
            status: if script.healthy {
                Health::Healthy
            } else if script.unhealthy {
                Health::Unhealthy
            } else {
                Health::Starting
            },
            since: None,
            exit_code: Some(i64::from(script.unhealthy)),
            output: Some(if script.unhealthy { "failed" } else { "ok" }.to_string()),
        });
        let mounts = c
            .spec
            .mounts
            .iter()
            .map(|m| MountDetails {
                name: (m.kind == MountKind::Volume).then(|| m.source.clone()),
                source: Some(m.source.clone()),
                destination: m.target.clone(),
            })
            .collect();
        Ok(ContainerDetails {
            image_id: Some(format!("sha256:{:064x}", image_digest(&c.spec.image))),
            networks,
            ports,
            health,
            mounts,
            // Docker's own default driver when the spec names none.
            log_driver: Some(
                c.spec
                    .log_driver
                    .clone()
                    .unwrap_or_else(|| "json-file".to_string()),
            ),
            log_options: c.spec.log_options.clone(),
        })
    }

    /// A small stats object in Docker's shape (cgroup v1 keys), growing with each stats call.
    async fn stats(&self, id: &str) -> Result<serde_json::Value, RuntimeError> {
        let mut inner = self.lock();
        inner.stats_calls += 1;
        let t = inner.stats_calls;
        let c = inner.containers.get(id).ok_or_else(|| not_found(id))?;
        let mut stats = serde_json::json!({
            "read": "2026-11-30T01:00:00.000000000Z",
            "id": id,
            "name": format!("/{}", c.spec.name),
            "num_procs": 0,
            "pids_stats": {"current": 1},
            "cpu_stats": {
                "cpu_usage": {
                    "total_usage": t * 1_000_000,
                    "percpu_usage": [t * 500_000, t * 500_000],
                    "usage_in_kernelmode": t * 200_000,
                    "usage_in_usermode": t * 800_000
                },
                "system_cpu_usage": t * 100_000_000,
                "online_cpus": 2,
                "throttling_data": {"periods": 0, "throttled_periods": 0, "throttled_time": 0}
            },
            "precpu_stats": {"cpu_usage": {"total_usage": 0}, "throttling_data": {}},
            "memory_stats": {"usage": 4_194_304, "max_usage": 8_388_608, "limit": 1_073_741_824,
                             "stats": {"cache": 1_048_576, "rss": 3_145_728}},
            "blkio_stats": {"io_service_bytes_recursive": []}
        });
        if c.spec.network_mode == "bridge" {
            stats["networks"] = serde_json::json!({"eth0": {"rx_bytes": t * 100, "tx_bytes": t * 50,
                                             "rx_packets": t, "tx_packets": t}});
        }
        Ok(stats)
    }

    /// Only `bridge` exists: subnet 172.17.0.0/16 and, as Docker 20.10 often shows it, no gateway.
    async fn inspect_network(&self, name: &str) -> Result<NetworkInfo, RuntimeError> {
        if name != "bridge" {
            return Err(RuntimeError::not_found(
                Object::Network(name.to_string()),
                format!("network {name} not found"),
            ));
        }
        Ok(NetworkInfo {
            name: name.to_string(),
            ipam: vec![IpamConfig {
                subnet: Some("172.17.0.0/16".to_string()),
                gateway: None,
            }],
            bridge_interface: Some("docker0".to_string()),
        })
    }
}

/// A stable number standing in for an image digest (FNV-1a of the reference).
fn image_digest(image: &str) -> u64 {
    image.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
