//! Property tests for the dependency graph, against an independent reference: random graphs and
//! random task definitions with random `dependsOn` edges. A cycle is found iff one exists, and
//! otherwise the start order lists every container once, dependencies first, ties in definition
//! order.

use berth_model::{Condition, DependencyGraph, parse};
use proptest::prelude::*;
use serde_json::json;

/// The reference: repeatedly take the lowest-index node whose dependencies have all been taken.
/// Returns the order, or None when it gets stuck (which happens iff there is a cycle).
fn reference_order(n: usize, edges: &[(usize, usize)]) -> Option<Vec<usize>> {
    let mut taken = vec![false; n];
    let mut order = Vec::new();
    while order.len() < n {
        let next = (0..n).find(|&i| {
            !taken[i]
                && edges
                    .iter()
                    .filter(|&&(dependent, _)| dependent == i)
                    .all(|&(_, dependency)| taken[dependency])
        })?;
        taken[next] = true;
        order.push(next);
    }
    Some(order)
}

fn assert_real_cycle(cycle: &[usize], edges: &[(usize, usize)]) {
    assert!(cycle.len() >= 2, "cycle too short: {cycle:?}");
    assert_eq!(cycle.first(), cycle.last(), "cycle not closed: {cycle:?}");
    for pair in cycle.windows(2) {
        assert!(
            edges.contains(&(pair[0], pair[1])),
            "{} -> {} is not an edge (cycle {cycle:?}, edges {edges:?})",
            pair[0],
            pair[1]
        );
    }
}

fn graph_strategy() -> impl Strategy<Value = (usize, Vec<(usize, usize)>)> {
    (0usize..12).prop_flat_map(|n| {
        let edges = if n == 0 {
            Just(Vec::new()).boxed()
        } else {
            prop::collection::vec((0..n, 0..n), 0..(2 * n + 2)).boxed()
        };
        (Just(n), edges)
    })
}

/// Mostly sparse acyclic-leaning graphs: edges only from higher to lower indexes, plus a few
/// random back edges, so both outcomes are common.
fn mostly_acyclic_strategy() -> impl Strategy<Value = (usize, Vec<(usize, usize)>)> {
    (1usize..12).prop_flat_map(|n| {
        let forward = prop::collection::vec((0..n, 0..n), 0..(2 * n)).prop_map(|pairs| {
            pairs
                .into_iter()
                .filter(|(a, b)| a != b)
                .map(|(a, b)| (a.max(b), a.min(b)))
                .collect::<Vec<_>>()
        });
        let back = prop::collection::vec((0..n, 0..n), 0..2);
        (Just(n), forward, back).prop_map(|(n, mut forward, back)| {
            forward.extend(back);
            (n, forward)
        })
    })
}

fn check_graph(n: usize, edges: &[(usize, usize)]) {
    let names: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
    let graph = DependencyGraph::from_edges(
        names,
        edges
            .iter()
            .map(|&(a, b)| (a, b, Condition::Start))
            .collect(),
    );
    let reference = reference_order(n, edges);
    match (graph.find_cycle(), &reference) {
        (None, Some(expected)) => {
            let order = graph
                .start_order()
                .expect("acyclic graph has a start order");
            assert_eq!(&order, expected, "start order is not the stable one");
            let mut position = vec![usize::MAX; n];
            for (p, &node) in order.iter().enumerate() {
                assert_eq!(position[node], usize::MAX, "node {node} listed twice");
                position[node] = p;
            }
            for &(dependent, dependency) in edges {
                assert!(position[dependency] < position[dependent]);
            }
            let stop = graph.stop_order().expect("acyclic graph has a stop order");
            assert_eq!(stop, order.iter().rev().copied().collect::<Vec<_>>());
        }
        (Some(cycle), None) => {
            assert_real_cycle(&cycle, edges);
            let err = graph
                .start_order()
                .expect_err("cyclic graph has no start order");
            assert_real_cycle(&err, edges);
        }
        (found, reference) => {
            panic!("find_cycle = {found:?} but reference order = {reference:?} for {edges:?}")
        }
    }
    // Accessors agree with the edge list.
    for i in 0..n {
        let mut expected: Vec<usize> = edges.iter().filter(|e| e.0 == i).map(|e| e.1).collect();
        let got: Vec<usize> = graph.dependencies(i).iter().map(|d| d.0).collect();
        assert_eq!(got, expected);
        expected = edges.iter().filter(|e| e.1 == i).map(|e| e.0).collect();
        expected.sort_unstable();
        let got: Vec<usize> = graph.dependents(i).iter().map(|d| d.0).collect();
        assert_eq!(got, expected);
    }
}

