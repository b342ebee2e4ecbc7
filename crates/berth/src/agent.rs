//! `berth agent`: a long-running agent that accepts tasks over a control API on a Unix socket,
//! keeps every task in the state store (`DATA_DIR/berth.redb`), picks up where it was after a
//! restart (adopting its containers from Docker, creating nothing twice), and cleans tasks up after
//! `--cleanup-wait`.
//!
//! One actor per task (the engine's `run_task`). This module owns the agent's arguments, the table
//! of running tasks (a std mutex never held across an `.await`), accepting a task (`Agent::accept`:
//! the one path for a control API submit and a cluster assignment), spawning each task's actor, its
//! report fan-out and its cleanup (all through one `TaskTracker`), the cleanup timers, and start-up
//! wiring (store, Docker, metadata endpoint, introspection API, resuming stored tasks, the control
//! socket). Elsewhere: the control API's routes, handlers and types in `berth_api::control`
//! ([`control`] is this agent's side of its `ControlPlane` trait; [`introspection`] its option and
//! `Version` for `berth_api::introspection`), configuration layering in `crate::config`, `/metrics` in
//! `crate::metrics`. [`reserve`]: when the state store released its reserve on a full data directory, the
//! task whose scratch directory holds the most is stopped and the reserve filled again later.
//! SIGTERM stops accepting work and exits; running containers keep running (a restarted agent
//! adopts them).
//!
//! With `--etcd` and `--node` the agent is a node of a berth cluster ([`node`]): berth-cluster's
//! node loop feeds it the tasks assigned to the node and reports their statuses; everything above
//! stays the same, and submits through the control API are refused.

mod control;
pub(crate) mod introspection;
#[cfg(feature = "cluster")]
pub(crate) mod node;
mod reserve;

use crate::cmd_run::PullArgs;
use crate::config::Key;
use crate::datadir::{DataDirLock, LockError};
use crate::metrics::Timed;
use anyhow::Context as _;
use berth_docker::DockerRuntime;
use berth_engine::report::{Report, now_ms};
use berth_engine::{Command, Options, PullBehavior, RunConfig, TaskState};
use berth_store::{Store, TaskRecord};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{Notify, broadcast, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The default control socket.
pub const DEFAULT_API_SOCKET: &str = "/run/berth/berth.sock";

#[derive(clap::Args, Debug)]
#[cfg_attr(
    feature = "cluster",
    command(
        after_help = "Examples:\n  berth agent\n  berth agent --data-dir /var/lib/berth --cleanup-wait 10m\n  berth agent --etcd http://10.0.0.1:2379,http://10.0.0.2:2379 --node host-1 --node-attribute zone=a\n\nThen: berth submit task.json; berth ps; berth stop TASK; berth rm TASK (as a cluster node: berth cluster submit|service …).\n\nConfiguration: every option can be set in the TOML file (keys are the long option names,\ne.g. cleanup-wait = \"10m\"); environment variables override the file, and flags override both."
    )
)]
#[cfg_attr(
    not(feature = "cluster"),
    command(
        after_help = "Examples:\n  berth agent\n  berth agent --data-dir /var/lib/berth --cleanup-wait 10m\n\nThen: berth submit task.json; berth ps; berth stop TASK; berth rm TASK.\n\nConfiguration: every option can be set in the TOML file (keys are the long option names,\ne.g. cleanup-wait = \"10m\"); environment variables override the file, and flags override both.\n(This berth was built without the `cluster` feature: no --etcd/--node.)"
    )
)]
pub struct Args {
    /// The configuration file read (the global `--config`, see `crate::config`), for the log.
    #[arg(skip)]
    pub config: PathBuf,

    /// Print the effective configuration (file, then environment, then flags) as TOML, each value
    /// followed by a comment naming the layer that set it, and exit.
    #[arg(long, add = Key::command_line_only())]
    pub print_config: bool,

