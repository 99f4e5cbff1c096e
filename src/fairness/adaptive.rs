//! The closed-loop admission controller (`adaptive:`): fed the origin's time to
//! response headers and status for every proxied request, it keeps a 10-second sliding
//! window (per-second slots of a fixed-bucket latency histogram plus counts, which replicas
//! can simply add up) and turns the window's p95 and 5xx share into the rate the room
//! actually admits at, by AIMD: halve when the origin struggles, add a fixed step per second
//! when it is healthy, never above the configured `rate`, never below `min_rate`.
//!
//! Time is unix milliseconds from the caller ([`crate::clock::Clock`] in production, so
//! paused tokio time drives it in tests), because slots must line up across replicas.
//!
//! Wiring (`admission/`, the stores): each replica records every admitted request's time
//! to response headers and status into an [`OriginRecorder`] per room (a fixed ring of
//! one-second slots under a short mutex: no allocation per request). Once a second, from
//! the pass driver, it publishes the ring as an [`OriginReport`] through
//! `queue::QueueStore::exchange_origin` and gets back every live replica's report
//! and the room's shared [`AdaptiveState`]; the one replica that claimed that second's
//! decision merges the reports, runs the controller and stores the new state with
//! `queue::QueueStore::set_adaptive`. The store's bucket then refills at
//! `min(rate, effective_rate)`, so the configured `rate` is never changed and every
//! replica's passes (and the fast path) use the same effective rate.
//!
//! One controller for the whole fleet rather than one per replica, and how replicas feed it:
//! - Only one decision per second is made for the whole fleet (a claim in the store), and
//!   the controller's memory (last cut, last raise) lives in the store with the effective
//!   rate: several replicas deciding on the same merged input would each halve the rate.
//! - A report's slots are ages ("n seconds before I published"), stamped with the store's
//!   clock when written, not the replica's clock: with Redis the replicas' clocks need not
//!   agree with `TIME`. Slots of different replicas can therefore be up to a second apart.
//! - The reports of one room share one hash (`ar:{room}:origin`, a field per replica)
//!   rather than a key each: a report older than [`REPORT_STALE_MS`] is dropped on read and
//!   the hash expires with its last writer, so no key scan is ever needed (Cluster-safe).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The window the decision looks at.
pub const WINDOW_SECS: u64 = 10;
/// Fewer observations than this in the window is no evidence either way: hold the rate.
pub const MIN_SAMPLES: u64 = 20;
/// Each decrease multiplies the rate by this.
pub const DECREASE_FACTOR: f64 = 0.5;
/// After a decrease, wait a whole window and judge only what was observed since. A cut
/// shows late: the visitors admitted before it keep loading the site for as long as they
/// browse (seconds), so the responses right after it are as slow as those that caused it.
/// Cutting again on them, every couple of seconds, drives the rate to `min_rate` while the
/// site is merely digesting the crowd it already has, and the line then moves in surges
/// that no range can promise.
pub const DECREASE_EVERY_MS: u64 = WINDOW_SECS * 1_000;
/// Increases happen at most once per second, by 1/20 of the configured rate (so a full
/// recovery from the floor takes about 20 s of a healthy origin).
pub const INCREASE_EVERY_MS: u64 = 1_000;
/// Each increase adds the configured rate divided by this (20: 5 % of `rate` a step).
pub const INCREASE_STEPS: f64 = 20.0;
/// Decisions come once a second from the pass driver, whose ticks jitter by a few ms (and
/// with replicas, whichever claims first decides): intervals this much short still count.
const SLACK_MS: u64 = 150;
/// A replica whose report is older than this has stopped (or lost the store): its
/// observations no longer count.
pub const REPORT_STALE_MS: u64 = 3_000;
/// At most one decision per room in this long, whichever replica claims it.
pub const CLAIM_EVERY_MS: u64 = 900;

