//! WebSocket tunnels: counted against the per-client and total caps, and an idle one closed
//! after the idle timeout.

use super::*;

/// A WebSocket echo origin on loopback.
async fn ws_origin() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else {
                    return;
                };
                while let Some(Ok(msg)) = ws.next().await {
                    if msg.is_text() && ws.send(msg).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

type Ws = tokio_tungstenite::WebSocketStream<TcpStream>;

/// Why a WebSocket was not opened.
#[derive(Debug)]
enum NotOpened {
    /// The handshake failed: refused (an HTTP status) or broken.
    Handshake(tokio_tungstenite::tungstenite::Error),
    /// Not answered within the limit.
    TimedOut,
}

impl NotOpened {
    /// The HTTP status the upgrade was refused with, if it was.
    fn status(&self) -> Option<u16> {
        match self {
            NotOpened::Handshake(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                Some(response.status().as_u16())
            }
            _ => None,
        }
    }
}

/// A WebSocket through anteroom from 127.0.0.1 as the visitor `cookie`.
async fn ws_connect(addr: SocketAddr, cookie: &str, limit: Duration) -> Result<Ws, NotOpened> {
    ws_connect_from(addr, "127.0.0.1", cookie, limit).await
}

async fn ws_connect_from(
    addr: SocketAddr,
    ip: &str,
    cookie: &str,
    limit: Duration,
) -> Result<Ws, NotOpened> {
    let mut request = format!("ws://{addr}/socket").into_client_request().unwrap();
    request
        .headers_mut()
        .insert("cookie", format!("ar_visitor={cookie}").parse().unwrap());
    let stream = connect_from(addr, ip).await;
    match tokio::time::timeout(limit, tokio_tungstenite::client_async(request, stream)).await {
        Ok(Ok((ws, _))) => Ok(ws),
        Ok(Err(e)) => Err(NotOpened::Handshake(e)),
        Err(_) => Err(NotOpened::TimedOut),
    }
}

async fn echoes(ws: &mut Ws) -> bool {
    if ws.send(Message::text("ping")).await.is_err() {
        return false;
    }
    matches!(
        tokio::time::timeout(Duration::from_secs(2), ws.next()).await,
        Ok(Some(Ok(Message::Text(t)))) if t.as_str() == "ping"
    )
}

/// Upgraded tunnels count against `max_connections` (30 tried, at most 10 alive with a cap
/// of 10) and against `max_streams_per_client` (then 429); a visitor elsewhere is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_tunnels_count_against_the_caps() {
    let ws = ws_origin().await;
    let dir = tempfile::tempdir().unwrap();
    let ar = start(&config(
        &format!("http://{ws}"),
        dir.path(),
        "  max_connections: 10\n  max_streams: 2",
        "    rate: 1000\n    max_active: 100000",
    ))
    .await;
    // The attacker is an admitted visitor.
    let r = client_from("127.0.0.1")
        .get(format!("http://{}/", ar.addr))
        .send()
        .await
        .unwrap();
    let cookie = visitor_cookie(&r).unwrap();

    let mut alive = Vec::new();
    for _ in 0..30 {
        if let Ok(mut ws) = ws_connect(ar.addr, &cookie, Duration::from_millis(500)).await
            && echoes(&mut ws).await
        {
            alive.push(ws);
        }
    }
    assert!(
        alive.len() <= 10,
        "{} tunnels alive with max_connections 10",
        alive.len()
    );
    assert!(alive.len() >= 8, "only {} tunnels opened", alive.len());
    for ws in &mut alive {
        assert!(echoes(ws).await, "the tunnels that are open work");
    }
    // Closing them gives the connections back: a visitor elsewhere opens a working one.
    drop(alive);
    let r = client_from("127.0.0.2")
        .get(format!("http://{}/", ar.addr))
        .send()
        .await
        .unwrap();
    let other = visitor_cookie(&r).unwrap();
    let mut socket = poll_until(Duration::from_secs(5), "a tunnel opens again", async || {
        ws_connect_from(ar.addr, "127.0.0.2", &other, Duration::from_secs(2))
            .await
            .ok()
    })
    .await;
    assert!(echoes(&mut socket).await);
    drop(socket);
    ar.shutdown().await.unwrap();

    // max_streams_per_client: 3 tunnels, then 429.
    let ar = start(&config(
        &format!("http://{ws}"),
        dir.path(),
        "  max_streams_per_client: 3",
        "    rate: 1000\n    max_active: 100000",
    ))
    .await;
    let r = client_from("127.0.0.1")
        .get(format!("http://{}/", ar.addr))
        .send()
        .await
        .unwrap();
    let cookie = visitor_cookie(&r).unwrap();
    let mut alive = Vec::new();
    for _ in 0..3 {
        alive.push(
            ws_connect(ar.addr, &cookie, Duration::from_secs(2))
                .await
                .unwrap(),
        );
    }
    let refused = ws_connect(ar.addr, &cookie, Duration::from_secs(2))
        .await
        .unwrap_err();
    assert_eq!(refused.status(), Some(429), "{refused:?}");
    // Closing one gives its share back.
    let mut first = alive.remove(0);
    first.close(None).await.unwrap();
    drop(first);
    let until = Instant::now() + Duration::from_secs(3);
    let mut reopened = None;
    while reopened.is_none() && Instant::now() < until {
        reopened = ws_connect(ar.addr, &cookie, Duration::from_secs(2))
            .await
            .ok();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(reopened.is_some(), "a closed tunnel returns its share");
    ar.shutdown().await.unwrap();
}

/// A tunnel with no bytes either way for `idle_timeout` is closed, and its connection slot
/// returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_tunnel_is_closed_after_the_idle_timeout() {
    let ws = ws_origin().await;
    let dir = tempfile::tempdir().unwrap();
    let ar = start(&config(
        &format!("http://{ws}"),
        dir.path(),
        "  idle_timeout: 1s\n  max_connections: 2\n  max_streams: 1",
        "    rate: 1000\n    max_active: 100000",
    ))
    .await;
    let r = client()
        .get(format!("http://{}/", ar.addr))
        .send()
        .await
        .unwrap();
    let cookie = visitor_cookie(&r).unwrap();
    let mut socket = ws_connect(ar.addr, &cookie, Duration::from_secs(2))
        .await
        .unwrap();
    // Busy: kept open past the timeout while bytes flow.
    for _ in 0..4 {
        assert!(echoes(&mut socket).await);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Idle: closed.
    let started = Instant::now();
    let end = tokio::time::timeout(Duration::from_secs(4), socket.next()).await;
    assert!(
        matches!(
            end,
            Ok(None) | Ok(Some(Err(_))) | Ok(Some(Ok(Message::Close(_))))
        ),
        "an idle tunnel was still open after 4 s: {end:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    ar.shutdown().await.unwrap();
}
