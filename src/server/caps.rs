//! The caps every accept loop of the process takes from: `max_connections` permits, taken
//! before `accept` so a full server stops accepting and the kernel backlog holds the rest,
//! and the open connections per client (an IPv4 address or an IPv6 /64) of direct peers
//! that are not trusted proxies, one over it closed at accept before a byte is read.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::ServerLimits;

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
}

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

/// Waits for a `max_connections` permit, accepts one connection, and counts it against its
/// peer. Cancel-safe: nothing is lost if it is dropped while waiting.
pub(super) async fn accept_counted(
    listener: &TcpListener,
    limits: &ServerLimits,
    permits: &Arc<Semaphore>,
    peer_counts: &PeerCounts,
) -> Accepted {
    let permit = match permits.clone().acquire_owned().await {
        Ok(permit) => permit,
        Err(_) => unreachable!("the connection semaphore is never closed"),
    };
    let (stream, peer) = match listener.accept().await {
        Ok(accepted) => accepted,
        Err(error) => return Accepted::Failed(error),
    };
    let ip = peer.ip().to_canonical();
    let peer_count = if limits.trusted_proxies.contains(ip) {
        None
    } else {
        // Counted per client, like everything else per client: an IPv6 /64 is one, so a
        // subscriber's 2^64 addresses share one cap.
        let client = crate::identity::ClientKey::from(ip).ip();
        match PeerCount::take(peer_counts, client, limits.max_connections_per_client) {
            Some(count) => Some(count),
            None => return Accepted::OverPeerCap(ip),
        }
    };
    Accepted::Counted((stream, peer, permit, peer_count))
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
