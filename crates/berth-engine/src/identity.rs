//! Who the agent says it is in ECS's terms, and every ARN built from that: the partition, region
//! and account that ECS takes from the AWS account, the cluster, the availability zone and the
//! container instance. berth has no AWS account, so the defaults say plainly that they are local
//! (region `local-1`, account `000000000000`) while keeping the six-section form clients parse
//! (`arn:<partition>:ecs:<region>:<account>:<resource>`).
//!
//! The one place ARNs are formatted: the metadata endpoint, FireLens's record fields, the
//! container metadata file and the introspection API all call these methods. Every ARN is a pure
//! function of the identity and the task's (or container's) stored name, so it is stable across
//! agent restarts.

use sha2::{Digest, Sha256};

/// The identity values, each checked by [`Identity::check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The ARN partition (`aws`, `aws-cn`, `aws-us-gov`, …). Default `aws`.
    pub partition: String,
    /// The region in every ARN and the metadata. Default `local-1`.
    pub region: String,
    /// The 12-digit account in every ARN. Default `000000000000`.
    pub account: String,
    /// The cluster name (`Cluster`, and in every task ARN). Default `default`.
    pub cluster: String,
    /// `AvailabilityZone`. Default: the region followed by `a` (`local-1a`).
    pub availability_zone: String,
    /// The container instance's id, the last part of its ARN: 32 hexadecimal digits, derived by
    /// the agent from its host and data directory so it stays the same across restarts.
    pub container_instance_id: String,
}

/// The defaults, documented in docs/agent.md.
pub const DEFAULT_PARTITION: &str = "aws";
pub const DEFAULT_REGION: &str = "local-1";
pub const DEFAULT_ACCOUNT: &str = "000000000000";
pub const DEFAULT_CLUSTER: &str = "default";

impl Default for Identity {
    fn default() -> Self {
        Identity {
            partition: DEFAULT_PARTITION.to_string(),
            region: DEFAULT_REGION.to_string(),
            account: DEFAULT_ACCOUNT.to_string(),
            cluster: DEFAULT_CLUSTER.to_string(),
            availability_zone: format!("{DEFAULT_REGION}a"),
            container_instance_id: container_instance_id(&crate::spec::host_name(), ""),
        }
    }
}

