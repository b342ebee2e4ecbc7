//! `Cluster::open` with TLS and a user on a real etcd served with TLS and authentication on, its
//! roles from `connect::setup_commands`: a node's user reads its assignments, goes on working
//! after etcd has forgotten its token (a short `--auth-token-ttl`), and is refused a write outside
//! its role with `ClusterError::Denied` naming the user. Needs etcd and openssl.

use berth_cluster::connect::{Settings, setup_commands};
use berth_cluster::store::{Cluster, ClusterError};
use berth_testkit::etcd::EtcdCluster;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_token_is_renewed_and_a_write_outside_the_role_is_denied() {
    // Tokens etcd forgets one second after their last use.
    let etcd = EtcdCluster::start_tls_with("auth-token", 1, &["--auth-token-ttl", "1"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let lines = setup_commands(&etcd.etcdctl_command(), &["n1".to_owned()]);
    etcd.run_setup(&lines, |user| format!("pw-{user}"));
    let password_file = dir.path().join("pw");
    std::fs::write(&password_file, "pw-berth-node-n1\n").expect("write");
    let tls = etcd.tls().expect("TLS").clone();
    let settings = Settings {
        endpoints: etcd.endpoint_list(),
        cacert: Some(tls.ca.clone()),
        cert: Some(tls.client_cert.clone()),
        key: Some(tls.client_key.clone()),
        user: Some("berth-node-n1".to_owned()),
        password_file: Some(password_file),
        insecure: false,
    };
    assert_eq!(settings.check(), Ok(vec![]));
    let cluster = Cluster::open(&settings).await.expect("open");
    let (list, _) = cluster.assignments("n1").await.expect("its assignments");
    assert!(list.is_empty());
    // Longer than the token's TTL: etcd no longer knows it; the next call authenticates again.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (list, _) = cluster
        .assignments("n1")
        .await
        .expect("its assignments, after the token expired");
    assert!(list.is_empty());
    // A drain is the operator's.
    match cluster.set_drain("n1", true, 0).await {
        Err(e @ ClusterError::Denied { .. }) => {
            let text = e.to_string();
            assert!(text.contains("etcdserver: permission denied"), "{text}");
            assert!(
                text.contains("etcd user \"berth-node-n1\" is not allowed to do this"),
                "{text}"
            );
        }
        other => panic!("the node's user drained a node: {other:?}"),
    }
    // Another node's assignments are not its to read.
    match cluster.assignments("n2").await {
        Err(ClusterError::Denied { .. }) => {}
        other => panic!("the node's user read n2's assignments: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_with_authentication_resigns_at_once() {
    let etcd = EtcdCluster::start_tls("auth-resign", 1);
    let dir = tempfile::tempdir().expect("tempdir");
    let lines = setup_commands(&etcd.etcdctl_command(), &[]);
    etcd.run_setup(&lines, |user| format!("pw-{user}"));
    let password_file = dir.path().join("pw");
    std::fs::write(&password_file, "pw-berth-controller\n").expect("write");
    let tls = etcd.tls().expect("TLS").clone();
    let settings = Settings {
        endpoints: etcd.endpoint_list(),
        cacert: Some(tls.ca.clone()),
        cert: Some(tls.client_cert.clone()),
        key: Some(tls.client_key.clone()),
        user: Some("berth-controller".to_owned()),
        password_file: Some(password_file),
        insecure: false,
    };
    let first = Cluster::open(&settings).await.expect("open");
    let second = Cluster::open(&settings).await.expect("open");
    let ttl = Duration::from_secs(30);
    let leading = berth_cluster::election::campaign(&first, "c1", ttl)
        .await
        .expect("c1 leads");
    // etcd-client revokes a lease without the user's token: etcd allows that only for a lease
    // without keys, so resigning deletes the election key first.
    leading.resign().await.expect("c1 resigns");
    let next = tokio::time::timeout(
        Duration::from_secs(10),
        berth_cluster::election::campaign(&second, "c2", ttl),
    )
    .await
    .expect("c2 leads well within c1's TTL")
    .expect("c2 campaigns");
    next.resign().await.expect("c2 resigns");
}
