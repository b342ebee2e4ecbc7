//! `berth run FILE`: run one task in-process on the local Docker Engine until it has STOPPED, show
//! its story (live lines, then a summary table and a timeline; or JSON lines), clean up, and exit with
//! the task's exit status.
//!
//! Exit status: 65 invalid definition, 66 unreadable (nothing started); 125 when the task stopped before its
//! essential containers could run, or Docker cannot be reached; otherwise the exit code of the
//! essential container whose exit stopped the task. First SIGINT/SIGTERM stops the task cleanly, a
//! second one kills its containers.

use crate::config::Key;
use crate::output::{self, Output};
use anyhow::Context;
use berth_engine::report::{self, Report, now_ms};
use berth_engine::{Command, Options, PullBehavior, RunConfig, TaskState};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{mpsc, watch};

/// Exit status when the task could not run (ECS-style start failure) or Docker is unreachable.
pub const EXIT_NOT_RUN: u8 = 125;

#[derive(clap::Args, Debug)]
#[command(
    add = crate::config::CommandLineOnly::of::<MetadataArgs>(),
    after_help = "Examples:\n  berth run examples/web-app.json\n  berth run --output json --keep examples/minimal.json\n\nExit status: 65 invalid definition; 125 the task stopped before its essential containers ran\n(pull, create, start or dependency failure); otherwise the exit code of the essential container\nwhose exit stopped the task."
)]
pub struct Args {
    /// The task definition (ECS JSON, bare or as printed by `aws ecs describe-task-definition`);
    /// `-` reads standard input.
    #[arg(required_unless_present = "print_config")]
    pub file: Option<PathBuf>,

    /// Print the configuration this run would use (file, then environment, then flags: data-dir,
    /// docker-host, docker-timeout, docker-volume-timeout, volume-plugin, pull-*, pause-image, the log drivers, secrets-dir, secrets-from-env,
    /// environment-files-dir, registry logins except the engine auth data, container metadata) as
    /// TOML, each value followed by a comment naming the layer that set it, and exit; FILE is not
    /// needed.
    #[arg(long)]
    pub print_config: bool,

    /// Where berth keeps task directories (scratch volumes live in DATA_DIR/tasks/<task-id>/).
    /// Default: /var/lib/berth as root, else $XDG_STATE_HOME/berth.
    #[arg(long, env = "BERTH_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// The Docker Engine to use (unix:///var/run/docker.sock, tcp://host:port).
    /// Default: DOCKER_HOST, else the local socket.
    #[arg(long, value_name = "URI")]
    pub docker_host: Option<String>,

    /// Leave the containers and the task directory after the task stops (to read logs, inspect).
    #[arg(long)]
    pub keep: bool,

    /// How to show progress: `text` for people, `json` for one JSON object per line.
    #[arg(long, value_enum, default_value_t = Output::Text)]
    pub output: Output,

    #[command(flatten)]
    pub pull: PullArgs,

    #[command(flatten)]
    pub docker_timeouts: crate::docker_timeouts::DockerTimeoutArgs,

    #[command(flatten)]
    pub registry: crate::registry_auth::RegistryAuthArgs,

    /// The Docker volume driver name of berth's volume plugin (`berth volume-plugin`), used for
    /// the task's efsVolumeConfiguration volumes.
    #[arg(long, value_name = "DRIVER", env = "BERTH_VOLUME_PLUGIN", default_value = berth_engine::spec::DEFAULT_VOLUME_PLUGIN)]
    pub volume_plugin: String,

    #[command(flatten)]
    pub secrets: crate::secrets::SecretArgs,

    #[command(flatten)]
    pub metadata: MetadataArgs,

    #[command(flatten)]
    pub container_metadata: crate::container_metadata::ContainerMetadataArgs,

    #[command(flatten)]
    pub roles: crate::task_roles::TaskRoleArgs,

    #[command(flatten)]
    pub aws: crate::aws_access::AwsArgs,

    #[command(flatten)]
    pub logs: crate::log_policy::LogArgs,

    #[command(flatten)]
    pub tags: crate::tags::TaskTagArgs,
}

