//! The store boundary: the queue, token bucket, sessions, runtime settings and counters of
//! every room live behind [`QueueStore`], so admission, HTTP and tests never know which store
//! is underneath.
//!
//! Each operation is one atomic step on one room. Time comes from the store itself (the
//! embedded store's [`crate::clock::Clock`], Redis `TIME`), never from the caller, so several
//! replicas sharing a store cannot disagree about it.

use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;

pub mod changes;
pub mod fenwick;
pub mod memory;
pub mod mode;
pub mod redis;
pub mod redis_client;
mod settings;

#[cfg(test)]
pub mod conformance;

pub use crate::fairness::adaptive::{AdaptiveState, OriginExchange, OriginReport};
pub use crate::identity::ClientKey;
pub use crate::visitor::{VisitorId, VisitorRef};
pub use changes::RoomChanges;
pub use memory::MemoryStore;
pub use mode::{Mode, RoomPhase};
pub use redis::RedisStore;
pub use settings::{
    MAX_MAX_ACTIVE, REAP_BUDGET, RoomPolicy, RoomSettings, Schedule, SettingsPatch, unix_ms,
};

/// Where a room is in its schedule, read from the store's clock.
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
    /// The phase's snake_case name, as serialized and shown on pages and in the API.
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
    Admitted {
        /// This call let them in (the fast path).
        newly: bool,
    },
    /// In line (or in the draw). `joined` when this very call put them there.
    Waiting {
        /// Their place in line (or in the draw).
        place: Place,
        /// This call put them in line.
        joined: bool,
    },
    /// Refused for `reason`; counted in `total_refused`, except
    /// [`RefusedReason::SessionClients`], which refuses one request of a visitor on the
    /// site rather than a visitor. Only [`RefusedReason::JoinLimit`] is a strike.
    Refused {
        /// Which limit or share refused them.
        reason: RefusedReason,
        /// How long until trying again may succeed (the refusal's `Retry-After`).
        retry_after: Duration,
    },
    /// The queue breaker (`max_waiting`): the line is full and this newcomer was not added;
    /// counted in `total_refused`.
    Full,
    /// Before `queue_opens_at`: nobody is queued (and the visitor was not).
    NotOpen,
    /// After `closes_at`: nobody else is admitted; only sessions already on the site go on.
    Closed,
    /// Asked with [`Join::Known`], or with [`Join::Now`] when the fast path could not let
    /// them in: neither waiting nor on the site, so a newcomer, who was not joined (nothing
    /// was stored).
    Newcomer,
}

/// Why [`Resolution::Refused`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusedReason {
    /// The join limit of the client key (`retry_after`: the rest of its window). A strike.
    JoinLimit,
    /// `max_places_per_client`: the client already holds that many places in line.
    PlacesPerClient,
    /// `max_sessions_per_client`: the client already holds that many sessions on the site.
    SessionsPerClient,
    /// `session_clients`: this admitted session is already used from that many other
    /// clients.
    SessionClients,
}

impl RefusedReason {
    /// Whether the caller should strike the client (only the join limit is; the shares are
    /// met innocently by shared addresses).
    pub fn is_strike(self) -> bool {
        self == RefusedReason::JoinLimit
    }
}

/// The `retry_after` of a share refusal: a share frees up when one of the client's visitors
/// is admitted, leaves or expires, which the store cannot predict; this is a polite hint.
pub const SHARE_RETRY_AFTER: Duration = Duration::from_secs(30);

