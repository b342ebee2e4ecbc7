//! The wire types of the legacy Docker volume plugin protocol (moby `volume/drivers/proxy.go`,
//! docker/cli `docs/extend/plugins_volume.md`) and berth's own repair endpoint.
//!
//! Field names are dockerd's, case-sensitive: `Name`, `Opts`, `ID` (not `Id`), `Mountpoint`,
//! `Err`… Every answer carries `Err` (empty on success) except `Plugin.Activate` and
//! `VolumeDriver.Capabilities`, which dockerd decodes without it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The content type of every answer.
pub const CONTENT_TYPE: &str = "application/vnd.docker.plugins.v1.2+json";

/// The endpoints, as `POST` paths.
pub mod endpoint {
    pub const ACTIVATE: &str = "/Plugin.Activate";
    pub const CREATE: &str = "/VolumeDriver.Create";
    pub const REMOVE: &str = "/VolumeDriver.Remove";
    pub const MOUNT: &str = "/VolumeDriver.Mount";
    pub const UNMOUNT: &str = "/VolumeDriver.Unmount";
    pub const PATH: &str = "/VolumeDriver.Path";
    pub const GET: &str = "/VolumeDriver.Get";
    pub const LIST: &str = "/VolumeDriver.List";
    pub const CAPABILITIES: &str = "/VolumeDriver.Capabilities";
    /// berth's repair endpoint (not part of Docker's protocol; dockerd never calls it).
    pub const RELEASE: &str = "/Berth.Release";
}

/// `Plugin.Activate` answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ActivateResponse {
    #[serde(rename = "Implements")]
    pub implements: Vec<String>,
}

/// `VolumeDriver.Create` request. `Opts` is `null` when no `-o` was given.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CreateRequest {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Opts", default)]
    pub opts: Option<BTreeMap<String, String>>,
}

/// A request naming only a volume (`Remove`, `Path`, `Get`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct NameRequest {
    #[serde(rename = "Name")]
    pub name: String,
}

/// `Mount` and `Unmount`: a volume and the caller's mount ID.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct MountRequest {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "ID")]
    pub id: String,
}

/// An answer carrying only `Err` (`Create`, `Remove`, `Unmount`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ErrResponse {
    #[serde(rename = "Err", default)]
    pub err: String,
}

/// `Mount` and `Path` answers.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct MountpointResponse {
    #[serde(rename = "Mountpoint", default)]
    pub mountpoint: String,
    #[serde(rename = "Err", default)]
    pub err: String,
}

/// A volume as `Get` shows it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct VolumeInfo {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Mountpoint", default)]
    pub mountpoint: String,
    #[serde(
        rename = "CreatedAt",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub created_at: String,
    /// Free-form, shown by `docker volume inspect`: see [`VolumeStatus`].
    #[serde(rename = "Status", default, skip_serializing_if = "Option::is_none")]
    pub status: Option<VolumeStatus>,
}

/// berth's `Status` of a volume: whether it is mounted and the reference count per mount ID.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct VolumeStatus {
    #[serde(rename = "type")]
    pub fs_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    pub mounted: bool,
    /// The sum of `mounts`.
    pub references: u64,
    /// Reference count per mount ID.
    pub mounts: BTreeMap<String, u64>,
    /// A problem found at start (recovery) or when loading the state, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// `Get` answer.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct GetResponse {
    #[serde(rename = "Volume", default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<VolumeInfo>,
    #[serde(rename = "Err", default)]
    pub err: String,
}

/// One entry of `List`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ListEntry {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Mountpoint", default)]
    pub mountpoint: String,
}

/// `List` answer.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ListResponse {
    #[serde(rename = "Volumes", default)]
    pub volumes: Vec<ListEntry>,
    #[serde(rename = "Err", default)]
    pub err: String,
}

/// `Capabilities` answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CapabilitiesResponse {
    #[serde(rename = "Capabilities")]
    pub capabilities: Capabilities,
}

/// The driver's scope: `local` (volumes live on this host).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Capabilities {
    #[serde(rename = "Scope")]
    pub scope: String,
}

/// `Berth.Release` request: drop up to `Count` references of mount ID `ID` (all of them when
/// `Count` is absent or 0), unmounting the volume if none remain.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ReleaseRequest {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Count", default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
}

/// `Berth.Release` answer.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ReleaseResponse {
    /// How many references were dropped.
    #[serde(rename = "Released", default)]
    pub released: u64,
    /// References left on the volume (all IDs).
    #[serde(rename = "Remaining", default)]
    pub remaining: u64,
    /// Whether the volume was unmounted because none remain.
    #[serde(rename = "Unmounted", default)]
    pub unmounted: bool,
    #[serde(rename = "Err", default)]
    pub err: String,
}
