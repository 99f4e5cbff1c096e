//! A room's settings that change while it runs, beyond the runtime ones the store keeps
//! as [`crate::queue::RoomSettings`]: which they are, how a change is checked, and the
//! room's effective config from the file's and the operator's changes
//! ([`crate::queue::RoomChanges`], kept in the store).
//!
//! A change is checked by the very rules that check the file: the file's room is turned
//! back into the raw layer, each change is written over its key as the file would have
//! it, and the whole room is validated again. So a live value means what it would in the
//! file (durations as `"5s"`, globs, the same ranges), and an error names the same key.
//!
//! A new live setting is a name in [`LIVE_KEYS`], its arm in `overlay` and in
//! [`canonical`].

use std::time::SystemTime;

use serde_json::{Value, json};

use super::file::{RawAdaptive, RawChallenge, RawRoom, RawSchedule};
use super::validate::{Ctx, Src, V};
use super::{ConfigError, RoomConfig, sections};
use crate::queue::RoomChanges;

/// The room settings an operator changes live by their file names (beside `rate`,
/// `max_active`, `session_ttl`, `abandon_after` and `mode`, the store's runtime settings).
pub const LIVE_KEYS: [&str; 19] = [
    "title",
    "message",
    "queue_status_code",
    "bypass_paths",
    "asset_paths",
    "stream_cap",
    "max_inflight",
    "inflight_wait",
    "max_waiting",
    "max_places_per_client",
    "max_sessions_per_client",
    "session_clients",
    "lottery",
    "adaptive",
    "challenge",
    "shadow_after",
    "schedule",
    "join_limit_per_ip",
    "join_limit_window",
];

/// A refused live change: the setting (as the file names it, with a list index or a key
/// inside `adaptive` when the fault is there) and why.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{field}: {reason}")]
pub struct LiveError {
    /// `inflight_wait`, `bypass_paths[1]`, `adaptive.min_rate`, …
    pub field: String,
    /// What is wrong with it, in the file's words.
    pub reason: String,
}

impl LiveError {
    fn new(field: &str, reason: impl Into<String>) -> LiveError {
        LiveError {
            field: field.to_owned(),
            reason: reason.into(),
        }
    }
}

/// Whether `key` is a live setting of [`LIVE_KEYS`].
pub fn is_live_key(key: &str) -> bool {
    LIVE_KEYS.contains(&key)
}

/// The room as it runs: `file`'s settings with `changes` over them, validated as a file
/// would be. A `null` change is no change.
pub fn effective(file: &RoomConfig, changes: &RoomChanges) -> Result<RoomConfig, LiveError> {
    if changes.is_empty() {
        return Ok(file.clone());
    }
    let mut raw = raw_of(file);
    for (key, value) in &changes.0 {
        // A room's scheduled events ride along in its changes; they are not settings
        // (the schedule they set is).
        if !value.is_null() && !super::events::is_event_key(key) {
            overlay(&mut raw, key, value)?;
        }
    }
    let cx = Ctx::new(None, None);
    sections::validate_room(&cx, &raw).map_err(|e| match e {
        ConfigError::Invalid { key, message, .. } => {
            let prefix = format!("rooms.{}.", file.name);
            let field = key.strip_prefix(&prefix).unwrap_or(&key);
            LiveError::new(field, message)
        }
        other => LiveError::new("body", other.to_string()),
    })
}

