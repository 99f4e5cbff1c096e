//! A connection's idle watchdog: the requests in flight on it (a request counts until its
//! response body has been sent or dropped), when it last had none, and whether a request
//! head is on its way. A connection is closed
//! - `header_read_timeout` after it was accepted, if no request has begun by then;
//! - `idle_timeout` after its last request ended, if it has stayed quiet (no head has
//!   begun to arrive since: then the next rule holds instead);
//! - `header_read_timeout` after a request head began to arrive, if that head has not been
//!   read in full by then (what counts as a head beginning is `heads.rs`'s to tell), give
//!   or take half of it: the watchdog looks that often rather than being woken per request;
//! - at once when it is evicted to make room (`evict.rs`).
//!
//! The third is ours rather than hyper's. hyper's HTTP/1 header-read timer starts the moment
//! a connection waits for its next request, so it would close every keep-alive connection
//! after `header_read_timeout`, ahead of a load balancer that reuses it for longer (the race
//! `docs/operations.md` warns about); and hyper has no such timer for HTTP/2, whose client
//! could otherwise hold an unfinished header block (up to the header list limit, buffered
//! twice) for as long as the connection lives.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::Context;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::census::{Closed, OpenStream};
use crate::http::body::{BoxError, Watch};

/// What the idle watchdog of one connection needs to know, kept in atomics so a request
/// costs a few counter updates and no wake-up: the watchdog sleeps until the earliest moment
/// the connection could be idle long enough, or until a head begins to arrive.
#[derive(Debug)]
struct ActivityState {
    /// The watchdog's time origin; the `_ms` stamps count from it.
    origin: Instant,
    /// Requests whose response has not been fully sent yet.
    in_flight: AtomicUsize,
    /// When `in_flight` last dropped to zero (or the connection was accepted).
    idle_since_ms: AtomicU64,
    /// Whether the connection has carried a request yet.
    served: AtomicBool,
    /// Whether a request beginning means its head has been read (HTTP/1, one head at a
    /// time); on HTTP/2 the frames say when a header block ends.
    http1: AtomicBool,
    /// When the request head on its way began to arrive, plus one (0: none is).
    head_since_ms: AtomicU64,
    /// Whether the connection was told to close to make room (`evict.rs`).
    evicted: AtomicBool,
    /// Wakes the watchdog when the connection is evicted.
    wake: Notify,
}

impl ActivityState {
    fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }

    fn at(&self, ms: u64) -> Instant {
        self.origin + Duration::from_millis(ms)
    }
}

/// One connection's watchdog, shared by its requests, its I/O and the task that closes it.
#[derive(Debug, Clone)]
pub(super) struct Activity(Arc<ActivityState>);

impl Activity {
    /// A connection accepted now, with no request yet.
    pub(super) fn new() -> Self {
        Activity(Arc::new(ActivityState {
            origin: Instant::now(),
            in_flight: AtomicUsize::new(0),
            idle_since_ms: AtomicU64::new(0),
            served: AtomicBool::new(false),
            http1: AtomicBool::new(false),
            head_since_ms: AtomicU64::new(0),
            evicted: AtomicBool::new(false),
            wake: Notify::new(),
        }))
    }

    /// A request begins: in flight until the returned guard drops, and with it `stream`
    /// (its count among the listener's open HTTP/2 streams, for one on HTTP/2).
    pub(super) fn begin(&self, stream: Option<OpenStream>) -> InFlight {
        let state = &self.0;
        state.in_flight.fetch_add(1, Ordering::AcqRel);
        state.served.store(true, Ordering::Release);
        if state.http1.load(Ordering::Relaxed) {
            state.head_since_ms.store(0, Ordering::Release);
        }
        InFlight {
            state: state.clone(),
            _stream: stream,
        }
    }

    /// The connection speaks HTTP/1: a request beginning ends the head on its way.
    pub(super) fn speaks_http1(&self) {
        self.0.http1.store(true, Ordering::Relaxed);
    }

    /// Whether no request is in flight.
    pub(super) fn is_idle(&self) -> bool {
        self.0.in_flight.load(Ordering::Acquire) == 0
    }

    /// A request head began to arrive (unless one already is on its way). The watchdog is
    /// not woken for it (that would cost every request a wake-up); it looks often enough.
    pub(super) fn head_began(&self) {
        let state = &self.0;
        let now = state.now_ms() + 1;
        let _ = state
            .head_since_ms
            .compare_exchange(0, now, Ordering::AcqRel, Ordering::Relaxed);
    }

