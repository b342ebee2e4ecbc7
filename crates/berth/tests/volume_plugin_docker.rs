//! `berth volume-plugin` as a process: with the real dockerd and docker CLI (the call sequences of
//! section 3 of `shared/reference/docker-volume-plugin.md`), and a kill -9 storm with a Rust client.
//!
//! Each dockerd test runs its own plugin (the built `berth` binary) under a driver name of its own,
//! with its socket in /run/docker/plugins and everything else in a private temporary directory,
//! and its own disposable Docker Engine ([`SecondEngine`]): dockerd never forgets a legacy plugin
//! it has used, and once the plugin is gone every `docker volume ls`, or removal of a volume it
//! does not know, asks each remembered plugin — 15–30 s of connection retries per plugin. Pointed
//! at an Engine of the test's own, the plugin is forgotten with that Engine, and the machine's
//! Engine is left as it was found.
//!
//! Declaration order is drop order reversed: the Engine first (stopped last), then the plugin,
//! then the containers and volumes ([`Engine::create_volume`], [`Engine::run_container`] return
//! guards that remove them from that Engine while the plugin still runs, even when a test fails).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use berth_testkit::mount::{Scratch, is_mounted, mounts_under};
use berth_testkit::second_engine::SecondEngine;
use berth_testkit::volume_plugin::PluginProcess;
use berth_testkit::{test_image, unique_name};
use berth_volume::client::Client;

const LOOP: &str = "trap 'exit 0' TERM; while true; do sleep 1; done";

/// A temporary directory that unmounts everything under it (deepest first, lazily) before it is
/// deleted.
fn new_scratch() -> Scratch {
    Scratch::with_prefix("berth-vp-test-")
}

/// `berth volume-plugin` on `socket`, everything else in `dir` ([`PluginProcess`]).
fn spawn_plugin(socket: &Path, dir: &Path, helper: Option<&Path>) -> PluginProcess {
    PluginProcess::spawn(env!("CARGO_BIN_EXE_berth"), socket, dir, helper)
}

/// A test's own Engine, with the test image, and the plugin driver name it will use.
struct Engine {
    engine: SecondEngine,
    /// The driver name (`berth-vp-<hex>`), this test's alone.
    drv: String,
    /// Where the plugin listens for it: /run/docker/plugins/<driver>.sock.
    socket: PathBuf,
}

/// Starts a test's Engine (see the module documentation).
fn engine() -> Engine {
    let engine = SecondEngine::start();
    engine.load_image(&test_image());
    let drv = unique_name("berth-vp-");
    let socket = PathBuf::from(format!("/run/docker/plugins/{drv}.sock"));
    Engine {
        engine,
        drv,
        socket,
    }
}

/// The test's promise to the machine: its Engine never heard of this test's plugin (`docker info`
/// lists every legacy volume plugin an Engine remembers).
impl Drop for Engine {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let out = std::process::Command::new("docker")
            .args(["info", "--format", "{{json .Plugins.Volume}}"])
            .output()
            .expect("docker info");
        let known: Vec<String> = serde_json::from_slice(&out.stdout).unwrap_or_default();
        assert!(
            !known.contains(&self.drv),
            "the machine's Engine remembers the test's plugin {}: {known:?}",
            self.drv
        );
    }
}

/// Removes a container (`rm -f -v`) or a volume (`volume rm -f`) from the test's Engine on drop,
/// unless disarmed.
struct Removal<'a> {
    engine: &'a SecondEngine,
    args: Vec<String>,
    armed: bool,
}

impl Removal<'_> {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Removal<'_> {
    fn drop(&mut self) {
        if self.armed {
            let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
            let _ = self.engine.docker(&args);
        }
    }
}

impl Engine {
    fn docker(&self, args: &[&str]) -> (bool, String) {
        self.engine.docker(args)
    }

    fn docker_ok(&self, args: &[&str]) -> String {
        self.engine.docker_ok(args)
    }

