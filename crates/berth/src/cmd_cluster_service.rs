//! `berth cluster service create|update|rm|ls`: ECS services (the REPLICA scheduler) on a berth
//! cluster. This module parses the options, checks them with ECS's rules and defaults
//! (berth-cluster's `service`: CreateService, UpdateService; DeleteService's refusal is here)
//! and writes the wanted state, a `ServiceRecord`, through berth-cluster's guarded transactions;
//! it starts and stops no task itself. The controller (`berth controller`) keeps each service at
//! its desired count, rolls its tasks over to a new deployment within the two percentages, and
//! deletes a removed (DRAINING) service once none of its tasks is left. `ls` reads the cluster
//! at one revision. See docs/cluster.md.

use crate::cmd_cluster::{ConnArgs, connect, json_option, print_json, warn_bad};
use crate::output::{Output, table};
use anyhow::bail;
use berth_cluster::now_ms;
use berth_cluster::record::{Constraint, ServiceRecord, ServiceStatus, Strategy};
use berth_cluster::service::{
    Change, DEFAULT_MAX, DEFAULT_MIN_HEALTHY, check_desired, check_percents, check_tasks,
    new_service, remove,
};
use berth_model::TaskDefinition;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// How many times `update` and `rm` read again when the record changed under them (the
/// controller writes it with every start).
const ROUNDS: usize = 5;

#[derive(clap::Subcommand, Debug)]
pub enum ServiceCommand {
    /// Create a service: the controller keeps DESIRED tasks of the definition running, placed
    /// like `berth cluster submit`'s (ECS CreateService, REPLICA scheduler).
    #[command(
        after_help = "Examples:\n  berth cluster service create web web.json --desired-count 3\n  berth cluster service create web web.json --desired-count 6 \\\n      --placement-constraints '[{\"type\":\"distinctInstance\"}]' \\\n      --placement-strategy '[{\"type\":\"spread\",\"field\":\"attribute:zone\"}]'\n  berth cluster service create batch batch.json --desired-count 4 \\\n      --minimum-healthy-percent 50 --maximum-percent 100\n\nThe name is 1 to 255 letters, digits, '-', '_' and '.'. During a rolling update (a new definition,\nnew placement, or --force-new-deployment on `update`) at least --minimum-healthy-percent of the\ndesired count stays RUNNING (and HEALTHY, when an essential container has a health check) and at\nmost --maximum-percent of it runs at once, old and new together."
    )]
    Create {
        /// The service's name (unique in the cluster).
        name: String,
        /// The task definition; `-` reads standard input.
        file: PathBuf,
        /// How many tasks to keep running (0 to 5000, ECS's tasks-per-service quota).
        #[arg(long, value_name = "N")]
        desired_count: u32,
        /// ECS placementConstraints, a JSON array, e.g. '[{"type":"distinctInstance"}]'.
        #[arg(long, value_name = "JSON")]
        placement_constraints: Option<String>,
        /// ECS placementStrategy, a JSON array (default: spread over instanceId), e.g.
        /// '[{"type":"binpack","field":"memory"}]'.
        #[arg(long, value_name = "JSON")]
        placement_strategy: Option<String>,
        /// During a rolling update, the share of the desired count that stays healthy
        /// (0 to 100, rounded up).
        #[arg(long, value_name = "PERCENT", default_value_t = DEFAULT_MIN_HEALTHY)]
        minimum_healthy_percent: u32,
        /// During a rolling update, the most tasks that run at once, old and new, as a share of
        /// the desired count (at least 100, and above --minimum-healthy-percent; rounded down).
        #[arg(long, value_name = "PERCENT", default_value_t = DEFAULT_MAX)]
        maximum_percent: u32,
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// Change a service: its definition, count, placement or percentages (ECS UpdateService).
    /// A new definition, new placement or --force-new-deployment starts a new deployment (the
    /// controller replaces the tasks); a count or percentage change alone keeps the deployment.
    #[command(
        after_help = "Examples:\n  berth cluster service update web --desired-count 5\n  berth cluster service update web --task-definition web-v2.json\n  berth cluster service update web --placement-constraints '[]'   # no constraints any more\n  berth cluster service update web --force-new-deployment          # replace every task\n  berth cluster service update web --desired-count 0                # then: service rm web\n\nOptions not given keep their value. A service being removed (DRAINING) cannot be updated."
    )]
    Update {
        /// The service's name.
        name: String,
        /// A new task definition; `-` reads standard input.
        #[arg(long, value_name = "FILE")]
        task_definition: Option<PathBuf>,
        /// How many tasks to keep running (0 to 5000).
        #[arg(long, value_name = "N")]
        desired_count: Option<u32>,
        /// During a rolling update, the share of the desired count that stays healthy (0 to 100).
        #[arg(long, value_name = "PERCENT")]
        minimum_healthy_percent: Option<u32>,
        /// During a rolling update, the most tasks that run at once as a share of the desired
        /// count (at least 100, above the minimum).
        #[arg(long, value_name = "PERCENT")]
        maximum_percent: Option<u32>,
        /// New ECS placementConstraints, a JSON array; '[]' removes them all.
        #[arg(long, value_name = "JSON")]
        placement_constraints: Option<String>,
        /// New ECS placementStrategy, a JSON array; '[]' goes back to the default spread.
        #[arg(long, value_name = "JSON")]
        placement_strategy: Option<String>,
        /// Start a new deployment even if nothing else changes: every task is replaced.
        #[arg(long)]
        force_new_deployment: bool,
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// Remove a service (ECS DeleteService): it becomes DRAINING, the controller stops its tasks
    /// and deletes it once none is left. Refused while its desired count is above 0, unless
    /// --force.
    #[command(
        after_help = "Examples:\n  berth cluster service update web --desired-count 0 && berth cluster service rm web\n  berth cluster service rm web --force"
    )]
    Rm {
        /// The service's name.
        name: String,
        /// Remove it even though its desired count is above 0 (its tasks are stopped).
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// List the services: status, desired, running and pending tasks, deployment, definition.
    #[command(
        after_help = "Examples:\n  berth cluster service ls\n  berth cluster service ls --output json\n\nRUNNING counts the service's tasks whose node reports them RUNNING; PENDING those not yet\nrunning (not placed, or placed and not yet reported RUNNING). Tasks asked to stop count until\ntheir node reports them stopped."
    )]
    Ls {
        #[command(flatten)]
        conn: ConnArgs,
    },
}

