//! berth-cluster's node loop (`node::run`) against a real 3-member etcd, with an in-memory local
//! side that records what it was asked to run, stop and release: registration under a lease,
//! assignments run exactly once (also across restarts, a compacted history and a failing local
//! store), statuses reported, a lost node's orphans released before it registers again.
//! Run: `scripts/test -p berth-cluster --test node`.

use berth_cluster::controller::pass;
use berth_cluster::node::{self, Local, LocalStatus, Memory, NodeConfig};
use berth_cluster::reconcile::Settings;
use berth_cluster::record::{HealthStatus, LastStatus, Resources, StopCode, TaskRecord};
use berth_cluster::store::Cluster;
use berth_testkit::etcd::EtcdCluster;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

#[derive(Default)]
struct Inner {
    memory: Memory,
    /// Every task `run` started, in order (a task twice here would be a task run twice).
    runs: Vec<String>,
    released: Vec<String>,
    status: BTreeMap<String, LocalStatus>,
    /// `run` calls that fail (a local store that cannot be written) before they work again.
    failing_runs: usize,
}

struct FakeLocal {
    inner: Mutex<Inner>,
    changes: watch::Sender<u64>,
}

fn status(last: LastStatus, reason: Option<&str>) -> LocalStatus {
    LocalStatus {
        last_status: last,
        health_status: HealthStatus::Unknown,
        stopped_reason: reason.map(str::to_owned),
        failed_to_start: false,
    }
}

impl FakeLocal {
    fn new() -> Arc<FakeLocal> {
        Arc::new(FakeLocal {
            inner: Mutex::new(Inner::default()),
            changes: watch::channel(0).0,
        })
    }
    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        let out = f(&mut self.inner.lock().unwrap());
        self.changes.send_modify(|n| *n += 1);
        out
    }
    fn runs(&self) -> Vec<String> {
        self.inner.lock().unwrap().runs.clone()
    }
    /// The task exits on its own (its essential container ended).
    fn exit(&self, id: &str) {
        self.with(|i| {
            i.status.insert(
                id.into(),
                status(
                    LastStatus::Stopped,
                    Some("Essential container in task exited"),
                ),
            )
        });
    }
}

