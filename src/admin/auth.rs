//! Who may call the admin API: the bearer token, compared in constant time, and what it
//! grants. `admin_token` grants everything; `metrics_token`, when set, only
//! `GET …/api/metrics`. A wrong token is a strike in the abuse registry, and an address
//! with too many is not compared again for a while.

use std::net::IpAddr;

use http::{Request, header};
use hyper::body::Incoming;

use crate::abuse::{Judged, StrikeReason};

use super::{Admin, AdminError};

/// What a valid token allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    /// `admin_token`: everything.
    Admin,
    /// `metrics_token`: `GET …/api/metrics` only.
    MetricsOnly,
}

impl Admin {
    /// What the request's token grants, or the refusal (401, or 429 once this address has
    /// sent too many wrong tokens). Both tokens are compared in constant time, and both
    /// are always compared, so timing does not tell which matched.
    pub(super) fn authorize(
        &self,
        req: &Request<Incoming>,
        caller: IpAddr,
    ) -> Result<Access, AdminError> {
        let presented = bearer(req).ok_or(AdminError::MissingToken)?;
        // The comparison and the strike of a wrong token are one step: at most
        // `ceil(strikes / 5)` wrong tokens are compared from one client, however many
        // arrive at once.
        let judged = self.abuse.judge(caller, StrikeReason::BadAdminToken, || {
            let admin = self.token.ct_eq(presented);
            let metrics = self
                .metrics_token
                .as_ref()
                .is_some_and(|t| t.ct_eq(presented));
            match (admin, metrics) {
                (true, _) => Some(Access::Admin),
                (false, true) => Some(Access::MetricsOnly),
                (false, false) => None,
            }
        });
        match judged {
            Judged::Passed(access) => Ok(access),
            Judged::Failed => {
                if self.wrong_tokens.allow() {
                    tracing::warn!(%caller, "wrong admin token; further warnings suppressed for 10 s");
                }
                Err(AdminError::WrongToken)
            }
            Judged::Withheld => Err(AdminError::TooManyWrongTokens {
                retry_after_secs: self.abuse.policy().window.as_secs().max(1),
            }),
        }
    }
}

/// The `Bearer` credentials of the request, if any.
fn bearer(req: &Request<Incoming>) -> Option<&[u8]> {
    let value = req.headers().get(header::AUTHORIZATION)?.as_bytes();
    let space = value.iter().position(|&b| b == b' ')?;
    let (scheme, rest) = value.split_at(space);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let token = rest.trim_ascii();
    (!token.is_empty()).then_some(token)
}
