//! End to end on the embedded store: a real anteroom on loopback in front of a real origin,
//! driven by a real HTTP client.

use crate::common;

use std::time::{Duration, SystemTime};

use anteroom::queue::SettingsPatch;
use anteroom::token::CookieKeys;
use common::*;
use futures_util::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A room that lets exactly one visitor in (the fast path) and then nobody for 100 s.
const ONE_THEN_QUEUE: &str = "    rate: 0.01\n    max_active: 1000";

async fn json(response: reqwest::Response) -> serde_json::Value {
    response.json().await.unwrap()
}

#[tokio::test]
async fn fast_path_proxies_and_sets_the_cookie() {
    let (_origin, _dir, ar) = front("").await;
    let response = client()
        .get(format!("http://{}/hello?x=1", ar.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        status_header(&response),
        None,
        "proxied responses are the origin's"
    );
    let cookie = visitor_cookie(&response).expect("a new visitor gets a cookie");
    let set_cookie = response.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_owned();
    for attribute in ["HttpOnly", "SameSite=Lax", "Path=/"] {
        assert!(set_cookie.contains(attribute), "{set_cookie}");
    }
    assert!(!set_cookie.contains("Secure"), "secure_cookies is off");
    let body = json(response).await;
    assert_eq!(body["uri"], "/hello?x=1");
    assert_eq!(body["headers"]["x-forwarded-for"], "127.0.0.1");
    assert_eq!(body["headers"]["x-forwarded-proto"], "http");
    assert!(!cookie.is_empty());
    let stats = ar
        .app
        .admission
        .store_for_tests()
        .stats("main")
        .await
        .unwrap();
    assert_eq!((stats.total_admitted, stats.total_joined), (1, 0));
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn beyond_the_rate_visitors_queue_in_arrival_order() {
    let (origin, _dir, ar) = front(ONE_THEN_QUEUE).await;
    let http = client();
    let url = format!("http://{}/", ar.addr);
    let first = http.get(&url).send().await.unwrap();
    assert_eq!(json(first).await["origin"], true);
    let mut cookies = Vec::new();
    for expected in 1..=5u64 {
        let response = http.get(&url).send().await.unwrap();
        assert_eq!(status_header(&response).as_deref(), Some("waiting"));
        assert_eq!(response.headers()["cache-control"], "no-store");
        assert!(response.headers().contains_key("retry-after"));
        cookies.push(visitor_cookie(&response).unwrap());
        let html = response.text().await.unwrap();
        assert!(
            html.contains(&format!("You are number {expected} in line.")),
            "position {expected} in {html}"
        );
        if anteroom::http::pages::FRONTEND_BUILT_IN {
            assert!(html.contains("/__anteroom/static/"), "the board's assets");
            assert!(html.contains(&format!(r#"data-digit="{expected}""#)));
        } else {
            assert!(
                html.contains(&format!(
                    r#"id="ar-position" aria-hidden="true">{expected}<"#
                )),
                "the plain page's position {expected} in {html}"
            );
        }
        assert!(
            html.contains("http-equiv=\"refresh\""),
            "a meta refresh for pages without JavaScript"
        );
    }
    // Coming back keeps the place: reloads do not move anyone.
    for (i, cookie) in cookies.iter().enumerate() {
        let response = http
            .get(&url)
            .visitor(cookie)
            .header("accept", "application/json")
            .send()
            .await
            .unwrap();
        let body = json(response).await;
        assert_eq!(body["position"], i as u64 + 1);
        assert_eq!(body["waiting"], 5);
    }
    assert_eq!(origin.hits(), 1, "nobody but the first reached the origin");
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn forged_tampered_and_expired_cookies_never_admit() {
    let (origin, _dir, ar) = front(ONE_THEN_QUEUE).await;
    let http = client();
    let url = format!("http://{}/", ar.addr);
    let admitted = http.get(&url).send().await.unwrap();
    let good = visitor_cookie(&admitted).unwrap();
    assert_eq!(json(admitted).await["origin"], true);

    // The config hex-decodes the secret; build the same keys the server uses.
    let secret = hex::decode(COOKIE_SECRET).unwrap();
    let keys = CookieKeys::new(&secret, &[] as &[&[u8]]);
    let claim = keys
        .verify(&good, SystemTime::now())
        .expect("the server's cookie verifies");

    let other_keys = CookieKeys::new(&[7u8; 32], &[] as &[&[u8]]);
    let mut tampered = good.clone().into_bytes();
    let mid = tampered.len() / 2;
    tampered[mid] = if tampered[mid] == b'A' { b'B' } else { b'A' };
    let bad = [
        (
            "forged",
            other_keys.issue(claim.visitor, "main", SystemTime::now()),
        ),
        ("tampered", String::from_utf8(tampered).unwrap()),
        (
            "expired",
            keys.issue(
                claim.visitor,
                "main",
                SystemTime::now() - Duration::from_secs(25 * 3600),
            ),
        ),
        ("garbage", "%%%not-a-cookie%%%".to_owned()),
        (
            "other room",
            keys.issue(claim.visitor, "elsewhere", SystemTime::now()),
        ),
    ];
    for (what, cookie) in bad {
        let response = http.get(&url).visitor(&cookie).send().await.unwrap();
        assert_eq!(
            status_header(&response).as_deref(),
            Some("waiting"),
            "{what} cookie admitted"
        );
        let fresh = visitor_cookie(&response).expect("a fresh cookie replaces a bad one");
        assert_ne!(
            keys.verify(&fresh, SystemTime::now()).unwrap().visitor,
            claim.visitor,
            "{what}"
        );
    }
    assert_eq!(origin.hits(), 1);
    // The genuine cookie still gets through.
    let response = http.get(&url).visitor(&good).send().await.unwrap();
    assert_eq!(json(response).await["origin"], true);
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_visitor_cookie_is_not_forwarded() {
    let (_origin, _dir, ar) = front("").await;
    let http = client();
    let url = format!("http://{}/", ar.addr);
    let first = http.get(&url).send().await.unwrap();
    let cookie = visitor_cookie(&first).unwrap();
    let response = http
        .get(&url)
        .header("cookie", format!("a=1; ar_visitor={cookie}; b=2"))
        .send()
        .await
        .unwrap();
    let body = json(response).await;
    assert_eq!(body["headers"]["cookie"], "a=1; b=2");
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn reserved_paths_are_never_proxied() {
    let (origin, _dir, ar) = front("").await;
    let http = client();
    for path in [
        "/__anteroom/",
        "/__anteroom/nope",
        "/__anteroom/admin/../x",
        "/__anteroom",
        "/__anteroom/events/x",
    ] {
        let response = http
            .get(format!("http://{}{path}", ar.addr))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 404, "{path}");
    }
    let health = http
        .get(format!("http://{}/__anteroom/healthz", ar.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let ready = http
        .get(format!("http://{}/__anteroom/readyz", ar.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    assert_eq!(origin.hits(), 0);
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn json_clients_get_the_documented_body() {
    let (_origin, _dir, ar) = front(ONE_THEN_QUEUE).await;
    let http = client();
    let url = format!("http://{}/api/thing", ar.addr);
    http.get(&url).send().await.unwrap();
    let response = http
        .get(&url)
        .header("accept", "application/json, text/html;q=0.5")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    assert_eq!(status_header(&response).as_deref(), Some("waiting"));
    let retry_after: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(visitor_cookie(&response).is_some());
    let body = json(response).await;
    assert_eq!(body["status"], "waiting");
    assert_eq!(body["room"], "main");
    assert_eq!(body["position"], 1);
    assert_eq!(body["waiting"], 1);
    assert_eq!(body["phase"], "queueing");
    assert_eq!(body["paused"], false);
    assert_eq!(body["retry_after_secs"], retry_after);
    let eta = &body["eta_secs"];
    assert!(eta["min"].as_u64().unwrap() <= eta["max"].as_u64().unwrap());
    // An unknown reserved path answers problem+json to the same client.
    let problem = http
        .get(format!("http://{}/__anteroom/nope", ar.addr))
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(
        problem.headers()["content-type"],
        "application/problem+json"
    );
    assert_eq!(json(problem).await["status"], 404);
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn live_stream_reports_position_then_admission() {
    let (_origin, _dir, ar) = front(ONE_THEN_QUEUE).await;
    let http = client();
    let url = format!("http://{}/", ar.addr);
    http.get(&url).send().await.unwrap();
    let waiting = http.get(&url).send().await.unwrap();
    let cookie = visitor_cookie(&waiting).unwrap();

    let events_url = format!("http://{}/__anteroom/events", ar.addr);
    let no_cookie = http.get(&events_url).send().await.unwrap();
    assert_eq!(no_cookie.status(), 404, "a stream needs a place in line");

    let stream = http.get(&events_url).visitor(&cookie).send().await.unwrap();
    assert_eq!(stream.headers()["content-type"], "text/event-stream");
    // Let the visitor in as soon as the first position has been seen.
    let store = ar.app.admission.store_for_tests().clone();
    let mut stream = Events::new(stream);
    let mut events = vec![stream.next(Duration::from_secs(10)).await];
    store
        .update_settings(
            "main",
            &SettingsPatch {
                rate: Some(100.0),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    events.push(stream.next(Duration::from_secs(10)).await);
    assert_eq!(events[0].0, "position");
    assert_eq!(events[0].1["position"], 1);
    assert_eq!(events[0].1["waiting"], 1);
    assert_eq!(events[1].0, "admitted");
    // The page's next request goes through.
    let response = http.get(&url).visitor(&cookie).send().await.unwrap();
    assert_eq!(json(response).await["origin"], true);
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn websocket_passes_through_for_admitted_visitors() {
    // A WebSocket echo origin.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ws_origin = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut ws = tokio_tungstenite::accept_async(stream).await.unwrap();
                while let Some(Ok(msg)) = ws.next().await {
                    if msg.is_text() || msg.is_binary() {
                        use futures_util::SinkExt;
                        ws.send(msg).await.unwrap();
                    }
                }
            });
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let ar = start(&config(&format!("http://{ws_origin}"), dir.path(), "")).await;
    common::assert_websocket_echoes(ar.addr).await;
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_graceful_restart_keeps_every_place() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = config(&origin.url(), dir.path(), ONE_THEN_QUEUE);
    let ar = start(&config).await;
    let http = client();
    let url = format!("http://{}/", ar.addr);
    let admitted = visitor_cookie(&http.get(&url).send().await.unwrap()).unwrap();
    let mut cookies = Vec::new();
    for _ in 0..20 {
        cookies.push(visitor_cookie(&http.get(&url).send().await.unwrap()).unwrap());
    }
    ar.shutdown().await.unwrap();

    let ar = start(&config).await;
    let url = format!("http://{}/", ar.addr);
    for (i, cookie) in cookies.iter().enumerate() {
        let body = json(
            http.get(&url)
                .visitor(cookie)
                .header("accept", "application/json")
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(body["position"], i as u64 + 1, "visitor {i} after restart");
    }
    let on_site = http.get(&url).visitor(&admitted).send().await.unwrap();
    assert_eq!(json(on_site).await["origin"], true, "sessions survive too");
    ar.shutdown().await.unwrap();
}

async fn raw(addr: std::net::SocketAddr, request: &[u8]) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn hostile_requests_get_clear_errors() {
    let (origin, _dir, ar) = front("").await;
    let absolute = raw(
        ar.addr,
        format!(
            "GET http://{}/steal HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            origin.addr
        )
        .as_bytes(),
    )
    .await;
    assert!(absolute.starts_with("HTTP/1.1 400"), "{absolute}");
    let connect = raw(
        ar.addr,
        format!(
            "CONNECT {} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            origin.addr
        )
        .as_bytes(),
    )
    .await;
    assert!(connect.starts_with("HTTP/1.1 4"), "{connect}");
    let huge = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(200_000)
    );
    let oversized = raw(ar.addr, huge.as_bytes()).await;
    assert!(
        oversized.starts_with("HTTP/1.1 431") || oversized.is_empty(),
        "{oversized}"
    );
    let garbage = raw(ar.addr, b"\x16\x03\x01 not http at all\r\n\r\n").await;
    assert!(
        garbage.starts_with("HTTP/1.1 400") || garbage.is_empty(),
        "{garbage}"
    );
    let bad_header = raw(
        ar.addr,
        b"GET / HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n",
    )
    .await;
    assert!(bad_header.starts_with("HTTP/1.1 400"), "{bad_header}");
    let hostile_cookie = raw(ar.addr, b"GET / HTTP/1.1\r\nHost: x\r\nCookie: ar_visitor=\xff\xfe; ar_visitor===\r\nConnection: close\r\n\r\n").await;
    assert!(
        hostile_cookie.starts_with("HTTP/1.1 200"),
        "garbage cookies are no cookie: {hostile_cookie}"
    );
    assert_eq!(
        origin.hits(),
        1,
        "only the request with a garbage cookie (a new visitor) was proxied"
    );
    // Still serving after all of it.
    assert_eq!(
        client()
            .get(format!("http://{}/__anteroom/healthz", ar.addr))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn origin_down_is_a_502_and_slow_origin_a_504() {
    // Nothing listens on this port.
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead_addr = dead.local_addr().unwrap();
    drop(dead);
    let dir = tempfile::tempdir().unwrap();
    let ar = start(&config(&format!("http://{dead_addr}"), dir.path(), "")).await;
    let response = client()
        .get(format!("http://{}/", ar.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 502);
    ar.shutdown().await.unwrap();

    // An origin that accepts and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            held.push(s);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(&format!("http://{silent_addr}"), dir.path(), "");
    config.server.origin_timeout = Duration::from_millis(500);
    let ar = start(&config).await;
    let started = std::time::Instant::now();
    let response = client()
        .get(format!("http://{}/", ar.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 504);
    assert!(started.elapsed() < Duration::from_secs(5));
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn operators_can_replace_the_waiting_page_and_add_a_stylesheet() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("waiting.html");
    std::fs::write(
        &template,
        r#"<!doctype html><html lang="{{ t.code }}"><title>{{ title }}</title><p id="custom">You are {{ position }} of {{ waiting }}</p>{% if custom_css %}<style>{{ custom_css }}</style>{% endif %}"#,
    )
    .unwrap();
    let stylesheet = dir.path().join("brand.css");
    std::fs::write(&stylesheet, "main > h1 { color: rebeccapurple; }").unwrap();
    let yaml = format!(
        "cookie_secret: \"{COOKIE_SECRET}\"\nadmin_token: \"{ADMIN_TOKEN}\"\ndata_dir: \"{}\"\nwaiting_template: \"{}\"\nwaiting_stylesheet: \"{}\"\nrooms:\n  main:\n    origin: {}\n{ONE_THEN_QUEUE}\n",
        dir.path().join("data").display(),
        template.display(),
        stylesheet.display(),
        origin.url()
    );
    let config = anteroom::config::from_yaml_str(&yaml, "test.yaml").unwrap();
    let ar = start(&config).await;
    let http = client();
    let url = format!("http://{}/", ar.addr);
    http.get(&url).send().await.unwrap();
    http.get(&url).send().await.unwrap();
    let response = http.get(&url).send().await.unwrap();
    assert_eq!(status_header(&response).as_deref(), Some("waiting"));
    let html = response.text().await.unwrap();
    assert!(
        html.contains(r#"<p id="custom">You are 2 of 2</p>"#),
        "{html}"
    );
    assert!(
        html.contains("main > h1 { color: rebeccapurple; }"),
        "the stylesheet is not escaped: {html}"
    );
    ar.shutdown().await.unwrap();
}
