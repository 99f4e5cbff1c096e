//! The waiting page's live streams and their one ticker (`GET /__anteroom/events`, SSE).
//!
//! One ticker per replica: every [`TICK`] it asks the store, in one batched call per room,
//! for the state of every visitor with an open stream, and fans the answers out. A held
//! stream is a small struct and a channel, not a task polling on its own, so a visitor with
//! ten tabs or an impatient reconnect loop still costs at most one store read per tick.
//! The tick is also the waiting visitor's heartbeat: a closed tab stops it, and the
//! visitor is abandoned after `abandon_after`. Admissions are not left to the tick: each
//! admission pass of this replica tells its visitors' streams at once, and a stream opened
//! within a tick after (the page was still loading) as it opens. A visitor whose stream is
//! held by another replica hears at that replica's next pass, which reads what the other
//! replicas' passes admitted since its last (with Redis, `admit_pass.lua`), so the wait a
//! visitor sees is the one the ETA ledger counts.
//!
//! Streams are budgeted by [`StreamBudget`]: at most `server.max_streams`
//! open at once (below `max_connections`, so open waiting pages never take the connections
//! admitted visitors need), at most `server.max_streams_per_client` streams plus WebSocket
//! tunnels per [`ClientKey`], and one stream per visitor (a new one ends the old). A page
//! refused a stream keeps its jittered refresh.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::admission::{Admission, PassAdmitted};
use crate::http::body::{Body, BoxError};
use crate::identity::ClientKey;
use crate::queue::{Phase, StoreError, VisitorId, VisitorState};
use crate::server::LongLived;

/// At most one store read per waiting visitor this often.
pub const TICK: Duration = Duration::from_secs(2);

/// Admitted visitors without a stream here remembered at once (see `LiveHub::recent`):
/// about 8 MB, and more than two seconds of admissions at the largest rates.
const RECENT_CAP: usize = 100_000;

/// `retry:` asks a reconnecting EventSource to wait, and a comment opens the stream at once
/// so proxies and browsers see it is alive.
const PREAMBLE: &[u8] = b"retry: 5000\n: anteroom\n\n";

/// One event on the wire.
#[derive(Clone, Debug, PartialEq)]
pub enum LiveEvent {
    /// The visitor's place changed: the waiting view as JSON (`event: position`).
    Position(serde_json::Value),
    /// The visitor was admitted: the page goes on to the site.
    Admitted,
    /// The store cannot be reached: the page shows the stalled notice and keeps its place.
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

/// One open stream, as the ticker sees it (keyed by room and visitor: one each).
struct Listener {
    /// Which stream of this visitor it is: a newer one replaces it.
    id: u64,
    /// The client address that opened it (a ban closes it).
    client_ip: IpAddr,
    /// The latest event, encoded: a client that reads slowly skips to the newest rather
    /// than queueing stale positions. Dropping it ends the stream.
    events: watch::Sender<Bytes>,
    /// Held here rather than by the stream, so ending a stream (a newer one for the same
    /// visitor, a ban) gives its share back at once, on whichever thread ends it.
    _ticket: StreamTicket,
}

type ListenerKey = (Arc<str>, VisitorId);
type Listeners = Arc<Mutex<HashMap<ListenerKey, Listener>>>;

fn lock(listeners: &Listeners) -> std::sync::MutexGuard<'_, HashMap<ListenerKey, Listener>> {
    listeners.lock().unwrap_or_else(|p| p.into_inner())
}

type Recent = Mutex<HashMap<ListenerKey, tokio::time::Instant>>;

fn recent_lock(
    recent: &Recent,
) -> std::sync::MutexGuard<'_, HashMap<ListenerKey, tokio::time::Instant>> {
    recent.lock().unwrap_or_else(|p| p.into_inner())
}

/// The stream's end of a [`Listener`]: the next event to send, until the hub drops the
/// listener or closes.
struct Subscription {
    events: watch::Receiver<Bytes>,
    closing: std::pin::Pin<Box<WaitForCancellationFutureOwned>>,
    /// Removes the listener (and its ticket) when the stream ends, however it ends.
    _registered: Registered,
}

impl Subscription {
    async fn next(&mut self) -> Option<Bytes> {
        tokio::select! {
            biased;
            () = &mut self.closing => None,
            changed = self.events.changed() => match changed {
                Ok(()) => Some(self.events.borrow_and_update().clone()),
                Err(_) => None,
            },
        }
    }
}

