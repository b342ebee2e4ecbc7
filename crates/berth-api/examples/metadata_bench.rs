//! Load generator for the metadata endpoint: requests/s and latency percentiles of `GET
//! /v4/<id>/task` for a 5-container task, over N keep-alive connections on loopback, with the rate
//! limit disabled. Server and client share this process (and so the machine's CPUs).
//!
//! ```sh
//! cargo run --release -p berth-api --example metadata_bench -- [SECONDS=10] [CONNECTIONS=16]
//! ```

#[path = "../tests/common/mod.rs"]
mod common;

use berth_api::metadata::{Listen, MetadataConfig, MetadataServer, RateLimit, TaskDirectory};
use berth_engine::fake::FakeRuntime;
use berth_engine::runtime::Runtime;
use berth_engine::state::{Health, Status};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(10);
    let connections: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(16);

    // A 5-container bridge task, every container created and running in the fake runtime.
    let rt = FakeRuntime::new();
    let mut state = common::task("bench", 5, "bridge");
    for i in 0..5 {
        let spec = berth_engine::spec::container_spec(&state, i, &[], None);
        rt.add_image(&spec.image);
        let id = rt.create(&spec).await.expect("create");
        rt.start(&id).await.expect("start");
        let c = &mut state.containers[i];
        c.docker_id = Some(id);
        c.known = Status::Running;
        c.health = Health::Unknown;
        c.created_at = Some(1_796_000_000_000);
        c.started_at = Some(1_796_000_001_000);
    }
    let directory = Arc::new(TaskDirectory::new());
    let (_tx, rx) = watch::channel(state.clone());
    directory.register(rx);
    let config = MetadataConfig {
        rate_limit: RateLimit::DISABLED,
        ..MetadataConfig::default()
    };
    let listen = Listen {
        addr: "127.0.0.1:0".parse().expect("addr"),
        advertise: None,
        bridge: false,
    };
    let server = MetadataServer::start(Arc::new(rt), directory, config, listen)
        .await
        .expect("server starts");
    let addr = server.local_addrs()[0];
    let path = format!("/v4/{}/task", state.containers[0].metadata_id);

    let mut conn = common::Conn::open(addr).await;
    let (status, body) = conn.get(&path).await;
    assert_eq!(status, 200);
    println!("answer: {} bytes", body.len());

    let warmup = Duration::from_secs(1);
    let run = Duration::from_secs(seconds);
    let start = Instant::now();
    let workers: Vec<_> = (0..connections)
        .map(|_| {
            let path = path.clone();
            tokio::spawn(async move {
                let mut conn = common::Conn::open(addr).await;
                let mut lat = Vec::with_capacity(1 << 16);
                loop {
                    let t = Instant::now();
                    let (status, _) = conn.get(&path).await;
                    assert_eq!(status, 200);
                    let since = t.duration_since(start);
                    if since >= warmup + run {
                        break;
                    }
                    if since >= warmup {
                        lat.push(t.elapsed());
                    }
                }
                lat
            })
        })
        .collect();
    let mut all = Vec::new();
    for w in workers {
        all.extend(w.await.expect("worker"));
    }
    all.sort_unstable();
    let pct = |p: f64| {
        let i = ((all.len() as f64 * p).ceil() as usize).clamp(1, all.len()) - 1;
        all[i]
    };
    println!(
        "{} connections, {} s: {} requests, {:.0} req/s; latency p50 {:?}, p99 {:?}, p99.9 {:?}, max {:?}",
        connections,
        seconds,
        all.len(),
        all.len() as f64 / run.as_secs_f64(),
        pct(0.50),
        pct(0.99),
        pct(0.999),
        all[all.len() - 1],
    );
    server.shutdown().await;
}
