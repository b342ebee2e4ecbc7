//! The agent's Prometheus metrics, through `prometheus-client`: what is counted, the histograms,
//! the `/metrics` route, and [`Timed`], the decorator that times every Docker call.
//!
//! Series (OpenMetrics text; names follow Prometheus conventions, base units):
//!
//! | series | type | what |
//! |---|---|---|
//! | `berth_tasks{status}` | gauge | tasks the agent tracks, by known status (read at scrape time) |
//! | `berth_tasks_submitted_total` | counter | tasks submitted through the API |
//! | `berth_container_transitions_total` | counter | container status changes |
//! | `berth_container_restarts_total` | counter | containers restarted in place under their restart policy |
//! | `berth_pulls_total` | counter | image pulls finished (done or failed) |
//! | `berth_pull_failures_total` | counter | image pulls that failed |
//! | `berth_pull_duration_seconds` | histogram | pull started → done or failed, retries included |
//! | `berth_task_start_duration_seconds` | histogram | task submitted → RUNNING |
//! | `berth_docker_request_duration_seconds{operation}` | histogram | one Docker call, by runtime method |
//! | `berth_docker_timeouts_total{operation}` | counter | Docker calls that did not answer within their limit, by runtime method |
//! | `berth_docker_errors_total` | counter | Docker calls that failed (the engine counts them) |
//! | `berth_event_stream_reconnects_total` | counter | Docker event streams re-subscribed |
//! | `berth_state_save_failures_total` | counter | task-state saves that failed (each retry counts; the task is held meanwhile) |
//! | `berth_images_removed_total{trigger}` | counter | images image cleanup removed, by trigger (`cycle`, `disk-pressure`, `prune`) |
//! | `berth_image_bytes_freed_total` | counter | bytes those removals freed (Docker's size of each image) |
//! | `berth_image_removal_failures_total` | counter | removals that failed or were skipped (a task held the image, Docker refused) |
//!
//! Invariants: the registry is built once ([`Metrics::new`]) and only read afterwards; every
//! update is an atomic operation, so reporting never blocks a task. One [`TaskObserver`] per task
//! turns its reports into updates ([`TaskObserver::observe`]).
//!
//! Limits: a task's start is counted only if the agent sees it reach RUNNING (a task resumed
//! after a restart that was already RUNNING is not counted again; one that was not yet RUNNING
//! counts from its submission, the agent's downtime included). A pull's duration is measured from
//! the reports, so a pull interrupted by an agent restart is counted in `berth_pulls_total` but
//! has no duration. `events` is timed until the stream is open, not while it runs; `stop` includes
//! the container's grace period.

use axum::Router;
use axum::response::IntoResponse;
use axum::routing::get;
use berth_engine::report::{PullPhase, Report, now_ms};
use berth_engine::runtime::{
    ContainerDetails, ContainerInfo, ContainerSummary, ImageSummary, NetworkInfo, ProgressSink,
    RegistryAuth, Runtime, RuntimeError, RuntimeEvent,
};
use berth_engine::spec::{ContainerSpec, VolumeSpec};
use berth_engine::{EngineMetrics, Millis, Status, TaskState};
use futures_util::stream::BoxStream;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

