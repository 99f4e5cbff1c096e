//! The embedded store: every room's line, bucket, sessions, settings and counters in this
//! process, one mutex per room, snapshotted to `data_dir` so a restart loses no one's place.
//!
//! One mutex per room (not a single-writer task) because every operation is a few
//! microseconds of map work with no await inside; a task would add a channel hop to each.
//!
//! This file owns one room's logic ([`Room`]: the bucket, the schedule and the draw, joins,
//! heartbeats, passes, sessions, the per-client shares), at the store's time and without
//! I/O. The rest, by concern:
//! - [`store`]: [`MemoryStore`], the rooms by name behind their mutexes, and the
//!   [`QueueStore`](super::QueueStore) operations on them;
//! - [`snapshot`]: persistence, the snapshot written from the live rooms and read back in
//!   any of its three formats;
//! - [`line`](mod@line) and [`sessions`]: the waiting line and the admitted sessions, laid out as
//!   below;
//! - [`clients`]: what a room counts per client (places, sessions, join windows);
//! - `tests`: the store's own tests (the conformance suite runs on it from there too).
//!
//! # Why the line is an array
//!
//! A line of a million must stay small and must not make a pass slower than at a thousand.
//! Ordered maps do both badly: a waiter in a hash map, a `BTreeMap` by ticket, a
//! `BTreeSet` by last seen and a Fenwick slot costs about 220 bytes, and each admission
//! walks three trees. Tickets only grow, so the line is an array of fixed 40-byte slots in
//! chunks instead, with a Fenwick tree per chunk for positions, a table of 4-byte handles
//! for visitor → place, and one linked list through the slots in last-seen order for
//! abandonment: about 50 bytes a waiter, and a pass that takes its heads from one warm
//! chunk. The layout itself is `line`'s module documentation. The snapshot is written
//! straight from this state in the same format as ever; a restore numbers each lane's
//! tickets afresh, which keeps every order. Sessions (`sessions::Sessions`) are built the
//! same way: a slab, a table of 4-byte entry numbers under the same hash, and an activity
//! list through the entries instead of a `BTreeSet` by last activity. Draw entrants are
//! fewer and keep plain maps.

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use super::{
    AdaptiveState, ChallengeSpend, ClientKey, DrawRecord, GrantUse, Join, Mode, OriginReport,
    PassReport, Phase, Place, QueueQuery, REAP_BUDGET, RefusedReason, Resolution, RoomPolicy,
    RoomSettings, RoomStats, SHARE_RETRY_AFTER, Seeded, Spent, StoreError, StoreResult, VisitorId,
    VisitorRef, VisitorState, WaitingEntry,
};
use crate::clock::ms;
use crate::fairness::draw::DrawHash;
use clients::{ClientCounts, ClientRef, JoinWindows};
use line::{LaneKind, NewPlace, WaitingLine};
use sessions::{Lengths, Sessions};
use store::{IdKey, SpentGrants};

/// Heartbeats and session activity closer together than this do not move the visitor in
/// the time indexes: abandonment and reclaim are measured in seconds, and skipping the
/// re-index keeps a crowd of impatient clients cheap.
const TOUCH_GRANULARITY_MS: u64 = 1_000;

mod clients;
mod line;
mod reap;
mod sessions;
mod snapshot;
mod store;
#[cfg(test)]
mod tests;

pub use store::{MAX_SPENT_CHALLENGES, MAX_SPENT_GRANTS, MemoryStore};

/// The hash of the embedded store's visitor tables (the line's index, the sessions).
/// Visitor ids are random (the store mints them), so a folded multiply of the two halves
/// with per-room random keys spreads them well, at a fraction of SipHash's cost.
#[derive(Clone, Copy)]
struct IdHash([u64; 2]);

impl IdHash {
    fn random() -> IdHash {
        let mut seed = [0u8; 16];
        getrandom::fill(&mut seed).expect("the operating system's random generator failed");
        IdHash([
            u64::from_le_bytes(seed[..8].try_into().expect("8 bytes")),
            u64::from_le_bytes(seed[8..].try_into().expect("8 bytes")) | 1,
        ])
    }

