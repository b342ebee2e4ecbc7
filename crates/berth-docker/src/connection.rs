//! Connecting to the Docker Engine and bounding every call in time.
//!
//! [`connect`] opens the client (a `unix://` socket or a `tcp://`/`http://` address, else
//! `DOCKER_HOST` or the local socket), negotiates the API version — so an older Engine (API 1.41)
//! works — and pings, because negotiation alone succeeds when nothing listens. [`Timeouts`] holds
//! the limit of each kind of call (ECS's defaults where ECS has one; `call` and `volume` are the
//! operator's `--docker-timeout` and `--docker-volume-timeout`); [`timed`] runs one call under its
//! limit and translates its error (see [`crate::errors`]).
//!
//! A call that overruns is abandoned with [`RuntimeError::Timeout`]; whatever the Engine does with
//! it afterwards is not observed. Before the error is returned the Engine is pinged (`/_ping`,
//! bounded by [`Timeouts::ping`]), which tells a slow Engine (it answers the ping: this call is
//! slow) from a dead one (no answer, or the connection fails); [`overran`] is the one place that
//! words both.

use berth_engine::runtime::{Object, RuntimeError};
use bollard::Docker;
use bollard::errors::Error as BollardError;
use std::future::Future;
use std::time::Duration;

use crate::errors::{describe, translate};

/// Timeouts for Docker calls (ECS's defaults where ECS has one: `agent/dockerclient/timeout.go`
/// and the agent's configuration defaults).
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// Ordinary calls: container, image and network inspect, kill, stats, the container and
    /// plugin lists, info (`--docker-timeout`; ECS's `InspectContainerTimeout`, 30 s).
    pub call: Duration,
    /// Volume create, inspect and remove (`--docker-volume-timeout`; ECS's `CreateVolumeTimeout`,
    /// `InspectVolumeTimeout`, `RemoveVolumeTimeout`: 5 min each). Longer than ordinary calls
    /// because a volume call waits for the volume's driver (a legacy plugin that is gone makes
    /// dockerd wait about 45 s on an inspect).
    pub volume: Duration,
    /// Container create (ECS's default create timeout, 4 min); an image import too.
    pub create: Duration,
    /// Container start (ECS's default start timeout, 3 min).
    pub start: Duration,
    /// Container remove (ECS's `RemoveContainerTimeout`, 5 min).
    pub remove: Duration,
    /// Added to a container's stop timeout: how long Docker may take beyond the grace period.
    pub stop_extra: Duration,
    /// A whole pull, all retries included.
    pub pull: Duration,
    /// A pull that shows no progress for this long is aborted.
    pub pull_inactivity: Duration,
    /// The ping that judges an Engine after a call overran: no answer within this is "does not
    /// answer".
    pub ping: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            call: DEFAULT_CALL_TIMEOUT,
            volume: DEFAULT_VOLUME_TIMEOUT,
            create: Duration::from_secs(4 * 60),
            start: Duration::from_secs(3 * 60),
            remove: Duration::from_secs(5 * 60),
            stop_extra: Duration::from_secs(30),
            pull: Duration::from_secs(2 * 60 * 60),
            pull_inactivity: Duration::from_secs(60),
            ping: Duration::from_secs(5),
        }
    }
}

/// The default limit of an ordinary call (ECS's `InspectContainerTimeout`).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The default limit of a volume call (ECS's volume create/inspect/remove timeouts).
pub const DEFAULT_VOLUME_TIMEOUT: Duration = Duration::from_secs(5 * 60);

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
    tokio::time::timeout(Duration::from_secs(10), docker.ping())
        .await
        .map_err(|_| fail("no answer to /_ping within 10s".into()))?
        .map_err(|e| fail(describe(&e)))?;
    Ok(docker)
}

