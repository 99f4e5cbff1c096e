//! Connections kept and made room for, on the real binary's listener: behind a real nginx
//! its idle upstream connection lasts `idle_timeout`, and a listener filled with half-sent
//! requests still lets a visitor in (and says so in its metrics).

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// A real origin and an anteroom in front of it in passthrough (everybody straight
/// through), `top` added to the configuration's top level.
async fn passthrough(top: &str) -> (Origin, tempfile::TempDir, anteroom::run::Running) {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = config_with(&origin.url(), dir.path(), top, "    mode: passthrough\n");
    let ar = start(&config).await;
    (origin, dir, ar)
}

/// The public listener's open connections, read through the admin listener when there is
/// one (else the public one, whose request is then one of them).
async fn open_public_connections(ar: &anteroom::run::Running) -> f64 {
    let text = admin_metrics(&client(), ar.admin_addr.unwrap_or(ar.addr)).await;
    metric(&text, "anteroom_open_connections{listener=\"public\"}")
}

#[tokio::test]
async fn behind_nginx_an_idle_upstream_connection_lasts_idle_timeout() {
    // nginx keeps idle upstream connections for 50 s (docs/operations.md). Closed sooner,
    // the one it reuses races the close, and a POST (never retried) is the visitor's 502.
    let top = "trusted_proxies: [127.0.0.1/32]\nserver:\n  header_read_timeout: 1s\n  idle_timeout: 30s\n";
    let (_origin, _dir, ar) = passthrough(top).await;
    let nginx = Nginx::start(ar.addr).await;
    let front = format!("http://{}/", nginx.addr);
    let http = client();
    assert_eq!(http.get(&front).send().await.unwrap().status(), 200);
    // The condition under test is time passing: twice the header-read timeout, idle.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        open_public_connections(&ar).await,
        2.0,
        "nginx's idle upstream connection was closed (plus the metrics request's own)"
    );
    let posted = http.post(&front).body("order=1").send().await.unwrap();
    assert_eq!(posted.status(), 200);
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_listener_full_of_half_sent_requests_still_lets_a_visitor_in() {
    // Half-sent heads last `header_read_timeout` (10 s); a newcomer must not wait that long.
    let top = "admin_listen: \"127.0.0.1:0\"\nserver:\n  max_connections: 40\n";
    let (_origin, _dir, ar) = passthrough(top).await;
    let mut held = Vec::new();
    for _ in 0..40 {
        let mut stream = TcpStream::connect(ar.addr).await.unwrap();
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: shop.example\r\nX-Pad: aaaa")
            .await
            .unwrap();
        held.push(stream);
    }
    // Every slot taken (read on the admin listener, which has its own).
    let deadline = Instant::now() + Duration::from_secs(5);
    while open_public_connections(&ar).await < 40.0 {
        assert!(Instant::now() < deadline, "the listener never filled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let asked = Instant::now();
    let response = tokio::time::timeout(
        Duration::from_secs(5),
        client().get(format!("http://{}/", ar.addr)).send(),
    )
    .await
    .expect("a visitor waited 5 s for a full listener")
    .unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        asked.elapsed() < Duration::from_secs(4),
        "{:?}",
        asked.elapsed()
    );
    // The operator sees why: connections closed to make room, counted on the listener.
    let text = admin_metrics(&client(), ar.admin_addr.unwrap()).await;
    let made_room = "anteroom_connections_closed_total{listener=\"public\",reason=\"made_room\"}";
    assert!(metric(&text, made_room) >= 1.0, "{made_room} not counted");
    drop(held);
    ar.shutdown().await.unwrap();
}
