//! A private ECR image pulled by `berth run --aws on` with the login ECR's `GetAuthorizationToken`
//! gives (moto's), asked with the task's execution role; without AWS access the same pull is
//! refused by the registry. The registry is a real one (Debian's docker-registry, htpasswd with
//! the token's user `AWS` and password), reached under an ECR name: the test adds
//! `127.0.0.1 <account>.dkr.ecr.us-east-1.amazonaws.com` to /etc/hosts (restored when it ends)
//! and serves on a free port (dockerd treats 127.0.0.0/8 registries as plain HTTP ones).

mod common;

use base64::Engine as _;
use berth_testkit::aws::{ACCOUNT, Moto, REGION};
use berth_testkit::berth_run::{BerthRun, RunOutput, test_container};
use berth_testkit::{FamilyGuard, docker_cli, family_containers, unique_name};
use common::credentials::endpoint_lock;
use serde_json::json;
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const HOSTS: &str = "/etc/hosts";

/// A line added to /etc/hosts; the file's earlier content is written back on drop.
struct HostsEntry {
    original: String,
}

impl HostsEntry {
    fn add(name: &str) -> HostsEntry {
        let original = std::fs::read_to_string(HOSTS).expect("read /etc/hosts");
        let mut text = original.clone();
        if !text.ends_with('\n') && !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&format!(
            "127.0.0.1 {name} # berth test, removed when it ends\n"
        ));
        // Written in place: /etc/hosts may be a bind mount, which cannot be renamed over.
        std::fs::write(HOSTS, text).expect("write /etc/hosts (the tests run as root)");
        HostsEntry { original }
    }
}

impl Drop for HostsEntry {
    fn drop(&mut self) {
        let _ = std::fs::write(HOSTS, &self.original);
    }
}

