//! Forwarding to the origin (SPEC §6): pooled client, header rewriting, timeouts, upgrades.
//!
//! One [`OriginClient`] (per serving worker; cheap to clone) forwards a visitor's request
//! to one configured [`Origin`] over HTTP/1.1 connections from its own pool
//! (`pool.rs`: hyper's `conn::http1` over `HttpConnector`, wrapped by `hyper-rustls` for
//! `https://` origins), each driven by the request and then the response body that uses
//! it rather than by a task of its own:
//!
//! - the target is the origin's scheme and authority, the origin's path prefix, then the
//!   request's path and query; the request's own authority or absolute-form target is never
//!   used for routing, so **only the configured origin is ever contacted**;
//! - the request goes out as HTTP/1.1 whatever the visitor spoke (HTTP/2 cookie fields are
//!   joined as RFC 9113 §8.2.3 asks);
//! - hop-by-hop headers ([`HOP_BY_HOP`] and whatever `Connection` names) are dropped both
//!   ways; `X-Forwarded-For` is set to exactly the caller's (already trust-checked) client
//!   ip, `X-Forwarded-Proto` to the visitor's scheme, `X-Forwarded-Host` to the request's
//!   one checked host; a client-supplied `Forwarded` header and every `X-Anteroom-*` are
//!   dropped, and from a peer that is not a trusted proxy `X-Real-IP` and the other
//!   `X-Forwarded-*` too; `X-Request-Id` is the id the gate chose;
//!   `Host` is the origin's authority (or, with `preserve_host`, the checked host); over TLS
//!   the SNI name and the name the certificate must carry are the origin's host, whatever
//!   `Host` says (trust: see [`crate::tls`]);
//! - the path has its dot segments resolved ([`resolve_dot_segments`]) before the origin's
//!   prefix is joined, so it never climbs out of the prefix;
//! - bodies stream both ways without buffering;
//! - a WebSocket upgrade is passed through: on a 101 from the origin both upgraded
//!   connections are joined byte for byte in a spawned task (no frame decoding).
//!
//! Timeouts ([`ProxyTimeouts`]): connecting, waiting for response headers (counted from the
//! last byte of the request body sent, so slow uploads are not mistaken for a slow origin),
//! and an idle timeout that cuts a response body which stalls and retires pooled
//! connections. Nothing here can hang forever.

use std::error::Error as StdError;
use std::fmt;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use tokio::time::{Instant, Sleep};

use crate::http::body::{Body, BoxError, Watch, Watched, empty};

mod pool;

/// Headers that describe one connection, not the message; never forwarded either way.
pub const HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

use crate::identity::X_FORWARDED_FOR;
pub(crate) const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const FORWARDED: HeaderName = HeaderName::from_static("forwarded");
const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");
/// The request id header, forwarded to the origin and logged (SPEC §6).
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Removes what a visitor may not tell the origin (SPEC §6): `Forwarded` always (nobody
/// vouches for its parts), every `X-Anteroom-*` header always (the origin may trust them as
/// ours), and from a peer that is not a trusted proxy `X-Real-IP` and every
/// `X-Forwarded-*` (the ones we set are set again afterwards). Allocates only when one is
/// present.
fn scrub_forgeable(headers: &mut HeaderMap, trusted_peer: bool) {
    headers.remove(FORWARDED);
    if !trusted_peer {
        headers.remove(X_REAL_IP);
    }
    let doomed: Vec<HeaderName> = headers
        .keys()
        .filter(|name| {
            let name = name.as_str();
            name.starts_with("x-anteroom-") || (!trusted_peer && name.starts_with("x-forwarded-"))
        })
        .cloned()
        .collect();
    for name in doomed {
        headers.remove(name);
    }
}

/// Timeouts toward the origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyTimeouts {
    /// Establishing the TCP connection.
    pub connect: Duration,
    /// Waiting for the response headers once the request (body included) has been sent;
    /// while the request body is still flowing, the clock restarts with every chunk.
    pub response: Duration,
    /// A response body that delivers nothing for this long is cut; pooled keep-alive
    /// connections idle for this long are closed; an upgraded (WebSocket) tunnel that
    /// carries no byte either way for this long is closed.
    pub idle: Duration,
    /// The visitor's request body must have arrived in full within this long of the
    /// request head (a body dribbled a byte at a time is cut with a 408).
    pub body: Duration,
}

