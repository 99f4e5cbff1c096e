//! A room's reads and changes: the counters of every room or one (from the statistics
//! cache, never a store round trip; with the room's mode and phase), `PUT …/config` and
//! the body it takes (the mode among the settings), pause, resume and flush. Changes go to the store through admission and are recorded
//! ([`super::record`]).

use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use serde_json::{Value, json};

use crate::admission::CachedStats;
use crate::config::RoomConfig;
use crate::config::live::{LIVE_KEYS, canonical, effective, is_live_key};
use crate::http::body::Body;
use crate::queue::{Mode, RoomChanges, RoomSettings, SettingsPatch};

use super::api::{
    AdaptiveSetting, AdaptiveStats, ChallengeSetting, ConfigPatch, ConfigResult, EtaReport,
    FlushResult, Inflight, PauseResult, Problem, RoomList, RoomPath, RoomStats, ScheduleSetting,
    Settings,
};
use super::body::{read_body, whole_number};
use super::openapi::{Guarded, InRoom, UnknownRoom, WithBody};
use super::problem::ok;
use super::record::audit;
use super::{AdminContext, AdminError, Caller, FieldError, RoomLimits};

/// The runtime fields `PUT …/config` accepts besides the live settings of
/// [`crate::config::live::LIVE_KEYS`] (and `inflight_wait_secs`).
pub const CONFIG_FIELDS: [&str; 7] = [
    "rate",
    "max_active",
    "session_ttl_secs",
    "abandon_after_secs",
    "session_ttl",
    "abandon_after",
    "mode",
];

/// Every field `PUT …/config` accepts, for its error messages.
fn all_fields() -> String {
    let mut names: Vec<&str> = CONFIG_FIELDS.to_vec();
    names.extend(LIVE_KEYS);
    names.push("inflight_wait_secs");
    names.join(", ")
}

/// Whether an error about `field` is about a value the API cannot serve (422) rather than
/// a malformed request (400): the mode and every setting kept beside the runtime ones.
fn unprocessable(field: &str) -> bool {
    let base = field.split(['[', '.']).next().unwrap_or(field);
    matches!(
        base,
        "mode" | "session_ttl" | "abandon_after" | "inflight_wait_secs"
    ) || is_live_key(base)
}

/// Every room with its counters
///
/// `stats_available: false` for a room the cache has no statistics of yet.
#[utoipa::path(
    get,
    path = "/__anteroom/admin/api/rooms",
    operation_id = "listRooms",
    responses(
        (status = 200, description = "Rooms", body = RoomList),
        Guarded,
    )
)]
pub(super) fn rooms(app: &AdminContext<'_>) -> Response<Body> {
    let rooms = app
        .rooms
        .iter()
        .map(|r| room_view(r, app.admission.cached_stats(r), app.limits_of(r)))
        .collect();
    ok(&RoomList { rooms })
}

/// One room's counters
#[utoipa::path(
    get,
    path = "/__anteroom/admin/api/rooms/{room}/stats",
    operation_id = "roomStats",
    params(RoomPath),
    responses(
        (status = 200, description = "Counters", body = RoomStats),
        (status = 404, response = UnknownRoom),
        (status = 503, description = "No statistics yet: the store has not answered since this replica started",
            body = Problem, content_type = "application/problem+json"),
        Guarded,
    )
)]
pub(super) fn stats(app: &AdminContext<'_>, room: &str) -> Result<Response<Body>, AdminError> {
    let cached = app
        .admission
        .cached_stats(room)
        .ok_or(AdminError::NoStatsYet)?;
    Ok(ok(&room_view(room, Some(cached), app.limits_of(room))))
}

