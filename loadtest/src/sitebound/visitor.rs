//! Each visitor behaves like a person whose waiting page speaks JSON: it asks for `/` with
//! `Accept: application/json` (a waiting visitor gets `{"status":"waiting", "eta_secs":
//! {"min","max"}, "retry_after_secs", …}` and the `ar_visitor` cookie), then holds the live
//! stream (`GET /__anteroom/events`) with its cookie, as the built-in waiting page does, and
//! is told `admitted` there; if the stream ends without that, it asks for `/` again after
//! `retry_after_secs` (at most 2 s) and opens the stream again. The first range it is shown
//! is the first `eta_secs` (the join's JSON or a `position` event) without
//! `"estimating": true`, with the moment it arrived. Once admitted it loads the page (the
//! reload the waiting page does), then browses a few more pages one after another with a
//! think time between them, and then simply leaves: it sends nothing more, and its session
//! ends the way a visitor's does when they close the tab, after `session_ttl` without a
//! request.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use tokio::time::Instant;

use super::Case;
use crate::client::{Conn, Reply};

/// A wait range as shown: `eta_secs`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shown {
    /// `eta_secs.min`.
    pub min: u64,
    /// `eta_secs.max`.
    pub max: u64,
    /// When the visitor got it.
    pub at: Instant,
}

impl Shown {
    /// Seconds from being shown this range to `admitted`.
    pub fn waited(&self, admitted: Instant) -> f64 {
        admitted.saturating_duration_since(self.at).as_secs_f64()
    }

    /// Whether a visitor admitted at `admitted` got in within it (whole seconds).
    pub fn held(&self, admitted: Instant) -> bool {
        (self.min..=self.max).contains(&(self.waited(admitted).round() as u64))
    }

    /// The wait minus the range's middle, seconds (negative: sooner than promised).
    pub fn off_middle(&self, admitted: Instant) -> f64 {
        self.waited(admitted) - (self.min + self.max) as f64 / 2.0
    }
}

/// The range in a waiting answer or a `position` event, unless it is still estimating.
/// Notes the range `v` shows at `at` as the visitor's promise: the first one with a number
/// (an "estimating" answer promises nothing), or, once the operator has moved the room's
/// rate (`moved`), the first shown after that to a visitor promised before it: the product
/// makes its promises again when its limits move (docs/fairness.md, "When the limits
/// move"), and this is the instrument's own reading of that rule.
fn note(shown: &mut Option<Shown>, v: &serde_json::Value, at: Instant, moved: Option<Instant>) {
    let stale = match (&*shown, moved) {
        (None, _) => true,
        (Some(s), Some(moved)) => s.at < moved && at > moved,
        (Some(_), None) => false,
    };
    if stale && let Some(fresh) = shown_in(v, at) {
        *shown = Some(fresh);
    }
}

fn shown_in(v: &serde_json::Value, at: Instant) -> Option<Shown> {
    let eta = &v["eta_secs"];
    if eta["estimating"].as_bool() == Some(true) {
        return None;
    }
    Some(Shown {
        min: eta["min"].as_u64()?,
        max: eta["max"].as_u64()?,
        at,
    })
}

/// What one visitor saw.
#[derive(Clone, Debug, Default)]
pub(super) struct Outcome {
    pub(super) shown: Option<Shown>,
    /// The first range the live stream showed (its replica's first promise to them, which
    /// is `shown` only when the page showed none before it).
    pub(super) stream_shown: Option<Shown>,
    pub(super) admitted: Option<Instant>,
    /// Let in on arrival (nobody waiting): never shown a range.
    pub(super) fast_path: bool,
    pub(super) pages: usize,
    /// When each origin page arrived.
    pub(super) page_times: Vec<Instant>,
}

