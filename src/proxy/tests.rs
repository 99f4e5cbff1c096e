//! The origin client end to end (a real origin and a real front behind [`serve`]), and the
//! header, path and origin rules on their own.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::header::{HeaderMap, HeaderName};
use http::uri::PathAndQuery;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio_tungstenite::tungstenite::Message;

use super::*;
use crate::http::body::{BoxError, full};
use crate::server::{ServerLimits, serve};

const ERROR_KIND: &str = "x-test-proxy-error";

fn timeouts() -> ProxyTimeouts {
    ProxyTimeouts {
        connect: Duration::from_millis(300),
        response: Duration::from_millis(300),
        idle: Duration::from_secs(5),
        body: Duration::from_secs(5),
    }
}

fn limits() -> ServerLimits {
    ServerLimits {
        header_read_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(5),
        max_connections: 100,
        shutdown_grace: Duration::from_millis(200),
        ..ServerLimits::default()
    }
}

/// A server from [`serve`] that stops when the returned sender is dropped.
async fn start<H, F>(handler: H) -> (SocketAddr, oneshot::Sender<()>)
where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(serve(listener, limits(), handler, async move {
        let _ = rx.await;
    }));
    (addr, tx)
}

/// An origin that answers `/echo-body` by streaming the request body back, and anything
/// else with what it received: the request line, then every header, one per line.
async fn echo_origin() -> (SocketAddr, oneshot::Sender<()>) {
    start(|req: Request<Incoming>, _peer: SocketAddr| async move {
        if req.uri().path().ends_with("/echo-body") {
            return Response::new(req.into_body().map_err(BoxError::from).boxed());
        }
        let mut seen = format!("{} {} {:?}\n", req.method(), req.uri(), req.version());
        for (name, value) in req.headers() {
            seen.push_str(&format!("{}: {}\n", name, value.to_str().unwrap()));
        }
        Response::builder()
            .header("connection", "x-origin-private")
            .header("x-origin-private", "secret")
            .header("keep-alive", "timeout=5")
            .header("proxy-authenticate", "Basic")
            .header("x-origin-public", "yes")
            .body(full(seen))
            .unwrap()
    })
    .await
}

/// The proxy under test: every request forwarded to `origin`.
async fn front(origin: &str, preserve_host: bool) -> (SocketAddr, oneshot::Sender<()>) {
    let origin = Origin::new(&origin.parse().unwrap()).unwrap();
    let client = OriginClient::new(timeouts());
    start(move |req: Request<Incoming>, peer: SocketAddr| {
        let origin = origin.clone();
        let client = client.clone();
        async move {
            let ctx = ForwardContext {
                client_ip: peer.ip(),
                proto: "https",
                host: test_host(&req),
                preserve_host,
                trusted_peer: false,
                request_id: None,
                admission: None,
            };
            match client.forward(&origin, req, &ctx).await {
                Ok(response) => response,
                Err(error) => {
                    // The request path decides the visitor's status (gate::error, a
                    // layer above); this harness only needs the failures told apart.
                    let (kind, status) = match error {
                        ProxyError::Connect(_) => ("connect", 502),
                        ProxyError::Timeout => ("timeout", 504),
                        ProxyError::Upstream(_) => ("upstream", 502),
                        ProxyError::BadRequest(_) => ("bad-request", 400),
                        ProxyError::InvalidOrigin(_) => ("invalid-origin", 500),
                        ProxyError::BodyTimeout => ("body-timeout", 408),
                        ProxyError::ClientBody => ("client-body", 400),
                    };
                    Response::builder()
                        .status(status)
                        .header(ERROR_KIND, kind)
                        .body(full(error.to_string()))
                        .unwrap()
                }
            }
        }
    })
    .await
}

/// Sends one request over a fresh HTTP/1.1 connection with exactly the given headers.
async fn raw(addr: SocketAddr, req: Request<Full<Bytes>>) -> (http::response::Parts, Bytes) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let response = sender.send_request(req).await.unwrap();
    let (parts, body) = response.into_parts();
    (parts, body.collect().await.unwrap().to_bytes())
}

