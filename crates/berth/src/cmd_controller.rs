//! `berth controller`: campaigns for leadership through etcd (berth-cluster's `election`), and
//! while it leads runs the placement pass (`controller::place_pending`) every `--interval`.
//! Several may run; one leads, the others wait. It holds no state of its own. A leader that loses
//! its lease exits 1 (a supervisor restarts it, and it campaigns again); SIGTERM or SIGINT resigns
//! at once (the next controller leads without waiting for the TTL) and exits 0.

use anyhow::Context as _;
use berth_cluster::store::{Cluster, parse_endpoints};
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The etcd cluster's client URLs, comma-separated: http://HOST:PORT[,http://HOST:PORT…].
    #[arg(long, env = "BERTH_ETCD", value_name = "ENDPOINTS")]
    pub etcd: String,
    /// This controller's name in the election (default: the host name and process id).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// The controller's lease: how long after a crash the next controller takes over (whole
    /// seconds, at least 1s).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub lease_ttl: Duration,
    /// Time between placement passes while leading.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = humantime::parse_duration)]
    pub interval: Duration,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(run_async(args))
}

fn default_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("{}-{}", host.trim(), std::process::id())
}

async fn run_async(args: Args) -> anyhow::Result<ExitCode> {
    if args.lease_ttl < Duration::from_secs(1) {
        anyhow::bail!(
            "--lease-ttl: {:?} is below 1s; etcd leases count whole seconds",
            args.lease_ttl
        );
    }
    if args.interval.is_zero() {
        anyhow::bail!("--interval: must be more than 0s, e.g. 1s");
    }
    let endpoints = parse_endpoints(&args.etcd).map_err(anyhow::Error::msg)?;
    let name = args.name.clone().unwrap_or_else(default_name);
    let cluster = Cluster::connect(&endpoints).await?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tracing::info!(name, endpoints = %cluster.endpoints(), "campaigning");
    let mut leadership = tokio::select! {
        l = berth_cluster::election::campaign(&cluster, &name, args.lease_ttl) => l?,
        _ = term.recv() => return Ok(ExitCode::SUCCESS),
        _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
    };
    tracing::info!(name, "leading");
    loop {
        match berth_cluster::controller::place_pending(&cluster).await {
            Ok(report) => {
                for (task, node) in &report.placed {
                    tracing::info!(task, node, "placed");
                }
                if !report.unplaced.is_empty() || report.conflicts > 0 {
                    tracing::info!(
                        pending = report.unplaced.len(),
                        conflicts = report.conflicts,
                        "placement pass"
                    );
                }
            }
            // etcd unreachable or a member lost: the next pass reads again.
            Err(e) => tracing::warn!(error = %e, "placement pass failed"),
        }
        tokio::select! {
            () = tokio::time::sleep(args.interval) => {}
            () = leadership.lost() => {
                tracing::error!(name, "lost the controller lease; another controller may lead now");
                return Ok(ExitCode::from(1));
            }
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    if let Err(e) = leadership.resign().await {
        tracing::warn!(error = %e, "resigning failed; the next controller leads when the lease expires");
    }
    tracing::info!(name, "resigned");
    Ok(ExitCode::SUCCESS)
}
