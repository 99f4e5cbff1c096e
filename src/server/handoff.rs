//! Taking an HTTP/1.1 connection's socket back from hyper once a response's head is written,
//! for a response that then lasts as long as the visitor (the waiting page's live stream).
//!
//! Why: a connection in hyper's hands keeps its read buffer (16 KiB once a request has been
//! read), its write buffer (8 KiB), its cached header map and a 2.3 KiB connection future for
//! as long as the response lasts, about 25 KiB of RSS per held waiting page
//! (BENCHMARKS.md, `hold`; measured with heaptrack). A stream that only ever writes a few
//! hundred bytes every two seconds needs none of it.
//!
//! A handler marks such a response [`LongLived`]; nothing else about it changes (its body,
//! and whatever watches the body, such as the access log, are the same). How the server
//! then serves it, with nothing but hyper's public contract:
//! - hyper gets the head with `Connection: close` and an empty body of unknown length, so it
//!   writes the head with `Transfer-Encoding: chunked`, then the last chunk (`0\r\n\r\n`),
//!   then shuts the connection down; the real body waits in the connection's [`Handoff`];
//! - [`HandoffIo`], the connection's I/O, stages everything written from then on and holds
//!   back its last five bytes; when hyper shuts it down and those five bytes are exactly the
//!   last chunk, they are dropped, the rest is written, and a small task ([`pump`]) writes
//!   the real body's frames as chunks, then its own last chunk;
//! - anything else (hyper wrote something unexpected, the connection failed first) and the
//!   staged bytes are written as they are and the connection closes: the client sees a
//!   complete, empty response (a waiting page simply reconnects), and the body is dropped.
//!
//! HTTP/2 streams share their connection, and HTTP/1.0 has no chunks: there a long-lived
//! response stays an ordinary hyper body.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, Version, header};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use super::ConnectionSlot;
use crate::http::body::{Body, BoxError};

/// The last chunk of a chunked body.
const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// Response heads are a few hundred bytes; more than this staged means something is wrong.
const MAX_STAGED: usize = 64 * 1024;

/// A handed-over body whose client has not taken a chunk for this long (its socket buffer
/// is full) is dropped: it holds a connection and shows nobody anything.
const STALLED_WRITE: Duration = Duration::from_secs(30);

/// Bytes the client may send after its request (nothing is expected: the response closes
/// the connection) before a handed-over body is dropped.
const MAX_CLIENT_BYTES: usize = 4 * 1024;

/// Marks a response (in its extensions) that lasts as long as its client: on HTTP/1.1 its
/// body is written from outside hyper once the head is out (see the module doc).
#[derive(Clone, Copy, Debug)]
pub struct LongLived;

/// A connection's one chance to hand its socket over (part of its [`ConnectionSlot`]).
#[derive(Default)]
pub(super) struct Handoff {
    /// Set once, when a response takes it; from then on writes are staged.
    taken: AtomicBool,
    /// The body to write once hyper lets go.
    body: Mutex<Option<Body>>,
}

impl std::fmt::Debug for Handoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handoff")
            .field("taken", &self.taken.load(Ordering::Relaxed))
            .finish()
    }
}

/// What hyper is given for `response` to a `version` request on `slot`'s connection: the
/// response itself, or, if it is [`LongLived`] and can be handed over, its head alone (its
/// body kept for [`pump`]).
pub(super) fn prepare(
    slot: &ConnectionSlot,
    version: Version,
    response: Response<Body>,
) -> Response<Body> {
    if version != Version::HTTP_11 || response.extensions().get::<LongLived>().is_none() {
        return response;
    }
    let handoff = &slot.handoff;
    let (mut parts, body) = response.into_parts();
    {
        let mut waiting = handoff.body.lock().unwrap_or_else(|p| p.into_inner());
        if handoff.taken.load(Ordering::Acquire) {
            // One per connection: a second (pipelined) one stays with hyper.
            return Response::from_parts(parts, body);
        }
        *waiting = Some(body);
        handoff.taken.store(true, Ordering::Release);
    }
    parts
        .headers
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    // Not `empty()`: a body hyper can see is empty gets `content-length: 0`, and the point
    // is chunks.
    let unsized_empty =
        StreamBody::new(futures_util::stream::empty::<Result<Frame<Bytes>, BoxError>>()).boxed();
    Response::from_parts(parts, unsized_empty)
}

