//! The container dependency graph of a task: `dependsOn` and `links` edges, cycle detection, a
//! stable start order, and rendering as Graphviz DOT or as readable text; beside the edges, the
//! `volumesFrom` references, resolved the same way, for the engine.
//!
//! Nodes are container indexes in definition order. An edge goes from a *dependent* to its
//! *dependency* (the container it waits for), labelled with the [`Condition`]. A `links` entry is
//! an edge of its own kind ([`DependencyGraph::links`]), which orders the start like a `START`
//! dependency (as ECS does): the graph's cycle search and start order follow `dependsOn` and
//! `links` edges, and both are drawn. Validation in [`crate::parse()`] uses
//! [`DependencyGraph::find_cycle`], so there is one cycle detector; it counts `volumesFrom` and
//! `links` as `START` edges there. `volumesFrom` references are kept apart
//! ([`DependencyGraph::volumes_from`], [`DependencyGraph::volume_users`]) and take no part in the
//! graph's own start order or drawings, so the engine resolves every reference between containers
//! here, once, by index.

use crate::types::{Condition, ContainerDefinition, TaskDefinition};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::fmt::{self, Write as _};
use std::str::FromStr;

/// Who waits for whom in a task. Cheap to build; holds names and edges only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DependencyGraph {
    names: Vec<String>,
    /// `dependencies[i]`: what container `i` waits for, in `dependsOn` order.
    dependencies: Vec<Vec<(usize, Condition)>>,
    /// `dependents[i]`: who waits for container `i`, in definition order.
    dependents: Vec<Vec<(usize, Condition)>>,
    /// `volumes_from[i]`: whose volumes container `i` mounts, in `volumesFrom` order.
    volumes_from: Vec<Vec<usize>>,
    /// `volume_users[i]`: who mounts container `i`'s volumes, in definition order.
    volume_users: Vec<Vec<usize>>,
    /// `links[i]`: the containers `i` links to, with the alias, in `links` order.
    links: Vec<Vec<(usize, String)>>,
    /// `link_users[i]`: who links to container `i`, in definition order, each once.
    link_users: Vec<Vec<usize>>,
    /// Each name's first index.
    index: BTreeMap<String, usize>,
}

