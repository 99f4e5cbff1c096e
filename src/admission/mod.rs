//! The per-replica side of admission, and the only door to the store: the pass driver
//! that runs each room's admission pass every `admit_interval`, the one-second statistics
//! cache that pages, ETAs and metrics read instead of the store, and the facade the rest of
//! the product calls. Its parts: the session cache that lets admitted visitors through
//! without a store round trip per request (`sessions`), closed-loop admission's
//! per-replica side (`adaptive`) and the store's health (`health`).

mod adaptive;
mod changes;
mod events_applier;
mod health;
mod modes;
mod sessions;
mod stats_cache;

pub use adaptive::RateView;
pub use health::StoreHealth;
pub use sessions::{SESSION_CONFIRM_WINDOW, SESSION_FLUSH};

use adaptive::AdaptiveRooms;
pub use changes::{Applied, ChangesListener};
use sessions::SessionCache;
pub use stats_cache::CachedStats;
use stats_cache::{LedgerView, StatsCache, eta_at};

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::events::{Event, EventKind, EventSink};
pub use crate::fairness::eta::Eta;
use crate::fairness::eta::EtaLedger;
use crate::queue::{
    ChallengeSpend, ClientKey, GrantUse, Join, PassReport, Phase, Place, QueueQuery, QueueStore,
    RefusedReason, Resolution, Spent, StoreError, StoreResult, VisitorId, VisitorRef, VisitorState,
    WaitingEntry,
};

/// The observed admission rate is measured over this window.
const RATE_WINDOW: Duration = Duration::from_secs(60);

/// How often the statistics cache refreshes.
pub const STATS_INTERVAL: Duration = Duration::from_secs(1);

/// Admission as the rest of the product sees it: the store plus this replica's caches.
///
/// This is the only door to the store for request-time, ticker and admin work: every call
/// goes through `Admission::observe`, so every failure feeds [`StoreHealth`] (readiness,
/// fail-open, the status endpoint).
pub struct Admission {
    store: Arc<dyn QueueStore>,
    events: EventSink,
    sessions: SessionCache,
    stats: StatsCache,
    health: StoreHealth,
    /// The ranges this replica showed waiting visitors first, and what came of them (the
    /// honest ETA).
    eta: EtaLedger,
    /// The store's clock when it has one in this process, else the system's: waits are
    /// timed on it.
    clock: Clock,
    /// Closed-loop admission: the rooms with `adaptive:`, their observations of
    /// the origin and the shared state as last seen.
    adaptive: AdaptiveRooms,
    /// How long visitors admitted out of the line waited, by room (see [`TimeInLine`]).
    time_in_line: TimeInLine,
    /// Each room's live mode (see `modes`).
    modes: modes::Modes,
    /// Each room's operator changes as last seen, and who to tell (see `changes`).
    changes: changes::Changes,
    /// The configured rooms: those the passes admit into and the statistics refresh
    /// reads (a reload swaps them).
    rooms: arc_swap::ArcSwap<Vec<String>>,
    /// Where scheduled events' applications are audited (see `events_applier`).
    event_audit: events_applier::EventAudit,
    /// Each pass's admissions, for this replica's live streams to tell at once (see
    /// [`Admission::passes`]).
    passes: tokio::sync::broadcast::Sender<PassAdmitted>,
    /// The readiness probe's last ping of the store: when, and why it failed if it did
    /// (see [`Admission::ping`]).
    last_ping: tokio::sync::Mutex<Option<(tokio::time::Instant, Option<String>)>>,
}

/// How long one readiness ping of the store answers for every probe that follows.
pub const PING_REUSE: Duration = Duration::from_millis(500);

/// Visitors one admission pass of this replica let in, and those other replicas' passes
/// let in since its previous one (with Redis: [`PassReport::admitted_elsewhere`]).
#[derive(Clone, Debug, PartialEq)]
pub struct PassAdmitted {
    /// The room they were admitted to.
    pub room: Arc<str>,
    /// Who: this pass's admissions in admission order, then the other replicas'.
    pub visitors: Arc<[VisitorId]>,
}

/// Passes a slow listener may fall behind by before it misses some: a missed pass is only
/// told later (at the live streams' next tick), never lost.
const PASSES_BUFFERED: usize = 64;

