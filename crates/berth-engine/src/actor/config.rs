//! What one task run is given: [`RunConfig`] (its settings, collaborators and signals, with
//! defaults for `berth run`) and the [`Persist`] seam the agent's store implements.
//!
//! Persist before acting: the actor saves every state change through [`RunConfig::persist`]
//! before it performs the effects that change leads to; a failed save holds the task (see the
//! loop, `run.rs`). The settings are read, never changed, by the actor.

use super::EngineMetrics;
use crate::auth::RegistryAuthResolver;
use crate::decide::Options;
use crate::pull::{self as pulls, PullBehavior, PullRecord};
use crate::retry::RetryPolicy;
use crate::secrets::{self, SecretProvider};
use crate::spec;
use crate::state::TaskState;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// How long a cancelled actor waits for its effects in flight, by default.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Settings of one task run.
#[derive(Clone)]
pub struct RunConfig {
    pub data_dir: PathBuf,
    pub options: Options,
    pub pull_behavior: PullBehavior,
    /// The pause container's image when the operator names one (obtained with the pull
    /// behaviour); None = berth's own, imported offline ([`crate::pause_image`]).
    pub pause_image: Option<String>,
    /// The images this agent pulled before (for `once`); updated after every successful pull.
    pub pull_record: Arc<dyn PullRecord>,
    /// Finds the registry login for each pull (see [`crate::auth`]). `None`: every pull is
    /// anonymous, and a container with `repositoryCredentials` cannot be pulled.
    pub registry_auth: Option<Arc<dyn RegistryAuthResolver>>,
    /// The Docker volume driver name of berth's volume plugin (EFS volumes use it).
    pub volume_plugin: String,
    /// Where containers reach the task metadata endpoint, when it is served.
    pub metadata: Option<spec::MetadataEndpoint>,
    /// Saves every state change before the actions it leads to (the agent's store).
    pub persist: Option<Arc<dyn Persist>>,
    /// How often a failed save is tried again. While saves fail the actor performs no effect
    /// (it holds the task: nothing Docker does may get ahead of what the store knows) and the
    /// task is listed in [`EngineMetrics::degraded`]. Default: 1 s doubling to 30 s.
    pub save_retry: RetryPolicy,
    /// The state comes from a store after a restart: adopt its containers from Docker first.
    pub resume: bool,
    /// Counters for `/metrics`.
    pub metrics: Arc<EngineMetrics>,
    /// Cancelled when the caller shuts down: the actor stops acting, waits for its effects in
    /// flight (up to `shutdown_grace`) and returns, leaving the containers running. Default: a
    /// token of its own that nobody cancels.
    pub cancel: CancellationToken,
    /// How long a cancelled actor waits for its effects in flight before abandoning them.
    pub shutdown_grace: Duration,
    /// Told the task's id once the actor's state reflects Docker: after adopting its containers
    /// (on resume) and preparing its volumes, before its first decision. The agent counts these
    /// to say when a restart's reconciliation is done.
    pub ready: Option<mpsc::UnboundedSender<String>>,
    /// Where `secrets` and `secretOptions` are read from. Default: no source (a task with secrets
    /// stops with a reason saying how to configure one).
    pub secrets: Arc<dyn SecretProvider>,
    /// The directory standing in for S3: `environmentFiles` ARN `arn:aws:s3:::<bucket>/<key>` is
    /// read from `<dir>/<bucket>/<key>`. None: only absolute paths can be read.
    pub environment_files_dir: Option<PathBuf>,
    /// The directories absolute `environmentFiles` paths may be under (besides
    /// `environment_files_dir`); see [`secrets::EnvironmentFileRules`]. Default: none.
    pub environment_files_allow: Vec<PathBuf>,
    /// The cluster, region and account FireLens's `ecs_cluster` and `ecs_task_arn` record fields
    /// show (the metadata endpoint's). Default: [`crate::Identity::default`].
    pub identity: crate::Identity,
    /// Write each container's metadata file and mount it (`--container-metadata`, ECS's
    /// `ECS_ENABLE_CONTAINER_METADATA`; see [`crate::container_metadata`]). None: no file.
    pub container_metadata: Option<crate::container_metadata::Settings>,
    /// Image tracking for image cleanup: the actor leases every image the task names from its
    /// start until it returns and records each use ([`crate::image_use`]). None (the default,
    /// and `berth run`): nothing is leased or recorded.
    pub images: Option<crate::image_use::ImageTracking>,
    /// What containers logging with `awslogs` are given ([`crate::awslogs`]); the default gives
    /// nothing (the Engine's own credentials and endpoint).
    pub awslogs: crate::awslogs::Settings,
    /// The credentials endpoint is served with a role source: every container of a task with a
    /// `taskRoleArn` gets `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` ([`crate::role_env`]). Default
    /// false: no variable.
    pub credentials: bool,
    /// Where the task's role credentials come from (STS through berth-aws, or a local directory):
    /// the execution role's, for the task's execution-role duties. None: no role is assumed.
    pub roles: Option<Arc<dyn crate::roles::RoleSource>>,
    /// berth's AWS access for the execution role's duties ([`crate::remote`]): secrets that no
    /// local source has, S3 environment files the S3 directory lacks, ECR logins. None (no AWS
    /// access): the local sources alone, as before.
    pub remote: Option<Arc<dyn crate::remote::RemoteAccess>>,
}

