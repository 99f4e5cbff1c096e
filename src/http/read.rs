//! Reading a small request body whole (an admin call's JSON, a challenge's answer): at
//! most a limit (refused before anything is read when the declared length is over it),
//! in full within a deadline, so a body too large or too slow neither fills memory nor
//! holds its connection.
//!
//! Such a body nearly always arrives in the same packet as its head, and hyper has it
//! buffered before the handler first asks: it is then taken at the first poll, without
//! arming the deadline's timer, and as the one chunk it came in (no copy). Only a body in
//! several chunks is joined. The frames are read here rather than through
//! `http_body_util`'s `Limited` and `collect`, which would hand a lone chunk back
//! uncopied too, but allocate a list to hold it first.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::FutureExt as _;
use http::{HeaderMap, header};
use http_body::Body as HttpBody;
use http_body_util::BodyExt;

use super::body::BoxError;

/// Why a body could not be read whole.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Longer than the limit, by its declared length or by what came.
    #[error("the body is longer than {limit} bytes")]
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// Not all there within the deadline.
    #[error("the body did not arrive within {} s", .0.as_secs())]
    TooSlow(Duration),
    /// The connection failed or the body was malformed (hyper's error).
    #[error("could not be read: {0}")]
    Broken(#[source] BoxError),
}

/// The whole body (`headers` are its request's, for the declared length): at most `limit`
/// bytes, all of it within `deadline`. Trailers are ignored.
pub async fn read_whole<B>(
    headers: &HeaderMap,
    body: B,
    limit: usize,
    deadline: Duration,
) -> Result<Bytes, ReadError>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(ReadError::TooLarge { limit });
    }
    let mut read = std::pin::pin!(collect(body, limit));
    // Polled once with no waker: the usual body is all there already. Otherwise the
    // timed wait below polls it again with this task's waker.
    if let Some(done) = (&mut read).now_or_never() {
        return done;
    }
    tokio::time::timeout(deadline, read)
        .await
        .map_err(|_| ReadError::TooSlow(deadline))?
}

/// Every data frame of `body`, at most `limit` bytes in all: the one chunk as it came, or
/// several joined.
async fn collect<B>(mut body: B, limit: usize) -> Result<Bytes, ReadError>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    let mut first = Bytes::new();
    let mut joined: Option<BytesMut> = None;
    let mut len = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ReadError::Broken(e.into()))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        len = len.saturating_add(data.len());
        if len > limit {
            return Err(ReadError::TooLarge { limit });
        }
        match &mut joined {
            Some(buf) => buf.extend_from_slice(&data),
            None if first.is_empty() => first = data,
            None => {
                let mut buf = BytesMut::with_capacity(len);
                buf.extend_from_slice(&first);
                buf.extend_from_slice(&data);
                joined = Some(buf);
            }
        }
    }
    Ok(joined.map_or(first, BytesMut::freeze))
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use futures_util::StreamExt as _;
    use http_body::Frame;
    use http_body_util::{Full, StreamBody};

    use super::*;

    fn chunks(
        parts: &[&'static str],
    ) -> StreamBody<impl futures_util::Stream<Item = Result<Frame<Bytes>, Infallible>> + Unpin>
    {
        let frames: Vec<_> = parts
            .iter()
            .map(|p| Ok(Frame::data(Bytes::from_static(p.as_bytes()))))
            .collect();
        StreamBody::new(futures_util::stream::iter(frames))
    }

    fn declared(len: u64) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_LENGTH, len.into());
        h
    }

    const SECOND: Duration = Duration::from_secs(1);

    #[tokio::test]
    async fn one_chunk_is_taken_as_it_came() {
        let chunk = Bytes::from_static(b"{\"challenge\":\"c\"}");
        let ptr = chunk.as_ptr();
        let got = read_whole(&declared(17), Full::new(chunk), 64, SECOND)
            .await
            .expect("read");
        assert_eq!(&got[..], b"{\"challenge\":\"c\"}");
        assert_eq!(got.as_ptr(), ptr, "the chunk itself, not a copy");
    }

    #[tokio::test]
    async fn several_chunks_are_joined_in_order() {
        let got = read_whole(&HeaderMap::new(), chunks(&["ab", "", "cd", "e"]), 5, SECOND)
            .await
            .expect("read");
        assert_eq!(&got[..], b"abcde");
        let empty = read_whole(&HeaderMap::new(), chunks(&[]), 5, SECOND).await;
        assert_eq!(&empty.expect("an empty body")[..], b"");
    }

    #[tokio::test]
    async fn too_long_is_refused_by_declaration_or_by_what_came() {
        let declared_over = read_whole(&declared(6), chunks(&["ab"]), 5, SECOND).await;
        assert!(matches!(
            declared_over,
            Err(ReadError::TooLarge { limit: 5 })
        ));
        let came_over = read_whole(&HeaderMap::new(), chunks(&["abc", "def"]), 5, SECOND).await;
        assert!(matches!(came_over, Err(ReadError::TooLarge { limit: 5 })));
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stalls_times_out() {
        let stalled =
            futures_util::stream::once(async { Ok(Frame::data(Bytes::from_static(b"a"))) }).chain(
                futures_util::stream::pending::<Result<Frame<Bytes>, Infallible>>(),
            );
        let started = tokio::time::Instant::now();
        let got = read_whole(
            &HeaderMap::new(),
            StreamBody::new(Box::pin(stalled)),
            64,
            SECOND,
        )
        .await;
        assert!(matches!(got, Err(ReadError::TooSlow(d)) if d == SECOND));
        assert_eq!(started.elapsed(), SECOND);
    }
}