/// The room a series is about.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RoomLabel {
    /// The room's name.
    pub room: String,
}

/// Time in line, by room: from joining the line to being admitted out of it by a pass,
/// both times the store's. Observed by the replica whose pass admitted the visitor (the one
/// place that knows both), so each admission counts once across replicas and a sum over
/// replicas is the room's distribution; the fast path, a grant and a move to the front
/// are not waits in line and are not observed.
pub type TimeInLine = Family<RoomLabel, Histogram, fn() -> Histogram>;

/// The buckets of [`TimeInLine`]: 1 s to about 9 hours, doubling.
fn time_in_line_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 16))
}

/// The outcome of deciding one request for the site.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// On the site, since `since` (unix seconds: when this replica first saw the session
    /// admitted; the `admitted_at` of the admission token).
    Admitted {
        /// Unix seconds when this replica first saw the session admitted.
        since: u64,
    },
    /// In line (or in the draw), at this place.
    Waiting(crate::queue::Place),
    /// A newcomer over their address's join limit or share, or an admitted cookie used
    /// from one client too many; try again after `retry_after`. `reason` is `None` for
    /// the queue breaker's stand-in.
    Refused {
        /// How long until trying again may succeed.
        retry_after: Duration,
        /// Which limit or share refused; `None` for the queue breaker's stand-in.
        reason: Option<RefusedReason>,
    },
    /// The queue breaker (`max_waiting`): the line is full; this newcomer was not added.
    Full,
    /// The room's line is not open yet (before `queue_opens_at`).
    NotOpen,
    /// The room closed (after `closes_at`): nobody else gets in.
    Closed,
    /// The sold-out mode: this visitor is not on the site and nobody else gets in.
    SoldOut,
    /// Decided with [`Join::Known`]: nobody the store has waiting or on the site, and not
    /// joined (the door's to answer).
    Newcomer,
    /// The store did not answer; `fail_open` says whether to proxy anyway.
    Stalled {
        /// Proxy anyway: `fail_open` is on and the outage has outlasted `fail_open_after`.
        fail_open: bool,
    },
}

/// A challenge's answer whose id was spent already, by another visitor, on any replica
/// (or whose expiry has passed by the store's clock): a replay, refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the challenge was spent already")]
pub struct Replayed;

impl Admission {
    /// The admission layer over `store`; `fail_open_after` is `None` when fail-open is off.
    pub fn new(
        store: Arc<dyn QueueStore>,
        fail_open_after: Option<Duration>,
        events: EventSink,
    ) -> Self {
        let clock = store.clock().unwrap_or_else(Clock::system);
        Admission {
            store,
            events,
            sessions: SessionCache::default(),
            stats: StatsCache::default(),
            health: StoreHealth::new(fail_open_after),
            eta: EtaLedger::default(),
            clock,
            adaptive: AdaptiveRooms::new(),
            time_in_line: Family::new_with_constructor(time_in_line_histogram),
            modes: modes::Modes::default(),
            changes: changes::Changes::default(),
            rooms: arc_swap::ArcSwap::default(),
            event_audit: Default::default(),
            passes: tokio::sync::broadcast::channel(PASSES_BUFFERED).0,
            last_ping: tokio::sync::Mutex::new(None),
        }
    }

    /// The admissions of this replica's passes from now on, as they happen (and those of
    /// other replicas' passes, as each pass hears of them: [`PassAdmitted`]). A waiting
    /// visitor's stream hears of its admission from here at once rather than at its next
    /// tick, so the wait the visitor sees is the one the ETA ledger records (docs/fairness.md,
    /// "Honest ETA").
    pub fn passes(&self) -> tokio::sync::broadcast::Receiver<PassAdmitted> {
        self.passes.subscribe()
    }

    /// The configured rooms from now on: the passes admit into them and the statistics
    /// refresh reads them (a room left out keeps its line in the store, untouched).
    pub fn set_rooms(&self, rooms: Vec<String>) {
        self.rooms.store(Arc::new(rooms));
    }

