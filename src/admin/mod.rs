//! The control room's backend (SPEC §8): the admin API under `/__anteroom/admin/api/`, the
//! page at `/__anteroom/admin/`, and the OpenAPI document. [`handle`] is the one
//! entry point, called from the request path ([`crate::gate`]) for every path under
//! `/__anteroom/admin` with an [`AdminContext`]: what the admin needs, not the whole app.
//! The admin listener (`admin_listen`, [`crate::gate::App::handle_admin`]) calls the same
//! [`handle`]; `admin_allow` is checked before it, on either listener.
//!
//! - Every API route except `openapi.json` needs `Authorization: Bearer <admin_token>`,
//!   compared in constant time. Missing or wrong: 401 with `WWW-Authenticate: Bearer`.
//!   `metrics_token`, when set, may only `GET …/api/metrics` (403 for anything else).
//!   `openapi.json` and the page need no token: they describe the API and hold nothing
//!   about the running rooms.
//! - Order of refusals: unknown path 404, then the token 401, then the method 405 (with
//!   `Allow`), then an unknown room 404, then bad input 400/413. Every error is
//!   `application/problem+json`; input errors carry a `field` member naming what was wrong,
//!   and a refused request changes nothing.
//! - Reads (`rooms`, `stats`, `metrics`, `status`) come from the one-second statistics
//!   cache and the store health tracker, never a store round trip, so they answer through a
//!   store outage. Changes go to the store and apply on the next admission pass; the cache
//!   shows them within about a second.
//! - Every change is appended to the audit log ([`crate::audit`]). A failed audit write
//!   does not undo the change (an operator must be able to pause during a disk incident);
//!   the response says `"audit": {"written": false, "error": …}` and an error is logged.
//! - The page is the control room's shell (`templates/control.html`, which loads the
//!   `web/src/control/` entry; the token is typed into it and kept in the tab's
//!   `sessionStorage`) when the front-end is built in, else a placeholder listing the API
//!   with `curl` examples (`templates/admin.html`). Either way it holds no secret.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use minijinja::{Environment, context};
use serde_json::{Value, json};

use crate::abuse::{AbuseRegistry, Ban, BanError, Judged, LogEntry, StrikeReason};
use crate::admission::{Admission, CachedStats};
use crate::audit::{AuditEntry, AuditLog};
use crate::config::{Config, Secret};
use crate::http::assets::{self, Entry};
use crate::http::body::{Body, full};
use crate::http::pages::{FRONTEND_BUILT_IN, STATUS_HEADER};
use crate::live::LiveHub;
use crate::log_limiter::LogLimiter;
use crate::metrics::Metrics;
use crate::queue::{QueueQuery, RoomSettings, SettingsPatch, StoreError};

/// The OpenAPI 3 document of the admin API, kept true by `tests/admin.rs`.
pub const OPENAPI: &str = include_str!("openapi.json");

/// Request bodies larger than this are refused with 413.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

pub const ADMIN_PATH: &str = "/__anteroom/admin";

/// The metrics route; the admin listener also serves it as `/metrics`.
pub const METRICS_PATH: &str = "/__anteroom/admin/api/metrics";

/// The fields `PUT …/config` accepts.
pub const CONFIG_FIELDS: [&str; 4] = [
    "rate",
    "max_active",
    "session_ttl_secs",
    "abandon_after_secs",
];

/// What a route does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    OpenApi,
    Status,
    Metrics,
    Rooms,
    RoomStats,
    RoomConfig,
    Pause,
    Resume,
    Flush,
    Bans,
    Ban,
    Unban,
    BanLog,
    /// The head of the line, or one visitor by reference (SPEC §10 "Priority").
    Queue,
    /// Move a waiting visitor to position 1 by reference.
    Front,
}

/// One API route. `{room}` and `{ref}` in a path each match one path segment.
#[derive(Debug)]
pub struct Route {
    pub method: Method,
    pub path: &'static str,
    /// Whether the admin token is required.
    pub auth: bool,
    pub op: Op,
    pub summary: &'static str,
}

/// Every route the admin API serves. The OpenAPI document lists exactly these.
pub fn routes() -> &'static [Route] {
    static ROUTES: std::sync::LazyLock<Vec<Route>> = std::sync::LazyLock::new(|| {
        let route = |method, path, auth, op, summary| Route {
            method,
            path,
            auth,
            op,
            summary,
        };
        vec![
            route(
                Method::GET,
                "/__anteroom/admin/api/openapi.json",
                false,
                Op::OpenApi,
                "this API as an OpenAPI 3 document (no token needed)",
            ),
            route(
                Method::GET,
                "/__anteroom/admin/api/status",
                true,
                Op::Status,
                "queue-store health, fail-open state, version; answers while the store is down",
            ),
            route(
                Method::GET,
                "/__anteroom/admin/api/metrics",
                true,
                Op::Metrics,
                "every room in Prometheus text format",
            ),
            route(
                Method::GET,
                "/__anteroom/admin/api/rooms",
                true,
                Op::Rooms,
                "every room with its counters",
            ),
            route(
                Method::GET,
                "/__anteroom/admin/api/rooms/{room}/stats",
                true,
                Op::RoomStats,
                "one room's counters",
            ),
            route(
                Method::PUT,
                "/__anteroom/admin/api/rooms/{room}/config",
                true,
                Op::RoomConfig,
                "change rate, max_active, session_ttl_secs, abandon_after_secs",
            ),
            route(
                Method::POST,
                "/__anteroom/admin/api/rooms/{room}/pause",
                true,
                Op::Pause,
                "hold everyone where they are",
            ),
            route(
                Method::POST,
                "/__anteroom/admin/api/rooms/{room}/resume",
                true,
                Op::Resume,
                "admit again",
            ),
            route(
                Method::POST,
                "/__anteroom/admin/api/rooms/{room}/flush",
                true,
                Op::Flush,
                "empty the line (sessions on the site are untouched)",
            ),
            route(
                Method::GET,
                "/__anteroom/admin/api/bans",
                true,
                Op::Bans,
                "active bans, newest first (limit, cursor)",
            ),
            route(
                Method::POST,
                "/__anteroom/admin/api/bans",
                true,
                Op::Ban,
                "ban an address or range: target, duration_secs (null: permanent), reason",
            ),
            route(
                Method::GET,
                "/__anteroom/admin/api/bans/log",
                true,
                Op::BanLog,
                "the ban log, newest first (limit, cursor)",
            ),
            route(
                Method::DELETE,
                "/__anteroom/admin/api/bans/{target}",
                true,
                Op::Unban,
                "lift the ban on target (URL-encoded address or CIDR)",
            ),
            route(
                Method::GET,
                "/__anteroom/admin/api/rooms/{room}/queue",
                true,
                Op::Queue,
                "the head of the line (limit, default 50, at most 1000), or one visitor by ref",
            ),
            route(
                Method::POST,
                "/__anteroom/admin/api/rooms/{room}/visitors/{ref}/front",
                true,
                Op::Front,
                "move a waiting visitor to position 1",
            ),
        ]
    });
    &ROUTES
}

