//! Reading what the Engine reports into the engine's types: container inspect
//! ([`ContainerInfo`], and [`details_of`] for the metadata endpoint), network inspect, the list of
//! managed containers ([`ManagedContainer`]), Docker's timestamps and health statuses.
//!
//! Pure functions over bollard's response models, no I/O. Missing fields are left empty (or `None`)
//! rather than turned into errors: the Engine omits what it does not know, and a partial answer is
//! still worth reporting. Docker's zero time (`0001-01-01T00:00:00Z`) means "unset".

use berth_engine::runtime::{
    BoundPort, ContainerDetails, ContainerInfo, HealthDetails, ImageSummary, IpamConfig,
    MountDetails, NetworkAttachment, NetworkInfo,
};
use berth_engine::spec::{LABEL_DATA_DIR, LABEL_TASK};
use berth_engine::state::{Health, Millis};
use bollard::models::{
    ContainerInspectResponse, ContainerSummary, HealthStatusEnum, NetworkInspect,
};

/// A container berth created, as listed by [`crate::DockerRuntime::list_managed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedContainer {
    pub id: String,
    pub name: String,
    /// Its `berth.task` label.
    pub task: String,
    /// Its `berth.data-dir` label (absent on containers of older berths).
    pub data_dir: Option<String>,
}

/// A listed container as a [`ManagedContainer`].
pub(crate) fn managed_of(c: ContainerSummary) -> ManagedContainer {
    let name = c
        .names
        .and_then(|n| n.into_iter().next())
        .unwrap_or_default()
        .trim_start_matches('/')
        .to_string();
    let mut labels = c.labels.unwrap_or_default();
    ManagedContainer {
        id: c.id.unwrap_or_default(),
        name,
        task: labels.remove(LABEL_TASK).unwrap_or_default(),
        data_dir: labels.remove(LABEL_DATA_DIR),
    }
}

/// A listed image as the engine's [`ImageSummary`]: Docker's `<none>:<none>` placeholder is not a
/// name; `Created` is in seconds.
pub(crate) fn image_of(i: bollard::models::ImageSummary) -> ImageSummary {
    ImageSummary {
        id: i.id,
        repo_tags: i
            .repo_tags
            .into_iter()
            .filter(|t| t != "<none>:<none>" && !t.is_empty())
            .collect(),
        size: u64::try_from(i.size).unwrap_or(0),
        created: i.created.saturating_mul(1000),
        labels: i.labels.into_iter().collect(),
    }
}

/// A listed container (running or not) as the engine's
/// [`berth_engine::runtime::ContainerSummary`].
pub(crate) fn listed_of(c: ContainerSummary) -> berth_engine::runtime::ContainerSummary {
    let running = matches!(
        c.state,
        Some(bollard::models::ContainerSummaryStateEnum::RUNNING)
    );
    berth_engine::runtime::ContainerSummary {
        name: c
            .names
            .and_then(|n| n.into_iter().next())
            .unwrap_or_default()
            .trim_start_matches('/')
            .to_string(),
        id: c.id.unwrap_or_default(),
        image: c.image.unwrap_or_default(),
        image_id: c.image_id.unwrap_or_default(),
        running,
        labels: c.labels.unwrap_or_default().into_iter().collect(),
    }
}

/// A container inspect answer as the engine's [`ContainerInfo`]: the exit code only once the
/// container has finished.
pub(crate) fn info_of(r: ContainerInspectResponse) -> ContainerInfo {
    let state = r.state.unwrap_or_default();
    let finished_at = state.finished_at.as_deref().and_then(parse_docker_time);
    let running = state.running.unwrap_or(false);
    let removing = state.status == Some(bollard::models::ContainerStateStatusEnum::REMOVING);
    ContainerInfo {
        id: r.id.unwrap_or_default(),
        name: r
            .name
            .unwrap_or_default()
            .trim_start_matches('/')
            .to_string(),
        running,
        exit_code: if running || finished_at.is_none() {
            None
        } else {
            state.exit_code
        },
        started_at: state.started_at.as_deref().and_then(parse_docker_time),
        finished_at,
        health: health_of(state.health.and_then(|h| h.status)),
        labels: r
            .config
            .and_then(|c| c.labels)
            .unwrap_or_default()
            .into_iter()
            .collect(),
        removing,
        oom_killed: state.oom_killed.unwrap_or(false),
        state_error: state.error.filter(|e| !e.is_empty()),
    }
}

