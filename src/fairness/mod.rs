//! Fairness you can verify (docs/fairness.md): the self-contained pieces that let visitors,
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
