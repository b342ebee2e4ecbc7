//! Image cleanup on the real Engine, with images the test makes offline (`docker import` variants
//! of the busybox test image, each with a file of its own, labelled `berth.test`) and images
//! pulled from the loopback registry (`BERTH_TEST_REGISTRY`).
//!
//! The periodic cycle: a first agent (cleanup off by its defaults) runs one task per image, in a
//! known order, so each image's last use is known; it stops, and a second agent starts with a
//! short interval, a short minimum age and two removals per cycle. Only the right images go, least
//! recently used first, two per cycle; an image whose stopped container is not cleaned up stays,
//! an excluded one stays, an untracked one stays, the test images and the pause image stay; a task
//! started while its image is a candidate runs (and keeps its image); a removed registry image is
//! pulled again by a later task, which runs.
//!
//! The disk trigger is shown with the test seam over the measured usage
//! (`BERTH_TEST_DISK_USAGE_FILE`), not with a second Engine on a small file system: a disposable
//! dockerd needs its own bridge and data root, and the seam shows the decision (LRU until the
//! bytes over the low threshold are freed) without that risk on a shared machine.
//!
//! Every image the test makes carries a unique repository name and is removed at the end (also
//! on failure, by the guard), and the agents never remove anything else: they only remove images
//! their own tasks used, and the test images are on the exclusion list besides.

mod common;

use berth_testkit::{FamilyGuard, docker_cli, registry, test_image, test_image_alt, unique_name};
use common::agent::{Agent, Introspection, Launch};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The shared agent harness on a given data directory (two agents in turn on one), launched as
/// this file has always done (no `--introspection-addr`, the pull behaviour from the test's
/// variables), with a recorder of its events and a SIGTERM when dropped.
struct GcAgent {
    agent: Agent,
    events: Option<Child>,
}

impl std::ops::Deref for GcAgent {
    type Target = Agent;
    fn deref(&self) -> &Agent {
        &self.agent
    }
}

impl GcAgent {
    fn start(data: &Path, args: &[&str], env: &[(&str, &str)]) -> GcAgent {
        let launch = Launch {
            introspection: Introspection::Unset,
            prefer_cached: false,
            data_dir: Some(data.to_path_buf()),
            ..Launch::default()
        };
        GcAgent {
            agent: Agent::start_launch("1h", launch, args, env),
            events: None,
        }
    }

    /// Follow the agent's events into `events.jsonl`.
    fn record_events(&mut self) {
        let out = std::fs::File::create(self.dir.path().join("events.jsonl")).expect("events file");
        let child = Command::new(env!("CARGO_BIN_EXE_berth"))
            .args(["events", "--agent"])
            .arg(self.socket())
            .stdout(out)
            .stderr(Stdio::null())
            .spawn()
            .expect("berth events");
        self.events = Some(child);
    }