    /// Where the agent keeps its state store and task directories.
    /// Default: /var/lib/berth as root, else $XDG_STATE_HOME/berth.
    #[arg(
        long,
        env = "BERTH_DATA_DIR",
        value_name = "DIR",
        add = Key::new().shown(crate::cmd_run::shown_data_dir)
    )]
    pub data_dir: Option<PathBuf>,

    /// The control API's Unix socket (mode 0600: whoever can write it controls the agent).
    #[arg(long, env = "BERTH_API_SOCKET", value_name = "PATH", default_value = DEFAULT_API_SOCKET)]
    pub api_socket: PathBuf,

    /// The Docker Engine to use. Default: DOCKER_HOST, else the local socket.
    #[arg(long, value_name = "URI", add = Key::new().env(&["DOCKER_HOST"]))]
    pub docker_host: Option<String>,

    /// How long a stopped task's containers and directory are kept (to read logs and exit codes)
    /// before cleanup, e.g. `3h`, `10m`, `0s`. Environment: BERTH_CLEANUP_WAIT, or ECS's
    /// ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION.
    #[arg(
        long,
        env = "BERTH_CLEANUP_WAIT",
        value_name = "DURATION",
        value_parser = humantime::parse_duration,
        add = Key::new().env(&[ECS_CLEANUP_WAIT]).shown(|r| {
            Ok(Some(crate::config::duration(cleanup_wait(r.value().copied())?)))
        })
    )]
    pub cleanup_wait: Option<Duration>,

    /// How long a write to the state store may take before the agent calls its disk hung: then
    /// `/v1/health` says degraded with why, and submits and stops are answered 503 instead of
    /// waiting for the disk (a submit's write may still complete later: retry it with the same
    /// `--client-token` to learn its task's id rather than run it twice).
    #[arg(
        long,
        env = "BERTH_STORE_WRITE_TIMEOUT",
        value_name = "DURATION",
        default_value = "5s",
        value_parser = crate::docker_timeouts::above_zero
    )]
    pub store_write_timeout: Duration,

    /// The Docker volume driver name of berth's volume plugin (for efsVolumeConfiguration).
    #[arg(long, value_name = "DRIVER", env = "BERTH_VOLUME_PLUGIN", default_value = berth_engine::spec::DEFAULT_VOLUME_PLUGIN)]
    pub volume_plugin: String,

    /// The HTTP listener of the task metadata endpoint (ECS v4/v3) and `/metrics` (Prometheus);
    /// loopback by default. Bridge-mode containers are given the Docker bridge's gateway address
    /// on the same port, where a second listener answers with the metadata only, never /metrics
    /// (see docs/metadata.md). On all addresses (0.0.0.0), containers reach /metrics here too.
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

    /// The agent introspection API (ECS's port 51678: `/v1/metadata`, `/v1/tasks`), which
    /// monitoring agents read to map Docker containers to tasks; it lists every task of this host,
    /// so loopback by default (host-mode containers reach it there). `off` serves none.
    #[arg(
        long,
        env = "BERTH_INTROSPECTION_ADDR",
        value_name = "ADDR|off",
        default_value = introspection::DEFAULT_ADDR,
        add = Key::new().shown(crate::config::display::<introspection::IntrospectionAddr>)
    )]
    pub introspection_addr: introspection::IntrospectionAddr,

    #[command(flatten)]
    pub identity: crate::identity::IdentityArgs,

    #[command(flatten)]
    pub instance_tags: crate::tags::InstanceTagArgs,

    /// Metadata requests allowed per container: N per second with bursts of BURST (ECS: 40/60);
    /// 0 = no limit.
    #[arg(
        long,
        value_name = "N/BURST",
        default_value = "40/60",
        add = Key::new().shown(crate::config::display::<berth_api::metadata::RateLimit>)
    )]
    pub metadata_rate_limit: berth_api::metadata::RateLimit,

    /// Log format on standard error: `text` for people, `json` for log collectors.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    #[command(flatten)]
    pub pull: PullArgs,

    #[command(flatten)]
    pub docker_timeouts: crate::docker_timeouts::DockerTimeoutArgs,

    /// How long the Docker Engine may go without answering (gone, stalled or refusing) before
    /// the health endpoint says degraded, with why, e.g. `60s`, `5m`. The agent pings the Engine
    /// every quarter of this (at most every 10 s). Environment: BERTH_ENGINE_UNHEALTHY_AFTER.
    #[arg(
        long,
        env = "BERTH_ENGINE_UNHEALTHY_AFTER",
        value_name = "DURATION",
        default_value = "60s",
        value_parser = crate::docker_timeouts::above_zero
    )]
    pub engine_unhealthy_after: Duration,

    #[command(flatten)]
    pub logs: crate::log_policy::LogArgs,

    #[command(flatten)]
    pub secrets: crate::secrets::SecretArgs,

    #[command(flatten)]
    pub roles: crate::task_roles::TaskRoleArgs,

    #[command(flatten)]
    pub aws: crate::aws_access::AwsArgs,

    #[command(flatten)]
    pub registry: crate::registry_auth::RegistryAuthArgs,

    #[command(flatten)]
    pub container_metadata: crate::container_metadata::ContainerMetadataArgs,

    #[command(flatten)]
    pub image_gc: crate::image_gc::ImageGcArgs,

    #[command(flatten)]
    pub task_policy: crate::task_policy::TaskPolicyArgs,

    #[cfg(feature = "cluster")]
    #[command(flatten)]
    pub node: node::NodeArgs,
}

/// ECS's name for the cleanup wait (BERTH_CLEANUP_WAIT is clap's).
const ECS_CLEANUP_WAIT: &str = "ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION";

/// The cleanup wait: `flag` (the flag, the file or BERTH_CLEANUP_WAIT, via clap), else ECS's
/// ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION, else 3 h (ECS's default).
fn cleanup_wait(flag: Option<Duration>) -> anyhow::Result<Duration> {
    if let Some(d) = flag {
        return Ok(d);
    }
    match std::env::var(ECS_CLEANUP_WAIT) {
        Ok(v) if !v.is_empty() => {
            humantime::parse_duration(&v).with_context(|| format!("{ECS_CLEANUP_WAIT}={v}"))
        }
        _ => Ok(Duration::from_secs(3 * 3600)),
    }
}

