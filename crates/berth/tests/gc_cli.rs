//! `berth gc` and `berth run`'s task-directory cleanup with real mounts (root): leftovers removed,
//! busy mounts refused with nothing deleted, the data directory lock, dry runs, JSON; and end to end
//! on the Docker Engine, the seed's situation — a host directory bind-mounted inside a task's
//! scratch volume while the task runs — whose contents must survive whether the unmount at cleanup
//! succeeds or not.
//!
//! Tests that mount re-run themselves in a private mount namespace (`unshare --mount --propagation
//! private`), so no mount can leak to the host whatever happens; `berth` runs as their child, in the
//! same namespace, and so sees (and unmounts) the test's mounts. [`Scratch`] detaches what is left
//! under its directory before deleting it, because `remove_dir_all` crosses mounts.

use berth_testkit::berth_run::BerthRun;
use berth_testkit::mount::{bind, mounts_under};
use berth_testkit::ns_test;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const TASK_A: &str = "0123456789abcdef0123456789abcdef";
const TASK_B: &str = "fedcba9876543210fedcba9876543210";

/// A canonical temporary directory that detaches every mount under it before it is deleted
/// ([`berth_testkit::mount::Scratch`]), with berth's data directory layout inside.
struct Scratch(berth_testkit::mount::Scratch);

impl Scratch {
    fn new() -> Scratch {
        Scratch(berth_testkit::mount::Scratch::with_prefix("berth-gc-test."))
    }
    fn data(&self) -> PathBuf {
        self.0.path.join("data")
    }
    fn task(&self, id: &str) -> PathBuf {
        self.data().join("tasks").join(id)
    }
}

impl std::ops::Deref for Scratch {
    type Target = berth_testkit::mount::Scratch;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

/// A mount source with a sentinel; returns the sentinel's path.
fn source(dir: &Path) -> PathBuf {
    let s = dir.join("SENTINEL");
    write(&s, "must survive");
    s
}

fn assert_sentinel(path: &Path) {
    assert_eq!(
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        "must survive"
    );
}

fn gc(data: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_berth"))
        .arg("gc")
        .arg("--data-dir")
        .arg(data)
        .args(extra)
        .output()
        .expect("berth gc runs")
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The table row of `dir`.
fn row<'a>(stdout: &'a str, dir: &Path) -> &'a str {
    let prefix = format!("{} ", dir.display());
    stdout
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no row for {}:\n{stdout}", dir.display()))
}

ns_test! {
    fn gc_keeps_a_busy_task_directory_then_removes_it_once_released() {
        let s = Scratch::new();
        write(&s.task(TASK_A).join("volumes/v/f"), "leftover");
        let own = [s.task(TASK_B).join("a/f"), s.task(TASK_B).join("volumes/v/g")];
        for f in &own {
            write(f, "ours");
        }
        let src = s.path.join("host-dir");
        let sentinel = source(&src);
        let busy = s.task(TASK_B).join("volumes/v/sub");
        std::fs::create_dir_all(&busy).expect("mkdir");
        bind(&src, &busy);
        let held = std::fs::File::open(busy.join("SENTINEL")).expect("hold open");

        let out = gc(&s.data(), &[]);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
        assert!(stdout.starts_with("TASK DIRECTORY"), "{stdout}");
        let a = row(&stdout, &s.task(TASK_A));
        assert!(a.contains(" removed "), "{a}");
        let b = row(&stdout, &s.task(TASK_B));
        assert!(b.contains(" kept "), "{b}");
        assert!(
            b.contains(&format!("{} is still mounted (EBUSY)", busy.display())),
            "{b}"
        );
        assert!(b.contains("nothing deleted"), "{b}");
        assert!(stdout.contains("1 removed, 1 kept, 0 skipped"), "{stdout}");
        assert!(!s.task(TASK_A).exists());
        for f in &own {
            assert!(f.exists(), "{} deleted", f.display());
        }
        assert_sentinel(&sentinel);
        assert_eq!(mounts_under(&s.data()), vec![busy.clone()]);

        drop(held);
        let out = gc(&s.data(), &[]);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
        let b = row(&stdout, &s.task(TASK_B));
        assert!(b.contains(" removed ") && b.contains(&format!("unmounted {}", busy.display())), "{b}");
        assert!(!s.task(TASK_B).exists());
        assert!(mounts_under(&s.data()).is_empty());
        assert_sentinel(&sentinel);
    }
}

