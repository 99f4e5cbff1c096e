//! The Redis store's tests: the conformance suite on every shape of deployment (one node,
//! a Cluster, each over TLS, and with `EVAL` scripts instead of Functions), then what only
//! Redis has: connections of the serving workers, calls repeated after a broken
//! connection, the Functions library, the first line layout's upgrade, bad data.

use async_trait::async_trait;
use redis::Value;

use super::scripts::LIBRARY;
use super::*;
use crate::fairness::draw::DrawHash;
use crate::queue::conformance::{self, Harness, anyone};
use crate::queue::redis_client::{Repeat, once_more};
use crate::queue::{
    QueueQuery, QueueStore, RefusedReason, Resolution, RoomPolicy, SettingsPatch, VisitorId,
    VisitorState,
};
use crate::tls::CaFile;
use anteroom_fixtures::{RedisCluster, RedisServer, TestCa};
use std::sync::Arc;

mod replicas;

/// A Redis (single node or cluster, plain or TLS) started for one test, and a store on
/// it.
struct RedisHarness {
    store: Arc<RedisStore>,
    urls: Vec<String>,
    /// For TLS: the test CA, as `redis.ca_file` would give it.
    ca: Option<CaFile>,
    /// Every store runs its operations as `EVALSHA` scripts (the fallback without
    /// Functions).
    eval: bool,
    _server: Option<RedisServer>,
    _cluster: Option<RedisCluster>,
    _test_ca: Option<Arc<TestCa>>,
}

impl RedisHarness {
    async fn single() -> Self {
        let server = RedisServer::start();
        Self::on_server(server, None).await
    }

    /// A TLS-only server (`--port 0 --tls-port`) and a `rediss://` store trusting the
    /// test CA through `redis.ca_file`'s path.
    async fn single_tls() -> Self {
        let test_ca = Arc::new(TestCa::new());
        let server = RedisServer::start_tls(test_ca.clone());
        Self::on_server(server, Some(test_ca)).await
    }

    async fn on_server(server: RedisServer, test_ca: Option<Arc<TestCa>>) -> Self {
        let urls = vec![server.url()];
        let ca = test_ca
            .as_ref()
            .map(|t| CaFile::read(&t.ca_path()).unwrap());
        let store = Arc::new(frozen(&urls, ca.as_ref()).await);
        RedisHarness {
            store,
            urls,
            ca,
            eval: false,
            _server: Some(server),
            _cluster: None,
            _test_ca: test_ca,
        }
    }

    async fn cluster() -> Self {
        Self::on_cluster(RedisCluster::start(), None).await
    }

    /// One node, every store running its operations as `EVALSHA` scripts.
    async fn single_eval() -> Self {
        let mut harness = Self::single().await;
        harness.eval = true;
        harness.store.use_eval_for_tests();
        harness
    }

    async fn connect(&self) -> RedisStore {
        let store = connect_ca(&self.urls, self.ca.as_ref()).await;
        if self.eval {
            store.use_eval_for_tests();
        }
        store
    }

    /// Three TLS-only nodes with TLS on the cluster bus (`--tls-cluster yes`).
    async fn cluster_tls() -> Self {
        let test_ca = Arc::new(TestCa::new());
        Self::on_cluster(RedisCluster::start_tls(test_ca.clone()), Some(test_ca)).await
    }

    async fn on_cluster(cluster: RedisCluster, test_ca: Option<Arc<TestCa>>) -> Self {
        let urls = cluster.urls();
        let ca = test_ca
            .as_ref()
            .map(|t| CaFile::read(&t.ca_path()).unwrap());
        let store = Arc::new(frozen(&urls, ca.as_ref()).await);
        RedisHarness {
            store,
            urls,
            ca,
            eval: false,
            _server: None,
            _cluster: Some(cluster),
            _test_ca: test_ca,
        }
    }
}

/// A store whose clock stands still until the test advances it.
async fn frozen(urls: &[String], ca: Option<&CaFile>) -> RedisStore {
    let store = connect_ca(urls, ca).await;
    store.freeze_clock_for_tests(conformance::START_MS);
    store
}

async fn connect(urls: &[String]) -> RedisStore {
    connect_ca(urls, None).await
}

async fn connect_ca(urls: &[String], ca: Option<&CaFile>) -> RedisStore {
    let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
    RedisStore::connect_with(&nodes, ca).await.unwrap()
}

