//! `berth agent`: a long-running agent that accepts tasks over a control API on a Unix socket,
//! keeps every task in the state store (`DATA_DIR/berth.redb`), picks up where it was after a
//! restart (adopting its containers from Docker, creating nothing twice), and cleans tasks up after
//! `--cleanup-wait`.
//!
//! One actor per task (the engine's `run_task`); this module only owns the table of running
//! tasks (a std mutex never held across an `.await`), the cleanup timers and the HTTP routes.
//! SIGTERM stops accepting work and exits; running containers keep running (a restarted agent
//! adopts them).

use crate::cmd_run::PullArgs;
use crate::datadir::{DataDirLock, LockError};
use anyhow::Context as _;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use berth_docker::DockerRuntime;
use berth_engine::report::{self, Report, now_ms};
use berth_engine::{Command, Options, PullBehavior, RunConfig, Status, TaskState};
use berth_store::{Store, TaskRecord};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{Notify, broadcast, mpsc, watch};

/// The default configuration file.
pub const DEFAULT_CONFIG: &str = "/etc/berth/berth.toml";

/// Options the configuration file may set: (key = long option name, its environment variables).
const CONFIG_KEYS: &[(&str, &[&str])] = &[
    ("data-dir", &["BERTH_DATA_DIR"]),
    ("api-socket", &["BERTH_API_SOCKET"]),
    ("docker-host", &["DOCKER_HOST"]),
    (
        "cleanup-wait",
        &[
            "BERTH_CLEANUP_WAIT",
            "ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION",
        ],
    ),
    ("volume-plugin", &["BERTH_VOLUME_PLUGIN"]),
    ("metadata-addr", &["BERTH_METADATA_ADDR"]),
    ("metadata-advertise", &["BERTH_METADATA_ADVERTISE"]),
    ("cluster", &["BERTH_CLUSTER"]),
    ("metadata-rate-limit", &[]),
    ("log-format", &[]),
    (
        "pull-behavior",
        &["BERTH_IMAGE_PULL_BEHAVIOR", "ECS_IMAGE_PULL_BEHAVIOR"],
    ),
    (
        "pull-dependent-upfront",
        &[
            "BERTH_PULL_DEPENDENT_CONTAINERS_UPFRONT",
            "ECS_PULL_DEPENDENT_CONTAINERS_UPFRONT",
        ],
    ),
    ("pull-timeout", &[]),
    ("pull-inactivity-timeout", &[]),
    ("pull-attempts", &[]),
];

/// Layer the configuration file under the environment and the command line: for `berth agent`,
/// every option the file sets (and no environment variable sets) becomes a flag placed before the
/// user's own flags, which therefore win. Other commands pass through unchanged.
pub fn apply_config_file(argv: Vec<std::ffi::OsString>) -> anyhow::Result<Vec<std::ffi::OsString>> {
    let Some(pos) = argv.iter().position(|a| a == "agent") else {
        return Ok(argv);
    };
    let after = &argv[pos + 1..];
    let explicit = after.iter().enumerate().find_map(|(i, a)| {
        let a = a.to_str()?;
        if let Some(v) = a.strip_prefix("--config=") {
            return Some(PathBuf::from(v));
        }
        (a == "--config")
            .then(|| after.get(i + 1).map(PathBuf::from))
            .flatten()
    });
    let path = explicit
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG));
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && explicit.is_none() => {
            return Ok(argv);
        }
        Err(e) => anyhow::bail!("cannot read the configuration file {}: {e}", path.display()),
    };
    let table: toml::Table = text
        .parse()
        .with_context(|| format!("{} is not valid TOML", path.display()))?;
    let mut injected = Vec::new();
    for (key, value) in &table {
        let Some((_, envs)) = CONFIG_KEYS.iter().find(|(k, _)| k == key) else {
            let known: Vec<&str> = CONFIG_KEYS.iter().map(|(k, _)| *k).collect();
            anyhow::bail!(
                "{}: unknown option {key:?} (known: {})",
                path.display(),
                known.join(", ")
            );
        };
        if envs
            .iter()
            .any(|e| std::env::var_os(e).is_some_and(|v| !v.is_empty()))
        {
            continue;
        }
        let flag = format!("--{key}");
        match value {
            toml::Value::Boolean(true) => injected.push(flag),
            toml::Value::Boolean(false) => {}
            toml::Value::String(s) => injected.push(format!("{flag}={s}")),
            toml::Value::Integer(n) => injected.push(format!("{flag}={n}")),
            other => anyhow::bail!(
                "{}: option {key:?} must be a string, a number or a boolean, found {}",
                path.display(),
                other.type_str()
            ),
        }
    }
    let mut out: Vec<std::ffi::OsString> = argv[..=pos].to_vec();
    out.extend(injected.into_iter().map(Into::into));
    out.extend(after.iter().cloned());
    Ok(out)
}

