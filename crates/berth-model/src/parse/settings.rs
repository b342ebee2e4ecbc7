//! A container's `systemControls` (sysctls) and `dockerSecurityOptions`.
//!
//! Invariants: a sysctl is one Docker can set in a container's own namespaces (the IPC ones:
//! `kernel.msgmax`, `kernel.msgmnb`, `kernel.msgmni`, `kernel.sem`, `kernel.shmall`,
//! `kernel.shmmax`, `kernel.shmmni`, `kernel.shm_rmid_forced`, `fs.mqueue.*`; the network ones:
//! `net.*`), each at most once; the `net.*` paths are handed back so the cross checks can refuse
//! them in host network mode, and the IPC ones with `ipcMode: host`. Security options have one of ECS's Linux forms. Limits: whether
//! the kernel knows a `net.*` name, or the host has the AppArmor profile, is Docker's to judge.

use super::checker::{Checker, key_path};
use super::json::{Json, has_field, quote};
use super::rules::{MISSING, SYSTEM_CONTROL};
use std::collections::{BTreeMap, HashMap};

/// The IPC-namespace sysctls Docker accepts by exact name.
const IPC_SYSCTLS: &[&str] = &[
    "kernel.msgmax",
    "kernel.msgmnb",
    "kernel.msgmni",
    "kernel.sem",
    "kernel.shmall",
    "kernel.shmmax",
    "kernel.shmmni",
    "kernel.shm_rmid_forced",
];

/// What `systemControls` holds, and where the ones the cross checks need are.
pub(super) struct Sysctls {
    pub(super) values: BTreeMap<String, String>,
    /// Paths of the `net.*` namespaces.
    pub(super) net: Vec<String>,
    /// (path, name) of the IPC ones.
    pub(super) ipc: Vec<(String, String)>,
}

impl Checker {
    /// The sysctls, and the paths of the `net.*` ones and of the IPC ones.
    pub(super) fn system_controls(&mut self, path: &str, v: &Json) -> Sysctls {
        let mut out = BTreeMap::new();
        let (mut net, mut ipc) = (Vec::new(), Vec::new());
        let mut seen: HashMap<String, String> = HashMap::new();
        for (item, p) in self.array(path, v).unwrap_or_default() {
            let Some(object) = self.object(&p, item) else {
                continue;
            };
            let (mut name, mut value) = (None, None);
            for f in self.fields(&p, object, &SYSTEM_CONTROL) {
                match f.key {
                    "namespace" => {
                        let Some(s) = self.string(&f.path, f.value) else {
                            continue;
                        };
                        let is_net = s.starts_with("net.");
                        if !(is_net || s.starts_with("fs.mqueue.") || IPC_SYSCTLS.contains(&s)) {
                            self.error(
                                &f.path,
                                format!(
                                    "{} cannot be set in a container: only net.*, fs.mqueue.* and the IPC sysctls {} belong to the container's own namespaces",
                                    quote(s),
                                    IPC_SYSCTLS.join(", ")
                                ),
                            );
                        } else if let Some(first) = seen.get(s) {
                            self.error(&f.path, format!("{} is already set at {first}", quote(s)));
                        } else {
                            seen.insert(s.to_owned(), p.clone());
                            if is_net {
                                net.push(f.path.clone());
                            } else {
                                ipc.push((f.path.clone(), s.to_owned()));
                            }
                            name = Some(s.to_owned());
                        }
                    }
                    "value" => value = self.string(&f.path, f.value).map(str::to_owned),
                    _ => {}
                }
            }
            for field in ["namespace", "value"] {
                if !has_field(object, field) {
                    self.error(key_path(&p, field), MISSING);
                }
            }
            if let (Some(name), Some(value)) = (name, value) {
                out.insert(name, value);
            }
        }
        Sysctls {
            values: out,
            net,
            ipc,
        }
    }

