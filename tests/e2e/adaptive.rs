//! Closed-loop admission end to end: two anteroom replicas sharing one real
//! `redis-server`, in front of a real origin on loopback whose latency the test switches
//! from fast to slow and back. The effective rate falls on both replicas (read through
//! their stats), never exceeds `rate`, the admissions follow it, and once the origin is
//! fast again it climbs back step by step to exactly `rate`.
//!
//! The controller's windows are shortened for the test (3 s instead of 10 s, recovery in 4
//! steps instead of 20) through a hidden, test-only knob, so the whole run stays within
//! about 25 s; the rules are the product's.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anteroom::fairness::adaptive::Tuning;
use anteroom::queue::{ClientKey, QueueStore, VisitorId};
use anteroom::run::{self, Running};
use anteroom_fixtures::RedisServer;
use common::*;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

const RATE: f64 = 20.0;
const MIN_RATE: f64 = 2.0;

/// An origin that answers every request after `delay_ms`.
struct SlowOrigin {
    addr: std::net::SocketAddr,
    delay_ms: Arc<AtomicU64>,
}

impl SlowOrigin {
    async fn start() -> SlowOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let delay_ms = Arc::new(AtomicU64::new(10));
        let delay = delay_ms.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let delay = delay.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |_req: Request<Incoming>| {
                        let delay = delay.load(Ordering::SeqCst);
                        async move {
                            tokio::time::sleep(Duration::from_millis(delay)).await;
                            Ok::<_, std::convert::Infallible>(Response::new(Full::new(
                                Bytes::from_static(b"origin"),
                            )))
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        SlowOrigin { addr, delay_ms }
    }

    fn set_delay(&self, delay: Duration) {
        self.delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }
}

async fn replica(config: &anteroom::config::Config, url: &str) -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let running = run::start(config, redis_store(url).await, listener, false)
        .await
        .unwrap();
    running.app.admission.set_adaptive_tuning_for_tests(Tuning {
        window_secs: 3,
        min_samples: 10,
        increase_steps: 4.0,
        decrease_every_ms: 1_000,
    });
    running
}

