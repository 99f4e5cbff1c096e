//! Step 4 of the request path: the answer — the proxied site, the waiting page (HTML or
//! JSON by `Accept`), the 429, the not-yet-open and closed pages, the store-down page, and
//! every [`GateError`] through its one mapping.

use std::time::{Duration, SystemTime};

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;

use super::error::{GateError, Kind};
use super::identify::Identity;
use super::live::LiveRoom;
use super::{App, Room};
use crate::admission::Eta;
use crate::fairness::admission_token::{END_SESSION_HEADER, ends_session};
use crate::http::body::Body;
use crate::http::i18n;
use crate::http::pages::{Phase, RoomText, VisitorStatus, WaitingView};
use crate::proxy::ForwardContext;
use crate::queue::{Place, RoomPolicy, VisitorId};
use crate::token;

/// Marks a response that is the origin's, not ours: it gets none of our page headers.
#[derive(Clone, Copy, Debug)]
pub(super) struct Proxied;

/// Marks our answer to a request whose exchange with the origin failed through the
/// visitor's fault (a body cut short, garbled or too slow): not the origin's failure, so
/// closed-loop admission does not count it.
#[derive(Clone, Copy, Debug)]
pub(super) struct ClientFault;

impl App {
    /// Any request-path error, through [`GateError::respond`].
    pub(super) fn error(&self, error: impl Into<GateError>, identity: &Identity) -> Response<Body> {
        error
            .into()
            .respond(&self.pages, identity.wants_json, identity.lang)
    }

    /// Forwards to the origin. `admitted` is the visitor the store let in, with since when
    /// (not a fail-open pass-through): only they get an `X-Anteroom-Admission` token, and
    /// only their session can be ended by the origin's `X-Anteroom-End-Session: 1`.
    /// `tunnel_guard` is kept alive for as long as an upgraded connection lasts (a stream's
    /// slot under `stream_cap`).
    pub(super) async fn proxy(
        &self,
        room: &Room,
        mut req: Request<Incoming>,
        identity: &Identity,
        admitted: Option<(VisitorId, u64)>,
        tunnel_guard: Option<crate::proxy::TunnelHold>,
    ) -> Response<Body> {
        token::strip_cookie(req.headers_mut());
        // Whatever class took it there (a grant on a bypass path or an asset is not spent),
        // a priority grant never reaches the origin.
        crate::priority::strip(&mut req);
        // An upgrade (WebSocket) becomes a long-lived tunnel: it counts against the
        // client's stream share for as long as it lives (the proxy holds the ticket).
        if crate::proxy::is_upgrade(&req) {
            match self.live.budget.tunnel(identity.client) {
                Ok(ticket) => {
                    req.extensions_mut().insert(std::sync::Arc::new(ticket));
                }
                Err(refused) => return self.stream_refused(refused, identity),
            }
        }
        // The origin's proof of admission. The proxy removes every `X-Anteroom-*` request
        // header a visitor sent (so nobody forges this one) and only then adds it.
        let name = &room.name;
        let admission = match (&self.signer, admitted) {
            (Some(signer), Some((visitor, since))) => {
                let now = crate::queue::unix_ms(SystemTime::now()) / 1000;
                signer.header_for(name, visitor, since, now)
            }
            _ => None,
        };
        let ctx = ForwardContext {
            client_ip: identity.client_ip,
            proto: identity.proto,
            host: identity.host.as_ref().map(|h| h.header_value().clone()),
            preserve_host: room.live().config.preserve_host,
            trusted_peer: identity.trusted_peer,
            request_id: Some(identity.request_id.clone()),
            admission,
        };
        // The origin's time for the access log's `origin_ms` (only while the log is on).
        let forwarded = self.access_log.as_ref().map(|_| std::time::Instant::now());
        match self
            .origin_clients
            .get()
            .forward_holding(&room.origin, req, &ctx, tunnel_guard)
            .await
        {
            Ok(mut response) => {
                response.extensions_mut().insert(Proxied);
                if let Some(forwarded) = forwarded {
                    response
                        .extensions_mut()
                        .insert(crate::access_log::OriginTime(forwarded.elapsed()));
                }
                // The origin's word to us, never shown to the visitor.
                let end = ends_session(response.headers().get(&END_SESSION_HEADER));
                response.headers_mut().remove(END_SESSION_HEADER);
                if let (true, Some((visitor, _))) = (end, admitted) {
                    if let Some(signer) = &self.signer {
                        signer.forget(name, visitor);
                    }
                    if let Err(e) = self.admission.end_session(name, visitor).await
                        && self.origin_errors.allow()
                    {
                        tracing::warn!(room = %name, error = %e, "could not end the session the origin asked to end");
                    }
                }
                response
            }
            Err(e) if e.is_client_fault() => {
                let mut response = self.error(e, identity);
                response.extensions_mut().insert(ClientFault);
                response
            }
            Err(e) => {
                if self.origin_errors.allow() {
                    tracing::warn!(room = %room.name, error = %e, "origin request failed");
                }
                self.error(e, identity)
            }
        }
    }