impl Args {
    /// The cleanup wait (see [`cleanup_wait`]).
    pub fn cleanup_wait(&self) -> anyhow::Result<Duration> {
        cleanup_wait(self.cleanup_wait)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// How a task's actor starts.
enum Start {
    /// Submitted now: nothing exists in Docker yet.
    New,
    /// From the store after a restart: adopt its containers first, then send its id on the
    /// channel (the agent counts these to log when reconciliation is done).
    Resume(mpsc::UnboundedSender<String>),
}

struct Entry {
    snapshot: watch::Receiver<TaskState>,
    commands: mpsc::Sender<Command>,
    cleanup_now: Arc<Notify>,
}

/// The task a client token names.
#[derive(Debug, Clone)]
struct Token {
    task: String,
    /// Its state is durable and its actor spawned (false: the submit's save is still under way).
    accepted: bool,
}

struct Agent {
    rt: Arc<Timed<DockerRuntime>>,
    store: Arc<Store>,
    data_dir: PathBuf,
    cleanup_wait: Duration,
    options: Options,
    pull_behavior: PullBehavior,
    /// The operator's pause image (`--pause-image`), or berth's own.
    pause_image: Option<String>,
    /// Finds each pull's registry login (the chain of `--engine-auth-*` and `--docker-config`).
    registry_auth: Arc<berth_docker::AuthChain>,
    volume_plugin: String,
    /// The host's log drivers: a submitted definition is resolved with it before it is stored.
    log_policy: berth_model::logging::LogPolicy,
    /// Where secrets come from (`--secrets-dir`, `--secrets-from-env`).
    secrets: Arc<dyn berth_engine::secrets::SecretProvider>,
    environment_files_dir: Option<PathBuf>,
    /// `--environment-files-allow`.
    environment_files_allow: Vec<PathBuf>,
    /// What tasks may ask of this host (`--task-policy`, `--task-policy-allow`,
    /// ECS_DISABLE_PRIVILEGED): checked at submit, and when a cluster assignment is accepted.
    task_policy: berth_model::policy::HostPolicy,
    /// `--max-containers-per-task`.
    limits: berth_model::Limits,
    /// `--cluster`, `--region`, …: every ARN, FireLens's `ecs_cluster` field, the metadata.
    identity: berth_engine::Identity,
    /// `--container-metadata`: each container's metadata file, or None.
    container_metadata: Option<berth_engine::container_metadata::Settings>,
    tasks: Mutex<HashMap<String, Entry>>,
    /// Client token → the task submitted with it (`berth submit --client-token`), for every task
    /// the agent keeps and every submit whose save is still under way.
    client_tokens: Mutex<HashMap<String, Token>>,
    /// `--store-write-timeout`: a state store write running longer is a hung disk.
    store_write_timeout: Duration,
    events: broadcast::Sender<String>,
    engine_metrics: Arc<berth_engine::EngineMetrics>,
    metrics: Arc<crate::metrics::Metrics>,
    /// Tasks whose containers the metadata endpoint answers for.
    directory: Arc<berth_api::metadata::TaskDirectory>,
    /// Where containers reach the metadata endpoint (set once it listens).
    metadata: std::sync::OnceLock<berth_engine::spec::MetadataEndpoint>,
    /// Whether the credentials endpoint serves task roles, and whether it was on at all (set
    /// before any task starts).
    credentials: std::sync::OnceLock<(bool, bool)>,
    /// berth's AWS access (`--aws`), when it has it.
    aws: Option<crate::aws_access::AwsServices>,
    /// Where task and execution role credentials come from (STS with AWS access, else
    /// `--task-role-dir`), when anywhere.
    roles: Option<Arc<dyn berth_engine::roles::RoleSource>>,
    /// Every task the agent spawns (each task's report fan-out, its actor and its cleanup) goes
    /// through this tracker, so shutdown can close it and wait for them.
    tracker: TaskTracker,
    /// Whether the Docker Engine answers (fed by [`watch_engine`]; read by the health endpoint).
    engine_health: Arc<berth_engine::engine_health::EngineHealth>,
    /// Image cleanup (`crate::image_gc`): its leases are given to every actor.
    image_gc: Arc<crate::image_gc::ImageGc>,
    /// Cancelled on SIGTERM/SIGINT: actors stop acting (containers keep running, the store keeps
    /// their last state) and cleanup waits end, so the tracker drains.
    shutdown: CancellationToken,
    /// As a cluster node (`--etcd`, `--node`): its name, and what the node's status reporter
    /// waits on (bumped whenever a task's snapshot changes).
    cluster_node: Option<(String, watch::Sender<u64>)>,
}

/// Where a task the agent accepts comes from ([`Agent::accept`]).
pub(crate) enum Origin {
    /// `berth submit`, through the control API: stored through the store's grouped commit,
    /// waiting at most `--store-write-timeout`; with the client token it carried.
    Local { client_token: Option<String> },
    /// A cluster assignment: stored with its `fence` and the assignment watch's `revision` in
    /// one transaction (so after a crash the node has all three or none); with `stop`, stored
    /// already asked to stop with that reason (its containers are marked STOPPED with no Docker
    /// call: nothing runs); `labels` go on every container (the task's extra labels: the node
    /// and service).
    #[cfg(feature = "cluster")]
    Cluster {
        fence: i64,
        revision: i64,
        stop: Option<String>,
        labels: std::collections::BTreeMap<String, String>,
    },
}

/// Why a task was not accepted.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AcceptError {
    /// The store refused it: nothing was stored.
    #[error(transparent)]
    Store(#[from] berth_store::StoreError),
    /// Its save did not finish within `--store-write-timeout`: it may still be stored (and then
    /// run) when the disk answers.
    #[error(
        "task {task} was not saved within {} (--store-write-timeout): the data directory's disk does not answer; \
         the save goes on and the task starts if it completes: retry with the same --client-token to learn its id \
         without running it twice",
        humantime::format_duration(*timeout)
    )]
    Timeout {
        task: String,
        timeout: Duration,
        path: PathBuf,
    },
}

/// A cluster assignment's accept is answered as a store error (its save is not bounded).
impl From<AcceptError> for berth_store::StoreError {
    fn from(e: AcceptError) -> Self {
        match e {
            AcceptError::Store(e) => e,
            AcceptError::Timeout { ref path, .. } => berth_store::StoreError::Database {
                path: path.clone(),
                message: e.to_string(),
            },
        }
    }
}

/// A task the agent accepted: its id, and what the log policy said of its definition.
pub(crate) struct Accepted {
    pub(crate) id: String,
    pub(crate) warnings: Vec<String>,
}

impl Agent {
    /// Accepts a task, wherever it comes from: this host's log drivers applied to its definition
    /// (decided once: the stored definition is what Docker is given, so a restarted agent with
    /// another policy keeps what the task started with), its state built (every container's
    /// Docker name decided) and stored before anything is created, then its actor spawned. The
    /// error: the store refused it, and nothing was accepted.
    pub(crate) async fn accept(
        self: &Arc<Self>,
        mut definition: berth_model::TaskDefinition,
        id: String,
        origin: Origin,
    ) -> Result<Accepted, AcceptError> {
        let warnings = berth_model::logging::apply(&mut definition, &self.log_policy)
            .iter()
            .map(ToString::to_string)
            .collect();
        let mut state = TaskState::new(id, definition, now_ms());
        match origin {
            Origin::Local { client_token } => {
                state.client_token = client_token;
                self.accept_local(state, warnings).await
            }
            #[cfg(feature = "cluster")]
            Origin::Cluster {
                fence,
                revision,
                stop,
                labels,
            } => {
                state.extra_labels.extend(labels);
                if let Some(reason) = &stop {
                    state.request_stop(reason, berth_engine::StopKind::Requested);
                }
                // An assignment this node's policy refuses is stored stopped with the refusal as
                // its reason: nothing runs, and the cluster sees why (a local submit is refused
                // before it gets here).
                let refused = self.refusals(&state.definition);
                if !refused.is_empty() && stop.is_none() {
                    let reason =
                        format!("refused by this node's task policy: {}", refused.join("; "));
                    tracing::warn!(task = %state.id, "{reason}");
                    state.request_stop(&reason, berth_engine::StopKind::Failed);
                }
                let rec = TaskRecord {
                    state: state.clone(),
                    cleanup: Default::default(),
                };
                self.store.accept_cluster_task(&rec, fence, revision)?;
                let id = state.id.clone();
                self.metrics.task_submitted();
                self.spawn(state, Start::New);
                Ok(Accepted { id, warnings })
            }
        }
    }

