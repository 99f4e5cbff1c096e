//! Store health: whether the queue store answers and since when it has not. Every call
//! [`super::Admission`] makes to the store reports its outcome here, so readiness, the
//! status endpoint and `fail_open` all read one account of the outage, logged once when it
//! starts and once when it ends.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Whether the store answers, and since when it has not.
pub struct StoreHealth {
    down_since: Mutex<Option<Instant>>,
    fail_open_after: Option<Duration>,
    failing_open_logged: std::sync::atomic::AtomicBool,
}

impl StoreHealth {
    pub(super) fn new(fail_open_after: Option<Duration>) -> Self {
        StoreHealth {
            down_since: Mutex::new(None),
            fail_open_after,
            failing_open_logged: false.into(),
        }
    }

    /// Whether no store outage is under way (the last call did not fail).
    pub fn is_up(&self) -> bool {
        self.down_since
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
    }

    /// How long the store has been down, if it is.
    pub fn down_for(&self) -> Option<Duration> {
        self.down_since
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map(|since| since.elapsed())
    }

    /// With `fail_open`, whether the outage has lasted long enough to proxy everyone.
    pub fn failing_open(&self) -> bool {
        let failing = match (self.fail_open_after, self.down_for()) {
            (Some(after), Some(down)) => down >= after,
            _ => false,
        };
        if failing
            && !self
                .failing_open_logged
                .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::error!(
                "FAILING OPEN: the queue store has been down too long; every visitor is proxied to the origin unqueued"
            );
        }
        failing
    }

    pub(super) fn record_ok(&self) {
        let mut down = self.down_since.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(since) = down.take() {
            tracing::warn!(down_for = ?since.elapsed(), "queue store is back; admissions resume");
            self.failing_open_logged
                .store(false, std::sync::atomic::Ordering::Relaxed);
        }
    }

    pub(super) fn record_failure(&self, reason: &str) {
        let mut down = self.down_since.lock().unwrap_or_else(|p| p.into_inner());
        if down.is_none() {
            tracing::error!(
                reason,
                "queue store unavailable; nobody is admitted until it answers"
            );
            *down = Some(Instant::now());
        }
    }
}
