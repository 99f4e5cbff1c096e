//! The admission facade's own rules: the session cache, the statistics cache, the pace
//! and the ETA ledger's wiring, store health and closed-loop admission across replicas.

use std::collections::VecDeque;

use super::stats_cache::observed;
use super::*;
use crate::clock::Clock;
use crate::fairness::eta::{EtaReport, Observed};
use crate::queue::{
    MemoryStore, RoomPolicy,
    conformance::{anyone, settings},
};

#[test]
fn eta_is_a_range_and_never_negative() {
    let range = |min, max| Eta {
        min,
        max,
        estimating: false,
    };
    assert_eq!(Eta::for_position(100, 10.0), range(8, 13));
    assert_eq!(Eta::for_position(0, 10.0), range(0, 0));
    assert_eq!(Eta::for_position(5, 0.0), Eta::estimating(0));
    let e = Eta::for_position(1, 0.5);
    assert!(e.min <= e.max);
    // A rate too low to mean anything says a year, not a number no page can hold.
    let year = crate::fairness::eta::MAX_SECS;
    assert_eq!(Eta::for_position(1_000, 1e-300), range(year, year));
    assert_eq!(Eta::for_position(3, 1e-9), range(year, year));
    assert_eq!(Eta::estimating(u64::MAX), Eta::estimating(year));
    let pace = crate::fairness::eta::Pace {
        admitting: 1e-300,
        observed: None,
        generation: None,
        turnover: None,
    };
    assert_eq!(pace.eta(27), Eta::estimating(year));
}

#[tokio::test(start_paused = true)]
async fn the_room_estimates_until_it_has_seen_its_line_move() {
    let store = Arc::new(MemoryStore::in_memory(Clock::starting_at(0)));
    // Configured for 100 a second, but the site holds 10 whose sessions last a second:
    // the line really moves at about 10 a second.
    let mut seed = settings(100.0, 10);
    seed.session_ttl = Duration::from_secs(1);
    store
        .open_room("main", &seed, &RoomPolicy::default(), false)
        .await
        .unwrap();
    store
        .update_settings("main", &crate::queue::SettingsPatch::pause())
        .await
        .unwrap();
    for _ in 0..1_000 {
        store
            .resolve("main", VisitorId::random(), anyone())
            .await
            .unwrap();
    }
    let admission = Arc::new(Admission::new(store.clone(), None, EventSink::disabled()));
    let rooms = vec!["main".to_owned()];
    admission.refresh_stats(&rooms).await;
    // Nothing observed yet (and paused): estimating.
    assert_eq!(admission.eta("main", 100), Eta::estimating(0));
    store
        .update_settings("main", &crate::queue::SettingsPatch::resume())
        .await
        .unwrap();
    for _ in 0..20 {
        tokio::time::advance(Duration::from_secs(1)).await;
        store.admit_pass("main").await.unwrap();
        admission.refresh_stats(&rooms).await;
    }
    let rate = admission
        .cached_stats("main")
        .unwrap()
        .observed_rate()
        .unwrap();
    assert!((rate - 10.0).abs() < 1.0, "observed {rate}");
    assert_eq!(admission.eta("main", 100), Eta::for_position(100, rate));
}

#[test]
fn quiet_stretches_without_a_line_do_not_count() {
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    // 50 s with nobody waiting (and 2 fast-path admissions), then 10 s of a line
    // moving at 5 a second.
    let samples: VecDeque<_> = [
        (at(0), 0, 0),
        (at(50), 2, 0),
        (at(50), 2, 40),
        (at(60), 52, 0),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        observed(&samples),
        Some(Observed {
            rate: 5.0,
            admitted: 50,
            busy: Duration::from_secs(10)
        })
    );
    let idle: VecDeque<_> = [(at(0), 0, 0), (at(30), 9, 0)].into_iter().collect();
    assert_eq!(observed(&idle), None);
}

async fn room_with(max_active: u64, session_ttl: Duration) -> (Arc<MemoryStore>, Admission) {
    let store = Arc::new(MemoryStore::in_memory(Clock::starting_at(0)));
    let mut seed = settings(1_000.0, max_active);
    seed.session_ttl = session_ttl;
    store
        .open_room("main", &seed, &RoomPolicy::default(), false)
        .await
        .unwrap();
    let admission = Admission::new(store.clone(), None, EventSink::disabled());
    (store, admission)
}

