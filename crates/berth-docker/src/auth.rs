//! The registry credential chain: which login a pull of an image sends.
//!
//! [`AuthChain`] implements the engine's [`RegistryAuthResolver`]. For each pull it tries, in
//! order, and takes the first that has a login for the image's registry:
//!
//! 1. the container's `repositoryCredentials.credentialsParameter`, resolved through the secret
//!    provider ([`SecretLookup`]); its value is ECS's `{"username", "password"}` JSON. Without a
//!    secret provider this is an error naming what is missing, never an anonymous pull;
//! 2. the ECS agent's engine auth data ([`EngineAuth`]: `ECS_ENGINE_AUTH_TYPE` `docker` or
//!    `dockercfg` with `ECS_ENGINE_AUTH_DATA`);
//! 3. the Docker client's `config.json` ([`DockerConfig`]): a credential helper named for the
//!    registry in `credHelpers`, else the `credsStore` helper, else the `auths` entry. Helpers run
//!    as `docker-credential-<name> get` (found on `PATH`, started with an argument vector, never
//!    through a shell), the server URL on their stdin, under a timeout.
//!
//! The file is read at every pull that reaches step 3, so a `docker login` takes effect without a
//! restart; a missing file means no logins. A broken file or a failing helper is an error that
//! names the file or the helper (with its stderr). Nothing here logs or formats a secret.
//!
//! Registry names follow Docker's rules ([`registry_host`], read by the engine's one reference
//! parser, [`ImageRef`]): a first path component without a dot or a colon, other than `localhost`
//! and not upper case, is a Docker Hub repository (`docker.io`); keys of auth maps
//! may carry a scheme and a path (`https://index.docker.io/v1/`, `registry.example.com/team`),
//! and the longest key whose registry matches and whose path is a prefix of the repository wins
//! (as ECS matches its engine auth data).
//!
//! This lives in berth-docker because every format here is Docker's (references, `config.json`,
//! the credential-helper protocol); the engine only sees the trait.

use base64::Engine as _;
use berth_engine::auth::{
    AuthError, RegistryAuth, RegistryAuthResolver, SecretLookup, login_from_secret,
};
use berth_engine::image_ref::{DOCKER_HUB, ImageRef, is_docker_hub};
use futures_util::future::{BoxFuture, FutureExt};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// The server address Docker uses for Docker Hub logins (`docker login`'s key in `config.json`,
/// and what credential helpers are asked for).
pub const DOCKER_HUB_SERVER: &str = "https://index.docker.io/v1/";

/// How long a credential helper may take by default.
pub const DEFAULT_HELPER_TIMEOUT: Duration = Duration::from_secs(10);

/// The registry a login for `image` is looked up for, by Docker's rules ([`ImageRef`]):
/// `busybox`, `library/busybox` and `team/app:1` are on `docker.io`; `127.0.0.1:5000/x`,
/// `localhost/x` and `registry.example.com/x` name their registry. Docker Hub's other names
/// (`index.docker.io`, `registry-1.docker.io`) become `docker.io`.
pub fn registry_host(image: &str) -> String {
    ImageRef::split(image).login_registry().to_string()
}

/// The server address a login for `host` is sent with (and a credential helper asked for).
fn server_address(host: &str) -> String {
    if host == DOCKER_HUB {
        DOCKER_HUB_SERVER.to_string()
    } else {
        host.to_string()
    }
}

/// An auth map key (`https://index.docker.io/v1/`, `registry.example.com/team`, `h:5000`) as
/// (registry, namespace path): scheme dropped, Docker Hub's names normalised, an API version
/// segment (`v1`, `v2`) is not a namespace.
fn split_key(key: &str) -> (String, String) {
    let bare = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let (host, path) = bare.split_once('/').unwrap_or((bare, ""));
    let path = path.trim_matches('/');
    let path = match path.split_once('/') {
        Some(("v1" | "v2", rest)) => rest,
        None if path == "v1" || path == "v2" => "",
        _ => path,
    };
    let host = if is_docker_hub(host) {
        DOCKER_HUB
    } else {
        host
    };
    (host.to_string(), path.trim_matches('/').to_string())
}

