//! How much a file system and a directory tree hold: read-only calls (`statvfs`, `lstat` while
//! walking a tree without following symlinks or crossing into another file system).
//!
//! Hand-written: a few lines over rustix's `statvfs` and `std::fs`.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Bytes available to unprivileged users on the file system holding `path`.
pub fn available_bytes(path: &Path) -> std::io::Result<u64> {
    let st = rustix::fs::statvfs(path)?;
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Bytes of blocks the files under `dir` hold on `dir`'s file system (symlinks not followed,
/// mounts met on the way not entered). An entry that vanishes while walked counts as 0.
pub fn tree_bytes(dir: &Path) -> u64 {
    let Ok(root) = std::fs::symlink_metadata(dir) else {
        return 0;
    };
    let dev = root.dev();
    let mut total = root.blocks() * 512;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(m) = std::fs::symlink_metadata(e.path()) else {
                continue;
            };
            if m.dev() != dev {
                continue;
            }
            total += m.blocks() * 512;
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_counts_its_files_blocks() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("a")).expect("a");
        std::fs::write(dir.path().join("a/f"), vec![1u8; 1 << 20]).expect("f");
        assert!(tree_bytes(dir.path()) >= 1 << 20);
        assert_eq!(tree_bytes(&dir.path().join("nothing")), 0);
        assert!(available_bytes(dir.path()).expect("statvfs") > 0);
    }
}
