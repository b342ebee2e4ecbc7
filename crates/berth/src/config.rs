//! Configuration layering for every subcommand: the TOML file, then the environment, then the
//! command line — each later layer wins — and `--print-config`.
//!
//! How: before clap parses the command line, [`apply`] reads the file (`--config FILE`, anywhere
//! on the command line; default [`DEFAULT_CONFIG`], where a missing file is fine) and turns every key
//! that applies to the chosen subcommand into a flag placed right after the subcommand's name,
//! before the user's own flags. Clap's `args_override_self` makes the user's later flag win over an
//! injected one; a key whose environment variable is set (non-empty) is not injected, so the
//! environment wins over the file (clap, or the code for ECS's names, reads the variable).
//!
//! Invariants: every key of the file is checked for every subcommand (an unknown key, or a value of
//! the wrong type, is an error naming the file and the key, whichever subcommand runs); a known key
//! that does not apply to this subcommand is ignored there (`metadata-addr` means nothing to
//! `berth gc`). Which keys each subcommand takes is [`keys_of`]; the keys themselves are [`KEYS`].
//!
//! Limits: a boolean key can only be switched on by the file (`false` injects nothing, and no flag
//! switches it off again); a value that clap rejects is reported by clap under the flag's name.

use anyhow::Context as _;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The default configuration file.
pub const DEFAULT_CONFIG: &str = "/etc/berth/berth.toml";

/// What a key's value must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A string or an integer, passed as `--flag=VALUE`.
    Value,
    /// A boolean switch: `true` passes `--flag`, `false` nothing.
    Switch,
    /// A list of strings (or one string), passed as `--flag=["a","b"]` (JSON, ECS's syntax).
    List,
    /// A table of strings, passed as one `--flag=KEY=VALUE` per entry (tags).
    Map,
}

/// One option the configuration file may set.
struct Key {
    /// The key in the file: the agent's long option name.
    name: &'static str,
    /// Environment variables that set the same option; any of them (non-empty) beats the file.
    env: &'static [&'static str],
    kind: Kind,
}

