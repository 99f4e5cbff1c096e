//! The embedded store's own tests (the conformance suite runs on it too, from here): the
//! lottery order, spent grants, per-client counts, and the snapshot's formats.

use std::sync::Arc;

use async_trait::async_trait;

use super::snapshot::{LiveSnapshot, SNAPSHOT_FILE, SNAPSHOT_MAGIC, SNAPSHOT_MAGIC_V3, Snapshot};
use super::store::{IdKey, SpentGrants, SpentKey};
use super::*;
use crate::clock::Clock;
use crate::queue::conformance::{self, Harness};
use crate::queue::{GrantUse, QueueStore};
use std::time::Duration;

#[test]
fn the_published_hash_is_what_orders_the_embedded_draw() {
    let salt = [0x5a; 16];
    for i in 0..50u8 {
        let v = VisitorId([i; 16]);
        assert_eq!(
            crate::fairness::draw::DrawHash::of(&salt, v).score(),
            lottery_score(&salt, v),
            "the embedded store must order the draw by the published hash"
        );
    }
}

struct MemoryHarness {
    store: Arc<MemoryStore>,
    dir: tempfile::TempDir,
}

impl MemoryHarness {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(
            MemoryStore::open(Clock::starting_at(conformance::START_MS), dir.path()).unwrap(),
        );
        MemoryHarness { store, dir }
    }
}

#[async_trait]
impl Harness for MemoryHarness {
    type Store = MemoryStore;
    fn store(&self) -> Arc<MemoryStore> {
        self.store.clone()
    }
    async fn advance(&self, by: Duration) {
        tokio::time::advance(by).await;
    }
    async fn reopen(&mut self, downtime: Duration) {
        self.store.persist().await.unwrap();
        let clock = Clock::starting_at(self.store.clock.now_ms() + downtime.as_millis() as u64);
        self.store = Arc::new(MemoryStore::open(clock, self.dir.path()).unwrap());
    }
}

conformance::suite!(MemoryHarness::new());

/// Spent grant nonces are bounded and forgotten at their expiry; when full, new grants
/// are refused rather than an unexpired nonce forgotten (which would make it replayable).
#[test]
fn spent_grants_are_bounded_and_pruned_by_expiry() {
    let mut spent = SpentGrants::<String>::default();
    let v = VisitorId::random();
    for i in 0..MAX_SPENT_GRANTS {
        let expiry = if i < 10 { 1_000 } else { 10_000 };
        assert_eq!(spent.spend(&format!("n{i}"), v, expiry, 0), GrantUse::Fresh);
    }
    assert_eq!(spent.spend("one-more", v, 10_000, 0), GrantUse::Taken);
    assert_eq!(spent.spend("n5", v, 1_000, 0), GrantUse::Again);
    // The first ten expire at 1 s: room for ten more, and they are forgotten.
    assert_eq!(spent.spend("one-more", v, 10_000, 1_000), GrantUse::Fresh);
    assert_eq!(spent.by_nonce.len(), MAX_SPENT_GRANTS - 9);
    assert_eq!(
        spent.by_expiry.values().map(Vec::len).sum::<usize>(),
        spent.by_nonce.len()
    );
    assert!(!spent.by_nonce.contains_key("n5"));
    assert_eq!(
        spent.spend("n11", v, 10_000, 10_000),
        GrantUse::Taken,
        "expired"
    );
    assert!(spent.by_nonce.is_empty() && spent.by_expiry.is_empty());
}

/// Spent challenge ids are held to their own bound (fail closed past it) and reaped at
/// their expiry, through the store's own call.
#[tokio::test(start_paused = true)]
async fn spent_challenges_are_bounded_and_reaped() {
    let mut spent = SpentGrants::<IdKey>::default();
    let v = VisitorId::random();
    for i in 0..3 {
        assert_eq!(
            spent.spend_within(&format!("c{i}"), v, 1_000, 0, 3),
            GrantUse::Fresh
        );
    }
    assert_eq!(spent.spend_within("c3", v, 1_000, 0, 3), GrantUse::Taken);
    assert_eq!(
        spent.spend_within("c3", v, 2_000, 1_000, 3),
        GrantUse::Fresh
    );
    assert_eq!(spent.by_nonce.len(), 1, "the expired three were reaped");
    let h = MemoryHarness::new();
    let store = h.store();
    conformance::open_main(&*store, conformance::settings(1.0, 1)).await;
    let now = h.store.clock.now_ms();
    let spend = |id: &'static str, expires_at_ms: u64| {
        let store = store.clone();
        async move {
            store
                .resolve_spending(
                    "main",
                    VisitorId::random(),
                    conformance::anyone(),
                    ChallengeSpend { id, expires_at_ms },
                )
                .await
                .unwrap()
        }
    };
    assert!(matches!(spend("x", now + 1_000).await, Spent::Resolved(_)));
    let held = |h: &MemoryHarness| {
        let room = h.store.room("main").unwrap();
        let room = room.lock().unwrap();
        room.challenges.by_nonce.len()
    };
    assert_eq!(held(&h), 1, "x is spent until its expiry");
    tokio::time::advance(Duration::from_secs(2)).await;
    assert!(matches!(spend("y", now + 10_000).await, Spent::Resolved(_)));
    assert_eq!(held(&h), 1, "x was forgotten at its expiry, y is held");
}

