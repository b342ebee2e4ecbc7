//! The etcd client side of berth: one [`Cluster`] connection (etcd-client over the given
//! endpoints, balanced, requiring a leader; every attempt of a unary call under
//! [`CALL_TIMEOUT`], attempts within [`RETRY_WINDOW`] while a leader is elected, so a lost
//! member or a partition is an error in seconds, never a hang), and the reads and plain writes:
//!
//! - leases ([`Cluster::grant`], [`Cluster::keep_alive`], [`Cluster::revoke`],
//!   [`Cluster::lease_ttl`]) and node records under them ([`Cluster::register_node`]: only a
//!   free name or one the same lease holds; [`Cluster::put_node`]); drain requests;
//! - [`Cluster::view`]: every prefix at one revision, in pages ([`crate::view::ClusterView`]);
//!   [`Cluster::watch`] ([`Watch`]: changes in order, progress answers, compaction reported);
//! - one task ([`Cluster::task`]), a node's assignments, statuses written in batches under the
//!   node's lease and deleted ([`Cluster::put_statuses`], [`Cluster::delete_statuses`]);
//!   [`Cluster::compact`].
//!
//! The guarded transactions that change tasks and services are in [`crate::txns`].
//!
//! What etcd guarantees and berth relies on: linearizable reads and writes (etcd's default),
//! a transaction's comparisons and writes are atomic, a lease's keys go together when it
//! expires, and a watch delivers every change after its start revision in order. Nothing here
//! retries on its own beyond a call that never reached a member: the caller's loop does, with
//! the next read.

use crate::connect::Settings;
use crate::keys;
use crate::record::{self, Assignment, DecodeError, DrainRecord, NodeRecord, StatusRecord};
use crate::view::ClusterView;
use etcd_client::{
    Client, ConnectOptions, EventType, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    WatchOptions,
};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// The longest one attempt of an etcd call may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest a call is tried again while etcd elects a leader (its election timeout is about
/// a second; a proposal lost with a dead leader is answered by nothing).
pub const RETRY_WINDOW: Duration = Duration::from_secs(15);

/// What can go wrong talking to etcd.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("etcd at {endpoints}: {error}")]
    Etcd {
        endpoints: String,
        // Not the error's `source()`: its text is already in this one's (a chain printed with
        // `{:#}` would say it twice).
        error: etcd_client::Error,
    },
    #[error(
        "etcd at {endpoints}: no member answered in time ({what}); is etcd running, and reachable from here?"
    )]
    Timeout {
        endpoints: String,
        what: &'static str,
    },
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error("task {0} already exists")]
    Exists(String),
    #[error("service {0} already exists")]
    ServiceExists(String),
    /// A watch started at a revision etcd has compacted away: read everything again.
    #[error(
        "etcd at {endpoints}: revision {from} is compacted (the oldest kept is {compacted}); a full read is needed"
    )]
    Compacted {
        endpoints: String,
        from: i64,
        compacted: i64,
    },
    /// The watch stream ended or was cancelled (a member lost, the connection cut).
    #[error("etcd at {endpoints}: the watch ended ({why})")]
    WatchEnded { endpoints: String, why: String },
    /// The connection's options or files are wrong ([`crate::connect::Settings::load`]).
    #[error("{0}")]
    Settings(String),
    /// etcd refused access: authentication off, a wrong password, no credentials, a permission
    /// the user's role lacks ([`crate::connect::explain`] says which, and what to do).
    #[error("etcd at {endpoints} refused {what}: {error}; {hint}")]
    Denied {
        endpoints: String,
        what: &'static str,
        error: etcd_client::Error,
        hint: String,
    },
}

/// The largest answer berth takes from etcd (tonic's default is 4 MiB, which a view of a few
/// thousand tasks reaches).
pub const MAX_ANSWER: usize = 256 * 1024 * 1024;

/// Keys per page when a prefix is read ([`Cluster::view`]); every page at the same revision.
pub const PAGE: i64 = 2000;

