//! What one listener has open, and what it closed itself, counted as it happens so a scrape
//! only reads numbers: client connections (a connection counts until its
//! [`super::ConnectionSlot`] goes, so an upgraded tunnel or a handed-off stream still
//! counts), HTTP/2 streams (a request on an HTTP/2 connection counts until its response
//! body has been sent or dropped), and the connections the server closed, by [`Closed`]
//! reason. A flood of half-sent heads or of connections over a client's cap shows there,
//! not only in debug logs.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// One listener's open connections and HTTP/2 streams. Cheap to clone (the clones count
/// into the same numbers).
#[derive(Clone, Debug, Default)]
pub struct Census(Arc<Counts>);

#[derive(Debug, Default)]
struct Counts {
    connections: AtomicU64,
    http2_streams: AtomicU64,
    /// Connections closed by the server, indexed as [`Closed::ALL`].
    closed: [AtomicU64; Closed::ALL.len()],
}

/// Why the server closed a client connection (the `reason` label of
/// `anteroom_connections_closed_total`): only closes before or between requests. A
/// connection its client closed, one the drain at shutdown ended, and a tunnel or held
/// stream (which outlive their request) are not counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closed {
    /// No request began within `header_read_timeout` of accept, or a request head (an
    /// HTTP/2 header block) was still unfinished that long after it began.
    HeadTimeout,
    /// No request in flight for `idle_timeout`.
    IdleTimeout,
    /// Closed at `max_connections`, idle, to make room for a newcomer.
    MadeRoom,
    /// An HTTP/1 request head too large (over `max_header_bytes` or 100 header fields,
    /// answered 431; a request line too long, 414), then closed.
    HeadTooLarge,
    /// An HTTP/1 request head that does not parse: answered 400 where hyper can answer at
    /// all, then closed.
    Malformed,
    /// From a peer already at `max_connections_per_client`: closed at accept.
    OverClientCap,
}

impl Closed {
    /// Every reason, in the order the counters are kept and encoded.
    pub const ALL: [Closed; 6] = [
        Closed::HeadTimeout,
        Closed::IdleTimeout,
        Closed::MadeRoom,
        Closed::HeadTooLarge,
        Closed::Malformed,
        Closed::OverClientCap,
    ];

    /// The `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Closed::HeadTimeout => "head_timeout",
            Closed::IdleTimeout => "idle_timeout",
            Closed::MadeRoom => "made_room",
            Closed::HeadTooLarge => "head_too_large",
            Closed::Malformed => "malformed",
            Closed::OverClientCap => "over_client_cap",
        }
    }
}

impl Census {
    /// Client connections open now.
    pub fn connections(&self) -> u64 {
        self.0.connections.load(Ordering::Relaxed)
    }

    /// HTTP/2 streams (requests in flight on HTTP/2 connections) open now.
    pub fn http2_streams(&self) -> u64 {
        self.0.http2_streams.load(Ordering::Relaxed)
    }

    /// Connections the server has closed for `reason` since the process started.
    pub fn closed(&self, reason: Closed) -> u64 {
        self.0.closed[reason as usize].load(Ordering::Relaxed)
    }

    /// The server closes a connection for `reason`.
    pub(super) fn close(&self, reason: Closed) {
        self.0.closed[reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// A connection opens: counted until the returned guard drops.
    pub(super) fn connection(&self) -> OpenConnection {
        self.0.connections.fetch_add(1, Ordering::Relaxed);
        OpenConnection(self.clone())
    }

    /// An HTTP/2 stream opens: counted until the returned guard drops.
    pub(super) fn http2_stream(&self) -> OpenStream {
        self.0.http2_streams.fetch_add(1, Ordering::Relaxed);
        OpenStream(self.clone())
    }
}

/// Counts one open connection until dropped.
#[derive(Debug)]
pub(super) struct OpenConnection(Census);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        (self.0).0.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Counts one open HTTP/2 stream until dropped.
#[derive(Debug)]
pub(super) struct OpenStream(Census);

impl Drop for OpenStream {
    fn drop(&mut self) {
        (self.0).0.http2_streams.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_has_its_own_counter_and_label() {
        let census = Census::default();
        for (i, reason) in Closed::ALL.into_iter().enumerate() {
            assert_eq!(
                reason as usize, i,
                "{reason:?} is counted at its place in ALL"
            );
            for _ in 0..=i {
                census.close(reason);
            }
        }
        for (i, reason) in Closed::ALL.into_iter().enumerate() {
            assert_eq!(census.closed(reason), i as u64 + 1, "{}", reason.as_str());
        }
        let labels: std::collections::HashSet<_> = Closed::ALL.map(Closed::as_str).into();
        assert_eq!(labels.len(), Closed::ALL.len());
    }
}