    /// A submit's task: saved through the grouped commit, waiting at most
    /// `--store-write-timeout`. A save that takes longer is answered [`AcceptError::Timeout`]
    /// (the caller answers 503) but goes on: if it completes, the task is stored, and it runs as
    /// a restarted agent would run it; its client token, if any, then names it, so a retry with
    /// the same token is answered with its id instead of creating a second task.
    async fn accept_local(
        self: &Arc<Self>,
        state: TaskState,
        warnings: Vec<String>,
    ) -> Result<Accepted, AcceptError> {
        let saved = self.store.save_state_grouped(&state);
        let mut saved = Box::pin(saved);
        let outcome = tokio::time::timeout(self.store_write_timeout, &mut saved).await;
        let id = state.id.clone();
        let token = state.client_token.clone();
        match outcome {
            Ok(Ok(())) => {
                self.accepted(&state);
                self.metrics.task_submitted();
                self.spawn(state, Start::New);
                Ok(Accepted { id, warnings })
            }
            Ok(Err(e)) => {
                self.forget_token(token.as_deref(), &id);
                Err(AcceptError::Store(e))
            }
            Err(_) => {
                tracing::warn!(task = %id, timeout = %humantime::format_duration(self.store_write_timeout), "submit answered 503: its save did not finish in time; it is stored and started if the write completes later");
                let agent = self.clone();
                self.tracker.spawn(async move {
                    match saved.await {
                        Ok(()) => {
                            tracing::info!(task = %state.id, "a submit answered 503 was saved late: its task starts now");
                            agent.accepted(&state);
                            agent.metrics.task_submitted();
                            agent.spawn(state, Start::New);
                        }
                        Err(e) => {
                            tracing::warn!(task = %state.id, error = %e, "a submit answered 503 was not saved: nothing runs");
                            agent.forget_token(state.client_token.as_deref(), &state.id);
                        }
                    }
                });
                Err(AcceptError::Timeout {
                    task: id,
                    timeout: self.store_write_timeout,
                    path: self.store.path().to_path_buf(),
                })
            }
        }
    }

    /// The answer to a submit with `token`: Some(task) when the token names a task the agent
    /// keeps (or one whose save is under way), None when it names none (the token is then
    /// reserved for task `id`, the one about to be stored). A token is forgotten with its task's
    /// cleanup, or when its save failed.
    fn claim_token(&self, token: &str, id: &str) -> Option<Token> {
        let mut tokens = self.client_tokens();
        match tokens.get(token) {
            Some(t) => Some(t.clone()),
            None => {
                tokens.insert(
                    token.to_string(),
                    Token {
                        task: id.to_string(),
                        accepted: false,
                    },
                );
                None
            }
        }
    }

    fn accepted(&self, state: &TaskState) {
        if let Some(token) = &state.client_token {
            self.client_tokens().insert(
                token.clone(),
                Token {
                    task: state.id.clone(),
                    accepted: true,
                },
            );
        }
    }

    fn forget_token(&self, token: Option<&str>, id: &str) {
        if let Some(token) = token {
            let mut tokens = self.client_tokens();
            if tokens.get(token).is_some_and(|t| t.task == id) {
                tokens.remove(token);
            }
        }
    }

    fn client_tokens(&self) -> MutexGuard<'_, HashMap<String, Token>> {
        // Plain data, consistent between statements.
        self.client_tokens.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Why the store's disk does not answer: a write has been under way longer than
    /// `--store-write-timeout`.
    fn store_hung(&self) -> Option<String> {
        let busy = self.store.write_busy_for()?;
        (busy > self.store_write_timeout).then(|| {
            format!(
                "a write to the state store {} has not finished for {} (limit {}): the data directory's disk does not answer (hung, frozen or very slow); submits and stops are answered 503 until it does",
                self.store.path().display(),
                humantime::format_duration(Duration::from_secs(busy.as_secs())),
                humantime::format_duration(self.store_write_timeout)
            )
        })
    }

    /// Why this agent refuses a definition: more containers than `--max-containers-per-task`
    /// (a cluster's definitions were parsed elsewhere), every request of the host its task
    /// policy does not allow, and environment files outside the directories they may be read
    /// from; each with the field's path, the rule and how to allow it.
    pub(crate) fn refusals(&self, definition: &berth_model::TaskDefinition) -> Vec<String> {
        let mut out = Vec::new();
        let n = definition.container_definitions.len();
        if n > self.limits.max_containers {
            out.push(format!(
                "containerDefinitions: lists {n} containers; a task may have at most {} (ECS's limit is 10): split it into several tasks, or raise the limit with the agent's --max-containers-per-task",
                self.limits.max_containers
            ));
        }
        out.extend(crate::task_policy::refusals(&self.task_policy, definition));
        // Environment files outside what may be read are refused now; one that cannot be read
        // yet (not there) is judged again when the task starts.
        let rules = berth_engine::secrets::EnvironmentFileRules {
            s3_dir: self.environment_files_dir.as_deref(),
            allowed: &self.environment_files_allow,
            fetched: None,
        };
        for (i, c) in definition.container_definitions.iter().enumerate() {
            for (j, f) in c.environment_files.iter().enumerate() {
                use berth_engine::secrets::EnvironmentFileError as E;
                if let Err(e @ (E::Forbidden { .. } | E::NotAllowed { .. } | E::NotAFile { .. })) =
                    berth_engine::secrets::environment_file_path(&f.value, &rules)
                {
                    out.push(format!(
                        "containerDefinitions[{i}].environmentFiles[{j}].value: {e}"
                    ));
                }
            }
        }
        out
    }

