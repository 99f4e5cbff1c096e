//! The origin connection pool: HTTP/1.1 connections driven by the request that uses them.
//!
//! Why not hyper-util's pooled client: it runs every origin connection as a task of its
//! own, so each proxied request is pushed to that task through a channel, and its response
//! and every body chunk come back through another, two task wake-ups and several channel
//! operations a request more than nginx's one event loop (BENCHMARKS.md). Here a request
//! checks a connection out, drives it itself while it waits for the response head, and
//! hands it to the response body, which drives it while the server polls the body and puts
//! it back when the body is complete. The request, its origin connection and its body are
//! then polled by one task, on one worker's thread (the pool is per worker:
//! `worker::PerWorker`).
//!
//! A connection is reused only when its exchange finished cleanly: a body dropped half-read,
//! an error, an origin's `Connection: close`, or an upgrade retire it. Idle connections are
//! closed after `idle` (a sweep runs while any are idle) and checked for a close by the
//! origin before reuse; a request that could not be written on a pooled connection (it was
//! closed under us) is sent once more on a fresh one, as hyper-util's client does.

use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use http::uri::{Authority, Scheme};
use http::{Request, Response, Uri};
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, Connection, SendRequest};
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tower_service::Service;

use super::ProxyError;
use super::error::{caused_by_timeout, with_causes};
use super::timers::TrackedBody;
use crate::tls::ConnectTimeout;

/// How the pool connects: TCP (and TLS for `https://`) within the connect timeout.
pub(super) type Connector = ConnectTimeout<HttpsConnector<HttpConnector>>;
type Io = MaybeHttpsStream<TokioIo<TcpStream>>;
/// Boxed: a connection (TLS state included) is large, and it moves between the pool, the
/// request's future and the response body on every request.
type Conn = Pin<Box<Connection<Io, TrackedBody>>>;

/// Idle connections kept per origin (per worker); beyond it the oldest is closed.
const MAX_IDLE_PER_ORIGIN: usize = 256;

/// How often idle connections are checked for a close by the origin.
const PROBE_INTERVAL: Duration = Duration::from_secs(2);

/// A pool of idle HTTP/1.1 connections per origin, shared by clones.
#[derive(Clone)]
pub(super) struct Pool {
    shared: Arc<Shared>,
}

struct Shared {
    connector: Connector,
    idle_timeout: Duration,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Per origin (scheme and authority; a handful), oldest idle first.
    origins: Vec<(Key, Vec<Idle>)>,
    /// Whether a sweep task is closing expired idle connections.
    sweeping: bool,
}

#[derive(Clone)]
struct Key {
    scheme: Scheme,
    authority: Authority,
}

/// Byte for byte: the keys of one configured origin are the same text, and `Authority`'s
/// own comparison ignores case, a byte at a time, twice a request.
impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.scheme == other.scheme && self.authority.as_str() == other.authority.as_str()
    }
}

/// A connection ready for its next request.
struct Idle {
    send: SendRequest<TrackedBody>,
    conn: Conn,
    since: Instant,
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let idle: usize = lock(&self.shared.state)
            .origins
            .iter()
            .map(|(_, idle)| idle.len())
            .sum();
        f.debug_struct("Pool").field("idle", &idle).finish()
    }
}

impl Pool {
    pub(super) fn new(connector: Connector, idle_timeout: Duration) -> Self {
        Pool {
            shared: Arc::new(Shared {
                connector,
                idle_timeout,
                state: Mutex::default(),
            }),
        }
    }

