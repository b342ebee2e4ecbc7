//! berth's own AWS access on this host, as `berth run`, the agent and `berth validate` take it:
//! the options (`--aws auto|on|off`, `--aws-timeout`, `--aws-role-duration`), loading it through
//! berth-aws (the AWS SDK's default chain and settings: environment keys, profiles, SSO,
//! `credential_process`, web identity, instance metadata; `AWS_REGION`; `AWS_ENDPOINT_URL[_<SERVICE>]`),
//! and what is built on it ([`AwsServices`]): the STS role source for task and execution roles,
//! the execution role's duties (SSM, Secrets Manager, S3, ECR) and the CloudWatch Logs endpoint
//! the `awslogs` driver is given.
//!
//! No AWS access (`off`, or `auto` when the chain finds no credentials) leaves berth as it was:
//! the local sources alone. The host's own keys are berth's: they are never given to a container
//! (tasks get role credentials through the credentials endpoint only).

use berth_aws::{AwsAccess, AwsSettings, AwsValues, StsRoles};
use berth_engine::remote::RemoteAccess;
use berth_engine::roles::RoleSource;
use std::sync::Arc;
use std::time::Duration;

/// How long `--aws auto` looks for credentials (instance metadata that never answers on a host
/// outside EC2 would otherwise hold every start for the SDK's retries).
const AUTO_PROBE_BOUND: Duration = Duration::from_secs(3);

/// When berth uses AWS.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AwsMode {
    /// When the AWS SDK's default chain finds credentials and a region (asked once at start,
    /// for at most 3 s).
    #[default]
    Auto,
    /// Always: berth refuses to start when the chain finds no credentials.
    On,
    /// Never: task roles, secrets and environment files come from the local sources only.
    Off,
}

/// berth's AWS access options (shared by `run`, `agent` and `validate`).
#[derive(clap::Args, Debug, Clone)]
pub struct AwsArgs {
    /// Use AWS for task roles (STS AssumeRole), secrets (SSM Parameter Store, Secrets Manager),
    /// environment files (S3), private ECR images and the awslogs driver. Credentials, region and
    /// endpoints come from the AWS SDK's standard settings (AWS_ACCESS_KEY_ID…, AWS_PROFILE and
    /// ~/.aws, SSO, credential_process, web identity, instance metadata; AWS_REGION;
    /// AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_<SERVICE>). auto: when those find credentials; on:
    /// required; off: never (the local sources only: --task-role-dir, --secrets-dir,
    /// --environment-files-dir, Docker logins).
    #[arg(long, env = "BERTH_AWS", value_enum, default_value_t = AwsMode::Auto)]
    pub aws: AwsMode,

    /// How long one AWS call may take, retries included (STS, SSM, Secrets Manager, S3, ECR).
    #[arg(long, env = "BERTH_AWS_TIMEOUT", value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub aws_timeout: Duration,

    /// How long assumed role credentials last (STS DurationSeconds; 15 min to the role's maximum
    /// session duration). berth asks again when half of it has passed.
    #[arg(long, env = "BERTH_AWS_ROLE_DURATION", value_name = "DURATION", default_value = "1h", value_parser = humantime::parse_duration)]
    pub aws_role_duration: Duration,
}

/// What berth's AWS access serves.
#[derive(Clone)]
pub struct AwsServices {
    pub access: AwsAccess,
    /// Task and execution role credentials (STS AssumeRole, cached and refreshed).
    pub roles: Arc<dyn RoleSource>,
    /// The execution role's duties (secrets, S3 objects, ECR logins).
    pub remote: Arc<dyn RemoteAccess>,
}

impl AwsServices {
    /// The CloudWatch Logs endpoint override the `awslogs` driver is given (the Engine does not
    /// see berth's environment); None: the driver's default for its region.
    pub fn logs_endpoint(&self) -> Option<String> {
        self.access.endpoint_override("CLOUDWATCH_LOGS")
    }
}

