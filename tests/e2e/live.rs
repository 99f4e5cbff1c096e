//! Every room setting changed while the room runs, end to end: through one replica's
//! `PUT …/config` under the file's names, seen by that replica's next request and by the
//! other replica's within two seconds (a real `redis-server`, two binary replicas), shown
//! by `GET …/config` and the stats, kept over a restart (the embedded store's snapshot,
//! Redis), and a bad value refused with 422 naming the field and nothing changed.

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};

/// The first visitor goes straight in (one token), everyone after waits; the per-address
/// limits are off (every visitor comes from loopback).
const ROOM: &str = "    rate: 0.01\n    max_active: 1000\n    join_limit_per_ip: 0\n    max_places_per_client: 0\n    max_sessions_per_client: 0\n";

/// How long a change through one replica may take to show on another.
const WITHIN: Duration = Duration::from_secs(2);

/// Every live setting but the store's runtime ones, changed from the file's.
fn every_change() -> Value {
    json!({
        "title": "The spring drop",
        "message": "Doors at ten, one pair each.",
        "queue_status_code": 429,
        "bypass_paths": ["/health/*"],
        "asset_paths": ["/static/*"],
        "stream_cap": 7,
        "max_inflight": 3,
        "inflight_wait": "750ms",
        "max_waiting": 5000,
        "max_places_per_client": 50000,
        "max_sessions_per_client": 60000,
        "session_clients": 2,
        "lottery": true,
        "adaptive": {"target_latency": "900ms", "min_rate": 0.005},
    })
}

