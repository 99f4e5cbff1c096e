//! What the harness's end-to-end tests share: the `anteroom` binary they drive (never one
//! older than the product's sources) and a bounded run of `anteroom-loadtest` that hands
//! back its JSON result.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

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
pub fn anteroom_binary() -> PathBuf {
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

/// Runs `anteroom-loadtest ARGS --json FILE` against [`anteroom_binary`], killed past
/// `limit`; the scenario's JSON result.
pub fn run_loadtest(args: &[&str], limit: Duration) -> serde_json::Value {
    let bin = anteroom_binary();
    assert!(bin.exists(), "{} is missing", bin.display());
    // One directory per call: two tests of one binary may run at once.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "anteroom-loadtest-{}-{}-{}",
        args[0],
        std::process::id(),
        CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("result.json");
    let mut child = Command::new(env!("CARGO_BIN_EXE_anteroom-loadtest"))
        .args(args)
        .arg("--json")
        .arg(&json)
        .env("ANTEROOM_BIN", &bin)
        .stdin(Stdio::null())
        .spawn()
        .expect("anteroom-loadtest");
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "anteroom-loadtest {args:?} did not finish within {} s",
                limit.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        status.success(),
        "anteroom-loadtest {args:?} failed: {status}"
    );
    let text = std::fs::read_to_string(&json).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    serde_json::from_str(&text).unwrap()
}