    fn of(&self, visitor: &VisitorId) -> u64 {
        let (lo, hi) = visitor.0.split_at(8);
        let lo = u64::from_le_bytes(lo.try_into().expect("8 bytes")) ^ self.0[0];
        let hi = u64::from_le_bytes(hi.try_into().expect("8 bytes")) ^ self.0[1];
        let m = u128::from(lo).wrapping_mul(u128::from(hi));
        (m as u64) ^ ((m >> 64) as u64)
    }
}

/// A lottery draw entrant (no ticket until the doors open), and the client whose place
/// they hold.
#[derive(Clone, Copy, Debug)]
struct Entrant {
    seen_ms: u64,
    client: ClientRef,
}

/// Marks a ticket of the front lane (moved to the front or a priority join): the rest of
/// the bits are the lane's own counter. Line tickets never come near 2^63.
const FRONT: u64 = 1 << 63;

#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
struct Counters {
    total_joined: u64,
    total_admitted: u64,
    total_expired: u64,
    total_abandoned: u64,
    total_refused: u64,
    /// Admissions the passthrough mode made (a snapshot without it counted none).
    #[serde(default)]
    total_passed_through: u64,
}

struct Room {
    settings: RoomSettings,
    /// The policy in force: the file's ([`Room::file_policy`]) with the operator's changes
    /// ([`RoomSettings::changes`]); kept in step by [`Room::set_policy`].
    policy: RoomPolicy,
    /// The policy the file gave at the last open.
    file_policy: RoomPolicy,
    /// Keys the lottery's hash; generated with the room, kept in the snapshot, never
    /// replaced.
    salt: [u8; 16],
    tokens: f64,
    refilled_ms: u64,
    /// The line and the front lane ahead of it (the newest move is position 1), with
    /// their index and seen order: see [`line`](mod@line).
    line: WaitingLine,
    /// A lottery draw being collected. Entrants have no ticket until the doors open; then
    /// the whole draw is issued tickets in the order of its [`DrawHash`]es, in one go (the
    /// permutation is O(draw) once, and afterwards the line is ordered by ticket alone, so
    /// the Fenwick index stays as it was).
    draw: HashMap<VisitorId, Entrant>,
    /// Draw entrants by last heartbeat, oldest first, for abandonment.
    draw_by_seen: BTreeSet<(u64, VisitorId)>,
    /// The last draw's entrants' hashes, ascending (the order they were drawn in), fixed
    /// when the doors opened: the published list (docs/fairness.md). Empty before.
    drawn: Vec<DrawHash>,
    /// Admitted sessions, with their order of last activity for reclaim.
    sessions: Sessions,
    /// The lengths of the latest sessions to end. Not snapshotted: a restored session's
    /// start is unknown, and the ETA waits for new ones.
    lengths: Lengths,
    /// Places in line (the draw included) per client they joined from.
    places: ClientCounts,
    /// Sessions per client they are charged to.
    session_counts: ClientCounts,
    joins: JoinWindows,
    counters: Counters,
    /// Closed-loop admission (docs/fairness.md): the controller's state, whose effective
    /// rate caps the bucket. Not snapshotted: after a restart the controller starts afresh
    /// at the configured rate, with a new window of observations.
    adaptive: Option<AdaptiveState>,
    adaptive_claim_ms: Option<u64>,
    /// Each replica's latest report and when it came (several replicas share this store
    /// only in tests, but the rules are the Redis store's).
    origin_reports: HashMap<String, (u64, OriginReport)>,
    /// The spent challenge ids until their expiry (bounded by
    /// [`store::MAX_SPENT_CHALLENGES`]), kept with the room so a join spends under the
    /// room's own lock. Not snapshotted: a challenge lives five minutes.
    challenges: SpentGrants<IdKey>,
    /// How many of each kind the next pass may reap: [`REAP_BUDGET`], doubled after every
    /// pass that used all of it (up to [`reap::MAX_REAP_BUDGET`]). Not snapshotted.
    reap_budget: usize,
}

