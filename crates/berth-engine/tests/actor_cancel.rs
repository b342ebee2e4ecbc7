//! Cancelling a task actor (`RunConfig::cancel`, what the agent does on SIGTERM): it stops acting,
//! waits for its effects in flight (bounded by `RunConfig::shutdown_grace`) and returns, leaving
//! the containers running; no runtime call is made after `run_task` has returned.

mod common;

use berth_engine::fake::FakeRuntime;
use berth_engine::runtime::{ProgressSink, RegistryAuth};
use berth_engine::spec::{ContainerSpec, LABEL_CONTAINER, VolumeSpec};
use berth_engine::{
    Command, ContainerInfo, RunConfig, Runtime, RuntimeError, RuntimeEvent, Status, TaskState,
    run_task,
};
use common::*;
use futures_util::stream::BoxStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

/// The fake runtime, with every call recorded when it begins and when it ends, and the `create`
/// of one container slowed down (or never answering).
#[derive(Clone)]
struct Slow {
    inner: FakeRuntime,
    calls: Arc<Mutex<Vec<String>>>,
    /// The definition name whose create is slow, and how slow (None: never answers).
    slow_create: (String, Option<Duration>),
}

impl Slow {
    fn new(container: &str, delay: Option<Duration>) -> Self {
        let inner = FakeRuntime::new();
        inner.add_image("img");
        Slow {
            inner,
            calls: Arc::default(),
            slow_create: (container.to_string(), delay),
        }
    }

    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    async fn record<T>(&self, call: String, f: impl Future<Output = T>) -> T {
        self.calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(call.clone());
        let out = f.await;
        self.calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(format!("done {call}"));
        out
    }
}

impl Runtime for Slow {
    async fn image_present(&self, image: &str) -> Result<bool, RuntimeError> {
        self.record(
            format!("image_present {image}"),
            self.inner.image_present(image),
        )
        .await
    }
    async fn pull(
        &self,
        image: &str,
        auth: Option<&RegistryAuth>,
        progress: Option<ProgressSink>,
    ) -> Result<(), RuntimeError> {
        self.record(
            format!("pull {image}"),
            self.inner.pull(image, auth, progress),
        )
        .await
    }
    async fn import_image(
        &self,
        image: &str,
        rootfs: Vec<u8>,
        changes: Vec<String>,
    ) -> Result<(), RuntimeError> {
        self.record(
            format!("import_image {image}"),
            self.inner.import_image(image, rootfs, changes),
        )
        .await
    }
    async fn create(&self, spec: &ContainerSpec) -> Result<String, RuntimeError> {
        let slow = spec.labels.get(LABEL_CONTAINER) == Some(&self.slow_create.0);
        let delay = self.slow_create.1;
        self.record(format!("create {}", spec.name), async {
            if slow {
                match delay {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending::<()>().await,
                }
            }
            self.inner.create(spec).await
        })
        .await
    }
    async fn start(&self, id: &str) -> Result<(), RuntimeError> {
        self.record(format!("start {id}"), self.inner.start(id))
            .await
    }
    async fn stop(&self, id: &str, timeout_secs: u32) -> Result<(), RuntimeError> {
        self.record(format!("stop {id}"), self.inner.stop(id, timeout_secs))
            .await
    }
    async fn kill(&self, id: &str) -> Result<(), RuntimeError> {
        self.record(format!("kill {id}"), self.inner.kill(id)).await
    }
    async fn inspect(&self, id: &str) -> Result<ContainerInfo, RuntimeError> {
        self.record(format!("inspect {id}"), self.inner.inspect(id))
            .await
    }
    async fn remove(&self, id: &str) -> Result<(), RuntimeError> {
        self.record(format!("remove {id}"), self.inner.remove(id))
            .await
    }
    async fn ensure_volume(&self, spec: &VolumeSpec) -> Result<bool, RuntimeError> {
        self.record(
            format!("ensure_volume {}", spec.name),
            self.inner.ensure_volume(spec),
        )
        .await
    }
    async fn volume_exists(&self, name: &str) -> Result<bool, RuntimeError> {
        self.record(
            format!("volume_exists {name}"),
            self.inner.volume_exists(name),
        )
        .await
    }
    async fn remove_volume(&self, name: &str) -> Result<(), RuntimeError> {
        self.record(
            format!("remove_volume {name}"),
            self.inner.remove_volume(name),
        )
        .await
    }
    async fn events(
        &self,
        task_id: &str,
    ) -> Result<BoxStream<'static, RuntimeEvent>, RuntimeError> {
        self.record(format!("events {task_id}"), self.inner.events(task_id))
            .await
    }
    async fn inspect_details(
        &self,
        id: &str,
    ) -> Result<berth_engine::ContainerDetails, RuntimeError> {
        self.record(
            format!("inspect_details {id}"),
            self.inner.inspect_details(id),
        )
        .await
    }
    async fn stats(&self, id: &str) -> Result<serde_json::Value, RuntimeError> {
        self.record(format!("stats {id}"), self.inner.stats(id))
            .await
    }
    async fn inspect_network(&self, name: &str) -> Result<berth_engine::NetworkInfo, RuntimeError> {
        self.record(
            format!("inspect_network {name}"),
            self.inner.inspect_network(name),
        )
        .await
    }
    async fn list_images(&self) -> Result<Vec<berth_engine::runtime::ImageSummary>, RuntimeError> {
        self.record("list_images".into(), self.inner.list_images())
            .await
    }
    async fn list_containers(
        &self,
    ) -> Result<Vec<berth_engine::runtime::ContainerSummary>, RuntimeError> {
        self.record("list_containers".into(), self.inner.list_containers())
            .await
    }
    async fn remove_image(&self, image: &str) -> Result<bool, RuntimeError> {
        self.record(
            format!("remove_image {image}"),
            self.inner.remove_image(image),
        )
        .await
    }
}

