//! The admin listener's one error type and its one rendering.
//!
//! Every refusal the admin API gives is an [`AdminError`]. Its `Display` is the problem's
//! `detail`; [`AdminError::into_response`] is the one place that decides each refusal's
//! status, title, `field` member and extra headers, and renders it as
//! `application/problem+json` (RFC 9457). The store's and the ban registry's errors
//! convert into it with `?`, so a handler returns `Result<Response<Body>, AdminError>` and
//! never picks a status itself. The successful answers' `application/json` helpers live
//! here too, so every admin response has the same headers.

use http::{HeaderValue, Response, StatusCode, header};
use serde::Serialize;

use crate::abuse::{AbuseError, BanError};
use crate::http::body::{Body, full};
use crate::http::pages::STATUS_HEADER;
use crate::queue::{StoreError, VisitorRef};

use super::MAX_BODY_BYTES;
use super::api::Problem;
use super::openapi::PROBLEM_JSON;

/// An input at fault: the field (or query parameter) it names, and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct FieldError {
    /// The field or parameter, as the API spells it.
    pub field: String,
    /// What is wrong with it, phrased to follow the field's name.
    pub reason: String,
}

impl FieldError {
    /// `field` is wrong because `reason`.
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> FieldError {
        FieldError {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// A refusal of the admin API. The `Display` text is the problem's `detail`.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// 400: the input does not parse or names no valid value; `field` names it.
    #[error("{0}; nothing was changed")]
    BadRequest(FieldError),
    /// 401: no `Authorization: Bearer` token.
    #[error("Send Authorization: Bearer <admin_token>.")]
    MissingToken,
    /// 401: a token that is neither the admin token nor the metrics token.
    #[error("The bearer token is not this anteroom's admin_token.")]
    WrongToken,
    /// 403: a caller outside `admin_allow`, or the metrics token used for anything but
    /// the metrics.
    #[error("{0}")]
    Forbidden(String),
    /// 403: a valid admin token whose role does not allow this route.
    #[error("The token {token:?} has the role {role}, which does not allow this request.")]
    RoleForbids {
        /// The token's name.
        token: String,
        /// Its role.
        role: &'static str,
    },
    /// 404: no route has this path.
    #[error("No admin API route has this path; see /__anteroom/admin/api/openapi.json.")]
    NoRoute,
    /// 404: the path names a room that is not configured.
    #[error("There is no room named {0:?}.")]
    UnknownRoom(String),
    /// 404: the queue store does not know the room.
    #[error("The queue store does not know the room {0:?}.")]
    RoomNotInStore(String),
    /// 404: nobody waiting in the room has this reference.
    #[error("Nobody waiting in this room has the reference {0}.")]
    UnknownVisitor(VisitorRef),
    /// 404: the room has no scheduled event with this id.
    #[error("This room has no event {0:?}.")]
    UnknownEvent(String),
    /// 404: no active ban on the target ([`BanError::NotFound`]).
    #[error("{0}")]
    NoSuchBan(BanError),
    /// 405: the path exists but not with this method; `allow` lists the methods it has.
    #[error("This path answers {allow}.")]
    MethodNotAllowed {
        /// The methods the path answers, comma-separated (the `Allow` header).
        allow: String,
    },
    /// 408: the request body did not arrive within `server.body_timeout`.
    #[error("The request body did not arrive in full within {secs} s (server.body_timeout).")]
    BodyTooSlow {
        /// `server.body_timeout`, in whole seconds.
        secs: u64,
    },
    /// 409: every active ban is an operator ban and the list is full ([`BanError::Full`]).
    #[error("Nothing was changed: {0}")]
    BanListFull(BanError),
    /// 409: other writes of the same settings kept coming first (another operator, another
    /// replica), each read again and checked again, until this one gave up; `{0}` names
    /// what changed.
    #[error(
        "The room's {0} kept changing while this was written; nothing was changed. Read them again and retry."
    )]
    Conflict(String),
    /// 413: the request body is larger than [`MAX_BODY_BYTES`].
    #[error("The request body may be at most {MAX_BODY_BYTES} bytes.")]
    BodyTooLarge,
    /// 422: the input parsed but cannot be served (a query parameter out of range, a
    /// malformed visitor reference); `field` names it.
    #[error("{0}")]
    Unprocessable(FieldError),
    /// 422: a ban the registry refuses (a bad target, one too broad or immune, a bad
    /// duration, a reason too long).
    #[error("{field}: {error}; nothing was changed")]
    InvalidBan {
        /// The request field at fault.
        field: &'static str,
        /// Why the registry refused it.
        error: BanError,
    },
    /// 429: this address sent too many wrong tokens; none is compared for now.
    #[error("This address sent too many wrong admin tokens; no more are checked for now.")]
    TooManyWrongTokens {
        /// The `Retry-After` header, in seconds.
        retry_after_secs: u64,
    },
    /// 500: the control room's page failed to render.
    #[error("The page failed to render; the API at /__anteroom/admin/api/ still answers.")]
    PageUnavailable,
    /// 503: the statistics cache has never been filled on this replica.
    #[error("The queue store has not answered since this replica started.")]
    NoStatsYet,
    /// 503: the queue store did not answer; nothing was changed.
    #[error("Nothing was changed: {0}")]
    StoreUnavailable(String),
    /// 503: the ban store did not answer ([`BanError::Store`]); nothing was changed.
    #[error("Nothing was changed: {0}")]
    BanStoreUnavailable(BanError),
}

