use super::*;
use crate::record::Strategy;
use proptest::prelude::{Just, any, prop_assert, prop_assert_eq, prop_oneof, proptest};
use proptest::strategy::Strategy as _;

fn node(name: &str, cpu: u64, mem: u64, attrs: &[(&str, &str)]) -> NodeLoad {
    NodeLoad {
        name: name.to_owned(),
        capacity: Resources {
            cpu,
            memory_mib: mem,
        },
        attributes: attrs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        ..NodeLoad::default()
    }
}

fn spread(field: &str) -> Strategy {
    Strategy::Spread {
        field: field.to_owned(),
    }
}
fn binpack(field: &str) -> Strategy {
    Strategy::Binpack {
        field: field.to_owned(),
    }
}

/// Places `n` tasks of one group in order, reserving each; returns the node names.
fn place_n(
    nodes: &mut [NodeLoad],
    n: usize,
    demand: Resources,
    constraints: &[Compiled],
    strategy: &[Strategy],
) -> Vec<Result<String, String>> {
    (0..n)
        .map(|k| {
            let id = format!("t{k}");
            let req = Request {
                id: &id,
                group: "service:web",
                demand,
                ports: &[],
                constraints,
                strategy,
            };
            place(&req, nodes).map(|i| {
                nodes[i].reserve("service:web", demand);
                nodes[i].name.clone()
            })
        })
        .collect()
}

const SMALL: Resources = Resources {
    cpu: 128,
    memory_mib: 128,
};

#[test]
fn six_replicas_spread_two_per_node() {
    let mut nodes = vec![
        node("a", 1024, 1024, &[]),
        node("b", 1024, 1024, &[]),
        node("c", 1024, 1024, &[]),
    ];
    let placed = place_n(&mut nodes, 6, SMALL, &[], &[]);
    assert!(placed.iter().all(Result::is_ok), "{placed:?}");
    for n in &nodes {
        assert_eq!(n.tasks, 2, "{}: {nodes:?}", n.name);
    }
}

#[test]
fn spread_by_zone_then_instance() {
    let mut nodes = vec![
        node("a1", 4096, 4096, &[("zone", "a")]),
        node("a2", 4096, 4096, &[("zone", "a")]),
        node("b1", 4096, 4096, &[("zone", "b")]),
    ];
    let placed = place_n(
        &mut nodes,
        4,
        SMALL,
        &[],
        &[spread("attribute:zone"), spread("instanceId")],
    );
    let placed: Vec<String> = placed.into_iter().map(Result::unwrap).collect();
    // Zone a, zone b, zone a (its other node), zone b.
    assert_eq!(placed, ["a1", "b1", "a2", "b1"]);
}

#[test]
fn binpack_memory_fills_the_fullest_node_that_fits() {
    let mut nodes = vec![node("big", 4096, 4096, &[]), node("small", 4096, 512, &[])];
    let demand = Resources {
        cpu: 0,
        memory_mib: 256,
    };
    let placed = place_n(&mut nodes, 4, demand, &[], &[binpack("memory")]);
    let placed: Vec<String> = placed.into_iter().map(Result::unwrap).collect();
    assert_eq!(placed, ["small", "small", "big", "big"]);
}

#[test]
fn binpack_cpu_counts_cpu_only() {
    let nodes = vec![node("a", 2048, 100, &[]), node("b", 1024, 9000, &[])];
    let req = Request {
        id: "t",
        group: "g",
        demand: Resources {
            cpu: 512,
            memory_mib: 50,
        },
        ports: &[],
        constraints: &[],
        strategy: &[binpack("cpu")],
    };
    assert_eq!(place(&req, &nodes), Ok(1));
}

#[test]
fn member_of_restricts_and_says_why() {
    let constraints = compile(&[Constraint::MemberOf {
        expression: "attribute:ecs.instance-type == gpu".into(),
    }])
    .unwrap();
    let mut nodes = vec![
        node("a", 1024, 1024, &[("ecs.instance-type", "cpu")]),
        node("g", 1024, 1024, &[("ecs.instance-type", "gpu")]),
    ];
    let placed = place_n(&mut nodes, 3, SMALL, &constraints, &[]);
    assert_eq!(placed[0].as_deref(), Ok("g"));
    assert_eq!(placed[2].as_deref(), Ok("g"));
    nodes[1].draining = true;
    let err = place_n(&mut nodes, 1, SMALL, &constraints, &[])
        .remove(0)
        .unwrap_err();
    assert_eq!(
        err,
        "no node met all of the task's requirements: DRAINING (1 node), MemberOf placement constraint unsatisfied (1 node)"
    );
}

