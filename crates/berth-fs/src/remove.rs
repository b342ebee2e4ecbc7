//! Removing a directory tree without ever deleting data behind a mount.
//!
//! [`remove_tree`] (1) checks that the tree is strictly inside the caller's root and reaches it one
//! component at a time with `O_NOFOLLOW`; (2) unmounts every mount at or below it
//! ([`crate::unmount_all_under`]) and, if any unmount fails, deletes nothing; (3) walks the tree with
//! descriptor-relative calls only (`openat2`/`openat` with `O_NOFOLLOW | O_DIRECTORY`, `getdents`,
//! `unlinkat`), never following a symlink (a symlink is unlinked itself), and checks every entry and
//! every opened directory for a mount boundary ([`crate::detect`]). A mount met during the walk (one
//! that appeared after step 2) is kept and reported, nothing inside it is touched, and its ancestors
//! are kept too.
//!
//! Races: a directory swapped for a symlink between listing and opening makes the `O_NOFOLLOW` open
//! fail (`ELOOP`/`ENOTDIR`); the entry is probed again and the link itself unlinked. A directory
//! mounted on after it was opened: its descriptor still refers to the directory underneath, so only
//! that directory's own entries are removed, and the final `rmdir` fails with `EBUSY` (kept).
//!
//! The walk is iterative (an explicit stack of open directories), so a deep tree cannot overflow the
//! stack; it holds one descriptor per level.

use crate::detect::{self, Detection, Home, Methods, Opened};
use crate::errno::Errno;
use crate::unmount::unmount_canonical;
use crate::{FsError, mountinfo, shown};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use rustix::io::Errno as E;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// Calls at the points between the steps of a removal, so that tests can change the tree at the
/// worst moment (swap a directory for a symlink, mount something). Every method does nothing by
/// default; berth itself uses [`NoHooks`].
pub trait WalkHooks {
    /// After the unmount step, before the walk.
    fn after_unmount(&self, _top: &Path) {}
    /// After an entry was found to be a directory, before it is opened.
    fn before_open_dir(&self, _path: &Path) {}
    /// After a directory was opened and checked, before its entries are read.
    fn after_open_dir(&self, _path: &Path) {}
    /// Before a non-directory is unlinked.
    fn before_unlink(&self, _path: &Path) {}
    /// Before an emptied directory is removed.
    fn before_rmdir(&self, _path: &Path) {}
}

/// The hooks that do nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHooks;

impl WalkHooks for NoHooks {}

/// How many entries a removal deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Regular files, and fifos, sockets, device nodes.
    pub files: u64,
    pub dirs: u64,
    /// Symlinks (the links themselves; their targets are never touched).
    pub symlinks: u64,
}

impl Counts {
    pub fn total(&self) -> u64 {
        self.files + self.dirs + self.symlinks
    }
}

/// The system call a [`KeepReason::Failed`] refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Stat,
    Open,
    ReadDir,
    Unlink,
    Rmdir,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Stat => "statx",
            Op::Open => "open",
            Op::ReadDir => "readdir",
            Op::Unlink => "unlink",
            Op::Rmdir => "rmdir",
        })
    }
}

/// Why an entry was kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepReason {
    /// The unmount step could not unmount it, so nothing at all in the tree was deleted. None:
    /// mounted again while unmounting.
    StillMounted { errno: Option<Errno> },
    /// A mount boundary met during the walk; nothing inside was touched.
    MountPoint(Detection),
    /// A directory that holds something kept (it cannot be removed while not empty).
    ContainsKept,
    /// Entries appeared in the directory while it was being removed.
    NotEmpty,
    /// It kept changing type while being removed (directory ↔ symlink); left alone.
    Replaced,
    /// A system call failed.
    Failed { op: Op, errno: Errno },
}

/// One kept entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    pub path: PathBuf,
    pub reason: KeepReason,
}

impl Kept {
    /// Whether this entry is kept for its own reason (not merely because something inside it is).
    pub fn is_cause(&self) -> bool {
        self.reason != KeepReason::ContainsKept
    }
}

impl fmt::Display for Kept {
    /// One line, e.g. `/d/tasks/t/volumes/v/sub is still mounted (EBUSY)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = shown(&self.path);
        match self.reason {
            KeepReason::StillMounted { errno: Some(e) } => write!(f, "{p} is still mounted ({e})"),
            KeepReason::StillMounted { errno: None } => {
                write!(f, "{p} is still mounted (mounted again while unmounting)")
            }
            KeepReason::MountPoint(d) => write!(
                f,
                "{p} is a mount point found during removal ({d}); nothing inside it was touched"
            ),
            KeepReason::ContainsKept => write!(f, "{p} holds kept entries"),
            KeepReason::NotEmpty => write!(f, "{p}: entries appeared while removing it"),
            KeepReason::Replaced => write!(f, "{p} changed type while being removed"),
            KeepReason::Failed { op, errno } => {
                write!(f, "{p}: {op}: {errno} ({})", errno.message())
            }
        }
    }
}

