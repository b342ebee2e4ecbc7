//! Unmounting everything at or below a directory, deepest first, never following a symlink, and
//! never lazily (`MNT_DETACH` would hide a busy mount instead of refusing, and the data behind it
//! would then be reachable by a delete).
//!
//! Each mount point is unmounted through a file descriptor of its parent directory, opened one
//! component at a time with `O_NOFOLLOW` from `/`: `umount2("/proc/self/fd/N/<name>",
//! UMOUNT_NOFOLLOW)`. A path whose directories were swapped for symlinks after mountinfo was read
//! therefore fails (and so refuses the deletion) instead of unmounting something elsewhere.

use crate::errno::Errno;
use crate::mount::UnmountFlags;
use crate::mountinfo;
use crate::{FsError, shown};
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno as E;
use std::collections::HashMap;
use std::fmt;
use std::path::{Component, Path, PathBuf};

/// A mount that could not be unmounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnmountFailure {
    /// Where it is mounted (canonical, as mountinfo shows it).
    pub mount_point: PathBuf,
    pub fs_type: String,
    /// Why `umount2` failed; None when the mount appeared after the last attempt.
    pub errno: Option<Errno>,
}

impl fmt::Display for UnmountFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.errno {
            Some(e) => write!(f, "{} is still mounted ({e})", shown(&self.mount_point)),
            None => write!(
                f,
                "{} is still mounted (mounted again while unmounting)",
                shown(&self.mount_point)
            ),
        }
    }
}

/// What [`unmount_all_under`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnmountReport {
    /// Mount points unmounted, in order (a path appears twice when two mounts were stacked on it).
    pub unmounted: Vec<PathBuf>,
    /// Mounts still there at the end, with the reason.
    pub failed: Vec<UnmountFailure>,
}

impl UnmountReport {
    pub fn is_complete(&self) -> bool {
        self.failed.is_empty()
    }
}

/// Unmount every mount at or below `dir` (from `/proc/self/mountinfo`), deepest first. Passes are
/// repeated while they make progress, so a mount hidden under another one is unmounted once the
/// upper one is gone. Not lazy, not forced: a busy mount fails with `EBUSY` and is reported.
///
/// `dir`'s parent may be given through symlinks (it is canonicalised); `dir` itself must not be a
/// symlink. Refuses `/`.
pub fn unmount_all_under(dir: &Path) -> Result<UnmountReport, FsError> {
    let canon = canonical_nofollow(dir)?;
    match canon {
        Some(canon) => unmount_canonical(&canon),
        None => Ok(UnmountReport::default()),
    }
}

/// `dir` with its parent canonicalised and its last component kept as is (not followed). None when
/// it does not exist.
fn canonical_nofollow(dir: &Path) -> Result<Option<PathBuf>, FsError> {
    let abs = std::path::absolute(dir).map_err(|source| FsError::Io {
        path: dir.to_path_buf(),
        op: "making absolute",
        source,
    })?;
    let (Some(parent), Some(name)) = (abs.parent(), abs.file_name()) else {
        return Err(FsError::RefusedRoot { path: abs });
    };
    if abs.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(FsError::UnsafePath {
            path: abs.clone(),
            reason: "contains `..`",
        });
    }
    let parent = match std::fs::canonicalize(parent) {
        Ok(p) => p,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(FsError::Io {
                path: parent.to_path_buf(),
                op: "resolving",
                source,
            });
        }
    };
    let canon = parent.join(name);
    match std::fs::symlink_metadata(&canon) {
        Ok(m) if m.file_type().is_symlink() => Err(FsError::UnsafePath {
            path: canon,
            reason: "is a symbolic link",
        }),
        Ok(_) => Ok(Some(canon)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(FsError::Io {
            path: canon,
            op: "inspecting",
            source,
        }),
    }
}

/// [`unmount_all_under`] for a path already known to be canonical.
pub(crate) fn unmount_canonical(canon: &Path) -> Result<UnmountReport, FsError> {
    if canon.parent().is_none() {
        return Err(FsError::RefusedRoot {
            path: canon.to_path_buf(),
        });
    }
    let mut report = UnmountReport::default();
    let mut last_error: HashMap<u64, Errno> = HashMap::new();
    let initial = read_mounts()?;
    let max_passes = mountinfo::at_or_below(&initial, canon).len() + 2;
    for _ in 0..max_passes {
        let mounts = read_mounts()?;
        let below = mountinfo::at_or_below(&mounts, canon);
        if below.is_empty() {
            break;
        }
        let mut progress = false;
        for m in below {
            match unmount_one(&m.mount_point) {
                Ok(()) => {
                    report.unmounted.push(m.mount_point.clone());
                    progress = true;
                }
                Err(e) => {
                    last_error.insert(m.id, e);
                }
            }
        }
        if !progress {
            break;
        }
    }
    let mounts = read_mounts()?;
    report.failed = mountinfo::at_or_below(&mounts, canon)
        .into_iter()
        .map(|m| UnmountFailure {
            mount_point: m.mount_point.clone(),
            fs_type: m.fs_type.clone(),
            errno: last_error.get(&m.id).copied(),
        })
        .collect();
    // Report the shallowest first: the order people read paths in.
    report.failed.reverse();
    Ok(report)
}

fn read_mounts() -> Result<Vec<mountinfo::Mount>, FsError> {
    mountinfo::read_self().map_err(FsError::MountInfo)
}

/// Unmount the mount on top of `mount_point` (canonical) through its parent's descriptor.
fn unmount_one(mount_point: &Path) -> Result<(), Errno> {
    let (Some(parent), Some(name)) = (mount_point.parent(), mount_point.file_name()) else {
        return Err(Errno(22));
    };
    let parent_fd = open_dir_nofollow(parent).map_err(Errno::from)?;
    let via = PathBuf::from(format!(
        "/proc/self/fd/{}",
        rustix::fd::AsRawFd::as_raw_fd(&parent_fd)
    ))
    .join(name);
    crate::mount::unmount(&via, UnmountFlags::NOFOLLOW).map_err(|e| e.errno)
}

/// Open an absolute, canonical directory path one component at a time without following any
/// symlink (`O_PATH | O_NOFOLLOW`, then checked to be a directory).
pub(crate) fn open_dir_nofollow(path: &Path) -> Result<OwnedFd, E> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut fd = rustix::fs::open("/", flags, Mode::empty())?;
    for c in path.components() {
        match c {
            Component::RootDir => {}
            Component::Normal(name) => {
                fd = rustix::fs::openat(fd.as_fd(), name, flags, Mode::empty())?;
                // O_PATH|O_NOFOLLOW can hand back the symlink itself: make sure it is a directory.
                let st = rustix::fs::fstat(fd.as_fd())?;
                if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
                    return Err(E::LOOP);
                }
            }
            _ => return Err(E::INVAL),
        }
    }
    Ok(fd)
}
