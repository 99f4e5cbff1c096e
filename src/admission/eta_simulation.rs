//! The honest-ETA simulation (docs/fairness.md): the product's own estimator (the observed-rate ETA of
//! [`crate::admission::Admission`], over the embedded store, driven exactly as the pass
//! driver and statistics loop drive it) against simulated crowds on a paused clock.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::admission::{Admission, Decision};
use crate::clock::Clock;
use crate::events::EventSink;
use crate::fairness::eta::*;
use crate::queue::conformance::{anyone, settings};
use crate::queue::{MemoryStore, QueueStore, RoomPolicy, SettingsPatch, VisitorId, VisitorState};

const PASS: Duration = Duration::from_millis(250);

struct Scenario {
    name: &'static str,
    rate: f64,
    /// Arrivals per second while they last (above `rate`, so a line forms).
    arrivals_per_sec: f64,
    visitors: usize,
    /// Halve the rate at this many seconds in.
    halve_at: Option<u64>,
    /// One in this many waiters stops heartbeating after a while (0: none).
    abandon_one_in: u64,
    /// When set, (max_active, session_ttl): the site, not the bucket, sets the pace.
    site_bound: Option<(u64, Duration)>,
}

/// A tiny deterministic generator (xorshift), so a run is reproducible (the drop
/// simulation's too).
pub(super) struct Rng(pub(super) u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in [0, 1).
    pub(super) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Runs one crowd and returns (hit ratio, admitted with a range shown).
async fn run(s: &Scenario) -> EtaReport {
    let store = Arc::new(MemoryStore::in_memory(Clock::starting_at(
        1_700_000_000_000,
    )));
    let mut seed = settings(s.rate, 1_000_000);
    seed.abandon_after = Duration::from_secs(20);
    if let Some((max_active, ttl)) = s.site_bound {
        seed.max_active = max_active;
        seed.session_ttl = ttl;
    }
    store
        .open_room("main", &seed, &RoomPolicy::default(), false)
        .await
        .unwrap();
    let admission = Admission::new(store.clone(), None, EventSink::disabled());
    let rooms = vec!["main".to_owned()];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut tracker = EtaTracker::new(Instant::now());
    // Waiting visitors: id → (the promise: when shown, the range, the room's epoch then;
    // none while the room is estimating), stops heartbeating at.
    type Promise = Option<(Instant, Eta, u64)>;
    let mut waiting: HashMap<VisitorId, (Promise, Option<Instant>)> = HashMap::new();
    let epoch = |admission: &Admission| admission.cached_stats("main").map_or(0, |c| c.epoch);
    // The rule of the product's ledger, kept here independently: the first range with a
    // number, replaced by one shown after the room's limits moved.
    let keep = |promise: &mut Promise, shown: Eta, epoch: u64| {
        if !shown.estimating && promise.is_none_or(|(_, _, e)| e < epoch) {
            *promise = Some((Instant::now(), shown, epoch));
        }
    };
    let start = Instant::now();
    let (mut joined, mut next_arrival) = (0usize, Duration::ZERO);
    let mut step = 0u64;
    admission.refresh_stats(&rooms).await;
    while joined < s.visitors || !waiting.is_empty() {
        let elapsed = start.elapsed();
        // Arrivals due by now: exponential gaps (a Poisson crowd).
        while joined < s.visitors && next_arrival <= elapsed {
            let v = VisitorId::random();
            if let Decision::Waiting(place) = admission.decide("main", v, anyone()).await {
                // As the waiting page shows it, which enters it in the product's ledger.
                let shown = admission.show_eta("main", v, &place);
                let leaves = (s.abandon_one_in > 0 && rng.next().is_multiple_of(s.abandon_one_in))
                    .then(|| Instant::now() + Duration::from_secs_f64(5.0 + 60.0 * rng.unit()));
                let mut promise = None;
                keep(&mut promise, shown, epoch(&admission));
                waiting.insert(v, (promise, leaves));
            }
            joined += 1;
            let gap = -(1.0 - rng.unit()).ln() / s.arrivals_per_sec;
            next_arrival += Duration::from_secs_f64(gap);
        }
        if s.halve_at
            .is_some_and(|t| elapsed.as_secs() == t && step.is_multiple_of(4))
        {
            let patch = SettingsPatch {
                rate: Some(s.rate / 2.0),
                ..Default::default()
            };
            store.update_settings("main", &patch).await.unwrap();
        }
        tokio::time::advance(PASS).await;
        step += 1;
        // The pass driver's own step, which settles the product's ledger too.
        let report = admission.admit_pass("main").await.unwrap();
        for v in report.admitted {
            if let Some((Some((at, shown, _)), _)) = waiting.remove(&v) {
                tracker.record(Instant::now(), shown, at.elapsed());
            }
        }
        for v in report.abandoned {
            waiting.remove(&v);
        }
        if step.is_multiple_of(4) {
            admission.refresh_stats(&rooms).await;
        }
        if step.is_multiple_of(8) {
            // The live stream's heartbeat and position event, every 2 s, to those still
            // on the page.
            let now = Instant::now();
            let live: Vec<VisitorId> = waiting
                .iter()
                .filter(|(_, (_, leaves))| leaves.is_none_or(|t| now < t))
                .map(|(v, _)| *v)
                .collect();
            let states = admission.heartbeat("main", &live).await.unwrap();
            let epoch = epoch(&admission);
            for (v, state) in live.into_iter().zip(states) {
                let VisitorState::Waiting(place) = state else {
                    continue;
                };
                let shown = admission.show_eta("main", v, &place);
                if let Some((promise, _)) = waiting.get_mut(&v) {
                    keep(promise, shown, epoch);
                }
            }
        }
        assert!(step < 400_000, "{}: the line never drained", s.name);
    }
    let report = tracker.report(Instant::now());
    // The product's wiring (ledger and tracker inside `Admission`) saw the same crowd.
    assert_eq!(admission.eta_ledger().report("main"), report, "{}", s.name);
    assert_eq!(admission.eta_ledger().tracked("main"), 0, "{}", s.name);
    println!(
        "ETA simulation [{}]: admitted {} after a wait, within range {:.1} %, median error {:.1} s",
        s.name,
        report.admitted,
        100.0 * report.within_range.unwrap_or(0.0),
        report.median_error_secs.unwrap_or(0.0)
    );
    report
}

fn steady(name: &'static str, rate: f64) -> Scenario {
    Scenario {
        name,
        rate,
        arrivals_per_sec: rate * 2.0,
        visitors: 3_000,
        halve_at: None,
        abandon_one_in: 0,
        site_bound: None,
    }
}

/// Runs `s`: at least 1,000 waited, and at least 90 % of them were admitted within the
/// range promised.
async fn assert_honest(s: &Scenario) {
    let r = run(s).await;
    assert!(
        r.admitted >= 1_000,
        "{}: only {} waited",
        s.name,
        r.admitted
    );
    let hit = r.within_range.unwrap();
    assert!(
        hit >= 0.9,
        "{}: only {:.1} % within range",
        s.name,
        hit * 100.0
    );
}

#[tokio::test(start_paused = true)]
async fn steady_rates_are_within_range_at_least_90_percent() {
    for s in [steady("steady 5/s", 5.0), steady("steady 20/s", 20.0)] {
        assert_honest(&s).await;
    }
}

/// The other crowds: the rate halved mid-drop (the promises of those in line are
/// made again once: the limits moved), abandonment, and a site that sets the pace below
/// `rate`; each at least 90 % within the promised range.
#[tokio::test(start_paused = true)]
async fn changing_rates_abandonment_and_a_site_bound_line_are_within_range() {
    let halved = Scenario {
        name: "rate halved mid-run",
        halve_at: Some(120),
        ..steady("", 10.0)
    };
    let abandoning = Scenario {
        name: "steady 10/s, 1 in 5 abandon",
        abandon_one_in: 5,
        ..steady("", 10.0)
    };
    // Configured for 50/s, but 50 on the site whose sessions end after 10 s idle: the
    // line moves at about 5/s, which only the observed rate knows.
    let site_bound = Scenario {
        name: "site-bound ~5/s (rate 50, max_active 50, 10 s sessions)",
        arrivals_per_sec: 10.0,
        site_bound: Some((50, Duration::from_secs(10))),
        ..steady("", 50.0)
    };
    for s in [halved, abandoning, site_bound] {
        assert_honest(&s).await;
    }
}
