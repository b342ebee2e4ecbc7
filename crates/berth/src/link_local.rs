//! Making the credentials endpoint's address reachable: `169.254.170.2` (ECS's) added to the
//! host's loopback device, labelled `lo:berth`, and removed when berth exits.
//!
//! Why the address on `lo` rather than ECS's DNAT (`169.254.170.2:80` → `127.0.0.1:51679` with
//! `route_localnet`): verified on the Docker Engine, a container on the default bridge and one
//! on a user-defined bridge network (an awsvpc task's berth network is one) reach a listener
//! bound to `169.254.170.2:80` on the host through their default route, and the listener sees
//! the container's own source address (no NAT on a locally delivered packet), which the caller
//! rule needs; host-mode containers reach it as the host does. No iptables rule to add, keep in
//! order with Docker's or undo.
//!
//! How: the `ip` tool of iproute2 (`ip -4 addr add 169.254.170.2/32 dev lo label lo:berth`),
//! rather than rtnetlink syscalls (which would belong in berth-fs): one well-known command, the
//! same an operator would type. An address already there with berth's label is reused (a berth
//! that was killed left it) and removed at exit once berth serves on it; one without the label
//! is the operator's and left alone. Needs root (`CAP_NET_ADMIN`); refused clearly without it.
//! When the port is taken, the refusal names the process holding it, found from
//! `/proc/net/tcp` and `/proc/*/fd` (hand-written: a few lines of procfs).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::Command;

/// ECS's credentials endpoint address.
pub const ECS_ADDRESS: Ipv4Addr = Ipv4Addr::new(169, 254, 170, 2);
/// The label berth's address carries on `lo`.
pub const LABEL: &str = "lo:berth";

/// The address on `lo` while berth serves on it; dropping it removes the address when berth
/// added it (or adopted its own from a killed run).
#[derive(Debug)]
pub struct LinkLocal {
    ip: Ipv4Addr,
    /// Removed on drop.
    remove: bool,
    /// Present with berth's label before this run (a killed berth's).
    leftover: bool,
}

/// The output of `ip -4 -o addr show to IP/32`, or why it could not be run.
fn show(ip: Ipv4Addr) -> anyhow::Result<String> {
    let out = Command::new("ip")
        .args(["-4", "-o", "addr", "show", "to", &format!("{ip}/32")])
        .output()
        .map_err(|e| anyhow::anyhow!("cannot run `ip` (iproute2) to look for {ip}: {e}"))?;
    if !out.status.success() {
        anyhow::bail!(
            "`ip -4 addr show to {ip}/32` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl LinkLocal {
    /// Make `ip` an address of this host: nothing to do when it is one already (berth's label:
    /// adopted, see [`LinkLocal::served`]); otherwise added to `lo` (root only).
    pub fn ensure(ip: Ipv4Addr) -> anyhow::Result<LinkLocal> {
        if ip.is_loopback() || ip.is_unspecified() {
            return Ok(LinkLocal {
                ip,
                remove: false,
                leftover: false,
            });
        }
        let present = show(ip)?;
        if !present.trim().is_empty() {
            let ours = present
                .split_whitespace()
                .any(|w| w == LABEL || w == format!("{LABEL}\\"));
            return Ok(LinkLocal {
                ip,
                remove: false,
                leftover: ours,
            });
        }
        if !rustix::process::geteuid().is_root() {
            anyhow::bail!(
                "adding {ip} to the loopback device for the credentials endpoint needs root (CAP_NET_ADMIN); \
                 run berth as root, add it yourself (`ip addr add {ip}/32 dev lo`), or turn the endpoint off with --credentials-endpoint off"
            );
        }
        let out = Command::new("ip")
            .args([
                "-4",
                "addr",
                "add",
                &format!("{ip}/32"),
                "dev",
                "lo",
                "label",
                LABEL,
            ])
            .output()
            .map_err(|e| anyhow::anyhow!("cannot run `ip` (iproute2) to add {ip} to lo: {e}"))?;
        if !out.status.success() {
            anyhow::bail!(
                "`ip addr add {ip}/32 dev lo label {LABEL}` failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        tracing::info!(address = %ip, label = LABEL, "credentials endpoint address added to lo");
        Ok(LinkLocal {
            ip,
            remove: true,
            leftover: false,
        })
    }

    /// berth now listens on the address: a leftover of a killed berth becomes this run's, to
    /// remove at exit.
    pub fn served(&mut self) {
        if self.leftover {
            tracing::info!(address = %self.ip, "reusing the credentials endpoint address a previous berth left on lo");
            self.remove = true;
        }
    }
}

impl Drop for LinkLocal {
    fn drop(&mut self) {
        if !self.remove {
            return;
        }
        let ip = self.ip;
        match Command::new("ip")
            .args(["-4", "addr", "del", &format!("{ip}/32"), "dev", "lo"])
            .output()
        {
            Ok(out) if out.status.success() => {
                tracing::info!(address = %ip, "credentials endpoint address removed from lo");
            }
            Ok(out) => tracing::warn!(
                address = %ip,
                error = %String::from_utf8_lossy(&out.stderr).trim(),
                "cannot remove the credentials endpoint address from lo (`ip addr del {ip}/32 dev lo` removes it)"
            ),
            Err(e) => {
                tracing::warn!(address = %ip, error = %e, "cannot run `ip` to remove the credentials endpoint address from lo")
            }
        }
    }
}

/// Who listens on TCP `addr` (or on the same port on all addresses): `NAME (pid N)`, when procfs
/// tells.
pub fn port_holder(addr: SocketAddr) -> Option<String> {
    let IpAddr::V4(ip) = addr.ip() else {
        return None;
    };
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let inode = listening_inode(&table, ip, addr.port())?;
    let wanted = format!("socket:[{inode}]");
    for proc_entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = proc_entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(proc_entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == wanted.as_str()) {
                let comm = std::fs::read_to_string(proc_entry.path().join("comm"))
                    .map(|c| c.trim().to_string())
                    .unwrap_or_else(|_| "?".to_string());
                return Some(format!("{comm} (pid {pid})"));
            }
        }
    }
    None
}

/// The inode of the socket listening on `ip:port` or `0.0.0.0:port` in a `/proc/net/tcp` table.
fn listening_inode(table: &str, ip: Ipv4Addr, port: u16) -> Option<String> {
    // /proc/net/tcp shows an IPv4 address as the 32-bit value in host byte order, in hex.
    let hex = |a: Ipv4Addr| format!("{:08X}:{port:04X}", u32::from_ne_bytes(a.octets()));
    let wanted = [hex(ip), hex(Ipv4Addr::UNSPECIFIED)];
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
        (f.len() > 9 && f[3] == "0A" && wanted.iter().any(|w| w == f[1])).then(|| f[9].to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listener_of_a_port_is_found_in_procs_table() {
        let ip_hex = format!("{:08X}", u32::from_ne_bytes(ECS_ADDRESS.octets()));
        let table = format!(
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
             0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1\n\
             1: {ip_hex}:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 222 1\n"
        );
        assert_eq!(
            listening_inode(&table, ECS_ADDRESS, 80).as_deref(),
            Some("222")
        );
        assert_eq!(listening_inode(&table, ECS_ADDRESS, 81), None);
    }

    #[test]
    fn a_real_listener_is_named() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let holder = port_holder(l.local_addr().expect("addr")).expect("found");
        assert!(
            holder.contains(&format!("pid {}", std::process::id())),
            "{holder}"
        );
    }
}
