//! A room's scheduled events: what one is, the rules a set of them keeps, which is current,
//! and the settings patch that makes the current one the room's.
//!
//! An event is kept in the store as one of the room's changes ([`crate::queue::RoomChanges`]),
//! under its own key `event:<id>` with its JSON as the value: two operators adding events
//! through two replicas write two keys, so neither loses the other's, and every replica
//! reads them with the room's other changes each second. The change under [`APPLIED_KEY`]
//! is the event last applied to the room (its JSON): a replica that finds the current
//! event differs from it writes [`apply_patch`] (the event's times as the `schedule`
//! setting, its overrides as an operator's change would be, and the new marker), over the
//! events' revision it read ([`over_revision`]): of replicas doing so at once, one writes
//! (and audits) it and the others find it applied. None of these keys is a setting:
//! [`super::live::effective`] skips them.
//!
//! **The current event** is the first, in time order, that has not closed by the store's
//! clock; when every one has closed, the last (so the room stays closed after it). Events
//! of a room do not overlap, so "first not closed" is the one whose window holds now, or
//! the next to open. Each replica decides by its own clock (the store's where the store
//! has one in this process); [`to_apply`] keeps a replica whose clock is a little behind
//! another's from undoing that one's move to the next event at a close.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::RoomConfig;
use super::live::{LiveError, effective, schedule_json};
use crate::queue::{MAX_MAX_ACTIVE, RoomChanges, Schedule, SettingsPatch, unix_ms};

/// The prefix of an event's key among the room's changes.
pub const EVENT_PREFIX: &str = "event:";
/// The key of the event last applied to the room (its JSON), among the room's changes.
pub const APPLIED_KEY: &str = "event";
/// The key of the events' revision among the room's changes: a token every write of the
/// events (an operator's, or an event applied) replaces, expecting the one it read
/// ([`over_revision`]), so a write checked against the events as read never lands over a
/// set another write changed meanwhile. Under [`EVENT_PREFIX`], so
/// every replica, this version or an older one, skips it as one of the events' keys, and
/// no event reads as it (an event's id is `ev-` and hex digits; the token is no event).
pub const REVISION_KEY: &str = "event:#revision";
/// Events one room may hold.
pub const MAX_EVENTS: usize = 100;
/// The longest `name`, in characters.
pub const MAX_NAME_CHARS: usize = 100;

/// Whether `key` among a room's changes belongs to its events rather than its settings.
pub fn is_event_key(key: &str) -> bool {
    key == APPLIED_KEY || key.starts_with(EVENT_PREFIX)
}

/// Makes `patch` a write of the events over `changes`, the room's changes as read: it
/// expects the revision read there ([`REVISION_KEY`]; none is `null`) and writes a fresh
/// one, random, so the store can tell this write sent again after a broken connection (it
/// holds this very token) from another write that came first (`StoreError::Conflict`).
pub fn over_revision(patch: &mut SettingsPatch, changes: &RoomChanges) {
    let read = changes.get(REVISION_KEY).cloned().unwrap_or(Value::Null);
    let fresh = Value::from(format!("r-{:016x}", rand::random::<u64>()));
    patch.changes.0.insert(REVISION_KEY.to_owned(), fresh);
    patch.expect = Some((REVISION_KEY.to_owned(), read));
}

/// One scheduled event of a room: its times, which become the room's schedule while it is
/// current, and its overrides, written over the room's settings when it becomes current.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Server-made, `ev-` and 8 hex digits.
    pub id: String,
    /// The operator's label; may be empty.
    #[serde(default)]
    pub name: String,
    /// When the line opens (before it, the room is in `pre_queue`).
    #[serde(with = "rfc3339")]
    pub queue_opens_at: SystemTime,
    /// When admission starts (the draw, if any, is between the two).
    #[serde(with = "rfc3339")]
    pub admits_at: SystemTime,
    /// When the room closes; `None`: it stays open (only the last event may).
    #[serde(default, with = "rfc3339_opt")]
    pub closes_at: Option<SystemTime>,
    /// Overrides the rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// Overrides `max_active`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_active: Option<u64>,
    /// Overrides the title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Overrides the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Overrides the lottery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lottery: Option<bool>,
}

/// Where an event stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventState {
    /// Not current, not closed.
    Upcoming,
    /// The room's current event.
    Current,
    /// Closed and not current.
    Over,
}

impl EventState {
    /// The state as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            EventState::Upcoming => "upcoming",
            EventState::Current => "current",
            EventState::Over => "over",
        }
    }
}

impl Event {
    /// The event's key among the room's changes.
    pub fn key(&self) -> String {
        format!("{EVENT_PREFIX}{}", self.id)
    }

