//! One volume of the task: its name and at most one kind (`host`, `dockerVolumeConfiguration`,
//! `efsVolumeConfiguration`; none means a scratch volume), each kind's fields and the rules
//! between them (`autoprovision` only for shared Docker volumes; EFS access points and IAM need
//! transit encryption, and an access point sets the root directory).
//!
//! Invariants: a volume always comes out (an unreadable one is a nameless scratch volume) with a
//! [`VolumeInfo`] for the cross-field checks (unique names, mount points naming defined volumes).
//! Limits: a driver name is only checked for emptiness, and driver options, labels and EFS ids are
//! passed on as written; Docker and the volume driver judge them.

use super::checker::{Checker, key_path};
use super::json::{Json, quote};
use super::rules::{
    DOCKER_VOLUME, EFS_AUTHORIZATION, EFS_VOLUME, HOST_VOLUME, MISSING, NAME_RULE, VOLUME,
    valid_name,
};
use crate::types::{
    DockerVolumeConfiguration, EfsVolumeConfiguration, Volume, VolumeKind, VolumeScope,
};
use std::collections::BTreeMap;

/// What the cross-field checks need to know about a volume.
pub(super) struct VolumeInfo {
    pub(super) path: String,
    pub(super) name: Option<String>,
}

impl Checker {
    pub(super) fn volume(&mut self, path: &str, v: &Json) -> (Volume, VolumeInfo) {
        let mut volume = Volume {
            name: String::new(),
            kind: VolumeKind::Scratch,
        };
        let mut info = VolumeInfo {
            path: path.to_owned(),
            name: None,
        };
        let Some(object) = self.object(path, v) else {
            return (volume, info);
        };
        let mut name_seen = false;
        let mut kind_key: Option<&str> = None;
        for f in self.fields(path, object, &VOLUME) {
            let (p, v) = (f.path.as_str(), f.value);
            if f.key == "name" {
                name_seen = true;
                if let Some(s) = self.string(p, v) {
                    if !valid_name(s) {
                        self.error(
                            p,
                            format!("{} is not a valid volume name; {NAME_RULE}", quote(s)),
                        );
                    }
                    volume.name = s.to_owned();
                    info.name = Some(s.to_owned());
                }
                continue;
            }
            if let Some(first) = kind_key {
                self.error(
                    p,
                    format!(
                        "a volume takes only one of host, dockerVolumeConfiguration or efsVolumeConfiguration; this one already has {first}"
                    ),
                );
                continue;
            }
            kind_key = Some(f.key);
            let kind = match f.key {
                "host" => self.host_volume(p, v),
                "dockerVolumeConfiguration" => self.docker_volume(p, v).map(VolumeKind::Docker),
                "efsVolumeConfiguration" => self.efs_volume(p, v).map(VolumeKind::Efs),
                _ => None,
            };
            if let Some(kind) = kind {
                volume.kind = kind;
            }
        }
        if !name_seen {
            self.error(key_path(path, "name"), MISSING);
        }
        (volume, info)
    }

    fn host_volume(&mut self, path: &str, v: &Json) -> Option<VolumeKind> {
        let object = self.object(path, v)?;
        let mut kind = VolumeKind::Scratch;
        for f in self.fields(path, object, &HOST_VOLUME) {
            if f.key == "sourcePath" {
                let source_path = self.absolute_path(&f.path, f.value)?;
                kind = VolumeKind::Host { source_path };
            }
        }
        Some(kind)
    }

    fn docker_volume(&mut self, path: &str, v: &Json) -> Option<DockerVolumeConfiguration> {
        let object = self.object(path, v)?;
        let mut config = DockerVolumeConfiguration {
            scope: VolumeScope::Task,
            autoprovision: false,
            driver: "local".to_owned(),
            driver_opts: BTreeMap::new(),
            labels: BTreeMap::new(),
        };
        let mut scope_ok = true;
        let mut autoprovision_path = None;
        for f in self.fields(path, object, &DOCKER_VOLUME) {
            let (p, v) = (f.path.as_str(), f.value);
            match f.key {
                "scope" => match self.string(p, v) {
                    Some("task") => config.scope = VolumeScope::Task,
                    Some("shared") => config.scope = VolumeScope::Shared,
                    Some(other) => {
                        self.error(
                            p,
                            format!("unknown scope {}; use task or shared", quote(other)),
                        );
                        scope_ok = false;
                    }
                    None => scope_ok = false,
                },
                "autoprovision" => {
                    config.autoprovision = self.boolean(p, v).unwrap_or(false);
                    autoprovision_path = Some(p.to_owned());
                }
                "driver" => {
                    if let Some(d) = self.non_empty_string(p, v) {
                        config.driver = d;
                    }
                }
                "driverOpts" => config.driver_opts = self.string_map(p, v).unwrap_or_default(),
                "labels" => config.labels = self.string_map(p, v).unwrap_or_default(),
                _ => {}
            }
        }
        if let Some(p) = autoprovision_path
            && config.autoprovision
            && scope_ok
            && config.scope != VolumeScope::Shared
        {
            self.error(
                p,
                "autoprovision only applies to \"scope\": \"shared\" volumes; task-scoped volumes are always created",
            );
        }
        Some(config)
    }

    fn efs_volume(&mut self, path: &str, v: &Json) -> Option<EfsVolumeConfiguration> {
        let object = self.object(path, v)?;
        let mut config = EfsVolumeConfiguration {
            file_system_id: String::new(),
            root_directory: "/".to_owned(),
            transit_encryption: false,
            access_point_id: None,
            iam: false,
        };
        let mut id_seen = false;
        let mut root_path = None;
        for f in self.fields(path, object, &EFS_VOLUME) {
            let (p, v) = (f.path.as_str(), f.value);
            match f.key {
                "fileSystemId" => {
                    id_seen = true;
                    if let Some(id) = self.non_empty_string(p, v) {
                        config.file_system_id = id;
                    }
                }
                "rootDirectory" => {
                    if let Some(root) = self.absolute_path(p, v) {
                        config.root_directory = root;
                        root_path = Some(p.to_owned());
                    }
                }
                "transitEncryption" => {
                    config.transit_encryption = self.enabled(p, v).unwrap_or(false);
                }
                "authorizationConfig" => {
                    let Some(auth) = self.object(p, v) else {
                        continue;
                    };
                    for g in self.fields(p, auth, &EFS_AUTHORIZATION) {
                        match g.key {
                            "accessPointId" => {
                                config.access_point_id = self.non_empty_string(&g.path, g.value);
                            }
                            "iam" => config.iam = self.enabled(&g.path, g.value).unwrap_or(false),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        if !id_seen {
            self.error(key_path(path, "fileSystemId"), MISSING);
        }
        if (config.access_point_id.is_some() || config.iam) && !config.transit_encryption {
            self.error(
                key_path(path, "transitEncryption"),
                "must be ENABLED when authorizationConfig uses an access point or IAM",
            );
        }
        if let Some(p) = root_path
            && config.access_point_id.is_some()
            && config.root_directory != "/"
        {
            self.error(
                p,
                "must be left out or \"/\" when authorizationConfig names an access point (the access point sets the root)",
            );
        }
        Some(config)
    }

    /// `"ENABLED"` / `"DISABLED"`.
    fn enabled(&mut self, path: &str, v: &Json) -> Option<bool> {
        match self.string(path, v)? {
            "ENABLED" => Some(true),
            "DISABLED" => Some(false),
            other => {
                self.error(
                    path,
                    format!("must be ENABLED or DISABLED, found {}", quote(other)),
                );
                None
            }
        }
    }
}
