//! The reference-counting core.
//!
//! Every volume has a count per mount ID (an integer, never a set: `docker cp` on a running
//! container reuses the container's ID). The first reference mounts, the last release unmounts;
//! a Mount on a mounted volume only increments, doing no I/O that could fail.
//!
//! Concurrency: operations on one volume are serialized by that volume's async lock, held across
//! the mount or unmount I/O, so a hung network mount blocks only its own volume. The in-memory
//! data is behind a short-held mutex that is never held across I/O, so `Get`, `List` and the
//! committer's snapshots never wait for a mount. Each change is applied in memory under the volume
//! lock; the lock is released and the handler then waits for a durable save that contains the
//! change (group commit, see [`crate::persist`]) before answering. Later operations on the same
//! volume see the change at once; a save contains every change applied before it started, so saves
//! can never make an earlier change durable without a later one.
//!
//! When a save fails (see the reference, section 3):
//!
//! - Mount of an ID that had no reference: rolled back (the reference is dropped, and the volume
//!   unmounted if no reference remains), the answer is an error.
//! - Mount of an ID that already holds references: the increment stands and the answer is an
//!   error. dockerd answers a failed Mount during `docker cp` on a running container with an
//!   Unmount for that same ID; with the increment standing, that Unmount takes back the cp's
//!   reference and the container keeps its own. A rollback would let it take the container's.
//! - Unmount (and release): the decrement — and the unmount, if it was the last reference — stands
//!   and the answer is an error. The next successful save records it; if the plugin dies first the
//!   file keeps one reference too many: a visible, repairable leak, never an unmount under a live
//!   container.
//! - Create: rolled back. Remove: stands.
//!
//! Invariant (checked by the property test): a volume is mounted exactly when its total count is
//! positive — except a mount found at start that nothing references, which is adopted and left in
//! place until the volume is next used or removed.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::OwnedMutexGuard;

use crate::mounter::Mounter;
use crate::names::{validate_id, validate_name};
use crate::options::Backend;
use crate::persist::{Committer, Persister, SaveError};
use crate::protocol::{ListEntry, VolumeInfo, VolumeStatus};
use crate::state::{VolumeRecord, Volumes};
use crate::{Error, Result};

/// A volume in memory: its durable record plus what is known of the system.
#[derive(Debug, Clone)]
pub struct Volume {
    pub record: VolumeRecord,
    /// The validated options; an error for a volume loaded from a file with options berth does not
    /// accept (it is listed, but cannot be mounted).
    pub backend: std::result::Result<Backend, String>,
    /// Whether it is mounted at `record.path`.
    pub mounted: bool,
    /// A problem found at start or by a failed rollback, shown in `Status`.
    pub problem: Option<String>,
}

type Data = BTreeMap<String, Volume>;

/// What a release did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    pub released: u64,
    pub remaining: u64,
    pub unmounted: bool,
}

/// The registry of volumes; see the module documentation.
pub struct Registry {
    mount_root: PathBuf,
    data: Arc<Mutex<Data>>,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    mounter: Arc<dyn Mounter>,
    committer: Committer,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("mount_root", &self.mount_root)
            .finish_non_exhaustive()
    }
}

/// Lock a std mutex; a poisoned one (a panic while it was held) is still usable: every critical
/// section here leaves the data consistent at each step.
fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The per-volume operation lock; on drop, forgets the lock of a volume that no longer exists
/// when nobody else waits for it.
struct VolumeLock<'a> {
    registry: &'a Registry,
    name: String,
    guard: Option<OwnedMutexGuard<()>>,
}

impl Drop for VolumeLock<'_> {
    fn drop(&mut self) {
        self.guard = None;
        if locked(&self.registry.data).contains_key(&self.name) {
            return;
        }
        let mut locks = locked(&self.registry.locks);
        if locks
            .get(&self.name)
            .is_some_and(|l| Arc::strong_count(l) == 1)
        {
            locks.remove(&self.name);
        }
    }
}

fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

fn describe_refs(mounts: &BTreeMap<String, u64>) -> String {
    let parts: Vec<String> = mounts
        .iter()
        .map(|(id, n)| {
            let short: String = id.chars().take(12).collect();
            format!("mount ID {short}… holds {n}")
        })
        .collect();
    parts.join(", ")
}

/// Who asked to drop a reference: Docker's `Unmount`, or `berth volume-plugin release`.
#[derive(Clone, Copy)]
enum From {
    Unmount,
    Release,
}

