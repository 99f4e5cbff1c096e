//! The proof of work at the door: the challenge's text format, its signature, and the
//! check of a solution. Pure functions of their arguments: the caller passes the time, the
//! client key and the room; this module never reads a clock and never touches the store.
//!
//! A challenge is the text
//!
//! ```text
//! c1.<room>.<issued at, unix seconds>.<bits>.<nonce>.<client tag>.<mac>
//! ```
//!
//! - `bits` is the difficulty: a solution is a counter `c` (u64) such that
//!   `SHA-256(nonce bytes || c as 8 bytes big-endian)` starts with at least `bits` zero
//!   bits ([`work()`]). The expected number of hashes is `2^bits`.
//! - `nonce` is 16 random bytes, base64url (22 characters). It is the challenge's id
//!   ([`Verified::id`]): a challenge can be used once, which the store enforces across
//!   replicas by remembering spent ids until [`Verified::expires_at_ms`]. The id is random,
//!   fixed-length and signed, so it is a safe store key as it is.
//! - `client tag` binds the challenge to the client key it was issued to without putting
//!   the address in the text: the first 12 bytes of an HMAC-SHA256 of the key under the
//!   secret (base64url, 16 characters).
//! - `mac` is HMAC-SHA256 under the secret of every character before `.<mac>`, base64url
//!   (43 characters). The `c1.` prefix keeps its inputs apart from every other MAC made
//!   with the same secret (the visitor cookie's binary header, the grants' `v1.` text).
//!
//! Nothing is kept per challenge until it is solved: any replica that has the secret
//! verifies any replica's challenge. Verification costs two HMACs and one SHA-256, about a
//! microsecond; why SHA-256 and not a memory-hard function is measured in
//! docs/challenge.md.

mod config;
mod work;

use std::fmt;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

pub use config::{ChallengeConfig, ChallengeMode, MAX_DIFFICULTY, MAX_NO_JS_WAIT, MIN_NO_JS_WAIT};
pub use work::{leading_zero_bits, meets, solve, work};

type HmacSha256 = Hmac<Sha256>;

/// The format's version, first in the text.
const VERSION: &str = "c1";
/// Bytes of the nonce (the challenge's id).
pub const NONCE_LEN: usize = 16;
/// Bytes of the client tag.
const TAG_LEN: usize = 12;
/// The longest room name a challenge carries (the visitor cookie's).
pub const MAX_ROOM_LEN: usize = crate::token::MAX_ROOM_LEN;
/// The longest challenge text worth parsing: version, room, issue time (20 digits), bits,
/// nonce (22), tag (16), MAC (43) and the dots. Anything longer is refused before any work.
const MAX_LEN: usize = 2 + MAX_ROOM_LEN + 20 + 2 + 22 + 16 + 43 + 6;

/// The base difficulty in bits, measured (docs/challenge.md): headless Chromium with 4x
/// CPU throttling solves it in under 2 s at the 95th percentile.
pub const DEFAULT_BITS: u8 = 17;
/// The most bits a challenge may ask for: about 4 · 10⁹ hashes, minutes in a browser.
/// More would be a dead end, never a cost.
pub const MAX_BITS: u8 = 32;
/// How long after its issue a challenge may be solved: long enough for a slow phone and
/// the no-JavaScript time lock, short enough that a spent id is remembered briefly.
pub const TTL: Duration = Duration::from_secs(5 * 60);
/// How far in the future a challenge's issue time may lie (clock skew between replicas).
pub const CLOCK_SKEW: Duration = Duration::from_secs(60);

/// The difficulty for a client: [`DEFAULT_BITS`], plus the room's extra `difficulty`,
/// plus one bit (twice the work) per strike, capped at [`MAX_BITS`].
pub fn bits_for(difficulty: u8, strikes: u32) -> u8 {
    let bits = u32::from(DEFAULT_BITS)
        .saturating_add(u32::from(difficulty))
        .saturating_add(strikes);
    bits.min(u32::from(MAX_BITS)) as u8
}

/// Why a solution is refused. Each is a failed challenge on the request path; the reason
/// is for the log and the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChallengeError {
    /// Not a `c1` challenge, a field out of range, or too long to be one.
    #[error("not a challenge (c1.<room>.<issued>.<bits>.<nonce>.<tag>.<mac>)")]
    Malformed,
    /// The MAC does not verify under the secret: tampered or forged.
    #[error("the challenge's signature does not match")]
    BadSignature,
    /// Issued for another room.
    #[error("the challenge is for another room")]
    WrongRoom,
    /// Issued to another client key.
    #[error("the challenge was issued to another client")]
    WrongClient,
    /// Issued longer ago than the time to live.
    #[error("the challenge has expired")]
    Expired,
    /// Issued more than [`CLOCK_SKEW`] in the future.
    #[error("the challenge was issued in the future")]
    FromTheFuture,
    /// The counter's hash has fewer leading zero bits than the challenge asks for.
    #[error("the solution does not do the work asked for")]
    InsufficientWork,
}

