//! A room's reads and changes: the counters of every room or one (from the statistics
//! cache, never a store round trip; with the room's mode and phase), `PUT …/config` and
//! the body it takes (the mode among the settings), pause, resume and flush. Changes go to the store through admission and are recorded
//! ([`super::record`]).

use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use serde_json::{Value, json};

use crate::admission::CachedStats;
use crate::http::body::Body;
use crate::queue::{Mode, RoomSettings, SettingsPatch};

use super::body::read_body;
use super::problem::ok;
use super::record::audit;
use super::{AdminContext, AdminError, Caller, FieldError, RoomLimits};

/// The fields `PUT …/config` accepts.
pub const CONFIG_FIELDS: [&str; 5] = [
    "rate",
    "max_active",
    "session_ttl_secs",
    "abandon_after_secs",
    "mode",
];

/// `GET …/rooms`: every room with its counters (`stats_available: false` for a room the
/// cache has no statistics of yet).
pub(super) fn rooms(app: &AdminContext<'_>) -> Response<Body> {
    let rooms: Vec<Value> = app
        .rooms
        .iter()
        .map(|r| room_view(r, app.admission.cached_stats(r), app.limits_of(r)))
        .collect();
    ok(json!({ "rooms": rooms }))
}

/// `GET …/rooms/{room}/stats`: one room's counters.
pub(super) fn stats(app: &AdminContext<'_>, room: &str) -> Result<Response<Body>, AdminError> {
    let cached = app
        .admission
        .cached_stats(room)
        .ok_or(AdminError::NoStatsYet)?;
    Ok(ok(room_view(room, Some(cached), app.limits_of(room))))
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
        // Closed-loop admission (docs/fairness.md): the rate passes use, and why it differs.
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
        "mode": s.settings.mode,
        "phase": s.phase(),
        "total_passed_through": s.total_passed_through,
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
        // This replica's honest-ETA figures over the last hour (docs/fairness.md, "Honest ETA").
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
        "mode": s.mode,
    })
}

/// `PUT …/config`.
pub(super) async fn configure(
    app: &AdminContext<'_>,
    req: Request<Incoming>,
    room: &str,
    who: &Caller,
) -> Result<Response<Body>, AdminError> {
    let body = read_body(req, app.admin.body_timeout).await?;
    // A mode that names none is a value the API cannot serve (422); the rest is 400.
    let patch = parse_patch(&body).map_err(|e| match e.field.as_str() {
        "mode" => AdminError::Unprocessable(e),
        _ => AdminError::BadRequest(e),
    })?;
    let current = app.admission.settings(room).await?;
    // Checked here too so the error names the API's field; the store checks again
    // atomically, so a refusal there changes nothing either.
    current.patched(&patch)?;
    let new = app.admission.update_settings(room, &patch).await?;
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
    Ok(ok(json!({
        "room": room,
        "settings": new_view,
        "applies": "from the next admission pass",
        "audit": audit,
    })))
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

/// `POST …/pause` and `…/resume`.
pub(super) async fn set_paused(
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
    Ok(ok(json!({ "room": room, "paused": new, "audit": audit })))
}

/// `POST …/flush`.
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
    Ok(ok(
        json!({ "room": room, "flushed": removed, "audit": audit }),
    ))
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
            format!(
                "names no setting; expected any of {}",
                CONFIG_FIELDS.join(", ")
            ),
        );
    }
    let seconds = |field: &str, v: &Value| -> Result<Duration, FieldError> {
        let secs = v.as_f64().filter(|s| s.is_finite() && *s >= 0.0);
        secs.and_then(|s| Duration::try_from_secs_f64(s).ok())
            .ok_or_else(|| FieldError::new(field, format!("must be a number of seconds (got {v})")))
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
