//! Task IAM roles on this host: the options (`--credentials-endpoint`, `--credentials-audit-log`,
//! `--task-role-dir`, shared by `berth run`, the agent and `berth validate`), the local role
//! source (one JSON file per role, for hosts that cannot reach STS), the choice of source
//! ([`role_source`]: AWS first when berth has it, else the directory), and starting the
//! credentials endpoint (berth-api's `credentials`) on its address ([`crate::link_local`]).
//!
//! Invariants: no key, secret or token is ever logged or put in an error; messages name the
//! file and how to fix it.

use anyhow::Context as _;
use berth_api::credentials::{CredentialsConfig, CredentialsError, CredentialsServer};
use berth_api::metadata::TaskDirectory;
use berth_api::metadata::json::TaskInfo;
use berth_engine::roles::{BoxFuture, RoleCredentials, RoleError, RoleRequest, RoleSource};
use berth_engine::secrets::SecretValue;
use berth_engine::state::TaskState;
use berth_model::role::RoleArn;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// ECS's credentials endpoint, where every AWS SDK looks.
pub const DEFAULT_ENDPOINT: &str = "169.254.170.2:80";
/// The audit log's file in the data directory.
pub const AUDIT_FILE: &str = "credentials-audit.log";

/// Where task role credentials come from and where containers read them.
#[derive(clap::Args, Debug, Clone)]
pub struct TaskRoleArgs {
    /// Serve task role credentials (ECS's /v2/credentials/<id>) and the task metadata endpoint v2
    /// on this address, and give every container of a task with a taskRoleArn
    /// AWS_CONTAINER_CREDENTIALS_RELATIVE_URI. AWS SDKs look only at 169.254.170.2:80, which berth
    /// adds to the loopback device (as root) and removes at exit. Served only when a role source
    /// exists (--task-role-dir, or AWS access). `off`: not served; containers get no variable.
    #[arg(long, env = "BERTH_CREDENTIALS_ENDPOINT", value_name = "ADDR|off", default_value = DEFAULT_ENDPOINT)]
    pub credentials_endpoint: String,

    /// The credentials audit log (the ECS agent's format, one line per request, never a
    /// credential; 0600, rotated at 10 MB to PATH.1). Default: DATA_DIR/credentials-audit.log.
    /// `off`: none.
    #[arg(long, env = "BERTH_CREDENTIALS_AUDIT_LOG", value_name = "PATH|off")]
    pub credentials_audit_log: Option<String>,

    /// Local role credentials, for hosts that cannot reach STS: the role named NAME (by ARN or
    /// name) is served from DIR/NAME.json, holding {"AccessKeyId", "SecretAccessKey", "Token"
    /// (optional), "Expiration" (optional, RFC 3339)}, read at every request. Should be readable
    /// by berth's user alone. See docs/task-definitions.md (taskRoleArn).
    #[arg(long, env = "BERTH_TASK_ROLE_DIR", value_name = "DIR")]
    pub task_role_dir: Option<PathBuf>,
}

impl TaskRoleArgs {
    /// The endpoint's address; None: `off`.
    pub fn endpoint(&self) -> anyhow::Result<Option<SocketAddr>> {
        let v = self.credentials_endpoint.trim();
        if v.eq_ignore_ascii_case("off") {
            return Ok(None);
        }
        v.parse().map(Some).map_err(|e| {
            anyhow::anyhow!(
                "--credentials-endpoint {v:?}: {e}; give ADDR:PORT (default {DEFAULT_ENDPOINT}) or off"
            )
        })
    }

    /// The audit log's path; None: `off`.
    pub fn audit_log(&self, data_dir: &Path) -> Option<PathBuf> {
        match self.credentials_audit_log.as_deref().map(str::trim) {
            Some(v) if v.eq_ignore_ascii_case("off") => None,
            Some(v) if !v.is_empty() => Some(PathBuf::from(v)),
            _ => Some(data_dir.join(AUDIT_FILE)),
        }
    }

