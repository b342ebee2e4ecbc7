//! What an agent lets a task or a local user reach on its host, seen where the user sees it (the
//! data directory's modes, the agent's log, `berth submit`'s answer, `berth inspect`, the
//! container's own environment) with a real agent on the real Docker Engine: the data directory
//! and the state store are private.

mod common;

use common::agent::{Agent, Launch};
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("stat {}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn the_data_directory_and_the_store_are_private_and_open_ones_are_narrowed_with_a_warning() {
    let dir = tempfile::tempdir().expect("tmp");
    let data = dir.path().join("data");
    let launch = Launch {
        data_dir: Some(data.clone()),
        ..Launch::default()
    };
    // A fresh data directory: created 0700, its store 0600, and no warning.
    let mut agent = Agent::start_launch("1s", launch, &[], &[]);
    let store = data.join("berth.redb");
    assert_eq!(mode(&data), 0o700, "a new data directory");
    assert_eq!(mode(&store), 0o600, "a new state store");
    assert!(
        !agent.log().contains("open to other users"),
        "{}",
        agent.log()
    );
    agent.term();

    // As an older berth left them: the directory 0755, the store 0644.
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    agent.restart();
    assert_eq!(mode(&data), 0o700, "the data directory after a start");
    assert_eq!(mode(&store), 0o600, "the state store after a start");
    let log = agent.log();
    let warned = |path: &Path, old: &str| {
        log.lines().any(|l| {
            l.contains("WARN")
                && l.contains("open to other users")
                && l.contains(&path.display().to_string())
                && l.contains(old)
        })
    };
    assert!(
        warned(&data, "0755"),
        "a warning naming {} and 0755:\n{log}",
        data.display()
    );
    assert!(
        warned(&store, "0644"),
        "a warning naming {} and 0644:\n{log}",
        store.display()
    );
}
