//! Answers to anteroom's own reserved routes that are not the admin: readiness, the
//! admission key document, the waiting page's live stream, and the refusal of a stream or
//! tunnel over its budget.

use http::{Response, StatusCode};

use crate::http::body::Body;
use crate::http::pages;

use super::identify::Identity;
use super::{App, GateError, Kind};

/// `Retry-After` on a refused stream or tunnel: about one waiting-page refresh.
const STREAM_RETRY_AFTER_SECS: u64 = 10;

impl App {
    /// Whether this replica should get traffic: not while draining; yes while the store
    /// answers; and yes while failing open on purpose, since every replica sees the same
    /// outage and a load balancer with no ready replica would refuse everyone instead.
    pub(super) async fn readyz(&self) -> Response<Body> {
        if self.is_draining() {
            return pages::plain(StatusCode::SERVICE_UNAVAILABLE, "draining\n");
        }
        match self.admission.ping().await {
            Ok(()) => pages::plain(StatusCode::OK, "ready\n"),
            Err(_) if self.admission.health().failing_open() => pages::plain(
                StatusCode::OK,
                "ready (failing open: the queue store is down)\n",
            ),
            Err(_) => pages::plain(StatusCode::SERVICE_UNAVAILABLE, "queue store unavailable\n"),
        }
    }

    /// `GET /__anteroom/admission-key`: the public key an origin verifies
    /// `X-Anteroom-Admission` with; 404 when no `admission_key` is set.
    pub(super) fn admission_key(&self, identity: &Identity) -> Response<Body> {
        match &self.admission_key_document {
            Some(doc) => Response::builder()
                .status(StatusCode::OK)
                .header(http::header::CONTENT_TYPE, "application/json")
                .header(http::header::CACHE_CONTROL, "public, max-age=300")
                .body(crate::http::body::full(doc.clone()))
                .unwrap_or_else(|_| self.error(Kind::NotFound, identity)),
            None => self.error(Kind::NotFound, identity),
        }
    }

    pub(super) fn events(&self, identity: &Identity) -> Response<Body> {
        match (identity.room, identity.visitor) {
            (Some(room), Some(visitor)) => match self.live.budget.stream(identity.client) {
                Ok(ticket) => self.live.subscribe(
                    &self.rooms.load().get(room).name,
                    visitor,
                    identity.client_ip,
                    ticket,
                ),
                Err(refused) => self.stream_refused(refused, identity),
            },
            _ => self.error(Kind::NotInLine, identity),
        }
    }

    /// A stream or tunnel over its budget: 503 (all streams taken) or 429 (this client's
    /// share), with `Retry-After`, and the connection closed so it frees its slot at once.
    pub(super) fn stream_refused(
        &self,
        refused: crate::live::StreamRefused,
        identity: &Identity,
    ) -> Response<Body> {
        let kind = match refused {
            crate::live::StreamRefused::Full => Kind::StreamsFull,
            crate::live::StreamRefused::ClientShare => Kind::TooManyStreams,
        };
        let mut response = self.error(
            GateError {
                retry_after: Some(STREAM_RETRY_AFTER_SECS),
                ..GateError::new(kind)
            },
            identity,
        );
        response.headers_mut().insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
        response
    }
}
