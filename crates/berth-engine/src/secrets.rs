//! Secrets and environment files: the [`SecretProvider`] seam, [`resolve`] (one reference string
//! to its value, for `secrets`, `secretOptions` and any other caller such as registry credentials),
//! and [`resolve_task`], which reads every value a task's not-yet-created containers need, once,
//! before the actor creates anything (ECS's secret and environment-file task resources).
//!
//! Invariants: values live only in memory ([`TaskValues`], handed to the create call); nothing here
//! puts a value in an error message, and [`SecretValue`]'s `Debug` is redacted, so a value cannot
//! reach the store (which saves [`TaskState`], holding references only), the log, events or the
//! API by accident. Limits: providers and environment files are read synchronously (small local
//! files and the process environment); a provider that talks to a network should answer from a
//! cache or be given its own thread.

use crate::state::{Status, TaskState};
use berth_model::secret::{EnvironmentFileLocation, SecretReference};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A secret's value. Its `Debug` and `Display` print `<redacted>`; read it with [`expose`](Self::expose).
#[derive(Clone, PartialEq, Eq)]
pub struct SecretValue(String);

impl SecretValue {
    pub fn new(value: String) -> Self {
        SecretValue(value)
    }

    /// The value itself, for the one place that hands it on (the container spec).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Why a provider has no value for a reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LookupError {
    /// Not there; `looked` says each place that was tried ("file /etc/berth/secrets/db").
    NotFound { looked: Vec<String> },
    /// There but unreadable (permissions, not UTF-8): the message names the place, never content.
    Unreadable(String),
    /// Asked of AWS ([`crate::remote`]), which refused or could not be reached: the service, the
    /// endpoint and AWS's own words.
    Remote(String),
}

/// A local source of secrets. Implementations map a parsed reference to the whole secret string
/// (a JSON key is selected by [`resolve`], the same way for every provider); the names to look
/// under are [`SecretReference::file_names`].
pub trait SecretProvider: Send + Sync + 'static {
    fn lookup(&self, reference: &SecretReference) -> Result<SecretValue, LookupError>;
}

/// Providers consulted in order: the first that has the secret answers; an unreadable secret ends
/// the search (it exists, so a later source must not silently stand in for it).
#[derive(Clone, Default)]
pub struct Providers(pub Vec<Arc<dyn SecretProvider>>);

impl SecretProvider for Providers {
    fn lookup(&self, reference: &SecretReference) -> Result<SecretValue, LookupError> {
        let mut looked = Vec::new();
        for p in &self.0 {
            match p.lookup(reference) {
                Ok(v) => return Ok(v),
                Err(LookupError::NotFound { looked: more }) => looked.extend(more),
                Err(e @ (LookupError::Unreadable(_) | LookupError::Remote(_))) => return Err(e),
            }
        }
        Err(LookupError::NotFound { looked })
    }
}

/// Why a reference could not be resolved. The `Display` completes "secret NAME (valueFrom): ".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("{0}")]
    BadReference(String),
    #[error(
        "no secret source is configured; start berth with --secrets-dir DIR (or --secrets-from-env for development)"
    )]
    NoSource,
    #[error("not found; berth looked at {}", .0.join(", "))]
    NotFound(Vec<String>),
    #[error("{0}")]
    Unreadable(String),
    /// AWS refused or could not be reached (its words, with the service and endpoint).
    #[error("{0}")]
    Remote(String),
    #[error("the value is not a JSON object, so json-key {key:?} cannot be selected ({error})")]
    NotJson { key: String, error: String },
    #[error("the value's JSON object has no key {0:?}")]
    MissingKey(String),
}

/// Resolve one reference string (a `valueFrom`, an ARN or a parameter name) through `provider`,
/// selecting the JSON key when the reference names one.
pub fn resolve(
    provider: &dyn SecretProvider,
    value_from: &str,
) -> Result<SecretValue, SecretError> {
    let reference =
        SecretReference::parse(value_from).map_err(|e| SecretError::BadReference(e.0))?;
    let whole = provider.lookup(&reference).map_err(|e| match e {
        LookupError::NotFound { looked } if looked.is_empty() => SecretError::NoSource,
        LookupError::NotFound { looked } => SecretError::NotFound(looked),
        LookupError::Unreadable(m) => SecretError::Unreadable(m),
        LookupError::Remote(m) => SecretError::Remote(m),
    })?;
    let Some(key) = &reference.json_key else {
        return Ok(whole);
    };
    // serde_json's messages give a line and column, never the text.
    let object: serde_json::Map<String, serde_json::Value> = serde_json::from_str(whole.expose())
        .map_err(|e| SecretError::NotJson {
        key: key.clone(),
        error: e.to_string(),
    })?;
    match object.get(key) {
        Some(serde_json::Value::String(s)) => Ok(SecretValue(s.clone())),
        Some(other) => Ok(SecretValue(other.to_string())),
        None => Err(SecretError::MissingKey(key.clone())),
    }
}