/// Counters shared by the crowd.
#[derive(Default)]
pub(super) struct Tally {
    /// Visitors admitted so far.
    pub(super) admitted: AtomicUsize,
    /// Visitors who have browsed and left.
    pub(super) done: AtomicUsize,
    /// Answers with a 5xx status, from joins, polls and pages.
    pub(super) status_5xx: AtomicU64,
    /// An admitted visitor answered by anteroom instead of the site (their session lost).
    pub(super) sent_back: AtomicU64,
    /// Streams that ended without `admitted` (the visitor asked again).
    pub(super) stream_drops: AtomicU64,
    /// When the operator's rate change was applied (case 2).
    pub(super) moved: std::sync::OnceLock<Instant>,
}

/// What anteroom answered a request for a page.
enum Answer {
    /// The site's page.
    Origin,
    /// Anteroom's waiting answer (JSON).
    Waiting(serde_json::Value),
    /// A 5xx from anyone.
    Error5xx,
}

fn classify(reply: &Reply) -> anyhow::Result<Answer> {
    if reply.status.is_server_error() {
        return Ok(Answer::Error5xx);
    }
    if reply.status.is_success() && reply.body.starts_with(b"page ") {
        return Ok(Answer::Origin);
    }
    match serde_json::from_slice::<serde_json::Value>(&reply.body) {
        Ok(v) if v["status"] == "waiting" => Ok(Answer::Waiting(v)),
        _ => bail!(
            "unexpected answer {}: {}",
            reply.status,
            String::from_utf8_lossy(&reply.body[..reply.body.len().min(200)])
        ),
    }
}

/// How a live stream ended.
enum StreamEnd {
    Admitted,
    Closed,
}

