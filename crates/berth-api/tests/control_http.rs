//! The control API over a real Unix socket, against a fake [`ControlPlane`]: every route's answer,
//! the (command, phase) rule on the wire, and JSON bodies for every refusal, the limits included.

use berth_api::control::{
    self, Accepted, ControlError, ControlPlane, ErrorBody, Health, Phase, SubmitResponse,
    Submitted, TaskView,
};
use berth_engine::{Status, TaskState};
use berth_model::TaskDefinition;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::broadcast;

/// Tasks in memory; records the commands it is given.
struct Fake {
    tasks: Mutex<BTreeMap<String, TaskState>>,
    calls: Mutex<Vec<String>>,
    events: broadcast::Sender<String>,
    next: Mutex<u32>,
    degraded: Mutex<Option<control::Degraded>>,
}

impl Fake {
    fn new() -> Arc<Fake> {
        Arc::new(Fake {
            tasks: Mutex::new(BTreeMap::new()),
            calls: Mutex::new(Vec::new()),
            events: broadcast::channel(16).0,
            next: Mutex::new(0),
            degraded: Mutex::new(None),
        })
    }

    fn calls(&self) -> Vec<String> {
        self.calls.lock().expect("lock").clone()
    }

    fn set(&self, id: &str, f: impl FnOnce(&mut TaskState)) {
        let mut tasks = self.tasks.lock().expect("lock");
        f(tasks.get_mut(id).expect("task"));
    }
}

impl ControlPlane for Fake {
    async fn submit(
        &self,
        definition: TaskDefinition,
        _client_token: Option<String>,
    ) -> Result<Submitted, ControlError> {
        if let Some(d) = self.degraded.lock().expect("lock").clone() {
            return Err(ControlError::Degraded { reason: d.reason });
        }
        let mut n = self.next.lock().expect("lock");
        *n += 1;
        // abcdef12345601000…, abcdef12345602000…: ids that share their first 12 characters, as
        // real ids can.
        let id = format!("abcdef123456{:02x}{:018x}", *n, 0);
        let state = TaskState::new(id.clone(), definition, 0);
        self.tasks.lock().expect("lock").insert(id.clone(), state);
        Ok(Submitted {
            task: id,
            warnings: vec![],
        })
    }

    async fn list(&self) -> Result<Vec<TaskView>, ControlError> {
        Ok(self
            .tasks
            .lock()
            .expect("lock")
            .values()
            .map(|s| TaskView::new(s, None))
            .collect())
    }

    async fn get(&self, id: &str) -> Result<Option<TaskView>, ControlError> {
        if id == "broken" {
            return Err(ControlError::Store {
                message: "disk on fire".into(),
            });
        }
        Ok(self
            .tasks
            .lock()
            .expect("lock")
            .get(id)
            .map(|s| TaskView::new(s, None)))
    }

    fn phase(&self, id: &str) -> Option<Phase> {
        self.tasks
            .lock()
            .expect("lock")
            .get(id)
            .map(|s| Phase::of(s.known(), s.desired))
    }

    async fn stop(&self, id: &str, reason: &str) -> Result<(), ControlError> {
        self.calls
            .lock()
            .expect("lock")
            .push(format!("stop {id} {reason}"));
        self.set(id, |s| {
            s.request_stop(reason, berth_engine::StopKind::Requested)
        });
        Ok(())
    }

    fn clean_up_now(&self, id: &str) -> Result<(), ControlError> {
        self.calls.lock().expect("lock").push(format!("clean {id}"));
        Ok(())
    }

    fn events(&self) -> broadcast::Receiver<String> {
        self.events.subscribe()
    }

    fn task_count(&self) -> usize {
        self.tasks.lock().expect("lock").len()
    }

    async fn images(&self) -> Result<control::ImagesView, ControlError> {
        Ok(control::ImagesView::default())
    }

    async fn prune(&self, dry_run: bool) -> Result<control::PruneResponse, ControlError> {
        self.calls
            .lock()
            .expect("lock")
            .push(format!("prune dry_run={dry_run}"));
        Ok(control::PruneResponse {
            dry_run,
            ..Default::default()
        })
    }

