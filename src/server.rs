//! The accept loop: the public listener, its limits and its graceful drain.
//!
//! Written by hand rather than with `axum::serve` because that sets no hyper timer (so the
//! header-read timeout would be silently off) and has no connection cap. What this loop adds
//! around hyper-util's `auto::Builder` (HTTP/1.1 and h2c on the same port):
//!
//! - **Connection cap**: a semaphore of `max_connections` permits. A permit is taken
//!   *before* `accept`, so when the cap is reached the loop simply stops accepting and the
//!   kernel backlog absorbs the excess (backpressure) until a connection closes.
//! - **Header-read timeout**: hyper's own HTTP/1 timer (driven by [`TokioTimer`]), plus a
//!   first-request deadline of our own for the bytes hyper-util reads before it knows the
//!   protocol (a client that connects and sends nothing is closed after
//!   `header_read_timeout`).
//! - **Idle timeout**: a connection with no request in flight for `idle_timeout` is closed. A
//!   request counts as in flight until its response body has been sent (or dropped), so slow
//!   downloads and long-lived streams are never cut by this timer. Note that hyper (1.x)
//!   also runs its header-read timer while an HTTP/1 connection waits for the next request,
//!   so the effective keep-alive idle time is `min(idle_timeout, header_read_timeout)`.
//! - **Accept errors** (running out of file descriptors, aborted handshakes, ...) are logged
//!   at most once per [`ACCEPT_ERROR_LOG_INTERVAL`] and survived; the loop never exits on one.
//! - **Graceful shutdown**: when `shutdown` resolves the listener is closed, every connection
//!   is told to finish its in-flight requests and close, and after `shutdown_grace` whatever
//!   is left is dropped.
//! - **Per-client cap** (SPEC §10): at most `max_connections_per_client` open connections
//!   from one direct peer that is not a trusted proxy (a load balancer carries everyone's
//!   connections, so it is exempt). One over it is closed at accept, before a byte is read:
//!   answering it a 429 would mean reading its request, which is what the cap is there to
//!   spare.
//! - **HTTP/2**: at most `http2_max_streams` concurrent streams on one connection, so one
//!   connection cannot stand in for hundreds.
//! - Upgrades (WebSocket) are enabled. An upgraded connection leaves hyper's hands, but its
//!   [`ConnectionSlot`] (the `max_connections` permit and the per-client count) travels in
//!   the request's extensions to the proxy's tunnel, so a tunnel keeps counting against both
//!   caps until it closes.
//! - **Handoff** ([`handoff`]): an HTTP/1.1 response marked [`LongLived`] (the waiting
//!   page's live stream) is written from outside hyper once its head is out, so a held
//!   stream does not keep hyper's buffers; its slot goes with it.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::pin;
use std::sync::Arc;
use std::task::Context;
use std::time::Duration;

use http::{Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use tokio::net::TcpListener;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

mod handoff;

pub use handoff::LongLived;

use crate::http::body::{Body, BoxError, Watch, Watched};
use crate::identity::TrustedProxies;
use crate::log_limiter::LogLimiter;

/// Largest HTTP/1 request head (request line + headers) accepted; larger gets a 431.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Largest HTTP/2 header list accepted.
pub const MAX_H2_HEADER_LIST: u32 = 64 * 1024;
/// Accept errors are logged at most once per this interval (the rest are counted).
pub const ACCEPT_ERROR_LOG_INTERVAL: Duration = Duration::from_secs(5);
/// Pause after an accept error that means the process is out of a resource (fds, memory).
const RESOURCE_BACKOFF: Duration = Duration::from_millis(100);
/// Pause after any other accept error (a peer that went away during the handshake, ...).
const CONNECTION_ERROR_BACKOFF: Duration = Duration::from_millis(10);

/// Limits of the public listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerLimits {
    /// A request head (and the first request of a connection) must arrive within this.
    pub header_read_timeout: Duration,
    /// A connection with no request in flight for this long is closed.
    pub idle_timeout: Duration,
    /// At most this many open connections; beyond it the loop stops accepting.
    pub max_connections: usize,
    /// At most this many open connections from one direct peer not in `trusted_proxies`.
    pub max_connections_per_client: usize,
    /// Peers exempt from `max_connections_per_client` (load balancers).
    pub trusted_proxies: TrustedProxies,
    /// Concurrent streams one HTTP/2 connection may carry.
    pub http2_max_streams: u32,
    /// After shutdown is signalled, in-flight requests get this long to finish.
    pub shutdown_grace: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 10_000,
            max_connections_per_client: 512,
            trusted_proxies: TrustedProxies::default(),
            http2_max_streams: 100,
            shutdown_grace: Duration::from_secs(30),
        }
    }
}

/// One accepted connection's share of the listener's caps: the `max_connections` permit
/// and the per-peer count. Shared (`Arc`) between the connection task and, through the
/// request's extensions, a WebSocket tunnel the connection turns into (or a stream it was
/// handed to); released when the last of them ends.
#[derive(Debug)]
pub struct ConnectionSlot {
    _permit: OwnedSemaphorePermit,
    _peer: Option<PeerCount>,
    _seat: Option<SeatTaken>,
    handoff: handoff::Handoff,
}

