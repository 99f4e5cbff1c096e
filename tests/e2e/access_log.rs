//! The access log end to end: a real origin and anteroom on loopback, one line
//! per request with its class, decision, status and visitor reference, never the cookie or
//! the query; then logrotate's move and a real SIGUSR1, after which lines land in a fresh
//! file at the configured path.

use crate::common;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use common::{AsVisitor, client, from, front_with, reference_of, visitor_cookie};

/// The first visitor is let in; everyone after waits (one admission per 100 s).
const ONE_THEN_QUEUE: &str = "    rate: 0.01\n    max_active: 1000\n    bypass_paths: [\"/hooks/**\"]\n    asset_paths: [\"/static/**\"]";

/// The lines of `path` once it has at least `n` (the writer is its own thread).
async fn lines(path: &Path, n: usize) -> Vec<serde_json::Value> {
    for _ in 0..500 {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.lines().count() >= n {
            return text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
                .collect();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "{} never had {n} lines:\n{}",
        path.display(),
        std::fs::read_to_string(path).unwrap_or_default()
    );
}

#[tokio::test]
async fn one_line_per_request_then_a_sigusr1_reopens_the_file() {
    let logs = tempfile::tempdir().unwrap();
    let path = logs.path().join("access.log");
    let top = format!(
        "access_log: \"{}\"\nabuse:\n  allow: [\"127.0.0.1/32\"]\n",
        path.display()
    );
    let (_origin, _dir, ar) = front_with(&top, ONE_THEN_QUEUE).await;
    let base = format!("http://{}", ar.addr);
    let c = client();

    // A: let in by the fast path (no cookie yet, so no reference), then again with it.
    let first = c
        .get(format!("{base}/page/1?ar_token=query-secret"))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    let a = visitor_cookie(&first).expect("A gets a cookie");
    let first: serde_json::Value = first.json().await.unwrap();
    let a_request_id = first["headers"]["x-request-id"]
        .as_str()
        .unwrap()
        .to_owned();
    let again = c
        .get(format!("{base}/page/2"))
        .visitor(&a)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    again.bytes().await.unwrap();

    // B: waits, first without a cookie, then with it.
    let wait = c.get(format!("{base}/wait/1")).send().await.unwrap();
    assert_eq!(common::status_header(&wait).as_deref(), Some("waiting"));
    let b = visitor_cookie(&wait).expect("B gets a cookie");
    wait.bytes().await.unwrap();
    let wait = c
        .get(format!("{base}/wait/2"))
        .header("accept", "application/json")
        .visitor(&b)
        .send()
        .await
        .unwrap();
    let wait = wait.bytes().await.unwrap();
    let page: serde_json::Value = serde_json::from_slice(&wait).unwrap();
    let wait_len = wait.len();

    // Assets: A's goes to the origin, B's gets the small 503.
    let asset = c
        .get(format!("{base}/static/a.css"))
        .visitor(&a)
        .send()
        .await
        .unwrap();
    assert_eq!(asset.status(), 200);
    asset.bytes().await.unwrap();
    let asset = c
        .get(format!("{base}/static/b.css"))
        .visitor(&b)
        .send()
        .await
        .unwrap();
    assert_eq!(asset.status(), 503);
    asset.bytes().await.unwrap();
    // A bypass path, a wrong admin token (loopback is in abuse.allow: not banned), and a
    // reserved path we do not serve.
    let hook = c
        .post(format!("{base}/hooks/x"))
        .body("payload")
        .send()
        .await
        .unwrap();
    assert_eq!(hook.status(), 200);
    hook.bytes().await.unwrap();
    let admin = c
        .get(format!("{base}/__anteroom/admin/api/status"))
        .bearer_auth("not-the-admin-token-at-all")
        .send()
        .await
        .unwrap();
    assert_eq!(admin.status(), 401);
    admin.bytes().await.unwrap();
    let reserved = c
        .get(format!("{base}/__anteroom/nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(reserved.status(), 404);
    reserved.bytes().await.unwrap();

    let all = lines(&path, 9).await;
    assert_eq!(all.len(), 9, "one line per request: {all:#?}");
    let by_path: HashMap<&str, &serde_json::Value> = all
        .iter()
        .map(|l| (l["path"].as_str().unwrap(), l))
        .collect();
    let a_ref = reference_of(&a);
    let b_ref = reference_of(&b);
    assert_eq!(
        page["ref"],
        b_ref.as_str(),
        "the reference the page shows: {page}"
    );
    let expect = [
        ("/page/1", "page", "admitted", 200, None),
        ("/page/2", "page", "admitted", 200, Some(&a_ref)),
        ("/wait/1", "page", "waiting", 200, None),
        ("/wait/2", "page", "waiting", 200, Some(&b_ref)),
        ("/static/a.css", "asset", "admitted", 200, Some(&a_ref)),
        ("/static/b.css", "asset", "waiting", 503, Some(&b_ref)),
        ("/hooks/x", "bypass", "passed", 200, None),
        ("/__anteroom/admin/api/status", "admin", "error", 401, None),
        ("/__anteroom/nope", "reserved", "error", 404, None),
    ];
    for (path, class, decision, status, reference) in expect {
        let line = by_path
            .get(path)
            .unwrap_or_else(|| panic!("no line for {path}: {all:#?}"));
        assert_eq!(line["class"], class, "{line}");
        assert_eq!(line["decision"], decision, "{line}");
        assert_eq!(line["status"], status, "{line}");
        assert_eq!(
            line["ref"].as_str(),
            reference.map(String::as_str),
            "{line}"
        );
        assert_eq!(line["completed"], true, "{line}");
        assert_eq!(line["client"], "127.0.0.1", "{line}");
        assert!(
            line["peer"].as_str().unwrap().starts_with("127.0.0.1:"),
            "{line}"
        );
        assert_eq!(line["room"], "main", "{line}");
        assert!(line["duration_ms"].as_f64().unwrap() >= 0.0, "{line}");
        let time = line["time"].as_str().unwrap();
        assert!(
            time.ends_with('Z') && time.len() == 24,
            "RFC 3339 with ms: {time}"
        );
    }
    // The id the origin was sent is the one logged; the bytes are the body's.
    assert_eq!(by_path["/page/1"]["request_id"], a_request_id.as_str());
    assert_eq!(by_path["/page/1"]["method"], "GET");
    assert_eq!(by_path["/hooks/x"]["method"], "POST");
    assert_eq!(by_path["/wait/2"]["bytes"], wait_len as u64);
    // Never the cookie, never the query.
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        !text.contains(&a) && !text.contains(&b),
        "a cookie value was logged"
    );
    assert!(!text.contains("query-secret") && !text.contains("ar_token"));
    assert!(!text.contains("not-the-admin-token"));

    // logrotate: the file is moved away, then `postrotate` sends SIGUSR1. `run::start`
    // installed the handler, so the signal reopens rather than ends the process.
    let rotated = logs.path().join("access.log.1");
    std::fs::rename(&path, &rotated).unwrap();
    // SAFETY: sends a signal to this very process; its handler is tokio's.
    assert_eq!(
        unsafe { libc::kill(std::process::id() as i32, libc::SIGUSR1) },
        0
    );
    // Until the writer has seen it a line may still reach the moved file; keep asking.
    let mut sent = 0;
    while !path.exists() || std::fs::read_to_string(&path).unwrap().is_empty() {
        assert!(sent < 200, "no line reached a fresh file after SIGUSR1");
        let r = c
            .get(format!("{base}/after"))
            .visitor(&a)
            .send()
            .await
            .unwrap();
        r.bytes().await.unwrap();
        sent += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let fresh = lines(&path, 1).await;
    assert_eq!(fresh[0]["path"], "/after");
    assert_eq!(fresh[0]["ref"], a_ref.as_str());
    let old = lines(&rotated, 9).await;
    assert!(old.len() >= 9);
    assert!(old[..9].iter().all(|l| l["path"] != "/after"));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the fresh file is private too");

    // Nothing was dropped, and the counter is exported.
    let metrics = common::admin_metrics(&c, ar.addr).await;
    assert!(
        metrics.contains("anteroom_access_log_dropped_total 0"),
        "{metrics}"
    );

    // Still serving after the signal.
    assert_eq!(
        c.get(format!("{base}/__anteroom/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_client_that_goes_away_is_logged_as_not_completed() {
    let logs = tempfile::tempdir().unwrap();
    let path = logs.path().join("access.log");
    let top = format!("access_log: \"{}\"\n", path.display());
    let (_origin, _dir, ar) = front_with(&top, ONE_THEN_QUEUE).await;
    let base = format!("http://{}", ar.addr);
    // A waiting page's live stream never ends by itself: open it, then hang up.
    let admitted = client().get(format!("{base}/")).send().await.unwrap();
    admitted.bytes().await.unwrap();
    let page = client().get(format!("{base}/")).send().await.unwrap();
    assert_eq!(common::status_header(&page).as_deref(), Some("waiting"));
    let cookie = visitor_cookie(&page).unwrap();
    page.bytes().await.unwrap();
    let events = client()
        .get(format!("{base}/__anteroom/events"))
        .visitor(&cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200);
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(events);
    let all = lines(&path, 3).await;
    let stream = all
        .iter()
        .find(|l| l["path"] == "/__anteroom/events")
        .unwrap_or_else(|| panic!("{all:#?}"));
    assert_eq!(stream["class"], "events", "{stream}");
    assert_eq!(stream["completed"], false, "{stream}");
    assert!(stream["duration_ms"].as_f64().unwrap() >= 100.0, "{stream}");
    ar.shutdown().await.unwrap();
}

/// A banned client answered 429 as fast as it can ask writes at most 10 lines a second;
/// the rest are counted, and everybody else's lines are still written.
#[tokio::test]
async fn a_banned_clients_lines_are_capped_and_counted() {
    let logs = tempfile::tempdir().unwrap();
    let path = logs.path().join("access.log");
    let top = format!(
        "access_log: \"{}\"\nabuse:\n  ban_paths: [\"/.env\"]\n",
        path.display()
    );
    let (_origin, _dir, ar) = front_with(&top, ONE_THEN_QUEUE).await;
    let base = format!("http://{}", ar.addr);
    let bot = from("127.0.0.31");
    let started = std::time::Instant::now();
    assert_eq!(
        bot.get(format!("{base}/.env"))
            .send()
            .await
            .unwrap()
            .status(),
        429
    );
    const SENT: usize = 300;
    for _ in 0..SENT {
        let r = bot.get(format!("{base}/")).send().await.unwrap();
        assert_eq!(r.status(), 429);
        r.bytes().await.unwrap();
    }
    let secs = started.elapsed().as_secs() + 1;
    // Someone else's request afterwards is written (and marks the end of the bot's lines).
    let other = from("127.0.0.32");
    let r = other.get(format!("{base}/hooks/x")).send().await.unwrap();
    r.bytes().await.unwrap();
    let mut all = Vec::new();
    for _ in 0..500 {
        all = lines(&path, 1).await;
        if all.iter().any(|l| l["client"] == "127.0.0.32") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let bot_lines = all.iter().filter(|l| l["client"] == "127.0.0.31").count();
    assert!(
        bot_lines as u64 <= 10 * (secs + 1),
        "{bot_lines} lines in {secs} s"
    );
    assert!(bot_lines >= 10, "the first ten of a second are written");
    let metrics = common::admin_metrics(&client(), ar.addr).await;
    let suppressed: usize = metrics
        .lines()
        .find_map(|l| l.strip_prefix("anteroom_access_log_suppressed_total "))
        .unwrap_or_else(|| panic!("{metrics}"))
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        suppressed + bot_lines,
        SENT + 1,
        "every request written or counted"
    );
    ar.shutdown().await.unwrap();
}

/// Sends `request` (raw bytes) on a fresh connection and reads the answer to its end.
async fn raw(addr: std::net::SocketAddr, request: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("the answer ends (Connection: close)")
        .unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

/// `GET path` over HTTP/2 without TLS (h2c, prior knowledge), as a visitor with `cookie`.
async fn get_h2(addr: std::net::SocketAddr, path: &str, cookie: &str) -> u16 {
    let (mut sender, _connection) = anteroom_fixtures::h2c_client(addr).await;
    let request = http::Request::get(format!("http://{addr}{path}"))
        .header("cookie", format!("ar_visitor={cookie}"))
        .header("user-agent", "h2-client/1")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap();
    status
}

#[tokio::test]
async fn lines_carry_the_user_agent_referer_protocol_and_origin_time_and_one_ref() {
    let logs = tempfile::tempdir().unwrap();
    let path = logs.path().join("access.log");
    let key = anteroom::fairness::admission_token::AdmissionKey::generate().unwrap();
    let top = format!(
        "access_log: \"{}\"\nadmission_key: \"{}\"\n",
        path.display(),
        key.to_config_text().as_str()
    );
    let (_origin, _dir, ar) = front_with(&top, ONE_THEN_QUEUE).await;
    let base = format!("http://{}", ar.addr);
    let c = client();

    // A is let in; their second request goes to the origin with the admission token.
    let first = c.get(format!("{base}/in/1")).send().await.unwrap();
    let a = visitor_cookie(&first).expect("A gets a cookie");
    first.bytes().await.unwrap();
    let proxied = c
        .get(format!("{base}/in/2"))
        .visitor(&a)
        .header("user-agent", "Mozilla/5.0 (test)")
        .header(
            "referer",
            "https://shop.example/from?ar_grant=v1.secret#frag",
        )
        .send()
        .await
        .unwrap();
    let echoed: serde_json::Value = proxied.json().await.unwrap();
    // B waits: answered by anteroom, never proxied.
    let wait = c
        .get(format!("{base}/out/1"))
        .header("user-agent", "waiter")
        .send()
        .await
        .unwrap();
    assert_eq!(common::status_header(&wait).as_deref(), Some("waiting"));
    wait.bytes().await.unwrap();
    // A hostile client: a user agent of 12,000 bytes (under `max_header_bytes`) with a tab,
    // quotes, a backslash and bytes that are not UTF-8, and a referer that tries to close
    // the JSON object.
    let mut hostile =
        b"GET /raw HTTP/1.1\r\nHost: x\r\nConnection: close\r\nUser-Agent: bad\t\"\\\xff".to_vec();
    hostile.extend(std::iter::repeat_n(b'A', 12_000));
    hostile.extend_from_slice(b"\r\nReferer: x\"}{\"status\":1\r\n\r\n");
    let answer = raw(ar.addr, &hostile).await;
    assert!(answer.starts_with("HTTP/1.1 "), "{answer}");
    // HTTP/2 (h2c): A again.
    assert_eq!(get_h2(ar.addr, "/in/h2", &a).await, 200);

    let all = lines(&path, 5).await;
    let by_path: HashMap<&str, &serde_json::Value> = all
        .iter()
        .map(|l| (l["path"].as_str().unwrap(), l))
        .collect();
    let line = by_path["/in/2"];
    assert_eq!(line["user_agent"], "Mozilla/5.0 (test)", "{line}");
    assert_eq!(
        line["referer"], "https://shop.example/from",
        "the referer without its query or fragment: {line}"
    );
    assert_eq!(line["protocol"], "HTTP/1.1", "{line}");
    let origin_ms = line["origin_ms"]
        .as_f64()
        .expect("proxied: the origin's time");
    assert!(
        origin_ms > 0.0 && origin_ms <= line["duration_ms"].as_f64().unwrap(),
        "{line}"
    );
    let waited = by_path["/out/1"];
    assert_eq!(waited["decision"], "waiting", "{waited}");
    assert_eq!(waited["user_agent"], "waiter");
    assert!(waited["referer"].is_null(), "{waited}");
    assert!(waited["origin_ms"].is_null(), "never proxied: {waited}");
    let h2 = by_path["/in/h2"];
    assert_eq!(h2["protocol"], "HTTP/2", "{h2}");
    assert_eq!(h2["user_agent"], "h2-client/1", "{h2}");
    assert_eq!(h2["ref"], reference_of(&a).as_str(), "{h2}");

    // The hostile line is one line, bounded and escaped.
    let text = std::fs::read_to_string(&path).unwrap();
    let raw_line = text
        .lines()
        .find(|l| l.contains("\"path\":\"/raw\""))
        .expect("the hostile request's line");
    assert!(raw_line.len() < 2_000, "bounded: {} bytes", raw_line.len());
    let hostile: serde_json::Value = serde_json::from_str(raw_line).unwrap();
    let ua = hostile["user_agent"].as_str().unwrap();
    assert!(ua.starts_with("bad\t\"\\\u{fffd}AAA"), "{ua:?}");
    assert!(ua.len() <= anteroom::access_log::MAX_HEADER + 2, "{ua:?}");
    assert_eq!(hostile["referer"], "x\"}{\"status\":1");
    assert_eq!(hostile["status"], answer[9..12].parse::<u16>().unwrap());
    assert_eq!(text.lines().count(), all.len(), "every line is whole JSON");

    // One reference: the token the origin got names A as A's page and the log do.
    let token = echoed["headers"]["x-anteroom-admission"]
        .as_str()
        .expect("an admitted request carries the token");
    let payload = token.split('.').nth(1).unwrap();
    use base64::Engine;
    let claims: serde_json::Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(claims["ref"], line["ref"], "token {claims} and log {line}");
    assert_eq!(claims["ref"], reference_of(&a).as_str());
    ar.shutdown().await.unwrap();
}