impl Default for ProxyTimeouts {
    fn default() -> Self {
        ProxyTimeouts {
            connect: Duration::from_secs(5),
            response: Duration::from_secs(60),
            idle: Duration::from_secs(90),
            body: Duration::from_secs(60),
        }
    }
}

/// Why a request could not be forwarded; [`ProxyError::status`] maps it to the status the
/// visitor gets.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The origin could not be reached (refused, unreachable, DNS).
    #[error("origin unreachable: {0}")]
    Connect(#[source] BoxError),
    /// The origin did not connect, answer or keep sending in time.
    #[error("origin timed out")]
    Timeout,
    /// The origin broke the exchange (reset, malformed response, unexpected upgrade).
    #[error("origin failed: {0}")]
    Upstream(#[source] BoxError),
    /// The visitor's request cannot be forwarded (CONNECT, a target with no path, ...).
    #[error("request cannot be forwarded: {0}")]
    BadRequest(String),
    /// The configured origin URI is not usable (checked when the config is loaded).
    #[error("invalid origin: {0}")]
    InvalidOrigin(String),
    /// The visitor's request body did not arrive within `body_timeout`.
    #[error("request body not received in time")]
    BodyTimeout,
}

impl ProxyError {
    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::Connect(_) | ProxyError::Upstream(_) => StatusCode::BAD_GATEWAY,
            ProxyError::Timeout => StatusCode::GATEWAY_TIMEOUT,
            ProxyError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ProxyError::InvalidOrigin(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ProxyError::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
        }
    }
}

/// A configured origin: `http://authority[/prefix]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    scheme: Scheme,
    authority: Authority,
    /// Empty, or starts with `/` and has no trailing `/`.
    prefix: String,
    /// `authority` as the `Host` header sent (made once, not per request).
    host_header: HeaderValue,
    /// `scheme://authority/`: where connections to the origin go.
    base: Uri,
}

impl Origin {
    /// Parses an origin from an `http://` or `https://` URI with an authority and an
    /// optional path prefix (no query).
    pub fn new(uri: &Uri) -> Result<Origin, ProxyError> {
        let scheme = match uri.scheme() {
            Some(s) if *s == Scheme::HTTP || *s == Scheme::HTTPS => s.clone(),
            Some(s) => {
                return Err(ProxyError::InvalidOrigin(format!(
                    "{uri}: scheme {s} is not supported (only http:// and https://)"
                )));
            }
            None => {
                return Err(ProxyError::InvalidOrigin(format!(
                    "{uri}: needs a scheme (http:// or https://)"
                )));
            }
        };
        let authority = uri
            .authority()
            .ok_or_else(|| ProxyError::InvalidOrigin(format!("{uri}: needs a host")))?
            .clone();
        if authority.as_str().contains('@') {
            return Err(ProxyError::InvalidOrigin(format!(
                "{uri}: credentials in the origin URI are not supported"
            )));
        }
        if uri.query().is_some() {
            return Err(ProxyError::InvalidOrigin(format!(
                "{uri}: an origin cannot have a query"
            )));
        }
        let prefix = uri.path().trim_end_matches('/').to_owned();
        let host_header = HeaderValue::from_str(authority.as_str())
            .map_err(|e| ProxyError::InvalidOrigin(format!("{uri}: {e}")))?;
        let base = Uri::builder()
            .scheme(scheme.clone())
            .authority(authority.clone())
            .path_and_query("/")
            .build()
            .map_err(|e| ProxyError::InvalidOrigin(format!("{uri}: {e}")))?;
        Ok(Origin {
            scheme,
            authority,
            prefix,
            host_header,
            base,
        })
    }

    /// The origin's `host[:port]`, used as `Host` unless `preserve_host`.
    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// The path prefix every forwarded path is put under (`""` for none).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The URI a request for `path_and_query` is sent to on this origin.
    pub fn target(&self, path_and_query: Option<&PathAndQuery>) -> Result<Uri, ProxyError> {
        let path = self.target_path(path_and_query)?;
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(path)
            .build()
            .map_err(|e| ProxyError::BadRequest(format!("request target: {e}")))
    }

