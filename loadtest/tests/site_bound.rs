//! SPEC §14 "Honest when the site is the limit", small: case 4 of `anteroom-loadtest
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

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// The whole run is bounded by this.
const LIMIT: Duration = Duration::from_secs(150);

/// The newest modification time of the files under `dir`.
fn newest(dir: &Path) -> SystemTime {
    let mut latest = SystemTime::UNIX_EPOCH;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let time = if path.is_dir() {
            newest(&path)
        } else {
            entry
                .metadata()
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH)
        };
        latest = latest.max(time);
    }
    latest
}

/// `ANTEROOM_BIN`, or the `anteroom` of the same profile beside `anteroom-loadtest`, which must be
/// newer than every file of the product's `src/` (else it would measure old code).
fn anteroom_binary() -> PathBuf {
    if let Ok(bin) = std::env::var("ANTEROOM_BIN") {
        return bin.into();
    }
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_anteroom-loadtest")).with_file_name("anteroom");
    let built = std::fs::metadata(&bin)
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| {
            panic!(
                "{} is missing: cargo build --bin anteroom (with this profile; or set ANTEROOM_BIN)",
                bin.display()
            )
        });
    let sources = newest(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../src")));
    assert!(
        built >= sources,
        "{} is older than src/: cargo build --bin anteroom (with this profile)",
        bin.display()
    );
    bin
}

#[test]
fn bound_by_max_inflight_most_visitors_get_in_within_the_range_shown() {
    let bin = anteroom_binary();
    assert!(bin.exists(), "{} is missing", bin.display());
    let dir = std::env::temp_dir().join(format!("anteroom-site-bound-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("result.json");
    let mut child = Command::new(env!("CARGO_BIN_EXE_anteroom-loadtest"))
        .args(["site-bound", "--case", "4", "--visitors", "200", "--json"])
        .arg(&json)
        .env("ANTEROOM_BIN", &bin)
        .stdin(Stdio::null())
        .spawn()
        .expect("anteroom-loadtest site-bound");
    let deadline = Instant::now() + LIMIT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "site-bound case 4 did not finish within {} s",
                LIMIT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(status.success(), "site-bound case 4 failed: {status}");
    let text = std::fs::read_to_string(&json).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let results: serde_json::Value = serde_json::from_str(&text).unwrap();
    let r = &results[0];
    eprintln!("site-bound case 4, small: {r:#}");
    let waited = r["waited"].as_u64().unwrap();
    assert!(waited >= 60, "too few visitors waited to judge: {waited}");
    assert_eq!(r["status_5xx"], 0, "5xx answers: {r}");
    let within = r["within_range"].as_f64().unwrap();
    assert!(
        within >= 0.90,
        "{:.0} % of {waited} visitors were admitted within the first range shown \
         (median error {:.1} s; the product's ledger says {}), SPEC §14 asks ≥ 90 %",
        within * 100.0,
        r["median_error_secs"].as_f64().unwrap_or(f64::NAN),
        r["product_eta"],
    );
}