    fn create_volume(&self, name: &str, opts: &[&str]) -> Removal<'_> {
        let mut args = vec![
            "volume",
            "create",
            "-d",
            &self.drv,
            "--label",
            "berth.test=1",
        ];
        for o in opts {
            args.push("-o");
            args.push(o);
        }
        args.push(name);
        let guard = Removal {
            engine: &self.engine,
            args: vec!["volume".into(), "rm".into(), "-f".into(), name.into()],
            armed: true,
        };
        self.docker_ok(&args);
        guard
    }

    fn run_container(&self, name: &str, volume: &str) -> Removal<'_> {
        let guard = Removal {
            engine: &self.engine,
            args: vec!["rm".into(), "-f".into(), "-v".into(), name.into()],
            armed: true,
        };
        let mount = format!("{volume}:/data");
        self.docker_ok(&[
            "run",
            "-d",
            "--label",
            "berth.test=1",
            "--name",
            name,
            "-v",
            &mount,
            &test_image(),
            "sh",
            "-c",
            LOOP,
        ]);
        guard
    }

    /// `docker volume inspect`'s Status.mounts.
    fn status_mounts(&self, volume: &str) -> BTreeMap<String, u64> {
        let text = self.docker_ok(&[
            "volume",
            "inspect",
            "--format",
            "{{json .Status.mounts}}",
            volume,
        ]);
        serde_json::from_str(&text).unwrap_or_default()
    }
}

#[test]
fn docker_cp_two_containers_stop_and_remove() {
    let scratch = new_scratch();
    let e = engine();
    let socket = e.socket.clone();
    let _plugin = spawn_plugin(&socket, scratch.path(), None);
    let vol = unique_name("berth-vp-");
    let v = e.create_volume(&vol, &["type=tmpfs", "o=size=8m"]);
    let mp = scratch.path().join("volumes").join(&vol);
    let c1 = unique_name("berth-vp-c1-");
    let c2 = unique_name("berth-vp-c2-");
    let _g1 = e.run_container(&c1, &vol);
    assert!(is_mounted(&mp), "mounted for the running container");

    // docker cp into and out of the running container: same mount ID, counted, never unmounted.
    let host_in = scratch.path().join("in.txt");
    std::fs::write(&host_in, b"from host\n").unwrap();
    e.docker_ok(&[
        "cp",
        host_in.to_str().unwrap(),
        &format!("{c1}:/data/in.txt"),
    ]);
    assert!(is_mounted(&mp));
    assert_eq!(
        e.docker_ok(&["exec", &c1, "cat", "/data/in.txt"]),
        "from host"
    );
    e.docker_ok(&[
        "exec",
        &c1,
        "sh",
        "-c",
        "echo from container > /data/out.txt",
    ]);
    let host_out = scratch.path().join("out.txt");
    e.docker_ok(&[
        "cp",
        &format!("{c1}:/data/out.txt"),
        host_out.to_str().unwrap(),
    ]);
    assert_eq!(
        std::fs::read_to_string(&host_out).unwrap(),
        "from container\n"
    );
    assert!(is_mounted(&mp), "still mounted after both copies");
    e.docker_ok(&[
        "exec",
        &c1,
        "sh",
        "-c",
        "echo again > /data/again && cat /data/in.txt",
    ]);
    assert_eq!(
        std::fs::read_to_string(mp.join("again")).unwrap(),
        "again\n"
    );
    let counts = e.status_mounts(&vol);
    assert_eq!(
        counts.values().copied().collect::<Vec<_>>(),
        vec![1],
        "{counts:?}"
    );

    // Two containers: two IDs; stopping one keeps it mounted, stopping both unmounts.
    let _g2 = e.run_container(&c2, &vol);
    assert_eq!(e.status_mounts(&vol).len(), 2);
    e.docker_ok(&["stop", "-t", "2", &c1]);
    assert!(is_mounted(&mp), "c2 still uses it");
    assert_eq!(
        e.docker_ok(&["exec", &c2, "cat", "/data/in.txt"]),
        "from host"
    );
    e.docker_ok(&["stop", "-t", "2", &c2]);
    assert!(!is_mounted(&mp), "unmounted after the last stop");
    assert!(e.status_mounts(&vol).is_empty());

    e.docker_ok(&["rm", &c1, &c2]);
    e.docker_ok(&["volume", "rm", &vol]);
    v.disarm();
    assert!(!mp.exists(), "docker volume rm removes the mount point");
}

