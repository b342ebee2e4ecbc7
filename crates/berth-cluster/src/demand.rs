//! What a task reserves on a node, from its definition, as ECS counts it: its static host ports
//! ([`host_ports`]), and the task-level `cpu`
//! and `memory` when given ("256" CPU units or "0.5 vCPU"; "512" MiB or "1 GB"), else the sum
//! over containers of `cpu` and of `memoryReservation` (the soft limit is what ECS subtracts from
//! an instance when it is set) or else `memory`. A container without either reserves nothing.
//!
//! The task-level strings were checked for form by berth-model's parser; a value that still does
//! not read (a definition stored by someone else) is an error naming the field.

use crate::record::Resources;
use berth_model::{NetworkMode, TaskDefinition};

/// The task's reservation, or an error naming `cpu`/`memory` and the value.
pub fn of(def: &TaskDefinition) -> Result<Resources, String> {
    let cpu = match def.cpu.as_deref() {
        Some(text) => cpu_units(text).ok_or_else(|| {
            format!("cpu: {text:?} is not CPU units (\"256\") or vCPUs (\"0.5 vCPU\")")
        })?,
        None => def
            .container_definitions
            .iter()
            .map(|c| u64::from(c.cpu.unwrap_or(0)))
            .sum(),
    };
    let memory_mib = match def.memory.as_deref() {
        Some(text) => memory_mib(text)
            .ok_or_else(|| format!("memory: {text:?} is not MiB (\"512\") or GB (\"1 GB\")"))?,
        None => def
            .container_definitions
            .iter()
            .map(|c| c.memory_reservation.or(c.memory).unwrap_or(0))
            .sum(),
    };
    Ok(Resources { cpu, memory_mib })
}

/// The host ports a task holds on its node while it runs, as `"tcp/80"`, in ECS's accounting
/// (`RESOURCE:PORTS`): in `bridge` mode every mapping with a static `hostPort`; in `host` mode every
/// `containerPort` (it is the host's); in `awsvpc` every `containerPort` too, since berth publishes
/// each mapping of the task's namespace on the host at its container port; none in `none` mode.
/// Sorted, without repeats.
pub fn host_ports(def: &TaskDefinition) -> Vec<String> {
    let mut out: Vec<String> = def
        .container_definitions
        .iter()
        .flat_map(|c| &c.port_mappings)
        .filter_map(|m| {
            let port = match def.network_mode {
                NetworkMode::Bridge => m.host_port.filter(|p| *p != 0)?,
                NetworkMode::Host | NetworkMode::Awsvpc => m.container_port,
                NetworkMode::None => return None,
            };
            Some(format!("{}/{port}", m.protocol.as_str()))
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// "256" → 256, "0.5 vCPU" → 512 (1024 units per vCPU), case-insensitive, space optional.
pub fn cpu_units(text: &str) -> Option<u64> {
    let lower = text.trim().to_ascii_lowercase();
    match lower.strip_suffix("vcpu") {
        Some(v) => scaled(v.trim(), 1024.0),
        None => lower.parse().ok(),
    }
}

/// "512" → 512, "1 GB" → 1024 (MiB per GB, as ECS converts), case-insensitive, space optional.
pub fn memory_mib(text: &str) -> Option<u64> {
    let lower = text.trim().to_ascii_lowercase();
    match lower.strip_suffix("gb") {
        Some(v) => scaled(v.trim(), 1024.0),
        None => lower.parse().ok(),
    }
}

fn scaled(number: &str, factor: f64) -> Option<u64> {
    let v: f64 = number.parse().ok()?;
    let scaled = (v * factor).round();
    // In range and not negative or NaN: the cast below is exact for these values.
    (scaled.is_finite() && (0.0..=1e15).contains(&scaled)).then(|| {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let n = scaled as u64;
        n
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(json: &str) -> TaskDefinition {
        berth_model::parse(json).expect("valid").definition
    }

    #[test]
    fn task_level_amounts_win() {
        let d = def(
            r#"{"family":"f","cpu":"0.5 vCPU","memory":"1 GB","containerDefinitions":[{"name":"a","image":"i","cpu":10,"memory":64}]}"#,
        );
        assert_eq!(
            of(&d).unwrap(),
            Resources {
                cpu: 512,
                memory_mib: 1024
            }
        );
    }

    #[test]
    fn containers_add_up_with_the_soft_limit_first() {
        let d = def(r#"{"family":"f","containerDefinitions":[
                {"name":"a","image":"i","cpu":128,"memory":256,"memoryReservation":64},
                {"name":"b","image":"i","cpu":256,"memory":128},
                {"name":"c","image":"i"}]}"#);
        assert_eq!(
            of(&d).unwrap(),
            Resources {
                cpu: 384,
                memory_mib: 192
            }
        );
    }

    #[test]
    fn host_ports_are_the_static_ones_of_the_network_mode() {
        let d = def(r#"{"family":"f","containerDefinitions":[
                {"name":"a","image":"i","portMappings":[{"containerPort":80,"hostPort":8080},{"containerPort":81},{"containerPort":53,"hostPort":53,"protocol":"udp"}]},
                {"name":"b","image":"i","portMappings":[{"containerPort":90,"hostPort":0},{"containerPort":82,"hostPort":8081}]}]}"#);
        assert_eq!(host_ports(&d), ["tcp/8080", "tcp/8081", "udp/53"]);
        let d = def(
            r#"{"family":"f","networkMode":"host","containerDefinitions":[
                {"name":"a","image":"i","portMappings":[{"containerPort":80}]}]}"#,
        );
        assert_eq!(host_ports(&d), ["tcp/80"]);
        let d = def(
            r#"{"family":"f","networkMode":"awsvpc","containerDefinitions":[
                {"name":"a","image":"i","portMappings":[{"containerPort":443}]}]}"#,
        );
        assert_eq!(host_ports(&d), ["tcp/443"]);
        let d = def(
            r#"{"family":"f","networkMode":"none","containerDefinitions":[
                {"name":"a","image":"i"}]}"#,
        );
        assert!(host_ports(&d).is_empty());
    }

    #[test]
    fn amounts_read_as_ecs_writes_them() {
        assert_eq!(cpu_units("256"), Some(256));
        assert_eq!(cpu_units(".25 vcpu"), Some(256));
        assert_eq!(cpu_units("2vCPU"), Some(2048));
        assert_eq!(memory_mib("0.5GB"), Some(512));
        assert_eq!(memory_mib("lots"), None);
        assert_eq!(cpu_units("-1 vCPU"), None);
    }
}
