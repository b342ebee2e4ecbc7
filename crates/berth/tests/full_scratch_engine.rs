//! One task filling its scratch volume under a running agent: the agent's data directory is a
//! real ext4 file system on a loop device (64 MiB), and a task whose volume has no host path (so
//! it lives under `DATA_DIR/tasks/<id>`, on the store's file system) writes zeros with `dd` until
//! ENOSPC. The store's reserve (`DATA_DIR/berth.reserve`, 16 MiB) must absorb it: `/v1/health`
//! stays ok, the filling task is stopped with a reason naming the full file system and its
//! scratch size, a second task submitted afterwards is accepted, saved and runs, and after a
//! restart of the agent the state is intact.
//!
//! Runs as root in the host's mount namespace (not `ns_test!`): dockerd must see the bind mounts
//! of the scratch volume, which live on the loop file system. Cleanup: the agent is killed, the
//! containers removed (`FamilyGuard`), then the file system unmounted (the loop device was
//! detached after the mount, so the kernel frees it), then the temporary directory removed.

mod common;

use berth_testkit::mount::{LoopFs, Scratch};
use berth_testkit::{FamilyGuard, test_image, unique_name};
use common::agent::{Introspection, Launch};
use serde_json::{Value, json};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

struct Agent {
    // Dropped first: the agent is killed before its file system is unmounted.
    agent: common::agent::Agent,
    _fs: LoopFs,
    _scratch: Scratch,
}

impl Agent {
    fn start() -> Agent {
        assert!(
            rustix::process::geteuid().is_root(),
            "this test mounts an ext4 file system on a loop device: run it as root"
        );
        let scratch = Scratch::with_prefix("berth-fullscratch-test.");
        let data = scratch.join("data");
        std::fs::create_dir(&data).expect("data dir");
        let fs = LoopFs::ext4(&scratch.join("disk.img"), 64, &data);
        let launch = Launch {
            introspection: Introspection::Off,
            data_dir: Some(data),
            ..Launch::default()
        };
        Agent {
            agent: common::agent::Agent::start_launch("1h", launch, &[], &[]),
            _fs: fs,
            _scratch: scratch,
        }
    }

    /// `GET /v1/health`: (HTTP status, body).
    fn health(&self) -> (u16, Value) {
        self.agent.health()
    }

    /// `berth submit FILE`: (exit code, stdout, stderr).
    fn try_submit(&self, def: &Value) -> (i32, String, String) {
        let file = self
            .agent
            .dir
            .path()
            .join(format!("{}.json", unique_name("t-")));
        std::fs::write(&file, def.to_string()).expect("write");
        let (code, out, err) = self.agent.cli(&["submit", file.to_str().expect("utf-8")]);
        (code, out.trim().to_string(), err)
    }
}

/// Bytes still free on the file system at `path` (root's reserved blocks included: the container
/// writes as root).
fn free_bytes(path: &Path) -> u64 {
    let st = rustix::fs::statvfs(path).expect("statvfs");
    st.f_bfree * st.f_frsize
}

