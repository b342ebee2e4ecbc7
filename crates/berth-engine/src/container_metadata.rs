//! The container metadata file, as the ECS agent writes it with `ECS_ENABLE_CONTAINER_METADATA`:
//! one JSON file per container, in a host directory bind-mounted into the container, whose path
//! the container finds in `ECS_CONTAINER_METADATA_FILE`. Pure (no I/O): the file's JSON in each
//! phase, its paths, and the mount and variable added to the create spec; the actor writes the
//! files (through `berth_fs::write_atomic`, a temporary file renamed over the target as ECS does)
//! and the task cleanup removes them with the task directory.
//!
//! Facts from the ECS agent (`agent/containermetadata`: `manager.go`, `parse_metadata.go`,
//! `types.go`, `utils.go`, `write_metadata_unix.go`; `agent/engine/docker_task_engine.go`):
//! - the host file is `<dir>/ecs-container-metadata.json` with `<dir>` the container's own
//!   directory (ECS: `DATA_DIR/metadata/<task id>/<container name>/`; berth:
//!   `DATA_DIR/tasks/<task id>/metadata/<container name>/`, so the task cleanup removes it); the
//!   directory, not the file, is bind-mounted (read-write, as ECS mounts it) at
//!   `/opt/ecs/metadata/<uuid>/`, so each rename shows in the container at once;
//! - the first file is written before the container is created, from what the agent knows:
//!   `Cluster`, `ContainerInstanceARN`, `TaskARN`, `TaskDefinitionFamily`,
//!   `TaskDefinitionRevision`, `ContainerName`, `AvailabilityZone` and the host's addresses. Its
//!   status is ECS's `INITIAL`, which is the zero of Go's enum and so omitted by `omitempty`: the
//!   first file has **no** `MetadataFileStatus` key at all;
//! - once the container runs, the file is rewritten from `docker inspect`: `ContainerID`,
//!   `DockerContainerName` (Docker's name, with its leading `/`), `ImageID`, `ImageName`
//!   (`Config.Image`), `PortMappings`, `Networks`, and `MetadataFileStatus: "READY"`. A container
//!   no longer running is not rewritten;
//! - every key is `omitempty`, in the Go struct's order; the text is Go's `MarshalIndent` with a
//!   tab, without a final newline. A port mapping has no `omitempty`: `ContainerPort`,
//!   `ContainerPortRange` (`""`), `HostPort`, `BindIp`, `Protocol` (`tcp`/`udp`). A network is
//!   `NetworkMode` (Docker's network name) and `IPv4Addresses`: one element, Docker's address,
//!   which is `""` where Docker has none (host mode); with no network listed (a container joined
//!   to another's network), its `HostConfig.NetworkMode` (`container:<id>`) and `[""]`;
//! - the agent's own containers get no file (berth: the pause container); a file that cannot be
//!   written is a warning, and the container is created without the mount and the variable.
//!
//! The file has no timestamps. IPv6 (`HostIPv6Address`, `IPv6Addresses`) is not written: berth's
//! inspect details carry IPv4 only.

use crate::Identity;
use crate::runtime::{BoundPort, ContainerDetails};
use crate::spec::{ContainerSpec, MountKind, MountSpec};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// The variable that gives the container the file's path.
pub const ENV: &str = "ECS_CONTAINER_METADATA_FILE";
/// The file's name, on the host and in the container.
pub const FILE_NAME: &str = "ecs-container-metadata.json";
/// Where the directories are mounted in containers (one `<uuid>` below it each).
pub const MOUNT_ROOT: &str = "/opt/ecs/metadata";
/// `MetadataFileStatus` once the container runs.
pub const READY: &str = "READY";

/// What the operator configured for the file (`--container-metadata`): the host's addresses
/// (ECS takes them from the EC2 instance metadata).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Settings {
    /// `HostPrivateIPv4Address`; omitted when None.
    pub host_private_ipv4: Option<String>,
    /// `HostPublicIPv4Address`; omitted when None.
    pub host_public_ipv4: Option<String>,
}