impl Local for FakeLocal {
    type Error = std::io::Error;
    async fn memory(&self) -> Result<Memory, std::io::Error> {
        Ok(self.inner.lock().unwrap().memory.clone())
    }
    async fn run(
        &self,
        task: TaskRecord,
        fence: i64,
        revision: i64,
        stop: Option<String>,
    ) -> Result<(), std::io::Error> {
        self.with(|i| {
            if i.failing_runs > 0 {
                i.failing_runs -= 1;
                return Err(std::io::Error::other("the local store cannot be written"));
            }
            i.memory.accepted.insert(task.id.clone(), fence);
            i.memory.revision = revision;
            i.runs.push(task.id.clone());
            let st = match &stop {
                Some(r) => status(LastStatus::Stopped, Some(r)),
                None => status(LastStatus::Running, None),
            };
            i.status.insert(task.id, st);
            Ok(())
        })
    }
    async fn stop(&self, id: &str, reason: &str) {
        self.with(|i| {
            if i.status
                .get(id)
                .is_some_and(|s| s.last_status != LastStatus::Stopped)
            {
                i.status
                    .insert(id.into(), status(LastStatus::Stopped, Some(reason)));
            }
        });
    }
    async fn release(&self, id: &str, revision: i64, reason: &str) -> Result<(), std::io::Error> {
        self.with(|i| {
            if i.status
                .get(id)
                .is_some_and(|s| s.last_status != LastStatus::Stopped)
            {
                i.status
                    .insert(id.into(), status(LastStatus::Stopped, Some(reason)));
            }
            i.memory.accepted.remove(id);
            i.memory.revision = revision;
            i.released.push(id.into());
            Ok(())
        })
    }
    async fn seen(&self, revision: i64) -> Result<(), std::io::Error> {
        self.with(|i| i.memory.revision = revision);
        Ok(())
    }
    async fn save_lease(&self, lease: i64) -> Result<(), std::io::Error> {
        self.with(|i| i.memory.lease = Some(lease));
        Ok(())
    }
    async fn settled(&self, _ids: &[String]) {}
    fn statuses(&self) -> BTreeMap<String, (i64, LocalStatus)> {
        let i = self.inner.lock().unwrap();
        i.memory
            .accepted
            .iter()
            .map(|(id, fence)| {
                let s = i
                    .status
                    .get(id)
                    .cloned()
                    .unwrap_or_else(|| status(LastStatus::Pending, None));
                (id.clone(), (*fence, s))
            })
            .collect()
    }
    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

fn config(name: &str, ttl: u64) -> NodeConfig {
    NodeConfig {
        name: name.into(),
        capacity: Resources {
            cpu: 4096,
            memory_mib: 4096,
        },
        attributes: BTreeMap::from([("zone".to_owned(), "a".to_owned())]),
        version: "test".into(),
        lease_ttl: Duration::from_secs(ttl),
        stop_wait: Duration::from_secs(5),
    }
}

/// A node loop running on its own, cancelled (like a killed agent: the lease is not revoked)
/// when dropped.
struct Running {
    stop: CancellationToken,
    handle: tokio::task::JoinHandle<Result<(), node::Refused>>,
}

impl Running {
    fn start(etcd: &EtcdCluster, config: NodeConfig, local: &Arc<FakeLocal>) -> Running {
        let stop = CancellationToken::new();
        let handle = tokio::spawn(node::run(
            berth_cluster::connect::Settings::insecure(etcd.endpoint_list()),
            config,
            local.clone(),
            stop.clone(),
        ));
        Running { stop, handle }
    }
    async fn kill(self) {
        self.stop.cancel();
        let _ = self.handle.await;
    }
}

fn definition() -> berth_model::TaskDefinition {
    berth_model::parse(
        r#"{"family":"web","containerDefinitions":[{"name":"app","image":"busybox","memory":64}]}"#,
    )
    .expect("valid")
    .definition
}

async fn submit(c: &Cluster, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for _ in 0..n {
        let id = format!("{:032x}", rand_id());
        let t = TaskRecord::pending(id.clone(), definition(), vec![], vec![], now()).unwrap();
        c.submit(&t).await.unwrap();
        ids.push(id);
    }
    ids
}

fn rand_id() -> u128 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(1);
    (u128::from(std::process::id()) << 64) | u128::from(N.fetch_add(1, Ordering::Relaxed))
}

