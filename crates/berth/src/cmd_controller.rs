//! `berth controller`: campaigns for leadership through etcd (berth-cluster's `election`), and
//! while it leads keeps a view of the cluster current through a watch (`controller::Mirror`) and
//! every `--interval` runs one pass: `reconcile::plan` (close what is over, keep services at
//! their count, place what is pending), then `controller::execute`.
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
    let settings = berth_cluster::reconcile::Settings {
        stopped_retention_ms: u64::try_from(args.stopped_retention.as_millis()).unwrap_or(u64::MAX),
        ..Default::default()
    };
    let mut mirror = loop {
        match berth_cluster::controller::Mirror::start(&cluster).await {
            Ok(m) => break m,
            Err(e) => {
                tracing::warn!(error = %e, "reading the cluster failed; trying again");
                tokio::select! {
                    () = tokio::time::sleep(args.interval) => {}
                    () = leadership.lost() => return Ok(lost(&name)),
                    _ = term.recv() => return resign(leadership, &name).await,
                    _ = tokio::signal::ctrl_c() => return resign(leadership, &name).await,
                }
            }
        }
    };
    let mut last_write = 0;
    loop {
        let next = tokio::time::Instant::now() + args.interval;
        let began = tokio::time::Instant::now();
        let pass = async {
            mirror.catch_up(last_write).await?;
            let now = berth_cluster::now_ms();
            let plan = berth_cluster::reconcile::plan(
                mirror.view(),
                &settings,
                now,
                &mut berth_engine::new_task_id,
            );
            berth_cluster::controller::execute(&cluster, mirror.view(), plan, now).await
        };
        match pass.await {
            Ok(report) => {
                last_write = last_write.max(report.revision);
                log_pass(&report, began.elapsed());
            }
            // etcd unreachable or a member lost: the next pass reads again.
            Err(e) => tracing::warn!(error = %e, "controller pass failed"),
        }
        tokio::select! {
            () = mirror.follow_until(next) => {}
            () = leadership.lost() => return Ok(lost(&name)),
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    resign(leadership, &name).await
}

fn lost(name: &str) -> ExitCode {
    tracing::error!(
        name,
        "lost the controller lease; another controller may lead now"
    );
    ExitCode::from(1)
}

/// Logs what a pass did, one line per change.
fn log_pass(report: &berth_cluster::controller::PassReport, took: Duration) {
    for (task, reason) in &report.closed {
        tracing::info!(task, reason, "closed");
    }
    for (task, reason) in &report.stopped {
        tracing::info!(task, reason, "stopping");
    }
    for (service, tasks) in &report.started {
        tracing::info!(service, count = tasks.len(), "started service tasks");
    }
    for (task, node) in &report.placed {
        tracing::info!(task, node, "placed");
    }
    for service in &report.removed {
        tracing::info!(service, "service removed");
    }
    for (service, until) in &report.throttled {
        tracing::info!(
            service,
            until_ms = until,
            "service throttled: its launches keep failing"
        );
    }
    for problem in &report.problems {
        tracing::warn!(problem, "cannot use a record");
    }
    if !report.is_quiet() {
        tracing::info!(
            placed = report.placed.len(),
            pending = report.unplaced.len(),
            closed = report.closed.len(),
            stopped = report.stopped.len(),
            started = report.started.iter().map(|(_, t)| t.len()).sum::<usize>(),
            conflicts = report.conflicts,
            forgotten = report.forgotten,
            took_ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
            "controller pass"
        );
    }
}

async fn resign(
    leadership: berth_cluster::election::Leadership,
    name: &str,
) -> anyhow::Result<ExitCode> {
    if let Err(e) = leadership.resign().await {
        tracing::warn!(error = %e, "resigning failed; the next controller leads when the lease expires");
    }
    tracing::info!(name, "resigned");
    Ok(ExitCode::SUCCESS)
}
