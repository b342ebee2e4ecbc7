//! The TCP proxy against a small echo server on loopback: bytes pass both ways (and half-closes),
//! `cut` closes open connections and holds new ones until `heal` closes them, `stall` silences
//! connections without closing them, dropping the proxy closes everything. Against a real etcd:
//! `crates/berth-cluster/tests/partition.rs`.

use berth_testkit::tcp_proxy::{ProxySet, TcpProxy};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const GREETING: &[u8] = b"hello\n";

/// A target: greets each connection, then echoes what it reads until EOF, then closes.
struct Echo {
    addr: SocketAddr,
    accepted: Arc<AtomicU64>,
    /// Connections whose client side reached EOF or an error (the proxy closed them).
    ended: Arc<AtomicU64>,
    received: Arc<AtomicU64>,
}

impl Echo {
    fn start() -> Echo {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let accepted = Arc::new(AtomicU64::new(0));
        let ended = Arc::new(AtomicU64::new(0));
        let received = Arc::new(AtomicU64::new(0));
        let (a, e, r) = (accepted.clone(), ended.clone(), received.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                a.fetch_add(1, Ordering::SeqCst);
                let (e, r) = (e.clone(), r.clone());
                std::thread::spawn(move || {
                    let _ = conn.write_all(GREETING);
                    let mut buf = [0u8; 8192];
                    loop {
                        match conn.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                r.fetch_add(n as u64, Ordering::SeqCst);
                                if conn.write_all(&buf[..n]).is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    e.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        Echo {
            addr,
            accepted,
            ended,
            received,
        }
    }
}

fn connect(proxy: &TcpProxy) -> TcpStream {
    let s = TcpStream::connect(proxy.addr()).expect("connect to the proxy");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    s
}

fn read_exact(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    s.read_exact(&mut buf).expect("read through the proxy");
    buf
}

/// Nothing arrives within `wait`: the read times out (not EOF, not data).
fn silent(s: &mut TcpStream, wait: Duration) {
    s.set_read_timeout(Some(wait)).expect("timeout");
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
        other => panic!("expected silence for {wait:?}, got {other:?}"),
    }
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
}

/// The connection was closed by the far side: EOF or a reset, within 2 s.
fn closed(s: &mut TcpStream) {
    s.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        other => panic!("expected the connection closed, got {other:?}"),
    }
}

fn eventually(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < limit, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn bytes_pass_both_ways_with_half_closes_and_are_counted() {
    let echo = Echo::start();
    let proxy = TcpProxy::start(echo.addr);
    assert_eq!(
        proxy.url(),
        format!("http://127.0.0.1:{}", proxy.addr().port())
    );
    assert_eq!(proxy.target(), echo.addr);

    let mut s = connect(&proxy);
    assert_eq!(read_exact(&mut s, GREETING.len()), GREETING);
    s.write_all(b"ping").expect("write");
    assert_eq!(read_exact(&mut s, 4), b"ping");

    // 4 MiB each way at once (a writer thread, so neither side waits on the other): partial
    // reads and writes in the proxy, every byte in order.
    let payload: Vec<u8> = (0..4 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let mut writer = s.try_clone().expect("clone");
    let sent = payload.clone();
    let writing = std::thread::spawn(move || {
        writer.write_all(&sent).expect("write 4 MiB");
        // Half-close: the target sees EOF, echoes the rest, and closes its side.
        writer
            .shutdown(std::net::Shutdown::Write)
            .expect("shutdown");
    });
    let mut back = Vec::new();
    s.read_to_end(&mut back).expect("read to EOF");
    writing.join().expect("writer");
    assert_eq!(back.len(), payload.len());
    assert!(back == payload, "the echo differs from what was sent");

    eventually("the connection is closed", Duration::from_secs(5), || {
        proxy.stats().open == 0
    });
    let stats = proxy.stats();
    assert_eq!(stats.accepted, 1, "{stats:?}");
    assert_eq!(stats.forwarded, 1, "{stats:?}");
    assert_eq!(stats.bytes_to_target, 4 + payload.len() as u64, "{stats:?}");
    assert_eq!(
        stats.bytes_to_client,
        (GREETING.len() + 4 + payload.len()) as u64,
        "{stats:?}"
    );
    assert_eq!((stats.held, stats.cut, stats.target_refused), (0, 0, 0));
    assert_eq!(echo.ended.load(Ordering::SeqCst), 1);
}

#[test]
fn cut_closes_open_connections_and_holds_new_ones_until_heal() {
    let echo = Echo::start();
    let proxy = TcpProxy::start(echo.addr);
    let mut a = connect(&proxy);
    assert_eq!(read_exact(&mut a, GREETING.len()), GREETING);
    assert!(proxy.is_flowing());

    proxy.cut();
    assert!(!proxy.is_flowing());
    // Both sides see the connection end.
    closed(&mut a);
    eventually(
        "the target sees its connection closed",
        Duration::from_secs(2),
        || echo.ended.load(Ordering::SeqCst) == 1,
    );
    let stats = proxy.stats();
    assert_eq!((stats.cut, stats.open), (1, 0), "{stats:?}");

    // A new connection is accepted but carries nothing: no greeting, nothing reaches the target.
    let mut b = connect(&proxy);
    b.write_all(b"ping").expect("write while cut");
    silent(&mut b, Duration::from_millis(500));
    assert_eq!(echo.accepted.load(Ordering::SeqCst), 1, "nothing forwarded");
    assert_eq!(echo.received.load(Ordering::SeqCst), 0);
    let stats = proxy.stats();
    assert_eq!(
        (stats.accepted, stats.forwarded, stats.held),
        (2, 1, 1),
        "{stats:?}"
    );

    // Heal: the held connection is closed, and what it sent never reaches the target; new
    // connections are forwarded.
    proxy.heal();
    closed(&mut b);
    let mut c = connect(&proxy);
    assert_eq!(read_exact(&mut c, GREETING.len()), GREETING);
    c.write_all(b"pong").expect("write");
    assert_eq!(read_exact(&mut c, 4), b"pong");
    assert_eq!(echo.received.load(Ordering::SeqCst), 4, "only pong arrived");
    let stats = proxy.stats();
    assert_eq!(
        (stats.forwarded, stats.held, stats.held_closed, stats.open),
        (2, 0, 1, 1),
        "{stats:?}"
    );

    // A second cut closes it; a cut of a cut link changes nothing more.
    proxy.cut();
    closed(&mut c);
    proxy.cut();
    assert_eq!(proxy.stats().cut, 2);
}

#[test]
fn stall_silences_connections_without_closing_them_and_heal_resumes_them() {
    let echo = Echo::start();
    let proxy = TcpProxy::start(echo.addr);
    let mut a = connect(&proxy);
    assert_eq!(read_exact(&mut a, GREETING.len()), GREETING);

    proxy.stall();
    a.write_all(b"ping").expect("write while stalled");
    silent(&mut a, Duration::from_millis(500));
    assert_eq!(
        echo.received.load(Ordering::SeqCst),
        0,
        "nothing reached the target"
    );
    let mut b = connect(&proxy);
    silent(&mut b, Duration::from_millis(200));
    let stats = proxy.stats();
    assert_eq!(
        (stats.open, stats.held, stats.cut, stats.forwarded),
        (1, 1, 0, 1),
        "{stats:?}"
    );

    // Heal: what waited is delivered on the same connection (as TCP retransmits it when a link
    // comes back); the held one, never established in a real partition, is closed.
    proxy.heal();
    assert_eq!(read_exact(&mut a, 4), b"ping");
    closed(&mut b);
    assert_eq!(
        echo.ended.load(Ordering::SeqCst),
        0,
        "the target lost no connection"
    );
    assert_eq!(echo.accepted.load(Ordering::SeqCst), 1);
}

#[test]
fn dropping_the_proxy_closes_every_connection_and_the_listener() {
    let echo = Echo::start();
    let proxy = TcpProxy::start(echo.addr);
    let addr = proxy.addr();
    let mut a = connect(&proxy);
    assert_eq!(read_exact(&mut a, GREETING.len()), GREETING);
    proxy.stall();
    let mut held = connect(&proxy);
    eventually(
        "the second connection is held",
        Duration::from_secs(2),
        || proxy.stats().held == 1,
    );

    let start = Instant::now();
    drop(proxy); // returns once the proxy's thread has ended
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    closed(&mut a);
    closed(&mut held);
    eventually(
        "the target sees the forwarded connection closed",
        Duration::from_secs(2),
        || echo.ended.load(Ordering::SeqCst) == 1,
    );
    let refused = TcpStream::connect(addr);
    assert!(
        matches!(&refused, Err(e) if e.kind() == ErrorKind::ConnectionRefused),
        "{refused:?}"
    );
}

#[test]
fn a_target_that_refuses_closes_the_client_and_is_counted() {
    // A port nothing listens on: bind, note it, close.
    let gone = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port");
    let proxy = TcpProxy::start(gone);
    let mut s = connect(&proxy);
    closed(&mut s);
    let stats = proxy.stats();
    assert_eq!(
        (stats.accepted, stats.forwarded, stats.target_refused),
        (1, 0, 1)
    );
}

#[test]
fn a_proxy_set_has_one_proxy_per_target_and_cuts_and_heals_them_all() {
    let (e1, e2) = (Echo::start(), Echo::start());
    let set = ProxySet::start(&[e1.addr, e2.addr]);
    let urls: Vec<String> = set.proxies().iter().map(TcpProxy::url).collect();
    assert_eq!(set.endpoints(), urls.join(","));
    assert_eq!(set.endpoint_list(), urls);
    assert_eq!(set.proxies()[0].target(), e1.addr);
    assert_eq!(set.proxies()[1].target(), e2.addr);

    let mut a = connect(&set.proxies()[0]);
    let mut b = connect(&set.proxies()[1]);
    assert_eq!(read_exact(&mut a, GREETING.len()), GREETING);
    assert_eq!(read_exact(&mut b, GREETING.len()), GREETING);
    set.cut();
    closed(&mut a);
    closed(&mut b);
    assert!(set.proxies().iter().all(|p| !p.is_flowing()));
    let stats = set.stats();
    assert_eq!((stats.accepted, stats.cut), (2, 2), "{stats:?}");
    set.heal();
    assert!(set.proxies().iter().all(TcpProxy::is_flowing));
    set.stall();
    assert!(set.proxies().iter().all(|p| !p.is_flowing()));
}
