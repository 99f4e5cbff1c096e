//! Traffic classes end to end: a real anteroom on loopback in front of real
//! origins (an echo origin, a slow origin that counts its concurrency, a WebSocket echo),
//! driven by real HTTP and WebSocket clients.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::*;
use futures_util::{SinkExt, StreamExt};
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;

/// One visitor in (the fast path), then nobody for 100 s: everyone after waits.
const ONE_THEN_QUEUE: &str = "    rate: 0.01\n    max_active: 1000";

async fn json(response: reqwest::Response) -> serde_json::Value {
    response.json().await.unwrap()
}

/// A line of `n` behind one admitted visitor, whose cookie is returned.
async fn line_of(addr: std::net::SocketAddr, n: usize) -> (String, Vec<String>) {
    let http = client();
    let url = format!("http://{addr}/");
    let admitted = visitor_cookie(&http.get(&url).send().await.unwrap()).unwrap();
    let mut waiting = Vec::new();
    for _ in 0..n {
        let response = http.get(&url).send().await.unwrap();
        assert_eq!(status_header(&response).as_deref(), Some("waiting"));
        waiting.push(visitor_cookie(&response).unwrap());
    }
    (admitted, waiting)
}

#[tokio::test]
async fn a_webhook_and_a_preflight_pass_while_a_line_exists_and_create_nothing() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let extra = format!("{ONE_THEN_QUEUE}\n    bypass_paths: [\"/webhooks/**\"]");
    let ar = start(&config(&origin.url(), dir.path(), &extra)).await;
    line_of(ar.addr, 50).await;
    let store = ar.app.admission.store_for_tests().clone();
    let before = store.stats("main").await.unwrap();
    assert_eq!(before.waiting, 50);

    let http = client();
    let payload = vec![b'x'; 4096];
    let response = http
        .post(format!("http://{}/webhooks/pay?id=7", ar.addr))
        .body(payload.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(visitor_cookie(&response).is_none(), "no cookie on a bypass");
    assert_eq!(status_header(&response), None);
    let body = json(response).await;
    assert_eq!(body["origin"], true);
    assert_eq!(body["method"], "POST");
    assert_eq!(body["uri"], "/webhooks/pay?id=7");
    assert_eq!(body["body_len"], payload.len());

    // A CORS preflight (no cookie by design) is passed through the same way.
    let response = http
        .request(
            reqwest::Method::OPTIONS,
            format!("http://{}/api/cart", ar.addr),
        )
        .header("origin", "https://elsewhere.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert!(visitor_cookie(&response).is_none());
    assert_eq!(json(response).await["method"], "OPTIONS");

    // `OPTIONS *` is answered here.
    let mut stream = tokio::net::TcpStream::connect(ar.addr).await.unwrap();
    stream
        .write_all(b"OPTIONS * HTTP/1.1\r\nHost: shop.example\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 204"), "{out}");
    assert!(!out.to_ascii_lowercase().contains("set-cookie"), "{out}");

    let after = store.stats("main").await.unwrap();
    assert_eq!(
        (after.waiting, after.active, after.total_joined),
        (before.waiting, before.active, before.total_joined),
        "a bypass, a preflight and OPTIONS * create no session and no place"
    );
    let metrics = admin_metrics(&http, ar.addr).await;
    assert!(
        metrics.contains("anteroom_bypass_requests_total{room=\"main\"} 2"),
        "{metrics}"
    );
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_asset_is_a_small_503_for_a_waiting_visitor_and_the_file_for_an_admitted_one() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let extra = format!("{ONE_THEN_QUEUE}\n    asset_paths: [\"*.css\", \"/static/**\"]");
    let ar = start(&config(&origin.url(), dir.path(), &extra)).await;
    let (admitted, waiting) = line_of(ar.addr, 3).await;
    // "Nobody waits" is read from the statistics cache; bring it up to date.
    ar.app.admission.refresh_stats(&["main".to_owned()]).await;
    let http = client();
    let css = format!("http://{}/static/app.css", ar.addr);

    let hits = origin.hits();
    let response = http.get(&css).visitor(&waiting[0]).send().await.unwrap();
    assert_eq!(response.status(), 503);
    assert!(response.headers().contains_key("retry-after"));
    assert_eq!(status_header(&response).as_deref(), Some("waiting"));
    let ct = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(!ct.contains("html"), "{ct}");
    let body = response.text().await.unwrap();
    assert!(body.len() < 64 && !body.contains('<'), "{body}");
    // A newcomer asking for an asset does not join either.
    let response = http.get(&css).send().await.unwrap();
    assert_eq!(response.status(), 503);
    assert!(visitor_cookie(&response).is_none());
    assert_eq!(origin.hits(), hits, "nothing reached the origin");
    let stats = ar
        .app
        .admission
        .store_for_tests()
        .stats("main")
        .await
        .unwrap();
    assert_eq!(stats.waiting, 3, "nobody joined the line for an asset");

    let response = http.get(&css).visitor(&admitted).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(json(response).await["uri"], "/static/app.css");
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn assets_are_served_to_anyone_while_nobody_waits() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ar = start(&config(
        &origin.url(),
        dir.path(),
        "    asset_paths: [\"*.js\"]",
    ))
    .await;
    let response = client()
        .get(format!("http://{}/a/b/app.js", ar.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(visitor_cookie(&response).is_none());
    let stats = ar
        .app
        .admission
        .store_for_tests()
        .stats("main")
        .await
        .unwrap();
    assert_eq!((stats.active, stats.waiting), (0, 0));
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_breaker_refuses_newcomers_only() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let extra = format!("{ONE_THEN_QUEUE}\n    max_waiting: 2");
    let ar = start(&config(&origin.url(), dir.path(), &extra)).await;
    let (admitted, waiting) = line_of(ar.addr, 2).await;
    let http = client();
    let url = format!("http://{}/", ar.addr);

    let response = http
        .get(&url)
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(status_header(&response).as_deref(), Some("full"));
    assert!(response.headers().contains_key("retry-after"));
    assert!(visitor_cookie(&response).is_none());
    assert_eq!(json(response).await["status"], "full");
    let page = http.get(&url).send().await.unwrap();
    assert_eq!(page.status(), 503);
    assert!(page.text().await.unwrap().contains("The line is full"));

    // Those in line keep their places; the admitted visitor keeps the site.
    for (i, cookie) in waiting.iter().enumerate() {
        let body = json(
            http.get(&url)
                .visitor(cookie)
                .header("accept", "application/json")
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(body["position"], i as u64 + 1);
    }
    let on_site = http.get(&url).visitor(&admitted).send().await.unwrap();
    assert_eq!(json(on_site).await["origin"], true);
    let stats = ar
        .app
        .admission
        .store_for_tests()
        .stats("main")
        .await
        .unwrap();
    assert_eq!((stats.waiting, stats.total_refused), (2, 2));
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_waiting_page_and_its_json_show_the_visitor_reference() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ar = start(&config(&origin.url(), dir.path(), ONE_THEN_QUEUE)).await;
    let (_, waiting) = line_of(ar.addr, 1).await;
    let http = client();
    let url = format!("http://{}/", ar.addr);
    let body = json(
        http.get(&url)
            .visitor(&waiting[0])
            .header("accept", "application/json")
            .send()
            .await
            .unwrap(),
    )
    .await;
    let reference = body["ref"].as_str().unwrap().to_owned();
    assert_eq!(reference.len(), 8);
    assert!(
        reference
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_uppercase())
    );
    let page = http
        .get(&url)
        .visitor(&waiting[0])
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains(&reference), "{page}");
    ar.shutdown().await.unwrap();
}

/// An origin that takes `delay` per request and records the most requests it ever had at
/// once.
struct SlowOrigin {
    addr: std::net::SocketAddr,
    peak: Arc<AtomicU64>,
}

async fn slow_origin(delay: Duration) -> SlowOrigin {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let now = Arc::new(AtomicU64::new(0));
    let peak = Arc::new(AtomicU64::new(0));
    let (n, p) = (now.clone(), peak.clone());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (n, p) = (n.clone(), p.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |_req: Request<Incoming>| {
                    let (n, p) = (n.clone(), p.clone());
                    async move {
                        let at_once = n.fetch_add(1, Ordering::SeqCst) + 1;
                        p.fetch_max(at_once, Ordering::SeqCst);
                        tokio::time::sleep(delay).await;
                        n.fetch_sub(1, Ordering::SeqCst);
                        Ok::<_, std::convert::Infallible>(Response::new(
                            anteroom::http::body::full("slow"),
                        ))
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    SlowOrigin { addr, peak }
}

/// `n` requests at once from one admitted visitor; the statuses, in no order.
async fn burst(addr: std::net::SocketAddr, cookie: &str, n: usize) -> Vec<u16> {
    let mut tasks = Vec::new();
    for i in 0..n {
        let cookie = cookie.to_owned();
        tasks.push(tokio::spawn(async move {
            let response = client()
                .get(format!("http://{addr}/page/{i}"))
                .visitor(&cookie)
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            if status == 503 {
                assert!(response.headers().contains_key("retry-after"));
            }
            let _ = response.bytes().await;
            status
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

#[tokio::test]
async fn max_inflight_holds_the_limit_and_waits_in_order_up_to_inflight_wait() {
    let origin = slow_origin(Duration::from_millis(500)).await;
    let dir = tempfile::tempdir().unwrap();
    let ar = start(&config(
        &format!("http://{}", origin.addr),
        dir.path(),
        "    max_inflight: 4\n    inflight_wait: 3s",
    ))
    .await;
    let first = client()
        .get(format!("http://{}/", ar.addr))
        .send()
        .await
        .unwrap();
    let cookie = visitor_cookie(&first).unwrap();
    let _ = first.bytes().await;

    // 8 at once: 4 go, 4 wait one round (500 ms, under inflight_wait) and go.
    let statuses = burst(ar.addr, &cookie, 8).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    assert_eq!(
        origin.peak.load(Ordering::SeqCst),
        4,
        "never a fifth at once"
    );
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_request_past_inflight_wait_gets_503() {
    let origin = slow_origin(Duration::from_millis(1500)).await;
    let dir = tempfile::tempdir().unwrap();
    let ar = start(&config(
        &format!("http://{}", origin.addr),
        dir.path(),
        "    max_inflight: 4\n    inflight_wait: 200ms",
    ))
    .await;
    let http = client();
    // The fast path lets this visitor in without touching the origin? No: the first page
    // is proxied, so take the cookie from it.
    let first = http
        .get(format!("http://{}/", ar.addr))
        .send()
        .await
        .unwrap();
    let cookie = visitor_cookie(&first).unwrap();
    let _ = first.bytes().await;

    let mut statuses = burst(ar.addr, &cookie, 8).await;
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 200, 200, 503, 503, 503, 503]);
    assert_eq!(origin.peak.load(Ordering::SeqCst), 4);
    let metrics = admin_metrics(&http, ar.addr).await;
    assert!(
        metrics.contains("anteroom_inflight_rejected_total{room=\"main\"} 4"),
        "{metrics}"
    );
    assert!(
        metrics.contains("anteroom_origin_inflight{room=\"main\"} 0"),
        "every slot is back: {metrics}"
    );
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_slot_is_released_when_the_client_goes_mid_body() {
    // An origin that sends headers, then one chunk, then never finishes.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf).await;
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\nhello")
                    .await;
                tokio::time::sleep(Duration::from_secs(60)).await;
            });
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let ar = start(&config(
        &format!("http://{addr}"),
        dir.path(),
        "    max_inflight: 1\n    inflight_wait: 100ms",
    ))
    .await;
    let mut stream = tokio::net::TcpStream::connect(ar.addr).await.unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 512];
    let n = stream.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    // The slot is held while the body is open: the next request is refused.
    let busy = client()
        .get(format!("http://{}/", ar.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(busy.status(), 503);
    // The client goes; the slot comes back.
    drop(stream);
    let mut freed = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut s = tokio::net::TcpStream::connect(ar.addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let n = s.read(&mut buf).await.unwrap();
        if String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200") {
            freed = true;
            break;
        }
    }
    assert!(freed, "the slot was released when the client went");
    ar.shutdown().await.unwrap();
}

/// A WebSocket echo origin.
async fn ws_origin() -> std::net::SocketAddr {
    ws_origin_with_logout().await
}

fn ws_request(
    addr: std::net::SocketAddr,
    cookie: &str,
) -> tokio_tungstenite::tungstenite::handshake::client::Request {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut req = format!("ws://{addr}/socket").into_client_request().unwrap();
    req.headers_mut()
        .insert("cookie", format!("ar_visitor={cookie}").parse().unwrap());
    req
}

#[tokio::test]
async fn streams_beyond_stream_cap_are_refused_and_an_open_one_keeps_its_session() {
    let ws = ws_origin().await;
    let dir = tempfile::tempdir().unwrap();
    let clock = anteroom::clock::Clock::system();
    let store = Arc::new(anteroom::queue::MemoryStore::in_memory(clock.clone()));
    let ar = start_with_store(
        &config(
            &format!("http://{ws}"),
            dir.path(),
            "    rate: 0.01\n    max_active: 1\n    session_ttl: 10s\n    stream_cap: 1",
        ),
        store.clone(),
    )
    .await;
    let http = client();
    let url = format!("http://{}/", ar.addr);
    let first = http.get(&url).send().await.unwrap();
    let admitted = visitor_cookie(&first).unwrap();
    let (waiting, _) = line_of_more(&http, &url).await;

    let (mut socket, response) = tokio_tungstenite::connect_async(ws_request(ar.addr, &admitted))
        .await
        .expect("an admitted visitor's WebSocket");
    assert_eq!(response.status(), 101);

    // stream_cap: 1 — a second is refused.
    match tokio_tungstenite::connect_async(ws_request(ar.addr, &admitted)).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => assert_eq!(r.status(), 503),
        other => panic!("expected a 503, got {other:?}"),
    }
    // A waiting visitor's stream is refused too (never the line's page).
    match tokio_tungstenite::connect_async(ws_request(ar.addr, &waiting)).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => assert_eq!(r.status(), 503),
        other => panic!("expected a 503, got {other:?}"),
    }

    // Three times session_ttl passes by the store's clock while the socket is open; the
    // stream keeps the session (touched every half second), so the slot is not given away.
    for _ in 0..6 {
        clock.advance_for_tests(Duration::from_secs(5));
        ar.app.touch_streams().await;
        store_pass(&ar).await;
    }
    socket.send(Message::text("still here")).await.unwrap();
    let echoed = socket.next().await.unwrap().unwrap();
    assert_eq!(echoed.into_text().unwrap().as_str(), "still here");
    let stats = ar
        .app
        .admission
        .store_for_tests()
        .stats("main")
        .await
        .unwrap();
    assert_eq!(
        (stats.active, stats.total_expired),
        (1, 0),
        "the session lives"
    );
    let body = json(
        http.get(&url)
            .visitor(&waiting)
            .header("accept", "application/json")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        body["position"], 1,
        "the slot was not given to the next in line"
    );

    // Closed: the slot is reclaimed after session_ttl like any other.
    socket.close(None).await.unwrap();
    drop(socket);
    // The tunnel ends on its worker's thread: wait for it, bounded.
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while ar.app.origin_streams() > 0 && std::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(ar.app.origin_streams(), 0);
    clock.advance_for_tests(Duration::from_secs(11));
    store_pass(&ar).await;
    let stats = ar
        .app
        .admission
        .store_for_tests()
        .stats("main")
        .await
        .unwrap();
    assert_eq!(stats.total_expired, 1);
    ar.shutdown().await.unwrap();
}

async fn line_of_more(http: &reqwest::Client, url: &str) -> (String, ()) {
    let response = http.get(url).send().await.unwrap();
    assert_eq!(status_header(&response).as_deref(), Some("waiting"));
    (visitor_cookie(&response).unwrap(), ())
}

async fn store_pass(ar: &anteroom::run::Running) {
    ar.app
        .admission
        .store_for_tests()
        .admit_pass("main")
        .await
        .unwrap();
}

/// A WebSocket echo origin whose `GET /logout` ends the visitor's session
/// (`X-Anteroom-End-Session: 1`).
async fn ws_origin_with_logout() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = [0u8; 16];
                let Ok(n) = stream.peek(&mut head).await else {
                    return;
                };
                if head[..n].starts_with(b"GET /logout") {
                    let mut request = vec![0u8; 4096];
                    let _ = stream.read(&mut request).await;
                    let _ = stream
                        .write_all(
                            b"HTTP/1.1 200 OK\r\nx-anteroom-end-session: 1\r\n\
                              content-length: 3\r\nconnection: close\r\n\r\nbye",
                        )
                        .await;
                    return;
                }
                let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else {
                    return;
                };
                while let Some(Ok(msg)) = ws.next().await {
                    if (msg.is_text() || msg.is_binary()) && ws.send(msg).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// A WebSocket through anteroom from loopback address `source`.
async fn ws_from(
    source: [u8; 4],
    addr: std::net::SocketAddr,
    cookie: &str,
) -> tokio_tungstenite::WebSocketStream<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(std::net::SocketAddr::from((source, 0)))
        .unwrap();
    let stream = socket.connect(addr).await.unwrap();
    let (ws, response) = tokio_tungstenite::client_async(ws_request(addr, cookie), stream)
        .await
        .expect("an admitted visitor's WebSocket");
    assert_eq!(response.status(), 101);
    ws
}

/// The next message, `None` once the tunnel is closed; bounded.
async fn next_message(
    ws: &mut tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
) -> Option<Message> {
    match tokio::time::timeout(Duration::from_secs(5), ws.next())
        .await
        .expect("the tunnel answers or closes in time")
    {
        Some(Ok(Message::Close(_))) | Some(Err(_)) | None => None,
        Some(Ok(message)) => Some(message),
    }
}

fn from_source(source: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(std::net::IpAddr::from(source))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_tunnel_closes_when_its_session_ends_or_its_client_is_banned() {
    let origin = ws_origin_with_logout().await;
    let dir = tempfile::tempdir().unwrap();
    let ar = start(&config(
        &format!("http://{origin}"),
        dir.path(),
        "    rate: 100\n    max_active: 100\n    session_ttl: 60s",
    ))
    .await;
    let url = format!("http://{}/", ar.addr);
    let (a, b) = ([127, 0, 0, 4], [127, 0, 0, 5]);
    let cookie_a = visitor_cookie(&from_source(a).get(&url).send().await.unwrap()).unwrap();
    let cookie_b = visitor_cookie(&from_source(b).get(&url).send().await.unwrap()).unwrap();
    let mut ws_a = ws_from(a, ar.addr, &cookie_a).await;
    let mut ws_b = ws_from(b, ar.addr, &cookie_b).await;
    assert_eq!(ar.app.origin_streams(), 2);

    // A logs out in another tab: the origin ends the session; A's tunnel goes with it at
    // the next touch, B's stays.
    let bye = from_source(a)
        .get(format!("{url}logout"))
        .visitor(&cookie_a)
        .send()
        .await
        .unwrap();
    assert_eq!(bye.text().await.unwrap(), "bye");
    ar.app.touch_streams().await;
    assert_eq!(next_message(&mut ws_a).await, None, "A's tunnel closed");
    ws_b.send(Message::text("still here")).await.unwrap();
    assert_eq!(
        next_message(&mut ws_b).await,
        Some(Message::text("still here"))
    );

    // B's address is banned: the sweep closes B's tunnel too.
    ar.app
        .abuse
        .ban("127.0.0.5", Some(Duration::from_secs(600)), "test")
        .await
        .unwrap();
    ar.app.sweep_banned().await;
    assert_eq!(next_message(&mut ws_b).await, None, "B's tunnel closed");
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while ar.app.origin_streams() > 0 && std::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(ar.app.origin_streams(), 0);
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_event_stream_to_the_origin_counts_against_the_client_share() {
    let origin = ws_origin_with_logout().await;
    let dir = tempfile::tempdir().unwrap();
    let ar = start(&config_with(
        &format!("http://{origin}"),
        dir.path(),
        "server:\n  max_streams_per_client: 1\n",
        "    rate: 100\n    max_active: 100",
    ))
    .await;
    let url = format!("http://{}/", ar.addr);
    let c = [127, 0, 0, 6];
    let cookie = visitor_cookie(&from_source(c).get(&url).send().await.unwrap()).unwrap();
    let _ws = ws_from(c, ar.addr, &cookie).await;
    // The client's one share is the tunnel's: an event stream to the origin is refused
    // before it reaches the origin.
    let events = from_source(c)
        .get(format!("{url}feed"))
        .visitor(&cookie)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 429);
    ar.shutdown().await.unwrap();
}

/// A stream's first request is let in by the fast path or not at all: it never puts anybody
/// in line (not even while the statistics read, a second old, still says nobody waits), and
/// it never walks past the door's proof of work.
#[tokio::test]
async fn a_stream_never_joins_the_line_nor_passes_the_door() {
    for door in ["", "\n    challenge: {mode: always}"] {
        let origin = Origin::start().await;
        let dir = tempfile::tempdir().unwrap();
        let room =
            format!("    rate: 100\n    max_active: 2\n    asset_paths: [\"/static/**\"]{door}");
        let config = config(&origin.url(), dir.path(), &room);
        let store = anteroom::run::open_store(&config).await.unwrap();
        let ar = start_with_store(&config, store.clone()).await;
        let http = client();
        let url = format!("http://{}/", ar.addr);
        let stream = || {
            http.get(format!("{url}feed"))
                .header("accept", "text/event-stream")
                .send()
        };
        // The room's statistics say nobody waits: an asset passes without a session.
        poll_until(Duration::from_secs(5), "an asset passing", async || {
            let r = http
                .get(format!("{url}static/app.css"))
                .send()
                .await
                .unwrap();
            (r.status() == 200).then_some(())
        })
        .await;
        let hits = origin.hits();
        if door.is_empty() {
            // Fill the site; within the second, the statistics still say nobody waits.
            for _ in 0..2 {
                let page = http.get(&url).send().await.unwrap();
                assert_eq!(status_header(&page), None, "let in");
            }
        } else {
            let page = http.get(&url).send().await.unwrap();
            assert_eq!(status_header(&page).as_deref(), Some("challenge"));
        }
        let let_in = origin.hits() - hits;
        for _ in 0..10 {
            let r = stream().await.unwrap();
            assert_eq!(r.status(), 503, "{door}");
            assert!(visitor_cookie(&r).is_none(), "{door}");
        }
        assert_eq!(origin.hits(), hits + let_in, "no stream reached the origin");
        // The store's own counts, not the statistics read.
        let stats = store.stats("main").await.unwrap();
        let on_site = if door.is_empty() { 2 } else { 0 };
        assert_eq!(stats.active, on_site, "{door}");
        assert_eq!((stats.waiting, stats.total_joined), (0, 0), "{door}");
        ar.shutdown().await.unwrap();
    }
}
