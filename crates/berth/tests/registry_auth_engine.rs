//! Private registries against the real Engine and a real registry on 127.0.0.1 that wants a login
//! (htpasswd; scripts/test starts it and exports `BERTH_TEST_AUTH_*`). Each case pushes the test
//! image under a tag of its own, removes the local copy, and runs `berth run` on a task that needs
//! it: the image must come from the registry with the login of one credential source.
//!
//! Sources: ECS's engine auth data (`docker` and `dockercfg`), the Docker config file's `auths`,
//! and a credential helper of this test's own (a shell script that records its argument vector and
//! stdin; berth starts it by name from PATH, in a directory whose name holds a space and a `;`, so a
//! shell command line would break). Refusals: a wrong password and no login at all fail at once
//! (no retries: well under the first backoff) with the registry's message; a container whose
//! `repositoryCredentials` names a secret fails before anything is created while no secret
//! provider is wired.

use base64::Engine as _;
use berth_testkit::berth_run::{BerthRun, RunOutput};
use berth_testkit::{docker_cli as docker, test_image, unique_name};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The registry that wants a login, and that login (from scripts/test).
struct AuthRegistry {
    host: String,
    user: String,
    password: String,
}

fn auth_registry() -> AuthRegistry {
    let var = |k: &str| {
        std::env::var(k).ok().filter(|v| !v.is_empty()).unwrap_or_else(|| {
            panic!("{k} is not set: run the tests through scripts/test, which starts the htpasswd registry")
        })
    };
    AuthRegistry {
        host: var("BERTH_TEST_AUTH_REGISTRY"),
        user: var("BERTH_TEST_AUTH_USER"),
        password: var("BERTH_TEST_AUTH_PASSWORD"),
    }
}

/// A private image of this case's own in the registry (pushed with a Docker client configuration
/// of the test's own), absent locally; its local copy is removed again when dropped.
struct PrivateImage {
    name: String,
    _client: tempfile::TempDir,
}

impl PrivateImage {
    fn push(reg: &AuthRegistry, case: &str) -> PrivateImage {
        let name = format!("{}/berth-test/{case}:{}", reg.host, unique_name("t"));
        let client = tempfile::tempdir().expect("docker client dir");
        let login = Command::new("docker")
            .env("DOCKER_CONFIG", client.path())
            .args(["login", "-u", &reg.user, "--password-stdin", &reg.host])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write as _;
                if let Some(mut stdin) = child.stdin.take() {
                    stdin.write_all(reg.password.as_bytes())?;
                }
                child.wait_with_output()
            })
            .expect("docker login runs");
        assert!(
            login.status.success(),
            "docker login {}: {}",
            reg.host,
            String::from_utf8_lossy(&login.stderr)
        );
        docker(&["tag", &test_image(), &name]);
        let push = Command::new("docker")
            .env("DOCKER_CONFIG", client.path())
            .args(["push", "-q", &name])
            .output()
            .expect("docker push runs");
        assert!(
            push.status.success(),
            "docker push {name}: {}",
            String::from_utf8_lossy(&push.stderr)
        );
        docker(&["rmi", &name]);
        PrivateImage {
            name,
            _client: client,
        }
    }

    fn present_locally(&self) -> bool {
        Command::new("docker")
            .args(["image", "inspect", &self.name])
            .output()
            .is_ok_and(|o| o.status.success())
    }
}

impl Drop for PrivateImage {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["rmi", "-f", &self.name])
            .output();
    }
}