async fn admitted(admission: &Admission, visitor: VisitorId) -> bool {
    matches!(
        admission.decide("main", visitor, anyone()).await,
        Decision::Admitted { .. }
    )
}

/// A request the cache answers reaches the store at the next flush, as the session's
/// activity: without the flush the session expires on the store's clock at t=10 as if
/// the visitor had gone quiet at t=0.
#[tokio::test(start_paused = true)]
async fn cached_requests_reach_the_store_at_the_next_flush() {
    let (store, admission) = room_with(1, Duration::from_secs(10)).await;
    let visitor = VisitorId::random();
    assert!(
        admitted(&admission, visitor).await,
        "t=0: admitted by the store"
    );
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(admitted(&admission, visitor).await, "t=1: from the cache");
    admission.flush_sessions().await;
    tokio::time::advance(Duration::from_millis(9_500)).await;
    let report = store.admit_pass("main").await.unwrap();
    assert!(report.expired.is_empty(), "flushed at t=1: alive at t=10.5");
    tokio::time::advance(Duration::from_secs(1)).await;
    let report = store.admit_pass("main").await.unwrap();
    assert_eq!(
        report.expired,
        vec![visitor],
        "quiet since t=1: gone at t=11.5"
    );
}

/// A session ended where this replica cannot see it (another replica, the origin through
/// it, a ban there) stops being trusted here at the next flush, well inside the trust
/// window that would otherwise still cover it.
#[tokio::test(start_paused = true)]
async fn a_session_ended_elsewhere_stops_at_the_next_flush() {
    let (store, admission) = room_with(1, Duration::from_secs(600)).await;
    let visitor = VisitorId::random();
    assert!(admitted(&admission, visitor).await);
    tokio::time::advance(Duration::from_millis(300)).await;
    assert!(admitted(&admission, visitor).await, "from the cache");
    assert!(store.end_session("main", visitor).await.unwrap());
    // The freed slot goes to someone else, so a newcomer would now wait.
    assert!(admitted(&admission, VisitorId::random()).await);
    assert!(
        admitted(&admission, visitor).await,
        "until the flush, the cache still answers (this is the stated interval)"
    );
    tokio::time::advance(Duration::from_millis(700)).await;
    admission.flush_sessions().await;
    assert!(
        !admitted(&admission, visitor).await,
        "after the flush at t=1 s the store decides: a newcomer, in line"
    );
}

/// A visitor with no request since the last flush is not renewed by it (a flush only
/// touches the sessions that were used), so their trust ends with the window and their
/// next request asks the store: the longest a session ended elsewhere is still trusted.
#[tokio::test(start_paused = true)]
async fn a_quiet_visitors_trust_ends_with_the_window() {
    let (store, admission) = room_with(1, Duration::from_secs(600)).await;
    let visitor = VisitorId::random();
    assert!(admitted(&admission, visitor).await);
    assert!(store.end_session("main", visitor).await.unwrap());
    assert!(
        admitted(&admission, VisitorId::random()).await,
        "the slot is taken"
    );
    admission.flush_sessions().await;
    tokio::time::advance(SESSION_CONFIRM_WINDOW - Duration::from_millis(1)).await;
    assert!(admitted(&admission, visitor).await, "inside the window");
    admission.flush_sessions().await;
    tokio::time::advance(SESSION_CONFIRM_WINDOW).await;
    assert!(
        !admitted(&admission, visitor).await,
        "the store decides again"
    );
}

