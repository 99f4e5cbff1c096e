//! Header values written on every request (the request id, the client's address), cut
//! from one per-thread buffer.
//!
//! `HeaderValue::from_bytes` copies into an allocation of its own, and its first clone
//! allocates again to share it; with two such values a request that was two allocations
//! in, two frees out, and two more for the clones. Slices of one shared buffer cost a
//! reference count instead. A buffer is freed when the last value cut from it is dropped.
//! Values live no longer than their request's head: whatever keeps one longer (the access
//! log's line, written when a stream ends) keeps a copy, so no chunk is held by a stream.

use std::cell::RefCell;

use bytes::BytesMut;
use http::HeaderValue;

/// One buffer's size: a hundred request ids or so.
const CHUNK: usize = 4 * 1024;

thread_local! {
    static BUFFER: RefCell<BytesMut> = RefCell::new(BytesMut::new());
}

/// `text` as a header value, or `None` if it is not one (a control character).
pub fn header_value(text: &[u8]) -> Option<HeaderValue> {
    BUFFER.with(|buffer| {
        let mut buffer = buffer.borrow_mut();
        if buffer.capacity() < text.len() {
            *buffer = BytesMut::with_capacity(CHUNK.max(text.len()));
        }
        buffer.extend_from_slice(text);
        HeaderValue::from_maybe_shared(buffer.split().freeze()).ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_their_text_and_outlive_their_buffer() {
        let first = header_value(b"abc").unwrap();
        let many: Vec<HeaderValue> = (0..CHUNK)
            .map(|i| header_value(i.to_string().as_bytes()).unwrap())
            .collect();
        assert_eq!(first, "abc");
        for (i, value) in many.iter().enumerate() {
            assert_eq!(value, i.to_string().as_str());
        }
        // Longer than a chunk, and refused.
        let long = vec![b'x'; CHUNK + 1];
        assert_eq!(header_value(&long).unwrap().as_bytes(), &long[..]);
        assert!(header_value(b"a\nb").is_none());
        assert_eq!(header_value(b"after").unwrap(), "after");
    }
}