    fn degraded(&self) -> Option<control::Degraded> {
        self.degraded.lock().expect("lock").clone()
    }
}

struct Server {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    fake: Arc<Fake>,
}

async fn start() -> Server {
    let dir = tempfile::tempdir().expect("tmp");
    let socket = dir.path().join("run").join("api.sock");
    let listener = control::bind(&socket).await.expect("bind").0;
    let fake = Fake::new();
    tokio::spawn(control::serve(listener, fake.clone()));
    Server {
        _dir: dir,
        socket,
        fake,
    }
}

struct Answer {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl Answer {
    fn json<T: serde::de::DeserializeOwned>(&self) -> T {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "{} is not the expected JSON ({e}): {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    fn error(&self) -> ErrorBody {
        assert!(
            self.head
                .to_ascii_lowercase()
                .contains("content-type: application/json"),
            "{}",
            self.head
        );
        self.json()
    }
}

/// One raw HTTP/1.1 request (`Connection: close`), the whole answer.
async fn raw(socket: &Path, head: &str, body: &[u8]) -> Answer {
    let mut s = tokio::net::UnixStream::connect(socket)
        .await
        .expect("connect");
    s.write_all(head.as_bytes()).await.expect("write head");
    // The server may answer (413) and close before it has read all of an oversized body.
    let _ = s.write_all(body).await;
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.expect("read");
    let split = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no head: {}", String::from_utf8_lossy(&out)));
    let head = String::from_utf8_lossy(&out[..split]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    Answer {
        status,
        head,
        body: out[split + 4..].to_vec(),
    }
}

async fn call(socket: &Path, method: &str, path: &str, body: &[u8]) -> Answer {
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: berth\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    raw(socket, &head, body).await
}

const DEF: &str =
    r#"{"family": "web", "containerDefinitions": [{"name": "a", "image": "busybox"}]}"#;

#[tokio::test]
async fn the_routes_answer_the_shared_types() {
    let srv = start().await;
    let s = &srv.socket;
    let a = call(s, "POST", "/v1/tasks", DEF.as_bytes()).await;
    assert_eq!(a.status, 201);
    let sub: SubmitResponse = a.json();
    let a = call(s, "GET", "/v1/tasks", b"").await;
    assert_eq!(a.status, 200);
    let tasks: Vec<TaskView> = a.json();
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0].task, sub.task);
    assert_eq!(tasks[0].known, Status::None);
    let a = call(s, "GET", "/v1/tasks?status=stopped", b"").await;
    assert!(a.json::<Vec<TaskView>>().is_empty());
    let a = call(s, "GET", "/v1/tasks?family=web&status=NONE", b"").await;
    assert_eq!(a.json::<Vec<TaskView>>().len(), 1);
    let a = call(s, "GET", &format!("/v1/tasks/{}", sub.task), b"").await;
    assert_eq!(a.status, 200);
    assert_eq!(a.json::<TaskView>().family, "web");
    let a = call(s, "GET", "/v1/health", b"").await;
    assert_eq!(a.json::<Health>(), Health::ok(1));
    let a = call(s, "GET", "/v1/tasks/nope", b"").await;
    assert_eq!(a.status, 404);
    assert_eq!(a.error().error, "no task nope");
    let a = call(s, "GET", "/v1/tasks/broken", b"").await;
    assert_eq!(a.status, 500);
    assert_eq!(a.error().error, "state store: disk on fire");
}

#[tokio::test]
async fn the_image_routes_answer_and_read_dry_run() {
    let srv = start().await;
    let s = &srv.socket;
    let a = call(s, "GET", "/v1/images", b"").await;
    assert_eq!(a.status, 200);
    assert_eq!(
        a.json::<control::ImagesView>(),
        control::ImagesView::default()
    );
    let a = call(s, "POST", "/v1/images/prune?dryRun=true", b"").await;
    assert_eq!(a.status, 200);
    assert!(a.json::<control::PruneResponse>().dry_run);
    let a = call(s, "POST", "/v1/images/prune", b"").await;
    assert!(!a.json::<control::PruneResponse>().dry_run);
    let a = call(s, "POST", "/v1/images/prune?dryRun=maybe", b"").await;
    assert_eq!(a.status, 400);
    assert!(a.error().error.contains("dryRun"), "{}", a.error().error);
    assert_eq!(
        srv.fake.calls.lock().expect("lock").clone(),
        ["prune dry_run=true", "prune dry_run=false"]
    );
    let a = call(s, "GET", "/v1/images/prune", b"").await;
    assert_eq!(a.status, 405);
}

