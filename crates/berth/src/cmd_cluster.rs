//! `berth cluster …`: the client of a berth cluster, talking to etcd through berth-cluster (this
//! module knows no key and no etcd call): `submit` writes pending tasks, `ps` lists tasks with
//! their node, service and status, `nodes` the registered nodes with what is reserved on them
//! (both from one read of the whole cluster at one revision), `stop` asks a task to stop,
//! `drain` asks for a node to take no new task (or no longer, `--undo`; refused for a node that
//! is not registered), `node rm` removes a node that left (its tasks closed, its records
//! deleted; refused while its lease lives unless `--force`); `service` is
//! [`crate::cmd_cluster_service`]; `auth-setup` prints the etcdctl commands of berth's etcd roles
//! (berth-cluster's `connect::setup_commands`). Every command that connects takes
//! [`crate::etcd_args::EtcdArgs`]. Text tables for people, `--output json` (one JSON document)
//! for tools. See docs/cluster.md.

use crate::output::{Output, table};
use anyhow::{Context as _, bail};
use berth_cluster::record::{
    Constraint, DesiredStatus, LastStatus, Resources, Strategy, TaskRecord,
};
use berth_cluster::store::{Cluster, Versioned};
use berth_cluster::view::ClusterView;
use berth_cluster::{now_ms, run_task};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug, Clone)]
pub struct ConnArgs {
    #[command(flatten)]
    pub etcd: crate::etcd_args::EtcdArgs,
    /// `text` for people (tables), `json` for tools.
    #[arg(long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
}

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  export BERTH_ETCD=http://10.0.0.1:2379,http://10.0.0.2:2379,http://10.0.0.3:2379\n  berth cluster submit task.json --count 3\n  berth cluster ps\n  berth cluster stop 0123abcd4567\n  berth cluster service create web web.json --desired-count 3\n  berth cluster service ls\n  berth cluster nodes\n  berth cluster drain ip-10-0-0-7\n\nTasks are started, placed, replaced and closed by `berth controller` (one leads); every\ncommand here only reads the cluster or writes what is wanted. See docs/cluster.md."
)]
pub struct Args {
    #[command(subcommand)]
    pub command: ClusterCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum ClusterCommand {
    /// Submit a task definition to the cluster: COUNT pending tasks, placed by the controller
    /// (prints their ids).
    Submit {
        /// The task definition; `-` reads standard input.
        file: PathBuf,
        /// How many tasks to start (1 to 10, as ECS RunTask's count).
        #[arg(long, default_value_t = 1)]
        count: u32,
        /// ECS placementConstraints, a JSON array, e.g.
        /// '[{"type":"memberOf","expression":"attribute:zone == a"},{"type":"distinctInstance"}]'.
        #[arg(long, value_name = "JSON")]
        placement_constraints: Option<String>,
        /// ECS placementStrategy, a JSON array, e.g. '[{"type":"binpack","field":"memory"}]'.
        #[arg(long, value_name = "JSON")]
        placement_strategy: Option<String>,
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// List the cluster's tasks: family, service, node, desired and last status, reason.
    #[command(
        after_help = "LAST is ECS's lastStatus as the cluster knows it: PENDING (not placed yet; REASON says\nwhy), PROVISIONING (placed, its node has reported nothing yet), what its node reports\n(PENDING, RUNNING, STOPPED), or STOPPED once the controller has closed it (REASON says why).\nStopped tasks stay listed for the controller's --stopped-retention (1h)."
    )]
    Ps {
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// List the registered nodes: capacity, what is reserved (every task on the node that is
    /// not yet closed), tasks, draining, attributes.
    Nodes {
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// Stop a task (ECS StopTask): desired status STOPPED. A placed task is STOPPING until its
    /// node stops it and reports; a pending one is STOPPED at once and never placed.
    #[command(
        after_help = "Examples:\n  berth cluster stop 0123abcd4567\n  berth cluster stop 0123abcd4567 --output json\n\nA service's task that is stopped is replaced by the controller, as ECS's scheduler does."
    )]
    Stop {
        /// The task's id, or a prefix of it no other task's id starts with (the 12 characters
        /// `berth cluster ps` prints).
        task: String,
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// Services (ECS REPLICA services): create, update, rm, ls.
    Service {
        #[command(subcommand)]
        command: crate::cmd_cluster_service::ServiceCommand,
    },
    /// Print the etcdctl commands that set up etcd's authentication for berth: a root user,
    /// the roles `berth-controller`, `berth-operator` and `berth-node-NODE` (one per node) with
    /// the key prefixes each may read and write, a user per role, and `auth enable`. Connects to
    /// nothing.
    #[command(
        name = "auth-setup",
        after_help = "Examples:\n  berth cluster auth-setup --node ip-10-0-0-7 --node ip-10-0-0-8 \\\n    --etcdctl 'etcdctl --endpoints https://10.0.0.1:2379 --cacert ca.pem'\n\netcdctl asks each user's password. Run them against an etcd served with TLS; see\ndocs/cluster.md, \"Security model\"."
    )]
    AuthSetup {
        /// A node of the cluster (repeatable): it gets a role and user of its own.
        #[arg(long = "node", value_name = "NAME", add = crate::config::Key::command_line_only())]
        nodes: Vec<String>,
        /// The etcdctl command with its connection options, as each printed line starts.
        #[arg(long, value_name = "COMMAND", default_value = "etcdctl", add = crate::config::Key::command_line_only())]
        etcdctl: String,
    },
    /// Drain a node: no new task is placed on it (--undo: it takes tasks again). Refused for a
    /// node that is not registered.
    Drain {
        node: String,
        #[arg(long)]
        undo: bool,
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// Nodes: rm.
    Node {
        #[command(subcommand)]
        command: NodeCommand,
    },
}

