//! SPEC §10's traffic classes other than the page: bypass paths and CORS preflights
//! (straight through), assets (never the line, never the page), streams (admitted only,
//! `stream_cap`, sessions kept alive while open), `OPTIONS *`, and the origin in-flight
//! cap every admitted request to the origin goes through.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::task::Context;
use std::time::{Duration, SystemTime};

use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::identify::Identity;
use super::{App, Room};
use crate::admission::Decision;
use crate::http::body::{Body, BoxError, Watch, Watched, full};
use crate::http::pages::{STATUS_HEADER, VisitorStatus};
use crate::queue::{Phase, RoomPolicy, VisitorId, VisitorState};

/// `Retry-After` of an asset or stream refused to someone not on the site.
const NOT_ADMITTED_RETRY_SECS: u64 = 5;
/// `Retry-After` of a request refused by `stream_cap` or `max_inflight`.
const BUSY_RETRY_SECS: u64 = 2;

/// Anything dropped with a response body (or a tunnel): a slot held until then.
pub struct Hold<G>(pub G);

impl<G: Send + Sync + Unpin + 'static> Watch for Hold<G> {
    fn polled(&mut self, _ready: bool, _cx: &mut Context<'_>) -> Option<BoxError> {
        None
    }
}

/// `body` that keeps `guard` alive until it is fully delivered or dropped (client gone).
fn hold<G: Send + Sync + Unpin + 'static>(response: Response<Body>, guard: G) -> Response<Body> {
    let (parts, body) = response.into_parts();
    Response::from_parts(parts, Watched::new(body, Hold(guard)).boxed())
}

/// The origin in-flight cap of one room on this replica (`max_inflight`).
pub struct Inflight {
    /// `tokio`'s semaphore is fair: waiters are served first come, first served.
    permits: Arc<Semaphore>,
    /// `max_inflight` as configured.
    max: u64,
    wait: Duration,
    gauge: Gauge,
}

impl Inflight {
    pub fn of(max: u64, wait: Duration, gauge: Gauge) -> Option<Inflight> {
        (max > 0).then(|| Inflight {
            permits: Arc::new(Semaphore::new(
                usize::try_from(max)
                    .unwrap_or(usize::MAX)
                    .min(Semaphore::MAX_PERMITS),
            )),
            max,
            wait,
            gauge,
        })
    }

    /// `max_inflight`: at most this many requests of the room at the origin at once.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// How many of the room's requests are at the origin now (`anteroom_origin_inflight`).
    pub fn in_flight(&self) -> u64 {
        u64::try_from(self.gauge.get()).unwrap_or(0)
    }
}

/// An in-flight slot; dropping it releases it.
struct InflightSlot {
    _permit: OwnedSemaphorePermit,
    gauge: Gauge,
}

impl Drop for InflightSlot {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// A room's open streams to the origin on this replica: how many, and whose sessions to
/// keep alive.
#[derive(Default)]
pub struct Streams {
    open: Mutex<HashMap<VisitorId, usize>>,
}

impl Streams {
    /// Opens a stream for `visitor` unless `cap` (0: none) are open already.
    fn open(self: &Arc<Self>, visitor: VisitorId, cap: u64) -> Option<StreamSlot> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let total: usize = open.values().sum();
        if cap > 0 && total as u64 >= cap {
            return None;
        }
        *open.entry(visitor).or_default() += 1;
        Some(StreamSlot {
            streams: self.clone(),
            visitor,
        })
    }

    /// How many streams are open.
    pub fn count(&self) -> usize {
        self.open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .sum()
    }

    /// The visitors with at least one open stream.
    pub fn visitors(&self) -> Vec<VisitorId> {
        self.open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .copied()
            .collect()
    }
}

/// One open stream; its drop closes it.
pub struct StreamSlot {
    streams: Arc<Streams>,
    visitor: VisitorId,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.streams.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.visitor) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.visitor);
            }
        }
    }
}

impl App {
    /// `bypass_paths` and CORS preflights: the origin's answer, no cookie, no session, no
    /// slot, no line.
    pub(super) async fn bypass(
        &self,
        room: &Room,
        req: Request<Incoming>,
        identity: &Identity,
    ) -> Response<Body> {
        self.metrics.count_bypass(&room.config.name);
        let proxied = self.proxy(room, req, identity, None, None);
        self.metrics.time_proxy(&room.config.name, proxied).await
    }

