//! Which images tasks are using now (in-process leases) and the durable record of image use
//! (the [`ImageRecords`] trait the store implements), for image cleanup ([`crate::image_gc`]).
//!
//! The race this module closes: image cleanup decides from a snapshot (Docker's lists, the tasks
//! not yet STOPPED), then removes; a task submitted in between would find its image gone under it.
//! The agent owns both sides, so the guard is in-process:
//!
//! - every task's actor takes a [`Lease`] on each image its containers name before it pulls or
//!   creates anything, and keeps it until the actor returns (the task STOPPED, or the agent
//!   shutting down);
//! - cleanup removes an image only inside [`ImageLeases::begin_removal`], which refuses while any
//!   of the image's names is leased (the image is skipped this cycle: a task is starting with it)
//!   and otherwise marks the names as being removed until the returned [`Removal`] is dropped;
//! - [`ImageLeases::acquire`] waits while a name it asks for is being removed (one `docker rmi`,
//!   seconds at most), so a task that starts during a removal carries on after it: its pull step
//!   then sees the image absent and pulls it again per its pull behaviour (cleanup forgets a
//!   removed image's pull record first, so `once` pulls it again too).
//!
//! Names are compared in Docker's normal form ([`crate::image_ref::normalize`]): `busybox`,
//! `busybox:latest` and `docker.io/library/busybox:latest` are one image name.
//!
//! Invariants: a lease and a removal never hold the same name at once; dropping either wakes the
//! waiters. The map's mutex is never held across an `.await`.

use crate::image_ref::normalize;
use crate::state::Millis;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::Notify;

/// One image the store tracks: berth pulled it or a task of berth's used it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TrackedImage {
    /// The reference as tasks name it (normalized).
    pub reference: String,
    /// Docker's id of the image under that reference, when cleanup last saw it.
    pub image_id: Option<String>,
    /// Its size in bytes, when cleanup last saw it.
    pub size: Option<u64>,
    /// The first successful pull by this agent (None: never pulled, only used from the cache).
    pub first_pulled: Option<Millis>,
    /// The last successful pull (what the `once` pull behaviour asks about).
    pub last_pulled: Option<Millis>,
    /// The last time a task started with it or stopped using it.
    pub last_used: Millis,
    /// The tasks that used it, most recent last (bounded, see [`MAX_TASKS`]).
    pub tasks: Vec<String>,
}

/// How many task ids a tracked image remembers.
pub const MAX_TASKS: usize = 16;

impl TrackedImage {
    /// Note a use by `task` at `at` (the task id moves to the end of the list).
    pub fn note_use(&mut self, task: &str, at: Millis) {
        self.last_used = self.last_used.max(at);
        self.tasks.retain(|t| t != task);
        self.tasks.push(task.to_string());
        if self.tasks.len() > MAX_TASKS {
            let extra = self.tasks.len() - MAX_TASKS;
            self.tasks.drain(..extra);
        }
    }
}

/// The durable record of tracked images (the agent's store implements it). Errors name the
/// operation and its image, with the store's error as their source; callers log them (image
/// tracking never fails a task), except cleanup's read of every record, which fails its pass.
pub trait ImageRecords: Send + Sync + 'static {
    /// `task` starts (or stops) using `image` at `at`: track it, last used = `at`.
    fn used(&self, image: &str, task: &str, at: Millis) -> Result<(), ImageRecordError>;
    /// Every tracked image.
    fn tracked(&self) -> Result<Vec<TrackedImage>, ImageRecordError>;
    /// Remember what Docker says the reference is now (its id and size).
    fn identify(&self, reference: &str, image_id: &str, size: u64) -> Result<(), ImageRecordError>;
    /// The image is gone: forget the reference (and its pull record, so `once` pulls again).
    fn forget(&self, reference: &str) -> Result<(), ImageRecordError>;
}

/// What the record of tracked images could not do, and for which image; `source` is the
/// record's (the store's) error.
#[derive(Debug, thiserror::Error)]
pub enum ImageRecordError {
    #[error("recording that task {task} uses {image}: {source}")]
    Use {
        image: String,
        task: String,
        #[source]
        source: crate::BoxError,
    },
    /// The Display is the store's error alone, prefixed as cleanup always showed it.
    #[error("tracked images: {source}")]
    Read {
        #[source]
        source: crate::BoxError,
    },
    #[error("noting {image} as {image_id}: {source}")]
    Identify {
        image: String,
        image_id: String,
        #[source]
        source: crate::BoxError,
    },
    #[error("forgetting {image}: {source}")]
    Forget {
        image: String,
        #[source]
        source: crate::BoxError,
    },
}

