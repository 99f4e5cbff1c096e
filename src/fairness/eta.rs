//! The honest-ETA tracker: for each admitted visitor, the range they were first
//! shown against the wait they actually had, summarised over the last hour as
//! `{"admitted": N, "within_range": ratio, "median_error_secs": x}` for room stats and
//! metrics. Memory is fixed per room: 60 one-minute buckets, each a count and a histogram.
//!
//! Definitions:
//! - **within range**: the actual wait, rounded to whole seconds as the page shows it, lies
//!   in `[min, max]` of the range first shown.
//! - **error**: |actual wait − the middle of the range first shown|, in seconds; the median
//!   is read from a fixed histogram (1 s resolution below a minute, coarser above), so it is
//!   exact to the bucket and the buckets of several replicas simply add up.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use crate::visitor::VisitorId;

/// The window the report covers.
pub const WINDOW: Duration = Duration::from_secs(3600);
const BUCKET: Duration = Duration::from_secs(60);
const BUCKETS: usize = (WINDOW.as_secs() / BUCKET.as_secs()) as usize;

/// Error histogram layout: 64 buckets of 1 s, 64 of 30 s, 64 of 5 min, then one overflow.
const FINE: usize = 64;
const MID_WIDTH: f64 = 30.0;
const COARSE_WIDTH: f64 = 300.0;
const ERROR_BUCKETS: usize = 3 * 64 + 1;

/// An estimated wait in whole seconds, as a range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Eta {
    /// The shortest wait the range allows, in seconds.
    pub min: u64,
    /// The longest, in seconds (never below `min`).
    pub max: u64,
    /// Set while the room has not seen its line move enough to stand behind a range (see
    /// [`Pace`]): the page says "estimating", `min` is only the wait at the configured rate
    /// (a floor: the line never moves faster), and nothing is promised, so nothing is held
    /// against the room in the honest-ETA report. Absent from JSON when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub estimating: bool,
}

/// The narrowest range: ×0.8 … ×1.25 of the central estimate.
pub const MIN_SPREAD: f64 = 1.25;

/// The longest wait a range says, in seconds (a year): a rate so low that the line would
/// take longer says "a year or more", never a number past what a page's script can hold
/// exactly (2^53) or a reader can use.
pub const MAX_SECS: u64 = 365 * 24 * 3600;

/// Admissions, and busy time (somebody waiting), a room must have observed before its
/// ranges are promises rather than "estimating".
pub const MIN_OBSERVED: u64 = 10;
/// See [`MIN_OBSERVED`].
pub const MIN_BUSY: Duration = Duration::from_secs(5);

impl Eta {
    /// Visitors ahead divided by the rate, widened by [`MIN_SPREAD`] either way because the
    /// rate is observed, not promised.
    pub fn for_position(position: u64, rate: f64) -> Eta {
        Eta::within(position, rate, MIN_SPREAD)
    }

    /// Visitors ahead divided by the rate, `central / spread` … `central × spread`. No
    /// usable rate (zero: paused, or nothing known) is [`Eta::estimating`].
    pub fn within(position: u64, rate: f64, spread: f64) -> Eta {
        if !(rate.is_finite() && rate > 0.0) {
            return Eta::estimating(0);
        }
        let spread = if spread.is_finite() {
            spread.max(1.0)
        } else {
            MIN_SPREAD
        };
        let cap = MAX_SECS as f64;
        let central = position as f64 / rate;
        let min = (central / spread).floor().clamp(0.0, cap) as u64;
        let max = (central * spread).ceil().clamp(min as f64, cap) as u64;
        Eta {
            min,
            max,
            estimating: false,
        }
    }

    /// No promise yet: at least `floor_secs` (at most [`MAX_SECS`]).
    pub fn estimating(floor_secs: u64) -> Eta {
        let floor_secs = floor_secs.min(MAX_SECS);
        Eta {
            min: floor_secs,
            max: floor_secs,
            estimating: true,
        }
    }
}

/// Session lengths a room's store must have kept before `max_active` over their mean is a
/// known limit (see [`Pace`]), besides a whole generation of sessions having ended. With a
/// full `max_active`, one leaves the site (and one is admitted) every
/// `mean length / max_active` on average.
pub const MIN_SESSIONS: u64 = 8;