/// Run a Docker call under its limit, translating its error (a 404 or 409 names `object`); one
/// that overruns is judged by [`overran`] (`call` names it: `volume inspect NAME`).
pub(crate) async fn timed<T>(
    docker: &Docker,
    engine: &str,
    timeouts: &Timeouts,
    (call, object): (&str, Option<&Object>),
    limit: Duration,
    fut: impl Future<Output = Result<T, BollardError>>,
) -> Result<T, RuntimeError> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r.map_err(|e| translate(e, object)),
        Err(_) => Err(overran(docker, engine, timeouts.ping, call, limit).await),
    }
}

/// What the Engine's answer to a ping says after a call overran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The ping was answered: the Engine works, this call is slow.
    Slow,
    /// No answer, or a failed connection: the cause, as the user can act on it.
    Dead(String),
}

/// Ping the Engine (at most `limit`) to judge it after a call overran.
pub(crate) async fn judge(docker: &Docker, limit: Duration) -> Verdict {
    match tokio::time::timeout(limit, docker.ping()).await {
        Ok(Ok(_)) => Verdict::Slow,
        Ok(Err(e)) => Verdict::Dead(describe(&e)),
        Err(_) => Verdict::Dead(format!(
            "its /_ping got no answer within {}",
            humantime::format_duration(limit)
        )),
    }
}

/// The timeout of `call` (`volume inspect NAME`) that overran `limit`, judged by a ping of the
/// Engine at `engine` (see [`timeout_message`]).
pub(crate) async fn overran(
    docker: &Docker,
    engine: &str,
    ping: Duration,
    call: &str,
    limit: Duration,
) -> RuntimeError {
    let verdict = judge(docker, ping).await;
    let message = timeout_message(engine, call, limit, &verdict);
    tracing::warn!(%engine, %call, limit = %humantime::format_duration(limit), slow = verdict == Verdict::Slow, "a docker call overran its limit");
    RuntimeError::Timeout(message)
}

/// The one wording of a call that did not answer in time: which call, how long it was given,
/// and whether the Engine is slow (it answers other calls) or down.
pub(crate) fn timeout_message(
    engine: &str,
    call: &str,
    limit: Duration,
    verdict: &Verdict,
) -> String {
    let limit = humantime::format_duration(limit);
    match verdict {
        Verdict::Slow => format!(
            "docker {call} did not answer within {limit} (the Engine at {engine} answers other \
             calls: it is slow, not down; --docker-timeout and --docker-volume-timeout give calls \
             longer)"
        ),
        Verdict::Dead(cause) => format!(
            "docker {call} did not answer within {limit} (the Engine at {engine} does not answer: \
             {cause}; is dockerd running?)"
        ),
    }
}

/// A call's name with its object, for messages: `container inspect 0123456789ab` (a Docker id is
/// shortened to its first 12 characters, as `docker ps` prints it).
pub(crate) fn call_on(call: &str, object: &str) -> String {
    let is_id = object.len() == 64 && object.bytes().all(|b| b.is_ascii_hexdigit());
    let object = if is_id { &object[..12] } else { object };
    if object.is_empty() {
        call.to_string()
    } else {
        format!("{call} {object}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_says_which_call_how_long_and_whether_the_engine_is_slow_or_down() {
        let engine = "unix:///var/run/docker.sock";
        assert_eq!(
            timeout_message(
                engine,
                &call_on("volume inspect", "shared"),
                Duration::from_secs(30),
                &Verdict::Slow
            ),
            "docker volume inspect shared did not answer within 30s (the Engine at \
             unix:///var/run/docker.sock answers other calls: it is slow, not down; \
             --docker-timeout and --docker-volume-timeout give calls longer)"
        );
        let id = "a".repeat(64);
        assert_eq!(
            timeout_message(
                engine,
                &call_on("container inspect", &id),
                Duration::from_millis(1500),
                &Verdict::Dead("its /_ping got no answer within 5s".into())
            ),
            "docker container inspect aaaaaaaaaaaa did not answer within 1s 500ms (the Engine at \
             unix:///var/run/docker.sock does not answer: its /_ping got no answer within 5s; is \
             dockerd running?)"
        );
        assert_eq!(call_on("container list", ""), "container list");
    }
}
