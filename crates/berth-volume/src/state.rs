//! The durable state: every volume with its options, mount point path, creation time and
//! reference count per mount ID.
//!
//! berth writes its own versioned format:
//!
//! ```json
//! {"version": 1, "volumes": {"v1": {"type": "tmpfs", "path": "/var/lib/berth/volumes/v1",
//!   "options": {"type": "tmpfs", "o": "size=64m"}, "createdAt": "2025-01-01T00:00:00Z",
//!   "mounts": {"<mount id>": 2}}}}
//! ```
//!
//! and reads the three generations of the ECS volume plugin's `ecs_volume_plugin.json` (no
//! `version` key): `{"volumes": {"<name>": {"type", "path", "options", "createdAt", "mounts"}}}`
//! where `mounts` is absent (oldest), a set `{"<id>": null}` (each null is one reference), or counts
//! `{"<id>": n}` (a 0, which ECS's own loader turns into 1, is read as 1 too). Volumes loaded from
//! an ECS file keep the mount paths recorded there, even outside `--mount-root`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::Error;

/// The format version berth writes.
pub const VERSION: u32 = 1;

/// One volume as saved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeRecord {
    /// The options given at Create (`type`, `device`, `o`).
    pub options: BTreeMap<String, String>,
    /// The mount point.
    pub path: PathBuf,
    /// RFC 3339; empty when unknown.
    pub created_at: String,
    /// Reference count per mount ID; never holds a 0.
    pub mounts: BTreeMap<String, u64>,
}

impl VolumeRecord {
    /// The sum of the counts.
    pub fn total(&self) -> u64 {
        self.mounts.values().fold(0u64, |a, n| a.saturating_add(*n))
    }
}

/// The whole state, by volume name.
pub type Volumes = BTreeMap<String, VolumeRecord>;

/// Which format a state file was in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// No file yet.
    Missing,
    /// berth's own, version [`VERSION`].
    Berth,
    /// The ECS plugin's, without mount counts (no `mounts` at all).
    EcsNoMounts,
    /// The ECS plugin's set of mount IDs (`{"id": null}`).
    EcsSet,
    /// The ECS plugin's counts (`{"id": n}`).
    EcsCounts,
}

/// A loaded state file.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub volumes: Volumes,
    pub format: Format,
    /// What was skipped or adjusted, one line each.
    pub warnings: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct BerthFile {
    version: u32,
    #[serde(default)]
    volumes: BTreeMap<String, BerthVolume>,
}

#[derive(Serialize, Deserialize)]
struct BerthVolume {
    #[serde(rename = "type", default)]
    fs_type: String,
    path: PathBuf,
    #[serde(default)]
    options: BTreeMap<String, String>,
    #[serde(rename = "createdAt", default)]
    created_at: String,
    #[serde(default)]
    mounts: BTreeMap<String, u64>,
}

#[derive(Deserialize)]
struct EcsFile {
    #[serde(default)]
    volumes: Option<BTreeMap<String, EcsVolume>>,
}

#[derive(Deserialize)]
struct EcsVolume {
    #[serde(rename = "type", default)]
    fs_type: String,
    #[serde(default)]
    path: String,
    #[serde(default)]
    options: Option<BTreeMap<String, String>>,
    #[serde(rename = "createdAt", default)]
    created_at: String,
    #[serde(default)]
    mounts: Option<BTreeMap<String, Option<u64>>>,
}

/// Serialize the state in berth's format.
pub fn to_bytes(volumes: &Volumes) -> Result<Vec<u8>, serde_json::Error> {
    let file = BerthFile {
        version: VERSION,
        volumes: volumes
            .iter()
            .map(|(name, v)| {
                (
                    name.clone(),
                    BerthVolume {
                        fs_type: v.options.get("type").cloned().unwrap_or_default(),
                        path: v.path.clone(),
                        options: v.options.clone(),
                        created_at: v.created_at.clone(),
                        mounts: v.mounts.clone(),
                    },
                )
            })
            .collect(),
    };
    let mut bytes = serde_json::to_vec_pretty(&file)?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// Parse a state file's bytes in any supported format. `mount_root` gives the mount point of an
/// ECS volume without a recorded path.
pub fn parse(bytes: &[u8], mount_root: &Path) -> Result<Loaded, String> {
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| format!("not valid JSON: {e}"))?;
    let mut warnings = Vec::new();
    if let Some(version) = value.get("version") {
        let file: BerthFile =
            serde_json::from_value(value.clone()).map_err(|e| format!("berth format: {e}"))?;
        if file.version != VERSION {
            return Err(format!(
                "format version {version} is not supported (this berth reads {VERSION} and the \
                 ECS plugin's formats)"
            ));
        }
        let volumes = file
            .volumes
            .into_iter()
            .map(|(name, v)| {
                let mut options = v.options;
                if !v.fs_type.is_empty() {
                    options.entry("type".to_owned()).or_insert(v.fs_type);
                }
                let mut mounts = v.mounts;
                mounts.retain(|_, n| *n > 0);
                let record = VolumeRecord {
                    options,
                    path: v.path,
                    created_at: v.created_at,
                    mounts,
                };
                (name, record)
            })
            .collect();
        return Ok(Loaded {
            volumes,
            format: Format::Berth,
            warnings,
        });
    }
    let file: EcsFile =
        serde_json::from_value(value).map_err(|e| format!("ECS plugin format: {e}"))?;
    let mut format = Format::EcsNoMounts;
    let mut volumes = Volumes::new();
    for (name, v) in file.volumes.unwrap_or_default() {
        let path = if v.path.is_empty() {
            if crate::names::validate_name(&name).is_err() {
                warnings.push(format!(
                    "skipped volume {name:?}: no recorded path and not a valid name"
                ));
                continue;
            }
            mount_root.join(&name)
        } else {
            PathBuf::from(&v.path)
        };
        let mut options = v.options.unwrap_or_default();
        if !v.fs_type.is_empty() {
            options.entry("type".to_owned()).or_insert(v.fs_type);
        }
        let mut mounts = BTreeMap::new();
        for (id, n) in v.mounts.unwrap_or_default() {
            match n {
                None => {
                    format = Format::EcsSet;
                    mounts.insert(id, 1);
                }
                Some(n) => {
                    if format != Format::EcsSet {
                        format = Format::EcsCounts;
                    }
                    // ECS's loader turns 0 (how it decoded a set's null) into 1; so does berth.
                    mounts.insert(id, n.max(1));
                }
            }
        }
        volumes.insert(
            name,
            VolumeRecord {
                options,
                path,
                created_at: v.created_at,
                mounts,
            },
        );
    }
    Ok(Loaded {
        volumes,
        format,
        warnings,
    })
}

/// Load the state file at `path`; a missing file is an empty state.
pub fn load(path: &Path, mount_root: &Path) -> Result<Loaded, Error> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Loaded {
                volumes: Volumes::new(),
                format: Format::Missing,
                warnings: Vec::new(),
            });
        }
        Err(source) => {
            return Err(Error::Io {
                op: "reading state file",
                path: path.to_path_buf(),
                source,
            });
        }
    };
    parse(&bytes, mount_root).map_err(|reason| Error::StateFile {
        path: path.to_path_buf(),
        reason,
    })
}