/// A task definition with containers c0..c(n-1) and these edges (no self edges, no repeats).
/// Every container has a health check; conditions are chosen so that no rule other than cycles
/// can fail.
fn definition(
    n: usize,
    edges: &[(usize, usize)],
    essential: &[bool],
    conditions: &[Condition],
) -> String {
    let essential_of = |i: usize| essential.get(i).copied().unwrap_or(true) || i == n - 1;
    let containers: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            let depends_on: Vec<serde_json::Value> = edges
                .iter()
                .enumerate()
                .filter(|(_, e)| e.0 == i)
                .map(|(k, &(_, j))| {
                    let mut condition = conditions[k % conditions.len()];
                    if essential_of(j)
                        && matches!(condition, Condition::Complete | Condition::Success)
                    {
                        condition = Condition::Start;
                    }
                    json!({"containerName": format!("c{j}"), "condition": condition.as_str()})
                })
                .collect();
            json!({
                "name": format!("c{i}"),
                "image": "berth-test/busybox:latest",
                "essential": essential_of(i),
                "healthCheck": {"command": ["CMD-SHELL", "true"]},
                "dependsOn": depends_on,
            })
        })
        .collect();
    json!({"family": "props", "containerDefinitions": containers}).to_string()
}

/// Containers, edges, essential flags, conditions to cycle through.
type DefinitionCase = (usize, Vec<(usize, usize)>, Vec<bool>, Vec<Condition>);

fn definition_strategy() -> impl Strategy<Value = DefinitionCase> {
    (1usize..10).prop_flat_map(|n| {
        (
            Just(n),
            prop::collection::vec((0..n, 0..n), 0..(2 * n + 1)),
            prop::collection::vec(any::<bool>(), n),
            prop::collection::vec(prop::sample::select(Condition::ALL.to_vec()), 1..4),
        )
            .prop_map(|(n, pairs, essential, conditions)| {
                let mut edges: Vec<(usize, usize)> = Vec::new();
                for (a, b) in pairs {
                    if a != b && !edges.contains(&(a, b)) {
                        edges.push((a, b));
                    }
                }
                (n, edges, essential, conditions)
            })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_graphs((n, edges) in graph_strategy()) {
        check_graph(n, &edges);
    }

    #[test]
    fn mostly_acyclic_graphs((n, edges) in mostly_acyclic_strategy()) {
        check_graph(n, &edges);
    }

    #[test]
    fn validation_finds_a_cycle_iff_one_exists(
        (n, edges, essential, conditions) in definition_strategy()
    ) {
        let text = definition(n, &edges, &essential, &conditions);
        let cyclic = reference_order(n, &edges).is_none();
        match parse(&text) {
            Ok(parsed) => {
                prop_assert!(!cyclic, "cycle not reported for {edges:?}");
                let order = DependencyGraph::new(&parsed.definition)
                    .start_order()
                    .expect("a valid definition has a start order");
                prop_assert_eq!(Some(order), reference_order(n, &edges));
            }
            Err(invalid) => {
                prop_assert!(cyclic, "rejected an acyclic definition: {:?}", invalid.problems);
                for problem in &invalid.problems {
                    // Every problem is a cycle, and the cycle it names is real.
                    let names = problem
                        .message
                        .strip_prefix("dependency cycle: ")
                        .and_then(|m| m.strip_suffix(" (each container waits for the next)"))
                        .unwrap_or_else(|| panic!("unexpected problem {problem}"));
                    let cycle: Vec<usize> = names
                        .split(" -> ")
                        .map(|name| name.trim_start_matches('c').parse().unwrap())
                        .collect();
                    assert_real_cycle(&cycle, &edges);
                    prop_assert_eq!(
                        &problem.path,
                        &format!(
                            "containerDefinitions[{}].dependsOn[{}]",
                            cycle[0],
                            edges.iter().filter(|e| e.0 == cycle[0]).position(|e| e.1 == cycle[1]).unwrap()
                        )
                    );
                }
            }
        }
    }
}