fn now() -> u64 {
    u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

async fn controller_pass(c: &Cluster) -> berth_cluster::controller::PassReport {
    pass(c, &Settings::default(), now(), &mut || {
        format!("{:032x}", rand_id())
    })
    .await
    .unwrap()
}

/// Polls `f` every 100 ms until it is true, at most `limit`.
async fn until<F, Fut>(limit: Duration, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !f().await {
        assert!(start.elapsed() < limit, "never {what} within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn node_lease(c: &Cluster, name: &str) -> Option<i64> {
    let view = c.view().await.unwrap();
    view.nodes.get(name).map(|n| n.lease)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assignments_run_once_across_restarts_compaction_and_a_failing_store() {
    let etcd = EtcdCluster::start("node-once", 3);
    let c = Cluster::connect(&etcd.endpoint_list()).await.unwrap();
    let local = FakeLocal::new();
    let n = Running::start(&etcd, config("n1", 10), &local);
    until(Duration::from_secs(10), "registered", || async {
        node_lease(&c, "n1").await.is_some()
    })
    .await;
    let view = c.view().await.unwrap();
    let rec = &view.nodes["n1"];
    assert_eq!(rec.capacity.memory_mib, 4096);
    assert_eq!(rec.attributes["zone"], "a");

    // Three tasks placed: each run once, each reported RUNNING with its fence.
    let first = submit(&c, 3).await;
    assert_eq!(controller_pass(&c).await.placed.len(), 3);
    until(Duration::from_secs(10), "all 3 RUNNING", || async {
        let v = c.view().await.unwrap();
        first
            .iter()
            .all(|id| v.last_status(&v.tasks[id].value) == LastStatus::Running)
    })
    .await;
    assert_eq!(local.runs().len(), 3);

    // Restart within the TTL: the same lease, nothing run again.
    let lease = node_lease(&c, "n1").await;
    n.kill().await;
    let n = Running::start(&etcd, config("n1", 10), &local);
    let more = submit(&c, 2).await;
    assert_eq!(controller_pass(&c).await.placed.len(), 2);
    until(Duration::from_secs(10), "5 runs", || async {
        local.runs().len() == 5
    })
    .await;
    assert_eq!(node_lease(&c, "n1").await, lease, "the lease was kept");

    // Down while a task is stopped by a user and another placed; the history compacted past
    // the node's revision: the restarted node resyncs in full.
    n.kill().await;
    let v = c.view().await.unwrap();
    assert!(
        c.stop(
            &v.tasks[&first[0]],
            "Task stopped by user",
            StopCode::UserInitiated,
            now()
        )
        .await
        .unwrap()
    );
    let late = submit(&c, 1).await;
    assert_eq!(controller_pass(&c).await.placed.len(), 1);
    let rev = c.view().await.unwrap().revision;
    c.compact(rev).await.unwrap();
    // The first run of the new task fails (the local store is full): nothing is lost, it is run
    // once the store works again.
    local.with(|i| i.failing_runs = 1);
    let n = Running::start(&etcd, config("n1", 10), &local);
    until(Duration::from_secs(15), "the late task run", || async {
        local.runs().contains(&late[0])
    })
    .await;
    // The stopped one reports STOPPED; the controller closes it and deletes its assignment;
    // the node releases it.
    until(
        Duration::from_secs(10),
        "the stopped task reported",
        || async {
            let v = c.view().await.unwrap();
            v.status_of(&v.tasks[&first[0]].value)
                .is_some_and(|s| s.last_status == LastStatus::Stopped)
        },
    )
    .await;
    let report = controller_pass(&c).await;
    assert!(
        report.closed.iter().any(|(id, _)| id == &first[0]),
        "{report:?}"
    );
    until(Duration::from_secs(10), "released", || async {
        local.inner.lock().unwrap().released.contains(&first[0])
    })
    .await;
    // Its status key goes with the release.
    until(Duration::from_secs(10), "its status removed", || async {
        let v = c.view().await.unwrap();
        !v.statuses
            .contains_key(&("n1".to_owned(), first[0].clone()))
    })
    .await;

    // A task that exits on its own: reported, closed with the node's reason.
    local.exit(&more[0]);
    until(Duration::from_secs(10), "the exit reported", || async {
        let v = c.view().await.unwrap();
        v.status_of(&v.tasks[&more[0]].value)
            .is_some_and(|s| s.last_status == LastStatus::Stopped)
    })
    .await;
    controller_pass(&c).await;
    let v = c.view().await.unwrap();
    let t = &v.tasks[&more[0]].value;
    assert_eq!(t.last_status, Some(LastStatus::Stopped));
    assert_eq!(
        t.reason.as_deref(),
        Some("Essential container in task exited")
    );
    assert_eq!(t.stop_code, Some(StopCode::EssentialContainerExited));

    // Nothing ran twice.
    let runs = local.runs();
    let mut unique = runs.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(runs.len(), unique.len(), "{runs:?}");
    assert_eq!(runs.len(), 6);
    n.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_node_releases_its_closed_tasks_before_registering_again() {
    let etcd = EtcdCluster::start("node-lost", 3);
    let c = Cluster::connect(&etcd.endpoint_list()).await.unwrap();
    let local = FakeLocal::new();
    let n = Running::start(&etcd, config("n1", 2), &local);
    until(Duration::from_secs(10), "registered", || async {
        node_lease(&c, "n1").await.is_some()
    })
    .await;
    let ids = submit(&c, 2).await;
    controller_pass(&c).await;
    until(Duration::from_secs(10), "both run", || async {
        local.runs().len() == 2
    })
    .await;
    let lease = node_lease(&c, "n1").await;

    // The agent dies; its lease expires; the controller closes its tasks as lost.
    n.kill().await;
    until(Duration::from_secs(10), "the node record gone", || async {
        node_lease(&c, "n1").await.is_none()
    })
    .await;
    let report = controller_pass(&c).await;
    assert_eq!(report.closed.len(), 2, "{report:?}");
    for (_, reason) in &report.closed {
        assert_eq!(reason, &berth_cluster::reconcile::lost("n1"));
    }
    let v = c.view().await.unwrap();
    assert!(
        ids.iter()
            .all(|id| v.tasks[id].value.stop_code == Some(StopCode::TerminationNotice))
    );
    let (left, _) = c.assignments("n1").await.unwrap();
    assert!(left.is_empty(), "{left:?}");

    // Back: both copies are stopped and released before the node registers with a new lease.
    let n = Running::start(&etcd, config("n1", 2), &local);
    until(Duration::from_secs(10), "registered again", || async {
        node_lease(&c, "n1").await.is_some()
    })
    .await;
    {
        let i = local.inner.lock().unwrap();
        let mut released = i.released.clone();
        released.sort();
        let mut want = ids.clone();
        want.sort();
        assert_eq!(released, want);
        for id in &ids {
            assert_eq!(i.status[id].last_status, LastStatus::Stopped);
            assert_eq!(i.status[id].stopped_reason.as_deref(), Some(node::ORPHANED));
        }
    }
    assert_ne!(node_lease(&c, "n1").await, lease, "a new lease");
    assert_eq!(local.runs().len(), 2, "nothing ran again");
    // No status of the released tasks under the new lease.
    let v = c.view().await.unwrap();
    assert!(
        !v.statuses.keys().any(|(node, _)| node == "n1"),
        "{:?}",
        v.statuses
    );
    assert!(
        !c.view()
            .await
            .unwrap()
            .tasks
            .values()
            .any(|t| t.value.node.is_some() && !t.value.is_closed())
    );
    n.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_node_loop_with_the_same_name_is_refused_and_the_first_keeps_its_node() {
    let etcd = EtcdCluster::start("node-twice", 3);
    let c = Cluster::connect(&etcd.endpoint_list()).await.unwrap();
    let first_local = FakeLocal::new();
    let first = Running::start(&etcd, config("n1", 3), &first_local);
    until(Duration::from_secs(20), "n1 registered", || async {
        node_lease(&c, "n1").await.is_some()
    })
    .await;
    let lease = node_lease(&c, "n1").await;
    let ids = submit(&c, 1).await;
    controller_pass(&c).await;

    // Another agent (its own memory) as n1: it waits out the holder's TTL (3 s) and a margin,
    // then is refused, naming the node; it never ran n1's task.
    let second_local = FakeLocal::new();
    let started = Instant::now();
    let second = Running::start(&etcd, config("n1", 3), &second_local);
    let refused = tokio::time::timeout(Duration::from_secs(30), second.handle)
        .await
        .expect("the second loop ends")
        .expect("joined")
        .expect_err("refused");
    eprintln!("refused after {:?}: {refused}", started.elapsed());
    assert_eq!(refused.node, "n1");
    assert_eq!(Some(refused.holder.lease), lease);
    assert!(
        refused
            .to_string()
            .starts_with("node n1 is already registered by another agent"),
        "{refused}"
    );
    assert!(second_local.inner.lock().unwrap().runs.is_empty());
    // The first keeps its registration and its task.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(node_lease(&c, "n1").await, lease);
    assert_eq!(first_local.inner.lock().unwrap().runs, ids);
    first.kill().await;
}
