//! Room modes and the room phase end to end: `passthrough` letting a waiting line through
//! at once (counted) and back to queueing, `sold_out` turning the line and newcomers away
//! while admitted visitors keep browsing, a mode surviving a restart, a bad mode refused
//! with the field named, the phase in the stats and `anteroom_room_phase` at each step
//! (a scheduled draw included), and on a real `redis-server` a change made through one
//! binary replica seen by the other within two seconds.

use crate::common;

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use common::*;
use serde_json::{Value, json};

/// A first visitor goes straight in (one token), everyone after waits; nobody is held
/// back by the per-address limits (every visitor comes from loopback).
const ROOM: &str = "    rate: 0.01\n    max_active: 1000\n    join_limit_per_ip: 0\n    max_places_per_client: 0\n    max_sessions_per_client: 0\n";

/// How long a change may take to show: the statistics cache refreshes every second.
const WITHIN: Duration = Duration::from_secs(2);

async fn put_config(http: &reqwest::Client, addr: SocketAddr, body: Value) -> reqwest::Response {
    http.put(format!(
        "http://{addr}/__anteroom/admin/api/rooms/main/config"
    ))
    .bearer_auth(ADMIN_TOKEN)
    .json(&body)
    .send()
    .await
    .unwrap()
}

/// Switches the room's mode through the admin API, checking the answer.
async fn set_mode(http: &reqwest::Client, addr: SocketAddr, mode: &str) {
    let response = put_config(http, addr, json!({ "mode": mode })).await;
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["settings"]["mode"], mode);
    assert_eq!(body["audit"]["written"], true);
}

async fn stats(http: &reqwest::Client, addr: SocketAddr) -> Value {
    common::admin_get(http, addr, "rooms/main/stats").await
}

/// Waits until the stats and the metric both say `phase`, and returns the stats.
async fn phase_is(http: &reqwest::Client, addr: SocketAddr, phase: &str) -> Value {
    let what = format!("phase {phase} in the stats and the metric");
    poll_until(WITHIN * 3, &what, async || {
        let s = stats(http, addr).await;
        let metric = phases_in(&admin_metrics(http, addr).await);
        (s["phase"] == phase && metric == [phase]).then_some(s)
    })
    .await
}

