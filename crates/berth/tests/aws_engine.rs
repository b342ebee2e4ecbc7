//! berth with AWS access, on the real Engine against moto (a real implementation of AWS's APIs,
//! started by scripts/test), observed by AWS's own clients inside the task containers (botocore,
//! boto3 and the AWS CLI from the test virtualenv, run on the host's Debian Python through
//! read-only bind mounts):
//! - a bridge, a host and an awsvpc task of `berth run --aws on`, and of `berth agent --aws on`,
//!   and of a cluster node, get their task role through botocore's container provider
//!   (`container-role`), and `sts get-caller-identity` names the assumed role with the session
//!   berth gave it (a role name completed with the account of berth's credentials); the host's
//!   keys are in no container;
//! - role credentials are renewed before they expire (a short duration);
//! - secrets from SSM (SecureString) and Secrets Manager (a JSON key) and an S3 environment file
//!   reach the container's environment, fetched with the execution role; a missing parameter
//!   stops the task with its name and AWS's `ParameterNotFound`, creating nothing;
//! - Docker's `awslogs` driver ships a task's output to moto's CloudWatch Logs with the execution
//!   role, read back with `aws logs get-log-events`;
//! - STS refusing (moto's IAM enforcement: `AccessDenied`), unreachable or stalled: the task stops
//!   with the reason within the bound, creating nothing.
//!
//! Containers reach moto (on loopback) through a proxy on the bridge's gateway address. The tests
//! bind 169.254.170.2:80 (the credentials endpoint), so they hold the endpoint lock.

mod common;

