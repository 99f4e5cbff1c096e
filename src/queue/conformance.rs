//! The store conformance suite: the admission rules and the store side of per-client
//! shares, the queue breaker, references, priority and ending sessions, written once
//! against [`QueueStore`] and run against every store through a [`Harness`] that owns its
//! time.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::{
    ChallengeSpend, ClientKey, GrantUse, Join, Mode, Phase, Place, QueueQuery, QueueStore,
    RefusedReason, Resolution, RoomPolicy, RoomSettings, Schedule, Seeded, SettingsPatch, Spent,
    StoreError, StoreResult, VisitorId, VisitorRef, VisitorState,
};

/// A store under test plus control of the time it reads.
#[async_trait]
pub trait Harness: Send + Sync {
    /// The store the suite runs against.
    type Store: QueueStore;
    /// The store, opened on the harness's clock.
    fn store(&self) -> Arc<Self::Store>;
    /// Moves the store's clock forward.
    async fn advance(&self, by: Duration);
    /// Closes the store and opens it again on the same durable state after `downtime`.
    async fn reopen(&mut self, downtime: Duration);
    /// How many entrants the lottery fairness test draws (100k by default; a store over
    /// the network may use fewer to keep debug builds quick).
    fn lottery_entrants(&self) -> usize {
        100_000
    }
    /// Another replica on the same shared state, for stores that several replicas share
    /// (Redis); `None` for a store only one process uses.
    async fn replica(&self) -> Option<Arc<Self::Store>> {
        None
    }
}

/// Instantiates every conformance test for one store. `$make` builds a fresh harness.
///
/// `suite!(make)` runs under tokio's paused clock (the harness advances it);
/// `suite!(unpaused: make)` runs on real time, for stores that talk to a server over the
/// network, where an auto-advancing clock would fire their timeouts.
macro_rules! suite {
    (@tests [$attr:meta] $make:expr; @names) => {
        $crate::queue::conformance::suite!(@tests [$attr] $make;
            fast_path_admits_when_nobody_waits,
            fifo_under_concurrent_joins,
            rate_is_exact_over_a_minute,
            burst_is_capped_after_a_long_pause,
            max_active_is_held,
            idle_sessions_are_reclaimed,
            abandoned_visitors_drop_and_rejoin_at_the_back,
            abandonment_is_exact_to_the_millisecond,
            pause_holds_even_the_fast_path,
            flush_empties_the_line_and_leaves_sessions,
            settings_survive_a_reopen,
            passthrough_lets_the_line_and_newcomers_in_then_queues_again,
            line_survives_a_reopen,
            heartbeat_never_joins,
            reaping_is_bounded_but_catches_up,
            invalid_settings_change_nothing,
            rooms_are_independent,
            join_limit_counts_per_address_and_refusals,
            schedule_phases_from_store_time,
            lottery_draw_is_by_lot_and_a_rejoin_keeps_its_place,
            lottery_is_fair_to_early_arrivals,
            lottery_salt_and_draw_survive_a_reopen,
            lottery_order_is_the_published_one,
            places_per_client_are_capped_and_freed,
            sessions_per_client_are_capped_and_freed,
            a_session_is_used_from_at_most_session_clients,
            queue_breaker_refuses_newcomers_only,
            live_policy_changes_apply_at_once_and_outlast_a_reopen,
            queue_head_and_find_by_reference,
            move_to_front_by_reference,
            move_to_front_during_a_lottery_draw,
            priority_join_takes_position_one,
            grant_nonces_are_spent_once,
            challenge_ids_are_spent_once,
            a_known_only_resolve_joins_nobody_new,
            end_session_frees_the_slot_at_once,
            touch_sessions_keeps_sessions_alive,
            effective_rate_caps_the_bucket_exactly,
            origin_reports_are_shared_and_one_replica_decides,
        );
    };
    (@tests [$attr:meta] $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[$attr]
            async fn $name() {
                #[allow(unused_mut)]
                let mut harness = $make;
                $crate::queue::conformance::$name(&mut harness).await;
            }
        )*
    };
    (unpaused: $make:expr) => {
        $crate::queue::conformance::suite!(@tests [tokio::test] $make; @names);
    };
    ($make:expr) => {
        $crate::queue::conformance::suite!(@tests [tokio::test(start_paused = true)] $make; @names);
    };
}
pub(crate) use suite;

