//! Hostile input at volume: bad visitor cookies by the hundred thousand against
//! a real anteroom on loopback in front of a real origin that counts what reaches it.
//! (Fixed-budget fuzzing of the cookie verifier and the config loader is in `fuzz.rs`.)
//!
//! Every bad cookie is derived from the cookie of a visitor who *is* on the site, so one
//! that the verifier wrongly accepted would be proxied, and the origin's counter would
//! show it.
//!
//! Run with `--nocapture` to see the figures that RELIABILITY.md quotes.

use crate::common;

use std::time::{Duration, Instant, SystemTime};

use anteroom::queue::{SettingsPatch, VisitorId};
use anteroom::token::CookieKeys;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use common::*;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// Bad cookies made, every one checked by the verifier the request path uses.
const HOSTILE_COOKIES: usize = 100_000;
/// Of those, sent to the server over real HTTP in every run. A debug build serves about
/// 600 of these a second on a shared 2-core machine, so all 100,000 would take ~3 min;
/// `ANTEROOM_HOSTILE_REQUESTS=100000` sends them all (RELIABILITY.md quotes such a run).
const HTTP_REQUESTS: usize = 20_000;
/// Keep-alive connections the bad cookies are pipelined over.
const CONNECTIONS: usize = 8;

/// A small deterministic generator (xorshift64*), so a failing run can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Characters a cookie header can carry (visible ASCII without `;` and `,`).
fn cookie_char(rng: &mut Rng) -> char {
    loop {
        let c = (0x21 + rng.below(0x7f - 0x21)) as u8 as char;
        if c != ';' && c != ',' {
            return c;
        }
    }
}

const KINDS: [&str; 11] = [
    "bit flipped",
    "character changed",
    "truncated",
    "signed with another secret",
    "another secret under our key id",
    "other room",
    "expired",
    "from the future",
    "garbage",
    "extended",
    "MAC zeroed",
];

/// The `i`th hostile cookie: a mutation of `good` (a cookie that admits), of kind
/// `i % KINDS.len()`.
fn hostile(
    i: usize,
    rng: &mut Rng,
    good: &str,
    keys: &CookieKeys,
    other: &CookieKeys,
    visitor: VisitorId,
) -> String {
    let raw = URL_SAFE_NO_PAD.decode(good).unwrap();
    let now = SystemTime::now();
    let cookie = match i % KINDS.len() {
        0 => {
            let mut raw = raw.clone();
            let bit = rng.below(raw.len() * 8);
            raw[bit / 8] ^= 1 << (bit % 8);
            URL_SAFE_NO_PAD.encode(raw)
        }
        1 => {
            let mut text: Vec<char> = good.chars().collect();
            let at = rng.below(text.len());
            let mut c = cookie_char(rng);
            while c == text[at] {
                c = cookie_char(rng);
            }
            text[at] = c;
            text.into_iter().collect()
        }
        2 => good[..rng.below(good.len())].to_owned(),
        3 => other.issue(visitor, "main", now),
        4 => {
            let mut forged = URL_SAFE_NO_PAD
                .decode(other.issue(visitor, "main", now))
                .unwrap();
            forged[1..5].copy_from_slice(&raw[1..5]);
            URL_SAFE_NO_PAD.encode(forged)
        }
        5 => keys.issue(visitor, "other", now),
        6 => keys.issue(
            visitor,
            "main",
            now - Duration::from_secs(25 * 3600 + rng.below(1_000_000) as u64),
        ),
        7 => keys.issue(
            visitor,
            "main",
            now + Duration::from_secs(120 + rng.below(1_000_000) as u64),
        ),
        8 => (0..rng.below(200)).map(|_| cookie_char(rng)).collect(),
        9 => {
            let mut text = good.to_owned();
            for _ in 0..1 + rng.below(8) {
                text.push(cookie_char(rng));
            }
            text
        }
        _ => {
            let mut raw = raw.clone();
            let n = raw.len();
            raw[n - 32..].fill(0);
            URL_SAFE_NO_PAD.encode(raw)
        }
    };
    debug_assert_ne!(cookie, good);
    cookie
}

/// One response: (status, X-Anteroom-Status), or what went wrong.
type Outcome = Result<(u16, Option<String>), String>;

