//! Cross-field checks, run once the whole definition has been read: unique names, `dependsOn`
//! references and conditions, dependency cycles (through [`DependencyGraph`]), mount points and
//! `volumesFrom` and `links` naming what exists, link aliases, host ports, and what the network
//! mode allows (links only in `bridge`, as ECS).

use super::checker::{Checker, key_path};
use super::container::ContainerInfo;
use super::json::quote;
use super::volume::VolumeInfo;
use crate::graph::DependencyGraph;
use crate::types::{Condition, ContainerDefinition, NetworkMode, Volume};
use std::collections::HashMap;

impl Checker {
    pub(super) fn duplicate_volumes(&mut self, volumes: &[(Volume, VolumeInfo)]) {
        let mut first: HashMap<&str, &str> = HashMap::new();
        for (_, info) in volumes {
            let Some(name) = &info.name else { continue };
            if let Some(earlier) = first.get(name.as_str()) {
                self.error(
                    key_path(&info.path, "name"),
                    format!("duplicate volume name {} (also {earlier})", quote(name)),
                );
            } else {
                first.insert(name, &info.path);
            }
        }
    }

    pub(super) fn cross_checks(
        &mut self,
        containers_path: &str,
        containers: &[(ContainerDefinition, ContainerInfo)],
        volumes: Option<&[(Volume, VolumeInfo)]>,
        network: Option<NetworkMode>,
    ) {
        let infos: Vec<&ContainerInfo> = containers.iter().map(|(_, info)| info).collect();

        // Unique names; the first container with a name is the one references resolve to.
        let mut index_of: HashMap<&str, usize> = HashMap::new();
        let mut known: Vec<&str> = Vec::new();
        for (i, info) in infos.iter().enumerate() {
            let Some(name) = info.name.as_deref() else {
                continue;
            };
            if let Some(&first) = index_of.get(name) {
                self.error(
                    key_path(&info.path, "name"),
                    format!(
                        "duplicate container name {} (also {})",
                        quote(name),
                        infos[first].path
                    ),
                );
            } else {
                index_of.insert(name, i);
                known.push(name);
            }
        }
        let known_list = if known.is_empty() {
            "(no container has a name)".to_owned()
        } else {
            format!("(known: {})", known.join(", "))
        };

        if !infos.is_empty() && infos.iter().all(|info| !info.essential) {
            self.error_after(
                containers_path,
                "no essential container; mark at least one container \"essential\": true",
            );
        }

        // dependsOn: references, conditions, then cycles over the edges that resolved.
        let mut edges: Vec<(usize, usize, Condition, String)> = Vec::new();
        for (i, info) in infos.iter().enumerate() {
            let mut listed: HashMap<&str, &str> = HashMap::new();
            for dep in &info.depends_on {
                let Some(target) = dep.container_name.as_deref() else {
                    continue;
                };
                let name_path = key_path(&dep.path, "containerName");
                let condition_path = key_path(&dep.path, "condition");
                if let Some(first) = listed.get(target) {
                    self.error(
                        name_path,
                        format!("{} is already listed at {first}", quote(target)),
                    );
                    continue;
                }
                listed.insert(target, &dep.path);
                if info.name.as_deref() == Some(target) {
                    self.error(
                        name_path,
                        format!("container {} depends on itself", quote(target)),
                    );
                    continue;
                }
                let Some(&j) = index_of.get(target) else {
                    self.error(
                        name_path,
                        format!("no container named {} {known_list}", quote(target)),
                    );
                    continue;
                };
                let dependency = infos[j];
                match dep.condition {
                    Some(Condition::Healthy) if !dependency.has_health_check => {
                        self.error(
                            condition_path,
                            format!("HEALTHY needs a healthCheck on container {}", quote(target)),
                        );
                    }
                    Some(c @ (Condition::Complete | Condition::Success))
                        if dependency.essential =>
                    {
                        self.error(
                            condition_path,
                            format!(
                                "{} waits for container {} to exit, but it is essential and its exit stops the task; mark it \"essential\": false",
                                c.as_str(),
                                quote(target)
                            ),
                        );
                    }
                    Some(c @ (Condition::Complete | Condition::Success)) => {
                        if let Some(restart) = &dependency.restart_enabled_path {
                            self.warn(
                                condition_path,
                                format!(
                                    "{} waits for container {} to stay stopped, but its restartPolicy ({restart}) restarts it after an exit; the condition holds only once an exit is not restarted (an ignored exit code, or an exit before its restartAttemptPeriod)",
                                    c.as_str(),
                                    quote(target)
                                ),
                            );
                        }
                    }
                    _ => {}
                }
                let condition = dep.condition.unwrap_or(Condition::Start);
                edges.push((i, j, condition, dep.path.clone()));
            }
        }

        // Mount points name defined volumes (skipped when `volumes` itself is broken).
        if let Some(volumes) = volumes {
            let names: Vec<&str> = volumes
                .iter()
                .filter_map(|(_, v)| v.name.as_deref())
                .collect();
            let mut unique: Vec<&str> = Vec::new();
            for n in &names {
                if !unique.contains(n) {
                    unique.push(n);
                }
            }
            let volume_list = if unique.is_empty() {
                "(no volumes are defined)".to_owned()
            } else {
                format!("(known: {})", unique.join(", "))
            };
            for info in &infos {
                for (mount_path, source) in &info.mounts {
                    if !names.contains(&source.as_str()) {
                        self.error(
                            key_path(mount_path, "sourceVolume"),
                            format!("no volume named {} {volume_list}", quote(source)),
                        );
                    }
                }
            }
        }

        // volumesFrom names another container, which must exist before this one is created: an
        // ordering edge like a START dependency, so it takes part in cycle detection.
        for (i, info) in infos.iter().enumerate() {
            for (entry_path, source) in &info.volumes_from {
                let p = key_path(entry_path, "sourceContainer");
                if info.name.as_deref() == Some(source.as_str()) {
                    self.error(p, "a container cannot take volumes from itself");
                } else if let Some(&j) = index_of.get(source.as_str()) {
                    edges.push((i, j, Condition::Start, p));
                } else {
                    self.error(
                        p,
                        format!("no container named {} {known_list}", quote(source)),
                    );
                }
            }
        }
        self.link_checks(&infos, &index_of, &known_list, network, &mut edges);
        self.cycles(&infos, edges);

        self.ports_and_hostnames(&infos, network);
    }

