//! The admin API end to end: a real anteroom on loopback in front of a real origin, driven
//! by a real HTTP client with and without the admin token.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anteroom::admin;
use anteroom::run::Running;
use common::*;
use serde_json::{Value, json};

/// A room that lets exactly one visitor in (the fast path) and then nobody for 100 s.
const ONE_THEN_QUEUE: &str = "    rate: 0.01\n    max_active: 1000";
const API: &str = "/__anteroom/admin/api";

struct Harness {
    _origin: Origin,
    dir: tempfile::TempDir,
    ar: Running,
    http: reqwest::Client,
}

impl Harness {
    async fn start(room_extra: &str) -> Harness {
        let origin = Origin::start().await;
        let dir = tempfile::tempdir().unwrap();
        let ar = start(&config(&origin.url(), dir.path(), room_extra)).await;
        Harness {
            _origin: origin,
            dir,
            ar,
            http: client(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.ar.addr)
    }

    fn api(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, self.url(&format!("{API}{path}")))
            .bearer_auth(ADMIN_TOKEN)
    }

    async fn get(&self, path: &str) -> Value {
        let response = self.api(reqwest::Method::GET, path).send().await.unwrap();
        assert_eq!(response.status(), 200, "GET {path}");
        assert_eq!(response.headers()["content-type"], "application/json");
        response.json().await.unwrap()
    }

    async fn post(&self, path: &str) -> reqwest::Response {
        self.api(reqwest::Method::POST, path).send().await.unwrap()
    }

    async fn put_config(&self, body: impl Into<reqwest::Body>) -> reqwest::Response {
        self.api(reqwest::Method::PUT, "/rooms/main/config")
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap()
    }

    async fn stats(&self) -> Value {
        self.get("/rooms/main/stats").await
    }

    /// Polls the room's cached stats until `ok` holds (or panics after a few seconds).
    async fn stats_until(&self, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
        self.stats_until_within(Duration::from_secs(5), what, ok)
            .await
    }

    /// [`Harness::stats_until`], panicking after `bound`.
    async fn stats_until_within(
        &self,
        bound: Duration,
        what: &str,
        ok: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + bound;
        loop {
            let stats = self.stats().await;
            if ok(&stats) {
                return stats;
            }
            assert!(Instant::now() < deadline, "{what}: last stats {stats}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the statistics cache has been read from the store again.
    async fn cache_refreshed(&self) {
        let cached = || self.ar.app.admission.cached_stats("main").unwrap().read_at;
        let before = cached();
        let deadline = Instant::now() + Duration::from_secs(5);
        while cached() == before {
            assert!(Instant::now() < deadline, "the statistics cache refreshes");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A visitor's request to the site, as a JSON client.
    async fn visit(&self, cookie: Option<&str>) -> (Value, Option<String>) {
        let mut request = self
            .http
            .get(self.url("/"))
            .header("accept", "application/json");
        if let Some(cookie) = cookie {
            request = request.header("cookie", format!("ar_visitor={cookie}"));
        }
        let response = request.send().await.unwrap();
        let cookie = visitor_cookie(&response);
        (response.json().await.unwrap(), cookie)
    }

    /// One visitor let in by the fast path, then `waiting` more in line.
    async fn fill(&self, waiting: u64) -> String {
        let (body, cookie) = self.visit(None).await;
        assert_eq!(body["origin"], true, "the first visitor is let straight in");
        for _ in 0..waiting {
            let (body, _) = self.visit(None).await;
            assert_eq!(body["status"], "waiting");
        }
        cookie.unwrap()
    }

    fn audit_lines(&self) -> Vec<Value> {
        match std::fs::read_to_string(self.dir.path().join("audit.log")) {
            Ok(text) => text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => panic!("{e}"),
        }
    }

    async fn store_settings(&self) -> anteroom::queue::RoomSettings {
        self.ar
            .app
            .admission
            .store_for_tests()
            .stats("main")
            .await
            .unwrap()
            .settings
    }
}

async fn problem(response: reqwest::Response) -> Value {
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    response.json().await.unwrap()
}

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

/// One sample of the Prometheus text format.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A small parser for the Prometheus text exposition format (0.0.4): `# HELP` and `# TYPE`
/// lines, then `name{label="value",...} value` samples. Panics on anything malformed.
fn parse_prometheus(text: &str) -> (BTreeMap<String, String>, Vec<Sample>) {
    fn is_name(s: &str) -> bool {
        let mut chars = s.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    }
    let mut types = BTreeMap::new();
    let mut samples = Vec::new();
    for line in text.lines() {
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            assert!(is_name(name), "{line}");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "{line}"
            );
            assert!(
                types.insert(name.to_owned(), kind.to_owned()).is_none(),
                "one TYPE per family: {line}"
            );
            continue;
        }
        if line.starts_with("# HELP ") || line == "# EOF" {
            continue;
        }
        assert!(!line.starts_with('#'), "unknown comment {line}");
        let (series, value) = line.rsplit_once(' ').expect("a sample has a value");
        let value = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("value in {line}")),
        };
        let (name, labels) = match series.split_once('{') {
            None => (series, BTreeMap::new()),
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').expect("labels end with }");
                let mut labels = BTreeMap::new();
                let mut rest = body;
                while !rest.is_empty() {
                    let (key, after) = rest.split_once("=\"").expect("label=\"value\"");
                    assert!(is_name(key), "label name {key} in {line}");
                    let mut value = String::new();
                    let mut chars = after.char_indices();
                    let end = loop {
                        match chars.next().expect("closing quote") {
                            (i, '"') => break i,
                            (_, '\\') => match chars.next().unwrap().1 {
                                'n' => value.push('\n'),
                                c => value.push(c),
                            },
                            (_, c) => value.push(c),
                        }
                    };
                    labels.insert(key.to_owned(), value);
                    rest = after[end + 1..].trim_start_matches(',');
                }
                (name, labels)
            }
        };
        assert!(is_name(name), "{line}");
        samples.push(Sample {
            name: name.to_owned(),
            labels,
            value,
        });
    }
    // Every sample belongs to a declared family.
    for s in &samples {
        let family = [&s.name[..]]
            .into_iter()
            .chain(
                ["_bucket", "_sum", "_count"]
                    .iter()
                    .filter_map(|suffix| s.name.strip_suffix(suffix)),
            )
            .find(|n| types.contains_key(*n));
        assert!(family.is_some(), "{} has no TYPE", s.name);
    }
    (types, samples)
}