/// A docker-registry that wants `user`/`password` (htpasswd), on a free loopback port; killed on
/// drop.
struct Registry {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Registry {
    fn start(dir: &Path, user: &str, password: &str) -> Registry {
        let htpasswd = Command::new("htpasswd")
            .args(["-Bbn", user, password])
            .output()
            .expect("htpasswd runs (scripts/test installs apache2-utils)");
        assert!(htpasswd.status.success(), "htpasswd failed");
        std::fs::write(dir.join("htpasswd"), &htpasswd.stdout).expect("htpasswd file");
        let port = berth_testkit::aws::closed_port().port();
        let config = format!(
            "version: 0.1\nlog: {{level: info, formatter: text}}\nstorage:\n  filesystem: {{rootdirectory: {root}}}\nhttp: {{addr: 127.0.0.1:{port}, secret: berth-ecr-test}}\nauth:\n  htpasswd: {{realm: berth-ecr, path: {htpasswd}}}\n",
            root = dir.join("storage").display(),
            htpasswd = dir.join("htpasswd").display(),
        );
        std::fs::write(dir.join("registry.yml"), config).expect("config");
        let log = dir.join("registry.log");
        let file = std::fs::File::create(&log).expect("log");
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(dir.join("registry.yml"))
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log"))
            .stderr(file)
            .spawn()
            .expect("docker-registry runs (scripts/test installs it)");
        let registry = Registry { child, port, log };
        let t = Instant::now();
        while !registry.wants_login() {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "the registry did not answer: {}",
                std::fs::read_to_string(&registry.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        registry
    }

    /// `GET /v2/` answers 401.
    fn wants_login(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        if s.write_all(b"GET /v2/ HTTP/1.0\r\n\r\n").is_err() {
            return false;
        }
        let mut head = [0u8; 12];
        s.read_exact(&mut head).is_ok() && &head[9..12] == b"401"
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The password in ECR's token as moto gives it (`AWS:<password>`, base64).
fn ecr_password(moto: &Moto) -> String {
    let answer = moto.cli(&["ecr", "get-authorization-token"]);
    let token = answer["authorizationData"][0]["authorizationToken"]
        .as_str()
        .unwrap_or_else(|| panic!("no token: {answer}"));
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(token)
        .expect("base64");
    let text = String::from_utf8(decoded).expect("text");
    let (user, password) = text.split_once(':').expect("user:password");
    assert_eq!(user, "AWS");
    password.to_string()
}

fn run(moto: &Moto, dir: &Path, image: &str, role: &str, aws: &str) -> (RunOutput, String) {
    let family = unique_name("berth-ecr-");
    let mut c = test_container("app", "echo pulled-from-ecr");
    c["image"] = json!(image);
    let def = json!({"family": family, "executionRoleArn": role, "containerDefinitions": [c]});
    std::fs::create_dir_all(dir).expect("mkdir");
    let run = BerthRun::new(env!("CARGO_BIN_EXE_berth"), dir.join("task.json"), &def)
        .data_dir(dir.join("data"));
    // No Docker client logins: the only login is ECR's.
    let out = moto
        .configure(run)
        .env("DOCKER_CONFIG", dir.join("no-docker-config"))
        .args(["--aws", aws, "--account-id", ACCOUNT, "--keep"])
        .output();
    (out, family)
}

#[test]
fn a_private_ecr_image_is_pulled_with_ecrs_login_for_the_execution_role() {
    let moto = Moto::from_env();
    let role = unique_name("berth-ecr-exec-");
    moto.create_role(&role);
    let password = ecr_password(&moto);
    let dir = tempfile::tempdir().expect("tmp");
    let root = dir.path().canonicalize().expect("canonical");
    let registry = Registry::start(&root, "AWS", &password);
    let host = format!("{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com");
    let _hosts = HostsEntry::add(&host);
    let image = format!(
        "{host}:{}/{}:1",
        registry.port,
        unique_name("berth-ecr-app-")
    );
    // The test image pushed there with the token's login (a Docker client config of its own).
    let base = std::env::var("BERTH_TEST_IMAGE").expect("BERTH_TEST_IMAGE (scripts/test sets it)");
    let client = root.join("docker-client");
    let client = client.to_str().expect("utf-8");
    docker_cli(&["tag", &base, &image]);
    let mut login = Command::new("docker")
        .args(["--config", client, "login", "-u", "AWS", "--password-stdin"])
        .arg(format!("{host}:{}", registry.port))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("docker login");
    login
        .stdin
        .take()
        .expect("stdin")
        .write_all(password.as_bytes())
        .expect("password");
    assert!(
        login.wait().expect("docker login").success(),
        "docker login"
    );
    docker_cli(&["--config", client, "push", &image]);
    docker_cli(&["rmi", &image]);
    struct Untag(String);
    impl Drop for Untag {
        fn drop(&mut self) {
            let _ = Command::new("docker").args(["rmi", "-f", &self.0]).output();
        }
    }
    let _untag = Untag(image.clone());

    let _lock = endpoint_lock();
    // Without AWS access there is no login for the registry: the pull is refused.
    let (refused, family) = run(&moto, &root.join("off"), &image, &role, "off");
    let _guard = FamilyGuard(family.clone());
    let all = format!("{}\n{}", refused.stdout, refused.stderr);
    assert_ne!(refused.code, Some(0), "{all}");
    assert!(all.contains("CannotPullContainerError"), "{all}");

    // With it, ECR's login for the execution role pulls it.
    let (pulled, family) = run(&moto, &root.join("on"), &image, &role, "on");
    let _guard = FamilyGuard(family.clone());
    let all = format!("{}\n{}", pulled.stdout, pulled.stderr);
    assert_eq!(pulled.code, Some(0), "{all}");
    assert!(
        all.contains("login from ECR GetAuthorizationToken"),
        "berth run says where the login comes from: {all}"
    );
    let ids = family_containers(&family);
    assert_eq!(ids.len(), 1, "{all}");
    assert!(docker_cli(&["logs", &ids[0]]).contains("pulled-from-ecr"));
    let log = std::fs::read_to_string(&registry.log).unwrap_or_default();
    // The pull (dockerd for berth: no docker CLI as upstream client, unlike the push) was
    // authorized: the registry's one login is ECR's user and token.
    assert!(
        log.lines().any(|l| l.contains("msg=\"authorized request\"")
            && l.contains("/manifests/1")
            && !l.contains("http.request.method=PUT")
            && !l.contains("UpstreamClient")),
        "the registry served the manifest to user AWS: {log}"
    );
}
