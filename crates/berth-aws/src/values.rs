//! A task's execution-role duties done for real ([`AwsValues`], the engine's `RemoteAccess`):
//!
//! - SSM `GetParameter` (`WithDecryption`), `Name` = the `valueFrom` as written (a name, or the
//!   full ARN, which SSM accepts), in the ARN's region when it has one, else berth's;
//! - Secrets Manager `GetSecretValue`, `SecretId` = the ARN without ECS's
//!   `:json-key:version-stage:version-id` suffix, `VersionStage`/`VersionId` from the reference,
//!   in the ARN's region; the value is the `SecretString`;
//! - S3 `GetObject`, the body read whole up to [`S3_OBJECT_LIMIT`], as UTF-8 text;
//! - ECR `GetAuthorizationToken` in the registry's region, its base64 `AWS:<password>` token
//!   decoded into a registry login.
//!
//! Each call is signed with the execution role's credentials when the task has one, else with
//! berth's own access. Errors are the engine's `RemoteError`: AWS's code and message, or for what
//! berth itself refuses in an answer (a binary-only secret, an object too large or not text, a
//! token not of ECR's shape) a `Refused` whose code says so in words ("a binary secret"), so it
//! reads "Secrets Manager at … answered a binary secret: …" and matches no AWS code.

use crate::access::AwsAccess;
use crate::call::{ECR, Failure, S3, SECRETS_MANAGER, SSM, arn_region, error_chain, secret_id};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use base64::Engine as _;
use berth_engine::auth::RegistryAuth;
use berth_engine::remote::{RemoteAccess, RemoteError, ecr_region};
use berth_engine::roles::{BoxFuture, RoleCredentials};
use berth_engine::secrets::SecretValue;
use berth_model::secret::{SecretReference, SecretStore};
use futures_util::FutureExt;

/// The largest S3 object berth reads (environment files are small).
pub const S3_OBJECT_LIMIT: usize = 1024 * 1024;

/// (environment suffix, host prefix) of each service's endpoint.
const SSM_ENDPOINT: (&str, &str) = ("SSM", "ssm");
const SECRETS_MANAGER_ENDPOINT: (&str, &str) = ("SECRETS_MANAGER", "secretsmanager");
const S3_ENDPOINT: (&str, &str) = ("S3", "s3");
const ECR_ENDPOINT: (&str, &str) = ("ECR", "api.ecr");

/// berth's AWS access for secrets, environment files and ECR logins.
pub struct AwsValues {
    access: AwsAccess,
}

impl AwsValues {
    pub fn new(access: AwsAccess) -> AwsValues {
        AwsValues { access }
    }

    fn endpoint(&self, which: (&str, &str), region: Option<&str>) -> String {
        let region = region.map(str::to_owned).or_else(|| self.access.region());
        self.access.endpoint_in(which.0, which.1, region.as_deref())
    }

    /// An SDK error as a `RemoteError`, its refusal naming `operation` and `name`.
    fn failure<E>(
        &self,
        error: &SdkError<E, HttpResponse>,
        (service, endpoint): (&str, &str),
        (operation, name): (&str, &str),
    ) -> RemoteError
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
    {
        Failure::of(error, self.access.settings().timeout)
            .about(operation, name)
            .remote(service, endpoint)
    }

    async fn parameter(
        &self,
        value_from: &str,
        role: Option<&RoleCredentials>,
    ) -> Result<SecretValue, RemoteError> {
        let region = arn_region(value_from);
        let endpoint = self.endpoint(SSM_ENDPOINT, region);
        let client = aws_sdk_ssm::Client::new(&self.access.config_for(region, role));
        let answer = client
            .get_parameter()
            .name(value_from)
            .with_decryption(true)
            .send()
            .await
            .map_err(|e| self.failure(&e, (SSM, &endpoint), ("GetParameter", value_from)))?;
        answer
            .parameter()
            .and_then(|p| p.value())
            .map(|v| SecretValue::new(v.to_owned()))
            .ok_or_else(|| RemoteError::Refused {
                service: SSM.to_owned(),
                endpoint,
                code: "a parameter without a value".to_owned(),
                message: format!("GetParameter {value_from} answered no Parameter.Value"),
            })
    }

    async fn secret_string(
        &self,
        value_from: &str,
        reference: &SecretReference,
        role: Option<&RoleCredentials>,
    ) -> Result<SecretValue, RemoteError> {
        let region = arn_region(value_from);
        let endpoint = self.endpoint(SECRETS_MANAGER_ENDPOINT, region);
        let id = secret_id(value_from);
        let client = aws_sdk_secretsmanager::Client::new(&self.access.config_for(region, role));
        let answer = client
            .get_secret_value()
            .secret_id(id)
            .set_version_stage(reference.version_stage.clone())
            .set_version_id(reference.version_id.clone())
            .send()
            .await
            .map_err(|e| self.failure(&e, (SECRETS_MANAGER, &endpoint), ("GetSecretValue", id)))?;
        match answer.secret_string() {
            Some(s) => Ok(SecretValue::new(s.to_owned())),
            None => Err(RemoteError::Refused {
                service: SECRETS_MANAGER.to_owned(),
                endpoint,
                code: "a binary secret".to_owned(),
                message: format!(
                    "secret {id} has no SecretString (only SecretBinary); ECS injects text secrets only"
                ),
            }),
        }
    }

