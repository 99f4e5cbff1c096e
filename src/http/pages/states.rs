//! The operator's one template (`waiting_template`) for every state a visitor can be
//! shown: which [`PageState`] a page is, and rendering the operator's template with a
//! fall back to the built-in page when it fails.
//!
//! One template serves every page: it receives `state` (the [`PageState`]'s name) and
//! branches on it, so an operator keeps one layout and one brand for the waiting page, the
//! holding pages (full, closed, sold out, banned, stalled, refused) and the error pages.
//! Every state gets `state`, `status_code`, `title`, `t` (the visitor's language's
//! strings) and `custom_css`; the waiting states (`waiting`, `draw`, `paused`) add the
//! line's variables (`position`, `waiting`, `eta_text`, …), the others `detail` (the
//! page's translated body) and `refresh_secs`; the `challenge` state (the proof of work
//! before joining) adds `challenge`, `bits`, `answer`, `return_to`, `wait_url`,
//! `no_js_secs` and `c` (its strings), and must render the element its script looks for
//! (docs/challenge.md).
//!
//! A template that fails to render never costs the visitor their page: the built-in page
//! is sent instead, and the failure is logged at most once per [`LOG_EVERY`].

use std::time::Duration;

use minijinja::{Environment, Value};

use super::{VisitorStatus, WaitingView};
use crate::log_limiter::LogLimiter;
use crate::queue::Phase;

/// The name the operator's template is registered under.
pub(super) const OPERATOR_TEMPLATE: &str = "custom.html";

/// How often a failing operator template is logged, at most.
pub(super) const LOG_EVERY: Duration = Duration::from_secs(60);

/// Which page a visitor is shown: the operator's template's `state` variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PageState {
    /// In line (or before the queue opens: `phase` says `before_open`).
    Waiting,
    /// Entered in the lottery draw, before the doors open.
    Draw,
    /// In line while the room is paused.
    Paused,
    /// The queue breaker turned a newcomer away.
    Full,
    /// The room is past `closes_at`.
    Closed,
    /// The room is sold out.
    SoldOut,
    /// Banned by the abuse registry.
    Banned,
    /// Over the join limit or a per-client share, or a priority link not valid.
    Refused,
    /// The store cannot be reached; the holding page retries.
    Stalled,
    /// A newcomer's proof of work before joining (the challenge page).
    Challenge,
    /// Any other refusal: the error pages (400, 404, 502, 503, 504, …).
    Error,
}

impl PageState {
    /// The `state` variable's value.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            PageState::Waiting => "waiting",
            PageState::Draw => "draw",
            PageState::Paused => "paused",
            PageState::Full => "full",
            PageState::Closed => "closed",
            PageState::SoldOut => "sold_out",
            PageState::Banned => "banned",
            PageState::Refused => "refused",
            PageState::Stalled => "stalled",
            PageState::Challenge => "challenge",
            PageState::Error => "error",
        }
    }

    /// The state of a waiting page.
    pub(super) fn of_waiting(view: &WaitingView) -> PageState {
        if view.phase == Phase::Draw {
            PageState::Draw
        } else if view.paused {
            PageState::Paused
        } else {
            PageState::Waiting
        }
    }

    /// The state of a holding or error page, from its `X-Anteroom-Status` (none for the
    /// error pages).
    pub(super) fn of_message(status: Option<VisitorStatus>) -> PageState {
        match status {
            None => PageState::Error,
            Some(VisitorStatus::Waiting) => PageState::Waiting,
            Some(VisitorStatus::Refused) => PageState::Refused,
            Some(VisitorStatus::Closed) => PageState::Closed,
            Some(VisitorStatus::Stalled) => PageState::Stalled,
            Some(VisitorStatus::Banned) => PageState::Banned,
            Some(VisitorStatus::Full) => PageState::Full,
            Some(VisitorStatus::SoldOut) => PageState::SoldOut,
            Some(VisitorStatus::Challenge) => PageState::Challenge,
        }
    }
}

/// The operator's template rendered with `ctx`, or `None` (logged at most once per
/// [`LOG_EVERY`] through `limiter`) when it fails, for the caller to send the built-in page.
pub(super) fn render_operator(
    env: &Environment<'static>,
    limiter: &LogLimiter,
    state: PageState,
    ctx: Value,
) -> Option<String> {
    match env
        .get_template(OPERATOR_TEMPLATE)
        .and_then(|t| t.render(ctx))
    {
        Ok(html) => Some(html),
        Err(e) => {
            if let Some(suppressed) = limiter.allow_counted() {
                tracing::error!(state = state.as_str(), error = %e, suppressed, "waiting_template failed to render; sent the built-in page");
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_visitor_status_has_a_state_and_no_status_is_an_error() {
        assert_eq!(PageState::of_message(None), PageState::Error);
        for (status, state) in [
            (VisitorStatus::Full, "full"),
            (VisitorStatus::Closed, "closed"),
            (VisitorStatus::SoldOut, "sold_out"),
            (VisitorStatus::Banned, "banned"),
            (VisitorStatus::Stalled, "stalled"),
            (VisitorStatus::Refused, "refused"),
        ] {
            assert_eq!(PageState::of_message(Some(status)).as_str(), state);
        }
    }
}
