//! The cluster on the real Engine: a real 3-member etcd, `berth controller` processes and three
//! `berth agent --etcd … --node …` processes (distinct data directories, sockets and ports, one
//! Docker Engine, each agent behind its own TCP proxies to etcd), driven by `berth cluster …`.
//! What is asserted is what a user sees: containers running under Docker with the node's and the
//! service's labels, and `berth cluster ps|nodes|service ls`.
//!
//! - placement: a service of 6 spreads 2/2/2; `memberOf` and `binpack` place as documented; a
//!   drained node's service tasks move, its standalone task stays;
//! - an etcd member killed: placement and status go on; the leading controller killed: the other
//!   leads within its lease and no task is placed twice;
//! - an agent killed: its lease expires and its service tasks come back on the others within
//!   the TTL and a few seconds; restarted, it stops its orphaned copies, and from the moment it is
//!   back in the cluster no more than 6 replicas run;
//! - an agent cut off from etcd: its tasks keep running; healed, exactly 6 replicas remain;
//! - a rolling update to a new revision keeps at least `minimumHealthyPercent` running and never
//!   more than `maximumPercent`.
//!
//! Run: `scripts/test -p berth --test cluster_engine`.

mod common;

use common::cluster::{Fleet, NodeOpts};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The node lease of these tests: short, so a lost node is noticed in seconds.
const TTL: &str = "3s";
const TTL_SECS: u64 = 3;

/// A task that runs until stopped and exits at once on SIGTERM.
fn definition(family: &str, memory: u64, revision: u32) -> Value {
    json!({
        "family": family,
        "revision": revision,
        "containerDefinitions": [{
            "name": "app",
            "image": berth_testkit::test_image(),
            "command": ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"],
            "memory": memory,
            "stopTimeout": 5,
        }],
    })
}