/// (rate, effective_rate, rate_reason) from a replica's stats.
async fn rates(http: &reqwest::Client, r: &Running) -> (f64, f64, String, serde_json::Value) {
    let stats: serde_json::Value = http
        .get(format!(
            "http://{}/__anteroom/admin/api/rooms/main/stats",
            r.addr
        ))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    (
        stats["rate"].as_f64().unwrap(),
        stats["effective_rate"].as_f64().unwrap(),
        stats["rate_reason"].as_str().unwrap().to_owned(),
        stats,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_origin_lowers_the_rate_on_both_replicas_and_recovery_restores_it() {
    let started = Instant::now();
    let redis = RedisServer::start();
    let origin = SlowOrigin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = redis_config(
        &format!("http://{}", origin.addr),
        &redis.url(),
        dir.path(),
        &format!(
            "    rate: {RATE}\n    max_active: 100000\n    max_sessions_per_client: 0\n    \
             join_limit_per_ip: 0\n    adaptive: {{target_latency: 300ms, min_rate: {MIN_RATE}}}"
        ),
    );
    let replicas = Arc::new([
        replica(&config, &redis.url()).await,
        replica(&config, &redis.url()).await,
    ]);
    let http = client();

    // 30 visitors on the site (the fast path, or the line's first passes), whose requests
    // are the origin traffic the replicas observe.
    let mut cookies = Vec::new();
    for i in 0..30 {
        let page = http
            .get(format!("http://{}/", replicas[i % 2].addr))
            .send()
            .await
            .unwrap();
        cookies.push(visitor_cookie(&page).unwrap());
    }
    // A long line whose admissions show the rate actually used.
    let seeder = redis_store(&redis.url()).await;
    for chunk in 0..20 {
        let joins = (0..100).map(|i| {
            let seeder = seeder.clone();
            async move {
                let client = ClientKey::from(std::net::Ipv4Addr::new(10, 1, chunk, i));
                seeder
                    .resolve("main", VisitorId::random(), client)
                    .await
                    .unwrap();
            }
        });
        futures_util::future::join_all(joins).await;
    }

    let stop = Arc::new(AtomicBool::new(false));
    let mut traffic = Vec::new();
    for (i, cookie) in cookies.into_iter().enumerate() {
        let (http, stop, replicas) = (http.clone(), stop.clone(), replicas.clone());
        traffic.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let sent = http
                    .get(format!("http://{}/page", replicas[i % 2].addr))
                    .header("cookie", format!("ar_visitor={cookie}"))
                    .send()
                    .await;
                if let Ok(response) = sent {
                    let _ = response.bytes().await;
                }
                // A visitor browsing, not a load test: on two cores shared with the build,
                // a flood would make even the fast origin look slow.
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }));
    }

    // Fast origin: the configured rate, on both replicas.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for r in replicas.iter() {
        let (rate, effective, reason, stats) = rates(&http, r).await;
        assert_eq!(
            (rate, effective, reason.as_str()),
            (RATE, RATE, "configured"),
            "{stats}"
        );
    }

    // Slow origin (1.5 s against a 300 ms target): the effective rate falls on both, to
    // the floor, and never above the configured rate.
    origin.set_delay(Duration::from_millis(1_500));
    let slow_since = Instant::now();
    let mut fell_after = [None, None];
    let mut reasons = Vec::new();
    loop {
        for (i, r) in replicas.iter().enumerate() {
            let (rate, effective, reason, stats) = rates(&http, r).await;
            assert_eq!(rate, RATE, "the configured rate is untouched");
            assert!((MIN_RATE..=RATE).contains(&effective), "{stats}");
            if effective < RATE && fell_after[i].is_none() {
                fell_after[i] = Some(slow_since.elapsed());
                assert_eq!(reason, "latency", "{stats}");
                assert!(
                    stats["adaptive"]["origin_p95_ms"].as_u64().unwrap() > 300,
                    "{stats}"
                );
            }
            if effective == MIN_RATE {
                reasons.push(reason);
            } else if fell_after[1 - i].is_some() && fell_after[i].is_none() {
                eprintln!("lagging replica {i}: {stats}");
            }
        }
        if reasons.len() >= 2 {
            break;
        }
        assert!(
            slow_since.elapsed() < Duration::from_secs(12),
            "the rate fell to the floor on both within 12 s: {fell_after:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for after in fell_after {
        assert!(after.unwrap() < Duration::from_secs(10), "{fell_after:?}");
    }

    // At the floor the passes of both replicas admit at it, not at `rate`.
    let before = seeder.stats("main").await.unwrap().total_admitted;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let during = seeder.stats("main").await.unwrap().total_admitted - before;
    assert!(
        (3..=9).contains(&during),
        "{during} admitted in 3 s at {MIN_RATE}/s (at {RATE}/s it would be 60)"
    );
    for r in replicas.iter() {
        assert_eq!(rates(&http, r).await.1, MIN_RATE, "still at the floor");
    }
    // And the metrics say so.
    let metrics = admin_metrics(&http, replicas[1].addr).await;
    let metric = |name: &str| -> f64 {
        let prefix = format!("{name}{{room=\"main\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .unwrap_or_else(|| panic!("{name} in {metrics}"))
            .parse()
            .unwrap()
    };
    assert_eq!(metric("anteroom_effective_rate"), MIN_RATE);
    assert_eq!(metric("anteroom_rate"), RATE);
    let p95 = metric("anteroom_origin_p95_seconds");
    assert!(p95 > 0.3, "{p95}");

    // Fast again: once the slow responses leave the window, back up step by step to
    // exactly the configured rate, on both replicas.
    origin.set_delay(Duration::from_millis(10));
    let fast_since = Instant::now();
    let mut seen = vec![MIN_RATE];
    loop {
        let mut at_rate = 0;
        for r in replicas.iter() {
            let (_, effective, reason, stats) = rates(&http, r).await;
            assert!(effective <= RATE, "{stats}");
            if effective == RATE {
                assert_eq!(reason, "configured", "{stats}");
                at_rate += 1;
            }
            if seen.last() != Some(&effective) {
                seen.push(effective);
            }
        }
        if at_rate == 2 {
            break;
        }
        assert!(
            fast_since.elapsed() < Duration::from_secs(12),
            "recovered within 12 s: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Step by step: intermediate rates on the way up (a replica's view may lag the other's
    // by a step, so the sequence interleaves, but it never jumps from floor to rate).
    assert!(
        seen.iter().any(|&r| r > MIN_RATE && r < RATE),
        "step by step: {seen:?}"
    );
    let max_step = seen.windows(2).map(|w| w[1] - w[0]).fold(0.0f64, f64::max);
    assert!(
        max_step <= 2.0 * RATE / 4.0 + 1e-9,
        "steps of rate/4: {seen:?}"
    );

    eprintln!(
        "adaptive: fell after {fell_after:?}; {during} admitted in 3 s at the floor; \
         recovered in {:?} through {seen:?}",
        fast_since.elapsed()
    );
    stop.store(true, Ordering::SeqCst);
    for t in traffic {
        let _ = t.await;
    }
    let replicas = Arc::try_unwrap(replicas).unwrap_or_else(|_| panic!("traffic stopped"));
    for r in replicas {
        r.shutdown().await.unwrap();
    }
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "bounded: {:?}",
        started.elapsed()
    );
}

/// `max_inflight` saturated in front of an origin that answers every request in 200 ms
/// (under the 300 ms target): the wait for a slot is what visitors feel, so the effective
/// rate falls within 5 s of that wait passing the target, with the product's own tuning
/// (a 10 s window), and rises again once the crowd at the door thins out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saturated_inflight_cap_lowers_the_rate_and_clearing_it_raises_it() {
    let origin = SlowOrigin::start().await;
    origin.set_delay(Duration::from_millis(200));
    let dir = tempfile::tempdir().unwrap();
    let config = config(
        &format!("http://{}", origin.addr),
        dir.path(),
        &format!(
            "    rate: {RATE}\n    max_active: 100000\n    max_sessions_per_client: 0\n    \
             join_limit_per_ip: 0\n    max_inflight: 2\n    inflight_wait: 10s\n    \
             adaptive: {{target_latency: 300ms, min_rate: {MIN_RATE}}}"
        ),
    );
    let running = start(&config).await;
    let http = client();

    // 16 visitors on the site, each browsing one page after another: 8 in line for each
    // of the 2 slots, so a request waits about 1.4 s for its slot and takes 1.6 s in all,
    // though the origin itself answers in 200 ms.
    let mut cookies = Vec::new();
    for _ in 0..16 {
        let page = http
            .get(format!("http://{}/", running.addr))
            .send()
            .await
            .unwrap();
        cookies.push(visitor_cookie(&page).unwrap());
    }
    let (http2, addr) = (http.clone(), running.addr);
    let (rate, effective, reason, stats) = rates(&http2, &running).await;
    assert_eq!(
        (rate, effective, reason.as_str()),
        (RATE, RATE, "configured"),
        "{stats}"
    );

    // Each browser stops when its own flag is set: most leave later, two stay.
    let stops: Vec<Arc<AtomicBool>> = (0..cookies.len())
        .map(|_| Arc::new(AtomicBool::new(false)))
        .collect();
    let saturated_since = Instant::now();
    let mut browsing = Vec::new();
    for (cookie, stop) in cookies.into_iter().zip(stops.iter().cloned()) {
        let http = http2.clone();
        browsing.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let sent = http
                    .get(format!("http://{addr}/page"))
                    .header("cookie", format!("ar_visitor={cookie}"))
                    .send()
                    .await;
                if let Ok(response) = sent {
                    assert_ne!(response.status(), 503, "inflight_wait is long enough");
                    let _ = response.bytes().await;
                }
            }
        }));
    }

    // The first request to wait past the target does so 300 ms in; from then, 5 s.
    let fell = loop {
        let (_, effective, reason, stats) = rates(&http, &running).await;
        if effective < RATE {
            assert_eq!(reason, "latency", "{stats}");
            assert!(
                stats["adaptive"]["origin_p95_ms"].as_u64().unwrap() > 300,
                "{stats}"
            );
            break saturated_since.elapsed();
        }
        assert!(
            saturated_since.elapsed() < Duration::from_millis(5_300),
            "the rate fell within 5 s of the slot wait passing the target: {stats}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!("effective rate fell {fell:?} after the cap saturated");

    // The door clears: 14 leave, 2 stay (one per slot, no wait). Once the slow requests
    // leave the 10 s window the rate climbs back.
    for stop in &stops[2..] {
        stop.store(true, Ordering::SeqCst);
    }
    let cleared_since = Instant::now();
    let mut lowest = RATE;
    loop {
        let (_, effective, reason, stats) = rates(&http, &running).await;
        lowest = lowest.min(effective);
        if effective > lowest {
            assert_eq!(
                stats["adaptive"]["origin_p95_ms"]
                    .as_u64()
                    .map(|p| p <= 300),
                Some(true),
                "{stats}"
            );
            assert!(
                matches!(reason.as_str(), "recovering" | "configured"),
                "{stats}"
            );
            break;
        }
        assert!(
            cleared_since.elapsed() < Duration::from_secs(20),
            "the rate rose again once the door cleared: {stats}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for stop in &stops {
        stop.store(true, Ordering::SeqCst);
    }
    for b in browsing {
        b.await.unwrap();
    }
}

/// One bad upload: a body cut short (fewer bytes than its `Content-Length`, then the
/// client's end of the connection closed) or a chunk line ended by a bare LF. Returns our
/// answer's status line.
async fn bad_upload(addr: std::net::SocketAddr, cookie: &str, garbled: bool) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head =
        format!("POST /upload HTTP/1.1\r\nHost: shop.example\r\nCookie: ar_visitor={cookie}\r\n");
    let request = if garbled {
        format!("{head}Transfer-Encoding: chunked\r\n\r\n5\nhello\n0\n\n")
    } else {
        format!("{head}Content-Length: 1000\r\n\r\n0123456789")
    };
    stream.write_all(request.as_bytes()).await.unwrap();
    stream.shutdown().await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    answer.lines().next().unwrap_or("").to_owned()
}

/// A visitor's body cut short or garbled fails the exchange with the origin through the
/// visitor's fault: a 400, and closed-loop admission never counts it as the origin's 5xx
/// (it used to be a 502 that lowered everyone's rate).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_broken_by_visitors_are_not_the_origins_errors() {
    let origin = SlowOrigin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let room = format!(
        "    rate: {RATE}\n    max_active: 1000\n    adaptive:\n      target_latency: 800ms\n      max_error_ratio: 0.05\n      min_rate: {MIN_RATE}"
    );
    let ar = start(&config(
        &format!("http://{}", origin.addr),
        dir.path(),
        &room,
    ))
    .await;
    ar.app.admission.set_adaptive_tuning_for_tests(Tuning {
        window_secs: 3,
        min_samples: 10,
        increase_steps: 4.0,
        decrease_every_ms: 1_000,
    });
    let http = client();
    let url = format!("http://{}/", ar.addr);
    let cookie = visitor_cookie(&http.get(&url).send().await.unwrap()).unwrap();
    // The origin answers only after the body has broken.
    origin.set_delay(Duration::from_millis(300));
    for i in 0..20 {
        let status = bad_upload(ar.addr, &cookie, i % 2 == 1).await;
        assert!(status.starts_with("HTTP/1.1 400"), "upload {i}: {status:?}");
    }
    origin.set_delay(Duration::from_millis(10));
    for _ in 0..12 {
        let page = http.get(&url).visitor(&cookie).send().await.unwrap();
        assert_eq!(page.status(), 200);
    }
    let stats = poll_until(
        Duration::from_secs(10),
        "a decision over the good requests",
        async || {
            let (_, _, _, stats) = rates(&http, &ar).await;
            (stats["adaptive"]["origin_samples"].as_u64()? >= 12).then_some(stats)
        },
    )
    .await;
    assert_eq!(stats["adaptive"]["origin_error_ratio"], 0.0, "{stats}");
    assert_eq!(stats["effective_rate"], RATE, "{stats}");
    ar.shutdown().await.unwrap();
}
