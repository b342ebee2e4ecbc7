//! berth-fs: the only code in berth that deletes directory trees, and the mount knowledge it needs.
//!
//! Rule (from the cleanup seed): never delete data behind a mount. This first version is deliberately
//! conservative: [`remove_tree`] refuses to touch a tree when `/proc/self/mountinfo` lists any mount at
//! or below it, and otherwise removes it with `std::fs::remove_dir_all` (which never follows
//! symlinks). It does not unmount anything. The unmount-first, fd-relative walk that also stops at
//! mounts appearing during the walk is the safe-cleanup issue's work and replaces the removal here.

use std::path::{Path, PathBuf};

pub mod mountinfo;

#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("{path} is outside {root}; refusing to touch it")]
    OutsideRoot { path: PathBuf, root: PathBuf },
    #[error("reading /proc/self/mountinfo: {0}")]
    MountInfo(std::io::Error),
}

/// What [`remove_tree`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// The tree is gone (or was never there).
    Removed,
    /// Nothing was deleted; the reason names the mount(s) that stopped it, or the I/O error.
    Kept { reason: String },
}

/// Remove `path` (which must be strictly inside `root`) unless anything is mounted at or below it.
pub fn remove_tree(root: &Path, path: &Path) -> Result<Removal, FsError> {
    if !path.starts_with(root) || path == root || path.components().any(|c| c.as_os_str() == "..") {
        return Err(FsError::OutsideRoot {
            path: path.to_path_buf(),
            root: root.to_path_buf(),
        });
    }
    if !path.exists() {
        return Ok(Removal::Removed);
    }
    let canonical = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let mounts = mountinfo::read_self().map_err(FsError::MountInfo)?;
    let below: Vec<String> = mounts
        .iter()
        .filter(|m| m.mount_point.starts_with(&canonical) || m.mount_point.starts_with(path))
        .map(|m| m.mount_point.display().to_string())
        .collect();
    if !below.is_empty() {
        return Ok(Removal::Kept {
            reason: format!("still mounted: {}", below.join(", ")),
        });
    }
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(Removal::Removed),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Removal::Removed),
        Err(e) => Ok(Removal::Kept {
            reason: format!("{}: {e}", path.display()),
        }),
    }
}
