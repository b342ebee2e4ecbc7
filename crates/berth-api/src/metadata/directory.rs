//! The task directory: which task and container each metadata id belongs to.
//!
//! Tasks are registered with the receiving end of their actor's snapshot channel
//! (`watch::Receiver<TaskState>`). A lookup maps a metadata id to (task, container index) under a
//! short-lived `RwLock` that only the metadata server and `register`/`unregister` touch — never
//! the engine. The task's state is read from the receiver: the current value is cloned once per
//! change (an atomic version check; the clone is taken under the channel's lock only for that copy)
//! and shared as an `Arc` until the next change. The introspection API reads the same entries
//! ([`TaskDirectory::snapshots`]): every task the agent has not yet cleaned up. The credentials
//! endpoint looks its ids up here too: each task's role ids ([`berth_engine::roles::RoleIds`])
//! are indexed when the task is registered.

use crate::lock;
use crate::metadata::json::Version;
use crate::metadata::ratelimit::{RateLimit, TokenBucket};
use berth_engine::TaskState;
use berth_engine::roles::RoleKind;
use berth_engine::runtime::ContainerDetails;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Instant;
use tokio::sync::watch;

/// Every task the metadata endpoint serves. Cheap to share (`Arc<TaskDirectory>`).
#[derive(Default)]
pub struct TaskDirectory {
    inner: RwLock<Index>,
}

#[derive(Default)]
struct Index {
    /// Metadata id → (task, container index).
    ids: HashMap<String, (Arc<TaskEntry>, usize)>,
    /// Task id → its entry (for `unregister`).
    tasks: HashMap<String, Arc<TaskEntry>>,
    /// Credential id (the task's [`berth_engine::roles::RoleIds`]) → (task, which role): the
    /// credentials endpoint's index.
    credentials: HashMap<String, (Arc<TaskEntry>, RoleKind)>,
}

/// One registered task.
pub(crate) struct TaskEntry {
    source: Mutex<Source>,
    /// One bucket per container (rate limits are per metadata id), created on first use.
    buckets: Vec<Mutex<Option<TokenBucket>>>,
    /// The last `/task` answer rendered for this task, with what it was rendered from.
    pub(crate) rendered: Mutex<Option<Rendered>>,
}

/// A rendered `/task` body and its inputs: reused only while the same server asks with the very
/// same snapshot and details (pointer-equal `Arc`s), so it is never stale.
pub(crate) struct Rendered {
    pub(crate) server: usize,
    /// Which answer: the endpoint version and whether it is `taskWithTags`.
    pub(crate) variant: (Version, bool),
    pub(crate) state: Arc<TaskState>,
    pub(crate) details: Vec<Option<Arc<ContainerDetails>>>,
    pub(crate) body: axum::body::Bytes,
}

struct Source {
    rx: watch::Receiver<TaskState>,
    current: Arc<TaskState>,
}

impl TaskEntry {
    /// The task's latest published state.
    pub(crate) fn snapshot(&self) -> Arc<TaskState> {
        let mut source = lock(&self.source);
        // `has_changed` fails once the actor is gone: the last value stays good.
        if source.rx.has_changed().unwrap_or(false) {
            let state = source.rx.borrow_and_update().clone();
            source.current = Arc::new(state);
        }
        source.current.clone()
    }

    /// The cached `/task` body, if it was rendered by `server` from exactly these inputs.
    pub(crate) fn rendered_for(
        &self,
        server: usize,
        variant: (Version, bool),
        state: &Arc<TaskState>,
        details: &[Option<Arc<ContainerDetails>>],
    ) -> Option<axum::body::Bytes> {
        let r = lock(&self.rendered);
        let r = r.as_ref()?;
        let same = r.server == server
            && r.variant == variant
            && Arc::ptr_eq(&r.state, state)
            && r.details.len() == details.len()
            && r.details.iter().zip(details).all(|(a, b)| match (a, b) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            });
        same.then(|| r.body.clone())
    }

    pub(crate) fn store_rendered(&self, r: Rendered) {
        *lock(&self.rendered) = Some(r);
    }

    /// Take a token from container `index`'s bucket; false = over the limit.
    pub(crate) fn admit(&self, index: usize, limit: RateLimit) -> bool {
        if limit.is_disabled() {
            return true;
        }
        let Some(slot) = self.buckets.get(index) else {
            return false;
        };
        let now = Instant::now();
        lock(slot)
            .get_or_insert_with(|| TokenBucket::new(limit, now))
            .try_take(limit, now)
    }
}

