//! End to end, written as the attacks a security review found: each is answered as the
//! request path means to answer it while a real visitor is still served. A real anteroom on loopback
//! in front of real origins that report what they received; raw TCP sockets for malformed
//! input, an HTTP/2 client for `:authority`.

use crate::common;

use std::net::SocketAddr;

use anteroom::config::{Config, from_yaml_str};
use bytes::Bytes;
use common::*;
use http_body_util::Empty;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A room that lets exactly one visitor in (the fast path) and then nobody for 100 s.
const ONE_THEN_QUEUE: &str = "    rate: 0.01\n    max_active: 1000";

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

/// A queued room `shop` (`shop.example`, `preserve_host`) and an open catch-all `rest`,
/// each in front of its own origin.
async fn shop_and_rest() -> (Origin, Origin, tempfile::TempDir, anteroom::run::Running) {
    let shop = Origin::start().await;
    let rest = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let rooms = format!(
        "  shop:\n    match_host: shop.example\n    origin: {}\n    preserve_host: true\n{ONE_THEN_QUEUE}\n  rest:\n    origin: {}\n",
        shop.url(),
        rest.url()
    );
    let ar = start(&rooms_config(dir.path(), "", &rooms)).await;
    (shop, rest, dir, ar)
}

/// Sends `raw` on a fresh connection and returns the whole answer (the request asks for
/// `Connection: close`).
async fn raw(addr: SocketAddr, raw: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(raw.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        stream.read_to_end(&mut out),
    )
    .await
    .expect("anteroom answers and closes")
    .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

fn status_of(answer: &str) -> u16 {
    answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {answer:?}"))
}

fn get_with_host(path: &str, host: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
}

/// Finding 1, HTTP/2: `:authority` naming the open catch-all while `Host` names the queued
/// room used to reach the queued room's site as `shop.example` with no queue.
#[tokio::test]
async fn h2_authority_disagreeing_with_host_is_400() {
    let (shop, rest, _dir, ar) = shop_and_rest().await;
    // A real visitor takes the shop's one place on the site.
    let first = client()
        .get(format!("http://{}/", ar.addr))
        .header("host", "shop.example")
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    let cookie = visitor_cookie(&first).unwrap();
    assert_eq!(shop.hits(), 1);

    let stream = TcpStream::connect(ar.addr).await.unwrap();
    let (mut h2, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let send = |authority: &str, host: Option<&str>| {
        let mut b = http::Request::get(format!("http://{authority}/secret"));
        if let Some(h) = host {
            b = b.header("host", h);
        }
        b.body(Empty::<Bytes>::new()).unwrap()
    };

    // The attack: 400, and neither origin hears of it.
    let answer = h2
        .send_request(send("other.example", Some("shop.example")))
        .await
        .unwrap();
    assert_eq!(answer.status(), 400);
    assert_eq!((shop.hits(), rest.hits()), (1, 0));

    // A newcomer naming the shop consistently queues (a trailing dot is the same host).
    for (authority, host) in [
        ("shop.example", None),
        ("shop.example.", Some("Shop.Example")),
    ] {
        let answer = h2.send_request(send(authority, host)).await.unwrap();
        assert_eq!(answer.status(), 200);
        assert_eq!(answer.headers()["x-anteroom-status"], "waiting");
    }
    assert_eq!((shop.hits(), rest.hits()), (1, 0));

    // The real visitor is still served, and the origin hears the one canonical host.
    let again = client()
        .get(format!("http://{}/", ar.addr))
        .header("host", "shop.example")
        .visitor(&cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    let seen: serde_json::Value = again.json().await.unwrap();
    assert_eq!(seen["headers"]["host"], "shop.example");
    assert_eq!(seen["headers"]["x-forwarded-host"], "shop.example");
}

/// Finding 1, HTTP/1.1: hosts that origins read as `shop.example` but rooms did not fell
/// to the open catch-all.
#[tokio::test]
async fn malformed_hosts_are_400_and_reach_no_origin() {
    let (shop, rest, _dir, ar) = shop_and_rest().await;
    for host in [
        "shop.example:80:80",
        "x@shop.example",
        "shop.example\\",
        "shop.example:",
        "shop..example",
        "shop.example/x",
    ] {
        let answer = raw(ar.addr, &get_with_host("/secret", host)).await;
        assert_eq!(status_of(&answer), 400, "{host:?}: {answer}");
    }
    assert_eq!((shop.hits(), rest.hits()), (0, 0));

    // A real visitor: the first takes the shop's place; a trailing dot and another case are
    // the shop, not the catch-all (they queue, the origin hears the canonical host).
    let answer = raw(ar.addr, &get_with_host("/", "shop.example:80")).await;
    assert_eq!(status_of(&answer), 200, "{answer}");
    assert!(answer.contains("\"host\":\"shop.example:80\""), "{answer}");
    for host in ["SHOP.example.", "shop.example."] {
        let answer = raw(ar.addr, &get_with_host("/", host)).await;
        assert_eq!(status_of(&answer), 200, "{answer}");
        assert!(
            answer
                .to_ascii_lowercase()
                .contains("x-anteroom-status: waiting"),
            "{host}: {answer}"
        );
    }
    assert_eq!((shop.hits(), rest.hits()), (1, 0));
    // The catch-all still serves what is not the shop.
    let answer = raw(ar.addr, &get_with_host("/", "other.example")).await;
    assert_eq!(status_of(&answer), 200);
    assert_eq!(rest.hits(), 1);
}

/// Finding 2: with origin `http://host/public`, `/../admin/secret.txt` reached
/// `/public/../admin/secret.txt`.
#[tokio::test]
async fn paths_never_climb_out_of_the_origin_prefix() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ar = start(&config(
        &format!("{}/public", origin.url()),
        dir.path(),
        "    join_limit_per_ip: 0",
    ))
    .await;
    let mut forwarded = 0;
    for (path, reaches) in [
        ("/../admin/secret.txt", "/public/admin/secret.txt"),
        ("/%2e%2e/admin/secret.txt", "/public/admin/secret.txt"),
        ("/%2E./admin/secret.txt", "/public/admin/secret.txt"),
        ("/a/b/../../../admin/secret.txt", "/public/admin/secret.txt"),
        ("/a/./b/../c?q=/../x", "/public/a/c?q=/../x"),
        ("/shop/item.css", "/public/shop/item.css"),
        // Dots and escapes that need no change reach the origin as they came.
        (
            "/.well-known/acme-challenge/t0k",
            "/public/.well-known/acme-challenge/t0k",
        ),
        ("/x/.hidden", "/public/x/.hidden"),
        ("/files/a%2Fb", "/public/files/a%2Fb"),
        ("/a%2Eb", "/public/a%2Eb"),
    ] {
        let answer = raw(ar.addr, &get_with_host(path, "shop.example")).await;
        assert_eq!(status_of(&answer), 200, "{path}: {answer}");
        let want = format!("\"uri\":\"{reaches}\"");
        assert!(answer.contains(&want), "{path}: want {want} in {answer}");
        forwarded += 1;
        assert_eq!(origin.hits(), forwarded);
    }
    // Encoded separators next to dots, read differently by different origins: refused.
    for path in [
        "/..%2fadmin/secret.txt",
        "/%5c..%5cadmin",
        "/x/%2e%2e%2Fadmin",
    ] {
        let answer = raw(ar.addr, &get_with_host(path, "shop.example")).await;
        assert_eq!(status_of(&answer), 400, "{path}: {answer}");
    }
    // A path that resolves into `/__anteroom/` is ours, never the origin's.
    let answer = raw(
        ar.addr,
        &get_with_host("/x/../__anteroom/healthz", "shop.example"),
    )
    .await;
    assert_eq!(status_of(&answer), 200);
    assert!(answer.ends_with("ok\n"), "{answer}");
    assert_eq!(origin.hits(), forwarded, "nothing else reached the origin");
}

const FORGED: [(&str, &str); 9] = [
    ("x-real-ip", "6.6.6.6"),
    ("x-request-id", "forged-id"),
    ("x-forwarded-port", "443"),
    ("x-forwarded-proto", "https"),
    ("x-forwarded-host", "evil.example"),
    ("x-forwarded-prefix", "/admin"),
    ("forwarded", "for=6.6.6.6;proto=https"),
    ("x-anteroom-status", "admitted"),
    ("x-anteroom-anything", "1"),
];

async fn forged_request(ar: &anteroom::run::Running) -> serde_json::Value {
    let mut request = client().get(format!("http://{}/", ar.addr));
    for (name, value) in FORGED {
        request = request.header(name, value);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

/// Finding 5: from an untrusted peer, forged forwarding headers reached the origin.
#[tokio::test]
async fn forged_headers_from_an_untrusted_peer_never_reach_the_origin() {
    let (origin, _dir, ar) = front("").await;
    let seen = forged_request(&ar).await;
    let headers = &seen["headers"];
    for name in [
        "x-real-ip",
        "x-forwarded-port",
        "x-forwarded-prefix",
        "forwarded",
        "x-anteroom-status",
        "x-anteroom-anything",
    ] {
        assert!(
            headers.get(name).is_none(),
            "{name} reached the origin: {seen}"
        );
    }
    assert_eq!(headers["x-forwarded-for"], "127.0.0.1");
    assert_eq!(
        headers["x-forwarded-proto"], "http",
        "public_scheme's default"
    );
    assert_eq!(headers["x-forwarded-host"], ar.addr.to_string());
    let id = headers["x-request-id"].as_str().unwrap();
    assert_ne!(id, "forged-id");
    assert_eq!(id.len(), 32, "a fresh id: {id}");
    assert_eq!(origin.hits(), 1);
}

/// The same headers from a trusted proxy: its forwarding headers are believed, the
/// `X-Anteroom-*` ones are still ours alone, and `public_scheme` fills a missing proto.
#[tokio::test]
async fn a_trusted_proxy_keeps_its_forwarding_headers_but_not_ours() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ar = start(&rooms_config(
        dir.path(),
        "trusted_proxies: [\"127.0.0.1/32\"]\npublic_scheme: https",
        &format!("  main:\n    origin: {}\n", origin.url()),
    ))
    .await;
    let seen = forged_request(&ar).await;
    let headers = &seen["headers"];
    assert_eq!(headers["x-real-ip"], "6.6.6.6");
    assert_eq!(headers["x-request-id"], "forged-id");
    assert_eq!(headers["x-forwarded-port"], "443");
    assert_eq!(headers["x-forwarded-proto"], "https");
    assert!(headers.get("x-anteroom-status").is_none(), "{seen}");
    assert!(headers.get("x-anteroom-anything").is_none(), "{seen}");
    assert!(headers.get("forwarded").is_none(), "{seen}");

    // No proto from the proxy: public_scheme; an insane id is replaced.
    let response = client()
        .get(format!("http://{}/", ar.addr))
        .header("x-request-id", "a".repeat(500))
        .send()
        .await
        .unwrap();
    let seen: serde_json::Value = response.json().await.unwrap();
    assert_eq!(seen["headers"]["x-forwarded-proto"], "https");
    assert_eq!(seen["headers"]["x-request-id"].as_str().unwrap().len(), 32);
}

/// Finding 6 (pages): anteroom's own pages had no CSP, `nosniff` or framing policy.
#[tokio::test]
async fn our_own_pages_carry_security_headers_and_the_site_is_untouched() {
    let (_origin, _dir, ar) = front(ONE_THEN_QUEUE).await;
    let first = client()
        .get(format!("http://{}/", ar.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    // The origin's answer is the origin's: none of our page headers are added to it.
    assert!(first.headers().get("content-security-policy").is_none());
    assert!(first.headers().get("x-frame-options").is_none());

    let waiting = client()
        .get(format!("http://{}/", ar.addr))
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(status_header(&waiting).as_deref(), Some("waiting"));
    let not_found = client()
        .get(format!("http://{}/__anteroom/nope", ar.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(not_found.status(), 404);
    let bad_host = raw(ar.addr, &get_with_host("/", "a:80:80")).await;
    assert_eq!(status_of(&bad_host), 400);
    assert!(
        bad_host
            .to_ascii_lowercase()
            .contains("x-content-type-options: nosniff"),
        "{bad_host}"
    );
    for response in [&waiting, &not_found] {
        let h = response.headers();
        let csp = h["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
        assert!(csp.contains("default-src 'none'"), "{csp}");
        assert_eq!(h["x-content-type-options"], "nosniff");
        assert_eq!(h["x-frame-options"], "DENY");
        assert_eq!(h["x-robots-tag"], "noindex");
    }
    let html = waiting.text().await.unwrap();
    assert!(html.contains(r#"<meta name="robots" content="noindex">"#));
}

async fn as_client(
    ar: &anteroom::run::Running,
    ip: &str,
    cookie: Option<&str>,
) -> reqwest::Response {
    let mut request = client()
        .get(format!("http://{}/", ar.addr))
        .header("accept", "application/json")
        .header("x-forwarded-for", ip);
    if let Some(cookie) = cookie {
        request = request.visitor(cookie);
    }
    request.send().await.unwrap()
}

/// Finding 3: cookie-less requests from one client took every slot on the site (and every
/// place in line) while real visitors waited. Behind a trusted proxy, so each client is its
/// `X-Forwarded-For` address.
#[tokio::test]
async fn one_client_cannot_squat_every_slot_or_place() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ar = start(&rooms_config(
        dir.path(),
        "trusted_proxies: [\"127.0.0.1/32\"]",
        &format!(
            "  main:\n    origin: {}\n    rate: 1000\n    max_active: 6\n    max_sessions_per_client: 3\n    max_places_per_client: 4\n",
            origin.url()
        ),
    ))
    .await;
    let squatter = "198.51.100.7";
    let mut outcomes = Vec::new();
    for _ in 0..20 {
        let response = as_client(&ar, squatter, None).await;
        let status = response.status().as_u16();
        // Admitted: the origin's echo (no `status`); refused: our JSON.
        let body: serde_json::Value = response.json().await.unwrap();
        outcomes.push((
            status,
            body.get("status")
                .and_then(|s| s.as_str())
                .map(str::to_owned),
        ));
    }
    let admitted = outcomes
        .iter()
        .filter(|(s, st)| *s == 200 && st.is_none())
        .count();
    let refused = outcomes
        .iter()
        .filter(|(s, st)| *s == 429 && st.as_deref() == Some("refused"))
        .count();
    assert_eq!(admitted, 3, "{outcomes:?}");
    assert_eq!(refused, 17, "{outcomes:?}");
    assert_eq!(origin.hits(), 3);

    // A real visitor at another address is let straight in: the site still has room.
    let real = as_client(&ar, "203.0.113.5", None).await;
    assert_eq!(real.status(), 200);
    assert_eq!(origin.hits(), 4);
    // Two more fill the site; the squatter's newcomers now wait, up to four places.
    for ip in ["203.0.113.6", "203.0.113.8"] {
        assert_eq!(as_client(&ar, ip, None).await.status(), 200);
    }
    let mut waiting = 0;
    for _ in 0..10 {
        let response = as_client(&ar, squatter, None).await;
        match response.status().as_u16() {
            200 => {
                let body: serde_json::Value = response.json().await.unwrap();
                assert_eq!(body["status"], "waiting");
                waiting += 1;
            }
            429 => {}
            other => panic!("squatter got {other}"),
        }
    }
    assert_eq!(
        waiting, 0,
        "sessions at the cap: the squatter's newcomers are refused"
    );
    // Another real visitor still gets a place in line, at the head.
    let late = as_client(&ar, "203.0.113.9", None).await;
    let body: serde_json::Value = late.json().await.unwrap();
    assert_eq!(body["status"], "waiting");
    assert_eq!(body["position"], 1);
}

/// Finding 3: places in line from one client are capped too.
#[tokio::test]
async fn one_client_cannot_stockpile_places() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ar = start(&rooms_config(
        dir.path(),
        "trusted_proxies: [\"127.0.0.1/32\"]",
        &format!(
            "  main:\n    origin: {}\n{ONE_THEN_QUEUE}\n    max_places_per_client: 4\n",
            origin.url()
        ),
    ))
    .await;
    // Someone else holds the one fast-path admission.
    assert_eq!(as_client(&ar, "203.0.113.1", None).await.status(), 200);
    let mut statuses = Vec::new();
    for _ in 0..12 {
        let response = as_client(&ar, "198.51.100.7", None).await;
        let status = response.status().as_u16();
        let body: serde_json::Value = response.json().await.unwrap();
        statuses.push((status, body["status"].as_str().unwrap().to_owned()));
    }
    let waiting = statuses
        .iter()
        .filter(|(s, st)| *s == 200 && st == "waiting")
        .count();
    let refused = statuses
        .iter()
        .filter(|(s, st)| *s == 429 && st == "refused")
        .count();
    assert_eq!((waiting, refused), (4, 8), "{statuses:?}");
    // A real visitor still joins, behind the squatter's four.
    let real = as_client(&ar, "203.0.113.5", None).await;
    let body: serde_json::Value = real.json().await.unwrap();
    assert_eq!(body["status"], "waiting");
    assert_eq!(body["position"], 5);
}

/// Finding 3: one admitted cookie replayed from 30 clients passed every request. Only the
/// first `session_clients` (4) clients get through, whatever this replica cached; the
/// visitor who earned it keeps it.
#[tokio::test]
async fn one_admitted_cookie_cannot_be_shared_by_a_crowd() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ar = start(&rooms_config(
        dir.path(),
        "trusted_proxies: [\"127.0.0.1/32\"]",
        &format!("  main:\n    origin: {}\n", origin.url()),
    ))
    .await;
    let owner = "203.0.113.5";
    let first = as_client(&ar, owner, None).await;
    assert_eq!(first.status(), 200);
    let cookie = visitor_cookie(&first).unwrap();
    // The owner's request is now cached as confirmed on this replica.
    assert_eq!(as_client(&ar, owner, Some(&cookie)).await.status(), 200);
    let mut passed = 0;
    let mut refused = 0;
    for i in 1..=30 {
        let response = as_client(&ar, &format!("198.51.100.{i}"), Some(&cookie)).await;
        match response.status().as_u16() {
            200 => passed += 1,
            429 => {
                assert_eq!(status_header(&response).as_deref(), Some("refused"));
                refused += 1;
            }
            other => panic!("{other}"),
        }
    }
    assert_eq!(
        (passed, refused),
        (3, 27),
        "the owner and three more clients"
    );
    // Replayed again from the refused clients: still refused (the cache does not help).
    for i in 10..=15 {
        let response = as_client(&ar, &format!("198.51.100.{i}"), Some(&cookie)).await;
        assert_eq!(response.status(), 429);
    }
    // The owner keeps the session.
    assert_eq!(as_client(&ar, owner, Some(&cookie)).await.status(), 200);
    assert_eq!(origin.hits(), 2 + 3 + 1);
}

/// A sibling subdomain's page can set `ar_visitor` for the parent domain ("cookie
/// tossing"), and the browser then sends it beside the visitor's own, first if it was set
/// first. The visitor keeps their place, and nobody is struck while their own cookie is
/// there; alone, a forged cookie is still a strike.
#[tokio::test]
async fn a_tossed_cookie_beside_the_visitors_own_takes_nothing_and_strikes_nobody() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let rooms = format!("  main:\n    origin: {}\n{ONE_THEN_QUEUE}\n", origin.url());
    let ar = start(&rooms_config(dir.path(), "", &rooms)).await;
    let http = client();
    let url = format!("http://{}/", ar.addr);
    let json = |cookies: &str| {
        http.get(&url)
            .header("accept", "application/json")
            .header("cookie", cookies.to_owned())
    };
    // Someone on the site, so the visitor waits in line.
    assert_eq!(http.get(&url).send().await.unwrap().status(), 200);
    let joined = json("").send().await.unwrap();
    let own = visitor_cookie(&joined).unwrap();
    let place: serde_json::Value = joined.json().await.unwrap();
    assert_eq!(place["status"], "waiting", "{place}");
    // What a sibling page can toss: a cookie of the right shape whose MAC does not verify
    // (it cannot read the visitor's own, which is HttpOnly). A character in the middle of
    // the MAC, not the last, whose spare bits would make it malformed instead.
    let at = own.len() - 10;
    let was = own.as_bytes()[at];
    let tossed = format!(
        "{}{}{}",
        &own[..at],
        if was == b'A' { 'B' } else { 'A' },
        &own[at + 1..]
    );
    let bad_cookie_strikes = async || {
        let text = admin_metrics(&client(), ar.addr).await;
        metric(&text, "anteroom_strikes_total{reason=\"bad_cookie\"}")
    };

    for _ in 0..6 {
        let r = json(&format!("ar_visitor={tossed}; ar_visitor={own}"))
            .send()
            .await
            .unwrap();
        let now: serde_json::Value = r.json().await.unwrap();
        assert_eq!(
            (&now["status"], &now["ref"], &now["position"]),
            (&place["status"], &place["ref"], &place["position"]),
            "the visitor lost their place to a tossed cookie: {now}"
        );
    }
    assert_eq!(
        bad_cookie_strikes().await,
        0.0,
        "struck for a tossed cookie"
    );
    // Tossed for many paths, the forgeries can push the visitor's own out of what is read
    // (32 values): their own is not found then, but nobody is struck for it either.
    let many = vec![format!("ar_visitor={tossed}"); 40].join("; ");
    let r = json(&format!("{many}; ar_visitor={own}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        bad_cookie_strikes().await,
        0.0,
        "struck past the values read"
    );

    // Alone, the same cookie is a forgery, and a strike.
    let r = json(&format!("ar_visitor={tossed}")).send().await.unwrap();
    assert_ne!(visitor_cookie(&r), Some(own));
    assert_eq!(bad_cookie_strikes().await, 1.0);
    ar.shutdown().await.unwrap();
}
