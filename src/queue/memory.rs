//! The embedded store: every room's line, bucket, sessions, settings and counters in this
//! process, one mutex per room, snapshotted to `data_dir` so a restart loses no one's place.
//!
//! One mutex per room (not a single-writer task) because every operation is a few
//! microseconds of map work with no await inside; a task would add a channel hop to each.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::fenwick::RankIndex;
use super::{
    AdaptiveState, ClientKey, DrawRecord, GrantUse, Join, OriginExchange, OriginReport, PassReport,
    Phase, Place, QueueQuery, QueueStore, REAP_BUDGET, RefusedReason, Resolution, RoomPolicy,
    RoomSettings, RoomStats, SHARE_RETRY_AFTER, Seeded, SettingsPatch, StoreError, StoreResult,
    VisitorId, VisitorRef, VisitorState, WaitingEntry,
};
use crate::clock::{Clock, ms};
use crate::fairness::draw::DrawHash;

/// Heartbeats and session activity closer together than this do not move the visitor in
/// the time indexes: abandonment and reclaim are measured in seconds, and skipping the
/// re-index keeps a crowd of impatient clients cheap.
const TOUCH_GRANULARITY_MS: u64 = 1_000;

const SNAPSHOT_FILE: &str = "queue.snapshot";

/// Opens a snapshot in the current layout. Ten 0xff bytes are not a valid postcard varint,
/// so no snapshot of the first layout (which started with one) can be mistaken for it.
const SNAPSHOT_MAGIC: &[u8] = b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xffanteroom-snapshot-3";
/// The second layout: as the third, without the drawn entrants' hashes.
const SNAPSHOT_MAGIC_V2: &[u8] = b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xffanteroom-snapshot-2";

pub struct MemoryStore {
    clock: Clock,
    rooms: RwLock<HashMap<String, Arc<Mutex<Room>>>>,
    /// Where snapshots go; `None` keeps everything in memory only.
    data_dir: Option<PathBuf>,
    /// Spent priority-grant nonces per room. Not snapshotted: a grant is short-lived, and
    /// a restart of the one embedded replica is rare next to a grant's minutes.
    grants: Mutex<HashMap<String, SpentGrants>>,
}

/// The spent nonces of one room until their expiry: a bounded map pruned by expiry.
#[derive(Default)]
struct SpentGrants {
    by_nonce: HashMap<String, (u64, VisitorId)>,
    by_expiry: BTreeSet<(u64, String)>,
}

/// Spent nonces one room remembers at once. Past it, new grants are refused until some
/// expire (fail closed: a nonce is never forgotten before its expiry, so never replayable).
/// Only grants signed with `priority_secret` get this far, so only the site can fill it.
pub const MAX_SPENT_GRANTS: usize = 200_000;

impl SpentGrants {
    fn spend(&mut self, nonce: &str, visitor: VisitorId, expires_at_ms: u64, now: u64) -> GrantUse {
        while let Some((at, _)) = self.by_expiry.first()
            && *at <= now
        {
            if let Some((_, n)) = self.by_expiry.pop_first() {
                self.by_nonce.remove(&n);
            }
        }
        if let Some(&(_, by)) = self.by_nonce.get(nonce) {
            return if by == visitor {
                GrantUse::Again
            } else {
                GrantUse::Taken
            };
        }
        if expires_at_ms <= now || self.by_nonce.len() >= MAX_SPENT_GRANTS {
            return GrantUse::Taken;
        }
        self.by_nonce
            .insert(nonce.to_owned(), (expires_at_ms, visitor));
        self.by_expiry.insert((expires_at_ms, nonce.to_owned()));
        GrantUse::Fresh
    }
}

impl MemoryStore {
    /// A store that keeps nothing on disk.
    pub fn in_memory(clock: Clock) -> Self {
        MemoryStore {
            clock,
            rooms: RwLock::default(),
            data_dir: None,
            grants: Mutex::default(),
        }
    }