async fn put_config(http: &reqwest::Client, addr: SocketAddr, body: &Value) -> (u16, Value) {
    let response = http
        .put(format!(
            "http://{addr}/__anteroom/admin/api/rooms/main/config"
        ))
        .bearer_auth(ADMIN_TOKEN)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

async fn settings(http: &reqwest::Client, addr: SocketAddr) -> Value {
    admin_get(http, addr, "rooms/main/config").await
}

/// Whether `settings` shows every value of [`every_change`] (durations as written back).
fn shows_every_change(s: &Value) -> bool {
    let mut expected = every_change();
    expected["adaptive"] =
        json!({"target_latency": "900ms", "max_error_ratio": 0.05, "min_rate": 0.005});
    let fields = expected.as_object().unwrap();
    fields.iter().all(|(k, v)| &s[k] == v)
        && s["changed"].as_array().map(Vec::len) == Some(fields.len())
}

/// What a replica's next requests show of the changes: the page's title, message and
/// status code, a bypass path straight through, an asset path kept out of the line (a 503
/// without a cookie, where a page is the waiting page with the room's status), and
/// the stats of its in-flight cap, queue breaker and closed-loop admission. `None` when
/// any of them does not show yet.
async fn serves_every_change(
    http: &reqwest::Client,
    addr: SocketAddr,
    origin: &Origin,
) -> Option<()> {
    let page = http
        .get(format!("http://{addr}/shop"))
        .send()
        .await
        .unwrap();
    if page.status() != 429 || status_header(&page).as_deref() != Some("waiting") {
        return None;
    }
    let html = page.text().await.unwrap();
    if !html.contains("The spring drop") || !html.contains("Doors at ten, one pair each.") {
        return None;
    }
    let hits = origin.hits();
    let bypass = http
        .get(format!("http://{addr}/health/live"))
        .send()
        .await
        .unwrap();
    if bypass.status() != 200 || status_header(&bypass).is_some() || origin.hits() != hits + 1 {
        return None;
    }
    let asset = http
        .get(format!("http://{addr}/static/app.css"))
        .send()
        .await
        .unwrap();
    // An asset is never the page nor a place in line: refused until on the site.
    if asset.status() != 503 || visitor_cookie(&asset).is_some() {
        return None;
    }
    let stats = admin_get(http, addr, "rooms/main/stats").await;
    (stats["inflight"]["max"] == 3
        && stats["max_waiting"] == 5000
        && stats["adaptive"].is_object()
        && stats["adaptive"]["target_latency_ms"] == 900)
        .then_some(())
}

/// The file's values, before any change: the ordinary page, no bypass, no caps.
async fn serves_the_file(http: &reqwest::Client, addr: SocketAddr) {
    let page = http
        .get(format!("http://{addr}/health/live"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(status_header(&page).as_deref(), Some("waiting"));
    let html = page.text().await.unwrap();
    assert!(!html.contains("The spring drop"));
    let stats = admin_get(http, addr, "rooms/main/stats").await;
    assert_eq!(stats["inflight"], Value::Null);
    assert_eq!(stats["max_waiting"], 0);
    assert_eq!(stats["adaptive"], Value::Null);
    let s = settings(http, addr).await;
    assert_eq!(s["changed"], json!([]));
    assert_eq!(s["inflight_wait"], "5s");
}

/// Lets the first visitor in, so everyone after waits.
async fn fill_the_site(http: &reqwest::Client, addr: SocketAddr) {
    let first = http.get(format!("http://{addr}/")).send().await.unwrap();
    assert_eq!(status_header(&first), None, "the first visitor goes in");
}

/// Bad values: each a 422 naming its field, with nothing changed.
async fn bad_values_change_nothing(http: &reqwest::Client, addr: SocketAddr) {
    let before = settings(http, addr).await;
    for (body, field) in [
        (json!({"queue_status_code": 404}), "queue_status_code"),
        (json!({"inflight_wait": "soon"}), "inflight_wait"),
        (
            json!({"bypass_paths": ["/ok/*", "/a?b"]}),
            "bypass_paths[1]",
        ),
        (json!({"max_waiting": -1}), "max_waiting"),
        (json!({"lottery": "maybe"}), "lottery"),
        (
            json!({"adaptive": {"target_latency": "1s", "min_rate": -2}}),
            "adaptive.min_rate",
        ),
        // A good value beside a bad one is not applied either.
        (
            json!({"title": "Changed", "session_clients": "many"}),
            "session_clients",
        ),
        (json!({"session_ttl": "forever"}), "session_ttl"),
    ] {
        let (status, problem) = put_config(http, addr, &body).await;
        assert_eq!(status, 422, "{body}: {problem}");
        assert_eq!(problem["field"], field, "{body}: {problem}");
    }
    assert_eq!(settings(http, addr).await, before, "nothing changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_setting_changes_live_and_survives_a_restart_embedded() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = config(&origin.url(), dir.path(), ROOM);
    let ar = start(&config).await;
    let http = client();
    fill_the_site(&http, ar.addr).await;
    serves_the_file(&http, ar.addr).await;

    let (status, body) = put_config(&http, ar.addr, &every_change()).await;
    assert_eq!(status, 200, "{body}");
    assert!(shows_every_change(&body["settings"]), "{body}");
    assert_eq!(body["audit"]["written"], true);
    // The very next requests see it (the stats show the cache's next refresh).
    let page = http
        .get(format!("http://{}/shop", ar.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 429);
    assert!(page.text().await.unwrap().contains("The spring drop"));
    poll_until(WITHIN, "every change served", async || {
        serves_every_change(&http, ar.addr, &origin).await
    })
    .await;
    bad_values_change_nothing(&http, ar.addr).await;

    // Kept over a restart (the snapshot), before the first request is served.
    ar.shutdown().await.unwrap();
    let ar = start(&config).await;
    assert!(shows_every_change(&settings(&http, ar.addr).await));
    let page = http
        .get(format!("http://{}/shop", ar.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 429);
    assert!(page.text().await.unwrap().contains("The spring drop"));
    poll_until(
        WITHIN,
        "every change served after the restart",
        async || serves_every_change(&http, ar.addr, &origin).await,
    )
    .await;

    // `null` gives a setting the file's value back; the others stay.
    let (status, body) = put_config(
        &http,
        ar.addr,
        &json!({"title": null, "queue_status_code": null, "inflight_wait_secs": 2}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["settings"]["title"], "You're in line");
    assert_eq!(body["settings"]["inflight_wait"], "2s");
    let page = http
        .get(format!("http://{}/shop", ar.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(
        !html.contains("The spring drop") && html.contains("Doors at ten"),
        "{html}"
    );
    ar.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_setting_changed_through_one_redis_replica_applies_on_both_and_survives_a_restart() {
    let mut pair = RedisPair::start(ROOM).await;
    let (a, b) = (pair.a.addr, pair.b.addr);
    let http = client();
    fill_the_site(&http, a).await;
    serves_the_file(&http, b).await;

    let (status, body) = put_config(&http, a, &every_change()).await;
    assert_eq!(status, 200, "{body}");
    // A at once (its next request), B within two seconds.
    let page = http.get(format!("http://{}/shop", a)).send().await.unwrap();
    assert_eq!(page.status(), 429);
    let started = std::time::Instant::now();
    poll_until(WITHIN, "B serves every change", async || {
        serves_every_change(&http, b, &pair.origin).await
    })
    .await;
    assert!(started.elapsed() <= WITHIN);
    assert!(shows_every_change(&settings(&http, b).await));
    poll_until(WITHIN, "A serves every change", async || {
        serves_every_change(&http, a, &pair.origin).await
    })
    .await;
    // The store enforces its part for both: the queue breaker.
    let (status, _) = put_config(&http, b, &json!({"max_waiting": 1})).await;
    assert_eq!(status, 200);
    let full = http.get(format!("http://{}/more", a)).send().await.unwrap();
    assert_eq!(status_header(&full).as_deref(), Some("full"));
    put_config(&http, a, &json!({"max_waiting": 5000})).await;
    bad_values_change_nothing(&http, b).await;
    assert!(shows_every_change(&settings(&http, a).await));

    // A replica started again reads the changes from Redis before serving.
    pair.restart_a(ROOM).await;
    let a = pair.a.addr;
    assert!(shows_every_change(&settings(&http, a).await));
    let page = http.get(format!("http://{}/shop", a)).send().await.unwrap();
    assert_eq!(page.status(), 429);
    assert!(page.text().await.unwrap().contains("The spring drop"));
}

/// The room's phase in `addr`'s stats, once the cache has one.
async fn phase_of(http: &reqwest::Client, addr: SocketAddr) -> Value {
    admin_get(http, addr, "rooms/main/stats").await["phase"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schedule_and_the_join_limit_change_live_on_both_redis_replicas_and_stay() {
    let mut pair = RedisPair::start(ROOM).await;
    let (a, b) = (pair.a.addr, pair.b.addr);
    let http = client();

    // The join limit through B: A refuses a second newcomer from the same address.
    let (status, body) = put_config(
        &http,
        b,
        &json!({"join_limit_per_ip": 1, "join_limit_window": "60s"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (
            body["settings"]["join_limit_per_ip"].as_u64(),
            body["settings"]["join_limit_window"].as_str()
        ),
        (Some(1), Some("1m"))
    );
    poll_until(WITHIN, "A refuses a newcomer over the limit", async || {
        let r = http.get(format!("http://{}/shop", a)).send().await.unwrap();
        (status_header(&r).as_deref() == Some("refused")).then_some(())
    })
    .await;

    // A schedule through A: B is before its opening within two seconds.
    let opens =
        humantime::format_rfc3339_millis(std::time::SystemTime::now() + Duration::from_secs(3600))
            .to_string();
    let (status, body) =
        put_config(&http, a, &json!({"schedule": {"queue_opens_at": opens}})).await;
    assert_eq!(status, 200, "{body}");
    let same_time = |shown: &Value| {
        shown
            .as_str()
            .map(|t| humantime::parse_rfc3339_weak(t).unwrap())
            == Some(humantime::parse_rfc3339_weak(&opens).unwrap())
    };
    assert!(
        same_time(&body["settings"]["schedule"]["queue_opens_at"]),
        "{body}"
    );
    let started = std::time::Instant::now();
    poll_until(WITHIN, "B in pre_queue", async || {
        (phase_of(&http, b).await == "pre_queue").then_some(())
    })
    .await;
    eprintln!("schedule seen on B after {:?}", started.elapsed());
    assert!(started.elapsed() <= WITHIN);
    // A bad schedule names its field and changes nothing.
    let (status, problem) = put_config(
        &http,
        b,
        &json!({"schedule": {"queue_opens_at": opens, "admits_at": "2000-01-01T00:00:00Z"}}),
    )
    .await;
    assert_eq!(status, 422);
    assert_eq!(problem["field"], "schedule.admits_at", "{problem}");

    // A replica started again keeps both (its open re-applies the changes).
    pair.restart_a(ROOM).await;
    let a = pair.a.addr;
    let s = settings(&http, a).await;
    assert!(same_time(&s["schedule"]["queue_opens_at"]), "{s}");
    assert_eq!(s["join_limit_per_ip"], 1);
    poll_until(WITHIN, "A in pre_queue after its restart", async || {
        (phase_of(&http, a).await == "pre_queue").then_some(())
    })
    .await;
    assert_eq!(phase_of(&http, b).await, "pre_queue");

    // `null` gives the file's back (no schedule, no limit) on both.
    let (status, _) = put_config(
        &http,
        b,
        &json!({"schedule": null, "join_limit_per_ip": null}),
    )
    .await;
    assert_eq!(status, 200);
    poll_until(WITHIN, "A open again", async || {
        let phase = phase_of(&http, a).await;
        (phase == "idle" || phase == "queueing").then_some(())
    })
    .await;
    let r = http.get(format!("http://{}/shop", a)).send().await.unwrap();
    assert_eq!(
        status_header(&r).as_deref(),
        Some("waiting"),
        "no join limit"
    );
}
