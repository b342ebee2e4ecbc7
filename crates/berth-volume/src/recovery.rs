//! Reconciling the loaded state with the mounts that exist, at start.
//!
//! - A volume with references whose mount exists: mounted, nothing to do.
//! - A volume with references whose mount is missing (the host rebooted, someone unmounted it):
//!   mounted again; if that fails the references are kept and the problem is shown in `Status`.
//! - A volume without references that is mounted (a crash between mounting and saving): adopted
//!   and left in place, reported; it is unmounted by the volume's next last Unmount or its Remove.
//! - A mount under `--mount-root` that no volume owns: left in place and reported. Nothing is ever
//!   torn down on a guess.

use std::path::PathBuf;

use crate::mounter::canonical;
use crate::registry::Registry;

/// What recovery found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Volumes with references whose mount was in place.
    pub kept: Vec<String>,
    /// Volumes with references that were mounted again.
    pub remounted: Vec<String>,
    /// Volumes with references that could not be mounted again, with the reason.
    pub failed: Vec<(String, String)>,
    /// Volumes without references found mounted (left in place).
    pub unreferenced: Vec<String>,
    /// Mounts under the mount root that belong to no volume (left in place).
    pub unknown_mounts: Vec<PathBuf>,
}

impl Registry {
    /// Reconcile with `/proc/self/mountinfo` (through the mounter); see the module documentation.
    pub async fn recover(&self) -> RecoveryReport {
        let mut report = RecoveryReport::default();
        let mounter = std::sync::Arc::clone(self.mounter());
        let points = match tokio::task::spawn_blocking(move || mounter.mount_points()).await {
            Ok(Ok(points)) => points,
            Ok(Err(e)) => {
                tracing::error!(error = %e, "recovery: cannot list mounts; assuming none");
                Vec::new()
            }
            Err(e) => {
                tracing::error!(error = %e, "recovery: cannot list mounts; assuming none");
                Vec::new()
            }
        };
        let volumes: Vec<(String, PathBuf, u64)> = self.with_data(|data| {
            data.iter()
                .map(|(n, v)| (n.clone(), v.record.path.clone(), v.record.total()))
                .collect()
        });
        let mut owned = Vec::new();
        for (name, path, total) in volumes {
            let real = canonical(&path);
            let is_mounted = points.contains(&real);
            owned.push(real);
            if is_mounted {
                self.with_data(|d| {
                    if let Some(v) = d.get_mut(&name) {
                        v.mounted = true;
                    }
                });
                if total > 0 {
                    report.kept.push(name);
                } else {
                    tracing::warn!(volume = %name, path = %path.display(),
                        "recovery: mounted but not referenced; left in place");
                    report.unreferenced.push(name);
                }
                continue;
            }
            if total == 0 {
                continue;
            }
            // Mount through the same path as a Mount call (adopts, creates the directory).
            match self.remount(&name).await {
                Ok(()) => {
                    tracing::info!(volume = %name, "recovery: referenced volume mounted again");
                    report.remounted.push(name);
                }
                Err(e) => {
                    tracing::error!(volume = %name, error = %e, "recovery: cannot mount referenced volume");
                    let reason = e.to_string();
                    self.with_data(|d| {
                        if let Some(v) = d.get_mut(&name) {
                            v.problem = Some(format!("not mounted at start: {reason}"));
                        }
                    });
                    report.failed.push((name, reason));
                }
            }
        }
        let root = canonical(self.mount_root());
        for point in points {
            if point.starts_with(&root) && point != root && !owned.contains(&point) {
                tracing::warn!(path = %point.display(), "recovery: mount under the mount root that no volume owns; left in place");
                report.unknown_mounts.push(point);
            }
        }
        report
    }
}
