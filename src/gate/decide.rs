//! Step 3 of the request path, for the site: ask [`Admission`](crate::admission::Admission)
//! about this visitor (admitted / waiting / refused / not open / closed / store down), then
//! hand the [`Decision`] to the matching responder and keep the visitor's cookie current.
//!
//! Per-client shares and the signed session claim plug in here: the claim short-circuits
//! the store call for an admitted visitor, a share caps what one [`ClientKey`] may hold
//! before the store is asked.
//!
//! [`ClientKey`]: crate::identity::ClientKey

use std::time::SystemTime;

use http::{Request, Response, header};
use hyper::body::Incoming;

use super::identify::Identity;
use super::{App, Room};
use crate::abuse::StrikeReason;
use crate::admission::Decision;
use crate::http::body::Body;
use crate::queue::VisitorId;
use crate::token;

impl App {
    /// A request for the site in `room`: decide, respond, set the cookie.
    pub(super) async fn site(
        &self,
        room: &Room,
        req: Request<Incoming>,
        identity: &Identity,
    ) -> Response<Body> {
        let (visitor, new_cookie) = match identity.visitor {
            Some(v) => (v, false),
            None => (VisitorId::random(), true),
        };
        let decision = self
            .admission
            .decide(&room.config.name, visitor, identity.client)
            .await;

        let mut response = match decision {
            Decision::Admitted { since } => {
                if let Some(i) = identity.room {
                    self.record_admitted(identity.client_ip, i, visitor);
                }
                self.to_origin(room, req, identity, Some((visitor, since)))
                    .await
            }
            Decision::Stalled { fail_open: true } => {
                self.to_origin(room, req, identity, None).await
            }
            Decision::Waiting(place) => self.waiting(room, place, visitor, identity),
            Decision::Full => self.full(room, identity),
            Decision::Refused {
                retry_after,
                reason,
            } => {
                // Only the join limit is a strike (SPEC §10): a share (sessions, places,
                // cookie clients) is met innocently behind shared addresses.
                if reason.is_some_and(crate::queue::RefusedReason::is_strike) {
                    self.strike(identity.client_ip, StrikeReason::JoinLimit);
                }
                self.refused(room, retry_after, identity)
            }
            Decision::NotOpen => self.not_open(room, identity),
            Decision::Closed => self.closed(room, identity),
            Decision::Stalled { fail_open: false } => self.stalled(room, identity),
        };
        // A refused (or turned-away) newcomer is not anyone yet: no cookie to remember them by.
        let refused = matches!(decision, Decision::Refused { .. } | Decision::Full);
        if (new_cookie && !refused) || matches!(decision, Decision::Waiting(_)) {
            // Re-issued on every waiting page so the cookie's age slides while they wait.
            let value = self
                .cookies
                .issue(visitor, &room.config.name, SystemTime::now());
            response.headers_mut().append(
                header::SET_COOKIE,
                token::set_cookie(&value, self.secure_cookies),
            );
        }
        response
    }
}