#[tokio::test]
async fn forwards_get() {
    let (origin, _o) = echo_origin().await;
    let (front, _f) = front(&format!("http://{origin}"), false).await;
    let response = reqwest::get(format!("http://{front}/a/b?c=d"))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-origin-public"], "yes");
    let seen = response.text().await.unwrap();
    assert!(seen.starts_with("GET /a/b?c=d HTTP/1.1\n"), "{seen}");
}

#[tokio::test]
async fn streams_a_1_mib_post_both_ways() {
    let (origin, _o) = echo_origin().await;
    let (front, _f) = front(&format!("http://{origin}"), false).await;
    let payload: Vec<u8> = (0..1024 * 1024).map(|i| (i % 251) as u8).collect();
    // A streamed (chunked) upload, so nothing knows the length in advance.
    let chunks: Vec<Result<Bytes, io::Error>> = payload
        .chunks(64 * 1024)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let body = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
    let response = reqwest::Client::new()
        .post(format!("http://{front}/echo-body"))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let echoed = response.bytes().await.unwrap();
    assert_eq!(echoed.len(), payload.len());
    assert!(echoed[..] == payload[..]);
}

#[test]
fn every_connection_field_names_headers_to_drop() {
    let mut headers = HeaderMap::new();
    headers.append(header::CONNECTION, HeaderValue::from_static("x-one"));
    headers.append(
        header::CONNECTION,
        HeaderValue::from_static("keep-alive, X-Two"),
    );
    for name in ["x-one", "x-two", "keep-alive", "te", "x-kept"] {
        headers.insert(name, HeaderValue::from_static("v"));
    }
    strip_hop_by_hop(&mut headers);
    let left: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
    assert_eq!(left, ["x-kept"]);
}

#[tokio::test]
async fn drops_hop_by_hop_and_sets_forwarding_headers() {
    let (origin, _o) = echo_origin().await;
    let (front, _f) = front(&format!("http://{origin}"), false).await;
    let req = Request::builder()
        .uri("/h")
        .header("host", "shop.example")
        .header("connection", "keep-alive, x-visitor-private")
        .header("x-visitor-private", "1")
        .header("keep-alive", "timeout=5")
        .header("proxy-authorization", "Basic abc")
        .header("proxy-connection", "keep-alive")
        .header("te", "trailers")
        .header("trailer", "x-t")
        .header("upgrade", "h2c")
        .header("x-forwarded-for", "6.6.6.6, 7.7.7.7")
        .header("x-forwarded-proto", "gopher")
        .header("x-forwarded-host", "evil.example")
        .header("forwarded", "for=6.6.6.6")
        .header("x-kept", "kept")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (parts, body) = raw(front, req).await;
    let seen = String::from_utf8(body.to_vec()).unwrap();
    let lower = seen.to_ascii_lowercase();
    for dropped in [
        "connection:",
        "x-visitor-private",
        "keep-alive",
        "proxy-authorization",
        "proxy-connection",
        "te:",
        "trailer:",
        "upgrade:",
        "forwarded: for",
        "6.6.6.6",
        "gopher",
        "evil.example",
    ] {
        assert!(
            !lower.contains(dropped),
            "{dropped} reached the origin:\n{seen}"
        );
    }
    assert!(seen.contains("x-forwarded-for: 127.0.0.1\n"), "{seen}");
    assert!(seen.contains("x-forwarded-proto: https\n"), "{seen}");
    assert!(seen.contains("x-forwarded-host: shop.example\n"), "{seen}");
    assert!(seen.contains("x-kept: kept\n"), "{seen}");
    assert!(seen.contains(&format!("host: {origin}\n")), "{seen}");

    // And on the way back.
    for dropped in ["x-origin-private", "keep-alive", "proxy-authenticate"] {
        assert!(
            !parts.headers.contains_key(dropped),
            "{dropped} reached the visitor"
        );
    }
    assert_eq!(parts.headers["x-origin-public"], "yes");
}