    /// A store persisted in `data_dir`, restoring the last snapshot if there is one.
    pub fn open(clock: Clock, data_dir: &Path) -> StoreResult<Self> {
        crate::fsutil::private_dir(data_dir).map_err(|e| {
            StoreError::Unavailable(format!("cannot create {}: {e}", data_dir.display()))
        })?;
        let path = data_dir.join(SNAPSHOT_FILE);
        let now = clock.now_ms();
        let rooms = match std::fs::read(&path) {
            Ok(bytes) => {
                let snapshot = decode_snapshot(&bytes).map_err(|e| {
                    StoreError::Unavailable(format!(
                        "snapshot {} is unreadable ({e}); move it aside to start empty",
                        path.display()
                    ))
                })?;
                snapshot
                    .rooms
                    .into_iter()
                    .map(|(name, room)| (name, Arc::new(Mutex::new(Room::restore(room, now)))))
                    .collect()
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => HashMap::new(),
            Err(e) => {
                return Err(StoreError::Unavailable(format!(
                    "cannot read {}: {e}",
                    path.display()
                )));
            }
        };
        Ok(MemoryStore {
            clock,
            rooms: RwLock::new(rooms),
            data_dir: Some(data_dir.to_owned()),
            grants: Mutex::default(),
        })
    }

    fn room(&self, name: &str) -> StoreResult<Arc<Mutex<Room>>> {
        self.rooms
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(name)
            .cloned()
            .ok_or_else(|| StoreError::UnknownRoom(name.to_owned()))
    }

    /// Runs `f` on the room under its lock, with the store's current time.
    fn with_room<T>(&self, name: &str, f: impl FnOnce(&mut Room, u64) -> T) -> StoreResult<T> {
        let room = self.room(name)?;
        let mut room = room.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        Ok(f(&mut room, self.clock.now_ms()))
    }

    fn snapshot(&self) -> Snapshot {
        let rooms = self
            .rooms
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .map(|(name, room)| (name.clone(), room.clone()))
            .collect::<Vec<_>>();
        Snapshot {
            rooms: rooms
                .into_iter()
                .map(|(name, room)| {
                    let room = room.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                    (name, room.snapshot())
                })
                .collect(),
        }
    }
}

#[async_trait]
impl QueueStore for MemoryStore {
    async fn open_room(
        &self,
        name: &str,
        seed: &RoomSettings,
        policy: &RoomPolicy,
        reseed: bool,
    ) -> StoreResult<Seeded> {
        seed.validate()?;
        let now = self.clock.now_ms();
        let mut rooms = self
            .rooms
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some(room) = rooms.get(name) else {
            let mut room = Room::new(seed.clone(), now);
            room.policy = policy.clone();
            rooms.insert(name.to_owned(), Arc::new(Mutex::new(room)));
            return Ok(Seeded::Fresh);
        };
        let mut room = room.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // The policy is config: the file always wins. The salt stays.
        room.policy = policy.clone();
        Ok(room.reseed(seed, reseed))
    }

    async fn resolve_with(
        &self,
        room: &str,
        visitor: VisitorId,
        client: ClientKey,
        join: Join,
    ) -> StoreResult<Resolution> {
        self.with_room(room, |room, now| room.resolve(visitor, client, join, now))
    }

    async fn queue(&self, room: &str, query: QueueQuery) -> StoreResult<Vec<WaitingEntry>> {
        self.with_room(room, |room, now| {
            room.phase(now);
            room.queue(query)
        })?
    }

    async fn move_to_front(&self, room: &str, reference: VisitorRef) -> StoreResult<Place> {
        self.with_room(room, |room, now| {
            let phase = room.phase(now);
            let visitor = room.find(reference)?.visitor;
            room.move_front(visitor, now, phase)
                .ok_or(StoreError::NotWaiting(reference))
        })?
    }

    async fn end_session(&self, room: &str, visitor: VisitorId) -> StoreResult<bool> {
        self.with_room(room, |room, _| room.drop_session(visitor))
    }

    async fn spend_grant(
        &self,
        room: &str,
        nonce: &str,
        visitor: VisitorId,
        expires_at_ms: u64,
    ) -> StoreResult<GrantUse> {
        // Only known rooms remember nonces, like every other operation.
        self.room(room)?;
        let now = self.clock.now_ms();
        let mut grants = self.grants.lock().unwrap_or_else(|p| p.into_inner());
        Ok(grants
            .entry(room.to_owned())
            .or_default()
            .spend(nonce, visitor, expires_at_ms, now))
    }

    async fn touch_sessions(&self, room: &str, visitors: &[VisitorId]) -> StoreResult<Vec<bool>> {
        self.with_room(room, |room, now| {
            visitors
                .iter()
                .map(|&v| room.touch_session(v, now))
                .collect()
        })
    }

    async fn heartbeat(
        &self,
        room: &str,
        visitors: &[VisitorId],
    ) -> StoreResult<Vec<VisitorState>> {
        self.with_room(room, |room, now| {
            visitors.iter().map(|&v| room.heartbeat(v, now)).collect()
        })
    }

    async fn admit_pass(&self, room: &str) -> StoreResult<PassReport> {
        self.with_room(room, |room, now| room.admit_pass(now))
    }

    async fn stats(&self, room: &str) -> StoreResult<RoomStats> {
        self.with_room(room, |room, _| room.stats())
    }

    async fn draw(&self, room: &str, hashes: bool) -> StoreResult<DrawRecord> {
        self.with_room(room, |room, now| room.draw_record(now, hashes))
    }

    async fn update_settings(
        &self,
        room: &str,
        patch: &SettingsPatch,
    ) -> StoreResult<RoomSettings> {
        self.with_room(room, |room, now| {
            let next = room.settings.patched(patch)?;
            // Credit the bucket at the old rate up to now, so a rate change applies only
            // from this moment on.
            room.refill(now);
            let resuming = room.settings.paused && !next.paused;
            room.settings = next.clone();
            room.tokens = room.tokens.min(room.burst());
            if resuming {
                // SPEC §3: a resume starts with an empty bucket; paused time earns nothing.
                room.tokens = 0.0;
            }
            Ok(next)
        })?
    }

    async fn flush(&self, room: &str) -> StoreResult<u64> {
        self.with_room(room, |room, _| room.flush())
    }

    async fn exchange_origin(
        &self,
        room: &str,
        replica: &str,
        report: &OriginReport,
    ) -> StoreResult<OriginExchange> {
        use crate::fairness::adaptive::{CLAIM_EVERY_MS, REPORT_STALE_MS};
        self.with_room(room, |room, now| {
            room.origin_reports
                .insert(replica.to_owned(), (now, report.clone()));
            room.origin_reports
                .retain(|_, (at, _)| now.saturating_sub(*at) <= REPORT_STALE_MS);
            // A claim from the future (a clock stepped back) is void too.
            let decide = room
                .adaptive_claim_ms
                .is_none_or(|at| at > now || now - at >= CLAIM_EVERY_MS);
            if decide {
                room.adaptive_claim_ms = Some(now);
            }
            OriginExchange {
                now_ms: now,
                configured_rate: room.settings.rate,
                decide,
                state: room.adaptive.clone(),
                reports: room.origin_reports.values().cloned().collect(),
            }
        })
    }

