//! Placement: which node a task goes to, as pure functions over a snapshot of the nodes
//! ([`NodeLoad`]: capacity, what is reserved, which task groups run there). The controller builds
//! the snapshot from etcd, calls [`place`] for each pending task in order and [`NodeLoad::reserve`]s
//! what it placed, so one pass places many tasks without reading etcd again.
//!
//! As ECS's scheduler does (the ECS agent does not place; the control plane does):
//! 1. candidates are the nodes that are not draining, that have the CPU units and memory the task
//!    reserves (`RESOURCE:CPU`, `RESOURCE:MEMORY`), whose host ports the task needs are free
//!    (`RESOURCE:PORTS`: two tasks with one static host port never share a node), that every
//!    `memberOf` expression selects
//!    (`MemberOf placement constraint unsatisfied`) and, with `distinctInstance`, that run no task
//!    of the task's group (`DistinctInstance placement constraint unsatisfied`);
//! 2. the strategies, in order, each keep the candidates it scores best, the next one breaking
//!    ties: `spread` on `instanceId`/`host` or `attribute:<name>` keeps the nodes whose value has
//!    the fewest tasks of the group (counted over all nodes; a node without the attribute counts
//!    as one more value, "absent"); `binpack` on `memory` or `cpu` keeps the nodes with the least
//!    of it left after placing; `random` keeps one node by a hash of the task id and node name;
//! 3. among what remains, the first node by name (so a placement is reproducible).
//!
//! No strategy given: berth uses `spread(instanceId)` (ECS's console default for services ends
//! with it too). When no node qualifies, the reason counts the nodes per exclusion, in ECS's words.
//!
//! Scale-in is the mirror image ([`choose_stops`]): the strategies choose which of a service's
//! tasks to stop so that what stays keeps their balance, as ECS's scheduler does.

use crate::expr::Expr;
use crate::record::{Constraint, Resources, Strategy};
use std::collections::{BTreeMap, BTreeSet};

/// One node as placement sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeLoad {
    pub name: String,
    pub attributes: BTreeMap<String, String>,
    pub capacity: Resources,
    /// What the tasks placed on it reserve.
    pub used: Resources,
    /// Tasks per task group placed on it.
    pub groups: BTreeMap<String, u64>,
    /// Tasks placed on it (all groups).
    pub tasks: u64,
    pub draining: bool,
    /// The host ports its tasks hold (`"tcp/80"`).
    pub ports: BTreeSet<String>,
}

impl NodeLoad {
    /// Records a task placed here: its reservation and its group.
    pub fn reserve(&mut self, group: &str, demand: Resources) {
        self.used = self.used.saturating_add(demand);
        *self.groups.entry(group.to_owned()).or_default() += 1;
        self.tasks += 1;
    }

    /// Records host ports a task placed here holds.
    pub fn reserve_ports(&mut self, ports: &[String]) {
        self.ports.extend(ports.iter().cloned());
    }

    fn free(&self) -> Resources {
        self.capacity.saturating_sub(self.used)
    }
}

/// A constraint ready to evaluate (its expression parsed once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compiled {
    MemberOf(Expr),
    DistinctInstance,
}

/// Parses every `memberOf` expression; the error names `placementConstraints[i].expression`.
pub fn compile(constraints: &[Constraint]) -> Result<Vec<Compiled>, String> {
    constraints
        .iter()
        .enumerate()
        .map(|(i, c)| match c {
            Constraint::MemberOf { expression } => Expr::parse(expression)
                .map(Compiled::MemberOf)
                .map_err(|e| format!("placementConstraints[{i}].expression: {e}")),
            Constraint::DistinctInstance => Ok(Compiled::DistinctInstance),
        })
        .collect()
}