/// The key of `keys` that applies to `image`: its registry matches and its namespace (if any) is a
/// prefix of the repository path, as written or as Docker names it (`busybox` is also
/// `library/busybox`); the longest namespace wins.
fn best_key<'k>(keys: impl Iterator<Item = &'k String>, image: &str) -> Option<&'k String> {
    let image = ImageRef::split(image);
    let under = |repo: &str, ns: &str| repo == ns || repo.starts_with(&format!("{ns}/"));
    keys.filter_map(|k| {
        let (h, ns) = split_key(k);
        let applies = h == image.login_registry()
            && (ns.is_empty() || under(image.path(), &ns) || under(image.familiar_path(), &ns));
        applies.then_some((ns.len(), k))
    })
    .max_by_key(|(len, _)| *len)
    .map(|(_, k)| k)
}

/// A login as the maps hold it (the secret parts never printed).
#[derive(Clone, PartialEq, Eq)]
struct Login {
    username: String,
    password: String,
    identity_token: Option<String>,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

impl Login {
    fn into_auth(self, host: &str, source: String) -> RegistryAuth {
        RegistryAuth {
            username: self.username,
            password: self.password,
            identity_token: self.identity_token,
            server: server_address(host),
            source,
        }
    }
}

/// What is wrong with one login entry of the ECS or Docker files (the entry's key and file are
/// named by the error that holds it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoginProblem {
    #[error("its \"auth\" is not base64")]
    AuthNotBase64,
    #[error("its \"auth\" is not UTF-8 text")]
    AuthNotUtf8,
    #[error("its \"auth\" does not decode to user:password")]
    AuthNotUserPassword,
    #[error("it has a \"username\" but no \"password\" or \"auth\"")]
    NoPassword,
    /// `dockercfg` logins are `auth` fields.
    #[error("it has no \"auth\"")]
    NoAuth,
    #[error("it holds no user name or token")]
    Empty,
}

/// `user:password`, base64 encoded (the `auth` field of Docker's files).
fn decode_basic(encoded: &str) -> Result<(String, String), LoginProblem> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|_| LoginProblem::AuthNotBase64)?;
    let text = String::from_utf8(bytes).map_err(|_| LoginProblem::AuthNotUtf8)?;
    match text.split_once(':') {
        Some((user, password)) => Ok((user.to_string(), password.to_string())),
        None => Err(LoginProblem::AuthNotUserPassword),
    }
}

/// What a login entry of the ECS or Docker files holds.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Entry {
    username: Option<String>,
    password: Option<String>,
    auth: Option<String>,
    #[serde(rename = "identitytoken")]
    identity_token: Option<String>,
}

impl Entry {
    /// The login, `None` for an entry without one (`docker login` with a `credsStore` leaves `{}`).
    fn login(self) -> Result<Option<Login>, LoginProblem> {
        let (username, password) = match (self.username, self.password, self.auth) {
            (Some(u), Some(p), _) if !u.is_empty() => (u, p),
            (_, _, Some(a)) if !a.is_empty() => decode_basic(&a)?,
            (Some(u), None, None) if !u.is_empty() && self.identity_token.is_none() => {
                return Err(LoginProblem::NoPassword);
            }
            _ => (String::new(), String::new()),
        };
        let identity_token = self.identity_token.filter(|t| !t.is_empty());
        if username.is_empty() && identity_token.is_none() {
            return Ok(None);
        }
        Ok(Some(Login {
            username,
            password,
            identity_token,
        }))
    }
}

/// A misconfigured credential source, found when berth starts (engine auth data).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineAuthError {
    #[error("ECS_ENGINE_AUTH_TYPE {0:?} is not known; use \"docker\" or \"dockercfg\"")]
    UnknownType(String),
    #[error(
        "ECS_ENGINE_AUTH_DATA is set but ECS_ENGINE_AUTH_TYPE is not; set it to \"docker\" or \"dockercfg\""
    )]
    NoType,
    #[error(
        "ECS_ENGINE_AUTH_DATA (type {kind}) is not a JSON object of registry logins: {detail}; expected {expected}"
    )]
    NotJson {
        kind: &'static str,
        detail: String,
        expected: &'static str,
    },
    #[error("ECS_ENGINE_AUTH_DATA (type {kind}): the login for {key:?} is malformed: {problem}")]
    BadEntry {
        kind: &'static str,
        key: String,
        problem: LoginProblem,
    },
}