    /// `OPTIONS *`: what this server allows, answered here; nothing is created.
    pub(super) fn options_any(&self) -> Response<Body> {
        let mut response = Response::new(crate::http::body::empty());
        *response.status_mut() = StatusCode::NO_CONTENT;
        response.headers_mut().insert(
            header::ALLOW,
            HeaderValue::from_static("GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"),
        );
        response
    }

    /// `asset_paths`: for admitted visitors, and anyone while nobody waits and the room is
    /// open; otherwise a small 503, never the waiting page.
    pub(super) async fn asset(
        &self,
        room: &Room,
        req: Request<Incoming>,
        identity: &Identity,
    ) -> Response<Body> {
        match self.standing(room, identity).await {
            Standing::OnSite(admitted) => self.to_origin(room, req, identity, admitted).await,
            Standing::Nobody if self.room_is_free(room) => {
                self.to_origin(room, req, identity, None).await
            }
            _ => not_admitted(),
        }
    }

    /// WebSocket upgrades and event streams: admitted sessions only, at most `stream_cap`
    /// at once; while open, the visitor's session is kept alive ([`App::touch_streams`]).
    /// A stream does not hold an in-flight slot for its lifetime (it would starve every
    /// page request); `stream_cap` bounds streams instead.
    pub(super) async fn stream(
        &self,
        room: &Room,
        req: Request<Incoming>,
        identity: &Identity,
    ) -> Response<Body> {
        // On the site already, or (while nobody waits and the room is open) let in now by
        // the fast path like a page would be; never put in line by a stream.
        let (visitor, admitted, new_cookie) =
            match (self.standing(room, identity).await, identity.visitor) {
                (Standing::OnSite(admitted), Some(v)) => (v, admitted, false),
                (Standing::Nobody, known) if self.room_is_free(room) => {
                    let visitor = known.unwrap_or_else(VisitorId::random);
                    match self
                        .admission
                        .decide(&room.config.name, visitor, identity.client)
                        .await
                    {
                        Decision::Admitted { since } => {
                            (visitor, Some((visitor, since)), known.is_none())
                        }
                        _ => return not_admitted(),
                    }
                }
                _ => return not_admitted(),
            };
        let Some(slot) = room.streams.open(visitor, room.config.stream_cap) else {
            return busy();
        };
        let slot = Arc::new(slot);
        let proxied = self.proxy(room, req, identity, admitted, Some(Box::new(slot.clone())));
        let mut response = self.metrics.time_proxy(&room.config.name, proxied).await;
        if new_cookie {
            let value = self
                .cookies
                .issue(visitor, &room.config.name, SystemTime::now());
            response.headers_mut().append(
                header::SET_COOKIE,
                crate::token::set_cookie(&value, self.secure_cookies),
            );
        }
        hold(response, slot)
    }

    /// An admitted request to the origin, through the room's in-flight cap if it has one.
    /// `admitted` is as for [`App::proxy`]: the visitor the store let in, with since when.
    pub(super) async fn to_origin(
        &self,
        room: &Room,
        req: Request<Incoming>,
        identity: &Identity,
        admitted: Option<(VisitorId, u64)>,
    ) -> Response<Body> {
        let Some(inflight) = &room.inflight else {
            let proxied = self.proxy(room, req, identity, admitted, None);
            return self.time_origin(&room.config.name, proxied).await;
        };
        let name = &room.config.name;
        let permit =
            match tokio::time::timeout(inflight.wait, inflight.permits.clone().acquire_owned())
                .await
            {
                Ok(Ok(permit)) => permit,
                // Timed out (or, never, closed): the origin is at its cap.
                _ => {
                    self.metrics.count_inflight_rejected(name);
                    return busy();
                }
            };
        inflight.gauge.inc();
        let slot = InflightSlot {
            _permit: permit,
            gauge: inflight.gauge.clone(),
        };
        let proxied = self.proxy(room, req, identity, admitted, None);
        let response = self.time_origin(name, proxied).await;
        hold(response, slot)
    }

