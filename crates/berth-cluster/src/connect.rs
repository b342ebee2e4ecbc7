//! How berth reaches etcd, for every process that connects (the node agent, the controller, the
//! `berth cluster …` commands): the endpoints, TLS (the server verified with a CA, optionally a
//! client certificate) and etcd's user authentication ([`Settings`]); the rule that refuses an
//! etcd reached without TLS and authentication unless the operator said `--etcd-insecure`
//! ([`Settings::check`], no file read), the files read into what etcd-client needs
//! ([`Settings::load`]), and what a refusal of etcd's means for the operator ([`explain`]).
//!
//! Why the refusal: whoever can write berth's keys places any task on any node, root on every
//! host; etcd without authentication lets anyone who reaches it do that, and without TLS the
//! password and every task definition cross the network in clear. docs/cluster.md ("Security
//! model") lists the roles ([`ROLES`]) and the setup.

use std::path::{Path, PathBuf};

/// One etcd role berth's processes use: its name and the key ranges it may read and write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Role {
    pub name: String,
    /// What the role is for.
    pub purpose: &'static str,
    /// `(key, prefix?)` ranges read only.
    pub read: Vec<(String, bool)>,
    /// `(key, prefix?)` ranges read and written.
    pub readwrite: Vec<(String, bool)>,
}

/// The name of node `node`'s role: each node has its own, so that one node's credentials write
/// only that node's keys.
pub fn node_role(node: &str) -> String {
    format!("berth-node-{node}")
}

/// The roles of a cluster with the given nodes: `berth-controller` (reads and writes everything
/// under `/berth/`: the controller decides what runs where, it holds the cluster's whole power
/// anyway), `berth-operator` (the `berth cluster …` commands: reads everything, writes tasks,
/// services and drains), and `berth-node-<node>` per node (writes its own record and statuses,
/// reads its own assignments and the task records).
pub fn roles(nodes: &[String]) -> Vec<Role> {
    use crate::keys;
    let mut out = vec![
        Role {
            name: "berth-controller".to_owned(),
            purpose: "berth controller",
            read: vec![],
            readwrite: vec![(keys::ROOT.to_owned(), true)],
        },
        Role {
            name: "berth-operator".to_owned(),
            purpose: "berth cluster … (operators)",
            read: vec![(keys::ROOT.to_owned(), true)],
            readwrite: vec![
                (keys::TASKS.to_owned(), true),
                (keys::SERVICES.to_owned(), true),
                (keys::DRAIN.to_owned(), true),
            ],
        },
    ];
    for node in nodes {
        out.push(Role {
            name: node_role(node),
            purpose: "berth agent --node (one node)",
            read: vec![
                (keys::assign_prefix(node), true),
                (keys::TASKS.to_owned(), true),
            ],
            readwrite: vec![(keys::node(node), false), (keys::status_prefix(node), true)],
        });
    }
    out
}

/// The `etcdctl` commands that create the roles of [`roles`], a user per role (named like it,
/// its password asked by etcdctl) and turn authentication on (with a `root` user, which etcd
/// needs before it does). Run against a cluster served with TLS; `ctl` is the etcdctl command
/// with its connection options.
pub fn setup_commands(ctl: &str, nodes: &[String]) -> Vec<String> {
    let mut out = vec![
        format!("{ctl} user add root"),
        format!("{ctl} user grant-role root root"),
    ];
    for role in roles(nodes) {
        out.push(format!("{ctl} role add {}", role.name));
        for (kind, ranges) in [("read", &role.read), ("readwrite", &role.readwrite)] {
            for (key, prefix) in ranges {
                let flag = if *prefix { " --prefix=true" } else { "" };
                out.push(format!(
                    "{ctl} role grant-permission {}{flag} {kind} {key}",
                    role.name
                ));
            }
        }
        out.push(format!("{ctl} user add {}", role.name));
        out.push(format!("{ctl} user grant-role {} {}", role.name, role.name));
    }
    out.push(format!("{ctl} auth enable"));
    out
}

/// How to reach etcd, as the options say (`--etcd`, `--etcd-cacert`, `--etcd-cert`,
/// `--etcd-key`, `--etcd-user`, `--etcd-password-file`, `--etcd-insecure`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    pub endpoints: Vec<String>,
    pub cacert: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub user: Option<String>,
    pub password_file: Option<PathBuf>,
    pub insecure: bool,
}