/// The segments a route pattern captured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Captures<'a> {
    room: Option<&'a str>,
    reference: Option<&'a str>,
    /// A ban's target (an address or CIDR), not a room.
    target: Option<&'a str>,
}

/// Matches `path` against a route pattern; returns the `{room}`, `{ref}` and `{target}`
/// segments.
fn matches<'a>(pattern: &str, path: &'a str) -> Option<Captures<'a>> {
    let mut captures = Captures::default();
    let mut pattern_parts = pattern.split('/');
    let mut path_parts = path.split('/');
    loop {
        match (pattern_parts.next(), path_parts.next()) {
            (None, None) => return Some(captures),
            (Some("{room}"), Some(segment)) if !segment.is_empty() => captures.room = Some(segment),
            (Some("{ref}"), Some(segment)) if !segment.is_empty() => {
                captures.reference = Some(segment)
            }
            (Some("{target}"), Some(segment)) if !segment.is_empty() => {
                captures.target = Some(segment)
            }
            (Some(p), Some(s)) if p == s => {}
            _ => return None,
        }
    }
}

/// The admin side of the listener: the token, the audit log, the placeholder page.
pub struct Admin {
    token: Secret,
    /// May only read the metrics (§8): what Prometheus holds instead of the admin token.
    metrics_token: Option<Secret>,
    audit: AuditLog,
    fail_open_after: Option<Duration>,
    store_kind: &'static str,
    pages: Environment<'static>,
    /// The control room's script and stylesheets, when the front-end is built in.
    control: Option<Entry>,
    wrong_tokens: LogLimiter,
    /// `server.body_timeout`: a request body's deadline, as on the proxy.
    body_timeout: Duration,
    abuse: Arc<AbuseRegistry>,
}

impl Admin {
    pub fn new(config: &Config, abuse: Arc<AbuseRegistry>) -> Admin {
        let mut pages = Environment::new();
        pages
            .add_template("admin.html", include_str!("templates/admin.html"))
            .expect("built-in admin template parses");
        pages
            .add_template("control.html", include_str!("templates/control.html"))
            .expect("built-in control room template parses");
        Admin {
            token: config.admin_token.clone(),
            metrics_token: config.metrics_token.clone(),
            audit: AuditLog::new(&config.data_dir),
            fail_open_after: config.fail_open.then_some(config.fail_open_after),
            store_kind: if config.redis.is_embedded() {
                "embedded"
            } else {
                "redis"
            },
            pages,
            control: assets::entry(assets::CONTROL_ENTRY),
            wrong_tokens: LogLimiter::new(Duration::from_secs(10)),
            body_timeout: config.server.body_timeout,
            abuse,
        }
    }

    pub fn audit(&self) -> &AuditLog {
        &self.audit
    }

    /// What the request's token grants, or the 401 to answer. Both tokens are compared in
    /// constant time, and both are always compared, so timing does not tell which matched.
    fn authorize(
        &self,
        req: &Request<Incoming>,
        caller: IpAddr,
    ) -> Result<Access, Box<Response<Body>>> {
        let Some(presented) = bearer(req) else {
            return Err(Box::new(unauthorized(
                "Missing admin token",
                "Send Authorization: Bearer <admin_token>.",
            )));
        };
        // The comparison and the strike of a wrong token are one step (SPEC §10): at most
        // `ceil(strikes / 5)` wrong tokens are compared from one client, however many
        // arrive at once.
        let judged = self.abuse.judge(caller, StrikeReason::BadAdminToken, || {
            let admin = self.token.ct_eq(presented);
            let metrics = self
                .metrics_token
                .as_ref()
                .is_some_and(|t| t.ct_eq(presented));
            match (admin, metrics) {
                (true, _) => Some(Access::Admin),
                (false, true) => Some(Access::MetricsOnly),
                (false, false) => None,
            }
        });
        match judged {
            Judged::Passed(access) => Ok(access),
            Judged::Failed => {
                if self.wrong_tokens.allow() {
                    tracing::warn!(%caller, "wrong admin token; further warnings suppressed for 10 s");
                }
                Err(Box::new(unauthorized(
                    "Wrong admin token",
                    "The bearer token is not this anteroom's admin_token.",
                )))
            }
            Judged::Withheld => {
                let mut response = problem(
                    StatusCode::TOO_MANY_REQUESTS,
                    "Too many wrong tokens",
                    "This address sent too many wrong admin tokens; no more are checked for now.",
                    None,
                );
                let wait = self.abuse.policy().window.as_secs().max(1);
                if let Ok(value) = HeaderValue::from_str(&wait.to_string()) {
                    response.headers_mut().insert(header::RETRY_AFTER, value);
                }
                Err(Box::new(response))
            }
        }
    }
}

/// What a valid token allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// `admin_token`: everything.
    Admin,
    /// `metrics_token`: `GET …/api/metrics` only.
    MetricsOnly,
}

/// The 403 for a caller outside `admin_allow` (or a metrics token used for anything else).
pub fn forbidden(detail: &str) -> Response<Body> {
    problem(StatusCode::FORBIDDEN, "Forbidden", detail, None)
}

