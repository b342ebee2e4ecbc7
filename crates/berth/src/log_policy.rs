//! The host's log drivers, as every subcommand that resolves task definitions (`validate`, `run`,
//! `agent`) reads them: `--available-log-drivers` / `--log-driver-fallback` (or their BERTH_
//! variables, or the configuration file's keys), else ECS's `ECS_AVAILABLE_LOGGING_DRIVERS`, else
//! berth's defaults. The decision itself is `berth_model::logging` (pure); this module only builds
//! the [`LogPolicy`], and says what `berth logs` can read ([`explain`]).

use anyhow::anyhow;
use berth_model::logging::{self, LocalLogs, LogPolicy};

/// A list of log driver names (a newtype, so clap takes the whole list as one value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverList(pub Vec<String>);

fn parse_list(text: &str) -> Result<DriverList, String> {
    logging::parse_driver_list(text)
        .map(DriverList)
        .map_err(|e| e.to_string())
}

fn parse_driver(text: &str) -> Result<String, String> {
    logging::check_driver_name(text)
        .map(|()| text.to_string())
        .map_err(|problem| format!("{text:?} is not a log driver name: {problem}"))
}

/// Log driver options (shared by `validate`, `run` and `agent`, so they agree).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct LogArgs {
    /// The log drivers this host can give containers as their definitions ask: ECS's JSON list
    /// (`["json-file","syslog"]`) or names separated by commas. A container whose driver is not
    /// listed logs to --log-driver-fallback instead, without its options, with a warning.
    /// Environment: BERTH_AVAILABLE_LOG_DRIVERS, or ECS's ECS_AVAILABLE_LOGGING_DRIVERS.
    /// Default: ["json-file","local","none"], and "awslogs" when berth has AWS access (--aws).
    #[arg(
        long,
        value_name = "LIST",
        env = "BERTH_AVAILABLE_LOG_DRIVERS",
        value_parser = parse_list,
        add = crate::config::Key::new().list().env(&[ECS_AVAILABLE]).shown(|r| {
            Ok(Some(crate::config::strings(shown_policy(r)?.available())))
        })
    )]
    pub available_log_drivers: Option<DriverList>,

    /// The log driver that replaces one this host does not have (e.g. `json-file`, `local`);
    /// `berth logs` reads json-file, local and journald. Default: json-file.
    #[arg(
        long,
        value_name = "DRIVER",
        env = "BERTH_LOG_DRIVER_FALLBACK",
        value_parser = parse_driver,
        add = crate::config::Key::new().shown(|r| {
            Ok(Some(shown_policy(r)?.fallback().as_str().into()))
        })
    )]
    pub log_driver_fallback: Option<String>,
}

/// The driver berth adds to the defaults when it has AWS access.
const AWSLOGS: &str = "awslogs";

/// ECS's name for the available drivers (BERTH_AVAILABLE_LOG_DRIVERS is clap's).
const ECS_AVAILABLE: &str = "ECS_AVAILABLE_LOGGING_DRIVERS";

/// The policy `--print-config` shows both keys from (resolved once).
fn shown_policy(r: &crate::config::Resolved<'_>) -> anyhow::Result<std::rc::Rc<LogPolicy>> {
    r.once(|m| <LogArgs as clap::FromArgMatches>::from_arg_matches(m)?.policy())
}

impl LogArgs {
    /// The declared drivers: the flag (or BERTH_AVAILABLE_LOG_DRIVERS, or the file, via clap),
    /// else ECS_AVAILABLE_LOGGING_DRIVERS (empty = unset), else the default.
    pub fn available(&self) -> anyhow::Result<Vec<String>> {
        if let Some(DriverList(list)) = &self.available_log_drivers {
            return Ok(list.clone());
        }
        match std::env::var(ECS_AVAILABLE) {
            Ok(v) if !v.trim().is_empty() => {
                logging::parse_driver_list(&v).map_err(|e| anyhow!("{ECS_AVAILABLE}={v}: {e}"))
            }
            _ => Ok(logging::DEFAULT_AVAILABLE
                .iter()
                .map(|d| d.to_string())
                .collect()),
        }
    }

    /// The policy these options give.
    pub fn policy(&self) -> anyhow::Result<LogPolicy> {
        self.policy_with_aws(false)
    }

    /// The policy these options give on a host where berth has AWS access (`aws`): unless the
    /// drivers are declared (flag, variable, file, ECS_AVAILABLE_LOGGING_DRIVERS), the defaults
    /// and `awslogs`, which the Engine then runs with the task's execution role, as on ECS.
    pub fn policy_with_aws(&self, aws: bool) -> anyhow::Result<LogPolicy> {
        let fallback = self
            .log_driver_fallback
            .as_deref()
            .unwrap_or(logging::DEFAULT_FALLBACK);
        let mut available = self.available()?;
        if aws && !self.declared() && !available.iter().any(|d| d == AWSLOGS) {
            available.push(AWSLOGS.to_string());
        }
        LogPolicy::new(available, fallback)
            .map_err(|e| anyhow!("--log-driver-fallback / --available-log-drivers: {e}"))
    }

