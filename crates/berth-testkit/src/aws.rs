//! AWS for tests, without AWS: the `moto_server` (moto, a local implementation of AWS's APIs) that
//! `scripts/test` starts on a loopback port ([`Moto::from_env`], from `BERTH_TEST_AWS_ENDPOINT`
//! and `BERTH_TEST_AWS_VENV`), the AWS CLI of the same virtualenv to set up and read what a test
//! needs ([`Moto::cli`] and the helpers: roles, parameters, secrets, objects, ECR repositories,
//! CloudWatch Logs events), and the environment a berth process needs to reach it
//! ([`Moto::berth_env`]: fixed fake host keys, never anything of the machine's).
//!
//! For faults: [`Moto::start_private`] runs a `moto_server` of the test's own (killed on drop),
//! e.g. with moto's IAM enforcement ([`PrivateMoto::with_iam_enforcement`]: a user with keys and
//! no policy, refused with a real `AccessDenied`); [`stalled_listener`] is an AWS that accepts
//! connections and never answers; [`closed_port`] one that refuses them.
//!
//! moto's one account is `123456789012` ([`ACCOUNT`]); every test names what it creates with
//! [`crate::unique_name`], since all tests share the one server. When the variables are missing,
//! the helpers panic saying to run the tests through `scripts/test` (no test passes by skipping).

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// moto's account id.
pub const ACCOUNT: &str = "123456789012";

/// The region tests use.
pub const REGION: &str = "us-east-1";

/// berth's fake host keys against moto (moto accepts any keys unless IAM is enforced).
pub const HOST_ACCESS_KEY_ID: &str = "AKIABERTHTESTHOST000";
pub const HOST_SECRET_ACCESS_KEY: &str = "berthTestHostSecretKey000000000000000000";

/// Variables a berth process and the CLI must not inherit: they would point the SDK at the
/// machine's own AWS setup (profiles, session tokens, IMDS-less overrides).
pub const REMOVED_ENV: &[&str] = &[
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
];

/// The moto server tests use.
#[derive(Debug, Clone)]
pub struct Moto {
    endpoint: String,
    venv: PathBuf,
    addr: SocketAddr,
}

fn required_env(name: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v,
        _ => panic!(
            "{name} is not set: run the tests through scripts/test, which starts moto_server"
        ),
    }
}

/// The address of an `http://IP:PORT` endpoint.
fn endpoint_addr(endpoint: &str) -> SocketAddr {
    endpoint
        .strip_prefix("http://")
        .map(|rest| rest.trim_end_matches('/'))
        .and_then(|hostport| hostport.parse().ok())
        .unwrap_or_else(|| panic!("the moto endpoint {endpoint:?} is not http://IP:PORT"))
}

impl Moto {
    /// The server `scripts/test` started (`BERTH_TEST_AWS_ENDPOINT`, `BERTH_TEST_AWS_VENV`).
    ///
    /// # Panics
    ///
    /// When a variable is not set.
    pub fn from_env() -> Moto {
        let endpoint = required_env("BERTH_TEST_AWS_ENDPOINT");
        let venv = PathBuf::from(required_env("BERTH_TEST_AWS_VENV"));
        Moto::at(endpoint, venv)
    }

