//! Registry logins on the fake runtime: the resolver's login reaches the pull, the container's
//! `credentialsParameter` reaches the resolver, a login that cannot be found stops the task before
//! any pull with ECS's reason, a refused login stops it with the registry's words, and a cached
//! image needs no login. (Against a real registry: `crates/berth/tests/registry_auth_engine.rs`.)

mod common;

use berth_engine::fake::{FakeRuntime, Script};
use berth_engine::{
    AuthError, PullBehavior, RegistryAuth, RegistryAuthResolver, RunConfig, TaskState, run_task,
};
use berth_model::RepositoryCredentials;
use common::*;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Answers every image with one login and records what it was asked.
struct OneLogin {
    login: Result<Option<(String, String)>, AuthError>,
    asked: Mutex<Vec<(String, Option<String>)>>,
}

impl RegistryAuthResolver for OneLogin {
    fn resolve(
        &self,
        image: &str,
        parameter: Option<&str>,
    ) -> BoxFuture<'static, Result<Option<RegistryAuth>, AuthError>> {
        self.asked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((image.to_string(), parameter.map(str::to_string)));
        let answer = self.login.clone().map(|l| {
            l.map(|(username, password)| RegistryAuth {
                username,
                password,
                identity_token: None,
                server: "reg:5000".into(),
                source: "the test".into(),
            })
        });
        async move { answer }.boxed()
    }
}

fn private_container(parameter: Option<&str>) -> berth_model::ContainerDefinition {
    let mut c = container("app");
    c.image = "reg:5000/private:1".into();
    c.repository_credentials = parameter.map(|p| RepositoryCredentials {
        credentials_parameter: p.to_string(),
    });
    c
}

async fn run(
    rt: &FakeRuntime,
    def: berth_model::ContainerDefinition,
    resolver: Option<Arc<dyn RegistryAuthResolver>>,
    behavior: PullBehavior,
) -> TaskState {
    rt.script(
        "app",
        Script {
            exit_code: Some(0),
            ..Default::default()
        },
    );
    let s = state(vec![def]);
    let (rtx, _rrx) = mpsc::unbounded_channel();
    let (_ctx, crx) = mpsc::channel(1);
    let (stx, _srx) = watch::channel(s.clone());
    let config = RunConfig {
        pull_behavior: behavior,
        registry_auth: resolver,
        ..RunConfig::new(std::env::temp_dir())
    };
    tokio::time::timeout(
        Duration::from_secs(5),
        run_task(Arc::new(rt.clone()), s, config, rtx, crx, stx),
    )
    .await
    .expect("the task ends")
}

fn resolver(login: Result<Option<(&str, &str)>, AuthError>) -> Arc<OneLogin> {
    Arc::new(OneLogin {
        login: login.map(|l| l.map(|(u, p)| (u.to_string(), p.to_string()))),
        asked: Mutex::new(Vec::new()),
    })
}

#[tokio::test]
async fn the_resolvers_login_reaches_the_pull() {
    let rt = FakeRuntime::new();
    rt.add_private("reg:5000/private:1", "alice", "pw");
    let r = resolver(Ok(Some(("alice", "pw"))));
    let done = run(
        &rt,
        private_container(Some("arn:reg")),
        Some(r.clone()),
        PullBehavior::Always,
    )
    .await;
    assert_eq!(done.containers[0].exit_code, Some(0), "{done:?}");
    assert_eq!(
        rt.pull_logins(),
        [("reg:5000/private:1".to_string(), Some("alice".to_string()))]
    );
    assert_eq!(
        *r.asked.lock().unwrap(),
        [(
            "reg:5000/private:1".to_string(),
            Some("arn:reg".to_string())
        )]
    );
}

#[tokio::test]
async fn a_refused_login_stops_the_task_with_the_registrys_words() {
    let rt = FakeRuntime::new();
    rt.add_private("reg:5000/private:1", "alice", "pw");
    let done = run(
        &rt,
        private_container(None),
        Some(resolver(Ok(Some(("alice", "wrong"))))),
        PullBehavior::Always,
    )
    .await;
    assert_eq!(
        done.stopped_reason.as_deref(),
        Some("CannotPullContainerError: unauthorized: authentication required")
    );
    assert_eq!(rt.container_count(), 0, "nothing was created");
}

#[tokio::test]
async fn a_secret_without_a_provider_stops_the_task_before_any_pull() {
    let rt = FakeRuntime::new();
    rt.add_private("reg:5000/private:1", "alice", "pw");
    // No resolver at all, and a container that names a secret.
    let done = run(
        &rt,
        private_container(Some("arn:aws:secretsmanager:eu-west-1:1:secret:reg")),
        None,
        PullBehavior::Default,
    )
    .await;
    let reason = done.stopped_reason.expect("stopped with a reason");
    assert!(
        reason.starts_with("ResourceInitializationError: unable to pull secrets or registry auth: repositoryCredentials.credentialsParameter \"arn:aws:secretsmanager:eu-west-1:1:secret:reg\" names a secret, but no secret provider is configured"),
        "{reason}"
    );
    assert!(rt.pull_logins().is_empty(), "no pull was tried");
    assert_eq!(rt.container_count(), 0);
}

#[tokio::test]
async fn a_login_that_cannot_be_found_stops_the_task_even_with_a_cached_image_fallback() {
    let rt = FakeRuntime::new();
    rt.add_image("reg:5000/private:1");
    let failing = resolver(Err(AuthError::Source {
        origin: "credential helper docker-credential-x".into(),
        message: "boom".into(),
    }));
    // `default` would fall back to the cached image after a failed pull; a missing login is not
    // a failed pull: the task stops, as ECS stops it.
    let done = run(
        &rt,
        private_container(None),
        Some(failing),
        PullBehavior::Default,
    )
    .await;
    assert_eq!(
        done.stopped_reason.as_deref(),
        Some(
            "ResourceInitializationError: unable to pull secrets or registry auth: credential helper docker-credential-x: boom"
        )
    );
    assert!(rt.pull_logins().is_empty());
}

#[tokio::test]
async fn a_cached_image_needs_no_login() {
    let rt = FakeRuntime::new();
    rt.add_image("reg:5000/private:1");
    let r = resolver(Ok(None));
    let done = run(
        &rt,
        private_container(Some("arn:reg")),
        Some(r.clone()),
        PullBehavior::PreferCached,
    )
    .await;
    assert_eq!(done.containers[0].exit_code, Some(0), "{done:?}");
    assert!(
        r.asked.lock().unwrap().is_empty(),
        "no pull, no login asked"
    );
}