/// The `Bearer` credentials of the request, if any.
fn bearer(req: &Request<Incoming>) -> Option<&[u8]> {
    let value = req.headers().get(header::AUTHORIZATION)?.as_bytes();
    let space = value.iter().position(|&b| b == b' ')?;
    let (scheme, rest) = value.split_at(space);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let token = rest.trim_ascii();
    (!token.is_empty()).then_some(token)
}

/// The narrow view of the running instance the admin API works with.
pub struct AdminContext<'a> {
    pub admin: &'a Admin,
    /// The only door to the store: every change goes through it so failures feed
    /// the store health the status endpoint reports.
    pub admission: &'a Admission,
    pub metrics: &'a Metrics,
    pub live: &'a LiveHub,
    /// The configured rooms, in config order.
    pub rooms: &'a [String],
    /// Each room's origin protections on this replica, in the order of `rooms` (read when
    /// the context is made: the tile's in-flight count is live, not from the stats cache).
    pub limits: Vec<RoomLimits>,
}

/// What the room tile shows of a room's origin protections (SPEC §10), besides its
/// counters.
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
    pub now: u64,
    pub max: u64,
}

impl AdminContext<'_> {
    /// `room`'s limits (none for a room not configured).
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
    let path = req.uri().path().to_owned();
    if path == ADMIN_PATH || path == "/__anteroom/admin/" {
        return match *req.method() {
            Method::GET | Method::HEAD => page(app, &req),
            _ => method_not_allowed("GET, HEAD"),
        };
    }
    let candidates: Vec<(&Route, Captures<'_>)> = routes()
        .iter()
        .filter_map(|r| Some((r, matches(r.path, &path)?)))
        .collect();
    if candidates.is_empty() {
        return problem(
            StatusCode::NOT_FOUND,
            "Not found",
            "No admin API route has this path; see /__anteroom/admin/api/openapi.json.",
            None,
        );
    }
    if candidates.iter().any(|(r, _)| r.auth) {
        match app.admin.authorize(&req, caller) {
            Ok(Access::Admin) => {}
            Ok(Access::MetricsOnly) => {
                let reads_metrics = candidates
                    .iter()
                    .any(|(r, _)| r.op == Op::Metrics && r.method == req.method());
                if !reads_metrics {
                    return forbidden(
                        "The metrics token may only read GET /__anteroom/admin/api/metrics.",
                    );
                }
            }
            Err(refusal) => return *refusal,
        }
    }
    let Some(&(route, captures)) = candidates.iter().find(|(r, _)| r.method == req.method()) else {
        let allow: Vec<&str> = candidates.iter().map(|(r, _)| r.method.as_str()).collect();
        return method_not_allowed(&allow.join(", "));
    };
    let room = match captures.room {
        Some(name) => match app.rooms.iter().find(|r| *r == name) {
            Some(r) => Some(r.as_str()),
            None => {
                return problem(
                    StatusCode::NOT_FOUND,
                    "Unknown room",
                    &format!("There is no room named {name:?}."),
                    Some("room"),
                );
            }
        },
        None => None,
    };
    let who = Caller { ip: caller, peer };
    match (route.op, room) {
        (Op::OpenApi, _) => respond(StatusCode::OK, "application/json", OPENAPI.to_owned()),
        (Op::Status, _) => status(app),
        (Op::Metrics, _) => respond(
            StatusCode::OK,
            crate::metrics::CONTENT_TYPE,
            app.metrics.render(app.live.open_streams()),
        ),
        (Op::Rooms, _) => {
            let rooms: Vec<Value> = app
                .rooms
                .iter()
                .map(|r| room_view(r, app.admission.cached_stats(r), app.limits_of(r)))
                .collect();
            ok(json!({ "rooms": rooms }))
        }
        (Op::RoomStats, Some(room)) => match app.admission.cached_stats(room) {
            Some(cached) => ok(room_view(room, Some(cached), app.limits_of(room))),
            None => problem(
                StatusCode::SERVICE_UNAVAILABLE,
                "No statistics yet",
                "The queue store has not answered since this replica started.",
                None,
            ),
        },
        (Op::RoomConfig, Some(room)) => configure(app, req, room, &who).await,
        (Op::Pause, Some(room)) => set_paused(app, room, true, &who).await,
        (Op::Resume, Some(room)) => set_paused(app, room, false, &who).await,
        (Op::Flush, Some(room)) => flush(app, room, &who).await,
        (Op::Bans, _) => bans(app, &req),
        (Op::BanLog, _) => ban_log(app, &req).await,
        (Op::Ban, _) => ban(app, req, &who).await,
        // The route's pattern always captures a target; an empty one is an unknown ban.
        (Op::Unban, _) => unban(app, captures.target.unwrap_or_default(), &who).await,
        (Op::Queue, Some(room)) => queue(app, &req, room).await,
        (Op::Front, Some(room)) => front(app, room, captures.reference, &who).await,
        (op, None) => unreachable!("{op:?} routes all have a {{room}}"),
    }
}

struct Caller {
    ip: IpAddr,
    peer: SocketAddr,
}

fn status(app: &AdminContext<'_>) -> Response<Body> {
    let health = app.admission.health();
    let audit_error = app.admin.audit.last_error();
    ok(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "frontend_built_in": FRONTEND_BUILT_IN,
        "store": {
            "kind": app.admin.store_kind,
            "up": health.is_up(),
            "down_for_secs": health.down_for().map(|d| d.as_secs_f64()),
        },
        "fail_open": {
            "enabled": app.admin.fail_open_after.is_some(),
            "after_secs": app.admin.fail_open_after.map(|d| d.as_secs_f64()),
            "active": health.failing_open(),
        },
        "audit_log": {
            "path": app.admin.audit.path(),
            "ok": audit_error.is_none(),
            "last_error": audit_error,
        },
        "rooms": app.rooms,
        "open_streams": app.live.open_streams(),
    }))
}