/// Checks each strategy's field; the error names `placementStrategy[i].field`.
pub fn check_strategy(strategy: &[Strategy]) -> Result<(), String> {
    for (i, s) in strategy.iter().enumerate() {
        match s {
            Strategy::Spread { field } => {
                if !(field == "instanceId"
                    || field == "host"
                    || field
                        .strip_prefix("attribute:")
                        .is_some_and(|n| !n.is_empty()))
                {
                    return Err(format!(
                        "placementStrategy[{i}].field: spread takes instanceId, host or attribute:<name>, not {field:?}"
                    ));
                }
            }
            Strategy::Binpack { field } => {
                if field != "cpu" && field != "memory" {
                    return Err(format!(
                        "placementStrategy[{i}].field: binpack takes cpu or memory, not {field:?}"
                    ));
                }
            }
            Strategy::Random => {}
        }
    }
    Ok(())
}

/// What is being placed.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub id: &'a str,
    pub group: &'a str,
    pub demand: Resources,
    /// The host ports it needs free (`"tcp/80"`).
    pub ports: &'a [String],
    pub constraints: &'a [Compiled],
    pub strategy: &'a [Strategy],
}

/// Why a node is not a candidate, in ECS's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Excluded {
    Draining,
    Cpu,
    Memory,
    Ports,
    MemberOf,
    DistinctInstance,
}

impl Excluded {
    fn words(self) -> &'static str {
        match self {
            Excluded::Draining => "DRAINING",
            Excluded::Cpu => "RESOURCE:CPU",
            Excluded::Memory => "RESOURCE:MEMORY",
            Excluded::Ports => "RESOURCE:PORTS",
            Excluded::MemberOf => "MemberOf placement constraint unsatisfied",
            Excluded::DistinctInstance => "DistinctInstance placement constraint unsatisfied",
        }
    }
}

fn exclusion(req: &Request<'_>, node: &NodeLoad) -> Option<Excluded> {
    if node.draining {
        return Some(Excluded::Draining);
    }
    let free = node.free();
    if req.demand.cpu > free.cpu {
        return Some(Excluded::Cpu);
    }
    if req.demand.memory_mib > free.memory_mib {
        return Some(Excluded::Memory);
    }
    if req.ports.iter().any(|p| node.ports.contains(p)) {
        return Some(Excluded::Ports);
    }
    for c in req.constraints {
        match c {
            Compiled::MemberOf(e) if !e.matches(node) => return Some(Excluded::MemberOf),
            Compiled::DistinctInstance if node.groups.get(req.group).copied().unwrap_or(0) > 0 => {
                return Some(Excluded::DistinctInstance);
            }
            _ => {}
        }
    }
    None
}

/// Whether `node` could take the task (used by tests and by `berth cluster` to explain).
pub fn fits(req: &Request<'_>, node: &NodeLoad) -> bool {
    exclusion(req, node).is_none()
}

/// FNV-1a over the task id and node name: the `random` strategy's reproducible choice (a hash
/// std does not promise to keep stable across releases would move tasks between builds).
fn fnv(id: &str, node: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes().chain([0]).chain(node.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The spread value of a node for `field` (None: the attribute is absent).
fn spread_value<'n>(field: &str, node: &'n NodeLoad) -> Option<&'n str> {
    match field.strip_prefix("attribute:") {
        Some(name) => node.attributes.get(name).map(String::as_str),
        None => Some(node.name.as_str()),
    }
}

/// ECS's strategy when a task or service gives none: `spread(instanceId)`.
fn default_strategy() -> [Strategy; 1] {
    [Strategy::Spread {
        field: "instanceId".to_owned(),
    }]
}

/// `strategy`, or `default` when it is empty.
fn or_default<'s>(strategy: &'s [Strategy], default: &'s [Strategy]) -> &'s [Strategy] {
    if strategy.is_empty() {
        default
    } else {
        strategy
    }
}

/// A count per spread value (`attribute:<name>`; a node without it counts as the value absent).
struct SpreadTotals<'n>(BTreeMap<Option<&'n str>, u64>);

impl SpreadTotals<'_> {
    /// The total of `node`'s value.
    fn of(&self, field: &str, node: &NodeLoad) -> u64 {
        self.0.get(&spread_value(field, node)).copied().unwrap_or(0)
    }
}

