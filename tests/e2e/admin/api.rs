//! The API's routes: the control room shell and the API page, the token, status, rooms and
//! stats, errors that name what is wrong, config changes, pause, resume and flush.

use super::*;

#[tokio::test]
async fn the_control_room_shell_loads_without_a_token() {
    if !anteroom::http::pages::FRONTEND_BUILT_IN {
        return; // the placeholder's test below covers this binary
    }
    let h = Harness::start("").await;
    for path in ["/__anteroom/admin/", "/__anteroom/admin"] {
        let response = h.http.get(h.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let headers = response.headers().clone();
        assert_eq!(headers["content-type"], "text/html; charset=utf-8");
        assert_eq!(headers["cache-control"], "no-store");
        assert_eq!(headers["x-frame-options"], "DENY");
        let csp = headers["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
        assert!(csp.contains("script-src 'self'"), "{csp}");
        let html = response.text().await.unwrap();
        let control = anteroom::http::assets::entry(anteroom::http::assets::CONTROL_ENTRY)
            .expect("the control room entry is built in");
        assert!(html.contains(&format!(
            r#"<script type="module" src="{}">"#,
            control.script
        )));
        for style in &control.styles {
            assert!(html.contains(&format!(r#"<link rel="stylesheet" href="{style}">"#)));
        }
        assert!(!html.contains("front-end is not built into this binary"));
        assert!(
            !html.contains(ADMIN_TOKEN),
            "the page never shows the token"
        );
        let script = h.http.get(h.url(&control.script)).send().await.unwrap();
        assert_eq!(script.status(), 200);
    }
    let response = h
        .http
        .post(h.url("/__anteroom/admin/"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 405);
    h.ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_page_lists_the_api_without_a_token() {
    if anteroom::http::pages::FRONTEND_BUILT_IN {
        return; // the control room's shell replaces it (test above); `make test-plain` runs this
    }
    let h = Harness::start("").await;
    for path in ["/__anteroom/admin/", "/__anteroom/admin"] {
        let response = h.http.get(h.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        assert_eq!(
            response.headers()["content-type"],
            "text/html; charset=utf-8"
        );
        // The template escapes `/` too.
        let html = response.text().await.unwrap().replace("&#x2f;", "/");
        assert!(html.contains("front-end is not built into this binary"));
        for route in admin::routes() {
            assert!(html.contains(route.path), "{} listed", route.path);
        }
        assert!(html.contains(
            "curl -s -X POST -H &quot;Authorization: Bearer $ANTEROOM_ADMIN_TOKEN&quot;"
        ));
        assert!(
            !html.contains(ADMIN_TOKEN),
            "the page never shows the token"
        );
    }
    let response = h
        .http
        .post(h.url("/__anteroom/admin/"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 405);
    h.ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn every_api_route_refuses_a_missing_or_wrong_token() {
    // Wrong tokens are strikes: this brute force would be banned (tests/e2e/abuse.rs
    // shows it) unless its address is in abuse.allow.
    let h = Harness::start("abuse:\n  allow: [127.0.0.1]\n").await;
    for route in admin::routes().iter().filter(|r| r.auth) {
        let path = route.path.replace("{room}", "main");
        let method = reqwest::Method::from_bytes(route.method.as_str().as_bytes()).unwrap();
        let attempts = [
            None,
            Some("Bearer wrong-token-0123456789".to_owned()),
            Some(format!("Bearer {ADMIN_TOKEN}x")),
            Some(format!("Basic {ADMIN_TOKEN}")),
            Some("Bearer".to_owned()),
        ];
        for authorization in attempts {
            let mut request = h
                .http
                .request(method.clone(), h.url(&path))
                .header("content-type", "application/json")
                .body(r#"{"rate": 1}"#);
            if let Some(a) = &authorization {
                request = request.header("authorization", a);
            }
            let response = request.send().await.unwrap();
            assert_eq!(
                response.status(),
                401,
                "{} {path} {authorization:?}",
                route.method
            );
            assert!(
                response.headers()["www-authenticate"]
                    .to_str()
                    .unwrap()
                    .starts_with("Bearer"),
            );
            let body = problem(response).await;
            assert_eq!(body["status"], 401);
        }
    }
    // Nothing changed.
    let settings = h.store_settings().await;
    assert!(!settings.paused);
    assert_eq!(settings.rate, 50.0);
    assert!(h.audit_lines().is_empty());
    h.ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn status_reports_the_store_and_version() {
    let h = Harness::start("").await;
    let status = h.get("/status").await;
    assert_eq!(status["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(status["store"]["kind"], "embedded");
    assert_eq!(status["store"]["up"], true);
    assert_eq!(status["store"]["down_for_secs"], Value::Null);
    assert_eq!(status["fail_open"]["enabled"], false);
    assert_eq!(status["fail_open"]["active"], false);
    assert_eq!(status["audit_log"]["ok"], true);
    assert_eq!(status["rooms"], json!(["main"]));
    assert_eq!(status["open_streams"], 0);
    assert_eq!(
        status["frontend_built_in"],
        anteroom::http::pages::FRONTEND_BUILT_IN
    );
    h.ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn rooms_and_stats_show_every_counter() {
    let h = Harness::start(ONE_THEN_QUEUE).await;
    h.fill(3).await;
    let stats = h.stats_until("three waiting", |s| s["waiting"] == 3).await;
    let expected = json!({
        "room": "main",
        "stats_available": true,
        "waiting": 3,
        "active": 1,
        "max_active": 1000,
        "rate": 0.01,
        "paused": false,
        "session_ttl_secs": 300.0,
        "abandon_after_secs": 60.0,
        "total_joined": 3,
        "total_admitted": 1,
        "total_expired": 0,
        "total_abandoned": 0,
        "total_refused": 0,
        // Neither `max_inflight` nor `max_waiting` set.
        "inflight": null,
        "max_waiting": 0,
    });
    for (key, value) in expected.as_object().unwrap() {
        assert_eq!(&stats[key], value, "{key} in {stats}");
    }
    for key in ["observed_rate", "last_pass_ms", "stats_age_secs"] {
        assert!(stats.get(key).is_some(), "{key} in {stats}");
    }
    assert!(stats["stats_age_secs"].as_f64().unwrap() < 2.0);
    let rooms = h.get("/rooms").await;
    let rooms = rooms["rooms"].as_array().unwrap();
    assert_eq!(rooms.len(), 1);
    assert_eq!(rooms[0]["room"], "main");
    assert_eq!(rooms[0]["waiting"], 3);
    assert_eq!(rooms[0]["total_joined"], 3);
    h.ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn rooms_and_stats_show_the_inflight_cap_live_and_the_breaker() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // An origin that sends headers and a first chunk, then holds the body open.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf).await;
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\nhello")
                    .await;
                tokio::time::sleep(Duration::from_secs(60)).await;
            });
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let ar = start(&config(
        &format!("http://{addr}"),
        dir.path(),
        "    max_inflight: 8\n    inflight_wait: 100ms\n    max_waiting: 10000",
    ))
    .await;
    let h = Harness {
        _origin: Origin::start().await,
        dir,
        ar,
        http: client(),
    };
    let inflight = |stats: &Value| stats["inflight"].clone();
    let stats = h
        .stats_until("stats read", |s| s["stats_available"] == true)
        .await;
    assert_eq!(inflight(&stats), json!({"now": 0, "max": 8}), "{stats}");
    assert_eq!(stats["max_waiting"], 10000, "{stats}");

    // One request at the origin, its body still open: in flight, shown at once.
    let mut stream = tokio::net::TcpStream::connect(h.ar.addr).await.unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 512];
    let n = stream.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    assert_eq!(inflight(&h.stats().await), json!({"now": 1, "max": 8}));
    let rooms = h.get("/rooms").await;
    assert_eq!(rooms["rooms"][0]["inflight"], json!({"now": 1, "max": 8}));
    assert_eq!(rooms["rooms"][0]["max_waiting"], 10000);

    // The client goes; so does its slot.
    drop(stream);
    h.stats_until("the slot is released", |s| s["inflight"]["now"] == 0)
        .await;
    h.ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_unknown_room_is_404_naming_the_room() {
    let h = Harness::start("").await;
    for route in admin::routes().iter().filter(|r| r.path.contains("{room}")) {
        let path = route.path.replace("{room}", "nope");
        let method = reqwest::Method::from_bytes(route.method.as_str().as_bytes()).unwrap();
        let response = h
            .http
            .request(method, h.url(&path))
            .bearer_auth(ADMIN_TOKEN)
            .header("content-type", "application/json")
            .body(r#"{"rate": 1}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 404, "{path}");
        let body = problem(response).await;
        assert_eq!(body["field"], "room", "{path}");
    }
    h.ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn wrong_methods_are_405_and_unknown_paths_404() {
    let h = Harness::start("").await;
    let cases = [
        (reqwest::Method::DELETE, "/rooms", "GET"),
        (reqwest::Method::POST, "/rooms/main/stats", "GET"),
        (reqwest::Method::GET, "/rooms/main/pause", "POST"),
        (reqwest::Method::POST, "/rooms/main/config", "GET, PUT"),
        (reqwest::Method::PUT, "/status", "GET"),
    ];
    for (method, path, allow) in cases {
        let response = h.api(method.clone(), path).send().await.unwrap();
        assert_eq!(response.status(), 405, "{method} {path}");
        assert_eq!(response.headers()["allow"], allow);
        problem(response).await;
    }
    for path in ["/nothing", "/rooms/main", "/rooms/main/stats/x", ""] {
        let response = h.api(reqwest::Method::GET, path).send().await.unwrap();
        assert_eq!(response.status(), 404, "{path}");
        problem(response).await;
    }
    h.ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn bad_config_input_names_the_field_and_changes_nothing() {
    let h = Harness::start("").await;
    let before = h.store_settings().await;
    let stats_before = h.stats().await;
    let huge = format!(r#"{{"rate": 5, "pad": "{}"}}"#, "x".repeat(70 * 1024));
    let cases: Vec<(String, u16, &str)> = vec![
        (r#"{"rate": -5}"#.into(), 400, "rate"),
        (r#"{"rate": 0}"#.into(), 400, "rate"),
        (r#"{"rate": "fast"}"#.into(), 400, "rate"),
        (r#"{"rate": null}"#.into(), 400, "rate"),
        (r#"{"rate": 5, "max_active": 0}"#.into(), 400, "max_active"),
        (r#"{"max_active": -3}"#.into(), 400, "max_active"),
        (r#"{"max_active": "10"}"#.into(), 400, "max_active"),
        (r#"{"ratee": 5}"#.into(), 400, "ratee"),
        (r#"{"rate": 5, "paused": true}"#.into(), 400, "paused"),
        (r#"{"session_ttl_secs": 0}"#.into(), 400, "session_ttl_secs"),
        (
            r#"{"abandon_after_secs": "1m"}"#.into(),
            400,
            "abandon_after_secs",
        ),
        (r#"{"rate": 5"#.into(), 400, "body"),
        ("not json".into(), 400, "body"),
        ("".into(), 400, "body"),
        ("[5]".into(), 400, "body"),
        ("{}".into(), 400, "body"),
        (huge, 413, "body"),
    ];
    for (body, status, field) in cases {
        let shown = body.chars().take(40).collect::<String>();
        let response = h.put_config(body).await;
        assert_eq!(response.status(), status, "{shown}");
        let problem = problem(response).await;
        assert_eq!(problem["field"], field, "{shown}: {problem}");
        assert!(
            problem["detail"].as_str().unwrap().contains(field),
            "{shown}: {problem}"
        );
        assert_eq!(h.store_settings().await, before, "{shown} changed nothing");
    }
    // The cache still shows the same after its next refresh, and nothing was audited.
    h.cache_refreshed().await;
    let stats_after = h.stats().await;
    for key in [
        "rate",
        "max_active",
        "session_ttl_secs",
        "abandon_after_secs",
    ] {
        assert_eq!(stats_after[key], stats_before[key], "{key}");
    }
    assert!(h.audit_lines().is_empty());
    h.ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_config_change_shows_in_stats_after_the_cache_refresh_and_is_audited() {
    let h = Harness::start("").await;
    let response = h
        .put_config(r#"{"rate": 7.5, "max_active": 42, "session_ttl_secs": 90}"#)
        .await;
    assert_eq!(response.status(), 200);
    let changed = Instant::now();
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["settings"]["rate"], 7.5);
    assert_eq!(body["settings"]["max_active"], 42);
    assert_eq!(body["settings"]["session_ttl_secs"], 90.0);
    assert_eq!(body["settings"]["abandon_after_secs"], 60.0, "untouched");
    assert_eq!(body["audit"]["written"], true);
    let stats = h
        .stats_until("the new rate", |s| {
            s["rate"] == 7.5 && s["max_active"] == 42
        })
        .await;
    assert!(
        changed.elapsed() < Duration::from_millis(2_500),
        "visible after {:?}",
        changed.elapsed()
    );
    assert_eq!(stats["session_ttl_secs"], 90.0);

    let lines = h.audit_lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    assert_eq!(line["room"], "main");
    assert_eq!(line["action"], "config");
    assert_eq!(
        line["old"],
        json!({"rate": 50.0, "max_active": 500, "session_ttl_secs": 300.0})
    );
    assert_eq!(
        line["new"],
        json!({"rate": 7.5, "max_active": 42, "session_ttl_secs": 90.0})
    );
    assert_eq!(line["caller"], "127.0.0.1");
    assert!(line["peer"].as_str().unwrap().starts_with("127.0.0.1:"));
    let time = line["time"].as_str().unwrap();
    assert!(humantime_like_rfc3339_ms(time), "{time}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(h.dir.path().join("audit.log"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    h.ar.shutdown().await.unwrap();
}

/// `2024-05-01T12:34:56.789Z`.
fn humantime_like_rfc3339_ms(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 24
        && b[4] == b'-'
        && b[10] == b'T'
        && b[19] == b'.'
        && b[23] == b'Z'
        && s.chars().filter(|c| c.is_ascii_digit()).count() == 17
}

#[tokio::test]
async fn pause_queues_newcomers_and_resume_admits_them() {
    let h = Harness::start("    rate: 50\n    max_active: 100").await;
    let response = h.post("/rooms/main/pause").await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["paused"], true);

    // Nobody waits, both limits allow, and still: no fast path.
    let (body, cookie) = h.visit(None).await;
    assert_eq!(body["status"], "waiting", "{body}");
    assert_eq!(body["paused"], true);
    assert_eq!(body["position"], 1);
    let cookie = cookie.unwrap();
    // Several admission passes later, still held.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (body, _) = h.visit(Some(&cookie)).await;
    assert_eq!(body["status"], "waiting", "{body}");
    h.stats_until("paused in the cache", |s| {
        s["paused"] == true && s["waiting"] == 1
    })
    .await;

    let response = h.post("/rooms/main/resume").await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["paused"], false);
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let (body, _) = h.visit(Some(&cookie)).await;
        if body["origin"] == true {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not admitted after resume: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let actions: Vec<_> = h
        .audit_lines()
        .iter()
        .map(|l| (l["action"].clone(), l["old"].clone(), l["new"].clone()))
        .collect();
    assert_eq!(
        actions,
        [
            (
                json!("pause"),
                json!({"paused": false}),
                json!({"paused": true})
            ),
            (
                json!("resume"),
                json!({"paused": true}),
                json!({"paused": false})
            ),
        ]
    );
    h.ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn flush_empties_the_line_but_not_the_site() {
    let h = Harness::start(ONE_THEN_QUEUE).await;
    let admitted = h.fill(3).await;
    h.stats_until("three waiting", |s| s["waiting"] == 3).await;
    let response = h.post("/rooms/main/flush").await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["flushed"], 3);
    let stats = h.stats_until("an empty line", |s| s["waiting"] == 0).await;
    assert_eq!(stats["active"], 1, "the session on the site stays");
    let (body, _) = h.visit(Some(&admitted)).await;
    assert_eq!(body["origin"], true, "and is still proxied");
    let lines = h.audit_lines();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["action"], "flush");
    assert_eq!(lines[0]["old"], json!({"waiting": 3}));
    assert_eq!(lines[0]["new"], json!({"waiting": 0}));
    h.ar.shutdown().await.unwrap();
}
