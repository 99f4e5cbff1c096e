//! The admin API's request and response bodies, as types: what each handler serializes,
//! and what the OpenAPI document ([`super::openapi`]) is generated from. Every field's doc
//! comment is its description in the document, so it is written for a caller of the API.
//! A body's limits (lengths, ranges, patterns) are declared here next to the field; the
//! handlers and the stores underneath enforce them, and `make test-api` checks that the
//! server and these declarations agree.
//!
//! The request bodies (`ConfigPatch`, `BanRequest`) are read field by field by the
//! handlers ([`super::parse_patch`], `bans::ban`) so a refusal names the field at fault,
//! and the path and query parameters (`RoomPath`, `VisitorPath`, `TargetPath`,
//! `PageQuery`, `QueueParams`) by the router and the handlers' query parsers; their types
//! here describe what those readers accept (the bodies' `deny_unknown_fields` is what
//! closes their schemas). `BannedClient` describes the banned page the request path
//! renders on either listener.

use serde::{Deserialize, Serialize};
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::{IntoParams, ToSchema};

use crate::queue::{Mode, RoomPhase, VisitorRef, WaitingEntry};

mod bans;
pub use bans::*;

pub use super::event_api::EventNow;

/// An RFC 9457 problem: how the admin API answers every refusal.
#[derive(Debug, Serialize, ToSchema)]
pub struct Problem {
    /// Always `about:blank`: the status and title say what happened.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The refusal in a few words (`Invalid input`, `Unknown room`, …).
    pub title: &'static str,
    /// The HTTP status, repeated.
    pub status: u16,
    /// What was wrong, in a sentence.
    pub detail: String,
    /// The input at fault: a body field, `body`, `room`, `ref`, a query parameter or a
    /// ban's `target`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub field: Option<String>,
}

/// What a banned client gets, on either listener, before the admin token is looked at.
// The request path renders it (the banned page, as JSON); this type only describes it.
#[derive(Debug, ToSchema)]
#[allow(
    dead_code,
    reason = "describes the banned page's JSON, rendered by the request path"
)]
pub struct BannedClient {
    /// Always `banned`.
    #[schema(schema_with = banned_status)]
    pub status: &'static str,
    /// Seconds until the ban ends; null for a permanent ban.
    #[schema(required = true)]
    pub retry_after_secs: Option<u64>,
}

fn banned_status() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["banned"]))
        .into()
}

/// `GET …/status`: what an operator checks first.
#[derive(Debug, Serialize, ToSchema)]
pub struct Status {
    /// anteroom's version.
    pub version: &'static str,
    /// Whether the control room's front-end is built into this binary.
    pub frontend_built_in: bool,
    /// The queue store's health.
    pub store: StoreStatus,
    /// Whether the rooms let visitors through while the store is down.
    pub fail_open: FailOpenStatus,
    /// The audit log every change is appended to.
    pub audit_log: AuditLogStatus,
    /// The configured rooms, in config order.
    pub rooms: Vec<String>,
    /// Live streams (waiting pages' event streams) open on this replica.
    pub open_streams: u64,
}

/// Which queue store this replica uses.
#[derive(Clone, Copy, Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StoreKind {
    /// The embedded store of a single replica.
    Embedded,
    /// Redis, shared by every replica.
    Redis,
}

/// The queue store's health, from the store health tracker (so it answers while the
/// store is down).
#[derive(Debug, Serialize, ToSchema)]
pub struct StoreStatus {
    /// Which store.
    pub kind: StoreKind,
    /// Whether its last call succeeded.
    pub up: bool,
    /// How long it has been failing, in seconds; null while up.
    #[schema(required = true)]
    pub down_for_secs: Option<f64>,
}

/// Fail-open: whether visitors are let through while the store is down.
#[derive(Debug, Serialize, ToSchema)]
pub struct FailOpenStatus {
    /// Whether `fail_open` is configured.
    pub enabled: bool,
    /// `fail_open_after`, in seconds; null when fail-open is off.
    #[schema(required = true)]
    pub after_secs: Option<f64>,
    /// Whether the rooms are failing open now.
    pub active: bool,
}

/// The audit log's state.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditLogStatus {
    /// The file, `data_dir/audit.log`.
    pub path: String,
    /// Whether the last write succeeded.
    pub ok: bool,
    /// Why the last write failed; null when it did not.
    #[schema(required = true)]
    pub last_error: Option<String>,
}

