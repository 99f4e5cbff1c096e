//! The store boundary: the queue, token bucket, sessions, runtime settings and counters of
//! every room live behind [`QueueStore`], so admission, HTTP and tests never know which store
//! is underneath.
//!
//! Each operation is one atomic step on one room. Time comes from the store itself (the
//! embedded store's [`crate::clock::Clock`], Redis `TIME`), never from the caller, so several
//! replicas sharing a store cannot disagree about it.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub mod fenwick;
pub mod memory;
pub mod redis;

#[cfg(test)]
pub mod conformance;

pub use crate::config::Schedule;
pub use crate::http::client::ClientKey;
pub use memory::MemoryStore;
pub use redis::RedisStore;

/// A visitor's random 128-bit identity, carried in the signed cookie. Stored as 16 raw
/// bytes (not 32 hex characters) because the line may hold millions of them.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct VisitorId(pub [u8; 16]);

impl VisitorId {
    /// A fresh, unguessable id from the operating system's generator.
    pub fn random() -> Self {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).expect("the operating system's random generator failed");
        VisitorId(bytes)
    }

    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    pub fn from_hex(s: &str) -> Option<Self> {
        let mut bytes = [0u8; 16];
        hex::decode_to_slice(s, &mut bytes).ok()?;
        Some(VisitorId(bytes))
    }
}

impl fmt::Debug for VisitorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VisitorId({})", self.to_hex())
    }
}

impl fmt::Display for VisitorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// The settings an operator can change while a room runs. They live in the store (so they
/// survive restarts and are shared by replicas); the config file only seeds them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RoomSettings {
    /// Visitors admitted per second; also the bucket's burst (at least 1).
    pub rate: f64,
    /// Visitors on the site at once.
    pub max_active: u64,
    /// An admitted session with no request for this long gives its slot back.
    pub session_ttl: Duration,
    /// A waiting visitor with no heartbeat for this long leaves the line.
    pub abandon_after: Duration,
    /// Nobody is admitted while paused, not even by the fast path.
    pub paused: bool,
}

impl RoomSettings {
    /// The largest number of tokens the bucket may hold: one second's worth, at least one,
    /// so an outage or a pause never dumps the line on the origin.
    pub fn burst(&self) -> f64 {
        self.rate.max(1.0)
    }

    /// Checks every field, naming the first that is wrong.
    pub fn validate(&self) -> Result<(), StoreError> {
        let invalid = |field: &'static str, reason: &str| {
            Err(StoreError::Invalid {
                field,
                reason: reason.to_owned(),
            })
        };
        if !self.rate.is_finite() || self.rate <= 0.0 {
            return invalid("rate", "must be a number greater than 0");
        }
        if self.rate > 1_000_000.0 {
            return invalid("rate", "must be at most 1000000 visitors per second");
        }
        if self.max_active == 0 {
            return invalid("max_active", "must be at least 1");
        }
        if self.session_ttl < Duration::from_secs(1) {
            return invalid("session_ttl", "must be at least 1s");
        }
        if self.abandon_after < Duration::from_secs(1) {
            return invalid("abandon_after", "must be at least 1s");
        }
        Ok(())
    }

    /// The settings with `patch` applied, validated.
    pub fn patched(&self, patch: &SettingsPatch) -> Result<RoomSettings, StoreError> {
        let next = RoomSettings {
            rate: patch.rate.unwrap_or(self.rate),
            max_active: patch.max_active.unwrap_or(self.max_active),
            session_ttl: patch.session_ttl.unwrap_or(self.session_ttl),
            abandon_after: patch.abandon_after.unwrap_or(self.abandon_after),
            paused: patch.paused.unwrap_or(self.paused),
        };
        next.validate()?;
        Ok(next)
    }
}

/// A change to some of a room's [`RoomSettings`]; `None` leaves a field alone. Pause and
/// resume are patches of `paused`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SettingsPatch {
    pub rate: Option<f64>,
    pub max_active: Option<u64>,
    pub session_ttl: Option<Duration>,
    pub abandon_after: Option<Duration>,
    pub paused: Option<bool>,
}

