//! Performing mounts. [`SystemMounter`] mounts tmpfs and bind volumes with `mount(2)` (through
//! [`berth_fs::mount`], which makes the system calls) and
//! every other type by running the mount helper program as
//! `HELPER -t TYPE [-o OPTS] DEVICE TARGET` — an argv, never a shell — with a timeout after which
//! the helper is killed. Unmounts use `umount2(2)` with `UMOUNT_NOFOLLOW`, plus `MNT_DETACH`
//! (lazy) for network filesystems, as the ECS plugin's `umount -l` does; "not mounted" is success.
//!
//! The [`Mounter`] trait lets tests replace the system with a model; its failures are
//! [`MounterError`]s, each naming the mount point (or the helper) and keeping the system's own
//! error as its source; their text is the reason the registry's errors give for a volume.

use std::ffi::{CString, OsString};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use berth_fs::Errno;
use berth_fs::mount::{MountError, MountFlags, UnmountFlags};

use crate::options::Backend;

/// What the registry needs from the system. Methods block; the registry calls them on tokio's
/// blocking pool. Each error's text is a one-line reason.
pub trait Mounter: Send + Sync + 'static {
    /// Mount `backend` at the existing directory `target`.
    fn mount(&self, backend: &Backend, target: &Path) -> Result<(), MounterError>;
    /// Unmount `target`; not mounted is success.
    fn unmount(&self, backend: &Backend, target: &Path) -> Result<(), MounterError>;
    /// Every mount point of this mount namespace.
    fn mount_points(&self) -> Result<Vec<PathBuf>, MounterError>;
    /// Whether a volume of this backend can be mounted at all (the helper exists).
    fn check_available(&self, backend: &Backend) -> Result<(), MounterError>;

    /// Whether something is mounted exactly at `target`.
    fn is_mounted(&self, target: &Path) -> Result<bool, MounterError> {
        let target = canonical(target);
        Ok(self.mount_points()?.contains(&target))
    }
}

/// What a [`Mounter`] could not do, and where: the mount point `target` (or the helper, or the
/// mount table), with the system's error as the source.
#[derive(Debug, thiserror::Error)]
pub enum MounterError {
    /// A mount or unmount system call (made by berth-fs) failed; `step` says which (`mount
    /// tmpfs`, `bind mount of /src`, `umount`, …).
    #[error("{step}: {}", errno_text(source))]
    Call {
        step: String,
        target: PathBuf,
        #[source]
        source: MountError,
    },
    /// The source directory of a bind mount cannot be read.
    #[error("bind source {}: {source}", dir.display())]
    BindSource {
        dir: PathBuf,
        target: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("bind source {} is not a directory", dir.display())]
    BindNotADirectory { dir: PathBuf, target: PathBuf },
    #[error("tmpfs options contain a NUL byte")]
    TmpfsOptions { target: PathBuf },
    /// The mount helper could not be started.
    #[error("cannot run mount helper {helper}: {source}")]
    HelperStart {
        helper: String,
        target: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The mount helper ran past its time and was killed.
    #[error("mount helper {helper} did not finish within {} s and was killed", limit.as_secs())]
    HelperTimeout {
        helper: String,
        target: PathBuf,
        limit: Duration,
    },
    #[error("waiting for mount helper {helper}: {source}")]
    HelperWait {
        helper: String,
        target: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The mount helper exited unsuccessfully; `stderr` is what it said (lines joined by ` / `).
    #[error("mount helper {helper} failed ({status}){}{stderr}", if stderr.is_empty() { "" } else { ": " })]
    HelperFailed {
        helper: String,
        target: PathBuf,
        status: ExitStatus,
        stderr: String,
    },
    /// A recursive bind's submounts could not all be unmounted (each failure with its path).
    #[error("umount: {}", failed.join("; "))]
    Submounts {
        target: PathBuf,
        failed: Vec<String>,
    },
    /// The submounts of a recursive bind could not be listed.
    #[error("umount: {source}")]
    SubmountList {
        target: PathBuf,
        #[source]
        source: berth_fs::FsError,
    },
    #[error("reading /proc/self/mountinfo: {source}")]
    MountTable {
        #[source]
        source: std::io::Error,
    },
    #[error(
        "type {fs_type} is mounted by the mount helper {helper:?}, which is not an executable file (or \
         not found in PATH); install it or pass --mount-helper"
    )]
    HelperMissing { fs_type: String, helper: OsString },
}

