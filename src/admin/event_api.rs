//! The request and response bodies of a room's scheduled events (`…/rooms/{room}/events`),
//! as types: what the handlers in `events` serialize and what the OpenAPI document's
//! schemas are generated from. Kept apart from `api` only for its size.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};

use crate::config::events::Event as StoredEvent;

/// A scheduled event as written: its times and its overrides. Rules: `admits_at` not
/// before `queue_opens_at`, `closes_at` after both; a room's events do not overlap, and
/// only the last may leave `closes_at` out; at most 100 per room; the overrides by the
/// file's rules.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // The handlers read the body as JSON (each field's error named); this is its schema.
pub struct EventBody {
    /// A label for the operator, at most 100 characters.
    #[schema(max_length = 100)]
    pub name: Option<String>,
    /// When the line opens (RFC 3339); before it the room is in `pre_queue`.
    #[schema(format = DateTime)]
    pub queue_opens_at: String,
    /// When admission starts (RFC 3339), not before `queue_opens_at`; between the two the
    /// room is in `draw`.
    #[schema(format = DateTime)]
    pub admits_at: String,
    /// When the room closes (RFC 3339), after `admits_at`; null or absent: it stays open.
    #[schema(format = DateTime)]
    pub closes_at: Option<String>,
    /// The rate while it is current (and after, until changed).
    #[schema(exclusive_minimum = 0, maximum = 1_000_000)]
    pub rate: Option<f64>,
    /// `max_active` while it is current (and after, until changed).
    #[schema(minimum = 1, maximum = 1_000_000_000)]
    pub max_active: Option<u64>,
    /// The waiting page's heading from when it is current.
    pub title: Option<String>,
    /// The operator's note on the pages from when it is current.
    pub message: Option<String>,
    /// Whether the draw is by lot, from when it is current.
    pub lottery: Option<bool>,
}

/// A scheduled event with its id and where it stands.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct Event {
    /// Made by the server (`ev-` and 8 hex digits).
    pub id: String,
    /// The operator's label.
    pub name: String,
    /// When the line opens (RFC 3339, UTC).
    pub queue_opens_at: String,
    /// When admission starts (RFC 3339, UTC).
    pub admits_at: String,
    /// When the room closes (RFC 3339, UTC); null: it stays open.
    pub closes_at: Option<String>,
    /// The rate override; absent: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub rate: Option<f64>,
    /// The `max_active` override; absent: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub max_active: Option<u64>,
    /// The title override (at most 200 characters); absent: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, max_length = 200)]
    pub title: Option<String>,
    /// The message override (at most 2000 characters); absent: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, max_length = 2000)]
    pub message: Option<String>,
    /// The lottery override; absent: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub lottery: Option<bool>,
    /// `current` (the room runs on it: the first event not closed, else the last),
    /// `upcoming` or `over`.
    #[schema(schema_with = event_state)]
    pub state: &'static str,
}

/// A room's events, in the order they open.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventList {
    /// Every event, sorted by `queue_opens_at`.
    pub events: Vec<Event>,
    /// The current event's id; null when the room has none.
    pub current: Option<String>,
}

/// The current event in a room's counters.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct EventNow {
    /// Its id.
    pub id: String,
    /// Its label.
    pub name: String,
    /// `current`.
    #[schema(schema_with = event_state)]
    pub state: &'static str,
}

fn event_state() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["upcoming", "current", "over"]))
        .into()
}

impl Event {
    /// The stored event as the API shows it, in `state`.
    pub fn of(e: &StoredEvent, state: &'static str) -> Event {
        let time = crate::config::live::rfc3339;
        Event {
            id: e.id.clone(),
            name: e.name.clone(),
            queue_opens_at: time(e.queue_opens_at),
            admits_at: time(e.admits_at),
            closes_at: e.closes_at.map(time),
            rate: e.rate,
            max_active: e.max_active,
            title: e.title.clone(),
            message: e.message.clone(),
            lottery: e.lottery,
            state,
        }
    }
}