/// Reads `--etcd`: comma-separated `https://host:port` (or, with `--etcd-insecure`,
/// `http://host:port`) URLs, at least one. The error names the option and says what a good value
/// looks like.
pub fn parse_endpoints(text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let rest = part
            .strip_prefix("https://")
            .or_else(|| part.strip_prefix("http://"))
            .ok_or_else(|| {
                format!(
                    "--etcd: {part:?} is not an etcd client URL; write https://HOST:PORT[,https://HOST:PORT…]"
                )
            })?;
        let (host, port) = rest.trim_end_matches('/').rsplit_once(':').ok_or_else(|| {
            format!("--etcd: {part:?} has no port; write http://HOST:PORT (etcd's default is 2379)")
        })?;
        if host.is_empty() || port.parse::<u16>().is_err() {
            return Err(format!("--etcd: {part:?} is not https://HOST:PORT"));
        }
        out.push(part.trim_end_matches('/').to_owned());
    }
    if out.is_empty() {
        return Err("--etcd: no etcd endpoint given; write https://HOST:PORT[,…]".to_owned());
    }
    Ok(out)
}

/// Whether a failed call may be sent again: the transport failed (a member down or its
/// connection lost: the balanced channel tries another member next), or etcd said its leader is
/// gone or changed under the request (`no leader`, `leader changed`, `request timed out`: an
/// election settles it). etcd's own refusals (a bad request, a compacted revision, a lease not
/// found, a full quota) are answers, returned as they are.
pub(crate) fn retriable(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(s) => {
            let m = s.message();
            let election = m.contains("no leader")
                || m.contains("leader changed")
                || m.contains("request timed out");
            election
                || matches!(
                    s.code(),
                    tonic::Code::Unavailable
                        | tonic::Code::Cancelled
                        | tonic::Code::DeadlineExceeded
                )
                || (s.code() == tonic::Code::Unknown
                    && (m.contains("transport")
                        || m.contains("h2 protocol")
                        || m.contains("connection")))
        }
        etcd_client::Error::TransportError(_) => true,
        _ => false,
    }
}

/// A connection to the etcd cluster.
#[derive(Clone)]
pub struct Cluster {
    /// One client per endpoint, in the order given.
    clients: Arc<Vec<Client>>,
    /// The member calls go to (an index into `clients`).
    current: Arc<AtomicUsize>,
    endpoints: String,
    /// Whether any call has been answered: until one has, a failure is retried only within
    /// [`CALL_TIMEOUT`] (wrong endpoints, or etcd not started, fail fast), afterwards within
    /// [`RETRY_WINDOW`] (a member lost, an election).
    answered: Arc<AtomicBool>,
    /// The etcd user and password (`--etcd-user`), None without authentication.
    user: Option<Arc<(String, String)>>,
    /// Per member: whether its client holds a token of `user` (authenticated lazily, before the
    /// first call that goes to it, and again when etcd says the token is no longer valid: a
    /// simple token expires on a member that has not seen it used for a while).
    authenticated: Arc<Vec<AtomicBool>>,
}

/// Whether etcd refused a call because the token it carried is unknown or expired there
/// (authenticating again mends it).
fn stale_token(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s) if s.message().contains("invalid auth token"))
}

/// A value with the revision etcd last changed it at.
#[derive(Debug, Clone, PartialEq)]
pub struct Versioned<T> {
    pub value: T,
    pub mod_revision: i64,
}

impl Cluster {
    /// Connects: one client per endpoint (each connects lazily, so a member that is down now is
    /// tried again later), and calls go to one member at a time, the next one after a failure
    /// (as etcd's own Go client pins an endpoint). A balanced channel over all of them keeps
    /// choosing a member that is down: it fails at once, so it always looks least loaded.
    ///
    /// Plain HTTP, no user: [`Cluster::open`] connects with the options' TLS and user.
    pub async fn connect(endpoints: &[String]) -> Result<Cluster, ClusterError> {
        Cluster::open(&Settings::insecure(endpoints.to_vec())).await
    }