ns_test! {
    fn gc_dry_run_changes_nothing_and_says_what_it_would_unmount() {
        let s = Scratch::new();
        write(&s.task(TASK_A).join("f"), "ours");
        let src = s.path.join("host-dir");
        let sentinel = source(&src);
        let sub = s.task(TASK_A).join("volumes/v/sub");
        std::fs::create_dir_all(&sub).expect("mkdir");
        bind(&src, &sub);

        let out = gc(&s.data(), &["--dry-run"]);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
        let r = row(&stdout, &s.task(TASK_A));
        assert!(r.contains(" would remove "), "{r}");
        assert!(r.contains(&format!("would first unmount {}", sub.display())), "{r}");
        assert!(stdout.contains("nothing was changed"), "{stdout}");

        let out = gc(&s.data(), &["--dry-run", "--output", "json"]);
        let (stdout, _) = text(&out);
        let lines: Vec<Value> = stdout
            .lines()
            .map(|l| serde_json::from_str(l).expect("JSON line"))
            .collect();
        assert_eq!(lines[0]["result"], "would remove");
        assert_eq!(lines[0]["wouldUnmount"], json!([sub.to_string_lossy()]));
        assert_eq!(lines[1]["event"], "gcSummary");
        assert_eq!(lines[1]["dryRun"], true);

        assert!(s.task(TASK_A).join("f").exists());
        assert_eq!(mounts_under(&s.data()), vec![sub]);
        assert_sentinel(&sentinel);
    }
}

#[test]
fn gc_exits_75_while_another_process_holds_the_lock() {
    let s = Scratch::new();
    write(&s.task(TASK_A).join("f"), "ours");
    let lock = std::fs::File::create(s.data().join("berth.lock")).expect("lock file");
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive)
        .expect("take the lock");
    let out = gc(&s.data(), &[]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(75), "{stdout}{stderr}");
    assert!(
        stderr.contains(&format!(
            "another berth process (agent, gc, or a running `berth run`) holds {}",
            s.data().join("berth.lock").display()
        )),
        "{stderr}"
    );
    assert!(s.task(TASK_A).join("f").exists());
    drop(lock);
    let out = gc(&s.data(), &[]);
    assert_eq!(out.status.code(), Some(0));
    assert!(!s.task(TASK_A).exists());
}

#[test]
fn gc_never_removes_the_directory_of_a_running_berth_run() {
    // `berth run` holds the data directory's lock shared while its task lives.
    let s = Scratch::new();
    write(&s.task(TASK_A).join("f"), "a running task's scratch data");
    let lock = std::fs::File::create(s.data().join("berth.lock")).expect("lock file");
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockShared)
        .expect("a run's shared lock");
    let out = gc(&s.data(), &[]);
    assert_eq!(out.status.code(), Some(75));
    assert!(s.task(TASK_A).join("f").exists());
    // A second run shares the lock with the first.
    let other = std::fs::File::open(s.data().join("berth.lock")).expect("open");
    rustix::fs::flock(&other, rustix::fs::FlockOperation::NonBlockingLockShared)
        .expect("runs share the lock");
}

