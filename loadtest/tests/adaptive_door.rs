//! Closed-loop admission at a saturated door, against a real slow site:
//! `anteroom-loadtest adaptive-door` (PHP-FPM with `pm = static`, 4 children, a 200 ms
//! page, behind nginx over FastCGI; anteroom in front with `max_inflight: 4` and
//! `adaptive: {target_latency: 400ms}` on the product's own 10 s window). The origin
//! itself answers in 200 ms throughout; sixteen visitors browsing on a door of four make
//! each request wait for its slot. The effective rate must fall within 5 s of the slot
//! wait passing the target, for the latency, and rise again once the door clears, with
//! nobody refused at the door. docs/fairness.md, "Closed-loop admission".
//!
//! Needs Debian's php-fpm and nginx (`scripts/test-tools.sh`) and the `anteroom` binary
//! of the same profile beside `anteroom-loadtest` (or `ANTEROOM_BIN`), newer than the
//! sources. `make test-site-bound` runs it.

mod common;

use std::time::Duration;

use common::run_loadtest;

#[test]
fn a_saturated_door_lowers_the_rate_within_5s_and_clearing_it_raises_it() {
    let r = run_loadtest(&["adaptive-door"], Duration::from_secs(120));
    eprintln!("adaptive-door: {r:#}");
    let passed = r["passed_target_after_secs"].as_f64();
    assert!(
        passed.is_some(),
        "no response waited past the 400 ms target: the door was not saturated: {r}"
    );
    let fell = r["fell_after_secs"]
        .as_f64()
        .unwrap_or_else(|| panic!("the effective rate never fell: {r}"));
    assert!(
        fell <= 5.0,
        "the rate fell {fell:.1} s after the slot wait passed the target (at most 5 s): {r}"
    );
    assert_eq!(r["fell_reason"], "latency", "{r}");
    assert!(
        r["fell_p95_ms"].as_u64().is_some_and(|p| p > 400),
        "the p95 it judged includes the slot wait: {r}"
    );
    assert!(r["lowest_rate"].as_f64().unwrap() < 20.0, "{r}");
    let rose = r["rose_after_secs"]
        .as_f64()
        .unwrap_or_else(|| panic!("the rate did not rise again once the door cleared: {r}"));
    assert!(rose <= 25.0, "{r}");
    assert!(
        matches!(r["rose_reason"].as_str(), Some("recovering" | "configured")),
        "{r}"
    );
    assert!(
        r["rose_p95_ms"].as_u64().is_some_and(|p| p <= 400),
        "it rose on a healthy window: {r}"
    );
    assert_eq!(r["refused"], 0, "inflight_wait is long enough: {r}");
    assert!(r["responses"].as_u64().unwrap() > 100, "{r}");
}
