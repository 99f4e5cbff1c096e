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
    ClientKey, PassReport, Phase, Place, QueueStore, Resolution, RoomPolicy, RoomSettings,
    RoomStats, Seeded, SettingsPatch, StoreError, StoreResult, VisitorId, VisitorState,
};
use crate::clock::{Clock, ms};

/// How many idle sessions and abandoned waiters one pass may reap of each; a backlog is
/// cleared over the following passes.
pub const REAP_BUDGET: usize = 10_000;

/// Heartbeats and session activity closer together than this do not move the visitor in
/// the time indexes: abandonment and reclaim are measured in seconds, and skipping the
/// re-index keeps a crowd of impatient clients cheap.
const TOUCH_GRANULARITY_MS: u64 = 1_000;

const SNAPSHOT_FILE: &str = "queue.snapshot";

/// Opens a snapshot in the current layout. Ten 0xff bytes are not a valid postcard varint,
/// so no snapshot of the first layout (which started with one) can be mistaken for it.
const SNAPSHOT_MAGIC: &[u8] = b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xffanteroom-snapshot-2";

pub struct MemoryStore {
    clock: Clock,
    rooms: RwLock<HashMap<String, Arc<Mutex<Room>>>>,
    /// Where snapshots go; `None` keeps everything in memory only.
    data_dir: Option<PathBuf>,
}

impl MemoryStore {
    /// A store that keeps nothing on disk.
    pub fn in_memory(clock: Clock) -> Self {
        MemoryStore {
            clock,
            rooms: RwLock::default(),
            data_dir: None,
        }
    }

    /// A store persisted in `data_dir`, restoring the last snapshot if there is one.
    pub fn open(clock: Clock, data_dir: &Path) -> StoreResult<Self> {
        std::fs::create_dir_all(data_dir).map_err(|e| {
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

    async fn resolve(
        &self,
        room: &str,
        visitor: VisitorId,
        client: ClientKey,
    ) -> StoreResult<Resolution> {
        self.with_room(room, |room, now| room.resolve(visitor, client, now))
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
            room.settings = next.clone();
            room.tokens = room.tokens.min(next.burst());
            Ok(next)
        })?
    }

    async fn flush(&self, room: &str) -> StoreResult<u64> {
        self.with_room(room, |room, _| room.flush())
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
}

/// Writes the snapshot atomically (temporary file, fsync, rename) with mode 0600.
fn write_snapshot(dir: &Path, snapshot: &Snapshot) -> StoreResult<()> {
    use std::io::Write;
    let fail = |what: &str, e: std::io::Error| {
        StoreError::Unavailable(format!("snapshot {what} in {}: {e}", dir.display()))
    };
    let mut bytes = SNAPSHOT_MAGIC.to_vec();
    postcard::to_io(snapshot, &mut bytes)
        .map_err(|e| StoreError::Unavailable(format!("snapshot encoding failed: {e}")))?;
    let tmp = dir.join(format!("{SNAPSHOT_FILE}.tmp"));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(&tmp).map_err(|e| fail("create", e))?;
    file.write_all(&bytes).map_err(|e| fail("write", e))?;
    file.sync_all().map_err(|e| fail("sync", e))?;
    drop(file);
    std::fs::rename(&tmp, dir.join(SNAPSHOT_FILE)).map_err(|e| fail("rename", e))?;
    if let Ok(dir) = std::fs::File::open(dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// A waiting visitor: their ticket and when the store last heard from them.
#[derive(Clone, Copy, Debug)]
struct Waiter {
    ticket: u64,
    seen_ms: u64,
}

#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
struct Counters {
    total_joined: u64,
    total_admitted: u64,
    total_expired: u64,
    total_abandoned: u64,
    total_refused: u64,
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
    /// The line in ticket order; the head is the first entry.
    line: BTreeMap<u64, VisitorId>,
    /// Waiters by last heartbeat, oldest first, for abandonment.
    by_seen: BTreeSet<(u64, u64)>,
    ranks: RankIndex,
    /// A lottery draw being collected: entrant → last heartbeat. Entrants have no ticket
    /// until the doors open; then the whole draw is issued tickets in the order of
    /// [`lottery_score`], in one go (the permutation is O(draw) once, and afterwards the
    /// line is ordered by ticket alone, so the Fenwick index stays as it was).
    draw: HashMap<VisitorId, u64>,
    /// Draw entrants by last heartbeat, oldest first, for abandonment.
    draw_by_seen: BTreeSet<(u64, VisitorId)>,
    /// Admitted sessions and their last activity.
    sessions: HashMap<VisitorId, u64>,
    /// Sessions by last activity, oldest first, for reclaim.
    by_activity: BTreeSet<(u64, VisitorId)>,
    joins: JoinWindows,
    counters: Counters,
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
            by_seen: BTreeSet::new(),
            ranks: RankIndex::default(),
            draw: HashMap::new(),
            draw_by_seen: BTreeSet::new(),
            sessions: HashMap::new(),
            by_activity: BTreeSet::new(),
            joins: JoinWindows::default(),
            counters: Counters::default(),
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
                self.tokens = self.tokens.min(self.settings.burst());
                Seeded::Reseeded
            }
        }
    }

    fn refill(&mut self, now: u64) {
        let elapsed = now.saturating_sub(self.refilled_ms);
        self.tokens =
            (self.tokens + elapsed as f64 * self.settings.rate / 1000.0).min(self.settings.burst());
        self.refilled_ms = self.refilled_ms.max(now);
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
            self.open_doors();
        }
        phase
    }

