//! One-time ids: priority grants' nonces and challenges' ids, spent once across replicas;
//! and the resolves that join nobody new (known-only, now-or-never).

use super::*;

/// Each grant nonce works once until its expiry, for one room, on every replica of the
/// store; the visitor who spent it may come back with it (a reload) without being refused,
/// and anyone else is.
pub async fn grant_nonces_are_spent_once<H: Harness>(h: &mut H) {
    let store = open(h, settings(1.0, 10)).await;
    store
        .open_room("other", &settings(1.0, 10), &RoomPolicy::default(), false)
        .await
        .unwrap();
    let (a, b) = (VisitorId::random(), VisitorId::random());
    let expiry = START_MS + 60_000;
    let nonce = "nonce-0123456789_AB";
    let spend = |room: &'static str, nonce: &'static str, who: VisitorId, at: u64| {
        let store = store.clone();
        async move { store.spend_grant(room, nonce, who, at).await.unwrap() }
    };
    assert_eq!(spend(ROOM, nonce, a, expiry).await, GrantUse::Fresh);
    assert_eq!(spend(ROOM, nonce, a, expiry).await, GrantUse::Again);
    assert_eq!(spend(ROOM, nonce, b, expiry).await, GrantUse::Taken);
    // Another nonce is its own; the same nonce in another room is that room's own.
    assert_eq!(
        spend(ROOM, "another-nonce-0123", b, expiry).await,
        GrantUse::Fresh
    );
    assert_eq!(spend("other", nonce, b, expiry).await, GrantUse::Fresh);
    // A second replica on the same store sees what the first spent, and the reverse.
    if let Some(replica) = h.replica().await {
        let on = |nonce: &'static str, who: VisitorId| {
            let replica = replica.clone();
            async move { replica.spend_grant(ROOM, nonce, who, expiry).await.unwrap() }
        };
        assert_eq!(on(nonce, b).await, GrantUse::Taken);
        assert_eq!(on(nonce, a).await, GrantUse::Again);
        assert_eq!(on("replica-nonce-0123", b).await, GrantUse::Fresh);
        assert_eq!(
            spend(ROOM, "replica-nonce-0123", a, expiry).await,
            GrantUse::Taken
        );
    }
    // Expired by the store's clock: never spent, never honoured.
    assert_eq!(
        spend(ROOM, "expired-nonce-0123", a, START_MS).await,
        GrantUse::Taken
    );
    h.advance(Duration::from_secs(61)).await;
    assert_eq!(spend(ROOM, nonce, b, expiry).await, GrantUse::Taken);
    assert_eq!(
        spend(ROOM, "fresh-after-expiry", b, expiry + 60_000).await,
        GrantUse::Fresh
    );
    assert!(matches!(
        store.spend_grant("nope", nonce, a, expiry + 60_000).await,
        Err(StoreError::UnknownRoom(_))
    ));
}

