//! Mapping the engine-neutral specs to the Docker API's request bodies, field by field:
//! [`create_body`] for a container (`POST /containers/create`) and [`volume_create_body`] for a
//! task-scoped volume (`POST /volumes/create`). Pure functions: no I/O, no defaults of their own
//! beyond what the spec says (an empty list is left out rather than sent empty; port bindings are
//! sent only in `bridge` network mode, where Docker accepts them).

use berth_engine::spec::{ContainerSpec, MountKind, VolumeSpec};
use bollard::models::{
    ContainerCreateBody, DeviceMapping, DeviceRequest, HealthConfig, HostConfig,
    HostConfigLogConfig, Mount, MountType, PortBinding, ResourcesUlimits, VolumeCreateRequest,
};
use std::collections::HashMap;

/// Map the engine-neutral spec to Docker's create body.
pub fn create_body(spec: &ContainerSpec) -> ContainerCreateBody {
    let mut exposed = Vec::new();
    let mut bindings: HashMap<String, Option<Vec<PortBinding>>> = HashMap::new();
    for p in &spec.ports {
        let key = format!("{}/{}", p.container_port, p.protocol);
        exposed.push(key.clone());
        bindings
            .entry(key)
            .or_insert_with(|| Some(Vec::new()))
            .get_or_insert_with(Vec::new)
            .push(PortBinding {
                host_ip: None,
                host_port: Some(p.host_port.map(|h| h.to_string()).unwrap_or_default()),
            });
    }
    let host_config = HostConfig {
        mounts: (!spec.mounts.is_empty()).then(|| {
            spec.mounts
                .iter()
                .map(|m| Mount {
                    typ: Some(match m.kind {
                        MountKind::Bind => MountType::BIND,
                        MountKind::Volume => MountType::VOLUME,
                    }),
                    source: Some(m.source.clone()),
                    target: Some(m.target.clone()),
                    read_only: Some(m.read_only),
                    ..Default::default()
                })
                .collect()
        }),
        volumes_from: (!spec.volumes_from.is_empty()).then(|| spec.volumes_from.clone()),
        links: (!spec.links.is_empty()).then(|| spec.links.clone()),
        port_bindings: (!bindings.is_empty() && spec.network_mode == "bridge").then_some(bindings),
        network_mode: Some(spec.network_mode.clone()),
        cpu_shares: spec.cpu_shares,
        memory: spec.memory_bytes,
        memory_reservation: spec.memory_reservation_bytes,
        readonly_rootfs: Some(spec.readonly_rootfs),
        privileged: Some(spec.privileged),
        ulimits: (!spec.ulimits.is_empty()).then(|| {
            spec.ulimits
                .iter()
                .map(|u| ResourcesUlimits {
                    name: Some(u.name.clone()),
                    soft: Some(u.soft),
                    hard: Some(u.hard),
                })
                .collect()
        }),
        log_config: spec.log_driver.as_ref().map(|d| HostConfigLogConfig {
            typ: Some(d.clone()),
            config: Some(spec.log_options.clone().into_iter().collect()),
        }),
        init: spec.linux.init.then_some(true),
        cap_add: (!spec.linux.cap_add.is_empty()).then(|| spec.linux.cap_add.clone()),
        cap_drop: (!spec.linux.cap_drop.is_empty()).then(|| spec.linux.cap_drop.clone()),
        devices: (!spec.linux.devices.is_empty()).then(|| {
            spec.linux
                .devices
                .iter()
                .map(|d| DeviceMapping {
                    path_on_host: Some(d.host_path.clone()),
                    path_in_container: Some(d.container_path.clone()),
                    cgroup_permissions: Some(d.permissions.clone()),
                })
                .collect()
        }),
        tmpfs: (!spec.linux.tmpfs.is_empty())
            .then(|| spec.linux.tmpfs.clone().into_iter().collect()),
        shm_size: spec.linux.shm_size_bytes,
        memory_swap: spec.linux.memory_swap_bytes,
        memory_swappiness: spec.linux.memory_swappiness,
        dns: (!spec.dns.is_empty()).then(|| spec.dns.clone()),
        dns_search: (!spec.dns_search.is_empty()).then(|| spec.dns_search.clone()),
        extra_hosts: (!spec.extra_hosts.is_empty()).then(|| spec.extra_hosts.clone()),
        sysctls: (!spec.sysctls.is_empty()).then(|| spec.sysctls.clone().into_iter().collect()),
        security_opt: (!spec.security_opt.is_empty()).then(|| spec.security_opt.clone()),
        pid_mode: spec.pid_mode.clone(),
        ipc_mode: spec.ipc_mode.clone(),
        // What `docker run --gpus <n>` sends: any driver, the `gpu` capability.
        device_requests: spec.gpu_count.map(|count| {
            vec![DeviceRequest {
                driver: Some(String::new()),
                count: Some(count),
                device_ids: None,
                capabilities: Some(vec![vec!["gpu".to_string()]]),
                options: Some(HashMap::new()),
            }]
        }),
        ..Default::default()
    };
    ContainerCreateBody {
        image: Some(spec.image.clone()),
        cmd: spec.cmd.clone(),
        entrypoint: spec.entrypoint.clone(),
        env: (!spec.env.is_empty()).then(|| spec.env.clone()),
        labels: Some(spec.labels.clone().into_iter().collect()),
        working_dir: spec.working_dir.clone(),
        user: spec.user.clone(),
        hostname: spec.hostname.clone(),
        exposed_ports: (!exposed.is_empty()).then_some(exposed),
        healthcheck: spec.health.as_ref().map(|h| HealthConfig {
            test: Some(h.test.clone()),
            interval: Some(h.interval_ns),
            timeout: Some(h.timeout_ns),
            retries: Some(h.retries),
            start_period: Some(h.start_period_ns),
            start_interval: None,
        }),
        stop_timeout: spec.stop_timeout_secs.map(i64::from),
        open_stdin: spec.open_stdin.then_some(true),
        tty: spec.tty.then_some(true),
        network_disabled: spec.network_disabled.then_some(true),
        host_config: Some(host_config),
        ..Default::default()
    }
}

/// Map a task-scoped volume to Docker's volume create body.
pub(crate) fn volume_create_body(spec: &VolumeSpec) -> VolumeCreateRequest {
    VolumeCreateRequest {
        name: Some(spec.name.clone()),
        driver: Some(spec.driver.clone()),
        driver_opts: Some(spec.driver_opts.clone().into_iter().collect()),
        labels: Some(spec.labels.clone().into_iter().collect()),
        ..Default::default()
    }
}