/// A room's counters (and its origin protections) as the API shows them.
fn room_view(room: &str, cached: Option<CachedStats>, limits: RoomLimits) -> RoomStats {
    let Some(c) = cached else {
        return RoomStats {
            room: room.to_owned(),
            ..RoomStats::default()
        };
    };
    let s = &c.stats;
    RoomStats {
        room: room.to_owned(),
        stats_available: true,
        waiting: Some(s.waiting),
        active: Some(s.active),
        max_active: Some(s.settings.max_active),
        rate: Some(s.settings.rate),
        // Closed-loop admission (docs/fairness.md): the rate passes use, and why it differs.
        effective_rate: Some(c.effective_rate()),
        rate_reason: Some(c.adaptive.as_ref().map_or("configured", |a| a.rate_reason)),
        adaptive: Some(c.adaptive.as_ref().map(|a| AdaptiveStats {
            explanation: a.explanation.clone(),
            origin_p95_ms: a.origin_p95_ms,
            origin_error_ratio: a.origin_error_ratio,
            origin_samples: a.origin_samples,
            target_latency_ms: a.target_latency_ms,
            max_error_ratio: a.max_error_ratio,
        })),
        paused: Some(s.settings.paused),
        mode: Some(s.settings.mode.as_str()),
        phase: Some(s.phase().as_str()),
        total_passed_through: Some(s.total_passed_through),
        session_ttl_secs: Some(s.settings.session_ttl.as_secs_f64()),
        abandon_after_secs: Some(s.settings.abandon_after.as_secs_f64()),
        total_joined: Some(s.total_joined),
        total_admitted: Some(s.total_admitted),
        total_expired: Some(s.total_expired),
        total_abandoned: Some(s.total_abandoned),
        total_refused: Some(s.total_refused),
        observed_rate: Some(c.observed_rate()),
        last_pass_ms: Some(c.last_pass.map(|d| d.as_secs_f64() * 1000.0)),
        stats_age_secs: Some(c.read_at.elapsed().as_secs_f64()),
        // This replica's honest-ETA figures over the last hour (docs/fairness.md, "Honest ETA").
        eta: Some(EtaReport {
            admitted: c.eta.admitted,
            within_range: c.eta.within_range,
            median_error_secs: c.eta.median_error_secs,
        }),
        eta_revised: Some(c.eta_revised),
        estimating: Some(c.pace().eta(1).estimating),
        // This replica's origin in-flight cap (null: none) and the queue breaker (0: off).
        inflight: Some(limits.inflight.map(|i| Inflight {
            now: i.now,
            max: i.max,
        })),
        max_waiting: Some(limits.max_waiting),
        event: Some(super::events::now_of(&s.settings.changes)),
    }
}

/// The settings as they run: the store's runtime ones, and `file`'s with the operator's
/// changes.
fn settings_view(s: &RoomSettings, file: &RoomConfig) -> Settings {
    let live = effective(file, &s.changes).unwrap_or_else(|_| file.clone());
    Settings {
        rate: s.rate,
        max_active: s.max_active,
        session_ttl_secs: s.session_ttl.as_secs_f64(),
        abandon_after_secs: s.abandon_after.as_secs_f64(),
        paused: s.paused,
        mode: s.mode.as_str(),
        inflight_wait: humantime::format_duration(live.inflight_wait).to_string(),
        adaptive: live.adaptive.as_ref().map(|a| AdaptiveSetting {
            target_latency: humantime::format_duration(a.target_latency).to_string(),
            max_error_ratio: a.max_error_ratio,
            min_rate: a.min_rate,
        }),
        changed: s
            .changes
            .0
            .keys()
            .filter(|k| !crate::config::events::is_event_key(k))
            .cloned()
            .collect(),
        title: live.title,
        message: live.message,
        queue_status_code: live.queue_status_code,
        bypass_paths: live.bypass_paths,
        asset_paths: live.asset_paths,
        stream_cap: live.stream_cap,
        max_inflight: live.max_inflight,
        max_waiting: live.max_waiting,
        max_places_per_client: live.max_places_per_client,
        max_sessions_per_client: live.max_sessions_per_client,
        session_clients: live.session_clients,
        lottery: live.lottery,
        challenge: ChallengeSetting {
            mode: live.challenge.mode.as_str(),
            difficulty: live.challenge.difficulty,
            no_js_wait: humantime::format_duration(live.challenge.no_js_wait).to_string(),
        },
        shadow_after: live.shadow_after,
        schedule: {
            let time = |t: Option<std::time::SystemTime>| t.map(crate::config::live::rfc3339);
            ScheduleSetting {
                queue_opens_at: time(live.schedule.queue_opens_at),
                admits_at: time(live.schedule.admits_at),
                closes_at: time(live.schedule.closes_at),
            }
        },
        join_limit_per_ip: live.join_limit_per_ip,
        join_limit_window: humantime::format_duration(live.join_limit_window).to_string(),
    }
}

