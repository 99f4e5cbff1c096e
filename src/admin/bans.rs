//! The ban list through the admin API: the active bans and the ban log, newest first and
//! paged (`limit`, `cursor`), banning an address or range and lifting a ban. The rules of
//! what may be banned are the abuse registry's ([`crate::abuse`]); its refusals become
//! [`AdminError`]s.

use std::time::Duration;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::Value;

use crate::abuse::{self, LogEntry, MAX_PAGE};
use crate::http::body::Body;

use super::api::{
    Ban, BanCreated, BanList, BanLog, BanLogEntry, BanRequest, PageQuery, Problem, TargetPath,
    Unbanned,
};
use super::body::{read_body, whole_number};
use super::openapi::{BadQuery, Guarded, WithBody};
use super::problem::{json, ok};
use super::record::audit;
use super::{AdminContext, AdminError, Caller, FieldError};

/// `limit` and `cursor` from the query string.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Paging {
    limit: Option<usize>,
    cursor: Option<u64>,
}

/// `limit` (1 to [`MAX_PAGE`]) and `cursor` (a `next_cursor`: a whole number), or the
/// parameter at fault and why (a 422). Other parameters are ignored.
fn paging(req: &Request<Incoming>) -> Result<Paging, FieldError> {
    let mut paging = Paging::default();
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
                Ok(n) if (1..=MAX_PAGE).contains(&n) => paging.limit = Some(n),
                _ => {
                    return Err(FieldError::new(
                        "limit",
                        format!("must be a whole number from 1 to {MAX_PAGE} (got {v:?})"),
                    ));
                }
            },
            "cursor" => match v.parse::<u64>() {
                Ok(n) => paging.cursor = Some(n),
                _ => {
                    return Err(FieldError::new(
                        "cursor",
                        format!(
                            "must be a next_cursor of an earlier page, a whole number of at least 0 (got {v:?})"
                        ),
                    ));
                }
            },
            _ => {}
        }
    }
    Ok(paging)
}

fn ms_rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

fn now_ms() -> u64 {
    crate::queue::unix_ms(std::time::SystemTime::now())
}

/// One ban as the API shows it (`remaining_secs` null when permanent).
fn ban_view(b: &abuse::Ban) -> Ban {
    Ban {
        target: b.target.to_string(),
        source: b.source.into(),
        reason: b.reason.clone(),
        since: ms_rfc3339(b.since_ms),
        until: b.until_ms.map(ms_rfc3339),
        remaining_secs: b
            .until_ms
            .map(|u| u.saturating_sub(now_ms()).div_ceil(1000)),
        permanent: b.until_ms.is_none(),
        cursor: b.seq,
    }
}

/// One line of the ban log as the API shows it.
fn log_view(e: &LogEntry) -> BanLogEntry {
    BanLogEntry {
        at: ms_rfc3339(e.at_ms),
        action: e.action.into(),
        target: e.target.to_string(),
        source: e.source.into(),
        reason: e.reason.clone(),
        until: e.until_ms.map(ms_rfc3339),
        cursor: e.seq,
    }
}

/// Active bans, newest first
#[utoipa::path(
    get,
    path = "/__anteroom/admin/api/bans",
    operation_id = "listBans",
    params(PageQuery),
    responses(
        (status = 200, description = "Active bans", body = BanList),
        (status = 422, response = BadQuery),
        Guarded,
    )
)]
pub(super) fn bans(
    app: &AdminContext<'_>,
    req: &Request<Incoming>,
) -> Result<Response<Body>, AdminError> {
    let Paging { limit, cursor } = paging(req).map_err(AdminError::Unprocessable)?;
    let page = app.admin.abuse.list(limit, cursor);
    Ok(ok(&BanList {
        bans: page.items.iter().map(|b| ban_view(b)).collect(),
        next_cursor: page.next_cursor,
    }))
}

/// The ban log, newest first
#[utoipa::path(
    get,
    path = "/__anteroom/admin/api/bans/log",
    operation_id = "banLog",
    params(PageQuery),
    responses(
        (status = 200, description = "Log", body = BanLog),
        (status = 422, response = BadQuery),
        (status = 503, description = "The ban store did not answer",
            body = Problem, content_type = "application/problem+json"),
        Guarded,
    )
)]
pub(super) async fn ban_log(
    app: &AdminContext<'_>,
    req: &Request<Incoming>,
) -> Result<Response<Body>, AdminError> {
    let Paging { limit, cursor } = paging(req).map_err(AdminError::Unprocessable)?;
    let page = app.admin.abuse.log(limit, cursor).await?;
    Ok(ok(&BanLog {
        log: page.items.iter().map(log_view).collect(),
        next_cursor: page.next_cursor,
    }))
}