/// A solved challenge's id lets one newcomer join, once, on every replica of the store,
/// until its expiry, in the join's own call: anyone else with the same id is a replay and
/// is not joined, the same visitor again (a repeated call) gets their place, a visitor
/// already waiting spends nothing, a room that lets nobody in yet spends nothing; ids are
/// per room and apart from grant nonces.
pub async fn challenge_ids_are_spent_once<H: Harness>(h: &mut H) {
    let store = open(h, settings(1.0, 10)).await;
    pause(&*store).await;
    store
        .open_room("other", &settings(1.0, 10), &RoomPolicy::default(), false)
        .await
        .unwrap();
    let later = RoomPolicy {
        schedule: Schedule {
            queue_opens_at: Some(at(60)),
            ..Schedule::default()
        },
        ..RoomPolicy::default()
    };
    store
        .open_room("later", &settings(1.0, 10), &later, false)
        .await
        .unwrap();
    let (a, b, c) = (
        VisitorId::random(),
        VisitorId::random(),
        VisitorId::random(),
    );
    let expiry = START_MS + 300_000;
    let id = "AAECAwQFBgcICQoLDA0ODw";
    let join = |room: &'static str, id: &'static str, who: VisitorId, at: u64| {
        let store = store.clone();
        async move { spend_to_join(&*store, room, id, who, at).await.unwrap() }
    };
    let place_of = |spent: Spent| match spent {
        Spent::Resolved(Resolution::Waiting { place, joined }) => (place.position, joined),
        other => panic!("expected a place, got {other:?}"),
    };
    assert_eq!(place_of(join(ROOM, id, a, expiry).await), (Some(1), true));
    // The same visitor again (a repeated call): their place, nothing new.
    assert_eq!(place_of(join(ROOM, id, a, expiry).await), (Some(1), false));
    // Anyone else with the same id: a replay, and not joined.
    assert_eq!(join(ROOM, id, b, expiry).await, Spent::Replayed);
    assert_eq!(
        store.heartbeat(ROOM, &[b]).await.unwrap(),
        vec![VisitorState::Unknown]
    );
    // A visitor already waiting spends nothing: the id they brought is still unspent.
    let second = "c2Vjb25kLWNoYWxsZW5nZS";
    assert_eq!(
        place_of(join(ROOM, second, a, expiry).await),
        (Some(1), false)
    );
    assert_eq!(
        place_of(join(ROOM, second, b, expiry).await),
        (Some(2), true)
    );
    // Before the line opens: nobody joins and nothing is spent.
    let early = "ZWFybHktY2hhbGxlbmdlLW";
    assert_eq!(
        join("later", early, c, expiry).await,
        Spent::Resolved(Resolution::NotOpen)
    );
    // Another room's ids are its own (and its fast path lets the newcomer in), and a
    // grant nonce of the same text is no challenge id.
    assert_eq!(
        join("other", id, c, expiry).await,
        Spent::Resolved(Resolution::Admitted { newly: true })
    );
    assert_eq!(
        store.spend_grant(ROOM, id, c, expiry).await.unwrap(),
        GrantUse::Fresh
    );
    // A second replica on the same store refuses what the first spent, and the reverse.
    if let Some(replica) = h.replica().await {
        let on = |id: &'static str, who: VisitorId| {
            let replica = replica.clone();
            async move {
                spend_to_join(&*replica, ROOM, id, who, expiry)
                    .await
                    .unwrap()
            }
        };
        let d = VisitorId::random();
        assert_eq!(on(id, d).await, Spent::Replayed);
        let third = "cmVwbGljYS1jaGFsbGVuZ2";
        assert_eq!(place_of(on(third, d).await), (Some(3), true));
        assert_eq!(
            join(ROOM, third, VisitorId::random(), expiry).await,
            Spent::Replayed
        );
    }
    // Expired by the store's clock: never spent, nobody joined.
    let late = VisitorId::random();
    assert_eq!(
        join(ROOM, "ZXhwaXJlZC1jaGFsbGVuZ2", late, START_MS).await,
        Spent::Replayed
    );
    h.advance(Duration::from_secs(301)).await;
    assert_eq!(join(ROOM, id, late, expiry).await, Spent::Replayed);
    assert_eq!(
        store.heartbeat(ROOM, &[late]).await.unwrap(),
        vec![VisitorState::Unknown]
    );
    let (_, joined) = place_of(join(ROOM, "bGF0ZXItY2hhbGxlbmdlLW", late, expiry + 300_000).await);
    assert!(joined);
    // The line is open now, and the id the closed door did not spend joins someone.
    assert_eq!(
        join("later", early, c, expiry + 300_000).await,
        Spent::Resolved(Resolution::Admitted { newly: true })
    );
    assert!(matches!(
        spend_to_join(&*store, "nope", id, a, expiry + 300_000).await,
        Err(StoreError::UnknownRoom(_))
    ));
}

/// `who` (from anyone's address) joins `room` by spending challenge `id`, remembered as
/// spent until `expires_at_ms`.
async fn spend_to_join<S: QueueStore + ?Sized>(
    store: &S,
    room: &str,
    id: &str,
    who: VisitorId,
    expires_at_ms: u64,
) -> StoreResult<Spent> {
    let challenge = ChallengeSpend { id, expires_at_ms };
    store.resolve_spending(room, who, anyone(), challenge).await
}

