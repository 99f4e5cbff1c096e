//! A room's scheduled events through the API: list, create, replace, delete. Each event is
//! one of the room's changes in the store (`crate::config::events` says why and how it
//! applies); a write checks the whole set (no overlap, at most 100) over the events as
//! read just before, writes the one key only if no other write of the events came between
//! (else it reads and checks again: [`commit`]), and applies the room's current event at
//! once through this replica (the others follow within a second). Every write is audited.

use http::{Request, Response, StatusCode, header};
use hyper::body::Incoming;
use serde_json::Value;

use crate::config::events::{
    self as ev, APPLIED_KEY, Event as StoredEvent, check_set, current, events_of, new_id,
    over_revision, parse_body,
};
use crate::http::body::Body;
use crate::queue::{RoomChanges, SettingsPatch, StoreError};

use super::api::{Problem, RoomPath};
use super::body::read_body;
use super::event_api::{Event, EventBody, EventList};
use super::openapi::{Guarded, InRoom, StoreUnavailable, WithBody};
use super::problem::{json as json_response, ok};
use super::record::audit;
use super::{AdminContext, AdminError, Caller, FieldError};

/// The path of one event.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // The router captures it; this is its schema.
pub(super) struct EventPath {
    /// The room's name.
    room: String,
    /// The event's id.
    id: String,
}

/// The room's events as just read from the store, sorted, and the store's time now.
async fn read(
    app: &AdminContext<'_>,
    room: &str,
) -> Result<(RoomChanges, Vec<StoredEvent>, u64), AdminError> {
    let changes = app.admission.settings(room).await?.changes;
    let events = events_of(&changes);
    Ok((changes, events, app.admission.now_ms()))
}

/// The list as the API shows it.
fn list(events: &[StoredEvent], now: u64) -> EventList {
    let now_id = current(events, now).map(|e| e.id.clone());
    EventList {
        events: events
            .iter()
            .map(|e| Event::of(e, e.state(now_id.as_deref(), now).as_str()))
            .collect(),
        current: now_id,
    }
}

/// One event as the API shows it, among `events`.
fn view(event: &StoredEvent, events: &[StoredEvent], now: u64) -> Event {
    let now_id = current(events, now).map(|e| e.id.as_str());
    Event::of(event, event.state(now_id, now).as_str())
}

/// A room's scheduled events
#[utoipa::path(
    get,
    path = "/__anteroom/admin/api/rooms/{room}/events",
    operation_id = "listEvents",
    params(RoomPath),
    responses(
        (status = 200, description = "The room's events, in the order they open", body = EventList),
        InRoom,
    )
)]
pub(super) async fn events(
    app: &AdminContext<'_>,
    room: &str,
) -> Result<Response<Body>, AdminError> {
    let (_, events, now) = read(app, room).await?;
    Ok(ok(&list(&events, now)))
}

/// Schedule an event
#[utoipa::path(
    post,
    path = "/__anteroom/admin/api/rooms/{room}/events",
    operation_id = "createEvent",
    params(RoomPath),
    request_body = EventBody,
    responses(
        (status = 201, description = "Scheduled; the room runs on it when it is current",
            body = Event, headers(("Location" = String, description = "The event's path"))),
        (status = 400, description = "The body is not JSON", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A value the event cannot have, or it overlaps another (`field` names it: queue_opens_at, admits_at, closes_at, rate, title, …); nothing was changed",
            body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Other writes of the room's events kept coming first (another operator, another replica) while this one was checked again; nothing was changed",
            body = Problem, content_type = "application/problem+json"),
        InRoom,
        WithBody,
    )
)]
pub(super) async fn create(
    app: &AdminContext<'_>,
    req: Request<Incoming>,
    room: &str,
    who: &Caller,
) -> Result<Response<Body>, AdminError> {
    let body = body_json(req, app).await?;
    let event = checked(app, room, &new_id(), &body)?;
    let (events, now, ()) = commit(app, room, |events| {
        events.push(event.clone());
        Ok((event.key(), event.to_json(), ()))
    })
    .await?;
    let shown = view(&event, &events, now);
    let audit = audit(app, room, "event.create", Value::Null, event.to_json(), who).await;
    tracing::info!(room, caller = %who.ip, event = %event.id, written = audit.written, "admin: event created");
    let mut response = json_response(StatusCode::CREATED, &shown);
    let location = format!("/__anteroom/admin/api/rooms/{room}/events/{}", event.id);
    if let Ok(value) = location.parse() {
        response.headers_mut().insert(header::LOCATION, value);
    }
    Ok(response)
}

/// Replace an event whole
#[utoipa::path(
    put,
    path = "/__anteroom/admin/api/rooms/{room}/events/{id}",
    operation_id = "replaceEvent",
    params(EventPath),
    request_body = EventBody,
    responses(
        (status = 200, description = "Replaced; applied at once when it is the current event", body = Event),
        (status = 400, description = "The body is not JSON", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown room or event", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A value the event cannot have, or it overlaps another (`field` names it); nothing was changed",
            body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Other writes of the room's events kept coming first (another operator, another replica) while this one was checked again; nothing was changed",
            body = Problem, content_type = "application/problem+json"),
        (status = 503, response = StoreUnavailable),
        Guarded,
        WithBody,
    )
)]
pub(super) async fn replace(
    app: &AdminContext<'_>,
    req: Request<Incoming>,
    room: &str,
    id: &str,
    who: &Caller,
) -> Result<Response<Body>, AdminError> {
    let body = body_json(req, app).await?;
    let event = checked(app, room, id, &body)?;
    let (events, now, old) = commit(app, room, |events| {
        let at = events
            .iter()
            .position(|e| e.id == id)
            .ok_or_else(|| AdminError::UnknownEvent(id.to_owned()))?;
        let old = std::mem::replace(&mut events[at], event.clone());
        Ok((event.key(), event.to_json(), old))
    })
    .await?;
    let shown = view(&event, &events, now);
    let audit = audit(
        app,
        room,
        "event.update",
        old.to_json(),
        event.to_json(),
        who,
    )
    .await;
    tracing::info!(room, caller = %who.ip, event = %event.id, written = audit.written, "admin: event replaced");
    Ok(ok(&shown))
}

