//! berth's own AWS access ([`AwsAccess`]): the SDK configuration loaded once from the SDK's
//! standard default chain (environment keys, profile files with `credential_process` and SSO, web
//! identity, the container credentials endpoint, EC2 instance metadata; `AWS_REGION`;
//! `AWS_ENDPOINT_URL` and `AWS_ENDPOINT_URL_<SERVICE>`, honoured by the SDK itself), the HTTPS
//! client (rustls with ring), the per-operation timeout, and the one place a service client is
//! built (a region of the call's own, and a role's temporary credentials instead of berth's).
//!
//! Also what berth says about its access: the endpoint a service is reached at (for messages and
//! the awslogs driver), whether the chain has credentials at all ([`AwsAccess::has_credentials`],
//! for `--aws auto|on`) and a description that names the region, where the credentials came from
//! and any endpoint override — never a key. [`AwsOverrides`] lets berth's own options (and tests)
//! set the region or one endpoint over the chain's.

use crate::call::{error_chain, readable_duration, region_partition};
use aws_config::identity::IdentityCache;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_credential_types::Credentials;
use aws_credential_types::credential_feature::AwsCredentialFeature;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
use aws_smithy_types::timeout::TimeoutConfig;
use berth_engine::roles::RoleCredentials;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// The name role credentials carry inside the SDK (its logs and metrics).
const ROLE_PROVIDER_NAME: &str = "berth-execution-role";

/// How berth talks to AWS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AwsSettings {
    /// How long one operation may take, retries included (also the connect timeout).
    pub timeout: Duration,
    /// How long an assumed role's credentials last (STS `DurationSeconds`).
    pub role_duration: Duration,
}

impl Default for AwsSettings {
    fn default() -> Self {
        AwsSettings {
            timeout: Duration::from_secs(10),
            role_duration: Duration::from_secs(3600),
        }
    }
}

/// berth's AWS access: the SDK configuration from the default chain and berth's settings. Cheap
/// to clone (the HTTPS client and the credentials cache are shared).
#[derive(Clone)]
pub struct AwsAccess {
    config: SdkConfig,
    settings: AwsSettings,
    /// Where the chain's credentials came from, once they were asked for.
    source: Arc<Mutex<Option<String>>>,
}

impl std::fmt::Debug for AwsAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

/// One environment variable, when set and not empty.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The DNS suffix of a region's partition.
fn dns_suffix(region: &str) -> &'static str {
    match region_partition(region) {
        "aws-cn" => "amazonaws.com.cn",
        _ => "amazonaws.com",
    }
}

/// The words for where credentials came from, from the SDK's own record of it.
fn feature_words(feature: &AwsCredentialFeature) -> Option<&'static str> {
    Some(match feature {
        AwsCredentialFeature::CredentialsCode => "code",
        AwsCredentialFeature::CredentialsEnvVars => "environment variables",
        AwsCredentialFeature::CredentialsEnvVarsStsWebIdToken => {
            "a web identity token (environment variables)"
        }
        AwsCredentialFeature::CredentialsStsAssumeRole => "STS AssumeRole (a profile's role_arn)",
        AwsCredentialFeature::CredentialsStsAssumeRoleWebId => "STS AssumeRoleWithWebIdentity",
        AwsCredentialFeature::CredentialsProfile => "the profile files",
        AwsCredentialFeature::CredentialsProfileSourceProfile => "a profile's source_profile",
        AwsCredentialFeature::CredentialsProfileNamedProvider => "a profile's credential_source",
        AwsCredentialFeature::CredentialsProfileStsWebIdToken => "a profile's web identity token",
        AwsCredentialFeature::CredentialsProfileSso | AwsCredentialFeature::CredentialsSso => "SSO",
        AwsCredentialFeature::CredentialsProfileProcess
        | AwsCredentialFeature::CredentialsProcess => "credential_process",
        AwsCredentialFeature::CredentialsHttp => "the container credentials endpoint",
        AwsCredentialFeature::CredentialsImds => "EC2 instance metadata (IMDS)",
        AwsCredentialFeature::CredentialsProfileLogin | AwsCredentialFeature::CredentialsLogin => {
            "a console login session"
        }
        _ => return None,
    })
}

