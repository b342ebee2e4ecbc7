//! berth-volume: berth's Docker volume plugin (`berth volume-plugin`), a legacy (v1) volume
//! driver served on a Unix socket, with mounts reference-counted per (volume, mount ID) — never a
//! set, because `docker cp` on a running container reuses the container's mount ID (moby issue
//! 34665, `shared/seeds/volume-plugin-mount-refcount.txt`).
//!
//! - [`protocol`]: the wire types of every endpoint, with dockerd's exact field names.
//! - [`names`]: volume name and mount ID validation (a name can never leave the mount root).
//! - [`options`]: `-o type=… device=… o=…` validated into a [`options::Backend`].
//! - [`state`]: the durable state file: berth's versioned format, and the three generations of the
//!   ECS plugin's `ecs_volume_plugin.json`.
//! - [`persist`]: saving the state file (through [`berth_fs::write_atomic`]: atomic replace, fsync,
//!   directory fsync), and the group committer that makes one fsync serve every change made while
//!   the previous one ran.
//! - [`mounter`]: tmpfs and bind mounts by system call (made by [`berth_fs::mount`]; this crate
//!   makes no mount syscall of its own), every other type through the mount helper program (argv,
//!   never a shell); lazy unmount for network filesystems.
//! - [`registry`]: the reference-counting core: per-volume serialization, rollback rules.
//! - [`recovery`]: reconciling the loaded state with `/proc/self/mountinfo` at start.
//! - [`server`]: the HTTP server on the Unix socket, the instance lock, the stale socket.
//! - [`client`]: a client for the socket (the `release` command, tests, the benchmark).

pub mod client;
pub mod mounter;
pub mod names;
pub mod options;
pub mod persist;
pub mod protocol;
pub mod recovery;
pub mod registry;
pub mod server;
pub mod state;

use std::path::PathBuf;

pub use registry::Registry;
pub use server::{ServeConfig, serve};

/// The default socket: dockerd's legacy plugin directory, driver name `berth`.
pub const DEFAULT_SOCKET: &str = "/run/docker/plugins/berth.sock";
/// The default state file.
pub const DEFAULT_STATE_FILE: &str = "/var/lib/berth/volume-plugin.json";
/// The default directory under which volumes are mounted (one directory per volume name).
pub const DEFAULT_MOUNT_ROOT: &str = "/var/lib/berth/volumes";
/// The default mount helper for network filesystems.
pub const DEFAULT_MOUNT_HELPER: &str = "mount";

/// Every error of the plugin. The `Display` text is what dockerd shows the user (the `Err` field
/// of the answer), so each one says what is wrong and, where there is one, what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid volume name {name:?}: {reason}")]
    InvalidName { name: String, reason: &'static str },
    #[error("invalid mount ID {id:?}: {reason}")]
    InvalidId { id: String, reason: &'static str },
    #[error("invalid options for volume {name}: {reason}")]
    InvalidOptions { name: String, reason: String },
    #[error("no such volume: {0}")]
    NoSuchVolume(String),
    #[error("volume {name} already exists with different options ({existing}); remove it first")]
    Exists { name: String, existing: String },
    #[error(
        "volume {name} is in use: {refs}; stop the containers using it, or release leaked \
         references with `berth volume-plugin release`"
    )]
    InUse { name: String, refs: String },
    #[error("mounting volume {name} at {}: {reason}", path.display())]
    Mount {
        name: String,
        path: PathBuf,
        reason: String,
    },
    /// `reason` ends with what became of the reference or the volume (the caller adds it: an
    /// Unmount keeps the reference, a Remove keeps the volume), so the text says it once.
    #[error("unmounting volume {name} at {}: {reason}", path.display())]
    Unmount {
        name: String,
        path: PathBuf,
        reason: String,
    },
    #[error("{what}, but the state file could not be saved: {source}")]
    Save {
        what: String,
        source: persist::SaveError,
    },
    #[error("state file {}: {reason}", path.display())]
    StateFile { path: PathBuf, reason: String },
    #[error(
        "state file {} is locked by another berth volume-plugin (lock file {})",
        state.display(),
        lock.display()
    )]
    Locked { state: PathBuf, lock: PathBuf },
    #[error("socket {}: {reason}", path.display())]
    Socket { path: PathBuf, reason: String },
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("plugin call failed: {0}")]
    Client(String),
    #[error("{0}")]
    Remote(String),
}

/// Short for `Result<T, Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;
