//! `links` end to end, against the real Docker Engine: in a `bridge` task, a client container
//! that links to a server container by an alias resolves the alias (Docker wrote it into the
//! client's `/etc/hosts`) and gets the server's answer over HTTP (busybox `httpd` and `wget`),
//! then exits 42, as the ECS agent's functional tests do. The client is defined first, so only the
//! link orders the server's start before it (Docker refuses to start a container linked to one
//! that is not running). A second task links by the container's own name (no alias).
//!
//! Everything stays on the task's containers and the default bridge; nothing leaves the machine.

use berth_testkit::berth_run::{BerthRun, test_container};
use berth_testkit::{FamilyGuard, unique_name};
use serde_json::{Value, json};

/// Serves `linked-ok` on port 8080 (httpd in the background) and ends promptly on SIGTERM.
const SERVER: &str = "mkdir -p /www && echo linked-ok > /www/index.html && httpd -p 8080 -h /www && \
     trap 'exit 0' TERM; while true; do sleep 0.1; done";

/// Fetches from `host` until the server answers: 42 when the alias is in /etc/hosts and the answer
/// is the server's; 3 when the alias is not in /etc/hosts; 1 when no answer came.
fn client(host: &str) -> String {
    format!(
        "grep -qw {host} /etc/hosts || exit 3; \
         for i in $(seq 100); do out=$(wget -qO- http://{host}:8080/ 2>/dev/null) && break; sleep 0.1; done; \
         [ \"$out\" = linked-ok ] && exit 42; echo \"answer: $out\"; cat /etc/hosts; exit 1"
    )
}

/// Runs a bridge task of `client` (essential, first) linking with `link` to `server`
/// (non-essential); returns berth's exit code, the summary, and stderr.
fn run(tag: &str, link: &str, host: &str) -> (Option<i32>, Value, String) {
    let family = unique_name(&format!("berth-links-{tag}-"));
    let _cleanup = FamilyGuard(family.clone());
    let dir = tempfile::tempdir().expect("temp dir");
    let mut client = test_container("client", &client(host));
    client["links"] = json!([link]);
    let mut server = test_container("server", SERVER);
    server["essential"] = json!(false);
    let def = json!({
        "family": family,
        "networkMode": "bridge",
        "containerDefinitions": [client, server],
    });
    let out = BerthRun::new(
        env!("CARGO_BIN_EXE_berth"),
        dir.path().join("task.json"),
        &def,
    )
    .prefer_cached()
    .data_dir(dir.path().join("data"))
    .output();
    let summary = out.summary().unwrap_or_else(|| {
        panic!(
            "no summary; stdout:\n{}\nstderr:\n{}",
            out.stdout, out.stderr
        )
    });
    (out.code, summary, out.stderr)
}

fn exit_code(summary: &Value, name: &str) -> Value {
    summary["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == name))
        .map(|c| c["exitCode"].clone())
        .unwrap_or_else(|| panic!("{name} not in summary {summary}"))
}

#[test]
fn the_client_reaches_the_server_by_its_link_alias() {
    let (code, summary, stderr) = run("alias", "server:webserver", "webserver");
    assert_eq!(
        exit_code(&summary, "client"),
        json!(42),
        "summary {summary}\nstderr:\n{stderr}"
    );
    assert_eq!(
        code,
        Some(42),
        "berth exits with the essential container's code"
    );
    assert_eq!(
        summary["stoppedReason"],
        "Essential container in task exited"
    );
}

#[test]
fn a_link_without_alias_uses_the_container_name() {
    let (code, summary, stderr) = run("name", "server", "server");
    assert_eq!(
        exit_code(&summary, "client"),
        json!(42),
        "summary {summary}\nstderr:\n{stderr}"
    );
    assert_eq!(code, Some(42));
}
