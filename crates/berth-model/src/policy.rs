//! The operator's host policy: what a task may ask of the host it runs on. A task definition can
//! ask for the host itself — a privileged container, added capabilities, host devices, the host's
//! network, PID or IPC namespace, a security profile turned off, a bind mount of `/` or of the
//! Docker socket — and whoever may submit tasks then owns the host. [`HostPolicy::check`] lists
//! every such request the policy does not allow, each a [`Refusal`] with the field's JSON path,
//! the rule, and how the operator allows it.
//!
//! Two modes: `permissive` (everything allowed: a single host whose operator submits the tasks)
//! and `restricted` (nothing of the above unless granted one by one, [`Grant`], and host volumes
//! only under the directories granted with `host-path:DIR`). Whatever the mode, ECS's
//! `ECS_DISABLE_PRIVILEGED` ([`HostPolicy::privileged_disabled`]) refuses privileged containers.
//!
//! Pure: host paths are compared as the caller resolved them (the agent passes a resolver that
//! follows symlinks on the host, so a link to `/` under a granted directory is seen as `/`); the
//! comparison itself is by path components, so `/srv/data2` is not under `/srv/data`.

use crate::types::{NetworkMode, TaskDefinition, VolumeKind};
use crate::{IpcMode, PidMode};
use std::collections::BTreeSet;
use std::fmt;

/// Where the Docker Engine's socket usually is; a bind mount of it (or of a directory holding it)
/// hands the Engine, and so the host, to the container.
pub const DOCKER_SOCKETS: [&str; 2] = ["/var/run/docker.sock", "/run/docker.sock"];

/// One thing a restricted policy refuses unless granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Grant {
    /// `privileged: true`.
    Privileged,
    /// `linuxParameters.capabilities.add` (any capability, `ALL` included).
    Capabilities,
    /// `linuxParameters.devices`.
    Devices,
    /// `networkMode: host`.
    HostNetwork,
    /// `pidMode: host`.
    HostPid,
    /// `ipcMode: host`.
    HostIpc,
    /// `dockerSecurityOptions` that turn a profile off (`apparmor:unconfined`, `label:disable`).
    Unconfined,
    /// Host volumes (and `local` Docker volumes binding a host path) anywhere but the Docker
    /// socket.
    HostVolumes,
    /// A host volume that is, or holds, the Docker socket (`/` too): whoever has the Engine has
    /// the host, so this grants such a path without `HostVolumes`.
    DockerSocket,
}

impl Grant {
    pub const ALL: [Grant; 9] = [
        Grant::Privileged,
        Grant::Capabilities,
        Grant::Devices,
        Grant::HostNetwork,
        Grant::HostPid,
        Grant::HostIpc,
        Grant::Unconfined,
        Grant::HostVolumes,
        Grant::DockerSocket,
    ];

    /// The name an operator writes (`--task-policy-allow host-network`).
    pub fn name(self) -> &'static str {
        match self {
            Grant::Privileged => "privileged",
            Grant::Capabilities => "capabilities",
            Grant::Devices => "devices",
            Grant::HostNetwork => "host-network",
            Grant::HostPid => "host-pid",
            Grant::HostIpc => "host-ipc",
            Grant::Unconfined => "unconfined",
            Grant::HostVolumes => "host-volumes",
            Grant::DockerSocket => "docker-socket",
        }
    }
}

/// The policy's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Permissive,
    Restricted,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Permissive => "permissive",
            Mode::Restricted => "restricted",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "permissive" => Ok(Mode::Permissive),
            "restricted" => Ok(Mode::Restricted),
            other => Err(format!(
                "unknown task policy {other:?}; use permissive or restricted"
            )),
        }
    }
}

/// What an agent lets tasks ask of its host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPolicy {
    pub mode: Mode,
    /// What a restricted policy allows all the same.
    pub grants: BTreeSet<Grant>,
    /// Host directories a restricted policy lets host volumes bind (and anything below them).
    pub host_paths: Vec<String>,
    /// ECS's `ECS_DISABLE_PRIVILEGED`: privileged containers refused, whatever the mode.
    pub privileged_disabled: bool,
}

/// A request the policy does not allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The field's JSON path (`containerDefinitions[0].privileged`).
    pub path: String,
    /// What the field asks of the host, and the rule that refuses it.
    pub rule: String,
    /// How the operator allows it.
    pub allow: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}; {}", self.path, self.rule, self.allow)
    }
}