impl Registry {
    /// A registry over `volumes` (from [`crate::state::load`]); starts the committer thread.
    /// Nothing is mounted or checked: see [`Registry::recover`].
    pub fn new(
        volumes: Volumes,
        mount_root: &Path,
        mounter: Arc<dyn Mounter>,
        persister: Arc<dyn Persister>,
    ) -> Result<Registry> {
        let data: Data = volumes
            .into_iter()
            .map(|(name, record)| {
                let backend = Backend::parse(&name, &record.options).map_err(|e| e.to_string());
                let problem = backend.as_ref().err().cloned();
                let volume = Volume {
                    record,
                    backend,
                    mounted: false,
                    problem,
                };
                (name, volume)
            })
            .collect();
        let data = Arc::new(Mutex::new(data));
        let snap = Arc::clone(&data);
        let snapshot = Arc::new(move || {
            let volumes: Volumes = locked(&snap)
                .iter()
                .map(|(n, v)| (n.clone(), v.record.clone()))
                .collect();
            crate::state::to_bytes(&volumes).map_err(|e| SaveError {
                op: "serializing state",
                path: PathBuf::new(),
                kind: std::io::ErrorKind::InvalidData,
                message: e.to_string(),
            })
        });
        let committer = Committer::start(persister, snapshot).map_err(|source| Error::Io {
            op: "starting the committer thread for",
            path: PathBuf::from("state"),
            source,
        })?;
        Ok(Registry {
            mount_root: mount_root.to_path_buf(),
            data,
            locks: Mutex::new(HashMap::new()),
            mounter,
            committer,
        })
    }

    /// Wait until a save holding every change applied so far is durable; its failure names the
    /// change (`what` happened) that is not.
    async fn durable(&self, what: impl FnOnce() -> String) -> Result<(), Error> {
        self.committer.commit().await.map_err(|source| Error::Save {
            what: what(),
            source,
        })
    }

    /// The directory under which new volumes get their mount point.
    pub fn mount_root(&self) -> &Path {
        &self.mount_root
    }

    /// The group committer (its counters).
    pub fn committer(&self) -> &Committer {
        &self.committer
    }

    pub(crate) fn mounter(&self) -> &Arc<dyn Mounter> {
        &self.mounter
    }

    pub(crate) fn with_data<R>(&self, f: impl FnOnce(&mut Data) -> R) -> R {
        f(&mut locked(&self.data))
    }