/// How the serving workers of [`serve_on_workers`] share connections. They all accept from
/// one socket, and whichever worker accepts a connection gives it to the worker serving the
/// fewest (keeping it on a tie), so a burst of keep-alive connections ends up spread evenly.
/// Without this, the worker that woke first took a whole burst while the other sat idle:
/// all 64 of a `wrk -c64` run's connections on one worker, at half the throughput. The cost
/// is one channel send and wake-up per connection handed over, never per request.
#[derive(Debug)]
struct Seats {
    open: Box<[AtomicUsize]>,
    inboxes: Box<[tokio::sync::mpsc::UnboundedSender<Handover>]>,
}

/// A connection accepted by one worker for another to serve, with its share of the caps.
#[derive(Debug)]
struct Handover {
    stream: std::net::TcpStream,
    peer: SocketAddr,
    permit: OwnedSemaphorePermit,
    peer_count: Option<PeerCount>,
    /// Counted against the receiving worker from the moment it is handed over, so a burst
    /// accepted before that worker has run is not all handed to it.
    seat: SeatTaken,
}

/// One worker's place among [`Seats`]: its index and the connections handed to it.
#[derive(Debug)]
struct Seat {
    index: usize,
    seats: Arc<Seats>,
    inbox: tokio::sync::mpsc::UnboundedReceiver<Handover>,
}

impl Seats {
    fn new(
        workers: usize,
    ) -> (
        Arc<Seats>,
        Vec<tokio::sync::mpsc::UnboundedReceiver<Handover>>,
    ) {
        let (inboxes, receivers): (Vec<_>, Vec<_>) = (0..workers)
            .map(|_| tokio::sync::mpsc::unbounded_channel())
            .unzip();
        let seats = Seats {
            open: (0..workers).map(|_| AtomicUsize::new(0)).collect(),
            inboxes: inboxes.into(),
        };
        (Arc::new(seats), receivers)
    }

    /// The worker that should serve the next connection `worker` accepted.
    fn least_busy(&self, worker: usize) -> usize {
        let mine = self.open[worker].load(Ordering::Relaxed);
        let (other, fewest) = (self.open.iter().enumerate())
            .map(|(i, n)| (i, n.load(Ordering::Relaxed)))
            .min_by_key(|&(_, n)| n)
            .unwrap_or((worker, mine));
        if fewest < mine { other } else { worker }
    }

    /// Counts a connection against `worker` until the returned guard drops.
    fn take(self: &Arc<Self>, worker: usize) -> SeatTaken {
        self.open[worker].fetch_add(1, Ordering::Relaxed);
        SeatTaken {
            seats: self.clone(),
            index: worker,
        }
    }
}

impl Seat {
    /// Where a connection this worker accepted is served: handed to a worker serving
    /// fewer (`None` once handed over, or lost), else here, counted against this worker.
    fn place(&self, counted: Counted) -> Option<(Counted, SeatTaken)> {
        match self.seats.least_busy(self.index) {
            other if other != self.index => self.hand_to(other, counted),
            _ => Some((counted, self.seats.take(self.index))),
        }
    }

    /// Gives `counted` to worker `other`. Returns it, for this worker to serve, if `other`
    /// has stopped; `None` once it is handed over (or lost).
    fn hand_to(&self, other: usize, counted: Counted) -> Option<(Counted, SeatTaken)> {
        let (stream, peer, permit, peer_count) = counted;
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(error) => {
                tracing::debug!(%peer, %error, "accepted connection lost");
                return None;
            }
        };
        let handover = Handover {
            stream,
            peer,
            permit,
            peer_count,
            seat: self.seats.take(other),
        };
        let mut returned = self.seats.inboxes[other].send(handover).err()?.0;
        returned.seat = self.seats.take(self.index);
        returned.into_counted()
    }
}

impl Handover {
    /// Back to a tokio stream, on the worker that serves it (`None` if that fails).
    fn into_counted(self) -> Option<(Counted, SeatTaken)> {
        match tokio::net::TcpStream::from_std(self.stream) {
            Ok(stream) => Some(((stream, self.peer, self.permit, self.peer_count), self.seat)),
            Err(error) => {
                tracing::debug!(peer = %self.peer, %error, "accepted connection lost");
                None
            }
        }
    }
}

/// A connection counted against a worker; uncounted on drop.
#[derive(Debug)]
struct SeatTaken {
    seats: Arc<Seats>,
    index: usize,
}

impl Drop for SeatTaken {
    fn drop(&mut self) {
        self.seats.open[self.index].fetch_sub(1, Ordering::Relaxed);
    }
}

/// An accepted connection with its `max_connections` permit and its count against its peer.
type Counted = (
    tokio::net::TcpStream,
    SocketAddr,
    OwnedSemaphorePermit,
    Option<PeerCount>,
);

/// What one accept gave.
enum Accepted {
    Counted(Counted),
    /// From a peer already at `max_connections_per_client`: closed (dropped) at once.
    OverPeerCap(IpAddr),
    Failed(io::Error),
}

