//! `berth validate` end to end: the built binary on every example (exit 0), on every invalid
//! fixture of berth-model (exit 65, standard error exactly the expected problems), on standard
//! input, and on files that cannot be read (exit 66).

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn berth(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(args)
        .current_dir(workspace())
        .stdin(Stdio::null())
        .output()
        .expect("running berth")
}

fn berth_stdin(args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(args)
        .current_dir(workspace())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running berth");
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(input)
        .expect("writing stdin");
    child.wait_with_output().expect("waiting for berth")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn json_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_example_is_valid() {
    let examples = json_files(&workspace().join("examples"));
    assert!(examples.len() >= 3, "examples: {examples:?}");
    for file in examples {
        let out = berth(&["validate", file.to_str().expect("UTF-8 path")]);
        let stdout = text(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}: stdout {stdout} stderr {}",
            file.display(),
            text(&out.stderr)
        );
        assert_eq!(stdout.lines().count(), 1, "{stdout}");
        assert!(stdout.contains(" is valid: "), "{stdout}");
    }
}

#[test]
fn web_app_summary() {
    let out = berth(&["validate", "examples/web-app.json"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        text(&out.stdout),
        "web-app:1 is valid: 3 containers (1 essential), 1 volume, network mode bridge\n"
    );
    assert_eq!(text(&out.stderr), "");
}

#[test]
fn warnings_go_to_stderr() {
    let out = berth(&["validate", "examples/describe-task-definition.json"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        text(&out.stdout),
        "greeter:3 is valid: 1 container (1 essential), 0 volumes, network mode bridge; \
         7 warnings (see standard error)\n"
    );
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 7, "{stderr}");
    assert!(
        stderr
            .lines()
            .all(|l| l.starts_with("warning: taskDefinition."))
    );
    assert!(
        stderr
            .lines()
            .any(|l| l == "warning: taskDefinition.status: not used by berth, ignored")
    );
}

#[test]
fn every_invalid_fixture_is_rejected_with_its_expected_problems() {
    let dir = workspace().join("crates/berth-model/tests/fixtures/invalid");
    let fixtures = json_files(&dir);
    assert!(fixtures.len() >= 20);
    for file in fixtures {
        let expected = fs::read_to_string(file.with_extension("expected"))
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let out = berth(&["validate", file.to_str().expect("UTF-8 path")]);
        assert_eq!(out.status.code(), Some(65), "{}", file.display());
        // Problems first, exactly; then the warnings about ignored fields that may explain them.
        let stderr = text(&out.stderr);
        let problems: String = stderr
            .lines()
            .filter(|l| !l.starts_with("warning: "))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(problems, expected, "{}", file.display());
        assert!(
            stderr.starts_with(&expected),
            "warnings come after the problems: {stderr}"
        );
        assert_eq!(text(&out.stdout), "", "{}", file.display());
    }
}

#[test]
fn an_invalid_definition_also_shows_the_fields_it_ignored() {
    let file =
        workspace().join("crates/berth-model/tests/fixtures/invalid/unsupported-fields.json");
    let out = berth(&["validate", file.to_str().expect("UTF-8 path")]);
    assert_eq!(out.status.code(), Some(65));
    assert!(
        text(&out.stderr).ends_with(
            "warning: proxyConfiguration: App Mesh's proxy configuration is an AWS feature: berth starts the proxy container as an ordinary container of the task and redirects no traffic through it\n"
        ),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn graph_text() {
    let out = berth(&["validate", "examples/web-app.json", "--graph", "text"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        text(&out.stdout),
        "\
start order for web-app:1 (each container starts after the ones it waits for)
  1. init     (essential: no)   berth-test/busybox:latest
  2. sidecar  (essential: no)   berth-test/busybox:latest  health check: CMD-SHELL true
  3. web      (essential: yes)  berth-test/busybox:latest
     waits for init: SUCCESS (until it has exited with code 0)
     waits for sidecar: HEALTHY (until its health check passes: CMD-SHELL true)
"
    );
}

#[test]
fn graph_dot() {
    let out = berth(&["validate", "examples/web-app.json", "--graph=dot"]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("digraph \"web-app\" {\n"), "{stdout}");
    assert!(stdout.contains("  \"web\" -> \"init\" [label=\"SUCCESS\"];\n"));
    assert!(stdout.ends_with("}\n"));
}

#[test]
fn graph_of_an_invalid_definition_is_not_drawn() {
    let out = berth(&[
        "validate",
        "crates/berth-model/tests/fixtures/invalid/dependency-cycle.json",
        "--graph",
        "text",
    ]);
    assert_eq!(out.status.code(), Some(65));
    assert_eq!(text(&out.stdout), "");
}

#[test]
fn unknown_graph_format_is_a_usage_error() {
    let out = berth(&["validate", "examples/web-app.json", "--graph", "svg"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("possible values: dot, text"), "{stderr}");
}

#[test]
fn reads_standard_input() {
    let web_app = fs::read(workspace().join("examples/web-app.json")).expect("example");
    let out = berth_stdin(&["validate", "-"], &web_app);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("web-app:1 is valid: "));

    let out = berth_stdin(&["validate", "-"], br#"{"family": "x"}"#);
    assert_eq!(out.status.code(), Some(65));
    assert_eq!(
        text(&out.stderr),
        "containerDefinitions: missing required field\n"
    );

    let out = berth_stdin(&["validate", "-"], b"{\"family\": ");
    assert_eq!(out.status.code(), Some(65));
    assert_eq!(
        text(&out.stderr),
        "invalid JSON at line 1, column 11: EOF while parsing a value\n"
    );
}

#[test]
fn unreadable_file() {
    let out = berth(&["validate", "no/such/task.json"]);
    assert_eq!(out.status.code(), Some(66));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("berth: error: cannot read no/such/task.json: "),
        "{stderr}"
    );
    assert_eq!(text(&out.stdout), "");

    let out = berth(&["validate", "examples"]);
    assert_eq!(out.status.code(), Some(66));
    assert!(text(&out.stderr).starts_with("berth: error: cannot read examples: "));
}

#[test]
fn help_explains_output_and_exit_status() {
    let out = berth(&["validate", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = text(&out.stdout);
    for needle in [
        "Use `-` to read standard input",
        "--graph <FORMAT>",
        "exit status 65",
        "describe-task-definition",
    ] {
        assert!(help.contains(needle), "missing {needle:?} in\n{help}");
    }
}

/// `berth validate` with the log policy of `args` (and an empty configuration file, so the
/// machine's own /etc/berth/berth.toml cannot change the answer), `env` set.
fn validate_logs(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["validate", "--config", "/dev/null"])
        .args(args)
        .arg("crates/berth-model/tests/fixtures/shapes/ec2-awslogs.json")
        .current_dir(workspace())
        .env_remove("ECS_AVAILABLE_LOGGING_DRIVERS")
        .env_remove("BERTH_AVAILABLE_LOG_DRIVERS")
        .env_remove("BERTH_LOG_DRIVER_FALLBACK")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("running berth")
}

/// The `logDriver` warnings of a validate run.
fn log_warnings(out: &Output) -> Vec<String> {
    text(&out.stderr)
        .lines()
        .filter(|l| l.contains(".logConfiguration.logDriver"))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_log_driver_the_host_lacks_is_replaced_with_one_warning_naming_the_fix() {
    let out = validate_logs(&[], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        log_warnings(&out),
        [
            "warning: containerDefinitions[0].logConfiguration.logDriver: log driver \"awslogs\" is not available on this host (available: json-file, local, none); the container logs to \"json-file\" instead without its options (awslogs-create-group, awslogs-group, awslogs-region, awslogs-stream-prefix); declare the driver available with --available-log-drivers (ECS_AVAILABLE_LOGGING_DRIVERS), or choose the replacement with --log-driver-fallback",
            "warning: containerDefinitions[1].logConfiguration.logDriver: log driver \"syslog\" is not available on this host (available: json-file, local, none); the container logs to \"json-file\" instead without its options (syslog-address, tag); declare the driver available with --available-log-drivers (ECS_AVAILABLE_LOGGING_DRIVERS), or choose the replacement with --log-driver-fallback",
        ]
    );
    assert_eq!(
        text(&out.stdout),
        "shop-api is valid: 3 containers (1 essential), 0 volumes, network mode bridge; 3 warnings (see standard error)\n"
    );

    // Declared available (ECS's variable, the flag, the BERTH_ variable): passed through.
    let out = validate_logs(
        &[],
        &[(
            "ECS_AVAILABLE_LOGGING_DRIVERS",
            r#"["json-file","awslogs","syslog"]"#,
        )],
    );
    assert_eq!(log_warnings(&out), Vec::<String>::new());
    let out = validate_logs(&["--available-log-drivers", "syslog"], &[]);
    let warned = log_warnings(&out);
    // json-file is not declared, but it is the fallback, which is always available.
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(
        warned[0].contains("\"awslogs\" is not available on this host (available: syslog)"),
        "{warned:?}"
    );
    let out = validate_logs(
        &["--log-driver-fallback", "local"],
        &[("BERTH_AVAILABLE_LOG_DRIVERS", "awslogs,json-file")],
    );
    let warned = log_warnings(&out);
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(
        warned[0].contains("\"syslog\" is not available on this host (available: awslogs, json-file); the container logs to \"local\" instead"),
        "{warned:?}"
    );
}

#[test]
fn bad_log_policies_are_clear_errors() {
    let out = validate_logs(&["--available-log-drivers", "[json-file]"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("invalid value '[json-file]' for '--available-log-drivers <LIST>': expected a JSON list of log driver names such as [\"json-file\",\"syslog\"] (ECS's syntax), or names separated by commas"),
        "{}",
        text(&out.stderr)
    );
    let out = validate_logs(
        &[],
        &[("ECS_AVAILABLE_LOGGING_DRIVERS", "json-file syslog")],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "berth: error: ECS_AVAILABLE_LOGGING_DRIVERS=json-file syslog: \"json-file syslog\" is not a log driver name: use only letters, digits and . _ - / : @\n"
    );
    let out = validate_logs(&["--log-driver-fallback", "awsfirelens"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("the fallback cannot be awsfirelens"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn with_a_secret_source_validate_reads_every_secret_as_run_would() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().expect("temp dir");
    let secrets = dir.path().join("secrets");
    fs::create_dir_all(secrets.join("prod")).expect("mkdir");
    fs::set_permissions(&secrets, fs::Permissions::from_mode(0o700)).expect("chmod");
    fs::write(
        secrets.join("prod/db"),
        "{\"password\": \"v4lue-never-shown\"}\n",
    )
    .expect("write");
    fs::set_permissions(secrets.join("prod/db"), fs::Permissions::from_mode(0o600)).expect("chmod");
    let task = dir.path().join("task.json");
    let write = |value_from: &str| {
        fs::write(
            &task,
            format!(
                r#"{{"family": "f", "containerDefinitions": [{{"name": "web", "image": "i", "secrets": [{{"name": "DB", "valueFrom": "{value_from}"}}]}}]}}"#
            ),
        )
        .expect("write");
    };
    let (task_arg, secrets_arg) = (
        task.to_str().expect("utf-8"),
        secrets.to_str().expect("utf-8"),
    );
    write("arn:aws:secretsmanager:us-east-1:1:secret:prod/db-AbC123:password::");
    let out = berth(&["validate", "--secrets-dir", secrets_arg, task_arg]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Without a source option nothing is read, so a missing secret is not validate's business.
    write("/prod/missing");
    assert_eq!(berth(&["validate", task_arg]).status.code(), Some(0));
    let out = berth(&["validate", "--secrets-dir", secrets_arg, task_arg]);
    assert_eq!(out.status.code(), Some(65));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.trim(),
        format!(
            "the task would stop before any container is created: ResourceInitializationError: unable to pull secrets or registry auth: secret DB of container web (/prod/missing): not found; berth looked at file {}/prod/missing",
            secrets.display()
        )
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("v4lue"));
}

#[test]
fn a_number_out_of_range_is_named_by_its_path() {
    let input = br#"{"family": "x", "containerDefinitions": [
  {"name": "a", "image": "busybox", "memory": 1e400}
]}"#;
    let out = berth_stdin(&["validate", "-"], input);
    assert_eq!(out.status.code(), Some(65));
    assert_eq!(
        text(&out.stderr),
        "containerDefinitions[0].memory: invalid JSON at line 2, column 51: number out of range: \
         it does not fit in a 64-bit floating-point number; write the value ECS expects (usually \
         a whole number such as 512)\n"
    );
}

#[test]
fn a_lone_surrogate_escape_is_called_one_with_its_path() {
    let lone = "a lone UTF-16 surrogate escape (\\uD800-\\uDFFF) in a string: it encodes no \
                character; write the character itself or a high and low pair such as \
                \\ud83d\\ude00";
    for (input, path) in [
        (
            r#"{"family": "x\ud800", "containerDefinitions": []}"#,
            "family",
        ),
        (
            r#"{"family": "x\udc00y", "containerDefinitions": []}"#,
            "family",
        ),
        (
            r#"{"family": "x", "containerDefinitions": [{"name": "a\ud800\u0041"}]}"#,
            "containerDefinitions[0].name",
        ),
    ] {
        let out = berth_stdin(&["validate", "-"], input.as_bytes());
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(65), "{err}");
        assert!(
            err.starts_with(&format!("{path}: invalid JSON at line 1, column ")),
            "{err}"
        );
        assert!(err.trim_end().ends_with(lone), "{input}: {err}");
    }
    // A proper pair is a character, not an error.
    let out = berth_stdin(
        &["validate", "-"],
        br#"{"family": "x\ud83d\ude00", "containerDefinitions": [{"name": "a", "image": "b", "memory": 64}]}"#,
    );
    assert!(
        !text(&out.stderr).contains("surrogate"),
        "{}",
        text(&out.stderr)
    );
}
