//! A real etcd cluster of its own for one test: [`EtcdCluster::start`] runs N `etcd` processes
//! (Debian's `etcd-server`, 3.4, installed by `scripts/test`) on free loopback ports, with their
//! data directories in a temporary directory and their logs in `target/berth-test-logs/etcd/`, and
//! returns once every member answers `/health`. A test can kill one member (SIGKILL) and restart it
//! with the same name, data and ports.
//!
//! Per test rather than one cluster for the whole run: tests stay independent (no shared keys, no
//! test sees another's lost member), and a cluster starts in well under a second here.
//!
//! [`EtcdCluster::start_tls`] serves the client URLs with TLS (a CA, a server certificate and a
//! client certificate made for the test with the `openssl` command in the cluster's temporary
//! directory: [`TlsFiles`]) and etcd's `--client-cert-auth`; [`EtcdCluster::etcdctl`] runs
//! `etcdctl` against it, e.g. to set up users and roles and turn authentication on. Health is
//! read on a plain-HTTP metrics URL of each member either way.
//!
//! Invariant: an [`EtcdCluster`] never outlives its value: dropping it kills every member and
//! removes the data directories (and the certificates). When `etcd` is missing, `start` panics saying how to install it
//! (no test passes by skipping its work).

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One member: its name, ports and process (None while killed).
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    /// Plain HTTP `/health` (and `/metrics`), whether or not clients get TLS.
    metrics_port: u16,
    child: Option<Child>,
}

/// A running etcd cluster; killed and removed on drop.
pub struct EtcdCluster {
    members: Vec<Member>,
    dir: tempfile::TempDir,
    log_dir: PathBuf,
    token: String,
    tls: Option<TlsFiles>,
    /// More options for every member ([`EtcdCluster::start_tls_with`]).
    extra: Vec<String>,
}

/// The certificates of a TLS cluster (PEM files in the cluster's temporary directory): the CA
/// that signed the others, the members' server certificate (for 127.0.0.1) and a client
/// certificate signed by the same CA (common name `berth-test-client`, no etcd user of that name).
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

/// Runs `openssl ARGS` in `dir`; panics with its output when it fails.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running openssl (Debian: apt-get install openssl): {e}"));
    if !out.status.success() {
        panic!(
            "openssl {}: {}\n{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl TlsFiles {
    /// Makes a CA, a server certificate for 127.0.0.1/localhost and a client certificate in
    /// `dir` (P-256 keys, valid two days).
    fn make(dir: &Path) -> TlsFiles {
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let mut ca = vec!["req", "-x509"];
        ca.extend(ec);
        ca.extend([
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=berth-test-ca",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        openssl(dir, &ca);
        for (name, cn, ext) in [
            (
                "server",
                "127.0.0.1",
                "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\nkeyUsage=critical,digitalSignature\n",
            ),
            (
                "client",
                "berth-test-client",
                "extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n",
            ),
        ] {
            let ext_file = format!("{name}.ext");
            std::fs::write(dir.join(&ext_file), ext)
                .unwrap_or_else(|e| panic!("writing {ext_file}: {e}"));
            let (key, csr, pem) = (
                format!("{name}.key"),
                format!("{name}.csr"),
                format!("{name}.pem"),
            );
            let subj = format!("/CN={cn}");
            let mut req = vec!["req"];
            req.extend(ec);
            req.extend(["-keyout", &key, "-out", &csr, "-subj", &subj]);
            openssl(dir, &req);
            openssl(
                dir,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &csr,
                    "-CA",
                    "ca.pem",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-out",
                    &pem,
                    "-days",
                    "2",
                    "-extfile",
                    &ext_file,
                ],
            );
        }
        TlsFiles {
            ca: dir.join("ca.pem"),
            server_cert: dir.join("server.pem"),
            server_key: dir.join("server.key"),
            client_cert: dir.join("client.pem"),
            client_key: dir.join("client.key"),
        }
    }
}

/// The directory of the member logs: `target/berth-test-logs/etcd/` of the workspace.
fn log_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/berth-test-logs/etcd")
}

/// `n` distinct loopback ports nothing listens on now (the kernel's choices for port 0, every
/// listener held until all are chosen: one dropped at once could be handed out again, and two
/// members given one port refuse to start with "duplicate url").
fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<std::net::TcpListener> = (0..n)
        .map(|_| {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap_or_else(|e| panic!("no free loopback port: {e}"))
        })
        .collect();
    listeners
        .iter()
        .map(|l| {
            l.local_addr()
                .map(|a| a.port())
                .unwrap_or_else(|e| panic!("no free loopback port: {e}"))
        })
        .collect()
}