/// Waits for a `max_connections` permit, accepts one connection, and counts it against its
/// peer. Cancel-safe: nothing is lost if it is dropped while waiting.
async fn accept_counted(
    listener: &TcpListener,
    limits: &ServerLimits,
    permits: &Arc<Semaphore>,
    peer_counts: &PeerCounts,
) -> Accepted {
    let permit = match permits.clone().acquire_owned().await {
        Ok(permit) => permit,
        Err(_) => unreachable!("the connection semaphore is never closed"),
    };
    let (stream, peer) = match listener.accept().await {
        Ok(accepted) => accepted,
        Err(error) => return Accepted::Failed(error),
    };
    let ip = peer.ip().to_canonical();
    let peer_count = if limits.trusted_proxies.contains(ip) {
        None
    } else {
        // Counted per client, like everything else per client (SPEC §10): an IPv6 /64 is
        // one, so a subscriber's 2^64 addresses share one cap.
        let client = crate::identity::ClientKey::from(ip).ip();
        match PeerCount::take(peer_counts, client, limits.max_connections_per_client) {
            Some(count) => Some(count),
            None => return Accepted::OverPeerCap(ip),
        }
    };
    Accepted::Counted((stream, peer, permit, peer_count))
}

/// The next connection handed to `seat`, or never without one.
async fn handed_to(seat: Option<&mut Seat>) -> Option<Handover> {
    match seat {
        Some(seat) => seat.inbox.recv().await,
        None => std::future::pending().await,
    }
}

/// Open connections per direct peer's client (an IPv4 address or an IPv6 /64).
type PeerCounts = Arc<std::sync::Mutex<HashMap<IpAddr, usize>>>;

/// One connection counted against its peer; uncounted on drop.
#[derive(Debug)]
struct PeerCount {
    counts: PeerCounts,
    ip: IpAddr,
}

impl PeerCount {
    /// Counts a connection from `ip`, or `None` if `ip` already has `max` open.
    fn take(counts: &PeerCounts, ip: IpAddr, max: usize) -> Option<PeerCount> {
        let mut map = counts.lock().unwrap_or_else(|p| p.into_inner());
        let n = map.entry(ip).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(PeerCount {
            counts: counts.clone(),
            ip,
        })
    }
}

impl Drop for PeerCount {
    fn drop(&mut self) {
        let mut map = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = map.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.ip);
            }
        }
    }
}

/// Serves `handler` on `listener` until `shutdown` resolves, then stops accepting, lets
/// in-flight requests finish for up to `shutdown_grace`, and returns.
///
/// The handler gets each request with the peer address of its connection. Accept errors are
/// logged and survived, so this only returns once `shutdown` has resolved; the `io::Result`
/// is kept for callers that treat the server as fallible.
pub async fn serve<H, F>(
    listener: TcpListener,
    limits: ServerLimits,
    handler: H,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()>
where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let caps = Caps::new(&limits);
    accept_loop(listener, limits, caps, None, handler, shutdown).await
}

