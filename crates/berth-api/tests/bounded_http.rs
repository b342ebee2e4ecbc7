//! The bounded accept loop (`berth_api::serve`) on real loopback sockets: a head that arrives
//! too slowly and an idle keep-alive connection are closed after the header timeout, a client
//! address over its limit is closed at once, a listener at its limit stops accepting until a
//! connection ends, an oversized head gets 431, and a stop lets an answer finish.

use axum::Router;
use axum::routing::get;
use berth_api::serve::{ServerLimits, serve};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const REQUEST: &[u8] = b"GET /hi HTTP/1.1\r\nHost: t\r\n\r\n";

fn app() -> Router {
    Router::new()
        .route("/hi", get(|| async { "hello" }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(400)).await;
                "done"
            }),
        )
        .route(
            "/stream",
            get(|| async {
                // Ten chunks 150 ms apart: 1.5 s, five header timeouts.
                let chunks = futures_util::stream::unfold(0u8, |n| async move {
                    if n == 10 {
                        return None;
                    }
                    tokio::time::sleep(Duration::from_millis(150)).await;
                    Some((Ok::<_, std::io::Error>(format!("chunk{n}\n")), n + 1))
                });
                axum::body::Body::from_stream(chunks)
            }),
        )
}

fn limits() -> ServerLimits {
    ServerLimits {
        max_connections: 100,
        max_per_client: None,
        header_read_timeout: Duration::from_millis(300),
        max_buf_size: 8 * 1024,
    }
}

async fn start(limits: ServerLimits) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(
        l,
        app(),
        limits,
        async move {
            let _ = rx.await;
        },
        "test",
    ));
    (addr, tx)
}

/// Read until the peer closes or `within` passes; returns what was read and whether it closed.
async fn read_until_closed(s: &mut TcpStream, within: Duration) -> (String, bool) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Err(_) => return (String::from_utf8_lossy(&got).into_owned(), false),
            Ok(Ok(0) | Err(_)) => return (String::from_utf8_lossy(&got).into_owned(), true),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// Send a request and read one answer's head and its 5-byte body.
async fn ask(s: &mut TcpStream, within: Duration) -> Option<String> {
    s.write_all(REQUEST).await.ok()?;
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    let deadline = Instant::now() + within;
    while !String::from_utf8_lossy(&got).ends_with("hello") {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => return None,
        }
    }
    Some(String::from_utf8_lossy(&got).into_owned())
}

#[tokio::test]
async fn a_head_sent_too_slowly_and_an_idle_connection_are_closed_after_the_header_timeout() {
    let (addr, _stop) = start(limits()).await;
    let mut slow = TcpStream::connect(addr).await.expect("connect");
    slow.write_all(b"GET /hi HT").await.expect("write");
    let t = Instant::now();
    let (got, closed) = read_until_closed(&mut slow, Duration::from_secs(3)).await;
    assert!(closed, "a half-sent head was not closed: {got:?}");
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_secs(2),
        "closed after {waited:?}, not after the 300 ms header timeout"
    );

    let mut idle = TcpStream::connect(addr).await.expect("connect");
    let answer = ask(&mut idle, Duration::from_secs(2))
        .await
        .expect("an answer");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let t = Instant::now();
    let (_, closed) = read_until_closed(&mut idle, Duration::from_secs(3)).await;
    assert!(closed, "an idle keep-alive connection stayed open");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
}

#[tokio::test]
async fn an_answer_streamed_longer_than_the_header_timeout_is_not_cut() {
    let (addr, _stop) = start(limits()).await;
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"GET /stream HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .await
        .expect("write");
    let (got, closed) = read_until_closed(&mut s, Duration::from_secs(5)).await;
    assert!(closed, "{got:?}");
    assert!(got.contains("chunk9"), "the stream was cut: {got:?}");
}

#[tokio::test]
async fn a_client_address_over_its_limit_is_closed_at_once_and_served_again_when_under() {
    let (addr, _stop) = start(ServerLimits {
        max_per_client: Some(3),
        header_read_timeout: Duration::from_secs(30),
        ..limits()
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"GET /hi").await.expect("write");
        held.push(s);
    }
    // Let the server accept the three before the fourth arrives.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut over = TcpStream::connect(addr).await.expect("connect");
    let (got, closed) = read_until_closed(&mut over, Duration::from_secs(2)).await;
    assert!(
        closed && got.is_empty(),
        "the 4th connection was kept: {got:?}"
    );
    drop(held.pop());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut again = TcpStream::connect(addr).await.expect("connect");
    let answer = ask(&mut again, Duration::from_secs(2)).await;
    assert!(answer.is_some(), "a freed slot was not given back");
}

#[tokio::test]
async fn a_listener_at_its_limit_stops_accepting_until_a_connection_ends() {
    let (addr, _stop) = start(ServerLimits {
        max_connections: 2,
        header_read_timeout: Duration::from_secs(30),
        ..limits()
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"GET /hi").await.expect("write");
        held.push(s);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The kernel completes the handshake (backlog); the server does not read it yet.
    let mut waiting = TcpStream::connect(addr).await.expect("connect");
    waiting.write_all(REQUEST).await.expect("write");
    let (got, closed) = read_until_closed(&mut waiting, Duration::from_millis(400)).await;
    assert!(!closed && got.is_empty(), "served over the limit: {got:?}");
    drop(held.pop());
    let (got, _) = read_until_closed(&mut waiting, Duration::from_millis(1500)).await;
    assert!(
        got.starts_with("HTTP/1.1 200"),
        "not served once a slot freed: {got:?}"
    );
}

#[tokio::test]
async fn a_head_larger_than_the_read_buffer_gets_431() {
    let (addr, _stop) = start(limits()).await;
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let head = format!(
        "GET /hi HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n",
        "v".repeat(9 * 1024)
    );
    s.write_all(head.as_bytes()).await.expect("write");
    let (got, closed) = read_until_closed(&mut s, Duration::from_secs(2)).await;
    assert!(got.starts_with("HTTP/1.1 431"), "{got:?}");
    assert!(closed);
}

#[tokio::test]
async fn a_stop_lets_an_answer_under_way_finish_and_refuses_new_connections() {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(
        l,
        app(),
        limits(),
        async move {
            let _ = rx.await;
        },
        "test",
    ));
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .expect("write");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let _ = tx.send(());
    let (got, closed) = read_until_closed(&mut s, Duration::from_secs(2)).await;
    assert!(
        got.starts_with("HTTP/1.1 200") && got.ends_with("done"),
        "{got:?}"
    );
    assert!(closed, "the connection stayed open after the stop");
    tokio::time::timeout(Duration::from_secs(2), server)
        .await
        .expect("serve returns after its connections close")
        .expect("no panic");
    assert!(TcpStream::connect(addr).await.is_err(), "still listening");
}
