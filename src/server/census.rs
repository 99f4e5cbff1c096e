//! What one listener has open, counted as it happens so a scrape only reads two numbers:
//! client connections (a connection counts until its [`super::ConnectionSlot`] goes, so an
//! upgraded tunnel or a handed-off stream still counts) and HTTP/2 streams (a request on an
//! HTTP/2 connection counts until its response body has been sent or dropped).

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
