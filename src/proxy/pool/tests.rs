//! The pool against a real origin: reuse, retirement, idle close, retry on a closed
//! connection.

use super::*;
use crate::http::body::Watched;
use http_body_util::{BodyExt, Full};
use std::net::SocketAddr;
use tokio::net::TcpListener;

const IDLE: Duration = Duration::from_secs(30);

/// An origin that answers every request with the port it was reached from (so a test
/// sees which connection carried it); `/close` also asks to close the connection, and
/// `/big` streams 1 MiB.
async fn origin() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, peer)) = listener.accept().await {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| async move {
                let mut response = Response::builder();
                let body = match req.uri().path() {
                    "/big" => Bytes::from(vec![b'x'; 1 << 20]),
                    "/close" => {
                        response = response.header("connection", "close");
                        Bytes::from(peer.port().to_string())
                    }
                    _ => Bytes::from(peer.port().to_string()),
                };
                response.body(Full::new(body))
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service),
            );
        }
    });
    addr
}

fn pool() -> Pool {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(crate::tls::no_trust())
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Pool::new(ConnectTimeout::new(https, Duration::from_secs(5)), IDLE)
}

/// A `method` request for `path` through the pool with an empty visitor body.
async fn request(
    pool: &Pool,
    origin: SocketAddr,
    method: &str,
    path: &str,
) -> Response<OriginBody> {
    let (visitor, _server) = visitor_req().await;
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", origin.to_string())
        .body(visitor)
        .unwrap();
    let base: Uri = format!("http://{origin}/").parse().unwrap();
    pool.send(&base, req, false).await.unwrap()
}

async fn get(pool: &Pool, origin: SocketAddr, path: &str) -> Response<OriginBody> {
    request(pool, origin, "GET", path).await
}

/// A visitor's (empty) request body, as the gate hands it to the pool.
async fn visitor_req() -> (TrackedBody, tokio::task::JoinHandle<()>) {
    tracked(visitor_body().await)
}

fn tracked(
    (visitor, server): (Incoming, tokio::task::JoinHandle<()>),
) -> (TrackedBody, tokio::task::JoinHandle<()>) {
    let activity = crate::proxy::timers::Activity::new(Duration::from_secs(60));
    (Watched::new(visitor, activity), server)
}

/// A real (empty) hyper `Incoming`, the only body type the pool carries: a request
/// received by a throwaway server.
async fn visitor_body() -> (Incoming, tokio::task::JoinHandle<()>) {
    // No chunks will come: the sender is dropped at once.
    let (_, rx) = tokio::sync::mpsc::unbounded_channel();
    visitor_upload(rx, 0).await
}

/// A real `Incoming` of `len` bytes, which arrive as the test sends them on `chunks`.
async fn visitor_upload(
    chunks: tokio::sync::mpsc::UnboundedReceiver<Bytes>,
    len: u64,
) -> (Incoming, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let tx = Arc::new(Mutex::new(Some(tx)));
    let server = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let service = hyper::service::service_fn(move |req: Request<Incoming>| {
            let tx = tx.clone();
            async move {
                if let Some(tx) = tx.lock().unwrap().take() {
                    let _ = tx.send(req.into_body());
                }
                Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::new())))
            }
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(stream), service)
            .await;
    });
    let stream = TcpStream::connect(addr).await.unwrap();
    let body = http_body_util::StreamBody::new(futures_util::stream::unfold(
        chunks,
        |mut chunks| async move {
            let chunk = chunks.recv().await?;
            Some((
                Ok::<_, std::convert::Infallible>(Frame::data(chunk)),
                chunks,
            ))
        },
    ));
    let (mut send, conn) = http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    let req = Request::builder()
        .method(if len == 0 { "GET" } else { "POST" })
        .header("content-length", len)
        .body(body)
        .unwrap();
    tokio::spawn(async move {
        let _ = send.send_request(req).await;
    });
    (rx.await.unwrap(), server)
}

async fn text(response: Response<OriginBody>) -> String {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// Reads from `stream` onto `seen` until it holds a request head; returns where the
/// head ends (the body starts).
async fn read_head(stream: &mut TcpStream, seen: &mut Vec<u8>) -> usize {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 1024];
    loop {
        if let Some(at) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
            return at + 4;
        }
        let n = stream.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed before a whole head");
        seen.extend_from_slice(&buf[..n]);
    }
}

/// Answers a request with the port it came from, as [`origin`] does.
async fn answer_with_port(stream: &mut TcpStream, peer: SocketAddr) {
    use tokio::io::AsyncWriteExt;
    let port = peer.port().to_string();
    let answer = format!(
        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{port}",
        port.len()
    );
    stream.write_all(answer.as_bytes()).await.unwrap();
}

fn idle(pool: &Pool) -> usize {
    lock(&pool.shared.state)
        .origins
        .iter()
        .map(|(_, idle)| idle.len())
        .sum()
}

#[tokio::test]
async fn a_finished_exchange_gives_its_connection_to_the_next_request() {
    let (origin, pool) = (origin().await, pool());
    let first = text(get(&pool, origin, "/").await).await;
    assert_eq!(idle(&pool), 1);
    let second = text(get(&pool, origin, "/").await).await;
    assert_eq!(
        first, second,
        "the second request reused the first's connection"
    );
    assert_eq!(idle(&pool), 1);
}

