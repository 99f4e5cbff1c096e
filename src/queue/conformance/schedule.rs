//! The join limit, the schedule's phases and the lottery draw before the doors.

use super::*;

/// The join limit counts per client key, refused attempts included, within its window.
pub async fn join_limit_counts_per_address_and_refusals<H: Harness>(h: &mut H) {
    let store = h.store();
    let policy = RoomPolicy {
        join_limit_per_ip: 3,
        join_limit_window: Duration::from_secs(60),
        ..Default::default()
    };
    store
        .open_room(ROOM, &settings(10.0, 100), &policy, false)
        .await
        .unwrap();
    pause(&*store).await;
    let a = ClientKey::from(std::net::Ipv4Addr::new(203, 0, 113, 7));
    let b = ClientKey::from(std::net::Ipv4Addr::new(203, 0, 113, 8));
    let joined = visitors(3);
    for &v in &joined {
        waiting_place(store.resolve(ROOM, v, a).await.unwrap());
    }
    h.advance(Duration::from_secs(10)).await;
    match store.resolve(ROOM, VisitorId::random(), a).await.unwrap() {
        Resolution::Refused {
            reason: RefusedReason::JoinLimit,
            retry_after,
        } => {
            assert_eq!(
                retry_after,
                Duration::from_secs(50),
                "the rest of the window"
            )
        }
        other => panic!("the fourth join from one address is refused, got {other:?}"),
    }
    // Refusals count against the window too, and are counted.
    assert!(matches!(
        store.resolve(ROOM, VisitorId::random(), a).await.unwrap(),
        Resolution::Refused { .. }
    ));
    // Someone already waiting is never refused; another address joins.
    let (again, joined_now) = waiting_place(store.resolve(ROOM, joined[0], a).await.unwrap());
    assert_eq!((again.position, joined_now), (Some(1), false));
    waiting_place(store.resolve(ROOM, VisitorId::random(), b).await.unwrap());
    // An IPv6 /64 is one address.
    let net: std::net::Ipv6Addr = "2001:db8:1:2::".parse().unwrap();
    for i in 0..4u128 {
        let ip = std::net::Ipv6Addr::from(u128::from(net) + i * 0x1_0000_0001);
        let outcome = store
            .resolve(ROOM, VisitorId::random(), ClientKey::from(ip))
            .await
            .unwrap();
        assert_eq!(
            matches!(outcome, Resolution::Refused { .. }),
            i == 3,
            "join {i} from the /64: {outcome:?}"
        );
    }
    let stats = store.stats(ROOM).await.unwrap();
    assert_eq!((stats.total_refused, stats.total_joined), (3, 7));
    // A new window starts after the old one is over.
    h.advance(Duration::from_secs(51)).await;
    store.admit_pass(ROOM).await.unwrap();
    waiting_place(store.resolve(ROOM, VisitorId::random(), a).await.unwrap());
    // The policy is config: reopening replaces it (0 lifts the limit).
    store
        .open_room(ROOM, &settings(10.0, 100), &RoomPolicy::default(), false)
        .await
        .unwrap();
    for _ in 0..10 {
        waiting_place(store.resolve(ROOM, VisitorId::random(), a).await.unwrap());
    }
}

