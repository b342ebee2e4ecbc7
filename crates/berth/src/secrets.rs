//! The local secret sources behind the engine's `SecretProvider` seam, and their options (shared by
//! `berth run` and the agent): a directory with one file per secret (`--secrets-dir`) and, for
//! development, the process environment (`--secrets-from-env`); `--environment-files-dir` stands in
//! for S3. The names looked under are `SecretReference::file_names` (docs/task-definitions.md,
//! "secrets and environmentFiles").
//!
//! Why here: the providers read files and the process environment (ordinary reads, none of
//! berth-fs's syscalls), and berth-engine knows only the trait. Invariants: no value is ever logged
//! or put in an error; messages name the places looked at.

use anyhow::Context as _;
use berth_engine::secrets::{LookupError, Providers, SecretProvider, SecretValue};
use berth_model::secret::SecretReference;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where secrets and environment files come from.
#[derive(clap::Args, Debug, Clone)]
pub struct SecretArgs {
    /// A directory with one file per secret: an SSM parameter /a/b is the file DIR/a/b, a Secrets
    /// Manager secret DIR/<name> (also without the 6-character ARN suffix); the content, less one
    /// trailing newline, is the value. Should be readable by the agent's user alone (a warning
    /// otherwise). See docs/task-definitions.md.
    #[arg(long, env = "BERTH_SECRETS_DIR", value_name = "DIR")]
    pub secrets_dir: Option<PathBuf>,

    /// Also read secrets from this process's environment (for development): a secret named
    /// prod/db is the variable BERTH_SECRET_PROD_DB. Consulted after --secrets-dir. `=false`
    /// turns off what the configuration file turned on.
    #[arg(
        long,
        env = "BERTH_SECRETS_FROM_ENV",
        value_name = "BOOL",
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        default_value_t = false
    )]
    pub secrets_from_env: bool,

    /// The directory standing in for S3: the environmentFiles object arn:aws:s3:::BUCKET/KEY is
    /// read from DIR/BUCKET/KEY. Without it only absolute paths can be read.
    #[arg(long, env = "BERTH_ENVIRONMENT_FILES_DIR", value_name = "DIR")]
    pub environment_files_dir: Option<PathBuf>,

    /// The directories an absolute environmentFiles path may be under (after symlinks), separated
    /// by commas; files under --environment-files-dir are allowed too, and nothing under /proc,
    /// /sys or /dev ever is. Default: /etc/berth/environment-files.
    #[arg(
        long,
        value_name = "DIRS",
        env = "BERTH_ENVIRONMENT_FILES_ALLOW",
        value_parser = parse_dirs,
        add = crate::config::Key::new().list()
    )]
    pub environment_files_allow: Option<DirList>,
}

/// The default of --environment-files-allow.
pub const DEFAULT_ENVIRONMENT_FILES_ALLOW: &str = "/etc/berth/environment-files";

/// Directories (a newtype, so clap takes the whole list as one value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirList(pub Vec<PathBuf>);

fn parse_dirs(text: &str) -> Result<DirList, String> {
    let items: Vec<String> = if text.trim_start().starts_with('[') {
        serde_json::from_str(text)
            .map_err(|e| format!("not a JSON array of strings ({e}); or write /a,/b"))?
    } else {
        text.split(',').map(|s| s.trim().to_string()).collect()
    };
    let mut dirs = Vec::new();
    for item in items.into_iter().filter(|s| !s.is_empty()) {
        if !item.starts_with('/') {
            return Err(format!("{item:?} is not an absolute directory"));
        }
        dirs.push(PathBuf::from(item));
    }
    Ok(DirList(dirs))
}

impl SecretArgs {
    /// The directories absolute environmentFiles paths may be under: the option, else the default.
    pub fn environment_files_allow(&self) -> Vec<PathBuf> {
        self.environment_files_allow.as_ref().map_or_else(
            || vec![PathBuf::from(DEFAULT_ENVIRONMENT_FILES_ALLOW)],
            |d| d.0.clone(),
        )
    }

    /// The providers, in order. The secrets directory must exist and be a directory; one that
    /// others can access gets a warning.
    pub fn provider(&self) -> anyhow::Result<Arc<dyn SecretProvider>> {
        let mut providers: Vec<Arc<dyn SecretProvider>> = Vec::new();
        if let Some(dir) = &self.secrets_dir {
            let meta = std::fs::metadata(dir)
                .with_context(|| format!("--secrets-dir {}", dir.display()))?;
            if !meta.is_dir() {
                anyhow::bail!("--secrets-dir {}: not a directory", dir.display());
            }
            warn_if_shared(dir, meta.permissions().mode(), "secrets directory");
            providers.push(Arc::new(DirectoryProvider { dir: dir.clone() }));
        }
        if self.secrets_from_env {
            providers.push(Arc::new(EnvironmentProvider));
        }
        Ok(Arc::new(Providers(providers)))
    }
}

