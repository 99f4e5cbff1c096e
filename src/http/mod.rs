//! Everything HTTP. [`App::handle`] is the one request path, read top to bottom:
//! identify (client, room, visitor cookie), classify (reserved path or the site), decide
//! (the store, through [`Admission`]), respond (proxy, waiting page, or a page of ours).

pub mod admin;
pub mod assets;
pub mod body;
pub mod client;
pub mod i18n;
pub mod live;
pub mod metrics;
pub mod pages;
pub mod proxy;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::{Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;

use crate::admission::{Admission, Decision, Eta};
use crate::config::{Config, RoomConfig};
use crate::log_limiter::LogLimiter;
use crate::queue::{Place, VisitorId};
use crate::token::{self, CookieKeys};
use body::Body;
use client::{ClientKey, TrustedProxies};
use live::LiveHub;
use pages::{Pages, Phase, RoomText, VisitorStatus, WaitingView};
use proxy::{ForwardContext, Origin, OriginClient, ProxyError};

/// Everything under this prefix is anteroom's own and never proxied.
pub const RESERVED_PREFIX: &str = "/__anteroom/";

/// One room as the request path needs it.
pub struct Room {
    pub config: RoomConfig,
    pub origin: Origin,
}

/// The shared state of the public listener.
pub struct App {
    rooms: Vec<Room>,
    /// Lower-cased host (no port) → index into `rooms`.
    hosts: HashMap<String, usize>,
    catch_all: Option<usize>,
    pub admission: Arc<Admission>,
    pub live: LiveHub,
    cookies: CookieKeys,
    secure_cookies: bool,
    trusted: TrustedProxies,
    origin_client: OriginClient,
    pages: Pages,
    origin_errors: LogLimiter,
    admin: admin::Admin,
    pub metrics: metrics::Metrics,
}

/// What a request is for, decided from its path alone.
enum Class {
    Healthz,
    Readyz,
    Events,
    /// `/__anteroom/admin` and everything below it: [`admin::handle`].
    Admin,
    /// A built-in front-end file, `/__anteroom/static/{name}`.
    Static(String),
    /// Under `/__anteroom/` but nothing we serve.
    UnknownReserved,
    Site,
}

fn classify(req: &Request<Incoming>) -> Class {
    let path = req.uri().path();
    let Some(reserved) = path.strip_prefix(RESERVED_PREFIX) else {
        // `/__anteroom` without the slash is reserved too.
        if path == "/__anteroom" {
            return Class::UnknownReserved;
        }
        return Class::Site;
    };
    match (req.method(), reserved) {
        (&Method::GET | &Method::HEAD, "healthz") => Class::Healthz,
        (&Method::GET | &Method::HEAD, "readyz") => Class::Readyz,
        (&Method::GET, "events") => Class::Events,
        (_, p) if p == "admin" || p.starts_with("admin/") => Class::Admin,
        (&Method::GET | &Method::HEAD, p) if p.starts_with("static/") => {
            Class::Static(p["static/".len()..].to_owned())
        }
        _ => Class::UnknownReserved,
    }
}

/// Who is asking, established before anything else runs.
struct Identity {
    /// Behind trusted proxies, the address they forwarded for; else the peer.
    client_ip: IpAddr,
    /// What the join limit counts: the IPv4 address or the IPv6 /64 of `client_ip`.
    client: ClientKey,
    room: Option<usize>,
    /// The verified visitor of this room, if the cookie verified.
    visitor: Option<VisitorId>,
    wants_json: bool,
    /// The language of our pages, from `Accept-Language`.
    lang: i18n::Lang,
}

impl App {
    pub fn new(config: &Config, admission: Arc<Admission>) -> anyhow::Result<App> {
        let mut rooms = Vec::new();
        let mut hosts = HashMap::new();
        let mut catch_all = None;
        for (i, room) in config.rooms.iter().enumerate() {
            let origin = Origin::new(&room.origin)
                .map_err(|e| anyhow::anyhow!("rooms.{}.origin: {e}", room.name))?;
            match &room.match_host {
                Some(host) => {
                    hosts.insert(host.to_ascii_lowercase(), i);
                }
                None => catch_all = Some(i),
            }
            rooms.push(Room {
                config: room.clone(),
                origin,
            });
        }
        let previous: Vec<&[u8]> = config
            .previous_cookie_secrets
            .iter()
            .map(|s| s.expose())
            .collect();
        let metrics = metrics::Metrics::new(
            admission.clone(),
            config.rooms.iter().map(|r| r.name.clone()).collect(),
            config.fail_open,
        );
        Ok(App {
            rooms,
            hosts,
            catch_all,
            admission,
            live: LiveHub::default(),
            cookies: CookieKeys::new(config.cookie_secret.expose(), &previous),
            secure_cookies: config.secure_cookies,
            trusted: TrustedProxies::new(config.trusted_proxies.clone()),
            origin_client: OriginClient::new(proxy::ProxyTimeouts {
                connect: config.server.origin_connect_timeout,
                response: config.server.origin_timeout,
                idle: config.server.idle_timeout,
            }),
            pages: Pages::default().with_operator_page(&config.waiting_page),
            origin_errors: LogLimiter::new(std::time::Duration::from_secs(10)),
            admin: admin::Admin::new(config),
            metrics,
        })
    }

