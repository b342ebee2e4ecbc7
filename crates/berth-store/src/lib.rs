//! berth-store: the agent's persistent state — the only crate that knows the database. (The
//! volume plugin is its own process and keeps its own state file, in berth-volume.)
//!
//! - [`db::Store`]: the agent's embedded database (`DATA_DIR/berth.redb`): tasks and the tracked
//!   images (every image berth pulled or a task used: the `once` pull record and image cleanup's
//!   [`berth_engine::image_use::ImageRecords`]). The actors' task-state saves are group-committed by one writer thread
//!   (`writer`): every save queued while a commit runs goes into the next transaction. After
//!   an I/O error (a full disk, an immutable file) redb refuses every transaction until the
//!   database is reopened; `handle` notes the error, reopens and verifies the database at the next
//!   operation, and [`Store::degraded`] says why while it cannot be written.
//! - [`reserve`]: `DATA_DIR/berth.reserve`, 16 MiB of real blocks kept for the store on its file
//!   system (task scratch volumes share it); released when a write fails with ENOSPC, so that
//!   write is tried again and succeeds ([`Store::reserve`], [`Store::fill_reserve`]).
//! - [`cluster`]: what a cluster node agent remembers (its node name, lease, the revision its
//!   assignment watch has processed, the assignments it accepted), beside its tasks.
//! - [`PulledImages`]: the record of pulled images for `berth run` without an agent, a small JSON
//!   file (`pulled-images.json`) with a version field, replaced on every change through
//!   [`berth_fs::write_atomic`] (temporary file in the same directory, fsync, rename, fsync of the
//!   directory). The database imports it when it is first opened in the same data directory and
//!   renames it to `pulled-images.json.imported` (through [`berth_fs::atomic::rename`]).
//!
//! File system calls that make a file crash-safe (the temporary file, the rename, the fsyncs) are
//! berth-fs's; this crate decides what is written and when.

pub mod cluster;
pub mod db;
mod handle;
pub mod reserve;
mod writer;

pub use cluster::ClusterMemory;
pub use db::{Cleanup, Store, TaskRecord, TrackedRecord};
pub use reserve::{RESERVE_BYTES, RESERVE_FILE, ReserveStatus};

use berth_engine::PullRecord;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The file name inside the data directory.
pub const PULLED_IMAGES_FILE: &str = "pulled-images.json";
const VERSION: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a berth pulled-images file: {source}")]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{path} has version {found}; this berth reads version {VERSION} (upgrade berth)")]
    Version { path: PathBuf, found: u32 },
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The record could not be turned into JSON (a map of strings and numbers: not expected);
    /// nothing was written.
    #[error("cannot write {path}: its JSON cannot be made: {source}")]
    Encode {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("state store {path}: {message}")]
    Database { path: PathBuf, message: String },
    #[error(
        "state store {path} has schema version {found}; this berth reads up to {supported} (upgrade berth)"
    )]
    SchemaVersion {
        path: PathBuf,
        found: u64,
        supported: u64,
    },
    /// redb panicked reading or opening the file (random bytes inside it reach code redb holds
    /// unreachable): the file is damaged beyond what redb reports as an error.
    #[error(
        "state store {path} is damaged: redb failed on it ({message}); stop the agent, move the file aside \
         (mv {path} {path}.damaged) and start again: berth starts with an empty store, the containers of \
         the tasks it held keep running and `berth gc --containers` removes them"
    )]
    Damaged { path: PathBuf, message: String },
    #[error("state store {path}: entry {key} is unreadable: {message}")]
    Corrupt {
        path: PathBuf,
        key: String,
        message: String,
    },
}

/// One image pulled by this agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageRecord {
    /// Unix milliseconds of the last successful pull.
    pub pulled_at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct FileFormat {
    version: u32,
    images: BTreeMap<String, ImageRecord>,
}

/// The images this agent pulled, persisted in `<data-dir>/pulled-images.json`.
#[derive(Debug)]
pub struct PulledImages {
    path: PathBuf,
    images: Mutex<BTreeMap<String, ImageRecord>>,
}

impl PulledImages {
    /// Open (or start) the record in `data_dir`.
    pub fn open(data_dir: &Path) -> Result<Self, StoreError> {
        let path = data_dir.join(PULLED_IMAGES_FILE);
        let images = match std::fs::read(&path) {
            Ok(bytes) => {
                let f: FileFormat =
                    serde_json::from_slice(&bytes).map_err(|source| StoreError::Parse {
                        path: path.clone(),
                        source,
                    })?;
                if f.version != VERSION {
                    return Err(StoreError::Version {
                        path,
                        found: f.version,
                    });
                }
                f.images
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(source) => return Err(StoreError::Read { path, source }),
        };
        Ok(PulledImages {
            path,
            images: Mutex::new(images),
        })
    }

    /// Every recorded image.
    pub fn all(&self) -> BTreeMap<String, ImageRecord> {
        self.lock().clone()
    }

    pub fn get(&self, image: &str) -> Option<ImageRecord> {
        self.lock().get(image).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, ImageRecord>> {
        // The map is always consistent between statements: a panic elsewhere cannot corrupt it.
        self.images.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Record a pull and persist it before returning.
    pub fn record(&self, image: &str, at: i64) -> Result<(), StoreError> {
        let mut images = self.lock();
        images.insert(image.to_string(), ImageRecord { pulled_at: at });
        let file = FileFormat {
            version: VERSION,
            images: images.clone(),
        };
        // A map of strings and numbers always serializes; were it not to, the file is left as it
        // is and the caller told, rather than replaced by an empty one.
        let bytes = serde_json::to_vec_pretty(&file).map_err(|source| StoreError::Encode {
            path: self.path.clone(),
            source,
        })?;
        replace_file(&self.path, &bytes)
    }
}

impl PullRecord for PulledImages {
    fn pulled_before(&self, image: &str) -> bool {
        self.get(image).is_some()
    }

    fn record_pull(&self, image: &str) -> Result<(), berth_engine::PullRecordError> {
        self.record(image, berth_engine::report::now_ms())
            .map_err(|e| berth_engine::PullRecordError::record(image, e))
    }
}

/// Replace `path` with `bytes` so that a crash leaves either the old or the new content (creating
/// its directory first): [`berth_fs::write_atomic`].
fn replace_file(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let write = |source| StoreError::Write {
        path: path.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(write)?;
    // The message names the file already; the step adds nothing a reader can act on.
    berth_fs::write_atomic(path, bytes).map_err(|e| write(e.source))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn survives_reopening() {
        let dir = tempfile::tempdir().expect("tmp");
        let r = PulledImages::open(dir.path()).expect("open");
        assert!(!r.pulled_before("a:1"));
        r.record("a:1", 5).expect("record");
        let again = PulledImages::open(dir.path()).expect("reopen");
        assert!(again.pulled_before("a:1"));
        assert_eq!(again.get("a:1"), Some(ImageRecord { pulled_at: 5 }));
        assert!(!again.pulled_before("b:1"));
    }

    #[test]
    fn refuses_a_newer_version_and_garbage_with_the_path() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join(PULLED_IMAGES_FILE);
        std::fs::write(&p, r#"{"version": 9, "images": {}}"#).expect("write");
        let e = PulledImages::open(dir.path()).expect_err("newer version");
        assert!(e.to_string().contains("version 9"), "{e}");
        std::fs::write(&p, "{").expect("write");
        let e = PulledImages::open(dir.path()).expect_err("garbage");
        assert!(e.to_string().contains(PULLED_IMAGES_FILE), "{e}");
    }
}
