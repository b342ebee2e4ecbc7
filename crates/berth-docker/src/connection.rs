//! Connecting to the Docker Engine and bounding every call in time.
//!
//! [`connect`] opens the client (a `unix://` socket or a `tcp://`/`http://` address, else
//! `DOCKER_HOST` or the local socket), negotiates the API version — so an older Engine (API 1.41)
//! works — and pings, because negotiation alone succeeds when nothing listens. [`Timeouts`] holds
//! the limit of each kind of call (ECS's defaults where ECS has one); [`timed`] runs one call under
//! its limit and translates its error (see [`crate::errors`]). A call that overruns is abandoned
//! with [`RuntimeError::Timeout`]; whatever the Engine does with it afterwards is not observed.

use berth_engine::runtime::RuntimeError;
use bollard::Docker;
use bollard::errors::Error as BollardError;
use std::future::Future;
use std::time::Duration;

use crate::errors::translate;

/// Timeouts for Docker calls (ECS's defaults where ECS has one).
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub create: Duration,
    pub start: Duration,
    pub inspect: Duration,
    pub remove: Duration,
    /// Added to a container's stop timeout: how long Docker may take beyond the grace period.
    pub stop_extra: Duration,
    /// A whole pull, all retries included.
    pub pull: Duration,
    /// A pull that shows no progress for this long is aborted.
    pub pull_inactivity: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            create: Duration::from_secs(4 * 60),
            start: Duration::from_secs(3 * 60),
            inspect: Duration::from_secs(30),
            remove: Duration::from_secs(5 * 60),
            stop_extra: Duration::from_secs(30),
            pull: Duration::from_secs(2 * 60 * 60),
            pull_inactivity: Duration::from_secs(60),
        }
    }
}

/// Connect to the engine at `host` (a `unix://` path or `tcp://` / `http://` address; None = the
/// `DOCKER_HOST` environment variable or the local socket) and negotiate the API version.
pub async fn connect(host: Option<&str>) -> Result<Docker, RuntimeError> {
    let docker = match host {
        Some(h) => Docker::connect_with_host(h),
        None => Docker::connect_with_defaults(),
    }
    .map_err(|e| RuntimeError::Unavailable(e.to_string()))?;
    let docker = tokio::time::timeout(Duration::from_secs(10), docker.negotiate_version())
        .await
        .map_err(|_| {
            RuntimeError::Unavailable("no answer from the docker engine within 10s".into())
        })?
        .map_err(|e| RuntimeError::Unavailable(e.to_string()))?;
    // negotiate_version does not fail when nothing listens; a ping tells.
    docker
        .ping()
        .await
        .map_err(|e| RuntimeError::Unavailable(e.to_string()))?;
    Ok(docker)
}

/// Run a Docker call under a timeout, translating its error.
pub(crate) async fn timed<T>(
    what: &str,
    limit: Duration,
    fut: impl Future<Output = Result<T, BollardError>>,
) -> Result<T, RuntimeError> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r.map_err(translate),
        Err(_) => Err(RuntimeError::Timeout(format!(
            "{what} did not finish within {}s",
            limit.as_secs()
        ))),
    }
}
