//! Real third-party clients of the task metadata endpoint, against the real Docker Engine: from
//! inside a bridge-mode container of a `berth run` task, OpenTelemetry's ECS resource detector (PyPI
//! `opentelemetry-sdk-extension-aws`, `AwsEcsResourceDetector`) reads berth's v4 endpoint as it
//! reads ECS's, and botocore's `ArnParser` (PyPI `botocore`) parses every ARN berth emits.
//!
//! The test image is busybox only, so the clients run on the host's Debian Python: a virtualenv
//! made with `/usr/bin/python3` (scripts/test installs python3-venv) and the host's `/usr`, `/lib`
//! and `/lib64`, all bind-mounted read-only into the container at the same paths. The detector
//! then sees what it sees on ECS: its own environment (`ECS_CONTAINER_METADATA_URI_V4`), its own
//! `/proc/self/cgroup` (the container id) and host name (the container name).
//!
//! What the detector (2.1.0) does not report, berth cannot show through it: it sets no
//! `cloud.region`, `cloud.account.id` or `cloud.availability_zone`; the region and account are in
//! every ARN (botocore's parse shows them) and the zone in `/task`'s `AvailabilityZone`.

use berth_testkit::berth_run::BerthRun;
use berth_testkit::{FamilyGuard, TEST_LABEL, test_image, unique_name};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;

const DETECTOR: &str = "opentelemetry-sdk-extension-aws==2.1.0";
const BOTOCORE: &str = "botocore==1.44.8";

/// Runs in the container: the detector (raising on any error, so a missing key fails the test
/// with its name), then ArnParser over every ARN; everything it saw goes to /out/probe.json, and a
/// failure's traceback to /out/error.txt.
const PROBE: &str = r#"
import json, os, socket, traceback, urllib.request
try:
    from botocore.utils import ArnParser
    from opentelemetry.sdk.extension.aws.resource.ecs import AwsEcsResourceDetector
    attributes = dict(AwsEcsResourceDetector(raise_on_error=True).detect().attributes)
    uri = os.environ["ECS_CONTAINER_METADATA_URI_V4"]
    get = lambda path: json.load(urllib.request.urlopen(uri + path, timeout=5))
    arns = {
        "task": attributes["aws.ecs.task.arn"],
        "container": attributes["aws.ecs.container.arn"],
        "cluster": attributes["aws.ecs.cluster.arn"],
        "container-instance": os.environ["PROBE_CONTAINER_INSTANCE_ARN"],
        "task-definition": os.environ["PROBE_TASK_DEFINITION_ARN"],
    }
    parser = ArnParser()
    out = {
        "attributes": {k: list(v) if isinstance(v, tuple) else v for k, v in attributes.items()},
        "container": get(""),
        "task": get("/task"),
        "taskWithTags": get("/taskWithTags"),
        "arns": arns,
        "parsed": {k: parser.parse_arn(v) for k, v in arns.items()},
        "hostname": socket.gethostname(),
    }
    with open("/out/probe.json", "w") as f:
        json.dump(out, f)
except Exception:
    with open("/out/error.txt", "w") as f:
        f.write(traceback.format_exc())
    raise
"#;