    /// Opens `room` in the store while serving (a reload added it): seeded from the file
    /// unless the store already holds the room's live settings (a room removed and added
    /// again finds its line as it was), with its policy and closed-loop admission.
    pub async fn open_room(
        &self,
        room: &crate::config::RoomConfig,
    ) -> StoreResult<crate::queue::Seeded> {
        let seed = crate::queue::RoomSettings::seed(room);
        let policy = crate::queue::RoomPolicy::of(room);
        let seeded = self.observe(
            self.store
                .open_room(&room.name, &seed, &policy, false)
                .await,
        )?;
        self.configure_adaptive(&room.name, room.adaptive.clone())
            .await?;
        Ok(seeded)
    }

    /// Time in line by room (what `anteroom_time_in_line_seconds` exports).
    pub fn time_in_line(&self) -> &TimeInLine {
        &self.time_in_line
    }

    /// This replica's honest-ETA ledger.
    pub fn eta_ledger(&self) -> &EtaLedger {
        &self.eta
    }

    /// The raw store, for tests that drive its clock or inspect it directly. Product code
    /// goes through the methods below so that failures are recorded.
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn store_for_tests(&self) -> &Arc<dyn QueueStore> {
        &self.store
    }

    /// Records the outcome of one store call in [`StoreHealth`] and hands it back.
    fn observe<T>(&self, result: StoreResult<T>) -> StoreResult<T> {
        match &result {
            Ok(_) => self.health.record_ok(),
            Err(StoreError::Unavailable(reason)) => self.health.record_failure(reason),
            Err(_) => {}
        }
        result
    }

    /// Whether the store answers (`/__anteroom/readyz`). The probe answers everyone,
    /// banned clients included, so a flood of probes must not be a flood of store calls:
    /// one ping at a time, and its answer stands for [`PING_REUSE`].
    pub async fn ping(&self) -> StoreResult<()> {
        let mut last = self.last_ping.lock().await;
        if let Some((at, failure)) = &*last
            && at.elapsed() < PING_REUSE
        {
            return match failure {
                None => Ok(()),
                Some(reason) => Err(StoreError::Unavailable(reason.clone())),
            };
        }
        let result = self.observe(self.store.ping().await);
        let failure = match &result {
            Ok(()) => None,
            Err(StoreError::Unavailable(reason)) => Some(reason.clone()),
            Err(e) => Some(e.to_string()),
        };
        *last = Some((tokio::time::Instant::now(), failure));
        result
    }

    /// The room's lottery record, for `GET /__anteroom/rooms/{room}/draw` and
    /// the receipts; `hashes` asks for the list (after the doors only).
    pub async fn draw(&self, room: &str, hashes: bool) -> StoreResult<crate::queue::DrawRecord> {
        self.observe(self.store.draw(room, hashes).await)
    }

    /// The live ticker's batched heartbeat: the state of each of `visitors` in `room`.
    pub async fn heartbeat(
        &self,
        room: &str,
        visitors: &[VisitorId],
    ) -> StoreResult<Vec<VisitorState>> {
        let states = self.observe(self.store.heartbeat(room, visitors).await)?;
        // A visitor another replica's pass let in that this replica's passes have not heard
        // of (an older replica's pass, or past what a pass reads) is first seen admitted
        // here (or by their next request); one no longer in line leaves the ledger.
        let now = self.clock.now_ms();
        for (&visitor, state) in visitors.iter().zip(&states) {
            match state {
                VisitorState::Admitted => {
                    self.eta.admitted(room, visitor, now);
                }
                VisitorState::Unknown => self.eta.forget(room, visitor),
                VisitorState::Waiting(_) => {}
            }
        }
        Ok(states)
    }

    /// The live settings of `room`, read from the store (not the cache).
    pub async fn settings(&self, room: &str) -> StoreResult<crate::queue::RoomSettings> {
        self.observe(self.store.stats(room).await)
            .map(|s| s.settings)
    }

    /// Changes `room`'s live settings (admin API).
    pub async fn update_settings(
        &self,
        room: &str,
        patch: &crate::queue::SettingsPatch,
    ) -> StoreResult<crate::queue::RoomSettings> {
        let settings = self.observe(self.store.update_settings(room, patch).await)?;
        self.modes.set(room, settings.mode);
        self.record_changes(room, &settings.changes).await;
        Ok(settings)
    }