/// A flush renews only the trust still inside the room's own window (half a short
/// `session_ttl`), not the default one: a client whose trust ran out asks the store.
#[tokio::test(start_paused = true)]
async fn a_flush_renews_only_trust_inside_the_rooms_window() {
    let (store, admission) = room_with(1, Duration::from_secs(1)).await;
    // The room's settings, as the stats tick keeps them.
    admission.refresh_stats(&["main".to_owned()]).await;
    let visitor = VisitorId::random();
    assert!(admitted(&admission, visitor).await);
    tokio::time::advance(Duration::from_millis(400)).await;
    assert!(admitted(&admission, visitor).await, "answered by the cache");
    // 700 ms after its confirmation: past the room's 500 ms window, inside the
    // default 2 s one.
    tokio::time::advance(Duration::from_millis(300)).await;
    admission.flush_sessions().await;
    assert!(store.end_session("main", visitor).await.unwrap());
    assert!(
        admitted(&admission, VisitorId::random()).await,
        "the slot is taken"
    );
    tokio::time::advance(Duration::from_millis(100)).await;
    assert!(
        !admitted(&admission, visitor).await,
        "the store decides, and the session has ended"
    );
}

/// `max_active` holds while admitted visitors are answered from the cache for many
/// flushes: their sessions stay alive through the flushes, so nobody else is let into
/// their slots, and the cache never admits anyone the store did not.
#[tokio::test(start_paused = true)]
async fn max_active_holds_while_the_cache_answers() {
    let (store, admission) = room_with(2, Duration::from_secs(4)).await;
    let on_site = [VisitorId::random(), VisitorId::random()];
    for v in on_site {
        assert!(admitted(&admission, v).await);
    }
    let outside = VisitorId::random();
    for second in 0..30 {
        for v in on_site {
            assert!(
                admitted(&admission, v).await,
                "t={second}: still on the site"
            );
        }
        assert!(
            !admitted(&admission, outside).await,
            "t={second}: no slot is free"
        );
        store.admit_pass("main").await.unwrap();
        assert!(store.stats("main").await.unwrap().active <= 2);
        admission.flush_sessions().await;
        tokio::time::advance(Duration::from_secs(1)).await;
    }
    let report = store.admit_pass("main").await.unwrap();
    assert!(report.expired.is_empty() && report.admitted.is_empty());
}

/// The cache is per client: a cookie confirmed from one client is asked of the
/// store again from another, so `session_clients` counts (and here refuses) it; every
/// client of one session shares one `admitted_at`; ending the session forgets it from
/// every client at once.
#[tokio::test(start_paused = true)]
async fn the_session_cache_is_per_client() {
    let store = Arc::new(MemoryStore::in_memory(Clock::starting_at(0)));
    let policy = RoomPolicy {
        session_clients: 2,
        ..RoomPolicy::default()
    };
    store
        .open_room("main", &settings(1.0, 10), &policy, false)
        .await
        .unwrap();
    let admission = Admission::new(store.clone(), None, EventSink::disabled());
    let client = |last: u8| ClientKey::from(std::net::IpAddr::from([192, 0, 2, last]));
    let visitor = VisitorId::random();

    let Decision::Admitted { since } = admission.decide("main", visitor, client(1)).await else {
        panic!("the first client is admitted");
    };
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(
        admission.decide("main", visitor, client(2)).await,
        Decision::Admitted { since },
        "a second client reaches the store and shares the session's admitted_at"
    );
    assert!(
        matches!(
            admission.decide("main", visitor, client(3)).await,
            Decision::Refused {
                reason: Some(RefusedReason::SessionClients),
                ..
            }
        ),
        "a third client is refused by the store, not let through by the cache"
    );
    // Still cached for the first client, within its window.
    assert_eq!(
        admission.decide("main", visitor, client(1)).await,
        Decision::Admitted { since }
    );

    // Paused, so a visitor the store no longer has on the site waits rather than being
    // admitted afresh.
    store
        .update_settings("main", &crate::queue::SettingsPatch::pause())
        .await
        .unwrap();
    assert!(admission.end_session("main", visitor).await.unwrap());
    for c in [client(1), client(2)] {
        assert!(
            matches!(
                admission.decide("main", visitor, c).await,
                Decision::Waiting(_)
            ),
            "an ended session is trusted from no client"
        );
    }
}