    async fn lock_volume(&self, name: &str) -> VolumeLock<'_> {
        let lock = Arc::clone(
            locked(&self.locks)
                .entry(name.to_owned())
                .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(()))),
        );
        VolumeLock {
            registry: self,
            name: name.to_owned(),
            guard: Some(lock.lock_owned().await),
        }
    }

    async fn blocking<R: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn Mounter) -> std::result::Result<R, String> + Send + 'static,
    ) -> std::result::Result<R, String> {
        let mounter = Arc::clone(&self.mounter);
        tokio::task::spawn_blocking(move || f(mounter.as_ref()))
            .await
            .map_err(|e| format!("mount task failed: {e}"))?
    }

    /// Make sure the mount point exists as a real directory (not a symlink), then mount — or
    /// adopt what is already mounted there (a mount whose Mount answer was lost in a crash).
    async fn mount_io(
        &self,
        name: &str,
        path: &Path,
        backend: &std::result::Result<Backend, String>,
    ) -> Result<()> {
        // A volume whose options name no usable backend cannot be mounted: say why.
        let backend = backend.clone().map_err(|reason| Error::Mount {
            name: name.to_owned(),
            path: path.to_path_buf(),
            reason,
        })?;
        let path_owned = path.to_path_buf();
        self.blocking(move |m| {
            match std::fs::symlink_metadata(&path_owned) {
                Ok(meta) if meta.is_dir() => {}
                Ok(_) => return Err("the mount point is not a directory (a symlink?)".to_owned()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    std::fs::create_dir_all(&path_owned)
                        .map_err(|e| format!("creating the mount point: {e}"))?;
                }
                Err(e) => return Err(format!("mount point: {e}")),
            }
            if m.is_mounted(&path_owned).map_err(|e| e.to_string())? {
                tracing::warn!(path = %path_owned.display(), "already mounted: adopting the existing mount");
                return Ok(());
            }
            m.mount(&backend, &path_owned).map_err(|e| e.to_string())
        })
        .await
        .map_err(|reason| Error::Mount {
            name: name.to_owned(),
            path: path.to_path_buf(),
            reason,
        })
    }

    async fn unmount_io(&self, name: &str, path: &Path, backend: Option<&Backend>) -> Result<()> {
        // A volume whose options did not load is unmounted like a network one (lazily): it was
        // mounted by the ECS plugin, most likely EFS.
        let backend = backend.cloned().unwrap_or(Backend::Helper {
            fs_type: "unknown".into(),
            device: String::new(),
            options: None,
        });
        let path_owned = path.to_path_buf();
        self.blocking(move |m| m.unmount(&backend, &path_owned).map_err(|e| e.to_string()))
            .await
            .map_err(|reason| Error::Unmount {
                name: name.to_owned(),
                path: path.to_path_buf(),
                reason,
            })
    }

    /// `VolumeDriver.Create`.
    pub async fn create(&self, name: &str, opts: BTreeMap<String, String>) -> Result<()> {
        validate_name(name)?;
        let backend = Backend::parse(name, &opts)?;
        if let Err(e) = self.mounter.check_available(&backend) {
            return Err(Error::InvalidOptions {
                name: name.to_owned(),
                reason: e.to_string(),
            });
        }
        let lock = self.lock_volume(name).await;
        if let Some(existing) = locked(&self.data).get(name) {
            return if existing.record.options == opts {
                Ok(())
            } else {
                Err(Error::Exists {
                    name: name.to_owned(),
                    existing: format_opts(&existing.record.options),
                })
            };
        }
        let path = self.mount_root.join(name);
        let dir = path.clone();
        let root = self.mount_root.clone();
        self.blocking(move |_| {
            std::fs::create_dir_all(&root)
                .map_err(|e| format!("creating {}: {e}", root.display()))?;
            match std::fs::create_dir(&dir) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    match std::fs::symlink_metadata(&dir) {
                        Ok(m) if m.is_dir() => Ok(()),
                        _ => Err(format!("{} exists and is not a directory", dir.display())),
                    }
                }
                Err(e) => Err(format!("creating {}: {e}", dir.display())),
            }
        })
        .await
        .map_err(|reason| Error::InvalidOptions {
            name: name.to_owned(),
            reason,
        })?;
        let volume = Volume {
            record: VolumeRecord {
                options: opts,
                path: path.clone(),
                created_at: now_rfc3339(),
                mounts: BTreeMap::new(),
            },
            backend: Ok(backend),
            mounted: false,
            problem: None,
        };
        locked(&self.data).insert(name.to_owned(), volume);
        drop(lock);
        if let Err(source) = self.committer.commit().await {
            let _lock = self.lock_volume(name).await;
            let removed = {
                let mut data = locked(&self.data);
                let unused = data
                    .get(name)
                    .is_some_and(|v| v.record.mounts.is_empty() && !v.mounted);
                if unused { data.remove(name) } else { None }
            };
            if let Some(v) = removed {
                self.remove_mount_point(name, &v.record.path);
            }
            return Err(Error::Save {
                what: format!("volume {name} was not created"),
                source,
            });
        }
        tracing::info!(volume = name, "created");
        Ok(())
    }

    fn remove_mount_point(&self, name: &str, path: &Path) {
        let Some(parent) = path.parent() else { return };
        if let Err(e) = berth_fs::rmdir::remove_empty_dir(parent, path) {
            tracing::warn!(volume = name, error = %e, "mount point directory kept");
        }
    }

    /// `VolumeDriver.Remove`: refused while references exist; unmounts, then deletes the mount
    /// point directory (with `rmdir` only) if the unmount succeeded.
    pub async fn remove(&self, name: &str) -> Result<()> {
        validate_name(name)?;
        let lock = self.lock_volume(name).await;
        let (path, backend, mounted) = {
            let data = locked(&self.data);
            let v = data
                .get(name)
                .ok_or_else(|| Error::NoSuchVolume(name.to_owned()))?;
            if v.record.total() > 0 {
                return Err(Error::InUse {
                    name: name.to_owned(),
                    refs: describe_refs(&v.record.mounts),
                });
            }
            (v.record.path.clone(), v.backend.clone().ok(), v.mounted)
        };
        let check = path.clone();
        let mounted = mounted
            || self
                .blocking(move |m| m.is_mounted(&check).map_err(|e| e.to_string()))
                .await
                .unwrap_or(true);
        if mounted {
            self.unmount_io(name, &path, backend.as_ref())
                .await
                .map_err(|e| match e {
                    Error::Unmount { name, path, reason } => Error::Unmount {
                        name,
                        path,
                        reason: format!("{reason}; the volume is kept"),
                    },
                    other => other,
                })?;
        }
        locked(&self.data).remove(name);
        self.remove_mount_point(name, &path);
        drop(lock);
        self.durable(|| format!("volume {name} was removed"))
            .await?;
        tracing::info!(volume = name, "removed");
        Ok(())
    }

    /// `VolumeDriver.Mount`: one more reference for `id`; mounts on the first reference.
    pub async fn mount(&self, name: &str, id: &str) -> Result<PathBuf> {
        validate_name(name)?;
        validate_id(id)?;
        let lock = self.lock_volume(name).await;
        let (path, backend, mounted, fresh) = {
            let data = locked(&self.data);
            let v = data
                .get(name)
                .ok_or_else(|| Error::NoSuchVolume(name.to_owned()))?;
            (
                v.record.path.clone(),
                v.backend.clone(),
                v.mounted,
                !v.record.mounts.contains_key(id),
            )
        };
        if !mounted {
            self.mount_io(name, &path, &backend).await?;
            tracing::info!(volume = name, path = %path.display(), "mounted");
        }
        {
            let mut data = locked(&self.data);
            if let Some(v) = data.get_mut(name) {
                v.mounted = true;
                let n = v.record.mounts.entry(id.to_owned()).or_insert(0);
                *n = n.saturating_add(1);
            }
        }
        drop(lock);
        match self.committer.commit().await {
            Ok(()) => Ok(path),
            Err(source) if fresh => {
                self.rollback_mount(name, id).await;
                Err(Error::Save {
                    what: format!("the mount of {name} for ID {id} was rolled back"),
                    source,
                })
            }
            Err(source) => Err(Error::Save {
                what: format!(
                    "the extra reference of ID {id} on {name} is kept (it already held one)"
                ),
                source,
            }),
        }
    }

    /// Mount a referenced volume that is not mounted (recovery).
    pub(crate) async fn remount(&self, name: &str) -> Result<()> {
        let _lock = self.lock_volume(name).await;
        let (path, backend) = {
            let data = locked(&self.data);
            let v = data
                .get(name)
                .ok_or_else(|| Error::NoSuchVolume(name.to_owned()))?;
            (v.record.path.clone(), v.backend.clone())
        };
        self.mount_io(name, &path, &backend).await?;
        if let Some(v) = locked(&self.data).get_mut(name) {
            v.mounted = true;
            v.problem = None;
        }
        Ok(())
    }

    async fn rollback_mount(&self, name: &str, id: &str) {
        let _lock = self.lock_volume(name).await;
        let unmount = {
            let mut data = locked(&self.data);
            let Some(v) = data.get_mut(name) else { return };
            if let Some(n) = v.record.mounts.get_mut(id) {
                *n -= 1;
                if *n == 0 {
                    v.record.mounts.remove(id);
                }
            }
            (v.record.total() == 0 && v.mounted)
                .then(|| (v.record.path.clone(), v.backend.clone().ok()))
        };
        if let Some((path, backend)) = unmount {
            match self.unmount_io(name, &path, backend.as_ref()).await {
                Ok(()) => {
                    if let Some(v) = locked(&self.data).get_mut(name) {
                        v.mounted = false;
                    }
                }
                Err(e) => {
                    tracing::error!(volume = name, error = %e, "rollback could not unmount");
                    if let Some(v) = locked(&self.data).get_mut(name) {
                        v.problem = Some(format!("left mounted by a rolled-back Mount: {e}"));
                    }
                }
            }
        }
        // Best effort: a save made between the change and its rollback may hold the reference.
        let _ = self.committer.commit().await;
    }

    /// `VolumeDriver.Unmount`: one reference less for `id`; unmounts after the last. An ID with no
    /// reference changes nothing.
    pub async fn unmount(&self, name: &str, id: &str) -> Result<()> {
        validate_name(name)?;
        validate_id(id)?;
        match self.release_inner(name, id, 1, From::Unmount).await? {
            Some(_) => Ok(()),
            None => {
                tracing::debug!(
                    volume = name,
                    id,
                    "unmount of an ID without references: nothing to do"
                );
                Ok(())
            }
        }
    }

    /// `Berth.Release`: drop up to `count` references of `id` (all when `None` or 0).
    ///
    /// A failed last unmount keeps the reference; the error says what to do next, which depends
    /// on whether Docker's Unmount or a release asked ([`From`]).
    pub async fn release(&self, name: &str, id: &str, count: Option<u64>) -> Result<Released> {
        validate_name(name)?;
        validate_id(id)?;
        let count = count.filter(|c| *c > 0).unwrap_or(u64::MAX);
        let released = self.release_inner(name, id, count, From::Release).await?;
        let remaining = locked(&self.data).get(name).map_or(0, |v| v.record.total());
        let out = released.unwrap_or(Released {
            released: 0,
            remaining,
            unmounted: false,
        });
        tracing::info!(
            volume = name,
            id,
            released = out.released,
            remaining = out.remaining,
            "release"
        );
        Ok(out)
    }

    async fn release_inner(
        &self,
        name: &str,
        id: &str,
        count: u64,
        from: From,
    ) -> Result<Option<Released>> {
        let lock = self.lock_volume(name).await;
        let (held, total, path, backend, mounted) = {
            let data = locked(&self.data);
            let v = data
                .get(name)
                .ok_or_else(|| Error::NoSuchVolume(name.to_owned()))?;
            let held = v.record.mounts.get(id).copied().unwrap_or(0);
            (
                held,
                v.record.total(),
                v.record.path.clone(),
                v.backend.clone().ok(),
                v.mounted,
            )
        };
        if held == 0 {
            return Ok(None);
        }
        let n = held.min(count);
        let last = total == n;
        if last && mounted {
            self.unmount_io(name, &path, backend.as_ref())
                .await
                .map_err(|e| match e {
                    Error::Unmount { name, path, reason } => {
                        // From a release, pointing at release would send the user in a circle:
                        // say what to look for instead.
                        let next = match from {
                            From::Unmount => "release it with `berth volume-plugin release` once \
                                              the mount is no longer busy"
                                .to_owned(),
                            From::Release => format!(
                                "something still uses it: find it (`fuser -vm {}`, or a mount \
                                 namespace holding it: `grep {} /proc/*/mountinfo`), end it, then \
                                 release again",
                                path.display(),
                                path.display()
                            ),
                        };
                        Error::Unmount {
                            name,
                            path,
                            reason: format!("{reason}; the reference is kept ({next})"),
                        }
                    }
                    other => other,
                })?;
            tracing::info!(volume = name, path = %path.display(), "unmounted");
        }
        {
            let mut data = locked(&self.data);
            if let Some(v) = data.get_mut(name) {
                if held == n {
                    v.record.mounts.remove(id);
                } else if let Some(c) = v.record.mounts.get_mut(id) {
                    *c = held - n;
                }
                if last {
                    v.mounted = false;
                    v.problem = None;
                }
            }
        }
        drop(lock);
        self.durable(|| format!("{n} reference(s) of ID {id} on {name} were released"))
            .await?;
        Ok(Some(Released {
            released: n,
            remaining: total - n,
            unmounted: last && mounted,
        }))
    }

    /// `VolumeDriver.Get`.
    pub fn get(&self, name: &str) -> Result<VolumeInfo> {
        validate_name(name)?;
        let data = locked(&self.data);
        let v = data
            .get(name)
            .ok_or_else(|| Error::NoSuchVolume(name.to_owned()))?;
        Ok(VolumeInfo {
            name: name.to_owned(),
            mountpoint: v.record.path.to_string_lossy().into_owned(),
            created_at: v.record.created_at.clone(),
            status: Some(VolumeStatus {
                fs_type: v.record.options.get("type").cloned().unwrap_or_default(),
                device: v.record.options.get("device").cloned(),
                mounted: v.mounted,
                references: v.record.total(),
                mounts: v.record.mounts.clone(),
                problem: v.problem.clone(),
            }),
        })
    }

    /// `VolumeDriver.Path`: the mount point.
    pub fn path(&self, name: &str) -> Result<PathBuf> {
        validate_name(name)?;
        locked(&self.data)
            .get(name)
            .map(|v| v.record.path.clone())
            .ok_or_else(|| Error::NoSuchVolume(name.to_owned()))
    }

    /// `VolumeDriver.List`: every volume of the state (so `docker volume ls` survives restarts).
    pub fn list(&self) -> Vec<ListEntry> {
        locked(&self.data)
            .iter()
            .map(|(name, v)| ListEntry {
                name: name.clone(),
                mountpoint: v.record.path.to_string_lossy().into_owned(),
            })
            .collect()
    }

    /// Name → (mounted, counts): for tests and diagnostics.
    pub fn snapshot(&self) -> BTreeMap<String, (bool, BTreeMap<String, u64>)> {
        locked(&self.data)
            .iter()
            .map(|(n, v)| (n.clone(), (v.mounted, v.record.mounts.clone())))
            .collect()
    }
}

