//! The agent introspection API: golden answers modelled on the ECS documentation's examples, and
//! every route and query variant over real HTTP on loopback against the fake runtime, with ECS's
//! error answers (400 for both parameters or an ambiguous short id, 404 for an unknown one).
//!
//! Where the expected shapes come from: the ECS developer guide's "Amazon ECS container
//! introspection" page (`curl -s http://localhost:51678/v1/metadata` → `{"Cluster": …,
//! "ContainerInstanceArn": "arn:aws:ecs:<region>:<account>:container-instance/<cluster>/<id>",
//! "Version": "Amazon ECS Agent - v1.30.0 (02ff320c)"}`; `curl http://localhost:51678/v1/tasks` →
//! one task of family `hello_world`, version `8`, with containers `mysql` (DockerId `9581a69a…`)
//! and `wordpress` (`bf25c5c5…`), each with `DockerId`, `DockerName`, `Name`, `CreatedAt`,
//! `StartedAt`, `ImageID`…), and for the exact key order and omission rules the ECS agent's
//! `ecs-agent/introspection/v1/response.go`. berth's own values replace ECS's where they must:
//! its Docker names, its 32-hex-digit task ids, its version string.

mod common;

use berth_api::introspection::json::{self, TaskResponse};
use berth_api::introspection::{IntrospectionConfig, IntrospectionServer};
use berth_api::metadata::TaskDirectory;
use berth_engine::fake::FakeRuntime;
use berth_engine::runtime::{
    BoundPort, ContainerDetails, MountDetails, NetworkAttachment, Runtime,
};
use berth_engine::state::{Op, Status};
use berth_engine::{Identity, TaskState};
use common::{Conn, task};
use serde_json::json;
use std::sync::Arc;
use tokio::sync::watch;

const MYSQL_ID: &str = "9581a69a761a557fbfce1d0f6745e4af5b9dbfb86b6b2c5c4df156f1a5932ff1";
const WORDPRESS_ID: &str = "bf25c5c5b2d4dba68846c7236e75b6915e1e778d31611e3c6a06831e39814a15";
const TASK_ID: &str = "0123456789abcdef0123456789abcdef";

fn identity() -> Identity {
    Identity {
        region: "us-west-2".into(),
        account: "012345678910".into(),
        cluster: "default".into(),
        container_instance_id: "fedcba9876543210fedcba9876543210".into(),
        ..Identity::default()
    }
}

fn config() -> IntrospectionConfig {
    IntrospectionConfig {
        identity: identity(),
        version: "berth - v0.1.0".into(),
        license: "Apache License\nVersion 2.0\n".into(),
        ..IntrospectionConfig::default()
    }
}

/// The documentation's `hello_world:8` task: mysql and wordpress, both running.
fn hello_world() -> TaskState {
    let def = json!({
        "family": "hello_world", "revision": 8, "networkMode": "bridge",
        "containerDefinitions": [
            {"name": "wordpress", "image": "wordpress", "memory": 500,
             "links": ["mysql"],
             "portMappings": [{"containerPort": 80, "hostPort": 80}]},
            {"name": "mysql", "image": "mysql", "memory": 500, "essential": true}
        ]
    });
    let parsed = berth_model::parse(&def.to_string()).expect("valid");
    let mut s = TaskState::new(TASK_ID.to_string(), parsed.definition, 0);
    let t = 1_796_000_400_500; // 2026-11-30T01:00:00.500Z
    for (i, id) in [(0, WORDPRESS_ID), (1, MYSQL_ID)] {
        let c = &mut s.containers[i];
        c.docker_id = Some(id.to_string());
        c.known = Status::Running;
        c.created_at = Some(t + 1000 * i64::try_from(i).unwrap_or(0));
        c.started_at = Some(t + 2000);
    }
    s
}

