//! A state store damaged in the middle (random bytes over part of a page of `berth.redb`) makes
//! redb panic rather than return an error ("entered unreachable code", an index out of range).
//! `berth agent` on such a file must refuse it by name, as it refuses every other damaged store:
//! not exit 101 with a panic that names no file.
//!
//! The damage is found, not guessed: a valid store is written, then copies of it are damaged with
//! a fixed-seed pattern at fixed offsets until one makes redb fail while reading the tasks back
//! (a panic caught here, or berth-store's damaged-file error), so the test keeps reproducing the
//! panic when the file's layout changes. Needs a Docker Engine (the agent connects to it before
//! it reads its tasks); without one the agent's error says which Engine it could not reach.

use berth_engine::TaskState;
use berth_store::{Store, StoreError, TaskRecord};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn task(i: usize) -> TaskState {
    let doc = format!(
        r#"{{"family": "damaged", "containerDefinitions": [{{"name": "a", "image": "busybox", "command": ["sleep", "{i}"]}}]}}"#
    );
    let def = berth_model::parse(&doc).expect("valid").definition;
    TaskState::new(format!("{i:032x}"), def, 1)
}

/// `bytes` with 256 bytes of a xorshift pattern seeded `seed` written over the middle.
fn damaged(bytes: &[u8], seed: u64) -> Vec<u8> {
    let mut b = bytes.to_vec();
    let mut x = seed;
    let off = b.len() / 2 - 4096 + usize::try_from(seed * 97).expect("small") % 8192;
    for k in 0..256 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if let Some(byte) = b.get_mut(off + k) {
            *byte = x.to_le_bytes()[0];
        }
    }
    b
}

/// Whether redb fails on the store in `dir` by panicking (caught here before the fix, berth-store's
/// [`StoreError::Damaged`] after it).
fn redb_panics(dir: &Path) -> bool {
    let opened = std::panic::catch_unwind(|| Store::open(dir).and_then(|s| s.tasks()));
    matches!(opened, Err(_) | Ok(Err(StoreError::Damaged { .. })))
}

/// A data directory whose `berth.redb` makes redb panic.
fn damaged_store(root: &Path) -> std::path::PathBuf {
    let good = root.join("good");
    {
        let store = Store::open(&good).expect("open");
        for i in 0..20 {
            let rec = TaskRecord {
                state: task(i),
                cleanup: Default::default(),
            };
            store.save_task(&rec).expect("save");
        }
    }
    let bytes = std::fs::read(good.join("berth.redb")).expect("read the store");
    // The panics redb prints while the search runs are expected.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let found = (1..2000u64).find_map(|seed| {
        let dir = root.join(format!("seed-{seed}"));
        std::fs::create_dir(&dir).expect("dir");
        std::fs::write(dir.join("berth.redb"), damaged(&bytes, seed)).expect("write");
        if redb_panics(&dir) {
            Some(dir)
        } else {
            let _ = std::fs::remove_dir_all(&dir);
            None
        }
    });
    std::panic::set_hook(hook);
    found.expect("no seed in 1..2000 makes redb panic on the damaged store")
}

#[test]
fn an_agent_on_a_store_that_makes_redb_panic_refuses_it_by_name() {
    let root = tempfile::tempdir().expect("tmp");
    let data = damaged_store(root.path());
    let file = data.join("berth.redb");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_berth"))
        .arg("agent")
        .arg("--data-dir")
        .arg(&data)
        .arg("--api-socket")
        .arg(root.path().join("api.sock"))
        .args(["--metadata-addr", &format!("127.0.0.1:{port}")])
        .args(["--introspection-addr", "off"])
        .env("BERTH_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(root.path().join("agent.log")).expect("log"))
        .spawn()
        .expect("berth agent starts");
    let t = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if t.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the agent runs on a damaged store: {}",
                std::fs::read_to_string(root.path().join("agent.log")).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let err = std::fs::read_to_string(root.path().join("agent.log")).expect("log");
    assert_ne!(status.code(), Some(101), "the agent panicked: {err}");
    assert!(!status.success(), "{err}");
    let file = file.display().to_string();
    assert!(
        err.contains(&format!("state store {file} is damaged")),
        "the error names the file and says it is damaged: {err}"
    );
    assert!(
        err.contains("move the file aside"),
        "says how to fix: {err}"
    );
}