/// Parse a list of grants as an operator writes them: names separated by commas (or ECS's JSON
/// array of strings), each a [`Grant`] name, `host-path:/DIR`, or `all`.
pub fn parse_grants(text: &str) -> Result<(BTreeSet<Grant>, Vec<String>), String> {
    let items: Vec<String> = if text.trim_start().starts_with('[') {
        serde_json::from_str(text)
            .map_err(|e| format!("not a JSON array of strings ({e}); or write a,b,c"))?
    } else {
        text.split(',').map(|s| s.trim().to_string()).collect()
    };
    let mut grants = BTreeSet::new();
    let mut paths = Vec::new();
    for item in items.iter().filter(|s| !s.is_empty()) {
        if item == "all" {
            grants.extend(Grant::ALL);
        } else if let Some(dir) = item.strip_prefix("host-path:") {
            if !dir.starts_with('/') || dir.split('/').any(|c| c == "..") {
                return Err(format!(
                    "{item:?}: host-path takes an absolute directory without \"..\", such as host-path:/srv/data"
                ));
            }
            paths.push(dir.to_string());
        } else if let Some(g) = Grant::ALL.iter().find(|g| g.name() == item) {
            grants.insert(*g);
        } else {
            let names: Vec<&str> = Grant::ALL.iter().map(|g| g.name()).collect();
            return Err(format!(
                "unknown grant {item:?}; use {}, host-path:/DIR or all",
                names.join(", ")
            ));
        }
    }
    Ok((grants, paths))
}

/// Is `path` the same as `dir` or below it (by components: `/srv/data2` is not below `/srv/data`)?
fn within(path: &str, dir: &str) -> bool {
    let comps = |p: &str| -> Vec<String> {
        p.split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .map(str::to_string)
            .collect()
    };
    let (p, d) = (comps(path), comps(dir));
    p.len() >= d.len() && p[..d.len()] == d[..]
}

impl HostPolicy {
    /// Everything allowed (ECS_DISABLE_PRIVILEGED aside).
    pub fn permissive() -> HostPolicy {
        HostPolicy {
            mode: Mode::Permissive,
            grants: BTreeSet::new(),
            host_paths: Vec::new(),
            privileged_disabled: false,
        }
    }

    /// Nothing of the host unless granted.
    pub fn restricted() -> HostPolicy {
        HostPolicy {
            mode: Mode::Restricted,
            ..HostPolicy::permissive()
        }
    }

    fn allows(&self, g: Grant) -> bool {
        self.mode == Mode::Permissive || self.grants.contains(&g)
    }

    fn refusal(&self, path: String, asks: &str, g: Grant) -> Refusal {
        Refusal {
            path,
            rule: format!(
                "{asks}, and this agent's task policy is restricted (the default for a cluster node)"
            ),
            allow: format!(
                "to allow it, start the agent with --task-policy-allow {} (or --task-policy permissive)",
                g.name()
            ),
        }
    }

    /// The host path rules for one bound host path (`resolved`: as the host resolves it).
    fn host_path(&self, path: String, source: &str, resolved: &str, out: &mut Vec<Refusal>) {
        let socket = DOCKER_SOCKETS
            .iter()
            .any(|s| within(s, resolved) || within(resolved, s));
        let shown = if resolved == source {
            format!("{source:?}")
        } else {
            format!("{source:?} (resolved: {resolved:?})")
        };
        if socket && self.allows(Grant::DockerSocket) {
            // Whoever has the Engine has the host: granting the socket grants what holds it.
            return;
        }
        if socket {
            out.push(self.refusal(
                path,
                &format!(
                    "the host path {shown} is or holds the Docker socket, which hands the Docker Engine (and so the host) to the container"
                ),
                Grant::DockerSocket,
            ));
            return;
        }
        if self.allows(Grant::HostVolumes) || self.host_paths.iter().any(|d| within(resolved, d)) {
            return;
        }
        let granted = if self.host_paths.is_empty() {
            "none is granted".to_string()
        } else {
            format!("granted: {}", self.host_paths.join(", "))
        };
        out.push(Refusal {
            path,
            rule: format!(
                "the host path {shown} is not under a directory this agent's restricted task policy lets tasks bind ({granted})"
            ),
            allow: format!(
                "to allow it, start the agent with --task-policy-allow host-path:{} (or host-volumes for any host path, or --task-policy permissive)",
                if resolved == "/" { "/" } else { resolved }
            ),
        });
    }

