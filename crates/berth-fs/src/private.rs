//! Private places: a directory only its owner can enter (0700) and a file only its owner can read
//! (0600) — the data directory and the state store, which hold task environments and scratch
//! files. [`private_dir`] creates the directory 0700 (and its missing parents, also 0700) or narrows an
//! existing one; [`private_file`] narrows an existing file. Each answers what it changed
//! ([`Narrowed`]: the path and the mode it had), so the caller can warn about a place that was open
//! to other users.
//!
//! Limits: only group and other bits are judged (an owner-only 0500 directory is left as it is);
//! a place owned by another user cannot be narrowed (`EPERM`) and is an error; symlinks are
//! followed (the operator's data directory may be one).

use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use crate::FsError;

/// A place that other users could reach and that is now private.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Narrowed {
    pub path: PathBuf,
    /// The permission bits it had (`0o755`).
    pub old_mode: u32,
    /// The permission bits it has now (`0o700`).
    pub new_mode: u32,
}

fn io<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(std::io::Error) -> FsError + 'a {
    move |source| FsError::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}

/// Narrow `path` to `mode` when group or others have any access; `Ok(None)` when it was private.
fn narrow(path: &Path, mode: u32) -> Result<Option<Narrowed>, FsError> {
    let meta = std::fs::metadata(path).map_err(io(path, "inspecting"))?;
    let old_mode = meta.permissions().mode() & 0o7777;
    if old_mode & 0o077 == 0 {
        return Ok(None);
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(io(path, "restricting the permissions of"))?;
    Ok(Some(Narrowed {
        path: path.to_path_buf(),
        old_mode,
        new_mode: mode,
    }))
}

/// Make sure `dir` exists as a directory only its owner can enter: created 0700 (missing parents
/// too), or an existing one that group or others can reach set to 0700.
pub fn private_dir(dir: &Path) -> Result<Option<Narrowed>, FsError> {
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => {}
        Err(e) => return Err(io(dir, "creating")(e)),
    }
    let meta = std::fs::metadata(dir).map_err(io(dir, "inspecting"))?;
    if !meta.is_dir() {
        return Err(FsError::UnsafePath {
            path: dir.to_path_buf(),
            reason: "is not a directory",
        });
    }
    narrow(dir, 0o700)
}

/// Make sure an existing `file` is readable by its owner alone (0600 when group or others had
/// any access). A file that does not exist is left absent (`Ok(None)`).
pub fn private_file(file: &Path) -> Result<Option<Narrowed>, FsError> {
    match std::fs::metadata(file) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(file, "inspecting")(e)),
        Ok(_) => narrow(file, 0o600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).expect("stat").permissions().mode() & 0o7777
    }

    #[test]
    fn a_new_directory_is_created_private_with_its_parents() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("a/b/data");
        assert_eq!(private_dir(&dir).expect("create"), None);
        assert_eq!(mode(&dir), 0o700);
    }

    #[test]
    fn open_places_are_narrowed_and_reported_private_ones_left_alone() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("data");
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let file = dir.join("berth.redb");
        std::fs::write(&file, b"x").expect("write");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let d = private_dir(&dir).expect("dir").expect("narrowed");
        assert_eq!((d.old_mode, d.new_mode, mode(&dir)), (0o755, 0o700, 0o700));
        let f = private_file(&file).expect("file").expect("narrowed");
        assert_eq!((f.old_mode, mode(&file)), (0o644, 0o600));
        assert_eq!(private_dir(&dir).expect("again"), None);
        assert_eq!(private_file(&file).expect("again"), None);
        assert_eq!(private_file(&dir.join("absent")).expect("absent"), None);
    }

    #[test]
    fn a_file_where_the_directory_should_be_is_refused() {
        let tmp = tempfile::tempdir().expect("tmp");
        let file = tmp.path().join("data");
        std::fs::write(&file, b"x").expect("write");
        assert!(private_dir(&file).is_err());
    }
}
