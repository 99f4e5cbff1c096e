//! The embedded store: every room's line, bucket, sessions, settings and counters in this
//! process, one mutex per room, snapshotted to `data_dir` so a restart loses no one's place.
//!
//! One mutex per room (not a single-writer task) because every operation is a few
//! microseconds of map work with no await inside; a task would add a channel hop to each.
//!
//! # The line's layout (issue 14: a line that fits in cache)
//!
//! A line of a million must stay small and must not make a pass slower than at a thousand.
//! Ordered maps do both badly: every waiter was a hash map entry, a `BTreeMap` entry by
//! ticket, a `BTreeSet` entry by last seen and a Fenwick slot (~220 bytes, and each
//! admission walked three trees). Tickets only grow, so the line is an array instead
//! (`line::WaitingLine`, in `memory/line.rs`):
//!
//! - **Slots by ticket.** Each lane (the line, and the front lane ahead of it) is its
//!   consecutive tickets in chunks of 1024 fixed 40-byte slots: visitor id (16), last seen
//!   and joined as 48-bit unix ms (6 + 6), the client as a 4-byte number (`ClientCounts`
//!   numbers the clients that hold places) and two 4-byte links. A live bitmap per chunk
//!   marks who is still there; leaving is a tombstone, a chunk whose tickets have all left
//!   frees its slots, dead chunks at the head are dropped. Memory follows the live line
//!   plus the holes in partly emptied chunks.
//! - **Positions.** A Fenwick tree of live counts per *chunk* (a few KiB at a million) plus
//!   a popcount inside the chunk: O(log n), as DESIGN asks, with a tree that stays in L1.
//! - **Visitor → place.** A `hashbrown::HashTable` of 4-byte handles (lane bit + ticket
//!   bits), hashed by a keyed multiply of the random id; equality is checked against the
//!   slot, so the id is not stored twice. About 5–10 bytes a waiter.
//! - **Abandonment.** One doubly linked list in last-seen order threaded through the slots.
//!   Joins and heartbeats happen at the store's now, which never goes back, so they append
//!   at the newest end (a heartbeat unlinks and appends: O(1)); only the draw's entrants,
//!   moving to the line when the doors open, are merged in by their own times, in one walk.
//!   A pass pops the oldest end while it is due, bounded by [`REAP_BUDGET`]: exactly the
//!   visitors the old by-seen index gave, with no tree.
//! - **A pass** takes the heads in one batch (the head chunk is warm) and leaves their
//!   index entries behind as stale ones, which a lookup tells from live ones by the slot;
//!   joins sweep them out in one sequential walk over the table once they are an eighth of
//!   it. Removing each from a table of millions was a cache miss per admitted visitor,
//!   the one cost of a pass that grew with the line.
//!
//! About 50 bytes a waiter in all (40 slot, 5–10 index, under 1 of chunk bookkeeping).
//! The snapshot is written straight from this state (no copy of the line) in the same
//! layout as before; a restore numbers each lane's tickets afresh, which keeps every order.
//! Sessions (`sessions::Sessions`) are built the same way: a slab, a table of 4-byte entry
//! numbers under the same hash, and an activity list through the entries in place of a
//! `BTreeSet` by last activity, whose insert was most of a pass. Draw entrants are fewer
//! and keep plain maps.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::{
    AdaptiveState, ClientKey, DrawRecord, GrantUse, Join, OriginExchange, OriginReport, PassReport,
    Phase, Place, QueueQuery, QueueStore, REAP_BUDGET, RefusedReason, Resolution, RoomPolicy,
    RoomSettings, RoomStats, SHARE_RETRY_AFTER, Seeded, SettingsPatch, StoreError, StoreResult,
    VisitorId, VisitorRef, VisitorState, WaitingEntry,
};
use crate::clock::{Clock, ms};
use crate::fairness::draw::DrawHash;
use line::{LaneKind, NewPlace, WaitingLine};
use sessions::Sessions;

/// Heartbeats and session activity closer together than this do not move the visitor in
/// the time indexes: abandonment and reclaim are measured in seconds, and skipping the
/// re-index keeps a crowd of impatient clients cheap.
const TOUCH_GRANULARITY_MS: u64 = 1_000;

