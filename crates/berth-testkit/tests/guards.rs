//! The cleanup guards remove what they guard, also when the test that holds them panics.

use berth_testkit::{self as tk, ContainerGuard, VolumeGuard};
use bollard::errors::Error;
use bollard::models::{ContainerCreateBody, VolumeCreateRequest};
use bollard::query_parameters::CreateContainerOptions;

#[tokio::test]
async fn guards_remove_their_container_and_volume_when_the_test_panics() {
    let docker = tk::docker().await;
    let image = tk::test_image();
    tk::require_image(&docker, &image).await;
    let container = tk::unique_name("berth-testkit-guard-");
    let volume = tk::unique_name("berth-testkit-guard-");

    let task = {
        let docker = docker.clone();
        let (container, volume) = (container.clone(), volume.clone());
        tokio::spawn(async move {
            let _container_guard = ContainerGuard::new(&container);
            let _volume_guard = VolumeGuard::new(&volume);
            let volume_config = VolumeCreateRequest {
                name: Some(volume.clone()),
                labels: Some(tk::test_labels()),
                ..Default::default()
            };
            docker
                .create_volume(volume_config)
                .await
                .expect("create volume");
            let body = ContainerCreateBody {
                image: Some(image),
                cmd: Some(vec!["sleep".into(), "600".into()]),
                labels: Some(tk::test_labels()),
                ..Default::default()
            };
            let options = CreateContainerOptions {
                name: Some(container.clone()),
                ..Default::default()
            };
            docker
                .create_container(Some(options), body)
                .await
                .expect("create container");
            docker
                .start_container(&container, None)
                .await
                .expect("start container");
            panic!("deliberate panic: the guards must still clean up");
        })
    };
    let outcome = task.await;
    assert!(
        outcome.is_err_and(|err| err.is_panic()),
        "the task should have panicked"
    );

    match docker.inspect_container(&container, None).await {
        Err(Error::DockerResponseServerError {
            status_code: 404, ..
        }) => {}
        other => panic!("container {container} should be gone, inspect gave {other:?}"),
    }
    match docker.inspect_volume(&volume).await {
        Err(Error::DockerResponseServerError {
            status_code: 404, ..
        }) => {}
        other => panic!("volume {volume} should be gone, inspect gave {other:?}"),
    }
}