/// How a newcomer or a waiting visitor is put in line by [`QueueStore::resolve_with`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Join {
    /// The back of the line (FIFO).
    #[default]
    Back,
    /// Position 1, ahead of everyone (a priority grant): admitted on the spot when nobody
    /// waits and the limits allow, else by the next pass (the rate and `max_active` still
    /// apply). A waiting visitor is moved to the front; someone on the site stays so. The
    /// join limit and per-client shares apply as to any newcomer; the queue breaker does
    /// not (the site chose to let this visitor in ahead of the line).
    Front,
    /// Nobody new: a visitor waiting or on the site is resolved as with [`Join::Back`],
    /// anyone else is [`Resolution::Newcomer`] and is not joined (a request the door must
    /// see first). The schedule still answers first (not open, closed).
    Known,
    /// Now or not at all: a visitor waiting or on the site is resolved as with
    /// [`Join::Back`]; a newcomer is admitted on the spot when the fast path allows it
    /// (nobody waits, the limits allow; the join limit and the shares apply as to any
    /// newcomer), and otherwise is [`Resolution::Newcomer`] and is not joined (a stream's
    /// first request, which can be let in but never put in line).
    Now,
}

/// A solved challenge's one-time id, spent by the newcomer's join in the same atomic
/// step ([`QueueStore::resolve_spending`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChallengeSpend<'a> {
    /// The challenge's id (`crate::challenge::Verified::id`: 22 characters of
    /// `[A-Za-z0-9_-]`, signed, so safe as a store key).
    pub id: &'a str,
    /// Unix ms of the challenge's own expiry: the spent id is kept until then.
    pub expires_at_ms: u64,
}

/// What [`QueueStore::resolve_spending`] did.
#[derive(Clone, Debug, PartialEq)]
pub enum Spent {
    /// The visitor resolved, as [`QueueStore::resolve`] would: a visitor already waiting
    /// or on the site spent nothing; a newcomer spent the id (or had spent it before:
    /// a repeated call) first.
    Resolved(Resolution),
    /// The id was spent by another visitor, or its expiry has passed by the store's
    /// clock: a replay. Nothing else was done.
    Replayed,
}

/// One waiting visitor as the admin's Queue view shows them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WaitingEntry {
    /// The store's id; never shown to admins (the reference is).
    #[serde(skip)]
    pub visitor: VisitorId,
    /// The short reference the visitor sees on their page, serialized as `ref`.
    #[serde(rename = "ref")]
    pub reference: VisitorRef,
    /// `None` for a lottery entrant before the doors open.
    pub position: Option<u64>,
    /// Unix ms when they took their current place: their join, the doors for a lottery
    /// entrant, or the move for one moved to the front. `None` while in the lottery draw
    /// (and for a Redis ticket issued before this field existed).
    pub joined_at_ms: Option<u64>,
    /// Unix ms of their last heartbeat.
    pub last_seen_ms: u64,
}

/// What [`QueueStore::queue`] is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueQuery {
    /// The first `limit` in line, in order (at most [`QueueQuery::MAX_LIMIT`]). A lottery
    /// draw before the doors has no order: only those moved to the front are listed.
    Head {
        /// How many to list, capped at [`QueueQuery::MAX_LIMIT`].
        limit: usize,
    },
    /// The one waiting visitor (in line or in a draw) with this reference;
    /// [`StoreError::NotWaiting`] when there is none.
    Ref(VisitorRef),
}

impl QueueQuery {
    /// The most entries one [`QueueQuery::Head`] may ask for.
    pub const MAX_LIMIT: usize = 1_000;
}

/// What [`QueueStore::spend_grant`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrantUse {
    /// First use: the grant applies.
    Fresh,
    /// Already spent by this same visitor: nothing more to grant, nothing to refuse.
    Again,
    /// Spent by another visitor, expired, or (embedded store) no room to remember it:
    /// refused.
    Taken,
}

/// A waiting visitor's place in line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    /// 1 for the head of the line; `None` during a lottery draw, where nobody has a place
    /// until the doors open.
    pub position: Option<u64>,
    /// Everyone in line (during the draw: everyone entered).
    pub waiting: u64,
    /// Whether the room is paused (the line holds still).
    pub paused: bool,
    /// Where the room is in its schedule.
    pub phase: Phase,
}