    fn removals(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.path().join("events.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["event"] == "image-removed")
            .collect()
    }

    /// SIGTERM the event recorder and the agent; each gets 30 s before a SIGKILL.
    fn stop(&mut self) {
        for c in [self.events.take(), self.agent.child.take()]
            .into_iter()
            .flatten()
        {
            let pid = c.id().to_string();
            let _ = Command::new("kill").args(["-TERM", &pid]).status();
            let mut c = c;
            let t = Instant::now();
            while c.try_wait().ok().flatten().is_none() && t.elapsed() < Duration::from_secs(30) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn submit(&self, family: &str, image: &str, script: &str) -> String {
        let def = json!({"family": family, "containerDefinitions": [{
            "name": "a", "image": image, "command": ["sh", "-c", script],
            "stopTimeout": 1, "dockerLabels": {"berth.test": "1"}}]});
        let file = self.dir.path().join(format!("{}.json", unique_name("t-")));
        std::fs::write(&file, def.to_string()).expect("write");
        let (code, out, err) = self.cli(&["submit", file.to_str().expect("utf-8")]);
        assert_eq!(code, 0, "{err}\n{}", self.log());
        out.trim().to_string()
    }

    /// Run a task that exits at once with `image` and wait until it has stopped with exit 0;
    /// with `clean`, also remove its containers (`berth rm`) and wait until they are gone.
    fn use_image(&self, family: &str, image: &str, clean: bool) -> String {
        let id = self.submit(family, image, "true");
        let v = self.wait_for(&id, "stopped", |v| v["known"] == "STOPPED");
        assert_eq!(v["exitCode"], 0, "{v}\n{}", self.log());
        if clean {
            let (code, _, err) = self.cli(&["rm", &id]);
            assert_eq!(code, 0, "{err}");
            let t = Instant::now();
            while !docker_cli(&["ps", "-aq", "--filter", &format!("label=berth.task={id}")])
                .trim()
                .is_empty()
            {
                assert!(
                    t.elapsed() < Duration::from_secs(30),
                    "task {id} not cleaned up: {}",
                    self.log()
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        id
    }

    fn images(&self) -> Value {
        let (code, out, err) = self.cli(&["images", "--output", "json"]);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str(&out).expect("JSON")
    }
}

impl Drop for GcAgent {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The images a test made; every one is removed (forcibly, with every name) when dropped.
struct Images {
    names: Vec<String>,
}

impl Drop for Images {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = Command::new("docker").args(["rmi", "-f", n]).output();
        }
    }
}

fn present(image: &str) -> bool {
    Command::new("docker")
        .args(["image", "inspect", image])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn image_id(image: &str) -> String {
    docker_cli(&["image", "inspect", "-f", "{{.Id}}", image])
        .trim()
        .to_string()
}

fn image_size(image: &str) -> u64 {
    docker_cli(&["image", "inspect", "-f", "{{.Size}}", image])
        .trim()
        .parse()
        .expect("size")
}

/// A root filesystem tar of the test image, exported through a container that is never started.
fn base_rootfs(work: &Path) -> PathBuf {
    let name = unique_name("berth-gc-export-");
    docker_cli(&[
        "create",
        "--name",
        &name,
        "--label",
        "berth.test=1",
        &test_image(),
        "true",
    ]);
    let tar = work.join("base.tar");
    let exported = Command::new("docker")
        .args(["export", "-o"])
        .arg(&tar)
        .arg(&name)
        .status();
    let _ = Command::new("docker").args(["rm", "-f", &name]).output();
    assert!(exported.is_ok_and(|s| s.success()), "docker export");
    tar
}

/// Import `image` from the base root filesystem plus a file `/gc-variant` holding `image`: an
/// image of distinct content, labelled `berth.test`.
fn make_variant(work: &Path, base: &Path, image: &str, images: &mut Images) {
    let dir = work.join(unique_name("v-"));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("gc-variant"), image).expect("file");
    let tar = dir.join("rootfs.tar");
    std::fs::copy(base, &tar).expect("copy");
    let appended = Command::new("tar")
        .arg("-rf")
        .arg(&tar)
        .arg("-C")
        .arg(&dir)
        .arg("gc-variant")
        .status();
    assert!(appended.is_ok_and(|s| s.success()), "tar -r");
    images.names.push(image.to_string());
    let imported = Command::new("docker")
        .args([
            "import",
            "--change",
            "CMD [\"/bin/sh\"]",
            "--change",
            "ENV PATH=/bin",
            "--change",
            "LABEL berth.test=1",
        ])
        .arg(&tar)
        .arg(image)
        .output()
        .expect("docker import");
    assert!(
        imported.status.success(),
        "docker import {image}: {}",
        String::from_utf8_lossy(&imported.stderr)
    );
}

/// Make `image` a registry image only: pushed to the loopback registry, then removed locally.
fn push_and_forget(image: &str) {
    docker_cli(&["push", image]);
    docker_cli(&["rmi", image]);
    assert!(!present(image));
}

/// The images every test must leave alone, present before it started.
fn bystanders() -> Vec<String> {
    let mut out = vec![test_image(), test_image_alt()];
    out.extend(
        docker_cli(&[
            "images",
            "--format",
            "{{.Repository}}:{{.Tag}}",
            "berth/pause",
        ])
        .lines()
        .map(str::to_string),
    );
    out.retain(|i| present(i));
    out
}

fn gc_flags(exclude: &str) -> Vec<String> {
    vec![format!(
        "--image-cleanup-exclude={exclude},{},{}",
        test_image(),
        test_image_alt()
    )]
}

#[test]
fn the_cycle_removes_only_candidates_lru_first_at_most_n_per_cycle() {
    let work = tempfile::tempdir().expect("tmp");
    let reg = registry();
    let repo = format!("{reg}/{}", unique_name("berth-gc-"));
    let name = |n: &str| format!("{repo}-{n}:1");
    let mut images = Images { names: Vec::new() };
    let base = base_rootfs(work.path());
    for n in ["s", "l1", "r1", "x", "l2", "c", "r2", "l3", "u"] {
        make_variant(work.path(), &base, &name(n), &mut images);
    }
    push_and_forget(&name("r1"));
    push_and_forget(&name("r2"));
    let before = bystanders();
    let family = unique_name("gc-cycle-");
    let _g = FamilyGuard(family.clone());

    // Agent 1 (cleanup by its defaults: nothing is old enough) runs one task per image, in this
    // order: s first (its container stays), then the rest, each cleaned up.
    let data = work.path().join("data");
    std::fs::create_dir_all(&data).expect("data dir");
    {
        let mut one = GcAgent::start(
            &data,
            &[],
            &[("BERTH_IMAGE_PULL_BEHAVIOR", "prefer-cached")],
        );
        one.use_image(&family, &name("s"), false);
        for n in ["l1", "r1", "x", "l2", "c", "r2", "l3"] {
            one.use_image(&family, &name(n), true);
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(present(&name("r1")) && present(&name("r2")), "pulled");
        one.stop();
    }

    // Agent 2: a 4 s cycle, 2 per cycle, a 1 s minimum age; the disk trigger off (this test is
    // about the cycle), `default` pulls.
    std::thread::sleep(Duration::from_millis(1100));
    let mut flags = vec![
        "--image-cleanup-interval=4s".to_string(),
        "--image-minimum-cleanup-age=1s".to_string(),
        "--images-per-cycle=2".to_string(),
        "--image-gc-high-threshold=100".to_string(),
    ];
    flags.extend(gc_flags(&name("x")));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut two = GcAgent::start(&data, &flags, &[("BERTH_IMAGE_PULL_BEHAVIOR", "default")]);
    two.record_events();
    let started = Instant::now();

    // What `berth images` says before the first cycle: c is a candidate now.
    let view = two.images();
    let verdict = |v: &Value, image: &str| -> Value {
        v["images"]
            .as_array()
            .expect("images")
            .iter()
            .find(|i| {
                i["names"]
                    .as_array()
                    .is_some_and(|n| n.contains(&json!(image)))
            })
            .cloned()
            .unwrap_or_else(|| panic!("{image} listed: {v}"))
    };
    assert_eq!(verdict(&view, &name("c"))["candidate"], true, "{view}");
    let s = verdict(&view, &name("s"));
    assert_eq!(s["candidate"], false);
    assert!(
        s["reason"]
            .as_str()
            .is_some_and(|r| r.contains("used by stopped container")),
        "{s}"
    );
    assert!(
        verdict(&view, &name("x"))["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("excluded")),
        "{view}"
    );
    assert!(
        verdict(&view, &name("u"))["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("untracked")),
        "{view}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "the first cycle must not have run yet; the test is too slow for its 4 s interval"
    );

    // A task started while its image is a candidate runs (and keeps its image).
    let c_task = two.submit(
        &family,
        &name("c"),
        "trap 'exit 0' TERM; while :; do sleep 0.2; done",
    );
    two.wait_for(&c_task, "ran", |v| v["known"] == "RUNNING");

    // Candidates, least recently used first: l1 r1 | l2 r2 | l3 — two per cycle.
    let t = Instant::now();
    while two.removals().len() < 5 {
        assert!(
            t.elapsed() < Duration::from_secs(40),
            "five removals: {:?}\n{}",
            two.removals(),
            two.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(5));
    let removed = two.removals();
    let order: Vec<String> = removed
        .iter()
        .map(|e| e["image"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        order,
        ["l1", "r1", "l2", "r2", "l3"].map(&name),
        "LRU order, nothing else: {removed:?}"
    );
    for e in &removed {
        assert_eq!(e["trigger"], "cycle");
        assert!(e["bytes"].as_u64().is_some_and(|b| b > 0), "{e}");
        assert!(
            e["imageId"]
                .as_str()
                .is_some_and(|i| i.starts_with("sha256:"))
        );
    }
    // Grouped by cycle: removals of one cycle are milliseconds apart, cycles 4 s.
    let times: Vec<time::OffsetDateTime> = removed
        .iter()
        .map(|e| {
            time::OffsetDateTime::parse(
                e["time"].as_str().expect("time"),
                &time::format_description::well_known::Rfc3339,
            )
            .expect("RFC 3339")
        })
        .collect();
    let gap = |a: usize, b: usize| (times[b] - times[a]).whole_milliseconds();
    assert!(
        gap(0, 1) < 2000 && gap(2, 3) < 2000,
        "pairs in one cycle: {times:?}"
    );
    assert!(
        gap(1, 2) >= 2000 && gap(3, 4) >= 2000,
        "one cycle after the other: {times:?}"
    );
    for n in ["l1", "r1", "l2", "r2", "l3"] {
        assert!(!present(&name(n)), "{n} removed");
    }
    for n in ["s", "x", "c", "u"] {
        assert!(present(&name(n)), "{n} stays");
    }
    for b in &before {
        assert!(present(b), "{b} was not the test's and survives");
    }
    let metrics = two.metrics();
    assert!(
        metrics.contains("berth_images_removed_total{trigger=\"cycle\"} 5"),
        "{metrics}"
    );
    assert!(
        metrics.contains("berth_image_bytes_freed_total"),
        "{metrics}"
    );

    // A registry image cleanup removed is pulled again by a task that needs it, which runs.
    // (It ran from r1, which was gone: pulled again; cleanup may take it again later.)
    let again = two.use_image(&family, &name("r1"), false);
    assert_eq!(two.task(&again)["exitCode"], 0);
    let (code, _, err) = two.cli(&["stop", &c_task]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn disk_pressure_removes_lru_until_below_the_low_threshold_and_prune_dry_run_lists() {
    let work = tempfile::tempdir().expect("tmp");
    let repo = format!("{}/{}", registry(), unique_name("berth-gcdisk-"));
    let name = |n: &str| format!("{repo}-{n}:1");
    let mut images = Images { names: Vec::new() };
    let base = base_rootfs(work.path());
    for n in ["d1", "d2", "d3", "u"] {
        make_variant(work.path(), &base, &name(n), &mut images);
    }
    let before = bystanders();
    let family = unique_name("gc-disk-");
    let _g = FamilyGuard(family.clone());
    let usage = work.path().join("usage");
    // Well below the high threshold to begin with.
    std::fs::write(&usage, "10 100").expect("usage");
    let data = work.path().join("data");
    std::fs::create_dir_all(&data).expect("data dir");
    let mut flags = vec![
        "--image-cleanup-interval=1h".to_string(),
        "--image-minimum-cleanup-age=0s".to_string(),
        "--image-gc-check-interval=2s".to_string(),
        "--image-gc-high-threshold=85".to_string(),
        "--image-gc-low-threshold=80".to_string(),
    ];
    flags.extend(gc_flags("none:none"));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let usage_env = usage.to_str().expect("utf-8");
    let mut agent = GcAgent::start(
        &data,
        &flags,
        &[
            ("BERTH_IMAGE_PULL_BEHAVIOR", "prefer-cached"),
            ("BERTH_TEST_DISK_USAGE_FILE", usage_env),
        ],
    );
    agent.record_events();
    for n in ["d1", "d2", "d3"] {
        agent.use_image(&family, &name(n), true);
        std::thread::sleep(Duration::from_millis(20));
    }

    // The dry run lists every candidate, least recently used first, and removes nothing.
    let (code, out, err) = agent.cli(&["images", "prune", "--dry-run", "--output", "json"]);
    assert_eq!(code, 0, "{err}");
    let dry: Value = serde_json::from_str(&out).expect("JSON");
    let listed: Vec<&str> = dry["images"]
        .as_array()
        .expect("images")
        .iter()
        .filter_map(|i| i["names"][0].as_str())
        .collect();
    assert_eq!(listed, ["d1", "d2", "d3"].map(&name), "{dry}");
    assert!(["d1", "d2", "d3"].iter().all(|n| present(&name(n))));

    // Used above 85 %: free what is over 80 % — more than d1's size, less than d1 and d2's.
    let (s1, s2) = (image_size(&name("d1")), image_size(&name("d2")));
    let capacity = 10 * (s1 + s2);
    let used = capacity * 80 / 100 + s1 + s2 / 2;
    assert!(used * 100 / capacity > 85, "the seam shows pressure");
    let d3 = image_id(&name("d3"));
    std::fs::write(&usage, format!("{used} {capacity}")).expect("usage");
    let t = Instant::now();
    while present(&name("d1")) || present(&name("d2")) {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "d1 and d2 removed under pressure: {}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The space is freed: the test's usage says so before the next check.
    std::fs::write(&usage, "10 100").expect("usage");
    std::thread::sleep(Duration::from_secs(5));
    assert!(present(&name("d3")), "d3 stays: enough was freed");
    assert_eq!(image_id(&name("d3")), d3);
    assert!(present(&name("u")), "untracked stays");
    for b in &before {
        assert!(present(b), "{b} survives");
    }
    let removed = agent.removals();
    let order: Vec<&str> = removed.iter().filter_map(|e| e["image"].as_str()).collect();
    assert_eq!(order, ["d1", "d2"].map(&name), "{removed:?}");
    assert!(removed.iter().all(|e| e["trigger"] == "disk-pressure"));

    // `berth images prune` removes the remaining candidate now.
    let (code, out, err) = agent.cli(&["images", "prune"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("removed {}", name("d3"))), "{out}");
    assert!(!present(&name("d3")));
    assert!(present(&name("u")));
}

/// The cleanup keys layer like every other: file, then environment (berth's or ECS's name), then
/// flags; ECS's variable below ECS's minimum is ignored as ECS ignores it. (No Docker needed.)
#[test]
fn cleanup_options_layer_file_environment_flags_with_ecs_names() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = dir.path().join("berth.toml");
    std::fs::write(
        &cfg,
        "image-cleanup-interval = \"15m\"\nimages-per-cycle = 3\nimage-cleanup-exclude = [\"keep:1\", \"also:2\"]\nimage-gc-high-threshold = 90\n",
    )
    .expect("config");
    let print = |env: &[(&str, &str)], flags: &[&str]| -> toml::Table {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_berth"));
        cmd.args(["agent", "--print-config", "--config"])
            .arg(&cfg)
            .args(flags);
        for (k, _) in std::env::vars() {
            if k.starts_with("ECS_") || k.contains("IMAGE") {
                cmd.env_remove(k);
            }
        }
        cmd.envs(env.iter().copied());
        let out = cmd.output().expect("berth runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).parse().expect("TOML")
    };
    let t = print(&[], &[]);
    assert_eq!(t["image-cleanup-interval"].as_str(), Some("15m"), "{t}");
    assert_eq!(t["images-per-cycle"].as_integer(), Some(3));
    assert_eq!(
        t["image-cleanup-exclude"].to_string(),
        r#"["keep:1", "also:2"]"#
    );
    assert_eq!(t["image-gc-high-threshold"].as_integer(), Some(90));
    assert_eq!(
        t["image-minimum-cleanup-age"].as_str(),
        Some("1h"),
        "ECS's default"
    );
    let t = print(
        &[
            ("ECS_IMAGE_CLEANUP_INTERVAL", "45m"),
            ("ECS_NUM_IMAGES_DELETE_PER_CYCLE", "7"),
            ("ECS_EXCLUDE_UNTRACKED_IMAGE", "a:1,b:2"),
            ("ECS_IMAGE_MINIMUM_CLEANUP_AGE", "2h"),
            ("ECS_ENABLE_UNTRACKED_IMAGE_CLEANUP", "true"),
            ("ECS_DISABLE_IMAGE_CLEANUP", "true"),
        ],
        &[],
    );
    assert_eq!(t["image-cleanup-interval"].as_str(), Some("45m"), "{t}");
    assert_eq!(t["images-per-cycle"].as_integer(), Some(7));
    assert_eq!(t["image-cleanup-exclude"].to_string(), r#"["a:1", "b:2"]"#);
    assert_eq!(t["image-minimum-cleanup-age"].as_str(), Some("2h"));
    assert_eq!(t["image-cleanup-untracked"].as_bool(), Some(true));
    assert_eq!(t["disable-image-cleanup"].as_bool(), Some(true));
    let t = print(
        &[("ECS_IMAGE_CLEANUP_INTERVAL", "5m")],
        &["--images-per-cycle", "1"],
    );
    // The file's 15m is not injected while ECS's variable is set; ECS ignores 5m: the default.
    assert_eq!(t["image-cleanup-interval"].as_str(), Some("30m"), "{t}");
    assert_eq!(
        t["images-per-cycle"].as_integer(),
        Some(1),
        "flags beat the file"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["agent", "--print-config", "--image-gc-low-threshold", "95"])
        .output()
        .expect("berth runs");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--image-gc-low-threshold 95"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
