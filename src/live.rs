//! The waiting page's live streams and their one ticker (`GET /__anteroom/events`, SSE).
//!
//! One ticker per replica: every [`TICK`] it asks the store, in one batched call per room,
//! for the state of every visitor with an open stream, and fans the answers out. A held
//! stream is a small struct and a channel, not a task polling on its own, so a visitor with
//! ten tabs or an impatient reconnect loop still costs at most one store read per tick.
//! The tick is also the waiting visitor's heartbeat: a closed tab stops it, and the
//! visitor is abandoned after `abandon_after`.
//!
//! Streams are budgeted (SPEC §10, §13) by [`StreamBudget`]: at most `server.max_streams`
//! open at once (below `max_connections`, so open waiting pages never take the connections
//! admitted visitors need), at most `server.max_streams_per_client` streams plus WebSocket
//! tunnels per [`ClientKey`], and one stream per visitor (a new one ends the old). A page
//! refused a stream keeps its jittered refresh.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

use std::sync::Arc;

use crate::admission::Admission;
use crate::http::body::{Body, BoxError, Watch, Watched};
use crate::identity::ClientKey;
use crate::queue::{Phase, StoreError, VisitorId, VisitorState};

/// At most one store read per waiting visitor this often (SPEC §5).
pub const TICK: Duration = Duration::from_secs(2);

/// Events queued per stream before a slow client starts missing (stale) updates.
const STREAM_BUFFER: usize = 4;

/// One event on the wire.
#[derive(Clone, Debug, PartialEq)]
pub enum LiveEvent {
    Position(serde_json::Value),
    Admitted,
    Stalled,
}

impl LiveEvent {
    fn encode(&self) -> Bytes {
        let (name, data) = match self {
            LiveEvent::Position(v) => ("position", v.to_string()),
            LiveEvent::Admitted => ("admitted", "{}".to_owned()),
            LiveEvent::Stalled => ("stalled", "{}".to_owned()),
        };
        Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
    }
}

struct Listener {
    /// The client address that opened it (a ban closes it).
    client_ip: IpAddr,
    room: String,
    visitor: VisitorId,
    tx: mpsc::Sender<LiveEvent>,
}

/// Why a stream or tunnel was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamRefused {
    /// `server.max_streams` waiting-page streams are open on this replica.
    Full,
    /// This client already holds `server.max_streams_per_client` streams and tunnels.
    ClientShare,
}

/// Open waiting-page streams (in total and per client) and upgraded tunnels (per client).
#[derive(Debug)]
pub struct StreamBudget {
    max_streams: usize,
    per_client: usize,
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    streams: usize,
    clients: HashMap<ClientKey, usize>,
}

impl Default for StreamBudget {
    fn default() -> Self {
        StreamBudget::new(5_000, 64)
    }
}

impl StreamBudget {
    pub fn new(max_streams: usize, per_client: usize) -> Self {
        StreamBudget {
            max_streams,
            per_client,
            counts: Mutex::default(),
        }
    }

    /// A waiting-page stream for `client`: counts against both limits.
    pub fn stream(self: &Arc<Self>, client: ClientKey) -> Result<StreamTicket, StreamRefused> {
        self.take(client, true)
    }

    /// An upgraded tunnel for `client`: counts against its share only (the tunnel's
    /// connection already counts against `max_connections`).
    pub fn tunnel(self: &Arc<Self>, client: ClientKey) -> Result<StreamTicket, StreamRefused> {
        self.take(client, false)
    }

    /// Open waiting-page streams.
    pub fn streams(&self) -> usize {
        self.lock().streams
    }

    fn take(
        self: &Arc<Self>,
        client: ClientKey,
        stream: bool,
    ) -> Result<StreamTicket, StreamRefused> {
        let mut counts = self.lock();
        if stream && counts.streams >= self.max_streams {
            return Err(StreamRefused::Full);
        }
        let held = counts.clients.get(&client).copied().unwrap_or(0);
        if held >= self.per_client {
            return Err(StreamRefused::ClientShare);
        }
        counts.clients.insert(client, held + 1);
        if stream {
            counts.streams += 1;
        }
        Ok(StreamTicket {
            budget: self.clone(),
            client,
            stream,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One stream or tunnel counted in a [`StreamBudget`]; uncounted on drop.
#[derive(Debug)]
pub struct StreamTicket {
    budget: Arc<StreamBudget>,
    client: ClientKey,
    stream: bool,
}

impl Drop for StreamTicket {
    fn drop(&mut self) {
        let mut counts = self.budget.lock();
        if self.stream {
            counts.streams = counts.streams.saturating_sub(1);
        }
        if let Some(n) = counts.clients.get_mut(&self.client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.clients.remove(&self.client);
            }
        }
    }
}

/// Held by the stream's body: the ticket is returned when the body is dropped (the
/// visitor went away, or the stream ended).
impl Watch for StreamTicket {
    fn polled(&mut self, _: bool, _: &mut std::task::Context<'_>) -> Option<BoxError> {
        None
    }
}

/// Every open stream of this replica.
#[derive(Default)]
pub struct LiveHub {
    listeners: Mutex<HashMap<u64, Listener>>,
    next_id: AtomicU64,
    /// Closed at shutdown: every stream ends and the page reloads on its jittered timer.
    closing: CancellationToken,
    /// Streams and tunnels open, in total and per client.
    pub budget: Arc<StreamBudget>,
}

impl LiveHub {
    /// A hub whose streams are limited by `budget`.
    pub fn new(budget: StreamBudget) -> Self {
        LiveHub {
            budget: Arc::new(budget),
            ..LiveHub::default()
        }
    }

    /// Opens a stream for `visitor` in `room` from `client_ip`, held by `ticket` (from
    /// [`StreamBudget`]). The visitor's previous stream, if any, is ended: one live stream
    /// per visitor. The first update arrives on the next tick.
    pub fn subscribe(
        &self,
        room: &str,
        visitor: VisitorId,
        client_ip: IpAddr,
        ticket: StreamTicket,
    ) -> Response<Body> {
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut listeners = self.lock();
            // Dropping the old sender ends the old stream's body (and returns its ticket).
            listeners.retain(|_, l| !(l.visitor == visitor && l.room == room));
            listeners.insert(
                id,
                Listener {
                    client_ip,
                    room: room.to_owned(),
                    visitor,
                    tx,
                },
            );
        }
        let closing = self.closing.clone();
        // `retry:` asks a reconnecting EventSource to wait, and a comment opens the stream
        // at once so proxies and browsers see it is alive.
        let preamble = futures_util::stream::once(async {
            Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from_static(
                b"retry: 5000\n: anteroom\n\n",
            )))
        });
        let events = ReceiverStream::new(rx)
            .map(|event| Ok(Frame::data(event.encode())))
            .take_until(closing.cancelled_owned());
        let body = StreamBody::new(preamble.chain(events))
            .map_err(|never: std::convert::Infallible| -> BoxError { match never {} })
            .boxed();
        // The ticket lives as long as the body: dropped when the visitor goes away.
        let body = Watched::new(body, ticket).boxed();
        let mut response = Response::new(body);
        *response.status_mut() = StatusCode::OK;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
        response
    }

