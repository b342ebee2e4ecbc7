//! Secrets and environment files in the task actor, on the fake runtime: values reach the create
//! spec (environment, log options) and nothing else; an unresolvable secret stops the task before
//! anything is pulled or created; a container adopted after a restart resolves nothing.

mod common;

use berth_engine::fake::{FakeRuntime, Script};
use berth_engine::secrets::{LookupError, SecretProvider, SecretValue};
use berth_engine::{Command, RunConfig, Status, TaskState, run_task};
use berth_model::secret::SecretReference;
use berth_model::{EnvVar, LogConfiguration, LogDriver, Secret};
use common::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::{mpsc, watch};

const VALUE: &str = "s3cr3t-value-7f1c";
const LOG_VALUE: &str = "log-s3cr3t-91ab";

/// A provider with two secrets that counts its lookups.
#[derive(Default)]
struct Two(AtomicUsize);

impl SecretProvider for Two {
    fn lookup(&self, r: &SecretReference) -> Result<SecretValue, LookupError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        let names = r.file_names();
        for n in &names {
            match n.as_str() {
                "prod/db" => return Ok(SecretValue::new(VALUE.into())),
                "log/token" => return Ok(SecretValue::new(LOG_VALUE.into())),
                _ => {}
            }
        }
        Err(LookupError::NotFound {
            looked: names.iter().map(|n| format!("file /secrets/{n}")).collect(),
        })
    }
}

fn with_secrets(name: &str, value_from: &str) -> berth_model::ContainerDefinition {
    let mut c = container(name);
    c.environment = vec![EnvVar {
        name: "PLAIN".into(),
        value: "p".into(),
    }];
    c.secrets = vec![Secret {
        name: "DB_PASSWORD".into(),
        value_from: value_from.into(),
    }];
    c.log_configuration = Some(LogConfiguration {
        log_driver: LogDriver::new("json-file"),
        options: BTreeMap::from([("max-size".to_string(), "1m".to_string())]),
        secret_options: vec![Secret {
            name: "tag".into(),
            value_from: "arn:aws:ssm:r:1:parameter/log/token".into(),
        }],
    });
    c
}

async fn run(
    rt: &FakeRuntime,
    s: TaskState,
    provider: Arc<Two>,
    resume: bool,
) -> (TaskState, Vec<String>) {
    let (rtx, mut rrx) = mpsc::unbounded_channel();
    let (_ctx, crx) = mpsc::channel::<Command>(1);
    let (stx, _srx) = watch::channel(s.clone());
    let mut config = RunConfig::new(std::env::temp_dir().join("berth-engine-secrets-tests"));
    config.secrets = provider;
    config.resume = resume;
    let done = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        run_task(Arc::new(rt.clone()), s, config, rtx, crx, stx),
    )
    .await
    .expect("task ends");
    let mut reports = Vec::new();
    while let Ok(r) = rrx.try_recv() {
        reports.push(serde_json::to_string(&r).expect("report serializes"));
    }
    (done, reports)
}

#[tokio::test]
async fn values_reach_the_create_spec_and_nothing_else() {
    let rt = FakeRuntime::new();
    rt.add_image("img");
    rt.script(
        "web",
        Script {
            exit_code: Some(0),
            ..Default::default()
        },
    );
    let s = state(vec![with_secrets(
        "web",
        "arn:aws:secretsmanager:us-east-1:1:secret:prod/db-AbC123",
    )]);
    let (done, reports) = run(&rt, s, Arc::new(Two::default()), false).await;
    assert_eq!(done.known(), Status::Stopped);
    let specs = rt.created_specs();
    assert_eq!(specs.len(), 1, "{:?} {:?}", rt.calls(), done.stopped_reason);
    assert!(
        specs[0].env.contains(&format!("DB_PASSWORD={VALUE}")),
        "{:?}",
        specs[0].env
    );
    assert!(specs[0].env.contains(&"PLAIN=p".to_string()));
    assert_eq!(
        specs[0].log_options.get("tag").map(String::as_str),
        Some(LOG_VALUE)
    );
    assert_eq!(
        specs[0].log_options.get("max-size").map(String::as_str),
        Some("1m")
    );
    // What the store saves and what the events say hold references only.
    let saved = serde_json::to_string(&done).expect("state serializes");
    for text in std::iter::once(&saved).chain(&reports) {
        assert!(!text.contains(VALUE) && !text.contains(LOG_VALUE), "{text}");
    }
    assert!(saved.contains("prod/db-AbC123"), "{saved}");
}