    /// The origin-form target (prefix, path, query) a request for `path_and_query` is sent
    /// with on this origin.
    fn target_path(
        &self,
        path_and_query: Option<&PathAndQuery>,
    ) -> Result<PathAndQuery, ProxyError> {
        let pq = path_and_query.map(PathAndQuery::as_str).unwrap_or("/");
        if !pq.starts_with('/') {
            return Err(ProxyError::BadRequest(format!(
                "request target {pq:?} is not a path"
            )));
        }
        // The gate resolves dot segments first; this is the last line of defence so that a
        // path never climbs out of the prefix (SPEC §6).
        let path = path_and_query.map_or("/", PathAndQuery::path);
        if !matches!(resolve_dot_segments(path), Ok(None)) {
            return Err(ProxyError::BadRequest(format!(
                "request path {path:?} has unresolved dot segments"
            )));
        }
        let joined = match (self.prefix.is_empty(), path_and_query) {
            (true, Some(pq)) => return Ok(pq.clone()),
            (true, None) => return Ok(PathAndQuery::from_static("/")),
            (false, _) => format!("{}{}", self.prefix, pq),
        };
        PathAndQuery::try_from(joined)
            .map_err(|e| ProxyError::BadRequest(format!("request target: {e}")))
    }
}

/// Why a request path was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    /// A segment hides a separator or a dot segment behind percent-encoding
    /// (`..%2f`, `%5c..`), which origins decode differently.
    EncodedSeparator,
    /// Not an origin-form path (`*`).
    NotAbsolute,
}

/// Resolves dot segments per RFC 3986 §5.2.4 before the origin's prefix is joined, so a
/// path can never climb out of it (SPEC §6). `.` and `..` count also when percent-encoded
/// (`%2e`), a backslash is a separator (several servers treat it so), and `..` at the top
/// stays at the top. A segment that still holds an encoded `/` or `\` next to dots is
/// refused. Returns `None` when nothing needed changing, so the common path allocates
/// nothing.
pub fn resolve_dot_segments(path: &str) -> Result<Option<String>, PathError> {
    if !path.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    if !needs_resolution(path) {
        return Ok(None);
    }
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path[1..].split(['/', '\\']).collect();
    let last = segments.len() - 1;
    for (i, seg) in segments.iter().enumerate() {
        match dot_kind(seg) {
            Some(1) => {
                if i == last {
                    out.push("");
                }
            }
            Some(_) => {
                out.pop();
                if i == last {
                    out.push("");
                }
            }
            None => {
                if hides_separator(seg) {
                    return Err(PathError::EncodedSeparator);
                }
                out.push(seg);
            }
        }
    }
    let mut resolved = String::with_capacity(path.len());
    for seg in &out {
        resolved.push('/');
        resolved.push_str(seg);
    }
    if resolved.is_empty() {
        resolved.push('/');
    }
    Ok(Some(resolved))
}

/// Cheap pre-check: only a path with a dot-ish segment, a backslash or a `%2e`/`%2f`/`%5c`
/// escape needs the full walk.
fn needs_resolution(path: &str) -> bool {
    let b = path.as_bytes();
    if b.contains(&b'\\') {
        return true;
    }
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'.' if b[i - 1] == b'/' => return true,
            b'%' if i + 2 < b.len() => {
                let esc = [b[i + 1].to_ascii_lowercase(), b[i + 2].to_ascii_lowercase()];
                if matches!(&esc, b"2e" | b"2f" | b"5c") {
                    return true;
                }
            }
            _ => {}
        }
    }
    false
}

/// `Some(1)` for `.`, `Some(2)` for `..`, literal or percent-encoded; else `None`.
fn dot_kind(seg: &str) -> Option<u8> {
    let mut dots = 0u8;
    let b = seg.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'.' {
            i += 1;
        } else if b[i] == b'%' && b.len() >= i + 3 && b[i + 1] == b'2' && (b[i + 2] | 0x20) == b'e'
        {
            i += 3;
        } else {
            return None;
        }
        dots += 1;
        if dots > 2 {
            return None;
        }
    }
    (dots > 0).then_some(dots)
}

