//! The task's AWS step: when berth has AWS access ([`super::RunConfig::remote`]), everything the
//! task's execution role is for is fetched once, before anything is created — the execution role's
//! credentials (through [`super::RunConfig::roles`]), then, with them, the `secrets`, log
//! `secretOptions` and `repositoryCredentials` that no local source holds (SSM Parameter Store,
//! Secrets Manager), the `environmentFiles` S3 objects the S3 directory lacks, and a login for each
//! private ECR registry the task pulls from.
//!
//! What was fetched ([`Fetched`]) stays in the actor's memory: the secret values are served to
//! [`crate::secrets::resolve_task`] after the local sources ([`Fetched`] is a
//! [`SecretProvider`]), the S3 objects through [`crate::secrets::EnvironmentFileRules::fetched`],
//! and the logins through a per-task [`RegistryAuthResolver`] ([`TaskLogins`]) put in front of the
//! configured one. A refused execution role stops the task with ECS's `ResourceInitializationError`
//! reason, before anything is created; a refused secret or object is reported by
//! `resolve_task`, with the others, in the same reason; a refused ECR login only when the image
//! is pulled (a cached image needs none).
//!
//! Bounded: every call has berth-aws's timeout, and the whole step [`ACCESS_BOUND`].

use super::RunConfig;
use crate::auth::{AuthError, RegistryAuth, RegistryAuthResolver, login_from_secret};
use crate::image_ref::ImageRef;
use crate::remote::{RemoteAccess, ecr_registry};
use crate::roles::{RoleCredentials, RoleRequest, session_name};
use crate::secrets::{
    LookupError, S3Objects, SECRETS_REASON, SecretProvider, SecretValue, needs_values,
};
use crate::state::TaskState;
use berth_model::role::RoleArn;
use berth_model::secret::{EnvironmentFileLocation, SecretReference};
use futures_util::future::{BoxFuture, join_all};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// The longest the whole step may take; past it, the task stops with a reason saying so.
pub const ACCESS_BOUND: Duration = Duration::from_secs(60);

/// What AWS answered for one task.
#[derive(Default)]
pub struct Fetched {
    /// Secrets by [`secret_key`]: the whole value, or AWS's error.
    secrets: HashMap<String, Result<SecretValue, String>>,
    /// `environmentFiles` S3 objects by (bucket, key).
    pub objects: S3Objects,
    /// ECR logins by registry host.
    logins: HashMap<String, Result<RegistryAuth, String>>,
}

/// The key a secret is fetched and looked up under: its store, name and version (the JSON key is
/// selected afterwards, so two keys of one secret are fetched once).
fn secret_key(r: &SecretReference) -> String {
    format!(
        "{:?}\u{0}{}\u{0}{}\u{0}{}",
        r.store,
        r.name,
        r.version_stage.as_deref().unwrap_or(""),
        r.version_id.as_deref().unwrap_or("")
    )
}

impl SecretProvider for Fetched {
    fn lookup(&self, reference: &SecretReference) -> Result<SecretValue, LookupError> {
        match self.secrets.get(&secret_key(reference)) {
            Some(Ok(v)) => Ok(v.clone()),
            Some(Err(e)) => Err(LookupError::Remote(e.clone())),
            None => Err(LookupError::NotFound { looked: Vec::new() }),
        }
    }
}

/// The references, objects and registries a task's not-yet-created containers need from AWS.
#[derive(Default)]
struct Needs {
    /// (key, valueFrom, parsed reference), each key once.
    secrets: Vec<(String, String, SecretReference)>,
    objects: Vec<(String, String)>,
    registries: Vec<String>,
}

impl Needs {
    fn is_empty(&self) -> bool {
        self.secrets.is_empty() && self.objects.is_empty() && self.registries.is_empty()
    }
}

fn needs(state: &TaskState, config: &RunConfig) -> Needs {
    let mut n = Needs::default();
    for i in 0..state.containers.len() {
        if !needs_values(state, i) {
            continue;
        }
        let def = state.def(i);
        let parameters = def
            .repository_credentials
            .iter()
            .map(|c| c.credentials_parameter.as_str());
        let references = def
            .secrets
            .iter()
            .chain(def.log_secret_options().iter())
            .map(|s| s.value_from.as_str())
            .chain(parameters);
        for value_from in references {
            let Ok(r) = SecretReference::parse(value_from) else {
                continue; // resolve_task reports it
            };
            // A local source that has it (or fails to read it) answers; AWS is not asked.
            if !matches!(config.secrets.lookup(&r), Err(LookupError::NotFound { .. })) {
                continue;
            }
            let key = secret_key(&r);
            if !n.secrets.iter().any(|(k, _, _)| *k == key) {
                n.secrets.push((key, value_from.to_string(), r));
            }
        }
        for file in &def.environment_files {
            if let Ok(EnvironmentFileLocation::S3 { bucket, key }) =
                EnvironmentFileLocation::parse(&file.value)
            {
                let local = config
                    .environment_files_dir
                    .as_ref()
                    .is_some_and(|d| d.join(&bucket).join(&key).is_file());
                let pair = (bucket, key);
                if !local && !n.objects.contains(&pair) {
                    n.objects.push(pair);
                }
            }
        }
        if let Some(host) = ecr_registry(&def.image)
            && !n.registries.contains(&host)
        {
            n.registries.push(host);
        }
    }
    n
}

