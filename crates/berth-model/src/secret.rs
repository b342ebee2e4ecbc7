//! Secret references (`secrets[].valueFrom`, `logConfiguration.secretOptions[].valueFrom`, and
//! later `repositoryCredentials.credentialsParameter`) and environment-file locations, parsed into
//! what a local source needs: which store the reference names (SSM Parameter Store or Secrets
//! Manager), the name inside it, and for Secrets Manager the `json-key:version-stage:version-id`
//! suffix. Pure: no lookup happens here; [`SecretReference::file_names`] says which names a local
//! source looks under, in order (docs/task-definitions.md, "Secrets").
//!
//! The rules are ECS's (the ECS agent's `asmsecret` and `ssmsecret` resources): an ARN whose service
//! is `secretsmanager` is a Secrets Manager secret, its resource `secret:<id>` or
//! `secret:<id>:<json-key>:<version-stage>:<version-id>` (each of the three may be empty); an ARN
//! whose service is `ssm` is a parameter (`parameter/<name>`); anything that is not an ARN is the
//! name of a parameter. Limits: a name must map to a relative path that stays inside the source
//! (no empty, `.` or `..` component), which every valid SSM and Secrets Manager name does.

use std::fmt;

/// The store a reference names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretStore {
    /// AWS Systems Manager Parameter Store.
    ParameterStore,
    /// AWS Secrets Manager.
    SecretsManager,
}

impl SecretStore {
    pub fn as_str(self) -> &'static str {
        match self {
            SecretStore::ParameterStore => "SSM parameter",
            SecretStore::SecretsManager => "Secrets Manager secret",
        }
    }
}

/// A parsed `valueFrom`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretReference {
    pub store: SecretStore,
    /// The parameter name without its leading `/` (`prod/db/password`), or the secret id as the
    /// ARN or the reference writes it (`prod/db-AbCdEf`).
    pub name: String,
    /// Secrets Manager: the key of the JSON object to take the value from.
    pub json_key: Option<String>,
    /// Secrets Manager: the version stage (`AWSPREVIOUS`); `AWSCURRENT` is the same as none.
    pub version_stage: Option<String>,
    /// Secrets Manager: the version id.
    pub version_id: Option<String>,
}

/// Why a reference cannot be used (the message completes "valueFrom …: ").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReferenceError(pub String);

impl fmt::Display for ReferenceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ReferenceError {}

/// Splits an ARN into (service, resource): `arn:<partition>:<service>:<region>:<account>:<resource>`
/// (the resource may itself contain `:`). None when `s` is not shaped like an ARN.
fn split_arn(s: &str) -> Option<(&str, &str)> {
    let mut parts = s.splitn(6, ':');
    let (arn, _partition, service, _region, _account, resource) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    (arn == "arn").then_some((service, resource))
}

/// A name that maps to a relative path inside a source: not empty, no empty, `.` or `..`
/// component, no NUL.
fn check_name(name: &str, what: &str) -> Result<(), ReferenceError> {
    if name.is_empty() {
        return Err(ReferenceError(format!("the {what} name is empty")));
    }
    if name.contains('\0') {
        return Err(ReferenceError(format!(
            "the {what} name contains a NUL byte"
        )));
    }
    if name
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err(ReferenceError(format!(
            "the {what} name {name:?} has an empty, \".\" or \"..\" path component; ECS names never do"
        )));
    }
    Ok(())
}

