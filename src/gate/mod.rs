//! The request path of the public listener. [`App::handle`] is the one function every
//! request goes through, and reads in the order docs/architecture.md gives ("One request's
//! path"):
//!
//! 1. [`identify`] — client address and key, room by host, verified visitor cookie;
//! 2. [`classify`](mod@classify) — one [`Class`], in one fixed order, matched explicitly below;
//! 3. [`decide`] — for the site, [`Admission`] resolves the visitor;
//! 4. [`respond`] — proxy ([`crate::proxy`]), waiting page, 429, holding page, or a
//!    [`GateError`] through its one mapping ([`error`]);
//! 5. with `access_log` on, the response's body is watched and its line written when it is
//!    done ([`crate::access_log`]): the class from step 2, the decision from the answer.
//!
//! What supports the path sits beside it: building the app from the config (`build`), the
//! room table a reload swaps (`rooms`), the bans' side of the gate (`bans`), the door
//! before a newcomer joins (`door`: the proof of work and the shadow line) and the proof
//! of work's own routes (`challenge`), the reserved routes' answers (`reserved`) and the
//! admin listener (`admin_listener`). What is not the request path lives elsewhere: forwarding in
//! [`crate::proxy`], the admin API in [`crate::admin`] (handed an
//! [`AdminContext`](crate::admin::AdminContext), not the app), the live streams in
//! [`crate::live`], the metrics registry in [`crate::metrics`].

pub mod classes;
pub mod classify;
pub mod decide;
pub mod draw;
pub mod error;
pub mod identify;
pub mod live;
pub mod respond;

mod admin_listener;
mod bans;
mod build;
mod challenge;
mod door;
mod reserved;
mod rooms;

