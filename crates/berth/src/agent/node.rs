//! The agent as a cluster node (`berth agent --etcd ENDPOINTS --node NAME`, with the etcd options
//! of [`crate::etcd_args::EtcdArgs`]): its options, and its
//! side of berth-cluster's node loop ([`berth_cluster::node::Local`]) over the agent's task
//! table, actors and state store. The node loop (registration, lease, assignment watch, status
//! reports) is berth-cluster's; this module only runs tasks (through the agent's one
//! `Agent::accept`, as the control API's submit does, stored with their fence and revision), stops
//! and reports them, and keeps the node's memory in the state store (`berth_store::cluster`).
//!
//! A cluster task keeps its cluster id as its local id; its containers get the Docker labels
//! `berth.node=<node>` and, for a service's task, `berth.service=<service>` (the task's
//! `extra_labels`, set when it is accepted: on its containers as if in their `dockerLabels`, as
//! ECS adds its `com.amazonaws.ecs.*` labels). Submits through the control API are refused on a
//! node: placement only counts what the cluster placed.

use super::{Agent, Origin};
use anyhow::{anyhow, bail};
use berth_cluster::node::{self, Local, LocalStatus, Memory, NodeConfig};
use berth_cluster::record::{HealthStatus, LastStatus, Resources, TaskRecord as ClusterTask};
use berth_engine::{Command, Status};
use berth_store::StoreError;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// The Docker label naming the node a cluster task runs on.
pub const LABEL_NODE: &str = "berth.node";
/// The Docker label naming the service of a service's task.
pub const LABEL_SERVICE: &str = "berth.service";

#[derive(Debug, Clone, Default, clap::Args)]
pub struct NodeArgs {
    /// etcd (`--etcd` joins the cluster as a node, with --node), its TLS and user.
    #[command(flatten)]
    pub etcd: crate::etcd_args::EtcdArgs,

    /// This node's name in the cluster (letters, digits, '-', '_', '.'; the host name is a good
    /// one). A data directory serves one node name for good.
    #[arg(long, env = "BERTH_NODE", value_name = "NAME", requires = "etcd")]
    pub node: Option<String>,

    /// The node's lease: how long after the agent stops renewing it (crash, partition) the
    /// cluster counts the node as lost, closes its tasks and replaces its service tasks
    /// (whole seconds, at least 2s).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub node_lease_ttl: Duration,

    /// CPU units the node offers to tasks (1024 per core). Default: every core of the host.
    #[arg(long, value_name = "UNITS")]
    pub node_cpu: Option<u64>,

    /// Memory in MiB the node offers to tasks. Default: the host's total memory.
    #[arg(long, value_name = "MIB")]
    pub node_memory: Option<u64>,

    /// A node attribute for placement (a `memberOf` constraint `attribute:KEY == VALUE`, the
    /// strategy `spread` on `attribute:KEY`), repeatable. berth adds ECS's `ecs.os-type`, `ecs.os-family`,
    /// `ecs.cpu-architecture` and `ecs.availability-zone`.
    #[arg(
        long = "node-attribute",
        value_name = "KEY=VALUE",
        add = crate::config::Key::new().named("node-attributes")
    )]
    pub node_attributes: Vec<String>,

    /// How long a node that was lost (and comes back) waits for the tasks the cluster replaced
    /// meanwhile to stop, before it registers again.
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = humantime::parse_duration)]
    pub node_stop_wait: Duration,
}

/// The host's total memory in MiB, from /proc/meminfo.
fn host_memory_mib() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
}

impl NodeArgs {
    /// The endpoints and the node's configuration, or None when the agent is not a node. Every
    /// problem names its option.
    pub fn config(
        &self,
        identity: &berth_engine::Identity,
    ) -> anyhow::Result<Option<(berth_cluster::connect::Settings, NodeConfig)>> {
        let Some(name) = &self.node else {
            if self.etcd.etcd.is_some() {
                bail!("--etcd: an agent joins a cluster as a node: give --node NAME too");
            }
            return Ok(None);
        };
        let Some(endpoints) = self.etcd.settings()? else {
            return Ok(None);
        };
        berth_cluster::keys::check_name("node", name).map_err(|e| anyhow!("--node: {e}"))?;
        if self.node_lease_ttl < Duration::from_secs(2) {
            bail!(
                "--node-lease-ttl: {:?} is below 2s; etcd leases count whole seconds and need a second of headroom, e.g. 10s",
                self.node_lease_ttl
            );
        }
        let mut attributes = BTreeMap::new();
        for text in &self.node_attributes {
            let (k, v) = text.split_once('=').ok_or_else(|| {
                anyhow!("--node-attribute: {text:?} is not KEY=VALUE, e.g. zone=eu-1a")
            })?;
            berth_cluster::keys::check_attribute(k, v)
                .map_err(|e| anyhow!("--node-attribute: {e}"))?;
            attributes.insert(k.to_owned(), v.to_owned());
        }
        attributes.extend(node::builtin_attributes(&identity.availability_zone));
        let memory_mib = match self.node_memory {
            Some(m) => m,
            None => host_memory_mib().ok_or_else(|| {
                anyhow!("cannot read the host's memory from /proc/meminfo; give --node-memory MIB")
            })?,
        };
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let host = Resources::host(u64::try_from(cores).unwrap_or(u64::MAX), memory_mib);
        let cpu = self.node_cpu.unwrap_or(host.cpu);
        Ok(Some((
            endpoints,
            NodeConfig {
                name: name.clone(),
                capacity: Resources { cpu, memory_mib },
                attributes,
                version: env!("CARGO_PKG_VERSION").to_owned(),
                lease_ttl: self.node_lease_ttl,
                stop_wait: self.node_stop_wait,
            },
        )))
    }
}