#[tokio::test]
async fn an_invalid_definition_is_400_with_every_problem() {
    let srv = start().await;
    let bad = r#"{"family": "x", "containerDefinitions": [{"name": "a", "image": "i", "dependsOn": [{"containerName": "db", "condition": "START"}]}]}"#;
    let a = call(&srv.socket, "POST", "/v1/tasks", bad.as_bytes()).await;
    assert_eq!(a.status, 400);
    let e = a.error();
    assert_eq!(e.error, "invalid task definition");
    assert_eq!(
        e.problems,
        Some(vec![
            r#"containerDefinitions[0].dependsOn[0].containerName: no container named "db" (known: a)"#
                .to_string()
        ])
    );
}

#[tokio::test]
async fn stop_and_remove_follow_the_command_and_phase_rule() {
    let srv = start().await;
    let s = &srv.socket;
    let id = call(s, "POST", "/v1/tasks", DEF.as_bytes())
        .await
        .json::<SubmitResponse>()
        .task;
    // Active: stop is taken.
    let a = call(s, "POST", &format!("/v1/tasks/{id}/stop"), b"").await;
    assert_eq!(a.status, 202);
    assert_eq!(a.json::<Accepted>(), Accepted { task: id.clone() });
    // Stopping: taken again (the actor keeps the first reason).
    let a = call(s, "POST", &format!("/v1/tasks/{id}/stop"), b"").await;
    assert_eq!(a.status, 202);
    // Stopped: refused, and nothing is sent.
    srv.fake.set(&id, |t| {
        t.containers
            .iter_mut()
            .for_each(|c| c.known = Status::Stopped)
    });
    let a = call(s, "POST", &format!("/v1/tasks/{id}/stop"), b"").await;
    assert_eq!(a.status, 409);
    assert_eq!(a.error().error, format!("task {id} is already stopped"));
    // Removing a stopped task cleans it up at once, without a stop.
    let a = call(s, "DELETE", &format!("/v1/tasks/{id}"), b"").await;
    assert_eq!(a.status, 202);
    assert_eq!(a.json::<Accepted>().task, id);
    assert_eq!(
        srv.fake.calls(),
        [
            format!("stop {id} stopped through the API"),
            format!("stop {id} stopped through the API"),
            format!("clean {id}"),
        ]
    );
    // Removing an active task stops it, then cleans up.
    let id2 = call(s, "POST", "/v1/tasks", DEF.as_bytes())
        .await
        .json::<SubmitResponse>()
        .task;
    let a = call(s, "DELETE", &format!("/v1/tasks/{id2}"), b"").await;
    assert_eq!(a.status, 202);
    assert_eq!(
        srv.fake.calls()[3..],
        [
            format!("stop {id2} removed through the API"),
            format!("clean {id2}"),
        ]
    );
    for (m, p) in [
        ("POST", "/v1/tasks/nope/stop"),
        ("DELETE", "/v1/tasks/nope"),
    ] {
        let a = call(s, m, p, b"").await;
        assert_eq!(a.status, 404, "{m} {p}");
        assert_eq!(a.error().error, "no task nope");
    }
}

