//! The task's AWS step on the fake runtime, with a fake [`RemoteAccess`] and [`RoleSource`]:
//! secrets no local source has, S3 environment files and ECR logins are fetched with the
//! execution role's credentials and reach the create spec and the pull; a local source answers
//! first; a refused execution role or secret stops the task with ECS's reason before anything is
//! pulled or created; without AWS access nothing is asked. (Against moto, with berth-aws:
//! `crates/berth/tests/aws_engine.rs`.)

mod common;

use berth_engine::fake::{FakeRuntime, Script};
use berth_engine::remote::{RemoteAccess, RemoteError};
use berth_engine::roles::{RoleCredentials, RoleError, RoleRequest, RoleSource};
use berth_engine::secrets::{LookupError, SecretProvider, SecretValue};
use berth_engine::{Command, PullBehavior, RegistryAuth, RunConfig, TaskState, run_task};
use berth_model::secret::SecretReference;
use berth_model::{EnvironmentFile, Secret};
use common::*;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, watch};

const EXEC_KEY: &str = "ASIAEXECUTIONROLE001";

/// Answers every role with fixed keys (or refuses), recording what it was asked.
#[derive(Default)]
struct Roles {
    refuse: bool,
    asked: Mutex<Vec<RoleRequest>>,
}

impl RoleSource for Roles {
    fn credentials<'a>(
        &'a self,
        request: &'a RoleRequest,
    ) -> BoxFuture<'a, Result<RoleCredentials, RoleError>> {
        self.asked.lock().unwrap().push(request.clone());
        let answer = if self.refuse {
            Err(RoleError::Refused {
                role_arn: request.role_arn.clone(),
                service: "STS".into(),
                endpoint: "http://sts.test".into(),
                code: "AccessDenied".into(),
                message: "not authorized to perform sts:AssumeRole".into(),
            })
        } else {
            Ok(RoleCredentials {
                role_arn: request.role_arn.clone(),
                access_key_id: EXEC_KEY.into(),
                secret_access_key: SecretValue::new("exec-secret".into()),
                session_token: Some(SecretValue::new("exec-token".into())),
                expiration_ms: i64::MAX,
            })
        };
        async move { answer }.boxed()
    }
    fn describe(&self) -> String {
        "test roles".into()
    }
}

/// SSM/Secrets Manager, S3 and ECR in memory; records the key each call was signed with.
#[derive(Default)]
struct Aws {
    asked: Mutex<Vec<(String, Option<String>)>>,
}

impl Aws {
    fn record(&self, what: String, role: Option<&RoleCredentials>) {
        self.asked
            .lock()
            .unwrap()
            .push((what, role.map(|r| r.access_key_id.clone())));
    }
    fn asked(&self) -> Vec<(String, Option<String>)> {
        self.asked.lock().unwrap().clone()
    }
}

impl RemoteAccess for Aws {
    fn secret<'a>(
        &'a self,
        value_from: &'a str,
        reference: &'a SecretReference,
        role: Option<&'a RoleCredentials>,
    ) -> BoxFuture<'a, Result<SecretValue, RemoteError>> {
        self.record(format!("secret {value_from}"), role);
        let answer = match reference.name.as_str() {
            "prod/db" => Ok(SecretValue::new("from-ssm".into())),
            "app-AbCdEf" => Ok(SecretValue::new(r#"{"user":"admin","pw":"p4ss"}"#.into())),
            other => Err(RemoteError::Refused {
                service: "SSM".into(),
                endpoint: "http://ssm.test".into(),
                code: "ParameterNotFound".into(),
                message: format!("Parameter {other} not found."),
            }),
        };
        async move { answer }.boxed()
    }
    fn s3_object<'a>(
        &'a self,
        bucket: &'a str,
        key: &'a str,
        role: Option<&'a RoleCredentials>,
    ) -> BoxFuture<'a, Result<SecretValue, RemoteError>> {
        self.record(format!("s3 {bucket}/{key}"), role);
        async move { Ok(SecretValue::new("FROM_S3=yes\n".into())) }.boxed()
    }
    fn ecr_login<'a>(
        &'a self,
        registry: &'a str,
        role: Option<&'a RoleCredentials>,
    ) -> BoxFuture<'a, Result<RegistryAuth, RemoteError>> {
        self.record(format!("ecr {registry}"), role);
        let login = RegistryAuth {
            username: "AWS".into(),
            password: "ecr-token".into(),
            identity_token: None,
            server: registry.to_string(),
            source: "ECR".into(),
        };
        async move { Ok(login) }.boxed()
    }
    fn describe(&self) -> String {
        "test AWS".into()
    }
}

