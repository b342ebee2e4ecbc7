//! A TCP proxy on loopback that a test can cut off from its target: how the cluster tests make a
//! network partition between one process and etcd without touching the host's network.
//! [`TcpProxy::start`] listens on a free `127.0.0.1` port ([`TcpProxy::start_on`]: on another
//! address, e.g. one containers can reach) and forwards every connection, both ways, to one target; [`ProxySet`] is one proxy per target (one per etcd member), and its
//! [`ProxySet::endpoints`] is what `--etcd` takes, so a process given those URLs reaches etcd only
//! through the proxies and can be cut alone.
//!
//! What a partition looks like here, and how close it is to a real one:
//!
//! - [`TcpProxy::cut`]: every connection carrying bytes is closed, on both sides (the client and
//!   the target each see their connection end). New connections are accepted but carry nothing:
//!   nothing is read from them, nothing reaches the target, and [`TcpProxy::heal`] closes them
//!   unforwarded. In a real partition an open connection does not end: it stops carrying bytes
//!   and breaks when a keep-alive or a call's timeout gives up (that is [`TcpProxy::stall`]); and
//!   a new connection's SYN goes unanswered, so `connect` itself times out, where here it
//!   succeeds and what follows (the HTTP/2 handshake, the request) gets no answer. Closing the
//!   held connections at the heal keeps the one property that matters from the real thing:
//!   nothing a client wrote while cut off ever reaches the target (a timed-out write was not
//!   applied later behind the test's back).
//! - [`TcpProxy::stall`]: the silent partition. Connections stay open but carry nothing either way
//!   (bytes already read wait in the proxy), new ones are held as under `cut`; only the peers'
//!   keep-alives or timeouts notice. [`TcpProxy::heal`] lets every connection still open carry
//!   bytes again, as a link that comes back does (TCP retransmits what was waiting): a request
//!   the client gave up on may then still reach the target, as it may in a real partition.
//! - [`TcpProxy::heal`]: new connections are forwarded again.
//!
//! Measured against a real 3-member etcd through a [`ProxySet`]
//! (`crates/berth-cluster/tests/partition.rs`, berth-cluster's client: HTTP/2 keep-alive ping
//! every 2 s, 2 s for its answer, 5 s `CALL_TIMEOUT`):
//!
//! - after `cut`, a watch ends at once (broken pipe), and each read or write fails after 4.0 s
//!   with `Unavailable` / `KeepAliveTimedOut`: its new connection is held, the keep-alive gives
//!   up before the call timeout (in a real partition the connect would time out instead, and the
//!   call end as `ClusterError::Timeout` at 5 s);
//! - after `stall`, a watch ends 4.0 s later (the keep-alive), and so does each call;
//! - after `heal`, the same `Cluster` works again by itself, without a new connect: its first
//!   call succeeded within 5 ms in every run (etcd-client's balanced tonic channel reconnects a
//!   failed connection at the next request).
//!
//! Each proxy runs a single-threaded tokio runtime on a thread of its own, so it works from
//! synchronous tests and from any runtime alike. Dropping the proxy stops that runtime: the
//! listener, every connection (to the client and to the target) and every task end, and the
//! thread is joined. [`ProxyStats`] counts connections and bytes. No loop polls: every wait is on a
//! socket or on the proxy's state.
//!
//! Hand-written because the few lines of forwarding are all there is, and the partition states
//! are the point.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};

/// The link as the test set it: forwarding or not, and how many times it was cut (a connection
/// forwarded before a cut ends when the count moves past the one it started under).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Link {
    flowing: bool,
    cuts: u64,
}

/// What happened on a proxy so far (counts since it started, gauges now).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Connections accepted from clients.
    pub accepted: u64,
    /// Connections forwarded: a connection to the target was made for them.
    pub forwarded: u64,
    /// Connections whose target could not be reached (the client's side was closed).
    pub target_refused: u64,
    /// Connections closed by [`TcpProxy::cut`].
    pub cut: u64,
    /// Held connections closed at the heal (never forwarded).
    pub held_closed: u64,
    /// Now: accepted connections held (not forwarded) while the link is down. Nothing is read
    /// from them, so one whose client gave up is counted until the heal closes it.
    pub held: u64,
    /// Now: connections being forwarded (or connecting to the target).
    pub open: u64,
    /// Bytes written to the target.
    pub bytes_to_target: u64,
    /// Bytes written to clients.
    pub bytes_to_client: u64,
}