/// A room's counters (and its origin protections) as the API shows them.
fn room_view(room: &str, cached: Option<CachedStats>, limits: RoomLimits) -> Value {
    let Some(c) = cached else {
        return json!({ "room": room, "stats_available": false });
    };
    let s = &c.stats;
    json!({
        "room": room,
        "stats_available": true,
        "waiting": s.waiting,
        "active": s.active,
        "max_active": s.settings.max_active,
        "rate": s.settings.rate,
        // Closed-loop admission (SPEC §14): the rate passes use, and why it differs.
        "effective_rate": c.effective_rate(),
        "rate_reason": c.adaptive.as_ref().map_or("configured", |a| a.rate_reason),
        "adaptive": c.adaptive.as_ref().map(|a| json!({
            "explanation": a.explanation,
            "origin_p95_ms": a.origin_p95_ms,
            "origin_error_ratio": a.origin_error_ratio,
            "origin_samples": a.origin_samples,
            "target_latency_ms": a.target_latency_ms,
            "max_error_ratio": a.max_error_ratio,
        })),
        "paused": s.settings.paused,
        "session_ttl_secs": s.settings.session_ttl.as_secs_f64(),
        "abandon_after_secs": s.settings.abandon_after.as_secs_f64(),
        "total_joined": s.total_joined,
        "total_admitted": s.total_admitted,
        "total_expired": s.total_expired,
        "total_abandoned": s.total_abandoned,
        "total_refused": s.total_refused,
        "observed_rate": c.observed_rate(),
        "last_pass_ms": c.last_pass.map(|d| d.as_secs_f64() * 1000.0),
        "stats_age_secs": c.read_at.elapsed().as_secs_f64(),
        // This replica's honest-ETA figures over the last hour (SPEC §14).
        "eta": c.eta,
        "eta_revised": c.eta_revised,
        "estimating": c.pace().eta(1).estimating,
        // This replica's origin in-flight cap (null: none) and the queue breaker (0: off).
        "inflight": limits.inflight.map(|i| json!({ "now": i.now, "max": i.max })),
        "max_waiting": limits.max_waiting,
    })
}

fn settings_view(s: &RoomSettings) -> Value {
    json!({
        "rate": s.rate,
        "max_active": s.max_active,
        "session_ttl_secs": s.session_ttl.as_secs_f64(),
        "abandon_after_secs": s.abandon_after.as_secs_f64(),
        "paused": s.paused,
    })
}

/// `PUT …/config`.
async fn configure(
    app: &AdminContext<'_>,
    req: Request<Incoming>,
    room: &str,
    who: &Caller,
) -> Response<Body> {
    let body = match read_body(req, app.admin.body_timeout).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let patch = match parse_patch(&body) {
        Ok(patch) => patch,
        Err((field, detail)) => return bad_input(&field, &detail),
    };
    let current = match app.admission.settings(room).await {
        Ok(settings) => settings,
        Err(e) => return store_error(e),
    };
    // Checked here too so the error names the API's field; the store checks again
    // atomically, so a refusal there changes nothing either.
    if let Err(e) = current.patched(&patch) {
        return store_error(e);
    }
    let new = match app.admission.update_settings(room, &patch).await {
        Ok(new) => new,
        Err(e) => return store_error(e),
    };
    let (old_view, new_view) = (settings_view(&current), settings_view(&new));
    let named = |view: &Value| -> Value {
        CONFIG_FIELDS
            .iter()
            .filter(|f| patch_names(&patch, f))
            .map(|f| ((*f).to_owned(), view[*f].clone()))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    tracing::info!(room, caller = %who.ip, old = %named(&old_view), new = %named(&new_view), "admin: settings changed");
    let audit = audit(app, room, "config", named(&old_view), named(&new_view), who).await;
    ok(json!({
        "room": room,
        "settings": new_view,
        "applies": "from the next admission pass",
        "audit": audit,
    }))
}

fn patch_names(patch: &SettingsPatch, field: &str) -> bool {
    match field {
        "rate" => patch.rate.is_some(),
        "max_active" => patch.max_active.is_some(),
        "session_ttl_secs" => patch.session_ttl.is_some(),
        "abandon_after_secs" => patch.abandon_after.is_some(),
        _ => false,
    }
}

/// `POST …/pause` and `…/resume`.
async fn set_paused(
    app: &AdminContext<'_>,
    room: &str,
    paused: bool,
    who: &Caller,
) -> Response<Body> {
    let old = match app.admission.settings(room).await {
        Ok(settings) => settings.paused,
        Err(e) => return store_error(e),
    };
    let patch = if paused {
        SettingsPatch::pause()
    } else {
        SettingsPatch::resume()
    };
    let new = match app.admission.update_settings(room, &patch).await {
        Ok(new) => new.paused,
        Err(e) => return store_error(e),
    };
    let action = if paused { "pause" } else { "resume" };
    tracing::info!(room, caller = %who.ip, "admin: {action}");
    let audit = audit(
        app,
        room,
        action,
        json!({ "paused": old }),
        json!({ "paused": new }),
        who,
    )
    .await;
    ok(json!({ "room": room, "paused": new, "audit": audit }))
}

/// `POST …/flush`.
async fn flush(app: &AdminContext<'_>, room: &str, who: &Caller) -> Response<Body> {
    let removed = match app.admission.flush(room).await {
        Ok(n) => n,
        Err(e) => return store_error(e),
    };
    tracing::info!(room, caller = %who.ip, removed, "admin: line flushed");
    let audit = audit(
        app,
        room,
        "flush",
        json!({ "waiting": removed }),
        json!({ "waiting": 0 }),
        who,
    )
    .await;
    ok(json!({ "room": room, "flushed": removed, "audit": audit }))
}

/// `GET …/queue?limit=N&ref=R`: the head of the line (in order, with each visitor's ref,
/// position, and when they joined and were last seen), or the one waiting visitor with
/// reference `ref` (an empty list when nobody waiting has it).
async fn queue(app: &AdminContext<'_>, req: &Request<Incoming>, room: &str) -> Response<Body> {
    let query = match parse_queue_query(req.uri().query().unwrap_or("")) {
        Ok(q) => q,
        Err((field, detail)) => return unprocessable(&field, &detail),
    };
    let limit = match query {
        QueueQuery::Head { limit } => Some(limit),
        QueueQuery::Ref(_) => None,
    };
    let entries = match app.admission.queue(room, query).await {
        Ok(entries) => entries,
        Err(StoreError::NotWaiting(_)) => Vec::new(),
        Err(e) => return store_error(e),
    };
    ok(json!({
        "room": room,
        "limit": limit,
        "waiting": app.admission.cached_stats(room).map(|c| c.stats.waiting),
        "entries": entries,
    }))
}

/// The default number of the Queue view's entries.
pub const QUEUE_DEFAULT_LIMIT: usize = 50;

/// The query of `GET …/queue`, or the parameter at fault and why.
pub fn parse_queue_query(query: &str) -> Result<QueueQuery, (String, String)> {
    let fail = |field: &str, detail: String| Err((field.to_owned(), detail));
    let (mut limit, mut reference) = (None, None);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "limit" => {
                let n = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=QueueQuery::MAX_LIMIT).contains(n));
                match n {
                    Some(n) => limit = Some(n),
                    None => {
                        return fail(
                            "limit",
                            format!(
                                "must be a whole number from 1 to {} (got {value:?})",
                                QueueQuery::MAX_LIMIT
                            ),
                        );
                    }
                }
            }
            "ref" => match crate::queue::VisitorRef::parse(value) {
                Some(r) => reference = Some(r),
                None => {
                    return fail(
                        "ref",
                        format!("must be a visitor reference of 8 characters (got {value:?})"),
                    );
                }
            },
            other => {
                return fail(
                    other,
                    "is not a parameter; expected limit or ref".to_owned(),
                );
            }
        }
    }
    Ok(match reference {
        Some(r) => QueueQuery::Ref(r),
        None => QueueQuery::Head {
            limit: limit.unwrap_or(QUEUE_DEFAULT_LIMIT),
        },
    })
}

