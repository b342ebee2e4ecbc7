//! The metadata endpoint over real HTTP on loopback, against the fake runtime: golden JSON shapes
//! (every key name and value format), 404 for unknown ids, 429 over the rate limit, no reads across
//! tasks, PULLED and NONE containers, and stats with `network_rate_stats`; v3 against v4 and the
//! `taskWithTags` answers against the shapes of the ECS documentation's examples.

mod common;

use berth_api::metadata::json::{self, TaskInfo, Version};
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
        container_instance_tags: Vec::new(),
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
    let r = json::task_response(
        &s,
        &[Some(&details), None, None],
        &info(),
        Version::V4,
        false,
    );
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
        "FaultInjectionEnabled": false,
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
                "LogOptions": {"max-size": "10m"},
                "ContainerARN": format!(
                    "arn:aws:ecs:eu-west-1:123456789012:container/prod/{task_id}/{}",
                    berth_engine::identity::container_uuid(&task_id, "app")
                )
            },
            {
                // Pulled, not created: DockerId and ImageID empty (ECS sends both keys), no
                // dynamic fields, no times; no CPU shares given to Docker: 0.
                "DockerId": "",
                "ImageID": "",
                "Name": "sidecar",
                "DockerName": format!("berth-web-3-sidecar-{}", &task_id[..12]),
                "Image": "busybox",
                "Labels": {"berth.task": task_id, "berth.container": "sidecar",
                           "berth.family": "web", "berth.revision": "3"},
                "DesiredStatus": "RUNNING",
                "KnownStatus": "PULLED",
                "Limits": {"CPU": 0, "Memory": 0},
                "Type": "NORMAL",
                "ContainerARN": format!(
                    "arn:aws:ecs:eu-west-1:123456789012:container/prod/{task_id}/{}",
                    berth_engine::identity::container_uuid(&task_id, "sidecar")
                )
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
    let r = json::task_response(&s, &[Some(&d2), None, None], &info(), Version::V4, false);
    let v = serde_json::to_value(&r).expect("json");
    assert_eq!(v["ExecutionStoppedAt"], "2026-11-30T01:00:09.500Z");
    let app = &v["Containers"][0];
    assert_eq!(app["ExitCode"], 137);
    assert_eq!(app["FinishedAt"], "2026-11-30T01:00:09.500Z");
    // ECS leaves `status` out while it is UNKNOWN (Docker's `starting`).
    assert_eq!(app["Health"], json!({"exitCode": 1}));

    // No task-level limits, an availability zone, another launch type.
    let mut plain = task("plain", 1, "host");
    plain.definition.cpu = None;
    plain.definition.memory = None;
    plain.containers[0].known = Status::Created;
    plain.containers[0].docker_id = Some("h0".into());
    let mut i2 = info();
    i2.identity.availability_zone = "rack-1".into();
    i2.launch_type = "EXTERNAL".into();
    let v = serde_json::to_value(json::task_response(
        &plain,
        &[None],
        &i2,
        Version::V4,
        false,
    ))
    .expect("json");
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
    assert_eq!(v["Containers"][0]["ImageID"], "");
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

    // The task answer lists the pulled container with an empty DockerId, as ECS does.
    let (_, t) = conn.get_json(&format!("/v4/{id0}/task")).await;
    assert_eq!(t["Containers"][1]["KnownStatus"], "PULLED");
    assert_eq!(t["Containers"][1]["DockerId"], "");
    server.shutdown().await;
}

