//! The driver options of `docker volume create -d berth -o KEY=VALUE…`, validated at Create into a
//! [`Backend`], like Docker's built-in `local` driver: `type` chooses the backend, `device` is the
//! source, `o` the comma-separated mount options.
//!
//! | type | device | o |
//! |---|---|---|
//! | `tmpfs` | absent (or `tmpfs`) | tmpfs data (`size=64m,mode=0755`) and flags (`ro,noexec,…`) |
//! | `bind` | an absolute host path | `bind`, `rbind`, `ro`, `rw` |
//! | `efs` | `fs-<hex>[:/path]` | ECS's `tls`, `iam`, `accesspoint=fsap-<hex>`, other `efs` helper options |
//! | anything else (`nfs`, `nfs4`, …) | required | passed to the helper as `-o` |
//!
//! Every type but `tmpfs` and `bind` is mounted by the mount helper program (see [`crate::mounter`]).
//! Values go to that program as separate argv entries, never through a shell; still, a device or
//! option list that starts with `-` (which a helper would parse as a flag) or contains whitespace or
//! control characters is refused.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use crate::Error;

/// The option keys a volume accepts.
pub const KEYS: [&str; 3] = ["type", "device", "o"];

/// Mount flags accepted in a tmpfs `o` list (the rest is tmpfs data such as `size=`).
pub const TMPFS_FLAGS: [&str; 11] = [
    "ro",
    "rw",
    "nosuid",
    "nodev",
    "noexec",
    "noatime",
    "nodiratime",
    "relatime",
    "strictatime",
    "sync",
    "dirsync",
];

/// How a volume is mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// A tmpfs (`mount("tmpfs", target, "tmpfs", flags, data)`).
    Tmpfs { flags: Vec<String>, data: String },
    /// A bind mount of an absolute host path.
    Bind {
        source: PathBuf,
        recursive: bool,
        read_only: bool,
    },
    /// A filesystem mounted by the helper: `HELPER -t fs_type [-o options] device TARGET`.
    Helper {
        fs_type: String,
        device: String,
        options: Option<String>,
    },
}

impl Backend {
    /// Validate a volume's options. `name` is only used in messages.
    pub fn parse(name: &str, opts: &BTreeMap<String, String>) -> Result<Backend, Error> {
        let bad = |reason: String| Error::InvalidOptions {
            name: name.to_owned(),
            reason,
        };
        if let Some(key) = opts.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(bad(format!(
                "unknown option {key:?} (allowed: type, device, o)"
            )));
        }
        let device = opts.get("device").map(String::as_str);
        let o = opts.get("o").map(String::as_str);
        let Some(fs_type) = opts.get("type").map(String::as_str) else {
            let given = if o.is_some() { "o" } else { "device" };
            return Err(bad(if device.is_some() || o.is_some() {
                format!("option {given} given without type (add -o type=tmpfs|bind|nfs|nfs4|efs|…)")
            } else {
                "no type given (use -o type=tmpfs, bind, nfs, nfs4, efs, or another type the mount \
                 helper knows)"
                    .to_owned()
            }));
        };
        check_type(fs_type).map_err(|r| bad(r.to_owned()))?;
        let items = match o {
            Some(o) => option_items(o).map_err(bad)?,
            None => Vec::new(),
        };
        match fs_type {
            "tmpfs" => {
                if device.is_some_and(|d| d != "tmpfs") {
                    return Err(bad("type tmpfs takes no device".to_owned()));
                }
                let (flags, data): (Vec<&str>, Vec<&str>) =
                    items.iter().partition(|i| TMPFS_FLAGS.contains(i));
                Ok(Backend::Tmpfs {
                    flags: flags.into_iter().map(str::to_owned).collect(),
                    data: data.join(","),
                })
            }
            "bind" => {
                let Some(device) = device else {
                    return Err(bad("type bind needs device=/absolute/host/path".to_owned()));
                };
                let source = PathBuf::from(device);
                if !is_normal_absolute(&source) {
                    return Err(bad(format!(
                        "device {device:?} must be an absolute path without '.' or '..' components"
                    )));
                }
                let (mut recursive, mut read_only) = (false, false);
                for item in &items {
                    match *item {
                        "bind" => recursive = false,
                        "rbind" => recursive = true,
                        "ro" => read_only = true,
                        "rw" => read_only = false,
                        other => {
                            return Err(bad(format!(
                                "type bind accepts o=bind, rbind, ro, rw; not {other:?}"
                            )));
                        }
                    }
                }
                Ok(Backend::Bind {
                    source,
                    recursive,
                    read_only,
                })
            }
            _ => {
                let Some(device) = device else {
                    return Err(bad(format!("type {fs_type} needs a device")));
                };
                check_word(device).map_err(|r| bad(format!("device {device:?} {r}")))?;
                if fs_type == "efs" {
                    check_efs(device, &items).map_err(bad)?;
                }
                Ok(Backend::Helper {
                    fs_type: fs_type.to_owned(),
                    device: device.to_owned(),
                    options: o.filter(|o| !o.is_empty()).map(str::to_owned),
                })
            }
        }
    }

    /// Whether this backend is a network filesystem (mounted by the helper): unmounted lazily
    /// (`MNT_DETACH`), because a plain unmount of a dead server's filesystem can hang.
    pub fn is_network(&self) -> bool {
        matches!(self, Backend::Helper { .. })
    }

    /// Whether mounting needs the mount helper program.
    pub fn needs_helper(&self) -> bool {
        self.is_network()
    }

    /// The type name (`tmpfs`, `bind`, `nfs`, …).
    pub fn type_name(&self) -> &str {
        match self {
            Backend::Tmpfs { .. } => "tmpfs",
            Backend::Bind { .. } => "bind",
            Backend::Helper { fs_type, .. } => fs_type,
        }
    }
}

