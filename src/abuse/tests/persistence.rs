//! The embedded registry's persistence: bans and the log survive a restart through
//! `data_dir` (ended bans dropped), the temporary file never follows a symlink, a corrupt
//! file is refused with a clear error, and without `data_dir` persisting does nothing.

use super::*;
use std::os::unix::fs::PermissionsExt;

fn open(dir: &std::path::Path) -> (AbuseRegistry, mpsc::Receiver<AbuseEvent>) {
    thread_local! {
        // One wall clock per test (each test has its own thread), so a reopened
        // registry sees the time the test advanced.
        static CLOCK: Clock = Clock::starting_at(T0);
    }
    let r = AbuseRegistry::open(
        config().validate().unwrap(),
        vec![],
        CLOCK.with(Clock::clone),
        dir,
    )
    .unwrap();
    let events = r.take_events().unwrap();
    (r, events)
}

#[tokio::test(start_paused = true)]
async fn bans_and_history_survive_a_restart_and_expired_ones_are_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let (r, _) = open(dir.path());
    r.ban("192.0.2.1", None, "forever").await.unwrap();
    r.ban("198.51.100.0/24", Some(Duration::from_secs(3600)), "hour")
        .await
        .unwrap();
    let short = r
        .ban("2001:db8::1", Some(Duration::from_secs(10)), "short")
        .await
        .unwrap();
    r.persist().await.unwrap();
    let file = dir.path().join(ABUSE_FILE);
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let log_before = r.log(None, None).await.unwrap();
    drop(r);

    // Restarted 20 s later: the 10 s ban is gone, with an expiry in the log.
    advance(20).await;
    let (r, mut events) = open(dir.path());
    assert!(r.check(ip("192.0.2.1")).unwrap().is_permanent());
    assert_eq!(
        r.check(ip("198.51.100.9")).unwrap().retry_after,
        Some(Duration::from_secs(3580))
    );
    assert!(r.check(ip("2001:db8::1")).is_none());
    assert_eq!(r.bans_active(), 2);
    assert_eq!(
        drain(&mut events),
        [AbuseEvent::Expired(Arc::new((*short).clone()))]
    );
    let log = r.log(None, None).await.unwrap();
    assert_eq!(log.items[0].action, LogAction::Expired);
    assert_eq!(log.items[0].seq, 4);
    assert_eq!(&log.items[1..], &log_before.items[..]);
    // New entries continue the numbering.
    let next = r.ban("192.0.2.2", None, "").await.unwrap();
    assert_eq!(next.seq, 5);
    r.persist().await.unwrap();
    let (r, _) = open(dir.path());
    assert_eq!(r.list(None, None).items[0].seq, 5);
}

#[tokio::test(start_paused = true)]
async fn a_symlink_at_the_temporary_path_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "keep me").unwrap();
    let tmp = dir.path().join("abuse.json.tmp");
    std::os::unix::fs::symlink(&victim, &tmp).unwrap();
    let (r, _) = open(dir.path());
    r.ban("192.0.2.1", None, "x").await.unwrap();
    r.persist().await.unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
    assert!(
        std::fs::symlink_metadata(&tmp).is_err(),
        "no temp file left"
    );
    let meta = std::fs::symlink_metadata(dir.path().join(ABUSE_FILE)).unwrap();
    assert!(meta.file_type().is_file());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let (r, _) = open(dir.path());
    assert_eq!(r.bans_active(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_corrupt_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(ABUSE_FILE), "{not json").unwrap();
    let err = AbuseRegistry::open(
        config().validate().unwrap(),
        vec![],
        Clock::starting_at(T0),
        dir.path(),
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("abuse.json"), "{err}");
    assert!(err.to_string().contains("unreadable"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn in_memory_persist_is_a_no_op() {
    let (r, _) = registry(config());
    r.persist().await.unwrap();
}