/// The controller's time constants. [`Tuning::default`] is the product's (a 10 s
/// window); end-to-end tests shorten them to stay within seconds. Not user-facing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tuning {
    /// The window the decision looks at, 1 to [`WINDOW_SECS`] seconds.
    pub window_secs: u64,
    /// Fewer observations than this in the window hold the rate.
    pub min_samples: u64,
    /// A full recovery from the floor takes this many one-second steps.
    pub increase_steps: f64,
    /// After a cut, the next one waits at least this long.
    pub decrease_every_ms: u64,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            window_secs: WINDOW_SECS,
            min_samples: MIN_SAMPLES,
            increase_steps: INCREASE_STEPS,
            decrease_every_ms: DECREASE_EVERY_MS,
        }
    }
}

impl Tuning {
    fn sane(self) -> Tuning {
        Tuning {
            window_secs: self.window_secs.clamp(1, WINDOW_SECS),
            min_samples: self.min_samples.max(1),
            increase_steps: if self.increase_steps.is_finite() && self.increase_steps >= 1.0 {
                self.increase_steps
            } else {
                INCREASE_STEPS
            },
            decrease_every_ms: self.decrease_every_ms.max(INCREASE_EVERY_MS),
        }
    }
}

/// Latency histogram: bucket `i` holds latencies up to `BOUNDS_MS[i]` ms; one more bucket
/// holds everything slower. Roughly ×1.5 apart, so p95 is known to within a third.
const BOUNDS_MS: [u32; 24] = [
    5, 10, 15, 25, 40, 60, 90, 130, 200, 300, 450, 650, 800, 1_000, 1_300, 1_700, 2_200, 3_000,
    4_000, 5_500, 7_500, 10_000, 15_000, 30_000,
];
const HIST: usize = BOUNDS_MS.len() + 1;

/// The `adaptive:` block of a room.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdaptiveConfig {
    /// p95 time to response headers above this lowers the rate ("800ms", "1.5s").
    #[serde(with = "duration_text")]
    pub target_latency: Duration,
    /// A share of 5xx responses above this lowers the rate.
    #[serde(default = "default_error_ratio")]
    pub max_error_ratio: f64,
    /// The rate is never lowered below this (visitors per second).
    #[serde(default = "default_min_rate")]
    pub min_rate: f64,
}

fn default_error_ratio() -> f64 {
    0.05
}
fn default_min_rate() -> f64 {
    1.0
}

mod duration_text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(text.trim()).map_err(|e| {
            serde::de::Error::custom(format!("{text:?} is not a duration like 800ms: {e}"))
        })
    }
}

/// A field of `adaptive:` that is out of bounds.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("adaptive.{field}: {reason}")]
pub struct AdaptiveConfigError {
    /// The key inside `adaptive:`: `target_latency`, `max_error_ratio` or `min_rate`.
    pub field: &'static str,
    /// What the value must satisfy, e.g. "must be between 0 and 1".
    pub reason: String,
}

impl AdaptiveConfig {
    /// Checks the block against the room's configured `rate`.
    pub fn validate(&self, rate: f64) -> Result<(), AdaptiveConfigError> {
        let err = |field, reason: String| Err(AdaptiveConfigError { field, reason });
        if self.target_latency < Duration::from_millis(1)
            || self.target_latency > Duration::from_secs(60)
        {
            return err("target_latency", "must be between 1ms and 60s".into());
        }
        if !(self.max_error_ratio.is_finite() && (0.0..=1.0).contains(&self.max_error_ratio)) {
            return err("max_error_ratio", "must be between 0 and 1".into());
        }
        if !(self.min_rate.is_finite() && self.min_rate > 0.0) {
            return err("min_rate", "must be a number greater than 0".into());
        }
        if self.min_rate > rate {
            return err(
                "min_rate",
                format!("must not exceed the room's rate ({rate})"),
            );
        }
        Ok(())
    }
}

