//! One container definition: its own fields (name, image, command, environment, resources,
//! labels, hostname, health check, ulimits, log configuration; `linuxParameters` through
//! `linux`), each read and checked where it stands. The fields that name other containers, volumes
//! or host ports (`dependsOn`, `volumesFrom`, `links`, `mountPoints`, `portMappings`) are read by
//! `relations`.
//!
//! Invariants: a container always comes out (unreadable fields keep the defaults of
//! [`ContainerDefinition::new`], which are ECS's defaults), together with a [`ContainerInfo`] that
//! records what the cross-field checks (`cross`) need, including what could only be half read (a
//! `healthCheck` that is present but invalid still counts as present). Limits: the image
//! reference is only checked for emptiness and whitespace; Docker judges the rest.

use super::checker::{Checker, index_path, key_path};
use super::json::{Json, has_field, quote};
use super::relations::{DependencyInfo, LinkInfo, PortInfo};
use super::rules::{
    CONTAINER, CONTAINER_CPU, ENV_VAR, HC_INTERVAL, HC_RETRIES, HC_START_PERIOD, HC_TIMEOUT,
    HEALTH_CHECK, LOG_CONFIGURATION, MEMORY, MEMORY_RESERVATION, MISSING, NAME_RULE,
    REPOSITORY_CREDENTIALS, TIMEOUT, ULIMIT, ULIMIT_NAMES, valid_name,
};
use crate::types::{
    ContainerDefinition, EnvVar, HealthCheck, LogConfiguration, LogDriver, RepositoryCredentials,
    Ulimit,
};
use std::collections::{BTreeMap, HashMap};

/// What the cross-field checks need to know about a container.
pub(super) struct ContainerInfo {
    pub(super) path: String,
    pub(super) name: Option<String>,
    /// True when absent or not a boolean (so a type error does not also cause "no essential").
    pub(super) essential: bool,
    /// A `healthCheck` field is present (valid or not).
    pub(super) has_health_check: bool,
    pub(super) depends_on: Vec<DependencyInfo>,
    /// (path of the mount point, sourceVolume)
    pub(super) mounts: Vec<(String, String)>,
    /// (path of the entry, sourceContainer)
    pub(super) volumes_from: Vec<(String, String)>,
    /// Where `links` is, when present (for the network-mode check).
    pub(super) links_path: Option<String>,
    pub(super) links: Vec<LinkInfo>,
    pub(super) port_mappings_path: Option<String>,
    pub(super) ports: Vec<PortInfo>,
    pub(super) hostname_path: Option<String>,
    /// Paths of `systemControls` namespaces in `net.*` (not allowed in host network mode).
    pub(super) net_sysctl_paths: Vec<String>,
    /// (path, name) of IPC `systemControls` namespaces (not allowed with `ipcMode: host`).
    pub(super) ipc_sysctls: Vec<(String, String)>,
}