    /// Empties `room`'s line (admin API); returns how many were removed.
    pub async fn flush(&self, room: &str) -> StoreResult<u64> {
        self.observe(self.store.flush(room).await)
    }

    /// The admin's Queue view: the head of `room`'s line, or one visitor by reference.
    pub async fn queue(&self, room: &str, query: QueueQuery) -> StoreResult<Vec<WaitingEntry>> {
        self.observe(self.store.queue(room, query).await)
    }

    /// Moves the waiting visitor with `reference` to position 1 (admin API); publishes
    /// `visitor_prioritized`. Returns the visitor's new place.
    pub async fn move_to_front(
        &self,
        room: &str,
        reference: VisitorRef,
    ) -> StoreResult<(VisitorId, Place)> {
        // Found first for the event's visitor id: the store's move answers with the place.
        let found = self.observe(self.store.queue(room, QueueQuery::Ref(reference)).await)?;
        let visitor = found
            .first()
            .map(|e| e.visitor)
            .ok_or(StoreError::NotWaiting(reference))?;
        let place = self.observe(self.store.move_to_front(room, reference).await)?;
        // The range they were shown assumed the line ahead of them; it no longer applies.
        self.eta.forget(room, visitor);
        self.events
            .publish(Event::visitor(EventKind::VisitorPrioritized, room, visitor));
        Ok((visitor, place))
    }

    /// Spends a priority grant's nonce for `visitor`; shared by every replica.
    pub async fn spend_grant(
        &self,
        room: &str,
        nonce: &str,
        visitor: VisitorId,
        expires_at_ms: u64,
    ) -> StoreResult<GrantUse> {
        self.observe(
            self.store
                .spend_grant(room, nonce, visitor, expires_at_ms)
                .await,
        )
    }

    /// Gives back a grant `visitor` spent that gave them no priority (see
    /// [`QueueStore::release_grant`]).
    pub async fn release_grant(
        &self,
        room: &str,
        nonce: &str,
        visitor: VisitorId,
    ) -> StoreResult<()> {
        self.observe(self.store.release_grant(room, nonce, visitor).await)
    }

    /// Unix milliseconds by the store's clock when it has one in this process (the
    /// embedded store, which tests drive), else the system's: what challenges are issued
    /// and checked at.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Decides one request for the site from `visitor` in `room`, coming from `client`
    /// (whose join limit applies if this is a newcomer).
    pub async fn decide(&self, room: &str, visitor: VisitorId, client: ClientKey) -> Decision {
        self.decide_with(room, visitor, client, Join::Back).await
    }

    /// [`Admission::decide`] with where a newcomer (or a waiting visitor) is put:
    /// [`Join::Front`] for a spent priority grant, which also publishes
    /// `visitor_prioritized` when it leaves them waiting at position 1.
    pub async fn decide_with(
        &self,
        room: &str,
        visitor: VisitorId,
        client: ClientKey,
        join: Join,
    ) -> Decision {
        if let Some(decision) = self.decided_before_the_store(room, visitor, client).await {
            return decision;
        }
        let resolved = self.observe(self.store.resolve_with(room, visitor, client, join).await);
        self.decision(room, visitor, client, join, resolved)
    }

    /// [`Admission::decide`] for the answer to a challenge: `visitor`, when the store does
    /// not have them waiting or on the site, joins only by spending `challenge`'s id, in
    /// the same store call ([`QueueStore::resolve_spending`]). [`Replayed`] when the id was
    /// spent by someone else or has expired. A store that does not answer is
    /// [`Decision::Stalled`] without fail-open: nothing was spent, and nobody joined.
    pub async fn decide_spending(
        &self,
        room: &str,
        visitor: VisitorId,
        client: ClientKey,
        challenge: ChallengeSpend<'_>,
    ) -> Result<Decision, Replayed> {
        if let Some(decision) = self.decided_before_the_store(room, visitor, client).await {
            return Ok(decision);
        }
        let spent = self
            .store
            .resolve_spending(room, visitor, client, challenge);
        let resolved = match self.observe(spent.await) {
            Ok(Spent::Replayed) => return Err(Replayed),
            Ok(Spent::Resolved(resolution)) => Ok(resolution),
            Err(e) => Err(e),
        };
        Ok(
            match self.decision(room, visitor, client, Join::Back, resolved) {
                Decision::Stalled { .. } => Decision::Stalled { fail_open: false },
                decision => decision,
            },
        )
    }

