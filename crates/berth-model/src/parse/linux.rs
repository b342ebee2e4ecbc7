//! A container's `linuxParameters`: the init process, capabilities, devices, tmpfs mounts, the
//! `/dev/shm` size and swap, each checked against ECS's rules where it stands.
//!
//! Invariants: what comes out holds the promises of [`crate::linux`] except the one rule that
//! needs another container field (`maxSwap` needs `memory`), which the caller checks with the
//! path returned in [`LinuxInfo`]. Limits: mount option values (`mode=1777`) are passed to Docker
//! unchecked; only the option name is checked against ECS's list.

use super::checker::{Checker, key_path};
use super::json::{Json, has_field, quote};
use super::rules::{
    CAPABILITIES, CAPABILITY_NAMES, DEVICE, LINUX_PARAMETERS, MAX_SWAP, MISSING, SHM_SIZE,
    SWAPPINESS, TMPFS, TMPFS_OPTIONS, TMPFS_SIZE,
};
use crate::linux::{Device, LinuxParameters, Tmpfs};
use std::collections::HashMap;

/// What the container walker needs to check `maxSwap` against `memory`.
pub(super) struct LinuxInfo {
    /// The path of a valid `maxSwap`.
    pub(super) max_swap_path: Option<String>,
}

impl Checker {
    pub(super) fn linux_parameters(
        &mut self,
        path: &str,
        v: &Json,
    ) -> (Option<LinuxParameters>, LinuxInfo) {
        let mut info = LinuxInfo {
            max_swap_path: None,
        };
        let Some(object) = self.object(path, v) else {
            return (None, info);
        };
        let mut lp = LinuxParameters::default();
        let mut swappiness_path = None;
        for f in self.fields(path, object, &LINUX_PARAMETERS) {
            let (p, v) = (f.path.as_str(), f.value);
            match f.key {
                "initProcessEnabled" => {
                    lp.init_process_enabled = self.boolean(p, v).unwrap_or(false);
                }
                "capabilities" => {
                    let (add, drop) = self.capabilities(p, v);
                    lp.capabilities_add = add;
                    lp.capabilities_drop = drop;
                }
                "devices" => lp.devices = self.devices(p, v),
                "tmpfs" => lp.tmpfs = self.tmpfs(p, v),
                "sharedMemorySize" => lp.shared_memory_size = self.bounded(p, v, SHM_SIZE),
                "maxSwap" => {
                    lp.max_swap = self.bounded(p, v, MAX_SWAP);
                    if lp.max_swap.is_some() {
                        info.max_swap_path = Some(p.to_owned());
                    }
                }
                "swappiness" => {
                    lp.swappiness = self.bounded_u32(p, v, SWAPPINESS);
                    swappiness_path = Some(p.to_owned());
                }
                _ => {} // `fields` only returns keys listed in LINUX_PARAMETERS.known.
            }
        }
        if let Some(p) = swappiness_path
            && lp.swappiness.is_some()
            && !has_field(object, "maxSwap")
        {
            self.warn(
                p,
                "swappiness is ignored without maxSwap (as on ECS); set maxSwap to let the container swap",
            );
            lp.swappiness = None;
        }
        (Some(lp), info)
    }

    fn capabilities(&mut self, path: &str, v: &Json) -> (Vec<String>, Vec<String>) {
        let (mut add, mut drop) = (Vec::new(), Vec::new());
        let Some(object) = self.object(path, v) else {
            return (add, drop);
        };
        for f in self.fields(path, object, &CAPABILITIES) {
            let list = match f.key {
                "add" => &mut add,
                "drop" => &mut drop,
                _ => continue,
            };
            let Some(items) = self.array(&f.path, f.value) else {
                continue;
            };
            let mut seen: HashMap<String, String> = HashMap::new();
            for (item, p) in items {
                let Some(name) = self.string(&p, item) else {
                    continue;
                };
                if !CAPABILITY_NAMES.contains(&name) {
                    self.error(&p, capability_message(name));
                } else if let Some(first) = seen.get(name) {
                    self.error(&p, format!("{} is already listed at {first}", quote(name)));
                } else {
                    seen.insert(name.to_owned(), p.clone());
                    list.push(name.to_owned());
                }
            }
        }
        (add, drop)
    }