    /// `links`: each names another container of the task, with an alias no other link of the
    /// container uses, in `bridge` network mode (ECS refuses links in every other mode; Docker
    /// refuses them with the host's network). A link is a `START` edge: its target is created
    /// before the linking container and runs before it starts, so it takes part in cycle detection.
    /// A target this container waits for with `COMPLETE` or `SUCCESS` has exited by the time the
    /// link would be used, and Docker links only to a running container: an error too.
    fn link_checks(
        &mut self,
        infos: &[&ContainerInfo],
        index_of: &HashMap<&str, usize>,
        known_list: &str,
        network: Option<NetworkMode>,
        edges: &mut Vec<(usize, usize, Condition, String)>,
    ) {
        for (i, info) in infos.iter().enumerate() {
            if let (Some(mode), Some(p)) = (network, &info.links_path)
                && mode != NetworkMode::Bridge
                && !info.links.is_empty()
            {
                self.error(
                    p.as_str(),
                    format!(
                        "links need network mode bridge; this task uses {}: {}",
                        mode.as_str(),
                        match mode {
                            NetworkMode::Host => {
                                "remove links (in host mode containers reach each other on localhost)"
                            }
                            NetworkMode::None => {
                                "remove links (in none mode a container has no network to reach another)"
                            }
                            NetworkMode::Awsvpc => {
                                "remove links (the containers of an awsvpc task share one network namespace and reach each other on localhost)"
                            }
                            NetworkMode::Bridge => "",
                        }
                    ),
                );
            }
            let mut aliases: HashMap<&str, &str> = HashMap::new();
            for link in &info.links {
                let target = link.container_name.as_str();
                if let Some(first) = aliases.get(link.alias.as_str()) {
                    self.error(
                        link.path.as_str(),
                        format!(
                            "alias {} is already used by {first}; give each link its own alias (\"{target}:other\")",
                            quote(&link.alias)
                        ),
                    );
                } else {
                    aliases.insert(&link.alias, &link.path);
                }
                if info.name.as_deref() == Some(target) {
                    self.error(link.path.as_str(), "a container cannot link to itself");
                    continue;
                }
                let Some(&j) = index_of.get(target) else {
                    self.error(
                        link.path.as_str(),
                        format!("no container named {} {known_list}", quote(target)),
                    );
                    continue;
                };
                let exited = info.depends_on.iter().find_map(|d| match d.condition {
                    Some(c @ (Condition::Complete | Condition::Success))
                        if d.container_name.as_deref() == Some(target) =>
                    {
                        Some(c)
                    }
                    _ => None,
                });
                if let Some(c) = exited {
                    self.error(
                        link.path.as_str(),
                        format!(
                            "container {} will have exited when this one starts (it waits for it with {}), and Docker links only to a running container; remove the link or the dependency",
                            quote(target),
                            c.as_str()
                        ),
                    );
                }
                edges.push((i, j, Condition::Start, link.path.clone()));
            }
        }
    }