/// Writes `requests` back to back on one connection and reads one response per request:
/// (kind, Ok((status, X-Anteroom-Status)) or Err(what went wrong)). A response from the
/// origin (its echo says `"origin":true`) is reported with the status header "ORIGIN".
async fn pipeline(
    addr: std::net::SocketAddr,
    requests: Vec<(usize, Vec<u8>)>,
) -> Vec<(usize, Outcome)> {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (read, mut write) = stream.into_split();
    let kinds: Vec<usize> = requests.iter().map(|(k, _)| *k).collect();
    let writer = tokio::spawn(async move {
        for chunk in requests.chunks(64) {
            let bytes: Vec<u8> = chunk.iter().flat_map(|(_, r)| r.iter().copied()).collect();
            if write.write_all(&bytes).await.is_err() {
                return;
            }
        }
        // Keep the write half open until every response is read.
        std::future::pending::<()>().await;
    });
    let mut read = BufReader::new(read);
    let mut out = Vec::with_capacity(kinds.len());
    for kind in kinds {
        let outcome = tokio::time::timeout(Duration::from_secs(30), read_response(&mut read))
            .await
            .unwrap_or_else(|_| Err("no response within 30 s".to_owned()));
        let failed = outcome.is_err();
        out.push((kind, outcome));
        if failed {
            break;
        }
    }
    writer.abort();
    out
}

