//! `berth controller` and `berth cluster …` as processes, against a real 3-member etcd cluster of
//! the test's own (`berth_testkit::etcd`). Nodes are registered by the test, and the test plays
//! their agents (it writes the statuses a node would report, under the node's lease, with the
//! task's fence), so what is checked is the control plane: placement through the controllers,
//! the leader's loss, stops, services and their rolling updates, the CLI's output and its
//! refusals, a CLI cut off from etcd by a `berth_testkit::tcp_proxy::ProxySet`, and what the
//! shared harness (`common::cluster`) can show without node agents. Run:
//! `scripts/test -p berth --test cluster_cli`.

mod common;

use berth_cluster::record::{DesiredStatus, HealthStatus, NodeRecord, Resources, StatusRecord};
use berth_cluster::store::Cluster;
use berth_testkit::etcd::EtcdCluster;
use berth_testkit::tcp_proxy::ProxySet;
use common::cluster::{
    Controller, Fleet, berth, cluster_json, json_of, nodes, ps, submit, wait_until,
};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Waits until every task `ps` lists has a node; returns task id → node and the time it took.
fn wait_placed(endpoints: &str, n: usize, limit: Duration) -> (BTreeMap<String, String>, Duration) {
    let start = Instant::now();
    loop {
        let tasks = ps(endpoints);
        let placed: BTreeMap<String, String> = tasks
            .iter()
            .filter_map(|t| {
                Some((
                    t["task"].as_str()?.to_owned(),
                    t["node"].as_str()?.to_owned(),
                ))
            })
            .collect();
        if tasks.len() == n && placed.len() == n {
            return (placed, start.elapsed());
        }
        assert!(
            start.elapsed() < limit,
            "not all {n} tasks placed within {limit:?}: {tasks:#?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Registers nodes (2048 CPU units and MiB each, attribute `zone=z-<name>`) under leases of
/// their own; node → lease.
fn register(
    rt: &tokio::runtime::Runtime,
    cluster: &Cluster,
    names: &[&str],
) -> BTreeMap<String, i64> {
    let mut leases = BTreeMap::new();
    for name in names {
        rt.block_on(async {
            let lease = cluster.grant(600).await.unwrap();
            let mut attributes = BTreeMap::new();
            attributes.insert("zone".to_owned(), format!("z-{name}"));
            cluster
                .put_node(&NodeRecord {
                    name: (*name).to_owned(),
                    capacity: Resources {
                        cpu: 2048,
                        memory_mib: 2048,
                    },
                    attributes,
                    version: "test".to_owned(),
                    registered_at_ms: 1,
                    lease,
                })
                .await
                .unwrap();
            leases.insert((*name).to_owned(), lease);
        });
    }
    leases
}

/// Plays the node agent of the task's node: reports `status` for the task's current placement
/// (its fence), under the node's lease.
fn report(
    rt: &tokio::runtime::Runtime,
    cluster: &Cluster,
    leases: &BTreeMap<String, i64>,
    task: &str,
    status: &str,
) {
    let t = rt
        .block_on(cluster.task(task))
        .unwrap()
        .unwrap_or_else(|| panic!("no task {task}"))
        .value;
    let node = t
        .node
        .unwrap_or_else(|| panic!("task {task} is not placed"));
    let record = StatusRecord {
        task: task.to_owned(),
        fence: t.fence.unwrap(),
        // The ECS word as the node writes it.
        last_status: serde_json::from_value(status.into()).unwrap(),
        health_status: HealthStatus::Unknown,
        stopped_reason: (status == "STOPPED").then(|| "stopped by the test's node".to_owned()),
        failed_to_start: false,
        updated_at_ms: 1,
    };
    rt.block_on(cluster.put_statuses(&node, leases[&node], &[record]))
        .unwrap();
}

/// Reads `ps` until `done` says so, calling `check` on every read (an invariant that must hold
/// throughout); the tasks of the read that satisfied `done`.
fn wait_ps(
    endpoints: &str,
    limit: Duration,
    what: &str,
    check: &dyn Fn(&[serde_json::Value]),
    done: &dyn Fn(&[serde_json::Value]) -> bool,
) -> Vec<serde_json::Value> {
    let start = Instant::now();
    loop {
        let tasks = ps(endpoints);
        check(&tasks);
        if done(&tasks) {
            return tasks;
        }
        assert!(
            start.elapsed() < limit,
            "{what}: not within {limit:?}: {tasks:#?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn str_of<'a>(v: &'a serde_json::Value, field: &str) -> &'a str {
    v[field].as_str().unwrap_or("")
}

/// A task the controller has not closed.
fn open(t: &serde_json::Value) -> bool {
    t["stoppedAtMs"].is_null()
}

fn per_node(placed: &BTreeMap<String, String>) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for node in placed.values() {
        *out.entry(node.clone()).or_default() += 1;
    }
    out
}

#[test]
fn controllers_place_through_etcd_and_the_next_one_leads_when_the_leader_dies() {
    let etcd = EtcdCluster::start("cli", 3);
    let endpoints = etcd.endpoints();
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt
        .block_on(Cluster::connect(&etcd.endpoint_list()))
        .unwrap();
    let leases = register(&rt, &cluster, &["n1", "n2", "n3"]);
    let def = dir.path().join("web.json");
    std::fs::write(
        &def,
        r#"{"family":"web","containerDefinitions":[{"name":"app","image":"busybox","cpu":128,"memory":128}]}"#,
    )
    .unwrap();

    let mut a = Some(Controller::start(dir.path(), "c1", &endpoints));
    let b = Controller::start(dir.path(), "c2", &endpoints);
    let ids = submit(&endpoints, &def, 6);
    assert_eq!(ids.len(), 6);
    let (placed, took) = wait_placed(&endpoints, 6, Duration::from_secs(15));
    eprintln!("6 tasks placed in {took:?}");
    assert_eq!(
        per_node(&placed),
        BTreeMap::from([("n1".into(), 2), ("n2".into(), 2), ("n3".into(), 2)])
    );

    // Exactly one leads.
    let leading: Vec<bool> = [a.as_ref().unwrap().leads(), b.leads()].into();
    assert_eq!(
        leading.iter().filter(|l| **l).count(),
        1,
        "c1: {}\nc2: {}",
        a.as_ref().unwrap().log(),
        b.log()
    );

    // `berth cluster nodes` shows what is reserved where.
    let nodes = json_of(&berth(&[
        "cluster", "nodes", "--etcd", &endpoints, "--output", "json",
    ]));
    for n in nodes["nodes"].as_array().unwrap() {
        assert_eq!(n["tasks"], 2, "{n}");
        assert_eq!(n["reserved"]["memoryMib"], 256, "{n}");
        assert_eq!(n["status"], "ACTIVE");
    }
    let text = berth(&["cluster", "nodes", "--etcd", &endpoints]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.starts_with("NODE"), "{text}");
    assert!(
        text.contains("256/2048") && text.contains("zone=z-n1"),
        "{text}"
    );

    // kill -9 the leader: the other leads once the leader's lease (2 s) expires, and places.
    let (mut leader, other) = if leading[0] {
        (a.take().unwrap(), &b)
    } else {
        (b, a.as_ref().unwrap())
    };
    assert!(leader.running(), "{}", leader.log());
    leader.kill9();
    let killed = Instant::now();
    submit(&endpoints, &def, 3);
    let (placed, _) = wait_placed(&endpoints, 9, Duration::from_secs(15));
    let took = killed.elapsed();
    eprintln!("3 more placed {took:?} after the leader was killed");
    assert!(took < Duration::from_secs(2 + 5), "took {took:?}");
    assert!(other.leads(), "{}", other.log());
    assert_eq!(
        per_node(&placed).values().copied().collect::<Vec<_>>(),
        [3, 3, 3]
    );
    // No task placed twice: one assignment per task, on the node the task names.
    let mut assigned = BTreeMap::new();
    for n in ["n1", "n2", "n3"] {
        for asg in rt.block_on(cluster.assignments(n)).unwrap().0 {
            assert!(
                assigned.insert(asg.task.clone(), n.to_owned()).is_none(),
                "{} twice",
                asg.task
            );
        }
    }
    assert_eq!(assigned, placed);

    // Drain: the node takes no new task; ps in text says where each task is.
    let out = berth(&["cluster", "drain", "n1", "--etcd", &endpoints]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "n1: DRAINING\n");
    let new = submit(&endpoints, &def, 1);
    let (placed, _) = wait_placed(&endpoints, 10, Duration::from_secs(10));
    assert_ne!(placed[&new[0]], "n1");
    let text = berth(&["cluster", "ps", "--etcd", &endpoints]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.starts_with("TASK"), "{text}");
    assert!(
        text.contains(&new[0][..12]) && text.contains("web:0") && text.contains("PROVISIONING"),
        "{text}"
    );

    // Stop by prefix: desired STOPPED, its assignment says STOPPED, and it is STOPPING until
    // its node (the test) reports it stopped; it still reserves its node's resources.
    let out = berth(&["cluster", "stop", &new[0][..12], "--etcd", &endpoints]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{}: STOPPING\n", new[0]),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let node = placed[&new[0]].clone();
    let left = rt.block_on(cluster.assignments(&node)).unwrap().0;
    let asg = left
        .iter()
        .find(|a| a.task == new[0])
        .expect("assignment kept");
    assert_eq!(asg.desired_status, DesiredStatus::Stopped);
    assert_eq!(asg.reason.as_deref(), Some("Task stopped by user"));
    let stopping = ps(&endpoints)
        .into_iter()
        .find(|t| t["task"] == new[0].as_str())
        .unwrap();
    assert_eq!(stopping["desiredStatus"], "STOPPED");
    assert_eq!(stopping["reason"], "Task stopped by user");
    assert_eq!(stopping["stopCode"], "UserInitiated");
    assert_eq!(stopping["lastStatus"], "PROVISIONING");
    assert!(stopping["stoppedAtMs"].is_null(), "{stopping}");
    let node_tasks = |endpoints: &str| {
        let nodes = json_of(&berth(&[
            "cluster", "nodes", "--etcd", endpoints, "--output", "json",
        ]));
        nodes["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["node"] == node.as_str())
            .unwrap()["tasks"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(node_tasks(&endpoints), 4);
    // Stopping it again changes nothing and says so.
    let again = json_of(&berth(&[
        "cluster", "stop", &new[0], "--etcd", &endpoints, "--output", "json",
    ]));
    assert_eq!(
        again,
        serde_json::json!({"task": new[0], "desiredStatus": "STOPPED", "lastStatus": "PROVISIONING"})
    );

    // The node reports it stopped: the controller closes it (keeping the user's reason and
    // code) and deletes its assignment; it no longer counts on the node.
    report(&rt, &cluster, &leases, &new[0], "STOPPED");
    let tasks = wait_ps(
        &endpoints,
        Duration::from_secs(10),
        "the stopped task closed",
        &|_| {},
        &|tasks| {
            tasks
                .iter()
                .any(|t| t["task"] == new[0].as_str() && !open(t))
        },
    );
    let closed = tasks.iter().find(|t| t["task"] == new[0].as_str()).unwrap();
    assert_eq!(closed["lastStatus"], "STOPPED");
    assert_eq!(closed["reason"], "Task stopped by user");
    assert_eq!(closed["stopCode"], "UserInitiated");
    assert!(
        !rt.block_on(cluster.assignments(&node))
            .unwrap()
            .0
            .iter()
            .any(|a| a.task == new[0])
    );
    assert_eq!(node_tasks(&endpoints), 3);

    // A task no node can take stays pending; stopping it closes it at once.
    let nowhere = json_of(&berth(&[
        "cluster",
        "submit",
        def.to_str().unwrap(),
        "--placement-constraints",
        r#"[{"type":"memberOf","expression":"attribute:zone == nowhere"}]"#,
        "--etcd",
        &endpoints,
        "--output",
        "json",
    ]))["tasks"][0]
        .as_str()
        .unwrap()
        .to_owned();
    let out = json_of(&berth(&[
        "cluster", "stop", &nowhere, "--etcd", &endpoints, "--output", "json",
    ]));
    assert_eq!(
        out,
        serde_json::json!({"task": nowhere, "desiredStatus": "STOPPED", "lastStatus": "STOPPED"})
    );
    let t = ps(&endpoints)
        .into_iter()
        .find(|t| t["task"] == nowhere.as_str())
        .unwrap();
    assert!(t["node"].is_null() && !open(&t), "{t}");
    assert_eq!(t["lastStatus"], "STOPPED");

    let out = berth(&["cluster", "stop", "nosuchtask", "--etcd", &endpoints]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("no task \"nosuchtask\" in the cluster"),
        "{err}"
    );
}

/// `berth cluster service …` with its output as JSON; panics when it fails.
fn service(endpoints: &str, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["cluster", "service"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--etcd", endpoints, "--output", "json"]);
    json_of(&berth(&all))
}

/// `berth cluster service …` that must fail; its standard error.
fn refused(endpoints: &str, args: &[&str]) -> String {
    let mut all = vec!["cluster", "service"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--etcd", endpoints]);
    let out = berth(&all);
    assert!(!out.status.success(), "{args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `berth cluster service ls --output json`'s services by name.
fn services(endpoints: &str) -> BTreeMap<String, serde_json::Value> {
    service(endpoints, &["ls"])["services"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (str_of(s, "service").to_owned(), s.clone()))
        .collect()
}

#[test]
fn services_are_started_rolled_over_and_removed_by_the_controller() {
    const D: usize = 3;
    let etcd = EtcdCluster::start("svc", 3);
    let endpoints = etcd.endpoints();
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt
        .block_on(Cluster::connect(&etcd.endpoint_list()))
        .unwrap();
    let leases = register(&rt, &cluster, &["n1", "n2", "n3"]);
    let v1 = dir.path().join("web-1.json");
    let v2 = dir.path().join("web-2.json");
    for (file, revision) in [(&v1, 1), (&v2, 2)] {
        std::fs::write(
            file,
            format!(
                r#"{{"family":"web","revision":{revision},"containerDefinitions":[{{"name":"app","image":"busybox","cpu":128,"memory":128}}]}}"#
            ),
        )
        .unwrap();
    }
    let (v1, v2) = (v1.to_str().unwrap(), v2.to_str().unwrap());
    let _controller = Controller::start(dir.path(), "c1", &endpoints);

    // Create: ECS's defaults, a deployment id of ECS's form.
    let created = service(&endpoints, &["create", "web", v1, "--desired-count", "3"]);
    let d1 = str_of(&created, "deployment").to_owned();
    assert!(
        d1.strip_prefix("ecs-svc/")
            .is_some_and(|n| n.len() == 19 && n.bytes().all(|b| b.is_ascii_digit())),
        "{created}"
    );
    assert_eq!(created["status"], "ACTIVE");
    assert_eq!(created["taskDefinition"], "web:1");
    assert_eq!(created["minimumHealthyPercent"], 100);
    assert_eq!(created["maximumPercent"], 200);
    // A service of no task (removed below without --force).
    service(&endpoints, &["create", "idle", v1, "--desired-count", "0"]);

    // The controller starts D tasks of the deployment and spreads them over the nodes.
    let web = |t: &serde_json::Value| t["service"] == "web";
    let tasks = wait_ps(
        &endpoints,
        Duration::from_secs(15),
        "3 service tasks placed",
        &|_| {},
        &|tasks| {
            tasks
                .iter()
                .filter(|t| web(t) && !t["node"].is_null())
                .count()
                == D
        },
    );
    let first: Vec<&serde_json::Value> = tasks.iter().filter(|t| web(t)).collect();
    assert_eq!(first.len(), D, "{tasks:#?}");
    let mut nodes: Vec<&str> = first.iter().map(|t| str_of(t, "node")).collect();
    nodes.sort();
    assert_eq!(nodes, ["n1", "n2", "n3"], "{first:#?}");
    for t in &first {
        assert_eq!(t["startedBy"], d1.as_str(), "{t}");
        assert_eq!(t["group"], "service:web", "{t}");
        assert_eq!(t["lastStatus"], "PROVISIONING", "{t}");
        assert_eq!(t["revision"], 1, "{t}");
    }
    let first: Vec<String> = first.iter().map(|t| str_of(t, "task").to_owned()).collect();
    for id in &first {
        report(&rt, &cluster, &leases, id, "RUNNING");
    }
    wait_ps(
        &endpoints,
        Duration::from_secs(5),
        "RUNNING reported",
        &|_| {},
        &|tasks| {
            tasks
                .iter()
                .filter(|t| web(t) && t["lastStatus"] == "RUNNING")
                .count()
                == D
        },
    );
    let ls = berth(&["cluster", "service", "ls", "--etcd", &endpoints]);
    let text = String::from_utf8_lossy(&ls.stdout);
    let row = format!("web   ACTIVE  3        3        0        {d1}  web:1");
    assert!(
        text.starts_with("NAME  STATUS  DESIRED  RUNNING  PENDING  DEPLOYMENT")
            && text.contains(&row),
        "{text}"
    );
    let ps_text = berth(&["cluster", "ps", "--etcd", &endpoints]);
    let ps_text = String::from_utf8_lossy(&ps_text.stdout);
    assert!(
        ps_text.starts_with("TASK") && ps_text.contains("SERVICE") && ps_text.contains(" web "),
        "{ps_text}"
    );

    // Refusals that need the cluster.
    let err = refused(&endpoints, &["create", "web", v1, "--desired-count", "1"]);
    assert!(
        err.contains("service \"web\" already exists")
            && err.contains("berth cluster service update web"),
        "{err}"
    );
    for args in [
        &["update", "nosuch", "--desired-count", "1"][..],
        &["rm", "nosuch"][..],
    ] {
        let err = refused(&endpoints, args);
        assert!(
            err.contains("no service \"nosuch\" in the cluster"),
            "{args:?}: {err}"
        );
    }
    let err = refused(&endpoints, &["update", "web", "--maximum-percent", "100"]);
    assert!(
        err.contains("--maximum-percent: 100 is not above --minimum-healthy-percent 100")
            && err.contains("never make progress"),
        "{err}"
    );
    let err = refused(&endpoints, &["rm", "web"]);
    assert!(
        err.contains("The service cannot be stopped while it is scaled above 0.")
            && err.contains("--desired-count 0")
            && err.contains("--force"),
        "{err}"
    );

    // A new definition revision: a new deployment. The new tasks start (at most 2×D open);
    // an old one is asked to stop only once a new one runs (at least D healthy throughout).
    let updated = service(&endpoints, &["update", "web", "--task-definition", v2]);
    let d2 = str_of(&updated, "deployment").to_owned();
    assert_ne!(d2, d1);
    assert_eq!(updated["newDeployment"], true);
    assert_eq!(updated["taskDefinition"], "web:2");
    let (d1c, d2c) = (d1.clone(), d2.clone());
    let of = move |tasks: &[serde_json::Value], d: &str| -> Vec<serde_json::Value> {
        tasks
            .iter()
            .filter(|t| t["service"] == "web" && open(t) && t["startedBy"] == d)
            .cloned()
            .collect()
    };
    let rollout = |tasks: &[serde_json::Value]| {
        let open_tasks = tasks.iter().filter(|t| web(t) && open(t)).count();
        assert!(open_tasks <= 2 * D, "more than 2×D open: {tasks:#?}");
        let healthy = tasks
            .iter()
            .filter(|t| web(t) && t["lastStatus"] == "RUNNING" && t["desiredStatus"] == "RUNNING")
            .count();
        assert!(healthy >= D, "fewer than D healthy: {tasks:#?}");
        let asked = of(tasks, &d1c)
            .iter()
            .filter(|t| t["desiredStatus"] == "STOPPED")
            .count();
        let closed_old = tasks
            .iter()
            .filter(|t| web(t) && !open(t) && t["startedBy"] == d1c.as_str())
            .count();
        let new_running = of(tasks, &d2c)
            .iter()
            .filter(|t| t["lastStatus"] == "RUNNING")
            .count();
        assert!(
            asked + closed_old <= new_running,
            "an old task asked to stop before a new one ran: {tasks:#?}"
        );
    };
    let tasks = wait_ps(
        &endpoints,
        Duration::from_secs(15),
        "the new deployment's tasks placed",
        &rollout,
        &|tasks| {
            of(tasks, &d2)
                .iter()
                .filter(|t| !t["node"].is_null())
                .count()
                == D
        },
    );
    let second: Vec<String> = of(&tasks, &d2)
        .iter()
        .map(|t| str_of(t, "task").to_owned())
        .collect();
    for t in of(&tasks, &d2) {
        assert_eq!(t["revision"], 2, "{t}");
    }
    for (i, id) in second.iter().enumerate() {
        report(&rt, &cluster, &leases, id, "RUNNING");
        // One more old task is asked to stop, and no more.
        let tasks = wait_ps(
            &endpoints,
            Duration::from_secs(10),
            "an old task asked to stop",
            &rollout,
            &|tasks| {
                let asked = tasks
                    .iter()
                    .filter(|t| {
                        web(t) && t["startedBy"] == d1.as_str() && t["desiredStatus"] == "STOPPED"
                    })
                    .count();
                asked == i + 1
            },
        );
        // Its node stops it and reports; the controller closes it.
        for t in of(&tasks, &d1) {
            if t["desiredStatus"] == "STOPPED" {
                let id = str_of(&t, "task").to_owned();
                report(&rt, &cluster, &leases, &id, "STOPPED");
            }
        }
        wait_ps(
            &endpoints,
            Duration::from_secs(10),
            "the old task closed",
            &rollout,
            &|tasks| of(tasks, &d1).len() == D - i - 1,
        );
    }
    let tasks = ps(&endpoints);
    for id in &first {
        let t = tasks.iter().find(|t| t["task"] == id.as_str()).unwrap();
        assert_eq!(t["lastStatus"], "STOPPED", "{t}");
        assert_eq!(t["stopCode"], "ServiceSchedulerInitiated", "{t}");
        assert_eq!(
            t["reason"],
            format!("Scaling activity initiated by (deployment {d2})"),
            "{t}"
        );
    }
    let ls = services(&endpoints);
    let s = &ls["web"];
    assert_eq!(
        (
            &s["runningCount"],
            &s["pendingCount"],
            &s["deployment"],
            &s["taskDefinition"]
        ),
        (
            &serde_json::json!(3),
            &serde_json::json!(0),
            &serde_json::json!(d2),
            &serde_json::json!("web:2")
        ),
        "{s}"
    );

    // A desired count alone keeps the deployment: one more task of it.
    let scaled = service(&endpoints, &["update", "web", "--desired-count", "4"]);
    assert_eq!(scaled["newDeployment"], false);
    assert_eq!(scaled["deployment"], d2.as_str());
    wait_ps(
        &endpoints,
        Duration::from_secs(10),
        "a fourth task placed",
        &|_| {},
        &|tasks| {
            of(tasks, &d2)
                .iter()
                .filter(|t| !t["node"].is_null())
                .count()
                == 4
        },
    );

    // A service scaled to 0 is removed without --force.
    let removed = service(&endpoints, &["rm", "idle"]);
    assert_eq!(removed["status"], "DRAINING");

    // rm --force: DRAINING (desired 0); it cannot be updated or created again meanwhile.
    let removed = service(&endpoints, &["rm", "web", "--force"]);
    assert_eq!(removed["status"], "DRAINING");
    let ls = services(&endpoints);
    assert_eq!(ls["web"]["status"], "DRAINING");
    assert_eq!(ls["web"]["desiredCount"], 0);
    let err = refused(&endpoints, &["update", "web", "--desired-count", "1"]);
    assert!(
        err.contains("service \"web\" is being removed (DRAINING)"),
        "{err}"
    );
    let err = refused(&endpoints, &["create", "web", v1, "--desired-count", "1"]);
    assert!(err.contains("still being removed (DRAINING)"), "{err}");
    // Every task is asked to stop, through its assignment too.
    let tasks = wait_ps(
        &endpoints,
        Duration::from_secs(10),
        "every task asked to stop",
        &|_| {},
        &|tasks| {
            let open_web: Vec<_> = tasks.iter().filter(|t| web(t) && open(t)).collect();
            open_web.len() == 4 && open_web.iter().all(|t| t["desiredStatus"] == "STOPPED")
        },
    );
    for t in tasks.iter().filter(|t| web(t) && open(t)) {
        let id = str_of(t, "task");
        let node = str_of(t, "node");
        let asg = rt
            .block_on(cluster.assignments(node))
            .unwrap()
            .0
            .into_iter()
            .find(|a| a.task == id)
            .unwrap_or_else(|| panic!("no assignment of {id}"));
        assert_eq!(asg.desired_status, DesiredStatus::Stopped, "{id}");
        report(&rt, &cluster, &leases, id, "STOPPED");
    }
    // The controller closes them and deletes the service; `idle` (no task) is gone too.
    let start = Instant::now();
    while !services(&endpoints).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:#?}",
            services(&endpoints)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let tasks = ps(&endpoints);
    assert!(
        tasks.iter().filter(|t| web(t)).all(|t| !open(t)),
        "{tasks:#?}"
    );
    let text = berth(&["cluster", "service", "ls", "--etcd", &endpoints]);
    assert_eq!(
        String::from_utf8_lossy(&text.stdout),
        "NAME  STATUS  DESIRED  RUNNING  PENDING  DEPLOYMENT  TASK DEFINITION\n"
    );
}

#[test]
fn bad_options_are_refused_with_their_name_and_a_fix() {
    let dir = tempfile::tempdir().unwrap();
    let def = dir.path().join("web.json");
    std::fs::write(
        &def,
        r#"{"family":"web","containerDefinitions":[{"name":"app","image":"busybox"}]}"#,
    )
    .unwrap();
    let file = def.to_str().unwrap();
    let unreachable = "http://127.0.0.1:1";
    for (args, wanted) in [
        (
            vec!["cluster", "ps", "--etcd", "127.0.0.1:2379"],
            "--etcd: \"127.0.0.1:2379\" is not an etcd client URL",
        ),
        (
            vec![
                "cluster",
                "submit",
                file,
                "--count",
                "11",
                "--etcd",
                unreachable,
            ],
            "--count: 11 is out of range; start 1 to 10",
        ),
        (
            vec![
                "cluster",
                "submit",
                file,
                "--placement-strategy",
                r#"[{"type":"binpack","field":"disk"}]"#,
                "--etcd",
                unreachable,
            ],
            "placementStrategy[0].field: binpack takes cpu or memory, not \"disk\"",
        ),
        (
            vec![
                "cluster",
                "submit",
                file,
                "--placement-constraints",
                r#"[{"type":"memberOf","expression":"attribute:a =~ b"}]"#,
                "--etcd",
                unreachable,
            ],
            "placementConstraints[0].expression: at 12: =~ (pattern matching) is not supported",
        ),
        (
            vec![
                "cluster",
                "submit",
                file,
                "--placement-constraints",
                "{",
                "--etcd",
                unreachable,
            ],
            "--placement-constraints: ",
        ),
        (
            vec!["cluster", "drain", "a/b", "--etcd", unreachable],
            "node \"a/b\" contains '/'",
        ),
        (
            vec!["controller", "--etcd", unreachable, "--lease-ttl", "500ms"],
            "--lease-ttl: 500ms is below 1s",
        ),
        (
            vec!["cluster", "stop", "", "--etcd", unreachable],
            "TASK: give a task id",
        ),
        (
            vec![
                "cluster",
                "service",
                "create",
                "web",
                file,
                "--desired-count",
                "5001",
                "--etcd",
                unreachable,
            ],
            "--desired-count: 5001 is above 5000, ECS's limit of tasks per service",
        ),
        (
            vec![
                "cluster",
                "service",
                "create",
                "web",
                file,
                "--desired-count",
                "1",
                "--minimum-healthy-percent",
                "101",
                "--etcd",
                unreachable,
            ],
            "--minimum-healthy-percent: 101 is above 100",
        ),
        (
            vec![
                "cluster",
                "service",
                "create",
                "web",
                file,
                "--desired-count",
                "1",
                "--maximum-percent",
                "99",
                "--etcd",
                unreachable,
            ],
            "--maximum-percent: 99 is below 100",
        ),
        (
            vec![
                "cluster",
                "service",
                "create",
                "web",
                file,
                "--desired-count",
                "1",
                "--minimum-healthy-percent",
                "50",
                "--maximum-percent",
                "50",
                "--etcd",
                unreachable,
            ],
            "--maximum-percent: 50 is below 100",
        ),
        (
            vec![
                "cluster",
                "service",
                "create",
                "web",
                file,
                "--desired-count",
                "1",
                "--maximum-percent",
                "100",
                "--etcd",
                unreachable,
            ],
            "--maximum-percent: 100 is not above --minimum-healthy-percent 100: a rolling update could never make progress",
        ),
        (
            vec![
                "cluster",
                "service",
                "create",
                "a/b",
                file,
                "--desired-count",
                "1",
                "--etcd",
                unreachable,
            ],
            "service \"a/b\" contains '/'",
        ),
        (
            vec![
                "cluster",
                "service",
                "create",
                "web",
                file,
                "--desired-count",
                "1",
                "--placement-strategy",
                r#"[{"type":"spread","field":"zone"}]"#,
                "--etcd",
                unreachable,
            ],
            "placementStrategy[0].field: spread takes instanceId, host or attribute:<name>",
        ),
        (
            vec!["cluster", "service", "update", "web", "--etcd", unreachable],
            "nothing to change: give --task-definition",
        ),
        (
            vec![
                "cluster",
                "service",
                "update",
                "web",
                "--minimum-healthy-percent",
                "200",
                "--etcd",
                unreachable,
            ],
            "--minimum-healthy-percent: 200 is above 100",
        ),
        (
            vec!["cluster", "service", "rm", "..", "--etcd", unreachable],
            "service \"..\" is not a name",
        ),
    ] {
        let out = berth(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(wanted), "{args:?}: {err}");
    }
    // etcd not there: a clear error naming the endpoints, within the call timeout.
    let start = Instant::now();
    let out = berth(&["cluster", "nodes", "--etcd", unreachable]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("etcd at http://127.0.0.1:1"), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn cluster_ps_cut_off_from_etcd_fails_naming_the_endpoints_and_works_after_heal() {
    let etcd = EtcdCluster::start("cli-cut", 3);
    let proxies = ProxySet::start(&etcd.client_addrs());
    let endpoints = proxies.endpoints();
    let dir = tempfile::tempdir().unwrap();
    let def = dir.path().join("web.json");
    std::fs::write(
        &def,
        r#"{"family":"web","containerDefinitions":[{"name":"app","image":"busybox","memory":64}]}"#,
    )
    .unwrap();
    let ids = submit(&endpoints, &def, 1);
    let listed: Vec<serde_json::Value> = ps(&endpoints);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["task"], ids[0].as_str());

    proxies.cut();
    let start = Instant::now();
    let out = berth(&["cluster", "ps", "--etcd", &endpoints, "--output", "json"]);
    let took = start.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("ps while cut off: failed after {took:?}: {err}");
    assert!(!out.status.success(), "ps succeeded while cut off");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(err.contains(&format!("etcd at {endpoints}")), "{err}");
    // A connection that is accepted but never answers looks like a member whose leader died
    // with the request: the call is tried on each member within the retry window (15 s); two
    // seconds more for the process and a loaded machine.
    assert!(
        took < berth_cluster::store::RETRY_WINDOW + Duration::from_secs(2),
        "{took:?}"
    );
    let stats = proxies.stats();
    assert!(stats.held >= 1, "ps's connections were held: {stats:?}");

    proxies.heal();
    let healed = Instant::now();
    let listed = wait_until(Duration::from_secs(5), "ps to work after the heal", || {
        let out = berth(&["cluster", "ps", "--etcd", &endpoints, "--output", "json"]);
        if out.status.success() {
            Ok(json_of(&out))
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    });
    eprintln!("ps worked {:?} after the heal", healed.elapsed());
    assert_eq!(listed["tasks"][0]["task"], ids[0].as_str(), "{listed}");
}

#[test]
fn wait_until_says_what_it_waited_for_and_the_last_state() {
    let mut calls = 0;
    let got = wait_until(Duration::from_secs(5), "the third call", || {
        calls += 1;
        if calls == 3 {
            Ok(calls)
        } else {
            Err(format!("call {calls}"))
        }
    });
    assert_eq!(got, 3);
    let failed = std::panic::catch_unwind(|| {
        wait_until(Duration::from_millis(300), "the moon to rise", || {
            Err::<(), _>("still below the horizon".to_owned())
        })
    });
    let message = failed
        .expect_err("it gives up")
        .downcast::<String>()
        .expect("a formatted panic message");
    assert!(
        message.contains("waited 300ms for the moon to rise"),
        "{message}"
    );
    assert!(message.contains("still below the horizon"), "{message}");
}

/// What the harness can show before node agents exist: submitted definitions carry the fleet's
/// label, `docker_running` sees the fleet's containers by label (not another test's), and
/// dropping the fleet kills its controllers and removes its containers.
#[test]
fn a_fleet_labels_what_it_submits_finds_its_containers_and_removes_them_when_dropped() {
    let mut fleet = Fleet::start("fleet");
    let controller_pid = fleet.controller("c1").child.as_ref().map(|c| c.id());
    let def = serde_json::json!({
        "family": "fleet-web",
        "containerDefinitions": [
            {"name": "app", "image": "busybox", "memory": 64, "dockerLabels": {"team": "a"}},
            {"name": "side", "image": "busybox", "memory": 32}
        ]
    });
    let ids = fleet.submit(&def, &["--count", "2"]);
    assert_eq!(ids.len(), 2);
    // No node: the controller leaves them pending, saying why.
    let pending = fleet.wait_until(Duration::from_secs(10), "a reason on both tasks", || {
        let tasks = fleet.ps();
        if tasks.len() == 2 && tasks.iter().all(|t| t["reason"].is_string()) {
            Ok(tasks)
        } else {
            Err(format!("{tasks:#?}"))
        }
    });
    assert!(
        pending.iter().all(|t| t["lastStatus"] == "PENDING"
            && t["reason"] == "No Container Instances were found in your cluster."),
        "{pending:#?}"
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let stored = rt
        .block_on(async {
            let c = Cluster::connect(&fleet.etcd.endpoint_list()).await?;
            c.task(&ids[0]).await
        })
        .unwrap()
        .expect("the task is stored");
    let labels: Vec<_> = stored
        .value
        .definition
        .container_definitions
        .iter()
        .map(|c| c.docker_labels.clone())
        .collect();
    assert_eq!(
        labels,
        [
            BTreeMap::from([
                ("berth.test".to_owned(), fleet.label().to_owned()),
                ("team".to_owned(), "a".to_owned())
            ]),
            BTreeMap::from([("berth.test".to_owned(), fleet.label().to_owned())]),
        ]
    );

    // A container as a node agent will start one, and another test's.
    let image = berth_testkit::test_image();
    let run = |test_label: &str| {
        berth_testkit::docker_cli(&[
            "run",
            "-d",
            "--label",
            &format!("berth.test={test_label}"),
            "--label",
            "berth.node=n1",
            &image,
            "sleep",
            "300",
        ])
        .trim()
        .to_owned()
    };
    let ours = run(fleet.label());
    let other_label = berth_testkit::unique_name("other-");
    let _other_guard = berth_testkit::LabelGuard::new("berth.test", other_label.clone());
    let other = run(&other_label);
    let found = fleet.docker_running(&[("berth.node", "n1")]);
    assert_eq!(
        found.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        [ours.as_str()],
        "{found:#?}"
    );
    assert_eq!(found[0].label("berth.test"), fleet.label());
    assert!(!found[0].name.starts_with('/'), "{found:#?}");
    assert!(fleet.docker_running(&[("berth.node", "n2")]).is_empty());

    drop(fleet);
    let left =
        berth_testkit::docker_cli(&["ps", "-aq", "--no-trunc", "--filter", &format!("id={ours}")]);
    assert_eq!(left.trim(), "", "the fleet's container is removed");
    let still =
        berth_testkit::docker_cli(&["ps", "-q", "--no-trunc", "--filter", &format!("id={other}")]);
    assert_eq!(
        still.trim(),
        other,
        "another test's container is left alone"
    );
    let pid = controller_pid.expect("the controller ran");
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the controller process is gone"
    );
}

/// `berth agent` as a node refuses bad node options before it does anything, each naming its
/// option, and a data directory serves one node name.
#[test]
fn node_options_are_refused_with_their_name_and_a_data_directory_keeps_its_node() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let socket = dir.path().join("api.sock");
    let agent = |extra: &[&str]| -> (bool, String) {
        let out = std::process::Command::new(common::cluster::BERTH)
            .args(["agent", "--data-dir"])
            .arg(&data)
            .arg("--api-socket")
            .arg(&socket)
            .args([
                "--introspection-addr",
                "off",
                "--metadata-addr",
                "127.0.0.1:0",
            ])
            .args(extra)
            .env_remove("BERTH_ETCD")
            .env_remove("BERTH_NODE")
            .output()
            .expect("run berth agent");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let etcd = ["--etcd", "http://127.0.0.1:1", "--etcd-insecure"];
    for (extra, wanted) in [
        (vec!["--node", "n1"], "--etcd"),
        (vec!["--node", "a/b"], "--node: node \"a/b\" contains '/'"),
        (
            vec!["--node", "n1", "--node-lease-ttl", "1s"],
            "--node-lease-ttl: 1s is below 2s",
        ),
        (
            vec!["--node", "n1", "--node-attribute", "zone"],
            "--node-attribute: \"zone\" is not KEY=VALUE",
        ),
        (
            vec!["--node", "n1", "--node-attribute", "ecs.os-type=windows"],
            "the ecs. prefix is kept for the attributes berth sets itself",
        ),
        (
            vec!["--node", "n1", "--node-attribute", "zone= a"],
            "is not an attribute value",
        ),
    ] {
        let mut args: Vec<&str> = if extra[0] == "--node" && wanted == "--etcd" {
            Vec::new()
        } else {
            etcd.to_vec()
        };
        args.extend(&extra);
        let (ok, err) = agent(&args);
        assert!(!ok, "{args:?} was accepted");
        assert!(err.contains(wanted), "{args:?}: {err}");
    }
    // The data directory is claimed by the first node name (the agent then goes on to Docker and
    // etcd, which this test stops it from reaching: the etcd port is closed, so it is killed).
    let mut first = std::process::Command::new(common::cluster::BERTH)
        .args(["agent", "--data-dir"])
        .arg(&data)
        .arg("--api-socket")
        .arg(&socket)
        .args([
            "--introspection-addr",
            "off",
            "--metadata-addr",
            "127.0.0.1:0",
        ])
        .args(etcd)
        .args(["--node", "n1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start berth agent");
    wait_until(Duration::from_secs(20), "the node name claimed", || {
        if data.join("berth.redb").exists() && socket.exists() {
            Ok(())
        } else {
            Err("no store and socket yet".to_owned())
        }
    });
    let _ = first.kill();
    let _ = first.wait();
    let (ok, err) = agent(&[etcd[0], etcd[1], etcd[2], "--node", "n2"]);
    assert!(!ok);
    assert!(
        err.contains("belongs to cluster node \"n1\"") && err.contains("--node n1"),
        "{err}"
    );
}

#[test]
fn a_lone_controller_outlives_an_etcd_outage_longer_than_its_lease_and_places_afterwards() {
    // The controller reaches etcd only through proxies, which the test cuts for longer than the
    // controller's lease (2 s) and the client's retry window (15 s): its lease is lost. It
    // stops leading, keeps running and campaigning, and once etcd answers again leads and
    // places a task submitted meanwhile.
    let etcd = EtcdCluster::start("cli-outage", 3);
    let endpoints = etcd.endpoints();
    let proxies = ProxySet::start(&etcd.client_addrs());
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt
        .block_on(Cluster::connect(&etcd.endpoint_list()))
        .unwrap();
    register(&rt, &cluster, &["n1"]);
    let def = dir.path().join("web.json");
    std::fs::write(
        &def,
        r#"{"family":"web","containerDefinitions":[{"name":"app","image":"busybox","cpu":128,"memory":128}]}"#,
    )
    .unwrap();
    let mut controller = Controller::start(dir.path(), "c1", &proxies.endpoints());
    submit(&endpoints, &def, 1);
    wait_placed(&endpoints, 1, Duration::from_secs(20));

    proxies.cut();
    let cut = Instant::now();
    let outage = Duration::from_secs(2 + 15 + 8);
    while cut.elapsed() < outage {
        assert!(
            controller.running(),
            "the controller exited {:?} into the outage:\n{}",
            cut.elapsed(),
            controller.log()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(
        controller.log().contains("lost the controller lease"),
        "the outage outlasted the lease:\n{}",
        controller.log()
    );
    submit(&endpoints, &def, 1);
    proxies.heal();
    let healed = Instant::now();
    let (placed, _) = wait_placed(&endpoints, 2, Duration::from_secs(45));
    eprintln!("placed {:?} after the heal", healed.elapsed());
    assert_eq!(per_node(&placed), BTreeMap::from([("n1".into(), 2)]));
    assert!(controller.running(), "{}", controller.log());
}

/// `berth cluster ARGS --etcd ENDPOINTS` that must fail: its exit code and standard error.
fn cluster_refused(endpoints: &str, args: &[&str]) -> (Option<i32>, String) {
    let mut all = vec!["cluster"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--etcd", endpoints]);
    let out = berth(&all);
    assert!(!out.status.success(), "{args:?} succeeded");
    // The tests' etcd is plain: every command warns of --etcd-insecure first; the rest is the
    // refusal.
    let err = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| !l.contains("WARN --etcd-insecure:"))
        .collect::<Vec<_>>()
        .join("\n");
    (out.status.code(), err)
}

#[test]
fn drain_refuses_an_unknown_node_and_node_rm_removes_a_node_that_left() {
    let etcd = EtcdCluster::start("cli-noderm", 3);
    let endpoints = etcd.endpoints();
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt
        .block_on(Cluster::connect(&etcd.endpoint_list()))
        .unwrap();
    let leases = register(&rt, &cluster, &["n1", "n2"]);

    // No such node: drain, its undo and rm are refused by name, and nothing is written.
    for args in [
        &["drain", "NOSUCHNODE"][..],
        &["drain", "NOSUCHNODE", "--undo"],
        &["node", "rm", "NOSUCHNODE"],
        &["node", "rm", "NOSUCHNODE", "--force"],
    ] {
        let (code, err) = cluster_refused(&endpoints, args);
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert_eq!(
            err.trim(),
            "berth: error: no node NOSUCHNODE; `berth cluster nodes` lists them",
            "{args:?}"
        );
    }
    assert!(rt.block_on(cluster.drains()).unwrap().is_empty());

    // One task on each node, then n2 drained (its task stays until replaced: a standalone task
    // is not moved).
    let def = dir.path().join("web.json");
    std::fs::write(
        &def,
        r#"{"family":"web","containerDefinitions":[{"name":"app","image":"busybox","cpu":128,"memory":128}]}"#,
    )
    .unwrap();
    let mut controller = Controller::start(dir.path(), "c1", &endpoints);
    submit(&endpoints, &def, 2);
    let (placed, _) = wait_placed(&endpoints, 2, Duration::from_secs(20));
    assert_eq!(
        per_node(&placed),
        BTreeMap::from([("n1".into(), 1), ("n2".into(), 1)])
    );
    let on = |node: &str| {
        placed
            .iter()
            .find(|(_, n)| *n == node)
            .map(|(t, _)| t.clone())
            .unwrap()
    };
    let (t1, t2) = (on("n1"), on("n2"));
    for t in [&t1, &t2] {
        report(&rt, &cluster, &leases, t, "RUNNING");
    }
    let drained = cluster_json(&endpoints, &["drain", "n2"]);
    assert_eq!(drained["draining"], true);

    // n2 is alive (its lease renewed): rm is refused, naming the way out.
    let (code, err) = cluster_refused(&endpoints, &["node", "rm", "n2"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("node n2 is alive: its agent renews its lease") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(nodes(&endpoints).len(), 2);

    // n2 leaves for good, while no controller runs (so the removal, not the controller, closes
    // its task): its lease ends. rm removes the drain record and the assignment and closes the
    // task, STOPPED with the removal's reason.
    controller.kill9();
    rt.block_on(cluster.revoke(leases["n2"])).unwrap();
    let removed = cluster_json(&endpoints, &["node", "rm", "n2"]);
    assert_eq!(removed["node"], "n2");
    assert_eq!(removed["wasRegistered"], false);
    assert_eq!(removed["wasDraining"], true);
    assert_eq!(removed["stoppedTasks"], serde_json::json!([t2]));
    assert!(rt.block_on(cluster.drains()).unwrap().is_empty());
    assert!(rt.block_on(cluster.assignments("n2")).unwrap().0.is_empty());
    let task = ps(&endpoints)
        .into_iter()
        .find(|t| t["task"] == t2.as_str())
        .unwrap();
    assert_eq!(task["desiredStatus"], "STOPPED", "{task}");
    assert_eq!(task["lastStatus"], "STOPPED", "{task}");
    assert_eq!(task["stopCode"], "UserInitiated", "{task}");
    assert_eq!(
        task["reason"],
        "Node n2 was removed from the cluster (berth cluster node rm)"
    );
    // The task on n1 is untouched.
    let task = ps(&endpoints)
        .into_iter()
        .find(|t| t["task"] == t1.as_str())
        .unwrap();
    assert!(open(&task), "{task}");

    // --force removes a live node: its lease is revoked, its record gone, its task closed.
    let text = berth(&[
        "cluster", "node", "rm", "n1", "--force", "--etcd", &endpoints,
    ]);
    assert!(
        text.status.success(),
        "{}",
        String::from_utf8_lossy(&text.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&text.stdout).trim(),
        "n1: removed (1 task(s) stopped)"
    );
    assert!(nodes(&endpoints).is_empty());
    let task = ps(&endpoints)
        .into_iter()
        .find(|t| t["task"] == t1.as_str())
        .unwrap();
    assert_eq!(task["lastStatus"], "STOPPED", "{task}");
    assert_eq!(
        rt.block_on(cluster.lease_ttl(leases["n1"])).unwrap(),
        None,
        "n1's lease is revoked"
    );
}

#[test]
fn scaling_in_a_service_keeps_it_spread_over_the_nodes() {
    // A service of 4 on n1 alone, then two more nodes and 6 tasks (4/1/1, the newest on n2 and
    // n3), then scaled to 3: spread (the default strategy) stops from n1, the fullest node,
    // leaving 1/1/1 (stopping the newest left 3/0/0).
    let etcd = EtcdCluster::start("cli-scalein", 3);
    let endpoints = etcd.endpoints();
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt
        .block_on(Cluster::connect(&etcd.endpoint_list()))
        .unwrap();
    let mut leases = register(&rt, &cluster, &["n1"]);
    let def = dir.path().join("web.json");
    std::fs::write(
        &def,
        r#"{"family":"web","containerDefinitions":[{"name":"app","image":"busybox","cpu":128,"memory":128}]}"#,
    )
    .unwrap();
    let def = def.to_str().unwrap();
    let _controller = Controller::start(dir.path(), "c1", &endpoints);
    // Placed tasks that are open, per node.
    let open_per_node = |tasks: &[serde_json::Value]| {
        let mut out: BTreeMap<String, usize> = BTreeMap::new();
        for t in tasks
            .iter()
            .filter(|t| open(t) && t["desiredStatus"] == "RUNNING" && !t["node"].is_null())
        {
            *out.entry(str_of(t, "node").to_owned()).or_default() += 1;
        }
        out
    };
    // Reports every placed task not yet reported RUNNING.
    let run_all = |leases: &BTreeMap<String, i64>| {
        for t in ps(&endpoints) {
            if open(&t) && !t["node"].is_null() && t["lastStatus"] == "PROVISIONING" {
                report(&rt, &cluster, leases, str_of(&t, "task"), "RUNNING");
            }
        }
    };
    service(&endpoints, &["create", "web", def, "--desired-count", "4"]);
    wait_ps(
        &endpoints,
        Duration::from_secs(20),
        "4 on n1",
        &|_| {},
        &|tasks| open_per_node(tasks) == BTreeMap::from([("n1".to_owned(), 4)]),
    );
    run_all(&leases);
    leases.extend(register(&rt, &cluster, &["n2", "n3"]));
    service(&endpoints, &["update", "web", "--desired-count", "6"]);
    wait_ps(
        &endpoints,
        Duration::from_secs(20),
        "4/1/1",
        &|_| {},
        &|tasks| {
            open_per_node(tasks)
                == BTreeMap::from([
                    ("n1".to_owned(), 4),
                    ("n2".to_owned(), 1),
                    ("n3".to_owned(), 1),
                ])
        },
    );
    run_all(&leases);
    wait_ps(
        &endpoints,
        Duration::from_secs(10),
        "all 6 RUNNING",
        &|_| {},
        &|tasks| {
            tasks
                .iter()
                .filter(|t| t["lastStatus"] == "RUNNING")
                .count()
                == 6
        },
    );
    service(&endpoints, &["update", "web", "--desired-count", "3"]);
    let tasks = wait_ps(
        &endpoints,
        Duration::from_secs(20),
        "3 tasks left running",
        &|_| {},
        &|tasks| open_per_node(tasks).values().sum::<usize>() == 3,
    );
    assert_eq!(
        open_per_node(&tasks),
        BTreeMap::from([
            ("n1".to_owned(), 1),
            ("n2".to_owned(), 1),
            ("n3".to_owned(), 1),
        ]),
        "{tasks:#?}"
    );
}