    /// Reports each dependency cycle once: find one, report it, drop the edge reported on, repeat.
    fn cycles(
        &mut self,
        infos: &[&ContainerInfo],
        mut edges: Vec<(usize, usize, Condition, String)>,
    ) {
        let names: Vec<String> = infos
            .iter()
            .map(|info| info.name.clone().unwrap_or_default())
            .collect();
        loop {
            let graph = DependencyGraph::from_edges(
                names.clone(),
                edges.iter().map(|e| (e.0, e.1, e.2)).collect(),
            );
            let Some(cycle) = graph.find_cycle() else {
                return;
            };
            // Rotate so the cycle starts at its first container in definition order.
            let nodes = &cycle[..cycle.len().saturating_sub(1)];
            let Some(start) = nodes
                .iter()
                .enumerate()
                .min_by_key(|&(_, &n)| n)
                .map(|(i, _)| i)
            else {
                return;
            };
            let mut rotated: Vec<usize> = nodes[start..]
                .iter()
                .chain(&nodes[..start])
                .copied()
                .collect();
            let (from, to) = (rotated[0], rotated.get(1).copied().unwrap_or(rotated[0]));
            rotated.push(rotated[0]);
            let Some(edge) = edges.iter().position(|e| e.0 == from && e.1 == to) else {
                return; // the cycle was found along these edges, so one exists
            };
            let removed = edges.remove(edge);
            self.error(
                removed.3,
                format!(
                    "dependency cycle: {} (each container waits for the next)",
                    graph.describe_cycle(&rotated)
                ),
            );
        }
    }

    fn ports_and_hostnames(&mut self, infos: &[&ContainerInfo], network: Option<NetworkMode>) {
        let mut used: HashMap<(u16, &str), String> = HashMap::new();
        for info in infos {
            if network == Some(NetworkMode::Host)
                && let Some(p) = &info.hostname_path
            {
                self.error(
                    p.as_str(),
                    "hostname cannot be set in host network mode (the container uses the host's name)",
                );
            }
            if network == Some(NetworkMode::Awsvpc) {
                if let Some(p) = &info.hostname_path {
                    self.error(
                        p.as_str(),
                        "hostname cannot be set in awsvpc network mode (every container of the task has the task's hostname); remove it",
                    );
                }
                for (p, field) in &info.own_network_fields {
                    self.error(
                        p.as_str(),
                        format!("{field} cannot be set in awsvpc network mode (the task's containers share one network namespace, whose DNS settings and /etc/hosts belong to the task); remove it, or use bridge"),
                    );
                }
            }
            if network == Some(NetworkMode::Host) {
                for p in &info.net_sysctl_paths {
                    self.error(
                        p.as_str(),
                        "net.* systemControls cannot be set in host network mode (the container shares the host's network namespace); use bridge",
                    );
                }
            }
            if network == Some(NetworkMode::None) && !info.ports.is_empty() {
                if let Some(p) = &info.port_mappings_path {
                    self.error(
                        p.as_str(),
                        "port mappings need network mode bridge or host; this task uses none",
                    );
                }
                continue;
            }
            for port in &info.ports {
                let host_path = key_path(&port.path, "hostPort");
                let (effective, place) = match network {
                    Some(mode @ (NetworkMode::Host | NetworkMode::Awsvpc)) => {
                        if let (Some(h), Some(c)) = (port.host_port, port.container_port)
                            && h != c
                        {
                            self.error(
                                host_path.as_str(),
                                format!("in {} network mode hostPort must be left out or equal containerPort ({c}), found {h}", mode.as_str()),
                            );
                            continue;
                        }
                        match port.host_port {
                            Some(h) => (Some(h), host_path),
                            None => (port.container_port, key_path(&port.path, "containerPort")),
                        }
                    }
                    Some(NetworkMode::Bridge) => (port.host_port.filter(|&h| h != 0), host_path),
                    _ => (None, host_path),
                };
                let Some(host_port) = effective else { continue };
                let protocol = port.protocol.as_str();
                if let Some(first) = used.get(&(host_port, protocol)) {
                    self.error(
                        place,
                        format!("host port {host_port}/{protocol} is already used by {first}"),
                    );
                } else {
                    used.insert((host_port, protocol), port.path.clone());
                }
            }
        }
    }
}
