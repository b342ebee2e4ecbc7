//! Replacing a file so that a crash leaves either its old or its new content, never a mix: the one
//! implementation berth uses for every file that must survive a crash (berth-store's
//! `pulled-images.json`, the volume plugin's state file), and the rename of such a file.
//!
//! [`write_atomic`]: create a temporary file in the target's directory (a unique name from the
//! `tempfile` crate, `.NAME.XXXXXX.tmp`, mode `0666` minus the umask as `File::create` gives),
//! write the bytes, fsync it, rename it over the target, fsync the directory. A failure before the
//! rename deletes the temporary file and leaves the target untouched; a crash before the rename
//! can leave a temporary file behind (it is never read). The directory must exist; the target's
//! last component is replaced, not followed, if it is a symlink. Concurrent writers do not collide
//! (each has its own temporary file); the last rename wins.

use std::ffi::OsString;
use std::fmt;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::shown;

/// The step of [`write_atomic`] that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    CreateTemp,
    WriteTemp,
    SyncTemp,
    Rename,
    SyncDir,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Step::CreateTemp => "creating a temporary file for",
            Step::WriteTemp => "writing a temporary file for",
            Step::SyncTemp => "fsync of a temporary file for",
            Step::Rename => "renaming a temporary file over",
            Step::SyncDir => "fsync of the directory of",
        })
    }
}

/// A failed [`write_atomic`] or [`rename`]: which step, for which target, and the I/O error.
#[derive(Debug, thiserror::Error)]
#[error("{step} {}: {source}", shown(path))]
pub struct AtomicError {
    pub step: Step,
    /// The file being replaced (for [`Step::SyncDir`] too: its directory is `path.parent()`).
    pub path: PathBuf,
    pub source: std::io::Error,
}

fn directory_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Replace `path` with `bytes` atomically and durably; see the module documentation.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), AtomicError> {
    let fail = |step: Step| {
        move |source: std::io::Error| AtomicError {
            step,
            path: path.to_path_buf(),
            source,
        }
    };
    let dir = directory_of(path);
    let mut prefix = OsString::from(".");
    prefix.push(path.file_name().unwrap_or_default());
    prefix.push(".");
    let mut tmp = tempfile::Builder::new()
        .prefix(&prefix)
        .suffix(".tmp")
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(dir)
        .map_err(fail(Step::CreateTemp))?;
    tmp.write_all(bytes).map_err(fail(Step::WriteTemp))?;
    tmp.as_file().sync_all().map_err(fail(Step::SyncTemp))?;
    // On failure the PersistError's temporary file is dropped, which deletes it.
    tmp.persist(path).map_err(|e| fail(Step::Rename)(e.error))?;
    sync_dir(dir).map_err(fail(Step::SyncDir))
}

/// Rename `from` to `to` (same filesystem; `to` is replaced if it exists) and fsync `to`'s
/// directory, so that the rename survives a crash. The error's `path` is `to`.
pub fn rename(from: &Path, to: &Path) -> Result<(), AtomicError> {
    let fail = |step: Step| {
        move |source: std::io::Error| AtomicError {
            step,
            path: to.to_path_buf(),
            source,
        }
    };
    std::fs::rename(from, to).map_err(fail(Step::Rename))?;
    sync_dir(directory_of(to)).map_err(fail(Step::SyncDir))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn replaces_the_content_and_leaves_no_temporary_file() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("state.json");
        write_atomic(&p, b"one").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"one");
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(names(tmp.path()), ["state.json"]);
        // Like File::create: 0666 minus the umask, not tempfile's 0600.
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        let umask = rustix::process::umask(rustix::fs::Mode::empty());
        rustix::process::umask(umask);
        assert_eq!(mode, 0o666 & !umask.bits());
    }

    #[test]
    fn a_failed_rename_keeps_the_target_and_deletes_the_temporary_file() {
        let tmp = tempfile::tempdir().unwrap();
        // A non-empty directory cannot be replaced by a file.
        let p = tmp.path().join("dir");
        std::fs::create_dir(&p).unwrap();
        std::fs::write(p.join("keep"), b"x").unwrap();
        let e = write_atomic(&p, b"new").unwrap_err();
        assert_eq!(e.step, Step::Rename);
        assert_eq!(e.path, p);
        assert!(
            e.to_string().starts_with("renaming a temporary file over "),
            "{e}"
        );
        assert_eq!(names(tmp.path()), ["dir"]);
        assert!(p.join("keep").exists());
    }

    #[test]
    fn a_missing_directory_fails_at_creation() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("no/such/file");
        let e = write_atomic(&p, b"x").unwrap_err();
        assert_eq!(e.step, Step::CreateTemp);
        assert_eq!(e.source.kind(), std::io::ErrorKind::NotFound);
    }

    #[test]
    fn rename_moves_and_replaces() {
        let tmp = tempfile::tempdir().unwrap();
        let a = tmp.path().join("a");
        let b = tmp.path().join("b");
        std::fs::write(&a, b"1").unwrap();
        std::fs::write(&b, b"2").unwrap();
        rename(&a, &b).unwrap();
        assert_eq!(names(tmp.path()), ["b"]);
        assert_eq!(std::fs::read(&b).unwrap(), b"1");
        assert_eq!(rename(&a, &b).unwrap_err().step, Step::Rename);
    }
}