/// `berth run` of a one-container task on `image`, with every ambient credential source removed
/// (the case adds its own) and `--docker-config` at a file that does not exist unless the case
/// gives one.
fn run(
    dir: &Path,
    image: &str,
    extra: Value,
    setup: impl FnOnce(BerthRun) -> BerthRun,
) -> RunOutput {
    let mut c = json!({
        "name": "app",
        "image": image,
        "command": ["sh", "-c", "echo private image runs"],
        "dockerLabels": {"berth.test": "1"},
        "stopTimeout": 1,
    });
    if let (Some(c), Some(extra)) = (c.as_object_mut(), extra.as_object()) {
        c.extend(extra.clone());
    }
    let def = json!({"family": unique_name("berth-regauth-"), "containerDefinitions": [c]});
    let file = dir.join(format!("{}.json", unique_name("task-")));
    let run = BerthRun::new(env!("CARGO_BIN_EXE_berth"), file, &def)
        .args(["--pull-behavior", "always"])
        .data_dir(dir.join("data"))
        .env_remove("ECS_ENGINE_AUTH_TYPE")
        .env_remove("ECS_ENGINE_AUTH_DATA")
        .env_remove("BERTH_DOCKER_CONFIG")
        .env_remove("ECS_IMAGE_PULL_BEHAVIOR")
        .env_remove("BERTH_IMAGE_PULL_BEHAVIOR")
        .env("DOCKER_CONFIG", dir.join("no-docker-client"));
    setup(run).output()
}

fn summary(out: &RunOutput) -> Value {
    out.summary().unwrap_or_else(|| {
        panic!(
            "no summary; stdout:\n{}\nstderr:\n{}",
            out.stdout, out.stderr
        )
    })
}

/// The task ran its container from the private image, which berth pulled.
fn assert_pulled_and_ran(out: &RunOutput, image: &PrivateImage) {
    let s = summary(out);
    assert_eq!(out.code, Some(0), "summary {s}; stderr:\n{}", out.stderr);
    assert_eq!(s["containers"][0]["exitCode"], 0, "{s}");
    assert!(
        out.lines()
            .iter()
            .any(|l| l["event"] == "pull" && l["phase"] == "done"),
        "berth pulled it: {}",
        out.stdout
    );
    assert!(image.present_locally(), "{} is in Docker now", image.name);
}

fn basic(user: &str, password: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
}

#[test]
fn engine_auth_data_of_type_docker_logs_in() {
    let reg = auth_registry();
    let image = PrivateImage::push(&reg, "engine-docker");
    let dir = tempfile::tempdir().expect("tmp");
    let data = json!({ reg.host.clone(): {"username": reg.user, "password": reg.password, "email": "x@example.com"} });
    let out = run(dir.path(), &image.name, json!({}), |r| {
        r.env("ECS_ENGINE_AUTH_TYPE", "docker")
            .env("ECS_ENGINE_AUTH_DATA", data.to_string())
    });
    assert_pulled_and_ran(&out, &image);
    assert!(
        !out.stdout.contains(&reg.password) && !out.stderr.contains(&reg.password),
        "the password is never printed"
    );
}

#[test]
fn engine_auth_data_of_type_dockercfg_logs_in() {
    let reg = auth_registry();
    let image = PrivateImage::push(&reg, "engine-dockercfg");
    let dir = tempfile::tempdir().expect("tmp");
    let data = json!({ format!("http://{}/v1/", reg.host): {"auth": basic(&reg.user, &reg.password), "email": "x@example.com"} });
    let out = run(dir.path(), &image.name, json!({}), |r| {
        r.env("ECS_ENGINE_AUTH_TYPE", "dockercfg")
            .env("ECS_ENGINE_AUTH_DATA", data.to_string())
    });
    assert_pulled_and_ran(&out, &image);
}

#[test]
fn the_docker_config_files_auths_log_in() {
    let reg = auth_registry();
    let image = PrivateImage::push(&reg, "config-auths");
    let dir = tempfile::tempdir().expect("tmp");
    let config = dir.path().join("config.json");
    std::fs::write(
        &config,
        json!({"auths": {reg.host.clone(): {"auth": basic(&reg.user, &reg.password)}}}).to_string(),
    )
    .expect("config");
    let out = run(dir.path(), &image.name, json!({}), |r| {
        r.arg("--docker-config").arg(&config)
    });
    assert_pulled_and_ran(&out, &image);
}