/// One second (or any span) of origin observations: a latency histogram and counts. Adding
/// two summaries is adding their fields, so replicas' summaries merge exactly.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OriginSummary {
    /// Responses observed, whatever their status.
    pub count: u64,
    /// Of `count`, the responses with a 5xx status (500 to 599).
    pub server_errors: u64,
    /// `HIST` counts; a `Vec` so the wire form is compact and forward-compatible.
    pub latency_buckets: Vec<u64>,
}

impl OriginSummary {
    /// Adds one response: its time to headers (in ms, capped at `u32::MAX`) to its latency
    /// bucket, and a 5xx status to `server_errors`.
    pub fn record(&mut self, latency: Duration, status: u16) {
        // Grow only: never drop counts a merged summary already holds.
        if self.latency_buckets.len() < HIST {
            self.latency_buckets.resize(HIST, 0);
        }
        let ms = latency.as_millis().min(u128::from(u32::MAX)) as u32;
        let slot = BOUNDS_MS.partition_point(|&b| b < ms);
        self.latency_buckets[slot] = self.latency_buckets[slot].saturating_add(1);
        self.count = self.count.saturating_add(1);
        if (500..600).contains(&status) {
            self.server_errors = self.server_errors.saturating_add(1);
        }
    }

    /// Adds `other`'s counts to these (saturating), bucket by bucket, keeping the longer
    /// bucket list.
    pub fn merge(&mut self, other: &OriginSummary) {
        self.count = self.count.saturating_add(other.count);
        self.server_errors = self.server_errors.saturating_add(other.server_errors);
        if self.latency_buckets.len() < other.latency_buckets.len() {
            self.latency_buckets.resize(other.latency_buckets.len(), 0);
        }
        for (a, b) in self.latency_buckets.iter_mut().zip(&other.latency_buckets) {
            *a = a.saturating_add(*b);
        }
    }

    /// The 95th percentile, as the upper edge of its bucket (so it never under-reports);
    /// `None` with no observations. The overflow bucket reports its lower edge.
    pub fn p95(&self) -> Option<Duration> {
        let total: u64 = self.latency_buckets.iter().sum();
        if total == 0 {
            return None;
        }
        // The smallest latency with at least 95 % of observations at or below it.
        let need = total.saturating_mul(95).div_ceil(100).max(1);
        let mut seen = 0;
        for (i, &c) in self.latency_buckets.iter().enumerate() {
            seen += c;
            if seen >= need {
                let edge = BOUNDS_MS.get(i).or(BOUNDS_MS.last()).copied().unwrap_or(0);
                return Some(Duration::from_millis(u64::from(edge)));
            }
        }
        None
    }

    /// `server_errors / count`, from 0 to 1; 0 with no observations.
    pub fn error_ratio(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.server_errors as f64 / self.count as f64
        }
    }
}

/// The last [`WINDOW_SECS`] seconds of observations, one summary per unix second. Windows
/// of several replicas merge slot by slot.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OriginWindow {
    /// (unix second, that second's summary), at most `WINDOW_SECS` of them.
    pub slots: Vec<(u64, OriginSummary)>,
}

impl OriginWindow {
    /// Records one response in the slot of `now_ms`'s unix second, first dropping slots
    /// outside the last [`WINDOW_SECS`] seconds.
    pub fn record(&mut self, now_ms: u64, latency: Duration, status: u16) {
        let sec = now_ms / 1000;
        self.expire(now_ms);
        match self.slots.iter_mut().find(|(s, _)| *s == sec) {
            Some((_, summary)) => summary.record(latency, status),
            None => {
                let mut summary = OriginSummary::default();
                summary.record(latency, status);
                self.slots.push((sec, summary));
            }
        }
    }

    /// Drops slots older than the window (and any from the future, a clock step back).
    pub fn expire(&mut self, now_ms: u64) {
        self.expire_within(now_ms, WINDOW_SECS);
    }

    /// [`OriginWindow::expire`] for a window of `secs` seconds.
    pub fn expire_within(&mut self, now_ms: u64, secs: u64) {
        let sec = now_ms / 1000;
        let oldest = sec.saturating_sub(secs.max(1) - 1);
        self.slots.retain(|(s, _)| *s >= oldest && *s <= sec);
    }

