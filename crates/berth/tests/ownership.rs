//! The ownership rules of docs/architecture.md, checked: which crate may depend on which outside
//! crate, and which crate's code may name a client library or make a file-system syscall. A rule
//! that is only written down drifts; this test reads every `Cargo.toml` and every source file of
//! the workspace (no Docker needed) and fails naming the file, the line and the rule broken.
//!
//! How the source rules read code: line by line, with `//` comments (and doc comments) cut off,
//! so a module header may mention `redb` or `remove_file` in prose. String literals are read as
//! code: none of the forbidden paths is a plausible string.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    // CARGO_MANIFEST_DIR is crates/berth.
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every crate directory under crates/, by its directory name.
fn crates() -> BTreeMap<String, PathBuf> {
    let dir = workspace().join("crates");
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).expect("read crates/") {
        let path = entry.expect("crates/ entry").path();
        if path.join("Cargo.toml").is_file() {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            out.insert(name, path);
        }
    }
    assert!(
        out.len() >= 9,
        "expected berth's crates under {}",
        dir.display()
    );
    out
}

/// The names of a crate's dependencies in one section (`dependencies`, `dev-dependencies`,
/// `build-dependencies`), including target-specific ones.
fn deps(manifest: &toml::Table, section: &str) -> Vec<String> {
    let mut names: Vec<String> = manifest
        .get(section)
        .and_then(toml::Value::as_table)
        .map(|t| t.keys().cloned().collect())
        .unwrap_or_default();
    if let Some(targets) = manifest.get("target").and_then(toml::Value::as_table) {
        for cfg in targets.values() {
            if let Some(t) = cfg.get(section).and_then(toml::Value::as_table) {
                names.extend(t.keys().cloned());
            }
        }
    }
    names
}

fn manifest(dir: &Path) -> toml::Table {
    let text = std::fs::read_to_string(dir.join("Cargo.toml")).expect("read Cargo.toml");
    text.parse().expect("Cargo.toml is TOML")
}

/// Every `.rs` file below `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let p = e.expect("dir entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The code of a line: what comes before a `//` comment.
fn code(line: &str) -> &str {
    // `//` inside a string ("http://…") also cuts the line: that can only hide a match, and the
    // forbidden paths never stand after a URL on one line.
    line.split("//").next().unwrap_or("")
}

/// Lines of the `.rs` files under `dir` whose code contains one of `needles`:
/// (file, line number, needle).
fn uses(dir: &Path, needles: &[&str]) -> Vec<String> {
    let mut hits = Vec::new();
    for file in rust_files(dir) {
        let text = std::fs::read_to_string(&file).expect("read source");
        for (n, line) in text.lines().enumerate() {
            let c = code(line);
            for needle in needles {
                if c.contains(needle) {
                    let rel = file
                        .strip_prefix(workspace())
                        .unwrap_or(&file)
                        .to_path_buf();
                    hits.push(format!("{}:{}: `{needle}`", rel.display(), n + 1));
                }
            }
        }
    }
    hits
}

/// One rule about an outside crate: only `owners` may depend on it (any section) or name it
/// in their `src/`.
fn only(owners: &[&str], dependency: &str, path: &str) -> Vec<String> {
    let mut broken = Vec::new();
    for (name, dir) in crates() {
        if owners.contains(&name.as_str()) {
            continue;
        }
        let m = manifest(&dir);
        for section in ["dependencies", "dev-dependencies", "build-dependencies"] {
            if deps(&m, section).iter().any(|d| d == dependency) {
                broken.push(format!(
                    "crates/{name}/Cargo.toml: depends on `{dependency}` ({section}); only {owners:?} may"
                ));
            }
        }
        for hit in uses(
            &dir.join("src"),
            &[&format!("{path}::"), &format!("use {path}")],
        ) {
            broken.push(format!("{hit}: only {owners:?} may use `{dependency}`"));
        }
    }
    broken
}

fn check(rule: &str, broken: Vec<String>) {
    assert!(
        broken.is_empty(),
        "ownership rule broken: {rule}\n  {}\n(docs/architecture.md says who owns what; move the code to the owning crate)",
        broken.join("\n  ")
    );
}

#[test]
fn only_berth_docker_talks_to_docker() {
    // berth-testkit is dev-only: tests compare berth's view with Docker's own.
    check(
        "only berth-docker talks to the Docker Engine (bollard)",
        only(&["berth-docker", "berth-testkit"], "bollard", "bollard"),
    );
}

#[test]
fn only_berth_store_knows_the_database() {
    check(
        "only berth-store knows the database (redb)",
        only(&["berth-store"], "redb", "redb"),
    );
}

#[test]
fn only_berth_cluster_knows_etcd() {
    check(
        "only berth-cluster knows etcd (etcd-client)",
        only(&["berth-cluster"], "etcd-client", "etcd_client"),
    );
}

#[test]
fn only_berth_aws_talks_to_aws() {
    let mut broken = Vec::new();
    for (dependency, path) in [
        ("aws-config", "aws_config"),
        ("aws-sdk-sts", "aws_sdk_sts"),
        ("aws-sdk-ssm", "aws_sdk_ssm"),
        ("aws-sdk-secretsmanager", "aws_sdk_secretsmanager"),
        ("aws-sdk-ecr", "aws_sdk_ecr"),
        ("aws-sdk-s3", "aws_sdk_s3"),
    ] {
        broken.extend(only(&["berth-aws"], dependency, path));
    }
    check("only berth-aws talks to AWS (the AWS SDK for Rust)", broken);
}