/// The honest ETA through the product's own path: ten visitors wait in a room
/// seen moving at one a second, are shown the room's ranges for their places and reload
/// later (the first range stands); five go in on time, then a pause from 6 s to 10 s
/// makes the other five 5 s later than the room's pace. Waiting while paused is not a
/// range shown.
#[tokio::test(start_paused = true)]
async fn admissions_feed_the_honest_eta_exactly() {
    let store = Arc::new(MemoryStore::in_memory(Clock::starting_at(0)));
    store
        .open_room("main", &settings(1.0, 1_000), &RoomPolicy::default(), false)
        .await
        .unwrap();
    let admission = Admission::new(store.clone(), None, EventSink::disabled());
    let rooms = vec!["main".to_owned()];
    let pause = crate::queue::SettingsPatch::pause();
    let resume = crate::queue::SettingsPatch::resume();
    admission.update_settings("main", &pause).await.unwrap();
    let visitors: Vec<VisitorId> = (0..10).map(|_| VisitorId::random()).collect();
    let show = |v: VisitorId| {
        let admission = &admission;
        async move {
            let Decision::Waiting(place) = admission.decide("main", v, anyone()).await else {
                panic!("waiting");
            };
            admission.show_eta("main", v, &place)
        }
    };
    for &v in &visitors {
        show(v).await;
    }
    assert_eq!(admission.eta_ledger().tracked("main"), 0, "paused");

    admission.update_settings("main", &resume).await.unwrap();
    admission.stats.assume_seen("main", 1.0);
    admission.refresh_stats(&rooms).await;
    let pace = admission.cached_stats("main").unwrap().pace();
    let mut first = Vec::new();
    for (p, &v) in (1u64..).zip(&visitors) {
        let shown = show(v).await;
        assert!(!shown.estimating);
        assert_eq!(shown, pace.eta(p));
        first.push(shown);
    }
    let seen = pace.observed.unwrap();
    assert!((seen.rate - 1.0).abs() < 0.01, "{seen:?}");
    // 100th: the margin of a rate measured over 60 admissions, 1 + 2/√60.
    let margin = 1.0 + 2.0 / (seen.admitted as f64).sqrt();
    assert_eq!(pace.eta(100), Eta::within(100, seen.rate, margin));
    assert_eq!(admission.eta_ledger().tracked("main"), 10);
    for t in 1..=15u64 {
        tokio::time::advance(Duration::from_secs(1)).await;
        match t {
            3 => {
                // Everyone still waiting reloads and sees a nearer range.
                for &v in &visitors[3..] {
                    show(v).await;
                }
            }
            6 => {
                admission.update_settings("main", &pause).await.unwrap();
            }
            10 => {
                // A resume starts with an empty bucket: the next one goes in at 11 s.
                admission.update_settings("main", &resume).await.unwrap();
            }
            _ => {}
        }
        let report = admission.admit_pass("main").await.unwrap();
        let expected = match t {
            1..=5 => vec![visitors[t as usize - 1]],
            11..=15 => vec![visitors[t as usize - 6]],
            _ => vec![],
        };
        assert_eq!(report.admitted, expected, "t = {t}");
    }
    // Their next request and a stream tick see them admitted: nothing is counted twice.
    for &v in &visitors {
        assert!(matches!(
            admission.decide("main", v, anyone()).await,
            Decision::Admitted { .. }
        ));
    }
    admission.heartbeat("main", &visitors).await.unwrap();
    admission.refresh_stats(&rooms).await;
    // Waits 1..5 s and, after the pause, 11..15 s, each against the range first shown.
    let mut summary = crate::fairness::eta::EtaSummary::default();
    for (i, shown) in first.iter().enumerate() {
        let waited = if i < 5 { i + 1 } else { i + 6 };
        summary.record(*shown, Duration::from_secs(waited as u64));
    }
    let want = summary.report();
    assert_eq!(want.admitted, 10);
    // The first five (1 to 5 s) lie at their ranges' middles or near; the late five 5 s
    // past theirs: the lower median error is one of the on-time five's.
    assert!(want.median_error_secs.is_some_and(|e| e < 2.0), "{want:?}");
    assert_eq!(admission.cached_stats("main").unwrap().eta, want);
    assert_eq!(admission.eta_ledger().report("main"), want);
    assert_eq!(admission.eta_ledger().tracked("main"), 0);
}

