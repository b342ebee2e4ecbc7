//! FireLens, as the ECS agent does it: the router's generated configuration, where its files
//! live, and what the router and the containers that log to it get in their create specs. Pure
//! (no I/O): the actor writes the file and creates the directories.
//!
//! The facts come from the ECS agent (`agent/taskresource/firelens`, `agent/api/task/task.go`,
//! `agent/engine/docker_task_engine.go`) and the generator it uses
//! (`go-config-generator-for-fluentd-and-fluentbit`), whose templates fix the layout: inputs,
//! include filters, exclude filters, record fields, the user's file, outputs. berth renders the
//! same text by hand (no Rust crate writes Fluent Bit or Fluentd configuration); Go templates
//! range over maps in key order, so options are written sorted, as here.
//!
//! Layout, under the task's directory (`DATA_DIR/tasks/<id>/firelens/`, ECS:
//! `DATA_DIR/firelens/<id>/`): `config/fluent.conf` (mounted at the image's default configuration
//! path) and `socket/` (mounted at `/var/run/`, where the router creates `fluent.sock`).

use crate::secrets::TaskValues;
use crate::spec::{ContainerSpec, MountKind, MountSpec};
use berth_model::firelens::{
    self as model, OPTION_BUFFER_LIMIT, OPTION_EXCLUDE_PATTERN, OPTION_INCLUDE_PATTERN,
};
use berth_model::{FirelensType, NetworkMode, TaskDefinition};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Where the router listens inside its container (ECS's `socketPath`).
pub const SOCKET_PATH: &str = "/var/run/fluent.sock";
/// The TCP port of the `forward` input in bridge and awsvpc mode.
pub const FORWARD_PORT: &str = "24224";
/// Fluent Bit's default memory buffer limit when the router has no memory setting (MB).
const DEFAULT_MEM_BUF_LIMIT_MB: u64 = 25;
/// Unix socket paths are limited to 108 bytes (`sun_path`), the final NUL included.
pub const MAX_SOCKET_PATH: usize = 107;

/// The task's FireLens files on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    /// `DATA_DIR/tasks/<id>/firelens`
    pub dir: PathBuf,
    /// `…/config`
    pub config_dir: PathBuf,
    /// `…/config/fluent.conf`
    pub config_file: PathBuf,
    /// `…/socket`, mounted at `/var/run/` in the router.
    pub socket_dir: PathBuf,
    /// `…/socket/fluent.sock`, what Docker's fluentd driver connects to.
    pub socket: PathBuf,
}

impl Paths {
    pub fn new(data_dir: &Path, task_id: &str) -> Self {
        let dir = crate::spec::task_dir(data_dir, task_id).join("firelens");
        let config_dir = dir.join("config");
        let socket_dir = dir.join("socket");
        Paths {
            config_file: config_dir.join("fluent.conf"),
            socket: socket_dir.join("fluent.sock"),
            dir,
            config_dir,
            socket_dir,
        }
    }

    /// An error when the socket path is too long for a Unix socket (a long `DATA_DIR`).
    pub fn check(&self) -> Result<(), String> {
        let len = self.socket.as_os_str().len();
        if len > MAX_SOCKET_PATH {
            return Err(format!(
                "the FireLens socket path {} is {len} bytes, longer than a Unix socket allows ({MAX_SOCKET_PATH}); choose a shorter --data-dir",
                self.socket.display()
            ));
        }
        Ok(())
    }
}

/// Who should own the socket directory, from the router's `user` (ECS's `SetOwnership`): none
/// without a user; `uid`, `uid:gid`, or `uid:<group name>` (then the group stays the agent's, as
/// on ECS: the name would have to be looked up in the image). A user given by name cannot be
/// resolved outside the image: an error, as on ECS.
pub fn socket_owner(user: Option<&str>) -> Result<Option<(u32, Option<u32>)>, String> {
    let Some(user) = user.filter(|u| !u.is_empty()) else {
        return Ok(None);
    };
    let (uid, group) = match user.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (user, None),
    };
    let uid = uid.parse::<u32>().map_err(|_| {
        format!(
            "the log router's user {user:?} must start with a numeric user ID (ECS sets the socket directory's owner from it); use for example \"1000\" or \"1000:1000\""
        )
    })?;
    Ok(Some((uid, group.and_then(|g| g.parse::<u32>().ok()))))
}

