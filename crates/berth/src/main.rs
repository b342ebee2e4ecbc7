//! The `berth` binary: command line, configuration, wiring and signals. The only crate that uses
//! `anyhow`; every subcommand lives in its own module and returns the process exit code.

mod agent;
mod aws_access;
mod client;
#[cfg(feature = "cluster")]
mod cmd_cluster;
#[cfg(feature = "cluster")]
mod cmd_cluster_service;
#[cfg(feature = "cluster")]
mod cmd_controller;
mod cmd_gc;
mod cmd_run;
mod cmd_validate;
mod cmd_volume_plugin;
mod config;
mod container_metadata;
mod datadir;
mod docker_timeouts;
#[cfg(feature = "cluster")]
mod etcd_args;
mod identity;
mod image_gc;
mod input;
mod link_local;
mod log_policy;
mod metrics;
mod output;
mod registry_auth;
mod secrets;
mod tags;
mod task_policy;
mod task_roles;
mod test_env;

use clap::{CommandFactory, FromArgMatches as _, Parser, Subcommand};
use std::process::ExitCode;

/// berth runs tasks — groups of containers described by an ECS-style task definition — on the local
/// Docker Engine, in dependency order, and cleans up after them without ever deleting data behind a
/// mount.
#[derive(Parser, Debug)]
#[command(name = "berth", version, about, long_about = None, propagate_version = true, args_override_self = true)]
#[command(
    after_help = "Examples:\n  berth run examples/web-app.json\n  berth validate examples/web-app.json\n  berth validate examples/web-app.json --graph text\n  berth completions bash > /etc/bash_completion.d/berth\n\nConfiguration: every subcommand reads the TOML file --config (default /etc/berth/berth.toml)\nand takes the keys that apply to it; environment variables override the file, flags override\nboth (a switch takes --switch=false). `berth agent|run|gc --print-config` prints what results\nand where each value came from. See docs/agent.md."
)]
struct Cli {
    /// A TOML file of options, keys the agent's long option names (e.g. cleanup-wait = "10m").
    /// Every subcommand takes the keys that apply to it: the agent all of them; `run` the
    /// task-running keys it shares with the agent (data-dir, docker-host, the Docker call limits,
    /// volume-plugin, the pull-* keys, pause-image, the log driver, secret, registry login and
    /// container metadata keys; `berth run --print-config` lists them); `validate` the log driver keys
    /// (available-log-drivers, log-driver-fallback); `gc` data-dir and docker-host; the client
    /// commands api-socket (as --agent), `logs` also docker-host; `cluster` and `controller` etcd;
    /// others none. Keys that do not apply are ignored; an unknown key is an error (exit 78).
    /// Missing is fine at the default path; a file given explicitly must exist.
    #[arg(long, global = true, value_name = "FILE", default_value = config::DEFAULT_CONFIG)]
    config: std::path::PathBuf,

    #[command(subcommand)]
    command: Command,
}

// One value, parsed once at start-up: its variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
enum Command {
    /// Run a task on the local Docker Engine until it stops, then clean up (see `berth run --help`).
    Run(cmd_run::Args),
    /// Check a task definition and report every problem at once (exit 0 valid, 65 invalid).
    Validate(cmd_validate::Args),
    /// Remove leftover task directories under DATA_DIR/tasks/, unmounting first and never deleting
    /// through a mount (exit 0 all removed, 1 something kept, 75 data directory locked).
    Gc(cmd_gc::Args),
    /// Run the long-running agent: tasks over a control API, crash-safe state, cleanup after a wait;
    /// with --etcd and --node, a node of a berth cluster.
    Agent(agent::Args),
    /// Serve berth's Docker volume plugin (reference-counted mounts, durable state), or release
    /// leaked references (`berth volume-plugin release`).
    VolumePlugin(cmd_volume_plugin::Args),
    /// The client of a berth cluster on etcd: submit, ps, stop, nodes, drain, service
    /// (docs/cluster.md).
    #[cfg(feature = "cluster")]
    Cluster(cmd_cluster::Args),
    /// Run the cluster: place pending tasks, keep services at their count, close what is over
    /// (lost nodes' tasks too); several may run, one leads (etcd election), the others wait.
    #[cfg(feature = "cluster")]
    Controller(cmd_controller::Args),
    #[command(flatten)]
    Client(client::ClientCommand),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to standard output.
    Completions {
        /// The shell to generate completions for.
        shell: clap_complete::Shell,
    },
}

