//! The container fields that other parts of the task must agree with: `dependsOn` (other
//! containers, with a condition), `volumesFrom` and `links` (other containers), `mountPoints` (the
//! task's volumes) and `portMappings` (host ports, which containers must not share). Each is read
//! and checked for itself here (a link's `name:alias` syntax, for one), and what it names is
//! recorded in the container's [`ContainerInfo`] so that `cross` can check the names once every
//! container and volume has been read.
//!
//! Invariants: an entry that names something is recorded even when the rest of it is broken, so
//! a bad condition does not also hide an unknown container name; entries that cannot be read whole
//! are left out of the definition. Limits: nothing here knows what exists elsewhere in the task.

use super::checker::{Checker, key_path};
use super::container::ContainerInfo;
use super::json::{Json, quote};
use super::rules::{
    DEPENDENCY, HOST_PORT, MISSING, MOUNT_POINT, NAME_RULE, PORT, PORT_MAPPING, VOLUME_FROM,
    valid_name,
};
use crate::types::{Condition, Dependency, Link, MountPoint, PortMapping, Protocol, VolumeFrom};
use std::collections::HashMap;

/// One `dependsOn` entry as far as it could be read.
pub(super) struct DependencyInfo {
    pub(super) path: String,
    pub(super) container_name: Option<String>,
    pub(super) condition: Option<Condition>,
}

/// One `links` entry that could be read: its path, the container it names and its alias.
pub(super) struct LinkInfo {
    pub(super) path: String,
    pub(super) container_name: String,
    pub(super) alias: String,
}

/// One `portMappings` entry as far as it could be read.
pub(super) struct PortInfo {
    pub(super) path: String,
    pub(super) container_port: Option<u16>,
    pub(super) host_port: Option<u16>,
    pub(super) protocol: Protocol,
}

impl Checker {
    pub(super) fn depends_on(
        &mut self,
        path: &str,
        v: &Json,
        info: &mut ContainerInfo,
    ) -> Vec<Dependency> {
        let mut out = Vec::new();
        for (item, p) in self.array(path, v).unwrap_or_default() {
            let Some(object) = self.object(&p, item) else {
                continue;
            };
            let mut dep = DependencyInfo {
                path: p.clone(),
                container_name: None,
                condition: None,
            };
            let (mut name_seen, mut condition_seen) = (false, false);
            for f in self.fields(&p, object, &DEPENDENCY) {
                match f.key {
                    "containerName" => {
                        name_seen = true;
                        dep.container_name = self.string(&f.path, f.value).map(str::to_owned);
                    }
                    "condition" => {
                        condition_seen = true;
                        dep.condition = self.condition(&f.path, f.value);
                    }
                    _ => {}
                }
            }
            if !name_seen {
                self.error(key_path(&p, "containerName"), MISSING);
            }
            if !condition_seen {
                self.error(
                    key_path(&p, "condition"),
                    "missing required field; use START, COMPLETE, SUCCESS or HEALTHY",
                );
            }
            if let (Some(name), Some(condition)) = (&dep.container_name, dep.condition) {
                out.push(Dependency {
                    container_name: name.clone(),
                    condition,
                });
            }
            info.depends_on.push(dep);
        }
        out
    }

    fn condition(&mut self, path: &str, v: &Json) -> Option<Condition> {
        let s = self.string(path, v)?;
        if let Some(c) = Condition::ALL.into_iter().find(|c| c.as_str() == s) {
            return Some(c);
        }
        let upper = s.to_ascii_uppercase();
        let message = match Condition::ALL.into_iter().find(|c| c.as_str() == upper) {
            Some(c) => format!(
                "unknown condition {}; conditions are upper case: {}",
                quote(s),
                c.as_str()
            ),
            None => format!(
                "unknown condition {}; use START, COMPLETE, SUCCESS or HEALTHY",
                quote(s)
            ),
        };
        self.error(path, message);
        None
    }

    pub(super) fn mount_points(
        &mut self,
        path: &str,
        v: &Json,
        info: &mut ContainerInfo,
    ) -> Vec<MountPoint> {
        let mut out = Vec::new();
        let mut targets: HashMap<String, String> = HashMap::new();
        for (item, p) in self.array(path, v).unwrap_or_default() {
            let Some(object) = self.object(&p, item) else {
                continue;
            };
            let (mut source, mut target, mut read_only) = (None, None, false);
            let (mut source_seen, mut target_seen) = (false, false);
            for f in self.fields(&p, object, &MOUNT_POINT) {
                match f.key {
                    "sourceVolume" => {
                        source_seen = true;
                        source = self.string(&f.path, f.value).map(str::to_owned);
                    }
                    "containerPath" => {
                        target_seen = true;
                        target = self.absolute_path(&f.path, f.value);
                        if let Some(t) = &target {
                            let normal = t.trim_end_matches('/').to_owned();
                            if let Some(first) = targets.get(&normal) {
                                self.error(
                                    &f.path,
                                    format!("{} is already mounted by {first}", quote(t)),
                                );
                            } else {
                                targets.insert(normal, p.clone());
                            }
                        }
                    }
                    "readOnly" => read_only = self.boolean(&f.path, f.value).unwrap_or(false),
                    _ => {}
                }
            }
            if !source_seen {
                self.error(key_path(&p, "sourceVolume"), MISSING);
            }
            if !target_seen {
                self.error(key_path(&p, "containerPath"), MISSING);
            }
            if let Some(s) = &source {
                info.mounts.push((p.clone(), s.clone()));
            }
            if let (Some(source_volume), Some(container_path)) = (source, target) {
                out.push(MountPoint {
                    source_volume,
                    container_path,
                    read_only,
                });
            }
        }
        out
    }