#[tokio::test]
async fn h2_visitor_goes_to_the_origin_as_http_1_1() {
    let (origin, _o) = echo_origin().await;
    let (front, _f) = front(&format!("http://{origin}"), false).await;
    let stream = tokio::net::TcpStream::connect(front).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let req = Request::builder()
        .uri("http://shop.example/h2?x=1")
        .header("cookie", "a=1")
        .header("cookie", "b=2")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = sender.send_request(req).await.unwrap();
    assert_eq!(response.status(), 200);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let seen = String::from_utf8(body.to_vec()).unwrap();
    assert!(seen.starts_with("GET /h2?x=1 HTTP/1.1\n"), "{seen}");
    assert!(seen.contains("x-forwarded-host: shop.example\n"), "{seen}");
    assert!(seen.contains(&format!("host: {origin}\n")), "{seen}");
    assert!(seen.contains("cookie: a=1; b=2\n"), "{seen}");
}

#[tokio::test]
async fn preserve_host_forwards_the_visitor_host() {
    let (origin, _o) = echo_origin().await;
    let (front, _f) = front(&format!("http://{origin}"), true).await;
    let req = Request::builder()
        .uri("/")
        .header("host", "shop.example")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (_, body) = raw(front, req).await;
    let seen = String::from_utf8(body.to_vec()).unwrap();
    assert!(seen.contains("\nhost: shop.example\n"), "{seen}");
}

#[tokio::test]
async fn absolute_form_target_never_picks_the_origin() {
    let (origin, _o) = echo_origin().await;
    let (front, _f) = front(&format!("http://{origin}"), false).await;
    let req = Request::builder()
        .uri("http://169.254.169.254/latest/meta-data?x=1")
        .header("host", "169.254.169.254")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (parts, body) = raw(front, req).await;
    assert_eq!(parts.status, 200);
    let seen = String::from_utf8(body.to_vec()).unwrap();
    assert!(
        seen.starts_with("GET /latest/meta-data?x=1 HTTP/1.1\n"),
        "{seen}"
    );
    assert!(seen.contains(&format!("host: {origin}\n")), "{seen}");
}

