//! Wall time that tokio's paused clock drives, so every time-dependent rule (bucket refill,
//! session reclaim, abandonment) is exact and instant in tests.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// Every duration in the config is at most this long, so no `Instant + Duration` (timers,
/// deadlines, session expiry) can overflow, whatever the file says.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// Unix milliseconds, read as a fixed wall-clock origin plus tokio's monotonic time since.
/// In production that is the system clock without its jumps; under `tokio::time::pause`
/// it advances only when the test says so.
#[derive(Clone, Debug)]
pub struct Clock {
    origin_unix_ms: u64,
    origin: Instant,
    /// Milliseconds a test moved this clock (and every clone of it) forward.
    skipped_ms: Arc<AtomicU64>,
}

impl Clock {
    /// A clock reading the system's wall time, advanced by a monotonic timer from now on.
    pub fn system() -> Self {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Self::starting_at(now.as_millis() as u64)
    }

    /// A clock that reads `unix_ms` now.
    pub fn starting_at(unix_ms: u64) -> Self {
        Clock {
            origin_unix_ms: unix_ms,
            origin: Instant::now(),
            skipped_ms: Arc::default(),
        }
    }

    /// Unix milliseconds now, by this clock.
    pub fn now_ms(&self) -> u64 {
        self.origin_unix_ms
            + self.origin.elapsed().as_millis() as u64
            + self.skipped_ms.load(Ordering::Relaxed)
    }

    /// Moves this clock and its clones forward by `by` without waiting: end-to-end tests,
    /// whose sockets need tokio's real clock, drive the store's time with it.
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn advance_for_tests(&self, by: Duration) {
        self.skipped_ms.fetch_add(ms(by), Ordering::Relaxed);
    }

    /// This clock's time as a [`SystemTime`].
    pub fn now(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.now_ms())
    }
}

/// Milliseconds of a duration, saturating, for arithmetic on unix-ms timestamps.
pub fn ms(d: Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn follows_paused_time_exactly() {
        let clock = Clock::starting_at(1_000);
        assert_eq!(clock.now_ms(), 1_000);
        tokio::time::advance(Duration::from_millis(2_500)).await;
        assert_eq!(clock.now_ms(), 3_500);
    }
}
