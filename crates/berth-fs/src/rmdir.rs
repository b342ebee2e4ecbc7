//! `remove_empty_dir`: delete one empty directory — typically a mount point after a successful
//! unmount — with `rmdir` semantics only: it never recurses, never follows a symlink, and refuses
//! any path that is not strictly inside the given root.
//!
//! This is what kubelet does for volume directories: an `rmdir` cannot delete data behind a mount
//! (the kernel answers `EBUSY` for a mount point and `ENOTEMPTY` for a directory with contents), so
//! it is the safest way to delete a mount point. The walk from `root` to the directory's parent is
//! descriptor-relative with `O_NOFOLLOW`, so a component swapped for a symlink cannot redirect it.

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, CWD, Mode, OFlags};

use crate::errno::Errno;

/// What [`remove_empty_dir`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemovedDir {
    /// The directory was removed.
    Removed,
    /// There was nothing to remove (the directory, or one of its parents, does not exist).
    AlreadyGone,
}

/// Why [`remove_empty_dir`] removed nothing.
#[derive(Debug, thiserror::Error)]
pub enum RmdirError {
    /// `dir` is not strictly inside `root`, or either path is relative or contains `.`/`..`.
    #[error(
        "{} is not strictly inside {}; refusing to remove it",
        crate::shown(dir),
        crate::shown(root)
    )]
    OutsideRoot { root: PathBuf, dir: PathBuf },
    /// A system call failed (`ENOTEMPTY`: the directory has contents; `EBUSY`: it is a mount
    /// point; `ELOOP`/`ENOTDIR`: a component is a symlink or not a directory).
    #[error("cannot remove {}: {op}: {errno}", crate::shown(dir))]
    Sys {
        dir: PathBuf,
        op: &'static str,
        errno: Errno,
    },
}

impl RmdirError {
    /// The errno of a failed system call, if that is what this is.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            RmdirError::Sys { errno, .. } => Some(*errno),
            RmdirError::OutsideRoot { .. } => None,
        }
    }
}

/// Normal components of `dir` below `root`, or `None` if `dir` is not strictly inside `root` or
/// either path is relative or not normalized.
fn relative_components<'a>(root: &Path, dir: &'a Path) -> Option<Vec<&'a OsStr>> {
    if !root.is_absolute() || !dir.is_absolute() {
        return None;
    }
    let normal = |p: &Path| {
        p.components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
    };
    if !normal(root) || !normal(dir) {
        return None;
    }
    let rest = dir.strip_prefix(root).ok()?;
    let parts: Vec<&OsStr> = rest
        .components()
        .map(|c| match c {
            Component::Normal(name) => Some(name),
            _ => None,
        })
        .collect::<Option<_>>()?;
    if parts.is_empty() { None } else { Some(parts) }
}

/// Remove the empty directory `dir`, which must be strictly inside `root` (both absolute,
/// without `.` or `..`). Never recursive: a directory with contents fails with `ENOTEMPTY`, a
/// mount point with `EBUSY`, and nothing is deleted. No component below `root` is followed if it
/// is a symlink (`root` itself may be one). A directory already gone is [`RemovedDir::AlreadyGone`].
pub fn remove_empty_dir(root: &Path, dir: &Path) -> Result<RemovedDir, RmdirError> {
    let Some(parts) = relative_components(root, dir) else {
        return Err(RmdirError::OutsideRoot {
            root: root.to_path_buf(),
            dir: dir.to_path_buf(),
        });
    };
    let sys = |op: &'static str, e: rustix::io::Errno| RmdirError::Sys {
        dir: dir.to_path_buf(),
        op,
        errno: Errno::from_rustix(e),
    };
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut fd: OwnedFd = match rustix::fs::openat(CWD, root, dir_flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(RemovedDir::AlreadyGone),
        Err(e) => return Err(sys("open root", e)),
    };
    let (last, parents) = match parts.split_last() {
        Some(split) => split,
        // relative_components never returns an empty list.
        None => return Ok(RemovedDir::AlreadyGone),
    };
    for name in parents {
        fd = match rustix::fs::openat(&fd, *name, dir_flags | OFlags::NOFOLLOW, Mode::empty()) {
            Ok(next) => next,
            Err(rustix::io::Errno::NOENT) => return Ok(RemovedDir::AlreadyGone),
            Err(e) => return Err(sys("open parent", e)),
        };
    }
    // unlinkat(AT_REMOVEDIR) does not follow a final symlink: it fails with ENOTDIR.
    match rustix::fs::unlinkat(&fd, *last, AtFlags::REMOVEDIR) {
        Ok(()) => Ok(RemovedDir::Removed),
        Err(rustix::io::Errno::NOENT) => Ok(RemovedDir::AlreadyGone),
        Err(e) => Err(sys("rmdir", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_paths_outside_or_equal_to_root() {
        let root = Path::new("/var/lib/x");
        for dir in [
            "/var/lib/x",
            "/var/lib",
            "/var/lib/x/../y",
            "/var/lib/xy",
            "rel/x",
        ] {
            assert!(
                matches!(
                    remove_empty_dir(root, Path::new(dir)),
                    Err(RmdirError::OutsideRoot { .. })
                ),
                "{dir}"
            );
        }
    }

    #[test]
    fn removes_only_empty_directories_and_never_follows_symlinks() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir_all(root.join("a/empty")).unwrap();
        std::fs::create_dir_all(root.join("full")).unwrap();
        std::fs::write(root.join("full/keep"), b"x").unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(outside.path().join("victim")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("link")).unwrap();

        assert_eq!(
            remove_empty_dir(root, &root.join("a/empty")).unwrap(),
            RemovedDir::Removed
        );
        assert!(!root.join("a/empty").exists());
        assert_eq!(
            remove_empty_dir(root, &root.join("a/empty")).unwrap(),
            RemovedDir::AlreadyGone
        );
        assert_eq!(
            remove_empty_dir(root, &root.join("nope/x")).unwrap(),
            RemovedDir::AlreadyGone
        );

        let err = remove_empty_dir(root, &root.join("full")).unwrap_err();
        assert_eq!(err.errno().and_then(Errno::name), Some("ENOTEMPTY"));
        assert!(root.join("full/keep").exists());

        // Through a symlinked parent: refused (ELOOP or ENOTDIR), the target survives.
        assert!(remove_empty_dir(root, &root.join("link/victim")).is_err());
        assert!(outside.path().join("victim").is_dir());
        // The symlink itself is not a directory: rmdir refuses it.
        assert!(remove_empty_dir(root, &root.join("link")).is_err());
        assert!(root.join("link").exists());
    }
}
