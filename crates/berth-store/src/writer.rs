//! Group commit of task states: the actors' saves, batched into as few redb transactions as the
//! disk allows, off the async threads.
//!
//! Every actor saves its task's state before it acts on a change ([`berth_engine::Persist`]), and a
//! redb commit is an fsync. Done inline, each save blocked an async worker thread for a whole fsync
//! (a slow disk stalled every task, the control API and the metadata endpoint) and a hundred tasks
//! starting at once queued a hundred fsyncs one after another. Here one thread owns task-state
//! writes: it takes every save queued while the previous commit ran, writes them in one
//! transaction (the last state of each task wins; each keeps its stored cleanup record), commits
//! once, and answers every caller with the outcome. A save is durable when its future resolves
//! `Ok`; a failed commit fails every save of that batch (none of them is acknowledged).
//! [`Writer::busy_for`] says how long the write under way has been running: a disk that does not
//! answer (hung, frozen by `fsfreeze`) returns no error, its write just never ends, and the agent
//! bounds how long it waits for one (`--store-write-timeout`).
//!
//! Hand-written: redb has no group commit of its own and no async API; the loop is a few lines
//! over a std channel and tokio's oneshot.

use crate::handle::{Handle, db_err};
use crate::{StoreError, TaskRecord};
use berth_engine::TaskState;
use redb::{ReadableTable, TableDefinition};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

type Reply = oneshot::Sender<Result<(), String>>;

/// The handle the store keeps; dropping it ends the thread after the saves already queued.
pub(crate) struct Writer {
    queue: Option<mpsc::Sender<(TaskState, Reply)>>,
    thread: Option<std::thread::JoinHandle<()>>,
    commits: Arc<AtomicU64>,
    /// When the batch being written now was taken (None: the writer waits for saves).
    busy_since: Arc<Mutex<Option<Instant>>>,
}

impl Writer {
    pub(crate) fn start(
        db: Arc<Handle>,
        tasks: TableDefinition<'static, &'static str, &'static [u8]>,
    ) -> std::io::Result<Writer> {
        let (tx, rx) = mpsc::channel::<(TaskState, Reply)>();
        let commits = Arc::new(AtomicU64::new(0));
        let counted = commits.clone();
        let busy_since = Arc::new(Mutex::new(None));
        let busy = busy_since.clone();
        let thread = std::thread::Builder::new()
            .name("berth-store-writer".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    let mut batch = vec![first];
                    batch.extend(rx.try_iter());
                    *lock(&busy) = Some(Instant::now());
                    let outcome = commit(&db, tasks, &batch).map_err(|e| message(&e));
                    *lock(&busy) = None;
                    counted.fetch_add(1, Ordering::Relaxed);
                    for (_, reply) in batch {
                        let _ = reply.send(outcome.clone());
                    }
                }
            })?;
        Ok(Writer {
            queue: Some(tx),
            thread: Some(thread),
            commits,
            busy_since,
        })
    }

    /// Queue a save; the receiver answers once it is durable (or failed).
    pub(crate) fn save(&self, state: TaskState) -> oneshot::Receiver<Result<(), String>> {
        let (reply, answer) = oneshot::channel();
        match &self.queue {
            Some(q) => {
                if let Err(mpsc::SendError((_, reply))) = q.send((state, reply)) {
                    let _ = reply.send(Err("the state store's writer has stopped".into()));
                }
            }
            None => {
                let _ = reply.send(Err("the state store is closed".into()));
            }
        }
        answer
    }

    /// Transactions committed so far (each holds one or more saves).
    pub(crate) fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// How long the transaction being written now has been under way (None: no write under
    /// way). A disk that does not answer (hung, frozen) shows as a write that never ends.
    pub(crate) fn busy_for(&self) -> Option<Duration> {
        lock(&self.busy_since).map(|at| at.elapsed())
    }
}

fn lock(m: &Mutex<Option<Instant>>) -> std::sync::MutexGuard<'_, Option<Instant>> {
    // Plain data, consistent between statements.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Closing the queue ends the thread once it has committed what was queued; joining it
        // releases its handle on the database before the store's own is dropped (a reopen in the
        // same process must not find the file still open).
        self.queue = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One transaction for the whole batch: the last state of each task, with its stored cleanup.
/// After an I/O error the handle reopens the database before the next batch.
fn commit(
    h: &Handle,
    tasks: TableDefinition<'static, &'static str, &'static [u8]>,
    batch: &[(TaskState, Reply)],
) -> Result<(), StoreError> {
    let mut last: BTreeMap<&str, &TaskState> = BTreeMap::new();
    for (state, _) in batch {
        last.insert(state.id.as_str(), state);
    }
    let err = |e: redb::Error| h.err(e);
    h.with(|db| {
        let txn = db.begin_write().map_err(|e| err(e.into()))?;
        {
            let mut t = txn.open_table(tasks).map_err(|e| err(e.into()))?;
            for (id, state) in &last {
                let cleanup = t
                    .get(id)
                    .map_err(|e| err(e.into()))?
                    .and_then(|v| serde_json::from_slice::<TaskRecord>(v.value()).ok())
                    .map(|r| r.cleanup)
                    .unwrap_or_default();
                let rec = TaskRecord {
                    state: (*state).clone(),
                    cleanup,
                };
                // A task state always serialises (plain data, string keys); an error here would
                // be a bug, reported to every caller of the batch rather than panicking the writer.
                let bytes = serde_json::to_vec(&rec).map_err(|e| db_err(h.path(), e))?;
                t.insert(id, bytes.as_slice()).map_err(|e| err(e.into()))?;
            }
        }
        txn.commit().map_err(|e| err(e.into()))
    })
}

/// The message of a failed batch: the store error without its path (the caller adds it).
fn message(e: &StoreError) -> String {
    match e {
        StoreError::Database { message, .. } => message.clone(),
        other => other.to_string(),
    }
}