/// What one container gets at create time, in memory only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerValues {
    /// From `environmentFiles`, merged: each name once, the first file that sets it wins.
    pub file_env: Vec<(String, SecretValue)>,
    /// From `secrets`, in definition order (a later entry of the same name wins).
    pub secret_env: Vec<(String, SecretValue)>,
    /// From `logConfiguration.secretOptions`, in definition order.
    pub log_options: Vec<(String, SecretValue)>,
}

/// No values: what a container without secrets or environment files gets.
pub static NO_VALUES: ContainerValues = ContainerValues {
    file_env: Vec::new(),
    secret_env: Vec::new(),
    log_options: Vec::new(),
};

impl ContainerValues {
    /// The container's environment, `NAME=value`: the environment files' variables that neither
    /// `environment` nor `secrets` sets, then `environment` (without the names a secret sets), then
    /// the secrets: ECS's precedence (secrets over environment over files), each name once unless
    /// `environment` itself repeats it.
    pub fn environment(&self, environment: &[berth_model::EnvVar]) -> Vec<String> {
        let secret = |n: &str| self.secret_env.iter().any(|(s, _)| s == n);
        let files = self
            .file_env
            .iter()
            .filter(|(n, _)| !secret(n) && !environment.iter().any(|e| &e.name == n))
            .map(|(n, v)| format!("{n}={}", v.expose()));
        let own = environment
            .iter()
            .filter(|e| !secret(&e.name))
            .map(|e| format!("{}={}", e.name, e.value));
        let mut secrets: Vec<String> = Vec::new();
        for (i, (n, v)) in self.secret_env.iter().enumerate() {
            if !self.secret_env[i + 1..].iter().any(|(later, _)| later == n) {
                secrets.push(format!("{n}={}", v.expose()));
            }
        }
        files.chain(own).chain(secrets).collect()
    }
}

/// The values of a task's containers, by index. `Debug` shows only the names.
#[derive(Debug, Clone, Default)]
pub struct TaskValues(pub Vec<ContainerValues>);

impl TaskValues {
    /// Container `i`'s values (none when it needed nothing).
    pub fn container(&self, i: usize) -> &ContainerValues {
        self.0.get(i).unwrap_or(&NO_VALUES)
    }
}

/// The prefix of ECS's reason when a task's secrets cannot be pulled.
pub const SECRETS_REASON: &str =
    "ResourceInitializationError: unable to pull secrets or registry auth: ";
/// The prefix of the reason when environment files cannot be read.
pub const ENV_FILES_REASON: &str =
    "ResourceInitializationError: failed to read environment files: ";

/// Whether container `i` still needs its values: not created (no Docker id, known below CREATED)
/// and not stopped. A container adopted after a restart needs none.
pub(crate) fn needs_values(state: &TaskState, i: usize) -> bool {
    let c = &state.containers[i];
    c.docker_id.is_none() && c.known < Status::Created
}

/// One value of one container that could not be read: a secret or log secret option (`what`,
/// its name and `valueFrom`) or an environment file.
#[derive(Debug, Clone)]
pub enum ValueFailure {
    Secret {
        /// `secret` or `log secret option`.
        what: &'static str,
        name: String,
        container: String,
        value_from: String,
        error: SecretError,
    },
    EnvironmentFile {
        value: String,
        container: String,
        error: EnvironmentFileError,
    },
}

impl fmt::Display for ValueFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueFailure::Secret {
                what,
                name,
                container,
                value_from,
                error,
            } => write!(
                f,
                "{what} {name} of container {container} ({value_from}): {error}"
            ),
            ValueFailure::EnvironmentFile {
                value,
                container,
                error,
            } => write!(
                f,
                "environment file {value} of container {container}: {error}"
            ),
        }
    }
}

/// Why a task's values cannot be read: every failure, secrets first; the `Display` is the reason
/// the task stops with (ECS's shape; no values in it).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}", reason(.0))]
pub struct ValuesError(pub Vec<ValueFailure>);