impl Room {
    fn new(settings: RoomSettings, now: u64) -> Self {
        let mut salt = [0u8; 16];
        getrandom::fill(&mut salt).expect("the operating system's random generator failed");
        Room {
            tokens: settings.burst(),
            settings,
            policy: RoomPolicy::default(),
            file_policy: RoomPolicy::default(),
            salt,
            refilled_ms: now,
            line: WaitingLine::new(),
            draw: HashMap::new(),
            draw_by_seen: BTreeSet::new(),
            drawn: Vec::new(),
            sessions: Sessions::new(),
            lengths: Lengths::default(),
            places: ClientCounts::default(),
            session_counts: ClientCounts::default(),
            joins: JoinWindows::default(),
            counters: Counters::default(),
            adaptive: None,
            adaptive_claim_ms: None,
            origin_reports: HashMap::new(),
            challenges: SpentGrants::default(),
            reap_budget: REAP_BUDGET,
        }
    }

    fn reseed(&mut self, seed: &RoomSettings, reseed: bool) -> Seeded {
        let live = &self.settings;
        let differs = live.rate != seed.rate
            || live.max_active != seed.max_active
            || live.session_ttl != seed.session_ttl
            || live.abandon_after != seed.abandon_after
            || live.mode != seed.mode
            || live.changes != seed.changes;
        match (differs, reseed) {
            (false, _) => Seeded::Unchanged,
            (true, false) => Seeded::KeptLive(self.settings.clone()),
            (true, true) => {
                // `paused` is an incident control, not a file value: a reseed keeps it.
                self.settings = RoomSettings {
                    paused: self.settings.paused,
                    ..seed.clone()
                };
                self.tokens = self.tokens.min(self.burst());
                self.apply_policy();
                Seeded::Reseeded
            }
        }
    }

    /// The file's policy from an open of the room, with the live changes applied.
    fn set_policy(&mut self, file: &RoomPolicy) {
        self.file_policy = file.clone();
        self.apply_policy();
    }

    /// The policy in force again after the settings' changes moved.
    fn apply_policy(&mut self) {
        self.policy = self.settings.changes.policy(&self.file_policy);
    }

    fn refill(&mut self, now: u64) {
        let elapsed = now.saturating_sub(self.refilled_ms);
        self.tokens = (self.tokens + elapsed as f64 * self.rate() / 1000.0).min(self.burst());
        self.refilled_ms = self.refilled_ms.max(now);
    }

    /// The rate the bucket refills at: the configured one, capped by the closed-loop
    /// controller's effective rate when it has one.
    fn rate(&self) -> f64 {
        match &self.adaptive {
            Some(a) if a.effective_rate.is_finite() && a.effective_rate > 0.0 => {
                self.settings.rate.min(a.effective_rate)
            }
            _ => self.settings.rate,
        }
    }

    /// One second's worth of [`Room::rate`], at least one (as [`RoomSettings::burst`]).
    fn burst(&self) -> f64 {
        self.rate().max(1.0)
    }

    fn can_admit(&self) -> bool {
        self.passthrough()
            || (!self.settings.paused
                && self.tokens >= 1.0
                && (self.sessions.len() as u64) < self.settings.max_active)
    }

    /// Whether the passthrough mode lets everybody in, whatever the limits.
    fn passthrough(&self) -> bool {
        self.settings.mode == Mode::Passthrough
    }

    /// The schedule's phase now, opening the doors on a collected draw once it is over:
    /// every operation starts here, so nobody can take a ticket ahead of the draw.
    fn phase(&mut self, now: u64) -> Phase {
        let phase = self.policy.phase_at(now);
        if !self.draw.is_empty() && matches!(phase, Phase::Queueing | Phase::Closed) {
            self.open_doors(now);
        }
        phase
    }