    async fn set_adaptive(&self, room: &str, state: Option<&AdaptiveState>) -> StoreResult<()> {
        self.with_room(room, |room, now| {
            // Tokens earned so far at the old rate are kept; the new one applies from now.
            room.refill(now);
            room.adaptive = state.cloned();
            if state.is_none() {
                room.adaptive_claim_ms = None;
                room.origin_reports.clear();
            }
            room.tokens = room.tokens.min(room.burst());
        })
    }

    async fn ping(&self) -> StoreResult<()> {
        Ok(())
    }

    async fn persist(&self) -> StoreResult<()> {
        let Some(dir) = self.data_dir.clone() else {
            return Ok(());
        };
        let snapshot = self.snapshot();
        tokio::task::spawn_blocking(move || write_snapshot(&dir, &snapshot))
            .await
            .map_err(|e| StoreError::Unavailable(format!("snapshot task failed: {e}")))?
    }

    fn clock(&self) -> Option<Clock> {
        Some(self.clock.clone())
    }
}

/// Writes the snapshot atomically (exclusive no-follow temporary file, fsync, rename) with
/// mode 0600, through [`crate::fsutil::write_atomic`].
fn write_snapshot(dir: &Path, snapshot: &Snapshot) -> StoreResult<()> {
    let fail = |what: &str, e: std::io::Error| {
        StoreError::Unavailable(format!("snapshot {what} in {}: {e}", dir.display()))
    };
    let mut bytes = SNAPSHOT_MAGIC.to_vec();
    postcard::to_io(snapshot, &mut bytes)
        .map_err(|e| StoreError::Unavailable(format!("snapshot encoding failed: {e}")))?;
    crate::fsutil::write_atomic(dir, SNAPSHOT_FILE, &bytes).map_err(|e| fail("write", e))?;
    Ok(())
}

/// A waiting visitor: their ticket, when the store last heard from them, when they took
/// their place, and the client they joined from (for `max_places_per_client`; `None` when
/// restored from a snapshot, which does not keep clients).
#[derive(Clone, Copy, Debug)]
struct Waiter {
    ticket: u64,
    seen_ms: u64,
    joined_ms: u64,
    client: Option<ClientKey>,
}

/// A lottery draw entrant (no ticket until the doors open).
#[derive(Clone, Copy, Debug)]
struct Entrant {
    seen_ms: u64,
    client: Option<ClientKey>,
}

/// An admitted session: last activity and the distinct clients it has been used from, the
/// first of which its session share is charged to (empty until its first request when
/// admitted from the line, or after a restore).
#[derive(Clone, Debug)]
struct Session {
    last_ms: u64,
    clients: Vec<ClientKey>,
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
}

/// Per-client counts (places in line, sessions on the site); an entry is removed when its
/// count drops to zero, so the map holds only clients that hold something.
#[derive(Default)]
struct ClientCounts(HashMap<ClientKey, u32>);

impl ClientCounts {
    fn get(&self, client: ClientKey) -> u32 {
        self.0.get(&client).copied().unwrap_or(0)
    }

    fn add(&mut self, client: Option<ClientKey>) {
        if let Some(client) = client {
            *self.0.entry(client).or_insert(0) += 1;
        }
    }

    fn remove(&mut self, client: Option<ClientKey>) {
        if let Some(client) = client
            && let Some(n) = self.0.get_mut(&client)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.0.remove(&client);
            }
        }
    }
}

struct Room {
    settings: RoomSettings,
    policy: RoomPolicy,
    /// Keys the lottery's hash; generated with the room, kept in the snapshot, never
    /// replaced.
    salt: [u8; 16],
    tokens: f64,
    refilled_ms: u64,
    next_ticket: u64,
    waiters: HashMap<VisitorId, Waiter>,
    /// The line in ticket order; the head is the first entry (after the front lane).
    line: BTreeMap<u64, VisitorId>,
    /// The front lane, ahead of the whole line: lane counter → visitor. The newest move is
    /// position 1, so the lane's head is its *last* entry. Its own rank index keeps
    /// positions O(log n) (ranks count from the oldest; a position is counted from the
    /// newest).
    front: BTreeMap<u64, VisitorId>,
    front_ranks: RankIndex,
    next_front: u64,
    /// Waiters by last heartbeat, oldest first, for abandonment.
    by_seen: BTreeSet<(u64, u64)>,
    ranks: RankIndex,
    /// A lottery draw being collected. Entrants have no ticket until the doors open; then
    /// the whole draw is issued tickets in the order of its [`DrawHash`]es, in one go (the
    /// permutation is O(draw) once, and afterwards the line is ordered by ticket alone, so
    /// the Fenwick index stays as it was).
    draw: HashMap<VisitorId, Entrant>,
    /// Draw entrants by last heartbeat, oldest first, for abandonment.
    draw_by_seen: BTreeSet<(u64, VisitorId)>,
    /// The last draw's entrants' hashes, ascending (the order they were drawn in), fixed
    /// when the doors opened: the published list of SPEC §14. Empty before.
    drawn: Vec<DrawHash>,
    /// Admitted sessions.
    sessions: HashMap<VisitorId, Session>,
    /// Sessions by last activity, oldest first, for reclaim.
    by_activity: BTreeSet<(u64, VisitorId)>,
    /// Places in line (the draw included) per client they joined from.
    places: ClientCounts,
    /// Sessions per client they are charged to.
    session_counts: ClientCounts,
    joins: JoinWindows,
    counters: Counters,
    /// Closed-loop admission (SPEC §14): the controller's state, whose effective rate caps
    /// the bucket. Not snapshotted: after a restart the controller starts afresh at the
    /// configured rate, with a new window of observations.
    adaptive: Option<AdaptiveState>,
    adaptive_claim_ms: Option<u64>,
    /// Each replica's latest report and when it came (several replicas share this store
    /// only in tests, but the rules are the Redis store's).
    origin_reports: HashMap<String, (u64, OriginReport)>,
}