    /// Adds another replica's window.
    pub fn merge(&mut self, other: &OriginWindow) {
        for (sec, summary) in &other.slots {
            match self.slots.iter_mut().find(|(s, _)| s == sec) {
                Some((_, mine)) => mine.merge(summary),
                None => self.slots.push((*sec, summary.clone())),
            }
        }
    }

    /// Everything observed from `since_ms` (rounded down to its second) to `now_ms`,
    /// within the window.
    pub fn summary_since(&self, since_ms: u64, now_ms: u64) -> OriginSummary {
        self.summary_within(since_ms, now_ms, WINDOW_SECS)
    }

    /// [`OriginWindow::summary_since`] for a window of `secs` seconds.
    pub fn summary_within(&self, since_ms: u64, now_ms: u64, secs: u64) -> OriginSummary {
        let (from, to) = (since_ms / 1000, now_ms / 1000);
        let oldest = to.saturating_sub(secs.max(1) - 1).max(from);
        let mut total = OriginSummary::default();
        for (sec, summary) in &self.slots {
            if *sec >= oldest && *sec <= to {
                total.merge(summary);
            }
        }
        total
    }
}

/// One replica's observations as it publishes them: per-second summaries keyed by how
/// many whole seconds before the publish they were recorded (the store stamps the publish
/// with its own clock; see the module doc).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OriginReport {
    /// (seconds before the publish, that second's summary); at most [`WINDOW_SECS`].
    pub slots: Vec<(u64, OriginSummary)>,
}

impl OriginReport {
    /// The report as a window in store time, given when the store received it.
    pub fn window_at(&self, published_ms: u64) -> OriginWindow {
        let sec = published_ms / 1000;
        OriginWindow {
            slots: self
                .slots
                .iter()
                .filter(|(age, _)| *age < WINDOW_SECS && *age <= sec)
                .map(|(age, summary)| (sec - age, summary.clone()))
                .collect(),
        }
    }
}

/// What `queue::QueueStore::exchange_origin` hands back.
#[derive(Clone, Debug, PartialEq)]
pub struct OriginExchange {
    /// The store's time of the exchange (unix ms): decisions are made at it.
    pub now_ms: u64,
    /// The room's configured `rate`, as the store has it now.
    pub configured_rate: f64,
    /// Whether this caller claimed this second's decision (at most one caller per
    /// [`CLAIM_EVERY_MS`]).
    pub decide: bool,
    /// The room's adaptive state as last stored, if any.
    pub state: Option<AdaptiveState>,
    /// Every live replica's report (this caller's included), with the store time it was
    /// received.
    pub reports: Vec<(u64, OriginReport)>,
}

impl OriginExchange {
    /// Every replica's reports merged into one window in store time.
    pub fn fleet_window(&self) -> OriginWindow {
        let mut window = OriginWindow::default();
        for (at, report) in &self.reports {
            window.merge(&report.window_at(*at));
        }
        window.expire(self.now_ms);
        window
    }
}

/// One room's observations on this replica: a ring of [`WINDOW_SECS`] one-second slots of
/// fixed size, so recording a response is a short critical section with no allocation.
#[derive(Default)]
pub struct OriginRecorder {
    ring: std::sync::Mutex<[Slot; WINDOW_SECS as usize]>,
}

#[derive(Clone, Copy, Default)]
struct Slot {
    sec: u64,
    count: u64,
    server_errors: u64,
    buckets: [u64; HIST],
}

impl OriginRecorder {
    /// Records one response's time to headers and status at `now_ms` (this replica's
    /// clock).
    pub fn record(&self, now_ms: u64, latency: Duration, status: u16) {
        let sec = now_ms / 1000;
        let ms = latency.as_millis().min(u128::from(u32::MAX)) as u32;
        let bucket = BOUNDS_MS.partition_point(|&b| b < ms);
        let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let slot = &mut ring[(sec % WINDOW_SECS) as usize];
        if slot.sec != sec {
            // A slot from a second ago by a whole window (or never used): reuse it.
            *slot = Slot {
                sec,
                ..Slot::default()
            };
        }
        slot.count = slot.count.saturating_add(1);
        if (500..600).contains(&status) {
            slot.server_errors = slot.server_errors.saturating_add(1);
        }
        slot.buckets[bucket] = slot.buckets[bucket].saturating_add(1);
    }