/// One container's file on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    /// `DATA_DIR/tasks/<task id>/metadata/<container>`: bind-mounted into the container.
    pub dir: PathBuf,
    /// `…/ecs-container-metadata.json`
    pub file: PathBuf,
}

impl Paths {
    pub fn new(data_dir: &Path, task_id: &str, container: &str) -> Self {
        let dir = crate::spec::task_dir(data_dir, task_id)
            .join("metadata")
            .join(container);
        Paths {
            file: dir.join(FILE_NAME),
            dir,
        }
    }
}

/// The directory's name under [`MOUNT_ROOT`] in the container: a UUID, as ECS uses, so it cannot
/// meet a mount of the user's. ECS draws a random one at each create; berth derives it from the
/// task id and the container's name (pure, and the same for a create retried after a restart).
pub fn mount_uuid(task_id: &str, container: &str) -> String {
    let mut h = Sha256::new();
    for p in ["berth-container-metadata", task_id, container] {
        h.update(p.as_bytes());
        h.update([0]);
    }
    let hex: String = h
        .finalize()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// The file's path inside the container (the value of [`ENV`]).
pub fn container_path(task_id: &str, container: &str) -> String {
    format!(
        "{MOUNT_ROOT}/{}/{FILE_NAME}",
        mount_uuid(task_id, container)
    )
}

/// Add the directory's bind mount and [`ENV`] to a container's create spec (appended after the
/// definition's environment, as ECS appends it, so Docker gives the container this value).
pub fn apply(spec: &mut ContainerSpec, paths: &Paths, task_id: &str, container: &str) {
    spec.mounts.push(MountSpec {
        kind: MountKind::Bind,
        source: paths.dir.display().to_string(),
        target: format!("{MOUNT_ROOT}/{}", mount_uuid(task_id, container)),
        read_only: false,
    });
    spec.env
        .push(format!("{ENV}={}", container_path(task_id, container)));
}

/// What the task contributes to every file of its containers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskFacts {
    pub identity: Identity,
    pub settings: Settings,
    pub task_id: String,
    pub family: String,
    pub revision: u32,
}

impl TaskFacts {
    pub fn new(identity: &Identity, settings: &Settings, state: &crate::TaskState) -> Self {
        TaskFacts {
            identity: identity.clone(),
            settings: settings.clone(),
            task_id: state.id.clone(),
            family: state.definition.family.clone(),
            revision: state.definition.revision,
        }
    }
}

/// What `docker inspect` says of a running container, for the READY file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DockerFacts {
    pub id: String,
    /// Docker's name, as inspect gives it (with the leading `/`).
    pub name: String,
    pub image_name: String,
    /// The network mode the container was created with (when Docker lists no network).
    pub network_mode: String,
    pub details: ContainerDetails,
}

