//! Benchmark peer: the Docker Engine's own floor for starting a group of containers — the same
//! create and start calls berth makes, straight on the Engine API with no agent logic.
//!
//! `engine_floor chain|parallel|parallel:K N IMAGE` creates and starts N containers (one after
//! another for `chain`, all at once for `parallel`, at most K create+start pairs in flight for
//! `parallel:K`), prints the milliseconds until all are running, then removes them. Used by
//! `scripts/bench` and `scripts/bench-agent`.

use berth_testkit::bollard;
use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{CreateContainerOptionsBuilder, RemoveContainerOptionsBuilder};
use std::collections::HashMap;
use std::time::Instant;

async fn create_start(
    d: &Docker,
    name: &str,
    image: &str,
) -> Result<String, bollard::errors::Error> {
    let body = ContainerCreateBody {
        image: Some(image.to_string()),
        cmd: Some(vec![
            "sh".into(),
            "-c".into(),
            "trap 'exit 0' TERM; while true; do sleep 1; done".into(),
        ]),
        labels: Some(HashMap::from([(
            "berth.bench".to_string(),
            "1".to_string(),
        )])),
        host_config: Some(HostConfig {
            network_mode: Some("bridge".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let opts = CreateContainerOptionsBuilder::default().name(name).build();
    let id = d.create_container(Some(opts), body).await?.id;
    d.start_container(&id, None).await?;
    Ok(id)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (mode, n, image) = match &args[..] {
        [_, mode, n, image] => (mode.clone(), n.parse::<usize>()?, image.clone()),
        _ => return Err("usage: engine_floor chain|parallel|parallel:K N IMAGE".into()),
    };
    let width = match mode.as_str() {
        "chain" => 1,
        "parallel" => n.max(1),
        m => match m.strip_prefix("parallel:").map(str::parse::<usize>) {
            Some(Ok(k)) if k > 0 => k,
            _ => return Err(format!("unknown mode {m:?}: chain, parallel or parallel:K").into()),
        },
    };
    let d = Docker::connect_with_defaults()?.negotiate_version().await?;
    let tag: u32 = std::process::id();
    let t = Instant::now();
    // At most `width` create+start pairs in flight; a new one begins as soon as one finishes.
    let ids: Vec<String> = {
        use futures_util::{StreamExt as _, TryStreamExt as _};
        futures_util::stream::iter(0..n)
            .map(|i| {
                let d = d.clone();
                let image = image.clone();
                async move { create_start(&d, &format!("floor-{tag}-{i}"), &image).await }
            })
            .buffer_unordered(width)
            .try_collect()
            .await?
    };
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    println!("{ms:.1}");
    let rm = RemoveContainerOptionsBuilder::default().force(true).build();
    for id in ids {
        d.remove_container(&id, Some(rm.clone())).await?;
    }
    Ok(())
}
