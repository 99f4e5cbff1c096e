//! Random and malformed HTTP through the public listener: thousands of requests
//! made from a valid one by structured mutations (methods, targets, versions, header names
//! and values, framing, control bytes, truncation) and plain random bytes, each on its own
//! connection to a real anteroom in front of a real origin. Nothing may panic, hang or reach
//! the origin, no answer may be a 500 (a 500 is our bug, not the client's), and afterwards
//! the visitor on the site is still served and a newcomer still gets a place.
//!
//! The cases come from proptest's deterministic runner, so a failure names a case that
//! reproduces run after run. Run with `--nocapture` for the figures RELIABILITY.md quotes.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

/// Requests per run (each on a fresh connection), and how many are in flight at once.
const CASES: usize = 4_000;
const CONCURRENCY: usize = 32;
/// A connection must be answered or closed within this (header_read_timeout 1s, body and
/// idle timeouts 2s, plus scheduling slack on a shared 2-core machine).
const GIVE_UP: Duration = Duration::from_secs(8);

/// One piece of a request line or header block, before mutation.
#[derive(Clone, Debug)]
enum Edit {
    Method(String),
    Target(String),
    Version(String),
    /// A header line as raw bytes (may hold CR, LF, NUL, non-ASCII).
    Header(Vec<u8>),
    /// Framing headers that disagree with the body that follows.
    Framing(String, Vec<u8>),
    /// Cut the whole request at this fraction of its length (in 1/256ths).
    Truncate(u8),
    /// Flip one byte somewhere.
    Corrupt(usize, u8),
    /// Use the line ending `\n` alone, or `\r` alone, everywhere.
    LineEnding(&'static str),
    /// Replace everything with random bytes.
    Garbage(Vec<u8>),
}

fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("GET".to_owned()),
        Just("POST".to_owned()),
        Just("CONNECT".to_owned()),
        Just("OPTIONS".to_owned()),
        Just("PRI".to_owned()),
        Just("get".to_owned()),
        "[A-Z]{1,12}",
        "[\\x21-\\x7e]{1,20}",
        ".{0,30}",
    ]
}

fn target() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("/".to_owned()),
        Just("*".to_owned()),
        Just("/../../etc/passwd".to_owned()),
        Just("/%2e%2e/%2e%2e/admin".to_owned()),
        Just("/__anteroom/../x".to_owned()),
        Just("/__anteroom/events".to_owned()),
        Just("/__anteroom/admin/api/rooms".to_owned()),
        Just("http://other.example/".to_owned()),
        Just("shop.example:443".to_owned()),
        Just("//evil.example/x".to_owned()),
        "/[\\x21-\\x7e]{0,60}",
        "/[a-z]{1,8}\\?[\\x21-\\x7e]{0,80}",
        ".{0,60}",
        (1usize..20_000).prop_map(|n| format!("/{}", "a".repeat(n))),
    ]
}

fn version() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("HTTP/1.1".to_owned()),
        Just("HTTP/1.0".to_owned()),
        Just("HTTP/2.0".to_owned()),
        Just("HTTP/0.9".to_owned()),
        Just("HTTP/9.9".to_owned()),
        Just("".to_owned()),
        "HTTP/[0-9.]{0,6}",
        ".{0,12}",
    ]
}

fn header() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"Host: shop.example:80:80".to_vec()),
        Just(b"Host: x@shop.example".to_vec()),
        Just(b"Host: shop.example\\".to_vec()),
        Just(b"Host:".to_vec()),
        Just(b"Host: a\r\nHost: b".to_vec()),
        Just(b"Cookie: ar_visitor=".to_vec()),
        Just(b"Cookie: ar_visitor=%%%; ar_visitor=AAAA".to_vec()),
        Just(b"X-Forwarded-For: 1.2.3.4, ::1, garbage".to_vec()),
        Just(b"Accept: text/event-stream".to_vec()),
        Just(b"Upgrade: websocket\r\nConnection: Upgrade".to_vec()),
        Just(
            b"Accept-Language: "
                .iter()
                .chain([b'x'; 9000].iter())
                .copied()
                .collect()
        ),
        Just(b" folded: continuation".to_vec()),
        Just(b"no-colon-here".to_vec()),
        Just(b": empty-name".to_vec()),
        "[\\x21-\\x7e]{1,30}: [\\x20-\\x7e]{0,80}".prop_map(String::into_bytes),
        proptest::collection::vec(any::<u8>(), 0..120),
        (1usize..200).prop_map(|n| format!("X-Many: {}", "v,".repeat(n)).into_bytes()),
    ]
}

