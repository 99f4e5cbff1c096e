//! The harness's own HTTP/1.1 load client (hyper, one keep-alive connection per worker,
//! latencies into an HDR histogram), the SSE holder, and the admin API calls.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::infra::ADMIN_TOKEN;

pub fn histogram() -> Histogram<u64> {
    // Microseconds, 1 µs to 60 s, three significant figures.
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds")
}

/// A TCP connection to `addr`, from `source` when given (127.0.0.x source addresses each
/// have their own ephemeral-port range).
pub async fn tcp(addr: SocketAddr, source: Option<IpAddr>) -> anyhow::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    if let Some(ip) = source {
        socket.bind(SocketAddr::new(ip, 0))?;
    }
    let stream = tokio::time::timeout(Duration::from_secs(10), socket.connect(addr))
        .await
        .context("connect timed out")??;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// One keep-alive HTTP/1.1 connection.
pub struct Conn {
    sender: SendRequest<Full<Bytes>>,
    host: String,
}

pub struct Reply {
    pub status: StatusCode,
    pub set_cookie: Option<String>,
    pub body: Bytes,
}

impl Conn {
    pub async fn connect(addr: SocketAddr) -> anyhow::Result<Conn> {
        let stream = tcp(addr, None).await?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Conn {
            sender,
            host: addr.to_string(),
        })
    }

    pub async fn send(
        &mut self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<String>,
    ) -> anyhow::Result<Reply> {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", &self.host)
            .header("user-agent", "anteroom-loadtest");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(Full::new(body.map(Bytes::from).unwrap_or_default()))?;
        self.sender.ready().await?;
        let response = tokio::time::timeout(Duration::from_secs(30), async {
            let response = self.sender.send_request(req).await?;
            let status = response.status();
            let set_cookie = response
                .headers()
                .get("set-cookie")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.split(';').next())
                .map(str::to_owned);
            let body = response.into_body().collect().await?.to_bytes();
            anyhow::Ok(Reply {
                status,
                set_cookie,
                body,
            })
        })
        .await
        .context("request timed out (30 s)")??;
        Ok(response)
    }

    pub async fn get(&mut self, path: &str, headers: &[(&str, &str)]) -> anyhow::Result<Reply> {
        self.send(Method::GET, path, headers, None).await
    }
}

/// What a load run measured.
pub struct Load {
    pub ok: u64,
    pub errors: u64,
    pub elapsed: Duration,
    pub hist: Histogram<u64>,
    /// `ar_visitor=…` of every response that set one, when asked for.
    pub cookies: Vec<String>,
}

impl Load {
    pub fn rate(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64()
    }
    pub fn p50_ms(&self) -> f64 {
        self.hist.value_at_quantile(0.50) as f64 / 1000.0
    }
    pub fn p99_ms(&self) -> f64 {
        self.hist.value_at_quantile(0.99) as f64 / 1000.0
    }
}

/// `total` GETs of `path` from `conns` keep-alive connections, each connection sending its
/// next request when the last one is answered (closed loop). Bounded by `limit` in time.
/// Every request carries `cookie` if given; without one each request is a new visitor.
pub async fn load(
    addr: SocketAddr,
    conns: usize,
    total: u64,
    limit: Duration,
    cookie: Option<String>,
    collect_cookies: bool,
) -> anyhow::Result<Load> {
    let headers = cookie.map(|v| ("cookie", v)).into_iter().collect();
    load_with(addr, conns, total, limit, headers, collect_cookies).await
}

/// [`load`] with `headers` on every request (a cookie, `Accept`).
pub async fn load_with(
    addr: SocketAddr,
    conns: usize,
    total: u64,
    limit: Duration,
    headers: Vec<(&'static str, String)>,
    collect_cookies: bool,
) -> anyhow::Result<Load> {
    let headers = Arc::new(headers);
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + limit;
    let mut tasks = Vec::with_capacity(conns);
    for _ in 0..conns {
        let next = next.clone();
        let headers = headers.clone();
        tasks.push(tokio::spawn(async move {
            let mut hist = histogram();
            let (mut ok, mut errors) = (0u64, 0u64);
            let mut cookies = Vec::new();
            let mut conn: Option<Conn> = None;
            while Instant::now() < deadline && next.fetch_add(1, Ordering::Relaxed) < total {
                if conn.is_none() {
                    match Conn::connect(addr).await {
                        Ok(c) => conn = Some(c),
                        Err(_) => {
                            errors += 1;
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    }
                }
                let c = conn.as_mut().expect("connected above");
                let headers: Vec<(&str, &str)> =
                    headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
                let t = Instant::now();
                match c.get("/", &headers).await {
                    Ok(reply) if reply.status.is_success() => {
                        hist.saturating_record(t.elapsed().as_micros() as u64);
                        ok += 1;
                        if collect_cookies && let Some(v) = reply.set_cookie {
                            cookies.push(v);
                        }
                    }
                    Ok(_) => errors += 1,
                    Err(_) => {
                        errors += 1;
                        conn = None;
                    }
                }
            }
            (ok, errors, hist, cookies)
        }));
    }
    let mut result = Load {
        ok: 0,
        errors: 0,
        elapsed: Duration::ZERO,
        hist: histogram(),
        cookies: Vec::new(),
    };
    for task in tasks {
        let (ok, errors, hist, cookies) = task.await?;
        result.ok += ok;
        result.errors += errors;
        result.hist.add(hist).expect("same bounds");
        result.cookies.extend(cookies);
    }
    result.elapsed = started.elapsed();
    Ok(result)
}

/// Opens one SSE stream with `cookie` from `source` and waits for its preamble. Returns the
/// connection, still open.
pub async fn open_stream(
    addr: SocketAddr,
    source: IpAddr,
    cookie: &str,
) -> anyhow::Result<TcpStream> {
    let mut stream = tcp(addr, Some(source)).await?;
    let request = format!(
        "GET /__anteroom/events HTTP/1.1\r\nhost: {addr}\r\naccept: text/event-stream\r\n\
         cookie: {cookie}\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut seen = Vec::with_capacity(512);
    let mut buf = [0u8; 512];
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                bail!("stream closed before its preamble");
            }
            seen.extend_from_slice(&buf[..n]);
            if seen.windows(10).any(|w| w == b": anteroom") {
                if !seen.starts_with(b"HTTP/1.1 200") {
                    bail!(
                        "events answered {}",
                        String::from_utf8_lossy(&seen[..seen.len().min(40)])
                    );
                }
                return Ok(());
            }
            if seen.len() > 16 * 1024 {
                bail!("no preamble in 16 KiB");
            }
        }
    })
    .await
    .context("stream preamble timed out")??;
    Ok(stream)
}