    fn devices(&mut self, path: &str, v: &Json) -> Vec<Device> {
        let mut out = Vec::new();
        for (item, p) in self.array(path, v).unwrap_or_default() {
            let Some(object) = self.object(&p, item) else {
                continue;
            };
            let (mut host, mut container, mut permissions) = (None, None, String::new());
            let mut ok = true;
            for f in self.fields(&p, object, &DEVICE) {
                match f.key {
                    "hostPath" => host = self.absolute_path(&f.path, f.value),
                    "containerPath" => {
                        container = self.absolute_path(&f.path, f.value);
                        ok &= container.is_some();
                    }
                    "permissions" => match self.device_permissions(&f.path, f.value) {
                        Some(s) => permissions = s,
                        None => ok = false,
                    },
                    _ => {}
                }
            }
            if !has_field(object, "hostPath") {
                self.error(key_path(&p, "hostPath"), MISSING);
            }
            if let Some(host_path) = host
                && ok
            {
                out.push(Device {
                    host_path,
                    container_path: container,
                    permissions: if permissions.is_empty() {
                        "rwm".to_owned()
                    } else {
                        permissions
                    },
                });
            }
        }
        out
    }

    /// `["read", "write", "mknod"]` (any subset) → Docker's `rwm` letters, in that order.
    fn device_permissions(&mut self, path: &str, v: &Json) -> Option<String> {
        let list = self.string_list(path, v)?;
        let mut ok = true;
        let (mut r, mut w, mut m) = (false, false, false);
        for (i, s) in list.iter().enumerate() {
            match s.as_str() {
                "read" => r = true,
                "write" => w = true,
                "mknod" => m = true,
                other => {
                    self.error(
                        format!("{path}[{i}]"),
                        format!(
                            "unknown device permission {}; use read, write or mknod",
                            quote(other)
                        ),
                    );
                    ok = false;
                }
            }
        }
        let letters: String = [(r, 'r'), (w, 'w'), (m, 'm')]
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, c)| *c)
            .collect();
        ok.then_some(letters)
    }

    fn tmpfs(&mut self, path: &str, v: &Json) -> Vec<Tmpfs> {
        let mut out = Vec::new();
        let mut targets: HashMap<String, String> = HashMap::new();
        for (item, p) in self.array(path, v).unwrap_or_default() {
            let Some(object) = self.object(&p, item) else {
                continue;
            };
            let (mut target, mut size, mut options) = (None, None, Some(Vec::new()));
            for f in self.fields(&p, object, &TMPFS) {
                match f.key {
                    "containerPath" => {
                        target = self.absolute_path(&f.path, f.value);
                        if let Some(t) = &target {
                            let key = t.trim_end_matches('/').to_owned();
                            if let Some(first) = targets.get(&key) {
                                self.error(
                                    &f.path,
                                    format!("{} is already a tmpfs at {first}", quote(t)),
                                );
                                target = None;
                            } else {
                                targets.insert(key, p.clone());
                            }
                        }
                    }
                    "size" => size = self.bounded(&f.path, f.value, TMPFS_SIZE),
                    "mountOptions" => options = self.tmpfs_options(&f.path, f.value),
                    _ => {}
                }
            }
            for field in ["containerPath", "size"] {
                if !has_field(object, field) {
                    let message = if field == "size" {
                        "missing required field; the tmpfs size in MiB, for example 64"
                    } else {
                        MISSING
                    };
                    self.error(key_path(&p, field), message);
                }
            }
            if let (Some(container_path), Some(size), Some(mount_options)) = (target, size, options)
            {
                out.push(Tmpfs {
                    container_path,
                    size,
                    mount_options,
                });
            }
        }
        out
    }

    fn tmpfs_options(&mut self, path: &str, v: &Json) -> Option<Vec<String>> {
        let list = self.string_list(path, v)?;
        let mut ok = true;
        for (i, s) in list.iter().enumerate() {
            let name = s.split('=').next().unwrap_or_default();
            if name == "size" {
                self.error(
                    format!("{path}[{i}]"),
                    "set the size with the tmpfs \"size\" field (MiB), not as a mount option",
                );
                ok = false;
            } else if !TMPFS_OPTIONS.contains(&name) {
                self.error(
                    format!("{path}[{i}]"),
                    format!(
                        "unknown tmpfs mount option {}; use one of {}",
                        quote(s),
                        TMPFS_OPTIONS.join(", ")
                    ),
                );
                ok = false;
            }
        }
        ok.then_some(list)
    }
}

