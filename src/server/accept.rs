//! One worker's accept loop: take a slot under the caps, accept (or take a connection
//! handed over by another worker), serve the connection with hyper-util's `auto::Builder`
//! (HTTP/1.1 and h2c, upgrades on) under its idle watchdog, survive accept errors with a
//! back-off, and on shutdown stop accepting and drain for at most `shutdown_grace`.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use super::caps::{Accepted, Caps, Entrance};
use super::census::Closed;
use super::handoff;
use super::heads::Metered;
use super::idle::Activity;
use super::seats::{Seat, handed_to};
use super::{ACCEPT_ERROR_LOG_INTERVAL, ConnectionSlot, ServerLimits};
use crate::http::body::{Body, Watched};
use crate::log_limiter::LogLimiter;

/// Pause after an accept error that means the process is out of a resource (fds, memory).
const RESOURCE_BACKOFF: Duration = Duration::from_millis(100);
/// Pause after any other accept error (a peer that went away during the handshake, ...).
const CONNECTION_ERROR_BACKOFF: Duration = Duration::from_millis(10);

/// Accepts and serves connections until `shutdown` resolves, then drains them.
pub(super) async fn accept_loop<H, F>(
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
    let mut entrance = Entrance::default();
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
            accepted = entrance.next(&listener, &limits, &caps) => Ok(accepted),
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
                limits.census.close(Closed::OverClientCap);
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
            _open: limits.census.connection(),
            handoff: handoff::Handoff::default(),
        });
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%peer, %error, "could not set TCP_NODELAY");
        }

        let builder = builder.clone();
        let handler = handler.clone();
        let watcher = graceful.watcher();
        let head_timeout = limits.header_read_timeout;
        let idle_timeout = limits.idle_timeout;
        let census = limits.census.clone();
        let evictable = entrance.evictable.clone();
        connections.spawn(async move {
            let activity = Activity::new();
            let _listed = evictable.list(activity.clone());
            let service = {
                let activity = activity.clone();
                let slot = slot.clone();
                let census = census.clone();
                service_fn(move |mut req: Request<Incoming>| {
                    // Only an upgrade can take the slot (its tunnel outlives the request,
                    // see `proxy`); a first extension costs every other request two
                    // allocations.
                    if req.headers().contains_key(http::header::UPGRADE) {
                        req.extensions_mut().insert(slot.clone());
                    }
                    let version = req.version();
                    let stream = (version == http::Version::HTTP_2).then(|| census.http2_stream());
                    let guard = activity.begin(stream);
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
            let io = handoff::HandoffIo::new(stream, slot.clone());
            let io = TokioIo::new(Metered::new(io, activity.clone()));
            let conn = builder.serve_connection_with_upgrades(io, service);
            let conn = watcher.watch(conn);
            tokio::select! {
                result = conn => {
                    if let Err(error) = result {
                        if let Some(reason) = refused_head(&*error) {
                            census.close(reason);
                        }
                        tracing::debug!(%peer, %error, "connection ended with an error");
                    }
                }
                reason = activity.expired(head_timeout, idle_timeout) => {
                    census.close(reason);
                    tracing::debug!(%peer, reason = reason.as_str(), "closing the connection");
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
        // The connection's watchdog times heads (`idle.rs`): hyper's timer would also
        // run while a keep-alive connection waits, and cut it at `header_read_timeout`.
        .header_read_timeout(None)
        .keep_alive(true)
        // hyper's floor; the configuration refuses less.
        .max_buf_size(limits.max_header_bytes.max(8 * 1024));
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.http2_max_streams.max(1))
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
    builder
}

/// Why hyper closed a connection whose request head it refused (after answering it 431 or
/// 400), if that is how it ended; `None` for any other end (the client went away, a
/// protocol error on HTTP/2, ...).
fn refused_head(error: &(dyn std::error::Error + 'static)) -> Option<Closed> {
    let hyper = error.downcast_ref::<hyper::Error>()?;
    if hyper.is_parse_too_large() {
        Some(Closed::HeadTooLarge)
    } else if hyper.is_parse() {
        Some(Closed::Malformed)
    } else {
        None
    }
}

/// Errors that mean this process (or the machine) is out of something; backing off gives
/// the in-flight connections a chance to finish and free it.
pub(super) fn is_resource_exhaustion(error: &io::Error) -> bool {
    const EMFILE: i32 = 24;
    const ENFILE: i32 = 23;
    const ENOBUFS: i32 = 105;
    const ENOMEM: i32 = 12;
    matches!(
        error.raw_os_error(),
        Some(EMFILE | ENFILE | ENOBUFS | ENOMEM)
    ) || error.kind() == io::ErrorKind::OutOfMemory
}
