//! `berth volume-plugin`: serve berth's Docker volume plugin on a Unix socket (the default, with
//! the options below), or repair leaked references with `berth volume-plugin release`.
//!
//! ```text
//! berth volume-plugin [--socket S] [--state-file F] [--mount-root D] [--mount-helper P]   serve
//! berth volume-plugin release [--socket S] NAME ID [--count N]    drop leaked reference(s) of ID
//! berth volume-plugin release [--socket S] --unused [--dry-run]   release volumes no running
//!                                                                 container uses (asks the Engine)
//! ```
//!
//! Exit status of serving: 0 after SIGTERM/SIGINT (nothing unmounted), 75 another instance holds
//! the state file's lock, 1 any other error. Of `release`: 0 done, 1 an error.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use berth_volume::client::Client;

/// EX_TEMPFAIL (sysexits.h): another plugin instance holds the state file's lock.
pub const EXIT_LOCKED: u8 = 75;

#[derive(clap::Args, Debug)]
#[command(
    args_conflicts_with_subcommands = true,
    after_help = "Examples:\n  berth volume-plugin\n  berth volume-plugin --socket /run/docker/plugins/berth.sock --state-file /var/lib/ecs/data/ecs_volume_plugin.json\n  docker volume create -d berth -o type=tmpfs -o o=size=64m scratch\n  docker volume create -d berth -o type=efs -o device=fs-12345678:/data -o o=tls,iam efs1\n  berth volume-plugin release efs1 0123abcd…\n  berth volume-plugin release --unused --dry-run\n\nServing exits 0 on SIGTERM without unmounting anything, 75 if another instance holds the\nstate file's lock. See docs/volume-plugin.md."
)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<Command>,

    #[command(flatten)]
    pub serve: ServeArgs,
}

#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Release leaked references: `NAME ID` drops references of one mount ID (unmounting the
    /// volume if none remain); `--unused` releases every reference of each volume that no running
    /// container uses, as the Docker Engine reports.
    Release(ReleaseArgs),
}

/// Options of the serving plugin.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// The socket to serve on; dockerd's driver name is the file's stem (`berth` for berth.sock).
    #[arg(long, value_name = "PATH", env = "BERTH_VOLUME_PLUGIN_SOCKET", default_value = berth_volume::DEFAULT_SOCKET)]
    pub socket: PathBuf,

    /// The durable state (berth's format; the ECS plugin's ecs_volume_plugin.json is read too).
    /// A lock file PATH.lock keeps a second instance away.
    #[arg(long, value_name = "PATH", env = "BERTH_VOLUME_PLUGIN_STATE", default_value = berth_volume::DEFAULT_STATE_FILE)]
    pub state_file: PathBuf,

    /// The directory under which volumes get their mount point (one directory per volume).
    #[arg(long, value_name = "DIR", env = "BERTH_VOLUME_PLUGIN_MOUNT_ROOT", default_value = berth_volume::DEFAULT_MOUNT_ROOT)]
    pub mount_root: PathBuf,

    /// The program that mounts every type other than tmpfs and bind (nfs, nfs4, efs, …), run as
    /// `HELPER -t TYPE [-o OPTS] DEVICE TARGET` (never through a shell).
    #[arg(long, value_name = "PROGRAM", env = "BERTH_VOLUME_PLUGIN_MOUNT_HELPER", default_value = berth_volume::DEFAULT_MOUNT_HELPER)]
    pub mount_helper: OsString,

    /// How long the mount helper may run before it is killed (dockerd gives up on a Mount after
    /// 2 minutes).
    #[arg(long, value_name = "DURATION", default_value = "90s", value_parser = humantime::parse_duration)]
    pub mount_timeout: Duration,
}

#[derive(clap::Args, Debug)]
pub struct ReleaseArgs {
    /// The plugin's socket.
    #[arg(long, value_name = "PATH", env = "BERTH_VOLUME_PLUGIN_SOCKET", default_value = berth_volume::DEFAULT_SOCKET)]
    pub socket: PathBuf,

    /// The volume.
    #[arg(required_unless_present = "unused", conflicts_with = "unused")]
    pub name: Option<String>,

    /// The mount ID whose references to drop (as `docker volume inspect` shows under Status).
    #[arg(required_unless_present = "unused", conflicts_with = "unused")]
    pub id: Option<String>,

    /// How many references of ID to drop (default: 1; 0 = all of them).
    #[arg(long, value_name = "N", default_value_t = 1, conflicts_with = "unused")]
    pub count: u64,

    /// Release every reference of each volume that no running container uses.
    #[arg(long)]
    pub unused: bool,

