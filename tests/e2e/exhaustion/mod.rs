//! Connection and stream exhaustion (one client, one fair share; the connection budget),
//! written as the attacks, each while a real visitor is
//! still served: 40 open waiting-page streams against `max_connections: 40`, one client's
//! connections beyond `max_connections_per_client`, WebSocket tunnels beyond the caps and an
//! idle tunnel, and one h2c connection opening 200 streams.
//!
//! The attacker and the real visitors are told apart by their loopback address (the whole
//! of 127.0.0.0/8 is loopback on Linux): attackers use 127.0.0.1, visitors 127.0.0.2+.
//! The IPv6 test makes whole /64s local (`ip -6 route add local ... dev lo`, so it needs
//! root or CAP_NET_ADMIN) and connects from many addresses of one of them.

use crate::common;

mod ipv6;
mod websocket;

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anteroom::config::from_yaml_str;
use common::*;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

fn config(
    origin: &str,
    dir: &std::path::Path,
    server: &str,
    room: &str,
) -> anteroom::config::Config {
    let yaml = format!(
        r#"listen: "127.0.0.1:0"
admit_interval: 100ms
cookie_secret: "{COOKIE_SECRET}"
admin_token: "{ADMIN_TOKEN}"
data_dir: "{dir}"
server:
{server}
rooms:
  main:
    origin: {origin}
    join_limit_per_ip: 0
{room}
"#,
        dir = dir.display()
    );
    from_yaml_str(&yaml, "exhaustion.yaml").unwrap_or_else(|e| panic!("{e}\n{yaml}"))
}

/// A client whose connections come from `ip` (a loopback address of its own).
fn client_from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .local_address(ip.parse::<IpAddr>().unwrap())
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

/// A raw connection from 127.0.0.1 (the attacker).
async fn attacker_connect(addr: SocketAddr) -> TcpStream {
    connect_from(addr, "127.0.0.1").await
}

async fn connect_from(addr: SocketAddr, ip: &str) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new(ip.parse().unwrap(), 0))
        .unwrap();
    socket.connect(addr).await.unwrap()
}

/// Sends `GET path` with `cookie` and reads the response head (or `None` if the server
/// closed or said nothing within `limit`).
async fn open_request(
    addr: SocketAddr,
    path: &str,
    cookie: Option<&str>,
    limit: Duration,
) -> (TcpStream, Option<String>) {
    let mut stream = attacker_connect(addr).await;
    let cookie = cookie
        .map(|c| format!("Cookie: ar_visitor={c}\r\n"))
        .unwrap_or_default();
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{cookie}\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return (stream, None);
    }
    let mut buf = vec![0u8; 2048];
    let head = match tokio::time::timeout(limit, stream.read(&mut buf)).await {
        Ok(Ok(n)) if n > 0 => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
        _ => None,
    };
    (stream, head)
}

/// Waits until the server closes `stream`; true if it did within `limit`.
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let until = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(until, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

/// `n` waiting visitors' cookies (the room lets one visitor in, then queues).
async fn waiting_cookies(addr: SocketAddr, n: usize) -> Vec<String> {
    let http = client();
    let url = format!("http://{addr}/");
    let mut cookies = Vec::new();
    for _ in 0..n {
        let r = http.get(&url).send().await.unwrap();
        assert_eq!(status_header(&r).as_deref(), Some("waiting"));
        cookies.push(visitor_cookie(&r).unwrap());
    }
    cookies
}

/// An admitted visitor from `ip`: its client and cookie.
async fn admitted_visitor(addr: SocketAddr, ip: &str) -> (reqwest::Client, String) {
    let http = client_from(ip);
    let r = http.get(format!("http://{addr}/")).send().await.unwrap();
    let cookie = visitor_cookie(&r).unwrap();
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["origin"], true, "the first visitor is admitted");
    (http, cookie)
}

async fn served_quickly(
    http: &reqwest::Client,
    addr: SocketAddr,
    cookie: Option<&str>,
) -> reqwest::Response {
    let asked = Instant::now();
    let mut req = http.get(format!("http://{addr}/"));
    if let Some(c) = cookie {
        req = req.visitor(c);
    }
    let response = req.send().await.expect("served while under attack");
    assert!(
        asked.elapsed() < Duration::from_secs(3),
        "took {:?}",
        asked.elapsed()
    );
    response
}

const QUEUE: &str = "    rate: 0.01\n    max_active: 1000";