    /// Sends `req` (its URI in origin form) to the origin at `connect` (scheme and
    /// authority) and returns the response head, its body driving the connection.
    /// `upgrade`: the exchange may switch protocols, so it gets a connection of its own
    /// that is never pooled.
    pub(super) async fn send(
        &self,
        connect: &Uri,
        req: Request<TrackedBody>,
        upgrade: bool,
    ) -> Result<Response<OriginBody>, ProxyError> {
        let key = Key {
            scheme: connect.scheme().cloned().unwrap_or(Scheme::HTTP),
            authority: connect
                .authority()
                .cloned()
                .ok_or_else(|| ProxyError::InvalidOrigin(format!("{connect}: no authority")))?,
        };
        if upgrade {
            let (mut send, conn) = Box::pin(self.connect(connect)).await?;
            // An upgraded connection outlives the exchange: it runs as its own task, which
            // hands the upgraded socket over once the 101 is read.
            tokio::spawn(async move {
                if let Err(error) = Pin::into_inner(conn).with_upgrades().await {
                    tracing::debug!(%error, "origin connection (upgrade) ended with an error");
                }
            });
            let response = send.send_request(req).await.map_err(upstream)?;
            return Ok(response.map(|incoming| OriginBody {
                incoming,
                lease: None,
            }));
        }
        let (idle, fresh) = match self.checkout(&key) {
            Some(idle) => ((idle.send, idle.conn), false),
            None => (Box::pin(self.connect(connect)).await?, true),
        };
        match self.exchange(idle, req).await {
            Ok(response) => Ok(self.lease(response, key)),
            // Closed by the origin before the request was written (an idle connection
            // it gave up on just now): nothing reached the origin, so once more on a
            // fresh connection.
            Err(Retry(Some(req), _)) if !fresh => {
                let fresh = Box::pin(self.connect(connect)).await?;
                match self.exchange(fresh, req).await {
                    Ok(response) => Ok(self.lease(response, key)),
                    Err(Retry(_, error)) => Err(error),
                }
            }
            Err(Retry(_, error)) => Err(error),
        }
    }

    fn lease(
        &self,
        (response, send, conn): (Response<Incoming>, SendRequest<TrackedBody>, Option<Conn>),
        key: Key,
    ) -> Response<OriginBody> {
        let lease = conn.map(|conn| Lease {
            pool: self.clone(),
            key,
            send,
            conn,
        });
        response.map(|incoming| OriginBody { incoming, lease })
    }

    /// A pooled connection for `key` that is still open and ready, newest first.
    fn checkout(&self, key: &Key) -> Option<Idle> {
        let mut state = lock(&self.shared.state);
        let idle = &mut state.origins.iter_mut().find(|(k, _)| k == key)?.1;
        let fresh_after = Instant::now().checked_sub(self.shared.idle_timeout);
        while let Some(mut candidate) = idle.pop() {
            if fresh_after.is_some_and(|after| candidate.since <= after) {
                // Newest first: everything older has expired too.
                idle.clear();
                return None;
            }
            if reusable(&candidate.send, &mut candidate.conn) {
                return Some(candidate);
            }
        }
        None
    }

    /// Puts a connection whose response completed back, if it can take another request.
    /// One still sending its request body (the origin answered before reading it all)
    /// finishes the upload in a task of its own first, as hyper-util's client did: cutting
    /// it would reset the visitor's connection before they read the answer.
    fn checkin(&self, key: Key, send: SendRequest<TrackedBody>, mut conn: Conn) {
        match standing(&send, &mut conn) {
            Standing::Closed => return,
            Standing::Busy => {
                if tokio::runtime::Handle::try_current().is_ok() {
                    tokio::spawn(self.clone().finish_upload(key, send, conn));
                }
                return;
            }
            Standing::Ready => {}
        }
        let mut state = lock(&self.shared.state);
        let position = match state.origins.iter().position(|(k, _)| *k == key) {
            Some(position) => position,
            None => {
                state.origins.push((key, Vec::new()));
                state.origins.len() - 1
            }
        };
        let idle = &mut state.origins[position].1;
        if idle.len() >= MAX_IDLE_PER_ORIGIN {
            // The oldest goes: it is the likeliest to have been closed by the origin.
            idle.remove(0);
        }
        idle.push(Idle {
            send,
            conn,
            since: Instant::now(),
        });
        // Without a runtime (never on a serving worker) nothing sweeps; checkouts still
        // drop what expired or closed.
        if !state.sweeping && tokio::runtime::Handle::try_current().is_ok() {
            state.sweeping = true;
            tokio::spawn(self.clone().sweep());
        }
    }