    /// The last [`WINDOW_SECS`] seconds as of `now_ms`, to publish.
    pub fn report(&self, now_ms: u64) -> OriginReport {
        let sec = now_ms / 1000;
        let ring = *self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let mut slots: Vec<(u64, OriginSummary)> = ring
            .iter()
            .filter(|s| s.count > 0 && s.sec <= sec && sec - s.sec < WINDOW_SECS)
            .map(|s| {
                (
                    sec - s.sec,
                    OriginSummary {
                        count: s.count,
                        server_errors: s.server_errors,
                        latency_buckets: s.buckets.to_vec(),
                    },
                )
            })
            .collect();
        slots.sort_by_key(|(age, _)| *age);
        OriginReport { slots }
    }
}

/// Why the effective rate is what it is, for stats and the control room.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reason {
    /// Healthy and at the configured rate.
    AtConfiguredRate,
    /// p95 over the target: lowered.
    SlowOrigin {
        /// The p95 judged, in ms: the upper edge of its histogram bucket.
        p95_ms: u64,
        /// The configured `target_latency`, in ms.
        target_ms: u64,
    },
    /// 5xx share over the limit: lowered.
    OriginErrors {
        /// The 5xx share judged, 0 to 1.
        ratio: f64,
        /// The configured `max_error_ratio`.
        max: f64,
    },
    /// Healthy again: being raised step by step.
    Recovering,
    /// Too few observations to judge; holding.
    NotEnoughData {
        /// Responses over the whole window: fewer than `min_samples` (20 by default).
        samples: u64,
    },
    /// Waiting for the last cut to show its effect (or stale slow responses to age out).
    Holding,
}

impl Reason {
    /// The room stats' `rate_reason`: `configured` at the configured rate, `latency` or
    /// `errors` when that lowered it, `recovering` while it is below it for any other
    /// reason (raising, holding for evidence, waiting for stale responses to age out).
    pub fn code(&self, below_configured: bool) -> &'static str {
        match self {
            Reason::SlowOrigin { .. } => "latency",
            Reason::OriginErrors { .. } => "errors",
            _ if below_configured => "recovering",
            _ => "configured",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::AtConfiguredRate => {
                f.write_str("at the configured rate: the origin is healthy")
            }
            Reason::SlowOrigin { p95_ms, target_ms } => write!(
                f,
                "lowered: origin p95 {p95_ms} ms is over the {target_ms} ms target"
            ),
            Reason::OriginErrors { ratio, max } => write!(
                f,
                "lowered: {:.1} % of origin responses are 5xx (limit {:.1} %)",
                ratio * 100.0,
                max * 100.0
            ),
            Reason::Recovering => {
                f.write_str("recovering: the origin is healthy, raising step by step")
            }
            Reason::NotEnoughData { samples } => write!(
                f,
                "holding: only {samples} origin responses in the last {WINDOW_SECS} s"
            ),
            Reason::Holding => f.write_str("holding: waiting for the last change to show"),
        }
    }
}

/// The controller's output.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RateDecision {
    /// The room's configured `rate`, in visitors per second: the ceiling.
    pub configured_rate: f64,
    /// The rate actually admitted at, in visitors per second: at most `configured_rate`, at
    /// least `min(min_rate, configured_rate)`.
    pub effective_rate: f64,
    /// Why `effective_rate` is what it is.
    pub reason: Reason,
    /// [`Reason`] as a sentence, for the control room.
    pub explanation: String,
}

