//! End to end: rooms chosen by host, the join limit behind (and not behind) a trusted proxy,
//! and a scheduled drop with a lottery. A real anteroom on loopback in front of real
//! origins, driven by a real HTTP client.

use crate::common;

use std::time::{Duration, SystemTime};

use anteroom::config::{Config, from_yaml_str};
use anteroom::queue::SettingsPatch;
use anteroom::run::Running;
use common::*;

/// A config with `top` at the top level and `rooms` (already indented YAML) under `rooms:`.
fn rooms_config(dir: &std::path::Path, top: &str, rooms: &str) -> Config {
    let yaml = format!(
        r#"listen: "127.0.0.1:0"
admit_interval: 100ms
cookie_secret: "{COOKIE_SECRET}"
admin_token: "{ADMIN_TOKEN}"
data_dir: "{dir}"
{top}
rooms:
{rooms}
"#,
        dir = dir.display()
    );
    from_yaml_str(&yaml, "test.yaml").unwrap_or_else(|e| panic!("test config: {e}\n{yaml}"))
}

async fn get(ar: &Running, host: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut request = client()
        .get(format!("http://{}/page", ar.addr))
        .header("host", host);
    for &(name, value) in headers {
        request = request.header(name, value);
    }
    request.send().await.unwrap()
}

async fn json(response: reqwest::Response) -> serde_json::Value {
    response.json().await.unwrap()
}

