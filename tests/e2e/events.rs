//! A room's scheduled events end to end: an event created through the admin API opens a
//! pre-queue, collects a draw, admits with its overrides and closes, with the phase in the
//! stats and `anteroom_room_phase` at each step, on the embedded store and on a real
//! `redis-server` with two binary replicas (the second shows what the first applied);
//! bad events refused with 422 naming the field, a viewer refused, replace and delete,
//! events kept over a restart, and overlapping events sent at once through two replicas
//! never both accepted.

use crate::common;

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use common::*;
use serde_json::{Value, json};

/// A first visitor goes straight in, everyone after waits (the rate is the event's to
/// raise); nobody is held back by the per-address limits (every visitor is loopback).
const ROOM: &str = "    rate: 0.01\n    max_active: 1000\n    join_limit_per_ip: 0\n    max_places_per_client: 0\n    max_sessions_per_client: 0\n";

/// How long a phase may take to show: the statistics cache refreshes every second.
const WITHIN: Duration = Duration::from_secs(3);

const VIEWER: &str = "events-viewer-token-0123456789";

fn at(now: SystemTime, secs: u64) -> String {
    humantime::format_rfc3339_millis(now + Duration::from_secs(secs)).to_string()
}

fn events_url(addr: SocketAddr) -> String {
    format!("http://{addr}/__anteroom/admin/api/rooms/main/events")
}

async fn send(request: reqwest::RequestBuilder) -> (u16, reqwest::header::HeaderMap, Value) {
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    (status, headers, body)
}

async fn create(http: &reqwest::Client, addr: SocketAddr, body: &Value) -> (u16, Value) {
    let (status, headers, body) = send(
        http.post(events_url(addr))
            .bearer_auth(ADMIN_TOKEN)
            .json(body),
    )
    .await;
    if status == 201 {
        let location = headers["location"].to_str().unwrap();
        assert_eq!(
            location,
            format!(
                "/__anteroom/admin/api/rooms/main/events/{}",
                body["id"].as_str().unwrap()
            )
        );
    }
    (status, body)
}

/// Waits until the stats and the metric both say one of `phases`, and returns the stats.
async fn phase_is(http: &reqwest::Client, addr: SocketAddr, phases: &[&str]) -> Value {
    phase_within(http, addr, phases, WITHIN).await
}

/// [`phase_is`] within `bound`.
async fn phase_within(
    http: &reqwest::Client,
    addr: SocketAddr,
    phases: &[&str],
    bound: Duration,
) -> Value {
    let what = format!("phase {phases:?} in the stats and the metric");
    poll_until(bound, &what, async || {
        let s = admin_get(http, addr, "rooms/main/stats").await;
        let metric = phases_in(&admin_metrics(http, addr).await);
        (phases.iter().any(|p| s["phase"] == *p) && metric.len() == 1 && metric[0] == s["phase"])
            .then_some(s)
    })
    .await
}

