//! `anteroom demo`: a small built-in origin so a newcomer can watch the queue work with one
//! command and nothing else installed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http::{HeaderValue, Request, Response, header};
use hyper::body::Incoming;

use crate::http::body::{Body, full};

/// The demo's admin token; fixed and public, so the demo is never for production.
pub const ADMIN_TOKEN: &str = "demo-admin-token";
/// Where the demo's waiting room listens.
pub const LISTEN: &str = "127.0.0.1:8080";
/// One visitor every two seconds, at most three on the site.
pub const RATE: f64 = 0.5;
/// Visitors on the demo origin at once.
pub const MAX_ACTIVE: u64 = 3;
/// Short, so slots free up while you watch.
pub const SESSION_TTL: Duration = Duration::from_secs(30);

/// The demo origin's only page: it tells the visitor they got in and how to queue again.
pub async fn origin_page(req: Request<Incoming>, served: Arc<AtomicU64>) -> Response<Body> {
    let n = served.fetch_add(1, Ordering::Relaxed) + 1;
    let html = format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>You're in — anteroom demo</title>
<style>body{{font:16px/1.5 system-ui,sans-serif;max-width:40rem;margin:3rem auto;padding:0 1rem}}code{{background:#eee;padding:.1rem .3rem}}</style>
</head><body>
<h1>You're in.</h1>
<p>This page is the demo's origin: the site anteroom protects. You were let through because the
room admits one visitor every two seconds with at most three on the site at once.</p>
<p>You asked for <code>{path}</code>. This origin has served {n} requests.</p>
<p>To get in line behind yourself, open this address in a private window or another browser:
each one is a new visitor. Your slot frees up 30 seconds after your last request.</p>
<p>Queue from a terminal: <code>curl -si -H 'Accept: application/json' http://localhost:8080/</code></p>
</body></html>"#,
        path = html_escape(req.uri().path()),
    );
    let mut response = Response::new(full(html));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    response
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Serves the demo origin on `listener` for as long as the process runs.
pub async fn serve_origin(listener: tokio::net::TcpListener) {
    let served = Arc::new(AtomicU64::new(0));
    let handler = move |req, _peer| origin_page(req, served.clone());
    let limits = crate::server::ServerLimits {
        header_read_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(60),
        max_connections: 1_000,
        shutdown_grace: Duration::from_secs(1),
        ..Default::default()
    };
    if let Err(e) = crate::server::serve(listener, limits, handler, std::future::pending()).await {
        tracing::error!(error = %e, "demo origin stopped");
    }
}

/// The demo's configuration: one catch-all room in front of the demo origin, parsed and
/// validated exactly as a file would be.
pub fn config(
    origin: SocketAddr,
    data_dir: &std::path::Path,
) -> Result<crate::config::Config, crate::config::ConfigError> {
    let yaml = format!(
        r#"listen: "{LISTEN}"
admit_interval: 250ms
cookie_secret: "{secret}"
admin_token: "{ADMIN_TOKEN}"
data_dir: "{data_dir}"
rooms:
  main:
    origin: "http://{origin}"
    rate: {RATE}
    max_active: {MAX_ACTIVE}
    session_ttl: {ttl}s
    title: "You're in line for the anteroom demo"
    message: "This room lets one visitor in every two seconds, at most three at once."
"#,
        secret = crate::config::Secret::generate_hex(32).as_str(),
        data_dir = data_dir.display(),
        ttl = SESSION_TTL.as_secs(),
    );
    crate::config::from_yaml_str(&yaml, "demo")
}

/// What `anteroom demo` prints once it is listening.
pub fn banner(listen: SocketAddr) -> String {
    format!(
        "anteroom demo is running.\n\n  \
         Open      http://localhost:{port}/\n  \
         Control   http://localhost:{port}/__anteroom/admin/   (token: {ADMIN_TOKEN})\n\n\
         The room admits one visitor every 2 s, at most 3 on the site at once.\n\
         Open more private windows (or run the curl below a few times) to get in line\n\
         behind yourself and watch the position count down:\n\n  \
         curl -si -H 'Accept: application/json' http://localhost:{port}/\n\n\
         Press Ctrl-C to stop.\n",
        port = listen.port()
    )
}