/// Whether a segment hides a dot segment behind an encoded `/` or `\` (`..%2f`, `%5c..`):
/// an origin that decodes it once would climb out of the prefix. An encoded slash between
/// ordinary names (`a%2Fb`) is left alone.
fn hides_separator(seg: &str) -> bool {
    let lower = seg.to_ascii_lowercase();
    if !lower.contains("%2f") && !lower.contains("%5c") {
        return false;
    }
    lower
        .replace("%5c", "%2f")
        .split("%2f")
        .any(|part| dot_kind(part).is_some())
}

/// Rewrites `req`'s path with its dot segments resolved (see [`resolve_dot_segments`]),
/// keeping the query; a no-op (and no allocation) for an ordinary path. Paths that are not
/// origin-form (`OPTIONS *`) are left alone for the caller to judge.
pub fn resolve_request_path<B>(req: &mut Request<B>) -> Result<(), PathError> {
    let path = req.uri().path();
    if !path.starts_with('/') {
        return Ok(());
    }
    let Some(resolved) = resolve_dot_segments(path)? else {
        return Ok(());
    };
    let pq = match req.uri().query() {
        Some(q) => format!("{resolved}?{q}"),
        None => resolved,
    };
    let mut parts = req.uri().clone().into_parts();
    parts.path_and_query = Some(PathAndQuery::try_from(pq).map_err(|_| PathError::NotAbsolute)?);
    *req.uri_mut() = Uri::from_parts(parts).map_err(|_| PathError::NotAbsolute)?;
    Ok(())
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}{}", self.scheme, self.authority, self.prefix)
    }
}

/// What the caller knows about the visitor that the origin should hear.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardContext {
    /// The visitor's address, already resolved through trusted proxies by the caller.
    pub client_ip: IpAddr,
    /// `"http"` or `"https"` as seen by the visitor.
    pub proto: &'static str,
    /// The request's one checked host (`name[:port]`), sent as `X-Forwarded-Host` and, with
    /// `preserve_host`, as `Host`; never the visitor's raw header.
    pub host: Option<HeaderValue>,
    /// Send the visitor's Host to the origin instead of the origin's authority.
    pub preserve_host: bool,
    /// Whether the direct peer is a trusted proxy: only then do its `X-Real-IP` and other
    /// `X-Forwarded-*` headers reach the origin.
    pub trusted_peer: bool,
    /// The request's id, sent as `X-Request-Id` (`None`: the header is dropped).
    pub request_id: Option<HeaderValue>,
    /// The signed `X-Anteroom-Admission` token (SPEC §14) of an admitted visitor, added
    /// after every `X-Anteroom-*` header the visitor sent is removed (`None`: no header).
    pub admission: Option<HeaderValue>,
}

/// A pooled HTTP/1.1 client toward origins; clone-cheap (clones share the pool).
#[derive(Clone)]
pub struct OriginClient {
    pool: pool::Pool,
    timeouts: ProxyTimeouts,
}

impl fmt::Debug for OriginClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OriginClient")
            .field("timeouts", &self.timeouts)
            .finish_non_exhaustive()
    }
}

impl OriginClient {
    /// A client for `http://` origins only (an `https://` one would fail its certificate
    /// check: no CA is trusted).
    pub fn new(timeouts: ProxyTimeouts) -> Self {
        Self::with_tls(timeouts, crate::tls::no_trust())
    }

