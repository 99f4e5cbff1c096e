//! The one-second statistics cache: each room's counters as last read from the store, and
//! what this replica derives from them (the observed admission rate while somebody waited,
//! the limits' epoch that restarts the observation, the pace ranges are drawn from).

use std::collections::{HashMap, VecDeque};
use std::sync::RwLock;
use std::time::Duration;

use tokio::time::Instant;

use super::RATE_WINDOW;
use super::adaptive::RateView;
use crate::fairness::eta::{Eta, EtaReport, MIN_SESSIONS, MIN_SPREAD, Observed, Pace, Turnover};
use crate::queue::{Place, RoomStats};

/// What the ETA ledger says of a room, as the statistics cache keeps it.
pub(super) struct LedgerView {
    pub(super) report: EtaReport,
    pub(super) forgotten: u64,
    pub(super) revised: u64,
}

/// A room's counters as last read, with what this replica derived from them.
#[derive(Clone, Debug)]
pub struct CachedStats {
    /// The counters and settings as the store gave them.
    pub stats: RoomStats,
    /// Admissions per second over the last minute since the room's limits last moved (and
    /// since the first admission after the site filled up for a crowd: the first time since
    /// then, or since the line was last empty for a minute), counting
    /// only the stretches when somebody was waiting (an idle room's quiet is not
    /// slowness); `None` until such a stretch has been seen or while nothing was admitted
    /// in it.
    pub observed: Option<Observed>,
    /// Counts the times the room's limits (the admitting rate, `max_active`, a pause) moved
    /// by more than a range's margin since this replica started: each restarts the
    /// observation and lets the waiting visitors' promises be made again.
    pub epoch: u64,
    /// The site has filled up (`max_active` sessions) for the crowd now waiting: its line
    /// moves in generations of sessions from then on, even while a lower rate (closed-loop
    /// admission's) keeps it below full.
    pub filled: bool,
    /// How long the last admission pass took.
    pub last_pass: Option<Duration>,
    /// When these counters were read.
    pub read_at: Instant,
    /// This replica's honest-ETA report over the last hour, as of `read_at`.
    pub eta: EtaReport,
    /// ETA ledger entries this replica forgot before their visitor was admitted (the cap,
    /// or too old), since start.
    pub eta_forgotten: u64,
    /// Promises replaced by a later range because the room's limits moved, since start.
    pub eta_revised: u64,
    /// Closed-loop admission's effective rate and why; `None` without
    /// `adaptive:`.
    pub adaptive: Option<RateView>,
}

impl CachedStats {
    /// The rate admissions actually run at: the configured one, or closed-loop
    /// admission's lower one.
    pub fn effective_rate(&self) -> f64 {
        self.adaptive
            .as_ref()
            .map_or(self.stats.settings.rate, |a| a.effective_rate)
    }

    /// Admissions per second while somebody waited, if any were seen (see `observed`).
    pub fn observed_rate(&self) -> Option<f64> {
        self.observed.map(|o| o.rate)
    }

    /// What the room knows of its line's speed, for the waiting visitors' ranges.
    pub fn pace(&self) -> Pace {
        let s = &self.stats;
        let full = s.settings.max_active > 0 && s.active >= s.settings.max_active;
        // The store's latest ended sessions, once there are enough to go by and a whole
        // generation has ended (every session admitted and no longer active has ended):
        // before that, those that ended are the shortest of the first, not the site's.
        let ended = s.ended_sessions;
        let generation_ended = s.total_admitted.saturating_sub(s.active) >= s.settings.max_active;
        let turnover = ended
            .mean()
            .filter(|length| {
                full && generation_ended && ended.count >= MIN_SESSIONS && !length.is_zero()
            })
            .map(|mean| Turnover {
                rate: s.settings.max_active as f64 / mean.as_secs_f64(),
                sessions: ended.count,
            });
        Pace {
            admitting: self.admitting(),
            observed: self.observed,
            generation: (full || self.filled).then_some(s.settings.max_active),
            turnover,
        }
    }

    /// The rate the line can never outrun: the configured one, 0 while paused. Not
    /// closed-loop admission's: that moves every second by design, lowered while the site
    /// struggles and raised as it recovers, so over a visitor's wait the line moves at its
    /// average, which is what the observed rate measures.
    fn admitting(&self) -> f64 {
        if self.stats.settings.paused {
            0.0
        } else {
            self.stats.settings.rate
        }
    }
}

/// The limits a room's ranges rest on: (admitting rate, `max_active`).
type Basis = (f64, u64);

/// Whether the limits moved by more than a range's margin ([`MIN_SPREAD`]) either way, in
/// a way that can change how fast the line moves: a change of the admitting rate while the
/// line moves well below both the old and the new one (the site, not the rate, sets the
/// pace: `observed`) changes nothing.
fn moved(from: Basis, to: Basis, observed: Option<f64>) -> bool {
    let far = |a: f64, b: f64| {
        if a <= 0.0 || b <= 0.0 {
            (a <= 0.0) != (b <= 0.0)
        } else {
            a / b > MIN_SPREAD || b / a > MIN_SPREAD
        }
    };
    let site_bound = observed.is_some_and(|o| o > 0.0 && from.0.min(to.0) > o * MIN_SPREAD);
    (far(from.0, to.0) && !site_bound) || far(from.1 as f64, to.1 as f64)
}

#[derive(Default)]
pub(super) struct StatsCache {
    rooms: RwLock<HashMap<String, RoomSamples>>,
}