    /// The event as kept in the store.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).expect("an event always serializes")
    }

    /// Whether it has closed at `now_ms`.
    pub fn closed_at(&self, now_ms: u64) -> bool {
        self.closes_at.is_some_and(|t| unix_ms(t) <= now_ms)
    }

    /// Its times as a schedule.
    pub fn schedule(&self) -> Schedule {
        Schedule {
            queue_opens_at: Some(self.queue_opens_at),
            admits_at: Some(self.admits_at),
            closes_at: self.closes_at,
        }
    }

    /// Its state at `now_ms`, given the room's current event's id.
    pub fn state(&self, current: Option<&str>, now_ms: u64) -> EventState {
        if current == Some(self.id.as_str()) {
            EventState::Current
        } else if self.closed_at(now_ms) {
            EventState::Over
        } else {
            EventState::Upcoming
        }
    }
}

/// A room's events from its changes, sorted by `queue_opens_at` (an entry that does not
/// parse, never written by the API, is left out).
pub fn events_of(changes: &RoomChanges) -> Vec<Event> {
    let mut events: Vec<Event> = changes
        .0
        .range(EVENT_PREFIX.to_owned()..)
        .take_while(|(k, _)| k.starts_with(EVENT_PREFIX))
        .filter_map(|(_, v)| serde_json::from_value(v.clone()).ok())
        .collect();
    sort(&mut events);
    events
}

/// The event last applied to the room, if any.
pub fn applied_of(changes: &RoomChanges) -> Option<Event> {
    changes
        .get(APPLIED_KEY)
        .and_then(|v| serde_json::from_value(v.clone()).ok())
}

fn sort(events: &mut [Event]) {
    events.sort_by(|a, b| (a.queue_opens_at, &a.id).cmp(&(b.queue_opens_at, &b.id)));
}

/// The current event of `events` (sorted) at `now_ms`: the first not closed, else the last.
pub fn current(events: &[Event], now_ms: u64) -> Option<&Event> {
    events
        .iter()
        .find(|e| !e.closed_at(now_ms))
        .or_else(|| events.last())
}

/// How far two replicas' clocks may differ (with Redis each replica decides by its own).
pub const CLOCK_SKEW_MS: u64 = 2_000;

/// The event a replica should apply at `now_ms`: [`current`], except that it never goes
/// back from the applied event to one closing within [`CLOCK_SKEW_MS`] from now (a
/// replica whose clock is behind another's must not undo that one's move to the next
/// event, back and forth until its clock catches up).
pub fn to_apply<'a>(
    events: &'a [Event],
    applied: Option<&Event>,
    now_ms: u64,
) -> Option<&'a Event> {
    let event = current(events, now_ms)?;
    if let Some(applied) = applied
        && applied.id != event.id
        && applied.queue_opens_at > event.queue_opens_at
        && event
            .closes_at
            .is_some_and(|c| unix_ms(c) <= now_ms.saturating_add(CLOCK_SKEW_MS))
        && let Some(later) = events.iter().find(|e| e.id == applied.id)
    {
        return Some(later);
    }
    Some(event)
}

/// What makes `current` the room's applied event, given the one applied so far: its times
/// as the schedule, its overrides, and the marker; with no event left, the marker and the
/// schedule given back. `None`: nothing to do.
pub fn apply_patch(current: Option<&Event>, applied: Option<&Event>) -> Option<SettingsPatch> {
    match (current, applied) {
        (Some(event), applied) if applied != Some(event) => {
            let mut changes = RoomChanges::default();
            let mut set = |key: &str, value: Value| {
                changes.0.insert(key.to_owned(), value);
            };
            set("schedule", schedule_json(&event.schedule()));
            if let Some(title) = &event.title {
                set("title", json!(title));
            }
            if let Some(message) = &event.message {
                set("message", json!(message));
            }
            if let Some(lottery) = event.lottery {
                set("lottery", json!(lottery));
            }
            set(APPLIED_KEY, event.to_json());
            Some(SettingsPatch {
                rate: event.rate,
                max_active: event.max_active,
                changes,
                ..SettingsPatch::default()
            })
        }
        (None, Some(_)) => {
            let changes = [(APPLIED_KEY, Value::Null), ("schedule", Value::Null)]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect();
            Some(SettingsPatch {
                changes: RoomChanges(changes),
                ..SettingsPatch::default()
            })
        }
        _ => None,
    }
}

/// A new event id: `ev-` and 8 random hex digits.
pub fn new_id() -> String {
    let mut bytes = [0u8; 4];
    getrandom::fill(&mut bytes).expect("the operating system's random generator failed");
    format!("ev-{:08x}", u32::from_be_bytes(bytes))
}