/// `POST …/visitors/{ref}/front`: the waiting visitor with that reference goes to
/// position 1; audited, and a `visitor_prioritized` event.
async fn front(
    app: &AdminContext<'_>,
    room: &str,
    reference: Option<&str>,
    who: &Caller,
) -> Response<Body> {
    let Some(reference) = reference.and_then(crate::queue::VisitorRef::parse) else {
        return unprocessable(
            "ref",
            "must be a visitor reference of 8 characters, as the waiting page shows it",
        );
    };
    let (_, place) = match app.admission.move_to_front(room, reference).await {
        Ok(moved) => moved,
        Err(e) => return store_error(e),
    };
    tracing::info!(room, caller = %who.ip, %reference, "admin: visitor moved to the front");
    let entry = AuditEntry::now(
        room,
        "front",
        json!({ "ref": reference }),
        json!({ "ref": reference, "position": place.position }),
        who.ip,
        who.peer,
    );
    let audit = write_audit(app, entry).await;
    ok(json!({
        "room": room,
        "ref": reference,
        "position": place.position,
        "waiting": place.waiting,
        "audit": audit,
    }))
}

/// Records a change: the audit line (its result goes into the response so an operator
/// knows) and a `config_changed` event on the side channel.
async fn audit(
    app: &AdminContext<'_>,
    room: &str,
    action: &'static str,
    old: Value,
    new: Value,
    who: &Caller,
) -> Value {
    app.admission
        .events()
        .publish(crate::events::Event::config_changed(
            room,
            json!({ "action": action, "old": old.clone(), "new": new.clone() }),
        ));
    let entry = AuditEntry::now(room, action, old, new, who.ip, who.peer);
    write_audit(app, entry).await
}

/// Appends `entry` to the audit log; what the response says about it.
async fn write_audit(app: &AdminContext<'_>, entry: AuditEntry) -> Value {
    match app.admin.audit.append(&entry).await {
        Ok(()) => json!({ "written": true }),
        Err(error) => json!({ "written": false, "error": error }),
    }
}

// ---- bans (SPEC §8, §10) ----

/// `limit` and `cursor` from the query string; bad values are the field's 400.
type Paging = (Option<usize>, Option<u64>);

/// `limit` and `cursor`, or the field at fault and why.
fn paging(req: &Request<Incoming>) -> Result<Paging, (&'static str, &'static str)> {
    let mut limit = None;
    let mut cursor = None;
    for pair in req
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "limit" => match v.parse::<usize>() {
                Ok(n) if n >= 1 => limit = Some(n),
                _ => return Err(("limit", "must be a whole number of at least 1")),
            },
            "cursor" => match v.parse::<u64>() {
                Ok(n) => cursor = Some(n),
                _ => return Err(("cursor", "must be a cursor from next_cursor")),
            },
            _ => {}
        }
    }
    Ok((limit, cursor))
}

fn ms_rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

fn now_ms() -> u64 {
    crate::queue::unix_ms(std::time::SystemTime::now())
}

/// One ban as the API shows it (`remaining_secs` null when permanent).
fn ban_view(b: &Ban) -> Value {
    json!({
        "target": b.target.to_string(),
        "source": b.source,
        "reason": b.reason,
        "since": ms_rfc3339(b.since_ms),
        "until": b.until_ms.map(ms_rfc3339),
        "remaining_secs": b.until_ms.map(|u| u.saturating_sub(now_ms()).div_ceil(1000)),
        "permanent": b.until_ms.is_none(),
        "cursor": b.seq,
    })
}

fn log_view(e: &LogEntry) -> Value {
    json!({
        "at": ms_rfc3339(e.at_ms),
        "action": e.action,
        "target": e.target.to_string(),
        "source": e.source,
        "reason": e.reason,
        "until": e.until_ms.map(ms_rfc3339),
        "cursor": e.seq,
    })
}

fn bans(app: &AdminContext<'_>, req: &Request<Incoming>) -> Response<Body> {
    let (limit, cursor) = match paging(req) {
        Ok(p) => p,
        Err((field, why)) => return bad_input(field, why),
    };
    let page = app.admin.abuse.list(limit, cursor);
    let items: Vec<Value> = page.items.iter().map(|b| ban_view(b)).collect();
    ok(json!({ "bans": items, "next_cursor": page.next_cursor }))
}