fn reason(failures: &[ValueFailure]) -> String {
    let join = |secret: bool| {
        failures
            .iter()
            .filter(|f| matches!(f, ValueFailure::Secret { .. }) == secret)
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    };
    let (secrets, files) = (join(true), join(false));
    match (secrets.is_empty(), files.is_empty()) {
        (false, true) => format!("{SECRETS_REASON}{secrets}"),
        (true, false) => format!("{ENV_FILES_REASON}{files}"),
        (false, false) => format!("{SECRETS_REASON}{secrets}; environment files: {files}"),
        (true, true) => String::new(),
    }
}

/// Read every value the task's not-yet-created containers need. `Err` holds every failure, and
/// its `Display` is the reason to stop the task with.
pub fn resolve_task(
    state: &TaskState,
    provider: &dyn SecretProvider,
    environment_files: &EnvironmentFileRules<'_>,
) -> Result<TaskValues, ValuesError> {
    let mut values = Vec::with_capacity(state.containers.len());
    let (mut secret_errors, mut file_errors) = (Vec::new(), Vec::new());
    for i in 0..state.containers.len() {
        let mut v = ContainerValues::default();
        if !needs_values(state, i) {
            values.push(v);
            continue;
        }
        let def = state.def(i);
        let mut one =
            |what: &'static str, s: &berth_model::Secret| match resolve(provider, &s.value_from) {
                Ok(value) => Some((s.name.clone(), value)),
                Err(error) => {
                    secret_errors.push(ValueFailure::Secret {
                        what,
                        name: s.name.clone(),
                        container: def.name.clone(),
                        value_from: s.value_from.clone(),
                        error,
                    });
                    None
                }
            };
        v.secret_env = def
            .secrets
            .iter()
            .filter_map(|s| one("secret", s))
            .collect();
        v.log_options = def
            .log_secret_options()
            .iter()
            .filter_map(|s| one("log secret option", s))
            .collect();
        for file in &def.environment_files {
            match read_environment_file(&file.value, environment_files) {
                Ok(vars) => {
                    for (name, value) in vars {
                        if !v.file_env.iter().any(|(n, _)| *n == name) {
                            v.file_env.push((name, value));
                        }
                    }
                }
                Err(error) => file_errors.push(ValueFailure::EnvironmentFile {
                    value: file.value.clone(),
                    container: def.name.clone(),
                    error,
                }),
            }
        }
        values.push(v);
    }
    if secret_errors.is_empty() && file_errors.is_empty() {
        return Ok(TaskValues(values));
    }
    secret_errors.extend(file_errors);
    Err(ValuesError(secret_errors))
}

/// Where `environmentFiles` may be read from: a local path only when it resolves (symlinks
/// followed) under one of `allowed` or under `s3_dir`, an S3 ARN under `s3_dir`; never anything
/// under [`NEVER_READ`], whatever is allowed. The agent runs as root: without these rules a task
/// could copy any host file (`/proc/self/environ`: the agent's own secrets) into its containers.
#[derive(Debug, Clone, Copy, Default)]
pub struct EnvironmentFileRules<'a> {
    /// The directory standing in for S3 (`--environment-files-dir`).
    pub s3_dir: Option<&'a Path>,
    /// The directories local paths may be under (`--environment-files-allow`).
    pub allowed: &'a [PathBuf],
    /// S3 objects fetched from AWS for this task (see [`crate::remote`]), by (bucket, key): an
    /// S3 ARN found here is read from it, not from `s3_dir`.
    pub fetched: Option<&'a S3Objects>,
}

/// S3 objects fetched from AWS, by (bucket, key): the text, or AWS's error.
pub type S3Objects = std::collections::HashMap<(String, String), Result<SecretValue, String>>;

/// Host trees an environment file is never read from: the kernel's views of processes and
/// devices (`/proc/self/environ`, `/dev/zero`), not files an operator keeps settings in.
pub const NEVER_READ: [&str; 3] = ["/proc", "/sys", "/dev"];

