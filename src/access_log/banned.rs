//! At most [`LINES_PER_SEC`] access-log lines a second per banned client: a banned bot
//! answered 429 thousands of times a second would otherwise fill the disk with identical
//! lines, and the writer's channel with them, crowding out everybody else's.

use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

/// Lines a banned client may write each second; the rest are counted, not written.
pub const LINES_PER_SEC: u32 = 10;

/// Slots of the table; clients hash to one. Fixed, so memory does not grow with the
/// number of banned clients (a flood from many addresses).
const SLOTS: usize = 4096;

/// Who last used a slot, in which second, how many lines.
#[derive(Clone, Copy)]
struct Slot {
    client: Option<IpAddr>,
    second: u64,
    lines: u32,
}

/// The per-client budget of banned lines.
pub(super) struct BannedLines {
    start: Instant,
    slots: Mutex<Box<[Slot]>>,
    hasher: std::hash::RandomState,
}

impl BannedLines {
    pub(super) fn new() -> Self {
        BannedLines {
            start: Instant::now(),
            slots: Mutex::new(
                vec![
                    Slot {
                        client: None,
                        second: 0,
                        lines: 0
                    };
                    SLOTS
                ]
                .into_boxed_slice(),
            ),
            hasher: std::hash::RandomState::new(),
        }
    }

    /// Whether `client`'s banned line at `now` is written. A client that shares its slot
    /// with another starts a fresh budget when it takes the slot over, so a collision
    /// errs toward writing a line, never toward hiding one client behind another.
    pub(super) fn allow(&self, client: IpAddr, now: Instant) -> bool {
        use std::hash::BuildHasher;
        let second = now.saturating_duration_since(self.start).as_secs();
        let i = (self.hasher.hash_one(client) as usize) % SLOTS;
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let slot = &mut slots[i];
        if slot.client != Some(client) || slot.second != second {
            *slot = Slot {
                client: Some(client),
                second,
                lines: 0,
            };
        }
        if slot.lines >= LINES_PER_SEC {
            return false;
        }
        slot.lines += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn ten_a_second_per_client_then_a_fresh_second() {
        let lines = BannedLines::new();
        let t0 = lines.start;
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let written = (0..1000).filter(|_| lines.allow(a, t0)).count();
        assert_eq!(written, LINES_PER_SEC as usize);
        // Another client has its own budget in the same second.
        assert!(lines.allow(b, t0));
        // The next second starts afresh.
        let t1 = t0 + Duration::from_secs(1);
        let written = (0..1000).filter(|_| lines.allow(a, t1)).count();
        assert_eq!(written, LINES_PER_SEC as usize);
    }
}
