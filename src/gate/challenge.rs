//! The two reserved routes of the proof of work: `POST /__anteroom/challenge` (a page's or
//! a JSON client's solution) and `GET /__anteroom/challenge/wait` (the no-JavaScript time
//! lock). Each checks the challenge (`crate::challenge`: signature, room, client, age, and
//! the work or the wait), spends its id in the store (once, across replicas), and only
//! then lets the newcomer join and sets their cookie.
//!
//! A request that already carries the cookie of a visitor in line or on the site (a
//! second tab that solved after the first joined) spends nothing and gets that visitor's
//! status: no second place, no loop. A client in the shadow line (`shadow_after`) gets its
//! shadow page here as at the site, whatever it sends: the door has no side entrance. A
//! refused answer gets its reason and a fresh challenge to start again with. Answers from
//! another site's page are refused before anything is read.

use std::borrow::Cow;
use std::time::SystemTime;

use http::{HeaderValue, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::door::same_site;
use super::identify::Identity;
use super::respond::room_text;
use super::{App, Kind, Room};
use crate::admission::{Decision, Replayed};
use crate::challenge::{self, ChallengeError, Expected, Verified};
use crate::http::body::Body;
use crate::http::form;
use crate::http::pages::{ChallengeView, VisitorStatus};
use crate::http::read::{ReadError, read_whole};
use crate::queue::{ChallengeSpend, VisitorId, VisitorState};
use crate::token;

/// The largest answer body read: a challenge, a counter and a solve time fit in a few
/// hundred bytes.
const MAX_ANSWER_BYTES: usize = 4096;

/// Why an answer was refused, as the wire and the metrics name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    /// The challenge's own check failed.
    Check(ChallengeError),
    /// Its id was spent already (on any replica).
    Replayed,
    /// The body is not an answer (not JSON or a form with a challenge and a solution).
    Unreadable,
}

impl Refusal {
    fn reason(self) -> &'static str {
        match self {
            Refusal::Check(e) => e.as_str(),
            Refusal::Replayed => "replayed",
            Refusal::Unreadable => "malformed",
        }
    }

    fn kind(self) -> Kind {
        Kind::ChallengeRefused {
            malformed: matches!(
                self,
                Refusal::Unreadable | Refusal::Check(ChallengeError::Malformed)
            ),
        }
    }
}

/// One answer: the challenge, the counter, and the page's measured solve time. The
/// challenge is borrowed from the body when it needs no unescaping (always, for a text of
/// base64url, digits and a room name).
struct Answer<'a> {
    challenge: Cow<'a, str>,
    solution: u64,
    solve_ms: Option<u64>,
}

impl<'a> Answer<'a> {
    /// An answer from a JSON or form body.
    fn parse(content_type: Option<&HeaderValue>, body: &'a [u8]) -> Option<Answer<'a>> {
        let form = content_type.and_then(|v| v.to_str().ok()).is_some_and(|v| {
            v.trim_start()
                .get(..FORM_TYPE.len())
                .is_some_and(|t| t.eq_ignore_ascii_case(FORM_TYPE))
        });
        if form {
            let text = std::str::from_utf8(body).ok()?;
            return Some(Answer {
                challenge: Cow::Owned(form::field(text, "challenge")?),
                solution: form::field(text, "solution")?.trim().parse().ok()?,
                solve_ms: form::field(text, "solve_ms").and_then(|v| v.trim().parse().ok()),
            });
        }
        let json: JsonAnswer<'a> = serde_json::from_slice(body).ok()?;
        Some(Answer {
            challenge: json.challenge?,
            solution: json.solution?,
            solve_ms: json.solve_ms,
        })
    }
}

/// The form body's media type.
const FORM_TYPE: &str = "application/x-www-form-urlencoded";

/// A JSON answer's three fields, read straight from the body without building a tree:
/// any other key is skipped, a field of the wrong type counts as absent, and a repeated
/// key's last value wins.
#[derive(Default)]
struct JsonAnswer<'a> {
    challenge: Option<Cow<'a, str>>,
    solution: Option<u64>,
    solve_ms: Option<u64>,
}

/// One JSON value as an answer's field reads it: text, a number, or anything else.
enum Field<'a> {
    Text(Cow<'a, str>),
    Unsigned(u64),
    Negative,
    Float(f64),
    Other,
}