const ROOM: &str = "main";

/// Room settings at `rate` and `max_active`, with a 5-minute session TTL and a 2-hour abandon time (long enough that heartbeats never matter).
pub fn settings(rate: f64, max_active: u64) -> RoomSettings {
    RoomSettings {
        rate,
        max_active,
        session_ttl: Duration::from_secs(300),
        // Long enough that tests about other rules need no heartbeats.
        abandon_after: Duration::from_secs(7_200),
        paused: false,
        mode: Mode::Queue,
        changes: Default::default(),
    }
}

/// One client address for tests that are not about the join limit (off by default).
pub fn anyone() -> ClientKey {
    ClientKey::from(std::net::Ipv4Addr::new(192, 0, 2, 1))
}

/// The setup of each store's "client counts are forgotten at zero" check: a room with the
/// default shares, 20 sessions each used from two clients (10 s TTL), then, paused, 300
/// places from 300 clients (abandoned after 60 s). The store then holds 300 clients'
/// places and 20 clients' sessions in its per-client bookkeeping, which the caller
/// inspects in its own terms before and after 61 s and a pass.
pub async fn fill_client_counts(store: &dyn QueueStore) {
    let mut seed = settings(1_000.0, 1_000);
    seed.session_ttl = Duration::from_secs(10);
    seed.abandon_after = Duration::from_secs(60);
    let policy = RoomPolicy::default().with_default_shares();
    store
        .open_room("main", &seed, &policy, false)
        .await
        .unwrap();
    let client = |i: u32| ClientKey::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
    for i in 0..20 {
        let v = VisitorId::random();
        store.resolve("main", v, client(i)).await.unwrap();
        // A second client of the session is remembered with it.
        store.resolve("main", v, client(i + 1_000)).await.unwrap();
    }
    store
        .update_settings("main", &SettingsPatch::pause())
        .await
        .unwrap();
    for i in 0..300 {
        store
            .resolve("main", VisitorId::random(), client(i))
            .await
            .unwrap();
    }
}

fn visitors(n: usize) -> Vec<VisitorId> {
    (0..n).map(|_| VisitorId::random()).collect()
}

fn admitted(resolution: Resolution) -> bool {
    matches!(resolution, Resolution::Admitted { .. })
}

fn place(resolution: Resolution) -> Place {
    match resolution {
        Resolution::Waiting { place, .. } => place,
        other => panic!("expected to wait, got {other:?}"),
    }
}

async fn open<H: Harness>(h: &H, seed: RoomSettings) -> Arc<H::Store> {
    let store = h.store();
    store
        .open_room(ROOM, &seed, &RoomPolicy::default(), false)
        .await
        .unwrap();
    store
}

async fn pause<S: QueueStore>(store: &S) {
    store
        .update_settings(ROOM, &SettingsPatch::pause())
        .await
        .unwrap();
}

async fn resume<S: QueueStore>(store: &S) {
    store
        .update_settings(ROOM, &SettingsPatch::resume())
        .await
        .unwrap();
}

/// Joins everyone in order and returns their places.
async fn join_all<S: QueueStore>(store: &S, who: &[VisitorId]) -> Vec<Place> {
    let mut places = Vec::with_capacity(who.len());
    for &v in who {
        places.push(place(store.resolve(ROOM, v, anyone()).await.unwrap()));
    }
    places
}