/// What a live stream reports for one visitor on a tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VisitorState {
    /// On the site: the page should go on to the origin.
    Admitted,
    /// Still waiting, at this place.
    Waiting(Place),
    /// Neither waiting nor on the site: abandoned, flushed, or never joined. The page should
    /// reload, which rejoins them at the back.
    Unknown,
}

/// What one admission pass did. Ids are reported so the events side channel can name them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PassReport {
    /// Visitors admitted by this pass, in admission order.
    pub admitted: Vec<VisitorId>,
    /// When each of `admitted` joined the line (unix ms, the store's clock), in the same
    /// order: what their time in line is measured from. `None` where the store does not
    /// know (an entry older than the record of it).
    pub joined_ms: Vec<Option<u64>>,
    /// Waiting visitors removed for missing heartbeats past `abandon_after`.
    pub abandoned: Vec<VisitorId>,
    /// Admitted sessions reaped for idling past `session_ttl`.
    pub expired: Vec<VisitorId>,
    /// Visitors other replicas' passes admitted since this replica's previous pass of the
    /// room, oldest first, so this replica's live streams and ETA ledger hear of them now
    /// rather than at the streams' next heartbeat. A bounded hint: one missed here is seen
    /// at that heartbeat. Always empty in the embedded store, where every pass is this
    /// replica's.
    pub admitted_elsewhere: Vec<VisitorId>,
}

/// A room's counters and live settings, as the control room and metrics show them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RoomStats {
    /// Visitors in line now (the draw included).
    pub waiting: u64,
    /// Sessions on the site now.
    pub active: u64,
    /// Visitors ever put in line, since the room's counters were created.
    pub total_joined: u64,
    /// Visitors ever admitted, from the line or by the fast path.
    pub total_admitted: u64,
    /// Sessions ever reaped for idling past `session_ttl`.
    pub total_expired: u64,
    /// Waiting visitors ever dropped for missing heartbeats.
    pub total_abandoned: u64,
    /// Newcomers ever refused (limits, shares, the queue breaker).
    pub total_refused: u64,
    /// Visitors ever admitted by the passthrough mode (in `total_admitted` too).
    pub total_passed_through: u64,
    /// Where the schedule stands (store time) as the counters were read.
    pub schedule: Phase,
    /// The room's live runtime settings.
    pub settings: RoomSettings,
    /// The lengths of the room's latest sessions to end, kept by the store whichever
    /// replica started or ended them: an input of the ETA (the site's turnover), not part
    /// of the admin API.
    #[serde(skip)]
    pub ended_sessions: EndedSessions,
}

/// The sessions a store keeps the length of, per room: the latest to end.
pub const SESSIONS_KEPT: u64 = 128;

/// The lengths of a room's latest [`SESSIONS_KEPT`] sessions to end, each from its
/// admission to its end (reaped after `session_ttl` idle, or ended by the origin), in the
/// store's liveness time (an outage of the store is not counted). A session whose start the
/// store does not know (restored from a snapshot, let in by the passthrough mode, or begun
/// before the store kept starts) is not counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EndedSessions {
    /// The sum of their lengths, in ms.
    pub total_ms: u64,
    /// How many there are (at most [`SESSIONS_KEPT`]).
    pub count: u64,
}

impl EndedSessions {
    /// Their mean length; `None` before any.
    pub fn mean(&self) -> Option<Duration> {
        (self.count > 0).then(|| Duration::from_millis(self.total_ms / self.count))
    }
}

/// A room's lottery as the public draw document needs it (docs/fairness.md, "Auditable
/// lottery"), from [`QueueStore::draw`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DrawRecord {
    /// The room's lottery salt, fixed when the room was first opened. Secret until the
    /// doors open: only its commitment may be shown before.
    pub salt: Vec<u8>,
    /// The phase by the store's clock (the doors are open once it is past
    /// [`Phase::Draw`]: [`Phase::Queueing`] or [`Phase::Closed`]).
    pub phase: Phase,
    /// Before the doors: how many are in the draw now. After: how many were drawn.
    pub entrants: u64,
    /// After the doors, when asked for: every drawn entrant's hash (SHA-256(salt ‖ id)),
    /// in no particular order. Fixed from the moment the doors open.
    pub hashes: Option<Vec<crate::fairness::draw::DrawHash>>,
}