    pub fn room_names(&self) -> Vec<String> {
        self.rooms.iter().map(|r| r.config.name.clone()).collect()
    }

    /// The one request path.
    pub async fn handle(&self, req: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
        // Identify.
        let identity = self.identify(&req, peer);

        // Classify. Absolute-form targets name a host of the client's choosing; a reverse
        // proxy never needs them, so they are refused before anything can route on them.
        if is_absolute_form(&req) {
            return self.message(
                StatusCode::BAD_REQUEST,
                "Bad request",
                "Absolute-form request targets are not accepted.",
                identity.wants_json,
            );
        }
        if req.method() == Method::CONNECT {
            return self.message(
                StatusCode::METHOD_NOT_ALLOWED,
                "Method not allowed",
                "CONNECT is not supported.",
                identity.wants_json,
            );
        }
        match classify(&req) {
            Class::Healthz => return pages::plain(StatusCode::OK, "ok\n"),
            Class::Readyz => return self.readyz().await,
            Class::UnknownReserved => {
                return self.message(
                    StatusCode::NOT_FOUND,
                    "Not found",
                    "There is nothing here.",
                    identity.wants_json,
                );
            }
            Class::Events => return self.events(&identity),
            Class::Admin => return admin::handle(self, req, identity.client_ip, peer).await,
            Class::Static(name) => {
                return assets::serve(&name, req.method() == Method::HEAD).unwrap_or_else(|| {
                    self.message(
                        StatusCode::NOT_FOUND,
                        "Not found",
                        "There is nothing here.",
                        identity.wants_json,
                    )
                });
            }
            Class::Site => {}
        }
        let Some(room_index) = identity.room else {
            return self.message(
                StatusCode::NOT_FOUND,
                "Unknown site",
                "This address is not served here.",
                identity.wants_json,
            );
        };
        let room = &self.rooms[room_index];

        // Decide.
        let (visitor, new_cookie) = match identity.visitor {
            Some(v) => (v, false),
            None => (VisitorId::random(), true),
        };
        let decision = self
            .admission
            .decide(&room.config.name, visitor, identity.client)
            .await;

        // Respond.
        let mut response = match decision {
            Decision::Admitted | Decision::Stalled { fail_open: true } => {
                let proxied = self.proxy(room, req, &identity);
                self.metrics.time_proxy(&room.config.name, proxied).await
            }
            Decision::Waiting(place) => self.waiting(room, place, &identity),
            Decision::Refused { retry_after } => self.refused(room, retry_after, &identity),
            Decision::NotOpen => self.not_open(room, &identity),
            Decision::Closed => self.closed(room, &identity),
            Decision::Stalled { fail_open: false } => self.stalled(room, &identity),
        };
        // A refused newcomer is not anyone yet: no cookie to remember them by.
        let refused = matches!(decision, Decision::Refused { .. });
        if (new_cookie && !refused) || matches!(decision, Decision::Waiting(_)) {
            // Re-issued on every waiting page so the cookie's age slides while they wait.
            let value = self
                .cookies
                .issue(visitor, &room.config.name, SystemTime::now());
            response.headers_mut().append(
                header::SET_COOKIE,
                token::set_cookie(&value, self.secure_cookies),
            );
        }
        response
    }

