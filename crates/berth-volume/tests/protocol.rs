//! Protocol-level tests: a client on the plugin's Unix socket, every endpoint and error, real
//! tmpfs and bind mounts (the tests run as root), the network path through a recording helper,
//! the instance lock and the socket rules.

mod common;

use std::path::Path;

use berth_volume::protocol::endpoint;
use common::{MountGuard, Plugin, is_mounted};
use serde_json::{Value, json};

const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

async fn raw(client: &mut berth_volume::client::Client, path: &str, body: Value) -> (u16, Value) {
    let (status, bytes) = client
        .post_raw(path, serde_json::to_vec(&body).unwrap())
        .await
        .unwrap();
    (status, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn every_endpoint_with_exact_field_names_and_refcounts() {
    let guard = MountGuard::new();
    let plugin = Plugin::start(Plugin::config(guard.path())).await;
    let mut c = plugin.client().await;

    let (s, v) = raw(&mut c, endpoint::ACTIVATE, json!(null)).await;
    assert_eq!((s, v), (200, json!({"Implements": ["VolumeDriver"]})));
    let (s, v) = raw(&mut c, endpoint::CAPABILITIES, json!({})).await;
    assert_eq!((s, v), (200, json!({"Capabilities": {"Scope": "local"}})));

    // Create with Go's encoding (Opts null is allowed only with... no: a type is required).
    let (_, v) = raw(
        &mut c,
        endpoint::CREATE,
        json!({"Name": "v1", "Opts": null}),
    )
    .await;
    assert!(v["Err"].as_str().unwrap().contains("no type given"), "{v}");
    let (s, v) = raw(
        &mut c,
        endpoint::CREATE,
        json!({"Name": "v1", "Opts": {"type": "tmpfs", "o": "size=1m"}}),
    )
    .await;
    assert_eq!((s, v), (200, json!({"Err": ""})));
    // Same options again: fine. Different ones: refused.
    c.create("v1", &[("type", "tmpfs"), ("o", "size=1m")])
        .await
        .unwrap();
    let e = c.create("v1", &[("type", "tmpfs")]).await.unwrap_err();
    assert!(
        e.to_string()
            .contains("already exists with different options"),
        "{e}"
    );

    let mountpoint = plugin.config.mount_root.join("v1");
    assert!(mountpoint.is_dir());
    let (_, v) = raw(&mut c, endpoint::LIST, json!({})).await;
    assert_eq!(
        v,
        json!({"Volumes": [{"Name": "v1", "Mountpoint": mountpoint.to_str().unwrap()}], "Err": ""})
    );
    let (_, v) = raw(&mut c, endpoint::PATH, json!({"Name": "v1"})).await;
    assert_eq!(v["Mountpoint"], mountpoint.to_str().unwrap());

    // Mount with dockerd's field name `ID`; `Id` is not it.
    let (_, v) = raw(&mut c, endpoint::MOUNT, json!({"Name": "v1", "Id": A})).await;
    assert!(
        v["Err"].as_str().unwrap().contains("missing field `ID`"),
        "{v}"
    );
    assert!(!is_mounted(&mountpoint));
    let (s, v) = raw(&mut c, endpoint::MOUNT, json!({"Name": "v1", "ID": A})).await;
    assert_eq!(
        (s, v),
        (
            200,
            json!({"Mountpoint": mountpoint.to_str().unwrap(), "Err": ""})
        )
    );
    assert!(is_mounted(&mountpoint));
    std::fs::write(mountpoint.join("data"), b"hello").unwrap();

    // docker cp on a running container: Mount A, Unmount A with the container's own ID.
    c.mount("v1", A).await.unwrap();
    c.unmount("v1", A).await.unwrap();
    assert!(
        is_mounted(&mountpoint),
        "a cp's Unmount must not unmount the container's volume"
    );
    assert_eq!(std::fs::read(mountpoint.join("data")).unwrap(), b"hello");

    c.mount("v1", B).await.unwrap();
    c.mount("v1", A).await.unwrap();
    let (_, v) = raw(&mut c, endpoint::GET, json!({"Name": "v1"})).await;
    let vol = &v["Volume"];
    assert_eq!(v["Err"], "");
    assert_eq!(vol["Name"], "v1");
    assert_eq!(vol["Mountpoint"], mountpoint.to_str().unwrap());
    assert!(
        time::OffsetDateTime::parse(
            vol["CreatedAt"].as_str().unwrap(),
            &time::format_description::well_known::Rfc3339
        )
        .is_ok()
    );
    assert_eq!(vol["Status"]["mounted"], true);
    assert_eq!(vol["Status"]["references"], 3);
    assert_eq!(vol["Status"]["mounts"], json!({A: 2, B: 1}));
    assert_eq!(vol["Status"]["type"], "tmpfs");

    // Remove refused while referenced, naming the IDs.
    let e = c.remove("v1").await.unwrap_err().to_string();
    assert!(
        e.contains("in use") && e.contains("aaaaaaaaaaaa") && e.contains("holds 2"),
        "{e}"
    );

    // Unmount of an unknown ID: success, no change.
    c.unmount("v1", "cccc").await.unwrap();
    c.unmount("v1", A).await.unwrap();
    c.unmount("v1", A).await.unwrap();
    assert!(is_mounted(&mountpoint), "B still holds a reference");
    c.unmount("v1", B).await.unwrap();
    assert!(!is_mounted(&mountpoint), "the last release unmounts");
    c.unmount("v1", B).await.unwrap();
    let info = c.get("v1").await.unwrap();
    let status = info.status.unwrap();
    assert!(!status.mounted);
    assert_eq!(status.references, 0);

    // The state on disk has what the answers said, in berth's versioned format.
    let state: Value =
        serde_json::from_slice(&std::fs::read(&plugin.config.state_file).unwrap()).unwrap();
    assert_eq!(state["version"], 1);
    assert_eq!(state["volumes"]["v1"]["mounts"], json!({}));
    assert_eq!(
        state["volumes"]["v1"]["options"],
        json!({"type": "tmpfs", "o": "size=1m"})
    );

    let (s, v) = raw(&mut c, endpoint::REMOVE, json!({"Name": "v1"})).await;
    assert_eq!((s, v), (200, json!({"Err": ""})));
    assert!(!mountpoint.exists(), "the mount point directory is removed");
    assert!(c.list().await.unwrap().is_empty());
    plugin.stop().await;
    assert!(!plugin_socket_exists(guard.path()));
}

fn plugin_socket_exists(dir: &Path) -> bool {
    dir.join("plugin.sock").exists()
}

#[tokio::test]
async fn bad_input_gets_clear_errors_and_the_plugin_keeps_serving() {
    let guard = MountGuard::new();
    let plugin = Plugin::start(Plugin::config(guard.path())).await;
    let mut c = plugin.client().await;

    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        (
            endpoint::CREATE,
            b"{not json".to_vec(),
            400,
            "malformed request",
        ),
        (
            endpoint::CREATE,
            b"{}".to_vec(),
            400,
            "missing field `Name`",
        ),
        (
            endpoint::MOUNT,
            br#"{"Name":"v"}"#.to_vec(),
            400,
            "missing field `ID`",
        ),
        (endpoint::GET, b"".to_vec(), 400, "malformed request"),
        (
            endpoint::MOUNT,
            vec![b' '; berth_volume::server::MAX_BODY + 1],
            413,
            "larger than",
        ),
        (
            "/VolumeDriver.Nope",
            b"{}".to_vec(),
            404,
            "unknown endpoint",
        ),
        (
            endpoint::GET,
            br#"{"Name":"../etc"}"#.to_vec(),
            200,
            "invalid volume name",
        ),
        (
            endpoint::CREATE,
            br#"{"Name":"a/b","Opts":{"type":"tmpfs"}}"#.to_vec(),
            200,
            "invalid volume name",
        ),
        (
            endpoint::CREATE,
            format!(
                r#"{{"Name":"{}","Opts":{{"type":"tmpfs"}}}}"#,
                "x".repeat(300)
            )
            .into_bytes(),
            200,
            "longer than 200",
        ),
        (
            endpoint::CREATE,
            br#"{"Name":"v","Opts":{"o":"size=1m"}}"#.to_vec(),
            200,
            "option o given without type",
        ),
        (
            endpoint::CREATE,
            br#"{"Name":"v","Opts":{"type":"bind","device":"rel/path"}}"#.to_vec(),
            200,
            "must be an absolute path",
        ),
        (
            endpoint::CREATE,
            br#"{"Name":"v","Opts":{"type":"tmpfs","bogus":"1"}}"#.to_vec(),
            200,
            "unknown option",
        ),
        (
            endpoint::MOUNT,
            br#"{"Name":"nope","ID":"x"}"#.to_vec(),
            200,
            "no such volume: nope",
        ),
        (
            endpoint::UNMOUNT,
            br#"{"Name":"nope","ID":"x"}"#.to_vec(),
            200,
            "no such volume",
        ),
        (
            endpoint::REMOVE,
            br#"{"Name":"nope"}"#.to_vec(),
            200,
            "no such volume",
        ),
        (
            endpoint::PATH,
            br#"{"Name":"nope"}"#.to_vec(),
            200,
            "no such volume",
        ),
        (
            endpoint::MOUNT,
            br#"{"Name":"v","ID":"a b"}"#.to_vec(),
            200,
            "invalid mount ID",
        ),
    ];
    for (path, body, status, needle) in cases {
        let (s, answer) = c.post_raw(path, body).await.unwrap();
        let v: Value = serde_json::from_slice(&answer).unwrap();
        let message = v["Err"].as_str().unwrap_or_default();
        assert_eq!(s, status, "{path}: {v}");
        assert!(
            message.contains(needle),
            "{path}: {message:?} should contain {needle:?}"
        );
        assert_eq!(
            v.as_object().unwrap().keys().collect::<Vec<_>>(),
            vec!["Err"],
            "{v}"
        );
    }
    // A GET instead of a POST.
    let out = tokio::process::Command::new("curl")
        .args([
            "-s",
            "-m",
            "10",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--unix-socket",
        ])
        .arg(&plugin.config.socket)
        .arg("http://plugin/VolumeDriver.List")
        .output()
        .await;
    if let Ok(out) = out {
        assert_eq!(String::from_utf8_lossy(&out.stdout), "405");
    }
    // Still serving, on the same connection and on a new one.
    c.create("v", &[("type", "tmpfs")]).await.unwrap();
    let mut c2 = plugin.client().await;
    assert_eq!(c2.list().await.unwrap().len(), 1);
    c2.remove("v").await.unwrap();
    plugin.stop().await;
}

#[tokio::test]
async fn bind_volumes_mount_the_device_and_removal_never_touches_it() {
    let guard = MountGuard::new();
    let source = guard.path().join("source");
    std::fs::create_dir(&source).unwrap();
    std::fs::write(source.join("sentinel"), b"keep").unwrap();
    let plugin = Plugin::start(Plugin::config(guard.path())).await;
    let mut c = plugin.client().await;
    c.create(
        "b",
        &[
            ("type", "bind"),
            ("device", source.to_str().unwrap()),
            ("o", "ro"),
        ],
    )
    .await
    .unwrap();
    let mp = c.mount("b", A).await.unwrap();
    assert_eq!(
        std::fs::read(Path::new(&mp).join("sentinel")).unwrap(),
        b"keep"
    );
    assert!(
        std::fs::write(Path::new(&mp).join("new"), b"x").is_err(),
        "read-only bind"
    );
    c.unmount("b", A).await.unwrap();
    assert!(!is_mounted(Path::new(&mp)));
    c.remove("b").await.unwrap();
    assert!(!Path::new(&mp).exists());
    assert_eq!(std::fs::read(source.join("sentinel")).unwrap(), b"keep");

    // A bind source that does not exist: the Mount fails cleanly, nothing is counted.
    c.create(
        "gone",
        &[("type", "bind"), ("device", "/nonexistent/berth-test")],
    )
    .await
    .unwrap();
    let e = c.mount("gone", A).await.unwrap_err().to_string();
    assert!(e.contains("bind source"), "{e}");
    assert_eq!(c.get("gone").await.unwrap().status.unwrap().references, 0);
    c.remove("gone").await.unwrap();
    plugin.stop().await;
}

#[tokio::test]
async fn network_types_go_through_the_helper_as_argv() {
    let guard = MountGuard::new();
    let log = guard.path().join("helper.log");
    let helper = common::recording_helper(guard.path(), &log);
    let mut config = Plugin::config(guard.path());
    config.mount_helper = helper.into_os_string();
    let plugin = Plugin::start(config).await;
    let mut c = plugin.client().await;

    // Exactly the options berth-engine builds for an efsVolumeConfiguration.
    let efs_o = "tls,iam,accesspoint=fsap-0123456789abcdef0";
    c.create(
        "efs1",
        &[
            ("type", "efs"),
            ("device", "fs-0123abcd:/data/app"),
            ("o", efs_o),
        ],
    )
    .await
    .unwrap();
    c.create(
        "nfs1",
        &[("type", "nfs4"), ("device", "127.0.0.1:/export/a b")],
    )
    .await
    .unwrap_err(); // whitespace refused at Create
    c.create("nfs1", &[("type", "nfs4"), ("device", "127.0.0.1:/export")])
        .await
        .unwrap();
    let e = c
        .create("bad", &[("type", "efs"), ("device", "server:/x")])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("fs-<hex>"), "{e}");

    let efs_mp = c.mount("efs1", A).await.unwrap();
    c.mount("efs1", A).await.unwrap(); // only increments: the helper is not run again
    let nfs_mp = c.mount("nfs1", B).await.unwrap();
    assert!(is_mounted(Path::new(&efs_mp)) && is_mounted(Path::new(&nfs_mp)));
    let recorded = std::fs::read_to_string(&log).unwrap();
    let runs: Vec<Vec<&str>> = recorded
        .split("--\n")
        .filter(|r| !r.is_empty())
        .map(|r| r.lines().collect())
        .collect();
    assert_eq!(
        runs,
        vec![
            vec![
                "-t",
                "efs",
                "-o",
                efs_o,
                "fs-0123abcd:/data/app",
                efs_mp.as_str()
            ],
            vec!["-t", "nfs4", "127.0.0.1:/export", nfs_mp.as_str()],
        ]
    );
    c.unmount("efs1", A).await.unwrap();
    assert!(is_mounted(Path::new(&efs_mp)));
    c.unmount("efs1", A).await.unwrap();
    c.unmount("nfs1", B).await.unwrap();
    assert!(!is_mounted(Path::new(&efs_mp)) && !is_mounted(Path::new(&nfs_mp)));
    c.remove("efs1").await.unwrap();
    c.remove("nfs1").await.unwrap();
    plugin.stop().await;

    // A helper that fails: the Mount fails with its message; a helper that is missing: Create fails.
    let failing = guard.path().join("fail-mount");
    std::fs::write(
        &failing,
        "#!/bin/sh\necho 'mount.nfs: access denied' >&2\nexit 32\n",
    )
    .unwrap();
    std::fs::set_permissions(
        &failing,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let mut config = Plugin::config(guard.path());
    config.mount_helper = failing.into_os_string();
    let plugin = Plugin::start(config).await;
    let mut c = plugin.client().await;
    c.create("n", &[("type", "nfs"), ("device", "127.0.0.1:/x")])
        .await
        .unwrap();
    let e = c.mount("n", A).await.unwrap_err().to_string();
    assert!(
        e.contains("access denied") && e.contains("exit status: 32"),
        "{e}"
    );
    assert_eq!(c.get("n").await.unwrap().status.unwrap().references, 0);
    c.remove("n").await.unwrap();
    plugin.stop().await;

    let mut config = Plugin::config(guard.path());
    config.mount_helper = guard.path().join("no-such-helper").into_os_string();
    let plugin = Plugin::start(config).await;
    let mut c = plugin.client().await;
    let e = c
        .create("n", &[("type", "nfs"), ("device", "127.0.0.1:/x")])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("mount helper"), "{e}");
    c.create("t", &[("type", "tmpfs")]).await.unwrap(); // tmpfs needs no helper
    c.remove("t").await.unwrap();
    plugin.stop().await;
}