/// The finding: with `max_connections: 40`, 40 open `/__anteroom/events` streams locked
/// every new client out. Now streams have their own budget (`max_streams`, 20 here by
/// default): the 21st is refused with a 503, `Retry-After` and a closed connection, and a
/// new visitor's plain page and an admitted visitor's request are still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forty_waiting_page_streams_leave_room_for_new_and_admitted_visitors() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ar = start(&config(
        &origin.url(),
        dir.path(),
        "  max_connections: 40",
        QUEUE,
    ))
    .await;
    let (admitted, admitted_cookie) = admitted_visitor(ar.addr, "127.0.0.3").await;
    let cookies = waiting_cookies(ar.addr, 40).await;

    let mut streams = Vec::new();
    let (mut open, mut refused) = (0, 0);
    for cookie in &cookies {
        let (mut stream, head) = open_request(
            ar.addr,
            "/__anteroom/events",
            Some(cookie),
            Duration::from_secs(3),
        )
        .await;
        let head = head.expect("every stream request is answered");
        if head.starts_with("HTTP/1.1 200") {
            open += 1;
            streams.push(stream);
        } else {
            assert!(head.starts_with("HTTP/1.1 503"), "{head}");
            assert!(head.to_ascii_lowercase().contains("retry-after:"), "{head}");
            assert!(
                closed_within(&mut stream, Duration::from_secs(2)).await,
                "a refused stream's connection is closed at once"
            );
            refused += 1;
        }
    }
    assert_eq!(
        (open, refused),
        (20, 20),
        "max_streams defaults to half of max_connections"
    );
    assert_eq!(ar.app.live.budget.streams(), 20);

    // A new visitor's plain page and the admitted visitor are served while every stream
    // slot is taken.
    let newcomer = served_quickly(&client_from("127.0.0.2"), ar.addr, None).await;
    assert_eq!(newcomer.status(), 200);
    assert_eq!(status_header(&newcomer).as_deref(), Some("waiting"));
    let page = newcomer.text().await.unwrap();
    assert!(
        page.contains("http-equiv=\"refresh\""),
        "the plain page refreshes itself"
    );
    let body: serde_json::Value = served_quickly(&admitted, ar.addr, Some(&admitted_cookie))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["origin"], true);

    // Streams ending give their slots back.
    drop(streams);
    let until = Instant::now() + Duration::from_secs(5);
    while ar.app.live.budget.streams() > 0 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(ar.app.live.budget.streams(), 0);
    ar.shutdown().await.unwrap();
}

/// One visitor reopening its stream 40 times holds one stream (a new one ends the old), and
/// one client holds at most `max_streams_per_client` streams (then 429).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_stream_per_visitor_and_a_share_per_client() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ar = start(&config(
        &origin.url(),
        dir.path(),
        "  max_connections: 200\n  max_streams_per_client: 5",
        QUEUE,
    ))
    .await;
    let _ = admitted_visitor(ar.addr, "127.0.0.3").await;
    let cookies = waiting_cookies(ar.addr, 7).await;

    let mut held = Vec::new();
    for _ in 0..40 {
        let (stream, head) = open_request(
            ar.addr,
            "/__anteroom/events",
            Some(&cookies[0]),
            Duration::from_secs(3),
        )
        .await;
        assert!(head.unwrap().starts_with("HTTP/1.1 200"));
        held.push(stream);
    }
    // A new stream ends the visitor's old one at once; the old one's slot comes back when
    // its connection task next runs, which with one runtime per CPU may be another
    // thread's (bounded wait).
    let until = Instant::now() + Duration::from_secs(5);
    while ar.app.live.budget.streams() > 1 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        ar.app.live.budget.streams(),
        1,
        "one live stream per visitor"
    );

    for cookie in &cookies[1..5] {
        let (stream, head) = open_request(
            ar.addr,
            "/__anteroom/events",
            Some(cookie),
            Duration::from_secs(3),
        )
        .await;
        assert!(head.unwrap().starts_with("HTTP/1.1 200"));
        held.push(stream);
    }
    let (_s, head) = open_request(
        ar.addr,
        "/__anteroom/events",
        Some(&cookies[5]),
        Duration::from_secs(3),
    )
    .await;
    let head = head.unwrap();
    assert!(head.starts_with("HTTP/1.1 429"), "{head}");
    assert_eq!(ar.app.live.budget.streams(), 5);
    ar.shutdown().await.unwrap();
}