/// A socket taken from hyper, still counted against the connection caps until dropped.
struct Detached {
    stream: TcpStream,
    _slot: Arc<ConnectionSlot>,
}

/// Writes `body` on `io` as HTTP/1.1 chunks, then the last chunk. Dropping the body early
/// (the client went away, stopped reading, or talked) tells its watchers it did not
/// complete, as hyper would.
async fn pump(mut io: Detached, mut body: Body) {
    let mut scratch = [0u8; 64];
    let mut heard = 0;
    loop {
        let frame = tokio::select! {
            read = io.stream.read(&mut scratch) => match read {
                Ok(n) if n > 0 && heard + n <= MAX_CLIENT_BYTES => {
                    heard += n;
                    continue;
                }
                _ => return,
            },
            frame = body.frame() => frame,
        };
        match frame {
            Some(Ok(frame)) => {
                // Trailers are not written: nothing long-lived has any.
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                if data.is_empty() {
                    continue;
                }
                let mut chunk = Vec::with_capacity(data.len() + 12);
                chunk.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
                chunk.extend_from_slice(&data);
                chunk.extend_from_slice(b"\r\n");
                if !matches!(
                    tokio::time::timeout(STALLED_WRITE, io.stream.write_all(&chunk)).await,
                    Ok(Ok(()))
                ) {
                    return;
                }
            }
            // Cut short: closed without the last chunk, so the client sees it was.
            Some(Err(_)) => return,
            None => break,
        }
    }
    drop(body);
    if let Ok(Ok(())) = tokio::time::timeout(STALLED_WRITE, io.stream.write_all(LAST_CHUNK)).await {
        let _ = io.stream.shutdown().await;
    }
}

/// A connection's socket as hyper sees it: passed through untouched until a response takes
/// the connection's [`Handoff`], staged from then on (see the module doc).
pub(super) struct HandoffIo {
    /// `None` once handed over.
    stream: Option<TcpStream>,
    slot: Arc<ConnectionSlot>,
    staged: Vec<u8>,
    /// How much of `staged` is on the wire.
    sent: usize,
}

impl HandoffIo {
    pub(super) fn new(stream: TcpStream, slot: Arc<ConnectionSlot>) -> Self {
        HandoffIo {
            stream: Some(stream),
            slot,
            staged: Vec::new(),
            sent: 0,
        }
    }

    /// Whether writes are staged: a response has taken the handoff and the socket is
    /// still here.
    fn staging(&self) -> bool {
        self.stream.is_some() && self.slot.handoff.taken.load(Ordering::Acquire)
    }

    fn stage(&mut self, bufs: &[&[u8]]) -> io::Result<usize> {
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        if self.staged.len() + len > MAX_STAGED {
            return Err(io::Error::other("response head too large to hand over"));
        }
        for buf in bufs {
            self.staged.extend_from_slice(buf);
        }
        Ok(len)
    }