fn check_type(t: &str) -> Result<(), &'static str> {
    let mut chars = t.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if !first_ok
        || t.len() > 32
        || !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._+-".contains(c))
    {
        return Err(
            "type must be 1-32 characters of a-z, 0-9, '.', '_', '+', '-', not starting with a symbol",
        );
    }
    Ok(())
}

/// A value given to the helper as one argv entry: non-empty, not starting with `-`, no whitespace
/// or control characters, at most 4096 bytes.
fn check_word(v: &str) -> Result<(), &'static str> {
    if v.is_empty() {
        return Err("is empty");
    }
    if v.starts_with('-') {
        return Err("must not start with '-'");
    }
    if v.len() > 4096 {
        return Err("is longer than 4096 bytes");
    }
    if v.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("must not contain whitespace or control characters");
    }
    Ok(())
}

/// Split `o` on commas; every item must be a non-empty word (see [`check_word`]).
fn option_items(o: &str) -> Result<Vec<&str>, String> {
    if o.is_empty() {
        return Ok(Vec::new());
    }
    o.split(',')
        .map(|item| {
            check_word(item)
                .map(|()| item)
                .map_err(|r| format!("mount option {item:?} in o={o:?} {r}"))
        })
        .collect()
}

fn is_normal_absolute(p: &Path) -> bool {
    p.is_absolute()
        && p.components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
}

fn is_hex_id(s: &str, prefix: &str) -> bool {
    s.strip_prefix(prefix).is_some_and(|hex| {
        !hex.is_empty() && hex.len() <= 64 && hex.chars().all(|c| c.is_ascii_hexdigit())
    })
}

