//! The door on Redis with two replicas: any replica verifies any replica's challenge and
//! a replay is refused on the other, the shadow line adds no key, and strikes through one
//! replica raise the door (and shadow) on the other.

use anteroom_fixtures::RedisServer;

use super::*;
use crate::common::{redis_config, start};

/// What `N` replicas on one Redis stand on, kept for the test's length.
struct OnRedis {
    redis: RedisServer,
    _origin: Origin,
    _dir: tempfile::TempDir,
}

/// `N` anteroom replicas sharing one real Redis, with `room`'s settings.
async fn on_redis<const N: usize>(room: &str) -> (OnRedis, [Running; N]) {
    let redis = RedisServer::start();
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = redis_config(&origin.url(), &redis.url(), dir.path(), room);
    let mut replicas = Vec::new();
    for _ in 0..N {
        replicas.push(start(&config).await);
    }
    let Ok(replicas) = replicas.try_into() else {
        unreachable!("N replicas started")
    };
    let on = OnRedis {
        redis,
        _origin: origin,
        _dir: dir,
    };
    (on, replicas)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_any_replica_verifies_and_a_replay_is_refused_on_the_other() {
    let (on, [a, b]) =
        on_redis("    rate: 0.001\n    max_active: 1\n    challenge: {mode: always}\n").await;
    let redis = &on.redis;
    let http = from("127.0.0.1");
    let stats = || async {
        crate::common::redis_store(&redis.url())
            .await
            .stats("main")
            .await
            .unwrap()
    };
    // Issued by A, solved and spent on B; the same answer again on A is a replay.
    let (text, _) = challenged(&http, &a).await;
    let solution = solve(&text);
    assert_eq!(stats().await.active, 0);
    let r = answer(&http, &b, &text, solution).await;
    assert_eq!(r.status(), 200);
    assert_eq!(stats().await.active, 1);
    let id = text.split('.').nth(4).unwrap();
    assert_eq!(
        redis
            .cli(&["EXISTS", &format!("ar:{{main}}:chal:{id}")])
            .trim(),
        "1"
    );
    assert_eq!(
        refused(answer(&http, &a, &text, solution).await, 403).await,
        "replayed"
    );
    assert_eq!(
        refused(answer(&http, &b, &text, solution).await, 403).await,
        "replayed"
    );
    // Another's on the other replica: the second waits (someone is on the site).
    let other = from("127.0.0.2");
    let (text, _) = challenged(&other, &b).await;
    assert_eq!(
        refused(answer(&http, &a, &text, solve(&text)).await, 403).await,
        "wrong_client"
    );
    let r = answer(&other, &a, &text, solve(&text)).await;
    assert_eq!(r.json::<Value>().await.unwrap()["position"], 1);
    assert_eq!(stats().await.waiting, 1);
    // Unsolved newcomers on either replica hold nothing.
    for ar in [&a, &b] {
        challenged(&from("127.0.0.3"), ar).await;
    }
    let s = stats().await;
    assert_eq!((s.active, s.waiting), (1, 1));
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_the_shadow_line_adds_no_key() {
    let (on, [ar]) = on_redis("    rate: 100\n    shadow_after: 5\n").await;
    let redis = &on.redis;
    let struck = from("127.0.0.5");
    struck
        .get(url(&ar, "/"))
        .visitor(&forged_cookie())
        .send()
        .await
        .unwrap();
    // The strike is recorded in Redis in the background; then the line is the shadow's.
    poll_until(
        Duration::from_secs(5),
        "the client is shadowed",
        async || shadowed(&struck, &ar).await.then_some(()),
    )
    .await;
    let keys = || {
        let mut keys: Vec<String> = redis
            .cli(&["KEYS", "ar:{main}:*"])
            .lines()
            .map(str::to_owned)
            .collect();
        keys.sort();
        keys
    };
    let store = crate::common::redis_store(&redis.url()).await;
    let counts = async || {
        let s = store.stats("main").await.unwrap();
        (s.active, s.waiting, s.total_joined, s.total_admitted)
    };
    let before = (keys(), counts().await);
    for _ in 0..10 {
        let r = struck.get(url(&ar, "/")).send().await.unwrap();
        assert_eq!(status_header(&r).as_deref(), Some("waiting"));
    }
    // (The forged cookie's own request came before the strike was recorded and may have
    // been let in; nothing after it is written.)
    assert_eq!((keys(), counts().await), before);
    ar.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_strikes_through_one_replica_raise_the_door_and_shadow_on_the_other() {
    let (_on, [a, b]) =
        on_redis("    rate: 100\n    shadow_after: 10\n    challenge: {mode: always}\n").await;
    let struck = from("127.0.0.7");
    let forge = async || {
        struck
            .get(url(&a, "/"))
            .visitor(&forged_cookie())
            .send()
            .await
            .unwrap();
    };
    let (_, bits) = challenged(&struck, &b).await;
    assert_eq!(bits, anteroom::challenge::DEFAULT_BITS);
    // One forged cookie through A (weight 5): B asks this client for 5 more bits once it
    // has read the shared strikes (every second), without a strike of its own.
    forge().await;
    poll_until(
        Duration::from_secs(5),
        "B raises the client's difficulty",
        async || {
            let (_, bits) = challenged(&struck, &b).await;
            (bits == anteroom::challenge::DEFAULT_BITS + 5).then_some(())
        },
    )
    .await;
    // A second one reaches shadow_after: B parks the client in the shadow line.
    forge().await;
    poll_until(Duration::from_secs(5), "B shadows the client", async || {
        shadowed(&struck, &b).await.then_some(())
    })
    .await;
    // Anyone else is asked the default.
    let (_, bits) = challenged(&from("127.0.0.8"), &b).await;
    assert_eq!(bits, anteroom::challenge::DEFAULT_BITS);
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}