/// A room's settings as they run now (read from the store)
#[utoipa::path(
    get,
    path = "/__anteroom/admin/api/rooms/{room}/config",
    operation_id = "roomConfig",
    params(RoomPath),
    responses(
        (status = 200, description = "The settings in force", body = Settings),
        InRoom,
    )
)]
pub(super) async fn config(
    app: &AdminContext<'_>,
    room: &str,
) -> Result<Response<Body>, AdminError> {
    let file = app
        .file_of(room)
        .ok_or_else(|| AdminError::UnknownRoom(room.to_owned()))?;
    let current = app.admission.settings(room).await?;
    Ok(ok(&settings_view(&current, file)))
}

/// Change any of a room's settings (any subset), under the file's names
#[utoipa::path(
    put,
    path = "/__anteroom/admin/api/rooms/{room}/config",
    operation_id = "configureRoom",
    params(RoomPath),
    request_body = ConfigPatch,
    responses(
        (status = 200, description = "Applied from the next admission pass", body = ConfigResult),
        (status = 400, description = "Invalid input; `field` names it (malformed JSON, not an object, no field, an unknown field, wrong type, out of range: rate above 0 and at most 1000000, max_active 1 to 1000000000, seconds 1 to 31536000, 365 days)",
            body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A value the room cannot run with: a mode that is not one of queue, passthrough, sold_out, or any other setting that the file would refuse (a status code, a glob, a duration, a share, adaptive); `field` names it (`bypass_paths[1]`, `adaptive.min_rate`) and nothing was changed",
            body = Problem, content_type = "application/problem+json"),
        InRoom,
        WithBody,
    )
)]
pub(super) async fn configure(
    app: &AdminContext<'_>,
    req: Request<Incoming>,
    room: &str,
    who: &Caller,
) -> Result<Response<Body>, AdminError> {
    let body = read_body(req, app.admin.body_timeout).await?;
    let refused = |e: FieldError| {
        if unprocessable(&e.field) {
            AdminError::Unprocessable(e)
        } else {
            AdminError::BadRequest(e)
        }
    };
    let mut patch = parse_patch(&body).map_err(refused)?;
    let file = app
        .file_of(room)
        .ok_or_else(|| AdminError::UnknownRoom(room.to_owned()))?;
    let current = app.admission.settings(room).await?;
    // Checked here too so the error names the API's field; the store checks again
    // atomically, so a refusal there changes nothing either.
    current
        .patched(&patch)
        .map_err(|e| match AdminError::from(e) {
            AdminError::BadRequest(e) => refused(e),
            other => other,
        })?;
    // The other settings by the file's own rules, over the changes already live; each
    // is kept in its canonical form.
    let live = effective(file, &current.changes.merged(&patch.changes))
        .map_err(|e| AdminError::Unprocessable(FieldError::new(&e.field, e.reason)))?;
    for (key, value) in patch.changes.0.iter_mut() {
        if !value.is_null() {
            *value = canonical(&live, key);
        }
    }
    let new = app.admission.update_settings(room, &patch).await?;
    let (old_view, new_view) = (settings_view(&current, file), settings_view(&new, file));
    let (old_named, new_named) = (named(&patch, &old_view), named(&patch, &new_view));
    tracing::info!(room, caller = %who.ip, old = %old_named, new = %new_named, "admin: settings changed");
    let audit = audit(app, room, "config", old_named, new_named, who).await;
    Ok(ok(&ConfigResult {
        room: room.to_owned(),
        settings: new_view,
        applies: "from the next admission pass",
        audit,
    }))
}

/// The settings the patch names, as the audit line records them.
fn named(patch: &SettingsPatch, view: &Settings) -> Value {
    let view = serde_json::to_value(view).expect("settings serialize");
    CONFIG_FIELDS
        .iter()
        .filter(|f| patch_names(patch, f))
        .map(|f| (*f).to_owned())
        .chain(patch.changes.0.keys().cloned())
        .map(|f| {
            let value = view[f.as_str()].clone();
            (f, value)
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

fn patch_names(patch: &SettingsPatch, field: &str) -> bool {
    match field {
        "rate" => patch.rate.is_some(),
        "max_active" => patch.max_active.is_some(),
        "session_ttl_secs" => patch.session_ttl.is_some(),
        "abandon_after_secs" => patch.abandon_after.is_some(),
        "mode" => patch.mode.is_some(),
        _ => false,
    }
}

/// Hold everyone; nobody is admitted, not even by the fast path
#[utoipa::path(
    post,
    path = "/__anteroom/admin/api/rooms/{room}/pause",
    operation_id = "pauseRoom",
    params(RoomPath),
    responses(
        (status = 200, description = "Paused", body = PauseResult),
        InRoom,
    )
)]
pub(super) async fn pause(
    app: &AdminContext<'_>,
    room: &str,
    who: &Caller,
) -> Result<Response<Body>, AdminError> {
    set_paused(app, room, true, who).await
}

/// Admit again from the next admission pass
#[utoipa::path(
    post,
    path = "/__anteroom/admin/api/rooms/{room}/resume",
    operation_id = "resumeRoom",
    params(RoomPath),
    responses(
        (status = 200, description = "Resumed", body = PauseResult),
        InRoom,
    )
)]
pub(super) async fn resume(
    app: &AdminContext<'_>,
    room: &str,
    who: &Caller,
) -> Result<Response<Body>, AdminError> {
    set_paused(app, room, false, who).await
}