pub use bans::{RECENT_CLIENTS, RECENT_PER_CLIENT};
pub use build::{AppError, BadOrigin};
pub use rooms::RoomTable;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use http::{HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;

use crate::abuse::AbuseRegistry;
use crate::access_log::{self, AccessLog};
use crate::admin::Admin;
use crate::admission::Admission;
use crate::fairness::admission_token::AdmissionSigner;
use crate::http::assets;
use crate::http::body::Body;
use crate::http::pages::{self, Pages};
use crate::identity::TrustedProxies;
use crate::live::LiveHub;
use crate::log_limiter::LogLimiter;
use crate::logging;
use crate::metrics::Metrics;
use crate::proxy::{Origin, OriginClient};
use crate::token::CookieKeys;
use crate::worker::PerWorker;
use bans::RecentVisitors;
pub use classify::{Class, RESERVED_PREFIX, RoomPaths, classify};
pub use error::{GateError, Kind};
use identify::Identity;

/// One room as the request path needs it.
pub struct Room {
    /// The room's name.
    pub name: String,
    /// Where and how its requests are forwarded (a reload that changes it opens the room
    /// anew under the same name).
    pub origin: Origin,
    /// Open streams to the origin (`stream_cap`, sessions kept alive).
    pub streams: Arc<classes::Streams>,
    /// The room's settings as they run now ([`live::listener`] swaps them in).
    live: Arc<arc_swap::ArcSwap<live::LiveRoom>>,
    /// The room as the file gave it when the room was opened: what the operator's changes
    /// apply over.
    file: crate::config::RoomConfig,
    /// `anteroom_origin_inflight` of the room.
    gauge: prometheus_client::metrics::gauge::Gauge,
    /// The lottery's salt and final document, once read.
    draw: draw::RoomDraw,
    /// The room's door series (challenges issued and solved, solve times, the shadow
    /// line), looked up the first time the door or the shadow line is met
    /// ([`App::door_series`]): the door's hot paths then count with no label lookup, and a
    /// room whose door never opened exports none.
    door_series: std::sync::OnceLock<crate::metrics::DoorSeries>,
}

impl Room {
    /// The room's settings in force now: one atomic load, and the request keeps the ones
    /// it started with even if an operator's change swaps them meanwhile.
    pub fn live(&self) -> arc_swap::Guard<Arc<live::LiveRoom>> {
        self.live.load()
    }
}

/// The shared state of the public listener.
pub struct App {
    /// The rooms and the host table, swapped whole by a reload (see `rooms`).
    rooms: Arc<arc_swap::ArcSwap<RoomTable>>,
    /// Every room's name by its index in the table, for the access log's writer.
    room_index_names: Arc<arc_swap::ArcSwap<Vec<String>>>,
    /// The admission layer: the only door to the store.
    pub admission: Arc<Admission>,
    /// The waiting page's live streams and their ticker.
    pub live: LiveHub,
    cookies: CookieKeys,
    secure_cookies: bool,
    trusted: TrustedProxies,
    /// `X-Forwarded-Proto` when no trusted proxy sent one.
    public_scheme: &'static str,
    /// One pool per serving worker, so an origin connection lives on the thread that
    /// uses it.
    origin_clients: PerWorker<OriginClient>,
    pages: Pages,
    origin_errors: LogLimiter,
    /// Warnings about unreadable `X-Forwarded-For` from a trusted proxy.
    unreadable_forwarded: LogLimiter,
    admin: Admin,
    /// The Prometheus metrics every listener records into.
    pub metrics: Metrics,
    /// Signs `X-Anteroom-Admission` when `admission_key` is set.
    signer: Option<AdmissionSigner>,
    /// The public `/__anteroom/admission-key` document, serialised once.
    admission_key_document: Option<bytes::Bytes>,
    /// Set when a drain starts: readiness answers 503 from then on.
    draining: AtomicBool,
    /// Whether the admin is served on the public listener (no `admin_listen`).
    admin_on_public: bool,
    /// `admin_allow`: who may reach the admin at all; empty: anyone.
    admin_allow: Vec<ipnet::IpNet>,
    /// The abuse registry: the ban check, strikes, ban paths.
    pub abuse: Arc<AbuseRegistry>,
    /// Who this replica recently admitted, by client, so a ban can end their sessions.
    /// One table per serving worker: every admitted request records itself, and a lock
    /// shared by the workers was the one they contended for on that path.
    recent: PerWorker<Mutex<RecentVisitors>>,
    /// Verifies priority grants; `None`: a grant is ignored.
    priority_secret: Option<crate::config::Secret>,
    /// The access log; `None` with `access_log: off`, and then the request path
    /// captures nothing for it.
    access_log: Option<AccessLog>,
    /// Signs and checks the proof of work's challenges (under the cookie secret; the
    /// `c1.` text keeps them apart from everything else signed with it).
    challenge_key: crate::challenge::ChallengeKey,
    /// `server.body_timeout`: how long a challenge answer's body may take.
    body_timeout: std::time::Duration,
}

/// What the access log keeps of a request whose head arrived `at` (wall clock, monotonic).
fn access_started<B>(
    (time, at): (SystemTime, Instant),
    req: &Request<B>,
    identity: &Identity,
) -> access_log::Started {
    access_log::Started {
        time,
        at,
        // A copy of its own: the line is written when the body ends, which for a stream or
        // a tunnel is long after the request, and a clone would keep the id's whole
        // scratch buffer (`http::scratch`) alive for as long.
        request_id: HeaderValue::from_bytes(identity.request_id.as_bytes())
            .unwrap_or_else(|_| HeaderValue::from_static("-")),
        client: identity.client_ip,
        peer: identity.peer,
        method: req.method().clone(),
        host: identity.host.as_ref().map(|h| h.authority().to_owned()),
        path: access_log::path_of(req.uri()),
        room: identity.room,
        reference: identity.visitor.map(|v| v.reference()),
        // Clones share the request head's bytes (a reference count, not a copy).
        user_agent: req.headers().get(http::header::USER_AGENT).cloned(),
        referer: req.headers().get(http::header::REFERER).cloned(),
        version: req.version(),
    }
}

impl App {
    /// The one request path: identify, classify, decide, respond (and log).
    pub async fn handle(&self, req: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
        // The room by one table, even if a reload swaps it meanwhile; the table itself is
        // let go before anything waits (see `rooms`).
        let (identity, started, room) = {
            let rooms = self.rooms.load();
            let (identity, started) = self.identify_logged(&rooms, &req, peer);
            let room = identity.room.map(|i| rooms.get(i));
            (identity, started, room)
        };
        // Every log line about this request carries its id.
        let request_id = identity.request_id.clone();
        let (mut response, class) =
            logging::in_request(request_id, self.handle_identified(room, req, identity)).await;
        // Everything but the origin's own answers is ours and carries our security headers.
        if response.extensions().get::<respond::Proxied>().is_none() {
            pages::add_security_headers(response.headers_mut());
        }
        self.logged(started, class, response)
    }

    /// Step 1, identify, and with the access log on what its line keeps of the request's
    /// head (timed before identifying, so the line's time is the head's).
    fn identify_logged(
        &self,
        rooms: &RoomTable,
        req: &Request<Incoming>,
        peer: SocketAddr,
    ) -> (Identity, Option<access_log::Started>) {
        let head_at = self
            .access_log
            .as_ref()
            .map(|_| (SystemTime::now(), Instant::now()));
        let identity = self.identify(rooms, req, peer);
        let started = head_at.map(|at| access_started(at, req, &identity));
        (identity, started)
    }

    /// `response` with its access-log line to come, when the log is on.
    fn logged(
        &self,
        started: Option<access_log::Started>,
        class: &'static str,
        response: Response<Body>,
    ) -> Response<Body> {
        let (Some(log), Some(started)) = (&self.access_log, started) else {
            return response;
        };
        let decision = access_log::decision_of(
            class,
            response.extensions().get::<respond::Proxied>().is_some(),
            response.extensions().get::<access_log::Noted>().copied(),
            response.headers().get(pages::STATUS_HEADER),
            response.status(),
        );
        log.finish(started, class, decision, response)
    }

    /// SIGHUP: the access log's file is reopened (logrotate moved it). `false` when there
    /// is no access log.
    pub fn reopen_access_log(&self) -> bool {
        match &self.access_log {
            Some(log) => {
                log.reopen();
                true
            }
            None => false,
        }
    }

    /// The request's answer and its access-log class ([`Class::label`]).
    async fn handle_identified(
        &self,
        room: Option<&'static Room>,
        mut req: Request<Incoming>,
        identity: Identity,
    ) -> (Response<Body>, &'static str) {
        let peer = identity.peer;
        // A request whose forwarding header cannot be read has no client to judge: it is
        // refused before anything, the ban check included.
        if identity.bad_forwarded {
            if self.unreadable_forwarded.allow() {
                tracing::warn!(
                    peer = %identity.peer,
                    "X-Forwarded-For from a trusted proxy cannot be read; answered 400 \
                     (further warnings suppressed for 10 s)"
                );
            }
            return (
                self.error(Kind::BadForwardedFor, &identity),
                classify::INVALID_LABEL,
            );
        }
        // The fixed order: the ban check here, then `classify`'s; this is the one place
        // acting on it.
        // First, a banned client gets nothing else, reserved routes included,
        // but for the probes: they report the process, not the prober's reputation.
        let class = if let Some(verdict) = &identity.banned {
            classify::probe(&req).unwrap_or_else(|| Class::Banned(verdict.clone()))
        } else if identity.bad_host.is_some() {
            return (
                self.error(Kind::BadHost, &identity),
                classify::INVALID_LABEL,
            );
        } else if crate::proxy::resolve_request_path(&mut req).is_err() {
            // Dot segments are resolved before anything routes on the path, so the
            // reserved prefix, the room's classes and the origin's prefix all see the same
            // path.
            return (
                self.error(Kind::BadPath, &identity),
                classify::INVALID_LABEL,
            );
        } else {
            classify(
                &req,
                &self.abuse.policy().ban_paths,
                room.map(|r| r.live()).as_deref().map(|l| &l.paths),
                identity.fetch,
            )
        };
        let label = class.label();
        // Every class but the site and the challenge's answer is boxed: this future is
        // moved on every request (hyper keeps it in its connection), and inline the admin
        // API and the rest made it 9 KB for the admitted visitor who uses none of them.
        // The answer's future is a third of the site's, so inline it costs no size, and
        // spares the door's hot path a large allocation and its copy.
        let response = match class {
            Class::Banned(verdict) => self.error(GateError::banned(&verdict), &identity),
            Class::Refused(kind) => self.error(kind, &identity),
            Class::OptionsAny => self.options_any(),
            Class::Healthz => pages::plain(StatusCode::OK, "ok\n"),
            Class::Readyz => Box::pin(self.readyz()).await,
            Class::Events => self.events(&identity),
            // With an admin listener the public one has no admin at all.
            Class::Admin if !self.admin_on_public => self.error(Kind::NotFound, &identity),
            Class::Admin => Box::pin(self.admin(req, &identity, peer)).await,
            Class::Static(name) => assets::serve(&name, req.method() == Method::HEAD)
                .unwrap_or_else(|| self.error(Kind::NotFound, &identity)),
            Class::BuiltIn(name) => assets::serve_built_in(&name, req.method() == Method::HEAD)
                .unwrap_or_else(|| self.error(Kind::NotFound, &identity)),
            Class::ChallengeAnswer => self.challenge_answer(room, req, identity).await,
            Class::ChallengeWait => Box::pin(self.challenge_wait(room, &req, &identity)).await,
            Class::AdmissionKey => self.admission_key(&identity),
            Class::Draw(room) => Box::pin(self.draw_document(&room, &identity)).await,
            Class::UnknownReserved => self.error(Kind::NotFound, &identity),
            Class::BanPath => Box::pin(self.ban_path(&req, &identity)).await,
            // A preflight never has a body; one that does would carry it past the queue.
            Class::Preflight if !hyper::body::Body::is_end_stream(req.body()) => {
                self.error(Kind::PreflightBody, &identity)
            }
            Class::Bypass | Class::Preflight => match room {
                Some(room) => Box::pin(self.bypass(room, req, &identity)).await,
                None => self.error(Kind::UnknownSite, &identity),
            },
            Class::Asset | Class::Embedded => match room {
                Some(room) => Box::pin(self.asset(room, req, &identity)).await,
                None => self.error(Kind::UnknownSite, &identity),
            },
            Class::Stream => match room {
                Some(room) => Box::pin(self.stream(room, req, &identity)).await,
                None => self.error(Kind::UnknownSite, &identity),
            },
            Class::Grant => match room {
                Some(room) => Box::pin(self.granted(room, req, &identity)).await,
                None => self.error(Kind::UnknownSite, &identity),
            },
            Class::Site => match room {
                Some(room) => self.site(room, req, &identity).await,
                None => self.error(Kind::UnknownSite, &identity),
            },
        };
        (response, label)
    }

    /// Starts a drain: readiness is 503 from now on, while requests are still served.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    /// Whether a drain has started (readiness then answers 503).
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }
}