/// The sum of `count(n)` over the nodes of each spread value.
fn spread_totals<'n>(
    field: &str,
    nodes: &'n [NodeLoad],
    count: impl Fn(usize) -> u64,
) -> SpreadTotals<'n> {
    let mut per_value = BTreeMap::new();
    for (n, node) in nodes.iter().enumerate() {
        *per_value.entry(spread_value(field, node)).or_default() += count(n);
    }
    SpreadTotals(per_value)
}

/// What binpack on `field` (`cpu`, else memory) counts of `free`.
fn binpack_amount(field: &str, free: Resources) -> u64 {
    if field == "cpu" {
        free.cpu
    } else {
        free.memory_mib
    }
}

/// The candidates whose score is `best`, in their order.
fn scored(candidates: &[usize], score: &[u64], best: u64) -> Vec<usize> {
    candidates
        .iter()
        .zip(score)
        .filter(|(_, s)| **s == best)
        .map(|(&i, _)| i)
        .collect()
}

/// The index in `nodes` of the node the task goes to, or the reason no node can take it.
pub fn place(req: &Request<'_>, nodes: &[NodeLoad]) -> Result<usize, String> {
    if nodes.is_empty() {
        return Err("No Container Instances were found in your cluster.".to_owned());
    }
    let mut excluded: BTreeMap<Excluded, usize> = BTreeMap::new();
    let mut candidates: Vec<usize> = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        match exclusion(req, node) {
            None => candidates.push(i),
            Some(why) => *excluded.entry(why).or_default() += 1,
        }
    }
    if candidates.is_empty() {
        let parts: Vec<String> = excluded
            .iter()
            .map(|(why, n)| {
                format!(
                    "{} ({n} node{})",
                    why.words(),
                    if *n == 1 { "" } else { "s" }
                )
            })
            .collect();
        return Err(format!(
            "no node met all of the task's requirements: {}",
            parts.join(", ")
        ));
    }
    let default = default_strategy();
    for s in or_default(req.strategy, &default) {
        if candidates.len() == 1 {
            break;
        }
        let score: Vec<u64> = match s {
            // Over instances, a node's value is its own: its count is its score (no pass over
            // every node per task, which a cluster of thousands of nodes would feel).
            Strategy::Spread { field } if !field.starts_with("attribute:") => candidates
                .iter()
                .map(|&i| nodes[i].groups.get(req.group).copied().unwrap_or(0))
                .collect(),
            Strategy::Spread { field } => {
                let per_value = spread_totals(field, nodes, |n| {
                    nodes[n].groups.get(req.group).copied().unwrap_or(0)
                });
                candidates
                    .iter()
                    .map(|&i| per_value.of(field, &nodes[i]))
                    .collect()
            }
            Strategy::Binpack { field } => candidates
                .iter()
                .map(|&i| binpack_amount(field, nodes[i].free().saturating_sub(req.demand)))
                .collect(),
            Strategy::Random => candidates
                .iter()
                .map(|&i| fnv(req.id, &nodes[i].name))
                .collect(),
        };
        let best = score.iter().copied().min().unwrap_or(0);
        candidates = scored(&candidates, &score, best);
    }
    candidates
        .into_iter()
        .min_by(|&a, &b| nodes[a].name.cmp(&nodes[b].name))
        .ok_or_else(|| "no candidate left".to_owned())
}

/// A task scale-in may stop ([`choose_stops`]).
#[derive(Debug, Clone, Copy)]
pub struct Stoppable<'a> {
    pub id: &'a str,
    /// Its node (an index into the `nodes` given), None while it is not placed.
    pub node: Option<usize>,
    /// Whether it runs healthy: one that does not is stopped first (that costs nothing).
    pub healthy: bool,
    pub created_at_ms: u64,
    pub demand: Resources,
}