// Test builds count the graph's elementary steps — a name resolved, an edge followed by the
// cycle search, a link user recorded — so a test can show that the work grows in proportion to
// the task, not to its square. Nothing is counted in other builds.
#[cfg(test)]
thread_local! {
    static STEPS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn step() {
    #[cfg(test)]
    STEPS.with(|s| s.set(s.get() + 1));
}

/// Each name's first index in `names`.
fn first_indexes(names: &[String]) -> BTreeMap<String, usize> {
    let mut index = BTreeMap::new();
    for (i, n) in names.iter().enumerate() {
        index.entry(n.clone()).or_insert(i);
    }
    index
}

impl DependencyGraph {
    /// The graph of a task definition: one node per container, one edge per `dependsOn` entry, per
    /// `START` dependency FireLens adds ([`crate::firelens::implicit_dependencies`]) and
    /// per `links` entry, and each `volumesFrom` entry resolved to its source. A name resolves to the first container
    /// with that name; entries naming an unknown container are skipped (they cannot occur in a
    /// validated definition).
    pub fn new(def: &TaskDefinition) -> Self {
        let names: Vec<String> = def
            .container_definitions
            .iter()
            .map(|c| c.name.clone())
            .collect();
        // Each name resolved once through a map, never by a scan per reference: a task whose
        // containers all name one other costs in proportion to its references.
        let index = first_indexes(&names);
        let index_of = |name: &str| {
            step();
            index.get(name).copied()
        };
        let mut edges = Vec::new();
        let mut volumes_from = vec![Vec::new(); names.len()];
        let mut links = vec![Vec::new(); names.len()];
        // FireLens: containers logging to the router start after it (ECS adds these edges).
        let implicit = crate::firelens::implicit_dependencies(def);
        for (i, container) in def.container_definitions.iter().enumerate() {
            for dep in &container.depends_on {
                if let Some(j) = index_of(&dep.container_name) {
                    edges.push((i, j, dep.condition));
                }
            }
            for entry in &container.volumes_from {
                if let Some(j) = index_of(&entry.source_container) {
                    volumes_from[i].push(j);
                }
            }
            for link in &container.links {
                if let Some(j) = index_of(&link.container_name) {
                    links[i].push((j, link.alias.clone()));
                }
            }
        }
        // After every dependsOn edge: `from_edges` keeps each container's own dependsOn order
        // first and its implicit edges after it.
        edges.extend(implicit);
        let mut graph = Self::from_edges(names, edges);
        for (user, sources) in volumes_from.iter().enumerate() {
            for &source in sources {
                graph.volume_users[source].push(user);
            }
        }
        graph.volumes_from = volumes_from;
        for (user, targets) in links.iter().enumerate() {
            for &(target, _) in targets {
                // Users come in ascending order, so a repeat is the last one pushed.
                step();
                if graph.link_users[target].last() != Some(&user) {
                    graph.link_users[target].push(user);
                }
            }
        }
        graph.links = links;
        graph
    }

    /// A graph from raw parts: node names, and edges `(dependent, dependency, condition)` as indexes
    /// into `names`. Edges with an index out of range are skipped. No `volumesFrom` references and
    /// no links.
    pub fn from_edges(names: Vec<String>, edges: Vec<(usize, usize, Condition)>) -> Self {
        let n = names.len();
        let mut dependencies = vec![Vec::new(); n];
        let mut dependents = vec![Vec::new(); n];
        for (dependent, dependency, condition) in edges {
            if dependent < n && dependency < n {
                dependencies[dependent].push((dependency, condition));
                dependents[dependency].push((dependent, condition));
            }
        }
        for list in &mut dependents {
            list.sort_by_key(|&(i, _)| i);
        }
        DependencyGraph {
            index: first_indexes(&names),
            names,
            dependencies,
            dependents,
            volumes_from: vec![Vec::new(); n],
            volume_users: vec![Vec::new(); n],
            links: vec![Vec::new(); n],
            link_users: vec![Vec::new(); n],
        }
    }

    /// Number of containers (nodes).
    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Container names, by index.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The name of node `i` ("" when out of range).
    pub fn name(&self, i: usize) -> &str {
        self.names.get(i).map_or("", String::as_str)
    }

    /// The index of the first container with this name.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        step();
        self.index.get(name).copied()
    }

    /// What container `i` waits for, with the condition, in `dependsOn` order.
    pub fn dependencies(&self, i: usize) -> &[(usize, Condition)] {
        self.dependencies.get(i).map_or(&[], Vec::as_slice)
    }

    /// The containers that wait for container `i`, with their condition, in definition order.
    pub fn dependents(&self, i: usize) -> &[(usize, Condition)] {
        self.dependents.get(i).map_or(&[], Vec::as_slice)
    }

    /// The containers whose volumes container `i` mounts (`volumesFrom`), in `volumesFrom` order.
    pub fn volumes_from(&self, i: usize) -> &[usize] {
        self.volumes_from.get(i).map_or(&[], Vec::as_slice)
    }

    /// The containers that mount container `i`'s volumes (`volumesFrom`), in definition order.
    pub fn volume_users(&self, i: usize) -> &[usize] {
        self.volume_users.get(i).map_or(&[], Vec::as_slice)
    }

    /// The containers container `i` links to (`links`), with the alias, in `links` order.
    pub fn links(&self, i: usize) -> &[(usize, String)] {
        self.links.get(i).map_or(&[], Vec::as_slice)
    }

    /// The containers that link to container `i`, in definition order, each once.
    pub fn link_users(&self, i: usize) -> &[usize] {
        self.link_users.get(i).map_or(&[], Vec::as_slice)
    }

    /// What orders container `i`'s start: its `dependsOn` targets, then its link targets.
    fn waits_for(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        self.dependencies(i)
            .iter()
            .map(|&(j, _)| j)
            .chain(self.links(i).iter().map(|(j, _)| *j))
    }

    /// The `k`th container `i` waits for, as [`waits_for`](Self::waits_for) lists them, found
    /// by index (the cycle search asks for each in turn; walking the list again each time would
    /// cost the square of a wide fan-in).
    fn waits_for_at(&self, i: usize, k: usize) -> Option<usize> {
        step();
        let deps = self.dependencies(i);
        match deps.get(k) {
            Some(&(j, _)) => Some(j),
            None => self.links(i).get(k - deps.len()).map(|(j, _)| *j),
        }
    }

    /// A dependency cycle, if there is one, as the node list walked along the edges with the first
    /// node repeated at the end (`[a, b, a]` for `a -> b -> a`; `[a, a]` for a self-dependency).
    /// Follows `dependsOn` and then `links` edges. Deterministic: the search starts from the lowest
    /// index and follows edges in order.
    pub fn find_cycle(&self) -> Option<Vec<usize>> {
        #[derive(Clone, Copy, PartialEq)]
        enum Color {
            Unseen,
            OnPath,
            Done,
        }
        let n = self.len();
        let mut color = vec![Color::Unseen; n];
        // Iterative depth-first search: (node, index of the next edge to follow).
        let mut path: Vec<(usize, usize)> = Vec::new();
        for root in 0..n {
            if color[root] != Color::Unseen {
                continue;
            }
            color[root] = Color::OnPath;
            path.push((root, 0));
            while let Some(top) = path.last_mut() {
                let node = top.0;
                let Some(next) = self.waits_for_at(node, top.1) else {
                    color[node] = Color::Done;
                    path.pop();
                    continue;
                };
                top.1 += 1;
                match color[next] {
                    Color::Unseen => {
                        color[next] = Color::OnPath;
                        path.push((next, 0));
                    }
                    Color::OnPath => {
                        // Nodes coloured OnPath are exactly those on `path`, so `position` finds it.
                        let start = path.iter().position(|&(x, _)| x == next)?;
                        let mut cycle: Vec<usize> = path[start..].iter().map(|&(x, _)| x).collect();
                        cycle.push(next);
                        return Some(cycle);
                    }
                    Color::Done => {}
                }
            }
        }
        None
    }

    /// A start order: every container after all the containers it waits for (`dependsOn`) or
    /// links to (`links`). Stable: among
    /// containers that could go next, the one defined first goes first. `Err` carries a cycle
    /// (as [`find_cycle`](Self::find_cycle) returns it) when there is no such order.
    pub fn start_order(&self) -> Result<Vec<usize>, Vec<usize>> {
        let n = self.len();
        let mut waiting: Vec<usize> = (0..n).map(|i| self.waits_for(i).count()).collect();
        // Who waits for whom, counted once per edge (a container may both depend on and link to
        // the same container: two edges, two decrements).
        let mut waiters: Vec<Vec<usize>> = vec![Vec::new(); n];
        for j in 0..n {
            for k in self.waits_for(j) {
                waiters[k].push(j);
            }
        }
        let mut ready: BinaryHeap<Reverse<usize>> =
            (0..n).filter(|&i| waiting[i] == 0).map(Reverse).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(Reverse(i)) = ready.pop() {
            order.push(i);
            for &dependent in &waiters[i] {
                waiting[dependent] -= 1;
                if waiting[dependent] == 0 {
                    ready.push(Reverse(dependent));
                }
            }
        }
        if order.len() == n {
            Ok(order)
        } else {
            // Kahn's algorithm stalls only on a cycle, so find_cycle returns Some here.
            Err(self.find_cycle().unwrap_or_default())
        }
    }

    /// A stop order: the start order reversed, so every container stops before what it waits for.
    pub fn stop_order(&self) -> Result<Vec<usize>, Vec<usize>> {
        self.start_order().map(|mut order| {
            order.reverse();
            order
        })
    }

    /// Names along a cycle, `a -> b -> a`.
    pub fn describe_cycle(&self, cycle: &[usize]) -> String {
        cycle
            .iter()
            .map(|&i| self.name(i))
            .collect::<Vec<_>>()
            .join(" -> ")
    }

    /// Draws the graph. `def` supplies images, essential flags and health checks; it should be the
    /// definition the graph was built from (containers are matched by name, missing ones drawn plain).
    pub fn render(&self, def: &TaskDefinition, format: GraphFormat) -> String {
        match format {
            GraphFormat::Dot => self.render_dot(def),
            GraphFormat::Text => self.render_text(def),
        }
    }

    fn render_dot(&self, def: &TaskDefinition) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail; the results of writeln! are ignored for that reason.
        let _ = writeln!(out, "digraph {} {{", dot_quote(&def.family));
        let _ = writeln!(out, "  label={};", dot_quote(&title(def)));
        let _ = writeln!(out, "  labelloc=t;");
        let _ = writeln!(out, "  rankdir=RL;");
        let _ = writeln!(
            out,
            "  // An edge points from a container to the container it waits for, so containers read in start\n  // order from left to right.\n  \
             // Essential containers are bold with a double border; non-essential ones are dashed."
        );
        let _ = writeln!(out, "  node [shape=box, fontname=\"Helvetica\"];");
        let _ = writeln!(out, "  edge [fontname=\"Helvetica\", fontsize=10];");
        for name in &self.names {
            let container = def.container(name);
            let mut label = dot_escape(name);
            let mut style = String::new();
            if let Some(c) = container {
                label.push_str("\\n");
                label.push_str(&dot_escape(&c.image));
                if c.health_check.is_some() {
                    label.push_str("\\n(health check)");
                }
                style = if c.essential {
                    ", style=bold, peripheries=2".to_owned()
                } else {
                    ", style=dashed".to_owned()
                };
            }
            let _ = writeln!(out, "  {} [label=\"{label}\"{style}];", dot_quote(name));
        }
        for (i, deps) in self.dependencies.iter().enumerate() {
            for &(j, condition) in deps {
                let _ = writeln!(
                    out,
                    "  {} -> {} [label=\"{}\"];",
                    dot_quote(self.name(i)),
                    dot_quote(self.name(j)),
                    condition.as_str()
                );
            }
        }
        for (i, links) in self.links.iter().enumerate() {
            for (j, alias) in links {
                let _ = writeln!(
                    out,
                    "  {} -> {} [label=\"link: {}\", style=dashed];",
                    dot_quote(self.name(i)),
                    dot_quote(self.name(*j)),
                    dot_escape(alias)
                );
            }
        }
        out.push_str("}\n");
        out
    }

    fn render_text(&self, def: &TaskDefinition) -> String {
        let mut out = String::new();
        let order = match self.start_order() {
            Ok(order) => {
                let _ = writeln!(
                    out,
                    "start order for {} (each container starts after the ones it waits for)",
                    title(def)
                );
                order
            }
            Err(cycle) => {
                let _ = writeln!(
                    out,
                    "{} has no start order: dependency cycle: {}",
                    title(def),
                    self.describe_cycle(&cycle)
                );
                (0..self.len()).collect()
            }
        };
        let number_width = order.len().to_string().len();
        let name_width = self.names.iter().map(String::len).max().unwrap_or(0);
        for (position, &i) in order.iter().enumerate() {
            let name = self.name(i);
            let container = def.container(name);
            let mut line = format!("  {:>number_width$}. {name:<name_width$}", position + 1);
            if let Some(c) = container {
                let essential = if c.essential {
                    "(essential: yes)"
                } else {
                    "(essential: no) "
                };
                let _ = write!(line, "  {essential}  {}", c.image);
                if let Some(hc) = &c.health_check {
                    let _ = write!(line, "  health check: {}", hc.command.join(" "));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
            let indent = " ".repeat(2 + number_width + 2);
            for &(j, condition) in self.dependencies(i) {
                let _ = writeln!(
                    out,
                    "{indent}waits for {}: {} ({})",
                    self.name(j),
                    condition.as_str(),
                    condition_meaning(condition, def.container(self.name(j)))
                );
            }
            for (j, alias) in self.links(i) {
                let target = self.name(*j);
                let _ = writeln!(
                    out,
                    "{indent}links to {target} as {alias}: START (until it has started)"
                );
            }
        }
        out
    }
}

/// How to draw a dependency graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GraphFormat {
    /// Graphviz DOT, for `dot -Tsvg`.
    Dot,
    /// An indented list in start order, with each container's conditions.
    Text,
}

