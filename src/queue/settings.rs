//! What a room is configured with, as the store keeps it: the live settings an operator
//! changes while it runs ([`RoomSettings`], changed by a [`SettingsPatch`]) and the policy
//! the config file sets ([`RoomPolicy`], with its [`Schedule`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::{Mode, Phase, RoomChanges, StoreError};

/// A scheduled drop; all optional, in order when several are given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Schedule {
    /// When the line opens (before it, newcomers see a countdown).
    pub queue_opens_at: Option<SystemTime>,
    /// When admission starts (the draw closes, if there is one).
    pub admits_at: Option<SystemTime>,
    /// When the room closes to newcomers.
    pub closes_at: Option<SystemTime>,
}

impl Schedule {
    /// Whether no time is set (an ordinary room).
    pub fn is_empty(&self) -> bool {
        self.queue_opens_at.is_none() && self.admits_at.is_none() && self.closes_at.is_none()
    }
}

/// How many idle sessions and abandoned waiters one pass may reap of each, in every store;
/// a backlog is cleared over the following passes.
pub const REAP_BUDGET: usize = 10_000;

/// The largest `max_active`: far beyond any site's concurrent visitors, and exact as a
/// double (Redis's Lua, the control room's JavaScript).
pub const MAX_MAX_ACTIVE: u64 = 1_000_000_000;

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
    /// How the room's door behaves ([`Mode`]); a snapshot without it is in the queue mode.
    #[serde(default)]
    pub mode: Mode,
    /// The operator's changes to the room's other settings ([`RoomChanges`]); empty: the
    /// file's hold. Kept with the rest, so they survive a restart and every replica sees
    /// them. Not in this type's serialized form (the embedded snapshot keeps them beside
    /// it, as JSON).
    #[serde(skip)]
    pub changes: RoomChanges,
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
        if self.max_active > MAX_MAX_ACTIVE {
            return invalid("max_active", "must be at most 1000000000");
        }
        if self.session_ttl < Duration::from_secs(1) {
            return invalid("session_ttl", "must be at least 1s");
        }
        if self.session_ttl > crate::clock::MAX_DURATION {
            return invalid("session_ttl", "must be at most 365 days");
        }
        if self.abandon_after < Duration::from_secs(1) {
            return invalid("abandon_after", "must be at least 1s");
        }
        if self.abandon_after > crate::clock::MAX_DURATION {
            return invalid("abandon_after", "must be at most 365 days");
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
            mode: patch.mode.unwrap_or(self.mode),
            changes: self.changes.merged(&patch.changes),
        };
        next.validate()?;
        Ok(next)
    }
}

/// A change to some of a room's [`RoomSettings`]; `None` leaves a field alone. Pause and
/// resume are patches of `paused`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SettingsPatch {
    /// New admission rate in visitors per second; must stay finite and above 0.
    pub rate: Option<f64>,
    /// New cap on visitors on the site at once; at least 1.
    pub max_active: Option<u64>,
    /// New idle time after which an admitted session gives its slot back.
    pub session_ttl: Option<Duration>,
    /// New heartbeat silence after which a waiting visitor leaves the line.
    pub abandon_after: Option<Duration>,
    /// `Some(true)` pauses admission, `Some(false)` resumes it.
    pub paused: Option<bool>,
    /// A new [`Mode`].
    pub mode: Option<Mode>,
    /// Changes of the room's other settings, merged into the live ones
    /// ([`RoomChanges::merged`]: a `null` gives a setting the file's value back); empty
    /// changes none.
    pub changes: RoomChanges,
    /// Write only if the live change of this name holds this value (`null`: it is absent),
    /// checked in the same atomic step as the write; otherwise nothing is written and the
    /// store answers [`StoreError::Conflict`], unless the change already holds the value
    /// this patch gives it: that is this very patch, written already (a call sent again
    /// after a broken connection), answered as written. So a read-check-write of several
    /// changes (a room's events) expects the revision it read and writes a new one unique
    /// to it.
    pub expect: Option<(String, serde_json::Value)>,
}

impl SettingsPatch {
    /// A patch that only pauses the room.
    pub fn pause() -> Self {
        SettingsPatch {
            paused: Some(true),
            ..Default::default()
        }
    }

    /// A patch that only resumes the room.
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
    /// The drop's opening, admission and closing times; empty for an ordinary room.
    pub schedule: Schedule,
    /// Visitors collected during the draw are placed by a salted hash of their id.
    pub lottery: bool,
    /// Places in line at once from one client key (one client, one fair share); 0: no cap.
    /// A newcomer over it is refused with [`super::RefusedReason::PlacesPerClient`].
    pub max_places_per_client: u32,
    /// Sessions on the site at once from one client key; 0: no cap. A session counts
    /// against the client it is first used from (the fast path's newcomer, or the first
    /// request after admission from the line). A newcomer over it is refused with
    /// [`super::RefusedReason::SessionsPerClient`].
    pub max_sessions_per_client: u32,
    /// Distinct client keys one admitted session may be used from; 0: no cap. The first
    /// ones are remembered for the session's life; a request from one more is refused with
    /// [`super::RefusedReason::SessionClients`] (that request only: the session stays).
    pub session_clients: u32,
    /// The queue breaker: with this many in line (the draw included) a newcomer gets
    /// [`super::Resolution::Full`]; 0: no limit. Those in line, and priority joins, are unaffected.
    pub max_waiting: u64,
}

impl RoomPolicy {
    /// The defaults for the per-client shares. [`RoomPolicy::default`] leaves every cap off
    /// (as it leaves the join limit off), so the config layer opts in explicitly.
    pub const DEFAULT_MAX_PLACES_PER_CLIENT: u32 = 64;
    /// Default for [`RoomPolicy::max_sessions_per_client`].
    pub const DEFAULT_MAX_SESSIONS_PER_CLIENT: u32 = 32;
    /// Default for [`RoomPolicy::session_clients`].
    pub const DEFAULT_SESSION_CLIENTS: u32 = 4;

    /// `self` with the default per-client shares.
    pub fn with_default_shares(self) -> Self {
        RoomPolicy {
            max_places_per_client: Self::DEFAULT_MAX_PLACES_PER_CLIENT,
            max_sessions_per_client: Self::DEFAULT_MAX_SESSIONS_PER_CLIENT,
            session_clients: Self::DEFAULT_SESSION_CLIENTS,
            ..self
        }
    }
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
