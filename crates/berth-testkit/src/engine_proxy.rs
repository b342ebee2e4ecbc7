//! A Unix-socket proxy in front of the real Docker Engine that can refuse or delay chosen calls:
//! how tests make the Engine misbehave for real (a stop Docker refuses, a volume inspect that takes
//! 40 s) without mocking berth's Docker client. Point berth at [`EngineProxy::url`]
//! (`--docker-host`); every call goes through to `/var/run/docker.sock` unless a [`Rule`] matches
//! it.
//!
//! Each forwarded request gets `Connection: close`, so a client's keep-alive connection carries
//! one request and every request is judged by the rules (Docker's answer then closes the
//! connection, and the client opens a new one). Streams (events, logs, attach) pass through
//! untouched once their request is judged; [`EngineProxy::cut`] drops every connection open at
//! that moment (event streams included), as an Engine restart would. Threads, not tasks: the proxy works under any runtime
//! and outlives none (dropping it stops accepting; connections in flight end with their peers).
//!
//! [`Fault::LoseAnswer`] lets Docker act and drops its answer: a call whose answer is lost
//! after it took effect.
//!
//! Hand-written because no crate is a fault-injecting HTTP-over-Unix-socket proxy.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the proxy does with a matching request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Answer `503 Service Unavailable` with a Docker-style JSON message, without asking Docker.
    Refuse,
    /// Close the connection without answering.
    Close,
    /// Wait this long, then forward the request as usual.
    Delay(Duration),
    /// Never answer (hold the connection open until the client gives up).
    Hang,
    /// Forward the request to Docker and let it act, read its whole answer, then close the
    /// client's connection without writing any of it: an answer lost in transport (the client
    /// sees a dropped connection although Docker did what it asked).
    LoseAnswer,
}

/// A rule: requests whose method is `method` (any when empty) and whose path (without the API
/// version prefix `/v1.41`) contains `path_contains` get `fault`.
#[derive(Debug, Clone)]
pub struct Rule {
    pub method: String,
    pub path_contains: String,
    pub fault: Fault,
}

impl Rule {
    pub fn new(method: &str, path_contains: &str, fault: Fault) -> Rule {
        Rule {
            method: method.to_string(),
            path_contains: path_contains.to_string(),
            fault,
        }
    }

    fn matches(&self, method: &str, path: &str) -> bool {
        (self.method.is_empty() || self.method.eq_ignore_ascii_case(method))
            && path.contains(&self.path_contains)
    }
}

struct Shared {
    rules: Mutex<Vec<Rule>>,
    upstream: PathBuf,
    faulted: AtomicU64,
    forwarded: AtomicU64,
    /// Held (`Hang`) requests whose client closed the connection: calls the client gave up.
    released: AtomicU64,
    /// Every request line seen, in order (for assertions on what berth asked).
    seen: Mutex<Vec<String>>,
    stop: AtomicBool,
    /// The client side of every connection being served, by a serial number (for `cut`).
    open: Mutex<HashMap<u64, UnixStream>>,
    next: AtomicU64,
}

/// The running proxy. Dropping it stops the accept loop and removes nothing but its socket.
pub struct EngineProxy {
    path: PathBuf,
    /// The socket file this proxy bound, for its removal through berth-fs.
    socket: Option<berth_fs::socket::SocketId>,
    shared: Arc<Shared>,
}

/// The real Engine's socket.
pub const DOCKER_SOCKET: &str = "/var/run/docker.sock";

impl EngineProxy {
    /// Listen on `dir/engine-proxy.sock`, forwarding to the real Engine.
    pub fn start(dir: &Path) -> EngineProxy {
        Self::start_to(dir, Path::new(DOCKER_SOCKET))
    }

