//! Benchmark: durable Mount/Unmount round trips per second on an already-mounted volume, with 1
//! and 16 concurrent clients, and the p50/p99 latency of each call. Every call changes a count and
//! is answered only after the state file was replaced and fsynced (group commit batches the fsyncs
//! of concurrent changes).
//!
//! Runs the plugin in-process on a Unix socket, with its state file on the filesystem given by
//! `--dir` (default: a new directory under /var/tmp, i.e. the real disk), and a tmpfs volume.
//! Needs root (it mounts). Usage:
//!
//! ```text
//! cargo run --release -p berth-volume --example refcount_bench -- [--seconds 5] [--dir DIR]
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use berth_volume::ServeConfig;
use berth_volume::client::Client;
use berth_volume::server::Server;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let mut seconds = 5u64;
    let mut dir: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seconds" => {
                seconds = args
                    .next()
                    .and_then(|s| s.parse().ok())
                    .expect("--seconds N")
            }
            "--dir" => dir = args.next().map(PathBuf::from),
            other => panic!("unknown argument {other}"),
        }
    }
    let tmp = tempfile::Builder::new()
        .prefix("berth-volume-bench-")
        .tempdir_in(dir.unwrap_or_else(|| PathBuf::from("/var/tmp")))
        .expect("bench directory");
    let config = ServeConfig::new(
        &tmp.path().join("bench.sock"),
        &tmp.path().join("state/volume-plugin.json"),
        &tmp.path().join("volumes"),
    );
    let server = Server::start(&config).await.expect("start");
    let registry = Arc::clone(server.registry());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let socket = config.socket.clone();
    // `run` consumes the server: measure through the registry.
    let saves = |r: &berth_volume::Registry| r.committer().stats().saves.load(Ordering::Relaxed);
    let serving = tokio::spawn(server.run(async move {
        let _ = stop_rx.await;
    }));
    {
        let mut c = Client::connect(&socket).await.expect("connect");
        c.create("bench", &[("type", "tmpfs"), ("o", "size=1m")])
            .await
            .expect("create");
        c.mount("bench", "base").await.expect("mount base");
    }
    println!(
        "state file {} ({} s per run)\n",
        config.state_file.display(),
        seconds
    );
    println!(
        "| clients | round trips/s | durable changes/s | p50 ms | p99 ms | changes per fsync |"
    );
    println!("|---|---|---|---|---|---|");
    for clients in [1usize, 16] {
        let before = saves(&registry);
        run_with(&socket, clients, seconds, before, &registry).await;
    }
    {
        let mut c = Client::connect(&socket).await.expect("connect");
        c.unmount("bench", "base").await.expect("unmount base");
        c.remove("bench").await.expect("remove");
    }
    let _ = stop_tx.send(());
    serving.await.expect("join").expect("serve");
}

async fn run_with(
    socket: &std::path::Path,
    clients: usize,
    seconds: u64,
    saves_before: u64,
    registry: &berth_volume::Registry,
) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let socket = socket.to_path_buf();
        tasks.push(tokio::spawn(async move {
            let mut client = Client::connect(&socket).await.expect("connect");
            let id = format!("bench-client-{c}");
            let mut lat = Vec::new();
            let mut pairs = 0u64;
            while Instant::now() < deadline {
                let t = Instant::now();
                client.mount("bench", &id).await.expect("mount");
                lat.push(t.elapsed());
                let t = Instant::now();
                client.unmount("bench", &id).await.expect("unmount");
                lat.push(t.elapsed());
                pairs += 1;
            }
            (pairs, lat)
        }));
    }
    let start = Instant::now();
    let mut pairs = 0;
    let mut lat = Vec::new();
    for t in tasks {
        let (p, l) = t.await.expect("client");
        pairs += p;
        lat.extend(l);
    }
    let elapsed = start.elapsed().as_secs_f64();
    lat.sort();
    let saves = registry.committer().stats().saves.load(Ordering::Relaxed) - saves_before;
    let changes = pairs * 2;
    println!(
        "| {clients} | {:.0} | {:.0} | {:.2} | {:.2} | {:.1} |",
        pairs as f64 / elapsed,
        changes as f64 / elapsed,
        percentile(&lat, 0.50).as_secs_f64() * 1e3,
        percentile(&lat, 0.99).as_secs_f64() * 1e3,
        changes as f64 / saves.max(1) as f64,
    );
}