#[async_trait]
impl Harness for RedisHarness {
    type Store = RedisStore;
    fn store(&self) -> Arc<RedisStore> {
        self.store.clone()
    }
    async fn advance(&self, by: Duration) {
        self.store.advance_clock_for_tests(by);
    }
    fn lottery_entrants(&self) -> usize {
        // Two chunks of the doors' move; 100k joins over the network is slow in debug.
        20_000
    }
    async fn replica(&self) -> Option<Arc<RedisStore>> {
        let store = self.connect().await;
        store.freeze_clock_for_tests(self.store.clock_for_tests());
        Some(Arc::new(store))
    }
    async fn reopen(&mut self, downtime: Duration) {
        let at = self.store.clock_for_tests() + crate::clock::ms(downtime);
        let store = self.connect().await;
        store.freeze_clock_for_tests(at);
        self.store = Arc::new(store);
    }
}

mod single {
    use super::*;
    conformance::suite!(unpaused: RedisHarness::single().await);
}

mod cluster {
    use super::*;
    conformance::suite!(unpaused: RedisHarness::cluster().await);
}

/// The whole conformance suite again over `rediss://` to a TLS-only `redis-server`.
mod single_tls {
    use super::*;
    conformance::suite!(unpaused: RedisHarness::single_tls().await);
}

/// And to a three-node Cluster whose nodes and bus speak only TLS.
mod cluster_tls {
    use super::*;
    conformance::suite!(unpaused: RedisHarness::cluster_tls().await);
}

/// The whole suite again with every operation as its own `EVALSHA` script, as where
/// Redis refuses the Functions library.
mod single_eval {
    use super::*;
    conformance::suite!(unpaused: RedisHarness::single_eval().await);
}

/// Runs `body` as a serving worker does: on a thread marked as one, on a runtime of its
/// own, with a store connected to `urls` whose room `main` is open at `rate`.
fn on_a_serving_worker<F: std::future::Future<Output = ()>>(
    urls: &[String],
    rate: f64,
    body: impl FnOnce(RedisStore) -> F + Send,
) {
    std::thread::scope(|scope| {
        scope.spawn(|| {
            crate::worker::serve_here_for_tests();
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let store = connect(urls).await;
                let seed = conformance::settings(rate, 100);
                store
                    .open_room("main", &seed, &RoomPolicy::default(), false)
                    .await
                    .unwrap();
                body(store).await;
            });
        });
    });
}

/// Whether the calling worker's connection of its own is ready (the only one made).
fn has_its_own_connection(store: &RedisStore) -> bool {
    let local = store.local.lock().unwrap();
    matches!(
        local.values().collect::<Vec<_>>()[..],
        [Local::Ready { .. }]
    )
}

/// Polls (with calls that make the worker ask for it) until the worker's own connection
/// is ready, for at most 5 s.
async fn until_it_has_its_own_connection(store: &RedisStore) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !has_its_own_connection(store) {
        assert!(
            std::time::Instant::now() < deadline,
            "no connection of the worker's own"
        );
        store.stats("main").await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A serving worker's calls go through a connection of its own, made in the background
/// on its runtime while the shared one serves.
#[test]
fn a_serving_worker_gets_its_own_connection() {
    let server = RedisServer::start();
    on_a_serving_worker(&[server.url()], 1.0, |store| async move {
        until_it_has_its_own_connection(&store).await;
        let joined = store
            .resolve("main", VisitorId::random(), anyone())
            .await
            .unwrap();
        assert!(
            matches!(joined, Resolution::Admitted { newly: true }),
            "{joined:?}"
        );
        assert_eq!(store.stats("main").await.unwrap().active, 1);
    });
}

/// A loopback proxy in front of a Redis that, when told, passes the next command on
/// but closes the client's connection instead of passing its reply back: the command
/// ran, and the client sees its connection reset, as when Redis or the network fails
/// after the write.
struct ReplyDropper {
    url: String,
    drop_next: Arc<AtomicBool>,
}

impl ReplyDropper {
    async fn start(upstream: u16) -> ReplyDropper {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("redis://{}", listener.local_addr().unwrap());
        let drop_next = Arc::new(AtomicBool::new(false));
        let dropping = drop_next.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let dropping = dropping.clone();
                tokio::spawn(async move {
                    let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                    else {
                        return;
                    };
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    let up = async {
                        let mut buf = vec![0u8; 65536];
                        while let Ok(n @ 1..) = cr.read(&mut buf).await {
                            if sw.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                    };
                    let down = async {
                        let mut buf = vec![0u8; 65536];
                        while let Ok(n @ 1..) = sr.read(&mut buf).await {
                            // A keep-alive's PONG is not the reply meant.
                            if !buf[..n].starts_with(b"+PONG")
                                && dropping.swap(false, Ordering::SeqCst)
                            {
                                break;
                            }
                            if cw.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                    };
                    // Either way ends both: the client's socket is closed whole.
                    tokio::select! {
                        () = up => {}
                        () = down => {}
                    }
                });
            }
        });
        ReplyDropper { url, drop_next }
    }

    /// The next reply from Redis is dropped and its connection closed.
    fn drop_next_reply(&self) {
        self.drop_next.store(true, Ordering::SeqCst);
    }
}