/// What connecting needs, files read: TLS options and the user's name and password.
#[derive(Clone, Default)]
pub struct Credentials {
    pub tls: Option<etcd_client::TlsOptions>,
    pub user: Option<(String, String)>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        f.debug_struct("Credentials")
            .field("tls", &self.tls.is_some())
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .finish()
    }
}

/// The text every refusal of an insecure setup ends with.
const HOW: &str = "give https:// endpoints with --etcd-cacert, and --etcd-user with --etcd-password-file (docs/cluster.md, \"Security model\"), or pass --etcd-insecure (BERTH_ETCD_INSECURE=true) to accept an etcd that anyone who reaches it controls";

impl Settings {
    /// Plain settings for these endpoints: no TLS, no user, `--etcd-insecure` (tests and tools
    /// that start their own etcd).
    pub fn insecure(endpoints: Vec<String>) -> Settings {
        Settings {
            endpoints,
            insecure: true,
            ..Settings::default()
        }
    }

    fn tls(&self) -> bool {
        self.endpoints.iter().all(|e| e.starts_with("https://"))
    }

    /// Checks the options together (no file is read): a certificate needs its key, a user a
    /// password file, https endpoints a CA, endpoints all of one scheme; and unless
    /// `--etcd-insecure`, TLS and a user. On success, the warnings to log at every start (what an
    /// insecure setup lacks). Errors name the options and how to fix them.
    pub fn check(&self) -> Result<Vec<String>, String> {
        let https = self
            .endpoints
            .iter()
            .filter(|e| e.starts_with("https://"))
            .count();
        if https != 0 && https != self.endpoints.len() {
            return Err(format!(
                "--etcd: {} mixes http:// and https:// endpoints; give every member with https://",
                self.endpoints.join(",")
            ));
        }
        match (&self.cert, &self.key) {
            (Some(_), None) => {
                return Err(
                    "--etcd-cert needs --etcd-key (the certificate's private key, PEM)".into(),
                );
            }
            (None, Some(_)) => {
                return Err("--etcd-key needs --etcd-cert (the client certificate, PEM)".into());
            }
            _ => {}
        }
        match (&self.user, &self.password_file) {
            (Some(_), None) => {
                return Err(
                    "--etcd-user needs --etcd-password-file (a file holding the password; never on the command line)"
                        .into(),
                );
            }
            (None, Some(_)) => {
                return Err("--etcd-password-file needs --etcd-user".into());
            }
            _ => {}
        }
        if self.tls() && self.cacert.is_none() {
            return Err(
                "--etcd-cacert is needed with https:// endpoints: the CA certificate (PEM) that signed etcd's server certificates"
                    .into(),
            );
        }
        if !self.tls() && (self.cacert.is_some() || self.cert.is_some()) {
            return Err(format!(
                "--etcd-cacert/--etcd-cert are for TLS, but --etcd {} is plain http://; write https://HOST:PORT",
                self.endpoints.join(",")
            ));
        }
        let mut lacks = Vec::new();
        if !self.tls() {
            lacks.push(format!(
                "etcd is reached over plain HTTP ({}): no TLS",
                self.endpoints.join(",")
            ));
        }
        if self.user.is_none() {
            lacks.push("no etcd user given (--etcd-user): no authentication".to_owned());
        }
        if lacks.is_empty() {
            return Ok(Vec::new());
        }
        if !self.insecure {
            return Err(format!(
                "refusing to use etcd without TLS and authentication: {}; {HOW}",
                lacks.join("; ")
            ));
        }
        Ok(lacks
            .into_iter()
            .map(|l| {
                format!(
                    "--etcd-insecure: {l}; anyone who reaches etcd can run any task as root on every node"
                )
            })
            .collect())
    }

