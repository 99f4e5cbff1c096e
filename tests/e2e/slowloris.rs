//! Slow clients and connection churn against the public listener: header
//! dribblers, silent connections and bodies that never finish are closed by the header-read,
//! idle and origin timeouts while a real visitor is still served; 10,000 connections opened
//! and dropped leave the server serving and its descriptor count back at its baseline.
//!
//! The server runs in this process, so `/proc/self/fd` counts its sockets (and ours).
//! Timeouts are real socket timeouts (tokio's paused clock cannot drive real I/O), kept
//! small (1-2 s) so the file stays well under a minute. Run with `--nocapture` for the
//! figures RELIABILITY.md quotes.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anteroom::config::from_yaml_str;
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(1);
const IDLE_TIMEOUT: Duration = Duration::from_secs(2);
const ORIGIN_TIMEOUT: Duration = Duration::from_secs(2);
/// How long past its timeout a slow connection may stay open before the test calls it a
/// failure (scheduling on a shared 2-core machine).
const SLACK: Duration = Duration::from_secs(2);

fn slow_config(origin: &str, dir: &std::path::Path) -> anteroom::config::Config {
    let yaml = format!(
        r#"listen: "127.0.0.1:0"
admit_interval: 100ms
cookie_secret: "{COOKIE_SECRET}"
admin_token: "{ADMIN_TOKEN}"
data_dir: "{dir}"
server:
  header_read_timeout: 1s
  idle_timeout: 2s
  origin_timeout: 2s
  body_timeout: 2s
rooms:
  main:
    origin: {origin}
    rate: 1000
    max_active: 100000
    join_limit_per_ip: 0
    max_sessions_per_client: 0
    max_places_per_client: 0
"#,
        dir = dir.display()
    );
    from_yaml_str(&yaml, "slow.yaml").unwrap()
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// The descriptor count once it has held still for 200 ms (at most 3 s): anteroom's
/// serving workers build their runtimes, and the client its pooled connections, after
/// `start` and a first request have returned.
async fn settled_fds() -> usize {
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut last = open_fds();
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = open_fds();
        if now == last || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

/// Waits until the server closes `stream` (EOF or an error on read or write), feeding it
/// `drip` every `every` meanwhile; returns how long that took, or `None` after `give_up`.
async fn time_to_close(
    mut stream: TcpStream,
    drip: Option<&'static [u8]>,
    every: Duration,
    give_up: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        if started.elapsed() > give_up {
            return None;
        }
        match tokio::time::timeout(every, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
            // A response (a 408, a 504, a waiting page): keep reading until the close.
            Ok(Ok(n)) => {
                if std::env::var_os("SLOWLORIS_DEBUG").is_some() {
                    eprintln!(
                        "{:?} after {:?}",
                        String::from_utf8_lossy(&buf[..n.min(40)]),
                        started.elapsed()
                    );
                }
                continue;
            }
            Err(_) => {
                if let Some(bytes) = drip
                    && stream.write_all(bytes).await.is_err()
                {
                    return Some(started.elapsed());
                }
            }
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Slow {
    /// Connects and sends nothing.
    Silent,
    /// A request line, then one header line every 200 ms, never the blank line.
    HeaderDribble,
    /// Complete headers promising a 100 kB body; 10 bytes of it; then nothing.
    BodyStalled,
    /// Complete headers promising a 100 kB body, then one byte every 300 ms.
    BodyDribble,
    /// One complete request, its response read, then the connection left open and idle.
    IdleKeepAlive,
}

async fn slow_connection(
    addr: std::net::SocketAddr,
    kind: Slow,
    give_up: Duration,
) -> Option<Duration> {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let post = b"POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n";
    match kind {
        Slow::Silent => time_to_close(stream, None, Duration::from_millis(200), give_up).await,
        Slow::HeaderDribble => {
            stream
                .write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                .await
                .unwrap();
            time_to_close(
                stream,
                Some(b"X-Slow: 1\r\n"),
                Duration::from_millis(200),
                give_up,
            )
            .await
        }
        Slow::BodyStalled => {
            stream.write_all(post).await.unwrap();
            stream.write_all(b"0123456789").await.unwrap();
            time_to_close(stream, None, Duration::from_millis(200), give_up).await
        }
        Slow::BodyDribble => {
            stream.write_all(post).await.unwrap();
            time_to_close(stream, Some(b"x"), Duration::from_millis(300), give_up).await
        }
        Slow::IdleKeepAlive => {
            stream
                .write_all(b"GET /__anteroom/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                .await
                .unwrap();
            time_to_close(stream, None, Duration::from_millis(200), give_up).await
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off_while_a_real_visitor_is_served() {
    // It counts the whole process's descriptors: alone, in a process of its own.
    if !run_alone(
        module_path!(),
        "slow_clients_are_cut_off_while_a_real_visitor_is_served",
    ) {
        return;
    }
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ar = start(&slow_config(&origin.url(), dir.path())).await;
    let addr = ar.addr;
    let http = client();
    let url = format!("http://{addr}/");
    // A real visitor, admitted, with their cookie.
    let first = http.get(&url).send().await.unwrap();
    assert_eq!(first.status(), 200);
    let cookie = visitor_cookie(&first).unwrap();
    let baseline = settled_fds().await;

    const PER_KIND: usize = 40;
    let kinds = [
        Slow::Silent,
        Slow::HeaderDribble,
        Slow::BodyStalled,
        Slow::IdleKeepAlive,
    ];
    let mut tasks = Vec::new();
    for kind in kinds {
        for _ in 0..PER_KIND {
            let task = tokio::spawn(slow_connection(addr, kind, Duration::from_secs(8)));
            tasks.push((kind, task));
        }
    }
    // Body dribblers too, for the load they put on the server while the visitor is served;
    // they are *not* cut off today (see `a_body_dribbled_forever_is_cut_off`).
    let dribblers: Vec<_> = (0..PER_KIND)
        .map(|_| {
            tokio::spawn(slow_connection(
                addr,
                Slow::BodyDribble,
                Duration::from_secs(4),
            ))
        })
        .collect();
    // Meanwhile the real visitor keeps using the site, and each request is quick.
    let mut slowest = Duration::ZERO;
    let mut served = 0;
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let asked = Instant::now();
        let response = http.get(&url).visitor(&cookie).send().await.unwrap();
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(
            body["origin"], true,
            "the real visitor was not served: {body}"
        );
        slowest = slowest.max(asked.elapsed());
        served += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        slowest < Duration::from_millis(1_500),
        "the real visitor waited {slowest:?}"
    );

    for kind in kinds {
        let limit = match kind {
            Slow::Silent | Slow::HeaderDribble => HEADER_READ_TIMEOUT,
            // Waiting for the next request is idle time, not a head being read.
            Slow::IdleKeepAlive => IDLE_TIMEOUT,
            // The proxied request waits on the origin reading the body; the origin timeout
            // answers 504, and a connection whose body was never finished is not reused.
            Slow::BodyStalled | Slow::BodyDribble => ORIGIN_TIMEOUT,
        } + SLACK;
        let mut times = Vec::new();
        for (k, task) in tasks
            .iter_mut()
            .filter(|(k, _)| std::mem::discriminant(k) == std::mem::discriminant(&kind))
        {
            let closed = task.await.unwrap();
            let closed = closed.unwrap_or_else(|| panic!("a {k:?} connection was never closed"));
            times.push(closed);
        }
        let max = times.iter().max().unwrap();
        let min = times.iter().min().unwrap();
        println!(
            "{kind:?}: {} connections, closed after {:.2}-{:.2} s",
            times.len(),
            min.as_secs_f64(),
            max.as_secs_f64()
        );
        assert!(*max <= limit, "{kind:?} held for {max:?} (limit {limit:?})");
    }
    let mut still_open = 0;
    for task in dribblers {
        still_open += usize::from(task.await.unwrap().is_none());
    }
    println!("BodyDribble: {still_open} of {PER_KIND} connections still open after 4 s");
    println!(
        "the real visitor: {served} requests served during the attack, slowest {:.0} ms",
        slowest.as_secs_f64() * 1000.0
    );
    // The operator sees the attack by its kind: the silent and dribbling heads as
    // `head_timeout`, the idle keep-alives as `idle_timeout` (with the visitor's own
    // pooled connection and the metrics reader's, at most two more), nothing else.
    let closed = |text: &str, reason: &str| {
        metric(
            text,
            &format!(
                "anteroom_connections_closed_total{{listener=\"public\",reason=\"{reason}\"}}"
            ),
        )
    };
    let heads = (2 * PER_KIND) as f64;
    let text = poll_until(
        Duration::from_secs(5),
        "every slow head counted",
        async || {
            let text = admin_metrics(&client(), addr).await;
            (closed(&text, "head_timeout") >= heads).then_some(text)
        },
    )
    .await;
    let idle = closed(&text, "idle_timeout");
    println!(
        "closed by the server: head_timeout {}, idle_timeout {idle}",
        closed(&text, "head_timeout")
    );
    assert_eq!(closed(&text, "head_timeout"), heads);
    assert!(
        (PER_KIND as f64..=PER_KIND as f64 + 2.0).contains(&idle),
        "idle_timeout {idle}"
    );
    for reason in [
        "made_room",
        "head_too_large",
        "malformed",
        "over_client_cap",
    ] {
        assert_eq!(closed(&text, reason), 0.0, "{reason}");
    }
    // Every slow connection's descriptors are gone.
    let deadline = Instant::now() + Duration::from_secs(5);
    while open_fds() > baseline + 10 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = open_fds();
    println!("descriptors: {baseline} before, {after} after");
    assert!(
        after <= baseline + 10,
        "{after} fds open, {baseline} before"
    );
    ar.shutdown().await.unwrap();
}

/// The same slow clients against the admin listener (`admin_listen`): it has its own
/// accept loop and connection budget, and the same timeouts must cut its slow clients off
/// while an operator's API calls (and the public site) are still answered quickly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_on_the_admin_listener_are_cut_off_while_the_admin_answers() {
    // It counts the whole process's descriptors: alone, in a process of its own.
    if !run_alone(
        module_path!(),
        "slow_clients_on_the_admin_listener_are_cut_off_while_the_admin_answers",
    ) {
        return;
    }
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = slow_config(&origin.url(), dir.path());
    config.admin_listen = Some("127.0.0.1:0".parse().unwrap());
    config.server.body_timeout = Duration::from_secs(2);
    let ar = start(&config).await;
    let admin = ar.admin_addr.expect("the admin listener is up");
    let http = client();
    let status_url = format!("http://{admin}/__anteroom/admin/api/status");
    let page = format!("http://{}/", ar.addr);
    // The site and the admin answered once, so both listeners' workers are up.
    assert!(http.get(&page).send().await.unwrap().status().is_success());
    let admin_status = async || {
        let status = http.get(&status_url).bearer_auth(ADMIN_TOKEN).send().await;
        status.unwrap().status()
    };
    assert_eq!(admin_status().await, 200);
    let baseline = settled_fds().await;

    const PER_KIND: usize = 30;
    let kinds = [Slow::Silent, Slow::HeaderDribble, Slow::IdleKeepAlive];
    let mut tasks = Vec::new();
    for kind in kinds {
        for _ in 0..PER_KIND {
            tasks.push((
                kind,
                tokio::spawn(slow_connection(admin, kind, Duration::from_secs(8))),
            ));
        }
    }
    // An authorised settings change whose body stalls after 10 of 1,000 bytes.
    let stalled: Vec<_> = (0..PER_KIND)
        .map(|_| {
            tokio::spawn(async move {
                let mut stream = TcpStream::connect(admin).await.unwrap();
                let head = format!(
                    "PUT /__anteroom/admin/api/rooms/main/config HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                     Authorization: Bearer {ADMIN_TOKEN}\r\nContent-Type: application/json\r\n\
                     Content-Length: 1000\r\n\r\n{{\"rate\": 1"
                );
                stream.write_all(head.as_bytes()).await.unwrap();
                time_to_close(
                    stream,
                    None,
                    Duration::from_millis(200),
                    Duration::from_secs(8),
                )
                .await
            })
        })
        .collect();
    // Meanwhile the operator's status call and a visitor's page are answered, and quickly.
    let mut slowest = Duration::ZERO;
    let mut served = 0;
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let asked = Instant::now();
        assert_eq!(admin_status().await, 200, "the admin did not answer");
        let visitor = http.get(&page).send().await.unwrap();
        assert!(visitor.status().is_success(), "{}", visitor.status());
        slowest = slowest.max(asked.elapsed());
        served += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        slowest < Duration::from_millis(1_500),
        "an admin call waited {slowest:?}"
    );
    for kind in kinds {
        let limit = match kind {
            Slow::IdleKeepAlive => IDLE_TIMEOUT,
            _ => HEADER_READ_TIMEOUT,
        } + SLACK;
        let mut max = Duration::ZERO;
        for (_, task) in tasks
            .iter_mut()
            .filter(|(k, _)| std::mem::discriminant(k) == std::mem::discriminant(&kind))
        {
            let closed = task.await.unwrap();
            max = max.max(closed.unwrap_or_else(|| panic!("an admin {kind:?} was never closed")));
        }
        println!("admin listener {kind:?}: {PER_KIND} connections, all closed within {max:.2?}");
        assert!(
            max <= limit,
            "admin {kind:?} held for {max:?} (limit {limit:?})"
        );
    }
    let mut max = Duration::ZERO;
    for task in stalled {
        let closed = task.await.unwrap();
        max = max.max(closed.expect("a stalled admin body was never cut off"));
    }
    println!(
        "admin listener stalled PUT body: {PER_KIND} connections, all closed within {max:.2?}"
    );
    assert!(
        max <= config.server.body_timeout + SLACK,
        "held for {max:?}"
    );
    println!(
        "the operator and a visitor: {served} rounds served during the attack, slowest {slowest:.2?}"
    );
    // Nothing was changed by the half-sent settings.
    let stats: serde_json::Value = http
        .get(format!(
            "http://{admin}/__anteroom/admin/api/rooms/main/stats"
        ))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stats["rate"], 1000.0, "{stats}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while open_fds() > baseline + 10 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(open_fds() <= baseline + 10, "descriptors leaked");
    ar.shutdown().await.unwrap();
}

/// A request body sent one byte every 300 ms never finishes (100 kB at that pace is
/// 9 hours), yet it makes progress, so neither the idle timeout (a request is in flight)
/// nor the origin timeout (the origin is still being fed) ever fires. `server.body_timeout`
/// (2 s here) is the whole body's deadline: the request gets a 408 and the connection closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_dribbled_forever_is_cut_off() {
    // It counts the whole process's descriptors: alone, in a process of its own.
    if !run_alone(module_path!(), "a_body_dribbled_forever_is_cut_off") {
        return;
    }
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ar = start(&slow_config(&origin.url(), dir.path())).await;
    let limit = ORIGIN_TIMEOUT + IDLE_TIMEOUT + SLACK;
    let closed = slow_connection(ar.addr, Slow::BodyDribble, limit + SLACK).await;
    assert!(
        closed.is_some_and(|t| t <= limit),
        "a body dribbled at 3 bytes a second was still open after {:?}",
        limit + SLACK
    );
    ar.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_connections_opened_and_dropped() {
    // It counts the whole process's descriptors: alone, in a process of its own.
    if !run_alone(
        module_path!(),
        "ten_thousand_connections_opened_and_dropped",
    ) {
        return;
    }
    const CONNECTIONS: usize = 10_000;
    const AT_ONCE: usize = 64;
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ar = start(&slow_config(&origin.url(), dir.path())).await;
    let addr = ar.addr;
    let http = client();
    let url = format!("http://{addr}/");
    let first = http.get(&url).send().await.unwrap();
    let cookie = visitor_cookie(&first).unwrap();
    // Let the client's pooled connection settle into the baseline.
    let baseline = settled_fds().await;

    let started = Instant::now();
    let permits = Arc::new(Semaphore::new(AT_ONCE));
    let peak = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    let mut ok = 0;
    for i in 0..CONNECTIONS {
        let permit = permits.clone().acquire_owned().await.unwrap();
        let peak = peak.clone();
        tasks.spawn(async move {
            let _permit = permit;
            let mut stream = match TcpStream::connect(addr).await {
                Ok(stream) => stream,
                Err(e) => {
                    eprintln!("connect {i}: {e}");
                    return false;
                }
            };
            match i % 4 {
                // Connect and drop.
                0 => {}
                // Half a request line.
                1 => {
                    let _ = stream.write_all(b"GET /some/pa").await;
                }
                // A whole request, gone before the answer.
                2 => {
                    let _ = stream
                        .write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                        .await;
                }
                // A whole request and its answer, then gone.
                _ => {
                    let _ = stream
                        .write_all(
                            b"GET /__anteroom/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
                        )
                        .await;
                    let mut out = Vec::new();
                    let _ = tokio::time::timeout(
                        Duration::from_secs(5),
                        stream.read_to_end(&mut out),
                    )
                    .await;
                    if !out.starts_with(b"HTTP/1.1 200") {
                        eprintln!("healthz {i}: {:?}", String::from_utf8_lossy(&out[..out.len().min(80)]));
                        return false;
                    }
                }
            }
            if i % 500 == 0 {
                peak.fetch_max(open_fds(), std::sync::atomic::Ordering::SeqCst);
            }
            true
        });
        while let Some(done) = tasks.try_join_next() {
            ok += usize::from(done.unwrap());
        }
    }
    while let Some(done) = tasks.join_next().await {
        ok += usize::from(done.unwrap());
    }
    let churn = started.elapsed();
    assert_eq!(
        ok, CONNECTIONS,
        "every connection was accepted (and answered)"
    );

    // The server lets go of every one of them.
    let deadline = Instant::now() + Duration::from_secs(5);
    while open_fds() > baseline + 10 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = open_fds();
    println!(
        "churn: {CONNECTIONS} connections ({AT_ONCE} at once) in {:.1} s; fds {baseline} \
         before, peak sampled {}, {after} after",
        churn.as_secs_f64(),
        peak.load(std::sync::atomic::Ordering::SeqCst)
    );
    assert!(
        after <= baseline + 10,
        "{after} fds open, {baseline} before"
    );
    // And it still serves: the admitted visitor and a newcomer.
    let response = http.get(&url).visitor(&cookie).send().await.unwrap();
    assert_eq!(
        response.json::<serde_json::Value>().await.unwrap()["origin"],
        true
    );
    let newcomer = http.get(&url).send().await.unwrap();
    assert_eq!(newcomer.status(), 200);
    ar.shutdown().await.unwrap();
}