/// An EC2 bridge task as the ECS documentation's v4 `taskWithTags` example shows it (values of
/// our own, the documented keys and value types): every key berth can have must be there with the
/// same JSON type, and berth adds no key ECS's v4 structs do not have.
const ECS_V4_TASK_WITH_TAGS: &str = r#"{
  "Cluster": "default",
  "TaskARN": "arn:aws:ecs:us-west-2:111122223333:task/default/158d1c8083dd49d6b527399fd6414f5c",
  "Family": "curltest",
  "ServiceName": "MyService",
  "Revision": "26",
  "DesiredStatus": "RUNNING",
  "KnownStatus": "RUNNING",
  "PullStartedAt": "2020-10-02T00:43:06.202617438Z",
  "PullStoppedAt": "2020-10-02T00:43:06.31288465Z",
  "AvailabilityZone": "us-west-2d",
  "VPCID": "vpc-1234567890abcdef0",
  "TaskTags": {"tag-use": "task-metadata-endpoint-test"},
  "ContainerInstanceTags": {"tag_key": "tag_value"},
  "LaunchType": "EC2",
  "Containers": [{
    "DockerId": "598cba581fe3f939459eaba1e071d5c93bb2c49b7d1ba7db6bb19deeb70d8e38",
    "Name": "curl",
    "DockerName": "ecs-curltest-26-curl-c2e5f6e0cf91b0bead01",
    "Image": "111122223333.dkr.ecr.us-west-2.amazonaws.com/curltest:latest",
    "ImageID": "sha256:d691691e9652791a60114e67b365688d20d19940dde7c4736ea30e660d8d3553",
    "Labels": {"com.amazonaws.ecs.cluster": "default"},
    "DesiredStatus": "RUNNING",
    "KnownStatus": "RUNNING",
    "Limits": {"CPU": 10, "Memory": 128},
    "CreatedAt": "2020-10-02T00:43:06.326590752Z",
    "StartedAt": "2020-10-02T00:43:06.767535449Z",
    "Type": "NORMAL",
    "LogDriver": "awslogs",
    "LogOptions": {"awslogs-group": "/ecs/metadata"},
    "ContainerARN": "arn:aws:ecs:us-west-2:111122223333:container/0206b271-b33f-47ab-86c6-a0ba208a70a9",
    "Networks": [{"NetworkMode": "bridge", "IPv4Addresses": ["172.17.0.2"]}]
  }]
}"#;

/// Every key ECS's v4 task and container structs may send (`ecs-agent/tmds/handlers/v2/response.go`,
/// `v4/state/response.go`); berth must not invent others.
const ECS_V4_TASK_KEYS: &[&str] = &[
    "Cluster",
    "TaskARN",
    "Family",
    "Revision",
    "DesiredStatus",
    "KnownStatus",
    "Containers",
    "Limits",
    "PullStartedAt",
    "PullStoppedAt",
    "ExecutionStoppedAt",
    "AvailabilityZone",
    "TaskTags",
    "ContainerInstanceTags",
    "LaunchType",
    "Errors",
    "VPCID",
    "ServiceName",
    "Group",
    "ClockDrift",
    "EphemeralStorageMetrics",
    "FaultInjectionEnabled",
    "AvailabilityZoneID",
];
const ECS_V4_CONTAINER_KEYS: &[&str] = &[
    "DockerId",
    "Name",
    "DockerName",
    "Image",
    "ImageID",
    "Ports",
    "Labels",
    "DesiredStatus",
    "KnownStatus",
    "ExitCode",
    "Limits",
    "CreatedAt",
    "StartedAt",
    "FinishedAt",
    "Type",
    "Networks",
    "Health",
    "Volumes",
    "LogDriver",
    "LogOptions",
    "ContainerARN",
    "Snapshotter",
    "RestartCount",
];

fn kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "bool",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

/// A running single-container bridge task with tags, as berth shows it.
fn tagged_running_task() -> (TaskState, ContainerDetails, TaskInfo) {
    let def = json!({
        "taskDefinition": {
            "family": "curltest", "revision": 26,
            "containerDefinitions": [{"name": "curl", "image": "curltest:latest", "cpu": 10, "memory": 128,
                "logConfiguration": {"logDriver": "json-file", "options": {"max-size": "1m"}}}],
            "tags": [{"key": "team", "value": "metadata"}]
        },
        "tags": [{"key": "tag-use", "value": "task-metadata-endpoint-test"}]
    });
    let parsed = berth_model::parse(&def.to_string()).expect("valid");
    let mut s = TaskState::new(
        "158d1c8083dd49d6b527399fd6414f5c".into(),
        parsed.definition,
        0,
    );
    let c = &mut s.containers[0];
    c.docker_id = Some("598cba581fe3".into());
    c.known = Status::Running;
    c.pull_started_at = Some(1_601_599_386_202);
    c.pull_stopped_at = Some(1_601_599_386_312);
    c.created_at = Some(1_601_599_386_326);
    c.started_at = Some(1_601_599_386_767);
    let details = ContainerDetails {
        image_id: Some("sha256:d691".into()),
        networks: vec![NetworkAttachment {
            network: "bridge".into(),
            ipv4_addresses: vec!["172.17.0.2".into()],
        }],
        ..ContainerDetails::default()
    };
    let mut i = info();
    i.container_instance_tags = vec![berth_model::Tag::new("tag_key", "tag_value")];
    (s, details, i)
}