/// The ECS agent's engine auth data (`ECS_ENGINE_AUTH_TYPE` and `ECS_ENGINE_AUTH_DATA`): logins by
/// registry key. Cheap to clone.
#[derive(Clone, Default)]
pub struct EngineAuth {
    logins: Arc<BTreeMap<String, Login>>,
}

impl std::fmt::Debug for EngineAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineAuth")
            .field("registries", &self.logins.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl EngineAuth {
    /// Parse ECS's two formats. `docker`: `{"registry": {"username": "u", "password": "p"}}`
    /// (`email` allowed and ignored; `auth` may stand for both); `dockercfg`: the content of a
    /// `.dockercfg` file, `{"registry": {"auth": "base64(u:p)", "email": "…"}}`. An empty type
    /// and empty data mean no logins. Unlike the ECS agent, which logs a warning and ignores
    /// malformed data, this is an error: a login berth cannot read would fail every pull later.
    pub fn parse(kind: Option<&str>, data: Option<&str>) -> Result<EngineAuth, EngineAuthError> {
        let kind = kind.map(str::trim).filter(|k| !k.is_empty());
        let data = data.map(str::trim).filter(|d| !d.is_empty());
        let (kind, data) = match (kind, data) {
            (None, None) => return Ok(EngineAuth::default()),
            (None, Some(_)) => return Err(EngineAuthError::NoType),
            (Some(k), None) => (k, "{}"),
            (Some(k), Some(d)) => (k, d),
        };
        let (kind, expected) = match kind {
            "docker" => (
                "docker",
                "{\"registry\": {\"username\": \"...\", \"password\": \"...\"}}",
            ),
            "dockercfg" => (
                "dockercfg",
                "{\"registry\": {\"auth\": \"base64 of user:password\"}}",
            ),
            other => return Err(EngineAuthError::UnknownType(other.to_string())),
        };
        let entries: BTreeMap<String, Entry> =
            serde_json::from_str(data).map_err(|e| EngineAuthError::NotJson {
                kind,
                detail: json_detail(&e),
                expected,
            })?;
        let mut logins = BTreeMap::new();
        for (key, entry) in entries {
            let bad = |problem: LoginProblem| EngineAuthError::BadEntry {
                kind,
                key: key.clone(),
                problem,
            };
            if kind == "dockercfg" && entry.auth.as_deref().is_none_or(str::is_empty) {
                return Err(bad(LoginProblem::NoAuth));
            }
            match entry.login().map_err(&bad)? {
                Some(login) => {
                    logins.insert(key, login);
                }
                None => return Err(bad(LoginProblem::Empty)),
            }
        }
        Ok(EngineAuth {
            logins: Arc::new(logins),
        })
    }

    /// The registry keys it has logins for (never the logins).
    pub fn registries(&self) -> Vec<String> {
        self.logins.keys().cloned().collect()
    }

    /// The login for `image`, if one applies.
    pub fn find(&self, image: &str) -> Option<RegistryAuth> {
        let key = best_key(self.logins.keys(), image)?;
        let login = self.logins.get(key)?.clone();
        Some(login.into_auth(&registry_host(image), "ECS_ENGINE_AUTH_DATA".to_string()))
    }
}

/// A serde_json error without the input it was reading (which may hold a secret): its category
/// and position.
fn json_detail(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let what = match e.classify() {
        Category::Io => "unreadable",
        Category::Syntax => "invalid JSON",
        Category::Data => "a value of the wrong type",
        Category::Eof => "JSON that ends early",
    };
    format!("{what} at line {}, column {}", e.line(), e.column())
}

/// The Docker client's `config.json` (`auths`, `credHelpers`, `credsStore`), read when needed.
#[derive(Debug, Clone)]
pub struct DockerConfig {
    path: PathBuf,
    helper_timeout: Duration,
}

#[derive(serde::Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct ConfigFile {
    auths: BTreeMap<String, Entry>,
    cred_helpers: BTreeMap<String, String>,
    creds_store: Option<String>,
}

