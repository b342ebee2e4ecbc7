//! The caller rule: who may read an id's credentials, one step past ECS (whose endpoint answers
//! anyone holding the id).
//!
//! - A task-role id of a `bridge` or `awsvpc` task is answered only to a caller whose source
//!   address is an address of one of that task's containers (for `awsvpc`, its pause container's:
//!   the task's containers share its namespace). A `host` task's containers share the host's
//!   addresses, so berth cannot tell them by address: answered by id alone, as ECS does. A
//!   `none` task has no address: nothing reaches the endpoint from it.
//! - An execution-role id is answered only to callers that are not task containers (Docker's
//!   `awslogs` driver calls from the host): a caller with the address of any task's container is
//!   refused. (A `host` task's containers are the host as far as addresses go.)
//!
//! A refusal is answered as an unknown id; the reason goes to the audit log only.

use berth_engine::roles::RoleKind;
use berth_model::NetworkMode;
use std::net::IpAddr;

/// Whether the caller may read the id's credentials; `Err` is the reason for the audit log.
pub fn judge(
    kind: RoleKind,
    mode: NetworkMode,
    caller: Option<IpAddr>,
    task_addresses: &[IpAddr],
    caller_is_a_task_container: bool,
) -> Result<(), String> {
    let shown = caller.map_or_else(|| "an unknown address".to_string(), |ip| ip.to_string());
    match kind {
        RoleKind::Task => {
            if mode == NetworkMode::Host {
                return Ok(());
            }
            match caller {
                Some(ip) if task_addresses.contains(&ip) => Ok(()),
                _ => Err(format!(
                    "task role id asked from {shown}, not an address of the task's containers ({})",
                    list(task_addresses)
                )),
            }
        }
        RoleKind::Execution => {
            if caller_is_a_task_container {
                Err(format!(
                    "execution role id asked from {shown}, a task container's address (only the host's Docker Engine is answered)"
                ))
            } else {
                Ok(())
            }
        }
    }
}

fn list(ips: &[IpAddr]) -> String {
    if ips.is_empty() {
        return "none known".to_string();
    }
    ips.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn a_task_role_is_answered_to_its_own_containers_only() {
        let own = [ip("172.17.0.5"), ip("172.17.0.6")];
        for mode in [NetworkMode::Bridge, NetworkMode::Awsvpc] {
            assert!(judge(RoleKind::Task, mode, Some(ip("172.17.0.6")), &own, true).is_ok());
            let why = judge(RoleKind::Task, mode, Some(ip("172.17.0.9")), &own, true)
                .expect_err("another container");
            assert!(
                why.contains("172.17.0.9") && why.contains("172.17.0.5"),
                "{why}"
            );
            assert!(judge(RoleKind::Task, mode, Some(ip("169.254.170.2")), &own, false).is_err());
            assert!(judge(RoleKind::Task, mode, None, &own, false).is_err());
        }
        assert!(
            judge(
                RoleKind::Task,
                NetworkMode::None,
                Some(ip("127.0.0.1")),
                &[],
                false
            )
            .is_err()
        );
    }

    #[test]
    fn a_host_task_is_answered_by_id_alone() {
        assert!(
            judge(
                RoleKind::Task,
                NetworkMode::Host,
                Some(ip("169.254.170.2")),
                &[],
                false
            )
            .is_ok()
        );
    }

    #[test]
    fn an_execution_role_is_answered_to_the_host_only() {
        assert!(
            judge(
                RoleKind::Execution,
                NetworkMode::Bridge,
                Some(ip("169.254.170.2")),
                &[ip("172.17.0.5")],
                false
            )
            .is_ok()
        );
        let why = judge(
            RoleKind::Execution,
            NetworkMode::Bridge,
            Some(ip("172.17.0.5")),
            &[ip("172.17.0.5")],
            true,
        )
        .expect_err("a container");
        assert!(why.contains("execution role"), "{why}");
    }
}
