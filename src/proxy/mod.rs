//! Forwarding to the origin: pooled client, header rewriting, timeouts, upgrades.
//!
//! One [`OriginClient`] (per serving worker; cheap to clone) forwards a visitor's request
//! to one configured [`Origin`] over HTTP/1.1 connections from its own pool, each driven
//! by the request and then the response body that uses it rather than by a task of its
//! own. [`OriginClient::forward_holding`], here, is the request's path through it:
//!
//! - the target is the origin's scheme and authority, the origin's path prefix, then the
//!   request's path and query (`origin.rs`); the request's own authority or absolute-form
//!   target is never used for routing, so **only the configured origin is ever contacted**;
//! - the path has its dot segments resolved ([`resolve_dot_segments`], `dot_segments.rs`)
//!   before the origin's prefix is joined, so it never climbs out of the prefix;
//! - the request goes out as HTTP/1.1 whatever the visitor spoke (HTTP/2 cookie fields are
//!   joined as RFC 9113 §8.2.3 asks);
//! - hop-by-hop headers ([`HOP_BY_HOP`] and whatever `Connection` names) are dropped both
//!   ways; `X-Forwarded-For` is set to exactly the caller's (already trust-checked) client
//!   ip, `X-Forwarded-Proto` to the visitor's scheme, `X-Forwarded-Host` to the request's
//!   one checked host; a client-supplied `Forwarded` header and every `X-Anteroom-*` are
//!   dropped, and from a peer that is not a trusted proxy `X-Real-IP` and the other
//!   `X-Forwarded-*` too; `X-Request-Id` is the id the gate chose (`headers.rs`);
//!   `Host` is the origin's authority (or, with `preserve_host`, the checked host); over TLS
//!   the SNI name and the name the certificate must carry are the origin's host, whatever
//!   `Host` says (trust: see [`crate::tls`]);
//! - bodies stream both ways without buffering;
//! - a WebSocket upgrade is passed through: on a 101 from the origin both upgraded
//!   connections are joined byte for byte in a spawned task (`tunnel.rs`, no frame
//!   decoding).
//!
//! Timeouts ([`ProxyTimeouts`], `timers.rs`): connecting, waiting for response headers
//! (counted from the last byte of the request body sent, so slow uploads are not mistaken
//! for a slow origin), and an idle timeout that cuts a response body which stalls and
//! retires pooled connections. Nothing here can hang forever.
//!
//! The files:
//!
//! | file | what it holds |
//! |---|---|
//! | `mod.rs` | [`OriginClient`], [`ForwardContext`]: the request's path to the origin |
//! | `origin.rs` | [`Origin`]: parsing a configured origin, joining a request's target to it |
//! | `dot_segments.rs` | [`resolve_dot_segments`], [`resolve_request_path`], [`PathError`] |
//! | `headers.rs` | hop-by-hop and forgeable headers, the forwarding headers, [`is_upgrade`], [`is_event_stream`] |
//! | `tunnel.rs` | an upgraded connection's byte-for-byte tunnel, [`TunnelHold`] |
//! | `timers.rs` | [`ProxyTimeouts`], the request body's progress and deadline, the response body's idle cut |
//! | `error.rs` | [`ProxyError`] and reading an error's causes |
//! | `pool.rs` | the origin connection pool, driven by the requests that use it |

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use std::net::IpAddr;
use tokio::time::Instant;

use crate::http::body::{Body, Watched, empty};
use crate::identity::X_FORWARDED_FOR;

mod dot_segments;
mod error;
mod headers;
mod origin;
mod pool;
mod timers;
mod tunnel;

pub use dot_segments::{PathError, resolve_dot_segments, resolve_request_path};
pub use error::ProxyError;
pub(crate) use headers::X_FORWARDED_PROTO;
pub use headers::{HOP_BY_HOP, X_REQUEST_ID, is_event_stream, is_upgrade, strip_hop_by_hop};
pub use origin::Origin;
pub use timers::ProxyTimeouts;
pub use tunnel::TunnelHold;

use headers::{X_FORWARDED_HOST, ip_header, join_cookies, scrub_forgeable};
use timers::{Activity, IdleTimeout, TrackedBody};
use tunnel::tunnel;

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
    /// The signed `X-Anteroom-Admission` token of an admitted visitor, added
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

    /// The timeouts this client applies.
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
    /// connection lasts (a stream's slot under `stream_cap`).
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
        // The exchange failed because the visitor's body did (hyper's "error from user's
        // body stream"): a 400, never counted as the origin's failure.
        let mut response = match sent {
            Err(_) if progress.broken.load(Ordering::Acquire) => {
                return Err(ProxyError::ClientBody);
            }
            sent => sent?,
        };

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

/// `m`'s value, whether or not a holder panicked.
fn lock(m: &Mutex<Instant>) -> std::sync::MutexGuard<'_, Instant> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests;
