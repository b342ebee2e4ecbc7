//! berth's built-in pause image on the real Docker Engine: provisioned offline through
//! `ensure_pause_image` (the import API), it is tiny, it stops at once on SIGTERM with exit code
//! 0, and as PID 1 of a shared PID namespace it reaps the orphans other containers leave behind.
//! A control run shows that without a reaping PID 1 those orphans stay zombies, so the check can
//! fail. Run through `scripts/test -p berth --test pause_image_engine`.

use std::process::Command;
use std::time::{Duration, Instant};

use berth_docker::DockerRuntime;
use berth_engine::Runtime;
use berth_engine::pause_image::image_name;
use berth_engine::pause_provision::ensure_pause_image;
use berth_testkit::{ContainerGuard, docker_cli as docker, require_image, test_image, unique_name};

/// Removes berth's real pause image when dropped, but only when this test imported it (an image
/// that was there before belongs to someone else).
struct ImportedImage {
    name: String,
    imported: bool,
}

impl Drop for ImportedImage {
    fn drop(&mut self) {
        if self.imported {
            let _ = Command::new("docker").args(["rmi", &self.name]).output();
        }
    }
}

/// `docker run -d` a long-running container labelled as a test's; returns its guard.
fn run_detached(prefix: &str, args: &[&str]) -> ContainerGuard {
    let name = unique_name(prefix);
    let guard = ContainerGuard::new(&name);
    let mut all = vec![
        "run",
        "-d",
        "--name",
        &name,
        "--label",
        "berth.test=1",
        "--network",
        "none",
    ];
    all.extend_from_slice(args);
    docker(&all);
    guard
}

/// In the PID namespace of `holder`: a container whose program starts five background `sleep`s
/// and exits at once, orphaning them (they are reparented to the namespace's PID 1); then, a
/// second later, every process's `/proc/<pid>/stat` line as a third container there sees it.
fn orphan_then_list(holder: &str) -> Vec<String> {
    let pid = format!("container:{holder}");
    let image = test_image();
    let orphaner = unique_name("berth-pause-orphaner-");
    let _orphaner = ContainerGuard::new(&orphaner);
    docker(&[
        "run",
        "--name",
        &orphaner,
        "--label",
        "berth.test=1",
        "--network",
        "none",
        "--pid",
        &pid,
        &image,
        "sh",
        "-c",
        "for i in 1 2 3 4 5; do sleep 0.2 & done; exec true",
    ]);
    let reader = unique_name("berth-pause-reader-");
    let _reader = ContainerGuard::new(&reader);
    let out = docker(&[
        "run",
        "--name",
        &reader,
        "--label",
        "berth.test=1",
        "--network",
        "none",
        "--pid",
        &pid,
        &image,
        "sh",
        "-c",
        "sleep 1; for f in /proc/[0-9]*/stat; do read -r line < \"$f\" && echo \"$line\"; done",
    ]);
    out.lines().map(str::to_owned).collect()
}

/// The state letter of a `/proc/<pid>/stat` line (`pid (comm) S ppid …`; comm may hold spaces
/// and parentheses, so the state follows the last `)`).
fn state(stat: &str) -> Option<char> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.trim_start().chars().next()
}

fn zombies(listing: &[String]) -> Vec<&String> {
    listing.iter().filter(|l| state(l) == Some('Z')).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pause_image_is_tiny_stops_at_once_and_reaps_orphans() {
    let client = berth_testkit::docker().await;
    require_image(&client, &test_image()).await;
    let rt = DockerRuntime::new(client);
    let name = image_name();
    let before = rt.image_present(&name).await.expect("image present?");
    let _image = ImportedImage {
        name: name.clone(),
        imported: !before,
    };

    assert_eq!(ensure_pause_image(&rt).await.expect("provision"), name);
    assert!(rt.image_present(&name).await.expect("present?"));
    // Present now: provisioning again is only a look.
    assert_eq!(ensure_pause_image(&rt).await.expect("again"), name);

    // (c) Tiny, with the import's command and label.
    let size: u64 = docker(&["image", "inspect", "-f", "{{.Size}}", &name])
        .trim()
        .parse()
        .expect("a size");
    eprintln!("{name}: {size} bytes");
    assert!(size < 64 * 1024, "{name} is {size} bytes");
    let config = docker(&[
        "image",
        "inspect",
        "-f",
        "{{json .Config.Cmd}} {{index .Config.Labels \"berth.pause\"}} {{.Architecture}}",
        &name,
    ]);
    assert_eq!(config.trim(), "[\"/pause\"] 1 amd64", "{name}'s config");

    // (a) SIGTERM ends it at once with 0: `docker stop -t 30` does not wait out its grace.
    let pause = run_detached("berth-pause-", &[&name]);
    // The program installs its handlers within microseconds of exec; this pause only keeps the
    // check from racing the start itself (as PID 1 it ignores SIGTERM until then).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    docker(&["stop", "-t", "30", pause.name()]);
    let took = started.elapsed();
    eprintln!("docker stop -t 30 took {took:?}");
    let exit = docker(&["inspect", "-f", "{{.State.ExitCode}}", pause.name()]);
    assert_eq!(exit.trim(), "0", "exit code after docker stop");
    assert!(
        took < Duration::from_secs(2),
        "docker stop took {took:?}: SIGTERM was not handled"
    );

    // (b) As PID 1 of a shared PID namespace, it reaps the orphans another container leaves.
    let holder = run_detached("berth-pause-holder-", &["--ipc", "shareable", &name]);
    let listing = orphan_then_list(holder.name());
    assert!(
        listing
            .iter()
            .any(|l| l.starts_with("1 (pause) ") && state(l) == Some('S')),
        "the pause is PID 1 of the namespace, asleep: {listing:#?}"
    );
    eprintln!("the pause's PID namespace after the orphans: {listing:#?}");
    assert!(
        zombies(&listing).is_empty(),
        "zombies left in the pause's PID namespace: {listing:#?}"
    );
    let running = docker(&["inspect", "-f", "{{.State.Running}}", holder.name()]);
    assert_eq!(running.trim(), "true", "the pause still runs");
}

/// The control: with a PID 1 that does not reap (busybox `sleep`), the same orphans stay zombies
/// whose parent is PID 1, so the check above would see them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_reaper_the_orphans_stay_zombies() {
    let client = berth_testkit::docker().await;
    require_image(&client, &test_image()).await;
    let holder = run_detached("berth-pause-control-", &[&test_image(), "sleep", "3600"]);
    let listing = orphan_then_list(holder.name());
    let zombies = zombies(&listing);
    assert!(!zombies.is_empty(), "no zombie: {listing:#?}");
    for z in zombies {
        let ppid = z[z.rfind(')').expect("comm") + 1..]
            .split_whitespace()
            .nth(1);
        assert_eq!(ppid, Some("1"), "reparented to PID 1: {z}");
    }
}

#[test]
fn the_state_is_read_after_the_last_parenthesis() {
    assert_eq!(state("1 (pause) S 0 1 1"), Some('S'));
    assert_eq!(state("7 (a) b) Z 1 7 7"), Some('Z'));
    assert_eq!(state("garbage"), None);
}
