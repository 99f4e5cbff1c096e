//! Ending and keeping sessions: `end_session` and `touch_sessions`.

use super::*;

/// Ending a session frees its slot for the next pass at once.
pub async fn end_session_frees_the_slot_at_once<H: Harness>(h: &mut H) {
    let store = open(h, settings(10.0, 1)).await;
    let [on_site, next] = [(); 2].map(|_| VisitorId::random());
    assert!(admitted(
        store.resolve(ROOM, on_site, anyone()).await.unwrap()
    ));
    assert_eq!(
        place(store.resolve(ROOM, next, anyone()).await.unwrap()).position,
        Some(1)
    );
    assert!(store.end_session(ROOM, on_site).await.unwrap());
    assert!(
        !store.end_session(ROOM, on_site).await.unwrap(),
        "only once"
    );
    assert!(
        !store.end_session(ROOM, next).await.unwrap(),
        "a waiter has none"
    );
    assert_eq!(store.stats(ROOM).await.unwrap().active, 0);
    // The slot goes to the next in line on the next pass, long before session_ttl.
    h.advance(Duration::from_millis(250)).await;
    assert_eq!(store.admit_pass(ROOM).await.unwrap().admitted, vec![next]);
    // Coming back is a newcomer.
    assert_eq!(
        store.heartbeat(ROOM, &[on_site]).await.unwrap(),
        vec![VisitorState::Unknown]
    );
    assert!(matches!(
        store.resolve(ROOM, on_site, anyone()).await.unwrap(),
        Resolution::Waiting { joined: true, .. }
    ));
    assert!(matches!(
        store.end_session("nowhere", on_site).await,
        Err(StoreError::UnknownRoom(_))
    ));
}

/// Touched sessions outlive `session_ttl`, and a touch never admits a waiter.
pub async fn touch_sessions_keeps_sessions_alive<H: Harness>(h: &mut H) {
    let mut seed = settings(10.0, 10);
    seed.session_ttl = Duration::from_secs(10);
    let store = open(h, seed).await;
    let [streaming, idle, stranger] = [(); 3].map(|_| VisitorId::random());
    assert!(admitted(
        store.resolve(ROOM, streaming, anyone()).await.unwrap()
    ));
    assert!(admitted(store.resolve(ROOM, idle, anyone()).await.unwrap()));
    // Waiting visitors are not sessions: a touch never admits them.
    pause(&*store).await;
    let waiter = VisitorId::random();
    waiting_place(store.resolve(ROOM, waiter, anyone()).await.unwrap());
    let mut expired = Vec::new();
    for _ in 0..8 {
        h.advance(Duration::from_secs(4)).await;
        assert_eq!(
            store
                .touch_sessions(ROOM, &[streaming, stranger, waiter])
                .await
                .unwrap(),
            vec![true, false, false]
        );
        expired.extend(store.admit_pass(ROOM).await.unwrap().expired);
    }
    assert_eq!(
        expired,
        vec![idle],
        "32 s on a 10 s session_ttl, kept alive by touches"
    );
    assert_eq!(
        store.touch_sessions(ROOM, &[idle]).await.unwrap(),
        vec![false],
        "a reclaimed session is not revived"
    );
    let stats = store.stats(ROOM).await.unwrap();
    assert_eq!((stats.active, stats.waiting), (1, 1));
    h.advance(Duration::from_secs(11)).await;
    assert_eq!(
        store.admit_pass(ROOM).await.unwrap().expired,
        vec![streaming]
    );
}

/// The store keeps how long sessions last, from admission (on arrival or by a pass) to
/// their end (reaped after `session_ttl` idle, or ended by the origin), the latest
/// [`SESSIONS_KEPT`](crate::queue::SESSIONS_KEPT), whichever replica started or ended
/// them: every replica's ETA reads the same turnover.
pub async fn session_lengths_are_kept_by_the_store<H: Harness>(h: &mut H) {
    let mut seed = settings(1_000.0, 1_000);
    seed.session_ttl = Duration::from_secs(10);
    let store = open(h, seed).await;
    let ended = |s: crate::queue::RoomStats| (s.ended_sessions.count, s.ended_sessions.total_ms);
    assert_eq!(ended(store.stats(ROOM).await.unwrap()), (0, 0));

    // Two let in on arrival at 0 s, one from the line by a pass at 1 s.
    let [origin_ended, reaped, from_line] = [(); 3].map(|_| VisitorId::random());
    for v in [origin_ended, reaped] {
        assert!(admitted(store.resolve(ROOM, v, anyone()).await.unwrap()));
    }
    pause(&*store).await;
    waiting_place(store.resolve(ROOM, from_line, anyone()).await.unwrap());
    resume(&*store).await;
    h.advance(Duration::from_secs(1)).await;
    assert_eq!(
        store.admit_pass(ROOM).await.unwrap().admitted,
        vec![from_line]
    );
    assert_eq!(
        ended(store.stats(ROOM).await.unwrap()),
        (0, 0),
        "none ended"
    );

    // At 3 s the origin ends one, through another replica. (A replica's clock is the
    // harness's as of its creation: made again after advancing.)
    h.advance(Duration::from_secs(2)).await;
    let other = h.replica().await.unwrap_or_else(|| store.clone());
    assert!(other.end_session(ROOM, origin_ended).await.unwrap());
    assert_eq!(ended(store.stats(ROOM).await.unwrap()), (1, 3_000));

    // At 11 s another replica's pass reaps the two idle ones: 11 s and 10 s long.
    h.advance(Duration::from_secs(8)).await;
    let other = h.replica().await.unwrap_or_else(|| store.clone());
    let mut expired = other.admit_pass(ROOM).await.unwrap().expired;
    expired.sort();
    let mut both = vec![reaped, from_line];
    both.sort();
    assert_eq!(expired, both);
    for stats in [
        store.stats(ROOM).await.unwrap(),
        other.stats(ROOM).await.unwrap(),
    ] {
        assert_eq!(stats.ended_sessions.mean(), Some(Duration::from_secs(8)));
        assert_eq!(ended(stats), (3, 24_000), "the same on every replica");
    }

    // Only the latest SESSIONS_KEPT count: 130 more, the k-th ended after k ms.
    let more = visitors(130);
    for &v in &more {
        assert!(admitted(store.resolve(ROOM, v, anyone()).await.unwrap()));
    }
    for &v in &more {
        h.advance(Duration::from_millis(1)).await;
        let replica = h.replica().await.unwrap_or_else(|| store.clone());
        assert!(replica.end_session(ROOM, v).await.unwrap());
    }
    assert_eq!(crate::queue::SESSIONS_KEPT, 128);
    // 3 ms … 130 ms.
    let kept = (128, (3..=130).sum::<u64>());
    assert_eq!(ended(store.stats(ROOM).await.unwrap()), kept);

    // The passthrough mode has no line to estimate for: its sessions go untimed.
    let passthrough = |mode| SettingsPatch {
        mode: Some(mode),
        ..SettingsPatch::default()
    };
    store
        .update_settings(ROOM, &passthrough(Mode::Passthrough))
        .await
        .unwrap();
    let through = VisitorId::random();
    assert!(admitted(
        store.resolve(ROOM, through, anyone()).await.unwrap()
    ));
    store
        .update_settings(ROOM, &passthrough(Mode::Queue))
        .await
        .unwrap();
    h.advance(Duration::from_secs(1)).await;
    let replica = h.replica().await.unwrap_or_else(|| store.clone());
    assert!(replica.end_session(ROOM, through).await.unwrap());
    assert_eq!(ended(store.stats(ROOM).await.unwrap()), kept);
}