    /// What every decision answers before it asks the store to resolve: a visitor this
    /// replica has confirmed on the site recently is on it (the session cache), and the
    /// sold-out mode turns away anyone not on the site.
    async fn decided_before_the_store(
        &self,
        room: &str,
        visitor: VisitorId,
        client: ClientKey,
    ) -> Option<Decision> {
        if let Some(since) =
            self.sessions
                .confirmed_since(room, visitor, client, self.confirm_window(room))
        {
            return Some(Decision::Admitted { since });
        }
        self.sold_out(room, visitor).await
    }

    /// The decision for `visitor` from the store's answer to a resolve with `join` (its
    /// health already observed), and what it tells this replica (the session cache, the
    /// ETA ledger, events).
    fn decision(
        &self,
        room: &str,
        visitor: VisitorId,
        client: ClientKey,
        join: Join,
        resolved: StoreResult<Resolution>,
    ) -> Decision {
        match resolved {
            Ok(Resolution::Admitted { newly }) => {
                let since = self.sessions.confirm(room, visitor, client);
                if join == Join::Front {
                    // Let in ahead of the line by a grant: not the estimate's doing.
                    self.eta.forget(room, visitor);
                } else {
                    self.eta.admitted(room, visitor, self.clock.now_ms());
                }
                if newly {
                    self.events
                        .publish(Event::visitor(EventKind::VisitorAdmitted, room, visitor));
                }
                Decision::Admitted { since }
            }
            Ok(Resolution::Waiting { place, joined }) => {
                if joined || join == Join::Front {
                    // A fresh place (back after abandoning, or moved to the front): a range
                    // shown for an earlier one says nothing about this wait.
                    self.eta.forget(room, visitor);
                }
                if joined {
                    self.events
                        .publish(Event::visitor(EventKind::VisitorJoined, room, visitor));
                }
                if join == Join::Front {
                    self.events.publish(Event::visitor(
                        EventKind::VisitorPrioritized,
                        room,
                        visitor,
                    ));
                }
                Decision::Waiting(place)
            }
            Ok(Resolution::Refused {
                retry_after,
                reason,
            }) => Decision::Refused {
                retry_after,
                reason: Some(reason),
            },
            Ok(Resolution::Full) => Decision::Full,
            Ok(Resolution::NotOpen) => Decision::NotOpen,
            Ok(Resolution::Closed) => Decision::Closed,
            Ok(Resolution::Newcomer) => Decision::Newcomer,
            Err(StoreError::Unavailable(_)) => Decision::Stalled {
                fail_open: self.health.failing_open(),
            },
            Err(other) => {
                // An unknown room here means the store lost it (e.g. Redis flushed); hold
                // the visitor rather than admit.
                tracing::error!(room, error = %other, "store refused to resolve a visitor");
                Decision::Stalled { fail_open: false }
            }
        }
    }

    /// Ends `visitor`'s session in `room` now (the origin's `X-Anteroom-End-Session: 1`):
    /// the store frees the slot for the next pass, and this replica stops
    /// trusting the session at once, from every client. Returns whether there was a
    /// session.
    pub async fn end_session(&self, room: &str, visitor: VisitorId) -> StoreResult<bool> {
        self.sessions.forget(room, visitor);
        let ended = self.observe(self.store.end_session(room, visitor).await)?;
        if ended {
            self.events
                .publish(Event::visitor(EventKind::SessionExpired, room, visitor));
        }
        Ok(ended)
    }

    /// Where `visitor` stands in `room`, without joining anyone (assets and streams):
    /// the session cache first, else one heartbeat read. `None` when the store did
    /// not answer.
    pub async fn state_of(
        &self,
        room: &str,
        visitor: VisitorId,
        client: ClientKey,
    ) -> Option<crate::queue::VisitorState> {
        if self
            .sessions
            .confirmed_since(room, visitor, client, self.confirm_window(room))
            .is_some()
        {
            return Some(crate::queue::VisitorState::Admitted);
        }
        let states = self.heartbeat(room, &[visitor]).await.ok()?;
        states.into_iter().next()
    }