/// How fast a room's line has been seen to move: admissions per second over the stretches
/// when somebody waited (an idle room's quiet is not slowness), and how much that rests on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Observed {
    /// Admissions per second while somebody waited.
    pub rate: f64,
    /// Admissions the rate was measured over.
    pub admitted: u64,
    /// Time somebody was waiting, over which they were counted.
    pub busy: Duration,
}

/// The longest a full site's observation waits for a whole generation of sessions to end
/// (see [`Pace`]): half the observed-rate window, so a site whose sessions last minutes
/// still gets promises from what half a minute showed.
pub const MAX_GENERATION: Duration = Duration::from_secs(30);

/// What a full site's ended sessions say of its pace (the store keeps their lengths).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Turnover {
    /// `max_active` over the sessions' mean length: the rate at which places on the site
    /// free up.
    pub rate: f64,
    /// How many session lengths that mean rests on.
    pub sessions: u64,
}

/// What a room knows of its line's speed, from which every waiting visitor's range is
/// computed (docs/fairness.md, "Honest ETA").
///
/// The line moves at the rate the room actually achieves, never faster than the rate it
/// admits at (`rate`, or closed-loop admission's lower one), nor, while `max_active` is
/// full, than places on the site free up (its [`Turnover`]), whatever holds it back (a
/// full `max_active`, a saturated `max_inflight`, a slow origin).
///
/// Once the site has filled up for a crowd its line moves in generations: the sessions let
/// in together end together, shortest first, and the line then stands still until the next
/// ones end. What part of one generation shows, a burst or a stand-still, is not the pace,
/// nor is the mean length of the sessions that ended first. So a filled site's observation
/// is a promise only once it has counted a whole generation (`max_active` admissions, each
/// a session ended; or [`MAX_GENERATION`] of watching, for sessions of minutes), and the
/// caller gives a turnover only once as many sessions have ended as the site holds.
/// Otherwise an observation is a promise once it rests on [`MIN_OBSERVED`] admissions over
/// [`MIN_BUSY`]. Before that, the turnover when it is known, else "estimating" with the
/// wait at the admitting rate as a floor. A promise takes the lowest of the observed rate
/// and those limits, with a margin of the larger of [`MIN_SPREAD`] and `1 + 2/√n`, where
/// `n` is the fewer of the admissions observed and the visitors ahead: a rate measured
/// over few admissions is uncertain, and the last few places ahead are admitted one at a
/// time, at the pace of single sessions. A filled site's first generation counts as
/// [`MIN_OBSERVED`] admissions, whatever its size: its admissions came in one burst.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pace {
    /// The rate the room admits at (configured, or closed-loop admission's).
    pub admitting: f64,
    /// What has been observed since the room's limits last moved, if anything.
    pub observed: Option<Observed>,
    /// Once `max_active` has filled up for the crowd waiting: `max_active`, the sessions of
    /// one generation.
    pub generation: Option<u64>,
    /// While `max_active` is full, once a generation of sessions has ended: how fast they
    /// turn over.
    pub turnover: Option<Turnover>,
}

impl Pace {
    /// The range for the visitor at `position` (1 is next).
    pub fn eta(&self, position: u64) -> Eta {
        let floor = |rate: f64| {
            if rate.is_finite() && rate > 0.0 {
                (position as f64 / rate).floor() as u64
            } else {
                0
            }
        };
        let margin = |n: u64| MIN_SPREAD.max(1.0 + 2.0 / (n.min(position).max(1) as f64).sqrt());
        // The tightest limit known without watching the line: the admitting rate and, with
        // the site full, its turnover.
        let limit = match self.turnover {
            Some(t) if self.admitting > 0.0 => t.rate.min(self.admitting),
            Some(t) => t.rate,
            None => self.admitting,
        };
        let seen = |o: &Observed| {
            let enough = o.admitted >= MIN_OBSERVED && o.busy >= MIN_BUSY && o.rate > 0.0;
            let whole = self
                .generation
                .is_none_or(|g| o.admitted >= g || o.busy >= MAX_GENERATION);
            enough && whole
        };
        match self.observed {
            Some(o) if seen(&o) => {
                let rate = if limit > 0.0 {
                    o.rate.min(limit)
                } else {
                    o.rate
                };
                // A generation's admissions came in one burst, timed by sessions that began
                // together: together they are one measurement, worth the fewest a promise
                // rests on, and only the admissions after it add to what is known.
                let n = self.generation.map_or(o.admitted, |g| {
                    o.admitted.saturating_sub(g).max(MIN_OBSERVED)
                });
                Eta::within(position, rate, margin(n))
            }
            _ => match self.turnover {
                Some(t) if limit > 0.0 => Eta::within(position, limit, margin(t.sessions)),
                _ => Eta::estimating(floor(self.admitting)),
            },
        }
    }
}