    /// Listen on `dir/engine-proxy.sock`, forwarding to `upstream`.
    pub fn start_to(dir: &Path, upstream: &Path) -> EngineProxy {
        let path = dir.join("engine-proxy.sock");
        let listener = UnixListener::bind(&path)
            .unwrap_or_else(|e| panic!("engine proxy: cannot listen on {}: {e}", path.display()));
        let socket = berth_fs::socket::identity(&path).ok();
        let shared = Arc::new(Shared {
            rules: Mutex::new(Vec::new()),
            upstream: upstream.to_path_buf(),
            faulted: AtomicU64::new(0),
            forwarded: AtomicU64::new(0),
            released: AtomicU64::new(0),
            seen: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            open: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
        });
        let s = shared.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let s = s.clone();
                std::thread::spawn(move || {
                    let n = s.next.fetch_add(1, Ordering::SeqCst);
                    if let Ok(c) = conn.try_clone() {
                        lock(&s.open).insert(n, c);
                    }
                    serve(conn, &s);
                    lock(&s.open).remove(&n);
                });
            }
        });
        EngineProxy {
            path,
            socket,
            shared,
        }
    }

    /// `unix://<socket>`, for `--docker-host` or `DOCKER_HOST`.
    pub fn url(&self) -> String {
        format!("unix://{}", self.path.display())
    }

    pub fn socket(&self) -> &Path {
        &self.path
    }

    /// Replace the rules (an empty list lets every call through).
    pub fn set_rules(&self, rules: Vec<Rule>) {
        *lock(&self.shared.rules) = rules;
    }

    /// Add one rule.
    pub fn add_rule(&self, rule: Rule) {
        lock(&self.shared.rules).push(rule);
    }

    /// Let every call through from now on.
    pub fn clear(&self) {
        lock(&self.shared.rules).clear();
    }

    /// Requests a rule matched so far.
    pub fn faulted(&self) -> u64 {
        self.shared.faulted.load(Ordering::SeqCst)
    }

    /// Requests forwarded to the Engine so far (delayed ones included).
    pub fn forwarded(&self) -> u64 {
        self.shared.forwarded.load(Ordering::SeqCst)
    }

    /// Held (`Hang`) requests whose client has closed its connection so far: calls the client
    /// gave up (a timeout, a cancelled pull).
    pub fn released(&self) -> u64 {
        self.shared.released.load(Ordering::SeqCst)
    }

    /// Drop every connection open now (a client's event stream ends, as when the Engine
    /// restarts); new connections are served as before. Returns how many were cut.
    pub fn cut(&self) -> usize {
        let open = lock(&self.shared.open);
        for c in open.values() {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
        open.len()
    }

    /// Every request line seen so far (`POST /v1.41/containers/…/stop?t=10`).
    pub fn seen(&self) -> Vec<String> {
        lock(&self.shared.seen).clone()
    }
}

impl Drop for EngineProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees `stop`.
        let _ = UnixStream::connect(&self.path);
        if let Some(id) = self.socket {
            let _ = berth_fs::socket::release(&self.path, id);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Read up to the end of the request head; returns (head, bytes read past it).
fn read_head(conn: &mut UnixStream) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Some((buf, rest));
        }
        if buf.len() > 64 * 1024 {
            return None;
        }
        let n = conn.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The head with any `Connection` header replaced by `Connection: close`.