    fn identify(&self, req: &Request<Incoming>, peer: SocketAddr) -> Identity {
        let client_ip = client::client_ip(peer.ip(), req.headers(), &self.trusted);
        let room = request_host(req)
            .and_then(|host| self.hosts.get(&host).copied())
            .or(self.catch_all);
        let visitor = room.and_then(|i| {
            let value = token::find_cookie(req.headers())?;
            match self.cookies.verify(value, SystemTime::now()) {
                Ok(claim) if claim.room == self.rooms[i].config.name => Some(claim.visitor),
                Ok(_) => None,
                Err(e) => {
                    tracing::debug!(%client_ip, error = %e, "visitor cookie rejected");
                    None
                }
            }
        });
        Identity {
            client_ip,
            client: ClientKey::from(client_ip),
            room,
            visitor,
            wants_json: pages::prefers_json(req.headers().get(header::ACCEPT)),
            lang: i18n::negotiate(req.headers().get(header::ACCEPT_LANGUAGE)),
        }
    }

    async fn readyz(&self) -> Response<Body> {
        match self.admission.store().ping().await {
            Ok(()) => pages::plain(StatusCode::OK, "ready\n"),
            Err(_) => pages::plain(StatusCode::SERVICE_UNAVAILABLE, "queue store unavailable\n"),
        }
    }

    fn events(&self, identity: &Identity) -> Response<Body> {
        match (identity.room, identity.visitor) {
            (Some(room), Some(visitor)) => {
                self.live.subscribe(&self.rooms[room].config.name, visitor)
            }
            _ => self.message(
                StatusCode::NOT_FOUND,
                "Not in line",
                "There is no place in line for this browser.",
                identity.wants_json,
            ),
        }
    }

    async fn proxy(
        &self,
        room: &Room,
        mut req: Request<Incoming>,
        identity: &Identity,
    ) -> Response<Body> {
        token::strip_cookie(req.headers_mut());
        let ctx = ForwardContext {
            client_ip: identity.client_ip,
            proto: "http",
            preserve_host: room.config.preserve_host,
        };
        match self.origin_client.forward(&room.origin, req, &ctx).await {
            Ok(response) => response,
            Err(e) => {
                if self.origin_errors.allow() {
                    tracing::warn!(room = %room.config.name, error = %e, "origin request failed");
                }
                let (title, detail) = match e {
                    ProxyError::Timeout => (
                        "Gateway timeout",
                        "The site took too long to answer. Please try again shortly.",
                    ),
                    ProxyError::BadRequest(_) => {
                        ("Bad request", "The request could not be forwarded.")
                    }
                    _ => (
                        "Bad gateway",
                        "The site could not be reached. Please try again shortly.",
                    ),
                };
                self.message(e.status(), title, detail, identity.wants_json)
            }
        }
    }

    fn waiting(&self, room: &Room, place: Place, identity: &Identity) -> Response<Body> {
        let eta = self.admission.eta_for(&room.config.name, &place);
        let doors = room.config.schedule.admits_at;
        let retry_after_secs = match (place.phase, doors) {
            // Nobody moves before the doors: come back then, or every 30 s.
            (Phase::Draw, Some(at)) => secs_until(at).clamp(2, 30),
            _ => retry_after(eta),
        };
        let view = WaitingView {
            status: VisitorStatus::Waiting,
            room: room.config.name.clone(),
            position: place.position,
            waiting: place.waiting,
            eta_secs: eta,
            retry_after_secs,
            phase: place.phase,
            paused: place.paused,
            // The draw counts down to the doors.
            phase_ends_at: doors.filter(|_| place.phase == Phase::Draw),
        };
        self.render_waiting(room, view, identity)
    }

    /// The waiting page (or its JSON) in the visitor's language, with the room's status code.
    fn render_waiting(
        &self,
        room: &Room,
        view: WaitingView,
        identity: &Identity,
    ) -> Response<Body> {
        let status = StatusCode::from_u16(room.config.queue_status_code).unwrap_or(StatusCode::OK);
        self.pages.waiting(
            &view,
            &room_text(room),
            status,
            identity.wants_json,
            identity.lang,
        )
    }

    /// A body for JSON clients that were not let in (SPEC §5): no place, just the status.
    fn placeless(
        &self,
        room: &Room,
        status: VisitorStatus,
        phase: Phase,
        retry_after_secs: u64,
    ) -> WaitingView {
        WaitingView {
            status,
            room: room.config.name.clone(),
            position: None,
            waiting: self.cached_waiting(room),
            eta_secs: Eta { min: 0, max: 0 },
            retry_after_secs,
            phase,
            paused: false,
            phase_ends_at: None,
        }
    }