/// GET /health on a member's client URL; true when it says `"health":"true"`. A few lines of
/// HTTP/1.0 by hand: the test kit needs no HTTP client for this one request.
fn healthy(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(200),
    ) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer.contains("\"health\":\"true\"")
}

impl EtcdCluster {
    /// Starts `size` members named `<prefix>-0`, `<prefix>-1`, … (the prefix names the log files:
    /// use the test's name) and waits up to 20 s until every one is healthy.
    ///
    /// # Panics
    ///
    /// When `etcd` is not installed, a member cannot start, or the cluster is not healthy in time
    /// (with the tail of each member's log).
    pub fn start(prefix: &str, size: usize) -> EtcdCluster {
        EtcdCluster::start_with(prefix, size, false, &[])
    }

    /// As [`EtcdCluster::start`], with TLS on the client URLs (`https://127.0.0.1:PORT`, the
    /// certificates in [`EtcdCluster::tls`]) and `--client-cert-auth`: a client must present a
    /// certificate signed by the test's CA. Authentication is off until the test turns it on
    /// (`etcdctl auth enable` through [`EtcdCluster::etcdctl`]).
    ///
    /// # Panics
    ///
    /// As [`EtcdCluster::start`]; also when `openssl` cannot make the certificates.
    pub fn start_tls(prefix: &str, size: usize) -> EtcdCluster {
        EtcdCluster::start_with(prefix, size, true, &[])
    }

    /// As [`EtcdCluster::start_tls`], with more options for every member (e.g.
    /// `--auth-token-ttl 1`).
    pub fn start_tls_with(prefix: &str, size: usize, extra: &[&str]) -> EtcdCluster {
        EtcdCluster::start_with(prefix, size, true, extra)
    }

    /// Starts a new cluster; when a member finds one of its ports taken (a port is free when
    /// chosen, but another process of the test run may connect or listen from it before etcd
    /// binds it), the whole cluster is dropped and started again on other ports, up to 3 times.
    fn start_with(prefix: &str, size: usize, tls: bool, extra: &[&str]) -> EtcdCluster {
        let mut attempt = 1;
        loop {
            match EtcdCluster::try_start(prefix, size, tls, extra) {
                Ok(cluster) => return cluster,
                Err(why) if why.contains("address already in use") && attempt < 3 => {
                    eprintln!(
                        "etcd {prefix}: a chosen port was taken before etcd bound it; starting again on other ports"
                    );
                    attempt += 1;
                }
                Err(why) => panic!("{why}"),
            }
        }
    }

