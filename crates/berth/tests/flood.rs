//! `berth agent` under a flood of half-open connections on its metadata port (loopback only, a
//! bounded flood that stops by itself): the control API keeps answering, the agent never runs out
//! of file descriptors, its memory comes back down, and a head sent too slowly is cut off.
//!
//! The agent runs with 1024 descriptors (the usual soft default of a service), set with
//! `prlimit` once it has started: the server's own bounds, not a large limit, must protect it.
//! The test process raises its own limit to hold the flood's sockets.

mod common;

use common::agent::{Agent, Introspection, Launch};
use rustix::process::{Resource, Rlimit, getrlimit, prlimit, setrlimit};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const AGENT_NOFILE: u64 = 1024;
const FLOOD: usize = 5000;
const HOLD: Duration = Duration::from_secs(4);

/// An agent as this file has always started it: no `--cleanup-wait`, `--introspection-addr off`,
/// no pull behaviour variable.
fn start() -> Agent {
    let launch = Launch {
        cleanup_wait: false,
        introspection: Introspection::Off,
        prefer_cached: false,
        ..Launch::default()
    };
    // The cleanup wait is not passed (`cleanup_wait: false`).
    Agent::start_launch("", launch, &[], &[])
}

fn pid(agent: &Agent) -> rustix::process::Pid {
    let raw = i32::try_from(child_id(agent)).expect("pid fits");
    rustix::process::Pid::from_raw(raw).expect("pid is positive")
}

fn child_id(agent: &Agent) -> u32 {
    agent.child.as_ref().expect("agent runs").id()
}

fn metadata(agent: &Agent) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], agent.port))
}

/// `berth ps`: exit code (-1 if it did not answer within 5 s: killed), how long it took, its
/// stderr.
fn ps(agent: &Agent) -> (i32, Duration, String) {
    let t = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_berth"))
        .arg("ps")
        .arg("--agent")
        .arg(agent.socket())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("berth runs");
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            return (status.code().unwrap_or(-1), t.elapsed(), err);
        }
        if t.elapsed() > Duration::from_secs(5) {
            let _ = child.kill();
            let _ = child.wait();
            return (-1, t.elapsed(), "no answer within 5 s".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn open_fds(agent: &Agent) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", child_id(agent)))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// VmRSS in KiB.
fn rss_kib(agent: &Agent) -> u64 {
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", child_id(agent))).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Enough descriptors in this process for the flood's sockets.
fn raise_own_fd_limit() {
    let want = (FLOOD as u64) + 1000;
    let now = getrlimit(Resource::Nofile);
    if now.current.is_some_and(|c| c >= want) {
        return;
    }
    let hard = now.maximum;
    assert!(
        hard.is_none_or(|h| h >= want),
        "the hard descriptor limit {hard:?} is below the {want} this test needs"
    );
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(want),
            maximum: hard,
        },
    )
    .expect("raise this test's descriptor limit");
}

/// Open `FLOOD` connections to `addr`, each sending half a request line, hold them for `HOLD`,
/// close them all. Returns how many connected.
fn flood(addr: SocketAddr, done: Arc<AtomicBool>, connected: Arc<AtomicUsize>) {
    let mut held = Vec::with_capacity(FLOOD);
    for _ in 0..FLOOD {
        // The agent stops accepting at its limit; the kernel's backlog then fills and connects
        // wait: give each a short while, then move on.
        if let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            let _ = s.write_all(b"GET /v4/0123456789abcdef HTT");
            connected.fetch_add(1, Ordering::Relaxed);
            held.push(s);
        }
    }
    std::thread::sleep(HOLD);
    drop(held);
    done.store(true, Ordering::SeqCst);
}