impl Checker {
    pub(super) fn container(
        &mut self,
        path: &str,
        v: &Json,
    ) -> (ContainerDefinition, ContainerInfo) {
        let mut def = ContainerDefinition::new("", "");
        let mut info = ContainerInfo {
            path: path.to_owned(),
            name: None,
            essential: true,
            has_health_check: false,
            depends_on: Vec::new(),
            mounts: Vec::new(),
            volumes_from: Vec::new(),
            links_path: None,
            links: Vec::new(),
            port_mappings_path: None,
            ports: Vec::new(),
            hostname_path: None,
            net_sysctl_paths: Vec::new(),
            ipc_sysctls: Vec::new(),
        };
        let Some(object) = self.object(path, v) else {
            return (def, info);
        };
        let (mut name_seen, mut image_seen) = (false, false);
        let mut memory: Option<(u64, String)> = None;
        let mut reservation: Option<(u64, String)> = None;
        let mut max_swap_path = None;
        for f in self.fields(path, object, &CONTAINER) {
            let (p, v) = (f.path.as_str(), f.value);
            match f.key {
                "name" => {
                    name_seen = true;
                    if let Some(s) = self.string(p, v) {
                        if !valid_name(s) {
                            self.error(
                                p,
                                format!("{} is not a valid container name; {NAME_RULE}", quote(s)),
                            );
                        }
                        def.name = s.to_owned();
                        info.name = Some(s.to_owned());
                    }
                }
                "image" => {
                    image_seen = true;
                    if let Some(s) = self.string(p, v) {
                        if s.is_empty() {
                            self.error(p, "must not be empty");
                        } else if s.chars().any(char::is_whitespace) {
                            self.error(
                                p,
                                format!(
                                    "{} is not an image reference: it contains whitespace",
                                    quote(s)
                                ),
                            );
                        }
                        def.image = s.to_owned();
                    }
                }
                "essential" => {
                    if let Some(b) = self.boolean(p, v) {
                        def.essential = b;
                        info.essential = b;
                    }
                }
                "command" => def.command = self.string_list(p, v),
                "entryPoint" => def.entry_point = self.string_list(p, v),
                "environment" => def.environment = self.environment(p, v),
                "workingDirectory" => def.working_directory = self.absolute_path(p, v),
                "user" => def.user = self.non_empty_string(p, v),
                "dependsOn" => def.depends_on = self.depends_on(p, v, &mut info),
                "healthCheck" => {
                    info.has_health_check = true;
                    def.health_check = self.health_check(p, v);
                }
                "mountPoints" => def.mount_points = self.mount_points(p, v, &mut info),
                "volumesFrom" => def.volumes_from = self.volumes_from(p, v, &mut info),
                "links" => {
                    info.links_path = Some(p.to_owned());
                    def.links = self.links(p, v, &mut info);
                }
                "portMappings" => {
                    info.port_mappings_path = Some(p.to_owned());
                    def.port_mappings = self.port_mappings(p, v, &mut info);
                }
                "cpu" => def.cpu = self.bounded_u32(p, v, CONTAINER_CPU),
                "memory" => {
                    def.memory = self.bounded(p, v, MEMORY);
                    memory = def.memory.map(|n| (n, p.to_owned()));
                }
                "memoryReservation" => {
                    def.memory_reservation = self.bounded(p, v, MEMORY_RESERVATION);
                    reservation = def.memory_reservation.map(|n| (n, p.to_owned()));
                }
                "stopTimeout" => def.stop_timeout = self.bounded_u32(p, v, TIMEOUT),
                "startTimeout" => def.start_timeout = self.bounded_u32(p, v, TIMEOUT),
                "dockerLabels" => def.docker_labels = self.string_map(p, v).unwrap_or_default(),
                "readonlyRootFilesystem" => {
                    def.readonly_root_filesystem = self.boolean(p, v).unwrap_or(false);
                }
                "privileged" => def.privileged = self.boolean(p, v).unwrap_or(false),
                "hostname" => {
                    info.hostname_path = Some(p.to_owned());
                    if let Some(s) = self.non_empty_string(p, v) {
                        if s.chars().any(char::is_whitespace) || s.len() > 253 {
                            self.error(p, format!("{} is not a valid hostname", quote(&s)));
                        }
                        def.hostname = Some(s);
                    }
                }
                "ulimits" => def.ulimits = self.ulimits(p, v),
                "logConfiguration" => def.log_configuration = self.log_configuration(p, v),
                "dnsServers" => def.dns_servers = self.dns_servers(p, v),
                "dnsSearchDomains" => def.dns_search_domains = self.dns_search_domains(p, v),
                "extraHosts" => def.extra_hosts = self.extra_hosts(p, v),
                "systemControls" => {
                    let sysctls = self.system_controls(p, v);
                    def.system_controls = sysctls.values;
                    info.net_sysctl_paths = sysctls.net;
                    info.ipc_sysctls = sysctls.ipc;
                }
                "dockerSecurityOptions" => {
                    def.docker_security_options = self.security_options(p, v);
                }
                "interactive" => def.interactive = self.boolean(p, v).unwrap_or(false),
                "pseudoTerminal" => def.pseudo_terminal = self.boolean(p, v).unwrap_or(false),
                "disableNetworking" => {
                    def.disable_networking = self.boolean(p, v).unwrap_or(false);
                }
                "repositoryCredentials" => {
                    def.repository_credentials = self.repository_credentials(p, v);
                }
                "linuxParameters" => {
                    let (lp, linux) = self.linux_parameters(p, v);
                    def.linux_parameters = lp;
                    max_swap_path = linux.max_swap_path;
                }
                _ => {} // `fields` only returns keys listed in CONTAINER.known.
            }
        }
        if !name_seen {
            self.error(key_path(path, "name"), MISSING);
        }
        if !image_seen {
            self.error(key_path(path, "image"), MISSING);
        }
        if let (Some((hard, _)), Some((soft, soft_path))) = (&memory, &reservation)
            && soft > hard
        {
            self.error(
                soft_path.as_str(),
                format!("must not exceed memory ({hard} MiB), found {soft}"),
            );
        }
        if let Some(p) = max_swap_path
            && !has_field(object, "memory")
        {
            self.error(
                p,
                "maxSwap needs a hard memory limit: set \"memory\" on this container (Docker's swap limit is memory + maxSwap)",
            );
        }
        (def, info)
    }

