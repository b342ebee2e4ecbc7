//! The shared cluster harness (`common::cluster::Fleet`) end to end, with a real node agent
//! (`berth agent --etcd … --node …`) behind its own proxies: the node registers with the given
//! capacity and attributes, a submitted task runs on it and is found by its labels, the node cut
//! off from etcd and healed, killed and restarted, and dropping the fleet leaves no container.
//! What nodes do under partitions is for the cluster tests built on this harness; this checks
//! that the harness drives them. Run: `scripts/test -p berth --test cluster_fleet` (Docker, the
//! test images, etcd).

mod common;

use common::cluster::{Fleet, NodeOpts, Running};
use std::time::Duration;

/// Waits until `ps` says task `id` runs and exactly one container of the fleet runs on n1.
fn running(fleet: &Fleet, id: &str, what: &str) -> Vec<Running> {
    fleet.wait_until(Duration::from_secs(60), what, || {
        let task = fleet.task(id);
        let containers = fleet.docker_running(&[("berth.node", "n1")]);
        match &task {
            Some(t) if t["lastStatus"] == "RUNNING" && containers.len() == 1 => Ok(containers),
            _ => Err(format!("task: {task:#?}\ncontainers: {containers:#?}")),
        }
    })
}

#[test]
fn a_fleet_runs_a_task_on_its_node_agent_cuts_restarts_it_and_cleans_up() {
    let mut fleet = Fleet::start("fleet-node");
    fleet.controller("c1");
    fleet.node(
        "n1",
        NodeOpts::default()
            .lease_ttl("3s")
            .cpu(1024)
            .memory(1024)
            .attribute("zone", "a"),
    );
    let node = fleet.wait_until(Duration::from_secs(20), "node n1 to register", || {
        let nodes = fleet.nodes();
        match nodes.as_slice() {
            [n] => Ok(n.clone()),
            _ => Err(format!("{nodes:#?}")),
        }
    });
    assert_eq!(node["node"], "n1", "{node}");
    assert_eq!(node["capacity"]["cpu"], 1024, "{node}");
    assert_eq!(node["capacity"]["memoryMib"], 1024, "{node}");
    assert_eq!(node["attributes"]["zone"], "a", "{node}");
    assert!(
        fleet.proxies("n1").stats().forwarded >= 1,
        "the agent reaches etcd through its proxies"
    );

    let def = serde_json::json!({
        "family": "fleet-sleep",
        "containerDefinitions": [{
            "name": "app",
            "image": berth_testkit::test_image(),
            "memory": 64,
            "command": ["sleep", "600"]
        }]
    });
    let ids = fleet.submit(&def, &[]);
    let id = ids[0].clone();
    let containers = running(&fleet, &id, "the task to run on n1");
    assert_eq!(containers[0].label("berth.task"), id);
    assert_eq!(containers[0].label("berth.test"), fleet.label());
    let container = containers[0].id.clone();

    // Cut off and healed within the lease: the task keeps running, the node stays registered.
    fleet.cut("n1");
    assert!(
        fleet.proxies("n1").stats().cut >= 1,
        "the agent's connections were cut"
    );
    std::thread::sleep(Duration::from_secs(1));
    fleet.heal("n1");
    let after = running(&fleet, &id, "the task to run after the heal");
    assert_eq!(after[0].id, container, "the same container");

    // SIGKILL and restart: the agent adopts its container.
    fleet.kill9("n1");
    fleet.restart("n1");
    let after = running(&fleet, &id, "the task to run after the restart");
    assert_eq!(after[0].id, container, "the same container");

    drop(fleet);
    let left = berth_testkit::docker_cli(&[
        "ps",
        "-aq",
        "--no-trunc",
        "--filter",
        &format!("id={container}"),
    ]);
    assert_eq!(
        left.trim(),
        "",
        "dropping the fleet removed the task's container"
    );
}