/// `berth cluster ps` in a line per task, for failure messages.
fn brief(tasks: &[Value]) -> String {
    tasks
        .iter()
        .map(|t| {
            format!(
                "{} {} {} {} {} {} {}",
                &t["task"].as_str().unwrap_or_default()[..8],
                t["family"],
                t["service"],
                t["node"],
                t["desiredStatus"],
                t["lastStatus"],
                t["reason"]
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Running containers per node label.
fn per_node(running: &[common::cluster::Running]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for r in running {
        *out.entry(r.label("berth.node").to_owned()).or_default() += 1;
    }
    out
}

fn three_nodes(fleet: &mut Fleet, memory: [u64; 3]) {
    for (i, name) in ["n1", "n2", "n3"].into_iter().enumerate() {
        fleet.node(
            name,
            NodeOpts::default()
                .lease_ttl(TTL)
                .memory(memory[i])
                .cpu(4096)
                .attribute("zone", &format!("z{}", i + 1)),
        );
    }
    fleet.wait_until(Duration::from_secs(30), "3 nodes registered", || {
        let n = fleet.nodes().len();
        if n == 3 {
            Ok(())
        } else {
            Err(format!("{n} nodes"))
        }
    });
}

/// `berth cluster service create NAME FILE --desired-count N` and the extra options.
fn create_service(fleet: &Fleet, name: &str, def: &Value, count: u32, extra: &[&str]) {
    let file = fleet.definition_file(def);
    let count = count.to_string();
    let mut args = vec![
        "service",
        "create",
        name,
        file.to_str().expect("UTF-8"),
        "--desired-count",
        &count,
    ];
    args.extend_from_slice(extra);
    fleet.cluster_json(&args);
}

/// Waits until exactly `n` containers of service `name` run, spread as `spread` wants (if any).
fn wait_replicas(
    fleet: &Fleet,
    name: &str,
    n: usize,
    limit: Duration,
) -> Vec<common::cluster::Running> {
    fleet.wait_until(limit, &format!("{n} running replicas of {name}"), || {
        let running = fleet.docker_running(&[("berth.service", name)]);
        if running.len() == n {
            Ok(running)
        } else {
            Err(format!(
                "{} running: {:?}",
                running.len(),
                per_node(&running)
            ))
        }
    })
}

/// The node a task's running container is on (the task's id is its `berth.task` label).
fn node_of(fleet: &Fleet, task: &str) -> Result<String, String> {
    let running = fleet.docker_running(&[("berth.task", task)]);
    match running.as_slice() {
        [one] => Ok(one.label("berth.node").to_owned()),
        [] => Err(format!("task {task} has no running container")),
        more => Err(format!("task {task} runs {} times", more.len())),
    }
}

#[test]
fn placement_runs_on_the_nodes_and_survives_a_lost_etcd_member_and_a_lost_controller() {
    let mut fleet = Fleet::start("ce-place");
    three_nodes(&mut fleet, [2048, 1536, 1024]);
    fleet.controller("c1");
    fleet.controller("c2");

    // A node takes its tasks from the cluster only: a local submit is refused, saying why.
    let local = fleet.definition_file(&definition("local", 64, 1));
    let (code, _, err) = fleet
        .agent("n1")
        .cli(&["submit", local.to_str().expect("UTF-8")]);
    assert_ne!(code, 0);
    assert!(
        err.contains("this agent is cluster node n1") && err.contains("berth cluster submit"),
        "{err}"
    );

    // A service of 6: two containers on each node, each labelled with its node and service.
    create_service(&fleet, "web", &definition("web", 64, 1), 6, &[]);
    let running = wait_replicas(&fleet, "web", 6, Duration::from_secs(90));
    assert_eq!(
        per_node(&running),
        BTreeMap::from([("n1".into(), 2), ("n2".into(), 2), ("n3".into(), 2)])
    );
    let ls = fleet.cluster_json(&["service", "ls"]);
    assert_eq!(ls["services"][0]["runningCount"], 6, "{ls}");

    // memberOf: only zone z2.
    let zoned = fleet.submit(
        &definition("zoned", 64, 1),
        &[
            "--placement-constraints",
            r#"[{"type":"memberOf","expression":"attribute:zone == z2"}]"#,
        ],
    );
    // binpack on memory: the node with the least memory left after placing (n3: 1024 - 128).
    let packed = fleet.submit(
        &definition("packed", 256, 1),
        &[
            "--placement-strategy",
            r#"[{"type":"binpack","field":"memory"}]"#,
        ],
    );
    fleet.wait_until(
        Duration::from_secs(60),
        "memberOf on n2, binpack on n3",
        || {
            let z = node_of(&fleet, &zoned[0])?;
            let p = node_of(&fleet, &packed[0])?;
            if z == "n2" && p == "n3" {
                Ok(())
            } else {
                Err(format!("zoned on {z}, packed on {p}"))
            }
        },
    );
    let task = fleet.task(&packed[0]).expect("listed");
    assert_eq!(task["lastStatus"], "RUNNING", "{task}");
    assert_eq!(task["node"], "n3");

    // An etcd member killed: placement and status reports go on.
    fleet.etcd.kill(0);
    let after_member = fleet.submit(&definition("after-member", 64, 1), &[]);
    fleet.wait_until(
        Duration::from_secs(60),
        "placed and RUNNING without a member",
        || {
            let t = fleet.task(&after_member[0]).ok_or("not listed")?;
            if t["lastStatus"] == "RUNNING" {
                Ok(())
            } else {
                Err(t.to_string())
            }
        },
    );

    // The leading controller killed: the other leads within its lease (2 s) and places.
    let leader = fleet.leaders();
    assert_eq!(leader.len(), 1, "{}", fleet.logs());
    let (leader, other) = (
        leader[0].clone(),
        if leader[0] == "c1" { "c2" } else { "c1" },
    );
    fleet.controllers.get_mut(&leader).expect("leader").kill9();
    let killed = Instant::now();
    let after_leader = fleet.submit(&definition("after-leader", 64, 1), &["--count", "3"]);
    fleet.wait_until(
        Duration::from_secs(30),
        "3 tasks placed by the other controller",
        || {
            let placed = after_leader
                .iter()
                .filter(|id| fleet.task(id).is_some_and(|t| t["node"].is_string()))
                .count();
            if placed == 3 {
                Ok(())
            } else {
                Err(format!("{placed} placed"))
            }
        },
    );
    let took = killed.elapsed();
    eprintln!("the other controller placed 3 tasks {took:?} after the leader was killed");
    assert!(took < Duration::from_secs(2 + 8), "took {took:?}");
    assert!(fleet.controllers[other].leads(), "{}", fleet.logs());
    // No task placed twice: every task runs exactly once.
    fleet.wait_until(Duration::from_secs(60), "every task running once", || {
        for id in zoned
            .iter()
            .chain(&packed)
            .chain(&after_member)
            .chain(&after_leader)
        {
            node_of(&fleet, id)?;
        }
        Ok(())
    });
    wait_replicas(&fleet, "web", 6, Duration::from_secs(30));

    // Drain n3: its service tasks move to n1 and n2; its standalone task stays.
    fleet.cluster_json(&["drain", "n3"]);
    let running = fleet.wait_until(Duration::from_secs(90), "web off n3", || {
        let running = fleet.docker_running(&[("berth.service", "web")]);
        let nodes = per_node(&running);
        if running.len() == 6 && !nodes.contains_key("n3") {
            Ok(running)
        } else {
            Err(format!("{nodes:?}"))
        }
    });
    assert_eq!(per_node(&running).len(), 2);
    assert_eq!(node_of(&fleet, &packed[0]).as_deref(), Ok("n3"));
    // Their containers are gone; their node's reports follow.
    let moved = fleet.wait_until(Duration::from_secs(30), "n3's web tasks STOPPED", || {
        let ps = fleet.ps();
        let moved: Vec<Value> = ps
            .iter()
            .filter(|t| t["service"] == "web" && t["node"] == "n3")
            .cloned()
            .collect();
        if moved.len() == 2 && moved.iter().all(|t| t["lastStatus"] == "STOPPED") {
            Ok(moved)
        } else {
            Err(brief(&ps))
        }
    });
    for t in &moved {
        assert_eq!(t["reason"], "Task stopped during instance draining", "{t}");
        assert_eq!(t["stopCode"], "ServiceSchedulerInitiated", "{t}");
    }
    fleet.etcd.restart(0);
}

#[test]
fn a_killed_node_is_replaced_within_its_lease_and_its_orphans_stop_when_it_returns() {
    let mut fleet = Fleet::start("ce-kill");
    three_nodes(&mut fleet, [2048, 2048, 2048]);
    fleet.controller("c1");
    create_service(&fleet, "web", &definition("web", 64, 1), 6, &[]);
    wait_replicas(&fleet, "web", 6, Duration::from_secs(90));

    // kill -9 n1's agent: its containers keep running; once its lease expires the controller
    // closes its tasks and starts their replacements on n2 and n3.
    fleet.kill9("n1");
    let killed = Instant::now();
    let elsewhere = fleet.wait_until(Duration::from_secs(60), "6 replicas on n2 and n3", || {
        let running = fleet.docker_running(&[("berth.service", "web")]);
        let nodes = per_node(&running);
        let off_n1: usize = nodes
            .iter()
            .filter(|(n, _)| *n != "n1")
            .map(|(_, c)| c)
            .sum();
        if off_n1 == 6 {
            Ok(nodes)
        } else {
            Err(format!("{nodes:?}"))
        }
    });
    let took = killed.elapsed();
    eprintln!("replaced {took:?} after the kill (lease {TTL}): {elsewhere:?}");
    assert!(took < Duration::from_secs(TTL_SECS + 15), "took {took:?}");
    assert_eq!(
        elsewhere.get("n1"),
        Some(&2),
        "the orphans still run: {elsewhere:?}"
    );
    let lost: Vec<Value> = fleet
        .ps()
        .into_iter()
        .filter(|t| t["node"] == "n1" && t["service"] == "web")
        .collect();
    assert_eq!(lost.len(), 2);
    for t in &lost {
        assert_eq!(t["lastStatus"], "STOPPED", "{t}");
        assert_eq!(
            t["reason"], "Host node (instance n1) lost: its lease expired.",
            "{t}"
        );
        assert_eq!(t["stopCode"], "TerminationNotice", "{t}");
    }

    // Restart it: it stops its orphans before it registers again; from the moment it is back
    // (its node record), no more than 6 replicas run.
    fleet.restart("n1");
    let restarted = Instant::now();
    let mut back = None;
    let mut samples = 0;
    loop {
        let registered = fleet.nodes().iter().any(|n| n["node"] == "n1");
        let running = fleet.docker_running(&[("berth.service", "web")]);
        if registered && back.is_none() {
            back = Some(restarted.elapsed());
        }
        if back.is_some() {
            samples += 1;
            assert!(
                running.len() <= 6,
                "{} replicas run after n1 is back: {:?}\n{}",
                running.len(),
                per_node(&running),
                fleet.logs()
            );
            if running.len() == 6 && samples >= 10 {
                break;
            }
        }
        assert!(
            restarted.elapsed() < Duration::from_secs(60),
            "n1 not back with 6 replicas: {:?}\n{}",
            per_node(&running),
            fleet.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "n1 back {:?} after its restart; {samples} samples after, never above 6",
        back.unwrap_or_default()
    );
    assert!(
        fleet
            .docker_running(&[("berth.service", "web"), ("berth.node", "n1")])
            .is_empty()
    );
    assert!(
        fleet
            .agent("n1")
            .log()
            .contains("stopping tasks whose assignments are gone before registering")
    );
}

#[test]
fn a_node_cut_off_from_etcd_keeps_its_tasks_and_exactly_the_desired_replicas_remain_after_healing()
{
    let mut fleet = Fleet::start("ce-cut");
    three_nodes(&mut fleet, [2048, 2048, 2048]);
    fleet.controller("c1");
    create_service(&fleet, "web", &definition("web", 64, 1), 6, &[]);
    let before = wait_replicas(&fleet, "web", 6, Duration::from_secs(90));
    let on_n1: Vec<String> = before
        .iter()
        .filter(|r| r.label("berth.node") == "n1")
        .map(|r| r.id.clone())
        .collect();
    assert_eq!(on_n1.len(), 2);

    // Cut n1 off: its lease expires, its tasks are replaced elsewhere, and its own copies keep
    // running (its agent cannot know whether it is cut off or etcd is down).
    fleet.cut("n1");
    fleet.wait_until(
        Duration::from_secs(60),
        "n1 lost and its tasks replaced",
        || {
            let running = fleet.docker_running(&[("berth.service", "web")]);
            let nodes = per_node(&running);
            if nodes.get("n2").copied().unwrap_or(0) + nodes.get("n3").copied().unwrap_or(0) == 6 {
                Ok(())
            } else {
                Err(format!("{nodes:?}"))
            }
        },
    );
    std::thread::sleep(Duration::from_secs(TTL_SECS));
    let still: Vec<String> = fleet
        .docker_running(&[("berth.service", "web"), ("berth.node", "n1")])
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(still, on_n1, "n1's tasks keep running while it is cut off");

    // Heal: n1 stops its copies (their assignments are gone) and registers again; exactly 6 run.
    fleet.heal("n1");
    fleet.wait_until(
        Duration::from_secs(60),
        "n1 back, its copies stopped",
        || {
            let back = fleet.nodes().iter().any(|n| n["node"] == "n1");
            let mine = fleet.docker_running(&[("berth.service", "web"), ("berth.node", "n1")]);
            if back && mine.is_empty() {
                Ok(())
            } else {
                Err(format!("registered {back}, {} copies on n1", mine.len()))
            }
        },
    );
    let running = wait_replicas(&fleet, "web", 6, Duration::from_secs(30));
    // And it stays 6 (nothing is started again behind).
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        fleet.docker_running(&[("berth.service", "web")]).len(),
        running.len()
    );
}

#[test]
fn a_rolling_update_keeps_the_minimum_healthy_and_the_maximum() {
    let mut fleet = Fleet::start("ce-roll");
    three_nodes(&mut fleet, [2048, 2048, 2048]);
    fleet.controller("c1");
    // 4 replicas, min 50 % (2 healthy), max 150 % (6 may run).
    create_service(
        &fleet,
        "web",
        &definition("web", 64, 1),
        4,
        &[
            "--minimum-healthy-percent",
            "50",
            "--maximum-percent",
            "150",
        ],
    );
    wait_replicas(&fleet, "web", 4, Duration::from_secs(90));

    let file = fleet.definition_file(&definition("web", 64, 2));
    fleet.cluster_json(&[
        "service",
        "update",
        "web",
        "--task-definition",
        file.to_str().expect("UTF-8"),
    ]);
    let started = Instant::now();
    let (mut lowest, mut highest, mut samples) = (usize::MAX, 0, 0);
    loop {
        let running = fleet.docker_running(&[("berth.service", "web")]);
        let new = running
            .iter()
            .filter(|r| r.label("berth.revision") == "2")
            .count();
        lowest = lowest.min(running.len());
        highest = highest.max(running.len());
        samples += 1;
        assert!(
            running.len() >= 2,
            "below the minimum healthy: {} run\n{}",
            running.len(),
            fleet.logs()
        );
        assert!(
            running.len() <= 6,
            "above the maximum: {} run\n{}",
            running.len(),
            fleet.logs()
        );
        if new == 4 && running.len() == 4 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the update did not finish: {new} new of {}\n{}",
            running.len(),
            fleet.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "rolled over in {:?}: between {lowest} and {highest} running over {samples} samples",
        started.elapsed()
    );
    let ls = fleet.cluster_json(&["service", "ls"]);
    assert_eq!(ls["services"][0]["runningCount"], 4, "{ls}");
    let old: Vec<Value> = fleet
        .ps()
        .into_iter()
        .filter(|t| t["service"] == "web" && t["revision"] == 1)
        .collect();
    assert_eq!(old.len(), 4);
    for t in &old {
        assert_eq!(t["lastStatus"], "STOPPED", "{t}");
        assert_eq!(t["stopCode"], "ServiceSchedulerInitiated", "{t}");
        assert!(
            t["reason"].as_str().is_some_and(
                |r| r.starts_with("Scaling activity initiated by (deployment ecs-svc/")
            ),
            "{t}"
        );
    }
}

#[test]
fn a_second_agent_with_the_same_node_name_is_refused_and_the_first_keeps_the_node() {
    let mut fleet = Fleet::start("ce-twice");
    fleet.node("n1", NodeOpts::default().lease_ttl(TTL).cpu(4096));
    fleet.controller("c1");
    let id = fleet.submit(&definition("solo", 64, 1), &[]).remove(0);
    fleet.wait_until(Duration::from_secs(60), "the task runs on n1", || {
        node_of(&fleet, &id)
    });

    // A second agent, its own data directory, the same --node: refused by name once n1's
    // lease has been seen renewed for its TTL, and exits non-zero.
    let mut launch = common::agent::Launch::default();
    launch.args.extend(
        [
            "--etcd",
            &fleet.endpoints(),
            "--etcd-insecure",
            "--node",
            "n1",
            "--node-lease-ttl",
            TTL,
        ]
        .map(str::to_owned),
    );
    let mut second = common::agent::Agent::start_launch("1h", launch, &[], &[]);
    let started = Instant::now();
    let child = second.child.as_mut().expect("started");
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the second agent of n1 still runs after 60 s:\n{}\n{}",
            second.log(),
            fleet.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    second.child = None;
    eprintln!(
        "the second agent exited {status:?} after {:?}",
        started.elapsed()
    );
    assert_eq!(status.code(), Some(1), "{}", second.log());
    let log = second.log();
    assert!(
        log.contains("berth: error: node n1 is already registered by another agent")
            && log.contains("give each agent its own --node"),
        "{log}"
    );

    // The first keeps the node: still registered a lease TTL and more later, its task running
    // there once, reported RUNNING.
    std::thread::sleep(Duration::from_secs(2 * TTL_SECS));
    let nodes = fleet.nodes();
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    assert_eq!(nodes[0]["node"], "n1");
    assert_eq!(node_of(&fleet, &id), Ok("n1".to_owned()));
    let task = fleet.task(&id).expect("listed");
    assert_eq!(task["lastStatus"], "RUNNING", "{task}");
    assert!(
        fleet.agent("n1").cli(&["ps"]).0 == 0,
        "the first agent runs"
    );
}
