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

use crate::errors::{describe, translate};

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

/// Docker's own default when neither `--docker-host` nor `DOCKER_HOST` says otherwise (bollard's
/// `DEFAULT_SOCKET`, which it does not export).
pub const DEFAULT_ENGINE: &str = "unix:///var/run/docker.sock";

/// The address [`connect`] tries for `host`: `host` itself, else `DOCKER_HOST`, else
/// [`DEFAULT_ENGINE`] — the same order as bollard's `connect_with_defaults`. Errors name it.
pub fn engine_address(host: Option<&str>) -> String {
    match host {
        Some(h) => h.to_string(),
        None => std::env::var("DOCKER_HOST")
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| DEFAULT_ENGINE.to_string()),
    }
}

/// What an unreachable Engine error says: the address tried, the cause, and what to check.
pub(crate) fn unreachable(address: &str, cause: &str) -> String {
    format!(
        "cannot connect to the Docker Engine at {address}: {cause}; is dockerd running? \
         (--docker-host or DOCKER_HOST choose another Engine)"
    )
}

/// Connect to the engine at `host` (a `unix://` path or `tcp://` / `http://` address; None = the
/// `DOCKER_HOST` environment variable or the local socket) and negotiate the API version. Every
/// error names the address tried ([`engine_address`]).
pub async fn connect(host: Option<&str>) -> Result<Docker, RuntimeError> {
    let address = engine_address(host);
    let fail = |cause: String| RuntimeError::Unavailable(unreachable(&address, &cause));
    let docker = Docker::connect_with_host(&address).map_err(|e| fail(describe(&e)))?;
    let docker = tokio::time::timeout(Duration::from_secs(10), docker.negotiate_version())
        .await
        .map_err(|_| fail("no answer within 10s".into()))?
        .map_err(|e| fail(describe(&e)))?;
    // negotiate_version does not fail when nothing listens; a ping tells.
    docker.ping().await.map_err(|e| fail(describe(&e)))?;
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
