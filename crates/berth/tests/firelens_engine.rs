//! FireLens on the real Engine through `berth run`: a log router (a tiny image of the test's own
//! that speaks the fluentd forward protocol, `tests/support/fluent_sink.rs`) receives an app
//! container's stdout lines from Docker's fluentd driver, with the app's tag and the ECS metadata
//! fields of the generated configuration; the configuration it read where Fluent Bit reads it is
//! ECS's layout; Docker holds the fluentd driver with ECS's options; a secret log option reaches
//! the router's environment (as `<name>_<index>`, the configuration naming the variable), never
//! Docker's log driver.
//!
//! Run only through `scripts/test -p berth --test firelens_engine`.

use berth_testkit::berth_run::{BerthRun, test_container};
use berth_testkit::{FamilyGuard, TEST_LABEL, docker_cli, family_containers, unique_name};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

/// Removes the test's own image when dropped.
struct ImageGuard(String);

impl Drop for ImageGuard {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rmi", "-f", &self.0]).output();
    }
}

/// Build the sink (std only, static) with `rustc` and import it as a one-file image.
fn sink_image(dir: &Path) -> ImageGuard {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/fluent_sink.rs");
    let root = dir.join("rootfs");
    std::fs::create_dir_all(&root).expect("rootfs");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let out = Command::new(rustc)
        .args([
            "--edition",
            "2021",
            "-O",
            "-C",
            "target-feature=+crt-static",
            "-o",
        ])
        .arg(root.join("fluent-sink"))
        .arg(&source)
        .output()
        .expect("run rustc");
    assert!(
        out.status.success(),
        "rustc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tar = dir.join("sink.tar");
    let out = Command::new("tar")
        .arg("-C")
        .arg(&root)
        .arg("-cf")
        .arg(&tar)
        .arg("fluent-sink")
        .output()
        .expect("tar");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let name = format!("{}:latest", unique_name("berth-test/fluent-sink-"));
    let guard = ImageGuard(name.clone());
    docker_cli(&[
        "import",
        "--change",
        r#"ENTRYPOINT ["/fluent-sink"]"#,
        &tar.display().to_string(),
        &name,
    ]);
    guard
}

/// The value of the app's secret log option.
const SECRET: &str = "fl-s3cr3t-value";

#[test]
fn an_apps_stdout_reaches_the_router_with_its_tag_and_the_ecs_metadata() {
    let family = unique_name("firelens-");
    let _g = FamilyGuard(family.clone());
    let dir = tempfile::tempdir().expect("temp dir");
    let image = sink_image(dir.path());
    let out_dir = dir.path().join("out");
    std::fs::create_dir_all(&out_dir).expect("out dir");

    let mut app = test_container("app", "echo line-one; echo line-two; sleep 2");
    app["logConfiguration"] = json!({
        "logDriver": "awsfirelens",
        "options": {"Name": "stdout", "log-driver-buffer-limit": "1048576"},
        "secretOptions": [{"name": "apikey", "valueFrom": "/fl/logkey"}]
    });
    let router = json!({
        "name": "log_router",
        "image": image.0,
        "essential": false,
        "stopTimeout": 1,
        "dockerLabels": {TEST_LABEL: "1"},
        "firelensConfiguration": {
            "type": "fluentbit",
            "options": {
                "enable-ecs-log-metadata": "true",
                "config-file-type": "file",
                "config-file-value": "/extra.conf"
            }
        },
        "mountPoints": [{"sourceVolume": "out", "containerPath": "/out"}]
    });
    let def = json!({
        "family": family,
        "containerDefinitions": [app, router],
        "volumes": [{"name": "out", "host": {"sourcePath": out_dir.display().to_string()}}]
    });
    let data = dir.path().join("data");
    let out = BerthRun::new(env!("CARGO_BIN_EXE_berth"), dir.path().join("t.json"), &def)
        .prefer_cached()
        .data_dir(&data)
        .args(["--keep", "--cluster", "berth-fl", "--secrets-from-env"])
        .env("BERTH_SECRET_FL_LOGKEY", SECRET)
        .output();
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);

    // Docker's view: the app logs through the fluentd driver to the task's socket.
    let ids = family_containers(&family);
    let app_id = ids
        .iter()
        .find(|id| {
            docker_cli(&[
                "inspect",
                "-f",
                "{{index .Config.Labels \"berth.container\"}}",
                id,
            ])
            .trim()
                == "app"
        })
        .expect("the app container")
        .clone();
    let task_id = docker_cli(&[
        "inspect",
        "-f",
        "{{index .Config.Labels \"berth.task\"}}",
        &app_id,
    ])
    .trim()
    .to_string();
    let log: Value = serde_json::from_str(
        docker_cli(&["inspect", "-f", "{{json .HostConfig.LogConfig}}", &app_id]).trim(),
    )
    .expect("LogConfig JSON");
    let tag = format!("app-firelens-{task_id}");
    assert_eq!(log["Type"], "fluentd", "{log}");
    assert_eq!(log["Config"]["tag"], tag.as_str(), "{log}");
    assert_eq!(
        log["Config"]["fluentd-address"],
        format!(
            "unix://{}/tasks/{task_id}/firelens/socket/fluent.sock",
            data.display()
        )
        .as_str(),
        "{log}"
    );
    assert_eq!(log["Config"]["fluentd-buffer-limit"], "1048576", "{log}");
    assert_eq!(log["Config"]["fluentd-async"], "true", "{log}");
    assert!(
        !log.to_string().contains(SECRET) && log["Config"].get("apikey").is_none(),
        "the secret log option goes to the router, not to Docker's driver: {log}"
    );
    // ECS: the router's environment carries it, as `<name>_<container index>`.
    let router_id = ids
        .iter()
        .find(|id| **id != app_id)
        .expect("the router container");
    let env = docker_cli(&["inspect", "-f", "{{json .Config.Env}}", router_id]);
    assert!(env.contains(&format!("\"apikey_0={SECRET}\"")), "{env}");

    // The router's view: the configuration where Fluent Bit reads it, in ECS's layout.
    let arn = format!("arn:aws:ecs:local-1:000000000000:task/berth-fl/{task_id}");
    let config = std::fs::read_to_string(out_dir.join("fluent-bit.conf")).expect("the config");
    let want = format!(
        "
[INPUT]
    Name forward
    Mem_Buf_Limit 25MB
    unix_path /var/run/fluent.sock

[INPUT]
    Name forward
    Listen 0.0.0.0
    Port 24224

[INPUT]
    Name tcp
    Tag firelens-healthcheck
    Listen 127.0.0.1
    Port 8877

[FILTER]
    Name record_modifier
    Match *
    Record ecs_cluster berth-fl
    Record ecs_task_arn {arn}
    Record ecs_task_definition {family}:0

@INCLUDE /extra.conf

[OUTPUT]
    Name null
    Match firelens-healthcheck

[OUTPUT]
    Name stdout
    Match app-firelens*
    apikey ${{apikey_0}}
"
    );
    assert_eq!(config, want);

    // What it received: the app's lines, tagged, with the metadata fields.
    let records = std::fs::read_to_string(out_dir.join("records.jsonl")).unwrap_or_default();
    let records: Vec<Value> = records
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let lines: Vec<&str> = records
        .iter()
        .filter_map(|r| r["record"]["log"].as_str())
        .collect();
    assert_eq!(lines, ["line-one", "line-two"], "{records:?}");
    for r in &records {
        assert_eq!(r["tag"], tag.as_str(), "{r}");
        assert_eq!(r["record"]["source"], "stdout", "{r}");
        assert_eq!(r["record"]["ecs_cluster"], "berth-fl", "{r}");
        assert_eq!(r["record"]["ecs_task_arn"], arn.as_str(), "{r}");
        assert_eq!(
            r["record"]["ecs_task_definition"],
            format!("{family}:0").as_str(),
            "{r}"
        );
    }
}