/// The schedule's phases follow the store's clock, not the caller's.
pub async fn schedule_phases_from_store_time<H: Harness>(h: &mut H) {
    let store = h.store();
    let policy = RoomPolicy {
        schedule: Schedule {
            queue_opens_at: Some(at(10)),
            admits_at: Some(at(20)),
            closes_at: Some(at(40)),
        },
        ..Default::default()
    };
    store
        .open_room(ROOM, &settings(10.0, 100), &policy, false)
        .await
        .unwrap();
    let [early, first, second, late, on_site, stuck] = [(); 6].map(|_| VisitorId::random());

    // Before the line opens nobody is queued.
    assert_eq!(
        store.resolve(ROOM, early, anyone()).await.unwrap(),
        Resolution::NotOpen
    );
    assert_eq!(
        store.heartbeat(ROOM, &[early]).await.unwrap(),
        vec![VisitorState::Unknown]
    );
    let stats = store.stats(ROOM).await.unwrap();
    assert_eq!((stats.waiting, stats.total_joined), (0, 0));

    // The draw (no lottery): collected in arrival order, nobody admitted, no fast path.
    h.advance(Duration::from_secs(10)).await;
    let (p1, joined) = waiting_place(store.resolve(ROOM, first, anyone()).await.unwrap());
    assert!(joined);
    assert_eq!((p1.position, p1.phase), (Some(1), Phase::Draw));
    let (p2, _) = waiting_place(store.resolve(ROOM, second, anyone()).await.unwrap());
    assert_eq!((p2.position, p2.waiting), (Some(2), 2));
    h.advance(Duration::from_secs(5)).await;
    assert!(store.admit_pass(ROOM).await.unwrap().admitted.is_empty());
    match store.heartbeat(ROOM, &[second]).await.unwrap()[0] {
        VisitorState::Waiting(p) => assert_eq!((p.position, p.phase), (Some(2), Phase::Draw)),
        other => panic!("{other:?}"),
    }

    // The doors: the line moves, and then the fast path works again.
    h.advance(Duration::from_secs(5)).await;
    assert_eq!(
        store.admit_pass(ROOM).await.unwrap().admitted,
        vec![first, second]
    );
    assert_eq!(
        store.resolve(ROOM, on_site, anyone()).await.unwrap(),
        Resolution::Admitted { newly: true }
    );
    pause(&*store).await;
    let (p, _) = waiting_place(store.resolve(ROOM, stuck, anyone()).await.unwrap());
    assert_eq!((p.position, p.phase), (Some(1), Phase::Queueing));

    // Closed: newcomers and the line are told so, nobody else is admitted, and sessions
    // on the site carry on.
    h.advance(Duration::from_secs(20)).await;
    resume(&*store).await;
    assert_eq!(
        store.resolve(ROOM, late, anyone()).await.unwrap(),
        Resolution::Closed
    );
    assert_eq!(
        store.resolve(ROOM, stuck, anyone()).await.unwrap(),
        Resolution::Closed
    );
    assert!(store.admit_pass(ROOM).await.unwrap().admitted.is_empty());
    assert_eq!(
        store.resolve(ROOM, on_site, anyone()).await.unwrap(),
        Resolution::Admitted { newly: false }
    );
    match store.heartbeat(ROOM, &[stuck]).await.unwrap()[0] {
        VisitorState::Waiting(p) => assert_eq!(p.phase, Phase::Closed),
        other => panic!("{other:?}"),
    }
    let stats = store.stats(ROOM).await.unwrap();
    assert_eq!((stats.total_admitted, stats.total_joined), (3, 3));
}

