//! The agent's state store: one redb database file, `DATA_DIR/berth.redb`.
//!
//! Tables: `meta` (schema version), `tasks` (task id → JSON [`TaskRecord`]: the whole task state
//! plus its cleanup state), `tracked_images` (image reference in Docker's normal form → JSON
//! [`TrackedRecord`]: every image berth pulled or a task of berth's used — first and last pull,
//! last use, Docker's id and size when cleanup last saw it, the tasks that used it — for the `once`
//! pull behaviour and image cleanup). Every write is one redb
//! transaction, durable when `commit` returns (redb fsyncs on commit), so a caller that saves before
//! acting never acts on a change a crash could lose.
//!
//! Why redb: the Rust counterpart of the BoltDB the ECS agent uses (copy-on-write B-trees, ACID,
//! crash-safe by default), pure Rust, no C library to build; berth's access pattern (a few writes per
//! container transition, whole-task reads at start) needs nothing SQL offers.
//!
//! Schema versions: 1 kept bare `TaskState` JSON in `tasks` and had no `images` table (images were in
//! `pulled-images.json`); 2 wraps tasks in `TaskRecord` and imports that file into `images`
//! (reference → pull time); 3 replaces `images` by `tracked_images` (each pulled image becomes a
//! tracked one, first and last pulled and last used at its pull time); 4 re-keys `tracked_images`
//! under today's normal form ([`berth_engine::image_ref::normalize`]: `library/x:latest` is
//! `x:latest`, a tag beside a digest is dropped), merging the records that land on one key
//! ([`merge`]). Limit: schema 3 keyed `docker.io/library/a/b` as `a/b:latest` (today
//! `library/a/b:latest`), which cannot be told from the image `a/b`: such a key stays, and the
//! record is made again under the new key at the image's next pull or use. [`Store::open`] migrates older versions in one
//! transaction and refuses newer ones.

use crate::{ImageRecord, PULLED_IMAGES_FILE, StoreError};
use berth_engine::image_ref::normalize;
use berth_engine::image_use::{ImageRecordError, ImageRecords, MAX_TASKS, TrackedImage};
use berth_engine::{Millis, PersistError, PullRecord, PullRecordError, TaskState};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::handle::{Handle, db_err, read_version};
use crate::writer::Writer;

/// The database file inside the data directory.
pub const DB_FILE: &str = "berth.redb";
/// The schema this berth writes.
pub const SCHEMA_VERSION: u64 = 4;

const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
pub(crate) const TASKS: TableDefinition<&str, &[u8]> = TableDefinition::new("tasks");
/// Schema 2's pulled images (reference → [`ImageRecord`]); read only to migrate.
const IMAGES: TableDefinition<&str, &[u8]> = TableDefinition::new("images");
const TRACKED: TableDefinition<&str, &[u8]> = TableDefinition::new("tracked_images");
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

/// One tracked image as the store keeps it (the key is its reference).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrackedRecord {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_pulled: Option<Millis>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pulled: Option<Millis>,
    pub last_used: Millis,
    #[serde(default)]
    pub tasks: Vec<String>,
}

impl TrackedRecord {
    fn from_pull(at: Millis) -> Self {
        TrackedRecord {
            first_pulled: Some(at),
            last_pulled: Some(at),
            last_used: at,
            ..TrackedRecord::default()
        }
    }

    fn to_image(&self, reference: &str) -> TrackedImage {
        TrackedImage {
            reference: reference.to_string(),
            image_id: self.image_id.clone(),
            size: self.size,
            first_pulled: self.first_pulled,
            last_pulled: self.last_pulled,
            last_used: self.last_used,
            tasks: self.tasks.clone(),
        }
    }

    fn from_image(t: &TrackedImage) -> Self {
        TrackedRecord {
            image_id: t.image_id.clone(),
            size: t.size,
            first_pulled: t.first_pulled,
            last_pulled: t.last_pulled,
            last_used: t.last_used,
            tasks: t.tasks.clone(),
        }
    }
}