/// The content type of the OpenMetrics text format, which Prometheus scrapes.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Every status, so `berth_tasks` shows a zero rather than no series.
const STATUSES: [Status; 5] = [
    Status::None,
    Status::Pulled,
    Status::Created,
    Status::Running,
    Status::Stopped,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TriggerLabel {
    trigger: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabel {
    operation: &'static str,
}

type DockerHistograms = Family<OperationLabel, Histogram, fn() -> Histogram>;

/// Docker calls: 1 ms to about 33 s.
fn docker_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// The agent's metrics (one per agent, shared by every task).
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    tasks: Family<StatusLabel, Gauge>,
    tasks_submitted: Counter,
    container_transitions: Counter,
    container_restarts: Counter,
    pulls: Counter,
    pull_failures: Counter,
    pull_duration: Histogram,
    task_start: Histogram,
    docker: DockerHistograms,
    docker_timeouts: Family<OperationLabel, Counter>,
    images_removed: Family<TriggerLabel, Counter>,
    image_bytes_freed: Counter,
    image_removal_failures: Counter,
}

/// The engine's own counters, read at scrape time.
#[derive(Debug)]
struct EngineCollector(Arc<EngineMetrics>);

impl Collector for EngineCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use std::sync::atomic::Ordering::Relaxed;
        let counters = [
            (
                "docker_errors",
                "Docker calls that failed.",
                self.0.docker_errors.load(Relaxed),
            ),
            (
                "event_stream_reconnects",
                "Docker event streams re-subscribed after breaking.",
                self.0.event_stream_reconnects.load(Relaxed),
            ),
            (
                "state_save_failures",
                "Task-state saves that failed (the task is held until a save succeeds).",
                self.0.save_failures.load(Relaxed),
            ),
        ];
        for (name, help, value) in counters {
            let counter = ConstCounter::new(value);
            let metric = encoder.encode_descriptor(name, help, None, counter.metric_type())?;
            counter.encode(metric)?;
        }
        Ok(())
    }
}

impl Metrics {
    /// Register every series; `engine` is the engine's counters (`RunConfig.metrics`).
    pub fn new(engine: Arc<EngineMetrics>) -> Metrics {
        // prometheus-client ends every help text of the registry with a period.
        let mut registry = Registry::with_prefix("berth");
        let tasks = Family::<StatusLabel, Gauge>::default();
        registry.register(
            "tasks",
            "Tasks the agent tracks, by known status",
            tasks.clone(),
        );
        let tasks_submitted = Counter::default();
        registry.register(
            "tasks_submitted",
            "Tasks submitted through the API",
            tasks_submitted.clone(),
        );
        let container_transitions = Counter::default();
        registry.register(
            "container_transitions",
            "Container status changes",
            container_transitions.clone(),
        );
        let container_restarts = Counter::default();
        registry.register(
            "container_restarts",
            "Containers restarted in place under their restart policy",
            container_restarts.clone(),
        );
        let pulls = Counter::default();
        registry.register(
            "pulls",
            "Image pulls finished (done or failed)",
            pulls.clone(),
        );
        let pull_failures = Counter::default();
        registry.register(
            "pull_failures",
            "Image pulls that failed",
            pull_failures.clone(),
        );
        // 0.1 s to about 1.8 h (the default pull timeout is 2 h).
        let pull_duration = Histogram::new(exponential_buckets(0.1, 2.0, 17));
        registry.register_with_unit(
            "pull_duration",
            "Time from the start of an image pull to its end (done or failed), retries included",
            Unit::Seconds,
            pull_duration.clone(),
        );
        // 50 ms to about 27 min.
        let task_start = Histogram::new(exponential_buckets(0.05, 2.0, 16));
        registry.register_with_unit(
            "task_start_duration",
            "Time from a task's submission to its RUNNING status",
            Unit::Seconds,
            task_start.clone(),
        );
        let docker = DockerHistograms::new_with_constructor(docker_histogram);
        registry.register_with_unit(
            "docker_request_duration",
            "Time of one Docker Engine call, by operation (the runtime's method)",
            Unit::Seconds,
            docker.clone(),
        );
        let docker_timeouts = Family::<OperationLabel, Counter>::default();
        registry.register(
            "docker_timeouts",
            "Docker Engine calls that did not answer within their limit, by operation",
            docker_timeouts.clone(),
        );
        let images_removed = Family::<TriggerLabel, Counter>::default();
        registry.register(
            "images_removed",
            "Images image cleanup removed, by trigger (cycle, disk-pressure, prune)",
            images_removed.clone(),
        );
        let image_bytes_freed = Counter::default();
        registry.register(
            "image_bytes_freed",
            "Bytes image cleanup freed (Docker's size of each removed image)",
            image_bytes_freed.clone(),
        );
        let image_removal_failures = Counter::default();
        registry.register(
            "image_removal_failures",
            "Image removals that failed or were skipped (a task held the image, Docker refused)",
            image_removal_failures.clone(),
        );
        registry.register_collector(Box::new(EngineCollector(engine)));
        Metrics {
            images_removed,
            image_bytes_freed,
            image_removal_failures,
            registry,
            tasks,
            tasks_submitted,
            container_transitions,
            container_restarts,
            pulls,
            pull_failures,
            pull_duration,
            task_start,
            docker,
            docker_timeouts,
        }
    }

