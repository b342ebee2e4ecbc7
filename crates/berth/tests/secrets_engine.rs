//! Secrets and environment files on the real Engine, observed where the user would: inside the
//! container (it exits 42 when its environment holds the right values), in Docker's state (the log
//! options, no container created when a secret is missing), and by grepping everything berth
//! writes or answers (the agent's store file and log, its events, `berth inspect`, the metadata
//! endpoint) for the value.
//!
//! Run only through `scripts/test -p berth --test secrets_engine` (it sets up the test image).

mod common;

use berth_testkit::berth_run::{BerthRun, RunOutput, test_container};
use berth_testkit::{FamilyGuard, docker_cli, family_containers, unique_name};
use common::agent::{Agent, Introspection, Launch};
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The secret values: distinctive, so a grep finds nothing else.
const DB_VALUE: &str = "db-s3cr3t-5e1f0a";
const API_VALUE: &str = "api-s3cr3t-77c2d9";
const LOG_VALUE: &str = "7m";

const DB_ARN: &str =
    "arn:aws:secretsmanager:us-east-1:123456789012:secret:prod/db-AbC123:password::";
const API_PARAM: &str = "arn:aws:ssm:us-east-1:123456789012:parameter/prod/api-key";

/// A secrets directory (mode 0700) holding `prod/db` (JSON) and `prod/api-key`.
fn secrets_dir(root: &Path) -> PathBuf {
    let dir = root.join("secrets");
    std::fs::create_dir_all(dir.join("prod")).expect("mkdir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    std::fs::write(
        dir.join("prod/db"),
        format!("{{\"username\": \"app\", \"password\": \"{DB_VALUE}\"}}\n"),
    )
    .expect("write");
    std::fs::write(dir.join("prod/api-key"), format!("{API_VALUE}\n")).expect("write");
    std::fs::write(dir.join("log-size"), LOG_VALUE).expect("write");
    for f in ["prod/db", "prod/api-key", "log-size"] {
        std::fs::set_permissions(dir.join(f), std::fs::Permissions::from_mode(0o600))
            .expect("chmod");
    }
    dir
}

/// The container under test: `script`, with the two secrets and a secret log option.
fn with_secrets(script: &str) -> Value {
    let mut c = test_container("app", script);
    c["secrets"] = json!([
        {"name": "DB_PASSWORD", "valueFrom": DB_ARN},
        {"name": "API_KEY", "valueFrom": API_PARAM},
    ]);
    c["logConfiguration"] = json!({
        "logDriver": "json-file",
        "options": {"max-file": "2"},
        "secretOptions": [{"name": "max-size", "valueFrom": "log-size"}],
    });
    c
}

const CHECK_SECRETS: &str = r#"[ "$DB_PASSWORD" = db-s3cr3t-5e1f0a ] && [ "$API_KEY" = api-s3cr3t-77c2d9 ] && exit 42; env; exit 1"#;

fn run(dir: &Path, def: &Value, args: &[&str]) -> RunOutput {
    BerthRun::new(env!("CARGO_BIN_EXE_berth"), dir.join("task.json"), def)
        .prefer_cached()
        .data_dir(dir.join("data"))
        .args(args)
        .output()
}

fn summary_container(out: &RunOutput) -> Value {
    out.summary()
        .and_then(|s| s["containers"].as_array().and_then(|c| c.first().cloned()))
        .unwrap_or_else(|| panic!("no summary: {}\n{}", out.stdout, out.stderr))
}

