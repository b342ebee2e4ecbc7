//! The data directory's lock (`DATA_DIR/berth.lock`, `flock`): `berth run` holds it shared for as
//! long as its task lives, so several runs share a data directory; `berth gc` (and the agent) hold it
//! exclusively, so gc never removes the directory of a task that is still running.

use anyhow::Context as _;
use rustix::fs::{FlockOperation, Mode, OFlags};
use std::fs::File;
use std::path::{Path, PathBuf};

/// The lock file's name inside the data directory.
pub const LOCK_FILE: &str = "berth.lock";

/// A `flock` on `DATA_DIR/berth.lock`, released when dropped (or when the process ends).
pub struct DataDirLock {
    _file: File,
}

/// Why [`DataDirLock::acquire`] failed.
pub enum LockError {
    /// Another process holds it.
    Held(PathBuf),
    Other(anyhow::Error),
}

impl DataDirLock {
    /// Take the data directory's lock exclusively, without waiting.
    pub fn acquire(data_dir: &Path) -> Result<DataDirLock, LockError> {
        Self::take(data_dir, FlockOperation::NonBlockingLockExclusive)
    }

    /// Take the data directory's lock shared (several holders at once), without waiting.
    pub fn acquire_shared(data_dir: &Path) -> Result<DataDirLock, LockError> {
        Self::take(data_dir, FlockOperation::NonBlockingLockShared)
    }

    fn take(data_dir: &Path, op: FlockOperation) -> Result<DataDirLock, LockError> {
        let path = data_dir.join(LOCK_FILE);
        // O_NOFOLLOW: a symlink planted as the lock file is refused, not followed.
        let fd = rustix::fs::open(
            &path,
            OFlags::RDWR | OFlags::CREATE | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::from_raw_mode(0o600),
        )
        .with_context(|| format!("opening the lock file {}", path.display()))
        .map_err(LockError::Other)?;
        match rustix::fs::flock(&fd, op) {
            Ok(()) => Ok(DataDirLock {
                _file: File::from(fd),
            }),
            Err(rustix::io::Errno::WOULDBLOCK) => Err(LockError::Held(path)),
            Err(e) => Err(LockError::Other(
                anyhow::Error::new(e).context(format!("locking {}", path.display())),
            )),
        }
    }
}