    /// Start the endpoint when it is on and `source` exists: the address made reachable, the
    /// listener bound. None when there is nothing to serve.
    pub async fn serve<R: berth_engine::Runtime>(
        &self,
        rt: Arc<R>,
        directory: Arc<TaskDirectory>,
        source: Option<Arc<dyn RoleSource>>,
        task: TaskInfo,
        data_dir: &Path,
    ) -> anyhow::Result<Option<Endpoint>> {
        let (Some(addr), Some(source)) = (self.endpoint()?, source) else {
            return Ok(None);
        };
        let mut link = match addr.ip() {
            IpAddr::V4(ip) => Some(crate::link_local::LinkLocal::ensure(ip)?),
            IpAddr::V6(_) => None,
        };
        let described = source.describe();
        let config = CredentialsConfig {
            task,
            audit_log: self.audit_log(data_dir),
            limits: berth_api::serve::ServerLimits::METADATA,
        };
        let server = match CredentialsServer::start(rt, directory, Some(source), config, addr).await
        {
            Ok(s) => s,
            Err(CredentialsError::Listen { addr, error })
                if error.kind() == std::io::ErrorKind::AddrInUse =>
            {
                let holder = crate::link_local::port_holder(addr)
                    .unwrap_or_else(|| "another process".to_string());
                anyhow::bail!(
                    "cannot serve the credentials endpoint on {addr}: {holder} listens there; stop it (an ECS agent, another berth), \
                     or give --credentials-endpoint off"
                );
            }
            Err(e) => return Err(e).context("starting the credentials endpoint"),
        };
        if let Some(link) = &mut link {
            link.served();
        }
        if addr != SocketAddr::new(crate::link_local::ECS_ADDRESS.into(), 80) {
            tracing::warn!(%addr, "the credentials endpoint is not on {DEFAULT_ENDPOINT}: AWS SDKs in containers reach it only if you forward that address here");
        }
        tracing::info!(%addr, source = %described, audit_log = ?self.audit_log(data_dir), "credentials endpoint listening");
        Ok(Some(Endpoint {
            server,
            _link: link,
        }))
    }

    /// What `berth validate` says of a definition's taskRoleArn.
    pub fn describe_for(&self, source: Option<&Arc<dyn RoleSource>>) -> String {
        match (self.endpoint(), source) {
            (Ok(None), _) => "the credentials endpoint is off (--credentials-endpoint off): its containers get no credentials".into(),
            (Err(e), _) => e.to_string(),
            (Ok(Some(_)), None) => format!("no role source is configured: its containers get no credentials ({FIX})"),
            (Ok(Some(addr)), Some(s)) => format!("served at http://{addr}/v2/credentials/ from {}", s.describe()),
        }
    }
}

/// How to give berth a role source.
pub const FIX: &str = "give --task-role-dir DIR with DIR/<role name>.json, or AWS access";

/// The running endpoint; [`Endpoint::shutdown`] stops it and removes the address berth added.
pub struct Endpoint {
    server: CredentialsServer,
    _link: Option<crate::link_local::LinkLocal>,
}

impl Endpoint {
    pub async fn shutdown(self) {
        self.server.shutdown().await;
        // `_link` is dropped here: the address goes.
    }
}

/// The role source: AWS's when berth has AWS access, else the directory's, else none.
pub fn role_source(
    aws: Option<Arc<dyn RoleSource>>,
    args: &TaskRoleArgs,
) -> Option<Arc<dyn RoleSource>> {
    aws.or_else(|| {
        args.task_role_dir
            .clone()
            .map(|dir| Arc::new(LocalRoles { dir }) as Arc<dyn RoleSource>)
    })
}

/// The warning said once for a task with a taskRoleArn whose credentials are not served: its
/// containers get no variable, why, and how to fix it. None when there is nothing to say.
pub fn unserved_warning(state: &TaskState, endpoint_on: bool) -> Option<String> {
    let role = state.definition.task_role_arn.as_ref()?;
    let why = if endpoint_on {
        format!("no role source is configured ({FIX})")
    } else {
        "the credentials endpoint is off (--credentials-endpoint)".to_string()
    };
    Some(format!(
        "task {} ({}) names taskRoleArn {role}, but {why}: its containers get no AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        state.id, state.definition.family
    ))
}

