//! The control room's backend: the admin API under `/__anteroom/admin/api/`, the page at
//! `/__anteroom/admin/`, and the OpenAPI document. [`handle`] is the one entry point,
//! called from the request path (`gate`) for every path under
//! `/__anteroom/admin` with an [`AdminContext`]: what the admin needs, not the whole app.
//! The admin listener (`admin_listen`, `gate::App::handle_admin`) calls the same
//! [`handle`]; `admin_allow` is checked before it, on either listener.
//!
//! - Every API route except `openapi.json` needs `Authorization: Bearer <token>`:
//!   `admin_token` or one of `admin_tokens`, compared in constant time. Missing or wrong:
//!   401 with `WWW-Authenticate: Bearer`. A named token's role limits what it may call
//!   (`auth::permits`: a viewer reads, an operator changes rooms but not bans; 403
//!   otherwise). `metrics_token`, when set, may only `GET …/api/metrics` (403 for
//!   anything else).
//!   `openapi.json` and the page need no token: they describe the API and hold nothing
//!   about the running rooms.
//! - Order of refusals: unknown path 404, then the token 401, then the method 405 (with
//!   `Allow`), then the token's role 403, then an unknown room 404, then bad input
//!   400/413. Every error is an [`AdminError`], rendered in one place as
//!   `application/problem+json`; input errors carry a `field` member naming what was
//!   wrong, and a refused request changes nothing.
//! - Reads (`rooms`, `stats`, `metrics`, `status`) come from the one-second statistics
//!   cache and the store health tracker, never a store round trip, so they answer through a
//!   store outage. Changes go to the store and apply on the next admission pass; the cache
//!   shows them within about a second.
//! - Every change is appended to the audit log ([`crate::audit`]). A failed audit write
//!   does not undo the change; the response says `"audit": {"written": false, "error": …}`
//!   and an error is logged.
//!
//! The map:
//!
//! - this file — the entry point ([`handle`]: route, authorize, dispatch), the admin's
//!   state ([`Admin`]) and the view of the instance it is given ([`AdminContext`]).
//! - `routes` — the route table ([`routes`](mod@routes), [`Route`], [`Op`]) and the
//!   router (`matchit`).
//! - `api` — the request and response bodies as types: what the handlers serialize and what
//!   the OpenAPI document's schemas are generated from.
//! - `openapi` — the OpenAPI document, generated with utoipa from the handlers'
//!   `#[utoipa::path]` declarations and `api`'s types; `openapi.json` is its committed copy.
//! - `auth` — the bearer tokens, what each grants, and their swap on a reload.
//! - `problem` — [`AdminError`], the one error type, and the one place a refusal becomes a
//!   status and a problem+json body (`api::Problem`); the JSON response helpers.
//! - `body` — reading a request body within its size and time limits.
//! - `status` — `GET …/status`.
//! - `rooms` — room counters, `PUT …/config` ([`parse_patch`]), pause, resume, flush.
//! - `events` — a room's scheduled events (list, create, replace, delete); their bodies'
//!   types are in `event_api`.
//! - `queue` — the line's head, one visitor by reference ([`parse_queue_query`]), moving
//!   a visitor to the front.
//! - `bans` — listing, adding and lifting bans; the ban log.
//! - `record` — the audit line and the `config_changed` event of a change.
//! - `page` — the control room's shell or the placeholder page.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use minijinja::Environment;

use crate::abuse::AbuseRegistry;
use crate::admission::Admission;
use crate::audit::AuditLog;
use crate::config::Config;
use crate::http::assets::{self, Entry};
use crate::http::body::Body;
use crate::live::LiveHub;
use crate::log_limiter::LogLimiter;
use crate::metrics::Metrics;

mod api;
mod auth;
mod bans;
mod body;
mod event_api;
mod events;
mod openapi;
mod page;
mod problem;
mod queue;
mod record;
mod rooms;
mod routes;
mod status;
#[cfg(test)]
mod tests;

use auth::Access;
use problem::respond;

pub use problem::{AdminError, FieldError, forbidden};
pub use queue::{QUEUE_DEFAULT_LIMIT, parse_queue_query};
pub use rooms::{CONFIG_FIELDS, parse_patch};
pub use routes::{Op, Route, routes};

/// The admin API's OpenAPI document, generated from its handlers and types; the server
/// serves it, and `src/admin/openapi.json` is a committed copy kept equal by a test.
pub fn openapi_json() -> &'static str {
    openapi::document()
}

