//! What a connection's reads say about request heads on their way, for its idle watchdog
//! (`idle.rs`): [`Metered`] wraps the connection's I/O and tells its [`Activity`] when a
//! head begins to arrive and, on HTTP/2, when it ends.
//!
//! - **HTTP/1** (anything not opening with HTTP/2's preface): a head is on its way from the
//!   first byte that arrives while no request is in flight, until hyper hands over the
//!   request it heads. Bytes read while one is in flight are its body (or a pipelined
//!   request, which then waits at most `idle_timeout` after it, the bound hyper's buffer
//!   limit puts on its size).
//! - **HTTP/2**: the frames are followed as far as their 9-byte headers (RFC 9113 §4.1),
//!   payloads skipped. A header block is on its way from a `HEADERS` (or `PUSH_PROMISE`)
//!   frame without `END_HEADERS` until the `CONTINUATION` frame with it, in flight or not:
//!   the frames of one block come back to back (§6.10), so a block left open is a client
//!   holding the connection's decoder, never a slow network alone.
//!
//! Written by hand because neither hyper nor h2 tells when a header block starts; a frame
//! header is three fields at fixed offsets.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::idle::Activity;

/// HTTP/2's client connection preface (RFC 9113 §3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// An HTTP/2 frame header's length.
const FRAME_HEADER: usize = 9;
const HEADERS: u8 = 0x1;
const PUSH_PROMISE: u8 = 0x5;
const CONTINUATION: u8 = 0x9;
const END_HEADERS: u8 = 0x4;

/// How far the connection's bytes have been followed.
#[derive(Debug)]
enum Reading {
    /// The first bytes, `matched` of them HTTP/2's preface so far.
    Sniffing {
        matched: usize,
    },
    Http1,
    Http2(Frames),
}

/// Where the byte stream is among HTTP/2 frames.
#[derive(Debug, Default)]
struct Frames {
    /// The frame header being read.
    header: [u8; FRAME_HEADER],
    /// How much of `header` has arrived.
    filled: usize,
    /// Payload bytes still to skip before the next frame header.
    skip: usize,
}

impl Frames {
    /// Follows `bytes`, telling `activity` where header blocks begin and end.
    fn follow(&mut self, mut bytes: &[u8], activity: &Activity) {
        while !bytes.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(bytes.len());
                self.skip -= n;
                bytes = &bytes[n..];
                continue;
            }
            let n = (FRAME_HEADER - self.filled).min(bytes.len());
            self.header[self.filled..self.filled + n].copy_from_slice(&bytes[..n]);
            self.filled += n;
            bytes = &bytes[n..];
            if self.filled < FRAME_HEADER {
                return;
            }
            self.filled = 0;
            let [l0, l1, l2, kind, flags, ..] = self.header;
            self.skip = usize::from(l0) << 16 | usize::from(l1) << 8 | usize::from(l2);
            let ends = flags & END_HEADERS != 0;
            match kind {
                HEADERS | PUSH_PROMISE if !ends => activity.head_began(),
                CONTINUATION if ends => activity.head_ended(),
                _ => {}
            }
        }
    }
}

/// A connection's I/O, its reads followed for its [`Activity`].
#[derive(Debug)]
pub(super) struct Metered<T> {
    io: T,
    activity: Activity,
    reading: Reading,
}

impl<T> Metered<T> {
    pub(super) fn new(io: T, activity: Activity) -> Self {
        Metered {
            io,
            activity,
            reading: Reading::Sniffing { matched: 0 },
        }
    }

    /// Follows `bytes`, just read.
    fn follow(&mut self, bytes: &[u8]) {
        let mut bytes = bytes;
        if let Reading::Sniffing { matched } = &mut self.reading {
            let n = (PREFACE.len() - *matched).min(bytes.len());
            if bytes[..n] != PREFACE[*matched..*matched + n] {
                self.reading = Reading::Http1;
                self.activity.speaks_http1();
            } else {
                *matched += n;
                bytes = &bytes[n..];
                if *matched < PREFACE.len() {
                    return;
                }
                self.reading = Reading::Http2(Frames::default());
            }
        }
        match &mut self.reading {
            Reading::Http1 => {
                if !bytes.is_empty() && self.activity.is_idle() {
                    self.activity.head_began();
                }
            }
            Reading::Http2(frames) => frames.follow(bytes, &self.activity),
            Reading::Sniffing { .. } => {}
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Metered<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            this.follow(&buf.filled()[before..]);
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Metered<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, len: usize) -> Vec<u8> {
        let mut frame = (len as u32).to_be_bytes()[1..].to_vec();
        frame.extend_from_slice(&[kind, flags, 0, 0, 0, 1]);
        frame.extend(std::iter::repeat_n(0u8, len));
        frame
    }

    /// Whether a head is on its way after `chunks` arrive one read each.
    fn head_open_after(chunks: &[&[u8]]) -> bool {
        let activity = Activity::new();
        let mut metered = Metered::new((), activity.clone());
        for chunk in chunks {
            metered.follow(chunk);
        }
        activity.head_pending()
    }

    #[test]
    fn an_http2_header_block_is_open_from_headers_to_its_last_continuation() {
        let open = frame(HEADERS, 0, 100);
        let more = frame(CONTINUATION, 0, 50);
        let last = frame(CONTINUATION, END_HEADERS, 20);
        let whole = frame(HEADERS, END_HEADERS, 100);
        let data = frame(0x0, 0x1, 3000);
        assert!(head_open_after(&[PREFACE, &open]));
        assert!(head_open_after(&[PREFACE, &open, &more]));
        assert!(!head_open_after(&[PREFACE, &open, &more, &last]));
        assert!(!head_open_after(&[PREFACE, &whole, &data]));
        // A DATA payload that looks like a frame header is skipped, not read as one.
        let mut lookalike = frame(0x0, 0, 9);
        lookalike[9..].copy_from_slice(&frame(HEADERS, 0, 0));
        assert!(!head_open_after(&[PREFACE, &lookalike]));
        // Byte by byte, the same.
        let stream: Vec<u8> = [&PREFACE[..], &whole, &open].concat();
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert!(head_open_after(&bytes));
        let stream: Vec<u8> = [&PREFACE[..], &open, &last, &data].concat();
        let bytes: Vec<&[u8]> = stream.chunks(7).collect();
        assert!(!head_open_after(&bytes));
    }

    #[test]
    fn http1_bytes_while_idle_begin_a_head() {
        assert!(head_open_after(&[b"GET / HT"]));
        // The preface's first bytes, then something else: HTTP/1 after all.
        assert!(head_open_after(&[b"PRI * HT", b"TP/1.1"]));
        assert!(!head_open_after(&[]));
    }
}
