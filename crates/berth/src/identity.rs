//! The identity options (`--cluster`, `--region`, `--account-id`, `--partition`,
//! `--availability-zone`) that `berth run` and the agent share, turned into the engine's
//! [`Identity`] and checked once at start-up, each problem naming its option. The container
//! instance id is derived from the host name and the data directory (stable across restarts).

use berth_engine::Identity;
use berth_engine::identity::{
    DEFAULT_ACCOUNT, DEFAULT_CLUSTER, DEFAULT_PARTITION, DEFAULT_REGION, container_instance_id,
};
use std::path::Path;

#[derive(Debug, Clone, clap::Args)]
pub struct IdentityArgs {
    /// The cluster name the task metadata shows (`Cluster`, and in every task ARN).
    #[arg(long, env = "BERTH_CLUSTER", value_name = "NAME", default_value = DEFAULT_CLUSTER)]
    pub cluster: String,

    /// The region in every ARN and in the metadata (ECS takes it from the instance; berth's
    /// default says it is local).
    #[arg(long, env = "BERTH_REGION", value_name = "REGION", default_value = DEFAULT_REGION)]
    pub region: String,

    /// The 12-digit account in every ARN (berth's default, all zeros, is no real account).
    #[arg(long, env = "BERTH_ACCOUNT_ID", value_name = "ID", default_value = DEFAULT_ACCOUNT)]
    pub account_id: String,

    /// The ARN partition (aws, aws-cn, aws-us-gov, …).
    #[arg(long, value_name = "NAME", default_value = DEFAULT_PARTITION)]
    pub partition: String,

    /// The metadata's `AvailabilityZone`. Default: the region followed by `a`.
    #[arg(long, env = "BERTH_AVAILABILITY_ZONE", value_name = "ZONE")]
    pub availability_zone: Option<String>,
}

impl IdentityArgs {
    /// The identity of an agent (or `berth run`) with data directory `data_dir`, or every bad
    /// option in one error.
    pub fn identity(&self, data_dir: &Path) -> anyhow::Result<Identity> {
        let id = Identity {
            partition: self.partition.clone(),
            region: self.region.clone(),
            account: self.account_id.clone(),
            cluster: self.cluster.clone(),
            availability_zone: self
                .availability_zone
                .clone()
                .unwrap_or_else(|| format!("{}a", self.region)),
            container_instance_id: container_instance_id(
                &berth_engine::spec::host_name(),
                &data_dir.display().to_string(),
            ),
        };
        let problems: Vec<String> = id
            .check()
            .into_iter()
            .map(|(field, why)| {
                let option = match field {
                    "account" => "--account-id",
                    "availability_zone" => "--availability-zone",
                    "partition" => "--partition",
                    "region" => "--region",
                    _ => "--cluster",
                };
                format!("{option}: {why}")
            })
            .collect();
        if problems.is_empty() {
            Ok(id)
        } else {
            anyhow::bail!("{}", problems.join("; "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        id: IdentityArgs,
    }

    #[test]
    fn defaults_parse_and_every_bad_option_is_named() {
        let ok = Cli::parse_from(["x"])
            .id
            .identity(Path::new("/d"))
            .expect("defaults");
        assert_eq!(ok.availability_zone, "local-1a");
        assert_eq!(ok.container_instance_id.len(), 32);
        let again = Cli::parse_from(["x"])
            .id
            .identity(Path::new("/d"))
            .expect("defaults");
        assert_eq!(ok.container_instance_arn(), again.container_instance_arn());
        let bad = Cli::parse_from([
            "x",
            "--region",
            "EU",
            "--account-id",
            "1",
            "--cluster",
            "a b",
        ])
        .id
        .identity(Path::new("/d"))
        .expect_err("bad values");
        let text = bad.to_string();
        for option in ["--region", "--account-id", "--cluster"] {
            assert!(text.contains(option), "{text}");
        }
    }
}