/// The per-client maps hold only clients that hold something (bounded memory).
#[tokio::test(start_paused = true)]
async fn client_counts_are_forgotten_at_zero() {
    let h = MemoryHarness::new();
    conformance::fill_client_counts(h.store.as_ref()).await;
    let sizes = || {
        let room = h.store.room("main").unwrap();
        let room = room.lock().unwrap();
        (room.places.len(), room.session_counts.len())
    };
    assert_eq!(sizes(), (300, 20));
    tokio::time::advance(Duration::from_secs(61)).await;
    h.store.admit_pass("main").await.unwrap();
    assert_eq!(sizes(), (0, 0));
}

/// The snapshot streamed from the live rooms is byte for byte the derived encoding of
/// the owned layout, with both lanes, sessions, a draw and drawn hashes in it.
#[tokio::test(start_paused = true)]
async fn live_snapshot_is_the_derived_layout() {
    let h = MemoryHarness::new();
    let store = h.store.clone();
    let mut seed = conformance::settings(1.0, 2);
    seed.abandon_after = Duration::from_secs(60);
    store
        .open_room("main", &seed, &RoomPolicy::default(), false)
        .await
        .unwrap();
    for _ in 0..2 {
        store
            .resolve("main", VisitorId::random(), conformance::anyone())
            .await
            .unwrap();
    }
    for i in 0..3 * line::CHUNK {
        let join = if i % 7 == 0 { Join::Front } else { Join::Back };
        store
            .resolve_with("main", VisitorId::random(), conformance::anyone(), join)
            .await
            .unwrap();
    }
    {
        let room = store.room("main").unwrap();
        let mut room = room.lock().unwrap();
        let v = VisitorId::random();
        room.draw.insert(
            v,
            Entrant {
                seen_ms: 0,
                client: ClientRef::NONE,
            },
        );
        room.drawn = vec![DrawHash([7; 32]), DrawHash([9; 32])];
    }
    let rooms = store.rooms();
    let live = postcard::to_stdvec(&LiveSnapshot(&rooms)).unwrap();
    let owned = Snapshot {
        rooms: rooms
            .iter()
            .map(|(name, room)| (name.clone(), room.lock().unwrap().snapshot()))
            .collect(),
    };
    assert_eq!(live, postcard::to_stdvec(&owned).unwrap());
}

