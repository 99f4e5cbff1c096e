//! Bodies: the one response body type every handler returns (so proxied streams, SSE and
//! rendered pages flow through the same server), and [`Watched`], the one wrapper for
//! anything that must notice a body's progress (upload activity, an idle origin, a request
//! held in flight until its response body is dropped, the access log's bytes and end).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::{BodyExt, Empty, Full, combinators::BoxBody};

/// The error type of every body: anything sendable.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A streaming response body: proxied bytes, an SSE stream, or a rendered page.
pub type Body = BoxBody<Bytes, BoxError>;

/// A body of these bytes, all at once.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// A body with no bytes.
pub fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed()
}

/// What a [`Watched`] body does around each poll of the body it wraps.
pub trait Watch: Send + Sync + Unpin + 'static {
    /// Called after every poll of the inner body, with whether it produced something (a
    /// frame, an error or its end). While it is pending, an error returned here ends the
    /// body with that error; otherwise the return value is ignored.
    fn polled(&mut self, ready: bool, cx: &mut Context<'_>) -> Option<BoxError>;

    /// Called with the length of every data frame passed on. By default, nothing.
    fn data(&mut self, _len: usize) {}

    /// Called when the inner body yields an error (it was cut short or malformed). By
    /// default, nothing.
    fn failed(&mut self) {}

    /// Called once, when the body is known to be complete: its end was read, or after a
    /// frame the inner body says nothing follows (hyper then stops polling, so waiting for
    /// the end would miss it). A body dropped before that (the client went away) never
    /// gets the call. By default, nothing.
    fn ended(&mut self) {}
}

/// A body that tells its [`Watch`] about every poll and otherwise passes frames through.
/// The watch is dropped with the body, so it can also be a guard.
pub struct Watched<B, W> {
    inner: B,
    watch: W,
    /// Whether [`Watch::ended`] was called.
    ended: bool,
}

impl<B, W> Watched<B, W> {
    /// Wraps `inner` so that `watch` hears about every poll.
    pub fn new(inner: B, watch: W) -> Self {
        Watched {
            inner,
            watch,
            ended: false,
        }
    }
}

impl<B, W: Watch> Watched<B, W> {
    fn end(&mut self) {
        if !self.ended {
            self.ended = true;
            self.watch.ended();
        }
    }
}

impl<B, W> HttpBody for Watched<B, W>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
    W: Watch,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                match &frame {
                    Some(Ok(f)) => {
                        if let Some(data) = f.data_ref() {
                            this.watch.data(data.len());
                        }
                        if this.inner.is_end_stream() {
                            this.end();
                        }
                    }
                    None => this.end(),
                    // An error is not an end: the body was cut short.
                    Some(Err(_)) => this.watch.failed(),
                }
                this.watch.polled(true, cx);
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => match this.watch.polled(false, cx) {
                Some(e) => Poll::Ready(Some(Err(e))),
                None => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