/// A tmpfs over the state directory, remounted read-only to make saves fail (root ignores
/// permission bits); restored read-write on drop.
struct StateDir(PathBuf);

impl StateDir {
    fn new(dir: &Path) -> StateDir {
        std::fs::create_dir_all(dir).unwrap();
        berth_testkit::mount::tmpfs("tmpfs", dir, c"size=1m");
        StateDir(dir.to_path_buf())
    }
    fn read_only(&self, ro: bool) {
        berth_testkit::mount::remount(&self.0, ro);
    }
}

impl Drop for StateDir {
    fn drop(&mut self) {
        berth_testkit::mount::remount_read_write_quietly(&self.0);
    }
}

#[test]
fn failed_mount_during_cp_keeps_the_running_containers_volume() {
    let scratch = new_scratch();
    let state = StateDir::new(&scratch.path().join("state"));
    let e = engine();
    let socket = e.socket.clone();
    let plugin = spawn_plugin(&socket, scratch.path(), None);
    let vol = unique_name("berth-vp-");
    let v = e.create_volume(&vol, &["type=tmpfs"]);
    let mp = scratch.path().join("volumes").join(&vol);
    let c1 = unique_name("berth-vp-c1-");
    let _g1 = e.run_container(&c1, &vol);
    e.docker_ok(&["exec", &c1, "sh", "-c", "echo before > /data/before"]);

    let host_in = scratch.path().join("in.txt");
    std::fs::write(&host_in, b"x").unwrap();
    state.read_only(true);
    let (ok, text) = e.docker(&[
        "cp",
        host_in.to_str().unwrap(),
        &format!("{c1}:/data/in.txt"),
    ]);
    state.read_only(false);
    assert!(
        !ok,
        "docker cp should fail while the state cannot be saved: {text}"
    );
    assert!(
        is_mounted(&mp),
        "the running container's volume must stay mounted"
    );
    assert_eq!(e.docker_ok(&["exec", &c1, "cat", "/data/before"]), "before");
    e.docker_ok(&["exec", &c1, "sh", "-c", "echo after > /data/after"]);
    assert_eq!(
        std::fs::read_to_string(mp.join("after")).unwrap(),
        "after\n"
    );
    let counts = e.status_mounts(&vol);
    assert_eq!(
        counts.values().sum::<u64>(),
        1,
        "only the container's reference: {counts:?}"
    );

    e.docker_ok(&["stop", "-t", "2", &c1]);
    if is_mounted(&mp) {
        // dockerd sends no Unmount at stop after such a failure (moby 37834): the reference leaked,
        // which is what `release --unused` repairs.
        let (ok, out) = plugin.berth(&[
            "release",
            "--socket",
            socket.to_str().unwrap(),
            "--unused",
            "--docker-host",
            &e.engine.host(),
        ]);
        assert!(ok, "{out}");
        assert!(out.contains("released 1 reference"), "{out}");
    }
    assert!(!is_mounted(&mp));
    e.docker_ok(&["rm", &c1]);
    e.docker_ok(&["volume", "rm", &vol]);
    v.disarm();
    drop(plugin);
}