fn sample(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let want: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    samples
        .iter()
        .find(|s| s.name == name && s.labels == want)
        .map(|s| s.value)
}

#[tokio::test]
async fn metrics_parse_as_prometheus_text_with_the_room_counters() {
    let h = Harness::start(ONE_THEN_QUEUE).await;
    h.fill(3).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    let (types, samples, text) = loop {
        let response = h
            .api(reqwest::Method::GET, "/metrics")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(
            response.headers()["content-type"],
            "text/plain; version=0.0.4; charset=utf-8"
        );
        let text = response.text().await.unwrap();
        let (types, samples) = parse_prometheus(&text);
        if sample(&samples, "anteroom_waiting", &[("room", "main")]) == Some(3.0) {
            break (types, samples, text);
        }
        assert!(Instant::now() < deadline, "never 3 waiting:\n{text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        text.contains("anteroom_waiting{room=\"main\"} 3\n"),
        "{text}"
    );
    let main = [("room", "main")];
    let expect = [
        ("anteroom_active", &main[..], 1.0),
        ("anteroom_max_active", &main[..], 1000.0),
        ("anteroom_rate", &main[..], 0.01),
        ("anteroom_paused", &main[..], 0.0),
        ("anteroom_joined_total", &main[..], 3.0),
        ("anteroom_admitted_total", &main[..], 1.0),
        ("anteroom_expired_total", &main[..], 0.0),
        ("anteroom_abandoned_total", &main[..], 0.0),
        ("anteroom_refused_total", &main[..], 0.0),
        ("anteroom_session_ttl_seconds", &main[..], 300.0),
        ("anteroom_store_up", &[][..], 1.0),
        ("anteroom_events_dropped_total", &[][..], 0.0),
        ("anteroom_events_published_total", &[][..], 0.0),
        ("anteroom_fail_open", &[][..], 0.0),
        ("anteroom_fail_open_enabled", &[][..], 0.0),
        ("anteroom_sse_streams", &[][..], 0.0),
        (
            "anteroom_proxy_request_duration_seconds_count",
            &[("room", "main"), ("status_class", "2xx")][..],
            1.0,
        ),
    ];
    for (name, labels, value) in expect {
        assert_eq!(
            sample(&samples, name, labels),
            Some(value),
            "{name}{labels:?} in\n{text}"
        );
    }
    assert_eq!(types["anteroom_joined_total"], "counter");
    assert_eq!(types["anteroom_waiting"], "gauge");
    assert_eq!(
        types["anteroom_proxy_request_duration_seconds"],
        "histogram"
    );
    assert!(
        sample(&samples, "anteroom_admission_pass_seconds", &main).is_some(),
        "the last pass's duration"
    );
    // Histogram buckets are cumulative and end at +Inf = count.
    let buckets: Vec<f64> = samples
        .iter()
        .filter(|s| {
            s.name == "anteroom_proxy_request_duration_seconds_bucket"
                && s.labels.get("status_class").map(String::as_str) == Some("2xx")
        })
        .map(|s| s.value)
        .collect();
    assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");
    assert_eq!(buckets.last(), Some(&1.0));
    // What operators watch of the replica, in the same text: its build, its process, what
    // its listener has open (this scrape's own connection at least).
    assert_eq!(
        types["anteroom_build_info"], "gauge",
        "the build's labels, value 1"
    );
    assert!(
        samples
            .iter()
            .any(|s| s.name == "anteroom_build_info" && s.value == 1.0),
        "{text}"
    );
    let public = [("listener", "public")];
    assert!(sample(&samples, "anteroom_open_connections", &public).is_some_and(|n| n >= 1.0));
    assert_eq!(
        sample(&samples, "anteroom_open_http2_streams", &public),
        Some(0.0)
    );
    let fds = sample(&samples, "process_open_fds", &[]).unwrap();
    assert!(fds > 0.0 && fds < sample(&samples, "process_max_fds", &[]).unwrap());
    h.ar.shutdown().await.unwrap();
}

/// The honest ETA end to end: `eta` in the room's stats and in each room of the list, with the
/// fields the OpenAPI document gives (both ways), and the `anteroom_eta_*` metrics, before
/// anyone shown a range is admitted and after some are. Forty join a paused room at 4 a
/// second: nothing has been seen of the line, so everyone is told "estimating" (no
/// promise). After the resume the room sees its line move; once it has seen enough it
/// promises ranges, the visitors still waiting are shown one when they ask again, and their
/// admissions are what the report and the metrics count.
#[tokio::test]
async fn eta_is_in_the_stats_and_the_metrics() {
    let h = Harness::start("    rate: 4\n    max_active: 100000\n    abandon_after: 1h").await;
    assert_eq!(h.post("/rooms/main/pause").await.status(), 200);
    let mut cookies = Vec::new();
    for _ in 0..40 {
        let (body, cookie) = h.visit(None).await;
        assert_eq!(body["status"], "waiting", "{body}");
        cookies.push(cookie.unwrap());
    }
    h.post("/rooms/main/resume").await;
    h.cache_refreshed().await;
    let (body, _) = h.visit(Some(&cookies[39])).await;
    assert_eq!(
        body["eta_secs"]["estimating"], true,
        "nothing seen yet: {body}"
    );
    assert_eq!(h.stats().await["estimating"], true);
    let metrics = || async {
        let response = h
            .api(reqwest::Method::GET, "/metrics")
            .send()
            .await
            .unwrap();
        let text = response.text().await.unwrap();
        let (types, samples) = parse_prometheus(&text);
        (types, samples, text)
    };
    let main = [("room", "main")];
    let stats = h.stats().await;
    assert_eq!(
        stats["eta"],
        json!({"admitted": 0, "within_range": null, "median_error_secs": null})
    );
    assert_eq!(stats["eta_revised"], 0);
    let (_, samples, text) = metrics().await;
    assert_eq!(
        sample(&samples, "anteroom_eta_admitted", &main),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        sample(&samples, "anteroom_eta_forgotten_total", &main),
        Some(0.0),
        "{text}"
    );
    assert!(
        !text.contains("anteroom_eta_within_range_ratio{"),
        "nobody yet:\n{text}"
    );

    // The stats carry exactly the fields the document describes, and `eta` its own.
    let doc: Value = serde_json::from_str(admin::openapi_json()).unwrap();
    let schema = &doc["components"]["schemas"];
    let keys = |v: &Value| {
        v.as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect::<BTreeSet<_>>()
    };
    assert_eq!(keys(&stats), keys(&schema["RoomStats"]["properties"]));
    assert_eq!(
        keys(&stats["eta"]),
        keys(&schema["EtaReport"]["properties"])
    );
    assert_eq!(
        schema["RoomStats"]["properties"]["eta"]["$ref"],
        "#/components/schemas/EtaReport"
    );

    // 10 admissions over 5 s of a waiting line: the room promises ranges, and those still
    // waiting get one when they next ask.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut promised = 0;
    while promised == 0 {
        assert!(Instant::now() < deadline, "the room stopped estimating");
        tokio::time::sleep(Duration::from_millis(200)).await;
        for cookie in &cookies {
            let (body, _) = h.visit(Some(cookie)).await;
            if body["status"] == "waiting" && body["eta_secs"]["estimating"].is_null() {
                let (min, max) = (&body["eta_secs"]["min"], &body["eta_secs"]["max"]);
                assert!(min.as_u64().unwrap() <= max.as_u64().unwrap(), "{body}");
                promised += 1;
            }
        }
    }
    let stats = h
        .stats_until_within(
            Duration::from_secs(15),
            "those promised are admitted",
            |s| s["eta"]["admitted"] == promised && s["waiting"] == 0,
        )
        .await;
    assert_eq!(stats["estimating"], false, "{stats}");
    let within = stats["eta"]["within_range"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&within), "{stats}");
    let median = stats["eta"]["median_error_secs"].as_f64().unwrap();
    let rooms = h.get("/rooms").await;
    assert_eq!(rooms["rooms"][0]["eta"], stats["eta"]);

    let (types, samples, text) = metrics().await;
    assert_eq!(
        sample(&samples, "anteroom_eta_admitted", &main),
        Some(promised as f64),
        "{text}"
    );
    // The stats' JSON and the metrics' text print the ratio each their own way: equal to
    // the last digit or so.
    assert!(
        sample(&samples, "anteroom_eta_within_range_ratio", &main)
            .is_some_and(|r| (r - within).abs() < 1e-9),
        "{within} in the stats: {text}"
    );
    assert_eq!(
        sample(&samples, "anteroom_eta_median_error_seconds", &main),
        Some(median),
        "{text}"
    );
    for name in [
        "anteroom_eta_admitted",
        "anteroom_eta_within_range_ratio",
        "anteroom_eta_median_error_seconds",
    ] {
        assert_eq!(types[name], "gauge", "{name}");
    }
    assert_eq!(types["anteroom_eta_forgotten_total"], "counter");
    assert_eq!(types["anteroom_eta_revised_total"], "counter");
    h.ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_openapi_document_matches_the_routes_and_the_server() {
    let h = Harness::start("").await;
    // Served without a token, and the same as the built-in document.
    let response = h
        .http
        .get(h.url("/__anteroom/admin/api/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let doc: Value = response.json().await.unwrap();
    assert_eq!(
        doc,
        serde_json::from_str::<Value>(admin::openapi_json()).unwrap()
    );
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));

    // Every documented path+method is routed, and every route is documented.
    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if method == "parameters" {
                continue;
            }
            let needs_token = op.get("security") != Some(&json!([]));
            documented.insert((method.to_uppercase(), path.clone(), needs_token));
        }
    }
    let routed: BTreeSet<_> = admin::routes()
        .iter()
        .map(|r| (r.method.to_string(), r.path.to_owned(), r.auth))
        .collect();
    assert_eq!(documented, routed);

    // The real server answers with documented status codes.
    let documented_status = |method: &str, path: &str, status: u16| -> bool {
        let responses = &doc["paths"][path][method.to_lowercase()]["responses"];
        responses.get(status.to_string()).is_some()
    };
    let mut checked = 0;
    for route in admin::routes() {
        let method = reqwest::Method::from_bytes(route.method.as_str().as_bytes()).unwrap();
        // A route of one visitor needs one waiting (the room paused, so nobody is let in).
        let waiting_ref = if route.path.contains("{ref}") {
            assert_eq!(h.post("/rooms/main/pause").await.status(), 200);
            let (body, _) = h.visit(None).await;
            assert_eq!(body["status"], "waiting");
            let line = h.get("/rooms/main/queue").await;
            line["entries"][0]["ref"].as_str().unwrap().to_owned()
        } else {
            String::new()
        };
        // A route of one event needs one: the POST route made it just before.
        let event_id = if route.path.contains("{id}") {
            let list = h.get("/rooms/main/events").await;
            list["events"][0]["id"].as_str().unwrap().to_owned()
        } else {
            String::new()
        };
        let path_of = |room: &str| {
            route
                .path
                .replace("{room}", room)
                .replace("{ref}", &waiting_ref)
                .replace("{id}", &event_id)
                // `{target}`: the ban the POST route made just before (routes are in order).
                .replace("{target}", "192.0.2.1")
        };
        let body = match route.op {
            admin::Op::RoomConfig => r#"{"rate": 20}"#,
            admin::Op::Ban => r#"{"target": "192.0.2.1", "duration_secs": 60, "reason": "t"}"#,
            admin::Op::CreateEvent | admin::Op::ReplaceEvent => {
                r#"{"queue_opens_at": "2099-01-01T10:00:00Z", "admits_at": "2099-01-01T11:00:00Z"}"#
            }
            _ => "",
        };
        let send = |room: &str, token: Option<&str>, body: String| {
            let mut request = h
                .http
                .request(method.clone(), h.url(&path_of(room)))
                .body(body);
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            request.send()
        };
        let ok = match route.op {
            admin::Op::Ban | admin::Op::CreateEvent => 201,
            admin::Op::DeleteEvent => 204,
            _ => 200,
        };
        let mut expect = vec![(
            send("main", Some(ADMIN_TOKEN), body.into()).await.unwrap(),
            ok,
        )];
        if route.auth {
            expect.push((send("main", None, body.into()).await.unwrap(), 401));
        }
        if route.path.contains("{room}") {
            expect.push((
                send("nope", Some(ADMIN_TOKEN), body.into()).await.unwrap(),
                404,
            ));
        }
        if route.op == admin::Op::RoomConfig {
            expect.push((
                send("main", Some(ADMIN_TOKEN), r#"{"rate": -1}"#.into())
                    .await
                    .unwrap(),
                400,
            ));
            expect.push((
                send("main", Some(ADMIN_TOKEN), "x".repeat(65 * 1024 + 1))
                    .await
                    .unwrap(),
                413,
            ));
        }
        if route.op == admin::Op::Queue {
            for bad in ["?limit=0", "?limit=1001", "?ref=x", "?sort=1"] {
                let url = format!("{}{bad}", h.url(&path_of("main")));
                let response = h
                    .http
                    .get(url)
                    .bearer_auth(ADMIN_TOKEN)
                    .send()
                    .await
                    .unwrap();
                expect.push((response, 422));
            }
        }
        if route.op == admin::Op::Front {
            let stranger = anteroom::queue::VisitorId::random().reference().to_string();
            let unknown = route
                .path
                .replace("{room}", "main")
                .replace("{ref}", &stranger);
            expect.push((h.post(&unknown.replace(API, "")).await, 404));
            let malformed = route.path.replace("{room}", "main").replace("{ref}", "x");
            expect.push((h.post(&malformed.replace(API, "")).await, 422));
        }
        let wrong_method = h
            .http
            .request(reqwest::Method::PATCH, h.url(&path_of("main")))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        expect.push((wrong_method, 405));
        for (response, want) in expect {
            let got = response.status().as_u16();
            assert_eq!(got, want, "{} {}", route.method, route.path);
            assert!(
                documented_status(route.method.as_str(), route.path, got),
                "{} {} answered {got}, which the document does not list",
                route.method,
                route.path
            );
            checked += 1;
        }
    }
    assert!(checked >= 30, "{checked}");
    h.ar.shutdown().await.unwrap();
}

