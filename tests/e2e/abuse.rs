//! End to end: the abuse registry in front of a real origin that counts
//! requests, with real clients on distinct loopback addresses (127.0.0.x, a real source
//! address per client), a real redis-server for the replica test, and real restarts.

use crate::common;

use std::time::{Duration, Instant, SystemTime};

use anteroom::config::{Config, from_yaml_str};
use anteroom::queue::{MemoryStore, VisitorId};
use anteroom::run::{self, Running};
use anteroom::token::CookieKeys;
use anteroom_fixtures::RedisServer;
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

fn url(ar: &Running, path: &str) -> String {
    format!("http://{}{path}", ar.addr)
}

fn admin(ar: &Running, path: &str) -> String {
    url(ar, &format!("/__anteroom/admin/api/{path}"))
}

/// `GET` an admin API path with the admin token, as JSON.
async fn admin_json(client: &reqwest::Client, ar: &Running, path: &str) -> serde_json::Value {
    common::admin_get(client, ar.addr, path).await
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
    // Repeated slashes and another case find the same file on many servers: banned too.
    for (n, probe) in ["//.env", "/.ENV", "//.Git/HEAD"].into_iter().enumerate() {
        let prober = from(&format!("127.0.0.{}", 50 + n));
        let r = prober.get(url(&ar, probe)).send().await.unwrap();
        assert_eq!(r.status(), 429, "{probe}");
    }
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
    let list = admin_json(&real, &ar, "bans?limit=2").await;
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
    let log = admin_json(&real, &ar, "bans/log").await;
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
    assert!(metrics.contains("anteroom_bans_active 7"), "{metrics}");
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
    // The ban log has the automatic bans; the audit log the operator's acts only, so a
    // flood of automatic bans cannot rotate those away.
    let sources: Vec<String> = log["log"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["source"].as_str().unwrap_or("").to_owned())
        .collect();
    assert!(sources.iter().any(|s| s == "automatic"), "{log}");
    let audit = std::fs::read_to_string(dir.path().join("audit.log")).unwrap_or_default();
    assert!(
        audit.contains("\"ban\"") && audit.contains("\"unban\""),
        "{audit}"
    );
    assert!(!audit.contains("automatic"), "{audit}");
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

// ---- strikes only from the client's own acts ----

/// A config with the abuse section above, `trusted_proxies` and extra top-level keys.
fn config_with_top(origin: &str, dir: &std::path::Path, top: &str) -> Config {
    let yaml = format!(
        "listen: \"127.0.0.1:0\"\nadmit_interval: 100ms\ncookie_secret: \"{COOKIE_SECRET}\"\n\
         admin_token: \"{ADMIN_TOKEN}\"\ndata_dir: \"{}\"\n{top}{ABUSE}rooms:\n  main:\n    origin: {origin}\n",
        dir.display()
    );
    from_yaml_str(&yaml, "test.yaml").unwrap_or_else(|e| panic!("{e}\n{yaml}"))
}

async fn admin_ban(ar: &Running, target: &str) -> reqwest::StatusCode {
    client()
        .post(admin(ar, "bans"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&serde_json::json!({"target": target, "duration_secs": 600, "reason": "test"}))
        .send()
        .await
        .unwrap()
        .status()
}

#[tokio::test]
async fn behind_nginx_an_unreadable_forwarded_for_is_400_never_the_proxy() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = config_with_top(
        &origin.url(),
        dir.path(),
        "trusted_proxies: [127.0.0.1/32]\nadmin_allow: [127.0.0.1/32]\n",
    );
    let ar = common::start(&config).await;
    let nginx = Nginx::start(ar.addr).await;
    let front = format!("http://{}", nginx.addr);
    assert_eq!(admin_ban(&ar, "127.0.0.5").await, 201);
    let banned = from("127.0.0.5");
    let r = banned.get(format!("{front}/")).send().await.unwrap();
    assert_eq!(r.status(), 429, "the ban holds through nginx");
    let hits = origin.hits();
    // One byte that is not ASCII used to make the request the proxy's, and the proxy is
    // never banned. nginx appends the real address to the client's value.
    for bad in [&b"\xff"[..], "é".as_bytes(), b"1.2.3.4\x80", b"unknown"] {
        let r = banned
            .get(format!("{front}/"))
            .header(
                "x-forwarded-for",
                reqwest::header::HeaderValue::from_bytes(bad).unwrap(),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{bad:?}");
        // Not the admin either, which admin_allow lets the proxy reach.
        let r = banned
            .get(format!("{front}/__anteroom/admin/api/status"))
            .bearer_auth(ADMIN_TOKEN)
            .header(
                "x-forwarded-for",
                reqwest::header::HeaderValue::from_bytes(bad).unwrap(),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{bad:?}");
    }
    assert_eq!(origin.hits(), hits, "nothing reached the origin");
    // A readable forged entry is only the client's own claim, left of its real address.
    let r = banned
        .get(format!("{front}/"))
        .header("x-forwarded-for", "203.0.113.50")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    // Someone else through the same nginx is served.
    let other = from("127.0.0.6");
    assert_eq!(
        other
            .get(format!("{front}/"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
}

/// A browser's request made by another site's page (what Chromium sends for an `<img>`,
/// a `<script>` or an `<iframe>` there).
fn cross_site(req: reqwest::RequestBuilder, dest: &str) -> reqwest::RequestBuilder {
    req.header("sec-fetch-site", "cross-site")
        .header("sec-fetch-mode", "no-cors")
        .header("sec-fetch-dest", dest)
}

#[tokio::test]
async fn another_sites_page_cannot_get_a_visitor_banned() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ar = common::start(&abuse_config(&origin.url(), dir.path(), None, "")).await;
    // The shop's visitor is on the site.
    let visitor = from("127.0.0.21");
    let first = visitor.get(url(&ar, "/")).send().await.unwrap();
    assert_eq!(first.status(), 200);
    let cookie = visitor_cookie(&first).unwrap();
    // The hostile page: a ban path, forged cookies, and a flood of cookie-less images
    // (a cross-site image carries no SameSite=Lax cookie).
    for dest in ["image", "script", "iframe"] {
        let r = cross_site(visitor.get(url(&ar, "/.env")), dest)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{dest}");
        for _ in 0..5 {
            cross_site(visitor.get(url(&ar, "/")), dest)
                .visitor(&forged_cookie())
                .send()
                .await
                .unwrap();
        }
    }
    for _ in 0..200 {
        let r = cross_site(visitor.get(url(&ar, "/pic.png")), "image")
            .send()
            .await
            .unwrap();
        assert!(r.status() != 429, "{}", r.status());
        assert!(
            visitor_cookie(&r).is_none(),
            "an embed never joins the line"
        );
    }
    // Nobody was banned and the visitor keeps browsing.
    let bans = admin_json(&client(), &ar, "bans").await;
    assert!(
        !bans.to_string().contains("127.0.0.21"),
        "nobody was banned: {bans}"
    );
    let r = visitor
        .get(url(&ar, "/cart"))
        .visitor(&cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // The visitor's own request for a ban path still bans.
    let r = visitor
        .get(url(&ar, "/.env"))
        .header("sec-fetch-site", "same-origin")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
}

/// `Sec-Fetch-Site` is a browser's promise, and a script can send it to any path: a
/// request claiming to be another site's embed is answered like an asset. It never joins
/// the line or earns a strike, and while a line exists it never reaches the origin without
/// a session; a visitor on the site still gets what another site's page embeds.
#[tokio::test]
async fn a_claimed_cross_site_embed_joins_nobody_and_passes_no_line() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    // One visitor in (the fast path), then nobody for 100 s.
    let room = "    rate: 0.01\n    max_active: 1000\n";
    let ar = common::start(&abuse_config(&origin.url(), dir.path(), None, room)).await;
    let visitor = from("127.0.0.41");
    let first = visitor.get(url(&ar, "/")).send().await.unwrap();
    assert_eq!(first.status(), 200);
    let cookie = visitor_cookie(&first).unwrap();
    let waiting = from("127.0.0.42").get(url(&ar, "/")).send().await.unwrap();
    assert_eq!(status_header(&waiting).as_deref(), Some("waiting"));
    // The line is in the room's statistics (read every second).
    let anyone = from("127.0.0.44");
    poll_until(Duration::from_secs(5), "the line seen", async || {
        let r = cross_site(anyone.get(url(&ar, "/pic.png")), "image")
            .send()
            .await
            .unwrap();
        (r.status() == 503).then_some(())
    })
    .await;
    let hits = origin.hits();
    let bot = from("127.0.0.43");
    for path in ["/checkout", "/", "/api/cart"] {
        for dest in ["empty", "image", "iframe"] {
            let r = cross_site(bot.post(url(&ar, path)), dest)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 503, "{path} as {dest}");
            assert!(
                visitor_cookie(&r).is_none(),
                "an embed never joins the line"
            );
        }
    }
    assert_eq!(origin.hits(), hits, "no claimed embed passed the line");
    let bans = admin_json(&client(), &ar, "bans").await;
    assert!(!bans.to_string().contains("127.0.0.43"), "{bans}");
    // The visitor on the site gets another site's embeds when their cookie comes along.
    let r = cross_site(visitor.get(url(&ar, "/pic.png")), "image")
        .visitor(&cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(origin.hits(), hits + 1);
}

#[tokio::test]
async fn bans_hold_on_every_listener_and_probes_answer_everyone() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = config_with_top(&origin.url(), dir.path(), "admin_listen: \"127.0.0.1:0\"\n");
    let ar = common::start(&config).await;
    let admin_addr = ar.admin_addr.unwrap();
    let status = |c: &reqwest::Client, u: String| {
        let c = c.clone();
        async move {
            c.get(u)
                .bearer_auth(ADMIN_TOKEN)
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    let banned = from("127.0.0.31");
    let on_admin = |p: &str| format!("http://{admin_addr}{p}");
    assert_eq!(
        status(&banned, on_admin("/__anteroom/admin/api/status")).await,
        200
    );
    let ban = client()
        .post(format!("http://{admin_addr}/__anteroom/admin/api/bans"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&serde_json::json!({"target": "127.0.0.31", "duration_secs": 600}))
        .send()
        .await
        .unwrap();
    assert_eq!(ban.status(), 201);
    assert_eq!(status(&banned, url(&ar, "/")).await, 429);
    // The admin listener refuses the banned client too, right token or wrong.
    assert_eq!(
        status(&banned, on_admin("/__anteroom/admin/api/status")).await,
        429
    );
    assert_eq!(status(&banned, on_admin("/metrics")).await, 429);
    // Probes report the process, not the prober's reputation.
    for probe in ["/__anteroom/healthz", "/__anteroom/readyz"] {
        assert_eq!(status(&banned, url(&ar, probe)).await, 200, "{probe}");
        assert_eq!(status(&banned, on_admin(probe)).await, 200, "{probe}");
    }
    // An IPv6 range covering the IPv4-mapped block is judged as all of IPv4: too broad.
    for broad in ["::/16", "::ffff:0:0/96", "::/64"] {
        let r = client()
            .post(format!("http://{admin_addr}/__anteroom/admin/api/bans"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&serde_json::json!({"target": broad}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 422, "{broad}");
    }
    assert_eq!(status(&from("127.0.0.32"), url(&ar, "/")).await, 200);
}

#[tokio::test]
async fn concurrent_wrong_tokens_are_checked_at_most_strikes_over_weight_times() {
    use http_body_util::Empty;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ar = common::start(&abuse_config(&origin.url(), dir.path(), None, "")).await;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.41:0".parse().unwrap()).unwrap();
    let stream = socket.connect(ar.addr).await.unwrap();
    let (h2, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let attempts = (0..200).map(|i| {
        let mut h2 = h2.clone();
        let addr = ar.addr;
        async move {
            let req = http::Request::get(format!("http://{addr}/__anteroom/admin/api/status"))
                .header("authorization", format!("Bearer wrong-{i}"))
                .body(Empty::<bytes::Bytes>::new())
                .unwrap();
            h2.send_request(req).await.unwrap().status().as_u16()
        }
    });
    let statuses = futures_util::future::join_all(attempts).await;
    let checked = statuses.iter().filter(|s| **s == 401).count();
    assert!(checked <= 4, "{checked} wrong tokens checked: {statuses:?}");
    assert!(checked >= 1);
    assert!(
        statuses.iter().all(|s| [401, 429].contains(s)),
        "{statuses:?}"
    );
    // The ban is in place for whatever comes next.
    let r = from("127.0.0.41").get(url(&ar, "/")).send().await.unwrap();
    assert_eq!(r.status(), 429);
}

#[tokio::test]
async fn preflights_need_an_origin_and_no_body_and_http11_needs_one_host() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ar = common::start(&abuse_config(&origin.url(), dir.path(), None, "")).await;
    let paused = client()
        .post(admin(&ar, "rooms/main/pause"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert!(paused.status().is_success(), "{}", paused.status());
    let raw = |text: String| {
        let addr = ar.addr;
        async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(text.as_bytes()).await.unwrap();
            let mut out = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
            String::from_utf8_lossy(&out).into_owned()
        }
    };
    let hits = origin.hits();
    let preflight = |origin_header: &str, body: &str| {
        format!(
            "OPTIONS /checkout HTTP/1.1\r\nHost: shop.example\r\nAccess-Control-Request-Method: POST\r\n\
             {origin_header}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    // With a body: 400, and the paused room's origin never hears of it.
    let answer = raw(preflight("Origin: https://app.example\r\n", "{\"buy\":1}")).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    // Without Origin it is no preflight: a page request, held by the paused room.
    let answer = raw(preflight("", "")).await;
    assert!(!answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert_eq!(origin.hits(), hits);
    // A browser's preflight passes as before.
    let answer = raw(preflight("Origin: https://app.example\r\n", "")).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(origin.hits(), hits + 1);
    // HTTP/1.1 without Host, or with two, is 400 (RFC 9112 §3.2).
    let answer = raw("GET / HTTP/1.1\r\nConnection: close\r\n\r\n".into()).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    let answer = raw(
        "GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\nConnection: close\r\n\r\n".into(),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert_eq!(origin.hits(), hits + 1);
}
