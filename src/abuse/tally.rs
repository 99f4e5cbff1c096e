//! The replica's own count of failed checks per client, taken under one lock together with
//! the check itself, so that concurrency cannot outrun a ban.
//!
//! The strike table proper (embedded or in Redis) decides bans; this tally only decides
//! whether one more check is made. A client whose failed checks within `abuse.window`
//! weigh `abuse.strikes` already is not checked again until they age out, so at most
//! `ceil(strikes / weight)` wrong admin tokens from one client are ever compared on this
//! replica, however many arrive at once (HTTP/2 streams, parallel connections), and
//! whether or not the ban they earned has reached the snapshot yet.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

/// Failed checks per client within the window: (unix ms, weight), oldest first.
#[derive(Debug, Default)]
pub(super) struct Tally {
    clients: HashMap<IpAddr, VecDeque<(u64, u32)>>,
}

impl Tally {
    /// The weight of `client`'s failures within `window_ms` of `now`, forgetting older ones.
    pub(super) fn weight(&mut self, client: IpAddr, now: u64, window_ms: u64) -> u64 {
        let Some(hits) = self.clients.get_mut(&client) else {
            return 0;
        };
        while hits
            .front()
            .is_some_and(|&(at, _)| at.saturating_add(window_ms) <= now)
        {
            hits.pop_front();
        }
        if hits.is_empty() {
            self.clients.remove(&client);
            return 0;
        }
        hits.iter().map(|&(_, w)| u64::from(w)).sum()
    }

    /// Records a failure of `weight`, keeping at most `max` clients: at the bound, those
    /// with nothing left in the window go first, then an arbitrary one (its next checks
    /// are then judged by the strike table's ban alone).
    pub(super) fn add(
        &mut self,
        client: IpAddr,
        weight: u32,
        now: u64,
        window_ms: u64,
        max: usize,
    ) {
        if !self.clients.contains_key(&client) && self.clients.len() >= max.max(1) {
            self.clients.retain(|_, hits| {
                hits.back()
                    .is_some_and(|&(at, _)| at.saturating_add(window_ms) > now)
            });
            if self.clients.len() >= max.max(1)
                && let Some(any) = self.clients.keys().next().copied()
            {
                self.clients.remove(&any);
            }
        }
        self.clients
            .entry(client)
            .or_default()
            .push_back((now, weight));
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.clients.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_age_out_of_the_window_and_the_table_is_bounded() {
        let mut t = Tally::default();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        t.add(a, 5, 1_000, 60_000, 2);
        t.add(a, 5, 2_000, 60_000, 2);
        assert_eq!(t.weight(a, 3_000, 60_000), 10);
        // The first ages out a window after it was made.
        assert_eq!(t.weight(a, 61_000, 60_000), 5);
        assert_eq!(t.weight(a, 62_000, 60_000), 0);
        assert_eq!(t.len(), 0);
        // A third client in a table of two forgets one.
        t.add(a, 5, 70_000, 60_000, 2);
        t.add(b, 5, 70_000, 60_000, 2);
        t.add("192.0.2.3".parse().unwrap(), 1, 70_000, 60_000, 2);
        assert_eq!(t.len(), 2);
    }
}