    /// Drives a connection whose response is complete until its request body is sent too
    /// (then it is pooled) or it closes, for at most the idle timeout.
    async fn finish_upload(self, key: Key, mut send: SendRequest<TrackedBody>, mut conn: Conn) {
        let ready = std::future::poll_fn(|cx| {
            if conn.as_mut().poll(cx).is_ready() {
                return Poll::Ready(false);
            }
            send.poll_ready(cx).map(|ready| ready.is_ok())
        });
        if let Ok(true) = tokio::time::timeout(self.shared.idle_timeout, ready).await {
            self.checkin(key, send, conn);
        }
    }

    /// Closes idle connections as they expire or as their origin closes them (checked
    /// every [`PROBE_INTERVAL`]: origins often close idle connections after a few seconds,
    /// and each would otherwise hold a descriptor until it expired); ends when none is left.
    async fn sweep(self) {
        /// Resets `sweeping` if the sweep is dropped midway (its runtime shut down).
        struct Sweeping(Pool, std::cell::Cell<bool>);
        impl Drop for Sweeping {
            fn drop(&mut self) {
                if self.1.get() {
                    lock(&self.0.shared.state).sweeping = false;
                }
            }
        }
        let sweeping = Sweeping(self, std::cell::Cell::new(true));
        let pool = &sweeping.0;
        loop {
            let next_wake = {
                let mut state = lock(&pool.shared.state);
                let now = Instant::now();
                let fresh_after = now.checked_sub(pool.shared.idle_timeout);
                for (_, idle) in &mut state.origins {
                    idle.retain_mut(|i| {
                        fresh_after.is_none_or(|after| i.since > after)
                            && reusable(&i.send, &mut i.conn)
                    });
                }
                // Oldest first in each list: its head expires first.
                let oldest = state
                    .origins
                    .iter()
                    .filter_map(|(_, idle)| idle.first().map(|i| i.since))
                    .min();
                match oldest {
                    Some(since) => (since + pool.shared.idle_timeout).min(now + PROBE_INTERVAL),
                    // Under the lock, so a checkin after this starts a new sweep.
                    None => {
                        state.sweeping = false;
                        sweeping.1.set(false);
                        return;
                    }
                }
            };
            tokio::time::sleep_until(next_wake).await;
        }
    }

    async fn connect(&self, uri: &Uri) -> Result<(SendRequest<TrackedBody>, Conn), ProxyError> {
        let mut connector = self.shared.connector.clone();
        let io = async {
            std::future::poll_fn(|cx| connector.poll_ready(cx)).await?;
            connector.call(uri.clone()).await
        }
        .await
        .map_err(|error| {
            if caused_by_timeout(&*error) {
                ProxyError::Timeout
            } else {
                // With every cause, so a refusal or an untrusted certificate says so.
                ProxyError::Connect(with_causes(&*error).into())
            }
        })?;
        let (send, conn) = http1::Builder::new()
            .handshake(io)
            .await
            .map_err(upstream)?;
        Ok((send, Box::pin(conn)))
    }

