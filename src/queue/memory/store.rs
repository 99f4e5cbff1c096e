//! [`MemoryStore`]: the rooms of this process by name, each behind its own mutex, and
//! [`QueueStore`] on them; each operation takes the room's lock, runs the room's logic at
//! the store's time, and lets go. Also the one store-wide thing a room does not hold: the
//! spent priority-grant nonces (a room holds its spent challenge ids, which its joins
//! spend under its lock).

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use async_trait::async_trait;
use sha2::{Digest, Sha256};

use super::Room;
use super::snapshot::{SNAPSHOT_FILE, decode_snapshot, write_snapshot};
use crate::clock::Clock;
use crate::queue::{
    AdaptiveState, ChallengeSpend, ClientKey, DrawRecord, GrantUse, Join, OriginExchange,
    OriginReport, PassReport, Place, QueueQuery, QueueStore, Resolution, RoomPolicy, RoomSettings,
    RoomStats, Seeded, SettingsPatch, Spent, StoreError, StoreResult, VisitorId, VisitorRef,
    VisitorState, WaitingEntry,
};

/// The embedded queue store: every room in this process's memory, optionally snapshotted to `data_dir`.
pub struct MemoryStore {
    pub(super) clock: Clock,
    rooms: RwLock<HashMap<String, Arc<Mutex<Room>>>>,
    /// Where snapshots go; `None` keeps everything in memory only.
    data_dir: Option<PathBuf>,
    /// Spent priority-grant nonces per room. Not snapshotted: a grant is short-lived, and
    /// a restart of the one embedded replica is rare next to a grant's minutes.
    grants: Mutex<HashMap<String, SpentGrants>>,
}

/// The spent nonces (or challenge ids) of one room until their expiry: a bounded map
/// keyed by `K`, pruned by expiry from lists of the keys due at each expiry (ids issued in
/// the same second share one: appending is O(1), where an ordered set of every id cost a
/// tree walk and its key comparisons per spend).
pub(super) struct SpentGrants<K: SpentKey = String> {
    pub(super) by_nonce: HashMap<K, (u64, VisitorId), K::Hasher>,
    pub(super) by_expiry: BTreeMap<u64, Vec<K>>,
}

impl<K: SpentKey> Default for SpentGrants<K> {
    fn default() -> Self {
        SpentGrants {
            by_nonce: HashMap::default(),
            by_expiry: BTreeMap::new(),
        }
    }
}

/// How a spent id is kept as a map key.
pub(super) trait SpentKey: Hash + Eq + Clone {
    /// How the map hashes it.
    type Hasher: BuildHasher + Default;
    /// The key of `id`.
    fn of(id: &str) -> Self;
}

impl SpentKey for String {
    type Hasher = std::hash::RandomState;
    fn of(id: &str) -> Self {
        id.to_owned()
    }
}

/// A spent challenge id as a fixed-size key, so remembering one allocates nothing: an id
/// of up to 31 bytes (a challenge's nonce is 22 characters) inline after its length, a
/// longer one (never a verified challenge's) by its SHA-256 after a 255 length byte.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct IdKey([u8; 32]);

impl SpentKey for IdKey {
    type Hasher = BuildHasherDefault<IdHasher>;
    fn of(id: &str) -> Self {
        let mut key = [0u8; 32];
        let bytes = id.as_bytes();
        if bytes.len() < key.len() {
            key[0] = bytes.len() as u8;
            key[1..=bytes.len()].copy_from_slice(bytes);
        } else {
            let hash: [u8; 32] = Sha256::digest(bytes).into();
            key[0] = u8::MAX;
            key[1..].copy_from_slice(&hash[..31]);
        }
        IdKey(key)
    }
}

/// Hashes an [`IdKey`] by folding its bytes with a multiply: no keyed hash is needed, for
/// only verified challenges reach the map, whose ids are random and signed (nobody can
/// choose them to collide), and SipHash was a measurable part of a spend.
#[derive(Default)]
pub(super) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(29) ^ u64::from_le_bytes(word))
                .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 32)
    }
}

/// Spent nonces one room remembers at once. Past it, new grants are refused until some
/// expire (fail closed: a nonce is never forgotten before its expiry, so never replayable).
/// Only grants signed with `priority_secret` get this far, so only the site can fill it.
pub const MAX_SPENT_GRANTS: usize = 200_000;