#[tokio::test]
async fn every_refusal_is_json_unknown_routes_wrong_methods_and_limits() {
    let srv = start().await;
    let s = &srv.socket;
    let a = call(s, "GET", "/v2/nothing", b"").await;
    assert_eq!(a.status, 404);
    assert!(a.error().error.contains("/v2/nothing"));
    let a = call(s, "PUT", "/v1/tasks", b"").await;
    assert_eq!(a.status, 405);
    assert_eq!(a.error().error, "PUT is not allowed on /v1/tasks");
    assert!(a.head.to_ascii_lowercase().contains("allow:"), "{}", a.head);
    let a = call(s, "GET", "/v1/tasks/x/stop", b"").await;
    assert_eq!(a.status, 405);
    let big = vec![b' '; control::router::MAX_BODY + 1];
    let a = call(s, "POST", "/v1/tasks", &big).await;
    assert_eq!(a.status, 413);
    assert!(a.error().error.contains("larger than"));
    let long = format!("/v1/tasks?family={}", "f".repeat(control::router::MAX_URI));
    let a = call(s, "GET", &long, b"").await;
    assert_eq!(a.status, 414);
    assert!(a.error().error.contains("URI is longer"));
    let huge = format!(
        "GET /v1/health HTTP/1.1\r\nHost: berth\r\nConnection: close\r\nX-Big: {}\r\n\r\n",
        "v".repeat(control::router::MAX_HEADER_BYTES)
    );
    let a = raw(s, &huge, b"").await;
    assert_eq!(a.status, 431);
    assert!(a.error().error.contains("headers exceed"));
    let many: String = (0..=control::router::MAX_HEADERS)
        .map(|i| format!("X-H{i}: v\r\n"))
        .collect();
    let a = raw(
        s,
        &format!("GET /v1/health HTTP/1.1\r\nHost: berth\r\nConnection: close\r\n{many}\r\n"),
        b"",
    )
    .await;
    assert_eq!(a.status, 431);
    a.error();
    let a = call(s, "GET", "/v1/tasks?status=a&status=b", b"").await;
    assert_eq!(a.status, 400);
    assert!(a.error().error.starts_with("bad request"));
}

