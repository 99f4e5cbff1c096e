//! The request path's one error type: a [`Kind`], an optional source and an optional retry
//! hint, mapped to status, page title, detail and `Retry-After` in exactly one place
//! ([`GateError::respond`]). Modelled on pingora's `Error`.
//!
//! Every status the public listener refuses with is decided here, in [`Kind::status`]:
//! the errors rendered as the generic error page, and the room's own refusals (over the
//! join limit, the line full, the room closed or stalled, the door busy, a priority link
//! not valid, the draw unreadable), which have pages of their own (`gate/respond.rs`,
//! `gate/classes.rs`, `gate/draw.rs`) but take their status from their [`Kind`].
//!
//! A new refusal on the request path (a ban, a bad preflight, …) is a new [`Kind`], one
//! line in each of [`Kind::status`] and [`Kind::text`], and its strings in every language
//! of the error catalogue ([`crate::http::i18n::Errors`]). Every page is in the visitor's
//! language.

use http::{Response, StatusCode};

use crate::http::body::{Body, BoxError};
use crate::http::i18n::{ErrorText, Lang};
use crate::http::pages::Pages;
use crate::proxy::ProxyError;

/// What went wrong, as the visitor is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An HTTP/1 absolute-form target (`GET http://elsewhere/`): never routed on.
    AbsoluteForm,
    /// `CONNECT`: a reverse proxy has nothing to tunnel.
    Connect,
    /// A host that is not one DNS name or IP literal with an optional port, or an HTTP/2
    /// `Host` that disagrees with `:authority`.
    BadHost,
    /// A path whose dot segments cannot be resolved safely under the origin's prefix.
    BadPath,
    /// A trusted proxy's `X-Forwarded-For` that cannot be read (non-ASCII bytes, an entry
    /// that is not an address): the client is unknown, and the request is never taken for
    /// the proxy's own.
    BadForwardedFor,
    /// A CORS preflight that carries a body: a preflight never has one, so it is refused
    /// before it can reach the origin past the queue.
    PreflightBody,
    /// A reserved path (or built-in file) we do not serve.
    NotFound,
    /// No room serves the request's host.
    UnknownSite,
    /// `/__anteroom/events` from a browser with no place in line.
    NotInLine,
    /// The origin did not connect, answer or keep sending in time.
    OriginTimeout,
    /// The origin could not be reached or broke the exchange.
    OriginFailed,
    /// The visitor's request cannot be forwarded as it is.
    Unforwardable,
    /// `server.max_streams` waiting-page streams are open: the page refreshes instead.
    StreamsFull,
    /// The client holds `server.max_streams_per_client` streams and tunnels already.
    TooManyStreams,
    /// The request body did not arrive within `server.body_timeout`.
    BodyTimeout,
    /// The client is banned by the abuse registry: 429 with the time left as
    /// `Retry-After`, 403 when the ban is permanent.
    Banned {
        /// The ban never ends (403 rather than 429).
        permanent: bool,
    },
    /// Our own configuration is unusable (e.g. an origin the proxy cannot address).
    Internal,
    /// A newcomer over the room's join limit or per-client shares: told when to try again.
    OverJoinLimit,
    /// The queue breaker (`max_waiting`): the line is full, this newcomer was not added.
    LineFull,
    /// After the room's `closes_at`: nobody else gets in.
    Closed,
    /// The room's sold-out mode: newcomers and the line get the sold-out page, with the
    /// room's `queue_status_code` (200 by default), as the waiting page.
    SoldOut {
        /// The room's `queue_status_code`.
        queue_status_code: u16,
    },
    /// The store did not answer and the room does not fail open: the visitor is held.
    Stalled,
    /// A full `max_inflight` door or stream cap: try again shortly.
    Busy,
    /// An asset or stream from a client not admitted to the site: never the whole page.
    NotAdmitted,
    /// The lottery draw cannot be read from the store.
    DrawUnavailable,
    /// A priority link that is forged, expired, spent or for another room.
    BadGrant,
    /// A newcomer asked for the proof of work before joining: the challenge page, with
    /// the room's `queue_status_code`, as the waiting page.
    Challenge {
        /// The room's `queue_status_code`.
        queue_status_code: u16,
    },
    /// A challenge answer refused: expired, spent, another client's or room's, forged,
    /// short of the work (403), or not a challenge answer at all (400).
    ChallengeRefused {
        /// Not an answer at all (a malformed challenge, body or solution): 400.
        malformed: bool,
    },
    /// A challenge answer posted from another site's page (`Sec-Fetch-Site` or `Origin`).
    CrossSite,
}

