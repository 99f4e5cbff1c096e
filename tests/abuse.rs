//! End to end: the abuse registry (SPEC §10) in front of a real origin that counts
//! requests, with real clients on distinct loopback addresses (127.0.0.x, a real source
//! address per client), a real redis-server for the replica test, and real restarts.

mod common;

use std::net::IpAddr;
use std::time::{Duration, Instant, SystemTime};

use anteroom::config::{Config, from_yaml_str};
use anteroom::queue::{MemoryStore, VisitorId};
use anteroom::run::{self, Running};
use anteroom::testing::RedisServer;
use anteroom::token::CookieKeys;
use common::*;
use tokio::net::TcpListener;

const ABUSE: &str = "abuse:\n  strikes: 20\n  window: 1m\n  cooldown: 10m\n  allow: [127.0.0.9]\n  ban_paths: [/.env, '/.git/**']\n";

fn abuse_config(origin: &str, dir: &std::path::Path, redis: Option<&str>, room: &str) -> Config {
    let redis = redis.map_or(String::new(), |u| format!("redis:\n  url: \"{u}\"\n"));
    let yaml = format!(
        "listen: \"127.0.0.1:0\"\nadmit_interval: 100ms\ncookie_secret: \"{COOKIE_SECRET}\"\n\
         admin_token: \"{ADMIN_TOKEN}\"\ndata_dir: \"{}\"\n{redis}{ABUSE}rooms:\n  main:\n    origin: {origin}\n{room}",
        dir.display()
    );
    from_yaml_str(&yaml, "test.yaml").unwrap_or_else(|e| panic!("{e}\n{yaml}"))
}

/// A client whose connections come from `ip` (a loopback address of its own).
fn from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(ip.parse::<IpAddr>().unwrap())
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

fn url(ar: &Running, path: &str) -> String {
    format!("http://{}{path}", ar.addr)
}

fn admin(ar: &Running, path: &str) -> String {
    url(ar, &format!("/__anteroom/admin/api/{path}"))
}

/// A cookie signed under a key this anteroom does not know: a forgery (UnknownKey).
fn forged_cookie() -> String {
    let none: [&[u8]; 0] = [];
    let keys = CookieKeys::new(&[7u8; 32], &none);
    keys.issue(VisitorId::random(), "main", SystemTime::now())
}

