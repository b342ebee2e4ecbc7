//! AWS as the engine sees it: the [`RemoteAccess`] seam through which a task's execution-role
//! duties are done for real when berth has AWS access — `secrets` and log `secretOptions` from SSM
//! Parameter Store and Secrets Manager, `environmentFiles` from S3, and logins for private ECR
//! registries — each asked with the task's execution role when it names one (credentials from
//! [`crate::roles::RoleSource`]), else with berth's own access. Implemented by `berth-aws` (the
//! only crate that talks to AWS); the engine knows only the trait, and asks it once per task,
//! before anything is created (`actor::access`).
//!
//! Errors carry the service, the endpoint and AWS's own code and words (`ParameterNotFound`,
//! `AccessDenied`), never a value. Values are [`SecretValue`]s (redacted in `Debug`).

use crate::auth::RegistryAuth;
use crate::roles::RoleCredentials;
use crate::secrets::SecretValue;
use berth_model::secret::SecretReference;
use futures_util::future::BoxFuture;

/// Why AWS gave no answer. The `Display` names the service and endpoint; a refusal quotes AWS.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemoteError {
    /// The service answered with an error: its code (`ParameterNotFound`, `AccessDenied`, …) and
    /// message, as AWS wrote them.
    #[error("{service} at {endpoint} answered {code}: {message}")]
    Refused {
        service: String,
        endpoint: String,
        code: String,
        message: String,
    },
    /// The service could not be reached or did not answer in time (connect, TLS, timeout).
    #[error("cannot reach {service} at {endpoint}: {message}")]
    Unreachable {
        service: String,
        endpoint: String,
        message: String,
    },
}

/// berth's AWS access, for a task's execution-role duties. `role`: the execution role's
/// credentials when the task names one (None: berth's own access, as configured on the host).
pub trait RemoteAccess: Send + Sync + 'static {
    /// The whole value of a secret: an SSM parameter (decrypted, `WithDecryption`) or a Secrets
    /// Manager secret's `SecretString` at the reference's version stage or id. `value_from` is the
    /// reference as the definition writes it (a parameter name or an ARN, whose region is used);
    /// selecting a JSON key is the caller's job ([`crate::secrets::resolve`]).
    fn secret<'a>(
        &'a self,
        value_from: &'a str,
        reference: &'a SecretReference,
        role: Option<&'a RoleCredentials>,
    ) -> BoxFuture<'a, Result<SecretValue, RemoteError>>;

    /// The content of an S3 object (`environmentFiles`), as text.
    fn s3_object<'a>(
        &'a self,
        bucket: &'a str,
        key: &'a str,
        role: Option<&'a RoleCredentials>,
    ) -> BoxFuture<'a, Result<SecretValue, RemoteError>>;

    /// A login for the private ECR registry `registry` (`<account>.dkr.ecr.<region>.amazonaws.com`)
    /// from ECR's `GetAuthorizationToken` in the registry's region.
    fn ecr_login<'a>(
        &'a self,
        registry: &'a str,
        role: Option<&'a RoleCredentials>,
    ) -> BoxFuture<'a, Result<RegistryAuth, RemoteError>>;

    /// What this access is, for logs and `berth validate` ("AWS (region us-east-1, endpoint …)").
    fn describe(&self) -> String;
}

/// Whether `host` is a private ECR registry, `<12 digits>.dkr.ecr[-fips].<region>.amazonaws.com`
/// (or `.amazonaws.com.cn`); its region when it is. A `:port`, which ECR's own names never carry,
/// is allowed (a name pointed at a registry of one's own, as berth's tests do).
pub fn ecr_region(host: &str) -> Option<&str> {
    let host = host.split_once(':').map_or(host, |(name, _)| name);
    let rest = host
        .strip_suffix(".amazonaws.com")
        .or_else(|| host.strip_suffix(".amazonaws.com.cn"))?;
    let (account, rest) = rest.split_once('.')?;
    if account.len() != 12 || !account.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let region = rest
        .strip_prefix("dkr.ecr.")
        .or_else(|| rest.strip_prefix("dkr.ecr-fips."))?;
    (!region.is_empty() && !region.contains('.')).then_some(region)
}

/// The registry of `image` when it is a private ECR registry (the actor logs in to it through
/// [`RemoteAccess::ecr_login`]; `berth validate` says so), else None.
pub fn ecr_registry(image: &str) -> Option<String> {
    let image = crate::image_ref::ImageRef::parse(image).ok()?;
    ecr_region(image.domain()).map(|_| image.domain().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ecr_registries_are_told_by_their_host() {
        assert_eq!(
            ecr_region("123456789012.dkr.ecr.us-east-1.amazonaws.com"),
            Some("us-east-1")
        );
        assert_eq!(
            ecr_region("123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn"),
            Some("cn-north-1")
        );
        assert_eq!(
            ecr_region("123456789012.dkr.ecr-fips.us-gov-west-1.amazonaws.com"),
            Some("us-gov-west-1")
        );
        assert_eq!(
            ecr_region("123456789012.dkr.ecr.us-east-1.amazonaws.com:5000"),
            Some("us-east-1")
        );
        for other in [
            "public.ecr.aws",
            "127.0.0.1:5000",
            "12345.dkr.ecr.us-east-1.amazonaws.com",
            "123456789012.dkr.ecr..amazonaws.com",
            "docker.io",
        ] {
            assert_eq!(ecr_region(other), None, "{other}");
        }
    }
}
