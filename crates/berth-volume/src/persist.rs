//! Making the state durable before an answer is sent, with group commit.
//!
//! [`FileStore::save`] replaces the state file with the whole state through
//! [`berth_fs::write_atomic`] (a temporary file in the state file's directory, fsync, rename over
//! the state file, fsync of the directory): after a crash the file is either the old or the new
//! state, never a mix.
//!
//! [`Committer`] runs the saves on one thread. A change is applied in memory first, then its
//! handler asks the committer for durability and waits. The committer takes every request that
//! arrived while the previous save ran, snapshots the state once (which contains all of their
//! changes, since each was applied before it was queued), saves once, and answers all of them with
//! that save's result. With 16 concurrent clients one fsync serves up to 16 changes; a single client
//! pays one save per change.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use berth_fs::atomic::Step;
use tokio::sync::{mpsc, oneshot};

/// A failed save. `Clone`: one save's result answers every change of its group.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{op} {}: {message}", path.display())]
pub struct SaveError {
    pub op: &'static str,
    pub path: PathBuf,
    pub kind: std::io::ErrorKind,
    pub message: String,
}

impl SaveError {
    fn io(op: &'static str, path: &Path, e: &std::io::Error) -> SaveError {
        SaveError {
            op,
            path: path.to_path_buf(),
            kind: e.kind(),
            message: e.to_string(),
        }
    }
}

/// Where saved states go.
pub trait Persister: Send + Sync + 'static {
    /// Make `bytes` the durable state, atomically.
    fn save(&self, bytes: &[u8]) -> Result<(), SaveError>;
}

/// The state file: atomic replace, fsync of the file and of its directory.
#[derive(Debug, Clone)]
pub struct FileStore {
    path: PathBuf,
}

impl FileStore {
    /// A store for the state file at `path` (its directory must exist).
    pub fn new(path: &Path) -> FileStore {
        FileStore {
            path: path.to_path_buf(),
        }
    }

    /// The state file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Persister for FileStore {
    fn save(&self, bytes: &[u8]) -> Result<(), SaveError> {
        berth_fs::write_atomic(&self.path, bytes).map_err(|e| {
            let op = match e.step {
                Step::CreateTemp => "creating temporary state file for",
                Step::WriteTemp => "writing temporary state file for",
                Step::SyncTemp => "fsync of temporary state file for",
                Step::Rename => "renaming temporary state file over",
                Step::SyncDir => "fsync of the state directory of",
            };
            SaveError::io(op, &e.path, &e.source)
        })
    }
}

type Waiter = oneshot::Sender<Result<(), SaveError>>;

/// Counters of the committer (for the benchmark and tests).
#[derive(Debug, Default)]
pub struct CommitStats {
    /// Saves performed.
    pub saves: AtomicU64,
    /// Durability requests answered.
    pub requests: AtomicU64,
}

/// The group committer; see the module documentation.
#[derive(Debug, Clone)]
pub struct Committer {
    tx: mpsc::UnboundedSender<Waiter>,
    stats: Arc<CommitStats>,
}

impl Committer {
    /// Start the committer thread. `snapshot` serializes the current in-memory state.
    pub fn start(
        persister: Arc<dyn Persister>,
        snapshot: Arc<dyn Fn() -> Result<Vec<u8>, SaveError> + Send + Sync>,
    ) -> std::io::Result<Committer> {
        let (tx, mut rx) = mpsc::unbounded_channel::<Waiter>();
        let stats = Arc::new(CommitStats::default());
        let thread_stats = Arc::clone(&stats);
        std::thread::Builder::new()
            .name("berth-volume-commit".into())
            .spawn(move || {
                // Ends when every Committer (every sender) is dropped.
                while let Some(first) = rx.blocking_recv() {
                    let mut group = vec![first];
                    while let Ok(more) = rx.try_recv() {
                        group.push(more);
                    }
                    let result = snapshot().and_then(|bytes| persister.save(&bytes));
                    if let Err(e) = &result {
                        tracing::error!(error = %e, "saving the volume plugin state failed");
                    }
                    thread_stats.saves.fetch_add(1, Ordering::Relaxed);
                    thread_stats
                        .requests
                        .fetch_add(group.len() as u64, Ordering::Relaxed);
                    for waiter in group {
                        // A handler that gave up waiting is no longer interested.
                        let _ = waiter.send(result.clone());
                    }
                }
            })?;
        Ok(Committer { tx, stats })
    }

    /// Wait until a save that contains every change applied before this call has completed.
    pub async fn commit(&self) -> Result<(), SaveError> {
        let (tx, rx) = oneshot::channel();
        let stopped = || SaveError {
            op: "saving state",
            path: PathBuf::new(),
            kind: std::io::ErrorKind::BrokenPipe,
            message: "the committer thread has stopped".into(),
        };
        self.tx.send(tx).map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())?
    }

    /// The committer's counters.
    pub fn stats(&self) -> &CommitStats {
        &self.stats
    }
}
