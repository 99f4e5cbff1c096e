//! A WebSocket upgrade passed through: once the origin answers 101, the two upgraded
//! connections are joined byte for byte (no frame decoding) in a task of their own, until
//! either side closes, neither moves a byte for the idle timeout, or the caller's hold
//! ends it. Whatever keeps the connection counted (its slot, its stream ticket, the
//! caller's hold) lives as long as the tunnel.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::time::Instant;

use super::lock;

/// What the caller of [`super::OriginClient::forward_holding`] has an upgraded tunnel hold: a
/// guard kept alive as long as the tunnel, and a token that ends it.
pub struct TunnelHold {
    /// Dropped when the tunnel closes (a stream's slot under `stream_cap`, …).
    pub guard: Box<dyn std::any::Any + Send + Sync>,
    /// Cancelled when the tunnel must close (its session ended, its client was banned).
    pub ended: tokio_util::sync::CancellationToken,
}

/// Joins the bytes of two upgraded connections until either side closes, neither sends
/// a byte for `idle`, or `ended` is cancelled. `guards` (the connection slot, the stream
/// ticket, the caller's hold) are held until then.
pub(super) async fn tunnel<G: Send>(
    visitor: hyper::upgrade::OnUpgrade,
    origin: hyper::upgrade::OnUpgrade,
    idle: Duration,
    ended: Option<tokio_util::sync::CancellationToken>,
    guards: G,
) {
    let _guards = guards;
    let (visitor, origin) = match tokio::try_join!(visitor, origin) {
        Ok(both) => both,
        Err(error) => {
            tracing::debug!(%error, "upgrade did not complete");
            return;
        }
    };
    let last = Arc::new(Mutex::new(Instant::now()));
    let mut visitor = Touching {
        io: TokioIo::new(visitor),
        last: last.clone(),
    };
    let mut origin = Touching {
        io: TokioIo::new(origin),
        last: last.clone(),
    };
    let copy = tokio::io::copy_bidirectional(&mut visitor, &mut origin);
    let watchdog = async {
        loop {
            let deadline = *lock(&last) + idle;
            tokio::time::sleep_until(deadline).await;
            if *lock(&last) + idle <= Instant::now() {
                return;
            }
        }
    };
    tokio::select! {
        result = copy => match result {
            Ok((up, down)) => tracing::debug!(up, down, "upgraded connection closed"),
            Err(error) => tracing::debug!(%error, "upgraded connection ended with an error"),
        },
        () = watchdog => tracing::debug!(?idle, "idle upgraded connection closed"),
        () = async {
            match &ended {
                Some(ended) => ended.cancelled().await,
                None => std::future::pending().await,
            }
        } => tracing::debug!("upgraded connection closed: its session ended"),
    }
}

/// An upgraded connection that stamps `last` whenever bytes move through it.
struct Touching<T> {
    io: T,
    last: Arc<Mutex<Instant>>,
}

impl<T: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Touching<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let result = Pin::new(&mut this.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            *lock(&this.last) = Instant::now();
        }
        result
    }
}

impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Touching<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.io).poll_write(cx, buf);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            *lock(&this.last) = Instant::now();
        }
        result
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