impl ProxyStats {
    fn plus(self, other: ProxyStats) -> ProxyStats {
        ProxyStats {
            accepted: self.accepted + other.accepted,
            forwarded: self.forwarded + other.forwarded,
            target_refused: self.target_refused + other.target_refused,
            cut: self.cut + other.cut,
            held_closed: self.held_closed + other.held_closed,
            held: self.held + other.held,
            open: self.open + other.open,
            bytes_to_target: self.bytes_to_target + other.bytes_to_target,
            bytes_to_client: self.bytes_to_client + other.bytes_to_client,
        }
    }
}

/// The counters, shared by the proxy's tasks and the test.
#[derive(Default)]
struct Counters {
    accepted: AtomicU64,
    forwarded: AtomicU64,
    target_refused: AtomicU64,
    cut: AtomicU64,
    held_closed: AtomicU64,
    held: AtomicU64,
    bytes_to_target: AtomicU64,
    bytes_to_client: AtomicU64,
    /// Forwarded connections open now, with a condition variable so [`TcpProxy::cut`] can wait
    /// until the ones it cut are closed.
    open: Mutex<u64>,
    closed: Condvar,
}

impl Counters {
    fn open(&self) -> std::sync::MutexGuard<'_, u64> {
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Counts one held connection while it lives.
struct Held<'a>(&'a AtomicU64);

