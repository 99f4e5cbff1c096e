//! The one response body type every handler returns, so proxied streams, SSE and rendered
//! pages flow through the same server without boxing decisions scattered around.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full, combinators::BoxBody};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A streaming response body: proxied bytes, an SSE stream, or a rendered page.
pub type Body = BoxBody<Bytes, BoxError>;

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

pub fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed()
}
