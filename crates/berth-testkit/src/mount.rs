//! Every mount and unmount that berth's tests make themselves: bind mounts, tmpfs, read-only
//! remounts, and the detaching of whatever a test left mounted — in this one module, so that test
//! code has a single place that mounts, and it does so through berth-fs's mount API (the only code
//! in the workspace that makes mount syscalls).
//! [`LoopFs`]: a small ext4 file system on a loop device (`mkfs.ext4`, `losetup`), which a test
//! can freeze (`fsfreeze`) to make its disk stop answering.
//! Also reading which mounts exist under a directory (through `berth_fs::mountinfo`), and
//! [`Scratch`], a temporary directory that is never deleted through a mount.
//!
//! Invariants: [`Scratch`] detaches every mount under its directory, deepest first, before the
//! directory is deleted, and leaks the directory rather than delete it while anything is still
//! mounted there (`remove_dir_all` crosses mounts, and would delete a bind source's files).
//!
//! Limits: test code only. Helpers panic with the path and the errno when a mount fails; the
//! cleanup helpers ignore errors (they run in `Drop`). Run mounting tests in a private mount
//! namespace ([`crate::ns`]) so nothing can leak to the host.

use std::ffi::CStr;
use std::path::{Path, PathBuf};

use berth_fs::mount::{self as fsmount, MountFlags, UnmountFlags};
use berth_fs::mountinfo;

/// Mount points at or below `dir` (canonicalised when it exists), deepest first.
///
/// # Panics
///
/// When `/proc/self/mountinfo` cannot be read.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mounts = mountinfo::read_self().expect("mountinfo");
    mountinfo::at_or_below(&mounts, &dir)
        .into_iter()
        .map(|m| m.mount_point.clone())
        .collect()
}

/// Whether something is mounted exactly at `path` (canonicalised when it exists).
///
/// # Panics
///
/// When `/proc/self/mountinfo` cannot be read.
pub fn is_mounted(path: &Path) -> bool {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    mountinfo::read_self()
        .expect("mountinfo")
        .iter()
        .any(|m| m.mount_point == path)
}

/// Lazily detaches every mount at or below `dir`, deepest first, in up to ten rounds (test
/// cleanup only; berth never does this). Errors are ignored.
pub fn detach_all_under(dir: &Path) {
    for _ in 0..10 {
        let points = mounts_under(dir);
        if points.is_empty() {
            return;
        }
        for p in points {
            let _ = fsmount::unmount(&p, UnmountFlags::DETACH);
        }
    }
}

/// Bind-mounts `src` on `dst`.
///
/// # Panics
///
/// When the mount fails.
pub fn bind(src: &Path, dst: &Path) {
    fsmount::bind(src, dst)
        .unwrap_or_else(|e| panic!("bind {} on {}: {e}", src.display(), dst.display()));
}

/// Mounts a tmpfs named `source` on `dst` with mount options `options` (e.g. `c"size=1m"`).
///
/// # Panics
///
/// When the mount fails.
pub fn tmpfs(source: &str, dst: &Path, options: &CStr) {
    fsmount::mount(source, dst, "tmpfs", MountFlags::empty(), options)
        .unwrap_or_else(|e| panic!("tmpfs on {}: {e}", dst.display()));
}

/// Makes the mount at `dir` and every mount below it shared (`mount --make-rshared`), as a host's
/// `/` under systemd is.
///
/// # Panics
///
/// When the change fails.
pub fn make_rshared(dir: &Path) {
    use berth_fs::mount::MountPropagationFlags as P;
    fsmount::set_propagation(dir, P::SHARED | P::REC)
        .unwrap_or_else(|e| panic!("make-rshared {}: {e}", dir.display()));
}

/// Remounts the mount at `dir` read-only (`true`) or read-write (`false`).
///
/// # Panics
///
/// When the remount fails.
pub fn remount(dir: &Path, read_only: bool) {
    fsmount::remount_read_only(dir, read_only)
        .unwrap_or_else(|e| panic!("remount {}: {e}", dir.display()));
}

/// Remounts the mount at `dir` read-write, ignoring errors (for `Drop`).
pub fn remount_read_write_quietly(dir: &Path) {
    let _ = fsmount::remount_read_only(dir, false);
}

/// Unmounts the mount at `path` (not lazily).
///
/// # Panics
///
/// When the unmount fails.
pub fn unmount(path: &Path) {
    fsmount::unmount(path, UnmountFlags::empty())
        .unwrap_or_else(|e| panic!("unmount {}: {e}", path.display()));
}