#[test]
fn docker_config_is_found_through_docker_config_dir_by_default() {
    let reg = auth_registry();
    let image = PrivateImage::push(&reg, "config-default");
    let dir = tempfile::tempdir().expect("tmp");
    let client = dir.path().join("client");
    std::fs::create_dir(&client).expect("dir");
    std::fs::write(
        client.join("config.json"),
        json!({"auths": {format!("https://{}", reg.host): {"auth": basic(&reg.user, &reg.password)}}})
            .to_string(),
    )
    .expect("config");
    let out = run(dir.path(), &image.name, json!({}), |r| {
        r.env("DOCKER_CONFIG", &client)
    });
    assert_pulled_and_ran(&out, &image);
}

#[test]
fn engine_auth_data_comes_before_the_docker_config_file() {
    let reg = auth_registry();
    let image = PrivateImage::push(&reg, "precedence");
    let dir = tempfile::tempdir().expect("tmp");
    let config = dir.path().join("config.json");
    std::fs::write(
        &config,
        json!({"auths": {reg.host.clone(): {"auth": basic(&reg.user, "not-the-password")}}})
            .to_string(),
    )
    .expect("config");
    let data = json!({ reg.host.clone(): {"username": reg.user, "password": reg.password} });
    let out = run(dir.path(), &image.name, json!({}), |r| {
        r.env("ECS_ENGINE_AUTH_TYPE", "docker")
            .env("ECS_ENGINE_AUTH_DATA", data.to_string())
            .arg("--docker-config")
            .arg(&config)
    });
    assert_pulled_and_ran(&out, &image);
}

/// A credential helper `docker-credential-berthtest` in a directory whose name a shell would split,
/// recording its arguments (one per line) and its stdin.
fn helper(dir: &Path, reg: &AuthRegistry) -> (PathBuf, PathBuf) {
    let bin = dir.join("helper bin;x");
    std::fs::create_dir(&bin).expect("helper dir");
    let record = dir.join("helper-record");
    let script = format!(
        "#!/bin/sh\n\
         # berth's test credential helper: record argv and stdin, answer with the registry's login.\n\
         printf '%s\\n' \"$@\" > '{record}.args'\n\
         cat > '{record}.stdin'\n\
         printf '{{\"ServerURL\": \"%s\", \"Username\": \"%s\", \"Secret\": \"%s\"}}' \"$(cat '{record}.stdin')\" '{user}' '{password}'\n",
        record = record.display(),
        user = reg.user,
        password = reg.password,
    );
    let path = bin.join("docker-credential-berthtest");
    std::fs::write(&path, script).expect("helper");
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    (bin, record)
}

fn path_with(dir: &Path) -> std::ffi::OsString {
    let mut paths = vec![dir.to_path_buf()];
    paths.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(paths).expect("PATH")
}

#[test]
fn a_credential_helper_is_run_with_an_argument_vector() {
    let reg = auth_registry();
    let image = PrivateImage::push(&reg, "cred-helper");
    let dir = tempfile::tempdir().expect("tmp");
    let (bin, record) = helper(dir.path(), &reg);
    let config = dir.path().join("config.json");
    // The helper is named for this registry; `auths` has a wrong login that must not be used.
    std::fs::write(
        &config,
        json!({"credHelpers": {reg.host.clone(): "berthtest"},
               "auths": {reg.host.clone(): {"auth": basic(&reg.user, "wrong")}}})
        .to_string(),
    )
    .expect("config");
    let out = run(dir.path(), &image.name, json!({}), |r| {
        r.env("PATH", path_with(&bin))
            .arg("--docker-config")
            .arg(&config)
    });
    assert_pulled_and_ran(&out, &image);
    let args = std::fs::read_to_string(format!("{}.args", record.display())).expect("helper ran");
    assert_eq!(args, "get\n", "one argument, `get`");
    let stdin = std::fs::read_to_string(format!("{}.stdin", record.display())).expect("stdin");
    assert_eq!(stdin, reg.host, "the server URL on stdin");
}

#[test]
fn the_creds_store_helper_serves_every_registry() {
    let reg = auth_registry();
    let image = PrivateImage::push(&reg, "creds-store");
    let dir = tempfile::tempdir().expect("tmp");
    let (bin, _record) = helper(dir.path(), &reg);
    let config = dir.path().join("config.json");
    std::fs::write(&config, json!({"credsStore": "berthtest"}).to_string()).expect("config");
    let out = run(dir.path(), &image.name, json!({}), |r| {
        r.env("PATH", path_with(&bin))
            .arg("--docker-config")
            .arg(&config)
    });
    assert_pulled_and_ran(&out, &image);
}

