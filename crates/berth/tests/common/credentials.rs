//! The credentials endpoint's address for tests: a test that makes berth serve
//! `169.254.170.2:80` holds [`endpoint_lock`] for its whole run (a process-wide mutex and an flock
//! on `/tmp/berth-credentials-endpoint.lock`, since several test binaries run at once), and the
//! lock's drop removes the address should a killed berth have left it.
#![allow(dead_code)]

use std::sync::Mutex;

static IN_PROCESS: Mutex<()> = Mutex::new(());

/// Holds 169.254.170.2:80 for this test: a process-wide mutex and an flock across test binaries.
pub struct EndpointLock {
    _file: std::fs::File,
    _guard: std::sync::MutexGuard<'static, ()>,
}

pub fn endpoint_lock() -> EndpointLock {
    let guard = IN_PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open("/tmp/berth-credentials-endpoint.lock")
        .expect("lock file");
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive).expect("flock");
    let lock = EndpointLock {
        _file: file,
        _guard: guard,
    };
    assert!(
        !lo_has_endpoint(),
        "169.254.170.2 is on lo before the test: something else (a berth left running?) holds it"
    );
    lock
}

impl Drop for EndpointLock {
    /// A test that failed with berth still running (killed, not stopped) leaves the address:
    /// removed here, once berth is gone (the lock is the first value of each test, so dropped
    /// last), so the machine is left as it was.
    fn drop(&mut self) {
        if lo_has_endpoint() {
            let _ = std::process::Command::new("ip")
                .args(["-4", "addr", "del", "169.254.170.2/32", "dev", "lo"])
                .status();
        }
    }
}

pub fn lo_has_endpoint() -> bool {
    let out = std::process::Command::new("ip")
        .args(["-4", "addr", "show", "dev", "lo"])
        .output()
        .expect("ip runs (iproute2)");
    String::from_utf8_lossy(&out.stdout).contains("169.254.170.2")
}
