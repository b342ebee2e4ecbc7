//! Image references (`[registry/]path[:tag][@digest]`), read once by Docker's rules for every
//! part of berth that needs a piece of one: the pull's `fromImage` and `tag`, the registry a login
//! is looked up for, and the normal form image tracking and cleanup compare names in.
//!
//! Docker's rules, as its reference package and its auth configuration apply them:
//!
//! - the digest is what follows the `@`; the tag is what follows the last `:` after the last `/`
//!   (so `host:5000/app` has no tag);
//! - the first `/`-separated component is a registry when it contains a `.` or a `:`, is
//!   `localhost`, or has an upper-case letter (repository paths are lower case, so it cannot be
//!   one); otherwise the reference is on Docker Hub, `docker.io`. A name without a `/` is always
//!   on Docker Hub (`localhost:5000` alone is the image `localhost` with the tag `5000`);
//! - `index.docker.io` is read as `docker.io`; on Docker Hub a one-component path gets `library/`
//!   (`busybox` is `docker.io/library/busybox`);
//! - the familiar name Docker lists images by drops `docker.io/` and, for a one-component path
//!   under it, `library/`; no tag means `latest`; with a digest Docker keeps only the digest;
//! - `registry-1.docker.io` (the host Docker Hub's registry answers on) is another registry to
//!   the reference package, so an image pulled under that name is listed under it; but a login
//!   for Docker Hub applies to it, so [`ImageRef::login_registry`] reads all three names
//!   ([`is_docker_hub`]) as `docker.io`.
//!
//! [`ImageRef::split`] applies the splitting rules to any text and never fails (a name Docker
//! would refuse still gets a stable normal form and a registry); [`ImageRef::parse`] also checks
//! Docker's grammar: lower-case path components with `.`, `_`, `__` or `-` runs between letters
//! and digits, a host name or `[IPv6]` with an optional port, a tag of at most 128 word
//! characters, `.` and `-` not first, a name of at most 255 characters, and not a bare 64-digit
//! image id. Limit: a digest is checked for its shape only (`algorithm:hex`), not for the length
//! its algorithm implies; the Engine refuses a digest of the wrong length with its own words.
//!
//! Hand-written: the maintained parsers (`oci-spec`'s `distribution::Reference`, which
//! `oci-client` uses) keep neither Docker's familiar name, nor its upper-case registry rule, nor
//! Docker Hub's login names, and bring `regex` and five derive-macro crates for a grammar of a
//! few dozen lines.

use std::fmt;

/// Docker Hub's registry name, as references are normalised and logins are kept.
pub const DOCKER_HUB: &str = "docker.io";

/// The namespace of Docker Hub's official images.
const OFFICIAL: &str = "library/";

/// The tag of a reference that names none.
pub const DEFAULT_TAG: &str = "latest";

/// Docker's limit on a name (registry and path).
const NAME_MAX: usize = 255;

/// Docker's limit on a tag.
const TAG_MAX: usize = 128;

/// Whether `host` is one of Docker Hub's names (`docker.io`, `index.docker.io`,
/// `registry-1.docker.io`, in any case): a login for Docker Hub applies to all of them.
pub fn is_docker_hub(host: &str) -> bool {
    ["docker.io", "index.docker.io", "registry-1.docker.io"]
        .iter()
        .any(|h| host.eq_ignore_ascii_case(h))
}

/// An image reference split by Docker's rules (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    domain: String,
    path: String,
    tag: Option<String>,
    digest: Option<String>,
    /// How many bytes of the text read are the name (before `:tag` and `@digest`).
    name_len: usize,
}

/// Why [`ImageRef::parse`] refused a reference (Docker's "invalid reference format").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid reference format: {reference:?}: {problem}")]
pub struct ImageRefError {
    /// The text as given.
    pub reference: String,
    pub problem: RefProblem,
}

