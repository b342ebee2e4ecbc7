//! The agent's side of the introspection API (`berth_api::introspection`): the
//! `--introspection-addr` option, the `Version` string the agent reports, and starting the
//! listener over the agent's task directory. `berth run` does not serve it: one task, and its
//! containers already read their task through the metadata endpoint.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;

/// ECS's introspection port.
pub const DEFAULT_ADDR: &str = "127.0.0.1:51678";

/// `--introspection-addr`: where the API listens, or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntrospectionAddr {
    Off,
    Listen(SocketAddr),
}

impl FromStr for IntrospectionAddr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("off") || t.eq_ignore_ascii_case("none") {
            return Ok(IntrospectionAddr::Off);
        }
        t.parse().map(IntrospectionAddr::Listen).map_err(|_| {
            format!(
                "{s:?} is not an address and port: give one such as {DEFAULT_ADDR} (ECS's port), \
                 0.0.0.0:51678 for every address, or off to serve no introspection API"
            )
        })
    }
}

impl fmt::Display for IntrospectionAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IntrospectionAddr::Off => f.write_str("off"),
            IntrospectionAddr::Listen(a) => write!(f, "{a}"),
        }
    }
}

/// The `Version` of `/v1/metadata`, in the ECS agent's layout (`Amazon ECS Agent - v1.30.0
/// (02ff320c)`): `berth - v<version>`, followed by ` (<commit>)` when the binary was built with
/// `BERTH_COMMIT` set (berth keeps no commit hash of its own). Clients that read the version
/// with a `v<major>.<minor>.<patch>` pattern, as Datadog's agent does, read berth's.
pub fn version() -> String {
    let v = env!("CARGO_PKG_VERSION");
    match option_env!("BERTH_COMMIT").filter(|c| !c.trim().is_empty()) {
        Some(commit) => format!("berth - v{v} ({})", commit.trim()),
        None => format!("berth - v{v}"),
    }
}

/// What `GET /license` answers.
const LICENSE: &str = include_str!("../../../../LICENSE");

/// Start the introspection API over the agent's tasks, unless it is `off`. A listener that cannot
/// be bound is a warning and retried in the background (the agent runs its tasks regardless).
pub(super) async fn start(
    agent: &Arc<super::Agent>,
    addr: IntrospectionAddr,
) -> Option<berth_api::introspection::IntrospectionServer> {
    use berth_api::introspection::{IntrospectionConfig, IntrospectionServer};
    let IntrospectionAddr::Listen(addr) = addr else {
        tracing::info!("introspection API off (--introspection-addr off)");
        return None;
    };
    if addr.ip().is_unspecified() {
        tracing::warn!(%addr, "the introspection API lists every task and container of this host and listens on all addresses (--introspection-addr): containers and other hosts can read it");
    }
    let config = IntrospectionConfig {
        identity: agent.identity.clone(),
        version: version(),
        license: LICENSE.to_string(),
        ..IntrospectionConfig::default()
    };
    let server =
        IntrospectionServer::start(agent.rt.clone(), agent.directory.clone(), config, addr).await;
    if let Some(local) = server.local_addr() {
        tracing::info!(addr = %local, "introspection API listening");
    }
    Some(server)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_option_takes_an_address_or_off_and_says_what_it_expects() {
        assert_eq!(
            "127.0.0.1:51678".parse::<IntrospectionAddr>(),
            Ok(IntrospectionAddr::Listen(
                "127.0.0.1:51678".parse().expect("addr")
            ))
        );
        assert_eq!(
            "off".parse::<IntrospectionAddr>(),
            Ok(IntrospectionAddr::Off)
        );
        assert_eq!(
            "None".parse::<IntrospectionAddr>(),
            Ok(IntrospectionAddr::Off)
        );
        let err = "51678".parse::<IntrospectionAddr>().expect_err("no host");
        assert!(
            err.contains("\"51678\" is not an address and port"),
            "{err}"
        );
        assert!(
            err.contains("127.0.0.1:51678") && err.contains("off"),
            "{err}"
        );
        assert_eq!(IntrospectionAddr::Off.to_string(), "off");
    }

    #[test]
    fn the_version_has_ecs_layout_with_berths_version() {
        let v = version();
        assert!(
            v.starts_with(&format!("berth - v{}", env!("CARGO_PKG_VERSION"))),
            "{v}"
        );
        assert!(LICENSE.contains("Apache License"), "the license text");
    }
}