/// Admin API calls against room `main`.
/// A fresh connection per call: anteroom closes keep-alive connections idle for longer than
/// its header-read timeout, and the harness may sit idle through a long fill.
pub struct Admin {
    addr: SocketAddr,
}

impl Admin {
    pub async fn connect(addr: SocketAddr) -> anyhow::Result<Admin> {
        Ok(Admin { addr })
    }

    async fn call(
        &mut self,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> anyhow::Result<serde_json::Value> {
        let auth = format!("Bearer {ADMIN_TOKEN}");
        let mut conn = Conn::connect(self.addr).await?;
        let reply = conn
            .send(
                method,
                &format!("/__anteroom/admin/api/rooms/main/{path}"),
                &[
                    ("authorization", &auth),
                    ("content-type", "application/json"),
                ],
                body,
            )
            .await?;
        if !reply.status.is_success() {
            bail!(
                "admin {path}: {} {}",
                reply.status,
                String::from_utf8_lossy(&reply.body)
            );
        }
        Ok(serde_json::from_slice(&reply.body)?)
    }

    /// Any admin path (`/__anteroom/admin/api/bans`, `/metrics`): status and body, not
    /// checked. `conn` is reused when given (keep-alive), else a fresh connection is made.
    pub async fn raw(
        &self,
        conn: &mut Option<Conn>,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> anyhow::Result<(StatusCode, Bytes)> {
        let auth = format!("Bearer {ADMIN_TOKEN}");
        if conn.is_none() {
            *conn = Some(Conn::connect(self.addr).await?);
        }
        let c = conn.as_mut().expect("connected above");
        let reply = c
            .send(
                method,
                path,
                &[
                    ("authorization", &auth),
                    ("content-type", "application/json"),
                ],
                body,
            )
            .await;
        match reply {
            Ok(r) => Ok((r.status, r.body)),
            Err(e) => {
                *conn = None;
                Err(e)
            }
        }
    }

    /// One sample of a Prometheus metric (the sum of its series whose labels contain
    /// `labels`), read from the admin API's metrics with the admin token.
    pub async fn metric(&self, name: &str, labels: &str) -> anyhow::Result<f64> {
        let (status, body) = self
            .raw(&mut None, Method::GET, anteroom::admin::METRICS_PATH, None)
            .await?;
        if !status.is_success() {
            bail!("/metrics: {status}");
        }
        let text = String::from_utf8_lossy(&body);
        let mut sum = 0.0;
        let mut seen = false;
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let bare = series.split('{').next().unwrap_or(series);
            if bare == name && series.contains(labels) {
                sum += value.parse::<f64>().unwrap_or(0.0);
                seen = true;
            }
        }
        if !seen {
            let near: Vec<&str> = text
                .lines()
                .filter(|l| l.contains(name.trim_end_matches("_total")))
                .take(3)
                .collect();
            bail!("no {name}{{{labels}}} in /metrics (near: {near:?})");
        }
        Ok(sum)
    }

    /// `PUT …/rooms/main/config` with `body` (`{"rate": 5}`): the settings after the change.
    pub async fn config(&mut self, body: serde_json::Value) -> anyhow::Result<serde_json::Value> {
        self.call(Method::PUT, "config", Some(body.to_string()))
            .await
    }

    /// `GET …/rooms/main/stats` as it is (the one-second statistics cache).
    pub async fn stats_json(&mut self) -> anyhow::Result<serde_json::Value> {
        self.call(Method::GET, "stats", None).await
    }

    pub async fn pause(&mut self) -> anyhow::Result<()> {
        self.call(Method::POST, "pause", None).await.map(drop)
    }

    pub async fn resume(&mut self) -> anyhow::Result<()> {
        self.call(Method::POST, "resume", None).await.map(drop)
    }

    /// The room's counters as read by the store at least 0.3 s after `since` (the stats API
    /// serves a one-second cache; this waits for a fresh enough read).
    pub async fn stats_after(&mut self, since: Instant) -> anyhow::Result<Stats> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let v = self.call(Method::GET, "stats", None).await?;
            let age = v["stats_age_secs"].as_f64().unwrap_or(f64::MAX);
            if v["stats_available"].as_bool() == Some(true)
                && since.elapsed().as_secs_f64() - age > 0.3
            {
                return Ok(Stats {
                    waiting: v["waiting"].as_u64().context("waiting")?,
                    total_admitted: v["total_admitted"].as_u64().context("total_admitted")?,
                    total_abandoned: v["total_abandoned"].as_u64().unwrap_or(0),
                });
            }
            if Instant::now() > deadline {
                bail!("no fresh stats within 10 s: {v}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Stats {
    pub waiting: u64,
    pub total_admitted: u64,
    pub total_abandoned: u64,
}