impl AwsServices {
    /// The identity's account when the operator left it at berth's default (all zeros, no real
    /// account): the account of berth's own credentials, so role names are completed as ECS
    /// completes them. When STS cannot say, the default stays, with a warning naming the fix.
    pub async fn complete_account(&self, identity: &mut berth_engine::Identity) {
        if identity.account != berth_engine::identity::DEFAULT_ACCOUNT {
            return;
        }
        match self.access.caller_account().await {
            Ok(account) => {
                tracing::info!(%account, "the account of berth's AWS credentials completes role names and ARNs (--account-id)");
                identity.account = account;
            }
            Err(why) => tracing::warn!(
                "{why}; role names are completed with account {}: give --account-id",
                identity.account
            ),
        }
    }
}

impl AwsArgs {
    fn settings(&self) -> anyhow::Result<AwsSettings> {
        if self.aws_timeout.is_zero() {
            anyhow::bail!("--aws-timeout must be above zero (e.g. 10s)");
        }
        let role_duration = match crate::test_env::role_duration_override()? {
            Some(d) => d,
            None => {
                if self.aws_role_duration < Duration::from_secs(900)
                    || self.aws_role_duration > Duration::from_secs(12 * 3600)
                {
                    anyhow::bail!(
                        "--aws-role-duration {}: STS issues role credentials for 15m to 12h; give a duration in that range (default 1h)",
                        humantime::format_duration(self.aws_role_duration)
                    );
                }
                self.aws_role_duration
            }
        };
        Ok(AwsSettings {
            timeout: self.aws_timeout,
            role_duration,
        })
    }

    /// berth's AWS access as the options say: None when it is off, or `auto` found no
    /// credentials; an error when `on` found none.
    pub async fn load(&self) -> anyhow::Result<Option<AwsServices>> {
        if self.aws == AwsMode::Off {
            return Ok(None);
        }
        let settings = self.settings()?;
        let probe = async {
            let access = AwsAccess::load(settings).await;
            let found = access.has_credentials().await;
            (access, found)
        };
        // `auto` on a host without AWS must not wait for instance metadata that never answers.
        let (access, found) = if self.aws == AwsMode::Auto {
            match tokio::time::timeout(AUTO_PROBE_BOUND, probe).await {
                Ok(answer) => answer,
                Err(_) => {
                    tracing::debug!(
                        "no AWS access (--aws auto): the default chain found no credentials within {} s",
                        AUTO_PROBE_BOUND.as_secs()
                    );
                    return Ok(None);
                }
            }
        } else {
            probe.await
        };
        match found {
            Ok(()) => {}
            Err(why) if self.aws == AwsMode::Auto => {
                tracing::debug!(%why, "no AWS access (--aws auto): the local sources only");
                return Ok(None);
            }
            Err(why) => anyhow::bail!(
                "--aws on: {why}; configure them as for the AWS CLI (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, SSO, instance metadata), or give --aws off"
            ),
        }
        if access.region().is_none() {
            let why = "berth has AWS credentials but no region: set AWS_REGION (or region in the profile), or give --aws off";
            if self.aws == AwsMode::Auto {
                tracing::warn!("{why}; AWS is not used (--aws auto)");
                return Ok(None);
            }
            anyhow::bail!("--aws on: {why}");
        }
        tracing::info!(aws = %access.describe(), "AWS access");
        Ok(Some(AwsServices {
            roles: Arc::new(StsRoles::new(access.clone())),
            remote: Arc::new(AwsValues::new(access.clone())),
            access,
        }))
    }
}

/// What `berth validate` and `berth run` say of the definition's AWS needs: one line each, which
/// source serves it (see `berth_engine::sources`).
pub fn sources(
    definition: &berth_model::TaskDefinition,
    secrets: &dyn berth_engine::secrets::SecretProvider,
    s3_dir: Option<&std::path::Path>,
    aws: Option<&AwsServices>,
    roles: Option<&Arc<dyn RoleSource>>,
    role_args: &crate::task_roles::TaskRoleArgs,
) -> Vec<String> {
    let endpoint = matches!(role_args.endpoint(), Ok(Some(_)));
    let task_role = role_args.describe_for(roles);
    let aws = aws.map(|a| a.access.describe());
    let roles = roles.map(|r| r.describe());
    berth_engine::sources::describe(
        definition,
        &berth_engine::sources::Host {
            secrets,
            s3_dir,
            aws: aws.as_deref(),
            roles: roles.as_deref(),
            endpoint,
            task_role: &task_role,
        },
    )
}
