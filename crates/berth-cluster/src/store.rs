//! The etcd client side of berth: one [`Cluster`] connection (etcd-client over the given
//! endpoints, balanced; every unary call under [`CALL_TIMEOUT`] so a lost member or a partition
//! is an error in seconds, never a hang), and the operations the CLI, node agents and the
//! controller perform, each one etcd request:
//!
//! - nodes: a lease ([`Cluster::grant`], [`Cluster::keep_alive`]) and the node record under it
//!   ([`Cluster::put_node`]); drain requests;
//! - tasks: [`Cluster::submit`] (put only if absent), [`Cluster::tasks`] (with each key's
//!   `mod_revision`), [`Cluster::place`] (one transaction: the task unchanged since it was read →
//!   the task with its node and the assignment under that node), [`Cluster::set_reason`],
//!   [`Cluster::stop`] (desired STOPPED and the assignment deleted, guarded the same way);
//! - assignments and statuses, read per node.
//!
//! What etcd guarantees and berth relies on: linearizable reads and writes (etcd's default),
//! a transaction's comparisons and writes are atomic, and a lease's keys go together when it
//! expires. Nothing here retries on its own: the caller's loop does, with the next read.

use crate::keys;
use crate::record::{
    self, Assignment, DecodeError, DrainRecord, NodeRecord, StatusRecord, TaskRecord,
};
use etcd_client::{Client, Compare, CompareOp, ConnectOptions, GetOptions, PutOptions, Txn, TxnOp};
use std::future::Future;
use std::time::Duration;

/// The longest any single etcd call may take before it is an error.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// What can go wrong talking to etcd.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("etcd at {endpoints}: {source}")]
    Etcd {
        endpoints: String,
        #[source]
        source: etcd_client::Error,
    },
    #[error("etcd at {endpoints}: no answer within {CALL_TIMEOUT:?} ({what})")]
    Timeout {
        endpoints: String,
        what: &'static str,
    },
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error("task {0} already exists")]
    Exists(String),
}

/// Reads `--etcd`: comma-separated `http://host:port` URLs (at least one). The error names the
/// option and says what a good value looks like.
pub fn parse_endpoints(text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let rest = part.strip_prefix("http://").ok_or_else(|| {
            format!(
                "--etcd: {part:?} is not an etcd client URL; write http://HOST:PORT[,http://HOST:PORT…] (berth speaks plain HTTP to etcd)"
            )
        })?;
        let (host, port) = rest.trim_end_matches('/').rsplit_once(':').ok_or_else(|| {
            format!("--etcd: {part:?} has no port; write http://HOST:PORT (etcd's default is 2379)")
        })?;
        if host.is_empty() || port.parse::<u16>().is_err() {
            return Err(format!("--etcd: {part:?} is not http://HOST:PORT"));
        }
        out.push(part.trim_end_matches('/').to_owned());
    }
    if out.is_empty() {
        return Err("--etcd: no etcd endpoint given; write http://HOST:PORT[,…]".to_owned());
    }
    Ok(out)
}

/// Whether the call failed before reaching any member (a refused or failed TCP connect).
fn not_sent(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(s) => {
            s.code() == tonic::Code::Unavailable && s.message().contains("connect")
        }
        etcd_client::Error::TransportError(_) => true,
        _ => false,
    }
}

/// A connection to the etcd cluster.
#[derive(Clone)]
pub struct Cluster {
    client: Client,
    endpoints: String,
}

/// A value with the revision etcd last changed it at.
#[derive(Debug, Clone, PartialEq)]
pub struct Versioned<T> {
    pub value: T,
    pub mod_revision: i64,
}