/// The `eta` object of room stats.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EtaReport {
    /// Admitted visitors counted: only those first shown a real range, not "estimating".
    pub admitted: u64,
    /// Share admitted within the range first shown; `null` when nobody was admitted.
    pub within_range: Option<f64>,
    /// Median |actual − middle of the range|; `null` when nobody was admitted.
    pub median_error_secs: Option<f64>,
}

/// A mergeable summary of admitted visitors' ETA accuracy (one minute's, or a window's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtaSummary {
    /// Admitted visitors recorded, each with the range first shown to them.
    pub admitted: u64,
    /// Of `admitted`, those whose wait, rounded to whole seconds, lay in `[min, max]` of
    /// that range.
    pub within: u64,
    errors: [u32; ERROR_BUCKETS],
}

impl Default for EtaSummary {
    fn default() -> Self {
        EtaSummary {
            admitted: 0,
            within: 0,
            errors: [0; ERROR_BUCKETS],
        }
    }
}

impl EtaSummary {
    /// Adds one admitted visitor who was first shown `shown` and waited `waited`.
    pub fn record(&mut self, shown: Eta, waited: Duration) {
        let secs = waited.as_secs_f64();
        let shown_secs = secs.round();
        self.admitted = self.admitted.saturating_add(1);
        if shown_secs >= shown.min as f64 && shown_secs <= shown.max as f64 {
            self.within = self.within.saturating_add(1);
        }
        let middle = (shown.min as f64 + shown.max as f64) / 2.0;
        let slot = error_bucket((secs - middle).abs());
        self.errors[slot] = self.errors[slot].saturating_add(1);
    }

    /// Adds another summary (another minute, or another replica's).
    pub fn merge(&mut self, other: &EtaSummary) {
        self.admitted = self.admitted.saturating_add(other.admitted);
        self.within = self.within.saturating_add(other.within);
        for (a, b) in self.errors.iter_mut().zip(other.errors.iter()) {
            *a = a.saturating_add(*b);
        }
    }

    /// In the room stats' form: the median error is the middle of its histogram bucket
    /// (1 s wide below a minute).
    pub fn report(&self) -> EtaReport {
        if self.admitted == 0 {
            return EtaReport {
                admitted: 0,
                within_range: None,
                median_error_secs: None,
            };
        }
        EtaReport {
            admitted: self.admitted,
            within_range: Some(self.within as f64 / self.admitted as f64),
            median_error_secs: Some(self.median_error()),
        }
    }

    /// The middle of the histogram bucket holding the median (the lower median).
    fn median_error(&self) -> f64 {
        let total: u64 = self.errors.iter().map(|&c| u64::from(c)).sum();
        let half = total.div_ceil(2).max(1);
        let mut seen = 0u64;
        for (i, &c) in self.errors.iter().enumerate() {
            seen += u64::from(c);
            if seen >= half {
                let (lo, hi) = bucket_bounds(i);
                return (lo + hi) / 2.0;
            }
        }
        0.0
    }
}

fn error_bucket(err: f64) -> usize {
    let err = if err.is_finite() {
        err.max(0.0)
    } else {
        f64::MAX
    };
    let mid_start = FINE as f64;
    let coarse_start = mid_start + 64.0 * MID_WIDTH;
    let end = coarse_start + 64.0 * COARSE_WIDTH;
    if err < mid_start {
        err as usize
    } else if err < coarse_start {
        FINE + ((err - mid_start) / MID_WIDTH) as usize
    } else if err < end {
        2 * FINE + ((err - coarse_start) / COARSE_WIDTH) as usize
    } else {
        ERROR_BUCKETS - 1
    }
}

fn bucket_bounds(i: usize) -> (f64, f64) {
    let mid_start = FINE as f64;
    let coarse_start = mid_start + 64.0 * MID_WIDTH;
    let end = coarse_start + 64.0 * COARSE_WIDTH;
    match i {
        i if i < FINE => (i as f64, i as f64 + 1.0),
        i if i < 2 * FINE => {
            let lo = mid_start + (i - FINE) as f64 * MID_WIDTH;
            (lo, lo + MID_WIDTH)
        }
        i if i < 3 * FINE => {
            let lo = coarse_start + (i - 2 * FINE) as f64 * COARSE_WIDTH;
            (lo, lo + COARSE_WIDTH)
        }
        // The overflow bucket has no upper edge; report its lower one.
        _ => (end, end),
    }
}

