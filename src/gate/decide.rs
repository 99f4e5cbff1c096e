//! Step 3 of the request path, for the site: ask [`Admission`](crate::admission::Admission)
//! about this visitor (admitted / waiting / refused / not open / closed / store down), then
//! hand the [`Decision`] to the matching responder and keep the visitor's cookie current.
//!
//! First the door (`door`): a newcomer who would join may be asked for the proof of work,
//! or parked in the shadow line, before anything is stored. A priority grant
//! ([`crate::priority`]) is verified and spent here, then decided like any request with
//! [`Join::Front`] (the site chose to let its holder in: no door).
//!
//! Per-client shares and the signed session claim plug in here: the claim short-circuits
//! the store call for an admitted visitor, a share caps what one [`ClientKey`] may hold
//! before the store is asked.
//!
//! [`ClientKey`]: crate::identity::ClientKey

use std::time::SystemTime;

use http::{Request, Response, header};
use hyper::body::Incoming;

use super::door::{AtTheDoor, Door, return_path};
use super::error::Kind;
use super::identify::Identity;
use super::{App, Room};
use crate::abuse::StrikeReason;
use crate::admission::Decision;
use crate::http::body::Body;
use crate::http::pages::VisitorStatus;
use crate::priority::{self, GrantError};
use crate::queue::{GrantUse, Join, VisitorId};
use crate::token;

/// How a request's visitor may join the line.
#[derive(Clone, Copy)]
enum Joining<'a> {
    /// At the back; with `door`, a visitor the store does not have is not joined but
    /// stopped there (`Join::Known`, in the same store call as the decision).
    Back {
        /// The door's answer for a newcomer, when it has one.
        door: Option<Door>,
    },
    /// At position 1, by a priority grant this request spent: given back unless the
    /// visitor was placed (admitted or waiting).
    Front {
        /// The spent grant's nonce.
        spent: &'a str,
    },
}

/// The visitor the cookie names, or a new one (and so a new cookie).
fn visitor_of(identity: &Identity) -> (VisitorId, bool) {
    match identity.visitor {
        Some(v) => (v, false),
        None => (VisitorId::random(), true),
    }
}

impl App {
    /// A request for the site in `room`: decide, respond, set the cookie.
    pub(super) async fn site(
        &self,
        room: &Room,
        req: Request<Incoming>,
        identity: &Identity,
    ) -> Response<Body> {
        let door = match self.at_the_door(room, identity) {
            AtTheDoor::Enter => None,
            AtTheDoor::Stop(door) => {
                return self.door_page(room, identity, door, return_path(req.uri()));
            }
            AtTheDoor::IfNewcomer(door) => Some(door),
        };
        let (visitor, new_cookie) = visitor_of(identity);
        let join = Joining::Back { door };
        self.site_as(room, req, identity, (visitor, new_cookie), join)
            .await
    }

    /// A request carrying a priority grant. The grant is removed from
    /// the request whatever happens (the origin never sees one). A good, unspent grant puts
    /// the visitor at position 1 (admitted at once when the limits allow); one this very
    /// visitor spent before (a reload of the page that carried it) is an ordinary request
    /// (through the door, like every request but a fresh grant's);
    /// an expired, replayed, forged or other-room grant is 403. Without `priority_secret`
    /// grants mean nothing and the request is an ordinary one.
    pub(super) async fn granted(
        &self,
        room: &Room,
        mut req: Request<Incoming>,
        identity: &Identity,
    ) -> Response<Body> {
        let text = priority::carried(&req).unwrap_or_default();
        priority::strip(&mut req);
        let Some(secret) = &self.priority_secret else {
            return self.site(room, req, identity).await;
        };
        let name = &room.name;
        let now = crate::queue::unix_ms(SystemTime::now()) / 1000;
        let grant = match priority::verify(secret.expose(), &text, name, now) {
            Ok(grant) => grant,
            // Text that is not a grant at all is ignored: a mangled link, or a page of
            // another site making up `?ar_grant=x`, is nobody's attack.
            Err(GrantError::Malformed | GrantError::BadNonce) => {
                return self.site(room, req, identity).await;
            }
            Err(e) => return self.grant_refused(room, e, identity),
        };
        let who = visitor_of(identity);
        let spent = self
            .admission
            .spend_grant(name, &grant.nonce, who.0, grant.expires_at_ms())
            .await;
        match spent {
            Ok(GrantUse::Fresh) => {
                let join = Joining::Front {
                    spent: &grant.nonce,
                };
                self.site_as(room, req, identity, who, join).await
            }
            // Anything but a fresh grant is an ordinary request, door included.
            Ok(GrantUse::Again) => self.site(room, req, identity).await,
            Ok(GrantUse::Taken) => self.grant_refused(room, GrantError::Replayed, identity),
            // The store did not answer: the queue's own answer (stalled, or fail-open)
            // follows, and the grant stays unspent for when it is back.
            Err(_) => self.site(room, req, identity).await,
        }
    }