/// [`serve`] on `workers` threads, each running its own current-thread runtime and its own
/// accept loop on a duplicate of `listener`'s socket; with `workers <= 1`, [`serve`] on the
/// caller's runtime.
///
/// Why: on a multi-thread runtime every request crosses threads several times (the
/// connection task, the pooled origin connection's task, the timer wheel), and on the
/// two-core boxes we measure on those wake-ups cost about a quarter of a bare proxy's
/// throughput (`notes/proxy-profile.md`). A worker keeps a connection, its requests and
/// (through [`PerWorker`]) its origin connections on one thread, as nginx's workers do.
/// `max_connections` and the per-client cap stay process-wide: the workers share one
/// semaphore and one count. Whichever worker's `accept` wins gives the connection to the
/// worker serving the fewest ([`Seats`]).
///
/// Returns once every worker has drained (after `shutdown` is cancelled), with the first
/// error any of them met.
pub async fn serve_on_workers<H, F>(
    listener: TcpListener,
    workers: usize,
    limits: ServerLimits,
    handler: H,
    shutdown: CancellationToken,
) -> io::Result<()>
where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    if workers <= 1 {
        return serve(listener, limits, handler, shutdown.cancelled_owned()).await;
    }
    let listener = listener.into_std()?;
    let caps = Caps::new(&limits);
    let (seats, inboxes) = Seats::new(workers);
    let mut finished = Vec::with_capacity(workers);
    for (index, inbox) in inboxes.into_iter().enumerate() {
        let socket = listener.try_clone()?;
        let seat = Seat {
            index,
            seats: seats.clone(),
            inbox,
        };
        let (limits, caps, handler, shutdown) = (
            limits.clone(),
            caps.clone(),
            handler.clone(),
            shutdown.clone(),
        );
        let (done, result) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name(format!("anteroom-worker-{index}"))
            .spawn(move || {
                let served = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .and_then(|runtime| {
                        crate::worker::enter(index);
                        runtime.block_on(async move {
                            let listener = TcpListener::from_std(socket)?;
                            let shutdown = shutdown.cancelled();
                            accept_loop(listener, limits, caps, Some(seat), handler, shutdown).await
                        })
                    });
                let _ = done.send(served);
            })?;
        finished.push(result);
    }
    drop(listener);
    let mut first_error = None;
    for result in finished {
        let served = result
            .await
            .unwrap_or_else(|_| Err(io::Error::other("a worker thread panicked")));
        if let Err(error) = served {
            first_error.get_or_insert(error);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// The process-wide caps every accept loop takes from.
#[derive(Debug, Clone)]
struct Caps {
    permits: Arc<Semaphore>,
    peer_counts: PeerCounts,
}

impl Caps {
    fn new(limits: &ServerLimits) -> Self {
        Caps {
            permits: Arc::new(Semaphore::new(limits.max_connections.max(1))),
            peer_counts: Arc::default(),
        }
    }
}

async fn accept_loop<H, F>(
    listener: TcpListener,
    limits: ServerLimits,
    caps: Caps,
    mut seat: Option<Seat>,
    handler: H,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()>
where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let mut shutdown = pin!(shutdown);
    let builder = Arc::new(builder(&limits));
    let Caps {
        permits,
        peer_counts,
    } = caps;
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    let accept_errors = LogLimiter::new(ACCEPT_ERROR_LOG_INTERVAL);
    let over_peer_cap = LogLimiter::new(ACCEPT_ERROR_LOG_INTERVAL);

    loop {
        // Reap finished connection tasks so the set does not grow.
        while connections.try_join_next().is_some() {}

        let next = tokio::select! {
            biased;
            () = &mut shutdown => break,
            Some(handed) = handed_to(seat.as_mut()) => Err(handed),
            accepted = accept_counted(&listener, &limits, &permits, &peer_counts) => Ok(accepted),
        };
        let ((stream, peer, permit, peer_count), seat_taken) = match next {
            Ok(Accepted::Failed(error)) => {
                let backoff = if is_resource_exhaustion(&error) {
                    RESOURCE_BACKOFF
                } else {
                    CONNECTION_ERROR_BACKOFF
                };
                if let Some(suppressed) = accept_errors.allow_counted() {
                    tracing::warn!(
                        %error,
                        suppressed,
                        resource_exhaustion = is_resource_exhaustion(&error),
                        "accept failed; backing off and continuing"
                    );
                }
                tokio::select! {
                    biased;
                    () = &mut shutdown => break,
                    () = tokio::time::sleep(backoff) => continue,
                }
            }
            Ok(Accepted::OverPeerCap(ip)) => {
                // Closed at once (dropped): the permit went back with it.
                if let Some(suppressed) = over_peer_cap.allow_counted() {
                    tracing::warn!(
                        %ip,
                        suppressed,
                        max = limits.max_connections_per_client,
                        "connection over server.max_connections_per_client closed"
                    );
                }
                continue;
            }
            Ok(Accepted::Counted(counted)) => match &seat {
                Some(seat) => match seat.place(counted) {
                    Some((counted, taken)) => (counted, Some(taken)),
                    None => continue,
                },
                None => (counted, None),
            },
            Err(handed) => match handed.into_counted() {
                Some((counted, taken)) => (counted, Some(taken)),
                None => continue,
            },
        };
        let slot = Arc::new(ConnectionSlot {
            _permit: permit,
            _peer: peer_count,
            _seat: seat_taken,
            handoff: handoff::Handoff::default(),
        });
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%peer, %error, "could not set TCP_NODELAY");
        }

        let builder = builder.clone();
        let handler = handler.clone();
        let watcher = graceful.watcher();
        let first_request_deadline = limits.header_read_timeout;
        let idle_timeout = limits.idle_timeout;
        connections.spawn(async move {
            let activity = Activity::new();
            let service = {
                let activity = activity.clone();
                let slot = slot.clone();
                service_fn(move |mut req: Request<Incoming>| {
                    // Only an upgrade can take the slot (its tunnel outlives the request,
                    // see `proxy`); a first extension costs every other request two
                    // allocations.
                    if req.headers().contains_key(http::header::UPGRADE) {
                        req.extensions_mut().insert(slot.clone());
                    }
                    let version = req.version();
                    let guard = activity.begin();
                    // Boxed at once: the handler's future is kilobytes, and hyper moves what
                    // this returns into its connection state; moving a pointer is free.
                    let response = Box::pin(handler(req, peer));
                    let slot = slot.clone();
                    async move {
                        let response = response.await;
                        let response = response.map(|body| Watched::new(body, guard).boxed());
                        Ok::<_, Infallible>(handoff::prepare(&slot, version, response))
                    }
                })
            };
            let io = TokioIo::new(handoff::HandoffIo::new(stream, slot.clone()));
            let conn = builder.serve_connection_with_upgrades(io, service);
            let conn = watcher.watch(conn);
            tokio::select! {
                result = conn => {
                    if let Err(error) = result {
                        tracing::debug!(%peer, %error, "connection ended with an error");
                    }
                }
                () = activity.expired(first_request_deadline, idle_timeout) => {
                    tracing::debug!(%peer, "closing idle connection");
                }
            }
            drop(slot);
        });
    }

    drop(listener);
    // Closes this worker's inbox: a connection another worker accepts from now on stays
    // with that worker instead of waiting here unread.
    drop(seat);
    let open = graceful.count();
    tracing::info!(open, "stopped accepting; draining connections");
    if tokio::time::timeout(limits.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            remaining = connections.len(),
            grace = ?limits.shutdown_grace,
            "shutdown grace elapsed; dropping remaining connections"
        );
    }
    connections.shutdown().await;
    Ok(())
}