    /// Writes the staged bytes but the last `keep`.
    fn poll_send_staged(&mut self, cx: &mut Context<'_>, keep: usize) -> Poll<io::Result<()>> {
        let Some(stream) = self.stream.as_mut() else {
            return Poll::Ready(Err(io::ErrorKind::NotConnected.into()));
        };
        let end = self.staged.len().saturating_sub(keep);
        while self.sent < end {
            let n = ready!(Pin::new(&mut *stream).poll_write(cx, &self.staged[self.sent..end]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        Poll::Ready(Ok(()))
    }

    fn stream(&mut self) -> io::Result<Pin<&mut TcpStream>> {
        match self.stream.as_mut() {
            Some(stream) => Ok(Pin::new(stream)),
            None => Err(io::ErrorKind::NotConnected.into()),
        }
    }
}

impl AsyncRead for HandoffIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut().stream.as_mut() {
            Some(stream) => Pin::new(stream).poll_read(cx, buf),
            // Handed over: hyper is done with it and reads an end.
            None => Poll::Ready(Ok(())),
        }
    }
}

impl AsyncWrite for HandoffIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.staging() {
            return Poll::Ready(this.stage(&[buf]));
        }
        match this.stream() {
            Ok(stream) => stream.poll_write(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.staging() {
            let bufs: Vec<&[u8]> = bufs.iter().map(|b| &b[..]).collect();
            return Poll::Ready(this.stage(&bufs));
        }
        match this.stream() {
            Ok(stream) => stream.poll_write_vectored(cx, bufs),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.staging() {
            // The last chunk may be in the last five bytes: they wait for the shutdown.
            ready!(this.poll_send_staged(cx, LAST_CHUNK.len()))?;
        }
        match this.stream() {
            Ok(stream) => stream.poll_flush(cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.staging() {
            ready!(this.poll_send_staged(cx, LAST_CHUNK.len()))?;
            let rest = &this.staged[this.sent..];
            let body = if rest == LAST_CHUNK {
                (this.slot.handoff.body.lock())
                    .unwrap_or_else(|p| p.into_inner())
                    .take()
            } else {
                None
            };
            match (body, this.stream.take()) {
                (Some(body), Some(stream)) => {
                    let detached = Detached {
                        stream,
                        _slot: this.slot.clone(),
                    };
                    tokio::spawn(pump(detached, body));
                    return Poll::Ready(Ok(()));
                }
                (_, stream) => this.stream = stream,
            }
            // Not the head and last chunk expected: send it all as it is and close.
            ready!(this.poll_send_staged(cx, 0))?;
        }
        match this.stream() {
            Ok(stream) => stream.poll_shutdown(cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;
    use tokio::sync::Semaphore;

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (client, server)
    }

    async fn taken_slot() -> Arc<ConnectionSlot> {
        let slot = Arc::new(ConnectionSlot {
            _permit: Arc::new(Semaphore::new(1)).acquire_owned().await.unwrap(),
            _peer: None,
            _seat: None,
            _open: super::super::Census::default().connection(),
            handoff: Handoff::default(),
        });
        *slot.handoff.body.lock().unwrap() = Some(crate::http::body::full("never written"));
        slot.handoff.taken.store(true, Ordering::Release);
        slot
    }

    #[tokio::test]
    async fn without_the_last_chunk_the_staged_bytes_go_out_as_they_are() {
        let (mut client, server) = pair().await;
        let slot = taken_slot().await;
        let mut io = HandoffIo::new(server, slot.clone());
        let written = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        io.write_all(&written[..20]).await.unwrap();
        io.flush().await.unwrap();
        io.write_all(&written[20..]).await.unwrap();
        io.shutdown().await.unwrap();
        drop(io);
        let mut read = Vec::new();
        client.read_to_end(&mut read).await.unwrap();
        assert_eq!(read, written);
        // Nothing was handed over: the body is still waiting, to be dropped with the slot.
        assert!(slot.handoff.body.lock().unwrap().is_some());
    }

    #[tokio::test]
    async fn with_the_last_chunk_the_socket_goes_to_the_body() {
        let (mut client, server) = pair().await;
        let slot = taken_slot().await;
        let mut io = HandoffIo::new(server, slot.clone());
        let head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";
        io.write_all(head).await.unwrap();
        io.write_all(LAST_CHUNK).await.unwrap();
        io.flush().await.unwrap();
        io.shutdown().await.unwrap();
        // hyper's view of it afterwards: nothing to read, nothing to write to.
        let mut buf = [0u8; 8];
        assert_eq!(io.read(&mut buf).await.unwrap(), 0);
        assert!(io.write_all(b"late").await.is_err());
        drop(io);
        let mut read = Vec::new();
        client.read_to_end(&mut read).await.unwrap();
        let mut expected = head.to_vec();
        expected.extend_from_slice(b"d\r\nnever written\r\n0\r\n\r\n");
        assert_eq!(
            String::from_utf8_lossy(&read),
            String::from_utf8_lossy(&expected)
        );
    }
}
