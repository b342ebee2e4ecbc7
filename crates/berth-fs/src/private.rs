//! Private places: a directory only its owner can enter (0700) and a file only its owner can read
//! (0600) — the data directory and the state store, which hold task environments and scratch
//! files. [`private_dir`] creates the directory 0700 (and its missing parents, also 0700) or narrows an
//! existing one; [`private_file`] narrows an existing file. Each answers what it changed
//! ([`Narrowed`]: the path and the mode it had), so the caller can warn about a place that was open
//! to other users. [`PrivateLog`] appends lines to a 0600 file and rotates it at a size (the
//! credentials endpoint's audit log).
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

/// An append-only log file only its owner can read: created 0600 (an existing one is narrowed),
/// appended to line by line, and when a line would take it past `max_bytes`, renamed to
/// `PATH.1` (replacing the previous one) and started afresh. Hand-written: the rotation is one
/// rename, no crate needed.
#[derive(Debug)]
pub struct PrivateLog {
    path: PathBuf,
    max_bytes: u64,
    file: Option<(std::fs::File, u64)>,
}

impl PrivateLog {
    /// A log at `path` (opened at the first line).
    pub fn new(path: PathBuf, max_bytes: u64) -> PrivateLog {
        PrivateLog {
            path,
            max_bytes,
            file: None,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The rotated file: `PATH.1`.
    pub fn rotated_path(&self) -> PathBuf {
        let mut p = self.path.clone().into_os_string();
        p.push(".1");
        PathBuf::from(p)
    }

    fn open(&self) -> Result<(std::fs::File, u64), FsError> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&self.path)
            .map_err(io(&self.path, "opening"))?;
        narrow(&self.path, 0o600)?;
        let size = file.metadata().map_err(io(&self.path, "inspecting"))?.len();
        Ok((file, size))
    }

    /// Append `line` and a newline (one `write`, so lines of concurrent writers do not mix).
    pub fn append(&mut self, line: &str) -> Result<(), FsError> {
        use std::io::Write as _;
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        let len = bytes.len() as u64;
        let (_, size) = match &mut self.file {
            Some(f) => f,
            None => self.file.insert(self.open()?),
        };
        if *size > 0 && *size + len > self.max_bytes {
            self.file = None;
            let rotated = self.rotated_path();
            std::fs::rename(&self.path, &rotated).map_err(io(&self.path, "rotating"))?;
            self.file = Some(self.open()?);
        }
        let Some((file, size)) = &mut self.file else {
            return Ok(());
        };
        match file.write_all(&bytes) {
            Ok(()) => {
                *size += len;
                Ok(())
            }
            Err(e) => {
                // Reopened at the next line (the file may have been removed or replaced).
                self.file = None;
                Err(io(&self.path, "appending to")(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).expect("stat").permissions().mode() & 0o7777
    }

    #[test]
    fn the_log_is_private_and_rotates_past_its_size() {
        let tmp = tempfile::tempdir().expect("tmp");
        let path = tmp.path().join("audit.log");
        std::fs::write(&path, b"old\n").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let mut log = PrivateLog::new(path.clone(), 20);
        log.append("0123456789").expect("append");
        assert_eq!(mode(&path), 0o600);
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            "old\n0123456789\n"
        );
        log.append("abcdefghij").expect("append");
        assert_eq!(
            std::fs::read_to_string(log.rotated_path()).expect("rotated"),
            "old\n0123456789\n"
        );
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            "abcdefghij\n"
        );
        assert_eq!(mode(&path), 0o600);
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
