//! The auditable lottery end to end: a real anteroom in front of a real origin, on
//! a real `redis-server` (1,000 entrants) and on the embedded store (smaller), with the
//! store's clock driven by the test. Entrants join during the draw and keep their
//! receipts; the commitment is read before the doors, the salt and the sorted list after;
//! every entrant is verified as `anteroom verify-draw` does (the library function, and
//! the real binary once, on the document saved as served), and the places published
//! are the positions the visitors hold and the order the doors admit them in.

use crate::common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anteroom::fairness::draw::{
    DrawDocument, DrawHash, DrawStatus, VerifyInput, commitment, verify,
};
use anteroom::queue::{QueueStore, SettingsPatch};
use anteroom::run::Running;
use common::*;

const BIN: &str = env!("CARGO_BIN_EXE_anteroom");

/// The room's YAML: a lottery whose draw is open now and whose doors open in an hour (the
/// test moves the store's clock there); ten on the site at once; no per-address limits,
/// since every entrant comes from loopback.
fn room_yaml() -> String {
    let now = SystemTime::now();
    let at = |t: SystemTime| humantime::format_rfc3339_millis(t).to_string();
    format!(
        "    rate: 1000\n    max_active: 10\n    session_ttl: 1h\n    abandon_after: 2h\n    lottery: true\n    join_limit_per_ip: 0\n    max_places_per_client: 0\n    schedule:\n      queue_opens_at: \"{}\"\n      admits_at: \"{}\"\n",
        at(now - Duration::from_secs(60)),
        at(now + Duration::from_secs(3_600)),
    )
}

/// One entrant as their own JSON answer showed them during the draw.
struct Entrant {
    cookie: String,
    visitor_id: String,
    draw_hash: String,
}

async fn page(ar: &Running, cookie: Option<&str>) -> reqwest::Response {
    let mut request = client()
        .get(format!("http://{}/page", ar.addr))
        .header("accept", "application/json");
    if let Some(cookie) = cookie {
        request = request.visitor(cookie);
    }
    request.send().await.unwrap()
}