impl<'a> Held<'a> {
    fn new(gauge: &'a AtomicU64) -> Held<'a> {
        gauge.fetch_add(1, Ordering::SeqCst);
        Held(gauge)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Counts one open forwarded connection while it lives (and wakes a waiting `cut` when it ends).
struct Open<'a>(&'a Counters);

impl<'a> Open<'a> {
    fn new(counters: &'a Counters) -> Open<'a> {
        *counters.open() += 1;
        Open(counters)
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        let mut open = self.0.open();
        *open = open.saturating_sub(1);
        self.0.closed.notify_all();
    }
}

/// How long [`TcpProxy::cut`] waits for the connections it cut to be closed (they close within
/// microseconds; this only bounds a proxy thread that is somehow stuck).
const CUT_WAIT: Duration = Duration::from_secs(5);

/// One proxy: a loopback listener forwarding to `target`. Dropping it closes everything.
pub struct TcpProxy {
    addr: SocketAddr,
    target: SocketAddr,
    link: watch::Sender<Link>,
    counters: Arc<Counters>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TcpProxy {
    /// Listens on a free `127.0.0.1` port and forwards every connection to `target`.
    ///
    /// # Panics
    ///
    /// When no loopback port can be had or the proxy's thread or runtime cannot start.
    pub fn start(target: SocketAddr) -> TcpProxy {
        TcpProxy::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), target)
    }

    /// Listens on `listen` (port 0: a free one) and forwards every connection to `target`: for a
    /// target on loopback that containers must reach, listen on an address of the host that
    /// their network routes to (the bridge's gateway).
    ///
    /// # Panics
    ///
    /// When `listen` cannot be bound or the proxy's thread or runtime cannot start.
    pub fn start_on(listen: SocketAddr, target: SocketAddr) -> TcpProxy {
        let listener = std::net::TcpListener::bind(listen)
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .unwrap_or_else(|e| panic!("tcp proxy to {target}: cannot listen on {listen}: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("tcp proxy to {target}: its listening address: {e}"));
        let (link, link_rx) = watch::channel(Link {
            flowing: true,
            cuts: 0,
        });
        let counters = Arc::new(Counters::default());
        let (stop, stop_rx) = oneshot::channel();
        let (ready, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
        let task_counters = counters.clone();
        let thread = std::thread::Builder::new()
            .name(format!("tcp-proxy-{}", addr.port()))
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = ready.send(Err(format!("cannot build its runtime: {e}")));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let listener = match TcpListener::from_std(listener) {
                        Ok(listener) => listener,
                        Err(e) => {
                            let _ = ready.send(Err(format!("cannot register its listener: {e}")));
                            return;
                        }
                    };
                    let _ = ready.send(Ok(()));
                    tokio::select! {
                        () = accept(listener, target, link_rx, task_counters) => {}
                        _ = stop_rx => {}
                    }
                });
                // Dropping the runtime here drops every connection task: all sockets close.
                drop(runtime);
            })
            .unwrap_or_else(|e| panic!("tcp proxy to {target}: cannot spawn its thread: {e}"));
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("tcp proxy to {target}: {e}"),
            Err(_) => panic!("tcp proxy to {target}: its thread ended before it listened"),
        }
        TcpProxy {
            addr,
            target,
            link,
            counters,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The address it listens on (`127.0.0.1:PORT` unless started on another).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`: the proxy as an etcd client URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Where it forwards to.
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// Cuts the link: every forwarded connection is closed on both sides (this returns once they
    /// are), and new connections are accepted but held, carrying nothing, until [`Self::heal`].
    pub fn cut(&self) {
        self.link.send_modify(|l| {
            l.flowing = false;
            l.cuts += 1;
        });
        let deadline = Instant::now() + CUT_WAIT;
        let mut open = self.counters.open();
        while *open > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                eprintln!(
                    "tcp proxy {} → {}: {} connection(s) still open {CUT_WAIT:?} after cut",
                    self.addr, self.target, *open
                );
                return;
            }
            open = match self.counters.closed.wait_timeout(open, left) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }

    /// Stalls the link: connections stay open but carry no byte either way, new ones are held;
    /// only the peers' keep-alives and timeouts notice. [`Self::heal`] resumes them.
    pub fn stall(&self) {
        self.link.send_modify(|l| l.flowing = false);
    }

    /// Heals the link: held and stalled connections carry bytes again, new ones are forwarded.
    pub fn heal(&self) {
        self.link.send_modify(|l| l.flowing = true);
    }

    /// Whether the link is up (neither cut nor stalled).
    pub fn is_flowing(&self) -> bool {
        self.link.borrow().flowing
    }

    /// The counters now.
    pub fn stats(&self) -> ProxyStats {
        let c = &self.counters;
        ProxyStats {
            accepted: c.accepted.load(Ordering::SeqCst),
            forwarded: c.forwarded.load(Ordering::SeqCst),
            target_refused: c.target_refused.load(Ordering::SeqCst),
            cut: c.cut.load(Ordering::SeqCst),
            held_closed: c.held_closed.load(Ordering::SeqCst),
            held: c.held.load(Ordering::SeqCst),
            open: *c.open(),
            bytes_to_target: c.bytes_to_target.load(Ordering::SeqCst),
            bytes_to_client: c.bytes_to_client.load(Ordering::SeqCst),
        }
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            eprintln!(
                "tcp proxy {} → {}: its thread panicked",
                self.addr, self.target
            );
        }
    }
}

/// Accepts connections until the runtime is dropped; each one gets a task.
async fn accept(
    listener: TcpListener,
    target: SocketAddr,
    link: watch::Receiver<Link>,
    counters: Arc<Counters>,
) {
    loop {
        match listener.accept().await {
            Ok((client, _)) => {
                counters.accepted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(connection(client, target, link.clone(), counters.clone()));
            }
            Err(e) => {
                // Out of descriptors, or a connection reset before it was accepted: wait a
                // moment rather than spin on the same error.
                eprintln!("tcp proxy to {target}: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// One client connection: accepted while the link is down, held until the heal and closed then;
/// otherwise forwarded until either side closes it, an error, or a cut.
async fn connection(
    client: TcpStream,
    target: SocketAddr,
    mut link: watch::Receiver<Link>,
    counters: Arc<Counters>,
) {
    let cuts = {
        let link_now = *link.borrow_and_update();
        if !link_now.flowing {
            // Held: never forwarded. At the heal it is closed, so nothing written to it while the
            // link was down ever reaches the target (as a SYN that got no answer never carried a
            // byte); a client still waiting on it reconnects.
            let _held = Held::new(&counters.held);
            let _ = link.wait_for(|l| l.flowing).await;
            counters.held_closed.fetch_add(1, Ordering::SeqCst);
            return;
        }
        link_now.cuts
    };
    // Counted open from here, so a cut waits for a connection still connecting to the target.
    let _open = Open::new(&counters);
    let (link_up, link_down) = (link.clone(), link.clone());
    let forward = async {
        let upstream = match TcpStream::connect(target).await {
            Ok(upstream) => upstream,
            Err(_) => {
                counters.target_refused.fetch_add(1, Ordering::SeqCst);
                return;
            }
        };
        counters.forwarded.fetch_add(1, Ordering::SeqCst);
        let _ = client.set_nodelay(true);
        let _ = upstream.set_nodelay(true);
        let (client_read, client_write) = client.into_split();
        let (target_read, target_write) = upstream.into_split();
        let up = pump(
            client_read,
            target_write,
            link_up,
            &counters.bytes_to_target,
        );
        let down = pump(
            target_read,
            client_write,
            link_down,
            &counters.bytes_to_client,
        );
        let _ = tokio::try_join!(up, down);
    };
    tokio::select! {
        () = forward => {}
        cut = link.wait_for(|l| l.cuts != cuts) => {
            if cut.is_ok() {
                counters.cut.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
    // Both halves of both sockets are dropped here: the client and the target see the close.
}

/// Waits until the link carries bytes.
async fn flowing(link: &mut watch::Receiver<Link>) -> io::Result<()> {
    match link.wait_for(|l| l.flowing).await {
        Ok(_) => Ok(()),
        Err(_) => Err(io::Error::other("the proxy is stopping")),
    }
}

/// Copies one direction while the link flows; passes a half-close on. An error ends the whole
/// connection (the caller's `try_join!`).
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut link: watch::Receiver<Link>,
    bytes: &AtomicU64,
) -> io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        flowing(&mut link).await?;
        // Reads and writes are cancel-safe: a stall that wins the race loses no byte.
        let n = tokio::select! {
            read = from.read(&mut buf) => read?,
            changed = link.changed() => {
                changed.map_err(|_| io::Error::other("the proxy is stopping"))?;
                continue;
            }
        };
        if n == 0 {
            to.shutdown().await?;
            return Ok(());
        }
        let mut sent = 0;
        while sent < n {
            flowing(&mut link).await?;
            tokio::select! {
                wrote = to.write(&buf[sent..n]) => {
                    let wrote = wrote?;
                    if wrote == 0 {
                        return Err(io::ErrorKind::WriteZero.into());
                    }
                    sent += wrote;
                    bytes.fetch_add(wrote as u64, Ordering::SeqCst);
                }
                changed = link.changed() => {
                    changed.map_err(|_| io::Error::other("the proxy is stopping"))?;
                }
            }
        }
    }
}

/// One [`TcpProxy`] per target (one per etcd member), cut and healed together.
pub struct ProxySet {
    proxies: Vec<TcpProxy>,
}

impl ProxySet {
    /// A proxy in front of each target, in order.
    ///
    /// # Panics
    ///
    /// As [`TcpProxy::start`].
    pub fn start(targets: &[SocketAddr]) -> ProxySet {
        ProxySet {
            proxies: targets.iter().map(|t| TcpProxy::start(*t)).collect(),
        }
    }

    /// The proxies' URLs, comma-separated: what `--etcd` takes.
    pub fn endpoints(&self) -> String {
        self.endpoint_list().join(",")
    }

    /// The proxies' URLs, one per target.
    pub fn endpoint_list(&self) -> Vec<String> {
        self.proxies.iter().map(TcpProxy::url).collect()
    }

    /// [`TcpProxy::cut`] on every proxy.
    pub fn cut(&self) {
        self.proxies.iter().for_each(TcpProxy::cut);
    }

    /// [`TcpProxy::stall`] on every proxy.
    pub fn stall(&self) {
        self.proxies.iter().for_each(TcpProxy::stall);
    }

    /// [`TcpProxy::heal`] on every proxy.
    pub fn heal(&self) {
        self.proxies.iter().for_each(TcpProxy::heal);
    }

    /// The proxies, in the order of their targets.
    pub fn proxies(&self) -> &[TcpProxy] {
        &self.proxies
    }

    /// Every proxy's counters added up.
    pub fn stats(&self) -> ProxyStats {
        self.proxies
            .iter()
            .map(TcpProxy::stats)
            .fold(ProxyStats::default(), ProxyStats::plus)
    }
}