    fn try_start(
        prefix: &str,
        size: usize,
        tls: bool,
        extra: &[&str],
    ) -> Result<EtcdCluster, String> {
        let found = Command::new("etcd")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !matches!(found, Ok(s) if s.success()) {
            panic!(
                "etcd is not installed: the cluster tests need a real etcd (Debian: apt-get install \
                 etcd-server etcd-client; scripts/test installs them)"
            );
        }
        let dir = tempfile::Builder::new()
            .prefix("berth-test-etcd.")
            .tempdir()
            .unwrap_or_else(|e| panic!("temporary directory for etcd: {e}"));
        let log_dir = log_dir();
        std::fs::create_dir_all(&log_dir)
            .unwrap_or_else(|e| panic!("creating {}: {e}", log_dir.display()));
        let ports = free_ports(3 * size);
        let members = (0..size)
            .map(|i| Member {
                name: format!("{prefix}-{i}"),
                client_port: ports[3 * i],
                peer_port: ports[3 * i + 1],
                metrics_port: ports[3 * i + 2],
                child: None,
            })
            .collect();
        let tls = tls.then(|| {
            let certs = dir.path().join("certs");
            std::fs::create_dir(&certs)
                .unwrap_or_else(|e| panic!("creating {}: {e}", certs.display()));
            TlsFiles::make(&certs)
        });
        let mut cluster = EtcdCluster {
            members,
            token: format!("{prefix}-{}", std::process::id()),
            dir,
            log_dir,
            tls,
            extra: extra.iter().map(|e| (*e).to_owned()).collect(),
        };
        for i in 0..size {
            cluster.spawn(i, "new");
        }
        // On Err the cluster is dropped: its members killed, its directory removed.
        cluster.try_wait_healthy(Duration::from_secs(20))?;
        Ok(cluster)
    }

    fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The log file of member `i`.
    pub fn log(&self, i: usize) -> PathBuf {
        self.log_dir.join(format!("{}.log", self.members[i].name))
    }