    /// The one place a grant is refused: 403, `X-Anteroom-Status: refused`, no cookie.
    fn grant_refused(&self, room: &Room, error: GrantError, identity: &Identity) -> Response<Body> {
        // A well-formed grant with a bad MAC, a past expiry or another room's name is a
        // strike (of weight 5). A replayed grant (a shared link) or one signed too far
        // ahead (the operator's own mint) is refused, and nobody's attack.
        if matches!(
            error,
            GrantError::Forged | GrantError::Expired | GrantError::WrongRoom
        ) {
            self.strike(identity.client_ip, StrikeReason::BadGrant);
        }
        if self.origin_errors.allow() {
            tracing::info!(room = %room.name, client = %identity.client_ip, reason = error.as_str(), "priority grant refused");
        }
        self.pages.message_in(
            identity.lang,
            Kind::BadGrant.status(),
            Some(VisitorStatus::Refused),
            Kind::BadGrant.text(identity.lang).0,
            Kind::BadGrant.text(identity.lang).1,
            None,
            identity.wants_json,
        )
    }

    /// Decides `visitor` (and whether their cookie is new) in `room` as `joining` says,
    /// responds, and keeps the cookie current.
    async fn site_as(
        &self,
        room: &Room,
        req: Request<Incoming>,
        identity: &Identity,
        (visitor, new_cookie): (VisitorId, bool),
        joining: Joining<'_>,
    ) -> Response<Body> {
        let (join, door) = match joining {
            Joining::Back { door: Some(door) } => (Join::Known, Some(door)),
            Joining::Back { door: None } => (Join::Back, None),
            Joining::Front { .. } => (Join::Front, None),
        };
        let decision = self
            .admission
            .decide_with(&room.name, visitor, identity.client, join)
            .await;
        if let Joining::Front { spent } = joining
            && !matches!(decision, Decision::Admitted { .. } | Decision::Waiting(_))
        {
            // The grant gave no priority (the line not open yet, closed or sold out, the
            // client over its shares, the store away): its holder may use it again.
            if let Err(e) = self
                .admission
                .release_grant(&room.name, spent, visitor)
                .await
            {
                tracing::debug!(room = %room.name, error = %e, "a priority grant could not be given back");
            }
        }

        let mut response = match decision {
            Decision::Admitted { since } => {
                if let Some(i) = identity.room {
                    self.record_admitted(identity.client_ip, i, visitor);
                }
                self.to_origin(room, req, identity, Some((visitor, since)))
                    .await
            }
            Decision::Stalled { fail_open: true } => {
                let mut response = self.to_origin(room, req, identity, None).await;
                // The access log's decision: let through, not admitted.
                response
                    .extensions_mut()
                    .insert(crate::access_log::Noted::FAIL_OPEN);
                response
            }
            Decision::Waiting(place) => {
                let receipt = self.receipt(room, &place, visitor).await;
                self.waiting(room, place, visitor, receipt, identity)
            }
            Decision::Full => self.full(room, identity),
            Decision::Refused {
                retry_after,
                reason,
            } => {
                // Only the join limit is a strike: a share (sessions, places,
                // cookie clients) is met innocently behind shared addresses.
                // Nor is a join another site's link sent (a cross-site navigation).
                if reason.is_some_and(crate::queue::RefusedReason::is_strike)
                    && !identity.fetch.cross_site
                {
                    self.strike(identity.client_ip, StrikeReason::JoinLimit);
                }
                self.refused(room, retry_after, identity)
            }
            Decision::NotOpen => self.not_open(room, identity),
            Decision::Closed => self.closed(room, identity),
            Decision::SoldOut => self.sold_out(room, identity),
            Decision::Stalled { fail_open: false } => self.stalled(room, identity),
            // Only asked with a door: nobody the store knows, so the door's page, and
            // their cookie (nobody's) left as it is.
            Decision::Newcomer => match door {
                Some(door) => {
                    return self.door_page(room, identity, door, return_path(req.uri()));
                }
                None => self.stalled(room, identity),
            },
        };
        // A refused (or turned-away) newcomer is not anyone yet: no cookie to remember them by.
        let refused = matches!(decision, Decision::Refused { .. } | Decision::Full);
        if (new_cookie && !refused) || matches!(decision, Decision::Waiting(_)) {
            // Re-issued on every waiting page so the cookie's age slides while they wait.
            let value = self.cookies.issue(visitor, &room.name, SystemTime::now());
            response.headers_mut().append(
                header::SET_COOKIE,
                token::set_cookie(&value, self.secure_cookies),
            );
        }
        response
    }
}
