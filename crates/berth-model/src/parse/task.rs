//! The document and task levels: the bare definition or the `describe-task-definition` wrapper,
//! and the task's own fields (`family`, `revision`, `networkMode`, task `cpu`/`memory`, `tags` —
//! the wrapper's and the task's, ECS's `{key, value}` list checked by `crate::tags`), handing
//! each container and volume to its walker (`container`, `volume`) and then running the
//! cross-field checks (`cross`) on what they collected.
//!
//! Invariants: a task always comes out (fields that could not be read keep the empty values of
//! `empty_task`), so the caller decides validity from the problems alone; when `networkMode` is
//! invalid the checks that depend on it are skipped rather than guessed. Limits: task `cpu` and
//! `memory` are checked for form only, the forms the ECS API takes ("256", "0.5 vCPU", ".25 vcpu",
//! "1GB", ".5 GB": units case-insensitive, a space before them optional), and kept as written.

use super::checker::{Checker, key_path};
use super::container::ContainerInfo;
use super::json::{Json, describe, has_field, quote};
use super::rules::{Bounds, MISSING, NAME_RULE, REVISION, TAG, TASK, WRAPPER, valid_name};
use super::volume::VolumeInfo;
use crate::tags::{self, Tag};
use crate::types::{ContainerDefinition, IpcMode, NetworkMode, PidMode, TaskDefinition, Volume};

impl Checker {
    /// The whole document: a task definition, bare or in the `{"taskDefinition": ...}` wrapper.
    pub(super) fn document(&mut self, doc: &Json) -> TaskDefinition {
        let Json::Object(top) = doc else {
            self.error(
                "",
                format!(
                    "expected a task definition (a JSON object), found {}",
                    describe(doc)
                ),
            );
            return empty_task();
        };
        let Some((_, inner)) = top.iter().find(|(k, _)| k == "taskDefinition") else {
            return self.task("", top);
        };
        // The describe-task-definition wrapper: {"taskDefinition": {...}, "tags": [...]}.
        let mut wrapper_tags = Vec::new();
        for f in self.fields("", top, &WRAPPER) {
            if f.key == "tags" {
                wrapper_tags = self.tags(&f.path, f.value);
            }
        }
        let mut def = match inner {
            Json::Object(fields) => self.task("taskDefinition", fields),
            other => {
                self.type_error("taskDefinition", "a task definition object", other);
                empty_task()
            }
        };
        // Both places at once is no shape ECS writes; a key in both is refused, not guessed.
        for t in &def.tags {
            if wrapper_tags.iter().any(|w| w.key == t.key) {
                self.error(
                    "tags",
                    format!(
                        "tag key {} is also in taskDefinition.tags; give each tag once",
                        quote(&t.key)
                    ),
                );
            }
        }
        wrapper_tags.append(&mut def.tags);
        def.tags = wrapper_tags;
        def
    }

    /// `tags`: ECS's `[{"key": …, "value": …}]`, each checked by ECS's rules (`crate::tags`).
    fn tags(&mut self, path: &str, v: &Json) -> Vec<Tag> {
        let Some(items) = self.array(path, v) else {
            return Vec::new();
        };
        if let Err(why) = tags::check_count(items.len()) {
            self.error(path, why.to_string());
        }
        let mut out: Vec<Tag> = Vec::new();
        for (item, ip) in items {
            let Some(fields) = self.object(&ip, item) else {
                continue;
            };
            let (mut key, mut value) = (None, None);
            for f in self.fields(&ip, fields, &TAG) {
                match f.key {
                    "key" => key = self.string(&f.path, f.value).map(str::to_owned),
                    "value" => value = self.string(&f.path, f.value).map(str::to_owned),
                    _ => {}
                }
            }
            let tag_key_path = key_path(&ip, "key");
            let Some(key) = key else {
                if !has_field(fields, "key") {
                    self.error(tag_key_path, MISSING);
                }
                continue;
            };
            if let Err(why) = tags::check_key(&key) {
                self.error(&tag_key_path, why.to_string());
                continue;
            }
            let value = value.unwrap_or_default();
            if let Err(why) = tags::check_value(&value) {
                self.error(key_path(&ip, "value"), why.to_string());
                continue;
            }
            if out.iter().any(|t| t.key == key) {
                self.error(
                    tag_key_path,
                    format!("tag key {} is given twice; give each tag once", quote(&key)),
                );
                continue;
            }
            out.push(Tag::new(key, value));
        }
        out
    }