/// Many connections from one untrusted peer: beyond `max_connections_per_client` they are
/// closed at accept, and a visitor at another address is served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_per_client_cap_are_closed_at_accept() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ar = start(&config(
        &origin.url(),
        dir.path(),
        "  max_connections: 40\n  max_connections_per_client: 10\n  header_read_timeout: 30s",
        "",
    ))
    .await;
    let mut held = Vec::new();
    for _ in 0..30 {
        held.push(attacker_connect(ar.addr).await);
    }
    let mut closed = 0;
    for stream in &mut held {
        if closed_within(stream, Duration::from_millis(300)).await {
            closed += 1;
        }
    }
    assert_eq!(closed, 20, "10 of 30 kept, the rest closed at accept");
    let served = served_quickly(&client_from("127.0.0.2"), ar.addr, None).await;
    assert_eq!(served.status(), 200);
    // Each of the 20 is counted for the operator (read from another address).
    let admin = client_from("127.0.0.2");
    let series =
        "anteroom_connections_closed_total{listener=\"public\",reason=\"over_client_cap\"}";
    poll_until(Duration::from_secs(5), series, async || {
        let text = admin_metrics(&admin, ar.addr).await;
        (metric(&text, series) == 20.0).then_some(())
    })
    .await;
    // The peer gets its connections back as its open ones close.
    drop(held);
    let peer = client_from("127.0.0.1");
    poll_until(
        Duration::from_secs(5),
        "the peer served again",
        async || {
            let served = peer.get(format!("http://{}/", ar.addr)).send().await;
            served.is_ok_and(|r| r.status() == 200).then_some(())
        },
    )
    .await;
    ar.shutdown().await.unwrap();
}

/// A trusted proxy carries everyone's connections: it is exempt from the per-client cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_proxy_is_exempt_from_the_per_client_cap() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(
        &origin.url(),
        dir.path(),
        "  max_connections_per_client: 2\n  header_read_timeout: 30s",
        "",
    );
    cfg.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
    let ar = start(&cfg).await;
    let mut held = Vec::new();
    for _ in 0..10 {
        held.push(attacker_connect(ar.addr).await);
    }
    for stream in &mut held {
        assert!(!closed_within(stream, Duration::from_millis(100)).await);
    }
    ar.shutdown().await.unwrap();
}

/// One h2c connection opening 200 streams: the server allows `http2_max_streams` (10 here)
/// at once, so the origin never sees more than 10 of them concurrently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_h2c_connection_opening_200_streams_is_bounded() {
    // An origin that holds each request 200 ms and records the peak concurrency.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = listener.local_addr().unwrap();
    let now = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    {
        let (now, peak) = (now.clone(), peak.clone());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (now, peak) = (now.clone(), peak.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |_req| {
                        let (now, peak) = (now.clone(), peak.clone());
                        async move {
                            let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                            peak.fetch_max(n, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            now.fetch_sub(1, Ordering::SeqCst);
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(
                                http_body_util::Full::new(bytes::Bytes::from_static(b"ok")),
                            ))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
    }
    let dir = tempfile::tempdir().unwrap();
    let ar = start(&config(
        &format!("http://{origin}"),
        dir.path(),
        "  http2_max_streams: 10",
        "    rate: 1000\n    max_active: 100000",
    ))
    .await;
    let r = client()
        .get(format!("http://{}/", ar.addr))
        .send()
        .await
        .unwrap();
    let cookie = visitor_cookie(&r).unwrap();
    peak.store(0, Ordering::SeqCst);

    let stream = TcpStream::connect(ar.addr).await.unwrap();
    let (sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..200 {
        let mut sender = sender.clone();
        let req = http::Request::builder()
            .uri(format!("http://{}/", ar.addr))
            .header("cookie", format!("ar_visitor={cookie}"))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        tasks.spawn(async move {
            sender.ready().await.ok()?;
            let response = sender.send_request(req).await.ok()?;
            Some(response.status())
        });
    }
    let mut ok = 0;
    while let Some(result) = tasks.join_next().await {
        if result.unwrap() == Some(http::StatusCode::OK) {
            ok += 1;
        }
    }
    let peak = peak.load(Ordering::SeqCst);
    println!("h2c: {ok} of 200 streams served, origin peak concurrency {peak}");
    assert!(peak <= 10, "one connection carried {peak} requests at once");
    assert!(ok >= 10, "only {ok} served");
    ar.shutdown().await.unwrap();
}