mod line;
mod sessions;

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

    fn rooms(&self) -> Vec<(String, Arc<Mutex<Room>>)> {
        self.rooms
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .map(|(name, room)| (name.clone(), room.clone()))
            .collect()
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
        let rooms = self.rooms();
        tokio::task::spawn_blocking(move || write_snapshot(&dir, &rooms))
            .await
            .map_err(|e| StoreError::Unavailable(format!("snapshot task failed: {e}")))?
    }

    fn clock(&self) -> Option<Clock> {
        Some(self.clock.clone())
    }
}

/// Writes the snapshot atomically (exclusive no-follow temporary file, fsync, rename) with
/// mode 0600, through [`crate::fsutil::write_atomic_with`]. Each room is encoded straight
/// from its live state into the file under its lock in turn (see [`LiveSnapshot`]): no
/// copy of a line of millions is made, so a snapshot costs no memory beyond a buffer. The
/// fsync and rename come after every lock is released.
fn write_snapshot(dir: &Path, rooms: &[(String, Arc<Mutex<Room>>)]) -> StoreResult<()> {
    use std::io::Write;
    crate::fsutil::write_atomic_with(dir, SNAPSHOT_FILE, |file| {
        let mut out = std::io::BufWriter::with_capacity(1 << 16, file);
        out.write_all(SNAPSHOT_MAGIC)?;
        postcard::to_io(&LiveSnapshot(rooms), &mut out).map_err(std::io::Error::other)?;
        out.flush()
    })
    .map_err(|e| StoreError::Unavailable(format!("snapshot write in {}: {e}", dir.display())))
}

/// The current layout ([`Snapshot`]) serialized from the live rooms, field for field what
/// the derived form of `Snapshot` writes (a test holds the two byte for byte).
struct LiveSnapshot<'a>(&'a [(String, Arc<Mutex<Room>>)]);

impl Serialize for LiveSnapshot<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Snapshot", 1)?;
        st.serialize_field("rooms", &LiveRooms(self.0))?;
        st.end()
    }
}

struct LiveRooms<'a>(&'a [(String, Arc<Mutex<Room>>)]);

impl Serialize for LiveRooms<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for (name, room) in self.0 {
            let room = room.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            seq.serialize_element(&(name, LiveRoom(&room)))?;
        }
        seq.end()
    }
}

/// One room as a [`RoomSnapshot`].
struct LiveRoom<'a>(&'a Room);

impl Serialize for LiveRoom<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let room = self.0;
        let mut st = s.serialize_struct("RoomSnapshot", 9)?;
        st.serialize_field("settings", &room.settings)?;
        st.serialize_field("tokens", &room.tokens)?;
        st.serialize_field("next_ticket", &room.line.next_ticket())?;
        st.serialize_field("line", &LiveLine(&room.line))?;
        st.serialize_field("sessions", &Ids(room.sessions.ids()))?;
        st.serialize_field("counters", &room.counters)?;
        st.serialize_field("salt", &room.salt)?;
        st.serialize_field("draw", &Ids(room.draw.keys()))?;
        st.serialize_field("drawn", &Drawn(&room.drawn))?;
        st.end()
    }
}

/// The line as `(ticket, visitor)` in line order; the front lane rides in it with its
/// marker bit, so the layout stays.
struct LiveLine<'a>(&'a WaitingLine);

impl Serialize for LiveLine<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for (lane, t, w) in self.0.by_ticket() {
            let ticket = match lane {
                LaneKind::Front => FRONT | t,
                LaneKind::Line => t,
            };
            seq.serialize_element(&(ticket, w.visitor))?;
        }
        seq.end()
    }
}

struct Ids<I>(I);

impl<'a, I: Iterator<Item = &'a VisitorId> + ExactSizeIterator + Clone> Serialize for Ids<I> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.clone())
    }
}

struct Drawn<'a>(&'a [DrawHash]);

impl Serialize for Drawn<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|h| h.0))
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
}

/// A client as a place in line holds it: 4 bytes instead of an address, numbered by the
/// room's `ClientCounts`. `NONE` for places with no client (restored from a snapshot,
/// which does not keep clients).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ClientRef(u32);

impl ClientRef {
    pub(crate) const NONE: ClientRef = ClientRef(0);
}

/// Per-client counts (places in line, sessions on the site), each client numbered while it
/// holds something; an entry is removed when its count drops to zero (and its number is
/// reused), so the map holds only clients that hold something.
#[derive(Default)]
struct ClientCounts {
    numbers: HashMap<ClientKey, ClientRef>,
    /// By number − 1: the client and its count (0: a free number).
    entries: Vec<(ClientKey, u32)>,
    free: Vec<ClientRef>,
}