    /// With --unused: show what would be released; change nothing.
    #[arg(long, requires = "unused")]
    pub dry_run: bool,

    /// With --unused: the Docker Engine to ask (default: DOCKER_HOST or the local socket).
    #[arg(long, value_name = "URL", env = "DOCKER_HOST", requires = "unused")]
    pub docker_host: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    match args.command {
        Some(Command::Release(release)) => runtime.block_on(run_release(release)),
        None => runtime.block_on(run_serve(args.serve)),
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (term, int) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    match (term, int) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM"),
                _ = int.recv() => tracing::info!("SIGINT"),
            }
        }
        _ => {
            tracing::error!("cannot install signal handlers; stop with SIGKILL");
            std::future::pending::<()>().await;
        }
    }
}

async fn run_serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let mut config =
        berth_volume::ServeConfig::new(&args.socket, &args.state_file, &args.mount_root);
    config.mount_helper = args.mount_helper;
    config.mount_timeout = args.mount_timeout;
    let server = match berth_volume::server::Server::start(&config).await {
        Ok(server) => server,
        Err(e @ berth_volume::Error::Locked { .. }) => {
            eprintln!("berth: {e}");
            return Ok(ExitCode::from(EXIT_LOCKED));
        }
        Err(e) => return Err(e).context("starting the volume plugin"),
    };
    let report = server.recovery();
    for name in &report.remounted {
        eprintln!("berth: recovery: volume {name} has references and was mounted again");
    }
    for (name, reason) in &report.failed {
        eprintln!(
            "berth: recovery: volume {name} has references but could not be mounted: {reason}"
        );
    }
    for name in &report.unreferenced {
        eprintln!("berth: recovery: volume {name} is mounted but has no references; left in place");
    }
    for path in &report.unknown_mounts {
        eprintln!(
            "berth: recovery: {} is mounted under the mount root but belongs to no volume; left in place",
            berth_fs::shown(path)
        );
    }
    server
        .run(shutdown_signal())
        .await
        .context("serving the volume plugin")?;
    Ok(ExitCode::SUCCESS)
}

async fn connect(socket: &Path) -> anyhow::Result<Client> {
    Client::connect(socket)
        .await
        .with_context(|| format!("is berth volume-plugin serving on {}?", socket.display()))
}

fn short(id: &str) -> String {
    id.chars().take(12).collect()
}

async fn run_release(args: ReleaseArgs) -> anyhow::Result<ExitCode> {
    let mut client = connect(&args.socket).await?;
    if let (Some(name), Some(id)) = (&args.name, &args.id) {
        let count = (args.count > 0).then_some(args.count);
        let r = client.release(name, id, count).await?;
        let tail = if r.unmounted {
            "; no references remain: unmounted"
        } else {
            ""
        };
        println!(
            "volume {name}: released {} reference(s) of mount ID {}, {} remain{tail}",
            r.released,
            short(id),
            r.remaining
        );
        return Ok(ExitCode::SUCCESS);
    }
    // --unused: snapshot each volume's references first, then ask the Engine. A container that
    // starts after the snapshot adds references the release will not take (it releases at most
    // what the snapshot saw, per ID).
    let mut referenced = Vec::new();
    for entry in client.list().await? {
        let info = client.get(&entry.name).await?;
        let mounts = info.status.map(|s| s.mounts).unwrap_or_default();
        if !mounts.is_empty() {
            referenced.push((entry.name, mounts));
        }
    }
    let docker = berth_docker::connect(args.docker_host.as_deref()).await?;
    let containers = docker
        .list_containers(None)
        .await
        .context("listing running containers")?;
    let used: BTreeSet<String> = containers
        .iter()
        .flat_map(|c| c.mounts.iter().flatten())
        .filter_map(|m| m.name.clone())
        .collect();
    if referenced.is_empty() {
        println!("no volume holds references: nothing to release");
    }
    for (name, mounts) in referenced {
        if used.contains(&name) {
            println!("volume {name}: used by a running container; kept");
            continue;
        }
        for (id, n) in mounts {
            if args.dry_run {
                println!(
                    "volume {name}: would release {n} reference(s) of mount ID {} (no running container uses it)",
                    short(&id)
                );
                continue;
            }
            let r = client.release(&name, &id, Some(n)).await?;
            let tail = if r.unmounted { "; unmounted" } else { "" };
            println!(
                "volume {name}: released {} reference(s) of mount ID {} (no running container uses it), {} remain{tail}",
                r.released,
                short(&id),
                r.remaining
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