fn builder(limits: &ServerLimits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true)
        .max_buf_size(MAX_HEAD_BYTES);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.http2_max_streams.max(1))
        .max_header_list_size(MAX_H2_HEADER_LIST);
    builder
}

/// Errors that mean this process (or the machine) is out of something; backing off gives
/// the in-flight connections a chance to finish and free it.
fn is_resource_exhaustion(error: &io::Error) -> bool {
    const EMFILE: i32 = 24;
    const ENFILE: i32 = 23;
    const ENOBUFS: i32 = 105;
    const ENOMEM: i32 = 12;
    matches!(
        error.raw_os_error(),
        Some(EMFILE | ENFILE | ENOBUFS | ENOMEM)
    ) || error.kind() == io::ErrorKind::OutOfMemory
}

/// What the idle watchdog of one connection needs to know, kept in atomics so a request
/// costs two counter updates and no wake-up: the watchdog sleeps until the earliest moment
/// the connection could be idle long enough and only then looks again.
#[derive(Debug)]
struct ActivityState {
    /// The watchdog's time origin; `idle_since_ms` counts from it.
    origin: Instant,
    /// Requests whose response has not been fully sent yet.
    in_flight: AtomicUsize,
    /// When `in_flight` last dropped to zero (or the connection was accepted).
    idle_since_ms: AtomicU64,
    /// Whether the connection has carried a request yet.
    served: AtomicBool,
}

#[derive(Debug, Clone)]
struct Activity(Arc<ActivityState>);

impl Activity {
    fn new() -> Self {
        Activity(Arc::new(ActivityState {
            origin: Instant::now(),
            in_flight: AtomicUsize::new(0),
            idle_since_ms: AtomicU64::new(0),
            served: AtomicBool::new(false),
        }))
    }

    fn begin(&self) -> InFlight {
        self.0.in_flight.fetch_add(1, Ordering::AcqRel);
        self.0.served.store(true, Ordering::Release);
        InFlight(self.0.clone())
    }

    /// Resolves once the connection has had no request in flight for `idle` (or, before
    /// its first request, for `first`).
    async fn expired(&self, first: Duration, idle: Duration) {
        let state = &self.0;
        loop {
            let served = state.served.load(Ordering::Acquire);
            if state.in_flight.load(Ordering::Acquire) > 0 {
                // Busy: once this request ends, the connection has `idle` to go.
                tokio::time::sleep(idle).await;
                continue;
            }
            let since = Duration::from_millis(state.idle_since_ms.load(Ordering::Acquire));
            let deadline = state.origin + since + if served { idle } else { first };
            let now = Instant::now();
            if now >= deadline {
                // Re-read the count: a request that began meanwhile keeps the connection.
                if state.in_flight.load(Ordering::Acquire) == 0 {
                    return;
                }
                continue;
            }
            // Before its first request the limit drops from `first` to `idle` the moment one
            // is served, so look again within `idle`.
            let wake = if served {
                deadline
            } else {
                deadline.min(now + idle)
            };
            tokio::time::sleep_until(wake).await;
        }
    }
}