#[test]
fn distinct_instance_never_doubles_up() {
    let constraints = [Compiled::DistinctInstance];
    let mut nodes = vec![node("a", 8192, 8192, &[]), node("b", 8192, 8192, &[])];
    let placed = place_n(&mut nodes, 3, SMALL, &constraints, &[binpack("memory")]);
    assert!(placed[0].is_ok() && placed[1].is_ok());
    assert_ne!(placed[0], placed[1]);
    assert_eq!(
        placed[2],
        Err("no node met all of the task's requirements: DistinctInstance placement constraint unsatisfied (2 nodes)".into())
    );
}

#[test]
fn resources_are_never_overcommitted() {
    let mut nodes = vec![node("a", 256, 8192, &[]), node("b", 8192, 200, &[])];
    // a has CPU for two, b memory for one.
    let placed = place_n(&mut nodes, 4, SMALL, &[], &[]);
    assert!(placed[..3].iter().all(Result::is_ok), "{placed:?}");
    assert_eq!(
        placed[3],
        Err("no node met all of the task's requirements: RESOURCE:CPU (1 node), RESOURCE:MEMORY (1 node)".into())
    );
}

#[test]
fn no_nodes_is_ecs_words() {
    let req = Request {
        id: "t",
        group: "g",
        demand: SMALL,
        ports: &[],
        constraints: &[],
        strategy: &[],
    };
    assert_eq!(
        place(&req, &[]),
        Err("No Container Instances were found in your cluster.".into())
    );
}

#[test]
fn random_is_reproducible_and_uses_more_than_one_node() {
    let nodes: Vec<NodeLoad> = (0..5)
        .map(|i| node(&format!("n{i}"), 1 << 20, 1 << 20, &[]))
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    for k in 0..50 {
        let id = format!("task-{k}");
        let req = Request {
            id: &id,
            group: "g",
            demand: SMALL,
            ports: &[],
            constraints: &[],
            strategy: &[Strategy::Random],
        };
        let first = place(&req, &nodes).unwrap();
        assert_eq!(place(&req, &nodes).unwrap(), first);
        seen.insert(first);
    }
    assert!(seen.len() >= 3, "{seen:?}");
}

#[test]
fn bad_fields_and_expressions_name_their_path() {
    let err = check_strategy(&[spread("instanceId"), binpack("disk")]).unwrap_err();
    assert_eq!(
        err,
        "placementStrategy[1].field: binpack takes cpu or memory, not \"disk\""
    );
    let err = check_strategy(&[spread("zone")]).unwrap_err();
    assert!(
        err.starts_with("placementStrategy[0].field: spread takes"),
        "{err}"
    );
    let err = compile(&[
        Constraint::DistinctInstance,
        Constraint::MemberOf {
            expression: "attribute:x =~ a.*".into(),
        },
    ])
    .unwrap_err();
    assert!(
        err.starts_with("placementConstraints[1].expression: at 12: =~"),
        "{err}"
    );
}

// --- properties -------------------------------------------------------------------------------

fn arb_nodes() -> impl proptest::strategy::Strategy<Value = Vec<NodeLoad>> {
    proptest::collection::vec((0u64..4096, 0u64..4096, 0usize..3, any::<bool>()), 1..7).prop_map(
        |specs| {
            specs
                .into_iter()
                .enumerate()
                .map(|(i, (cpu, mem, zone, drain))| {
                    let mut n = node(
                        &format!("n{i}"),
                        cpu,
                        mem,
                        &[("zone", ["a", "b", "c"][zone])],
                    );
                    n.draining = drain && i % 3 == 0;
                    n
                })
                .collect()
        },
    )
}

#[derive(Debug, Clone)]
struct Ask {
    group: usize,
    demand: Resources,
    distinct: bool,
    zone: Option<usize>,
    strategy: Vec<Strategy>,
}

fn arb_asks() -> impl proptest::strategy::Strategy<Value = Vec<Ask>> {
    let strategy = prop_oneof![
        Just(spread("instanceId")),
        Just(spread("attribute:zone")),
        Just(binpack("memory")),
        Just(binpack("cpu")),
        Just(Strategy::Random),
    ];
    proptest::collection::vec(
        (
            0usize..3,
            0u64..1024,
            0u64..1024,
            any::<bool>(),
            proptest::option::of(0usize..3),
            proptest::collection::vec(strategy, 0..3),
        )
            .prop_map(|(group, cpu, mem, distinct, zone, strategy)| Ask {
                group,
                demand: Resources {
                    cpu,
                    memory_mib: mem,
                },
                distinct,
                zone,
                strategy,
            }),
        1..40,
    )
}