/// The step's outcome: what was fetched, or the reason the task stops with.
pub(super) enum Outcome {
    /// Nothing to fetch, or no AWS access.
    Nothing,
    Fetched(Fetched),
    /// The execution role could not be had, or AWS took longer than [`ACCESS_BOUND`].
    Failed(String),
}

/// Fetch what the task needs from AWS (see the module header).
pub(super) async fn fetch(state: &TaskState, config: &RunConfig) -> Outcome {
    let Some(remote) = config.remote.clone() else {
        return Outcome::Nothing;
    };
    let needs = needs(state, config);
    if needs.is_empty() {
        return Outcome::Nothing;
    }
    match tokio::time::timeout(ACCESS_BOUND, fetch_all(state, config, &*remote, needs)).await {
        Ok(outcome) => outcome,
        Err(_) => Outcome::Failed(format!(
            "{SECRETS_REASON}{} did not answer within {} s",
            remote.describe(),
            ACCESS_BOUND.as_secs()
        )),
    }
}

async fn fetch_all(
    state: &TaskState,
    config: &RunConfig,
    remote: &dyn RemoteAccess,
    needs: Needs,
) -> Outcome {
    let role = match execution_role(state, config).await {
        Ok(role) => role,
        Err(why) => return Outcome::Failed(format!("{SECRETS_REASON}{why}")),
    };
    let role = role.as_ref();
    let secrets = join_all(needs.secrets.iter().map(|(key, value_from, r)| async move {
        let answer = remote.secret(value_from, r, role).await;
        (key.clone(), answer.map_err(|e| e.to_string()))
    }));
    let objects = join_all(needs.objects.iter().map(|(bucket, key)| async move {
        let answer = remote.s3_object(bucket, key, role).await;
        (
            (bucket.clone(), key.clone()),
            answer.map_err(|e| e.to_string()),
        )
    }));
    let logins = join_all(needs.registries.iter().map(|host| async move {
        let answer = remote.ecr_login(host, role).await;
        (host.clone(), answer.map_err(|e| e.to_string()))
    }));
    let (secrets, objects, logins) = tokio::join!(secrets, objects, logins);
    Outcome::Fetched(Fetched {
        secrets: secrets.into_iter().collect(),
        objects: objects.into_iter().collect(),
        logins: logins.into_iter().collect(),
    })
}

/// The execution role's credentials when the task names one and a role source exists; None: the
/// calls are made with berth's own access. `Err`: the reason, naming the role.
async fn execution_role(
    state: &TaskState,
    config: &RunConfig,
) -> Result<Option<RoleCredentials>, String> {
    let (Some(given), Some(roles)) = (&state.definition.execution_role_arn, &config.roles) else {
        return Ok(None);
    };
    let identity = &config.identity;
    let arn = RoleArn::resolve(given, &identity.partition, &identity.account)
        .map_err(|why| format!("executionRoleArn {given}: {why}"))?;
    let request = RoleRequest {
        role_arn: arn.to_string(),
        session_name: session_name(&state.definition.family, &state.id),
    };
    roles
        .credentials(&request)
        .await
        .map(Some)
        .map_err(|e| format!("execution role: {e}"))
}

/// The registry logins of one task: ECR logins and `repositoryCredentials` fetched from AWS first,
/// then the configured resolver.
pub(super) struct TaskLogins {
    fetched: Arc<Fetched>,
    inner: Option<Arc<dyn RegistryAuthResolver>>,
}

impl TaskLogins {
    pub(super) fn new(fetched: Arc<Fetched>, inner: Option<Arc<dyn RegistryAuthResolver>>) -> Self {
        TaskLogins { fetched, inner }
    }
}

impl RegistryAuthResolver for TaskLogins {
    fn resolve(
        &self,
        image: &str,
        credentials_parameter: Option<&str>,
    ) -> BoxFuture<'static, Result<Option<RegistryAuth>, AuthError>> {
        let fetched = self.fetched.clone();
        let inner = self.inner.clone();
        let (image, parameter) = (image.to_string(), credentials_parameter.map(str::to_string));
        Box::pin(async move {
            let server = ImageRef::parse(&image)
                .map(|r| r.login_registry().to_string())
                .unwrap_or_default();
            if let Some(p) = &parameter
                && let Ok(r) = SecretReference::parse(p)
            {
                match fetched.lookup(&r) {
                    Ok(value) => return login_from_secret(p, value.expose(), &server).map(Some),
                    Err(LookupError::Remote(message)) => {
                        return Err(AuthError::Source {
                            origin: format!("repositoryCredentials.credentialsParameter {p:?}"),
                            message,
                        });
                    }
                    Err(_) => {}
                }
            }
            if parameter.is_none()
                && let Some(answer) = fetched.logins.get(&server)
            {
                return match answer {
                    Ok(login) => Ok(Some(login.clone())),
                    Err(message) => Err(AuthError::Source {
                        origin: format!("ECR login for {server}"),
                        message: message.clone(),
                    }),
                };
            }
            match (inner, parameter) {
                (Some(r), parameter) => r.resolve(&image, parameter.as_deref()).await,
                (None, Some(parameter)) => Err(AuthError::NoSecretProvider { parameter }),
                (None, None) => Ok(None),
            }
        })
    }
}