/// `GET …/rooms`: every room with its counters.
#[derive(Debug, Serialize, ToSchema)]
pub struct RoomList {
    /// The rooms, in config order.
    pub rooms: Vec<RoomStats>,
}

/// One room's counters. When stats_available is false (the store has not answered since
/// start) only room is present.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct RoomStats {
    /// The room's name.
    pub room: String,
    /// Whether this replica has the room's counters yet.
    pub stats_available: bool,
    /// Visitors in line.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub waiting: Option<u64>,
    /// Visitors on the site (admitted, session not yet ended).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub active: Option<u64>,
    /// The room's `max_active`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub max_active: Option<u64>,
    /// The configured rate (visitors per second), as PUT …/config sets it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub rate: Option<f64>,
    /// The rate admissions actually use: the configured one, or lower while closed-loop
    /// admission (the room's adaptive: block) holds it down; never above rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub effective_rate: Option<f64>,
    /// Why effective_rate is what it is: at the configured rate, lowered for the origin's
    /// p95 latency or its 5xx share, or being raised again step by step.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = rate_reason)]
    pub rate_reason: Option<&'static str>,
    /// Closed-loop admission's last decision; null for a room without adaptive:.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<AdaptiveStats>)]
    pub adaptive: Option<Option<AdaptiveStats>>,
    /// Whether the room is paused: nobody is admitted.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub paused: Option<bool>,
    /// The room's mode: queue, passthrough (everyone straight through) or sold_out.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = mode)]
    pub mode: Option<&'static str>,
    /// What the room is doing now, from its mode, schedule, pause and line.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = phase)]
    pub phase: Option<&'static str>,
    /// Visitors let through without waiting by passthrough, since the room was created.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub total_passed_through: Option<u64>,
    /// How long an admitted visitor's session lasts without a request, in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub session_ttl_secs: Option<f64>,
    /// How long a waiting visitor may be silent before losing their place, in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub abandon_after_secs: Option<f64>,
    /// Visitors who joined the line, since the room was created.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub total_joined: Option<u64>,
    /// Visitors admitted.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub total_admitted: Option<u64>,
    /// Sessions that expired.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub total_expired: Option<u64>,
    /// Waiting visitors who lost their place by going silent.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub total_abandoned: Option<u64>,
    /// Newcomers refused (the queue breaker, the join limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub total_refused: Option<u64>,
    /// Admissions per second observed over the last minute.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<f64>)]
    pub observed_rate: Option<Option<f64>>,
    /// How long the last admission pass took, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<f64>)]
    pub last_pass_ms: Option<Option<f64>>,
    /// How old these counters are, in seconds (the statistics cache).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub stats_age_secs: Option<f64>,
    /// Honest ETA over the last hour.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = EtaReport, nullable = false)]
    pub eta: Option<EtaReport>,
    /// Waiting visitors whose promised range this replica made again because the room's
    /// limits (the admitting rate, max_active, a pause) moved by more than a range's
    /// margin, since start.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub eta_revised: Option<u64>,
    /// The room has not yet seen its line move enough (10 admissions over 5 s of somebody
    /// waiting, since its limits last moved) to promise a range: waiting pages say
    /// estimating.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub estimating: Option<bool>,
    /// The origin in-flight cap (max_inflight) on the replica that answered, and how many
    /// of the room's requests are at the origin through it now; null when the room has no
    /// cap. Live, not from the statistics cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Inflight>)]
    pub inflight: Option<Option<Inflight>>,
    /// The queue breaker: at most this many in line, newcomers beyond it get 503 full; 0
    /// when off.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub max_waiting: Option<u64>,
    /// The room's current scheduled event (the first not closed, else the last); null
    /// when it has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<EventNow>)]
    pub event: Option<Option<EventNow>>,
}

fn mode() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(Mode::ALL.map(Mode::as_str)))
        .description(Some(
            "The room's mode: queue (the waiting room as usual), passthrough (everyone \
             straight through, counted) or sold_out (the line and newcomers see the sold-out \
             page).",
        ))
        .into()
}

fn phase() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(RoomPhase::ALL.map(RoomPhase::as_str)))
        .description(Some(
            "What the room is doing now, derived from its mode, schedule, pause and line.",
        ))
        .into()
}