/// Which `count` of `tasks` (a service's tasks that stay, beyond its desired count) scale-in
/// stops, in order (indices into `tasks`), as ECS's scheduler chooses them: tasks not placed
/// first, then placed tasks that do not run healthy, then healthy ones; within each, the
/// strategies in order (none: `spread(instanceId)`, as for placing), each keeping the tasks it
/// scores best, the next one breaking ties, then the newest task:
/// - `spread` on `instanceId`/`host` or `attribute:<name>`: a task on the node (or attribute
///   value; a node without it counts as the value "absent") with the most of `tasks` left, so
///   what stays is as even as it can be;
/// - `binpack` on `cpu` or `memory`: a task on the node with the most of it free once the task
///   is stopped (the least packed node empties first);
/// - `random`: one task by a hash of its id.
///
/// Each choice counts what the choices before it stopped. `nodes` gives the nodes' attributes
/// and what is reserved on them (every open task).
pub fn choose_stops(
    tasks: &[Stoppable<'_>],
    count: usize,
    nodes: &[NodeLoad],
    strategy: &[Strategy],
) -> Vec<usize> {
    let default = default_strategy();
    let strategy = or_default(strategy, &default);
    let mut left: Vec<bool> = vec![true; tasks.len()];
    // What is reserved per node, less what this choice stops.
    let mut used: Vec<Resources> = nodes.iter().map(|n| n.used).collect();
    let mut chosen = Vec::new();
    while chosen.len() < count {
        // The class to stop from: not placed, then not healthy, then healthy.
        let class = |t: &Stoppable<'_>| match (t.node, t.healthy) {
            (None, _) => 0u8,
            (Some(_), false) => 1,
            (Some(_), true) => 2,
        };
        let Some(best_class) = tasks
            .iter()
            .zip(&left)
            .filter(|(_, l)| **l)
            .map(|(t, _)| class(t))
            .min()
        else {
            break;
        };
        let mut candidates: Vec<usize> = (0..tasks.len())
            .filter(|&i| left[i] && class(&tasks[i]) == best_class)
            .collect();
        // The tasks left per node.
        let mut per_node: Vec<u64> = vec![0; nodes.len()];
        for (t, _) in tasks.iter().zip(&left).filter(|(_, l)| **l) {
            if let Some(n) = t.node.filter(|&n| n < nodes.len()) {
                per_node[n] += 1;
            }
        }
        for s in strategy {
            if candidates.len() <= 1 {
                break;
            }
            let node_of = |i: usize| tasks[i].node.filter(|&n| n < nodes.len());
            // Higher is a better task to stop.
            let score: Vec<u64> = match s {
                Strategy::Spread { field } if !field.starts_with("attribute:") => candidates
                    .iter()
                    .map(|&i| node_of(i).map_or(0, |n| per_node[n]))
                    .collect(),
                Strategy::Spread { field } => {
                    let per_value = spread_totals(field, nodes, |n| per_node[n]);
                    candidates
                        .iter()
                        .map(|&i| node_of(i).map_or(0, |n| per_value.of(field, &nodes[n])))
                        .collect()
                }
                Strategy::Binpack { field } => candidates
                    .iter()
                    .map(|&i| {
                        node_of(i).map_or(0, |n| {
                            binpack_amount(
                                field,
                                nodes[n]
                                    .capacity
                                    .saturating_sub(used[n].saturating_sub(tasks[i].demand)),
                            )
                        })
                    })
                    .collect(),
                // The lowest hash is kept: its complement is the highest score.
                Strategy::Random => candidates
                    .iter()
                    .map(|&i| u64::MAX - fnv(tasks[i].id, ""))
                    .collect(),
            };
            let best = score.iter().copied().max().unwrap_or(0);
            candidates = scored(&candidates, &score, best);
        }
        let Some(pick) = candidates.into_iter().max_by(|&a, &b| {
            (tasks[a].created_at_ms, tasks[a].id).cmp(&(tasks[b].created_at_ms, tasks[b].id))
        }) else {
            break;
        };
        left[pick] = false;
        if let Some(n) = tasks[pick].node.filter(|&n| n < nodes.len()) {
            used[n] = used[n].saturating_sub(tasks[pick].demand);
        }
        chosen.push(pick);
    }
    chosen
}

#[cfg(test)]
mod tests;