/// A network inspect answer as the engine's [`NetworkInfo`] (`name` when Docker omits it).
pub(crate) fn network_info_of(n: NetworkInspect, name: &str) -> NetworkInfo {
    NetworkInfo {
        name: n.name.unwrap_or_else(|| name.to_string()),
        ipam: n
            .ipam
            .and_then(|i| i.config)
            .unwrap_or_default()
            .into_iter()
            .map(|c| IpamConfig {
                subnet: c.subnet.filter(|s| !s.is_empty()),
                gateway: c.gateway.filter(|g| !g.is_empty()),
            })
            .collect(),
        bridge_interface: n
            .options
            .and_then(|o| o.get("com.docker.network.bridge.name").cloned()),
    }
}

/// Parse Docker's RFC 3339 timestamps; the zero time (`0001-01-01T00:00:00Z`) means unset.
pub fn parse_docker_time(s: &str) -> Option<Millis> {
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()?;
    if t.year() <= 1 {
        return None;
    }
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}

fn health_of(status: Option<HealthStatusEnum>) -> Option<Health> {
    match status? {
        HealthStatusEnum::HEALTHY => Some(Health::Healthy),
        HealthStatusEnum::UNHEALTHY => Some(Health::Unhealthy),
        HealthStatusEnum::STARTING => Some(Health::Starting),
        HealthStatusEnum::EMPTY | HealthStatusEnum::NONE => None,
    }
}

/// The metadata endpoint's view of `docker inspect`: image id, networks, bound ports, health
/// result, mounts. Missing parts are left empty, never an error.
pub fn details_of(r: bollard::models::ContainerInspectResponse) -> ContainerDetails {
    let settings = r.network_settings.unwrap_or_default();
    let mut networks: Vec<NetworkAttachment> = settings
        .networks
        .unwrap_or_default()
        .into_iter()
        .map(|(network, ep)| NetworkAttachment {
            network,
            ipv4_addresses: ep
                .ip_address
                .filter(|a| !a.is_empty())
                .into_iter()
                .collect(),
        })
        .collect();
    networks.sort_by(|a, b| a.network.cmp(&b.network));
    let mut ports = Vec::new();
    for (key, bindings) in settings.ports.unwrap_or_default() {
        let (port, protocol) = key.split_once('/').unwrap_or((key.as_str(), "tcp"));
        let Ok(container_port) = port.parse::<u16>() else {
            continue;
        };
        for b in bindings.unwrap_or_default() {
            ports.push(BoundPort {
                container_port,
                protocol: protocol.to_string(),
                host_port: b.host_port.as_deref().and_then(|p| p.parse().ok()),
                host_ip: b.host_ip.filter(|h| !h.is_empty()),
            });
        }
    }
    ports.sort_by(|a, b| {
        (a.container_port, &a.protocol, &a.host_ip).cmp(&(
            b.container_port,
            &b.protocol,
            &b.host_ip,
        ))
    });
    let health = r.state.and_then(|s| s.health).map(|h| {
        let status = health_of(h.status).unwrap_or_default();
        let log = h.log.unwrap_or_default();
        let last = log.last();
        // The trailing run of results with the same outcome (pass or fail) began the status.
        let passed = |e: &bollard::models::HealthcheckResult| e.exit_code == Some(0);
        let since = last.and_then(|l| {
            let outcome = passed(l);
            log.iter()
                .rev()
                .take_while(|e| passed(e) == outcome)
                .last()
                .and_then(|e| e.end.as_deref().and_then(parse_docker_time))
        });
        HealthDetails {
            status,
            since,
            exit_code: last.and_then(|l| l.exit_code),
            output: last.and_then(|l| l.output.clone()),
        }
    });
    let mounts = r
        .mounts
        .unwrap_or_default()
        .into_iter()
        .map(|m| MountDetails {
            name: m.name.filter(|n| !n.is_empty()),
            source: m.source.filter(|s| !s.is_empty()),
            destination: m.destination.unwrap_or_default(),
        })
        .collect();
    let log = r.host_config.and_then(|h| h.log_config);
    ContainerDetails {
        log_driver: log
            .as_ref()
            .and_then(|l| l.typ.clone())
            .filter(|t| !t.is_empty()),
        log_options: log
            .and_then(|l| l.config)
            .unwrap_or_default()
            .into_iter()
            .collect(),
        image_id: r.image.filter(|i| !i.is_empty()),
        networks,
        ports,
        health,
        mounts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_zero_time_is_unset() {
        assert_eq!(parse_docker_time("0001-01-01T00:00:00Z"), None);
        assert_eq!(
            parse_docker_time("2026-11-30T01:00:00.5Z"),
            Some(1_796_000_400_500)
        );
    }
}