    /// A newcomer over their address's join limit: 429 until their window is over.
    fn refused(&self, room: &Room, retry_after: Duration, identity: &Identity) -> Response<Body> {
        let retry_after_secs = retry_after.as_secs_f64().ceil().max(1.0) as u64;
        if identity.wants_json {
            let view = self.placeless(
                room,
                VisitorStatus::Refused,
                self.phase_now(room),
                retry_after_secs,
            );
            return self.pages.waiting(
                &view,
                &room_text(room),
                StatusCode::TOO_MANY_REQUESTS,
                true,
                identity.lang,
            );
        }
        self.pages.refused(identity.lang, retry_after_secs, false)
    }

    /// Before `queue_opens_at`: nobody is queued; the page counts down to the opening.
    fn not_open(&self, room: &Room, identity: &Identity) -> Response<Body> {
        let opens = room.config.schedule.queue_opens_at;
        let retry_after_secs = opens.map_or(30, |at| secs_until(at).clamp(2, 30));
        let mut view = self.placeless(
            room,
            VisitorStatus::Waiting,
            Phase::BeforeOpen,
            retry_after_secs,
        );
        view.waiting = 0;
        view.phase_ends_at = opens;
        self.render_waiting(room, view, identity)
    }

    /// After `closes_at`: nobody else gets in.
    fn closed(&self, room: &Room, identity: &Identity) -> Response<Body> {
        const RETRY_SECS: u64 = 300;
        if identity.wants_json {
            let mut view = self.placeless(room, VisitorStatus::Closed, Phase::Closed, RETRY_SECS);
            view.waiting = 0;
            return self.pages.waiting(
                &view,
                &room_text(room),
                StatusCode::SERVICE_UNAVAILABLE,
                true,
                identity.lang,
            );
        }
        self.pages
            .closed(identity.lang, StatusCode::SERVICE_UNAVAILABLE, false)
    }

    /// The room's phase by this replica's clock, for pages the store did not place (a
    /// refusal); the store's clock decides everything else.
    fn phase_now(&self, room: &Room) -> Phase {
        crate::run::room_policy(&room.config).phase_at(crate::queue::unix_ms(SystemTime::now()))
    }

    /// How many wait in `room`, as last read (at most about a second old).
    fn cached_waiting(&self, room: &Room) -> u64 {
        self.admission
            .cached_stats(&room.config.name)
            .map_or(0, |s| s.stats.waiting)
    }

    fn stalled(&self, room: &Room, identity: &Identity) -> Response<Body> {
        if identity.wants_json {
            let view = WaitingView {
                status: VisitorStatus::Stalled,
                room: room.config.name.clone(),
                position: None,
                waiting: 0,
                eta_secs: Eta { min: 0, max: 0 },
                retry_after_secs: 5,
                phase: Phase::Queueing,
                paused: false,
                phase_ends_at: None,
            };
            return self.pages.waiting(
                &view,
                &room_text(room),
                StatusCode::SERVICE_UNAVAILABLE,
                true,
                identity.lang,
            );
        }
        let t = identity.lang.catalog();
        self.pages.message_in(
            identity.lang,
            StatusCode::SERVICE_UNAVAILABLE,
            Some(VisitorStatus::Stalled),
            i18n::title(&room.config.title, t),
            t.stalled_detail,
            Some(5),
            false,
        )
    }

    fn message(&self, status: StatusCode, title: &str, detail: &str, json: bool) -> Response<Body> {
        self.pages.message(status, None, title, detail, None, json)
    }
}

fn room_text(room: &Room) -> RoomText<'_> {
    RoomText {
        title: &room.config.title,
        message: &room.config.message,
    }
}

/// Whole seconds from now until `at` (0 when it has passed), rounded up.
fn secs_until(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::now())
        .map_or(0, |d| d.as_secs_f64().ceil() as u64)
}

/// How long a waiting client should wait before asking again: the soonest they could be
/// let in, kept between 2 and 30 seconds.
fn retry_after(eta: Eta) -> u64 {
    eta.min.clamp(2, 30)
}

/// The request's host as rooms match it: from the URI for HTTP/2, else the `Host` header.
fn request_host<B>(req: &Request<B>) -> Option<String> {
    let raw = match req.uri().host() {
        Some(host) if req.version() == http::Version::HTTP_2 => host,
        _ => req.headers().get(header::HOST)?.to_str().ok()?,
    };
    Some(crate::config::normalize_host(raw))
}

/// An HTTP/1 request whose target names a host (`GET http://elsewhere/ HTTP/1.1`).
fn is_absolute_form<B>(req: &Request<B>) -> bool {
    req.version() < http::Version::HTTP_2 && req.uri().authority().is_some()
}
