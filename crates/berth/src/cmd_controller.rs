//! `berth controller`: its options, its signals and its exit code around berth-cluster's
//! `controller::run` (campaign through etcd's election; while leading, a watch-fed view and one
//! pass per `--interval`: close what is over, keep services at their count, place what is
//! pending; each pass logged). Several may run; one leads, the others wait. It holds no state of
//! its own. A leader that loses its lease (an etcd outage longer than its TTL) stops leading and
//! campaigns again, as it does while etcd is away: it keeps running through any outage; SIGTERM
//! or SIGINT cancels the run, which resigns at once when leading (the next controller leads
//! without waiting for the TTL), and exits 0. It exits 1 only when etcd refuses it.

use anyhow::Context as _;
use berth_cluster::controller;
use berth_cluster::store::Cluster;
use std::process::ExitCode;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub etcd: crate::etcd_args::EtcdArgs,
    /// This controller's name in the election (default: the host name and process id).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// The controller's lease: how long after a crash the next controller takes over (whole
    /// seconds, at least 1s).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub lease_ttl: Duration,
    /// Time between passes while leading (each pass closes what is over, keeps services at
    /// their count and places what is pending).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = humantime::parse_duration)]
    pub interval: Duration,
    /// How long a stopped task stays listed (`berth cluster ps`) before its record is deleted
    /// (ECS keeps stopped tasks about an hour).
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = humantime::parse_duration)]
    pub stopped_retention: Duration,
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
    let settings = args.etcd.required()?;
    let name = args.name.clone().unwrap_or_else(default_name);
    let cluster = Cluster::open(&settings).await?;
    // SIGTERM or SIGINT: the controller stops campaigning, or resigns if it leads.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    let cancel = CancellationToken::new();
    let on_signal = cancel.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        on_signal.cancel();
    });
    let config = controller::Config {
        name,
        lease_ttl: args.lease_ttl,
        interval: args.interval,
        settings: berth_cluster::reconcile::Settings {
            stopped_retention_ms: u64::try_from(args.stopped_retention.as_millis())
                .unwrap_or(u64::MAX),
            ..Default::default()
        },
        new_id: Box::new(berth_engine::new_task_id),
    };
    Ok(match controller::run(&cluster, config, cancel).await? {
        controller::Ended::Cancelled => ExitCode::SUCCESS,
    })
}