    /// A client for `http://` and `https://` origins, trusting what `tls` says
    /// ([`crate::tls::origin_tls_config`]).
    pub fn with_tls(timeouts: ProxyTimeouts, tls: rustls::ClientConfig) -> Self {
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(timeouts.connect));
        http.set_nodelay(true);
        // The TLS layer below needs `https://` URIs passed through to it.
        http.enforce_http(false);
        // SNI and certificate name: the origin's host from the URI, never `Host`.
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        // TCP connect and TLS handshake together within the connect timeout, so an origin
        // that accepts but never completes a handshake is a timeout, not a hang.
        let connector = crate::tls::ConnectTimeout::new(https, timeouts.connect);
        OriginClient {
            pool: pool::Pool::new(connector, timeouts.idle),
            timeouts,
        }
    }

    pub fn timeouts(&self) -> ProxyTimeouts {
        self.timeouts
    }

    /// Forwards `req` to `origin` and returns the origin's response with a streaming body.
    pub async fn forward(
        &self,
        origin: &Origin,
        req: Request<Incoming>,
        ctx: &ForwardContext,
    ) -> Result<Response<Body>, ProxyError> {
        self.forward_holding(origin, req, ctx, None).await
    }

    /// [`OriginClient::forward`], keeping `tunnel_guard` alive for as long as an upgraded
    /// connection lasts (a stream's slot under `stream_cap`, SPEC §10).
    pub async fn forward_holding(
        &self,
        origin: &Origin,
        mut req: Request<Incoming>,
        ctx: &ForwardContext,
        tunnel_guard: Option<TunnelHold>,
    ) -> Result<Response<Body>, ProxyError> {
        if req.method() == Method::CONNECT {
            return Err(ProxyError::BadRequest("CONNECT is not proxied".into()));
        }
        let upgrade = is_upgrade(&req);
        // Must be taken before the request is taken apart.
        let visitor_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
        // What the tunnel keeps counted while it lives: the connection's slot (so it stays
        // under `max_connections` and the per-peer cap) and the client's stream ticket.
        // And whatever the caller asked to hold (a stream's slot under `stream_cap`).
        let ended = tunnel_guard.as_ref().map(|hold| hold.ended.clone());
        let tunnel_guards = (
            req.extensions_mut()
                .remove::<Arc<crate::server::ConnectionSlot>>(),
            req.extensions_mut()
                .remove::<Arc<crate::live::StreamTicket>>(),
            tunnel_guard,
        );

        let (mut parts, body) = req.into_parts();
        let upgrade_protocol = parts.headers.get(header::UPGRADE).cloned();
        let visitor_host = ctx.host.clone();
        let from_h2 = parts.version == Version::HTTP_2;

        // Origin form: the connection already goes to the origin's authority.
        parts.uri = Uri::from(origin.target_path(parts.uri.path_and_query())?);
        parts.version = Version::HTTP_11;

        let headers = &mut parts.headers;
        strip_hop_by_hop(headers);
        if from_h2 {
            join_cookies(headers);
        }
        // hyper answers `Expect: 100-continue` itself when the body is first read.
        headers.remove(header::EXPECT);
        scrub_forgeable(headers, ctx.trusted_peer);
        // Ours, set only after the scrub above removed any the visitor sent.
        if let Some(token) = &ctx.admission {
            headers.insert(
                crate::fairness::admission_token::ADMISSION_HEADER,
                token.clone(),
            );
        }
        match &ctx.request_id {
            Some(id) => headers.insert(X_REQUEST_ID, id.clone()),
            None => headers.remove(X_REQUEST_ID),
        };
        headers.insert(X_FORWARDED_FOR, ip_header(ctx.client_ip));
        headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(ctx.proto));
        match &visitor_host {
            Some(host) => headers.insert(X_FORWARDED_HOST, host.clone()),
            None => headers.remove(X_FORWARDED_HOST),
        };
        let host = match (&visitor_host, ctx.preserve_host) {
            (Some(host), true) => host.clone(),
            _ => origin.host_header.clone(),
        };
        headers.insert(header::HOST, host);
        if let (true, Some(protocol)) = (upgrade, upgrade_protocol) {
            headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
            headers.insert(header::UPGRADE, protocol);
        }

        let activity = Activity::new(self.timeouts.body);
        let progress = activity.progress.clone();
        let body = Watched::new(body, activity);
        let sent = self
            .send(
                origin,
                Request::from_parts(parts, body),
                upgrade,
                &progress.last,
            )
            .await;
        if progress.late.load(Ordering::Acquire) {
            return Err(ProxyError::BodyTimeout);
        }
        let mut response = sent?;

        if response.status() == StatusCode::SWITCHING_PROTOCOLS {
            let Some(visitor_upgrade) = visitor_upgrade else {
                return Err(ProxyError::Upstream(
                    "origin switched protocols without being asked".into(),
                ));
            };
            let origin_upgrade = hyper::upgrade::on(&mut response);
            let protocol = response.headers().get(header::UPGRADE).cloned();
            tokio::spawn(tunnel(
                visitor_upgrade,
                origin_upgrade,
                self.timeouts.idle,
                ended,
                tunnel_guards,
            ));
            let (mut parts, _) = response.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            parts
                .headers
                .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
            if let Some(protocol) = protocol {
                parts.headers.insert(header::UPGRADE, protocol);
            }
            parts.version = Version::HTTP_11;
            return Ok(Response::from_parts(parts, empty()));
        }

        let (mut parts, body) = response.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        parts.version = Version::HTTP_11;
        let body = Watched::new(body, IdleTimeout::new(self.timeouts.idle)).boxed();
        Ok(Response::from_parts(parts, body))
    }

    /// Sends and waits for response headers, at most `response` after the last request
    /// body activity.
    async fn send(
        &self,
        origin: &Origin,
        req: Request<TrackedBody>,
        upgrade: bool,
        activity: &Mutex<Instant>,
    ) -> Result<Response<pool::OriginBody>, ProxyError> {
        let limit = self.timeouts.response;
        let mut pending = std::pin::pin!(self.pool.send(&origin.base, req, upgrade));
        loop {
            let deadline = *lock(activity) + limit;
            tokio::select! {
                result = &mut pending => return result,
                () = tokio::time::sleep_until(deadline) => {
                    if *lock(activity) + limit <= Instant::now() {
                        return Err(ProxyError::Timeout);
                    }
                }
            }
        }
    }
}

