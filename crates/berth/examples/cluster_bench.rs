//! The cluster benchmark: a simulated fleet against a real 3-member etcd (its own, on loopback,
//! data on this machine's disk). N node agents run in this process — berth-cluster's real node
//! loop (`node::run`: lease, assignment watch, coalesced status reports), each task run by the
//! engine's real actor on the fake runtime — and the real `berth controller` binary runs beside
//! them as its own process. T tasks are submitted while no controller runs, then the controller
//! starts and the clock with it.
//!
//! Measured in one run:
//! - **etcd's floor**: guarded one-task transactions (the shape of a submit) one after another,
//!   and 64 in flight at once — what this etcd on this disk can commit;
//! - submits per second (64 in flight);
//! - placements per second (first to last placement as a watch sees them; and the placements of
//!   the controller's passes over their duration, from its log) and the time from its start
//!   until every task is placed and until every node reports every task RUNNING;
//! - etcd revisions (raft commits) and key writes per task, from a watch over `/berth/` during
//!   the controller's run;
//! - the controller process's CPU time (from /proc), per thousand tasks and as a share of a core.
//!
//! ```sh
//! scripts/bench-cluster [NODES=200] [TASKS=2000]   # builds this and berth in release mode
//! ```

use berth_cluster::node::{self, Local, LocalStatus, Memory, NodeConfig};
use berth_cluster::record::{LastStatus, Resources, TaskRecord};
use berth_cluster::store::{Cluster, WatchEvent};
use berth_engine::fake::FakeRuntime;
use berth_engine::{Command, RunConfig, StopKind, TaskState};
use berth_testkit::etcd::EtcdCluster;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::{Child, Command as Process, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

const IMAGE: &str = "bench/app:1";

/// A running task's snapshot and command channel.
type Handle = (watch::Receiver<TaskState>, mpsc::Sender<Command>);

/// One simulated node's local side: the engine's actors on a fake runtime shared by the fleet,
/// its memory in memory.
struct SimNode {
    rt: Arc<FakeRuntime>,
    dir: PathBuf,
    memory: Mutex<Memory>,
    tasks: Mutex<HashMap<String, Handle>>,
    changes: watch::Sender<u64>,
}

impl SimNode {
    fn lock_memory(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn lock_tasks(&self) -> std::sync::MutexGuard<'_, HashMap<String, Handle>> {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Local for SimNode {
    /// Its memory is in memory: nothing fails.
    type Error = std::convert::Infallible;

    async fn memory(&self) -> Result<Memory, Self::Error> {
        Ok(self.lock_memory().clone())
    }

    async fn run(
        &self,
        task: TaskRecord,
        fence: i64,
        revision: i64,
        stop: Option<String>,
    ) -> Result<(), Self::Error> {
        let mut state = TaskState::new(
            task.id.clone(),
            task.definition,
            berth_engine::report::now_ms(),
        );
        if let Some(r) = &stop {
            state.request_stop(r, StopKind::Requested);
        }
        {
            let mut m = self.lock_memory();
            m.accepted.insert(task.id.clone(), fence);
            m.revision = revision;
        }
        let (ctx, crx) = mpsc::channel(4);
        let (stx, srx) = watch::channel(state.clone());
        let (rtx, mut rrx) = mpsc::unbounded_channel();
        tokio::spawn(async move { while rrx.recv().await.is_some() {} });
        self.lock_tasks()
            .insert(task.id.clone(), (srx.clone(), ctx));
        let changes = self.changes.clone();
        let mut snapshots = srx;
        tokio::spawn(async move {
            changes.send_modify(|n| *n += 1);
            while snapshots.changed().await.is_ok() {
                changes.send_modify(|n| *n += 1);
            }
        });
        tokio::spawn(berth_engine::run_task(
            self.rt.clone(),
            state,
            RunConfig::new(self.dir.clone()),
            rtx,
            crx,
            stx,
        ));
        Ok(())
    }

    async fn stop(&self, id: &str, reason: &str) {
        let tx = self.lock_tasks().get(id).map(|(_, c)| c.clone());
        if let Some(tx) = tx {
            let _ = tx
                .send(Command::Stop {
                    reason: reason.into(),
                })
                .await;
        }
    }

    async fn release(&self, id: &str, revision: i64, reason: &str) -> Result<(), Self::Error> {
        self.stop(id, reason).await;
        let mut m = self.lock_memory();
        m.accepted.remove(id);
        m.revision = revision;
        self.changes.send_modify(|n| *n += 1);
        Ok(())
    }

    async fn seen(&self, revision: i64) -> Result<(), Self::Error> {
        self.lock_memory().revision = revision;
        Ok(())
    }

    async fn save_lease(&self, lease: i64) -> Result<(), Self::Error> {
        self.lock_memory().lease = Some(lease);
        Ok(())
    }

    async fn settled(&self, _ids: &[String]) {}

    fn statuses(&self) -> BTreeMap<String, (i64, LocalStatus)> {
        let accepted = self.lock_memory().accepted.clone();
        let tasks = self.lock_tasks();
        accepted
            .into_iter()
            .filter_map(|(id, fence)| {
                let status = LocalStatus::of(&tasks.get(&id)?.0.borrow());
                Some((id, (fence, status)))
            })
            .collect()
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

fn definition() -> berth_model::TaskDefinition {
    let json = format!(
        r#"{{"family":"bench","containerDefinitions":[{{"name":"app","image":"{IMAGE}","cpu":128,"memory":128}}]}}"#
    );
    berth_model::parse(&json).expect("valid").definition
}

/// The controller's CPU time so far (user + system), from /proc/PID/stat.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the name.
    let total = ticks(11) + ticks(12);
    // /proc counts in USER_HZ ticks, 100 per second on Linux (x86_64 and arm64).
    Duration::from_millis(total * 10)
}

/// Guarded single-key transactions (a submit's shape): `n` one after another, then `n` with 64
/// in flight; transactions per second of each.
async fn etcd_floor(c: &Cluster, n: usize) -> (f64, f64) {
    let task = |i: usize| {
        TaskRecord::pending(format!("floor-{i:06}"), definition(), vec![], vec![], 1).expect("task")
    };
    let t = Instant::now();
    for i in 0..n {
        c.submit(&task(i)).await.expect("floor submit");
    }
    let sequential = n as f64 / t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for i in n..2 * n {
        if set.len() >= 64 {
            set.join_next().await;
        }
        let c = c.clone();
        let rec = task(i);
        set.spawn(async move { c.submit(&rec).await.expect("floor submit") });
    }
    while set.join_next().await.is_some() {}
    let concurrent = n as f64 / t.elapsed().as_secs_f64();
    // Out of the way of the measured run: deleted through the controller's own guarded deletes.
    let (floor, _) = c.tasks().await.expect("tasks");
    let deletes: Vec<_> = floor.iter().map(berth_cluster::txns::forgetting).collect();
    c.commit_all(&deletes)
        .await
        .expect("delete the floor's tasks");
    (sequential, concurrent)
}

struct Controller(Child);

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let mut args = std::env::args().skip(1);
    let nodes: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(200);
    let tasks: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(2000);
    let berth = std::env::current_exe()
        .ok()
        .and_then(|p| Some(p.parent()?.parent()?.join("berth")))
        .filter(|p| p.exists())
        .unwrap_or_else(|| {
            panic!(
                "the berth binary is not beside the examples directory: run scripts/bench-cluster"
            )
        });

    let etcd = EtcdCluster::start("bench", 3);
    let endpoints = etcd.endpoint_list();
    let c = Cluster::connect(&endpoints).await.expect("connect");
    let (floor_seq, floor_conc) = etcd_floor(&c, 500).await;
    eprintln!(
        "etcd floor: {floor_seq:.0} txn/s one at a time, {floor_conc:.0} txn/s with 64 in flight"
    );

    // The fleet.
    let rt = Arc::new(FakeRuntime::new());
    rt.add_image(IMAGE);
    let dir = tempfile::tempdir().expect("tempdir");
    let stop = CancellationToken::new();
    for i in 0..nodes {
        let local = Arc::new(SimNode {
            rt: rt.clone(),
            dir: dir.path().to_path_buf(),
            memory: Mutex::new(Memory::default()),
            tasks: Mutex::new(HashMap::new()),
            changes: watch::channel(0).0,
        });
        let config = NodeConfig {
            name: format!("node-{i:04}"),
            capacity: Resources {
                cpu: 4096,
                memory_mib: 8192,
            },
            attributes: BTreeMap::from([("zone".to_owned(), format!("z{}", i % 3))]),
            version: "bench".into(),
            lease_ttl: Duration::from_secs(10),
            stop_wait: Duration::from_secs(5),
        };
        tokio::spawn(node::run(
            berth_cluster::connect::Settings::insecure(endpoints.clone()),
            config,
            local,
            stop.clone(),
        ));
    }
    let t = Instant::now();
    loop {
        let v = c.view().await.expect("view");
        if v.nodes.len() == nodes {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "only {} nodes registered",
            v.nodes.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("{nodes} nodes registered in {:?}", t.elapsed());

    // Submits, 64 in flight, while no controller runs.
    let t = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..tasks {
        if set.len() >= 64 {
            set.join_next().await;
        }
        let c = c.clone();
        let rec = TaskRecord::pending(
            berth_engine::new_task_id(),
            definition(),
            vec![],
            vec![],
            berth_cluster::now_ms(),
        )
        .expect("task");
        set.spawn(async move { c.submit(&rec).await.expect("submit") });
    }
    while set.join_next().await.is_some() {}
    let submit_rate = tasks as f64 / t.elapsed().as_secs_f64();

    // The controller, and a watch that counts every write from here on.
    let mut view = c.view().await.expect("view");
    let start_rev = view.revision;
    let mut w = c.watch("/berth/", start_rev + 1).await.expect("watch");
    let log = dir.path().join("controller.log");
    let child = Process::new(&berth)
        .args([
            "controller",
            "--etcd",
            &endpoints.join(","),
            "--name",
            "bench",
        ])
        .args(["--lease-ttl", "5s", "--interval", "200ms"])
        .env("BERTH_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("start berth controller");
    let pid = child.id();
    let controller = Controller(child);
    let started = Instant::now();
    let cpu_before = cpu_time(pid);
    let (mut first_placed, mut all_placed, mut all_running) = (None, None, None);
    let mut writes = 0u64;
    let mut last_rev = start_rev;
    let limit = Duration::from_secs(600);
    while all_running.is_none() {
        let (events, seen) = tokio::time::timeout(limit, w.next())
            .await
            .expect("no write for 10 minutes")
            .expect("watch");
        for e in events {
            writes += 1;
            last_rev = last_rev.max(e.revision());
            match e {
                WatchEvent::Put {
                    key,
                    value,
                    mod_revision,
                } => view.put(&key, &value, mod_revision),
                WatchEvent::Delete { key, .. } => view.delete(&key),
            }
        }
        view.revision = view.revision.max(seen);
        let placed = view
            .tasks
            .values()
            .filter(|t| t.value.node.is_some())
            .count();
        if placed > 0 && first_placed.is_none() {
            first_placed = Some(started.elapsed());
        }
        if placed == tasks && all_placed.is_none() {
            all_placed = Some(started.elapsed());
        }
        let running = view
            .tasks
            .values()
            .filter(|t| view.last_status(&t.value) == LastStatus::Running)
            .count();
        if running == tasks {
            all_running = Some(started.elapsed());
        }
    }
    let cpu = cpu_time(pid).saturating_sub(cpu_before);
    // The controller's own account: its passes that placed, how many and how long they took.
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let field = |line: &str, name: &str| -> u64 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let (mut pass_placed, mut pass_ms) = (0u64, 0u64);
    for line in text.lines().filter(|l| l.contains("controller pass")) {
        let placed = field(line, "placed");
        if placed > 0 {
            pass_placed += placed;
            pass_ms += field(line, "took_ms");
        }
    }
    let wall = started.elapsed();
    drop(controller);
    stop.cancel();
    let first = first_placed.unwrap_or_default();
    let placed_at = all_placed.unwrap_or_default();
    let running_at = all_running.unwrap_or_default();
    let place_rate = tasks as f64 / (placed_at - first).as_secs_f64().max(0.001);
    let revisions = (last_rev - start_rev) as f64 / tasks as f64;
    println!(
        "cluster benchmark: {nodes} nodes (in-process, engine on the fake runtime), {tasks} tasks, 3-member etcd on loopback"
    );
    println!("  etcd floor, guarded txns one at a time   {floor_seq:>9.0} /s");
    println!("  etcd floor, guarded txns 64 in flight    {floor_conc:>9.0} /s");
    println!(
        "  submits (64 in flight)                   {submit_rate:>9.0} /s   ({:.2}x the floor)",
        submit_rate / floor_conc
    );
    println!(
        "  placements (first to last)               {place_rate:>9.0} /s   ({:.2}x the floor)",
        place_rate / floor_conc
    );
    println!(
        "  placements, the controller's passes      {:>9.0} /s   ({pass_placed} placed by passes of {pass_ms} ms in all)",
        pass_placed as f64 * 1000.0 / pass_ms.max(1) as f64
    );
    println!(
        "  controller start -> first placement      {:>9.0} ms",
        first.as_secs_f64() * 1000.0
    );
    println!(
        "  controller start -> all placed           {:>9.0} ms",
        placed_at.as_secs_f64() * 1000.0
    );
    println!(
        "  controller start -> all RUNNING          {:>9.0} ms",
        running_at.as_secs_f64() * 1000.0
    );
    let avg = |total: usize, n: usize| total as f64 / n.max(1) as f64;
    let enc = berth_cluster::record::encode::<TaskRecord>;
    let task_bytes = avg(
        view.tasks.values().map(|t| enc(&t.value).len()).sum(),
        view.tasks.len(),
    );
    let status_bytes = avg(
        view.statuses
            .values()
            .map(|s| berth_cluster::record::encode(s).len())
            .sum(),
        view.statuses.len(),
    );
    let node_bytes = avg(
        view.nodes
            .values()
            .map(|n| berth_cluster::record::encode(n).len())
            .sum(),
        view.nodes.len(),
    );
    let assignment_bytes = berth_cluster::record::encode(&berth_cluster::record::Assignment {
        task: berth_engine::new_task_id(),
        fence: last_rev,
        desired_status: berth_cluster::record::DesiredStatus::Running,
        reason: None,
    })
    .len();
    println!(
        "  value bytes: task {task_bytes:.0}, status {status_bytes:.0}, assignment {assignment_bytes}, node {node_bytes:.0}"
    );
    println!("  etcd revisions (commits) per task        {revisions:>9.2}");
    println!(
        "  etcd key writes per task                 {:>9.2}",
        writes as f64 / tasks as f64
    );
    println!(
        "  controller CPU                           {:>9.0} ms   ({:.0} ms per 1000 tasks, {:.0}% of a core over {:.1} s)",
        cpu.as_secs_f64() * 1000.0,
        cpu.as_secs_f64() * 1000.0 * 1000.0 / tasks as f64,
        100.0 * cpu.as_secs_f64() / wall.as_secs_f64(),
        wall.as_secs_f64()
    );
    drop(etcd);
}