impl Kind {
    /// The HTTP status this kind of error is answered with.
    pub fn status(self) -> StatusCode {
        match self {
            Kind::AbsoluteForm
            | Kind::BadHost
            | Kind::BadPath
            | Kind::BadForwardedFor
            | Kind::PreflightBody
            | Kind::Unforwardable => StatusCode::BAD_REQUEST,
            Kind::Connect => StatusCode::METHOD_NOT_ALLOWED,
            Kind::NotFound | Kind::UnknownSite | Kind::NotInLine => StatusCode::NOT_FOUND,
            Kind::OriginTimeout => StatusCode::GATEWAY_TIMEOUT,
            Kind::OriginFailed => StatusCode::BAD_GATEWAY,
            Kind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Kind::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            Kind::StreamsFull
            | Kind::LineFull
            | Kind::Closed
            | Kind::Stalled
            | Kind::Busy
            | Kind::NotAdmitted
            | Kind::DrawUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            Kind::OverJoinLimit => StatusCode::TOO_MANY_REQUESTS,
            Kind::BadGrant | Kind::CrossSite => StatusCode::FORBIDDEN,
            Kind::ChallengeRefused { malformed: true } => StatusCode::BAD_REQUEST,
            Kind::ChallengeRefused { malformed: false } => StatusCode::FORBIDDEN,
            Kind::SoldOut { queue_status_code } | Kind::Challenge { queue_status_code } => {
                StatusCode::from_u16(queue_status_code).unwrap_or(StatusCode::OK)
            }
            Kind::TooManyStreams => StatusCode::TOO_MANY_REQUESTS,
            Kind::Banned { permanent: true } => StatusCode::FORBIDDEN,
            Kind::Banned { permanent: false } => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    /// The page's title and detail, in `lang` (the catalog's, [`crate::http::i18n`]).
    pub fn text(self, lang: Lang) -> (&'static str, &'static str) {
        let t = lang.catalog();
        let e = lang.errors();
        let pair = |x: &'static ErrorText| (x.title, x.detail);
        match self {
            Kind::AbsoluteForm => pair(&e.absolute_form),
            Kind::Connect => pair(&e.connect),
            Kind::BadHost => pair(&e.bad_host),
            Kind::BadPath => pair(&e.bad_path),
            Kind::BadForwardedFor => pair(&e.bad_forwarded_for),
            Kind::PreflightBody => pair(&e.preflight_body),
            Kind::NotFound => pair(&e.not_found),
            Kind::UnknownSite => pair(&e.unknown_site),
            Kind::NotInLine => pair(&e.not_in_line),
            Kind::OriginTimeout => pair(&e.origin_timeout),
            Kind::OriginFailed => pair(&e.origin_failed),
            Kind::Unforwardable => pair(&e.unforwardable),
            Kind::StreamsFull => pair(&e.streams_full),
            Kind::TooManyStreams => pair(&e.too_many_streams),
            Kind::BodyTimeout => pair(&e.body_timeout),
            Kind::Internal => pair(&e.internal),
            Kind::Banned { .. } => (t.banned_title, t.banned_detail),
            Kind::OverJoinLimit => (t.refused_title, t.refused_detail),
            Kind::LineFull => (t.full_title, t.full_detail),
            Kind::Closed => (t.closed_title, t.closed_detail),
            Kind::SoldOut { .. } => (t.sold_out_title, t.sold_out_detail),
            Kind::Stalled => (e.stalled_title, t.stalled_detail),
            Kind::Busy => pair(&e.busy),
            Kind::NotAdmitted => pair(&e.not_admitted),
            Kind::DrawUnavailable => pair(&e.draw_unavailable),
            Kind::BadGrant => pair(&e.bad_grant),
            Kind::Challenge { .. } => (lang.challenge().title, lang.challenge().detail),
            Kind::ChallengeRefused { .. } => (
                lang.challenge().refused_title,
                lang.challenge().refused_detail,
            ),
            Kind::CrossSite => (
                lang.challenge().cross_site_title,
                lang.challenge().cross_site_detail,
            ),
        }
    }
}

/// Why the request path answered with an error instead of the site or the line.
#[derive(Debug, thiserror::Error)]
#[error("{kind:?}")]
pub struct GateError {
    /// What went wrong; decides the status and the page.
    pub kind: Kind,
    /// The underlying error, for the log.
    #[source]
    pub source: Option<BoxError>,
    /// Seconds after which trying again makes sense (`Retry-After`).
    pub retry_after: Option<u64>,
}

impl GateError {
    /// An error of `kind` with no source and no `Retry-After`.
    pub fn new(kind: Kind) -> GateError {
        GateError {
            kind,
            source: None,
            retry_after: None,
        }
    }

    /// A banned client.
    pub fn banned(verdict: &crate::abuse::BanVerdict) -> GateError {
        GateError {
            kind: Kind::Banned {
                permanent: verdict.is_permanent(),
            },
            source: None,
            retry_after: verdict.retry_after_secs(),
        }
    }

    /// The one mapping from an error to what the visitor gets.
    pub fn respond(&self, pages: &Pages, json: bool, lang: Lang) -> Response<Body> {
        if let Kind::Banned { .. } = self.kind {
            return pages.banned(lang, self.kind.status(), self.retry_after, json);
        }
        let (title, detail) = self.kind.text(lang);
        pages.message_in(
            lang,
            self.kind.status(),
            None,
            title,
            detail,
            self.retry_after,
            json,
        )
    }
}

impl From<Kind> for GateError {
    fn from(kind: Kind) -> Self {
        GateError::new(kind)
    }
}

impl From<ProxyError> for GateError {
    fn from(e: ProxyError) -> Self {
        let kind = match &e {
            ProxyError::Timeout => Kind::OriginTimeout,
            ProxyError::Connect(_) | ProxyError::Upstream(_) => Kind::OriginFailed,
            ProxyError::BadRequest(_) | ProxyError::ClientBody => Kind::Unforwardable,
            ProxyError::InvalidOrigin(_) => Kind::Internal,
            ProxyError::BodyTimeout => Kind::BodyTimeout,
        };
        GateError {
            kind,
            source: Some(Box::new(e)),
            retry_after: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_proxy_error_keeps_its_status_and_gets_a_matching_title() {
        let cases = [
            (ProxyError::Timeout, 504, "Gateway timeout"),
            (ProxyError::Connect("refused".into()), 502, "Bad gateway"),
            (ProxyError::Upstream("reset".into()), 502, "Bad gateway"),
            (ProxyError::BadRequest("no path".into()), 400, "Bad request"),
            (ProxyError::InvalidOrigin("x".into()), 500, "Internal error"),
            (ProxyError::ClientBody, 400, "Bad request"),
            (ProxyError::BodyTimeout, 408, "Request timeout"),
        ];
        for (e, status, title) in cases {
            let g = GateError::from(e);
            assert_eq!(g.kind.status().as_u16(), status, "{g:?}");
            assert_eq!(g.kind.text(Lang::En).0, title);
        }
    }

    #[test]
    fn sold_out_answers_with_the_rooms_queue_status_code() {
        for (code, status) in [(200, 200), (202, 202), (429, 429), (503, 503)] {
            let kind = Kind::SoldOut {
                queue_status_code: code,
            };
            assert_eq!(kind.status().as_u16(), status);
            assert_eq!(kind.text(Lang::En).0, "Sold out");
            assert_eq!(kind.text(Lang::De).0, "Ausverkauft");
        }
    }
}