#[tokio::test]
async fn one_instance_per_state_file_and_stale_sockets_are_replaced() {
    let guard = MountGuard::new();
    let config = Plugin::config(guard.path());
    // A stale socket: bound, then its listener gone.
    drop(std::os::unix::net::UnixListener::bind(&config.socket).unwrap());
    assert!(config.socket.exists());
    let plugin = Plugin::start(config.clone()).await;
    plugin.client().await.list().await.unwrap();

    // A second instance on the same state file: locked.
    let mut other = config.clone();
    other.socket = guard.path().join("other.sock");
    let e = berth_volume::server::Server::start(&other)
        .await
        .unwrap_err();
    assert!(matches!(e, berth_volume::Error::Locked { .. }), "{e}");
    // A second instance on the same (live) socket: refused.
    let mut other = config.clone();
    other.state_file = guard.path().join("other-state.json");
    let e = berth_volume::server::Server::start(&other)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("another process is serving"), "{e}");
    // Not a socket: refused, untouched.
    let mut other = config.clone();
    other.state_file = guard.path().join("third-state.json");
    other.socket = guard.path().join("regular-file");
    std::fs::write(&other.socket, b"x").unwrap();
    let e = berth_volume::server::Server::start(&other)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("not a socket"), "{e}");
    assert_eq!(std::fs::read(&other.socket).unwrap(), b"x");
    plugin.stop().await;
    assert!(!config.socket.exists(), "the socket is removed at stop");
}