    pub fn open_streams(&self) -> usize {
        self.lock().len()
    }

    /// Ends the streams of clients for which `banned` is true (SPEC §10): dropping the
    /// sender ends the response body, so their heartbeats stop and a waiting visitor is
    /// abandoned after `abandon_after`. Returns how many were closed.
    pub fn close_where(&self, banned: impl Fn(IpAddr) -> bool) -> usize {
        let mut listeners = self.lock();
        let before = listeners.len();
        listeners.retain(|_, l| !banned(l.client_ip));
        before - listeners.len()
    }

    /// Ends every stream (graceful shutdown).
    pub fn close_all(&self) {
        self.closing.cancel();
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Listener>> {
        self.listeners.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One tick: a batched read per room, fanned out to every stream.
    pub async fn tick(&self, admission: &Admission) {
        let mut by_room: HashMap<String, HashSet<VisitorId>> = HashMap::new();
        {
            let mut listeners = self.lock();
            listeners.retain(|_, l| !l.tx.is_closed());
            for l in listeners.values() {
                by_room.entry(l.room.clone()).or_default().insert(l.visitor);
            }
        }
        for (room, visitors) in by_room {
            let visitors: Vec<VisitorId> = visitors.into_iter().collect();
            let states = admission.heartbeat(&room, &visitors).await;
            let events: HashMap<VisitorId, Option<LiveEvent>> = match states {
                Ok(states) => visitors
                    .iter()
                    .zip(states)
                    .map(|(&v, state)| (v, self.event_for(admission, &room, v, state)))
                    .collect(),
                Err(StoreError::Unavailable(_)) => visitors
                    .iter()
                    .map(|&v| (v, Some(LiveEvent::Stalled)))
                    .collect(),
                Err(e) => {
                    tracing::warn!(room, error = %e, "live stream tick failed");
                    continue;
                }
            };
            let mut listeners = self.lock();
            listeners.retain(|_, l| {
                if l.room != room {
                    return true;
                }
                match events.get(&l.visitor) {
                    // Gone from the line (abandoned or flushed): end the stream so the
                    // page reloads and rejoins at the back.
                    Some(None) => false,
                    Some(Some(event)) => match l.tx.try_send(event.clone()) {
                        Ok(()) => *event != LiveEvent::Admitted,
                        Err(mpsc::error::TrySendError::Full(_)) => true,
                        Err(mpsc::error::TrySendError::Closed(_)) => false,
                    },
                    // Subscribed after this tick's read: served next tick.
                    None => true,
                }
            });
        }
    }

    fn event_for(
        &self,
        admission: &Admission,
        room: &str,
        visitor: VisitorId,
        state: VisitorState,
    ) -> Option<LiveEvent> {
        match state {
            VisitorState::Admitted => Some(LiveEvent::Admitted),
            VisitorState::Unknown => None,
            // Closed (or not open after a schedule change): end the stream; the page
            // reloads and shows why.
            VisitorState::Waiting(place)
                if matches!(place.phase, Phase::Closed | Phase::BeforeOpen) =>
            {
                None
            }
            VisitorState::Waiting(place) => {
                // A stream can be the first to show a range (the page came from another
                // replica, or predates the doors): it counts as shown (SPEC §14).
                let eta = admission.show_eta(room, visitor, &place);
                Some(LiveEvent::Position(serde_json::json!({
                    // null during a lottery draw: nobody has a place before the doors.
                    "position": place.position,
                    "waiting": place.waiting,
                    "eta_secs": eta,
                    "phase": place.phase,
                    "paused": place.paused,
                })))
            }
        }
    }

    /// Ticks every [`TICK`] until `stop`.
    pub async fn run(&self, admission: &Admission, stop: CancellationToken) {
        let mut ticks = tokio::time::interval(TICK);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = ticks.tick() => self.tick(admission).await,
            }
        }
    }
}