fn render(
    s: &TaskState,
    details: &[Option<&ContainerDetails>],
    i: &TaskInfo,
    version: Version,
    tags: bool,
) -> serde_json::Value {
    serde_json::to_value(json::task_response(s, details, i, version, tags)).expect("json")
}

#[test]
fn v4_task_with_tags_has_the_documented_keys_and_types_and_no_others() {
    let (s, details, i) = tagged_running_task();
    let got = render(&s, &[Some(&details)], &i, Version::V4, true);
    let doc: serde_json::Value = serde_json::from_str(ECS_V4_TASK_WITH_TAGS).expect("example");
    // What berth cannot know: no ECS service, no VPC.
    let not_here = ["ServiceName", "VPCID"];
    for (scope, want, have, keys) in [
        ("task", &doc, &got, ECS_V4_TASK_KEYS),
        (
            "container",
            &doc["Containers"][0],
            &got["Containers"][0],
            ECS_V4_CONTAINER_KEYS,
        ),
    ] {
        for (k, v) in want.as_object().expect("object") {
            if not_here.contains(&k.as_str()) {
                assert!(
                    have.get(k).is_none(),
                    "{scope} {k}: berth has no value for it"
                );
                continue;
            }
            let h = have
                .get(k)
                .unwrap_or_else(|| panic!("{scope}: {k} missing in {have}"));
            assert_eq!(kind(h), kind(v), "{scope} {k}: {h} vs the documented {v}");
        }
        for k in have.as_object().expect("object").keys() {
            assert!(
                keys.contains(&k.as_str()),
                "{scope}: {k} is no key ECS sends"
            );
        }
    }
    assert_eq!(
        got["TaskTags"],
        json!({"tag-use": "task-metadata-endpoint-test", "team": "metadata"})
    );
    assert_eq!(
        got["ContainerInstanceTags"],
        json!({"tag_key": "tag_value"})
    );
    assert_eq!(got["FaultInjectionEnabled"], false);
    assert_eq!(
        got["Containers"][0]["ContainerARN"],
        i.identity.container_arn(&s.id, "curl")
    );

    // `/task` is the same answer without the tags.
    let plain = render(&s, &[Some(&details)], &i, Version::V4, false);
    assert!(plain.get("TaskTags").is_none() && plain.get("ContainerInstanceTags").is_none());
    // Empty tags are left out even from taskWithTags (ECS's omitempty on the maps).
    let mut untagged = s.clone();
    untagged.definition.tags.clear();
    let mut no_instance_tags = i.clone();
    no_instance_tags.container_instance_tags.clear();
    let bare = render(
        &untagged,
        &[Some(&details)],
        &no_instance_tags,
        Version::V4,
        true,
    );
    assert!(bare.get("TaskTags").is_none() && bare.get("ContainerInstanceTags").is_none());
}

/// ECS's v3 handlers build the v2 structs without `includeV4Metadata`: no ContainerARN, no log
/// driver or options, no HostIp, no LaunchType, no FaultInjectionEnabled; tags the same as v4.
#[test]
fn v3_leaves_out_the_v4_fields() {
    let (s, mut details, i) = tagged_running_task();
    details.ports = vec![BoundPort {
        container_port: 80,
        protocol: "tcp".into(),
        host_port: Some(32768),
        host_ip: Some("0.0.0.0".into()),
    }];
    let v4 = render(&s, &[Some(&details)], &i, Version::V4, true);
    let v3 = render(&s, &[Some(&details)], &i, Version::V3, true);
    for k in ["LaunchType", "FaultInjectionEnabled"] {
        assert!(v4.get(k).is_some() && v3.get(k).is_none(), "{k}: {v3}");
    }
    for k in ["ContainerARN", "LogDriver", "LogOptions"] {
        assert!(v4["Containers"][0].get(k).is_some(), "{k}: {v4}");
        assert!(v3["Containers"][0].get(k).is_none(), "{k}: {v3}");
    }
    assert_eq!(v4["Containers"][0]["Ports"][0]["HostIp"], "0.0.0.0");
    assert_eq!(
        v3["Containers"][0]["Ports"],
        json!([{"ContainerPort": 80, "Protocol": "tcp", "HostPort": 32768}])
    );
    assert_eq!(v3["TaskTags"], v4["TaskTags"]);
    assert_eq!(v3["AvailabilityZone"], "eu-west-1b");
    // The container answer alone follows the same rule.
    let c3 = serde_json::to_value(json::container_response(
        &s,
        0,
        Some(&details),
        None,
        &i,
        Version::V3,
    ))
    .expect("json");
    assert!(c3.get("ContainerARN").is_none(), "{c3}");
}