/// What the ECS metadata record fields say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskIdentity {
    pub cluster: String,
    pub task_arn: String,
}

impl TaskIdentity {
    /// The cluster and the task's ARN ([`crate::Identity::task_arn`], the one the metadata
    /// endpoint shows).
    pub fn new(identity: &crate::Identity, task_id: &str) -> Self {
        TaskIdentity {
            cluster: identity.cluster.clone(),
            task_arn: identity.task_arn(task_id),
        }
    }
}

/// The tag Docker's fluentd driver gives a container's records: `<container>-firelens-<task id>`.
pub fn tag(container: &str, task_id: &str) -> String {
    format!("{container}-firelens-{task_id}")
}

/// The environment variable that carries secret log option `name` of container `index` to the
/// router (ECS's `firelensConfigVarFmt`).
fn secret_var(name: &str, index: usize) -> String {
    format!("{name}_{index}")
}

/// One `[INPUT]` / `<source>` or `[OUTPUT]` / `<match>`.
struct Pipe {
    name: String,
    tag: Option<String>,
    options: BTreeMap<String, String>,
}

/// A `grep` filter: records whose `log` matches (include) or does not (exclude).
struct Grep {
    include: bool,
    regex: String,
    tag: String,
}

/// The configuration before it is written out, as ECS's generator holds it.
struct Config {
    inputs: Vec<Pipe>,
    greps: Vec<Grep>,
    /// Record fields to add, by tag pattern.
    records: BTreeMap<String, BTreeMap<String, String>>,
    includes: Vec<String>,
    outputs: Vec<Pipe>,
}