/// Redis SIGKILLed and started again: the first call on the shared connection and the
/// first on a serving worker's own succeed, with no call in between and no wait after
/// Redis answers PING (a broken connection is repeated once, or was already mended by
/// its keep-alive).
#[test]
fn the_first_call_after_redis_restarts_succeeds() {
    let server = std::sync::Mutex::new(RedisServer::start_durable());
    let urls = vec![server.lock().unwrap().url()];
    on_a_serving_worker(&urls, 1_000.0, |store| async move {
        until_it_has_its_own_connection(&store).await;
        for round in 0..3 {
            server.lock().unwrap().kill();
            // The outage seen (or not: round 0 restarts at once).
            if round > 0 {
                assert!(store.stats("main").await.is_err());
            }
            server.lock().unwrap().restart();
            // The worker's own connection, then the shared one (a pass).
            let joined = store.resolve("main", VisitorId::random(), anyone()).await;
            assert!(
                matches!(joined, Ok(Resolution::Admitted { newly: true })),
                "round {round}: {joined:?}"
            );
            assert!(
                has_its_own_connection(&store),
                "round {round}: the worker kept its connection"
            );
        }
        assert_eq!(store.stats("main").await.unwrap().active, 3);
    });
}

/// The same on the shared connection (background loops, and calls off the workers).
#[tokio::test]
async fn the_first_call_on_the_shared_connection_after_a_restart_succeeds() {
    let mut server = RedisServer::start_durable();
    let store = connect(&[server.url()]).await;
    let seed = conformance::settings(1_000.0, 100);
    store
        .open_room("main", &seed, &RoomPolicy::default(), false)
        .await
        .unwrap();
    for round in 0..3 {
        server.kill();
        if round > 0 {
            assert!(store.admit_pass("main").await.is_err());
        }
        server.restart();
        let stats = store.stats("main").await;
        assert!(stats.is_ok(), "round {round}: {stats:?}");
        store.admit_pass("main").await.unwrap();
        store.ping().await.unwrap();
    }
}

/// A call repeated after its connection broke: one that may not be repeated is not
/// run twice (the counter says once, and the caller is told it failed); one that may
/// is run again even though the first ran (why only idempotent calls may).
#[tokio::test]
async fn only_calls_safe_to_repeat_are_repeated_when_the_first_may_have_run() {
    use super::super::redis_client::build;
    let server = RedisServer::start();
    let proxy = ReplyDropper::start(server.port()).await;
    let mut conn = build(&[&proxy.url], None)
        .unwrap()
        .connect(TIMEOUTS)
        .await
        .unwrap();
    let incr = redis::cmd("INCR").arg("n").clone();
    let count = || server.cli(&["GET", "n"]).trim().to_owned();
    proxy.drop_next_reply();
    let once: redis::RedisResult<i64> =
        once_more!(Repeat::IfUnsent, |_again| incr.query_async(&mut conn).await);
    assert!(once.is_err(), "{once:?}");
    assert_eq!(count(), "1", "ran once, not repeated");
    // Reconnected before the next reply is dropped (not the new connection's setup's).
    let _: () = once_more!(Repeat::Safe, |_again| {
        redis::cmd("PING").query_async::<String>(&mut conn).await
    })
    .map(drop)
    .unwrap();
    proxy.drop_next_reply();
    let twice: redis::RedisResult<i64> =
        once_more!(Repeat::Safe, |_again| incr.query_async(&mut conn).await);
    assert_eq!(twice.unwrap(), 3, "repeated on the new connection");
    assert_eq!(count(), "3");
    // With nothing broken, one run.
    let once: redis::RedisResult<i64> =
        once_more!(Repeat::Safe, |_again| incr.query_async(&mut conn).await);
    assert_eq!(once.unwrap(), 4);
}

