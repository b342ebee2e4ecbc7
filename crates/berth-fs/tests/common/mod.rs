//! Shared by berth-fs's mount tests: running a test in a private mount namespace
//! ([`berth_testkit::ns`]), a scratch directory that unmounts everything under it before it is
//! deleted, and mount helpers ([`berth_testkit::mount`], the one place test code mounts), plus
//! small file helpers.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

pub use berth_testkit::mount::{Scratch, bind, detach_all_under, is_mounted, mounts_under};
pub use berth_testkit::ns_test;

/// A 4 MiB tmpfs (source `berth-test`) on `dst`.
pub fn tmpfs(dst: &Path) {
    berth_testkit::mount::tmpfs("berth-test", dst, c"size=4m");
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
