//! What the cluster tests share: `berth controller` processes ([`Controller`]), `berth cluster …`
//! with `--output json` ([`cluster_json`]), waiting with a reason ([`wait_until`]), and a whole
//! test cluster ([`Fleet`]): a real 3-member etcd (`berth_testkit::etcd::EtcdCluster`),
//! controllers started on demand, and node agents (`berth agent --node NAME`, on
//! [`super::agent::Agent`]), each reaching etcd through a `ProxySet` of its own so that one node
//! can be cut off from etcd alone ([`Fleet::cut`], [`Fleet::stall`], [`Fleet::heal`]).
//!
//! Every task definition a fleet submits gets `dockerLabels` `{"berth.test": "<the fleet's
//! label>"}` in each container ([`Fleet::labelled`]): [`Fleet::docker_running`] looks only at
//! those containers (other tests run beside this one), and dropping the fleet kills every agent
//! and controller (SIGKILL), then removes every container with that label.
//!
//! Not every test uses every helper.
#![allow(dead_code)]

use super::agent::{Agent, Launch};
use berth_testkit::etcd::EtcdCluster;
use berth_testkit::tcp_proxy::ProxySet;
use berth_testkit::{TEST_LABEL, remove_labelled_containers, unique_name};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BERTH: &str = env!("CARGO_BIN_EXE_berth");

/// How often [`wait_until`] looks again.
const POLL: Duration = Duration::from_millis(200);

/// `berth ARGS`, without the cluster variables of the caller's environment, with
/// `BERTH_ETCD_INSECURE=true` (the tests' plain etcd; a TLS fleet's commands give their
/// credentials, [`Fleet::etcd_args`]).
pub fn berth(args: &[&str]) -> Output {
    Command::new(BERTH)
        .args(args)
        .env_remove("BERTH_ETCD")
        .env_remove("BERTH_CLUSTER")
        .env("BERTH_ETCD_INSECURE", "true")
        .output()
        .expect("run berth")
}

/// The password of etcd user `user` in a TLS fleet.
fn password(user: &str) -> String {
    format!("pw-{user}-{}", std::process::id())
}

