//! The listener end to end: caps, timeouts, drain, h2c, workers, and the handoff of a
//! long-lived response.

use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::accept::is_resource_exhaustion;
use super::*;
use crate::http::body::{BoxError, full};

fn limits() -> ServerLimits {
    ServerLimits {
        header_read_timeout: Duration::from_millis(200),
        idle_timeout: Duration::from_secs(5),
        max_connections: 100,
        shutdown_grace: Duration::from_secs(5),
        ..ServerLimits::default()
    }
}

struct TestServer {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<io::Result<()>>,
}

impl TestServer {
    async fn stop(mut self) -> io::Result<()> {
        let _ = self.stop.take().unwrap().send(());
        self.task.await.unwrap()
    }
}

async fn start<H, F>(limits: ServerLimits, handler: H) -> TestServer
where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(serve(listener, limits, handler, async move {
        let _ = rx.await;
    }));
    TestServer {
        addr,
        stop: Some(tx),
        task,
    }
}

async fn hello(_req: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
    Response::new(full(format!("hello {}", peer.ip())))
}

/// Reads until EOF or `limit`, returning what was read and whether EOF came.
async fn read_to_eof(stream: &mut TcpStream, limit: Duration) -> (String, bool) {
    let mut out = Vec::new();
    let result = tokio::time::timeout(limit, stream.read_to_end(&mut out)).await;
    (String::from_utf8_lossy(&out).into_owned(), result.is_ok())
}

/// Sends one HTTP/1.1 request on `stream`, reads its whole response ("hello ...") and
/// checks it is a 200.
async fn http1_round_trip(stream: &mut TcpStream) -> String {
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    while !seen.ends_with(b"127.0.0.1") {
        let n = tokio::time::timeout(Duration::from_secs(3), stream.read(&mut buf))
            .await
            .expect("the response arrives")
            .unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    let response = String::from_utf8_lossy(&seen).into_owned();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    response
}

#[tokio::test]
async fn a_burst_of_connections_is_spread_over_the_workers() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let which_worker = |_req: Request<Incoming>, _peer: SocketAddr| async {
        Response::new(full(crate::worker::index().to_string()))
    };
    let served = tokio::spawn(serve_on_workers(
        listener,
        2,
        limits(),
        which_worker,
        shutdown.clone(),
    ));
    // All connected before any is served: they wait in the accept queue together, and
    // whichever worker wakes first would take them all.
    let mut connections = Vec::new();
    for _ in 0..16 {
        connections.push(TcpStream::connect(addr).await.unwrap());
    }
    let mut served_by = [0usize; 2];
    for connection in &mut connections {
        connection
            .write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut response = Vec::new();
        while !(response.ends_with(b"0") || response.ends_with(b"1"))
            || !response.windows(4).any(|w| w == b"\r\n\r\n")
        {
            let mut buf = [0u8; 512];
            let n = connection.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed: {}", String::from_utf8_lossy(&response));
            response.extend_from_slice(&buf[..n]);
        }
        served_by[usize::from(response.last() == Some(&b'1'))] += 1;
    }
    // Kept open, each connection counts: at most one more on a worker than the other,
    // give or take one both workers accepted at the same moment.
    assert!(
        served_by[0].abs_diff(served_by[1]) <= 2,
        "connections per worker: {served_by:?}"
    );
    shutdown.cancel();
    drop(connections);
    served.await.unwrap().unwrap();
}