/// One event through `addr`'s API, run to its end: pre-queue, draw, admission (with its
/// overrides), closed; each phase also on `other` (a second replica) when given.
async fn an_event_runs_the_room(
    http: &reqwest::Client,
    addr: SocketAddr,
    other: Option<SocketAddr>,
) {
    let replicas: Vec<SocketAddr> = std::iter::once(addr).chain(other).collect();
    let now = SystemTime::now();
    let (status, event) = create(
        http,
        addr,
        &json!({
            "name": "Spring drop",
            "queue_opens_at": at(now, 3),
            "admits_at": at(now, 7),
            "closes_at": at(now, 11),
            "lottery": true,
            "rate": 50,
            "title": "The spring drop",
        }),
    )
    .await;
    assert_eq!(status, 201, "{event}");
    let id = event["id"].as_str().unwrap().to_owned();
    assert_eq!(event["state"], "current");
    assert_eq!(
        (event["rate"].as_f64(), event["lottery"].as_bool()),
        (Some(50.0), Some(true))
    );
    let (status, _, list) = send(http.get(events_url(addr)).bearer_auth(ADMIN_TOKEN)).await;
    assert_eq!(status, 200);
    assert_eq!(list["current"], id.as_str());
    assert_eq!(list["events"][0]["name"], "Spring drop");

    for &r in &replicas {
        let s = phase_is(http, r, &["pre_queue"]).await;
        assert_eq!(
            s["event"],
            json!({"id": id, "name": "Spring drop", "state": "current"}),
            "{s}"
        );
        assert_eq!(s["rate"].as_f64(), Some(50.0), "the rate override");
        let page = http.get(format!("http://{r}/page")).send().await.unwrap();
        let html = page.text().await.unwrap();
        assert!(
            html.contains("The spring drop"),
            "the title override: {html}"
        );
    }
    // The draw: visitors are collected, nobody moves.
    for &r in &replicas {
        phase_is(http, r, &["draw"]).await;
    }
    let url = format!("http://{}/page", replicas.last().unwrap());
    let mut entrants = Vec::new();
    for _ in 0..3 {
        let page = visit_json(http, &url, None).await;
        assert_eq!(status_header(&page).as_deref(), Some("waiting"));
        entrants.push(visitor_cookie(&page).unwrap());
    }
    // After admits_at the draw is let in at the event's rate.
    for cookie in &entrants {
        poll_until(
            Duration::from_secs(8),
            "an entrant let in after the doors",
            async || {
                let r = visit_json(http, &url, Some(cookie)).await;
                status_header(&r).is_none().then_some(())
            },
        )
        .await;
    }
    for &r in &replicas {
        phase_is(http, r, &["idle", "queueing"]).await;
    }
    // Closed after closes_at (11 s after the start): newcomers are turned away; the event
    // stays current.
    let closes = std::time::Instant::now()
        + now.elapsed().map_or(Duration::ZERO, |e| {
            Duration::from_secs(11).saturating_sub(e)
        });
    for &r in &replicas {
        let bound = closes.saturating_duration_since(std::time::Instant::now()) + WITHIN;
        let s = phase_within(http, r, &["closed"], bound).await;
        assert_eq!(s["event"]["id"], id.as_str());
    }
    let late = visit_json(http, &url, None).await;
    assert_eq!(status_header(&late).as_deref(), Some("closed"));
    let (_, _, list) = send(http.get(events_url(addr)).bearer_auth(ADMIN_TOKEN)).await;
    assert_eq!(
        list["events"][0]["state"], "current",
        "the last event stays current"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_opens_a_pre_queue_draws_admits_and_closes_embedded() {
    let (_origin, _dir, ar) = front(ROOM).await;
    let http = client();
    let started = std::time::Instant::now();
    an_event_runs_the_room(&http, ar.addr, None).await;
    eprintln!("embedded event run: {:?}", started.elapsed());
    ar.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_through_one_redis_replica_runs_the_room_on_both() {
    let pair = RedisPair::start(ROOM).await;
    let (a, b) = (pair.a.addr, pair.b.addr);
    let http = client();
    let started = std::time::Instant::now();
    an_event_runs_the_room(&http, a, Some(b)).await;
    eprintln!("redis event run: {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_checked_replaced_deleted_and_kept_over_a_restart() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let tokens = format!("admin_tokens:\n  - {{name: watcher, token: {VIEWER}, role: viewer}}\n");
    let config = config_with(&origin.url(), dir.path(), &tokens, ROOM);
    let ar = start(&config).await;
    let http = client();
    let now = SystemTime::now();
    let first = json!({
        "name": "Later", "queue_opens_at": at(now, 3600), "admits_at": at(now, 3700),
        "closes_at": at(now, 7200), "title": "Later drop",
    });
    let (status, event) = create(&http, ar.addr, &first).await;
    assert_eq!(status, 201, "{event}");
    let id = event["id"].as_str().unwrap().to_owned();
    phase_is(&http, ar.addr, &["pre_queue"]).await;

    // Refused, each naming its field; nothing changes.
    for (body, field) in [
        (
            json!({"queue_opens_at": at(now, 7000), "admits_at": at(now, 7100), "closes_at": at(now, 8000)}),
            "queue_opens_at",
        ),
        (
            json!({"queue_opens_at": at(now, 9000), "admits_at": at(now, 8000)}),
            "admits_at",
        ),
        (
            json!({"queue_opens_at": at(now, 9000), "admits_at": at(now, 9000), "rate": 0}),
            "rate",
        ),
        (
            json!({"queue_opens_at": at(now, 9000), "admits_at": at(now, 9000), "title": 7}),
            "title",
        ),
        (json!({"admits_at": at(now, 9000)}), "queue_opens_at"),
    ] {
        let (status, problem) = create(&http, ar.addr, &body).await;
        assert_eq!(status, 422, "{body}: {problem}");
        assert_eq!(problem["field"], field, "{body}: {problem}");
    }
    let (status, problem) = create(
        &http,
        ar.addr,
        &json!({"queue_opens_at": at(now, 7000), "admits_at": at(now, 7100), "closes_at": at(now, 8000)}),
    )
    .await;
    assert!(
        problem["detail"].as_str().unwrap().contains(&id),
        "{status} {problem}"
    );
    // A viewer reads but does not write.
    let (status, _, list) = send(http.get(events_url(ar.addr)).bearer_auth(VIEWER)).await;
    assert_eq!(status, 200);
    assert_eq!(list["events"].as_array().unwrap().len(), 1, "{list}");
    let (status, _, _) = send(
        http.post(events_url(ar.addr))
            .bearer_auth(VIEWER)
            .json(&first),
    )
    .await;
    assert_eq!(status, 403);
    let one = format!("{}/{id}", events_url(ar.addr));
    let (status, _, _) = send(http.delete(&one).bearer_auth(VIEWER)).await;
    assert_eq!(status, 403);

    // Replaced whole: the current event's new title applies at once.
    let mut second = first.clone();
    second["title"] = json!("Replaced drop");
    second["name"] = json!("Renamed");
    let (status, _, replaced) = send(http.put(&one).bearer_auth(ADMIN_TOKEN).json(&second)).await;
    assert_eq!(status, 200, "{replaced}");
    assert_eq!(
        (replaced["id"].as_str(), replaced["name"].as_str()),
        (Some(id.as_str()), Some("Renamed"))
    );
    let page = http
        .get(format!("http://{}/page", ar.addr))
        .send()
        .await
        .unwrap();
    assert!(page.text().await.unwrap().contains("Replaced drop"));
    let (status, _, _) = send(
        http.put(format!("{}/ev-00000000", events_url(ar.addr)))
            .bearer_auth(ADMIN_TOKEN)
            .json(&second),
    )
    .await;
    assert_eq!(status, 404);

    // Kept over a restart (the embedded store's snapshot).
    ar.shutdown().await.unwrap();
    let ar = start(&config).await;
    let one = format!("{}/{id}", events_url(ar.addr));
    let (_, _, list) = send(http.get(events_url(ar.addr)).bearer_auth(ADMIN_TOKEN)).await;
    assert_eq!(list["current"], id.as_str(), "{list}");
    assert_eq!(list["events"][0]["title"], "Replaced drop");
    phase_is(&http, ar.addr, &["pre_queue"]).await;

    // Deleted: the room runs on the file's schedule (none) again.
    let (status, _, _) = send(http.delete(&one).bearer_auth(ADMIN_TOKEN)).await;
    assert_eq!(status, 204);
    let (status, _, _) = send(http.delete(&one).bearer_auth(ADMIN_TOKEN)).await;
    assert_eq!(status, 404);
    let s = phase_is(&http, ar.addr, &["idle", "queueing"]).await;
    assert_eq!(s["event"], Value::Null);
    let (_, _, list) = send(http.get(events_url(ar.addr)).bearer_auth(ADMIN_TOKEN)).await;
    assert_eq!(list, json!({"events": [], "current": null}));
    let settings = admin_get(&http, ar.addr, "rooms/main/config").await;
    assert_eq!(
        settings["schedule"],
        json!({"queue_opens_at": null, "admits_at": null, "closes_at": null})
    );
    // Every write audited with the token's name; each application with the actor `event`.
    let audit = std::fs::read_to_string(dir.path().join("audit.log")).unwrap();
    let lines: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let by = |action: &str| lines.iter().filter(|l| l["action"] == action).count();
    assert_eq!(
        (by("event.create"), by("event.update"), by("event.delete")),
        (1, 1, 1),
        "{audit}"
    );
    assert!(
        lines
            .iter()
            .filter(|l| l["action"].as_str().unwrap().starts_with("event.") && l["actor"].is_null())
            .all(|l| l["token"] == "admin"),
        "{audit}"
    );
    assert!(by("event.apply") >= 2 && by("event.clear") == 1, "{audit}");
    assert!(
        lines
            .iter()
            .filter(|l| l["action"] == "event.apply")
            .all(|l| l["actor"] == "event")
    );
    ar.shutdown().await.unwrap();
}

/// Two operators schedule overlapping events at the same instant, through two replicas on
/// one real `redis-server`: in every round exactly one is accepted and the other is refused
/// with 422 naming it (each write checks the set as read and lands only if no other write
/// came between), and a replace and a delete of one event at once never bring it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_events_sent_at_once_through_two_replicas_never_both_land() {
    const ROUNDS: u64 = 12;
    let pair = RedisPair::start(ROOM).await;
    let (a, b) = (pair.a.addr, pair.b.addr);
    let http = client();
    let now = SystemTime::now();
    for round in 0..ROUNDS {
        // Round `round` has its own hour; the two events of a round overlap by half of it.
        let base = 3_600 * (round + 1);
        let first = json!({"name": "a", "queue_opens_at": at(now, base), "admits_at": at(now, base + 60),
            "closes_at": at(now, base + 1_800)});
        let second = json!({"name": "b", "queue_opens_at": at(now, base + 900), "admits_at": at(now, base + 960),
            "closes_at": at(now, base + 2_700)});
        let ((sa, ea), (sb, eb)) =
            tokio::join!(create(&http, a, &first), create(&http, b, &second));
        let mut statuses = [sa, sb];
        statuses.sort_unstable();
        assert_eq!(statuses, [201, 422], "round {round}: {ea} / {eb}");
        let (kept, refused) = if sa == 201 { (&ea, &eb) } else { (&eb, &ea) };
        let id = kept["id"].as_str().unwrap();
        assert!(
            refused["detail"].as_str().unwrap().contains(id),
            "round {round}: the refusal names the event that landed: {refused}"
        );
    }
    let (status, _, list) = send(http.get(events_url(b)).bearer_auth(ADMIN_TOKEN)).await;
    assert_eq!(status, 200);
    let events = list["events"].as_array().unwrap();
    assert_eq!(events.len() as u64, ROUNDS, "{list}");

    // A replace and a delete of the same event at once, through the two replicas: the
    // delete wins or the replace does then the delete, never a deleted event replaced back.
    let target = events[0].clone();
    let id = target["id"].as_str().unwrap();
    let url = format!("{}/{id}", events_url(a));
    let mut renamed = target.clone();
    renamed["name"] = json!("renamed");
    for key in ["id", "state"] {
        renamed.as_object_mut().unwrap().remove(key);
    }
    let ((replaced, _, _), (deleted, _, _)) = tokio::join!(
        send(http.put(&url).bearer_auth(ADMIN_TOKEN).json(&renamed)),
        send(
            http.delete(format!("{}/{id}", events_url(b)))
                .bearer_auth(ADMIN_TOKEN)
        )
    );
    assert_eq!(deleted, 204);
    assert!(replaced == 200 || replaced == 404, "replace: {replaced}");
    let (_, _, list) = send(http.get(events_url(a)).bearer_auth(ADMIN_TOKEN)).await;
    assert!(
        list["events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["id"] != id),
        "a deleted event came back: {list}"
    );
}