/// Two records of one image (two references that name it in one normal form) as one: the
/// earliest first pull, the latest last pull and last use, the tasks of both (the more recent
/// record's last, at most [`MAX_TASKS`]), and Docker's id and size from the more recent record
/// (the later last use, then the later last pull), else from the other.
pub fn merge(a: TrackedRecord, b: TrackedRecord) -> TrackedRecord {
    let (older, newer) = if (b.last_used, b.last_pulled) >= (a.last_used, a.last_pulled) {
        (a, b)
    } else {
        (b, a)
    };
    let first_pulled = match (older.first_pulled, newer.first_pulled) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    };
    let mut tasks: Vec<String> = Vec::new();
    for t in older.tasks.iter().chain(&newer.tasks) {
        tasks.retain(|have| have != t);
        tasks.push(t.clone());
    }
    if tasks.len() > MAX_TASKS {
        let extra = tasks.len() - MAX_TASKS;
        tasks.drain(..extra);
    }
    let (image_id, size) = if newer.image_id.is_some() || newer.size.is_some() {
        (newer.image_id, newer.size)
    } else {
        (older.image_id, older.size)
    };
    TrackedRecord {
        image_id,
        size,
        first_pulled,
        last_pulled: older.last_pulled.max(newer.last_pulled),
        last_used: older.last_used.max(newer.last_used),
        tasks,
    }
}