    fn environment(&mut self, path: &str, v: &Json) -> Vec<EnvVar> {
        let mut out = Vec::new();
        for (item, p) in self.array(path, v).unwrap_or_default() {
            let Some(object) = self.object(&p, item) else {
                continue;
            };
            let mut name = None;
            let mut value = String::new();
            for f in self.fields(&p, object, &ENV_VAR) {
                match f.key {
                    "name" => {
                        if let Some(s) = self.non_empty_string(&f.path, f.value) {
                            if s.contains('=') {
                                self.error(
                                    &f.path,
                                    format!("{} must not contain \"=\"", quote(&s)),
                                );
                            }
                            name = Some(s);
                        }
                    }
                    "value" => {
                        if let Some(s) = self.string(&f.path, f.value) {
                            value = s.to_owned();
                        }
                    }
                    _ => {}
                }
            }
            if !has_field(object, "name") {
                self.error(key_path(&p, "name"), MISSING);
            }
            if let Some(name) = name {
                out.push(EnvVar { name, value });
            }
        }
        out
    }

    /// `repositoryCredentials: {"credentialsParameter": "<secret ARN or name>"}`. The value names
    /// a secret; it is resolved when the image is pulled, never here (this crate does no I/O).
    fn repository_credentials(&mut self, path: &str, v: &Json) -> Option<RepositoryCredentials> {
        let object = self.object(path, v)?;
        let mut parameter = None;
        for f in self.fields(path, object, &REPOSITORY_CREDENTIALS) {
            if f.key == "credentialsParameter"
                && let Some(s) = self.non_empty_string(&f.path, f.value)
            {
                if s.chars().any(char::is_whitespace) {
                    self.error(
                        &f.path,
                        format!(
                            "{} is not a secret ARN or name: it contains whitespace",
                            quote(&s)
                        ),
                    );
                }
                parameter = Some(s);
            }
        }
        if !has_field(object, "credentialsParameter") {
            self.error(
                key_path(path, "credentialsParameter"),
                "missing required field; the ARN or name of the secret holding {\"username\", \"password\"}",
            );
        }
        Some(RepositoryCredentials {
            credentials_parameter: parameter?,
        })
    }

    fn health_check(&mut self, path: &str, v: &Json) -> Option<HealthCheck> {
        let object = self.object(path, v)?;
        let mut hc = HealthCheck {
            command: Vec::new(),
            interval: 30,
            timeout: 5,
            retries: 3,
            start_period: 0,
        };
        let mut ok = true;
        let mut command_seen = false;
        for f in self.fields(path, object, &HEALTH_CHECK) {
            let (p, v) = (f.path.as_str(), f.value);
            let slot = match f.key {
                "command" => {
                    command_seen = true;
                    match self.string_list(p, v) {
                        Some(cmd) if self.health_command(p, &cmd) => hc.command = cmd,
                        _ => ok = false,
                    }
                    continue;
                }
                "interval" => (&mut hc.interval, HC_INTERVAL),
                "timeout" => (&mut hc.timeout, HC_TIMEOUT),
                "retries" => (&mut hc.retries, HC_RETRIES),
                "startPeriod" => (&mut hc.start_period, HC_START_PERIOD),
                _ => continue,
            };
            match self.bounded_u32(p, v, slot.1) {
                Some(n) => *slot.0 = n,
                None => ok = false,
            }
        }
        if !command_seen {
            self.error(
                key_path(path, "command"),
                "missing required field; for example [\"CMD-SHELL\", \"curl -f http://localhost/ || exit 1\"]",
            );
            ok = false;
        }
        ok.then_some(hc)
    }

    /// Checks `["CMD-SHELL", "..."]` / `["CMD", "prog", ...]`; true when fine.
    fn health_command(&mut self, path: &str, cmd: &[String]) -> bool {
        let Some((first, rest)) = cmd.split_first() else {
            self.error(
                path,
                "must not be empty; use [\"CMD-SHELL\", \"shell command\"] or [\"CMD\", \"program\", \"arg\"...]",
            );
            return false;
        };
        match first.as_str() {
            "CMD-SHELL" if rest.len() != 1 => {
                self.error(
                    path,
                    format!(
                        "\"CMD-SHELL\" must be followed by exactly one string (the shell command), found {}",
                        rest.len()
                    ),
                );
                false
            }
            "CMD" if rest.is_empty() => {
                self.error(
                    path,
                    "\"CMD\" must be followed by the program to run and its arguments",
                );
                false
            }
            "CMD" | "CMD-SHELL" => {
                if rest.iter().all(String::is_empty) {
                    self.error(index_path(path, 1), "must not be empty");
                    return false;
                }
                true
            }
            other => {
                self.error(index_path(path, 0), health_command_fix(other, cmd));
                false
            }
        }
    }

