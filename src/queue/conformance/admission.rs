//! The admission rules: the fast path, FIFO, the rate and its burst, `max_active`, idle
//! sessions and abandonment, pausing, flushing, passthrough, and what survives a reopen.

use super::*;

/// A newcomer is admitted at once while nobody waits and the limits allow.
pub async fn fast_path_admits_when_nobody_waits<H: Harness>(h: &mut H) {
    let store = open(h, settings(10.0, 100)).await;
    let first = VisitorId::random();
    assert_eq!(
        store.resolve(ROOM, first, anyone()).await.unwrap(),
        Resolution::Admitted { newly: true }
    );
    // Still admitted on the next request, without taking another token.
    assert_eq!(
        store.resolve(ROOM, first, anyone()).await.unwrap(),
        Resolution::Admitted { newly: false }
    );
    let stats = store.stats(ROOM).await.unwrap();
    assert_eq!(
        (stats.total_admitted, stats.total_joined, stats.active),
        (1, 0, 1)
    );
    // A joiner is told they joined; coming back is not a second join.
    pause(&*store).await;
    let second = VisitorId::random();
    assert!(matches!(
        store.resolve(ROOM, second, anyone()).await.unwrap(),
        Resolution::Waiting { joined: true, .. }
    ));
    assert!(matches!(
        store.resolve(ROOM, second, anyone()).await.unwrap(),
        Resolution::Waiting { joined: false, .. }
    ));
    assert_eq!(store.stats(ROOM).await.unwrap().total_joined, 1);
}

/// Concurrent joins are admitted in the order they joined.
pub async fn fifo_under_concurrent_joins<H: Harness>(h: &mut H) {
    let store = open(h, settings(50.0, 10_000)).await;
    pause(&*store).await;
    let mut tasks = Vec::new();
    for _ in 0..500 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let v = VisitorId::random();
            (
                v,
                place(store.resolve(ROOM, v, anyone()).await.unwrap())
                    .position
                    .unwrap(),
            )
        }));
    }
    let mut joined = Vec::new();
    for task in tasks {
        joined.push(task.await.unwrap());
    }
    joined.sort_by_key(|&(_, position)| position);
    let positions: Vec<u64> = joined.iter().map(|&(_, p)| p).collect();
    assert_eq!(
        positions,
        (1..=500).collect::<Vec<_>>(),
        "every place taken once"
    );

    resume(&*store).await;
    let admitted = run_passes(h, Duration::from_secs(20)).await;
    let expected: Vec<VisitorId> = joined.iter().map(|&(v, _)| v).collect();
    assert_eq!(
        admitted, expected,
        "admitted in exactly the order of the line"
    );
}

/// At 1000/s a full line admits 60 000 (±1) in a minute, and a resume releases no burst.
pub async fn rate_is_exact_over_a_minute<H: Harness>(h: &mut H) {
    let store = open(h, settings(1_000.0, 1_000_000)).await;
    pause(&*store).await;
    join_all(&*store, &visitors(62_000)).await;
    resume(&*store).await;
    // A resume starts with an empty bucket: nothing at the same instant.
    let burst = store.admit_pass(ROOM).await.unwrap().admitted.len();
    assert_eq!(burst, 0, "a resume lets no burst in");
    let admitted = run_passes(h, Duration::from_secs(60)).await.len() as i64;
    assert!(
        (admitted - 60_000).abs() <= 1,
        "admitted {admitted} in 60 s at 1000/s"
    );
    let stats = store.stats(ROOM).await.unwrap();
    assert_eq!(stats.waiting, 62_000 - admitted as u64);
}