impl Cluster {
    /// Connects (lazily per endpoint: a member that is down now is tried again later by the
    /// balanced channel).
    pub async fn connect(endpoints: &[String]) -> Result<Cluster, ClusterError> {
        let joined = endpoints.join(",");
        let options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2))
            .with_keep_alive_while_idle(true);
        let client = tokio::time::timeout(CALL_TIMEOUT, Client::connect(endpoints, Some(options)))
            .await
            .map_err(|_| ClusterError::Timeout {
                endpoints: joined.clone(),
                what: "connect",
            })?
            .map_err(|source| ClusterError::Etcd {
                endpoints: joined.clone(),
                source,
            })?;
        Ok(Cluster {
            client,
            endpoints: joined,
        })
    }

    /// The endpoints, as given.
    pub fn endpoints(&self) -> &str {
        &self.endpoints
    }

    /// Runs one etcd call under [`CALL_TIMEOUT`]. A call that failed to *connect* (the balanced
    /// channel picked a member that is down: the request never left) is tried again until the
    /// timeout, so a lost member costs a retry, not an error; any other failure is returned as it
    /// is, since the request may have been applied.
    async fn call<T, F, Fut>(&self, what: &'static str, mut f: F) -> Result<T, ClusterError>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let deadline = tokio::time::Instant::now() + CALL_TIMEOUT;
        loop {
            match tokio::time::timeout_at(deadline, f(self.client.clone())).await {
                Err(_) => {
                    return Err(ClusterError::Timeout {
                        endpoints: self.endpoints.clone(),
                        what,
                    });
                }
                Ok(Err(e)) if not_sent(&e) && tokio::time::Instant::now() < deadline => {
                    tracing::debug!(what, error = %e, "etcd call not sent; trying another member");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Ok(r) => {
                    return r.map_err(|source| ClusterError::Etcd {
                        endpoints: self.endpoints.clone(),
                        source,
                    });
                }
            }
        }
    }

    async fn txn(
        &self,
        what: &'static str,
        txn: Txn,
    ) -> Result<etcd_client::TxnResponse, ClusterError> {
        self.call(what, |mut c| {
            let txn = txn.clone();
            async move { c.txn(txn).await }
        })
        .await
    }

    /// The etcd client itself, for the calls this module does not wrap (watches, elections).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// A new lease of `ttl` seconds; its id.
    pub async fn grant(&self, ttl: i64) -> Result<i64, ClusterError> {
        let resp = self
            .call("lease grant", |mut c| async move {
                c.lease_grant(ttl, None).await
            })
            .await?;
        Ok(resp.id())
    }

    /// Renews a lease once; the TTL left (0 or less: the lease is gone and must be granted anew).
    pub async fn keep_alive(&self, lease: i64) -> Result<i64, ClusterError> {
        let renewed = self
            .call("lease keep-alive", |mut c| async move {
                let (mut keeper, mut stream) = c.lease_keep_alive(lease).await?;
                keeper.keep_alive().await?;
                Ok(stream.message().await?.map_or(0, |r| r.ttl()))
            })
            .await;
        match renewed {
            // etcd answers a keep-alive of an expired or revoked lease with TTL 0, which the
            // client reports as an error: it is an answer, the lease is gone.
            Err(ClusterError::Etcd {
                source: etcd_client::Error::LeaseKeepAliveError(m),
                ..
            }) if m.contains("not found") => Ok(0),
            other => other,
        }
    }

    /// Revokes a lease: its node record and statuses disappear at once.
    pub async fn revoke(&self, lease: i64) -> Result<(), ClusterError> {
        self.call("lease revoke", |mut c| async move {
            c.lease_revoke(lease).await
        })
        .await?;
        Ok(())
    }

    /// Writes the node record under its lease.
    pub async fn put_node(&self, node: &NodeRecord) -> Result<(), ClusterError> {
        let (key, value, lease) = (keys::node(&node.name), record::encode(node), node.lease);
        self.call("put node", |mut c| {
            let (key, value) = (key.clone(), value.clone());
            async move {
                c.put(key, value, Some(PutOptions::new().with_lease(lease)))
                    .await
            }
        })
        .await?;
        Ok(())
    }

    async fn list<T: serde::de::DeserializeOwned>(
        &self,
        prefix: &str,
        what: &'static str,
    ) -> Result<(Vec<(String, Versioned<T>)>, i64), ClusterError> {
        let resp = self
            .call("get", |mut c| async move {
                c.get(prefix, Some(GetOptions::new().with_prefix())).await
            })
            .await?;
        let revision = resp.header().map_or(0, |h| h.revision());
        let mut out = Vec::with_capacity(resp.kvs().len());
        for kv in resp.kvs() {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            let value = record::decode(&key, what, kv.value())?;
            out.push((
                key,
                Versioned {
                    value,
                    mod_revision: kv.mod_revision(),
                },
            ));
        }
        Ok((out, revision))
    }

    /// Every registered node (live leases only: an expired node's record is gone).
    pub async fn nodes(&self) -> Result<Vec<NodeRecord>, ClusterError> {
        let (list, _) = self.list::<NodeRecord>(keys::NODES, "node record").await?;
        Ok(list.into_iter().map(|(_, v)| v.value).collect())
    }

    /// The names of the nodes asked to drain.
    pub async fn drains(&self) -> Result<Vec<String>, ClusterError> {
        let (list, _) = self
            .list::<DrainRecord>(keys::DRAIN, "drain record")
            .await?;
        Ok(list
            .into_iter()
            .filter_map(|(k, _)| keys::leaf(keys::DRAIN, &k).map(str::to_owned))
            .collect())
    }

    /// Asks for a node to be drained (or no longer, with `on == false`).
    pub async fn set_drain(&self, node: &str, on: bool, now_ms: u64) -> Result<(), ClusterError> {
        let key = keys::drain(node);
        if on {
            let value = record::encode(&DrainRecord {
                requested_at_ms: now_ms,
            });
            self.call("put drain", |mut c| {
                let (key, value) = (key.clone(), value.clone());
                async move { c.put(key, value, None).await }
            })
            .await?;
        } else {
            self.call("delete drain", |mut c| {
                let key = key.clone();
                async move { c.delete(key, None).await }
            })
            .await?;
        }
        Ok(())
    }

    /// Writes a new task; [`ClusterError::Exists`] when its id is taken (never overwrites).
    pub async fn submit(&self, task: &TaskRecord) -> Result<i64, ClusterError> {
        let key = keys::task(&task.id);
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, record::encode(task), None)]);
        let resp = self.txn("submit", txn).await?;
        if !resp.succeeded() {
            return Err(ClusterError::Exists(task.id.clone()));
        }
        Ok(resp.header().map_or(0, |h| h.revision()))
    }

    /// Every task with its `mod_revision`, and the store's revision of the read.
    pub async fn tasks(&self) -> Result<(Vec<Versioned<TaskRecord>>, i64), ClusterError> {
        let (list, revision) = self.list::<TaskRecord>(keys::TASKS, "task record").await?;
        Ok((list.into_iter().map(|(_, v)| v).collect(), revision))
    }

    /// Places a task read at `read.mod_revision` on `node`, in one transaction: if the task key
    /// is unchanged, the task gets its node and the assignment `/berth/assign/<node>/<id>` is
    /// written with that revision as its fence. False when the task changed meanwhile (another
    /// controller, a stop): nothing was written, and the caller reads again.
    pub async fn place(
        &self,
        read: &Versioned<TaskRecord>,
        node: &str,
    ) -> Result<bool, ClusterError> {
        let mut task = read.value.clone();
        task.node = Some(node.to_owned());
        task.reason = None;
        let assignment = Assignment {
            task: task.id.clone(),
            fence: read.mod_revision,
        };
        let key = keys::task(&task.id);
        let txn = Txn::new()
            .when([Compare::mod_revision(
                key.clone(),
                CompareOp::Equal,
                read.mod_revision,
            )])
            .and_then([
                TxnOp::put(key, record::encode(&task), None),
                TxnOp::put(
                    keys::assign(node, &task.id),
                    record::encode(&assignment),
                    None,
                ),
            ]);
        Ok(self.txn("place", txn).await?.succeeded())
    }

    /// Records why a pending task is not placed, if the task is unchanged and the reason is new.
    pub async fn set_reason(
        &self,
        read: &Versioned<TaskRecord>,
        reason: &str,
    ) -> Result<bool, ClusterError> {
        if read.value.reason.as_deref() == Some(reason) {
            return Ok(true);
        }
        let mut task = read.value.clone();
        task.reason = Some(reason.to_owned());
        let key = keys::task(&task.id);
        let txn = Txn::new()
            .when([Compare::mod_revision(
                key.clone(),
                CompareOp::Equal,
                read.mod_revision,
            )])
            .and_then([TxnOp::put(key, record::encode(&task), None)]);
        Ok(self.txn("set reason", txn).await?.succeeded())
    }

    /// Sets a task's desired status to STOPPED with `reason` and deletes its assignment (its node's
    /// agent stops its copy when the assignment goes), in one transaction guarded like
    /// [`Cluster::place`]. False when the task changed since it was read.
    pub async fn stop(
        &self,
        read: &Versioned<TaskRecord>,
        reason: &str,
    ) -> Result<bool, ClusterError> {
        let mut task = read.value.clone();
        task.desired_status = crate::record::DesiredStatus::Stopped;
        task.reason = Some(reason.to_owned());
        let key = keys::task(&task.id);
        let mut ops = vec![TxnOp::put(key.clone(), record::encode(&task), None)];
        if let Some(node) = &read.value.node {
            ops.push(TxnOp::delete(keys::assign(node, &task.id), None));
        }
        let txn = Txn::new()
            .when([Compare::mod_revision(
                key,
                CompareOp::Equal,
                read.mod_revision,
            )])
            .and_then(ops);
        Ok(self.txn("stop", txn).await?.succeeded())
    }

    /// The assignments of one node, and the revision of the read (where its watch resumes).
    pub async fn assignments(&self, node: &str) -> Result<(Vec<Assignment>, i64), ClusterError> {
        let (list, revision) = self
            .list::<Assignment>(&keys::assign_prefix(node), "assignment")
            .await?;
        Ok((list.into_iter().map(|(_, v)| v.value).collect(), revision))
    }

    /// Every reported status, as `(node, status)`.
    pub async fn statuses(&self) -> Result<Vec<(String, StatusRecord)>, ClusterError> {
        let (list, _) = self
            .list::<StatusRecord>(keys::STATUS, "task status")
            .await?;
        Ok(list
            .into_iter()
            .filter_map(|(k, v)| {
                keys::node_and_task(keys::STATUS, &k).map(|(node, _)| (node.to_owned(), v.value))
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::parse_endpoints;

    #[test]
    fn endpoints_are_read_and_refused_with_the_option_name() {
        assert_eq!(
            parse_endpoints("http://127.0.0.1:2379, http://10.0.0.2:2379/").unwrap(),
            ["http://127.0.0.1:2379", "http://10.0.0.2:2379"]
        );
        for (bad, wanted) in [
            ("127.0.0.1:2379", "is not an etcd client URL"),
            ("https://a:1", "is not an etcd client URL"),
            ("http://a", "has no port"),
            ("http://a:port", "is not http://HOST:PORT"),
            ("", "no etcd endpoint"),
        ] {
            let err = parse_endpoints(bad).unwrap_err();
            assert!(err.starts_with("--etcd: "), "{err}");
            assert!(err.contains(wanted), "{bad}: {err}");
        }
    }
}