/// Where `credentials` came from, in words ("environment variables", "SSO, STS AssumeRole …").
fn credentials_source(credentials: &Credentials) -> String {
    let mut words: Vec<&str> = Vec::new();
    for feature in credentials
        .get_property::<Vec<AwsCredentialFeature>>()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        if let Some(w) = feature_words(feature)
            && !words.contains(&w)
        {
            words.push(w);
        }
    }
    if words.is_empty() {
        "the SDK's default chain".to_owned()
    } else {
        words.join(", ")
    }
}

/// The sources the SDK's default chain tries, in its order, for a message when it found none.
pub const CHAIN_SOURCES: &str = "environment variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), \
    the profile files (~/.aws/credentials, ~/.aws/config: keys, role_arn, credential_process, SSO; \
    AWS_PROFILE), a web identity token (AWS_WEB_IDENTITY_TOKEN_FILE), the container credentials \
    endpoint (AWS_CONTAINER_CREDENTIALS_*) and EC2 instance metadata (IMDS)";

/// What berth sets over the default chain (its own options; tests pointing it at a server of
/// their own). Each `None` leaves the SDK's choice.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AwsOverrides {
    /// The region, over `AWS_REGION` and the profile's.
    pub region: Option<String>,
    /// One endpoint for every service, over `AWS_ENDPOINT_URL` (`AWS_ENDPOINT_URL_<SERVICE>`
    /// still wins for its service, as in the SDK).
    pub endpoint_url: Option<String>,
}

impl AwsAccess {
    /// Load berth's access from the SDK's default chain. Nothing is asked of AWS yet: the
    /// credentials are resolved at the first call (or by [`has_credentials`](Self::has_credentials)).
    pub async fn load(settings: AwsSettings) -> AwsAccess {
        AwsAccess::load_with(settings, AwsOverrides::default()).await
    }

    /// [`load`](Self::load) with berth's own overrides.
    pub async fn load_with(settings: AwsSettings, overrides: AwsOverrides) -> AwsAccess {
        let http_client = aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
            .build_https();
        let timeouts = TimeoutConfig::builder()
            .operation_timeout(settings.timeout)
            .connect_timeout(settings.timeout)
            .build();
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .http_client(http_client)
            .timeout_config(timeouts);
        if let Some(region) = overrides.region {
            loader = loader.region(Region::new(region));
        }
        if let Some(url) = overrides.endpoint_url {
            loader = loader.endpoint_url(url);
        }
        let config = loader.load().await;
        AwsAccess {
            config,
            settings,
            source: Arc::new(Mutex::new(None)),
        }
    }

    /// berth's settings.
    pub fn settings(&self) -> AwsSettings {
        self.settings
    }

    /// Ask the default chain for credentials once, within the timeout. Err: why there are none,
    /// with the sources the chain tried and the SDK's words.
    pub async fn has_credentials(&self) -> Result<(), String> {
        let Some(provider) = self.config.credentials_provider() else {
            return Err("the AWS SDK configuration has no credentials provider".to_owned());
        };
        let asked =
            tokio::time::timeout(self.settings.timeout, provider.provide_credentials()).await;
        match asked {
            Ok(Ok(credentials)) => {
                if let Ok(mut source) = self.source.lock() {
                    *source = Some(credentials_source(&credentials));
                }
                Ok(())
            }
            Ok(Err(e)) => Err(format!(
                "no AWS credentials: {}; the chain looks at {CHAIN_SOURCES}",
                error_chain(&e)
            )),
            Err(_) => Err(format!(
                "no AWS credentials within {}: the chain (which looks at {CHAIN_SOURCES}) did not answer in time",
                readable_duration(self.settings.timeout)
            )),
        }
    }

    /// berth's region (`AWS_REGION`, the profile's `region`, IMDS), when one is configured.
    pub fn region(&self) -> Option<String> {
        self.config.region().map(|r| r.as_ref().to_owned())
    }

    /// The endpoint overrides for a service: `AWS_ENDPOINT_URL_<env_suffix>`, else the global
    /// `AWS_ENDPOINT_URL` (or the profile's `endpoint_url`). None: AWS's own endpoint.
    pub fn endpoint_override(&self, env_suffix: &str) -> Option<String> {
        env(&format!("AWS_ENDPOINT_URL_{env_suffix}"))
            .or_else(|| self.config.endpoint_url().map(str::to_owned))
    }

