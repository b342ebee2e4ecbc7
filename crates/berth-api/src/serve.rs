//! Serving a router with bounds: the accept loop every API shares (the control API's Unix socket,
//! each metadata listener, the introspection listener), and [`TcpServers`], the start and
//! shutdown of the TCP listeners the metadata endpoint and the introspection API share.
//!
//! `axum::serve` accepts without limit and builds hyper's connections without a timer, so hyper's
//! header-read timeout never runs there; a client that sends half a request holds its file
//! descriptor and buffers forever. This loop is hand-written around the crates' own pieces:
//!
//! - a `tokio::sync::Semaphore` of [`ServerLimits::max_connections`] permits, one taken *before*
//!   each accept: at the limit the listener stops accepting (new connections wait in the kernel's
//!   backlog and cost the process no descriptor) until a connection ends;
//! - per client address (TCP only) a count of open connections; one over
//!   [`ServerLimits::max_per_client`] is accepted and closed at once, so one client cannot hold
//!   every permit of the listener (hand-written: a map and a drop guard, no crate does this);
//! - hyper's `http1::Builder` with `TokioTimer`: `header_read_timeout` closes a connection whose
//!   request head has not fully arrived in time, and since hyper starts that timer whenever it
//!   waits for a head, it is also the idle timeout of a keep-alive connection between requests
//!   (an answer being streamed, like the control API's events, is not affected);
//!   `max_buf_size` bounds the read buffer, so the head (request line and headers) too: a larger
//!   head gets hyper's own 431;
//! - axum's `Listener::accept`, which sleeps a second after an accept error such as EMFILE rather
//!   than spinning.
//!
//! [`serve_tcp_with_peers`] also gives each request its peer's address (axum's
//! `ConnectInfo<SocketAddr>`, a router layer per connection): the credentials endpoint tells its
//! callers by address; the other listeners do without the cost.
//!
//! Each connection is a task of a `JoinSet` owned by the loop: dropping the loop's future (or
//! aborting its task) drops every connection with it.

use crate::lock;
use axum::Router;
use axum::serve::Listener;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::{JoinHandle, JoinSet};

/// hyper's smallest allowed read buffer (`max_buf_size` panics below it).
const MIN_BUF: usize = 8 * 1024;

/// The bounds of one listener. docs/metadata.md and docs/agent.md give the values and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// Connections open at once on the listener; at the limit it stops accepting.
    pub max_connections: usize,
    /// Connections open at once from one client IP address (TCP listeners only; `None`: no
    /// limit). A connection over it is closed as soon as it is accepted.
    pub max_per_client: Option<usize>,
    /// How long a request's head (request line and headers) may take to arrive, counted from
    /// when the server starts waiting for it: after the connection opens and after each answer,
    /// so it is also the keep-alive idle timeout.
    pub header_read_timeout: Duration,
    /// The largest read buffer of a connection, so the largest request head (at least 8 KiB,
    /// hyper's minimum).
    pub max_buf_size: usize,
}

impl ServerLimits {
    /// The task metadata endpoint, per listener: requests are small GETs, answered in
    /// milliseconds; 5 s is the ECS agent's read timeout; 64 per address leaves a flooding
    /// container a quarter of the listener.
    pub const METADATA: ServerLimits = ServerLimits {
        max_connections: 256,
        max_per_client: Some(64),
        header_read_timeout: Duration::from_secs(5),
        max_buf_size: 16 * 1024,
    };

    /// The control API (a Unix socket of mode 0600: only the CLI of the agent's user connects):
    /// one connection per command, one per `berth events` follower; 10 s for a head is generous
    /// for a local client; 64 KiB holds the router's own header limits (32 KiB of headers, an
    /// 8 KiB target), so those refusals keep their JSON bodies.
    pub const CONTROL: ServerLimits = ServerLimits {
        max_connections: 128,
        max_per_client: None,
        header_read_timeout: Duration::from_secs(10),
        max_buf_size: 64 * 1024,
    };
}

/// The client address a listener's peer counts against, if any.
pub trait PeerAddr {
    fn client_ip(&self) -> Option<IpAddr>;

    /// The peer's socket address, when it has one (TCP).
    fn socket_addr(&self) -> Option<std::net::SocketAddr> {
        None
    }
}

impl PeerAddr for std::net::SocketAddr {
    fn client_ip(&self) -> Option<IpAddr> {
        // An IPv4 client of a dual-stack listener counts as its IPv4 address.
        Some(self.ip().to_canonical())
    }

    fn socket_addr(&self) -> Option<std::net::SocketAddr> {
        Some(*self)
    }
}

impl PeerAddr for tokio::net::unix::SocketAddr {
    fn client_ip(&self) -> Option<IpAddr> {
        None
    }
}

type Counts = Arc<Mutex<HashMap<IpAddr, usize>>>;

/// One open connection of a client address; released on drop.
struct ClientSlot {
    counts: Counts,
    ip: IpAddr,
}

