//! Reading a request body: at most [`MAX_BODY_BYTES`], in full within
//! `server.body_timeout`, so an admin call whose body is too large or stalls neither fills
//! memory nor holds its connection (RELIABILITY.md, F3). And reading a whole number out of
//! it the way the OpenAPI document's JSON Schema counts one.

use std::time::Duration;

use http::Request;
use hyper::body::Incoming;

use crate::http::read::{ReadError, read_whole};

use super::{AdminError, FieldError, MAX_BODY_BYTES};

/// The request body, at most [`MAX_BODY_BYTES`] (else 413, before reading when the
/// declared length says so), in full within `deadline` (else 408).
pub(super) async fn read_body(
    req: Request<Incoming>,
    deadline: Duration,
) -> Result<bytes::Bytes, AdminError> {
    let (parts, body) = req.into_parts();
    read_whole(&parts.headers, body, MAX_BODY_BYTES, deadline)
        .await
        .map_err(|e| match e {
            ReadError::TooLarge { .. } => AdminError::BodyTooLarge,
            ReadError::TooSlow(d) => AdminError::BodyTooSlow { secs: d.as_secs() },
            broken @ ReadError::Broken(_) => {
                AdminError::BadRequest(FieldError::new("body", broken.to_string()))
            }
        })
}

/// A JSON number as a whole number of at least 0, as JSON Schema's `integer` counts one:
/// `7` and `7.0` alike (a number with no fractional part), up to 2^53 when written with a
/// fraction, where every whole number is still exact.
pub(super) fn whole_number(v: &serde_json::Value) -> Option<u64> {
    const EXACT: f64 = 9_007_199_254_740_992.0;
    v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|f| f.fract() == 0.0 && (0.0..=EXACT).contains(f))
            .map(|f| f as u64)
    })
}