    /// Issues the draw tickets in lottery order, behind everyone already in line and ahead
    /// of everyone who comes after.
    fn open_doors(&mut self) {
        let mut entrants: Vec<(u64, VisitorId, u64)> = self
            .draw
            .drain()
            .map(|(v, seen)| (lottery_score(&self.salt, v), v, seen))
            .collect();
        self.draw_by_seen.clear();
        entrants.sort_unstable();
        for (_, visitor, seen) in entrants {
            let ticket = self.next_ticket;
            self.next_ticket += 1;
            self.enter_line(visitor, ticket, seen);
        }
    }

    fn resolve(&mut self, visitor: VisitorId, client: ClientKey, now: u64) -> Resolution {
        let phase = self.phase(now);
        if self.sessions.contains_key(&visitor) {
            self.touch_session(visitor, now);
            return Resolution::Admitted { newly: false };
        }
        if let Some(place) = self.heartbeat_waiter(visitor, now, phase) {
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
                retry_after: std::time::Duration::from_millis(retry_after_ms),
            };
        }
        if phase == Phase::Draw {
            // Collected, never admitted on the spot.
            if self.policy.lottery {
                self.draw.insert(visitor, now);
                self.draw_by_seen.insert((now, visitor));
                self.counters.total_joined += 1;
                return Resolution::Waiting {
                    place: self.draw_place(phase),
                    joined: true,
                };
            }
        } else {
            self.refill(now);
            if self.line.is_empty() && self.can_admit() {
                self.tokens -= 1.0;
                self.start_session(visitor, now);
                return Resolution::Admitted { newly: true };
            }
        }
        self.join(visitor, now);
        Resolution::Waiting {
            place: self.place_of(self.waiters[&visitor].ticket, phase),
            joined: true,
        }
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
        if let Some(seen) = self.draw.get_mut(&visitor) {
            if now >= *seen + TOUCH_GRANULARITY_MS {
                self.draw_by_seen.remove(&(*seen, visitor));
                *seen = now;
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
        (self.line.len() + self.draw.len()) as u64
    }

    fn place_of(&self, ticket: u64, phase: Phase) -> Place {
        Place {
            position: Some(self.ranks.rank(ticket)),
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

    fn join(&mut self, visitor: VisitorId, now: u64) {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.enter_line(visitor, ticket, now);
        self.counters.total_joined += 1;
    }

    /// Puts a waiter into every index of the line.
    fn enter_line(&mut self, visitor: VisitorId, ticket: u64, seen_ms: u64) {
        self.waiters.insert(visitor, Waiter { ticket, seen_ms });
        self.line.insert(ticket, visitor);
        self.by_seen.insert((seen_ms, ticket));
        self.ranks.insert(ticket);
    }

    /// Takes a waiter out of every index of the line.
    fn leave_line(&mut self, visitor: VisitorId) -> Option<Waiter> {
        let waiter = self.waiters.remove(&visitor)?;
        self.line.remove(&waiter.ticket);
        self.by_seen.remove(&(waiter.seen_ms, waiter.ticket));
        self.ranks.remove(waiter.ticket);
        Some(waiter)
    }

    fn start_session(&mut self, visitor: VisitorId, now: u64) {
        self.sessions.insert(visitor, now);
        self.by_activity.insert((now, visitor));
        self.counters.total_admitted += 1;
    }

    fn touch_session(&mut self, visitor: VisitorId, now: u64) {
        if let Some(last) = self.sessions.get_mut(&visitor)
            && now >= *last + TOUCH_GRANULARITY_MS
        {
            self.by_activity.remove(&(*last, visitor));
            *last = now;
            self.by_activity.insert((now, visitor));
        }
    }

    fn admit_pass(&mut self, now: u64) -> PassReport {
        let phase = self.phase(now);
        let mut report = PassReport::default();

        let ttl = ms(self.settings.session_ttl);
        while report.expired.len() < REAP_BUDGET {
            match self.by_activity.first() {
                Some(&(last, visitor)) if last + ttl <= now => {
                    self.by_activity.pop_first();
                    self.sessions.remove(&visitor);
                    report.expired.push(visitor);
                }
                _ => break,
            }
        }
        self.counters.total_expired += report.expired.len() as u64;

        let abandon_after = ms(self.settings.abandon_after);
        while report.abandoned.len() < REAP_BUDGET {
            match self.by_seen.first() {
                Some(&(seen, ticket)) if seen + abandon_after <= now => {
                    let visitor = self.line[&ticket];
                    self.leave_line(visitor);
                    report.abandoned.push(visitor);
                }
                _ => break,
            }
        }
        while report.abandoned.len() < REAP_BUDGET {
            match self.draw_by_seen.first() {
                Some(&(seen, visitor)) if seen + abandon_after <= now => {
                    self.draw_by_seen.pop_first();
                    self.draw.remove(&visitor);
                    report.abandoned.push(visitor);
                }
                _ => break,
            }
        }
        self.counters.total_abandoned += report.abandoned.len() as u64;
        self.joins
            .prune(now, ms(self.policy.join_limit_window), REAP_BUDGET);

        self.refill(now);
        // Before the doors and after closing, nobody is admitted.
        while phase == Phase::Queueing && self.can_admit() {
            let Some((_, &visitor)) = self.line.first_key_value() else {
                break;
            };
            self.leave_line(visitor);
            self.tokens -= 1.0;
            self.start_session(visitor, now);
            report.admitted.push(visitor);
        }
        report
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

    fn flush(&mut self) -> u64 {
        let removed = self.waiting();
        self.waiters.clear();
        self.line.clear();
        self.by_seen.clear();
        self.ranks.clear(self.next_ticket);
        self.draw.clear();
        self.draw_by_seen.clear();
        removed
    }

    fn snapshot(&self) -> RoomSnapshot {
        RoomSnapshot {
            settings: self.settings.clone(),
            tokens: self.tokens,
            next_ticket: self.next_ticket,
            line: self.line.iter().map(|(&t, &v)| (t, v)).collect(),
            sessions: self.sessions.keys().copied().collect(),
            counters: self.counters,
            salt: self.salt,
            draw: self.draw.keys().copied().collect(),
        }
    }

    /// Rebuilds a room from its snapshot. Everyone restored counts as seen `now`: the time
    /// the process was down must not abandon the line or reclaim the site. The policy
    /// comes back when the room is opened.
    fn restore(snapshot: RoomSnapshot, now: u64) -> Self {
        let mut room = Room::new(snapshot.settings, now);
        room.salt = snapshot.salt;
        room.tokens = snapshot.tokens.min(room.settings.burst());
        room.counters = snapshot.counters;
        let first_ticket = snapshot
            .line
            .first()
            .map_or(snapshot.next_ticket, |&(t, _)| t);
        room.ranks = RankIndex::starting_at(first_ticket);
        for (ticket, visitor) in snapshot.line {
            room.enter_line(visitor, ticket, now);
        }
        room.next_ticket = snapshot.next_ticket;
        for visitor in snapshot.sessions {
            room.sessions.insert(visitor, now);
            room.by_activity.insert((now, visitor));
        }
        for visitor in snapshot.draw {
            room.draw.insert(visitor, now);
            room.draw_by_seen.insert((now, visitor));
        }
        room
    }
}

/// A draw entrant's lottery score: the first 8 bytes of SHA-256(salt ‖ visitor id). The
/// same visitor always gets the same score (so leaving and rejoining the draw changes
/// nothing), and without the salt nobody can predict or pick a good one.
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
