//! Making room at `max_connections`: the open connections of an accept loop (one worker)
//! are listed here by their [`Activity`], and when a client is waiting for a slot the one
//! that has gone longest without a request in flight (at least [`MIN_IDLE_TO_EVICT`]) is
//! closed for it.
//!
//! Why: the cap is there for memory and file descriptors, and a full server that only waits
//! for a connection to close leaves every newcomer (a visitor, a load balancer's health
//! check) in the kernel's queue for as long as idle ones last: `idle_timeout`, or
//! `header_read_timeout` for a client that holds unfinished heads on purpose. An idle
//! keep-alive connection costs its client one reconnect; a request in flight is never cut.
//!
//! The search looks at up to [`SCAN`] listed connections from where the last one ended
//! (the "clock" of page replacement), so a full server of 10,000 costs a few microseconds
//! a newcomer rather than a sweep of them all.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use slab::Slab;
use tokio::time::Instant;

use super::idle::Activity;

/// A connection idle for less than this is never closed to make room: its client may be
/// about to send the request it connected for.
pub(super) const MIN_IDLE_TO_EVICT: Duration = Duration::from_secs(1);

/// Listed connections looked at per search.
const SCAN: usize = 64;

/// The open connections of one accept loop, for making room.
#[derive(Debug, Clone, Default)]
pub(super) struct Evictable(Arc<Mutex<Listed>>);

#[derive(Debug, Default)]
struct Listed {
    open: Slab<Activity>,
    /// Where the next search starts.
    hand: usize,
}

impl Evictable {
    /// Lists a connection for as long as the returned guard lives.
    pub(super) fn list(&self, activity: Activity) -> Listing {
        let key = self.lock().open.insert(activity);
        Listing {
            evictable: self.clone(),
            key,
        }
    }

    /// Closes the connection idle longest among those looked at, if one has been idle
    /// [`MIN_IDLE_TO_EVICT`]; whether one was.
    pub(super) fn evict_one(&self) -> bool {
        let now = Instant::now();
        let mut listed = self.lock();
        let slots = listed.open.capacity();
        if listed.open.is_empty() || slots == 0 {
            return false;
        }
        let mut best: Option<(usize, Duration)> = None;
        let mut at = listed.hand;
        for _ in 0..SCAN.min(slots) {
            at = (at + 1) % slots;
            let Some(idle) = listed.open.get(at).and_then(|a| a.idle_for(now)) else {
                continue;
            };
            if idle >= MIN_IDLE_TO_EVICT && best.is_none_or(|(_, longest)| idle > longest) {
                best = Some((at, idle));
            }
        }
        listed.hand = at;
        match best {
            Some((key, _)) => {
                listed.open[key].evict();
                true
            }
            None => false,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Listed> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A connection's place in [`Evictable`]; unlisted on drop.
#[derive(Debug)]
pub(super) struct Listing {
    evictable: Evictable,
    key: usize,
}

impl Drop for Listing {
    fn drop(&mut self) {
        self.evictable.lock().open.try_remove(self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_longest_idle_goes_first_and_none_under_a_second_nor_in_flight() {
        let evictable = Evictable::default();
        let old = Activity::new();
        let _old = evictable.list(old.clone());
        tokio::time::advance(Duration::from_secs(5)).await;
        let busy = Activity::new();
        let _busy = evictable.list(busy.clone());
        let _request = busy.begin(None);
        let recent = Activity::new();
        let _recent = evictable.list(recent.clone());
        tokio::time::advance(Duration::from_secs(2)).await;
        let fresh = Activity::new();
        let _fresh = evictable.list(fresh.clone());

        assert!(evictable.evict_one());
        assert!(old.is_evicted() && !recent.is_evicted());
        assert!(evictable.evict_one());
        assert!(recent.is_evicted());
        // Already told to close, in flight, or under a second idle: nobody.
        assert!(!evictable.evict_one());
        assert!(!busy.is_evicted() && !fresh.is_evicted());
    }
}
