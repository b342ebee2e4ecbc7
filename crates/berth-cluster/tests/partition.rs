//! A `Cluster` cut off from a real 3-member etcd and healed, through a
//! `berth_testkit::tcp_proxy::ProxySet` (one proxy per member): what a node agent or a controller
//! on the far side of a network partition sees. Measured, not assumed: how long a call takes to
//! fail once the link is cut (closed connections) or stalled (silent ones), what a watch does, and
//! how long the same `Cluster` takes to work again after the heal (it reconnects on its own).
//! Run: `cargo test -p berth-cluster --test partition` (needs `etcd`; `scripts/test` installs it).

use berth_cluster::store::{CALL_TIMEOUT, Cluster, ClusterError, RETRY_WINDOW};
use berth_testkit::etcd::EtcdCluster;
use berth_testkit::tcp_proxy::ProxySet;
use std::time::{Duration, Instant};

/// What a failing call may take beyond [`RETRY_WINDOW`] (a `Cluster` that has had an answer tries
/// a failing call again for that long): scheduling on a loaded 2-core machine.
const MARGIN: Duration = Duration::from_secs(2);

/// How long the first successful call after a heal may take.
const RECOVERY: Duration = Duration::from_secs(5);

async fn connect(endpoints: &[String]) -> Cluster {
    Cluster::connect(endpoints).await.expect("connect")
}