/// The default control socket.
pub const DEFAULT_API_SOCKET: &str = "/run/berth/berth.sock";
/// Largest task definition the API accepts.
const MAX_BODY: usize = 1024 * 1024;

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  berth agent\n  berth agent --data-dir /var/lib/berth --cleanup-wait 10m\n\nThen: berth submit task.json; berth ps; berth stop TASK; berth rm TASK.\n\nConfiguration: every option can be set in the TOML file (keys are the long option names,\ne.g. cleanup-wait = \"10m\"); environment variables override the file, and flags override both."
)]
pub struct Args {
    /// A TOML file with any of these options (keys: the long option names). Missing is fine at
    /// the default path; a file given explicitly must exist.
    #[arg(long, value_name = "FILE", default_value = DEFAULT_CONFIG)]
    pub config: PathBuf,

    /// Print the effective configuration (file, then environment, then flags) as TOML and exit.
    #[arg(long)]
    pub print_config: bool,

    /// Where the agent keeps its state store and task directories.
    /// Default: /var/lib/berth as root, else $XDG_STATE_HOME/berth.
    #[arg(long, env = "BERTH_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// The control API's Unix socket (mode 0600: whoever can write it controls the agent).
    #[arg(long, env = "BERTH_API_SOCKET", value_name = "PATH", default_value = DEFAULT_API_SOCKET)]
    pub api_socket: PathBuf,

    /// The Docker Engine to use. Default: DOCKER_HOST, else the local socket.
    #[arg(long, value_name = "URI")]
    pub docker_host: Option<String>,

    /// How long a stopped task's containers and directory are kept (to read logs and exit codes)
    /// before cleanup, e.g. `3h`, `10m`, `0s`. Environment: BERTH_CLEANUP_WAIT, or ECS's
    /// ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION.
    #[arg(long, env = "BERTH_CLEANUP_WAIT", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub cleanup_wait: Option<Duration>,

    /// The Docker volume driver name of berth's volume plugin (for efsVolumeConfiguration).
    #[arg(long, value_name = "DRIVER", env = "BERTH_VOLUME_PLUGIN", default_value = berth_engine::spec::DEFAULT_VOLUME_PLUGIN)]
    pub volume_plugin: String,

    /// The HTTP listener of the task metadata endpoint (ECS v4/v3) and `/metrics` (Prometheus);
    /// loopback by default. Bridge-mode containers are given the Docker bridge's gateway address
    /// on the same port, where a second listener answers (see docs/metadata.md).
    #[arg(
        long,
        env = "BERTH_METADATA_ADDR",
        value_name = "ADDR",
        default_value = "127.0.0.1:51679"
    )]
    pub metadata_addr: std::net::SocketAddr,

    /// The base URL containers are given for the metadata endpoint instead of the listeners'
    /// addresses, e.g. http://10.0.0.5:51679 (then no bridge listener is started).
    #[arg(long, env = "BERTH_METADATA_ADVERTISE", value_name = "URL")]
    pub metadata_advertise: Option<String>,

    /// The cluster name the task metadata shows (`Cluster`, and in `TaskARN`).
    #[arg(
        long,
        env = "BERTH_CLUSTER",
        value_name = "NAME",
        default_value = "default"
    )]
    pub cluster: String,

    /// Metadata requests allowed per container: N per second with bursts of BURST (ECS: 40/60);
    /// 0 = no limit.
    #[arg(long, value_name = "N/BURST", default_value = "40/60")]
    pub metadata_rate_limit: berth_api::metadata::RateLimit,

    /// Log format on standard error: `text` for people, `json` for log collectors.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    #[command(flatten)]
    pub pull: PullArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// The agent's own counters (the engine's are in [`berth_engine::EngineMetrics`]).