/// Why an environment file cannot be read. No variant holds a value from a file.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EnvironmentFileError {
    /// Neither an absolute path nor an S3 ARN (berth-model's words).
    #[error("{0}")]
    Location(String),
    /// An S3 ARN, and no directory stands in for S3.
    #[error(
        "berth cannot fetch S3 objects: start it with --environment-files-dir DIR and put the object at DIR/<bucket>/<key>, or give an absolute path"
    )]
    NoS3,
    /// Fetched from S3 and refused or unreachable (AWS's words, with the endpoint).
    #[error("{0}")]
    Remote(String),
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: Arc<std::io::Error>,
    },
    /// Under `/proc`, `/sys` or `/dev` (after symlinks): never read.
    #[error(
        "refused: {} resolves to {}, under {tree}, which environment files are never read from (it is the kernel's view of processes and devices, not a settings file)",
        path.display(),
        real.display()
    )]
    Forbidden {
        path: PathBuf,
        real: PathBuf,
        tree: &'static str,
    },
    /// Not under an allowed directory (after symlinks).
    #[error(
        "refused: {} resolves to {}, which is not under a directory environment files may be read from ({}); put the file there, or start the agent with --environment-files-allow DIR",
        path.display(),
        real.display(),
        allowed_list(.allowed)
    )]
    NotAllowed {
        path: PathBuf,
        real: PathBuf,
        allowed: Vec<PathBuf>,
    },
    #[error("refused: {} is not a regular file", path.display())]
    NotAFile { path: PathBuf },
    /// A line Docker cannot pass on (a NUL byte): named by its number, never shown.
    #[error(
        "line {line} of {} holds a NUL byte, which no environment variable can (is it a file of NUL-separated variables, such as a copy of /proc/PID/environ?)",
        path.display()
    )]
    Nul { path: PathBuf, line: usize },
}