#[test]
fn secrets_reach_the_container_environment_and_its_log_options() {
    let family = unique_name("berth-secrets-");
    let _guard = FamilyGuard(family.clone());
    let dir = tempfile::tempdir().expect("temp dir");
    let secrets = secrets_dir(dir.path());
    let def = json!({"family": family, "containerDefinitions": [with_secrets(CHECK_SECRETS)]});
    let out = run(
        dir.path(),
        &def,
        &["--keep", "--secrets-dir", secrets.to_str().expect("utf-8")],
    );
    assert_eq!(
        summary_container(&out)["exitCode"],
        42,
        "{}\n{}",
        out.stdout,
        out.stderr
    );
    // The secret log option is in Docker's log configuration, next to the plain one.
    let ids = family_containers(&family);
    assert_eq!(ids.len(), 1);
    let config = docker_cli(&[
        "inspect",
        "--format",
        "{{json .HostConfig.LogConfig}}",
        &ids[0],
    ]);
    let config: Value = serde_json::from_str(config.trim()).expect("JSON");
    assert_eq!(config["Type"], "json-file");
    assert_eq!(config["Config"]["max-size"], LOG_VALUE, "{config}");
    assert_eq!(config["Config"]["max-file"], "2", "{config}");
    // berth's own output names the references, never the values.
    for text in [&out.stdout, &out.stderr] {
        assert!(
            !text.contains(DB_VALUE) && !text.contains(API_VALUE),
            "{text}"
        );
    }
}

#[test]
fn an_unresolvable_secret_stops_the_task_before_any_container_is_created() {
    let family = unique_name("berth-secrets-missing-");
    let _guard = FamilyGuard(family.clone());
    let dir = tempfile::tempdir().expect("temp dir");
    let secrets = secrets_dir(dir.path());
    std::fs::remove_file(secrets.join("prod/db")).expect("rm");
    let mut side = test_container("side", "exit 0");
    side["essential"] = json!(false);
    let def =
        json!({"family": family, "containerDefinitions": [side, with_secrets(CHECK_SECRETS)]});
    let out = run(
        dir.path(),
        &def,
        &["--keep", "--secrets-dir", secrets.to_str().expect("utf-8")],
    );
    assert_eq!(out.code, Some(125), "{}\n{}", out.stdout, out.stderr);
    let d = secrets.display();
    let reason = format!(
        "ResourceInitializationError: unable to pull secrets or registry auth: secret DB_PASSWORD of container app ({DB_ARN}): not found; berth looked at file {d}/prod/db-AbC123, file {d}/prod/db"
    );
    let summary = out.summary().expect("a summary");
    assert_eq!(summary["stoppedReason"], reason.as_str(), "{summary}");
    // Nothing was created in Docker, not even the container without secrets (--keep would have
    // left it).
    assert_eq!(family_containers(&family), Vec::<String>::new());
}

#[test]
fn the_environment_provider_and_environment_files_follow_ecs_precedence() {
    let family = unique_name("berth-envfiles-");
    let _guard = FamilyGuard(family.clone());
    let dir = tempfile::tempdir().expect("temp dir");
    let s3 = dir.path().join("s3");
    std::fs::create_dir_all(s3.join("my-bucket/app")).expect("mkdir");
    std::fs::write(
        s3.join("my-bucket/app/first.env"),
        "# from S3\nFROM_FILE=first\nIN_BOTH_FILES=first\nOVERRIDDEN=file\nSECRET_WINS=file\n",
    )
    .expect("write");
    let local = dir.path().join("second.env");
    std::fs::write(&local, "IN_BOTH_FILES=second\nONLY_SECOND=b=c\n").expect("write");
    let script = r#"[ "$FROM_FILE" = first ] && [ "$IN_BOTH_FILES" = first ] && [ "$ONLY_SECOND" = b=c ] \
        && [ "$OVERRIDDEN" = env ] && [ "$SECRET_WINS" = from-env-provider ] \
        && exit 42; env; exit 1"#;
    let mut c = test_container("app", script);
    c["environment"] =
        json!([{"name": "OVERRIDDEN", "value": "env"}, {"name": "SECRET_WINS", "value": "env"}]);
    c["secrets"] = json!([{"name": "SECRET_WINS", "valueFrom": "/dev/token"}]);
    c["environmentFiles"] = json!([
        {"value": "arn:aws:s3:::my-bucket/app/first.env", "type": "s3"},
        {"value": local.display().to_string(), "type": "s3"},
    ]);
    let def = json!({"family": family, "containerDefinitions": [c]});
    let out = BerthRun::new(
        env!("CARGO_BIN_EXE_berth"),
        dir.path().join("task.json"),
        &def,
    )
    .prefer_cached()
    .data_dir(dir.path().join("data"))
    .args(["--secrets-from-env", "--environment-files-dir"])
    .arg(&s3)
    // The local file's directory: absolute paths are read only under an allowed one.
    .arg("--environment-files-allow")
    .arg(dir.path())
    .env("BERTH_SECRET_DEV_TOKEN", "from-env-provider")
    .output();
    assert_eq!(
        summary_container(&out)["exitCode"],
        42,
        "{}\n{}",
        out.stdout,
        out.stderr
    );
}