#[tokio::test]
async fn an_unresolvable_secret_stops_the_task_before_anything_is_pulled_or_created() {
    let rt = FakeRuntime::new();
    rt.add_image("img");
    let side = non_essential(container("side"));
    let s = state(vec![side, with_secrets("web", "/prod/missing")]);
    let (done, _) = run(&rt, s, Arc::new(Two::default()), false).await;
    assert!(done.is_finished());
    assert_eq!(rt.container_count(), 0);
    assert!(
        !rt.calls()
            .iter()
            .any(|c| c.starts_with("create") || c.starts_with("pull")),
        "{:?}",
        rt.calls()
    );
    let reason = done.stopped_reason.clone().unwrap_or_default();
    assert_eq!(
        reason,
        "ResourceInitializationError: unable to pull secrets or registry auth: secret DB_PASSWORD of container web (/prod/missing): not found; berth looked at file /secrets/prod/missing"
    );
    for c in &done.containers {
        assert_eq!(c.known, Status::Stopped);
        assert_eq!(c.reason.as_deref(), Some(reason.as_str()), "{}", c.name);
    }
}

#[tokio::test]
async fn without_a_source_the_reason_says_how_to_configure_one() {
    let rt = FakeRuntime::new();
    rt.add_image("img");
    let mut c = container("web");
    c.secrets = vec![Secret {
        name: "A".into(),
        value_from: "a".into(),
    }];
    let (rtx, _rrx) = mpsc::unbounded_channel();
    let (_ctx, crx) = mpsc::channel::<Command>(1);
    let s = state(vec![c]);
    let (stx, _srx) = watch::channel(s.clone());
    let config = RunConfig::new(std::env::temp_dir().join("berth-engine-secrets-tests"));
    let done = run_task(Arc::new(rt.clone()), s, config, rtx, crx, stx).await;
    assert_eq!(
        done.stopped_reason.as_deref(),
        Some(
            "ResourceInitializationError: unable to pull secrets or registry auth: secret A of container web (a): no secret source is configured; start berth with --secrets-dir DIR (or --secrets-from-env for development)"
        )
    );
    assert_eq!(rt.container_count(), 0);
}

#[tokio::test]
async fn an_adopted_container_needs_no_values() {
    let rt = FakeRuntime::new();
    rt.add_image("img");
    rt.script(
        "web",
        Script {
            exit_code: Some(0),
            ..Default::default()
        },
    );
    // First run: the container is created (with its values) and runs to its exit.
    let s = state(vec![with_secrets("web", "prod/db")]);
    let provider = Arc::new(Two::default());
    let (done, _) = run(&rt, s, provider.clone(), false).await;
    assert_eq!(provider.0.load(Ordering::SeqCst), 2);
    // A restarted agent resumes the task as saved while the container existed: adoption finds it,
    // and nothing is looked up again.
    let mut saved = done.clone();
    saved.desired = Status::Running;
    saved.stopped_reason = None;
    saved.stop_kind = None;
    for c in &mut saved.containers {
        c.desired = Status::Running;
        c.known = Status::Created;
    }
    let again = Arc::new(Two::default());
    let (_, _) = run(&rt, saved, again.clone(), true).await;
    assert_eq!(again.0.load(Ordering::SeqCst), 0);
}
