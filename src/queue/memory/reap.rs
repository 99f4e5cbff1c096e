//! One pass's reaping: sessions idle for `session_ttl` and waiters (or draw entrants) not
//! heard from for `abandon_after`, oldest first, at most the room's reap budget of each.
//!
//! The budget bounds how long a pass holds the room's lock. It starts at [`REAP_BUDGET`]
//! and doubles after each pass that used all of it, up to [`MAX_REAP_BUDGET`], back to the
//! start once a pass clears what is due. Why it grows: a flood of joins that abandon their
//! places at once (a script that never opens the page) falls due as fast as it came. At a
//! fixed 10,000 a pass (40,000 a second at the default `admit_interval`) a flood of 55,000
//! joins a second outran the reaper, and the line grew to 877,000 places nobody held, all
//! ahead of whoever came next. At the cap a pass reaps 40,000 of each, 160,000 a second:
//! more than the fastest flood measured, and still one pass's bounded share of the lock.

use std::collections::BTreeSet;

use super::{PassReport, REAP_BUDGET, Room, ms};

/// The most a pass may reap of each kind, however far behind it is.
pub(super) const MAX_REAP_BUDGET: usize = 4 * REAP_BUDGET;

impl Room {
    /// Reaps what is due by `now` into `report`, within the budget, and sets the next one.
    pub(super) fn reap(&mut self, now: u64, report: &mut PassReport) {
        let budget = self.reap_budget;

        let ttl = ms(self.settings.session_ttl);
        while report.expired.len() < budget {
            let Some((visitor, session)) = self.sessions.pop_due(ttl, now) else {
                break;
            };
            self.session_counts.remove(session.clients.first().copied());
            self.lengths.ended(&session, now);
            report.expired.push(visitor);
        }
        self.counters.total_expired += report.expired.len() as u64;

        let abandon_after = ms(self.settings.abandon_after);
        while report.abandoned.len() < budget {
            let Some((place, w)) = self.line.oldest_seen() else {
                break;
            };
            if w.seen_ms().saturating_add(abandon_after) > now {
                break;
            }
            let w = self.line.remove(place);
            self.places.release(w.client);
            report.abandoned.push(w.visitor);
        }
        let left = budget - report.abandoned.len();
        for (seen, visitor) in due(&self.draw_by_seen, abandon_after, now, left) {
            self.draw_by_seen.remove(&(seen, visitor));
            if let Some(e) = self.draw.remove(&visitor) {
                self.places.release(e.client);
            }
            report.abandoned.push(visitor);
        }
        self.counters.total_abandoned += report.abandoned.len() as u64;

        let behind = report.expired.len() == budget || report.abandoned.len() == budget;
        self.reap_budget = if behind {
            (budget * 2).min(MAX_REAP_BUDGET)
        } else {
            REAP_BUDGET
        };
    }
}

/// The oldest entries of a by-time index whose time plus `after` has come by `now`, at
/// most `budget` of them: what one pass reaps from it.
fn due<K: Copy + Ord>(
    index: &BTreeSet<(u64, K)>,
    after: u64,
    now: u64,
    budget: usize,
) -> Vec<(u64, K)> {
    index
        .iter()
        .take_while(|(at, _)| at.saturating_add(after) <= now)
        .take(budget)
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};
    use std::time::Duration;

    use super::*;
    use crate::queue::conformance::settings;
    use crate::queue::memory::Phase;
    use crate::queue::{ClientKey, Join, VisitorId};

    #[test]
    fn a_backlog_doubles_the_budget_until_it_is_cleared() {
        let mut room_settings = settings(1.0, 10);
        room_settings.paused = true;
        room_settings.abandon_after = Duration::from_secs(60);
        let mut room = Room::new(room_settings, 0);
        let n = 5 * REAP_BUDGET + 123;
        for i in 0..n {
            // A client each, as a flood from many addresses would be.
            let ip = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i as u32));
            room.join_newcomer(
                VisitorId::random(),
                ClientKey::from(ip),
                Join::Back,
                Phase::Queueing,
                0,
            );
        }
        assert_eq!(room.waiting(), n as u64);
        // All of them fall due together; a pass a second reaps them.
        let reaped: Vec<usize> = (0..4)
            .map(|s| room.admit_pass(61_000 + s * 1_000).abandoned.len())
            .collect();
        assert_eq!(
            reaped,
            [REAP_BUDGET, 2 * REAP_BUDGET, 2 * REAP_BUDGET + 123, 0]
        );
        assert_eq!(room.waiting(), 0);
        // Caught up, the budget is back where it started.
        assert_eq!(room.reap_budget, REAP_BUDGET);
    }
}
