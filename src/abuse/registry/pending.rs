//! The bound on strikes recorded in the background (with Redis): each is a round trip,
//! and with Redis away each waits out its timeout, so a flood of bad requests must not
//! pile up tasks that cannot count anyway.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The most strikes recorded in the background at once (with Redis): at a round trip of
/// a millisecond, a thousand strikes a second each; with Redis away, what a second of a
/// flood would pile up.
pub const MAX_PENDING_STRIKES: usize = 1024;

/// One background strike's share of [`MAX_PENDING_STRIKES`], given back when dropped.
pub(super) struct Pending(Arc<AtomicUsize>);

impl Pending {
    /// A share, if fewer than [`MAX_PENDING_STRIKES`] are taken.
    pub(super) fn take(count: &Arc<AtomicUsize>) -> Option<Pending> {
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_PENDING_STRIKES).then_some(n + 1)
            })
            .ok()
            .map(|_| Pending(count.clone()))
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