/// The first retry would wait at least half of the 1.1 s minimum backoff; a whole `berth run`
/// that fails its one pull takes well under that on top of its own start.
const NO_RETRY_BOUND: Duration = Duration::from_secs(4);

#[test]
fn a_wrong_password_fails_at_once_with_the_registrys_message() {
    let reg = auth_registry();
    let image = PrivateImage::push(&reg, "wrong-password");
    let dir = tempfile::tempdir().expect("tmp");
    let data = json!({ reg.host.clone(): {"username": reg.user, "password": "not-the-password"} });
    let t = Instant::now();
    let out = run(dir.path(), &image.name, json!({}), |r| {
        r.env("ECS_ENGINE_AUTH_TYPE", "docker")
            .env("ECS_ENGINE_AUTH_DATA", data.to_string())
            .args(["--pull-attempts", "5"])
    });
    let took = t.elapsed();
    let s = summary(&out);
    assert_eq!(out.code, Some(125), "{s}");
    let reason = s["stoppedReason"].as_str().unwrap_or_default();
    assert_eq!(
        reason,
        format!(
            "CannotPullContainerError: unauthorized: authentication required (berth sent the login of user {:?} for {} from ECS_ENGINE_AUTH_DATA)",
            reg.user, reg.host
        ),
        "stderr:\n{}",
        out.stderr
    );
    assert!(took < NO_RETRY_BOUND, "no retries: took {took:?}");
    assert_eq!(
        out.stderr.matches("pull failed").count(),
        1,
        "one attempt:\n{}",
        out.stderr
    );
    assert_eq!(
        s["containers"][0]["dockerId"],
        Value::Null,
        "nothing created"
    );
    assert!(!out.stdout.contains("not-the-password") && !out.stderr.contains("not-the-password"));
}

#[test]
fn no_login_fails_at_once_and_says_where_to_give_one() {
    let reg = auth_registry();
    let image = PrivateImage::push(&reg, "no-login");
    let dir = tempfile::tempdir().expect("tmp");
    let t = Instant::now();
    let out = run(dir.path(), &image.name, json!({}), |r| r);
    let took = t.elapsed();
    let s = summary(&out);
    assert_eq!(out.code, Some(125), "{s}");
    let reason = s["stoppedReason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("CannotPullContainerError: ")
            && reason.contains("no basic auth credentials")
            && reason.contains(&format!("(berth found no login for {}: give one with repositoryCredentials, ECS_ENGINE_AUTH_TYPE/ECS_ENGINE_AUTH_DATA or the Docker config file (--docker-config))", reg.host)),
        "{reason}"
    );
    assert!(took < NO_RETRY_BOUND, "no retries: took {took:?}");
}

#[test]
fn repository_credentials_are_read_through_the_secrets_directory() {
    use std::os::unix::fs::PermissionsExt as _;
    let reg = auth_registry();
    let image = PrivateImage::push(&reg, "credentials-parameter");
    let dir = tempfile::tempdir().expect("tmp");
    let secrets = dir.path().join("secrets");
    std::fs::create_dir(&secrets).expect("mkdir");
    std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    // ECS's registry secret: {"username", "password"}, here in the file the ARN maps to.
    std::fs::write(
        secrets.join("registry"),
        json!({"username": reg.user, "password": reg.password}).to_string(),
    )
    .expect("write");
    let secrets_arg = secrets.to_str().expect("utf-8").to_string();
    let out = run(
        dir.path(),
        &image.name,
        json!({"repositoryCredentials": {"credentialsParameter": "arn:aws:secretsmanager:eu-west-1:111122223333:secret:registry"}}),
        |r| r.args(["--secrets-dir", secrets_arg.as_str()]),
    );
    assert_pulled_and_ran(&out, &image);
}

