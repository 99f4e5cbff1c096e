//! "Log this at most once every N": rate-limited warnings for conditions that can repeat
//! thousands of times a second (a dead broker, a store outage, accept errors).

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// "Log this at most once every N": [`LogLimiter::allow`] says yes at most once per
/// interval. Thread-safe, usable in a `static`, and driven by tokio's clock so tests can
/// pause and advance time. Works outside a runtime too (it then uses the real clock).
#[derive(Debug)]
pub struct LogLimiter {
    every: Duration,
    state: Mutex<LimiterState>,
}

#[derive(Debug)]
struct LimiterState {
    next: Option<Instant>,
    suppressed: u64,
}

impl LogLimiter {
    /// A limiter allowing one line per `every`.
    pub const fn new(every: Duration) -> Self {
        LogLimiter {
            every,
            state: Mutex::new(LimiterState {
                next: None,
                suppressed: 0,
            }),
        }
    }

    /// Whether to log now. The first call says yes; after a yes, the answer is no until
    /// the interval has passed.
    pub fn allow(&self) -> bool {
        self.allow_counted().is_some()
    }

    /// Like [`allow`](Self::allow), but a yes carries how many calls were refused since
    /// the last yes, for a "(N more suppressed)" note.
    pub fn allow_counted(&self) -> Option<u64> {
        let now = Instant::now();
        // A panic while holding this lock cannot leave the state inconsistent.
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match state.next {
            Some(next) if now < next => {
                state.suppressed = state.suppressed.saturating_add(1);
                None
            }
            _ => {
                state.next = now.checked_add(self.every);
                Some(std::mem::take(&mut state.suppressed))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn log_limiter_once_a_minute() {
        let limiter = LogLimiter::new(Duration::from_secs(60));
        assert!(limiter.allow());
        assert!(!limiter.allow());
        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(!limiter.allow());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(limiter.allow_counted(), Some(2));
        assert_eq!(limiter.allow_counted(), None);
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert_eq!(limiter.allow_counted(), Some(1));
        assert!(!limiter.allow());
    }

    #[test]
    fn log_limiter_static_and_threads() {
        static LIMITER: LogLimiter = LogLimiter::new(Duration::from_secs(3600));
        let allowed: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| s.spawn(|| (0..100).filter(|_| LIMITER.allow()).count()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(allowed, 1);
    }
}
