//! The embedded store's state: the strike table with its recency order, the master copy of
//! the bans with their end orders (what expires next, what a new ban may displace), and
//! the ban log. With Redis only the strike table is unused.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;

use crate::abuse::persist::{self, Saved};
use crate::abuse::{Ban, BanSource, LOG_CAP, LogAction, LogEntry};

use super::ban_set::BanSet;

/// One client's recent strikes.
#[derive(Debug, Default)]
pub(super) struct Tracked {
    /// (unix ms, weight), oldest first; at most `strikes` entries since each weighs ≥ 1
    /// and reaching `strikes` clears them.
    pub(super) hits: VecDeque<(u64, u32)>,
    pub(super) sum: u64,
    /// Automatic bans earned so far (the doubling exponent).
    pub(super) auto_bans: u32,
    /// Position in the recency order (`Local::lru`).
    pub(super) touched: u64,
}

/// The embedded store's state. With Redis only the strike table is unused.
#[derive(Debug, Default)]
pub(super) struct Local {
    pub(super) tracked: HashMap<IpAddr, Tracked>,
    /// Recency order of `tracked`: touch counter → client; the first is forgotten first.
    pub(super) lru: BTreeMap<u64, IpAddr>,
    pub(super) touch: u64,
    /// The master copy of the bans; [`super::AbuseRegistry::publish_local`] hands readers a
    /// clone (O(1), shared).
    pub(super) bans: BanSet,
    /// (end, target) of every ban with an end, soonest first: what `tick` expires
    /// without scanning the rest.
    pub(super) ending: BTreeSet<(u64, IpNet)>,
    /// The same for automatic and ban-path bans only: what a new ban displaces when
    /// `abuse.max_bans` are active (operator bans are never displaced).
    pub(super) displaceable: BTreeSet<(u64, IpNet)>,
    /// Newest first, at most [`LOG_CAP`].
    pub(super) log: VecDeque<LogEntry>,
    /// The seq of the next log entry.
    pub(super) next_seq: u64,
}

impl Local {
    pub(super) fn record(&mut self, action: LogAction, ban: &Ban, at_ms: u64) -> u64 {
        let seq = self.next_seq.max(1);
        self.next_seq = seq + 1;
        self.log.push_front(LogEntry {
            seq,
            at_ms,
            action,
            target: ban.target,
            source: ban.source,
            reason: ban.reason.clone(),
            until_ms: if action == LogAction::Banned {
                ban.until_ms
            } else {
                None
            },
        });
        self.log.truncate(LOG_CAP);
        seq
    }

    /// Records and stores a new ban, replacing any on the same target. The caller made
    /// room first ([`Local::make_room`]).
    pub(super) fn add_ban(&mut self, mut ban: Ban, now: u64) -> Arc<Ban> {
        ban.seq = self.record(LogAction::Banned, &ban, now);
        let ban = Arc::new(ban);
        self.put(ban.clone());
        ban
    }

    /// Stores `ban` and its place in the end orders, replacing any on the same target.
    pub(super) fn put(&mut self, ban: Arc<Ban>) {
        if let Some(old) = self.bans.insert(ban.clone()) {
            self.unindex(&old);
        }
        if let Some(until) = ban.until_ms {
            self.ending.insert((until, ban.target));
            if ban.source != BanSource::Admin {
                self.displaceable.insert((until, ban.target));
            }
        }
    }

    /// Removes the ban on exactly `target`.
    pub(super) fn take(&mut self, target: &IpNet) -> Option<Arc<Ban>> {
        let ban = self.bans.remove(target)?;
        self.unindex(&ban);
        Some(ban)
    }

    pub(super) fn unindex(&mut self, ban: &Ban) {
        if let Some(until) = ban.until_ms {
            self.ending.remove(&(until, ban.target));
            self.displaceable.remove(&(until, ban.target));
        }
    }

    /// Makes room for a ban on `target` within `max` active bans: a ban replacing one
    /// on the same target needs none; otherwise, at the cap, the automatic or ban-path
    /// ban that would end soonest is displaced (logged, and returned for its event).
    /// `Err` when every active ban is an operator's: nothing is displaced.
    pub(super) fn make_room(
        &mut self,
        target: &IpNet,
        max: usize,
        now: u64,
    ) -> Result<Vec<Arc<Ban>>, Full> {
        if self.bans.get(target).is_some() {
            return Ok(Vec::new());
        }
        let mut displaced = Vec::new();
        while self.bans.len() >= max {
            let Some(&(_, victim)) = self.displaceable.first() else {
                return Err(Full);
            };
            if let Some(ban) = self.take(&victim) {
                self.record(LogAction::Displaced, &ban, now);
                displaced.push(ban);
            }
        }
        Ok(displaced)
    }

    pub(super) fn saved(&self) -> Saved {
        let mut bans: Vec<Ban> = self.bans.iter().map(|b| (**b).clone()).collect();
        bans.sort_by_key(|b| b.seq);
        Saved {
            version: persist::VERSION,
            next_seq: self.next_seq,
            bans,
            log: self.log.iter().cloned().collect(),
        }
    }
}

/// Every one of `abuse.max_bans` active bans is an operator's.
#[derive(Debug)]
pub(super) struct Full;