#[tokio::test]
async fn rooms_are_chosen_by_host_and_unknown_hosts_reach_no_origin() {
    let (a, b) = (Origin::start().await, Origin::start().await);
    let dir = tempfile::tempdir().unwrap();
    let rooms = format!(
        "  a:\n    match_host: a.example\n    origin: {}\n  b:\n    match_host: B.example\n    origin: {}\n",
        a.url(),
        b.url()
    );
    let ar = start(&rooms_config(dir.path(), "", &rooms)).await;

    let to_a = json(get(&ar, "A.EXAMPLE", &[]).await).await;
    assert_eq!(to_a["origin"], true);
    assert_eq!(
        to_a["headers"]["host"],
        a.addr.to_string(),
        "the origin's host"
    );
    let to_b = get(&ar, "b.EXAMPLE:8080", &[]).await;
    assert_eq!(to_b.status(), 200);
    assert_eq!((a.hits(), b.hits()), (1, 1), "one each");

    // No catch-all: an unknown host is a 404 of ours, and no origin hears of it.
    let unknown = get(&ar, "c.example", &[]).await;
    assert_eq!(unknown.status(), 404);
    assert!(unknown.text().await.unwrap().contains("not served here"));
    let unknown = get(&ar, "a.example.evil", &[("accept", "application/json")]).await;
    assert_eq!(unknown.status(), 404);
    assert_eq!(
        unknown.headers()["content-type"],
        "application/problem+json"
    );
    assert_eq!((a.hits(), b.hits()), (1, 1), "origins untouched");

    // Each room has its own counters.
    let store = ar.app.admission.store_for_tests();
    assert_eq!(store.stats("a").await.unwrap().total_admitted, 1);
    assert_eq!(store.stats("b").await.unwrap().total_admitted, 1);
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_catch_all_takes_every_other_host() {
    let (a, rest) = (Origin::start().await, Origin::start().await);
    let dir = tempfile::tempdir().unwrap();
    let rooms = format!(
        "  a:\n    match_host: a.example\n    origin: {}\n  rest:\n    origin: {}\n",
        a.url(),
        rest.url()
    );
    let ar = start(&rooms_config(dir.path(), "", &rooms)).await;
    assert_eq!(get(&ar, "a.example:80", &[]).await.status(), 200);
    for host in ["c.example", "127.0.0.1", "A.EXAMPLE.org"] {
        assert_eq!(get(&ar, host, &[]).await.status(), 200, "{host}");
    }
    assert_eq!((a.hits(), rest.hits()), (1, 3));
    // A cookie of one room is no cookie in another.
    let first = get(&ar, "a.example", &[]).await;
    let cookie = visitor_cookie(&first).unwrap();
    let store = ar.app.admission.store_for_tests();
    let before = store.stats("rest").await.unwrap().total_admitted;
    get(
        &ar,
        "c.example",
        &[("cookie", &format!("ar_visitor={cookie}"))],
    )
    .await;
    assert_eq!(
        store.stats("rest").await.unwrap().total_admitted,
        before + 1
    );
    ar.shutdown().await.unwrap();
}

/// Sends `n` cookieless requests as `for_ip` and returns the statuses.
async fn joins(ar: &Running, forwarded_for: &str, n: usize) -> Vec<u16> {
    let mut statuses = Vec::new();
    for _ in 0..n {
        let response = get(
            ar,
            "shop.example",
            &[
                ("x-forwarded-for", forwarded_for),
                ("accept", "application/json"),
            ],
        )
        .await;
        statuses.push(response.status().as_u16());
    }
    statuses
}

#[tokio::test]
async fn the_join_limit_counts_the_address_behind_a_trusted_proxy() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let rooms = format!(
        "  main:\n    origin: {}\n    rate: 0.01\n    max_active: 1000\n    join_limit_per_ip: 3\n    join_limit_window: 1m\n",
        origin.url()
    );
    let ar = start(&rooms_config(
        dir.path(),
        "trusted_proxies: [\"127.0.0.1/32\"]",
        &rooms,
    ))
    .await;
    // The first is let in on the spot, and the origin is told who the client is.
    let first = get(&ar, "shop.example", &[("x-forwarded-for", "203.0.113.7")]).await;
    assert_eq!(
        json(first).await["headers"]["x-forwarded-for"],
        "203.0.113.7"
    );
    assert_eq!(joins(&ar, "203.0.113.7", 2).await, [200, 200], "waiting");

    // The fourth newcomer from that address is refused.
    let refused = get(
        &ar,
        "shop.example",
        &[
            ("x-forwarded-for", "10.9.9.9, 203.0.113.7"),
            ("accept", "application/json"),
        ],
    )
    .await;
    assert_eq!(refused.status(), 429);
    assert_eq!(status_header(&refused).as_deref(), Some("refused"));
    let retry_after: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    assert!(visitor_cookie(&refused).is_none());
    let body = json(refused).await;
    assert_eq!(body["status"], "refused");
    assert_eq!(body["position"], serde_json::Value::Null);
    let html = get(&ar, "shop.example", &[("x-forwarded-for", "203.0.113.7")]).await;
    assert_eq!(html.status(), 429);
    assert!(html.headers().contains_key("retry-after"));

    // Another address behind the same proxy still joins.
    assert_eq!(joins(&ar, "203.0.113.8", 1).await, [200]);
    let stats = ar
        .app
        .admission
        .store_for_tests()
        .stats("main")
        .await
        .unwrap();
    assert_eq!(
        (
            stats.total_refused,
            stats.total_joined,
            stats.total_admitted
        ),
        (2, 3, 1)
    );
    assert_eq!(origin.hits(), 1);
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn forwarded_headers_from_an_untrusted_peer_are_ignored() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let rooms = format!(
        "  main:\n    origin: {}\n    rate: 0.01\n    max_active: 1000\n    join_limit_per_ip: 2\n",
        origin.url()
    );
    let ar = start(&rooms_config(dir.path(), "", &rooms)).await;
    let first = get(&ar, "shop.example", &[("x-forwarded-for", "198.51.100.1")]).await;
    assert_eq!(
        json(first).await["headers"]["x-forwarded-for"],
        "127.0.0.1",
        "the peer, not what it claims"
    );
    // Claiming a different address each time does not escape the limit.
    assert_eq!(joins(&ar, "198.51.100.2", 1).await, [200]);
    assert_eq!(joins(&ar, "198.51.100.3", 1).await, [429]);
    ar.shutdown().await.unwrap();
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

#[tokio::test]
async fn a_scheduled_drop_collects_a_draw_then_admits_by_lot() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let now = SystemTime::now();
    let opens = now + Duration::from_secs(2);
    let doors = now + Duration::from_secs(5);
    let rooms = format!(
        "  drop:\n    origin: {origin}\n    rate: 100\n    max_active: 1\n    lottery: true\n    schedule:\n      queue_opens_at: \"{opens}\"\n      admits_at: \"{doors}\"\n  over:\n    match_host: over.example\n    origin: {origin}\n    schedule:\n      closes_at: \"{past}\"\n",
        origin = origin.url(),
        opens = rfc3339(opens),
        doors = rfc3339(doors),
        past = rfc3339(now - Duration::from_secs(60)),
    );
    // The store's clock decides the phases; the test moves it instead of waiting.
    let clock = anteroom::clock::Clock::system();
    let store = std::sync::Arc::new(anteroom::queue::MemoryStore::in_memory(clock.clone()));
    let ar = start_with_store(&rooms_config(dir.path(), "", &rooms), store).await;
    let as_json = [("accept", "application/json")];

    // Before the line opens: told when, not queued.
    let early = get(&ar, "shop.example", &as_json).await;
    assert_eq!(early.status(), 200);
    assert_eq!(status_header(&early).as_deref(), Some("waiting"));
    let body = json(early).await;
    assert_eq!(
        (&body["phase"], &body["position"]),
        (&"before_open".into(), &serde_json::Value::Null)
    );
    let page = get(&ar, "shop.example", &[]).await.text().await.unwrap();
    assert!(page.contains("The line opens in"), "{page}");
    let store = ar.app.admission.store_for_tests();
    assert_eq!(store.stats("drop").await.unwrap().waiting, 0);

    // The draw: collected, no position, nobody admitted (not even the first).
    // (A little past it: the store's clock started after `now`, to the millisecond.)
    clock.advance_for_tests(Duration::from_millis(2_100));
    let mut cookies = Vec::new();
    for i in 1..=5u64 {
        let response = get(&ar, "shop.example", &as_json).await;
        cookies.push(format!("ar_visitor={}", visitor_cookie(&response).unwrap()));
        let body = json(response).await;
        assert_eq!(body["phase"], "draw");
        assert_eq!(body["position"], serde_json::Value::Null);
        assert_eq!(body["waiting"], i);
    }
    let page = get(&ar, "shop.example", &[("cookie", &cookies[0])])
        .await
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("Doors open in") && page.contains("Entered so far"),
        "{page}"
    );
    // No position in a lottery draw: the plain page leaves it out, the board hides it.
    assert!(
        !page.contains(r#"id="ar-position""#)
            || page.contains(r#"id="ar-queue" aria-labelledby="ar-place-label" hidden>"#),
        "{page}"
    );
    assert_eq!(origin.hits(), 0);
    store
        .update_settings("drop", &SettingsPatch::pause())
        .await
        .unwrap();

    // The doors: everyone in the draw has a place by lot; anyone later is behind them.
    clock.advance_for_tests(Duration::from_secs(3));
    let mut places = Vec::new();
    for cookie in &cookies {
        let body = json(get(&ar, "shop.example", &[("cookie", cookie), as_json[0]]).await).await;
        assert_eq!(body["phase"], "queueing");
        places.push(body["position"].as_u64().unwrap());
    }
    let mut sorted = places.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, [1, 2, 3, 4, 5]);
    let late = json(get(&ar, "shop.example", &as_json).await).await;
    assert_eq!(late["position"], 6);

    // Let one in: the one the lottery put first.
    store
        .update_settings("drop", &SettingsPatch::resume())
        .await
        .unwrap();
    let winner = places.iter().position(|&p| p == 1).unwrap();
    poll_until(
        Duration::from_secs(10),
        "the first place let in",
        async || {
            // Until then the answer is the waiting page (HTML): the origin answers in JSON.
            let answer = get(&ar, "shop.example", &[("cookie", &cookies[winner])]).await;
            let through = answer.json::<serde_json::Value>().await.ok()?;
            (through["origin"] == true).then_some(())
        },
    )
    .await;
    for (i, cookie) in cookies.iter().enumerate().filter(|&(i, _)| i != winner) {
        let body = json(get(&ar, "shop.example", &[("cookie", cookie), as_json[0]]).await).await;
        assert_eq!(body["position"], places[i] - 1, "visitor {i}");
    }

    // A room past closes_at: closed for newcomers.
    let closed = get(&ar, "over.example", &as_json).await;
    assert_eq!(closed.status(), 503);
    assert_eq!(status_header(&closed).as_deref(), Some("closed"));
    let body = json(closed).await;
    assert_eq!(
        (&body["status"], &body["phase"]),
        (&"closed".into(), &"closed".into())
    );
    ar.shutdown().await.unwrap();
}