    /// Connects as [`Cluster::connect`] does, with `settings`' TLS (CA, client certificate) and
    /// user (authenticated with each member before its first call). Does not apply
    /// [`Settings::check`]'s rule: the caller does, and logs its warnings.
    pub async fn open(settings: &Settings) -> Result<Cluster, ClusterError> {
        let endpoints = &settings.endpoints;
        let credentials = settings.load().map_err(ClusterError::Settings)?;
        let joined = endpoints.join(",");
        let mut options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2))
            .with_keep_alive_while_idle(true)
            // A member cut off from the others answers nothing (a watch on it is cancelled)
            // rather than serving what it had when it lost the leader.
            .with_require_leader(true);
        if let Some(tls) = credentials.tls {
            options = options.with_tls(tls);
        }
        let mut clients = Vec::with_capacity(endpoints.len());
        for endpoint in endpoints {
            let client = tokio::time::timeout(
                CALL_TIMEOUT,
                Client::connect([endpoint], Some(options.clone())),
            )
            .await
            .map_err(|_| ClusterError::Timeout {
                endpoints: joined.clone(),
                what: "connect",
            })?
            .map_err(|source| ClusterError::Etcd {
                endpoints: joined.clone(),
                error: source,
            })?;
            clients.push(client);
        }
        if clients.is_empty() {
            return Err(ClusterError::Timeout {
                endpoints: joined,
                what: "connect (no endpoint)",
            });
        }
        // Spread processes over the members from the start.
        let first = usize::try_from(std::process::id()).unwrap_or(0) % clients.len();
        Ok(Cluster {
            authenticated: Arc::new(clients.iter().map(|_| AtomicBool::new(false)).collect()),
            clients: Arc::new(clients),
            current: Arc::new(AtomicUsize::new(first)),
            endpoints: joined,
            answered: Arc::new(AtomicBool::new(false)),
            user: credentials.user.map(Arc::new),
        })
    }

    /// The error of a call etcd answered with `error`: [`ClusterError::Denied`] when it refused
    /// access.
    fn refused(&self, what: &'static str, error: etcd_client::Error) -> ClusterError {
        match crate::connect::explain(&error, self.user.as_ref().map(|u| u.0.as_str())) {
            Some(hint) => ClusterError::Denied {
                endpoints: self.endpoints.clone(),
                what,
                error,
                hint,
            },
            None => ClusterError::Etcd {
                endpoints: self.endpoints.clone(),
                error,
            },
        }
    }

    /// Authenticates member `member`'s client when a user is set and it holds no token yet.
    async fn authenticate(&self, member: usize, client: &Client) -> Result<(), etcd_client::Error> {
        let Some(user) = &self.user else {
            return Ok(());
        };
        if self.authenticated[member].load(Ordering::Relaxed) {
            return Ok(());
        }
        // The clone shares the client's token: calls through either carry the new one.
        client
            .clone()
            .update_user(Some((user.0.clone(), user.1.clone())))
            .await?;
        self.authenticated[member].store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Makes sure the member calls go to now holds a token (for the calls this module does not
    /// wrap: the election's campaign).
    pub(crate) async fn authenticated(&self) -> Result<(), ClusterError> {
        self.call("authenticate", |_| async {
            Ok::<(), etcd_client::Error>(())
        })
        .await
    }

    /// The member calls go to now, and its client.
    fn pinned(&self) -> (usize, Client) {
        let i = self.current.load(Ordering::Relaxed) % self.clients.len();
        (i, self.clients[i].clone())
    }

    /// Moves calls from member `from` to the next one (unless another call already moved them).
    pub(crate) fn fail_over(&self, from: usize) {
        let next = (from + 1) % self.clients.len();
        let _ = self
            .current
            .compare_exchange(from, next, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// The endpoints, as given.
    pub fn endpoints(&self) -> &str {
        &self.endpoints
    }

    /// Runs one etcd call: each attempt under [`CALL_TIMEOUT`], attempts within
    /// [`RETRY_WINDOW`]. Tried again: an attempt etcd did not answer in time (a leader died with
    /// the proposal), and one that failed in a way [`retriable`] says another attempt can mend
    /// (a member down, a connection lost, an election under way; until etcd has answered this
    /// connection once, only within [`CALL_TIMEOUT`]). Every berth call is safe to
    /// repeat: reads and plain puts are idempotent, a guarded transaction that already applied
    /// fails its guard the second time (submit and service creation recognise their own
    /// write), and a lease granted twice leaves one to expire unused. etcd's refusals are
    /// returned at once; an etcd that stays unreachable is an error at the end of the window.
    async fn call<T, F, Fut>(&self, what: &'static str, mut f: F) -> Result<T, ClusterError>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let started = tokio::time::Instant::now();
        // No answer in time: something listens (an election is under way), so try for the whole
        // window. A failure before etcd ever answered this connection (wrong endpoints, etcd not
        // started): only within one call timeout.
        let window = started + RETRY_WINDOW;
        let mut failing = if self.answered.load(Ordering::Relaxed) {
            window
        } else {
            started + CALL_TIMEOUT
        };
        loop {
            let now = tokio::time::Instant::now();
            let attempt = (now + CALL_TIMEOUT).min(window.max(now + Duration::from_millis(1)));
            let (member, client) = self.pinned();
            let run = async {
                self.authenticate(member, &client).await?;
                f(client).await
            };
            match tokio::time::timeout_at(attempt, run).await {
                Err(_) if tokio::time::Instant::now() + Duration::from_millis(100) < window => {
                    tracing::debug!(what, "no answer from etcd in time; trying the next member");
                    self.fail_over(member);
                    // Something listens: failures from here on get the whole window too.
                    failing = window;
                }
                Err(_) => {
                    return Err(ClusterError::Timeout {
                        endpoints: self.endpoints.clone(),
                        what,
                    });
                }
                Ok(Err(e)) if stale_token(&e) && tokio::time::Instant::now() < window => {
                    tracing::debug!(
                        what,
                        member,
                        "etcd no longer knows this client's token; authenticating again"
                    );
                    self.authenticated[member].store(false, Ordering::Relaxed);
                }
                Ok(Err(e)) if retriable(&e) && tokio::time::Instant::now() < failing => {
                    tracing::debug!(what, error = %e, "etcd call failed; trying the next member");
                    self.fail_over(member);
                    // A pause once every member has been tried.
                    if (member + 1) % self.clients.len() == 0 {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
                Ok(r) => {
                    if r.is_ok() {
                        self.answered.store(true, Ordering::Relaxed);
                    }
                    return r.map_err(|source| self.refused(what, source));
                }
            }
        }
    }

    pub(crate) async fn txn(
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

    /// The client of the member calls go to now, for the calls this module does not wrap (the
    /// election's campaign), with its index for [`Cluster::fail_over`].
    pub(crate) fn client(&self) -> (usize, Client) {
        self.pinned()
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
                error: etcd_client::Error::LeaseKeepAliveError(m),
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

    /// Deletes one key (none there is fine).
    pub(crate) async fn delete_key(
        &self,
        what: &'static str,
        key: Vec<u8>,
    ) -> Result<(), ClusterError> {
        if key.is_empty() {
            return Ok(());
        }
        self.call(what, |mut c| {
            let key = key.clone();
            async move { c.delete(key, None).await }
        })
        .await?;
        Ok(())
    }

    /// The record of node `name`, None when it is not registered (its lease expired, or it
    /// never was).
    pub async fn node(&self, name: &str) -> Result<Option<NodeRecord>, ClusterError> {
        Ok(self
            .get::<NodeRecord>(&keys::node(name), "node record")
            .await?
            .map(|v| v.value))
    }

    /// Registers a node: its record is written under its lease only if the name is free (no
    /// record) or already held by that same lease (the agent that registered it, resuming).
    /// `Err(holder)`: another lease holds the name (another agent runs as this node); nothing
    /// was written. A record that cannot be read counts as held by no one's lease.
    pub async fn register_node(
        &self,
        node: &NodeRecord,
    ) -> Result<Result<(), NodeRecord>, ClusterError> {
        let (key, value) = (keys::node(&node.name), record::encode(node));
        // Free: etcd compares a missing key as a record of no lease (0); a node record always
        // has one. Mine: the same lease. A record that changes between the two comparisons
        // (gone, or mine) is compared again, a few rounds.
        for _ in 0..5 {
            for lease in [0, node.lease] {
                let txn = Txn::new()
                    .when([etcd_client::Compare::lease(
                        key.clone(),
                        etcd_client::CompareOp::Equal,
                        lease,
                    )])
                    .and_then([TxnOp::put(
                        key.clone(),
                        value.clone(),
                        Some(PutOptions::new().with_lease(node.lease)),
                    )])
                    .or_else([TxnOp::get(key.clone(), None)]);
                let resp = self.txn("register node", txn).await?;
                if resp.succeeded() {
                    return Ok(Ok(()));
                }
                let holder = resp.op_responses().into_iter().find_map(|r| match r {
                    etcd_client::TxnOpResponse::Get(g) => g.kvs().first().map(|kv| {
                        let mut holder =
                            record::decode::<NodeRecord>(&key, "node record", kv.value())
                                .unwrap_or_else(|_| NodeRecord {
                                    name: node.name.clone(),
                                    capacity: crate::record::Resources::default(),
                                    attributes: std::collections::BTreeMap::new(),
                                    version: "?".to_owned(),
                                    registered_at_ms: 0,
                                    lease: kv.lease(),
                                });
                        holder.lease = kv.lease();
                        holder
                    }),
                    _ => None,
                });
                if let Some(h) = holder.filter(|h| h.lease != node.lease) {
                    return Ok(Err(h));
                }
            }
        }
        Err(ClusterError::Timeout {
            endpoints: self.endpoints.clone(),
            what: "register node (its record kept changing)",
        })
    }

    /// The TTL a lease was granted with and the seconds it has left, in whole seconds; None
    /// when etcd no longer has it.
    pub async fn lease_ttl(&self, lease: i64) -> Result<Option<(i64, i64)>, ClusterError> {
        let resp = self
            .call("lease time-to-live", |mut c| async move {
                c.lease_time_to_live(lease, None).await
            })
            .await?;
        Ok((resp.ttl() > 0).then(|| (resp.granted_ttl(), resp.ttl())))
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

    pub(crate) async fn list<T: serde::de::DeserializeOwned>(
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

    /// The assignments of one node, and the revision of the read (where its watch resumes).
    pub async fn assignments(&self, node: &str) -> Result<(Vec<Assignment>, i64), ClusterError> {
        let (list, revision) = self
            .list::<Assignment>(&keys::assign_prefix(node), "assignment")
            .await?;
        Ok((list.into_iter().map(|(_, v)| v.value).collect(), revision))
    }

    /// One page of `prefix` from `after` (exclusive; None: from the start), read at `revision`
    /// (0: now). Returns the key-values, the header's revision (the store's revision when the
    /// page was read: with `revision` 0, the revision the page shows) and whether more follow.
    async fn page(
        &self,
        prefix: &str,
        after: Option<&[u8]>,
        revision: i64,
    ) -> Result<(Vec<etcd_client::KeyValue>, i64, bool), ClusterError> {
        let mut end = prefix.as_bytes().to_vec();
        // The prefix's range end: its last byte plus one (every berth prefix ends with '/').
        if let Some(last) = end.last_mut() {
            *last += 1;
        }
        let start = match after {
            Some(k) => {
                let mut k = k.to_vec();
                k.push(0);
                k
            }
            None => prefix.as_bytes().to_vec(),
        };
        let mut options = GetOptions::new()
            .with_range(end)
            .with_limit(PAGE)
            .with_sort(SortTarget::Key, SortOrder::Ascend);
        if revision > 0 {
            options = options.with_revision(revision);
        }
        let resp = self
            .call("get", |c| {
                let (start, options) = (start.clone(), options.clone());
                async move {
                    c.kv_client()
                        .max_decoding_message_size(MAX_ANSWER)
                        .get(start, Some(options))
                        .await
                }
            })
            .await?;
        let at = resp.header().map_or(revision, |h| h.revision());
        Ok((resp.kvs().to_vec(), at, resp.more()))
    }

    /// The whole cluster at one revision ([`ClusterView`]): nodes, drains, tasks, statuses and
    /// services, each prefix read in pages of [`PAGE`] keys at the revision of the first page.
    pub async fn view(&self) -> Result<ClusterView, ClusterError> {
        let mut view = ClusterView::default();
        let mut revision = 0;
        for prefix in [
            keys::NODES,
            keys::DRAIN,
            keys::TASKS,
            keys::STATUS,
            keys::SERVICES,
        ] {
            let mut after: Option<Vec<u8>> = None;
            loop {
                let (kvs, at, more) = self.page(prefix, after.as_deref(), revision).await?;
                // The first page fixes the revision; a read at an older revision answers with
                // the store's current one in its header, which must not move it.
                if revision == 0 {
                    revision = at;
                }
                for kv in &kvs {
                    view.put(
                        &String::from_utf8_lossy(kv.key()),
                        kv.value(),
                        kv.mod_revision(),
                    );
                }
                match kvs.last() {
                    Some(last) if more => after = Some(last.key().to_vec()),
                    _ => break,
                }
            }
        }
        view.revision = revision;
        Ok(view)
    }

    /// Watches every key under `prefix` from `from_revision` (inclusive).
    pub async fn watch(&self, prefix: &str, from_revision: i64) -> Result<Watch, ClusterError> {
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(from_revision);
        let stream = self
            .call("watch", |c| {
                let options = options.clone();
                async move {
                    c.watch_client()
                        .max_decoding_message_size(MAX_ANSWER)
                        .watch(prefix, Some(options))
                        .await
                }
            })
            .await?;
        Ok(Watch {
            stream,
            from: from_revision,
            endpoints: self.endpoints.clone(),
        })
    }

    /// One task with its `mod_revision`, None when there is no such task.
    pub async fn task(
        &self,
        id: &str,
    ) -> Result<Option<Versioned<crate::record::TaskRecord>>, ClusterError> {
        self.get(&keys::task(id), "task record").await
    }

    /// The value of one key with its `mod_revision`, None when the key is absent; `what` names
    /// the record kind in a decode error.
    pub(crate) async fn get<T: serde::de::DeserializeOwned>(
        &self,
        key: &str,
        what: &'static str,
    ) -> Result<Option<Versioned<T>>, ClusterError> {
        let resp = self
            .call("get", |mut c| {
                let key = key.to_owned();
                async move { c.get(key, None).await }
            })
            .await?;
        match resp.kvs().first() {
            None => Ok(None),
            Some(kv) => Ok(Some(Versioned {
                value: record::decode(key, what, kv.value())?,
                mod_revision: kv.mod_revision(),
            })),
        }
    }

    /// Writes statuses of `node`'s tasks under its lease, in transactions of at most
    /// [`crate::txns::MAX_OPS`] puts; the revision of the last one.
    pub async fn put_statuses(
        &self,
        node: &str,
        lease: i64,
        statuses: &[StatusRecord],
    ) -> Result<i64, ClusterError> {
        let mut revision = 0;
        for chunk in statuses.chunks(crate::txns::MAX_OPS) {
            let ops: Vec<TxnOp> = chunk
                .iter()
                .map(|st| {
                    TxnOp::put(
                        keys::status(node, &st.task),
                        record::encode(st),
                        Some(PutOptions::new().with_lease(lease)),
                    )
                })
                .collect();
            let resp = self.txn("put statuses", Txn::new().and_then(ops)).await?;
            revision = resp.header().map_or(revision, |h| h.revision());
        }
        Ok(revision)
    }

    /// How many keys there are under `prefix`.
    pub async fn count(&self, prefix: &str) -> Result<i64, ClusterError> {
        let resp = self
            .call("count", |mut c| async move {
                c.get(
                    prefix,
                    Some(GetOptions::new().with_prefix().with_count_only()),
                )
                .await
            })
            .await?;
        Ok(resp.count())
    }

    /// Compacts etcd's history up to `revision` (watches from an older revision are refused
    /// afterwards); for tests of the resync path and for operators.
    pub async fn compact(&self, revision: i64) -> Result<(), ClusterError> {
        self.call(
            "compact",
            |mut c| async move { c.compact(revision, None).await },
        )
        .await?;
        Ok(())
    }

    /// Deletes statuses of `node`'s tasks (their assignments are gone).
    pub async fn delete_statuses(&self, node: &str, ids: &[String]) -> Result<(), ClusterError> {
        for chunk in ids.chunks(crate::txns::MAX_OPS) {
            let ops: Vec<TxnOp> = chunk
                .iter()
                .map(|id| TxnOp::delete(keys::status(node, id), None))
                .collect();
            self.txn("delete statuses", Txn::new().and_then(ops))
                .await?;
        }
        Ok(())
    }
}

/// One change under a watched prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    Put {
        key: String,
        value: Vec<u8>,
        mod_revision: i64,
    },
    Delete {
        key: String,
        revision: i64,
    },
}

impl WatchEvent {
    /// The key it changed.
    pub fn key(&self) -> &str {
        match self {
            WatchEvent::Put { key, .. } | WatchEvent::Delete { key, .. } => key,
        }
    }
    /// The revision of the change.
    pub fn revision(&self) -> i64 {
        match self {
            WatchEvent::Put { mod_revision, .. } => *mod_revision,
            WatchEvent::Delete { revision, .. } => *revision,
        }
    }
}

/// A watch on one prefix ([`Cluster::watch`]).
pub struct Watch {
    stream: etcd_client::WatchStream,
    from: i64,
    endpoints: String,
}

impl Watch {
    /// The next changes, in revision order, and the revision the watcher has seen everything up
    /// to (the last change's, or the store's revision of a progress answer). Empty changes are a
    /// progress answer. [`ClusterError::Compacted`] when etcd no longer has the start revision;
    /// [`ClusterError::WatchEnded`] when the stream ends or fails.
    pub async fn next(&mut self) -> Result<(Vec<WatchEvent>, i64), ClusterError> {
        loop {
            let msg = self
                .stream
                .message()
                .await
                .map_err(|e| ClusterError::WatchEnded {
                    endpoints: self.endpoints.clone(),
                    why: e.to_string(),
                })?;
            let Some(resp) = msg else {
                return Err(ClusterError::WatchEnded {
                    endpoints: self.endpoints.clone(),
                    why: "the stream closed".into(),
                });
            };
            if resp.compact_revision() > 0 {
                return Err(ClusterError::Compacted {
                    endpoints: self.endpoints.clone(),
                    from: self.from,
                    compacted: resp.compact_revision(),
                });
            }
            if resp.canceled() {
                return Err(ClusterError::WatchEnded {
                    endpoints: self.endpoints.clone(),
                    why: format!("cancelled: {}", resp.cancel_reason()),
                });
            }
            if resp.created() && resp.events().is_empty() {
                continue;
            }
            let mut events = Vec::with_capacity(resp.events().len());
            let mut seen = 0;
            for e in resp.events() {
                let Some(kv) = e.kv() else { continue };
                let key = String::from_utf8_lossy(kv.key()).into_owned();
                seen = seen.max(kv.mod_revision());
                events.push(match e.event_type() {
                    EventType::Put => WatchEvent::Put {
                        key,
                        value: kv.value().to_vec(),
                        mod_revision: kv.mod_revision(),
                    },
                    EventType::Delete => WatchEvent::Delete {
                        key,
                        revision: kv.mod_revision(),
                    },
                });
            }
            if events.is_empty() {
                // A progress answer: everything up to the store's revision has been sent.
                seen = resp.header().map_or(0, |h| h.revision());
            }
            return Ok((events, seen));
        }
    }

    /// Asks etcd for a progress answer (an empty [`Watch::next`]): a watch that gets none within
    /// a few seconds is on a connection that no longer carries anything.
    pub async fn request_progress(&mut self) -> Result<(), ClusterError> {
        self.stream
            .request_progress()
            .await
            .map_err(|e| ClusterError::WatchEnded {
                endpoints: self.endpoints.clone(),
                why: e.to_string(),
            })
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
        assert_eq!(
            parse_endpoints("https://a:2379,https://b:2379").unwrap(),
            ["https://a:2379", "https://b:2379"]
        );
        for (bad, wanted) in [
            ("127.0.0.1:2379", "is not an etcd client URL"),
            ("unix://a:1", "is not an etcd client URL"),
            ("http://a", "has no port"),
            ("http://a:port", "is not https://HOST:PORT"),
            ("", "no etcd endpoint"),
        ] {
            let err = parse_endpoints(bad).unwrap_err();
            assert!(err.starts_with("--etcd: "), "{err}");
            assert!(err.contains(wanted), "{bad}: {err}");
        }
    }
}