fn options(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The router's configuration for this task, or None when it has no router. `identity` fills
/// the metadata fields; the outputs match every tag a container's name starts (ECS's patterns),
/// so the task id is not needed here.
pub fn generate(def: &TaskDefinition, identity: &TaskIdentity) -> Option<String> {
    let r = model::router(def)?;
    let router = &def.container_definitions[r];
    let firelens = router.firelens_configuration.as_ref()?;
    let kind = firelens.router_type;
    let wildcard = match kind {
        FirelensType::Fluentbit => "*",
        FirelensType::Fluentd => "**",
    };
    let mut config = Config {
        inputs: Vec::new(),
        greps: Vec::new(),
        records: BTreeMap::new(),
        includes: Vec::new(),
        outputs: Vec::new(),
    };
    // The socket the containers' fluentd drivers write to.
    config.inputs.push(match kind {
        FirelensType::Fluentd => Pipe {
            name: "unix".into(),
            tag: None,
            options: options(&[("path", SOCKET_PATH)]),
        },
        FirelensType::Fluentbit => {
            // ECS: half the router's memoryReservation (else memory), in MB; 25MB without either.
            let limit = router
                .memory_reservation
                .filter(|m| *m > 0)
                .or(router.memory)
                .map(|m| m / 2)
                .filter(|m| *m > 0)
                .unwrap_or(DEFAULT_MEM_BUF_LIMIT_MB);
            Pipe {
                name: "forward".into(),
                tag: None,
                options: options(&[
                    ("unix_path", SOCKET_PATH),
                    ("Mem_Buf_Limit", &format!("{limit}MB")),
                ]),
            }
        }
    });
    // A TCP input (and Fluent Bit's health check) in the modes where containers have an address.
    let bind = match def.network_mode {
        NetworkMode::Bridge => Some("0.0.0.0"),
        NetworkMode::Awsvpc => Some("127.0.0.1"),
        NetworkMode::Host | NetworkMode::None => None,
    };
    if let Some(bind) = bind {
        config.inputs.push(Pipe {
            name: "forward".into(),
            tag: None,
            options: match kind {
                FirelensType::Fluentd => options(&[("port", FORWARD_PORT), ("bind", bind)]),
                FirelensType::Fluentbit => options(&[("Port", FORWARD_PORT), ("Listen", bind)]),
            },
        });
        if kind == FirelensType::Fluentbit {
            config.inputs.push(Pipe {
                name: "tcp".into(),
                tag: Some("firelens-healthcheck".into()),
                options: options(&[("Port", "8877"), ("Listen", "127.0.0.1")]),
            });
            config.outputs.push(Pipe {
                name: "null".into(),
                tag: Some("firelens-healthcheck".into()),
                options: BTreeMap::new(),
            });
        }
    }
    if firelens.enable_ecs_log_metadata {
        config.records.insert(
            wildcard.to_string(),
            options(&[
                ("ecs_cluster", &identity.cluster),
                ("ecs_task_arn", &identity.task_arn),
                (
                    "ecs_task_definition",
                    &format!("{}:{}", def.family, def.revision),
                ),
            ]),
        );
    }
    let output_key = kind.output_key();
    for a in model::apps(def) {
        let app = &def.container_definitions[a];
        // ECS's output sections match `<container>-firelens*`: what the generated tags
        // (`<container>-firelens-<task id>`) and a user's own `<container>-firelens…` tags share.
        let match_tag = format!("{}-firelens{wildcard}", app.name);
        let mut plugin = None;
        let mut out = BTreeMap::new();
        for (key, value) in app.log_options() {
            match key.as_str() {
                k if k == output_key => plugin = Some(value),
                OPTION_BUFFER_LIMIT => {}
                OPTION_INCLUDE_PATTERN | OPTION_EXCLUDE_PATTERN => config.greps.push(Grep {
                    include: key == OPTION_INCLUDE_PATTERN,
                    regex: value,
                    tag: match_tag.clone(),
                }),
                _ => {
                    out.insert(key, value);
                }
            }
        }
        for secret in app.log_secret_options() {
            let var = secret_var(&secret.name, a);
            let placeholder = match kind {
                FirelensType::Fluentbit => format!("${{{var}}}"),
                FirelensType::Fluentd => format!("\"#{{ENV['{var}']}}\""),
            };
            out.insert(secret.name.clone(), placeholder);
        }
        // No plugin named: no output section (the user's own file may route these records); the
        // parser refuses plugin options without a plugin.
        if let Some(name) = plugin {
            config.outputs.push(Pipe {
                name,
                tag: Some(match_tag),
                options: out,
            });
        }
    }
    if let Some(file) = &firelens.config_file {
        config.includes.push(file.clone());
    }
    Some(match kind {
        FirelensType::Fluentbit => render_fluentbit(&config),
        FirelensType::Fluentd => render_fluentd(&config),
    })
}

// Writing to a String cannot fail: the `let _ =` below drop an always-Ok result.

fn render_fluentbit(c: &Config) -> String {
    let mut s = String::new();
    for p in &c.inputs {
        let _ = write!(s, "\n[INPUT]\n    Name {}\n", p.name);
        if let Some(tag) = &p.tag {
            let _ = writeln!(s, "    Tag {tag}");
        }
        for (k, v) in &p.options {
            let _ = writeln!(s, "    {k} {v}");
        }
    }
    for g in c.greps.iter().filter(|g| g.include) {
        let _ = write!(
            s,
            "\n[FILTER]\n    Name   grep\n    Match {}\n    Regex  log {}\n",
            g.tag, g.regex
        );
    }
    for g in c.greps.iter().filter(|g| !g.include) {
        let _ = write!(
            s,
            "\n[FILTER]\n    Name   grep\n    Match {}\n    Exclude log {}\n",
            g.tag, g.regex
        );
    }
    for (tag, fields) in &c.records {
        let _ = write!(s, "\n[FILTER]\n    Name record_modifier\n    Match {tag}\n");
        for (k, v) in fields {
            let _ = writeln!(s, "    Record {k} {v}");
        }
    }
    for file in &c.includes {
        let _ = write!(s, "\n@INCLUDE {file}\n");
    }
    for p in &c.outputs {
        let _ = write!(s, "\n[OUTPUT]\n    Name {}\n", p.name);
        if let Some(tag) = &p.tag {
            let _ = writeln!(s, "    Match {tag}");
        }
        for (k, v) in &p.options {
            let _ = writeln!(s, "    {k} {v}");
        }
    }
    s
}

fn render_fluentd(c: &Config) -> String {
    let mut s = String::new();
    for p in &c.inputs {
        let _ = write!(s, "\n<source>\n    @type {}\n", p.name);
        if let Some(tag) = &p.tag {
            let _ = writeln!(s, "    tag {tag}");
        }
        for (k, v) in &p.options {
            let _ = writeln!(s, "    {k} {v}");
        }
        s.push_str("</source>\n");
    }
    for (include, section) in [(true, "regexp"), (false, "exclude")] {
        for g in c.greps.iter().filter(|g| g.include == include) {
            let _ = write!(
                s,
                "\n<filter {}>\n    @type  grep\n    <{section}>\n        key log\n        pattern {}\n    </{section}>\n</filter>\n",
                g.tag, g.regex
            );
        }
    }
    for (tag, fields) in &c.records {
        let _ = write!(
            s,
            "\n<filter {tag}>\n    @type record_transformer\n    <record>\n"
        );
        for (k, v) in fields {
            let _ = writeln!(s, "        {k} {v}");
        }
        s.push_str("    </record>\n</filter>\n");
    }
    for file in &c.includes {
        let _ = write!(s, "\n@include {file}\n");
    }
    for p in &c.outputs {
        let _ = write!(
            s,
            "\n<match {}>\n    @type {}\n",
            p.tag.as_deref().unwrap_or("**"),
            p.name
        );
        for (k, v) in &p.options {
            let _ = writeln!(s, "    {k} {v}");
        }
        s.push_str("</match>\n");
    }
    s
}

/// Where the router image reads its configuration.
pub fn config_target(kind: FirelensType) -> &'static str {
    match kind {
        FirelensType::Fluentbit => "/fluent-bit/etc/fluent-bit.conf",
        FirelensType::Fluentd => "/fluentd/etc/fluent.conf",
    }
}