impl<'de> serde::Deserialize<'de> for JsonAnswer<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = JsonAnswer<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object with challenge and solution")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
                let mut answer = JsonAnswer::default();
                while let Some(key) = map.next_key::<Field<'de>>()? {
                    let value = map.next_value::<Field<'de>>()?;
                    let Field::Text(key) = key else { continue };
                    match &*key {
                        "challenge" => {
                            answer.challenge = match value {
                                Field::Text(t) => Some(t),
                                _ => None,
                            }
                        }
                        "solution" => {
                            answer.solution = match value {
                                Field::Unsigned(n) => Some(n),
                                _ => None,
                            }
                        }
                        "solve_ms" => {
                            answer.solve_ms = match value {
                                Field::Unsigned(n) => Some(n),
                                Field::Negative => Some(0),
                                Field::Float(f) => Some(f.max(0.0) as u64),
                                _ => None,
                            }
                        }
                        _ => {}
                    }
                }
                Ok(answer)
            }
        }
        d.deserialize_map(Fields)
    }
}

impl<'de> serde::Deserialize<'de> for Field<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Any;
        impl<'de> Visitor<'de> for Any {
            type Value = Field<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Field<'de>, E> {
                Ok(Field::Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Field<'de>, E> {
                Ok(Field::Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Field<'de>, E> {
                Ok(Field::Text(Cow::Owned(v)))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Field<'de>, E> {
                Ok(Field::Unsigned(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Field<'de>, E> {
                Ok(u64::try_from(v).map_or(Field::Negative, Field::Unsigned))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Field<'de>, E> {
                Ok(Field::Float(v))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Field<'de>, E> {
                Ok(Field::Other)
            }
            fn visit_unit<E>(self) -> Result<Field<'de>, E> {
                Ok(Field::Other)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Field<'de>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Field::Other)
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Field<'de>, M::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Field::Other)
            }
        }
        d.deserialize_any(Any)
    }
}

/// Whether the request comes from another site's page: `Sec-Fetch-Site` other than
/// `same-origin` or `none`, or an `Origin` whose host is not the request's.
fn cross_site<B>(req: &Request<B>, identity: &Identity) -> bool {
    if let Some(site) = req.headers().get("sec-fetch-site") {
        let site = site.as_bytes();
        if !(site.eq_ignore_ascii_case(b"same-origin") || site.eq_ignore_ascii_case(b"none")) {
            return true;
        }
    }
    let Some(origin) = req.headers().get(header::ORIGIN) else {
        return false;
    };
    let origin_host = origin
        .to_str()
        .ok()
        .and_then(|o| o.split_once("://"))
        .map(|(_, rest)| rest.trim_end_matches('/'));
    match (origin_host, &identity.host) {
        (Some(o), Some(host)) => !o.eq_ignore_ascii_case(host.authority()),
        _ => true,
    }
}

impl App {
    /// `POST /__anteroom/challenge`.
    pub(super) async fn challenge_answer(
        &self,
        room: Option<&'static Room>,
        req: Request<Incoming>,
        mut identity: Identity,
    ) -> Response<Body> {
        // The page's script reads JSON, whatever it asked for.
        identity.wants_json = true;
        let identity = &identity;
        let Some(room) = room else {
            return self.error(Kind::UnknownSite, identity);
        };
        if cross_site(&req, identity) {
            // Counted like any refused answer, but never the client's strike: another
            // site's page chose to send it.
            self.metrics.challenges.failed(&room.name, "cross_site");
            return self.error(Kind::CrossSite, identity);
        }
        if self.shadowed(room, identity) {
            // Right or wrong, an answer leads the shadow line back to its page: no
            // challenge, no place.
            return self
                .unless_in(room, identity, None, || self.shadow_page(room, identity))
                .await;
        }
        let (head, body) = req.into_parts();
        let body = match read_whole(&head.headers, body, MAX_ANSWER_BYTES, self.body_timeout).await
        {
            Ok(body) => body,
            Err(ReadError::TooSlow(_)) => return self.error(Kind::BodyTimeout, identity),
            Err(ReadError::TooLarge { .. } | ReadError::Broken(_)) => {
                return self
                    .refused_unless_in(room, Refusal::Unreadable, identity)
                    .await;
            }
        };
        let Some(answer) = Answer::parse(head.headers.get(header::CONTENT_TYPE), &body) else {
            return self
                .refused_unless_in(room, Refusal::Unreadable, identity)
                .await;
        };
        let checked = self.challenge_key.verify(
            &answer.challenge,
            answer.solution,
            &self.expected(room, identity),
        );
        match checked {
            // A visitor the store already has (a second tab) is answered their status in
            // the same store call, spending nothing.
            Ok(verified) => {
                self.spend_and_join(room, &verified, answer.solve_ms, identity, None)
                    .await
            }
            Err(e) => {
                self.refused_unless_in(room, Refusal::Check(e), identity)
                    .await
            }
        }
    }

