//! Benchmark peer: the Docker Engine's own floor for starting a group of containers — the same
//! create and start calls berth makes, straight on the Engine API with no agent logic.
//!
//! `engine_floor chain|parallel|parallel:K N IMAGE` creates and starts N containers (one after
//! another for `chain`, all at once for `parallel`, at most K create+start pairs in flight for
//! `parallel:K`), prints the milliseconds until all are running, then removes them. Used by
//! `scripts/bench` and `scripts/bench-agent`.
//!
//! `engine_floor shared N IMAGE [OWNER_IMAGE]` is the floor of a task whose containers share one
//! network namespace (berth's `awsvpc`, compose's `network_mode: service:`): it creates and starts
//! one owner container on the bridge (from OWNER_IMAGE with its default command, e.g. berth's pause
//! image; else IMAGE like the others), then N containers joined to it with `container:<owner>`, all
//! at once. `shared 0 IMAGE OWNER_IMAGE` times a single create+start of OWNER_IMAGE. `joined` is
//! the same with the owner created and started before the clock starts: the time of the N joined
//! containers alone, so `shared` minus `joined` is what the owner adds on the critical path.

use berth_testkit::bollard;
use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{CreateContainerOptionsBuilder, RemoveContainerOptionsBuilder};
use std::collections::HashMap;
use std::time::Instant;

/// How a container is created: from the benchmark image running the sleep loop, or from an image
/// with its own default command (the owner), on the bridge or in another container's namespace.
struct Spec<'a> {
    image: &'a str,
    loop_cmd: bool,
    network_mode: String,
}

async fn create_start(
    d: &Docker,
    name: &str,
    spec: &Spec<'_>,
) -> Result<String, bollard::errors::Error> {
    let body = ContainerCreateBody {
        image: Some(spec.image.to_string()),
        cmd: spec.loop_cmd.then(|| {
            vec![
                "sh".into(),
                "-c".into(),
                "trap 'exit 0' TERM; while true; do sleep 1; done".into(),
            ]
        }),
        labels: Some(HashMap::from([(
            "berth.bench".to_string(),
            "1".to_string(),
        )])),
        host_config: Some(HostConfig {
            network_mode: Some(spec.network_mode.clone()),
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
    let (mode, n, image, owner_image) = match &args[..] {
        [_, mode, n, image] => (mode.clone(), n.parse::<usize>()?, image.clone(), None),
        [_, mode, n, image, owner] if mode == "shared" || mode == "joined" => (
            mode.clone(),
            n.parse::<usize>()?,
            image.clone(),
            Some(owner.clone()),
        ),
        _ => {
            return Err(
                "usage: engine_floor chain|parallel|parallel:K N IMAGE, or shared|joined N IMAGE [OWNER_IMAGE]"
                    .into(),
            );
        }
    };
    let d = Docker::connect_with_defaults()?.negotiate_version().await?;
    let tag: u32 = std::process::id();
    if mode == "shared" || mode == "joined" {
        let owner_timed = mode == "shared";
        return shared(&d, tag, n, &image, owner_image.as_deref(), owner_timed).await;
    }
    let width = match mode.as_str() {
        "chain" => 1,
        "parallel" => n.max(1),
        m => match m.strip_prefix("parallel:").map(str::parse::<usize>) {
            Some(Ok(k)) if k > 0 => k,
            _ => {
                return Err(format!(
                    "unknown mode {m:?}: chain, parallel, parallel:K, shared or joined"
                )
                .into());
            }
        },
    };
    let bridge = Spec {
        image: &image,
        loop_cmd: true,
        network_mode: "bridge".into(),
    };
    let t = Instant::now();
    // At most `width` create+start pairs in flight; a new one begins as soon as one finishes.
    let ids: Vec<String> = {
        use futures_util::{StreamExt as _, TryStreamExt as _};
        futures_util::stream::iter(0..n)
            .map(|i| {
                let d = d.clone();
                let bridge = &bridge;
                async move { create_start(&d, &format!("floor-{tag}-{i}"), bridge).await }
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

/// `shared`: the owner is created and started first, then the N joined containers all at once.
/// Without `owner_timed` (`joined`) the clock starts once the owner runs.
async fn shared(
    d: &Docker,
    tag: u32,
    n: usize,
    image: &str,
    owner_image: Option<&str>,
    owner_timed: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    use futures_util::future::try_join_all;
    let owner_spec = Spec {
        image: owner_image.unwrap_or(image),
        loop_cmd: owner_image.is_none(),
        network_mode: "bridge".into(),
    };
    let mut t = Instant::now();
    let owner = create_start(d, &format!("floor-{tag}-owner"), &owner_spec).await?;
    if !owner_timed {
        t = Instant::now();
    }
    let joined_spec = Spec {
        image,
        loop_cmd: true,
        network_mode: format!("container:{owner}"),
    };
    let rm = RemoveContainerOptionsBuilder::default().force(true).build();
    let joined = match try_join_all((0..n).map(|i| {
        let spec = &joined_spec;
        async move { create_start(d, &format!("floor-{tag}-{i}"), spec).await }
    }))
    .await
    {
        Ok(ids) => ids,
        Err(e) => {
            // Do not leave the owner behind (a joined container that was created stays; it is
            // named floor-<pid>-<i> and labelled berth.bench=1).
            let _ = d.remove_container(&owner, Some(rm.clone())).await;
            return Err(e.into());
        }
    };
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    println!("{ms:.1}");
    // The joined containers go first: the owner holds their network namespace.
    for id in joined.into_iter().chain([owner]) {
        d.remove_container(&id, Some(rm.clone())).await?;
    }
    Ok(())
}