impl ClientCounts {
    fn get(&self, client: ClientKey) -> u32 {
        self.numbers
            .get(&client)
            .map_or(0, |r| self.entries[r.0 as usize - 1].1)
    }

    /// Clients holding something.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.numbers.len()
    }

    /// Counts one more for `client` and returns its number.
    fn add(&mut self, client: Option<ClientKey>) -> ClientRef {
        let Some(client) = client else {
            return ClientRef::NONE;
        };
        if let Some(&r) = self.numbers.get(&client) {
            self.entries[r.0 as usize - 1].1 += 1;
            return r;
        }
        let r = match self.free.pop() {
            Some(r) => {
                self.entries[r.0 as usize - 1] = (client, 1);
                r
            }
            None => {
                self.entries.push((client, 1));
                ClientRef(self.entries.len() as u32)
            }
        };
        self.numbers.insert(client, r);
        r
    }

    /// Counts one less for the client numbered `r`.
    fn release(&mut self, r: ClientRef) {
        let Some(entry) = (r.0 as usize)
            .checked_sub(1)
            .and_then(|i| self.entries.get_mut(i))
        else {
            return;
        };
        if entry.1 == 0 {
            return;
        }
        entry.1 -= 1;
        if entry.1 == 0 {
            let client = entry.0;
            self.numbers.remove(&client);
            self.free.push(r);
        }
    }

    fn remove(&mut self, client: Option<ClientKey>) {
        if let Some(&r) = client.as_ref().and_then(|c| self.numbers.get(c)) {
            self.release(r);
        }
    }

    fn clear(&mut self) {
        *self = ClientCounts::default();
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
    /// The line and the front lane ahead of it (the newest move is position 1), with
    /// their index and seen order: see [`line`].
    line: WaitingLine,
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
    /// Admitted sessions, with their order of last activity for reclaim.
    sessions: Sessions,
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
            line: WaitingLine::new(),
            draw: HashMap::new(),
            draw_by_seen: BTreeSet::new(),
            drawn: Vec::new(),
            sessions: Sessions::new(),
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
        let phase = self.phase(now);
        if self.sessions.contains(&visitor) {
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
        if self
            .sessions
            .insert(visitor, now, client.into_iter().collect())
        {
            self.session_counts.add(client);
        }
        self.counters.total_admitted += 1;
    }

    /// Removes a session from every index, freeing its client's share.
    fn drop_session(&mut self, visitor: VisitorId) -> bool {
        let Some(session) = self.sessions.remove(&visitor) else {
            return false;
        };
        self.session_counts.remove(session.clients.first().copied());
        true
    }

    fn touch_session(&mut self, visitor: VisitorId, now: u64) -> bool {
        self.sessions.touch(&visitor, now, TOUCH_GRANULARITY_MS)
    }

    fn admit_pass(&mut self, now: u64) -> PassReport {
        let phase = self.phase(now);
        let mut report = PassReport::default();

        let ttl = ms(self.settings.session_ttl);
        while report.expired.len() < REAP_BUDGET {
            let Some((visitor, session)) = self.sessions.pop_due(ttl, now) else {
                break;
            };
            self.session_counts.remove(session.clients.first().copied());
            report.expired.push(visitor);
        }
        self.counters.total_expired += report.expired.len() as u64;

        let abandon_after = ms(self.settings.abandon_after);
        while report.abandoned.len() < REAP_BUDGET {
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
        let budget = REAP_BUDGET - report.abandoned.len();
        for (seen, visitor) in due(&self.draw_by_seen, abandon_after, now, budget) {
            self.draw_by_seen.remove(&(seen, visitor));
            if let Some(e) = self.draw.remove(&visitor) {
                self.places.release(e.client);
            }
            report.abandoned.push(visitor);
        }
        self.counters.total_abandoned += report.abandoned.len() as u64;
        self.joins
            .prune(now, ms(self.policy.join_limit_window), REAP_BUDGET);

        self.refill(now);
        // Before the doors and after closing, nobody is admitted.
        if phase == Phase::Queueing {
            // How many `can_admit` lets in, counted the way admitting them spends it, so
            // the line gives them up in one batch (see `WaitingLine::take_heads`).
            let (mut tokens, mut active, mut n) = (self.tokens, self.sessions.len() as u64, 0);
            while n < self.line.len()
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
                self.tokens -= 1.0;
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
        self.line.clear();
        self.draw.clear();
        self.draw_by_seen.clear();
        self.places.clear();
        removed
    }

    /// The room in the snapshot layout, owned: what [`LiveRoom`] writes without the copy.
    #[cfg(test)]
    fn snapshot(&self) -> RoomSnapshot {
        RoomSnapshot {
            settings: self.settings.clone(),
            tokens: self.tokens,
            next_ticket: self.line.next_ticket(),
            // The front lane rides in the line with its marker bit, so the layout stays.
            line: self
                .line
                .by_ticket()
                .map(|(lane, t, w)| match lane {
                    LaneKind::Front => (FRONT | t, w.visitor),
                    LaneKind::Line => (t, w.visitor),
                })
                .collect(),
            sessions: self.sessions.ids().copied().collect(),
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
        // Each lane in ticket order (stable sorts: already sorted input costs O(n)); the
        // tickets are numbered afresh, consecutively, which keeps every order.
        let (mut front, mut line): (Vec<_>, Vec<_>) = snapshot
            .line
            .into_iter()
            .partition(|&(t, _)| t & FRONT != 0);
        front.sort_by_key(|&(t, _)| t);
        line.sort_by_key(|&(t, _)| t);
        room.line
            .start_at(line.first().map_or(snapshot.next_ticket, |&(t, _)| t));
        for (lane, places) in [(LaneKind::Front, front), (LaneKind::Line, line)] {
            for (_, visitor) in places {
                // A visitor listed twice (never written so) keeps their first place.
                if room.line.find(visitor).is_none() {
                    room.line.join(
                        lane,
                        NewPlace {
                            visitor,
                            seen_ms: now,
                            joined_ms: now,
                            client: ClientRef::NONE,
                        },
                    );
                }
            }
        }
        for visitor in snapshot.sessions {
            room.sessions.insert(visitor, now, Vec::new());
        }
        for visitor in snapshot.draw {
            room.draw.insert(
                visitor,
                Entrant {
                    seen_ms: now,
                    client: ClientRef::NONE,
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

    #[test]
    fn the_published_hash_is_what_orders_the_embedded_draw() {
        let salt = [0x5a; 16];
        for i in 0..50u8 {
            let v = VisitorId([i; 16]);
            assert_eq!(
                crate::fairness::draw::DrawHash::of(&salt, v).score(),
                lottery_score(&salt, v),
                "the embedded store must order the draw by the published hash"
            );
        }
    }

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
            (room.places.len(), room.session_counts.len())
        };
        assert_eq!(sizes(), (300, 20));
        tokio::time::advance(Duration::from_secs(61)).await;
        h.store.admit_pass("main").await.unwrap();
        assert_eq!(sizes(), (0, 0));
    }

    /// The snapshot streamed from the live rooms is byte for byte the derived encoding of
    /// the owned layout, with both lanes, sessions, a draw and drawn hashes in it.
    #[tokio::test(start_paused = true)]
    async fn live_snapshot_is_the_derived_layout() {
        let h = MemoryHarness::new();
        let store = h.store.clone();
        let mut seed = conformance::settings(1.0, 2);
        seed.abandon_after = Duration::from_secs(60);
        store
            .open_room("main", &seed, &RoomPolicy::default(), false)
            .await
            .unwrap();
        for _ in 0..2 {
            store
                .resolve("main", VisitorId::random(), conformance::anyone())
                .await
                .unwrap();
        }
        for i in 0..3 * line::CHUNK {
            let join = if i % 7 == 0 { Join::Front } else { Join::Back };
            store
                .resolve_with("main", VisitorId::random(), conformance::anyone(), join)
                .await
                .unwrap();
        }
        {
            let room = store.room("main").unwrap();
            let mut room = room.lock().unwrap();
            let v = VisitorId::random();
            room.draw.insert(
                v,
                Entrant {
                    seen_ms: 0,
                    client: ClientRef::NONE,
                },
            );
            room.drawn = vec![DrawHash([7; 32]), DrawHash([9; 32])];
        }
        let rooms = store.rooms();
        let live = postcard::to_stdvec(&LiveSnapshot(&rooms)).unwrap();
        let owned = Snapshot {
            rooms: rooms
                .iter()
                .map(|(name, room)| (name.clone(), room.lock().unwrap().snapshot()))
                .collect(),
        };
        assert_eq!(live, postcard::to_stdvec(&owned).unwrap());
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
