//! The embedded store: every room's line, bucket, sessions, settings and counters in this
//! process, one mutex per room, snapshotted to `data_dir` so a restart loses no one's place.
//!
//! One mutex per room (not a single-writer task) because every operation is a few
//! microseconds of map work with no await inside; a task would add a channel hop to each.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::fenwick::RankIndex;
use super::{
    PassReport, Place, QueueStore, Resolution, RoomSettings, RoomStats, Seeded, SettingsPatch,
    StoreError, StoreResult, VisitorId, VisitorState,
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
                let snapshot: Snapshot = postcard::from_bytes(&bytes).map_err(|e| {
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
        reseed: bool,
    ) -> StoreResult<Seeded> {
        seed.validate()?;
        let now = self.clock.now_ms();
        let mut rooms = self
            .rooms
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some(room) = rooms.get(name) else {
            rooms.insert(
                name.to_owned(),
                Arc::new(Mutex::new(Room::new(seed.clone(), now))),
            );
            return Ok(Seeded::Fresh);
        };
        let mut room = room.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        Ok(room.reseed(seed, reseed))
    }

    async fn resolve(&self, room: &str, visitor: VisitorId) -> StoreResult<Resolution> {
        self.with_room(room, |room, now| room.resolve(visitor, now))
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
    let bytes = postcard::to_stdvec(snapshot)
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
    tokens: f64,
    refilled_ms: u64,
    next_ticket: u64,
    waiters: HashMap<VisitorId, Waiter>,
    /// The line in ticket order; the head is the first entry.
    line: BTreeMap<u64, VisitorId>,
    /// Waiters by last heartbeat, oldest first, for abandonment.
    by_seen: BTreeSet<(u64, u64)>,
    ranks: RankIndex,
    /// Admitted sessions and their last activity.
    sessions: HashMap<VisitorId, u64>,
    /// Sessions by last activity, oldest first, for reclaim.
    by_activity: BTreeSet<(u64, VisitorId)>,
    counters: Counters,
}

impl Room {
    fn new(settings: RoomSettings, now: u64) -> Self {
        Room {
            tokens: settings.burst(),
            settings,
            refilled_ms: now,
            next_ticket: 0,
            waiters: HashMap::new(),
            line: BTreeMap::new(),
            by_seen: BTreeSet::new(),
            ranks: RankIndex::default(),
            sessions: HashMap::new(),
            by_activity: BTreeSet::new(),
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

    fn resolve(&mut self, visitor: VisitorId, now: u64) -> Resolution {
        if self.sessions.contains_key(&visitor) {
            self.touch_session(visitor, now);
            return Resolution::Admitted { newly: false };
        }
        if let Some(place) = self.heartbeat_waiter(visitor, now) {
            return Resolution::Waiting {
                place,
                joined: false,
            };
        }
        self.refill(now);
        if self.line.is_empty() && self.can_admit() {
            self.tokens -= 1.0;
            self.start_session(visitor, now);
            return Resolution::Admitted { newly: true };
        }
        self.join(visitor, now);
        Resolution::Waiting {
            place: self.place_of(self.waiters[&visitor].ticket),
            joined: true,
        }
    }

    fn heartbeat(&mut self, visitor: VisitorId, now: u64) -> VisitorState {
        if self.sessions.contains_key(&visitor) {
            return VisitorState::Admitted;
        }
        match self.heartbeat_waiter(visitor, now) {
            Some(place) => VisitorState::Waiting(place),
            None => VisitorState::Unknown,
        }
    }

    /// A waiting visitor's place, recording that they are still there.
    fn heartbeat_waiter(&mut self, visitor: VisitorId, now: u64) -> Option<Place> {
        let waiter = self.waiters.get_mut(&visitor)?;
        if now >= waiter.seen_ms + TOUCH_GRANULARITY_MS {
            self.by_seen.remove(&(waiter.seen_ms, waiter.ticket));
            waiter.seen_ms = now;
            self.by_seen.insert((now, waiter.ticket));
        }
        let ticket = waiter.ticket;
        Some(self.place_of(ticket))
    }

    fn place_of(&self, ticket: u64) -> Place {
        Place {
            position: self.ranks.rank(ticket),
            waiting: self.line.len() as u64,
            paused: self.settings.paused,
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
        self.counters.total_abandoned += report.abandoned.len() as u64;

        self.refill(now);
        while self.can_admit() {
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
            waiting: self.line.len() as u64,
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
        let removed = self.line.len() as u64;
        self.waiters.clear();
        self.line.clear();
        self.by_seen.clear();
        self.ranks.clear(self.next_ticket);
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
        }
    }

    /// Rebuilds a room from its snapshot. Everyone restored counts as seen `now`: the time
    /// the process was down must not abandon the line or reclaim the site.
    fn restore(snapshot: RoomSnapshot, now: u64) -> Self {
        let mut room = Room::new(snapshot.settings, now);
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
        room
    }
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
                MemoryStore::open(Clock::starting_at(1_700_000_000_000), dir.path()).unwrap(),
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
