//! What the berth-volume integration tests share: an in-process plugin on a socket in a private
//! temporary directory, and a guard that unmounts whatever a test left mounted there (even when
//! the test panics), through `berth_testkit::mount`, the one place test code mounts.
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

pub use berth_testkit::mount::is_mounted;

/// Lazily unmounts every mount at or below `dir`, deepest first.
pub fn unmount_all_under(dir: &Path) {
    berth_testkit::mount::detach_all_under(dir);
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