    /// Every request of `def` this policy refuses, in document order (empty: the task may run).
    /// `resolve` gives a host path as the host resolves it (symlinks followed); pure callers pass
    /// the path back unchanged.
    pub fn check(&self, def: &TaskDefinition, resolve: &dyn Fn(&str) -> String) -> Vec<Refusal> {
        let mut out = Vec::new();
        for (i, c) in def.container_definitions.iter().enumerate() {
            let at = |field: &str| format!("containerDefinitions[{i}].{field}");
            if c.privileged {
                if self.privileged_disabled {
                    out.push(Refusal {
                        path: at("privileged"),
                        rule: "a privileged container has every capability and device of the host, and privileged containers are disabled on this agent (ECS_DISABLE_PRIVILEGED=true)".into(),
                        allow: "to allow them, start the agent without ECS_DISABLE_PRIVILEGED (or with it false) and without --disable-privileged".into(),
                    });
                } else if !self.allows(Grant::Privileged) {
                    out.push(self.refusal(
                        at("privileged"),
                        "a privileged container has every capability and device of the host",
                        Grant::Privileged,
                    ));
                }
            }
            if let Some(lp) = &c.linux_parameters {
                if !self.allows(Grant::Capabilities) {
                    for (j, cap) in lp.capabilities_add.iter().enumerate() {
                        out.push(self.refusal(
                            at(&format!("linuxParameters.capabilities.add[{j}]")),
                            &format!("adding the capability {cap} widens what the container may do to the host"),
                            Grant::Capabilities,
                        ));
                    }
                }
                if !self.allows(Grant::Devices) {
                    for (j, d) in lp.devices.iter().enumerate() {
                        out.push(self.refusal(
                            at(&format!("linuxParameters.devices[{j}]")),
                            &format!(
                                "the host device {:?} would be reachable from the container",
                                d.host_path
                            ),
                            Grant::Devices,
                        ));
                    }
                }
            }
            if !self.allows(Grant::Unconfined) {
                for (j, o) in c.docker_security_options.iter().enumerate() {
                    let o_l = o.to_ascii_lowercase();
                    if o_l == "apparmor:unconfined" || o_l == "label:disable" {
                        out.push(self.refusal(
                            at(&format!("dockerSecurityOptions[{j}]")),
                            &format!(
                                "{o:?} turns off the security profile that confines the container"
                            ),
                            Grant::Unconfined,
                        ));
                    }
                }
            }
        }
        if def.network_mode == NetworkMode::Host && !self.allows(Grant::HostNetwork) {
            out.push(self.refusal(
                "networkMode".into(),
                "networkMode host shares the host's network namespace (its interfaces, ports and loopback services)",
                Grant::HostNetwork,
            ));
        }
        if def.pid_mode == Some(PidMode::Host) && !self.allows(Grant::HostPid) {
            out.push(self.refusal(
                "pidMode".into(),
                "pidMode host shares the host's process namespace (every process of the host is visible, and signals reach them)",
                Grant::HostPid,
            ));
        }
        if def.ipc_mode == Some(IpcMode::Host) && !self.allows(Grant::HostIpc) {
            out.push(self.refusal(
                "ipcMode".into(),
                "ipcMode host shares the host's IPC namespace (its shared memory)",
                Grant::HostIpc,
            ));
        }
        for (k, v) in def.volumes.iter().enumerate() {
            match &v.kind {
                VolumeKind::Host { source_path } => self.host_path(
                    format!("volumes[{k}].host.sourcePath"),
                    source_path,
                    &resolve(source_path),
                    &mut out,
                ),
                // The local driver's bind: `type: none`, `o: bind`, `device: /host/path`.
                VolumeKind::Docker(d)
                    if d.driver == "local"
                        && d.driver_opts.get("o").is_some_and(|o| {
                            o.split(',')
                                .any(|x| x.trim() == "bind" || x.trim() == "rbind")
                        }) =>
                {
                    if let Some(device) = d.driver_opts.get("device") {
                        self.host_path(
                            format!("volumes[{k}].dockerVolumeConfiguration.driverOpts.device"),
                            device,
                            &resolve(device),
                            &mut out,
                        );
                    }
                }
                _ => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn def(v: serde_json::Value) -> TaskDefinition {
        crate::parse(&v.to_string())
            .unwrap_or_else(|e| panic!("{:?}", e.problems))
            .definition
    }

    fn container(extra: serde_json::Value) -> serde_json::Value {
        let mut c = json!({"name": "a", "image": "busybox"});
        if let (Some(c), Some(extra)) = (c.as_object_mut(), extra.as_object()) {
            c.extend(extra.clone());
        }
        c
    }

    fn task(container_extra: serde_json::Value, task_extra: serde_json::Value) -> TaskDefinition {
        let mut t = json!({"family": "f", "containerDefinitions": [container(container_extra)]});
        if let (Some(t), Some(extra)) = (t.as_object_mut(), task_extra.as_object()) {
            t.extend(extra.clone());
        }
        def(t)
    }

    fn same(p: &str) -> String {
        p.to_string()
    }

    fn paths(policy: &HostPolicy, d: &TaskDefinition) -> Vec<String> {
        policy.check(d, &same).into_iter().map(|r| r.path).collect()
    }

    fn with(grants: &str) -> HostPolicy {
        let (grants, host_paths) = parse_grants(grants).expect("grants");
        HostPolicy {
            grants,
            host_paths,
            ..HostPolicy::restricted()
        }
    }

    #[test]
    fn each_host_request_is_refused_by_a_restricted_policy_and_allowed_by_its_grant() {
        let host_vol = |p: &str| json!({"volumes": [{"name": "v", "host": {"sourcePath": p}}]});
        // (what the task asks, the path refused, the grant that allows it)
        let table: Vec<(TaskDefinition, &str, &str)> = vec![
            (
                task(json!({"privileged": true}), json!({})),
                "containerDefinitions[0].privileged",
                "privileged",
            ),
            (
                task(
                    json!({"linuxParameters": {"capabilities": {"add": ["ALL"]}}}),
                    json!({}),
                ),
                "containerDefinitions[0].linuxParameters.capabilities.add[0]",
                "capabilities",
            ),
            (
                task(
                    json!({"linuxParameters": {"capabilities": {"add": ["NET_ADMIN"]}}}),
                    json!({}),
                ),
                "containerDefinitions[0].linuxParameters.capabilities.add[0]",
                "capabilities",
            ),
            (
                task(
                    json!({"linuxParameters": {"devices": [{"hostPath": "/dev/sda"}]}}),
                    json!({}),
                ),
                "containerDefinitions[0].linuxParameters.devices[0]",
                "devices",
            ),
            (
                task(
                    json!({"dockerSecurityOptions": ["apparmor:unconfined"]}),
                    json!({}),
                ),
                "containerDefinitions[0].dockerSecurityOptions[0]",
                "unconfined",
            ),
            (
                task(
                    json!({"dockerSecurityOptions": ["label:disable"]}),
                    json!({}),
                ),
                "containerDefinitions[0].dockerSecurityOptions[0]",
                "unconfined",
            ),
            (
                task(json!({}), json!({"networkMode": "host"})),
                "networkMode",
                "host-network",
            ),
            (
                task(json!({}), json!({"pidMode": "host"})),
                "pidMode",
                "host-pid",
            ),
            (
                task(json!({}), json!({"ipcMode": "host"})),
                "ipcMode",
                "host-ipc",
            ),
            (
                task(json!({}), host_vol("/")),
                "volumes[0].host.sourcePath",
                "docker-socket",
            ),
            (
                task(json!({}), host_vol("/var/run/docker.sock")),
                "volumes[0].host.sourcePath",
                "docker-socket",
            ),
            (
                task(json!({}), host_vol("/run")),
                "volumes[0].host.sourcePath",
                "docker-socket",
            ),
            (
                task(json!({}), host_vol("/etc")),
                "volumes[0].host.sourcePath",
                "host-volumes",
            ),
            (
                task(json!({}), host_vol("/srv/data2")),
                "volumes[0].host.sourcePath",
                "host-path:/srv/data2",
            ),
            (
                task(json!({}), host_vol("/srv/data/app")),
                "volumes[0].host.sourcePath",
                "host-path:/srv/data",
            ),
            (
                task(
                    json!({}),
                    json!({"volumes": [{"name": "v", "dockerVolumeConfiguration": {
                        "driver": "local", "driverOpts": {"type": "none", "o": "bind", "device": "/etc"}}}]}),
                ),
                "volumes[0].dockerVolumeConfiguration.driverOpts.device",
                "host-volumes",
            ),
        ];
        for (d, path, grant) in &table {
            assert_eq!(
                paths(&HostPolicy::permissive(), d),
                Vec::<String>::new(),
                "permissive: {path}"
            );
            assert_eq!(
                paths(&HostPolicy::restricted(), d),
                vec![path.to_string()],
                "restricted: {path}"
            );
            assert_eq!(
                paths(&with(grant), d),
                Vec::<String>::new(),
                "granted {grant}: {path}"
            );
            assert_eq!(paths(&with("all"), d), Vec::<String>::new(), "all: {path}");
        }
        // host-path:/srv/data grants neither a sibling with a longer name nor the socket.
        let granted = with("host-path:/srv/data,host-volumes");
        assert_eq!(
            paths(&granted, &task(json!({}), host_vol("/srv/data2"))),
            Vec::<String>::new()
        );
        assert_eq!(
            paths(
                &with("host-path:/srv/data"),
                &task(json!({}), host_vol("/srv/data2"))
            ),
            vec!["volumes[0].host.sourcePath".to_string()]
        );
        assert_eq!(
            paths(&with("host-volumes"), &task(json!({}), host_vol("/"))),
            vec!["volumes[0].host.sourcePath".to_string()],
            "host-volumes does not grant the Docker socket"
        );
        // A plain task, scratch volumes and drops are never refused.
        let plain = task(
            json!({"linuxParameters": {"capabilities": {"drop": ["ALL"]}},
                   "dockerSecurityOptions": ["no-new-privileges", "apparmor:docker-default"]}),
            json!({"networkMode": "awsvpc", "volumes": [{"name": "s", "host": {}}]}),
        );
        assert_eq!(
            paths(&HostPolicy::restricted(), &plain),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_refusal_names_the_rule_and_how_to_allow_it() {
        let r =
            HostPolicy::restricted().check(&task(json!({"privileged": true}), json!({})), &same);
        assert_eq!(
            r[0].to_string(),
            "containerDefinitions[0].privileged: a privileged container has every capability and device of the host, and this agent's task policy is restricted (the default for a cluster node); to allow it, start the agent with --task-policy-allow privileged (or --task-policy permissive)"
        );
    }

    #[test]
    fn ecs_disable_privileged_refuses_privileged_in_every_mode() {
        let d = task(json!({"privileged": true}), json!({}));
        for base in [HostPolicy::permissive(), with("all")] {
            let p = HostPolicy {
                privileged_disabled: true,
                ..base
            };
            let r = p.check(&d, &same);
            assert_eq!(r.len(), 1);
            assert!(
                r[0].rule.contains("ECS_DISABLE_PRIVILEGED=true"),
                "{}",
                r[0]
            );
        }
    }

    #[test]
    fn the_resolved_path_is_judged() {
        let d = task(
            json!({}),
            json!({"volumes": [{"name": "v", "host": {"sourcePath": "/srv/data/root"}}]}),
        );
        let r = with("host-path:/srv/data").check(&d, &|_| "/".to_string());
        assert_eq!(r.len(), 1);
        assert!(r[0].rule.contains("resolved: \"/\""), "{}", r[0]);
    }

    #[test]
    fn grants_parse_as_operators_write_them() {
        assert_eq!(
            parse_grants("privileged, host-path:/srv"),
            Ok(([Grant::Privileged].into(), vec!["/srv".to_string()]))
        );
        assert_eq!(
            parse_grants(r#"["devices"]"#).map(|g| g.0),
            Ok([Grant::Devices].into())
        );
        assert_eq!(parse_grants("all").map(|g| g.0.len()), Ok(Grant::ALL.len()));
        assert!(parse_grants("root").is_err_and(|e| e.contains("unknown grant \"root\"")));
        assert!(parse_grants("host-path:srv").is_err());
        assert!(parse_grants("host-path:/a/../b").is_err());
    }
}