/// Delete an event
#[utoipa::path(
    delete,
    path = "/__anteroom/admin/api/rooms/{room}/events/{id}",
    operation_id = "deleteEvent",
    params(EventPath),
    responses(
        (status = 204, description = "Deleted; with no event left the room's schedule is the file's again"),
        (status = 404, description = "Unknown room or event", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Other writes of the room's events kept coming first (another operator, another replica) while this one was checked again; nothing was changed",
            body = Problem, content_type = "application/problem+json"),
        (status = 503, response = StoreUnavailable),
        Guarded,
    )
)]
pub(super) async fn delete(
    app: &AdminContext<'_>,
    room: &str,
    id: &str,
    who: &Caller,
) -> Result<Response<Body>, AdminError> {
    let (_, _, old) = commit(app, room, |events| {
        let at = events
            .iter()
            .position(|e| e.id == id)
            .ok_or_else(|| AdminError::UnknownEvent(id.to_owned()))?;
        let old = events.remove(at);
        Ok((old.key(), Value::Null, old))
    })
    .await?;
    let audit = audit(app, room, "event.delete", old.to_json(), Value::Null, who).await;
    tracing::info!(room, caller = %who.ip, event = %id, written = audit.written, "admin: event deleted");
    let mut response = Response::new(crate::http::body::empty());
    *response.status_mut() = StatusCode::NO_CONTENT;
    Ok(response)
}

/// The request's body as JSON, or 400.
async fn body_json(req: Request<Incoming>, app: &AdminContext<'_>) -> Result<Value, AdminError> {
    let body = read_body(req, app.admin.body_timeout).await?;
    serde_json::from_slice(&body).map_err(|e| {
        AdminError::BadRequest(FieldError::new("body", format!("is not valid JSON: {e}")))
    })
}

/// The body as the event `id`, checked against the room's file; 422 naming the field.
fn checked(
    app: &AdminContext<'_>,
    room: &str,
    id: &str,
    body: &Value,
) -> Result<StoredEvent, AdminError> {
    let file = app
        .file_of(room)
        .ok_or_else(|| AdminError::UnknownRoom(room.to_owned()))?;
    parse_body(id, body, file)
        .map_err(|e| AdminError::Unprocessable(FieldError::new(&e.field, e.reason)))
}

/// How often [`commit`] reads, checks and writes again when other writes of the room's
/// events keep coming first.
const COMMIT_ATTEMPTS: usize = 5;

/// One write of the room's events, made over the set as read just before and only if no
/// other write of them came between: the store compares the events' revision with the one
/// read, in the same atomic step as the write, which replaces it ([`over_revision`]).
/// `edit` changes the set as read and returns the change that makes it so (an event's key
/// and its JSON, or `null` to remove it) and what the caller keeps of it; the whole set is
/// then checked (no overlap, at most 100) unless the change is a removal. When another
/// write came first (another operator, another replica), the set is read and `edit` runs
/// again over it, so two overlapping events sent at the same instant never both land, and
/// no write is lost.
/// Returns the set as it stands after, the store's time at the read, and what `edit` kept;
/// the room's current event is applied at once.
async fn commit<T>(
    app: &AdminContext<'_>,
    room: &str,
    mut edit: impl FnMut(&mut Vec<StoredEvent>) -> Result<(String, Value, T), AdminError>,
) -> Result<(Vec<StoredEvent>, u64, T), AdminError> {
    for _ in 0..COMMIT_ATTEMPTS {
        let (changes, mut events, now) = read(app, room).await?;
        let (key, value, kept) = edit(&mut events)?;
        // A removal cannot make an overlap, nor a set too large.
        if !value.is_null() {
            check_set(&events)
                .map_err(|e| AdminError::Unprocessable(FieldError::new(&e.field, e.reason)))?;
        }
        let mut patch = SettingsPatch {
            changes: RoomChanges([(key, value)].into_iter().collect()),
            ..SettingsPatch::default()
        };
        over_revision(&mut patch, &changes);
        match app.admission.update_settings(room, &patch).await {
            Ok(new) => {
                apply_now(app, room, &new.changes).await;
                return Ok((events_of(&new.changes), now, kept));
            }
            Err(StoreError::Conflict(_)) => continue,
            Err(other) => return Err(other.into()),
        }
    }
    Err(AdminError::Conflict("events".to_owned()))
}

/// The room's current event applied at once through this replica; a failure is left to
/// the next second's refresh, which tries again.
async fn apply_now(app: &AdminContext<'_>, room: &str, changes: &RoomChanges) {
    if let Err(e) = app.admission.apply_events(room, changes).await {
        tracing::warn!(room, error = %e, "cannot apply the room's current event now; the next refresh will");
    }
}

/// The current event of a room's changes as its counters show it (the one applied last:
/// one value to read, no list to sort).
pub(super) fn now_of(changes: &RoomChanges) -> Option<super::event_api::EventNow> {
    changes.get(APPLIED_KEY)?;
    ev::applied_of(changes).map(|e| super::event_api::EventNow {
        id: e.id,
        name: e.name,
        state: "current",
    })
}
