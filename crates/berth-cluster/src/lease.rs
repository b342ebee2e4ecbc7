//! One etcd lease kept alive: [`LeaseSession`], shared by the controllers' election
//! ([`crate::election`]) and the node agent ([`crate::node`]).
//!
//! A session starts from a new lease ([`LeaseSession::grant`]) or from one a process stored
//! before it restarted ([`LeaseSession::reclaim`]: only if etcd still has it); from then on a
//! task of its own renews the lease every third of its TTL, so two renewals may fail before the
//! lease is at risk. What the holder learns:
//!
//! - [`LeaseSession::gone`]: etcd answered that the lease is gone (expired or revoked; its keys
//!   went with it). Final.
//! - [`LeaseSession::lost`]: gone, or a renewal failed and none has succeeded for a whole TTL,
//!   so the lease may have expired and whoever holds it must act as if it had (a leader stops
//!   leading: by then another may lead). Final too: once lost, a session stays lost, though it
//!   keeps renewing, so that `gone` is still learnt.
//!
//! Dropping a session stops the renewals (the lease expires within its TTL; a node agent relies
//! on that to keep its lease across a restart); [`LeaseSession::revoke`] ends it at once.
//! Limits: the TTL is whole seconds (etcd's unit), at least 1; a renewal is one
//! [`Cluster::keep_alive`] call, which may itself take up to [`crate::store::RETRY_WINDOW`]
//! (waited for: an etcd election extends every lease, so a renewal that gets through late still
//! holds it); a holder cut off from every member learns it is lost when that call fails.

use crate::store::{Cluster, ClusterError};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// What the session knows of its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    /// Renewed within the last TTL.
    Renewed,
    /// No renewal has succeeded for a whole TTL: it may have expired.
    Unsure,
    /// etcd said it is gone.
    Gone,
}

/// A lease of `ttl` being kept alive (see the module header).
pub struct LeaseSession {
    id: i64,
    ttl: Duration,
    what: &'static str,
    state: watch::Receiver<Held>,
    keeper: tokio::task::JoinHandle<()>,
    cluster: Cluster,
}

/// The TTL etcd is asked for: whole seconds, at least 1.
fn whole_seconds(ttl: Duration) -> Duration {
    Duration::from_secs(ttl.as_secs().max(1))
}

impl LeaseSession {
    /// Grants a new lease of `ttl` (whole seconds, at least 1) and keeps it alive. `what` names
    /// it in the log (`the node's lease`).
    pub async fn grant(
        cluster: &Cluster,
        ttl: Duration,
        what: &'static str,
    ) -> Result<LeaseSession, ClusterError> {
        let ttl = whole_seconds(ttl);
        let secs = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX);
        let id = cluster.grant(secs).await?;
        Ok(LeaseSession::keep(cluster, id, ttl, what))
    }

    /// Continues `lease` (stored before a restart) if etcd still has it: renewed once here, kept
    /// alive from then on. None when etcd says it is gone.
    pub async fn reclaim(
        cluster: &Cluster,
        lease: i64,
        ttl: Duration,
        what: &'static str,
    ) -> Result<Option<LeaseSession>, ClusterError> {
        if cluster.keep_alive(lease).await? > 0 {
            Ok(Some(LeaseSession::keep(
                cluster,
                lease,
                whole_seconds(ttl),
                what,
            )))
        } else {
            Ok(None)
        }
    }

    fn keep(cluster: &Cluster, id: i64, ttl: Duration, what: &'static str) -> LeaseSession {
        let (tx, state) = watch::channel(Held::Renewed);
        let keeper = tokio::spawn(renew(cluster.clone(), id, ttl, what, tx));
        LeaseSession {
            id,
            ttl,
            what,
            state,
            keeper,
            cluster: cluster.clone(),
        }
    }

    /// The cluster the lease is held in.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The lease's id.
    pub fn id(&self) -> i64 {
        self.id
    }

    /// The lease's TTL, as granted (whole seconds).
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Resolves once etcd has said the lease is gone.
    pub async fn gone(&mut self) {
        let _ = self.state.wait_for(|h| *h == Held::Gone).await;
    }

    /// Resolves once the lease is gone or no renewal has succeeded for a whole TTL.
    pub async fn lost(&mut self) {
        let _ = self.state.wait_for(|h| *h != Held::Renewed).await;
    }

    /// Ends the lease now: its keys are deleted at once.
    pub async fn revoke(self) -> Result<(), ClusterError> {
        self.keeper.abort();
        tracing::debug!(lease = self.id, what = self.what, "revoking");
        self.cluster.revoke(self.id).await
    }
}

impl Drop for LeaseSession {
    fn drop(&mut self) {
        self.keeper.abort();
    }
}

/// Renews `lease` every third of `ttl` until etcd says it is gone; marks it unsure when a
/// renewal fails and none has succeeded for a whole `ttl`. A renewal under way is waited for,
/// not cut short at the TTL: through an etcd election (a member lost) the call is tried again
/// until the new leader answers, and etcd extends every lease on a leader change, so a renewal
/// that gets through late still holds the lease.
async fn renew(
    cluster: Cluster,
    lease: i64,
    ttl: Duration,
    what: &'static str,
    state: watch::Sender<Held>,
) {
    let mut last_ok = Instant::now();
    loop {
        tokio::time::sleep(ttl / 3).await;
        match cluster.keep_alive(lease).await {
            Ok(left) if left > 0 => last_ok = Instant::now(),
            Ok(_) => {
                tracing::warn!(lease, "{what} is gone");
                state.send_replace(Held::Gone);
                return;
            }
            Err(e) => {
                tracing::warn!(lease, error = %e, "renewing {what} failed; trying again");
                if last_ok.elapsed() >= ttl {
                    state.send_if_modified(|h| {
                        let was = *h == Held::Renewed;
                        if was {
                            tracing::warn!(lease, ttl = ?ttl, "{what} was not renewed for a whole TTL: it may have expired");
                            *h = Held::Unsure;
                        }
                        was
                    });
                }
            }
        }
    }
}