/// What is wrong with a reference.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefProblem {
    #[error("it is empty")]
    Empty,
    #[error("a 64-digit hexadecimal string is an image id, not a repository name")]
    ImageId,
    #[error("the repository name {0:?} must be lowercase")]
    Uppercase(String),
    #[error("the repository name has an empty or invalid component {0:?}")]
    Path(String),
    #[error("the registry {0:?} is not a host name or [IPv6] address with an optional port")]
    Registry(String),
    #[error(
        "the tag {0:?} is not 1 to {TAG_MAX} letters, digits, '_', '.' or '-' (not '.' or '-' first)"
    )]
    Tag(String),
    #[error("the digest {0:?} is not algorithm:hex")]
    Digest(String),
    #[error("the name is longer than {NAME_MAX} characters")]
    TooLong,
}

impl ImageRef {
    /// Split `text` by Docker's rules, whatever it holds (see the module docs).
    pub fn split(text: &str) -> ImageRef {
        let (name_tag, digest) = match text.split_once('@') {
            Some((n, d)) => (n, Some(d.to_string())),
            None => (text, None),
        };
        let after_slash = name_tag.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match name_tag[after_slash..].rfind(':') {
            Some(i) => {
                let at = after_slash + i;
                (&name_tag[..at], Some(name_tag[at + 1..].to_string()))
            }
            None => (name_tag, None),
        };
        let (domain, path) = match name.split_once('/') {
            Some((first, rest))
                if first == "localhost"
                    || first.contains(['.', ':'])
                    || first.bytes().any(|b| b.is_ascii_uppercase()) =>
            {
                let domain = if first == "index.docker.io" {
                    DOCKER_HUB
                } else {
                    first
                };
                (domain, rest)
            }
            _ => (DOCKER_HUB, name),
        };
        let path = if domain == DOCKER_HUB && !path.contains('/') {
            format!("{OFFICIAL}{path}")
        } else {
            path.to_string()
        };
        ImageRef {
            domain: domain.to_string(),
            path,
            tag,
            digest,
            name_len: name.len(),
        }
    }

    /// Split `text` and check it against Docker's grammar (see the module docs).
    pub fn parse(text: &str) -> Result<ImageRef, ImageRefError> {
        let r = ImageRef::split(text);
        r.check(text).map_err(|problem| ImageRefError {
            reference: text.to_string(),
            problem,
        })?;
        Ok(r)
    }

    fn check(&self, text: &str) -> Result<(), RefProblem> {
        if text.is_empty() {
            return Err(RefProblem::Empty);
        }
        if text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(RefProblem::ImageId);
        }
        if self.path.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(RefProblem::Uppercase(self.path.clone()));
        }
        if let Some(bad) = self.path.split('/').find(|c| !path_component(c)) {
            return Err(RefProblem::Path(bad.to_string()));
        }
        if !registry(&self.domain) {
            return Err(RefProblem::Registry(self.domain.clone()));
        }
        if let Some(tag) = &self.tag
            && !valid_tag(tag)
        {
            return Err(RefProblem::Tag(tag.clone()));
        }
        if let Some(digest) = &self.digest
            && !valid_digest(digest)
        {
            return Err(RefProblem::Digest(digest.clone()));
        }
        if self.domain.len() + 1 + self.path.len() > NAME_MAX {
            return Err(RefProblem::TooLong);
        }
        Ok(())
    }

    /// The registry as the reference names it (`docker.io` for Docker Hub's default and legacy
    /// names, `registry-1.docker.io` as written).
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// The registry a login is looked up for: Docker Hub's three names are `docker.io`
    /// ([`is_docker_hub`]), any other as written.
    pub fn login_registry(&self) -> &str {
        if is_docker_hub(&self.domain) {
            DOCKER_HUB
        } else {
            &self.domain
        }
    }

    /// The repository path in the registry (`library/busybox` for `busybox`).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The path as Docker shows it: without `library/` for Docker Hub's official images.
    pub fn familiar_path(&self) -> &str {
        if self.domain == DOCKER_HUB
            && let Some(rest) = self.path.strip_prefix(OFFICIAL)
            && !rest.contains('/')
        {
            return rest;
        }
        &self.path
    }

    /// The tag as written (None: none was given).
    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    /// The digest as written (`sha256:…`).
    pub fn digest(&self) -> Option<&str> {
        self.digest.as_deref()
    }

    /// The name part of `text` (the text this was split from), as written: what Docker's
    /// `POST /images/create` takes as `fromImage` beside a tag.
    pub fn written_name<'t>(&self, text: &'t str) -> &'t str {
        text.get(..self.name_len).unwrap_or(text)
    }

    /// The familiar name (`busybox`, `me/app`, `127.0.0.1:5000/app`).
    pub fn familiar_name(&self) -> String {
        if self.domain == DOCKER_HUB {
            self.familiar_path().to_string()
        } else {
            format!("{}/{}", self.domain, self.path)
        }
    }
}