impl Room {
    fn new(settings: RoomSettings, now: u64) -> Self {
        let mut salt = [0u8; 16];
        getrandom::fill(&mut salt).expect("the operating system's random generator failed");
        Room {
            tokens: settings.burst(),
            settings,
            policy: RoomPolicy::default(),
            salt,
            refilled_ms: now,
            next_ticket: 0,
            waiters: HashMap::new(),
            line: BTreeMap::new(),
            front: BTreeMap::new(),
            front_ranks: RankIndex::default(),
            next_front: 0,
            by_seen: BTreeSet::new(),
            ranks: RankIndex::default(),
            draw: HashMap::new(),
            draw_by_seen: BTreeSet::new(),
            drawn: Vec::new(),
            sessions: HashMap::new(),
            by_activity: BTreeSet::new(),
            places: ClientCounts::default(),
            session_counts: ClientCounts::default(),
            joins: JoinWindows::default(),
            counters: Counters::default(),
            adaptive: None,
            adaptive_claim_ms: None,
            origin_reports: HashMap::new(),
        }
    }

    fn reseed(&mut self, seed: &RoomSettings, reseed: bool) -> Seeded {
        let live = &self.settings;
        let differs = live.rate != seed.rate
            || live.max_active != seed.max_active
            || live.session_ttl != seed.session_ttl
            || live.abandon_after != seed.abandon_after;
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
                Seeded::Reseeded
            }
        }
    }

    fn refill(&mut self, now: u64) {
        let elapsed = now.saturating_sub(self.refilled_ms);
        self.tokens = (self.tokens + elapsed as f64 * self.rate() / 1000.0).min(self.burst());
        self.refilled_ms = self.refilled_ms.max(now);
    }

    /// The rate the bucket refills at: the configured one, capped by the closed-loop
    /// controller's effective rate when it has one (SPEC §14).
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
        !self.settings.paused
            && self.tokens >= 1.0
            && (self.sessions.len() as u64) < self.settings.max_active
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
        for (_, visitor, e) in entrants {
            let ticket = self.next_ticket;
            self.next_ticket += 1;
            // The draw's places move to the line: uncount, then count again.
            self.places.remove(e.client);
            self.enter_line(visitor, ticket, e.seen_ms, now, e.client);
        }
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
        let phase = self.phase(now);
        if self.sessions.contains_key(&visitor) {
            return self.session_request(visitor, client, now);
        }
        if join == Join::Front && phase != Phase::Closed {
            if let Some(place) = self.move_front(visitor, now, phase) {
                return Resolution::Waiting {
                    place,
                    joined: false,
                };
            }
        } else if let Some(place) = self.heartbeat_waiter(visitor, now, phase) {
            if phase == Phase::Closed {
                return Resolution::Closed;
            }
            return Resolution::Waiting {
                place,
                joined: false,
            };
        }
        match phase {
            Phase::BeforeOpen => return Resolution::NotOpen,
            Phase::Closed => return Resolution::Closed,
            Phase::Draw | Phase::Queueing => {}
        }
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
            if self.waiting() == 0 && self.can_admit() {
                self.tokens -= 1.0;
                self.start_session(visitor, now, Some(client));
                return Resolution::Admitted { newly: true };
            }
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
        if join == Join::Front {
            let ticket = FRONT | self.next_front;
            self.next_front += 1;
            self.enter_line(visitor, ticket, now, now, Some(client));
            return Resolution::Waiting {
                place: self.place_of(ticket, phase),
                joined: true,
            };
        }
        if phase == Phase::Draw && self.policy.lottery {
            // Collected, never admitted on the spot.
            self.draw.insert(
                visitor,
                Entrant {
                    seen_ms: now,
                    client: Some(client),
                },
            );
            self.draw_by_seen.insert((now, visitor));
            self.places.add(Some(client));
            return Resolution::Waiting {
                place: self.draw_place(phase),
                joined: true,
            };
        }
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.enter_line(visitor, ticket, now, now, Some(client));
        Resolution::Waiting {
            place: self.place_of(ticket, phase),
            joined: true,
        }
    }

    /// Moves a waiting visitor (in line, in the front lane, or in a lottery draw) to
    /// position 1. `None` when they are not waiting.
    fn move_front(&mut self, visitor: VisitorId, now: u64, phase: Phase) -> Option<Place> {
        let (seen_ms, client) = if let Some(w) = self.leave_line(visitor) {
            (now.max(w.seen_ms), w.client)
        } else if let Some(e) = self.draw.remove(&visitor) {
            self.draw_by_seen.remove(&(e.seen_ms, visitor));
            self.places.remove(e.client);
            (now.max(e.seen_ms), e.client)
        } else {
            return None;
        };
        let ticket = FRONT | self.next_front;
        self.next_front += 1;
        self.enter_line(visitor, ticket, seen_ms, now, client);
        Some(self.place_of(ticket, phase))
    }

    fn heartbeat(&mut self, visitor: VisitorId, now: u64) -> VisitorState {
        let phase = self.phase(now);
        if self.sessions.contains_key(&visitor) {
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
        let waiter = self.waiters.get_mut(&visitor)?;
        if now >= waiter.seen_ms + TOUCH_GRANULARITY_MS {
            self.by_seen.remove(&(waiter.seen_ms, waiter.ticket));
            waiter.seen_ms = now;
            self.by_seen.insert((now, waiter.ticket));
        }
        let ticket = waiter.ticket;
        Some(self.place_of(ticket, phase))
    }

    fn waiting(&self) -> u64 {
        (self.line.len() + self.front.len() + self.draw.len()) as u64
    }

    /// A ticket's position: the front lane (newest first), then the line.
    fn position_of(&self, ticket: u64) -> u64 {
        let front = self.front.len() as u64;
        if ticket & FRONT != 0 {
            (front + 1).saturating_sub(self.front_ranks.rank(ticket & !FRONT))
        } else {
            front + self.ranks.rank(ticket)
        }
    }

    fn place_of(&self, ticket: u64, phase: Phase) -> Place {
        Place {
            position: Some(self.position_of(ticket)),
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

    /// Puts a waiter into every index of the line (or of the front lane) and counts their
    /// place against their client.
    fn enter_line(
        &mut self,
        visitor: VisitorId,
        ticket: u64,
        seen_ms: u64,
        joined_ms: u64,
        client: Option<ClientKey>,
    ) {
        self.waiters.insert(
            visitor,
            Waiter {
                ticket,
                seen_ms,
                joined_ms,
                client,
            },
        );
        if ticket & FRONT != 0 {
            self.front.insert(ticket & !FRONT, visitor);
            self.front_ranks.insert(ticket & !FRONT);
        } else {
            self.line.insert(ticket, visitor);
            self.ranks.insert(ticket);
        }
        self.by_seen.insert((seen_ms, ticket));
        self.places.add(client);
    }

    /// Takes a waiter out of every index of the line, freeing their client's place.
    fn leave_line(&mut self, visitor: VisitorId) -> Option<Waiter> {
        let waiter = self.waiters.remove(&visitor)?;
        if waiter.ticket & FRONT != 0 {
            self.front.remove(&(waiter.ticket & !FRONT));
            self.front_ranks.remove(waiter.ticket & !FRONT);
        } else {
            self.line.remove(&waiter.ticket);
            self.ranks.remove(waiter.ticket);
        }
        self.by_seen.remove(&(waiter.seen_ms, waiter.ticket));
        self.places.remove(waiter.client);
        Some(waiter)
    }

    /// The visitor holding `ticket` (line or front lane).
    fn at_ticket(&self, ticket: u64) -> Option<VisitorId> {
        if ticket & FRONT != 0 {
            self.front.get(&(ticket & !FRONT)).copied()
        } else {
            self.line.get(&ticket).copied()
        }
    }

    /// The head of the line: the newest of the front lane, else the first ticket.
    fn head(&self) -> Option<VisitorId> {
        self.front
            .last_key_value()
            .or_else(|| self.line.first_key_value())
            .map(|(_, &v)| v)
    }

    fn start_session(&mut self, visitor: VisitorId, now: u64, client: Option<ClientKey>) {
        self.session_counts.add(client);
        self.sessions.insert(
            visitor,
            Session {
                last_ms: now,
                clients: client.into_iter().collect(),
            },
        );
        self.by_activity.insert((now, visitor));
        self.counters.total_admitted += 1;
    }

    /// Removes a session from every index, freeing its client's share.
    fn drop_session(&mut self, visitor: VisitorId) -> bool {
        let Some(session) = self.sessions.remove(&visitor) else {
            return false;
        };
        self.by_activity.remove(&(session.last_ms, visitor));
        self.session_counts.remove(session.clients.first().copied());
        true
    }

    fn touch_session(&mut self, visitor: VisitorId, now: u64) -> bool {
        let Some(session) = self.sessions.get_mut(&visitor) else {
            return false;
        };
        if now >= session.last_ms + TOUCH_GRANULARITY_MS {
            self.by_activity.remove(&(session.last_ms, visitor));
            session.last_ms = now;
            self.by_activity.insert((now, visitor));
        }
        true
    }

    fn admit_pass(&mut self, now: u64) -> PassReport {
        let phase = self.phase(now);
        let mut report = PassReport::default();

        let ttl = ms(self.settings.session_ttl);
        for (last, visitor) in due(&self.by_activity, ttl, now, REAP_BUDGET) {
            self.drop_session(visitor);
            // Never loop on an index entry without its session.
            self.by_activity.remove(&(last, visitor));
            report.expired.push(visitor);
        }
        self.counters.total_expired += report.expired.len() as u64;

        let abandon_after = ms(self.settings.abandon_after);
        for (seen, ticket) in due(&self.by_seen, abandon_after, now, REAP_BUDGET) {
            self.by_seen.remove(&(seen, ticket));
            if let Some(visitor) = self.at_ticket(ticket) {
                self.leave_line(visitor);
                report.abandoned.push(visitor);
            }
        }
        let budget = REAP_BUDGET - report.abandoned.len();
        for (seen, visitor) in due(&self.draw_by_seen, abandon_after, now, budget) {
            self.draw_by_seen.remove(&(seen, visitor));
            if let Some(e) = self.draw.remove(&visitor) {
                self.places.remove(e.client);
            }
            report.abandoned.push(visitor);
        }
        self.counters.total_abandoned += report.abandoned.len() as u64;
        self.joins
            .prune(now, ms(self.policy.join_limit_window), REAP_BUDGET);

        self.refill(now);
        // Before the doors and after closing, nobody is admitted.
        while phase == Phase::Queueing && self.can_admit() {
            let Some(visitor) = self.head() else {
                break;
            };
            self.leave_line(visitor);
            self.tokens -= 1.0;
            // Charged to the client it is first used from (see `session_request`).
            self.start_session(visitor, now, None);
            report.admitted.push(visitor);
        }
        report
    }

    fn entry(&self, visitor: VisitorId, w: &Waiter) -> WaitingEntry {
        WaitingEntry {
            visitor,
            reference: visitor.reference(),
            position: Some(self.position_of(w.ticket)),
            joined_at_ms: Some(w.joined_ms),
            last_seen_ms: w.seen_ms,
        }
    }

    fn queue(&self, query: QueueQuery) -> StoreResult<Vec<WaitingEntry>> {
        match query {
            QueueQuery::Head { limit } => Ok(self
                .front
                .values()
                .rev()
                .chain(self.line.values())
                .take(limit.min(QueueQuery::MAX_LIMIT))
                .filter_map(|v| self.waiters.get(v).map(|w| self.entry(*v, w)))
                .collect()),
            QueueQuery::Ref(reference) => self.find(reference).map(|e| vec![e]),
        }
    }

    /// The waiting visitor with `reference`: the one nearest the head if two share it.
    /// O(waiting), admin-only.
    fn find(&self, reference: VisitorRef) -> StoreResult<WaitingEntry> {
        let in_line = self
            .waiters
            .iter()
            .filter(|(v, _)| reference.matches(v))
            .map(|(&v, w)| self.entry(v, w))
            .min_by_key(|e| e.position);
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

    fn stats(&self) -> RoomStats {
        let c = self.counters;
        RoomStats {
            waiting: self.waiting(),
            active: self.sessions.len() as u64,
            total_joined: c.total_joined,
            total_admitted: c.total_admitted,
            total_expired: c.total_expired,
            total_abandoned: c.total_abandoned,
            total_refused: c.total_refused,
            settings: self.settings.clone(),
        }
    }

    /// The lottery record (SPEC §14); the doors open here too if their time has come.
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
        self.waiters.clear();
        self.line.clear();
        self.front.clear();
        self.front_ranks.clear(self.next_front);
        self.by_seen.clear();
        self.ranks.clear(self.next_ticket);
        self.draw.clear();
        self.draw_by_seen.clear();
        self.places = ClientCounts::default();
        removed
    }

    fn snapshot(&self) -> RoomSnapshot {
        RoomSnapshot {
            settings: self.settings.clone(),
            tokens: self.tokens,
            next_ticket: self.next_ticket,
            // The front lane rides in the line with its marker bit, so the layout stays.
            line: self
                .front
                .iter()
                .map(|(&c, &v)| (FRONT | c, v))
                .chain(self.line.iter().map(|(&t, &v)| (t, v)))
                .collect(),
            sessions: self.sessions.keys().copied().collect(),
            counters: self.counters,
            salt: self.salt,
            draw: self.draw.keys().copied().collect(),
            drawn: self.drawn.iter().map(|h| h.0).collect(),
        }
    }

    /// Rebuilds a room from its snapshot. Everyone restored counts as seen `now`: the time
    /// the process was down must not abandon the line or reclaim the site. The policy
    /// comes back when the room is opened. Clients are not in the snapshot: restored
    /// places and sessions count against no client's share.
    fn restore(snapshot: RoomSnapshot, now: u64) -> Self {
        let mut room = Room::new(snapshot.settings, now);
        room.salt = snapshot.salt;
        room.drawn = snapshot.drawn.into_iter().map(DrawHash).collect();
        room.tokens = snapshot.tokens.min(room.settings.burst());
        room.counters = snapshot.counters;
        let first_ticket = snapshot
            .line
            .iter()
            .find(|&&(t, _)| t & FRONT == 0)
            .map_or(snapshot.next_ticket, |&(t, _)| t);
        room.ranks = RankIndex::starting_at(first_ticket);
        let front = snapshot.line.iter().filter(|&&(t, _)| t & FRONT != 0);
        let first_front = front.clone().map(|&(t, _)| t & !FRONT).min().unwrap_or(0);
        room.next_front = front.map(|&(t, _)| (t & !FRONT) + 1).max().unwrap_or(0);
        room.front_ranks = RankIndex::starting_at(first_front);
        for (ticket, visitor) in snapshot.line {
            room.enter_line(visitor, ticket, now, now, None);
        }
        room.next_ticket = snapshot.next_ticket;
        for visitor in snapshot.sessions {
            room.sessions.insert(
                visitor,
                Session {
                    last_ms: now,
                    clients: Vec::new(),
                },
            );
            room.by_activity.insert((now, visitor));
        }
        for visitor in snapshot.draw {
            room.draw.insert(
                visitor,
                Entrant {
                    seen_ms: now,
                    client: None,
                },
            );
            room.draw_by_seen.insert((now, visitor));
        }
        room
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

/// The join limit's fixed windows, one per client key that tried to join recently.
/// Bounded: an entry lives one window, and passes prune expired ones oldest first, so
/// the map never holds more than the keys seen in the last window.
#[derive(Default)]
struct JoinWindows {
    /// Client → (window start, attempts in it, refusals included).
    windows: HashMap<ClientKey, (u64, u32)>,
    /// (window start, client) in start order, for pruning.
    starts: VecDeque<(u64, ClientKey)>,
}

impl JoinWindows {
    /// Charges one attempt to `client`'s window: `Err(ms left in the window)` when it is
    /// over `limit`.
    fn charge(&mut self, client: ClientKey, now: u64, limit: u32, window: u64) -> Result<(), u64> {
        let entry = self.windows.entry(client).or_insert((now, 0));
        if entry.1 == 0 || now >= entry.0 + window {
            *entry = (now, 0);
            self.starts.push_back((now, client));
        }
        entry.1 = entry.1.saturating_add(1);
        if entry.1 > limit {
            Err((entry.0 + window).saturating_sub(now).max(1))
        } else {
            Ok(())
        }
    }

    /// Forgets windows that are over, at most `budget` of them.
    fn prune(&mut self, now: u64, window: u64, budget: usize) {
        for _ in 0..budget {
            match self.starts.front() {
                Some(&(start, client)) if start + window <= now => {
                    self.starts.pop_front();
                    if self.windows.get(&client).is_some_and(|w| w.0 == start) {
                        self.windows.remove(&client);
                    }
                }
                _ => break,
            }
        }
    }
}

/// Reads a snapshot of either layout.
fn decode_snapshot(bytes: &[u8]) -> Result<Snapshot, postcard::Error> {
    if let Some(current) = bytes.strip_prefix(SNAPSHOT_MAGIC) {
        return postcard::from_bytes(current);
    }
    if let Some(v2) = bytes.strip_prefix(SNAPSHOT_MAGIC_V2) {
        let v2: SnapshotV2 = postcard::from_bytes(v2)?;
        return Ok(Snapshot {
            rooms: v2
                .rooms
                .into_iter()
                .map(|(name, r)| {
                    let room = RoomSnapshot {
                        settings: r.settings,
                        tokens: r.tokens,
                        next_ticket: r.next_ticket,
                        line: r.line,
                        sessions: r.sessions,
                        counters: r.counters,
                        salt: r.salt,
                        draw: r.draw,
                        drawn: Vec::new(),
                    };
                    (name, room)
                })
                .collect(),
        });
    }
    // The first layout: no salt (a fresh one is drawn) and no draw.
    let legacy: LegacySnapshot = postcard::from_bytes(bytes)?;
    Ok(Snapshot {
        rooms: legacy
            .rooms
            .into_iter()
            .map(|(name, r)| {
                let mut salt = [0u8; 16];
                getrandom::fill(&mut salt).expect("the operating system's random generator failed");
                let room = RoomSnapshot {
                    settings: r.settings,
                    tokens: r.tokens,
                    next_ticket: r.next_ticket,
                    line: r.line,
                    sessions: r.sessions,
                    counters: r.counters,
                    salt,
                    draw: Vec::new(),
                    drawn: Vec::new(),
                };
                (name, room)
            })
            .collect(),
    })
}

#[derive(Serialize, Deserialize)]
struct Snapshot {
    rooms: Vec<(String, RoomSnapshot)>,
}

#[derive(Serialize, Deserialize)]
struct RoomSnapshot {
    settings: RoomSettings,
    tokens: f64,
    next_ticket: u64,
    /// (ticket, visitor) in line order.
    line: Vec<(u64, VisitorId)>,
    sessions: Vec<VisitorId>,
    counters: Counters,
    salt: [u8; 16],
    /// A lottery draw still being collected (no tickets yet).
    draw: Vec<VisitorId>,
    /// The last draw's hashes, ascending (see `Room::drawn`).
    drawn: Vec<[u8; 32]>,
}

/// The second layout: before the drawn entrants' hashes were kept.
#[derive(Deserialize)]
struct SnapshotV2 {
    rooms: Vec<(String, RoomSnapshotV2)>,
}

#[derive(Deserialize)]
struct RoomSnapshotV2 {
    settings: RoomSettings,
    tokens: f64,
    next_ticket: u64,
    line: Vec<(u64, VisitorId)>,
    sessions: Vec<VisitorId>,
    counters: Counters,
    salt: [u8; 16],
    draw: Vec<VisitorId>,
}

/// The snapshot layout before rooms had a salt and a draw.
#[derive(Deserialize)]
struct LegacySnapshot {
    rooms: Vec<(String, LegacyRoomSnapshot)>,
}

#[derive(Deserialize)]
struct LegacyRoomSnapshot {
    settings: RoomSettings,
    tokens: f64,
    next_ticket: u64,
    line: Vec<(u64, VisitorId)>,
    sessions: Vec<VisitorId>,
    counters: Counters,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::conformance::{self, Harness};
    use std::time::Duration;

    struct MemoryHarness {
        store: Arc<MemoryStore>,
        dir: tempfile::TempDir,
    }

    impl MemoryHarness {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let store = Arc::new(
                MemoryStore::open(Clock::starting_at(conformance::START_MS), dir.path()).unwrap(),
            );
            MemoryHarness { store, dir }
        }
    }

    #[async_trait]
    impl Harness for MemoryHarness {
        type Store = MemoryStore;
        fn store(&self) -> Arc<MemoryStore> {
            self.store.clone()
        }
        async fn advance(&self, by: Duration) {
            tokio::time::advance(by).await;
        }
        async fn reopen(&mut self, downtime: Duration) {
            self.store.persist().await.unwrap();
            let clock = Clock::starting_at(self.store.clock.now_ms() + downtime.as_millis() as u64);
            self.store = Arc::new(MemoryStore::open(clock, self.dir.path()).unwrap());
        }
    }

    conformance::suite!(MemoryHarness::new());

    /// Spent grant nonces are bounded and forgotten at their expiry; when full, new grants
    /// are refused rather than an unexpired nonce forgotten (which would make it replayable).
    #[test]
    fn spent_grants_are_bounded_and_pruned_by_expiry() {
        let mut spent = SpentGrants::default();
        let v = VisitorId::random();
        for i in 0..MAX_SPENT_GRANTS {
            let expiry = if i < 10 { 1_000 } else { 10_000 };
            assert_eq!(spent.spend(&format!("n{i}"), v, expiry, 0), GrantUse::Fresh);
        }
        assert_eq!(spent.spend("one-more", v, 10_000, 0), GrantUse::Taken);
        assert_eq!(spent.spend("n5", v, 1_000, 0), GrantUse::Again);
        // The first ten expire at 1 s: room for ten more, and they are forgotten.
        assert_eq!(spent.spend("one-more", v, 10_000, 1_000), GrantUse::Fresh);
        assert_eq!(spent.by_nonce.len(), MAX_SPENT_GRANTS - 9);
        assert_eq!(spent.by_expiry.len(), spent.by_nonce.len());
        assert!(!spent.by_nonce.contains_key("n5"));
        assert_eq!(
            spent.spend("n11", v, 10_000, 10_000),
            GrantUse::Taken,
            "expired"
        );
        assert!(spent.by_nonce.is_empty() && spent.by_expiry.is_empty());
    }

    /// The per-client maps hold only clients that hold something (bounded memory).
    #[tokio::test(start_paused = true)]
    async fn client_counts_are_forgotten_at_zero() {
        let h = MemoryHarness::new();
        conformance::fill_client_counts(h.store.as_ref()).await;
        let sizes = || {
            let room = h.store.room("main").unwrap();
            let room = room.lock().unwrap();
            (room.places.0.len(), room.session_counts.0.len())
        };
        assert_eq!(sizes(), (300, 20));
        tokio::time::advance(Duration::from_secs(61)).await;
        h.store.admit_pass("main").await.unwrap();
        assert_eq!(sizes(), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn snapshot_file_is_private() {
        let h = MemoryHarness::new();
        h.store.persist().await.unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(h.dir.path().join(SNAPSHOT_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_snapshot_of_the_first_layout_still_opens() {
        #[derive(Serialize)]
        struct V1 {
            rooms: Vec<(String, V1Room)>,
        }
        #[derive(Serialize)]
        struct V1Room {
            settings: RoomSettings,
            tokens: f64,
            next_ticket: u64,
            line: Vec<(u64, VisitorId)>,
            sessions: Vec<VisitorId>,
            counters: Counters,
        }
        let dir = tempfile::tempdir().unwrap();
        let line = vec![(7, VisitorId::random()), (9, VisitorId::random())];
        let v1 = V1 {
            rooms: vec![(
                "main".to_owned(),
                V1Room {
                    settings: conformance::settings(1.0, 10),
                    tokens: 0.0,
                    next_ticket: 10,
                    line: line.clone(),
                    sessions: vec![],
                    counters: Counters::default(),
                },
            )],
        };
        std::fs::write(
            dir.path().join(SNAPSHOT_FILE),
            postcard::to_stdvec(&v1).unwrap(),
        )
        .unwrap();
        let store = MemoryStore::open(Clock::starting_at(0), dir.path()).unwrap();
        let states = store
            .heartbeat("main", &[line[0].1, line[1].1])
            .await
            .unwrap();
        assert!(matches!(states[1], VisitorState::Waiting(p) if p.position == Some(2)));
        // And it is written back in the current layout.
        store.persist().await.unwrap();
        let bytes = std::fs::read(dir.path().join(SNAPSHOT_FILE)).unwrap();
        assert!(bytes.starts_with(SNAPSHOT_MAGIC));
    }

    #[tokio::test]
    async fn a_corrupt_snapshot_is_a_clear_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(SNAPSHOT_FILE), b"\xff\xff\xff garbage").unwrap();
        let err = MemoryStore::open(Clock::system(), dir.path())
            .err()
            .unwrap();
        assert!(err.to_string().contains("unreadable"), "{err}");
    }
}