fn lock(m: &Mutex<Instant>) -> std::sync::MutexGuard<'_, Instant> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `error: cause: cause…`, for a log line that says what really went wrong.
fn with_causes(error: &(dyn StdError + 'static)) -> String {
    let mut text = error.to_string();
    let mut current = error.source();
    while let Some(e) = current {
        let cause = e.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
        current = e.source();
    }
    text
}

fn caused_by_timeout(error: &(dyn StdError + 'static)) -> bool {
    let mut current: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(e) = current {
        if let Some(io) = e.downcast_ref::<io::Error>()
            && io.kind() == io::ErrorKind::TimedOut
        {
            return true;
        }
        current = e.source();
    }
    false
}

fn ip_header(ip: IpAddr) -> HeaderValue {
    // Every request carries one; an IPv4 address is written without the formatting
    // machinery (2 % of an admitted request's instructions under callgrind).
    let value = match ip {
        IpAddr::V4(v4) => {
            let mut text = [0u8; 15];
            let mut len = 0;
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    text[len] = b'.';
                    len += 1;
                }
                if octet >= 100 {
                    text[len] = b'0' + octet / 100;
                    len += 1;
                }
                if octet >= 10 {
                    text[len] = b'0' + octet / 10 % 10;
                    len += 1;
                }
                text[len] = b'0' + octet % 10;
                len += 1;
            }
            crate::http::scratch::header_value(&text[..len])
        }
        IpAddr::V6(_) => crate::http::scratch::header_value(ip.to_string().as_bytes()),
    };
    value.expect("an ip address is a valid header value")
}

/// What the caller of [`OriginClient::forward_holding`] has an upgraded tunnel hold: a
/// guard kept alive as long as the tunnel, and a token that ends it.
pub struct TunnelHold {
    pub guard: Box<dyn std::any::Any + Send + Sync>,
    /// Cancelled when the tunnel must close (its session ended, its client was banned).
    pub ended: tokio_util::sync::CancellationToken,
}

/// Joins the bytes of two upgraded connections until either side closes, neither sends
/// a byte for `idle`, or `ended` is cancelled. `guards` (the connection slot, the stream
/// ticket, the caller's hold) are held until then.
async fn tunnel<G: Send>(
    visitor: hyper::upgrade::OnUpgrade,
    origin: hyper::upgrade::OnUpgrade,
    idle: Duration,
    ended: Option<tokio_util::sync::CancellationToken>,
    guards: G,
) {
    let _guards = guards;
    let (visitor, origin) = match tokio::try_join!(visitor, origin) {
        Ok(both) => both,
        Err(error) => {
            tracing::debug!(%error, "upgrade did not complete");
            return;
        }
    };
    let last = Arc::new(Mutex::new(Instant::now()));
    let mut visitor = Touching {
        io: TokioIo::new(visitor),
        last: last.clone(),
    };
    let mut origin = Touching {
        io: TokioIo::new(origin),
        last: last.clone(),
    };
    let copy = tokio::io::copy_bidirectional(&mut visitor, &mut origin);
    let watchdog = async {
        loop {
            let deadline = *lock(&last) + idle;
            tokio::time::sleep_until(deadline).await;
            if *lock(&last) + idle <= Instant::now() {
                return;
            }
        }
    };
    tokio::select! {
        result = copy => match result {
            Ok((up, down)) => tracing::debug!(up, down, "upgraded connection closed"),
            Err(error) => tracing::debug!(%error, "upgraded connection ended with an error"),
        },
        () = watchdog => tracing::debug!(?idle, "idle upgraded connection closed"),
        () = async {
            match &ended {
                Some(ended) => ended.cancelled().await,
                None => std::future::pending().await,
            }
        } => tracing::debug!("upgraded connection closed: its session ended"),
    }
}

