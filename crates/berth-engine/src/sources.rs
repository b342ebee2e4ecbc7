//! Which source will serve each thing a task asks of AWS — its task role, its execution role, each
//! secret and secret log option, each environment file, each private ECR image, each `awslogs`
//! container — on this host, as `berth validate` and `berth run` say it. The same rules as the
//! actor's (local sources first, then AWS; see `actor::access`), so what is said is what happens.
//! Pure apart from asking the local secret provider and whether a file exists; never a value.

use crate::remote::ecr_registry;
use crate::secrets::{LookupError, SecretProvider};
use berth_model::TaskDefinition;
use berth_model::secret::{EnvironmentFileLocation, SecretReference};
use std::path::Path;

/// What this host has.
pub struct Host<'a> {
    /// The local secret sources (`--secrets-dir`, `--secrets-from-env`).
    pub secrets: &'a dyn SecretProvider,
    /// The directory standing in for S3 (`--environment-files-dir`).
    pub s3_dir: Option<&'a Path>,
    /// berth's AWS access, described; None: no AWS access.
    pub aws: Option<&'a str>,
    /// The role source, described (STS, or a local directory); None: none.
    pub roles: Option<&'a str>,
    /// Whether the credentials endpoint is served (for `awslogs`' execution role).
    pub endpoint: bool,
    /// What serves a `taskRoleArn` here (the endpoint's address and the role source, or why
    /// nothing does), as the binary words it.
    pub task_role: &'a str,
}

/// One line per thing the definition asks of AWS (none for a definition that asks nothing).
pub fn describe(def: &TaskDefinition, host: &Host<'_>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(role) = &def.task_role_arn {
        out.push(format!("taskRoleArn {role}: {}", host.task_role));
    }
    if let Some(role) = &def.execution_role_arn {
        out.push(match (host.aws, host.roles) {
            (Some(_), Some(roles)) => format!(
                "executionRoleArn {role}: assumed from {roles} for the task's secrets, environment files, ECR logins and awslogs"
            ),
            (Some(aws), None) => {
                format!("executionRoleArn {role}: no role source; berth's own access ({aws}) is used")
            }
            (None, _) => format!(
                "executionRoleArn {role}: no AWS access; the local sources stand in for what it is for"
            ),
        });
    }
    for c in &def.container_definitions {
        let secrets = c.secrets.iter().map(|s| ("secret", s)).chain(
            c.log_secret_options()
                .iter()
                .map(|s| ("log secret option", s)),
        );
        for (what, s) in secrets {
            let source = match SecretReference::parse(&s.value_from) {
                Err(e) => format!("invalid ({e})"),
                Ok(r) => match (host.secrets.lookup(&r), host.aws) {
                    (Ok(_), _) => "the local secret sources".to_string(),
                    (Err(LookupError::Unreadable(m) | LookupError::Remote(m)), _) => {
                        format!("unreadable locally ({m})")
                    }
                    (Err(LookupError::NotFound { .. }), Some(aws)) => {
                        format!("{} from {aws}", r.store.as_str())
                    }
                    (Err(LookupError::NotFound { looked }), None) if looked.is_empty() => {
                        "no source (no AWS access, no --secrets-dir)".to_string()
                    }
                    (Err(LookupError::NotFound { looked }), None) => {
                        format!("not found (looked at {})", looked.join(", "))
                    }
                },
            };
            out.push(format!(
                "{what} {} of container {} ({}): {source}",
                s.name, c.name, s.value_from
            ));
        }
        for f in &c.environment_files {
            let source = match EnvironmentFileLocation::parse(&f.value) {
                Err(e) => format!("invalid ({e})"),
                Ok(EnvironmentFileLocation::Local(p)) => format!("the host file {p}"),
                Ok(EnvironmentFileLocation::S3 { bucket, key }) => {
                    let local = host.s3_dir.map(|d| d.join(&bucket).join(&key));
                    match (local, host.aws) {
                        (Some(p), _) if p.is_file() => format!("{}", p.display()),
                        (_, Some(aws)) => format!("S3 from {aws}"),
                        (Some(p), None) => format!("{} (not there yet)", p.display()),
                        (None, None) => {
                            "no source (no AWS access, no --environment-files-dir)".to_string()
                        }
                    }
                }
            };
            out.push(format!(
                "environment file {} of container {}: {source}",
                f.value, c.name
            ));
        }
        if ecr_registry(&c.image).is_some() && c.repository_credentials.is_none() {
            out.push(format!(
                "image {} of container {}: {}",
                c.image,
                c.name,
                match host.aws {
                    Some(aws) => format!("login from ECR GetAuthorizationToken ({aws})"),
                    None => "no AWS access: the Docker logins berth has (--docker-config, ECS_ENGINE_AUTH_DATA)".to_string(),
                }
            ));
        }
        if let Some(log) = &c.log_configuration
            && log.log_driver.as_str() == crate::awslogs::DRIVER
        {
            let credentials =
                if def.execution_role_arn.is_some() && host.endpoint && host.roles.is_some() {
                    "the execution role through the credentials endpoint"
                } else {
                    "the Docker Engine's own AWS credentials"
                };
            out.push(format!(
                "awslogs of container {}: shipped by the Docker Engine with {credentials}",
                c.name
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::SecretValue;
    use berth_model::{ContainerDefinition, Secret};

    struct Has(&'static str);
    impl SecretProvider for Has {
        fn lookup(&self, r: &SecretReference) -> Result<SecretValue, LookupError> {
            if r.name == self.0 {
                Ok(SecretValue::new("v".into()))
            } else {
                Err(LookupError::NotFound {
                    looked: vec![format!("file /s/{}", r.name)],
                })
            }
        }
    }

    fn def() -> TaskDefinition {
        let mut c =
            ContainerDefinition::new("app", "123456789012.dkr.ecr.eu-west-1.amazonaws.com/app:1");
        c.secrets = vec![
            Secret {
                name: "A".into(),
                value_from: "local/a".into(),
            },
            Secret {
                name: "B".into(),
                value_from: "/prod/b".into(),
            },
        ];
        let mut d = TaskDefinition::new("t", vec![c]);
        d.execution_role_arn = Some("exec".into());
        d
    }

    #[test]
    fn each_need_names_its_source_with_and_without_aws() {
        let local = Has("local/a");
        let mut host = Host {
            secrets: &local,
            s3_dir: None,
            aws: Some("AWS (us-east-1)"),
            roles: Some("STS at http://sts"),
            endpoint: true,
            task_role: "served",
        };
        let with = describe(&def(), &host);
        assert_eq!(
            with,
            [
                "executionRoleArn exec: assumed from STS at http://sts for the task's secrets, environment files, ECR logins and awslogs",
                "secret A of container app (local/a): the local secret sources",
                "secret B of container app (/prod/b): SSM parameter from AWS (us-east-1)",
                "image 123456789012.dkr.ecr.eu-west-1.amazonaws.com/app:1 of container app: login from ECR GetAuthorizationToken (AWS (us-east-1))",
            ]
        );
        host.aws = None;
        let without = describe(&def(), &host);
        assert!(
            without[2].ends_with("not found (looked at file /s/prod/b)"),
            "{without:?}"
        );
        assert!(without[0].contains("no AWS access"), "{without:?}");
    }
}