    /// Issues the draw tickets in lottery order (the published one: draw hashes
    /// ascending), behind everyone already in line and ahead of everyone who comes after.
    /// Their place dates from the doors. The sorted hashes are kept as the draw's record.
    fn open_doors(&mut self, now: u64) {
        let mut entrants: Vec<(DrawHash, VisitorId, Entrant)> = self
            .draw
            .drain()
            .map(|(v, e)| (DrawHash::of(&self.salt, v), v, e))
            .collect();
        self.draw_by_seen.clear();
        entrants.sort_unstable_by_key(|&(hash, v, _)| (hash, v));
        self.drawn = entrants.iter().map(|&(hash, _, _)| hash).collect();
        // The draw's places move to the line with their clients' counts.
        let places = entrants
            .into_iter()
            .map(|(_, visitor, e)| NewPlace {
                visitor,
                seen_ms: e.seen_ms,
                joined_ms: now,
                client: e.client,
            })
            .collect();
        self.line.join_all(LaneKind::Line, places);
    }

    /// Why a newcomer from `client` is refused a share, if they are.
    fn share_refusal(&self, client: ClientKey) -> Option<RefusedReason> {
        let p = &self.policy;
        if p.max_places_per_client > 0 && self.places.get(client) >= p.max_places_per_client {
            return Some(RefusedReason::PlacesPerClient);
        }
        if p.max_sessions_per_client > 0
            && self.session_counts.get(client) >= p.max_sessions_per_client
        {
            return Some(RefusedReason::SessionsPerClient);
        }
        None
    }

    /// A request of a visitor on the site from `client`: remembers the client among the
    /// session's first `session_clients`, or refuses it.
    fn session_request(&mut self, visitor: VisitorId, client: ClientKey, now: u64) -> Resolution {
        let cap = self.policy.session_clients as usize;
        let Some(session) = self.sessions.get_mut(&visitor) else {
            return Resolution::Admitted { newly: false };
        };
        if !session.clients.contains(&client) {
            if session.clients.is_empty() {
                // The first client the session is used from carries its share.
                self.session_counts.add(Some(client));
                session.clients.push(client);
            } else if cap == 0 {
                // No cap: nothing to remember beyond the first.
            } else if session.clients.len() >= cap {
                return Resolution::Refused {
                    reason: RefusedReason::SessionClients,
                    retry_after: SHARE_RETRY_AFTER,
                };
            } else {
                session.clients.push(client);
            }
        }
        self.touch_session(visitor, now);
        Resolution::Admitted { newly: false }
    }

    fn resolve(
        &mut self,
        visitor: VisitorId,
        client: ClientKey,
        join: Join,
        now: u64,
    ) -> Resolution {
        match self.known(visitor, client, join, now) {
            Ok(resolution) => resolution,
            Err(_) if join == Join::Known => Resolution::Newcomer,
            Err(phase) => self.join_newcomer(visitor, client, join, phase, now),
        }
    }

    /// [`Room::resolve`] for the answer to a challenge: a newcomer spends `challenge`'s id
    /// first, under the same lock (see `QueueStore::resolve_spending`).
    fn resolve_spending(
        &mut self,
        visitor: VisitorId,
        client: ClientKey,
        challenge: ChallengeSpend<'_>,
        now: u64,
    ) -> Spent {
        let phase = match self.known(visitor, client, Join::Back, now) {
            Ok(resolution) => return Spent::Resolved(resolution),
            Err(phase) => phase,
        };
        let spent = self.challenges.spend_within(
            challenge.id,
            visitor,
            challenge.expires_at_ms,
            now,
            store::MAX_SPENT_CHALLENGES,
        );
        if spent == GrantUse::Taken {
            return Spent::Replayed;
        }
        Spent::Resolved(self.join_newcomer(visitor, client, Join::Back, phase, now))
    }

