//! The open database, and its reopening after an I/O error.
//!
//! Once a write to the file fails (ENOSPC on the data directory, EPERM on an immutable file, EIO),
//! redb refuses every later transaction with "previous I/O error" until the database is closed and
//! opened again. [`Handle`] notes such an error when it passes through [`Handle::err`]; the next
//! operation (a save retried by an actor after its backoff, a read of the control API) closes the
//! database, opens it again (redb repairs it from its last commit), verifies it (redb's integrity
//! check, the schema version, then 1 MiB written and removed in two commits: opening repairs in
//! place and a small commit reuses pages the file has, so both can succeed on a disk that is still
//! full) and goes on. A reopen that fails leaves no database open; the next
//! operation tries again, at most once per [`REOPEN_INTERVAL`]. [`Handle::degraded`] says why
//! while the store is not usable.
//!
//! A full file system: when a write fails with ENOSPC and the store's reserve
//! ([`crate::reserve`]) holds space, [`Handle::with`] releases it and runs the transaction once
//! more (reopening first), so the store's own write succeeds.
//!
//! Damage: random bytes in the middle of the file can make redb panic (code it holds unreachable,
//! an index out of range) instead of returning an error. Every open ([`open`]) and every
//! transaction ([`Handle::with`]) runs under [`unpanicked`], which turns such a panic into
//! [`StoreError::Damaged`] naming the file and how to fix it, and closes the database.
//!
//! Invariant: every transaction lives inside [`Handle::with`], under the read side of the lock,
//! so the reopen (the write side) closes a database nobody uses and the file's lock is released
//! before it is taken again.
//!
//! Hand-written: redb leaves the reopen to its caller; this is a lock around an `Option`.

use crate::StoreError;
use crate::reserve::{Reserve, is_enospc};
use redb::{Database, ReadableDatabase, TableDefinition};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

/// Reopen attempts are at least this far apart.
pub(crate) const REOPEN_INTERVAL: Duration = Duration::from_millis(500);

#[derive(Default)]
struct Broken {
    /// Why the database must be reopened (None: it is fine).
    reason: Option<String>,
    last_attempt: Option<Instant>,
}

pub(crate) struct Handle {
    path: PathBuf,
    db: RwLock<Option<Database>>,
    broken: Mutex<Broken>,
    /// Checks a freshly opened database (the schema version is readable and supported).
    verify: fn(&Database, &Path) -> Result<(), StoreError>,
    /// Writes (and removes) new data, to prove the file can be written again.
    probe: fn(&Database, &Path) -> Result<(), StoreError>,
    /// Space kept for the store on its file system, released when a write finds it full.
    pub(crate) reserve: Reserve,
    /// The last write error seen was ENOSPC (taken by [`Handle::with`]).
    full: AtomicBool,
}