impl MounterError {
    /// The mount point the failure is about (None for the mount table and a missing helper).
    pub fn target(&self) -> Option<&Path> {
        match self {
            MounterError::Call { target, .. }
            | MounterError::BindSource { target, .. }
            | MounterError::BindNotADirectory { target, .. }
            | MounterError::TmpfsOptions { target }
            | MounterError::HelperStart { target, .. }
            | MounterError::HelperTimeout { target, .. }
            | MounterError::HelperWait { target, .. }
            | MounterError::HelperFailed { target, .. }
            | MounterError::Submounts { target, .. }
            | MounterError::SubmountList { target, .. } => Some(target),
            MounterError::MountTable { .. } | MounterError::HelperMissing { .. } => None,
        }
    }

    /// A failed system call at `target`.
    pub fn call(step: impl Into<String>, target: &Path, source: MountError) -> Self {
        MounterError::Call {
            step: step.into(),
            target: target.to_path_buf(),
            source,
        }
    }
}

/// `path` with symlinks resolved when it exists (mountinfo shows resolved paths), else as is.
pub fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The real system: see the module documentation.
#[derive(Debug, Clone)]
pub struct SystemMounter {
    helper: OsString,
    timeout: Duration,
}

impl SystemMounter {
    /// `helper`: a program name looked up in `PATH`, or a path. `timeout`: how long the helper may
    /// run before it is killed and the mount fails.
    pub fn new(helper: impl Into<OsString>, timeout: Duration) -> SystemMounter {
        SystemMounter {
            helper: helper.into(),
            timeout,
        }
    }

    fn run_helper(
        &self,
        fs_type: &str,
        device: &str,
        options: Option<&str>,
        target: &Path,
    ) -> Result<(), MounterError> {
        let mut cmd = Command::new(&self.helper);
        cmd.arg("-t").arg(fs_type);
        if let Some(o) = options {
            cmd.arg("-o").arg(o);
        }
        cmd.arg(device)
            .arg(target)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let shown = self.helper.to_string_lossy().into_owned();
        let mut child = cmd.spawn().map_err(|source| MounterError::HelperStart {
            helper: shown.clone(),
            target: target.to_path_buf(),
            source,
        })?;
        // Read stderr on its own thread so that a chatty helper cannot block on a full pipe.
        let stderr = child.stderr.take();
        let reader = std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut err) = stderr {
                let _ = err.by_ref().take(64 * 1024).read_to_string(&mut text);
            }
            text
        });
        let deadline = Instant::now() + self.timeout;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Ok(status),
                Ok(None) if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break Err(MounterError::HelperTimeout {
                        helper: shown.clone(),
                        target: target.to_path_buf(),
                        limit: self.timeout,
                    });
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(source) => {
                    break Err(MounterError::HelperWait {
                        helper: shown.clone(),
                        target: target.to_path_buf(),
                        source,
                    });
                }
            }
        };
        let text = reader.join().unwrap_or_default();
        let status = status?;
        if status.success() {
            Ok(())
        } else {
            Err(MounterError::HelperFailed {
                helper: shown,
                target: target.to_path_buf(),
                status,
                stderr: text.trim().lines().collect::<Vec<_>>().join(" / "),
            })
        }
    }
}

/// The errno of a failed mount call as this module's messages show it:
/// `Operation not permitted (os error 1) (EPERM)`.
fn errno_text(e: &MountError) -> String {
    let text = std::io::Error::from_raw_os_error(e.errno.0).to_string();
    match e.errno.name() {
        Some(name) => format!("{text} ({name})"),
        None => text,
    }
}

fn tmpfs_flags(words: &[String]) -> MountFlags {
    let mut flags = MountFlags::NOSUID | MountFlags::NODEV;
    for word in words {
        flags |= match word.as_str() {
            "ro" => MountFlags::RDONLY,
            "nosuid" => MountFlags::NOSUID,
            "nodev" => MountFlags::NODEV,
            "noexec" => MountFlags::NOEXEC,
            "noatime" => MountFlags::NOATIME,
            "nodiratime" => MountFlags::NODIRATIME,
            "strictatime" => MountFlags::STRICTATIME,
            "sync" => MountFlags::SYNCHRONOUS,
            "dirsync" => MountFlags::DIRSYNC,
            // rw, relatime: the defaults.
            _ => MountFlags::empty(),
        };
    }
    flags
}

/// Unmount a recursive bind: its copies of the source's submounts deepest first, then itself
/// ([`berth_fs::unmount_all_under`]: never lazy, never following a symlink). First made a slave
/// again (a mount made before berth did so at mount time), so no unmount here propagates to the
/// source's own submounts. Called only when the last reference goes, so nothing is unmounted
/// under a positive count; a busy submount fails the whole call with its path.
fn unmount_recursive_bind(target: &Path) -> Result<(), MounterError> {
    match berth_fs::mount::make_rslave(target) {
        Ok(()) => {}
        // Not mounted (EINVAL) or gone: there is nothing to unmount.
        Err(e) if e.errno == Errno::INVAL || e.errno == Errno::NOENT => return Ok(()),
        Err(e) => return Err(MounterError::call("umount", target, e)),
    }
    let report =
        berth_fs::unmount_all_under(target).map_err(|source| MounterError::SubmountList {
            target: target.to_path_buf(),
            source,
        })?;
    if report.is_complete() {
        return Ok(());
    }
    Err(MounterError::Submounts {
        target: target.to_path_buf(),
        failed: report.failed.iter().map(ToString::to_string).collect(),
    })
}

