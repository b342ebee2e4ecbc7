//! The runtime contract: scenarios written once, generic over [`berth_engine::Runtime`], that the
//! fake runtime (`berth_engine::fake`) and the Docker runtime (`berth_docker::DockerRuntime`) must
//! both pass, so the fake cannot drift from the Engine.
//!
//! A test target supplies a [`Subject`] (a runtime plus how to make a container behave in it: the
//! fake is scripted, Docker runs a real command) and expands [`runtime_contract!`](crate::runtime_contract), which makes one
//! `#[tokio::test]` per scenario. The two targets are `berth-testkit`'s `tests/contract_fake.rs`
//! (no Docker) and `tests/contract_docker.rs` (the Engine, run through `scripts/test`).
//!
//! What the scenarios hold both runtimes to: create, start, stop, kill, remove and inspect of a
//! container; remove is idempotent (and takes a name); stop of a stopped or never-started
//! container succeeds; exit codes (the program's own, 143 for a program that ends on SIGTERM, 137
//! for SIGKILL, also when a stop's grace period runs out); `start`/`die`/`health`/`destroy` events
//! arrive on the stream of the task whose `berth.task` label the container carries, and only there;
//! missing objects are [`RuntimeError::NotFound`], a taken name and removing a volume in use are
//! [`RuntimeError::Conflict`], each naming its object (the container, the create's missing image,
//! the volume, the image); health status in events and in `inspect`; volumes created once,
//! checked and removed (idempotently); images present or not, pulled when the registry has them,
//! a permanent [`RuntimeError::PullFailed`] when it does not; an OOM kill (137) is `oom_killed`
//! in `inspect` and an ordinary 137 exit is not; an image imported from a root filesystem tar is
//! present and runs, and importing it again is fine; a container that exited starts again in place
//! (same id, new `start` and `die` events);
//! image cleanup's calls (images and containers
//! listed, an image a container uses is not removed, a removed one is gone, removing it again is
//! not found).
//!
//! Limits: listing containers by label is not part of the [`berth_engine::Runtime`] trait (only
//! `DockerRuntime::list_managed` has it), so the contract checks label filtering through the event
//! streams only. The metadata-only calls (`inspect_details`, `stats`, `inspect_network`) are not
//! covered: the fake makes their values up. Scenarios panic on failure (they are tests), and leave
//! cleanup of what they created to the [`Subject`] (the Docker one, when dropped, removes the
//! containers carrying its label and the images it pushed or imported under its unique names,
//! and after a failure the volumes too).

use std::collections::BTreeMap;
use std::time::Duration;

use berth_engine::spec::{
    ContainerSpec, HealthSpec, LABEL_CONTAINER, LABEL_TASK, MountKind, MountSpec, VolumeSpec,
};
use berth_engine::{Health, Object, Runtime, RuntimeError, RuntimeEvent};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;

/// How long a scenario waits for an event or a status it expects.
pub const WAIT: Duration = Duration::from_secs(60);

/// How a container behaves once started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// Runs until stopped, and ends on SIGTERM the way most programs do (exit code 143).
    RunsUntilStopped,
    /// Runs until stopped and ignores SIGTERM: a stop kills it after the grace period (137).
    IgnoresSigterm,
    /// Exits by itself with this code right after starting.
    Exits(i64),
    /// Runs until stopped, with a health check that succeeds.
    Healthy,
    /// Runs until stopped, with a health check that fails.
    Unhealthy,
    /// Allocates memory until the kernel's OOM killer ends it (exit code 137, `oom_killed`);
    /// its spec has a 16 MiB memory limit and no swap.
    OutOfMemory,
}

impl Behaviour {
    /// The shell command that behaves so in a real container (the fake ignores commands).
    pub fn command(self) -> Vec<String> {
        let script = match self {
            Behaviour::RunsUntilStopped | Behaviour::Healthy | Behaviour::Unhealthy => {
                "trap 'exit 143' TERM; while :; do sleep 0.1; done".to_owned()
            }
            Behaviour::IgnoresSigterm => "trap '' TERM; while :; do sleep 0.1; done".to_owned(),
            Behaviour::Exits(code) => format!("exit {code}"),
            // `tail` keeps the last line in memory and /dev/zero has no newline.
            Behaviour::OutOfMemory => "exec tail /dev/zero".to_owned(),
        };
        vec!["sh".to_owned(), "-c".to_owned(), script]
    }

    /// The health check of this behaviour, if it has one.
    pub fn health(self) -> Option<HealthSpec> {
        let test = match self {
            Behaviour::Healthy => "true",
            Behaviour::Unhealthy => "false",
            _ => return None,
        };
        Some(HealthSpec {
            test: vec!["CMD-SHELL".to_owned(), test.to_owned()],
            interval_ns: 500_000_000,
            timeout_ns: 5_000_000_000,
            retries: 1,
            start_period_ns: 0,
        })
    }
}