/// A local source that has one secret.
struct Local;

impl SecretProvider for Local {
    fn lookup(&self, r: &SecretReference) -> Result<SecretValue, LookupError> {
        if r.name == "local/one" {
            return Ok(SecretValue::new("from-local".into()));
        }
        Err(LookupError::NotFound {
            looked: vec![format!("file /secrets/{}", r.name)],
        })
    }
}

fn secret(name: &str, value_from: &str) -> Secret {
    Secret {
        name: name.into(),
        value_from: value_from.into(),
    }
}

async fn run(
    rt: &FakeRuntime,
    s: TaskState,
    aws: Option<Arc<Aws>>,
    roles: Arc<Roles>,
) -> TaskState {
    let (rtx, _rrx) = mpsc::unbounded_channel();
    let (_ctx, crx) = mpsc::channel::<Command>(1);
    let (stx, _srx) = watch::channel(s.clone());
    let mut config = RunConfig::new(std::env::temp_dir().join("berth-engine-access-tests"));
    config.secrets = Arc::new(Local);
    config.roles = Some(roles);
    config.remote = aws.map(|a| a as Arc<dyn RemoteAccess>);
    config.pull_behavior = PullBehavior::Always;
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        run_task(Arc::new(rt.clone()), s, config, rtx, crx, stx),
    )
    .await
    .expect("task ends")
}

fn task(c: berth_model::ContainerDefinition, execution_role: Option<&str>) -> TaskState {
    let mut s = state(vec![c]);
    s.definition.execution_role_arn = execution_role.map(str::to_string);
    s
}

fn env_of(rt: &FakeRuntime) -> Vec<String> {
    rt.created_specs()
        .into_iter()
        .find(|s| s.name.contains("-app-"))
        .expect("app was created")
        .env
}

#[tokio::test]
async fn values_come_from_aws_with_the_execution_role_and_local_sources_first() {
    let rt = FakeRuntime::new();
    rt.add_remote("img");
    rt.script(
        "app",
        Script {
            exit_code: Some(0),
            ..Default::default()
        },
    );
    let mut c = container("app");
    c.secrets = vec![
        secret("DB", "arn:aws:ssm:us-east-1:123456789012:parameter/prod/db"),
        secret(
            "USER",
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:app-AbCdEf:user::",
        ),
        secret(
            "PW",
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:app-AbCdEf:pw::",
        ),
        secret("LOCAL", "local/one"),
    ];
    c.environment_files = vec![EnvironmentFile {
        value: "arn:aws:s3:::bucket/app.env".into(),
        file_type: berth_model::EnvironmentFileType::S3,
    }];
    let aws = Arc::new(Aws::default());
    let roles = Arc::new(Roles::default());
    let s = task(c, Some("arn:aws:iam::123456789012:role/exec"));
    let done = run(&rt, s, Some(aws.clone()), roles.clone()).await;
    assert_eq!(done.containers[0].exit_code, Some(0), "{done:?}");
    let env = env_of(&rt);
    for want in [
        "DB=from-ssm",
        "USER=admin",
        "PW=p4ss",
        "LOCAL=from-local",
        "FROM_S3=yes",
    ] {
        assert!(env.contains(&want.to_string()), "{want} in {env:?}");
    }
    let asked = aws.asked();
    // One call per secret (two JSON keys of one secret: one call), none for the local one, all
    // signed with the execution role's key.
    assert_eq!(asked.len(), 3, "{asked:?}");
    assert!(
        asked.iter().all(|(_, k)| k.as_deref() == Some(EXEC_KEY)),
        "{asked:?}"
    );
    assert!(!asked.iter().any(|(w, _)| w.contains("local/one")));
    let requests = roles.asked.lock().unwrap().clone();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].role_arn, "arn:aws:iam::123456789012:role/exec");
    assert!(
        requests[0].session_name.starts_with("berth-"),
        "{requests:?}"
    );
}

