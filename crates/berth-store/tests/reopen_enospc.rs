//! A real ENOSPC under the store: a small tmpfs as the data directory, filled up while tasks are
//! saved. The failed commit is not acknowledged, the store says it is degraded, every later save
//! fails while the disk is full (redb's "previous I/O error"), and once space is freed the store
//! reopens the database by itself, verifies it and saves again — no restart, every acknowledged
//! save still there.
//!
//! Runs as root in a private mount namespace (`berth_testkit::ns_test!`). tmpfs has no
//! `chattr +i` (FS_IOC_SETFLAGS is not supported there), so the immutable-file case is not here.

use berth_engine::TaskState;
use berth_store::Store;
use std::io::Write;
use std::time::{Duration, Instant};

/// A task whose saved state is about 40 KiB (a long command), so saves grow the file.
fn task(i: usize) -> TaskState {
    let arg = "x".repeat(40 * 1024);
    let doc = format!(
        r#"{{"family": "enospc", "containerDefinitions": [{{"name": "a", "image": "busybox", "command": ["{arg}"]}}]}}"#
    );
    let def = berth_model::parse(&doc).expect("valid").definition;
    TaskState::new(format!("{i:032x}"), def, 1)
}

/// Fill the file system holding `dir` (a filler file, written until ENOSPC).
fn fill(dir: &std::path::Path) {
    let mut f = std::fs::File::create(dir.join("filler")).expect("filler");
    let chunk = vec![0u8; 4096];
    loop {
        if let Err(e) = f.write_all(&chunk) {
            assert_eq!(e.raw_os_error(), Some(28), "expected ENOSPC: {e}");
            break;
        }
    }
    let _ = f.sync_all();
}

berth_testkit::ns_test! {
    fn a_full_disk_degrades_the_store_and_freeing_space_recovers_it() {
        let scratch = berth_testkit::mount::Scratch::new();
        let data = scratch.join("data");
        std::fs::create_dir(&data).expect("data dir");
        berth_testkit::mount::tmpfs("berth-test-enospc", &data, c"size=4m");
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(async {
            let store = Store::open(&data).expect("open");
            let mut acknowledged = Vec::new();
            for i in 0..4 {
                let t = task(i);
                store.save_state_grouped(&t).await.expect("saved with room");
                acknowledged.push(t.id);
            }
            assert_eq!(store.degraded(), None);

            fill(&data);
            // Saves now fail: the first with the I/O error, the next ones with redb's "previous
            // I/O error" or a failed reopen; none is acknowledged.
            let mut first_error = None;
            for i in 4..200 {
                match store.save_state_grouped(&task(i)).await {
                    Ok(()) => acknowledged.push(task(i).id),
                    Err(e) => {
                        first_error = Some(e.to_string());
                        break;
                    }
                }
            }
            let first_error = first_error.expect("a save failed on the full disk");
            eprintln!("first failed save: {first_error}");
            assert!(first_error.contains("berth.redb"), "{first_error}");
            let degraded = store.degraded().expect("the store says it is degraded");
            eprintln!("degraded: {degraded}");
            for i in 0..3 {
                tokio::time::sleep(Duration::from_millis(600)).await;
                let e = store
                    .save_state_grouped(&task(1000 + i))
                    .await
                    .expect_err("no save while the disk is full");
                eprintln!("while full: {e}");
                assert!(store.degraded().is_some());
            }
            // A reopen on the full disk repairs the file but cannot commit: still degraded.
            tokio::time::sleep(Duration::from_millis(600)).await;
            let still = store.check().expect("still degraded while the disk is full");
            eprintln!("check while full: {still}");
            // Reads of the control API fail meanwhile (the agent answers from memory).
            assert!(store.tasks().is_err());

            // Free the space: a check (what health does) reopens, verifies and proves a commit;
            // then saves succeed again.
            std::fs::remove_file(data.join("filler")).expect("free space");
            let deadline = Instant::now() + Duration::from_secs(10);
            while store.check().is_some() {
                assert!(Instant::now() < deadline, "never recovered: {:?}", store.degraded());
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            let again = task(2000);
            loop {
                match store.save_state_grouped(&again).await {
                    Ok(()) => break,
                    Err(e) if Instant::now() < deadline => {
                        eprintln!("not yet: {e}");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(e) => panic!("the store did not recover after space was freed: {e}"),
                }
            }
            acknowledged.push(again.id.clone());
            assert_eq!(store.degraded(), None);
            let ids: Vec<String> = store
                .tasks()
                .expect("tasks")
                .into_iter()
                .map(|r| r.state.id)
                .collect();
            for id in &acknowledged {
                assert!(ids.contains(id), "acknowledged save {id} lost: {ids:?}");
            }
            drop(store);
            // And a fresh open (a restarted agent) reads the same.
            let reopened = Store::open(&data).expect("reopen");
            assert!(reopened.get_task(&again.id).expect("read").is_some());
        });
    }
}
