//! The public listener: its limits, its accept loop on one or several workers, and its
//! graceful drain.
//!
//! Written by hand rather than with `axum::serve` because that sets no hyper timer (so the
//! header-read timeout would be silently off) and has no connection cap. What this loop adds
//! around hyper-util's `auto::Builder` (HTTP/1.1 and h2c on the same port):
//!
//! - **Connection cap**: a semaphore of `max_connections` permits, taken *before* `accept`.
//!   At the cap a loop accepts one client more and makes room for it by closing the
//!   connection idle longest (at least a second, no request in flight); the rest wait in
//!   the kernel's queue (backpressure) until room is made or a connection closes.
//! - **Header-read timeout**: a connection whose first request has not begun
//!   `header_read_timeout` after accept is closed, and so is one whose next request head
//!   (HTTP/1) or header block (HTTP/2) began to arrive that long ago and is still
//!   unfinished. Our own watchdog, not hyper's HTTP/1 timer, which would also cut idle
//!   keep-alive connections (`idle.rs`, `heads.rs`).
//! - **Idle timeout**: a connection with no request in flight for `idle_timeout` is closed. A
//!   request counts as in flight until its response body has been sent (or dropped), so slow
//!   downloads and long-lived streams are never cut by this timer.
//! - **Accept errors** (running out of file descriptors, aborted handshakes, ...) are logged
//!   at most once per [`ACCEPT_ERROR_LOG_INTERVAL`] and survived; the loop never exits on one.
//! - **Graceful shutdown**: when `shutdown` resolves the listener is closed, every connection
//!   is told to finish its in-flight requests and close, and after `shutdown_grace` whatever
//!   is left is dropped.
//! - **Per-client cap**: at most `max_connections_per_client` open connections from one
//!   direct peer that is not a trusted proxy (a load balancer carries everyone's
//!   connections, so it is exempt). One over it is closed at accept, before a byte is read:
//!   answering it a 429 would mean reading its request, which is what the cap is there to
//!   spare.
//! - **HTTP/2**: at most `http2_max_streams` concurrent streams on one connection, so one
//!   connection cannot stand in for hundreds.
//! - Upgrades (WebSocket) are enabled. An upgraded connection leaves hyper's hands, but its
//!   [`ConnectionSlot`] (the `max_connections` permit and the per-client count) travels in
//!   the request's extensions to the proxy's tunnel, so a tunnel keeps counting against both
//!   caps until it closes.
//! - **Workers**: [`serve_on_workers`] runs one accept loop per worker thread on clones of
//!   one socket; a connection one worker accepts is handed to the worker serving the fewest.
//! - **Handoff** (`handoff.rs`): an HTTP/1.1 response marked [`LongLived`] (the waiting
//!   page's live stream) is written from outside hyper once its head is out, so a held
//!   stream does not keep hyper's buffers; its slot goes with it.
//!
//! The files:
//!
//! | file | what it holds |
//! |---|---|
//! | `mod.rs` | [`ServerLimits`], [`ConnectionSlot`], [`serve`], [`serve_on_workers`] (the worker threads) |
//! | `accept.rs` | one worker's accept loop: accept, serve a connection, back off on errors, drain |
//! | `caps.rs` | the process-wide caps (the `max_connections` permits, the per-client counts) and the way in under them |
//! | `evict.rs` | the open connections, and closing the longest-idle one to make room |
//! | `seats.rs` | spreading connections over the workers (which worker serves one) |
//! | `idle.rs` | a connection's idle watchdog and the requests it counts as in flight |
//! | `heads.rs` | a connection's reads followed to tell when a request head is on its way |
//! | `handoff.rs` | a long-lived HTTP/1.1 response taken back from hyper |
//! | `census.rs` | what a listener has open (connections, HTTP/2 streams) and what it closed, for the metrics |

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;

mod accept;
mod caps;
mod census;
mod evict;
mod handoff;
mod heads;
mod idle;
mod seats;

pub use census::{Census, Closed};
pub use handoff::LongLived;

use crate::http::body::Body;
use crate::identity::TrustedProxies;
use accept::accept_loop;
use caps::{Caps, PeerCount};
use seats::{Seat, SeatTaken, Seats};

/// Accept errors are logged at most once per this interval (the rest are counted).
pub const ACCEPT_ERROR_LOG_INTERVAL: Duration = Duration::from_secs(5);

/// Limits of the public listener.
#[derive(Debug, Clone)]
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
    /// Largest request head: an HTTP/1 request line and headers (hyper's read buffer, at
    /// least 8 KiB), or an HTTP/2 header list; larger gets a 431. What a client holding an
    /// unfinished head costs is about this much (twice on HTTP/2), so it sizes memory too.
    pub max_header_bytes: usize,
    /// After shutdown is signalled, in-flight requests get this long to finish.
    pub shutdown_grace: Duration,
    /// Where the listener counts what it has open; each listener its own (see [`Census`]).
    pub census: Census,
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
            max_header_bytes: 16 * 1024,
            shutdown_grace: Duration::from_secs(30),
            census: Census::default(),
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
    _open: census::OpenConnection,
    handoff: handoff::Handoff,
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
/// (through [`crate::worker::PerWorker`]) its origin connections on one thread, as nginx's
/// workers do. `max_connections` and the per-client cap stay process-wide: the workers
/// share one semaphore and one count. Whichever worker's `accept` wins gives the connection
/// to the worker serving the fewest (`Seats`, in `seats.rs`).
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

#[cfg(test)]
mod tests;
