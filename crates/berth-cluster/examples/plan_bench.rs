//! The controller's decisions at the scale of docs/cluster.md's sizing: `reconcile::plan` over a
//! view of N nodes with T tasks already running (a quiet pass: what every interval costs), then
//! with P more pending (a placement pass), timed in this process. No etcd: this is the
//! controller's own CPU, the part that must never be placement's bottleneck.
//!
//! ```sh
//! cargo run --release -p berth-cluster --example plan_bench -- [NODES=5000] [TASKS=100000] [PENDING=10000]
//! ```

use berth_cluster::reconcile::{Action, Settings, plan};
use berth_cluster::record::{
    HealthStatus, LastStatus, NodeRecord, Resources, StatusRecord, TaskRecord,
};
use berth_cluster::store::Versioned;
use berth_cluster::view::ClusterView;
use std::collections::BTreeMap;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let nodes: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(5000);
    let tasks: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let pending: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let def = berth_model::parse(
        r#"{"family":"web","containerDefinitions":[{"name":"app","image":"busybox","cpu":64,"memory":64}]}"#,
    )
    .expect("valid")
    .definition;
    let mut view = ClusterView::default();
    for i in 0..nodes {
        let name = format!("node-{i:05}");
        view.nodes.insert(
            name.clone(),
            NodeRecord {
                name,
                capacity: Resources {
                    cpu: 65_536,
                    memory_mib: 65_536,
                },
                attributes: BTreeMap::from([("zone".to_owned(), format!("z{}", i % 3))]),
                version: "bench".into(),
                registered_at_ms: 1,
                lease: 1,
            },
        );
    }
    let mut rev = 1;
    for i in 0..tasks {
        let id = format!("{i:032x}");
        let node = format!("node-{:05}", i % nodes);
        let mut t = TaskRecord::pending(id.clone(), def.clone(), vec![], vec![], 1).expect("task");
        t.node = Some(node.clone());
        t.fence = Some(rev);
        view.statuses.insert(
            (node, id.clone()),
            StatusRecord {
                task: id.clone(),
                fence: rev,
                last_status: LastStatus::Running,
                health_status: HealthStatus::Unknown,
                stopped_reason: None,
                failed_to_start: false,
                updated_at_ms: 1,
            },
        );
        view.tasks.insert(
            id,
            Versioned {
                value: t,
                mod_revision: rev,
            },
        );
        rev += 1;
    }
    let settings = Settings::default();
    let mut n = 0u64;
    let mut ids = || {
        n += 1;
        format!("new-{n}")
    };
    let t = Instant::now();
    let quiet = plan(&view, &settings, 10, &mut ids);
    let quiet_time = t.elapsed();
    assert!(quiet.actions.is_empty(), "a quiet cluster needs nothing");
    for i in 0..pending {
        let id = format!("p{i:031x}");
        let t = TaskRecord::pending(id.clone(), def.clone(), vec![], vec![], 2).expect("task");
        view.tasks.insert(
            id,
            Versioned {
                value: t,
                mod_revision: rev,
            },
        );
        rev += 1;
    }
    let t = Instant::now();
    let busy = plan(&view, &settings, 10, &mut ids);
    let busy_time = t.elapsed();
    let placed = busy
        .actions
        .iter()
        .filter(|a| matches!(a, Action::Place { .. }))
        .count();
    println!("reconcile::plan, {nodes} nodes, {tasks} running tasks");
    println!(
        "  quiet pass                       {:>8.1} ms",
        quiet_time.as_secs_f64() * 1000.0
    );
    println!(
        "  pass placing {placed:>6} pending       {:>8.1} ms   ({:.0} placements/s of decisions)",
        busy_time.as_secs_f64() * 1000.0,
        placed as f64 / busy_time.as_secs_f64()
    );
}