/// A small real ext4 file system on a loop device, mounted at a directory: for tests of a data
/// directory whose disk fills up or stops answering ([`LoopFs::freeze`]).
///
/// The loop device is detached (`losetup -d`) right after the mount, which makes the kernel free
/// it as soon as the file system is unmounted, so it cannot outlive the test's mount namespace
/// even when no `Drop` runs. `Drop` thaws and unmounts (lazily), ignoring errors.
pub struct LoopFs {
    pub mount_point: PathBuf,
    pub device: String,
}

fn run(cmd: &str, args: &[&std::ffi::OsStr]) -> String {
    let out = std::process::Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd} (util-linux / e2fsprogs) cannot run: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

impl LoopFs {
    /// An ext4 file system of `mib` MiB, its image file `image` (outside `dst`), mounted on `dst`.
    ///
    /// # Panics
    ///
    /// When the image, the file system, the loop device or the mount cannot be made.
    pub fn ext4(image: &Path, mib: u64, dst: &Path) -> LoopFs {
        let f = std::fs::File::create(image).expect("loop image");
        f.set_len(mib * 1024 * 1024).expect("loop image size");
        drop(f);
        run(
            "mkfs.ext4",
            &["-q".as_ref(), "-F".as_ref(), image.as_os_str()],
        );
        let device = run(
            "losetup",
            &["--find".as_ref(), "--show".as_ref(), image.as_os_str()],
        );
        let mounted = fsmount::mount(&device, dst, "ext4", MountFlags::empty(), c"");
        // Detached now: freed by the kernel once unmounted (autoclear), whatever happens.
        let _ = std::process::Command::new("losetup")
            .args(["-d", &device])
            .output();
        mounted.unwrap_or_else(|e| panic!("mount {device} (ext4) on {}: {e}", dst.display()));
        LoopFs {
            mount_point: dst.to_path_buf(),
            device,
        }
    }

    /// Freeze the file system (`fsfreeze -f`): every write to it blocks until [`Frozen`] is
    /// dropped (a hung disk, as the kernel shows one to a program).
    ///
    /// # Panics
    ///
    /// When `fsfreeze` fails.
    pub fn freeze(&self) -> Frozen {
        run("fsfreeze", &["-f".as_ref(), self.mount_point.as_os_str()]);
        Frozen {
            mount_point: self.mount_point.clone(),
        }
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("fsfreeze")
            .arg("-u")
            .arg(&self.mount_point)
            .output();
        // The device was detached after the mount: unmounting frees it. (Never `losetup -d` it
        // here: once freed, its number may already be another test's.)
        let _ = fsmount::unmount(&self.mount_point, UnmountFlags::DETACH);
    }
}

/// A frozen file system ([`LoopFs::freeze`]); thawed (`fsfreeze -u`) when dropped. Declare it
/// after everything that may write to the file system, so that unwinding thaws it first.
pub struct Frozen {
    mount_point: PathBuf,
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = std::process::Command::new("fsfreeze")
            .arg("-u")
            .arg(&self.mount_point)
            .output();
    }
}

/// A temporary directory (canonical path) that, when dropped, first detaches every mount under it,
/// so that deleting it can never reach into a mount source. While something is still mounted
/// there after that, the directory is kept (leaked) rather than deleted.
pub struct Scratch {
    pub path: PathBuf,
    dir: Option<tempfile::TempDir>,
}

impl Scratch {
    /// A new directory in the system's temporary directory (name `berth-test.…`).
    ///
    /// # Panics
    ///
    /// When the directory cannot be created.
    pub fn new() -> Scratch {
        Scratch::with_prefix("berth-test.")
    }

    /// A new directory in the system's temporary directory, its name starting with `prefix`.
    ///
    /// # Panics
    ///
    /// When the directory cannot be created.
    pub fn with_prefix(prefix: &str) -> Scratch {
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir()
            .expect("temp dir");
        let path = dir.path().canonicalize().expect("canonical temp dir");
        Scratch {
            path,
            dir: Some(dir),
        }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.path.join(rel)
    }
}

impl Default for Scratch {
    fn default() -> Scratch {
        Scratch::new()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        detach_all_under(&self.path);
        if let Some(dir) = self.dir.take()
            && !mounts_under(&self.path).is_empty()
        {
            // Still mounted: leak the directory rather than delete through a mount.
            let _ = dir.keep();
        }
    }
}