async fn ban_log(app: &AdminContext<'_>, req: &Request<Incoming>) -> Response<Body> {
    let (limit, cursor) = match paging(req) {
        Ok(p) => p,
        Err((field, why)) => return bad_input(field, why),
    };
    match app.admin.abuse.log(limit, cursor).await {
        Ok(page) => {
            let items: Vec<Value> = page.items.iter().map(log_view).collect();
            ok(json!({ "log": items, "next_cursor": page.next_cursor }))
        }
        Err(e) => ban_error(BanError::Store(e.to_string())),
    }
}

async fn ban(app: &AdminContext<'_>, req: Request<Incoming>, who: &Caller) -> Response<Body> {
    let body = match read_body(req, app.admin.body_timeout).await {
        Ok(b) => b,
        Err(refused) => return refused,
    };
    let value: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return bad_input("body", &format!("is not valid JSON: {e}")),
    };
    let Some(object) = value.as_object() else {
        return bad_input(
            "body",
            "must be a JSON object with target, duration_secs, reason",
        );
    };
    if let Some(other) = object
        .keys()
        .find(|k| !["target", "duration_secs", "reason"].contains(&k.as_str()))
    {
        return bad_input(
            other,
            "is not a field; expected target, duration_secs, reason",
        );
    }
    let Some(target) = object.get("target").and_then(Value::as_str) else {
        return bad_input("target", "is required: an IP address or a CIDR range");
    };
    let duration = match object.get("duration_secs") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(secs) => Some(Duration::from_secs(secs)),
            None => {
                return ban_error_field("duration_secs", BanError::InvalidDuration);
            }
        },
    };
    let reason = match object.get("reason") {
        None | Some(Value::Null) => "banned by an operator",
        Some(Value::String(s)) => s.as_str(),
        Some(_) => return bad_input("reason", "must be a string"),
    };
    match app.admin.abuse.ban(target, duration, reason).await {
        Ok(ban) => {
            let view = ban_view(&ban);
            let audit = audit(app, "", "ban", Value::Null, view.clone(), who).await;
            let mut response = ok(json!({ "ban": view, "audit": audit }));
            *response.status_mut() = StatusCode::CREATED;
            response
        }
        Err(e) => ban_error(e),
    }
}

async fn unban(app: &AdminContext<'_>, target: &str, who: &Caller) -> Response<Body> {
    let target = percent_decode(target);
    match app.admin.abuse.unban(&target).await {
        Ok(ban) => {
            let view = ban_view(&ban);
            let audit = audit(app, "", "unban", view.clone(), Value::Null, who).await;
            ok(json!({ "unbanned": view, "audit": audit }))
        }
        Err(e) => ban_error(e),
    }
}

/// `%2F` → `/` and the like, for a target in a path segment.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(b) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn ban_error(e: BanError) -> Response<Body> {
    let field = match &e {
        BanError::InvalidTarget(_)
        | BanError::TooBroad { .. }
        | BanError::Immune(_)
        | BanError::NotFound(_) => "target",
        BanError::InvalidDuration => "duration_secs",
        BanError::ReasonTooLong => "reason",
        BanError::Store(_) | BanError::Full(_) => "",
    };
    ban_error_field(field, e)
}

fn ban_error_field(field: &str, e: BanError) -> Response<Body> {
    let detail = format!("{field}: {e}; nothing was changed");
    match e {
        BanError::NotFound(_) => problem(
            StatusCode::NOT_FOUND,
            "No such ban",
            &e.to_string(),
            Some("target"),
        ),
        BanError::Full(_) => problem(
            StatusCode::CONFLICT,
            "Ban list full",
            &format!("Nothing was changed: {e}"),
            None,
        ),
        BanError::Store(_) => problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "Ban store unavailable",
            &format!("Nothing was changed: {e}"),
            None,
        ),
        _ => problem(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid ban",
            &detail,
            Some(field),
        ),
    }
}

/// The request body, at most [`MAX_BODY_BYTES`], in full within `deadline`
/// (`server.body_timeout`: an admin call whose body stalls must not hold its connection,
/// RELIABILITY F3); else the answer to give.
async fn read_body(
    req: Request<Incoming>,
    deadline: Duration,
) -> Result<bytes::Bytes, Response<Body>> {
    let too_large = || {
        let mut response = problem(
            StatusCode::PAYLOAD_TOO_LARGE,
            "Body too large",
            &format!("The request body may be at most {MAX_BODY_BYTES} bytes."),
            Some("body"),
        );
        // The body is left unread, so the server closes the connection after this answer;
        // said up front, a client does not reuse it for its next request and fail on the
        // close (tests/admin.rs's OpenAPI walk did, now and then, with workers).
        response
            .headers_mut()
            .insert(header::CONNECTION, http::HeaderValue::from_static("close"));
        response
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(too_large());
    }
    let read = Limited::new(req.into_body(), MAX_BODY_BYTES).collect();
    match tokio::time::timeout(deadline, read).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Ok(Err(e)) => Err(bad_input("body", &format!("could not be read: {e}"))),
        Err(_) => {
            let mut response = problem(
                StatusCode::REQUEST_TIMEOUT,
                "Body too slow",
                &format!(
                    "The request body did not arrive in full within {} s (server.body_timeout).",
                    deadline.as_secs()
                ),
                Some("body"),
            );
            // The rest of the body may still be on its way: the connection cannot be
            // reused.
            response
                .headers_mut()
                .insert(header::CONNECTION, http::HeaderValue::from_static("close"));
            Err(response)
        }
    }
}

