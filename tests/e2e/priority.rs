//! Priority end to end: a real anteroom on loopback in front of a real origin,
//! driven by a real HTTP client: the admin's Queue API (paging, limit, search by ref) and
//! move to the front, and priority grants (position 1, admitted at once, single use,
//! refused when bad, never seen by the origin), minted by `anteroom grant` and by the
//! Python and JavaScript snippets in docs/security.md exactly as written there.

use crate::common;

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use anteroom::config::Secret;
use anteroom::priority;
use anteroom::run::Running;
use common::*;
use serde_json::Value;

/// A room that lets exactly one visitor in (the fast path) and then nobody for 100 s.
const ONE_THEN_QUEUE: &str = "    rate: 0.01\n    max_active: 1000";
const API: &str = "/__anteroom/admin/api";
const PRIORITY_SECRET: &str = "the test priority secret, 32 bytes or more";

struct Harness {
    origin: Origin,
    dir: tempfile::TempDir,
    ar: Running,
    http: reqwest::Client,
}

impl Harness {
    async fn start(room_extra: &str) -> Harness {
        Self::start_with(room_extra, Some(PRIORITY_SECRET)).await
    }

    async fn start_with(room_extra: &str, secret: Option<&str>) -> Harness {
        let origin = Origin::start().await;
        let dir = tempfile::tempdir().unwrap();
        let mut config = config(&origin.url(), dir.path(), room_extra);
        config.priority_secret = secret.map(Secret::from_text);
        let ar = start(&config).await;
        Harness {
            origin,
            dir,
            ar,
            http: client(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.ar.addr)
    }

    async fn api_get(&self, path: &str) -> reqwest::Response {
        self.http
            .get(self.url(&format!("{API}{path}")))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap()
    }

    async fn queue(&self, query: &str) -> Value {
        let response = self.api_get(&format!("/rooms/main/queue{query}")).await;
        assert_eq!(response.status(), 200, "queue{query}");
        response.json().await.unwrap()
    }

    async fn front(&self, reference: &str) -> reqwest::Response {
        self.http
            .post(self.url(&format!("{API}/rooms/main/visitors/{reference}/front")))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap()
    }

    /// A JSON client's request to `path`, optionally as a visitor and with headers.
    async fn visit(
        &self,
        path: &str,
        cookie: Option<&str>,
        headers: &[(&str, &str)],
    ) -> (reqwest::StatusCode, Option<String>, Option<String>, Value) {
        self.visit_with(&self.http, path, cookie, headers).await
    }

    /// [`Harness::visit`] with `http`, e.g. a client from another loopback address.
    async fn visit_with(
        &self,
        http: &reqwest::Client,
        path: &str,
        cookie: Option<&str>,
        headers: &[(&str, &str)],
    ) -> (reqwest::StatusCode, Option<String>, Option<String>, Value) {
        let mut request = http
            .get(self.url(path))
            .header("accept", "application/json");
        if let Some(cookie) = cookie {
            request = request.visitor(cookie);
        }
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let cookie = visitor_cookie(&response);
        let header = status_header(&response);
        (status, cookie, header, response.json().await.unwrap())
    }

    /// One visitor let in by the fast path, then `n` more in line, their cookies in order.
    async fn fill(&self, n: usize) -> Vec<String> {
        let (_, _, _, body) = self.visit("/", None, &[]).await;
        assert_eq!(body["origin"], true, "the first visitor is let straight in");
        let mut line = Vec::new();
        for i in 0..n {
            let (_, cookie, _, body) = self.visit("/", None, &[]).await;
            assert_eq!(body["status"], "waiting");
            assert_eq!(body["position"], i as u64 + 1);
            line.push(cookie.unwrap());
        }
        line
    }

    async fn position(&self, cookie: &str) -> Value {
        let (_, _, _, body) = self.visit("/", Some(cookie), &[]).await;
        assert_eq!(body["status"], "waiting", "{body}");
        body["position"].clone()
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn grant(room: &str, ttl: u64) -> String {
    priority::mint(
        PRIORITY_SECRET.as_bytes(),
        room,
        now() + ttl,
        &priority::random_nonce(),
    )
}

#[tokio::test]
async fn the_queue_api_pages_limits_and_finds_by_ref() {
    let h = Harness::start(ONE_THEN_QUEUE).await;
    h.fill(60).await;
    let head = h.queue("").await;
    let entries = head["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 50, "50 by default");
    assert_eq!(head["limit"], 50);
    let mut refs = std::collections::BTreeSet::new();
    for (i, e) in entries.iter().enumerate() {
        assert_eq!(e["position"], i as u64 + 1, "{e}");
        assert_eq!(e["ref"].as_str().unwrap().len(), 8);
        assert!(
            e["joined_at_ms"].as_u64().unwrap() > 1_600_000_000_000,
            "{e}"
        );
        assert!(
            e["last_seen_ms"].as_u64().unwrap() > 1_600_000_000_000,
            "{e}"
        );
        assert!(e.get("visitor").is_none(), "ids are never shown");
        refs.insert(e["ref"].as_str().unwrap().to_owned());
    }
    assert_eq!(refs.len(), 50, "refs are distinct");
    let five = h.queue("?limit=5").await;
    assert_eq!(five["entries"].as_array().unwrap()[..], entries[..5]);
    let all = h.queue("?limit=1000").await;
    assert_eq!(all["entries"].as_array().unwrap().len(), 60);

    // By reference, as typed (lower case, with a hyphen).
    let tenth = entries[9]["ref"].as_str().unwrap();
    let typed = format!("{}-{}", &tenth[..4], &tenth[4..]).to_lowercase();
    let found = h.queue(&format!("?ref={typed}")).await;
    let found = found["entries"].as_array().unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0]["ref"], tenth);
    assert_eq!(found[0]["position"], 10);
    let stranger = anteroom::queue::VisitorId::random().reference();
    let none = h.queue(&format!("?ref={stranger}")).await;
    assert_eq!(none["entries"], Value::Array(vec![]));

    for (bad, field) in [
        ("?limit=0", "limit"),
        ("?limit=1001", "limit"),
        ("?limit=ten", "limit"),
        ("?ref=short", "ref"),
        ("?page=2", "page"),
    ] {
        let response = h.api_get(&format!("/rooms/main/queue{bad}")).await;
        assert_eq!(response.status(), 422, "{bad}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["field"], field, "{bad}");
    }
    h.ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn move_to_front_puts_the_visitor_at_position_one() {
    let h = Harness::start(ONE_THEN_QUEUE).await;
    let line = h.fill(10).await;
    let head = h.queue("?limit=10").await;
    let seventh = head["entries"][6]["ref"].as_str().unwrap().to_owned();
    assert_eq!(h.position(&line[6]).await, 7);

    let response = h.front(&seventh).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["position"], 1);
    assert_eq!(body["ref"], seventh.as_str());
    assert_eq!(body["audit"]["written"], true);
    // The visitor sees it; everyone ahead of them moved back one, nobody else changed.
    assert_eq!(h.position(&line[6]).await, 1);
    assert_eq!(h.position(&line[0]).await, 2);
    assert_eq!(h.position(&line[5]).await, 7);
    assert_eq!(h.position(&line[7]).await, 8);
    let head = h.queue("?limit=1").await;
    assert_eq!(head["entries"][0]["ref"], seventh.as_str());

    let audit = std::fs::read_to_string(h.dir.path().join("audit.log")).unwrap();
    let entry: Value = serde_json::from_str(audit.lines().last().unwrap()).unwrap();
    assert_eq!(entry["action"], "front");
    assert_eq!(entry["new"]["position"], 1);

    let stranger = anteroom::queue::VisitorId::random().reference().to_string();
    let response = h.front(&stranger).await;
    assert_eq!(response.status(), 404);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["field"], "ref");
    assert_eq!(h.front("not-a-ref").await.status(), 422);
    h.ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_grant_admits_at_once_when_the_limits_allow() {
    let h = Harness::start("").await;
    let g = grant("main", 600);
    let (status, cookie, _, body) = h.visit(&format!("/shop?ar_grant={g}"), None, &[]).await;
    assert_eq!(status, 200);
    assert_eq!(body["origin"], true, "{body}");
    assert_eq!(body["uri"], "/shop", "the origin never sees the grant");
    // And it is a visitor on the site from now on.
    let (_, _, _, body) = h.visit("/", Some(&cookie.unwrap()), &[]).await;
    assert_eq!(body["origin"], true);
    h.ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_grant_puts_the_visitor_at_position_one_in_a_line() {
    let h = Harness::start(ONE_THEN_QUEUE).await;
    let line = h.fill(5).await;
    // A newcomer with a grant in the query.
    let first = grant("main", 600);
    let (status, vip, _, body) = h.visit(&format!("/?ar_grant={first}"), None, &[]).await;
    assert_eq!(status, 200);
    assert_eq!(body["status"], "waiting");
    assert_eq!(body["position"], 1);
    assert_eq!(body["waiting"], 6);
    let vip = vip.unwrap();
    // Reloading the very page that carried it keeps them where they are.
    let (status, _, _, body) = h
        .visit(&format!("/?ar_grant={first}"), Some(&vip), &[])
        .await;
    assert_eq!((status.as_u16(), body["position"].clone()), (200, 1.into()));
    // A visitor already waiting, with a grant in the header, moves to the front.
    let g = grant("main", 600);
    let (_, _, _, body) = h
        .visit("/", Some(&line[4]), &[("X-Anteroom-Grant", &g)])
        .await;
    assert_eq!(body["position"], 1);
    assert_eq!(h.position(&vip).await, 2);
    assert_eq!(h.position(&line[0]).await, 3);
    // The visitor who used it may come back with it (a reload); nobody else may.
    let (status, _, _, body) = h
        .visit("/", Some(&line[4]), &[("X-Anteroom-Grant", &g)])
        .await;
    assert_eq!((status.as_u16(), body["position"].clone()), (200, 1.into()));
    h.ar.shutdown().await.unwrap();
}

/// A grant is spent only when it gives its holder priority: one presented before the line
/// opens, or by a client over its share of places, is given back, and works once the line
/// is open (or from another device).
#[tokio::test]
async fn a_grant_that_gave_no_priority_is_not_spent() {
    let opens = SystemTime::now() + std::time::Duration::from_secs(2);
    let opens = humantime::format_rfc3339_millis(opens);
    let h = Harness::start(&format!(
        "{ONE_THEN_QUEUE}\n    max_places_per_client: 1\n    schedule:\n      queue_opens_at: \"{opens}\"\n"
    ))
    .await;
    let (holder, someone, in_line, phone) = (
        from("127.0.0.3"),
        from("127.0.0.4"),
        from("127.0.0.5"),
        from("127.0.0.6"),
    );
    // Before the line opens: the page says so, and the grant stays usable.
    let early = grant("main", 600);
    let link = format!("/?ar_grant={early}");
    let (_, cookie, _, body) = h.visit_with(&holder, &link, None, &[]).await;
    assert_eq!(body["phase"], "before_open", "{body}");
    let cookie = cookie.expect("the not-open page remembers the visitor");
    // Opened: somebody is let in (the one token), the next waits.
    let opened = async || {
        let (_, _, _, body) = h.visit_with(&someone, "/", None, &[]).await;
        (body["phase"] != "before_open").then_some(())
    };
    poll_until(std::time::Duration::from_secs(5), "the line open", opened).await;
    let (_, _, _, body) = h.visit_with(&in_line, "/", None, &[]).await;
    assert_eq!(body["position"], 1, "{body}");
    // The early holder's reload of the link: position 1, ahead of the line.
    let (status, _, _, body) = h.visit_with(&holder, &link, Some(&cookie), &[]).await;
    assert_eq!(
        (status.as_u16(), body["position"].clone()),
        (200, 1.into()),
        "{body}"
    );
    // A client holding its one place: its grant is refused by the share, and given back
    // for the holder's other device.
    let shared = format!("/?ar_grant={}", grant("main", 600));
    let (status, _, _, _) = h.visit_with(&in_line, &shared, None, &[]).await;
    assert_eq!(status.as_u16(), 429);
    let (status, _, _, body) = h.visit_with(&phone, &shared, None, &[]).await;
    assert_eq!(
        (status.as_u16(), body["position"].clone()),
        (200, 1.into()),
        "{body}"
    );
    h.ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_replayed_expired_forged_or_other_room_grant_is_403() {
    let h = Harness::start("").await;
    let g = grant("main", 600);
    let (status, _, _, body) = h.visit(&format!("/?ar_grant={g}"), None, &[]).await;
    assert_eq!(
        (status.as_u16(), body["origin"].clone()),
        (200, true.into())
    );
    let hits = h.origin.hits();

    let expired = priority::mint(
        PRIORITY_SECRET.as_bytes(),
        "main",
        now() - 1,
        &priority::random_nonce(),
    );
    let forged = priority::mint(
        b"somebody else's secret of 32+ bytes!",
        "main",
        now() + 600,
        &priority::random_nonce(),
    );
    let bad_grants = [
        ("replayed", g.clone()),
        ("expired", expired),
        ("forged", forged),
        ("other room", grant("shop", 600)),
    ];
    // Each refusal is a strike (5): every case comes from an address of its own
    // so that no client reaches a ban here (the ban is the next test's).
    let mut address = 10;
    for (what, bad) in bad_grants {
        for carried in ["query", "header"] {
            address += 1;
            let http = from(&format!("127.0.0.{address}"));
            let (status, cookie, header, body) = match carried {
                "query" => {
                    h.visit_with(&http, &format!("/?ar_grant={bad}"), None, &[])
                        .await
                }
                _ => {
                    h.visit_with(&http, "/", None, &[("x-anteroom-grant", &bad)])
                        .await
                }
            };
            assert_eq!(status, 403, "{what} in the {carried}");
            assert_eq!(header.as_deref(), Some("refused"), "{what}");
            assert_eq!(body["status"], 403, "{what}: {body}");
            assert!(
                cookie.is_none(),
                "{what}: a refused newcomer gets no cookie"
            );
        }
    }
    assert_eq!(h.origin.hits(), hits, "nothing refused reached the origin");
    // Text that is no grant at all is ignored, not refused: another site's
    // page can make one up (`?ar_grant=x`) and that must not turn the visitor away.
    for junk in ["v1.main.nope", "x"] {
        let http = from("127.0.0.9");
        let (status, _, header, _) = h
            .visit_with(&http, &format!("/?ar_grant={junk}"), None, &[])
            .await;
        assert_ne!(status, 403, "{junk}");
        assert_ne!(header.as_deref(), Some("refused"), "{junk}");
    }
    h.ar.shutdown().await.unwrap();
}

/// A refused grant is a strike of 5: a client that sends four bad grants has 20
/// and is banned (429, `banned`), while another address is still served.
#[tokio::test]
async fn bad_grants_are_strikes_that_ban_the_client() {
    let h = Harness::start("").await;
    let forger = from("127.0.0.61");
    for _ in 0..4 {
        let forged = priority::mint(
            b"somebody else's secret of 32+ bytes!",
            "main",
            now() + 600,
            &priority::random_nonce(),
        );
        let (status, ..) = h
            .visit_with(&forger, &format!("/?ar_grant={forged}"), None, &[])
            .await;
        assert!(
            status == 403 || status == 429,
            "a forged grant is refused: {status}"
        );
    }
    // Strikes are recorded off the request path: the ban lands within moments.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let banned = loop {
        let (status, _, header, _) = h.visit_with(&forger, "/", None, &[]).await;
        if status == 429 && header.as_deref() == Some("banned") {
            break true;
        }
        if std::time::Instant::now() > deadline {
            break false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert!(banned, "four forged grants did not ban the client");
    let (status, ..) = h.visit_with(&from("127.0.0.62"), "/", None, &[]).await;
    assert_eq!(status, 200, "another client is still served");
    h.ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_grant_never_reaches_the_origin() {
    let h = Harness::start("").await;
    let (_, cookie, _, _) = h.visit("/", None, &[]).await;
    let cookie = cookie.unwrap();
    let g = grant("main", 600);
    let (_, _, _, body) = h
        .visit(
            &format!("/p?a=1&ar_grant={g}&b=2"),
            Some(&cookie),
            &[("X-Anteroom-Grant", &g)],
        )
        .await;
    assert_eq!(body["origin"], true);
    assert_eq!(body["uri"], "/p?a=1&b=2");
    assert!(body["headers"].get("x-anteroom-grant").is_none(), "{body}");
    assert!(!body.to_string().contains(&g), "{body}");
    h.ar.shutdown().await.unwrap();

    // Without priority_secret a grant means nothing, and is still removed.
    let h = Harness::start_with("", None).await;
    let (status, _, _, body) = h
        .visit(
            &format!("/?ar_grant={g}"),
            None,
            &[("x-anteroom-grant", &g)],
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(body["uri"], "/");
    assert!(!body.to_string().contains(&g), "{body}");
    h.ar.shutdown().await.unwrap();
}

/// The code block of `lang` in docs/security.md's "Priority" section, unindented.
fn readme_snippet(lang: &str) -> String {
    let readme = include_str!("../../docs/security.md");
    let section = readme
        .split("\n## Priority\n")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("docs/security.md has a Priority section");
    let fence = format!("```{lang}\n");
    let start = section
        .find(&fence)
        .unwrap_or_else(|| panic!("no {lang} block"));
    let body = &section[start + fence.len()..];
    let end = body.find("```").unwrap();
    body[..end]
        .lines()
        .map(|l| l.strip_prefix("  ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs `interpreter` with `args`; `None` (with a loud message) if it is not installed.
fn run_snippet(interpreter: &str, args: &[&str]) -> Option<String> {
    let out = match Command::new(interpreter)
        .args(args)
        .env("ANTEROOM_PRIORITY_SECRET", PRIORITY_SECRET)
        .output()
    {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("SKIPPED: {interpreter} is not installed, so its snippet was not run");
            return None;
        }
        Err(e) => panic!("cannot run {interpreter}: {e}"),
    };
    assert!(
        out.status.success(),
        "{interpreter}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).unwrap().trim().to_owned())
}

/// A grant from outside anteroom puts a newcomer at position 1 of a real line, once.
async fn check_minted(h: &Harness, minted: &str) {
    let g = priority::verify(PRIORITY_SECRET.as_bytes(), minted, "main", now())
        .unwrap_or_else(|e| panic!("{minted}: {e}"));
    assert!((16..=64).contains(&g.nonce.len()));
    let (status, _, _, body) = h.visit(&format!("/?ar_grant={minted}"), None, &[]).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["position"], 1, "{body}");
    let (status, _, _, _) = h.visit(&format!("/?ar_grant={minted}"), None, &[]).await;
    assert_eq!(status, 403, "a second visitor cannot use it");
}

#[tokio::test]
async fn the_readme_python_and_javascript_snippets_mint_grants_anteroom_accepts() {
    let h = Harness::start(ONE_THEN_QUEUE).await;
    h.fill(3).await;
    let python = readme_snippet("python");
    assert!(python.contains("hmac.new"), "{python}");
    if let Some(minted) = run_snippet("python3", &["-c", &python]) {
        check_minted(&h, &minted).await;
    }
    let js = readme_snippet("js");
    assert!(js.contains("createHmac"), "{js}");
    if let Some(minted) = run_snippet("node", &["--input-type=module", "-e", &js]) {
        check_minted(&h, &minted).await;
    }
    h.ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn anteroom_grant_mints_from_the_config() {
    let h = Harness::start(ONE_THEN_QUEUE).await;
    h.fill(2).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("anteroom.yaml");
    std::fs::write(
        &path,
        format!(
            "cookie_secret: \"{COOKIE_SECRET}\"\nadmin_token: \"{ADMIN_TOKEN}\"\n\
             priority_secret: \"{PRIORITY_SECRET}\"\nrooms:\n  main:\n    origin: {}\n",
            h.origin.url()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_anteroom"))
        .args([
            "grant",
            "--config",
            path.to_str().unwrap(),
            "--room",
            "main",
        ])
        .args(["--ttl", "10m"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let minted = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let g = priority::verify(PRIORITY_SECRET.as_bytes(), &minted, "main", now()).unwrap();
    assert!((g.expires_at as i64 - (now() + 600) as i64).abs() <= 2);
    check_minted(&h, &minted).await;

    let out = Command::new(env!("CARGO_BIN_EXE_anteroom"))
        .args([
            "grant",
            "--config",
            path.to_str().unwrap(),
            "--room",
            "shop",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--room"));
    h.ar.shutdown().await.unwrap();
}