/// Request bodies larger than this are refused with 413.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The admin's root path: the page, and every route below it.
pub const ADMIN_PATH: &str = "/__anteroom/admin";

/// The metrics route; the admin listener also serves it as `/metrics`.
pub const METRICS_PATH: &str = "/__anteroom/admin/api/metrics";

/// The admin side of the listener: the token, the audit log, the placeholder page.
pub struct Admin {
    /// The admin tokens and the metrics token (which may only read the metrics: what
    /// Prometheus holds instead of an admin token).
    tokens: arc_swap::ArcSwap<auth::Tokens>,
    audit: AuditLog,
    fail_open_after: Option<Duration>,
    store_kind: api::StoreKind,
    pages: Environment<'static>,
    /// The control room's script and stylesheets, when the front-end is built in.
    control: Option<Entry>,
    wrong_tokens: LogLimiter,
    /// `server.body_timeout`: a request body's deadline, as on the proxy.
    body_timeout: Duration,
    abuse: Arc<AbuseRegistry>,
}

impl Admin {
    /// The audit log admin changes (and reloads of the file) are written to.
    pub fn audit_log(&self) -> &AuditLog {
        &self.audit
    }

    /// The admin of `config`, striking wrong tokens in `abuse`.
    pub fn new(config: &Config, abuse: Arc<AbuseRegistry>) -> Admin {
        Admin {
            tokens: arc_swap::ArcSwap::from_pointee(auth::Tokens::of(config)),
            audit: AuditLog::new(&config.data_dir),
            fail_open_after: config.fail_open.then_some(config.fail_open_after),
            store_kind: if config.redis.is_embedded() {
                api::StoreKind::Embedded
            } else {
                api::StoreKind::Redis
            },
            pages: page::templates(),
            control: assets::entry(assets::CONTROL_ENTRY),
            wrong_tokens: LogLimiter::new(Duration::from_secs(10)),
            body_timeout: config.server.body_timeout,
            abuse,
        }
    }

    /// The audit log every change is appended to.
    pub fn audit(&self) -> &AuditLog {
        &self.audit
    }
}

/// The narrow view of the running instance the admin API works with.
pub struct AdminContext<'a> {
    /// The admin's own state: tokens, audit log, page.
    pub admin: &'a Admin,
    /// The only door to the store: every change goes through it so failures feed
    /// the store health the status endpoint reports.
    pub admission: &'a Admission,
    /// The registry `…/api/metrics` renders.
    pub metrics: &'a Metrics,
    /// The live streams (their count is in the status and the metrics).
    pub live: &'a LiveHub,
    /// The configured rooms, in config order.
    pub rooms: Vec<String>,
    /// Each room as the file gave it when it was opened (at start or by a reload), in the
    /// order of `rooms`: what the operator's changes apply over.
    pub files: Vec<crate::config::RoomConfig>,
    /// Each room's origin protections on this replica, in the order of `rooms` (read when
    /// the context is made: the tile's in-flight count is live, not from the stats cache).
    pub limits: Vec<RoomLimits>,
}

/// What the room tile shows of a room's origin protections (`max_inflight`, the queue
/// breaker), besides its counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoomLimits {
    /// `max_inflight` on this replica and how many requests are at the origin now;
    /// `None`: no cap.
    pub inflight: Option<InflightNow>,
    /// The queue breaker `max_waiting`; 0: off.
    pub max_waiting: u64,
}

/// A room's origin in-flight cap on this replica, as it stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InflightNow {
    /// Requests at the origin now.
    pub now: u64,
    /// `max_inflight`.
    pub max: u64,
}

impl AdminContext<'_> {
    /// `room`'s limits (none for a room not configured).
    /// `room` as the file gave it, if it is configured.
    fn file_of(&self, room: &str) -> Option<&crate::config::RoomConfig> {
        self.files.iter().find(|r| r.name == room)
    }

    fn limits_of(&self, room: &str) -> RoomLimits {
        self.rooms
            .iter()
            .position(|r| r == room)
            .and_then(|i| self.limits.get(i).copied())
            .unwrap_or_default()
    }
}

/// The one entry point: every request whose path is `/__anteroom/admin` or below it.
pub async fn handle(
    app: &AdminContext<'_>,
    req: Request<Incoming>,
    caller: IpAddr,
    peer: SocketAddr,
) -> Response<Body> {
    dispatch(app, req, caller, peer)
        .await
        .unwrap_or_else(AdminError::into_response)
}