/// Holds `GET /__anteroom/events` with `cookie` until `admitted` or the stream ends, noting
/// the first range shown, and the first the stream showed.
async fn watch(
    addr: SocketAddr,
    cookie: &str,
    out: &mut Outcome,
    tally: &Tally,
) -> anyhow::Result<StreamEnd> {
    let stream = crate::client::tcp(addr, None).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = Request::builder()
        .method(Method::GET)
        .uri("/__anteroom/events")
        .header("host", addr.to_string())
        .header("accept", "text/event-stream")
        .header("cookie", cookie)
        .header("user-agent", "anteroom-loadtest")
        .body(Empty::<Bytes>::new())?;
    let response = tokio::time::timeout(Duration::from_secs(30), sender.send_request(req))
        .await
        .context("events: no head within 30 s")??;
    if !response.status().is_success() {
        bail!("events answered {}", response.status());
    }
    let mut body = response.into_body();
    let mut buf: Vec<u8> = Vec::new();
    let mut event = String::new();
    loop {
        // A tick every 2 s sends the position: 30 s of silence is a dead stream.
        let frame = match tokio::time::timeout(Duration::from_secs(30), body.frame()).await {
            Err(_) | Ok(None) => return Ok(StreamEnd::Closed),
            Ok(Some(frame)) => frame?,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        buf.extend_from_slice(&data);
        while let Some(i) = buf.iter().position(|&b| b == b'\n') {
            let line = String::from_utf8_lossy(&buf[..i])
                .trim_end_matches('\r')
                .to_owned();
            buf.drain(..=i);
            if let Some(name) = line.strip_prefix("event:") {
                event = name.trim().to_owned();
            } else if let Some(data) = line.strip_prefix("data:") {
                match event.as_str() {
                    "admitted" => return Ok(StreamEnd::Admitted),
                    "position" => {
                        if let Ok(v) = serde_json::from_str::<serde_json::Value>(data.trim()) {
                            let now = Instant::now();
                            note(&mut out.shown, &v, now, tally.moved.get().copied());
                            if out.stream_shown.is_none() {
                                out.stream_shown = shown_in(&v, now);
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
    }
}

/// A GET on the visitor's keep-alive connection, made again on a new one if it fails
/// (anteroom closes a connection idle past its header-read timeout, as a visitor's is
/// while they wait on the stream).
async fn fetch(
    conn: &mut Option<Conn>,
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> anyhow::Result<Reply> {
    if let Some(c) = conn.as_mut()
        && let Ok(reply) = c.get(path, headers).await
    {
        return Ok(reply);
    }
    let mut fresh = Conn::connect(addr).await?;
    let reply = fresh.get(path, headers).await;
    *conn = Some(fresh);
    reply
}

const JSON: (&str, &str) = ("accept", "application/json");
const HTML: (&str, &str) = ("accept", "text/html,application/xhtml+xml");

/// One visitor, from arrival to leaving (`seed`: their own reading pace): its pages from
/// `addr`, its live stream from `stream_addr` (another replica, or the same one).
pub(super) async fn visitor(
    (addr, stream_addr): (SocketAddr, SocketAddr),
    case: Arc<Case>,
    arrive: Instant,
    seed: u64,
    tally: Arc<Tally>,
) -> anyhow::Result<Outcome> {
    tokio::time::sleep_until(arrive).await;
    // People read at their own pace: each think time is the case's, times 0.5 to 1.5
    // (a deterministic sequence per visitor, so a run is reproducible).
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut think = move |base: Duration| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        base.mul_f64(0.5 + (state >> 11) as f64 / (1u64 << 53) as f64)
    };
    let mut out = Outcome::default();
    let mut conn: Option<Conn> = None;
    let mut cookie: Option<String> = None;
    let mut retry = Duration::from_secs(2);
    // Arrive: the page, as JSON.
    loop {
        let reply = fetch(&mut conn, addr, "/", &[JSON]).await?;
        if let Some(c) = &reply.set_cookie {
            cookie = Some(c.clone());
        }
        match classify(&reply)? {
            Answer::Origin => {
                out.fast_path = true;
                out.admitted = Some(Instant::now());
                out.pages = 1;
                out.page_times.push(Instant::now());
                break;
            }
            Answer::Waiting(v) => {
                out.shown = shown_in(&v, Instant::now());
                retry = Duration::from_secs(v["retry_after_secs"].as_u64().unwrap_or(2).min(2));
                break;
            }
            Answer::Error5xx => {
                tally.status_5xx.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
    let cookie = cookie.context("no ar_visitor cookie on the waiting answer")?;
    // Wait, on the live stream; ask again (after retry_after_secs, at most 2 s) if it ends.
    while out.admitted.is_none() {
        match watch(stream_addr, &cookie, &mut out, &tally).await {
            Ok(StreamEnd::Admitted) => out.admitted = Some(Instant::now()),
            Ok(StreamEnd::Closed) | Err(_) => {
                tally.stream_drops.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(retry).await;
                let reply = fetch(&mut conn, addr, "/", &[JSON, ("cookie", &cookie)]).await?;
                match classify(&reply)? {
                    Answer::Origin => {
                        out.admitted = Some(Instant::now());
                        out.pages = 1;
                        out.page_times.push(Instant::now());
                    }
                    Answer::Waiting(v) => {
                        let moved = tally.moved.get().copied();
                        note(&mut out.shown, &v, Instant::now(), moved);
                        retry =
                            Duration::from_secs(v["retry_after_secs"].as_u64().unwrap_or(2).min(2));
                    }
                    Answer::Error5xx => {
                        tally.status_5xx.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }
    tally.admitted.fetch_add(1, Ordering::Relaxed);
    // Browse: the reload on admission, then the next pages after a think time each.
    let mut page = out.pages;
    while page < case.pages {
        if page > 0 {
            tokio::time::sleep(think(case.think)).await;
        }
        let path = format!("/page/{}", page + 1);
        let reply = fetch(&mut conn, addr, &path, &[HTML, ("cookie", &cookie)]).await?;
        if reply.status.is_server_error() {
            // A person reloads after a moment.
            tally.status_5xx.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        if reply.status.is_success() && reply.body.starts_with(b"page ") {
            out.page_times.push(Instant::now());
            page += 1;
            out.pages = page;
        } else {
            tally.sent_back.fetch_add(1, Ordering::Relaxed);
            break;
        }
    }
    // Leave: nothing more is sent; the session idles out after session_ttl.
    tally.done.fetch_add(1, Ordering::Relaxed);
    Ok(out)
}