/// The embedded store behind a switch: while `down`, every operation is `Unavailable`.
struct Switchable {
    inner: anteroom::queue::MemoryStore,
    down: std::sync::atomic::AtomicBool,
}

impl Switchable {
    fn check(&self) -> anteroom::queue::StoreResult<()> {
        if self.down.load(std::sync::atomic::Ordering::SeqCst) {
            Err(anteroom::queue::StoreError::Unavailable(
                "switched off by the test".into(),
            ))
        } else {
            Ok(())
        }
    }
}

#[async_trait::async_trait]
impl anteroom::queue::QueueStore for Switchable {
    async fn open_room(
        &self,
        room: &str,
        seed: &anteroom::queue::RoomSettings,
        policy: &anteroom::queue::RoomPolicy,
        reseed: bool,
    ) -> anteroom::queue::StoreResult<anteroom::queue::Seeded> {
        self.check()?;
        self.inner.open_room(room, seed, policy, reseed).await
    }
    async fn resolve_with(
        &self,
        room: &str,
        visitor: anteroom::queue::VisitorId,
        client: anteroom::queue::ClientKey,
        join: anteroom::queue::Join,
    ) -> anteroom::queue::StoreResult<anteroom::queue::Resolution> {
        self.check()?;
        self.inner.resolve_with(room, visitor, client, join).await
    }
    async fn queue(
        &self,
        room: &str,
        query: anteroom::queue::QueueQuery,
    ) -> anteroom::queue::StoreResult<Vec<anteroom::queue::WaitingEntry>> {
        self.check()?;
        self.inner.queue(room, query).await
    }
    async fn move_to_front(
        &self,
        room: &str,
        reference: anteroom::queue::VisitorRef,
    ) -> anteroom::queue::StoreResult<anteroom::queue::Place> {
        self.check()?;
        self.inner.move_to_front(room, reference).await
    }
    async fn end_session(
        &self,
        room: &str,
        visitor: anteroom::queue::VisitorId,
    ) -> anteroom::queue::StoreResult<bool> {
        self.check()?;
        self.inner.end_session(room, visitor).await
    }
    async fn spend_grant(
        &self,
        room: &str,
        nonce: &str,
        visitor: anteroom::queue::VisitorId,
        expires_at_ms: u64,
    ) -> anteroom::queue::StoreResult<anteroom::queue::GrantUse> {
        self.check()?;
        self.inner
            .spend_grant(room, nonce, visitor, expires_at_ms)
            .await
    }
    async fn resolve_spending(
        &self,
        room: &str,
        visitor: anteroom::queue::VisitorId,
        client: anteroom::queue::ClientKey,
        challenge: anteroom::queue::ChallengeSpend<'_>,
    ) -> anteroom::queue::StoreResult<anteroom::queue::Spent> {
        self.check()?;
        self.inner
            .resolve_spending(room, visitor, client, challenge)
            .await
    }
    async fn touch_sessions(
        &self,
        room: &str,
        visitors: &[anteroom::queue::VisitorId],
    ) -> anteroom::queue::StoreResult<Vec<bool>> {
        self.check()?;
        self.inner.touch_sessions(room, visitors).await
    }
    async fn heartbeat(
        &self,
        room: &str,
        visitors: &[anteroom::queue::VisitorId],
    ) -> anteroom::queue::StoreResult<Vec<anteroom::queue::VisitorState>> {
        self.check()?;
        self.inner.heartbeat(room, visitors).await
    }
    async fn admit_pass(
        &self,
        room: &str,
    ) -> anteroom::queue::StoreResult<anteroom::queue::PassReport> {
        self.check()?;
        self.inner.admit_pass(room).await
    }
    async fn stats(&self, room: &str) -> anteroom::queue::StoreResult<anteroom::queue::RoomStats> {
        self.check()?;
        self.inner.stats(room).await
    }
    async fn draw(
        &self,
        room: &str,
        hashes: bool,
    ) -> anteroom::queue::StoreResult<anteroom::queue::DrawRecord> {
        self.check()?;
        self.inner.draw(room, hashes).await
    }
    async fn update_settings(
        &self,
        room: &str,
        patch: &anteroom::queue::SettingsPatch,
    ) -> anteroom::queue::StoreResult<anteroom::queue::RoomSettings> {
        self.check()?;
        self.inner.update_settings(room, patch).await
    }
    async fn flush(&self, room: &str) -> anteroom::queue::StoreResult<u64> {
        self.check()?;
        self.inner.flush(room).await
    }
    async fn ping(&self) -> anteroom::queue::StoreResult<()> {
        self.check()
    }
    async fn persist(&self) -> anteroom::queue::StoreResult<()> {
        Ok(())
    }
}