impl GraphFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            GraphFormat::Dot => "dot",
            GraphFormat::Text => "text",
        }
    }
}

impl fmt::Display for GraphFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A graph format name that is neither `dot` nor `text`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown graph format {0:?}; use dot or text")]
pub struct UnknownGraphFormat(pub String);

impl FromStr for GraphFormat {
    type Err = UnknownGraphFormat;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "dot" => Ok(GraphFormat::Dot),
            "text" => Ok(GraphFormat::Text),
            _ => Err(UnknownGraphFormat(s.to_owned())),
        }
    }
}

/// `family:revision`, or just `family` when the revision is unknown (0).
fn title(def: &TaskDefinition) -> String {
    if def.revision == 0 {
        def.family.clone()
    } else {
        format!("{}:{}", def.family, def.revision)
    }
}

fn condition_meaning(condition: Condition, dependency: Option<&ContainerDefinition>) -> String {
    match condition {
        Condition::Start => "until it has started".to_owned(),
        Condition::Complete => "until it has exited, whatever its exit code".to_owned(),
        Condition::Success => "until it has exited with code 0".to_owned(),
        Condition::Healthy => match dependency.and_then(|c| c.health_check.as_ref()) {
            Some(hc) => format!("until its health check passes: {}", hc.command.join(" ")),
            None => "until its health check passes".to_owned(),
        },
    }
}