impl TaskDirectory {
    pub fn new() -> Self {
        Self::default()
    }

    /// Serve a task: each of its containers' metadata ids now answers. Returns the task id.
    /// Registering a task id again replaces the earlier registration.
    pub fn register(&self, mut rx: watch::Receiver<TaskState>) -> String {
        let state = rx.borrow_and_update().clone();
        let entry = Arc::new(TaskEntry {
            buckets: state.containers.iter().map(|_| Mutex::new(None)).collect(),
            rendered: Mutex::new(None),
            source: Mutex::new(Source {
                rx,
                current: Arc::new(state.clone()),
            }),
        });
        let mut index = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(old) = index.tasks.remove(&state.id) {
            index.ids.retain(|_, (e, _)| !Arc::ptr_eq(e, &old));
            index.credentials.retain(|_, (e, _)| !Arc::ptr_eq(e, &old));
        }
        // The ids are made with the task and never change, so the first snapshot has them.
        if let Some(id) = &state.role_ids.task {
            index
                .credentials
                .insert(id.clone(), (entry.clone(), RoleKind::Task));
        }
        if let Some(id) = &state.role_ids.execution {
            index
                .credentials
                .insert(id.clone(), (entry.clone(), RoleKind::Execution));
        }
        // The pause container is given no endpoint address, so its id is not served.
        for (i, c) in state.containers.iter().enumerate() {
            if !state.is_pause(i) {
                index.ids.insert(c.metadata_id.clone(), (entry.clone(), i));
            }
        }
        index.tasks.insert(state.id.clone(), entry);
        state.id
    }

    /// Stop serving a task; its ids answer 404 from now on. Returns whether it was registered.
    pub fn unregister(&self, task_id: &str) -> bool {
        let mut index = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        let Some(entry) = index.tasks.remove(task_id) else {
            return false;
        };
        index.ids.retain(|_, (e, _)| !Arc::ptr_eq(e, &entry));
        index
            .credentials
            .retain(|_, (e, _)| !Arc::ptr_eq(e, &entry));
        true
    }

    /// The task and role a credential id stands for.
    pub(crate) fn lookup_credentials(&self, id: &str) -> Option<(Arc<TaskEntry>, RoleKind)> {
        let index = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        index
            .credentials
            .get(id)
            .map(|(entry, kind)| (entry.clone(), *kind))
    }

    /// The ids of the registered tasks.
    pub fn task_ids(&self) -> Vec<String> {
        let index = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        index.tasks.keys().cloned().collect()
    }

    /// Every registered task's latest published state (the introspection API lists these), in
    /// the order the tasks were created, then by id. Each snapshot is read as the metadata
    /// routes read it; the directory's lock is held only to copy the entries out.
    pub fn snapshots(&self) -> Vec<Arc<TaskState>> {
        let entries: Vec<Arc<TaskEntry>> = {
            let index = self.inner.read().unwrap_or_else(PoisonError::into_inner);
            index.tasks.values().cloned().collect()
        };
        let mut all: Vec<Arc<TaskState>> = entries.iter().map(|e| e.snapshot()).collect();
        all.sort_by(|a, b| {
            a.created_at
                .cmp(&b.created_at)
                .then_with(|| a.id.cmp(&b.id))
        });
        all
    }

    /// The task and container index a metadata id belongs to.
    pub(crate) fn lookup(&self, metadata_id: &str) -> Option<(Arc<TaskEntry>, usize)> {
        let index = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        index
            .ids
            .get(metadata_id)
            .map(|(entry, i)| (entry.clone(), *i))
    }
}