/// Entrants are placed by lot when the doors open, a dropped entrant may re-enter, and later arrivals queue behind the whole draw.
pub async fn lottery_draw_is_by_lot_and_a_rejoin_keeps_its_place<H: Harness>(h: &mut H) {
    let store = h.store();
    let mut seed = settings(1_000.0, 100_000);
    seed.abandon_after = Duration::from_secs(20);
    store
        .open_room(ROOM, &seed, &lottery_policy(0, 60), false)
        .await
        .unwrap();
    pause(&*store).await;
    let entrants = visitors(200);
    let leaver = entrants[0];
    for (i, &v) in entrants.iter().enumerate() {
        let (p, joined) = waiting_place(store.resolve(ROOM, v, anyone()).await.unwrap());
        assert!(joined);
        assert_eq!(
            (p.position, p.waiting, p.phase),
            (None, i as u64 + 1, Phase::Draw),
            "no position during the draw"
        );
    }
    // The earliest entrant leaves (no heartbeat) and is dropped...
    for _ in 0..3 {
        h.advance(Duration::from_secs(10)).await;
        store.heartbeat(ROOM, &entrants[1..]).await.unwrap();
        store.admit_pass(ROOM).await.unwrap();
    }
    assert_eq!(
        store.heartbeat(ROOM, &[leaver]).await.unwrap(),
        vec![VisitorState::Unknown]
    );
    // ...and comes back, last, before the doors.
    let (p, joined) = waiting_place(store.resolve(ROOM, leaver, anyone()).await.unwrap());
    assert_eq!((p.position, p.waiting, joined), (None, 200, true));

    // The doors. Someone arriving after them queues behind the whole draw, even before
    // any pass has run.
    h.advance(Duration::from_secs(31)).await;
    store.heartbeat(ROOM, &entrants).await.unwrap();
    let after = VisitorId::random();
    let (p, _) = waiting_place(store.resolve(ROOM, after, anyone()).await.unwrap());
    assert_eq!(
        (p.position, p.waiting, p.phase),
        (Some(201), 201, Phase::Queueing)
    );
    let first_order = positions(&*store, &entrants).await;
    store.admit_pass(ROOM).await.unwrap();
    assert_eq!(positions(&*store, &entrants).await, first_order, "stable");
    let mut sorted = first_order.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (1..=200).collect::<Vec<_>>(), "every place once");
    assert_ne!(
        first_order,
        (1..=200).collect::<Vec<_>>(),
        "not arrival order"
    );

    // A second drop in the same room, after a reseed: the salt is the room's for good, so
    // the same people get the same order, whatever order they arrive in and although the
    // first of them leaves and rejoins.
    store.flush(ROOM).await.unwrap();
    let now = 61;
    store
        .open_room(ROOM, &seed, &lottery_policy(now, now + 60), true)
        .await
        .unwrap();
    for &v in entrants.iter().rev() {
        let (p, _) = waiting_place(store.resolve(ROOM, v, anyone()).await.unwrap());
        assert_eq!(p.phase, Phase::Draw);
    }
    for _ in 0..3 {
        h.advance(Duration::from_secs(10)).await;
        store.heartbeat(ROOM, &entrants[1..]).await.unwrap();
        store.admit_pass(ROOM).await.unwrap();
    }
    waiting_place(store.resolve(ROOM, leaver, anyone()).await.unwrap());
    h.advance(Duration::from_secs(31)).await;
    store.heartbeat(ROOM, &entrants).await.unwrap();
    let mut admitted = Vec::new();
    resume(&*store).await;
    for _ in 0..4 {
        h.advance(Duration::from_millis(250)).await;
        admitted.extend(store.admit_pass(ROOM).await.unwrap().admitted);
    }
    let mut by_first_order: Vec<(u64, VisitorId)> = first_order
        .iter()
        .copied()
        .zip(entrants.iter().copied())
        .collect();
    by_first_order.sort_unstable();
    let expected: Vec<VisitorId> = by_first_order.into_iter().map(|(_, v)| v).collect();
    assert_eq!(admitted, expected, "admitted in the same lottery order");
}

/// The chi-square statistic of where `early` arrivals ended up among `total` places, in
/// ten equal buckets.
fn chi_square(places: &[u64], total: u64) -> f64 {
    let mut buckets = [0u64; 10];
    for &p in places {
        buckets[((p - 1) * 10 / total) as usize] += 1;
    }
    let expected = places.len() as f64 / 10.0;
    buckets
        .iter()
        .map(|&o| (o as f64 - expected).powi(2) / expected)
        .sum()
}

/// Runs a draw of `n` entrants in `room` and returns where the earliest 1 % ended up, after
/// checking the order is the same before, during and after the doors' moves.
async fn draw_places<H: Harness>(h: &H, room: &str, n: usize, t0: u64) -> Vec<u64> {
    let store = h.store();
    store
        .open_room(
            room,
            &settings(10.0, 1),
            &lottery_policy(t0, t0 + 60),
            false,
        )
        .await
        .unwrap();
    store
        .update_settings(room, &SettingsPatch::pause())
        .await
        .unwrap();
    let entrants: Vec<VisitorId> = visitors(n);
    for &v in &entrants {
        store.resolve(room, v, anyone()).await.unwrap();
    }
    h.advance(Duration::from_secs(61)).await;
    let early = &entrants[..n / 100];
    let place_of = |states: Vec<VisitorState>| -> Vec<u64> {
        states
            .into_iter()
            .map(|s| match s {
                VisitorState::Waiting(p) => p.position.expect("placed after the doors"),
                other => panic!("{other:?}"),
            })
            .collect()
    };
    let before = place_of(store.heartbeat(room, early).await.unwrap());
    // A pass moves (part of) the draw into the line; positions never change while it does.
    store.admit_pass(room).await.unwrap();
    assert_eq!(
        place_of(store.heartbeat(room, early).await.unwrap()),
        before
    );
    for _ in 0..(n / crate::queue::REAP_BUDGET + 1) {
        store.admit_pass(room).await.unwrap();
    }
    assert_eq!(
        place_of(store.heartbeat(room, early).await.unwrap()),
        before
    );
    before
}