    /// Whether the operator declared the available drivers (else berth's defaults apply).
    fn declared(&self) -> bool {
        self.available_log_drivers.is_some()
            || std::env::var(ECS_AVAILABLE).is_ok_and(|v| !v.trim().is_empty())
    }
}

/// Warn (once per driver) about declared drivers the Engine does not have: a container given one
/// fails at create (`error looking up logging plugin …`). Nothing is said when the Engine cannot
/// be asked; the warning is advice, never a refusal.
pub async fn warn_missing(rt: &berth_docker::DockerRuntime, policy: &LogPolicy) {
    let have = match rt.log_drivers().await {
        Ok(have) => have,
        Err(e) => {
            tracing::debug!(error = %e, "cannot list the Docker Engine's log drivers");
            return;
        }
    };
    for d in logging::missing_from_engine(policy, &have) {
        let option = if d == policy.fallback().as_str() {
            "--log-driver-fallback"
        } else {
            "--available-log-drivers"
        };
        tracing::warn!(
            "log driver \"{d}\" is declared available ({option}) but this Docker Engine does not have it (it has: {}); containers given it will fail to be created: install it, or leave it out",
            have.join(", ")
        );
    }
}

/// What `berth logs` says before (a note) or instead of (an error) reading a container's logs,
/// given the driver Docker has for it ([`explain`] answers None when there is nothing to say).
pub enum Explain {
    Note(String),
    Refuse(String),
}

/// See [`Explain`].
pub fn explain(
    container: &str,
    driver: &str,
    options: &std::collections::BTreeMap<String, String>,
) -> Option<Explain> {
    match logging::local_logs(driver, options) {
        LocalLogs::Kept => None,
        LocalLogs::Cached => Some(Explain::Note(format!(
            "container {container} logs through the \"{driver}\" driver, which sends its output elsewhere; what follows is Docker's local copy (dual logging), which holds only what the driver accepted"
        ))),
        LocalLogs::NotKept => Some(Explain::Refuse(not_kept(container, driver))),
    }
}

/// The message when Docker keeps no logs for the container.
pub fn not_kept(container: &str, driver: &str) -> String {
    if driver == berth_model::LogDriver::NONE {
        format!(
            "container {container} logs through the \"none\" driver: Docker keeps nothing, so there are no logs to show (give it json-file or local, in its logConfiguration or as --log-driver-fallback, to keep them)"
        )
    } else {
        format!(
            "container {container} logs through the \"{driver}\" driver and Docker keeps no local copy (its dual-logging cache is disabled): read the logs where the driver delivers them"
        )
    }
}

/// Whether Docker's answer to a logs request means "this driver keeps nothing to read".
pub fn is_not_readable(message: &str) -> bool {
    message.contains("does not support reading")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        logs: LogArgs,
    }

    #[test]
    fn flags_parse_and_bad_values_are_clap_errors() {
        let cli = Cli::try_parse_from([
            "x",
            "--available-log-drivers",
            r#"["json-file","syslog"]"#,
            "--log-driver-fallback",
            "local",
        ])
        .expect("parses");
        let p = cli.logs.policy().expect("policy");
        assert_eq!(p.available().collect::<Vec<_>>(), ["json-file", "syslog"]);
        assert_eq!(p.fallback().as_str(), "local");
        let err = Cli::try_parse_from(["x", "--available-log-drivers", "[json-file]"])
            .expect_err("not JSON");
        assert!(
            err.to_string()
                .contains("invalid value '[json-file]' for '--available-log-drivers <LIST>': expected a JSON list of log driver names"),
            "{err}"
        );
        let err =
            Cli::try_parse_from(["x", "--log-driver-fallback", "json file"]).expect_err("bad name");
        assert!(
            err.to_string()
                .contains("\"json file\" is not a log driver name"),
            "{err}"
        );
        let cli =
            Cli::try_parse_from(["x", "--log-driver-fallback", "awsfirelens"]).expect("a name");
        let err = cli.logs.policy().expect_err("firelens");
        assert!(
            err.to_string()
                .contains("the fallback cannot be awsfirelens"),
            "{err}"
        );
    }

    #[test]
    fn what_berth_logs_says() {
        let none = std::collections::BTreeMap::new();
        assert!(explain("web", "json-file", &none).is_none());
        match explain("web", "none", &none) {
            Some(Explain::Refuse(m)) => assert_eq!(
                m,
                "container web logs through the \"none\" driver: Docker keeps nothing, so there are no logs to show (give it json-file or local, in its logConfiguration or as --log-driver-fallback, to keep them)"
            ),
            _ => panic!("none is refused"),
        }
        match explain("web", "syslog", &none) {
            Some(Explain::Note(m)) => {
                assert!(m.contains("Docker's local copy (dual logging)"), "{m}")
            }
            _ => panic!("syslog is read from the cache"),
        }
    }
}