proptest! {
    /// Every placement satisfies resources and constraints; a task is refused only when no node
    /// could take it; binpack picks a node with the least left of its field among those that fit.
    #[test]
    fn placements_respect_every_rule(mut nodes in arb_nodes(), asks in arb_asks()) {
        for (k, ask) in asks.iter().enumerate() {
            let group = format!("g{}", ask.group);
            let mut constraints = Vec::new();
            if ask.distinct {
                constraints.push(Constraint::DistinctInstance);
            }
            if let Some(z) = ask.zone {
                constraints.push(Constraint::MemberOf { expression: format!("attribute:zone == {}", ["a", "b", "c"][z]) });
            }
            let compiled = compile(&constraints).unwrap();
            let id = format!("t{k}");
            let req = Request { id: &id, group: &group, demand: ask.demand, ports: &[], constraints: &compiled, strategy: &ask.strategy };
            let feasible: Vec<usize> = (0..nodes.len()).filter(|&i| fits(&req, &nodes[i])).collect();
            match place(&req, &nodes) {
                Ok(i) => {
                    prop_assert!(feasible.contains(&i));
                    let n = &nodes[i];
                    prop_assert!(!n.draining);
                    prop_assert!(n.used.cpu + ask.demand.cpu <= n.capacity.cpu);
                    prop_assert!(n.used.memory_mib + ask.demand.memory_mib <= n.capacity.memory_mib);
                    if let Some(z) = ask.zone {
                        prop_assert_eq!(n.attributes.get("zone").map(String::as_str), Some(["a", "b", "c"][z]));
                    }
                    if ask.distinct {
                        prop_assert_eq!(n.groups.get(&group).copied().unwrap_or(0), 0);
                    }
                    if let Some(Strategy::Binpack { field }) = ask.strategy.first() {
                        let left = |j: usize| {
                            let f = nodes[j].capacity.saturating_sub(nodes[j].used).saturating_sub(ask.demand);
                            if field == "cpu" { f.cpu } else { f.memory_mib }
                        };
                        let best = feasible.iter().map(|&j| left(j)).min().unwrap();
                        prop_assert_eq!(left(i), best);
                    }
                    nodes[i].reserve(&group, ask.demand);
                }
                Err(_) => prop_assert!(feasible.is_empty()),
            }
        }
    }

    /// spread(instanceId) over equal nodes keeps the group's counts within one of each other.
    #[test]
    fn spread_keeps_counts_within_one(n_nodes in 1usize..8, n_tasks in 0usize..40) {
        let mut nodes: Vec<NodeLoad> = (0..n_nodes).map(|i| node(&format!("n{i}"), 1 << 20, 1 << 20, &[])).collect();
        for (k, r) in place_n(&mut nodes, n_tasks, SMALL, &[], &[spread("instanceId")]).into_iter().enumerate() {
            prop_assert!(r.is_ok(), "task {k}: {r:?}");
            let counts: Vec<u64> = nodes.iter().map(|n| n.tasks).collect();
            let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
            prop_assert!(hi - lo <= 1, "{counts:?}");
        }
    }
}

#[test]
fn a_host_port_in_use_excludes_the_node() {
    let mut nodes = vec![node("a", 4096, 4096, &[]), node("b", 4096, 4096, &[])];
    let ports = ["tcp/80".to_owned()];
    let req = Request {
        id: "t",
        group: "service:web",
        demand: SMALL,
        ports: &ports,
        constraints: &[],
        strategy: &[],
    };
    let first = place(&req, &nodes).unwrap();
    nodes[first].reserve("service:web", SMALL);
    nodes[first].reserve_ports(&ports);
    let second = place(&req, &nodes).unwrap();
    assert_ne!(
        first, second,
        "two tasks with host port 80 never share a node"
    );
    nodes[second].reserve("service:web", SMALL);
    nodes[second].reserve_ports(&ports);
    assert_eq!(
        place(&req, &nodes).unwrap_err(),
        "no node met all of the task's requirements: RESOURCE:PORTS (2 nodes)"
    );
    // Another port, or another protocol, is free.
    let udp = ["udp/80".to_owned()];
    assert!(place(&Request { ports: &udp, ..req }, &nodes).is_ok());
}
