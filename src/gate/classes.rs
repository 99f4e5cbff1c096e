//! The traffic classes other than the page: bypass paths and CORS preflights
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
use std::future::Future;
use std::net::IpAddr;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::door::AtTheDoor;
use super::identify::Identity;
use super::{App, Kind, Room};
use crate::admission::Decision;
use crate::http::body::{Body, BoxError, Watch, Watched, full};
use crate::http::pages::{STATUS_HEADER, VisitorStatus};
use crate::queue::{Join, Phase, RoomPolicy, VisitorId, VisitorState};

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

/// The origin in-flight cap of one room on this replica (`max_inflight`); a clone is the
/// same cap.
#[derive(Clone)]
pub struct Inflight {
    /// `tokio`'s semaphore is fair: waiters are served first come, first served.
    permits: Arc<Semaphore>,
    /// `max_inflight` as configured.
    max: u64,
    wait: Duration,
    gauge: Gauge,
}

impl Inflight {
    /// The cap for `max` in-flight requests, each waiting at most `wait`; `None` when `max` is 0.
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

/// A room's open streams to the origin on this replica: how many, whose sessions to keep
/// alive, and how to end them (a session that ended, a banned client).
#[derive(Default)]
pub struct Streams {
    open: Mutex<HashMap<VisitorId, VisitorStreams>>,
}

/// One visitor's open streams.
struct VisitorStreams {
    /// The client of each open stream, one entry per stream.
    clients: Vec<IpAddr>,
    /// Cancelled to end them all.
    ended: CancellationToken,
}

impl Streams {
    /// Opens a stream for `visitor` from `client` unless `cap` (0: none) are open already.
    fn open(self: &Arc<Self>, visitor: VisitorId, client: IpAddr, cap: u64) -> Option<StreamSlot> {
        let mut open = self.lock();
        let total: usize = open.values().map(|v| v.clients.len()).sum();
        if cap > 0 && total as u64 >= cap {
            return None;
        }
        let streams = open.entry(visitor).or_insert_with(|| VisitorStreams {
            clients: Vec::new(),
            ended: CancellationToken::new(),
        });
        // Ended streams still closing must not end one opened after (a new session).
        if streams.ended.is_cancelled() {
            streams.ended = CancellationToken::new();
        }
        streams.clients.push(client);
        Some(StreamSlot {
            streams: self.clone(),
            visitor,
            client,
            ended: streams.ended.clone(),
        })
    }

    /// How many streams are open.
    pub fn count(&self) -> usize {
        self.lock().values().map(|v| v.clients.len()).sum()
    }

    /// The visitors with at least one open stream that has not been ended.
    pub fn visitors(&self) -> Vec<VisitorId> {
        self.lock()
            .iter()
            .filter(|(_, v)| !v.ended.is_cancelled())
            .map(|(visitor, _)| *visitor)
            .collect()
    }

    /// Ends every open stream of `visitor`.
    fn end(&self, visitor: VisitorId) {
        if let Some(streams) = self.lock().get(&visitor) {
            streams.ended.cancel();
        }
    }

