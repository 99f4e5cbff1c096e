//! The work function: SHA-256 of the nonce and a counter, and its leading zero bits.

use sha2::{Digest, Sha256};

use super::NONCE_LEN;

/// `SHA-256(nonce || counter as 8 bytes big-endian)`: the hash a solution is judged by.
pub fn work(nonce: &[u8; NONCE_LEN], counter: u64) -> [u8; 32] {
    let mut input = [0u8; NONCE_LEN + 8];
    input[..NONCE_LEN].copy_from_slice(nonce);
    input[NONCE_LEN..].copy_from_slice(&counter.to_be_bytes());
    Sha256::digest(input).into()
}

/// How many zero bits `hash` starts with.
pub fn leading_zero_bits(hash: &[u8]) -> u32 {
    let mut n = 0;
    for b in hash {
        if *b != 0 {
            return n + b.leading_zeros();
        }
        n += 8;
    }
    n
}

/// Whether `hash` starts with at least `bits` zero bits.
pub fn meets(hash: &[u8; 32], bits: u8) -> bool {
    leading_zero_bits(hash) >= u32::from(bits)
}

/// The smallest counter that solves `nonce` at `bits`, searched from 0 (what the waiting
/// page's worker does, here for tests and tools).
pub fn solve(nonce: &[u8; NONCE_LEN], bits: u8) -> u64 {
    (0..=u64::MAX)
        .find(|c| meets(&work(nonce, *c), bits))
        .unwrap_or(u64::MAX)
}