/// A virtualenv of Debian's Python with the two clients, under `dir`.
fn venv(dir: &Path) -> PathBuf {
    let venv = dir.join("venv");
    let ok = Command::new("/usr/bin/python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .expect("/usr/bin/python3 runs (scripts/test installs python3-venv)");
    assert!(ok.success(), "/usr/bin/python3 -m venv failed");
    let pip = Command::new(venv.join("bin/pip"))
        .args([
            "install",
            "-q",
            "--disable-pip-version-check",
            DETECTOR,
            BOTOCORE,
        ])
        .output()
        .expect("pip runs");
    assert!(
        pip.status.success(),
        "pip install {DETECTOR} {BOTOCORE} failed:\n{}",
        String::from_utf8_lossy(&pip.stderr)
    );
    venv
}

fn path_str(p: &Path) -> String {
    p.display().to_string()
}

#[test]
fn the_otel_ecs_detector_and_botocore_accept_berths_metadata() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().canonicalize().expect("canonical temp dir");
    let venv = venv(&root);
    let out = root.join("out");
    std::fs::create_dir(&out).expect("out dir");
    std::fs::write(out.join("probe.py"), PROBE).expect("probe written");
    let data = root.join("data");
    std::fs::create_dir(&data).expect("data dir");

    // The ARNs berth formats but the endpoint does not serve, from the same identity `berth run`
    // derives from these options, host name and data directory.
    let identity = berth_engine::Identity {
        region: "eu-central-1".into(),
        account: "123456789012".into(),
        cluster: "clients".into(),
        availability_zone: "eu-central-1c".into(),
        container_instance_id: berth_engine::identity::container_instance_id(
            &berth_engine::spec::host_name(),
            &path_str(&data),
        ),
        ..berth_engine::Identity::default()
    };

    let family = unique_name("berth-meta-clients-");
    let _cleanup = FamilyGuard(family.clone());
    let mount = |name: &str, path: &str, read_only: bool| {
        (
            json!({"name": name, "host": {"sourcePath": path}}),
            json!({"sourceVolume": name, "containerPath": path, "readOnly": read_only}),
        )
    };
    let venv_path = path_str(&venv);
    let out_path = path_str(&out);
    let mounts = [
        mount("usr", "/usr", true),
        (
            json!({"name": "lib", "host": {"sourcePath": "/usr/lib"}}),
            json!({"sourceVolume": "lib", "containerPath": "/lib", "readOnly": true}),
        ),
        (
            json!({"name": "lib64", "host": {"sourcePath": "/usr/lib64"}}),
            json!({"sourceVolume": "lib64", "containerPath": "/lib64", "readOnly": true}),
        ),
        mount("venv", &venv_path, true),
        (
            json!({"name": "out", "host": {"sourcePath": out_path}}),
            json!({"sourceVolume": "out", "containerPath": "/out"}),
        ),
    ];
    let def = json!({
        "taskDefinition": {
            "family": family,
            "revision": 3,
            "networkMode": "bridge",
            "volumes": mounts.iter().map(|m| m.0.clone()).collect::<Vec<_>>(),
            "containerDefinitions": [{
                "name": "app",
                "image": test_image(),
                "command": [format!("{venv_path}/bin/python"), "/out/probe.py"],
                "environment": [
                    {"name": "PROBE_CONTAINER_INSTANCE_ARN", "value": identity.container_instance_arn()},
                    {"name": "PROBE_TASK_DEFINITION_ARN", "value": identity.task_definition_arn(&family, 3)},
                ],
                "mountPoints": mounts.iter().map(|m| m.1.clone()).collect::<Vec<_>>(),
                "dockerLabels": {TEST_LABEL: "1"},
                "stopTimeout": 2,
            }],
            "tags": [{"key": "team", "value": "from-definition"}]
        },
        "tags": [{"key": "owner", "value": "wrapper"}]
    });
    let run = BerthRun::new(env!("CARGO_BIN_EXE_berth"), root.join("task.json"), &def)
        .prefer_cached()
        .args([
            "--metadata-addr",
            "127.0.0.1:0",
            "--cluster",
            "clients",
            "--region",
            "eu-central-1",
            "--account-id",
            "123456789012",
            "--availability-zone",
            "eu-central-1c",
            "--tag",
            "team=from-run",
            "--container-instance-tag",
            "rack=r7",
        ])
        .env_remove("ECS_CONTAINER_INSTANCE_TAGS")
        .data_dir(&data)
        .output();
    let error = std::fs::read_to_string(out.join("error.txt")).unwrap_or_default();
    assert_eq!(
        run.code,
        Some(0),
        "the probe failed:\n{error}\nstdout:\n{}\nstderr:\n{}",
        run.stdout,
        run.stderr
    );
    let summary = run.summary().expect("a summary");
    let task_id = summary["task"].as_str().expect("task id").to_string();
    let docker_id = summary["containers"][0]["dockerId"]
        .as_str()
        .expect("docker id")
        .to_string();
    let text = std::fs::read_to_string(out.join("probe.json")).expect("probe.json written");
    let probe: Value = serde_json::from_str(&text).expect("probe.json is JSON");
    let a = &probe["attributes"];

    // The detector's resource: every aws.ecs.* and cloud.* attribute it knows.
    let task_arn = identity.task_arn(&task_id);
    let container_arn = identity.container_arn(&task_id, "app");
    assert_eq!(a["cloud.provider"], "aws", "{a}");
    assert_eq!(a["cloud.platform"], "aws_ecs", "{a}");
    assert_eq!(a["aws.ecs.task.arn"], task_arn, "{a}");
    assert_eq!(a["aws.ecs.container.arn"], container_arn, "{a}");
    assert_eq!(a["aws.ecs.cluster.arn"], identity.cluster_arn(), "{a}");
    assert_eq!(a["aws.ecs.launchtype"], "ec2", "{a}");
    assert_eq!(a["aws.ecs.task.family"], family.as_str(), "{a}");
    assert_eq!(a["aws.ecs.task.revision"], "3", "{a}");
    // From the container itself: its host name (Docker's default, the id's first 12) and its
    // cgroup, which names the container on a cgroup v1 host; under cgroup v2 (a private cgroup
    // namespace) the detector finds no id there, on ECS as here.
    assert_eq!(a["container.name"], &docker_id[..12], "{a}");
    let cgroup2 = Command::new("stat")
        .args(["-fc", "%T", "/sys/fs/cgroup"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "cgroup2fs")
        .unwrap_or(false);
    let expected_id = if cgroup2 { "" } else { docker_id.as_str() };
    assert_eq!(a["container.id"], expected_id, "{a}");

    // botocore parses every ARN berth emits, and finds the configured identity in each.
    for (kind, resource) in [
        ("task", format!("task/clients/{task_id}")),
        (
            "container",
            format!(
                "container/clients/{task_id}/{}",
                berth_engine::identity::container_uuid(&task_id, "app")
            ),
        ),
        ("cluster", "cluster/clients".to_string()),
        (
            "container-instance",
            format!(
                "container-instance/clients/{}",
                identity.container_instance_id
            ),
        ),
        ("task-definition", format!("task-definition/{family}:3")),
    ] {
        assert_eq!(
            probe["parsed"][kind],
            json!({"partition": "aws", "service": "ecs", "region": "eu-central-1",
                   "account": "123456789012", "resource": resource}),
            "{kind}: {}",
            probe["arns"][kind]
        );
    }

    // What the detector does not report is in the answers it read.
    assert_eq!(probe["task"]["AvailabilityZone"], "eu-central-1c");
    assert_eq!(probe["container"]["ContainerARN"], container_arn);
    assert!(probe["task"].get("TaskTags").is_none(), "{}", probe["task"]);
    let tagged = &probe["taskWithTags"];
    assert_eq!(
        tagged["TaskTags"],
        json!({"owner": "wrapper", "team": "from-run"}),
        "--tag wins over the definition's tag: {tagged}"
    );
    assert_eq!(tagged["ContainerInstanceTags"], json!({"rack": "r7"}));
    assert_eq!(tagged["TaskARN"], task_arn);
}
