//! SPEC §14, "fairness you can verify": the self-contained pieces that let visitors,
//! operators and origins check anteroom's claims. Each piece is a pure component with its
//! own tests; the request path uses the admission token (`gate::respond`) and the draw
//! (`gate::draw`: the public document and receipts); admission keeps the honest-ETA ledger
//! (`admission/`: room stats, metrics) and drives the adaptive controller
//! (`Admission::adapt`, fed by `gate::classes`'s admitted requests, its effective rate
//! applied by the store).
//!
//! - [`admission_token`] — the Ed25519-signed `X-Anteroom-Admission` header and its key.
//! - [`draw`] — the auditable lottery: commitment, draw hashes, places, the published
//!   document, and the checks behind `anteroom verify-draw`.
//! - [`eta`] — the honest-ETA tracker (was the range first shown right?).
//! - [`adaptive`] — the closed-loop admission controller (AIMD on origin latency/errors).

pub mod adaptive;
pub mod admission_token;
pub mod draw;
pub mod eta;

use sha2::{Digest, Sha256};

use crate::visitor::VisitorId;

/// A visitor's public reference: 16 hex characters derived from their id by a one-way
/// hash. It names a visitor in the admission token and on the draw receipt without giving
/// away the id itself (which, with the cookie, is what proves a place in line).
pub fn visitor_ref(visitor: VisitorId) -> String {
    let digest = Sha256::new()
        .chain_update(b"anteroom/visitor-ref/v1\0")
        .chain_update(visitor.0)
        .finalize();
    hex::encode(&digest[..8])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn visitor_ref_is_stable_short_and_not_the_id() {
        let v = VisitorId([7; 16]);
        let r = visitor_ref(v);
        assert_eq!(r.len(), 16);
        assert_eq!(r, visitor_ref(v));
        assert!(!v.to_hex().contains(&r));
        assert_ne!(r, visitor_ref(VisitorId([8; 16])));
    }
}