    fn spawn(&mut self, i: usize, state: &str) {
        let initial = self.initial_cluster();
        let log = self.log(i);
        let data = self.dir.path().join(&self.members[i].name);
        let m = &mut self.members[i];
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap_or_else(|e| panic!("opening {}: {e}", log.display()));
        let err = out
            .try_clone()
            .unwrap_or_else(|e| panic!("opening {}: {e}", log.display()));
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let client = format!("{scheme}://127.0.0.1:{}", m.client_port);
        let peer = format!("http://127.0.0.1:{}", m.peer_port);
        let metrics = format!("http://127.0.0.1:{}", m.metrics_port);
        let mut cmd = Command::new("etcd");
        if let Some(tls) = &self.tls {
            cmd.arg("--cert-file")
                .arg(&tls.server_cert)
                .arg("--key-file")
                .arg(&tls.server_key)
                .arg("--trusted-ca-file")
                .arg(&tls.ca)
                .arg("--client-cert-auth");
        }
        let child = cmd
            .args(["--name", &m.name])
            .arg("--data-dir")
            .arg(&data)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-metrics-urls", &metrics])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &initial])
            .args(["--initial-cluster-state", state])
            .args(["--initial-cluster-token", &self.token])
            // Short heartbeats: a lost member's leadership moves within a second or two.
            .args(["--heartbeat-interval", "100", "--election-timeout", "1000"])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("starting etcd {}: {e}", m.name));
        m.child = Some(child);
    }

    fn wait_healthy(&mut self, limit: Duration) {
        if let Err(why) = self.try_wait_healthy(limit) {
            panic!("{why}");
        }
    }

    /// Waits until every live member is healthy; Err: a member exited (its log's tail) or the
    /// time ran out (every member's tail).
    fn try_wait_healthy(&mut self, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        loop {
            let live: Vec<usize> = (0..self.members.len())
                .filter(|&i| self.members[i].child.is_some())
                .collect();
            if live.iter().all(|&i| healthy(self.members[i].metrics_port)) {
                return Ok(());
            }
            for &i in &live {
                if let Some(Ok(Some(status))) = self.members[i].child.as_mut().map(Child::try_wait)
                {
                    return Err(format!(
                        "etcd {} exited ({status}); log {}:\n{}",
                        self.members[i].name,
                        self.log(i).display(),
                        self.tail(i)
                    ));
                }
            }
            if Instant::now() > deadline {
                let logs: Vec<String> = live
                    .iter()
                    .map(|&i| format!("--- {}:\n{}", self.members[i].name, self.tail(i)))
                    .collect();
                return Err(format!(
                    "etcd not healthy within {limit:?}:\n{}",
                    logs.join("\n")
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn tail(&self, i: usize) -> String {
        let text = std::fs::read_to_string(self.log(i)).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    /// The client URLs, comma-separated: what `--etcd` takes.
    pub fn endpoints(&self) -> String {
        self.endpoint_list().join(",")
    }

    /// The client URLs, one per member (`https://` with TLS).
    pub fn endpoint_list(&self) -> Vec<String> {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        self.members
            .iter()
            .map(|m| format!("{scheme}://127.0.0.1:{}", m.client_port))
            .collect()
    }

    /// The certificates of a cluster started with [`EtcdCluster::start_tls`].
    pub fn tls(&self) -> Option<&TlsFiles> {
        self.tls.as_ref()
    }

    /// The `etcdctl` command line that reaches this cluster: its endpoints and, with TLS, the CA
    /// and the client certificate (as `berth cluster auth-setup --etcdctl` takes it; no space in
    /// any path of a temporary directory).
    pub fn etcdctl_command(&self) -> String {
        let mut line = format!("etcdctl --endpoints={}", self.endpoints());
        if let Some(tls) = &self.tls {
            line.push_str(&format!(
                " --cacert={} --cert={} --key={}",
                tls.ca.display(),
                tls.client_cert.display(),
                tls.client_key.display()
            ));
        }
        line
    }

    /// Runs every line of `lines` (each starting with [`EtcdCluster::etcdctl_command`], as
    /// `berth cluster auth-setup` prints them) with etcdctl; a `user add NAME` gets the password
    /// `password(NAME)` on its standard input.
    ///
    /// # Panics
    ///
    /// When a line does not start with the command, or etcdctl fails (with its output).
    pub fn run_setup(&self, lines: &[String], password: impl Fn(&str) -> String) {
        let prefix = format!("{} ", self.etcdctl_command());
        for line in lines {
            let rest = line
                .strip_prefix(&prefix)
                .unwrap_or_else(|| panic!("not an etcdctl line of this cluster: {line:?}"));
            let mut words: Vec<&str> = rest.split_whitespace().collect();
            let mut stdin = String::new();
            if words.starts_with(&["user", "add"]) && words.len() > 2 {
                // Not asked on a terminal: the password on standard input.
                stdin = format!("{}\n", password(words[2]));
                words.push("--interactive=false");
            }
            let out = self.etcdctl(&words, &stdin);
            if !out.status.success() {
                panic!(
                    "etcdctl {words:?}: {}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }

    /// Runs `etcdctl ARGS` (after [`EtcdCluster::etcdctl_command`]'s options) with `stdin` on
    /// its standard input; its output, whatever its status.
    pub fn etcdctl(&self, args: &[&str], stdin: &str) -> std::process::Output {
        let command = self.etcdctl_command();
        let mut words = command.split_whitespace();
        let program = words.next().unwrap_or("etcdctl");
        let mut child = Command::new(program)
            .args(words)
            .args(args)
            .env("ETCDCTL_API", "3")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("running etcdctl (Debian: apt-get install etcd-client): {e}")
            });
        if let Some(mut input) = child.stdin.take() {
            let _ = input.write_all(stdin.as_bytes());
        }
        child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("waiting for etcdctl: {e}"))
    }

    /// The client addresses (`127.0.0.1:PORT`), one per member: the targets of a
    /// [`crate::tcp_proxy::ProxySet`] that stands between a process and this cluster.
    pub fn client_addrs(&self) -> Vec<std::net::SocketAddr> {
        self.members
            .iter()
            .map(|m| std::net::SocketAddr::from(([127, 0, 0, 1], m.client_port)))
            .collect()
    }

    /// The pid of member `i`, None while it is killed.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.members[i].child.as_ref().map(Child::id)
    }

    /// Kills member `i` with SIGKILL and reaps it (no shutdown of its own: a crash).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts member `i` again with its name, data directory and ports, and waits until every live
    /// member is healthy.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i, "existing");
        self.wait_healthy(Duration::from_secs(20));
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}