    /// Count one task submitted through the API.
    pub fn task_submitted(&self) {
        self.tasks_submitted.inc();
    }

    /// A new observer for one task's reports, starting from `state` (new or resumed).
    pub fn observer(self: &Arc<Self>, state: &TaskState) -> TaskObserver {
        TaskObserver {
            metrics: self.clone(),
            submitted_at: (state.known() < Status::Running).then_some(state.created_at),
            pull_started: HashMap::new(),
        }
    }

    /// The exposition, with `berth_tasks` set from `statuses` (the known status of every task).
    fn render(&self, statuses: &[Status]) -> Result<String, std::fmt::Error> {
        for s in STATUSES {
            let n = statuses.iter().filter(|t| **t == s).count();
            self.tasks
                .get_or_create(&StatusLabel { status: s.as_str() })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// Seconds from `from` to now (0 when the clock went back).
fn seconds_since(from: Millis) -> f64 {
    let ms = now_ms().saturating_sub(from).max(0);
    // Exact for any duration below 2^53 ms.
    ms as f64 / 1000.0
}

impl Metrics {
    /// One image removed by `trigger`, freeing `bytes`.
    pub fn image_removed(&self, trigger: &'static str, bytes: u64) {
        self.images_removed
            .get_or_create(&TriggerLabel { trigger })
            .inc();
        self.image_bytes_freed.inc_by(bytes);
    }

    /// One image removal that failed or was skipped.
    pub fn image_removal_failed(&self) {
        self.image_removal_failures.inc();
    }
}

/// Turns one task's reports into metric updates (in the task's report fan-out).
pub struct TaskObserver {
    metrics: Arc<Metrics>,
    /// The submission time, until the task is seen RUNNING (None: nothing to measure).
    submitted_at: Option<Millis>,
    /// When each container's pull started.
    pull_started: HashMap<String, Millis>,
}

impl TaskObserver {
    pub fn observe(&mut self, report: &Report) {
        let m = &self.metrics;
        match report {
            Report::Container { .. } => {
                m.container_transitions.inc();
            }
            Report::Pull {
                container, phase, ..
            } => match phase {
                PullPhase::Started => {
                    self.pull_started.insert(container.clone(), now_ms());
                }
                PullPhase::Done | PullPhase::Failed => {
                    if let Some(t) = self.pull_started.remove(container) {
                        m.pull_duration.observe(seconds_since(t));
                    }
                    m.pulls.inc();
                    if *phase == PullPhase::Failed {
                        m.pull_failures.inc();
                    }
                }
                PullPhase::Cached => {}
            },
            Report::Task { known, .. } => {
                if *known == Status::Running
                    && let Some(t) = self.submitted_at.take()
                {
                    m.task_start.observe(seconds_since(t));
                }
            }
            Report::Restarted { .. } => {
                m.container_restarts.inc();
            }
            // StopFailed: counted in berth_docker_errors_total by the engine.
            Report::PullProgress { .. }
            | Report::ImageRemoved { .. }
            | Report::StopFailed { .. } => {}
        }
    }
}

/// The `/metrics` route: `metrics` with `berth_tasks` from `statuses()`, read at each scrape.
pub fn router(
    metrics: Arc<Metrics>,
    statuses: impl Fn() -> Vec<Status> + Clone + Send + Sync + 'static,
) -> Router {
    Router::new().route(
        "/metrics",
        get(move || async move {
            match metrics.render(&statuses()) {
                Ok(text) => ([("content-type", CONTENT_TYPE)], text).into_response(),
                Err(_) => (
                    axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                    "cannot encode the metrics",
                )
                    .into_response(),
            }
        }),
    )
}

/// A [`Runtime`] that times every call of the runtime it wraps in
/// `berth_docker_request_duration_seconds{operation}` and otherwise only delegates (the metadata
/// endpoint's methods included, so their answers are the wrapped runtime's).
pub struct Timed<R> {
    inner: R,
    docker: DockerHistograms,
    timeouts: Family<OperationLabel, Counter>,
}

impl<R> Timed<R> {
    pub fn new(inner: R, metrics: &Metrics) -> Timed<R> {
        Timed {
            inner,
            docker: metrics.docker.clone(),
            timeouts: metrics.docker_timeouts.clone(),
        }
    }

    /// The wrapped runtime (its own methods beyond [`Runtime`] are not timed).
    pub fn inner(&self) -> &R {
        &self.inner
    }

    async fn time<T>(
        &self,
        operation: &'static str,
        call: impl Future<Output = Result<T, RuntimeError>>,
    ) -> Result<T, RuntimeError> {
        let started = Instant::now();
        let out = call.await;
        let label = OperationLabel { operation };
        self.docker
            .get_or_create(&label)
            .observe(started.elapsed().as_secs_f64());
        if let Err(RuntimeError::Timeout(_)) = &out {
            self.timeouts.get_or_create(&label).inc();
        }
        out
    }
}

impl<R: Runtime> Runtime for Timed<R> {
    async fn image_present(&self, image: &str) -> Result<bool, RuntimeError> {
        self.time("image_present", self.inner.image_present(image))
            .await
    }
    async fn pull(
        &self,
        image: &str,
        auth: Option<&RegistryAuth>,
        progress: Option<ProgressSink>,
    ) -> Result<(), RuntimeError> {
        self.time("pull", self.inner.pull(image, auth, progress))
            .await
    }
    async fn import_image(
        &self,
        image: &str,
        rootfs: Vec<u8>,
        changes: Vec<String>,
    ) -> Result<(), RuntimeError> {
        self.time("import", self.inner.import_image(image, rootfs, changes))
            .await
    }
    async fn create(&self, spec: &ContainerSpec) -> Result<String, RuntimeError> {
        self.time("create", self.inner.create(spec)).await
    }
    async fn start(&self, id: &str) -> Result<(), RuntimeError> {
        self.time("start", self.inner.start(id)).await
    }
    async fn stop(&self, id: &str, timeout_secs: u32) -> Result<(), RuntimeError> {
        self.time("stop", self.inner.stop(id, timeout_secs)).await
    }
    async fn kill(&self, id: &str) -> Result<(), RuntimeError> {
        self.time("kill", self.inner.kill(id)).await
    }
    async fn inspect(&self, id: &str) -> Result<ContainerInfo, RuntimeError> {
        self.time("inspect", self.inner.inspect(id)).await
    }
    async fn remove(&self, id: &str) -> Result<(), RuntimeError> {
        self.time("remove", self.inner.remove(id)).await
    }
    async fn ensure_volume(&self, spec: &VolumeSpec) -> Result<bool, RuntimeError> {
        self.time("ensure_volume", self.inner.ensure_volume(spec))
            .await
    }
    async fn volume_exists(&self, name: &str) -> Result<bool, RuntimeError> {
        self.time("volume_exists", self.inner.volume_exists(name))
            .await
    }
    async fn remove_volume(&self, name: &str) -> Result<(), RuntimeError> {
        self.time("remove_volume", self.inner.remove_volume(name))
            .await
    }
    async fn events(
        &self,
        task_id: &str,
    ) -> Result<BoxStream<'static, RuntimeEvent>, RuntimeError> {
        self.time("events", self.inner.events(task_id)).await
    }
    async fn inspect_details(&self, id: &str) -> Result<ContainerDetails, RuntimeError> {
        self.time("inspect_details", self.inner.inspect_details(id))
            .await
    }
    async fn stats(&self, id: &str) -> Result<serde_json::Value, RuntimeError> {
        self.time("stats", self.inner.stats(id)).await
    }
    async fn inspect_network(&self, name: &str) -> Result<NetworkInfo, RuntimeError> {
        self.time("inspect_network", self.inner.inspect_network(name))
            .await
    }
    async fn list_images(&self) -> Result<Vec<ImageSummary>, RuntimeError> {
        self.time("list_images", self.inner.list_images()).await
    }
    async fn list_containers(&self) -> Result<Vec<ContainerSummary>, RuntimeError> {
        self.time("list_containers", self.inner.list_containers())
            .await
    }
    async fn remove_image(&self, image: &str) -> Result<bool, RuntimeError> {
        self.time("remove_image", self.inner.remove_image(image))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task_report(known: Status) -> Report {
        Report::Task {
            time: String::new(),
            task: "t".into(),
            family: "f".into(),
            known,
            desired: Status::Running,
        }
    }

    fn pull_report(phase: PullPhase) -> Report {
        Report::Pull {
            time: String::new(),
            task: "t".into(),
            container: "c".into(),
            image: "i".into(),
            phase,
            reason: None,
        }
    }

    fn state() -> TaskState {
        let def = berth_model::parse(
            r#"{"family": "f", "containerDefinitions": [{"name": "c", "image": "i"}]}"#,
        )
        .expect("valid")
        .definition;
        TaskState::new("t".into(), def, now_ms())
    }

    #[test]
    fn the_exposition_has_prometheus_names_and_every_status() {
        let engine = Arc::new(EngineMetrics::default());
        engine
            .docker_errors
            .fetch_add(2, std::sync::atomic::Ordering::Relaxed);
        let m = Arc::new(Metrics::new(engine));
        m.task_submitted();
        let mut obs = m.observer(&state());
        for r in [
            pull_report(PullPhase::Started),
            pull_report(PullPhase::Failed),
            task_report(Status::Running),
            task_report(Status::Running),
            Report::Restarted {
                time: String::new(),
                task: "t".into(),
                container: "c".into(),
                restart_count: 1,
                exit_code: Some(1),
                docker_id: "d".into(),
            },
        ] {
            obs.observe(&r);
        }
        let text = m
            .render(&[Status::Running, Status::Stopped, Status::Stopped])
            .expect("encodes");
        for line in [
            "berth_tasks{status=\"NONE\"} 0",
            "berth_tasks{status=\"RUNNING\"} 1",
            "berth_tasks{status=\"STOPPED\"} 2",
            "berth_tasks_submitted_total 1",
            "berth_container_restarts_total 1",
            "berth_pulls_total 1",
            "berth_pull_failures_total 1",
            "berth_pull_duration_seconds_count 1",
            "berth_task_start_duration_seconds_count 1",
            "berth_docker_errors_total 2",
            "berth_event_stream_reconnects_total 0",
            "berth_state_save_failures_total 0",
        ] {
            assert!(text.contains(line), "no {line} in:\n{text}");
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[tokio::test]
    async fn an_import_is_timed_as_import() {
        let m = Metrics::new(Arc::default());
        let fake = berth_engine::fake::FakeRuntime::new();
        let timed = Timed::new(fake.clone(), &m);
        let image = berth_engine::pause_provision::ensure_pause_image(&timed)
            .await
            .expect("imported");
        assert_eq!(fake.imports(), 1, "the call reached the wrapped runtime");
        assert!(fake.image_present(&image).await.expect("present?"));
        let text = m.render(&[]).expect("encodes");
        // Absent, then absent again under the import lock, then imported.
        for (op, n) in [("image_present", 2), ("import", 1)] {
            let line =
                format!("berth_docker_request_duration_seconds_count{{operation=\"{op}\"}} {n}");
            assert!(text.contains(&line), "no {line} in:\n{text}");
        }
    }

    #[test]
    fn a_task_resumed_while_running_is_not_timed_again() {
        let m = Arc::new(Metrics::new(Arc::default()));
        let mut s = state();
        for c in &mut s.containers {
            c.known = Status::Running;
        }
        let mut obs = m.observer(&s);
        obs.observe(&task_report(Status::Running));
        let text = m.render(&[]).expect("encodes");
        assert!(
            text.contains("berth_task_start_duration_seconds_count 0"),
            "{text}"
        );
    }
}