    pub(super) fn security_options(&mut self, path: &str, v: &Json) -> Vec<String> {
        let mut out = Vec::new();
        for (item, p) in self.array(path, v).unwrap_or_default() {
            let Some(s) = self.string(&p, item) else {
                continue;
            };
            let ok = s == "no-new-privileges"
                || s.strip_prefix("apparmor:").is_some_and(|r| !r.is_empty())
                || s.strip_prefix("label:").is_some_and(|r| !r.is_empty());
            if ok {
                out.push(s.to_owned());
            } else if s.starts_with("credentialspec:") {
                self.error(
                    &p,
                    "credentialspec is for Windows containers; berth runs Linux containers",
                );
            } else {
                self.error(
                    &p,
                    format!(
                        "unknown security option {}; use \"no-new-privileges\", \"apparmor:<profile>\" or \"label:<value>\"",
                        quote(s)
                    ),
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use crate::parse;

    fn task(network: &str, extra: &str) -> String {
        format!(
            r#"{{"family": "t", "networkMode": "{network}", "containerDefinitions": [{{"name": "c", "image": "busybox", {extra}}}]}}"#
        )
    }

    use crate::parse::testing::problems_of as problems;

    #[test]
    fn every_field_is_read() {
        let parsed = parse(&task(
            "bridge",
            r#""systemControls": [{"namespace": "net.ipv4.tcp_keepalive_time", "value": "300"}, {"namespace": "kernel.shmmax", "value": "1000000"}],
               "dockerSecurityOptions": ["no-new-privileges", "apparmor:docker-default"],
               "interactive": true, "pseudoTerminal": true, "disableNetworking": true"#,
        ))
        .unwrap_or_else(|e| panic!("{:#?}", e.problems));
        assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
        let c = &parsed.definition.container_definitions[0];
        assert_eq!(
            c.system_controls
                .get("net.ipv4.tcp_keepalive_time")
                .map(String::as_str),
            Some("300")
        );
        assert_eq!(
            c.system_controls.get("kernel.shmmax").map(String::as_str),
            Some("1000000")
        );
        assert_eq!(
            c.docker_security_options,
            vec!["no-new-privileges", "apparmor:docker-default"]
        );
        assert!(c.interactive && c.pseudo_terminal && c.disable_networking);
    }

    #[test]
    fn rules() {
        assert_eq!(
            problems(&task(
                "host",
                r#""systemControls": [{"namespace": "vm.swappiness", "value": "1"}, {"namespace": "net.core.somaxconn", "value": "1024"},
                                      {"namespace": "net.core.somaxconn", "value": "1"}, {"namespace": "fs.mqueue.msg_max"}],
                   "dockerSecurityOptions": ["seccomp:unconfined", "credentialspec:file://x.json", "apparmor:"],
                   "pseudoTerminal": "yes""#
            )),
            vec![
                r#"containerDefinitions[0].systemControls[0].namespace: "vm.swappiness" cannot be set in a container: only net.*, fs.mqueue.* and the IPC sysctls kernel.msgmax, kernel.msgmnb, kernel.msgmni, kernel.sem, kernel.shmall, kernel.shmmax, kernel.shmmni, kernel.shm_rmid_forced belong to the container's own namespaces"#,
                "containerDefinitions[0].systemControls[1].namespace: net.* systemControls cannot be set in host network mode (the container shares the host's network namespace); use bridge",
                r#"containerDefinitions[0].systemControls[2].namespace: "net.core.somaxconn" is already set at containerDefinitions[0].systemControls[1]"#,
                "containerDefinitions[0].systemControls[3].value: missing required field",
                r#"containerDefinitions[0].dockerSecurityOptions[0]: unknown security option "seccomp:unconfined"; use "no-new-privileges", "apparmor:<profile>" or "label:<value>""#,
                "containerDefinitions[0].dockerSecurityOptions[1]: credentialspec is for Windows containers; berth runs Linux containers",
                r#"containerDefinitions[0].dockerSecurityOptions[2]: unknown security option "apparmor:"; use "no-new-privileges", "apparmor:<profile>" or "label:<value>""#,
                r#"containerDefinitions[0].pseudoTerminal: expected a boolean, found a string ("yes")"#,
            ]
        );
    }

    fn with_modes(modes: &str) -> String {
        format!(
            r#"{{"family": "t", {modes}, "containerDefinitions": [{{"name": "c", "image": "busybox"}}]}}"#
        )
    }

    #[test]
    fn ipc_sysctls_are_refused_with_host_ipc() {
        assert_eq!(
            problems(
                r#"{"family": "t", "ipcMode": "host", "containerDefinitions": [{"name": "c", "image": "busybox",
                    "systemControls": [{"namespace": "net.core.somaxconn", "value": "1"}, {"namespace": "kernel.shmmni", "value": "1000"}]}]}"#
            ),
            vec![
                "containerDefinitions[0].systemControls[1].namespace: kernel.shmmni cannot be set with ipcMode host (the container shares the host's IPC namespace); leave ipcMode out or drop this sysctl",
            ]
        );
    }

    #[test]
    fn pid_and_ipc_modes() {
        let parsed = parse(&with_modes(r#""pidMode": "host", "ipcMode": "none""#))
            .unwrap_or_else(|e| panic!("{:#?}", e.problems));
        assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
        assert_eq!(parsed.definition.pid_mode, Some(crate::PidMode::Host));
        assert_eq!(parsed.definition.ipc_mode, Some(crate::IpcMode::None));
        let parsed = parse(&with_modes(r#""pidMode": "task", "ipcMode": "task""#))
            .unwrap_or_else(|e| panic!("{:#?}", e.problems));
        assert_eq!(parsed.definition.pid_mode, Some(crate::PidMode::Task));
        assert_eq!(parsed.definition.ipc_mode, Some(crate::IpcMode::Task));
        assert_eq!(
            problems(&with_modes(r#""pidMode": "HOST", "ipcMode": "shareable""#)),
            vec![
                r#"pidMode: unknown pidMode "HOST"; use host or task"#,
                r#"ipcMode: unknown ipcMode "shareable"; use host, task or none"#,
            ]
        );
    }
}