    /// A refused answer, unless its cookie is of a visitor the store has waiting or on the
    /// site (a second tab whose answer came too late to matter): then that visitor's
    /// status, as an accepted answer would have given it.
    async fn refused_unless_in(
        &self,
        room: &Room,
        refusal: Refusal,
        identity: &Identity,
    ) -> Response<Body> {
        self.unless_in(room, identity, None, || {
            self.answer_refused(room, refusal, identity)
        })
        .await
    }

    /// `otherwise()`, unless the cookie is of a visitor the store has waiting or on the
    /// site: then their status (a 303 to `return_to` when set). Asked only where the
    /// answer does not reach the store's spend, which answers such a visitor itself.
    async fn unless_in(
        &self,
        room: &Room,
        identity: &Identity,
        return_to: Option<&str>,
        otherwise: impl FnOnce() -> Response<Body>,
    ) -> Response<Body> {
        match (self.already_in(room, identity).await, return_to) {
            (Some(response), Some(to)) => see_other(response, to),
            (Some(response), None) => response,
            (None, _) => otherwise(),
        }
    }

    /// `GET /__anteroom/challenge/wait?c=<challenge>&r=<return path>`: the time lock.
    pub(super) async fn challenge_wait<B>(
        &self,
        room: Option<&'static Room>,
        req: &Request<B>,
        identity: &Identity,
    ) -> Response<Body> {
        let Some(room) = room else {
            return self.error(Kind::UnknownSite, identity);
        };
        let query = req.uri().query().unwrap_or("");
        let return_to = form::field(query, "r").unwrap_or_else(|| "/".to_owned());
        let return_to = same_site(&return_to).to_owned();
        if self.shadowed(room, identity) {
            // Waiting out the lock leads the shadow line back to its page too.
            return self
                .unless_in(room, identity, Some(&return_to), || {
                    self.shadow_page(room, identity)
                })
                .await;
        }
        let Some(text) = form::field(query, "c") else {
            return self
                .unless_in(room, identity, Some(&return_to), || {
                    self.answer_refused(room, Refusal::Unreadable, identity)
                })
                .await;
        };
        // Owned, not a guard: the settings are used again after the store call below.
        let live = arc_swap::Guard::into_inner(room.live());
        let config = &live.config;
        // The wait the page promised: the challenge's bits say how many strikes it was
        // issued for, and the wait doubles with them as the work does.
        let strikes_at_issue = |bits: u8| {
            u32::from(bits.saturating_sub(challenge::bits_for(config.challenge.difficulty, 0)))
        };
        let bits = text
            .split('.')
            .nth(3)
            .and_then(|b| b.parse::<u8>().ok())
            .unwrap_or(challenge::MAX_BITS);
        let wait = config.challenge.no_js_wait_for(strikes_at_issue(bits));
        match self
            .challenge_key
            .verify_waited(&text, wait, &self.expected(room, identity))
        {
            Ok(Ok(verified)) => {
                self.spend_and_join(room, &verified, None, identity, Some(&return_to))
                    .await
            }
            Ok(Err(left)) => {
                // Too early: the same challenge again, refreshing when the lock opens.
                self.unless_in(room, identity, Some(&return_to), || {
                    let view = ChallengeView {
                        challenge: &text,
                        bits,
                        return_to: &return_to,
                        no_js_secs: left.as_secs_f64().ceil() as u64,
                        expires_in_secs: challenge::TTL.as_secs(),
                    };
                    let kind = Kind::Challenge {
                        queue_status_code: config.queue_status_code,
                    };
                    self.pages.challenge(
                        &view,
                        &room_text(&room.live()),
                        kind.status(),
                        false,
                        identity.lang,
                    )
                })
                .await
            }
            Err(e) => {
                self.unless_in(room, identity, Some(&return_to), || {
                    self.answer_refused(room, Refusal::Check(e), identity)
                })
                .await
            }
        }
    }