/// Calls `drains()` until it succeeds; the answer, how long it took and how many calls failed.
async fn until_ok(c: &Cluster, limit: Duration) -> (Vec<String>, Duration, usize) {
    let start = Instant::now();
    let mut failed = 0;
    loop {
        match c.drains().await {
            Ok(drains) => return (drains, start.elapsed(), failed),
            Err(e) => {
                failed += 1;
                assert!(
                    start.elapsed() < limit,
                    "no call succeeded within {limit:?} of the heal; last error: {e}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// The call fails within the retry window plus a margin, with an error naming the endpoints.
fn failed_in_time(
    what: &str,
    result: Result<Vec<String>, ClusterError>,
    took: Duration,
    endpoints: &str,
) {
    eprintln!("{what}: failed after {took:?}: {result:?}");
    let err = result.expect_err("a call through a cut link fails");
    assert!(took <= RETRY_WINDOW + MARGIN, "{what} took {took:?}");
    assert!(err.to_string().contains(endpoints), "{err}");
}

#[tokio::test]
async fn a_cut_client_fails_within_the_call_timeout_and_recovers_by_itself_after_heal() {
    let etcd = EtcdCluster::start("partition-cut", 3);
    let proxies = ProxySet::start(&etcd.client_addrs());
    let c = connect(&proxies.endpoint_list()).await;
    let direct = connect(&etcd.endpoint_list()).await;

    c.set_drain("n1", true, 1)
        .await
        .expect("put through the proxies");
    assert_eq!(c.drains().await.expect("get"), ["n1"]);
    let before = proxies.stats();
    assert!(
        before.forwarded >= 1 && before.bytes_to_target > 0,
        "{before:?}"
    );
    let mut watch = c.watch("/berth/drain/", 1).await.expect("watch");
    let (events, _) = watch.next().await.expect("the watch replays the drain");
    assert_eq!(events.len(), 1, "{events:?}");

    proxies.cut();
    assert_eq!(proxies.stats().open, 0, "cut closed every connection");
    // The watch's stream was on a closed connection: it ends at once.
    let t = Instant::now();
    let ended = tokio::time::timeout(CALL_TIMEOUT, watch.next()).await;
    eprintln!("cut: the watch answered after {:?}: {ended:?}", t.elapsed());
    assert!(
        matches!(ended, Ok(Err(ClusterError::WatchEnded { .. }))),
        "{ended:?}"
    );
    let t = Instant::now();
    let read = c.drains().await;
    failed_in_time("cut: a read", read, t.elapsed(), &proxies.endpoints());
    let t = Instant::now();
    let write = c.set_drain("n2", true, 2).await.map(|()| Vec::new());
    failed_in_time("cut: a write", write, t.elapsed(), &proxies.endpoints());
    let during = proxies.stats();
    assert!(
        during.held >= 1,
        "the client's new connections are held: {during:?}"
    );
    assert_eq!(during.forwarded, before.forwarded, "{during:?}");

    // etcd itself is fine: only this client is cut off.
    direct.set_drain("n3", true, 3).await.expect("direct put");

    proxies.heal();
    let (drains, took, failed) = until_ok(&c, RECOVERY).await;
    eprintln!("cut: the same Cluster answered {took:?} after the heal ({failed} failed calls)");
    assert!(took < RECOVERY, "{took:?}");
    // The write that failed while cut never reached etcd: held connections are closed at the
    // heal, never forwarded.
    assert_eq!(drains, ["n1", "n3"]);
    c.set_drain("n4", true, 4)
        .await
        .expect("a write after the heal");
    assert_eq!(
        direct.drains().await.expect("direct get"),
        ["n1", "n3", "n4"]
    );
}

#[tokio::test]
async fn a_stalled_client_fails_within_the_call_timeout_and_recovers_by_itself_after_heal() {
    let etcd = EtcdCluster::start("partition-stall", 3);
    let proxies = ProxySet::start(&etcd.client_addrs());
    let c = connect(&proxies.endpoint_list()).await;

    c.set_drain("n1", true, 1)
        .await
        .expect("put through the proxies");
    let mut watch = c.watch("/berth/drain/", 1).await.expect("watch");
    watch.next().await.expect("the watch replays the drain");

    proxies.stall();
    assert!(proxies.stats().open >= 1, "stalled connections stay open");
    // The watch's connection carries nothing: the client's HTTP/2 keep-alive (a ping every 2 s,
    // 2 s for its answer) gives up on it, and the watch ends.
    let t = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(15), watch.next()).await;
    let took = t.elapsed();
    eprintln!("stall: the watch answered after {took:?}: {ended:?}");
    assert!(
        matches!(ended, Ok(Err(ClusterError::WatchEnded { .. }))),
        "{ended:?}"
    );
    assert!(took <= CALL_TIMEOUT + MARGIN, "{took:?}");
    let t = Instant::now();
    let read = c.drains().await;
    failed_in_time("stall: a read", read, t.elapsed(), &proxies.endpoints());

    proxies.heal();
    let (drains, took_heal, failed) = until_ok(&c, RECOVERY).await;
    eprintln!(
        "stall: the same Cluster answered {took_heal:?} after the heal ({failed} failed calls)"
    );
    assert!(took_heal < RECOVERY, "{took_heal:?}");
    assert_eq!(drains, ["n1"]);
}

#[tokio::test]
async fn a_lease_session_cut_off_is_lost_once_a_renewal_fails_and_gone_once_etcd_says_so() {
    use berth_cluster::lease::LeaseSession;
    let etcd = EtcdCluster::start("partition-lease", 3);
    let proxies = ProxySet::start(&etcd.client_addrs());
    let c = connect(&proxies.endpoint_list()).await;
    let direct = connect(&etcd.endpoint_list()).await;
    let ttl = Duration::from_secs(2);
    let mut lease = LeaseSession::grant(&c, ttl, "the test's lease")
        .await
        .expect("grant");
    // Renewed for longer than its TTL: neither lost nor gone.
    tokio::time::sleep(2 * ttl).await;
    assert!(
        tokio::time::timeout(Duration::from_millis(100), lease.lost())
            .await
            .is_err()
    );

    // Cut off: lost once a renewal fails (after its retry window) with none for a TTL, but not
    // gone: etcd has said nothing.
    proxies.cut();
    let t = Instant::now();
    tokio::time::timeout(ttl + RETRY_WINDOW + MARGIN, lease.lost())
        .await
        .expect("lost once a renewal fails");
    eprintln!("lease: lost {:?} after the cut", t.elapsed());
    assert!(
        tokio::time::timeout(Duration::from_millis(100), lease.gone())
            .await
            .is_err(),
        "etcd has not said it is gone"
    );

    // etcd ends it meanwhile (its TTL ran out long ago: nobody renewed it; revoked, should it
    // not have yet); once back in touch, the session learns it is gone.
    let _ = direct.revoke(lease.id()).await;
    proxies.heal();
    let t = Instant::now();
    tokio::time::timeout(ttl + RETRY_WINDOW + RECOVERY, lease.gone())
        .await
        .expect("gone once etcd answers");
    eprintln!("lease: gone {:?} after the heal", t.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leading_controller_cut_off_stops_leading_and_leads_again_once_back() {
    // Lost: a renewal failed (after its retry window) with none for a TTL. The controller stops
    // leading (its election key goes with its lease), keeps campaigning, and leads again once
    // etcd answers: the run never ends on its own.
    use berth_cluster::controller::{Config, Ended, run};
    use tokio_util::sync::CancellationToken;
    let etcd = EtcdCluster::start("partition-controller", 3);
    let proxies = ProxySet::start(&etcd.client_addrs());
    let c = connect(&proxies.endpoint_list()).await;
    let direct = connect(&etcd.endpoint_list()).await;
    let ttl = Duration::from_secs(2);
    let config = Config {
        name: "cut".into(),
        lease_ttl: ttl,
        interval: Duration::from_millis(200),
        settings: berth_cluster::reconcile::Settings::default(),
        new_id: Box::new(|| unreachable!("no service here")),
    };
    let cancel = CancellationToken::new();
    let run = {
        let c = c.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move { run(&c, config, cancel).await })
    };
    // Leading: the election key is held (`leads` waits for `want` keys).
    let leads = |want: i64, limit: Duration| {
        let direct = direct.clone();
        async move {
            let start = Instant::now();
            while direct
                .count(berth_cluster::keys::ELECTION)
                .await
                .expect("count")
                != want
            {
                assert!(
                    start.elapsed() < limit,
                    "the election keys never became {want}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            start.elapsed()
        }
    };
    leads(1, Duration::from_secs(10)).await;
    tokio::time::sleep(2 * ttl).await;
    assert!(!run.is_finished(), "still leading");

    // Cut off for longer than the lease and a call's retry window: the lease expires in etcd.
    proxies.cut();
    let took = leads(0, ttl + RETRY_WINDOW + MARGIN).await;
    eprintln!("controller: its election key gone {took:?} after the cut");
    tokio::time::sleep(RETRY_WINDOW + MARGIN).await;
    assert!(
        !run.is_finished(),
        "the controller keeps running through the outage"
    );
    proxies.heal();
    let took = leads(1, ttl + RETRY_WINDOW + RECOVERY + MARGIN).await;
    eprintln!("controller: leading again {took:?} after the heal");
    assert!(!run.is_finished());
    cancel.cancel();
    let ended = tokio::time::timeout(RECOVERY, run)
        .await
        .expect("it stops when cancelled")
        .expect("joined");
    assert_eq!(ended.expect("no error"), Ended::Cancelled);
}