    /// The part of [`Room::resolve`] about who the store already has, and the schedule:
    /// `Ok` for a visitor on the site or waiting, or when the schedule lets no newcomer in
    /// (not open, closed); `Err` with the phase for a newcomer who may join.
    fn known(
        &mut self,
        visitor: VisitorId,
        client: ClientKey,
        join: Join,
        now: u64,
    ) -> Result<Resolution, Phase> {
        let phase = self.phase(now);
        if self.sessions.contains(&visitor) {
            return Ok(self.session_request(visitor, client, now));
        }
        if join == Join::Front && phase != Phase::Closed {
            if let Some(place) = self.move_front(visitor, now, phase) {
                return Ok(Resolution::Waiting {
                    place,
                    joined: false,
                });
            }
        } else if let Some(place) = self.heartbeat_waiter(visitor, now, phase) {
            if phase == Phase::Closed {
                return Ok(Resolution::Closed);
            }
            return Ok(Resolution::Waiting {
                place,
                joined: false,
            });
        }
        match phase {
            Phase::BeforeOpen => Ok(Resolution::NotOpen),
            Phase::Closed => Ok(Resolution::Closed),
            Phase::Draw | Phase::Queueing => Err(phase),
        }
    }

    /// The rest of [`Room::resolve`] for a newcomer in `phase` (the line open or the draw):
    /// the join limit, the shares, the fast path, the breaker, then a place.
    fn join_newcomer(
        &mut self,
        visitor: VisitorId,
        client: ClientKey,
        join: Join,
        phase: Phase,
        now: u64,
    ) -> Resolution {
        if self.policy.limits_joins()
            && let Err(retry_after_ms) = self.joins.charge(
                client,
                now,
                self.policy.join_limit_per_ip,
                ms(self.policy.join_limit_window),
            )
        {
            self.counters.total_refused += 1;
            return Resolution::Refused {
                reason: RefusedReason::JoinLimit,
                retry_after: std::time::Duration::from_millis(retry_after_ms),
            };
        }
        if let Some(reason) = self.share_refusal(client) {
            self.counters.total_refused += 1;
            return Resolution::Refused {
                reason,
                retry_after: SHARE_RETRY_AFTER,
            };
        }
        if phase == Phase::Queueing {
            self.refill(now);
            // In passthrough, newcomers go in on the spot even with a line (drained by the
            // next pass).
            if (self.waiting() == 0 || self.passthrough()) && self.can_admit() {
                self.spend_token();
                self.start_session(visitor, now, Some(client));
                return Resolution::Admitted { newly: true };
            }
        }
        if join == Join::Now {
            return Resolution::Newcomer;
        }
        // The breaker; the fast path above only runs with nobody waiting, so it is never
        // affected.
        if join == Join::Back
            && self.policy.max_waiting > 0
            && self.waiting() >= self.policy.max_waiting
        {
            self.counters.total_refused += 1;
            return Resolution::Full;
        }
        self.counters.total_joined += 1;
        if phase == Phase::Draw && self.policy.lottery && join != Join::Front {
            // Collected, never admitted on the spot.
            let client = self.places.add(Some(client));
            self.draw.insert(
                visitor,
                Entrant {
                    seen_ms: now,
                    client,
                },
            );
            self.draw_by_seen.insert((now, visitor));
            return Resolution::Waiting {
                place: self.draw_place(phase),
                joined: true,
            };
        }
        let lane = if join == Join::Front {
            LaneKind::Front
        } else {
            LaneKind::Line
        };
        let client = self.places.add(Some(client));
        let place = self.line.join(
            lane,
            NewPlace {
                visitor,
                seen_ms: now,
                joined_ms: now,
                client,
            },
        );
        Resolution::Waiting {
            place: self.place_of(place, phase),
            joined: true,
        }
    }

    /// Moves a waiting visitor (in line, in the front lane, or in a lottery draw) to
    /// position 1. `None` when they are not waiting.
    fn move_front(&mut self, visitor: VisitorId, now: u64, phase: Phase) -> Option<Place> {
        // The place moves with its client's count.
        let (seen_ms, client) = if let Some(w) = self.line.leave(visitor) {
            (now.max(w.seen_ms()), w.client)
        } else if let Some(e) = self.draw.remove(&visitor) {
            self.draw_by_seen.remove(&(e.seen_ms, visitor));
            (now.max(e.seen_ms), e.client)
        } else {
            return None;
        };
        let place = self.line.join(
            LaneKind::Front,
            NewPlace {
                visitor,
                seen_ms,
                joined_ms: now,
                client,
            },
        );
        Some(self.place_of(place, phase))
    }

