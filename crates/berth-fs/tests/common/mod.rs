//! Shared by berth-fs's mount tests: running a test in a private mount namespace, a scratch
//! directory that unmounts everything under it before it is deleted, and mount helpers.
//!
//! Why re-executing under `unshare`: `unshare(CLONE_NEWNS)` inside the multi-threaded test harness
//! would move only the calling thread (and needs `CLONE_FS` too), and a panic could leave mounts in
//! the host namespace. Instead each mounting test re-runs its own binary for just itself as
//! `unshare --mount --propagation private -- <test binary> --exact <name>`: every mount it makes
//! lives in a namespace that dies with that child process, whatever happens, and propagation is
//! private so nothing reaches the host. The child refuses to run unless its mount namespace differs
//! from the parent's. Inside, [`Scratch`] still detaches everything under its directory before
//! `TempDir` deletes it, because `remove_dir_all` crosses mounts and would otherwise delete the
//! sentinels on a failed test.

#![allow(dead_code)]

use berth_fs::mountinfo;
use std::path::{Path, PathBuf};
use std::process::Command;

const ENV: &str = "BERTH_TEST_PARENT_MOUNT_NS";

fn mount_ns() -> String {
    std::fs::read_link("/proc/self/ns/mnt")
        .map(|p| p.display().to_string())
        .expect("/proc/self/ns/mnt readable")
}

/// True when the caller is inside the private namespace and should run the test body; otherwise
/// runs this one test in a child inside a fresh private mount namespace, checks it passed, and
/// returns false.
pub fn private_ns(test: &str) -> bool {
    if let Some(parent) = std::env::var_os(ENV) {
        assert_ne!(
            parent.to_string_lossy(),
            mount_ns(),
            "refusing to mount: not in a private mount namespace"
        );
        return true;
    }
    assert!(
        rustix::process::geteuid().is_root(),
        "berth-fs mount tests need root (real mounts in a private mount namespace)"
    );
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--"])
        .arg(&exe)
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(ENV, mount_ns())
        .output()
        .expect("unshare (util-linux) runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{stdout}");
    eprint!("{stderr}");
    assert!(
        out.status.success(),
        "{test} failed in its private mount namespace ({})",
        out.status
    );
    assert!(
        stdout.contains("1 passed"),
        "{test} did not run in the child:\n{stdout}"
    );
    false
}

/// `#[test] fn name() { body }`, with the body run in a private mount namespace.
#[macro_export]
macro_rules! ns_test {
    ($(#[$m:meta])* fn $name:ident() $body:block) => {
        $(#[$m])*
        #[test]
        fn $name() {
            if common::private_ns(stringify!($name)) $body
        }
    };
}

/// A temporary directory (canonical path) that, when dropped, first detaches every mount under it,
/// deepest first, so that deleting it can never reach into a mount source.
pub struct Scratch {
    pub path: PathBuf,
    dir: Option<tempfile::TempDir>,
}

impl Scratch {
    pub fn new() -> Scratch {
        let dir = tempfile::Builder::new()
            .prefix("berth-fs-test.")
            .tempdir()
            .expect("temp dir");
        let path = dir.path().canonicalize().expect("canonical temp dir");
        Scratch {
            path,
            dir: Some(dir),
        }
    }

    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.path.join(rel)
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

/// Lazily detach every mount at or below `dir` (test cleanup only; berth never does this).
pub fn detach_all_under(dir: &Path) {
    for _ in 0..4 {
        let points = mounts_under(dir);
        if points.is_empty() {
            return;
        }
        for p in points {
            let _ = rustix::mount::unmount(&p, rustix::mount::UnmountFlags::DETACH);
        }
    }
}

/// Mount points at or below `dir`, deepest first.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let mounts = mountinfo::read_self().expect("mountinfo");
    mountinfo::at_or_below(&mounts, dir)
        .into_iter()
        .map(|m| m.mount_point.clone())
        .collect()
}

pub fn is_mounted(path: &Path) -> bool {
    mountinfo::read_self()
        .expect("mountinfo")
        .iter()
        .any(|m| m.mount_point == path)
}

pub fn bind(src: &Path, dst: &Path) {
    rustix::mount::mount_bind(src, dst)
        .unwrap_or_else(|e| panic!("bind {} on {}: {e}", src.display(), dst.display()));
}

pub fn tmpfs(dst: &Path) {
    rustix::mount::mount(
        "berth-test",
        dst,
        "tmpfs",
        rustix::mount::MountFlags::empty(),
        c"size=4m",
    )
    .unwrap_or_else(|e| panic!("tmpfs on {}: {e}", dst.display()));
}

pub fn write(path: &Path, text: &str) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("create parent");
    }
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

pub fn mkdir(path: &Path) {
    std::fs::create_dir_all(path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
}

/// A directory outside the tree with a sentinel file in it; returns the sentinel's path.
pub fn sentinel_source(dir: &Path) -> PathBuf {
    let s = dir.join("SENTINEL");
    write(&s, "must survive");
    s
}

pub fn assert_sentinel(path: &Path) {
    assert_eq!(
        std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("sentinel {}: {e}", path.display())),
        "must survive",
        "sentinel {} changed",
        path.display()
    );
}

pub fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}