/// An upgraded connection that stamps `last` whenever bytes move through it.
struct Touching<T> {
    io: T,
    last: Arc<Mutex<Instant>>,
}

impl<T: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Touching<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let result = Pin::new(&mut this.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            *lock(&this.last) = Instant::now();
        }
        result
    }
}

impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Touching<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.io).poll_write(cx, buf);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            *lock(&this.last) = Instant::now();
        }
        result
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// Removes hop-by-hop headers: [`HOP_BY_HOP`] and every header `Connection` names.
/// One pass over the names first finds which are there: most requests carry none, most
/// responses only `Connection: keep-alive`, and nine removals are nine hash lookups on
/// every request and every response.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let present = headers
        .keys()
        .filter_map(|name| HOP_BY_HOP.iter().position(|hop| hop == name))
        .fold(0u16, |mask, i| mask | 1 << i);
    if present == 0 {
        return;
    }
    // `Connection` first: its values are taken out whole, so the names it lists can be
    // removed as text (no header name is built for them).
    // Almost always one value (an origin's `keep-alive`): kept aside without a list.
    let (mut first, mut more) = (None, Vec::new());
    if let header::Entry::Occupied(entry) = headers.entry(header::CONNECTION) {
        for value in entry.remove_entry_mult().1 {
            match first {
                None => first = Some(value),
                Some(_) => more.push(value),
            }
        }
    }
    for value in first.iter().chain(&more) {
        let Ok(text) = value.to_str() else { continue };
        for token in text.split(',').map(str::trim) {
            if !token.is_empty() {
                headers.remove(token);
            }
        }
    }
    for (i, name) in HOP_BY_HOP.iter().enumerate() {
        if present & 1 << i != 0 {
            headers.remove(name);
        }
    }
}

/// HTTP/2 may split `Cookie` over several fields; HTTP/1.1 needs one, joined with `"; "`.
fn join_cookies(headers: &mut HeaderMap) {
    if headers.get_all(header::COOKIE).iter().count() < 2 {
        return;
    }
    let joined: Vec<u8> = headers
        .get_all(header::COOKIE)
        .iter()
        .map(HeaderValue::as_bytes)
        .collect::<Vec<_>>()
        .join(&b"; "[..]);
    if let Ok(value) = HeaderValue::from_bytes(&joined) {
        headers.insert(header::COOKIE, value);
    }
}

fn has_token(headers: &HeaderMap, name: HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// A WebSocket upgrade request (`Connection: upgrade` and `Upgrade: websocket`, HTTP/1.1).
pub fn is_upgrade<B>(req: &Request<B>) -> bool {
    req.version() == Version::HTTP_11
        && has_token(req.headers(), header::CONNECTION, "upgrade")
        && has_token(req.headers(), header::UPGRADE, "websocket")
}

/// A request for a server-sent event stream (`Accept: text/event-stream`).
pub fn is_event_stream<B>(req: &Request<B>) -> bool {
    req.headers()
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|range| {
            range
                .split(';')
                .next()
                .is_some_and(|m| m.trim().eq_ignore_ascii_case("text/event-stream"))
        })
}

/// The visitor's request body on its way to the origin: records when it last moved so the
/// response timeout counts from the end of the upload, not from its start.
type TrackedBody = Watched<Incoming, Activity>;

/// The request body's progress and its overall deadline (`body_timeout`).
struct Activity {
    progress: Arc<BodyProgress>,
    deadline: LazySleep,
}

