//! Per-client shares, the queue breaker, live policy changes, references, moving to the
//! front and priority joins.

use super::*;

/// A distinct client address per `n`.
fn client(n: u8) -> ClientKey {
    ClientKey::from(std::net::Ipv4Addr::new(198, 51, 100, n))
}

async fn open_with<H: Harness>(h: &H, seed: RoomSettings, policy: RoomPolicy) -> Arc<H::Store> {
    let store = h.store();
    store.open_room(ROOM, &seed, &policy, false).await.unwrap();
    store
}

fn refused(resolution: Resolution) -> RefusedReason {
    match resolution {
        Resolution::Refused { reason, .. } => reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// `max_places_per_client` refuses a client's extra places and frees them as its visitors leave the line.
pub async fn places_per_client_are_capped_and_freed<H: Harness>(h: &mut H) {
    let mut seed = settings(1.0, 100);
    seed.abandon_after = Duration::from_secs(60);
    let policy = RoomPolicy {
        max_places_per_client: 3,
        ..Default::default()
    };
    let store = open_with(h, seed, policy).await;
    pause(&*store).await;
    let (a, b) = (client(1), client(2));
    let mine = visitors(3);
    for &v in &mine {
        waiting_place(store.resolve(ROOM, v, a).await.unwrap());
    }
    // The fourth place from one client is refused, as a share (not the join limit).
    assert_eq!(
        refused(store.resolve(ROOM, VisitorId::random(), a).await.unwrap()),
        RefusedReason::PlacesPerClient
    );
    // Those already in line keep their places; another client joins.
    let (p, joined) = waiting_place(store.resolve(ROOM, mine[0], a).await.unwrap());
    assert_eq!((p.position, joined), (Some(1), false));
    let other = VisitorId::random();
    waiting_place(store.resolve(ROOM, other, b).await.unwrap());
    let stats = store.stats(ROOM).await.unwrap();
    assert_eq!((stats.total_refused, stats.total_joined), (1, 4));

    // Admission frees a place.
    resume(&*store).await;
    h.advance(Duration::from_secs(1)).await;
    assert_eq!(
        store.admit_pass(ROOM).await.unwrap().admitted,
        vec![mine[0]]
    );
    pause(&*store).await;
    waiting_place(store.resolve(ROOM, VisitorId::random(), a).await.unwrap());
    assert_eq!(
        refused(store.resolve(ROOM, VisitorId::random(), a).await.unwrap()),
        RefusedReason::PlacesPerClient
    );

    // Abandonment frees them all (b keeps heartbeating and stays).
    for _ in 0..4 {
        h.advance(Duration::from_secs(20)).await;
        store.heartbeat(ROOM, &[other]).await.unwrap();
        store.admit_pass(ROOM).await.unwrap();
    }
    assert_eq!(store.stats(ROOM).await.unwrap().waiting, 1);
    let again = visitors(3);
    for &v in &again {
        waiting_place(store.resolve(ROOM, v, a).await.unwrap());
    }
    assert_eq!(
        refused(store.resolve(ROOM, VisitorId::random(), a).await.unwrap()),
        RefusedReason::PlacesPerClient
    );

    // A flush frees them too.
    store.flush(ROOM).await.unwrap();
    for &v in &again {
        waiting_place(store.resolve(ROOM, v, a).await.unwrap());
    }
    assert_eq!(store.stats(ROOM).await.unwrap().total_refused, 3);
}

/// `max_sessions_per_client` refuses a client's extra sessions and frees them as sessions end.
pub async fn sessions_per_client_are_capped_and_freed<H: Harness>(h: &mut H) {
    let mut seed = settings(100.0, 100);
    seed.session_ttl = Duration::from_secs(10);
    let policy = RoomPolicy {
        max_sessions_per_client: 2,
        ..Default::default()
    };
    let store = open_with(h, seed, policy).await;
    let (a, b) = (client(1), client(2));
    let [s1, s2] = [(); 2].map(|_| VisitorId::random());
    assert!(admitted(store.resolve(ROOM, s1, a).await.unwrap()));
    assert!(admitted(store.resolve(ROOM, s2, a).await.unwrap()));
    // A third newcomer from the same client is refused, though the fast path is open...
    assert_eq!(
        refused(store.resolve(ROOM, VisitorId::random(), a).await.unwrap()),
        RefusedReason::SessionsPerClient
    );
    // ...while the sessions themselves carry on, and another client gets in.
    assert!(admitted(store.resolve(ROOM, s1, a).await.unwrap()));
    assert!(admitted(
        store.resolve(ROOM, VisitorId::random(), b).await.unwrap()
    ));
    assert_eq!(store.stats(ROOM).await.unwrap().total_refused, 1);

    // Ending a session frees the share at once.
    assert!(store.end_session(ROOM, s1).await.unwrap());
    let s3 = VisitorId::random();
    assert!(admitted(store.resolve(ROOM, s3, a).await.unwrap()));
    assert_eq!(
        refused(store.resolve(ROOM, VisitorId::random(), a).await.unwrap()),
        RefusedReason::SessionsPerClient
    );

    // Expiry frees it too: s2 idles out while s3 stays busy.
    h.advance(Duration::from_secs(6)).await;
    assert!(admitted(store.resolve(ROOM, s3, a).await.unwrap()));
    h.advance(Duration::from_secs(5)).await;
    assert!(store.admit_pass(ROOM).await.unwrap().expired.contains(&s2));
    assert!(admitted(
        store.resolve(ROOM, VisitorId::random(), a).await.unwrap()
    ));
    assert_eq!(
        refused(store.resolve(ROOM, VisitorId::random(), a).await.unwrap()),
        RefusedReason::SessionsPerClient
    );

    // A session admitted from the line counts against the client it is first used from.
    let mut policy = RoomPolicy {
        max_sessions_per_client: 1,
        ..Default::default()
    };
    store
        .open_room("other", &settings(100.0, 100), &policy, false)
        .await
        .unwrap();
    store
        .update_settings("other", &SettingsPatch::pause())
        .await
        .unwrap();
    let queued = VisitorId::random();
    let c = client(3);
    assert!(matches!(
        store.resolve("other", queued, c).await.unwrap(),
        Resolution::Waiting { .. }
    ));
    store
        .update_settings("other", &SettingsPatch::resume())
        .await
        .unwrap();
    h.advance(Duration::from_secs(1)).await;
    assert_eq!(
        store.admit_pass("other").await.unwrap().admitted,
        vec![queued]
    );
    assert!(admitted(store.resolve("other", queued, c).await.unwrap()));
    assert_eq!(
        refused(
            store
                .resolve("other", VisitorId::random(), c)
                .await
                .unwrap()
        ),
        RefusedReason::SessionsPerClient
    );
    // 0 lifts the cap.
    policy.max_sessions_per_client = 0;
    store
        .open_room("other", &settings(100.0, 100), &policy, false)
        .await
        .unwrap();
    assert!(admitted(
        store
            .resolve("other", VisitorId::random(), c)
            .await
            .unwrap()
    ));
}

/// A session is used from at most `session_clients` clients; the one more is refused that request only.
pub async fn a_session_is_used_from_at_most_session_clients<H: Harness>(h: &mut H) {
    let mut seed = settings(10.0, 100);
    seed.session_ttl = Duration::from_secs(10);
    let policy = RoomPolicy {
        session_clients: 2,
        ..Default::default()
    };
    let store = open_with(h, seed, policy).await;
    let v = VisitorId::random();
    assert!(admitted(store.resolve(ROOM, v, client(1)).await.unwrap()));
    assert!(admitted(store.resolve(ROOM, v, client(2)).await.unwrap()));
    // A third client is refused, that request only...
    assert_eq!(
        refused(store.resolve(ROOM, v, client(3)).await.unwrap()),
        RefusedReason::SessionClients
    );
    // ...and does not keep the session alive: the earlier clients do.
    assert!(admitted(store.resolve(ROOM, v, client(1)).await.unwrap()));
    for _ in 0..3 {
        h.advance(Duration::from_secs(4)).await;
        assert_eq!(
            refused(store.resolve(ROOM, v, client(3)).await.unwrap()),
            RefusedReason::SessionClients
        );
        assert!(admitted(store.resolve(ROOM, v, client(2)).await.unwrap()));
        assert!(store.admit_pass(ROOM).await.unwrap().expired.is_empty());
    }
    // A refused request is not a refused visitor: total_refused counts newcomers.
    assert_eq!(store.stats(ROOM).await.unwrap().total_refused, 0);
    // Requests from the refused client alone do not keep the session alive.
    for _ in 0..3 {
        h.advance(Duration::from_secs(4)).await;
        assert_eq!(
            refused(store.resolve(ROOM, v, client(3)).await.unwrap()),
            RefusedReason::SessionClients
        );
    }
    assert_eq!(store.admit_pass(ROOM).await.unwrap().expired, vec![v]);
}

/// `max_waiting` turns newcomers away once the line is full, never those in it or the fast path.
pub async fn queue_breaker_refuses_newcomers_only<H: Harness>(h: &mut H) {
    let policy = RoomPolicy {
        max_waiting: 3,
        ..Default::default()
    };
    let store = open_with(h, settings(1.0, 100), policy).await;
    // Nobody waits: the fast path is unaffected.
    assert!(admitted(
        store
            .resolve(ROOM, VisitorId::random(), anyone())
            .await
            .unwrap()
    ));
    pause(&*store).await;
    let line = visitors(3);
    join_all(&*store, &line).await;
    assert_eq!(
        store
            .resolve(ROOM, VisitorId::random(), anyone())
            .await
            .unwrap(),
        Resolution::Full
    );
    // Those in line are unaffected.
    assert_eq!(
        place(store.resolve(ROOM, line[2], anyone()).await.unwrap()).position,
        Some(3)
    );
    // A priority join is let in ahead of the line anyway.
    let vip = VisitorId::random();
    assert_eq!(
        place(
            store
                .resolve_with(ROOM, vip, anyone(), Join::Front)
                .await
                .unwrap()
        )
        .position,
        Some(1)
    );
    let stats = store.stats(ROOM).await.unwrap();
    assert_eq!((stats.total_refused, stats.waiting), (1, 4));
    // Admission makes room again.
    resume(&*store).await;
    h.advance(Duration::from_secs(2)).await;
    assert_eq!(store.admit_pass(ROOM).await.unwrap().admitted, vec![vip]);
    h.advance(Duration::from_secs(1)).await;
    assert_eq!(
        store.admit_pass(ROOM).await.unwrap().admitted,
        vec![line[0]]
    );
    let late = place(
        store
            .resolve(ROOM, VisitorId::random(), anyone())
            .await
            .unwrap(),
    );
    assert_eq!(late.position, Some(3));
    assert_eq!(
        store
            .resolve(ROOM, VisitorId::random(), anyone())
            .await
            .unwrap(),
        Resolution::Full
    );
    assert_eq!(store.stats(ROOM).await.unwrap().total_refused, 2);
}

/// The operator's changes of the policy settings (here the queue breaker and a share) apply
/// from the next call, are kept with the settings (the file's policy at a reopen does not
/// undo them), a `null` gives the file's value back, and `reseed` drops them all.
pub async fn live_policy_changes_apply_at_once_and_outlast_a_reopen<H: Harness>(h: &mut H) {
    let seed = settings(1.0, 100);
    let file = RoomPolicy::default();
    let store = open_with(h, seed.clone(), file.clone()).await;
    pause(&*store).await;
    let change = |v: serde_json::Value| SettingsPatch {
        changes: serde_json::from_value(v).unwrap(),
        ..SettingsPatch::default()
    };
    let live = store
        .update_settings(
            ROOM,
            &change(serde_json::json!({"max_waiting": 2, "title": "Drop"})),
        )
        .await
        .unwrap();
    assert_eq!(
        live.changes,
        serde_json::from_value(serde_json::json!({"max_waiting": 2, "title": "Drop"})).unwrap()
    );
    join_all(&*store, &visitors(2)).await;
    assert_eq!(
        store
            .resolve(ROOM, VisitorId::random(), anyone())
            .await
            .unwrap(),
        Resolution::Full
    );
    drop(store);
    h.reopen(Duration::from_secs(1)).await;
    let store = h.store();
    assert!(matches!(
        store.open_room(ROOM, &seed, &file, false).await.unwrap(),
        Seeded::KeptLive(live) if live.changes.get("title").is_some()
    ));
    assert_eq!(
        store
            .resolve(ROOM, VisitorId::random(), anyone())
            .await
            .unwrap(),
        Resolution::Full
    );
    // Back to the file's (no breaker): newcomers join again; the title stays changed.
    let live = store
        .update_settings(ROOM, &change(serde_json::json!({"max_waiting": null})))
        .await
        .unwrap();
    assert_eq!(live.changes.get("max_waiting"), None);
    assert_eq!(live.changes.get("title"), Some(&serde_json::json!("Drop")));
    assert!(matches!(
        store
            .resolve(ROOM, VisitorId::random(), anyone())
            .await
            .unwrap(),
        Resolution::Waiting { .. }
    ));
    store
        .update_settings(
            ROOM,
            &change(serde_json::json!({"max_places_per_client": 1})),
        )
        .await
        .unwrap();
    let client = ClientKey::from(std::net::Ipv4Addr::new(203, 0, 113, 9));
    assert!(matches!(
        store
            .resolve(ROOM, VisitorId::random(), client)
            .await
            .unwrap(),
        Resolution::Waiting { .. }
    ));
    assert!(matches!(
        store
            .resolve(ROOM, VisitorId::random(), client)
            .await
            .unwrap(),
        Resolution::Refused {
            reason: RefusedReason::PlacesPerClient,
            ..
        }
    ));
    // --reseed: the file's settings hold again, every change gone.
    assert_eq!(
        store.open_room(ROOM, &seed, &file, true).await.unwrap(),
        Seeded::Reseeded
    );
    assert!(store.stats(ROOM).await.unwrap().settings.changes.is_empty());
    assert!(matches!(
        store
            .resolve(ROOM, VisitorId::random(), client)
            .await
            .unwrap(),
        Resolution::Waiting { .. }
    ));
}

/// The queue view lists the head in order and finds a waiter by reference.
pub async fn queue_head_and_find_by_reference<H: Harness>(h: &mut H) {
    let store = open(h, settings(1.0, 100)).await;
    pause(&*store).await;
    let line = visitors(5);
    for &v in &line {
        join_all(&*store, &[v]).await;
        h.advance(Duration::from_secs(1)).await;
    }
    store.heartbeat(ROOM, &line[..1]).await.unwrap();
    let head = store
        .queue(ROOM, QueueQuery::Head { limit: 3 })
        .await
        .unwrap();
    let got: Vec<(VisitorRef, Option<u64>, Option<u64>)> = head
        .iter()
        .map(|e| (e.reference, e.position, e.joined_at_ms))
        .collect();
    let want: Vec<(VisitorRef, Option<u64>, Option<u64>)> = (0..3)
        .map(|i| {
            (
                line[i].reference(),
                Some(i as u64 + 1),
                Some(START_MS + i as u64 * 1_000),
            )
        })
        .collect();
    assert_eq!(got, want);
    assert_eq!(head[0].last_seen_ms, START_MS + 5_000, "the last heartbeat");
    assert_eq!(
        head[1].last_seen_ms,
        START_MS + 1_000,
        "joining is a heartbeat"
    );
    // A huge limit is capped, not an error.
    assert_eq!(
        store
            .queue(ROOM, QueueQuery::Head { limit: usize::MAX })
            .await
            .unwrap()
            .len(),
        5
    );
    // One visitor by reference, as a person typed it.
    let typed = line[3].reference().to_string().to_lowercase();
    let found = store
        .queue(ROOM, QueueQuery::Ref(VisitorRef::parse(&typed).unwrap()))
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!((found[0].visitor, found[0].position), (line[3], Some(4)));
    // Someone not waiting is a typed not-found: a stranger, or a visitor on the site.
    let stranger = VisitorId::random().reference();
    assert!(matches!(
        store.queue(ROOM, QueueQuery::Ref(stranger)).await,
        Err(StoreError::NotWaiting(r)) if r == stranger
    ));
    resume(&*store).await;
    h.advance(Duration::from_secs(1)).await;
    assert_eq!(
        store.admit_pass(ROOM).await.unwrap().admitted,
        vec![line[0]]
    );
    assert!(matches!(
        store
            .queue(ROOM, QueueQuery::Ref(line[0].reference()))
            .await,
        Err(StoreError::NotWaiting(_))
    ));
    assert!(matches!(
        store.queue("nowhere", QueueQuery::Head { limit: 1 }).await,
        Err(StoreError::UnknownRoom(_))
    ));
}

/// Moving a waiter to the front by reference gives them position 1.
pub async fn move_to_front_by_reference<H: Harness>(h: &mut H) {
    let store = open(h, settings(1.0, 100)).await;
    pause(&*store).await;
    let line = visitors(6);
    join_all(&*store, &line).await;
    // The fifth moves to the front; nobody else's order changes.
    let p = store
        .move_to_front(ROOM, line[4].reference())
        .await
        .unwrap();
    assert_eq!((p.position, p.waiting), (Some(1), 6));
    assert_eq!(positions(&*store, &line).await, vec![2, 3, 4, 5, 1, 6]);
    // A later move goes ahead of it.
    store
        .move_to_front(ROOM, line[2].reference())
        .await
        .unwrap();
    assert_eq!(positions(&*store, &line).await, vec![3, 4, 1, 5, 2, 6]);
    let head: Vec<VisitorId> = store
        .queue(ROOM, QueueQuery::Head { limit: 10 })
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.visitor)
        .collect();
    assert_eq!(
        head,
        vec![line[2], line[4], line[0], line[1], line[3], line[5]]
    );
    // Moving the head again changes nothing.
    store
        .move_to_front(ROOM, line[2].reference())
        .await
        .unwrap();
    assert_eq!(positions(&*store, &line).await, vec![3, 4, 1, 5, 2, 6]);
    // Unknown references are a typed not-found.
    assert!(matches!(
        store
            .move_to_front(ROOM, VisitorId::random().reference())
            .await,
        Err(StoreError::NotWaiting(_))
    ));
    // The order survives a restart.
    drop(store);
    h.reopen(Duration::from_secs(5)).await;
    let store = h.store();
    store
        .open_room(ROOM, &settings(1.0, 100), &RoomPolicy::default(), false)
        .await
        .unwrap();
    assert_eq!(positions(&*store, &line).await, vec![3, 4, 1, 5, 2, 6]);
    // The moved visitors are admitted next, then the line in its order.
    resume(&*store).await;
    let mut admitted = Vec::new();
    for _ in 0..6 {
        h.advance(Duration::from_secs(1)).await;
        admitted.extend(store.admit_pass(ROOM).await.unwrap().admitted);
    }
    assert_eq!(
        admitted,
        vec![line[2], line[4], line[0], line[1], line[3], line[5]]
    );
    // Someone on the site is not waiting.
    assert!(matches!(
        store.move_to_front(ROOM, line[0].reference()).await,
        Err(StoreError::NotWaiting(_))
    ));
}

/// During a draw a waiter moved to the front holds position 1 at once and stays ahead of the whole draw at the doors.
pub async fn move_to_front_during_a_lottery_draw<H: Harness>(h: &mut H) {
    let store = h.store();
    store
        .open_room(ROOM, &settings(1.0, 100), &lottery_policy(0, 60), false)
        .await
        .unwrap();
    pause(&*store).await;
    let entrants = visitors(20);
    join_all(&*store, &entrants).await;
    // Found by reference with no place yet.
    let found = store
        .queue(ROOM, QueueQuery::Ref(entrants[7].reference()))
        .await
        .unwrap();
    assert_eq!((found[0].visitor, found[0].position), (entrants[7], None));
    // Moved to the front, they leave the lot and hold position 1 at once...
    let p = store
        .move_to_front(ROOM, entrants[7].reference())
        .await
        .unwrap();
    assert_eq!((p.position, p.waiting, p.phase), (Some(1), 20, Phase::Draw));
    match store.heartbeat(ROOM, &entrants[6..8]).await.unwrap()[..] {
        [VisitorState::Waiting(other), VisitorState::Waiting(moved)] => {
            assert_eq!((other.position, moved.position), (None, Some(1)))
        }
        ref states => panic!("{states:?}"),
    }
    // ...and ahead of the whole draw once the doors open.
    h.advance(Duration::from_secs(60)).await;
    let order = positions(&*store, &entrants).await;
    assert_eq!(order[7], 1);
    let mut sorted = order.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (1..=20).collect::<Vec<_>>());
    resume(&*store).await;
    h.advance(Duration::from_secs(1)).await;
    assert_eq!(
        store.admit_pass(ROOM).await.unwrap().admitted,
        vec![entrants[7]]
    );
}