/// One room's tracker: a ring of per-minute summaries over the last hour.
pub struct EtaTracker {
    start: Instant,
    /// (minute index since `start`, that minute's summary).
    ring: Vec<(u64, EtaSummary)>,
}

impl EtaTracker {
    /// An empty tracker whose minutes count from `now`.
    pub fn new(now: Instant) -> Self {
        EtaTracker {
            start: now,
            ring: vec![(u64::MAX, EtaSummary::default()); BUCKETS],
        }
    }

    fn minute(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.start).as_secs() / BUCKET.as_secs()
    }

    /// Records one admission at `now`: the range first shown and the wait since.
    pub fn record(&mut self, now: Instant, shown: Eta, waited: Duration) {
        let minute = self.minute(now);
        let slot = &mut self.ring[(minute % BUCKETS as u64) as usize];
        if slot.0 != minute {
            *slot = (minute, EtaSummary::default());
        }
        slot.1.record(shown, waited);
    }

    /// Everything recorded in the last hour (the current minute included), as a summary
    /// to merge with other replicas' or to report.
    pub fn last_hour(&self, now: Instant) -> EtaSummary {
        let current = self.minute(now);
        let oldest = current.saturating_sub(BUCKETS as u64 - 1);
        let mut total = EtaSummary::default();
        for (minute, summary) in &self.ring {
            if *minute != u64::MAX && *minute >= oldest && *minute <= current {
                total.merge(summary);
            }
        }
        total
    }

    /// [`EtaTracker::last_hour`] in the room stats' form (this replica's admissions only).
    pub fn report(&self, now: Instant) -> EtaReport {
        self.last_hour(now).report()
    }
}

/// Per-visitor entries one room's [`EtaLedger`] keeps before forgetting the oldest.
pub const LEDGER_CAP: usize = 200_000;

/// A waiting visitor whose first range was shown this long ago and who has not been seen
/// admitted is forgotten: they most likely left, or were admitted by a replica they no
/// longer ask (their entry would otherwise wait for the cap).
pub const LEDGER_MAX_AGE: Duration = Duration::from_secs(12 * 3600);

/// What this replica showed each waiting visitor first, and the per-room trackers their
/// admissions feed. One per replica, inside `admission::Admission`.
///
/// A visitor is entered the first time this replica shows them a range (the waiting page,
/// its JSON, or a live-stream event) and leaves on the first of: this replica seeing them
/// admitted (a pass it ran, another replica's pass that its own pass heard of, or a
/// request or stream tick that finds them admitted: removal makes that exactly once), them leaving the line (abandoned, unknown, rejoined, moved to
/// the front), or being forgotten (the cap, [`LEDGER_MAX_AGE`]). Times are unix ms of the
/// store's clock where the embedded store has one, so tests drive them.
pub struct EtaLedger {
    rooms: Mutex<HashMap<String, RoomLedger>>,
    cap: usize,
}

struct RoomLedger {
    shown: HashMap<VisitorId, Shown>,
    /// Entry order (sequence → visitor), to forget the oldest first.
    order: BTreeMap<u64, VisitorId>,
    next_seq: u64,
    tracker: EtaTracker,
    forgotten: u64,
    /// Promises replaced because the room's limits moved (see [`EtaLedger::shown`]).
    revised: u64,
}

#[derive(Clone, Copy)]
struct Shown {
    seq: u64,
    eta: Eta,
    at_ms: u64,
    /// The room's limits epoch when it was shown.
    epoch: u64,
}

impl RoomLedger {
    fn new() -> Self {
        RoomLedger {
            shown: Default::default(),
            order: Default::default(),
            next_seq: 0,
            tracker: EtaTracker::new(Instant::now()),
            forgotten: 0,
            revised: 0,
        }
    }

    fn take(&mut self, visitor: VisitorId) -> Option<Shown> {
        let shown = self.shown.remove(&visitor)?;
        self.order.remove(&shown.seq);
        Some(shown)
    }