    pub(super) fn waiting(
        &self,
        room: &Room,
        place: Place,
        visitor: VisitorId,
        receipt: Option<crate::fairness::draw::Receipt>,
        identity: &Identity,
    ) -> Response<Body> {
        let view = self.waiting_view(room, place, visitor, receipt);
        self.render_waiting(room, view, identity)
    }

    /// What a waiting visitor at `place` is shown (their first range is remembered).
    pub(super) fn waiting_view(
        &self,
        room: &Room,
        place: Place,
        visitor: VisitorId,
        receipt: Option<crate::fairness::draw::Receipt>,
    ) -> WaitingView {
        // Remembered as the range first shown, when it is.
        let eta = self.admission.show_eta(&room.name, visitor, &place);
        let doors = room.live().config.schedule.admits_at;
        let retry_after_secs = match (place.phase, doors) {
            // Nobody moves before the doors: come back then, or every 30 s.
            (Phase::Draw, Some(at)) => secs_until(at).clamp(2, 30),
            _ => retry_after(eta),
        };
        WaitingView {
            status: VisitorStatus::Waiting,
            room: room.name.clone(),
            position: place.position,
            waiting: place.waiting,
            eta_secs: eta,
            retry_after_secs,
            phase: place.phase,
            paused: place.paused,
            reference: Some(visitor.reference().as_str().to_owned()),
            // The draw counts down to the doors.
            phase_ends_at: doors.filter(|_| place.phase == Phase::Draw),
            receipt,
        }
    }

    /// The waiting page (or its JSON) in the visitor's language, with the room's status code.
    pub(super) fn render_waiting(
        &self,
        room: &Room,
        view: WaitingView,
        identity: &Identity,
    ) -> Response<Body> {
        let live = room.live();
        let status = StatusCode::from_u16(live.config.queue_status_code).unwrap_or(StatusCode::OK);
        self.pages.waiting(
            &view,
            &room_text(&live),
            status,
            identity.wants_json,
            identity.lang,
        )
    }

    /// A body for JSON clients that were not let in: no place, just the status.
    fn placeless(
        &self,
        room: &Room,
        status: VisitorStatus,
        phase: Phase,
        retry_after_secs: u64,
    ) -> WaitingView {
        WaitingView {
            status,
            room: room.name.clone(),
            position: None,
            waiting: self.cached_waiting(room),
            eta_secs: Eta::estimating(0),
            retry_after_secs,
            phase,
            paused: false,
            reference: None,
            phase_ends_at: None,
            receipt: None,
        }
    }

    /// The JSON answer for a client that was not let in, with `status`.
    fn placeless_json(
        &self,
        room: &Room,
        view: &WaitingView,
        status: StatusCode,
        identity: &Identity,
    ) -> Response<Body> {
        self.pages
            .waiting(view, &room_text(&room.live()), status, true, identity.lang)
    }

    /// A newcomer over their address's join limit: 429 until their window is over.
    pub(super) fn refused(
        &self,
        room: &Room,
        retry_after: Duration,
        identity: &Identity,
    ) -> Response<Body> {
        let retry_after_secs = retry_after.as_secs_f64().ceil().max(1.0) as u64;
        if identity.wants_json {
            let view = self.placeless(
                room,
                VisitorStatus::Refused,
                self.phase_now(room),
                retry_after_secs,
            );
            return self.placeless_json(room, &view, Kind::OverJoinLimit.status(), identity);
        }
        self.pages.refused(
            identity.lang,
            Kind::OverJoinLimit.status(),
            retry_after_secs,
            false,
        )
    }