fn rate_reason() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["configured", "latency", "errors", "recovering"]))
        .description(Some(
            "Why effective_rate is what it is: at the configured rate, lowered for the \
             origin's p95 latency or its 5xx share, or being raised again step by step.",
        ))
        .into()
}

/// What closed-loop admission's last decision saw.
#[derive(Debug, Serialize, ToSchema)]
pub struct AdaptiveStats {
    /// The reason for the rate, as a sentence.
    pub explanation: String,
    /// The origin's p95 time to response headers over the window, every replica's
    /// observations merged.
    #[schema(required = true)]
    pub origin_p95_ms: Option<u64>,
    /// The share of 5xx responses over the window.
    pub origin_error_ratio: f64,
    /// How many origin responses the window held.
    pub origin_samples: u64,
    /// The room's adaptive.target_latency.
    pub target_latency_ms: u64,
    /// The room's adaptive.max_error_ratio.
    pub max_error_ratio: f64,
}

/// Honest ETA, over the last hour, of the visitors this replica showed a range while they
/// waited and then saw admitted: the range first shown against the wait they had.
#[derive(Debug, Serialize, ToSchema)]
pub struct EtaReport {
    /// Visitors admitted in the last hour after this replica showed them a range.
    pub admitted: u64,
    /// Share (0 to 1) whose wait, in whole seconds, lay within the range first shown; null
    /// when admitted is 0.
    #[schema(required = true)]
    pub within_range: Option<f64>,
    /// Median of |wait - middle of the range first shown|, in seconds (to the histogram
    /// bucket); null when admitted is 0.
    #[schema(required = true)]
    pub median_error_secs: Option<f64>,
}

/// A room's origin in-flight cap on the replica that answered.
#[derive(Debug, Serialize, ToSchema)]
pub struct Inflight {
    /// The room's requests at the origin now.
    pub now: u64,
    /// `max_inflight`.
    pub max: u64,
}

/// The body of `PUT …/config`: any of the five settings, at least one.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(min_properties = 1)]
#[allow(dead_code, reason = "describes the body parse_patch reads")]
pub struct ConfigPatch {
    /// Visitors admitted per second.
    #[schema(nullable = false, exclusive_minimum = 0, maximum = 1_000_000)]
    pub rate: Option<f64>,
    /// How many may be on the site at once.
    #[schema(nullable = false, minimum = 1, maximum = 1_000_000_000)]
    pub max_active: Option<u64>,
    /// How long an admitted visitor's session lasts without a request, in seconds (at most
    /// 365 days).
    #[schema(nullable = false, minimum = 1, maximum = 31_536_000)]
    pub session_ttl_secs: Option<f64>,
    /// How long a waiting visitor may be silent before losing their place, in seconds (at
    /// most 365 days).
    #[schema(nullable = false, minimum = 1, maximum = 31_536_000)]
    pub abandon_after_secs: Option<f64>,
    /// The room's mode: queue, passthrough or sold_out.
    #[schema(schema_with = mode)]
    pub mode: Option<String>,
    /// `session_ttl` as the file writes it (`"5m"`); instead of `session_ttl_secs`.
    #[schema(nullable = false)]
    pub session_ttl: Option<String>,
    /// `abandon_after` as the file writes it (`"60s"`); instead of `abandon_after_secs`.
    #[schema(nullable = false)]
    pub abandon_after: Option<String>,
    /// The waiting page's heading. Each setting from here on may be `null`: the file's
    /// value holds again. At most 200 characters.
    #[schema(max_length = 200)]
    pub title: Option<String>,
    /// The operator's note on the pages, at most 2000 characters.
    #[schema(max_length = 2000)]
    pub message: Option<String>,
    /// The status of the waiting page and JSON: 200, 202, 429 or 503.
    #[schema(schema_with = status_code_change)]
    pub queue_status_code: Option<u16>,
    /// Path globs proxied straight through (no queue, no cookie).
    pub bypass_paths: Option<Vec<String>>,
    /// Path globs of assets (never the line, never the page).
    pub asset_paths: Option<Vec<String>>,
    /// Streams to the origin open at once in the room; 0: no cap.
    #[schema(minimum = 0)]
    pub stream_cap: Option<u64>,
    /// Requests at the origin at once on each replica; 0: no cap.
    #[schema(minimum = 0)]
    pub max_inflight: Option<u64>,
    /// How long a request waits for an in-flight slot, as the file writes it (`"5s"`).
    pub inflight_wait: Option<String>,
    /// `inflight_wait` in seconds.
    #[schema(minimum = 0, maximum = 31_536_000)]
    pub inflight_wait_secs: Option<f64>,
    /// The queue breaker: at most this many in line; 0: no limit.
    #[schema(minimum = 0)]
    pub max_waiting: Option<u64>,
    /// Places in line at once from one client; 0: no cap.
    #[schema(minimum = 0, maximum = 4_294_967_295_u64)]
    pub max_places_per_client: Option<u64>,
    /// Sessions on the site at once from one client; 0: no cap.
    #[schema(minimum = 0, maximum = 4_294_967_295_u64)]
    pub max_sessions_per_client: Option<u64>,
    /// Distinct clients one admitted session may be used from; 0: no cap.
    #[schema(minimum = 0, maximum = 4_294_967_295_u64)]
    pub session_clients: Option<u64>,
    /// Whoever is collected before `admits_at` is placed by lot.
    pub lottery: Option<bool>,
    /// Closed-loop admission: `{"target_latency": "800ms", "max_error_ratio": 0.05,
    /// "min_rate": 1}`, or `false` for off.
    #[schema(schema_with = adaptive_change)]
    pub adaptive: Option<serde_json::Value>,
    /// The proof of work at the door: any of `{"mode": "off"|"under_load"|"always",
    /// "difficulty": 0, "no_js_wait": "20s"}`; the keys not given keep their value.
    #[schema(schema_with = challenge_change)]
    pub challenge: Option<serde_json::Value>,
    /// Strikes within `abuse.window` that park a client in the shadow line; 0: off.
    #[schema(minimum = 0, maximum = 4_294_967_295_u64)]
    pub shadow_after: Option<u64>,
    /// The room's schedule: any of the three times (RFC 3339), the others none; `{}`: no
    /// schedule; `null`: the file's. While the room has scheduled events, the current
    /// one sets it.
    pub schedule: Option<ScheduleSetting>,
    /// Newcomers per client address per `join_limit_window`; 0: no limit.
    #[schema(minimum = 0, maximum = 4_294_967_295_u64)]
    pub join_limit_per_ip: Option<u64>,
    /// The join limit's window, as the file writes it (`"60s"`).
    pub join_limit_window: Option<String>,
}