/// ECS's port mapping in the file (no `omitempty` on any field).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
struct PortMapping {
    container_port: u16,
    container_port_range: String,
    host_port: u16,
    #[serde(rename = "BindIp")]
    bind_ip: String,
    protocol: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct Network {
    #[serde(rename = "NetworkMode", skip_serializing_if = "String::is_empty")]
    network_mode: String,
    #[serde(rename = "IPv4Addresses", skip_serializing_if = "Vec::is_empty")]
    ipv4_addresses: Vec<String>,
}

/// The file's keys, in ECS's order, each omitted when empty.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
struct Metadata {
    #[serde(rename = "Cluster", skip_serializing_if = "String::is_empty")]
    cluster: String,
    #[serde(
        rename = "ContainerInstanceARN",
        skip_serializing_if = "String::is_empty"
    )]
    container_instance_arn: String,
    #[serde(rename = "TaskARN", skip_serializing_if = "String::is_empty")]
    task_arn: String,
    #[serde(
        rename = "TaskDefinitionFamily",
        skip_serializing_if = "String::is_empty"
    )]
    task_definition_family: String,
    #[serde(
        rename = "TaskDefinitionRevision",
        skip_serializing_if = "String::is_empty"
    )]
    task_definition_revision: String,
    #[serde(rename = "ContainerID", skip_serializing_if = "String::is_empty")]
    container_id: String,
    #[serde(rename = "ContainerName", skip_serializing_if = "String::is_empty")]
    container_name: String,
    #[serde(
        rename = "DockerContainerName",
        skip_serializing_if = "String::is_empty"
    )]
    docker_container_name: String,
    #[serde(rename = "ImageID", skip_serializing_if = "String::is_empty")]
    image_id: String,
    #[serde(rename = "ImageName", skip_serializing_if = "String::is_empty")]
    image_name: String,
    #[serde(rename = "PortMappings", skip_serializing_if = "Vec::is_empty")]
    port_mappings: Vec<PortMapping>,
    #[serde(rename = "Networks", skip_serializing_if = "Vec::is_empty")]
    networks: Vec<Network>,
    #[serde(rename = "MetadataFileStatus", skip_serializing_if = "Option::is_none")]
    metadata_file_status: Option<&'static str>,
    #[serde(rename = "AvailabilityZone", skip_serializing_if = "String::is_empty")]
    availability_zone: String,
    #[serde(
        rename = "HostPrivateIPv4Address",
        skip_serializing_if = "String::is_empty"
    )]
    host_private_ipv4_address: String,
    #[serde(
        rename = "HostPublicIPv4Address",
        skip_serializing_if = "String::is_empty"
    )]
    host_public_ipv4_address: String,
}

fn base(task: &TaskFacts, container: &str) -> Metadata {
    Metadata {
        cluster: task.identity.cluster.clone(),
        container_instance_arn: task.identity.container_instance_arn(),
        task_arn: task.identity.task_arn(&task.task_id),
        task_definition_family: task.family.to_string(),
        task_definition_revision: task.revision.to_string(),
        container_name: container.to_string(),
        availability_zone: task.identity.availability_zone.clone(),
        host_private_ipv4_address: task.settings.host_private_ipv4.clone().unwrap_or_default(),
        host_public_ipv4_address: task.settings.host_public_ipv4.clone().unwrap_or_default(),
        ..Metadata::default()
    }
}

/// Go's `json.MarshalIndent(v, "", "\t")`: tab-indented, `": "` after keys, no
/// final newline.
fn render(m: &Metadata) -> Vec<u8> {
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b"\t");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
    // Serializing strings, numbers and vectors of them into memory cannot fail.
    if m.serialize(&mut ser).is_err() {
        return b"{}".to_vec();
    }
    out
}

/// The file written before the container is created (ECS's `INITIAL` phase: no
/// `MetadataFileStatus`).
pub fn initial(task: &TaskFacts, container: &str) -> Vec<u8> {
    render(&base(task, container))
}

fn port_mapping(p: &BoundPort) -> PortMapping {
    PortMapping {
        container_port: p.container_port,
        container_port_range: String::new(),
        host_port: p.host_port.unwrap_or(0),
        bind_ip: p.host_ip.clone().unwrap_or_default(),
        protocol: if p.protocol == "udp" { "udp" } else { "tcp" }.to_string(),
    }
}

/// The file once the container runs (`MetadataFileStatus: READY`).
pub fn ready(task: &TaskFacts, container: &str, docker: &DockerFacts) -> Vec<u8> {
    let networks = if docker.details.networks.is_empty() {
        vec![Network {
            network_mode: docker.network_mode.clone(),
            ipv4_addresses: vec![String::new()],
        }]
    } else {
        docker
            .details
            .networks
            .iter()
            .map(|n| Network {
                network_mode: n.network.clone(),
                ipv4_addresses: vec![n.ipv4_addresses.first().cloned().unwrap_or_default()],
            })
            .collect()
    };
    let m = Metadata {
        container_id: docker.id.clone(),
        docker_container_name: docker.name.clone(),
        image_id: docker.details.image_id.clone().unwrap_or_default(),
        image_name: docker.image_name.clone(),
        port_mappings: docker.details.ports.iter().map(port_mapping).collect(),
        networks,
        metadata_file_status: Some(READY),
        ..base(task, container)
    };
    render(&m)
}