/// A `PUT …/config` body as a patch, or the field at fault and why.
pub fn parse_patch(body: &[u8]) -> Result<SettingsPatch, (String, String)> {
    let fail = |field: &str, detail: String| Err((field.to_owned(), detail));
    let value: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return fail("body", format!("is not valid JSON: {e}")),
    };
    let Some(object) = value.as_object() else {
        return fail(
            "body",
            "must be a JSON object such as {\"rate\": 50}".to_owned(),
        );
    };
    if object.is_empty() {
        return fail(
            "body",
            format!(
                "names no setting; expected any of {}",
                CONFIG_FIELDS.join(", ")
            ),
        );
    }
    let seconds = |field: &str, v: &Value| -> Result<Duration, (String, String)> {
        let secs = v.as_f64().filter(|s| s.is_finite() && *s >= 0.0);
        secs.and_then(|s| Duration::try_from_secs_f64(s).ok())
            .ok_or_else(|| {
                (
                    field.to_owned(),
                    format!("must be a number of seconds (got {v})"),
                )
            })
    };
    let mut patch = SettingsPatch::default();
    for (key, v) in object {
        match key.as_str() {
            "rate" => match v.as_f64() {
                Some(rate) => patch.rate = Some(rate),
                None => return fail("rate", format!("must be a number (got {v})")),
            },
            "max_active" => match v.as_u64() {
                Some(n) => patch.max_active = Some(n),
                None => {
                    return fail(
                        "max_active",
                        format!("must be a whole number of at least 1 (got {v})"),
                    );
                }
            },
            "session_ttl_secs" => patch.session_ttl = Some(seconds(key, v)?),
            "abandon_after_secs" => patch.abandon_after = Some(seconds(key, v)?),
            other => {
                return fail(
                    other,
                    format!(
                        "is not a setting; expected any of {}",
                        CONFIG_FIELDS.join(", ")
                    ),
                );
            }
        }
    }
    Ok(patch)
}

/// The store's name for a setting, as the API spells it.
fn api_field(store_field: &str) -> &str {
    match store_field {
        "session_ttl" => "session_ttl_secs",
        "abandon_after" => "abandon_after_secs",
        other => other,
    }
}

fn store_error(e: StoreError) -> Response<Body> {
    match e {
        StoreError::Invalid { field, reason } => bad_input(api_field(field), &reason),
        StoreError::NotWaiting(reference) => problem(
            StatusCode::NOT_FOUND,
            "Unknown visitor",
            &format!("Nobody waiting in this room has the reference {reference}."),
            Some("ref"),
        ),
        StoreError::UnknownRoom(room) => problem(
            StatusCode::NOT_FOUND,
            "Unknown room",
            &format!("The queue store does not know the room {room:?}."),
            Some("room"),
        ),
        StoreError::Unavailable(reason) => {
            let mut response = problem(
                StatusCode::SERVICE_UNAVAILABLE,
                "Queue store unavailable",
                &format!("Nothing was changed: {reason}"),
                None,
            );
            response
                .headers_mut()
                .insert(STATUS_HEADER, HeaderValue::from_static("stalled"));
            response
        }
    }
}

/// Input that parsed but cannot be served (a query parameter out of range): 422.
fn unprocessable(field: &str, reason: &str) -> Response<Body> {
    problem(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Invalid input",
        &format!("{field}: {reason}"),
        Some(field),
    )
}

fn bad_input(field: &str, reason: &str) -> Response<Body> {
    problem(
        StatusCode::BAD_REQUEST,
        "Invalid input",
        &format!("{field}: {reason}; nothing was changed"),
        Some(field),
    )
}

fn unauthorized(title: &str, detail: &str) -> Response<Body> {
    let mut response = problem(StatusCode::UNAUTHORIZED, title, detail, None);
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"anteroom admin\""),
    );
    response
}

fn method_not_allowed(allow: &str) -> Response<Body> {
    let mut response = problem(
        StatusCode::METHOD_NOT_ALLOWED,
        "Method not allowed",
        &format!("This path answers {allow}."),
        None,
    );
    response.headers_mut().insert(
        header::ALLOW,
        HeaderValue::from_str(allow).expect("route methods are header-safe"),
    );
    response
}

/// An `application/problem+json` error; `field` names the input at fault.
fn problem(status: StatusCode, title: &str, detail: &str, field: Option<&str>) -> Response<Body> {
    let mut body = json!({
        "type": "about:blank",
        "title": title,
        "status": status.as_u16(),
        "detail": detail,
    });
    if let Some(field) = field {
        body["field"] = json!(field);
    }
    respond(status, "application/problem+json", body.to_string())
}

fn ok(body: Value) -> Response<Body> {
    respond(StatusCode::OK, "application/json", body.to_string())
}