    fn at(endpoint: String, venv: PathBuf) -> Moto {
        let addr = endpoint_addr(&endpoint);
        Moto {
            endpoint,
            venv,
            addr,
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The virtualenv with `moto_server` and `aws` in `bin/`.
    pub fn venv(&self) -> &Path {
        &self.venv
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn host_access_key_id(&self) -> &str {
        HOST_ACCESS_KEY_ID
    }

    pub fn host_secret_access_key(&self) -> &str {
        HOST_SECRET_ACCESS_KEY
    }

    /// What a berth process needs to use this server as its AWS: `AWS_ENDPOINT_URL`, the fake
    /// host keys, `AWS_REGION`, IMDS off, and empty profile files (`AWS_CONFIG_FILE`,
    /// `AWS_SHARED_CREDENTIALS_FILE` = `/dev/null`). Also remove [`REMOVED_ENV`] (or use
    /// [`Moto::apply`]).
    pub fn berth_env(&self) -> Vec<(String, String)> {
        self.env_with_keys(HOST_ACCESS_KEY_ID, HOST_SECRET_ACCESS_KEY)
    }

    fn env_with_keys(&self, access_key_id: &str, secret: &str) -> Vec<(String, String)> {
        [
            ("AWS_ENDPOINT_URL", self.endpoint.as_str()),
            ("AWS_ACCESS_KEY_ID", access_key_id),
            ("AWS_SECRET_ACCESS_KEY", secret),
            ("AWS_REGION", REGION),
            ("AWS_DEFAULT_REGION", REGION),
            ("AWS_EC2_METADATA_DISABLED", "true"),
            ("AWS_CONFIG_FILE", "/dev/null"),
            ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    /// `run` with berth's AWS pointed at this server, as [`apply`](Self::apply) does for a
    /// command: [`REMOVED_ENV`] removed, [`berth_env`](Self::berth_env) set (a later `env` on
    /// the run still wins).
    pub fn configure(&self, mut run: crate::berth_run::BerthRun) -> crate::berth_run::BerthRun {
        for name in REMOVED_ENV {
            run = run.env_remove(name);
        }
        for (k, v) in self.berth_env() {
            run = run.env(k, v);
        }
        run
    }

    /// Sets [`berth_env`](Self::berth_env) on a command and removes [`REMOVED_ENV`].
    pub fn apply<'c>(&self, command: &'c mut Command) -> &'c mut Command {
        for name in REMOVED_ENV {
            command.env_remove(name);
        }
        command.envs(self.berth_env())
    }

    /// Runs `aws --endpoint-url ENDPOINT --output json ARGS` with the host keys: (success,
    /// stdout, stderr).
    pub fn cli_status(&self, args: &[&str]) -> (bool, String, String) {
        self.cli_status_as(HOST_ACCESS_KEY_ID, HOST_SECRET_ACCESS_KEY, None, args)
    }

    /// [`cli_status`](Self::cli_status) with other keys (a role's, a user's).
    pub fn cli_status_as(
        &self,
        access_key_id: &str,
        secret: &str,
        session_token: Option<&str>,
        args: &[&str],
    ) -> (bool, String, String) {
        let mut command = Command::new(self.venv.join("bin/aws"));
        for name in REMOVED_ENV {
            command.env_remove(name);
        }
        command
            .envs(self.env_with_keys(access_key_id, secret))
            .env_remove("AWS_ENDPOINT_URL")
            .args(["--endpoint-url", &self.endpoint, "--output", "json"])
            .args(args)
            .stdin(Stdio::null());
        if let Some(token) = session_token {
            command.env("AWS_SESSION_TOKEN", token);
        }
        let out = command.output().unwrap_or_else(|e| {
            panic!(
                "cannot run {}: {e}; run the tests through scripts/test, which installs the AWS CLI",
                self.venv.join("bin/aws").display()
            )
        });
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Runs the CLI with the host keys and parses its JSON answer (`null` when it printed none).
    ///
    /// # Panics
    ///
    /// When the command fails (with its stderr) or prints something that is not JSON.
    pub fn cli(&self, args: &[&str]) -> serde_json::Value {
        self.cli_as(HOST_ACCESS_KEY_ID, HOST_SECRET_ACCESS_KEY, None, args)
    }

    /// [`cli`](Self::cli) with other keys.
    pub fn cli_as(
        &self,
        access_key_id: &str,
        secret: &str,
        session_token: Option<&str>,
        args: &[&str],
    ) -> serde_json::Value {
        let (ok, stdout, stderr) = self.cli_status_as(access_key_id, secret, session_token, args);
        assert!(ok, "aws {} failed: {stderr}", args.join(" "));
        if stdout.trim().is_empty() {
            return serde_json::Value::Null;
        }
        serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("aws {} printed no JSON ({e}): {stdout}", args.join(" ")))
    }

    /// Creates an IAM role ECS tasks may assume; its ARN.
    pub fn create_role(&self, name: &str) -> String {
        let trust = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ecs-tasks.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;
        let out = self.cli(&[
            "iam",
            "create-role",
            "--role-name",
            name,
            "--assume-role-policy-document",
            trust,
        ]);
        json_str(&out, &["Role", "Arn"])
    }

    /// Puts an SSM parameter (`String`, or `SecureString` with the default key), overwriting.
    pub fn put_parameter(&self, name: &str, value: &str, secure: bool) {
        let kind = if secure { "SecureString" } else { "String" };
        self.cli(&[
            "ssm",
            "put-parameter",
            "--name",
            name,
            "--value",
            value,
            "--type",
            kind,
            "--overwrite",
        ]);
    }

    /// Creates a Secrets Manager secret with a `SecretString`; its ARN.
    pub fn create_secret(&self, name: &str, value: &str) -> String {
        let out = self.cli(&[
            "secretsmanager",
            "create-secret",
            "--name",
            name,
            "--secret-string",
            value,
        ]);
        json_str(&out, &["ARN"])
    }

    /// Puts a new version of a secret with these stages (none: AWSCURRENT, the old one becoming
    /// AWSPREVIOUS).
    pub fn put_secret_value(&self, arn: &str, value: &str, stages: &[&str]) {
        let mut args = vec![
            "secretsmanager",
            "put-secret-value",
            "--secret-id",
            arn,
            "--secret-string",
            value,
        ];
        if !stages.is_empty() {
            args.push("--version-stages");
            args.extend_from_slice(stages);
        }
        self.cli(&args);
    }

    /// Puts an S3 object, creating the bucket when it does not exist.
    pub fn put_object(&self, bucket: &str, key: &str, body: &[u8]) {
        let (exists, _, _) = self.cli_status(&["s3api", "head-bucket", "--bucket", bucket]);
        if !exists {
            self.cli(&["s3api", "create-bucket", "--bucket", bucket]);
        }
        let mut file = tempfile::NamedTempFile::new()
            .unwrap_or_else(|e| panic!("cannot make a temporary file: {e}"));
        file.write_all(body)
            .unwrap_or_else(|e| panic!("cannot write a temporary file: {e}"));
        let path = file.path().to_string_lossy().into_owned();
        self.cli(&[
            "s3api",
            "put-object",
            "--bucket",
            bucket,
            "--key",
            key,
            "--body",
            &path,
        ]);
    }

    /// Creates an ECR repository; its URI (`123456789012.dkr.ecr.us-east-1.amazonaws.com/NAME`).
    pub fn ecr_create_repository(&self, name: &str) -> String {
        let out = self.cli(&["ecr", "create-repository", "--repository-name", name]);
        json_str(&out, &["repository", "repositoryUri"])
    }

    /// The messages of a CloudWatch Logs stream, oldest first (empty when it has none).
    pub fn log_events(&self, group: &str, stream: &str) -> Vec<String> {
        let out = self.cli(&[
            "logs",
            "get-log-events",
            "--log-group-name",
            group,
            "--log-stream-name",
            stream,
            "--start-from-head",
        ]);
        out["events"]
            .as_array()
            .map(|events| {
                events
                    .iter()
                    .filter_map(|e| e["message"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Starts a `moto_server` of the caller's own from the virtualenv (`BERTH_TEST_AWS_VENV`) on
    /// a free loopback port, with more environment (e.g. `INITIAL_NO_AUTH_ACTION_COUNT`); its log
    /// in `target/berth-test-logs/moto-private-<port>.log`. Killed when dropped.
    ///
    /// # Panics
    ///
    /// When the virtualenv is not given or the server does not answer within 60 s.
    pub fn start_private(extra_env: &[(&str, &str)]) -> PrivateMoto {
        let venv = PathBuf::from(required_env("BERTH_TEST_AWS_VENV"));
        let port = closed_port().port();
        let log_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/berth-test-logs");
        std::fs::create_dir_all(&log_dir)
            .unwrap_or_else(|e| panic!("cannot make {}: {e}", log_dir.display()));
        let log = log_dir.join(format!("moto-private-{port}.log"));
        let log_file = std::fs::File::create(&log)
            .unwrap_or_else(|e| panic!("cannot make {}: {e}", log.display()));
        let err_file = log_file
            .try_clone()
            .unwrap_or_else(|e| panic!("cannot reopen {}: {e}", log.display()));
        let child = Command::new(venv.join("bin/moto_server"))
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .envs(extra_env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(err_file)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {}: {e}; run the tests through scripts/test, which installs moto",
                    venv.join("bin/moto_server").display()
                )
            });
        let mut private = PrivateMoto {
            moto: Moto::at(format!("http://127.0.0.1:{port}"), venv),
            child,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !answers(private.moto.addr) {
            if let Ok(Some(status)) = private.child.try_wait() {
                panic!(
                    "moto_server exited ({status}); log {}:\n{}",
                    private.log.display(),
                    std::fs::read_to_string(&private.log).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "moto_server on port {port} did not answer within 60 s; log {}",
                private.log.display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        private
    }
}

/// A string in a JSON answer, or a panic naming the path.
fn json_str(value: &serde_json::Value, path: &[&str]) -> String {
    let mut v = value;
    for p in path {
        v = &v[*p];
    }
    v.as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("no {} in {value}", path.join(".")))
}

/// `GET /moto-api/` answers 200. (moto does not count these toward
/// `INITIAL_NO_AUTH_ACTION_COUNT`; a plain `GET /` would be counted.)
fn answers(addr: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /moto-api/ HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.") && &head[9..12] == b"200"
}

/// A `moto_server` of one test's own; killed on drop. Derefs to [`Moto`] for the CLI helpers.
pub struct PrivateMoto {
    moto: Moto,
    child: Child,
    log: PathBuf,
}

/// An IAM user's keys.
#[derive(Debug, Clone)]
pub struct IamUser {
    pub name: String,
    pub arn: String,
    pub access_key_id: String,
    pub secret_access_key: String,
}

impl PrivateMoto {
    /// A private server that enforces IAM, and a user of it with keys and no policy: every call
    /// made with the user's keys is refused with a real `AccessDenied` ("User: arn:aws:iam::
    /// 123456789012:user/NAME is not authorized to perform: sts:AssumeRole"). moto authorizes
    /// every request after its first `INITIAL_NO_AUTH_ACTION_COUNT` (here 2: the user and its
    /// key); the fake host keys are then unknown (`InvalidClientTokenId`), so set up nothing else
    /// on this server.
    pub fn with_iam_enforcement() -> (PrivateMoto, IamUser) {
        let moto = Moto::start_private(&[("INITIAL_NO_AUTH_ACTION_COUNT", "2")]);
        let name = crate::unique_name("berth-denied-");
        let user = moto.cli(&["iam", "create-user", "--user-name", &name]);
        let key = moto.cli(&["iam", "create-access-key", "--user-name", &name]);
        let user = IamUser {
            arn: json_str(&user, &["User", "Arn"]),
            access_key_id: json_str(&key, &["AccessKey", "AccessKeyId"]),
            secret_access_key: json_str(&key, &["AccessKey", "SecretAccessKey"]),
            name,
        };
        (moto, user)
    }

    /// The server's log file.
    pub fn log(&self) -> &Path {
        &self.log
    }
}

impl std::ops::Deref for PrivateMoto {
    type Target = Moto;
    fn deref(&self) -> &Moto {
        &self.moto
    }
}

impl Drop for PrivateMoto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback address nothing listens on now (bound, its port taken, dropped): an AWS that
/// refuses connections.
pub fn closed_port() -> SocketAddr {
    let listener =
        TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("no free loopback port: {e}"));
    listener
        .local_addr()
        .unwrap_or_else(|e| panic!("no free loopback port: {e}"))
}

/// Holds a [`stalled_listener`]: it accepts until dropped.
pub struct StalledListener {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for StalledListener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A loopback listener that accepts connections and never answers (a slow AWS): requests to it
/// wait until their timeout. Connections are held open until the guard is dropped.
pub fn stalled_listener() -> (SocketAddr, StalledListener) {
    let listener =
        TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("no free loopback port: {e}"));
    let addr = listener
        .local_addr()
        .unwrap_or_else(|e| panic!("no free loopback port: {e}"));
    listener
        .set_nonblocking(true)
        .unwrap_or_else(|e| panic!("cannot make the listener non-blocking: {e}"));
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    let thread = std::thread::spawn(move || {
        let mut held = Vec::new();
        while !stopped.load(Ordering::SeqCst) {
            match listener.accept() {
                Ok((stream, _)) => held.push(stream),
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    });
    (
        addr,
        StalledListener {
            stop,
            thread: Some(thread),
        },
    )
}
