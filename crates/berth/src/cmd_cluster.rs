//! `berth cluster …`: the client of a berth cluster, talking to etcd through berth-cluster (this
//! module knows no key and no etcd call): `submit` writes pending tasks, `ps` lists tasks with
//! their node and status, `stop` marks one stopped, `nodes` the registered nodes with what is reserved on them, `drain`
//! asks for a node to take no new task (or no longer, `--undo`). Text tables for people,
//! `--output json` (one JSON document) for tools. See docs/cluster.md.

use crate::output::{Output, table};
use anyhow::{Context as _, bail};
use berth_cluster::record::{Constraint, DesiredStatus, Resources, Strategy, TaskRecord};
use berth_cluster::store::{Cluster, parse_endpoints};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

/// ECS RunTask's `count` limit.
pub const MAX_COUNT: u32 = 10;

#[derive(clap::Args, Debug, Clone)]
pub struct ConnArgs {
    /// The etcd cluster's client URLs, comma-separated: http://HOST:PORT[,http://HOST:PORT…].
    #[arg(long, env = "BERTH_ETCD", value_name = "ENDPOINTS")]
    pub etcd: String,
    /// `text` for people (tables), `json` for tools.
    #[arg(long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
}

#[derive(clap::Args, Debug)]
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
    /// List the cluster's tasks: node, desired and last status, reason.
    Ps {
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// List the registered nodes: capacity, what is reserved, tasks, draining, attributes.
    Nodes {
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// Stop a task: its desired status becomes STOPPED and its assignment is removed (a pending
    /// task is never placed).
    Stop {
        /// The task's id, or a prefix of it no other task's id starts with (the 12 characters
        /// `berth cluster ps` prints).
        task: String,
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// Drain a node: no new task is placed on it (--undo: it takes tasks again).
    Drain {
        node: String,
        #[arg(long)]
        undo: bool,
        #[command(flatten)]
        conn: ConnArgs,
    },
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(run_async(args.command))
}

/// Now, in milliseconds since the epoch, as the cluster records write it.
fn now_ms() -> u64 {
    u64::try_from(berth_engine::report::now_ms()).unwrap_or(0)
}

async fn connect(conn: &ConnArgs) -> anyhow::Result<Cluster> {
    let endpoints = parse_endpoints(&conn.etcd).map_err(anyhow::Error::msg)?;
    Ok(Cluster::connect(&endpoints).await?)
}

/// Reads a JSON array option; the error names the option and the JSON path.
fn json_option<T: serde::de::DeserializeOwned>(
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

fn print_json(v: &impl serde::Serialize) {
    println!("{}", serde_json::to_string(v).unwrap_or_default());
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
            if !(1..=MAX_COUNT).contains(&count) {
                bail!("--count: {count} is out of range; start 1 to {MAX_COUNT} tasks at a time");
            }
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
        ClusterCommand::Ps { conn } => {
            let cluster = connect(&conn).await?;
            let (tasks, _) = cluster.tasks().await?;
            let statuses: BTreeMap<String, _> = cluster
                .statuses()
                .await?
                .into_iter()
                .map(|(node, s)| (s.task.clone(), (node, s)))
                .collect();
            let mut tasks: Vec<TaskRecord> = tasks.into_iter().map(|t| t.value).collect();
            tasks.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
            let last = |t: &TaskRecord| -> String {
                match (&t.node, statuses.get(&t.id)) {
                    (Some(node), Some((at, s))) if at == node => s.last_status.clone(),
                    // No status from a node: what the cluster decided is all there is.
                    _ if t.desired_status == DesiredStatus::Stopped => "STOPPED".to_owned(),
                    (Some(_), _) => "PLACED".to_owned(),
                    (None, _) => "PENDING".to_owned(),
                }
            };
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
                                "node": t.node,
                                "desiredStatus": t.desired_status,
                                "lastStatus": last(t),
                                "reason": t.reason,
                                "cpu": t.demand.cpu,
                                "memoryMib": t.demand.memory_mib,
                            })
                        })
                        .collect();
                    print_json(&serde_json::json!({ "tasks": rows }));
                }
                Output::Text => {
                    let rows: Vec<[String; 6]> = tasks
                        .iter()
                        .map(|t| {
                            [
                                t.id.chars().take(12).collect(),
                                format!("{}:{}", t.definition.family, t.definition.revision),
                                t.node.clone().unwrap_or_else(|| "-".into()),
                                format!("{:?}", t.desired_status).to_uppercase(),
                                last(t),
                                t.reason.clone().unwrap_or_else(|| "-".into()),
                            ]
                        })
                        .collect();
                    print!(
                        "{}",
                        table(
                            &["TASK", "FAMILY", "NODE", "DESIRED", "LAST", "REASON"],
                            &rows
                        )
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        ClusterCommand::Nodes { conn } => {
            let cluster = connect(&conn).await?;
            let mut nodes = cluster.nodes().await?;
            nodes.sort_by(|a, b| a.name.cmp(&b.name));
            let drains: Vec<String> = cluster.drains().await?;
            let (tasks, _) = cluster.tasks().await?;
            let mut used: BTreeMap<String, (Resources, u64)> = BTreeMap::new();
            for t in tasks {
                if let (Some(node), DesiredStatus::Running) =
                    (&t.value.node, t.value.desired_status)
                {
                    let e = used.entry(node.clone()).or_default();
                    e.0 = e.0.saturating_add(t.value.demand);
                    e.1 += 1;
                }
            }
            let status = |name: &str| {
                if drains.iter().any(|d| d == name) {
                    "DRAINING"
                } else {
                    "ACTIVE"
                }
            };
            match conn.output {
                Output::Json => {
                    let rows: Vec<serde_json::Value> = nodes
                        .iter()
                        .map(|n| {
                            let (r, count) = used.get(&n.name).copied().unwrap_or_default();
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
                        .iter()
                        .map(|n| {
                            let (r, count) = used.get(&n.name).copied().unwrap_or_default();
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
        ClusterCommand::Stop { task, conn } => {
            let cluster = connect(&conn).await?;
            // A task changed between the read and the stop (the controller placed it) is read
            // again; a few rounds at most, since each change is a placement or a reason.
            for _ in 0..5 {
                let (tasks, _) = cluster.tasks().await?;
                let matches: Vec<_> = tasks
                    .into_iter()
                    .filter(|t| t.value.id.starts_with(&task))
                    .collect();
                let found = match matches.len() {
                    0 => bail!("no task {task:?} in the cluster (berth cluster ps lists them)"),
                    1 => &matches[0],
                    _ => bail!(
                        "task {task:?} is ambiguous: {} tasks start with it ({}); give more characters",
                        matches.len(),
                        matches
                            .iter()
                            .map(|t| t.value.id.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                };
                if found.value.desired_status == DesiredStatus::Stopped
                    || cluster
                        .stop(
                            found,
                            "Task stopped by user",
                            berth_cluster::record::StopCode::UserInitiated,
                            now_ms(),
                        )
                        .await?
                {
                    match conn.output {
                        Output::Json => print_json(
                            &serde_json::json!({ "task": found.value.id, "desiredStatus": "STOPPED" }),
                        ),
                        Output::Text => println!("{}: STOPPED", found.value.id),
                    }
                    return Ok(ExitCode::SUCCESS);
                }
            }
            bail!("task {task:?} kept changing while being stopped; try again")
        }
        ClusterCommand::Drain { node, undo, conn } => {
            berth_cluster::keys::check_name("node", &node).map_err(anyhow::Error::msg)?;
            let cluster = connect(&conn).await?;
            cluster.set_drain(&node, !undo, now_ms()).await?;
            match conn.output {
                Output::Json => print_json(&serde_json::json!({ "node": node, "draining": !undo })),
                Output::Text => println!("{node}: {}", if undo { "ACTIVE" } else { "DRAINING" }),
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
