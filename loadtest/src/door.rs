//! `anteroom-loadtest adaptive-door`: closed-loop admission in front of a real slow site
//! whose door (`max_inflight`) is saturated. The site is the one `site-bound` uses
//! (PHP-FPM, `pm = static` with 4 children, a 200 ms page, behind nginx over FastCGI), so
//! the origin itself always answers in about 200 ms: only the wait for an in-flight slot
//! can tell `adaptive` that visitors wait.
//!
//! anteroom in front: `rate` 20, `max_inflight` 4, `inflight_wait` 10 s (nobody is refused
//! at the door), `adaptive: {target_latency: 400ms, min_rate: 2}`, the product's own 10 s
//! window. Sixteen admitted visitors browse one page after another on keep-alive
//! connections, four per slot: each request waits about 600 ms for its slot. Then twelve
//! leave and four stay (one per slot, no wait).
//!
//! Measured, by the visitors and the room stats (polled every 100 ms): when a response
//! first took longer than the target (the slot wait passing it), when the effective rate
//! fell below the configured one (with the reason and the p95 the stats gave), and after
//! the door cleared, when the effective rate rose again. The caller (the test
//! `loadtest/tests/adaptive_door.rs`) judges the timings.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::client::{Admin, Conn};
use crate::infra::{Anteroom, AnteroomSpec, Nginx, PhpFpm};
use crate::scenarios::say;

/// The room's configured rate.
const RATE: f64 = 20.0;
/// The latency target, in ms.
const TARGET_MS: u64 = 400;
/// Visitors browsing while the door is saturated, and those who stay after.
const CROWD: usize = 16;
const STAY: usize = 4;
/// Each phase is bounded by this.
const PHASE_LIMIT: Duration = Duration::from_secs(30);

/// What one run measured.
#[derive(Debug)]
pub struct DoorResult {
    /// From the browsing start to the first response slower than the target.
    pub passed_target_after: Option<Duration>,
    /// From the first response slower than the target to the effective rate falling.
    pub fell_after: Option<Duration>,
    /// `rate_reason` and the origin p95 (ms) in the stats when the rate fell.
    pub fell_reason: String,
    pub fell_p95_ms: Option<u64>,
    /// The lowest effective rate seen.
    pub lowest_rate: f64,
    /// From the door clearing to the effective rate rising above its lowest.
    pub rose_after: Option<Duration>,
    /// `rate_reason` and the origin p95 (ms) when it rose.
    pub rose_reason: String,
    pub rose_p95_ms: Option<u64>,
    /// Responses to the browsing visitors: all, refused at the door (503), slowest (ms).
    pub responses: u64,
    pub refused: u64,
    pub slowest_ms: u64,
}

impl DoorResult {
    pub fn to_json(&self) -> serde_json::Value {
        let secs = |d: Option<Duration>| d.map(|d| d.as_secs_f64());
        serde_json::json!({
            "target_ms": TARGET_MS,
            "configured_rate": RATE,
            "passed_target_after_secs": secs(self.passed_target_after),
            "fell_after_secs": secs(self.fell_after),
            "fell_reason": self.fell_reason,
            "fell_p95_ms": self.fell_p95_ms,
            "lowest_rate": self.lowest_rate,
            "rose_after_secs": secs(self.rose_after),
            "rose_reason": self.rose_reason,
            "rose_p95_ms": self.rose_p95_ms,
            "responses": self.responses,
            "refused": self.refused,
            "slowest_ms": self.slowest_ms,
        })
    }
}

/// The browsing visitors' shared tally.
#[derive(Default)]
struct Tally {
    responses: AtomicU64,
    refused: AtomicU64,
    slowest_ms: AtomicU64,
    /// Microseconds from the browsing start to the first response over the target (0: none
    /// yet).
    passed_us: AtomicU64,
}

/// One admitted visitor browsing until `stop`: one page after another on one connection.
async fn browse(
    addr: SocketAddr,
    cookie: String,
    stop: Arc<AtomicBool>,
    t0: Instant,
    tally: Arc<Tally>,
) {
    let Ok(mut conn) = Conn::connect(addr).await else {
        return;
    };
    let mut page = 0u64;
    while !stop.load(Ordering::Relaxed) {
        page += 1;
        let sent = Instant::now();
        let Ok(reply) = conn
            .get(&format!("/page/{page}"), &[("cookie", &cookie)])
            .await
        else {
            match Conn::connect(addr).await {
                Ok(c) => conn = c,
                Err(_) => return,
            }
            continue;
        };
        let took = sent.elapsed();
        tally.responses.fetch_add(1, Ordering::Relaxed);
        if reply.status.as_u16() == 503 {
            tally.refused.fetch_add(1, Ordering::Relaxed);
        }
        tally
            .slowest_ms
            .fetch_max(took.as_millis() as u64, Ordering::Relaxed);
        if took > Duration::from_millis(TARGET_MS) {
            let at = (sent + took).duration_since(t0).as_micros().max(1) as u64;
            let _ = tally
                .passed_us
                .compare_exchange(0, at, Ordering::Relaxed, Ordering::Relaxed);
        }
    }
}