impl SettingsPatch {
    pub fn pause() -> Self {
        SettingsPatch {
            paused: Some(true),
            ..Default::default()
        }
    }

    pub fn resume() -> Self {
        SettingsPatch {
            paused: Some(false),
            ..Default::default()
        }
    }
}

/// The static policy of a room that the store enforces: config, not runtime settings, so it
/// is handed over (and replaced) every time the room is opened. The lottery's salt is not
/// part of it: the store generates that once per room and never replaces it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoomPolicy {
    /// Newcomers (joins and fast-path admissions) per client key per window; 0 disables.
    /// Refused attempts count against the window too.
    pub join_limit_per_ip: u32,
    /// A fixed window per (room, client key), starting at its first attempt.
    pub join_limit_window: Duration,
    pub schedule: Schedule,
    /// Visitors collected during the draw are placed by a salted hash of their id.
    pub lottery: bool,
}

impl RoomPolicy {
    /// The schedule as unix milliseconds: (queue_opens_at, admits_at, closes_at).
    pub fn schedule_ms(&self) -> [Option<u64>; 3] {
        let s = &self.schedule;
        [s.queue_opens_at, s.admits_at, s.closes_at].map(|t| t.map(unix_ms))
    }

    /// Where the schedule stands at `now_ms` (store time). A room without a schedule is
    /// always [`Phase::Queueing`].
    pub fn phase_at(&self, now_ms: u64) -> Phase {
        let [opens, admits, closes] = self.schedule_ms();
        if closes.is_some_and(|t| now_ms >= t) {
            Phase::Closed
        } else if opens.is_some_and(|t| now_ms < t) {
            Phase::BeforeOpen
        } else if admits.is_some_and(|t| now_ms < t) {
            Phase::Draw
        } else {
            Phase::Queueing
        }
    }

    /// Whether the join limit is on.
    pub fn limits_joins(&self) -> bool {
        self.join_limit_per_ip > 0 && !self.join_limit_window.is_zero()
    }
}

/// Unix milliseconds of a wall-clock time (0 before the epoch).
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(crate::clock::ms)
        .unwrap_or(0)
}

/// Where a room is in its schedule (SPEC §7), read from the store's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// No schedule, or past `admits_at`: the line moves.
    Queueing,
    /// Before `queue_opens_at`: nobody is queued.
    BeforeOpen,
    /// Between `queue_opens_at` and `admits_at`: visitors are collected, nobody admitted.
    Draw,
    /// After `closes_at`: no new admissions; sessions on the site carry on.
    Closed,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Queueing => "queueing",
            Phase::BeforeOpen => "before_open",
            Phase::Draw => "draw",
            Phase::Closed => "closed",
        }
    }
}

/// Where a visitor stands after [`QueueStore::resolve`].
#[derive(Clone, Debug, PartialEq)]
pub enum Resolution {
    /// On the site: proxy the request. `newly` when this very call let them in (the fast
    /// path), so the caller can report the admission.
    Admitted { newly: bool },
    /// In line (or in the draw). `joined` when this very call put them there.
    Waiting { place: Place, joined: bool },
    /// A newcomer over the join limit of their client key; counted in `total_refused` and
    /// charged to the window. `retry_after` is what is left of the window.
    Refused { retry_after: Duration },
    /// Before `queue_opens_at`: nobody is queued (and the visitor was not).
    NotOpen,
    /// After `closes_at`: nobody else is admitted; only sessions already on the site go on.
    Closed,
}

/// A waiting visitor's place in line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    /// 1 for the head of the line; `None` during a lottery draw, where nobody has a place
    /// until the doors open.
    pub position: Option<u64>,
    /// Everyone in line (during the draw: everyone entered).
    pub waiting: u64,
    pub paused: bool,
    pub phase: Phase,
}

/// What a live stream reports for one visitor on a tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VisitorState {
    Admitted,
    Waiting(Place),
    /// Neither waiting nor on the site: abandoned, flushed, or never joined. The page should
    /// reload, which rejoins them at the back.
    Unknown,
}