#[tokio::test]
async fn a_refused_execution_role_stops_the_task_before_anything_is_created() {
    let rt = FakeRuntime::new();
    let mut c = container("app");
    c.secrets = vec![secret("DB", "/prod/db")];
    let aws = Arc::new(Aws::default());
    let roles = Arc::new(Roles {
        refuse: true,
        ..Default::default()
    });
    let done = run(&rt, task(c, Some("exec")), Some(aws.clone()), roles).await;
    let reason = done.stopped_reason.clone().unwrap_or_default();
    assert!(
        reason.starts_with(
            "ResourceInitializationError: unable to pull secrets or registry auth: execution role"
        ),
        "{reason}"
    );
    // The role name completed with the host's account, and AWS's words.
    assert!(reason.contains("role/exec"), "{reason}");
    assert!(reason.contains("AccessDenied"), "{reason}");
    assert_eq!(rt.container_count(), 0, "nothing was created");
    assert!(
        aws.asked().is_empty(),
        "no secret was asked without the role"
    );
}

#[tokio::test]
async fn a_missing_parameter_stops_the_task_naming_it_and_awss_error() {
    let rt = FakeRuntime::new();
    let mut c = container("app");
    c.secrets = vec![secret("DB", "/prod/db"), secret("GONE", "/prod/gone")];
    let done = run(
        &rt,
        task(c, None),
        Some(Arc::new(Aws::default())),
        Arc::default(),
    )
    .await;
    let reason = done.stopped_reason.clone().unwrap_or_default();
    assert!(
        reason.starts_with("ResourceInitializationError: unable to pull secrets"),
        "{reason}"
    );
    assert!(
        reason.contains("secret GONE of container app (/prod/gone)"),
        "{reason}"
    );
    assert!(
        reason.contains("ParameterNotFound: Parameter prod/gone not found."),
        "{reason}"
    );
    assert!(
        !reason.contains("from-ssm"),
        "no value in the reason: {reason}"
    );
    assert_eq!(rt.container_count(), 0, "nothing was created");
}

#[tokio::test]
async fn an_ecr_image_is_pulled_with_ecrs_login() {
    let rt = FakeRuntime::new();
    let image = "123456789012.dkr.ecr.us-east-1.amazonaws.com/app:1";
    rt.add_private(image, "AWS", "ecr-token");
    rt.script(
        "app",
        Script {
            exit_code: Some(0),
            ..Default::default()
        },
    );
    let mut c = container("app");
    c.image = image.into();
    let aws = Arc::new(Aws::default());
    let done = run(
        &rt,
        task(c, Some("exec")),
        Some(aws.clone()),
        Arc::default(),
    )
    .await;
    assert_eq!(done.containers[0].exit_code, Some(0), "{done:?}");
    assert_eq!(
        rt.pull_logins(),
        [(image.to_string(), Some("AWS".to_string()))]
    );
    assert_eq!(
        aws.asked(),
        [(
            "ecr 123456789012.dkr.ecr.us-east-1.amazonaws.com".to_string(),
            Some(EXEC_KEY.to_string())
        )]
    );
}

#[tokio::test]
async fn without_aws_access_nothing_is_asked() {
    let rt = FakeRuntime::new();
    let mut c = container("app");
    c.secrets = vec![secret("DB", "/prod/db")];
    let roles = Arc::new(Roles::default());
    let done = run(&rt, task(c, Some("exec")), None, roles.clone()).await;
    let reason = done.stopped_reason.clone().unwrap_or_default();
    assert!(
        reason.contains("not found; berth looked at file /secrets/prod/db"),
        "{reason}"
    );
    assert!(roles.asked.lock().unwrap().is_empty());
}
