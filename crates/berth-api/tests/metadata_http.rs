//! The metadata endpoint over real HTTP on loopback, against the fake runtime: golden JSON shapes
//! (every key name and value format), 404 for unknown ids, 429 over the rate limit, no reads across
//! tasks, PULLED and NONE containers, and stats with `network_rate_stats`.

mod common;

use berth_api::metadata::json::{self, TaskInfo};
use berth_api::metadata::{Listen, MetadataConfig, MetadataServer, RateLimit, TaskDirectory};
use berth_engine::TaskState;
use berth_engine::fake::{FakeRuntime, Script};
use berth_engine::runtime::{
    BoundPort, ContainerDetails, HealthDetails, MountDetails, NetworkAttachment, Runtime,
};
use berth_engine::spec::ContainerSpec;
use berth_engine::state::{Health, Status};
use common::{Conn, task};
use serde_json::json;
use std::sync::Arc;
use tokio::sync::watch;

fn info() -> TaskInfo {
    TaskInfo {
        identity: json::Identity {
            cluster: "prod".into(),
            region: "eu-west-1".into(),
            account: "123456789012".into(),
            availability_zone: "eu-west-1b".into(),
            ..json::Identity::default()
        },
        launch_type: "EC2".into(),
    }
}

/// The golden container: every field set, so every key and format shows.
#[test]
fn golden_task_json_has_ecs_keys_and_formats() {
    let def = json!({
        "family": "web", "revision": 3, "networkMode": "bridge", "cpu": "0.5 vCPU", "memory": "1 GB",
        "containerDefinitions": [
            {"name": "app", "image": "nginx:1", "cpu": 256, "memory": 128,
             "portMappings": [{"containerPort": 80, "hostPort": 0}],
             "dockerLabels": {"team": "a"},
             "healthCheck": {"command": ["CMD-SHELL", "true"], "interval": 5},
             "logConfiguration": {"logDriver": "json-file", "options": {"max-size": "10m"}}},
            {"name": "sidecar", "image": "busybox", "essential": false},
            {"name": "later", "image": "busybox", "essential": false}
        ]
    });
    let parsed = berth_model::parse(&def.to_string()).expect("valid");
    let task_id = "0123456789abcdef0123456789abcdef".to_string();
    let mut s = TaskState::new(task_id.clone(), parsed.definition, 0);
    let t = 1_796_000_400_500; // 2026-11-30T01:00:00.500Z
    {
        let app = &mut s.containers[0];
        app.docker_id = Some("d0".into());
        app.known = Status::Running;
        app.health = Health::Healthy;
        app.pull_started_at = Some(t);
        app.pull_stopped_at = Some(t + 1000);
        app.created_at = Some(t + 2000);
        app.started_at = Some(t + 3000);
    }
    {
        let side = &mut s.containers[1];
        side.known = Status::Pulled;
    }
    let details = ContainerDetails {
        image_id: Some("sha256:abc".into()),
        networks: vec![NetworkAttachment {
            network: "bridge".into(),
            ipv4_addresses: vec!["172.17.0.2".into()],
        }],
        ports: vec![BoundPort {
            container_port: 80,
            protocol: "tcp".into(),
            host_port: Some(32768),
            host_ip: Some("0.0.0.0".into()),
        }],
        health: Some(HealthDetails {
            status: Health::Healthy,
            since: Some(t + 4000),
            exit_code: Some(0),
            output: Some("ok\n".into()),
        }),
        mounts: vec![MountDetails {
            name: Some("vol1".into()),
            source: Some("/var/lib/docker/volumes/vol1/_data".into()),
            destination: "/data".into(),
        }],
        ..ContainerDetails::default()
    };
    let r = json::task_response(&s, &[Some(&details), None, None], &info());
    let text = serde_json::to_string(&r).expect("serializes");
    let got: serde_json::Value = serde_json::from_str(&text).expect("json");
    let expected = json!({
        "Cluster": "prod",
        "TaskARN": format!("arn:aws:ecs:eu-west-1:123456789012:task/prod/{task_id}"),
        "Family": "web",
        "Revision": "3",
        "DesiredStatus": "RUNNING",
        // The lowest container status ("later" is still NONE).
        "KnownStatus": "NONE",
        "Limits": {"CPU": 0.5, "Memory": 1024},
        "PullStartedAt": "2026-11-30T01:00:00.500Z",
        "PullStoppedAt": "2026-11-30T01:00:01.500Z",
        "AvailabilityZone": "eu-west-1b",
        "LaunchType": "EC2",
        "Containers": [
            {
                "DockerId": "d0",
                "Name": "app",
                "DockerName": format!("berth-web-3-app-{}", &task_id[..12]),
                "Image": "nginx:1",
                "ImageID": "sha256:abc",
                "Ports": [{"ContainerPort": 80, "Protocol": "tcp", "HostPort": 32768, "HostIp": "0.0.0.0"}],
                "Labels": {"team": "a", "berth.task": task_id, "berth.container": "app",
                           "berth.family": "web", "berth.revision": "3"},
                "DesiredStatus": "RUNNING",
                "KnownStatus": "RUNNING",
                "Limits": {"CPU": 256, "Memory": 128},
                "CreatedAt": "2026-11-30T01:00:02.500Z",
                "StartedAt": "2026-11-30T01:00:03.500Z",
                "Type": "NORMAL",
                "Networks": [{"NetworkMode": "bridge", "IPv4Addresses": ["172.17.0.2"]}],
                "Health": {"status": "HEALTHY", "statusSince": "2026-11-30T01:00:04.500Z", "output": "ok\n"},
                "Volumes": [{"DockerName": "vol1", "Source": "/var/lib/docker/volumes/vol1/_data", "Destination": "/data"}],
                "LogDriver": "json-file",
                "LogOptions": {"max-size": "10m"}
            },
            {
                // Pulled, not created: no DockerId, no dynamic fields, no times.
                "Name": "sidecar",
                "DockerName": format!("berth-web-3-sidecar-{}", &task_id[..12]),
                "Image": "busybox",
                "Labels": {"berth.task": task_id, "berth.container": "sidecar",
                           "berth.family": "web", "berth.revision": "3"},
                "DesiredStatus": "RUNNING",
                "KnownStatus": "PULLED",
                "Limits": {"CPU": 0, "Memory": 0},
                "Type": "NORMAL"
            }
            // "later" is still NONE: left out, as ECS does.
        ]
    });
    assert_eq!(
        got,
        expected,
        "\n{}",
        serde_json::to_string_pretty(&got).unwrap_or_default()
    );
    // Integral CPU units are written as Go writes float64: 256, never 256.0; Revision a string.
    assert!(
        text.contains(r#""Limits":{"CPU":256,"Memory":128}"#),
        "{text}"
    );
    assert!(text.contains(r#""Revision":"3""#), "{text}");

    // Stopped with an exit code; health unknown with a failing check's exit code shown.
    s.containers[0].known = Status::Stopped;
    s.containers[0].exit_code = Some(137);
    s.containers[0].finished_at = Some(t + 9000);
    s.containers[0].health = Health::Starting;
    s.execution_stopped_at = Some(t + 9000);
    let mut d2 = details.clone();
    d2.health = Some(HealthDetails {
        status: Health::Starting,
        since: None,
        exit_code: Some(1),
        output: None,
    });
    let r = json::task_response(&s, &[Some(&d2), None, None], &info());
    let v = serde_json::to_value(&r).expect("json");
    assert_eq!(v["ExecutionStoppedAt"], "2026-11-30T01:00:09.500Z");
    let app = &v["Containers"][0];
    assert_eq!(app["ExitCode"], 137);
    assert_eq!(app["FinishedAt"], "2026-11-30T01:00:09.500Z");
    assert_eq!(app["Health"], json!({"status": "UNKNOWN", "exitCode": 1}));

    // No task-level limits, an availability zone, another launch type.
    let mut plain = task("plain", 1, "host");
    plain.definition.cpu = None;
    plain.definition.memory = None;
    plain.containers[0].known = Status::Created;
    plain.containers[0].docker_id = Some("h0".into());
    let mut i2 = info();
    i2.identity.availability_zone = "rack-1".into();
    i2.launch_type = "EXTERNAL".into();
    let v = serde_json::to_value(json::task_response(&plain, &[None], &i2)).expect("json");
    assert!(v.get("Limits").is_none(), "{v}");
    assert_eq!(v["AvailabilityZone"], "rack-1");
    assert_eq!(v["LaunchType"], "EXTERNAL");
    // Missing details never break the answer: host mode shows its mode and the port as the host's.
    assert_eq!(
        v["Containers"][0]["Networks"],
        json!([{"NetworkMode": "host"}])
    );
    assert_eq!(
        v["Containers"][0]["Ports"],
        json!([{"ContainerPort": 8000, "Protocol": "tcp", "HostPort": 8000}])
    );
    assert!(v["Containers"][0].get("ImageID").is_none());
}

#[test]
fn task_amounts_convert_to_ecs_units() {
    assert_eq!(json::task_cpu_vcpus("256"), Some(0.25));
    assert_eq!(json::task_cpu_vcpus("2 vCPU"), Some(2.0));
    assert_eq!(json::task_memory_mib("512"), Some(512));
    assert_eq!(json::task_memory_mib("0.5 GB"), Some(512));
    assert_eq!(json::task_cpu_vcpus("lots"), None);
}

/// Create and start every container of `state` in the fake runtime, recording ids and statuses
/// as the actor would.
async fn run_in_fake(rt: &FakeRuntime, state: &mut TaskState) {
    for i in 0..state.containers.len() {
        let spec: ContainerSpec = berth_engine::spec::container_spec(state, i, &[], None);
        rt.add_image(&spec.image);
        let id = rt.create(&spec).await.expect("create");
        rt.start(&id).await.expect("start");
        let c = &mut state.containers[i];
        c.docker_id = Some(id);
        c.known = Status::Running;
        c.created_at = Some(1_796_000_000_000);
        c.started_at = Some(1_796_000_001_000);
    }
}

async fn serve(rt: FakeRuntime, limit: RateLimit) -> (MetadataServer, Arc<TaskDirectory>) {
    let directory = Arc::new(TaskDirectory::new());
    let config = MetadataConfig {
        task: info(),
        rate_limit: limit,
        ..MetadataConfig::default()
    };
    let listen = Listen {
        addr: "127.0.0.1:0".parse().expect("addr"),
        advertise: None,
        bridge: false,
    };
    let server = MetadataServer::start(Arc::new(rt), directory.clone(), config, listen)
        .await
        .expect("server starts");
    (server, directory)
}

#[tokio::test]
async fn unknown_ids_get_404_with_a_json_string_and_tasks_never_see_each_other() {
    let rt = FakeRuntime::new();
    let (mut a, mut b) = (task("alpha", 2, "bridge"), task("beta", 3, "bridge"));
    run_in_fake(&rt, &mut a).await;
    run_in_fake(&rt, &mut b).await;
    let (server, directory) = serve(rt, RateLimit::DISABLED).await;
    let (_a_tx, a_rx) = watch::channel(a.clone());
    let (b_tx, b_rx) = watch::channel(b.clone());
    assert_eq!(directory.register(a_rx), a.id);
    assert_eq!(directory.register(b_rx), b.id);
    let mut conn = Conn::open(server.local_addrs()[0]).await;

    for path in [
        "/v4/00000000000000000000000000000000/task",
        "/v4/nope",
        "/v3/nope/task/stats",
    ] {
        let (status, v) = conn.get_json(path).await;
        assert_eq!(status, 404, "{path}");
        assert!(v.is_string(), "404 body must be a JSON string: {v}");
    }
    // A task id is not a metadata id.
    assert_eq!(conn.get(&format!("/v4/{}/task", a.id)).await.0, 404);

    for (state, other) in [(&a, &b), (&b, &a)] {
        for (i, c) in state.containers.iter().enumerate() {
            for v in ["v4", "v3"] {
                let (status, t) = conn.get_json(&format!("/{v}/{}/task", c.metadata_id)).await;
                assert_eq!(status, 200);
                assert_eq!(t["Family"], state.definition.family);
                assert!(
                    t["TaskARN"]
                        .as_str()
                        .is_some_and(|arn| arn.ends_with(&state.id))
                );
                let ids: Vec<&str> = t["Containers"]
                    .as_array()
                    .expect("containers")
                    .iter()
                    .map(|c| c["DockerId"].as_str().expect("docker id"))
                    .collect();
                let mine: Vec<&str> = state
                    .containers
                    .iter()
                    .filter_map(|c| c.docker_id.as_deref())
                    .collect();
                assert_eq!(ids, mine);
                for o in &other.containers {
                    assert!(!ids.contains(&o.docker_id.as_deref().unwrap_or_default()));
                }
                let (status, me) = conn.get_json(&format!("/{v}/{}", c.metadata_id)).await;
                assert_eq!(status, 200);
                assert_eq!(me["Name"], format!("c{i}"));
                assert_eq!(me["DockerId"], c.docker_id.clone().unwrap_or_default());
            }
        }
    }

    // The snapshot is followed: a change published by the actor shows at once.
    let mut b2 = b.clone();
    b2.containers[2].known = Status::Stopped;
    b2.containers[2].exit_code = Some(5);
    b_tx.send_replace(b2);
    let (_, t) = conn
        .get_json(&format!("/v4/{}/task", b.containers[0].metadata_id))
        .await;
    assert_eq!(t["Containers"][2]["KnownStatus"], "STOPPED");
    assert_eq!(t["Containers"][2]["ExitCode"], 5);

    // Unregistered: the ids answer 404, the other task's still answer.
    assert!(directory.unregister(&a.id));
    assert_eq!(
        conn.get(&format!("/v4/{}/task", a.containers[0].metadata_id))
            .await
            .0,
        404
    );
    assert_eq!(
        conn.get(&format!("/v4/{}/task", b.containers[0].metadata_id))
            .await
            .0,
        200
    );
    server.shutdown().await;
}

#[tokio::test]
async fn each_id_is_rate_limited_on_its_own_with_429() {
    let rt = FakeRuntime::new();
    let mut a = task("limited", 2, "bridge");
    run_in_fake(&rt, &mut a).await;
    let limit = RateLimit {
        per_second: 1,
        burst: 5,
    };
    let (server, directory) = serve(rt, limit).await;
    let (_tx, rx) = watch::channel(a.clone());
    directory.register(rx);
    let mut conn = Conn::open(server.local_addrs()[0]).await;
    let first = format!("/v4/{}/task", a.containers[0].metadata_id);
    for n in 0..5 {
        assert_eq!(
            conn.get(&first).await.0,
            200,
            "request {n} is within the burst"
        );
    }
    let (status, body) = conn.get_json(&first).await;
    assert_eq!(status, 429);
    assert!(body.is_string());
    // The other container's id has its own bucket.
    let second = format!("/v4/{}", a.containers[1].metadata_id);
    assert_eq!(conn.get(&second).await.0, 200);
    server.shutdown().await;
}

#[tokio::test]
async fn stats_are_dockers_json_keyed_by_docker_id_with_network_rates() {
    let rt = FakeRuntime::new();
    rt.script("c1", Script::default());
    let mut a = task("stats", 3, "bridge");
    run_in_fake(&rt, &mut a).await;
    // c2 has stopped: its stats are null; c1 is only pulled: not in the map.
    a.containers[2].known = Status::Stopped;
    a.containers[1].known = Status::Pulled;
    let pulled_id = a.containers[1].docker_id.take();
    let (server, directory) = serve(rt, RateLimit::DISABLED).await;
    let (_tx, rx) = watch::channel(a.clone());
    directory.register(rx);
    let mut conn = Conn::open(server.local_addrs()[0]).await;
    let id0 = &a.containers[0].metadata_id;

    let (status, s) = conn.get_json(&format!("/v4/{id0}/stats")).await;
    assert_eq!(status, 200);
    assert!(s["cpu_stats"]["cpu_usage"]["total_usage"].is_u64(), "{s}");
    assert!(s["memory_stats"]["usage"].is_u64(), "{s}");
    assert_eq!(s["network_rate_stats"]["rx_bytes_per_sec"], 0.0);
    // A second sample gives a rate.
    let (_, s) = conn.get_json(&format!("/v4/{id0}/stats")).await;
    assert!(
        s["network_rate_stats"]["rx_bytes_per_sec"]
            .as_f64()
            .is_some_and(|r| r > 0.0),
        "{s}"
    );

    let (status, m) = conn.get_json(&format!("/v4/{id0}/task/stats")).await;
    assert_eq!(status, 200);
    let m = m.as_object().expect("a map");
    let d0 = a.containers[0].docker_id.clone().unwrap_or_default();
    let d2 = a.containers[2].docker_id.clone().unwrap_or_default();
    assert_eq!(m.len(), 2, "{m:?}");
    assert!(m[&d0]["cpu_stats"].is_object());
    assert!(m[&d2].is_null());
    assert!(pulled_id.is_some_and(|p| !m.contains_key(&p)));

    // The task answer lists the pulled container without a DockerId.
    let (_, t) = conn.get_json(&format!("/v4/{id0}/task")).await;
    assert_eq!(t["Containers"][1]["KnownStatus"], "PULLED");
    assert!(t["Containers"][1].get("DockerId").is_none());
    server.shutdown().await;
}