    /// What a challenge is checked against: this room, this client, the store's time.
    fn expected<'a>(&self, room: &'a Room, identity: &Identity) -> Expected<'a> {
        Expected {
            room: &room.name,
            client: identity.client.to_bytes(),
            now_ms: self.admission.now_ms(),
            ttl: challenge::TTL,
        }
    }

    /// The status of a visitor the store already has waiting or on the site, as their
    /// status JSON (with their cookie kept current); `None` for a newcomer.
    async fn already_in(&self, room: &Room, identity: &Identity) -> Option<Response<Body>> {
        let (visitor, state) = self.visitor_state(room, identity).await?;
        match state? {
            VisitorState::Unknown => None,
            VisitorState::Admitted => Some(self.joined(room, visitor, None)),
            VisitorState::Waiting(place) => {
                let receipt = self.receipt(room, &place, visitor).await;
                let view = self.waiting_view(room, place, visitor, receipt);
                let mut response = self.render_waiting(room, view, &wanting_json(identity, true));
                *response.status_mut() = StatusCode::OK;
                Some(self.with_cookie(room, visitor, response))
            }
        }
    }

    /// Lets the request's visitor (the cookie's, else a new one) join by spending
    /// `verified`'s id, in one store call: a visitor the store already has spends nothing
    /// and gets their status; a replay is refused. `return_to` set answers the time lock
    /// (a 303 there), unset the POST (the status JSON).
    async fn spend_and_join(
        &self,
        room: &Room,
        verified: &Verified<'_>,
        solve_ms: Option<u64>,
        identity: &Identity,
        return_to: Option<&str>,
    ) -> Response<Body> {
        let name = &room.name;
        let visitor = identity.visitor.unwrap_or_else(VisitorId::random);
        let challenge = ChallengeSpend {
            id: verified.id(),
            expires_at_ms: verified.expires_at_ms(),
        };
        let decided = self
            .admission
            .decide_spending(name, visitor, identity.client, challenge)
            .await;
        let decision = match decided {
            Ok(decision) => decision,
            Err(Replayed) => return self.answer_refused(room, Refusal::Replayed, identity),
        };
        if matches!(decision, Decision::Admitted { .. } | Decision::Waiting(_)) {
            self.door_series(room).solved(solve_ms);
        }
        // The POST's identity wants JSON already; only the time lock's may need a copy.
        let json = &*wanting_json(identity, return_to.is_none() || identity.wants_json);
        match decision {
            Decision::Admitted { .. } => {
                if let Some(i) = identity.room {
                    self.record_admitted(identity.client_ip, i, visitor);
                }
                self.joined(room, visitor, return_to)
            }
            Decision::Waiting(place) => {
                let receipt = self.receipt(room, &place, visitor).await;
                let view = self.waiting_view(room, place, visitor, receipt);
                let mut response = self.render_waiting(room, view, json);
                *response.status_mut() = StatusCode::OK;
                let response = self.with_cookie(room, visitor, response);
                match return_to {
                    Some(to) => see_other(response, to),
                    None => response,
                }
            }
            Decision::Full => self.full(room, json),
            Decision::Refused {
                retry_after,
                reason,
            } => {
                // The join limit is a strike here as on the site's own path.
                if reason.is_some_and(crate::queue::RefusedReason::is_strike) {
                    self.strike(identity.client_ip, crate::abuse::StrikeReason::JoinLimit);
                }
                self.refused(room, retry_after, json)
            }
            Decision::NotOpen => self.not_open(room, json),
            Decision::Closed => self.closed(room, json),
            Decision::SoldOut => self.sold_out(room, json),
            // The store did not answer: held like any newcomer, the challenge unspent (never
            // proxied: `decide_spending` does not fail open). `Newcomer` never comes, for
            // the spend is asked with `Join::Back`.
            Decision::Stalled { .. } | Decision::Newcomer => self.stalled(room, json),
        }
    }

    /// A visitor on the site (or let through): `{"status":"admitted"}` with the cookie,
    /// or a 303 to `return_to`.
    fn joined(&self, room: &Room, visitor: VisitorId, return_to: Option<&str>) -> Response<Body> {
        let body = serde_json::json!({
            "status": "admitted",
            "room": room.name,
        });
        let mut response = Response::new(crate::http::body::full(body.to_string()));
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        let response = self.with_cookie(room, visitor, response);
        match return_to {
            Some(to) => see_other(response, to),
            None => response,
        }
    }

    /// `response` with `visitor`'s cookie for `room`, issued now.
    fn with_cookie(
        &self,
        room: &Room,
        visitor: VisitorId,
        mut response: Response<Body>,
    ) -> Response<Body> {
        let value = self.cookies.issue(visitor, &room.name, SystemTime::now());
        response.headers_mut().append(
            header::SET_COOKIE,
            token::set_cookie(&value, self.secure_cookies),
        );
        response
    }

    /// A refused answer: JSON with the reason and a fresh challenge, or (the time lock)
    /// the refusal page in the visitor's language. Counted by reason.
    fn answer_refused(&self, room: &Room, refusal: Refusal, identity: &Identity) -> Response<Body> {
        let name = &room.name;
        let reason = refusal.reason();
        self.metrics.challenges.failed(name, reason);
        if self.origin_errors.allow() {
            tracing::info!(room = %name, client = %identity.client_ip, reason, "challenge answer refused");
        }
        let kind = refusal.kind();
        if !identity.wants_json {
            return self.error(kind, identity);
        }
        let strikes = u32::try_from(self.abuse.strikes(identity.client_ip)).unwrap_or(u32::MAX);
        let bits = challenge::bits_for(room.live().config.challenge.difficulty, strikes);
        let issued = self.challenge_key.issue(
            name,
            &identity.client.to_bytes(),
            bits,
            self.admission.now_ms(),
            challenge::random_nonce(),
        );
        self.door_series(room).issued();
        let fresh = ChallengeView {
            challenge: &issued.text,
            bits,
            return_to: "/",
            no_js_secs: room
                .live()
                .config
                .challenge
                .no_js_wait_for(strikes)
                .as_secs(),
            expires_in_secs: challenge::TTL.as_secs(),
        };
        let mut response = self
            .pages
            .challenge_refused_json(reason, &fresh, kind.status());
        response.headers_mut().insert(
            crate::http::pages::STATUS_HEADER,
            HeaderValue::from_static(VisitorStatus::Challenge.as_str()),
        );
        response
    }
}