/// A runtime under test, and what the scenarios need to know about it.
pub trait Subject {
    type Runtime: Runtime;

    fn runtime(&self) -> &Self::Runtime;

    /// An image that is present locally.
    fn image(&self) -> String;

    /// Makes containers of definition name `container` behave as `behaviour` (the fake is
    /// scripted here; a real engine runs [`Behaviour::command`] and needs nothing).
    fn prepare(&self, container: &str, behaviour: Behaviour);

    /// An image reference that is neither present locally nor in any registry.
    fn missing_image(&self) -> String;

    /// An image reference that is not present locally but can be pulled.
    fn pullable_image(&self) -> String;

    /// Labels to put on everything a scenario creates (e.g. so the subject can clean up).
    fn labels(&self) -> BTreeMap<String, String>;

    /// A `repository:tag` no image has, unique to this call, for a scenario to import (the
    /// subject removes what was imported under it, and images carrying its [`Subject::labels`],
    /// when dropped).
    fn importable_image(&self) -> String;
}

/// A name no other scenario uses, for containers and volumes.
pub fn unique(prefix: &str) -> String {
    crate::unique_name(&format!("berth-contract-{prefix}-"))
}

/// The spec of a container of definition `def` in task `task`, behaving as `behaviour`.
pub fn spec<S: Subject>(subject: &S, task: &str, def: &str, behaviour: Behaviour) -> ContainerSpec {
    subject.prepare(def, behaviour);
    let mut labels = subject.labels();
    labels.insert(LABEL_TASK.to_owned(), task.to_owned());
    labels.insert(LABEL_CONTAINER.to_owned(), def.to_owned());
    ContainerSpec {
        name: unique(def),
        image: subject.image(),
        cmd: Some(behaviour.command()),
        entrypoint: None,
        env: Vec::new(),
        labels,
        working_dir: None,
        user: None,
        hostname: None,
        mounts: Vec::new(),
        volumes_from: Vec::new(),
        links: Vec::new(),
        ports: Vec::new(),
        network_mode: "none".to_owned(),
        cpu_shares: None,
        memory_bytes: (behaviour == Behaviour::OutOfMemory).then_some(OOM_LIMIT),
        memory_reservation_bytes: None,
        readonly_rootfs: false,
        privileged: false,
        ulimits: Vec::new(),
        log_driver: None,
        log_options: BTreeMap::new(),
        health: behaviour.health(),
        stop_timeout_secs: None,
        linux: berth_engine::spec::LinuxSpec {
            // No swap: the limit is reached at once.
            memory_swap_bytes: (behaviour == Behaviour::OutOfMemory).then_some(OOM_LIMIT),
            ..Default::default()
        },
        dns: Vec::new(),
        dns_search: Vec::new(),
        extra_hosts: Vec::new(),
        sysctls: BTreeMap::new(),
        security_opt: Vec::new(),
        open_stdin: false,
        tty: false,
        network_disabled: false,
        pid_mode: None,
        ipc_mode: None,
        gpu_count: None,
    }
}

fn volume_spec<S: Subject>(subject: &S) -> VolumeSpec {
    VolumeSpec {
        name: unique("vol"),
        driver: "local".to_owned(),
        driver_opts: BTreeMap::new(),
        labels: subject.labels(),
    }
}

type Events = BoxStream<'static, RuntimeEvent>;

fn id_of(event: &RuntimeEvent) -> &str {
    match event {
        RuntimeEvent::Start { id, .. }
        | RuntimeEvent::Die { id, .. }
        | RuntimeEvent::Health { id, .. }
        | RuntimeEvent::Destroy { id, .. } => id,
    }
}

/// Waits for the `die` event of container `id` (`what`) and checks its exit code.
pub async fn expect_die(events: &mut Events, id: &str, exit_code: i64, what: &str) {
    let die = expect_event(
        events,
        what,
        |e| matches!(e, RuntimeEvent::Die { id: i, .. } if i == id),
    )
    .await;
    assert!(
        matches!(die, RuntimeEvent::Die { exit_code: Some(c), .. } if c == exit_code),
        "{what}: {die:?}"
    );
}

/// Waits for the first event that satisfies `wanted`, skipping others; panics after [`WAIT`].
pub async fn expect_event(
    events: &mut Events,
    what: &str,
    wanted: impl Fn(&RuntimeEvent) -> bool,
) -> RuntimeEvent {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match tokio::time::timeout_at(deadline, events.next()).await {
            Ok(Some(event)) if wanted(&event) => return event,
            Ok(Some(event)) => seen.push(event),
            Ok(None) => panic!("the event stream ended while waiting for {what}; saw {seen:?}"),
            Err(_) => panic!("no {what} within {} s; saw {seen:?}", WAIT.as_secs()),
        }
    }
}