/// The state store. Cheap to share behind an `Arc`; redb serializes writers itself. Task-state
/// saves from the actors go through the group-committing [`Writer`](crate::writer). After an I/O
/// error the database is closed, reopened and verified at the next operation
/// ([`handle`](crate::handle)); [`Store::degraded`] says why while it cannot be used.
pub struct Store {
    // Declared first so it is dropped (its thread joined) before the handle.
    writer: Writer,
    pub(crate) h: Arc<Handle>,
    pub(crate) path: PathBuf,
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

pub(crate) fn corrupt(path: &Path, key: &str, e: impl std::fmt::Display) -> StoreError {
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
        let db = crate::handle::open(&path)?;
        let reserve = crate::reserve::Reserve::new(data_dir, crate::reserve::RESERVE_BYTES);
        if let Err(e) = reserve.fill() {
            tracing::warn!(path = %data_dir.join(crate::reserve::RESERVE_FILE).display(), error = %e, "cannot fill the state store's reserve now; the agent tries again while it runs");
        }
        let h = Arc::new(Handle::new(
            path.clone(),
            db,
            verify_schema,
            probe_write,
            reserve,
        ));
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
                let mut pulled: BTreeMap<String, ImageRecord> = BTreeMap::new();
                if found == 2 {
                    // v2 → v3: the pulled images become tracked images.
                    let images = txn.open_table(IMAGES).map_err(|e| err(e.into()))?;
                    for entry in images.iter().map_err(|e| err(e.into()))? {
                        let (k, v) = entry.map_err(|e| err(e.into()))?;
                        let rec: ImageRecord = serde_json::from_slice(v.value())
                            .map_err(|e| corrupt(&self.path, k.value(), e))?;
                        pulled.insert(k.value().to_string(), rec);
                    }
                } else if found < 2 {
                    // Images recorded by a berth that had no database (pulled-images.json).
                    pulled = crate::PulledImages::open(data_dir)?.all();
                }
                let mut tracked = txn.open_table(TRACKED).map_err(|e| err(e.into()))?;
                for (image, rec) in pulled {
                    let bytes = serde_json::to_vec(&TrackedRecord::from_pull(rec.pulled_at))
                        .map_err(|e| db_err(&self.path, e))?;
                    tracked
                        .insert(image.as_str(), bytes.as_slice())
                        .map_err(|e| err(e.into()))?;
                }
                // v3 → v4 (and the images just imported): every key in today's normal form.
                self.rekey_tracked(&mut tracked)?;
                let mut meta = txn.open_table(META).map_err(|e| err(e.into()))?;
                meta.insert(VERSION_KEY, SCHEMA_VERSION)
                    .map_err(|e| err(e.into()))?;
            }
            if found == 2 {
                txn.delete_table(IMAGES).map_err(|e| err(e.into()))?;
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

    /// Schema 4: every tracked image under [`normalize`] of its stored reference, the records
    /// that land on one key merged ([`merge`]). A value that does not decode is left under its
    /// key (reading the images names it, as before).
    fn rekey_tracked(
        &self,
        tracked: &mut redb::Table<'_, &'static str, &'static [u8]>,
    ) -> Result<(), StoreError> {
        let err = |e: redb::Error| self.h.err(e);
        let mut records: Vec<(String, TrackedRecord)> = Vec::new();
        for entry in tracked.iter().map_err(|e| err(e.into()))? {
            let (k, v) = entry.map_err(|e| err(e.into()))?;
            match serde_json::from_slice::<TrackedRecord>(v.value()) {
                Ok(rec) => records.push((k.value().to_string(), rec)),
                Err(e) => {
                    tracing::warn!(path = %self.path.display(), key = k.value(), error = %e, "tracked image unreadable; left under its key");
                }
            }
        }
        let mut rekeyed: BTreeMap<String, TrackedRecord> = BTreeMap::new();
        for (key, rec) in &records {
            let new = normalize(key);
            let merged = match rekeyed.remove(&new) {
                Some(other) => merge(other, rec.clone()),
                None => rec.clone(),
            };
            rekeyed.insert(new, merged);
        }
        for (key, _) in &records {
            if !rekeyed.contains_key(key) {
                tracked.remove(key.as_str()).map_err(|e| err(e.into()))?;
                tracing::info!(path = %self.path.display(), from = %key, to = %normalize(key), "tracked image re-keyed in today's normal form");
            }
        }
        for (key, rec) in rekeyed {
            let unchanged = records.iter().any(|(k, r)| *k == key && *r == rec);
            if unchanged {
                continue;
            }
            let bytes = serde_json::to_vec(&rec).map_err(|e| db_err(&self.path, e))?;
            tracked
                .insert(key.as_str(), bytes.as_slice())
                .map_err(|e| err(e.into()))?;
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

    /// The JSON value under `key` (None: no such key, or no such table yet); a value that does not
    /// decode is [`StoreError::Corrupt`] naming the key.
    fn get_json<V: DeserializeOwned>(
        &self,
        table: TableDefinition<&str, &[u8]>,
        key: &str,
    ) -> Result<Option<V>, StoreError> {
        let err = |e: redb::Error| self.h.err(e);
        self.h.with(|db| {
            let txn = db.begin_read().map_err(|e| err(e.into()))?;
            let t = match txn.open_table(table) {
                Ok(t) => t,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
                Err(e) => return Err(err(e.into())),
            };
            let Some(v) = t.get(key).map_err(|e| err(e.into()))? else {
                return Ok(None);
            };
            serde_json::from_slice(v.value())
                .map(Some)
                .map_err(|e| corrupt(&self.path, key, e))
        })
    }

    /// Every (key, JSON value) of `table`, in key order (none while the table does not exist);
    /// a value that does not decode is [`StoreError::Corrupt`] naming its key.
    fn all_json<V: DeserializeOwned>(
        &self,
        table: TableDefinition<&str, &[u8]>,
    ) -> Result<Vec<(String, V)>, StoreError> {
        let err = |e: redb::Error| self.h.err(e);
        self.h.with(|db| {
            let txn = db.begin_read().map_err(|e| err(e.into()))?;
            let t = match txn.open_table(table) {
                Ok(t) => t,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
                Err(e) => return Err(err(e.into())),
            };
            let mut out = Vec::new();
            for entry in t.iter().map_err(|e| err(e.into()))? {
                let (k, v) = entry.map_err(|e| err(e.into()))?;
                let value = serde_json::from_slice(v.value())
                    .map_err(|e| corrupt(&self.path, k.value(), e))?;
                out.push((k.value().to_string(), value));
            }
            Ok(out)
        })
    }

    /// Save (insert or replace) one task; durable when this returns.
    pub fn save_task(&self, rec: &TaskRecord) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(rec).map_err(|e| db_err(&self.path, e))?;
        self.put(TASKS, rec.state.id.as_str(), &bytes)
    }

    pub fn get_task(&self, id: &str) -> Result<Option<TaskRecord>, StoreError> {
        self.get_json(TASKS, id)
    }

    /// Every task in the store, in id order.
    pub fn tasks(&self) -> Result<Vec<TaskRecord>, StoreError> {
        Ok(self
            .all_json(TASKS)?
            .into_iter()
            .map(|(_, rec)| rec)
            .collect())
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

    /// Every tracked image, by reference (Docker's normal form).
    pub fn tracked_images(&self) -> Result<BTreeMap<String, TrackedRecord>, StoreError> {
        Ok(self.all_json(TRACKED)?.into_iter().collect())
    }

    /// One tracked image, if the store has it.
    pub fn tracked_image(&self, reference: &str) -> Result<Option<TrackedRecord>, StoreError> {
        self.get_json(TRACKED, &normalize(reference))
    }

    /// Change one tracked image (created, last used at `at`, when absent) in one transaction.
    pub fn update_image(
        &self,
        reference: &str,
        at: Millis,
        change: impl Fn(&mut TrackedImage),
    ) -> Result<(), StoreError> {
        let key = normalize(reference);
        let err = |e: redb::Error| self.h.err(e);
        self.h.with(|db| {
            let txn = db.begin_write().map_err(|e| err(e.into()))?;
            {
                let mut t = txn.open_table(TRACKED).map_err(|e| err(e.into()))?;
                let old: Option<TrackedRecord> =
                    match t.get(key.as_str()).map_err(|e| err(e.into()))? {
                        Some(v) => serde_json::from_slice(v.value()).ok(),
                        None => None,
                    };
                let mut image = old
                    .map(|r| r.to_image(&key))
                    .unwrap_or_else(|| TrackedImage {
                        reference: key.clone(),
                        last_used: at,
                        ..TrackedImage::default()
                    });
                change(&mut image);
                let bytes = serde_json::to_vec(&TrackedRecord::from_image(&image))
                    .map_err(|e| db_err(&self.path, e))?;
                t.insert(key.as_str(), bytes.as_slice())
                    .map_err(|e| err(e.into()))?;
            }
            txn.commit().map_err(|e| err(e.into()))
        })
    }

    /// Record a successful pull of `image` at `at`.
    pub fn record_image(&self, image: &str, at: Millis) -> Result<(), StoreError> {
        self.update_image(image, at, |t| {
            t.first_pulled.get_or_insert(at);
            t.last_pulled = Some(at);
        })
    }

    /// Forget a tracked image (it was removed).
    pub fn forget_image(&self, reference: &str) -> Result<(), StoreError> {
        let key = normalize(reference);
        let err = |e: redb::Error| self.h.err(e);
        self.h.with(|db| {
            let txn = db.begin_write().map_err(|e| err(e.into()))?;
            {
                let mut t = txn.open_table(TRACKED).map_err(|e| err(e.into()))?;
                t.remove(key.as_str()).map_err(|e| err(e.into()))?;
            }
            txn.commit().map_err(|e| err(e.into()))
        })
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

    /// The state store's reserve: held, or released after a full disk (and how often).
    pub fn reserve(&self) -> crate::ReserveStatus {
        self.h.reserve.status()
    }

    /// Fill the reserve again (after a release, once the file system has room). An error: the
    /// file system has no room yet (nothing is kept of a partial fill).
    pub fn fill_reserve(&self) -> Result<(), StoreError> {
        self.h.reserve.fill().map_err(|source| StoreError::Write {
            path: self.h.reserve.status().path,
            source,
        })
    }

    /// Transactions the group-committing writer has committed (each holds one or more saves).
    pub fn group_commits(&self) -> u64 {
        self.writer.commits()
    }

    /// How long the task-state write under way has been running, None when none is: a disk that
    /// does not answer (hung, frozen) returns no error, its write just never ends.
    pub fn write_busy_for(&self) -> Option<std::time::Duration> {
        self.writer.busy_for()
    }
}

impl berth_engine::Persist for Store {
    fn save(
        &self,
        state: &TaskState,
    ) -> futures_util::future::BoxFuture<'static, Result<(), PersistError>> {
        let saved = self.save_state_grouped(state);
        let task = state.id.clone();
        Box::pin(async move { saved.await.map_err(|e| PersistError::save(&task, e)) })
    }
}

impl PullRecord for Store {
    fn pulled_before(&self, image: &str) -> bool {
        self.tracked_image(image)
            .is_ok_and(|t| t.is_some_and(|t| t.last_pulled.is_some()))
    }

    fn record_pull(&self, image: &str) -> Result<(), PullRecordError> {
        self.record_image(image, berth_engine::report::now_ms())
            .map_err(|e| PullRecordError::record(image, e))
    }
}

impl ImageRecords for Store {
    fn used(&self, image: &str, task: &str, at: Millis) -> Result<(), ImageRecordError> {
        self.update_image(image, at, |t| t.note_use(task, at))
            .map_err(|e| ImageRecordError::Use {
                image: image.to_string(),
                task: task.to_string(),
                source: e.into(),
            })
    }

    fn tracked(&self) -> Result<Vec<TrackedImage>, ImageRecordError> {
        self.tracked_images()
            .map(|m| m.iter().map(|(k, r)| r.to_image(k)).collect())
            .map_err(|e| ImageRecordError::Read { source: e.into() })
    }

    fn identify(&self, reference: &str, image_id: &str, size: u64) -> Result<(), ImageRecordError> {
        self.update_image(reference, berth_engine::report::now_ms(), |t| {
            t.image_id = Some(image_id.to_string());
            t.size = Some(size);
        })
        .map_err(|e| ImageRecordError::Identify {
            image: reference.to_string(),
            image_id: image_id.to_string(),
            source: e.into(),
        })
    }

    fn forget(&self, reference: &str) -> Result<(), ImageRecordError> {
        self.forget_image(reference)
            .map_err(|e| ImageRecordError::Forget {
                image: reference.to_string(),
                source: e.into(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(first: Option<Millis>, last_pulled: Option<Millis>, used: Millis) -> TrackedRecord {
        TrackedRecord {
            first_pulled: first,
            last_pulled,
            last_used: used,
            ..TrackedRecord::default()
        }
    }

    #[test]
    fn merge_takes_the_earliest_first_pull_and_the_latest_times() {
        let m = merge(rec(Some(5), Some(50), 60), rec(Some(10), Some(80), 40));
        assert_eq!(
            (m.first_pulled, m.last_pulled, m.last_used),
            (Some(5), Some(80), 60)
        );
        let m = merge(rec(None, None, 60), rec(Some(10), Some(10), 10));
        assert_eq!((m.first_pulled, m.last_pulled), (Some(10), Some(10)));
        assert_eq!(m, merge(rec(Some(10), Some(10), 10), rec(None, None, 60)));
    }

    #[test]
    fn merge_keeps_the_most_recent_identity_and_every_task_bounded() {
        let mut old = rec(None, None, 10);
        old.image_id = Some("sha256:old".into());
        old.size = Some(1);
        old.tasks = (0..10).map(|i| format!("o{i}")).collect();
        let mut new = rec(None, None, 20);
        new.tasks = (0..10).map(|i| format!("n{i}")).collect();
        new.tasks.push("o9".into());
        let m = merge(new.clone(), old.clone());
        assert_eq!(
            (m.image_id.as_deref(), m.size),
            (Some("sha256:old"), Some(1)),
            "the more recent has none: the other's"
        );
        assert_eq!(m.tasks.len(), MAX_TASKS);
        assert_eq!(m.tasks.last().map(String::as_str), Some("o9"));
        assert_eq!(m.tasks.first().map(String::as_str), Some("o4"));
        new.image_id = Some("sha256:new".into());
        let m = merge(old, new);
        assert_eq!((m.image_id.as_deref(), m.size), (Some("sha256:new"), None));
    }
}