/// Marks one request as in flight until dropped (with the response body).
#[derive(Debug)]
struct InFlight(Arc<ActivityState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let state = &self.0;
        // Stamp before the count drops, so the watchdog never sees zero with an old stamp.
        let now = state.origin.elapsed().as_millis() as u64;
        state.idle_since_ms.fetch_max(now, Ordering::AcqRel);
        state.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Held by a response body ([`Watched`]): the request counts as in flight until dropped.
impl Watch for InFlight {
    fn polled(&mut self, _: bool, _: &mut Context<'_>) -> Option<BoxError> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::body::full;
    use std::net::SocketAddr;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio::sync::oneshot;
    use tokio::task::JoinHandle;

    fn limits() -> ServerLimits {
        ServerLimits {
            header_read_timeout: Duration::from_millis(200),
            idle_timeout: Duration::from_secs(5),
            max_connections: 100,
            shutdown_grace: Duration::from_secs(5),
            ..ServerLimits::default()
        }
    }

    struct TestServer {
        addr: SocketAddr,
        stop: Option<oneshot::Sender<()>>,
        task: JoinHandle<io::Result<()>>,
    }

    impl TestServer {
        async fn stop(mut self) -> io::Result<()> {
            let _ = self.stop.take().unwrap().send(());
            self.task.await.unwrap()
        }
    }

    async fn start<H, F>(limits: ServerLimits, handler: H) -> TestServer
    where
        H: Fn(Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
        F: Future<Output = Response<Body>> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, limits, handler, async move {
            let _ = rx.await;
        }));
        TestServer {
            addr,
            stop: Some(tx),
            task,
        }
    }

    async fn hello(_req: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
        Response::new(full(format!("hello {}", peer.ip())))
    }

    /// Reads until EOF or `limit`, returning what was read and whether EOF came.
    async fn read_to_eof(stream: &mut TcpStream, limit: Duration) -> (String, bool) {
        let mut out = Vec::new();
        let result = tokio::time::timeout(limit, stream.read_to_end(&mut out)).await;
        (String::from_utf8_lossy(&out).into_owned(), result.is_ok())
    }

    #[tokio::test]
    async fn a_burst_of_connections_is_spread_over_the_workers() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let which_worker = |_req: Request<Incoming>, _peer: SocketAddr| async {
            Response::new(full(crate::worker::index().to_string()))
        };
        let served = tokio::spawn(serve_on_workers(
            listener,
            2,
            limits(),
            which_worker,
            shutdown.clone(),
        ));
        // All connected before any is served: they wait in the accept queue together, and
        // whichever worker wakes first would take them all.
        let mut connections = Vec::new();
        for _ in 0..16 {
            connections.push(TcpStream::connect(addr).await.unwrap());
        }
        let mut served_by = [0usize; 2];
        for connection in &mut connections {
            connection
                .write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
                .await
                .unwrap();
            let mut response = Vec::new();
            while !(response.ends_with(b"0") || response.ends_with(b"1"))
                || !response.windows(4).any(|w| w == b"\r\n\r\n")
            {
                let mut buf = [0u8; 512];
                let n = connection.read(&mut buf).await.unwrap();
                assert!(n > 0, "closed: {}", String::from_utf8_lossy(&response));
                response.extend_from_slice(&buf[..n]);
            }
            served_by[usize::from(response.last() == Some(&b'1'))] += 1;
        }
        // Kept open, each connection counts: at most one more on a worker than the other,
        // give or take one both workers accepted at the same moment.
        assert!(
            served_by[0].abs_diff(served_by[1]) <= 2,
            "connections per worker: {served_by:?}"
        );
        shutdown.cancel();
        drop(connections);
        served.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn serves_a_request_with_the_peer_address() {
        let server = start(limits(), hello).await;
        let body = reqwest::get(format!("http://{}/", server.addr))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert_eq!(body, "hello 127.0.0.1");
        server.stop().await.unwrap();
    }

    #[tokio::test]
    async fn header_read_timeout_closes_a_half_sent_request_line() {
        let server = start(limits(), hello).await;
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        stream.write_all(b"GET /ind").await.unwrap();
        let started = Instant::now();
        let (_, eof) = read_to_eof(&mut stream, Duration::from_secs(3)).await;
        assert!(eof, "connection was not closed");
        assert!(started.elapsed() >= Duration::from_millis(150));
        server.stop().await.unwrap();
    }

    #[tokio::test]
    async fn a_silent_connection_is_closed_after_the_header_read_timeout() {
        let server = start(limits(), hello).await;
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        let (_, eof) = read_to_eof(&mut stream, Duration::from_secs(3)).await;
        assert!(eof, "a connection that never sent a byte was kept open");
        server.stop().await.unwrap();
    }

    #[tokio::test]
    async fn idle_keep_alive_connection_is_closed() {
        let server = start(
            ServerLimits {
                header_read_timeout: Duration::from_secs(5),
                idle_timeout: Duration::from_millis(200),
                ..limits()
            },
            hello,
        )
        .await;
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let started = Instant::now();
        let (response, eof) = read_to_eof(&mut stream, Duration::from_secs(3)).await;
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(eof, "idle keep-alive connection was not closed");
        assert!(started.elapsed() < Duration::from_secs(2));
        server.stop().await.unwrap();
    }

    #[tokio::test]
    async fn a_slow_response_is_not_cut_by_the_idle_timer() {
        let server = start(
            ServerLimits {
                idle_timeout: Duration::from_millis(100),
                ..limits()
            },
            |_req: Request<Incoming>, _peer: SocketAddr| async {
                tokio::time::sleep(Duration::from_millis(400)).await;
                Response::new(full("late"))
            },
        )
        .await;
        let body = reqwest::get(format!("http://{}/", server.addr))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert_eq!(body, "late");
        server.stop().await.unwrap();
    }

    #[tokio::test]
    async fn in_flight_request_completes_at_shutdown() {
        let (entered_tx, entered_rx) = oneshot::channel::<()>();
        let entered_tx = Arc::new(std::sync::Mutex::new(Some(entered_tx)));
        let server = start(
            limits(),
            move |_req: Request<Incoming>, _peer: SocketAddr| {
                let entered_tx = entered_tx.clone();
                async move {
                    if let Some(tx) = entered_tx.lock().unwrap().take() {
                        let _ = tx.send(());
                    }
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    Response::new(full("finished"))
                }
            },
        )
        .await;
        let url = format!("http://{}/", server.addr);
        let client = tokio::spawn(async move { reqwest::get(url).await?.text().await });
        entered_rx.await.unwrap();
        let started = Instant::now();
        server.stop().await.unwrap();
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert_eq!(client.await.unwrap().unwrap(), "finished");
    }

    #[tokio::test]
    async fn shutdown_grace_drops_connections_that_do_not_finish() {
        let server = start(
            ServerLimits {
                shutdown_grace: Duration::from_millis(200),
                ..limits()
            },
            |_req: Request<Incoming>, _peer: SocketAddr| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                Response::new(full("never"))
            },
        )
        .await;
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let started = Instant::now();
        server.stop().await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(2));
        let (_, eof) = read_to_eof(&mut stream, Duration::from_secs(2)).await;
        assert!(eof);
    }

    #[tokio::test]
    async fn max_connections_makes_the_next_connection_wait() {
        let server = start(
            ServerLimits {
                max_connections: 1,
                ..limits()
            },
            hello,
        )
        .await;
        // The first connection holds the only slot (it is open and has sent a request).
        let mut first = TcpStream::connect(server.addr).await.unwrap();
        first
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 512];
        let n = first.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));

        // The second connects (kernel backlog) but is not served while the first is open.
        let mut second = TcpStream::connect(server.addr).await.unwrap();
        second
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let waited = tokio::time::timeout(Duration::from_millis(150), second.read(&mut buf)).await;
        assert!(
            waited.is_err(),
            "second connection was served while at the cap"
        );

        drop(first);
        let (response, eof) = read_to_eof(&mut second, Duration::from_secs(3)).await;
        assert!(eof);
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        server.stop().await.unwrap();
    }

    #[tokio::test]
    async fn oversized_headers_get_431() {
        let server = start(limits(), hello).await;
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        let big = "a".repeat(200 * 1024);
        let request = format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\n\r\n");
        // The server may close before reading everything; a write error is fine.
        let _ = stream.write_all(request.as_bytes()).await;
        let (response, _) = read_to_eof(&mut stream, Duration::from_secs(3)).await;
        assert!(response.starts_with("HTTP/1.1 431"), "{response:.80}");
        // And the server still serves.
        let ok = reqwest::get(format!("http://{}/", server.addr))
            .await
            .unwrap();
        assert_eq!(ok.status(), 200);
        server.stop().await.unwrap();
    }

    #[tokio::test]
    async fn garbage_request_line_gets_400() {
        let server = start(limits(), hello).await;
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        stream
            .write_all(b"\x01\x02 garbage nonsense\r\n\r\n")
            .await
            .unwrap();
        let (response, _) = read_to_eof(&mut stream, Duration::from_secs(3)).await;
        assert!(response.starts_with("HTTP/1.1 400"), "{response:.80}");
        server.stop().await.unwrap();
    }

    /// `GET path` over h2c with prior knowledge.
    async fn h2_get(addr: SocketAddr, path: &str) -> Response<Incoming> {
        let stream = TcpStream::connect(addr).await.unwrap();
        let (mut sender, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(conn);
        let req = Request::builder()
            .uri(format!("http://{addr}{path}"))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        let response = sender.send_request(req).await.unwrap();
        assert_eq!(response.version(), http::Version::HTTP_2);
        response
    }

    #[tokio::test]
    async fn serves_h2c_prior_knowledge() {
        let server = start(limits(), hello).await;
        let response = h2_get(server.addr, "/").await;
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"hello 127.0.0.1");
        server.stop().await.unwrap();
    }

    /// A long-lived handler whose body is `frames`, then ends when `end` fires (or never);
    /// `dropped` fires when the body is dropped.
    fn long_lived(
        frames: Vec<&'static str>,
        end: Option<oneshot::Receiver<()>>,
        dropped: Arc<std::sync::Mutex<Option<oneshot::Sender<()>>>>,
    ) -> impl Fn(Request<Incoming>, SocketAddr) -> std::future::Ready<Response<Body>>
    + Clone
    + Send
    + Sync
    + 'static {
        let end = Arc::new(std::sync::Mutex::new(end));
        move |_req, _peer| {
            struct Dropped(Option<oneshot::Sender<()>>);
            impl Drop for Dropped {
                fn drop(&mut self) {
                    if let Some(tx) = self.0.take() {
                        let _ = tx.send(());
                    }
                }
            }
            let guard = Dropped(dropped.lock().unwrap().take());
            let end = end.lock().unwrap().take();
            let frames = futures_util::stream::iter(frames.clone().into_iter().map(|f| {
                Ok::<_, BoxError>(hyper::body::Frame::data(bytes::Bytes::from_static(
                    f.as_bytes(),
                )))
            }));
            let tail = futures_util::stream::once(async move {
                let _guard = guard;
                match end {
                    Some(end) => {
                        let _ = end.await;
                    }
                    None => std::future::pending::<()>().await,
                }
                Ok::<_, BoxError>(hyper::body::Frame::data(bytes::Bytes::new()))
            });
            let body =
                http_body_util::StreamBody::new(futures_util::StreamExt::chain(frames, tail));
            let mut response = Response::new(BodyExt::boxed(body));
            response.extensions_mut().insert(LongLived);
            std::future::ready(response)
        }
    }

    /// Sends `request` on a new connection and reads until what arrived ends with `until`.
    async fn request_until(addr: SocketAddr, request: &[u8], until: &[u8]) -> (TcpStream, Vec<u8>) {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(request).await.unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 1024];
        while !seen.ends_with(until) {
            let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
                .await
                .expect("the response arrives")
                .unwrap();
            assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&seen));
            seen.extend_from_slice(&buf[..n]);
        }
        (stream, seen)
    }

    #[tokio::test]
    async fn a_long_lived_response_leaves_hyper_and_keeps_its_chunks() {
        let (end_tx, end_rx) = oneshot::channel();
        let dropped = Arc::new(std::sync::Mutex::new(None));
        let server = start(
            ServerLimits {
                max_connections: 1,
                ..limits()
            },
            long_lived(vec!["hello", "world!"], Some(end_rx), dropped),
        )
        .await;
        // The head and both frames arrive while the body is still open.
        let (mut stream, seen) = request_until(
            server.addr,
            b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n",
            b"6\r\nworld!\r\n",
        )
        .await;
        let mut buf = [0u8; 1024];
        let text = String::from_utf8_lossy(&seen).to_lowercase();
        assert!(text.starts_with("http/1.1 200"), "{text}");
        assert!(
            text.contains("\r\ntransfer-encoding: chunked\r\n"),
            "{text}"
        );
        assert!(text.contains("\r\nconnection: close\r\n"), "{text}");
        assert!(
            text.ends_with("\r\n\r\n5\r\nhello\r\n6\r\nworld!\r\n"),
            "{text}"
        );

        // The stream still holds the only connection slot.
        let mut second = TcpStream::connect(server.addr).await.unwrap();
        second
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let waited = tokio::time::timeout(Duration::from_millis(150), second.read(&mut buf)).await;
        assert!(
            waited.is_err(),
            "second connection served while the stream holds the slot"
        );

        // The body's end is the last chunk, then the connection closes.
        end_tx.send(()).unwrap();
        let (rest, eof) = read_to_eof(&mut stream, Duration::from_secs(5)).await;
        assert!(eof);
        assert_eq!(rest, "0\r\n\r\n");
        // Its slot is free: the second connection is served now.
        let n = tokio::time::timeout(Duration::from_secs(5), second.read(&mut buf))
            .await
            .expect("served once the stream ended")
            .unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        server.stop().await.unwrap();
    }

    #[tokio::test]
    async fn a_handed_over_body_is_dropped_when_its_client_goes_away() {
        let (dropped_tx, dropped_rx) = oneshot::channel();
        let dropped = Arc::new(std::sync::Mutex::new(Some(dropped_tx)));
        let server = start(limits(), long_lived(vec!["hello"], None, dropped)).await;
        let (stream, _) = request_until(
            server.addr,
            b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n",
            b"5\r\nhello\r\n",
        )
        .await;
        drop(stream);
        tokio::time::timeout(Duration::from_secs(5), dropped_rx)
            .await
            .expect("the body is dropped once its client has gone")
            .unwrap();
        server.stop().await.unwrap();
    }

    #[tokio::test]
    async fn a_long_lived_response_to_http_1_0_stays_with_hyper() {
        let (end_tx, end_rx) = oneshot::channel();
        let dropped = Arc::new(std::sync::Mutex::new(None));
        let server = start(limits(), long_lived(vec!["hello"], Some(end_rx), dropped)).await;
        let (mut stream, seen) = request_until(
            server.addr,
            b"GET /events HTTP/1.0\r\nHost: x\r\n\r\n",
            b"hello",
        )
        .await;
        end_tx.send(()).unwrap();
        let (rest, eof) = read_to_eof(&mut stream, Duration::from_secs(5)).await;
        assert!(eof);
        let text = String::from_utf8_lossy(&seen).to_lowercase() + &rest;
        // Close-delimited, as hyper writes any unsized body to HTTP/1.0: no chunks.
        assert!(!text.contains("transfer-encoding"), "{text}");
        assert!(text.ends_with("\r\n\r\nhello"), "{text}");
        server.stop().await.unwrap();
    }

    #[tokio::test]
    async fn a_long_lived_response_over_h2_stays_with_hyper() {
        let (end_tx, end_rx) = oneshot::channel();
        let dropped = Arc::new(std::sync::Mutex::new(None));
        let server = start(
            limits(),
            long_lived(vec!["hello", "world"], Some(end_rx), dropped),
        )
        .await;
        let response = h2_get(server.addr, "/events").await;
        assert!(response.headers().get(http::header::CONNECTION).is_none());
        end_tx.send(()).unwrap();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"helloworld");
        server.stop().await.unwrap();
    }

    #[test]
    fn classifies_resource_exhaustion() {
        assert!(is_resource_exhaustion(&io::Error::from_raw_os_error(24)));
        assert!(is_resource_exhaustion(&io::Error::from_raw_os_error(23)));
        assert!(!is_resource_exhaustion(&io::Error::from_raw_os_error(103)));
    }
}