#[test]
fn anyhow_only_in_the_binary() {
    check(
        "anyhow only in the berth binary; library crates have thiserror enums",
        only(&["berth"], "anyhow", "anyhow"),
    );
}

#[test]
fn only_berth_fs_makes_mount_and_delete_syscalls() {
    // Test code (tests/, benches/) may clean up its own temporary files; src/ of every other
    // crate goes through berth-fs (berth-testkit's mounts through berth_testkit::mount).
    let needles = [
        "rustix::mount",
        "unlinkat",
        "renameat",
        "fs::rename",
        "remove_file",
        "remove_dir",
    ];
    let mut broken = Vec::new();
    for (name, dir) in crates() {
        if name == "berth-fs" {
            continue;
        }
        broken.extend(uses(&dir.join("src"), &needles));
    }
    check(
        "only berth-fs makes mount syscalls, replaces files, deletes trees and removes sockets",
        broken,
    );
}

#[test]
fn the_model_is_pure() {
    let dir = crates()["berth-model"].clone();
    let m = manifest(&dir);
    let allowed = ["serde", "serde_json", "thiserror"];
    let mut broken: Vec<String> = deps(&m, "dependencies")
        .into_iter()
        .filter(|d| !allowed.contains(&d.as_str()))
        .map(|d| format!("crates/berth-model/Cargo.toml: depends on `{d}` (allowed: {allowed:?})"))
        .collect();
    // No I/O, no clock, no environment, no processes, no async runtime.
    broken.extend(uses(
        &dir.join("src"),
        &[
            "std::fs",
            "std::env",
            "std::process",
            "std::time::SystemTime",
            "SystemTime::now",
            "Instant::now",
            "TcpStream",
            "UdpSocket",
            "UnixStream",
            "tokio",
        ],
    ));
    check(
        "berth-model is pure: parsing and validation, no I/O",
        broken,
    );
}

#[test]
fn the_engine_and_the_api_know_traits_not_docker_or_the_database() {
    let mut broken = Vec::new();
    for krate in ["berth-engine", "berth-api", "berth-model", "berth-fs"] {
        let m = manifest(&crates()[krate]);
        for d in deps(&m, "dependencies") {
            if [
                "berth-docker",
                "berth-store",
                "berth-cluster",
                "berth-volume",
            ]
            .contains(&d.as_str())
            {
                broken.push(format!(
                    "crates/{krate}/Cargo.toml: depends on `{d}`; {krate} works through traits the binary wires"
                ));
            }
        }
    }
    check(
        "the engine and the API are written against traits, never a concrete Docker, store or cluster",
        broken,
    );
}

#[test]
fn the_engines_pure_core_reaches_no_runtime_code() {
    // The decision core and what builds a create spec are pure: no runtime call, no actor, no
    // async. (berth's pause image is named by the spec and imported by `pause_provision`, kept
    // apart so the state and the spec never reach the runtime.)
    let src = crates()["berth-engine"].join("src");
    let pure = [
        "state.rs",
        "decide.rs",
        "restart.rs",
        "pause.rs",
        "pause_image.rs",
        "spec.rs",
        "create_spec.rs",
        "firelens.rs",
        "container_metadata.rs",
        "gpu.rs",
        "image_ref.rs",
    ];
    let needles = [
        "crate::actor",
        "crate::pause_provision",
        "crate::fake",
        "Runtime>",
        ": Runtime",
        "impl Runtime",
        "async fn",
        "tokio::",
        ".await",
    ];
    let mut broken = Vec::new();
    for file in pure {
        let path = src.join(file);
        assert!(
            path.is_file(),
            "{} is gone: update this list",
            path.display()
        );
        let text = std::fs::read_to_string(&path).expect("read source");
        for (n, line) in text.lines().enumerate() {
            let c = code(line);
            for needle in needles {
                if c.contains(needle) {
                    broken.push(format!(
                        "crates/berth-engine/src/{file}:{}: `{needle}`",
                        n + 1
                    ));
                }
            }
        }
    }
    check(
        "the engine's decision core and create-spec modules are pure (no runtime call, actor or async)",
        broken,
    );
}

#[test]
fn the_rules_see_what_they_claim_to() {
    // The checks above must not pass by reading nothing: the owners do use what they own.
    let c = crates();
    assert!(!uses(&c["berth-docker"].join("src"), &["bollard::"]).is_empty());
    assert!(!uses(&c["berth-store"].join("src"), &["redb::"]).is_empty());
    assert!(!uses(&c["berth-cluster"].join("src"), &["etcd_client::"]).is_empty());
    assert!(!uses(&c["berth-aws"].join("src"), &["aws_sdk_sts::"]).is_empty());
    assert!(!uses(&c["berth-fs"].join("src"), &["rustix::mount", "unlinkat"]).is_empty());
    assert!(deps(&manifest(&c["berth"]), "dependencies").contains(&"anyhow".to_owned()));
    // A comment is not code; code before a comment is.
    assert_eq!(code("//! names redb::Database in prose"), "");
    assert_eq!(
        code("let db = redb::Database::create(p); // open"),
        "let db = redb::Database::create(p); "
    );
}