#[tokio::test]
async fn joins_the_origin_path_prefix() {
    let (origin, _o) = echo_origin().await;
    let (front, _f) = front(&format!("http://{origin}/base"), false).await;
    let seen = reqwest::get(format!("http://{front}/x?y=1"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(seen.starts_with("GET /base/x?y=1 HTTP/1.1\n"), "{seen}");
}

#[test]
fn origin_parsing_and_target_joining() {
    let o = Origin::new(&"http://o:8080/base/".parse().unwrap()).unwrap();
    assert_eq!(o.prefix(), "/base");
    assert_eq!(o.authority().as_str(), "o:8080");
    let pq: PathAndQuery = "/x?y=1".parse().unwrap();
    assert_eq!(
        o.target(Some(&pq)).unwrap().to_string(),
        "http://o:8080/base/x?y=1"
    );
    let bare = Origin::new(&"http://o".parse().unwrap()).unwrap();
    assert_eq!(bare.prefix(), "");
    assert_eq!(
        bare.target(Some(&pq)).unwrap().to_string(),
        "http://o/x?y=1"
    );
    assert_eq!(bare.target(None).unwrap().to_string(), "http://o/");
    assert_eq!(bare.to_string(), "http://o");
    let tls = Origin::new(&"https://o:8443/p".parse().unwrap()).unwrap();
    assert_eq!(
        tls.target(Some(&pq)).unwrap().to_string(),
        "https://o:8443/p/x?y=1"
    );
    for bad in ["ftp://o", "/just/a/path", "http://o/?q=1", "http://u:p@o/"] {
        let err = Origin::new(&bad.parse().unwrap()).unwrap_err();
        assert!(matches!(err, ProxyError::InvalidOrigin(_)), "{bad}");
    }
    let star: PathAndQuery = "*".parse().unwrap();
    assert!(matches!(
        bare.target(Some(&star)),
        Err(ProxyError::BadRequest(_))
    ));
}

#[tokio::test]
async fn origin_down_is_502() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead = listener.local_addr().unwrap();
    drop(listener);
    let (front, _f) = front(&format!("http://{dead}"), false).await;
    let response = reqwest::get(format!("http://{front}/")).await.unwrap();
    assert_eq!(response.status(), 502);
    assert_eq!(response.headers()[ERROR_KIND], "connect");
}

#[tokio::test]
async fn silent_origin_is_504_within_the_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let (front, _f) = front(&format!("http://{silent}"), false).await;
    let started = Instant::now();
    let response = reqwest::get(format!("http://{front}/")).await.unwrap();
    let elapsed = started.elapsed();
    assert_eq!(response.status(), 504);
    assert_eq!(response.headers()[ERROR_KIND], "timeout");
    assert!(elapsed >= Duration::from_millis(250), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
}

#[tokio::test]
async fn websocket_passes_through() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut ws = tokio_tungstenite::accept_async(stream).await.unwrap();
                while let Some(Ok(message)) = ws.next().await {
                    if message.is_text() || message.is_binary() {
                        ws.send(message).await.unwrap();
                    }
                }
            });
        }
    });
    let (front, _f) = front(&format!("http://{origin}"), false).await;
    let (mut ws, response) = tokio_tungstenite::connect_async(format!("ws://{front}/socket"))
        .await
        .unwrap();
    assert_eq!(response.status(), 101);
    for i in 0..5 {
        ws.send(Message::text(format!("hello {i}"))).await.unwrap();
        let echoed = tokio::time::timeout(Duration::from_secs(2), ws.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(echoed.into_text().unwrap().as_str(), format!("hello {i}"));
    }
    ws.send(Message::binary(vec![0u8, 1, 2, 255]))
        .await
        .unwrap();
    let echoed = ws.next().await.unwrap().unwrap();
    assert_eq!(echoed.into_data().as_ref(), &[0u8, 1, 2, 255]);
    ws.close(None).await.unwrap();
}

#[tokio::test]
async fn stalled_response_body_is_cut_after_idle() {
    // An origin that sends headers and half a body, then nothing.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = listener.local_addr().unwrap();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut held = Vec::new();
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf).await;
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf")
                .await;
            held.push(stream);
        }
    });
    let origin = Origin::new(&format!("http://{origin}").parse().unwrap()).unwrap();
    let client = OriginClient::new(ProxyTimeouts {
        idle: Duration::from_millis(200),
        ..timeouts()
    });
    let (front, _f) = start(move |req: Request<Incoming>, peer: SocketAddr| {
        let (origin, client) = (origin.clone(), client.clone());
        async move {
            let ctx = ForwardContext {
                client_ip: peer.ip(),
                proto: "http",
                host: test_host(&req),
                preserve_host: false,
                trusted_peer: false,
                request_id: None,
                admission: None,
            };
            client.forward(&origin, req, &ctx).await.unwrap()
        }
    })
    .await;
    let started = Instant::now();
    let response = reqwest::get(format!("http://{front}/")).await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.bytes().await.is_err());
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn ip_header_is_the_address_as_text() {
    for ip in [
        "0.0.0.0",
        "255.255.255.255",
        "10.0.0.1",
        "192.168.100.9",
        "1.20.3.45",
        "::1",
        "2001:db8::8a2e:370:7334",
    ] {
        let parsed: IpAddr = ip.parse().unwrap();
        assert_eq!(ip_header(parsed), ip, "{ip}");
    }
}

#[test]
fn classifies_streams() {
    let ws = Request::builder()
        .header("connection", "keep-alive, Upgrade")
        .header("upgrade", "WebSocket")
        .body(())
        .unwrap();
    assert!(is_upgrade(&ws));
    let h2c = Request::builder()
        .header("connection", "upgrade")
        .header("upgrade", "h2c")
        .body(())
        .unwrap();
    assert!(!is_upgrade(&h2c));
    let sse = Request::builder()
        .header("accept", "text/html;q=0.9, text/event-stream")
        .body(())
        .unwrap();
    assert!(is_event_stream(&sse));
    let html = Request::builder()
        .header("accept", "text/html")
        .body(())
        .unwrap();
    assert!(!is_event_stream(&html));
}

