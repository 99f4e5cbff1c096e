//! The auditable lottery on the request path (docs/fairness.md): the public
//! `GET /__anteroom/rooms/{room}/draw` document ([`crate::fairness::draw::DrawDocument`])
//! and each entrant's receipt on their waiting page.
//!
//! Costs: before the doors the salt (hence the commitment) is cached after the first
//! read and each request asks the store one small question (how many have entered);
//! from the doors on the document never changes, so it is read once (the list in bounded
//! steps with Redis), serialised once and served from memory, and receipts find their
//! place in the cached list (a binary search), with no store call.

use std::sync::Mutex;

use bytes::Bytes;
use http::{Response, StatusCode, header};

use super::identify::Identity;
use super::{App, Kind, Room};
use crate::fairness::draw::{DrawDocument, DrawHash, Receipt};
use crate::http::body::{Body, full};
use crate::queue::{Phase, Place, StoreError, StoreResult, VisitorId};

/// `Cache-Control` of the document before the doors: the count of entrants moves.
const COLLECTING_CACHE: &str = "no-cache";
/// After the doors the document is final (a later drop in the room needs a new schedule,
/// hence a restart, and a short public cache stays right then too).
const DRAWN_CACHE: &str = "public, max-age=300";

/// A lottery room's salt once read, and the final document once the doors opened (kept
/// with the room, see [`Room`]).
#[derive(Default)]
pub(super) struct RoomDraw {
    /// The salt never changes once the room exists.
    salt: Mutex<Option<Vec<u8>>>,
    drawn: tokio::sync::OnceCell<Drawn>,
}

/// The document after the doors, ready to serve, and the sorted hashes for receipts.
struct Drawn {
    salt: Vec<u8>,
    hashes: Vec<DrawHash>,
    json: Bytes,
}

/// Whether `room` holds a lottery that draws: one without `admits_at` never does, so
/// there is nothing to publish (and its salt is not revealed for a draw that might be
/// scheduled later).
fn is_drawn(room: &Room) -> bool {
    let live = room.live();
    live.config.lottery && live.config.schedule.admits_at.is_some()
}

fn json_response(status: StatusCode, cache: &'static str, body: Bytes) -> Response<Body> {
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CACHE_CONTROL, http::HeaderValue::from_static(cache));
    response
}

impl App {
    fn lottery_room(&self, name: &str) -> Option<&'static Room> {
        let room = self.rooms.load().room(name)?;
        is_drawn(room).then_some(room)
    }

    /// `GET /__anteroom/rooms/{room}/draw`: before the doors the commitment and the count
    /// of entrants; after them also the salt and every entrant's hash, sorted. 404 for a
    /// room that is unknown or has no scheduled lottery (`lottery` and `admits_at`); 503
    /// while the store does not answer.
    pub(super) async fn draw_document(&self, name: &str, identity: &Identity) -> Response<Body> {
        let Some(room) = self.lottery_room(name) else {
            return self.error(Kind::NotFound, identity);
        };
        let cache = &room.draw;
        if let Some(drawn) = cache.drawn.get() {
            return json_response(StatusCode::OK, DRAWN_CACHE, drawn.json.clone());
        }
        let result = match self.admission.draw(name, false).await {
            Ok(record) if record.doors_open() => self
                .drawn(room, cache)
                .await
                .map(|d| json_response(StatusCode::OK, DRAWN_CACHE, d.json.clone())),
            Ok(record) => {
                let salt = {
                    let mut cached = cache.salt.lock().unwrap_or_else(|p| p.into_inner());
                    cached.get_or_insert(record.salt).clone()
                };
                let doc = DrawDocument::before_doors(
                    name,
                    &salt,
                    record.entrants,
                    room.live().config.schedule.admits_at,
                );
                Ok(json_response(
                    StatusCode::OK,
                    COLLECTING_CACHE,
                    serde_json::to_vec(&doc).unwrap_or_default().into(),
                ))
            }
            Err(e) => Err(e),
        };
        result.unwrap_or_else(|e| {
            tracing::warn!(room = %name, error = %e, "cannot read the lottery draw");
            let mut response = json_response(
                Kind::DrawUnavailable.status(),
                "no-store",
                Bytes::from_static(br#"{"error":"the queue store is unavailable; try again"}"#),
            );
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, http::HeaderValue::from_static("5"));
            response
        })
    }

    /// The final document, read from the store the first time it is needed after the
    /// doors (one reader at a time; the others wait for it).
    async fn drawn<'a>(&self, room: &Room, cache: &'a RoomDraw) -> StoreResult<&'a Drawn> {
        let name = &room.name;
        cache
            .drawn
            .get_or_try_init(|| async {
                let record = self.admission.draw(name, true).await?;
                let open = record.doors_open();
                let Some(hashes) = record.hashes.filter(|_| open) else {
                    return Err(StoreError::Unavailable(
                        "the doors of the draw are not open yet".to_owned(),
                    ));
                };
                let doc = DrawDocument::after_doors(
                    name,
                    &record.salt,
                    hashes,
                    room.live().config.schedule.admits_at,
                );
                let json = serde_json::to_vec(&doc).unwrap_or_default().into();
                Ok(Drawn {
                    salt: record.salt,
                    hashes: doc.hashes.unwrap_or_default(),
                    json,
                })
            })
            .await
    }

    /// The salt of a lottery room, cached after the first read.
    async fn draw_salt(&self, room: &Room, cache: &RoomDraw) -> Option<Vec<u8>> {
        if let Some(salt) = cache.salt.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            return Some(salt);
        }
        let record = self.admission.draw(&room.name, false).await.ok()?;
        let mut cached = cache.salt.lock().unwrap_or_else(|p| p.into_inner());
        Some(cached.get_or_insert(record.salt).clone())
    }

    /// A waiting visitor's draw receipt: during the draw their hash; after the
    /// doors also their place in the published list, for entrants of the draw only.
    /// `None` for anyone else, in rooms without a scheduled lottery, or when the store
    /// cannot say (the page is shown without it).
    pub(super) async fn receipt(
        &self,
        room: &Room,
        place: &Place,
        visitor: VisitorId,
    ) -> Option<Receipt> {
        if !is_drawn(room) {
            return None;
        }
        let cache = &room.draw;
        match place.phase {
            Phase::Draw if place.position.is_none() => {
                let salt = self.draw_salt(room, cache).await?;
                Some(Receipt::new(&salt, visitor, None))
            }
            Phase::Queueing | Phase::Closed => {
                let drawn = self.drawn(room, cache).await.ok()?;
                let receipt = Receipt::new(&drawn.salt, visitor, Some(&drawn.hashes));
                receipt.place.map(|_| receipt)
            }
            Phase::Draw | Phase::BeforeOpen => None,
        }
    }
}
