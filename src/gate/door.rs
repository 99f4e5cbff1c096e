//! The door, step 3's first question for a request to the site: does this newcomer join,
//! get the proof of work first, or go to the shadow line? Only a newcomer who would join
//! is asked (the room queues, its line is open, the store is not failing open, and the
//! request carries no cookie of a visitor the store has waiting or on the site), so a
//! visitor in line or admitted never meets it, and a room with both features off pays
//! one comparison.
//!
//! Whether a request with a cookie comes from a newcomer is the store's to say, and it
//! says so in the request's own decision: with the door on, that decision is asked with
//! [`Join::Known`](crate::queue::Join::Known), which resolves a visitor it has as usual
//! (the session cache first) and answers [`Decision::Newcomer`](crate::admission::Decision)
//! for anyone else without joining them. So a visitor's request costs the same store calls
//! with the door on or off; a request without a cookie is a newcomer's and costs none.
//!
//! - The shadow line (`shadow_after`): a client whose strikes reach it gets an ordinary
//!   waiting page whose position never reaches the front, and no challenge, no cookie,
//!   no place: nothing is written to the store.
//! - The challenge (`challenge.mode`): `always`, or `under_load` while somebody waits or
//!   the draw is open (this replica's cached counters). The newcomer gets the challenge
//!   page (or its JSON) instead of a place, at `challenge::bits_for` the room's
//!   difficulty and their strikes; nothing is stored until a solution comes back
//!   (`gate/challenge.rs`).

use http::{Response, Uri};

use super::identify::Identity;
use super::respond::room_text;
use super::{App, Kind, Room};
use crate::challenge::{self, ChallengeMode};
use crate::http::body::Body;
use crate::http::pages::{ChallengeView, Phase, VisitorStatus, WaitingView};
use crate::queue::{Mode, VisitorId, VisitorState};

/// What the door does with a newcomer.
#[derive(Clone, Copy, Debug)]
pub(super) enum Door {
    /// The shadow line.
    Shadow,
    /// The proof of work first; the client's strikes raise its difficulty.
    Challenge {
        /// The client's strikes within `abuse.window`.
        strikes: u32,
    },
}

/// What the door does with a request for the site.
pub(super) enum AtTheDoor {
    /// Decide it as usual: the door is off, or nobody would join now.
    Enter,
    /// A request without a cookie: a newcomer, stopped at the door.
    Stop(Door),
    /// A request with a cookie: decided with `Join::Known`, and stopped at the door only
    /// if the store has nobody waiting or on the site for it.
    IfNewcomer(Door),
}