/// A priority join takes position 1, or is admitted at once when nobody waits and the limits allow.
pub async fn priority_join_takes_position_one<H: Harness>(h: &mut H) {
    let store = open(h, settings(1.0, 2)).await;
    // Nobody waits and the limits allow: admitted at once.
    let first = VisitorId::random();
    assert_eq!(
        store
            .resolve_with(ROOM, first, anyone(), Join::Front)
            .await
            .unwrap(),
        Resolution::Admitted { newly: true }
    );
    // The rate still applies: with the bucket empty, a line forms and a priority
    // newcomer goes to its front, not onto the site.
    let line = visitors(3);
    join_all(&*store, &line).await;
    let vip = VisitorId::random();
    let (p, joined) = waiting_place(
        store
            .resolve_with(ROOM, vip, anyone(), Join::Front)
            .await
            .unwrap(),
    );
    assert_eq!((p.position, p.waiting, joined), (Some(1), 4, true));
    assert_eq!(store.stats(ROOM).await.unwrap().total_joined, 4);
    // A waiting visitor with a grant moves to the front (not a new join).
    let (p, joined) = waiting_place(
        store
            .resolve_with(ROOM, line[2], anyone(), Join::Front)
            .await
            .unwrap(),
    );
    assert_eq!((p.position, joined), (Some(1), false));
    assert_eq!(positions(&*store, &line).await, vec![3, 4, 1]);
    // Admitted by the next pass, at the configured rate; max_active still holds.
    h.advance(Duration::from_secs(1)).await;
    assert_eq!(
        store.admit_pass(ROOM).await.unwrap().admitted,
        vec![line[2]]
    );
    h.advance(Duration::from_secs(1)).await;
    assert!(
        store.admit_pass(ROOM).await.unwrap().admitted.is_empty(),
        "max_active"
    );
    // Someone on the site stays so.
    assert_eq!(
        store
            .resolve_with(ROOM, first, anyone(), Join::Front)
            .await
            .unwrap(),
        Resolution::Admitted { newly: false }
    );
    // The per-client shares still apply to a priority newcomer.
    let policy = RoomPolicy {
        max_places_per_client: 1,
        ..Default::default()
    };
    store
        .open_room(ROOM, &settings(1.0, 2), &policy, false)
        .await
        .unwrap();
    waiting_place(
        store
            .resolve(ROOM, VisitorId::random(), client(9))
            .await
            .unwrap(),
    );
    assert_eq!(
        refused(
            store
                .resolve_with(ROOM, VisitorId::random(), client(9), Join::Front)
                .await
                .unwrap()
        ),
        RefusedReason::PlacesPerClient
    );
}
