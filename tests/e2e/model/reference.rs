//! The reference model of the queue: its rules for one room written as plainly as possible,
//! from the rules and not from either store, for `model`'s sequences to be checked against.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use anteroom::queue::{Phase, Place, Resolution, RoomSettings, SettingsPatch, VisitorState};

use super::{Case, START_MS, TOUCH_MS};

/// The queue's rules for one room, as plainly as possible: a `Vec` for the line (position = index
/// + 1), a map of sessions, a token bucket.
pub(super) struct Model {
    pub(super) now: u64,
    pub(super) rate: f64,
    pub(super) max_active: u64,
    pub(super) session_ttl: u64,
    pub(super) abandon_after: u64,
    pub(super) paused: bool,
    /// The bucket: tokens as of `refilled`.
    pub(super) tokens: f64,
    pub(super) refilled: u64,
    /// Strict FIFO: (visitor, last recorded heartbeat), head first.
    pub(super) line: Vec<(u8, u64)>,
    /// Admitted sessions: visitor → last recorded activity.
    pub(super) sessions: BTreeMap<u8, u64>,
    pub(super) join_limit: u32,
    pub(super) join_window: u64,
    /// Client → (window start, attempts in it, refusals included).
    pub(super) joins: HashMap<u8, (u64, u32)>,
    pub(super) total_joined: u64,
    pub(super) total_admitted: u64,
    pub(super) total_expired: u64,
    pub(super) total_abandoned: u64,
    pub(super) total_refused: u64,
    /// For [`Coverage`] only.
    pub(super) admitted_by_pass: u64,
    pub(super) resumed_with_a_line: u64,
    pub(super) moved_to_front: u64,
}

/// What a pass did, in the model's terms.
#[derive(Debug, PartialEq)]
pub(super) struct Pass {
    /// In admission order.
    pub(super) admitted: Vec<u8>,
    pub(super) abandoned: BTreeSet<u8>,
    pub(super) expired: BTreeSet<u8>,
}

impl Model {
    pub(super) fn new(case: &Case) -> Self {
        let rate = case.rate;
        Model {
            now: START_MS,
            rate,
            max_active: case.max_active,
            session_ttl: case.session_ttl_s * 1_000,
            abandon_after: case.abandon_after_s * 1_000,
            paused: false,
            // A new room starts with a full bucket (both stores do so).
            tokens: rate.max(1.0),
            refilled: START_MS,
            line: Vec::new(),
            sessions: BTreeMap::new(),
            join_limit: case.join_limit,
            join_window: case.join_window_s * 1_000,
            joins: HashMap::new(),
            total_joined: 0,
            total_admitted: 0,
            total_expired: 0,
            total_abandoned: 0,
            total_refused: 0,
            admitted_by_pass: 0,
            resumed_with_a_line: 0,
            moved_to_front: 0,
        }
    }

    /// Burst: one second's worth, at least 1.
    pub(super) fn burst(&self) -> f64 {
        self.rate.max(1.0)
    }

    /// Refilled at `rate` per second, capped at the burst. The stores credit the bucket
    /// lazily (on a newcomer, a pass, a settings change); because the refill is linear
    /// and capped, crediting at any set of moments gives the same bucket, so the model
    /// credits at the same moments only to get bit-identical floating point.
    pub(super) fn refill(&mut self) {
        let elapsed = self.now.saturating_sub(self.refilled);
        self.tokens = (self.tokens + elapsed as f64 * self.rate / 1000.0).min(self.burst());
        self.refilled = self.refilled.max(self.now);
    }

    pub(super) fn can_admit(&self) -> bool {
        !self.paused && self.tokens >= 1.0 && (self.sessions.len() as u64) < self.max_active
    }

    pub(super) fn place(&self, index: usize) -> Place {
        Place {
            position: Some(index as u64 + 1),
            waiting: self.line.len() as u64,
            paused: self.paused,
            phase: Phase::Queueing,
        }
    }

    pub(super) fn position(&self, v: u8) -> Option<usize> {
        self.line.iter().position(|&(w, _)| w == v)
    }

    /// A waiting visitor is heard (at most once a second, see [`TOUCH_MS`]).
    pub(super) fn hear(&mut self, index: usize) {
        let seen = &mut self.line[index].1;
        if self.now >= *seen + TOUCH_MS {
            *seen = self.now;
        }
    }

