//! The ETA range, the tracker, the ledger and the pace, each alone.

use super::*;

fn eta(min: u64, max: u64) -> Eta {
    Eta {
        min,
        max,
        estimating: false,
    }
}

#[test]
fn within_and_median() {
    let mut s = EtaSummary::default();
    s.record(eta(8, 12), Duration::from_secs(10));
    s.record(eta(8, 12), Duration::from_millis(12_400)); // shows as 12: within
    s.record(eta(8, 12), Duration::from_secs(30));
    let r = s.report();
    assert_eq!(r.admitted, 3);
    assert!((r.within_range.unwrap() - 2.0 / 3.0).abs() < 1e-9);
    // Errors 0, 2.4, 20: the median is 2.4, reported as its 1 s bucket's middle.
    assert_eq!(r.median_error_secs, Some(2.5));
    assert_eq!(EtaSummary::default().report().within_range, None);
}

#[test]
fn histogram_buckets_cover_every_error() {
    for err in [
        0.0,
        0.5,
        63.9,
        64.0,
        100.0,
        1983.9,
        1984.0,
        21_183.0,
        1e12,
        f64::NAN,
    ] {
        let i = error_bucket(err);
        assert!(i < ERROR_BUCKETS);
        let (lo, hi) = bucket_bounds(i);
        assert!(
            !err.is_finite() || err >= 1e9 || (lo <= err && err < hi),
            "{err} in {lo}..{hi}"
        );
    }
}

#[test]
fn summaries_merge_across_replicas() {
    let (mut a, mut b) = (EtaSummary::default(), EtaSummary::default());
    a.record(eta(0, 5), Duration::from_secs(3));
    b.record(eta(0, 5), Duration::from_secs(60));
    a.merge(&b);
    assert_eq!(a.admitted, 2);
    assert_eq!(a.within, 1);
}

#[tokio::test(start_paused = true)]
async fn the_window_is_the_last_hour_and_memory_is_fixed() {
    let mut t = EtaTracker::new(Instant::now());
    t.record(Instant::now(), eta(1, 2), Duration::from_secs(1));
    tokio::time::advance(Duration::from_secs(1800)).await;
    t.record(Instant::now(), eta(1, 2), Duration::from_secs(9));
    assert_eq!(t.report(Instant::now()).admitted, 2);
    tokio::time::advance(Duration::from_secs(1800)).await;
    // The first minute has left the window.
    let r = t.report(Instant::now());
    assert_eq!(r.admitted, 1);
    assert_eq!(r.within_range, Some(0.0));
    // Hours of traffic never grow the ring.
    for _ in 0..500 {
        tokio::time::advance(Duration::from_secs(37)).await;
        t.record(Instant::now(), eta(1, 2), Duration::from_secs(2));
    }
    assert_eq!(t.ring.len(), BUCKETS);
    assert!(t.report(Instant::now()).admitted <= 100);
}

fn v(n: u8) -> VisitorId {
    VisitorId([n; 16])
}