    fn heartbeat(&mut self, visitor: VisitorId, now: u64) -> VisitorState {
        let phase = self.phase(now);
        if self.sessions.contains(&visitor) {
            return VisitorState::Admitted;
        }
        match self.heartbeat_waiter(visitor, now, phase) {
            Some(place) => VisitorState::Waiting(place),
            None => VisitorState::Unknown,
        }
    }

    /// A waiting visitor's place (in line or in the draw), recording that they are still
    /// there.
    fn heartbeat_waiter(&mut self, visitor: VisitorId, now: u64, phase: Phase) -> Option<Place> {
        if let Some(e) = self.draw.get_mut(&visitor) {
            if now >= e.seen_ms + TOUCH_GRANULARITY_MS {
                self.draw_by_seen.remove(&(e.seen_ms, visitor));
                e.seen_ms = now;
                self.draw_by_seen.insert((now, visitor));
            }
            return Some(self.draw_place(phase));
        }
        let place = self.line.touch(visitor, now, TOUCH_GRANULARITY_MS)?;
        Some(self.place_of(place, phase))
    }

    fn waiting(&self) -> u64 {
        (self.line.len() + self.draw.len()) as u64
    }

    fn place_of(&self, place: line::Handle, phase: Phase) -> Place {
        Place {
            position: Some(self.line.position(place)),
            waiting: self.waiting(),
            paused: self.settings.paused,
            phase,
        }
    }

    /// A draw entrant's place: none until the doors open.
    fn draw_place(&self, phase: Phase) -> Place {
        Place {
            position: None,
            waiting: self.waiting(),
            paused: self.settings.paused,
            phase,
        }
    }

    fn start_session(&mut self, visitor: VisitorId, now: u64, client: Option<ClientKey>) {
        // Callers start sessions only for visitors without one; were one there, its
        // client's share must not be counted twice.
        // Passthrough has no line to estimate for: its sessions go untimed.
        let timed = !self.passthrough();
        if self
            .sessions
            .insert(visitor, now, client.into_iter().collect(), timed)
        {
            self.session_counts.add(client);
        }
        self.counters.total_admitted += 1;
        if self.passthrough() {
            self.counters.total_passed_through += 1;
        }
    }

    /// Spends a token for an admission; the passthrough mode admits without one and never
    /// takes the bucket below empty.
    fn spend_token(&mut self) {
        self.tokens = (self.tokens - 1.0).max(0.0);
    }

    /// Removes a session from every index, freeing its client's share.
    fn drop_session(&mut self, visitor: VisitorId, now: u64) -> bool {
        let Some(session) = self.sessions.remove(&visitor) else {
            return false;
        };
        self.session_counts.remove(session.clients.first().copied());
        self.lengths.ended(&session, now);
        true
    }

    fn touch_session(&mut self, visitor: VisitorId, now: u64) -> bool {
        self.sessions.touch(&visitor, now, TOUCH_GRANULARITY_MS)
    }

    fn admit_pass(&mut self, now: u64) -> PassReport {
        let phase = self.phase(now);
        let mut report = PassReport::default();

        self.reap(now, &mut report);
        self.joins
            .prune(now, ms(self.policy.join_limit_window), REAP_BUDGET);

        self.refill(now);
        // Before the doors and after closing, nobody is admitted.
        if phase == Phase::Queueing {
            // How many `can_admit` lets in, counted the way admitting them spends it, so
            // the line gives them up in one batch (see `WaitingLine::take_heads`).
            let (mut tokens, mut active, mut n) = (self.tokens, self.sessions.len() as u64, 0);
            if self.passthrough() {
                // The whole line, a budget's worth a pass.
                n = self.line.len().min(REAP_BUDGET);
            }
            while n < self.line.len()
                && !self.passthrough()
                && !self.settings.paused
                && tokens >= 1.0
                && active < self.settings.max_active
            {
                tokens -= 1.0;
                active += 1;
                n += 1;
            }
            for w in self.line.take_heads(n) {
                self.places.release(w.client);
                self.spend_token();
                // Charged to the client it is first used from (see `session_request`).
                self.start_session(w.visitor, now, None);
                report.admitted.push(w.visitor);
                report.joined_ms.push(Some(w.joined_ms()));
            }
        }
        report
    }