/// A container with a health check shows `Health` from the start, as `{}` until Docker has a
/// first result (ECS leaves `status` out while it is UNKNOWN); `Limits.CPU` is Docker's shares.
#[test]
fn health_is_an_empty_object_until_docker_has_a_result() {
    let def = json!({"family": "h", "containerDefinitions": [
        {"name": "a", "image": "busybox", "healthCheck": {"command": ["CMD-SHELL", "true"]}},
        {"name": "b", "image": "busybox", "essential": false, "cpu": 1}]});
    let parsed = berth_model::parse(&def.to_string()).expect("valid");
    let mut s = TaskState::new(
        "0123456789abcdef0123456789abcdef".into(),
        parsed.definition,
        0,
    );
    for c in &mut s.containers {
        c.known = Status::Running;
        c.docker_id = Some(format!("id-{}", c.name));
    }
    let v = render(&s, &[None, None], &info(), Version::V4, false);
    assert_eq!(v["Containers"][0]["Health"], json!({}));
    // Limits.CPU is the shares Docker was given: none for no cpu, Docker's minimum 2 for 1.
    assert_eq!(v["Containers"][0]["Limits"]["CPU"], 0);
    assert_eq!(v["Containers"][1]["Limits"]["CPU"], 2);
    assert!(v["Containers"][1].get("Health").is_none(), "{v}");
    s.containers[0].health = Health::Unhealthy;
    let v = render(&s, &[None, None], &info(), Version::V4, false);
    assert_eq!(v["Containers"][0]["Health"], json!({"status": "UNHEALTHY"}));
}

#[tokio::test]
async fn task_with_tags_is_served_on_v3_and_v4() {
    let rt = FakeRuntime::new();
    let mut a = task("tagged", 1, "bridge");
    a.definition.tags = vec![berth_model::Tag::new("team", "web")];
    run_in_fake(&rt, &mut a).await;
    let directory = Arc::new(TaskDirectory::new());
    let mut config = MetadataConfig {
        task: info(),
        rate_limit: RateLimit::DISABLED,
        ..MetadataConfig::default()
    };
    config.task.container_instance_tags = vec![berth_model::Tag::new("rack", "r1")];
    let listen = Listen {
        addr: "127.0.0.1:0".parse().expect("addr"),
        advertise: None,
        bridge: false,
    };
    let server = MetadataServer::start(Arc::new(rt), directory.clone(), config, listen)
        .await
        .expect("server starts");
    let (_tx, rx) = watch::channel(a.clone());
    directory.register(rx);
    let mut conn = Conn::open(server.local_addrs()[0]).await;
    let id = &a.containers[0].metadata_id;
    for v in ["v4", "v3"] {
        let (status, t) = conn.get_json(&format!("/{v}/{id}/taskWithTags")).await;
        assert_eq!(status, 200, "{v}: {t}");
        assert_eq!(t["TaskTags"], json!({"team": "web"}), "{v}");
        assert_eq!(t["ContainerInstanceTags"], json!({"rack": "r1"}), "{v}");
        // Rendered answers are cached per variant: /task right after has no tags.
        let (_, plain) = conn.get_json(&format!("/{v}/{id}/task")).await;
        assert!(plain.get("TaskTags").is_none(), "{v}: {plain}");
        assert_eq!(plain.get("LaunchType").is_some(), v == "v4", "{v}: {plain}");
    }
    assert_eq!(conn.get("/v4/nope/taskWithTags").await.0, 404);
    server.shutdown().await;
}