impl DockerConfig {
    /// The file at `path` (it need not exist).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        DockerConfig {
            path: path.into(),
            helper_timeout: DEFAULT_HELPER_TIMEOUT,
        }
    }

    /// How long a credential helper may take before it is killed and the pull fails.
    pub fn with_helper_timeout(mut self, timeout: Duration) -> Self {
        self.helper_timeout = timeout;
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Docker's default place: `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`
    /// (`None` when neither variable is set).
    pub fn default_path() -> Option<PathBuf> {
        if let Some(dir) = std::env::var_os("DOCKER_CONFIG").filter(|d| !d.is_empty()) {
            return Some(PathBuf::from(dir).join("config.json"));
        }
        std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(|h| PathBuf::from(h).join(".docker").join("config.json"))
    }

    fn origin(&self) -> String {
        format!("Docker config file {}", self.path.display())
    }

    async fn read(&self) -> Result<Option<ConfigFile>, AuthError> {
        let text = match tokio::fs::read_to_string(&self.path).await {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(AuthError::Source {
                    origin: self.origin(),
                    message: format!("cannot be read: {e}"),
                });
            }
        };
        if text.trim().is_empty() {
            return Ok(None);
        }
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| AuthError::Source {
                origin: self.origin(),
                message: format!(
                    "is not a Docker client configuration: {}; expected {{\"auths\": {{...}}, \"credHelpers\": {{...}}, \"credsStore\": \"...\"}}",
                    json_detail(&e)
                ),
            })
    }

    /// The login for `image`: the registry's credential helper, else the `credsStore` helper,
    /// else the `auths` entry; `None` when the file has none (or does not exist).
    pub async fn find(&self, image: &str) -> Result<Option<RegistryAuth>, AuthError> {
        let Some(mut file) = self.read().await? else {
            return Ok(None);
        };
        let host = registry_host(image);
        let server = server_address(&host);
        let helper = file
            .cred_helpers
            .iter()
            .find(|(k, _)| split_key(k).0 == host)
            .map(|(_, v)| ("credHelpers", v.clone()))
            .or_else(|| {
                file.creds_store
                    .clone()
                    .filter(|s| !s.is_empty())
                    .map(|s| ("credsStore", s))
            });
        if let Some((field, name)) = helper {
            let source = format!(
                "credential helper docker-credential-{name} ({field} of {})",
                self.path.display()
            );
            if let Some(login) = run_helper(&name, &server, self.helper_timeout).await? {
                return Ok(Some(login.into_auth(&host, source)));
            }
        }
        let Some(key) = best_key(file.auths.keys(), image).cloned() else {
            return Ok(None);
        };
        let entry = file.auths.remove(&key).unwrap_or_default();
        let login = entry.login().map_err(|problem| AuthError::Source {
            origin: self.origin(),
            message: format!("the login in \"auths\" for {key:?} is malformed: {problem}"),
        })?;
        Ok(login.map(|l| l.into_auth(&host, format!("\"auths\" of {}", self.path.display()))))
    }
}

/// What a credential helper prints for `get`.
#[derive(serde::Deserialize)]
struct HelperAnswer {
    #[serde(rename = "Username", default)]
    username: String,
    #[serde(rename = "Secret", default)]
    secret: String,
}

/// The most of a helper's stderr a message quotes.
const STDERR_SHOWN: usize = 500;