/// Runs passes every 250 ms for `span`, returning everyone admitted in order.
async fn run_passes<H: Harness>(h: &H, span: Duration) -> Vec<VisitorId> {
    let store = h.store();
    let step = Duration::from_millis(250);
    let mut admitted = Vec::new();
    let mut elapsed = Duration::ZERO;
    while elapsed < span {
        h.advance(step).await;
        elapsed += step;
        admitted.extend(store.admit_pass(ROOM).await.unwrap().admitted);
    }
    admitted
}

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

/// Where both harnesses' clocks start.
pub const START_MS: u64 = 1_700_000_000_000;

/// `secs` after the harness's clock started, as a wall-clock time.
fn at(secs: u64) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + Duration::from_millis(START_MS + secs * 1_000)
}

fn waiting_place(resolution: Resolution) -> (Place, bool) {
    match resolution {
        Resolution::Waiting { place, joined } => (place, joined),
        other => panic!("expected to wait, got {other:?}"),
    }
}

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

fn lottery_policy(opens: u64, admits: u64) -> RoomPolicy {
    RoomPolicy {
        lottery: true,
        schedule: Schedule {
            queue_opens_at: Some(at(opens)),
            admits_at: Some(at(admits)),
            closes_at: None,
        },
        ..Default::default()
    }
}