struct Registered {
    listeners: Listeners,
    key: ListenerKey,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut listeners = lock(&self.listeners);
        // Unless a newer stream of the same visitor has taken the place.
        if listeners.get(&self.key).is_some_and(|l| l.id == self.id) {
            listeners.remove(&self.key);
        }
    }
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
    /// At most `max_streams` streams at once, `per_client` of them from one client.
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

/// Every open stream of this replica.
#[derive(Default)]
pub struct LiveHub {
    listeners: Listeners,
    /// Visitors admitted (by this replica's pass, or by another's it has heard of) while
    /// they had no stream open here (their page was loading, or reconnecting, or is held by
    /// another replica), and when: a stream they open within a [`TICK`] of it is told at
    /// once instead of at the next tick. Older ones go at each tick; at most
    /// [`RECENT_CAP`] are kept (past it, a stream hears at the tick, as before).
    recent: Recent,
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
    /// per visitor. The first update arrives on the next tick, unless the visitor was
    /// admitted within the last tick (by this replica's pass, or by another's this
    /// replica's pass has heard of): then `admitted` comes at once.
    ///
    /// The response is [`LongLived`]: on HTTP/1.1 the server writes it from a small task of
    /// its own rather than keeping a hyper connection for it.
    pub fn subscribe(
        &self,
        room: &str,
        visitor: VisitorId,
        client_ip: IpAddr,
        ticket: StreamTicket,
    ) -> Response<Body> {
        let (events, receiver) = watch::channel(Bytes::new());
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let key: ListenerKey = (room.into(), visitor);
        let listener = Listener {
            id,
            client_ip,
            events,
            _ticket: ticket,
        };
        // The listeners' lock first, as `admitted` takes them: a pass admitting the
        // visitor meanwhile either finds the listener or has put them in `recent`.
        let mut listeners = lock(&self.listeners);
        let admitted = recent_lock(&self.recent)
            .remove(&key)
            .is_some_and(|at| at.elapsed() < TICK);
        if admitted {
            drop(listeners);
            // Admitted just before the stream opened: told now, and the listener dropped
            // so the stream ends once it has the event.
            let _ = listener.events.send(LiveEvent::Admitted.encode());
        } else {
            // Replacing the visitor's old listener ends the old stream and returns its
            // ticket.
            listeners.insert(key.clone(), listener);
            drop(listeners);
        }
        let subscription = Subscription {
            events: receiver,
            closing: Box::pin(self.closing.clone().cancelled_owned()),
            _registered: Registered {
                listeners: self.listeners.clone(),
                key,
                id,
            },
        };
        let preamble = futures_util::stream::once(async {
            Ok::<_, BoxError>(Frame::data(Bytes::from_static(PREAMBLE)))
        });
        let events = futures_util::stream::unfold(subscription, |mut subscription| async move {
            let event = subscription.next().await?;
            Some((Ok::<_, BoxError>(Frame::data(event)), subscription))
        });
        let body = BodyExt::boxed(StreamBody::new(futures_util::StreamExt::chain(
            preamble, events,
        )));
        let mut response = Response::new(body);
        *response.status_mut() = StatusCode::OK;
        response.extensions_mut().insert(LongLived);
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
        response
    }

    /// Waiting-page streams open now on this hub.
    pub fn open_streams(&self) -> usize {
        lock(&self.listeners).len()
    }

    /// Ends the streams of clients for which `banned` is true: dropping the
    /// listener ends the stream, so their heartbeats stop and a waiting visitor is
    /// abandoned after `abandon_after`. Returns how many were closed.
    pub fn close_where(&self, banned: impl Fn(IpAddr) -> bool) -> usize {
        let mut listeners = lock(&self.listeners);
        let before = listeners.len();
        listeners.retain(|_, l| !banned(l.client_ip));
        before - listeners.len()
    }

    /// Ends the streams of `room`'s waiting visitors (a reload removed the room); returns
    /// how many.
    pub fn close_room(&self, room: &str) -> usize {
        let mut listeners = lock(&self.listeners);
        let before = listeners.len();
        listeners.retain(|(r, _), _| &**r != room);
        before - listeners.len()
    }

    /// Ends every stream (graceful shutdown).
    pub fn close_all(&self) {
        self.closing.cancel();
        lock(&self.listeners).clear();
    }

