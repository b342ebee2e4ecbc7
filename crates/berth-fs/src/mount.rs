//! Mounting and unmounting one path: `mount(2)` (a filesystem, a bind, a recursive bind, a
//! remount) and `umount2(2)`. Together with [`crate::unmount_all_under`] (which unmounts through
//! parent descriptors), this is the only code in berth that makes mount syscalls.
//!
//! Thin and typed: each call makes exactly one system call with the flags the caller gives
//! ([`MountFlags`] and [`UnmountFlags`] are rustix's, re-exported so callers need no rustix), and
//! a failure is a [`MountError`] that carries the operation, the target path and the errno. What
//! the errno means to the caller (for instance "not mounted is success" for an unmount) is the
//! caller's decision. Paths are passed to the kernel as given: these calls follow symlinks
//! (except an unmount with [`UnmountFlags::NOFOLLOW`]) and do no safety checks of their own.

use std::ffi::CStr;
use std::fmt;
use std::path::{Path, PathBuf};

pub use rustix::mount::{MountFlags, MountPropagationFlags, UnmountFlags};

use crate::errno::Errno;
use crate::shown;

/// Which call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MountOp {
    /// `mount(2)` of a filesystem.
    Mount,
    /// `mount(2)` with `MS_BIND`.
    Bind,
    /// `mount(2)` with `MS_BIND | MS_REC`.
    BindRecursive,
    /// `mount(2)` with `MS_REMOUNT`.
    Remount,
    /// `umount2(2)`.
    Unmount,
    /// `mount(2)` changing the propagation type (`MS_SHARED`, `MS_SLAVE`, …).
    Propagation,
}

impl fmt::Display for MountOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MountOp::Mount => "mount on",
            MountOp::Bind => "bind mount on",
            MountOp::BindRecursive => "recursive bind mount on",
            MountOp::Remount => "remount of",
            MountOp::Unmount => "unmount of",
            MountOp::Propagation => "propagation change of",
        })
    }
}

/// A failed mount system call: `"bind mount on /x: Operation not permitted (EPERM)"`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{op} {}: {} ({errno})", shown(target), errno.message())]
pub struct MountError {
    pub op: MountOp,
    /// The mount point the call was about.
    pub target: PathBuf,
    pub errno: Errno,
}

fn check(op: MountOp, target: &Path, result: rustix::io::Result<()>) -> Result<(), MountError> {
    result.map_err(|e| MountError {
        op,
        target: target.to_path_buf(),
        errno: Errno::from_rustix(e),
    })
}

/// Mount a filesystem of type `fs_type` from `source` (a device, or a name such as `tmpfs`) on
/// the existing directory `target`, with `flags` and the filesystem's option string `data`.
pub fn mount(
    source: &str,
    target: &Path,
    fs_type: &str,
    flags: MountFlags,
    data: &CStr,
) -> Result<(), MountError> {
    check(
        MountOp::Mount,
        target,
        rustix::mount::mount(source, target, fs_type, flags, data),
    )
}

/// Bind-mount the directory (or file) `source` on `target` (`MS_BIND`): only the mount at
/// `source`, not the mounts below it.
pub fn bind(source: &Path, target: &Path) -> Result<(), MountError> {
    check(
        MountOp::Bind,
        target,
        rustix::mount::mount_bind(source, target),
    )
}

/// Bind-mount `source` and every mount below it on `target` (`MS_BIND | MS_REC`).
pub fn bind_recursive(source: &Path, target: &Path) -> Result<(), MountError> {
    check(
        MountOp::BindRecursive,
        target,
        rustix::mount::mount_bind_recursive(source, target),
    )
}

/// Change the flags of the mount at `target` (`MS_REMOUNT | flags`, with the option string
/// `data`). Include [`MountFlags::BIND`] to change only the per-mount flags of a bind mount (as
/// `mount -o remount,bind,ro` does).
pub fn remount(target: &Path, flags: MountFlags, data: &CStr) -> Result<(), MountError> {
    check(
        MountOp::Remount,
        target,
        rustix::mount::mount_remount(target, flags, data),
    )
}

/// Remount the filesystem at `target` read-only (`read_only`) or read-write, with no options.
pub fn remount_read_only(target: &Path, read_only: bool) -> Result<(), MountError> {
    let flags = if read_only {
        MountFlags::RDONLY
    } else {
        MountFlags::empty()
    };
    remount(target, flags, c"")
}

/// Make the mount at `target` and every mount below it slaves (`MS_SLAVE | MS_REC`, as `mount
/// --make-rslave`): mounts and unmounts under their sources still propagate in, but none made
/// under `target` propagates back out. A recursive bind of a shared tree joins its peer groups, so
/// without this, unmounting the bind's copy of a submount would also unmount the source's own.
/// A private mount stays private.
pub fn make_rslave(target: &Path) -> Result<(), MountError> {
    set_propagation(
        target,
        MountPropagationFlags::DOWNSTREAM | MountPropagationFlags::REC,
    )
}

/// Change the propagation type of the mount at `target` (`mount(NULL, target, NULL, flags)`, as
/// `mount --make-shared` and its kin do); with [`MountPropagationFlags::REC`] of every mount
/// below it too.
pub fn set_propagation(target: &Path, flags: MountPropagationFlags) -> Result<(), MountError> {
    check(
        MountOp::Propagation,
        target,
        rustix::mount::mount_change(target, flags),
    )
}

/// Unmount the mount on top of `target` (`umount2(target, flags)`). [`UnmountFlags::NOFOLLOW`]
/// refuses a symlink as the last component; [`UnmountFlags::DETACH`] is the lazy unmount. A path
/// with nothing mounted on it fails with `EINVAL`.
pub fn unmount(target: &Path, flags: UnmountFlags) -> Result<(), MountError> {
    check(
        MountOp::Unmount,
        target,
        rustix::mount::unmount(target, flags),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_carry_the_operation_the_path_and_the_errno() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("not-a-mount");
        std::fs::create_dir(&dir).unwrap();
        // Nothing is mounted there: EINVAL as root, EPERM otherwise; never success.
        let e = unmount(&dir, UnmountFlags::NOFOLLOW).unwrap_err();
        assert_eq!(e.op, MountOp::Unmount);
        assert_eq!(e.target, dir);
        assert!(matches!(e.errno.name(), Some("EINVAL" | "EPERM")), "{e}");
        let missing = tmp.path().join("missing");
        let e = bind(tmp.path(), &missing).unwrap_err();
        assert_eq!(e.op, MountOp::Bind);
        assert!(matches!(e.errno.name(), Some("ENOENT" | "EPERM")), "{e}");
    }

    #[test]
    fn messages_name_the_call_the_path_and_the_errno() {
        let e = MountError {
            op: MountOp::Remount,
            target: PathBuf::from("/a\nb"),
            errno: Errno::BUSY,
        };
        assert_eq!(
            e.to_string(),
            "remount of /a\\nb: Device or resource busy (EBUSY)"
        );
    }
}