    /// Before `queue_opens_at`: nobody is queued; the page counts down to the opening.
    pub(super) fn not_open(&self, room: &Room, identity: &Identity) -> Response<Body> {
        let opens = room.live().config.schedule.queue_opens_at;
        let retry_after_secs = opens.map_or(30, |at| secs_until(at).clamp(2, 30));
        let mut view = self.placeless(
            room,
            VisitorStatus::Waiting,
            Phase::BeforeOpen,
            retry_after_secs,
        );
        view.waiting = 0;
        view.phase_ends_at = opens;
        self.render_waiting(room, view, identity)
    }

    /// The queue breaker (`max_waiting`): the line is full; this newcomer was not added.
    pub(super) fn full(&self, room: &Room, identity: &Identity) -> Response<Body> {
        const RETRY_SECS: u64 = 30;
        if identity.wants_json {
            let view = self.placeless(room, VisitorStatus::Full, self.phase_now(room), RETRY_SECS);
            return self.placeless_json(room, &view, Kind::LineFull.status(), identity);
        }
        self.pages
            .full(identity.lang, Kind::LineFull.status(), RETRY_SECS, false)
    }

    /// After `closes_at`: nobody else gets in.
    pub(super) fn closed(&self, room: &Room, identity: &Identity) -> Response<Body> {
        const RETRY_SECS: u64 = 300;
        if identity.wants_json {
            let mut view = self.placeless(room, VisitorStatus::Closed, Phase::Closed, RETRY_SECS);
            view.waiting = 0;
            return self.placeless_json(room, &view, Kind::Closed.status(), identity);
        }
        self.pages
            .closed(identity.lang, Kind::Closed.status(), false)
    }

    /// The room's sold-out mode: the sold-out page with the operator's message (the
    /// room's `queue_status_code`, as the waiting page).
    pub(super) fn sold_out(&self, room: &Room, identity: &Identity) -> Response<Body> {
        let kind = Kind::SoldOut {
            queue_status_code: room.live().config.queue_status_code,
        };
        if identity.wants_json {
            let mut view = self.placeless(room, VisitorStatus::SoldOut, self.phase_now(room), 0);
            view.waiting = 0;
            return self.placeless_json(room, &view, kind.status(), identity);
        }
        self.pages.sold_out(
            identity.lang,
            kind.status(),
            &room.live().config.message,
            false,
        )
    }

    /// The store did not answer and the room does not fail open: hold the visitor.
    pub(super) fn stalled(&self, room: &Room, identity: &Identity) -> Response<Body> {
        const RETRY_SECS: u64 = 5;
        if identity.wants_json {
            let mut view =
                self.placeless(room, VisitorStatus::Stalled, Phase::Queueing, RETRY_SECS);
            view.waiting = 0;
            return self.placeless_json(room, &view, Kind::Stalled.status(), identity);
        }
        let t = identity.lang.catalog();
        self.pages.message_in(
            identity.lang,
            Kind::Stalled.status(),
            Some(VisitorStatus::Stalled),
            i18n::title(&room.live().config.title, t),
            t.stalled_detail,
            Some(RETRY_SECS),
            false,
        )
    }

    /// The room's phase by this replica's clock, for pages the store did not place (a
    /// refusal); the store's clock decides everything else.
    pub(super) fn phase_now(&self, room: &Room) -> Phase {
        RoomPolicy::of(&room.live().config).phase_at(crate::queue::unix_ms(SystemTime::now()))
    }

    /// How many wait in `room`, as last read (at most about a second old).
    pub(super) fn cached_waiting(&self, room: &Room) -> u64 {
        self.admission
            .cached_stats(&room.name)
            .map_or(0, |s| s.stats.waiting)
    }
}

pub(super) fn room_text(live: &LiveRoom) -> RoomText<'_> {
    RoomText {
        title: &live.config.title,
        message: &live.config.message,
    }
}

/// Whole seconds from now until `at` (0 when it has passed), rounded up.
fn secs_until(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::now())
        .map_or(0, |d| d.as_secs_f64().ceil() as u64)
}

/// How long a waiting client should wait before asking again: the soonest they could be
/// let in, kept between 2 and 30 seconds.
/// When a waiting client should ask again: not before the line could have reached it, and
/// every 5 s at most while the room is still estimating, so a range is shown soon.
fn retry_after(eta: Eta) -> u64 {
    if eta.estimating {
        eta.min.clamp(2, 5)
    } else {
        eta.min.clamp(2, 30)
    }
}