/// A path as the UTF-8 string a command line takes.
pub fn path_str(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

/// The JSON document a successful command printed.
///
/// # Panics
///
/// When the command failed (with its stderr) or printed something else.
pub fn json_of(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "berth failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

/// `berth cluster ARGS --etcd ENDPOINTS --output json`, parsed (it must succeed).
pub fn cluster_json(endpoints: &str, args: &[&str]) -> Value {
    let mut all = vec!["cluster"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--etcd", endpoints, "--output", "json"]);
    json_of(&berth(&all))
}

/// `berth cluster submit FILE --count N`: the new tasks' ids.
pub fn submit(endpoints: &str, file: &Path, count: u32) -> Vec<String> {
    let file = file.to_str().expect("UTF-8 path");
    let count = count.to_string();
    ids(&cluster_json(
        endpoints,
        &["submit", file, "--count", &count],
    ))
}

/// The `tasks` array of a submit's answer, as strings.
fn ids(answer: &Value) -> Vec<String> {
    answer["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("no tasks array: {answer}"))
        .iter()
        .map(|t| {
            t.as_str()
                .unwrap_or_else(|| panic!("not an id: {t}"))
                .to_owned()
        })
        .collect()
}

/// `berth cluster ps`'s tasks.
pub fn ps(endpoints: &str) -> Vec<Value> {
    array(cluster_json(endpoints, &["ps"]), "tasks")
}

/// `berth cluster nodes`' nodes.
pub fn nodes(endpoints: &str) -> Vec<Value> {
    array(cluster_json(endpoints, &["nodes"]), "nodes")
}

fn array(mut doc: Value, key: &str) -> Vec<Value> {
    match doc[key].take() {
        Value::Array(items) => items,
        other => panic!("no {key} array in {doc}: {other}"),
    }
}

/// Calls `check` every 200 ms until it returns `Ok` (its value is returned) or `limit` passes.
/// `Err` carries the state seen, for the failure message.
///
/// # Panics
///
/// After `limit`: "waited LIMIT for WHAT", the last state `check` returned.
pub fn wait_until<T>(limit: Duration, what: &str, check: impl FnMut() -> Result<T, String>) -> T {
    wait_explained(limit, what, check, String::new)
}

/// [`wait_until`] that adds `explain()` (logs, say) to its failure message.
fn wait_explained<T>(
    limit: Duration,
    what: &str,
    mut check: impl FnMut() -> Result<T, String>,
    explain: impl FnOnce() -> String,
) -> T {
    let start = Instant::now();
    loop {
        match check() {
            Ok(value) => return value,
            Err(state) if start.elapsed() >= limit => {
                panic!(
                    "waited {limit:?} for {what}; the last state seen:\n{state}\n{}",
                    explain()
                )
            }
            Err(_) => std::thread::sleep(POLL),
        }
    }
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A `berth controller` process, killed on drop; its log in `log`.
pub struct Controller {
    pub name: String,
    pub child: Option<Child>,
    pub log: PathBuf,
}

impl Controller {
    /// `berth controller --name NAME --lease-ttl 2s --interval 200ms`, logging to
    /// `DIR/NAME.log`.
    pub fn start(dir: &Path, name: &str, endpoints: &str) -> Controller {
        Self::start_with(
            dir,
            name,
            endpoints,
            &["--lease-ttl", "2s", "--interval", "200ms"],
        )
    }

    /// `berth controller --name NAME` with these arguments (none of the defaults of
    /// [`Controller::start`]).
    pub fn start_with(dir: &Path, name: &str, endpoints: &str, args: &[&str]) -> Controller {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).expect("controller log");
        let child = Command::new(BERTH)
            .args(["controller", "--etcd", endpoints, "--name", name])
            .args(args)
            .env_remove("BERTH_ETCD")
            .env("BERTH_ETCD_INSECURE", "true")
            .env("BERTH_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("spawn berth controller");
        Controller {
            name: name.to_owned(),
            child: Some(child),
            log,
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether it has led at some point (its log says so).
    pub fn leads(&self) -> bool {
        self.log().contains("leading")
    }

    /// Whether its process still runs.
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// SIGKILL, and reap it.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// How a node agent is started by [`Fleet::node`]. `None`: the agent's default.
#[derive(Clone, Debug)]
pub struct NodeOpts {
    /// `--node-lease-ttl` (e.g. `"3s"`).
    pub lease_ttl: Option<String>,
    /// `--node-cpu` (CPU units).
    pub cpu: Option<u64>,
    /// `--node-memory` (MiB).
    pub memory_mib: Option<u64>,
    /// `--node-attribute KEY=VALUE`, one each.
    pub attributes: Vec<(String, String)>,
    /// More arguments for every start.
    pub args: Vec<String>,
    /// The agent's `--cleanup-wait`.
    pub cleanup_wait: &'static str,
    /// How the agent is launched (its `args` come before the node's own).
    pub launch: Launch,
}

impl Default for NodeOpts {
    fn default() -> NodeOpts {
        NodeOpts {
            lease_ttl: None,
            cpu: None,
            memory_mib: None,
            attributes: Vec::new(),
            args: Vec::new(),
            cleanup_wait: "1h",
            launch: Launch::default(),
        }
    }
}

impl NodeOpts {
    pub fn lease_ttl(mut self, ttl: &str) -> NodeOpts {
        self.lease_ttl = Some(ttl.to_owned());
        self
    }

    pub fn cpu(mut self, units: u64) -> NodeOpts {
        self.cpu = Some(units);
        self
    }

    pub fn memory(mut self, mib: u64) -> NodeOpts {
        self.memory_mib = Some(mib);
        self
    }

    pub fn attribute(mut self, key: &str, value: &str) -> NodeOpts {
        self.attributes.push((key.to_owned(), value.to_owned()));
        self
    }

    pub fn arg(mut self, arg: &str) -> NodeOpts {
        self.args.push(arg.to_owned());
        self
    }

    /// The agent's arguments for node `name` reaching etcd at `etcd`.
    fn agent_args(&self, name: &str, etcd: &str) -> Vec<String> {
        let mut args: Vec<String> = ["--etcd", etcd, "--node", name].map(str::to_owned).to_vec();
        // The tests' plain etcd (a TLS fleet's nodes give their credentials too, which make it
        // moot).
        args.push("--etcd-insecure".to_owned());
        if let Some(ttl) = &self.lease_ttl {
            args.extend(["--node-lease-ttl".to_owned(), ttl.clone()]);
        }
        if let Some(cpu) = self.cpu {
            args.extend(["--node-cpu".to_owned(), cpu.to_string()]);
        }
        if let Some(memory) = self.memory_mib {
            args.extend(["--node-memory".to_owned(), memory.to_string()]);
        }
        for (key, value) in &self.attributes {
            args.extend(["--node-attribute".to_owned(), format!("{key}={value}")]);
        }
        args.extend(self.args.iter().cloned());
        args
    }
}

/// One node: its agent, and the proxies between it and etcd.
pub struct Node {
    pub agent: Agent,
    pub proxies: ProxySet,
}

/// A container [`Fleet::docker_running`] found.
#[derive(Debug, Clone)]
pub struct Running {
    pub id: String,
    /// Docker's name, without the leading `/`.
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

impl Running {
    /// The value of label `key` (empty when it has none).
    pub fn label(&self, key: &str) -> &str {
        self.labels.get(key).map_or("", String::as_str)
    }
}

/// A test cluster: etcd, controllers, node agents. Dropping it kills the agents and controllers,
/// then removes the containers of the fleet's tasks, then stops etcd.
pub struct Fleet {
    // Fields drop in this order after `Drop::drop` (which kills and removes first).
    pub nodes: BTreeMap<String, Node>,
    pub controllers: BTreeMap<String, Controller>,
    pub etcd: EtcdCluster,
    /// Controller logs and task definition files.
    pub dir: tempfile::TempDir,
    label: String,
    /// With TLS and authentication ([`Fleet::start_secure`]): each etcd user's password file.
    passwords: BTreeMap<String, PathBuf>,
}

impl Fleet {
    /// A 3-member etcd named after `name` (its log files), no controller, no node.
    pub fn start(name: &str) -> Fleet {
        Fleet {
            nodes: BTreeMap::new(),
            controllers: BTreeMap::new(),
            etcd: EtcdCluster::start(name, 3),
            dir: tempfile::tempdir().expect("temporary directory"),
            label: unique_name(&format!("{name}-")),
            passwords: BTreeMap::new(),
        }
    }

    /// As [`Fleet::start`], with etcd served with TLS (client certificates required) and
    /// authentication on: the roles and users `berth cluster auth-setup --node N…` prints (one
    /// node role per name in `nodes`) are created with etcdctl, each user's password in a file
    /// of the fleet's directory. The fleet's processes then connect as their role's user:
    /// controllers `berth-controller`, node `N` `berth-node-N`, the CLI `berth-operator`
    /// ([`Fleet::etcd_args`]).
    pub fn start_secure(name: &str, nodes: &[&str]) -> Fleet {
        let mut fleet = Fleet {
            nodes: BTreeMap::new(),
            controllers: BTreeMap::new(),
            etcd: EtcdCluster::start_tls(name, 3),
            dir: tempfile::tempdir().expect("temporary directory"),
            label: unique_name(&format!("{name}-")),
            passwords: BTreeMap::new(),
        };
        let mut args = vec!["cluster", "auth-setup"];
        for n in nodes {
            args.extend(["--node", n]);
        }
        let ctl = fleet.etcd.etcdctl_command();
        args.extend(["--etcdctl", &ctl]);
        let out = berth(&args);
        assert!(
            out.status.success(),
            "auth-setup: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        for user in lines.iter().filter_map(|l| {
            let rest = l.strip_prefix(&format!("{ctl} user add "))?;
            Some(rest.trim().to_owned())
        }) {
            let file = fleet.dir.path().join(format!("{user}.password"));
            std::fs::write(&file, format!("{}\n", password(&user))).expect("password file");
            // Private, as docs/cluster.md asks (berth warns about one others can read).
            std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .expect("password file mode");
            fleet.passwords.insert(user, file);
        }
        // `auth enable` comes last: no command needs root's password.
        fleet.etcd.run_setup(&lines, password);
        fleet
    }

    /// The etcd options of a process connecting as `user`: with TLS and authentication the CA,
    /// the client certificate, the user and its password file; on the tests' plain etcd
    /// `--etcd-insecure`.
    pub fn etcd_args(&self, user: &str) -> Vec<String> {
        let Some(tls) = self.etcd.tls() else {
            return vec!["--etcd-insecure".to_owned()];
        };
        let password = self
            .passwords
            .get(user)
            .unwrap_or_else(|| panic!("no etcd user {user} in this fleet"));
        [
            "--etcd-cacert",
            path_str(&tls.ca),
            "--etcd-cert",
            path_str(&tls.client_cert),
            "--etcd-key",
            path_str(&tls.client_key),
            "--etcd-user",
            user,
            "--etcd-password-file",
            path_str(password),
        ]
        .map(str::to_owned)
        .to_vec()
    }

    /// etcd's own client URLs (no proxy): what the CLI and the controllers use.
    pub fn endpoints(&self) -> String {
        self.etcd.endpoints()
    }

    /// The value of `berth.test` on every container of this fleet's tasks.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Starts controller `name` (`--lease-ttl 2s --interval 200ms`).
    pub fn controller(&mut self, name: &str) -> &mut Controller {
        self.controller_with(name, &["--lease-ttl", "2s", "--interval", "200ms"])
    }

    /// Starts controller `name` with these arguments.
    ///
    /// # Panics
    ///
    /// When a controller of that name runs already.
    pub fn controller_with(&mut self, name: &str, args: &[&str]) -> &mut Controller {
        if self
            .controllers
            .get_mut(name)
            .is_some_and(Controller::running)
        {
            panic!("controller {name} runs already");
        }
        let mut all: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        all.extend(self.etcd_args("berth-controller"));
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        let c = Controller::start_with(self.dir.path(), name, &self.endpoints(), &all);
        self.controllers.insert(name.to_owned(), c);
        self.controllers.get_mut(name).expect("just inserted")
    }

    /// The controllers that have led, by name.
    pub fn leaders(&self) -> Vec<String> {
        self.controllers
            .values()
            .filter(|c| c.leads())
            .map(|c| c.name.clone())
            .collect()
    }

    /// Starts node `name`: an agent with `--etcd` at the node's own proxies, `--node NAME` and
    /// `opts`; returns once its control socket answers.
    ///
    /// # Panics
    ///
    /// When the node exists already, or its agent does not answer within 20 s (with its log).
    pub fn node(&mut self, name: &str, opts: NodeOpts) -> &mut Agent {
        assert!(!self.nodes.contains_key(name), "node {name} exists already");
        let proxies = ProxySet::start(&self.etcd.client_addrs());
        let mut launch = opts.launch.clone();
        let mut endpoints = proxies.endpoints();
        if self.etcd.tls().is_some() {
            endpoints = endpoints.replace("http://", "https://");
            launch
                .args
                .extend(self.etcd_args(&format!("berth-node-{name}")));
        }
        launch.args.extend(opts.agent_args(name, &endpoints));
        let agent = Agent::start_launch(opts.cleanup_wait, launch, &[], &[]);
        self.nodes.insert(name.to_owned(), Node { agent, proxies });
        &mut self.node_mut(name).agent
    }

    fn node_ref(&self, name: &str) -> &Node {
        self.nodes
            .get(name)
            .unwrap_or_else(|| panic!("no node {name} in this fleet"))
    }

    fn node_mut(&mut self, name: &str) -> &mut Node {
        self.nodes
            .get_mut(name)
            .unwrap_or_else(|| panic!("no node {name} in this fleet"))
    }

    /// Node `name`'s agent.
    pub fn agent(&self, name: &str) -> &Agent {
        &self.node_ref(name).agent
    }

    /// The proxies between node `name` and etcd.
    pub fn proxies(&self, name: &str) -> &ProxySet {
        &self.node_ref(name).proxies
    }

    /// SIGKILL node `name`'s agent (its containers keep running, as on a crash).
    pub fn kill9(&mut self, name: &str) {
        self.node_mut(name).agent.kill9();
    }

    /// Starts node `name`'s agent again, same data directory, arguments and proxies; returns
    /// once its control socket answers.
    pub fn restart(&mut self, name: &str) {
        let agent = &mut self.node_mut(name).agent;
        agent.kill9();
        agent.restart();
    }

    /// Cuts node `name` off from etcd: its connections to etcd close, new ones carry nothing
    /// (`TcpProxy::cut`). Everything else still reaches etcd.
    pub fn cut(&self, name: &str) {
        self.node_ref(name).proxies.cut();
    }

    /// Silences node `name`'s connections to etcd without closing them (`TcpProxy::stall`).
    pub fn stall(&self, name: &str) {
        self.node_ref(name).proxies.stall();
    }

    /// Lets node `name` reach etcd again.
    pub fn heal(&self, name: &str) {
        self.node_ref(name).proxies.heal();
    }

    /// `berth cluster ARGS --etcd <etcd> --output json` as the operator, parsed (it must
    /// succeed).
    pub fn cluster_json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend_from_slice(&["--output", "json"]);
        json_of(&self.cluster(&all))
    }

    /// `berth cluster ARGS --etcd <etcd>` as the operator, as it ended (for refusals and text
    /// output).
    pub fn cluster(&self, args: &[&str]) -> Output {
        self.cluster_as("berth-operator", args)
    }

    /// `berth cluster ARGS --etcd <etcd>` as etcd user `user` (with TLS and authentication).
    pub fn cluster_as(&self, user: &str, args: &[&str]) -> Output {
        let endpoints = self.endpoints();
        let etcd = self.etcd_args(user);
        let mut all = vec!["cluster"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--etcd", &endpoints]);
        all.extend(etcd.iter().map(String::as_str));
        berth(&all)
    }

    /// `berth cluster ps`'s tasks.
    pub fn ps(&self) -> Vec<Value> {
        array(self.cluster_json(&["ps"]), "tasks")
    }

    /// `berth cluster nodes`' nodes.
    pub fn nodes(&self) -> Vec<Value> {
        array(self.cluster_json(&["nodes"]), "nodes")
    }

    /// One task of `berth cluster ps`, by id.
    pub fn task(&self, id: &str) -> Option<Value> {
        self.ps().into_iter().find(|t| t["task"] == id)
    }

    /// `def` with `dockerLabels` `berth.test = <label>` in every container definition (labels it
    /// has are kept).
    pub fn labelled(&self, def: &Value) -> Value {
        let mut def = def.clone();
        let containers = def["containerDefinitions"]
            .as_array_mut()
            .unwrap_or_else(|| panic!("a task definition has containerDefinitions"));
        for c in containers {
            let labels = &mut c["dockerLabels"];
            if labels.is_null() {
                *labels = Value::Object(serde_json::Map::new());
            }
            labels[TEST_LABEL] = Value::String(self.label.clone());
        }
        def
    }

    /// Writes `def`, labelled ([`Fleet::labelled`]), to a file of the fleet's directory.
    pub fn definition_file(&self, def: &Value) -> PathBuf {
        let file = self
            .dir
            .path()
            .join(format!("{}.json", unique_name("def-")));
        std::fs::write(&file, self.labelled(def).to_string()).expect("write definition");
        file
    }

    /// `berth cluster submit` of `def` (labelled) with these extra arguments (`--count`,
    /// placement): the new tasks' ids.
    pub fn submit(&self, def: &Value, extra: &[&str]) -> Vec<String> {
        let file = self.definition_file(def);
        let mut args = vec!["submit", file.to_str().expect("UTF-8 path")];
        args.extend_from_slice(extra);
        ids(&self.cluster_json(&args))
    }

    /// The running containers of this fleet's tasks that carry every label in `labels` (e.g.
    /// `[("berth.node", "n1")]`, `[("berth.service", "web")]`; none: all of them).
    pub fn docker_running(&self, labels: &[(&str, &str)]) -> Vec<Running> {
        let mut args = vec![
            "ps".to_owned(),
            "-q".to_owned(),
            "--no-trunc".to_owned(),
            "--filter".to_owned(),
            "status=running".to_owned(),
            "--filter".to_owned(),
            format!("label={TEST_LABEL}={}", self.label),
        ];
        for (key, value) in labels {
            args.extend(["--filter".to_owned(), format!("label={key}={value}")]);
        }
        let out = Command::new("docker")
            .args(&args)
            .output()
            .expect("the cluster tests need the docker CLI");
        assert!(
            out.status.success(),
            "docker {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        if ids.is_empty() {
            return Vec::new();
        }
        // A container removed between the two calls is missing from inspect's answer (and
        // inspect exits 1): what it printed is still the others.
        let out = Command::new("docker")
            .arg("inspect")
            .args(&ids)
            .output()
            .expect("the cluster tests need the docker CLI");
        let found: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "docker inspect {ids:?}: not JSON ({e}): {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        found
            .iter()
            .filter(|c| c["State"]["Running"] == true)
            .map(|c| Running {
                id: c["Id"].as_str().unwrap_or_default().to_owned(),
                name: c["Name"]
                    .as_str()
                    .unwrap_or_default()
                    .trim_start_matches('/')
                    .to_owned(),
                labels: c["Config"]["Labels"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                            .collect()
                    })
                    .unwrap_or_default(),
            })
            .collect()
    }

    /// [`wait_until`], whose failure also shows the tail of every agent's and controller's log.
    pub fn wait_until<T>(
        &self,
        limit: Duration,
        what: &str,
        check: impl FnMut() -> Result<T, String>,
    ) -> T {
        wait_explained(limit, what, check, || self.logs())
    }

    /// The last 40 lines of every agent's and controller's log.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for (name, node) in &self.nodes {
            out.push_str(&format!(
                "--- agent of node {name}:\n{}\n",
                tail(&node.agent.log(), 40)
            ));
        }
        for (name, c) in &self.controllers {
            out.push_str(&format!("--- controller {name}:\n{}\n", tail(&c.log(), 40)));
        }
        out
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        // Nothing may start a container after the removal below: every process goes first.
        for node in self.nodes.values_mut() {
            node.agent.kill9();
        }
        for c in self.controllers.values_mut() {
            c.kill9();
        }
        remove_labelled_containers(TEST_LABEL, &self.label);
    }
}