#[test]
fn a_flood_of_half_sent_requests_on_the_metadata_port_never_starves_the_control_api() {
    raise_own_fd_limit();
    let agent = start();
    prlimit(
        Some(pid(&agent)),
        Resource::Nofile,
        Rlimit {
            current: Some(AGENT_NOFILE),
            maximum: Some(AGENT_NOFILE),
        },
    )
    .expect("set the agent's descriptor limit");
    let rss_before = rss_kib(&agent);
    let done = Arc::new(AtomicBool::new(false));
    let connected = Arc::new(AtomicUsize::new(0));
    let flooder = {
        let (addr, done, connected) = (metadata(&agent), done.clone(), connected.clone());
        std::thread::spawn(move || flood(addr, done, connected))
    };
    let (mut slowest, mut answered, mut peak_fds, mut peak_rss) = (Duration::ZERO, 0, 0, 0);
    while !done.load(Ordering::SeqCst) {
        let (code, took, err) = ps(&agent);
        assert_eq!(
            code,
            0,
            "berth ps failed during the flood: {err}\n{}",
            agent.log()
        );
        assert!(
            took < Duration::from_secs(2),
            "berth ps took {took:?} during the flood"
        );
        slowest = slowest.max(took);
        answered += 1;
        peak_fds = peak_fds.max(open_fds(&agent));
        peak_rss = peak_rss.max(rss_kib(&agent));
        std::thread::sleep(Duration::from_millis(100));
    }
    flooder.join().expect("the flood thread ends");
    let connected = connected.load(Ordering::Relaxed);
    eprintln!(
        "flood: {connected} of {FLOOD} connected; berth ps answered {answered} times, slowest {slowest:?}; agent peak {peak_fds} fds, RSS {} KiB before, {peak_rss} KiB peak",
        rss_before
    );
    assert!(connected >= 1000, "only {connected} connections: no flood");
    assert!(answered >= 5, "berth ps answered only {answered} times");
    assert!(
        (peak_fds as u64) < AGENT_NOFILE - 100,
        "the agent held {peak_fds} descriptors of {AGENT_NOFILE}"
    );
    assert!(
        !agent.log().contains("Too many open files"),
        "{}",
        agent.log()
    );

    // Memory comes back: below 100 MiB within 10 s.
    let t = Instant::now();
    loop {
        let rss = rss_kib(&agent);
        if rss < 100 * 1024 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "agent RSS {rss} KiB after the flood"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The metadata port serves again once the flood is gone.
    let t = Instant::now();
    let answer = loop {
        let mut s = TcpStream::connect(metadata(&agent)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        let _ = s.write_all(b"GET /v4/unknown HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n");
        let mut got = String::new();
        let _ = s.read_to_string(&mut got);
        if got.starts_with("HTTP/1.1 404") || t.elapsed() > Duration::from_secs(10) {
            break got;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer:?}");
}

#[test]
fn a_connection_that_sends_its_head_too_slowly_is_closed_after_the_header_timeout() {
    let agent = start();
    let mut s = TcpStream::connect(metadata(&agent)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    let t = Instant::now();
    s.write_all(b"GET /v4/x HTTP/1.1\r\nHost: m\r\n")
        .expect("write");
    // A byte a second, never the blank line: trickling does not reset the timer.
    let mut buf = [0u8; 256];
    let mut closed = false;
    for _ in 0..12 {
        s.set_read_timeout(Some(Duration::from_secs(1)))
            .expect("timeout");
        match s.read(&mut buf) {
            Ok(0) => {
                closed = true;
                break;
            }
            Ok(n) => panic!("answered: {:?}", String::from_utf8_lossy(&buf[..n])),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if s.write_all(b"X").is_err() {
                    closed = true;
                    break;
                }
            }
            Err(_) => {
                closed = true;
                break;
            }
        }
    }
    let waited = t.elapsed();
    assert!(closed, "the connection was still open after {waited:?}");
    assert!(
        waited >= Duration::from_millis(4500) && waited < Duration::from_secs(8),
        "closed after {waited:?}, not after the 5 s header timeout"
    );
}
