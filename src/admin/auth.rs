//! Who may call the admin API: the bearer token, compared in constant time, and what it
//! grants. `admin_token` (named `admin`) grants everything; each of `admin_tokens` what
//! its role allows ([`permits`]); `metrics_token`, when set, only `GET …/api/metrics`. A
//! wrong token is a strike in the abuse registry, and an address with too many is not
//! compared again for a while. The tokens are swapped whole when a reload changes them.

use std::net::IpAddr;
use std::sync::Arc;

use http::{Method, Request, header};
use hyper::body::Incoming;

use crate::abuse::{Judged, StrikeReason};
use crate::config::{ADMIN_TOKEN_NAME, Config, Role, Secret};

use super::routes::Op;
use super::{Admin, AdminError};

/// What a valid token allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Access {
    /// `admin_token` or one of `admin_tokens`: what the role allows, under the name.
    Token {
        /// The token's name, for the audit log.
        name: Arc<str>,
        /// What it may do.
        role: Role,
    },
    /// `metrics_token`: `GET …/api/metrics` only.
    MetricsOnly,
}

/// The tokens the admin API accepts, swapped whole on a reload.
pub(super) struct Tokens {
    named: Vec<(Arc<str>, Secret, Role)>,
    metrics: Option<Secret>,
}

impl Tokens {
    /// The tokens of `config`: `admin_token` first, then `admin_tokens`, then the metrics one.
    pub(super) fn of(config: &Config) -> Tokens {
        let mut named = vec![(
            Arc::from(ADMIN_TOKEN_NAME),
            config.admin_token.clone(),
            Role::Admin,
        )];
        named.extend(
            config
                .admin_tokens
                .iter()
                .map(|t| (Arc::from(t.name.as_str()), t.token.clone(), t.role)),
        );
        Tokens {
            named,
            metrics: config.metrics_token.clone(),
        }
    }

    /// Compares `presented` with every token (all of them, so timing does not tell which
    /// matched).
    fn check(&self, presented: &[u8]) -> Option<Access> {
        let mut found = None;
        for (name, secret, role) in &self.named {
            if secret.ct_eq(presented) && found.is_none() {
                found = Some(Access::Token {
                    name: name.clone(),
                    role: *role,
                });
            }
        }
        let metrics = self.metrics.as_ref().is_some_and(|t| t.ct_eq(presented));
        match found {
            Some(access) => Some(access),
            None if metrics => Some(Access::MetricsOnly),
            None => None,
        }
    }
}

/// Whether `role` may call the route `op` with `method`: a viewer reads only, an operator
/// may change rooms and their lines but not bans, an admin everything.
pub(super) fn permits(role: Role, op: Op, method: &Method) -> bool {
    match role {
        Role::Admin => true,
        Role::Operator => !matches!(op, Op::Ban | Op::Unban),
        Role::Viewer => method == Method::GET || method == Method::HEAD,
    }
}

impl Admin {
    /// What the request's token grants, or the refusal (401, or 429 once this address has
    /// sent too many wrong tokens). Every token is compared in constant time, and all are
    /// always compared, so timing does not tell which matched.
    pub(super) fn authorize(
        &self,
        req: &Request<Incoming>,
        caller: IpAddr,
    ) -> Result<Access, AdminError> {
        let presented = bearer(req).ok_or(AdminError::MissingToken)?;
        // The comparison and the strike of a wrong token are one step: at most
        // `ceil(strikes / 5)` wrong tokens are compared from one client, however many
        // arrive at once.
        let tokens = self.tokens.load();
        let judged = self.abuse.judge(caller, StrikeReason::BadAdminToken, || {
            tokens.check(presented)
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

impl Admin {
    /// Replaces the accepted tokens with those of `config` (a reload).
    pub fn set_tokens(&self, config: &Config) {
        self.tokens.store(Arc::new(Tokens::of(config)));
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