/// The local source: `DIR/<role name>.json`.
pub struct LocalRoles {
    pub dir: PathBuf,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RoleFile {
    access_key_id: String,
    secret_access_key: String,
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    expiration: Option<String>,
}

impl LocalRoles {
    fn read(&self, role_arn: &str) -> Result<RoleCredentials, RoleError> {
        let unavailable = |why: String| RoleError::Unavailable {
            role_arn: role_arn.to_string(),
            why,
        };
        let name = RoleArn::parse(role_arn)
            .map(|a| a.name)
            .map_err(|e| unavailable(e.to_string()))?;
        let file = self.dir.join(format!("{name}.json"));
        let text = match std::fs::read_to_string(&file) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(unavailable(format!(
                    "no file {} (--task-role-dir): write {{\"AccessKeyId\": …, \"SecretAccessKey\": …, \"Token\": …}} there, or give berth AWS access",
                    file.display()
                )));
            }
            Err(e) => return Err(unavailable(format!("cannot read {}: {e}", file.display()))),
        };
        // serde_json's error names the line and column, never the content.
        let f: RoleFile = serde_json::from_str(&text).map_err(|e| {
            unavailable(format!(
                "{} is not {{\"AccessKeyId\", \"SecretAccessKey\", \"Token\"?, \"Expiration\"?}}: {e}",
                file.display()
            ))
        })?;
        let expiration_ms = match &f.expiration {
            None => 0,
            Some(t) => {
                time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339)
                    .map(|t| i64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(0))
                    .map_err(|e| {
                        unavailable(format!(
                            "{}: Expiration {t:?} is not RFC 3339: {e}",
                            file.display()
                        ))
                    })?
            }
        };
        Ok(RoleCredentials {
            role_arn: role_arn.to_string(),
            access_key_id: f.access_key_id,
            secret_access_key: SecretValue::new(f.secret_access_key),
            session_token: f.token.map(SecretValue::new),
            expiration_ms,
        })
    }
}

impl RoleSource for LocalRoles {
    fn credentials<'a>(
        &'a self,
        request: &'a RoleRequest,
    ) -> BoxFuture<'a, Result<RoleCredentials, RoleError>> {
        Box::pin(async move { self.read(&request.role_arn) })
    }

    fn describe(&self) -> String {
        format!("files in {} (--task-role-dir)", self.dir.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_role_file_is_read_by_the_roles_name_and_a_missing_one_says_how_to_fix() {
        let tmp = tempfile::tempdir().expect("tmp");
        std::fs::write(
            tmp.path().join("app.json"),
            r#"{"AccessKeyId": "AKID", "SecretAccessKey": "SECRET", "Token": "TOK", "Expiration": "2026-12-02T12:00:00Z"}"#,
        )
        .expect("write");
        let roles = LocalRoles {
            dir: tmp.path().to_path_buf(),
        };
        let c = roles
            .read("arn:aws:iam::123456789012:role/team/app")
            .expect("read");
        assert_eq!(c.access_key_id, "AKID");
        assert_eq!(c.secret_access_key.expose(), "SECRET");
        assert_eq!(c.expiration_ms, 1_796_212_800_000);
        let e = roles
            .read("arn:aws:iam::123456789012:role/other")
            .expect_err("missing");
        let text = e.to_string();
        assert!(
            text.contains("other.json")
                && text.contains("--task-role-dir")
                && text.contains("role/other"),
            "{text}"
        );
        std::fs::write(
            tmp.path().join("bad.json"),
            r#"{"AccessKeyId": "AKID", "SecretAccessKey": 5}"#,
        )
        .expect("write");
        let text = roles
            .read("arn:aws:iam::123456789012:role/bad")
            .expect_err("bad")
            .to_string();
        assert!(
            text.contains("bad.json") && !text.contains("AKID"),
            "{text}"
        );
    }

    #[test]
    fn aws_comes_first_then_the_directory() {
        let args = TaskRoleArgs {
            credentials_endpoint: "off".into(),
            credentials_audit_log: None,
            task_role_dir: None,
        };
        assert!(role_source(None, &args).is_none());
        assert_eq!(args.endpoint().expect("off"), None);
        let args = TaskRoleArgs {
            task_role_dir: Some("/roles".into()),
            credentials_endpoint: DEFAULT_ENDPOINT.into(),
            ..args
        };
        let local = role_source(None, &args).expect("dir");
        assert!(local.describe().contains("/roles"));
        let aws: Arc<dyn RoleSource> = Arc::new(LocalRoles { dir: "/aws".into() });
        assert!(
            role_source(Some(aws), &args)
                .expect("aws")
                .describe()
                .contains("/aws")
        );
        assert_eq!(
            args.audit_log(Path::new("/d")),
            Some(PathBuf::from("/d/credentials-audit.log"))
        );
    }
}