    /// Ends every open stream of each visitor with a stream from a client for which
    /// `banned` is true. Returns how many visitors' streams were ended.
    pub fn end_where(&self, banned: impl Fn(IpAddr) -> bool) -> usize {
        let mut ended = 0;
        for streams in self.lock().values() {
            if !streams.ended.is_cancelled() && streams.clients.iter().any(|&ip| banned(ip)) {
                streams.ended.cancel();
                ended += 1;
            }
        }
        ended
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<VisitorId, VisitorStreams>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One open stream; its drop closes it.
pub struct StreamSlot {
    streams: Arc<Streams>,
    visitor: VisitorId,
    client: IpAddr,
    /// Cancelled when the stream must end (see [`Streams::end`]).
    ended: CancellationToken,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.streams.lock();
        if let Some(streams) = open.get_mut(&self.visitor) {
            if let Some(at) = streams.clients.iter().position(|&ip| ip == self.client) {
                streams.clients.swap_remove(at);
            }
            if streams.clients.is_empty() {
                open.remove(&self.visitor);
            }
        }
    }
}

/// A proxied stream's body held open by its [`StreamSlot`], cut short (an error, so the
/// client sees it did not complete) when the slot is ended.
struct Ending {
    _slot: Arc<StreamSlot>,
    /// And the client's share of streams, for a stream that is not a tunnel.
    _ticket: Option<crate::live::StreamTicket>,
    ended: std::pin::Pin<Box<WaitForCancellationFutureOwned>>,
}

impl Watch for Ending {
    fn polled(&mut self, _ready: bool, cx: &mut Context<'_>) -> Option<BoxError> {
        self.ended
            .as_mut()
            .poll(cx)
            .is_ready()
            .then(|| "the stream's session ended, or its client was banned".into())
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
        self.metrics.count_bypass(&room.name);
        let proxied = self.proxy(room, req, identity, None, None);
        self.metrics.time_proxy(&room.name, proxied).await
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

    /// `asset_paths` and another site's embeds ([`super::classify::Class::Embedded`]): for
    /// admitted visitors, and anyone while nobody waits and the room is open (and in its
    /// queue or passthrough mode, its store answering); otherwise a small 503, never the
    /// waiting page.
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
        // the fast path like a page would be; never put in line by a stream (`Join::Now`:
        // the statistics read may be a second old), and never past the door: its proof of
        // work and shadow line are a page's to answer.
        let (visitor, admitted, new_cookie) =
            match (self.standing(room, identity).await, identity.visitor) {
                (Standing::OnSite(admitted), Some(v)) => (v, admitted, false),
                (Standing::Nobody, known)
                    if self.room_is_free(room)
                        && matches!(self.at_the_door(room, identity), AtTheDoor::Enter) =>
                {
                    let visitor = known.unwrap_or_else(VisitorId::random);
                    match self
                        .admission
                        .decide_with(&room.name, visitor, identity.client, Join::Now)
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
        // A tunnel's share of the client's streams is taken (and held) by the proxy; an
        // event stream's is held by its body.
        let ticket = if crate::proxy::is_upgrade(&req) {
            None
        } else {
            match self.live.budget.tunnel(identity.client) {
                Ok(ticket) => Some(ticket),
                Err(refused) => return self.stream_refused(refused, identity),
            }
        };
        let Some(slot) =
            room.streams
                .open(visitor, identity.client_ip, room.live().config.stream_cap)
        else {
            return busy();
        };
        let slot = Arc::new(slot);
        let held = crate::proxy::TunnelHold {
            guard: Box::new(slot.clone()),
            ended: slot.ended.clone(),
        };
        let proxied = self.proxy(room, req, identity, admitted, Some(held));
        let mut response = self.metrics.time_proxy(&room.name, proxied).await;
        if new_cookie {
            let value = self.cookies.issue(visitor, &room.name, SystemTime::now());
            response.headers_mut().append(
                header::SET_COOKIE,
                crate::token::set_cookie(&value, self.secure_cookies),
            );
        }
        let ended = Box::pin(slot.ended.clone().cancelled_owned());
        let (parts, body) = response.into_parts();
        let ending = Ending {
            _slot: slot,
            _ticket: ticket,
            ended,
        };
        Response::from_parts(parts, Watched::new(body, ending).boxed())
    }

    /// An admitted request to the origin, through the room's in-flight cap if it has one.
    /// `admitted` is as for [`App::proxy`]: the visitor the store let in, with since when.
    ///
    /// Its time to response headers and status feed the proxy metrics (the origin's own
    /// time) and closed-loop admission, which judges the site as visitors see it: the wait
    /// for an in-flight slot counts as latency, and a request refused at the door after
    /// `inflight_wait` as a 503 (docs/fairness.md, "Closed-loop admission"), so a saturated
    /// `max_inflight` lowers the rate rather than hiding behind an origin that answers
    /// quickly. The proxy is awaited in one place: this future is inside every admitted
    /// request's, and each further await of it would add its kilobytes again.
    pub(super) async fn to_origin(
        &self,
        room: &Room,
        req: Request<Incoming>,
        identity: &Identity,
        admitted: Option<(VisitorId, u64)>,
    ) -> Response<Body> {
        let name = &room.name;
        let arrived = tokio::time::Instant::now();
        // The cap is taken out of the settings at once: an arc-swap guard is for short
        // reads, not for the life of a request at the origin.
        let inflight = room.live().inflight.clone();
        let slot = match &inflight {
            None => None,
            Some(inflight) => {
                let waited =
                    tokio::time::timeout(inflight.wait, inflight.permits.clone().acquire_owned())
                        .await;
                let Ok(Ok(permit)) = waited else {
                    // Timed out (or, never, closed): the origin is at its cap.
                    self.metrics.count_inflight_rejected(name);
                    self.admission.observe_origin(name, arrived.elapsed(), 503);
                    return busy();
                };
                inflight.gauge.inc();
                Some(InflightSlot {
                    _permit: permit,
                    gauge: inflight.gauge.clone(),
                })
            }
        };
        let started = tokio::time::Instant::now();
        let response = self.proxy(room, req, identity, admitted, None).await;
        self.metrics
            .observe_proxy(name, response.status(), started.elapsed());
        // A body the visitor cut short or garbled says nothing of the origin.
        if response
            .extensions()
            .get::<super::respond::ClientFault>()
            .is_none()
        {
            self.admission
                .observe_origin(name, arrived.elapsed(), response.status().as_u16());
        }
        match slot {
            Some(slot) => hold(response, slot),
            None => response,
        }
    }

    /// Where this request's visitor stands: on the site, in line, or nobody the store
    /// knows (a newcomer). The store down counts as on the site when failing open (as for
    /// the page), else as in line.
    ///
    /// A visitor on the site is then decided like a page request (from the session cache,
    /// or one resolve that records the session's activity), so that their request carries
    /// `X-Anteroom-Admission` and their session can be ended by the origin. Only
    /// someone the store already has on the site gets that far, so an asset or a stream
    /// does not put anyone in line (short of their session ending in the instant between
    /// the two reads, when their next page would rejoin them anyway).
    async fn standing(&self, room: &Room, identity: &Identity) -> Standing {
        let Some(visitor) = identity.visitor else {
            return Standing::Nobody;
        };
        let name = &room.name;
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

    /// Nobody waits (as last read), the room is open and admitting, and in its queue or
    /// passthrough mode. While the store does not answer, the last read says nothing of
    /// now: free only once failing open lets everybody through anyway.
    fn room_is_free(&self, room: &Room) -> bool {
        let health = self.admission.health();
        if !health.is_up() {
            return health.failing_open();
        }
        if self.admission.mode(&room.name) == crate::queue::Mode::SoldOut {
            return false;
        }
        let Some(cached) = self.admission.cached_stats(&room.name) else {
            return false;
        };
        let phase =
            RoomPolicy::of(&room.live().config).phase_at(crate::queue::unix_ms(SystemTime::now()));
        cached.stats.waiting == 0 && !cached.stats.settings.paused && phase == Phase::Queueing
    }

    /// Streams to the origins open on this replica, every room.
    pub fn origin_streams(&self) -> usize {
        self.rooms
            .load()
            .all()
            .iter()
            .map(|r| r.streams.count())
            .sum()
    }

    /// Keeps the sessions of every visitor with an open stream alive, and ends the streams
    /// of those the store no longer has on the site (flushed, ended by the origin or an
    /// operator, banned elsewhere): one batched store call per room with streams. Run every
    /// half second by `run`.
    pub async fn touch_streams(&self) {
        // Removed rooms too: their streams still hold sessions in the store.
        let rooms = self.rooms.load_full();
        for room in rooms.all() {
            let visitors = room.streams.visitors();
            if visitors.is_empty() {
                continue;
            }
            match self.admission.touch_sessions(&room.name, &visitors).await {
                Ok(on_site) => {
                    for (&visitor, on_site) in visitors.iter().zip(on_site) {
                        if !on_site {
                            room.streams.end(visitor);
                        }
                    }
                }
                Err(e) => {
                    tracing::debug!(room = %room.name, error = %e, "touching streams' sessions failed");
                }
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

/// The refusal of an asset or stream from someone not on the site: tiny, never the page.
fn not_admitted() -> Response<Body> {
    let mut response = small(Kind::NotAdmitted, "waiting\n", NOT_ADMITTED_RETRY_SECS);
    response.headers_mut().insert(
        STATUS_HEADER,
        HeaderValue::from_static(VisitorStatus::Waiting.as_str()),
    );
    response
}

/// The refusal of a full `stream_cap` or `max_inflight`.
fn busy() -> Response<Body> {
    let mut response = small(Kind::Busy, "busy: try again shortly\n", BUSY_RETRY_SECS);
    // The access log's decision (a 503 like many others otherwise).
    response
        .extensions_mut()
        .insert(crate::access_log::Noted::BUSY);
    response
}

/// A plain-text refusal with `kind`'s status, never cached, and when to try again.
fn small(kind: Kind, text: &'static str, retry_after: u64) -> Response<Body> {
    let mut response = Response::new(full(text));
    *response.status_mut() = kind.status();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
    response
}