impl fmt::Display for ImageRef {
    /// The normal form Docker lists the image under: the familiar name with `@digest` when there
    /// is one (a tag beside it dropped), else `:tag` (`latest` when none was given).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.familiar_name())?;
        match (&self.digest, &self.tag) {
            (Some(d), _) => write!(f, "@{d}"),
            (None, Some(t)) => write!(f, ":{t}"),
            (None, None) => write!(f, ":{DEFAULT_TAG}"),
        }
    }
}

/// An image reference in Docker's normal form (`busybox`, `busybox:latest` and
/// `docker.io/library/busybox:latest` are all `busybox:latest`), surrounding whitespace ignored:
/// the key image tracking, leases and cleanup compare names by. Total: a reference Docker would
/// refuse still gets one (it names no image Docker has).
pub fn normalize(reference: &str) -> String {
    ImageRef::split(reference.trim()).to_string()
}

/// `[a-z0-9]+` runs joined by `.`, `_`, `__` or `-`+ (Docker's path component).
fn path_component(c: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let b = c.as_bytes();
    let (Some(&first), Some(&last)) = (b.first(), b.last()) else {
        return false;
    };
    if !alnum(first) || !alnum(last) {
        return false;
    }
    c.split(|ch: char| ch.is_ascii_lowercase() || ch.is_ascii_digit())
        .filter(|sep| !sep.is_empty())
        .all(|sep| matches!(sep, "." | "_" | "__") || sep.bytes().all(|b| b == b'-'))
}

/// A host name (labels of letters, digits and inner `-`, joined by `.`) or `[IPv6]`, with an
/// optional `:port`.
fn registry(domain: &str) -> bool {
    let (host, port) = if let Some(rest) = domain.strip_prefix('[') {
        let Some((inner, after)) = rest.split_once(']') else {
            return false;
        };
        if inner.is_empty() || !inner.bytes().all(|b| b.is_ascii_hexdigit() || b == b':') {
            return false;
        }
        match after {
            "" => return true,
            p => match p.strip_prefix(':') {
                Some(p) => ("", p),
                None => return false,
            },
        }
    } else {
        match domain.split_once(':') {
            Some((h, p)) => (h, p),
            None => (domain, "0"),
        }
    };
    let label = |l: &str| {
        let b = l.as_bytes();
        match (b.first(), b.last()) {
            (Some(f), Some(e)) => {
                f.is_ascii_alphanumeric()
                    && e.is_ascii_alphanumeric()
                    && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
            }
            _ => false,
        }
    };
    let host_ok = (host.is_empty() && domain.starts_with('[')) || host.split('.').all(label);
    host_ok && !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
}

/// `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`.
fn valid_tag(tag: &str) -> bool {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let b = tag.as_bytes();
    match b.first() {
        Some(&f) if word(f) && b.len() <= TAG_MAX => {
            b.iter().all(|&c| word(c) || c == b'.' || c == b'-')
        }
        _ => false,
    }
}

