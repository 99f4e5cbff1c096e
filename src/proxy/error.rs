//! Why a request could not be forwarded ([`ProxyError`], and the status the visitor gets
//! for it), and reading an error's chain of causes: for a log line, and to tell a timeout
//! from another failure.

use std::error::Error as StdError;
use std::io;

use crate::http::body::BoxError;

/// Why a request could not be forwarded. The request path turns it into its own error
/// (`gate::error`), which decides the status the visitor gets.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The origin could not be reached (refused, unreachable, DNS).
    #[error("origin unreachable: {0}")]
    Connect(#[source] BoxError),
    /// The origin did not connect, answer or keep sending in time.
    #[error("origin timed out")]
    Timeout,
    /// The origin broke the exchange (reset, malformed response, unexpected upgrade).
    #[error("origin failed: {0}")]
    Upstream(#[source] BoxError),
    /// The visitor's request cannot be forwarded (CONNECT, a target with no path, ...).
    #[error("request cannot be forwarded: {0}")]
    BadRequest(String),
    /// The configured origin URI is not usable (checked when the config is loaded).
    #[error("invalid origin: {0}")]
    InvalidOrigin(String),
    /// The visitor's request body did not arrive within `body_timeout`.
    #[error("request body not received in time")]
    BodyTimeout,
    /// The visitor's request body broke off or was malformed (a bad chunk, fewer bytes
    /// than its `Content-Length`), so the exchange with the origin failed: the client's
    /// fault, not the origin's.
    #[error("the request body broke off")]
    ClientBody,
}

impl ProxyError {
    /// Whether the visitor, not the origin, caused it: never counted against the origin
    /// (closed-loop admission, the origin-failure log).
    pub fn is_client_fault(&self) -> bool {
        matches!(self, ProxyError::BodyTimeout | ProxyError::ClientBody)
    }
}

/// `error: cause: cause…`, for a log line that says what really went wrong.
pub(super) fn with_causes(error: &(dyn StdError + 'static)) -> String {
    let mut text = error.to_string();
    let mut current = error.source();
    while let Some(e) = current {
        let cause = e.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
        current = e.source();
    }
    text
}

pub(super) fn caused_by_timeout(error: &(dyn StdError + 'static)) -> bool {
    let mut current: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(e) = current {
        if let Some(io) = e.downcast_ref::<io::Error>()
            && io.kind() == io::ErrorKind::TimedOut
        {
            return true;
        }
        current = e.source();
    }
    false
}