/// What the body's watcher tells the request waiting on the origin (one allocation).
struct BodyProgress {
    /// When the body last moved.
    last: Mutex<Instant>,
    /// Set when the deadline cut the body, so the caller answers 408 rather than 502.
    late: AtomicBool,
}

impl Activity {
    /// A body starting now, cut `body_timeout` from now.
    fn new(body_timeout: Duration) -> Activity {
        let now = Instant::now();
        Activity {
            progress: Arc::new(BodyProgress {
                last: Mutex::new(now),
                late: AtomicBool::new(false),
            }),
            deadline: LazySleep::until(now + body_timeout),
        }
    }
}

impl Watch for Activity {
    fn polled(&mut self, ready: bool, cx: &mut Context<'_>) -> Option<BoxError> {
        if ready {
            *lock(&self.progress.last) = Instant::now();
            return None;
        }
        match self.deadline.poll(cx) {
            Poll::Ready(()) => {
                self.progress.late.store(true, Ordering::Release);
                Some(Box::new(ProxyError::BodyTimeout))
            }
            Poll::Pending => None,
        }
    }
}

/// A timer armed only when first polled: most bodies never wait, and a timer costs an
/// allocation and two visits to the timer wheel.
struct LazySleep {
    at: Instant,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl LazySleep {
    fn until(at: Instant) -> Self {
        LazySleep { at, sleep: None }
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let at = self.at;
        self.sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)))
            .as_mut()
            .poll(cx)
    }

    /// Moves the deadline (an armed timer is reset only when it goes off early).
    fn set(&mut self, at: Instant) {
        self.at = at;
    }

    /// Whether the deadline has passed; if the timer went off for an older one, it is
    /// armed again for the current one.
    fn poll_current(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            match self.poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(()) if self.at <= Instant::now() => return Poll::Ready(()),
                Poll::Ready(()) => {
                    let at = self.at;
                    if let Some(sleep) = self.sleep.as_mut() {
                        sleep.as_mut().reset(at);
                    }
                }
            }
        }
    }
}

/// For the origin's response body: fails it if it delivers nothing for `idle`.
struct IdleTimeout {
    idle: Duration,
    timer: LazySleep,
}

impl IdleTimeout {
    fn new(idle: Duration) -> Self {
        IdleTimeout {
            idle,
            timer: LazySleep::until(Instant::now() + idle),
        }
    }
}

impl Watch for IdleTimeout {
    fn polled(&mut self, ready: bool, cx: &mut Context<'_>) -> Option<BoxError> {
        if ready {
            // Not a timer reset per frame: the timer, if armed, notices the move when it
            // goes off.
            self.timer.set(Instant::now() + self.idle);
            return None;
        }
        match self.timer.poll_current(cx) {
            Poll::Ready(()) => Some(Box::new(ProxyError::Timeout)),
            Poll::Pending => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::body::full;
    use crate::server::{ServerLimits, serve};
    use bytes::Bytes;
    use futures_util::{SinkExt, StreamExt};
    use http_body_util::Full;
    use std::net::SocketAddr;
    use tokio::net::TcpListener;
    use tokio::sync::oneshot;
    use tokio_tungstenite::tungstenite::Message;

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
                        let kind = match error {
                            ProxyError::Connect(_) => "connect",
                            ProxyError::Timeout => "timeout",
                            ProxyError::Upstream(_) => "upstream",
                            ProxyError::BadRequest(_) => "bad-request",
                            ProxyError::InvalidOrigin(_) => "invalid-origin",
                            ProxyError::BodyTimeout => "body-timeout",
                        };
                        Response::builder()
                            .status(error.status())
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
    fn error_statuses() {
        assert_eq!(ProxyError::Connect("x".into()).status(), 502);
        assert_eq!(ProxyError::Upstream("x".into()).status(), 502);
        assert_eq!(ProxyError::Timeout.status(), 504);
        assert_eq!(ProxyError::BadRequest("x".into()).status(), 400);
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
        // Never climbs out: every result starts with '/' and has no dot segment.
        for p in ["/../../..", "/a/../../b", "/%2e%2e/%2e%2e/x", "/.\\..\\x"] {
            let r = path(p).unwrap();
            assert!(r.starts_with('/'));
            assert!(!r.split('/').any(|s| s == ".." || s == "."), "{p} -> {r}");
        }
    }
}