/// Task metadata endpoint options (see docs/metadata.md): `berth run` takes them from its command
/// line only (the agent's keys of the same names configure the agent's own endpoint).
#[derive(clap::Args, Debug, Clone)]
pub struct MetadataArgs {
    /// Serve the task metadata endpoint (ECS v4, and v3) on this address, e.g. 127.0.0.1:51679
    /// (port 0: any free port), and give every container ECS_CONTAINER_METADATA_URI_V4 and
    /// ECS_CONTAINER_METADATA_URI. Bridge-mode containers are given the Docker bridge's gateway
    /// address on the same port, where a second listener answers. Default: not served.
    #[arg(long, value_name = "ADDR")]
    pub metadata_addr: Option<std::net::SocketAddr>,

    /// The base URL containers are given instead of the listeners' addresses, e.g.
    /// http://10.0.0.5:51679 (then no bridge listener is started).
    #[arg(long, value_name = "URL", requires = "metadata_addr")]
    pub metadata_advertise: Option<String>,

    #[command(flatten)]
    pub identity: crate::identity::IdentityArgs,

    #[command(flatten)]
    pub instance_tags: crate::tags::InstanceTagArgs,

    /// Requests allowed per metadata id: N per second with bursts of BURST (ECS: 40/60); 0 = no limit.
    #[arg(long, value_name = "N/BURST", default_value = "40/60")]
    pub metadata_rate_limit: berth_api::metadata::RateLimit,
}

impl MetadataArgs {
    /// Start the endpoint for one task when `--metadata-addr` is given, serving the task's
    /// snapshots from `snapshots`.
    pub async fn serve<R: berth_engine::Runtime>(
        &self,
        rt: Arc<R>,
        state: &TaskState,
        snapshots: watch::Receiver<TaskState>,
        identity: &berth_engine::Identity,
    ) -> anyhow::Result<Option<berth_api::metadata::MetadataServer>> {
        use berth_api::metadata::{
            Listen, MetadataConfig, MetadataServer, TaskDirectory, TaskInfo,
        };
        let Some(addr) = self.metadata_addr else {
            return Ok(None);
        };
        let container_instance_tags = self.instance_tags.resolve()?;
        let directory = Arc::new(TaskDirectory::new());
        directory.register(snapshots);
        let config = MetadataConfig {
            task: TaskInfo {
                identity: identity.clone(),
                container_instance_tags,
                ..TaskInfo::default()
            },
            rate_limit: self.metadata_rate_limit,
            ..MetadataConfig::default()
        };
        let listen = Listen {
            addr,
            advertise: self.metadata_advertise.clone(),
            bridge: matches!(
                state.definition.network_mode,
                berth_model::NetworkMode::Bridge | berth_model::NetworkMode::Awsvpc
            ),
        };
        let server = MetadataServer::start(rt, directory, config, listen)
            .await
            .context("starting the task metadata endpoint")?;
        Ok(Some(server))
    }
}

/// What `--keep` left behind, naming only what exists: the task's containers if Docker created
/// any, its directory if it was created (task-scoped volumes, FireLens and container metadata
/// files make one). None when nothing was left.
fn kept_line(state: &TaskState, data_dir: &std::path::Path) -> Option<String> {
    let mut kept = Vec::new();
    if state.containers.iter().any(|c| c.docker_id.is_some()) {
        kept.push(format!("containers labelled berth.task={}", state.id));
    }
    let dir = berth_engine::spec::task_dir(data_dir, &state.id);
    if dir.exists() {
        kept.push(dir.display().to_string());
    }
    (!kept.is_empty()).then(|| format!("kept: {}", kept.join(" and ")))
}