use berth_testkit::aws::{ACCOUNT, HOST_ACCESS_KEY_ID, HOST_SECRET_ACCESS_KEY, Moto, REGION};
use berth_testkit::berth_run::{BerthRun, RunOutput, test_container};
use berth_testkit::tcp_proxy::TcpProxy;
use berth_testkit::{FamilyGuard, docker_cli, family_containers, unique_name};
use common::agent::{Agent, Launch};
use common::credentials::endpoint_lock;
use serde_json::{Value, json};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The Docker bridge's gateway: the host's address bridge (and berth's awsvpc) containers reach.
/// Docker's IPAM record names it only when it was given; else it is the bridge device's address.
fn bridge_gateway() -> IpAddr {
    let given = docker_cli(&[
        "network",
        "inspect",
        "bridge",
        "--format",
        "{{range .IPAM.Config}}{{.Gateway}}{{end}}",
    ]);
    if let Ok(ip) = given.trim().parse() {
        return ip;
    }
    let device = docker_cli(&[
        "network",
        "inspect",
        "bridge",
        "--format",
        "{{index .Options \"com.docker.network.bridge.name\"}}",
    ]);
    let device = device.trim();
    let out = std::process::Command::new("ip")
        .args(["-4", "-o", "addr", "show", "dev", device])
        .output()
        .expect("ip runs");
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .skip_while(|w| *w != "inet")
        .nth(1)
        .and_then(|a| a.split('/').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no IPv4 address on the bridge device {device:?}: {text}"))
}

/// moto, reachable from containers: a proxy on the bridge's gateway.
struct Aws {
    moto: Moto,
    proxy: TcpProxy,
}

impl Aws {
    fn new() -> Aws {
        let moto = Moto::from_env();
        let proxy = TcpProxy::start_on(SocketAddr::new(bridge_gateway(), 0), moto.addr());
        Aws { moto, proxy }
    }

    /// The endpoint a container of `mode` uses.
    fn endpoint_for(&self, mode: &str) -> String {
        if mode == "host" {
            self.moto.endpoint().to_string()
        } else {
            format!("http://{}", self.proxy.addr())
        }
    }

    /// `berth run` of `def` with berth's AWS access pointed at moto.
    fn run(&self, dir: &Path, def: &Value, args: &[&str]) -> RunOutput {
        let run = BerthRun::new(env!("CARGO_BIN_EXE_berth"), dir.join("task.json"), def)
            .prefer_cached()
            .data_dir(dir.join("data"));
        self.moto
            .configure(run)
            .args(["--aws", "on"])
            .args(args)
            .output()
    }
}

/// A read-only (or not) host directory as a task volume and its mount point.
fn volume(name: &str, host: &str, at: &str, read_only: bool) -> (Value, Value) {
    (
        json!({"name": name, "host": {"sourcePath": host}}),
        json!({"sourceVolume": name, "containerPath": at, "readOnly": read_only}),
    )
}

/// The host's Python and the test virtualenv (botocore, boto3, the AWS CLI) inside a busybox
/// container, and `out` as /out.
fn python_mounts(venv: &Path, out: &Path) -> Vec<(Value, Value)> {
    let venv = venv.display().to_string();
    vec![
        volume("usr", "/usr", "/usr", true),
        volume("lib", "/usr/lib", "/lib", true),
        volume("lib64", "/usr/lib64", "/lib64", true),
        volume("venv", &venv, &venv, true),
        volume("out", &out.display().to_string(), "/out", false),
    ]
}

/// botocore's credential chain and boto3's STS answer, as the application sees them.
const PROBE: &str = r#"
import json, os, sys, traceback
out = {}
try:
    import boto3, botocore.session
    creds = botocore.session.get_session().get_credentials()
    out["method"] = creds.method
    out["access_key"] = creds.get_frozen_credentials().access_key
    out["arn"] = boto3.client("sts").get_caller_identity()["Arn"]
    out["aws_env"] = sorted(k for k in os.environ if k.startswith("AWS_"))
except Exception:
    out["error"] = traceback.format_exc()
with open("/out/probe-%s.json" % sys.argv[1], "w") as f:
    json.dump(out, f)
"#;

/// A task whose one container runs the probe and the AWS CLI's `sts get-caller-identity`.
fn probe_task(
    family: &str,
    mode: &str,
    role: &str,
    venv: &Path,
    out: &Path,
    endpoint: &str,
) -> Value {
    let v = venv.display();
    let mounts = python_mounts(venv, out);
    let script = format!(
        "{v}/bin/python /out/probe.py {mode}; {v}/bin/aws sts get-caller-identity --output json >/out/cli-{mode}.json 2>/out/cli-{mode}.err; echo probed"
    );
    let mut c = test_container("app", &script);
    c["mountPoints"] = json!(mounts.iter().map(|m| m.1.clone()).collect::<Vec<_>>());
    c["environment"] = json!([
        {"name": "AWS_ENDPOINT_URL", "value": endpoint},
        {"name": "AWS_REGION", "value": REGION},
        // botocore 1.44 reads AWS_DEFAULT_REGION only.
        {"name": "AWS_DEFAULT_REGION", "value": REGION},
        {"name": "AWS_EC2_METADATA_DISABLED", "value": "true"},
    ]);
    json!({
        "family": family,
        "networkMode": mode,
        "taskRoleArn": role,
        "volumes": mounts.iter().map(|m| m.0.clone()).collect::<Vec<_>>(),
        "containerDefinitions": [c],
    })
}

/// The probe's answer for `mode`: botocore used the container provider, and STS (and the AWS
/// CLI) name the role assumed with the session berth gave it.
fn assert_assumed(out: &Path, mode: &str, role: &str, family: &str, context: &str) {
    let read = |f: &str| std::fs::read_to_string(out.join(f)).unwrap_or_default();
    let probe: Value = serde_json::from_str(&read(&format!("probe-{mode}.json")))
        .unwrap_or_else(|e| panic!("{mode}: no probe answer ({e}): {context}"));
    assert!(probe.get("error").is_none(), "{mode}: {}", probe["error"]);
    assert_eq!(probe["method"], "container-role", "{mode}: {probe}");
    let prefix = format!("arn:aws:sts::{ACCOUNT}:assumed-role/{role}/berth-{family}-");
    let arn = probe["arn"].as_str().unwrap_or_default();
    assert!(arn.starts_with(&prefix), "{mode}: {arn} is not {prefix}…");
    assert_ne!(
        probe["access_key"], HOST_ACCESS_KEY_ID,
        "{mode}: the host's key"
    );
    let env: Vec<String> = serde_json::from_value(probe["aws_env"].clone()).unwrap_or_default();
    for key in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
    ] {
        assert!(
            !env.contains(&key.to_string()),
            "{mode}: {key} in the container: {env:?}"
        );
    }
    assert!(
        env.contains(&"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI".to_string()),
        "{env:?}"
    );
    let cli: Value = serde_json::from_str(&read(&format!("cli-{mode}.json"))).unwrap_or_else(|e| {
        panic!(
            "{mode}: the AWS CLI answered no JSON ({e}): {}",
            read(&format!("cli-{mode}.err"))
        )
    });
    assert_eq!(cli["Arn"], arn, "{mode}: the CLI and boto3 agree");
}

/// Nothing of the host's keys in any container of `family` (`docker inspect`) or its log.
fn assert_no_host_keys(family: &str) {
    for id in family_containers(family) {
        for text in [docker_cli(&["inspect", &id]), docker_cli(&["logs", &id])] {
            assert!(
                !text.contains(HOST_SECRET_ACCESS_KEY) && !text.contains(HOST_ACCESS_KEY_ID),
                "{family}: the host's keys are in {id}"
            );
        }
    }
}

fn setup(dir: &Path) -> (PathBuf, PathBuf) {
    let root = dir.canonicalize().expect("canonical");
    let out = root.join("out");
    std::fs::create_dir(&out).expect("out");
    std::fs::write(out.join("probe.py"), PROBE).expect("probe");
    (root, out)
}

#[test]
fn sdk_clients_in_bridge_host_and_awsvpc_tasks_of_berth_run_assume_the_task_role() {
    let aws = Aws::new();
    let role = unique_name("berth-app-");
    aws.moto.create_role(&role);
    let dir = tempfile::tempdir().expect("tmp");
    let (root, out) = setup(dir.path());
    let _lock = endpoint_lock();
    for mode in ["bridge", "host", "awsvpc"] {
        let family = unique_name(&format!("berth-aws-{mode}-"));
        let _guard = FamilyGuard(family.clone());
        let def = probe_task(
            &family,
            mode,
            &role,
            aws.moto.venv(),
            &out,
            &aws.endpoint_for(mode),
        );
        let run_dir = root.join(mode);
        std::fs::create_dir(&run_dir).expect("mkdir");
        // No --account-id: the role name is completed with the account of berth's own
        // credentials (moto's), as ECS completes it with the instance's.
        let run = aws.run(&run_dir, &def, &["--keep"]);
        let context = format!("{}\n{}", run.stdout, run.stderr);
        assert_eq!(run.code, Some(0), "{mode}: {context}");
        assert_assumed(&out, mode, &role, &family, &context);
        assert!(
            run.stderr.contains(&format!("taskRoleArn {role}")) || run.stderr.contains("STS"),
            "berth run says where the role comes from: {}",
            run.stderr
        );
        assert_no_host_keys(&family);
        let audit = std::fs::read_to_string(run_dir.join("data/credentials-audit.log"))
            .expect("the audit log");
        assert!(
            audit.lines().any(|l| l.split(' ').nth(1) == Some("200")),
            "{audit}"
        );
        assert!(!audit.contains(HOST_SECRET_ACCESS_KEY), "{audit}");
    }
}

#[test]
fn the_agent_serves_assumed_task_roles_to_bridge_host_and_awsvpc_tasks() {
    let aws = Aws::new();
    let role = unique_name("berth-agent-app-");
    aws.moto.create_role(&role);
    let dir = tempfile::tempdir().expect("tmp");
    let (_root, out) = setup(dir.path());
    let _lock = endpoint_lock();
    let env: Vec<(String, String)> = aws.moto.berth_env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let agent = Agent::start_launch(
        "1h",
        Launch::default(),
        &["--aws", "on", "--account-id", ACCOUNT],
        &env,
    );
    let mut tasks = Vec::new();
    for mode in ["bridge", "host", "awsvpc"] {
        let family = unique_name(&format!("berth-aws-agent-{mode}-"));
        let def = probe_task(
            &family,
            mode,
            &role,
            aws.moto.venv(),
            &out,
            &aws.endpoint_for(mode),
        );
        tasks.push((mode, agent.submit(&def), FamilyGuard(family)));
    }
    for (mode, id, family) in &tasks {
        let t = Instant::now();
        while !agent.logs(id, "app").contains("probed") {
            assert!(
                t.elapsed() < Duration::from_secs(120),
                "{mode}: no answer: {}",
                agent.log()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
        assert_assumed(&out, mode, &role, &family.0, &agent.log());
        assert_no_host_keys(&family.0);
    }
    let log = agent.log();
    assert!(
        !log.contains(HOST_SECRET_ACCESS_KEY),
        "the host's secret key is in the agent's log"
    );
}

/// A cluster node (`berth agent --etcd … --node …`, placed by a controller) serves its task the
/// role as a standalone agent does.
#[test]
fn a_cluster_nodes_task_gets_its_assumed_task_role() {
    use common::cluster::{Fleet, NodeOpts, submit};
    let aws = Aws::new();
    let role = unique_name("berth-node-app-");
    aws.moto.create_role(&role);
    let dir = tempfile::tempdir().expect("tmp");
    let (_root, out) = setup(dir.path());
    let _lock = endpoint_lock();
    let mut fleet = Fleet::start("aws-node");
    fleet.controller("c1");
    let mut launch = Launch::default();
    launch.env.extend(aws.moto.berth_env());
    // The probe binds the host's /usr and the virtualenv: a node refuses that unless its policy
    // lets tasks bind host paths.
    launch
        .args
        .extend(["--aws", "on", "--task-policy", "permissive"].map(str::to_string));
    fleet.node(
        "n1",
        NodeOpts {
            launch,
            ..NodeOpts::default()
        },
    );
    let family = unique_name("berth-aws-node-");
    let _guard = FamilyGuard(family.clone());
    let def = probe_task(
        &family,
        "bridge",
        &role,
        aws.moto.venv(),
        &out,
        &aws.endpoint_for("bridge"),
    );
    let file = fleet.definition_file(&def);
    submit(&fleet.endpoints(), &file, 1);
    let probed = || {
        family_containers(&family)
            .iter()
            .any(|id| docker_cli(&["logs", id]).contains("probed"))
    };
    let t = Instant::now();
    while !probed() {
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "the node's task never probed: {}",
            fleet.agent("n1").log()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_assumed(&out, "bridge", &role, &family, &fleet.agent("n1").log());
    assert_no_host_keys(&family);
}

#[test]
fn role_credentials_are_renewed_before_they_expire() {
    let aws = Aws::new();
    let role = unique_name("berth-short-");
    aws.moto.create_role(&role);
    let dir = tempfile::tempdir().expect("tmp");
    let root = dir.path().canonicalize().expect("canonical");
    let family = unique_name("berth-aws-refresh-");
    let _guard = FamilyGuard(family.clone());
    // 12 reads, 2 s apart, of credentials that last 20 s (renewed after 10 s).
    let script = r#"for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo "read=$(date +%s) $(wget -qO- http://169.254.170.2$AWS_CONTAINER_CREDENTIALS_RELATIVE_URI)"; sleep 2; done"#;
    let def = json!({
        "family": family,
        "networkMode": "bridge",
        "taskRoleArn": role,
        "containerDefinitions": [test_container("app", script)],
    });
    let _lock = endpoint_lock();
    let run = BerthRun::new(env!("CARGO_BIN_EXE_berth"), root.join("task.json"), &def)
        .prefer_cached()
        .data_dir(root.join("data"))
        .env("BERTH_TEST_ROLE_DURATION_SECS", "20");
    let run = aws
        .moto
        .configure(run)
        .args(["--aws", "on", "--keep", "--account-id", ACCOUNT])
        .output();
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    let ids = family_containers(&family);
    let log = docker_cli(&["logs", &ids[0]]);
    let mut keys = Vec::new();
    for line in log.lines().filter_map(|l| l.strip_prefix("read=")) {
        let (at, body) = line.split_once(' ').expect("time and body");
        let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {line}"));
        let expires = time::OffsetDateTime::parse(
            v["Expiration"].as_str().expect("Expiration"),
            &time::format_description::well_known::Rfc3339,
        )
        .expect("RFC 3339")
        .unix_timestamp();
        let at: i64 = at.parse().expect("seconds");
        assert!(expires > at, "served expired credentials at {at}: {v}");
        let key = v["AccessKeyId"].as_str().expect("key").to_string();
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    assert!(
        keys.len() >= 2,
        "the credentials were never renewed in 24 s of 20 s credentials: {keys:?}\n{log}"
    );
}

#[test]
fn secrets_and_environment_files_come_from_ssm_secrets_manager_and_s3_with_the_execution_role() {
    let aws = Aws::new();
    let m = &aws.moto;
    let exec = unique_name("berth-exec-");
    m.create_role(&exec);
    let param = format!("/{}/db", unique_name("berth-ssm-"));
    m.put_parameter(&param, "ssm-value-31f", true);
    let secret = m.create_secret(
        &unique_name("berth-sm-"),
        r#"{"user":"admin-7c","pw":"pw-9d"}"#,
    );
    let bucket = unique_name("berth-env-");
    m.put_object(&bucket, "app.env", b"FROM_S3=s3-value-44\n");
    let dir = tempfile::tempdir().expect("tmp");
    let root = dir.path().canonicalize().expect("canonical");
    let family = unique_name("berth-aws-secrets-");
    let _guard = FamilyGuard(family.clone());
    let mut c = test_container("app", "env; echo listed");
    c["secrets"] = json!([
        {"name": "DB", "valueFrom": param},
        {"name": "USER", "valueFrom": format!("{secret}:user::")},
    ]);
    c["environmentFiles"] =
        json!([{"value": format!("arn:aws:s3:::{bucket}/app.env"), "type": "s3"}]);
    let def = json!({
        "family": family,
        "executionRoleArn": exec,
        "containerDefinitions": [c],
    });
    let _lock = endpoint_lock();
    let run = aws.run(&root, &def, &["--keep", "--account-id", ACCOUNT]);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    let ids = family_containers(&family);
    let log = docker_cli(&["logs", &ids[0]]);
    for want in ["DB=ssm-value-31f", "USER=admin-7c", "FROM_S3=s3-value-44"] {
        assert!(
            log.lines().any(|l| l == want),
            "{want} not in the environment: {log}"
        );
    }
    for value in ["ssm-value-31f", "admin-7c", "s3-value-44"] {
        assert!(
            !run.stdout.contains(value) && !run.stderr.contains(value),
            "{value} in berth's output"
        );
    }
    // berth run says which source serves each.
    assert!(
        run.stderr.contains(&format!(
            "secret DB of container app ({param}): SSM parameter from AWS"
        )),
        "{}",
        run.stderr
    );

    // A parameter that does not exist: the task stops with its name and AWS's words, and
    // nothing is created.
    let family = unique_name("berth-aws-missing-");
    let _guard = FamilyGuard(family.clone());
    let mut c = test_container("app", "echo never");
    let missing = format!("/{}/gone", unique_name("berth-ssm-"));
    c["secrets"] = json!([{"name": "GONE", "valueFrom": missing}]);
    let def = json!({"family": family, "executionRoleArn": exec, "containerDefinitions": [c]});
    let missing_dir = root.join("missing");
    std::fs::create_dir(&missing_dir).expect("mkdir");
    let run = aws.run(&missing_dir, &def, &["--account-id", ACCOUNT]);
    assert_ne!(run.code, Some(0));
    let all = format!("{}\n{}", run.stdout, run.stderr);
    assert!(
        all.contains("ResourceInitializationError: unable to pull secrets or registry auth"),
        "{all}"
    );
    assert!(
        all.contains(&format!("secret GONE of container app ({missing})")),
        "{all}"
    );
    assert!(all.contains("ParameterNotFound"), "{all}");
    assert!(family_containers(&family).is_empty(), "nothing is created");
}

#[test]
fn the_awslogs_driver_ships_a_tasks_output_to_cloudwatch_logs_with_the_execution_role() {
    let aws = Aws::new();
    let exec = unique_name("berth-logs-exec-");
    aws.moto.create_role(&exec);
    let group = format!("/ecs/{}", unique_name("berth-logs-"));
    aws.moto
        .cli(&["logs", "create-log-group", "--log-group-name", &group]);
    let dir = tempfile::tempdir().expect("tmp");
    let root = dir.path().canonicalize().expect("canonical");
    let family = unique_name("berth-aws-logs-");
    let _guard = FamilyGuard(family.clone());
    let mut c = test_container("app", "echo shipped-line-5e1; echo second-line-5e2");
    c["logConfiguration"] = json!({
        "logDriver": "awslogs",
        "options": {"awslogs-group": group, "awslogs-region": REGION, "awslogs-stream-prefix": "web"}
    });
    let def = json!({"family": family, "executionRoleArn": exec, "containerDefinitions": [c]});
    let _lock = endpoint_lock();
    let run = aws.run(&root, &def, &["--account-id", ACCOUNT]);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    assert!(
        !run.stderr.contains("not available on this host"),
        "awslogs kept: {}",
        run.stderr
    );
    let streams = aws
        .moto
        .cli(&["logs", "describe-log-streams", "--log-group-name", &group]);
    let stream = streams["logStreams"]
        .as_array()
        .and_then(|s| s.first())
        .and_then(|s| s["logStreamName"].as_str())
        .unwrap_or_else(|| panic!("no stream in {group}: {streams}"))
        .to_string();
    assert!(
        stream.starts_with("web/app/"),
        "ECS's stream name: {stream}"
    );
    let events = aws.moto.log_events(&group, &stream);
    assert_eq!(
        events,
        ["shipped-line-5e1", "second-line-5e2"],
        "{events:?}"
    );
    // The Engine fetched the execution role's credentials: an audit line for it, answered.
    let audit = std::fs::read_to_string(root.join("data/credentials-audit.log")).expect("audit");
    assert!(
        audit.lines().any(|l| l.split(' ').nth(1) == Some("200")),
        "{audit}"
    );
}

/// A task with an execution role and a secret, run with STS at `sts`.
fn run_with_sts(
    aws: &Aws,
    root: &Path,
    sts: &str,
    keys: Option<(&str, &str)>,
) -> (RunOutput, String, Duration) {
    let family = unique_name("berth-aws-sts-");
    let mut c = test_container("app", "echo never");
    c["secrets"] = json!([{"name": "X", "valueFrom": "/berth/never"}]);
    let def = json!({"family": family, "executionRoleArn": "exec", "containerDefinitions": [c]});
    let run = BerthRun::new(env!("CARGO_BIN_EXE_berth"), root.join("task.json"), &def)
        .prefer_cached()
        .data_dir(root.join("data"));
    let mut run = aws.moto.configure(run);
    if let Some((id, secret)) = keys {
        run = run
            .env("AWS_ACCESS_KEY_ID", id)
            .env("AWS_SECRET_ACCESS_KEY", secret);
    }
    let run = run.env("AWS_ENDPOINT_URL_STS", sts).args([
        "--aws",
        "on",
        "--aws-timeout",
        "2s",
        "--account-id",
        ACCOUNT,
    ]);
    let t = Instant::now();
    let out = run.output();
    (out, family, t.elapsed())
}

/// A fault case: its name, STS's endpoint, the keys berth uses (None: the host's), the words.
type Case<'a> = (&'a str, String, Option<(&'a str, &'a str)>, &'a str);

#[test]
fn sts_refusing_unreachable_or_stalled_stops_the_task_with_the_reason_creating_nothing() {
    let aws = Aws::new();
    let dir = tempfile::tempdir().expect("tmp");
    let root = dir.path().canonicalize().expect("canonical");
    let (denying, user) = berth_testkit::aws::PrivateMoto::with_iam_enforcement();
    let closed = berth_testkit::aws::closed_port();
    let (stalled, _stall) = berth_testkit::aws::stalled_listener();
    let _lock = endpoint_lock();
    let cases: [Case; 3] = [
        (
            "denied",
            denying.endpoint().to_string(),
            Some((&user.access_key_id, &user.secret_access_key)),
            "AccessDenied",
        ),
        (
            "unreachable",
            format!("http://{closed}"),
            None,
            "cannot reach STS",
        ),
        (
            "stalled",
            format!("http://{stalled}"),
            None,
            "cannot reach STS",
        ),
    ];
    for (what, sts, keys, want) in cases {
        let case_dir = root.join(what);
        std::fs::create_dir(&case_dir).expect("mkdir");
        let (run, family, took) = run_with_sts(&aws, &case_dir, &sts, keys);
        let _guard = FamilyGuard(family.clone());
        let all = format!("{}\n{}", run.stdout, run.stderr);
        assert_ne!(run.code, Some(0), "{what}: {all}");
        assert!(all.contains("ResourceInitializationError: unable to pull secrets or registry auth: execution role"), "{what}: {all}");
        assert!(
            all.contains(&format!("arn:aws:iam::{ACCOUNT}:role/exec")),
            "{what}: the role is named: {all}"
        );
        assert!(all.contains(want), "{what}: {want} in {all}");
        assert!(
            family_containers(&family).is_empty(),
            "{what}: nothing is created"
        );
        assert!(took < Duration::from_secs(40), "{what}: took {took:?}");
    }
}