impl DrawRecord {
    /// Whether the doors have opened (the salt and the list may be published).
    pub fn doors_open(&self) -> bool {
        matches!(self.phase, Phase::Queueing | Phase::Closed)
    }
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
    /// The store could not be reached or failed; the message says why.
    #[error("queue store unavailable: {0}")]
    Unavailable(String),
    /// No room of this name was opened in the store.
    #[error("unknown room {0:?}")]
    UnknownRoom(String),
    /// A value the store refuses: which field, and why.
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// The settings field or argument at fault, as the API names it.
        field: &'static str,
        /// What is wrong with it, for the operator.
        reason: String,
    },
    /// No visitor with this reference is waiting in the room (a 404 for the admin API).
    #[error("no waiting visitor with reference {0}")]
    NotWaiting(VisitorRef),
    /// A write's precondition ([`SettingsPatch::expect`]) no longer held: another write of
    /// the named change came first, and nothing was written.
    #[error("the room's {0} changed meanwhile; nothing was written")]
    Conflict(String),
}

/// The result of a store operation.
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
    /// The schedule, the join limit of `client`, its shares and the breaker apply to
    /// newcomers only: a visitor already waiting is never refused, and one on the site only
    /// by `session_clients`.
    ///
    /// Per-client shares: a newcomer is refused when `client` already holds
    /// `max_places_per_client` places or `max_sessions_per_client` sessions; a request of
    /// a visitor on the site from one client more than `session_clients` is refused (and
    /// does not keep the session alive). With `max_waiting` in line, a newcomer gets
    /// [`Resolution::Full`].
    async fn resolve(
        &self,
        room: &str,
        visitor: VisitorId,
        client: ClientKey,
    ) -> StoreResult<Resolution> {
        self.resolve_with(room, visitor, client, Join::Back).await
    }

    /// [`QueueStore::resolve`] with the place a newcomer (or a waiting visitor) gets:
    /// [`Join::Front`] is a priority grant's position 1.
    async fn resolve_with(
        &self,
        room: &str,
        visitor: VisitorId,
        client: ClientKey,
        join: Join,
    ) -> StoreResult<Resolution>;

    /// The admin's Queue view: the head of the line, or one waiting visitor by reference.
    /// Finding by reference scans the line (admin-only and rare; an index would cost memory
    /// per waiting visitor), in bounded steps so the store is never blocked for long.
    async fn queue(&self, room: &str, query: QueueQuery) -> StoreResult<Vec<WaitingEntry>>;

    /// Moves the waiting visitor with reference `reference` to position 1, ahead of
    /// everyone (a later move goes ahead of an earlier one); nobody else's order changes.
    /// During a lottery draw the visitor leaves the lot and holds position 1 at once, ahead
    /// of the whole draw when the doors open. Returns the new place;
    /// [`StoreError::NotWaiting`] when nobody waiting has that reference.
    async fn move_to_front(&self, room: &str, reference: VisitorRef) -> StoreResult<Place>;

    /// Spends a priority grant's `nonce` in `room` for `visitor`: the first use is
    /// [`GrantUse::Fresh`]; the nonce is then kept until `expires_at_ms` (unix ms), and
    /// every later use is [`GrantUse::Again`] by the same visitor (a reload of the page
    /// that carried it, which must not cost them their place) or [`GrantUse::Taken`] by
    /// anyone else. A nonce whose expiry has passed by the store's clock is
    /// [`GrantUse::Taken`] too. Shared by every replica of the store.
    async fn spend_grant(
        &self,
        room: &str,
        nonce: &str,
        visitor: VisitorId,
        expires_at_ms: u64,
    ) -> StoreResult<GrantUse>;

    /// Gives back a priority grant's `nonce` that `visitor` spent in `room` but that gave
    /// them no priority (the line not open yet, the client over its shares): the next use
    /// is [`GrantUse::Fresh`] again, by them or by anyone. A nonce spent by someone else,
    /// or not spent, is left as it is.
    async fn release_grant(&self, room: &str, nonce: &str, visitor: VisitorId) -> StoreResult<()>;

    /// [`QueueStore::resolve`] for the answer to a challenge, with the spend of its
    /// one-time id (see `crate::challenge`) in the same atomic step, so one call does both
    /// and no join happens without its spend. A visitor the store has waiting or on the
    /// site is resolved as such and spends nothing (a second tab's answer). For anyone
    /// else, once the schedule lets newcomers in (before that, [`Resolution::NotOpen`] or
    /// [`Resolution::Closed`] and nothing spent), the id is spent first: an atomic
    /// set-if-absent kept until `challenge.expires_at_ms` (unix ms), shared by every
    /// replica. Spent before by this same visitor (a call repeated after a broken
    /// connection, which must not refuse the join it already paid for) it counts as
    /// unspent; spent by anyone else, or past its expiry by the store's clock, the answer
    /// is [`Spent::Replayed`] and nothing else happens. Then the newcomer is resolved as
    /// [`QueueStore::resolve`] does (join limit, shares, breaker, fast path or the back of
    /// the line); a refusal there leaves the id spent.
    async fn resolve_spending(
        &self,
        room: &str,
        visitor: VisitorId,
        client: ClientKey,
        challenge: ChallengeSpend<'_>,
    ) -> StoreResult<Spent>;

    /// Ends a visitor's session now and gives the slot to the next pass (the origin's
    /// `X-Anteroom-End-Session: 1`, or a ban). Their client's session share frees up.
    /// Returns whether there was a session. Coming back is a newcomer.
    async fn end_session(&self, room: &str, visitor: VisitorId) -> StoreResult<bool>;

    /// Records activity for many sessions of one room at once, keeping them alive past
    /// `session_ttl` (open WebSocket/SSE streams; the batched last-seen flush of the
    /// admission layer). Returns, for each, whether the session is still on the site, so a
    /// stream whose session was ended can be closed. Never admits anyone.
    async fn touch_sessions(&self, room: &str, visitors: &[VisitorId]) -> StoreResult<Vec<bool>>;

    /// The live stream's tick for many visitors of one room at once: each waiting visitor's
    /// place (recording a heartbeat), admitted ones as such. Never joins anyone, and does
    /// not keep sessions alive (that is [`QueueStore::touch_sessions`]: a waiting page left
    /// open must not hold a slot).
    async fn heartbeat(&self, room: &str, visitors: &[VisitorId])
    -> StoreResult<Vec<VisitorState>>;

    /// One admission pass: reap idle sessions and abandoned waiters (bounded, catching up
    /// over passes), refill the bucket, admit from the head while both limits allow.
    /// Costs O(admitted + reaped), never O(depth). Nobody is admitted before `admits_at`
    /// nor after `closes_at`; the first pass at the doors orders a lottery draw (once).
    async fn admit_pass(&self, room: &str) -> StoreResult<PassReport>;

    /// The room's counters and live settings, read in one atomic step.
    async fn stats(&self, room: &str) -> StoreResult<RoomStats>;

    /// The room's lottery record (docs/fairness.md): its salt, the phase, the entrants,
    /// and, with `hashes` once the doors are open, every drawn entrant's draw hash. Opens
    /// the doors on a collected draw whose time has come, like every other operation. The
    /// draw is ordered by exactly these hashes, ascending, on every store. With Redis the
    /// list is read in bounded steps, so a large draw never blocks Redis for long.
    async fn draw(&self, room: &str, hashes: bool) -> StoreResult<DrawRecord> {
        let _ = (room, hashes);
        Err(StoreError::Unavailable(
            "this store keeps no lottery record".to_owned(),
        ))
    }

    /// Changes runtime settings; they apply from the next pass. Returns the new settings.
    async fn update_settings(&self, room: &str, patch: &SettingsPatch)
    -> StoreResult<RoomSettings>;

    /// Empties the line; sessions on the site are untouched. Returns how many were removed.
    async fn flush(&self, room: &str) -> StoreResult<u64>;

    /// Closed-loop admission (docs/fairness.md), once a second per replica: stores `report`
    /// as `replica`'s latest observations of the room's origin (replacing its previous one)
    /// and returns every report received within
    /// [`crate::fairness::adaptive::REPORT_STALE_MS`] (stale ones are dropped), the room's
    /// stored [`AdaptiveState`], and whether this call claimed the decision: at most one
    /// claim per room per [`crate::fairness::adaptive::CLAIM_EVERY_MS`], shared by every
    /// replica.
    async fn exchange_origin(
        &self,
        room: &str,
        replica: &str,
        report: &OriginReport,
    ) -> StoreResult<OriginExchange> {
        let _ = (replica, report);
        Err(StoreError::Invalid {
            field: "adaptive",
            reason: format!("this store does not support closed-loop admission ({room})"),
        })
    }

    /// Stores the room's [`AdaptiveState`] (`None` clears it). From now on the bucket
    /// refills at `min(rate, effective_rate)` (the configured `rate` is unchanged, and
    /// tokens earned so far keep the rate they were earned at), for passes and the fast
    /// path alike, on every replica.
    async fn set_adaptive(&self, room: &str, state: Option<&AdaptiveState>) -> StoreResult<()> {
        match state {
            None => Ok(()),
            Some(_) => Err(StoreError::Invalid {
                field: "adaptive",
                reason: format!("this store does not support closed-loop admission ({room})"),
            }),
        }
    }

    /// Whether the store answers.
    async fn ping(&self) -> StoreResult<()>;

    /// Makes the current state durable where the store keeps it locally (the embedded
    /// store's snapshot); a no-op for stores that are durable themselves.
    async fn persist(&self) -> StoreResult<()>;

    /// The clock the store reads, when it is this process's (the embedded store's), so what
    /// a replica times itself (the honest ETA's waits, docs/fairness.md) runs on the
    /// store's time, which tests drive. `None`: the replica uses the system clock.
    fn clock(&self) -> Option<crate::clock::Clock> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_is_8_unambiguous_characters_of_the_id() {
        let id = VisitorId([
            0xff, 0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
        ]);
        assert_eq!(id.reference().as_str(), "ZZZZZZZZ");
        assert_eq!(VisitorId([0; 16]).reference().as_str(), "00000000");
        // 0x0842108421 is 00001 repeated: every symbol is 1.
        let mut bytes = [0u8; 16];
        bytes[..5].copy_from_slice(&[0x08, 0x42, 0x10, 0x84, 0x21]);
        assert_eq!(VisitorId(bytes).reference().as_str(), "11111111");
        for _ in 0..1_000 {
            let id = VisitorId::random();
            let r = id.reference();
            assert_eq!(r.as_str().len(), 8);
            assert!(!r.as_str().contains(['I', 'L', 'O', 'U']), "{r}");
            assert!(r.matches(&id));
            assert_eq!(r.prefix(), id.0[..5]);
            assert_eq!(VisitorRef::parse(r.as_str()), Some(r));
        }
    }

    #[test]
    fn a_reference_is_read_as_a_person_types_it() {
        let r = VisitorRef::parse("1O0I-LABZ").unwrap();
        assert_eq!(r.as_str(), "10011ABZ");
        assert_eq!(VisitorRef::parse("10011abz"), Some(r));
        for bad in [
            "",
            "1234567",
            "123456789",
            "1234567U",
            "1234567é",
            "12345 67",
        ] {
            assert_eq!(VisitorRef::parse(bad), None, "{bad:?}");
        }
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            "\"10011ABZ\"",
            "JSON shows the text"
        );
    }
}