/// Run `docker-credential-<name> get` with `server` on stdin (argument vector, no shell), under
/// `timeout`. `None`: the helper has no login for it (its "credentials not found" answer).
async fn run_helper(
    name: &str,
    server: &str,
    timeout: Duration,
) -> Result<Option<Login>, AuthError> {
    let program = format!("docker-credential-{name}");
    let fail = |message: String| AuthError::Source {
        origin: format!("credential helper {program}"),
        message,
    };
    if name.is_empty() || name.contains('/') || name.chars().any(char::is_whitespace) {
        return Err(fail(format!(
            "{name:?} is not a credential helper name (a helper is a program docker-credential-NAME on PATH)"
        )));
    }
    let mut child = tokio::process::Command::new(&program)
        .arg("get")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| {
            fail(if e.kind() == std::io::ErrorKind::NotFound {
                format!(
                    "{program} is not on PATH; install it or remove it from the Docker config file"
                )
            } else {
                format!("cannot be started: {e}")
            })
        })?;
    let mut stdin = child.stdin.take();
    let talk = async move {
        if let Some(stdin) = stdin.as_mut() {
            // A helper that exits without reading its stdin is judged by its answer, not by EPIPE.
            let _ = stdin.write_all(server.as_bytes()).await;
            let _ = stdin.shutdown().await;
        }
        drop(stdin);
        child.wait_with_output().await
    };
    let out = match tokio::time::timeout(timeout, talk).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => return Err(fail(format!("failed: {e}"))),
        // The child is killed when its future is dropped (kill_on_drop).
        Err(_) => {
            return Err(fail(format!(
                "did not answer within {}s for {server}",
                timeout.as_secs()
            )));
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        // The helper protocol's "not found" answer (docker-credential-helpers' ErrCredentialsNotFound).
        if stdout.contains("credentials not found") || stderr.contains("credentials not found") {
            return Ok(None);
        }
        let said = if stderr.trim().is_empty() {
            stdout.trim().to_string()
        } else {
            stderr.trim().to_string()
        };
        let said: String = said.chars().take(STDERR_SHOWN).collect();
        return Err(fail(format!(
            "`{program} get` for {server} failed ({}): {said}",
            out.status
        )));
    }
    let answer: HelperAnswer = serde_json::from_str(stdout.trim()).map_err(|e| {
        fail(format!(
            "answered `get` for {server} with something that is not {{\"Username\": ..., \"Secret\": ...}}: {}",
            json_detail(&e)
        ))
    })?;
    if answer.secret.is_empty() {
        return Ok(None);
    }
    // Docker's convention: the user name `<token>` means the secret is an identity token.
    Ok(Some(if answer.username == "<token>" {
        Login {
            username: String::new(),
            password: String::new(),
            identity_token: Some(answer.secret),
        }
    } else {
        Login {
            username: answer.username,
            password: answer.secret,
            identity_token: None,
        }
    }))
}

/// The credential chain (see the module docs). Cheap to clone.
#[derive(Clone, Default)]
pub struct AuthChain {
    secrets: Option<SecretLookup>,
    engine: EngineAuth,
    docker_config: Option<DockerConfig>,
}

impl std::fmt::Debug for AuthChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthChain")
            .field("secret_provider", &self.secrets.is_some())
            .field("engine", &self.engine)
            .field("docker_config", &self.docker_config)
            .finish()
    }
}

impl AuthChain {
    /// A chain with the engine auth data and, when given, a Docker config file; no secret
    /// provider until [`AuthChain::with_secrets`].
    pub fn new(engine: EngineAuth, docker_config: Option<DockerConfig>) -> Self {
        AuthChain {
            secrets: None,
            engine,
            docker_config,
        }
    }

    /// The registries the engine auth data has logins for (never the logins).
    pub fn engine_registries(&self) -> Vec<String> {
        self.engine.registries()
    }

    /// Resolve `credentialsParameter` through this secret provider.
    pub fn with_secrets(mut self, secrets: SecretLookup) -> Self {
        self.secrets = Some(secrets);
        self
    }

    /// The login for `image` (see the module docs for the order).
    pub async fn find(
        &self,
        image: &str,
        credentials_parameter: Option<&str>,
    ) -> Result<Option<RegistryAuth>, AuthError> {
        if let Some(parameter) = credentials_parameter {
            let Some(lookup) = &self.secrets else {
                return Err(AuthError::NoSecretProvider {
                    parameter: parameter.to_string(),
                });
            };
            let value = lookup(parameter)
                .await
                .map_err(|source| AuthError::Secret {
                    parameter: parameter.to_string(),
                    source,
                })?;
            let server = server_address(&registry_host(image));
            return login_from_secret(parameter, &value, &server).map(Some);
        }
        if let Some(auth) = self.engine.find(image) {
            return Ok(Some(auth));
        }
        match &self.docker_config {
            Some(config) => config.find(image).await,
            None => Ok(None),
        }
    }
}

