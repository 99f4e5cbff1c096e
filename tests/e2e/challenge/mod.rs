//! The proof of work at the door, end to end against a real anteroom: a newcomer gets a
//! challenge and no place until a plain HTTP client does the work
//! (`anteroom::challenge::solve`, what the page's worker computes); every refusal
//! (replayed on either replica, another client's, another room's, expired, forged, short
//! of work, cross-site); `under_load` only while a line exists; the no-JavaScript time
//! lock followed as a browser would; two tabs; and the shadow line, which writes nothing
//! to the store. Embedded and on Redis with two replicas.

use std::sync::Arc;
use std::time::Duration;

use anteroom::queue::{MemoryStore, QueueStore};
use anteroom::run::Running;
use base64::Engine as _;
use serde_json::Value;

use crate::common::{
    AsVisitor, Origin, admin_metrics, config_with, from, metric, poll_until, start_with_store,
    status_header, visitor_cookie,
};

fn url(ar: &Running, path: &str) -> String {
    format!("http://{}{path}", ar.addr)
}

/// `GET /` on `ar` as a JSON client from `ip`, whatever the answer.
async fn json_newcomer(ar: &Running, ip: &str) -> reqwest::Response {
    from(ip)
        .get(url(ar, "/"))
        .header("accept", "application/json")
        .send()
        .await
        .unwrap()
}

/// A JSON newcomer's request for `/` on `ar`: the challenge it was given (text, bits),
/// after checking it got no place and no cookie.
async fn challenged(http: &reqwest::Client, ar: &Running) -> (String, u8) {
    let r = http
        .get(url(ar, "/"))
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(status_header(&r).as_deref(), Some("challenge"));
    assert!(visitor_cookie(&r).is_none(), "no cookie before the work");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["status"], "challenge");
    assert!(body.get("position").is_none());
    assert_eq!(body["challenge"]["answer"], "/__anteroom/challenge");
    assert_eq!(body["challenge"]["expires_in_secs"], 300);
    (
        body["challenge"]["challenge"].as_str().unwrap().to_owned(),
        body["challenge"]["bits"].as_u64().unwrap() as u8,
    )
}

/// The smallest counter solving `text` (what the page's worker finds).
fn solve(text: &str) -> u64 {
    let fields: Vec<&str> = text.split('.').collect();
    let bits: u8 = fields[3].parse().unwrap();
    let nonce: [u8; 16] = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(fields[4])
        .unwrap()
        .try_into()
        .unwrap();
    anteroom::challenge::solve(&nonce, bits)
}

/// POSTs `text` with `solution` to `ar` (as the page does: JSON, same origin).
async fn answer(
    http: &reqwest::Client,
    ar: &Running,
    text: &str,
    solution: u64,
) -> reqwest::Response {
    http.post(url(ar, "/__anteroom/challenge"))
        .header("sec-fetch-site", "same-origin")
        .json(&serde_json::json!({"challenge": text, "solution": solution, "solve_ms": 850}))
        .send()
        .await
        .unwrap()
}

/// A refused answer's reason, after checking its status and that it carries a fresh
/// challenge to start again with.
async fn refused(r: reqwest::Response, status: u16) -> String {
    assert_eq!(r.status(), status);
    assert!(visitor_cookie(&r).is_none());
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["status"], "challenge_refused");
    assert!(
        body["challenge"]["challenge"]
            .as_str()
            .unwrap()
            .starts_with("c1.main.")
    );
    body["reason"].as_str().unwrap().to_owned()
}

/// A well-formed visitor cookie signed with another secret: a strike of weight 5.
fn forged_cookie() -> String {
    let keys = anteroom::token::CookieKeys::new(&[7u8; 32], &[] as &[&[u8]]);
    keys.issue(
        anteroom::queue::VisitorId::random(),
        "main",
        std::time::SystemTime::now(),
    )
}

/// An embedded anteroom whose store (and its clock) the test holds.
async fn embedded(top: &str, room: &str) -> (Origin, tempfile::TempDir, Running, Arc<MemoryStore>) {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = config_with(&origin.url(), dir.path(), top, room);
    let store = Arc::new(MemoryStore::in_memory(anteroom::clock::Clock::system()));
    let ar = start_with_store(&config, store.clone()).await;
    (origin, dir, ar, store)
}