fn framing() -> impl Strategy<Value = (String, Vec<u8>)> {
    let body = proptest::collection::vec(any::<u8>(), 0..200);
    prop_oneof![
        (Just("Content-Length: 100000".to_owned()), body.clone()),
        (Just("Content-Length: -1".to_owned()), body.clone()),
        (
            Just("Content-Length: 18446744073709551616".to_owned()),
            body.clone()
        ),
        (
            Just("Content-Length: 5\r\nContent-Length: 6".to_owned()),
            body.clone()
        ),
        (Just("Transfer-Encoding: chunked".to_owned()), body.clone()),
        (
            Just("Transfer-Encoding: chunked".to_owned()),
            Just(b"ffffffffffffffffff\r\nx\r\n0\r\n\r\n".to_vec())
        ),
        (
            Just("Transfer-Encoding: chunked\r\nContent-Length: 3".to_owned()),
            Just(b"3\r\nabc\r\n0\r\n\r\n".to_vec())
        ),
        (Just("Transfer-Encoding: gzip, identity".to_owned()), body),
    ]
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        3 => token().prop_map(Edit::Method),
        3 => target().prop_map(Edit::Target),
        2 => version().prop_map(Edit::Version),
        4 => header().prop_map(Edit::Header),
        2 => framing().prop_map(|(h, b)| Edit::Framing(h, b)),
        1 => any::<u8>().prop_map(Edit::Truncate),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Edit::Corrupt(i, b)),
        1 => prop_oneof![Just("\n"), Just("\r")].prop_map(Edit::LineEnding),
        1 => proptest::collection::vec(any::<u8>(), 0..600).prop_map(Edit::Garbage),
    ]
}

/// A valid request, then each edit applied in turn.
fn build(edits: &[Edit]) -> Vec<u8> {
    let (mut method, mut target, mut version) =
        ("GET".to_owned(), "/".to_owned(), "HTTP/1.1".to_owned());
    let mut headers: Vec<Vec<u8>> = vec![b"Host: shop.example".to_vec()];
    let mut body = Vec::new();
    let mut post: Vec<&Edit> = Vec::new();
    let mut line_ending = "\r\n";
    for e in edits {
        match e {
            Edit::Method(m) => method = m.clone(),
            Edit::Target(t) => target = t.clone(),
            Edit::Version(v) => version = v.clone(),
            Edit::Header(h) => headers.push(h.clone()),
            Edit::Framing(h, b) => {
                headers.push(h.clone().into_bytes());
                body = b.clone();
            }
            Edit::LineEnding(le) => line_ending = le,
            other => post.push(other),
        }
    }
    let mut raw = format!("{method} {target} {version}{line_ending}").into_bytes();
    for h in headers {
        raw.extend_from_slice(&h);
        raw.extend_from_slice(line_ending.as_bytes());
    }
    raw.extend_from_slice(line_ending.as_bytes());
    raw.extend_from_slice(&body);
    for e in post {
        match e {
            Edit::Truncate(f) => raw.truncate(raw.len() * usize::from(*f) / 256),
            Edit::Corrupt(i, b) if !raw.is_empty() => {
                let at = i % raw.len();
                raw[at] = *b;
            }
            Edit::Garbage(g) => raw = g.clone(),
            _ => {}
        }
    }
    raw
}

/// What one connection ended with.
#[derive(Debug)]
enum Outcome {
    /// The status code of the first response line.
    Answered(u16),
    /// Closed by the server without a response.
    Closed,
    /// Still open after [`GIVE_UP`].
    Hung,
}

async fn send(addr: std::net::SocketAddr, raw: Vec<u8>) -> Outcome {
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        return Outcome::Closed;
    };
    // The server may answer and close before reading everything (a 431, a 400).
    let _ = stream.write_all(&raw).await;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let started = Instant::now();
    loop {
        let left = GIVE_UP.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Outcome::Hung;
        }
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Err(_) => {
                return match status_of(&got) {
                    // An answer and a kept-alive connection is not a hang.
                    Some(code) => Outcome::Answered(code),
                    None => Outcome::Hung,
                };
            }
            Ok(Ok(0)) | Ok(Err(_)) => {
                return match status_of(&got) {
                    Some(code) => Outcome::Answered(code),
                    None => Outcome::Closed,
                };
            }
            Ok(Ok(n)) => {
                got.extend_from_slice(&buf[..n]);
                // One answer is enough; the connection may stay open for keep-alive.
                if let Some(code) = status_of(&got)
                    && got.windows(4).any(|w| w == b"\r\n\r\n")
                {
                    return Outcome::Answered(code);
                }
            }
        }
    }
}