fn allowed_list(allowed: &[PathBuf]) -> String {
    if allowed.is_empty() {
        "none is allowed".to_string()
    } else {
        allowed
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Where an `environmentFiles` value is read from, as the rules allow: an absolute path as it
/// resolves, an S3 ARN under the S3 directory as `<bucket>/<key>`; checked against the rules
/// (under an allowed directory, never under [`NEVER_READ`], a regular file). The answer is the
/// resolved path (no symlink left in it).
pub fn environment_file_path(
    value: &str,
    rules: &EnvironmentFileRules<'_>,
) -> Result<PathBuf, EnvironmentFileError> {
    let path = match EnvironmentFileLocation::parse(value)
        .map_err(|e| EnvironmentFileError::Location(e.0))?
    {
        EnvironmentFileLocation::Local(p) => PathBuf::from(p),
        EnvironmentFileLocation::S3 { bucket, key } => match rules.s3_dir {
            Some(dir) => dir.join(bucket).join(key),
            None => return Err(EnvironmentFileError::NoS3),
        },
    };
    let real = path
        .canonicalize()
        .map_err(|e| EnvironmentFileError::Read {
            path: path.clone(),
            source: Arc::new(e),
        })?;
    if let Some(tree) = NEVER_READ.iter().find(|t| real.starts_with(t)) {
        return Err(EnvironmentFileError::Forbidden { path, real, tree });
    }
    let roots: Vec<PathBuf> = rules
        .allowed
        .iter()
        .map(PathBuf::as_path)
        .chain(rules.s3_dir)
        .map(|d| d.canonicalize().unwrap_or_else(|_| d.to_path_buf()))
        .collect();
    if !roots.iter().any(|r| real.starts_with(r)) {
        return Err(EnvironmentFileError::NotAllowed {
            path,
            real,
            allowed: roots,
        });
    }
    match std::fs::metadata(&real) {
        Ok(m) if m.is_file() => Ok(real),
        Ok(_) => Err(EnvironmentFileError::NotAFile { path }),
        Err(e) => Err(EnvironmentFileError::Read {
            path,
            source: Arc::new(e),
        }),
    }
}

fn read_environment_file(
    value: &str,
    rules: &EnvironmentFileRules<'_>,
) -> Result<Vec<(String, SecretValue)>, EnvironmentFileError> {
    if let (Some(fetched), Ok(EnvironmentFileLocation::S3 { bucket, key })) =
        (rules.fetched, EnvironmentFileLocation::parse(value))
        && let Some(answer) = fetched.get(&(bucket, key))
    {
        let text = answer.clone().map_err(EnvironmentFileError::Remote)?;
        if let Some(n) = text.expose().lines().position(|l| l.contains('\0')) {
            return Err(EnvironmentFileError::Nul {
                path: PathBuf::from(value),
                line: n + 1,
            });
        }
        return Ok(parse_env_file(text.expose()));
    }
    let path = environment_file_path(value, rules)?;
    let text = std::fs::read_to_string(&path).map_err(|e| EnvironmentFileError::Read {
        path: path.clone(),
        source: Arc::new(e),
    })?;
    if let Some(n) = text.lines().position(|l| l.contains('\0')) {
        return Err(EnvironmentFileError::Nul { path, line: n + 1 });
    }
    Ok(parse_env_file(&text))
}

/// The variables of a `.env` file, by the ECS agent's rules: lines read as they are (no trimming,
/// no quotes), `#` at the start makes a comment, a line without `=` is skipped, the name is what
/// comes before the first `=` (a line with an empty name is skipped), the value everything after
/// it; within one file the last line for a name wins. Hand-written: the `dotenv` crates trim,
/// unquote and expand, which ECS does not.
pub fn parse_env_file(text: &str) -> Vec<(String, SecretValue)> {
    let mut vars: Vec<(String, SecretValue)> = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let Some((name, value)) = line.split_once('=') else {
            continue;
        };
        if name.is_empty() {
            continue;
        }
        let value = SecretValue(value.to_owned());
        match vars.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = value,
            None => vars.push((name.to_owned(), value)),
        }
    }
    vars
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A provider over a map of file names.
    struct Map(HashMap<String, String>);

    impl SecretProvider for Map {
        fn lookup(&self, r: &SecretReference) -> Result<SecretValue, LookupError> {
            let names = r.file_names();
            for n in &names {
                if let Some(v) = self.0.get(n) {
                    return Ok(SecretValue(v.clone()));
                }
            }
            Err(LookupError::NotFound {
                looked: names.iter().map(|n| format!("map {n}")).collect(),
            })
        }
    }

    fn map(entries: &[(&str, &str)]) -> Map {
        Map(entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect())
    }

    #[test]
    fn json_keys_select_from_the_whole_secret() {
        let p = map(&[("db", r#"{"user": "admin", "port": 5432}"#), ("plain", "x")]);
        let get = |v: &str| resolve(&p, v).map(|s| s.expose().to_owned());
        assert_eq!(
            get("arn:aws:secretsmanager:r:1:secret:db-AbC123:user::"),
            Ok("admin".into())
        );
        assert_eq!(
            get("arn:aws:secretsmanager:r:1:secret:db:port::"),
            Ok("5432".into())
        );
        assert_eq!(
            get("arn:aws:secretsmanager:r:1:secret:db:password::"),
            Err(SecretError::MissingKey("password".into()))
        );
        assert!(matches!(
            get("arn:aws:secretsmanager:r:1:secret:plain:k::"),
            Err(SecretError::NotJson { .. })
        ));
        assert_eq!(
            get("missing"),
            Err(SecretError::NotFound(vec!["map missing".into()]))
        );
        assert_eq!(
            resolve(&Providers::default(), "missing").map(|_| ()),
            Err(SecretError::NoSource)
        );
    }

    #[test]
    fn env_files_follow_the_ecs_agent() {
        let vars = parse_env_file(
            "# comment\nA=1\n\n  #X=indented, so not a comment\nB = two \nC=x=y\n=empty name\nD=\nA=3\r\nnoequals\n \"Q\"='q'\n",
        );
        let shown: Vec<(String, String)> = vars
            .iter()
            .map(|(n, v)| (n.clone(), v.expose().to_owned()))
            .collect();
        let expect = |n: &str, v: &str| (n.to_owned(), v.to_owned());
        assert_eq!(
            shown,
            vec![
                expect("A", "3"),
                expect("  #X", "indented, so not a comment"),
                expect("B ", " two "),
                expect("C", "x=y"),
                expect("D", ""),
                expect(" \"Q\"", "'q'"),
            ]
        );
    }

    #[test]
    fn precedence_is_secrets_then_environment_then_files() {
        let v = ContainerValues {
            file_env: vec![
                ("F".into(), SecretValue("file".into())),
                ("E".into(), SecretValue("file".into())),
                ("S".into(), SecretValue("file".into())),
            ],
            secret_env: vec![
                ("S".into(), SecretValue("first".into())),
                ("S".into(), SecretValue("secret".into())),
            ],
            log_options: vec![],
        };
        let env = vec![
            berth_model::EnvVar {
                name: "E".into(),
                value: "env".into(),
            },
            berth_model::EnvVar {
                name: "S".into(),
                value: "env".into(),
            },
        ];
        assert_eq!(v.environment(&env), vec!["F=file", "E=env", "S=secret"]);
        assert_eq!(format!("{v:?}").matches("<redacted>").count(), 5);
        assert!(!format!("{v:?}").contains("secret\""));
    }
}