impl Mounter for SystemMounter {
    fn mount(&self, backend: &Backend, target: &Path) -> Result<(), MounterError> {
        match backend {
            Backend::Tmpfs { flags, data } => {
                let data = CString::new(data.as_str()).map_err(|_| MounterError::TmpfsOptions {
                    target: target.to_path_buf(),
                })?;
                berth_fs::mount::mount(
                    "tmpfs",
                    target,
                    "tmpfs",
                    tmpfs_flags(flags),
                    data.as_c_str(),
                )
                .map_err(|e| MounterError::call("mount tmpfs", target, e))
            }
            Backend::Bind {
                source,
                recursive,
                read_only,
            } => {
                let meta = std::fs::metadata(source).map_err(|e| MounterError::BindSource {
                    dir: source.clone(),
                    target: target.to_path_buf(),
                    source: e,
                })?;
                if !meta.is_dir() {
                    return Err(MounterError::BindNotADirectory {
                        dir: source.clone(),
                        target: target.to_path_buf(),
                    });
                }
                let bound = if *recursive {
                    berth_fs::mount::bind_recursive(source, target)
                } else {
                    berth_fs::mount::bind(source, target)
                };
                bound.map_err(|e| {
                    MounterError::call(format!("bind mount of {}", source.display()), target, e)
                })?;
                // The copies of the source's submounts must not take the source's with them when
                // they are unmounted (see `unmount`).
                if *recursive && let Err(e) = berth_fs::mount::make_rslave(target) {
                    let _ = berth_fs::unmount_all_under(target);
                    return Err(MounterError::call(
                        format!(
                            "making the recursive bind mount a slave of {}",
                            source.display()
                        ),
                        target,
                        e,
                    ));
                }
                if *read_only {
                    let flags = MountFlags::BIND | MountFlags::RDONLY;
                    if let Err(e) = berth_fs::mount::remount(target, flags, c"") {
                        let _ = berth_fs::mount::unmount(target, UnmountFlags::NOFOLLOW);
                        return Err(MounterError::call(
                            "making the bind mount read-only",
                            target,
                            e,
                        ));
                    }
                }
                Ok(())
            }
            Backend::Helper {
                fs_type,
                device,
                options,
            } => self.run_helper(fs_type, device, options.as_deref(), target),
        }
    }

    fn unmount(&self, backend: &Backend, target: &Path) -> Result<(), MounterError> {
        if let Backend::Bind {
            recursive: true, ..
        } = backend
        {
            return unmount_recursive_bind(target);
        }
        let mut flags = UnmountFlags::NOFOLLOW;
        if backend.is_network() {
            flags |= UnmountFlags::DETACH;
        }
        match berth_fs::mount::unmount(target, flags) {
            Ok(()) => Ok(()),
            // Not mounted, or gone: what the caller wanted.
            Err(e) if e.errno == Errno::INVAL || e.errno == Errno::NOENT => Ok(()),
            Err(e) => Err(MounterError::call("umount", target, e)),
        }
    }

    fn mount_points(&self) -> Result<Vec<PathBuf>, MounterError> {
        berth_fs::mountinfo::read_self()
            .map(|mounts| mounts.into_iter().map(|m| m.mount_point).collect())
            .map_err(|source| MounterError::MountTable { source })
    }

    fn check_available(&self, backend: &Backend) -> Result<(), MounterError> {
        if !backend.needs_helper() {
            return Ok(());
        }
        if find_program(&self.helper).is_some() {
            Ok(())
        } else {
            Err(MounterError::HelperMissing {
                fs_type: backend.type_name().to_string(),
                helper: self.helper.clone(),
            })
        }
    }
}

/// The executable `program` resolves to: itself if it contains a `/`, else the first match in
/// `PATH`.
pub fn find_program(program: &std::ffi::OsStr) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let path = Path::new(program);
    if program.as_encoded_bytes().contains(&b'/') {
        return executable(path).then(|| path.to_path_buf());
    }
    let dirs = std::env::var_os("PATH")?;
    std::env::split_paths(&dirs)
        .map(|d| d.join(path))
        .find(|p| executable(p))
}