    fn tasks(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        // The map is consistent between statements; a panic elsewhere cannot corrupt it.
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Start (or resume) a task's actor and its cleanup afterwards.
    fn spawn(self: &Arc<Self>, state: TaskState, start: Start) {
        let (resume, ready) = match start {
            Start::New => (false, None),
            Start::Resume(ready) => (true, Some(ready)),
        };
        let (cmd_tx, cmd_rx) = mpsc::channel(8);
        let (snap_tx, snap_rx) = watch::channel(state.clone());
        self.directory.register(snap_rx.clone());
        let (credentials, endpoint_on) = self.credentials.get().copied().unwrap_or((false, false));
        if !credentials
            && let Some(warning) = crate::task_roles::unserved_warning(&state, endpoint_on)
        {
            tracing::warn!("{warning}");
        }
        // A cluster node's status reporter hears of every change of the task's snapshot.
        let node_changes = self
            .cluster_node
            .as_ref()
            .map(|(_, changes)| (snap_rx.clone(), changes.clone()));
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
        if let Some((mut snapshots, changes)) = node_changes {
            self.tracker.spawn(async move {
                changes.send_modify(|n| *n += 1);
                while snapshots.changed().await.is_ok() {
                    changes.send_modify(|n| *n += 1);
                }
            });
        }
        let events = self.events.clone();
        let mut observer = self.metrics.observer(&state);
        self.tracker.spawn(async move {
            while let Some(r) = rep_rx.recv().await {
                observer.observe(&r);
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
            pause_image: self.pause_image.clone(),
            pull_record: self.store.clone(),
            registry_auth: Some(self.registry_auth.clone()),
            volume_plugin: self.volume_plugin.clone(),
            persist: Some(self.store.clone()),
            resume,
            metrics: self.engine_metrics.clone(),
            metadata: self.metadata.get().cloned(),
            cancel: self.shutdown.child_token(),
            ready,
            secrets: self.secrets.clone(),
            environment_files_dir: self.environment_files_dir.clone(),
            environment_files_allow: self.environment_files_allow.clone(),
            identity: self.identity.clone(),
            container_metadata: self.container_metadata.clone(),
            credentials,
            awslogs: berth_engine::awslogs::Settings {
                credentials_served: credentials,
                endpoint: self.aws.as_ref().and_then(|a| a.logs_endpoint()),
            },
            roles: self.roles.clone(),
            remote: self.aws.as_ref().map(|a| a.remote.clone()),
            images: Some(berth_engine::image_use::ImageTracking {
                leases: self.image_gc.leases().clone(),
                records: self.store.clone(),
            }),
            ..RunConfig::new(self.data_dir.clone())
        };
        let agent = self.clone();
        self.tracker.spawn(async move {
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
        let stored = self.store.get_task(&id).ok().flatten();
        let mut rec = stored.clone().unwrap_or_else(|| TaskRecord {
            state: state.clone(),
            cleanup: Default::default(),
        });
        rec.state = state.clone();
        let stopped_at = *rec.cleanup.stopped_at.get_or_insert_with(now_ms);
        // Written only when it changed: a restarted agent resuming a thousand tasks that wait for
        // their cleanup must not spend a thousand fsyncs rewriting what the store already holds.
        if stored.as_ref() != Some(&rec)
            && let Err(e) = self.store.save_task(&rec)
        {
            tracing::error!(task = %id, error = %e, "cannot save the task state");
        }
        let wait_ms = i64::try_from(self.cleanup_wait.as_millis()).unwrap_or(i64::MAX);
        let remaining = (stopped_at.saturating_add(wait_ms) - now_ms()).max(0);
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(u64::try_from(remaining).unwrap_or(0))) => {}
            () = now_please.notified() => {}
            // The next agent counts the wait from the stored `stopped_at`.
            () = self.shutdown.cancelled() => return,
        }
        let mut backoff = berth_engine::RetryPolicy::default().backoff();
        loop {
            let report = berth_engine::cleanup_task(&*self.rt, &state, &self.data_dir).await;
            if report.is_complete() {
                // Forgotten only once the store says so: a task the store still lists stays in
                // the table (ps, inspect) and its deletion is retried; a restarted agent finds it
                // STOPPED and cleans it up again (idempotent), never runs it.
                while let Err(e) = self.store.delete_task(&id) {
                    let delay = backoff.next_delay();
                    tracing::error!(task = %id, error = %e, retry_in = ?delay, "cannot forget the task");
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = self.shutdown.cancelled() => return,
                    }
                }
                self.tasks().remove(&id);
                self.client_tokens().retain(|_, t| t.task != id);
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
                () = self.shutdown.cancelled() => return,
            }
        }
    }

    /// Why the agent cannot work safely now: its state store cannot be written (an I/O error
    /// not yet repaired by a reopen), or some task's last save failed (that task is held, no
    /// Docker call, until a save succeeds). None when every save succeeds.
    fn degraded(&self) -> Option<berth_api::control::Degraded> {
        let held = self.engine_metrics.degraded();
        if let Some(hung) = self.store_hung() {
            return Some(berth_api::control::Degraded {
                reason: hung,
                held_tasks: held.into_iter().map(|(id, _)| id).collect(),
            });
        }
        let why = self
            .store
            .check()
            .or_else(|| held.first().map(|(_, e)| e.clone()))?;
        Some(berth_api::control::Degraded {
            reason: store_unwritable(&self.store.path().display().to_string(), &why),
            held_tasks: held.into_iter().map(|(id, _)| id).collect(),
        })
    }

    /// What the health endpoint reports: the store's degradation first, else the Engine's (it
    /// has not answered for longer than `--engine-unhealthy-after`), else `None`.
    fn health(&self) -> Option<berth_api::control::Degraded> {
        self.degraded().or_else(|| {
            self.engine_health
                .verdict(berth_engine::report::now_ms())
                .map(|reason| berth_api::control::Degraded {
                    reason,
                    held_tasks: Vec::new(),
                })
        })
    }

    /// Every tracked task as its actor last published it, in id order.
    fn snapshots(&self) -> Vec<TaskState> {
        let mut all: Vec<TaskState> = self
            .tasks()
            .values()
            .map(|e| e.snapshot.borrow().clone())
            .collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all
    }

    /// (task, image) for every container (pause containers excepted) of every task not yet
    /// STOPPED: image cleanup keeps these images.
    fn active_images(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for s in self.snapshots() {
            if s.known() == berth_engine::Status::Stopped {
                continue;
            }
            for i in 0..s.containers.len() {
                if !s.is_pause(i) {
                    out.push((s.id.clone(), s.def(i).image.clone()));
                }
            }
        }
        out
    }

    fn snapshot(&self, id: &str) -> Option<TaskState> {
        self.tasks().get(id).map(|e| e.snapshot.borrow().clone())
    }
}

/// Start the image cleanup's cycle and disk trigger (see `crate::image_gc`), unless turned off.
fn start_image_gc(agent: &Arc<Agent>) {
    let gc = agent.image_gc.clone();
    let c = gc.config();
    if !c.enabled {
        tracing::info!(
            "image cleanup is off (--disable-image-cleanup); `berth images prune` still removes candidates"
        );
        return;
    }
    let cycle = agent.pull_behavior != PullBehavior::PreferCached;
    if !cycle {
        tracing::info!(
            "pull behavior prefer-cached: the image cleanup cycle is off (as in ECS: the cached images are needed); the disk trigger stays"
        );
    }
    tracing::info!(
        interval = %humantime::format_duration(c.interval),
        minimum_age = %humantime::format_duration(Duration::from_millis(u64::try_from(c.settings.minimum_age_ms).unwrap_or(0))),
        per_cycle = c.settings.per_cycle,
        exclude = ?c.settings.exclude,
        untracked = c.settings.untracked,
        high = c.high,
        low = c.low,
        data_root = ?gc.disk_root(),
        "image cleanup on"
    );
    let tasks = {
        let agent = agent.clone();
        move || agent.active_images()
    };
    agent
        .tracker
        .spawn(gc.run(cycle, tasks, agent.shutdown.child_token()));
}

/// The reason a degraded agent gives: what fails and what to do.
fn store_unwritable(path: &str, error: &str) -> String {
    format!(
        "the state store {path} cannot be written ({error}); running tasks are held (no Docker call) and \
         submits refused until a save succeeds: free space in the data directory or make berth.redb \
         writable, berth retries by itself"
    )
}

/// Start the metadata endpoint with `/metrics` beside it on the main listener only (not on the
/// bridge listener that containers reach). When the Docker bridge's address cannot be used (no
/// bridge network), bridge-mode containers are given the main listener's address and a warning
/// says so.
async fn start_metadata(
    agent: &Arc<Agent>,
    args: &Args,
) -> anyhow::Result<berth_api::metadata::MetadataServer> {
    use berth_api::metadata::{Listen, MetadataConfig, MetadataServer, TaskInfo};
    let config = MetadataConfig {
        task: TaskInfo {
            identity: agent.identity.clone(),
            container_instance_tags: args.instance_tags.resolve()?,
            ..TaskInfo::default()
        },
        rate_limit: args.metadata_rate_limit,
        ..MetadataConfig::default()
    };
    if args.metadata_addr.ip().is_unspecified() {
        tracing::warn!(addr = %args.metadata_addr, "/metrics is served on --metadata-addr, which listens on all addresses: containers can read it");
    }
    let extra = || {
        let tasks = agent.clone();
        crate::metrics::router(agent.metrics.clone(), move || {
            tasks
                .tasks()
                .values()
                .map(|e| e.snapshot.borrow().known())
                .collect()
        })
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
        // The bridge's gateway unknown or not bindable: host, none (and awsvpc with an advertised
        // URL) tasks need no bridge listener, so the agent goes on without it.
        Err(e) => {
            // The gateway error already names --metadata-advertise.
            let hint = match e {
                berth_api::metadata::MetadataError::BridgeGateway(_) => "",
                _ => " (--metadata-advertise URL gives them an address they can reach)",
            };
            tracing::warn!(
                "{e}; going on without a listener on the Docker bridge: bridge-mode containers \
                 cannot reach the metadata endpoint{hint}; host and none tasks are not affected"
            );
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

/// Ping the Engine every [`EngineHealth::period`](berth_engine::engine_health::EngineHealth::period)
/// until shutdown, telling the agent's Engine health each answer or failure; a verdict that
/// changes is logged.
fn watch_engine(agent: &Arc<Agent>) {
    let agent = agent.clone();
    let health = agent.engine_health.clone();
    agent.tracker.clone().spawn(async move {
        let period = health.period();
        let mut degraded = false;
        loop {
            match agent
                .rt
                .inner()
                .ping(period.max(Duration::from_secs(1)))
                .await
            {
                Ok(()) => health.answered(berth_engine::report::now_ms()),
                Err(e) => health.failed(e),
            }
            match (health.verdict(berth_engine::report::now_ms()), degraded) {
                (Some(why), false) => {
                    tracing::error!(reason = %why, "degraded: the Docker Engine does not answer");
                    degraded = true;
                }
                (None, true) => {
                    tracing::info!("the Docker Engine answers again");
                    degraded = false;
                }
                _ => {}
            }
            tokio::select! {
                () = agent.shutdown.cancelled() => return,
                () = tokio::time::sleep(period) => {}
            }
        }
    });
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(run_async(args))
}

async fn run_async(args: Args) -> anyhow::Result<ExitCode> {
    let started = std::time::Instant::now();
    let data_dir = args
        .data_dir
        .clone()
        .unwrap_or_else(crate::cmd_run::default_data_dir);
    crate::datadir::prepare(&data_dir)?;
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
    let aws = args.aws.load().await?;
    let log_policy = args.logs.policy_with_aws(aws.is_some())?;
    let secrets = args.secrets.provider()?;
    let registry_auth = args.registry.chain_with_secrets(secrets.clone())?;
    let store = Arc::new(Store::open(&data_dir).context("opening the state store")?);
    crate::datadir::private_store(&data_dir, false)?;
    let mut identity = args.identity.identity(&data_dir)?;
    if let Some(aws) = &aws {
        aws.complete_account(&mut identity).await;
    }
    #[cfg(feature = "cluster")]
    let node_config = args.node.config(&identity)?;
    #[cfg(feature = "cluster")]
    if let Some((_, config)) = &node_config {
        store.claim_cluster_node(&config.name).context("--node")?;
    }
    #[cfg(feature = "cluster")]
    let cluster_node = node_config
        .as_ref()
        .map(|(_, c)| (c.name.clone(), watch::channel(0).0));
    // Built without the cluster: never a node.
    #[cfg(not(feature = "cluster"))]
    let cluster_node = None;
    // The error names the address tried and what to check.
    let docker = berth_docker::connect(args.docker_host.as_deref()).await?;
    let engine_metrics = Arc::new(berth_engine::EngineMetrics::default());
    let metrics = Arc::new(crate::metrics::Metrics::new(engine_metrics.clone()));
    let docker_rt = args.pull.configure(
        args.docker_timeouts.configure(
            DockerRuntime::new(docker)
                .with_engine(berth_docker::engine_address(args.docker_host.as_deref())),
        ),
    );
    crate::log_policy::warn_missing(&docker_rt, &log_policy).await;
    let rt = Arc::new(Timed::new(docker_rt, &metrics));
    let (events, _) = broadcast::channel(4096);
    let pull_behavior = args.pull.behavior()?;
    let mut pause_images = vec![berth_engine::pause_image::image_name()];
    pause_images.extend(args.pull.pause_image.clone());
    let gc_config = args.image_gc.config(&pause_images)?;
    let data_root = match rt.inner().data_root().await {
        Ok(root) => Some(PathBuf::from(root)),
        Err(e) => {
            tracing::warn!(error = %e, "cannot learn the Engine's data root: the disk-pressure image cleanup is off");
            None
        }
    };
    let mut image_gc = crate::image_gc::ImageGc::new(
        rt.clone(),
        store.clone(),
        berth_engine::image_use::ImageLeases::new(),
        gc_config,
    )
    .with_observer(Arc::new(crate::image_gc::AgentObserver {
        metrics: metrics.clone(),
        events: events.clone(),
    }));
    if let Some(root) = data_root {
        image_gc = image_gc.with_disk(Arc::new(crate::image_gc::DataRoot(root)));
    }
    let image_gc = Arc::new(image_gc);
    let is_cluster_node = cluster_node.is_some();
    let agent = Arc::new(Agent {
        rt,
        store: store.clone(),
        data_dir: data_dir.clone(),
        cleanup_wait,
        options: Options {
            pull_upfront: args.pull.upfront(),
            restart_period_override_ms: crate::test_env::restart_period_override()?,
        },
        pull_behavior,
        pause_image: args.pull.pause_image.clone(),
        registry_auth: Arc::new(registry_auth),
        volume_plugin: args.volume_plugin.clone(),
        log_policy,
        secrets,
        environment_files_dir: args.secrets.environment_files_dir.clone(),
        environment_files_allow: args.secrets.environment_files_allow(),
        task_policy: args.task_policy.policy(is_cluster_node),
        limits: berth_model::Limits {
            max_containers: args.task_policy.max_containers_per_task,
        },
        identity,
        container_metadata: args.container_metadata.settings(),
        tasks: Mutex::new(HashMap::new()),
        client_tokens: Mutex::new(HashMap::new()),
        store_write_timeout: args.store_write_timeout,
        events,
        engine_metrics,
        metrics,
        directory: Arc::new(berth_api::metadata::TaskDirectory::new()),
        metadata: std::sync::OnceLock::new(),
        credentials: std::sync::OnceLock::new(),
        roles: crate::task_roles::role_source(aws.as_ref().map(|a| a.roles.clone()), &args.roles),
        aws,
        image_gc,
        engine_health: Arc::new(berth_engine::engine_health::EngineHealth::new(
            args.engine_unhealthy_after,
            berth_engine::report::now_ms(),
        )),
        tracker: TaskTracker::new(),
        shutdown: CancellationToken::new(),
        cluster_node,
    });
    // The registries with engine auth data, never their logins.
    let engine_auth_registries = agent.registry_auth.engine_registries();
    let docker_config = args
        .registry
        .docker_config_path()
        .map_or_else(|| "none".to_string(), |p| p.display().to_string());
    tracing::info!(
        config = %args.config.display(),
        data_dir = %data_dir.display(),
        api_socket = %args.api_socket.display(),
        cleanup_wait = %humantime::format_duration(cleanup_wait),
        pull_behavior = %agent.pull_behavior,
        pull_upfront = agent.options.pull_upfront,
        docker_timeout = %humantime::format_duration(args.docker_timeouts.docker_timeout),
        docker_volume_timeout = %humantime::format_duration(args.docker_timeouts.docker_volume_timeout),
        store_write_timeout = %humantime::format_duration(args.store_write_timeout),
        metadata_addr = %args.metadata_addr,
        introspection_addr = %args.introspection_addr,
        volume_plugin = %agent.volume_plugin,
        available_log_drivers = %agent.log_policy.available().collect::<Vec<_>>().join(","),
        log_driver_fallback = %agent.log_policy.fallback(),
        secrets_dir = ?args.secrets.secrets_dir,
        secrets_from_env = args.secrets.secrets_from_env,
        environment_files_dir = ?args.secrets.environment_files_dir,
        environment_files_allow = ?args.secrets.environment_files_allow(),
        credentials_endpoint = %args.roles.credentials_endpoint,
        task_role_dir = ?args.roles.task_role_dir,
        engine_auth_registries = ?engine_auth_registries,
        docker_config = %docker_config,
        container_metadata = agent.container_metadata.is_some(),
        task_policy = agent.task_policy.mode.as_str(),
        task_policy_allow = ?agent.task_policy.grants.iter().map(|g| g.name()).chain(agent.task_policy.host_paths.iter().map(String::as_str)).collect::<Vec<_>>(),
        privileged_disabled = agent.task_policy.privileged_disabled,
        max_containers_per_task = agent.limits.max_containers,
        "berth agent starting"
    );

    start_image_gc(&agent);
    watch_engine(&agent);
    reserve::start(&agent);

    // The metadata endpoint (and /metrics) listen before any task starts, so every container
    // created from now on is given its address.
    let _metadata_server = start_metadata(&agent, &args).await?;
    // The credentials endpoint too (its address on lo, removed when this function returns).
    let credentials = args
        .roles
        .serve(
            agent.rt.clone(),
            agent.directory.clone(),
            agent.roles.clone(),
            berth_api::metadata::TaskInfo {
                identity: agent.identity.clone(),
                ..berth_api::metadata::TaskInfo::default()
            },
            &data_dir,
        )
        .await?;
    let _ = agent
        .credentials
        .set((credentials.is_some(), args.roles.endpoint()?.is_some()));
    // The introspection API lists the tasks as they are resumed and submitted.
    let introspection = introspection::start(&agent, args.introspection_addr).await;

    // Resume every task the store knows: actors adopt their containers from Docker first; once
    // every one has, reconciliation is done (logged with its duration, counted from the start).
    let records = store.tasks().context("reading the state store")?;
    let resumed = records.len();
    let (ready_tx, mut ready_rx) = mpsc::unbounded_channel::<String>();
    for rec in records {
        tracing::debug!(task = %rec.state.id, known = %rec.state.known(), "resuming task");
        if let Some(token) = &rec.state.client_token {
            agent.client_tokens().insert(
                token.clone(),
                Token {
                    task: rec.state.id.clone(),
                    accepted: true,
                },
            );
        }
        agent.spawn(rec.state, Start::Resume(ready_tx.clone()));
    }
    drop(ready_tx);
    agent.tracker.spawn(async move {
        let mut n = 0usize;
        while n < resumed && ready_rx.recv().await.is_some() {
            n += 1;
        }
        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        tracing::info!(tasks = n, of = resumed, elapsed_ms, "tasks reconciled");
    });

    // Containers of this data directory that no stored task owns are reported, never touched.
    let known: std::collections::BTreeSet<String> = agent.tasks().keys().cloned().collect();
    match agent.rt.inner().list_managed().await {
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
    // Said once when the node's name turns out to be another agent's: the agent stops, and
    // exits non-zero.
    #[cfg_attr(not(feature = "cluster"), allow(unused_variables))]
    let (refused_tx, mut refused_rx) = tokio::sync::oneshot::channel::<String>();
    #[cfg(feature = "cluster")]
    if let (Some((endpoints, config)), Some((name, changes))) =
        (node_config, agent.cluster_node.clone())
    {
        tracing::info!(node = %name, etcd = %endpoints.endpoints.join(","), tls = endpoints.cacert.is_some(), user = endpoints.user.as_deref().unwrap_or("-"), lease_ttl = ?config.lease_ttl, cpu = config.capacity.cpu, memory_mib = config.capacity.memory_mib, "joining the cluster as a node");
        let local = Arc::new(node::Node {
            agent: agent.clone(),
            name,
            changes,
        });
        let run = berth_cluster::node::run(endpoints, config, local, agent.shutdown.child_token());
        agent.tracker.spawn(async move {
            if let Err(refused) = run.await {
                let _ = refused_tx.send(format!(
                    "{refused}; give each agent its own --node (`berth cluster nodes` lists the registered ones)"
                ));
            }
        });
    }
    let (listener, socket) = berth_api::control::bind(&args.api_socket).await?;
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    // Every state change is already in the store: on SIGTERM the agent stops serving, lets each
    // actor finish the Docker calls it has in flight (bounded by the engine's shutdown grace) and
    // exits; containers keep running and the next agent adopts them.
    let mut refused = None;
    tokio::select! {
        r = berth_api::control::serve(listener, Arc::new(control::Control(agent.clone()))) => r.context("serving the control API")?,
        _ = sigterm.recv() => tracing::info!("SIGTERM: berth agent stopping; running tasks keep running"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: berth agent stopping; running tasks keep running"),
        Ok(why) = &mut refused_rx => {
            tracing::error!("{why}; berth agent stopping");
            refused = Some(why);
        }
    }
    socket.release();
    if let Some(server) = introspection {
        server.shutdown().await;
    }
    if let Some(endpoint) = credentials {
        endpoint.shutdown().await;
    }
    agent.shutdown.cancel();
    agent.tracker.close();
    let limit = berth_engine::actor::DEFAULT_SHUTDOWN_GRACE + Duration::from_secs(10);
    if tokio::time::timeout(limit, agent.tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            left = agent.tracker.len(),
            "shutdown: some tasks did not finish their Docker calls in time; the next agent adopts them"
        );
    }
    if let Some(why) = refused {
        anyhow::bail!("{why}");
    }
    Ok(ExitCode::SUCCESS)
}
