//! Performing mounts. [`SystemMounter`] mounts tmpfs and bind volumes with `mount(2)` (through
//! [`berth_fs::mount`], which makes the system calls) and
//! every other type by running the mount helper program as
//! `HELPER -t TYPE [-o OPTS] DEVICE TARGET` — an argv, never a shell — with a timeout after which
//! the helper is killed. Unmounts use `umount2(2)` with `UMOUNT_NOFOLLOW`, plus `MNT_DETACH`
//! (lazy) for network filesystems, as the ECS plugin's `umount -l` does; "not mounted" is success.
//!
//! The [`Mounter`] trait lets tests replace the system with a model.

use std::ffi::{CString, OsString};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use berth_fs::Errno;
use berth_fs::mount::{MountError, MountFlags, UnmountFlags};

use crate::options::Backend;

/// What the registry needs from the system. Methods block; the registry calls them on tokio's
/// blocking pool. Errors are one-line reasons.
pub trait Mounter: Send + Sync + 'static {
    /// Mount `backend` at the existing directory `target`.
    fn mount(&self, backend: &Backend, target: &Path) -> Result<(), String>;
    /// Unmount `target`; not mounted is success.
    fn unmount(&self, backend: &Backend, target: &Path) -> Result<(), String>;
    /// Every mount point of this mount namespace.
    fn mount_points(&self) -> Result<Vec<PathBuf>, String>;
    /// Whether a volume of this backend can be mounted at all (the helper exists).
    fn check_available(&self, backend: &Backend) -> Result<(), String>;

    /// Whether something is mounted exactly at `target`.
    fn is_mounted(&self, target: &Path) -> Result<bool, String> {
        let target = canonical(target);
        Ok(self.mount_points()?.contains(&target))
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
    ) -> Result<(), String> {
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
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot run mount helper {shown}: {e}"))?;
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
                    break Err(format!(
                        "mount helper {shown} did not finish within {} s and was killed",
                        self.timeout.as_secs()
                    ));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => break Err(format!("waiting for mount helper {shown}: {e}")),
            }
        };
        let text = reader.join().unwrap_or_default();
        let status = status?;
        if status.success() {
            Ok(())
        } else {
            let text = text.trim();
            Err(format!(
                "mount helper {shown} failed ({status}){}{}",
                if text.is_empty() { "" } else { ": " },
                text.lines().collect::<Vec<_>>().join(" / ")
            ))
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
fn unmount_recursive_bind(target: &Path) -> Result<(), String> {
    match berth_fs::mount::make_rslave(target) {
        Ok(()) => {}
        // Not mounted (EINVAL) or gone: there is nothing to unmount.
        Err(e) if e.errno == Errno::INVAL || e.errno == Errno::NOENT => return Ok(()),
        Err(e) => return Err(format!("umount: {}", errno_text(&e))),
    }
    let report = berth_fs::unmount_all_under(target).map_err(|e| format!("umount: {e}"))?;
    if report.is_complete() {
        return Ok(());
    }
    let failed: Vec<String> = report.failed.iter().map(ToString::to_string).collect();
    Err(format!("umount: {}", failed.join("; ")))
}

impl Mounter for SystemMounter {
    fn mount(&self, backend: &Backend, target: &Path) -> Result<(), String> {
        match backend {
            Backend::Tmpfs { flags, data } => {
                let data = CString::new(data.as_str())
                    .map_err(|_| "tmpfs options contain a NUL byte".to_owned())?;
                berth_fs::mount::mount(
                    "tmpfs",
                    target,
                    "tmpfs",
                    tmpfs_flags(flags),
                    data.as_c_str(),
                )
                .map_err(|e| format!("mount tmpfs: {}", errno_text(&e)))
            }
            Backend::Bind {
                source,
                recursive,
                read_only,
            } => {
                let meta = std::fs::metadata(source)
                    .map_err(|e| format!("bind source {}: {e}", source.display()))?;
                if !meta.is_dir() {
                    return Err(format!(
                        "bind source {} is not a directory",
                        source.display()
                    ));
                }
                let bound = if *recursive {
                    berth_fs::mount::bind_recursive(source, target)
                } else {
                    berth_fs::mount::bind(source, target)
                };
                bound.map_err(|e| {
                    format!("bind mount of {}: {}", source.display(), errno_text(&e))
                })?;
                // The copies of the source's submounts must not take the source's with them when
                // they are unmounted (see `unmount`).
                if *recursive && let Err(e) = berth_fs::mount::make_rslave(target) {
                    let _ = berth_fs::unmount_all_under(target);
                    return Err(format!(
                        "making the recursive bind mount a slave of {}: {}",
                        source.display(),
                        errno_text(&e)
                    ));
                }
                if *read_only {
                    let flags = MountFlags::BIND | MountFlags::RDONLY;
                    if let Err(e) = berth_fs::mount::remount(target, flags, c"") {
                        let _ = berth_fs::mount::unmount(target, UnmountFlags::NOFOLLOW);
                        return Err(format!(
                            "making the bind mount read-only: {}",
                            errno_text(&e)
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

    fn unmount(&self, backend: &Backend, target: &Path) -> Result<(), String> {
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
            Err(e) => Err(format!("umount: {}", errno_text(&e))),
        }
    }

    fn mount_points(&self) -> Result<Vec<PathBuf>, String> {
        berth_fs::mountinfo::read_self()
            .map(|mounts| mounts.into_iter().map(|m| m.mount_point).collect())
            .map_err(|e| format!("reading /proc/self/mountinfo: {e}"))
    }

    fn check_available(&self, backend: &Backend) -> Result<(), String> {
        if !backend.needs_helper() {
            return Ok(());
        }
        if find_program(&self.helper).is_some() {
            Ok(())
        } else {
            Err(format!(
                "type {} is mounted by the mount helper {:?}, which is not an executable file (or \
                 not found in PATH); install it or pass --mount-helper",
                backend.type_name(),
                self.helper
            ))
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