/// Image pull options (shared by every command that runs tasks).
#[derive(clap::Args, Debug, Clone)]
pub struct PullArgs {
    /// When to pull images: `default` (always pull; on failure use the cached image if any),
    /// `always` (always pull; on failure the task stops), `once` (pull unless this agent pulled the
    /// image before; on failure the task stops), `prefer-cached` (pull only when not present
    /// locally). Environment: BERTH_IMAGE_PULL_BEHAVIOR, or ECS_IMAGE_PULL_BEHAVIOR.
    #[arg(
        long,
        value_name = "BEHAVIOR",
        env = "BERTH_IMAGE_PULL_BEHAVIOR",
        value_parser = parse_behavior,
        add = Key::new().env(&[ECS_PULL_BEHAVIOR]).shown(|r| {
            Ok(Some(r.args::<PullArgs>()?.behavior()?.as_str().into()))
        })
    )]
    pub pull_behavior: Option<PullBehavior>,

    /// Pull every image of the task at start, in parallel, instead of each once its dependencies
    /// allow its creation (`=false` turns off what the file turned on). Environment:
    /// BERTH_PULL_DEPENDENT_CONTAINERS_UPFRONT, or ECS_PULL_DEPENDENT_CONTAINERS_UPFRONT.
    #[arg(
        long,
        env = "BERTH_PULL_DEPENDENT_CONTAINERS_UPFRONT",
        value_name = "BOOL",
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        default_value_t = false,
        add = Key::new().env(&[ECS_PULL_UPFRONT]).shown(|r| {
            Ok(Some(r.args::<PullArgs>()?.upfront().into()))
        })
    )]
    pub pull_dependent_upfront: bool,

    /// Give up a pull (all retries included) after this long, e.g. `2h`, `30m`.
    #[arg(long, value_name = "DURATION", default_value = "2h", value_parser = humantime::parse_duration)]
    pub pull_timeout: std::time::Duration,

    /// Abort a pull attempt that shows no progress for this long, e.g. `1m`, `30s`.
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = humantime::parse_duration)]
    pub pull_inactivity_timeout: std::time::Duration,

    /// Pull attempts in all for failures that retrying can cure (registry unreachable); a missing
    /// repository or tag, or an authentication refusal, is never retried.
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub pull_attempts: u32,

    /// The image of the pause container that owns the namespaces of awsvpc tasks and of tasks with
    /// `pidMode`/`ipcMode: task`, obtained with the pull behaviour like any image. Default: berth's
    /// own `berth/pause:<tag>`, imported offline on first use (x86_64 only; see
    /// docs/operations.md). Its default command must wait until SIGTERM. Environment:
    /// BERTH_PAUSE_IMAGE.
    #[arg(long, value_name = "IMAGE", env = "BERTH_PAUSE_IMAGE")]
    pub pause_image: Option<String>,
}

/// ECS's names for the pull options (the BERTH_ ones are clap's).
const ECS_PULL_BEHAVIOR: &str = "ECS_IMAGE_PULL_BEHAVIOR";
const ECS_PULL_UPFRONT: &str = "ECS_PULL_DEPENDENT_CONTAINERS_UPFRONT";

fn parse_behavior(s: &str) -> Result<PullBehavior, String> {
    s.parse()
}

/// True for the values people write for "yes" in environment variables.
fn truthy(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "yes" | "on"
    )
}

impl PullArgs {
    /// The pull behaviour: the flag, else BERTH_IMAGE_PULL_BEHAVIOR (via clap), else the ECS name.
    pub fn behavior(&self) -> anyhow::Result<PullBehavior> {
        match (&self.pull_behavior, std::env::var(ECS_PULL_BEHAVIOR)) {
            (Some(b), _) => Ok(*b),
            (None, Ok(v)) if !v.is_empty() => v
                .parse()
                .map_err(|e| anyhow::anyhow!("{ECS_PULL_BEHAVIOR}: {e}")),
            _ => Ok(PullBehavior::Default),
        }
    }

    /// Pull up front: the flag or BERTH_ variable (via clap), else the ECS name.
    pub fn upfront(&self) -> bool {
        self.pull_dependent_upfront || std::env::var(ECS_PULL_UPFRONT).is_ok_and(|v| truthy(&v))
    }

    /// The Docker runtime's pull settings (its other limits unchanged).
    pub fn configure(&self, rt: berth_docker::DockerRuntime) -> berth_docker::DockerRuntime {
        let mut timeouts = rt.timeouts();
        timeouts.pull = self.pull_timeout;
        timeouts.pull_inactivity = self.pull_inactivity_timeout;
        rt.with_timeouts(timeouts)
            .with_pull_retry(berth_docker::PullRetry {
                attempts: self.pull_attempts,
                ..Default::default()
            })
    }
}

/// The default data directory: /var/lib/berth for root, else $XDG_STATE_HOME/berth.
pub fn default_data_dir() -> PathBuf {
    if rustix::process::geteuid().is_root() {
        return PathBuf::from("/var/lib/berth");
    }
    match std::env::var_os("XDG_STATE_HOME") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("berth"),
        _ => std::env::var_os("HOME")
            .map(|h| PathBuf::from(h).join(".local/state/berth"))
            .unwrap_or_else(|| PathBuf::from(".berth")),
    }
}