impl ChallengeError {
    /// The refusal's `reason` as the wire and the metrics name it. A challenge issued in
    /// the future is out of its time window like an expired one: `expired`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChallengeError::Malformed => "malformed",
            ChallengeError::BadSignature => "bad_signature",
            ChallengeError::WrongRoom => "wrong_room",
            ChallengeError::WrongClient => "wrong_client",
            ChallengeError::Expired | ChallengeError::FromTheFuture => "expired",
            ChallengeError::InsufficientWork => "insufficient_work",
        }
    }
}

/// What the caller expects of a challenge: the room asked for, the client asking, the time.
#[derive(Clone, Copy, Debug)]
pub struct Expected<'a> {
    /// The room the solution is submitted to.
    pub room: &'a str,
    /// The client key of the request (see `identity::ClientKey::to_bytes`).
    pub client: [u8; 16],
    /// Unix milliseconds now.
    pub now_ms: u64,
    /// How long after its issue a challenge may be solved.
    pub ttl: Duration,
}

/// A challenge whose signature, room, client, age and work all checked out. Whether its id
/// is still unspent is the store's to say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified<'a> {
    /// The challenge's one-time id (the nonce, base64url), borrowed from the challenge's
    /// text: the store remembers it as spent until [`Verified::expires_at_ms`].
    pub id: &'a str,
    /// The difficulty it was solved at, in bits.
    pub bits: u8,
    /// Unix seconds it was issued at.
    pub issued_at: u64,
    /// Unix milliseconds after which it no longer verifies.
    pub expires_at_ms: u64,
}

impl Verified<'_> {
    /// The one-time id.
    pub fn id(&self) -> &str {
        self.id
    }

    /// Unix milliseconds after which the challenge no longer verifies, so its spent id can
    /// be forgotten.
    pub fn expires_at_ms(&self) -> u64 {
        self.expires_at_ms
    }
}

/// An issued challenge: the text to hand the client, and the parts the waiting page's
/// worker needs to solve it without parsing the text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issued {
    /// The signed text, submitted back with the counter.
    pub text: String,
    /// The nonce's 16 bytes: the start of every hash input.
    pub nonce: [u8; NONCE_LEN],
    /// The leading zero bits asked for.
    pub bits: u8,
}

/// The secret challenges are signed with.
#[derive(Clone)]
pub struct ChallengeKey {
    mac: HmacSha256,
}

impl fmt::Debug for ChallengeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the secret.
        f.write_str("ChallengeKey(..)")
    }
}

impl ChallengeKey {
    /// A key from the room's secret. The length rule (≥ 32 bytes) is the config's.
    pub fn new(secret: &[u8]) -> Self {
        ChallengeKey {
            mac: HmacSha256::new_from_slice(secret).expect("HMAC accepts keys of any length"),
        }
    }

    /// The id the shadow line shows `client` (its page's reference): the same on every
    /// request and every replica, as a real visitor's is across reloads, never stored, and
    /// not the client's address.
    pub fn shadow_id(&self, client: &[u8; 16]) -> [u8; 16] {
        let mut mac = self.mac.clone();
        mac.update(b"anteroom shadow visitor\0");
        mac.update(client);
        let mut id = [0u8; 16];
        id.copy_from_slice(&mac.finalize().into_bytes()[..16]);
        id
    }