#[derive(Default)]
struct Metrics {
    container_transitions: std::sync::atomic::AtomicU64,
    pulls: std::sync::atomic::AtomicU64,
    pull_failures: std::sync::atomic::AtomicU64,
    /// Milliseconds spent in pulls that finished, summed (with `pulls`, the mean).
    pull_millis: std::sync::atomic::AtomicU64,
    tasks_submitted: std::sync::atomic::AtomicU64,
}

struct Entry {
    snapshot: watch::Receiver<TaskState>,
    commands: mpsc::Sender<Command>,
    cleanup_now: Arc<Notify>,
}

struct Agent {
    rt: Arc<DockerRuntime>,
    store: Arc<Store>,
    data_dir: PathBuf,
    cleanup_wait: Duration,
    options: Options,
    pull_behavior: PullBehavior,
    volume_plugin: String,
    tasks: Mutex<HashMap<String, Entry>>,
    events: broadcast::Sender<String>,
    engine_metrics: Arc<berth_engine::EngineMetrics>,
    metrics: Arc<Metrics>,
    /// Tasks whose containers the metadata endpoint answers for.
    directory: Arc<berth_api::metadata::TaskDirectory>,
    /// Where containers reach the metadata endpoint (set once it listens).
    metadata: std::sync::OnceLock<berth_engine::spec::MetadataEndpoint>,
}