/// `--print-config`'s data-dir: the option, else the default.
pub fn shown_data_dir(r: &crate::config::Resolved<'_>) -> anyhow::Result<Option<toml::Value>> {
    let dir = r
        .value::<PathBuf>()
        .cloned()
        .unwrap_or_else(default_data_dir);
    Ok(Some(dir.display().to_string().into()))
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    // clap requires FILE unless --print-config is given (main prints the configuration).
    let Some(file) = &args.file else {
        anyhow::bail!("a task definition FILE is required");
    };
    // Checked before anything runs: malformed engine auth data is a configuration error.
    let secrets = args.secrets.provider()?;
    let auth = args.registry.chain_with_secrets(secrets.clone())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    // berth's AWS access decides which log drivers a definition may keep (awslogs).
    let aws = runtime.block_on(args.aws.load())?;
    let policy = args.logs.policy_with_aws(aws.is_some())?;
    let mut parsed = match crate::input::load(file, &policy) {
        Ok(parsed) => parsed,
        Err(code) => return Ok(code),
    };
    args.tags.apply(&mut parsed.definition)?;
    // A bad ECS_CONTAINER_INSTANCE_TAGS stops the run before anything starts.
    args.metadata.instance_tags.resolve()?;
    runtime.block_on(run_async(
        args,
        parsed.definition,
        auth,
        secrets,
        Resolved { aws, policy },
    ))
}

/// What `run` resolved before the definition was read.
struct Resolved {
    aws: Option<crate::aws_access::AwsServices>,
    policy: berth_model::logging::LogPolicy,
}

