//! The honest ETA when the site is the limit, small: case 4 of `anteroom-loadtest
//! site-bound` (a real slow site: PHP-FPM with `pm = static`, 4 children, a 200 ms page,
//! behind nginx over FastCGI; anteroom in front with `max_inflight: 4`, `rate: 15`,
//! `max_active: 40`) with 200 visitors instead of 300, run twice, on the embedded store and
//! again on two replicas sharing one Redis. At least 85 % of those
//! who waited, over both runs, must be admitted within the first range they were shown,
//! with no 5xx in either. The product's promise (≥ 90 %) is judged on the full-size
//! embedded case in BENCHMARKS.md; this small case guards against a regression (before the ETA knew the
//! site was the limit, 4–26 % held), below the spread of small runs (see [`FLOOR`]).
//!
//! Needs Debian's php-fpm, nginx and redis-server (`scripts/test-tools.sh`) and the `anteroom`
//! binary of the same profile beside `anteroom-loadtest` (or `ANTEROOM_BIN`); the test refuses a binary older
//! than the sources. Run it alone with
//! `cargo build --bin anteroom && cargo test -p anteroom-loadtest --test site_bound --
//! --nocapture --test-threads 1` (one case at a time: the machine, not the product, would
//! otherwise be the limit)
//! (`make test-site-bound` does both).

mod common;

use std::time::Duration;

use common::run_loadtest;

/// The whole run is bounded by this.
const LIMIT: Duration = Duration::from_secs(150);

/// Independent runs pooled: a run's visitors share one early estimate of the pace, so one
/// small run's share swings by several points from run to run; pooling two judges the
/// ratio over about 270 waits against one floor ([`FLOOR`]).
const RUNS: usize = 2;

/// Runs pooled on two replicas: their small runs swing further (0.73 to 0.98 measured, a
/// few points between the visitors' share and the ledgers not yet explained), and three
/// hold a pair of such runs above the floor while one collapsed run (about 0.5, the fault
/// this guards against) still takes the pool below it.
const RUNS_ON_REPLICAS: usize = 3;

/// The pooled share the small case must reach. Single small runs measured 0.88, 0.91,
/// 0.91, 0.95, 0.98 and 1.00, each within 0.02 of the product's own ledger: at 90 % the
/// guard could fail on noise alone, at 85 % it still fails on any regression toward the old
/// 4–26 %, or toward a visitor told of their admission later than it happened (up to one
/// 2 s tick late, that alone took a pooled pair to 0.85 while the ledger said 0.89).
const FLOOR: f64 = 0.85;

#[test]
fn bound_by_max_inflight_most_visitors_get_in_within_the_range_shown() {
    pooled_share_holds(RUNS, &[]);
}

/// The same on two replicas sharing one real `redis-server`, each visitor's live stream
/// held by the other replica than the one serving its pages: every replica's estimate and
/// every stream's news of an admission must hold when another replica's pass admitted.
/// Before a replica's pass heard the others' admissions, and before the estimate ignored
/// the stand-still while the first sessions lasted, four of six full-size runs measured
/// 0.54–0.75; with only the first fix, four of nine measured 0.48–0.51 (BENCHMARKS.md).
#[test]
fn on_two_replicas_on_redis_most_visitors_get_in_within_the_range_shown() {
    pooled_share_holds(RUNS_ON_REPLICAS, &["--replicas", "2"]);
}

/// Runs the small case `runs` times with `extra` arguments and holds the pooled share to
/// [`FLOOR`], with no 5xx.
fn pooled_share_holds(runs_wanted: usize, extra: &[&str]) {
    let (mut waited, mut within) = (0u64, 0.0f64);
    let mut seen = Vec::new();
    let mut args = vec!["site-bound", "--case", "4", "--visitors", "200"];
    args.extend_from_slice(extra);
    for _ in 0..runs_wanted {
        let results = run_loadtest(&args, LIMIT);
        let r = results[0].clone();
        eprintln!("site-bound case 4, small: {r:#}");
        let w = r["waited"].as_u64().unwrap();
        assert!(w >= 60, "too few visitors waited to judge: {w}");
        assert_eq!(r["status_5xx"], 0, "5xx answers: {r}");
        waited += w;
        within += r["within_range"].as_f64().unwrap() * w as f64;
        seen.push(format!(
            "{:.2} of {w} (median error {:.1} s; the product's ledgers say {})",
            r["within_range"].as_f64().unwrap(),
            r["median_error_secs"].as_f64().unwrap_or(f64::NAN),
            r["product_eta_by_replica"],
        ));
    }
    let share = within / waited as f64;
    assert!(
        share >= FLOOR,
        "{:.0} % of {waited} visitors over {runs_wanted} runs were admitted within the first range \
         shown ({}), the floor is {:.0} %",
        share * 100.0,
        seen.join("; "),
        FLOOR * 100.0,
    );
}