#[tokio::test(start_paused = true)]
async fn the_ledger_keeps_the_first_range_and_records_each_admission_once() {
    let ledger = EtaLedger::default();
    ledger.shown("main", v(1), eta(8, 12), 1_000, 0);
    // Shown again, narrower and later: the first showing stands.
    ledger.shown("main", v(1), eta(1, 2), 9_000, 0);
    ledger.shown("main", v(2), eta(0, 5), 1_000, 0);
    ledger.shown("other", v(1), eta(0, 1), 1_000, 0);
    assert_eq!(ledger.tracked("main"), 2);
    // 10 s after the first showing: within 8..12, error |10 - 10| = 0.
    assert!(ledger.admitted("main", v(1), 11_000));
    // Seen admitted again (another request, a stream tick): nothing more is recorded.
    assert!(!ledger.admitted("main", v(1), 12_000));
    // Never shown a range here (another replica's visitor, or the fast path).
    assert!(!ledger.admitted("main", v(3), 12_000));
    // Left the line: forgotten, never recorded.
    ledger.forget("main", v(2));
    assert!(!ledger.admitted("main", v(2), 12_000));
    assert_eq!(
        ledger.report("main"),
        EtaReport {
            admitted: 1,
            within_range: Some(1.0),
            median_error_secs: Some(0.5),
        }
    );
    assert_eq!(ledger.report("other").admitted, 0);
    assert_eq!(ledger.report("nowhere").within_range, None);
    assert_eq!((ledger.tracked("main"), ledger.forgotten("main")), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn estimating_promises_nothing_and_moved_limits_revise_the_promise() {
    let ledger = EtaLedger::default();
    ledger.shown("main", v(1), Eta::estimating(3), 1_000, 0);
    assert_eq!(ledger.tracked("main"), 0, "estimating is not a promise");
    // The first range with a number is the promise, from when it was shown.
    ledger.shown("main", v(1), eta(4, 6), 2_000, 0);
    ledger.shown("main", v(1), eta(1, 2), 3_000, 0);
    // The limits moved (epoch 1): the range shown now replaces the promise.
    ledger.shown("main", v(1), eta(9, 11), 4_000, 1);
    ledger.shown("main", v(1), eta(1, 2), 5_000, 1);
    assert_eq!((ledger.tracked("main"), ledger.revised("main")), (1, 1));
    // Admitted 10 s after the revised range was shown: within 9..11.
    assert!(ledger.admitted("main", v(1), 14_000));
    assert_eq!(ledger.report("main").within_range, Some(1.0));
}

#[test]
fn a_pace_estimates_until_it_has_seen_enough_then_trusts_the_slower_rate() {
    let observed = |rate: f64, admitted: u64, busy: u64| Observed {
        rate,
        admitted,
        busy: Duration::from_secs(busy),
    };
    let nothing = Pace {
        admitting: 10.0,
        observed: None,
        generation: None,
        turnover: None,
    };
    // Nothing seen: "estimating", at least the wait at the admitting rate.
    assert_eq!(nothing.eta(100), Eta::estimating(10));
    for too_little in [observed(2.0, 9, 30), observed(2.0, 50, 4)] {
        let pace = Pace {
            observed: Some(too_little),
            ..nothing
        };
        assert!(pace.eta(100).estimating, "{too_little:?}");
    }
    // Seen enough: the slower of the observed and the admitting rate.
    let site_bound = Pace {
        observed: Some(observed(2.0, 400, 200)),
        ..nothing
    };
    assert_eq!(site_bound.eta(100), Eta::for_position(100, 2.0));
    let rate_bound = Pace {
        admitting: 5.0,
        observed: Some(observed(10.0, 400, 40)),
        ..nothing
    };
    assert_eq!(rate_bound.eta(100), Eta::for_position(100, 5.0));
    // Few admissions behind the rate, or few places ahead: a wider range.
    let early = Pace {
        observed: Some(observed(2.0, 16, 8)),
        ..nothing
    };
    assert_eq!(early.eta(100), Eta::within(100, 2.0, 1.5));
    assert_eq!(site_bound.eta(4), Eta::within(4, 2.0, 2.0));
    assert_eq!(
        site_bound.eta(1),
        Eta {
            min: 0,
            max: 2,
            estimating: false
        }
    );
    // A full site of 15 sessions: what less than a generation showed is no promise (a
    // burst of sessions leaving together, or the stand-still after it)...
    let full = Pace {
        generation: Some(15),
        ..nothing
    };
    for part in [observed(6.0, 14, 5), observed(0.5, 10, 20)] {
        let pace = Pace {
            observed: Some(part),
            ..full
        };
        assert!(pace.eta(100).estimating, "{part:?}");
    }
    // ... nor is it over the ended sessions' turnover, once a generation has ended...
    let known = Pace {
        turnover: Some(Turnover {
            rate: 1.5,
            sessions: 16,
        }),
        ..full
    };
    assert_eq!(known.eta(100), Eta::within(100, 1.5, 1.5));
    let burst = Pace {
        observed: Some(observed(6.0, 14, 5)),
        ..known
    };
    assert_eq!(burst.eta(100), Eta::within(100, 1.5, 1.5));
    // ... but a whole generation watched is, bounded by the turnover; its admissions count
    // as the fewest a promise rests on, and those after it add to that. Half a minute of
    // a generation that lasts longer is as good.
    for (whole, rate, n) in [
        (observed(1.2, 15, 20), 1.2, MIN_OBSERVED),
        (observed(1.2, 55, 40), 1.2, 40),
        (observed(6.0, 30, 5), 1.5, 15),
        (
            observed(1.2, 12, MAX_GENERATION.as_secs()),
            1.2,
            MIN_OBSERVED,
        ),
    ] {
        let pace = Pace {
            observed: Some(whole),
            ..known
        };
        assert_eq!(
            pace.eta(100),
            Eta::within(100, rate, 1.0 + 2.0 / (n as f64).sqrt()),
            "{whole:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn the_ledger_is_capped_and_forgets_the_oldest_and_the_stale() {
    let ledger = EtaLedger::with_cap(3);
    for n in 1..=5 {
        ledger.shown("main", v(n), eta(0, 9), u64::from(n) * 1_000, 0);
    }
    // The two oldest made room.
    assert_eq!((ledger.tracked("main"), ledger.forgotten("main")), (3, 2));
    assert!(!ledger.admitted("main", v(1), 6_000));
    assert!(!ledger.admitted("main", v(2), 6_000));
    assert!(ledger.admitted("main", v(3), 6_000));
    // Far later, the rest are older than the horizon: forgotten, counted.
    ledger.prune(4_000 + crate::clock::ms(LEDGER_MAX_AGE) + 1);
    assert_eq!((ledger.tracked("main"), ledger.forgotten("main")), (1, 3));
    assert!(ledger.admitted("main", v(5), 6_000));
    assert_eq!(ledger.report("main").admitted, 2);
}
