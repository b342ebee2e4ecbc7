//! The data directory's lock (`DATA_DIR/berth.lock`, `flock`): `berth run` holds it shared for as
//! long as its task lives, so several runs share a data directory; `berth gc` (and the agent) hold it
//! exclusively, so gc never removes the directory of a task that is still running. And
//! [`prepare`]: the data directory made private (0700, the state store 0600) before use, a warning
//! for each place that other users could reach.

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

/// Create the data directory (0700) and its `tasks` directory, or narrow an existing data
/// directory and its state store that group or others can reach, with a warning naming the path
/// and the mode it had (berth-fs makes the calls). Call again with `store_only` after the store
/// is opened: a store just created by the database gets 0600 too.
pub fn prepare(data_dir: &Path) -> anyhow::Result<()> {
    let dir = berth_fs::private::private_dir(data_dir)
        .with_context(|| format!("preparing the data directory {}", data_dir.display()))?;
    std::fs::create_dir_all(data_dir.join("tasks"))
        .with_context(|| format!("creating {}", data_dir.join("tasks").display()))?;
    warn_narrowed(dir, "the data directory");
    private_store(data_dir, true)
}

/// Narrow the state store file to 0600; `warn`: say so in the log (an existing store others
/// could read), or not (one the database has just created).
pub fn private_store(data_dir: &Path, warn: bool) -> anyhow::Result<()> {
    let path = data_dir.join(berth_store::db::DB_FILE);
    let narrowed = berth_fs::private::private_file(&path)
        .with_context(|| format!("making the state store {} private", path.display()))?;
    if warn {
        warn_narrowed(narrowed, "the state store");
    }
    Ok(())
}

fn warn_narrowed(narrowed: Option<berth_fs::private::Narrowed>, what: &str) {
    if let Some(n) = narrowed {
        tracing::warn!(
            path = %berth_fs::shown(&n.path),
            old_mode = format!("{:04o}", n.old_mode),
            new_mode = format!("{:04o}", n.new_mode),
            "{what} was open to other users (mode {:04o}); made private (mode {:04o})",
            n.old_mode,
            n.new_mode
        );
    }
}