impl Command {
    /// Whether the command line asks for `--print-config` (`agent`, `run`, `gc`).
    fn prints_config(&self) -> bool {
        match self {
            Command::Agent(a) => a.print_config,
            Command::Run(a) => a.print_config,
            Command::Gc(a) => a.print_config,
            _ => false,
        }
    }
}

/// Log to standard error: warnings by default, more with `BERTH_LOG=info|debug` (tracing's
/// `EnvFilter` syntax).
/// Crates whose debug logs carry Docker request and response bodies, and so container environments
/// with their secret values: kept at `info` unless `BERTH_LOG` names them itself.
const BODY_LOGGING_CRATES: &[&str] = &["bollard", "hyper", "hyper_util"];

/// The AWS SDK's crates: their warnings are the default chain's probes (no profile, no instance
/// metadata on a host without AWS) and their debug logs carry AWS's answers (secret values): kept
/// at `error` unless `BERTH_LOG` names them itself. berth reports every AWS failure itself, with
/// the service, endpoint and AWS's words.
const AWS_SDK_CRATES: &[&str] = &[
    "aws_config",
    "aws_runtime",
    "aws_sigv4",
    "aws_smithy_runtime",
    "aws_smithy_http_client",
    "aws_sdk_sts",
    "aws_sdk_ssm",
    "aws_sdk_secretsmanager",
    "aws_sdk_s3",
    "aws_sdk_ecr",
];

fn init_logging(json: bool, default_level: &str) {
    let spec = std::env::var("BERTH_LOG").unwrap_or_default();
    let mut filter = tracing_subscriber::EnvFilter::try_new(&spec)
        .ok()
        .filter(|_| !spec.is_empty())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new(default_level));
    let capped = BODY_LOGGING_CRATES
        .iter()
        .map(|k| (k, "info"))
        .chain(AWS_SDK_CRATES.iter().map(|k| (k, "error")));
    for (krate, level) in capped {
        if !spec.contains(krate)
            && let Ok(directive) = format!("{krate}={level}").parse()
        {
            filter = filter.add_directive(directive);
        }
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init()
    };
}

fn main() -> ExitCode {
    let layering = match config::apply(std::env::args_os().collect()) {
        Ok(layering) => layering,
        Err(err) => {
            eprintln!("berth: error: {err:#}");
            return ExitCode::from(78); // EX_CONFIG
        }
    };
    // As `Cli::parse_from`, keeping the matches for `--print-config`'s provenance.
    let matches = Cli::command().get_matches_from(layering.argv.clone());
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(err) => err.format(&mut Cli::command()).exit(),
    };
    match &cli.command {
        // The agent logs what it does (info); one-shot commands only warn.
        Command::Agent(a) => init_logging(a.log_format == agent::LogFormat::Json, "info"),
        Command::VolumePlugin(_) => init_logging(false, "info"),
        #[cfg(feature = "cluster")]
        Command::Controller(_) => init_logging(false, "info"),
        _ => init_logging(false, "warn"),
    }
    let result = if cli.command.prints_config() {
        config::print(&matches, &layering).map(|text| {
            print!("{text}");
            ExitCode::SUCCESS
        })
    } else {
        run(cli)
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("berth: error: {err:#}");
            ExitCode::from(1)
        }
    }
}

/// Run the subcommand.
fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Run(args) => cmd_run::run(args),
        Command::Validate(args) => cmd_validate::run(args),
        Command::Gc(args) => cmd_gc::run(args),
        Command::Agent(args) => agent::run(agent::Args {
            config: cli.config,
            ..args
        }),
        Command::Client(cmd) => client::run(cmd),
        #[cfg(feature = "cluster")]
        Command::Cluster(args) => cmd_cluster::run(args),
        #[cfg(feature = "cluster")]
        Command::Controller(args) => cmd_controller::run(args),
        Command::VolumePlugin(args) => cmd_volume_plugin::run(args),
        Command::Completions { shell } => {
            let mut cmd = Cli::command();
            clap_complete::generate(shell, &mut cmd, "berth", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
    }
}