#[test]
fn a_task_filling_its_scratch_volume_is_stopped_and_the_agent_stays_healthy() {
    let mut agent = Agent::start();
    let data = agent.agent.data();
    let (status, body) = agent.health();
    assert_eq!(status, 200, "{body}");

    let filler = unique_name("fullscratch-fill-");
    let _gf = FamilyGuard(filler.clone());
    let def = json!({"family": filler, "containerDefinitions": [{
        "name": "app", "image": test_image(),
        "command": ["sh", "-c", "dd if=/dev/zero of=/vol/fill bs=1M; echo filled; \
                     trap 'exit 0' TERM; while true; do sleep 0.2; done"],
        "mountPoints": [{"sourceVolume": "scratch", "containerPath": "/vol"}],
        "stopTimeout": 2, "dockerLabels": {"berth.test": "1"}}],
        "volumes": [{"name": "scratch", "host": {}}]});
    let (code, fill_id, err) = agent.try_submit(&def);
    assert_eq!(code, 0, "{err}");

    // The container writes until the file system is full (dd ends with ENOSPC).
    let t = Instant::now();
    while !agent.agent.logs(&fill_id, "app").contains("filled") {
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "the file system never filled: {} bytes free\nlog: {}",
            free_bytes(&data),
            agent.agent.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        free_bytes(&data) < 4 << 20,
        "dd ended with {} bytes free",
        free_bytes(&data)
    );

    // Then tasks whose definitions carry 640 KiB of environment each: the store's file must
    // grow to hold them (redb's free pages inside the file absorb a small save on a full disk;
    // these cannot). Each is accepted and saved although the disk is full.
    let small = unique_name("fullscratch-small-");
    let _gs = FamilyGuard(small.clone());
    let environment: Vec<Value> = (0..10)
        .map(|i| json!({"name": format!("PAD{i}"), "value": "x".repeat(64 * 1024)}))
        .collect();
    let def = json!({"family": small, "containerDefinitions": [{
        "name": "app", "image": test_image(),
        "command": ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.2; done"],
        "environment": environment,
        "stopTimeout": 2, "dockerLabels": {"berth.test": "1"}}]});
    let mut small_ids = Vec::new();
    for _ in 0..3 {
        let (code, id, err) = agent.try_submit(&def);
        assert_eq!(
            code,
            0,
            "a submit after the disk filled was refused: {err}\nhealth: {:?}\nlog: {}",
            agent.health(),
            agent.agent.log()
        );
        small_ids.push(id);
    }
    let (status, body) = agent.health();
    assert_eq!(status, 200, "health after the disk filled: {body}");
    assert_eq!(body["status"], "ok", "{body}");

    // Only the filling task is stopped, with the reason.
    let stopped = agent
        .agent
        .wait_for(&fill_id, "stopped", |v| v["known"] == "STOPPED");
    let reason = stopped["stoppedReason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("the data directory's file system is full")
            && reason.contains("scratch volume holds")
            && reason.contains("MiB"),
        "{stopped}"
    );
    for id in &small_ids {
        agent
            .agent
            .wait_for(id, "running", |v| v["known"] == "RUNNING");
    }
    let (status, body) = agent.health();
    assert_eq!(status, 200, "health once the filling task stopped: {body}");
    assert_eq!(body["status"], "ok", "{body}");

    // A restarted agent (after a kill -9) finds every task as it was.
    agent.agent.kill9();
    agent.agent.restart();
    let v = agent.agent.task(&fill_id);
    assert_eq!(v["known"], "STOPPED", "{v}");
    assert_eq!(v["stoppedReason"], stopped["stoppedReason"], "{v}");
    for id in &small_ids {
        agent
            .agent
            .wait_for(id, "running after the restart", |v| v["known"] == "RUNNING");
    }
    let (status, body) = agent.health();
    assert_eq!(status, 200, "health after the restart: {body}");
    assert_eq!(body["status"], "ok", "{body}");

    let reserve = data.join("berth.reserve");
    let blocks = std::fs::metadata(&reserve).map_or(0, |m| m.blocks());
    assert!(
        blocks * 512 < 16 << 20,
        "the reserve was filled while the disk is full: {blocks} blocks"
    );
    // The filling task removed, its scratch volume with it: the reserve is filled again.
    let (code, _, err) = agent.agent.cli(&["rm", &fill_id]);
    assert_eq!(code, 0, "{err}");
    agent.agent.wait_forgotten(&fill_id);
    let t = Instant::now();
    loop {
        let blocks = std::fs::metadata(&reserve).map_or(0, |m| m.blocks());
        if blocks * 512 >= 16 << 20 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the reserve was not filled again: {blocks} blocks, {} bytes free\nlog: {}",
            free_bytes(&data),
            agent.agent.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