/// What [`remove_tree`] did: exactly what was unmounted, removed and kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeRemoval {
    /// The tree (absolute, as given).
    pub path: PathBuf,
    /// Mounts unmounted before the walk (canonical paths), deepest first.
    pub unmounted: Vec<PathBuf>,
    pub removed: Counts,
    /// Kept entries, causes and the directories that hold them. Empty when the tree is gone.
    pub kept: Vec<Kept>,
}

impl TreeRemoval {
    fn new(path: PathBuf) -> Self {
        TreeRemoval {
            path,
            unmounted: Vec::new(),
            removed: Counts::default(),
            kept: Vec::new(),
        }
    }

    /// The tree is gone (or was never there).
    pub fn is_removed(&self) -> bool {
        self.kept.is_empty()
    }

    /// The kept entries that are kept for their own reason (what to tell the operator).
    pub fn causes(&self) -> impl Iterator<Item = &Kept> {
        self.kept.iter().filter(|k| k.is_cause())
    }

    /// Whether the unmount step failed, so nothing was deleted.
    pub fn refused_before_deleting(&self) -> bool {
        self.kept
            .iter()
            .any(|k| matches!(k.reason, KeepReason::StillMounted { .. }))
    }
}

/// What a removal would do, without doing it (for `--dry-run`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub path: PathBuf,
    pub exists: bool,
    pub is_dir: bool,
    /// Mounts at or below it that would be unmounted first, deepest first.
    pub mounts: Vec<PathBuf>,
}

/// Remove `dir`, which must be strictly inside `root`, the safe way (see the module docs).
///
/// `Err` means nothing was deleted: the path is outside the root or reached through a symlink, or
/// mountinfo could not be read. Otherwise the [`TreeRemoval`] says what happened; a tree that does
/// not exist counts as removed.
pub fn remove_tree(root: &Path, dir: &Path) -> Result<TreeRemoval, FsError> {
    remove_tree_with(root, dir, Methods::ALL, &NoHooks)
}

/// [`remove_tree`] with a choice of detection methods and hooks between the steps (for tests).
#[doc(hidden)]
pub fn remove_tree_with(
    root: &Path,
    dir: &Path,
    methods: Methods,
    hooks: &dyn WalkHooks,
) -> Result<TreeRemoval, FsError> {
    let (shown_path, located) = locate(root, dir)?;
    let mut out = TreeRemoval::new(shown_path);
    let Some(loc) = located else {
        return Ok(out);
    };
    if loc.file_type == FileType::Directory {
        let um = unmount_canonical(&loc.canon)?;
        out.unmounted = um.unmounted;
        if !um.failed.is_empty() {
            out.kept = um
                .failed
                .into_iter()
                .map(|f| Kept {
                    path: f.mount_point,
                    reason: KeepReason::StillMounted { errno: f.errno },
                })
                .collect();
            return Ok(out);
        }
    }
    hooks.after_unmount(&out.path);
    let home = detect::home_of(loc.parent.as_fd()).map_err(|e| FsError::Io {
        path: out.path.clone(),
        op: "statx of the parent of",
        source: e.into(),
    })?;
    let top_path = out.path.clone();
    let mut walker = Walker {
        methods,
        hooks,
        home,
        out,
    };
    walker.run(loc.parent.as_fd(), &loc.name, &top_path, &loc.canon);
    Ok(walker.out)
}

/// What [`remove_tree`] would do: validates the path the same way and lists the mounts it would
/// unmount. Deletes and unmounts nothing.
pub fn plan_removal(root: &Path, dir: &Path) -> Result<Plan, FsError> {
    let (path, located) = locate(root, dir)?;
    let Some(loc) = located else {
        return Ok(Plan {
            path,
            exists: false,
            is_dir: false,
            mounts: Vec::new(),
        });
    };
    let mounts = mountinfo::read_self().map_err(FsError::MountInfo)?;
    Ok(Plan {
        path,
        exists: true,
        is_dir: loc.file_type == FileType::Directory,
        mounts: mountinfo::at_or_below(&mounts, &loc.canon)
            .into_iter()
            .map(|m| m.mount_point.clone())
            .collect(),
    })
}

/// The tree, reached safely: its parent's descriptor and its own name.
struct Located {
    parent: OwnedFd,
    name: OsString,
    canon: PathBuf,
    file_type: FileType,
}

