//! The store conformance suite: the admission rules and the store side of per-client
//! shares, the queue breaker, references, priority and ending sessions, written once
//! against [`QueueStore`] and run against every store through a [`Harness`] that owns its
//! time.
//!
//! This module holds the harness, the [`suite!`] that instantiates every test for one
//! store, and the helpers the tests share; the tests live by concern in its submodules:
//! `admission` (the rate, `max_active`, sessions, pausing, reopening), `schedule` (the join
//! limit, the schedule and the lottery), `clients` (per-client shares, the breaker,
//! references, priority), `spends` (grant nonces and challenge ids), `sessions` (ending
//! and keeping sessions) and `adaptive` (closed-loop admission's shared state).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::{
    ChallengeSpend, ClientKey, GrantUse, Join, Mode, Phase, Place, QueueQuery, QueueStore,
    RefusedReason, Resolution, RoomPolicy, RoomSettings, Schedule, Seeded, SettingsPatch, Spent,
    StoreError, StoreResult, VisitorId, VisitorRef, VisitorState,
};

mod adaptive;
mod admission;
mod clients;
mod schedule;
mod sessions;
mod spends;

pub use adaptive::*;
pub use admission::*;
pub use clients::*;
pub use schedule::*;
pub use sessions::*;
pub use spends::*;

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
            a_write_expecting_a_change_lands_only_over_it,
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
            a_grant_given_back_is_fresh_again,
            challenge_ids_are_spent_once,
            a_known_only_resolve_joins_nobody_new,
            a_now_only_resolve_admits_on_the_spot_or_joins_nobody,
            end_session_frees_the_slot_at_once,
            touch_sessions_keeps_sessions_alive,
            session_lengths_are_kept_by_the_store,
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
    open_main(&*store, seed).await;
    store
}

/// Opens room `main` on `store` with `seed` and no policy (for the stores' own tests too).
pub async fn open_main<S: QueueStore + ?Sized>(store: &S, seed: RoomSettings) {
    store
        .open_room(ROOM, &seed, &RoomPolicy::default(), false)
        .await
        .unwrap();
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

/// Where both harnesses' clocks start.
pub const START_MS: u64 = 1_700_000_000_000;

/// A waiting resolution's place and whether it was a fresh join.
fn waiting_place(resolution: Resolution) -> (Place, bool) {
    match resolution {
        Resolution::Waiting { place, joined } => (place, joined),
        other => panic!("expected to wait, got {other:?}"),
    }
}

/// A lottery room whose line opens `opens` s and doors `admits` s after the clock's start.
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

/// `secs` after the harness's clock started, as a wall-clock time.
fn at(secs: u64) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + Duration::from_millis(START_MS + secs * 1_000)
}