async fn draw_document(ar: &Running) -> (reqwest::header::HeaderMap, bytes::Bytes) {
    let response = client()
        .get(format!("http://{}/__anteroom/rooms/main/draw", ar.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let headers = response.headers().clone();
    (headers, response.bytes().await.unwrap())
}

async fn join(ar: &Running) -> Entrant {
    let response = page(ar, None).await;
    assert_eq!(response.status(), 200);
    let cookie = visitor_cookie(&response).expect("a visitor cookie");
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(
        (&body["phase"], &body["position"]),
        (&"draw".into(), &serde_json::Value::Null)
    );
    let receipt = &body["receipt"];
    assert_eq!(
        receipt["ref"], body["ref"],
        "the receipt names the page's reference"
    );
    assert_eq!(
        receipt["place"],
        serde_json::Value::Null,
        "no place before the doors"
    );
    Entrant {
        cookie,
        visitor_id: receipt["visitor_id"].as_str().unwrap().to_owned(),
        draw_hash: receipt["draw_hash"].as_str().unwrap().to_owned(),
    }
}

/// The whole drop: `n` entrants, the doors (by `open_doors`, which moves the store's
/// clock past `admits_at`), the published draw verified for every entrant, and the
/// order the doors admit in.
async fn a_drop(ar: &Running, n: usize, open_doors: impl FnOnce()) {
    let store: Arc<dyn QueueStore> = ar.app.admission.store_for_tests().clone();
    let mut entrants = Vec::with_capacity(n);
    for chunk in 0..n.div_ceil(50) {
        let batch = (chunk * 50..n.min(chunk * 50 + 50)).map(|_| join(ar));
        entrants.extend(futures_util::future::join_all(batch).await);
    }

    // The HTML page shows the receipt too.
    let html = client()
        .get(format!("http://{}/page", ar.addr))
        .visitor(&entrants[0].cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        html.contains(r#"id="ar-receipt""#) && html.contains(&entrants[0].draw_hash),
        "{html}"
    );

    // Before the doors: the commitment and how many entered; no salt, no list.
    let (headers, body) = draw_document(ar).await;
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(headers["cache-control"], "no-cache");
    assert_eq!(
        headers["x-content-type-options"], "nosniff",
        "our pages' headers"
    );
    let before = DrawDocument::from_json(&body).unwrap();
    assert_eq!(before.status, DrawStatus::Collecting);
    assert_eq!(before.entrants, n as u64);
    assert!(before.salt.is_none() && before.hashes.is_none());
    assert!(before.opens_at.is_some());
    let seen_commitment = before.commitment.clone();
    let text = String::from_utf8_lossy(&body);
    assert!(
        !text.contains("\"salt\"") && !text.contains("hashes"),
        "{text}"
    );

    // The doors, with the room paused so that positions can be compared with places.
    store
        .update_settings("main", &SettingsPatch::pause())
        .await
        .unwrap();
    open_doors();
    let (headers, body) = draw_document(ar).await;
    assert_eq!(headers["cache-control"], "public, max-age=300");
    let doc = DrawDocument::from_json(&body).unwrap();
    assert_eq!(doc.status, DrawStatus::Drawn);
    assert_eq!(
        doc.commitment, seen_commitment,
        "the commitment did not move"
    );
    let salt = hex::decode(doc.salt.as_deref().unwrap()).unwrap();
    assert_eq!(
        commitment(&salt),
        seen_commitment,
        "SHA-256(salt) is the commitment"
    );
    let hashes = doc.hashes.clone().unwrap();
    assert_eq!((doc.entrants, hashes.len()), (n as u64, n));
    assert!(hashes.windows(2).all(|w| w[0] < w[1]), "sorted");
    // Never an id.
    let text = String::from_utf8_lossy(&body);
    for e in &entrants {
        assert!(!text.contains(&e.visitor_id));
    }
    // Served from memory from now on: the same bytes again.
    assert_eq!(draw_document(ar).await.1, body);

    // Every entrant verifies, as `anteroom verify-draw` checks them.
    let mut places = Vec::with_capacity(n);
    for e in &entrants {
        let input = VerifyInput::parse(
            doc.salt.as_deref().unwrap(),
            &seen_commitment,
            &e.visitor_id,
        )
        .unwrap();
        let v = verify(&input, Some(&doc));
        assert!(v.ok(), "{}", v.report());
        assert_eq!(v.draw_hash.to_hex(), e.draw_hash, "the receipt's hash");
        places.push(v.place.unwrap());
    }
    let distinct: HashSet<u64> = places.iter().copied().collect();
    assert_eq!(distinct.len(), n, "one place each");

    // The real binary, once, on the document saved as served.
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &body).unwrap();
    let first = places.iter().position(|&p| p == 1).unwrap();
    let out = std::process::Command::new(BIN)
        .args([
            "verify-draw",
            "--commitment",
            &seen_commitment,
            "--visitor-id",
        ])
        .arg(&entrants[first].visitor_id)
        .arg("--document")
        .arg(file.path())
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{report}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(report.contains(&format!("place 1 of {n}")), "{report}");

    // A sample of receipts after the doors: their place, which is their position.
    let mut sample: Vec<usize> = (1..=5u64)
        .map(|p| places.iter().position(|&q| q == p).unwrap())
        .collect();
    sample.extend((0..n).step_by(n / 20).filter(|i| places[*i] > 12));
    for &i in &sample {
        let body: serde_json::Value = page(ar, Some(&entrants[i].cookie))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(body["phase"], "queueing");
        assert_eq!(body["receipt"]["place"], places[i], "visitor {i}");
        assert_eq!(body["receipt"]["draw_hash"], entrants[i].draw_hash.as_str());
        assert_eq!(
            body["position"], places[i],
            "visitor {i}: the place is the position"
        );
    }
    // Someone arriving after the doors has no receipt, and queues behind the draw.
    let late: serde_json::Value = page(ar, None).await.json().await.unwrap();
    assert_eq!(late["position"], n as u64 + 1);
    assert!(late.get("receipt").is_none(), "{late}");

    // The doors admit in the published order: the first ten places are let in.
    store
        .update_settings("main", &SettingsPatch::resume())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while store.stats("main").await.unwrap().active < 10 {
        assert!(Instant::now() < deadline, "nobody admitted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for &i in &sample {
        let response = page(ar, Some(&entrants[i].cookie)).await;
        let body: serde_json::Value = response.json().await.unwrap();
        if places[i] <= 10 {
            assert_eq!(body["origin"], true, "place {} is on the site", places[i]);
        } else {
            assert_eq!(body["position"], places[i] - 10, "place {}", places[i]);
        }
    }
    // The published list is unchanged by all of it.
    assert_eq!(draw_document(ar).await.1, body);
    let listed: HashSet<DrawHash> = hashes.into_iter().collect();
    assert!(
        entrants
            .iter()
            .all(|e| listed.contains(&DrawHash::from_hex(&e.draw_hash).unwrap()))
    );
}

#[tokio::test]
async fn a_thousand_entrants_on_redis_verify_their_draw() {
    let redis = anteroom_fixtures::RedisServer::start();
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = redis_config(&origin.url(), &redis.url(), dir.path(), &room_yaml());
    let store = redis_store(&redis.url()).await;
    let ar = start_with_store(&config, store.clone()).await;
    a_drop(&ar, 1_000, || {
        store.advance_clock_for_tests(Duration::from_secs(3_601));
    })
    .await;
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn entrants_on_the_embedded_store_verify_their_draw() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = common::config(&origin.url(), dir.path(), &room_yaml());
    let clock = anteroom::clock::Clock::system();
    let store = Arc::new(anteroom::queue::MemoryStore::in_memory(clock.clone()));
    let ar = start_with_store(&config, store).await;
    a_drop(&ar, 120, || {
        clock.advance_for_tests(Duration::from_secs(3_601))
    })
    .await;
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_draw_of_an_unknown_room_or_one_without_a_lottery_is_404() {
    let (_origin, _dir, ar) = front("").await;
    for room in ["main", "nope"] {
        let response = client()
            .get(format!("http://{}/__anteroom/rooms/{room}/draw", ar.addr))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 404, "{room}");
    }
    ar.shutdown().await.unwrap();
    // A lottery with no doors (`admits_at`) never draws: nothing published.
    let (_origin, _dir, ar) = front("    lottery: true\n").await;
    let response = client()
        .get(format!("http://{}/__anteroom/rooms/main/draw", ar.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    ar.shutdown().await.unwrap();
}