async fn set_paused(
    app: &AdminContext<'_>,
    room: &str,
    paused: bool,
    who: &Caller,
) -> Result<Response<Body>, AdminError> {
    let old = app.admission.settings(room).await?.paused;
    let patch = if paused {
        SettingsPatch::pause()
    } else {
        SettingsPatch::resume()
    };
    let new = app.admission.update_settings(room, &patch).await?.paused;
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
    Ok(ok(&PauseResult {
        room: room.to_owned(),
        paused: new,
        audit,
    }))
}

/// Empty the line; sessions on the site are untouched
#[utoipa::path(
    post,
    path = "/__anteroom/admin/api/rooms/{room}/flush",
    operation_id = "flushRoom",
    params(RoomPath),
    responses(
        (status = 200, description = "Flushed", body = FlushResult),
        InRoom,
    )
)]
pub(super) async fn flush(
    app: &AdminContext<'_>,
    room: &str,
    who: &Caller,
) -> Result<Response<Body>, AdminError> {
    let removed = app.admission.flush(room).await?;
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
    Ok(ok(&FlushResult {
        room: room.to_owned(),
        flushed: removed,
        audit,
    }))
}

/// A `PUT …/config` body as a patch, or the field at fault and why.
pub fn parse_patch(body: &[u8]) -> Result<SettingsPatch, FieldError> {
    let fail = |field: &str, detail: String| Err(FieldError::new(field, detail));
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
            format!("names no setting; expected any of {}", all_fields()),
        );
    }
    let text_duration = |field: &str, v: &Value| -> Result<Duration, FieldError> {
        v.as_str()
            .and_then(|t| humantime::parse_duration(t.trim()).ok())
            .ok_or_else(|| {
                FieldError::new(
                    field,
                    format!("must be a duration like 250ms, 60s or 5m (got {v})"),
                )
            })
    };
    let seconds = |field: &str, v: &Value| -> Result<Duration, FieldError> {
        let secs = v.as_f64().filter(|s| s.is_finite() && *s >= 0.0);
        secs.and_then(|s| Duration::try_from_secs_f64(s).ok())
            .ok_or_else(|| FieldError::new(field, format!("must be a number of seconds (got {v})")))
    };
    let mut patch = SettingsPatch::default();
    let mut changes = std::collections::BTreeMap::new();
    for (key, v) in object {
        match key.as_str() {
            "rate" => match v.as_f64() {
                Some(rate) => patch.rate = Some(rate),
                None => return fail("rate", format!("must be a number (got {v})")),
            },
            "max_active" => match whole_number(v) {
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
            "session_ttl" => patch.session_ttl = Some(text_duration(key, v)?),
            "abandon_after" => patch.abandon_after = Some(text_duration(key, v)?),
            "inflight_wait_secs" => {
                let wait = seconds(key, v)?;
                changes.insert(
                    "inflight_wait".to_owned(),
                    Value::String(humantime::format_duration(wait).to_string()),
                );
            }
            live if is_live_key(live) => {
                changes.insert(live.to_owned(), v.clone());
            }
            "mode" => match v.as_str().and_then(Mode::parse) {
                Some(mode) => patch.mode = Some(mode),
                None => {
                    return fail(
                        "mode",
                        format!("must be one of {} (got {v})", Mode::names()),
                    );
                }
            },
            other => {
                return fail(
                    other,
                    format!("is not a setting; expected any of {}", all_fields()),
                );
            }
        }
    }
    patch.changes = RoomChanges(changes);
    Ok(patch)
}