/// The headers a refusal adds to the problem's own.
enum Extra {
    None,
    /// `WWW-Authenticate: Bearer …`.
    Challenge,
    /// `Allow: <methods>`.
    Allow(HeaderValue),
    /// `Retry-After: <seconds>`.
    RetryAfter(u64),
    /// `Connection: close`: the body was left unread, so the connection cannot be reused
    /// (said up front, a client does not reuse it for its next request and fail on the
    /// close).
    Close,
    /// The status header saying the store is stalled.
    Stalled,
}

impl AdminError {
    /// The refusal's status code.
    pub fn status(&self) -> StatusCode {
        self.parts().0
    }

    /// The one mapping: each refusal's status, title, `field` member and extra headers.
    fn parts(&self) -> (StatusCode, &'static str, Option<&str>, Extra) {
        use AdminError as E;
        match self {
            E::BadRequest(e) => (
                StatusCode::BAD_REQUEST,
                "Invalid input",
                Some(&e.field),
                Extra::None,
            ),
            E::MissingToken => (
                StatusCode::UNAUTHORIZED,
                "Missing admin token",
                None,
                Extra::Challenge,
            ),
            E::WrongToken => (
                StatusCode::UNAUTHORIZED,
                "Wrong admin token",
                None,
                Extra::Challenge,
            ),
            E::Forbidden(_) => (StatusCode::FORBIDDEN, "Forbidden", None, Extra::None),
            E::RoleForbids { .. } => (
                StatusCode::FORBIDDEN,
                "Not allowed for this token's role",
                None,
                Extra::None,
            ),
            E::NoRoute => (StatusCode::NOT_FOUND, "Not found", None, Extra::None),
            E::UnknownRoom(_) | E::RoomNotInStore(_) => (
                StatusCode::NOT_FOUND,
                "Unknown room",
                Some("room"),
                Extra::None,
            ),
            E::UnknownVisitor(_) => (
                StatusCode::NOT_FOUND,
                "Unknown visitor",
                Some("ref"),
                Extra::None,
            ),
            E::UnknownEvent(_) => (
                StatusCode::NOT_FOUND,
                "Unknown event",
                Some("id"),
                Extra::None,
            ),
            E::NoSuchBan(_) => (
                StatusCode::NOT_FOUND,
                "No such ban",
                Some("target"),
                Extra::None,
            ),
            E::MethodNotAllowed { allow } => (
                StatusCode::METHOD_NOT_ALLOWED,
                "Method not allowed",
                None,
                Extra::Allow(HeaderValue::from_str(allow).expect("route methods are header-safe")),
            ),
            E::BodyTooSlow { .. } => (
                StatusCode::REQUEST_TIMEOUT,
                "Body too slow",
                Some("body"),
                Extra::Close,
            ),
            E::BanListFull(_) => (StatusCode::CONFLICT, "Ban list full", None, Extra::None),
            E::Conflict(_) => (StatusCode::CONFLICT, "Changed meanwhile", None, Extra::None),
            E::BodyTooLarge => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "Body too large",
                Some("body"),
                Extra::Close,
            ),
            E::Unprocessable(e) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid input",
                Some(&e.field),
                Extra::None,
            ),
            E::InvalidBan { field, .. } => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid ban",
                Some(*field),
                Extra::None,
            ),
            E::TooManyWrongTokens { retry_after_secs } => (
                StatusCode::TOO_MANY_REQUESTS,
                "Too many wrong tokens",
                None,
                Extra::RetryAfter(*retry_after_secs),
            ),
            E::PageUnavailable => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "Control room unavailable",
                None,
                Extra::None,
            ),
            E::NoStatsYet => (
                StatusCode::SERVICE_UNAVAILABLE,
                "No statistics yet",
                None,
                Extra::None,
            ),
            E::StoreUnavailable(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "Queue store unavailable",
                None,
                Extra::Stalled,
            ),
            E::BanStoreUnavailable(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "Ban store unavailable",
                None,
                Extra::None,
            ),
        }
    }

    /// The refusal as an `application/problem+json` response: `type`, `title`, `status`,
    /// `detail`, and `field` when an input is at fault.
    pub fn into_response(self) -> Response<Body> {
        let (status, title, field, extra) = self.parts();
        let body = Problem {
            kind: "about:blank",
            title,
            status: status.as_u16(),
            detail: self.to_string(),
            field: field.map(str::to_owned),
        };
        let body = serde_json::to_string(&body).expect("a problem serializes");
        let mut response = respond(status, PROBLEM_JSON, body);
        let headers = response.headers_mut();
        match extra {
            Extra::None => {}
            Extra::Challenge => {
                headers.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"anteroom admin\""),
                );
            }
            Extra::Allow(allow) => {
                headers.insert(header::ALLOW, allow);
            }
            Extra::RetryAfter(secs) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
            }
            Extra::Close => {
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            Extra::Stalled => {
                headers.insert(STATUS_HEADER, HeaderValue::from_static("stalled"));
            }
        }
        response
    }
}