    /// One tick: a batched read per room, fanned out to every stream.
    pub async fn tick(&self, admission: &Admission) {
        // Admissions older than a tick are the tick's to tell from now on.
        recent_lock(&self.recent).retain(|_, at| at.elapsed() < TICK);
        let mut by_room: HashMap<Arc<str>, Vec<VisitorId>> = HashMap::new();
        // A stream that ended has already removed itself (its `Registered`).
        for (room, visitor) in lock(&self.listeners).keys() {
            by_room.entry(room.clone()).or_default().push(*visitor);
        }
        for (room, visitors) in by_room {
            let states = admission.heartbeat(&room, &visitors).await;
            // Each visitor's event, encoded once, and whether it is the last.
            let events: HashMap<VisitorId, Option<(Bytes, bool)>> = match states {
                Ok(states) => visitors
                    .iter()
                    .zip(states)
                    .map(|(&v, state)| {
                        let event = self.event_for(admission, &room, v, state);
                        (v, event.map(|e| (e.encode(), e == LiveEvent::Admitted)))
                    })
                    .collect(),
                Err(StoreError::Unavailable(_)) => {
                    let stalled = LiveEvent::Stalled.encode();
                    visitors
                        .iter()
                        .map(|&v| (v, Some((stalled.clone(), false))))
                        .collect()
                }
                Err(e) => {
                    tracing::warn!(room = &*room, error = %e, "live stream tick failed");
                    continue;
                }
            };
            let mut listeners = lock(&self.listeners);
            listeners.retain(|(listener_room, visitor), l| {
                if *listener_room != room {
                    return true;
                }
                match events.get(visitor) {
                    // Gone from the line (abandoned or flushed): end the stream so the
                    // page reloads and rejoins at the back.
                    Some(None) => false,
                    // Admitted is the last event: the stream sends it, then ends.
                    Some(Some((event, last))) => l.events.send(event.clone()).is_ok() && !last,
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
            // Sold out: end the stream; the page reloads and shows the sold-out page.
            VisitorState::Waiting(_) if admission.mode(room) == crate::queue::Mode::SoldOut => None,
            // Closed (or not open after a schedule change): end the stream; the page
            // reloads and shows why.
            VisitorState::Waiting(place)
                if matches!(place.phase, Phase::Closed | Phase::BeforeOpen) =>
            {
                None
            }
            VisitorState::Waiting(place) => {
                // A stream can be the first to show a range (the page came from another
                // replica, or predates the doors): it counts as shown.
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

    /// Tells the streams of `visitors`, just admitted to `room` (by this replica's pass, or
    /// by another's that this replica's pass has just heard of), at once, and ends them:
    /// waiting for the next tick would add up to [`TICK`] to every wait, after the ETA
    /// ledger had already counted it over. Returns how many were told.
    pub fn admitted(&self, room: &Arc<str>, visitors: &[VisitorId]) -> usize {
        let event = LiveEvent::Admitted.encode();
        let now = tokio::time::Instant::now();
        let mut listeners = lock(&self.listeners);
        // Pruned by the tick; a stream checks the age of what it finds.
        let mut recent = recent_lock(&self.recent);
        let mut told = 0;
        for &visitor in visitors {
            let key = (room.clone(), visitor);
            // Dropping the listener after the send ends the stream once it has the event.
            match listeners.remove(&key) {
                Some(l) => told += usize::from(l.events.send(event.clone()).is_ok()),
                None if recent.len() < RECENT_CAP => {
                    recent.insert(key, now);
                }
                None => {}
            }
        }
        told
    }

    /// Ticks every [`TICK`], and tells each pass's admissions as they happen, until `stop`.
    pub async fn run(&self, admission: &Admission, stop: CancellationToken) {
        let mut ticks = tokio::time::interval(TICK);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut passes = admission.passes();
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = ticks.tick() => self.tick(admission).await,
                pass = next_pass(&mut passes) => {
                    self.admitted(&pass.room, &pass.visitors);
                }
            }
        }
    }
}

/// The next pass's admissions. One missed because this hub fell behind is told at the next
/// tick instead; the channel cannot close while the hub runs on its `Admission`.
async fn next_pass(passes: &mut broadcast::Receiver<PassAdmitted>) -> PassAdmitted {
    loop {
        match passes.recv().await {
            Ok(pass) => return pass,
            Err(broadcast::error::RecvError::Lagged(_)) => continue,
            Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([192, 0, 2, last])
    }

    #[tokio::test]
    async fn a_newer_stream_or_a_ban_gives_the_share_back_at_once() {
        let hub = LiveHub::new(StreamBudget::new(10, 2));
        let visitor = VisitorId([7; 16]);
        let client = ClientKey::from(ip(1));
        let first = hub.subscribe("main", visitor, ip(1), hub.budget.stream(client).unwrap());
        let second = hub.subscribe("main", visitor, ip(1), hub.budget.stream(client).unwrap());
        // The first stream's share came back when the second replaced it, not when its
        // body next runs.
        assert_eq!(hub.budget.streams(), 1);
        assert_eq!(hub.open_streams(), 1);
        assert!(
            hub.budget.stream(client).is_ok(),
            "one share of two is free"
        );

        // The replaced stream ends after its preamble; the live one waits for events.
        let mut first = first.into_body();
        assert!(first.frame().await.unwrap().unwrap().is_data());
        assert!(first.frame().await.is_none());
        // Dropping the replaced body does not unregister its successor.
        drop(first);
        assert_eq!(hub.open_streams(), 1);

        assert_eq!(hub.close_where(|a| a == ip(1)), 1);
        assert_eq!(hub.budget.streams(), 0);
        let mut second = second.into_body();
        assert!(second.frame().await.unwrap().unwrap().is_data());
        assert!(
            second.frame().await.is_none(),
            "a banned client's stream ends"
        );
    }

    #[tokio::test]
    async fn admissions_without_a_stream_here_are_remembered_up_to_the_cap() {
        let hub = LiveHub::new(StreamBudget::new(10, 2));
        let room: Arc<str> = "main".into();
        let many: Vec<VisitorId> = (0..RECENT_CAP + 10)
            .map(|i| VisitorId((i as u128).to_le_bytes()))
            .collect();
        assert_eq!(hub.admitted(&room, &many), 0, "nobody has a stream");
        assert_eq!(recent_lock(&hub.recent).len(), RECENT_CAP);
    }

    #[tokio::test(start_paused = true)]
    async fn a_pass_tells_its_admissions_at_once_not_at_the_next_tick() {
        use crate::clock::Clock;
        use crate::events::EventSink;
        use crate::queue::conformance::{anyone, settings};
        use crate::queue::{MemoryStore, QueueStore, Resolution, RoomPolicy, SettingsPatch};

        let store = Arc::new(MemoryStore::in_memory(Clock::starting_at(0)));
        store
            .open_room(
                "main",
                &settings(1_000.0, 100),
                &RoomPolicy::default(),
                false,
            )
            .await
            .unwrap();
        // Paused, so the visitor waits in line instead of walking in.
        store
            .update_settings("main", &SettingsPatch::pause())
            .await
            .unwrap();
        let visitor = VisitorId([3; 16]);
        let joined = store.resolve("main", visitor, anyone()).await.unwrap();
        assert!(matches!(joined, Resolution::Waiting { .. }), "{joined:?}");
        let admission = Arc::new(Admission::new(store.clone(), None, EventSink::disabled()));
        let hub = Arc::new(LiveHub::new(StreamBudget::new(10, 10)));
        let ticket = hub.budget.stream(ClientKey::from(ip(3))).unwrap();
        let mut body = hub.subscribe("main", visitor, ip(3), ticket).into_body();
        let stop = CancellationToken::new();
        let running = {
            let (hub, admission, stop) = (hub.clone(), admission.clone(), stop.clone());
            tokio::spawn(async move { hub.run(&admission, stop).await })
        };
        let frame = |f: Option<Result<Frame<Bytes>, BoxError>>| {
            f.expect("a frame").unwrap().into_data().unwrap()
        };
        assert_eq!(frame(body.frame().await), PREAMBLE);
        // The first tick, at once: the visitor's place.
        assert!(frame(body.frame().await).starts_with(b"event: position\n"));

        // Resumed, the room earns its first places over half a second.
        store
            .update_settings("main", &SettingsPatch::resume())
            .await
            .unwrap();
        tokio::time::advance(Duration::from_millis(500)).await;
        let pass = admission.admit_pass("main").await.unwrap();
        assert_eq!(pass.admitted, vec![visitor]);
        // Told well before the next tick (at 2 s), and the stream ends with it.
        let told = tokio::time::timeout(Duration::from_secs(1), body.frame())
            .await
            .expect("told before the next tick");
        assert_eq!(frame(told), LiveEvent::Admitted.encode());
        assert!(body.frame().await.is_none());
        assert_eq!(hub.open_streams(), 0);
        stop.cancel();
        running.await.unwrap();
    }

    #[tokio::test]
    async fn an_admission_ends_only_that_rooms_stream_of_the_visitor() {
        let hub = LiveHub::new(StreamBudget::new(10, 10));
        let visitor = VisitorId([5; 16]);
        let client = ClientKey::from(ip(5));
        let mut main = hub
            .subscribe("main", visitor, ip(5), hub.budget.stream(client).unwrap())
            .into_body();
        let mut other = hub
            .subscribe("other", visitor, ip(5), hub.budget.stream(client).unwrap())
            .into_body();
        for body in [&mut main, &mut other] {
            assert_eq!(
                body.frame().await.unwrap().unwrap().into_data().unwrap(),
                PREAMBLE
            );
        }
        // Admitted to `main`, and someone nobody streams for: one stream told.
        let room: Arc<str> = "main".into();
        assert_eq!(hub.admitted(&room, &[VisitorId([6; 16]), visitor]), 1);
        assert_eq!(
            main.frame().await.unwrap().unwrap().into_data().unwrap(),
            LiveEvent::Admitted.encode()
        );
        assert!(main.frame().await.is_none());
        // The other room's stream of the same visitor stays open, its share held.
        assert_eq!(hub.open_streams(), 1);
        assert_eq!(hub.budget.streams(), 1);
        let pending = futures_util::FutureExt::now_or_never(other.frame());
        assert!(pending.is_none(), "the other room's stream got {pending:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_opened_within_a_tick_of_its_admission_is_told_at_once() {
        let hub = LiveHub::new(StreamBudget::new(10, 10));
        let client = ClientKey::from(ip(4));
        let room: Arc<str> = "main".into();
        let (visitor, late) = (VisitorId([4; 16]), VisitorId([8; 16]));
        let open = |room: &str, visitor| {
            hub.subscribe(room, visitor, ip(4), hub.budget.stream(client).unwrap())
                .into_body()
        };
        let data = |f: Option<Result<Frame<Bytes>, BoxError>>| {
            f.expect("a frame").unwrap().into_data().unwrap()
        };
        // Admitted by a pass while their pages were loading: no stream to tell yet.
        assert_eq!(hub.admitted(&room, &[visitor, late]), 0);
        tokio::time::advance(Duration::from_millis(300)).await;
        // Another room's stream of the visitor hears nothing of it.
        let mut other = open("other", visitor);
        assert_eq!(data(other.frame().await), PREAMBLE);
        assert!(futures_util::FutureExt::now_or_never(other.frame()).is_none());
        let mut body = open("main", visitor);
        assert_eq!(data(body.frame().await), PREAMBLE);
        let told = tokio::time::timeout(Duration::from_millis(100), body.frame())
            .await
            .expect("told as it opens");
        assert_eq!(data(told), LiveEvent::Admitted.encode());
        assert!(body.frame().await.is_none());
        assert_eq!(hub.open_streams(), 1, "only the other room's");
        assert_eq!(hub.budget.streams(), 1, "the told stream's share is back");
        // Told once: a later stream of the visitor waits for the tick like any other.
        let mut again = open("main", visitor);
        assert_eq!(data(again.frame().await), PREAMBLE);
        assert!(futures_util::FutureExt::now_or_never(again.frame()).is_none());
        // A visitor admitted a tick ago or more is left to the tick: not told from memory.
        tokio::time::advance(TICK).await;
        let mut late = open("main", late);
        assert_eq!(data(late.frame().await), PREAMBLE);
        assert!(futures_util::FutureExt::now_or_never(late.frame()).is_none());
    }

    #[tokio::test]
    async fn a_slow_reader_gets_the_latest_event() {
        let hub = LiveHub::new(StreamBudget::new(10, 10));
        let visitor = VisitorId([9; 16]);
        let ticket = hub.budget.stream(ClientKey::from(ip(2))).unwrap();
        let mut body = hub.subscribe("main", visitor, ip(2), ticket).into_body();
        assert_eq!(
            body.frame().await.unwrap().unwrap().into_data().unwrap(),
            PREAMBLE
        );
        let key: ListenerKey = ("main".into(), visitor);
        for n in 1..=3 {
            let event = LiveEvent::Position(serde_json::json!({ "position": n })).encode();
            lock(&hub.listeners)[&key].events.send(event).unwrap();
        }
        let next = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(next, "event: position\ndata: {\"position\":3}\n\n");
        // Dropping the body unregisters the stream and returns its share.
        drop(body);
        assert_eq!(hub.open_streams(), 0);
        assert_eq!(hub.budget.streams(), 0);
    }
}