    /// [`crate::metrics::Metrics::time_proxy`] for an admitted request, whose time to
    /// response headers and status also feed closed-loop admission (SPEC §14). The wait
    /// for an in-flight slot is not the origin's and is not counted.
    async fn time_origin(
        &self,
        room: &str,
        proxy: impl Future<Output = Response<Body>>,
    ) -> Response<Body> {
        let started = tokio::time::Instant::now();
        let response = proxy.await;
        let took = started.elapsed();
        self.metrics.observe_proxy(room, response.status(), took);
        self.admission
            .observe_origin(room, took, response.status().as_u16());
        response
    }

    /// Where this request's visitor stands: on the site, in line, or nobody the store
    /// knows (a newcomer). The store down counts as on the site when failing open (as for
    /// the page), else as in line.
    ///
    /// A visitor on the site is then decided like a page request (from the session cache,
    /// or one resolve that records the session's activity), so that their request carries
    /// `X-Anteroom-Admission` and their session can be ended by the origin (SPEC §14). Only
    /// someone the store already has on the site gets that far, so an asset or a stream
    /// does not put anyone in line (short of their session ending in the instant between
    /// the two reads, when their next page would rejoin them anyway).
    async fn standing(&self, room: &Room, identity: &Identity) -> Standing {
        let Some(visitor) = identity.visitor else {
            return Standing::Nobody;
        };
        let name = &room.config.name;
        match self
            .admission
            .state_of(name, visitor, identity.client)
            .await
        {
            Some(VisitorState::Admitted) => {
                match self.admission.decide(name, visitor, identity.client).await {
                    Decision::Admitted { since } => Standing::OnSite(Some((visitor, since))),
                    Decision::Stalled { fail_open: true } => Standing::OnSite(None),
                    // The session ended in between (or the store went away): not on the site.
                    _ => Standing::InLine,
                }
            }
            Some(VisitorState::Waiting(_)) => Standing::InLine,
            Some(VisitorState::Unknown) => Standing::Nobody,
            None if self.admission.health().failing_open() => Standing::OnSite(None),
            None => Standing::InLine,
        }
    }

    /// Nobody waits (as last read) and the room is open and admitting.
    fn room_is_free(&self, room: &Room) -> bool {
        let Some(cached) = self.admission.cached_stats(&room.config.name) else {
            return false;
        };
        let phase = RoomPolicy::of(&room.config).phase_at(crate::queue::unix_ms(SystemTime::now()));
        cached.stats.waiting == 0 && !cached.stats.settings.paused && phase == Phase::Queueing
    }

    /// Streams to the origins open on this replica, every room.
    pub fn origin_streams(&self) -> usize {
        self.rooms.iter().map(|r| r.streams.count()).sum()
    }

    /// Keeps the sessions of every visitor with an open stream alive: one batched store
    /// call per room with streams. Run every few seconds by `run`.
    pub async fn touch_streams(&self) {
        for room in &self.rooms {
            let visitors = room.streams.visitors();
            if visitors.is_empty() {
                continue;
            }
            if let Err(e) = self
                .admission
                .touch_sessions(&room.config.name, &visitors)
                .await
            {
                tracing::debug!(room = %room.config.name, error = %e, "touching streams' sessions failed");
            }
        }
    }
}

/// Where a visitor stands, for assets and streams.
enum Standing {
    /// On the site: who the store let in and since when (`None`: failing open).
    OnSite(Option<(VisitorId, u64)>),
    InLine,
    Nobody,
}

/// The 503 for an asset or stream from someone not on the site: tiny, never the page.
fn not_admitted() -> Response<Body> {
    small_503(VisitorStatus::Waiting, NOT_ADMITTED_RETRY_SECS, "waiting\n")
}

/// The 503 of a full `stream_cap` or `max_inflight`.
fn busy() -> Response<Body> {
    let mut response = Response::new(full("busy: try again shortly\n"));
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::RETRY_AFTER, HeaderValue::from(BUSY_RETRY_SECS));
    // The access log's decision (a 503 like many others otherwise).
    response
        .extensions_mut()
        .insert(crate::access_log::Noted::BUSY);
    response
}

fn small_503(status: VisitorStatus, retry_after: u64, text: &'static str) -> Response<Body> {
    let mut response = Response::new(full(text));
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
    headers.insert(STATUS_HEADER, HeaderValue::from_static(status.as_str()));
    response
}
