//! The request path of the public listener. [`App::handle`] is the one function every
//! request goes through, and reads in DESIGN's order:
//!
//! 1. [`identify`] — client address and key, room by host, verified visitor cookie;
//! 2. [`classify`](mod@classify) — one [`Class`], in SPEC §10's fixed order, matched explicitly below;
//! 3. [`decide`] — for the site, [`Admission`] resolves the visitor;
//! 4. [`respond`] — proxy ([`crate::proxy`]), waiting page, 429, holding page, or a
//!    [`GateError`] through its one mapping ([`error`]).
//!
//! What is not the request path lives elsewhere: forwarding in [`crate::proxy`], the admin
//! API in [`crate::admin`] (handed an [`AdminContext`], not the app), the live streams in
//! [`crate::live`], the metrics registry in [`crate::metrics`].

pub mod classify;
pub mod decide;
pub mod error;
pub mod identify;
pub mod respond;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;

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
use crate::metrics::Metrics;
use crate::proxy::{Origin, OriginClient, ProxyError, ProxyTimeouts};
use crate::token::CookieKeys;
pub use classify::{Class, RESERVED_PREFIX, classify};
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
    OriginTls(String),
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
    origin_client: OriginClient,
    pages: Pages,
    origin_errors: LogLimiter,
    admin: Admin,
    pub metrics: Metrics,
    /// Signs `X-Anteroom-Admission` (SPEC §14) when `admission_key` is set.
    signer: Option<AdmissionSigner>,
    /// The public `/__anteroom/admission-key` document, serialised once.
    admission_key_document: Option<bytes::Bytes>,
    /// Verifies priority grants (SPEC §10); `None`: a grant is ignored.
    priority_secret: Option<crate::config::Secret>,
}

/// `Retry-After` on a refused stream or tunnel: about one waiting-page refresh.
const STREAM_RETRY_AFTER_SECS: u64 = 10;

impl App {
    pub fn new(config: &Config, admission: Arc<Admission>) -> Result<App, AppError> {
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
            });
        }
        let previous: Vec<&[u8]> = config
            .previous_cookie_secrets
            .iter()
            .map(|s| s.expose())
            .collect();
        let room_names: Vec<String> = config.rooms.iter().map(|r| r.name.clone()).collect();
        let metrics = Metrics::new(admission.clone(), room_names.clone(), config.fail_open);
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
            origin_client: OriginClient::with_tls(
                ProxyTimeouts {
                    connect: config.server.origin_connect_timeout,
                    response: config.server.origin_timeout,
                    idle: config.server.idle_timeout,
                    body: config.server.body_timeout,
                },
                crate::tls::origins_tls_config(config).map_err(AppError::OriginTls)?,
            ),
            pages: Pages::default().with_operator_page(&config.waiting_page),
            origin_errors: LogLimiter::new(Duration::from_secs(10)),
            admin: Admin::new(config),
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
            priority_secret: config.priority_secret.clone(),
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
        }
    }

    /// The one request path: identify, classify, decide, respond.
    pub async fn handle(&self, req: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
        let identity = self.identify(&req, peer);
        match classify(&req) {
            Class::Refused(kind) => self.error(kind, &identity),
            Class::Healthz => pages::plain(StatusCode::OK, "ok\n"),
            Class::Readyz => self.readyz().await,
            Class::Events => self.events(&identity),
            Class::Admin => {
                admin::handle(&self.admin_context(), req, identity.client_ip, peer).await
            }
            Class::Static(name) => assets::serve(&name, req.method() == Method::HEAD)
                .unwrap_or_else(|| self.error(Kind::NotFound, &identity)),
            Class::AdmissionKey => self.admission_key(&identity),
            Class::UnknownReserved => self.error(Kind::NotFound, &identity),
            Class::Grant => match identity.room {
                Some(i) => self.granted(&self.rooms[i], req, &identity).await,
                None => self.error(Kind::UnknownSite, &identity),
            },
            Class::Site => match identity.room {
                Some(i) => self.site(&self.rooms[i], req, &identity).await,
                None => self.error(Kind::UnknownSite, &identity),
            },
        }
    }

    async fn readyz(&self) -> Response<Body> {
        match self.admission.ping().await {
            Ok(()) => pages::plain(StatusCode::OK, "ready\n"),
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
                Ok(ticket) => self
                    .live
                    .subscribe(&self.rooms[room].config.name, visitor, ticket),
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
