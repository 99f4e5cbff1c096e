//! The request path of the public listener. [`App::handle`] is the one function every
//! request goes through, and reads in DESIGN's order:
//!
//! 1. [`identify`] — client address and key, room by host, verified visitor cookie;
//! 2. [`classify`](mod@classify) — one [`Class`], in SPEC §10's fixed order, matched explicitly below;
//! 3. [`decide`] — for the site, [`Admission`] resolves the visitor;
//! 4. [`respond`] — proxy ([`crate::proxy`]), waiting page, 429, holding page, or a
//!    [`GateError`] through its one mapping ([`error`]);
//! 5. with `access_log` on, the response's body is watched and its line written when it is
//!    done ([`crate::access_log`]): the class from step 2, the decision from the answer.
//!
//! What is not the request path lives elsewhere: forwarding in [`crate::proxy`], the admin
//! API in [`crate::admin`] (handed an [`AdminContext`], not the app), the live streams in
//! [`crate::live`], the metrics registry in [`crate::metrics`].

pub mod classes;
pub mod classify;
pub mod decide;
pub mod draw;
pub mod error;
pub mod identify;
pub mod respond;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use http::{HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;

use crate::abuse::{AbuseRegistry, PathOutcome, StrikeReason};
use crate::access_log::{self, AccessLog};
use crate::admin::{self, Admin, AdminContext};
use crate::admission::Admission;
use crate::config::{Config, RoomConfig};
use crate::fairness::admission_token::{AdmissionKey, AdmissionSigner};
use crate::http::assets;
use crate::http::body::Body;
use crate::http::pages::{self, Pages};
use crate::identity::TrustedProxies;
use crate::live::LiveHub;
use crate::log_limiter::LogLimiter;
use crate::logging;
use crate::metrics::Metrics;
use crate::proxy::{Origin, OriginClient, ProxyError, ProxyTimeouts};
use crate::queue::VisitorId;
use crate::token::CookieKeys;
use crate::worker::PerWorker;
pub use classify::{Class, RESERVED_PREFIX, RoomPaths, classify};
pub use error::{GateError, Kind};
use identify::Identity;

/// How long an `X-Anteroom-Admission` token is valid; the signer re-signs a session's
/// token once half of it has passed, so an origin sees a fresh one at least every 5 min.
const ADMISSION_TOKEN_LIFETIME: Duration = Duration::from_secs(600);
/// Sessions whose tokens are cached (a cache overflow costs a signature, never a token).
const ADMISSION_SIGNER_CAPACITY: usize = 200_000;

/// One room as the request path needs it.
pub struct Room {
    pub config: RoomConfig,
    pub origin: Origin,
    /// `bypass_paths` and `asset_paths`, parsed.
    pub paths: RoomPaths,
    /// `max_inflight` on this replica; `None`: no cap.
    pub inflight: Option<classes::Inflight>,
    /// Open streams to the origin (`stream_cap`, sessions kept alive).
    pub streams: Arc<classes::Streams>,
}

/// A room's origin the proxy cannot address (`rooms.<name>.origin`).
#[derive(Debug, thiserror::Error)]
#[error("rooms.{room}.origin: {source}")]
pub struct BadOrigin {
    pub room: String,
    #[source]
    pub source: ProxyError,
}

/// Why the public listener's state could not be built.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Origin(#[from] BadOrigin),
    /// Whom to trust for `https://` origins (`origin_ca_file`, else the system's CAs)
    /// could not be loaded.
    #[error("origin_ca_file: {0}")]
    OriginTls(#[from] crate::tls::TlsError),
    /// The access log's file could not be opened (or its writer thread started).
    #[error("access_log: {0}")]
    AccessLog(#[source] std::io::Error),
}

/// The shared state of the public listener.
pub struct App {
    rooms: Vec<Room>,
    room_names: Vec<String>,
    /// Lower-cased host (no port) → index into `rooms`.
    hosts: HashMap<String, usize>,
    catch_all: Option<usize>,
    pub admission: Arc<Admission>,
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
    pub metrics: Metrics,
    /// Signs `X-Anteroom-Admission` (SPEC §14) when `admission_key` is set.
    signer: Option<AdmissionSigner>,
    /// The public `/__anteroom/admission-key` document, serialised once.
    admission_key_document: Option<bytes::Bytes>,
    /// Set when a drain starts (§11): readiness answers 503 from then on.
    draining: AtomicBool,
    /// Whether the admin is served on the public listener (no `admin_listen`).
    admin_on_public: bool,
    /// `admin_allow`: who may reach the admin at all; empty: anyone.
    admin_allow: Vec<ipnet::IpNet>,
    /// The abuse registry (SPEC §10): the ban check, strikes, ban paths.
    pub abuse: Arc<AbuseRegistry>,
    /// Who this replica recently admitted, by client, so a ban can end their sessions.
    /// One table per serving worker: every admitted request records itself, and a lock
    /// shared by the workers was the one they contended for on that path.
    recent: PerWorker<Mutex<RecentVisitors>>,
    /// Verifies priority grants (SPEC §10); `None`: a grant is ignored.
    priority_secret: Option<crate::config::Secret>,
    /// The access log (SPEC §13); `None` with `access_log: off`, and then the request path
    /// captures nothing for it.
    access_log: Option<AccessLog>,
    /// The lottery rooms' public draw documents and salts (SPEC §14).
    draws: draw::DrawCache,
}

/// Clients this replica kept as recently admitted, over all its workers together (beyond
/// it, an arbitrary one is forgotten and its sessions end by `session_ttl` instead of at
/// once).
pub const RECENT_CLIENTS: usize = 65_536;
/// Visitors kept per client (a client behind one address with more tabs or browsers than
/// this has its oldest forgotten).
pub const RECENT_PER_CLIENT: usize = 8;

/// Client address → (room index, visitor) admitted recently through this replica. Bounded
/// by [`RECENT_CLIENTS`] × [`RECENT_PER_CLIENT`] entries (about 12 MB at most).
struct RecentVisitors {
    by_client: HashMap<IpAddr, Vec<(usize, VisitorId)>>,
    /// Clients in every worker's table together, held under `max_clients`: a worker may
    /// be serving nearly all of them (one proxy's few connections), so the bound is on the
    /// sum, not a share each.
    clients: Arc<AtomicUsize>,
    max_clients: usize,
}

impl RecentVisitors {
    fn new(clients: Arc<AtomicUsize>, max_clients: usize) -> Self {
        RecentVisitors {
            by_client: HashMap::new(),
            clients,
            max_clients: max_clients.max(1),
        }
    }

    fn record(&mut self, client: IpAddr, room: usize, visitor: VisitorId) {
        // A client seen before (every request after its first) costs one lookup.
        if let Some(list) = self.by_client.get_mut(&client) {
            if list.contains(&(room, visitor)) {
                return;
            }
            if list.len() >= RECENT_PER_CLIENT {
                list.remove(0);
            }
            list.push((room, visitor));
            return;
        }
        // At the bound, one of this table's own goes (a table with none of its own adds
        // one anyway: the sum stays within one per worker of the bound).
        if self.clients.load(Ordering::Relaxed) >= self.max_clients
            && let Some(evict) = self.by_client.keys().next().copied()
        {
            self.by_client.remove(&evict);
            self.clients.fetch_sub(1, Ordering::Relaxed);
        }
        self.by_client.insert(client, vec![(room, visitor)]);
        self.clients.fetch_add(1, Ordering::Relaxed);
    }

    /// Removes and returns the visitors of clients for which `banned` is true.
    fn take_where(&mut self, banned: impl Fn(IpAddr) -> bool) -> Vec<(usize, VisitorId)> {
        let clients: Vec<IpAddr> = self
            .by_client
            .keys()
            .copied()
            .filter(|ip| banned(*ip))
            .collect();
        self.clients.fetch_sub(clients.len(), Ordering::Relaxed);
        clients
            .into_iter()
            .flat_map(|ip| self.by_client.remove(&ip).unwrap_or_default())
            .collect()
    }
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

/// `Retry-After` on a refused stream or tunnel: about one waiting-page refresh.
const STREAM_RETRY_AFTER_SECS: u64 = 10;

impl App {
    pub fn new(
        config: &Config,
        admission: Arc<Admission>,
        abuse: Arc<AbuseRegistry>,
    ) -> Result<App, AppError> {
        let mut rooms = Vec::new();
        let mut hosts = HashMap::new();
        let mut catch_all = None;
        for (i, room) in config.rooms.iter().enumerate() {
            let origin = Origin::new(&room.origin).map_err(|source| BadOrigin {
                room: room.name.clone(),
                source,
            })?;
            match &room.match_host {
                Some(host) => {
                    hosts.insert(host.to_ascii_lowercase(), i);
                }
                None => catch_all = Some(i),
            }
            rooms.push(Room {
                config: room.clone(),
                origin,
                paths: RoomPaths::of(room),
                inflight: None,
                streams: Arc::default(),
            });
        }
        let previous: Vec<&[u8]> = config
            .previous_cookie_secrets
            .iter()
            .map(|s| s.expose())
            .collect();
        let room_names: Vec<String> = config.rooms.iter().map(|r| r.name.clone()).collect();
        let mut metrics = Metrics::new(
            admission.clone(),
            room_names.clone(),
            config.fail_open,
            Some(abuse.clone()),
        );
        let access_log = if config.access_log == access_log::Target::Off {
            None
        } else {
            AccessLog::open(
                &config.access_log,
                room_names.clone(),
                metrics.access_log_dropped(),
                metrics.access_log_suppressed(),
            )
            .map_err(AppError::AccessLog)?
        };
        for room in &mut rooms {
            room.inflight = classes::Inflight::of(
                room.config.max_inflight,
                room.config.inflight_wait,
                metrics.inflight_gauge(&room.config.name),
            );
        }
        Ok(App {
            rooms,
            room_names,
            hosts,
            catch_all,
            admission,
            live: LiveHub::new(crate::live::StreamBudget::new(
                config.server.max_streams,
                config.server.max_streams_per_client,
            )),
            cookies: CookieKeys::new(config.cookie_secret.expose(), &previous),
            secure_cookies: config.secure_cookies,
            trusted: TrustedProxies::new(config.trusted_proxies.clone()),
            public_scheme: config.public_scheme,
            origin_clients: {
                let timeouts = ProxyTimeouts {
                    connect: config.server.origin_connect_timeout,
                    response: config.server.origin_timeout,
                    idle: config.server.idle_timeout,
                    body: config.server.body_timeout,
                };
                let tls = crate::config::origins_tls_config(config).map_err(AppError::OriginTls)?;
                PerWorker::new(config.server.workers, || {
                    OriginClient::with_tls(timeouts, tls.clone())
                })
            },
            pages: Pages::default().with_operator_page(&config.waiting_page),
            origin_errors: LogLimiter::new(Duration::from_secs(10)),
            unreadable_forwarded: LogLimiter::new(Duration::from_secs(10)),
            admin: Admin::new(config, abuse.clone()),
            metrics,
            signer: config.admission_key.as_ref().map(|key| {
                AdmissionSigner::new(
                    AdmissionKey::clone(key),
                    ADMISSION_TOKEN_LIFETIME,
                    ADMISSION_SIGNER_CAPACITY,
                )
            }),
            admission_key_document: config.admission_key.as_ref().map(|key| {
                serde_json::to_vec(&key.public().document())
                    .unwrap_or_default()
                    .into()
            }),
            draining: AtomicBool::new(false),
            admin_on_public: config.admin_listen.is_none(),
            admin_allow: config.admin_allow.clone(),
            abuse,
            recent: {
                let clients = Arc::new(AtomicUsize::new(0));
                PerWorker::new(config.server.workers, || {
                    Mutex::new(RecentVisitors::new(clients.clone(), RECENT_CLIENTS))
                })
            },
            priority_secret: config.priority_secret.clone(),
            access_log,
            draws: draw::DrawCache::new(&config.rooms),
        })
    }

    pub fn room_names(&self) -> Vec<String> {
        self.room_names.clone()
    }

    /// What the admin API may see of this instance.
    pub fn admin_context(&self) -> AdminContext<'_> {
        AdminContext {
            admin: &self.admin,
            admission: &self.admission,
            metrics: &self.metrics,
            live: &self.live,
            rooms: &self.room_names,
            limits: self
                .rooms
                .iter()
                .map(|room| admin::RoomLimits {
                    inflight: room.inflight.as_ref().map(|i| admin::InflightNow {
                        now: i.in_flight(),
                        max: i.max(),
                    }),
                    max_waiting: room.config.max_waiting,
                })
                .collect(),
        }
    }

    /// The one request path: identify, classify, decide, respond (and log).
    pub async fn handle(&self, req: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
        let head_at = self
            .access_log
            .as_ref()
            .map(|_| (SystemTime::now(), Instant::now()));
        let identity = self.identify(&req, peer);
        let started = head_at.map(|at| access_started(at, &req, &identity));
        // Every log line about this request carries its id (SPEC §6).
        let request_id = identity.request_id.clone();
        let (mut response, class) =
            logging::in_request(request_id, self.handle_identified(req, identity)).await;
        // Everything but the origin's own answers is ours and carries SPEC §5's headers.
        if response.extensions().get::<respond::Proxied>().is_none() {
            pages::add_security_headers(response.headers_mut());
        }
        self.logged(started, class, response)
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
        mut req: Request<Incoming>,
        identity: Identity,
    ) -> (Response<Body>, &'static str) {
        let peer = identity.peer;
        let room = identity.room.map(|i| &self.rooms[i]);
        // A request whose forwarding header cannot be read has no client to judge: it is
        // refused before anything, the ban check included (SPEC §10, "One identity per
        // request").
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
        // SPEC §10's fixed order: the ban check here, then `classify`'s; this is the one
        // place acting on it.
        // SPEC §10 step 1: a banned client gets nothing else, reserved routes included,
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
                room.map(|r| &r.paths),
                identity.fetch,
            )
        };
        let label = class.label();
        // Every class but the site is boxed: this future is moved on every request (hyper
        // keeps it in its connection), and inline the admin API and the rest made it 9 KB
        // for the admitted visitor who uses none of them.
        let response = match class {
            Class::Banned(verdict) => self.error(GateError::banned(&verdict), &identity),
            Class::Refused(kind) => self.error(kind, &identity),
            Class::OptionsAny => self.options_any(),
            Class::Healthz => pages::plain(StatusCode::OK, "ok\n"),
            Class::Readyz => Box::pin(self.readyz()).await,
            Class::Events => self.events(&identity),
            // With an admin listener the public one has no admin at all (§8).
            Class::Admin if !self.admin_on_public => self.error(Kind::NotFound, &identity),
            Class::Admin => Box::pin(self.admin(req, &identity, peer)).await,
            Class::Static(name) => assets::serve(&name, req.method() == Method::HEAD)
                .unwrap_or_else(|| self.error(Kind::NotFound, &identity)),
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
            Class::Asset => match room {
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

    /// SPEC §10 step 3: a request to one of `abuse.ban_paths` bans its client at once;
    /// nothing is proxied. A client in `abuse.allow` (or a trusted proxy) is not banned and
    /// gets a 404, and so does a cross-site request: another site's page can make a
    /// browser ask for `/.env`, and that must not ban the visitor.
    async fn ban_path(&self, req: &Request<Incoming>, identity: &Identity) -> Response<Body> {
        if identity.fetch.cross_site {
            return self.error(Kind::NotFound, identity);
        }
        let path = classify::normalized_path(req.uri().path());
        match self.abuse.hit_ban_path(identity.client_ip, &path).await {
            PathOutcome::Banned(ban) => {
                tracing::warn!(client = %identity.client_ip, path = %path, until_ms = ?ban.until_ms, "ban path requested; client banned");
                let verdict =
                    self.abuse
                        .check(identity.client_ip)
                        .unwrap_or(crate::abuse::BanVerdict {
                            retry_after: Some(self.abuse.policy().cooldown),
                            ban,
                        });
                self.error(GateError::banned(&verdict), identity)
            }
            // `NotBanPath` cannot follow `Class::BanPath` (one glob set decides both); the
            // safe answer is the same.
            PathOutcome::Immune | PathOutcome::NotBanPath | PathOutcome::Full => {
                self.error(Kind::NotFound, identity)
            }
        }
    }

    /// Records a strike: embedded, before the next request is judged; with Redis in the
    /// background, since it is a store round trip no request waits for.
    pub(crate) fn strike(&self, ip: IpAddr, reason: StrikeReason) {
        self.abuse.strike_soon(ip, reason);
    }

    /// Remembers that `client` was admitted as `visitor` in room `room` (for [`App::sweep_banned`]).
    fn record_admitted(&self, client: IpAddr, room: usize, visitor: VisitorId) {
        self.recent
            .get()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .record(crate::abuse::client_ip(client), room, visitor);
    }

    /// A banned client's visitors stop holding anything (SPEC §10): their live streams
    /// close (so heartbeats stop and waiting visitors are abandoned after `abandon_after`),
    /// their streams and tunnels to the origin close, and the sessions this replica
    /// admitted them to end now. Runs every second; costs nothing while no ban is active.
    pub async fn sweep_banned(&self) {
        if self.abuse.bans_active() == 0 {
            return;
        }
        let abuse = &self.abuse;
        let closed = self.live.close_where(|ip| abuse.is_banned(ip));
        let origin_streams: usize = (self.rooms.iter())
            .map(|room| room.streams.end_where(|ip| abuse.is_banned(ip)))
            .sum();
        let ended: Vec<(usize, VisitorId)> = (self.recent.all())
            .flat_map(|recent| {
                (recent.lock().unwrap_or_else(|p| p.into_inner()))
                    .take_where(|ip| abuse.is_banned(ip))
            })
            .collect();
        let mut sessions = 0;
        for (room, visitor) in ended {
            if let Ok(true) = self
                .admission
                .end_session(&self.rooms[room].config.name, visitor)
                .await
            {
                sessions += 1;
            }
        }
        if closed > 0 || sessions > 0 || origin_streams > 0 {
            tracing::info!(
                streams = closed,
                origin_streams,
                sessions,
                "banned clients' streams closed and sessions ended"
            );
        }
    }

    /// The admin listener (`admin_listen`): the control room, the admin API, `/metrics`
    /// (the API's metrics at the path Prometheus expects), and the health checks; nothing
    /// else, and never the site.
    pub async fn handle_admin(&self, req: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
        let head_at = self
            .access_log
            .as_ref()
            .map(|_| (SystemTime::now(), Instant::now()));
        let identity = self.identify(&req, peer);
        let started = head_at.map(|at| access_started(at, &req, &identity));
        let (response, class) = self.admin_identified(req, identity, peer).await;
        self.logged(started, class, response)
    }

    async fn admin_identified(
        &self,
        mut req: Request<Incoming>,
        identity: Identity,
        peer: SocketAddr,
    ) -> (Response<Body>, &'static str) {
        if identity.bad_forwarded {
            return (
                self.error(Kind::BadForwardedFor, &identity),
                classify::INVALID_LABEL,
            );
        }
        // Bans apply here exactly as on the public listener (SPEC §10), probes excepted.
        if let Some(verdict) = &identity.banned
            && classify::probe(&req).is_none()
        {
            let class = Class::Banned(verdict.clone());
            return (
                self.error(GateError::banned(verdict), &identity),
                class.label(),
            );
        }
        // Refused targets (absolute-form, CONNECT) stay refused, `/metrics` included: the
        // rewrite below would otherwise drop the authority that marks them.
        let no_ban_paths = crate::glob::GlobSet::default();
        let fetch = identity.fetch;
        if let Class::Refused(kind) = classify(&req, &no_ban_paths, None, fetch) {
            return (self.error(kind, &identity), classify::INVALID_LABEL);
        }
        if req.uri().path() == "/metrics" {
            *req.uri_mut() = http::Uri::from_static(admin::METRICS_PATH);
        }
        let class = classify(&req, &no_ban_paths, None, fetch);
        let label = class.label();
        let response = match class {
            Class::Healthz => pages::plain(StatusCode::OK, "ok\n"),
            Class::Readyz => self.readyz().await,
            Class::Admin => self.admin(req, &identity, peer).await,
            Class::Refused(kind) => self.error(kind, &identity),
            _ => return (self.error(Kind::NotFound, &identity), "reserved"),
        };
        (response, label)
    }

    /// Everything under `/__anteroom/admin`, on whichever listener serves it. `admin_allow`
    /// is checked against the client address as the rest of the request path sees it: the
    /// direct peer, or what a trusted proxy forwarded for (an untrusted peer cannot claim
    /// an allowed address with `X-Forwarded-For`).
    async fn admin(
        &self,
        req: Request<Incoming>,
        identity: &Identity,
        peer: SocketAddr,
    ) -> Response<Body> {
        if !self.admin_allow.is_empty()
            && !self
                .admin_allow
                .iter()
                .any(|net| net.contains(&identity.client_ip))
        {
            return admin::forbidden("This address may not reach the admin (admin_allow).");
        }
        admin::handle(&self.admin_context(), req, identity.client_ip, peer).await
    }

    /// Starts a drain (§11): readiness is 503 from now on, while requests are still served.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Whether this replica should get traffic (§8): not while draining; yes while the store
    /// answers; and yes while failing open on purpose, since every replica sees the same
    /// outage and a load balancer with no ready replica would refuse everyone instead.
    async fn readyz(&self) -> Response<Body> {
        if self.is_draining() {
            return pages::plain(StatusCode::SERVICE_UNAVAILABLE, "draining\n");
        }
        match self.admission.ping().await {
            Ok(()) => pages::plain(StatusCode::OK, "ready\n"),
            Err(_) if self.admission.health().failing_open() => pages::plain(
                StatusCode::OK,
                "ready (failing open: the queue store is down)\n",
            ),
            Err(_) => pages::plain(StatusCode::SERVICE_UNAVAILABLE, "queue store unavailable\n"),
        }
    }

    /// `GET /__anteroom/admission-key`: the public key an origin verifies
    /// `X-Anteroom-Admission` with; 404 when no `admission_key` is set.
    fn admission_key(&self, identity: &Identity) -> Response<Body> {
        match &self.admission_key_document {
            Some(doc) => Response::builder()
                .status(StatusCode::OK)
                .header(http::header::CONTENT_TYPE, "application/json")
                .header(http::header::CACHE_CONTROL, "public, max-age=300")
                .body(crate::http::body::full(doc.clone()))
                .unwrap_or_else(|_| self.error(Kind::NotFound, identity)),
            None => self.error(Kind::NotFound, identity),
        }
    }

    fn events(&self, identity: &Identity) -> Response<Body> {
        match (identity.room, identity.visitor) {
            (Some(room), Some(visitor)) => match self.live.budget.stream(identity.client) {
                Ok(ticket) => self.live.subscribe(
                    &self.rooms[room].config.name,
                    visitor,
                    identity.client_ip,
                    ticket,
                ),
                Err(refused) => self.stream_refused(refused, identity),
            },
            _ => self.error(Kind::NotInLine, identity),
        }
    }

    /// A stream or tunnel over its budget: 503 (all streams taken) or 429 (this client's
    /// share), with `Retry-After`, and the connection closed so it frees its slot at once.
    pub(super) fn stream_refused(
        &self,
        refused: crate::live::StreamRefused,
        identity: &Identity,
    ) -> Response<Body> {
        let kind = match refused {
            crate::live::StreamRefused::Full => Kind::StreamsFull,
            crate::live::StreamRefused::ClientShare => Kind::TooManyStreams,
        };
        let mut response = self.error(
            GateError {
                retry_after: Some(STREAM_RETRY_AFTER_SECS),
                ..GateError::new(kind)
            },
            identity,
        );
        response.headers_mut().insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_visitors_are_bounded_per_client_and_per_table() {
        let clients = Arc::new(AtomicUsize::new(0));
        let mut recent = RecentVisitors::new(clients.clone(), 2);
        let (a, b, c): (IpAddr, IpAddr, IpAddr) = (
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            "10.0.0.3".parse().unwrap(),
        );
        let visitors: Vec<VisitorId> = (0..=RECENT_PER_CLIENT)
            .map(|_| VisitorId::random())
            .collect();
        // The same visitor again is not a second entry.
        recent.record(a, 0, visitors[0]);
        recent.record(a, 0, visitors[0]);
        assert_eq!(recent.by_client[&a], vec![(0, visitors[0])]);
        // One more than a client keeps: its oldest is forgotten.
        for v in &visitors[1..] {
            recent.record(a, 0, *v);
        }
        let kept: Vec<VisitorId> = recent.by_client[&a].iter().map(|e| e.1).collect();
        assert_eq!(kept, visitors[1..]);
        // A third client in a table of two forgets one of the others.
        recent.record(b, 1, visitors[0]);
        recent.record(c, 1, visitors[0]);
        assert_eq!(recent.by_client.len(), 2);
        assert!(recent.by_client.contains_key(&c));
        // The bound is on every worker's table together: another table at the bound
        // evicts from itself, and one with none of its own adds one anyway.
        let mut other = RecentVisitors::new(clients.clone(), 2);
        other.record(a, 0, visitors[0]);
        assert_eq!(clients.load(Ordering::Relaxed), 3);
        let d: IpAddr = "10.0.0.4".parse().unwrap();
        other.record(d, 0, visitors[0]);
        assert_eq!(other.by_client.len(), 1);
        assert_eq!(clients.load(Ordering::Relaxed), 3);
        drop(other.take_where(|_| true));
        assert_eq!(clients.load(Ordering::Relaxed), 2);
        // A ban takes its client's visitors out.
        let taken = recent.take_where(|ip| ip == c);
        assert_eq!(taken, vec![(1, visitors[0])]);
        assert!(!recent.by_client.contains_key(&c));
        assert_eq!(recent.by_client.len(), 1);
    }
}