/// Durable storage of task state, as the actor needs it.
pub trait Persist: Send + Sync + 'static {
    /// Save the state; durable when the future resolves `Ok`. The actor awaits it before it acts
    /// on the change, so an implementation may batch saves (the agent's store group-commits them).
    fn save(
        &self,
        state: &TaskState,
    ) -> futures_util::future::BoxFuture<'static, Result<(), PersistError>>;
}

/// Why a task's state is not durable.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// The store refused or failed the save of task `task`; `source` is the store's error.
    #[error("saving task {task}: {source}")]
    Save {
        task: String,
        #[source]
        source: crate::BoxError,
    },
}

impl PersistError {
    /// The store's failure of task `task`'s save.
    pub fn save(task: &str, source: impl Into<crate::BoxError>) -> Self {
        PersistError::Save {
            task: task.to_string(),
            source: source.into(),
        }
    }

    /// The task whose state was not saved.
    pub fn task(&self) -> &str {
        match self {
            PersistError::Save { task, .. } => task,
        }
    }

    /// The store's own words (what the agent's health shows, beside the task it lists).
    pub fn cause(&self) -> String {
        match self {
            PersistError::Save { source, .. } => source.to_string(),
        }
    }
}

impl RunConfig {
    /// Defaults: no pulls up front, pull behaviour `default`, an in-memory pull record, no
    /// registry logins, the
    /// volume plugin named `berth`, never cancelled, a shutdown grace of
    /// [`DEFAULT_SHUTDOWN_GRACE`].
    pub fn new(data_dir: PathBuf) -> Self {
        RunConfig {
            data_dir,
            options: Options::default(),
            pull_behavior: PullBehavior::Default,
            pause_image: None,
            pull_record: Arc::new(pulls::MemoryPullRecord::default()),
            registry_auth: None,
            volume_plugin: spec::DEFAULT_VOLUME_PLUGIN.to_string(),
            metadata: None,
            persist: None,
            save_retry: RetryPolicy {
                first: Duration::from_secs(1),
                max: Duration::from_secs(30),
            },
            resume: false,
            metrics: Arc::new(EngineMetrics::default()),
            cancel: CancellationToken::new(),
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            ready: None,
            secrets: Arc::new(secrets::Providers::default()),
            environment_files_dir: None,
            environment_files_allow: Vec::new(),
            identity: crate::Identity::default(),
            container_metadata: None,
            images: None,
            awslogs: crate::awslogs::Settings::default(),
            credentials: false,
            roles: None,
            remote: None,
        }
    }
}