    /// Where a service is reached in berth's region: the override, else
    /// `https://<service_prefix>.<region>.amazonaws.com` (`.com.cn` in China). E.g.
    /// `endpoint("CLOUDWATCH_LOGS", "logs")`.
    pub fn endpoint(&self, env_suffix: &str, service_prefix: &str) -> String {
        self.endpoint_in(env_suffix, service_prefix, self.region().as_deref())
    }

    /// [`endpoint`](Self::endpoint) in a given region (None: berth's has none either).
    pub fn endpoint_in(
        &self,
        env_suffix: &str,
        service_prefix: &str,
        region: Option<&str>,
    ) -> String {
        if let Some(url) = self.endpoint_override(env_suffix) {
            return url;
        }
        match region {
            Some(r) => format!("https://{service_prefix}.{r}.{}", dns_suffix(r)),
            None => format!("https://{service_prefix}.<no region: set AWS_REGION>.amazonaws.com"),
        }
    }

    /// What this access is: "AWS (region us-east-1, credentials from environment variables,
    /// endpoint override http://127.0.0.1:4566)". Never a key.
    pub fn describe(&self) -> String {
        let region = self.region().unwrap_or_else(|| "none".to_owned());
        let source = self
            .source
            .lock()
            .ok()
            .and_then(|s| s.clone())
            .unwrap_or_else(|| "the SDK's default chain".to_owned());
        let mut s = format!("AWS (region {region}, credentials from {source}");
        if let Some(url) = self.config.endpoint_url() {
            s.push_str(&format!(", endpoint override {url}"));
        }
        s.push(')');
        s
    }

    /// The SDK configuration for one call: in `region` when given (else berth's), signed with the
    /// role's credentials when given (else berth's own).
    /// The account of berth's own credentials (STS `GetCallerIdentity`): what a role name
    /// (`"taskRoleArn": "app"`) is completed with when the operator gives no account, as ECS
    /// completes it with the instance's. Err: STS's words, with its endpoint.
    pub async fn caller_account(&self) -> Result<String, String> {
        let client = aws_sdk_sts::Client::new(&self.config_for(None, None));
        let endpoint = self.endpoint("STS", "sts");
        let answer = client
            .get_caller_identity()
            .send()
            .await
            .map_err(|e| format!("STS GetCallerIdentity at {endpoint}: {}", error_chain(&e)))?;
        answer
            .account()
            .map(str::to_owned)
            .ok_or_else(|| format!("STS GetCallerIdentity at {endpoint} answered no Account"))
    }

    pub(crate) fn config_for(
        &self,
        region: Option<&str>,
        role: Option<&RoleCredentials>,
    ) -> SdkConfig {
        let mut builder = self.config.to_builder();
        if let Some(r) = region {
            builder.set_region(Some(Region::new(r.to_owned())));
        }
        if let Some(role) = role {
            let expiry = SystemTime::UNIX_EPOCH
                + Duration::from_millis(u64::try_from(role.expiration_ms).unwrap_or(0));
            let credentials = Credentials::new(
                role.access_key_id.clone(),
                role.secret_access_key.expose().to_owned(),
                role.session_token.as_ref().map(|t| t.expose().to_owned()),
                Some(expiry),
                ROLE_PROVIDER_NAME,
            );
            builder.set_credentials_provider(Some(SharedCredentialsProvider::new(credentials)));
            // The shared cache would keep one entry per role credentials for good.
            builder.set_identity_cache(Some(IdentityCache::no_cache()));
        }
        builder.build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn china_regions_have_their_own_dns_suffix() {
        assert_eq!(dns_suffix("cn-north-1"), "amazonaws.com.cn");
        assert_eq!(dns_suffix("us-gov-west-1"), "amazonaws.com");
        assert_eq!(dns_suffix("eu-west-1"), "amazonaws.com");
    }

    #[test]
    fn settings_default_to_ten_seconds_and_an_hour() {
        let s = AwsSettings::default();
        assert_eq!(s.timeout, Duration::from_secs(10));
        assert_eq!(s.role_duration, Duration::from_secs(3600));
    }
}