/// Adjust container `i`'s create spec for FireLens: the router gets its configuration file and
/// socket directory (and, for Fluentd, `FLUENT_UID=0`; and the secret log options of the
/// containers logging to it as environment variables); a container logging with `awsfirelens`
/// gets Docker's fluentd driver pointed at the socket, its options left to the router's
/// configuration. Any other container is left as it is.
pub fn apply(
    spec: &mut ContainerSpec,
    def: &TaskDefinition,
    i: usize,
    task_id: &str,
    paths: &Paths,
    values: &TaskValues,
) {
    let Some(c) = def.container_definitions.get(i) else {
        return;
    };
    if let Some(firelens) = &c.firelens_configuration {
        spec.mounts.push(MountSpec {
            kind: MountKind::Bind,
            source: paths.config_file.display().to_string(),
            target: config_target(firelens.router_type).to_string(),
            read_only: true,
        });
        spec.mounts.push(MountSpec {
            kind: MountKind::Bind,
            source: paths.socket_dir.display().to_string(),
            target: "/var/run/".to_string(),
            read_only: false,
        });
        if firelens.router_type == FirelensType::Fluentd {
            // ECS: the Fluentd image drops to its own user otherwise, and cannot create the
            // socket Docker connects to.
            spec.env.push("FLUENT_UID=0".to_string());
        }
        for a in model::apps(def) {
            for (name, value) in &values.container(a).log_options {
                spec.env
                    .push(format!("{}={}", secret_var(name, a), value.expose()));
            }
        }
        return;
    }
    if !model::uses_firelens(c) || model::router(def).is_none() {
        return;
    }
    let written = c.log_options();
    let mut options = BTreeMap::new();
    options.insert("tag".to_string(), tag(&c.name, task_id));
    options.insert(
        "fluentd-address".to_string(),
        format!("unix://{}", paths.socket.display()),
    );
    // ECS: sub-second timestamps, and async so a router that is not listening yet (or restarts)
    // does not fail the container (ECS_ENABLE_FIRELENS_ASYNC, default true; Docker 20.10 and
    // later call it fluentd-async).
    options.insert(
        "fluentd-sub-second-precision".to_string(),
        "true".to_string(),
    );
    options.insert("fluentd-async".to_string(), "true".to_string());
    if let Some(limit) = written.get(OPTION_BUFFER_LIMIT) {
        options.insert("fluentd-buffer-limit".to_string(), limit.clone());
    }
    spec.log_driver = Some("fluentd".to_string());
    spec.log_options = options;
    if def.network_mode == NetworkMode::Awsvpc {
        // ECS: the router is reachable on the task's loopback in awsvpc mode.
        spec.env.push("FLUENT_HOST=127.0.0.1".to_string());
        spec.env.push(format!("FLUENT_PORT={FORWARD_PORT}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::{ContainerValues, SecretValue};
    use berth_model::{ContainerDefinition, FirelensConfiguration, LogConfiguration, LogDriver};

    const TASK: &str = "0123456789abcdef0123456789abcdef";

    fn identity() -> TaskIdentity {
        TaskIdentity::new(&crate::Identity::default(), TASK)
    }

    fn logging(options: &[(&str, &str)], secrets: &[&str]) -> Option<LogConfiguration> {
        Some(LogConfiguration {
            log_driver: LogDriver::new("awsfirelens"),
            options: options
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            secret_options: secrets
                .iter()
                .map(|n| berth_model::Secret {
                    name: n.to_string(),
                    value_from: format!("arn:aws:ssm:eu-west-1:1:parameter/{n}"),
                })
                .collect(),
        })
    }

    fn task(kind: FirelensType, network: NetworkMode) -> TaskDefinition {
        let mut router = ContainerDefinition::new("log_router", "fluent-bit");
        router.memory_reservation = Some(50);
        router.firelens_configuration = Some(FirelensConfiguration {
            router_type: kind,
            enable_ecs_log_metadata: true,
            config_file: Some("/extra.conf".into()),
        });
        let mut app = ContainerDefinition::new("app", "i");
        let (name_key, plugin) = match kind {
            FirelensType::Fluentbit => ("Name", "cloudwatch"),
            FirelensType::Fluentd => ("@type", "stdout"),
        };
        app.log_configuration = logging(
            &[
                (name_key, plugin),
                ("region", "eu-west-1"),
                ("include-pattern", "^app"),
                ("exclude-pattern", "debug"),
                ("log-driver-buffer-limit", "2097152"),
            ],
            &["apikey"],
        );
        let mut web = ContainerDefinition::new("web", "i");
        web.log_configuration = logging(&[(name_key, "stdout")], &[]);
        let plain = ContainerDefinition::new("plain", "i");
        let mut def = TaskDefinition::new("shop", vec![router, app, web, plain]);
        def.revision = 3;
        def.network_mode = network;
        def
    }

    fn golden(name: &str, actual: &str) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/firelens")
            .join(name);
        if std::env::var_os("BERTH_BLESS").is_some() {
            std::fs::write(&path, actual).expect("bless");
        }
        let want = std::fs::read_to_string(&path).expect("golden file");
        assert_eq!(actual, want, "{}", path.display());
    }

    #[test]
    fn fluentbit_bridge_matches_ecs_layout() {
        let text = generate(
            &task(FirelensType::Fluentbit, NetworkMode::Bridge),
            &identity(),
        )
        .expect("a router");
        golden("fluentbit-bridge.conf", &text);
    }

    #[test]
    fn fluentbit_host_mode_has_only_the_socket_input() {
        let text = generate(
            &task(FirelensType::Fluentbit, NetworkMode::Host),
            &identity(),
        )
        .expect("a router");
        golden("fluentbit-host.conf", &text);
    }

    #[test]
    fn fluentd_awsvpc_matches_ecs_layout() {
        let text = generate(
            &task(FirelensType::Fluentd, NetworkMode::Awsvpc),
            &identity(),
        )
        .expect("a router");
        golden("fluentd-awsvpc.conf", &text);
    }

    #[test]
    fn metadata_off_and_no_router() {
        let mut def = task(FirelensType::Fluentbit, NetworkMode::Host);
        if let Some(f) = def.container_definitions[0].firelens_configuration.as_mut() {
            f.enable_ecs_log_metadata = false;
            f.config_file = None;
        }
        let text = generate(&def, &identity()).expect("a router");
        assert!(!text.contains("record_modifier") && !text.contains("@INCLUDE"));
        def.container_definitions[0].firelens_configuration = None;
        assert_eq!(generate(&def, &identity()), None);
    }

    #[test]
    fn specs_of_the_router_and_its_apps() {
        let def = task(FirelensType::Fluentd, NetworkMode::Awsvpc);
        let paths = Paths::new(Path::new("/d"), TASK);
        let mut values = TaskValues(vec![ContainerValues::default(); 4]);
        values.0[1]
            .log_options
            .push(("apikey".into(), SecretValue::new("s3cr3t".into())));

        let mut router = ContainerSpec::default();
        apply(&mut router, &def, 0, TASK, &paths, &values);
        assert_eq!(
            router
                .mounts
                .iter()
                .map(|m| (m.source.as_str(), m.target.as_str(), m.read_only))
                .collect::<Vec<_>>(),
            [
                (
                    "/d/tasks/0123456789abcdef0123456789abcdef/firelens/config/fluent.conf",
                    "/fluentd/etc/fluent.conf",
                    true
                ),
                (
                    "/d/tasks/0123456789abcdef0123456789abcdef/firelens/socket",
                    "/var/run/",
                    false
                ),
            ]
        );
        assert_eq!(router.env, ["FLUENT_UID=0", "apikey_1=s3cr3t"]);

        let mut app = ContainerSpec {
            log_driver: Some("awsfirelens".into()),
            log_options: [("apikey".to_string(), "s3cr3t".to_string())].into(),
            ..ContainerSpec::default()
        };
        apply(&mut app, &def, 1, TASK, &paths, &values);
        assert_eq!(app.log_driver.as_deref(), Some("fluentd"));
        let want: BTreeMap<String, String> = [
            (
                "fluentd-address",
                "unix:///d/tasks/0123456789abcdef0123456789abcdef/firelens/socket/fluent.sock",
            ),
            ("fluentd-async", "true"),
            ("fluentd-buffer-limit", "2097152"),
            ("fluentd-sub-second-precision", "true"),
            ("tag", "app-firelens-0123456789abcdef0123456789abcdef"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(app.log_options, want, "no secret value reaches Docker");
        assert_eq!(app.env, ["FLUENT_HOST=127.0.0.1", "FLUENT_PORT=24224"]);

        let mut plain = ContainerSpec::default();
        apply(&mut plain, &def, 3, TASK, &paths, &values);
        assert_eq!(plain, ContainerSpec::default());
    }

    #[test]
    fn socket_owner_from_the_routers_user() {
        assert_eq!(socket_owner(None), Ok(None));
        assert_eq!(socket_owner(Some("")), Ok(None));
        assert_eq!(socket_owner(Some("1000")), Ok(Some((1000, None))));
        assert_eq!(socket_owner(Some("1000:50")), Ok(Some((1000, Some(50)))));
        assert_eq!(socket_owner(Some("1000:fluent")), Ok(Some((1000, None))));
        let err = socket_owner(Some("fluent")).expect_err("a name");
        assert!(err.contains("numeric user ID"), "{err}");
    }

    #[test]
    fn socket_path_length() {
        assert!(
            Paths::new(Path::new("/var/lib/berth"), TASK)
                .check()
                .is_ok()
        );
        let long = "/x".repeat(40);
        let err = Paths::new(Path::new(&long), TASK)
            .check()
            .expect_err("too long");
        assert!(err.contains("choose a shorter --data-dir"), "{err}");
    }
}