    pub(super) fn resolve(&mut self, v: u8, c: u8) -> Resolution {
        if let Some(last) = self.sessions.get_mut(&v) {
            if self.now >= *last + TOUCH_MS {
                *last = self.now;
            }
            return Resolution::Admitted { newly: false };
        }
        if let Some(index) = self.position(v) {
            self.hear(index);
            return Resolution::Waiting {
                place: self.place(index),
                joined: false,
            };
        }
        // A newcomer: the join limit first (refusals count against the window too).
        if self.join_limit > 0 {
            let now = self.now;
            let window = self.join_window;
            let entry = self.joins.entry(c).or_insert((now, 0));
            if entry.1 == 0 || now >= entry.0 + window {
                *entry = (now, 0);
            }
            entry.1 += 1;
            if entry.1 > self.join_limit {
                self.total_refused += 1;
                return Resolution::Refused {
                    reason: anteroom::queue::RefusedReason::JoinLimit,
                    retry_after: Duration::from_millis((entry.0 + window - now).max(1)),
                };
            }
        }
        // Fast path: only when nobody waits and both limits allow; it takes a token.
        self.refill();
        if self.line.is_empty() && self.can_admit() {
            self.tokens -= 1.0;
            self.sessions.insert(v, self.now);
            self.total_admitted += 1;
            return Resolution::Admitted { newly: true };
        }
        // Otherwise the back of the line.
        self.line.push((v, self.now));
        self.total_joined += 1;
        Resolution::Waiting {
            place: self.place(self.line.len() - 1),
            joined: true,
        }
    }

    pub(super) fn heartbeat(&mut self, vs: &[u8]) -> Vec<VisitorState> {
        vs.iter()
            .map(|&v| {
                if self.sessions.contains_key(&v) {
                    VisitorState::Admitted
                } else if let Some(index) = self.position(v) {
                    self.hear(index);
                    VisitorState::Waiting(self.place(index))
                } else {
                    VisitorState::Unknown
                }
            })
            .collect()
    }

    /// One pass: reap idle sessions and abandoned waiters, refill, admit from the head.
    pub(super) fn pass(&mut self) -> Pass {
        let now = self.now;
        let ttl = self.session_ttl;
        let expired: BTreeSet<u8> = self
            .sessions
            .iter()
            .filter(|&(_, &last)| last + ttl <= now)
            .map(|(&v, _)| v)
            .collect();
        self.sessions.retain(|v, _| !expired.contains(v));
        self.total_expired += expired.len() as u64;

        let abandon = self.abandon_after;
        let abandoned: BTreeSet<u8> = self
            .line
            .iter()
            .filter(|&&(_, seen)| seen + abandon <= now)
            .map(|&(v, _)| v)
            .collect();
        self.line.retain(|(v, _)| !abandoned.contains(v));
        self.total_abandoned += abandoned.len() as u64;

        self.refill();
        let mut admitted = Vec::new();
        while !self.line.is_empty() && self.can_admit() {
            let (v, _) = self.line.remove(0);
            self.tokens -= 1.0;
            self.sessions.insert(v, now);
            self.total_admitted += 1;
            self.admitted_by_pass += 1;
            admitted.push(v);
        }
        Pass {
            admitted,
            abandoned,
            expired,
        }
    }

    pub(super) fn update(&mut self, patch: &SettingsPatch) {
        // Tokens earned so far were earned at the old rate.
        self.refill();
        let resuming = self.paused && patch.paused == Some(false);
        if let Some(rate) = patch.rate {
            self.rate = rate;
        }
        if let Some(m) = patch.max_active {
            self.max_active = m;
        }
        if let Some(t) = patch.session_ttl {
            self.session_ttl = t.as_millis() as u64;
        }
        if let Some(a) = patch.abandon_after {
            self.abandon_after = a.as_millis() as u64;
        }
        if let Some(p) = patch.paused {
            self.paused = p;
        }
        self.tokens = self.tokens.min(self.burst());
        if resuming && !self.line.is_empty() {
            self.resumed_with_a_line += 1;
        }
        if resuming {
            // A resume starts admitting again with an empty bucket: paused time earns
            // no tokens, so a resume never lets a burst in.
            self.tokens = 0.0;
        }
    }

    /// A waiting visitor goes to position 1 (a later move goes ahead of an
    /// earlier one), nobody else's order changes, and the move counts as hearing from them.
    /// Anyone not waiting (on the site, gone, unknown) is not moved.
    pub(super) fn front(&mut self, v: u8) -> Option<Place> {
        let index = self.position(v)?;
        self.line.remove(index);
        self.line.insert(0, (v, self.now));
        self.moved_to_front += 1;
        Some(self.place(0))
    }

    pub(super) fn flush(&mut self) -> u64 {
        let n = self.line.len() as u64;
        self.line.clear();
        n
    }

    pub(super) fn stats(&self) -> (u64, u64, [u64; 5], RoomSettings) {
        (
            self.line.len() as u64,
            self.sessions.len() as u64,
            [
                self.total_joined,
                self.total_admitted,
                self.total_expired,
                self.total_abandoned,
                self.total_refused,
            ],
            RoomSettings {
                rate: self.rate,
                max_active: self.max_active,
                session_ttl: Duration::from_millis(self.session_ttl),
                abandon_after: Duration::from_millis(self.abandon_after),
                paused: self.paused,
                mode: anteroom::queue::Mode::Queue,
                changes: Default::default(),
            },
        )
    }
}