/// `key`'s value in `room`, in the form the admin API shows and the store keeps
/// (durations as text like `"5s"`, `adaptive` as an object or `false`).
pub fn canonical(room: &RoomConfig, key: &str) -> Value {
    let duration = |d| Value::String(humantime::format_duration(d).to_string());
    match key {
        "title" => json!(room.title),
        "message" => json!(room.message),
        "queue_status_code" => json!(room.queue_status_code),
        "bypass_paths" => json!(room.bypass_paths),
        "asset_paths" => json!(room.asset_paths),
        "stream_cap" => json!(room.stream_cap),
        "max_inflight" => json!(room.max_inflight),
        "inflight_wait" => duration(room.inflight_wait),
        "max_waiting" => json!(room.max_waiting),
        "max_places_per_client" => json!(room.max_places_per_client),
        "max_sessions_per_client" => json!(room.max_sessions_per_client),
        "session_clients" => json!(room.session_clients),
        "lottery" => json!(room.lottery),
        "adaptive" => match &room.adaptive {
            None => json!(false),
            Some(a) => json!({
                "target_latency": humantime::format_duration(a.target_latency).to_string(),
                "max_error_ratio": a.max_error_ratio,
                "min_rate": a.min_rate,
            }),
        },
        "challenge" => json!({
            "mode": room.challenge.mode.as_str(),
            "difficulty": room.challenge.difficulty,
            "no_js_wait": humantime::format_duration(room.challenge.no_js_wait).to_string(),
        }),
        "shadow_after" => json!(room.shadow_after),
        "join_limit_per_ip" => json!(room.join_limit_per_ip),
        "join_limit_window" => duration(room.join_limit_window),
        "schedule" => schedule_json(&room.schedule),
        _ => Value::Null,
    }
}

/// A time as the live settings, the events and the admin API write it: RFC 3339 in UTC,
/// to the millisecond when it has a fraction (`2030-01-01T10:00:00Z`,
/// `2030-01-01T10:00:00.250Z`).
pub fn rfc3339(t: SystemTime) -> String {
    let ms = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_millis());
    if ms == 0 {
        humantime::format_rfc3339_seconds(t).to_string()
    } else {
        humantime::format_rfc3339_millis(t).to_string()
    }
}

/// A schedule as the `schedule` setting holds it: each time given as RFC 3339 in UTC (the
/// form the store parses), the others left out.
pub fn schedule_json(schedule: &crate::queue::Schedule) -> Value {
    let times = [
        ("queue_opens_at", schedule.queue_opens_at),
        ("admits_at", schedule.admits_at),
        ("closes_at", schedule.closes_at),
    ];
    Value::Object(
        times
            .into_iter()
            .filter_map(|(key, t)| t.map(|t| (key.to_owned(), json!(rfc3339(t)))))
            .collect(),
    )
}

/// The live settings `new` gives other values than `old`, each in its [`canonical`] form:
/// what a reload of the file changes.
pub fn changed(old: &RoomConfig, new: &RoomConfig) -> RoomChanges {
    RoomChanges(
        LIVE_KEYS
            .iter()
            .filter_map(|key| {
                let value = canonical(new, key);
                (canonical(old, key) != value).then(|| ((*key).to_owned(), value))
            })
            .collect(),
    )
}

/// The raw layer a validated room came from (every value as text, as a file would hold it).
fn raw_of(room: &RoomConfig) -> RawRoom {
    let v = |text: String| Some(V::new(text, Src::Generated));
    let d = |d| v(humantime::format_duration(d).to_string());
    let t = |t: Option<SystemTime>| t.and_then(|t| v(humantime::format_rfc3339(t).to_string()));
    let list = |l: &[String]| {
        l.iter()
            .map(|s| V::new(s.clone(), Src::Generated))
            .collect()
    };
    RawRoom {
        name: V::new(room.name.clone(), Src::Generated),
        match_host: room.match_host.clone().and_then(v),
        origin: v(room.origin.to_string()),
        rate: v(room.rate.to_string()),
        max_active: v(room.max_active.to_string()),
        session_ttl: d(room.session_ttl),
        abandon_after: d(room.abandon_after),
        join_limit_per_ip: v(room.join_limit_per_ip.to_string()),
        join_limit_window: d(room.join_limit_window),
        max_sessions_per_client: v(room.max_sessions_per_client.to_string()),
        max_places_per_client: v(room.max_places_per_client.to_string()),
        session_clients: v(room.session_clients.to_string()),
        title: v(room.title.clone()),
        message: v(room.message.clone()),
        preserve_host: v(room.preserve_host.to_string()),
        lottery: v(room.lottery.to_string()),
        mode: v(room.mode.as_str().to_owned()),
        queue_status_code: v(room.queue_status_code.to_string()),
        schedule: (!room.schedule.is_empty()).then(|| RawSchedule {
            queue_opens_at: t(room.schedule.queue_opens_at),
            admits_at: t(room.schedule.admits_at),
            closes_at: t(room.schedule.closes_at),
        }),
        bypass_paths: list(&room.bypass_paths),
        asset_paths: list(&room.asset_paths),
        stream_cap: v(room.stream_cap.to_string()),
        max_inflight: v(room.max_inflight.to_string()),
        inflight_wait: d(room.inflight_wait),
        max_waiting: v(room.max_waiting.to_string()),
        adaptive: room.adaptive.as_ref().map(|a| RawAdaptive {
            target_latency: d(a.target_latency),
            max_error_ratio: v(a.max_error_ratio.to_string()),
            min_rate: v(a.min_rate.to_string()),
        }),
        challenge: Some(RawChallenge {
            mode: v(room.challenge.mode.as_str().to_owned()),
            difficulty: v(room.challenge.difficulty.to_string()),
            no_js_wait: d(room.challenge.no_js_wait),
        }),
        shadow_after: v(room.shadow_after.to_string()),
    }
}