/// Check `dir` is strictly inside `root` (lexically: only normal components below it), then reach
/// its parent from `root` one component at a time with `O_NOFOLLOW`. Returns the absolute path as
/// given, and None when the tree does not exist. `root` itself may be reached through symlinks (it
/// is the caller's own, trusted directory).
fn locate(root: &Path, dir: &Path) -> Result<(PathBuf, Option<Located>), FsError> {
    let abs = |p: &Path| {
        std::path::absolute(p).map_err(|source| FsError::Io {
            path: p.to_path_buf(),
            op: "making absolute",
            source,
        })
    };
    let root_abs = abs(root)?;
    let dir_abs = abs(dir)?;
    if root_abs
        .components()
        .any(|c| matches!(c, Component::ParentDir))
    {
        return Err(FsError::UnsafePath {
            path: root_abs,
            reason: "contains `..`",
        });
    }
    let outside = || FsError::OutsideRoot {
        path: dir_abs.clone(),
        root: root_abs.clone(),
    };
    let rel = dir_abs.strip_prefix(&root_abs).map_err(|_| outside())?;
    let mut names = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => names.push(n.to_os_string()),
            _ => return Err(outside()),
        }
    }
    let Some(name) = names.pop() else {
        return Err(outside());
    };

    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut fd = match rustix::fs::open(&root_abs, dir_flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(E::NOENT) => return Ok((dir_abs, None)),
        Err(e) => {
            return Err(FsError::Io {
                path: root_abs,
                op: "opening",
                source: e.into(),
            });
        }
    };
    let root_canon = std::fs::read_link(format!(
        "/proc/self/fd/{}",
        rustix::fd::AsRawFd::as_raw_fd(&fd)
    ))
    .map_err(|source| FsError::Io {
        path: root_abs.clone(),
        op: "resolving",
        source,
    })?;
    let mut canon = root_canon;
    let mut here = root_abs.clone();
    for n in &names {
        here.push(n);
        canon.push(n);
        fd = match rustix::fs::openat(&fd, n, dir_flags | OFlags::NOFOLLOW, Mode::empty()) {
            Ok(fd) => fd,
            Err(E::NOENT) => return Ok((dir_abs, None)),
            // O_DIRECTORY|O_NOFOLLOW on a symlink gives ENOTDIR (or ELOOP): say which it is.
            Err(E::LOOP) | Err(E::NOTDIR) => {
                let symlink = detect::probe(fd.as_fd(), n)
                    .map(|p| p.file_type == FileType::Symlink)
                    .unwrap_or(false);
                return Err(FsError::UnsafePath {
                    path: here,
                    reason: if symlink {
                        "is a symbolic link"
                    } else {
                        "is not a directory"
                    },
                });
            }
            Err(e) => {
                return Err(FsError::Io {
                    path: here,
                    op: "opening",
                    source: e.into(),
                });
            }
        };
    }
    canon.push(&name);
    let file_type = match detect::probe(fd.as_fd(), &name) {
        Ok(p) => p.file_type,
        Err(E::NOENT) => return Ok((dir_abs, None)),
        Err(e) => {
            return Err(FsError::Io {
                path: dir_abs,
                op: "statx",
                source: e.into(),
            });
        }
    };
    Ok((
        dir_abs,
        Some(Located {
            parent: fd,
            name,
            canon,
            file_type,
        }),
    ))
}

/// An open directory being emptied.
struct Frame {
    dir: Dir,
    name: OsString,
    path: PathBuf,
    canon: PathBuf,
    /// Something inside is kept, so this directory stays.
    keeps: bool,
    /// This directory itself has a kept record already.
    self_kept: bool,
}

enum Step {
    Descend(Box<Frame>),
    Done,
    Kept,
}

struct Walker<'h> {
    methods: Methods,
    hooks: &'h dyn WalkHooks,
    home: Home,
    out: TreeRemoval,
}