#[test]
fn plugin_killed_and_restarted_while_a_container_runs() {
    let scratch = new_scratch();
    let e = engine();
    let socket = e.socket.clone();
    let mut plugin = spawn_plugin(&socket, scratch.path(), None);
    let vol = unique_name("berth-vp-");
    let v = e.create_volume(&vol, &["type=tmpfs"]);
    let mp = scratch.path().join("volumes").join(&vol);
    let c1 = unique_name("berth-vp-c1-");
    let _g1 = e.run_container(&c1, &vol);
    e.docker_ok(&["exec", &c1, "sh", "-c", "echo kept > /data/f"]);

    plugin.kill9();
    assert!(is_mounted(&mp), "a dead plugin unmounts nothing");
    plugin.start();
    // dockerd asks the restarted plugin (Get): the volume survived. (Not `docker volume ls`,
    // which also asks every legacy plugin dockerd ever used, ~15 s for each one that is gone.)
    let driver_name = e.docker_ok(&["volume", "inspect", "--format", "{{.Driver}}", &vol]);
    assert_eq!(driver_name, e.drv);
    assert_eq!(
        e.status_mounts(&vol).len(),
        1,
        "the reference survived the restart"
    );
    assert!(is_mounted(&mp));
    assert_eq!(e.docker_ok(&["exec", &c1, "cat", "/data/f"]), "kept");
    e.docker_ok(&["stop", "-t", "2", &c1]);
    assert!(
        !is_mounted(&mp),
        "the restarted plugin unmounts at docker stop"
    );

    // SIGTERM: exit 0, socket removed, nothing unmounted.
    let c2 = unique_name("berth-vp-c2-");
    let _g2 = e.run_container(&c2, &vol);
    assert_eq!(plugin.terminate().code(), Some(0));
    assert!(!socket.exists());
    assert!(is_mounted(&mp), "SIGTERM unmounts nothing");
    plugin.start();
    e.docker_ok(&["rm", "-f", &c1, &c2]);
    assert!(!is_mounted(&mp));
    e.docker_ok(&["volume", "rm", &vol]);
    v.disarm();
}

#[test]
fn release_unused_repairs_a_leaked_reference() {
    let scratch = new_scratch();
    let e = engine();
    let socket = e.socket.clone();
    let plugin = spawn_plugin(&socket, scratch.path(), None);
    let leaky = unique_name("berth-vp-");
    let busy = unique_name("berth-vp-");
    let v1 = e.create_volume(&leaky, &["type=tmpfs"]);
    let v2 = e.create_volume(&busy, &["type=tmpfs"]);
    let leaky_mp = scratch.path().join("volumes").join(&leaky);
    let busy_mp = scratch.path().join("volumes").join(&busy);
    let c1 = unique_name("berth-vp-c1-");
    let c2 = unique_name("berth-vp-c2-");
    let _g1 = e.run_container(&c1, &leaky);
    let _g2 = e.run_container(&c2, &busy);

    // A file held open on the host makes the Unmount at stop fail (EBUSY): dockerd never retries,
    // the reference leaks.
    let open = std::fs::File::create(leaky_mp.join("held-open")).unwrap();
    e.docker_ok(&["stop", "-t", "2", &c1]);
    drop(open);
    assert!(is_mounted(&leaky_mp));
    assert_eq!(
        e.status_mounts(&leaky).len(),
        1,
        "the leaked reference is visible"
    );

    let s = socket.to_str().unwrap();
    // `release --unused` asks the Engine which containers run: this test's.
    let host = e.engine.host();
    let (ok, out) = plugin.berth(&[
        "release",
        "--socket",
        s,
        "--unused",
        "--dry-run",
        "--docker-host",
        &host,
    ]);
    assert!(ok && out.contains("would release 1 reference"), "{out}");
    assert!(is_mounted(&leaky_mp));
    let (ok, out) = plugin.berth(&["release", "--socket", s, "--unused", "--docker-host", &host]);
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!("volume {leaky}: released 1 reference")),
        "{out}"
    );
    assert!(
        out.contains(&format!("volume {busy}: used by a running container; kept")),
        "{out}"
    );
    assert!(!is_mounted(&leaky_mp), "released and unmounted");
    assert!(
        is_mounted(&busy_mp),
        "the running container's volume is untouched"
    );

    // `release NAME ID` by hand.
    let id = e.status_mounts(&busy).into_keys().next().unwrap();
    let (ok, out) = plugin.berth(&["release", "--socket", s, &busy, &id]);
    assert!(
        ok && out.contains("no references remain: unmounted"),
        "{out}"
    );
    e.docker_ok(&["rm", "-f", &c1, &c2]);
    e.docker_ok(&["volume", "rm", &leaky, &busy]);
    v1.disarm();
    v2.disarm();
}