/// A room's schedule: when the line opens, when admission starts, when it closes.
#[derive(Clone, Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSetting {
    /// When the line opens (RFC 3339); null: no time.
    pub queue_opens_at: Option<String>,
    /// When admission starts (RFC 3339); null: no time.
    pub admits_at: Option<String>,
    /// When the room closes to newcomers (RFC 3339); null: no time.
    pub closes_at: Option<String>,
}

fn challenge_change() -> Schema {
    use utoipa::openapi::schema::{OneOfBuilder, SchemaType};
    OneOfBuilder::new()
        .item(
            ObjectBuilder::new()
                .schema_type(Type::Object)
                .property(
                    "mode",
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .enum_values(Some(["off", "under_load", "always"])),
                )
                .property(
                    "difficulty",
                    ObjectBuilder::new()
                        .schema_type(Type::Integer)
                        .minimum(Some(0))
                        .maximum(Some(i32::from(crate::challenge::MAX_DIFFICULTY))),
                )
                .property("no_js_wait", ObjectBuilder::new().schema_type(Type::String))
                .additional_properties(Some(
                    utoipa::openapi::schema::AdditionalProperties::FreeForm(false),
                )),
        )
        .item(ObjectBuilder::new().schema_type(SchemaType::Type(Type::Null)))
        .description(Some(
            "The proof of work at the door: any of mode, difficulty and no_js_wait (the \
             others keep their value), or null for the file's.",
        ))
        .into()
}

fn status_code_change() -> Schema {
    ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::SchemaType::from_iter([
            Type::Integer,
            Type::Null,
        ]))
        .enum_values(Some([
            serde_json::json!(200),
            serde_json::json!(202),
            serde_json::json!(429),
            serde_json::json!(503),
            serde_json::Value::Null,
        ]))
        .description(Some(
            "The status of the waiting page and JSON: 200, 202, 429 or 503; null for the file's.",
        ))
        .into()
}