/// ECS's EFS options: `device=fs-<hex>[:/path]`, `o` items `tls`, `iam`, `accesspoint=fsap-<hex>`
/// (other items are passed on to the `efs` helper, as ECS does for `netns=` and the like).
fn check_efs(device: &str, items: &[&str]) -> Result<(), String> {
    let (fs_id, root) = match device.split_once(':') {
        Some((id, root)) => (id, Some(root)),
        None => (device, None),
    };
    if !is_hex_id(fs_id, "fs-") {
        return Err(format!(
            "type efs needs device=fs-<hex>[:/path] (an EFS file system ID), not {device:?}"
        ));
    }
    if let Some(root) = root
        && !is_normal_absolute(Path::new(root))
    {
        return Err(format!(
            "the root directory in device {device:?} must be an absolute path without '.' or '..'"
        ));
    }
    for item in items {
        if let Some(ap) = item.strip_prefix("accesspoint=")
            && !is_hex_id(ap, "fsap-")
        {
            return Err(format!(
                "accesspoint must be an EFS access point ID (fsap-<hex>), not {ap:?}"
            ));
        }
    }
    if items.iter().any(|i| i.starts_with("accesspoint=")) && !items.contains(&"tls") {
        return Err(
            "an EFS access point needs transit encryption (o=tls,accesspoint=…)".to_owned(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn err(pairs: &[(&str, &str)]) -> String {
        Backend::parse("v", &opts(pairs)).unwrap_err().to_string()
    }

    #[test]
    fn tmpfs_splits_flags_from_data() {
        let b = Backend::parse(
            "v",
            &opts(&[("type", "tmpfs"), ("o", "size=1m,noexec,mode=0700")]),
        )
        .unwrap();
        assert_eq!(
            b,
            Backend::Tmpfs {
                flags: vec!["noexec".into()],
                data: "size=1m,mode=0700".into()
            }
        );
        assert!(!b.is_network());
    }

    #[test]
    fn bind_needs_an_absolute_normal_device() {
        let b = Backend::parse(
            "v",
            &opts(&[("type", "bind"), ("device", "/srv/x"), ("o", "rbind,ro")]),
        )
        .unwrap();
        assert_eq!(
            b,
            Backend::Bind {
                source: "/srv/x".into(),
                recursive: true,
                read_only: true
            }
        );
        assert!(err(&[("type", "bind"), ("device", "srv/x")]).contains("absolute"));
        assert!(err(&[("type", "bind"), ("device", "/srv/../etc")]).contains("absolute"));
        assert!(err(&[("type", "bind")]).contains("needs device"));
        assert!(
            err(&[("type", "bind"), ("device", "/x"), ("o", "size=1")]).contains("bind accepts")
        );
    }

    #[test]
    fn efs_accepts_what_the_engine_builds() {
        for (device, o) in [
            ("fs-12345678", None),
            (
                "fs-0123456789abcdef0:/data/app",
                Some("tls,iam,accesspoint=fsap-0123456789abcdef0"),
            ),
            ("fs-12345678", Some("tls")),
            ("fs-12345678", Some("tls,iam")),
        ] {
            let mut pairs = vec![("type", "efs"), ("device", device)];
            if let Some(o) = o {
                pairs.push(("o", o));
            }
            let b = Backend::parse("v", &opts(&pairs)).unwrap();
            assert_eq!(
                b,
                Backend::Helper {
                    fs_type: "efs".into(),
                    device: device.into(),
                    options: o.map(Into::into)
                }
            );
            assert!(b.is_network());
        }
        assert!(err(&[("type", "efs"), ("device", "server:/x")]).contains("fs-<hex>"));
        assert!(err(&[("type", "efs"), ("device", "fs-1:rel")]).contains("absolute"));
        assert!(
            err(&[
                ("type", "efs"),
                ("device", "fs-1"),
                ("o", "tls,accesspoint=x")
            ])
            .contains("fsap-")
        );
    }

    #[test]
    fn clear_errors() {
        assert!(err(&[]).contains("no type given"));
        assert!(err(&[("o", "size=1m")]).contains("option o given without type"));
        assert!(err(&[("device", "/x")]).contains("option device given without type"));
        assert!(err(&[("type", "nfs")]).contains("needs a device"));
        assert!(err(&[("type", "nfs"), ("device", "-oexec")]).contains("must not start with '-'"));
        assert!(err(&[("type", "nfs"), ("device", "h:/x y")]).contains("whitespace"));
        assert!(err(&[("type", "nfs"), ("device", "h:/x"), ("o", "a,,b")]).contains("is empty"));
        assert!(err(&[("type", "Bad Type")]).contains("type must be"));
        assert!(err(&[("type", "tmpfs"), ("size", "1")]).contains("unknown option \"size\""));
        assert!(err(&[("type", "tmpfs"), ("device", "/dev/sda")]).contains("no device"));
    }
}