impl Agent {
    fn tasks(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        // The map is consistent between statements; a panic elsewhere cannot corrupt it.
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Start (or resume) a task's actor and its cleanup afterwards.
    fn spawn(self: &Arc<Self>, state: TaskState, resume: bool) {
        let (cmd_tx, cmd_rx) = mpsc::channel(8);
        let (snap_tx, snap_rx) = watch::channel(state.clone());
        self.directory.register(snap_rx.clone());
        let (rep_tx, mut rep_rx) = mpsc::unbounded_channel::<Report>();
        let cleanup_now = Arc::new(Notify::new());
        self.tasks().insert(
            state.id.clone(),
            Entry {
                snapshot: snap_rx,
                commands: cmd_tx,
                cleanup_now: cleanup_now.clone(),
            },
        );
        let events = self.events.clone();
        let metrics = self.metrics.clone();
        tokio::spawn(async move {
            use std::sync::atomic::Ordering::Relaxed;
            let mut pull_started: HashMap<String, i64> = HashMap::new();
            while let Some(r) = rep_rx.recv().await {
                match &r {
                    Report::Container { .. } => {
                        metrics.container_transitions.fetch_add(1, Relaxed);
                    }
                    Report::Pull {
                        container, phase, ..
                    } => match phase {
                        report::PullPhase::Started => {
                            pull_started.insert(container.clone(), now_ms());
                        }
                        report::PullPhase::Done | report::PullPhase::Failed => {
                            if let Some(t) = pull_started.remove(container) {
                                let ms = u64::try_from(now_ms() - t).unwrap_or(0);
                                metrics.pull_millis.fetch_add(ms, Relaxed);
                            }
                            metrics.pulls.fetch_add(1, Relaxed);
                            if *phase == report::PullPhase::Failed {
                                metrics.pull_failures.fetch_add(1, Relaxed);
                            }
                        }
                        report::PullPhase::Cached => {}
                    },
                    Report::Task { .. } | Report::PullProgress { .. } => {}
                }
                if !r.is_progress()
                    && let Ok(line) = serde_json::to_string(&r)
                {
                    let _ = events.send(line);
                }
            }
        });
        let config = RunConfig {
            options: self.options,
            pull_behavior: self.pull_behavior,
            pull_record: self.store.clone(),
            volume_plugin: self.volume_plugin.clone(),
            persist: Some(self.store.clone()),
            resume,
            metrics: self.engine_metrics.clone(),
            metadata: self.metadata.get().cloned(),
            ..RunConfig::new(self.data_dir.clone())
        };
        let agent = self.clone();
        tokio::spawn(async move {
            let done =
                berth_engine::run_task(agent.rt.clone(), state, config, rep_tx, cmd_rx, snap_tx)
                    .await;
            agent.cleanup_after_wait(done, cleanup_now).await;
        });
    }

    /// Wait `--cleanup-wait` (or until `DELETE`), then remove the task's containers, volumes and
    /// directory; a refusal is recorded and retried, never forced.
    async fn cleanup_after_wait(self: Arc<Self>, state: TaskState, now_please: Arc<Notify>) {
        if !state.is_finished() {
            // The actor was cancelled (the agent is shutting down): the task goes on running and
            // the store keeps it for the next agent; there is nothing to clean, no wait to start.
            return;
        }
        let id = state.id.clone();
        let mut rec = match self.store.get_task(&id) {
            Ok(Some(rec)) => rec,
            _ => TaskRecord {
                state: state.clone(),
                cleanup: Default::default(),
            },
        };
        rec.state = state.clone();
        let stopped_at = *rec.cleanup.stopped_at.get_or_insert_with(now_ms);
        if let Err(e) = self.store.save_task(&rec) {
            tracing::error!(task = %id, error = %e, "cannot save the task state");
        }
        let wait_ms = i64::try_from(self.cleanup_wait.as_millis()).unwrap_or(i64::MAX);
        let remaining = (stopped_at.saturating_add(wait_ms) - now_ms()).max(0);
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(u64::try_from(remaining).unwrap_or(0))) => {}
            () = now_please.notified() => {}
        }
        let mut backoff = berth_engine::RetryPolicy::default().backoff();
        loop {
            let report = berth_engine::cleanup_task(&*self.rt, &state, &self.data_dir).await;
            if report.is_complete() {
                if let Err(e) = self.store.delete_task(&id) {
                    tracing::error!(task = %id, error = %e, "cannot forget the task");
                }
                self.tasks().remove(&id);
                self.directory.unregister(&id);
                tracing::info!(task = %id, "task cleaned up");
                return;
            }
            let refused: Vec<String> = report
                .refused
                .iter()
                .map(|r| format!("cleanup: refused: {r}"))
                .collect();
            for r in &refused {
                tracing::warn!(task = %id, "{r}");
            }
            rec.cleanup.refused = Some(refused.join("; "));
            rec.cleanup.attempts += 1;
            let _ = self.store.save_task(&rec);
            tokio::select! {
                () = tokio::time::sleep(backoff.next_delay()) => {}
                () = now_please.notified() => {}
            }
        }
    }

    fn snapshot(&self, id: &str) -> Option<TaskState> {
        self.tasks().get(id).map(|e| e.snapshot.borrow().clone())
    }
}

/// One task as the API shows it.
fn task_json(state: &TaskState, cleanup: Option<&berth_store::Cleanup>) -> Value {
    let mut v = json!({
        "task": state.id,
        "family": state.definition.family,
        "revision": state.definition.revision,
        "known": state.known(),
        "desired": state.desired,
        "stoppedReason": state.stopped_reason,
        "exitCode": (state.known() == Status::Stopped).then(|| report::task_exit_code(state)),
        "createdAt": report::rfc3339(state.created_at),
        "containers": state.containers.iter().map(|c| json!({
            "name": c.name,
            "known": c.known,
            "desired": c.desired,
            "exitCode": c.exit_code,
            "reason": c.reason,
            "dockerId": c.docker_id,
            "dockerName": c.docker_name,
        })).collect::<Vec<_>>(),
    });
    if let Some(c) = cleanup {
        v["cleanup"] = json!({"refused": c.refused, "attempts": c.attempts,
            "stoppedAt": c.stopped_at.map(report::rfc3339)});
    }
    v
}