/// Whether a file's content says READY (a file an agent wrote before it restarted).
pub fn is_ready(content: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(content)
        .ok()
        .and_then(|v| {
            v.get("MetadataFileStatus")
                .and_then(|s| s.as_str())
                .map(|s| s == READY)
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::NetworkAttachment;

    fn identity() -> Identity {
        Identity {
            container_instance_id: "0123456789abcdef0123456789abcdef".into(),
            ..Identity::default()
        }
    }

    fn settings() -> Settings {
        Settings {
            host_private_ipv4: Some("10.0.0.5".into()),
            host_public_ipv4: None,
        }
    }

    const TASK: &str = "fedcba9876543210fedcba9876543210";

    fn facts(identity: &Identity, settings: &Settings) -> TaskFacts {
        TaskFacts {
            identity: identity.clone(),
            settings: settings.clone(),
            task_id: TASK.into(),
            family: "web".into(),
            revision: 3,
        }
    }

    #[test]
    fn the_first_file_has_what_the_agent_knows_and_no_status() {
        let (id, s) = (identity(), settings());
        let text = String::from_utf8(initial(&facts(&id, &s), "app")).expect("utf-8");
        let expected = "{\n\
            \t\"Cluster\": \"default\",\n\
            \t\"ContainerInstanceARN\": \"arn:aws:ecs:local-1:000000000000:container-instance/default/0123456789abcdef0123456789abcdef\",\n\
            \t\"TaskARN\": \"arn:aws:ecs:local-1:000000000000:task/default/fedcba9876543210fedcba9876543210\",\n\
            \t\"TaskDefinitionFamily\": \"web\",\n\
            \t\"TaskDefinitionRevision\": \"3\",\n\
            \t\"ContainerName\": \"app\",\n\
            \t\"AvailabilityZone\": \"local-1a\",\n\
            \t\"HostPrivateIPv4Address\": \"10.0.0.5\"\n\
            }";
        assert_eq!(text, expected);
        assert!(!is_ready(text.as_bytes()));
    }

    fn bridge_container() -> DockerFacts {
        DockerFacts {
            id: "c0ffee".into(),
            name: "/berth-web-3-app-fedcba987654".into(),
            image_name: "berth-test/busybox:latest".into(),
            network_mode: "bridge".into(),
            details: ContainerDetails {
                image_id: Some("sha256:abc".into()),
                networks: vec![NetworkAttachment {
                    network: "bridge".into(),
                    ipv4_addresses: vec!["172.17.0.3".into()],
                }],
                ports: vec![
                    BoundPort {
                        container_port: 80,
                        protocol: "tcp".into(),
                        host_port: Some(32768),
                        host_ip: Some("0.0.0.0".into()),
                    },
                    BoundPort {
                        container_port: 53,
                        protocol: "udp".into(),
                        host_port: Some(5353),
                        host_ip: None,
                    },
                ],
                ..ContainerDetails::default()
            },
        }
    }

    #[test]
    fn the_ready_file_adds_dockers_facts_in_ecs_order() {
        let (id, s) = (identity(), settings());
        let text =
            String::from_utf8(ready(&facts(&id, &s), "app", &bridge_container())).expect("utf-8");
        let expected = "{\n\
            \t\"Cluster\": \"default\",\n\
            \t\"ContainerInstanceARN\": \"arn:aws:ecs:local-1:000000000000:container-instance/default/0123456789abcdef0123456789abcdef\",\n\
            \t\"TaskARN\": \"arn:aws:ecs:local-1:000000000000:task/default/fedcba9876543210fedcba9876543210\",\n\
            \t\"TaskDefinitionFamily\": \"web\",\n\
            \t\"TaskDefinitionRevision\": \"3\",\n\
            \t\"ContainerID\": \"c0ffee\",\n\
            \t\"ContainerName\": \"app\",\n\
            \t\"DockerContainerName\": \"/berth-web-3-app-fedcba987654\",\n\
            \t\"ImageID\": \"sha256:abc\",\n\
            \t\"ImageName\": \"berth-test/busybox:latest\",\n\
            \t\"PortMappings\": [\n\
            \t\t{\n\
            \t\t\t\"ContainerPort\": 80,\n\
            \t\t\t\"ContainerPortRange\": \"\",\n\
            \t\t\t\"HostPort\": 32768,\n\
            \t\t\t\"BindIp\": \"0.0.0.0\",\n\
            \t\t\t\"Protocol\": \"tcp\"\n\
            \t\t},\n\
            \t\t{\n\
            \t\t\t\"ContainerPort\": 53,\n\
            \t\t\t\"ContainerPortRange\": \"\",\n\
            \t\t\t\"HostPort\": 5353,\n\
            \t\t\t\"BindIp\": \"\",\n\
            \t\t\t\"Protocol\": \"udp\"\n\
            \t\t}\n\
            \t],\n\
            \t\"Networks\": [\n\
            \t\t{\n\
            \t\t\t\"NetworkMode\": \"bridge\",\n\
            \t\t\t\"IPv4Addresses\": [\n\
            \t\t\t\t\"172.17.0.3\"\n\
            \t\t\t]\n\
            \t\t}\n\
            \t],\n\
            \t\"MetadataFileStatus\": \"READY\",\n\
            \t\"AvailabilityZone\": \"local-1a\",\n\
            \t\"HostPrivateIPv4Address\": \"10.0.0.5\"\n\
            }";
        assert_eq!(text, expected);
        assert!(is_ready(text.as_bytes()));
    }

    #[test]
    fn host_mode_and_joined_networks_keep_ecs_empty_address() {
        let (id, s) = (identity(), Settings::default());
        let mut host = bridge_container();
        host.details.ports.clear();
        host.details.networks = vec![NetworkAttachment {
            network: "host".into(),
            ipv4_addresses: vec![],
        }];
        let v: serde_json::Value =
            serde_json::from_slice(&ready(&facts(&id, &s), "app", &host)).expect("json");
        assert_eq!(
            v["Networks"],
            serde_json::json!([{"NetworkMode": "host", "IPv4Addresses": [""]}])
        );
        assert!(v.get("PortMappings").is_none(), "{v}");
        assert!(v.get("HostPrivateIPv4Address").is_none(), "{v}");

        let mut joined = host.clone();
        joined.details.networks.clear();
        joined.network_mode = "container:berth-web-3-pause-fedcba987654".into();
        let v: serde_json::Value =
            serde_json::from_slice(&ready(&facts(&id, &s), "app", &joined)).expect("json");
        assert_eq!(
            v["Networks"],
            serde_json::json!([{"NetworkMode": "container:berth-web-3-pause-fedcba987654", "IPv4Addresses": [""]}])
        );
    }

    #[test]
    fn the_directory_is_mounted_under_a_stable_uuid_and_named_in_the_environment() {
        let paths = Paths::new(Path::new("/var/lib/berth"), TASK, "app");
        assert_eq!(
            paths.file,
            PathBuf::from(format!(
                "/var/lib/berth/tasks/{TASK}/metadata/app/ecs-container-metadata.json"
            ))
        );
        let uuid = mount_uuid(TASK, "app");
        assert_eq!(uuid.len(), 36);
        assert_eq!(uuid, mount_uuid(TASK, "app"));
        assert_ne!(uuid, mount_uuid(TASK, "other"));
        let mut spec = ContainerSpec {
            env: vec!["A=1".into()],
            ..ContainerSpec::default()
        };
        apply(&mut spec, &paths, TASK, "app");
        assert_eq!(
            spec.env,
            vec![
                "A=1".to_string(),
                format!(
                    "ECS_CONTAINER_METADATA_FILE=/opt/ecs/metadata/{uuid}/ecs-container-metadata.json"
                )
            ]
        );
        assert_eq!(
            spec.mounts,
            vec![MountSpec {
                kind: MountKind::Bind,
                source: format!("/var/lib/berth/tasks/{TASK}/metadata/app"),
                target: format!("/opt/ecs/metadata/{uuid}"),
                read_only: false,
            }]
        );
    }
}