fn respond(status: StatusCode, content_type: &'static str, body: String) -> Response<Body> {
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// What the control room's shell may load: its own scripts and stylesheets, and the API.
/// No inline script or style, no framing (the page has buttons worth clickjacking).
const CONTROL_CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// `GET /__anteroom/admin/`: the control room's shell when the front-end is built in,
/// else a page listing the API.
fn page(app: &AdminContext<'_>, req: &Request<Incoming>) -> Response<Body> {
    if let Some(control) = &app.admin.control {
        return control_page(app, control);
    }
    // Only echoed back to whoever sent it, and escaped by the template.
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost:8080");
    let base = format!("http://{host}");
    let first_room = app.rooms.first().map(String::as_str);
    let endpoints: Vec<Value> = routes()
        .iter()
        .map(|r| {
            let path = r.path.replace("{room}", first_room.unwrap_or("main"));
            let mut curl = String::from("curl -s");
            if r.method != Method::GET {
                curl.push_str(&format!(" -X {}", r.method));
            }
            if r.auth {
                curl.push_str(" -H \"Authorization: Bearer $ANTEROOM_ADMIN_TOKEN\"");
            }
            if r.op == Op::RoomConfig {
                curl.push_str(" -H 'Content-Type: application/json' -d '{\"rate\": 20}'");
            }
            curl.push_str(&format!(" {base}{path}"));
            json!({
                "method": r.method.as_str(),
                "path": r.path,
                "summary": r.summary,
                "auth": r.auth,
                "curl": curl,
            })
        })
        .collect();
    let html = app
        .admin
        .pages
        .get_template("admin.html")
        .and_then(|t| {
            t.render(context! {
                endpoints => endpoints,
                rooms => app.rooms,
                version => env!("CARGO_PKG_VERSION"),
            })
        })
        .unwrap_or_else(|e| {
            tracing::error!(error = %e, "admin page failed to render");
            "The control room front-end is not built in; see /__anteroom/admin/api/openapi.json."
                .to_owned()
        });
    respond(StatusCode::OK, "text/html; charset=utf-8", html)
}

/// The control room's HTML shell: the entry's stylesheets and module script, and a
/// `<noscript>` pointing at the API. Everything else is drawn by the script.
fn control_page(app: &AdminContext<'_>, control: &Entry) -> Response<Body> {
    let rendered = app.admin.pages.get_template("control.html").and_then(|t| {
        t.render(context! {
            script => minijinja::Value::from_safe_string(control.script.clone()),
            styles => control
                .styles
                .iter()
                .cloned()
                .map(minijinja::Value::from_safe_string)
                .collect::<Vec<_>>(),
            version => env!("CARGO_PKG_VERSION"),
        })
    });
    let html = match rendered {
        Ok(html) => html,
        Err(e) => {
            tracing::error!(error = %e, "control room page failed to render");
            return problem(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Control room unavailable",
                "The page failed to render; the API at /__anteroom/admin/api/ still answers.",
                None,
            );
        }
    };
    let mut response = respond(StatusCode::OK, "text/html; charset=utf-8", html);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTROL_CSP),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_patterns_capture_the_room() {
        let p = "/__anteroom/admin/api/rooms/{room}/stats";
        let room = |r| {
            Some(Captures {
                room: Some(r),
                ..Captures::default()
            })
        };
        assert_eq!(
            matches(p, "/__anteroom/admin/api/rooms/main/stats"),
            room("main")
        );
        let f = "/__anteroom/admin/api/rooms/{room}/visitors/{ref}/front";
        assert_eq!(
            matches(
                f,
                "/__anteroom/admin/api/rooms/main/visitors/ABCD1234/front"
            ),
            Some(Captures {
                room: Some("main"),
                reference: Some("ABCD1234"),
                target: None,
            })
        );
        assert_eq!(
            matches(
                "/__anteroom/admin/api/bans/{target}",
                "/__anteroom/admin/api/bans/10.0.0.0%2F24"
            ),
            Some(Captures {
                target: Some("10.0.0.0%2F24"),
                ..Captures::default()
            })
        );
        assert_eq!(
            matches(f, "/__anteroom/admin/api/rooms/main/visitors//front"),
            None
        );
        assert_eq!(matches(p, "/__anteroom/admin/api/rooms//stats"), None);
        assert_eq!(matches(p, "/__anteroom/admin/api/rooms/main/stats/x"), None);
        assert_eq!(
            matches("/__anteroom/admin/api/rooms", "/__anteroom/admin/api/rooms"),
            Some(Captures::default())
        );
        assert_eq!(
            matches(
                "/__anteroom/admin/api/rooms",
                "/__anteroom/admin/api/rooms/"
            ),
            None
        );
    }

    #[test]
    fn queue_queries_name_the_parameter_at_fault() {
        let field = |q: &str| parse_queue_query(q).unwrap_err().0;
        assert_eq!(
            parse_queue_query(""),
            Ok(QueueQuery::Head {
                limit: QUEUE_DEFAULT_LIMIT
            })
        );
        assert_eq!(
            parse_queue_query("limit=1000"),
            Ok(QueueQuery::Head { limit: 1000 })
        );
        for bad in [
            "limit=0",
            "limit=1001",
            "limit=-1",
            "limit=x",
            "limit=",
            "limit",
        ] {
            assert_eq!(field(bad), "limit", "{bad}");
        }
        assert_eq!(field("ref=nope"), "ref");
        assert_eq!(field("limit=5&sort=asc"), "sort");
        let r = crate::queue::VisitorRef::parse("abcd1234").unwrap();
        assert_eq!(
            parse_queue_query("limit=5&ref=abcd-1234"),
            Ok(QueueQuery::Ref(r))
        );
    }

    #[test]
    fn patches_name_the_field_at_fault() {
        let field = |body: &str| parse_patch(body.as_bytes()).unwrap_err().0;
        assert_eq!(field(r#"{"rate": "fast"}"#), "rate");
        assert_eq!(field(r#"{"ratee": 5}"#), "ratee");
        assert_eq!(field(r#"{"max_active": -1}"#), "max_active");
        assert_eq!(field(r#"{"max_active": 1.5}"#), "max_active");
        assert_eq!(field(r#"{"session_ttl_secs": -3}"#), "session_ttl_secs");
        assert_eq!(
            field(r#"{"abandon_after_secs": null}"#),
            "abandon_after_secs"
        );
        assert_eq!(field("{"), "body");
        assert_eq!(field("[1]"), "body");
        assert_eq!(field("{}"), "body");
        let patch =
            parse_patch(br#"{"rate": 2.5, "max_active": 7, "session_ttl_secs": 90}"#).unwrap();
        assert_eq!(patch.rate, Some(2.5));
        assert_eq!(patch.max_active, Some(7));
        assert_eq!(patch.session_ttl, Some(Duration::from_secs(90)));
        assert_eq!(patch.abandon_after, None);
        assert_eq!(patch.paused, None);
    }

    #[test]
    fn negative_rates_and_zero_max_active_are_refused_by_validation() {
        let settings = RoomSettings {
            rate: 5.0,
            max_active: 10,
            session_ttl: Duration::from_secs(60),
            abandon_after: Duration::from_secs(60),
            paused: false,
        };
        for (body, expected) in [
            (r#"{"rate": -1}"#, "rate"),
            (r#"{"rate": 0}"#, "rate"),
            (r#"{"max_active": 0}"#, "max_active"),
            (r#"{"session_ttl_secs": 0}"#, "session_ttl"),
        ] {
            let patch = parse_patch(body.as_bytes()).unwrap();
            match settings.patched(&patch) {
                Err(StoreError::Invalid { field, .. }) => assert_eq!(field, expected, "{body}"),
                other => panic!("{body}: {other:?}"),
            }
        }
    }
}