/// One room's controller. Pure: observations and decisions come with their time.
#[derive(Clone, Debug)]
pub struct AdaptiveController {
    config: AdaptiveConfig,
    configured_rate: f64,
    effective_rate: f64,
    reason: Reason,
    last_decrease_ms: Option<u64>,
    last_increase_ms: Option<u64>,
    tuning: Tuning,
    /// What the last decision saw over the whole window.
    observed: Observed,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Observed {
    p95_ms: Option<u64>,
    error_ratio: f64,
    samples: u64,
}

/// A controller's memory, kept in the store next to the effective rate so whichever
/// replica decides next carries on from it, and shown in the room stats.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdaptiveState {
    /// The rate the room admits at, in visitors per second; the bucket refills at
    /// `min(rate, effective_rate)`.
    pub effective_rate: f64,
    /// Why the rate is what it is, as of `decided_ms`.
    pub reason: Reason,
    /// Store time (unix ms) of the last cut, `None` before any: the next waits
    /// `decrease_every_ms` (10 s by default).
    pub last_decrease_ms: Option<u64>,
    /// Store time (unix ms) of the last step up, `None` before any: steps come at most
    /// once a second.
    pub last_increase_ms: Option<u64>,
    /// Over the last decision's whole window, every replica's observations merged.
    pub p95_ms: Option<u64>,
    /// The 5xx share over that same merged window, 0 to 1 (0 with no responses).
    pub error_ratio: f64,
    /// Responses counted over that same merged window.
    pub samples: u64,
    /// Store time of the decision.
    pub decided_ms: u64,
}

impl AdaptiveController {
    /// Starts at the configured rate (nothing says the origin struggles yet). The config
    /// must have passed [`AdaptiveConfig::validate`]; bounds are enforced here anyway.
    pub fn new(config: AdaptiveConfig, configured_rate: f64) -> Self {
        let configured_rate = sane(configured_rate, 1.0);
        AdaptiveController {
            effective_rate: configured_rate,
            configured_rate,
            config,
            reason: Reason::AtConfiguredRate,
            last_decrease_ms: None,
            last_increase_ms: None,
            tuning: Tuning::default(),
            observed: Observed::default(),
        }
    }

    /// The controller with other time constants (tests).
    pub fn with_tuning(mut self, tuning: Tuning) -> Self {
        self.tuning = tuning.sane();
        self
    }

    /// Carries on from `state` (the store's, written by whichever replica decided last)
    /// with the room's current configured rate. A state at the configured rate follows the
    /// configured rate up when the operator raises it; a lowered one stays lowered (capped
    /// by it) and recovers step by step.
    pub fn restore(
        config: AdaptiveConfig,
        configured_rate: f64,
        state: Option<&AdaptiveState>,
    ) -> Self {
        let mut c = AdaptiveController::new(config, configured_rate);
        if let Some(s) = state
            && s.effective_rate.is_finite()
            && s.effective_rate > 0.0
        {
            if s.reason != Reason::AtConfiguredRate {
                c.effective_rate = s.effective_rate;
            }
            c.reason = s.reason.clone();
            c.last_decrease_ms = s.last_decrease_ms;
            c.last_increase_ms = s.last_increase_ms;
            c.observed = Observed {
                p95_ms: s.p95_ms,
                error_ratio: s.error_ratio,
                samples: s.samples,
            };
            c.set_configured_rate(c.configured_rate);
        }
        c
    }

    /// The memory to store after a decision at `now_ms`.
    pub fn state(&self, now_ms: u64) -> AdaptiveState {
        AdaptiveState {
            effective_rate: self.effective_rate,
            reason: self.reason.clone(),
            last_decrease_ms: self.last_decrease_ms,
            last_increase_ms: self.last_increase_ms,
            p95_ms: self.observed.p95_ms,
            error_ratio: self.observed.error_ratio,
            samples: self.observed.samples,
            decided_ms: now_ms,
        }
    }

    fn floor(&self) -> f64 {
        sane(self.config.min_rate, 1.0).min(self.configured_rate)
    }