async fn run_async(
    args: Args,
    definition: berth_model::TaskDefinition,
    auth: berth_docker::AuthChain,
    secrets: Arc<dyn berth_engine::secrets::SecretProvider>,
    resolved: Resolved,
) -> anyhow::Result<ExitCode> {
    let Resolved { aws, policy } = resolved;
    let docker = match berth_docker::connect(args.docker_host.as_deref()).await {
        Ok(d) => d,
        Err(e) => {
            // The error names the address tried and what to check.
            eprintln!("berth: {e}");
            return Ok(ExitCode::from(EXIT_NOT_RUN));
        }
    };
    let rt = Arc::new(
        args.pull.configure(
            args.docker_timeouts.configure(
                berth_docker::DockerRuntime::new(docker)
                    .with_engine(berth_docker::engine_address(args.docker_host.as_deref())),
            ),
        ),
    );
    // The policy was checked before the definition was read; here only compared with the Engine.
    crate::log_policy::warn_missing(&rt, &policy).await;
    let data_dir = args.data_dir.clone().unwrap_or_else(default_data_dir);
    crate::datadir::prepare(&data_dir)?;
    // Absolute, so the containers' berth.data-dir label names it unambiguously.
    let data_dir = data_dir.canonicalize().unwrap_or(data_dir);
    let mut identity = args.metadata.identity.identity(&data_dir)?;
    if let Some(aws) = &aws {
        aws.complete_account(&mut identity).await;
    }
    // Shared: other runs may use this data directory too, but `berth gc` (exclusive) must not
    // remove this task's directory while it runs.
    let _lock = match crate::datadir::DataDirLock::acquire_shared(&data_dir) {
        Ok(lock) => lock,
        Err(crate::datadir::LockError::Held(path)) => {
            eprintln!(
                "berth: {} is held by `berth gc` or an agent; try again when it is done",
                path.display()
            );
            return Ok(ExitCode::from(EXIT_NOT_RUN));
        }
        Err(crate::datadir::LockError::Other(e)) => return Err(e),
    };
    let pull_record = berth_store::PulledImages::open(&data_dir)
        .context("opening the record of pulled images")?;

    let state = TaskState::new(berth_engine::new_task_id(), definition, now_ms());
    let task_id = state.id.clone();
    let (report_tx, mut report_rx) = mpsc::unbounded_channel::<Report>();
    let (cmd_tx, cmd_rx) = mpsc::channel::<Command>(8);
    let (snap_tx, snap_rx) = watch::channel(state.clone());
    // Task and execution roles: STS when berth has AWS access, else the local directory.
    let roles = crate::task_roles::role_source(aws.as_ref().map(|a| a.roles.clone()), &args.roles);
    // The credentials endpoint, for a task that names a role.
    let credentials = if state.definition.task_role_arn.is_some()
        || state.definition.execution_role_arn.is_some()
    {
        let directory = Arc::new(berth_api::metadata::TaskDirectory::new());
        directory.register(snap_rx.clone());
        let task = berth_api::metadata::TaskInfo {
            identity: identity.clone(),
            ..berth_api::metadata::TaskInfo::default()
        };
        args.roles
            .serve(rt.clone(), directory, roles.clone(), task, &data_dir)
            .await?
    } else {
        None
    };
    if credentials.is_none()
        && let Some(warning) =
            crate::task_roles::unserved_warning(&state, args.roles.endpoint()?.is_some())
    {
        eprintln!("berth: warning: {warning}");
    }
    let metadata = args
        .metadata
        .serve(rt.clone(), &state, snap_rx, &identity)
        .await?;
    let config = RunConfig {
        options: Options {
            pull_upfront: args.pull.upfront(),
            restart_period_override_ms: crate::test_env::restart_period_override()?,
        },
        pull_behavior: args.pull.behavior()?,
        pause_image: args.pull.pause_image.clone(),
        pull_record: Arc::new(pull_record),
        registry_auth: Some(Arc::new(auth)),
        volume_plugin: args.volume_plugin.clone(),
        metadata: metadata.as_ref().map(|m| m.endpoint().clone()),
        secrets,
        environment_files_dir: args.secrets.environment_files_dir.clone(),
        environment_files_allow: args.secrets.environment_files_allow(),
        identity: identity.clone(),
        container_metadata: args.container_metadata.settings(),
        credentials: credentials.is_some(),
        awslogs: berth_engine::awslogs::Settings {
            credentials_served: credentials.is_some(),
            endpoint: aws.as_ref().and_then(|a| a.logs_endpoint()),
        },
        roles,
        remote: aws.as_ref().map(|a| a.remote.clone()),
        ..RunConfig::new(data_dir.clone())
    };
    let out = args.output;
    if out == Output::Text {
        println!(
            "task {task_id} ({}:{}) — {} container(s)",
            state.definition.family,
            state.definition.revision,
            state.containers.len()
        );
    }
    // Which source serves each role, secret, environment file, ECR image and awslogs driver (on
    // standard error, so also beside JSON output).
    for line in crate::aws_access::sources(
        &state.definition,
        &*config.secrets,
        config.environment_files_dir.as_deref(),
        aws.as_ref(),
        config.roles.as_ref(),
        &args.roles,
    ) {
        eprintln!("berth: {line}");
    }
    let printer = tokio::spawn(async move {
        let mut printer = output::Printer::new(out);
        while let Some(r) = report_rx.recv().await {
            printer.print(&r);
        }
    });
    let actor = tokio::spawn(berth_engine::run_task(
        rt.clone(),
        state,
        config,
        report_tx,
        cmd_rx,
        snap_tx,
    ));

    // Signals: the first asks for a clean stop, the second kills.
    let mut sigint = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut sigterm = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let signals = tokio::spawn(async move {
        let mut count = 0;
        loop {
            let name = tokio::select! {
                _ = sigint.recv() => "SIGINT",
                _ = sigterm.recv() => "SIGTERM",
            };
            count += 1;
            let cmd = if count == 1 {
                eprintln!("berth: {name}: stopping the task (again to kill)");
                Command::Stop {
                    reason: format!("stopped by user ({name})"),
                }
            } else {
                eprintln!("berth: {name}: killing the task's containers");
                Command::Kill
            };
            if cmd_tx.send(cmd).await.is_err() {
                break;
            }
        }
    });

    let final_state = actor.await.context("the task actor failed")?;
    signals.abort();
    if let Some(server) = metadata {
        server.shutdown().await;
    }
    if let Some(endpoint) = credentials {
        endpoint.shutdown().await;
    }
    let _ = printer.await;

    let code = report::task_exit_code(&final_state);
    output::print_summary(out, &final_state, now_ms());

    if !args.keep {
        let cleanup = berth_engine::cleanup_task(&*rt, &final_state, &data_dir).await;
        for r in &cleanup.refused {
            match r {
                // berth-fs refused the path itself: nothing was touched.
                berth_engine::Refusal::Directory(e) => eprintln!("berth: cleanup: {e}"),
                r => eprintln!("berth: cleanup: refused: {r}"),
            }
        }
        if cleanup.directory.as_ref().is_some_and(|d| !d.is_removed()) {
            eprintln!(
                "berth: cleanup: kept {} (`berth gc` retries)",
                berth_engine::spec::task_dir(&data_dir, &task_id).display()
            );
        }
    } else if out == Output::Text
        && let Some(kept) = kept_line(&final_state, &data_dir)
    {
        println!("{kept}");
    }
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(EXIT_NOT_RUN)))
}
