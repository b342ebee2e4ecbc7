//! The state store opens files written by older berths (schemas 1 and 2, hand-written here with
//! redb directly, as those versions wrote them) and refuses newer ones; tracked images round-trip.

use berth_engine::image_use::ImageRecords;
use berth_engine::{PullRecord, TaskState};
use berth_store::{Store, TaskRecord, db::DB_FILE, db::SCHEMA_VERSION};
use redb::{Database, TableDefinition};

const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const TASKS: TableDefinition<&str, &[u8]> = TableDefinition::new("tasks");
const IMAGES: TableDefinition<&str, &[u8]> = TableDefinition::new("images");

fn task() -> TaskState {
    let def = berth_model::parse(
        r#"{"family": "old", "containerDefinitions": [{"name": "a", "image": "busybox"}]}"#,
    )
    .expect("valid")
    .definition;
    TaskState::new("0123456789abcdef0123456789abcdef".into(), def, 7)
}

fn write_v1(dir: &std::path::Path, version: u64) -> TaskState {
    let state = task();
    let db = Database::create(dir.join(DB_FILE)).expect("create");
    let txn = db.begin_write().expect("txn");
    {
        let mut meta = txn.open_table(META).expect("meta");
        meta.insert("schema_version", version).expect("insert");
        let mut tasks = txn.open_table(TASKS).expect("tasks");
        // Version 1 stored the bare task state.
        let bytes = serde_json::to_vec(&state).expect("json");
        tasks
            .insert(state.id.as_str(), bytes.as_slice())
            .expect("insert");
    }
    txn.commit().expect("commit");
    state
}

#[test]
fn schema_1_is_migrated_with_its_tasks_and_pulled_images() {
    let dir = tempfile::tempdir().expect("tmp");
    let state = write_v1(dir.path(), 1);
    std::fs::write(
        dir.path().join("pulled-images.json"),
        r#"{"version": 1, "images": {"registry.local/app:1": {"pulledAt": 42}}}"#,
    )
    .expect("legacy record");

    let store = Store::open(dir.path()).expect("open migrates");
    assert_eq!(store.schema_version().expect("version"), SCHEMA_VERSION);
    let tasks = store.tasks().expect("tasks");
    assert_eq!(
        tasks,
        vec![TaskRecord {
            state: state.clone(),
            cleanup: Default::default()
        }]
    );
    assert!(
        store.pulled_before("registry.local/app:1"),
        "images imported"
    );
    assert!(
        !dir.path().join("pulled-images.json").exists(),
        "legacy file set aside"
    );
    drop(store);
    // Opening again changes nothing.
    let again = Store::open(dir.path()).expect("reopen");
    assert_eq!(again.tasks().expect("tasks").len(), 1);
    assert!(again.pulled_before("registry.local/app:1"));
}

#[test]
fn a_newer_schema_is_refused_with_a_clear_message() {
    let dir = tempfile::tempdir().expect("tmp");
    write_v1(dir.path(), SCHEMA_VERSION + 1);
    let err = Store::open(dir.path()).err().expect("refused");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("schema version {}", SCHEMA_VERSION + 1))
            && msg.contains("upgrade berth"),
        "{msg}"
    );
}

#[test]
fn tasks_round_trip_and_delete() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = Store::open(dir.path()).expect("open");
    let rec = TaskRecord {
        state: task(),
        cleanup: Default::default(),
    };
    store.save_task(&rec).expect("save");
    assert_eq!(
        store.get_task(&rec.state.id).expect("get"),
        Some(rec.clone())
    );
    store.delete_task(&rec.state.id).expect("delete");
    assert_eq!(store.get_task(&rec.state.id).expect("get"), None);
}

/// Schema 2: tasks as `TaskRecord`, pulled images in `images` (reference → `{"pulledAt": ms}`).
fn write_v2(dir: &std::path::Path) -> TaskState {
    let state = task();
    let db = Database::create(dir.join(DB_FILE)).expect("create");
    let txn = db.begin_write().expect("txn");
    {
        let mut meta = txn.open_table(META).expect("meta");
        meta.insert("schema_version", 2u64).expect("insert");
        let mut tasks = txn.open_table(TASKS).expect("tasks");
        let rec = TaskRecord {
            state: state.clone(),
            cleanup: Default::default(),
        };
        let bytes = serde_json::to_vec(&rec).expect("json");
        tasks
            .insert(state.id.as_str(), bytes.as_slice())
            .expect("insert");
        let mut images = txn.open_table(IMAGES).expect("images");
        images
            .insert("registry.local/app:1", br#"{"pulledAt": 42}"#.as_slice())
            .expect("insert");
        images
            .insert("busybox", br#"{"pulledAt": 7}"#.as_slice())
            .expect("insert");
    }
    txn.commit().expect("commit");
    state
}

#[test]
fn schema_2_pulled_images_become_tracked_images() {
    let dir = tempfile::tempdir().expect("tmp");
    let state = write_v2(dir.path());
    let store = Store::open(dir.path()).expect("open migrates");
    assert_eq!(store.schema_version().expect("version"), SCHEMA_VERSION);
    assert_eq!(store.tasks().expect("tasks")[0].state, state);
    let tracked = store.tracked_images().expect("tracked");
    let app = &tracked["registry.local/app:1"];
    assert_eq!(
        (app.first_pulled, app.last_pulled, app.last_used),
        (Some(42), Some(42), 42)
    );
    assert!(
        tracked.contains_key("busybox:latest"),
        "keys in Docker's normal form: {tracked:?}"
    );
    assert!(store.pulled_before("registry.local/app:1"));
    assert!(store.pulled_before("docker.io/library/busybox:latest"));
    drop(store);
    let again = Store::open(dir.path()).expect("reopen");
    assert_eq!(again.tracked_images().expect("tracked").len(), 2);
}

#[test]
fn tracked_images_record_use_identity_and_are_forgotten() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = Store::open(dir.path()).expect("open");
    store.used("app:1", "t1", 100).expect("used");
    assert!(
        !store.pulled_before("app:1"),
        "used from the cache, never pulled"
    );
    store.record_pull("app:1").expect("pulled");
    assert!(store.pulled_before("app:1"));
    store.used("app:1", "t2", 200).expect("used");
    store
        .identify("app:1", "sha256:abc", 1234)
        .expect("identify");
    let t = store.tracked().expect("tracked");
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].reference, "app:1");
    assert_eq!(t[0].tasks, ["t1", "t2"]);
    assert_eq!(
        (t[0].image_id.as_deref(), t[0].size),
        (Some("sha256:abc"), Some(1234))
    );
    assert!(t[0].last_used >= 200 && t[0].first_pulled.is_some());
    store.forget("app:1").expect("forget");
    assert!(store.tracked().expect("tracked").is_empty());
    assert!(
        !store.pulled_before("app:1"),
        "a removed image is pulled again by once"
    );
}