    fn entry(&self, place: line::Handle, w: &line::Slot, position: Option<u64>) -> WaitingEntry {
        WaitingEntry {
            visitor: w.visitor,
            reference: w.visitor.reference(),
            position: Some(position.unwrap_or_else(|| self.line.position(place))),
            joined_at_ms: Some(w.joined_ms()),
            last_seen_ms: w.seen_ms(),
        }
    }

    fn queue(&self, query: QueueQuery) -> StoreResult<Vec<WaitingEntry>> {
        match query {
            QueueQuery::Head { limit } => Ok(self
                .line
                .in_order()
                .take(limit.min(QueueQuery::MAX_LIMIT))
                .enumerate()
                .map(|(i, (place, w))| self.entry(place, w, Some(i as u64 + 1)))
                .collect()),
            QueueQuery::Ref(reference) => self.find(reference).map(|e| vec![e]),
        }
    }

    /// The waiting visitor with `reference`: the one nearest the head if two share it.
    /// O(waiting), admin-only.
    fn find(&self, reference: VisitorRef) -> StoreResult<WaitingEntry> {
        let in_line = self
            .line
            .in_order()
            .find(|(_, w)| reference.matches(&w.visitor))
            .map(|(place, w)| self.entry(place, w, None));
        if let Some(entry) = in_line {
            return Ok(entry);
        }
        self.draw
            .iter()
            .find(|(v, _)| reference.matches(v))
            .map(|(&visitor, e)| WaitingEntry {
                visitor,
                reference,
                position: None,
                joined_at_ms: None,
                last_seen_ms: e.seen_ms,
            })
            .ok_or(StoreError::NotWaiting(reference))
    }

    fn stats(&self, now: u64) -> RoomStats {
        let c = self.counters;
        RoomStats {
            waiting: self.waiting(),
            active: self.sessions.len() as u64,
            total_joined: c.total_joined,
            total_admitted: c.total_admitted,
            total_expired: c.total_expired,
            total_abandoned: c.total_abandoned,
            total_refused: c.total_refused,
            total_passed_through: c.total_passed_through,
            schedule: self.policy.phase_at(now),
            settings: self.settings.clone(),
            ended_sessions: self.lengths.summary(),
        }
    }

    /// The lottery record; the doors open here too if their time has come.
    fn draw_record(&mut self, now: u64, hashes: bool) -> DrawRecord {
        let phase = self.phase(now);
        let mut record = DrawRecord {
            salt: self.salt.to_vec(),
            phase,
            entrants: self.draw.len() as u64,
            hashes: None,
        };
        if record.doors_open() {
            record.entrants = self.drawn.len() as u64;
            record.hashes = hashes.then(|| self.drawn.clone());
        }
        record
    }

    fn flush(&mut self) -> u64 {
        let removed = self.waiting();
        self.line.clear();
        self.draw.clear();
        self.draw_by_seen.clear();
        self.places.clear();
        removed
    }
}

/// A draw entrant's lottery score: the first 8 bytes of SHA-256(salt ‖ visitor id), i.e.
/// of their [`DrawHash`]. The same visitor always gets the same score (so leaving and
/// rejoining the draw changes nothing), and without the salt nobody can predict or pick a
/// good one. The draw itself is ordered by the whole hash (the published rule).
pub fn lottery_score(salt: &[u8; 16], visitor: VisitorId) -> u64 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new()
        .chain_update(salt)
        .chain_update(visitor.0)
        .finalize();
    u64::from_be_bytes(digest[..8].try_into().expect("SHA-256 has 32 bytes"))
}