#[test]
fn repository_credentials_that_cannot_be_read_stop_the_task_before_anything_is_created() {
    let reg = auth_registry();
    let image = PrivateImage::push(&reg, "credentials-parameter-missing");
    let dir = tempfile::tempdir().expect("tmp");
    // Even with a working login elsewhere: the container asked for its own, which berth cannot
    // read, so it must not silently use another.
    let data = json!({ reg.host.clone(): {"username": reg.user, "password": reg.password} });
    let out = run(
        dir.path(),
        &image.name,
        json!({"repositoryCredentials": {"credentialsParameter": "arn:aws:secretsmanager:eu-west-1:111122223333:secret:registry"}}),
        |r| {
            r.env("ECS_ENGINE_AUTH_TYPE", "docker")
                .env("ECS_ENGINE_AUTH_DATA", data.to_string())
        },
    );
    let s = summary(&out);
    assert_eq!(out.code, Some(125), "{s}");
    let reason = s["stoppedReason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("ResourceInitializationError: unable to pull secrets or registry auth: repositoryCredentials.credentialsParameter \"arn:aws:secretsmanager:eu-west-1:111122223333:secret:registry\": no secret source is configured; start berth with --secrets-dir DIR"),
        "{reason}"
    );
    assert_eq!(
        s["containers"][0]["dockerId"],
        Value::Null,
        "nothing created"
    );
    assert!(!image.present_locally(), "nothing pulled");
}

#[test]
fn malformed_engine_auth_data_stops_berth_before_the_task() {
    let dir = tempfile::tempdir().expect("tmp");
    let out = run(dir.path(), &test_image(), json!({}), |r| {
        r.env("ECS_ENGINE_AUTH_TYPE", "dockercfg").env(
            "ECS_ENGINE_AUTH_DATA",
            r#"{"h:1": {"auth": "not base64!"}}"#,
        )
    });
    assert_ne!(out.code, Some(0));
    assert!(out.summary().is_none(), "no task ran: {}", out.stdout);
    assert!(
        out.stderr.contains("ECS_ENGINE_AUTH_DATA (type dockercfg): the login for \"h:1\" is malformed: its \"auth\" is not base64"),
        "{}",
        out.stderr
    );
}

fn login(user: &str, password: &str, host: &str) -> berth_engine::RegistryAuth {
    berth_engine::RegistryAuth {
        username: user.to_string(),
        password: password.to_string(),
        identity_token: None,
        server: host.to_string(),
        source: "the test".to_string(),
    }
}

/// Straight on the Docker runtime: pulls of one image at the same time with a wrong login, the
/// right one and none are not merged into one — each gets the registry's answer to its own login.
#[tokio::test]
async fn concurrent_pulls_with_different_logins_do_not_share_a_result() {
    use berth_engine::{Runtime, RuntimeError};
    let reg = auth_registry();
    let image = PrivateImage::push(&reg, "merged");
    let docker = berth_docker::connect(None).await.expect("docker");
    let rt = berth_docker::DockerRuntime::new(docker);
    let (right, wrong) = (
        login(&reg.user, &reg.password, &reg.host),
        login(&reg.user, "not-the-password", &reg.host),
    );
    let (a, b, c, d) = tokio::join!(
        rt.pull(&image.name, Some(&wrong), None),
        rt.pull(&image.name, Some(&right), None),
        rt.pull(&image.name, None, None),
        rt.pull(&image.name, Some(&right), None),
    );
    let refused = |r: &Result<(), RuntimeError>, what: &str| match r {
        Err(RuntimeError::PullFailed {
            message, retriable, ..
        }) => {
            assert!(!retriable, "{what}: {message}");
            message.clone()
        }
        other => panic!("{what}: expected a refusal, got {other:?}"),
    };
    assert!(
        refused(&a, "wrong password").starts_with("unauthorized: authentication required"),
        "{a:?}"
    );
    b.expect("the right login pulls");
    d.expect("the same right login (merged or not) pulls");
    assert!(
        refused(&c, "no login").contains("no basic auth credentials"),
        "{c:?}"
    );
    assert!(image.present_locally());
}
