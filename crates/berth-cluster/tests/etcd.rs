//! berth-cluster against a real 3-member etcd cluster of each test's own
//! (`berth_testkit::etcd`): leases, guarded placement transactions, a killed member, two
//! controllers racing. Run through `scripts/test -p berth-cluster --test etcd` (it installs etcd).

use berth_cluster::controller::{PassReport, pass};
use berth_cluster::keys;
use berth_cluster::record::{Constraint, NodeRecord, Resources, Strategy, TaskRecord};
use berth_cluster::store::{Cluster, ClusterError};
use berth_testkit::etcd::EtcdCluster;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

fn definition(memory: u64) -> berth_model::TaskDefinition {
    let json = format!(
        r#"{{"family":"web","containerDefinitions":[{{"name":"app","image":"busybox","cpu":128,"memory":{memory}}}]}}"#
    );
    berth_model::parse(&json).expect("valid").definition
}

fn task(
    id: &str,
    memory: u64,
    constraints: Vec<Constraint>,
    strategy: Vec<Strategy>,
) -> TaskRecord {
    TaskRecord::pending(id.to_owned(), definition(memory), constraints, strategy, 1).expect("task")
}

/// One controller pass at time 1 (no service here starts a task, so no id is asked for).
async fn place_pending(c: &Cluster) -> Result<PassReport, ClusterError> {
    let settings = berth_cluster::reconcile::Settings::default();
    pass(c, &settings, 1, &mut || {
        unreachable!("no service in these tests")
    })
    .await
}

async fn connect(etcd: &EtcdCluster) -> Cluster {
    Cluster::connect(&etcd.endpoint_list())
        .await
        .expect("connect")
}

async fn register(c: &Cluster, name: &str, ttl: i64, memory: u64, attrs: &[(&str, &str)]) -> i64 {
    let lease = c.grant(ttl).await.expect("grant");
    let node = NodeRecord {
        name: name.to_owned(),
        capacity: Resources {
            cpu: 4096,
            memory_mib: memory,
        },
        attributes: attrs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        version: "test".to_owned(),
        registered_at_ms: 1,
        lease,
    };
    c.put_node(&node).await.expect("put node");
    lease
}

/// Tasks per node, from the assignment keys (what the node agents will watch).
async fn assignment_counts(c: &Cluster, nodes: &[&str]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for n in nodes {
        let (list, _) = c.assignments(n).await.expect("assignments");
        out.insert((*n).to_owned(), list.len());
    }
    out
}

