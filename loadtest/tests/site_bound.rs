//! The honest ETA when the site is the limit, small: case 4 of `anteroom-loadtest
//! site-bound` (a real slow site: PHP-FPM with `pm = static`, 4 children, a 200 ms page,
//! behind nginx over FastCGI; anteroom in front with `max_inflight: 4`, `rate: 15`,
//! `max_active: 40`) with 200 visitors instead of 300. At least 90 % of those who waited
//! must be admitted within the first range they were shown, with no 5xx.
//!
//! Needs Debian's php-fpm and nginx (`scripts/test-tools.sh`) and the `anteroom`
//! binary of the same profile beside `anteroom-loadtest` (or `ANTEROOM_BIN`); the test refuses a binary older
//! than the sources. Run it alone with
//! `cargo build --bin anteroom && cargo test -p anteroom-loadtest --test site_bound -- --nocapture`
//! (`make test-site-bound` does both).

mod common;

use std::time::Duration;

use common::run_loadtest;

/// The whole run is bounded by this.
const LIMIT: Duration = Duration::from_secs(150);

#[test]
fn bound_by_max_inflight_most_visitors_get_in_within_the_range_shown() {
    let results = run_loadtest(&["site-bound", "--case", "4", "--visitors", "200"], LIMIT);
    let r = &results[0];
    eprintln!("site-bound case 4, small: {r:#}");
    let waited = r["waited"].as_u64().unwrap();
    assert!(waited >= 60, "too few visitors waited to judge: {waited}");
    assert_eq!(r["status_5xx"], 0, "5xx answers: {r}");
    let within = r["within_range"].as_f64().unwrap();
    assert!(
        within >= 0.90,
        "{:.0} % of {waited} visitors were admitted within the first range shown \
         (median error {:.1} s; the product's ledger says {}), the target is ≥ 90 %",
        within * 100.0,
        r["median_error_secs"].as_f64().unwrap_or(f64::NAN),
        r["product_eta"],
    );
}