/// API errors, mapped to HTTP statuses in one exhaustive match.
enum ApiError {
    NotFound(String),
    Invalid(Vec<String>),
    Store(String),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, body) = match self {
            ApiError::NotFound(id) => (
                StatusCode::NOT_FOUND,
                json!({"error": format!("no task {id}")}),
            ),
            ApiError::Invalid(problems) => (
                StatusCode::BAD_REQUEST,
                json!({"error": "invalid task definition", "problems": problems}),
            ),
            ApiError::Store(m) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                json!({"error": format!("state store: {m}")}),
            ),
        };
        (status, Json(body)).into_response()
    }
}

async fn submit(State(agent): State<Arc<Agent>>, body: bytes::Bytes) -> Result<Response, ApiError> {
    let parsed = berth_model::parse_bytes(&body).map_err(|invalid| {
        ApiError::Invalid(invalid.problems.iter().map(ToString::to_string).collect())
    })?;
    let state = TaskState::new(berth_engine::new_task_id(), parsed.definition, now_ms());
    // Stored (with every container's Docker name) before anything is created.
    agent
        .store
        .save_state(&state)
        .map_err(|e| ApiError::Store(e.to_string()))?;
    let id = state.id.clone();
    agent
        .metrics
        .tasks_submitted
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    agent.spawn(state, false);
    let warnings: Vec<String> = parsed.warnings.iter().map(ToString::to_string).collect();
    Ok((
        StatusCode::CREATED,
        Json(json!({"task": id, "warnings": warnings})),
    )
        .into_response())
}

#[derive(Deserialize)]
struct ListQuery {
    status: Option<String>,
    family: Option<String>,
}

async fn list(
    State(agent): State<Arc<Agent>>,
    Query(q): Query<ListQuery>,
) -> Result<Json<Vec<Value>>, ApiError> {
    let records = agent
        .store
        .tasks()
        .map_err(|e| ApiError::Store(e.to_string()))?;
    let out = records
        .iter()
        .map(|r| {
            let state = agent
                .snapshot(&r.state.id)
                .unwrap_or_else(|| r.state.clone());
            (state, r.cleanup.clone())
        })
        .filter(|(s, _)| {
            q.status
                .as_deref()
                .is_none_or(|st| s.known().as_str().eq_ignore_ascii_case(st))
        })
        .filter(|(s, _)| q.family.as_deref().is_none_or(|f| s.definition.family == f))
        .map(|(s, c)| task_json(&s, Some(&c)))
        .collect();
    Ok(Json(out))
}

async fn inspect(
    State(agent): State<Arc<Agent>>,
    UrlPath(id): UrlPath<String>,
) -> Result<Json<Value>, ApiError> {
    let rec = agent
        .store
        .get_task(&id)
        .map_err(|e| ApiError::Store(e.to_string()))?
        .ok_or_else(|| ApiError::NotFound(id.clone()))?;
    let state = agent.snapshot(&id).unwrap_or(rec.state);
    Ok(Json(task_json(&state, Some(&rec.cleanup))))
}

async fn stop(
    State(agent): State<Arc<Agent>>,
    UrlPath(id): UrlPath<String>,
) -> Result<Response, ApiError> {
    let sender = agent.tasks().get(&id).map(|e| e.commands.clone());
    let sender = sender.ok_or_else(|| ApiError::NotFound(id.clone()))?;
    let _ = sender
        .send(Command::Stop {
            reason: "stopped through the API".into(),
        })
        .await;
    Ok((StatusCode::ACCEPTED, Json(json!({"task": id}))).into_response())
}

async fn remove(
    State(agent): State<Arc<Agent>>,
    UrlPath(id): UrlPath<String>,
) -> Result<Response, ApiError> {
    let entry = agent
        .tasks()
        .get(&id)
        .map(|e| (e.commands.clone(), e.cleanup_now.clone()));
    let (sender, now) = entry.ok_or_else(|| ApiError::NotFound(id.clone()))?;
    let _ = sender
        .send(Command::Stop {
            reason: "removed through the API".into(),
        })
        .await;
    // Wakes the cleanup timer now, or as soon as the task has stopped.
    now.notify_one();
    Ok((StatusCode::ACCEPTED, Json(json!({"task": id}))).into_response())
}