#[derive(clap::Subcommand, Debug)]
pub enum NodeCommand {
    /// Remove a node that left for good (ECS DeregisterContainerInstance): its tasks are closed
    /// (STOPPED; a service's are replaced elsewhere), its drain record and assignments deleted.
    /// Refused while the node's agent runs (its lease is alive) unless --force.
    #[command(after_help = "Examples:
  berth cluster node rm ip-10-0-0-7
  berth cluster node rm ip-10-0-0-7 --force

A node whose agent stopped is lost once its lease expires (--node-lease-ttl): the controller
closes its tasks then, but its drain record and assignments stay until `node rm`. Containers
still running on that host are not stopped by the cluster: start its agent again (it stops
the tasks the cluster closed) or remove them there. With --force on a live node, its lease is
revoked: its agent stops the node's tasks and registers again as a new, empty node (stop the
agent to keep it out).")]
    Rm {
        node: String,
        /// Remove it although its agent renews its lease (the lease is revoked).
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        conn: ConnArgs,
    },
}

/// The reason the tasks of a removed node are closed with.
pub fn removed_reason(node: &str) -> String {
    format!("Node {node} was removed from the cluster (berth cluster node rm)")
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(run_async(args.command))
}

pub(crate) async fn connect(conn: &ConnArgs) -> anyhow::Result<Cluster> {
    Ok(Cluster::open(&conn.etcd.required()?).await?)
}

/// Reads a JSON array option; the error names the option and the JSON path.
pub(crate) fn json_option<T: serde::de::DeserializeOwned>(
    option: &str,
    text: Option<&str>,
) -> anyhow::Result<Vec<T>> {
    let Some(text) = text else {
        return Ok(Vec::new());
    };
    serde_json::from_str(text).map_err(|e| {
        anyhow::anyhow!(
            "--{option}: {e}; write a JSON array of ECS objects, e.g. {}",
            if option == "placement-constraints" {
                r#"'[{"type":"memberOf","expression":"attribute:zone == a"}]'"#
            } else {
                r#"'[{"type":"spread","field":"instanceId"}]'"#
            }
        )
    })
}

pub(crate) fn print_json(v: &impl serde::Serialize) {
    println!("{}", serde_json::to_string(v).unwrap_or_default());
}

/// Says on standard error which records under `prefix` could not be read (another writer put
/// something else there): they are left out of what is listed.
pub(crate) fn warn_bad(view: &ClusterView, prefix: &str) {
    for (key, why) in view.bad.range(prefix.to_owned()..) {
        if !key.starts_with(prefix) {
            break;
        }
        eprintln!("berth: warning: left out: {why}");
    }
}