fn wordpress_details() -> ContainerDetails {
    ContainerDetails {
        image_id: Some("sha256:2ae34abc2ed0a22e280d17e13f9c01aaf725688b09".into()),
        networks: vec![NetworkAttachment {
            network: "bridge".into(),
            ipv4_addresses: vec!["172.17.0.3".into()],
        }],
        // Docker 20.10 reports each address it bound; ECS lists every binding.
        ports: vec![BoundPort {
            container_port: 80,
            protocol: "tcp".into(),
            host_port: Some(80),
            host_ip: Some("0.0.0.0".into()),
        }],
        mounts: vec![MountDetails {
            name: None,
            source: Some("/var/lib/berth/tasks/x/wp-content".into()),
            destination: "/var/www/html/wp-content".into(),
        }],
        ..ContainerDetails::default()
    }
}

fn mysql_details() -> ContainerDetails {
    ContainerDetails {
        image_id: Some("sha256:7e8f5ba4ba08".into()),
        mounts: vec![MountDetails {
            name: Some("f0e3bc3b64f2".into()),
            source: Some("/var/lib/docker/volumes/f0e3bc3b64f2/_data".into()),
            destination: "/var/lib/mysql".into(),
        }],
        ..ContainerDetails::default()
    }
}

#[test]
fn golden_v1_answers_have_the_ecs_documentations_shape_key_order_and_omissions() {
    let meta = json::AgentMetadataResponse::new(&identity(), "berth - v0.1.0");
    assert_eq!(
        serde_json::to_string(&meta).expect("json"),
        r#"{"Cluster":"default","ContainerInstanceArn":"arn:aws:ecs:us-west-2:012345678910:container-instance/default/fedcba9876543210fedcba9876543210","Version":"berth - v0.1.0"}"#
    );

    let s = hello_world();
    let (wp, my) = (wordpress_details(), mysql_details());
    let task = json::task_response(&s, &[Some(&wp), Some(&my)], &identity());
    let text = serde_json::to_string(&json::TasksResponse { tasks: vec![task] }).expect("json");
    let name = |c: &str| format!("berth-hello_world-8-{c}-{}", &TASK_ID[..12]);
    // Key order is ECS's struct order; Ports/Networks/Volumes are left out when empty (no
    // Networks outside awsvpc), CreatedAt/StartedAt when unset; DesiredStatus is shown.
    let expected = format!(
        concat!(
            r#"{{"Tasks":[{{"Arn":"arn:aws:ecs:us-west-2:012345678910:task/default/{task}","#,
            r#""DesiredStatus":"RUNNING","KnownStatus":"RUNNING","Family":"hello_world","Version":"8","#,
            r#""Containers":["#,
            r#"{{"DockerId":"{wp}","DockerName":"{wp_name}","Name":"wordpress","Image":"wordpress","#,
            r#""ImageID":"sha256:2ae34abc2ed0a22e280d17e13f9c01aaf725688b09","#,
            r#""CreatedAt":"2026-11-30T01:00:00.500Z","StartedAt":"2026-11-30T01:00:02.500Z","#,
            r#""Ports":[{{"ContainerPort":80,"Protocol":"tcp","HostPort":80}}],"#,
            r#""Volumes":[{{"Source":"/var/lib/berth/tasks/x/wp-content","Destination":"/var/www/html/wp-content"}}]}},"#,
            r#"{{"DockerId":"{my}","DockerName":"{my_name}","Name":"mysql","Image":"mysql","#,
            r#""ImageID":"sha256:7e8f5ba4ba08","#,
            r#""CreatedAt":"2026-11-30T01:00:01.500Z","StartedAt":"2026-11-30T01:00:02.500Z","#,
            r#""Volumes":[{{"DockerName":"f0e3bc3b64f2","Source":"/var/lib/docker/volumes/f0e3bc3b64f2/_data","Destination":"/var/lib/mysql"}}]}}"#,
            r#"]}}]}}"#
        ),
        task = TASK_ID,
        wp = WORDPRESS_ID,
        my = MYSQL_ID,
        wp_name = name("wordpress"),
        my_name = name("mysql"),
    );
    assert_eq!(text, expected);

    // ECS's empty answer of a failed lookup, plus the reason.
    let err = json::ErrorResponse::new("no task found with arn x");
    assert_eq!(
        serde_json::to_string(&err).expect("json"),
        r#"{"Arn":"","KnownStatus":"","Family":"","Version":"","Containers":null,"Error":"no task found with arn x"}"#
    );
}