#[test]
fn a_secrets_directory_others_can_read_gets_a_warning() {
    let family = unique_name("berth-secrets-mode-");
    let _guard = FamilyGuard(family.clone());
    let dir = tempfile::tempdir().expect("temp dir");
    let secrets = secrets_dir(dir.path());
    std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let def = json!({"family": family, "containerDefinitions": [with_secrets(CHECK_SECRETS)]});
    let out = run(
        dir.path(),
        &def,
        &["--secrets-dir", secrets.to_str().expect("utf-8")],
    );
    assert_eq!(summary_container(&out)["exitCode"], 42, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("the secrets directory is accessible to other users")
            && out.stderr.contains("0755"),
        "{}",
        out.stderr
    );
}

#[test]
fn no_secret_value_in_the_store_log_events_inspect_or_metadata() {
    let family = unique_name("berth-secrets-grep-");
    let _guard = FamilyGuard(family.clone());
    let root = tempfile::tempdir().expect("temp dir");
    let secrets = secrets_dir(root.path());
    let out_dir = root.path().join("out");
    std::fs::create_dir(&out_dir).expect("mkdir");
    // The shared harness, launched as this test always was: `--introspection-addr off` (not ECS's
    // port 51678: this test does not read the introspection API), BERTH_LOG=debug, a secrets
    // directory.
    let launch = Launch {
        introspection: Introspection::Off,
        log_level: "debug",
        ..Launch::default()
    };
    let secrets_arg = secrets.to_str().expect("utf-8");
    let agent = Agent::start_launch("1h", launch, &["--secrets-dir", secrets_arg], &[]);
    // Its data directory: the store and the log.
    let data = agent.dir.path().to_path_buf();
    // Follow the events from before the submit.
    let events_file = root.path().join("events.jsonl");
    let mut events = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["events", "--agent"])
        .arg(agent.socket())
        .stdout(std::fs::File::create(&events_file).expect("events file"))
        .stderr(Stdio::null())
        .spawn()
        .expect("berth events");
    std::thread::sleep(Duration::from_millis(300));

    // The container saves what the metadata endpoint answers about the task and about itself
    // (whose LogOptions ECS shows) and the values it was given (the definition must not hold the
    // values, so they are compared outside), then exits 42.
    let script = r#"wget -qO /out/task.json "$ECS_CONTAINER_METADATA_URI_V4/task"; wget -qO /out/self.json "$ECS_CONTAINER_METADATA_URI_V4"; printf %s "$DB_PASSWORD" > /out/db; printf %s "$API_KEY" > /out/api; exit 42"#;
    let mut app = with_secrets(script);
    app["mountPoints"] = json!([{"sourceVolume": "out", "containerPath": "/out"}]);
    let def = json!({
        "family": family,
        "volumes": [{"name": "out", "host": {"sourcePath": out_dir.display().to_string()}}],
        "containerDefinitions": [app],
    });
    let file = root.path().join("task.json");
    std::fs::write(&file, def.to_string()).expect("write");
    let (code, id, err) = agent.cli(&["submit", file.to_str().expect("utf-8")]);
    assert_eq!(code, 0, "{err}");
    let id = id.trim().to_string();
    let t = Instant::now();
    let task = loop {
        let (code, out, err) = agent.cli(&["inspect", "--output", "json", &id]);
        assert_eq!(code, 0, "{err}");
        let v: Value = serde_json::from_str(&out).expect("JSON");
        if v["known"] == "STOPPED" {
            break out;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "{v}\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let v: Value = serde_json::from_str(&task).expect("JSON");
    assert_eq!(v["exitCode"], 42, "{v}\n{}", agent.log());
    std::thread::sleep(Duration::from_millis(300));
    let _ = events.kill();
    let _ = events.wait();

    let read = |p: &Path| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    assert_eq!(read(&out_dir.join("db")), DB_VALUE.as_bytes());
    assert_eq!(read(&out_dir.join("api")), API_VALUE.as_bytes());
    let task_meta = read(&out_dir.join("task.json"));
    let self_meta = read(&out_dir.join("self.json"));
    assert!(
        String::from_utf8_lossy(&self_meta).contains("\"max-file\":\"2\""),
        "the metadata shows the plain log options: {}",
        String::from_utf8_lossy(&self_meta)
    );
    let events_text = read(&events_file);
    assert!(
        String::from_utf8_lossy(&events_text).contains(&id),
        "the events were followed"
    );
    let sources: Vec<(&str, Vec<u8>)> = vec![
        ("the store file", read(&data.join("berth.redb"))),
        ("the agent's log", read(&data.join("agent.log"))),
        ("the events", events_text),
        ("berth inspect", task.into_bytes()),
        ("the metadata task answer", task_meta),
        ("the metadata container answer", self_meta),
    ];
    for (what, bytes) in &sources {
        for value in [DB_VALUE, API_VALUE] {
            assert!(
                !bytes.windows(value.len()).any(|w| w == value.as_bytes()),
                "{what} holds the secret value {value}: {}",
                String::from_utf8_lossy(bytes)
                    .lines()
                    .filter(|l| l.contains(value))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
        // The log option's value "7m" is too short to grep for; its key must not be shown.
        if what.starts_with("the metadata") {
            assert!(
                !String::from_utf8_lossy(bytes).contains("max-size"),
                "{what} shows the secret log option"
            );
        }
    }
    // What the store keeps is the reference (a grep of a file that holds nothing proves little).
    assert!(
        sources[0]
            .1
            .windows(DB_ARN.len())
            .any(|w| w == DB_ARN.as_bytes()),
        "the store holds the definition's valueFrom"
    );
}

#[test]
fn the_real_world_shape_validates_and_runs_from_local_sources() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../berth-model/tests/fixtures/shapes/secrets-web-worker.json"),
    )
    .expect("fixture");
    let mut def: Value = serde_json::from_str(&text).expect("JSON");
    let family = unique_name("berth-secrets-shape-");
    let _guard = FamilyGuard(family.clone());
    def["family"] = json!(family);
    for c in def["containerDefinitions"]
        .as_array_mut()
        .expect("containers")
    {
        c["dockerLabels"] = json!({"berth.test": "1"});
        c["image"] = json!(berth_testkit::test_image());
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let secrets = dir.path().join("secrets");
    let put = |path: &Path, text: &str| {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    };
    put(
        &secrets.join("rails/production/database_url"),
        "postgres://db/app\n",
    );
    put(&secrets.join("rails/production/secret_key_base"), "kb\n");
    put(&secrets.join("rails/redis"), r#"{"password": "r"}"#);
    put(&secrets.join("rails/smtp-Qw34Er"), r#"{"username": "u"}"#);
    std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let s3 = dir.path().join("s3/rails-config-111122223333/production");
    put(&s3.join("web.env"), "WEB_CONCURRENCY=2\n");
    put(&s3.join("worker.env"), "QUEUES=default\n");
    let s3_root = dir.path().join("s3");
    let source_args = [
        "--secrets-dir",
        secrets.to_str().expect("utf-8"),
        "--environment-files-dir",
        s3_root.to_str().expect("utf-8"),
    ];
    let file = dir.path().join("task.json");
    std::fs::write(&file, def.to_string()).expect("write");
    let validate = Command::new(env!("CARGO_BIN_EXE_berth"))
        .arg("validate")
        .args(source_args)
        .arg(&file)
        .output()
        .expect("berth validate");
    assert_eq!(
        validate.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&validate.stderr)
    );
    let out = run(dir.path(), &def, &source_args);
    let summary = out.summary().expect("summary");
    assert_eq!(summary["exitCode"], 42, "{summary}\n{}", out.stderr);
}