/// With two replicas, each records the visitors it showed a range to, once, when it
/// first sees them admitted: here the replica that did not run the pass, on its stream
/// tick, timed by when it learnt of it.
#[tokio::test(start_paused = true)]
async fn a_replica_records_the_admissions_of_those_it_showed_a_range() {
    let store = Arc::new(MemoryStore::in_memory(Clock::starting_at(0)));
    let mut seed = settings(1.0, 1_000);
    seed.paused = true;
    store
        .open_room("main", &seed, &RoomPolicy::default(), false)
        .await
        .unwrap();
    let (shows, passes) = (
        Admission::new(store.clone(), None, EventSink::disabled()),
        Admission::new(store.clone(), None, EventSink::disabled()),
    );
    let (v, other) = (VisitorId::random(), VisitorId::random());
    for visitor in [v, other] {
        passes.decide("main", visitor, anyone()).await;
    }
    shows
        .update_settings("main", &crate::queue::SettingsPatch::resume())
        .await
        .unwrap();
    shows.stats.assume_seen("main", 1.0);
    shows.refresh_stats(&["main".to_owned()]).await;
    let Decision::Waiting(place) = shows.decide("main", v, anyone()).await else {
        panic!("waiting");
    };
    // Next in line, at one a second: the last places go one session at a time.
    let eta = Eta::within(1, 1.0, 3.0);
    assert_eq!(
        eta,
        Eta {
            min: 0,
            max: 3,
            estimating: false
        }
    );
    assert_eq!(shows.show_eta("main", v, &place), eta);
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(passes.admit_pass("main").await.unwrap().admitted, vec![v]);
    tokio::time::advance(Duration::from_secs(3)).await;
    shows.heartbeat("main", &[v, other]).await.unwrap();
    shows.decide("main", v, anyone()).await;
    // Seen admitted 4 s after the range [0, 3]: late, error |4 − 1.5| = 2.5.
    assert_eq!(
        shows.eta_ledger().report("main"),
        EtaReport {
            admitted: 1,
            within_range: Some(0.0),
            median_error_secs: Some(2.5),
        }
    );
    assert_eq!(passes.eta_ledger().report("main").admitted, 0);
}

/// Closed-loop admission with replicas, under the paused clock: neither replica alone has enough
/// evidence, together they do; one decision a second is made for both, both show it,
/// passes follow it, and recovery climbs step by step back to exactly the configured
/// rate.
#[tokio::test(start_paused = true)]
async fn replicas_decide_once_on_everyones_observations() {
    use crate::fairness::adaptive::AdaptiveConfig;
    let store = Arc::new(MemoryStore::in_memory(Clock::starting_at(
        1_700_000_000_000,
    )));
    let mut seed = settings(20.0, 100_000);
    seed.paused = true;
    store
        .open_room("main", &seed, &RoomPolicy::default(), false)
        .await
        .unwrap();
    let config = AdaptiveConfig {
        target_latency: Duration::from_millis(800),
        max_error_ratio: 0.05,
        min_rate: 1.0,
    };
    let (a, b) = (
        Admission::new(store.clone(), None, EventSink::disabled()),
        Admission::new(store.clone(), None, EventSink::disabled()),
    );
    for r in [&a, &b] {
        r.configure_adaptive("main", Some(config.clone()))
            .await
            .unwrap();
        assert_eq!(r.rate_view("main", 20.0).unwrap().rate_reason, "configured");
    }
    assert_eq!(a.rate_view("elsewhere", 20.0), None);
    let slow = |r: &Admission, n: usize| {
        for _ in 0..n {
            r.observe_origin("main", Duration::from_secs(2), 200);
        }
    };
    // 12 slow responses each: under MIN_SAMPLES (20) alone.
    slow(&a, 12);
    slow(&b, 12);
    a.adapt().await;
    b.adapt().await;
    assert_eq!(a.rate_view("main", 20.0).unwrap().effective_rate, 20.0);
    tokio::time::advance(Duration::from_secs(1)).await;
    a.adapt().await;
    b.adapt().await;
    for r in [&a, &b] {
        let view = r.rate_view("main", 20.0).unwrap();
        assert_eq!(view.effective_rate, 10.0, "halved once, for both: {view:?}");
        assert_eq!(view.rate_reason, "latency");
        assert_eq!(view.origin_samples, 24, "every replica's observations");
        assert!(view.origin_p95_ms.unwrap() >= 2_000);
        assert!(view.explanation.contains("over the 800 ms target"));
    }

    // The passes (of either replica) admit at the effective rate.
    for _ in 0..500 {
        a.decide("main", VisitorId::random(), anyone()).await;
    }
    a.update_settings("main", &crate::queue::SettingsPatch::resume())
        .await
        .unwrap();
    let mut admitted = 0;
    for i in 0..40 {
        tokio::time::advance(Duration::from_millis(250)).await;
        let replica = if i % 2 == 0 { &a } else { &b };
        admitted += replica.admit_pass("main").await.unwrap().admitted.len();
    }
    assert!(admitted.abs_diff(100) <= 1, "{admitted} in 10 s at 10/s");

    // The slow responses age out of the window; then the origin is fast again.
    tokio::time::advance(Duration::from_secs(1)).await;
    let mut rates = Vec::new();
    for _ in 0..40 {
        for r in [&a, &b] {
            for _ in 0..10 {
                r.observe_origin("main", Duration::from_millis(30), 200);
            }
            r.adapt().await;
        }
        rates.push(b.rate_view("main", 20.0).unwrap().effective_rate);
        tokio::time::advance(Duration::from_secs(1)).await;
    }
    for pair in rates.windows(2) {
        assert!(pair[1] >= pair[0], "{rates:?}");
        assert!(
            pair[1] - pair[0] <= 1.0 + 1e-9,
            "one step at a time: {rates:?}"
        );
    }
    assert!(rates.iter().any(|&r| r > 10.0 && r < 20.0), "{rates:?}");
    for r in [&a, &b] {
        let view = r.rate_view("main", 20.0).unwrap();
        assert_eq!(view.effective_rate, 20.0, "exactly the configured rate");
        assert_eq!(view.rate_reason, "configured");
    }
    // Turned off: the store forgets the effective rate.
    a.configure_adaptive("main", None).await.unwrap();
    assert_eq!(a.rate_view("main", 20.0), None);
}