    fn forget_oldest(&mut self) -> Option<Shown> {
        let (_, visitor) = self.order.pop_first()?;
        let shown = self.shown.remove(&visitor);
        self.forgotten += 1;
        shown
    }
}

impl Default for EtaLedger {
    fn default() -> Self {
        EtaLedger::with_cap(LEDGER_CAP)
    }
}

impl EtaLedger {
    /// A ledger keeping at most `cap` visitors per room.
    pub fn with_cap(cap: usize) -> Self {
        EtaLedger {
            rooms: Default::default(),
            cap: cap.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, RoomLedger>> {
        self.rooms.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn with_room<T>(&self, room: &str, f: impl FnOnce(&mut RoomLedger) -> T) -> T {
        let mut rooms = self.lock();
        if let Some(ledger) = rooms.get_mut(room) {
            return f(ledger);
        }
        f(rooms.entry(room.to_owned()).or_insert_with(RoomLedger::new))
    }

    /// `visitor` was shown `eta` at `now_ms`, when the room's limits were at `epoch` (see
    /// `admission::Admission::show_eta`). The first range shown counts, unless the
    /// room's limits have moved since by more than a range's margin (a newer `epoch`): the
    /// promise was made for a line that no longer exists, so the range shown now replaces it
    /// (counted as revised). An "estimating" range promises nothing and is not entered.
    pub fn shown(&self, room: &str, visitor: VisitorId, eta: Eta, now_ms: u64, epoch: u64) {
        if eta.estimating {
            return;
        }
        let cap = self.cap;
        self.with_room(room, |r| {
            if let Some(old) = r.shown.get(&visitor) {
                if old.epoch >= epoch {
                    return;
                }
                r.take(visitor);
                r.revised += 1;
            }
            while r.shown.len() >= cap {
                r.forget_oldest();
            }
            let seq = r.next_seq;
            r.next_seq += 1;
            r.order.insert(seq, visitor);
            r.shown.insert(
                visitor,
                Shown {
                    seq,
                    eta,
                    at_ms: now_ms,
                    epoch,
                },
            );
        });
    }

    /// `visitor` was seen admitted at `now_ms`: if this replica showed them a range, their
    /// wait is recorded (once: the entry goes). Returns whether it was recorded.
    pub fn admitted(&self, room: &str, visitor: VisitorId, now_ms: u64) -> bool {
        let mut rooms = self.lock();
        let Some(r) = rooms.get_mut(room) else {
            return false;
        };
        let Some(shown) = r.take(visitor) else {
            return false;
        };
        let waited = Duration::from_millis(now_ms.saturating_sub(shown.at_ms));
        r.tracker.record(Instant::now(), shown.eta, waited);
        true
    }

    /// `visitor` left the line without being admitted (or their first range no longer
    /// applies): drop their entry without recording anything.
    pub fn forget(&self, room: &str, visitor: VisitorId) {
        if let Some(r) = self.lock().get_mut(room) {
            r.take(visitor);
        }
    }

    /// Forgets, in every room, the entries first shown more than [`LEDGER_MAX_AGE`] before
    /// `now_ms` (counted as forgotten).
    pub fn prune(&self, now_ms: u64) {
        let horizon = now_ms.saturating_sub(crate::clock::ms(LEDGER_MAX_AGE));
        for r in self.lock().values_mut() {
            // Entry order is showing order, so the stale ones are at the front.
            while let Some((_, v)) = r.order.first_key_value() {
                if r.shown.get(v).is_some_and(|s| s.at_ms >= horizon) {
                    break;
                }
                r.forget_oldest();
            }
        }
    }

    /// The room's report over the last hour.
    pub fn report(&self, room: &str) -> EtaReport {
        self.lock().get(room).map_or_else(
            || EtaSummary::default().report(),
            |r| r.tracker.report(Instant::now()),
        )
    }

    /// Visitors waiting with a range this replica showed them, in `room`.
    pub fn tracked(&self, room: &str) -> usize {
        self.lock().get(room).map_or(0, |r| r.shown.len())
    }

    /// Entries forgotten in `room` (the cap, or too old), since start.
    pub fn forgotten(&self, room: &str) -> u64 {
        self.lock().get(room).map_or(0, |r| r.forgotten)
    }

    /// Promises in `room` replaced by a later range because its limits moved, since start.
    pub fn revised(&self, room: &str) -> u64 {
        self.lock().get(room).map_or(0, |r| r.revised)
    }
}

#[cfg(test)]
mod tests;