/// Mount a tmpfs over the state directory and remount it read-only: saves then fail with EROFS
/// (permission bits would not stop root).
struct ReadOnlyDir<'a>(&'a Path);

impl<'a> ReadOnlyDir<'a> {
    fn set(dir: &'a Path, ro: bool) {
        berth_testkit::mount::remount(dir, ro);
    }
}

impl Drop for ReadOnlyDir<'_> {
    fn drop(&mut self) {
        berth_testkit::mount::remount_read_write_quietly(self.0);
    }
}

#[tokio::test]
async fn failed_saves_roll_back_fresh_ids_and_keep_existing_references() {
    let guard = MountGuard::new();
    let config = Plugin::config(guard.path());
    let state_dir = config.state_file.parent().unwrap().to_path_buf();
    std::fs::create_dir_all(&state_dir).unwrap();
    berth_testkit::mount::tmpfs("tmpfs", &state_dir, c"size=1m");
    let plugin = Plugin::start(config.clone()).await;
    let mut c = plugin.client().await;
    c.create("v", &[("type", "tmpfs")]).await.unwrap();
    let ro = ReadOnlyDir(&state_dir);

    // A fresh volume, a fresh ID: the Mount fails and is rolled back, including the mount.
    ReadOnlyDir::set(&state_dir, true);
    let e = c.mount("v", A).await.unwrap_err().to_string();
    assert!(
        e.contains("rolled back") && e.contains("Read-only file system"),
        "{e}"
    );
    let st = c.get("v").await.unwrap().status.unwrap();
    assert_eq!((st.mounted, st.references), (false, 0));
    let mp = config.mount_root.join("v");
    assert!(!is_mounted(&mp));

    // The container's reference exists (saved); then docker cp's Mount with the same ID fails.
    ReadOnlyDir::set(&state_dir, false);
    c.mount("v", A).await.unwrap();
    ReadOnlyDir::set(&state_dir, true);
    let e = c.mount("v", A).await.unwrap_err().to_string();
    assert!(e.contains("is kept"), "{e}");
    assert_eq!(c.get("v").await.unwrap().status.unwrap().mounts[A], 2);
    // dockerd's follow-up Unmount for the same ID: takes the cp's reference, the volume stays.
    let e = c.unmount("v", A).await.unwrap_err().to_string();
    assert!(e.contains("were released"), "{e}");
    assert_eq!(c.get("v").await.unwrap().status.unwrap().mounts[A], 1);
    assert!(
        is_mounted(&mp),
        "the running container's volume stays mounted"
    );
    // A fresh ID on a mounted volume: rolled back, the volume stays mounted for A.
    assert!(c.mount("v", B).await.is_err());
    let st = c.get("v").await.unwrap().status.unwrap();
    assert_eq!(st.mounts.len(), 1);
    assert!(is_mounted(&mp));
    // Create: rolled back.
    assert!(c.create("w", &[("type", "tmpfs")]).await.is_err());
    assert!(c.get("w").await.is_err());

    ReadOnlyDir::set(&state_dir, false);
    drop(ro);
    c.unmount("v", A).await.unwrap();
    assert!(!is_mounted(&mp));
    c.remove("v").await.unwrap();
    plugin.stop().await;
}

