//! Recognising mount points, including bind mounts of a directory from the same filesystem (which
//! `st_dev`, and so `rm --one-file-system`, cannot see).
//!
//! Methods, strongest first (each can be switched off in [`Methods`] so that tests exercise every
//! one alone):
//!
//! 1. `statx`: `STATX_ATTR_MOUNT_ROOT` on the entry (Linux 5.8), and its `stx_mnt_id` against the
//!    mount the tree lives on;
//! 2. `openat2(…, RESOLVE_NO_XDEV)` failing with `EXDEV` (Linux 5.6): the kernel refuses to cross
//!    into another mount while opening the entry;
//! 3. `st_dev` differing from the tree's: certainly a mount, but equal proves nothing;
//! 4. `/proc/self/mountinfo` listing the entry's path as a mount point: used when the kernel's
//!    `statx` reports neither the mount-root attribute nor the mount id, or when asked for.

use crate::errno::Errno;
use crate::mountinfo;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, StatxAttributes, StatxFlags};
use rustix::io::Errno as E;
use std::ffi::OsStr;
use std::fmt;
use std::path::Path;

/// How a mount boundary was recognised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Detection {
    /// `statx` set `STATX_ATTR_MOUNT_ROOT`.
    StatxMountRoot,
    /// `statx`'s `stx_mnt_id` differs from the tree's mount.
    MountId,
    /// `openat2` with `RESOLVE_NO_XDEV` failed with `EXDEV`.
    OpenXdev,
    /// `st_dev` differs from the tree's.
    Device,
    /// `/proc/self/mountinfo` lists the path as a mount point.
    MountInfo,
    /// Removing it failed with `EBUSY`: something was mounted on it after it was opened.
    RemoveBusy,
}

impl fmt::Display for Detection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Detection::StatxMountRoot => "statx: mount root",
            Detection::MountId => "statx: another mount id",
            Detection::OpenXdev => "openat2 RESOLVE_NO_XDEV: EXDEV",
            Detection::Device => "another device",
            Detection::MountInfo => "listed in /proc/self/mountinfo",
            Detection::RemoveBusy => "removal: EBUSY",
        })
    }
}

/// Which detection methods to use. [`Methods::ALL`] is what berth uses; the others exist so tests
/// can check each method alone. The `st_dev` comparison is cheap and always on with `device`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Methods {
    pub statx: bool,
    pub openat2: bool,
    pub device: bool,
    /// Also check mountinfo for every directory (slow: rereads the table). Turned on automatically
    /// when the kernel's `statx` knows neither the mount-root attribute nor the mount id.
    pub mountinfo: bool,
}

impl Methods {
    /// Every method (mountinfo only as a fallback).
    pub const ALL: Methods = Methods {
        statx: true,
        openat2: true,
        device: true,
        mountinfo: false,
    };
}

impl Default for Methods {
    fn default() -> Self {
        Methods::ALL
    }
}

/// The mount a tree lives on: what every directory in it must match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Home {
    pub mnt_id: Option<u64>,
    pub dev: (u32, u32),
}

/// What `statx` (or `fstatat`) said about one entry, without following a symlink.
#[derive(Debug, Clone, Copy)]
pub struct Probe {
    pub file_type: FileType,
    /// None when the kernel does not report the attribute.
    pub mount_root: Option<bool>,
    pub mnt_id: Option<u64>,
    pub dev: (u32, u32),
}

impl Probe {
    /// Whether statx could tell mount roots or mount ids on this kernel.
    pub fn statx_informative(&self) -> bool {
        self.mount_root.is_some() || self.mnt_id.is_some()
    }
}

/// `statx(dirfd, name, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT)`, or with an empty `name`,
/// the object `dirfd` itself (`AT_EMPTY_PATH`). Falls back to `fstatat` where `statx` is missing.
pub fn probe(dirfd: BorrowedFd<'_>, name: &OsStr) -> Result<Probe, E> {
    let mut flags = AtFlags::SYMLINK_NOFOLLOW | AtFlags::NO_AUTOMOUNT;
    if name.is_empty() {
        flags |= AtFlags::EMPTY_PATH;
    }
    match rustix::fs::statx(
        dirfd,
        name,
        flags,
        StatxFlags::TYPE | StatxFlags::INO | StatxFlags::MNT_ID,
    ) {
        Ok(st) => {
            let mount_root = st
                .stx_attributes_mask
                .contains(StatxAttributes::MOUNT_ROOT)
                .then(|| st.stx_attributes.contains(StatxAttributes::MOUNT_ROOT));
            let mnt_id = st.stx_mask_has(StatxFlags::MNT_ID).then_some(st.stx_mnt_id);
            Ok(Probe {
                file_type: FileType::from_raw_mode(u32::from(st.stx_mode)),
                mount_root,
                mnt_id,
                dev: (st.stx_dev_major, st.stx_dev_minor),
            })
        }
        Err(E::NOSYS) => {
            let st = rustix::fs::statat(dirfd, name, flags)?;
            Ok(Probe {
                file_type: FileType::from_raw_mode(st.st_mode),
                mount_root: None,
                mnt_id: None,
                dev: (
                    rustix::fs::major(st.st_dev as _),
                    rustix::fs::minor(st.st_dev as _),
                ),
            })
        }
        Err(e) => Err(e),
    }
}