#[tokio::test]
async fn events_are_newline_delimited_json_and_a_second_agent_cannot_take_the_socket() {
    let srv = start().await;
    let mut s = tokio::net::UnixStream::connect(&srv.socket)
        .await
        .expect("connect");
    s.write_all(b"GET /v1/events HTTP/1.1\r\nHost: berth\r\n\r\n")
        .await
        .expect("write");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    // Send until the subscription exists and a line arrives.
    while !String::from_utf8_lossy(&got).contains("{\"event\":\"task\"}\n") {
        let _ = srv.fake.events.send(r#"{"event":"task"}"#.into());
        if let Ok(Ok(n)) =
            tokio::time::timeout(std::time::Duration::from_millis(50), s.read(&mut buf)).await
        {
            assert!(n > 0, "stream closed");
            got.extend_from_slice(&buf[..n]);
        }
    }
    let text = String::from_utf8_lossy(&got);
    assert!(text.contains("application/x-ndjson"), "{text}");
    match control::bind(&srv.socket).await {
        Err(control::BindError::Claim(berth_fs::socket::SocketError::InUse { .. })) => {}
        other => panic!("{other:?}"),
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&srv.socket)
        .expect("socket")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

/// A degraded agent (its store cannot be written): health answers 503 with the reason and the
/// held tasks, a submit answers 503 with the reason, and both are back to normal afterwards.
#[tokio::test]
async fn a_degraded_agent_says_why_in_health_and_refuses_submits_with_503() {
    let srv = start().await;
    let s = &srv.socket;
    let reason = "the state store cannot be written: No space left on device (os error 28)";
    *srv.fake.degraded.lock().expect("lock") = Some(control::Degraded {
        reason: reason.into(),
        held_tasks: vec!["t1".into()],
    });
    let a = call(s, "GET", "/v1/health", b"").await;
    assert_eq!(a.status, 503);
    let body: serde_json::Value = a.json();
    assert_eq!(body["status"], "degraded");
    assert_eq!(body["reason"], reason);
    assert_eq!(body["heldTasks"], serde_json::json!(["t1"]));
    let a = call(s, "POST", "/v1/tasks", DEF.as_bytes()).await;
    assert_eq!(a.status, 503);
    assert_eq!(a.error().error, format!("the agent is degraded: {reason}"));

    *srv.fake.degraded.lock().expect("lock") = None;
    let a = call(s, "GET", "/v1/health", b"").await;
    assert_eq!(a.status, 200);
    assert_eq!(a.json::<Health>(), Health::ok(0));
    let a = call(s, "POST", "/v1/tasks", DEF.as_bytes()).await;
    assert_eq!(a.status, 201);
}

#[tokio::test]
async fn a_unique_id_prefix_names_its_task_and_an_ambiguous_one_lists_the_matches() {
    let srv = start().await;
    let s = &srv.socket;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let a = call(s, "POST", "/v1/tasks", DEF.as_bytes()).await;
        ids.push(a.json::<SubmitResponse>().task);
    }
    // abcdef12345601… and abcdef12345602…: 14 characters name one, 12 both.
    let one = &ids[0][..14];
    let a = call(s, "GET", &format!("/v1/tasks/{one}"), b"").await;
    assert_eq!(a.status, 200);
    assert_eq!(a.json::<TaskView>().task, ids[0]);
    let a = call(s, "POST", &format!("/v1/tasks/{}/stop", &ids[1][..14]), b"").await;
    assert_eq!(a.status, 202);
    assert_eq!(a.json::<Accepted>().task, ids[1]);
    assert!(
        srv.fake
            .calls()
            .contains(&format!("stop {} stopped through the API", ids[1])),
        "{:?}",
        srv.fake.calls()
    );
    let twelve = &ids[0][..12];
    for (method, path) in [
        ("GET", format!("/v1/tasks/{twelve}")),
        ("POST", format!("/v1/tasks/{twelve}/stop")),
        ("DELETE", format!("/v1/tasks/{twelve}")),
    ] {
        let a = call(s, method, &path, b"").await;
        assert_eq!(a.status, 400, "{method} {path}");
        assert_eq!(
            a.error().error,
            format!(
                "task id prefix {twelve} matches 2 tasks: {}, {}; give more of the id",
                ids[0], ids[1]
            )
        );
    }
    let a = call(s, "DELETE", "/v1/tasks/ffff", b"").await;
    assert_eq!(a.status, 404);
    assert_eq!(a.error().error, "no task ffff");
}

/// `?tag=KEY=VALUE` (berth submit --tag) is laid over the definition's `tags`; a bad tag or an
/// unknown parameter is a 400 with the problem, and nothing is submitted.
#[tokio::test]
async fn submit_takes_task_tags_in_the_query() {
    let srv = start().await;
    let s = &srv.socket;
    let def = r#"{"family": "web", "tags": [{"key": "team", "value": "db"}, {"key": "env", "value": "prod"}],
        "containerDefinitions": [{"name": "a", "image": "busybox"}]}"#;
    let a = call(
        s,
        "POST",
        "/v1/tasks?tag=team%3Dweb&tag=cost%3D",
        def.as_bytes(),
    )
    .await;
    assert_eq!(a.status, 201);
    let id = a.json::<SubmitResponse>().task;
    let tags = srv
        .fake
        .tasks
        .lock()
        .expect("lock")
        .get(&id)
        .expect("submitted")
        .definition
        .tags
        .clone();
    assert_eq!(
        tags,
        vec![
            berth_model::Tag::new("team", "web"),
            berth_model::Tag::new("env", "prod"),
            berth_model::Tag::new("cost", ""),
        ]
    );
    for (query, problem) in [
        (
            "tag=aws%3Ax%3D1",
            "tag: tag key \"aws:x\": the aws: prefix is reserved",
        ),
        ("tag=novalue", "tag: \"novalue\" is not KEY=VALUE"),
        (
            "tags=a%3Db",
            "unknown query parameter \"tags\" (known: tag, clientToken)",
        ),
        ("clientToken=a%20b", "clientToken: ' ' is not allowed"),
        (
            "clientToken=a&clientToken=b",
            "clientToken: given more than once",
        ),
    ] {
        let a = call(s, "POST", &format!("/v1/tasks?{query}"), DEF.as_bytes()).await;
        assert_eq!(a.status, 400, "{query}");
        let problems = a.error().problems.unwrap_or_default();
        assert!(
            problems.iter().any(|p| p.starts_with(problem)),
            "{query}: {problems:?}"
        );
    }
    assert_eq!(srv.fake.tasks.lock().expect("lock").len(), 1);
}