#[tokio::test]
async fn through_a_store_outage_status_and_metrics_answer_and_changes_are_refused() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&origin.url(), dir.path(), ONE_THEN_QUEUE);
    cfg.fail_open = true;
    cfg.fail_open_after = Duration::from_millis(600);
    let store = std::sync::Arc::new(Switchable {
        inner: anteroom::queue::MemoryStore::in_memory(anteroom::clock::Clock::system()),
        down: false.into(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ar = anteroom::run::start(&cfg, store.clone(), listener, false)
        .await
        .unwrap();
    let h = Harness {
        _origin: origin,
        dir,
        ar,
        http: client(),
    };
    h.fill(2).await;
    h.stats_until("two waiting", |s| s["waiting"] == 2).await;

    store.down.store(true, std::sync::atomic::Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        let status = h.get("/status").await;
        if status["fail_open"]["active"] == true {
            break status;
        }
        assert!(Instant::now() < deadline, "never failed open: {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status["store"]["up"], false);
    assert!(status["store"]["down_for_secs"].as_f64().unwrap() >= 0.6);
    assert_eq!(status["fail_open"]["enabled"], true);

    // The last known counters, from the cache.
    let stats = h.stats().await;
    assert_eq!(stats["waiting"], 2);
    let metrics = h
        .api(reqwest::Method::GET, "/metrics")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let (_, samples) = parse_prometheus(&metrics);
    let main = [("room", "main")];
    assert_eq!(sample(&samples, "anteroom_waiting", &main), Some(2.0));
    assert_eq!(sample(&samples, "anteroom_store_up", &[]), Some(0.0));
    assert_eq!(sample(&samples, "anteroom_fail_open", &[]), Some(1.0));
    assert!(sample(&samples, "anteroom_store_down_seconds", &[]).unwrap() >= 0.6);

    // Changes cannot reach the store: 503, stalled, nothing audited.
    for response in [
        h.post("/rooms/main/pause").await,
        h.post("/rooms/main/flush").await,
        h.put_config(r#"{"rate": 3}"#).await,
    ] {
        assert_eq!(response.status(), 503);
        assert_eq!(status_header(&response).as_deref(), Some("stalled"));
        problem(response).await;
    }
    assert!(h.audit_lines().is_empty());

    // Back up: health recovers, nothing was changed.
    store.down.store(false, std::sync::atomic::Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(5);
    while h.get("/status").await["store"]["up"] != true {
        assert!(Instant::now() < deadline, "store never came back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let settings = h.store_settings().await;
    assert!(!settings.paused);
    assert_eq!(settings.rate, 0.01);
    h.ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_streamed_body_over_the_cap_is_refused() {
    let h = Harness::start("").await;
    let before = h.store_settings().await;
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        std::iter::once(Ok(b"{\"rate\": 5, \"pad\": \"".to_vec()))
            .chain((0..80).map(|_| Ok(vec![b'x'; 1024])))
            .chain(std::iter::once(Ok(b"\"}".to_vec())))
            .collect();
    let body = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
    let response = h.put_config(body).await;
    assert_eq!(response.status(), 413);
    // The rest of the body is not read: the connection is not offered for reuse.
    assert_eq!(response.headers()["connection"], "close");
    assert_eq!(problem(response).await["field"], "body");
    assert_eq!(h.store_settings().await, before);
    h.ar.shutdown().await.unwrap();
}

impl Harness {
    async fn readyz(&self) -> u16 {
        self.http
            .get(self.url("/__anteroom/readyz"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }
}

/// An anteroom on a [`Switchable`] store, failing open after 600 ms when `fail_open`.
async fn on_switchable(fail_open: bool) -> (Harness, std::sync::Arc<Switchable>) {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&origin.url(), dir.path(), ONE_THEN_QUEUE);
    cfg.fail_open = fail_open;
    cfg.fail_open_after = Duration::from_millis(600);
    let store = std::sync::Arc::new(Switchable {
        inner: anteroom::queue::MemoryStore::in_memory(anteroom::clock::Clock::system()),
        down: false.into(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ar = anteroom::run::start(&cfg, store.clone(), listener, false)
        .await
        .unwrap();
    let h = Harness {
        _origin: origin,
        dir,
        ar,
        http: client(),
    };
    (h, store)
}

#[tokio::test]
async fn readyz_through_an_outage_with_fail_open_is_503_only_until_failing_open() {
    let (h, store) = on_switchable(true).await;
    assert_eq!(h.readyz().await, 200);
    let down_at = Instant::now();
    store.down.store(true, std::sync::atomic::Ordering::SeqCst);
    // Down but not yet failing open: take this replica out of rotation.
    assert_eq!(h.readyz().await, 503);
    // Failing open on purpose: every replica sees the same outage, so all stay in.
    let deadline = Instant::now() + Duration::from_secs(5);
    while h.readyz().await != 200 {
        assert!(
            Instant::now() < deadline,
            "readyz never recovered while failing open"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(down_at.elapsed() >= Duration::from_millis(600));
    assert_eq!(h.get("/status").await["fail_open"]["active"], true);
    // Visitors are proxied meanwhile.
    let response = h.http.get(h.url("/")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    store.down.store(false, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(h.readyz().await, 200);
    h.ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn readyz_through_an_outage_without_fail_open_stays_503() {
    let (h, store) = on_switchable(false).await;
    assert_eq!(h.readyz().await, 200);
    store.down.store(true, std::sync::atomic::Ordering::SeqCst);
    // Well past what fail_open_after would be: still 503, since nobody is let through.
    for _ in 0..10 {
        assert_eq!(h.readyz().await, 503);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(h.http.get(h.url("/")).send().await.unwrap().status(), 503);
    store.down.store(false, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(h.readyz().await, 200);
    h.ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_drain_turns_readyz_503_at_once_and_serves_for_the_drain_delay() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&origin.url(), dir.path(), "");
    cfg.server.drain_delay = Duration::from_millis(800);
    let ar = start(&cfg).await;
    let addr = ar.addr;
    let http = client();
    let url = |p: &str| format!("http://{addr}{p}");
    assert_eq!(
        http.get(url("/__anteroom/readyz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );

    let stop = ar.stop_handle();
    let draining_at = Instant::now();
    stop.cancel();
    let done = tokio::spawn(ar.wait());
    // Readiness is 503 at once (a fresh connection, so it is the listener that answers).
    let fresh = client();
    let ready = fresh.get(url("/__anteroom/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    assert_eq!(ready.text().await.unwrap(), "draining\n");
    assert!(draining_at.elapsed() < Duration::from_millis(100));
    // ...while the site is still served, on new connections too, for the delay.
    let before = origin.hits();
    let page = client().get(url("/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(origin.hits(), before + 1);
    assert!(draining_at.elapsed() < Duration::from_millis(800));
    // After the delay the listener closes and the instance stops.
    done.await.unwrap().unwrap();
    assert!(draining_at.elapsed() >= Duration::from_millis(800));
    assert!(
        client().get(url("/")).send().await.is_err(),
        "listener closed"
    );
}

const METRICS_TOKEN: &str = "prometheus-reads-only-0123";

/// An anteroom with its own admin listener and a metrics token, plus `top` YAML.
async fn with_admin_listener(top: &str) -> (Origin, tempfile::TempDir, Running) {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "listen: \"127.0.0.1:0\"\nadmin_listen: \"127.0.0.1:0\"\nmetrics_token: \"{METRICS_TOKEN}\"\n{top}\nadmit_interval: 100ms\ncookie_secret: \"{COOKIE_SECRET}\"\nadmin_token: \"{ADMIN_TOKEN}\"\ndata_dir: \"{}\"\nrooms:\n  main:\n    origin: {}\n",
        dir.path().display(),
        origin.url()
    );
    let cfg = anteroom::config::from_yaml_str(&yaml, "test.yaml").unwrap();
    let ar = start(&cfg).await;
    (origin, dir, ar)
}

async fn status_of(request: reqwest::RequestBuilder) -> u16 {
    request.send().await.unwrap().status().as_u16()
}

#[tokio::test]
async fn the_admin_listener_serves_the_admin_and_the_public_one_answers_404() {
    let (_origin, _dir, ar) = with_admin_listener("").await;
    let admin = ar.admin_addr.expect("an admin listener");
    assert_ne!(admin, ar.addr);
    let http = client();
    let public = |p: &str| format!("http://{}{p}", ar.addr);
    let private = |p: &str| format!("http://{admin}{p}");

    // Public: nothing of the admin, with or without the token; the site still works.
    for path in [
        "/__anteroom/admin",
        "/__anteroom/admin/",
        "/__anteroom/admin/api/status",
    ] {
        assert_eq!(
            status_of(http.get(public(path)).bearer_auth(ADMIN_TOKEN)).await,
            404,
            "{path}"
        );
    }
    let pause = public("/__anteroom/admin/api/rooms/main/pause");
    assert_eq!(
        status_of(http.post(&pause).bearer_auth(ADMIN_TOKEN)).await,
        404
    );
    assert_eq!(status_of(http.get(public("/"))).await, 200);

    // Admin listener: the control room, the API, the metrics at both paths; never the site.
    assert_eq!(
        status_of(http.get(private("/__anteroom/admin/"))).await,
        200
    );
    let status = http
        .get(private("/__anteroom/admin/api/status"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(status.status(), 200);
    assert_eq!(status.json::<Value>().await.unwrap()["store"]["up"], true);
    assert_eq!(status_of(http.get(private("/"))).await, 404);
    assert_eq!(
        status_of(http.get(private("/__anteroom/healthz"))).await,
        200
    );
    assert_eq!(
        status_of(http.get(private("/__anteroom/readyz"))).await,
        200
    );
    for path in ["/metrics", "/__anteroom/admin/api/metrics"] {
        assert_eq!(
            status_of(http.get(private(path))).await,
            401,
            "{path} needs a token"
        );
        for token in [METRICS_TOKEN, ADMIN_TOKEN] {
            let response = http
                .get(private(path))
                .bearer_auth(token)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200, "{path}");
            let (_, samples) = parse_prometheus(&response.text().await.unwrap());
            assert_eq!(
                sample(&samples, "anteroom_waiting", &[("room", "main")]),
                Some(0.0)
            );
        }
    }

    // The metrics token reads the metrics and nothing else: 403, and nothing changes.
    let admin_pause = private("/__anteroom/admin/api/rooms/main/pause");
    let response = http
        .post(&admin_pause)
        .bearer_auth(METRICS_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    assert_eq!(problem(response).await["title"], "Forbidden");
    for path in [
        "/__anteroom/admin/api/status",
        "/__anteroom/admin/api/rooms",
    ] {
        assert_eq!(
            status_of(http.get(private(path)).bearer_auth(METRICS_TOKEN)).await,
            403,
            "{path}"
        );
    }
    let flush = private("/__anteroom/admin/api/rooms/main/flush");
    assert_eq!(
        status_of(http.post(&flush).bearer_auth(METRICS_TOKEN)).await,
        403
    );
    let rooms: Value = http
        .get(private("/__anteroom/admin/api/rooms"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        rooms["rooms"][0]["paused"], false,
        "the metrics token paused nothing"
    );
    // The admin token still can.
    assert_eq!(
        status_of(http.post(&admin_pause).bearer_auth(ADMIN_TOKEN)).await,
        200
    );
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn admin_allow_refuses_other_clients_with_403_and_believes_only_trusted_proxies() {
    // Loopback is not allowed; 10.9.0.0/16 is, but only when a trusted proxy says so.
    let (_origin, _dir, ar) = with_admin_listener("admin_allow: [10.9.0.0/16]").await;
    let admin = ar.admin_addr.unwrap();
    let http = client();
    let status = format!("http://{admin}/__anteroom/admin/api/status");
    assert_eq!(
        status_of(http.get(&status).bearer_auth(ADMIN_TOKEN)).await,
        403
    );
    assert_eq!(
        status_of(http.get(format!("http://{admin}/__anteroom/admin/"))).await,
        403
    );
    assert_eq!(
        status_of(
            http.get(format!("http://{admin}/metrics"))
                .bearer_auth(METRICS_TOKEN)
        )
        .await,
        403
    );
    // An untrusted peer cannot claim an allowed address.
    let spoofed = http
        .get(&status)
        .bearer_auth(ADMIN_TOKEN)
        .header("x-forwarded-for", "10.9.1.1");
    assert_eq!(status_of(spoofed).await, 403);
    ar.shutdown().await.unwrap();

    // Behind a trusted proxy (loopback here), the forwarded client is what is checked.
    let (_origin, _dir, ar) =
        with_admin_listener("trusted_proxies: [127.0.0.1]\nadmin_allow: [10.9.0.0/16]").await;
    let admin = ar.admin_addr.unwrap();
    let status = format!("http://{admin}/__anteroom/admin/api/status");
    let forwarded = |ip: &str| {
        http.get(&status)
            .bearer_auth(ADMIN_TOKEN)
            .header("x-forwarded-for", ip.to_string())
    };
    assert_eq!(status_of(forwarded("10.9.1.1")).await, 200);
    assert_eq!(status_of(forwarded("192.0.2.7")).await, 403);
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn admin_allow_applies_on_the_public_listener_too() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&origin.url(), dir.path(), "");
    cfg.admin_allow = vec!["10.9.0.0/16".parse().unwrap()];
    let ar = start(&cfg).await;
    let http = client();
    let url = |p: &str| format!("http://{}{p}", ar.addr);
    assert_eq!(
        status_of(
            http.get(url("/__anteroom/admin/api/status"))
                .bearer_auth(ADMIN_TOKEN)
        )
        .await,
        403
    );
    assert_eq!(status_of(http.get(url("/__anteroom/admin/"))).await, 403);
    assert_eq!(
        status_of(http.get(url("/"))).await,
        200,
        "the site is not the admin"
    );
    ar.shutdown().await.unwrap();

    cfg.admin_allow = vec!["127.0.0.0/8".parse().unwrap()];
    let ar = start(&cfg).await;
    let url = |p: &str| format!("http://{}{p}", ar.addr);
    assert_eq!(
        status_of(
            http.get(url("/__anteroom/admin/api/status"))
                .bearer_auth(ADMIN_TOKEN)
        )
        .await,
        200
    );
    ar.shutdown().await.unwrap();
}