#[test]
fn statuses_are_ecs_backend_names_and_containers_are_listed_once_their_create_is_sent() {
    let mut s = hello_world();
    // mysql is being created (no id yet), wordpress only pulled: the task is PENDING.
    s.containers[0].docker_id = None;
    s.containers[0].known = Status::Pulled;
    s.containers[1].docker_id = None;
    s.containers[1].known = Status::Pulled;
    s.containers[1].in_flight = Some(Op::Create);
    s.containers[1].created_at = None;
    s.containers[1].started_at = None;
    let v = serde_json::to_value(json::task_response(&s, &[], &identity())).expect("json");
    assert_eq!(v["KnownStatus"], "PENDING");
    assert_eq!(v["DesiredStatus"], "RUNNING");
    assert_eq!(
        v["Containers"],
        json!([{"DockerId": "", "DockerName": format!("berth-hello_world-8-mysql-{}", &TASK_ID[..12]),
                "Name": "mysql", "Image": "mysql", "ImageID": ""}]),
        "only the container being created, without an id yet"
    );

    // Stopping: known RUNNING, desired STOPPED: both shown.
    let mut s = hello_world();
    s.desired = Status::Stopped;
    let v = serde_json::to_value(json::task_response(&s, &[], &identity())).expect("json");
    assert_eq!(
        (v["KnownStatus"].as_str(), v["DesiredStatus"].as_str()),
        (Some("RUNNING"), Some("STOPPED"))
    );
    // Every container stopped while desired is still RUNNING: DesiredStatus is left out (ECS).
    let mut s = hello_world();
    for c in &mut s.containers {
        c.known = Status::Stopped;
    }
    let v = serde_json::to_value(json::task_response(&s, &[], &identity())).expect("json");
    assert_eq!(v["KnownStatus"], "STOPPED");
    assert!(v.get("DesiredStatus").is_none(), "{v}");
    // Without details a container keeps its definition's ports, ImageID "" and no Volumes.
    assert_eq!(
        v["Containers"][0]["Ports"],
        json!([{"ContainerPort": 80, "Protocol": "tcp", "HostPort": 80}])
    );
    assert_eq!(v["Containers"][0]["ImageID"], "");
    assert!(v["Containers"][0].get("Volumes").is_none());

    // Host mode: the host port is the container port.
    let mut h = task("hosted", 1, "host");
    h.containers[0].docker_id = Some("h0".into());
    h.containers[0].known = Status::Running;
    let v = serde_json::to_value(json::task_response(&h, &[], &identity())).expect("json");
    assert_eq!(
        v["Containers"][0]["Ports"],
        json!([{"ContainerPort": 8000, "Protocol": "tcp", "HostPort": 8000}])
    );
    assert!(v["Containers"][0].get("Networks").is_none());
}

