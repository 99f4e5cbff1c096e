//! The clocks of a forwarded exchange: [`ProxyTimeouts`], the visitor's request body
//! watched for progress (the response timeout counts from its last byte, and the whole
//! body must arrive within `body`) and the origin's response body cut when it stalls for
//! `idle`. Timers are armed only when a body first has to wait.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::Incoming;
use tokio::time::{Instant, Sleep};

use super::{ProxyError, lock};
use crate::http::body::{BoxError, Watch, Watched};

/// Timeouts toward the origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyTimeouts {
    /// Establishing the TCP connection.
    pub connect: Duration,
    /// Waiting for the response headers once the request (body included) has been sent;
    /// while the request body is still flowing, the clock restarts with every chunk.
    pub response: Duration,
    /// A response body that delivers nothing for this long is cut; pooled keep-alive
    /// connections idle for this long are closed; an upgraded (WebSocket) tunnel that
    /// carries no byte either way for this long is closed.
    pub idle: Duration,
    /// The visitor's request body must have arrived in full within this long of the
    /// request head (a body dribbled a byte at a time is cut with a 408).
    pub body: Duration,
}

impl Default for ProxyTimeouts {
    fn default() -> Self {
        ProxyTimeouts {
            connect: Duration::from_secs(5),
            response: Duration::from_secs(60),
            idle: Duration::from_secs(90),
            body: Duration::from_secs(60),
        }
    }
}

/// The visitor's request body on its way to the origin: records when it last moved so the
/// response timeout counts from the end of the upload, not from its start.
pub(super) type TrackedBody = Watched<Incoming, Activity>;

/// The request body's progress and its overall deadline (`body_timeout`).
pub(super) struct Activity {
    pub(super) progress: Arc<BodyProgress>,
    deadline: LazySleep,
}

/// What the body's watcher tells the request waiting on the origin (one allocation).
pub(super) struct BodyProgress {
    /// When the body last moved.
    pub(super) last: Mutex<Instant>,
    /// Set when the deadline cut the body, so the caller answers 408 rather than 502.
    pub(super) late: AtomicBool,
    /// Set when the visitor's body broke (cut short, a malformed chunk), so the caller
    /// answers 400 rather than 502: the client's fault, not the origin's.
    pub(super) broken: AtomicBool,
}

impl Activity {
    /// A body starting now, cut `body_timeout` from now.
    pub(super) fn new(body_timeout: Duration) -> Activity {
        let now = Instant::now();
        Activity {
            progress: Arc::new(BodyProgress {
                last: Mutex::new(now),
                late: AtomicBool::new(false),
                broken: AtomicBool::new(false),
            }),
            deadline: LazySleep::until(now + body_timeout),
        }
    }
}

impl Watch for Activity {
    fn failed(&mut self) {
        self.progress.broken.store(true, Ordering::Release);
    }

    fn polled(&mut self, ready: bool, cx: &mut Context<'_>) -> Option<BoxError> {
        if ready {
            *lock(&self.progress.last) = Instant::now();
            return None;
        }
        match self.deadline.poll(cx) {
            Poll::Ready(()) => {
                self.progress.late.store(true, Ordering::Release);
                Some(Box::new(ProxyError::BodyTimeout))
            }
            Poll::Pending => None,
        }
    }
}

/// A timer armed only when first polled: most bodies never wait, and a timer costs an
/// allocation and two visits to the timer wheel.
struct LazySleep {
    at: Instant,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl LazySleep {
    fn until(at: Instant) -> Self {
        LazySleep { at, sleep: None }
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let at = self.at;
        self.sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)))
            .as_mut()
            .poll(cx)
    }

    /// Moves the deadline (an armed timer is reset only when it goes off early).
    fn set(&mut self, at: Instant) {
        self.at = at;
    }

    /// Whether the deadline has passed; if the timer went off for an older one, it is
    /// armed again for the current one.
    fn poll_current(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            match self.poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(()) if self.at <= Instant::now() => return Poll::Ready(()),
                Poll::Ready(()) => {
                    let at = self.at;
                    if let Some(sleep) = self.sleep.as_mut() {
                        sleep.as_mut().reset(at);
                    }
                }
            }
        }
    }
}

/// For the origin's response body: fails it if it delivers nothing for `idle`.
pub(super) struct IdleTimeout {
    idle: Duration,
    timer: LazySleep,
}

impl IdleTimeout {
    pub(super) fn new(idle: Duration) -> Self {
        IdleTimeout {
            idle,
            timer: LazySleep::until(Instant::now() + idle),
        }
    }
}

impl Watch for IdleTimeout {
    fn polled(&mut self, ready: bool, cx: &mut Context<'_>) -> Option<BoxError> {
        if ready {
            // Not a timer reset per frame: the timer, if armed, notices the move when it
            // goes off.
            self.timer.set(Instant::now() + self.idle);
            return None;
        }
        match self.timer.poll_current(cx) {
            Poll::Ready(()) => Some(Box::new(ProxyError::Timeout)),
            Poll::Pending => None,
        }
    }
}