#[test]
fn joins_h2_cookie_fields() {
    let mut headers = HeaderMap::new();
    headers.append(header::COOKIE, HeaderValue::from_static("a=1"));
    headers.append(header::COOKIE, HeaderValue::from_static("b=2"));
    join_cookies(&mut headers);
    assert_eq!(headers.get_all(header::COOKIE).iter().count(), 1);
    assert_eq!(headers[header::COOKIE], "a=1; b=2");
}

fn test_host<B>(req: &Request<B>) -> Option<HeaderValue> {
    crate::identity::request_host(req)
        .ok()
        .flatten()
        .map(|h| h.header_value().clone())
}

fn path(s: &str) -> Result<String, PathError> {
    resolve_dot_segments(s).map(|p| p.unwrap_or_else(|| s.to_owned()))
}

#[test]
fn paths() {
    assert_eq!(path("/a/b").unwrap(), "/a/b");
    assert!(resolve_dot_segments("/a/b.css?x").unwrap().is_none());
    assert_eq!(path("/../admin/secret.txt").unwrap(), "/admin/secret.txt");
    assert_eq!(path("/%2e%2e/admin").unwrap(), "/admin");
    assert_eq!(path("/%2E./admin").unwrap(), "/admin");
    assert_eq!(path("/a/./b/../c").unwrap(), "/a/c");
    assert_eq!(path("/a/b/..").unwrap(), "/a/");
    assert_eq!(path("/a/.").unwrap(), "/a/");
    assert_eq!(path("/..\\admin").unwrap(), "/admin");
    assert_eq!(path("/a\\b").unwrap(), "/a/b");
    assert_eq!(path("/..").unwrap(), "/");
    assert_eq!(path("/...").unwrap(), "/...");
    assert_eq!(path("/.well-known/x").unwrap(), "/.well-known/x");
    assert_eq!(path("/a.b/c").unwrap(), "/a.b/c");
    assert_eq!(path("/%").unwrap(), "/%");
    assert_eq!(path("/a%2").unwrap(), "/a%2");
    assert_eq!(path("/..%2fadmin"), Err(PathError::EncodedSeparator));
    assert_eq!(path("/%5c..%5cadmin"), Err(PathError::EncodedSeparator));
    assert_eq!(path("/files/a%2Fb").unwrap(), "/files/a%2Fb");
    assert_eq!(path("/x/%2e%2e%2Fadmin"), Err(PathError::EncodedSeparator));
    assert_eq!(path("*"), Err(PathError::NotAbsolute));
    // A path that needs no change says so, even when the quick check flagged it: the
    // proxy refuses anything the second pass would still change.
    for p in [
        "/.well-known/acme-challenge/t",
        "/x/.hidden",
        "/a%2Eb",
        "/files/a%2Fb",
        "/...",
    ] {
        assert_eq!(resolve_dot_segments(p), Ok(None), "{p}");
    }
    // Resolving is idempotent: what the gate resolved, the proxy takes as final.
    for p in [
        "/../a",
        "/a\\b",
        "/%2E./x/.",
        "/a/./b/../c",
        "/.well-known/../x",
    ] {
        let once = path(p).unwrap();
        assert_eq!(resolve_dot_segments(&once), Ok(None), "{p} -> {once}");
    }
    // Never climbs out: every result starts with '/' and has no dot segment.
    for p in ["/../../..", "/a/../../b", "/%2e%2e/%2e%2e/x", "/.\\..\\x"] {
        let r = path(p).unwrap();
        assert!(r.starts_with('/'));
        assert!(!r.split('/').any(|s| s == ".." || s == "."), "{p} -> {r}");
    }
}