/// Small extension so the mask check reads well.
trait MaskHas {
    fn stx_mask_has(&self, f: StatxFlags) -> bool;
}

impl MaskHas for rustix::fs::Statx {
    fn stx_mask_has(&self, f: StatxFlags) -> bool {
        self.stx_mask & f.bits() == f.bits()
    }
}

/// The mount boundary `p` shows relative to `home`, if any (statx and device methods).
pub fn boundary(p: &Probe, home: &Home, methods: Methods) -> Option<Detection> {
    if methods.statx {
        if p.mount_root == Some(true) {
            return Some(Detection::StatxMountRoot);
        }
        if let (Some(a), Some(b)) = (p.mnt_id, home.mnt_id)
            && a != b
        {
            return Some(Detection::MountId);
        }
    }
    if methods.device && p.dev != home.dev {
        return Some(Detection::Device);
    }
    None
}

/// The tree's home mount, from a directory fd on it (not itself a mount boundary of the tree).
pub fn home_of(fd: BorrowedFd<'_>) -> Result<Home, E> {
    let p = probe(fd, OsStr::new(""))?;
    Ok(Home {
        mnt_id: p.mnt_id,
        dev: p.dev,
    })
}

/// What opening a child directory gave.
#[derive(Debug)]
pub enum Opened {
    Dir(OwnedFd),
    /// It is a mount point (or the opened object is on another mount).
    Boundary(Detection),
    /// It is not a directory (any more): a symlink, a file.
    NotDir,
    /// It is gone.
    Gone,
    Failed(Errno),
}

/// Open `name` in `parent` as a directory without following a symlink and without crossing into
/// another mount, then check the opened directory itself (the check that cannot race: it is about
/// the very object whose entries will be read). `canon` is its canonical path, for mountinfo.
pub fn open_dir(
    parent: BorrowedFd<'_>,
    name: &OsStr,
    canon: &Path,
    home: &Home,
    methods: Methods,
) -> Opened {
    let oflags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut opened = None;
    if methods.openat2 {
        let resolve =
            ResolveFlags::NO_XDEV | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        match rustix::fs::openat2(parent, name, oflags, Mode::empty(), resolve) {
            Ok(fd) => opened = Some(fd),
            Err(E::XDEV) => return Opened::Boundary(Detection::OpenXdev),
            // openat2 missing (Linux < 5.6) or refusing the flags: plain openat below.
            Err(E::NOSYS) | Err(E::INVAL) | Err(E::TOOBIG) | Err(E::PERM) => {}
            Err(e) => return open_error(e),
        }
    }
    let fd = match opened {
        Some(fd) => fd,
        None => match rustix::fs::openat(parent, name, oflags, Mode::empty()) {
            Ok(fd) => fd,
            Err(e) => return open_error(e),
        },
    };
    let p = match probe(fd.as_fd(), OsStr::new("")) {
        Ok(p) => p,
        Err(e) => return Opened::Failed(e.into()),
    };
    if p.file_type != FileType::Directory {
        return Opened::NotDir;
    }
    if let Some(d) = boundary(&p, home, methods) {
        return Opened::Boundary(d);
    }
    if (methods.mountinfo || (methods.statx && !p.statx_informative())) && listed(canon) {
        return Opened::Boundary(Detection::MountInfo);
    }
    Opened::Dir(fd)
}

fn open_error(e: E) -> Opened {
    match e {
        E::LOOP | E::NOTDIR => Opened::NotDir,
        E::NOENT => Opened::Gone,
        e => Opened::Failed(e.into()),
    }
}

/// Whether mountinfo lists `path` as a mount point. An unreadable mountinfo counts as "yes":
/// when in doubt, keep.
pub fn listed(path: &Path) -> bool {
    match mountinfo::read_self() {
        Ok(mounts) => mounts.iter().any(|m| m.mount_point == path),
        Err(_) => true,
    }
}

/// Whether `path` is a mount point, by every method; None when it is not. `path`'s parent may be
/// reached through symlinks; `path` itself is not followed (a symlink is never a mount point here).
pub fn is_mount_point(path: &Path) -> std::io::Result<Option<Detection>> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        // "/" (or a path ending in "..") : the root of the namespace is a mount.
        return Ok(Some(Detection::MountInfo));
    };
    let parent_fd = rustix::fs::open(
        parent,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let home = home_of(parent_fd.as_fd())?;
    let p = probe(parent_fd.as_fd(), name)?;
    if let Some(d) = boundary(&p, &home, Methods::ALL) {
        return Ok(Some(d));
    }
    if p.file_type == FileType::Symlink {
        return Ok(None);
    }
    let canon = std::fs::canonicalize(parent)?.join(name);
    if let Err(E::XDEV) = rustix::fs::openat2(
        parent_fd.as_fd(),
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::NO_XDEV | ResolveFlags::NO_SYMLINKS,
    ) {
        return Ok(Some(Detection::OpenXdev));
    }
    let mounts = mountinfo::read_self()?;
    Ok(mounts
        .iter()
        .any(|m| m.mount_point == canon)
        .then_some(Detection::MountInfo))
}