impl RegistryAuthResolver for AuthChain {
    fn resolve(
        &self,
        image: &str,
        credentials_parameter: Option<&str>,
    ) -> BoxFuture<'static, Result<Option<RegistryAuth>, AuthError>> {
        let (chain, image) = (self.clone(), image.to_string());
        let parameter = credentials_parameter.map(str::to_string);
        async move { chain.find(&image, parameter.as_deref()).await }.boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (registry, repository path as Docker shows it), for the assertions below.
    fn split_registry(image: &str) -> (String, String) {
        let r = ImageRef::split(image);
        (
            r.login_registry().to_string(),
            r.familiar_path().to_string(),
        )
    }

    #[test]
    fn registries_follow_dockers_rules() {
        for (image, host) in [
            ("busybox", "docker.io"),
            ("busybox:1.36", "docker.io"),
            ("library/busybox", "docker.io"),
            ("team/app:1", "docker.io"),
            ("docker.io/team/app", "docker.io"),
            ("index.docker.io/team/app", "docker.io"),
            ("registry-1.docker.io/team/app", "docker.io"),
            ("127.0.0.1:5000/x", "127.0.0.1:5000"),
            ("127.0.0.1:5000/a/b:2", "127.0.0.1:5000"),
            ("localhost/x", "localhost"),
            ("localhost:5000/x@sha256:abc", "localhost:5000"),
            (
                "registry.example.com/team/api:2.4.1",
                "registry.example.com",
            ),
            (
                "111122223333.dkr.ecr.eu-west-1.amazonaws.com/web:1",
                "111122223333.dkr.ecr.eu-west-1.amazonaws.com",
            ),
        ] {
            assert_eq!(registry_host(image), host, "{image}");
        }
        assert_eq!(split_registry("h:5000/a/b:2").1, "a/b");
        assert_eq!(split_registry("busybox").1, "busybox");
        assert_eq!(split_registry("h.io/a@sha256:1").1, "a");
        assert_eq!(split_registry("h/a@sha256:1").1, "h/a");
    }

    #[test]
    fn keys_match_with_schemes_paths_and_the_longest_namespace() {
        let keys: Vec<String> = [
            "https://index.docker.io/v1/",
            "registry.example.com",
            "registry.example.com/team",
            "http://127.0.0.1:5000/v2/",
        ]
        .map(String::from)
        .to_vec();
        let best = |image| best_key(keys.iter(), image).map(String::as_str);
        assert_eq!(best("busybox"), Some("https://index.docker.io/v1/"));
        assert_eq!(
            best("registry.example.com/team/api:1"),
            Some("registry.example.com/team")
        );
        assert_eq!(
            best("registry.example.com/teamx/api"),
            Some("registry.example.com")
        );
        assert_eq!(
            best("registry.example.com/other/api"),
            Some("registry.example.com")
        );
        assert_eq!(
            best("127.0.0.1:5000/x:1"),
            Some("http://127.0.0.1:5000/v2/")
        );
        assert_eq!(best("127.0.0.1:5001/x:1"), None);
        assert_eq!(best("other.example.com/x"), None);
    }

    #[test]
    fn a_hub_namespace_matches_the_name_as_written_or_as_docker_names_it() {
        let keys: Vec<String> = ["docker.io/library", "registry-1.docker.io/team"]
            .map(String::from)
            .to_vec();
        let best = |image| best_key(keys.iter(), image).map(String::as_str);
        for image in ["busybox", "library/busybox:1", "docker.io/library/busybox"] {
            assert_eq!(best(image), Some("docker.io/library"), "{image}");
        }
        for image in [
            "team/app",
            "index.docker.io/team/app",
            "registry-1.docker.io/team/app",
        ] {
            assert_eq!(best(image), Some("registry-1.docker.io/team"), "{image}");
        }
        assert_eq!(best("other/app"), None);
    }