/// The store's name for a setting, as the API spells it.
fn api_field(store_field: &str) -> &str {
    match store_field {
        "session_ttl" => "session_ttl_secs",
        "abandon_after" => "abandon_after_secs",
        other => other,
    }
}

impl From<StoreError> for AdminError {
    fn from(e: StoreError) -> AdminError {
        match e {
            StoreError::Invalid { field, reason } => {
                AdminError::BadRequest(FieldError::new(api_field(field), reason))
            }
            StoreError::NotWaiting(reference) => AdminError::UnknownVisitor(reference),
            StoreError::UnknownRoom(room) => AdminError::RoomNotInStore(room),
            StoreError::Unavailable(reason) => AdminError::StoreUnavailable(reason),
            StoreError::Conflict(what) => AdminError::Conflict(what),
        }
    }
}

impl From<BanError> for AdminError {
    fn from(e: BanError) -> AdminError {
        let field = match &e {
            BanError::NotFound(_) => return AdminError::NoSuchBan(e),
            BanError::Full(_) => return AdminError::BanListFull(e),
            BanError::Store(_) => return AdminError::BanStoreUnavailable(e),
            BanError::InvalidTarget(_) | BanError::TooBroad { .. } | BanError::Immune(_) => {
                "target"
            }
            BanError::InvalidDuration => "duration_secs",
            BanError::ReasonTooLong => "reason",
        };
        AdminError::InvalidBan { field, error: e }
    }
}

impl From<AbuseError> for AdminError {
    /// The ban store underneath failed: the ban store is unavailable.
    fn from(e: AbuseError) -> AdminError {
        AdminError::BanStoreUnavailable(BanError::Store(e.to_string()))
    }
}

/// A `200 OK` with `body` as JSON.
pub(super) fn ok<T: Serialize>(body: &T) -> Response<Body> {
    json(StatusCode::OK, body)
}

/// A response of `status` with `body` as JSON.
pub(super) fn json<T: Serialize>(status: StatusCode, body: &T) -> Response<Body> {
    let body = serde_json::to_string(body).expect("an admin API body serializes");
    respond(status, "application/json", body)
}

/// A response of `status` with `body` as `content_type`, never cached.
pub(super) fn respond(
    status: StatusCode,
    content_type: &'static str,
    body: String,
) -> Response<Body> {
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The 403 for a caller outside `admin_allow` (or a metrics token used for anything else).
pub fn forbidden(detail: &str) -> Response<Body> {
    AdminError::Forbidden(detail.to_owned()).into_response()
}