/// `algorithm:hex`, the algorithm `[A-Za-z][A-Za-z0-9]*` parts joined by `+`, `.`, `_` or `-`.
fn valid_digest(digest: &str) -> bool {
    let Some((algorithm, hex)) = digest.split_once(':') else {
        return false;
    };
    let part = |p: &str| {
        let b = p.as_bytes();
        b.first().is_some_and(u8::is_ascii_alphabetic) && b.iter().all(u8::is_ascii_alphanumeric)
    };
    algorithm.split(['+', '.', '_', '-']).all(part)
        && !hex.is_empty()
        && hex.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(text: &str) -> (String, String, Option<String>, Option<String>) {
        let r = ImageRef::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        (
            r.domain().to_string(),
            r.path().to_string(),
            r.tag().map(str::to_string),
            r.digest().map(str::to_string),
        )
    }

    fn s(x: &str) -> String {
        x.to_string()
    }

    #[test]
    fn names_split_as_docker_splits_them() {
        let hex = "a".repeat(64);
        for (text, domain, path, tag, digest) in [
            ("busybox", "docker.io", "library/busybox", None, None),
            (
                "busybox:1.36",
                "docker.io",
                "library/busybox",
                Some("1.36"),
                None,
            ),
            ("team/app:1", "docker.io", "team/app", Some("1"), None),
            (
                "docker.io/busybox",
                "docker.io",
                "library/busybox",
                None,
                None,
            ),
            (
                "index.docker.io/team/app",
                "docker.io",
                "team/app",
                None,
                None,
            ),
            (
                "registry-1.docker.io/team/app",
                "registry-1.docker.io",
                "team/app",
                None,
                None,
            ),
            ("localhost/app", "localhost", "app", None, None),
            (
                "localhost:5000/a/b:2",
                "localhost:5000",
                "a/b",
                Some("2"),
                None,
            ),
            (
                "localhost:5000",
                "docker.io",
                "library/localhost",
                Some("5000"),
                None,
            ),
            ("Registry/app", "Registry", "app", None, None),
            ("[::1]:5000/app", "[::1]:5000", "app", None, None),
            ("a.b-c.io/x/y/z", "a.b-c.io", "x/y/z", None, None),
            (
                "app:1@sha256:abc",
                "docker.io",
                "library/app",
                Some("1"),
                Some("sha256:abc"),
            ),
            ("h.io/a@sha256:1", "h.io", "a", None, Some("sha256:1")),
        ] {
            assert_eq!(
                parts(text),
                (s(domain), s(path), tag.map(s), digest.map(s)),
                "{text}"
            );
        }
        let pinned = format!("busybox@sha256:{hex}");
        assert_eq!(parts(&pinned).3, Some(format!("sha256:{hex}")));
    }

    /// The cases where the three parsers berth had disagreed, read once.
    #[test]
    fn where_the_old_parsers_disagreed() {
        // `library/busybox` is Docker's `busybox` (image tracking kept `library/`).
        assert_eq!(normalize("library/busybox"), "busybox:latest");
        assert_eq!(normalize("docker.io/busybox"), "busybox:latest");
        // `registry-1.docker.io` is a name of its own in references (Docker lists the image
        // under it) but Docker Hub for logins.
        let r = ImageRef::split("registry-1.docker.io/team/app");
        assert_eq!(r.to_string(), "registry-1.docker.io/team/app:latest");
        assert_eq!(r.login_registry(), "docker.io");
        assert_eq!(
            ImageRef::split("Index.Docker.IO/x").login_registry(),
            "docker.io"
        );
        // With a tag and a digest, Docker keeps the digest (image tracking kept both).
        assert_eq!(normalize("app:1@sha256:abc"), "app@sha256:abc");
        // An upper-case first component is a registry (the others took it for a namespace).
        assert_eq!(ImageRef::split("MyHost/app").login_registry(), "MyHost");
        assert_eq!(normalize("MyHost/app"), "MyHost/app:latest");
        // A one-component name is never a registry, even with a port-like tag.
        assert_eq!(normalize("localhost:5000"), "localhost:5000");
        assert_eq!(
            ImageRef::split("localhost:5000").login_registry(),
            "docker.io"
        );
    }

    #[test]
    fn the_normal_form_is_the_familiar_name_with_a_tag_or_digest() {
        for (text, normal) in [
            ("busybox", "busybox:latest"),
            (" busybox:1 ", "busybox:1"),
            ("docker.io/library/busybox:latest", "busybox:latest"),
            ("index.docker.io/library/busybox", "busybox:latest"),
            ("docker.io/library/a/b", "library/a/b:latest"),
            ("me/app", "me/app:latest"),
            ("127.0.0.1:5000/busybox", "127.0.0.1:5000/busybox:latest"),
            (
                "127.0.0.1:5000/library/busybox",
                "127.0.0.1:5000/library/busybox:latest",
            ),
            ("app@sha256:abc", "app@sha256:abc"),
        ] {
            assert_eq!(normalize(text), normal, "{text}");
        }
    }

    #[test]
    fn the_written_name_is_what_precedes_the_tag_or_digest() {
        for (text, name) in [
            ("busybox:1", "busybox"),
            ("127.0.0.1:5000/a/b:2", "127.0.0.1:5000/a/b"),
            ("x@sha256:abc", "x"),
            ("docker.io/x:1@sha256:abc", "docker.io/x"),
        ] {
            assert_eq!(ImageRef::split(text).written_name(text), name, "{text}");
        }
    }

    #[test]
    fn docker_refuses_what_parse_refuses() {
        let hex = "0123456789abcdef".repeat(4);
        let long = format!("h.io/{}", "a".repeat(251));
        for (text, problem) in [
            ("", RefProblem::Empty),
            (hex.as_str(), RefProblem::ImageId),
            ("MyApp", RefProblem::Uppercase(s("library/MyApp"))),
            ("team/App:1", RefProblem::Uppercase(s("team/App"))),
            (":x", RefProblem::Path(s(""))),
            ("a//b", RefProblem::Path(s(""))),
            ("a/-b", RefProblem::Path(s("-b"))),
            ("a/b_", RefProblem::Path(s("b_"))),
            ("a/b___c", RefProblem::Path(s("b___c"))),
            ("busy box", RefProblem::Path(s("busy box"))),
            ("h_x.io/a", RefProblem::Registry(s("h_x.io"))),
            ("h.io:/a", RefProblem::Registry(s("h.io:"))),
            ("h.io:50a/a", RefProblem::Registry(s("h.io:50a"))),
            ("[::1/a", RefProblem::Registry(s("[::1"))),
            ("-h.io/a", RefProblem::Registry(s("-h.io"))),
            ("a:", RefProblem::Tag(s(""))),
            ("a:.x", RefProblem::Tag(s(".x"))),
            ("a:-x", RefProblem::Tag(s("-x"))),
            ("a@sha256", RefProblem::Digest(s("sha256"))),
            ("a@sha256:xyz", RefProblem::Digest(s("sha256:xyz"))),
            ("a@:00", RefProblem::Digest(s(":00"))),
            ("a@1sha:00", RefProblem::Digest(s("1sha:00"))),
            (long.as_str(), RefProblem::TooLong),
        ] {
            assert_eq!(
                ImageRef::parse(text).map_err(|e| e.problem),
                Err(problem),
                "{text:?}"
            );
        }
        let tag = format!("a:{}", "t".repeat(TAG_MAX + 1));
        assert!(matches!(
            ImageRef::parse(&tag).map_err(|e| e.problem),
            Err(RefProblem::Tag(_))
        ));
        assert!(ImageRef::parse(&format!("a:{}", "t".repeat(TAG_MAX))).is_ok());
        let e = ImageRef::parse("MyApp").expect_err("upper case");
        assert_eq!(
            e.to_string(),
            "invalid reference format: \"MyApp\": the repository name \"library/MyApp\" must be lowercase"
        );
    }

    #[test]
    fn separators_and_hosts_docker_accepts() {
        for text in [
            "a.b/c",
            "a/b.c_d__e---f",
            "registry.example.com:443/team/api:2.4.1",
            "111122223333.dkr.ecr.eu-west-1.amazonaws.com/web:1",
            "[fe80::1]/app",
            "localhost:5000/x@sha256:abc",
            "a@sha256+b64.x_y-z:00",
            "UPPER.io/app:Tag_1",
        ] {
            assert!(ImageRef::parse(text).is_ok(), "{text}");
        }
    }

    #[test]
    fn splitting_never_fails() {
        for text in ["", "@", ":", "/", "a/@:b", "::/::@@", "é/ü:ß"] {
            let r = ImageRef::split(text);
            let _ = (r.to_string(), r.login_registry(), r.written_name(text));
        }
    }
}