/// A draw's places show no bias toward early arrivals (chi-square over ten bands).
pub async fn lottery_is_fair_to_early_arrivals<H: Harness>(h: &mut H) {
    let n = h.lottery_entrants();
    // 9 degrees of freedom: p > 0.01 below 21.67. With a random salt a fair lottery still
    // lands above it once in a hundred runs, so one fresh room (a fresh salt) is allowed a
    // second try; a biased one (early arrivals first) scores in the thousands, twice.
    const CRITICAL: f64 = 21.67;
    let places = draw_places(h, ROOM, n, 0).await;
    let first = chi_square(&places, n as u64);
    if first < CRITICAL {
        return;
    }
    let places = draw_places(h, "second", n, 61).await;
    let second = chi_square(&places, n as u64);
    assert!(
        second < CRITICAL,
        "early arrivals are not spread evenly: chi-square {first:.2}, then {second:.2}"
    );
}

/// The lottery salt, the entrants collected so far and the drawn order outlast a reopen.
pub async fn lottery_salt_and_draw_survive_a_reopen<H: Harness>(h: &mut H) {
    let seed = settings(1_000.0, 100_000);
    let store = h.store();
    store
        .open_room(ROOM, &seed, &lottery_policy(0, 60), false)
        .await
        .unwrap();
    pause(&*store).await;
    let entrants = visitors(50);
    join_all(&*store, &entrants[..25]).await;
    drop(store);
    // A restart in the middle of the draw keeps the entrants collected so far.
    h.reopen(Duration::from_secs(5)).await;
    let store = h.store();
    store
        .open_room(ROOM, &seed, &lottery_policy(0, 60), false)
        .await
        .unwrap();
    assert_eq!(store.stats(ROOM).await.unwrap().waiting, 25);
    for &v in &entrants[..25] {
        let (p, joined) = waiting_place(store.resolve(ROOM, v, anyone()).await.unwrap());
        assert_eq!((p.position, joined), (None, false));
    }
    join_all(&*store, &entrants[25..]).await;
    h.advance(Duration::from_secs(56)).await;
    let first_order = positions(&*store, &entrants).await;

    // After another restart and a reseed, a second drop of the same people comes out in the
    // same order: the salt is the room's for good.
    store.flush(ROOM).await.unwrap();
    drop(store);
    h.reopen(Duration::from_secs(5)).await;
    let store = h.store();
    store
        .open_room(ROOM, &seed, &lottery_policy(61, 120), true)
        .await
        .unwrap();
    join_all(&*store, &entrants).await;
    h.advance(Duration::from_secs(60)).await;
    assert_eq!(positions(&*store, &entrants).await, first_order);
}