#[derive(Default)]
struct RoomSamples {
    latest: Option<CachedStats>,
    /// (when, total_admitted, waiting) over the last minute, oldest first.
    admitted: VecDeque<(Instant, u64, u64)>,
    last_pass: Option<Duration>,
    /// The limits at the last change of epoch (see [`CachedStats::epoch`]).
    basis: Option<Basis>,
    epoch: u64,
    /// The site has been full (`max_active` sessions) since the epoch began, or since the
    /// line was last empty for a whole observation window.
    filled: bool,
}

impl StatsCache {
    pub(super) fn get(&self, room: &str) -> Option<CachedStats> {
        let rooms = self.rooms.read().unwrap_or_else(|p| p.into_inner());
        rooms.get(room).and_then(|r| r.latest.clone())
    }

    /// The room's pace and limits epoch, read without copying the rest (every waiting
    /// page and stream event asks).
    pub(super) fn pace(&self, room: &str) -> Option<(Pace, u64)> {
        let rooms = self.rooms.read().unwrap_or_else(|p| p.into_inner());
        let latest = rooms.get(room)?.latest.as_ref()?;
        Some((latest.pace(), latest.epoch))
    }

    pub(super) fn record(
        &self,
        room: &str,
        stats: RoomStats,
        ledger: LedgerView,
        adaptive: Option<RateView>,
    ) {
        let now = Instant::now();
        let mut rooms = self.rooms.write().unwrap_or_else(|p| p.into_inner());
        let samples = rooms.entry(room.to_owned()).or_default();
        // As `CachedStats::admitting`: the configured rate, not closed-loop admission's.
        let admitting = if stats.settings.paused {
            0.0
        } else {
            stats.settings.rate
        };
        let basis = (admitting, stats.settings.max_active);
        let seen = observed(&samples.admitted).map(|o| o.rate);
        match samples.basis {
            Some(old) if !moved(old, basis, seen) => {}
            Some(_) => {
                // What was seen was a line under other limits; the basis moves only here,
                // so many small steps add up to one change.
                samples.admitted.clear();
                samples.epoch += 1;
                samples.basis = Some(basis);
                samples.filled = false;
            }
            None => samples.basis = Some(basis),
        }
        let full = stats.settings.max_active > 0 && stats.active >= stats.settings.max_active;
        if full && !samples.filled {
            // The site has filled up for this crowd: from now on the line moves as
            // sessions end, not at the rate places were filled, and first it stands still
            // until the first sessions end, which says how long they last, not how fast the
            // line moves. So the observation starts again with the next admission, as at
            // the start (below): the admissions that filled it are not counted either.
            samples.filled = true;
            samples.admitted.clear();
        }
        samples
            .admitted
            .push_back((now, stats.total_admitted, stats.waiting));
        while samples
            .admitted
            .front()
            .is_some_and(|&(at, _, _)| now.duration_since(at) > RATE_WINDOW)
        {
            samples.admitted.pop_front();
        }
        let observed = observed(&samples.admitted);
        if observed.is_none() {
            // Nothing has left a waiting line yet: the wait before the first admission says
            // how long the first sessions last, not how fast the line moves, so the
            // observation starts with the interval of the first admission.
            if stats.waiting == 0 {
                // Nobody has waited for a minute: the next crowd fills the site anew.
                samples.filled = false;
            }
            let last = samples.admitted.pop_back();
            samples.admitted.clear();
            samples.admitted.extend(last);
        }
        samples.latest = Some(CachedStats {
            stats,
            observed,
            filled: samples.filled,
            epoch: samples.epoch,
            last_pass: samples.last_pass,
            read_at: now,
            eta: ledger.report,
            eta_forgotten: ledger.forgotten,
            eta_revised: ledger.revised,
            adaptive,
        });
    }

    /// Tests only: as if the room's line had been seen moving at `rate` for the last
    /// minute, so its ranges are promises from the start.
    #[cfg(test)]
    pub(super) fn assume_seen(&self, room: &str, rate: f64) {
        let now = Instant::now();
        let mut rooms = self.rooms.write().unwrap_or_else(|p| p.into_inner());
        let samples = rooms.entry(room.to_owned()).or_default();
        samples.admitted = [
            (now - RATE_WINDOW, 0, 1),
            (now, (rate * RATE_WINDOW.as_secs_f64()) as u64, 1),
        ]
        .into_iter()
        .collect();
    }

    pub(super) fn record_pass(&self, room: &str, took: Duration) {
        let mut rooms = self.rooms.write().unwrap_or_else(|p| p.into_inner());
        rooms.entry(room.to_owned()).or_default().last_pass = Some(took);
    }
}

/// The wait of a visitor at `place` at `pace` ("estimating" without one). Without a
/// position (a lottery draw) their place could be anywhere in the draw: from no wait to the
/// whole draw's.
pub(super) fn eta_at(pace: Option<Pace>, place: &Place) -> Eta {
    let at = |position| pace.map_or(Eta::estimating(0), |pace| pace.eta(position));
    match place.position {
        Some(position) => at(position),
        None => Eta {
            min: 0,
            ..at(place.waiting)
        },
    }
}

/// Admissions per second over the intervals that began with somebody waiting.
pub(super) fn observed(samples: &VecDeque<(Instant, u64, u64)>) -> Option<Observed> {
    let (mut admitted, mut busy) = (0u64, Duration::ZERO);
    for (&(t0, a0, waiting), &(t1, a1, _)) in samples.iter().zip(samples.iter().skip(1)) {
        if waiting > 0 {
            admitted += a1.saturating_sub(a0);
            busy += t1.duration_since(t0);
        }
    }
    (admitted > 0 && !busy.is_zero()).then(|| Observed {
        rate: admitted as f64 / busy.as_secs_f64(),
        admitted,
        busy,
    })
}