/// Retries `f` until it succeeds or `limit` passes (a killed leader makes calls fail until the
/// others elect a new one); returns the result and how long it took.
async fn until_ok<T, F, Fut>(limit: Duration, mut f: F) -> (T, Duration)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ClusterError>>,
{
    let start = Instant::now();
    loop {
        match f().await {
            Ok(v) => return (v, start.elapsed()),
            Err(e) if start.elapsed() < limit => {
                eprintln!("retrying after: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("still failing after {limit:?}: {e}"),
        }
    }
}

#[tokio::test]
async fn a_node_record_lives_as_long_as_its_lease() {
    let etcd = EtcdCluster::start("lease", 3);
    let c = connect(&etcd).await;
    let kept = register(&c, "kept", 2, 1024, &[]).await;
    register(&c, "lost", 2, 1024, &[]).await;
    let names = |nodes: Vec<NodeRecord>| nodes.into_iter().map(|n| n.name).collect::<Vec<_>>();
    assert_eq!(names(c.nodes().await.unwrap()), ["kept", "lost"]);
    // Renew one lease for 4 s (twice its TTL); the other expires and takes its record along.
    let deadline = Instant::now() + Duration::from_secs(4);
    while Instant::now() < deadline {
        assert!(c.keep_alive(kept).await.unwrap() > 0);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(names(c.nodes().await.unwrap()), ["kept"]);
    c.revoke(kept).await.unwrap();
    assert!(c.nodes().await.unwrap().is_empty());
    assert!(
        c.keep_alive(kept).await.unwrap() <= 0,
        "a revoked lease is not renewed"
    );
}

#[tokio::test]
async fn a_lease_session_keeps_its_lease_until_dropped_or_revoked_and_is_reclaimed_while_alive() {
    use berth_cluster::lease::LeaseSession;
    let etcd = EtcdCluster::start("lease-session", 3);
    let c = connect(&etcd).await;
    let ttl = Duration::from_secs(1);
    let node = |name: &str, lease: i64| NodeRecord {
        name: name.to_owned(),
        capacity: Resources::default(),
        attributes: BTreeMap::new(),
        version: "test".to_owned(),
        registered_at_ms: 1,
        lease,
    };
    let names = |nodes: Vec<NodeRecord>| nodes.into_iter().map(|n| n.name).collect::<Vec<_>>();

    // Whole seconds: 1.5 s is granted as 1 s, and renewed for three times that.
    let first = LeaseSession::grant(&c, Duration::from_millis(1500), "the test's lease")
        .await
        .expect("grant");
    assert_eq!(first.ttl(), ttl);
    c.put_node(&node("kept", first.id())).await.unwrap();
    let dropped = LeaseSession::grant(&c, ttl, "the test's lease")
        .await
        .unwrap();
    c.put_node(&node("dropped", dropped.id())).await.unwrap();
    drop(dropped);
    tokio::time::sleep(3 * ttl).await;
    assert_eq!(names(c.nodes().await.unwrap()), ["kept"]);

    // A stored lease is continued while etcd has it (a restarted process), and kept by the new
    // session once the old one is dropped.
    let id = first.id();
    let mut again = LeaseSession::reclaim(&c, id, ttl, "the test's lease")
        .await
        .expect("reclaim")
        .expect("still alive");
    drop(first);
    tokio::time::sleep(3 * ttl).await;
    assert_eq!(names(c.nodes().await.unwrap()), ["kept"]);
    assert!(
        tokio::time::timeout(Duration::from_millis(100), again.lost())
            .await
            .is_err()
    );

    // Revoked by one holder: another learns it is gone (and so lost), and it is not reclaimed.
    let other = LeaseSession::reclaim(&c, id, ttl, "the test's lease")
        .await
        .unwrap()
        .expect("alive");
    other.revoke().await.expect("revoke");
    tokio::time::timeout(Duration::from_secs(3), again.gone())
        .await
        .expect("gone");
    tokio::time::timeout(Duration::from_millis(100), again.lost())
        .await
        .expect("gone is lost too");
    assert!(c.nodes().await.unwrap().is_empty());
    assert!(
        LeaseSession::reclaim(&c, id, ttl, "the test's lease")
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn six_tasks_spread_over_three_nodes_and_placement_survives_a_killed_member() {
    let mut etcd = EtcdCluster::start("spread", 3);
    let c = connect(&etcd).await;
    let nodes = ["n1", "n2", "n3"];
    for n in nodes {
        register(&c, n, 60, 4096, &[]).await;
    }
    for i in 0..6 {
        c.submit(&task(&format!("t{i}"), 256, vec![], vec![]))
            .await
            .unwrap();
    }
    let report = place_pending(&c).await.unwrap();
    assert_eq!(report.placed.len(), 6, "{report:?}");
    assert_eq!(report.conflicts, 0);
    let counts = assignment_counts(&c, &nodes).await;
    assert!(counts.values().all(|&n| n == 2), "{counts:?}");
    // Each task names its node, and its assignment's fence is the revision it was placed from.
    let (tasks, _) = c.tasks().await.unwrap();
    for t in &tasks {
        let node = t.value.node.as_deref().expect("placed");
        let (list, _) = c.assignments(node).await.unwrap();
        let a = list
            .iter()
            .find(|a| a.task == t.value.id)
            .expect("assignment");
        assert!(
            a.fence > 0 && a.fence < t.mod_revision,
            "{a:?} vs {}",
            t.mod_revision
        );
    }
    // A second pass has nothing to do; a submitted id is never overwritten.
    assert_eq!(place_pending(&c).await.unwrap().placed.len(), 0);
    assert!(matches!(
        c.submit(&task("t0", 256, vec![], vec![])).await,
        Err(ClusterError::Exists(id)) if id == "t0"
    ));

    // kill -9 one member: the other two keep a quorum; submits and placement go on.
    etcd.kill(0);
    for i in 6..9 {
        let t = task(&format!("t{i}"), 256, vec![], vec![]);
        until_ok(Duration::from_secs(10), || c.submit(&t)).await;
    }
    // A pass that failed half-way is simply run again: what it placed stays placed.
    let (_, took) = until_ok(Duration::from_secs(10), || place_pending(&c)).await;
    eprintln!("placement after the kill took {took:?}");
    let counts = assignment_counts(&c, &nodes).await;
    assert!(counts.values().all(|&n| n == 3), "{counts:?}");
    // The member comes back with its data and catches up.
    etcd.restart(0);
    let back = Cluster::connect(&etcd.endpoint_list()[..1]).await.unwrap();
    let ((list, _), _) = until_ok(Duration::from_secs(10), || back.assignments("n1")).await;
    assert_eq!(list.len(), 3);
}

#[tokio::test]
async fn member_of_and_binpack_place_as_documented_and_unplaceable_tasks_say_why() {
    let etcd = EtcdCluster::start("constraints", 3);
    let c = connect(&etcd).await;
    register(&c, "big", 60, 4096, &[("ecs.instance-type", "large")]).await;
    register(&c, "small", 60, 1024, &[("ecs.instance-type", "small")]).await;
    register(&c, "other", 60, 4096, &[("ecs.instance-type", "gpu")]).await;
    let member = vec![Constraint::MemberOf {
        expression: "attribute:ecs.instance-type in [large, small]".to_owned(),
    }];
    let binpack = vec![Strategy::Binpack {
        field: "memory".to_owned(),
    }];
    for i in 0..3 {
        c.submit(&task(
            &format!("p{i}"),
            512,
            member.clone(),
            binpack.clone(),
        ))
        .await
        .unwrap();
    }
    // Needs more memory than any selected node has left after the three (placed last: the pass
    // goes by submit time, then id).
    c.submit(&task("z-huge", 4000, member.clone(), vec![]))
        .await
        .unwrap();
    let report = place_pending(&c).await.unwrap();
    let placed: BTreeMap<String, String> = report.placed.into_iter().collect();
    // binpack fills "small" (1024 MiB: two tasks) before "big"; "other" is never chosen.
    assert_eq!(placed.get("p0").map(String::as_str), Some("small"));
    assert_eq!(placed.get("p1").map(String::as_str), Some("small"));
    assert_eq!(placed.get("p2").map(String::as_str), Some("big"));
    assert_eq!(
        report.unplaced,
        [(
            "z-huge".to_owned(),
            "no node met all of the task's requirements: RESOURCE:MEMORY (2 nodes), MemberOf placement constraint unsatisfied (1 node)".to_owned()
        )]
    );
    // The reason is on the task for `berth cluster ps`.
    let (tasks, _) = c.tasks().await.unwrap();
    let huge = tasks.iter().find(|t| t.value.id == "z-huge").unwrap();
    assert!(huge.value.node.is_none());
    assert!(
        huge.value
            .reason
            .as_deref()
            .unwrap()
            .contains("RESOURCE:MEMORY (2 nodes)")
    );
    // A drained node takes nothing new.
    c.set_drain("small", true, 2).await.unwrap();
    c.submit(&task("after-drain", 100, member, binpack))
        .await
        .unwrap();
    let report = place_pending(&c).await.unwrap();
    assert_eq!(
        report.placed,
        [("after-drain".to_owned(), "big".to_owned())]
    );
}

#[tokio::test]
async fn two_controllers_racing_never_place_a_task_twice() {
    let etcd = EtcdCluster::start("race", 3);
    let a = connect(&etcd).await;
    let b = connect(&etcd).await;
    let nodes = ["n1", "n2", "n3", "n4"];
    for n in nodes {
        register(&a, n, 60, 1 << 20, &[]).await;
    }
    for i in 0..40 {
        a.submit(&task(&format!("t{i:02}"), 64, vec![], vec![]))
            .await
            .unwrap();
    }
    let (ra, rb) = tokio::join!(place_pending(&a), place_pending(&b));
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert_eq!(ra.placed.len() + rb.placed.len(), 40, "{ra:?} {rb:?}");
    // Every task has exactly one assignment, on the node its record names.
    let (tasks, _) = a.tasks().await.unwrap();
    let mut seen = BTreeMap::new();
    for n in nodes {
        for asg in a.assignments(n).await.unwrap().0 {
            assert!(
                seen.insert(asg.task.clone(), n).is_none(),
                "{} assigned twice",
                asg.task
            );
        }
    }
    assert_eq!(seen.len(), 40);
    for t in tasks {
        assert_eq!(t.value.node.as_deref(), seen.get(&t.value.id).copied());
    }
    let all = a.count(keys::ASSIGN).await.unwrap();
    assert_eq!(all, 40);
}

fn controller_config(name: &str, lease_ttl: Duration) -> berth_cluster::controller::Config {
    berth_cluster::controller::Config {
        name: name.to_owned(),
        lease_ttl,
        interval: Duration::from_millis(100),
        settings: berth_cluster::reconcile::Settings::default(),
        new_id: Box::new(|| unreachable!("no service in these tests")),
    }
}

/// Waits until task `id` is placed; its node.
async fn placed(c: &Cluster, id: &str, limit: Duration) -> String {
    let start = Instant::now();
    loop {
        if let Some(node) = c.task(id).await.unwrap().and_then(|t| t.value.node) {
            return node;
        }
        assert!(start.elapsed() < limit, "{id} not placed within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_run_leads_places_and_resigns_when_cancelled() {
    use berth_cluster::controller::{Ended, run};
    use tokio_util::sync::CancellationToken;
    let etcd = EtcdCluster::start("controller-run", 3);
    let c = connect(&etcd).await;
    register(&c, "n1", 10, 1024, &[]).await;
    // A lease far longer than the test waits: the second leads only because the first resigns.
    let ttl = Duration::from_secs(30);
    let start = |name: &str, cancel: &CancellationToken| {
        let (c, config, cancel) = (c.clone(), controller_config(name, ttl), cancel.clone());
        tokio::spawn(async move { run(&c, config, cancel).await })
    };
    let first_cancel = CancellationToken::new();
    let first = start("c1", &first_cancel);
    c.submit(&task("t1", 64, vec![], vec![])).await.unwrap();
    assert_eq!(placed(&c, "t1", Duration::from_secs(10)).await, "n1");

    // Another waits while the first leads; cancelled, the first resigns and the other leads.
    let second_cancel = CancellationToken::new();
    let second = start("c2", &second_cancel);
    tokio::time::sleep(Duration::from_millis(500)).await;
    first_cancel.cancel();
    let ended = tokio::time::timeout(Duration::from_secs(10), first)
        .await
        .expect("the first ends")
        .expect("joined")
        .expect("no error");
    assert_eq!(ended, Ended::Cancelled);
    c.submit(&task("t2", 64, vec![], vec![])).await.unwrap();
    assert_eq!(placed(&c, "t2", Duration::from_secs(10)).await, "n1");

    // Cancelled before it leads: it ends without leading.
    let waiting_cancel = CancellationToken::new();
    let waiting = start("c3", &waiting_cancel);
    tokio::time::sleep(Duration::from_millis(300)).await;
    waiting_cancel.cancel();
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("ends")
            .expect("joined")
            .expect("no error"),
        Ended::Cancelled
    );
    second_cancel.cancel();
    assert_eq!(
        second.await.expect("joined").expect("no error"),
        Ended::Cancelled
    );
}
