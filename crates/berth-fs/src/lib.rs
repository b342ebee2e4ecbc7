//! berth-fs: the only code in berth that makes mount syscalls, replaces or renames crash-safe
//! files, unmounts or deletes directory trees, removes socket files, makes the data directory private, and the mount knowledge it
//! needs.
//!
//! Rule (from the cleanup seed and `shared/reference/safe-cleanup.md`): never delete data behind a
//! mount.
//!
//! - [`mount`]: one mount system call at a time — mount a filesystem, bind and recursive bind,
//!   remount, unmount — with typed errors ([`MountError`]) carrying the operation, the path and
//!   the errno.
//! - [`atomic`]: [`write_atomic`] (temporary file in the same directory, write, fsync, rename,
//!   fsync of the directory) and a durable [`rename`](atomic::rename): how every file that must
//!   survive a crash is written.
//! - [`mountinfo`]: parsing `/proc/self/mountinfo`.
//! - [`detect`]: is this entry a mount point (`statx` mount root / mount id, `openat2`
//!   `RESOLVE_NO_XDEV`, `st_dev`, mountinfo)?
//! - [`unmount_all_under`]: unmount everything at or below a directory, deepest first, reporting
//!   each failure with its errno.
//! - [`remove_tree`]: unmount first; if anything stays mounted, delete nothing; otherwise delete with
//!   descriptor-relative calls that never follow a symlink and stop at any mount met on the way.
//! - [`rmdir::remove_empty_dir`]: delete one empty directory (a mount point after its unmount).
//! - [`socket`]: claim a path for a Unix socket (a stale socket replaced, anything that is not a
//!   socket never removed) and remove one's own socket at exit.
//! - [`private`]: the data directory 0700 and the state store 0600, created so or narrowed.
//!
//! - [`usage`]: bytes available on a file system, bytes a directory tree holds (read only).
//!
//! Limits: Linux only; the calls block (async callers run them on a blocking pool).

use std::path::{Path, PathBuf};

pub mod atomic;
pub mod detect;
pub mod errno;
pub mod mount;
pub mod mountinfo;
pub mod private;
mod remove;
pub mod rmdir;
pub mod socket;
mod unmount;
pub mod usage;

pub use atomic::{AtomicError, write_atomic};
pub use detect::{Detection, Methods, is_mount_point};
pub use errno::Errno;
pub use mount::{MountError, MountOp};
pub use remove::{
    Counts, KeepReason, Kept, NoHooks, Op, Plan, TreeRemoval, WalkHooks, plan_removal, remove_tree,
    remove_tree_with,
};
pub use unmount::{UnmountFailure, UnmountReport, unmount_all_under};

/// Why nothing was done at all.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error(
        "{} is not strictly inside {}; refusing to touch it",
        shown(path),
        shown(root)
    )]
    OutsideRoot { path: PathBuf, root: PathBuf },
    #[error("{} {reason}; refusing to touch it", shown(path))]
    UnsafePath { path: PathBuf, reason: &'static str },
    #[error("refusing to unmount or remove everything under {}", shown(path))]
    RefusedRoot { path: PathBuf },
    #[error("{op} {}: {source}", shown(path))]
    Io {
        path: PathBuf,
        op: &'static str,
        source: std::io::Error,
    },
    #[error("reading /proc/self/mountinfo: {0}")]
    MountInfo(std::io::Error),
}

/// A path for a one-line message: control characters (a newline, a tab) are escaped so that a
/// hostile name cannot forge or split log lines; everything else is shown as is. (Hand-written:
/// `Path::display` keeps control characters, `{:?}` would also escape quotes and backslashes.)
pub fn shown(path: &Path) -> String {
    let text = path.to_string_lossy();
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_escapes_control_characters_only() {
        assert_eq!(shown(Path::new("/a b/c\td\ne\\f")), "/a b/c\\td\\ne\\f");
    }
}
