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
