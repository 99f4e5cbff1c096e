//! The caps every accept loop of the process takes from (`max_connections` permits, and the
//! open connections per client, an IPv4 address or an IPv6 /64, of direct peers that are
//! not trusted proxies), and each loop's way in under them ([`Entrance`], with its own
//! connections that may be closed to make room, `evict.rs`).
//!
//! A permit is taken before `accept` while there are permits. When there are none, the loop
//! accepts one client anyway and holds it while it makes room: it closes the longest-idle
//! connection (if one has been idle a second) and waits for a permit. Only that one client
//! waits outside the cap; the others stay in the kernel's queue, which is the backpressure.
//! A client over its peer cap is closed at accept, before a byte is read.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::ServerLimits;
use super::evict::Evictable;

/// While a client waits for room, another connection is looked for to close this often
/// (the one closed before may have gone to another worker's client).
const MAKE_ROOM_EVERY: Duration = Duration::from_millis(250);

/// The process-wide caps every accept loop takes from.
#[derive(Debug, Clone)]
pub(super) struct Caps {
    pub(super) permits: Arc<Semaphore>,
    pub(super) peer_counts: PeerCounts,
}

impl Caps {
    pub(super) fn new(limits: &ServerLimits) -> Self {
        Caps {
            permits: Arc::new(Semaphore::new(limits.max_connections.max(1))),
            peer_counts: Arc::default(),
        }
    }

    /// A permit, once one is free; meanwhile closing idle connections of `evictable` to
    /// free one.
    async fn make_room(&self, evictable: &Evictable) -> OwnedSemaphorePermit {
        loop {
            evictable.evict_one();
            tokio::select! {
                permit = self.permits.clone().acquire_owned() => return permit.expect(NEVER_CLOSED),
                () = tokio::time::sleep(MAKE_ROOM_EVERY) => {}
            }
        }
    }
}

const NEVER_CLOSED: &str = "the connection semaphore is never closed";

/// An accepted connection with its `max_connections` permit and its count against its peer.
pub(super) type Counted = (
    tokio::net::TcpStream,
    SocketAddr,
    OwnedSemaphorePermit,
    Option<PeerCount>,
);

/// What one accept gave.
pub(super) enum Accepted {
    Counted(Counted),
    /// From a peer already at `max_connections_per_client`: closed (dropped) at once.
    OverPeerCap(IpAddr),
    Failed(io::Error),
}

/// One accept loop's way in under the caps.
#[derive(Debug, Default)]
pub(super) struct Entrance {
    /// This loop's open connections, to close the longest-idle one when a client needs
    /// room. Each loop (worker) lists its own: its connections stay on its thread, so the
    /// list's lock is never contended, and the workers' shares of connections are even
    /// (`seats.rs`), so each has idle ones when any has.
    pub(super) evictable: Evictable,
    /// A client accepted while the server was full, waiting for room. Kept here rather than
    /// in the future that waits, so [`Entrance::next`] stays cancel-safe.
    waiting: Option<(TcpStream, SocketAddr, Option<PeerCount>)>,
}

impl Entrance {
    /// The next connection, counted under the caps (see the module doc). Cancel-safe:
    /// nothing is lost if it is dropped while waiting.
    pub(super) async fn next(
        &mut self,
        listener: &TcpListener,
        limits: &ServerLimits,
        caps: &Caps,
    ) -> Accepted {
        let permit = match caps.permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) if self.waiting.is_some() => caps.make_room(&self.evictable).await,
            Err(_) => {
                // Full: a permit coming back, or a client arriving that needs one.
                tokio::select! {
                    permit = caps.permits.clone().acquire_owned() => permit.expect(NEVER_CLOSED),
                    accepted = listener.accept() => {
                        let (stream, peer) = match accepted {
                            Ok(accepted) => accepted,
                            Err(error) => return Accepted::Failed(error),
                        };
                        match count_peer(limits, &caps.peer_counts, peer) {
                            Ok(count) => self.waiting = Some((stream, peer, count)),
                            Err(ip) => return Accepted::OverPeerCap(ip),
                        }
                        caps.make_room(&self.evictable).await
                    }
                }
            }
        };
        if let Some((stream, peer, count)) = self.waiting.take() {
            return Accepted::Counted((stream, peer, permit, count));
        }
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => return Accepted::Failed(error),
        };
        match count_peer(limits, &caps.peer_counts, peer) {
            Ok(count) => Accepted::Counted((stream, peer, permit, count)),
            Err(ip) => Accepted::OverPeerCap(ip),
        }
    }
}

/// Counts a connection from `peer` against its client, unless it is a trusted proxy; its
/// address if the client already has `max_connections_per_client` open.
fn count_peer(
    limits: &ServerLimits,
    peer_counts: &PeerCounts,
    peer: SocketAddr,
) -> Result<Option<PeerCount>, IpAddr> {
    let ip = peer.ip().to_canonical();
    if limits.trusted_proxies.contains(ip) {
        return Ok(None);
    }
    // Counted per client, like everything else per client: an IPv6 /64 is one, so a
    // subscriber's 2^64 addresses share one cap.
    let client = crate::identity::ClientKey::from(ip).ip();
    PeerCount::take(peer_counts, client, limits.max_connections_per_client)
        .map(Some)
        .ok_or(ip)
}

/// Open connections per direct peer's client (an IPv4 address or an IPv6 /64).
pub(super) type PeerCounts = Arc<std::sync::Mutex<HashMap<IpAddr, usize>>>;

/// One connection counted against its peer; uncounted on drop.
#[derive(Debug)]
pub(super) struct PeerCount {
    counts: PeerCounts,
    ip: IpAddr,
}

impl PeerCount {
    /// Counts a connection from `ip`, or `None` if `ip` already has `max` open.
    fn take(counts: &PeerCounts, ip: IpAddr, max: usize) -> Option<PeerCount> {
        let mut map = counts.lock().unwrap_or_else(|p| p.into_inner());
        let n = map.entry(ip).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(PeerCount {
            counts: counts.clone(),
            ip,
        })
    }
}

impl Drop for PeerCount {
    fn drop(&mut self) {
        let mut map = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = map.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.ip);
            }
        }
    }
}