/// Paused time earns no tokens: an hour's pause releases nobody at once on resume.
pub async fn burst_is_capped_after_a_long_pause<H: Harness>(h: &mut H) {
    let store = open(h, settings(10.0, 1_000)).await;
    pause(&*store).await;
    join_all(&*store, &visitors(200)).await;
    h.advance(Duration::from_secs(3_600)).await;
    assert!(
        store.admit_pass(ROOM).await.unwrap().admitted.is_empty(),
        "paused"
    );
    resume(&*store).await;
    // Paused time earns no tokens; a resume starts with an empty bucket.
    let first = store.admit_pass(ROOM).await.unwrap().admitted.len();
    assert_eq!(first, 0, "an hour's pause releases nobody at once");
    h.advance(Duration::from_millis(500)).await;
    let next = store.admit_pass(ROOM).await.unwrap().admitted.len();
    assert_eq!(next, 5, "then the configured rate");
    // An idle (unpaused) minute fills the bucket to one second's worth, no more.
    h.advance(Duration::from_secs(60)).await;
    let after_idle = store.admit_pass(ROOM).await.unwrap().admitted.len();
    assert_eq!(after_idle, 10, "the burst is one second's worth");

    // A rate below one per second still lets one through: the burst is at least 1.
    store
        .update_settings(
            ROOM,
            &SettingsPatch {
                rate: Some(0.1),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    h.advance(Duration::from_secs(100)).await;
    assert_eq!(store.admit_pass(ROOM).await.unwrap().admitted.len(), 1);
}

/// Nobody is admitted beyond `max_active` sessions on the site.
pub async fn max_active_is_held<H: Harness>(h: &mut H) {
    let store = open(h, settings(100.0, 5)).await;
    let crowd = visitors(20);
    let mut admitted_now = 0;
    for &v in &crowd {
        if admitted(store.resolve(ROOM, v, anyone()).await.unwrap()) {
            admitted_now += 1;
        }
    }
    assert_eq!(admitted_now, 5, "the fast path stops at max_active");
    for _ in 0..40 {
        h.advance(Duration::from_millis(250)).await;
        // Keep every session busy so none is reclaimed.
        for &v in &crowd {
            store.resolve(ROOM, v, anyone()).await.unwrap();
        }
        store.admit_pass(ROOM).await.unwrap();
        let stats = store.stats(ROOM).await.unwrap();
        assert_eq!((stats.active, stats.waiting), (5, 15));
    }
    // Raising the limit applies on the next pass.
    store
        .update_settings(
            ROOM,
            &SettingsPatch {
                max_active: Some(8),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    h.advance(Duration::from_millis(250)).await;
    let report = store.admit_pass(ROOM).await.unwrap();
    assert_eq!(report.admitted.len(), 3);
    // Each admitted visitor's join time comes with them (their time in line starts there):
    // everyone joined at the harness's start.
    assert_eq!(report.joined_ms, vec![Some(START_MS); 3]);
}

/// A session idle past `session_ttl` is reaped and its slot given to the line.
pub async fn idle_sessions_are_reclaimed<H: Harness>(h: &mut H) {
    let mut seed = settings(100.0, 2);
    seed.session_ttl = Duration::from_secs(10);
    let store = open(h, seed).await;
    let [busy, idle, waiting] = [
        VisitorId::random(),
        VisitorId::random(),
        VisitorId::random(),
    ];
    assert!(admitted(store.resolve(ROOM, busy, anyone()).await.unwrap()));
    assert!(admitted(store.resolve(ROOM, idle, anyone()).await.unwrap()));
    assert_eq!(
        place(store.resolve(ROOM, waiting, anyone()).await.unwrap()).position,
        Some(1)
    );

    h.advance(Duration::from_secs(9)).await;
    store.resolve(ROOM, busy, anyone()).await.unwrap();
    store.heartbeat(ROOM, &[waiting]).await.unwrap();
    assert!(store.admit_pass(ROOM).await.unwrap().admitted.is_empty());

    h.advance(Duration::from_secs(2)).await;
    let report = store.admit_pass(ROOM).await.unwrap();
    assert_eq!(
        report.expired,
        vec![idle],
        "only the idle session is reclaimed"
    );
    assert_eq!(
        report.admitted,
        vec![waiting],
        "and its slot goes to the next in line"
    );
    assert!(admitted(store.resolve(ROOM, busy, anyone()).await.unwrap()));
    let stats = store.stats(ROOM).await.unwrap();
    assert_eq!((stats.active, stats.total_expired), (2, 1));
}

/// A waiter without heartbeats leaves the line after `abandon_after`, and comes back at the back.
pub async fn abandoned_visitors_drop_and_rejoin_at_the_back<H: Harness>(h: &mut H) {
    let mut seed = settings(10.0, 100);
    seed.abandon_after = Duration::from_secs(60);
    let store = open(h, seed).await;
    pause(&*store).await;
    let line = visitors(3);
    join_all(&*store, &line).await;
    for _ in 0..4 {
        h.advance(Duration::from_secs(20)).await;
        store.heartbeat(ROOM, &line[1..]).await.unwrap();
        store.admit_pass(ROOM).await.unwrap();
    }
    // 80 s without a heartbeat: the first visitor was dropped at the 60 s mark.
    let stats = store.stats(ROOM).await.unwrap();
    assert_eq!((stats.waiting, stats.total_abandoned), (2, 1));
    let states = store.heartbeat(ROOM, &line).await.unwrap();
    assert_eq!(states[0], VisitorState::Unknown);
    assert!(matches!(states[1], VisitorState::Waiting(p) if p.position == Some(1)));
    // Coming back puts them at the end of the line.
    let back = place(store.resolve(ROOM, line[0], anyone()).await.unwrap());
    assert_eq!((back.position, back.waiting), (Some(3), 3));
}

/// A waiter is abandoned once `abandon_after` has passed since their last heartbeat, not a
/// rounding later (the model test found a store keeping heartbeats in whole seconds,
/// rounded up, which kept this waiter a second too long).
pub async fn abandonment_is_exact_to_the_millisecond<H: Harness>(h: &mut H) {
    let mut seed = settings(10.0, 100);
    seed.abandon_after = Duration::from_secs(1);
    let store = open(h, seed).await;
    pause(&*store).await;
    h.advance(Duration::from_millis(1)).await;
    let waiter = VisitorId::random();
    join_all(&*store, &[waiter]).await;
    h.advance(Duration::from_millis(999)).await;
    let early = store.admit_pass(ROOM).await.unwrap();
    assert!(
        early.abandoned.is_empty(),
        "999 ms after the heartbeat: still waiting"
    );
    h.advance(Duration::from_millis(1)).await;
    let due = store.admit_pass(ROOM).await.unwrap();
    assert_eq!(due.abandoned, vec![waiter], "1,000 ms after it: abandoned");
}

/// While paused nobody is admitted, not even by the fast path.
pub async fn pause_holds_even_the_fast_path<H: Harness>(h: &mut H) {
    let store = open(h, settings(10.0, 100)).await;
    pause(&*store).await;
    let v = VisitorId::random();
    let waiting = place(store.resolve(ROOM, v, anyone()).await.unwrap());
    assert!(waiting.paused);
    h.advance(Duration::from_secs(5)).await;
    assert!(store.admit_pass(ROOM).await.unwrap().admitted.is_empty());
    assert_eq!(store.stats(ROOM).await.unwrap().total_admitted, 0);
    resume(&*store).await;
    h.advance(Duration::from_millis(250)).await;
    assert_eq!(store.admit_pass(ROOM).await.unwrap().admitted, vec![v]);
}

/// A flush empties the line and leaves sessions on the site alone.
pub async fn flush_empties_the_line_and_leaves_sessions<H: Harness>(h: &mut H) {
    let store = open(h, settings(1.0, 100)).await;
    let on_site = VisitorId::random();
    assert!(admitted(
        store.resolve(ROOM, on_site, anyone()).await.unwrap()
    ));
    let line = visitors(10);
    join_all(&*store, &line).await;
    assert_eq!(store.flush(ROOM).await.unwrap(), 10);
    let stats = store.stats(ROOM).await.unwrap();
    assert_eq!((stats.waiting, stats.active), (0, 1));
    assert!(admitted(
        store.resolve(ROOM, on_site, anyone()).await.unwrap()
    ));
    assert_eq!(
        store.heartbeat(ROOM, &line[..1]).await.unwrap(),
        vec![VisitorState::Unknown]
    );
    // The line works normally afterwards, numbered from 1 again.
    let again = place(store.resolve(ROOM, line[5], anyone()).await.unwrap());
    assert_eq!((again.position, again.waiting), (Some(1), 1));
}

/// Live settings outlast a reopen and win over the file's; `reseed` makes the file win but does not lift an operator's pause.
pub async fn settings_survive_a_reopen<H: Harness>(h: &mut H) {
    let seed = settings(10.0, 100);
    let store = open(h, seed.clone()).await;
    store
        .update_settings(
            ROOM,
            &SettingsPatch {
                rate: Some(25.0),
                max_active: Some(7),
                session_ttl: Some(Duration::from_secs(90)),
                abandon_after: Some(Duration::from_secs(30)),
                paused: Some(true),
                mode: Some(Mode::SoldOut),
                changes: Default::default(),
                expect: None,
            },
        )
        .await
        .unwrap();
    // A patch of the mode alone leaves the rest alone.
    let switched = store
        .update_settings(
            ROOM,
            &SettingsPatch {
                mode: Some(Mode::Passthrough),
                ..SettingsPatch::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (switched.mode, switched.rate, switched.paused),
        (Mode::Passthrough, 25.0, true)
    );
    drop(store);
    h.reopen(Duration::from_secs(5)).await;
    let store = h.store();
    // The file still says rate 10: the live settings win and the caller is told.
    match store
        .open_room(ROOM, &seed, &RoomPolicy::default(), false)
        .await
        .unwrap()
    {
        Seeded::KeptLive(live) => assert_eq!((live.rate, live.max_active), (25.0, 7)),
        other => panic!("expected the live settings to be kept, got {other:?}"),
    }
    let live = store.stats(ROOM).await.unwrap().settings;
    assert_eq!(live.session_ttl, Duration::from_secs(90));
    assert_eq!(live.abandon_after, Duration::from_secs(30));
    assert!(live.paused);
    assert_eq!(live.mode, Mode::Passthrough);
    // --reseed makes the file win (the mode too), but does not lift an operator's pause.
    assert_eq!(
        store
            .open_room(ROOM, &seed, &RoomPolicy::default(), true)
            .await
            .unwrap(),
        Seeded::Reseeded
    );
    let live = store.stats(ROOM).await.unwrap().settings;
    assert_eq!((live.rate, live.max_active, live.paused), (10.0, 100, true));
    assert_eq!(live.mode, Mode::Queue);
    assert_eq!(
        store
            .open_room(ROOM, &seed, &RoomPolicy::default(), false)
            .await
            .unwrap(),
        Seeded::Unchanged
    );
    // A file that names another mode is a difference like any other setting.
    let sold_out = RoomSettings {
        mode: Mode::SoldOut,
        ..seed.clone()
    };
    assert!(matches!(
        store
            .open_room(ROOM, &sold_out, &RoomPolicy::default(), false)
            .await
            .unwrap(),
        Seeded::KeptLive(live) if live.mode == Mode::Queue
    ));
}

/// The passthrough mode lets the whole line in on the next pass and newcomers in on the
/// spot, whatever the rate, `max_active` and a pause, counting each; back in the queue mode
/// the limits hold again (nobody more while the site is over `max_active`).
pub async fn passthrough_lets_the_line_and_newcomers_in_then_queues_again<H: Harness>(h: &mut H) {
    let store = open(h, settings(1.0, 2)).await;
    // One token: the first is let in by the fast path, the rest wait.
    assert!(admitted(
        store
            .resolve(ROOM, VisitorId::random(), anyone())
            .await
            .unwrap()
    ));
    let line = visitors(5);
    join_all(&*store, &line).await;
    pause(&*store).await;
    let passthrough = SettingsPatch {
        mode: Some(Mode::Passthrough),
        ..SettingsPatch::default()
    };
    store.update_settings(ROOM, &passthrough).await.unwrap();
    // A newcomer goes in at once, ahead of the line's pass.
    let newcomer = VisitorId::random();
    assert!(admitted(
        store.resolve(ROOM, newcomer, anyone()).await.unwrap()
    ));
    h.advance(Duration::from_millis(250)).await;
    let report = store.admit_pass(ROOM).await.unwrap();
    assert_eq!(
        report.admitted, line,
        "the whole line, in order, in one pass"
    );
    let stats = store.stats(ROOM).await.unwrap();
    assert_eq!((stats.waiting, stats.active), (0, 7));
    assert_eq!(stats.total_passed_through, 6);
    assert_eq!(stats.total_admitted, 7);
    for &v in &line {
        assert!(admitted(store.resolve(ROOM, v, anyone()).await.unwrap()));
    }
    // Back to queueing (and resumed): 7 on the site against a max_active of 2.
    store
        .update_settings(
            ROOM,
            &SettingsPatch {
                mode: Some(Mode::Queue),
                paused: Some(false),
                ..SettingsPatch::default()
            },
        )
        .await
        .unwrap();
    let later = VisitorId::random();
    assert_eq!(
        place(store.resolve(ROOM, later, anyone()).await.unwrap()).position,
        Some(1)
    );
    h.advance(Duration::from_secs(2)).await;
    assert!(store.admit_pass(ROOM).await.unwrap().admitted.is_empty());
    let stats = store.stats(ROOM).await.unwrap();
    assert_eq!((stats.waiting, stats.total_passed_through), (1, 6));
}

/// The line and its order outlast a reopen.
pub async fn line_survives_a_reopen<H: Harness>(h: &mut H) {
    let store = open(h, settings(5.0, 100)).await;
    let on_site = VisitorId::random();
    assert!(admitted(
        store.resolve(ROOM, on_site, anyone()).await.unwrap()
    ));
    pause(&*store).await;
    let line = visitors(50);
    join_all(&*store, &line).await;
    drop(store);
    // Downtime longer than abandon_after and session_ttl must not cost anyone their place.
    h.reopen(Duration::from_secs(7_200 + 300)).await;
    let store = h.store();
    store
        .open_room(ROOM, &settings(5.0, 100), &RoomPolicy::default(), false)
        .await
        .unwrap();
    store.admit_pass(ROOM).await.unwrap();
    let states = store.heartbeat(ROOM, &line).await.unwrap();
    for (i, state) in states.iter().enumerate() {
        assert!(
            matches!(state, VisitorState::Waiting(p) if p.position == Some(i as u64 + 1)),
            "visitor {i} lost their place: {state:?}"
        );
    }
    assert!(admitted(
        store.resolve(ROOM, on_site, anyone()).await.unwrap()
    ));
    let stats = store.stats(ROOM).await.unwrap();
    assert_eq!((stats.total_joined, stats.total_admitted), (50, 1));
}

/// A heartbeat reports places but never puts anyone in line.
pub async fn heartbeat_never_joins<H: Harness>(h: &mut H) {
    let store = open(h, settings(10.0, 100)).await;
    let stranger = VisitorId::random();
    assert_eq!(
        store.heartbeat(ROOM, &[stranger]).await.unwrap(),
        vec![VisitorState::Unknown]
    );
    let stats = store.stats(ROOM).await.unwrap();
    assert_eq!((stats.waiting, stats.active, stats.total_joined), (0, 0, 0));
    assert!(admitted(
        store.resolve(ROOM, stranger, anyone()).await.unwrap()
    ));
    assert_eq!(
        store.heartbeat(ROOM, &[stranger]).await.unwrap(),
        vec![VisitorState::Admitted]
    );
}

/// One pass reaps a bounded batch of a large backlog; later passes clear the rest.
pub async fn reaping_is_bounded_but_catches_up<H: Harness>(h: &mut H) {
    let mut seed = settings(10.0, 100);
    seed.abandon_after = Duration::from_secs(60);
    let store = open(h, seed).await;
    pause(&*store).await;
    let n = 25_000;
    join_all(&*store, &visitors(n)).await;
    h.advance(Duration::from_secs(61)).await;
    let first = store.admit_pass(ROOM).await.unwrap().abandoned.len();
    assert!(
        first > 0 && first < n,
        "one pass reaps a bounded batch ({first})"
    );
    let mut reaped = first;
    for _ in 0..10 {
        reaped += store.admit_pass(ROOM).await.unwrap().abandoned.len();
    }
    assert_eq!(reaped, n, "later passes catch up");
    assert_eq!(store.stats(ROOM).await.unwrap().waiting, 0);
}

/// A settings patch that fails validation changes nothing.
pub async fn invalid_settings_change_nothing<H: Harness>(h: &mut H) {
    let store = open(h, settings(10.0, 100)).await;
    for (patch, field) in [
        (
            SettingsPatch {
                rate: Some(-1.0),
                ..Default::default()
            },
            "rate",
        ),
        (
            SettingsPatch {
                rate: Some(f64::NAN),
                ..Default::default()
            },
            "rate",
        ),
        (
            SettingsPatch {
                max_active: Some(0),
                ..Default::default()
            },
            "max_active",
        ),
        (
            SettingsPatch {
                rate: Some(20.0),
                session_ttl: Some(Duration::ZERO),
                ..Default::default()
            },
            "session_ttl",
        ),
    ] {
        match store.update_settings(ROOM, &patch).await {
            Err(super::StoreError::Invalid { field: named, .. }) => assert_eq!(named, field),
            other => panic!("{patch:?} should be refused, got {other:?}"),
        }
    }
    assert_eq!(
        store.stats(ROOM).await.unwrap().settings,
        settings(10.0, 100)
    );
    assert!(matches!(
        store
            .resolve("nowhere", VisitorId::random(), anyone())
            .await,
        Err(super::StoreError::UnknownRoom(_))
    ));
}

/// A patch that expects a change to hold a value is written only while it does, on every
/// replica: of two writes that read the same revision and each write a token of their own,
/// the first lands and the second is a [`super::StoreError::Conflict`] that changes nothing
/// (not even the fields it also sets); the same write sent again after it landed (a call
/// repeated after a broken connection) finds its own token and is answered as written.
pub async fn a_write_expecting_a_change_lands_only_over_it<H: Harness>(h: &mut H) {
    use serde_json::{Value, json};
    let a = open(h, settings(10.0, 100)).await;
    let b = h.replica().await.unwrap_or_else(|| a.clone());
    let write = |expect: Value, token: &str, rate: f64| SettingsPatch {
        rate: Some(rate),
        changes: crate::queue::RoomChanges(
            [
                ("rev".to_owned(), json!(token)),
                (format!("by-{token}"), json!({ "token": token })),
            ]
            .into_iter()
            .collect(),
        ),
        expect: Some(("rev".to_owned(), expect)),
        ..Default::default()
    };
    // Absent is expected as null.
    let first = write(Value::Null, "a1", 1.0);
    let landed = a.update_settings(ROOM, &first).await.unwrap();
    assert_eq!(landed.changes.get("rev"), Some(&json!("a1")));
    // Sent again, on another replica even: answered as written, nothing written twice.
    assert_eq!(b.update_settings(ROOM, &first).await.unwrap(), landed);
    // A second writer read the same (absent) revision: refused, nothing of it written.
    match b
        .update_settings(ROOM, &write(Value::Null, "b1", 2.0))
        .await
    {
        Err(super::StoreError::Conflict(name)) => assert_eq!(name, "rev"),
        other => panic!("a stale write should conflict, got {other:?}"),
    }
    let now = b.stats(ROOM).await.unwrap().settings;
    assert_eq!(now, landed);
    assert_eq!(now.changes.get("by-b1"), None);
    // Read again, it lands.
    let second = b
        .update_settings(ROOM, &write(json!("a1"), "b2", 2.0))
        .await
        .unwrap();
    assert_eq!(second.changes.get("rev"), Some(&json!("b2")));
    assert_eq!(second.changes.get("by-b2"), Some(&json!({ "token": "b2" })));
    assert_eq!(second.rate, 2.0);
    // A value no longer held is stale too.
    assert!(matches!(
        a.update_settings(ROOM, &write(json!("a1"), "a2", 3.0))
            .await,
        Err(super::StoreError::Conflict(_))
    ));
}

/// One room's line, limits and counters never affect another's.
pub async fn rooms_are_independent<H: Harness>(h: &mut H) {
    let store = open(h, settings(1.0, 1)).await;
    store
        .open_room("other", &settings(1.0, 1), &RoomPolicy::default(), false)
        .await
        .unwrap();
    let v = VisitorId::random();
    assert!(admitted(store.resolve(ROOM, v, anyone()).await.unwrap()));
    // The first room is full; the other is not.
    assert!(matches!(
        store
            .resolve(ROOM, VisitorId::random(), anyone())
            .await
            .unwrap(),
        Resolution::Waiting { .. }
    ));
    assert!(admitted(
        store
            .resolve("other", VisitorId::random(), anyone())
            .await
            .unwrap()
    ));
    pause(&*store).await;
    assert!(!store.stats("other").await.unwrap().settings.paused);
}
