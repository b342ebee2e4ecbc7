//! The container metadata file on the fake runtime: written before the create (no
//! `MetadataFileStatus`), mounted with `ECS_CONTAINER_METADATA_FILE` in the create spec, READY
//! once the container runs; a container that never starts keeps its first file; the pause
//! container gets none; with the option off nothing is written or added; an adopting actor
//! writes READY again when the file is not READY.

mod common;

use berth_engine::container_metadata::{self, Settings};
use berth_engine::fake::{FakeRuntime, Script};
use berth_engine::{Command, RunConfig, Status, TaskState, run_task};
use berth_model::NetworkMode;
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

const TASK: &str = "0123456789abcdef0123456789abcdef";

fn file_of(data: &Path, container: &str) -> PathBuf {
    data.join("tasks")
        .join(TASK)
        .join("metadata")
        .join(container)
        .join("ecs-container-metadata.json")
}

fn read(path: &Path) -> Option<Value> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// Wait (up to 10 s) until the file says READY.
async fn until_ready(path: &Path) -> Value {
    for _ in 0..200 {
        if let Some(v) = read(path).filter(|v| v["MetadataFileStatus"] == "READY") {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{} never became READY: {:?}", path.display(), read(path));
}

fn awsvpc_task() -> TaskState {
    let mut bad = non_essential(container("bad"));
    bad.port_mappings.clear();
    let mut def = task(vec![container("app"), bad]);
    def.network_mode = NetworkMode::Awsvpc;
    TaskState::new(TASK.into(), def, 0)
}

fn config(dir: &Path, settings: Option<Settings>) -> RunConfig {
    RunConfig {
        container_metadata: settings,
        ..RunConfig::new(dir.to_path_buf())
    }
}

fn settings() -> Settings {
    Settings {
        host_private_ipv4: Some("10.0.0.5".into()),
        host_public_ipv4: None,
    }
}

#[tokio::test]
async fn each_container_gets_its_file_ready_once_it_runs() {
    let rt = FakeRuntime::new();
    rt.add_image("img");
    rt.script(
        "bad",
        Script {
            start_error: Some("no such binary".into()),
            ..Default::default()
        },
    );
    let s = awsvpc_task();
    let dir = tempfile::tempdir().expect("tempdir");
    let (rtx, _rrx) = mpsc::unbounded_channel();
    let (ctx, crx) = mpsc::channel::<Command>(1);
    let (stx, _srx) = watch::channel(s.clone());
    let actor = tokio::spawn(run_task(
        Arc::new(rt.clone()),
        s,
        config(dir.path(), Some(settings())),
        rtx,
        crx,
        stx,
    ));

    let app = until_ready(&file_of(dir.path(), "app")).await;
    let keys: Vec<&str> = app
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    // serde_json keeps the file's order only with `preserve_order`; compare as sets, and the
    // unit tests pin the order.
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    let mut expected = vec![
        "Cluster",
        "ContainerInstanceARN",
        "TaskARN",
        "TaskDefinitionFamily",
        "TaskDefinitionRevision",
        "ContainerID",
        "ContainerName",
        "DockerContainerName",
        "ImageID",
        "ImageName",
        "Networks",
        "MetadataFileStatus",
        "AvailabilityZone",
        "HostPrivateIPv4Address",
    ];
    expected.sort_unstable();
    assert_eq!(sorted, expected, "{app}");
    assert_eq!(app["ContainerName"], "app");
    assert_eq!(app["TaskDefinitionFamily"], "fam");
    assert_eq!(app["TaskDefinitionRevision"], "1");
    assert_eq!(
        app["TaskARN"],
        format!("arn:aws:ecs:local-1:000000000000:task/default/{TASK}")
    );
    assert_eq!(app["DockerContainerName"], "/berth-fam-1-app-0123456789ab");
    assert_eq!(app["ImageName"], "img");
    assert_eq!(app["HostPrivateIPv4Address"], "10.0.0.5");
    // The fake lists a joined container's network under its network mode (Docker lists none:
    // the real-Engine runs check that case).
    let pause_name = "berth-fam-1-pause.0123456789ab";
    assert_eq!(
        app["Networks"],
        serde_json::json!([{"NetworkMode": format!("container:{pause_name}"), "IPv4Addresses": [""]}]),
        "{app}"
    );

    // `bad` was created (its first file written, mounted) but never started.
    let bad = read(&file_of(dir.path(), "bad")).expect("bad's file");
    assert!(bad.get("MetadataFileStatus").is_none(), "{bad}");
    assert!(bad.get("ContainerID").is_none(), "{bad}");
    assert_eq!(bad["ContainerName"], "bad");

    // The pause container has no file; every other create spec has the mount and the variable.
    let names: Vec<String> =
        std::fs::read_dir(dir.path().join("tasks").join(TASK).join("metadata"))
            .expect("metadata dir")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
    let mut names = names;
    names.sort();
    assert_eq!(names, ["app", "bad"]);
    for spec in rt.created_specs() {
        let env = spec
            .env
            .iter()
            .find(|e| e.starts_with("ECS_CONTAINER_METADATA_FILE="));
        if spec.name == pause_name {
            assert!(env.is_none(), "{:?}", spec.env);
            continue;
        }
        let env = env.expect("the variable");
        let container = spec.labels.get("berth.container").expect("label").clone();
        assert_eq!(
            env,
            &format!(
                "ECS_CONTAINER_METADATA_FILE={}",
                container_metadata::container_path(TASK, &container)
            )
        );
        let mount = spec
            .mounts
            .iter()
            .find(|m| m.target.starts_with("/opt/ecs/metadata/"))
            .expect("the mount");
        assert_eq!(
            Path::new(&mount.source),
            file_of(dir.path(), &container).parent().expect("dir")
        );
    }

    ctx.send(Command::Stop {
        reason: "test".into(),
    })
    .await
    .expect("send");
    let done = tokio::time::timeout(Duration::from_secs(10), actor)
        .await
        .expect("task ends")
        .expect("actor");
    assert_eq!(done.known(), Status::Stopped);
}

#[tokio::test]
async fn off_no_file_no_mount_no_variable() {
    let rt = FakeRuntime::new();
    rt.add_image("img");
    rt.script(
        "app",
        Script {
            exit_code: Some(0),
            ..Default::default()
        },
    );
    let s = state(vec![container("app")]);
    let dir = tempfile::tempdir().expect("tempdir");
    let (rtx, _rrx) = mpsc::unbounded_channel();
    let (_ctx, crx) = mpsc::channel::<Command>(1);
    let (stx, _srx) = watch::channel(s.clone());
    let done = tokio::time::timeout(
        Duration::from_secs(10),
        run_task(
            Arc::new(rt.clone()),
            s,
            config(dir.path(), None),
            rtx,
            crx,
            stx,
        ),
    )
    .await
    .expect("task ends");
    assert_eq!(done.known(), Status::Stopped);
    assert!(
        !dir.path()
            .join("tasks")
            .join(TASK)
            .join("metadata")
            .exists()
    );
    let spec = rt.created_specs().pop().expect("created");
    assert!(
        !spec
            .env
            .iter()
            .any(|e| e.starts_with("ECS_CONTAINER_METADATA_FILE=")),
        "{:?}",
        spec.env
    );
    assert!(spec.mounts.is_empty(), "{:?}", spec.mounts);
}

#[tokio::test]
async fn an_adopting_actor_writes_ready_again_when_the_file_is_not_ready() {
    let rt = FakeRuntime::new();
    rt.add_image("img");
    let s = state(vec![container("app")]);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = file_of(dir.path(), "app");
    let cancel = CancellationToken::new();
    let (rtx, _rrx) = mpsc::unbounded_channel();
    let (_ctx, crx) = mpsc::channel::<Command>(1);
    let (stx, _srx) = watch::channel(s.clone());
    let first = tokio::spawn(run_task(
        Arc::new(rt.clone()),
        s,
        RunConfig {
            cancel: cancel.clone(),
            ..config(dir.path(), Some(settings()))
        },
        rtx,
        crx,
        stx,
    ));
    let ready = until_ready(&file).await;
    // The agent stops; its successor finds the first file only (as if the agent had died
    // between the start and the READY write).
    cancel.cancel();
    let left = tokio::time::timeout(Duration::from_secs(10), first)
        .await
        .expect("cancelled actor returns")
        .expect("actor");
    assert_eq!(left.known(), Status::Running);
    let mut initial = ready.clone();
    for k in [
        "ContainerID",
        "DockerContainerName",
        "ImageID",
        "ImageName",
        "Networks",
        "PortMappings",
        "MetadataFileStatus",
    ] {
        initial.as_object_mut().expect("object").remove(k);
    }
    std::fs::write(&file, initial.to_string()).expect("rewrite");

    let (rtx, _rrx) = mpsc::unbounded_channel();
    let (ctx, crx) = mpsc::channel::<Command>(1);
    let (stx, _srx) = watch::channel(left.clone());
    let second = tokio::spawn(run_task(
        Arc::new(rt.clone()),
        left,
        RunConfig {
            resume: true,
            ..config(dir.path(), Some(settings()))
        },
        rtx,
        crx,
        stx,
    ));
    let again = until_ready(&file).await;
    assert_eq!(again, ready);
    ctx.send(Command::Stop {
        reason: "test".into(),
    })
    .await
    .expect("send");
    let done = tokio::time::timeout(Duration::from_secs(10), second)
        .await
        .expect("task ends")
        .expect("actor");
    assert_eq!(done.known(), Status::Stopped);
}
