//! `firelensConfiguration` (one container's own field) and the FireLens rules that span the task
//! (one router; `awsfirelens` needs it; the output plugin named when options are given), as the
//! ECS API and agent apply them. See [`crate::firelens`].

use super::checker::{Checker, index_path, key_path};
use super::container::ContainerInfo;
use super::json::{Json, quote};
use super::rules::FIRELENS_CONFIGURATION;
use crate::firelens::{
    self, FirelensConfiguration, FirelensType, OPTION_BUFFER_LIMIT, OPTION_CONFIG_FILE_TYPE,
    OPTION_CONFIG_FILE_VALUE, OPTION_ECS_LOG_METADATA, OPTION_EXCLUDE_PATTERN,
    OPTION_INCLUDE_PATTERN, OPTIONS,
};
use crate::types::ContainerDefinition;

/// Why a text cannot go into the router's generated configuration file: a control character
/// (a line break above all) would end its line there and start another, so an option could add
/// sections of its own (an `[OUTPUT]` to anywhere).
fn control_message(text: &str) -> String {
    let c = text.chars().find(|c| c.is_control()).unwrap_or('\0');
    format!(
        "{} cannot be written into the log router's configuration file: it contains the control character U+{:04X}; remove it",
        quote(text),
        u32::from(c)
    )
}

/// The same for an option's name, which also ends at whitespace in that file.
fn name_problem(name: &str) -> Option<String> {
    if name.chars().any(char::is_control) {
        Some(control_message(name))
    } else if name.chars().any(char::is_whitespace) {
        Some(format!(
            "{} cannot be an option name in the log router's configuration file: it contains whitespace, which ends the name there; remove it",
            quote(name)
        ))
    } else {
        None
    }
}

/// Go's `strconv.ParseBool`, which the ECS agent reads `enable-ecs-log-metadata` with.
fn go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

impl Checker {
    pub(super) fn firelens_configuration(
        &mut self,
        path: &str,
        v: &Json,
    ) -> Option<FirelensConfiguration> {
        let object = self.object(path, v)?;
        let (mut router_type, mut type_seen) = (None, false);
        let mut options = None;
        let mut options_path = key_path(path, "options");
        for f in self.fields(path, object, &FIRELENS_CONFIGURATION) {
            match f.key {
                "type" => {
                    type_seen = true;
                    router_type = match self.string(&f.path, f.value) {
                        Some("fluentbit") => Some(FirelensType::Fluentbit),
                        Some("fluentd") => Some(FirelensType::Fluentd),
                        Some(other) => {
                            self.error(
                                &f.path,
                                format!(
                                    "{} is not a FireLens router type; expected \"fluentbit\" or \"fluentd\"",
                                    quote(other)
                                ),
                            );
                            None
                        }
                        None => None,
                    };
                }
                "options" => {
                    options_path = f.path.clone();
                    options = Some(self.string_map(&f.path, f.value)?);
                }
                _ => {}
            }
        }
        if !type_seen {
            self.error(
                key_path(path, "type"),
                "missing required field; the log router's type, \"fluentbit\" or \"fluentd\"",
            );
        }
        let options = options.unwrap_or_default();
        let mut ok = true;
        for key in options.keys() {
            if !OPTIONS.contains(&key.as_str()) {
                ok = false;
                self.error(
                    key_path(&options_path, key),
                    format!(
                        "{} is not a FireLens option; expected one of {}",
                        quote(key),
                        OPTIONS.join(", ")
                    ),
                );
            }
        }
        let metadata = match options.get(OPTION_ECS_LOG_METADATA) {
            None => true,
            Some(s) => go_bool(s).unwrap_or_else(|| {
                ok = false;
                self.error(
                    key_path(&options_path, OPTION_ECS_LOG_METADATA),
                    format!("expected \"true\" or \"false\", found {}", quote(s)),
                );
                true
            }),
        };
        let value_path = key_path(&options_path, OPTION_CONFIG_FILE_VALUE);
        let value = options.get(OPTION_CONFIG_FILE_VALUE);
        let config_file = match options.get(OPTION_CONFIG_FILE_TYPE).map(String::as_str) {
            None => {
                if value.is_some() {
                    self.warn(
                        &value_path,
                        format!("ignored without {OPTION_CONFIG_FILE_TYPE} (ECS ignores it too); add \"{OPTION_CONFIG_FILE_TYPE}\": \"file\" to include the file"),
                    );
                }
                None
            }
            Some("file") => match value {
                None => {
                    ok = false;
                    self.error(
                        &value_path,
                        format!("missing: {OPTION_CONFIG_FILE_TYPE} is given, so name the configuration file's absolute path inside the router's image"),
                    );
                    None
                }
                Some(file) if file.chars().any(char::is_control) => {
                    ok = false;
                    self.error(&value_path, control_message(file));
                    None
                }
                Some(file) if !file.starts_with('/') || file.chars().any(char::is_whitespace) => {
                    ok = false;
                    self.error(
                        &value_path,
                        format!(
                            "expected an absolute path without whitespace inside the router's image, found {}",
                            quote(file)
                        ),
                    );
                    None
                }
                Some(file) => Some(file.clone()),
            },
            Some("s3") => {
                ok = false;
                self.error(
                    key_path(&options_path, OPTION_CONFIG_FILE_TYPE),
                    "\"s3\" needs Amazon S3, which berth does not reach; copy the file into the router's image (or mount it) and use \"file\" with its path",
                );
                None
            }
            Some(other) => {
                ok = false;
                self.error(
                    key_path(&options_path, OPTION_CONFIG_FILE_TYPE),
                    format!(
                        "expected \"file\" (or ECS's \"s3\"), found {}",
                        quote(other)
                    ),
                );
                None
            }
        };
        if !ok {
            return None;
        }
        Some(FirelensConfiguration {
            router_type: router_type?,
            enable_ecs_log_metadata: metadata,
            config_file,
        })
    }

