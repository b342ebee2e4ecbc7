//! The store's reserve: `DATA_DIR/berth.reserve`, a file of [`RESERVE_BYTES`] real blocks (zeros
//! written, not a sparse file) kept beside the database on the same file system.
//!
//! Task volumes without a host path live under the data directory too, so one task filling its
//! scratch volume fills the file system the database is on. When a store write fails with ENOSPC
//! (`handle`), the reserve is released (truncated to zero: the blocks go back to the file system;
//! the file stays, no delete) and the write is tried once more, so the store's own write succeeds.
//! The agent then stops the task that filled the disk and fills the reserve again once the file
//! system has room for it ([`Reserve::fill`]).
//!
//! Hand-written: plain `std::fs` writes of zeros; no crate does this.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The file name inside the data directory.
pub const RESERVE_FILE: &str = "berth.reserve";
/// How much space the reserve holds for the store: 16 MiB.
pub const RESERVE_BYTES: u64 = 16 << 20;

pub(crate) struct Reserve {
    path: PathBuf,
    size: u64,
    held: AtomicBool,
    releases: AtomicU64,
}

/// What the reserve holds now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReserveStatus {
    pub path: PathBuf,
    /// Bytes the reserve holds when it is filled.
    pub size: u64,
    /// The reserve is filled (false: released after a full disk, or never filled).
    pub held: bool,
    /// How often it was released since the store was opened.
    pub releases: u64,
}

impl Reserve {
    pub(crate) fn new(data_dir: &Path, size: u64) -> Reserve {
        Reserve {
            path: data_dir.join(RESERVE_FILE),
            size,
            held: AtomicBool::new(false),
            releases: AtomicU64::new(0),
        }
    }

    pub(crate) fn status(&self) -> ReserveStatus {
        ReserveStatus {
            path: self.path.clone(),
            size: self.size,
            held: self.held.load(Ordering::SeqCst),
            releases: self.releases.load(Ordering::SeqCst),
        }
    }

    /// Fill the reserve (a file that already holds its blocks is kept). A file system without
    /// room for it: the file is truncated again (nothing taken from the store) and the error
    /// returned.
    pub(crate) fn fill(&self) -> std::io::Result<()> {
        let mut f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&self.path)?;
        if f.metadata()?.blocks() * 512 >= self.size {
            self.held.store(true, Ordering::SeqCst);
            return Ok(());
        }
        let written = (|| {
            f.set_len(0)?;
            let zeros = vec![0u8; 1 << 20];
            let mut left = self.size;
            while left > 0 {
                let n = left.min(zeros.len() as u64) as usize;
                f.write_all(&zeros[..n])?;
                left -= n as u64;
            }
            f.sync_all()
        })();
        match written {
            Ok(()) => {
                self.held.store(true, Ordering::SeqCst);
                Ok(())
            }
            Err(e) => {
                let _ = f.set_len(0).and_then(|()| f.sync_all());
                Err(e)
            }
        }
    }

    /// Give the reserve's blocks back to the file system (truncated to zero). False when it held
    /// nothing.
    pub(crate) fn release(&self) -> bool {
        if !self.held.swap(false, Ordering::SeqCst) {
            return false;
        }
        let freed = OpenOptions::new()
            .write(true)
            .open(&self.path)
            .and_then(|f| f.set_len(0).and_then(|()| f.sync_all()));
        match freed {
            Ok(()) => {
                self.releases.fetch_add(1, Ordering::SeqCst);
                true
            }
            Err(e) => {
                tracing::error!(path = %self.path.display(), error = %e, "cannot release the state store's reserve");
                false
            }
        }
    }
}

/// An I/O error that says the file system is full.
pub(crate) fn is_enospc(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(28) || e.kind() == std::io::ErrorKind::StorageFull
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_writes_real_blocks_and_release_gives_them_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let r = Reserve::new(dir.path(), 1 << 20);
        r.fill().expect("fill");
        let m = std::fs::metadata(dir.path().join(RESERVE_FILE)).expect("reserve");
        assert!(
            m.blocks() * 512 >= 1 << 20,
            "not sparse: {} blocks",
            m.blocks()
        );
        assert!(r.status().held);
        assert!(r.release());
        let m = std::fs::metadata(dir.path().join(RESERVE_FILE)).expect("reserve");
        assert_eq!(m.len(), 0);
        assert_eq!(r.status().releases, 1);
        assert!(!r.release(), "released twice");
    }
}