/// `family:revision`.
fn definition_name(def: &TaskDefinition) -> String {
    format!("{}:{}", def.family, def.revision)
}

/// A service as the commands print it in JSON (camelCase; ECS's names for its fields).
fn service_json(svc: &ServiceRecord) -> serde_json::Value {
    serde_json::json!({
        "service": svc.name,
        "status": svc.status,
        "desiredCount": svc.desired_count,
        "deployment": svc.deployment,
        "taskDefinition": definition_name(&svc.definition),
        "minimumHealthyPercent": svc.minimum_healthy_percent,
        "maximumPercent": svc.maximum_percent,
        "placementConstraints": svc.placement_constraints,
        "placementStrategy": svc.placement_strategy,
        "launched": svc.launched,
        "createdAtMs": svc.created_at_ms,
        "updatedAtMs": svc.updated_at_ms,
    })
}

/// Loads a definition file as `submit` does; the exit code of `input::load` when it is not valid
/// (its problems are printed).
fn load(file: &Path) -> Result<TaskDefinition, ExitCode> {
    // Each node applies its own log policy when it runs the task; here only the form.
    crate::input::load(file, &berth_model::logging::LogPolicy::default()).map(|p| p.definition)
}

/// A JSON array option that may be absent (absent: unchanged; `[]`: none).
fn json_update<T: serde::de::DeserializeOwned>(
    option: &str,
    text: Option<&str>,
) -> anyhow::Result<Option<Vec<T>>> {
    text.map(|t| json_option(option, Some(t))).transpose()
}