/// Who made a change, for the log and the audit line.
struct Caller {
    ip: IpAddr,
    peer: SocketAddr,
    /// The name of the token used (`admin` for `admin_token`).
    token: std::sync::Arc<str>,
}

/// The route, the token, the method and the room, refused in that order; then the
/// route's handler.
async fn dispatch(
    app: &AdminContext<'_>,
    req: Request<Incoming>,
    caller: IpAddr,
    peer: SocketAddr,
) -> Result<Response<Body>, AdminError> {
    let path = req.uri().path().to_owned();
    if path == ADMIN_PATH || path == "/__anteroom/admin/" {
        return match *req.method() {
            Method::GET | Method::HEAD => Ok(page::page(app, &req)),
            _ => Err(AdminError::MethodNotAllowed {
                allow: "GET, HEAD".to_owned(),
            }),
        };
    }
    let found = routes::find(&path).ok_or(AdminError::NoRoute)?;
    let candidates = found.routes;
    let mut access = None;
    if candidates.iter().any(|r| r.auth) {
        match app.admin.authorize(&req, caller)? {
            Access::Token { name, role } => access = Some((name, role)),
            Access::MetricsOnly => {
                let reads_metrics = candidates
                    .iter()
                    .any(|r| r.op == Op::Metrics && r.method == req.method());
                if !reads_metrics {
                    return Err(AdminError::Forbidden(
                        "The metrics token may only read GET /__anteroom/admin/api/metrics."
                            .to_owned(),
                    ));
                }
            }
        }
    }
    let Some(route) = candidates.iter().find(|r| r.method == req.method()) else {
        let allow: Vec<&str> = candidates.iter().map(|r| r.method.as_str()).collect();
        return Err(AdminError::MethodNotAllowed {
            allow: allow.join(", "),
        });
    };
    let captures = found.captures;
    if let Some((name, role)) = &access
        && !auth::permits(*role, route.op, req.method())
    {
        return Err(AdminError::RoleForbids {
            token: name.to_string(),
            role: role.as_str(),
        });
    }
    let room = match captures.room {
        Some(name) => match app.rooms.iter().find(|r| *r == name) {
            Some(r) => Some(r.as_str()),
            None => return Err(AdminError::UnknownRoom(name.to_owned())),
        },
        None => None,
    };
    let who = Caller {
        ip: caller,
        peer,
        token: access.map_or_else(|| std::sync::Arc::from("-"), |(name, _)| name),
    };
    match (route.op, room) {
        (Op::OpenApi, _) => Ok(respond(
            StatusCode::OK,
            "application/json",
            openapi::serve().to_owned(),
        )),
        (Op::Status, _) => Ok(status::status(app)),
        (Op::Metrics, _) => Ok(status::metrics(app)),
        (Op::Rooms, _) => Ok(rooms::rooms(app)),
        (Op::RoomStats, Some(room)) => rooms::stats(app, room),
        (Op::RoomConfig, Some(room)) => rooms::configure(app, req, room, &who).await,
        (Op::RoomSettings, Some(room)) => rooms::config(app, room).await,
        (Op::Pause, Some(room)) => rooms::pause(app, room, &who).await,
        (Op::Resume, Some(room)) => rooms::resume(app, room, &who).await,
        (Op::Flush, Some(room)) => rooms::flush(app, room, &who).await,
        (Op::Bans, _) => bans::bans(app, &req),
        (Op::BanLog, _) => bans::ban_log(app, &req).await,
        (Op::Ban, _) => bans::ban(app, req, &who).await,
        // The route's pattern always captures a target; an empty one is an unknown ban.
        (Op::Unban, _) => bans::unban(app, captures.target.unwrap_or_default(), &who).await,
        (Op::Queue, Some(room)) => queue::queue(app, &req, room).await,
        (Op::Front, Some(room)) => queue::front(app, room, captures.reference, &who).await,
        (Op::Events, Some(room)) => events::events(app, room).await,
        (Op::CreateEvent, Some(room)) => events::create(app, req, room, &who).await,
        // The route's pattern always captures an id.
        (Op::ReplaceEvent, Some(room)) => {
            events::replace(app, req, room, captures.id.unwrap_or_default(), &who).await
        }
        (Op::DeleteEvent, Some(room)) => {
            events::delete(app, room, captures.id.unwrap_or_default(), &who).await
        }
        (op, None) => unreachable!("{op:?} routes all have a {{room}}"),
    }
}