    pub(super) fn volumes_from(
        &mut self,
        path: &str,
        v: &Json,
        info: &mut ContainerInfo,
    ) -> Vec<VolumeFrom> {
        let mut out = Vec::new();
        for (item, p) in self.array(path, v).unwrap_or_default() {
            let Some(object) = self.object(&p, item) else {
                continue;
            };
            let (mut source, mut read_only, mut source_seen) = (None, false, false);
            for f in self.fields(&p, object, &VOLUME_FROM) {
                match f.key {
                    "sourceContainer" => {
                        source_seen = true;
                        source = self.string(&f.path, f.value).map(str::to_owned);
                    }
                    "readOnly" => read_only = self.boolean(&f.path, f.value).unwrap_or(false),
                    _ => {}
                }
            }
            if !source_seen {
                self.error(key_path(&p, "sourceContainer"), MISSING);
            }
            if let Some(source_container) = source {
                info.volumes_from
                    .push((p.clone(), source_container.clone()));
                out.push(VolumeFrom {
                    source_container,
                    read_only,
                });
            }
        }
        out
    }

    /// `links`: strings `"name"` or `"name:alias"` (ECS splits on `:`; more than one is invalid).
    /// The alias follows ECS's rule for names; whether the name is a container of the task, and
    /// whether the network mode allows links, is for `cross`.
    pub(super) fn links(&mut self, path: &str, v: &Json, info: &mut ContainerInfo) -> Vec<Link> {
        let mut out = Vec::new();
        for (item, p) in self.array(path, v).unwrap_or_default() {
            let Some(s) = self.string(&p, item) else {
                continue;
            };
            let mut parts = s.split(':');
            let (name, alias) = (parts.next().unwrap_or_default(), parts.next());
            if parts.next().is_some() {
                self.error(
                    &p,
                    format!(
                        "{} is not a link; write \"container\" or \"container:alias\" (one colon at most)",
                        quote(s)
                    ),
                );
                continue;
            }
            if name.is_empty() {
                self.error(
                    &p,
                    format!(
                        "{} names no container; write \"container\" or \"container:alias\"",
                        quote(s)
                    ),
                );
                continue;
            }
            let alias = match alias {
                None => name,
                Some("") => {
                    self.error(
                        &p,
                        format!(
                            "{} has an empty alias; write {} or {}",
                            quote(s),
                            quote(name),
                            quote(&format!("{name}:alias"))
                        ),
                    );
                    continue;
                }
                Some(alias) if !valid_name(alias) => {
                    self.error(
                        &p,
                        format!("{} is not a valid link alias; {NAME_RULE}", quote(alias)),
                    );
                    continue;
                }
                Some(alias) => alias,
            };
            info.links.push(LinkInfo {
                path: p.clone(),
                container_name: name.to_owned(),
                alias: alias.to_owned(),
            });
            out.push(Link::with_alias(name, alias));
        }
        out
    }

    pub(super) fn port_mappings(
        &mut self,
        path: &str,
        v: &Json,
        info: &mut ContainerInfo,
    ) -> Vec<PortMapping> {
        let mut out = Vec::new();
        for (item, p) in self.array(path, v).unwrap_or_default() {
            let Some(object) = self.object(&p, item) else {
                continue;
            };
            let mut port = PortInfo {
                path: p.clone(),
                container_port: None,
                host_port: None,
                protocol: Protocol::Tcp,
            };
            let mut container_port_seen = false;
            for f in self.fields(&p, object, &PORT_MAPPING) {
                match f.key {
                    "containerPort" => {
                        container_port_seen = true;
                        port.container_port = self.bounded_u16(&f.path, f.value, PORT);
                    }
                    "hostPort" => port.host_port = self.bounded_u16(&f.path, f.value, HOST_PORT),
                    "protocol" => {
                        port.protocol = match self.string(&f.path, f.value) {
                            Some("tcp") | None => Protocol::Tcp,
                            Some("udp") => Protocol::Udp,
                            Some(other) => {
                                self.error(
                                    &f.path,
                                    format!("unknown protocol {}; use tcp or udp", quote(other)),
                                );
                                Protocol::Tcp
                            }
                        };
                    }
                    _ => {}
                }
            }
            if !container_port_seen {
                self.error(key_path(&p, "containerPort"), MISSING);
            }
            if let Some(container_port) = port.container_port {
                out.push(PortMapping {
                    container_port,
                    host_port: port.host_port,
                    protocol: port.protocol,
                });
            }
            info.ports.push(port);
        }
        out
    }
}