fn unknown(name: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "no service {name:?} in the cluster: `berth cluster service ls` lists them, `berth cluster service create` makes one"
    )
}

pub async fn run(cmd: ServiceCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        ServiceCommand::Create {
            name,
            file,
            desired_count,
            placement_constraints,
            placement_strategy,
            minimum_healthy_percent,
            maximum_percent,
            conn,
        } => {
            create(
                name,
                &file,
                desired_count,
                placement_constraints.as_deref(),
                placement_strategy.as_deref(),
                (minimum_healthy_percent, maximum_percent),
                &conn,
            )
            .await
        }
        ServiceCommand::Update {
            name,
            task_definition,
            desired_count,
            minimum_healthy_percent,
            maximum_percent,
            placement_constraints,
            placement_strategy,
            force_new_deployment,
            conn,
        } => {
            berth_cluster::keys::check_name("service", &name).map_err(anyhow::Error::msg)?;
            let change = Change {
                desired_count,
                minimum_healthy_percent,
                maximum_percent,
                placement_constraints: json_update(
                    "placement-constraints",
                    placement_constraints.as_deref(),
                )?,
                placement_strategy: json_update(
                    "placement-strategy",
                    placement_strategy.as_deref(),
                )?,
                definition: match task_definition {
                    Some(file) => match load(&file) {
                        Ok(d) => Some(d),
                        Err(code) => return Ok(code),
                    },
                    None => None,
                },
                force_new_deployment,
            };
            change.check()?;
            update(&name, &change, &conn).await
        }
        ServiceCommand::Rm { name, force, conn } => rm(&name, force, &conn).await,
        ServiceCommand::Ls { conn } => ls(&conn).await,
    }
}

async fn create(
    name: String,
    file: &Path,
    desired_count: u32,
    constraints: Option<&str>,
    strategy: Option<&str>,
    (min_healthy, max): (u32, u32),
    conn: &ConnArgs,
) -> anyhow::Result<ExitCode> {
    berth_cluster::keys::check_name("service", &name).map_err(anyhow::Error::msg)?;
    // The numbers first (what `check_record` checks), before any file or JSON is read.
    check_desired(desired_count)?;
    check_percents(min_healthy, max)?;
    let placement_constraints: Vec<Constraint> = json_option("placement-constraints", constraints)?;
    let placement_strategy: Vec<Strategy> = json_option("placement-strategy", strategy)?;
    let definition = match load(file) {
        Ok(d) => d,
        Err(code) => return Ok(code),
    };
    let svc = ServiceRecord {
        placement_constraints,
        placement_strategy,
        minimum_healthy_percent: min_healthy,
        maximum_percent: max,
        ..new_service(name, definition, desired_count, now_ms())
    };
    check_tasks(&svc)?;
    let cluster = connect(conn).await?;
    match cluster.create_service(&svc).await {
        Ok(_) => {}
        Err(berth_cluster::store::ClusterError::ServiceExists(_)) => {
            let existing = cluster.service(&svc.name).await.ok().flatten();
            if existing.is_some_and(|e| e.value.status == ServiceStatus::Draining) {
                bail!(
                    "service {:?} is still being removed (DRAINING): create it again once `berth cluster service ls` no longer lists it",
                    svc.name
                );
            }
            bail!(
                "service {:?} already exists: `berth cluster service update {}` changes it (definition, count, placement, percentages)",
                svc.name,
                svc.name
            );
        }
        Err(e) => return Err(e.into()),
    }
    match conn.output {
        Output::Json => print_json(&service_json(&svc)),
        Output::Text => println!(
            "{}: created, {} task(s) of {} (deployment {})",
            svc.name,
            svc.desired_count,
            definition_name(&svc.definition),
            svc.deployment
        ),
    }
    Ok(ExitCode::SUCCESS)
}