    /// Keeps the sessions of `visitors` alive past `session_ttl` (open streams),
    /// in one store call; answers, for each, whether the store still has them on the site.
    pub async fn touch_sessions(
        &self,
        room: &str,
        visitors: &[VisitorId],
    ) -> StoreResult<Vec<bool>> {
        self.observe(self.store.touch_sessions(room, visitors).await)
    }

    /// Flushes the requests the session cache answered since the last flush: one
    /// `touch_sessions` per room records them as the sessions' activity, and the store's
    /// answer renews this replica's trust in those still on the site and ends it for the
    /// others. A store that does not answer renews nothing, so the trust runs out within
    /// [`SESSION_CONFIRM_WINDOW`] and requests go to the store again (and stall or fail
    /// open as it decides).
    pub async fn flush_sessions(&self) {
        for (room, visitors) in self.sessions.take_seen() {
            match self.observe(self.store.touch_sessions(&room, &visitors).await) {
                Ok(on_site) => {
                    let window = self.confirm_window(&room);
                    self.sessions.renew(&room, &visitors, &on_site, window)
                }
                Err(e) => tracing::debug!(room, error = %e, "session flush failed"),
            }
        }
    }

    fn confirm_window(&self, room: &str) -> Duration {
        self.stats
            .get(room)
            .map(|s| SESSION_CONFIRM_WINDOW.min(s.stats.settings.session_ttl / 2))
            .unwrap_or(SESSION_CONFIRM_WINDOW)
    }

    /// The last known counters of `room`, at most about a second old.
    pub fn cached_stats(&self, room: &str) -> Option<CachedStats> {
        self.stats.get(room)
    }

    /// The queue-event sink passes and joins are reported to.
    pub fn events(&self) -> &EventSink {
        &self.events
    }

    fn publish_pass(&self, room: &str, report: &PassReport) {
        if !self.events.is_enabled() {
            return;
        }
        for (kind, visitors) in [
            (EventKind::VisitorAdmitted, &report.admitted),
            (EventKind::VisitorAbandoned, &report.abandoned),
            (EventKind::SessionExpired, &report.expired),
        ] {
            for &visitor in visitors {
                self.events.publish(Event::visitor(kind, room, visitor));
            }
        }
    }

    /// The store's health as seen by this replica's calls.
    pub fn health(&self) -> &StoreHealth {
        &self.health
    }

    /// An estimated wait for the visitor at `position`, from the room's
    /// [`crate::fairness::eta::Pace`]: the admission rate it achieves, or "estimating"
    /// until it has seen enough of it.
    pub fn eta(&self, room: &str, position: u64) -> Eta {
        self.stats
            .pace(room)
            .map_or(Eta::estimating(0), |(pace, _)| pace.eta(position))
    }

    /// The estimated wait of a waiting visitor. Without a position (a lottery draw) their
    /// place could be anywhere in the draw: from no wait to the whole draw's.
    pub fn eta_for(&self, room: &str, place: &crate::queue::Place) -> Eta {
        eta_at(self.stats.pace(room).map(|(pace, _)| pace), place)
    }

    /// The estimated wait [`Admission::eta_for`] gives a waiting visitor, as it is about to
    /// be shown to them (the waiting page, its JSON, a live-stream event). The first range
    /// shown to a visitor in line is remembered, to be compared with their actual wait when
    /// they are admitted. Not during a lottery draw (the wait includes the time
    /// to the doors, which the page counts down instead) nor while the room is paused (the
    /// page says so; the range assumes a moving line).
    pub fn show_eta(&self, room: &str, visitor: VisitorId, place: &Place) -> Eta {
        let pace = self.stats.pace(room);
        let eta = eta_at(pace.map(|(pace, _)| pace), place);
        if place.position.is_some() && place.phase == Phase::Queueing && !place.paused {
            let epoch = pace.map_or(0, |(_, epoch)| epoch);
            self.eta
                .shown(room, visitor, eta, self.clock.now_ms(), epoch);
        }
        eta
    }