    #[test]
    fn engine_auth_reads_both_ecs_formats() {
        let docker = EngineAuth::parse(
            Some("docker"),
            Some(
                r#"{"127.0.0.1:5000": {"username": "alice", "password": "pw", "email": "a@x"},
                     "https://index.docker.io/v1/": {"username": "hub", "password": "hp"}}"#,
            ),
        )
        .expect("docker");
        let auth = docker.find("127.0.0.1:5000/private:1").expect("found");
        assert_eq!(
            (auth.username.as_str(), auth.password.as_str()),
            ("alice", "pw")
        );
        assert_eq!(auth.server, "127.0.0.1:5000");
        assert_eq!(auth.source, "ECS_ENGINE_AUTH_DATA");
        let hub = docker.find("team/app").expect("hub");
        assert_eq!(
            (hub.username.as_str(), hub.server.as_str()),
            ("hub", DOCKER_HUB_SERVER)
        );
        assert!(docker.find("127.0.0.1:5001/private").is_none());

        // base64("bob:s:cret") — the password may hold a colon.
        let cfg = EngineAuth::parse(
            Some("dockercfg"),
            Some(r#"{"http://127.0.0.1:5000/v1/": {"auth": "Ym9iOnM6Y3JldA==", "email": "b@x"}}"#),
        )
        .expect("dockercfg");
        let auth = cfg.find("127.0.0.1:5000/x").expect("found");
        assert_eq!(
            (auth.username.as_str(), auth.password.as_str()),
            ("bob", "s:cret")
        );
        assert_eq!(
            format!("{cfg:?}"),
            "EngineAuth { registries: [\"http://127.0.0.1:5000/v1/\"] }"
        );

        assert!(
            EngineAuth::parse(None, None)
                .expect("nothing")
                .find("x")
                .is_none()
        );
        assert!(
            EngineAuth::parse(Some(""), Some(""))
                .expect("nothing")
                .registries()
                .is_empty()
        );
    }