impl ImageRecordError {
    /// The image the failed operation was about (None for a read of every record).
    pub fn image(&self) -> Option<&str> {
        match self {
            ImageRecordError::Use { image, .. }
            | ImageRecordError::Identify { image, .. }
            | ImageRecordError::Forget { image, .. } => Some(image),
            ImageRecordError::Read { .. } => None,
        }
    }
}

#[derive(Debug, Default)]
struct Slot {
    holders: usize,
    removing: bool,
}

/// The leases of one agent (see the module header). Share it behind an `Arc`.
#[derive(Debug, Default)]
pub struct ImageLeases {
    slots: Mutex<HashMap<String, Slot>>,
    changed: Notify,
}

/// Why [`ImageLeases::begin_removal`] refused: a task holds `image` (in normal form), or it is
/// being removed already.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a task is starting with {image}")]
pub struct Busy {
    pub image: String,
}

/// A task's hold on one image name; released when dropped.
#[derive(Debug)]
pub struct Lease {
    leases: Arc<ImageLeases>,
    key: String,
}

/// Cleanup's hold on an image's names while it removes it; released when dropped.
#[derive(Debug)]
pub struct Removal {
    leases: Arc<ImageLeases>,
    keys: Vec<String>,
}

impl ImageLeases {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Slot>> {
        // The map is consistent between statements; a panic elsewhere cannot corrupt it.
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Take a lease on `image`, waiting while it is being removed.
    pub async fn acquire(self: &Arc<Self>, image: &str) -> Lease {
        let key = normalize(image);
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before looking, so a removal that ends in between still wakes us.
            changed.as_mut().enable();
            {
                let mut slots = self.lock();
                let slot = slots.entry(key.clone()).or_default();
                if !slot.removing {
                    slot.holders += 1;
                    return Lease {
                        leases: self.clone(),
                        key,
                    };
                }
            }
            changed.await;
        }
    }

    /// Whether a task holds a lease on `image` now.
    pub fn leased(&self, image: &str) -> bool {
        self.lock()
            .get(&normalize(image))
            .is_some_and(|s| s.holders > 0)
    }

    /// Mark `names` as being removed, unless one of them is leased or being removed (then that
    /// name, in normal form, is the error).
    pub fn begin_removal(self: &Arc<Self>, names: &[String]) -> Result<Removal, Busy> {
        let keys: Vec<String> = names.iter().map(|n| normalize(n)).collect();
        let mut slots = self.lock();
        if let Some(busy) = keys
            .iter()
            .find(|k| slots.get(*k).is_some_and(|s| s.holders > 0 || s.removing))
        {
            return Err(Busy {
                image: busy.clone(),
            });
        }
        for k in &keys {
            slots.entry(k.clone()).or_default().removing = true;
        }
        Ok(Removal {
            leases: self.clone(),
            keys,
        })
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut slots = self.leases.lock();
        if let Some(slot) = slots.get_mut(&self.key) {
            slot.holders = slot.holders.saturating_sub(1);
            if slot.holders == 0 && !slot.removing {
                slots.remove(&self.key);
            }
        }
    }
}

impl Drop for Removal {
    fn drop(&mut self) {
        {
            let mut slots = self.leases.lock();
            for k in &self.keys {
                if let Some(slot) = slots.get_mut(k) {
                    slot.removing = false;
                    if slot.holders == 0 {
                        slots.remove(k);
                    }
                }
            }
        }
        self.leases.changed.notify_waiters();
    }
}

/// What the actor needs for image tracking: the agent's leases and its record.
#[derive(Clone)]
pub struct ImageTracking {
    pub leases: Arc<ImageLeases>,
    pub records: Arc<dyn ImageRecords>,
}

/// Image records kept in memory (tests): also the pull record `once` asks, so forgetting an image
/// makes `once` pull it again, as with the store.
#[derive(Debug, Default)]
pub struct MemoryImageRecords {
    images: Mutex<std::collections::BTreeMap<String, TrackedImage>>,
}