/// Whether `client`'s JSON request for `/` on `ar` is answered from the shadow line: an
/// ordinary waiting answer, but no cookie (nobody was stored).
async fn shadowed(client: &reqwest::Client, ar: &Running) -> bool {
    let r = client
        .get(url(ar, "/"))
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    status_header(&r).as_deref() == Some("waiting") && visitor_cookie(&r).is_none()
}

#[tokio::test]
async fn always_a_newcomer_solves_then_joins_and_an_unsolved_one_gets_no_place() {
    let (_origin, _dir, ar, store) = embedded(
        "",
        "    rate: 100\n    max_active: 1\n    challenge: {mode: always}\n",
    )
    .await;
    let http = from("127.0.0.1");
    // The page: the element the worker solves from, and no place.
    let page = http.get(url(&ar, "/shop?x=1")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(status_header(&page).as_deref(), Some("challenge"));
    let html = page.text().await.unwrap();
    assert!(html.contains(r#"id="anteroom-challenge""#), "{html}");
    assert!(html.contains(r#"data-return="/shop?x=1""#), "{html}");
    // A script that asks again and again but never solves holds nothing.
    for _ in 0..5 {
        challenged(&http, &ar).await;
    }
    let stats = store.stats("main").await.unwrap();
    assert_eq!((stats.waiting, stats.active, stats.total_joined), (0, 0, 0));
    // Solved: the first is let in (nobody waits), the second gets a place.
    let (text, bits) = challenged(&http, &ar).await;
    assert_eq!(bits, anteroom::challenge::DEFAULT_BITS);
    let r = answer(&http, &ar, &text, solve(&text)).await;
    assert_eq!(r.status(), 200);
    let first = visitor_cookie(&r).expect("a cookie once joined");
    assert_eq!(r.json::<Value>().await.unwrap()["status"], "admitted");
    let (text, _) = challenged(&from("127.0.0.2"), &ar).await;
    let second = from("127.0.0.2");
    let r = answer(&second, &ar, &text, solve(&text)).await;
    assert_eq!(r.status(), 200);
    let cookie = visitor_cookie(&r).unwrap();
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["status"], "waiting");
    assert_eq!(body["position"], 1);
    assert_eq!(store.stats("main").await.unwrap().waiting, 1);
    // Their cookie is a place now: no second challenge, no loop.
    let r = second
        .get(url(&ar, "/"))
        .header("accept", "application/json")
        .visitor(&cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(status_header(&r).as_deref(), Some("waiting"));
    let r = http
        .get(url(&ar, "/"))
        .visitor(&first)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "the admitted one reaches the origin");
    assert_eq!(r.json::<Value>().await.unwrap()["origin"], true);
    let text = admin_metrics(&http, ar.addr).await;
    assert!(metric(&text, r#"anteroom_challenges_issued_total{room="main"}"#) >= 8.0);
    assert_eq!(
        metric(&text, r#"anteroom_challenges_solved_total{room="main"}"#),
        2.0
    );
    assert_eq!(
        metric(
            &text,
            r#"anteroom_challenge_solve_seconds_count{room="main"}"#
        ),
        2.0
    );
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn replayed_foreign_expired_forged_and_cross_site_answers_are_refused() {
    let (_origin, _dir, ar, store) = embedded(
        "",
        "    rate: 100\n    challenge: {mode: always}\n  other:\n    origin: http://127.0.0.1:9\n    match_host: other.test\n    challenge: {mode: always}\n",
    )
    .await;
    let http = from("127.0.0.1");
    let (text, _) = challenged(&http, &ar).await;
    let solution = solve(&text);
    // Another client (another address) cannot use it.
    assert_eq!(
        refused(answer(&from("127.0.0.2"), &ar, &text, solution).await, 403).await,
        "wrong_client"
    );
    // Nor another room.
    let r = http
        .post(url(&ar, "/__anteroom/challenge"))
        .header("host", "other.test")
        .json(&serde_json::json!({"challenge": text, "solution": solution}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(r.json::<Value>().await.unwrap()["reason"], "wrong_room");
    // Not from another site's page.
    let r = http
        .post(url(&ar, "/__anteroom/challenge"))
        .header("sec-fetch-site", "cross-site")
        .json(&serde_json::json!({"challenge": text, "solution": solution}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = http
        .post(url(&ar, "/__anteroom/challenge"))
        .header("origin", "https://evil.example")
        .json(&serde_json::json!({"challenge": text, "solution": solution}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    // Short of the work, forged, malformed.
    let wrong = (0..)
        .find(|c| {
            let fields: Vec<&str> = text.split('.').collect();
            let nonce: [u8; 16] = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(fields[4])
                .unwrap()
                .try_into()
                .unwrap();
            !anteroom::challenge::meets(&anteroom::challenge::work(&nonce, *c), 17)
        })
        .unwrap();
    assert_eq!(
        refused(answer(&http, &ar, &text, wrong).await, 403).await,
        "insufficient_work"
    );
    let forged = text.replacen(".17.", ".1.", 1);
    assert_eq!(
        refused(answer(&http, &ar, &forged, 0).await, 403).await,
        "bad_signature"
    );
    let r = http
        .post(url(&ar, "/__anteroom/challenge"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(refused(r, 400).await, "malformed");
    // The real answer (as a form this time) joins once; the same again is a replay.
    let r = http
        .post(url(&ar, "/__anteroom/challenge"))
        .form(&[
            ("challenge", text.as_str()),
            ("solution", &solution.to_string()),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(visitor_cookie(&r).is_some());
    assert_eq!(
        refused(answer(&http, &ar, &text, solution).await, 403).await,
        "replayed"
    );
    assert_eq!(store.stats("main").await.unwrap().active, 1);
    // Expired: past the five minutes by the store's clock.
    let (late, _) = challenged(&http, &ar).await;
    ar.app
        .admission
        .store_for_tests()
        .clock()
        .unwrap()
        .advance_for_tests(Duration::from_secs(301));
    assert_eq!(
        refused(answer(&http, &ar, &late, solve(&late)).await, 403).await,
        "expired"
    );
    let text = admin_metrics(&http, ar.addr).await;
    for reason in [
        "wrong_client",
        "insufficient_work",
        "bad_signature",
        "malformed",
        "replayed",
        "expired",
    ] {
        assert_eq!(
            metric(
                &text,
                &format!(r#"anteroom_challenges_failed_total{{room="main",reason="{reason}"}}"#)
            ),
            1.0,
            "{reason}"
        );
    }
    assert_eq!(
        metric(&text, r#"anteroom_challenges_replayed_total{room="main"}"#),
        1.0
    );
    // Both answers from another site's page (by Sec-Fetch-Site, by Origin).
    assert_eq!(
        metric(
            &text,
            r#"anteroom_challenges_failed_total{room="main",reason="cross_site"}"#
        ),
        2.0
    );
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn under_load_asks_nobody_while_the_room_is_quiet_and_everybody_once_a_line_exists() {
    let (_origin, _dir, ar, store) = embedded(
        "",
        "    rate: 0.001\n    max_active: 1\n    challenge: {mode: under_load}\n",
    )
    .await;
    // Quiet: the first is let in, the second joins the line; neither is asked.
    let r = json_newcomer(&ar, "127.0.0.1").await;
    assert_eq!(r.status(), 200);
    assert!(visitor_cookie(&r).is_some());
    let r = json_newcomer(&ar, "127.0.0.2").await;
    assert_eq!(status_header(&r).as_deref(), Some("waiting"));
    assert_eq!(store.stats("main").await.unwrap().waiting, 1);
    // Once this replica's counters show the line (within about a second), newcomers are.
    poll_until(
        Duration::from_secs(5),
        "the line in the cached counters",
        async || {
            ar.app
                .admission
                .cached_stats("main")
                .filter(|s| s.stats.waiting > 0)
                .map(|_| ())
        },
    )
    .await;
    challenged(&from("127.0.0.3"), &ar).await;
    challenged(&from("127.0.0.4"), &ar).await;
    assert_eq!(
        store.stats("main").await.unwrap().waiting,
        1,
        "no place without work"
    );
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn without_javascript_the_time_lock_joins_after_no_js_wait() {
    let (_origin, _dir, ar, store) = embedded(
        "",
        "    rate: 100\n    challenge: {mode: always, no_js_wait: 1s}\n",
    )
    .await;
    let http = from("127.0.0.1");
    let html = http
        .get(url(&ar, "/products?id=7"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // The meta refresh a browser without JavaScript follows.
    let refresh = html
        .split(r#"<meta http-equiv="refresh" content=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a meta refresh")
        .replace("&amp;", "&");
    let (secs, target) = refresh.split_once(";url=").unwrap();
    assert_eq!(secs, "1");
    assert!(
        target.starts_with("/__anteroom/challenge/wait?c=c1.main."),
        "{target}"
    );
    // Too early: the same page again, refreshing for the rest of the wait.
    let r = http.get(url(&ar, target)).send().await.unwrap();
    if r.status() == 200 {
        assert_eq!(status_header(&r).as_deref(), Some("challenge"));
        assert_eq!(store.stats("main").await.unwrap().active, 0);
    }
    // Following it once the wait is over joins, and goes back where the visitor was.
    let r = poll_until(Duration::from_secs(5), "the time lock opens", async || {
        let r = http.get(url(&ar, target)).send().await.unwrap();
        (r.status() == 303).then_some(r)
    })
    .await;
    assert_eq!(r.headers()["location"], "/products?id=7");
    let cookie = visitor_cookie(&r).expect("joined");
    assert_eq!(store.stats("main").await.unwrap().active, 1);
    let r = http
        .get(url(&ar, "/products?id=7"))
        .visitor(&cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.json::<Value>().await.unwrap()["origin"], true);
    // Followed again (a second refresh, a shared link): a spent challenge, refused; the
    // visitor's own cookie still goes on.
    let r = from("127.0.0.1")
        .get(url(&ar, target))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = http
        .get(url(&ar, target))
        .visitor(&cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    // Another site's address as the return path goes home instead.
    let (text, _) = challenged(&http, &ar).await;
    let evil = format!("/__anteroom/challenge/wait?c={text}&r=%2F%2Fevil.example%2F");
    let r = poll_until(
        Duration::from_secs(5),
        "the second lock opens",
        async || {
            let r = http.get(url(&ar, &evil)).send().await.unwrap();
            (r.status() == 303).then_some(r)
        },
    )
    .await;
    assert_eq!(r.headers()["location"], "/");
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn two_tabs_solving_at_once_hold_one_place_and_no_loop() {
    let (_origin, _dir, ar, store) = embedded(
        "",
        "    rate: 0.001\n    max_active: 1\n    challenge: {mode: always}\n",
    )
    .await;
    // Someone on the site, so the tabs wait.
    let http = from("127.0.0.1");
    let (text, _) = challenged(&http, &ar).await;
    answer(&http, &ar, &text, solve(&text)).await;
    let tab = from("127.0.0.2");
    let (one, _) = challenged(&tab, &ar).await;
    let (two, _) = challenged(&tab, &ar).await;
    let r = answer(&tab, &ar, &one, solve(&one)).await;
    let cookie = visitor_cookie(&r).unwrap();
    assert_eq!(r.json::<Value>().await.unwrap()["position"], 1);
    // The second tab shares the cookie jar: its answer gets the same place back.
    let r = tab
        .post(url(&ar, "/__anteroom/challenge"))
        .visitor(&cookie)
        .json(&serde_json::json!({"challenge": two, "solution": solve(&two)}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        (body["status"].as_str(), body["position"].as_u64()),
        (Some("waiting"), Some(1))
    );
    let stats = store.stats("main").await.unwrap();
    assert_eq!(
        (stats.active, stats.waiting),
        (1, 1),
        "one place for two tabs"
    );
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_struck_client_waits_in_a_shadow_line_that_never_moves_and_costs_no_write() {
    let (_origin, _dir, ar, store) = embedded(
        "abuse:\n  strikes: 100\n",
        "    rate: 100\n    shadow_after: 5\n    challenge: {mode: always}\n",
    )
    .await;
    let struck = from("127.0.0.5");
    // A challenge issued before the strike, solved: kept for the side doors below.
    let (early, _) = challenged(&struck, &ar).await;
    let early_solution = solve(&early);
    // A forged cookie: one strike of weight 5.
    struck
        .get(url(&ar, "/"))
        .visitor(&forged_cookie())
        .send()
        .await
        .unwrap();
    let before = store.stats("main").await.unwrap();
    for _ in 0..5 {
        let r = struck
            .get(url(&ar, "/"))
            .header("accept", "application/json")
            .send()
            .await
            .unwrap();
        assert_eq!(status_header(&r).as_deref(), Some("waiting"));
        assert!(visitor_cookie(&r).is_none());
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["status"], "waiting");
        assert!(body["position"].as_u64().unwrap() >= 1);
        let html = struck.get(url(&ar, "/")).send().await.unwrap();
        assert_eq!(status_header(&html).as_deref(), Some("waiting"));
        // An admission pass runs every 100 ms: the line moves, this place does not.
        tokio::time::sleep(Duration::from_millis(120)).await;
    }
    let after = store.stats("main").await.unwrap();
    assert_eq!(
        (
            after.waiting,
            after.active,
            after.total_joined,
            after.total_admitted
        ),
        (
            before.waiting,
            before.active,
            before.total_joined,
            before.total_admitted
        ),
        "nothing written"
    );
    // Anyone else is challenged as usual.
    challenged(&from("127.0.0.6"), &ar).await;
    let text = admin_metrics(&struck, ar.addr).await;
    // The forged cookie's own request was the first: the strike is recorded as the
    // cookie is read, before the door.
    assert_eq!(
        metric(&text, r#"anteroom_shadowed_total{room="main"}"#),
        11.0
    );
    // The door has no side entrance: a solved challenge, garbage, or the time lock each
    // lead back to the shadow page (no challenge, no place, no cookie), whose reference
    // holds still as a real visitor's does.
    let mut references = Vec::new();
    let garbage = struck
        .post(url(&ar, "/__anteroom/challenge"))
        .header("sec-fetch-site", "same-origin")
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    for r in [answer(&struck, &ar, &early, early_solution).await, garbage] {
        assert_eq!(r.status(), 200);
        assert_eq!(status_header(&r).as_deref(), Some("waiting"));
        assert!(visitor_cookie(&r).is_none());
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["status"], "waiting", "{body}");
        assert!(body.get("challenge").is_none(), "{body}");
        references.push(body["ref"].clone());
    }
    let wait = struck
        .get(url(
            &ar,
            &format!("/__anteroom/challenge/wait?c={early}&r=/"),
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(status_header(&wait).as_deref(), Some("waiting"));
    assert!(visitor_cookie(&wait).is_none());
    assert!(references[0].is_string(), "{references:?}");
    assert_eq!(references[0], references[1]);
    assert_eq!(
        store.stats("main").await.unwrap().total_joined,
        after.total_joined,
        "nothing written"
    );
    ar.shutdown().await.unwrap();
}

/// `PUT …/config` with `challenge` (one key of it; the others keep the file's).
async fn put_challenge(ar: &Running, change: Value) -> Value {
    let r = reqwest::Client::new()
        .put(url(ar, "/__anteroom/admin/api/rooms/main/config"))
        .bearer_auth(crate::common::ADMIN_TOKEN)
        .json(&serde_json::json!({ "challenge": change }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

#[tokio::test]
async fn the_door_turns_on_and_off_live_through_the_admin_api() {
    let (_origin, _dir, ar, store) = embedded(
        "",
        "    rate: 0.001\n    max_active: 1\n    challenge: {no_js_wait: 7s}\n",
    )
    .await;
    // Off, as the file has it: the first is let in, nobody is asked.
    assert!(visitor_cookie(&json_newcomer(&ar, "127.0.0.1").await).is_some());
    let set = put_challenge(&ar, serde_json::json!({"mode": "always"})).await;
    assert_eq!(set["settings"]["challenge"]["mode"], "always");
    assert_eq!(
        set["settings"]["challenge"]["no_js_wait"], "7s",
        "the keys not given keep the file's"
    );
    // The next newcomer is asked, and gets no place.
    challenged(&from("127.0.0.2"), &ar).await;
    assert_eq!(store.stats("main").await.unwrap().waiting, 0);
    let shown =
        crate::common::admin_get(&reqwest::Client::new(), ar.addr, "rooms/main/config").await;
    assert_eq!(shown["challenge"]["mode"], "always");
    assert!(
        shown["changed"]
            .as_array()
            .unwrap()
            .contains(&"challenge".into())
    );
    // A bad value is refused naming the field, and changes nothing.
    let r = reqwest::Client::new()
        .put(url(&ar, "/__anteroom/admin/api/rooms/main/config"))
        .bearer_auth(crate::common::ADMIN_TOKEN)
        .json(&serde_json::json!({"challenge": {"mode": "sometimes"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    let problem: Value = r.json().await.unwrap();
    assert_eq!(problem["field"], "challenge.mode", "{problem}");
    challenged(&from("127.0.0.3"), &ar).await;
    // null: the file's again, and newcomers join without work.
    put_challenge(&ar, Value::Null).await;
    let r = json_newcomer(&ar, "127.0.0.4").await;
    assert_eq!(status_header(&r).as_deref(), Some("waiting"));
    assert_eq!(store.stats("main").await.unwrap().waiting, 1);
    ar.shutdown().await.unwrap();
}

mod redis;