/// Spent challenge ids one room remembers at once (about 120 B each, so at most about
/// 60 MB): 1,666 joins a second for the challenge's five minutes. Past it, a solved
/// challenge is refused as a replay until some expire (fail closed, as for grants):
/// each one took a solved proof of work to get here.
pub const MAX_SPENT_CHALLENGES: usize = 500_000;

impl<K: SpentKey> SpentGrants<K> {
    pub(super) fn spend(
        &mut self,
        nonce: &str,
        visitor: VisitorId,
        expires_at_ms: u64,
        now: u64,
    ) -> GrantUse {
        self.spend_within(nonce, visitor, expires_at_ms, now, MAX_SPENT_GRANTS)
    }

    /// Forgets `nonce` if `visitor` spent it (see `QueueStore::release_grant`). Its entry
    /// in `by_expiry` stays until the grant's expiry, when removing it is a no-op (or, if
    /// spent again meanwhile, the end of an entry with that same expiry: a nonce is one
    /// grant's, and its expiry is signed with it).
    pub(super) fn release(&mut self, nonce: &str, visitor: VisitorId) {
        let key = K::of(nonce);
        if self
            .by_nonce
            .get(&key)
            .is_some_and(|spent| spent.1 == visitor)
        {
            self.by_nonce.remove(&key);
        }
    }

    /// [`SpentGrants::spend`] with at most `max` remembered.
    pub(super) fn spend_within(
        &mut self,
        nonce: &str,
        visitor: VisitorId,
        expires_at_ms: u64,
        now: u64,
        max: usize,
    ) -> GrantUse {
        while let Some(entry) = self.by_expiry.first_entry()
            && *entry.key() <= now
        {
            for key in entry.remove() {
                self.by_nonce.remove(&key);
            }
        }
        // One probe of the map: the spend is a lookup and, when fresh, an insert there.
        let key = K::of(nonce);
        let full = self.by_nonce.len() >= max;
        match self.by_nonce.entry(key) {
            Entry::Occupied(spent) if spent.get().1 == visitor => GrantUse::Again,
            Entry::Occupied(_) => GrantUse::Taken,
            Entry::Vacant(_) if expires_at_ms <= now || full => GrantUse::Taken,
            Entry::Vacant(fresh) => {
                let key = fresh.key().clone();
                fresh.insert((expires_at_ms, visitor));
                self.by_expiry.entry(expires_at_ms).or_default().push(key);
                GrantUse::Fresh
            }
        }
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

    pub(super) fn room(&self, name: &str) -> StoreResult<Arc<Mutex<Room>>> {
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

    pub(super) fn rooms(&self) -> Vec<(String, Arc<Mutex<Room>>)> {
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
            room.set_policy(policy);
            rooms.insert(name.to_owned(), Arc::new(Mutex::new(room)));
            return Ok(Seeded::Fresh);
        };
        let mut room = room.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // The policy is the file's with the live changes (a reseed drops them). The salt
        // stays.
        room.set_policy(policy);
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
        self.with_room(room, |room, now| room.drop_session(visitor, now))
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

    async fn release_grant(&self, room: &str, nonce: &str, visitor: VisitorId) -> StoreResult<()> {
        self.room(room)?;
        let mut grants = self.grants.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(spent) = grants.get_mut(room) {
            spent.release(nonce, visitor);
        }
        Ok(())
    }

    async fn resolve_spending(
        &self,
        room: &str,
        visitor: VisitorId,
        client: ClientKey,
        challenge: ChallengeSpend<'_>,
    ) -> StoreResult<Spent> {
        self.with_room(room, |room, now| {
            room.resolve_spending(visitor, client, challenge, now)
        })
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
        self.with_room(room, |room, now| room.stats(now))
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
            if let Some((name, want)) = &patch.expect {
                let null = serde_json::Value::Null;
                let held = room.settings.changes.0.get(name).unwrap_or(&null);
                if held != want {
                    // Already holding what this patch writes there: written already.
                    if patch.changes.0.get(name).unwrap_or(&null) == held {
                        return Ok(room.settings.clone());
                    }
                    return Err(StoreError::Conflict(name.clone()));
                }
            }
            let next = room.settings.patched(patch)?;
            // Credit the bucket at the old rate up to now, so a rate change applies only
            // from this moment on.
            room.refill(now);
            let resuming = room.settings.paused && !next.paused;
            room.settings = next.clone();
            room.apply_policy();
            room.tokens = room.tokens.min(room.burst());
            if resuming {
                // A resume starts with an empty bucket; paused time earns nothing.
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
