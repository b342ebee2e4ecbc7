//! Smoke test of the chain every Docker test relies on: bollard talks to the Engine, the offline
//! test image runs, and a container can be created, started, waited for, read and removed.

use berth_testkit::bollard;
use berth_testkit::{self as tk, ContainerGuard};
use bollard::errors::Error;
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{CreateContainerOptions, RemoveContainerOptions};

#[tokio::test]
async fn container_runs_to_completion_from_the_offline_image() {
    let docker = tk::docker().await;
    let image = tk::test_image();
    tk::require_image(&docker, &image).await;
    let name = tk::unique_name("berth-smoke-");
    let _guard = ContainerGuard::new(&name); // removes the container if an assertion fails

    let body = ContainerCreateBody {
        image: Some(image),
        cmd: Some(vec![
            "sh".into(),
            "-c".into(),
            "echo hello-from-berth; exit 3".into(),
        ]),
        labels: Some(tk::test_labels()),
        ..Default::default()
    };
    let options = CreateContainerOptions {
        name: Some(name.clone()),
        ..Default::default()
    };
    let created = docker
        .create_container(Some(options), body)
        .await
        .expect("create container");
    let id = created.id;

    docker
        .start_container(&id, None)
        .await
        .expect("start container");
    assert_eq!(tk::wait_exit_code(&docker, &id).await, 3, "exit code");

    let logs = tk::container_logs(&docker, &id).await;
    assert!(
        logs.contains("hello-from-berth"),
        "logs should contain hello-from-berth, got {logs:?}"
    );

    let options = RemoveContainerOptions {
        v: true,
        ..Default::default()
    };
    docker
        .remove_container(&id, Some(options))
        .await
        .expect("remove container");
    match docker.inspect_container(&id, None).await {
        Err(Error::DockerResponseServerError {
            status_code: 404, ..
        }) => {}
        other => panic!("container {name} should be gone after removal, inspect gave {other:?}"),
    }
}
