//! The agent's state store: one redb database file, `DATA_DIR/berth.redb`.
//!
//! Tables: `meta` (schema version), `tasks` (task id → JSON [`TaskRecord`]: the whole task state
//! plus its cleanup state), `images` (image reference → JSON [`ImageRecord`]: images berth pulled,
//! for the `once` pull behaviour, with pull and last-use times). Every write is one redb
//! transaction, durable when `commit` returns (redb fsyncs on commit), so a caller that saves before
//! acting never acts on a change a crash could lose.
//!
//! Why redb: the Rust counterpart of the BoltDB the ECS agent uses (copy-on-write B-trees, ACID,
//! crash-safe by default), pure Rust, no C library to build; berth's access pattern (a few writes per
//! container transition, whole-task reads at start) needs nothing SQL offers.
//!
//! Schema versions: 1 kept bare `TaskState` JSON in `tasks` and had no `images` table (images were in
//! `pulled-images.json`); 2 wraps tasks in `TaskRecord` and imports that file. [`Store::open`]
//! migrates older versions in one transaction and refuses newer ones.

use crate::{ImageRecord, PULLED_IMAGES_FILE, StoreError};
use berth_engine::{Millis, PullRecord, TaskState};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::handle::{Handle, db_err, read_version};
use crate::writer::Writer;

/// The database file inside the data directory.
pub const DB_FILE: &str = "berth.redb";
/// The schema this berth writes.
pub const SCHEMA_VERSION: u64 = 2;

const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const TASKS: TableDefinition<&str, &[u8]> = TableDefinition::new("tasks");
const IMAGES: TableDefinition<&str, &[u8]> = TableDefinition::new("images");
const VERSION_KEY: &str = "schema_version";

/// Where a stopped task's cleanup stands.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cleanup {
    /// When the task was seen STOPPED (the cleanup wait counts from here).
    pub stopped_at: Option<Millis>,
    /// The last refusal (`cleanup: refused: …`), kept until a retry succeeds.
    pub refused: Option<String>,
    /// Attempts so far.
    pub attempts: u32,
}

/// One task as the store keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskRecord {
    pub state: TaskState,
    #[serde(default)]
    pub cleanup: Cleanup,
}

/// The state store. Cheap to share behind an `Arc`; redb serializes writers itself. Task-state
/// saves from the actors go through the group-committing [`Writer`](crate::writer). After an I/O
/// error the database is closed, reopened and verified at the next operation
/// ([`handle`](crate::handle)); [`Store::degraded`] says why while it cannot be used.
pub struct Store {
    // Declared first so it is dropped (its thread joined) before the handle.
    writer: Writer,
    h: Arc<Handle>,
    path: PathBuf,
}

