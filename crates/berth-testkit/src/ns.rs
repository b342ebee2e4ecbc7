//! Running one test in a private mount namespace, so that no mount it makes can reach the host.
//!
//! Why re-executing under `unshare`: `unshare(CLONE_NEWNS)` inside the multi-threaded test harness
//! would move only the calling thread (and needs `CLONE_FS` too), and a panic could leave mounts in
//! the host namespace. Instead each mounting test re-runs its own binary for just itself as
//! `unshare --mount --propagation private -- <test binary> --exact <name>`: every mount it makes
//! lives in a namespace that dies with that child process, whatever happens, and propagation is
//! private so nothing reaches the host. Programs the test starts (e.g. `berth`) run in the same
//! namespace and see its mounts. The child refuses to run the body unless its mount namespace
//! differs from the parent's.
//!
//! Limits: needs root and util-linux's `unshare`; the parent only checks that the child passed and
//! ran exactly one test (its output is passed through). Use [`ns_test!`](crate::ns_test) to write
//! such a test.

use std::process::Command;

/// Set in the child to the parent's mount namespace.
const ENV: &str = "BERTH_TEST_PARENT_MOUNT_NS";

fn mount_ns() -> String {
    std::fs::read_link("/proc/self/ns/mnt")
        .map(|p| p.display().to_string())
        .expect("/proc/self/ns/mnt readable")
}

/// True when the caller is inside the private namespace and should run the test body; otherwise
/// runs this one test (`test`, its name in the test binary) in a child inside a fresh private
/// mount namespace, checks it passed, and returns false.
///
/// # Panics
///
/// When not root, when `unshare` cannot run, or when the test failed or did not run in the child.
pub fn private_ns(test: &str) -> bool {
    if let Some(parent) = std::env::var_os(ENV) {
        assert_ne!(
            parent.to_string_lossy(),
            mount_ns(),
            "refusing to mount: not in a private mount namespace"
        );
        return true;
    }
    assert!(
        rustix::process::geteuid().is_root(),
        "mount tests need root (real mounts in a private mount namespace)"
    );
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--"])
        .arg(&exe)
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(ENV, mount_ns())
        .output()
        .expect("unshare (util-linux) runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{stdout}");
    eprint!("{stderr}");
    assert!(
        out.status.success(),
        "{test} failed in its private mount namespace ({})",
        out.status
    );
    assert!(
        stdout.contains("1 passed"),
        "{test} did not run in the child:\n{stdout}"
    );
    false
}

/// `#[test] fn name() { body }`, with the body run in a private mount namespace
/// ([`private_ns`](crate::ns::private_ns)).
#[macro_export]
macro_rules! ns_test {
    ($(#[$m:meta])* fn $name:ident() $body:block) => {
        $(#[$m])*
        #[test]
        fn $name() {
            if $crate::ns::private_ns(stringify!($name)) $body
        }
    };
}
