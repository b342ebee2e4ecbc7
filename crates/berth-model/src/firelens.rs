//! FireLens: a task's log router (the container with `firelensConfiguration`) and the containers
//! that log to it (`logDriver: awsfirelens`), as ECS defines them. Pure: the parser reads and
//! checks the fields; these helpers answer the questions the engine and the graph ask.
//!
//! ECS's rules (the ECS agent's `task.go` and `firelens` resource): at most one router per task;
//! `options` may hold `enable-ecs-log-metadata` (default true), `config-file-type` (`file` or
//! `s3`) with `config-file-value`; a container logging with `awsfirelens` needs the router in its
//! task; each such container gets a `START` dependency on the router unless it already depends on
//! it or the router itself has dependencies (then ECS adds none, to stay clear of cycles).

use crate::types::{Condition, ContainerDefinition, LogDriver, TaskDefinition};
use serde::{Deserialize, Serialize};

/// `firelensConfiguration.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FirelensType {
    Fluentbit,
    Fluentd,
}

impl FirelensType {
    pub fn as_str(self) -> &'static str {
        match self {
            FirelensType::Fluentbit => "fluentbit",
            FirelensType::Fluentd => "fluentd",
        }
    }

    /// The log option that names the output plugin of an `awsfirelens` container: `Name` for
    /// Fluent Bit, `@type` for Fluentd.
    pub fn output_key(self) -> &'static str {
        match self {
            FirelensType::Fluentbit => "Name",
            FirelensType::Fluentd => "@type",
        }
    }
}

/// A `firelensConfiguration`: this container is the task's log router.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FirelensConfiguration {
    #[serde(rename = "type")]
    pub router_type: FirelensType,
    /// `enable-ecs-log-metadata`: add `ecs_cluster`, `ecs_task_arn` and `ecs_task_definition` to
    /// every record. ECS's default is true.
    pub enable_ecs_log_metadata: bool,
    /// `config-file-type: file` with `config-file-value`: the user's own configuration file, a
    /// path inside the router's image, included after the generated filters. (`s3` is refused by
    /// the parser: berth has no S3.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_file: Option<String>,
}

/// The option keys of `firelensConfiguration.options`.
pub const OPTION_ECS_LOG_METADATA: &str = "enable-ecs-log-metadata";
pub const OPTION_CONFIG_FILE_TYPE: &str = "config-file-type";
pub const OPTION_CONFIG_FILE_VALUE: &str = "config-file-value";
pub const OPTIONS: &[&str] = &[
    OPTION_ECS_LOG_METADATA,
    OPTION_CONFIG_FILE_TYPE,
    OPTION_CONFIG_FILE_VALUE,
];

/// The `awsfirelens` log option that becomes Docker's `fluentd-buffer-limit` (it is not passed to
/// the router's output section).
pub const OPTION_BUFFER_LIMIT: &str = "log-driver-buffer-limit";
/// `awsfirelens` log options that become `grep` filters instead of output options.
pub const OPTION_INCLUDE_PATTERN: &str = "include-pattern";
pub const OPTION_EXCLUDE_PATTERN: &str = "exclude-pattern";

/// Whether this container logs to the task's router.
pub fn uses_firelens(c: &ContainerDefinition) -> bool {
    c.log_driver() == Some(LogDriver::AWSFIRELENS)
}

/// The index of the task's log router, if it has one (the first, should a hand-built definition
/// have several; a parsed one has at most one).
pub fn router(def: &TaskDefinition) -> Option<usize> {
    def.container_definitions
        .iter()
        .position(|c| c.firelens_configuration.is_some())
}

/// The containers that log to the router, in definition order (never the router itself).
pub fn apps(def: &TaskDefinition) -> Vec<usize> {
    let router = router(def);
    def.container_definitions
        .iter()
        .enumerate()
        .filter(|(i, c)| Some(*i) != router && uses_firelens(c))
        .map(|(i, _)| i)
        .collect()
}

/// The `START` dependencies ECS adds: `(app, router)` for every container logging to the router
/// that does not already depend on it, none at all when the router has dependencies of its own
/// (`dependsOn`, `links` or `volumesFrom`, which could close a cycle).
pub fn implicit_dependencies(def: &TaskDefinition) -> Vec<(usize, usize, Condition)> {
    let Some(r) = router(def) else {
        return Vec::new();
    };
    let router_def = &def.container_definitions[r];
    if !router_def.depends_on.is_empty()
        || !router_def.links.is_empty()
        || !router_def.volumes_from.is_empty()
    {
        return Vec::new();
    }
    apps(def)
        .into_iter()
        .filter(|&a| {
            !def.container_definitions[a]
                .depends_on
                .iter()
                .any(|d| d.container_name == router_def.name)
        })
        .map(|a| (a, r, Condition::Start))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Dependency, LogConfiguration};
    use std::collections::BTreeMap;

    fn logging(c: &mut ContainerDefinition, driver: &str) {
        c.log_configuration = Some(LogConfiguration {
            log_driver: LogDriver::new(driver),
            options: BTreeMap::new(),
            secret_options: Vec::new(),
        });
    }

    fn task() -> TaskDefinition {
        let mut router = ContainerDefinition::new("log_router", "fluent-bit");
        router.firelens_configuration = Some(FirelensConfiguration {
            router_type: FirelensType::Fluentbit,
            enable_ecs_log_metadata: true,
            config_file: None,
        });
        let mut app = ContainerDefinition::new("app", "i");
        logging(&mut app, "awsfirelens");
        let mut other = ContainerDefinition::new("other", "i");
        logging(&mut other, "json-file");
        let mut second = ContainerDefinition::new("second", "i");
        logging(&mut second, "awsfirelens");
        TaskDefinition::new("t", vec![app, router, other, second])
    }

    #[test]
    fn the_router_its_apps_and_the_dependencies_ecs_adds() {
        let mut def = task();
        assert_eq!(router(&def), Some(1));
        assert_eq!(apps(&def), [0, 3]);
        assert_eq!(
            implicit_dependencies(&def),
            [(0, 1, Condition::Start), (3, 1, Condition::Start)]
        );
        def.container_definitions[3].depends_on.push(Dependency {
            container_name: "log_router".into(),
            condition: Condition::Healthy,
        });
        assert_eq!(implicit_dependencies(&def), [(0, 1, Condition::Start)]);
        def.container_definitions[1].depends_on.push(Dependency {
            container_name: "other".into(),
            condition: Condition::Start,
        });
        assert!(implicit_dependencies(&def).is_empty());
    }
}