async fn subscribe<R: Runtime>(rt: &R, task: &str) -> Events {
    rt.events(task)
        .await
        .unwrap_or_else(|e| panic!("subscribe to the events of task {task}: {e}"))
}

async fn create<R: Runtime>(rt: &R, spec: &ContainerSpec) -> String {
    rt.create(spec)
        .await
        .unwrap_or_else(|e| panic!("create {}: {e}", spec.name))
}

async fn start<R: Runtime>(rt: &R, id: &str) {
    rt.start(id)
        .await
        .unwrap_or_else(|e| panic!("start {id}: {e}"));
}

async fn inspect<R: Runtime>(rt: &R, id: &str) -> berth_engine::ContainerInfo {
    rt.inspect(id)
        .await
        .unwrap_or_else(|e| panic!("inspect {id}: {e}"))
}

/// Waits until `inspect` no longer shows the container running (a kill returns before the death).
async fn until_exited<R: Runtime>(rt: &R, id: &str) -> berth_engine::ContainerInfo {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let info = inspect(rt, id).await;
        if !info.running {
            return info;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{id} still running after {} s",
            WAIT.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `result` is the error `kind` ("not found" or "conflict") about `object`.
fn assert_kind(
    result: Result<impl std::fmt::Debug, RuntimeError>,
    kind: &str,
    object: &Object,
    what: &str,
) {
    let ok = match &result {
        Err(RuntimeError::NotFound { object: o, .. }) => kind == "not found" && o == object,
        Err(RuntimeError::Conflict { object: o, .. }) => kind == "conflict" && o == object,
        _ => false,
    };
    assert!(
        ok,
        "{what}: expected a {kind} error about {object}, got {result:?}"
    );
}

/// Create, inspect, start, inspect, stop, inspect, remove: the life of one container.
pub async fn container_lifecycle<S: Subject>(subject: &S) {
    let rt = subject.runtime();
    let task = berth_engine::new_task_id();
    let spec = spec(subject, &task, "app", Behaviour::RunsUntilStopped);
    let id = create(rt, &spec).await;
    assert!(!id.is_empty(), "create returns an id");

    let info = inspect(rt, &id).await;
    assert_eq!(info.id, id);
    assert_eq!(info.name, spec.name);
    assert!(!info.running, "created, not started: {info:?}");
    assert_eq!(info.exit_code, None, "never ran: {info:?}");
    assert_eq!(info.started_at, None, "never ran: {info:?}");
    assert_eq!(info.finished_at, None, "never ran: {info:?}");
    for (key, value) in &spec.labels {
        assert_eq!(info.labels.get(key), Some(value), "label {key}: {info:?}");
    }

    start(rt, &id).await;
    let info = inspect(rt, &id).await;
    assert!(info.running, "started: {info:?}");
    assert!(info.started_at.is_some(), "started: {info:?}");
    assert_eq!(info.exit_code, None, "running: {info:?}");
    assert_eq!(info.health, None, "no health check: {info:?}");

    rt.stop(&id, 10)
        .await
        .unwrap_or_else(|e| panic!("stop {id}: {e}"));
    let info = inspect(rt, &id).await;
    assert!(!info.running, "stopped: {info:?}");
    assert_eq!(info.exit_code, Some(143), "ended on SIGTERM: {info:?}");
    assert!(info.finished_at.is_some(), "stopped: {info:?}");
    assert!(info.started_at.is_some(), "it ran: {info:?}");

    rt.remove(&id)
        .await
        .unwrap_or_else(|e| panic!("remove {id}: {e}"));
    assert_kind(
        rt.inspect(&id).await,
        "not found",
        &Object::Container(id.clone()),
        "inspect after remove",
    );
}

/// A container's own exit code, in the `die` event and in `inspect`.
pub async fn exit_codes<S: Subject>(subject: &S) {
    let rt = subject.runtime();
    let task = berth_engine::new_task_id();
    let mut events = subscribe(rt, &task).await;
    for (def, code) in [("zero", 0), ("three", 3)] {
        let id = create(rt, &spec(subject, &task, def, Behaviour::Exits(code))).await;
        start(rt, &id).await;
        expect_die(&mut events, &id, code, def).await;
        let info = until_exited(rt, &id).await;
        assert_eq!(info.exit_code, Some(code), "{def}: {info:?}");
        assert!(info.finished_at.is_some(), "{def}: {info:?}");
        rt.remove(&id)
            .await
            .unwrap_or_else(|e| panic!("remove: {e}"));
    }
}

/// A container that exited starts again in place (what a restart policy does): the same id, a
/// `start` and a `die` event again, a start time not before the first exit, the new exit code in
/// `inspect`.
pub async fn restart_in_place<S: Subject>(subject: &S) {
    let rt = subject.runtime();
    let task = berth_engine::new_task_id();
    let mut events = subscribe(rt, &task).await;
    let id = create(rt, &spec(subject, &task, "again", Behaviour::Exits(3))).await;
    start(rt, &id).await;
    expect_die(&mut events, &id, 3, "the first exit").await;
    let first = until_exited(rt, &id).await;
    let first_exit = first.finished_at.expect("a finish time after the exit");
    start(rt, &id).await;
    expect_event(
        &mut events,
        "the start event of the restart",
        |e| matches!(e, RuntimeEvent::Start { id: i, .. } if *i == id),
    )
    .await;
    expect_die(&mut events, &id, 3, "the exit after the restart").await;
    let again = until_exited(rt, &id).await;
    assert_eq!(again.id, id, "the same container: {again:?}");
    assert_eq!(again.exit_code, Some(3), "{again:?}");
    let started = again.started_at.expect("a start time after the restart");
    assert!(
        started >= first_exit,
        "restarted after the first exit: {first:?} then {again:?}"
    );
    rt.remove(&id)
        .await
        .unwrap_or_else(|e| panic!("remove: {e}"));
}

/// The memory limit of an [`Behaviour::OutOfMemory`] container: 16 MiB.
const OOM_LIMIT: i64 = 16 << 20;

/// A container the kernel's OOM killer ends: `die` with 137, and `inspect` says `oom_killed`
/// (what the engine turns into ECS's `OutOfMemoryError` reason); an ordinary exit does not.
pub async fn oom_kill_is_reported<S: Subject>(subject: &S) {
    let rt = subject.runtime();
    let task = berth_engine::new_task_id();
    let mut events = subscribe(rt, &task).await;
    let id = create(rt, &spec(subject, &task, "hog", Behaviour::OutOfMemory)).await;
    start(rt, &id).await;
    expect_die(&mut events, &id, 137, "hog").await;
    let info = until_exited(rt, &id).await;
    assert!(info.oom_killed, "{info:?}");
    assert_eq!(
        info.exit_reason().as_deref(),
        Some(berth_engine::runtime::OOM_REASON)
    );
    let plain = create(rt, &spec(subject, &task, "plain", Behaviour::Exits(137))).await;
    start(rt, &plain).await;
    expect_die(&mut events, &plain, 137, "plain").await;
    let info = until_exited(rt, &plain).await;
    assert!(!info.oom_killed, "{info:?}");
    assert_eq!(info.exit_reason(), None);
    for id in [id, plain] {
        rt.remove(&id)
            .await
            .unwrap_or_else(|e| panic!("remove: {e}"));
    }
}

/// Stop of a never-started and of an exited container succeeds and changes nothing.
pub async fn stop_of_a_stopped_container_succeeds<S: Subject>(subject: &S) {
    let rt = subject.runtime();
    let task = berth_engine::new_task_id();
    let created = create(
        rt,
        &spec(subject, &task, "created", Behaviour::RunsUntilStopped),
    )
    .await;
    rt.stop(&created, 1)
        .await
        .unwrap_or_else(|e| panic!("stop of a never-started container: {e}"));
    let info = inspect(rt, &created).await;
    assert!(!info.running && info.exit_code.is_none(), "{info:?}");

    let mut events = subscribe(rt, &task).await;
    let exited = create(rt, &spec(subject, &task, "exited", Behaviour::Exits(3))).await;
    start(rt, &exited).await;
    expect_event(
        &mut events,
        "die",
        |e| matches!(e, RuntimeEvent::Die { id, .. } if *id == exited),
    )
    .await;
    until_exited(rt, &exited).await;
    for _ in 0..2 {
        rt.stop(&exited, 1)
            .await
            .unwrap_or_else(|e| panic!("stop of an exited container: {e}"));
    }
    let info = inspect(rt, &exited).await;
    assert_eq!(
        info.exit_code,
        Some(3),
        "a stop keeps the exit code: {info:?}"
    );
    for id in [created, exited] {
        rt.remove(&id)
            .await
            .unwrap_or_else(|e| panic!("remove: {e}"));
    }
}

/// SIGKILL: exit code 137, also for a stop whose grace period runs out; kill of an exited
/// container succeeds.
pub async fn kill_and_stop_grace<S: Subject>(subject: &S) {
    let rt = subject.runtime();
    let task = berth_engine::new_task_id();
    let mut events = subscribe(rt, &task).await;

    let killed = create(
        rt,
        &spec(subject, &task, "killed", Behaviour::RunsUntilStopped),
    )
    .await;
    start(rt, &killed).await;
    rt.kill(&killed)
        .await
        .unwrap_or_else(|e| panic!("kill: {e}"));
    expect_die(&mut events, &killed, 137, "die of the killed container").await;
    let info = until_exited(rt, &killed).await;
    assert_eq!(info.exit_code, Some(137), "{info:?}");
    rt.kill(&killed)
        .await
        .unwrap_or_else(|e| panic!("kill of an exited container: {e}"));

    let stubborn = create(
        rt,
        &spec(subject, &task, "stubborn", Behaviour::IgnoresSigterm),
    )
    .await;
    start(rt, &stubborn).await;
    rt.stop(&stubborn, 1)
        .await
        .unwrap_or_else(|e| panic!("stop: {e}"));
    let info = inspect(rt, &stubborn).await;
    assert!(!info.running, "{info:?}");
    assert_eq!(
        info.exit_code,
        Some(137),
        "killed after the grace: {info:?}"
    );
    for id in [killed, stubborn] {
        rt.remove(&id)
            .await
            .unwrap_or_else(|e| panic!("remove: {e}"));
    }
}

/// Remove succeeds for a missing container, twice in a row, by name, and for a running container.
pub async fn remove_is_idempotent<S: Subject>(subject: &S) {
    let rt = subject.runtime();
    let task = berth_engine::new_task_id();
    let missing = unique("never-created");
    rt.remove(&missing)
        .await
        .unwrap_or_else(|e| panic!("remove of a missing container: {e}"));

    let spec = spec(subject, &task, "app", Behaviour::RunsUntilStopped);
    let id = create(rt, &spec).await;
    start(rt, &id).await;
    rt.remove(&spec.name)
        .await
        .unwrap_or_else(|e| panic!("remove of a running container by name: {e}"));
    assert_kind(
        rt.inspect(&id).await,
        "not found",
        &Object::Container(id.clone()),
        "inspect after remove",
    );
    rt.remove(&id)
        .await
        .unwrap_or_else(|e| panic!("second remove: {e}"));
}

/// A missing container is "not found" for start, stop, kill and inspect; a missing image is
/// "not found" for create; a taken name is a conflict. Inspect also takes a name.
pub async fn error_kinds<S: Subject>(subject: &S) {
    let rt = subject.runtime();
    let missing = unique("never-created");
    let container = Object::Container(missing.clone());
    assert_kind(rt.start(&missing).await, "not found", &container, "start");
    assert_kind(rt.stop(&missing, 1).await, "not found", &container, "stop");
    assert_kind(rt.kill(&missing).await, "not found", &container, "kill");
    assert_kind(
        rt.inspect(&missing).await,
        "not found",
        &container,
        "inspect",
    );

    let task = berth_engine::new_task_id();
    let mut no_image = spec(subject, &task, "noimage", Behaviour::RunsUntilStopped);
    no_image.image = subject.missing_image();
    assert_kind(
        rt.create(&no_image).await,
        "not found",
        &Object::Image(no_image.image.clone()),
        "create with a missing image",
    );

    let spec = spec(subject, &task, "app", Behaviour::RunsUntilStopped);
    let id = create(rt, &spec).await;
    assert_kind(
        rt.create(&spec).await,
        "conflict",
        &Object::Container(spec.name.clone()),
        "create with a taken name",
    );
    let by_name = inspect(rt, &spec.name).await;
    assert_eq!(by_name.id, id, "inspect by name");
    rt.remove(&id)
        .await
        .unwrap_or_else(|e| panic!("remove: {e}"));
}

/// Start, die and destroy events carry the container's id, arrive on its task's stream, and never
/// on another task's.
pub async fn events_follow_the_task_label<S: Subject>(subject: &S) {
    let rt = subject.runtime();
    let (task_a, task_b) = (berth_engine::new_task_id(), berth_engine::new_task_id());
    let mut a_events = subscribe(rt, &task_a).await;
    let mut b_events = subscribe(rt, &task_b).await;

    let a = create(
        rt,
        &spec(subject, &task_a, "a", Behaviour::RunsUntilStopped),
    )
    .await;
    start(rt, &a).await;
    expect_event(
        &mut a_events,
        "start of a",
        |e| matches!(e, RuntimeEvent::Start { id, .. } if *id == a),
    )
    .await;
    rt.stop(&a, 10)
        .await
        .unwrap_or_else(|e| panic!("stop: {e}"));
    expect_die(&mut a_events, &a, 143, "die of a").await;
    rt.remove(&a)
        .await
        .unwrap_or_else(|e| panic!("remove: {e}"));
    expect_event(
        &mut a_events,
        "destroy of a",
        |e| matches!(e, RuntimeEvent::Destroy { id, .. } if *id == a),
    )
    .await;

    // Task B's stream saw none of that: the first event on it is B's own.
    let b = create(rt, &spec(subject, &task_b, "b", Behaviour::Exits(0))).await;
    start(rt, &b).await;
    let first = tokio::time::timeout(WAIT, b_events.next())
        .await
        .unwrap_or_else(|_| panic!("no event for task b within {} s", WAIT.as_secs()));
    match first {
        Some(RuntimeEvent::Start { ref id, .. }) if *id == b => {}
        other => panic!("task b's first event should be b's start: {other:?}"),
    }
    expect_die(&mut b_events, &b, 0, "die of b").await;
    rt.remove(&b)
        .await
        .unwrap_or_else(|e| panic!("remove: {e}"));
    let destroy = expect_event(&mut b_events, "destroy of b", |e| {
        matches!(e, RuntimeEvent::Destroy { .. })
    })
    .await;
    assert_eq!(id_of(&destroy), b, "only b's events on b's stream");
}

/// Removing a running container forcibly: it dies (SIGKILL) before it is destroyed.
pub async fn remove_of_a_running_container_kills_it<S: Subject>(subject: &S) {
    let rt = subject.runtime();
    let task = berth_engine::new_task_id();
    let mut events = subscribe(rt, &task).await;
    let id = create(
        rt,
        &spec(subject, &task, "app", Behaviour::RunsUntilStopped),
    )
    .await;
    start(rt, &id).await;
    expect_event(
        &mut events,
        "start",
        |e| matches!(e, RuntimeEvent::Start { id: i, .. } if *i == id),
    )
    .await;
    // While the remove runs: once its `die` has arrived, an inspect already says the container is
    // being removed, or that it is gone (Docker marks the removal before it kills; the engine
    // relies on this to tell `docker rm -f` from an ordinary exit).
    let removing = async {
        let die = expect_event(&mut events, "die", |e| {
            matches!(e, RuntimeEvent::Die { id: i, .. } | RuntimeEvent::Destroy { id: i, .. } if *i == id)
        })
        .await;
        let seen = match rt.inspect(&id).await {
            Ok(info) => info.removing,
            Err(RuntimeError::NotFound { .. }) => true,
            Err(e) => panic!("inspect after die: {e}"),
        };
        (die, seen)
    };
    let (removed, (die, removing_seen)) = tokio::join!(rt.remove(&id), removing);
    removed.unwrap_or_else(|e| panic!("remove: {e}"));
    assert!(
        removing_seen,
        "after the die of a forced remove, inspect says removing or not found"
    );
    assert!(
        matches!(
            die,
            RuntimeEvent::Die {
                exit_code: Some(137),
                ..
            }
        ),
        "die (SIGKILL) comes before destroy: {die:?}"
    );
    expect_event(
        &mut events,
        "destroy",
        |e| matches!(e, RuntimeEvent::Destroy { id: i, .. } if *i == id),
    )
    .await;
}

/// Health check results: a `health` event with the status, and the status in `inspect`.
pub async fn health_status<S: Subject>(subject: &S) {
    let rt = subject.runtime();
    let task = berth_engine::new_task_id();
    let mut events = subscribe(rt, &task).await;
    for (def, behaviour, want) in [
        ("healthy", Behaviour::Healthy, Health::Healthy),
        ("unhealthy", Behaviour::Unhealthy, Health::Unhealthy),
    ] {
        let id = create(rt, &spec(subject, &task, def, behaviour)).await;
        start(rt, &id).await;
        expect_event(
            &mut events,
            &format!("health {want:?} of {def}"),
            |e| matches!(e, RuntimeEvent::Health { id: i, health } if *i == id && *health == want),
        )
        .await;
        let info = inspect(rt, &id).await;
        assert!(info.running, "{def}: {info:?}");
        assert_eq!(info.health, Some(want), "{def}: {info:?}");
        rt.remove(&id)
            .await
            .unwrap_or_else(|e| panic!("remove: {e}"));
    }
}

/// Volumes: created once, seen, not removable while a container uses them, removed
/// idempotently.
pub async fn volumes<S: Subject>(subject: &S) {
    let rt = subject.runtime();
    let volume = volume_spec(subject);
    let name = volume.name.clone();
    assert!(
        rt.ensure_volume(&volume)
            .await
            .unwrap_or_else(|e| panic!("create volume {name}: {e}")),
        "created now"
    );
    assert!(exists(rt, &name).await);
    assert!(
        !rt.ensure_volume(&volume)
            .await
            .unwrap_or_else(|e| panic!("ensure volume {name} again: {e}")),
        "already there"
    );

    let task = berth_engine::new_task_id();
    let mut user = spec(subject, &task, "user", Behaviour::RunsUntilStopped);
    user.mounts.push(MountSpec {
        kind: MountKind::Volume,
        source: name.clone(),
        target: "/data".to_owned(),
        read_only: false,
    });
    let id = create(rt, &user).await;
    assert_kind(
        rt.remove_volume(&name).await,
        "conflict",
        &Object::Volume(name.clone()),
        "remove of a volume a container uses",
    );
    assert!(exists(rt, &name).await, "still there");
    rt.remove(&id)
        .await
        .unwrap_or_else(|e| panic!("remove: {e}"));

    rt.remove_volume(&name)
        .await
        .unwrap_or_else(|e| panic!("remove volume {name}: {e}"));
    assert!(!exists(rt, &name).await, "removed");
    rt.remove_volume(&name)
        .await
        .unwrap_or_else(|e| panic!("remove of a missing volume: {e}"));
}

async fn exists<R: Runtime>(rt: &R, volume: &str) -> bool {
    rt.volume_exists(volume)
        .await
        .unwrap_or_else(|e| panic!("volume {volume} exists?: {e}"))
}

/// Images: present or not; a pull brings a pullable image and then it runs; pulling an image no
/// registry has is a permanent pull failure.
pub async fn images_and_pulls<S: Subject>(subject: &S) {
    let rt = subject.runtime();
    let present = |image: String| async move {
        rt.image_present(&image)
            .await
            .unwrap_or_else(|e| panic!("image {image} present?: {e}"))
    };
    assert!(present(subject.image()).await, "the test image is present");

    let missing = subject.missing_image();
    assert!(!present(missing.clone()).await);
    match rt.pull(&missing, None, None).await {
        Err(RuntimeError::PullFailed {
            image, retriable, ..
        }) => {
            assert_eq!(image, missing);
            assert!(
                !retriable,
                "no registry has {missing}: retrying cannot help"
            );
        }
        other => panic!("pull of {missing}: expected a pull failure, got {other:?}"),
    }
    assert!(!present(missing).await);

    let pullable = subject.pullable_image();
    assert!(
        !present(pullable.clone()).await,
        "not present before the pull"
    );
    rt.pull(&pullable, None, None)
        .await
        .unwrap_or_else(|e| panic!("pull {pullable}: {e}"));
    assert!(present(pullable.clone()).await, "present after the pull");

    let task = berth_engine::new_task_id();
    let mut events = subscribe(rt, &task).await;
    let mut spec = spec(subject, &task, "pulled", Behaviour::Exits(0));
    spec.image = pullable;
    let id = create(rt, &spec).await;
    start(rt, &id).await;
    expect_event(
        &mut events,
        "die of the pulled image's container",
        |e| matches!(e, RuntimeEvent::Die { id: i, exit_code: Some(0), .. } if *i == id),
    )
    .await;
    rt.remove(&id)
        .await
        .unwrap_or_else(|e| panic!("remove: {e}"));
}

/// Imports: an image that is absent is made from a root filesystem tar (berth's pause image's,
/// under a test-unique name) and is then present, and a container made from it with no command
/// of its own starts (the import's `CMD` is in the image); importing again under the same name
/// succeeds and the image stays present.
pub async fn import_image<S: Subject>(subject: &S) {
    let rt = subject.runtime();
    let rootfs = match berth_engine::pause_image::rootfs_tar() {
        Ok(tar) => tar,
        Err(e) => {
            // The only root filesystem at hand runs on x86_64; elsewhere there is nothing to run.
            eprintln!("import_image skipped: {e}");
            return;
        }
    };
    // The subject's labels go on the image too, so that it can find every image the scenario
    // made: the second import takes the name and leaves the first image untagged.
    let mut changes = berth_engine::pause_image::import_changes();
    changes.extend(
        subject
            .labels()
            .iter()
            .map(|(key, value)| format!("LABEL {key}={value}")),
    );
    let image = subject.importable_image();
    let present = || async {
        rt.image_present(&image)
            .await
            .unwrap_or_else(|e| panic!("image {image} present?: {e}"))
    };
    assert!(!present().await, "{image} absent before the import");
    rt.import_image(&image, rootfs.clone(), changes.clone())
        .await
        .unwrap_or_else(|e| panic!("import {image}: {e}"));
    assert!(present().await, "{image} present after the import");

    let task = berth_engine::new_task_id();
    let mut spec = spec(subject, &task, "imported", Behaviour::RunsUntilStopped);
    spec.image = image.clone();
    spec.cmd = None;
    let id = create(rt, &spec).await;
    start(rt, &id).await;
    assert!(
        inspect(rt, &id).await.running,
        "the imported image's command runs"
    );
    rt.remove(&id)
        .await
        .unwrap_or_else(|e| panic!("remove: {e}"));

    rt.import_image(&image, rootfs, changes)
        .await
        .unwrap_or_else(|e| panic!("import {image} again: {e}"));
    assert!(present().await, "{image} present after the second import");
}

/// Image cleanup's calls: an imported image is listed with its name, id and a size; a container
/// made from it (created, never started) is listed with that image id, and while it exists the
/// image cannot be removed (conflict, nothing removed); once the container is gone the image is
/// removed (the answer says it was deleted), is no longer present or listed, and removing it
/// again is not found.
pub async fn image_removal<S: Subject>(subject: &S) {
    let rt = subject.runtime();
    let rootfs = match berth_engine::pause_image::rootfs_tar() {
        Ok(tar) => tar,
        Err(e) => {
            eprintln!("image_removal skipped: {e}");
            return;
        }
    };
    let mut changes = berth_engine::pause_image::import_changes();
    changes.extend(
        subject
            .labels()
            .iter()
            .map(|(key, value)| format!("LABEL {key}={value}")),
    );
    let image = subject.importable_image();
    rt.import_image(&image, rootfs, changes)
        .await
        .unwrap_or_else(|e| panic!("import {image}: {e}"));
    let listed = rt
        .list_images()
        .await
        .unwrap_or_else(|e| panic!("list images: {e}"));
    let entry = listed
        .iter()
        .find(|i| i.repo_tags.contains(&image))
        .unwrap_or_else(|| panic!("{image} is listed: {listed:?}"))
        .clone();
    assert!(!entry.id.is_empty(), "a listed image has an id");
    assert!(entry.size > 0, "a listed image has a size: {entry:?}");

    let task = berth_engine::new_task_id();
    let mut spec = spec(subject, &task, "user", Behaviour::RunsUntilStopped);
    spec.image = image.clone();
    spec.cmd = None;
    let id = create(rt, &spec).await;
    let containers = rt
        .list_containers()
        .await
        .unwrap_or_else(|e| panic!("list containers: {e}"));
    let user = containers
        .iter()
        .find(|c| c.id == id)
        .unwrap_or_else(|| panic!("the created container {id} is listed (not running too)"));
    assert_eq!(user.image_id, entry.id, "listed with its image's id");
    assert!(!user.running);
    assert_kind(
        rt.remove_image(&image).await,
        "conflict",
        &Object::Image(image.clone()),
        "removing an image while a container uses it",
    );
    assert!(
        rt.image_present(&image).await.unwrap_or(false),
        "a refused removal removes nothing"
    );

    rt.remove(&id)
        .await
        .unwrap_or_else(|e| panic!("remove: {e}"));
    let deleted = rt
        .remove_image(&image)
        .await
        .unwrap_or_else(|e| panic!("remove image {image}: {e}"));
    assert!(deleted, "its only name gone, the image itself is deleted");
    assert!(!rt.image_present(&image).await.unwrap_or(true));
    let listed = rt
        .list_images()
        .await
        .unwrap_or_else(|e| panic!("list images: {e}"));
    assert!(
        !listed.iter().any(|i| i.id == entry.id),
        "a removed image is no longer listed"
    );
    assert_kind(
        rt.remove_image(&image).await,
        "not found",
        &Object::Image(image.clone()),
        "removing an image again",
    );
}

/// One `#[tokio::test]` per contract scenario, each on the subject `$subject` (an expression,
/// evaluated anew for every test, whose value is a [`Subject`]).
#[macro_export]
macro_rules! runtime_contract {
    ($subject:expr) => {
        $crate::runtime_contract!(@each $subject;
            container_lifecycle,
            exit_codes,
            stop_of_a_stopped_container_succeeds,
            kill_and_stop_grace,
            remove_is_idempotent,
            error_kinds,
            events_follow_the_task_label,
            remove_of_a_running_container_kills_it,
            health_status,
            volumes,
            images_and_pulls,
            oom_kill_is_reported,
            import_image,
            restart_in_place,
            image_removal,
        );
    };
    (@each $subject:expr; $($scenario:ident,)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() {
                let subject = $subject;
                let limit = 3 * $crate::contract::WAIT;
                if tokio::time::timeout(limit, $crate::contract::$scenario(&subject))
                    .await
                    .is_err()
                {
                    panic!("{} did not finish within {} s", stringify!($scenario), limit.as_secs());
                }
            }
        )*
    };
}
