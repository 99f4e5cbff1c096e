//! Closed-loop admission's shared state: the effective rate's cap on the bucket and the
//! replicas' origin reports.

use super::*;

fn adaptive_state(effective_rate: f64) -> crate::queue::AdaptiveState {
    crate::queue::AdaptiveState {
        effective_rate,
        reason: crate::fairness::adaptive::Reason::SlowOrigin {
            p95_ms: 1_300,
            target_ms: 800,
        },
        last_decrease_ms: Some(1),
        last_increase_ms: None,
        p95_ms: Some(1_300),
        error_ratio: 0.0,
        samples: 40,
        decided_ms: 1,
    }
}

/// Closed-loop admission (docs/fairness.md): the controller's effective rate is applied as
/// exactly as the rate itself, never above the configured `rate` (which stays as it was),
/// and clearing it restores the configured rate.
pub async fn effective_rate_caps_the_bucket_exactly<H: Harness>(h: &mut H) {
    let store = open(h, settings(10.0, 100_000)).await;
    pause(&*store).await;
    join_all(&*store, &visitors(1_000)).await;
    resume(&*store).await;
    store
        .set_adaptive(ROOM, Some(&adaptive_state(2.5)))
        .await
        .unwrap();
    let lowered = run_passes(h, Duration::from_secs(20)).await.len() as i64;
    assert!((lowered - 50).abs() <= 1, "{lowered} in 20 s at 2.5/s");
    assert_eq!(store.stats(ROOM).await.unwrap().settings.rate, 10.0);

    // Above the configured rate: the configured rate holds.
    store
        .set_adaptive(ROOM, Some(&adaptive_state(50.0)))
        .await
        .unwrap();
    let capped = run_passes(h, Duration::from_secs(10)).await.len() as i64;
    assert!((capped - 100).abs() <= 3, "{capped} in 10 s at 10/s");

    // The operator lowers `rate` below the effective rate: the lower one applies.
    store
        .update_settings(
            ROOM,
            &SettingsPatch {
                rate: Some(1.0),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let operator = run_passes(h, Duration::from_secs(10)).await.len() as i64;
    assert!((operator - 10).abs() <= 2, "{operator} in 10 s at 1/s");

    store
        .update_settings(
            ROOM,
            &SettingsPatch {
                rate: Some(10.0),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    store
        .set_adaptive(ROOM, Some(&adaptive_state(4.0)))
        .await
        .unwrap();
    let again = run_passes(h, Duration::from_secs(10)).await.len() as i64;
    assert!((again - 40).abs() <= 2, "{again} in 10 s at 4/s");
    store.set_adaptive(ROOM, None).await.unwrap();
    let cleared = run_passes(h, Duration::from_secs(10)).await.len() as i64;
    assert!(
        (cleared - 100).abs() <= 2,
        "{cleared} in 10 s at 10/s, cleared"
    );
    assert!(
        matches!(
            store.set_adaptive("nowhere", None).await,
            Err(StoreError::UnknownRoom(_))
        ),
        "only known rooms"
    );
}

/// Closed-loop admission with replicas: every replica's report is seen by every replica, a
/// stale one is dropped, only one caller per second claims the decision, and the stored
/// state is what the next exchange returns (on every replica).
pub async fn origin_reports_are_shared_and_one_replica_decides<H: Harness>(h: &mut H) {
    use crate::fairness::adaptive::{OriginReport, OriginSummary};
    let a = open(h, settings(10.0, 100)).await;
    // A replica's clock is the harness's as of its creation: made again after advancing.
    let b = h.replica().await.unwrap_or_else(|| a.clone());
    let report = |ms: u64, n: u64| {
        let mut s = OriginSummary::default();
        for _ in 0..n {
            s.record(Duration::from_millis(ms), 200);
        }
        OriginReport {
            slots: vec![(0, s.clone()), (3, s)],
        }
    };
    let (r1, r2) = (report(40, 5), report(2_000, 7));
    let first = a.exchange_origin(ROOM, "replica-1", &r1).await.unwrap();
    assert!(first.decide, "the first exchange claims the decision");
    assert_eq!(first.state, None);
    assert_eq!(first.configured_rate, 10.0);
    assert_eq!(first.reports.len(), 1);
    assert_eq!(first.reports[0].1, r1);
    let second = b.exchange_origin(ROOM, "replica-2", &r2).await.unwrap();
    assert!(!second.decide, "one decision per second for the whole room");
    let mut seen: Vec<&OriginReport> = second.reports.iter().map(|(_, r)| r).collect();
    seen.sort_by_key(|r| r.slots[0].1.count);
    assert_eq!(seen, vec![&r1, &r2], "every replica's report");
    let fleet = second.fleet_window().summary_since(0, second.now_ms);
    assert_eq!(fleet.count, 24, "merged by count");

    let state = adaptive_state(5.0);
    a.set_adaptive(ROOM, Some(&state)).await.unwrap();
    h.advance(Duration::from_secs(1)).await;
    let b = h.replica().await.unwrap_or_else(|| a.clone());
    let third = b.exchange_origin(ROOM, "replica-2", &r2).await.unwrap();
    assert!(third.decide, "a second later, anyone may claim it");
    assert_eq!(third.state, Some(state));
    assert!(third.now_ms >= second.now_ms + 1_000, "store time");

    // replica-1 stops reporting: after REPORT_STALE_MS its report no longer counts.
    h.advance(Duration::from_secs(4)).await;
    let b = h.replica().await.unwrap_or_else(|| a.clone());
    let later = b.exchange_origin(ROOM, "replica-2", &r2).await.unwrap();
    assert_eq!(later.reports.len(), 1);
    assert_eq!(later.reports[0].1, r2);

    a.set_adaptive(ROOM, None).await.unwrap();
    let cleared = a.exchange_origin(ROOM, "replica-1", &r1).await.unwrap();
    assert_eq!(cleared.state, None);
    assert!(cleared.decide, "clearing ends the claim too");
    assert!(matches!(
        a.exchange_origin("nowhere", "replica-1", &r1).await,
        Err(StoreError::UnknownRoom(_))
    ));
}