    /// How long the connection has gone without a request in flight, or `None` if one is
    /// in flight or it was already evicted.
    pub(super) fn idle_for(&self, now: Instant) -> Option<Duration> {
        let state = &self.0;
        if state.in_flight.load(Ordering::Acquire) > 0 || state.evicted.load(Ordering::Acquire) {
            return None;
        }
        Some(now.saturating_duration_since(state.at(state.idle_since_ms.load(Ordering::Acquire))))
    }

    /// Tells the connection to close (its watchdog's [`Activity::expired`] resolves).
    pub(super) fn evict(&self) {
        self.0.evicted.store(true, Ordering::Release);
        self.0.wake.notify_one();
    }

    /// Whether the connection was told to close to make room.
    #[cfg(test)]
    pub(super) fn is_evicted(&self) -> bool {
        self.0.evicted.load(Ordering::Acquire)
    }

    /// Whether a request head is on its way.
    #[cfg(test)]
    pub(super) fn head_pending(&self) -> bool {
        self.0.head_since_ms.load(Ordering::Acquire) > 0
    }

    /// The head on its way has been read in full.
    pub(super) fn head_ended(&self) {
        self.0.head_since_ms.store(0, Ordering::Release);
    }

    /// When the connection should close as things stand, and which timer that is:
    /// - a head on its way has `head` from its first byte, in flight or not;
    /// - with nothing in flight and no head on its way, a served connection has `idle`
    ///   from when it was last idle;
    /// - a connection not yet served has `head` from accept (its first head, the earlier
    ///   of that and its own `head`).
    ///
    /// A served connection whose next head has begun is timed by the head alone, whatever
    /// the idle timer says: a client that has started a request (a load balancer reusing
    /// its connection near `idle_timeout`) is not cut off mid-head for having waited
    /// before it. It gains at most `head` on a quiet connection.
    fn deadline(&self, head: Duration, idle: Duration) -> Option<(Instant, Closed)> {
        let state = &self.0;
        let head_since = state.head_since_ms.load(Ordering::Acquire);
        let head_deadline = (head_since > 0).then(|| state.at(head_since - 1) + head);
        if state.in_flight.load(Ordering::Acquire) > 0 {
            return head_deadline.map(|at| (at, Closed::HeadTimeout));
        }
        let idle_since = state.at(state.idle_since_ms.load(Ordering::Acquire));
        if state.served.load(Ordering::Acquire) {
            return Some(match head_deadline {
                Some(at) => (at, Closed::HeadTimeout),
                None => (idle_since + idle, Closed::IdleTimeout),
            });
        }
        let first = idle_since + head;
        Some((
            head_deadline.map_or(first, |at| at.min(first)),
            Closed::HeadTimeout,
        ))
    }

    /// Resolves once the connection should close (see the module doc), or at once when it is
    /// evicted to make room, with why.
    pub(super) async fn expired(&self, head: Duration, idle: Duration) -> Closed {
        let state = &self.0;
        loop {
            // Registered before the flag is read, so an eviction after the read still
            // wakes this.
            let woken = state.wake.notified();
            if state.evicted.load(Ordering::Acquire) {
                return Closed::MadeRoom;
            }
            let now = Instant::now();
            // Busy with no head on its way: once the request ends, the connection has
            // `idle` to go.
            let deadline = self.deadline(head, idle).map_or(now + idle, |(at, _)| at);
            if now >= deadline {
                // Read again: a request that began meanwhile keeps the connection.
                match self.deadline(head, idle) {
                    Some((again, reason)) if now >= again => return reason,
                    _ => continue,
                }
            }
            // A head may begin unseen at any moment: look again within half of `head`, so
            // one is cut at most half a `head` late; and within `idle`, since before its
            // first request the limit drops from `head` to `idle` the moment one is served.
            let wake = deadline.min(now + (head / 2).min(idle));
            tokio::select! {
                () = tokio::time::sleep_until(wake) => {}
                () = woken => {}
            }
        }
    }
}

/// Marks one request as in flight until dropped (with the response body), and holds its
/// HTTP/2 stream's count for as long.
#[derive(Debug)]
pub(super) struct InFlight {
    state: Arc<ActivityState>,
    _stream: Option<OpenStream>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let state = &self.state;
        // Stamp before the count drops, so the watchdog never sees zero with an old stamp.
        let now = state.now_ms();
        state.idle_since_ms.fetch_max(now, Ordering::AcqRel);
        state.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Held by a response body (`Watched`): the request counts as in flight until dropped.
impl Watch for InFlight {
    fn polled(&mut self, _: bool, _: &mut Context<'_>) -> Option<BoxError> {
        None
    }
}