#[tokio::test]
async fn a_body_dropped_half_read_closes_its_connection() {
    let (origin, pool) = (origin().await, pool());
    let port = text(get(&pool, origin, "/").await).await;
    let mut big = get(&pool, origin, "/big").await.into_body();
    let first = big.frame().await.unwrap().unwrap();
    assert!(first.is_data());
    drop(big);
    assert_eq!(idle(&pool), 0, "a connection mid-message is not pooled");
    let next = text(get(&pool, origin, "/").await).await;
    assert_ne!(next, port, "the next request had to open a new connection");
}

#[tokio::test]
async fn an_empty_body_gives_its_connection_back_unread() {
    let (origin, pool) = (origin().await, pool());
    let port = text(get(&pool, origin, "/").await).await;
    let head = request(&pool, origin, "HEAD", "/").await;
    assert!(head.body().is_end_stream());
    drop(head);
    assert_eq!(idle(&pool), 1);
    assert_eq!(text(get(&pool, origin, "/").await).await, port);
}

#[tokio::test]
async fn a_connection_the_origin_closes_is_not_reused() {
    let (origin, pool) = (origin().await, pool());
    let closed = text(get(&pool, origin, "/close").await).await;
    assert_eq!(idle(&pool), 0);
    assert_ne!(text(get(&pool, origin, "/").await).await, closed);
}

#[tokio::test]
async fn an_idle_connection_the_origin_dropped_is_replaced() {
    // An origin that answers one request per connection without saying so, then hangs
    // up: the connection looks reusable when it comes back to the pool.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = listener.local_addr().unwrap();
    let (hang_up, mut hang_ups) = tokio::sync::mpsc::unbounded_channel::<()>();
    let (hung_up, mut hangups) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut stream, peer)) = listener.accept().await {
            read_head(&mut stream, &mut Vec::new()).await;
            answer_with_port(&mut stream, peer).await;
            hang_ups.recv().await;
            drop(stream);
            let _ = hung_up.send(());
        }
    });
    let pool = pool();
    let first = text(get(&pool, origin, "/").await).await;
    assert_eq!(idle(&pool), 1);
    hang_up.send(()).unwrap();
    hangups.recv().await.unwrap();
    // Let the runtime's I/O driver see the hang-up.
    for _ in 0..3 {
        tokio::task::yield_now().await;
    }
    // The sweep's next probe closes it long before it would expire. (Two intervals:
    // the sweep may have armed its first wait only once the clock was paused.)
    assert_eq!(idle(&pool), 1);
    tokio::time::pause();
    for _ in 0..2 {
        tokio::time::advance(PROBE_INTERVAL).await;
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
    }
    assert!(PROBE_INTERVAL * 2 < IDLE);
    assert_eq!(idle(&pool), 0, "the probe found the origin's close");
    tokio::time::resume();
    let second = text(get(&pool, origin, "/").await).await;
    assert_ne!(second, first, "answered on a new connection, not a failure");
}

#[tokio::test]
async fn idle_connections_close_after_the_idle_timeout() {
    let (origin, pool) = (origin().await, pool());
    let port = text(get(&pool, origin, "/").await).await;
    assert_eq!(idle(&pool), 1);
    tokio::time::pause();
    tokio::time::advance(IDLE - Duration::from_secs(1)).await;
    assert_eq!(idle(&pool), 1, "not yet");
    tokio::time::advance(Duration::from_secs(2)).await;
    // The sweep's timer has fired; let it run.
    for _ in 0..3 {
        tokio::task::yield_now().await;
    }
    assert_eq!(idle(&pool), 0, "closed by the sweep");
    tokio::time::resume();
    assert_ne!(text(get(&pool, origin, "/").await).await, port);
}

#[tokio::test]
async fn an_upload_the_origin_answers_early_is_finished_then_pooled() {
    // An origin that answers as soon as it has the head, reads the 10-byte body after,
    // then answers the connection's next request with the port it came from.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = listener.local_addr().unwrap();
    let (got_body, mut bodies) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut stream, peer) = listener.accept().await.unwrap();
        let mut seen = Vec::new();
        let body_at = read_head(&mut stream, &mut seen).await;
        stream
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nearly")
            .await
            .unwrap();
        let mut body = seen.split_off(body_at);
        let mut buf = [0u8; 1024];
        while body.len() < 10 {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "the upload was cut");
            body.extend_from_slice(&buf[..n]);
        }
        let _ = got_body.send(body);
        read_head(&mut stream, &mut Vec::new()).await;
        answer_with_port(&mut stream, peer).await;
        std::future::pending::<()>().await;
    });
    let pool = pool();
    let (chunks, rx) = tokio::sync::mpsc::unbounded_channel();
    let (visitor, _server) = tracked(visitor_upload(rx, 10).await);
    chunks.send(Bytes::from_static(b"hello")).unwrap();
    let req = Request::builder()
        .method("POST")
        .uri("/upload")
        .header("host", origin.to_string())
        .body(visitor)
        .unwrap();
    let base: Uri = format!("http://{origin}/").parse().unwrap();
    let response = pool.send(&base, req, false).await.unwrap();
    assert_eq!(text(response).await, "early");
    assert_eq!(idle(&pool), 0, "not pooled while its upload is unfinished");
    chunks.send(Bytes::from_static(b"world")).unwrap();
    assert_eq!(bodies.recv().await.unwrap(), b"helloworld");
    for _ in 0..10 {
        if idle(&pool) == 1 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(idle(&pool), 1, "pooled once the upload was done");
    let port = text(get(&pool, origin, "/").await).await;
    assert!(port.parse::<u16>().is_ok(), "{port}");
}