impl Walker<'_> {
    fn keep(&mut self, path: &Path, reason: KeepReason) -> Step {
        self.out.kept.push(Kept {
            path: path.to_path_buf(),
            reason,
        });
        Step::Kept
    }

    /// Keep `path` because `op` on it failed with `errno`.
    fn failed(&mut self, path: &Path, op: Op, errno: impl Into<Errno>) -> Step {
        self.keep(
            path,
            KeepReason::Failed {
                op,
                errno: errno.into(),
            },
        )
    }

    /// Deal with one entry of `parent`: unlink it, or open it for descending, or keep it.
    fn entry(&mut self, parent: BorrowedFd<'_>, name: &OsStr, path: &Path, canon: &Path) -> Step {
        // A type change (directory <-> not) between the probe and the action is retried with a
        // fresh probe a few times, then left alone.
        for _ in 0..3 {
            let probe = match detect::probe(parent, name) {
                Ok(p) => p,
                Err(E::NOENT) => return Step::Done,
                Err(e) => return self.failed(path, Op::Stat, e),
            };
            if let Some(d) = detect::boundary(&probe, &self.home, self.methods) {
                return self.keep(path, KeepReason::MountPoint(d));
            }
            if probe.file_type == FileType::Directory {
                self.hooks.before_open_dir(path);
                match detect::open_dir(parent, name, canon, &self.home, self.methods) {
                    Opened::Dir(fd) => {
                        self.hooks.after_open_dir(path);
                        return match Dir::new(fd) {
                            Ok(dir) => Step::Descend(Box::new(Frame {
                                dir,
                                name: name.to_os_string(),
                                path: path.to_path_buf(),
                                canon: canon.to_path_buf(),
                                keeps: false,
                                self_kept: false,
                            })),
                            Err(e) => self.failed(path, Op::ReadDir, e),
                        };
                    }
                    Opened::Boundary(d) => return self.keep(path, KeepReason::MountPoint(d)),
                    Opened::NotDir => continue,
                    Opened::Gone => return Step::Done,
                    Opened::Failed(errno) => return self.failed(path, Op::Open, errno),
                }
            }
            self.hooks.before_unlink(path);
            match rustix::fs::unlinkat(parent, name, AtFlags::empty()) {
                Ok(()) => {
                    if probe.file_type == FileType::Symlink {
                        self.out.removed.symlinks += 1;
                    } else {
                        self.out.removed.files += 1;
                    }
                    return Step::Done;
                }
                // It became a directory since the probe.
                Err(E::ISDIR) => continue,
                Err(E::BUSY) => {
                    return self.keep(path, KeepReason::MountPoint(Detection::RemoveBusy));
                }
                Err(E::NOENT) => return Step::Done,
                Err(e) => return self.failed(path, Op::Unlink, e),
            }
        }
        self.keep(path, KeepReason::Replaced)
    }

    fn run(&mut self, top_parent: BorrowedFd<'_>, name: &OsStr, path: &Path, canon: &Path) {
        let mut stack: Vec<Box<Frame>> = match self.entry(top_parent, name, path, canon) {
            Step::Descend(frame) => vec![frame],
            Step::Done | Step::Kept => return,
        };
        while let Some(frame) = stack.last_mut() {
            let next = match frame.dir.read() {
                Some(Ok(entry)) => {
                    let bytes = entry.file_name().to_bytes();
                    if bytes == b"." || bytes == b".." {
                        continue;
                    }
                    Some(OsStr::from_bytes(bytes).to_os_string())
                }
                Some(Err(e)) => {
                    let path = frame.path.clone();
                    frame.keeps = true;
                    frame.self_kept = true;
                    self.failed(&path, Op::ReadDir, e);
                    None
                }
                None => None,
            };
            match next {
                Some(child) => {
                    let path = frame.path.join(&child);
                    let canon = frame.canon.join(&child);
                    let step = match frame.dir.fd() {
                        Ok(fd) => self.entry(fd, &child, &path, &canon),
                        Err(e) => self.failed(&path, Op::Open, e),
                    };
                    match step {
                        Step::Descend(child) => stack.push(child),
                        Step::Done => {}
                        Step::Kept => frame.keeps = true,
                    }
                }
                None => {
                    // This directory is done: remove it from its parent, or keep it.
                    let Some(done) = stack.pop() else { break };
                    let kept = self.finish(&done, stack.last().map(|p| &p.dir), top_parent);
                    if kept && let Some(parent) = stack.last_mut() {
                        parent.keeps = true;
                    }
                }
            }
        }
    }

    /// Remove an emptied directory (or record why it stays). Returns whether it was kept.
    fn finish(&mut self, done: &Frame, parent: Option<&Dir>, top_parent: BorrowedFd<'_>) -> bool {
        if done.keeps {
            if !done.self_kept {
                self.keep(&done.path, KeepReason::ContainsKept);
            }
            return true;
        }
        let parent_fd = match parent.map(Dir::fd) {
            Some(Ok(fd)) => fd,
            Some(Err(e)) => {
                self.failed(&done.path, Op::Rmdir, e);
                return true;
            }
            None => top_parent,
        };
        self.hooks.before_rmdir(&done.path);
        let reason = match rustix::fs::unlinkat(parent_fd, &done.name, AtFlags::REMOVEDIR) {
            Ok(()) => {
                self.out.removed.dirs += 1;
                return false;
            }
            Err(E::NOENT) => return false,
            // Mounted on after we opened it: what we emptied was the directory underneath.
            Err(E::BUSY) => KeepReason::MountPoint(Detection::RemoveBusy),
            Err(E::NOTEMPTY) | Err(E::EXIST) => KeepReason::NotEmpty,
            // Replaced by a non-directory after we opened it: leave the newcomer alone.
            Err(E::NOTDIR) => KeepReason::Replaced,
            Err(e) => KeepReason::Failed {
                op: Op::Rmdir,
                errno: e.into(),
            },
        };
        self.keep(&done.path, reason);
        true
    }
}