/// One scalar of a change as the file's text.
fn scalar(key: &str, value: &Value) -> Result<V, LiveError> {
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => {
            return Err(LiveError::new(
                key,
                format!("must be a string, a number or true/false (got {value})"),
            ));
        }
    };
    Ok(V::new(text, Src::Generated))
}

/// Writes the change of `key` over the raw room.
fn overlay(raw: &mut RawRoom, key: &str, value: &Value) -> Result<(), LiveError> {
    let one = |value: &Value| scalar(key, value).map(Some);
    match key {
        "title" | "message" if !value.is_string() => {
            return Err(LiveError::new(
                key,
                format!("must be a string (got {value})"),
            ));
        }
        "title" => raw.title = one(value)?,
        "message" => raw.message = one(value)?,
        "queue_status_code" => raw.queue_status_code = one(value)?,
        "stream_cap" => raw.stream_cap = one(value)?,
        "max_inflight" => raw.max_inflight = one(value)?,
        "inflight_wait" => raw.inflight_wait = one(value)?,
        "max_waiting" => raw.max_waiting = one(value)?,
        "max_places_per_client" => raw.max_places_per_client = one(value)?,
        "max_sessions_per_client" => raw.max_sessions_per_client = one(value)?,
        "session_clients" => raw.session_clients = one(value)?,
        "lottery" => raw.lottery = one(value)?,
        "shadow_after" => raw.shadow_after = one(value)?,
        "join_limit_per_ip" => raw.join_limit_per_ip = one(value)?,
        "join_limit_window" => raw.join_limit_window = one(value)?,
        "schedule" => {
            // The times given; an empty object is a room without a schedule.
            let Value::Object(fields) = value else {
                return Err(LiveError::new(
                    key,
                    format!(
                        "must be an object like {{\"queue_opens_at\": \"2030-01-01T10:00:00Z\"}}, \
                         or null for the file's (got {value})"
                    ),
                ));
            };
            let mut s = RawSchedule::default();
            for (name, v) in fields {
                let field = format!("schedule.{name}");
                let text = match v {
                    Value::Null => None,
                    Value::String(_) => Some(scalar(&field, v)?),
                    _ => {
                        return Err(LiveError::new(
                            &field,
                            format!("must be an RFC 3339 time as a string, or null (got {v})"),
                        ));
                    }
                };
                match name.as_str() {
                    "queue_opens_at" => s.queue_opens_at = text,
                    "admits_at" => s.admits_at = text,
                    "closes_at" => s.closes_at = text,
                    _ => {
                        return Err(LiveError::new(
                            &field,
                            "is not a key of schedule; expected queue_opens_at, admits_at, \
                             closes_at",
                        ));
                    }
                }
            }
            raw.schedule = Some(s);
        }
        "challenge" => {
            // Given keys replace the running ones; the others keep their value.
            let Value::Object(fields) = value else {
                return Err(LiveError::new(
                    key,
                    format!("must be an object like {{\"mode\": \"always\"}} (got {value})"),
                ));
            };
            let c = raw.challenge.get_or_insert_with(RawChallenge::default);
            for (name, v) in fields {
                let field = format!("challenge.{name}");
                let text = Some(scalar(&field, v)?);
                match name.as_str() {
                    "mode" => c.mode = text,
                    "difficulty" => c.difficulty = text,
                    "no_js_wait" => c.no_js_wait = text,
                    _ => {
                        return Err(LiveError::new(
                            &field,
                            "is not a key of challenge; expected mode, difficulty, no_js_wait",
                        ));
                    }
                }
            }
        }
        "bypass_paths" | "asset_paths" => {
            let Some(items) = value.as_array() else {
                return Err(LiveError::new(
                    key,
                    format!("must be a list of path globs (got {value})"),
                ));
            };
            let mut list = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let Some(text) = item.as_str() else {
                    return Err(LiveError::new(
                        &format!("{key}[{i}]"),
                        format!("must be a path glob as a string (got {item})"),
                    ));
                };
                list.push(V::new(text, Src::Generated));
            }
            if key == "bypass_paths" {
                raw.bypass_paths = list;
            } else {
                raw.asset_paths = list;
            }
        }
        "adaptive" => {
            raw.adaptive = match value {
                Value::Bool(false) => None,
                Value::Object(fields) => {
                    let mut a = RawAdaptive::default();
                    for (name, v) in fields {
                        let field = format!("adaptive.{name}");
                        let text = Some(scalar(&field, v)?);
                        match name.as_str() {
                            "target_latency" => a.target_latency = text,
                            "max_error_ratio" => a.max_error_ratio = text,
                            "min_rate" => a.min_rate = text,
                            _ => {
                                return Err(LiveError::new(
                                    &field,
                                    "is not a key of adaptive; expected target_latency, \
                                     max_error_ratio, min_rate",
                                ));
                            }
                        }
                    }
                    Some(a)
                }
                _ => {
                    return Err(LiveError::new(
                        key,
                        format!(
                            "must be an object like {{\"target_latency\": \"800ms\"}}, or false \
                             for off (got {value})"
                        ),
                    ));
                }
            }
        }
        _ => {
            return Err(LiveError::new(
                key,
                format!(
                    "is not a room setting that changes live; expected any of {}",
                    LIVE_KEYS.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn room(extra: &str) -> RoomConfig {
        let yaml = format!(
            "listen: 127.0.0.1:0\ncookie_secret: {}\nadmin_token: live-test-admin-token-0123\nrooms:\n  main:\n    origin: http://127.0.0.1:9/base\n    schedule:\n      queue_opens_at: 2030-01-01T10:00:00Z\n      admits_at: 2030-01-01T10:05:00Z\n{extra}",
            "ab".repeat(32)
        );
        super::super::from_yaml_str(&yaml, "t.yaml")
            .unwrap()
            .rooms
            .remove(0)
    }

    fn changes(v: Value) -> RoomChanges {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn no_change_is_the_file_and_a_round_trip_changes_nothing() {
        let file = room("    adaptive: {target_latency: 800ms}\n    bypass_paths: [/api/*]\n");
        let same = effective(&file, &changes(json!({"title": file.title}))).unwrap();
        assert_eq!(format!("{same:?}"), format!("{file:?}"));
    }

    #[test]
    fn each_change_applies_as_the_file_would_have_it() {
        let file = room("");
        let live = effective(
            &file,
            &changes(json!({
                "title": "The drop", "message": "Soon", "queue_status_code": 429,
                "bypass_paths": ["/health"], "asset_paths": ["/static/*"],
                "stream_cap": 3, "max_inflight": 4, "inflight_wait": "2s",
                "max_waiting": 9, "max_places_per_client": 1, "max_sessions_per_client": 2,
                "session_clients": 3, "lottery": true,
                "adaptive": {"target_latency": "500ms", "min_rate": 2},
            })),
        )
        .unwrap();
        assert_eq!(live.title, "The drop");
        assert_eq!(live.message, "Soon");
        assert_eq!(live.queue_status_code, 429);
        assert_eq!(live.bypass_paths, ["/health"]);
        assert_eq!(live.asset_paths, ["/static/*"]);
        assert_eq!((live.stream_cap, live.max_inflight), (3, 4));
        assert_eq!(live.inflight_wait, Duration::from_secs(2));
        assert_eq!(live.max_waiting, 9);
        assert_eq!(
            (
                live.max_places_per_client,
                live.max_sessions_per_client,
                live.session_clients
            ),
            (1, 2, 3)
        );
        assert!(live.lottery);
        let a = live.adaptive.unwrap();
        assert_eq!(a.target_latency, Duration::from_millis(500));
        assert_eq!(a.min_rate, 2.0);
        assert!(
            effective(
                &room("    adaptive: {target_latency: 1s}\n"),
                &changes(json!({"adaptive": false}))
            )
            .unwrap()
            .adaptive
            .is_none()
        );
    }

    #[test]
    fn a_bad_value_names_its_field() {
        let file = room("");
        for (change, field) in [
            (json!({"queue_status_code": 404}), "queue_status_code"),
            (json!({"inflight_wait": "soon"}), "inflight_wait"),
            (json!({"bypass_paths": ["/ok", "/a?b"]}), "bypass_paths[1]"),
            (json!({"max_waiting": -1}), "max_waiting"),
            (json!({"title": 5}), "title"),
            (json!({"title": "x".repeat(201)}), "title"),
            (json!({"message": "é".repeat(2001)}), "message"),
            (json!({"lottery": "maybe"}), "lottery"),
            (
                json!({"adaptive": {"target_latency": "1s", "min_rate": -1}}),
                "adaptive.min_rate",
            ),
            (json!({"adaptive": {"speed": 1}}), "adaptive.speed"),
            (json!({"origin": "http://x"}), "origin"),
        ] {
            let e = effective(&file, &changes(change.clone())).unwrap_err();
            assert_eq!(e.field, field, "{change}: {e}");
        }
    }

    #[test]
    fn the_schedule_and_the_join_limit_change_live() {
        let file = room("");
        let live = effective(
            &file,
            &changes(json!({
                "schedule": {"queue_opens_at": "2031-01-01T10:00:00+01:00", "closes_at": "2031-01-01T10:00:00Z"},
                "join_limit_per_ip": 5, "join_limit_window": "30s",
            })),
        )
        .unwrap();
        let at = |s: &str| Some(humantime::parse_rfc3339(s).unwrap());
        assert_eq!(live.schedule.queue_opens_at, at("2031-01-01T09:00:00Z"));
        assert_eq!(live.schedule.admits_at, None);
        assert_eq!(live.schedule.closes_at, at("2031-01-01T10:00:00Z"));
        assert_eq!(live.join_limit_per_ip, 5);
        assert_eq!(live.join_limit_window, Duration::from_secs(30));
        assert_eq!(
            canonical(&live, "schedule"),
            json!({"queue_opens_at": "2031-01-01T09:00:00Z", "closes_at": "2031-01-01T10:00:00Z"})
        );
        assert_eq!(canonical(&live, "join_limit_window"), json!("30s"));
        // An empty object is no schedule; the store reads the canonical form back.
        assert!(
            effective(&file, &changes(json!({"schedule": {}})))
                .unwrap()
                .schedule
                .is_empty()
        );
        let policy = changes(json!({"schedule": canonical(&live, "schedule")}))
            .policy(&crate::queue::RoomPolicy::of(&file));
        assert_eq!(policy.schedule, live.schedule);
        for (change, field) in [
            (json!({"schedule": "tomorrow"}), "schedule"),
            (
                json!({"schedule": {"admits_at": "soon"}}),
                "schedule.admits_at",
            ),
            (
                json!({"schedule": {"opens": "2031-01-01T10:00:00Z"}}),
                "schedule.opens",
            ),
            (
                json!({"schedule": {"queue_opens_at": "2031-01-01T10:00:00Z", "admits_at": "2031-01-01T09:00:00Z"}}),
                "schedule.admits_at",
            ),
            (json!({"join_limit_window": "0s"}), "join_limit_window"),
            (json!({"join_limit_per_ip": -1}), "join_limit_per_ip"),
        ] {
            let e = effective(&file, &changes(change.clone())).unwrap_err();
            assert_eq!(e.field, field, "{change}: {e}");
        }
    }

    #[test]
    fn a_reload_changes_the_keys_whose_values_moved() {
        let old = room("    title: A\n");
        let new = room("    title: B\n    inflight_wait: 3s\n");
        assert_eq!(
            changed(&old, &new),
            changes(json!({"title": "B", "inflight_wait": "3s"}))
        );
        assert!(changed(&old, &old).is_empty());
    }
}
