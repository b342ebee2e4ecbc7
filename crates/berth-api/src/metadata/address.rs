//! Where containers on the Docker bridge reach the endpoint: the bridge's gateway address, which is
//! an address of this host on the bridge's interface (e.g. `172.17.0.1` on `docker0`).
//!
//! Chosen from `inspect network bridge`: the IPAM configuration's `Gateway` when Docker reports one;
//! otherwise the first host address of its IPv4 `Subnet` (network address + 1), which is the address
//! Docker gives the bridge interface when no gateway is configured (Docker 20.10 often leaves the
//! gateway out of the IPAM answer of the default bridge). Binding a listener to it then proves it is
//! this host's.

use crate::metadata::server::MetadataError;
use berth_engine::runtime::{NetworkInfo, Runtime};
use std::net::Ipv4Addr;

/// The gateway address of a network, from its IPAM configuration (see the module doc).
pub fn gateway_of(info: &NetworkInfo) -> Option<Ipv4Addr> {
    let configured = info
        .ipam
        .iter()
        .filter_map(|c| c.gateway.as_deref())
        .find_map(|g| g.split('/').next()?.parse::<Ipv4Addr>().ok());
    configured.or_else(|| {
        info.ipam
            .iter()
            .filter_map(|c| c.subnet.as_deref())
            .find_map(first_host)
    })
}

/// The first host address of an IPv4 CIDR (`172.17.0.0/16` → `172.17.0.1`).
fn first_host(cidr: &str) -> Option<Ipv4Addr> {
    let (net, len) = cidr.split_once('/')?;
    let net: Ipv4Addr = net.parse().ok()?;
    let len: u32 = len.parse().ok()?;
    if len > 30 {
        return None;
    }
    let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
    Some(Ipv4Addr::from((u32::from(net) & mask) + 1))
}

/// The Docker bridge network's gateway address, asked of the runtime.
pub async fn bridge_gateway<R: Runtime>(rt: &R) -> Result<Ipv4Addr, MetadataError> {
    let info = rt
        .inspect_network("bridge")
        .await
        .map_err(|e| MetadataError::BridgeGateway(e.to_string()))?;
    gateway_of(&info).ok_or_else(|| {
        MetadataError::BridgeGateway("network bridge has no IPv4 gateway or subnet".to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_engine::runtime::IpamConfig;

    fn net(subnet: Option<&str>, gateway: Option<&str>) -> NetworkInfo {
        NetworkInfo {
            name: "bridge".into(),
            ipam: vec![IpamConfig {
                subnet: subnet.map(Into::into),
                gateway: gateway.map(Into::into),
            }],
            bridge_interface: Some("docker0".into()),
        }
    }

    #[test]
    fn configured_gateway_wins_else_first_host_of_subnet() {
        assert_eq!(
            gateway_of(&net(Some("172.17.0.0/16"), Some("172.17.0.254"))),
            Some(Ipv4Addr::new(172, 17, 0, 254))
        );
        assert_eq!(
            gateway_of(&net(Some("172.17.0.0/16"), None)),
            Some(Ipv4Addr::new(172, 17, 0, 1))
        );
        assert_eq!(
            gateway_of(&net(Some("10.9.8.0/24"), None)),
            Some(Ipv4Addr::new(10, 9, 8, 1))
        );
        assert_eq!(gateway_of(&net(Some("fd00::/64"), None)), None);
        assert_eq!(gateway_of(&net(None, None)), None);
    }
}
