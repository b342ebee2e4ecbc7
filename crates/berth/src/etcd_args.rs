//! The etcd options every command that connects takes (`berth agent --node`, `berth controller`,
//! `berth cluster …`), declared once ([`EtcdArgs`]): the endpoints, TLS, the user, and
//! `--etcd-insecure`. What they mean and the rule that refuses an insecure etcd are
//! berth-cluster's (`berth_cluster::connect`); this module turns them into its settings and logs
//! the warnings of an insecure setup.

use anyhow::anyhow;
use berth_cluster::connect::Settings;
use berth_cluster::store::parse_endpoints;
use std::path::PathBuf;

#[derive(clap::Args, Debug, Clone, Default)]
pub struct EtcdArgs {
    /// The etcd cluster's client URLs, comma-separated: https://HOST:PORT[,https://HOST:PORT…]
    /// (http:// only with --etcd-insecure). For the agent: join the cluster as a node (needs
    /// --node); its tasks then come from the cluster, not from `berth submit`.
    #[arg(long, env = "BERTH_ETCD", value_name = "ENDPOINTS")]
    pub etcd: Option<String>,

    /// The CA certificate (PEM) that signed etcd's server certificates: etcd is verified with it.
    #[arg(long, env = "BERTH_ETCD_CACERT", value_name = "FILE")]
    pub etcd_cacert: Option<PathBuf>,

    /// A client certificate (PEM) for etcd's `--client-cert-auth` (needs --etcd-key).
    #[arg(long, env = "BERTH_ETCD_CERT", value_name = "FILE")]
    pub etcd_cert: Option<PathBuf>,

    /// The client certificate's private key (PEM).
    #[arg(long, env = "BERTH_ETCD_KEY", value_name = "FILE")]
    pub etcd_key: Option<PathBuf>,

    /// The etcd user (its role says which keys it may read and write: docs/cluster.md, "Security
    /// model"). Needs --etcd-password-file.
    #[arg(long, env = "BERTH_ETCD_USER", value_name = "NAME")]
    pub etcd_user: Option<String>,

    /// A file holding the etcd user's password (one line; never give a password on the command
    /// line).
    #[arg(long, env = "BERTH_ETCD_PASSWORD_FILE", value_name = "FILE")]
    pub etcd_password_file: Option<PathBuf>,

    /// Accept an etcd reached without TLS or without a user: anyone who reaches such an etcd can
    /// run any task as root on every node. Warned about at every start.
    #[arg(
        long,
        env = "BERTH_ETCD_INSECURE",
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        default_value_t = false,
        value_parser = clap::builder::BoolishValueParser::new(),
    )]
    pub etcd_insecure: bool,
}

impl EtcdArgs {
    /// The settings, or None when no `--etcd` is given. The options' rule
    /// ([`Settings::check`]) is applied: an insecure etcd without `--etcd-insecure` is an
    /// error; with it, every warning is logged now.
    pub fn settings(&self) -> anyhow::Result<Option<Settings>> {
        let Some(etcd) = &self.etcd else {
            return Ok(None);
        };
        let settings = Settings {
            endpoints: parse_endpoints(etcd).map_err(|e| anyhow!(e))?,
            cacert: self.etcd_cacert.clone(),
            cert: self.etcd_cert.clone(),
            key: self.etcd_key.clone(),
            user: self.etcd_user.clone(),
            password_file: self.etcd_password_file.clone(),
            insecure: self.etcd_insecure,
        };
        for warning in settings.check().map_err(|e| anyhow!(e))? {
            tracing::warn!("{warning}");
        }
        Ok(Some(settings))
    }

    /// The settings of a command that needs etcd (`berth controller`, `berth cluster …`).
    pub fn required(&self) -> anyhow::Result<Settings> {
        self.settings()?.ok_or_else(|| {
            anyhow!(
                "--etcd (or BERTH_ETCD, or `etcd` in the configuration file) is required: the etcd cluster's client URLs, https://HOST:PORT[,…]"
            )
        })
    }
}