fn status_of(got: &[u8]) -> Option<u16> {
    let line = got.split(|b| *b == b'\n').next()?;
    let text = std::str::from_utf8(line).ok()?;
    let mut parts = text.split(' ');
    let version = parts.next()?;
    if !version.starts_with("HTTP/") {
        return None;
    }
    parts.next()?.trim().parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_never_panic_hang_or_reach_the_origin() {
    let panics_before = common::panics();
    // One slot on the site, taken by the real visitor first: every fuzzed newcomer can only
    // wait, so a request that reaches the origin is one that walked round the queue.
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    // Every request comes from loopback, and some carry broken cookies (strikes):
    // loopback is in abuse.allow and the per-client shares are off, so each case meets
    // the parser and the request path rather than a ban or a share refusal.
    let mut config = config_with(
        &origin.url(),
        dir.path(),
        "abuse:\n  allow: [127.0.0.1]\n",
        "    rate: 1000\n    max_active: 1\n    join_limit_per_ip: 0\n    max_places_per_client: 0\n",
    );
    config.server.header_read_timeout = Duration::from_secs(1);
    config.server.idle_timeout = Duration::from_secs(2);
    config.server.origin_timeout = Duration::from_secs(2);
    let ar = start(&config).await;
    let base = format!("http://{}", ar.addr);
    let client = client();
    let first = client.get(format!("{base}/")).send().await.unwrap();
    assert_eq!(first.status(), 200);
    let cookie = visitor_cookie(&first).expect("the visitor on the site has a cookie");
    let mut origin_hits = origin.hits();
    assert_eq!(origin_hits, 1, "the first visitor is let straight in");

    let mut runner = TestRunner::deterministic();
    let strategy = prop_oneof![
        9 => proptest::collection::vec(edit(), 1..5),
        1 => proptest::collection::vec(any::<u8>(), 0..300).prop_map(|g| vec![Edit::Garbage(g)]),
    ];
    let cases: Vec<Vec<u8>> = (0..CASES)
        .map(|_| build(&strategy.new_tree(&mut runner).unwrap().current()))
        .collect();

    let started = Instant::now();
    let gate = Arc::new(Semaphore::new(CONCURRENCY));
    let mut tasks = Vec::with_capacity(CASES);
    for (i, raw) in cases.into_iter().enumerate() {
        let permit = gate.clone().acquire_owned().await.unwrap();
        let addr = ar.addr;
        tasks.push(tokio::spawn(async move {
            let snippet = String::from_utf8_lossy(&raw[..raw.len().min(120)]).into_owned();
            let outcome = send(addr, raw).await;
            drop(permit);
            (i, snippet, outcome)
        }));
    }
    let mut by_status: BTreeMap<String, usize> = BTreeMap::new();
    let mut bad = Vec::new();
    for t in tasks {
        let (i, snippet, outcome) = t.await.unwrap();
        let key = match &outcome {
            Outcome::Answered(code) => code.to_string(),
            Outcome::Closed => "closed".to_owned(),
            Outcome::Hung => "hung".to_owned(),
        };
        *by_status.entry(key).or_default() += 1;
        if matches!(outcome, Outcome::Hung | Outcome::Answered(500..=500)) {
            bad.push(format!("case {i}: {outcome:?} for {snippet:?}"));
        }
    }
    let took = started.elapsed();
    println!("malformed HTTP: {CASES} requests in {took:.1?}, outcomes {by_status:?}");
    assert!(
        bad.is_empty(),
        "{} bad outcomes:\n{}",
        bad.len(),
        bad.join("\n")
    );
    assert_eq!(
        common::panics() - panics_before,
        0,
        "a request panicked the server"
    );
    assert_eq!(
        origin.hits(),
        origin_hits,
        "a fuzzed request reached the origin past a full site"
    );
    // The mutations exercised both the parser's refusals and our own answers.
    assert!(by_status.contains_key("400"), "no case reached hyper's 400");
    assert!(
        by_status.contains_key("200"),
        "no case reached the waiting page"
    );

    // Afterwards: the visitor on the site is still served, and a newcomer gets a place.
    let again = client
        .get(format!("{base}/"))
        .visitor(&cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    origin_hits += 1;
    assert_eq!(origin.hits(), origin_hits);
    let newcomer = client
        .get(format!("{base}/"))
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(status_header(&newcomer).as_deref(), Some("waiting"));
    let body: serde_json::Value = newcomer.json().await.unwrap();
    assert!(body["position"].as_u64().unwrap() >= 1, "{body}");
    ar.shutdown().await.unwrap();
}