/// 32 hexadecimal digits from `parts` (SHA-256), the shape of ECS's task and instance ids.
fn hex_id(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    h.finalize()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The container instance id of an agent on `host` with data directory `data_dir`: the same
/// for the same pair, so a restarted agent keeps its ARN.
pub fn container_instance_id(host: &str, data_dir: &str) -> String {
    hex_id(&["berth-container-instance", host, data_dir])
}

/// A container's id in its ARN: a UUID (ECS's container ARNs end in one) derived from the task
/// id and the container's name, so it needs no storage and never changes.
pub fn container_uuid(task_id: &str, container: &str) -> String {
    let h = hex_id(&["berth-container", task_id, container]);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

impl Identity {
    fn arn(&self, resource: &str) -> String {
        format!(
            "arn:{}:ecs:{}:{}:{resource}",
            self.partition, self.region, self.account
        )
    }

    /// `arn:<p>:ecs:<region>:<account>:task/<cluster>/<task-id>` (ECS's long ARN format).
    pub fn task_arn(&self, task_id: &str) -> String {
        self.arn(&format!("task/{}/{task_id}", self.cluster))
    }

    /// `arn:<p>:ecs:<region>:<account>:container/<cluster>/<task-id>/<uuid>`.
    pub fn container_arn(&self, task_id: &str, container: &str) -> String {
        self.arn(&format!(
            "container/{}/{task_id}/{}",
            self.cluster,
            container_uuid(task_id, container)
        ))
    }

    /// `arn:<p>:ecs:<region>:<account>:cluster/<cluster>`.
    pub fn cluster_arn(&self) -> String {
        self.arn(&format!("cluster/{}", self.cluster))
    }

    /// `arn:<p>:ecs:<region>:<account>:container-instance/<cluster>/<id>`.
    pub fn container_instance_arn(&self) -> String {
        self.arn(&format!(
            "container-instance/{}/{}",
            self.cluster, self.container_instance_id
        ))
    }

    /// `arn:<p>:ecs:<region>:<account>:task-definition/<family>:<revision>`.
    pub fn task_definition_arn(&self, family: &str, revision: u32) -> String {
        self.arn(&format!("task-definition/{family}:{revision}"))
    }

    /// Every value that would make an ARN clients cannot parse, as (field, problem with the
    /// fix). The field is the identity field's name; the caller maps it to its option.
    pub fn check(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        let label = |v: &str| {
            !v.is_empty()
                && v.len() <= 63
                && v.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        };
        if !label(&self.partition) {
            out.push((
                "partition",
                format!(
                    "{:?} is not an ARN partition: use lower-case letters, digits and '-', e.g. \"aws\"",
                    self.partition
                ),
            ));
        }
        if !label(&self.region) {
            out.push((
                "region",
                format!(
                    "{:?} is not a region name: use lower-case letters, digits and '-', e.g. \"eu-west-1\" or berth's \"{DEFAULT_REGION}\"",
                    self.region
                ),
            ));
        }
        if self.account.len() != 12 || !self.account.bytes().all(|b| b.is_ascii_digit()) {
            out.push((
                "account",
                format!(
                    "{:?} is not an account id: ECS accounts are 12 digits, e.g. \"{DEFAULT_ACCOUNT}\"",
                    self.account
                ),
            ));
        }
        // ECS: up to 255 letters (upper or lower), numbers, hyphens and underscores.
        if self.cluster.is_empty()
            || self.cluster.len() > 255
            || !self
                .cluster
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            out.push((
                "cluster",
                format!(
                    "{:?} is not a cluster name: ECS allows 1 to 255 letters, numbers, '-' and '_'",
                    self.cluster
                ),
            ));
        }
        if !label(&self.availability_zone) {
            out.push((
                "availability_zone",
                format!(
                    "{:?} is not an availability zone name: use lower-case letters, digits and '-', e.g. \"{}a\"",
                    self.availability_zone, self.region
                ),
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sections(arn: &str) -> Vec<&str> {
        arn.splitn(6, ':').collect()
    }

    #[test]
    fn every_arn_has_six_sections_with_ecs_as_service() {
        let id = Identity::default();
        let task = "0123456789abcdef0123456789abcdef";
        for arn in [
            id.task_arn(task),
            id.container_arn(task, "web"),
            id.cluster_arn(),
            id.container_instance_arn(),
            id.task_definition_arn("web", 3),
        ] {
            let s = sections(&arn);
            assert_eq!(s.len(), 6, "{arn}");
            assert_eq!(
                &s[..5],
                &["arn", "aws", "ecs", "local-1", "000000000000"],
                "{arn}"
            );
        }
        assert_eq!(
            id.task_arn(task),
            format!("arn:aws:ecs:local-1:000000000000:task/default/{task}")
        );
        assert_eq!(
            id.cluster_arn(),
            "arn:aws:ecs:local-1:000000000000:cluster/default"
        );
    }

    #[test]
    fn container_arns_are_stable_and_distinct() {
        let id = Identity::default();
        let a = id.container_arn("t1", "web");
        assert_eq!(a, id.container_arn("t1", "web"));
        assert_ne!(a, id.container_arn("t1", "sidecar"));
        assert_ne!(a, id.container_arn("t2", "web"));
        let uuid = a.rsplit('/').next().unwrap_or_default();
        assert_eq!(uuid.len(), 36, "{uuid}");
        assert_eq!(uuid.matches('-').count(), 4, "{uuid}");
    }

    #[test]
    fn the_defaults_pass_the_check_and_bad_values_are_named() {
        assert!(Identity::default().check().is_empty());
        let bad = Identity {
            partition: "AWS".into(),
            region: "eu west".into(),
            account: "12".into(),
            cluster: "a/b".into(),
            availability_zone: String::new(),
            ..Identity::default()
        };
        let fields: Vec<&str> = bad.check().iter().map(|(f, _)| *f).collect();
        assert_eq!(
            fields,
            [
                "partition",
                "region",
                "account",
                "cluster",
                "availability_zone"
            ]
        );
    }
}