    /// Writes `req` on the connection and reads the response head, driving the connection
    /// from this task. The connection comes back with the response unless it has closed.
    async fn exchange(
        &self,
        (mut send, conn): (SendRequest<TrackedBody>, Conn),
        req: Request<TrackedBody>,
    ) -> Result<(Response<Incoming>, SendRequest<TrackedBody>, Option<Conn>), Retry> {
        let mut conn = Some(conn);
        let mut response = std::pin::pin!(send.try_send_request(req));
        let result = std::future::poll_fn(|cx| {
            if let Poll::Ready(result) = response.as_mut().poll(cx) {
                return Poll::Ready(result);
            }
            if let Some(driving) = conn.as_mut()
                && let Poll::Ready(ended) = driving.as_mut().poll(cx)
            {
                // Closed or failed: the response future now resolves with why.
                if let Err(error) = ended {
                    tracing::debug!(%error, "origin connection ended");
                }
                conn = None;
            }
            response.as_mut().poll(cx)
        })
        .await;
        match result {
            Ok(response) => Ok((response, send, conn)),
            Err(mut error) => {
                let unsent = error.take_message();
                Err(Retry(unsent, upstream(error.into_error())))
            }
        }
    }
}

/// A failed exchange: the request back if it was never written, and why it failed.
struct Retry(Option<Request<TrackedBody>>, ProxyError);

fn upstream(error: hyper::Error) -> ProxyError {
    ProxyError::Upstream(Box::new(error))
}

/// Whether a connection can take a request now (see [`standing`]).
fn reusable(send: &SendRequest<TrackedBody>, conn: &mut Conn) -> bool {
    matches!(standing(send, conn), Standing::Ready)
}

/// Where a connection stands between requests.
enum Standing {
    /// The origin closed it, or it failed.
    Closed,
    /// Open, but still busy with the last exchange (sending its request body).
    Busy,
    /// Open and ready for a request.
    Ready,
}

/// Polls `conn` once without a waker (which notices a close by the origin, and lets a
/// finished exchange settle into idle) and says where it stands.
fn standing(send: &SendRequest<TrackedBody>, conn: &mut Conn) -> Standing {
    let mut cx = Context::from_waker(Waker::noop());
    match conn.as_mut().poll(&mut cx) {
        Poll::Ready(_) => Standing::Closed,
        Poll::Pending if send.is_ready() => Standing::Ready,
        Poll::Pending => Standing::Busy,
    }
}

/// A connection lent to one response body.
struct Lease {
    pool: Pool,
    key: Key,
    send: SendRequest<TrackedBody>,
    conn: Conn,
}

/// The origin's response body. While it is read it drives its connection (which reads the
/// bytes it delivers); once it is complete the connection goes back to the pool.
pub(super) struct OriginBody {
    incoming: Incoming,
    /// `None` once the connection closed or failed, for an upgrade, or once returned.
    lease: Option<Lease>,
}

impl OriginBody {
    /// The exchange is over: the connection can take the next request.
    fn complete(&mut self) {
        if let Some(Lease {
            pool,
            key,
            send,
            conn,
        }) = self.lease.take()
        {
            pool.checkin(key, send, conn);
        }
    }
}

impl HttpBody for OriginBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let mut polled = Pin::new(&mut this.incoming).poll_frame(cx);
        if polled.is_pending()
            && let Some(lease) = this.lease.as_mut()
        {
            // Nothing buffered: let the connection read (it wakes us if it gets a frame,
            // but asking again now saves that round through the scheduler).
            if let Poll::Ready(ended) = lease.conn.as_mut().poll(cx) {
                if let Err(error) = ended {
                    tracing::debug!(%error, "origin connection ended mid-body");
                }
                this.lease = None;
            }
            polled = Pin::new(&mut this.incoming).poll_frame(cx);
        }
        match &polled {
            Poll::Ready(None) => this.complete(),
            // hyper's server stops polling once a body says it has ended.
            Poll::Ready(Some(Ok(_))) if this.incoming.is_end_stream() => this.complete(),
            Poll::Ready(Some(Err(_))) => this.lease = None,
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.incoming.size_hint()
    }
}

impl Drop for OriginBody {
    fn drop(&mut self) {
        // An empty body (HEAD, 204, 304) is never polled; one dropped half-read leaves
        // its connection mid-message, so that connection closes with it.
        if self.incoming.is_end_stream() {
            self.complete();
        }
    }
}

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests;