/// A reopened database must hold a schema this berth reads.
fn verify_schema(db: &Database, path: &Path) -> Result<(), StoreError> {
    let found = read_version(db, META, VERSION_KEY, |e| db_err(path, e))?;
    if found != SCHEMA_VERSION {
        return Err(StoreError::SchemaVersion {
            path: path.to_path_buf(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(())
}

/// What a reopened store must be able to write before it is used again.
const HEADROOM: usize = 1024 * 1024;
const PROBE: TableDefinition<&str, &[u8]> = TableDefinition::new("probe");

/// Two commits: 1 MiB written, then removed. Opening repairs in place and a small commit reuses
/// pages the file already has, so both can succeed on a disk that is still full; writing new
/// data proves there is room again.
fn probe_write(db: &Database, path: &Path) -> Result<(), StoreError> {
    let err = |e: redb::Error| db_err(path, e);
    let blob = vec![0u8; HEADROOM];
    for write in [true, false] {
        let txn = db.begin_write().map_err(|e| err(e.into()))?;
        {
            let mut t = txn.open_table(PROBE).map_err(|e| err(e.into()))?;
            if write {
                t.insert("headroom", blob.as_slice())
                    .map_err(|e| err(e.into()))?;
            } else {
                t.remove("headroom").map_err(|e| err(e.into()))?;
            }
        }
        txn.commit().map_err(|e| err(e.into()))?;
    }
    Ok(())
}

fn corrupt(path: &Path, key: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        path: path.to_path_buf(),
        key: key.to_string(),
        message: e.to_string(),
    }
}

impl Store {
    /// Open (or create) `DATA_DIR/berth.redb`, migrating an older schema.
    pub fn open(data_dir: &Path) -> Result<Store, StoreError> {
        let path = data_dir.join(DB_FILE);
        std::fs::create_dir_all(data_dir).map_err(|source| StoreError::Write {
            path: data_dir.to_path_buf(),
            source,
        })?;
        let db = Database::create(&path).map_err(|e| db_err(&path, e))?;
        let h = Arc::new(Handle::new(path.clone(), db, verify_schema, probe_write));
        let writer = Writer::start(h.clone(), TASKS).map_err(|source| StoreError::Write {
            path: path.clone(),
            source,
        })?;
        let store = Store { writer, h, path };
        store.migrate(data_dir)?;
        Ok(store)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Why the store cannot be written now (an I/O error not yet repaired by a reopen, or a
    /// reopen that failed); None when it is fine.
    pub fn degraded(&self) -> Option<String> {
        self.h.degraded()
    }

    /// Like [`Store::degraded`], after trying a reopen first if one is due (at most every
    /// 500 ms): a store whose cause is gone recovers here even when no task is saving.
    pub fn check(&self) -> Option<String> {
        self.h.check()
    }

    /// The schema version on disk (0 for a new, empty database).
    pub fn schema_version(&self) -> Result<u64, StoreError> {
        self.h
            .with(|db| read_version(db, META, VERSION_KEY, |e| self.h.err(e)))
    }

    fn migrate(&self, data_dir: &Path) -> Result<(), StoreError> {
        let found = self.schema_version()?;
        if found > SCHEMA_VERSION {
            return Err(StoreError::SchemaVersion {
                path: self.path.clone(),
                found,
                supported: SCHEMA_VERSION,
            });
        }
        if found == SCHEMA_VERSION {
            return Ok(());
        }
        let err = |e: redb::Error| self.h.err(e);
        self.h.with(|db| {
            let txn = db.begin_write().map_err(|e| err(e.into()))?;
            {
                let mut tasks = txn.open_table(TASKS).map_err(|e| err(e.into()))?;
                if found == 1 {
                    // v1 → v2: bare TaskState → TaskRecord.
                    let mut rewritten = Vec::new();
                    for entry in tasks.iter().map_err(|e| err(e.into()))? {
                        let (k, v) = entry.map_err(|e| err(e.into()))?;
                        let state: TaskState = serde_json::from_slice(v.value())
                            .map_err(|e| corrupt(&self.path, k.value(), e))?;
                        rewritten.push((k.value().to_string(), state));
                    }
                    for (k, state) in rewritten {
                        let rec = TaskRecord {
                            state,
                            cleanup: Cleanup::default(),
                        };
                        let bytes = serde_json::to_vec(&rec).map_err(|e| db_err(&self.path, e))?;
                        tasks
                            .insert(k.as_str(), bytes.as_slice())
                            .map_err(|e| err(e.into()))?;
                    }
                }
                let mut images = txn.open_table(IMAGES).map_err(|e| err(e.into()))?;
                // Images recorded by a berth that had no database (pulled-images.json).
                let legacy = crate::PulledImages::open(data_dir)?;
                for (image, rec) in legacy.all() {
                    let bytes = serde_json::to_vec(&rec).map_err(|e| db_err(&self.path, e))?;
                    images
                        .insert(image.as_str(), bytes.as_slice())
                        .map_err(|e| err(e.into()))?;
                }
                let mut meta = txn.open_table(META).map_err(|e| err(e.into()))?;
                meta.insert(VERSION_KEY, SCHEMA_VERSION)
                    .map_err(|e| err(e.into()))?;
            }
            txn.commit().map_err(|e| err(e.into()))
        })?;
        let legacy_file = data_dir.join(PULLED_IMAGES_FILE);
        if legacy_file.exists() {
            let _ = berth_fs::atomic::rename(
                &legacy_file,
                &data_dir.join(format!("{PULLED_IMAGES_FILE}.imported")),
            );
        }
        if found != 0 {
            tracing::info!(path = %self.path.display(), from = found, to = SCHEMA_VERSION, "state store migrated");
        }
        Ok(())
    }

    /// Write one value in one transaction; durable when this returns.
    fn put(
        &self,
        table: TableDefinition<&str, &[u8]>,
        key: &str,
        bytes: &[u8],
    ) -> Result<(), StoreError> {
        let err = |e: redb::Error| self.h.err(e);
        self.h.with(|db| {
            let txn = db.begin_write().map_err(|e| err(e.into()))?;
            {
                let mut t = txn.open_table(table).map_err(|e| err(e.into()))?;
                t.insert(key, bytes).map_err(|e| err(e.into()))?;
            }
            txn.commit().map_err(|e| err(e.into()))
        })
    }

    /// Save (insert or replace) one task; durable when this returns.
    pub fn save_task(&self, rec: &TaskRecord) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(rec).map_err(|e| db_err(&self.path, e))?;
        self.put(TASKS, rec.state.id.as_str(), &bytes)
    }

    pub fn get_task(&self, id: &str) -> Result<Option<TaskRecord>, StoreError> {
        let err = |e: redb::Error| self.h.err(e);
        self.h.with(|db| {
            let txn = db.begin_read().map_err(|e| err(e.into()))?;
            let t = match txn.open_table(TASKS) {
                Ok(t) => t,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
                Err(e) => return Err(err(e.into())),
            };
            let Some(v) = t.get(id).map_err(|e| err(e.into()))? else {
                return Ok(None);
            };
            serde_json::from_slice(v.value())
                .map(Some)
                .map_err(|e| corrupt(&self.path, id, e))
        })
    }

    /// Every task in the store, in id order.
    pub fn tasks(&self) -> Result<Vec<TaskRecord>, StoreError> {
        let err = |e: redb::Error| self.h.err(e);
        self.h.with(|db| {
            let txn = db.begin_read().map_err(|e| err(e.into()))?;
            let t = match txn.open_table(TASKS) {
                Ok(t) => t,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
                Err(e) => return Err(err(e.into())),
            };
            let mut out = Vec::new();
            for entry in t.iter().map_err(|e| err(e.into()))? {
                let (k, v) = entry.map_err(|e| err(e.into()))?;
                out.push(
                    serde_json::from_slice(v.value())
                        .map_err(|e| corrupt(&self.path, k.value(), e))?,
                );
            }
            Ok(out)
        })
    }

    pub fn delete_task(&self, id: &str) -> Result<(), StoreError> {
        let err = |e: redb::Error| self.h.err(e);
        self.h.with(|db| {
            let txn = db.begin_write().map_err(|e| err(e.into()))?;
            {
                let mut t = txn.open_table(TASKS).map_err(|e| err(e.into()))?;
                t.remove(id).map_err(|e| err(e.into()))?;
            }
            txn.commit().map_err(|e| err(e.into()))
        })
    }

    /// Images berth pulled, by reference.
    pub fn images(&self) -> Result<BTreeMap<String, ImageRecord>, StoreError> {
        let err = |e: redb::Error| self.h.err(e);
        self.h.with(|db| {
            let txn = db.begin_read().map_err(|e| err(e.into()))?;
            let t = match txn.open_table(IMAGES) {
                Ok(t) => t,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(BTreeMap::new()),
                Err(e) => return Err(err(e.into())),
            };
            let mut out = BTreeMap::new();
            for entry in t.iter().map_err(|e| err(e.into()))? {
                let (k, v) = entry.map_err(|e| err(e.into()))?;
                if let Ok(rec) = serde_json::from_slice(v.value()) {
                    out.insert(k.value().to_string(), rec);
                }
            }
            Ok(out)
        })
    }

    pub fn record_image(&self, image: &str, at: Millis) -> Result<(), StoreError> {
        let rec = ImageRecord { pulled_at: at };
        let bytes = serde_json::to_vec(&rec).map_err(|e| db_err(&self.path, e))?;
        self.put(IMAGES, image, &bytes)
    }
}

impl Store {
    /// Save a task's state, keeping its cleanup record, through the group-committing writer:
    /// durable when the future resolves `Ok`; many tasks' saves share one transaction. Never
    /// blocks the calling thread.
    pub fn save_state_grouped(
        &self,
        state: &TaskState,
    ) -> impl std::future::Future<Output = Result<(), StoreError>> + Send + 'static {
        let answer = self.writer.save(state.clone());
        let path = self.path.clone();
        async move {
            match answer.await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(message)) => Err(StoreError::Database { path, message }),
                Err(_) => Err(StoreError::Database {
                    path,
                    message: "the state store's writer stopped before answering".into(),
                }),
            }
        }
    }

    /// Transactions the group-committing writer has committed (each holds one or more saves).
    pub fn group_commits(&self) -> u64 {
        self.writer.commits()
    }
}

impl berth_engine::Persist for Store {
    fn save(
        &self,
        state: &TaskState,
    ) -> futures_util::future::BoxFuture<'static, Result<(), String>> {
        let saved = self.save_state_grouped(state);
        Box::pin(async move { saved.await.map_err(|e| e.to_string()) })
    }
}

impl PullRecord for Store {
    fn pulled_before(&self, image: &str) -> bool {
        self.images().is_ok_and(|m| m.contains_key(image))
    }

    fn record_pull(&self, image: &str) -> Result<(), String> {
        self.record_image(image, berth_engine::report::now_ms())
            .map_err(|e| e.to_string())
    }
}