#[tokio::test]
async fn serves_a_request_with_the_peer_address() {
    let server = start(limits(), hello).await;
    let body = reqwest::get(format!("http://{}/", server.addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(body, "hello 127.0.0.1");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn header_read_timeout_closes_a_half_sent_request_line() {
    let server = start(limits(), hello).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream.write_all(b"GET /ind").await.unwrap();
    let started = Instant::now();
    let (_, eof) = read_to_eof(&mut stream, Duration::from_secs(3)).await;
    assert!(eof, "connection was not closed");
    assert!(started.elapsed() >= Duration::from_millis(150));
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_silent_connection_is_closed_after_the_header_read_timeout() {
    let server = start(limits(), hello).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let (_, eof) = read_to_eof(&mut stream, Duration::from_secs(3)).await;
    assert!(eof, "a connection that never sent a byte was kept open");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn idle_keep_alive_connection_is_closed() {
    let server = start(
        ServerLimits {
            header_read_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_millis(200),
            ..limits()
        },
        hello,
    )
    .await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let (response, eof) = read_to_eof(&mut stream, Duration::from_secs(3)).await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(eof, "idle keep-alive connection was not closed");
    assert!(started.elapsed() < Duration::from_secs(2));
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_slow_response_is_not_cut_by_the_idle_timer() {
    let server = start(
        ServerLimits {
            idle_timeout: Duration::from_millis(100),
            ..limits()
        },
        |_req: Request<Incoming>, _peer: SocketAddr| async {
            tokio::time::sleep(Duration::from_millis(400)).await;
            Response::new(full("late"))
        },
    )
    .await;
    let body = reqwest::get(format!("http://{}/", server.addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(body, "late");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn in_flight_request_completes_at_shutdown() {
    let (entered_tx, entered_rx) = oneshot::channel::<()>();
    let entered_tx = Arc::new(std::sync::Mutex::new(Some(entered_tx)));
    let server = start(
        limits(),
        move |_req: Request<Incoming>, _peer: SocketAddr| {
            let entered_tx = entered_tx.clone();
            async move {
                if let Some(tx) = entered_tx.lock().unwrap().take() {
                    let _ = tx.send(());
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
                Response::new(full("finished"))
            }
        },
    )
    .await;
    let url = format!("http://{}/", server.addr);
    let client = tokio::spawn(async move { reqwest::get(url).await?.text().await });
    entered_rx.await.unwrap();
    let started = Instant::now();
    server.stop().await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(client.await.unwrap().unwrap(), "finished");
}

#[tokio::test]
async fn shutdown_grace_drops_connections_that_do_not_finish() {
    let (entered_tx, entered_rx) = oneshot::channel::<()>();
    let entered_tx = Arc::new(std::sync::Mutex::new(Some(entered_tx)));
    let server = start(
        ServerLimits {
            shutdown_grace: Duration::from_millis(200),
            ..limits()
        },
        move |_req: Request<Incoming>, _peer: SocketAddr| {
            let entered_tx = entered_tx.clone();
            async move {
                if let Some(tx) = entered_tx.lock().unwrap().take() {
                    let _ = tx.send(());
                }
                tokio::time::sleep(Duration::from_secs(30)).await;
                Response::new(full("never"))
            }
        },
    )
    .await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    // In flight: the handler has the request.
    entered_rx.await.unwrap();
    let started = Instant::now();
    server.stop().await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    let (_, eof) = read_to_eof(&mut stream, Duration::from_secs(2)).await;
    assert!(eof);
}

#[tokio::test]
async fn max_connections_makes_the_next_connection_wait() {
    let server = start(
        ServerLimits {
            max_connections: 1,
            ..limits()
        },
        hello,
    )
    .await;
    // The first connection holds the only slot (it is open and has sent a request).
    let mut first = TcpStream::connect(server.addr).await.unwrap();
    first
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 512];
    let n = first.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));

    // The second connects (kernel backlog) but is not served while the first is open.
    let mut second = TcpStream::connect(server.addr).await.unwrap();
    second
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let waited = tokio::time::timeout(Duration::from_millis(150), second.read(&mut buf)).await;
    assert!(
        waited.is_err(),
        "second connection was served while at the cap"
    );

    drop(first);
    let (response, eof) = read_to_eof(&mut second, Duration::from_secs(3)).await;
    assert!(eof);
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn oversized_headers_get_431() {
    let server = start(limits(), hello).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let big = "a".repeat(200 * 1024);
    let request = format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\n\r\n");
    // The server may close before reading everything; a write error is fine.
    let _ = stream.write_all(request.as_bytes()).await;
    let (response, _) = read_to_eof(&mut stream, Duration::from_secs(3)).await;
    assert!(response.starts_with("HTTP/1.1 431"), "{response:.80}");
    // And the server still serves.
    let ok = reqwest::get(format!("http://{}/", server.addr))
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_head_within_max_header_bytes_is_served_and_one_past_it_gets_431() {
    let server = start(
        ServerLimits {
            max_header_bytes: 16 * 1024,
            ..limits()
        },
        hello,
    )
    .await;
    let cookie = |size: usize| format!("ar_visitor={}", "a".repeat(size));
    for (size, status) in [(12 * 1024, 200), (20 * 1024, 431)] {
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        let request = format!(
            "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nCookie: {}\r\n\r\n",
            cookie(size)
        );
        let _ = stream.write_all(request.as_bytes()).await;
        let (response, _) = read_to_eof(&mut stream, Duration::from_secs(3)).await;
        let expected = format!("HTTP/1.1 {status}");
        assert!(response.starts_with(&expected), "{size}: {response:.80}");

        let stream = TcpStream::connect(server.addr).await.unwrap();
        let (mut sender, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(conn);
        let req = Request::builder()
            .uri(format!("http://{}/", server.addr))
            .header(http::header::COOKIE, cookie(size))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        let response = sender.send_request(req).await.unwrap();
        assert_eq!(response.status().as_u16(), status, "h2, {size}");
    }
    server.stop().await.unwrap();
}

#[tokio::test]
async fn garbage_request_line_gets_400() {
    let server = start(limits(), hello).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(b"\x01\x02 garbage nonsense\r\n\r\n")
        .await
        .unwrap();
    let (response, _) = read_to_eof(&mut stream, Duration::from_secs(3)).await;
    assert!(response.starts_with("HTTP/1.1 400"), "{response:.80}");
    server.stop().await.unwrap();
}

/// `GET path` over h2c with prior knowledge.
async fn h2_get(addr: SocketAddr, path: &str) -> Response<Incoming> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = Request::builder()
        .uri(format!("http://{addr}{path}"))
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let response = sender.send_request(req).await.unwrap();
    assert_eq!(response.version(), http::Version::HTTP_2);
    response
}

#[tokio::test]
async fn serves_h2c_prior_knowledge() {
    let server = start(limits(), hello).await;
    let response = h2_get(server.addr, "/").await;
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"hello 127.0.0.1");
    server.stop().await.unwrap();
}

/// A long-lived handler whose body is `frames`, then ends when `end` fires (or never);
/// `dropped` fires when the body is dropped.
fn long_lived(
    frames: Vec<&'static str>,
    end: Option<oneshot::Receiver<()>>,
    dropped: Arc<std::sync::Mutex<Option<oneshot::Sender<()>>>>,
) -> impl Fn(Request<Incoming>, SocketAddr) -> std::future::Ready<Response<Body>>
+ Clone
+ Send
+ Sync
+ 'static {
    let end = Arc::new(std::sync::Mutex::new(end));
    move |_req, _peer| {
        struct Dropped(Option<oneshot::Sender<()>>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                if let Some(tx) = self.0.take() {
                    let _ = tx.send(());
                }
            }
        }
        let guard = Dropped(dropped.lock().unwrap().take());
        let end = end.lock().unwrap().take();
        let frames = futures_util::stream::iter(frames.clone().into_iter().map(|f| {
            Ok::<_, BoxError>(hyper::body::Frame::data(bytes::Bytes::from_static(
                f.as_bytes(),
            )))
        }));
        let tail = futures_util::stream::once(async move {
            let _guard = guard;
            match end {
                Some(end) => {
                    let _ = end.await;
                }
                None => std::future::pending::<()>().await,
            }
            Ok::<_, BoxError>(hyper::body::Frame::data(bytes::Bytes::new()))
        });
        let body = http_body_util::StreamBody::new(futures_util::StreamExt::chain(frames, tail));
        let mut response = Response::new(BodyExt::boxed(body));
        response.extensions_mut().insert(LongLived);
        std::future::ready(response)
    }
}

/// Sends `request` on a new connection and reads until what arrived ends with `until`.
async fn request_until(addr: SocketAddr, request: &[u8], until: &[u8]) -> (TcpStream, Vec<u8>) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    while !seen.ends_with(until) {
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .expect("the response arrives")
            .unwrap();
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    (stream, seen)
}

#[tokio::test]
async fn a_long_lived_response_leaves_hyper_and_keeps_its_chunks() {
    let (end_tx, end_rx) = oneshot::channel();
    let dropped = Arc::new(std::sync::Mutex::new(None));
    let server = start(
        ServerLimits {
            max_connections: 1,
            ..limits()
        },
        long_lived(vec!["hello", "world!"], Some(end_rx), dropped),
    )
    .await;
    // The head and both frames arrive while the body is still open.
    let (mut stream, seen) = request_until(
        server.addr,
        b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n",
        b"6\r\nworld!\r\n",
    )
    .await;
    let mut buf = [0u8; 1024];
    let text = String::from_utf8_lossy(&seen).to_lowercase();
    assert!(text.starts_with("http/1.1 200"), "{text}");
    assert!(
        text.contains("\r\ntransfer-encoding: chunked\r\n"),
        "{text}"
    );
    assert!(text.contains("\r\nconnection: close\r\n"), "{text}");
    assert!(
        text.ends_with("\r\n\r\n5\r\nhello\r\n6\r\nworld!\r\n"),
        "{text}"
    );

    // The stream still holds the only connection slot.
    let mut second = TcpStream::connect(server.addr).await.unwrap();
    second
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let waited = tokio::time::timeout(Duration::from_millis(150), second.read(&mut buf)).await;
    assert!(
        waited.is_err(),
        "second connection served while the stream holds the slot"
    );

    // The body's end is the last chunk, then the connection closes.
    end_tx.send(()).unwrap();
    let (rest, eof) = read_to_eof(&mut stream, Duration::from_secs(5)).await;
    assert!(eof);
    assert_eq!(rest, "0\r\n\r\n");
    // Its slot is free: the second connection is served now.
    let n = tokio::time::timeout(Duration::from_secs(5), second.read(&mut buf))
        .await
        .expect("served once the stream ended")
        .unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_handed_over_body_is_dropped_when_its_client_goes_away() {
    let (dropped_tx, dropped_rx) = oneshot::channel();
    let dropped = Arc::new(std::sync::Mutex::new(Some(dropped_tx)));
    let server = start(limits(), long_lived(vec!["hello"], None, dropped)).await;
    let (stream, _) = request_until(
        server.addr,
        b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n",
        b"5\r\nhello\r\n",
    )
    .await;
    drop(stream);
    tokio::time::timeout(Duration::from_secs(5), dropped_rx)
        .await
        .expect("the body is dropped once its client has gone")
        .unwrap();
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_long_lived_response_to_http_1_0_stays_with_hyper() {
    let (end_tx, end_rx) = oneshot::channel();
    let dropped = Arc::new(std::sync::Mutex::new(None));
    let server = start(limits(), long_lived(vec!["hello"], Some(end_rx), dropped)).await;
    let (mut stream, seen) = request_until(
        server.addr,
        b"GET /events HTTP/1.0\r\nHost: x\r\n\r\n",
        b"hello",
    )
    .await;
    end_tx.send(()).unwrap();
    let (rest, eof) = read_to_eof(&mut stream, Duration::from_secs(5)).await;
    assert!(eof);
    let text = String::from_utf8_lossy(&seen).to_lowercase() + &rest;
    // Close-delimited, as hyper writes any unsized body to HTTP/1.0: no chunks.
    assert!(!text.contains("transfer-encoding"), "{text}");
    assert!(text.ends_with("\r\n\r\nhello"), "{text}");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_long_lived_response_over_h2_stays_with_hyper() {
    let (end_tx, end_rx) = oneshot::channel();
    let dropped = Arc::new(std::sync::Mutex::new(None));
    let server = start(
        limits(),
        long_lived(vec!["hello", "world"], Some(end_rx), dropped),
    )
    .await;
    let response = h2_get(server.addr, "/events").await;
    assert!(response.headers().get(http::header::CONNECTION).is_none());
    end_tx.send(()).unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"helloworld");
    server.stop().await.unwrap();
}

#[test]
fn classifies_resource_exhaustion() {
    assert!(is_resource_exhaustion(&io::Error::from_raw_os_error(24)));
    assert!(is_resource_exhaustion(&io::Error::from_raw_os_error(23)));
    assert!(!is_resource_exhaustion(&io::Error::from_raw_os_error(103)));
}

mod closed;
mod heads;