#[test]
fn gc_leaves_what_is_not_a_task_directory_alone() {
    let s = Scratch::new();
    let outside = s.path.join("outside");
    let sentinel = source(&outside);
    let tasks = s.data().join("tasks");
    write(&tasks.join("notes.txt"), "operator's");
    write(&tasks.join("has space/f"), "operator's");
    write(&tasks.join(".hidden/f"), "operator's");
    std::os::unix::fs::symlink(&outside, tasks.join(TASK_B)).expect("symlink");
    write(&s.task(TASK_A).join("f"), "leftover");

    let out = gc(&s.data(), &[]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(row(&stdout, &tasks.join("notes.txt")).contains(" skipped "));
    assert!(row(&stdout, &tasks.join("has space")).contains("not a task id"));
    assert!(row(&stdout, &s.task(TASK_B)).contains("not a directory"));
    assert!(row(&stdout, &s.task(TASK_A)).contains(" removed "));
    assert!(stdout.contains("1 removed, 0 kept, 4 skipped"), "{stdout}");
    assert!(tasks.join("notes.txt").exists() && tasks.join("has space/f").exists());
    assert!(tasks.join(".hidden/f").exists());
    assert!(std::fs::symlink_metadata(s.task(TASK_B)).is_ok());
    assert_sentinel(&sentinel);
}

#[test]
fn gc_refuses_a_tasks_directory_that_is_a_symlink() {
    let s = Scratch::new();
    let elsewhere = s.path.join("elsewhere");
    write(&elsewhere.join(TASK_A).join("f"), "not berth's");
    std::fs::create_dir_all(s.data()).expect("data dir");
    std::os::unix::fs::symlink(&elsewhere, s.data().join("tasks")).expect("symlink");
    let out = gc(&s.data(), &[]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("is a symbolic link"), "{stderr}");
    assert!(elsewhere.join(TASK_A).join("f").exists());
}

#[test]
fn gc_json_reports_counts_per_task_directory() {
    let s = Scratch::new();
    write(&s.task(TASK_A).join("a/b/f"), "x");
    std::os::unix::fs::symlink("/", s.task(TASK_A).join("root-link")).expect("symlink");
    let out = gc(&s.data(), &["--output", "json"]);
    assert_eq!(out.status.code(), Some(0));
    let (stdout, _) = text(&out);
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert_eq!(lines[0]["event"], "gc");
    assert_eq!(
        lines[0]["taskDirectory"],
        s.task(TASK_A).to_string_lossy().as_ref()
    );
    assert_eq!(lines[0]["result"], "removed");
    assert_eq!(
        lines[0]["removed"],
        json!({"files": 1, "dirs": 3, "symlinks": 1})
    );
    assert_eq!(lines[0]["kept"], json!([]));
    assert_eq!(
        lines[1],
        json!({"event": "gcSummary", "dryRun": false, "removed": 1, "kept": 0, "wouldRemove": 0, "skipped": 0})
    );
}

#[test]
fn gc_without_a_data_directory_has_nothing_to_do() {
    let s = Scratch::new();
    let out = gc(&s.path.join("missing"), &[]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains("no task directories to clean"), "{stdout}");
    assert!(!s.path.join("missing").exists(), "gc creates nothing");
}

/// Panics (with how to fix it) unless a Docker Engine answers and has the test image.
fn require_docker() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async {
        let docker = berth_testkit::docker().await;
        berth_testkit::require_image(&docker, &berth_testkit::test_image()).await;
    });
}

/// What happened in an end-to-end run.
struct E2e {
    code: Option<i32>,
    stderr: String,
    task_dir: PathBuf,
    sub: PathBuf,
    sentinel: PathBuf,
}

