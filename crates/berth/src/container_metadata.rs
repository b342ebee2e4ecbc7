//! The container metadata file options `berth run` and the agent share: `--container-metadata`
//! (ECS's `ECS_ENABLE_CONTAINER_METADATA=true`) and the host addresses the file shows
//! (`HostPrivateIPv4Address`, `HostPublicIPv4Address`, which ECS reads from the EC2 instance
//! metadata). Turned into the engine's [`Settings`] once at start-up, each bad value naming its
//! option. The file itself is the engine's ([`berth_engine::container_metadata`]).
//!
//! The private address defaults to the host's own source address for outside traffic: the local
//! address the kernel picks for a UDP socket "connected" to a documentation address
//! (198.51.100.1, TEST-NET-2). A UDP connect only looks the route up; no packet is sent. With no
//! route (an isolated host) the key is omitted, as ECS omits what it does not know. Hand-written:
//! std has no interface listing, and this one lookup needs no crate.

use berth_engine::container_metadata::Settings;
use std::net::Ipv4Addr;

#[derive(Debug, Clone, clap::Args)]
pub struct ContainerMetadataArgs {
    /// Give every container a metadata file (ECS's container metadata file: JSON, mounted under
    /// /opt/ecs/metadata/, its path in ECS_CONTAINER_METADATA_FILE; READY once the container
    /// runs; `=false` turns off what the file turned on). Environment:
    /// BERTH_ENABLE_CONTAINER_METADATA, or ECS_ENABLE_CONTAINER_METADATA.
    #[arg(
        long,
        env = "BERTH_ENABLE_CONTAINER_METADATA",
        value_name = "BOOL",
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        default_value_t = false,
        add = crate::config::Key::new().env(&[ECS_ENABLE]).shown(|r| {
            Ok(Some(r.args::<ContainerMetadataArgs>()?.enabled().into()))
        })
    )]
    pub container_metadata: bool,

    /// The file's HostPrivateIPv4Address. Default: the host's source address for outside
    /// traffic (omitted when the host has no route out).
    #[arg(long, env = "BERTH_HOST_PRIVATE_IPV4_ADDRESS", value_name = "IPV4")]
    pub host_private_ipv4_address: Option<Ipv4Addr>,

    /// The file's HostPublicIPv4Address. Default: omitted (as ECS omits it for an instance
    /// without a public address).
    #[arg(long, env = "BERTH_HOST_PUBLIC_IPV4_ADDRESS", value_name = "IPV4")]
    pub host_public_ipv4_address: Option<Ipv4Addr>,
}

/// ECS's name for `--container-metadata` (BERTH_ENABLE_CONTAINER_METADATA is clap's).
const ECS_ENABLE: &str = "ECS_ENABLE_CONTAINER_METADATA";

/// True for the values ECS's agent takes as "true" for a boolean variable (Go's
/// `strconv.ParseBool`: 1, t, T, TRUE, true, True).
fn ecs_true(v: &str) -> bool {
    matches!(v.trim(), "1" | "t" | "T" | "TRUE" | "true" | "True")
}

impl ContainerMetadataArgs {
    /// On: the flag or BERTH_ENABLE_CONTAINER_METADATA (via clap), else ECS's name.
    pub fn enabled(&self) -> bool {
        self.container_metadata || std::env::var(ECS_ENABLE).is_ok_and(|v| ecs_true(&v))
    }

    /// The engine's settings when the file is on; None when it is off.
    pub fn settings(&self) -> Option<Settings> {
        if !self.enabled() {
            return None;
        }
        let private = self.host_private_ipv4_address.or_else(|| {
            let found = default_source_ipv4();
            if found.is_none() {
                tracing::warn!(
                    "the host has no IPv4 route out: container metadata files omit HostPrivateIPv4Address (--host-private-ipv4-address sets it)"
                );
            }
            found
        });
        Some(Settings {
            host_private_ipv4: private.map(|a| a.to_string()),
            host_public_ipv4: self.host_public_ipv4_address.map(|a| a.to_string()),
        })
    }
}

/// The local IPv4 address the kernel would send outside traffic from (see the module header).
fn default_source_ipv4() -> Option<Ipv4Addr> {
    let socket = std::net::UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).ok()?;
    socket.connect((Ipv4Addr::new(198, 51, 100, 1), 9)).ok()?;
    match socket.local_addr().ok()?.ip() {
        std::net::IpAddr::V4(a) if !a.is_unspecified() && !a.is_loopback() => Some(a),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        m: ContainerMetadataArgs,
    }

    #[test]
    fn off_by_default_and_the_addresses_are_checked_by_option() {
        let off = Cli::parse_from(["x"]).m;
        if std::env::var_os("ECS_ENABLE_CONTAINER_METADATA").is_none() {
            assert_eq!(off.settings(), None);
        }
        let on = Cli::parse_from([
            "x",
            "--container-metadata",
            "--host-private-ipv4-address",
            "10.1.2.3",
            "--host-public-ipv4-address",
            "203.0.113.7",
        ])
        .m;
        assert_eq!(
            on.settings(),
            Some(Settings {
                host_private_ipv4: Some("10.1.2.3".into()),
                host_public_ipv4: Some("203.0.113.7".into()),
            })
        );
        let bad = Cli::try_parse_from(["x", "--host-private-ipv4-address", "10.1.2"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(bad.contains("--host-private-ipv4-address"), "{bad}");
    }

    #[test]
    fn ecs_boolean_values() {
        for v in ["1", "t", "T", "TRUE", "true", "True"] {
            assert!(ecs_true(v), "{v}");
        }
        for v in ["", "0", "false", "yes", "on"] {
            assert!(!ecs_true(v), "{v}");
        }
    }
}