impl Handle {
    pub(crate) fn new(
        path: PathBuf,
        db: Database,
        verify: fn(&Database, &Path) -> Result<(), StoreError>,
        probe: fn(&Database, &Path) -> Result<(), StoreError>,
        reserve: Reserve,
    ) -> Handle {
        Handle {
            path,
            db: RwLock::new(Some(db)),
            broken: Mutex::new(Broken::default()),
            verify,
            probe,
            reserve,
            full: AtomicBool::new(false),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    fn broken(&self) -> std::sync::MutexGuard<'_, Broken> {
        // Plain data, consistent between statements.
        self.broken.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Why the store cannot be used now (a write failed and the database was not reopened yet,
    /// or the last reopen failed); None when it is fine.
    pub(crate) fn degraded(&self) -> Option<String> {
        self.broken().reason.clone()
    }

    /// A store error for a redb error; an I/O error (or redb's "previous I/O error") marks the
    /// database for reopening.
    pub(crate) fn err(&self, e: impl Into<redb::Error>) -> StoreError {
        let e: redb::Error = e.into();
        if let redb::Error::Io(io) = &e
            && is_enospc(io)
        {
            self.full.store(true, Ordering::SeqCst);
        }
        if needs_reopen(&e) {
            let mut b = self.broken();
            if b.reason.is_none() {
                tracing::warn!(path = %self.path.display(), error = %e, "state store write failed; the database is reopened at the next operation");
            }
            b.reason = Some(e.to_string());
        }
        db_err(&self.path, e)
    }

    /// Run `f` on the open database (reopening it first if an I/O error was seen). When `f`
    /// fails because the file system is full and the reserve holds space, the reserve is
    /// released and `f` runs once more (after the reopen redb needs), so the store's own write
    /// succeeds.
    pub(crate) fn with<T>(
        &self,
        f: impl Fn(&Database) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let out = self.with_once(&f);
        if out.is_err() && self.full.swap(false, Ordering::SeqCst) && self.reserve.release() {
            tracing::warn!(path = %self.path.display(), reserve = %self.reserve.status().path.display(), "the data directory's file system is full: the state store's reserve is released and the write tried again");
            // The reopen happens now, not after the usual interval.
            self.broken().last_attempt = None;
            return self.with_once(&f);
        }
        out
    }

    fn with_once<T>(
        &self,
        f: &impl Fn(&Database) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.reopen_if_broken();
        let guard = self.db.read().unwrap_or_else(|e| e.into_inner());
        match guard.as_ref() {
            Some(db) => {
                let out = unpanicked(&self.path, || f(db));
                drop(guard);
                if let Err(StoreError::Damaged { message, .. }) = &out {
                    self.close_damaged(message);
                }
                out
            }
            None => Err(db_err(
                &self.path,
                format!(
                    "the database is closed after an I/O error and could not be opened again ({}); \
                     free space in the data directory or make the file writable: berth retries by itself",
                    self.degraded().unwrap_or_default()
                ),
            )),
        }
    }

    /// After redb panicked on the file: the database is closed (its drop guarded too) and every
    /// later operation tries to open it again, which fails the same way while the file is damaged.
    fn close_damaged(&self, message: &str) {
        let mut guard = self.db.write().unwrap_or_else(|e| e.into_inner());
        if let Some(db) = guard.take() {
            let _ = unpanicked(&self.path, move || {
                drop(db);
                Ok(())
            });
        }
        self.broken().reason = Some(format!("the file is damaged: {message}"));
    }

    /// Try a reopen now if the database needs one (at most once per [`REOPEN_INTERVAL`]); then
    /// why the store is still unusable, if it is.
    pub(crate) fn check(&self) -> Option<String> {
        self.reopen_if_broken();
        self.degraded()
    }

    fn reopen_if_broken(&self) {
        {
            let mut b = self.broken();
            if b.reason.is_none() {
                return;
            }
            if b.last_attempt
                .is_some_and(|at| at.elapsed() < REOPEN_INTERVAL)
            {
                return;
            }
            b.last_attempt = Some(Instant::now());
        }
        let mut guard = self.db.write().unwrap_or_else(|e| e.into_inner());
        // Another thread may have reopened it while this one waited for the lock.
        if self.broken().reason.is_none() {
            return;
        }
        if let Some(old) = guard.take()
            && let Err(e) = old.close()
        {
            // Closing a database after an I/O error may fail to write its clean-shutdown mark;
            // the reopen repairs it from the last commit.
            tracing::debug!(path = %self.path.display(), error = %e, "closing the state store after an I/O error");
        }
        match self.open_verified() {
            Ok(db) => {
                *guard = Some(db);
                self.broken().reason = None;
                tracing::info!(path = %self.path.display(), "state store reopened and verified after an I/O error");
            }
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot reopen the state store yet");
                // The reason names no path: every message that shows it names the file already.
                self.broken().reason = Some(match e {
                    StoreError::Database { message, .. } => message,
                    other => other.to_string(),
                });
            }
        }
    }

    fn open_verified(&self) -> Result<Database, StoreError> {
        unpanicked(&self.path, || self.open_verified_unguarded())
    }

    fn open_verified_unguarded(&self) -> Result<Database, StoreError> {
        let mut db = open(&self.path)?;
        if !db
            .check_integrity()
            .map_err(|e| db_err(&self.path, redb::Error::from(e)))?
        {
            return Err(db_err(
                &self.path,
                "the reopened database failed redb's integrity check (it was repaired from the last commit)",
            ));
        }
        (self.verify)(&db, &self.path)?;
        // Opening repairs in place and may succeed on a disk that is still full: writing new data
        // proves the cause is gone.
        (self.probe)(&db, &self.path)?;
        Ok(db)
    }
}

/// Open (or create) the database file, a panic of redb's on a damaged file turned into
/// [`StoreError::Damaged`].
pub(crate) fn open(path: &Path) -> Result<Database, StoreError> {
    unpanicked(path, || Database::create(path).map_err(|e| db_err(path, e)))
}

/// Run `f` (a redb call on the file at `path`); a panic inside it is [`StoreError::Damaged`]
/// naming the file. Random bytes in the middle of the file make redb reach code it holds
/// unreachable rather than return an error; the agent must refuse such a file by name, not exit
/// with a panic. Everything `f` touched belongs to the database, which is closed afterwards
/// (`Handle::close_damaged`) or never opened, so no broken state is used again.
pub(crate) fn unpanicked<T>(
    path: &Path,
    f: impl FnOnce() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_string());
        tracing::error!(path = %path.display(), panic = %message, "the state store file is damaged");
        Err(StoreError::Damaged {
            path: path.to_path_buf(),
            message,
        })
    })
}

/// Errors after which redb refuses to go on until the database is reopened.
fn needs_reopen(e: &redb::Error) -> bool {
    matches!(e, redb::Error::Io(_) | redb::Error::PreviousIo)
}

pub(crate) fn db_err(path: &Path, e: impl std::fmt::Display) -> StoreError {
    StoreError::Database {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// The schema version in `meta` (0 when the table does not exist).
pub(crate) fn read_version(
    db: &Database,
    meta: TableDefinition<&str, u64>,
    key: &str,
    h: impl Fn(redb::Error) -> StoreError,
) -> Result<u64, StoreError> {
    let txn = db.begin_read().map_err(|e| h(e.into()))?;
    let table = match txn.open_table(meta) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(0),
        Err(e) => return Err(h(e.into())),
    };
    Ok(table
        .get(key)
        .map_err(|e| h(e.into()))?
        .map_or(0, |v| v.value()))
}
