//! Unix socket files: the one place berth removes a socket's file, for the two servers that bind
//! one (the agent's control API and the volume plugin).
//!
//! [`claim`] makes a path ready to bind: the parent directory is created; nothing there is fine; a
//! socket nobody answers on (left by a process that died) is removed; a socket a process answers
//! on is left alone ([`SocketError::InUse`]); anything that is not a socket — a regular file, a
//! directory, a symlink — is never removed ([`SocketError::NotASocket`]). [`release`] removes the
//! socket at exit only if it is still the one this process bound (same device and inode), so a
//! second server that replaced it keeps its socket.
//!
//! Limits: the liveness probe is a blocking `connect` (it answers at once for a stale or live
//! socket; a live server whose accept backlog is full makes it wait); between the probe and the
//! removal another process could bind the path (the removal re-checks that it is still a socket).

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::shown;

/// Why a path cannot be used for a socket.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error(
        "{}: another process is serving on this socket (stop it first, or choose another path)",
        shown(path)
    )]
    InUse { path: PathBuf },
    #[error(
        "{} exists and is {what}, not a socket; refusing to replace it (remove it yourself, or choose another path)",
        shown(path)
    )]
    NotASocket { path: PathBuf, what: &'static str },
    #[error("{op} {}: {source}", shown(path))]
    Io {
        path: PathBuf,
        op: &'static str,
        source: io::Error,
    },
}

/// What [`claim`] found at the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claimed {
    /// Nothing was there.
    Free,
    /// A stale socket (nobody answered) was removed.
    ReplacedStale,
}

/// The identity of a socket file this process bound (for [`release`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketId {
    dev: u64,
    ino: u64,
}

fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_file() {
        "a regular file"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else {
        "something else"
    }
}

/// Make `path` ready for `bind`: see the module header.
pub fn claim(path: &Path) -> Result<Claimed, SocketError> {
    let io_err = |op, source| SocketError::Io {
        path: path.to_path_buf(),
        op,
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| SocketError::Io {
            path: dir.to_path_buf(),
            op: "creating the directory",
            source: e,
        })?;
    }
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Claimed::Free),
        Err(e) => return Err(io_err("reading", e)),
    };
    if !meta.file_type().is_socket() {
        return Err(SocketError::NotASocket {
            path: path.to_path_buf(),
            what: kind_of(&meta),
        });
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        return Err(SocketError::InUse {
            path: path.to_path_buf(),
        });
    }
    // Re-check right before the unlink: only ever remove a socket.
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {}
        Ok(m) => {
            return Err(SocketError::NotASocket {
                path: path.to_path_buf(),
                what: kind_of(&m),
            });
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Claimed::Free),
        Err(e) => return Err(io_err("reading", e)),
    }
    std::fs::remove_file(path).map_err(|e| io_err("removing the stale socket", e))?;
    Ok(Claimed::ReplacedStale)
}

/// The identity of the socket now at `path` (call right after `bind`).
pub fn identity(path: &Path) -> Result<SocketId, SocketError> {
    let meta = std::fs::symlink_metadata(path).map_err(|source| SocketError::Io {
        path: path.to_path_buf(),
        op: "reading",
        source,
    })?;
    Ok(SocketId {
        dev: meta.dev(),
        ino: meta.ino(),
    })
}

/// Remove the socket at `path` if it is still the one identified by `id`; `Ok(false)` when it is
/// gone or was replaced (then it is left alone).
pub fn release(path: &Path, id: SocketId) -> Result<bool, SocketError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() && m.dev() == id.dev && m.ino() == id.ino => {
            std::fs::remove_file(path).map_err(|source| SocketError::Io {
                path: path.to_path_buf(),
                op: "removing the socket",
                source,
            })?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    #[test]
    fn a_free_path_is_claimed_and_its_directory_made() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("a/b/s.sock");
        assert_eq!(claim(&path).expect("claim"), Claimed::Free);
        assert!(path.parent().is_some_and(Path::is_dir));
    }

    #[test]
    fn a_regular_file_is_never_removed() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("data");
        std::fs::write(&path, b"precious").expect("write");
        let err = claim(&path).expect_err("not a socket");
        assert_eq!(
            err.to_string(),
            format!(
                "{} exists and is a regular file, not a socket; refusing to replace it (remove it yourself, or choose another path)",
                path.display()
            )
        );
        assert_eq!(std::fs::read(&path).expect("kept"), b"precious");
        std::fs::create_dir(dir.path().join("d")).expect("mkdir");
        assert!(matches!(
            claim(&dir.path().join("d")),
            Err(SocketError::NotASocket {
                what: "a directory",
                ..
            })
        ));
    }

    #[test]
    fn a_live_socket_is_in_use_and_a_stale_one_is_replaced() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("s.sock");
        let live = UnixListener::bind(&path).expect("bind");
        assert!(matches!(claim(&path), Err(SocketError::InUse { .. })));
        drop(live); // the file stays, nobody answers
        assert!(path.exists());
        assert_eq!(claim(&path).expect("claim"), Claimed::ReplacedStale);
        assert!(!path.exists());
    }

    #[test]
    fn release_removes_only_the_socket_this_process_bound() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("s.sock");
        let first = UnixListener::bind(&path).expect("bind");
        let id = identity(&path).expect("id");
        drop(first);
        // Keep the first socket's inode allocated, so the second cannot reuse its number.
        std::fs::hard_link(&path, dir.path().join("keep.sock")).expect("link");
        std::fs::remove_file(&path).expect("rm");
        let _second = UnixListener::bind(&path).expect("bind again");
        assert!(!release(&path, id).expect("release"), "replaced: kept");
        assert!(path.exists());
        let id2 = identity(&path).expect("id");
        assert!(release(&path, id2).expect("release"));
        assert!(!path.exists());
    }
}