    fn client_tag(&self, client: &[u8; 16]) -> [u8; TAG_LEN] {
        let mut mac = self.mac.clone();
        mac.update(b"anteroom challenge client\0");
        mac.update(client);
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&mac.finalize().into_bytes()[..TAG_LEN]);
        tag
    }

    /// A challenge for `client` in `room` at `bits`, issued at `now_ms`, with `nonce`
    /// (16 random bytes: [`random_nonce`]).
    ///
    /// # Panics
    ///
    /// If `room` is not a valid room name (`token::is_valid_room`), or `bits` is
    /// above [`MAX_BITS`]: the config validates room names and [`bits_for`] caps the bits,
    /// so either is a programming error.
    pub fn issue(
        &self,
        room: &str,
        client: &[u8; 16],
        bits: u8,
        now_ms: u64,
        nonce: [u8; NONCE_LEN],
    ) -> Issued {
        assert!(room_ok(room), "invalid room name {room:?}");
        assert!(bits <= MAX_BITS, "{bits} bits is above MAX_BITS");
        let payload = format!(
            "{VERSION}.{room}.{}.{bits}.{}.{}",
            now_ms / 1000,
            URL_SAFE_NO_PAD.encode(nonce),
            URL_SAFE_NO_PAD.encode(self.client_tag(client)),
        );
        let mut mac = self.mac.clone();
        mac.update(payload.as_bytes());
        let sig = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
        Issued {
            text: format!("{payload}.{sig}"),
            nonce,
            bits,
        }
    }

    /// Checks `counter` as the solution of challenge `text` for `expected`: format,
    /// signature (constant time), room, client, age, then the work. Any input is safe:
    /// garbage is an `Err`, and nothing is hashed for a text longer than a challenge.
    pub fn verify<'t>(
        &self,
        text: &'t str,
        counter: u64,
        expected: &Expected<'_>,
    ) -> Result<Verified<'t>, ChallengeError> {
        let (verified, nonce) = self.signed(text, expected)?;
        if !meets(&work(&nonce, counter), verified.bits) {
            return Err(ChallengeError::InsufficientWork);
        }
        Ok(verified)
    }

    /// Checks challenge `text` for `expected` as [`ChallengeKey::verify`] does but for the
    /// work, and that `wait` has passed since it was issued: the no-JavaScript time lock,
    /// where waiting stands in for the work. `Ok(Err(left))` while the lock still holds,
    /// with the time left.
    pub fn verify_waited<'t>(
        &self,
        text: &'t str,
        wait: Duration,
        expected: &Expected<'_>,
    ) -> Result<Result<Verified<'t>, Duration>, ChallengeError> {
        let (verified, _) = self.signed(text, expected)?;
        let opens_ms = verified
            .issued_at
            .saturating_mul(1000)
            .saturating_add(crate::clock::ms(wait));
        if expected.now_ms < opens_ms {
            return Ok(Err(Duration::from_millis(opens_ms - expected.now_ms)));
        }
        Ok(Ok(verified))
    }

    /// Everything of a check but the work: format, signature, room, client, age. Returns
    /// the verified challenge and its nonce's bytes.
    fn signed<'t>(
        &self,
        text: &'t str,
        expected: &Expected<'_>,
    ) -> Result<(Verified<'t>, [u8; NONCE_LEN]), ChallengeError> {
        if text.len() > MAX_LEN {
            return Err(ChallengeError::Malformed);
        }
        let mut parts = text.split('.');
        let (
            Some(version),
            Some(room),
            Some(issued),
            Some(bits),
            Some(nonce),
            Some(tag),
            Some(sig),
            None,
        ) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        )
        else {
            return Err(ChallengeError::Malformed);
        };
        if version != VERSION || !room_ok(room) {
            return Err(ChallengeError::Malformed);
        }
        let issued_at = digits(issued, 20).ok_or(ChallengeError::Malformed)?;
        let bits = digits(bits, 2)
            .and_then(|b| u8::try_from(b).ok())
            .filter(|b| *b <= MAX_BITS)
            .ok_or(ChallengeError::Malformed)?;
        let nonce_bytes: [u8; NONCE_LEN] = decode(nonce).ok_or(ChallengeError::Malformed)?;
        let tag_bytes: [u8; TAG_LEN] = decode(tag).ok_or(ChallengeError::Malformed)?;
        let sig_bytes: [u8; 32] = decode(sig).ok_or(ChallengeError::BadSignature)?;
        let mut mac = self.mac.clone();
        mac.update(&text.as_bytes()[..text.len() - sig.len() - 1]);
        mac.verify_slice(&sig_bytes)
            .map_err(|_| ChallengeError::BadSignature)?;
        if room != expected.room {
            return Err(ChallengeError::WrongRoom);
        }
        let own_tag = self.client_tag(&expected.client);
        if !bool::from(subtle::ConstantTimeEq::ct_eq(&own_tag[..], &tag_bytes[..])) {
            return Err(ChallengeError::WrongClient);
        }
        let issued_ms = issued_at.saturating_mul(1000);
        if issued_ms > expected.now_ms.saturating_add(crate::clock::ms(CLOCK_SKEW)) {
            return Err(ChallengeError::FromTheFuture);
        }
        let expires_at_ms = issued_ms.saturating_add(crate::clock::ms(expected.ttl));
        if expected.now_ms >= expires_at_ms {
            return Err(ChallengeError::Expired);
        }
        Ok((
            Verified {
                id: nonce,
                bits,
                issued_at,
                expires_at_ms,
            },
            nonce_bytes,
        ))
    }
}

/// A fresh, unpredictable nonce from this thread's cryptographically secure generator
/// (as a visitor's id is made: `VisitorId::random`).
pub fn random_nonce() -> [u8; NONCE_LEN] {
    let mut bytes = [0u8; NONCE_LEN];
    rand::RngCore::fill_bytes(&mut rand::rng(), &mut bytes);
    bytes
}

/// A room name a challenge can carry: a valid room name (1 to 64 characters of
/// `[A-Za-z0-9_-]`, as the visitor cookie's), so never the `.` separator.
fn room_ok(room: &str) -> bool {
    room.len() <= MAX_ROOM_LEN && crate::token::is_valid_room(room)
}

/// Decimal digits only (no sign, no spaces), at most `max` of them, so one number has one
/// spelling.
fn digits(s: &str, max: usize) -> Option<u64> {
    if s.is_empty() || s.len() > max || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Base64url of exactly `N` bytes (at most 32), decoded on the stack.
fn decode<const N: usize>(s: &str) -> Option<[u8; N]> {
    if N > 32 || s.len() != (N * 4).div_ceil(3) {
        return None;
    }
    // Room for the decoder's estimate (three bytes per four characters, rounded up).
    let mut buf = [0u8; 36];
    let n = URL_SAFE_NO_PAD.decode_slice(s, &mut buf).ok()?;
    if n != N {
        return None;
    }
    buf[..N].try_into().ok()
}

#[cfg(test)]
mod tests;
