//! `linuxParameters` of a container definition, as validated: the init process, capabilities,
//! devices, tmpfs mounts, `/dev/shm` size and swap settings ECS hands to Docker.
//!
//! Invariants (after [`crate::parse()`]): capability names are ECS's (upper case, no `CAP_`
//! prefix, or `ALL`); paths are absolute; sizes are in MiB and within their bounds; `maxSwap` is
//! only set on a container that has a hard `memory` limit; `swappiness` is only kept when
//! `maxSwap` is set (ECS ignores it otherwise). Limits: whether the host has swap, and whether the
//! device exists, is for Docker to judge at create.

use serde::{Deserialize, Serialize};

/// `linuxParameters`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct LinuxParameters {
    /// Docker `Init`: an init process (Docker's `docker-init`) is PID 1 and runs the command.
    pub init_process_enabled: bool,
    /// Added to Docker's default set (`CapAdd`).
    pub capabilities_add: Vec<String>,
    /// Removed from Docker's default set (`CapDrop`).
    pub capabilities_drop: Vec<String>,
    pub devices: Vec<Device>,
    pub tmpfs: Vec<Tmpfs>,
    /// MiB; Docker `ShmSize`.
    pub shared_memory_size: Option<u64>,
    /// MiB of swap on top of `memory`; Docker `MemorySwap` = memory + maxSwap.
    pub max_swap: Option<u64>,
    /// 0 – 100; Docker `MemorySwappiness`.
    pub swappiness: Option<u32>,
}

/// A host device made available in the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Device {
    pub host_path: String,
    /// Defaults to `host_path`.
    pub container_path: Option<String>,
    /// Docker cgroup permissions: some of `r`, `w`, `m` in that order; `rwm` when none are given.
    pub permissions: String,
}

/// A tmpfs mount.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tmpfs {
    pub container_path: String,
    /// MiB.
    pub size: u64,
    /// Mount options as written (`noexec`, `mode=1777`, ...).
    pub mount_options: Vec<String>,
}