/// `berth run` a task whose container waits for `/data/go`; while it runs, bind-mount a host
/// directory (with a sentinel) at `<scratch volume>/sub`, optionally hold a file open in it during
/// the whole run, then let the container finish. Returns after `berth` exited.
fn run_with_a_host_dir_mounted_in_the_scratch_volume(s: &Scratch, hold_busy: bool) -> E2e {
    let family = berth_testkit::unique_name("gc-e2e-");
    let def = json!({
        "family": family,
        "containerDefinitions": [{
            "name": "main",
            "image": berth_testkit::test_image(),
            "command": ["sh", "-c", "i=0; while [ ! -f /data/go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; test -f /data/go"],
            "dockerLabels": {"berth.test": "1"},
            "mountPoints": [{"sourceVolume": "scratch", "containerPath": "/data"}],
            "stopTimeout": 2,
        }],
        "volumes": [{"name": "scratch", "host": {}}],
    });
    let mut child = BerthRun::new(env!("CARGO_BIN_EXE_berth"), s.path.join("task.json"), &def)
        .data_dir(s.data())
        .env("BERTH_IMAGE_PULL_BEHAVIOR", "prefer-cached")
        .env("ECS_IMAGE_PULL_BEHAVIOR", "prefer-cached")
        .command()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("berth run starts");
    let mut stderr_pipe = child.stderr.take().expect("stderr");
    let stderr_reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr_pipe.read_to_string(&mut text);
        text
    });
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    stdout.read_line(&mut first).expect("first line");
    let task: Value = serde_json::from_str(&first).unwrap_or_else(|e| panic!("{e}: {first:?}"));
    let id = task["task"]
        .as_str()
        .unwrap_or_else(|| panic!("no task id in {first}"))
        .to_string();
    let task_dir = s.task(&id);
    let scratch = task_dir.join("volumes/scratch");
    // Mount while the container runs (it waits for /data/go).
    loop {
        let mut line = String::new();
        let n = stdout.read_line(&mut line).expect("read a line");
        assert!(n > 0, "berth ended before the container ran");
        let event: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        if event["event"] == "container" && event["known"] == "RUNNING" {
            break;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while !scratch.is_dir() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            scratch.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let host = s.path.join("host-dir");
    let sentinel = source(&host);
    let sub = scratch.join("sub");
    std::fs::create_dir(&sub).expect("mkdir sub");
    bind(&host, &sub);
    let held = hold_busy.then(|| std::fs::File::open(sub.join("SENTINEL")).expect("hold open"));
    std::fs::write(scratch.join("go"), "").expect("let the container finish");

    let mut rest = String::new();
    let _ = stdout.read_to_string(&mut rest);
    let status = child.wait().expect("berth exits");
    let stderr = stderr_reader.join().unwrap_or_default();
    drop(held);
    E2e {
        code: status.code(),
        stderr,
        task_dir,
        sub,
        sentinel,
    }
}

ns_test! {
    fn run_cleanup_unmounts_a_host_dir_bound_into_the_scratch_volume_and_keeps_its_files() {
        require_docker();
        let s = Scratch::new();
        let r = run_with_a_host_dir_mounted_in_the_scratch_volume(&s, false);
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        assert_sentinel(&r.sentinel);
        assert!(!r.task_dir.exists(), "task dir removed; stderr: {}", r.stderr);
        assert!(mounts_under(&s.path).is_empty());
        assert!(!r.stderr.contains("refused"), "{}", r.stderr);
    }
}

ns_test! {
    fn run_cleanup_refuses_a_busy_mount_and_gc_removes_it_later() {
        require_docker();
        let s = Scratch::new();
        let r = run_with_a_host_dir_mounted_in_the_scratch_volume(&s, true);
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        assert!(
            r.stderr.contains(&format!("cleanup: refused: {} is still mounted (EBUSY)", r.sub.display())),
            "{}",
            r.stderr
        );
        assert!(r.task_dir.join("volumes/scratch/go").exists(), "nothing deleted");
        assert_eq!(mounts_under(&s.path), vec![r.sub.clone()]);
        assert_sentinel(&r.sentinel);
        assert_sentinel(&r.sub.join("SENTINEL"));

        // Released (the run is over): a gc removes it all, the host directory's files stay.
        let out = gc(&s.data(), &[]);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
        assert!(!r.task_dir.exists());
        assert!(mounts_under(&s.path).is_empty());
        assert_sentinel(&r.sentinel);
    }
}
