//! FireLens on the fake runtime: the router's files are written before it is created, it is
//! created and started before the containers that log to it and stopped after them, and those
//! containers get Docker's fluentd driver pointed at the task's socket.

mod common;

use berth_engine::fake::{FakeRuntime, Script};
use berth_engine::{Command, RunConfig, Status, run_task};
use berth_model::{FirelensConfiguration, FirelensType, LogConfiguration, LogDriver, NetworkMode};
use common::*;
use std::sync::Arc;
use tokio::sync::{mpsc, watch};

const TASK: &str = "0123456789abcdef0123456789abcdef";

#[tokio::test]
async fn router_first_apps_on_the_socket_router_last() {
    let rt = FakeRuntime::new();
    rt.add_image("img");
    rt.script(
        "app",
        Script {
            exit_code: Some(0),
            ..Default::default()
        },
    );
    let mut router = container("log_router");
    router.firelens_configuration = Some(FirelensConfiguration {
        router_type: FirelensType::Fluentbit,
        enable_ecs_log_metadata: true,
        config_file: None,
    });
    let mut app = container("app");
    app.log_configuration = Some(LogConfiguration {
        log_driver: LogDriver::new("awsfirelens"),
        options: [("Name".to_string(), "stdout".to_string())].into(),
        secret_options: Vec::new(),
    });
    let mut s = state(vec![app, router]);
    s.definition.network_mode = NetworkMode::Host;

    let dir = tempfile::tempdir().expect("tempdir");
    let (rtx, _rrx) = mpsc::unbounded_channel();
    let (_ctx, crx) = mpsc::channel::<Command>(1);
    let (stx, _srx) = watch::channel(s.clone());
    let config = RunConfig {
        identity: berth_engine::Identity {
            cluster: "prod".into(),
            region: "eu-west-1".into(),
            account: "123456789012".into(),
            ..berth_engine::Identity::default()
        },
        ..RunConfig::new(dir.path().to_path_buf())
    };
    let done = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        run_task(Arc::new(rt.clone()), s, config, rtx, crx, stx),
    )
    .await
    .expect("task ends");
    assert_eq!(done.known(), Status::Stopped);

    let calls = rt.calls();
    let pos = |c: &str| {
        calls
            .iter()
            .position(|x| x.starts_with(c))
            .unwrap_or(usize::MAX)
    };
    assert!(
        pos("start berth-fam-1-log_router") < pos("create berth-fam-1-app"),
        "{calls:?}"
    );
    assert!(
        pos("stop berth-fam-1-log_router") < usize::MAX,
        "the router is stopped once the app has exited: {calls:?}"
    );

    let firelens = dir.path().join("tasks").join(TASK).join("firelens");
    let conf = std::fs::read_to_string(firelens.join("config/fluent.conf")).expect("config");
    assert!(
        conf.contains("    unix_path /var/run/fluent.sock\n"),
        "{conf}"
    );
    assert!(
        conf.contains(&format!(
            "    Record ecs_task_arn arn:aws:ecs:eu-west-1:123456789012:task/prod/{TASK}\n"
        )),
        "{conf}"
    );
    assert!(
        conf.contains("[OUTPUT]\n    Name stdout\n    Match app-firelens*\n"),
        "{conf}"
    );
    assert!(firelens.join("socket").is_dir());

    let specs = rt.created_specs();
    let app = specs
        .iter()
        .find(|s| s.name == "berth-fam-1-app-0123456789ab")
        .expect("app spec");
    assert_eq!(app.log_driver.as_deref(), Some("fluentd"));
    assert_eq!(
        app.log_options.get("tag").map(String::as_str),
        Some(format!("app-firelens-{TASK}").as_str())
    );
    assert_eq!(
        app.log_options.get("fluentd-address").cloned(),
        Some(format!(
            "unix://{}",
            firelens.join("socket/fluent.sock").display()
        ))
    );
    let router = specs
        .iter()
        .find(|s| s.name.contains("log_router"))
        .expect("router spec");
    assert!(
        router
            .mounts
            .iter()
            .any(|m| m.target == "/fluent-bit/etc/fluent-bit.conf" && m.read_only),
        "{:?}",
        router.mounts
    );
    assert!(router.mounts.iter().any(|m| m.target == "/var/run/"));
}

#[tokio::test]
async fn a_router_whose_files_cannot_be_prepared_never_runs_nor_do_its_apps() {
    let rt = FakeRuntime::new();
    rt.add_image("img");
    let mut router = container("log_router");
    router.user = Some("fluent".into());
    router.firelens_configuration = Some(FirelensConfiguration {
        router_type: FirelensType::Fluentbit,
        enable_ecs_log_metadata: true,
        config_file: None,
    });
    let mut app = container("app");
    app.log_configuration = Some(LogConfiguration {
        log_driver: LogDriver::new("awsfirelens"),
        options: [("Name".to_string(), "stdout".to_string())].into(),
        secret_options: Vec::new(),
    });
    let s = state(vec![router, app]);
    let dir = tempfile::tempdir().expect("tempdir");
    let (rtx, _rrx) = mpsc::unbounded_channel();
    let (_ctx, crx) = mpsc::channel::<Command>(1);
    let (stx, _srx) = watch::channel(s.clone());
    let done = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        run_task(
            Arc::new(rt.clone()),
            s,
            RunConfig::new(dir.path().to_path_buf()),
            rtx,
            crx,
            stx,
        ),
    )
    .await
    .expect("task ends");
    assert_eq!(done.known(), Status::Stopped);
    assert!(
        rt.created_specs().is_empty(),
        "nothing is created: {:?}",
        rt.calls()
    );
    let reason = done.containers[0].reason.clone().unwrap_or_default();
    assert!(
        reason.starts_with(
            "FireLens: the log router's user \"fluent\" must start with a numeric user ID"
        ),
        "{reason}"
    );
}