impl SecretReference {
    /// Parse a `valueFrom` (see the module header for the rules).
    pub fn parse(value_from: &str) -> Result<Self, ReferenceError> {
        if value_from.is_empty() {
            return Err(ReferenceError("must not be empty".into()));
        }
        if value_from.chars().any(char::is_whitespace) {
            return Err(ReferenceError(
                "contains whitespace; write the ARN or the parameter name alone".into(),
            ));
        }
        let Some((service, resource)) = split_arn(value_from) else {
            if value_from.starts_with("arn:") {
                return Err(ReferenceError(
                    "is not a valid ARN; use arn:aws:ssm:<region>:<account>:parameter/<name>, arn:aws:secretsmanager:<region>:<account>:secret:<name>, or a parameter name".into(),
                ));
            }
            // A parameter name, with or without its leading "/".
            let name = value_from.strip_prefix('/').unwrap_or(value_from);
            check_name(name, "parameter")?;
            return Ok(SecretReference::parameter(name));
        };
        match service {
            "ssm" => {
                let Some(name) = resource.strip_prefix("parameter/") else {
                    return Err(ReferenceError(format!(
                        "an SSM ARN's resource must be parameter/<name>, found {resource:?}"
                    )));
                };
                check_name(name, "parameter")?;
                Ok(SecretReference::parameter(name))
            }
            "secretsmanager" => {
                let fields: Vec<&str> = resource.split(':').collect();
                let (id, json_key, stage, version) = match fields.as_slice() {
                    ["secret", id] => (*id, "", "", ""),
                    ["secret", id, key, stage, version] => (*id, *key, *stage, *version),
                    _ => {
                        return Err(ReferenceError(
                            "an invalid ARN format for the AWS Secrets Manager secret was specified: use arn:aws:secretsmanager:<region>:<account>:secret:<name> or …:secret:<name>:<json-key>:<version-stage>:<version-id> (each of the last three may be empty)".into(),
                        ));
                    }
                };
                check_name(id, "secret")?;
                let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
                Ok(SecretReference {
                    store: SecretStore::SecretsManager,
                    name: id.to_owned(),
                    json_key: some(json_key),
                    version_stage: some(stage),
                    version_id: some(version),
                })
            }
            other => Err(ReferenceError(format!(
                "names a resource of service {other:?}; a secret comes from \"ssm\" (Parameter Store) or \"secretsmanager\""
            ))),
        }
    }

    fn parameter(name: &str) -> Self {
        SecretReference {
            store: SecretStore::ParameterStore,
            name: name.to_owned(),
            json_key: None,
            version_stage: None,
            version_id: None,
        }
    }

    /// The version a local source must hold: the version id if given, else a stage other than
    /// `AWSCURRENT`; None for the current version.
    pub fn version(&self) -> Option<&str> {
        self.version_id
            .as_deref()
            .or(self.version_stage.as_deref().filter(|s| *s != "AWSCURRENT"))
    }

    /// The names, relative paths with `/` between components, under which a local source looks for
    /// this secret, in order:
    ///
    /// - a parameter: its name without the leading `/` (`/prod/db/password` → `prod/db/password`);
    /// - a Secrets Manager secret: its id as written (`prod/db-AbCdEf`), then, when the id ends in
    ///   the six-character suffix Secrets Manager adds to ARNs (`-` and six letters or digits), the
    ///   name without it (`prod/db`);
    /// - either, for a version other than the current one: each of those followed by `@<version>`
    ///   (`prod/db@AWSPREVIOUS`), and only those.
    pub fn file_names(&self) -> Vec<String> {
        let mut names = vec![self.name.clone()];
        if self.store == SecretStore::SecretsManager
            && let Some(stem) = strip_arn_suffix(&self.name)
        {
            names.push(stem.to_owned());
        }
        match self.version() {
            Some(v) => names.into_iter().map(|n| format!("{n}@{v}")).collect(),
            None => names,
        }
    }
}

/// `name` without the `-XXXXXX` suffix Secrets Manager appends in ARNs, when it has one and
/// something remains.
fn strip_arn_suffix(name: &str) -> Option<&str> {
    let (stem, suffix) = name.rsplit_once('-')?;
    let last = stem.rsplit('/').next().unwrap_or(stem);
    (suffix.len() == 6 && suffix.bytes().all(|b| b.is_ascii_alphanumeric()) && !last.is_empty())
        .then_some(stem)
}

/// Where an `environmentFiles` entry's file is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvironmentFileLocation {
    /// `arn:aws:s3:::<bucket>/<key>`: berth reads `<environment files directory>/<bucket>/<key>`.
    S3 { bucket: String, key: String },
    /// An absolute path on the host (berth only; ECS takes S3 objects alone).
    Local(String),
}