/// What one admission pass did. Ids are reported so the events side channel can name them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PassReport {
    pub admitted: Vec<VisitorId>,
    pub abandoned: Vec<VisitorId>,
    pub expired: Vec<VisitorId>,
}

/// A room's counters and live settings, as the control room and metrics show them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RoomStats {
    pub waiting: u64,
    pub active: u64,
    pub total_joined: u64,
    pub total_admitted: u64,
    pub total_expired: u64,
    pub total_abandoned: u64,
    pub total_refused: u64,
    pub settings: RoomSettings,
}

/// What happened to the file's settings when a room was opened.
#[derive(Clone, Debug, PartialEq)]
pub enum Seeded {
    /// The store had no settings for the room; the file's are now live.
    Fresh,
    /// The store's live settings equal the file's.
    Unchanged,
    /// The store's live settings differ from the file's and were kept (no `--reseed`).
    KeptLive(RoomSettings),
    /// `--reseed`: the file's settings replaced different live ones.
    Reseeded,
}

/// Errors of the store layer. The HTTP layer maps them deliberately: `Unavailable` is the
/// stalled page (503), `UnknownRoom` a 404, `Invalid` a 400 naming the field.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("queue store unavailable: {0}")]
    Unavailable(String),
    #[error("unknown room {0:?}")]
    UnknownRoom(String),
    #[error("invalid {field}: {reason}")]
    Invalid { field: &'static str, reason: String },
}

pub type StoreResult<T> = Result<T, StoreError>;

/// The operations admission needs, each one atomic step on one room.
#[async_trait]
pub trait QueueStore: Send + Sync + 'static {
    /// Makes `room` known, seeding its runtime settings from the file when the store has
    /// none. With `reseed`, the file's settings replace live ones. `policy` always replaces
    /// the stored one; the lottery salt is generated on first open and never replaced.
    async fn open_room(
        &self,
        room: &str,
        seed: &RoomSettings,
        policy: &RoomPolicy,
        reseed: bool,
    ) -> StoreResult<Seeded>;

    /// Decides one request: an active session is admitted (and its activity recorded, which
    /// is how sessions stay alive: the proxy re-confirms each session every few seconds); a
    /// waiting visitor gets their place (and a heartbeat); a newcomer is admitted on the
    /// spot when nobody waits and both limits allow, otherwise joins the back of the line.
    /// The schedule and the join limit of `client` apply to newcomers only: a visitor
    /// already waiting or on the site is never refused.
    async fn resolve(
        &self,
        room: &str,
        visitor: VisitorId,
        client: ClientKey,
    ) -> StoreResult<Resolution>;

    /// The live stream's tick for many visitors of one room at once: each waiting visitor's
    /// place (recording a heartbeat), admitted ones as such. Never joins anyone.
    async fn heartbeat(&self, room: &str, visitors: &[VisitorId])
    -> StoreResult<Vec<VisitorState>>;

    /// One admission pass: reap idle sessions and abandoned waiters (bounded, catching up
    /// over passes), refill the bucket, admit from the head while both limits allow.
    /// Costs O(admitted + reaped), never O(depth). Nobody is admitted before `admits_at`
    /// nor after `closes_at`; the first pass at the doors orders a lottery draw (once).
    async fn admit_pass(&self, room: &str) -> StoreResult<PassReport>;

    async fn stats(&self, room: &str) -> StoreResult<RoomStats>;

    /// Changes runtime settings; they apply from the next pass. Returns the new settings.
    async fn update_settings(&self, room: &str, patch: &SettingsPatch)
    -> StoreResult<RoomSettings>;

    /// Empties the line; sessions on the site are untouched. Returns how many were removed.
    async fn flush(&self, room: &str) -> StoreResult<u64>;

    /// Whether the store answers.
    async fn ping(&self) -> StoreResult<()>;

    /// Makes the current state durable where the store keeps it locally (the embedded
    /// store's snapshot); a no-op for stores that are durable themselves.
    async fn persist(&self) -> StoreResult<()>;
}
