//! Leading the controllers through etcd's election API: each controller holds a lease it keeps
//! alive ([`LeaseSession`], a fresh one for each campaign) and campaigns on [`keys::ELECTION`]
//! with it; etcd makes exactly one the leader at a time and the next one leads when the leader's
//! lease ends (revoked on shutdown, or expired within its TTL after a crash). No state of its
//! own: a new leader reads everything from etcd.
//!
//! A leader that cannot renew its lease for a whole TTL counts itself as having lost the
//! election ([`Leadership::lost`], the session's [`LeaseSession::lost`]) and must stop placing:
//! by then another controller may lead. Two leaders overlapping briefly is safe anyway
//! (placement transactions, docs/cluster.md).

use crate::keys;
use crate::lease::LeaseSession;
use crate::store::{Cluster, ClusterError};
use std::time::Duration;

/// What the controller's lease is called in the log.
const WHAT: &str = "the controller's lease";

/// Being the leader. Dropping it stops renewing the lease (the next controller leads within the
/// TTL); [`Leadership::resign`] hands over at once.
pub struct Leadership {
    lease: LeaseSession,
    /// The election key etcd made for this campaign (under the lease).
    key: Vec<u8>,
}

impl Leadership {
    /// Resolves when the lease could not be renewed for a TTL or etcd said it is gone.
    pub async fn lost(&mut self) {
        self.lease.lost().await;
    }

    /// Gives up leadership now: the election key is deleted, then the lease revoked. The key
    /// goes first because etcd-client sends a lease revocation without the user's token, and
    /// with authentication on etcd revokes a lease only when the sender may write every key
    /// under it: a lease without keys.
    pub async fn resign(self) -> Result<(), ClusterError> {
        let cluster = self.lease.cluster().clone();
        cluster.delete_key("resign", self.key.clone()).await?;
        self.lease.revoke().await
    }
}

/// Campaigns as `who` with a lease of `ttl` (whole seconds, at least 1) and returns once this
/// controller leads. Waits as long as another leads, through the loss of an etcd member (the
/// campaign is sent again on another, with the same lease) and of its own lease (a new one).
pub async fn campaign(
    cluster: &Cluster,
    who: &str,
    ttl: Duration,
) -> Result<Leadership, ClusterError> {
    loop {
        let mut lease = LeaseSession::grant(cluster, ttl, WHAT).await?;
        loop {
            cluster.authenticated().await?;
            let (member, mut client) = cluster.client();
            let id = lease.id();
            // No call timeout here: waiting for the current leader to go is the point.
            tokio::select! {
                r = client.campaign(keys::ELECTION, who, id) => match r {
                    Ok(r) => {
                        let key = r.leader().map(|l| l.key().to_vec()).unwrap_or_default();
                        return Ok(Leadership { lease, key });
                    }
                    Err(e) if crate::store::retriable(&e) => {
                        tracing::warn!(error = %e, "campaign interrupted; campaigning again");
                        cluster.fail_over(member);
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(source) => {
                        return Err(ClusterError::Etcd {
                            endpoints: cluster.endpoints().to_owned(),
                            error: source,
                        });
                    }
                },
                () = lease.lost() => {
                    tracing::warn!(lease = id, "the campaign's lease is gone; campaigning with a new one");
                    break;
                }
            }
        }
    }
}