    /// The operator changed `rate`: the ceiling moves, and the effective rate never exceeds it.
    pub fn set_configured_rate(&mut self, rate: f64) {
        self.configured_rate = sane(rate, self.configured_rate);
        self.effective_rate = self
            .effective_rate
            .min(self.configured_rate)
            .max(self.floor());
    }

    /// The rate to admit at now, in visitors per second: never above the configured rate
    /// nor below `min(min_rate, rate)`.
    pub fn effective_rate(&self) -> f64 {
        self.effective_rate
    }

    /// The current rate and reason, without deciding anything.
    pub fn current(&self) -> RateDecision {
        RateDecision {
            configured_rate: self.configured_rate,
            effective_rate: self.effective_rate,
            explanation: self.reason.to_string(),
            reason: self.reason.clone(),
        }
    }

    /// Decides from `window` (this replica's, or every replica's merged) at `now_ms`. Call
    /// it as often as convenient (every pass): it changes the rate at most once per second.
    pub fn decide(&mut self, window: &OriginWindow, now_ms: u64) -> RateDecision {
        let t = self.tuning;
        let whole = window.summary_within(0, now_ms, t.window_secs);
        self.observed = Observed {
            p95_ms: whole.p95().map(|d| d.as_millis() as u64),
            error_ratio: whole.error_ratio(),
            samples: whole.count,
        };
        // Judge a cut only on what came after the previous one.
        let fresh = match self.last_decrease_ms {
            Some(at) => window.summary_within(at, now_ms, t.window_secs),
            None => whole.clone(),
        };
        let target_ms = self.config.target_latency.as_millis() as u64;
        let over = |s: &OriginSummary| -> Option<Reason> {
            if s.count < t.min_samples {
                return None;
            }
            let ratio = s.error_ratio();
            if ratio > self.config.max_error_ratio {
                return Some(Reason::OriginErrors {
                    ratio,
                    max: self.config.max_error_ratio,
                });
            }
            let p95 = s.p95()?.as_millis() as u64;
            (p95 > target_ms).then_some(Reason::SlowOrigin {
                p95_ms: p95,
                target_ms,
            })
        };
        let since = |at: Option<u64>, every: u64| {
            at.is_none_or(|at| now_ms.saturating_sub(at) + SLACK_MS >= every)
        };
        let may_decrease = since(self.last_decrease_ms, t.decrease_every_ms);
        let may_increase = since(self.last_increase_ms, INCREASE_EVERY_MS)
            && since(self.last_decrease_ms, INCREASE_EVERY_MS);
        if let Some(reason) = over(&fresh) {
            if may_decrease {
                self.effective_rate = (self.effective_rate * DECREASE_FACTOR).max(self.floor());
                self.last_decrease_ms = Some(now_ms);
                self.reason = reason;
            }
        } else if whole.count < t.min_samples {
            // Too little traffic to judge (or none at all): keep what we have.
            if self.effective_rate < self.configured_rate {
                self.reason = Reason::NotEnoughData {
                    samples: whole.count,
                };
            }
        } else if over(&whole).is_some() {
            // Fresh responses look fine but older slow ones are still in the window: wait
            // for them to age out before raising.
            if self.effective_rate < self.configured_rate {
                self.reason = Reason::Holding;
            }
        } else if self.effective_rate < self.configured_rate {
            if may_increase {
                let step = self.configured_rate / t.increase_steps;
                self.effective_rate = (self.effective_rate + step).min(self.configured_rate);
                self.last_increase_ms = Some(now_ms);
                self.reason = if self.effective_rate >= self.configured_rate {
                    Reason::AtConfiguredRate
                } else {
                    Reason::Recovering
                };
            }
        } else {
            self.reason = Reason::AtConfiguredRate;
        }
        self.current()
    }
}

fn sane(rate: f64, fallback: f64) -> f64 {
    if rate.is_finite() && rate > 0.0 {
        rate
    } else {
        fallback
    }
}

#[cfg(test)]
mod tests;
