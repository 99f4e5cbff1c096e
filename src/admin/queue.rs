//! The line of one room as the control room's Queue view sees it: the head of the line or
//! one visitor by reference (`GET …/queue`), and moving a waiting visitor to the front
//! (`POST …/visitors/{ref}/front`), audited and published as a `visitor_prioritized` event.

use http::{Request, Response};
use hyper::body::Incoming;
use serde_json::json;

use crate::audit::AuditEntry;
use crate::http::body::Body;
use crate::queue::{QueueQuery, StoreError, VisitorRef};

use super::api::{FrontResult, Problem, QueueParams, QueueResult, VisitorPath};
use super::openapi::{Guarded, InRoom, StoreUnavailable};
use super::problem::ok;
use super::record::write_audit;
use super::{AdminContext, AdminError, Caller, FieldError};

/// The default number of the Queue view's entries.
pub const QUEUE_DEFAULT_LIMIT: usize = 50;

/// The head of the line (ref, position, joined, last seen), or one waiting visitor by ref
///
/// `?limit=N&ref=R`: the head of the line, in order, or the one waiting visitor with
/// reference `ref` (an empty list when nobody waiting has it).
#[utoipa::path(
    get,
    path = "/__anteroom/admin/api/rooms/{room}/queue",
    operation_id = "roomQueue",
    params(super::api::RoomPath, QueueParams),
    responses(
        (status = 200, description = "The head of the line, in order", body = QueueResult),
        (status = 422, description = "A bad parameter; `field` names it (limit out of 1..1000, a malformed ref, an unknown parameter)",
            body = Problem, content_type = "application/problem+json"),
        InRoom,
    )
)]
pub(super) async fn queue(
    app: &AdminContext<'_>,
    req: &Request<Incoming>,
    room: &str,
) -> Result<Response<Body>, AdminError> {
    let query =
        parse_queue_query(req.uri().query().unwrap_or("")).map_err(AdminError::Unprocessable)?;
    let limit = match query {
        QueueQuery::Head { limit } => Some(limit),
        QueueQuery::Ref(_) => None,
    };
    let entries = match app.admission.queue(room, query).await {
        Ok(entries) => entries,
        Err(StoreError::NotWaiting(_)) => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    Ok(ok(&QueueResult {
        room: room.to_owned(),
        limit: limit.map(|n| n as u64),
        waiting: app.admission.cached_stats(room).map(|c| c.stats.waiting),
        entries: entries.into_iter().map(Into::into).collect(),
    }))
}

/// The query of `GET …/queue`, or the parameter at fault and why.
pub fn parse_queue_query(query: &str) -> Result<QueueQuery, FieldError> {
    let fail = |field: &str, detail: String| Err(FieldError::new(field, detail));
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
            "ref" => match VisitorRef::parse(value) {
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

/// Move a waiting visitor to position 1, ahead of everyone; nobody else's order changes
///
/// Audited, and a `visitor_prioritized` event.
#[utoipa::path(
    post,
    path = "/__anteroom/admin/api/rooms/{room}/visitors/{ref}/front",
    operation_id = "moveToFront",
    params(VisitorPath),
    responses(
        (status = 200, description = "Moved; admitted by the next pass the limits allow", body = FrontResult),
        (status = 404, description = "No such room (`field`: room), or nobody waiting has this reference (`field`: ref)",
            body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Not a visitor reference (`field`: ref)",
            body = Problem, content_type = "application/problem+json"),
        (status = 503, response = StoreUnavailable),
        Guarded,
    )
)]
pub(super) async fn front(
    app: &AdminContext<'_>,
    room: &str,
    reference: Option<&str>,
    who: &Caller,
) -> Result<Response<Body>, AdminError> {
    let reference = reference.and_then(VisitorRef::parse).ok_or_else(|| {
        AdminError::Unprocessable(FieldError::new(
            "ref",
            "must be a visitor reference of 8 characters, as the waiting page shows it",
        ))
    })?;
    let (_, place) = app.admission.move_to_front(room, reference).await?;
    tracing::info!(room, caller = %who.ip, %reference, "admin: visitor moved to the front");
    let entry = AuditEntry::now(
        room,
        "front",
        json!({ "ref": reference }),
        json!({ "ref": reference, "position": place.position }),
        who.ip,
        who.peer,
    )
    .by_token(&who.token);
    let audit = write_audit(app, entry).await;
    Ok(ok(&FrontResult {
        room: room.to_owned(),
        reference,
        position: place.position,
        waiting: place.waiting,
        audit,
    }))
}