/// (effective rate, rate_reason, origin p95 ms) from the room stats.
async fn rates(admin: &mut Admin) -> anyhow::Result<(f64, String, Option<u64>)> {
    let stats = admin.stats_json().await?;
    let effective = stats["effective_rate"]
        .as_f64()
        .with_context(|| format!("no effective_rate in {stats}"))?;
    let reason = stats["rate_reason"].as_str().unwrap_or("").to_owned();
    Ok((
        effective,
        reason,
        stats["adaptive"]["origin_p95_ms"].as_u64(),
    ))
}

/// One run, as described in the module doc.
pub async fn adaptive_door() -> anyhow::Result<DoorResult> {
    let php = PhpFpm::start(4, 200)?;
    let nginx = Nginx::fastcgi(&php, 1)?;
    let mut spec = AnteroomSpec::new(None);
    spec.origin = format!("http://{}", nginx.addr);
    spec.rate = RATE;
    spec.room_extra = format!(
        "    max_inflight: 4\n    inflight_wait: 10s\n    adaptive:\n      target_latency: {TARGET_MS}ms\n      \
         min_rate: 2\n"
    );
    let ant = Anteroom::start(&spec)?;
    let mut admin = Admin::connect(ant.addr).await?;
    say(format!(
        "adaptive-door: {CROWD} visitors on a door of 4 (PHP-FPM, 4 children, 200 ms), rate {RATE}, target {TARGET_MS} ms"
    ));

    // Everyone is admitted straight in (the rate's burst covers them).
    let mut cookies = Vec::with_capacity(CROWD);
    let mut conn = Conn::connect(ant.addr).await?;
    while cookies.len() < CROWD {
        let reply = conn.get("/", &[]).await?;
        match reply.set_cookie {
            Some(c) if c.starts_with("ar_visitor=") && reply.status.is_success() => cookies.push(c),
            _ => bail!("a newcomer was not let straight in: {}", reply.status),
        }
    }
    let (effective, reason, _) = rates(&mut admin).await?;
    if effective != RATE || reason != "configured" {
        bail!("before the crowd: effective rate {effective} ({reason}), not {RATE}");
    }

    let tally = Arc::new(Tally::default());
    let stops: Vec<Arc<AtomicBool>> = (0..CROWD).map(|_| Arc::default()).collect();
    let t0 = Instant::now();
    let browsers: Vec<_> = cookies
        .into_iter()
        .zip(&stops)
        .map(|(cookie, stop)| {
            tokio::spawn(browse(ant.addr, cookie, stop.clone(), t0, tally.clone()))
        })
        .collect();

    // Phase 1: until the rate falls.
    let mut result = DoorResult {
        passed_target_after: None,
        fell_after: None,
        fell_reason: String::new(),
        fell_p95_ms: None,
        lowest_rate: RATE,
        rose_after: None,
        rose_reason: String::new(),
        rose_p95_ms: None,
        responses: 0,
        refused: 0,
        slowest_ms: 0,
    };
    while t0.elapsed() < PHASE_LIMIT {
        let (effective, reason, p95) = rates(&mut admin).await?;
        if effective < RATE {
            let now = t0.elapsed();
            let passed = Duration::from_micros(tally.passed_us.load(Ordering::Relaxed));
            result.passed_target_after = (!passed.is_zero()).then_some(passed);
            result.fell_after = Some(now.saturating_sub(passed));
            result.fell_reason = reason;
            result.fell_p95_ms = p95;
            result.lowest_rate = effective;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if result.fell_after.is_none() {
        let passed = tally.passed_us.load(Ordering::Relaxed);
        result.passed_target_after = (passed > 0).then(|| Duration::from_micros(passed));
    }

    // Phase 2: the door clears; until the rate rises above its lowest.
    if result.fell_after.is_some() {
        for stop in &stops[STAY..] {
            stop.store(true, Ordering::Relaxed);
        }
        let cleared = Instant::now();
        say("adaptive-door: the door clears");
        while cleared.elapsed() < PHASE_LIMIT {
            let (effective, reason, p95) = rates(&mut admin).await?;
            if effective > result.lowest_rate {
                result.rose_after = Some(cleared.elapsed());
                result.rose_reason = reason;
                result.rose_p95_ms = p95;
                break;
            }
            result.lowest_rate = result.lowest_rate.min(effective);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    for stop in &stops {
        stop.store(true, Ordering::Relaxed);
    }
    for b in browsers {
        let _ = b.await;
    }
    result.responses = tally.responses.load(Ordering::Relaxed);
    result.refused = tally.refused.load(Ordering::Relaxed);
    result.slowest_ms = tally.slowest_ms.load(Ordering::Relaxed);
    say(format!("adaptive-door: {result:?}"));
    drop(ant);
    drop(nginx);
    drop(php);
    Ok(result)
}