#[tokio::test(start_paused = true)]
async fn fail_open_only_after_the_configured_outage() {
    let health = StoreHealth::new(Some(Duration::from_secs(30)));
    assert!(health.is_up());
    health.record_failure("gone");
    tokio::time::advance(Duration::from_secs(29)).await;
    assert!(!health.failing_open());
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(health.failing_open());
    health.record_ok();
    assert!(health.is_up() && !health.failing_open());
    let closed = StoreHealth::new(None);
    closed.record_failure("gone");
    tokio::time::advance(Duration::from_secs(3_600)).await;
    assert!(!closed.failing_open(), "fail_open off: never");
}

/// With Redis, a replica's pass hears what another replica's pass admitted: its live streams
/// are told (the pass's broadcast carries them) and a range it showed them is settled then,
/// not at their stream's next heartbeat.
#[tokio::test]
async fn another_replicas_admissions_reach_this_replicas_streams_and_ledger_at_its_pass() {
    use crate::queue::{RedisStore, SettingsPatch};
    let server = anteroom_fixtures::RedisServer::start();
    let store = || async {
        let store = RedisStore::connect(&[&server.url()]).await.unwrap();
        store.freeze_clock_for_tests(crate::queue::conformance::START_MS);
        Arc::new(store)
    };
    let (a, b) = (store().await, store().await);
    a.open_room(
        "main",
        &settings(1_000.0, 100),
        &RoomPolicy::default(),
        false,
    )
    .await
    .unwrap();
    let on_a = Admission::new(a.clone(), None, EventSink::disabled());
    let on_b = Admission::new(b.clone(), None, EventSink::disabled());
    // B's first pass, before anyone is admitted (where its hearing starts).
    on_b.admit_pass("main").await.unwrap();
    a.update_settings("main", &SettingsPatch::pause())
        .await
        .unwrap();
    let v = VisitorId::random();
    a.resolve("main", v, anyone()).await.unwrap();
    a.update_settings("main", &SettingsPatch::resume())
        .await
        .unwrap();
    // B showed v a range (v's page is on B).
    let range = Eta {
        min: 1,
        max: 2,
        estimating: false,
    };
    on_b.eta
        .shown("main", v, range, crate::queue::conformance::START_MS, 0);
    let mut told = on_b.passes();
    for store in [&a, &b] {
        store.advance_clock_for_tests(Duration::from_millis(250));
    }
    assert_eq!(on_a.admit_pass("main").await.unwrap().admitted, vec![v]);
    assert!(told.try_recv().is_err(), "nothing yet: A's pass is A's");
    let report = on_b.admit_pass("main").await.unwrap();
    assert_eq!(report.admitted_elsewhere, vec![v]);
    assert_eq!(
        told.try_recv().unwrap(),
        PassAdmitted {
            room: "main".into(),
            visitors: vec![v].into(),
        },
        "B's streams are told at B's pass"
    );
    assert!(
        !on_b.eta.admitted("main", v, 0),
        "B's ledger settled v's range at B's pass (nothing left to settle)"
    );
}