/// Warn when group or others have any access to `path` (mode bits 077).
fn warn_if_shared(path: &Path, mode: u32, what: &str) {
    if mode & 0o077 != 0 {
        tracing::warn!(
            path = %path.display(),
            mode = format!("{:04o}", mode & 0o7777),
            "the {what} is accessible to other users; make it readable by berth's user alone (chmod go-rwx)"
        );
    }
}

/// One file per secret under `dir`.
pub struct DirectoryProvider {
    pub dir: PathBuf,
}

impl SecretProvider for DirectoryProvider {
    fn lookup(&self, reference: &SecretReference) -> Result<SecretValue, LookupError> {
        let mut looked = Vec::new();
        for name in reference.file_names() {
            // The names have no empty, "." or ".." components (SecretReference::parse), so the
            // path stays under the directory.
            let path = self.dir.join(&name);
            match std::fs::read(&path) {
                Ok(bytes) => {
                    if let Ok(meta) = std::fs::metadata(&path) {
                        warn_if_shared(&path, meta.permissions().mode(), "secret file");
                    }
                    let text = String::from_utf8(bytes).map_err(|_| {
                        LookupError::Unreadable(format!("{} is not UTF-8 text", path.display()))
                    })?;
                    return Ok(SecretValue::new(strip_one_newline(text)));
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    looked.push(format!("file {}", path.display()));
                }
                Err(e) => {
                    return Err(LookupError::Unreadable(format!(
                        "cannot read {}: {e}",
                        path.display()
                    )));
                }
            }
        }
        Err(LookupError::NotFound { looked })
    }
}

/// The content less one trailing `\n` or `\r\n` (what `echo value > file` adds).
fn strip_one_newline(mut text: String) -> String {
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    text
}

/// `BERTH_SECRET_<NAME>` variables of this process (development only).
pub struct EnvironmentProvider;

/// The variable for a secret file name: `BERTH_SECRET_` and the name in upper case, every
/// character other than an ASCII letter or digit replaced by `_`.
pub fn environment_variable(name: &str) -> String {
    let tail: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("BERTH_SECRET_{tail}")
}

impl SecretProvider for EnvironmentProvider {
    fn lookup(&self, reference: &SecretReference) -> Result<SecretValue, LookupError> {
        let mut looked = Vec::new();
        for name in reference.file_names() {
            let var = environment_variable(&name);
            match std::env::var(&var) {
                Ok(v) => return Ok(SecretValue::new(v)),
                Err(std::env::VarError::NotPresent) => {
                    looked.push(format!("environment variable {var}"));
                }
                Err(std::env::VarError::NotUnicode(_)) => {
                    return Err(LookupError::Unreadable(format!(
                        "environment variable {var} is not UTF-8"
                    )));
                }
            }
        }
        Err(LookupError::NotFound { looked })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_engine::secrets::{SecretError, resolve};

    #[test]
    fn the_directory_maps_references_to_files() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("prod")).expect("mkdir");
        std::fs::write(dir.path().join("prod/db"), "{\"password\": \"pw\"}\n").expect("write");
        std::fs::write(dir.path().join("prod/api-key"), "k\r\n").expect("write");
        std::fs::write(
            dir.path().join("prod/db@AWSPREVIOUS"),
            "{\"password\": \"old\"}",
        )
        .expect("write");
        let p = DirectoryProvider {
            dir: dir.path().to_owned(),
        };
        let get = |v: &str| resolve(&p, v).map(|s| s.expose().to_owned());
        assert_eq!(get("/prod/api-key"), Ok("k".into()));
        assert_eq!(
            get("arn:aws:ssm:us-east-1:1:parameter/prod/api-key"),
            Ok("k".into())
        );
        assert_eq!(
            get("arn:aws:secretsmanager:us-east-1:1:secret:prod/db-AbC123:password::"),
            Ok("pw".into())
        );
        assert_eq!(
            get("arn:aws:secretsmanager:us-east-1:1:secret:prod/db:password:AWSPREVIOUS:"),
            Ok("old".into())
        );
        let d = dir.path().display();
        assert_eq!(
            get("arn:aws:secretsmanager:us-east-1:1:secret:prod/nope-AbC123"),
            Err(SecretError::NotFound(vec![
                format!("file {d}/prod/nope-AbC123"),
                format!("file {d}/prod/nope"),
            ]))
        );
        // A directory where a file should be is unreadable, not missing.
        assert!(matches!(get("prod"), Err(SecretError::Unreadable(_))));
    }

    #[test]
    fn environment_variable_names() {
        assert_eq!(
            environment_variable("prod/db@AWSPREVIOUS"),
            "BERTH_SECRET_PROD_DB_AWSPREVIOUS"
        );
        assert_eq!(
            environment_variable("api-key.v2"),
            "BERTH_SECRET_API_KEY_V2"
        );
    }
}