/// Lets the first visitor in and puts `n` more in line; returns (admitted, waiting).
async fn admitted_and_line(http: &reqwest::Client, url: &str, n: u64) -> (String, Vec<String>) {
    let first = visit_json(http, url, None).await;
    assert_eq!(status_header(&first), None, "the first visitor is proxied");
    let admitted = visitor_cookie(&first).unwrap();
    let mut line = Vec::new();
    for expected in 1..=n {
        let page = visit_json(http, url, None).await;
        let cookie = visitor_cookie(&page).unwrap();
        let body: Value = page.json().await.unwrap();
        assert_eq!(body["position"], expected);
        line.push(cookie);
    }
    (admitted, line)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passthrough_lets_the_line_through_at_once_counted_and_queueing_resumes() {
    let (origin, _dir, ar) = front(ROOM).await;
    let http = client();
    let url = format!("http://{}/page", ar.addr);
    let (_, line) = admitted_and_line(&http, &url, 5).await;
    phase_is(&http, ar.addr, "queueing").await;

    set_mode(&http, ar.addr, "passthrough").await;
    let before = origin.hits();
    // Every visitor in line goes on at their next poll (the next pass admits the line).
    for cookie in &line {
        poll_until(WITHIN, "a waiting visitor let through", async || {
            let r = visit_json(&http, &url, Some(cookie)).await;
            (r.status() == 200 && status_header(&r).is_none()).then_some(())
        })
        .await;
    }
    // A newcomer goes straight through, line or not.
    let newcomer = visit_json(&http, &url, None).await;
    assert_eq!(status_header(&newcomer), None);
    assert!(origin.hits() >= before + 6);
    let s = poll_until(WITHIN * 3, "the passthrough counted", async || {
        let s = stats(&http, ar.addr).await;
        (s["total_passed_through"] == 6 && s["waiting"] == 0).then_some(s)
    })
    .await;
    assert_eq!(s["mode"], "passthrough");
    phase_is(&http, ar.addr, "passthrough").await;
    let metrics = admin_metrics(&http, ar.addr).await;
    assert!(
        metrics.contains("anteroom_passed_through_total{room=\"main\"} 6"),
        "{metrics}"
    );

    // Back to queueing: the bucket is empty, so a newcomer waits again.
    set_mode(&http, ar.addr, "queue").await;
    let page = visit_json(&http, &url, None).await;
    assert_eq!(status_header(&page).as_deref(), Some("waiting"));
    let body: Value = page.json().await.unwrap();
    assert_eq!(body["position"], 1);
    phase_is(&http, ar.addr, "queueing").await;
    ar.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sold_out_turns_the_line_and_newcomers_away_while_the_site_goes_on() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let room = format!("{ROOM}    message: \"Restock on Friday.\"\n");
    let config = config(&origin.url(), dir.path(), &room);
    let ar = start(&config).await;
    let http = client();
    let url = format!("http://{}/page", ar.addr);
    let (admitted, line) = admitted_and_line(&http, &url, 2).await;

    set_mode(&http, ar.addr, "sold_out").await;
    // The visitor on the site keeps browsing.
    let on_site = http.get(&url).visitor(&admitted).send().await.unwrap();
    assert_eq!(on_site.status(), 200);
    assert_eq!(status_header(&on_site), None);
    // The line gets the sold-out answer, as JSON: status sold_out, the room's status code.
    let waiting = visit_json(&http, &url, Some(&line[0])).await;
    assert_eq!(waiting.status(), 200);
    assert_eq!(status_header(&waiting).as_deref(), Some("sold_out"));
    let body: Value = waiting.json().await.unwrap();
    assert_eq!(body["status"], "sold_out");
    // A newcomer gets the page, with the operator's message, in their language.
    let page = http
        .get(&url)
        .header("accept-language", "de")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(status_header(&page).as_deref(), Some("sold_out"));
    let html = page.text().await.unwrap();
    assert!(html.contains("Ausverkauft"), "{html}");
    assert!(html.contains("Restock on Friday."), "{html}");
    let s = phase_is(&http, ar.addr, "sold_out").await;
    assert_eq!(s["mode"], "sold_out");
    assert_eq!(s["waiting"], 2, "nobody was added to the line");

    // The mode survives a restart (the embedded store's snapshot).
    ar.shutdown().await.unwrap();
    let ar = start(&config).await;
    let url = format!("http://{}/page", ar.addr);
    let s = phase_is(&http, ar.addr, "sold_out").await;
    assert_eq!(s["mode"], "sold_out");
    let again = visit_json(&http, &url, None).await;
    assert_eq!(status_header(&again).as_deref(), Some("sold_out"));

    // Back to the queue: the line picks up where it was.
    set_mode(&http, ar.addr, "queue").await;
    let body: Value = visit_json(&http, &url, Some(&line[1]))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["position"], 2);
    ar.shutdown().await.unwrap();
}