#[test]
fn efs_volume_with_the_engines_options_goes_through_the_helper() {
    let scratch = new_scratch();
    let log = scratch.path().join("helper.log");
    let helper = scratch.path().join("record-mount");
    let script = format!(
        "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\" >> '{}'; done\nfor last in \"$@\"; do :; done\n\
         exec mount -t tmpfs -o size=1m berth-helper \"$last\"\n",
        log.display()
    );
    std::fs::File::create(&helper)
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    std::fs::set_permissions(&helper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let e = engine();
    let socket = e.socket.clone();
    let _plugin = spawn_plugin(&socket, scratch.path(), Some(&helper));

    // The options berth-engine builds for an efsVolumeConfiguration.
    let cfg = berth_model::EfsVolumeConfiguration {
        file_system_id: "fs-0123abcd".into(),
        root_directory: "/exports/app".into(),
        transit_encryption: true,
        access_point_id: Some("fsap-0123456789abcdef0".into()),
        iam: true,
    };
    let opts: Vec<String> = berth_engine::spec::efs_driver_opts(&cfg)
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let opts: Vec<&str> = opts.iter().map(String::as_str).collect();
    let vol = unique_name("berth-vp-");
    let v = e.create_volume(&vol, &opts);
    let mp = scratch.path().join("volumes").join(&vol);
    let c1 = unique_name("berth-vp-c1-");
    let _g1 = e.run_container(&c1, &vol);
    assert!(is_mounted(&mp));
    let argv: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        argv,
        vec![
            "-t",
            "efs",
            "-o",
            "tls,iam,accesspoint=fsap-0123456789abcdef0",
            "fs-0123abcd:/exports/app",
            mp.to_str().unwrap()
        ]
    );
    e.docker_ok(&["rm", "-f", &c1]);
    assert!(!is_mounted(&mp));
    e.docker_ok(&["volume", "rm", &vol]);
    v.disarm();
}

/// A tiny deterministic PRNG (xorshift64), enough to vary the storm.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// One client's view during the storm.
#[derive(Default)]
struct ClientModel {
    /// Acknowledged counts per (volume, id).
    acked: BTreeMap<(String, String), u64>,
    /// The operation in flight when the plugin died: (volume, id, +1 or -1).
    in_flight: Option<(String, String, i64)>,
}