fn dot_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => {}
            c => out.push(c),
        }
    }
    out
}

fn dot_quote(s: &str) -> String {
    format!("\"{}\"", dot_escape(s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use Condition::*;

    fn graph(n: usize, edges: &[(usize, usize)]) -> DependencyGraph {
        DependencyGraph::from_edges(
            (0..n).map(|i| format!("c{i}")).collect(),
            edges.iter().map(|&(a, b)| (a, b, Start)).collect(),
        )
    }

    /// The steps counted while building the graph of `n` containers shaped as a wide task: every
    /// container but the first waits for the first (`dependsOn` START) and links to it (a
    /// fan-out), the last also waits for every other (a fan-in); then its cycle search and
    /// start order, and every name resolved once more as the engine does.
    fn work(n: usize) -> u64 {
        let mut containers: Vec<ContainerDefinition> = (0..n)
            .map(|i| ContainerDefinition::new(format!("c{i}"), "busybox"))
            .collect();
        for c in containers.iter_mut().skip(1) {
            c.depends_on.push(crate::Dependency {
                container_name: "c0".into(),
                condition: Start,
            });
            c.links.push(crate::Link::new("c0"));
        }
        let last = format!("c{}", n - 1);
        for i in 1..n - 1 {
            if let Some(c) = containers.iter_mut().find(|c| c.name == last) {
                c.depends_on.push(crate::Dependency {
                    container_name: format!("c{i}"),
                    condition: Start,
                });
            }
        }
        let def = TaskDefinition::new("wide", containers);
        STEPS.with(|s| s.set(0));
        let g = DependencyGraph::new(&def);
        assert_eq!(g.find_cycle(), None);
        assert!(g.start_order().is_ok());
        for c in &def.container_definitions {
            for d in &c.depends_on {
                assert!(g.index_of(&d.container_name).is_some());
            }
        }
        STEPS.with(std::cell::Cell::get)
    }

    #[test]
    fn a_wide_task_costs_in_proportion_to_its_size_not_its_square() {
        let (small, large) = (work(500), work(2000));
        // Four times the containers and references: about four times the steps (a square would
        // be sixteen times).
        assert!(
            large <= small * 5,
            "{small} steps for 500 containers, {large} for 2000: the work grows faster than the task"
        );
        assert!(small >= 500, "the steps are counted: {small}");
    }

    #[test]
    fn empty_graph_has_empty_order() {
        let g = graph(0, &[]);
        assert_eq!(g.find_cycle(), None);
        assert_eq!(g.start_order(), Ok(vec![]));
        assert!(g.is_empty());
    }

    #[test]
    fn start_order_puts_dependencies_first_and_is_stable() {
        // c0 waits for c2; c1 waits for nothing; c2 waits for c3.
        let g = graph(4, &[(0, 2), (2, 3)]);
        assert_eq!(g.start_order(), Ok(vec![1, 3, 2, 0]));
        assert_eq!(g.stop_order(), Ok(vec![0, 2, 3, 1]));
    }

    #[test]
    fn independent_containers_keep_definition_order() {
        assert_eq!(graph(3, &[]).start_order(), Ok(vec![0, 1, 2]));
    }

    #[test]
    fn finds_self_loop() {
        assert_eq!(graph(2, &[(1, 1)]).find_cycle(), Some(vec![1, 1]));
    }

    #[test]
    fn finds_long_cycle_and_start_order_fails_with_it() {
        let g = graph(4, &[(0, 1), (1, 2), (2, 3), (3, 1)]);
        assert_eq!(g.find_cycle(), Some(vec![1, 2, 3, 1]));
        assert_eq!(g.start_order(), Err(vec![1, 2, 3, 1]));
        assert_eq!(g.describe_cycle(&[1, 2, 3, 1]), "c1 -> c2 -> c3 -> c1");
    }

    #[test]
    fn diamond_is_acyclic() {
        let g = graph(4, &[(0, 1), (0, 2), (1, 3), (2, 3)]);
        assert_eq!(g.find_cycle(), None);
        assert_eq!(g.start_order(), Ok(vec![3, 1, 2, 0]));
    }

    #[test]
    fn accessors_and_out_of_range_edges() {
        let g = DependencyGraph::from_edges(
            vec!["a".into(), "b".into(), "c".into()],
            vec![(2, 0, Success), (1, 0, Healthy), (0, 9, Start)],
        );
        assert_eq!(g.dependencies(2), &[(0, Success)]);
        assert_eq!(g.dependents(0), &[(1, Healthy), (2, Success)]);
        assert_eq!(g.dependencies(0), &[]);
        assert_eq!(g.dependencies(42), &[]);
        assert_eq!(g.index_of("b"), Some(1));
        assert_eq!(g.name(7), "");
    }

    #[test]
    fn new_resolves_depends_on_and_volumes_from_by_index() {
        use crate::types::{Dependency, VolumeFrom};
        let mut a = ContainerDefinition::new("a", "img");
        let b = ContainerDefinition::new("b", "img");
        let mut c = ContainerDefinition::new("c", "img");
        a.volumes_from.push(VolumeFrom {
            source_container: "b".into(),
            read_only: false,
        });
        c.depends_on.push(Dependency {
            container_name: "a".into(),
            condition: Success,
        });
        c.depends_on.push(Dependency {
            container_name: "nobody".into(),
            condition: Start,
        });
        for source in ["b", "a", "nobody"] {
            c.volumes_from.push(VolumeFrom {
                source_container: source.into(),
                read_only: true,
            });
        }
        let def = TaskDefinition::new("f", vec![a, b, c]);
        let g = DependencyGraph::new(&def);
        assert_eq!(g.dependencies(2), &[(0, Success)]);
        assert_eq!(g.dependencies(0), &[]);
        assert_eq!(g.volumes_from(0), &[1]);
        assert_eq!(g.volumes_from(2), &[1, 0]);
        assert_eq!(g.volume_users(1), &[0, 2]);
        assert_eq!(g.volume_users(0), &[2]);
        assert_eq!(g.volumes_from(9), &[] as &[usize]);
        // volumesFrom does not take part in the start order (it is drawn from dependsOn only).
        assert_eq!(g.start_order(), Ok(vec![0, 1, 2]));
    }

    fn linked(links: &[(&str, &[(&str, &str)])]) -> TaskDefinition {
        use crate::types::Link;
        let container_definitions = links
            .iter()
            .map(|(name, targets)| {
                let mut c = ContainerDefinition::new(*name, "img");
                c.links = targets
                    .iter()
                    .map(|(t, alias)| Link::with_alias(*t, *alias))
                    .collect();
                c
            })
            .collect();
        TaskDefinition {
            revision: 1,
            ..TaskDefinition::new("f", container_definitions)
        }
    }

    #[test]
    fn links_order_the_start_like_start_dependencies() {
        // app links to db and cache; cache links to db; nobody is unknown and skipped.
        let def = linked(&[
            (
                "app",
                &[("db", "database"), ("cache", "cache"), ("nobody", "x")],
            ),
            ("cache", &[("db", "db")]),
            ("db", &[]),
        ]);
        let g = DependencyGraph::new(&def);
        assert_eq!(
            g.links(0),
            &[(2, "database".to_owned()), (1, "cache".to_owned())]
        );
        assert_eq!(g.link_users(2), &[0, 1]);
        assert_eq!(g.link_users(0), &[] as &[usize]);
        assert_eq!(g.dependencies(0), &[], "links are not dependsOn entries");
        assert_eq!(g.find_cycle(), None);
        assert_eq!(g.start_order(), Ok(vec![2, 1, 0]));
        assert_eq!(g.stop_order(), Ok(vec![0, 1, 2]));
    }

    #[test]
    fn a_cycle_through_a_link_is_found() {
        // a links to b; b depends on a.
        let mut def = linked(&[("a", &[("b", "b")]), ("b", &[])]);
        def.container_definitions[1]
            .depends_on
            .push(crate::types::Dependency {
                container_name: "a".into(),
                condition: Start,
            });
        let g = DependencyGraph::new(&def);
        assert_eq!(g.find_cycle(), Some(vec![0, 1, 0]));
        assert_eq!(g.start_order(), Err(vec![0, 1, 0]));
        // Linking to the same container twice, and depending on it too: still one order.
        let mut def = linked(&[("a", &[("b", "x"), ("b", "y")]), ("b", &[])]);
        def.container_definitions[0]
            .depends_on
            .push(crate::types::Dependency {
                container_name: "b".into(),
                condition: Start,
            });
        assert_eq!(DependencyGraph::new(&def).start_order(), Ok(vec![1, 0]));
    }

    #[test]
    fn links_are_drawn() {
        let def = linked(&[("web", &[("db", "database")]), ("db", &[])]);
        let g = DependencyGraph::new(&def);
        let text = g.render(&def, GraphFormat::Text);
        assert_eq!(
            text,
            "start order for f:1 (each container starts after the ones it waits for)\n\
             \x20 1. db   (essential: yes)  img\n\
             \x20 2. web  (essential: yes)  img\n\
             \x20    links to db as database: START (until it has started)\n"
        );
        let dot = g.render(&def, GraphFormat::Dot);
        assert!(
            dot.contains("  \"web\" -> \"db\" [label=\"link: database\", style=dashed];\n"),
            "{dot}"
        );
    }

    #[test]
    fn graph_format_from_str() {
        assert_eq!("dot".parse(), Ok(GraphFormat::Dot));
        assert_eq!("TEXT".parse(), Ok(GraphFormat::Text));
        let err = "svg".parse::<GraphFormat>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown graph format \"svg\"; use dot or text"
        );
        assert_eq!(GraphFormat::Dot.to_string(), "dot");
    }

    #[test]
    fn dot_escaping() {
        assert_eq!(dot_quote("a\"b\\c"), "\"a\\\"b\\\\c\"");
    }
}