fn format_opts(opts: &BTreeMap<String, String>) -> String {
    let parts: Vec<String> = opts.iter().map(|(k, v)| format!("{k}={v}")).collect();
    if parts.is_empty() {
        "no options".to_owned()
    } else {
        parts.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mounter::MounterError;
    use std::collections::BTreeSet;

    const BUSY: &str = "umount: Device or resource busy (os error 16) (EBUSY)";

    /// Mounts succeed; unmounts fail as a busy mount does.
    #[derive(Default)]
    struct BusyMounter {
        mounted: Mutex<BTreeSet<PathBuf>>,
    }

    impl Mounter for BusyMounter {
        fn mount(&self, _: &Backend, target: &Path) -> std::result::Result<(), MounterError> {
            locked(&self.mounted).insert(target.to_path_buf());
            Ok(())
        }
        fn unmount(&self, _: &Backend, target: &Path) -> std::result::Result<(), MounterError> {
            let busy = berth_fs::MountError {
                op: berth_fs::MountOp::Unmount,
                target: target.to_path_buf(),
                errno: berth_fs::Errno::BUSY,
            };
            Err(MounterError::call("umount", target, busy))
        }
        fn mount_points(&self) -> std::result::Result<Vec<PathBuf>, MounterError> {
            Ok(locked(&self.mounted).iter().cloned().collect())
        }
        fn check_available(&self, _: &Backend) -> std::result::Result<(), MounterError> {
            Ok(())
        }
    }

    #[test]
    fn a_mounter_error_names_its_mount_point_and_keeps_the_system_words() {
        let busy = BusyMounter::default()
            .unmount(
                &Backend::Tmpfs {
                    flags: Vec::new(),
                    data: String::new(),
                },
                Path::new("/m/v"),
            )
            .unwrap_err();
        assert_eq!(busy.to_string(), BUSY);
        assert_eq!(busy.target(), Some(Path::new("/m/v")));
        assert!(
            std::error::Error::source(&busy).is_some(),
            "the errno is the source"
        );
    }

    struct NoSave;

    impl Persister for NoSave {
        fn save(&self, _: &[u8]) -> std::result::Result<(), SaveError> {
            Ok(())
        }
    }

    /// A registry over a busy mounter with tmpfs volume `v` mounted for ID `a`, and its path.
    async fn mounted_volume(root: &Path) -> (Registry, PathBuf) {
        let r = Registry::new(
            Default::default(),
            root,
            Arc::new(BusyMounter::default()),
            Arc::new(NoSave),
        )
        .unwrap();
        let opts = BTreeMap::from([("type".to_owned(), "tmpfs".to_owned())]);
        r.create("v", opts).await.unwrap();
        let path = r.mount("v", "a").await.unwrap();
        (r, path)
    }

    #[tokio::test]
    async fn a_busy_unmount_says_once_that_the_reference_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (r, path) = mounted_volume(dir.path()).await;
        let e = r.unmount("v", "a").await.unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "unmounting volume v at {}: {BUSY}; the reference is kept (release it with \
                 `berth volume-plugin release` once the mount is no longer busy)",
                path.display()
            )
        );
        // From a release, the way out is not another release.
        let e = r.release("v", "a", None).await.unwrap_err().to_string();
        assert_eq!(e.matches("the reference is kept").count(), 1, "{e}");
        assert!(!e.contains("berth volume-plugin release"), "{e}");
        assert!(e.contains(&format!("fuser -vm {}", path.display())), "{e}");
    }

    #[tokio::test]
    async fn a_busy_unmount_on_remove_says_the_volume_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (r, path) = mounted_volume(dir.path()).await;
        // Take the reference away without unmounting (the mounter refuses), as a crash would.
        r.with_data(|d| {
            if let Some(v) = d.get_mut("v") {
                v.record.mounts.clear();
            }
        });
        let e = r.remove("v").await.unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "unmounting volume v at {}: {BUSY}; the volume is kept",
                path.display()
            )
        );
    }
}