/// `resolve` is repeated after a reset connection, and a repeat whose first attempt
/// ran admits or places nobody twice and counts no refusal twice (the store's state
/// says so), on a single node and through the `EVALSHA` fallback.
#[tokio::test]
async fn a_repeated_resolve_applies_once() {
    for eval in [false, true] {
        let server = RedisServer::start();
        let proxy = ReplyDropper::start(server.port()).await;
        let store = frozen(std::slice::from_ref(&proxy.url), None).await;
        if eval {
            store.use_eval_for_tests();
        }
        let policy = RoomPolicy {
            join_limit_per_ip: 2,
            join_limit_window: Duration::from_secs(60),
            ..Default::default()
        };
        store
            .open_room("main", &conformance::settings(1.0, 1), &policy, false)
            .await
            .unwrap();
        // Every script loaded first (the `EVALSHA` fallback loads one on its first
        // call): the reply dropped is the script's, not a `NOSCRIPT`.
        store
            .open_room("warm", &conformance::settings(1.0, 1), &policy, false)
            .await
            .unwrap();
        store
            .resolve("warm", VisitorId::random(), anyone())
            .await
            .unwrap();
        store.stats("warm").await.unwrap();
        let stats = || async { store.stats("main").await.unwrap() };
        // Admitted on the spot by the first attempt: the repeat finds them on the site.
        proxy.drop_next_reply();
        let first = VisitorId::random();
        let admitted = store.resolve("main", first, anyone()).await.unwrap();
        assert!(
            matches!(admitted, Resolution::Admitted { .. }),
            "{admitted:?}"
        );
        let s = stats().await;
        assert_eq!((s.active, s.total_admitted, s.waiting), (1, 1, 0));
        // Placed by the first attempt: the repeat finds them in line.
        proxy.drop_next_reply();
        let second = VisitorId::random();
        let placed = store.resolve("main", second, anyone()).await.unwrap();
        assert!(
            matches!(placed, Resolution::Waiting { ref place, .. } if place.position == Some(1)),
            "{placed:?}"
        );
        let s = stats().await;
        assert_eq!((s.waiting, s.total_joined), (1, 1));
        // Refused by the join limit (the third join of this client): counted once.
        proxy.drop_next_reply();
        let refused = store
            .resolve("main", VisitorId::random(), anyone())
            .await
            .unwrap();
        assert!(
            matches!(
                refused,
                Resolution::Refused {
                    reason: RefusedReason::JoinLimit,
                    ..
                }
            ),
            "{refused:?}"
        );
        assert_eq!(stats().await.total_refused, 1);
        let key = format!("ar:{{main}}:joins:{}", anyone());
        assert_eq!(server.cli(&["HGET", &key, "n"]).trim(), "3");
        assert_eq!(stats().await.waiting, 1);
    }
}

/// On Redis 7 the operations run as the Functions library, not the fallback; a library
/// gone from the server (FUNCTION FLUSH, a restart without persistence) is loaded again
/// by the next call, on a single node and on every node of a Cluster.
#[tokio::test]
async fn operations_run_as_functions_and_a_lost_library_is_reloaded() {
    for harness in [RedisHarness::single().await, RedisHarness::cluster().await] {
        let store = harness.store();
        let seed = conformance::settings(1.0, 100);
        for room in ["a", "b", "c", "d"] {
            store
                .open_room(room, &seed, &RoomPolicy::default(), false)
                .await
                .unwrap();
        }
        assert!(
            !store.eval_only(),
            "Functions refused on {:?}",
            harness.urls
        );
        let mut conn = store.conn.clone();
        let libraries: Value = redis::cmd("FUNCTION")
            .arg("LIST")
            .query_async(&mut conn)
            .await
            .unwrap();
        let listed = format!("{libraries:?}");
        let name = LIBRARY.prefix.trim_end_matches('_');
        assert!(listed.contains(name), "{name} not in {listed}");
        let () = redis::cmd("FUNCTION")
            .arg("FLUSH")
            .query_async(&mut conn)
            .await
            .unwrap();
        for room in ["a", "b", "c", "d"] {
            let joined = store
                .resolve(room, VisitorId::random(), anyone())
                .await
                .unwrap();
            assert!(
                matches!(joined, Resolution::Admitted { newly: true }),
                "{joined:?}"
            );
            assert_eq!(store.stats(room).await.unwrap().active, 1);
        }
        assert!(!store.eval_only());
    }
}

