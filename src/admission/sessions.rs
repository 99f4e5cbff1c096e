//! The session cache: which admitted visitors this replica has lately seen confirmed by
//! the store, from which clients, so their requests pass without a store round trip.
//!
//! The trust is per replica and short. A request the cache answers is recorded, and every
//! [`SESSION_FLUSH`] the requests of all visitors are flushed to the store in one
//! `touch_sessions` per room as their sessions' activity; the store's answer renews the
//! trust for those still on the site and ends it for the others. So no admitted request
//! waits on the store, and a session ended anywhere (another replica, the origin, a
//! reclaim) stops here within one flush, a quiet one within [`SESSION_CONFIRM_WINDOW`].
//!
//! Why not a signed "admitted until" claim in the cookie, trusted by every replica:
//! measured on the proxy scenario (BENCHMARKS.md), the cache's lookup is under half a percent of the admitted path, so a
//! claim would buy no speed; and `session_clients` needs the store to see each new client
//! of a cookie, which a claim alone would skip. A visitor's first request on a replica that
//! has not seen them is one store round trip.

use std::collections::HashMap;
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::queue::{ClientKey, VisitorId};

/// How long a replica trusts, without hearing from the store, that a visitor it saw
/// admitted is still on the site. Requests it answers from that trust are not lost: they
/// are recorded here and flushed to the store in one batch every [`SESSION_FLUSH`], and the
/// store's answer (still on the site or not) renews or ends the trust. So an active
/// visitor never waits on the store, a session ended elsewhere (another replica, the
/// origin, a reclaim) stops being trusted within one flush, and one that went quiet for
/// longer than this asks the store again on its next request. Capped at half the room's
/// `session_ttl` so the store never reclaims a session this replica still believes in.
pub const SESSION_CONFIRM_WINDOW: Duration = Duration::from_secs(2);

/// How often the requests answered from the session cache are flushed to the store as
/// last-seen times, one batched `touch_sessions` per room.
pub const SESSION_FLUSH: Duration = Duration::from_secs(1);

/// Admitted visitors this replica has recently confirmed with the store, per client: a
/// cookie confirmed from one client says nothing about another, whose first request must
/// reach the store so `session_clients` counts it. Each visitor also keeps when
/// this replica first saw them admitted (unix seconds: the `admitted_at` of the admission
/// token), shared by all their clients so one session has one `admitted_at`.
#[derive(Default)]
pub(super) struct SessionCache {
    /// By room, then visitor: a lookup borrows the room's name (no key to allocate), and
    /// readers (every admitted request) share the lock.
    confirmed: RwLock<HashMap<String, HashMap<VisitorId, ConfirmedSession>>>,
}

pub(super) struct ConfirmedSession {
    since: u64,
    /// When the store last confirmed the session for each client.
    clients: HashMap<ClientKey, Instant>,
    /// A request was answered from the cache since the last flush.
    seen: AtomicBool,
}

impl SessionCache {
    /// Since when `visitor` has been on the site, if this replica confirmed them from
    /// `client` within `window`.
    pub(super) fn confirmed_since(
        &self,
        room: &str,
        visitor: VisitorId,
        client: ClientKey,
        window: Duration,
    ) -> Option<u64> {
        let confirmed = self.confirmed.read().unwrap_or_else(|p| p.into_inner());
        let session = confirmed.get(room)?.get(&visitor)?;
        let trusted = session
            .clients
            .get(&client)
            .is_some_and(|at| at.elapsed() < window);
        // Loaded first so a busy visitor's requests do not all write the cache line.
        if trusted && !session.seen.load(Ordering::Relaxed) {
            session.seen.store(true, Ordering::Relaxed);
        }
        trusted.then_some(session.since)
    }

    /// The visitors of each room with a request answered from the cache since the last
    /// call, which forgets that they had one.
    pub(super) fn take_seen(&self) -> Vec<(String, Vec<VisitorId>)> {
        let confirmed = self.confirmed.read().unwrap_or_else(|p| p.into_inner());
        confirmed
            .iter()
            .map(|(room, sessions)| {
                let seen = sessions
                    .iter()
                    .filter(|(_, s)| s.seen.swap(false, Ordering::Relaxed))
                    .map(|(visitor, _)| *visitor)
                    .collect::<Vec<_>>();
                (room.clone(), seen)
            })
            .filter(|(_, seen)| !seen.is_empty())
            .collect()
    }

    /// The store's answer to a flush: `visitors[i]` is still on the site if `on_site[i]`.
    /// Those still on it are trusted afresh from every client still trusted within the
    /// room's `window` (a client whose trust ran out must reach the store itself); the
    /// others are forgotten.
    pub(super) fn renew(
        &self,
        room: &str,
        visitors: &[VisitorId],
        on_site: &[bool],
        window: Duration,
    ) {
        let mut confirmed = self.confirmed.write().unwrap_or_else(|p| p.into_inner());
        let Some(sessions) = confirmed.get_mut(room) else {
            return;
        };
        let now = Instant::now();
        for (visitor, on_site) in visitors.iter().zip(on_site) {
            if !on_site {
                sessions.remove(visitor);
            } else if let Some(session) = sessions.get_mut(visitor) {
                for at in session.clients.values_mut() {
                    if now.duration_since(*at) < window {
                        *at = now;
                    }
                }
            }
        }
    }

    /// Records a confirmation from the store for `client`; returns since when the visitor
    /// has been on the site (kept from the first confirmation, from any client).
    pub(super) fn confirm(&self, room: &str, visitor: VisitorId, client: ClientKey) -> u64 {
        let mut confirmed = self.confirmed.write().unwrap_or_else(|p| p.into_inner());
        if !confirmed.contains_key(room) {
            confirmed.insert(room.to_owned(), HashMap::new());
        }
        let session = confirmed
            .get_mut(room)
            .expect("inserted above")
            .entry(visitor)
            .or_insert_with(|| ConfirmedSession {
                since: crate::queue::unix_ms(SystemTime::now()) / 1000,
                clients: HashMap::new(),
                seen: AtomicBool::new(false),
            });
        session.clients.insert(client, Instant::now());
        session.since
    }

    /// Stops trusting `visitor`'s session in `room` from every client.
    pub(super) fn forget(&self, room: &str, visitor: VisitorId) {
        let mut confirmed = self.confirmed.write().unwrap_or_else(|p| p.into_inner());
        if let Some(sessions) = confirmed.get_mut(room) {
            sessions.remove(&visitor);
        }
    }

    pub(super) fn prune(&self, window: Duration) {
        let mut confirmed = self.confirmed.write().unwrap_or_else(|p| p.into_inner());
        for sessions in confirmed.values_mut() {
            sessions.retain(|_, session| {
                session.clients.retain(|_, at| at.elapsed() < window);
                !session.clients.is_empty()
            });
        }
    }
}