    /// Reads the certificate, key and password files into [`Credentials`]. Errors name the option
    /// and the file.
    pub fn load(&self) -> Result<Credentials, String> {
        let read = |option: &str, path: &Path| -> Result<Vec<u8>, String> {
            std::fs::read(path).map_err(|e| format!("{option} {}: {e}", path.display()))
        };
        // A secret other users can read is warned about (not refused: the operator may have a
        // reason, e.g. a group-readable file on a host of one user).
        for (option, file) in [
            ("--etcd-password-file", &self.password_file),
            ("--etcd-key", &self.key),
        ] {
            if let Some(path) = file.as_deref()
                && let Some(mode) = open_to_others(path)
            {
                tracing::warn!(
                    "{option} {path}: other users can read it (mode {mode:04o}); make it private: chmod 600 {path}",
                    path = path.display(),
                );
            }
        }
        let mut tls = None;
        if self.tls() {
            let mut options = etcd_client::TlsOptions::new();
            if let Some(ca) = &self.cacert {
                options = options.ca_certificate(etcd_client::Certificate::from_pem(read(
                    "--etcd-cacert",
                    ca,
                )?));
            }
            if let (Some(cert), Some(key)) = (&self.cert, &self.key) {
                options = options.identity(etcd_client::Identity::from_pem(
                    read("--etcd-cert", cert)?,
                    read("--etcd-key", key)?,
                ));
            }
            tls = Some(options);
        }
        let user = match (&self.user, &self.password_file) {
            (Some(user), Some(file)) => {
                let text =
                    String::from_utf8(read("--etcd-password-file", file)?).map_err(|_| {
                        format!("--etcd-password-file {}: not UTF-8 text", file.display())
                    })?;
                // One line: the trailing newline an editor or `echo` adds is not part of it.
                let password = text.trim_end_matches(['\n', '\r']).to_owned();
                if password.is_empty() {
                    return Err(format!(
                        "--etcd-password-file {}: the file is empty; write the etcd user's password in it",
                        file.display()
                    ));
                }
                Some((user.clone(), password))
            }
            _ => None,
        };
        Ok(Credentials { tls, user })
    }
}

/// The permission bits of `path` when its group or other users may read or write it (a secret
/// should be the owner's alone); None for a private file or one that cannot be read (its read
/// reports that).
fn open_to_others(path: &Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o7777;
    (mode & 0o077 != 0).then_some(mode)
}

