//! Log drivers on this host: which log driver each container of a definition is given, decided in
//! one place as a pure function of (definition, the host's [`LogPolicy`]).
//!
//! The parser accepts any log driver name (the definition cannot know the host); the operator
//! declares which drivers this host can use (`--available-log-drivers`, ECS's
//! `ECS_AVAILABLE_LOGGING_DRIVERS`) and which one replaces the others (`--log-driver-fallback`).
//! A container whose driver is available keeps its `logConfiguration` as written; one whose driver
//! is not gets the fallback without options, and one warning names the driver, the fallback, the
//! options dropped and the options to change it. Nothing here refuses a task.
//!
//! `berth validate`, `berth run` and the agent's submit all call [`apply`] with the policy their
//! configuration resolved, so they agree; the definition they run is the one [`apply`] returns, so
//! what Docker is given (and what the metadata endpoint shows) is the resolved driver.
//!
//! [`local_logs`] says whether Docker keeps a container's logs where `docker logs` can read them.

use crate::problem::{Parsed, Problem};
use crate::types::{LogConfiguration, LogDriver, TaskDefinition};
use std::collections::{BTreeMap, BTreeSet};

/// The drivers available when the operator declares none: ECS's default (`json-file`, `none`)
/// and Docker's `local`. These three need nothing outside dockerd: every Engine has them, and no
/// container fails to start for want of a log server (berth accepted exactly these before log
/// drivers became configurable).
pub const DEFAULT_AVAILABLE: &[&str] = &[LogDriver::JSON_FILE, LogDriver::LOCAL, LogDriver::NONE];

/// The driver that replaces an unavailable one when the operator names none: Docker's and ECS's
/// default, which `berth logs` (`docker logs`) reads.
pub const DEFAULT_FALLBACK: &str = LogDriver::JSON_FILE;

/// How the messages name the options that change the policy.
const AVAILABLE_OPTION: &str = "--available-log-drivers (ECS_AVAILABLE_LOGGING_DRIVERS)";
const FALLBACK_OPTION: &str = "--log-driver-fallback";

/// What is wrong with a log policy the operator gave.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("{name:?} is not a log driver name: {problem}")]
    Name { name: String, problem: &'static str },
    #[error(
        "the fallback cannot be awsfirelens: it needs a log router in each task; use a Docker log driver such as json-file or local"
    )]
    FirelensFallback,
    #[error(
        "expected a JSON list of log driver names such as [\"json-file\",\"syslog\"] (ECS's syntax), or names separated by commas: {detail}"
    )]
    List { detail: String },
}

/// Check a log driver name: Docker's built-in drivers and plugin references (`loki`,
/// `grafana/loki-docker-driver:latest`) are 1 to 255 letters, digits and `. _ - / : @`.
pub fn check_driver_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("it is empty");
    }
    if name.len() > 255 {
        return Err("it is longer than 255 characters");
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || "._-/:@".contains(c);
    if !name.chars().all(allowed) {
        return Err("use only letters, digits and . _ - / : @");
    }
    Ok(())
}

/// A list of driver names as the operator writes it: ECS's JSON list (`["json-file","syslog"]`),
/// or names separated by commas (`json-file,syslog`). `[]` is an empty list (then only the fallback
/// is available); an empty text is an error (callers treat an empty variable as unset).
pub fn parse_driver_list(text: &str) -> Result<Vec<String>, PolicyError> {
    let text = text.trim();
    let names: Vec<String> = if text.starts_with('[') {
        serde_json::from_str(text).map_err(|e| PolicyError::List {
            detail: e.to_string(),
        })?
    } else if text.is_empty() {
        return Err(PolicyError::List {
            detail: "the value is empty".to_string(),
        });
    } else {
        text.split(',').map(|n| n.trim().to_string()).collect()
    };
    for n in &names {
        check_driver_name(n).map_err(|problem| PolicyError::Name {
            name: n.clone(),
            problem,
        })?;
    }
    Ok(names)
}

/// Which log drivers this host can use, and what replaces the others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogPolicy {
    available: BTreeSet<String>,
    fallback: LogDriver,
}

impl Default for LogPolicy {
    /// [`DEFAULT_AVAILABLE`] and [`DEFAULT_FALLBACK`].
    fn default() -> Self {
        LogPolicy {
            available: DEFAULT_AVAILABLE.iter().map(|d| d.to_string()).collect(),
            fallback: LogDriver::new(DEFAULT_FALLBACK),
        }
    }
}