impl EnvironmentFileLocation {
    /// Parse an `environmentFiles[].value`.
    pub fn parse(value: &str) -> Result<Self, ReferenceError> {
        if value.starts_with('/') {
            if value.contains('\0') {
                return Err(ReferenceError("the path contains a NUL byte".into()));
            }
            return Ok(EnvironmentFileLocation::Local(value.to_owned()));
        }
        let Some((service, resource)) = split_arn(value) else {
            return Err(ReferenceError(
                "must be an S3 object ARN (arn:aws:s3:::<bucket>/<key>) or an absolute path on this host".into(),
            ));
        };
        if service != "s3" {
            return Err(ReferenceError(format!(
                "names a resource of service {service:?}; environment files are S3 objects (arn:aws:s3:::<bucket>/<key>) or absolute paths"
            )));
        }
        let Some((bucket, key)) = resource.split_once('/') else {
            return Err(ReferenceError(format!(
                "the S3 ARN's resource must be <bucket>/<key>, found {resource:?}"
            )));
        };
        if bucket.is_empty() || bucket.contains(':') {
            return Err(ReferenceError(format!(
                "{bucket:?} is not an S3 bucket name"
            )));
        }
        // As the ECS agent checks before it downloads: the key must stay under the bucket.
        check_name(key, "S3 object")?;
        Ok(EnvironmentFileLocation::S3 {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sm(name: &str, key: Option<&str>, stage: Option<&str>, id: Option<&str>) -> SecretReference {
        SecretReference {
            store: SecretStore::SecretsManager,
            name: name.into(),
            json_key: key.map(Into::into),
            version_stage: stage.map(Into::into),
            version_id: id.map(Into::into),
        }
    }

    #[test]
    fn parameters_by_name_and_arn() {
        for v in [
            "prod/db/password",
            "/prod/db/password",
            "arn:aws:ssm:us-east-1:123456789012:parameter/prod/db/password",
        ] {
            let r = SecretReference::parse(v).expect(v);
            assert_eq!(r.store, SecretStore::ParameterStore, "{v}");
            assert_eq!(r.file_names(), vec!["prod/db/password"], "{v}");
        }
    }

    #[test]
    fn secrets_manager_arns_with_and_without_the_suffix() {
        let r =
            SecretReference::parse("arn:aws:secretsmanager:us-east-1:123:secret:prod/db-AbC123")
                .expect("valid");
        assert_eq!(r, sm("prod/db-AbC123", None, None, None));
        assert_eq!(r.file_names(), vec!["prod/db-AbC123", "prod/db"]);
        let r = SecretReference::parse(
            "arn:aws:secretsmanager:us-east-1:123:secret:db-AbC123:password:AWSPREVIOUS:",
        )
        .expect("valid");
        assert_eq!(
            r,
            sm("db-AbC123", Some("password"), Some("AWSPREVIOUS"), None)
        );
        assert_eq!(
            r.file_names(),
            vec!["db-AbC123@AWSPREVIOUS", "db@AWSPREVIOUS"]
        );
        let r = SecretReference::parse("arn:aws:secretsmanager:r:1:secret:db:username:AWSCURRENT:")
            .expect("valid");
        assert_eq!(r.file_names(), vec!["db"]);
        let r = SecretReference::parse("arn:aws:secretsmanager:r:1:secret:db:::v-1").expect("ok");
        assert_eq!(r.file_names(), vec!["db@v-1"]);
    }

    #[test]
    fn bad_references_say_why() {
        for (v, words) in [
            ("", "empty"),
            (
                "arn:aws:secretsmanager:r:1:secret:db:key",
                "invalid ARN format",
            ),
            ("arn:aws:s3:::bucket/key", "service \"s3\""),
            ("arn:aws:ssm:r:1:document/x", "parameter/<name>"),
            ("../etc/shadow", "\"..\""),
            ("arn:aws:ssm", "not a valid ARN"),
            ("a b", "whitespace"),
        ] {
            let e = SecretReference::parse(v).expect_err(v);
            assert!(e.0.contains(words), "{v}: {e}");
        }
    }

    #[test]
    fn environment_file_locations() {
        assert_eq!(
            EnvironmentFileLocation::parse("arn:aws:s3:::my-bucket/app/prod.env"),
            Ok(EnvironmentFileLocation::S3 {
                bucket: "my-bucket".into(),
                key: "app/prod.env".into()
            })
        );
        assert_eq!(
            EnvironmentFileLocation::parse("/etc/app.env"),
            Ok(EnvironmentFileLocation::Local("/etc/app.env".into()))
        );
        for v in [
            "relative.env",
            "arn:aws:s3:::bucket",
            "arn:aws:s3:::b/../x.env",
        ] {
            assert!(EnvironmentFileLocation::parse(v).is_err(), "{v}");
        }
    }
}