/// Polls `url` from `client` until it answers `status`, for at most `within`.
async fn until_status(
    client: &reqwest::Client,
    url: &str,
    status: u16,
    within: Duration,
) -> reqwest::Response {
    let deadline = Instant::now() + within;
    loop {
        let r = client.get(url).send().await.unwrap();
        if r.status() == status || Instant::now() > deadline {
            assert_eq!(
                r.status(),
                status,
                "{url} did not answer {status} within {within:?}"
            );
            return r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn bot_storm_ban_paths_wrong_tokens_admin_bans_and_allow() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ar = common::start(&abuse_config(&origin.url(), dir.path(), None, "")).await;

    // A real visitor is served.
    let real = from("127.0.0.3");
    assert_eq!(real.get(url(&ar, "/")).send().await.unwrap().status(), 200);

    // The bot storm: forged cookies (weight 5) from one address; 4 reach 20 strikes.
    let bot = from("127.0.0.2");
    for _ in 0..4 {
        bot.get(url(&ar, "/"))
            .visitor(&forged_cookie())
            .send()
            .await
            .unwrap();
    }
    let banned = until_status(&bot, &url(&ar, "/"), 429, Duration::from_secs(2)).await;
    assert_eq!(status_header(&banned).as_deref(), Some("banned"));
    let retry: u64 = banned.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((590..=600).contains(&retry), "{retry}");
    let hits = origin.hits();
    for _ in 0..20 {
        let r = bot
            .get(url(&ar, "/shop"))
            .visitor(&forged_cookie())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 429);
    }
    // JSON by Accept; the reserved routes (admin API included) are refused too.
    let json: serde_json::Value = bot
        .get(url(&ar, "/"))
        .header("accept", "application/json")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(json["status"], "banned");
    assert!(json["retry_after_secs"].as_u64().unwrap() > 500);
    let r = bot
        .get(admin(&ar, "status"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    let page = bot
        .get(url(&ar, "/"))
        .header("accept-language", "de")
        .send()
        .await
        .unwrap();
    assert!(page.text().await.unwrap().contains("Zugriff pausiert"));
    assert_eq!(
        origin.hits(),
        hits,
        "a banned client never reaches the origin"
    );
    // …while the real visitor still is served.
    assert_eq!(real.get(url(&ar, "/")).send().await.unwrap().status(), 200);
    assert_eq!(origin.hits(), hits + 1);

    // A ban path bans on the first request, dot segments and %2e included.
    let scanner = from("127.0.0.4");
    let hits = origin.hits();
    let r = scanner.get(url(&ar, "/%2eenv")).send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(
        scanner.get(url(&ar, "/")).send().await.unwrap().status(),
        429
    );
    let other = from("127.0.0.10");
    assert_eq!(
        other
            .get(url(&ar, "/a/../.git/config"))
            .send()
            .await
            .unwrap()
            .status(),
        429
    );
    assert_eq!(origin.hits(), hits);

    // abuse.allow is never banned: a ban path is a 404 without the origin, then served.
    let office = from("127.0.0.9");
    assert_eq!(
        office.get(url(&ar, "/.env")).send().await.unwrap().status(),
        404
    );
    assert_eq!(origin.hits(), hits);
    for _ in 0..6 {
        office
            .get(admin(&ar, "status"))
            .bearer_auth("wrong-token-wrong-token")
            .send()
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        office.get(url(&ar, "/")).send().await.unwrap().status(),
        200
    );

    // A wrong admin token strikes: banned after 4 tries.
    let brute = from("127.0.0.5");
    for _ in 0..4 {
        let r = brute
            .get(admin(&ar, "status"))
            .bearer_auth("not-the-admin-token-x")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
    }
    until_status(&brute, &admin(&ar, "status"), 429, Duration::from_secs(2)).await;

    // Admin bans: a /24 applies to its addresses; /7 is too broad; unknown unban is 404.
    let r = real
        .post(admin(&ar, "bans"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&serde_json::json!({"target": "127.0.1.0/24", "duration_secs": 600, "reason": "bot farm"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let in_range = from("127.0.1.7");
    assert_eq!(
        in_range.get(url(&ar, "/")).send().await.unwrap().status(),
        429
    );
    let r = real
        .post(admin(&ar, "bans"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&serde_json::json!({"target": "10.0.0.0/7", "duration_secs": null, "reason": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    let problem: serde_json::Value = r.json().await.unwrap();
    assert_eq!(problem["field"], "target");
    let r = real
        .delete(admin(&ar, "bans/10.9.9.9"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let list: serde_json::Value = real
        .get(admin(&ar, "bans?limit=2"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        list["bans"][0]["target"], "127.0.1.0/24",
        "newest first: {list}"
    );
    assert_eq!(list["bans"].as_array().unwrap().len(), 2);
    assert!(list["next_cursor"].is_u64(), "{list}");
    let r = real
        .delete(admin(&ar, "bans/127.0.1.0%2F24"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        in_range.get(url(&ar, "/")).send().await.unwrap().status(),
        200
    );
    let log: serde_json::Value = real
        .get(admin(&ar, "bans/log"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(log["log"][0]["action"], "unbanned", "{log}");

    // Metrics.
    let metrics = real
        .get(admin(&ar, "metrics"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("anteroom_bans_active 4"), "{metrics}");
    assert!(
        metrics.contains("anteroom_strikes_total{reason=\"bad_cookie\"} 4"),
        "{metrics}"
    );
    assert!(
        metrics.contains("anteroom_strikes_total{reason=\"bad_admin_token\"} 4"),
        "{metrics}"
    );
    assert!(
        metrics.contains("anteroom_banned_requests_total"),
        "{metrics}"
    );
    // The audit log has the automatic bans and the admin's.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let audit = std::fs::read_to_string(dir.path().join("audit.log")).unwrap_or_default();
    assert!(
        audit.contains("\"banned\"") && audit.contains("\"unban\""),
        "{audit}"
    );
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn embedded_bans_survive_a_restart() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = abuse_config(&origin.url(), dir.path(), None, "");
    let ar = common::start(&config).await;
    let r = from("127.0.0.3")
        .post(admin(&ar, "bans"))
        .bearer_auth(ADMIN_TOKEN)
        .json(
            &serde_json::json!({"target": "127.0.2.2", "duration_secs": null, "reason": "forever"}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(
        from("127.0.2.2")
            .get(url(&ar, "/"))
            .send()
            .await
            .unwrap()
            .status(),
        403
    );
    ar.shutdown().await.unwrap();
    let ar = common::start(&config).await;
    let r = from("127.0.2.2").get(url(&ar, "/")).send().await.unwrap();
    assert_eq!(
        r.status(),
        403,
        "a permanent ban is 403 and survives the restart"
    );
    assert_eq!(status_header(&r).as_deref(), Some("banned"));
    assert!(r.headers().get("retry-after").is_none());
    assert_eq!(origin.hits(), 0);
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn redis_replicas_share_bans_within_two_seconds() {
    let redis = RedisServer::start();
    let origin = Origin::start().await;
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let start = |dir: std::path::PathBuf| {
        let config = abuse_config(&origin.url(), &dir, Some(&redis.url()), "");
        async move {
            let store = run::open_store(&config).await.unwrap();
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            run::start(&config, store, listener, false).await.unwrap()
        }
    };
    let a = start(da.path().to_owned()).await;
    let b = start(db.path().to_owned()).await;
    // An admin ban of a /24 through A answers 429 on B within 2 s.
    let r = from("127.0.0.3")
        .post(admin(&a, "bans"))
        .bearer_auth(ADMIN_TOKEN)
        .json(
            &serde_json::json!({"target": "127.0.3.0/24", "duration_secs": 300, "reason": "farm"}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    until_status(
        &from("127.0.3.3"),
        &url(&b, "/"),
        429,
        Duration::from_secs(2),
    )
    .await;
    // A ban earned on A (4 forged cookies) applies on B within 2 s.
    let bot = from("127.0.0.2");
    for _ in 0..4 {
        bot.get(url(&a, "/"))
            .visitor(&forged_cookie())
            .send()
            .await
            .unwrap();
    }
    until_status(&bot, &url(&b, "/"), 429, Duration::from_secs(2)).await;
    let hits = origin.hits();
    assert_eq!(bot.get(url(&a, "/")).send().await.unwrap().status(), 429);
    assert_eq!(origin.hits(), hits);
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_banned_clients_waiting_visitor_loses_its_place_within_abandon_after() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = abuse_config(
        &origin.url(),
        dir.path(),
        None,
        "    rate: 100\n    max_active: 1\n    abandon_after: 10s\n",
    );
    let clock = anteroom::clock::Clock::system();
    let store = std::sync::Arc::new(MemoryStore::in_memory(clock.clone()));
    let ar = start_with_store(&config, store.clone()).await;
    // One visitor holds the only slot; the banned client's visitor waits behind it.
    let first = from("127.0.0.3");
    assert_eq!(first.get(url(&ar, "/")).send().await.unwrap().status(), 200);
    let waiter = from("127.0.4.4");
    let r = waiter
        .get(url(&ar, "/"))
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(status_header(&r).as_deref(), Some("waiting"));
    use anteroom::queue::QueueStore;
    assert_eq!(store.stats("main").await.unwrap().waiting, 1);
    let r = first
        .post(admin(&ar, "bans"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&serde_json::json!({"target": "127.0.4.4", "duration_secs": 600, "reason": "bot"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    // Its polls are refused now, so no heartbeat: past abandon_after (store clock) it is gone.
    assert_eq!(
        waiter.get(url(&ar, "/")).send().await.unwrap().status(),
        429
    );
    clock.advance_for_tests(Duration::from_secs(11));
    let deadline = Instant::now() + Duration::from_secs(3);
    while store.stats("main").await.unwrap().waiting > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(store.stats("main").await.unwrap().waiting, 0);
    ar.shutdown().await.unwrap();
}