#[tokio::test]
async fn restart_keeps_volumes_and_counts_and_recovery_remounts_and_reports() {
    let guard = MountGuard::new();
    let config = Plugin::config(guard.path());
    let plugin = Plugin::start(config.clone()).await;
    let mut c = plugin.client().await;
    for name in ["kept", "lost", "idle"] {
        c.create(name, &[("type", "tmpfs")]).await.unwrap();
    }
    c.mount("kept", A).await.unwrap();
    c.mount("kept", A).await.unwrap();
    c.mount("lost", B).await.unwrap();
    drop(c);
    plugin.stop().await; // as on SIGTERM: nothing is unmounted
    let root = &config.mount_root;
    assert!(is_mounted(&root.join("kept")) && is_mounted(&root.join("lost")));

    // While it was down: "lost" got unmounted behind its back; "idle" got mounted by someone;
    // and an unknown mount appeared under the root.
    berth_testkit::mount::unmount(&root.join("lost"));
    berth_testkit::mount::tmpfs("tmpfs", &root.join("idle"), c"");
    std::fs::create_dir(root.join("stray")).unwrap();
    berth_testkit::mount::tmpfs("tmpfs", &root.join("stray"), c"");

    let plugin = Plugin::start(config.clone()).await;
    let r = &plugin.recovery;
    assert_eq!(r.kept, vec!["kept".to_owned()]);
    assert_eq!(r.remounted, vec!["lost".to_owned()]);
    assert_eq!(r.unreferenced, vec!["idle".to_owned()]);
    assert_eq!(
        r.unknown_mounts,
        vec![std::fs::canonicalize(root.join("stray")).unwrap()]
    );
    assert!(r.failed.is_empty());
    assert!(is_mounted(&root.join("lost")) && is_mounted(&root.join("stray")));

    let mut c = plugin.client().await;
    let names: Vec<String> = c
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, vec!["idle", "kept", "lost"]);
    assert_eq!(c.get("kept").await.unwrap().status.unwrap().mounts[A], 2);
    c.unmount("kept", A).await.unwrap();
    c.unmount("kept", A).await.unwrap();
    c.unmount("lost", B).await.unwrap();
    assert!(!is_mounted(&root.join("kept")) && !is_mounted(&root.join("lost")));
    // The adopted mount goes away with its volume's Remove.
    c.remove("idle").await.unwrap();
    assert!(!is_mounted(&root.join("idle")) && !root.join("idle").exists());
    // Release of a leaked reference.
    c.mount("kept", A).await.unwrap();
    c.mount("kept", A).await.unwrap();
    let r = c.release("kept", A, Some(1)).await.unwrap();
    assert_eq!((r.released, r.remaining, r.unmounted), (1, 1, false));
    let r = c.release("kept", A, None).await.unwrap();
    assert_eq!((r.released, r.remaining, r.unmounted), (1, 0, true));
    assert!(!is_mounted(&root.join("kept")));
    let r = c.release("kept", A, None).await.unwrap();
    assert_eq!(r.released, 0);
    plugin.stop().await;
    assert!(
        is_mounted(&root.join("stray")),
        "unknown mounts are never torn down"
    );
}

#[tokio::test]
async fn a_busy_last_unmount_keeps_the_reference() {
    let guard = MountGuard::new();
    let plugin = Plugin::start(Plugin::config(guard.path())).await;
    let mut c = plugin.client().await;
    c.create("v", &[("type", "tmpfs")]).await.unwrap();
    let mp = c.mount("v", A).await.unwrap();
    let busy = std::fs::File::create(Path::new(&mp).join("open")).unwrap();
    let e = c.unmount("v", A).await.unwrap_err().to_string();
    assert!(
        e.contains("EBUSY") && e.contains("reference is kept"),
        "{e}"
    );
    assert_eq!(c.get("v").await.unwrap().status.unwrap().mounts[A], 1);
    drop(busy);
    let r = c.release("v", A, None).await.unwrap();
    assert!(r.unmounted);
    c.remove("v").await.unwrap();
    plugin.stop().await;
}