impl MemoryImageRecords {
    fn lock(&self) -> MutexGuard<'_, std::collections::BTreeMap<String, TrackedImage>> {
        self.images.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Record a pull at `at` (what the actor does after a successful pull, with the clock).
    pub fn pulled(&self, image: &str, at: Millis) {
        let key = normalize(image);
        let mut images = self.lock();
        let t = images.entry(key.clone()).or_insert_with(|| TrackedImage {
            reference: key,
            last_used: at,
            ..TrackedImage::default()
        });
        t.first_pulled.get_or_insert(at);
        t.last_pulled = Some(at);
    }
}

impl ImageRecords for MemoryImageRecords {
    fn used(&self, image: &str, task: &str, at: Millis) -> Result<(), ImageRecordError> {
        let key = normalize(image);
        self.lock()
            .entry(key.clone())
            .or_insert_with(|| TrackedImage {
                reference: key,
                ..TrackedImage::default()
            })
            .note_use(task, at);
        Ok(())
    }
    fn tracked(&self) -> Result<Vec<TrackedImage>, ImageRecordError> {
        Ok(self.lock().values().cloned().collect())
    }
    fn identify(&self, reference: &str, image_id: &str, size: u64) -> Result<(), ImageRecordError> {
        if let Some(t) = self.lock().get_mut(&normalize(reference)) {
            t.image_id = Some(image_id.to_string());
            t.size = Some(size);
        }
        Ok(())
    }
    fn forget(&self, reference: &str) -> Result<(), ImageRecordError> {
        self.lock().remove(&normalize(reference));
        Ok(())
    }
}

impl crate::pull::PullRecord for MemoryImageRecords {
    fn pulled_before(&self, image: &str) -> bool {
        self.lock()
            .get(&normalize(image))
            .is_some_and(|t| t.last_pulled.is_some())
    }
    fn record_pull(&self, image: &str) -> Result<(), crate::pull::PullRecordError> {
        self.pulled(image, crate::report::now_ms());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn names_in_normal_form() {
        assert_eq!(normalize("busybox"), "busybox:latest");
        assert_eq!(normalize("docker.io/library/busybox"), "busybox:latest");
        assert_eq!(normalize("docker.io/me/app:2"), "me/app:2");
        assert_eq!(
            normalize("127.0.0.1:5000/busybox"),
            "127.0.0.1:5000/busybox:latest"
        );
        assert_eq!(
            normalize("127.0.0.1:5000/busybox:1"),
            "127.0.0.1:5000/busybox:1"
        );
        assert_eq!(normalize("app@sha256:abc"), "app@sha256:abc");
    }

    #[test]
    fn a_leased_name_cannot_be_removed_and_a_removed_one_frees_again() {
        let leases = ImageLeases::new();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let lease = rt.block_on(leases.acquire("busybox"));
        assert!(leases.leased("busybox:latest"));
        assert_eq!(
            leases.begin_removal(&["busybox:latest".into()]).err(),
            Some(Busy {
                image: "busybox:latest".into()
            })
        );
        drop(lease);
        assert!(!leases.leased("busybox"));
        let removal = leases
            .begin_removal(&["busybox:latest".into()])
            .expect("free");
        assert!(
            leases.begin_removal(&["busybox".into()]).is_err(),
            "one removal at a time"
        );
        drop(removal);
        assert!(leases.lock().is_empty(), "nothing left behind");
    }

    #[tokio::test]
    async fn a_task_starting_during_a_removal_waits_for_it() {
        let leases = ImageLeases::new();
        let removal = leases.begin_removal(&["app:1".into()]).expect("free");
        let waiting = {
            let leases = leases.clone();
            tokio::spawn(async move { leases.acquire("app:1").await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "waits while the image is removed");
        drop(removal);
        let lease = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken")
            .expect("joined");
        assert!(leases.leased("app:1"));
        drop(lease);
    }

    #[test]
    fn a_use_moves_the_task_last_and_keeps_the_list_bounded() {
        let mut t = TrackedImage::default();
        for i in 0..20 {
            t.note_use(&format!("t{i}"), i);
        }
        t.note_use("t5", 3);
        assert_eq!(t.tasks.len(), MAX_TASKS);
        assert_eq!(t.tasks.last().map(String::as_str), Some("t5"));
        assert_eq!(t.last_used, 19, "last used never goes back");
    }
}