/// Sold out, the site's assets are for the visitors on it: a newcomer gets the small 503
/// even with nobody in line, when in the queue mode an asset passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sold_out_serves_assets_only_to_visitors_on_the_site() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let room = format!("{ROOM}    asset_paths: [\"/static/**\"]\n");
    let ar = start(&config(&origin.url(), dir.path(), &room)).await;
    let http = client();
    let asset = format!("http://{}/static/app.css", ar.addr);
    let first = visit_json(&http, &format!("http://{}/page", ar.addr), None).await;
    assert_eq!(status_header(&first), None, "the first visitor is proxied");
    let admitted = visitor_cookie(&first).unwrap();
    poll_until(
        WITHIN * 3,
        "an asset passing while nobody waits",
        async || {
            let r = http.get(&asset).send().await.unwrap();
            (r.status() == 200).then_some(())
        },
    )
    .await;

    set_mode(&http, ar.addr, "sold_out").await;
    let s = phase_is(&http, ar.addr, "sold_out").await;
    assert_eq!(s["waiting"], 0);
    let newcomer = http.get(&asset).send().await.unwrap();
    assert_eq!(newcomer.status(), 503);
    let on_site = http.get(&asset).visitor(&admitted).send().await.unwrap();
    assert_eq!(on_site.status(), 200);
    ar.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_mode_is_422_naming_the_field_and_changes_nothing() {
    let (_origin, _dir, ar) = front(ROOM).await;
    let http = client();
    for bad in [json!({ "mode": "closed" }), json!({ "mode": 1, "rate": 5 })] {
        let response = put_config(&http, ar.addr, bad.clone()).await;
        assert_eq!(response.status(), 422, "{bad}");
        let problem: Value = response.json().await.unwrap();
        assert_eq!(problem["field"], "mode", "{bad}");
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .contains("queue, passthrough, sold_out"),
            "{problem}"
        );
    }
    let s = poll_until(WITHIN * 3, "stats", async || {
        let s = stats(&http, ar.addr).await;
        (s["stats_available"] == true).then_some(s)
    })
    .await;
    assert_eq!(
        (s["mode"].as_str(), s["rate"].as_f64()),
        (Some("queue"), Some(0.01))
    );
    ar.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_phase_follows_a_scheduled_draw_then_the_queue() {
    let now = SystemTime::now();
    let at = |secs: u64| humantime::format_rfc3339_millis(now + Duration::from_secs(secs));
    let room = format!(
        "{ROOM}    lottery: true\n    schedule:\n      queue_opens_at: \"{}\"\n      admits_at: \"{}\"\n",
        at(3),
        at(6)
    );
    let (_origin, _dir, ar) = front(&room).await;
    let http = client();
    let url = format!("http://{}/page", ar.addr);
    phase_is(&http, ar.addr, "pre_queue").await;
    // During the draw a visitor is collected and nobody moves: the phase says draw.
    let s = phase_is(&http, ar.addr, "draw").await;
    assert_eq!(s["mode"], "queue");
    let entrant = visit_json(&http, &url, None).await;
    assert_eq!(status_header(&entrant).as_deref(), Some("waiting"));
    let cookie = visitor_cookie(&entrant).unwrap();
    // After the doors the line moves; the one entrant is let in and the room is idle.
    poll_until(
        Duration::from_secs(8),
        "the entrant let in after the doors",
        async || {
            let r = visit_json(&http, &url, Some(&cookie)).await;
            status_header(&r).is_none().then_some(())
        },
    )
    .await;
    phase_is(&http, ar.addr, "idle").await;
    // Paused, the phase says so.
    let paused = http
        .post(format!(
            "http://{}/__anteroom/admin/api/rooms/main/pause",
            ar.addr
        ))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(paused.status(), 200);
    phase_is(&http, ar.addr, "paused").await;
    ar.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mode_change_through_one_redis_replica_applies_on_the_other_within_two_seconds() {
    let pair = RedisPair::start(ROOM).await;
    let (a, b) = (pair.a.addr, pair.b.addr);
    let http = client();
    let url_b = format!("http://{}/page", b);
    let (admitted, line) = admitted_and_line(&http, &url_b, 3).await;

    // Sold out through A: B's next requests see it.
    set_mode(&http, a, "sold_out").await;
    poll_until(WITHIN, "B turns a newcomer away", async || {
        let r = visit_json(&http, &url_b, None).await;
        (status_header(&r).as_deref() == Some("sold_out")).then_some(())
    })
    .await;
    let waiting = visit_json(&http, &url_b, Some(&line[0])).await;
    assert_eq!(status_header(&waiting).as_deref(), Some("sold_out"));
    let on_site = http.get(&url_b).visitor(&admitted).send().await.unwrap();
    assert_eq!(status_header(&on_site), None, "the site goes on");
    phase_is(&http, b, "sold_out").await;

    // Passthrough through A: B lets the line through.
    set_mode(&http, a, "passthrough").await;
    for cookie in &line {
        poll_until(WITHIN, "B lets a waiting visitor through", async || {
            let r = visit_json(&http, &url_b, Some(cookie)).await;
            status_header(&r).is_none().then_some(())
        })
        .await;
    }
    let s = phase_is(&http, b, "passthrough").await;
    assert_eq!(s["mode"], "passthrough");
    poll_until(
        WITHIN * 3,
        "the line counted as passed through",
        async || {
            let s = stats(&http, a).await;
            // The line, and any newcomer B queued before it saw the sold-out mode.
            (s["total_passed_through"].as_u64() >= Some(3)).then_some(())
        },
    )
    .await;

    // Back to the queue through B: A queues newcomers again.
    set_mode(&http, b, "queue").await;
    let url_a = format!("http://{}/page", a);
    poll_until(WITHIN, "A queues a newcomer", async || {
        let r = visit_json(&http, &url_a, None).await;
        (status_header(&r).as_deref() == Some("waiting")).then_some(())
    })
    .await;
    phase_is(&http, a, "queueing").await;
}