    /// `taskRoleArn` / `executionRoleArn`: a role ARN or a role name; `null` or `""` is none.
    fn role(&mut self, path: &str, value: &Json) -> Option<String> {
        if matches!(value, Json::Null) {
            return None;
        }
        let s = self.string(path, value)?;
        if s.is_empty() {
            return None;
        }
        if let Err(why) = crate::role::RoleArn::check(s) {
            self.error(path, why);
            return None;
        }
        Some(s.to_owned())
    }

    fn task(&mut self, path: &str, object: &[(String, Json)]) -> TaskDefinition {
        let mut def = empty_task();
        let mut family_seen = false;
        let mut containers: Option<Vec<(ContainerDefinition, ContainerInfo)>> = None;
        let mut volumes: Option<Vec<(Volume, VolumeInfo)>> = Some(Vec::new());
        // None when networkMode is invalid: the checks that depend on it are skipped.
        let mut network = Some(NetworkMode::Bridge);
        for f in self.fields(path, object, &TASK) {
            let p = f.path.as_str();
            match f.key {
                "family" => {
                    family_seen = true;
                    if let Some(s) = self.string(p, f.value) {
                        if !valid_name(s) {
                            self.error(
                                p,
                                format!("{} is not a valid family name; {NAME_RULE}", quote(s)),
                            );
                        }
                        def.family = s.to_owned();
                    }
                }
                "revision" => {
                    if let Some(n) = self.bounded_u32(p, f.value, REVISION) {
                        def.revision = n;
                    }
                }
                "containerDefinitions" => {
                    // Over the limit, the containers are not read at all: a definition of
                    // thousands of containers costs no more than its JSON.
                    if let Json::Array(items) = f.value
                        && items.len() > self.max_containers
                    {
                        self.error(
                            p,
                            format!(
                                "lists {} containers; a task may have at most {} (ECS's limit is 10): split it into several tasks, or raise the limit with the agent's --max-containers-per-task",
                                items.len(),
                                self.max_containers
                            ),
                        );
                        continue;
                    }
                    containers = self.array(p, f.value).map(|items| {
                        if items.is_empty() {
                            self.error(p, "must list at least one container");
                        }
                        items
                            .iter()
                            .map(|(item, ip)| self.container(ip, item))
                            .collect()
                    });
                }
                "volumes" => {
                    volumes = self.array(p, f.value).map(|items| {
                        items
                            .iter()
                            .map(|(item, ip)| self.volume(ip, item))
                            .collect()
                    });
                }
                "networkMode" => {
                    network = self.string(p, f.value).and_then(|s| match s {
                        "bridge" => Some(NetworkMode::Bridge),
                        "host" => Some(NetworkMode::Host),
                        "none" => Some(NetworkMode::None),
                        "awsvpc" => Some(NetworkMode::Awsvpc),
                        other => {
                            self.error(
                                p,
                                format!(
                                    "unknown network mode {}; use bridge, host, awsvpc or none",
                                    quote(other)
                                ),
                            );
                            None
                        }
                    });
                    if let Some(mode) = network {
                        def.network_mode = mode;
                    }
                }
                "pidMode" => {
                    def.pid_mode = self.string(p, f.value).and_then(|s| match s {
                        "host" => Some(PidMode::Host),
                        "task" => Some(PidMode::Task),
                        other => {
                            self.error(
                                p,
                                format!("unknown pidMode {}; use host or task", quote(other)),
                            );
                            None
                        }
                    });
                }
                "ipcMode" => {
                    def.ipc_mode = self.string(p, f.value).and_then(|s| match s {
                        "host" => Some(IpcMode::Host),
                        "none" => Some(IpcMode::None),
                        "task" => Some(IpcMode::Task),
                        other => {
                            self.error(
                                p,
                                format!("unknown ipcMode {}; use host, task or none", quote(other)),
                            );
                            None
                        }
                    });
                }
                "cpu" => def.cpu = self.task_amount(p, f.value, Amount::Cpu),
                "tags" => def.tags = self.tags(p, f.value),
                "taskRoleArn" => def.task_role_arn = self.role(p, f.value),
                "executionRoleArn" => def.execution_role_arn = self.role(p, f.value),
                "memory" => def.memory = self.task_amount(p, f.value, Amount::Memory),
                _ => {} // `fields` only returns keys listed in TASK.known.
            }
        }
        if !family_seen {
            self.error(key_path(path, "family"), MISSING);
        }
        let containers_path = key_path(path, "containerDefinitions");
        if !has_field(object, "containerDefinitions") {
            self.error(&containers_path, MISSING);
        }
        if let Some(list) = &containers {
            self.cross_checks(&containers_path, list, volumes.as_deref(), network);
            self.firelens_checks(list);
            if def.ipc_mode == Some(IpcMode::Host) {
                for (_, info) in list {
                    for (p, name) in &info.ipc_sysctls {
                        self.error(
                            p.as_str(),
                            format!("{name} cannot be set with ipcMode host (the container shares the host's IPC namespace); leave ipcMode out or drop this sysctl"),
                        );
                    }
                }
            }
        }
        if let Some(list) = volumes {
            self.duplicate_volumes(&list);
            def.volumes = list.into_iter().map(|(v, _)| v).collect();
        }
        def.container_definitions = containers
            .unwrap_or_default()
            .into_iter()
            .map(|(c, _)| c)
            .collect();
        def
    }

