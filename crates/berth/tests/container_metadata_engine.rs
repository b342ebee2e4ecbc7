//! The container metadata file on the real Engine through `berth run --container-metadata`: a
//! busybox container waits until its file says READY, checks the keys it can check with grep
//! (its own container id and address among them) and exits 42; `berth run` exits 42; the file
//! as the container read it has ECS's keys in ECS's order; the task directory (and so the file)
//! is gone after the cleanup. With the option off the container has no variable and no mount,
//! and berth writes no file. In awsvpc mode the pause container gets no file, and the app's
//! `Networks` names the pause container's id, as Docker's `HostConfig.NetworkMode` does.
//!
//! Run only through `scripts/test -p berth --test container_metadata_engine`.

use berth_testkit::berth_run::{BerthRun, test_container};
use berth_testkit::{FamilyGuard, test_image, unique_name};
use serde_json::{Value, json};

/// The container's checks: each failure writes its name to /out/why and exits 3.
const CHECKS: &str = r#"
set -u
f="${ECS_CONTAINER_METADATA_FILE:-}"
fail() { echo "$1" > /out/why; cat "$f" > /out/file.json 2>/dev/null; exit 3; }
[ -n "$f" ] || fail "no ECS_CONTAINER_METADATA_FILE"
case "$f" in /opt/ecs/metadata/*/ecs-container-metadata.json) ;; *) fail "path $f" ;; esac
i=0
until grep -q '"MetadataFileStatus": "READY"' "$f" 2>/dev/null; do
  i=$((i+1)); [ "$i" -gt 100 ] && fail "never READY"; sleep 0.1
done
cp "$f" /out/file.json
has() { grep -q -e "$1" "$f" || fail "$1"; }
has '^	"Cluster": "berth-cm",$'
has '"TaskARN": "arn:aws:ecs:local-1:000000000000:task/berth-cm/[0-9a-f]\{32\}",$'
has '"ContainerInstanceARN": "arn:aws:ecs:local-1:000000000000:container-instance/berth-cm/[0-9a-f]\{32\}",$'
has "\"TaskDefinitionFamily\": \"$FAMILY\","
has '"TaskDefinitionRevision": "7",'
has '"ContainerName": "app",'
has "\"ContainerID\": \"$(hostname)[0-9a-f]\{52\}\","
has "\"DockerContainerName\": \"/berth-$FAMILY-7-app-[0-9a-f]\{12\}\","
has '"ImageID": "sha256:[0-9a-f]\{64\}",'
has "\"ImageName\": \"$IMAGE\","
has '"ContainerPort": 8080,'
has '"ContainerPortRange": "",'
has '"HostPort": [1-9][0-9]*,'
has '"BindIp": "0.0.0.0",'
has '"Protocol": "tcp"'
has '"NetworkMode": "bridge",'
has "^				\"$(hostname -i)\"$"
has '"AvailabilityZone": "local-1a",'
has '"HostPrivateIPv4Address": "10.9.8.7",'
has '"HostPublicIPv4Address": "203.0.113.9"$'
exit 42
"#;

fn run(
    family: &str,
    network_mode: &str,
    script: &str,
    extra: &[&str],
) -> (Option<i32>, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).expect("out dir");
    let mut app = test_container("app", script);
    if network_mode == "bridge" {
        app["portMappings"] = json!([{"containerPort": 8080, "hostPort": 0}]);
    }
    app["environment"] = json!([
        {"name": "FAMILY", "value": family},
        {"name": "IMAGE", "value": test_image()}
    ]);
    app["mountPoints"] = json!([{"sourceVolume": "out", "containerPath": "/out"}]);
    let def = json!({
        "family": family,
        "revision": 7,
        "networkMode": network_mode,
        "containerDefinitions": [app],
        "volumes": [{"name": "out", "host": {"sourcePath": out.display().to_string()}}]
    });
    let data = dir.path().join("data");
    let result = BerthRun::new(env!("CARGO_BIN_EXE_berth"), dir.path().join("t.json"), &def)
        .prefer_cached()
        .data_dir(&data)
        .args(["--cluster", "berth-cm"])
        .args(extra)
        .env_remove("ECS_ENABLE_CONTAINER_METADATA")
        .env_remove("BERTH_ENABLE_CONTAINER_METADATA")
        .output();
    let text = format!(
        "{}\n{}\nwhy: {}\nfile: {}",
        result.stdout,
        result.stderr,
        std::fs::read_to_string(out.join("why")).unwrap_or_default(),
        std::fs::read_to_string(out.join("file.json")).unwrap_or_default()
    );
    (result.code, text, dir)
}

#[test]
fn a_container_reads_its_ready_file_and_the_cleanup_removes_it() {
    let family = unique_name("cmeta-");
    let _g = FamilyGuard(family.clone());
    let (code, text, dir) = run(
        &family,
        "bridge",
        CHECKS,
        &[
            "--container-metadata",
            "--host-private-ipv4-address",
            "10.9.8.7",
            "--host-public-ipv4-address",
            "203.0.113.9",
        ],
    );
    assert_eq!(code, Some(42), "{text}");

    // The file as the container read it: ECS's keys, in ECS's order, tab-indented.
    let raw = std::fs::read_to_string(dir.path().join("out/file.json")).expect("the file");
    let keys: Vec<&str> = raw
        .lines()
        .filter_map(|l| l.strip_prefix("\t\""))
        .filter_map(|l| l.split('"').next())
        .collect();
    assert_eq!(
        keys,
        [
            "Cluster",
            "ContainerInstanceARN",
            "TaskARN",
            "TaskDefinitionFamily",
            "TaskDefinitionRevision",
            "ContainerID",
            "ContainerName",
            "DockerContainerName",
            "ImageID",
            "ImageName",
            "PortMappings",
            "Networks",
            "MetadataFileStatus",
            "AvailabilityZone",
            "HostPrivateIPv4Address",
            "HostPublicIPv4Address",
        ],
        "{raw}"
    );
    let v: Value = serde_json::from_str(&raw).expect("JSON");
    assert_eq!(v["MetadataFileStatus"], "READY");

    // The cleanup removed the task directory, and with it every metadata file.
    let tasks: Vec<_> = std::fs::read_dir(dir.path().join("data/tasks"))
        .expect("tasks dir")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .collect();
    assert!(tasks.is_empty(), "left after cleanup: {tasks:?}");
}

#[test]
fn off_the_container_has_no_variable_no_mount_and_no_file_is_written() {
    let family = unique_name("cmeta-off-");
    let _g = FamilyGuard(family.clone());
    let script = r#"
[ -z "${ECS_CONTAINER_METADATA_FILE:-}" ] || { echo "variable set" > /out/why; exit 3; }
[ ! -e /opt/ecs/metadata ] || { echo "mount present" > /out/why; exit 3; }
exit 42
"#;
    let (code, text, dir) = run(&family, "bridge", script, &["--keep"]);
    assert_eq!(code, Some(42), "{text}");
    let tasks: Vec<_> = std::fs::read_dir(dir.path().join("data/tasks"))
        .expect("tasks dir")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .collect();
    for t in &tasks {
        assert!(
            !t.join("metadata").exists(),
            "a metadata directory with the option off: {}",
            t.display()
        );
    }
}

#[test]
fn awsvpc_the_pause_container_has_no_file_and_the_app_names_its_network() {
    let family = unique_name("cmeta-vpc-");
    let _g = FamilyGuard(family.clone());
    let script = r#"
f="$ECS_CONTAINER_METADATA_FILE"
i=0
until grep -q '"MetadataFileStatus": "READY"' "$f" 2>/dev/null; do
  i=$((i+1)); [ "$i" -gt 100 ] && { echo "never READY" > /out/why; exit 3; }; sleep 0.1
done
cp "$f" /out/file.json
exit 42
"#;
    let (code, text, dir) = run(
        &family,
        "awsvpc",
        script,
        &["--container-metadata", "--keep"],
    );
    assert_eq!(code, Some(42), "{text}");
    let v: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("out/file.json")).expect("the file"),
    )
    .expect("JSON");
    let pause_id = berth_testkit::family_containers(&family)
        .into_iter()
        .map(|id| {
            berth_testkit::docker_cli(&["inspect", "-f", "{{.Id}} {{.Name}}", &id])
                .trim()
                .to_string()
        })
        .find(|line| line.contains("-pause."))
        .and_then(|line| line.split(' ').next().map(str::to_string))
        .expect("the pause container");
    assert_eq!(
        v["Networks"],
        json!([{"NetworkMode": format!("container:{pause_id}"), "IPv4Addresses": [""]}]),
        "{v}"
    );
    assert!(v.get("PortMappings").is_none(), "{v}");
    let tasks: Vec<_> = std::fs::read_dir(dir.path().join("data/tasks"))
        .expect("tasks dir")
        .filter_map(|e| e.ok())
        .collect();
    assert_eq!(tasks.len(), 1);
    let names: Vec<String> = std::fs::read_dir(tasks[0].path().join("metadata"))
        .expect("metadata dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["app"], "the pause container has no file");
}
