//! What a task reserves on a node, from its definition, as ECS counts it: the task-level `cpu`
//! and `memory` when given ("256" CPU units or "0.5 vCPU"; "512" MiB or "1 GB"), else the sum
//! over containers of `cpu` and of `memoryReservation` (the soft limit is what ECS subtracts from
//! an instance when it is set) or else `memory`. A container without either reserves nothing.
//!
//! The task-level strings were checked for form by berth-model's parser; a value that still does
//! not read (a definition stored by someone else) is an error naming the field.

use crate::record::Resources;
use berth_model::TaskDefinition;

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
    fn amounts_read_as_ecs_writes_them() {
        assert_eq!(cpu_units("256"), Some(256));
        assert_eq!(cpu_units(".25 vcpu"), Some(256));
        assert_eq!(cpu_units("2vCPU"), Some(2048));
        assert_eq!(memory_mib("0.5GB"), Some(512));
        assert_eq!(memory_mib("lots"), None);
        assert_eq!(cpu_units("-1 vCPU"), None);
    }
}