impl LogPolicy {
    /// A policy: these drivers are available (the fallback always is), the fallback replaces the
    /// others. `awsfirelens` may be listed (ECS configurations list it) but has no effect: berth
    /// implements FireLens itself, so that driver is always kept (see [`decide`]).
    pub fn new(available: Vec<String>, fallback: &str) -> Result<Self, PolicyError> {
        for name in available.iter().map(String::as_str).chain([fallback]) {
            check_driver_name(name).map_err(|problem| PolicyError::Name {
                name: name.to_string(),
                problem,
            })?;
        }
        if fallback == LogDriver::AWSFIRELENS {
            return Err(PolicyError::FirelensFallback);
        }
        Ok(LogPolicy {
            available: available.into_iter().collect(),
            fallback: LogDriver::new(fallback),
        })
    }

    /// The declared drivers, sorted (the fallback only when declared too).
    pub fn available(&self) -> impl Iterator<Item = &str> {
        self.available.iter().map(String::as_str)
    }

    pub fn fallback(&self) -> &LogDriver {
        &self.fallback
    }

    /// Whether Docker may be given this driver as written.
    pub fn is_available(&self, driver: &str) -> bool {
        driver == self.fallback.as_str() || self.available.contains(driver)
    }
}

/// The declared drivers the Engine does not have (`engine`: its log drivers and enabled log
/// plugins), in order: a container given one of them fails at create, so the agent and
/// `berth run` warn at start. Never reported: `none` (Docker lists no such driver: it means no
/// driver) and `awsfirelens` (not a Docker driver).
pub fn missing_from_engine<'a>(policy: &'a LogPolicy, engine: &[String]) -> Vec<&'a str> {
    policy
        .available()
        .chain([policy.fallback.as_str()])
        .filter(|d| {
            ![LogDriver::NONE, LogDriver::AWSFIRELENS].contains(d) && !engine.iter().any(|e| e == d)
        })
        .fold(Vec::new(), |mut out, d| {
            if !out.contains(&d) {
                out.push(d);
            }
            out
        })
}

/// What one container's log configuration becomes on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogDecision {
    /// No `logConfiguration`: Docker uses the daemon's default driver.
    DaemonDefault,
    /// Given to Docker as written, options included.
    Kept,
    /// Not available here: the fallback driver, without options; `dropped` names the options
    /// that were left out.
    Replaced {
        driver: LogDriver,
        dropped: Vec<String>,
    },
}

/// The decision for one container.
pub fn decide(config: Option<&LogConfiguration>, policy: &LogPolicy) -> LogDecision {
    match config {
        None => LogDecision::DaemonDefault,
        // FireLens is berth's own (the task's router, reached through Docker's fluentd driver):
        // never replaced, whatever the host declares.
        Some(c) if c.log_driver.as_str() == LogDriver::AWSFIRELENS => LogDecision::Kept,
        Some(c) if policy.is_available(c.log_driver.as_str()) => LogDecision::Kept,
        Some(c) => LogDecision::Replaced {
            driver: policy.fallback.clone(),
            // Secret log options belong to the replaced driver too: they are dropped with it.
            dropped: c
                .options
                .keys()
                .cloned()
                .chain(c.secret_options.iter().map(|s| s.name.clone()))
                .collect(),
        },
    }
}

/// Resolve every container's log driver for this host, in place: replaced ones get the fallback
/// without options. One warning per replaced container, at its `logDriver` path.
pub fn apply(definition: &mut TaskDefinition, policy: &LogPolicy) -> Vec<Problem> {
    let mut warnings = Vec::new();
    let available: Vec<&str> = policy.available().collect();
    let available = if available.is_empty() {
        "none declared".to_string()
    } else {
        available.join(", ")
    };
    for (i, c) in definition.container_definitions.iter_mut().enumerate() {
        let LogDecision::Replaced { driver, dropped } =
            decide(c.log_configuration.as_ref(), policy)
        else {
            continue;
        };
        let Some(config) = c.log_configuration.as_mut() else {
            continue;
        };
        let options = if dropped.is_empty() {
            String::new()
        } else {
            format!(" without its options ({})", dropped.join(", "))
        };
        warnings.push(Problem::new(
            format!("containerDefinitions[{i}].logConfiguration.logDriver"),
            format!(
                "log driver \"{}\" is not available on this host (available: {available}); the container logs to \"{driver}\" instead{options}; declare the driver available with {AVAILABLE_OPTION}, or choose the replacement with {FALLBACK_OPTION}",
                config.log_driver
            ),
        ));
        *config = LogConfiguration {
            log_driver: driver,
            options: BTreeMap::new(),
            secret_options: Vec::new(),
        };
    }
    warnings
}