/// Why `name` is not an ECS capability, and what to write instead.
fn capability_message(name: &str) -> String {
    let upper = name.to_ascii_uppercase();
    let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
    if CAPABILITY_NAMES.contains(&bare) {
        format!(
            "{} is not written as ECS writes capabilities; use {} (upper case, without CAP_)",
            quote(name),
            quote(bare)
        )
    } else {
        format!(
            "unknown capability {}; use ALL or a Linux capability name such as SYS_ADMIN or NET_ADMIN (upper case, without CAP_)",
            quote(name)
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::linux::{Device, LinuxParameters, Tmpfs};
    use crate::parse;

    use crate::parse::testing::{one_container as task, problems_of};

    fn problems(extra: &str) -> Vec<String> {
        problems_of(&task(extra))
    }

    fn linux(extra: &str) -> (LinuxParameters, Vec<String>) {
        match parse(&task(extra)) {
            Ok(p) => (
                p.definition.container_definitions[0]
                    .linux_parameters
                    .clone()
                    .unwrap_or_default(),
                p.warnings.iter().map(ToString::to_string).collect(),
            ),
            Err(e) => panic!("expected valid, got {:#?}", e.problems),
        }
    }

    #[test]
    fn every_field_is_read() {
        let (lp, warnings) = linux(
            r#""memory": 64, "linuxParameters": {
                "initProcessEnabled": true,
                "capabilities": {"add": ["SYS_ADMIN", "NET_ADMIN"], "drop": ["ALL"]},
                "devices": [{"hostPath": "/dev/null", "containerPath": "/dev/mynull", "permissions": ["read", "mknod"]},
                            {"hostPath": "/dev/zero"}],
                "tmpfs": [{"containerPath": "/scratch", "size": 16, "mountOptions": ["noexec", "mode=1777"]}],
                "sharedMemorySize": 128,
                "maxSwap": 0,
                "swappiness": 10
            }"#,
        );
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(
            lp,
            LinuxParameters {
                init_process_enabled: true,
                capabilities_add: vec!["SYS_ADMIN".into(), "NET_ADMIN".into()],
                capabilities_drop: vec!["ALL".into()],
                devices: vec![
                    Device {
                        host_path: "/dev/null".into(),
                        container_path: Some("/dev/mynull".into()),
                        permissions: "rm".into(),
                    },
                    Device {
                        host_path: "/dev/zero".into(),
                        container_path: None,
                        permissions: "rwm".into(),
                    },
                ],
                tmpfs: vec![Tmpfs {
                    container_path: "/scratch".into(),
                    size: 16,
                    mount_options: vec!["noexec".into(), "mode=1777".into()],
                }],
                shared_memory_size: Some(128),
                max_swap: Some(0),
                swappiness: Some(10),
            }
        );
    }

    #[test]
    fn empty_and_null_are_absent() {
        let (lp, warnings) = linux(r#""linuxParameters": {"capabilities": null, "tmpfs": []}"#);
        assert_eq!(lp, LinuxParameters::default());
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn capability_names_follow_ecs() {
        assert_eq!(
            problems(
                r#""linuxParameters": {"capabilities": {"add": ["sys_admin", "CAP_NET_ADMIN", "FLY", "KILL", "KILL", 3], "drop": ["Chown"]}}"#
            ),
            vec![
                r#"containerDefinitions[0].linuxParameters.capabilities.add[0]: "sys_admin" is not written as ECS writes capabilities; use "SYS_ADMIN" (upper case, without CAP_)"#,
                r#"containerDefinitions[0].linuxParameters.capabilities.add[1]: "CAP_NET_ADMIN" is not written as ECS writes capabilities; use "NET_ADMIN" (upper case, without CAP_)"#,
                r#"containerDefinitions[0].linuxParameters.capabilities.add[2]: unknown capability "FLY"; use ALL or a Linux capability name such as SYS_ADMIN or NET_ADMIN (upper case, without CAP_)"#,
                r#"containerDefinitions[0].linuxParameters.capabilities.add[4]: "KILL" is already listed at containerDefinitions[0].linuxParameters.capabilities.add[3]"#,
                "containerDefinitions[0].linuxParameters.capabilities.add[5]: expected a string, found a number (3)",
                r#"containerDefinitions[0].linuxParameters.capabilities.drop[0]: "Chown" is not written as ECS writes capabilities; use "CHOWN" (upper case, without CAP_)"#,
            ]
        );
    }

    #[test]
    fn device_rules() {
        assert_eq!(
            problems(
                r#""linuxParameters": {"devices": [{"containerPath": "/dev/x"}, {"hostPath": "dev/fuse", "containerPath": "fuse", "permissions": ["rw"]}]}"#
            ),
            vec![
                "containerDefinitions[0].linuxParameters.devices[0].hostPath: missing required field",
                r#"containerDefinitions[0].linuxParameters.devices[1].hostPath: must be an absolute path (starting with /), found "dev/fuse""#,
                r#"containerDefinitions[0].linuxParameters.devices[1].containerPath: must be an absolute path (starting with /), found "fuse""#,
                r#"containerDefinitions[0].linuxParameters.devices[1].permissions[0]: unknown device permission "rw"; use read, write or mknod"#,
            ]
        );
    }

    #[test]
    fn tmpfs_rules() {
        let p = problems(
            r#""linuxParameters": {"tmpfs": [
                {"containerPath": "/a", "size": 0},
                {"containerPath": "/b"},
                {"containerPath": "/a/", "size": 1, "mountOptions": ["size=10m", "fast"]}
            ]}"#,
        );
        assert_eq!(
            p,
            vec![
                "containerDefinitions[0].linuxParameters.tmpfs[0].size: must be at least 1 MiB, found 0",
                "containerDefinitions[0].linuxParameters.tmpfs[1].size: missing required field; the tmpfs size in MiB, for example 64",
                r#"containerDefinitions[0].linuxParameters.tmpfs[2].containerPath: "/a/" is already a tmpfs at containerDefinitions[0].linuxParameters.tmpfs[0]"#,
                r#"containerDefinitions[0].linuxParameters.tmpfs[2].mountOptions[0]: set the size with the tmpfs "size" field (MiB), not as a mount option"#,
                r#"containerDefinitions[0].linuxParameters.tmpfs[2].mountOptions[1]: unknown tmpfs mount option "fast"; use one of defaults, ro, rw, suid, nosuid, dev, nodev, exec, noexec, sync, async, dirsync, remount, mand, nomand, atime, noatime, diratime, nodiratime, bind, rbind, unbindable, runbindable, private, rprivate, shared, rshared, slave, rslave, relatime, norelatime, strictatime, nostrictatime, mode, uid, gid, nr_inodes, nr_blocks, mpol"#,
            ]
        );
    }

    #[test]
    fn swap_and_shm_rules() {
        assert_eq!(
            problems(
                r#""linuxParameters": {"maxSwap": 512, "swappiness": 101, "sharedMemorySize": 0}"#
            ),
            vec![
                "containerDefinitions[0].linuxParameters.maxSwap: maxSwap needs a hard memory limit: set \"memory\" on this container (Docker's swap limit is memory + maxSwap)",
                "containerDefinitions[0].linuxParameters.swappiness: must be at most 100, found 101",
                "containerDefinitions[0].linuxParameters.sharedMemorySize: must be at least 1 MiB, found 0",
            ]
        );
        assert_eq!(
            problems(r#""memory": 64, "linuxParameters": {"maxSwap": -1}"#),
            vec!["containerDefinitions[0].linuxParameters.maxSwap: must not be negative, found -1"]
        );
        let (lp, warnings) = linux(r#""linuxParameters": {"swappiness": 30}"#);
        assert_eq!(lp.swappiness, None);
        assert_eq!(
            warnings,
            vec![
                "containerDefinitions[0].linuxParameters.swappiness: swappiness is ignored without maxSwap (as on ECS); set maxSwap to let the container swap"
            ]
        );
    }

    #[test]
    fn unknown_fields_warn() {
        let (_, warnings) = linux(r#""linuxParameters": {"initProcesEnabled": true}"#);
        assert_eq!(
            warnings,
            vec![
                r#"containerDefinitions[0].linuxParameters.initProcesEnabled: unknown field, ignored (did you mean "initProcessEnabled"?)"#
            ]
        );
    }
}
