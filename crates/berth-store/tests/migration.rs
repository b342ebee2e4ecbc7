//! The state store opens files written by older berths (schema 1, hand-written here with redb
//! directly, as that version wrote them) and refuses newer ones.

use berth_engine::{PullRecord, TaskState};
use berth_store::{Store, TaskRecord, db::DB_FILE, db::SCHEMA_VERSION};
use redb::{Database, TableDefinition};

const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const TASKS: TableDefinition<&str, &[u8]> = TableDefinition::new("tasks");

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
        msg.contains("schema version 3") && msg.contains("upgrade berth"),
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