const fn key(name: &'static str, env: &'static [&'static str], kind: Kind) -> Key {
    Key { name, env, kind }
}

/// Every key the file may hold (the agent takes them all).
const KEYS: &[Key] = &[
    key("data-dir", &["BERTH_DATA_DIR"], Kind::Value),
    key("api-socket", &["BERTH_API_SOCKET"], Kind::Value),
    key("docker-host", &["DOCKER_HOST"], Kind::Value),
    key(
        "cleanup-wait",
        &[
            "BERTH_CLEANUP_WAIT",
            "ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION",
        ],
        Kind::Value,
    ),
    key("volume-plugin", &["BERTH_VOLUME_PLUGIN"], Kind::Value),
    key("metadata-addr", &["BERTH_METADATA_ADDR"], Kind::Value),
    key(
        "metadata-advertise",
        &["BERTH_METADATA_ADVERTISE"],
        Kind::Value,
    ),
    key(
        "introspection-addr",
        &["BERTH_INTROSPECTION_ADDR"],
        Kind::Value,
    ),
    key("cluster", &["BERTH_CLUSTER"], Kind::Value),
    key("region", &["BERTH_REGION"], Kind::Value),
    key("account-id", &["BERTH_ACCOUNT_ID"], Kind::Value),
    key("partition", &[], Kind::Value),
    key(
        "availability-zone",
        &["BERTH_AVAILABILITY_ZONE"],
        Kind::Value,
    ),
    key(
        "container-instance-tags",
        &[crate::tags::ECS_INSTANCE_TAGS_ENV],
        Kind::Map,
    ),
    key("metadata-rate-limit", &[], Kind::Value),
    key("log-format", &[], Kind::Value),
    key(
        "pull-behavior",
        &["BERTH_IMAGE_PULL_BEHAVIOR", "ECS_IMAGE_PULL_BEHAVIOR"],
        Kind::Value,
    ),
    key(
        "pull-dependent-upfront",
        &[
            "BERTH_PULL_DEPENDENT_CONTAINERS_UPFRONT",
            "ECS_PULL_DEPENDENT_CONTAINERS_UPFRONT",
        ],
        Kind::Switch,
    ),
    key("pull-timeout", &[], Kind::Value),
    key("pull-inactivity-timeout", &[], Kind::Value),
    key("pull-attempts", &[], Kind::Value),
    key("pause-image", &["BERTH_PAUSE_IMAGE"], Kind::Value),
    key(
        "available-log-drivers",
        &[
            "BERTH_AVAILABLE_LOG_DRIVERS",
            "ECS_AVAILABLE_LOGGING_DRIVERS",
        ],
        Kind::List,
    ),
    key(
        "log-driver-fallback",
        &["BERTH_LOG_DRIVER_FALLBACK"],
        Kind::Value,
    ),
    key("secrets-dir", &["BERTH_SECRETS_DIR"], Kind::Value),
    key(
        "secrets-from-env",
        &["BERTH_SECRETS_FROM_ENV"],
        Kind::Switch,
    ),
    key(
        "environment-files-dir",
        &["BERTH_ENVIRONMENT_FILES_DIR"],
        Kind::Value,
    ),
    key("engine-auth-type", &["ECS_ENGINE_AUTH_TYPE"], Kind::Value),
    key("engine-auth-data", &["ECS_ENGINE_AUTH_DATA"], Kind::Value),
    key("docker-config", &["BERTH_DOCKER_CONFIG"], Kind::Value),
    key("credential-helper-timeout", &[], Kind::Value),
    key("docker-timeout", &["BERTH_DOCKER_TIMEOUT"], Kind::Value),
    key(
        "docker-volume-timeout",
        &["BERTH_DOCKER_VOLUME_TIMEOUT"],
        Kind::Value,
    ),
    key(
        "container-metadata",
        &[
            "BERTH_ENABLE_CONTAINER_METADATA",
            "ECS_ENABLE_CONTAINER_METADATA",
        ],
        Kind::Switch,
    ),
    key(
        "disable-image-cleanup",
        &["BERTH_DISABLE_IMAGE_CLEANUP", "ECS_DISABLE_IMAGE_CLEANUP"],
        Kind::Switch,
    ),
    key(
        "image-cleanup-interval",
        &["BERTH_IMAGE_CLEANUP_INTERVAL", "ECS_IMAGE_CLEANUP_INTERVAL"],
        Kind::Value,
    ),
    key(
        "image-minimum-cleanup-age",
        &[
            "BERTH_IMAGE_MINIMUM_CLEANUP_AGE",
            "ECS_IMAGE_MINIMUM_CLEANUP_AGE",
        ],
        Kind::Value,
    ),
    key(
        "images-per-cycle",
        &[
            "BERTH_NUM_IMAGES_DELETE_PER_CYCLE",
            "ECS_NUM_IMAGES_DELETE_PER_CYCLE",
        ],
        Kind::Value,
    ),
    key(
        "image-cleanup-exclude",
        &["BERTH_IMAGE_CLEANUP_EXCLUDE", "ECS_EXCLUDE_UNTRACKED_IMAGE"],
        Kind::List,
    ),
    key(
        "image-cleanup-untracked",
        &[
            "BERTH_IMAGE_CLEANUP_UNTRACKED",
            "ECS_ENABLE_UNTRACKED_IMAGE_CLEANUP",
        ],
        Kind::Switch,
    ),
    key(
        "host-private-ipv4-address",
        &["BERTH_HOST_PRIVATE_IPV4_ADDRESS"],
        Kind::Value,
    ),
    key(
        "host-public-ipv4-address",
        &["BERTH_HOST_PUBLIC_IPV4_ADDRESS"],
        Kind::Value,
    ),
    key(
        "untracked-image-minimum-cleanup-age",
        &["NON_ECS_IMAGE_MINIMUM_CLEANUP_AGE"],
        Kind::Value,
    ),
    key("etcd", &["BERTH_ETCD"], Kind::Value),
    key("node", &["BERTH_NODE"], Kind::Value),
    key("node-lease-ttl", &[], Kind::Value),
    key("node-cpu", &[], Kind::Value),
    key("node-memory", &[], Kind::Value),
    key("node-attributes", &[], Kind::Map),
    key("node-stop-wait", &[], Kind::Value),
    key("image-gc-high-threshold", &[], Kind::Value),
    key("image-gc-low-threshold", &[], Kind::Value),
    key("image-gc-check-interval", &[], Kind::Value),
];

/// The log driver keys: every subcommand that resolves task definitions takes them, so
/// `validate`, `run` and the agent agree on what a definition becomes on this host.
const LOG_KEYS: [(&str, &str); 2] = [
    ("available-log-drivers", "available-log-drivers"),
    ("log-driver-fallback", "log-driver-fallback"),
];

/// The keys of the task-running options `berth run` and the agent share (for `berth run` all
/// of its keys: not the metadata endpoint's, which `berth run` serves only when asked on its
/// command line).
const RUN: &[(&str, &str)] = &[
    ("data-dir", "data-dir"),
    ("docker-host", "docker-host"),
    crate::docker_timeouts::KEYS[0],
    crate::docker_timeouts::KEYS[1],
    ("volume-plugin", "volume-plugin"),
    ("pull-behavior", "pull-behavior"),
    ("pull-dependent-upfront", "pull-dependent-upfront"),
    ("pull-timeout", "pull-timeout"),
    ("pull-inactivity-timeout", "pull-inactivity-timeout"),
    ("pull-attempts", "pull-attempts"),
    ("pause-image", "pause-image"),
    LOG_KEYS[0],
    LOG_KEYS[1],
    ("secrets-dir", "secrets-dir"),
    ("secrets-from-env", "secrets-from-env"),
    ("environment-files-dir", "environment-files-dir"),
    ("engine-auth-type", "engine-auth-type"),
    ("engine-auth-data", "engine-auth-data"),
    ("docker-config", "docker-config"),
    ("credential-helper-timeout", "credential-helper-timeout"),
    crate::container_metadata::KEYS[0],
    crate::container_metadata::KEYS[1],
    crate::container_metadata::KEYS[2],
];
const VALIDATE: &[(&str, &str)] = &LOG_KEYS;
const GC: &[(&str, &str)] = &[("data-dir", "data-dir"), ("docker-host", "docker-host")];
/// The client commands reach the agent's socket with `--agent`.
const CLIENT: &[(&str, &str)] = &[("api-socket", "agent")];
const LOGS: &[(&str, &str)] = &[("api-socket", "agent"), ("docker-host", "docker-host")];
/// The keys only the agent takes; it takes [`RUN`]'s too.
const AGENT_ONLY: &[(&str, &str)] = &[
    ("api-socket", "api-socket"),
    ("cleanup-wait", "cleanup-wait"),
    ("metadata-addr", "metadata-addr"),
    ("metadata-advertise", "metadata-advertise"),
    ("introspection-addr", "introspection-addr"),
    crate::identity::KEYS[0],
    crate::identity::KEYS[1],
    crate::identity::KEYS[2],
    crate::identity::KEYS[3],
    crate::identity::KEYS[4],
    ("container-instance-tags", "container-instance-tag"),
    ("metadata-rate-limit", "metadata-rate-limit"),
    ("log-format", "log-format"),
    ("disable-image-cleanup", "disable-image-cleanup"),
    ("image-cleanup-interval", "image-cleanup-interval"),
    ("image-minimum-cleanup-age", "image-minimum-cleanup-age"),
    ("images-per-cycle", "images-per-cycle"),
    ("image-cleanup-exclude", "image-cleanup-exclude"),
    ("image-cleanup-untracked", "image-cleanup-untracked"),
    (
        "untracked-image-minimum-cleanup-age",
        "untracked-image-minimum-cleanup-age",
    ),
    ("image-gc-high-threshold", "image-gc-high-threshold"),
    ("image-gc-low-threshold", "image-gc-low-threshold"),
    ("image-gc-check-interval", "image-gc-check-interval"),
    crate::agent::node::KEYS[0],
    crate::agent::node::KEYS[1],
    crate::agent::node::KEYS[2],
    crate::agent::node::KEYS[3],
    crate::agent::node::KEYS[4],
    crate::agent::node::KEYS[5],
    crate::agent::node::KEYS[6],
];

/// The keys a subcommand takes, as (key, its long flag there). Subcommands not named here
/// (`volume-plugin`, `completions`) take none: they read the file only when `--config` names it
/// (then it is still checked), never the default one.
fn keys_of(subcommand: &str) -> Vec<(&'static str, &'static str)> {
    let lists: &[&[(&'static str, &'static str)]] = match subcommand {
        "agent" => &[RUN, AGENT_ONLY],
        "run" => &[RUN],
        "validate" => &[VALIDATE],
        "gc" => &[GC],
        "submit" | "ps" | "inspect" | "stop" | "rm" | "events" | "images" => &[CLIENT],
        "logs" => &[LOGS],
        _ => &[],
    };
    lists.concat()
}

/// Where the subcommand's name is in `argv` (the first word after the program that is neither an
/// option nor the value of `--config`), if any.
fn subcommand_at(argv: &[OsString]) -> Option<usize> {
    let mut i = 1;
    while i < argv.len() {
        let a = argv[i].to_str()?;
        if a == "--" {
            return None;
        }
        if a == "--config" {
            i += 2;
            continue;
        }
        if !a.starts_with('-') {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// The file given with `--config FILE` or `--config=FILE`, anywhere before `--`.
fn explicit_config(argv: &[OsString]) -> Option<PathBuf> {
    let args = argv.get(1..)?;
    for (i, a) in args.iter().enumerate() {
        let Some(a) = a.to_str() else { continue };
        if a == "--" {
            break;
        }
        if let Some(v) = a.strip_prefix("--config=") {
            return Some(PathBuf::from(v));
        }
        if a == "--config" {
            return args.get(i + 1).map(PathBuf::from);
        }
    }
    None
}

/// Layer the configuration file under the environment and the command line (see the module
/// header). `argv` is the whole command line, program name first.
pub fn apply(argv: Vec<OsString>) -> anyhow::Result<Vec<OsString>> {
    layer(
        argv,
        |path| std::fs::read_to_string(path),
        |var| std::env::var_os(var).is_some_and(|v| !v.is_empty()),
    )
}

/// [`apply`] with the file reader and the environment given (for tests).
fn layer(
    argv: Vec<OsString>,
    read: impl Fn(&Path) -> std::io::Result<String>,
    env_set: impl Fn(&str) -> bool,
) -> anyhow::Result<Vec<OsString>> {
    let Some(pos) = subcommand_at(&argv) else {
        return Ok(argv);
    };
    if argv[pos] == "help" {
        return Ok(argv);
    }
    let explicit = explicit_config(&argv);
    let applies = argv[pos].to_str().map(keys_of).unwrap_or_default();
    // A subcommand that takes no key (completions, volume-plugin) does not read the default file
    // at all: a broken /etc/berth/berth.toml must not break them.
    if applies.is_empty() && explicit.is_none() {
        return Ok(argv);
    }
    let path = explicit
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG));
    let text = match read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && explicit.is_none() => {
            return Ok(argv);
        }
        Err(e) => anyhow::bail!("cannot read the configuration file {}: {e}", path.display()),
    };
    let table: toml::Table = text
        .parse()
        .with_context(|| format!("{} is not valid TOML", path.display()))?;
    let mut injected: Vec<OsString> = Vec::new();
    for (name, value) in &table {
        let Some(key) = KEYS.iter().find(|k| k.name == name) else {
            let known: Vec<&str> = KEYS.iter().map(|k| k.name).collect();
            anyhow::bail!(
                "{}: unknown option {name:?} (known: {})",
                path.display(),
                known.join(", ")
            );
        };
        if key.kind == Kind::Map {
            let toml::Value::Table(entries) = value else {
                anyhow::bail!(
                    "{}: option {name:?} must be a table of strings (e.g. {name} = {{ rack = \"r1\" }}), found {}",
                    path.display(),
                    value.type_str()
                );
            };
            let mut flags = Vec::new();
            for (k, v) in entries {
                let toml::Value::String(v) = v else {
                    anyhow::bail!(
                        "{}: option {name:?}: the value of {k:?} must be a string, found {}",
                        path.display(),
                        v.type_str()
                    );
                };
                flags.push((k.clone(), v.clone()));
            }
            if let Some((_, flag)) = applies.iter().find(|(k, _)| k == name)
                && !key.env.iter().any(|v| env_set(v))
            {
                for (k, v) in flags {
                    injected.push(format!("--{flag}={k}={v}").into());
                }
            }
            continue;
        }
        let flag_value = match (key.kind, value) {
            (Kind::Switch, toml::Value::Boolean(b)) => b.then_some(None),
            (Kind::Value, toml::Value::String(s)) => Some(Some(s.clone())),
            (Kind::Value, toml::Value::Integer(n)) => Some(Some(n.to_string())),
            (Kind::List, toml::Value::String(s)) => Some(Some(s.clone())),
            (Kind::List, toml::Value::Array(items)) => {
                let mut names = Vec::new();
                for item in items {
                    match item {
                        toml::Value::String(s) => names.push(s.clone()),
                        other => anyhow::bail!(
                            "{}: option {name:?} must be a list of strings, found a list holding {}",
                            path.display(),
                            other.type_str()
                        ),
                    }
                }
                Some(Some(serde_json::to_string(&names)?))
            }
            (Kind::List, other) => anyhow::bail!(
                "{}: option {name:?} must be a list of strings (or one string), found {}",
                path.display(),
                other.type_str()
            ),
            (Kind::Switch, other) => anyhow::bail!(
                "{}: option {name:?} must be a boolean (true or false), found {}",
                path.display(),
                other.type_str()
            ),
            (Kind::Map, _) => None, // handled above
            (Kind::Value, other) => anyhow::bail!(
                "{}: option {name:?} must be a string or a number, found {}",
                path.display(),
                other.type_str()
            ),
        };
        let Some((_, flag)) = applies.iter().find(|(k, _)| k == name) else {
            continue;
        };
        if key.env.iter().any(|v| env_set(v)) {
            continue;
        }
        match flag_value {
            Some(Some(v)) => injected.push(format!("--{flag}={v}").into()),
            Some(None) => injected.push(format!("--{flag}").into()),
            None => {}
        }
    }
    let mut out: Vec<OsString> = argv[..=pos].to_vec();
    out.extend(injected);
    out.extend(argv[pos + 1..].iter().cloned());
    Ok(out)
}

fn duration(d: Duration) -> toml::Value {
    humantime::format_duration(d).to_string().into()
}

/// The pull keys, as `berth run` and the agent resolved them.
fn put_pull(t: &mut toml::Table, pull: &crate::cmd_run::PullArgs) -> anyhow::Result<()> {
    t.insert("pull-behavior".into(), pull.behavior()?.as_str().into());
    t.insert("pull-dependent-upfront".into(), pull.upfront().into());
    t.insert("pull-timeout".into(), duration(pull.pull_timeout));
    t.insert(
        "pull-inactivity-timeout".into(),
        duration(pull.pull_inactivity_timeout),
    );
    t.insert("pull-attempts".into(), i64::from(pull.pull_attempts).into());
    if let Some(image) = &pull.pause_image {
        t.insert("pause-image".into(), image.clone().into());
    }
    Ok(())
}

fn put_common(t: &mut toml::Table, data_dir: &Option<PathBuf>, docker_host: &Option<String>) {
    let data_dir = data_dir
        .clone()
        .unwrap_or_else(crate::cmd_run::default_data_dir);
    t.insert("data-dir".into(), data_dir.display().to_string().into());
    if let Some(h) = docker_host {
        t.insert("docker-host".into(), h.clone().into());
    }
}

/// The agent's effective configuration (`berth agent --print-config`), as TOML with the long option
/// names as keys: every key of [`KEYS`] (`docker-host`, `metadata-advertise`, `engine-auth-type`
/// and `docker-config` when set) except `engine-auth-data`, which is never printed.
pub fn agent_toml(args: &crate::agent::Args) -> anyhow::Result<String> {
    let mut t = toml::Table::new();
    put_common(&mut t, &args.data_dir, &args.docker_host);
    t.insert(
        "api-socket".into(),
        args.api_socket.display().to_string().into(),
    );
    t.insert("cleanup-wait".into(), duration(args.cleanup_wait()?));
    t.insert("volume-plugin".into(), args.volume_plugin.clone().into());
    t.insert(
        "metadata-addr".into(),
        args.metadata_addr.to_string().into(),
    );
    if let Some(a) = &args.metadata_advertise {
        t.insert("metadata-advertise".into(), a.clone().into());
    }
    t.insert(
        "introspection-addr".into(),
        args.introspection_addr.to_string().into(),
    );
    args.identity.put(&mut t);
    args.instance_tags.put(&mut t)?;
    t.insert(
        "metadata-rate-limit".into(),
        args.metadata_rate_limit.to_string().into(),
    );
    let fmt = match args.log_format {
        crate::agent::LogFormat::Text => "text",
        crate::agent::LogFormat::Json => "json",
    };
    t.insert("log-format".into(), fmt.into());
    put_pull(&mut t, &args.pull)?;
    args.docker_timeouts.put(&mut t);
    crate::log_policy::put_toml(&mut t, &args.logs.policy()?);
    args.secrets.put_toml(&mut t);
    args.registry.put(&mut t);
    args.container_metadata.put(&mut t);
    args.image_gc.config(&[])?.put_toml(&mut t);
    args.node.put(&mut t);
    Ok(toml::to_string(&t)?)
}

/// `berth run --print-config`: the keys `berth run` takes, as it resolved them.
pub fn run_toml(args: &crate::cmd_run::Args) -> anyhow::Result<String> {
    let mut t = toml::Table::new();
    put_common(&mut t, &args.data_dir, &args.docker_host);
    t.insert("volume-plugin".into(), args.volume_plugin.clone().into());
    put_pull(&mut t, &args.pull)?;
    args.docker_timeouts.put(&mut t);
    crate::log_policy::put_toml(&mut t, &args.logs.policy()?);
    args.secrets.put_toml(&mut t);
    args.registry.put(&mut t);
    args.container_metadata.put(&mut t);
    Ok(toml::to_string(&t)?)
}

/// `berth gc --print-config`: the keys `berth gc` takes, as it resolved them.
pub fn gc_toml(args: &crate::cmd_gc::Args) -> anyhow::Result<String> {
    let mut t = toml::Table::new();
    put_common(&mut t, &args.data_dir, &args.docker_host);
    Ok(toml::to_string(&t)?)
}

impl crate::agent::Args {
    /// The cleanup wait: the flag or BERTH_CLEANUP_WAIT (via clap), else ECS's
    /// ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION, else 3 h (ECS's default).
    pub fn cleanup_wait(&self) -> anyhow::Result<Duration> {
        if let Some(d) = self.cleanup_wait {
            return Ok(d);
        }
        match std::env::var("ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION") {
            Ok(v) if !v.is_empty() => humantime::parse_duration(&v)
                .with_context(|| format!("ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION={v}")),
            _ => Ok(Duration::from_secs(3 * 3600)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    fn strs(argv: &[OsString]) -> Vec<&str> {
        argv.iter().filter_map(|a| a.to_str()).collect()
    }

    /// `layer` with `file` as the content of every configuration file and `env` the variables set.
    fn layered(args: &[&str], file: &str, env: &[&str]) -> anyhow::Result<Vec<OsString>> {
        let file = file.to_string();
        layer(
            os(args),
            move |_| Ok(file.clone()),
            |v: &str| env.contains(&v),
        )
    }

    fn agent(argv: Vec<OsString>) -> crate::agent::Args {
        match crate::Cli::try_parse_from(argv).map(|c| c.command) {
            Ok(crate::Command::Agent(a)) => a,
            other => panic!("not the agent: {other:?}"),
        }
    }

    /// Tests that set process environment variables hold this lock.
    static ENV: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn file_values_come_before_the_users_flags_which_win() {
        let argv = layered(
            &["berth", "agent", "--cleanup-wait", "30s"],
            "cleanup-wait = \"10m\"\npull-attempts = 3\npull-dependent-upfront = true\n",
            &[],
        )
        .expect("layered");
        assert_eq!(
            strs(&argv),
            [
                "berth",
                "agent",
                "--cleanup-wait=10m",
                "--pull-attempts=3",
                "--pull-dependent-upfront",
                "--cleanup-wait",
                "30s"
            ]
        );
        let a = agent(argv);
        assert_eq!(
            a.cleanup_wait,
            Some(Duration::from_secs(30)),
            "the flag wins"
        );
        assert_eq!(a.pull.pull_attempts, 3, "the file fills in the rest");
        assert!(a.pull.pull_dependent_upfront);
    }

    #[test]
    fn the_introspection_address_layers_and_prints_like_the_other_keys() {
        use crate::agent::introspection::IntrospectionAddr;
        let a = agent(os(&["berth", "agent"]));
        assert_eq!(
            a.introspection_addr,
            IntrospectionAddr::Listen("127.0.0.1:51678".parse().expect("addr")),
            "ECS's port on loopback by default"
        );
        let argv =
            layered(&["berth", "agent"], "introspection-addr = \"off\"\n", &[]).expect("layered");
        assert_eq!(strs(&argv), ["berth", "agent", "--introspection-addr=off"]);
        let a = agent(argv);
        assert_eq!(a.introspection_addr, IntrospectionAddr::Off);
        let printed: toml::Table = agent_toml(&a).expect("toml").parse().expect("TOML");
        assert_eq!(printed["introspection-addr"].as_str(), Some("off"));
        let argv = layered(
            &["berth", "agent"],
            "introspection-addr = \"off\"\n",
            &["BERTH_INTROSPECTION_ADDR"],
        )
        .expect("layered");
        assert_eq!(strs(&argv), ["berth", "agent"], "the environment wins");
        let err =
            crate::Cli::try_parse_from(os(&["berth", "agent", "--introspection-addr", "51678"]))
                .map(|_| ())
                .expect_err("a port alone is refused");
        let text = err.to_string();
        assert!(text.contains("--introspection-addr"), "{text}");
        assert!(
            text.contains("127.0.0.1:51678") && text.contains("off"),
            "{text}"
        );
    }

    #[test]
    fn the_container_metadata_keys_reach_run_and_the_agent() {
        let file = "container-metadata = true\nhost-private-ipv4-address = \"10.0.0.5\"\n";
        for sub in ["run", "agent"] {
            let argv = layered(&["berth", sub], file, &[]).expect("layered");
            assert_eq!(
                strs(&argv),
                [
                    "berth",
                    sub,
                    "--container-metadata",
                    "--host-private-ipv4-address=10.0.0.5"
                ]
            );
            // ECS's variable set: left to the environment.
            let argv = layered(&["berth", sub], file, &["ECS_ENABLE_CONTAINER_METADATA"])
                .expect("layered");
            assert_eq!(
                strs(&argv),
                ["berth", sub, "--host-private-ipv4-address=10.0.0.5"]
            );
        }
        let a = agent(layered(&["berth", "agent"], file, &[]).expect("layered"));
        assert!(a.container_metadata.container_metadata);
        assert_eq!(
            a.container_metadata.host_private_ipv4_address,
            Some(std::net::Ipv4Addr::new(10, 0, 0, 5))
        );
    }

    #[test]
    fn the_environment_beats_the_file() {
        let file = "cleanup-wait = \"10m\"\npull-behavior = \"once\"\n";
        let argv = layered(
            &["berth", "agent"],
            file,
            &["ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION"],
        )
        .expect("layered");
        assert_eq!(
            strs(&argv),
            ["berth", "agent", "--pull-behavior=once"],
            "a key whose variable is set is left to the environment"
        );
        let argv =
            layered(&["berth", "agent"], file, &["BERTH_IMAGE_PULL_BEHAVIOR"]).expect("layered");
        assert_eq!(strs(&argv), ["berth", "agent", "--cleanup-wait=10m"]);
    }

    #[test]
    fn registry_login_keys_layer_like_the_others() {
        let file = "engine-auth-type = \"docker\"\nengine-auth-data = '{\"h:1\": {\"username\": \"u\", \"password\": \"p\"}}'\ndocker-config = \"/etc/berth/docker.json\"\n";
        let argv = layered(&["berth", "run", "t.json"], file, &[]).expect("layered");
        assert_eq!(
            strs(&argv),
            [
                "berth",
                "run",
                "--docker-config=/etc/berth/docker.json",
                "--engine-auth-data={\"h:1\": {\"username\": \"u\", \"password\": \"p\"}}",
                "--engine-auth-type=docker",
                "t.json"
            ]
        );
        crate::Cli::try_parse_from(argv).expect("clap accepts it");
        let argv = layered(
            &["berth", "agent"],
            file,
            &["ECS_ENGINE_AUTH_TYPE", "ECS_ENGINE_AUTH_DATA"],
        )
        .expect("layered");
        assert_eq!(
            strs(&argv),
            ["berth", "agent", "--docker-config=/etc/berth/docker.json"],
            "ECS's variables beat the file"
        );
    }

    #[test]
    fn container_instance_tags_are_a_table_given_as_one_flag_each() {
        let file = "container-instance-tags = { rack = \"r1\", \"os family\" = \"linux\" }\n";
        let argv = layered(&["berth", "agent"], file, &[]).expect("layered");
        assert_eq!(
            strs(&argv),
            [
                "berth",
                "agent",
                "--container-instance-tag=os family=linux",
                "--container-instance-tag=rack=r1"
            ]
        );
        let tags = agent(argv).instance_tags.container_instance_tags;
        assert_eq!(tags.len(), 2);
        // ECS's variable beats the file; `berth run` takes no instance tags from the file.
        let argv =
            layered(&["berth", "agent"], file, &["ECS_CONTAINER_INSTANCE_TAGS"]).expect("layered");
        assert_eq!(strs(&argv), ["berth", "agent"]);
        let argv = layered(&["berth", "run", "t.json"], file, &[]).expect("layered");
        assert_eq!(strs(&argv), ["berth", "run", "t.json"]);
        let err = layered(
            &["berth", "agent"],
            "container-instance-tags = [\"a=b\"]\n",
            &[],
        )
        .expect_err("a list is no table");
        assert!(
            err.to_string().contains("must be a table of strings"),
            "{err}"
        );
        let err = layered(
            &["berth", "agent"],
            "container-instance-tags = { n = 1 }\n",
            &[],
        )
        .expect_err("values are strings");
        assert!(err.to_string().contains("\"n\" must be a string"), "{err}");
    }

    #[test]
    fn a_flag_beats_the_environment() {
        let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: only this module's tests set variables, one at a time under `ENV`; the crate's
        // other unit tests read the environment through std, whose own lock orders them.
        unsafe { std::env::set_var("BERTH_CLEANUP_WAIT", "20m") };
        let from_env = agent(layered(&["berth", "agent"], "", &[]).expect("layered"));
        let from_flag =
            agent(layered(&["berth", "agent", "--cleanup-wait=30s"], "", &[]).expect("layered"));
        // SAFETY: as above.
        unsafe { std::env::remove_var("BERTH_CLEANUP_WAIT") };
        assert_eq!(from_env.cleanup_wait, Some(Duration::from_secs(20 * 60)));
        assert_eq!(from_flag.cleanup_wait, Some(Duration::from_secs(30)));
    }

    #[test]
    fn docker_timeout_keys_layer_for_run_and_the_agent() {
        let file = "docker-timeout = \"45s\"\ndocker-volume-timeout = \"10m\"\n";
        let a = agent(layered(&["berth", "agent"], file, &[]).expect("layered"));
        assert_eq!(a.docker_timeouts.docker_timeout, Duration::from_secs(45));
        assert_eq!(
            a.docker_timeouts.docker_volume_timeout,
            Duration::from_secs(600)
        );
        let argv = layered(&["berth", "run", "t.json"], file, &[]).expect("layered");
        match crate::Cli::try_parse_from(argv).map(|c| c.command) {
            Ok(crate::Command::Run(r)) => {
                assert_eq!(r.docker_timeouts.docker_timeout, Duration::from_secs(45));
                assert_eq!(
                    r.docker_timeouts.docker_volume_timeout,
                    Duration::from_secs(600)
                );
            }
            other => panic!("not run: {other:?}"),
        }
        let argv =
            layered(&["berth", "agent"], file, &["BERTH_DOCKER_VOLUME_TIMEOUT"]).expect("layered");
        assert_eq!(
            strs(&argv),
            ["berth", "agent", "--docker-timeout=45s"],
            "the variable beats the file"
        );
        let d = agent(layered(&["berth", "agent"], "", &[]).expect("layered"));
        assert_eq!(
            (
                d.docker_timeouts.docker_timeout,
                d.docker_timeouts.docker_volume_timeout
            ),
            (Duration::from_secs(30), Duration::from_secs(300)),
            "ECS's defaults"
        );
        let err = crate::Cli::try_parse_from(["berth", "agent", "--docker-timeout", "0s"])
            .expect_err("zero");
        assert!(
            err.to_string().contains("--docker-timeout") && err.to_string().contains("above zero"),
            "{err}"
        );
    }

    #[test]
    fn an_unknown_key_names_the_file_and_the_known_keys() {
        for sub in ["agent", "gc", "validate"] {
            let err = layered(
                &["berth", sub, "--config", "/x/b.toml"],
                "cleanup_wait = 1\n",
                &[],
            )
            .expect_err("unknown key");
            let msg = format!("{err:#}");
            assert!(
                msg.starts_with("/x/b.toml: unknown option \"cleanup_wait\" (known: data-dir, api-socket, docker-host, cleanup-wait,"),
                "{sub}: {msg}"
            );
        }
    }

    #[test]
    fn a_subcommand_without_keys_does_not_read_a_broken_default_file() {
        let argv = layered(&["berth", "completions", "bash"], "cleanup-wait = \n", &[])
            .expect("the default file is not read");
        assert_eq!(strs(&argv), ["berth", "completions", "bash"]);
        let err = layered(
            &["berth", "validate", "--config", "/x/b.toml", "t.json"],
            "cleanup-wait = \n",
            &[],
        )
        .expect_err("a file named with --config is checked");
        assert!(format!("{err:#}").starts_with("/x/b.toml is not valid TOML"));
    }

    #[test]
    fn a_value_of_the_wrong_type_is_an_error_naming_the_key() {
        let err = layered(
            &["berth", "agent"],
            "pull-dependent-upfront = \"yes\"\n",
            &[],
        )
        .expect_err("wrong type");
        assert_eq!(
            format!("{err:#}"),
            "/etc/berth/berth.toml: option \"pull-dependent-upfront\" must be a boolean (true or false), found string"
        );
        let err =
            layered(&["berth", "ps"], "cleanup-wait = [\"1m\"]\n", &[]).expect_err("wrong type");
        assert_eq!(
            format!("{err:#}"),
            "/etc/berth/berth.toml: option \"cleanup-wait\" must be a string or a number, found array"
        );
        let err = layered(&["berth", "agent"], "cleanup-wait = \n", &[]).expect_err("not TOML");
        assert!(format!("{err:#}").starts_with("/etc/berth/berth.toml is not valid TOML"));
    }

    #[test]
    fn each_subcommand_takes_the_keys_that_apply_to_it() {
        let file = "data-dir = \"/d\"\napi-socket = \"/s.sock\"\nmetadata-addr = \"127.0.0.1:1\"\npull-attempts = 2\ndocker-host = \"unix:///d.sock\"\nlog-driver-fallback = \"local\"\n";
        let cases: &[(&[&str], &[&str])] = &[
            (
                &["berth", "run", "t.json"],
                &[
                    "berth",
                    "run",
                    "--data-dir=/d",
                    "--docker-host=unix:///d.sock",
                    "--log-driver-fallback=local",
                    "--pull-attempts=2",
                    "t.json",
                ],
            ),
            (
                &["berth", "gc", "--dry-run"],
                &[
                    "berth",
                    "gc",
                    "--data-dir=/d",
                    "--docker-host=unix:///d.sock",
                    "--dry-run",
                ],
            ),
            (
                &["berth", "ps", "-a"],
                &["berth", "ps", "--agent=/s.sock", "-a"],
            ),
            (
                &["berth", "logs", "T", "c"],
                &[
                    "berth",
                    "logs",
                    "--agent=/s.sock",
                    "--docker-host=unix:///d.sock",
                    "T",
                    "c",
                ],
            ),
            (
                &["berth", "validate", "t.json"],
                &["berth", "validate", "--log-driver-fallback=local", "t.json"],
            ),
            (&["berth", "--version"], &["berth", "--version"]),
        ];
        // In the file's key order (toml sorts the table).
        for (args, want) in cases {
            let argv = layered(args, file, &[]).expect("layered");
            assert_eq!(strs(&argv), *want);
            if args[1] != "--version" {
                crate::Cli::try_parse_from(argv).expect("clap accepts it");
            }
        }
    }

    /// The log options of the subcommands that resolve task definitions.
    fn log_args(argv: Vec<OsString>) -> crate::log_policy::LogArgs {
        match crate::Cli::try_parse_from(argv).map(|c| c.command) {
            Ok(crate::Command::Agent(a)) => a.logs,
            Ok(crate::Command::Run(a)) => a.logs,
            Ok(crate::Command::Validate(a)) => a.logs,
            other => panic!("not a resolving subcommand: {other:?}"),
        }
    }

    #[test]
    fn validate_run_and_the_agent_take_the_same_log_driver_keys() {
        let file = "available-log-drivers = [\"json-file\", \"syslog\"]\nlog-driver-fallback = \"local\"\n";
        for args in [
            &["berth", "validate", "t.json"][..],
            &["berth", "run", "t.json"][..],
            &["berth", "agent"][..],
        ] {
            let argv = layered(args, file, &[]).expect("layered");
            assert!(
                strs(&argv).contains(&r#"--available-log-drivers=["json-file","syslog"]"#),
                "{argv:?}"
            );
            let policy = log_args(argv).policy().expect("policy");
            assert_eq!(
                policy.available().collect::<Vec<_>>(),
                ["json-file", "syslog"]
            );
            assert_eq!(policy.fallback().as_str(), "local");
        }
        // A string is taken as written (ECS's JSON, or commas).
        let argv = layered(
            &["berth", "validate", "t.json"],
            "available-log-drivers = \"json-file,gelf\"\n",
            &[],
        )
        .expect("layered");
        let policy = log_args(argv).policy().expect("policy");
        assert_eq!(
            policy.available().collect::<Vec<_>>(),
            ["gelf", "json-file"]
        );
        // ECS's variable beats the file.
        let argv = layered(
            &["berth", "agent"],
            file,
            &["ECS_AVAILABLE_LOGGING_DRIVERS"],
        )
        .expect("layered");
        assert_eq!(
            strs(&argv),
            ["berth", "agent", "--log-driver-fallback=local"]
        );
        let err = layered(
            &["berth", "run", "t.json"],
            "available-log-drivers = [1]\n",
            &[],
        )
        .expect_err("not strings");
        assert_eq!(
            format!("{err:#}"),
            "/etc/berth/berth.toml: option \"available-log-drivers\" must be a list of strings, found a list holding integer"
        );
        let err =
            layered(&["berth", "gc"], "available-log-drivers = 3\n", &[]).expect_err("not a list");
        assert_eq!(
            format!("{err:#}"),
            "/etc/berth/berth.toml: option \"available-log-drivers\" must be a list of strings (or one string), found integer"
        );
    }

    #[test]
    fn ecs_available_logging_drivers_is_read_unless_a_flag_is_given() {
        let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
        let with_env = |value: &str, args: &[&str]| {
            // SAFETY: as in a_flag_beats_the_environment.
            unsafe { std::env::set_var("ECS_AVAILABLE_LOGGING_DRIVERS", value) };
            let result = log_args(layered(args, "", &[]).expect("layered")).policy();
            // SAFETY: as above.
            unsafe { std::env::remove_var("ECS_AVAILABLE_LOGGING_DRIVERS") };
            result
        };
        let p = with_env(
            r#"["json-file","awslogs"]"#,
            &["berth", "validate", "t.json"],
        )
        .expect("policy");
        assert_eq!(p.available().collect::<Vec<_>>(), ["awslogs", "json-file"]);
        let p = with_env(
            r#"["awslogs"]"#,
            &["berth", "agent", "--available-log-drivers=syslog"],
        )
        .expect("policy");
        assert_eq!(
            p.available().collect::<Vec<_>>(),
            ["syslog"],
            "the flag wins"
        );
        let err = with_env(r#"["json-file""#, &["berth", "run", "t.json"]).expect_err("bad JSON");
        assert!(
            format!("{err:#}").starts_with(
                "ECS_AVAILABLE_LOGGING_DRIVERS=[\"json-file\": expected a JSON list of log driver names"
            ),
            "{err:#}"
        );
        let p = with_env("", &["berth", "run", "t.json"]).expect("empty is unset");
        assert_eq!(p, berth_model::logging::LogPolicy::default());
    }

    #[test]
    fn config_is_found_before_or_after_the_subcommand() {
        let read = |p: &Path| match p.to_str() {
            Some("/mine.toml") => Ok("api-socket = \"/mine.sock\"\n".to_string()),
            _ => Err(std::io::Error::from(std::io::ErrorKind::NotFound)),
        };
        for args in [
            &["berth", "--config", "/mine.toml", "ps"][..],
            &["berth", "--config=/mine.toml", "ps"][..],
            &["berth", "ps", "--config", "/mine.toml"][..],
        ] {
            let argv = layer(os(args), read, |_| false).expect("layered");
            assert!(strs(&argv).contains(&"--agent=/mine.sock"), "{args:?}");
            crate::Cli::try_parse_from(argv).expect("clap accepts it");
        }
        // Missing at the default path is fine; missing when named is an error.
        let argv = layer(os(&["berth", "ps"]), read, |_| false).expect("no file is fine");
        assert_eq!(strs(&argv), ["berth", "ps"]);
        let err = layer(os(&["berth", "ps", "--config", "/nope.toml"]), read, |_| {
            false
        })
        .expect_err("named file missing");
        assert!(format!("{err:#}").starts_with("cannot read the configuration file /nope.toml"));
    }
}