    async fn object(
        &self,
        bucket: &str,
        key: &str,
        role: Option<&RoleCredentials>,
    ) -> Result<SecretValue, RemoteError> {
        let endpoint = self.endpoint(S3_ENDPOINT, None);
        let mut config = aws_sdk_s3::config::Builder::from(&self.access.config_for(None, role));
        if self.access.endpoint_override(S3_ENDPOINT.0).is_some() {
            // S3-compatible endpoints (and test servers) rarely serve bucket host names.
            config = config.force_path_style(true);
        }
        let client = aws_sdk_s3::Client::from_conf(config.build());
        let refused = |code: &str, message: String| RemoteError::Refused {
            service: S3.to_owned(),
            endpoint: endpoint.clone(),
            code: code.to_owned(),
            message,
        };
        let too_large = |size: String| {
            refused(
                "an object over 1 MiB",
                format!(
                    "s3://{bucket}/{key} is {size}; berth reads objects of up to {S3_OBJECT_LIMIT} bytes"
                ),
            )
        };
        let mut answer = client
            .get_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| {
                let object = format!("s3://{bucket}/{key}");
                self.failure(&e, (S3, &endpoint), ("GetObject", &object))
            })?;
        if let Some(len) = answer.content_length()
            && usize::try_from(len).map_or(true, |l| l > S3_OBJECT_LIMIT)
        {
            return Err(too_large(format!("{len} bytes")));
        }
        let mut body: Vec<u8> = Vec::new();
        loop {
            match answer.body.try_next().await {
                Ok(Some(chunk)) => {
                    body.extend_from_slice(&chunk);
                    if body.len() > S3_OBJECT_LIMIT {
                        return Err(too_large("larger".to_owned()));
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    return Err(RemoteError::Unreachable {
                        service: S3.to_owned(),
                        endpoint: endpoint.clone(),
                        message: format!("reading s3://{bucket}/{key} failed: {}", error_chain(&e)),
                    });
                }
            }
        }
        String::from_utf8(body).map(SecretValue::new).map_err(|e| {
            refused(
                "an object that is not UTF-8 text",
                format!(
                    "s3://{bucket}/{key} is not UTF-8 (invalid byte at offset {})",
                    e.utf8_error().valid_up_to()
                ),
            )
        })
    }

    async fn login(
        &self,
        registry: &str,
        role: Option<&RoleCredentials>,
    ) -> Result<RegistryAuth, RemoteError> {
        let region = ecr_region(registry);
        let endpoint = self.endpoint(ECR_ENDPOINT, region);
        let Some(region) = region else {
            return Err(RemoteError::Refused {
                service: ECR.to_owned(),
                endpoint,
                code: "a registry that is not ECR's".to_owned(),
                message: format!(
                    "{registry} is not a private ECR registry (<account>.dkr.ecr.<region>.amazonaws.com)"
                ),
            });
        };
        let client = aws_sdk_ecr::Client::new(&self.access.config_for(Some(region), role));
        let answer = client.get_authorization_token().send().await.map_err(|e| {
            self.failure(
                &e,
                (ECR, &endpoint),
                ("GetAuthorizationToken for", registry),
            )
        })?;
        let bad_token = |why: &str| RemoteError::Refused {
            service: ECR.to_owned(),
            endpoint: endpoint.clone(),
            code: "a token not of ECR's shape".to_owned(),
            message: format!("GetAuthorizationToken answered {why}"),
        };
        let token = answer
            .authorization_data()
            .iter()
            .find_map(|d| d.authorization_token())
            .ok_or_else(|| bad_token("no authorizationToken"))?;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(token.trim())
            .map_err(|_| bad_token("a token that is not base64"))?;
        let decoded =
            String::from_utf8(decoded).map_err(|_| bad_token("a token that is not text"))?;
        let Some((username, password)) = decoded.split_once(':') else {
            return Err(bad_token("a token without user:password"));
        };
        Ok(RegistryAuth {
            username: username.to_owned(),
            password: password.to_owned(),
            identity_token: None,
            server: registry.to_owned(),
            source: format!("ECR GetAuthorizationToken at {endpoint}"),
        })
    }
}

impl RemoteAccess for AwsValues {
    fn secret<'a>(
        &'a self,
        value_from: &'a str,
        reference: &'a SecretReference,
        role: Option<&'a RoleCredentials>,
    ) -> BoxFuture<'a, Result<SecretValue, RemoteError>> {
        match reference.store {
            SecretStore::ParameterStore => self.parameter(value_from, role).boxed(),
            SecretStore::SecretsManager => self.secret_string(value_from, reference, role).boxed(),
        }
    }

    fn s3_object<'a>(
        &'a self,
        bucket: &'a str,
        key: &'a str,
        role: Option<&'a RoleCredentials>,
    ) -> BoxFuture<'a, Result<SecretValue, RemoteError>> {
        self.object(bucket, key, role).boxed()
    }

    fn ecr_login<'a>(
        &'a self,
        registry: &'a str,
        role: Option<&'a RoleCredentials>,
    ) -> BoxFuture<'a, Result<RegistryAuth, RemoteError>> {
        self.login(registry, role).boxed()
    }

    fn describe(&self) -> String {
        self.access.describe()
    }
}