/// `identity`, wanting JSON as `wants_json` says: itself when it already does (no copy).
fn wanting_json(identity: &Identity, wants_json: bool) -> Cow<'_, Identity> {
    if identity.wants_json == wants_json {
        Cow::Borrowed(identity)
    } else {
        Cow::Owned(Identity {
            wants_json,
            ..identity.clone()
        })
    }
}

/// `response` turned into a 303 to `to` (its headers, the cookie among them, kept).
fn see_other(mut response: Response<Body>, to: &str) -> Response<Body> {
    *response.status_mut() = StatusCode::SEE_OTHER;
    if let Ok(location) = HeaderValue::from_str(to) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(body: &str) -> Option<(String, u64, Option<u64>)> {
        Answer::parse(None, body.as_bytes())
            .map(|a| (a.challenge.into_owned(), a.solution, a.solve_ms))
    }

    #[test]
    fn a_json_answer_reads_its_three_fields() {
        let c = "c1.main.1.17.n.t.m";
        let some = |ms| Some((c.to_owned(), 42, ms));
        assert_eq!(
            json(&format!(r#"{{"challenge":"{c}","solution":42}}"#)),
            some(None)
        );
        let with = |ms: &str| {
            json(&format!(
                r#"{{"challenge":"{c}","solution":42,"solve_ms":{ms}}}"#
            ))
        };
        assert_eq!(with("1500"), some(Some(1500)));
        assert_eq!(with("1500.7"), some(Some(1500)));
        assert_eq!(with("-3"), some(Some(0)));
        assert_eq!(with("-3.5"), some(Some(0)));
        assert_eq!(with(r#""soon""#), some(None));
        assert_eq!(with("[1,{\"a\":2}]"), some(None));
        // Other keys are skipped; a repeated key's last value counts.
        let body =
            format!(r#"{{"x":{{"y":[1]}},"challenge":"old","challenge":"{c}","solution":42}}"#);
        assert_eq!(json(&body), some(None));
        // An escaped challenge is unescaped.
        assert_eq!(
            json(r#"{"challenge":"c1.\u006dain","solution":1}"#),
            Some(("c1.main".to_owned(), 1, None))
        );
    }

    #[test]
    fn a_json_body_that_is_not_an_answer_is_refused() {
        for body in [
            r#"{"solution":1}"#,
            r#"{"challenge":"c"}"#,
            r#"{"challenge":7,"solution":1}"#,
            r#"{"challenge":"c","solution":-1}"#,
            r#"{"challenge":"c","solution":1.0}"#,
            r#"{"challenge":"c","solution":"1"}"#,
            r#"["c",1]"#,
            r#""c""#,
            r#"{"challenge":"c","solution":1} x"#,
            "",
        ] {
            assert!(json(body).is_none(), "{body}");
        }
    }

    #[test]
    fn a_form_answer_reads_its_fields() {
        let form = HeaderValue::from_static("Application/X-WWW-Form-Urlencoded; charset=utf-8");
        let a = Answer::parse(Some(&form), b"challenge=c1.main&solution=+7&solve_ms=20")
            .expect("a form answer");
        assert_eq!(
            (&*a.challenge, a.solution, a.solve_ms),
            ("c1.main", 7, Some(20))
        );
    }
}