impl App {
    /// `room`'s door series, looked up once per room.
    pub(super) fn door_series<'r>(&self, room: &'r Room) -> &'r crate::metrics::DoorSeries {
        room.door_series
            .get_or_init(|| self.metrics.challenges.room(&room.name))
    }

    /// The door's answer for `identity`'s request to `room` (see the module docs).
    pub(super) fn at_the_door(&self, room: &Room, identity: &Identity) -> AtTheDoor {
        let live = room.live();
        let config = &live.config;
        if config.shadow_after == 0 && config.challenge.mode == ChallengeMode::Off {
            return AtTheDoor::Enter;
        }
        if !self.would_join(room) {
            return AtTheDoor::Enter;
        }
        let strikes = self.abuse.strikes(identity.client_ip);
        let shadowed = shadowed_at(config.shadow_after, strikes);
        let challenged = match config.challenge.mode {
            ChallengeMode::Off => false,
            ChallengeMode::Always => true,
            ChallengeMode::UnderLoad => self.under_load(room),
        };
        let door = if shadowed {
            Door::Shadow
        } else if challenged {
            Door::Challenge {
                strikes: u32::try_from(strikes).unwrap_or(u32::MAX),
            }
        } else {
            return AtTheDoor::Enter;
        };
        if identity.visitor.is_some() {
            AtTheDoor::IfNewcomer(door)
        } else {
            AtTheDoor::Stop(door)
        }
    }

    /// The door's page for a newcomer who asked for `return_to`.
    pub(super) fn door_page(
        &self,
        room: &Room,
        identity: &Identity,
        door: Door,
        return_to: &str,
    ) -> Response<Body> {
        match door {
            Door::Shadow => self.shadow_page(room, identity),
            Door::Challenge { strikes } => self.challenge_page(room, identity, strikes, return_to),
        }
    }

    /// Whether `identity`'s client is in `room`'s shadow line (its strikes reach
    /// `shadow_after`): the door's other routes (an answer to a challenge, the time lock)
    /// lead it there too, so the shadow line has no way out but its strikes' expiry.
    pub(super) fn shadowed(&self, room: &Room, identity: &Identity) -> bool {
        // Off (0): no strikes lookup.
        let shadow_after = room.live().config.shadow_after;
        shadow_after != 0 && shadowed_at(shadow_after, self.abuse.strikes(identity.client_ip))
    }

    /// Whether a newcomer to `room` would join now: the queue mode, the line open (or the
    /// draw), and the store not failing open. Otherwise the room's own answer (let
    /// through, not open, closed, sold out) follows as it would without the door.
    fn would_join(&self, room: &Room) -> bool {
        self.admission.mode(&room.name) == Mode::Queue
            && matches!(self.phase_now(room), Phase::Queueing | Phase::Draw)
            && !self.admission.health().failing_open()
    }

    /// `under_load`: somebody waits in the line, or the draw is open, as this replica last
    /// read the room's counters (at most about a second old).
    fn under_load(&self, room: &Room) -> bool {
        self.admission
            .cached_stats(&room.name)
            .is_some_and(|s| s.stats.waiting > 0 || s.stats.schedule == Phase::Draw)
    }

    /// The cookie's visitor and where the store has them (`None` inside when the store did
    /// not answer); `None` without a cookie.
    pub(super) async fn visitor_state(
        &self,
        room: &Room,
        identity: &Identity,
    ) -> Option<(VisitorId, Option<VisitorState>)> {
        let visitor = identity.visitor?;
        let state = self
            .admission
            .state_of(&room.name, visitor, identity.client)
            .await;
        Some((visitor, state))
    }

    /// The challenge for a newcomer to `room` who asked for `return_to`: issued now at the
    /// room's difficulty plus `strikes` bits, as a page or JSON.
    fn challenge_page(
        &self,
        room: &Room,
        identity: &Identity,
        strikes: u32,
        return_to: &str,
    ) -> Response<Body> {
        let live = room.live();
        let config = &live.config;
        let bits = challenge::bits_for(config.challenge.difficulty, strikes);
        let issued = self.challenge_key.issue(
            &config.name,
            &identity.client.to_bytes(),
            bits,
            self.admission.now_ms(),
            challenge::random_nonce(),
        );
        self.door_series(room).issued();
        let view = ChallengeView {
            challenge: &issued.text,
            bits,
            return_to,
            no_js_secs: config.challenge.no_js_wait_for(strikes).as_secs(),
            expires_in_secs: challenge::TTL.as_secs(),
        };
        let kind = Kind::Challenge {
            queue_status_code: config.queue_status_code,
        };
        self.pages.challenge(
            &view,
            &room_text(&room.live()),
            kind.status(),
            identity.wants_json,
            identity.lang,
        )
    }

    /// The shadow line's page: the waiting page (or its JSON) of a line whose back this
    /// client never leaves, with no store call, no cookie and no place.
    pub(super) fn shadow_page(&self, room: &Room, identity: &Identity) -> Response<Body> {
        self.door_series(room).shadowed();
        let waiting = self.cached_waiting(room);
        let client = identity.client.to_bytes();
        // Behind everyone, and a few more: always further back than the line is long.
        let position = waiting.saturating_add(1 + u64::from(client[15] % 16));
        // What a real visitor there would be shown: the same reference on every reload, and
        // the room's range for the place (shown, never promised: nothing is recorded).
        let shadow = VisitorId(self.challenge_key.shadow_id(&client));
        let view = WaitingView {
            status: VisitorStatus::Waiting,
            room: room.name.clone(),
            position: Some(position),
            waiting: position,
            eta_secs: self.admission.eta(&room.name, position),
            retry_after_secs: 5,
            phase: Phase::Queueing,
            paused: false,
            reference: Some(shadow.reference().as_str().to_owned()),
            phase_ends_at: None,
            receipt: None,
        };
        self.render_waiting(room, view, identity)
    }
}

/// Whether `strikes` reach a room's `shadow_after` (0: no shadow line).
fn shadowed_at(shadow_after: u32, strikes: u64) -> bool {
    shadow_after > 0 && strikes >= u64::from(shadow_after)
}

/// Where a newcomer goes once joined: the path and query they asked for, which is the
/// site's own (a same-site path by construction).
pub(super) fn return_path(uri: &Uri) -> &str {
    uri.path_and_query().map_or("/", |p| p.as_str())
}

/// A return path a visitor may be sent on to: a path of this site (`/…`, not `//…` nor
/// `/\…`, which browsers read as another host), without control characters; else `/`.
pub(super) fn same_site(path: &str) -> &str {
    let ok = path.starts_with('/')
        && !path.starts_with("//")
        && !path.starts_with("/\\")
        && !path.chars().any(|c| c.is_control())
        && path.len() <= 4096;
    if ok { path } else { "/" }
}

#[cfg(test)]
mod tests {
    use super::same_site;

    #[test]
    fn only_same_site_paths_are_returned_to() {
        for ok in ["/", "/shop?item=1", "/a/b#c"] {
            assert_eq!(same_site(ok), ok);
        }
        for bad in [
            "//evil.example/",
            "/\\evil.example",
            "https://evil.example/",
            "evil",
            "",
            "/a\r\nSet-Cookie: x",
        ] {
            assert_eq!(same_site(bad), "/", "{bad:?}");
        }
    }
}