/// The per-client maps hold only clients that hold something: once every place and
/// session is gone, passes leave nothing behind (bounded memory whatever the number of
/// distinct clients that ever came).
#[tokio::test]
async fn client_counts_are_forgotten_at_zero() {
    let server = RedisServer::start();
    let store = frozen(&[server.url()], None).await;
    conformance::fill_client_counts(&store).await;
    let hlen = |key: &str| -> u64 {
        server
            .cli(&["HLEN", &format!("ar:{{main}}:{key}")])
            .trim()
            .parse()
            .unwrap()
    };
    assert_eq!(
        (hlen("places"), hlen("sess"), hlen("scount")),
        (300, 20, 20)
    );
    store.advance_clock_for_tests(Duration::from_secs(61));
    for _ in 0..10 {
        store.admit_pass("main").await.unwrap();
    }
    let stats = store.stats("main").await.unwrap();
    assert_eq!((stats.waiting, stats.active), (0, 0));
    assert_eq!((hlen("places"), hlen("sess"), hlen("scount")), (0, 0, 0));
}

/// A server whose certificate the client does not trust is unavailable (a clear
/// certificate error, quickly), never a hang and never a silent plain-text fallback.
/// Equal 52-bit lottery scores are ordered by the whole draw hash (the published
/// rule), not by id. A tie is far too rare to meet by chance, so the test makes some.
#[tokio::test]
async fn equal_lottery_scores_follow_the_whole_draw_hash() {
    let server = RedisServer::start();
    let store = frozen(&[server.url()], None).await;
    let at = |secs: u64| {
        std::time::UNIX_EPOCH + Duration::from_millis(conformance::START_MS + secs * 1_000)
    };
    let policy = RoomPolicy {
        lottery: true,
        schedule: crate::queue::Schedule {
            queue_opens_at: Some(at(0)),
            admits_at: Some(at(60)),
            closes_at: None,
        },
        ..Default::default()
    };
    store
        .open_room(
            "main",
            &conformance::settings(1_000.0, 1_000),
            &policy,
            false,
        )
        .await
        .unwrap();
    let entrants: Vec<VisitorId> = (0..12).map(|_| VisitorId::random()).collect();
    for &v in &entrants {
        store.resolve("main", v, anyone()).await.unwrap();
    }
    let mut conn = store.conn.clone();
    for (i, v) in entrants.iter().enumerate() {
        let score = if i < 3 { 3 } else { 7 };
        let changed: i64 = redis::cmd("ZADD")
            .arg("ar:{main}:draw")
            .arg("XX")
            .arg("CH")
            .arg(score)
            .arg(&v.0[..])
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(changed, 1);
    }
    store.advance_clock_for_tests(Duration::from_secs(61));
    let salt = store.draw("main", false).await.unwrap().salt;
    let mut admitted = Vec::new();
    for _ in 0..3 {
        store.advance_clock_for_tests(Duration::from_secs(1));
        admitted.extend(store.admit_pass("main").await.unwrap().admitted);
    }
    let by_hash = |vs: &[VisitorId]| {
        let mut v: Vec<(DrawHash, VisitorId)> =
            vs.iter().map(|&v| (DrawHash::of(&salt, v), v)).collect();
        v.sort_unstable();
        v.into_iter().map(|(_, v)| v).collect::<Vec<_>>()
    };
    let mut want = by_hash(&entrants[..3]);
    want.extend(by_hash(&entrants[3..]));
    assert_eq!(admitted, want);
}

#[tokio::test]
async fn rediss_with_an_untrusted_ca_fails_clearly() {
    let server_ca = Arc::new(TestCa::new());
    let server = RedisServer::start_tls(server_ca);
    let other = TestCa::new();
    let other = CaFile::read(&other.ca_path()).unwrap();
    let started = std::time::Instant::now();
    let url = server.url().replace("rediss://", "rediss://:secret@");
    let err = RedisStore::connect_with(&[&url], Some(&other))
        .await
        .err()
        .expect("an untrusted certificate is refused");
    let text = err.to_string();
    assert!(matches!(err, StoreError::Unavailable(_)), "{text}");
    assert!(text.to_lowercase().contains("certificate"), "{text}");
    assert!(!text.contains("secret"), "the password is masked: {text}");
    assert!(started.elapsed() < Duration::from_secs(10), "fails fast");
    // Without the CA file, the platform store does not know the test CA either.
    assert!(RedisStore::connect(&[&server.url()]).await.is_err());
}

