//! The Docker call limits `berth run` and the agent share: `--docker-timeout` for ordinary calls
//! (inspect, kill, stats, lists; ECS's `InspectContainerTimeout`, 30 s) and
//! `--docker-volume-timeout` for volume create, inspect and remove (ECS's volume timeouts, 5 min),
//! each also a config-file key and an environment variable. A call that overruns its limit fails
//! with a reason that names the call and the limit and says whether the Engine answers other
//! calls (slow) or none (down); the wording is berth-docker's (`connection`). The other limits
//! (create, start, remove, stop, pull) keep ECS's defaults; docs/operations.md has the table.

use std::time::Duration;

#[derive(Debug, Clone, clap::Args)]
pub struct DockerTimeoutArgs {
    /// How long an ordinary Docker call may take (container, image and network inspect, kill,
    /// stats, lists) before it is abandoned, e.g. `30s`, `2m`. Environment: BERTH_DOCKER_TIMEOUT.
    #[arg(long, env = "BERTH_DOCKER_TIMEOUT", value_name = "DURATION", default_value = "30s", value_parser = above_zero)]
    pub docker_timeout: Duration,

    /// How long a Docker volume call (create, inspect, remove) may take, e.g. `5m`: a volume call
    /// waits for the volume's driver, and a legacy plugin that is gone makes dockerd wait about
    /// 45 s. Environment: BERTH_DOCKER_VOLUME_TIMEOUT.
    #[arg(long, env = "BERTH_DOCKER_VOLUME_TIMEOUT", value_name = "DURATION", default_value = "5m", value_parser = above_zero)]
    pub docker_volume_timeout: Duration,
}

/// A duration above zero (`0s` would fail every call at once).
pub(crate) fn above_zero(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s)
        .map_err(|e| format!("{e}: expected a duration such as 30s, 2m or 1h30m"))?;
    if d.is_zero() {
        return Err("expected a duration above zero, such as 30s or 5m".into());
    }
    Ok(d)
}

impl DockerTimeoutArgs {
    /// The runtime with these limits (its other limits unchanged).
    pub fn configure(&self, rt: berth_docker::DockerRuntime) -> berth_docker::DockerRuntime {
        let mut t = rt.timeouts();
        t.call = self.docker_timeout;
        t.volume = self.docker_volume_timeout;
        rt.with_timeouts(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_is_a_duration_above_zero() {
        assert_eq!(above_zero("45s"), Ok(Duration::from_secs(45)));
        assert_eq!(
            above_zero("0s"),
            Err("expected a duration above zero, such as 30s or 5m".to_string())
        );
        let e = above_zero("soon").expect_err("not a duration");
        assert!(
            e.ends_with("expected a duration such as 30s, 2m or 1h30m"),
            "{e}"
        );
    }
}