async fn events(State(agent): State<Arc<Agent>>) -> Response {
    let rx = agent.events.subscribe();
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        loop {
            match rx.recv().await {
                Ok(line) => {
                    return Some((Ok::<_, std::convert::Infallible>(format!("{line}\n")), rx));
                }
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    (
        [("content-type", "application/x-ndjson")],
        axum::body::Body::from_stream(stream),
    )
        .into_response()
}

async fn health(State(agent): State<Arc<Agent>>) -> Json<Value> {
    let n = agent.tasks().len();
    Json(json!({"status": "ok", "tasks": n}))
}

/// `/metrics` in the Prometheus text format.
async fn metrics(State(agent): State<Arc<Agent>>) -> Response {
    use std::fmt::Write as _;
    use std::sync::atomic::Ordering::Relaxed;
    let mut by_status: std::collections::BTreeMap<&'static str, u64> =
        ["NONE", "PULLED", "CREATED", "RUNNING", "STOPPED"]
            .into_iter()
            .map(|s| (s, 0))
            .collect();
    for e in agent.tasks().values() {
        *by_status
            .entry(e.snapshot.borrow().known().as_str())
            .or_default() += 1;
    }
    let m = &agent.metrics;
    let em = &agent.engine_metrics;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP berth_tasks Tasks the agent tracks, by known status.\n# TYPE berth_tasks gauge"
    );
    for (status, n) in by_status {
        let _ = writeln!(out, "berth_tasks{{status=\"{status}\"}} {n}");
    }
    let counters = [
        (
            "berth_tasks_submitted_total",
            "Tasks submitted through the API.",
            m.tasks_submitted.load(Relaxed),
        ),
        (
            "berth_container_transitions_total",
            "Container status changes.",
            m.container_transitions.load(Relaxed),
        ),
        (
            "berth_pulls_total",
            "Image pulls finished (done or failed).",
            m.pulls.load(Relaxed),
        ),
        (
            "berth_pull_failures_total",
            "Image pulls that failed.",
            m.pull_failures.load(Relaxed),
        ),
        (
            "berth_pull_duration_milliseconds_total",
            "Time spent in finished pulls.",
            m.pull_millis.load(Relaxed),
        ),
        (
            "berth_docker_errors_total",
            "Docker calls that failed.",
            em.docker_errors.load(Relaxed),
        ),
        (
            "berth_event_stream_reconnects_total",
            "Docker event streams re-subscribed after breaking.",
            em.event_stream_reconnects.load(Relaxed),
        ),
    ];
    for (name, help, v) in counters {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
        );
    }
    ([("content-type", "text/plain; version=0.0.4")], out).into_response()
}

/// Start the metadata endpoint with `/metrics` beside it. When the Docker bridge's address cannot
/// be used (no bridge network), bridge-mode containers are given the main listener's address and a
/// warning says so.
async fn start_metadata(
    agent: &Arc<Agent>,
    args: &Args,
) -> anyhow::Result<berth_api::metadata::MetadataServer> {
    use berth_api::metadata::{Listen, MetadataConfig, MetadataServer, TaskInfo};
    let config = MetadataConfig {
        task: TaskInfo {
            cluster: args.cluster.clone(),
            ..TaskInfo::default()
        },
        rate_limit: args.metadata_rate_limit,
        ..MetadataConfig::default()
    };
    let extra = || {
        Router::new()
            .route("/metrics", get(metrics))
            .with_state(agent.clone())
    };
    let listen = |bridge| Listen {
        addr: args.metadata_addr,
        advertise: args.metadata_advertise.clone(),
        bridge,
    };
    let server = match MetadataServer::start_with_routes(
        agent.rt.clone(),
        agent.directory.clone(),
        config.clone(),
        listen(true),
        extra(),
    )
    .await
    {
        Ok(s) => s,
        Err(e @ berth_api::metadata::MetadataError::Listen { .. }) => {
            return Err(e).context("starting the metadata endpoint");
        }
        Err(e) => {
            tracing::warn!(error = %e, "no listener on the Docker bridge; bridge-mode containers cannot reach the metadata endpoint (use --metadata-advertise)");
            MetadataServer::start_with_routes(
                agent.rt.clone(),
                agent.directory.clone(),
                config,
                listen(false),
                extra(),
            )
            .await
            .context("starting the metadata endpoint")?
        }
    };
    tracing::info!(endpoint = ?server.endpoint(), "task metadata endpoint listening");
    let _ = agent.metadata.set(server.endpoint().clone());
    Ok(server)
}

