//! Spreading connections over the serving workers of [`super::serve_on_workers`]: they
//! all accept from one socket, and whichever worker accepts a connection gives it to the
//! worker serving the fewest (keeping it on a tie), counted against that worker from the
//! moment it is handed over.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::OwnedSemaphorePermit;

use super::caps::{Counted, PeerCount};

/// How the serving workers share connections: the connections each serves, and each one's
/// inbox of connections handed to it. A burst of keep-alive connections ends up spread
/// evenly; without this, the worker that woke first took a whole burst while the other sat idle:
/// all 64 of a `wrk -c64` run's connections on one worker, at half the throughput. The cost
/// is one channel send and wake-up per connection handed over, never per request.
#[derive(Debug)]
pub(super) struct Seats {
    open: Box<[AtomicUsize]>,
    inboxes: Box<[tokio::sync::mpsc::UnboundedSender<Handover>]>,
}

/// A connection accepted by one worker for another to serve, with its share of the caps.
#[derive(Debug)]
pub(super) struct Handover {
    stream: std::net::TcpStream,
    peer: SocketAddr,
    permit: OwnedSemaphorePermit,
    peer_count: Option<PeerCount>,
    /// Counted against the receiving worker from the moment it is handed over, so a burst
    /// accepted before that worker has run is not all handed to it.
    seat: SeatTaken,
}

/// One worker's place among [`Seats`]: its index and the connections handed to it.
#[derive(Debug)]
pub(super) struct Seat {
    pub(super) index: usize,
    pub(super) seats: Arc<Seats>,
    pub(super) inbox: tokio::sync::mpsc::UnboundedReceiver<Handover>,
}

impl Seats {
    /// The seats of `workers` workers, and each worker's inbox of connections handed to it.
    pub(super) fn new(
        workers: usize,
    ) -> (
        Arc<Seats>,
        Vec<tokio::sync::mpsc::UnboundedReceiver<Handover>>,
    ) {
        let (inboxes, receivers): (Vec<_>, Vec<_>) = (0..workers)
            .map(|_| tokio::sync::mpsc::unbounded_channel())
            .unzip();
        let seats = Seats {
            open: (0..workers).map(|_| AtomicUsize::new(0)).collect(),
            inboxes: inboxes.into(),
        };
        (Arc::new(seats), receivers)
    }

    /// The worker that should serve the next connection `worker` accepted.
    fn least_busy(&self, worker: usize) -> usize {
        let mine = self.open[worker].load(Ordering::Relaxed);
        let (other, fewest) = (self.open.iter().enumerate())
            .map(|(i, n)| (i, n.load(Ordering::Relaxed)))
            .min_by_key(|&(_, n)| n)
            .unwrap_or((worker, mine));
        if fewest < mine { other } else { worker }
    }

    /// Counts a connection against `worker` until the returned guard drops.
    fn take(self: &Arc<Self>, worker: usize) -> SeatTaken {
        self.open[worker].fetch_add(1, Ordering::Relaxed);
        SeatTaken {
            seats: self.clone(),
            index: worker,
        }
    }
}

impl Seat {
    /// Where a connection this worker accepted is served: handed to a worker serving
    /// fewer (`None` once handed over, or lost), else here, counted against this worker.
    pub(super) fn place(&self, counted: Counted) -> Option<(Counted, SeatTaken)> {
        match self.seats.least_busy(self.index) {
            other if other != self.index => self.hand_to(other, counted),
            _ => Some((counted, self.seats.take(self.index))),
        }
    }

    /// Gives `counted` to worker `other`. Returns it, for this worker to serve, if `other`
    /// has stopped; `None` once it is handed over (or lost).
    fn hand_to(&self, other: usize, counted: Counted) -> Option<(Counted, SeatTaken)> {
        let (stream, peer, permit, peer_count) = counted;
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(error) => {
                tracing::debug!(%peer, %error, "accepted connection lost");
                return None;
            }
        };
        let handover = Handover {
            stream,
            peer,
            permit,
            peer_count,
            seat: self.seats.take(other),
        };
        let mut returned = self.seats.inboxes[other].send(handover).err()?.0;
        returned.seat = self.seats.take(self.index);
        returned.into_counted()
    }
}

impl Handover {
    /// Back to a tokio stream, on the worker that serves it (`None` if that fails).
    pub(super) fn into_counted(self) -> Option<(Counted, SeatTaken)> {
        match tokio::net::TcpStream::from_std(self.stream) {
            Ok(stream) => Some(((stream, self.peer, self.permit, self.peer_count), self.seat)),
            Err(error) => {
                tracing::debug!(peer = %self.peer, %error, "accepted connection lost");
                None
            }
        }
    }
}

/// A connection counted against a worker; uncounted on drop.
#[derive(Debug)]
pub(super) struct SeatTaken {
    seats: Arc<Seats>,
    index: usize,
}

impl Drop for SeatTaken {
    fn drop(&mut self) {
        self.seats.open[self.index].fetch_sub(1, Ordering::Relaxed);
    }
}

/// The next connection handed to `seat`, or never without one.
pub(super) async fn handed_to(seat: Option<&mut Seat>) -> Option<Handover> {
    match seat {
        Some(seat) => seat.inbox.recv().await,
        None => std::future::pending().await,
    }
}