fn adaptive_change() -> Schema {
    use utoipa::openapi::schema::{OneOfBuilder, SchemaType};
    OneOfBuilder::new()
        .item(
            ObjectBuilder::new()
                .schema_type(Type::Object)
                .property(
                    "target_latency",
                    ObjectBuilder::new().schema_type(Type::String),
                )
                .property(
                    "max_error_ratio",
                    ObjectBuilder::new().schema_type(Type::Number),
                )
                .property("min_rate", ObjectBuilder::new().schema_type(Type::Number))
                .required("target_latency")
                .additional_properties(Some(
                    utoipa::openapi::schema::AdditionalProperties::FreeForm(false),
                )),
        )
        .item(
            ObjectBuilder::new()
                .schema_type(Type::Boolean)
                .enum_values(Some([false])),
        )
        .item(ObjectBuilder::new().schema_type(SchemaType::Type(Type::Null)))
        .description(Some(
            "Closed-loop admission: an object with target_latency (and optionally \
             max_error_ratio, min_rate), false for off, or null for the file's.",
        ))
        .into()
}

/// Closed-loop admission's setting as a room runs with it.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct AdaptiveSetting {
    /// The origin's p95 time to response headers above which the rate is lowered.
    pub target_latency: String,
    /// A share of 5xx responses above which the rate is lowered.
    pub max_error_ratio: f64,
    /// The rate is never lowered below this.
    pub min_rate: f64,
}

/// The proof of work at the door as a room runs with it.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ChallengeSetting {
    /// When newcomers are asked: off, under_load or always.
    #[schema(schema_with = challenge_mode)]
    pub mode: &'static str,
    /// Extra bits of work on top of the default (each doubles it).
    pub difficulty: u8,
    /// The no-JavaScript time lock (`"20s"`).
    pub no_js_wait: String,
}

fn challenge_mode() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["off", "under_load", "always"]))
        .into()
}

/// A room's runtime settings.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct Settings {
    /// Visitors admitted per second.
    pub rate: f64,
    /// How many may be on the site at once.
    pub max_active: u64,
    /// Session lifetime without a request, in seconds.
    pub session_ttl_secs: f64,
    /// Silence before a waiting visitor loses their place, in seconds.
    pub abandon_after_secs: f64,
    /// Whether the room is paused.
    pub paused: bool,
    /// The room's mode: queue, passthrough or sold_out.
    #[schema(schema_with = mode)]
    pub mode: &'static str,
    /// The waiting page's heading.
    pub title: String,
    /// The operator's note on the pages.
    pub message: String,
    /// The status of the waiting page and JSON.
    pub queue_status_code: u16,
    /// Path globs proxied straight through.
    pub bypass_paths: Vec<String>,
    /// Path globs of assets.
    pub asset_paths: Vec<String>,
    /// Streams to the origin open at once; 0: no cap.
    pub stream_cap: u64,
    /// Requests at the origin at once on each replica; 0: no cap.
    pub max_inflight: u64,
    /// How long a request waits for an in-flight slot (`"5s"`).
    pub inflight_wait: String,
    /// The queue breaker; 0: no limit.
    pub max_waiting: u64,
    /// Places in line at once from one client; 0: no cap.
    pub max_places_per_client: u32,
    /// Sessions on the site at once from one client; 0: no cap.
    pub max_sessions_per_client: u32,
    /// Distinct clients one admitted session may be used from; 0: no cap.
    pub session_clients: u32,
    /// Whether the draw before `admits_at` is by lot.
    pub lottery: bool,
    /// Closed-loop admission; `null`: off.
    pub adaptive: Option<AdaptiveSetting>,
    /// The proof of work at the door.
    pub challenge: ChallengeSetting,
    /// Strikes within `abuse.window` that park a client in the shadow line; 0: off.
    pub shadow_after: u32,
    /// The schedule in force (each time null when not set).
    pub schedule: ScheduleSetting,
    /// Newcomers per client address per `join_limit_window`; 0: no limit.
    pub join_limit_per_ip: u32,
    /// The join limit's window (`"1m"`).
    pub join_limit_window: String,
    /// The settings an operator changed from the file's (by the file's names), kept in the
    /// store; the others are the file's.
    pub changed: Vec<String>,
}

/// Whether a change reached the audit log. A failed write does not undo the change.
#[derive(Debug, Serialize, ToSchema)]
pub struct Audit {
    /// Whether the audit line was written.
    pub written: bool,
    /// Why it was not; absent when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub error: Option<String>,
}