/// Everyone's position, asked in one batch.
async fn positions<S: QueueStore>(store: &S, who: &[VisitorId]) -> Vec<u64> {
    let mut out = Vec::with_capacity(who.len());
    for chunk in who.chunks(1_000) {
        for state in store.heartbeat(ROOM, chunk).await.unwrap() {
            match state {
                VisitorState::Waiting(p) => out.push(p.position.expect("a place after the doors")),
                other => panic!("expected to wait, got {other:?}"),
            }
        }
    }
    out
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
    for _ in 0..(n / super::REAP_BUDGET + 1) {
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

// ---- Per-client shares, the queue breaker, references, priority; sessions.

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

fn adaptive_state(effective_rate: f64) -> super::AdaptiveState {
    super::AdaptiveState {
        effective_rate,
        reason: crate::fairness::adaptive::Reason::SlowOrigin {
            p95_ms: 1_300,
            target_ms: 800,
        },
        last_decrease_ms: Some(1),
        last_increase_ms: None,
        p95_ms: Some(1_300),
        error_ratio: 0.0,
        samples: 40,
        decided_ms: 1,
    }
}

/// Closed-loop admission (docs/fairness.md): the controller's effective rate is applied as
/// exactly as the rate itself, never above the configured `rate` (which stays as it was),
/// and clearing it restores the configured rate.
pub async fn effective_rate_caps_the_bucket_exactly<H: Harness>(h: &mut H) {
    let store = open(h, settings(10.0, 100_000)).await;
    pause(&*store).await;
    join_all(&*store, &visitors(1_000)).await;
    resume(&*store).await;
    store
        .set_adaptive(ROOM, Some(&adaptive_state(2.5)))
        .await
        .unwrap();
    let lowered = run_passes(h, Duration::from_secs(20)).await.len() as i64;
    assert!((lowered - 50).abs() <= 1, "{lowered} in 20 s at 2.5/s");
    assert_eq!(store.stats(ROOM).await.unwrap().settings.rate, 10.0);

    // Above the configured rate: the configured rate holds.
    store
        .set_adaptive(ROOM, Some(&adaptive_state(50.0)))
        .await
        .unwrap();
    let capped = run_passes(h, Duration::from_secs(10)).await.len() as i64;
    assert!((capped - 100).abs() <= 3, "{capped} in 10 s at 10/s");

    // The operator lowers `rate` below the effective rate: the lower one applies.
    store
        .update_settings(
            ROOM,
            &SettingsPatch {
                rate: Some(1.0),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let operator = run_passes(h, Duration::from_secs(10)).await.len() as i64;
    assert!((operator - 10).abs() <= 2, "{operator} in 10 s at 1/s");

    store
        .update_settings(
            ROOM,
            &SettingsPatch {
                rate: Some(10.0),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    store
        .set_adaptive(ROOM, Some(&adaptive_state(4.0)))
        .await
        .unwrap();
    let again = run_passes(h, Duration::from_secs(10)).await.len() as i64;
    assert!((again - 40).abs() <= 2, "{again} in 10 s at 4/s");
    store.set_adaptive(ROOM, None).await.unwrap();
    let cleared = run_passes(h, Duration::from_secs(10)).await.len() as i64;
    assert!(
        (cleared - 100).abs() <= 2,
        "{cleared} in 10 s at 10/s, cleared"
    );
    assert!(
        matches!(
            store.set_adaptive("nowhere", None).await,
            Err(StoreError::UnknownRoom(_))
        ),
        "only known rooms"
    );
}

/// Closed-loop admission with replicas: every replica's report is seen by every replica, a
/// stale one is dropped, only one caller per second claims the decision, and the stored
/// state is what the next exchange returns (on every replica).
pub async fn origin_reports_are_shared_and_one_replica_decides<H: Harness>(h: &mut H) {
    use crate::fairness::adaptive::{OriginReport, OriginSummary};
    let a = open(h, settings(10.0, 100)).await;
    // A replica's clock is the harness's as of its creation: made again after advancing.
    let b = h.replica().await.unwrap_or_else(|| a.clone());
    let report = |ms: u64, n: u64| {
        let mut s = OriginSummary::default();
        for _ in 0..n {
            s.record(Duration::from_millis(ms), 200);
        }
        OriginReport {
            slots: vec![(0, s.clone()), (3, s)],
        }
    };
    let (r1, r2) = (report(40, 5), report(2_000, 7));
    let first = a.exchange_origin(ROOM, "replica-1", &r1).await.unwrap();
    assert!(first.decide, "the first exchange claims the decision");
    assert_eq!(first.state, None);
    assert_eq!(first.configured_rate, 10.0);
    assert_eq!(first.reports.len(), 1);
    assert_eq!(first.reports[0].1, r1);
    let second = b.exchange_origin(ROOM, "replica-2", &r2).await.unwrap();
    assert!(!second.decide, "one decision per second for the whole room");
    let mut seen: Vec<&OriginReport> = second.reports.iter().map(|(_, r)| r).collect();
    seen.sort_by_key(|r| r.slots[0].1.count);
    assert_eq!(seen, vec![&r1, &r2], "every replica's report");
    let fleet = second.fleet_window().summary_since(0, second.now_ms);
    assert_eq!(fleet.count, 24, "merged by count");

    let state = adaptive_state(5.0);
    a.set_adaptive(ROOM, Some(&state)).await.unwrap();
    h.advance(Duration::from_secs(1)).await;
    let b = h.replica().await.unwrap_or_else(|| a.clone());
    let third = b.exchange_origin(ROOM, "replica-2", &r2).await.unwrap();
    assert!(third.decide, "a second later, anyone may claim it");
    assert_eq!(third.state, Some(state));
    assert!(third.now_ms >= second.now_ms + 1_000, "store time");

    // replica-1 stops reporting: after REPORT_STALE_MS its report no longer counts.
    h.advance(Duration::from_secs(4)).await;
    let b = h.replica().await.unwrap_or_else(|| a.clone());
    let later = b.exchange_origin(ROOM, "replica-2", &r2).await.unwrap();
    assert_eq!(later.reports.len(), 1);
    assert_eq!(later.reports[0].1, r2);

    a.set_adaptive(ROOM, None).await.unwrap();
    let cleared = a.exchange_origin(ROOM, "replica-1", &r1).await.unwrap();
    assert_eq!(cleared.state, None);
    assert!(cleared.decide, "clearing ends the claim too");
    assert!(matches!(
        a.exchange_origin("nowhere", "replica-1", &r1).await,
        Err(StoreError::UnknownRoom(_))
    ));
}