/// [`Join::Known`] resolves a visitor the store has (waiting or on the site) as usual, and
/// answers [`Resolution::Newcomer`] for anyone else without joining them; the schedule
/// still answers first.
pub async fn a_known_only_resolve_joins_nobody_new<H: Harness>(h: &mut H) {
    let store = open(h, settings(1.0, 10)).await;
    let [on_site, waiting, stranger] = [(); 3].map(|_| VisitorId::random());
    assert!(admitted(
        store.resolve(ROOM, on_site, anyone()).await.unwrap()
    ));
    assert_eq!(
        place(store.resolve(ROOM, waiting, anyone()).await.unwrap()).position,
        Some(1)
    );
    let known = |who: VisitorId| {
        let store = store.clone();
        async move {
            store
                .resolve_with(ROOM, who, anyone(), Join::Known)
                .await
                .unwrap()
        }
    };
    assert_eq!(known(on_site).await, Resolution::Admitted { newly: false });
    assert_eq!(place(known(waiting).await).position, Some(1));
    assert_eq!(known(stranger).await, Resolution::Newcomer);
    assert_eq!(
        store.heartbeat(ROOM, &[stranger]).await.unwrap(),
        vec![VisitorState::Unknown]
    );
    let stats = store.stats(ROOM).await.unwrap();
    assert_eq!((stats.waiting, stats.total_joined), (1, 1));
    let closing = RoomPolicy {
        schedule: Schedule {
            closes_at: Some(at(10)),
            ..Schedule::default()
        },
        ..RoomPolicy::default()
    };
    store
        .open_room(ROOM, &settings(1.0, 10), &closing, false)
        .await
        .unwrap();
    h.advance(Duration::from_secs(11)).await;
    assert_eq!(known(stranger).await, Resolution::Closed);
}

/// [`Join::Now`] lets a newcomer in on the spot when the fast path allows it and otherwise
/// stores nothing (no place, no join counted); a visitor the store has is resolved as
/// usual.
pub async fn a_now_only_resolve_admits_on_the_spot_or_joins_nobody<H: Harness>(h: &mut H) {
    let store = open(h, settings(1.0, 10)).await;
    let [first, second, waiting] = [(); 3].map(|_| VisitorId::random());
    let now = |who: VisitorId| {
        let store = store.clone();
        async move {
            store
                .resolve_with(ROOM, who, anyone(), Join::Now)
                .await
                .unwrap()
        }
    };
    assert_eq!(now(first).await, Resolution::Admitted { newly: true });
    // The bucket is empty: not now, so not at all.
    assert_eq!(now(second).await, Resolution::Newcomer);
    assert_eq!(
        store.heartbeat(ROOM, &[second]).await.unwrap(),
        vec![VisitorState::Unknown]
    );
    let stats = store.stats(ROOM).await.unwrap();
    assert_eq!((stats.waiting, stats.total_joined), (0, 0));
    // With a line, never ahead of it, even once the bucket has refilled.
    assert_eq!(
        place(store.resolve(ROOM, waiting, anyone()).await.unwrap()).position,
        Some(1)
    );
    h.advance(Duration::from_secs(3)).await;
    assert_eq!(now(second).await, Resolution::Newcomer);
    // Those the store has are resolved as usual.
    assert_eq!(now(first).await, Resolution::Admitted { newly: false });
    assert_eq!(place(now(waiting).await).position, Some(1));
    let stats = store.stats(ROOM).await.unwrap();
    assert_eq!((stats.waiting, stats.total_joined), (1, 1));
}

/// A grant given back by the visitor who spent it is fresh again, for anyone, on every
/// replica; given back by anyone else, or never spent, nothing changes.
pub async fn a_grant_given_back_is_fresh_again<H: Harness>(h: &mut H) {
    let store = open(h, settings(1.0, 10)).await;
    let (a, b) = (VisitorId::random(), VisitorId::random());
    let expiry = START_MS + 60_000;
    let nonce = "nonce-given-back-01";
    let spend = |who: VisitorId| {
        let store = store.clone();
        async move { store.spend_grant(ROOM, nonce, who, expiry).await.unwrap() }
    };
    assert_eq!(spend(a).await, GrantUse::Fresh);
    store.release_grant(ROOM, nonce, b).await.unwrap();
    assert_eq!(spend(b).await, GrantUse::Taken, "not b's to give back");
    store.release_grant(ROOM, nonce, a).await.unwrap();
    assert_eq!(spend(b).await, GrantUse::Fresh);
    assert_eq!(spend(a).await, GrantUse::Taken);
    store
        .release_grant(ROOM, "never-spent-nonce-0", a)
        .await
        .unwrap();
    if let Some(replica) = h.replica().await {
        replica.release_grant(ROOM, nonce, b).await.unwrap();
        assert_eq!(
            spend(a).await,
            GrantUse::Fresh,
            "given back on the other replica"
        );
    }
}