async fn read_response(read: &mut BufReader<tokio::net::tcp::OwnedReadHalf>) -> Outcome {
    let mut line = String::new();
    if read.read_line(&mut line).await.map_err(|e| e.to_string())? == 0 {
        return Err("connection closed".to_owned());
    }
    let status: u16 = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {line:?}"))?;
    let (mut length, mut anteroom_status, mut chunked) = (0usize, None, false);
    loop {
        line.clear();
        read.read_line(&mut line).await.map_err(|e| e.to_string())?;
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':').ok_or("bad header")?;
        let value = value.trim();
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.parse().map_err(|_| "bad length")?,
            "x-anteroom-status" => anteroom_status = Some(value.to_owned()),
            "transfer-encoding" => chunked = true,
            _ => {}
        }
    }
    if chunked {
        return Err("a chunked response (not one of anteroom's own pages)".to_owned());
    }
    let mut body = vec![0u8; length];
    read.read_exact(&mut body)
        .await
        .map_err(|e| e.to_string())?;
    if body.windows(13).any(|w| w == b"\"origin\":true") {
        anteroom_status = Some("ORIGIN".to_owned());
    }
    Ok((status, anteroom_status))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_bad_cookies_admit_nobody() {
    let panics_before = common::panics();
    // Exactly one visitor gets in (the fast path), then every newcomer waits; the join
    // limit is off so every request takes the full path, and nobody is abandoned during a
    // long run (the bad cookies' visitors never come back to heartbeat).
    let (origin, _dir, ar) = front_with(
        // Every bad cookie is a strike that would soon ban loopback, and this
        // test is about what the verifier and the store do with each one: loopback is in
        // abuse.allow (tests/e2e/abuse.rs shows the ban).
        "abuse:\n  allow: [127.0.0.1]\n",
        // Every request comes from loopback: the per-client shares are off here.
        "    rate: 0.01\n    max_active: 1000\n    join_limit_per_ip: 0\n    abandon_after: 1h\n    max_sessions_per_client: 0\n    max_places_per_client: 0",
    )
    .await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let url = format!("http://{}/", ar.addr);
    let admitted = http.get(&url).send().await.unwrap();
    let good = visitor_cookie(&admitted).unwrap();
    assert_eq!(origin.hits(), 1);
    // Then the room is paused: nobody else is admitted however long the run takes (at
    // 0.01/s a pass would let the head of the line in every 100 s), while the visitor on
    // the site carries on.
    ar.app
        .admission
        .store_for_tests()
        .update_settings("main", &SettingsPatch::pause())
        .await
        .unwrap();
    let secret = hex::decode(COOKIE_SECRET).unwrap();
    let keys = CookieKeys::new(&secret, &[] as &[&[u8]]);
    let other = CookieKeys::new(&[7u8; 32], &[] as &[&[u8]]);
    let visitor = keys.verify(&good, SystemTime::now()).unwrap().visitor;

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let total: usize = std::env::var("ANTEROOM_HOSTILE_REQUESTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(HTTP_REQUESTS);
    let cookies: Vec<(usize, String)> = (0..HOSTILE_COOKIES.max(total))
        .map(|i| {
            (
                i % KINDS.len(),
                hostile(i, &mut rng, &good, &keys, &other, visitor),
            )
        })
        .collect();

    // Every one of them is refused by the verifier, or names another room (checked after
    // the HTTP run, so a broken verifier shows there too).
    let now = SystemTime::now();
    let verify_started = Instant::now();
    let verified: Vec<&str> = cookies
        .iter()
        .filter(|(_, cookie)| keys.verify(cookie, now).is_ok_and(|c| c.room == "main"))
        .map(|(kind, _)| KINDS[*kind])
        .collect();
    println!(
        "hostile cookies: {} checked by the verifier in {:.1} s, {} accepted",
        cookies.len(),
        verify_started.elapsed().as_secs_f64(),
        verified.len()
    );
    let cookies = &cookies[..total];

    // Pipelined over a handful of keep-alive connections: the requests are written
    // back to back and the responses read as they come, so the client costs next to
    // nothing and the figure is the server's.
    let mut per_connection: Vec<Vec<(usize, Vec<u8>)>> = vec![Vec::new(); CONNECTIONS];
    for (i, (kind, cookie)) in cookies.iter().enumerate() {
        // Most ask for JSON (the API clients' path); every tenth for the HTML page.
        let accept = if i % 10 == 0 {
            "text/html"
        } else {
            "application/json"
        };
        let request = format!(
            "GET /item/{i} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: {accept}\r\n\
             Cookie: ar_visitor={cookie}\r\n\r\n"
        );
        per_connection[i % CONNECTIONS].push((*kind, request.into_bytes()));
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for batch in per_connection {
        tasks.push(tokio::spawn(pipeline(ar.addr, batch)));
    }
    let mut results: Vec<(usize, Outcome)> = Vec::new();
    for task in tasks {
        results.extend(task.await.unwrap());
    }
    let elapsed = started.elapsed();

    let mut per_kind = [0usize; KINDS.len()];
    let mut not_waiting = Vec::new();
    for (kind, outcome) in &results {
        per_kind[*kind] += 1;
        match outcome {
            Ok((200, Some(status))) if status == "waiting" => {}
            other => not_waiting.push((KINDS[*kind], other.clone())),
        }
    }
    println!(
        "hostile cookies: {} over HTTP in {:.1} s ({:.0}/s), {} not answered with the \
         waiting page, origin hits {} (1 is the real visitor), panics {}",
        results.len(),
        elapsed.as_secs_f64(),
        results.len() as f64 / elapsed.as_secs_f64(),
        not_waiting.len(),
        origin.hits(),
        common::panics() - panics_before,
    );
    for (kind, n) in KINDS.iter().zip(per_kind) {
        println!("  {kind}: {n}");
    }
    assert!(
        verified.is_empty(),
        "{} bad cookies verified, e.g. {:?}",
        verified.len(),
        &verified[..verified.len().min(5)]
    );
    assert!(
        not_waiting.is_empty(),
        "{} bad cookies were not simply put in line, e.g. {:?}",
        not_waiting.len(),
        &not_waiting[..not_waiting.len().min(5)]
    );
    assert_eq!(origin.hits(), 1, "a bad cookie reached the origin");
    assert_eq!(common::panics() - panics_before, 0, "something panicked");
    let stats = ar
        .app
        .admission
        .store_for_tests()
        .stats("main")
        .await
        .unwrap();
    assert_eq!(stats.total_admitted, 1, "the store admitted a bad cookie");
    assert_eq!(stats.total_joined, total as u64, "each was a newcomer");
    assert_eq!(stats.waiting, total as u64, "and is still in line");

    // Still serving: the real visitor goes on through, a newcomer gets their place.
    let again = http
        .get(&url)
        .header("cookie", format!("ar_visitor={good}"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        again.json::<serde_json::Value>().await.unwrap()["origin"],
        true
    );
    assert_eq!(origin.hits(), 2);
    let newcomer = http
        .get(&url)
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    let body: serde_json::Value = newcomer.json().await.unwrap();
    assert_eq!(body["position"], total as u64 + 1, "{body}");
    ar.shutdown().await.unwrap();
}
