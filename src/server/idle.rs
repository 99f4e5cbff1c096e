//! A connection's idle watchdog: the requests in flight on it (a request counts until its
//! response body has been sent or dropped) and when it last had none, so a connection is
//! closed after `idle_timeout` without a request, or `header_read_timeout` before its first.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::Context;
use std::time::Duration;

use tokio::time::Instant;

use super::census::OpenStream;
use crate::http::body::{BoxError, Watch};

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

/// One connection's watchdog, shared by its requests and the task that closes it.
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
        }))
    }

    /// A request begins: in flight until the returned guard drops, and with it `stream`
    /// (its count among the listener's open HTTP/2 streams, for one on HTTP/2).
    pub(super) fn begin(&self, stream: Option<OpenStream>) -> InFlight {
        self.0.in_flight.fetch_add(1, Ordering::AcqRel);
        self.0.served.store(true, Ordering::Release);
        InFlight {
            state: self.0.clone(),
            _stream: stream,
        }
    }

    /// Resolves once the connection has had no request in flight for `idle` (or, before
    /// its first request, for `first`).
    pub(super) async fn expired(&self, first: Duration, idle: Duration) {
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
        let now = state.origin.elapsed().as_millis() as u64;
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