fn router(agent: Arc<Agent>) -> Router {
    Router::new()
        .route("/v1/tasks", post(submit).get(list))
        .route("/v1/tasks/{id}", get(inspect).delete(remove))
        .route("/v1/tasks/{id}/stop", post(stop))
        .route("/v1/events", get(events))
        .route("/v1/health", get(health))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .with_state(agent)
}

/// Bind the control socket: parent directory created, a stale socket (nobody answering) replaced,
/// mode 0600.
async fn bind(path: &std::path::Path) -> anyhow::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    if path.exists() {
        if tokio::net::UnixStream::connect(path).await.is_ok() {
            anyhow::bail!("another agent answers on {}", path.display());
        }
        std::fs::remove_file(path).with_context(|| format!("removing stale {}", path.display()))?;
    }
    let listener = tokio::net::UnixListener::bind(path)
        .with_context(|| format!("binding {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("setting the mode of {}", path.display()))?;
    Ok(listener)
}

impl Args {
    /// The cleanup wait: the flag or BERTH_CLEANUP_WAIT (via clap), else ECS's
    /// ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION, else 3 h (ECS's default).
    fn cleanup_wait(&self) -> anyhow::Result<Duration> {
        if let Some(d) = self.cleanup_wait {
            return Ok(d);
        }
        match std::env::var("ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION") {
            Ok(v) if !v.is_empty() => humantime::parse_duration(&v)
                .with_context(|| format!("ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION={v}")),
            _ => Ok(Duration::from_secs(3 * 3600)),
        }
    }
}

/// The effective configuration, as TOML with the long option names as keys.
fn effective_config(args: &Args) -> anyhow::Result<String> {
    let data_dir = args
        .data_dir
        .clone()
        .unwrap_or_else(crate::cmd_run::default_data_dir);
    let mut t = toml::Table::new();
    let mut put = |k: &str, v: toml::Value| {
        t.insert(k.to_string(), v);
    };
    put("data-dir", data_dir.display().to_string().into());
    put("api-socket", args.api_socket.display().to_string().into());
    if let Some(h) = &args.docker_host {
        put("docker-host", h.clone().into());
    }
    put(
        "cleanup-wait",
        humantime::format_duration(args.cleanup_wait()?)
            .to_string()
            .into(),
    );
    put("volume-plugin", args.volume_plugin.clone().into());
    put("metadata-addr", args.metadata_addr.to_string().into());
    if let Some(a) = &args.metadata_advertise {
        put("metadata-advertise", a.clone().into());
    }
    put("cluster", args.cluster.clone().into());
    put(
        "metadata-rate-limit",
        args.metadata_rate_limit.to_string().into(),
    );
    let fmt = match args.log_format {
        LogFormat::Text => "text",
        LogFormat::Json => "json",
    };
    put("log-format", fmt.into());
    put("pull-behavior", args.pull.behavior()?.as_str().into());
    put("pull-dependent-upfront", args.pull.upfront().into());
    put(
        "pull-timeout",
        humantime::format_duration(args.pull.pull_timeout)
            .to_string()
            .into(),
    );
    put(
        "pull-inactivity-timeout",
        humantime::format_duration(args.pull.pull_inactivity_timeout)
            .to_string()
            .into(),
    );
    put("pull-attempts", i64::from(args.pull.pull_attempts).into());
    Ok(toml::to_string(&t)?)
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.print_config {
        print!("{}", effective_config(&args)?);
        return Ok(ExitCode::SUCCESS);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(run_async(args))
}

async fn run_async(args: Args) -> anyhow::Result<ExitCode> {
    let data_dir = args
        .data_dir
        .clone()
        .unwrap_or_else(crate::cmd_run::default_data_dir);
    std::fs::create_dir_all(data_dir.join("tasks"))
        .with_context(|| format!("creating {}", data_dir.display()))?;
    let data_dir = data_dir.canonicalize().unwrap_or(data_dir);
    let _lock = match DataDirLock::acquire(&data_dir) {
        Ok(lock) => lock,
        Err(LockError::Held(path)) => {
            eprintln!(
                "berth agent: {} is held by another agent, `berth gc` or a running `berth run`",
                path.display()
            );
            return Ok(ExitCode::from(75));
        }
        Err(LockError::Other(e)) => return Err(e),
    };
    let cleanup_wait = args.cleanup_wait()?;
    let store = Arc::new(Store::open(&data_dir).context("opening the state store")?);
    let docker = berth_docker::connect(args.docker_host.as_deref())
        .await
        .context("connecting to the Docker Engine")?;
    let rt = Arc::new(args.pull.configure(DockerRuntime::new(docker)));
    let (events, _) = broadcast::channel(4096);
    let agent = Arc::new(Agent {
        rt,
        store: store.clone(),
        data_dir: data_dir.clone(),
        cleanup_wait,
        options: Options {
            pull_upfront: args.pull.upfront(),
        },
        pull_behavior: args.pull.behavior()?,
        volume_plugin: args.volume_plugin.clone(),
        tasks: Mutex::new(HashMap::new()),
        events,
        engine_metrics: Arc::new(berth_engine::EngineMetrics::default()),
        metrics: Arc::new(Metrics::default()),
        directory: Arc::new(berth_api::metadata::TaskDirectory::new()),
        metadata: std::sync::OnceLock::new(),
    });
    tracing::info!(
        config = %args.config.display(),
        data_dir = %data_dir.display(),
        api_socket = %args.api_socket.display(),
        cleanup_wait = %humantime::format_duration(cleanup_wait),
        pull_behavior = %agent.pull_behavior,
        pull_upfront = agent.options.pull_upfront,
        metadata_addr = %args.metadata_addr,
        volume_plugin = %agent.volume_plugin,
        "berth agent starting"
    );

    // The metadata endpoint (and /metrics) listen before any task starts, so every container
    // created from now on is given its address.
    let _metadata_server = start_metadata(&agent, &args).await?;

    // Resume every task the store knows: actors adopt their containers from Docker first.
    let records = store.tasks().context("reading the state store")?;
    for rec in records {
        tracing::info!(task = %rec.state.id, known = %rec.state.known(), "resuming task");
        agent.spawn(rec.state, true);
    }

    // Containers of this data directory that no stored task owns are reported, never touched.
    let known: std::collections::BTreeSet<String> = agent.tasks().keys().cloned().collect();
    match agent.rt.list_managed().await {
        Ok(list) => {
            let ours = data_dir.display().to_string();
            for c in list {
                if c.data_dir.as_deref() == Some(ours.as_str()) && !known.contains(&c.task) {
                    tracing::warn!(container = %c.name, task = %c.task, "orphan container: no task in the store owns it (`berth gc --containers` removes it)");
                }
            }
        }
        Err(e) => tracing::warn!(error = %e, "cannot list berth's containers"),
    }
    let listener = bind(&args.api_socket).await?;
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    // Every state change is already in the store: on SIGTERM the agent just stops serving and
    // exits; containers keep running and the next agent adopts them.
    tokio::select! {
        r = axum::serve(listener, router(agent)) => r.context("serving the control API")?,
        _ = sigterm.recv() => tracing::info!("SIGTERM: berth agent stopping; running tasks keep running"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: berth agent stopping; running tasks keep running"),
    }
    let _ = std::fs::remove_file(&args.api_socket);
    Ok(ExitCode::SUCCESS)
}