async fn update(name: &str, change: &Change, conn: &ConnArgs) -> anyhow::Result<ExitCode> {
    let cluster = connect(conn).await?;
    // The controller writes the record with every start (its `launched` count): a write that
    // lost to one reads again.
    for _ in 0..ROUNDS {
        let Some(read) = cluster.service(name).await? else {
            return Err(unknown(name));
        };
        let (new, redeploy) = change.apply(&read.value, now_ms())?;
        if cluster.update_service(&read, &new).await? {
            match conn.output {
                Output::Json => {
                    let mut v = service_json(&new);
                    v["newDeployment"] = redeploy.into();
                    print_json(&v);
                }
                Output::Text if redeploy => println!(
                    "{name}: updated, new deployment {} of {} (the controller replaces the tasks of {})",
                    new.deployment,
                    definition_name(&new.definition),
                    read.value.deployment
                ),
                Output::Text => println!(
                    "{name}: updated, deployment {} kept (desired count {}, minimum healthy {}%, maximum {}%)",
                    new.deployment,
                    new.desired_count,
                    new.minimum_healthy_percent,
                    new.maximum_percent
                ),
            }
            return Ok(ExitCode::SUCCESS);
        }
    }
    bail!("service {name:?} kept changing while being updated; try again")
}

async fn rm(name: &str, force: bool, conn: &ConnArgs) -> anyhow::Result<ExitCode> {
    berth_cluster::keys::check_name("service", name).map_err(anyhow::Error::msg)?;
    let cluster = connect(conn).await?;
    for _ in 0..ROUNDS {
        let Some(read) = cluster.service(name).await? else {
            return Err(unknown(name));
        };
        let removed = remove(&read.value, force, now_ms())?;
        let already = removed.is_none();
        let written = match &removed {
            None => true,
            Some(new) => cluster.update_service(&read, new).await?,
        };
        if written {
            match conn.output {
                Output::Json => print_json(&serde_json::json!({
                    "service": name,
                    "status": ServiceStatus::Draining,
                })),
                Output::Text if already => println!("{name}: DRAINING (already being removed)"),
                Output::Text => {
                    println!("{name}: DRAINING (the controller stops its tasks, then deletes it)")
                }
            }
            return Ok(ExitCode::SUCCESS);
        }
    }
    bail!("service {name:?} kept changing while being removed; try again")
}

async fn ls(conn: &ConnArgs) -> anyhow::Result<ExitCode> {
    let cluster = connect(conn).await?;
    let view = cluster.view().await?;
    warn_bad(&view, berth_cluster::keys::SERVICES);
    let services: Vec<(&ServiceRecord, (usize, usize))> = view
        .services
        .values()
        .map(|s| (&s.value, view.service_counts(&s.value.name)))
        .collect();
    match conn.output {
        Output::Json => {
            let rows: Vec<serde_json::Value> = services
                .iter()
                .map(|(svc, (running, pending))| {
                    let mut v = service_json(svc);
                    v["runningCount"] = (*running).into();
                    v["pendingCount"] = (*pending).into();
                    v
                })
                .collect();
            print_json(&serde_json::json!({ "services": rows }));
        }
        Output::Text => {
            let rows: Vec<[String; 7]> = services
                .iter()
                .map(|(svc, (running, pending))| {
                    [
                        svc.name.clone(),
                        match svc.status {
                            ServiceStatus::Active => "ACTIVE".to_owned(),
                            ServiceStatus::Draining => "DRAINING".to_owned(),
                        },
                        svc.desired_count.to_string(),
                        running.to_string(),
                        pending.to_string(),
                        svc.deployment.clone(),
                        definition_name(&svc.definition),
                    ]
                })
                .collect();
            print!(
                "{}",
                table(
                    &[
                        "NAME",
                        "STATUS",
                        "DESIRED",
                        "RUNNING",
                        "PENDING",
                        "DEPLOYMENT",
                        "TASK DEFINITION"
                    ],
                    &rows
                )
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
