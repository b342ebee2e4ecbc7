//! Leading the controllers through etcd's election API: each controller holds a lease it keeps
//! alive and campaigns on [`keys::ELECTION`] with it; etcd makes exactly one the leader at a time
//! and the next one leads when the leader's lease ends (revoked on shutdown, or expired within its
//! TTL after a crash). No state of its own: a new leader reads everything from etcd.
//!
//! A leader that cannot renew its lease for a whole TTL counts itself as having lost the
//! election ([`Leadership::lost`]) and must stop placing: by then another controller may lead.
//! Two leaders overlapping briefly is safe anyway (placement transactions, docs/cluster.md).

use crate::keys;
use crate::store::{Cluster, ClusterError};
use std::time::Duration;
use tokio::sync::watch;

/// Being the leader. Dropping it stops renewing the lease (the next controller leads within the
/// TTL); [`Leadership::resign`] hands over at once.
pub struct Leadership {
    lease: i64,
    lost: watch::Receiver<bool>,
    keeper: tokio::task::JoinHandle<()>,
    cluster: Cluster,
}

impl Leadership {
    /// Resolves when the lease could not be renewed for a TTL or etcd said it is gone.
    pub async fn lost(&mut self) {
        let _ = self.lost.wait_for(|lost| *lost).await;
    }

    /// Gives up leadership now: the lease is revoked, and with it the election key.
    pub async fn resign(self) -> Result<(), ClusterError> {
        self.keeper.abort();
        self.cluster.revoke(self.lease).await
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        self.keeper.abort();
    }
}

/// Renews `lease` every third of `ttl`; sets `lost` when etcd says it is gone or no renewal
/// succeeded for a whole `ttl`.
async fn keep(cluster: Cluster, lease: i64, ttl: Duration, lost: watch::Sender<bool>) {
    let mut last_ok = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(ttl / 3).await;
        match cluster.keep_alive(lease).await {
            Ok(left) if left > 0 => last_ok = tokio::time::Instant::now(),
            Ok(_) => {
                tracing::warn!(lease, "the controller's lease is gone");
                let _ = lost.send(true);
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "renewing the controller's lease failed");
                if last_ok.elapsed() >= ttl {
                    let _ = lost.send(true);
                    return;
                }
            }
        }
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
    let secs = i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX);
    loop {
        let lease = cluster.grant(secs).await?;
        let (tx, rx) = watch::channel(false);
        let keeper = tokio::spawn(keep(
            cluster.clone(),
            lease,
            Duration::from_secs(secs.unsigned_abs()),
            tx,
        ));
        let mut lost = rx.clone();
        loop {
            let (member, mut client) = cluster.client();
            // No call timeout here: waiting for the current leader to go is the point.
            tokio::select! {
                r = client.campaign(keys::ELECTION, who, lease) => match r {
                    Ok(_) => {
                        return Ok(Leadership {
                            lease,
                            lost: rx,
                            keeper,
                            cluster: cluster.clone(),
                        });
                    }
                    Err(e) if crate::store::retriable(&e) => {
                        tracing::warn!(error = %e, "campaign interrupted; campaigning again");
                        cluster.fail_over(member);
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(source) => {
                        keeper.abort();
                        return Err(ClusterError::Etcd {
                            endpoints: cluster.endpoints().to_owned(),
                            error: source,
                        });
                    }
                },
                _ = lost.wait_for(|l| *l) => {
                    tracing::warn!(lease, "the campaign's lease is gone; campaigning with a new one");
                    keeper.abort();
                    break;
                }
            }
        }
    }
}