/// [`apply`] to a parsed definition, its warnings after the parser's.
pub fn apply_to_parsed(parsed: &mut Parsed, policy: &LogPolicy) {
    let more = apply(&mut parsed.definition, policy);
    parsed.warnings.extend(more);
}

/// Whether Docker keeps a container's logs where its logs API (`docker logs`, `berth logs`) reads
/// them, given the driver Docker has and its options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalLogs {
    /// The driver writes them locally (`json-file`, `local`, `journald`).
    Kept,
    /// The driver sends them elsewhere; Docker (20.10 and later) keeps a local copy of what the
    /// driver accepted ("dual logging"), unless the daemon disables that cache.
    Cached,
    /// Nothing is kept: the `none` driver, or `cache-disabled` set on the container.
    NotKept,
}

/// See [`LocalLogs`].
pub fn local_logs(driver: &str, options: &BTreeMap<String, String>) -> LocalLogs {
    match driver {
        LogDriver::JSON_FILE | LogDriver::LOCAL | LogDriver::JOURNALD => LocalLogs::Kept,
        LogDriver::NONE => LocalLogs::NotKept,
        // Docker reads the option with Go's strconv.ParseBool.
        _ => match options.get("cache-disabled").map(String::as_str) {
            Some("1" | "t" | "T" | "true" | "TRUE" | "True") => LocalLogs::NotKept,
            _ => LocalLogs::Cached,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ContainerDefinition;

    fn config(driver: &str, options: &[(&str, &str)]) -> LogConfiguration {
        LogConfiguration {
            log_driver: LogDriver::new(driver),
            options: options
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            secret_options: Vec::new(),
        }
    }

    fn policy(available: &[&str], fallback: &str) -> LogPolicy {
        LogPolicy::new(available.iter().map(|s| s.to_string()).collect(), fallback)
            .expect("a valid policy")
    }

    #[test]
    fn the_decision_table() {
        let aws = config(
            "awslogs",
            &[("awslogs-group", "g"), ("awslogs-region", "r")],
        );
        let syslog = config("syslog", &[("syslog-address", "udp://127.0.0.1:514")]);
        let json = config("json-file", &[("max-size", "1m")]);
        let replaced = |driver: &str, dropped: &[&str]| LogDecision::Replaced {
            driver: LogDriver::new(driver),
            dropped: dropped.iter().map(|s| s.to_string()).collect(),
        };
        let default = LogPolicy::default();
        let with_syslog = policy(&["json-file", "syslog", "none"], "json-file");
        let local_only = policy(&[], "local");
        let cases: &[(&str, Option<&LogConfiguration>, &LogPolicy, LogDecision)] = &[
            (
                "no configuration",
                None,
                &default,
                LogDecision::DaemonDefault,
            ),
            (
                "no configuration, any policy",
                None,
                &local_only,
                LogDecision::DaemonDefault,
            ),
            (
                "json-file by default",
                Some(&json),
                &default,
                LogDecision::Kept,
            ),
            (
                "awslogs by default",
                Some(&aws),
                &default,
                replaced("json-file", &["awslogs-group", "awslogs-region"]),
            ),
            (
                "syslog by default",
                Some(&syslog),
                &default,
                replaced("json-file", &["syslog-address"]),
            ),
            (
                "syslog declared",
                Some(&syslog),
                &with_syslog,
                LogDecision::Kept,
            ),
            (
                "awslogs not declared",
                Some(&aws),
                &with_syslog,
                replaced("json-file", &["awslogs-group", "awslogs-region"]),
            ),
            (
                "awsfirelens is berth's own, declared or not",
                Some(&config("awsfirelens", &[("Name", "stdout")])),
                &local_only,
                LogDecision::Kept,
            ),
            (
                "the fallback is always available",
                Some(&config("local", &[])),
                &local_only,
                LogDecision::Kept,
            ),
            (
                "json-file not declared",
                Some(&json),
                &local_only,
                replaced("local", &["max-size"]),
            ),
            (
                "no options to drop",
                Some(&config("gelf", &[])),
                &local_only,
                replaced("local", &[]),
            ),
        ];
        for (what, config, policy, want) in cases {
            assert_eq!(&decide(*config, policy), want, "{what}");
        }
    }

    #[test]
    fn apply_replaces_and_warns_once_per_replaced_container() {
        let mut def = TaskDefinition::new(
            "web",
            vec![
                ContainerDefinition::new("app", "i"),
                ContainerDefinition::new("side", "i"),
                ContainerDefinition::new("plain", "i"),
            ],
        );
        def.container_definitions[0].log_configuration = Some(config(
            "awslogs",
            &[
                ("awslogs-group", "/ecs/web"),
                ("awslogs-region", "eu-west-1"),
            ],
        ));
        def.container_definitions[1].log_configuration =
            Some(config("json-file", &[("max-size", "1m")]));
        let warnings = apply(&mut def, &LogPolicy::default());
        assert_eq!(
            warnings.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [
                "containerDefinitions[0].logConfiguration.logDriver: log driver \"awslogs\" is not available on this host (available: json-file, local, none); the container logs to \"json-file\" instead without its options (awslogs-group, awslogs-region); declare the driver available with --available-log-drivers (ECS_AVAILABLE_LOGGING_DRIVERS), or choose the replacement with --log-driver-fallback"
            ]
        );
        assert_eq!(
            def.container_definitions[0].log_configuration,
            Some(config("json-file", &[]))
        );
        assert_eq!(
            def.container_definitions[1].log_configuration,
            Some(config("json-file", &[("max-size", "1m")])),
            "an available driver keeps its options"
        );
        assert_eq!(def.container_definitions[2].log_configuration, None);
        let warnings = apply(&mut def, &policy(&[], "local"));
        assert!(
            warnings[0].message.contains("(available: none declared)"),
            "{warnings:?}"
        );
    }

    #[test]
    fn driver_lists_in_ecs_json_or_with_commas() {
        let ok = |t: &str| parse_driver_list(t).expect(t);
        assert_eq!(ok(r#"["json-file","syslog"]"#), ["json-file", "syslog"]);
        assert_eq!(ok(r#" [ "awslogs" ] "#), ["awslogs"]);
        assert_eq!(ok("[]"), Vec::<String>::new());
        assert_eq!(ok("json-file, local"), ["json-file", "local"]);
        assert_eq!(
            ok("grafana/loki-docker-driver:latest"),
            ["grafana/loki-docker-driver:latest"]
        );
        let err = |t: &str| parse_driver_list(t).expect_err(t).to_string();
        assert!(
            err(r#"["json-file","#).starts_with(
                "expected a JSON list of log driver names such as [\"json-file\",\"syslog\"] (ECS's syntax), or names separated by commas: "
            ),
            "{}",
            err(r#"["json-file","#)
        );
        assert!(err("[1]").contains("expected a JSON list"));
        assert!(err("").ends_with("the value is empty"));
        assert_eq!(
            err("json-file,,local"),
            "\"\" is not a log driver name: it is empty"
        );
        assert_eq!(
            err(r#"["json file"]"#),
            "\"json file\" is not a log driver name: use only letters, digits and . _ - / : @"
        );
    }

    #[test]
    fn policy_errors() {
        assert_eq!(
            LogPolicy::new(vec![], "awsfirelens").unwrap_err(),
            PolicyError::FirelensFallback
        );
        assert!(matches!(
            LogPolicy::new(vec![], ""),
            Err(PolicyError::Name { .. })
        ));
        let p = policy(&["awsfirelens", "json-file"], "local");
        assert!(p.is_available("local") && p.is_available("json-file"));
        assert!(!p.is_available("awslogs"));
        assert_eq!(
            p.available().collect::<Vec<_>>(),
            ["awsfirelens", "json-file"]
        );
    }

    #[test]
    fn declared_drivers_the_engine_lacks() {
        let engine: Vec<String> = ["json-file", "local", "syslog", "loki"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let p = policy(
            &["awsfirelens", "json-file", "loki", "nosuch", "none"],
            "gelf",
        );
        assert_eq!(missing_from_engine(&p, &engine), ["nosuch", "gelf"]);
        let p = policy(&["json-file"], "json-file");
        assert!(missing_from_engine(&p, &engine).is_empty());
    }

    #[test]
    fn which_drivers_keep_logs_locally() {
        let none = BTreeMap::new();
        let disabled: BTreeMap<String, String> =
            [("cache-disabled".to_string(), "true".to_string())].into();
        assert_eq!(local_logs("json-file", &none), LocalLogs::Kept);
        assert_eq!(local_logs("local", &disabled), LocalLogs::Kept);
        assert_eq!(local_logs("journald", &none), LocalLogs::Kept);
        assert_eq!(local_logs("none", &none), LocalLogs::NotKept);
        assert_eq!(local_logs("syslog", &none), LocalLogs::Cached);
        assert_eq!(local_logs("syslog", &disabled), LocalLogs::NotKept);
        assert_eq!(local_logs("awslogs", &none), LocalLogs::Cached);
    }
}