/// Run the task `a` (runs until stopped) + `b` (its create is slow); cancel as soon as `a` is
/// RUNNING, while `b`'s create is in flight. Returns the final state, how long `run_task` took
/// after the cancellation, and the calls recorded by then.
async fn cancel_while_b_is_created(
    rt: &Slow,
    grace: Duration,
) -> (TaskState, Duration, Vec<String>) {
    let s = state(vec![container("a"), container("b")]);
    let (rtx, _rrx) = mpsc::unbounded_channel();
    let (_ctx, crx) = mpsc::channel::<Command>(1);
    let (stx, mut srx) = watch::channel(s.clone());
    let cancel = CancellationToken::new();
    let config = RunConfig {
        cancel: cancel.clone(),
        shutdown_grace: grace,
        ..RunConfig::new(std::env::temp_dir().join("berth-engine-cancel-tests"))
    };
    let actor = tokio::spawn(run_task(Arc::new(rt.clone()), s, config, rtx, crx, stx));
    tokio::time::timeout(
        Duration::from_secs(10),
        srx.wait_for(|s| s.containers[0].known == Status::Running),
    )
    .await
    .expect("a runs in time")
    .expect("snapshots");
    assert!(
        rt.calls()
            .iter()
            .any(|c| c.starts_with("create berth-fam-1-b")),
        "b's create is in flight: {:?}",
        rt.calls()
    );
    let cancelled_at = Instant::now();
    cancel.cancel();
    let done = tokio::time::timeout(Duration::from_secs(10), actor)
        .await
        .expect("run_task returns after cancellation")
        .expect("actor");
    let took = cancelled_at.elapsed();
    (done, took, rt.calls())
}

/// After `run_task` returned: wait longer than any slow call, and check nothing was called since.
async fn assert_no_call_after(rt: &Slow, at_return: &[String]) {
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        rt.calls(),
        at_return,
        "runtime calls after run_task returned"
    );
}