    /// Task-level `cpu` / `memory`: a number or a string as ECS writes them; kept as a string.
    fn task_amount(&mut self, path: &str, v: &Json, amount: Amount) -> Option<String> {
        match v {
            Json::Number(_) => self
                .bounded(path, v, Bounds::new(0, u64::MAX, ""))
                .map(|n| n.to_string()),
            Json::String(s) => {
                let text = s.trim();
                if text.starts_with('-') {
                    self.error(path, format!("must not be negative, found {}", quote(s)));
                    return None;
                }
                let lower = text.to_ascii_lowercase();
                let ok = match amount {
                    Amount::Cpu => {
                        is_integer(text)
                            || lower
                                .strip_suffix("vcpu")
                                .is_some_and(|n| is_decimal(n.trim_end()))
                    }
                    Amount::Memory => {
                        is_integer(text)
                            || lower
                                .strip_suffix("gb")
                                .is_some_and(|n| is_decimal(n.trim_end()))
                    }
                };
                if !ok {
                    let hint = match amount {
                        Amount::Cpu => {
                            "write CPU units such as \"256\" or vCPUs such as \"0.5 vCPU\""
                        }
                        Amount::Memory => "write MiB such as \"512\" or GB such as \"1 GB\"",
                    };
                    self.error(
                        path,
                        format!("{} is not a {} amount; {hint}", quote(s), amount.as_str()),
                    );
                    return None;
                }
                Some(s.clone())
            }
            other => {
                self.type_error(path, "a string or a number", other);
                None
            }
        }
    }
}

#[derive(Clone, Copy)]
enum Amount {
    Cpu,
    Memory,
}

impl Amount {
    fn as_str(self) -> &'static str {
        match self {
            Amount::Cpu => "CPU",
            Amount::Memory => "memory",
        }
    }
}

fn is_integer(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// `2`, `0.5` or `.5`, as the ECS documentation writes amounts (`.25 vCPU`, `0.5 GB`); not `2.`.
fn is_decimal(s: &str) -> bool {
    match s.split_once('.') {
        Some((whole, fraction)) => (whole.is_empty() || is_integer(whole)) && is_integer(fraction),
        None => is_integer(s),
    }
}

fn empty_task() -> TaskDefinition {
    TaskDefinition::new("", Vec::new())
}