#[tokio::test(start_paused = true)]
async fn snapshot_file_is_private() {
    let h = MemoryHarness::new();
    h.store.persist().await.unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(h.dir.path().join(SNAPSHOT_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

#[tokio::test(start_paused = true)]
async fn a_snapshot_of_the_first_layout_still_opens() {
    #[derive(Serialize)]
    struct V1 {
        rooms: Vec<(String, V1Room)>,
    }
    #[derive(Serialize)]
    struct V1Room {
        settings: RoomSettings,
        tokens: f64,
        next_ticket: u64,
        line: Vec<(u64, VisitorId)>,
        sessions: Vec<VisitorId>,
        counters: Counters,
    }
    let dir = tempfile::tempdir().unwrap();
    let line = vec![(7, VisitorId::random()), (9, VisitorId::random())];
    let v1 = V1 {
        rooms: vec![(
            "main".to_owned(),
            V1Room {
                settings: conformance::settings(1.0, 10),
                tokens: 0.0,
                next_ticket: 10,
                line: line.clone(),
                sessions: vec![],
                counters: Counters::default(),
            },
        )],
    };
    std::fs::write(
        dir.path().join(SNAPSHOT_FILE),
        postcard::to_stdvec(&v1).unwrap(),
    )
    .unwrap();
    let store = MemoryStore::open(Clock::starting_at(0), dir.path()).unwrap();
    let states = store
        .heartbeat("main", &[line[0].1, line[1].1])
        .await
        .unwrap();
    assert!(matches!(states[1], VisitorState::Waiting(p) if p.position == Some(2)));
    // And it is written back in the current layout.
    store.persist().await.unwrap();
    let bytes = std::fs::read(dir.path().join(SNAPSHOT_FILE)).unwrap();
    assert!(bytes.starts_with(SNAPSHOT_MAGIC));
}

/// The third layout (no operator's changes) keeps the line, the salt and the draw's record.
#[tokio::test(start_paused = true)]
async fn a_snapshot_of_the_third_layout_still_opens() {
    #[derive(Serialize)]
    struct V3 {
        rooms: Vec<(String, V3Room)>,
    }
    #[derive(Serialize)]
    struct V3Room {
        settings: RoomSettings,
        tokens: f64,
        next_ticket: u64,
        line: Vec<(u64, VisitorId)>,
        sessions: Vec<VisitorId>,
        counters: Counters,
        salt: [u8; 16],
        draw: Vec<VisitorId>,
        drawn: Vec<[u8; 32]>,
    }
    let dir = tempfile::tempdir().unwrap();
    let line = vec![(3, VisitorId::random()), (4, VisitorId::random())];
    let v3 = V3 {
        rooms: vec![(
            "main".to_owned(),
            V3Room {
                settings: conformance::settings(1.0, 10),
                tokens: 0.0,
                next_ticket: 5,
                line: line.clone(),
                sessions: vec![],
                counters: Counters::default(),
                salt: [7; 16],
                draw: vec![],
                drawn: vec![[1; 32], [2; 32]],
            },
        )],
    };
    let mut bytes = SNAPSHOT_MAGIC_V3.to_vec();
    bytes.extend(postcard::to_stdvec(&v3).unwrap());
    std::fs::write(dir.path().join(SNAPSHOT_FILE), bytes).unwrap();
    let store = MemoryStore::open(Clock::starting_at(0), dir.path()).unwrap();
    let states = store
        .heartbeat("main", &[line[0].1, line[1].1])
        .await
        .unwrap();
    assert!(matches!(states[1], VisitorState::Waiting(p) if p.position == Some(2)));
    let stats = store.stats("main").await.unwrap();
    assert!(stats.settings.changes.is_empty());
    store.persist().await.unwrap();
    let bytes = std::fs::read(dir.path().join(SNAPSHOT_FILE)).unwrap();
    assert!(bytes.starts_with(SNAPSHOT_MAGIC));
}

#[tokio::test]
async fn a_corrupt_snapshot_is_a_clear_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(SNAPSHOT_FILE), b"\xff\xff\xff garbage").unwrap();
    let err = MemoryStore::open(Clock::system(), dir.path())
        .err()
        .unwrap();
    assert!(err.to_string().contains("unreadable"), "{err}");
}

/// A spent challenge id's key tells every id apart: short ones by their bytes and length,
/// long ones by their hash, never a short one equal to a long one.
#[test]
fn challenge_id_keys_tell_ids_apart() {
    let ids = [
        "",
        "a",
        "a\0",
        "AAAAAAAAAAAAAAAAAAAAAA",
        "AAAAAAAAAAAAAAAAAAAAAB",
        &"x".repeat(31),
        &"x".repeat(32),
        &"x".repeat(33),
        &"y".repeat(200),
    ];
    for (i, a) in ids.iter().enumerate() {
        assert_eq!(IdKey::of(a), IdKey::of(a));
        for b in &ids[i + 1..] {
            assert_ne!(IdKey::of(a), IdKey::of(b), "{a:?} and {b:?}");
        }
    }
}

/// A session restored from the snapshot has no known start: its end adds no length (the
/// snapshot keeps none), while a session started after the restart is timed as ever.
#[tokio::test(start_paused = true)]
async fn a_restored_session_adds_no_length() {
    let mut h = MemoryHarness::new();
    let store = h.store();
    conformance::open_main(&*store, conformance::settings(10.0, 10)).await;
    let client = conformance::anyone();
    let (restored, fresh) = (VisitorId::random(), VisitorId::random());
    store.resolve("main", restored, client).await.unwrap();
    h.advance(Duration::from_secs(5)).await;
    h.reopen(Duration::from_secs(1)).await;
    let store = h.store();
    store.resolve("main", fresh, client).await.unwrap();
    h.advance(Duration::from_secs(2)).await;
    assert!(store.end_session("main", restored).await.unwrap());
    assert!(store.end_session("main", fresh).await.unwrap());
    let ended = store.stats("main").await.unwrap().ended_sessions;
    assert_eq!((ended.count, ended.total_ms), (1, 2_000));
}