#[tokio::test]
async fn cancel_waits_for_effects_in_flight_and_leaves_containers_running() {
    let rt = Slow::new("b", Some(Duration::from_millis(300)));
    let (done, took, calls) = cancel_while_b_is_created(&rt, Duration::from_secs(5)).await;
    assert!(
        took < Duration::from_secs(5),
        "returned within the grace: {took:?}"
    );

    // The create in flight was waited for, and its answer is in the returned state.
    assert!(
        calls
            .iter()
            .any(|c| c.starts_with("done create berth-fam-1-b")),
        "{calls:?}"
    );
    let b = &done.containers[1];
    assert!(b.docker_id.is_some(), "{b:?}");
    assert_eq!(b.known, Status::Created);
    assert_eq!(b.in_flight, None);
    // Nothing more was decided or done: b was not started, nothing was stopped or removed.
    for verb in ["start fake", "stop ", "kill ", "remove "] {
        let n = calls.iter().filter(|c| c.starts_with(verb)).count();
        let expected = usize::from(verb == "start fake"); // a's start only
        assert_eq!(n, expected, "{verb:?} in {calls:?}");
    }
    assert_ne!(done.known(), Status::Stopped);
    assert!(!done.is_finished());
    assert_no_call_after(&rt, &calls).await;

    // a is still running in the runtime.
    let a = done.containers[0].docker_id.clone().expect("a created");
    assert!(rt.inner.inspect(&a).await.expect("a exists").running);
}

#[tokio::test]
async fn cancel_abandons_effects_still_in_flight_after_the_grace() {
    let rt = Slow::new("b", None);
    let grace = Duration::from_millis(200);
    let (done, took, calls) = cancel_while_b_is_created(&rt, grace).await;
    assert!(took >= grace, "waited the grace: {took:?}");
    assert!(took < Duration::from_secs(3), "then returned: {took:?}");
    assert!(
        !calls
            .iter()
            .any(|c| c.starts_with("done create berth-fam-1-b")),
        "{calls:?}"
    );
    // The abandoned create stays marked in flight: a restarted agent's adoption looks for it by name.
    assert!(done.containers[1].in_flight.is_some());
    assert_eq!(done.containers[1].docker_id, None);
    assert!(
        !calls
            .iter()
            .any(|c| c.starts_with("stop ") || c.starts_with("remove "))
    );
    assert_no_call_after(&rt, &calls).await;
}

#[tokio::test]
async fn an_actor_cancelled_before_it_starts_calls_nothing() {
    let rt = Slow::new("b", None);
    let s = state(vec![container("a")]);
    let (rtx, _rrx) = mpsc::unbounded_channel();
    let (_ctx, crx) = mpsc::channel::<Command>(1);
    let (stx, _srx) = watch::channel(s.clone());
    let config = RunConfig::new(std::env::temp_dir().join("berth-engine-cancel-tests"));
    config.cancel.cancel();
    let done = tokio::time::timeout(
        Duration::from_secs(5),
        run_task(Arc::new(rt.clone()), s.clone(), config, rtx, crx, stx),
    )
    .await
    .expect("returns at once");
    assert_eq!(done, s);
    assert_no_call_after(&rt, &[]).await;
}

#[tokio::test]
async fn a_task_that_ends_by_itself_still_finishes() {
    let rt = Slow::new("b", Some(Duration::from_millis(50)));
    rt.inner.script(
        "a",
        berth_engine::fake::Script {
            exit_code: Some(0),
            ..Default::default()
        },
    );
    let s = state(vec![container("a")]);
    let (rtx, _rrx) = mpsc::unbounded_channel();
    let (_ctx, crx) = mpsc::channel::<Command>(1);
    let (stx, _srx) = watch::channel(s.clone());
    let config = RunConfig::new(std::env::temp_dir().join("berth-engine-cancel-tests"));
    let done = tokio::time::timeout(
        Duration::from_secs(5),
        run_task(Arc::new(rt.clone()), s, config, rtx, crx, stx),
    )
    .await
    .expect("task ends");
    assert!(done.is_finished());
    let calls = rt.calls();
    assert_no_call_after(&rt, &calls).await;
}