/// The auditable lottery (docs/fairness.md, "Auditable lottery"): the doors admit the draw
/// in exactly the order the published rule gives (draw hashes ascending,
/// [`crate::fairness::draw`]) from the salt and the ids; the record holds every entrant at
/// the doors (not those who left the lot before), shows no list before them, and never
/// changes after; a second drop in the same room has a record of its own.
pub async fn lottery_order_is_the_published_one<H: Harness>(h: &mut H) {
    use crate::fairness::draw::DrawHash;
    let store = h.store();
    let mut seed = settings(1_000.0, 100_000);
    seed.abandon_after = Duration::from_secs(20);
    store
        .open_room(ROOM, &seed, &lottery_policy(0, 60), false)
        .await
        .unwrap();
    pause(&*store).await;
    let entrants = visitors(500);
    join_all(&*store, &entrants).await;
    let before = store.draw(ROOM, true).await.unwrap();
    assert_eq!(before.phase, Phase::Draw);
    assert!(!before.doors_open());
    assert_eq!((before.entrants, before.hashes.as_ref()), (500, None));
    assert_eq!(before.salt.len(), 16, "16 random bytes");
    // One leaves the lot for the front, one abandons: neither is an entrant at the doors.
    let (moved, leaver) = (entrants[3], entrants[0]);
    store.move_to_front(ROOM, moved.reference()).await.unwrap();
    for _ in 0..3 {
        h.advance(Duration::from_secs(10)).await;
        store.heartbeat(ROOM, &entrants[1..]).await.unwrap();
        store.admit_pass(ROOM).await.unwrap();
    }
    assert_eq!(store.draw(ROOM, false).await.unwrap().entrants, 498);

    h.advance(Duration::from_secs(31)).await;
    store.heartbeat(ROOM, &entrants).await.unwrap();
    let after = store.draw(ROOM, true).await.unwrap();
    assert!(after.doors_open());
    assert_eq!(after.salt, before.salt, "the salt never changes");
    let drawn: Vec<VisitorId> = entrants
        .iter()
        .copied()
        .filter(|&v| v != moved && v != leaver)
        .collect();
    let mut expected: Vec<(DrawHash, VisitorId)> = drawn
        .iter()
        .map(|&v| (DrawHash::of(&after.salt, v), v))
        .collect();
    expected.sort_unstable();
    let mut listed = after.hashes.clone().expect("the list after the doors");
    listed.sort_unstable();
    assert_eq!(after.entrants, 498);
    assert_eq!(
        listed,
        expected.iter().map(|&(h, _)| h).collect::<Vec<_>>(),
        "the record is every entrant at the doors"
    );

    // Admission: the one moved to the front, then the draw in published order.
    resume(&*store).await;
    let mut admitted = Vec::new();
    for _ in 0..8 {
        h.advance(Duration::from_millis(250)).await;
        admitted.extend(store.admit_pass(ROOM).await.unwrap().admitted);
    }
    let mut want = vec![moved];
    want.extend(expected.iter().map(|&(_, v)| v));
    assert_eq!(admitted.len(), want.len(), "everyone drawn is admitted");
    assert!(
        admitted == want,
        "the doors follow the published order exactly"
    );
    // Fixed from the doors on: admissions, late arrivals and a flush change nothing.
    pause(&*store).await;
    join_all(&*store, &visitors(3)).await;
    store.flush(ROOM).await.unwrap();
    let later = store.draw(ROOM, true).await.unwrap();
    let mut later_list = later.hashes.clone().unwrap();
    later_list.sort_unstable();
    assert_eq!((later.entrants, later_list.clone()), (498, listed));
    // A restart keeps it too (the embedded store's snapshot, Redis itself).
    drop(store);
    h.reopen(Duration::from_secs(5)).await;
    let store = h.store();
    store
        .open_room(ROOM, &seed, &lottery_policy(0, 60), false)
        .await
        .unwrap();
    let restored = store.draw(ROOM, true).await.unwrap();
    let mut restored_list = restored.hashes.unwrap();
    restored_list.sort_unstable();
    assert_eq!(
        (restored.salt, restored_list),
        (before.salt.clone(), later_list)
    );

    // A second drop in the same room: its own entrants only, same salt.
    let t0 = 100;
    store
        .open_room(ROOM, &seed, &lottery_policy(t0, t0 + 60), false)
        .await
        .unwrap();
    h.advance(Duration::from_secs(t0 - 62)).await;
    let second = visitors(40);
    join_all(&*store, &second).await;
    assert_eq!(store.draw(ROOM, false).await.unwrap().entrants, 40);
    h.advance(Duration::from_secs(61)).await;
    let record = store.draw(ROOM, true).await.unwrap();
    let mut hashes = record.hashes.unwrap();
    hashes.sort_unstable();
    let mut want: Vec<DrawHash> = second
        .iter()
        .map(|&v| DrawHash::of(&record.salt, v))
        .collect();
    want.sort_unstable();
    assert_eq!((record.salt, hashes), (before.salt, want));
}