/// `rediss://` to a node that only speaks plain Redis is an error, not a hang.
#[tokio::test]
async fn rediss_to_a_plain_server_fails_fast() {
    let server = RedisServer::start();
    let url = server.url().replace("redis://", "rediss://");
    let started = std::time::Instant::now();
    assert!(RedisStore::connect(&[&url]).await.is_err());
    assert!(started.elapsed() < Duration::from_secs(10), "fails fast");
}

#[tokio::test]
async fn a_dead_redis_is_unavailable_quickly() {
    let server = RedisServer::start();
    let store = connect(&[server.url()]).await;
    conformance::open_main(&store, conformance::settings(1.0, 1)).await;
    drop(server);
    let started = std::time::Instant::now();
    let err = store
        .resolve("main", VisitorId::random(), anyone())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5), "failed fast");
    assert!(matches!(
        store.ping().await,
        Err(StoreError::Unavailable(_))
    ));
}

/// A room left by a version that kept the line in `line` (id → ticket) and `seen` (id →
/// last heartbeat) is moved into the chunked layout by the next `open_room`, in order.
#[tokio::test]
async fn the_first_layout_is_upgraded_on_open() {
    let server = RedisServer::start();
    let store = frozen(&[server.url()], None).await;
    let seed = conformance::settings(1.0, 100);
    let policy = RoomPolicy::default();
    store
        .open_room("main", &seed, &policy, false)
        .await
        .unwrap();
    store
        .update_settings(
            "main",
            &SettingsPatch {
                paused: Some(true),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let line: Vec<VisitorId> = (0..300).map(|_| VisitorId::random()).collect();
    let mut conn = store.conn.clone();
    for (i, v) in line.iter().enumerate() {
        // Old tickets: a priority join (negative) first, then join time ms × 1024.
        let ticket = if i == 0 {
            -((conformance::START_MS as i64) * 1024)
        } else {
            (conformance::START_MS as i64 + i as i64) * 1024
        };
        let _: () = redis::pipe()
            .cmd("ZADD")
            .arg("ar:{main}:line")
            .arg(ticket)
            .arg(&v.0[..])
            .cmd("ZADD")
            .arg("ar:{main}:seen")
            .arg(conformance::START_MS)
            .arg(&v.0[..])
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    store
        .open_room("main", &seed, &policy, false)
        .await
        .unwrap();
    assert_eq!(server.cli(&["EXISTS", "ar:{main}:line"]).trim(), "0");
    assert_eq!(server.cli(&["EXISTS", "ar:{main}:seen"]).trim(), "0");
    let states = store.heartbeat("main", &line).await.unwrap();
    for (i, state) in states.iter().enumerate() {
        assert!(
            matches!(state, VisitorState::Waiting(p) if p.position == Some(i as u64 + 1)),
            "visitor {i}: {state:?}"
        );
    }
    assert_eq!(store.stats("main").await.unwrap().waiting, 300);
    let head = store
        .queue("main", QueueQuery::Head { limit: 2 })
        .await
        .unwrap();
    assert_eq!(head[1].joined_at_ms, Some(conformance::START_MS + 1));
    let late = VisitorId::random();
    match store.resolve("main", late, anyone()).await.unwrap() {
        Resolution::Waiting { place, .. } => assert_eq!(place.position, Some(301)),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn bad_data_is_an_error_not_a_panic() {
    let server = RedisServer::start();
    let store = connect(&[server.url()]).await;
    conformance::open_main(&store, conformance::settings(1.0, 1)).await;
    server.cli(&["HSET", "ar:{main}:conf", "max_active", "lots"]);
    assert!(matches!(
        store.stats("main").await,
        Err(StoreError::Unavailable(_))
    ));
    // A member that is not a 16-byte id at the head of the line (chunk 0, slot 1).
    server.cli(&["ZADD", "ar:{main}:c:0", "4294967296", "short"]);
    server.cli(&["ZADD", "ar:{main}:chunks", "0", "0"]);
    server.cli(&["HSET", "ar:{main}:state", "n", "1", "ord", "1"]);
    server.cli(&["HSET", "ar:{main}:conf", "max_active", "10"]);
    let err = store.admit_pass("main").await.unwrap_err();
    assert!(err.to_string().contains("16"), "{err}");
}