async fn storm_client(
    socket: PathBuf,
    volumes: Vec<String>,
    me: usize,
    seed: u64,
    mut model: ClientModel,
) -> ClientModel {
    let mut rng = XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let Ok(mut client) = Client::connect(&socket).await else {
        return model;
    };
    loop {
        let vol = volumes[rng.below(volumes.len() as u64) as usize].clone();
        let id = format!("storm{me:02}x{}", rng.below(3));
        let key = (vol.clone(), id.clone());
        let held = model.acked.get(&key).copied().unwrap_or(0);
        let up = held == 0 || rng.below(2) == 0;
        model.in_flight = Some((vol.clone(), id.clone(), if up { 1 } else { -1 }));
        let result = if up {
            client.mount(&vol, &id).await.map(|_| ())
        } else {
            client.unmount(&vol, &id).await
        };
        match result {
            Ok(()) => {
                let n = model.acked.entry(key).or_insert(0);
                if up {
                    *n += 1;
                } else {
                    *n -= 1;
                }
                model.in_flight = None;
            }
            Err(berth_volume::Error::Remote(e)) => panic!("the plugin refused {key:?}: {e}"),
            Err(_) => return model, // the plugin died: in_flight stays uncertain
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_storm_state_and_mounts_agree() {
    let scratch = new_scratch();
    let socket = scratch.path().join("storm.sock");
    let mut plugin = spawn_plugin(&socket, scratch.path(), None);
    let root = scratch.path().join("volumes");
    // Three volumes hold a base reference the whole time (they must never be unmounted); one
    // ("churn") has only the storm's references, so it is really mounted and unmounted.
    let held = ["held0", "held1", "held2"];
    let all: Vec<String> = held
        .iter()
        .map(|s| s.to_string())
        .chain(["churn".to_owned()])
        .collect();
    {
        let mut c = Client::connect(&socket).await.unwrap();
        for v in &all {
            c.create(v, &[("type", "tmpfs"), ("o", "size=1m")])
                .await
                .unwrap();
        }
        for v in held {
            c.mount(v, "base").await.unwrap();
        }
    }
    const CLIENTS: usize = 16;
    let mut models: Vec<ClientModel> = (0..CLIENTS).map(|_| ClientModel::default()).collect();
    let watch_stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (root, stop) = (root.clone(), std::sync::Arc::clone(&watch_stop));
        std::thread::spawn(move || {
            let mut checks = 0u64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                for v in held {
                    assert!(is_mounted(&root.join(v)), "{v} unmounted while referenced");
                }
                checks += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            checks
        })
    };
    for round in 0..6u64 {
        let tasks: Vec<_> = models
            .drain(..)
            .enumerate()
            .map(|(i, m)| {
                tokio::spawn(storm_client(
                    socket.clone(),
                    all.clone(),
                    i,
                    round * 100 + i as u64,
                    m,
                ))
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(150 + 70 * round)).await;
        plugin.kill9();
        for t in tasks {
            models.push(t.await.expect("client task"));
        }
        // Restart and compare, per (volume, id): the saved count is the acknowledged one, or that
        // plus the in-flight change.
        plugin.start();
        let mut c = Client::connect(&socket).await.unwrap();
        let mut actual: BTreeMap<(String, String), u64> = BTreeMap::new();
        for v in &all {
            let st = c.get(v).await.unwrap().status.unwrap();
            for (id, n) in st.mounts {
                actual.insert((v.clone(), id), n);
            }
            if st.references > 0 {
                assert!(
                    st.mounted && is_mounted(&root.join(v)),
                    "round {round}: {v} referenced but not mounted"
                );
            }
        }
        for v in held {
            assert_eq!(actual.remove(&(v.to_owned(), "base".to_owned())), Some(1));
        }
        for m in &mut models {
            for ((v, id), n) in m.acked.clone() {
                let got = actual.remove(&(v.clone(), id.clone())).unwrap_or(0);
                let mut allowed = vec![n];
                if let Some((fv, fid, d)) = &m.in_flight
                    && (fv, fid) == (&v, &id)
                {
                    allowed.push((n as i64 + d) as u64);
                }
                assert!(
                    allowed.contains(&got),
                    "round {round}: {v}/{id}: saved {got}, acknowledged {n}, in flight {:?}",
                    m.in_flight
                );
                // Resolve the uncertainty for the next round: adopt what was saved.
                m.acked.insert((v, id), got);
            }
            if let Some((fv, fid, _)) = m.in_flight.take()
                && let Some(got) = actual.remove(&(fv.clone(), fid.clone()))
            {
                assert_eq!(
                    got, 1,
                    "round {round}: a fresh in-flight Mount saved as {got}"
                );
                m.acked.insert((fv, fid), got);
            }
        }
        assert!(
            actual.is_empty(),
            "round {round}: references nobody made: {actual:?}"
        );
    }
    watch_stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let checks = watcher.join().expect("held volumes stayed mounted");
    assert!(checks > 10);

    // Release everything; every volume ends unmounted and removable.
    let mut c = Client::connect(&socket).await.unwrap();
    for v in &all {
        for id in c.get(v).await.unwrap().status.unwrap().mounts.into_keys() {
            c.release(v, &id, None).await.unwrap();
        }
        assert!(!is_mounted(&root.join(v)));
        c.remove(v).await.unwrap();
    }
    assert!(mounts_under(scratch.path()).is_empty());
    assert_eq!(plugin.terminate().code(), Some(0));
}
