//! The controller's behaviour over time, on tokio's paused clock.

use super::*;

fn config() -> AdaptiveConfig {
    AdaptiveConfig {
        target_latency: Duration::from_millis(800),
        max_error_ratio: 0.05,
        min_rate: 1.0,
    }
}

#[test]
fn config_parses_and_validates() {
    let c: AdaptiveConfig =
        serde_json::from_str(r#"{"target_latency":"800ms","max_error_ratio":0.05,"min_rate":1}"#)
            .unwrap();
    assert_eq!(c, config());
    let defaults: AdaptiveConfig = serde_json::from_str(r#"{"target_latency":"1s"}"#).unwrap();
    assert_eq!((defaults.max_error_ratio, defaults.min_rate), (0.05, 1.0));
    assert!(serde_json::from_str::<AdaptiveConfig>(r#"{"target_latency":"soon"}"#).is_err());
    assert!(serde_json::from_str::<AdaptiveConfig>(r#"{"target_latency":"1s","x":1}"#).is_err());
    assert!(c.validate(50.0).is_ok());
    assert_eq!(c.validate(0.5).unwrap_err().field, "min_rate");
    let bad = AdaptiveConfig {
        max_error_ratio: 1.5,
        ..config()
    };
    assert_eq!(bad.validate(50.0).unwrap_err().field, "max_error_ratio");
    let bad = AdaptiveConfig {
        target_latency: Duration::ZERO,
        ..config()
    };
    assert_eq!(bad.validate(50.0).unwrap_err().field, "target_latency");
    let bad = AdaptiveConfig {
        min_rate: f64::NAN,
        ..config()
    };
    assert!(bad.validate(50.0).is_err());
}

#[test]
fn p95_and_error_ratio() {
    let mut s = OriginSummary::default();
    assert_eq!(s.p95(), None);
    for i in 0..100u64 {
        let ms = if i < 95 { 50 } else { 5_000 };
        s.record(Duration::from_millis(ms), if i < 3 { 502 } else { 200 });
    }
    assert_eq!(s.p95(), Some(Duration::from_millis(60)));
    assert!((s.error_ratio() - 0.03).abs() < 1e-9);
    s.record(Duration::from_secs(3_600), 200);
    s.record(Duration::from_secs(3_600), 200);
    assert!(s.p95().unwrap() >= Duration::from_secs(4));
}

/// Feeds `per_sec` responses of `latency` each second from `from_ms` for `secs`,
/// deciding every 250 ms (as the pass driver would); returns the decisions.
fn drive(
    c: &mut AdaptiveController,
    w: &mut OriginWindow,
    from_ms: u64,
    secs: u64,
    latency: Duration,
    per_sec: u64,
) -> Vec<(u64, RateDecision)> {
    let mut out = Vec::new();
    for tick in 0..secs * 4 {
        let now = from_ms + tick * 250;
        for _ in 0..per_sec / 4 {
            w.record(now, latency, 200);
        }
        w.expire(now);
        out.push((now, c.decide(w, now)));
    }
    out
}

#[tokio::test(start_paused = true)]
async fn a_slow_origin_lowers_the_rate_and_recovery_restores_it_exactly() {
    // Time from the product's clock, driven by tokio's paused time.
    let clock = crate::clock::Clock::starting_at(1_700_000_000_000);
    let mut c = AdaptiveController::new(config(), 50.0);
    let mut w = OriginWindow::default();
    let t0 = clock.now_ms();
    let fast = drive(&mut c, &mut w, t0, 10, Duration::from_millis(50), 40);
    assert!(fast.iter().all(|(_, d)| d.effective_rate == 50.0));
    assert_eq!(c.current().reason, Reason::AtConfiguredRate);

    tokio::time::advance(Duration::from_secs(10)).await;
    let slow = drive(
        &mut c,
        &mut w,
        clock.now_ms(),
        70,
        Duration::from_secs(2),
        40,
    );
    let first_cut = slow.iter().find(|(_, d)| d.effective_rate < 50.0).unwrap();
    assert!(first_cut.0 - clock.now_ms() < 1_000, "fell within a second");
    assert!(matches!(first_cut.1.reason, Reason::SlowOrigin { .. }));
    assert!(first_cut.1.explanation.contains("over the 800 ms target"));
    // Every cut halves the rate and waits a whole window for the next one.
    let mut cuts = vec![(t0, 50.0)];
    for (at, d) in &slow {
        if d.effective_rate < cuts.last().unwrap().1 {
            cuts.push((*at, d.effective_rate));
        }
    }
    let cuts = &cuts[1..];
    for pair in cuts.windows(2) {
        assert!(
            pair[1].0 - pair[0].0 + SLACK_MS >= WINDOW_SECS * 1_000,
            "a window between cuts: {cuts:?}"
        );
        assert_eq!(
            pair[1].1,
            (pair[0].1 * DECREASE_FACTOR).max(1.0),
            "{cuts:?}"
        );
    }
    assert_eq!(cuts.len(), 6, "50 → 25 → … → 1.5625 → 1: {cuts:?}");
    assert_eq!(c.effective_rate(), 1.0, "and never below min_rate");

    // The slow stretch, and 15 s of quiet after it.
    tokio::time::advance(Duration::from_secs(70 + 15)).await;
    let back = drive(
        &mut c,
        &mut w,
        clock.now_ms(),
        60,
        Duration::from_millis(50),
        40,
    );
    let rates: Vec<f64> = back.iter().map(|(_, d)| d.effective_rate).collect();
    // Monotone, one step (configured / 20) at a time, at most once a second.
    for pair in rates.windows(2) {
        assert!(pair[1] >= pair[0]);
        assert!(pair[1] - pair[0] <= 50.0 / INCREASE_STEPS + 1e-9);
    }
    assert!(rates.iter().any(|&r| r > 1.0 && r < 50.0), "step by step");
    assert_eq!(c.effective_rate(), 50.0, "exactly the configured rate");
    assert!(rates.iter().all(|&r| r <= 50.0), "never above it");
    assert_eq!(c.current().reason, Reason::AtConfiguredRate);
}

#[test]
fn errors_lower_the_rate_and_quiet_holds_it() {
    let mut c = AdaptiveController::new(config(), 10.0);
    let mut w = OriginWindow::default();
    let t0 = 1_000_000u64;
    for i in 0..40 {
        w.record(
            t0,
            Duration::from_millis(20),
            if i % 5 == 0 { 503 } else { 200 },
        );
    }
    let d = c.decide(&w, t0);
    assert_eq!(d.effective_rate, 5.0);
    assert!(matches!(d.reason, Reason::OriginErrors { .. }));
    // Nothing observed for a while: no evidence, hold.
    let later = t0 + 30_000;
    w.expire(later);
    let d = c.decide(&w, later);
    assert_eq!(d.effective_rate, 5.0);
    assert!(matches!(d.reason, Reason::NotEnoughData { samples: 0 }));
    // Lowering the configured rate caps the effective one; min_rate floors it.
    c.set_configured_rate(3.0);
    assert_eq!(c.effective_rate(), 3.0);
    c.set_configured_rate(f64::NAN);
    assert_eq!(c.current().configured_rate, 3.0);
}

#[test]
fn replicas_windows_merge_into_one_decision() {
    let now = 5_000_000u64;
    let (mut a, mut b) = (OriginWindow::default(), OriginWindow::default());
    // Replica A sees a fast origin, replica B the slow tail of it: together, over 5 %
    // of responses are slow.
    for _ in 0..90 {
        a.record(now, Duration::from_millis(30), 200);
    }
    for _ in 0..10 {
        b.record(now, Duration::from_secs(3), 200);
    }
    let mut alone = AdaptiveController::new(config(), 20.0);
    assert_eq!(alone.decide(&a, now).effective_rate, 20.0);
    let mut fleet = a.clone();
    fleet.merge(&b);
    assert_eq!(fleet.summary_since(0, now).count, 100);
    let mut c = AdaptiveController::new(config(), 20.0);
    let d = c.decide(&fleet, now);
    assert_eq!(d.effective_rate, 10.0);
    // The wire form is small JSON that any replica can sum.
    let json = serde_json::to_string(&b).unwrap();
    let back: OriginWindow = serde_json::from_str(&json).unwrap();
    assert_eq!(back, b);
    // Merging is associative with recording: same counts either way.
    let mut direct = OriginWindow::default();
    for _ in 0..90 {
        direct.record(now, Duration::from_millis(30), 200);
    }
    for _ in 0..10 {
        direct.record(now, Duration::from_secs(3), 200);
    }
    assert_eq!(direct.summary_since(0, now), fleet.summary_since(0, now));
}