impl ClientSlot {
    fn take(counts: &Counts, ip: IpAddr, max: usize) -> Option<ClientSlot> {
        let mut m = lock(counts);
        let n = m.get(&ip).copied().unwrap_or(0);
        if n >= max {
            return None;
        }
        m.insert(ip, n + 1);
        Some(ClientSlot {
            counts: counts.clone(),
            ip,
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut m = lock(&self.counts);
        match m.get(&self.ip).copied() {
            Some(n) if n > 1 => {
                m.insert(self.ip, n - 1);
            }
            _ => {
                m.remove(&self.ip);
            }
        }
    }
}

/// Serve `app` on `listener` within `limits` until `stop` completes; then stop accepting, let
/// each open connection finish the request it is answering, and return once all have closed (a
/// caller that cannot wait drops the future: that drops the connections).
pub async fn serve<L>(
    listener: L,
    app: Router,
    limits: ServerLimits,
    stop: impl Future<Output = ()>,
    name: &'static str,
) where
    L: Listener,
    L::Addr: PeerAddr,
{
    serve_inner(listener, app, limits, stop, name, false).await;
}

/// [`serve`], and each request carries its peer's address as axum's
/// `ConnectInfo<SocketAddr>` (the credentials endpoint tells its callers by address). Costs a
/// router layer per connection, so only the listeners that need it take it.
async fn serve_inner<L>(
    mut listener: L,
    app: Router,
    limits: ServerLimits,
    stop: impl Future<Output = ()>,
    name: &'static str,
    peers: bool,
) where
    L: Listener,
    L::Addr: PeerAddr,
{
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let counts: Counts = Arc::default();
    let (closing, closing_rx) = watch::channel(false);
    let mut conns = JoinSet::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_buf_size.max(MIN_BUF));
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            biased;
            () = &mut stop => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
            accepted = async {
                // The semaphore is never closed; `Err` cannot happen.
                let permit = permits.clone().acquire_owned().await.ok()?;
                let (io, addr) = listener.accept().await;
                Some((permit, io, addr))
            } => accepted,
        };
        let Some((permit, io, addr)) = accepted else {
            break;
        };
        let slot = match (limits.max_per_client, addr.client_ip()) {
            (Some(max), Some(ip)) => match ClientSlot::take(&counts, ip, max) {
                Some(slot) => Some(slot),
                None => {
                    tracing::debug!(server = name, client = %ip, limit = max, "connection refused: too many open connections from this address");
                    drop(io);
                    continue;
                }
            },
            _ => None,
        };
        let app = match addr.socket_addr() {
            Some(peer) if peers => app
                .clone()
                .layer(axum::Extension(axum::extract::ConnectInfo(peer))),
            _ => app.clone(),
        };
        let conn = http.serve_connection(TokioIo::new(io), TowerToHyperService::new(app));
        let mut closing = closing_rx.clone();
        conns.spawn(async move {
            let _held = (permit, slot);
            tokio::pin!(conn);
            let served = tokio::select! {
                r = conn.as_mut() => r,
                _ = async { closing.wait_for(|c| *c).await.map(|_| ()) } => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = served {
                // Timeouts, resets and malformed requests: the client's doing, not the server's.
                tracing::debug!(server = name, error = %e, "connection closed");
            }
        });
    }
    // Stop listening at once: a client gets "connection refused", not a wait in the backlog.
    drop(listener);
    let _ = closing.send(true);
    while conns.join_next().await.is_some() {}
}

/// Serve `app` on a TCP listener (answers without Nagle's delay: the exchanges are small) until
/// `stop` completes, as [`serve`] does.
pub async fn serve_tcp(
    listener: TcpListener,
    app: Router,
    limits: ServerLimits,
    stop: impl Future<Output = ()>,
    name: &'static str,
) {
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        // Small request/answer exchanges: never wait to coalesce.
        let _ = tcp.set_nodelay(true);
    });
    serve(listener, app, limits, stop, name).await;
}

/// [`serve_tcp`], each request carrying its peer's address (`ConnectInfo<SocketAddr>`).
pub async fn serve_tcp_with_peers(
    listener: TcpListener,
    app: Router,
    limits: ServerLimits,
    stop: impl Future<Output = ()>,
    name: &'static str,
) {
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    serve_inner(listener, app, limits, stop, name, true).await;
}

/// How long [`TcpServers::shutdown`] lets open connections finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// The TCP listeners of one server (the metadata endpoint's main and bridge listeners, the
/// introspection API's), each served on its own task, all stopped by one
/// [`TcpServers::shutdown`]. Dropping it leaves them running until the runtime ends.
pub(crate) struct TcpServers {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl TcpServers {
    pub(crate) fn new() -> Self {
        TcpServers {
            stop: watch::channel(false).0,
            tasks: Vec::new(),
        }
    }

    /// Completes once [`TcpServers::shutdown`] is called (at once if it was).
    pub(crate) fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut stopped = self.stop.subscribe();
        async move {
            let _ = stopped.wait_for(|s| *s).await;
        }
    }

    /// Run `task` (which ends when [`TcpServers::stopped`] completes) among the servers.
    pub(crate) fn spawn(&mut self, task: impl Future<Output = ()> + Send + 'static) {
        self.tasks.push(tokio::spawn(task));
    }

    /// Serve `app` on `listener` ([`serve_tcp`]) until the shutdown.
    pub(crate) fn serve(
        &mut self,
        listener: TcpListener,
        app: Router,
        limits: ServerLimits,
        name: &'static str,
    ) {
        let stop = self.stopped();
        self.spawn(serve_tcp(listener, app, limits, stop, name));
    }

    /// Serve `app` on `listener` with peer addresses ([`serve_tcp_with_peers`]) until the
    /// shutdown.
    pub(crate) fn serve_with_peers(
        &mut self,
        listener: TcpListener,
        app: Router,
        limits: ServerLimits,
        name: &'static str,
    ) {
        let stop = self.stopped();
        self.spawn(serve_tcp_with_peers(listener, app, limits, stop, name));
    }

    /// Stop listening; open connections get [`SHUTDOWN_GRACE`] to finish, then are dropped.
    pub(crate) async fn shutdown(self) {
        let _ = self.stop.send(true);
        for mut t in self.tasks {
            if tokio::time::timeout(SHUTDOWN_GRACE, &mut t).await.is_err() {
                t.abort();
            }
        }
    }
}