#[test]
fn an_awsvpc_task_shows_its_address_and_hides_its_pause_container() {
    let def = json!({
        "family": "vpc", "revision": 1, "networkMode": "awsvpc",
        "containerDefinitions": [
            {"name": "web", "image": "nginx", "memory": 64,
             "portMappings": [{"containerPort": 8080}]}
        ]
    });
    let parsed = berth_model::parse(&def.to_string()).expect("valid");
    let mut s = TaskState::new(TASK_ID.to_string(), parsed.definition, 0);
    let pause = s.pause_index().expect("awsvpc has a pause container");
    for (i, c) in s.containers.iter_mut().enumerate() {
        c.docker_id = Some(format!("{i}{}", "a".repeat(63)));
        c.known = Status::Running;
    }
    let pause_details = ContainerDetails {
        networks: vec![NetworkAttachment {
            network: "bridge".into(),
            ipv4_addresses: vec!["172.17.0.9".into()],
        }],
        ..ContainerDetails::default()
    };
    let mut details: Vec<Option<&ContainerDetails>> = vec![None; s.containers.len()];
    details[pause] = Some(&pause_details);
    let v = serde_json::to_value(json::task_response(&s, &details, &identity())).expect("json");
    let containers = v["Containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1, "the pause container is hidden: {v}");
    assert_eq!(containers[0]["Name"], "web");
    assert_eq!(
        containers[0]["Networks"],
        json!([{"NetworkMode": "awsvpc", "IPv4Addresses": ["172.17.0.9"]}])
    );
    assert_eq!(
        containers[0]["Ports"],
        json!([{"ContainerPort": 8080, "Protocol": "tcp", "HostPort": 8080}])
    );
}

/// A raw GET: (status, the content type, the body).
async fn get_raw(addr: std::net::SocketAddr, method: &str, path: &str) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).await.expect("read");
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let ctype = head
        .lines()
        .find_map(|l| {
            l.split_once(':')
                .filter(|(k, _)| k.eq_ignore_ascii_case("content-type"))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_default();
    (status, ctype, body.to_string())
}

async fn serve(rt: FakeRuntime) -> (IntrospectionServer, Arc<TaskDirectory>, Arc<FakeRuntime>) {
    let directory = Arc::new(TaskDirectory::new());
    let rt = Arc::new(rt);
    let server = IntrospectionServer::start(
        rt.clone(),
        directory.clone(),
        config(),
        "127.0.0.1:0".parse().expect("addr"),
    )
    .await;
    (server, directory, rt)
}

#[tokio::test]
async fn every_route_and_query_answers_as_ecs_does() {
    let (server, directory, _rt) = serve(FakeRuntime::new()).await;
    let addr = server.local_addr().expect("listening");
    let mut conn = Conn::open(addr).await;

    // No task yet: an empty list, not null.
    assert_eq!(
        conn.get_json("/v1/tasks").await,
        (200, json!({"Tasks": []}))
    );

    let a = hello_world();
    let mut b = task("other", 2, "bridge");
    b.created_at = a.created_at + 1;
    b.containers[0].docker_id = Some(format!("9581a6{}", "0".repeat(58)));
    b.containers[1].docker_id = Some(format!("ffff{}", "1".repeat(60)));
    b.containers[0].known = Status::Running;
    b.containers[1].known = Status::Running;
    let (_a_tx, a_rx) = watch::channel(a.clone());
    let (_b_tx, b_rx) = watch::channel(b.clone());
    directory.register(a_rx);
    directory.register(b_rx);
    let arn = |t: &TaskState| identity().task_arn(&t.id);

    let (status, v) = conn.get_json("/v1/metadata").await;
    assert_eq!(status, 200);
    assert_eq!(
        v,
        json!({"Cluster": "default",
               "ContainerInstanceArn": "arn:aws:ecs:us-west-2:012345678910:container-instance/default/fedcba9876543210fedcba9876543210",
               "Version": "berth - v0.1.0"})
    );

    // Every task, oldest first; the fake runtime does not know these ids, so no details.
    let (status, v) = conn.get_json("/v1/tasks").await;
    assert_eq!(status, 200);
    let arns: Vec<&str> = v["Tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .filter_map(|t| t["Arn"].as_str())
        .collect();
    assert_eq!(arns, [arn(&a), arn(&b)]);

    // A full id, a 12-character prefix (what `docker ps` shows) and a shorter one find the task.
    for key in [MYSQL_ID, &MYSQL_ID[..12], &MYSQL_ID[..7], "bf25"] {
        let (status, t) = conn.get_json(&format!("/v1/tasks?dockerid={key}")).await;
        assert_eq!(status, 200, "{key}: {t}");
        assert_eq!(t["Arn"], arn(&a), "{key}");
        assert_eq!(t["Containers"].as_array().map(Vec::len), Some(2));
    }
    let (status, t) = conn.get_json("/v1/tasks?dockerid=ffff").await;
    assert_eq!((status, t["Arn"].as_str()), (200, Some(arn(&b).as_str())));
    // More than 12 characters is taken as a whole id (ECS): a 13-character prefix finds nothing.
    let (status, t) = conn
        .get_json(&format!("/v1/tasks?dockerid={}", &MYSQL_ID[..13]))
        .await;
    assert_eq!(status, 404);
    assert_eq!(t["Arn"], "");
    assert_eq!(t["Containers"], serde_json::Value::Null);
    assert_eq!(
        t["Error"],
        format!("no task found with docker id {}", &MYSQL_ID[..13])
    );
    // A prefix of containers in two tasks is ambiguous: 400.
    let (status, t) = conn.get_json("/v1/tasks?dockerid=9581a6").await;
    assert_eq!(status, 400, "{t}");
    assert!(
        t["Error"]
            .as_str()
            .is_some_and(|e| e.contains("multiple tasks found with short docker id 9581a6")),
        "{t}"
    );
    // Present without a value: a prefix of every id (ECS's Go reads it the same way).
    assert_eq!(conn.get("/v1/tasks?dockerid").await.0, 400);
    let (status, t) = conn.get_json("/v1/tasks?dockerid=0123").await;
    assert_eq!(status, 404);
    assert_eq!(
        t["Error"],
        "no task found with a container whose docker id starts with 0123"
    );

    // By task ARN; an unknown ARN (or a bare task id) is 404.
    let (status, t) = conn
        .get_json(&format!("/v1/tasks?taskarn={}", arn(&b)))
        .await;
    assert_eq!((status, t["Family"].as_str()), (200, Some("other")));
    assert_eq!(t["Version"], "7");
    for key in [a.id.clone(), format!("{}0", arn(&a))] {
        let (status, t) = conn.get_json(&format!("/v1/tasks?taskarn={key}")).await;
        assert_eq!(status, 404, "{key}");
        assert_eq!(t["Error"], format!("no task found with arn {key}"));
    }
    // Both parameters: 400, ECS's empty task plus the reason.
    let (status, t) = conn
        .get_json(&format!(
            "/v1/tasks?dockerid={MYSQL_ID}&taskarn={}",
            arn(&a)
        ))
        .await;
    assert_eq!(status, 400);
    assert_eq!(
        t,
        json!({"Arn": "", "KnownStatus": "", "Family": "", "Version": "", "Containers": null,
               "Error": "request contains both dockerid and taskarn but expect at most one of these: ask for one"})
    );
    // Other parameters are ignored.
    assert_eq!(conn.get("/v1/tasks?verbose=1").await.0, 200);

    // The root lists the routes; another path is 404 with the same list; GET only.
    let commands = json!({"AvailableCommands": ["/v1/metadata", "/v1/tasks", "/license"]});
    assert_eq!(conn.get_json("/").await, (200, commands.clone()));
    assert_eq!(conn.get_json("/v1/task").await, (404, commands.clone()));
    assert_eq!(conn.get_json("/v2/metadata").await, (404, commands));
    let (status, ctype, body) = get_raw(addr, "GET", "/license").await;
    assert_eq!((status, ctype.as_str()), (200, "text/plain"));
    assert_eq!(body, "Apache License\nVersion 2.0\n");
    let (status, ctype, _) = get_raw(addr, "GET", "/v1/tasks").await;
    assert_eq!((status, ctype.as_str()), (200, "application/json"));
    assert_eq!(get_raw(addr, "POST", "/v1/tasks").await.0, 405);

    // A task cleaned up (unregistered) is gone from the list and from the lookups.
    assert!(directory.unregister(&a.id));
    let (_, v) = conn.get_json("/v1/tasks").await;
    assert_eq!(v["Tasks"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        conn.get(&format!("/v1/tasks?dockerid={MYSQL_ID}")).await.0,
        404
    );
    server.shutdown().await;
}

#[tokio::test]
async fn details_come_from_docker_and_the_ports_bound_while_running_stay_after_a_stop() {
    let rt = FakeRuntime::new();
    let mut t = task("live", 2, "bridge");
    for i in 0..t.containers.len() {
        let spec = berth_engine::spec::container_spec(&t, i, &[], None);
        rt.add_image(&spec.image);
        let id = rt.create(&spec).await.expect("create");
        rt.start(&id).await.expect("start");
        t.containers[i].docker_id = Some(id);
        t.containers[i].known = Status::Running;
    }
    let (server, directory, rt) = serve(rt).await;
    let addr = server.local_addr().expect("listening");
    let (tx, rx) = watch::channel(t.clone());
    directory.register(rx);
    let mut conn = Conn::open(addr).await;
    let (status, v) = conn.get_json("/v1/tasks").await;
    assert_eq!(status, 200);
    let c0 = &v["Tasks"][0]["Containers"][0];
    assert_eq!(
        c0["DockerId"],
        t.containers[0].docker_id.clone().unwrap_or_default()
    );
    assert!(
        c0["ImageID"]
            .as_str()
            .is_some_and(|i| i.starts_with("sha256:")),
        "{c0}"
    );
    assert_eq!(
        c0["Ports"],
        json!([{"ContainerPort": 8000, "Protocol": "tcp", "HostPort": 32768}]),
        "the host port Docker bound, not the definition's (none)"
    );

    // The container stops: Docker no longer reports its bindings, the API still shows them.
    let id0 = t.containers[0].docker_id.clone().unwrap_or_default();
    rt.stop(&id0, 1).await.expect("stop");
    assert!(
        rt.inspect_details(&id0)
            .await
            .expect("inspect")
            .ports
            .is_empty(),
        "a stopped container has no bindings in Docker"
    );
    let mut stopped = t.clone();
    stopped.containers[0].known = Status::Stopped;
    tx.send_replace(stopped);
    let (_, v) = conn
        .get_json(&format!("/v1/tasks?dockerid={}", &id0[..12]))
        .await;
    assert_eq!(
        v["Containers"][0]["Ports"],
        json!([{"ContainerPort": 8000, "Protocol": "tcp", "HostPort": 32768}])
    );
    server.shutdown().await;
}

#[tokio::test]
async fn an_address_in_use_is_retried_until_it_is_free() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr");
    let directory = Arc::new(TaskDirectory::new());
    let server =
        IntrospectionServer::start(Arc::new(FakeRuntime::new()), directory, config(), addr).await;
    assert_eq!(server.local_addr(), None, "the first bind failed");
    drop(taken);
    // The first retry is 1 s after the failure.
    let t = std::time::Instant::now();
    loop {
        if let Ok(s) = tokio::net::TcpStream::connect(addr).await {
            drop(s);
            let (status, _, body) = get_raw(addr, "GET", "/v1/metadata").await;
            assert_eq!(status, 200, "{body}");
            break;
        }
        assert!(
            t.elapsed() < std::time::Duration::from_secs(5),
            "not listening 5 s after the address was freed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    server.shutdown().await;
}

// `TaskResponse` is public for clients of the crate that render answers themselves.
#[test]
fn the_empty_task_is_ecs_zero_value() {
    let v = serde_json::to_value(TaskResponse::default()).expect("json");
    assert_eq!(
        v,
        json!({"Arn": "", "KnownStatus": "", "Family": "", "Version": "", "Containers": null})
    );
}

#[tokio::test]
async fn the_pause_containers_docker_id_finds_its_task_which_still_hides_it() {
    let def = json!({
        "family": "vpc", "revision": 2, "networkMode": "awsvpc",
        "containerDefinitions": [{"name": "web", "image": "nginx", "memory": 64}]
    });
    let parsed = berth_model::parse(&def.to_string()).expect("valid");
    let mut s = TaskState::new(TASK_ID.to_string(), parsed.definition, 0);
    let pause = s.pause_index().expect("a pause container");
    for (i, c) in s.containers.iter_mut().enumerate() {
        c.docker_id = Some(format!("{i}{}", "b".repeat(63)));
        c.known = Status::Running;
    }
    let pause_id = s.containers[pause].docker_id.clone().unwrap_or_default();
    let (server, directory, _rt) = serve(FakeRuntime::new()).await;
    let (_tx, rx) = watch::channel(s.clone());
    directory.register(rx);
    let mut conn = Conn::open(server.local_addr().expect("listening")).await;
    for key in [pause_id.as_str(), &pause_id[..12]] {
        let (status, t) = conn.get_json(&format!("/v1/tasks?dockerid={key}")).await;
        assert_eq!(status, 200, "{key}: {t}");
        assert_eq!(t["Arn"], identity().task_arn(TASK_ID));
        let names: Vec<&str> = t["Containers"]
            .as_array()
            .expect("containers")
            .iter()
            .filter_map(|c| c["Name"].as_str())
            .collect();
        assert_eq!(names, ["web"], "the pause container is not listed");
        // No address known (the fake runtime has no such container): the mode alone.
        assert_eq!(
            t["Containers"][0]["Networks"],
            json!([{"NetworkMode": "awsvpc"}])
        );
    }
    server.shutdown().await;
}