async fn run_async(cmd: ClusterCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        ClusterCommand::Submit {
            file,
            count,
            placement_constraints,
            placement_strategy,
            conn,
        } => {
            berth_cluster::run_task::check_count(count)?;
            let constraints: Vec<Constraint> =
                json_option("placement-constraints", placement_constraints.as_deref())?;
            let strategy: Vec<Strategy> =
                json_option("placement-strategy", placement_strategy.as_deref())?;
            // Each node applies its own log policy when it runs the task; here only the form.
            let parsed =
                match crate::input::load(&file, &berth_model::logging::LogPolicy::default()) {
                    Ok(p) => p,
                    Err(code) => return Ok(code),
                };
            let now = now_ms();
            let mut records = Vec::new();
            for _ in 0..count {
                let record = TaskRecord::pending(
                    berth_engine::new_task_id(),
                    parsed.definition.clone(),
                    constraints.clone(),
                    strategy.clone(),
                    now,
                )
                .map_err(anyhow::Error::msg)?;
                records.push(record);
            }
            let cluster = connect(&conn).await?;
            let mut ids = Vec::new();
            for r in &records {
                cluster.submit(r).await?;
                ids.push(r.id.clone());
            }
            match conn.output {
                Output::Json => print_json(&serde_json::json!({ "tasks": ids })),
                Output::Text => {
                    for id in &ids {
                        println!("{id}");
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        ClusterCommand::Ps { conn } => ps(&conn).await,
        ClusterCommand::Nodes { conn } => nodes(&conn).await,
        ClusterCommand::Stop { task, conn } => stop(&task, &conn).await,
        ClusterCommand::Service { command } => crate::cmd_cluster_service::run(command).await,
        ClusterCommand::AuthSetup { nodes, etcdctl } => {
            for node in &nodes {
                berth_cluster::keys::check_name("node", node)
                    .map_err(|e| anyhow::anyhow!("--node: {e}"))?;
            }
            for line in berth_cluster::connect::setup_commands(&etcdctl, &nodes) {
                println!("{line}");
            }
            Ok(ExitCode::SUCCESS)
        }
        ClusterCommand::Node {
            command: NodeCommand::Rm { node, force, conn },
        } => remove_node(&node, force, &conn).await,
        ClusterCommand::Drain { node, undo, conn } => {
            berth_cluster::keys::check_name("node", &node).map_err(anyhow::Error::msg)?;
            let cluster = connect(&conn).await?;
            if !cluster.drain_node(&node, !undo, now_ms()).await? {
                bail!("no node {node}; `berth cluster nodes` lists them");
            }
            match conn.output {
                Output::Json => print_json(&serde_json::json!({ "node": node, "draining": !undo })),
                Output::Text => println!("{node}: {}", if undo { "ACTIVE" } else { "DRAINING" }),
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn remove_node(node: &str, force: bool, conn: &ConnArgs) -> anyhow::Result<ExitCode> {
    use berth_cluster::txns::NodeRemoval;
    berth_cluster::keys::check_name("node", node).map_err(anyhow::Error::msg)?;
    let cluster = connect(conn).await?;
    match cluster
        .remove_node(node, force, &removed_reason(node), now_ms())
        .await?
    {
        NodeRemoval::NoSuchNode => bail!("no node {node}; `berth cluster nodes` lists them"),
        NodeRemoval::Alive { lease } => bail!(
            "node {node} is alive: its agent renews its lease ({lease:x}); stop that agent first (the node is lost once its lease expires), or give --force to remove it anyway (its agent then stops the node's tasks and registers again as a new node)"
        ),
        NodeRemoval::Removed {
            was_alive,
            was_draining,
            closed,
        } => {
            match conn.output {
                Output::Json => print_json(&serde_json::json!({
                    "node": node,
                    "removed": true,
                    "wasRegistered": was_alive,
                    "wasDraining": was_draining,
                    "stoppedTasks": closed,
                })),
                Output::Text => {
                    println!("{node}: removed ({} task(s) stopped)", closed.len());
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The cluster's tasks, oldest first.
fn by_age(view: &ClusterView) -> Vec<&TaskRecord> {
    let mut tasks: Vec<&TaskRecord> = view.tasks.values().map(|t| &t.value).collect();
    tasks.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
    tasks
}

async fn ps(conn: &ConnArgs) -> anyhow::Result<ExitCode> {
    let cluster = connect(conn).await?;
    let view = cluster.view().await?;
    warn_bad(&view, berth_cluster::keys::TASKS);
    let tasks = by_age(&view);
    match conn.output {
        Output::Json => {
            let rows: Vec<serde_json::Value> = tasks
                .iter()
                .map(|t| {
                    serde_json::json!({
                        "task": t.id,
                        "family": t.definition.family,
                        "revision": t.definition.revision,
                        "group": t.group,
                        "service": t.service,
                        "startedBy": t.started_by,
                        "node": t.node,
                        "desiredStatus": t.desired_status,
                        "lastStatus": view.last_status(t),
                        "healthStatus": view.status_of(t).map(|s| s.health_status),
                        "reason": t.reason,
                        "stopCode": t.stop_code,
                        "stoppedAtMs": t.stopped_at_ms,
                        "cpu": t.demand.cpu,
                        "memoryMib": t.demand.memory_mib,
                    })
                })
                .collect();
            print_json(&serde_json::json!({ "tasks": rows }));
        }
        Output::Text => {
            let rows: Vec<[String; 7]> = tasks
                .iter()
                .map(|t| {
                    [
                        t.id.chars().take(12).collect(),
                        format!("{}:{}", t.definition.family, t.definition.revision),
                        t.service.clone().unwrap_or_else(|| "-".into()),
                        t.node.clone().unwrap_or_else(|| "-".into()),
                        t.desired_status.as_str().to_owned(),
                        view.last_status(t).to_string(),
                        t.reason.clone().unwrap_or_else(|| "-".into()),
                    ]
                })
                .collect();
            print!(
                "{}",
                table(
                    &[
                        "TASK", "FAMILY", "SERVICE", "NODE", "DESIRED", "LAST", "REASON"
                    ],
                    &rows
                )
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn nodes(conn: &ConnArgs) -> anyhow::Result<ExitCode> {
    let cluster = connect(conn).await?;
    let view = cluster.view().await?;
    warn_bad(&view, berth_cluster::keys::NODES);
    // Every task on a node that the controller has not closed reserves its demand there (a
    // task asked to stop still runs until its node reports it stopped).
    let mut used: BTreeMap<&str, (Resources, u64)> = BTreeMap::new();
    for t in view.tasks.values().map(|t| &t.value) {
        if let (Some(node), false) = (&t.node, t.is_closed()) {
            let e = used.entry(node.as_str()).or_default();
            e.0 = e.0.saturating_add(t.demand);
            e.1 += 1;
        }
    }
    let status = |name: &str| {
        if view.drains.contains(name) {
            "DRAINING"
        } else {
            "ACTIVE"
        }
    };
    let nodes = view.nodes.values();
    match conn.output {
        Output::Json => {
            let rows: Vec<serde_json::Value> = nodes
                .map(|n| {
                    let (r, count) = used.get(n.name.as_str()).copied().unwrap_or_default();
                    serde_json::json!({
                        "node": n.name,
                        "status": status(&n.name),
                        "capacity": n.capacity,
                        "reserved": r,
                        "tasks": count,
                        "attributes": n.attributes,
                        "version": n.version,
                    })
                })
                .collect();
            print_json(&serde_json::json!({ "nodes": rows }));
        }
        Output::Text => {
            let rows: Vec<[String; 6]> = nodes
                .map(|n| {
                    let (r, count) = used.get(n.name.as_str()).copied().unwrap_or_default();
                    [
                        n.name.clone(),
                        status(&n.name).to_owned(),
                        format!("{}/{}", r.cpu, n.capacity.cpu),
                        format!("{}/{}", r.memory_mib, n.capacity.memory_mib),
                        count.to_string(),
                        n.attributes
                            .iter()
                            .map(|(k, v)| format!("{k}={v}"))
                            .collect::<Vec<_>>()
                            .join(","),
                    ]
                })
                .collect();
            print!(
                "{}",
                table(
                    &[
                        "NODE",
                        "STATUS",
                        "CPU",
                        "MEMORY(MiB)",
                        "TASKS",
                        "ATTRIBUTES"
                    ],
                    &rows
                )
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The one task whose id starts with `prefix`; the error says none or which several.
fn find<'a>(view: &'a ClusterView, prefix: &str) -> anyhow::Result<&'a Versioned<TaskRecord>> {
    let matches: Vec<&Versioned<TaskRecord>> = view
        .tasks
        .range(prefix.to_owned()..)
        .take_while(|(id, _)| id.starts_with(prefix))
        .map(|(_, t)| t)
        .collect();
    match matches.as_slice() {
        [] => bail!("no task {prefix:?} in the cluster (berth cluster ps lists them)"),
        [one] => Ok(one),
        many => bail!(
            "task {prefix:?} is ambiguous: {} tasks start with it ({}); give more characters",
            many.len(),
            many.iter()
                .map(|t| t.value.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

async fn stop(task: &str, conn: &ConnArgs) -> anyhow::Result<ExitCode> {
    if task.is_empty() {
        bail!("TASK: give a task id, or the first characters of one (berth cluster ps lists them)");
    }
    let cluster = connect(conn).await?;
    // A task changed between the read and the stop (the controller placed it, or closed it)
    // is read again; a few rounds at most.
    for _ in 0..5 {
        let view = cluster.view().await?;
        let found = find(&view, task)?;
        let t = &found.value;
        let done = t.desired_status == DesiredStatus::Stopped
            || cluster
                .stop(
                    found,
                    run_task::USER_STOP_REASON,
                    run_task::USER_STOP_CODE,
                    now_ms(),
                )
                .await?;
        if !done {
            continue;
        }
        // A pending task is closed by the stop itself; a placed one runs until its node stops
        // it and reports (its last status is what the node last said).
        let closed = t.is_closed() || t.node.is_none();
        let last = if closed {
            LastStatus::Stopped
        } else {
            view.last_status(t)
        };
        match conn.output {
            Output::Json => print_json(&serde_json::json!({
                "task": t.id,
                "desiredStatus": DesiredStatus::Stopped,
                "lastStatus": last,
            })),
            Output::Text => println!("{}: {}", t.id, if closed { "STOPPED" } else { "STOPPING" }),
        }
        return Ok(ExitCode::SUCCESS);
    }
    bail!("task {task:?} kept changing while being stopped; try again")
}
