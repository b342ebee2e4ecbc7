//! Messages at the edges, observed as the user sees them (the `berth` binary's exit code and
//! stderr), none needing a Docker Engine: an Engine that cannot be reached is named.

use std::path::Path;
use std::process::{Command, Output};

fn berth(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(args)
        .env_remove("DOCKER_HOST")
        .output()
        .expect("run berth")
}

fn definition(dir: &Path) -> String {
    let path = dir.join("td.json");
    std::fs::write(
        &path,
        r#"{"family":"edges","containerDefinitions":[{"name":"a","image":"busybox","essential":true,"memory":64}]}"#,
    )
    .expect("write");
    path.display().to_string()
}

#[test]
fn an_unreachable_engine_is_named_with_the_address_tried() {
    let dir = tempfile::tempdir().expect("tmp");
    let td = definition(dir.path());
    let data = dir.path().join("data").display().to_string();
    // No socket at all.
    let missing = format!("unix://{}", dir.path().join("none.sock").display());
    let out = berth(&["run", "--data-dir", &data, "--docker-host", &missing, &td]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(
        err.contains(&format!(
            "cannot connect to the Docker Engine at {missing}: no socket at "
        )),
        "{err}"
    );
    assert!(err.contains("is dockerd running? (--docker-host"), "{err}");
    // A socket nobody listens on (a dockerd that died).
    let path = dir.path().join("dead.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).expect("bind"));
    let dead = format!("unix://{}", path.display());
    for args in [
        vec!["run", "--data-dir", &data, "--docker-host", &dead, &td],
        vec![
            "agent",
            "--data-dir",
            &data,
            "--api-socket",
            &format!("{}/api.sock", dir.path().display()),
            "--docker-host",
            &dead,
        ],
    ] {
        let out = berth(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{err}");
        assert!(
            err.contains(&format!(
                "cannot connect to the Docker Engine at {dead}: Connection refused"
            )),
            "{args:?}: {err}"
        );
        assert!(!err.contains("hyper"), "{err}");
    }
}
