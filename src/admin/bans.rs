//! The ban list through the admin API: the active bans and the ban log, newest first and
//! paged (`limit`, `cursor`), banning an address or range and lifting a ban. The rules of
//! what may be banned are the abuse registry's ([`crate::abuse`]); its refusals become
//! [`AdminError`]s.

use std::time::Duration;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::{Value, json};

use crate::abuse::{Ban, LogEntry, MAX_PAGE};
use crate::http::body::Body;

use super::body::read_body;
use super::problem::ok;
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

/// One line of the ban log as the API shows it.
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

/// `GET …/bans`: the active bans, newest first.
pub(super) fn bans(
    app: &AdminContext<'_>,
    req: &Request<Incoming>,
) -> Result<Response<Body>, AdminError> {
    let Paging { limit, cursor } = paging(req).map_err(AdminError::Unprocessable)?;
    let page = app.admin.abuse.list(limit, cursor);
    let items: Vec<Value> = page.items.iter().map(|b| ban_view(b)).collect();
    Ok(ok(
        json!({ "bans": items, "next_cursor": page.next_cursor }),
    ))
}

/// `GET …/bans/log`: the ban log, newest first.
pub(super) async fn ban_log(
    app: &AdminContext<'_>,
    req: &Request<Incoming>,
) -> Result<Response<Body>, AdminError> {
    let Paging { limit, cursor } = paging(req).map_err(AdminError::Unprocessable)?;
    let page = app.admin.abuse.log(limit, cursor).await?;
    let items: Vec<Value> = page.items.iter().map(log_view).collect();
    Ok(ok(json!({ "log": items, "next_cursor": page.next_cursor })))
}

/// `POST …/bans`: `target`, `duration_secs` (null or absent: permanent) and `reason`; 201
/// with the ban.
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
        Some(v) => match v.as_u64() {
            Some(secs) => Some(Duration::from_secs(secs)),
            None => return Err(crate::abuse::BanError::InvalidDuration.into()),
        },
    };
    let reason = match object.get("reason") {
        None | Some(Value::Null) => "banned by an operator",
        Some(Value::String(s)) => s.as_str(),
        Some(_) => return Err(bad("reason", "must be a string".to_owned())),
    };
    let ban = app.admin.abuse.ban(target, duration, reason).await?;
    let view = ban_view(&ban);
    let audit = audit(app, "", "ban", Value::Null, view.clone(), who).await;
    let mut response = ok(json!({ "ban": view, "audit": audit }));
    *response.status_mut() = StatusCode::CREATED;
    Ok(response)
}

/// `DELETE …/bans/{target}`: lifts the ban on the (URL-encoded) target.
pub(super) async fn unban(
    app: &AdminContext<'_>,
    target: &str,
    who: &Caller,
) -> Result<Response<Body>, AdminError> {
    let target = percent_decode(target);
    let ban = app.admin.abuse.unban(&target).await?;
    let view = ban_view(&ban);
    let audit = audit(app, "", "unban", view.clone(), Value::Null, who).await;
    Ok(ok(json!({ "unbanned": view, "audit": audit })))
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