fn close_after(head: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(head);
    let mut out = String::with_capacity(text.len() + 20);
    for line in text.split("\r\n") {
        if line.is_empty() {
            continue;
        }
        if line
            .split(':')
            .next()
            .is_some_and(|n| n.trim().eq_ignore_ascii_case("connection"))
        {
            continue;
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    out.into_bytes()
}

/// The request path without the `/v1.NN` prefix.
fn api_path(target: &str) -> &str {
    if let Some(rest) = target.strip_prefix("/v1.")
        && let Some(i) = rest.find('/')
    {
        return &rest[i..];
    }
    target
}

fn serve(mut conn: UnixStream, s: &Shared) {
    let Some((head, rest)) = read_head(&mut conn) else {
        return;
    };
    let line = String::from_utf8_lossy(&head)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    let mut words = line.split_whitespace();
    let method = words.next().unwrap_or_default().to_string();
    let target = words.next().unwrap_or_default().to_string();
    let path = api_path(&target);
    let fault = lock(&s.rules)
        .iter()
        .find(|r| r.matches(&method, path))
        .map(|r| r.fault.clone());
    if fault.is_some() {
        s.faulted.fetch_add(1, Ordering::SeqCst);
    }
    // Recorded after the fault is counted, so a test that has seen the call also sees it counted.
    lock(&s.seen).push(line.clone());
    match fault {
        Some(Fault::Refuse) => {
            let body = r#"{"message":"engine proxy: this call is refused for the test"}"#;
            let answer = format!(
                "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = conn.write_all(answer.as_bytes());
            return;
        }
        Some(Fault::Close) => return,
        Some(Fault::Hang) => {
            // Hold until the client closes its end.
            let mut sink = [0u8; 1024];
            while matches!(conn.read(&mut sink), Ok(n) if n > 0) {}
            s.released.fetch_add(1, Ordering::SeqCst);
            return;
        }
        Some(Fault::LoseAnswer) => {
            lose_answer(conn, &head, &rest, s);
            return;
        }
        Some(Fault::Delay(d)) => std::thread::sleep(d),
        None => {}
    }
    let Ok(mut up) = UnixStream::connect(&s.upstream) else {
        return;
    };
    s.forwarded.fetch_add(1, Ordering::SeqCst);
    if up.write_all(&close_after(&head)).is_err() || up.write_all(&rest).is_err() {
        return;
    }
    let (Ok(mut up_read), Ok(mut conn_write)) = (up.try_clone(), conn.try_clone()) else {
        return;
    };
    // Client → Engine on a second thread (request bodies, attach input); Engine → client here.
    let to_engine = std::thread::spawn(move || {
        let _ = std::io::copy(&mut conn, &mut up);
        let _ = up.shutdown(std::net::Shutdown::Write);
    });
    let _ = std::io::copy(&mut up_read, &mut conn_write);
    let _ = conn_write.shutdown(std::net::Shutdown::Both);
    let _ = to_engine.join();
}

/// [`Fault::LoseAnswer`]: the request (its body too) goes to Docker, Docker's whole answer is read
/// and dropped, and only then the client's connection is closed.
fn lose_answer(conn: UnixStream, head: &[u8], rest: &[u8], s: &Shared) {
    let Ok(mut up) = UnixStream::connect(&s.upstream) else {
        return;
    };
    s.forwarded.fetch_add(1, Ordering::SeqCst);
    if up.write_all(&close_after(head)).is_err() || up.write_all(rest).is_err() {
        return;
    }
    let (Ok(mut up_read), Ok(mut client)) = (up.try_clone(), conn.try_clone()) else {
        return;
    };
    // The rest of the request body, as the client sends it, until the connection is closed.
    let to_engine = std::thread::spawn(move || {
        let _ = std::io::copy(&mut client, &mut up);
        let _ = up.shutdown(std::net::Shutdown::Write);
    });
    // Docker closes after its answer (`Connection: close`): read all of it, write none.
    let _ = std::io::copy(&mut up_read, &mut std::io::sink());
    let _ = conn.shutdown(std::net::Shutdown::Both);
    let _ = to_engine.join();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_lose_their_version_prefix_and_heads_end_with_close() {
        assert_eq!(
            api_path("/v1.41/containers/x/stop?t=1"),
            "/containers/x/stop?t=1"
        );
        assert_eq!(api_path("/_ping"), "/_ping");
        let head = b"POST /v1.41/x HTTP/1.1\r\nHost: d\r\nconnection: keep-alive\r\n\r\n";
        let out = String::from_utf8(close_after(head)).expect("utf-8");
        assert_eq!(
            out,
            "POST /v1.41/x HTTP/1.1\r\nHost: d\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn rules_match_method_and_path() {
        let r = Rule::new("POST", "/stop", Fault::Refuse);
        assert!(r.matches("post", "/containers/a/stop?t=10"));
        assert!(!r.matches("GET", "/containers/a/stop"));
        assert!(Rule::new("", "/volumes/", Fault::Hang).matches("GET", "/volumes/v"));
    }
}