/// What an etcd refusal about access means for the operator, when it is one: authentication
/// off, a wrong user or password, credentials missing, or a permission the user's role lacks.
pub fn explain(e: &etcd_client::Error, user: Option<&str>) -> Option<String> {
    let etcd_client::Error::GRpcStatus(s) = e else {
        return None;
    };
    let m = s.message();
    let who = user.map_or_else(|| "this client".to_owned(), |u| format!("etcd user {u:?}"));
    if m.contains("authentication is not enabled") {
        Some(
            "etcd has authentication turned off: anyone who reaches it controls every node; turn it on (`berth cluster auth-setup` prints the etcdctl commands; docs/cluster.md, \"Security model\"), or drop --etcd-user and pass --etcd-insecure".to_owned(),
        )
    } else if m.contains("invalid user ID or password") || m.contains("authentication failed") {
        Some(format!(
            "etcd refused {who}'s name or password: check --etcd-user and the file of --etcd-password-file"
        ))
    } else if user.is_none()
        && (m.contains("user name is empty")
            || m.contains("user name not found")
            || s.code() == tonic::Code::PermissionDenied
            || m.contains("permission denied"))
    {
        // Without a token etcd takes the client for the user its certificate names, if any.
        Some(
            "etcd requires authentication: give --etcd-user and --etcd-password-file (docs/cluster.md, \"Security model\")".to_owned(),
        )
    } else if s.code() == tonic::Code::PermissionDenied || m.contains("permission denied") {
        Some(format!(
            "{who} is not allowed to do this: its etcd role lacks the permission (the roles are in docs/cluster.md, \"Security model\"; `berth cluster auth-setup` prints them)"
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secure() -> Settings {
        Settings {
            endpoints: vec!["https://a:2379".into(), "https://b:2379".into()],
            cacert: Some("/ca.pem".into()),
            cert: None,
            key: None,
            user: Some("berth-operator".into()),
            password_file: Some("/pw".into()),
            insecure: false,
        }
    }

    #[test]
    fn tls_and_a_user_pass_without_a_warning() {
        assert_eq!(secure().check(), Ok(vec![]));
        let with_cert = Settings {
            cert: Some("/c.pem".into()),
            key: Some("/k.pem".into()),
            ..secure()
        };
        assert_eq!(with_cert.check(), Ok(vec![]));
    }

    #[test]
    fn plain_etcd_is_refused_naming_the_flag_unless_insecure() {
        let plain = Settings {
            endpoints: vec!["http://a:2379".into()],
            ..Settings::default()
        };
        let err = plain.check().unwrap_err();
        assert!(
            err.starts_with("refusing to use etcd without TLS and authentication: etcd is reached over plain HTTP (http://a:2379): no TLS; no etcd user given"),
            "{err}"
        );
        assert!(
            err.contains("--etcd-insecure (BERTH_ETCD_INSECURE=true)"),
            "{err}"
        );
        let warnings = Settings {
            insecure: true,
            ..plain
        }
        .check()
        .expect("accepted");
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].starts_with("--etcd-insecure: etcd is reached over plain HTTP"));
        // TLS without a user is refused too.
        let err = Settings {
            user: None,
            password_file: None,
            ..secure()
        }
        .check()
        .unwrap_err();
        assert!(err.contains("no etcd user given (--etcd-user)"), "{err}");
    }

    #[test]
    fn options_that_need_each_other_are_checked() {
        for (s, wanted) in [
            (
                Settings {
                    cert: Some("/c".into()),
                    ..secure()
                },
                "--etcd-cert needs --etcd-key",
            ),
            (
                Settings {
                    key: Some("/k".into()),
                    ..secure()
                },
                "--etcd-key needs --etcd-cert",
            ),
            (
                Settings {
                    password_file: None,
                    ..secure()
                },
                "--etcd-user needs --etcd-password-file",
            ),
            (
                Settings {
                    user: None,
                    ..secure()
                },
                "--etcd-password-file needs --etcd-user",
            ),
            (
                Settings {
                    cacert: None,
                    ..secure()
                },
                "--etcd-cacert is needed with https:// endpoints",
            ),
            (
                Settings {
                    endpoints: vec!["https://a:1".into(), "http://b:1".into()],
                    ..secure()
                },
                "mixes http:// and https://",
            ),
            (
                Settings {
                    endpoints: vec!["http://a:1".into()],
                    insecure: true,
                    ..secure()
                },
                "--etcd-cacert/--etcd-cert are for TLS",
            ),
        ] {
            let err = s.check().unwrap_err();
            assert!(err.contains(wanted), "{s:?}: {err}");
        }
    }

    #[test]
    fn the_password_file_is_read_without_its_newline() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pw = dir.path().join("pw");
        std::fs::write(&pw, "s3cret\n").expect("write");
        let s = Settings {
            endpoints: vec!["http://a:1".into()],
            cacert: None,
            password_file: Some(pw.clone()),
            insecure: true,
            ..secure()
        };
        let c = s.load().expect("loaded");
        assert_eq!(c.user, Some(("berth-operator".into(), "s3cret".into())));
        assert!(!format!("{c:?}").contains("s3cret"), "never printed");
        std::fs::write(&pw, "\n").expect("write");
        let err = s.load().unwrap_err();
        assert!(err.contains("the file is empty"), "{err}");
        let err = Settings {
            password_file: Some(dir.path().join("missing")),
            ..s
        }
        .load()
        .unwrap_err();
        assert!(err.starts_with("--etcd-password-file "), "{err}");
    }

    #[test]
    fn a_secret_file_other_users_can_read_is_noticed() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let pw = dir.path().join("pw");
        std::fs::write(&pw, "s3cret\n").expect("write");
        std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        assert_eq!(open_to_others(&pw), Some(0o644));
        std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o640)).expect("chmod");
        assert_eq!(open_to_others(&pw), Some(0o640));
        std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        assert_eq!(open_to_others(&pw), None);
        assert_eq!(open_to_others(&dir.path().join("missing")), None);
    }

    #[test]
    fn a_node_role_writes_only_its_own_keys() {
        let roles = roles(&["n1".to_owned()]);
        let node = roles
            .iter()
            .find(|r| r.name == "berth-node-n1")
            .expect("n1");
        assert_eq!(
            node.readwrite,
            vec![
                ("/berth/nodes/n1".to_owned(), false),
                ("/berth/status/n1/".to_owned(), true)
            ]
        );
        let op = roles
            .iter()
            .find(|r| r.name == "berth-operator")
            .expect("op");
        assert!(
            !op.readwrite
                .iter()
                .any(|(k, _)| k.starts_with("/berth/assign"))
        );
        let cmds = setup_commands("etcdctl", &["n1".to_owned()]);
        assert!(
            cmds.contains(
                &"etcdctl role grant-permission berth-node-n1 --prefix=true read /berth/assign/n1/"
                    .to_owned()
            )
        );
        assert!(cmds.contains(
            &"etcdctl role grant-permission berth-node-n1 readwrite /berth/nodes/n1".to_owned()
        ));
        assert_eq!(cmds.last().map(String::as_str), Some("etcdctl auth enable"));
    }
}