/// Ban an address or range (IPv4 no broader than /8, IPv6 /16); duration_secs null is permanent
///
/// `target`, `duration_secs` (null or absent: permanent) and `reason`; 201 with the ban.
#[utoipa::path(
    post,
    path = "/__anteroom/admin/api/bans",
    operation_id = "ban",
    request_body = BanRequest,
    responses(
        (status = 201, description = "Banned", body = BanCreated),
        (status = 400, description = "Not a JSON object, an unknown field, or a field of the wrong type; `field` names it",
            body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Every active ban is an operator ban and abuse.max_bans are active; nothing was changed",
            body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A target that cannot be banned (does not parse, too broad, in abuse.allow or trusted_proxies), a duration out of 1..315360000, a reason too long; `field` names it",
            body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The ban store did not answer; nothing was changed",
            body = Problem, content_type = "application/problem+json"),
        Guarded,
        WithBody,
    )
)]
pub(super) async fn ban(
    app: &AdminContext<'_>,
    req: Request<Incoming>,
    who: &Caller,
) -> Result<Response<Body>, AdminError> {
    let bad = |field: &str, reason: String| AdminError::BadRequest(FieldError::new(field, reason));
    let body = read_body(req, app.admin.body_timeout).await?;
    let value: Value = serde_json::from_slice(&body)
        .map_err(|e| bad("body", format!("is not valid JSON: {e}")))?;
    let Some(object) = value.as_object() else {
        return Err(bad(
            "body",
            "must be a JSON object with target, duration_secs, reason".to_owned(),
        ));
    };
    if let Some(other) = object
        .keys()
        .find(|k| !["target", "duration_secs", "reason"].contains(&k.as_str()))
    {
        return Err(bad(
            other,
            "is not a field; expected target, duration_secs, reason".to_owned(),
        ));
    }
    let Some(target) = object.get("target").and_then(Value::as_str) else {
        return Err(bad(
            "target",
            "is required: an IP address or a CIDR range".to_owned(),
        ));
    };
    let duration = match object.get("duration_secs") {
        None | Some(Value::Null) => None,
        Some(v) => match whole_number(v) {
            Some(secs) => Some(Duration::from_secs(secs)),
            None => return Err(abuse::BanError::InvalidDuration.into()),
        },
    };
    let reason = match object.get("reason") {
        None | Some(Value::Null) => "banned by an operator",
        Some(Value::String(s)) => s.as_str(),
        Some(_) => return Err(bad("reason", "must be a string".to_owned())),
    };
    let ban = app.admin.abuse.ban(target, duration, reason).await?;
    let view = ban_view(&ban);
    let audit = audit(app, "", "ban", Value::Null, audited(&view), who).await;
    Ok(json(StatusCode::CREATED, &BanCreated { ban: view, audit }))
}

/// Lift a ban
///
/// Lifts the ban on the (URL-encoded) target.
#[utoipa::path(
    delete,
    path = "/__anteroom/admin/api/bans/{target}",
    operation_id = "unban",
    params(TargetPath),
    responses(
        (status = 200, description = "Lifted", body = Unbanned),
        (status = 404, description = "No active ban on exactly this target (`field`: target)",
            body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Not an address or CIDR range (`field`: target)",
            body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The ban store did not answer; nothing was changed",
            body = Problem, content_type = "application/problem+json"),
        Guarded,
    )
)]
pub(super) async fn unban(
    app: &AdminContext<'_>,
    target: &str,
    who: &Caller,
) -> Result<Response<Body>, AdminError> {
    let target = percent_decode(target);
    let ban = app.admin.abuse.unban(&target).await?;
    let view = ban_view(&ban);
    let audit = audit(app, "", "unban", audited(&view), Value::Null, who).await;
    Ok(ok(&Unbanned {
        unbanned: view,
        audit,
    }))
}

/// A ban as its audit line records it: as the API shows it.
fn audited(ban: &Ban) -> Value {
    serde_json::to_value(ban).expect("a ban serializes")
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