    /// One admission pass of `room`: its admissions settle the ETA ledger and are
    /// published, and its duration is kept for the stats.
    pub async fn admit_pass(&self, room: &str) -> StoreResult<PassReport> {
        let started = Instant::now();
        let report = self.observe(self.store.admit_pass(room).await)?;
        self.stats.record_pass(room, started.elapsed());
        let now = self.clock.now_ms();
        for &visitor in &report.admitted {
            self.eta.admitted(room, visitor, now);
        }
        // Another replica's pass let these in within this pass's interval: a range this
        // replica showed them is settled now, not at their stream's next heartbeat.
        for &visitor in &report.admitted_elsewhere {
            self.eta.admitted(room, visitor, now);
        }
        let told = report.admitted.len() + report.admitted_elsewhere.len();
        if told > 0 && self.passes.receiver_count() > 0 {
            let mut visitors = Vec::with_capacity(told);
            visitors.extend_from_slice(&report.admitted);
            visitors.extend_from_slice(&report.admitted_elsewhere);
            // Nobody listening (no live hub yet) is not an error.
            let _ = self.passes.send(PassAdmitted {
                room: room.into(),
                visitors: visitors.into(),
            });
        }
        if report.joined_ms.iter().any(Option::is_some) {
            let waits = self.time_in_line.get_or_create(&RoomLabel {
                room: room.to_owned(),
            });
            for &joined in report.joined_ms.iter().flatten() {
                waits.observe(now.saturating_sub(joined) as f64 / 1000.0);
            }
        }
        for &visitor in &report.abandoned {
            self.eta.forget(room, visitor);
        }
        self.publish_pass(room, &report);
        Ok(report)
    }

    /// Refreshes the statistics of every room once.
    pub async fn refresh_stats(&self, rooms: &[String]) {
        self.eta.prune(self.clock.now_ms());
        for room in rooms {
            let mut read = self.observe(self.store.stats(room).await);
            // The room's current event applied when it moved; then read again, so the
            // cache shows what it wrote.
            if let Ok(stats) = &read {
                match self.apply_events(room, &stats.settings.changes).await {
                    Ok(true) => read = self.observe(self.store.stats(room).await),
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(room, error = %e, "cannot apply the room's current event")
                    }
                }
            }
            match read {
                Ok(stats) => {
                    self.modes.set(room, stats.settings.mode);
                    self.record_changes(room, &stats.settings.changes).await;
                    let adaptive = self.rate_view(room, stats.settings.rate);
                    let ledger = LedgerView {
                        report: self.eta.report(room),
                        forgotten: self.eta.forgotten(room),
                        revised: self.eta.revised(room),
                    };
                    self.stats.record(room, stats, ledger, adaptive)
                }
                Err(StoreError::Unavailable(_)) => {}
                Err(other) => tracing::error!(room, error = %other, "cannot read room stats"),
            }
        }
        // Forget sessions that can no longer be trusted, bounding the cache.
        self.sessions.prune(SESSION_CONFIRM_WINDOW);
    }

    /// Runs until `stop`: one admission pass per room every `interval`, and the statistics
    /// refresh every second.
    pub async fn run(
        self: Arc<Self>,
        rooms: Vec<String>,
        interval: Duration,
        stop: CancellationToken,
    ) {
        let mut passes = tokio::time::interval(interval);
        passes.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut stats = tokio::time::interval(STATS_INTERVAL);
        stats.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let failures = crate::log_limiter::LogLimiter::new(Duration::from_secs(10));
        self.set_rooms(rooms);
        loop {
            let rooms = self.rooms.load_full();
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = passes.tick() => {
                    for room in rooms.iter() {
                        if let Err(e) = self.admit_pass(room).await
                            && failures.allow()
                        {
                            tracing::warn!(room, error = %e, "admission pass failed; nobody is admitted until the store answers");
                        }
                    }
                }
                _ = stats.tick() => {
                    // SESSION_FLUSH and STATS_INTERVAL are both a second: one timer.
                    self.flush_sessions().await;
                    // Closed-loop admission decides once a second.
                    self.adapt().await;
                    self.refresh_stats(&rooms).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod eta_simulation;

#[cfg(test)]
mod eta_drop_simulation;