/// The site fills up, then the line stands still until the first sessions end: that wait
/// says how long sessions last, not how fast the line moves, and is not observed as its
/// pace (nor are the admissions that filled the site). Here 200 arrive at once at a room
/// admitting 4 a second into 10 places of 10 s sessions: a few are let in at once, a line
/// forms, the passes fill the site, and nobody leaves for about 9 s; after that places
/// free up 10 every 10 s. Again for a second crowd, once the line has been empty for a
/// minute.
#[tokio::test(start_paused = true)]
async fn the_wait_for_the_first_sessions_to_end_is_not_the_lines_pace() {
    let store = Arc::new(MemoryStore::in_memory(Clock::starting_at(0)));
    let mut seed = settings(4.0, 10);
    seed.session_ttl = Duration::from_secs(10);
    store
        .open_room("main", &seed, &RoomPolicy::default(), false)
        .await
        .unwrap();
    let admission = Admission::new(store.clone(), None, EventSink::disabled());
    let rooms = vec!["main".to_owned()];
    admission.refresh_stats(&rooms).await;
    // Passes every 250 ms and the statistics every second.
    let run = |seconds: u32| {
        let (admission, rooms) = (&admission, &rooms);
        async move {
            for tick in 1..=seconds * 4 {
                tokio::time::advance(Duration::from_millis(250)).await;
                admission.admit_pass("main").await.unwrap();
                if tick % 4 == 0 {
                    admission.refresh_stats(rooms).await;
                }
            }
        }
    };
    for crowd in 1..=2u64 {
        let before = admission.cached_stats("main").unwrap().stats.total_admitted;
        for _ in 0..200 {
            store
                .resolve("main", VisitorId::random(), anyone())
                .await
                .unwrap();
        }
        run(2).await;
        let stats = admission.cached_stats("main").unwrap();
        assert_eq!(stats.stats.active, 10, "crowd {crowd}: the site is full");
        for second in 2..10 {
            // Full, nobody has left yet: no pace to promise (it would be the few
            // admissions that filled the site over the seconds of waiting so far, a
            // fraction of the real one).
            let stats = admission.cached_stats("main").unwrap();
            assert_eq!(stats.observed, None, "crowd {crowd}, at {second} s");
            let eta = admission.eta("main", 100);
            if crowd == 1 {
                assert!(eta.estimating, "at {second} s: {eta:?}");
            } else {
                // The first crowd's sessions gave the site's turnover (10 per 10 s): the
                // 100th in line is about 100 s away.
                assert!(
                    !eta.estimating && eta.min <= 100 && 100 <= eta.max,
                    "{eta:?}"
                );
            }
            run(1).await;
        }
        // To just before the third wave of sessions ends.
        run(19).await;
        let stats = admission.cached_stats("main").unwrap();
        assert_eq!(stats.stats.total_admitted - before, 30, "crowd {crowd}");
        let rate = stats.observed_rate().unwrap();
        assert!(
            (rate - 1.0).abs() < 0.1,
            "crowd {crowd}: observed {rate}, not 1 a second"
        );
        assert!(!admission.eta("main", 100).estimating);
        // The rest of the crowd is let go, and the line stays empty for over a minute.
        store.flush("main").await.unwrap();
        run(75).await;
    }
}
