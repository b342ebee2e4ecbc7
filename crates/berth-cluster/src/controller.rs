//! The controller's placement pass: read the nodes, drain requests and tasks once, build each
//! node's load from the tasks already placed there, then place every pending task (oldest
//! first) with [`crate::placement::place`], each through one guarded transaction
//! ([`Cluster::place`]). A task that changed since the read (another controller placed or
//! stopped it) is skipped and seen again by the next pass; so two controllers that both think
//! they lead still never place one task twice.
//!
//! Not here yet (docs/cluster.md, "Not yet"): leader election, services, lost nodes, drain's
//! re-placement.

use crate::placement::{self, NodeLoad, Request};
use crate::record::DesiredStatus;
use crate::store::{Cluster, ClusterError};
use std::collections::{BTreeMap, BTreeSet};

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PassReport {
    /// `(task id, node)` placed by this pass.
    pub placed: Vec<(String, String)>,
    /// `(task id, reason)` still pending.
    pub unplaced: Vec<(String, String)>,
    /// Tasks skipped because they changed after the read.
    pub conflicts: usize,
}

/// One placement pass over the whole cluster.
pub async fn place_pending(cluster: &Cluster) -> Result<PassReport, ClusterError> {
    let nodes = cluster.nodes().await?;
    let drains: BTreeSet<String> = cluster.drains().await?.into_iter().collect();
    let (tasks, _) = cluster.tasks().await?;
    let mut loads: Vec<NodeLoad> = nodes
        .into_iter()
        .map(|n| NodeLoad {
            draining: drains.contains(&n.name),
            name: n.name,
            attributes: n.attributes,
            capacity: n.capacity,
            ..NodeLoad::default()
        })
        .collect();
    loads.sort_by(|a, b| a.name.cmp(&b.name));
    let index: BTreeMap<String, usize> = loads
        .iter()
        .enumerate()
        .map(|(i, l)| (l.name.clone(), i))
        .collect();
    let mut pending = Vec::new();
    for t in tasks {
        if t.value.desired_status != DesiredStatus::Running {
            continue;
        }
        match &t.value.node {
            Some(node) => {
                if let Some(&i) = index.get(node) {
                    loads[i].reserve(&t.value.group, t.value.demand);
                }
            }
            None => pending.push(t),
        }
    }
    pending.sort_by(|a, b| {
        (a.value.created_at_ms, &a.value.id).cmp(&(b.value.created_at_ms, &b.value.id))
    });
    let mut report = PassReport::default();
    for t in pending {
        let task = &t.value;
        let chosen = placement::check_strategy(&task.placement_strategy)
            .and_then(|()| placement::compile(&task.placement_constraints))
            .and_then(|constraints| {
                let req = Request {
                    id: &task.id,
                    group: &task.group,
                    demand: task.demand,
                    constraints: &constraints,
                    strategy: &task.placement_strategy,
                };
                placement::place(&req, &loads)
            });
        match chosen {
            Ok(i) => {
                let node = loads[i].name.clone();
                if cluster.place(&t, &node).await? {
                    loads[i].reserve(&task.group, task.demand);
                    report.placed.push((task.id.clone(), node));
                } else {
                    report.conflicts += 1;
                }
            }
            Err(reason) => {
                if !cluster.set_reason(&t, &reason).await? {
                    report.conflicts += 1;
                }
                report.unplaced.push((task.id.clone(), reason));
            }
        }
    }
    Ok(report)
}
