//! A second, disposable Docker Engine of a test's own, beside the machine's: for tests that would
//! leave the machine's Engine changed. The one such change known is a legacy volume plugin:
//! dockerd remembers every legacy plugin it has talked to until it restarts, and once the
//! plugin's socket is gone every `docker volume ls` or inspect on that Engine waits 15–30 s for
//! it. A test that registers a plugin points this Engine at it instead, and the Engine goes away
//! with the test.
//!
//! How (shared/reference/test-infrastructure.md): `dockerd` with its own data root, exec root
//! (so its own containerd), pid file and Unix socket in a [`Scratch`] directory, its own
//! configuration file (the machine's `/etc/docker/daemon.json` sets `data-root`, which would
//! clash with the flag), the `vfs` storage driver (no overlay support needed; the test images
//! are 2 MB), `--iptables=false`, and a bridge of its own (`bt` + 6 hex digits, a free
//! `10.213.N.0/24`) — never `--bridge=none`, which deletes the host's `docker0`.
//!
//! Drop: SIGTERM (SIGKILL after 20 s), the bridge deleted, every mount under the directory
//! detached, the directory removed. A test that creates containers on a plugin volume removes
//! them (and the volumes) while the plugin still runs, so the Engine's shutdown asks no dead
//! plugin anything: declare the engine first, the plugin second, the guards last.
//!
//! Limits: test code only; root, `dockerd` and `ip` (iproute2) needed — their absence panics with
//! a message. Every helper panics on failure (it is test setup).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::mount::Scratch;

/// How long the Engine may take to answer after it starts.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long it may take to stop on SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// A running disposable Engine.
pub struct SecondEngine {
    dockerd: Child,
    bridge: String,
    socket: PathBuf,
    // Dropped after `drop` stopped dockerd: detaches leftover mounts, then deletes.
    _dir: Scratch,
}

fn run(cmd: &mut Command) -> (bool, String) {
    match cmd.output() {
        Ok(out) => (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
            .trim()
            .to_owned(),
        ),
        Err(e) => (false, format!("cannot run {cmd:?}: {e}")),
    }
}

/// Creates a bridge `name` with the first free `10.213.N.1/24` (N in 100..=250), under a
/// machine-wide lock so two tests never pick one subnet.
fn create_bridge(name: &str) -> String {
    let lock_dir = if Path::new("/run/lock").is_dir() {
        "/run/lock"
    } else {
        "/tmp"
    };
    let lock =
        std::fs::File::create(format!("{lock_dir}/berth-test-bridges.lock")).expect("lock file");
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).expect("flock");
    let (ok, used) = run(Command::new("ip").args(["-o", "-4", "addr", "show"]));
    assert!(
        ok,
        "a second Docker Engine needs iproute2's `ip` (apt-get install iproute2): {used}"
    );
    let n = (100..=250)
        .find(|n| !used.contains(&format!(" 10.213.{n}.")))
        .expect("a free 10.213.N.0/24 for the second Engine's bridge");
    let address = format!("10.213.{n}.1/24");
    for args in [
        vec!["link", "add", name, "type", "bridge"],
        vec!["addr", "add", &address, "dev", name],
        vec!["link", "set", name, "up"],
    ] {
        let (ok, out) = run(Command::new("ip").args(&args));
        if !ok {
            let _ = run(Command::new("ip").args(["link", "del", name]));
            panic!(
                "ip {}: {out} (a second Docker Engine needs root)",
                args.join(" ")
            );
        }
    }
    address
}

impl SecondEngine {
    /// Starts the Engine and waits until it answers.
    ///
    /// # Panics
    ///
    /// When it cannot be started or does not answer within 30 s (its log is in the message).
    pub fn start() -> SecondEngine {
        let dir = Scratch::with_prefix("berth-engine-");
        let suffix = format!("{:06x}", rand::random::<u32>() & 0xff_ffff);
        let bridge = format!("bt{suffix}");
        create_bridge(&bridge);
        let config = dir.join("daemon.json");
        std::fs::write(
            &config,
            br#"{"storage-driver": "vfs", "log-driver": "json-file"}"#,
        )
        .expect("write daemon.json");
        let socket = dir.join("docker.sock");
        let log_path = dir.join("dockerd.log");
        let log = std::fs::File::create(&log_path).expect("dockerd log");
        let started = Command::new("dockerd")
            .arg("--config-file")
            .arg(&config)
            .arg("--data-root")
            .arg(dir.join("data"))
            .arg("--exec-root")
            .arg(dir.join("exec"))
            .arg("--pidfile")
            .arg(dir.join("docker.pid"))
            .arg("-H")
            .arg(format!("unix://{}", socket.display()))
            .args(["-b", &bridge, "--iptables=false"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log fd"))
            .stderr(log)
            .spawn();
        let dockerd = match started {
            Ok(child) => child,
            Err(e) => {
                let _ = run(Command::new("ip").args(["link", "del", &bridge]));
                panic!("cannot start a second dockerd: {e} (Debian: apt-get install docker.io)")
            }
        };
        let engine = SecondEngine {
            dockerd,
            bridge,
            socket,
            _dir: dir,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if engine
                .docker(&["version", "--format", "{{.Server.Version}}"])
                .0
            {
                return engine;
            }
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            assert!(
                Instant::now() < deadline,
                "the second dockerd did not answer within {START_TIMEOUT:?}; its log:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `unix://<its socket>`, for `DOCKER_HOST` or `--docker-host`.
    pub fn host(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// The docker CLI against this Engine: (success, stdout and stderr trimmed).
    pub fn docker(&self, args: &[&str]) -> (bool, String) {
        run(Command::new("docker").arg("-H").arg(self.host()).args(args))
    }

    /// [`Self::docker`] that must succeed; its output.
    ///
    /// # Panics
    ///
    /// When the command fails.
    pub fn docker_ok(&self, args: &[&str]) -> String {
        let (ok, text) = self.docker(args);
        assert!(ok, "docker -H {} {args:?} failed: {text}", self.host());
        text
    }

    /// Copies `image` from the machine's Engine into this one (`docker save | docker load`).
    ///
    /// # Panics
    ///
    /// When the machine's Engine does not have it (run scripts/setup-images) or the load fails.
    pub fn load_image(&self, image: &str) {
        let saved = Command::new("docker")
            .args(["save", image])
            .output()
            .expect("docker save");
        assert!(
            saved.status.success(),
            "docker save {image}: {} (run scripts/setup-images; scripts/test does)",
            String::from_utf8_lossy(&saved.stderr).trim()
        );
        let mut load = Command::new("docker")
            .arg("-H")
            .arg(self.host())
            .args(["load", "-q"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("docker load");
        load.stdin
            .take()
            .expect("piped stdin")
            .write_all(&saved.stdout)
            .expect("write the image to docker load");
        let out = load.wait_with_output().expect("docker load");
        assert!(
            out.status.success(),
            "docker load {image} into the second Engine: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
}

impl Drop for SecondEngine {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.dockerd.id())
            && let Some(pid) = rustix::process::Pid::from_raw(pid)
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match self.dockerd.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() >= deadline => {
                    let _ = self.dockerd.kill();
                    let _ = self.dockerd.wait();
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        let _ = run(Command::new("ip").args(["link", "del", &self.bridge]));
        // `dir` drops next: mounts detached, directory removed.
    }
}