    /// The task-wide FireLens rules, once every container is read.
    pub(super) fn firelens_checks(&mut self, containers: &[(ContainerDefinition, ContainerInfo)]) {
        let routers: Vec<&(ContainerDefinition, ContainerInfo)> = containers
            .iter()
            .filter(|(d, _)| d.firelens_configuration.is_some())
            .collect();
        for (_, info) in routers.iter().skip(1) {
            self.error(
                key_path(&info.path, "firelensConfiguration"),
                format!(
                    "a task has at most one log router, and {} is one already; remove this firelensConfiguration",
                    key_path(&routers[0].1.path, "firelensConfiguration")
                ),
            );
        }
        let router = routers.first();
        for (def, info) in containers {
            if !firelens::uses_firelens(def) {
                continue;
            }
            let log_path = key_path(&info.path, "logConfiguration");
            // Everything below is written into the router's configuration file, line by line.
            for (name, value) in def.log_options() {
                let option_path = key_path(&key_path(&log_path, "options"), &name);
                if let Some(problem) = name_problem(&name) {
                    self.error(&option_path, problem);
                } else if value.chars().any(char::is_control) {
                    self.error(&option_path, control_message(&value));
                }
            }
            for (i, secret) in def.log_secret_options().iter().enumerate() {
                if let Some(problem) = name_problem(&secret.name) {
                    self.error(
                        key_path(
                            &index_path(&key_path(&log_path, "secretOptions"), i),
                            "name",
                        ),
                        problem,
                    );
                }
            }
            let driver_path = key_path(&log_path, "logDriver");
            let Some((router_def, router_info)) = router else {
                self.error(
                    driver_path,
                    "\"awsfirelens\" sends the logs to the task's log router, and this task has none; add a container with \"firelensConfiguration\": {\"type\": \"fluentbit\"} (or \"fluentd\"), or use a Docker log driver",
                );
                continue;
            };
            if std::ptr::eq(def, router_def) {
                self.error(
                    driver_path,
                    "the log router cannot send its own logs to itself; give it a Docker log driver such as json-file",
                );
                continue;
            }
            let Some(kind) = router_def.firelens_configuration.as_ref() else {
                continue;
            };
            let key = kind.router_type.output_key();
            let options = def.log_options();
            let plugin_options: Vec<&str> = options
                .keys()
                .map(String::as_str)
                .filter(|k| {
                    ![
                        key,
                        OPTION_BUFFER_LIMIT,
                        OPTION_INCLUDE_PATTERN,
                        OPTION_EXCLUDE_PATTERN,
                    ]
                    .contains(k)
                })
                .chain(def.log_secret_options().iter().map(|s| s.name.as_str()))
                .collect();
            if !plugin_options.is_empty() && !options.contains_key(key) {
                self.error(
                    key_path(&key_path(&info.path, "logConfiguration"), "options"),
                    format!(
                        "options for the router's output plugin ({}) need \"{key}\" naming the plugin (the router at {} is {}); add for example \"{key}\": \"{}\"",
                        plugin_options.join(", "),
                        router_info.path,
                        kind.router_type.as_str(),
                        match kind.router_type {
                            FirelensType::Fluentbit => "cloudwatch",
                            FirelensType::Fluentd => "stdout",
                        }
                    ),
                );
            }
        }
    }
}