/// An event's body as the API takes it, `id` given; every rule of one event checked, the
/// overrides by the file's own rules over `file`. The field at fault is named.
pub fn parse_body(id: &str, body: &Value, file: &RoomConfig) -> Result<Event, LiveError> {
    let fail = |field: &str, reason: String| {
        Err(LiveError {
            field: field.to_owned(),
            reason,
        })
    };
    let Some(fields) = body.as_object() else {
        return fail(
            "body",
            "must be a JSON object with queue_opens_at and admits_at".to_owned(),
        );
    };
    const KNOWN: [&str; 9] = [
        "name",
        "queue_opens_at",
        "admits_at",
        "closes_at",
        "rate",
        "max_active",
        "title",
        "message",
        "lottery",
    ];
    if let Some(unknown) = fields.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return fail(
            unknown,
            format!(
                "is not a field of an event; expected any of {}",
                KNOWN.join(", ")
            ),
        );
    }
    let get = |key: &str| fields.get(key).filter(|v| !v.is_null());
    // To the millisecond, as every time is kept and shown.
    let time = |key: &str| -> Result<Option<SystemTime>, LiveError> {
        match get(key) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .ok_or(super::TimeError::Format)
                .and_then(super::parse_rfc3339)
                .map(|t| Some(std::time::UNIX_EPOCH + std::time::Duration::from_millis(unix_ms(t))))
                .map_err(|e| LiveError {
                    field: key.to_owned(),
                    reason: format!("{e} (got {v})"),
                }),
        }
    };
    let text = |key: &str| -> Result<Option<String>, LiveError> {
        match get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(LiveError {
                field: key.to_owned(),
                reason: format!("must be a string (got {v})"),
            }),
        }
    };
    let name = text("name")?.unwrap_or_default();
    if name.chars().count() > MAX_NAME_CHARS {
        return fail(
            "name",
            format!("must be at most {MAX_NAME_CHARS} characters"),
        );
    }
    let Some(queue_opens_at) = time("queue_opens_at")? else {
        return fail("queue_opens_at", "is required".to_owned());
    };
    let Some(admits_at) = time("admits_at")? else {
        return fail("admits_at", "is required".to_owned());
    };
    if admits_at < queue_opens_at {
        return fail("admits_at", "must not be before queue_opens_at".to_owned());
    }
    let closes_at = time("closes_at")?;
    if closes_at.is_some_and(|c| c <= admits_at) {
        return fail(
            "closes_at",
            "must be after admits_at (and queue_opens_at)".to_owned(),
        );
    }
    let rate = match get("rate") {
        None => None,
        Some(v) => match v.as_f64() {
            Some(r) if r.is_finite() && r > 0.0 && r <= 1_000_000.0 => Some(r),
            _ => {
                return fail(
                    "rate",
                    format!("must be a number above 0 and at most 1000000 (got {v})"),
                );
            }
        },
    };
    let max_active = match get("max_active") {
        None => None,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=MAX_MAX_ACTIVE).contains(&n) => Some(n),
            _ => {
                return fail(
                    "max_active",
                    format!("must be a whole number from 1 to {MAX_MAX_ACTIVE} (got {v})"),
                );
            }
        },
    };
    let lottery = match get("lottery") {
        None => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(v) => return fail("lottery", format!("must be true or false (got {v})")),
    };
    let event = Event {
        id: id.to_owned(),
        name,
        queue_opens_at,
        admits_at,
        closes_at,
        rate,
        max_active,
        title: text("title")?,
        message: text("message")?,
        lottery,
    };
    // The overrides kept as settings, by the file's rules (a field's error names it).
    if let Some(patch) = apply_patch(Some(&event), None) {
        let settings: RoomChanges = RoomChanges(
            patch
                .changes
                .0
                .into_iter()
                .filter(|(k, _)| !is_event_key(k))
                .collect(),
        );
        effective(file, &settings).map_err(|e| LiveError {
            field: e
                .field
                .strip_prefix("schedule.")
                .unwrap_or(&e.field)
                .to_owned(),
            reason: e.reason,
        })?;
    }
    Ok(event)
}

/// Checks a room's events as a set (any order): at most [`MAX_EVENTS`], and none
/// overlapping the next; an error names the later event's field and the other's id.
pub fn check_set(events: &[Event]) -> Result<(), LiveError> {
    if events.len() > MAX_EVENTS {
        return Err(LiveError {
            field: "body".to_owned(),
            reason: format!("a room holds at most {MAX_EVENTS} events"),
        });
    }
    let mut sorted = events.to_vec();
    sort(&mut sorted);
    for pair in sorted.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        match a.closes_at {
            None => {
                return Err(LiveError {
                    field: "closes_at".to_owned(),
                    reason: format!(
                        "is required: only the last event may stay open, and {} opens after {}",
                        b.id, a.id
                    ),
                });
            }
            Some(closes) if closes > b.queue_opens_at => {
                return Err(LiveError {
                    field: "queue_opens_at".to_owned(),
                    reason: format!(
                        "overlaps another event: {} closes after {} opens",
                        a.id, b.id
                    ),
                });
            }
            Some(_) => {}
        }
    }
    Ok(())
}

mod rfc3339 {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::SystemTime;

    pub fn serialize<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::super::live::rfc3339(*t))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_rfc3339_weak(&text).map_err(serde::de::Error::custom)
    }
}

mod rfc3339_opt {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::SystemTime;

    pub fn serialize<S: Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => super::rfc3339::serialize(t, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SystemTime>, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(None),
            Some(text) => humantime::parse_rfc3339_weak(&text)
                .map(Some)
                .map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
#[path = "tests/events.rs"]
mod tests;
