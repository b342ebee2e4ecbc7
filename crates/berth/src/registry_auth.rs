//! The registry login options of every command that runs tasks (`berth run`, `berth agent`), and
//! the credential chain built from them (see `berth_docker::AuthChain` for the order of the
//! sources and docs/operations.md, "Private registries").
//!
//! Secrets: `--engine-auth-data` is held in a [`SecretText`] whose `Debug` is redacted, clap does
//! not show its environment value in `--help` (`hide_env_values`), and `--print-config` never
//! prints it (`crate::config` prints no option whose environment value clap hides).

use anyhow::Context as _;
use berth_docker::{AuthChain, DockerConfig, EngineAuth};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Text that must not be shown: `Debug` prints `<redacted>`.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretText(pub String);

impl std::fmt::Debug for SecretText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl std::str::FromStr for SecretText {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(SecretText(s.to_string()))
    }
}

/// Where pulls find registry logins (after a container's own `repositoryCredentials`).
#[derive(clap::Args, Debug, Clone)]
pub struct RegistryAuthArgs {
    /// The format of --engine-auth-data, as the ECS agent's ECS_ENGINE_AUTH_TYPE: `docker`
    /// ({"registry": {"username": ..., "password": ...}}) or `dockercfg` (a .dockercfg file's
    /// content: {"registry": {"auth": base64 of user:password}}).
    #[arg(long, env = "ECS_ENGINE_AUTH_TYPE", value_name = "TYPE")]
    pub engine_auth_type: Option<String>,

    /// Registry logins in the format of --engine-auth-type, as the ECS agent's
    /// ECS_ENGINE_AUTH_DATA (prefer the environment variable or the configuration file: a
    /// command line is visible to other users). Never printed.
    #[arg(
        long,
        env = "ECS_ENGINE_AUTH_DATA",
        value_name = "JSON",
        hide_env_values = true
    )]
    pub engine_auth_data: Option<SecretText>,

    /// The Docker client configuration file whose logins pulls use (`auths`, and the credential
    /// helpers of `credHelpers`/`credsStore`, run as docker-credential-NAME from PATH). Read at
    /// each pull that needs it; a missing file has no logins. Default: $DOCKER_CONFIG/config.json,
    /// else ~/.docker/config.json.
    #[arg(
        long,
        env = "BERTH_DOCKER_CONFIG",
        value_name = "FILE",
        add = crate::config::Key::new().shown(|r| {
            let path = r.args::<RegistryAuthArgs>()?.docker_config_path();
            Ok(path.map(|p| p.display().to_string().into()))
        })
    )]
    pub docker_config: Option<PathBuf>,

    /// How long a credential helper may take to answer before the pull fails.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub credential_helper_timeout: Duration,
}

impl RegistryAuthArgs {
    /// The Docker config file in use: the flag, else Docker's default place.
    pub fn docker_config_path(&self) -> Option<PathBuf> {
        self.docker_config
            .clone()
            .or_else(DockerConfig::default_path)
    }

    /// The credential chain. The engine auth data is checked here, so a malformed one stops the
    /// command before any task runs.
    ///
    /// This chain has no secret sources: a container that names a secret in
    /// `repositoryCredentials` stops with an error saying so. [`Self::chain_with_secrets`] is the
    /// one `run` and the agent use.
    pub fn chain(&self) -> anyhow::Result<AuthChain> {
        let engine = EngineAuth::parse(
            self.engine_auth_type.as_deref(),
            self.engine_auth_data.as_ref().map(|d| d.0.as_str()),
        )
        .context("reading the registry logins (--engine-auth-type, --engine-auth-data)")?;
        let config = self
            .docker_config_path()
            .map(|p| DockerConfig::new(p).with_helper_timeout(self.credential_helper_timeout));
        Ok(AuthChain::new(engine, config))
    }

    /// [`Self::chain`] with `repositoryCredentials.credentialsParameter` resolved through the
    /// task secret sources (`--secrets-dir`, `--secrets-from-env`): the secret's value is ECS's
    /// `{"username", "password"}` JSON.
    pub fn chain_with_secrets(
        &self,
        secrets: Arc<dyn berth_engine::secrets::SecretProvider>,
    ) -> anyhow::Result<AuthChain> {
        let lookup: berth_engine::auth::SecretLookup = Arc::new(move |reference: &str| {
            let answer = berth_engine::secrets::resolve(&*secrets, reference)
                .map(|v| v.expose().to_string());
            Box::pin(std::future::ready(answer))
        });
        Ok(self.chain()?.with_secrets(lookup))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engine_auth_data_is_never_shown() {
        let args = RegistryAuthArgs {
            engine_auth_type: Some("docker".into()),
            engine_auth_data: Some(SecretText(
                r#"{"h:1": {"username": "u", "password": "hunter2"}}"#.into(),
            )),
            docker_config: Some("/nonexistent/config.json".into()),
            credential_helper_timeout: Duration::from_secs(10),
        };
        assert!(!format!("{args:?}").contains("hunter2"));
        let chain = args.chain().expect("valid");
        assert!(!format!("{chain:?}").contains("hunter2"));
        let printed = crate::config::printed(&[
            "berth",
            "run",
            "--print-config",
            "--engine-auth-type=docker",
            r#"--engine-auth-data={"h:1": {"username": "u", "password": "hunter2"}}"#,
            "--docker-config=/nonexistent/config.json",
        ]);
        let t: toml::Table = printed.parse().expect("TOML");
        assert!(!toml::to_string(&t).expect("toml").contains("hunter2"));
        assert!(t.get("engine-auth-data").is_none());
    }

    #[test]
    fn malformed_engine_auth_data_stops_the_command_with_what_is_wrong() {
        let args = RegistryAuthArgs {
            engine_auth_type: Some("dockercfg".into()),
            engine_auth_data: Some(SecretText("{\"h\": {\"auth\": \"!\"}}".into())),
            docker_config: None,
            credential_helper_timeout: Duration::from_secs(10),
        };
        let e = format!("{:#}", args.chain().expect_err("malformed"));
        assert_eq!(
            e,
            "reading the registry logins (--engine-auth-type, --engine-auth-data): ECS_ENGINE_AUTH_DATA (type dockercfg): the login for \"h\" is malformed: its \"auth\" is not base64"
        );
    }
}