    #[test]
    fn engine_auth_errors_say_what_is_wrong_without_the_secret() {
        let err = |kind: Option<&str>, data: Option<&str>| {
            EngineAuth::parse(kind, data)
                .expect_err("invalid")
                .to_string()
        };
        assert_eq!(
            err(Some("ecr"), Some("{}")),
            "ECS_ENGINE_AUTH_TYPE \"ecr\" is not known; use \"docker\" or \"dockercfg\""
        );
        assert_eq!(
            err(None, Some("{}")),
            "ECS_ENGINE_AUTH_DATA is set but ECS_ENGINE_AUTH_TYPE is not; set it to \"docker\" or \"dockercfg\""
        );
        let e = err(
            Some("docker"),
            Some(r#"{"h": {"username": "u", "password": "hunter2""#),
        );
        assert!(e.starts_with("ECS_ENGINE_AUTH_DATA (type docker) is not a JSON object of registry logins: JSON that ends early at line 1"), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
        assert_eq!(
            err(Some("dockercfg"), Some(r#"{"h": {"auth": "!!"}}"#)),
            "ECS_ENGINE_AUTH_DATA (type dockercfg): the login for \"h\" is malformed: its \"auth\" is not base64"
        );
        assert_eq!(
            err(
                Some("dockercfg"),
                Some(r#"{"h": {"username": "u", "password": "p"}}"#)
            ),
            "ECS_ENGINE_AUTH_DATA (type dockercfg): the login for \"h\" is malformed: it has no \"auth\""
        );
        assert_eq!(
            err(Some("docker"), Some(r#"{"h": {"username": "u"}}"#)),
            "ECS_ENGINE_AUTH_DATA (type docker): the login for \"h\" is malformed: it has a \"username\" but no \"password\" or \"auth\""
        );
        // bWFsZm9ybWVk = base64("malformed"): no colon.
        assert_eq!(
            err(Some("docker"), Some(r#"{"h": {"auth": "bWFsZm9ybWVk"}}"#)),
            "ECS_ENGINE_AUTH_DATA (type docker): the login for \"h\" is malformed: its \"auth\" does not decode to user:password"
        );
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        p
    }

    // Helpers are found on PATH, which unit tests must not change (it is process-wide): these
    // tests cover the file logic and a helper that is not installed; the real-Engine test
    // (crates/berth/tests/registry_auth_engine.rs) runs a helper of its own.
    #[tokio::test]
    async fn docker_config_auths_and_missing_files() {
        let dir = tempfile::tempdir().expect("tmp");
        let missing = DockerConfig::new(dir.path().join("nope.json"));
        assert!(
            missing
                .find("h:1/x")
                .await
                .expect("missing is fine")
                .is_none()
        );
        // base64("carol:pw")
        let path = write(
            dir.path(),
            "config.json",
            r#"{"auths": {"h:1": {"auth": "Y2Fyb2w6cHc="}, "https://index.docker.io/v1/": {}}}"#,
        );
        let config = DockerConfig::new(&path);
        let auth = config.find("h:1/x:2").await.expect("ok").expect("found");
        assert_eq!(
            (auth.username.as_str(), auth.password.as_str()),
            ("carol", "pw")
        );
        assert_eq!(auth.source, format!("\"auths\" of {}", path.display()));
        assert!(
            config.find("busybox").await.expect("ok").is_none(),
            "an empty entry is no login"
        );

        write(dir.path(), "config.json", "{\"auths\": [1]}");
        let e = config.find("h:1/x").await.expect_err("broken").to_string();
        assert_eq!(
            e,
            format!(
                "Docker config file {}: is not a Docker client configuration: a value of the wrong type at line 1, column 10; expected {{\"auths\": {{...}}, \"credHelpers\": {{...}}, \"credsStore\": \"...\"}}",
                path.display()
            )
        );
    }

    #[tokio::test]
    async fn a_missing_helper_is_named() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = write(
            dir.path(),
            "config.json",
            r#"{"credHelpers": {"h:1": "berth-test-no-such-helper"}}"#,
        );
        let e = DockerConfig::new(&path)
            .find("h:1/x")
            .await
            .expect_err("missing helper");
        assert_eq!(
            e.to_string(),
            "credential helper docker-credential-berth-test-no-such-helper: docker-credential-berth-test-no-such-helper is not on PATH; install it or remove it from the Docker config file"
        );
        let path = write(
            dir.path(),
            "config.json",
            r#"{"credsStore": "../../bin/sh"}"#,
        );
        let e = DockerConfig::new(&path)
            .find("h:1/x")
            .await
            .expect_err("bad name");
        assert!(
            e.to_string().contains("is not a credential helper name"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn the_chain_takes_the_secret_first_and_needs_a_provider_for_it() {
        let engine = EngineAuth::parse(
            Some("docker"),
            Some(r#"{"h:1": {"username": "engine", "password": "e"}}"#),
        )
        .expect("engine");
        let chain = AuthChain::new(engine, None);
        assert_eq!(
            chain
                .find("h:1/x", None)
                .await
                .expect("ok")
                .expect("found")
                .username,
            "engine"
        );
        let e = chain
            .find("h:1/x", Some("arn:reg"))
            .await
            .expect_err("no provider");
        assert_eq!(
            e,
            AuthError::NoSecretProvider {
                parameter: "arn:reg".into()
            }
        );
        let chain = chain.with_secrets(Arc::new(|reference: &str| {
            let reference = reference.to_string();
            async move {
                match reference.as_str() {
                    "arn:reg" => Ok(r#"{"username": "secret-user", "password": "s"}"#.to_string()),
                    other => Err(berth_engine::secrets::SecretError::Unreadable(format!(
                        "no secret {other:?} in /etc/berth/secrets"
                    ))),
                }
            }
            .boxed()
        }));
        let auth = chain
            .find("h:1/x", Some("arn:reg"))
            .await
            .expect("ok")
            .expect("found");
        assert_eq!(
            (auth.username.as_str(), auth.server.as_str()),
            ("secret-user", "h:1")
        );
        let e = chain
            .find("h:1/x", Some("arn:other"))
            .await
            .expect_err("unknown");
        assert_eq!(
            e.to_string(),
            "repositoryCredentials.credentialsParameter \"arn:other\": no secret \"arn:other\" in /etc/berth/secrets"
        );
        assert!(chain.find("h:2/x", None).await.expect("ok").is_none());
    }
}
