//! The agent's task policy options: what a task may ask of the host (`--task-policy`,
//! `--task-policy-allow`, ECS's `ECS_DISABLE_PRIVILEGED` as `--disable-privileged`) and how many
//! containers a task may have (`--max-containers-per-task`). The rules themselves are
//! `berth_model::policy` (pure); this module builds the [`HostPolicy`] from the options and gives it
//! the host's view of a path (symlinks followed) for the check.

use berth_model::policy::{Grant, HostPolicy, Mode};
use clap::builder::TypedValueParser as _;
use std::collections::BTreeSet;

/// Grants as the operator writes them (a newtype, so clap takes the whole list as one value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantList(pub BTreeSet<Grant>, pub Vec<String>);

fn parse_grants(text: &str) -> Result<GrantList, String> {
    berth_model::policy::parse_grants(text).map(|(g, p)| GrantList(g, p))
}

/// ECS's name for disabling privileged containers (BERTH_DISABLE_PRIVILEGED is clap's).
const ECS_DISABLE_PRIVILEGED: &str = "ECS_DISABLE_PRIVILEGED";

/// True for the values people write for "yes" in environment variables.
fn truthy(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "yes" | "on"
    )
}

/// The agent's task policy options.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TaskPolicyArgs {
    /// What tasks may ask of this host: `permissive` (anything: privileged containers, added
    /// capabilities, devices, the host's network/PID/IPC namespaces, any host volume) or
    /// `restricted` (none of these unless --task-policy-allow grants it). Default: permissive for
    /// a single host, restricted for a cluster node (--node). See docs/operations.md.
    #[arg(
        long,
        value_name = "MODE",
        env = "BERTH_TASK_POLICY",
        value_parser = clap::builder::PossibleValuesParser::new(["permissive", "restricted"])
    )]
    pub task_policy: Option<String>,

    /// What a restricted task policy allows all the same, separated by commas: privileged,
    /// capabilities, devices, host-network, host-pid, host-ipc, unconfined, host-volumes (any host
    /// path but the Docker socket), docker-socket, host-path:/DIR (host volumes under DIR), all.
    #[arg(
        long,
        value_name = "LIST",
        env = "BERTH_TASK_POLICY_ALLOW",
        value_parser = parse_grants,
        add = crate::config::Key::new().list()
    )]
    pub task_policy_allow: Option<GrantList>,

    /// Refuse privileged containers whatever the task policy. Environment:
    /// BERTH_DISABLE_PRIVILEGED, or ECS's ECS_DISABLE_PRIVILEGED.
    #[arg(
        long,
        env = "BERTH_DISABLE_PRIVILEGED",
        value_name = "BOOL",
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        default_value_t = false,
        add = crate::config::Key::new().env(&[ECS_DISABLE_PRIVILEGED]).shown(|r| {
            Ok(Some(r.args::<TaskPolicyArgs>()?.privileged_disabled().into()))
        })
    )]
    pub disable_privileged: bool,

    /// The most containers one task definition may have (ECS's limit is 10).
    #[arg(
        long,
        value_name = "N",
        env = "BERTH_MAX_CONTAINERS_PER_TASK",
        default_value_t = berth_model::MAX_CONTAINERS,
        value_parser = clap::value_parser!(u32).range(1..=10_000).map(|n| n as usize)
    )]
    pub max_containers_per_task: usize,
}

impl TaskPolicyArgs {
    /// Privileged containers refused: the flag (or BERTH_DISABLE_PRIVILEGED), or ECS's variable.
    pub fn privileged_disabled(&self) -> bool {
        self.disable_privileged || std::env::var(ECS_DISABLE_PRIVILEGED).is_ok_and(|v| truthy(&v))
    }

    /// The policy; `cluster_node`: this agent is a cluster node (restricted unless said otherwise).
    pub fn policy(&self, cluster_node: bool) -> HostPolicy {
        let mode = match self.task_policy.as_deref() {
            Some("permissive") => Mode::Permissive,
            Some(_) => Mode::Restricted,
            None if cluster_node => Mode::Restricted,
            None => Mode::Permissive,
        };
        let (grants, host_paths) = self
            .task_policy_allow
            .clone()
            .map(|GrantList(g, p)| (g, p))
            .unwrap_or_default();
        HostPolicy {
            mode,
            grants,
            host_paths,
            privileged_disabled: self.privileged_disabled(),
        }
    }
}

/// A host path as the host resolves it: symlinks followed as far as the path exists (the rest
/// kept as written), so a link planted under a granted directory is judged by where it leads.
pub fn resolve_host_path(path: &str) -> String {
    let p = std::path::Path::new(path);
    let mut existing = p;
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            let mut out = real;
            for c in rest.iter().rev() {
                out.push(c);
            }
            return out.to_string_lossy().into_owned();
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                existing = parent;
            }
            _ => return path.to_string(),
        }
    }
}

/// Every refusal of `def` by `policy`, as the control API's problems.
pub fn refusals(policy: &HostPolicy, def: &berth_model::TaskDefinition) -> Vec<String> {
    policy
        .check(def, &resolve_host_path)
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: TaskPolicyArgs,
    }

    fn args(argv: &[&str]) -> TaskPolicyArgs {
        let mut all = vec!["berth"];
        all.extend(argv);
        Cli::try_parse_from(all).map(|c| c.args).expect("parses")
    }

    #[test]
    fn permissive_for_a_single_host_restricted_for_a_cluster_node_unless_said() {
        assert_eq!(args(&[]).policy(false).mode, Mode::Permissive);
        assert_eq!(args(&[]).policy(true).mode, Mode::Restricted);
        let said = args(&["--task-policy", "permissive"]);
        assert_eq!(said.policy(true).mode, Mode::Permissive);
        let said = args(&["--task-policy", "restricted"]);
        assert_eq!(said.policy(false).mode, Mode::Restricted);
        let granted = args(&["--task-policy-allow", "privileged,host-path:/srv"]).policy(true);
        assert_eq!(granted.grants, [Grant::Privileged].into());
        assert_eq!(granted.host_paths, vec!["/srv".to_string()]);
        assert_eq!(args(&[]).max_containers_per_task, 10);
        assert!(Cli::try_parse_from(["berth", "--task-policy-allow", "root"]).is_err());
        assert!(Cli::try_parse_from(["berth", "--max-containers-per-task", "0"]).is_err());
    }

    #[test]
    fn a_host_path_is_judged_where_it_leads() {
        let dir = tempfile::tempdir().expect("tmp");
        let link = dir.path().join("root");
        std::os::unix::fs::symlink("/", &link).expect("symlink");
        assert_eq!(resolve_host_path(&link.display().to_string()), "/");
        let below = link.join("no-such-dir/x");
        assert_eq!(
            resolve_host_path(&below.display().to_string()),
            "/no-such-dir/x"
        );
    }
}