    fn ulimits(&mut self, path: &str, v: &Json) -> Vec<Ulimit> {
        let mut out = Vec::new();
        let mut names: HashMap<String, String> = HashMap::new();
        for (item, p) in self.array(path, v).unwrap_or_default() {
            let Some(object) = self.object(&p, item) else {
                continue;
            };
            let (mut name, mut soft, mut hard) = (None, None, None);
            let mut soft_path = key_path(&p, "softLimit");
            for f in self.fields(&p, object, &ULIMIT) {
                match f.key {
                    "name" => {
                        if let Some(s) = self.string(&f.path, f.value) {
                            if !ULIMIT_NAMES.contains(&s) {
                                self.error(
                                    &f.path,
                                    format!(
                                        "unknown ulimit {}; use one of {}",
                                        quote(s),
                                        ULIMIT_NAMES.join(", ")
                                    ),
                                );
                            } else if let Some(first) = names.get(s) {
                                self.error(
                                    &f.path,
                                    format!("duplicate ulimit {} (also {first})", quote(s)),
                                );
                            } else {
                                names.insert(s.to_owned(), p.clone());
                            }
                            name = Some(s.to_owned());
                        }
                    }
                    "softLimit" => {
                        soft = self.limit(&f.path, f.value);
                        soft_path = f.path.clone();
                    }
                    "hardLimit" => hard = self.limit(&f.path, f.value),
                    _ => {}
                }
            }
            for field in ["name", "softLimit", "hardLimit"] {
                if !has_field(object, field) {
                    self.error(key_path(&p, field), MISSING);
                }
            }
            if let (Some(s), Some(h)) = (soft, hard) {
                // -1 means unlimited.
                let above = |a: i64, b: i64| b != -1 && (a == -1 || a > b);
                if above(s, h) {
                    self.error(
                        soft_path,
                        format!("softLimit ({s}) must not exceed hardLimit ({h})"),
                    );
                }
                if let Some(name) = name {
                    out.push(Ulimit {
                        name,
                        soft_limit: s,
                        hard_limit: h,
                    });
                }
            }
        }
        out
    }

    /// A ulimit value: -1 (unlimited) or a non-negative integer.
    fn limit(&mut self, path: &str, v: &Json) -> Option<i64> {
        let n = self.integer(path, v)?;
        if n < -1 {
            self.error(
                path,
                format!("must be -1 (unlimited) or not negative, found {n}"),
            );
            return None;
        }
        match i64::try_from(n) {
            Ok(n) => Some(n),
            Err(_) => {
                self.error(path, format!("must be at most {}, found {n}", i64::MAX));
                None
            }
        }
    }

    fn log_configuration(&mut self, path: &str, v: &Json) -> Option<LogConfiguration> {
        let object = self.object(path, v)?;
        let (mut driver, mut options, mut driver_seen) = (None, Some(BTreeMap::new()), false);
        for f in self.fields(path, object, &LOG_CONFIGURATION) {
            match f.key {
                "logDriver" => {
                    driver_seen = true;
                    driver = match self.string(&f.path, f.value) {
                        Some("json-file") => Some(LogDriver::JsonFile),
                        Some("local") => Some(LogDriver::Local),
                        Some("none") => Some(LogDriver::None),
                        Some(other) => {
                            self.error(
                                &f.path,
                                format!(
                                    "log driver {} is not supported by berth; use json-file, local or none",
                                    quote(other)
                                ),
                            );
                            None
                        }
                        None => None,
                    };
                }
                "options" => options = self.string_map(&f.path, f.value),
                _ => {}
            }
        }
        if !driver_seen {
            self.error(
                key_path(path, "logDriver"),
                "missing required field; use json-file, local or none",
            );
        }
        Some(LogConfiguration {
            log_driver: driver?,
            options: options?,
        })
    }
}

/// The message for a health check command whose first string is not `CMD`/`CMD-SHELL`: it
/// shows the command rewritten with `CMD` (and with `CMD-SHELL` when it is one string; only
/// with `CMD-SHELL` when that string is a shell line), or the upper-case spelling when only the
/// case is wrong.
fn health_command_fix(first: &str, cmd: &[String]) -> String {
    let found = format!("must be \"CMD\" or \"CMD-SHELL\", found {}", quote(first));
    for keyword in ["CMD", "CMD-SHELL"] {
        if first.eq_ignore_ascii_case(keyword) {
            return format!("{found}; the keyword is upper case: {}", quote(keyword));
        }
    }
    let shell = format!("[\"CMD-SHELL\", {}]", quote(first));
    if cmd.len() == 1 && first.contains(char::is_whitespace) {
        return format!("{found}; to run it in a shell write {shell}");
    }
    const SHOWN: usize = 4;
    let mut args: Vec<String> = cmd.iter().take(SHOWN).map(|a| quote(a)).collect();
    if cmd.len() > SHOWN {
        args.push("...".to_owned());
    }
    let program = format!("[\"CMD\", {}]", args.join(", "));
    if cmd.len() == 1 {
        format!("{found}; to run the program write {program}, or in a shell {shell}")
    } else {
        format!("{found}; to run the program write {program}")
    }
}
