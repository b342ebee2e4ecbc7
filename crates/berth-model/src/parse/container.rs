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
    CONTAINER, CONTAINER_CPU, ENV_VAR, ENVIRONMENT_FILE, HC_INTERVAL, HC_RETRIES, HC_START_PERIOD,
    HC_TIMEOUT, HEALTH_CHECK, LOG_CONFIGURATION, MAX_ENVIRONMENT_FILES, MAX_IGNORED_EXIT_CODES,
    MEMORY, MEMORY_RESERVATION, MISSING, NAME_RULE, REPOSITORY_CREDENTIALS, RESTART_ATTEMPT_PERIOD,
    RESTART_POLICY, SECRET, TIMEOUT, ULIMIT, ULIMIT_NAMES, valid_name,
};
use crate::secret::{EnvironmentFileLocation, SecretReference};
use crate::types::{
    ContainerDefinition, DEFAULT_RESTART_ATTEMPT_PERIOD, EnvVar, EnvironmentFile,
    EnvironmentFileType, HealthCheck, LogConfiguration, LogDriver, RepositoryCredentials,
    RestartPolicy, Secret, Ulimit,
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
    /// (path, field) of fields that need the container's own network namespace: `dnsServers`,
    /// `dnsSearchDomains`, `extraHosts` (refused in awsvpc mode, where the task's pause container
    /// owns the namespace and its files).
    pub(super) own_network_fields: Vec<(String, &'static str)>,
    /// Where `restartPolicy` is, when it is present and enabled (for the `dependsOn` checks).
    pub(super) restart_enabled_path: Option<String>,
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
            own_network_fields: Vec::new(),
            restart_enabled_path: None,
        };
        let Some(object) = self.object(path, v) else {
            return (def, info);
        };
        let (mut name_seen, mut image_seen) = (false, false);
        let mut memory: Option<(u64, String)> = None;
        let mut reservation: Option<(u64, String)> = None;
        let mut max_swap_path = None;
        let mut secret_paths = Vec::new();
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
                        } else if let Some(c) = s.chars().find(|c| c.is_control()) {
                            // It would reach logs and terminals raw (an escape sequence).
                            self.error(
                                p,
                                format!(
                                    "{} is not an image reference: it contains the control character U+{:04X}",
                                    quote(s),
                                    u32::from(c)
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
                "secrets" => {
                    let secrets = self.secrets(p, v, SecretTarget::Environment);
                    (def.secrets, secret_paths) = secrets.into_iter().unzip();
                }
                "environmentFiles" => def.environment_files = self.environment_files(p, v),
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
                "firelensConfiguration" => {
                    def.firelens_configuration = self.firelens_configuration(p, v);
                }
                "dnsServers" => {
                    def.dns_servers = self.dns_servers(p, v);
                    if !def.dns_servers.is_empty() {
                        info.own_network_fields.push((p.to_owned(), "dnsServers"));
                    }
                }
                "dnsSearchDomains" => {
                    def.dns_search_domains = self.dns_search_domains(p, v);
                    if !def.dns_search_domains.is_empty() {
                        info.own_network_fields
                            .push((p.to_owned(), "dnsSearchDomains"));
                    }
                }
                "extraHosts" => {
                    def.extra_hosts = self.extra_hosts(p, v);
                    if !def.extra_hosts.is_empty() {
                        info.own_network_fields.push((p.to_owned(), "extraHosts"));
                    }
                }
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
                "resourceRequirements" => def.gpu = self.resource_requirements(p, v),
                "repositoryCredentials" => {
                    def.repository_credentials = self.repository_credentials(p, v);
                }
                "restartPolicy" => {
                    def.restart_policy = self.restart_policy(p, v);
                    if def.restart_policy.as_ref().is_some_and(|r| r.enabled) {
                        info.restart_enabled_path = Some(p.to_owned());
                    }
                }
                "linuxParameters" => {
                    let (lp, linux) = self.linux_parameters(p, v);
                    def.linux_parameters = lp;
                    max_swap_path = linux.max_swap_path;
                }
                _ => {} // `fields` only returns keys listed in CONTAINER.known.
            }
        }
        for (secret, p) in def.secrets.iter().zip(&secret_paths) {
            if def.environment.iter().any(|e| e.name == secret.name) {
                self.warn(
                    key_path(p, "name"),
                    format!(
                        "{} is also set in environment; the secret's value wins, as on ECS",
                        quote(&secret.name)
                    ),
                );
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

    /// `secrets` or `logConfiguration.secretOptions`: each entry with its path. Every `valueFrom` is
    /// parsed as a [`SecretReference`] here, so a reference no source could ever resolve is an error
    /// at validation, not when the task starts.
    fn secrets(&mut self, path: &str, v: &Json, target: SecretTarget) -> Vec<(Secret, String)> {
        let mut out: Vec<(Secret, String)> = Vec::new();
        for (item, p) in self.array(path, v).unwrap_or_default() {
            let Some(object) = self.object(&p, item) else {
                continue;
            };
            let (mut name, mut value_from) = (None, None);
            for f in self.fields(&p, object, &SECRET) {
                match f.key {
                    "name" => {
                        if let Some(s) = self.non_empty_string(&f.path, f.value) {
                            if target == SecretTarget::Environment && s.contains('=') {
                                self.error(
                                    &f.path,
                                    format!("{} must not contain \"=\"", quote(&s)),
                                );
                            }
                            if let Some((_, first)) = out.iter().find(|(o, _)| o.name == s) {
                                self.warn(
                                    &f.path,
                                    format!(
                                        "duplicate {} {} (also {first}); the later one wins",
                                        target.what(),
                                        quote(&s)
                                    ),
                                );
                            }
                            name = Some(s);
                        }
                    }
                    "valueFrom" => {
                        if let Some(s) = self.non_empty_string(&f.path, f.value) {
                            match SecretReference::parse(&s) {
                                Ok(_) => value_from = Some(s),
                                Err(e) => self.error(&f.path, format!("{} {e}", quote(&s))),
                            }
                        }
                    }
                    _ => {}
                }
            }
            for field in ["name", "valueFrom"] {
                if !has_field(object, field) {
                    self.error(
                        key_path(&p, field),
                        match field {
                            "name" => format!("{MISSING}: the {} to set", target.what()),
                            _ => format!(
                                "{MISSING}: the ARN or name of the SSM parameter or Secrets Manager secret"
                            ),
                        },
                    );
                }
            }
            if let (Some(name), Some(value_from)) = (name, value_from) {
                out.push((Secret { name, value_from }, p));
            }
        }
        out
    }

    /// `environmentFiles`: at most ten, each `{"value": <S3 ARN or absolute path>, "type": "s3"}`.
    fn environment_files(&mut self, path: &str, v: &Json) -> Vec<EnvironmentFile> {
        let mut out = Vec::new();
        let items = self.array(path, v).unwrap_or_default();
        if items.len() > MAX_ENVIRONMENT_FILES {
            self.error(
                path,
                format!(
                    "ECS takes at most {MAX_ENVIRONMENT_FILES} environment files per container, found {}; merge some",
                    items.len()
                ),
            );
        }
        for (item, p) in items {
            let Some(object) = self.object(&p, item) else {
                continue;
            };
            let (mut value, mut file_type) = (None, None);
            for f in self.fields(&p, object, &ENVIRONMENT_FILE) {
                match f.key {
                    "value" => {
                        if let Some(s) = self.non_empty_string(&f.path, f.value) {
                            match EnvironmentFileLocation::parse(&s) {
                                Ok(_) => {
                                    if !s.ends_with(".env") {
                                        self.warn(
                                            &f.path,
                                            format!(
                                                "{} does not end in \".env\", the extension ECS requires of environment files",
                                                quote(&s)
                                            ),
                                        );
                                    }
                                    value = Some(s);
                                }
                                Err(e) => self.error(&f.path, format!("{} {e}", quote(&s))),
                            }
                        }
                    }
                    "type" => match self.string(&f.path, f.value) {
                        Some("s3") => file_type = Some(EnvironmentFileType::S3),
                        Some(other) => self.error(
                            &f.path,
                            format!(
                                "{} is not an environment file type; use \"s3\" (also for a local path)",
                                quote(other)
                            ),
                        ),
                        None => {}
                    },
                    _ => {}
                }
            }
            for field in ["value", "type"] {
                if !has_field(object, field) {
                    self.error(
                        key_path(&p, field),
                        match field {
                            "value" => format!(
                                "{MISSING}: an S3 object ARN (arn:aws:s3:::<bucket>/<key>) or an absolute path"
                            ),
                            _ => format!("{MISSING}; use \"s3\""),
                        },
                    );
                }
            }
            if let (Some(value), Some(file_type)) = (value, file_type) {
                out.push(EnvironmentFile { value, file_type });
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

    /// `restartPolicy: {"enabled": bool, "ignoredExitCodes": [int], "restartAttemptPeriod": s}`
    /// with ECS's rules: `enabled` required, at most 50 exit codes, the period 60 – 1800 s
    /// (default 300). `null` reads as absent.
    fn restart_policy(&mut self, path: &str, v: &Json) -> Option<RestartPolicy> {
        if matches!(v, Json::Null) {
            return None;
        }
        let object = self.object(path, v)?;
        let mut policy = RestartPolicy {
            enabled: false,
            ignored_exit_codes: Vec::new(),
            restart_attempt_period: DEFAULT_RESTART_ATTEMPT_PERIOD,
        };
        let (mut ok, mut enabled_seen) = (true, false);
        for f in self.fields(path, object, &RESTART_POLICY) {
            let (p, v) = (f.path.as_str(), f.value);
            match f.key {
                "enabled" => {
                    enabled_seen = true;
                    match self.boolean(p, v) {
                        Some(b) => policy.enabled = b,
                        None => ok = false,
                    }
                }
                "ignoredExitCodes" => {
                    if matches!(v, Json::Null) {
                        continue;
                    }
                    let Some(items) = self.array(p, v) else {
                        ok = false;
                        continue;
                    };
                    if items.len() > MAX_IGNORED_EXIT_CODES {
                        self.error(
                            p,
                            format!(
                                "at most {MAX_IGNORED_EXIT_CODES} exit codes may be listed, found {}",
                                items.len()
                            ),
                        );
                        ok = false;
                    }
                    let mut seen: HashMap<i64, String> = HashMap::new();
                    for (item, ip) in items {
                        let Some(n) = self.integer(&ip, item) else {
                            ok = false;
                            continue;
                        };
                        let Ok(code) = i32::try_from(n) else {
                            self.error(
                                &ip,
                                format!("{n} is not an exit code: must be a 32-bit integer"),
                            );
                            ok = false;
                            continue;
                        };
                        let code = i64::from(code);
                        if let Some(first) = seen.get(&code) {
                            self.warn(
                                &ip,
                                format!("exit code {code} is already listed at {first}"),
                            );
                            continue;
                        }
                        seen.insert(code, ip.clone());
                        policy.ignored_exit_codes.push(code);
                    }
                }
                "restartAttemptPeriod" => {
                    if matches!(v, Json::Null) {
                        continue;
                    }
                    match self.bounded_u32(p, v, RESTART_ATTEMPT_PERIOD) {
                        Some(n) => policy.restart_attempt_period = n,
                        None => ok = false,
                    }
                }
                _ => {}
            }
        }
        if !enabled_seen {
            self.error(
                key_path(path, "enabled"),
                "missing required field; true to restart the container when it exits, false to keep it stopped",
            );
            ok = false;
        }
        ok.then_some(policy)
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
        let mut secret_options = Vec::new();
        for f in self.fields(path, object, &LOG_CONFIGURATION) {
            match f.key {
                "logDriver" => {
                    driver_seen = true;
                    driver = match self.string(&f.path, f.value) {
                        Some(name) => match crate::logging::check_driver_name(name) {
                            Ok(()) => Some(LogDriver::new(name)),
                            Err(why) => {
                                self.error(
                                    &f.path,
                                    format!("{} is not a log driver name: {why}", quote(name)),
                                );
                                None
                            }
                        },
                        None => None,
                    };
                }
                "options" => options = self.string_map(&f.path, f.value),
                "secretOptions" => {
                    secret_options = self
                        .secrets(&f.path, f.value, SecretTarget::LogOption)
                        .into_iter()
                        .map(|(s, _)| s)
                        .collect();
                }
                _ => {}
            }
        }
        if !driver_seen {
            self.error(
                key_path(path, "logDriver"),
                "missing required field; name a Docker log driver, for example \"json-file\"",
            );
        }
        Some(LogConfiguration {
            log_driver: driver?,
            options: options?,
            secret_options,
        })
    }
}

/// What a secret becomes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SecretTarget {
    /// `secrets`: an environment variable.
    Environment,
    /// `logConfiguration.secretOptions`: a log option.
    LogOption,
}

impl SecretTarget {
    fn what(self) -> &'static str {
        match self {
            SecretTarget::Environment => "environment variable",
            SecretTarget::LogOption => "log option",
        }
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
