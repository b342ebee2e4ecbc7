//! What the berth-volume integration tests share: an in-process plugin on a socket in a private
//! temporary directory, and a guard that unmounts whatever a test left mounted there (even when
//! the test panics).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use berth_volume::client::Client;
use berth_volume::mounter::{Mounter, SystemMounter};
use berth_volume::server::Server;
use berth_volume::{Registry, ServeConfig};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Unmounts everything at or below its directory on drop (deepest first, lazily), then lets the
/// temporary directory be deleted.
pub struct MountGuard {
    pub dir: tempfile::TempDir,
}

impl MountGuard {
    pub fn new() -> MountGuard {
        let dir = tempfile::Builder::new()
            .prefix("berth-volume-test-")
            .tempdir()
            .expect("tempdir");
        MountGuard { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for MountGuard {
    fn drop(&mut self) {
        unmount_all_under(self.dir.path());
    }
}

/// Every mount point at or below `dir`.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    berth_fs::mountinfo::read_self()
        .expect("mountinfo")
        .into_iter()
        .map(|m| m.mount_point)
        .filter(|p| p.starts_with(&dir))
        .collect()
}

pub fn unmount_all_under(dir: &Path) {
    for _ in 0..10 {
        let mut points = mounts_under(dir);
        if points.is_empty() {
            return;
        }
        points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        for p in points {
            let _ = rustix::mount::unmount(&p, rustix::mount::UnmountFlags::DETACH);
        }
    }
}

/// Whether something is mounted exactly at `path`.
pub fn is_mounted(path: &Path) -> bool {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    berth_fs::mountinfo::read_self()
        .expect("mountinfo")
        .iter()
        .any(|m| m.mount_point == path)
}

/// An in-process plugin.
pub struct Plugin {
    pub config: ServeConfig,
    pub registry: Arc<Registry>,
    pub recovery: berth_volume::recovery::RecoveryReport,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<berth_volume::Result<()>>>,
}

impl Plugin {
    /// A config whose socket, state file and mount root are inside `dir`.
    pub fn config(dir: &Path) -> ServeConfig {
        ServeConfig::new(
            &dir.join("plugin.sock"),
            &dir.join("state/volume-plugin.json"),
            &dir.join("volumes"),
        )
    }

    pub async fn start(config: ServeConfig) -> Plugin {
        let mounter = SystemMounter::new(config.mount_helper.clone(), config.mount_timeout);
        Plugin::start_with(config, Arc::new(mounter)).await
    }

    pub async fn start_with(config: ServeConfig, mounter: Arc<dyn Mounter>) -> Plugin {
        let server = Server::start_with(&config, mounter)
            .await
            .expect("plugin starts");
        let registry = Arc::clone(server.registry());
        let recovery = server.recovery().clone();
        let (tx, rx) = oneshot::channel();
        let task = tokio::spawn(server.run(async move {
            let _ = rx.await;
        }));
        Plugin {
            config,
            registry,
            recovery,
            stop: Some(tx),
            task: Some(task),
        }
    }

    pub async fn client(&self) -> Client {
        Client::connect(&self.config.socket).await.expect("connect")
    }

    /// Stop as on SIGTERM and wait until it has.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("join").expect("serve");
        }
    }
}

/// A mount helper that records its argv (one argument per line, runs separated by a `--` line)
/// into `log`, then mounts a tmpfs at its last argument. Returns its path.
pub fn recording_helper(dir: &Path, log: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("record-mount");
    let script = format!(
        "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\" >> '{log}'; done\necho -- >> '{log}'\n\
         for last in \"$@\"; do :; done\nexec mount -t tmpfs -o size=1m berth-helper \"$last\"\n",
        log = log.display()
    );
    std::fs::write(&path, script).expect("write helper");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}