/// `PUT …/config`'s answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct ConfigResult {
    /// The room.
    pub room: String,
    /// Its settings after the change.
    pub settings: Settings,
    /// When the change takes effect: `from the next admission pass`.
    pub applies: &'static str,
    /// Whether the change was audited.
    pub audit: Audit,
}

/// Pause's and resume's answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct PauseResult {
    /// The room.
    pub room: String,
    /// Whether it is paused now.
    pub paused: bool,
    /// Whether the change was audited.
    pub audit: Audit,
}

/// Flush's answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct FlushResult {
    /// The room.
    pub room: String,
    /// How many waiting visitors were removed.
    pub flushed: u64,
    /// Whether the change was audited.
    pub audit: Audit,
}

/// One waiting visitor.
#[derive(Debug, Serialize, ToSchema)]
pub struct QueueEntry {
    /// The visitor's reference.
    #[serde(rename = "ref")]
    #[schema(value_type = String)]
    pub reference: VisitorRef,
    /// 1 for the head; null for a lottery entrant before the doors.
    #[schema(required = true)]
    pub position: Option<u64>,
    /// Unix ms when they took their current place (null while in a lottery draw).
    #[schema(required = true)]
    pub joined_at_ms: Option<u64>,
    /// Unix ms of their last heartbeat.
    pub last_seen_ms: u64,
}

impl From<WaitingEntry> for QueueEntry {
    fn from(e: WaitingEntry) -> QueueEntry {
        QueueEntry {
            reference: e.reference,
            position: e.position,
            joined_at_ms: e.joined_at_ms,
            last_seen_ms: e.last_seen_ms,
        }
    }
}

/// `GET …/queue`'s answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct QueueResult {
    /// The room.
    pub room: String,
    /// How many were asked for; null for a search by ref.
    #[schema(required = true)]
    pub limit: Option<u64>,
    /// Everyone in line, from the statistics cache.
    #[schema(required = true)]
    pub waiting: Option<u64>,
    /// The head of the line in order, or the one visitor found.
    pub entries: Vec<QueueEntry>,
}

/// `POST …/visitors/{ref}/front`'s answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct FrontResult {
    /// The room.
    pub room: String,
    /// The visitor's reference.
    #[serde(rename = "ref")]
    #[schema(value_type = String)]
    pub reference: VisitorRef,
    /// Their place now: 1, or null during a lottery draw.
    #[schema(required = true)]
    pub position: Option<u64>,
    /// Everyone in line.
    pub waiting: u64,
    /// Whether the change was audited.
    pub audit: Audit,
}

/// The room a path names.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code, reason = "describes the path segments the router captures")]
pub struct RoomPath {
    /// The room's name, as configured.
    #[param(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub room: String,
}

/// The room and the visitor a path names.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code, reason = "describes the path segments the router captures")]
pub struct VisitorPath {
    /// The room's name, as configured.
    #[param(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub room: String,
    /// The visitor's 8-character reference, as their waiting page shows it: Crockford
    /// base32, case-insensitive, O read as 0, I and L as 1, hyphens ignored.
    #[param(rename = "ref", pattern = "^-*([0-9A-TV-Za-tv-z]-*){8}$")]
    pub reference: String,
}

/// The ban a path names.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code, reason = "describes the path segments the router captures")]
pub struct TargetPath {
    /// URL-encoded address or CIDR (10.0.0.0%2F24).
    pub target: BanTarget,
}

/// `limit` and `cursor` of a paged list.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code, reason = "describes the query the handler parses")]
pub struct PageQuery {
    /// How many, newest first (default 50).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u64>,
    /// next_cursor of the previous page.
    #[param(minimum = 0, maximum = 18_446_744_073_709_551_615_u64)]
    pub cursor: Option<u64>,
}

/// `limit` or `ref` of `GET …/queue`.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code, reason = "describes the query the handler parses")]
pub struct QueueParams {
    /// How many from the head (default 50).
    #[param(minimum = 1, maximum = 1000, default = 50)]
    pub limit: Option<u64>,
    /// Find the one waiting visitor with this reference (case-insensitive; O reads as 0,
    /// I and L as 1); an empty list when nobody waiting has it.
    #[param(rename = "ref", pattern = "^-*([0-9A-TV-Za-tv-z]-*){8}$")]
    pub reference: Option<String>,
}