const TRACKED: TableDefinition<&str, &[u8]> = TableDefinition::new("tracked_images");

/// Schema 3: tracked images keyed in the normal form of their day, before image references were
/// read by one parser: `library/busybox:latest` (now `busybox:latest`), a tag kept beside a
/// digest (now the digest only); keys whose form did not change (`library/a/b:latest`,
/// `registry.local/app:2`). A record under today's key of busybox sits beside the old one, as a
/// berth of schema 3 running after the parser changed wrote it.
fn write_v3(dir: &std::path::Path) -> TaskState {
    let state = task();
    let db = Database::create(dir.join(DB_FILE)).expect("create");
    let txn = db.begin_write().expect("txn");
    {
        let mut meta = txn.open_table(META).expect("meta");
        meta.insert("schema_version", 3u64).expect("insert");
        let mut tasks = txn.open_table(TASKS).expect("tasks");
        let rec = TaskRecord {
            state: state.clone(),
            cleanup: Default::default(),
        };
        let bytes = serde_json::to_vec(&rec).expect("json");
        tasks
            .insert(state.id.as_str(), bytes.as_slice())
            .expect("insert");
        let mut tracked = txn.open_table(TRACKED).expect("tracked");
        for (key, value) in [
            (
                "library/busybox:latest",
                r#"{"imageId": "sha256:old", "size": 10, "firstPulled": 100, "lastPulled": 300, "lastUsed": 400, "tasks": ["t1", "t2"]}"#,
            ),
            (
                "busybox:latest",
                r#"{"imageId": "sha256:new", "size": 20, "firstPulled": 200, "lastPulled": 500, "lastUsed": 600, "tasks": ["t2", "t3"]}"#,
            ),
            ("library/a/b:latest", r#"{"lastUsed": 7, "tasks": ["t4"]}"#),
            (
                "registry.local/app:1@sha256:0123456789abcdef",
                r#"{"firstPulled": 5, "lastPulled": 5, "lastUsed": 5}"#,
            ),
            ("registry.local/app:2", r#"{"lastUsed": 9}"#),
        ] {
            tracked.insert(key, value.as_bytes()).expect("insert");
        }
    }
    txn.commit().expect("commit");
    state
}

#[test]
fn schema_3_tracked_images_are_rekeyed_in_todays_normal_form_and_merged() {
    let dir = tempfile::tempdir().expect("tmp");
    let state = write_v3(dir.path());
    let store = Store::open(dir.path()).expect("open migrates");
    assert_eq!(store.schema_version().expect("version"), SCHEMA_VERSION);
    assert_eq!(store.tasks().expect("tasks")[0].state, state);
    let tracked = store.tracked_images().expect("tracked");
    let keys: Vec<&str> = tracked.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "busybox:latest",
            "library/a/b:latest",
            "registry.local/app:2",
            "registry.local/app@sha256:0123456789abcdef",
        ],
        "one record per image, each under today's key"
    );
    let busybox = &tracked["busybox:latest"];
    assert_eq!(busybox.first_pulled, Some(100), "the earliest first pull");
    assert_eq!(busybox.last_pulled, Some(500), "the latest last pull");
    assert_eq!(busybox.last_used, 600, "the latest last use");
    assert_eq!(busybox.tasks, ["t1", "t2", "t3"], "the tasks of both");
    assert_eq!(
        (busybox.image_id.as_deref(), busybox.size),
        (Some("sha256:new"), Some(20)),
        "id and size of the most recent"
    );
    assert_eq!(tracked["library/a/b:latest"].tasks, ["t4"]);
    assert!(store.pulled_before("registry.local/app:1@sha256:0123456789abcdef"));
    assert!(store.pulled_before("docker.io/library/busybox"));
    drop(store);
    let again = Store::open(dir.path()).expect("reopen");
    assert_eq!(again.tracked_images().expect("tracked"), tracked);
}