/// The agent as a node's local side.
pub struct Node {
    pub(super) agent: Arc<Agent>,
    pub(super) name: String,
    /// Bumped whenever a cluster task's snapshot changes (the status reporter waits on it).
    pub(super) changes: watch::Sender<u64>,
}

impl Node {
    /// Sends a stop to the task's actor, if it still has one.
    async fn ask_stop(&self, id: &str, reason: &str) {
        let sender = self.agent.tasks().get(id).map(|e| e.commands.clone());
        if let Some(sender) = sender {
            let _ = sender
                .send(Command::Stop {
                    reason: reason.to_owned(),
                })
                .await;
        }
    }
}

impl Local for Node {
    type Error = berth_store::StoreError;

    async fn memory(&self) -> Result<Memory, StoreError> {
        let m = self.agent.store.cluster_memory()?;
        Ok(Memory {
            lease: m.lease,
            revision: m.revision,
            accepted: m.accepted,
        })
    }

    async fn run(
        &self,
        task: ClusterTask,
        fence: i64,
        revision: i64,
        stop: Option<String>,
    ) -> Result<(), StoreError> {
        let definition = task.definition;
        // The node's labels on every container (as ECS adds its own), as the task's extra labels.
        let mut labels = BTreeMap::from([(LABEL_NODE.to_owned(), self.name.clone())]);
        if let Some(service) = &task.service {
            labels.insert(LABEL_SERVICE.to_owned(), service.clone());
        }
        // Accepted as a submit is (this host's log drivers applied, the warnings to the log),
        // stored with its fence and the revision in one transaction.
        let origin = Origin::Cluster {
            fence,
            revision,
            stop,
            labels,
        };
        let accepted = self.agent.accept(definition, task.id, origin).await?;
        for w in &accepted.warnings {
            tracing::warn!(task = %accepted.id, "{w}");
        }
        tracing::info!(task = %accepted.id, fence, "accepted an assignment");
        Ok(())
    }

    async fn stop(&self, id: &str, reason: &str) {
        self.ask_stop(id, reason).await;
    }

    async fn release(&self, id: &str, revision: i64, reason: &str) -> Result<(), StoreError> {
        let running = self
            .agent
            .snapshot(id)
            .is_some_and(|s| s.known() != Status::Stopped);
        if running {
            tracing::warn!(task = %id, "its assignment is gone: stopping it");
            self.ask_stop(id, reason).await;
        }
        self.agent.store.release_cluster_task(id, revision)?;
        // The accepted set changed: the reporter removes its status.
        self.changes.send_modify(|n| *n += 1);
        Ok(())
    }

    async fn seen(&self, revision: i64) -> Result<(), StoreError> {
        self.agent.store.save_cluster_revision(revision)
    }

    async fn save_lease(&self, lease: i64) -> Result<(), StoreError> {
        self.agent.store.save_cluster_lease(lease)
    }

    async fn settled(&self, ids: &[String]) {
        for id in ids {
            let rx = self.agent.tasks().get(id).map(|e| e.snapshot.clone());
            if let Some(mut rx) = rx {
                let _ = rx.wait_for(|s| s.known() == Status::Stopped).await;
            }
        }
    }

    fn statuses(&self) -> BTreeMap<String, (i64, LocalStatus)> {
        let accepted = match self.agent.store.cluster_memory() {
            Ok(m) => m.accepted,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the accepted assignments");
                return BTreeMap::new();
            }
        };
        accepted
            .into_iter()
            .map(|(id, fence)| {
                let status = match self.agent.snapshot(&id) {
                    Some(s) => LocalStatus::of(&s),
                    // Cleaned up here before the cluster closed it (the controller was away for
                    // the whole cleanup wait): it stopped, and its reason is gone with it.
                    None => LocalStatus {
                        last_status: LastStatus::Stopped,
                        health_status: HealthStatus::Unknown,
                        stopped_reason: Some(
                            "Task stopped; its record was cleaned up on the node".into(),
                        ),
                        failed_to_start: false,
                    },
                };
                (id, (fence, status))
            })
            .collect()
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}
