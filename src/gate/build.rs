//! Building the public listener's state from the config: each room with its origin and
//! paths, the cookie keys, the origin pools per worker, the metrics, the access log and the
//! admission signer, and the narrower view the admin API is handed ([`AdminContext`]).

use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::abuse::AbuseRegistry;
use crate::access_log::{self, AccessLog};
use crate::admin::{self, Admin, AdminContext};
use crate::admission::Admission;
use crate::config::Config;
use crate::fairness::admission_token::{AdmissionKey, AdmissionSigner};
use crate::http::pages::Pages;
use crate::identity::TrustedProxies;
use crate::live::LiveHub;
use crate::log_limiter::LogLimiter;
use crate::metrics::Metrics;
use crate::proxy::{OriginClient, ProxyError, ProxyTimeouts};
use crate::token::CookieKeys;
use crate::worker::PerWorker;

use super::bans::{RECENT_CLIENTS, RecentVisitors};
use super::{App, RoomTable};
use arc_swap::ArcSwap;

/// How long an `X-Anteroom-Admission` token is valid; the signer re-signs a session's
/// token once half of it has passed, so an origin sees a fresh one at least every 5 min.
const ADMISSION_TOKEN_LIFETIME: Duration = Duration::from_secs(600);
/// Sessions whose tokens are cached (a cache overflow costs a signature, never a token).
const ADMISSION_SIGNER_CAPACITY: usize = 200_000;

/// A room's origin the proxy cannot address (`rooms.<name>.origin`).
#[derive(Debug, thiserror::Error)]
#[error("rooms.{room}.origin: {source}")]
pub struct BadOrigin {
    /// The room whose origin it is.
    pub room: String,
    /// Why the proxy cannot use it.
    #[source]
    pub source: ProxyError,
}

/// Why the public listener's state could not be built.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// A room's origin URL cannot be proxied to.
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

impl App {
    /// The public listener's state: rooms, origins and pages from `config`, over `admission` and `abuse`.
    pub fn new(
        config: &Config,
        admission: Arc<Admission>,
        abuse: Arc<AbuseRegistry>,
    ) -> Result<App, AppError> {
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
        let rooms = RoomTable::next(None, &config.rooms, &[], &metrics)?;
        let room_index_names = Arc::new(ArcSwap::from_pointee(rooms.names_by_index()));
        let rooms = Arc::new(ArcSwap::from_pointee(rooms));
        let access_log = if config.access_log == access_log::Target::Off {
            None
        } else {
            AccessLog::open(
                &config.access_log,
                room_index_names.clone(),
                metrics.access_log_dropped(),
                metrics.access_log_suppressed(),
            )
            .map_err(AppError::AccessLog)?
        };
        // The operator's changes kept in the store are read before the first request is
        // served (the first statistics refresh) and whenever they move.
        admission.on_changes(super::live::listener(rooms.clone()));
        Ok(App {
            rooms,
            room_index_names,
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
            challenge_key: crate::challenge::ChallengeKey::new(config.cookie_secret.expose()),
            body_timeout: config.server.body_timeout,
        })
    }

    /// The admin API's state (its tokens, its audit log).
    pub fn admin_state(&self) -> &Admin {
        &self.admin
    }

    /// The configured rooms' names, in config order.
    pub fn room_names(&self) -> Vec<String> {
        self.rooms.load().names()
    }

    /// What the admin API may see of this instance.
    pub fn admin_context(&self) -> AdminContext<'_> {
        let table = self.rooms.load();
        AdminContext {
            admin: &self.admin,
            admission: &self.admission,
            metrics: &self.metrics,
            live: &self.live,
            rooms: table.names(),
            files: table.configured().map(|r| r.file.clone()).collect(),
            limits: table
                .configured()
                .map(|room| {
                    let live = room.live();
                    admin::RoomLimits {
                        inflight: live.inflight.as_ref().map(|i| admin::InflightNow {
                            now: i.in_flight(),
                            max: i.max(),
                        }),
                        max_waiting: live.config.max_waiting,
                    }
                })
                .collect(),
        }
    }
}
