//! The signed visitor cookie.
//!
//! The cookie value is URL-safe base64 (no padding) of:
//!
//! ```text
//! version (1) | key id (4) | visitor id (16) | issued at, unix seconds, big-endian (8) | room (1..=64) | HMAC-SHA256 (32)
//! ```
//!
//! The MAC covers every byte before it. The key id is the first four bytes of a SHA-256 of
//! the secret, so a cookie signed under one of the `previous_cookie_secrets` still verifies
//! while the secret rotates. The room needs no length byte: it is whatever lies between the
//! fixed header and the fixed-size MAC.
//!
//! The cookie only says who the visitor is; it never admits anyone. The store decides.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use http::header::{COOKIE, HeaderMap, HeaderValue};
use sha2::{Digest, Sha256};

use crate::visitor::VisitorId;

/// The cookie's name.
pub const COOKIE_NAME: &str = "ar_visitor";

/// A cookie issued longer ago than this is expired. Callers re-issue the cookie on every
/// waiting page, so for a visitor who stays it slides forward.
pub const MAX_AGE: Duration = Duration::from_secs(24 * 60 * 60);

/// How far in the future a cookie's issue time may lie (clock skew between replicas).
pub const CLOCK_SKEW: Duration = Duration::from_secs(60);

/// The longest room name a cookie can carry.
pub const MAX_ROOM_LEN: usize = 64;

const VERSION: u8 = 1;
const KEY_ID_LEN: usize = 4;
const MAC_LEN: usize = 32;
const HEADER_LEN: usize = 1 + KEY_ID_LEN + 16 + 8;
const MIN_RAW_LEN: usize = HEADER_LEN + 1 + MAC_LEN;
const MAX_RAW_LEN: usize = HEADER_LEN + MAX_ROOM_LEN + MAC_LEN;
/// Base64 without padding: 4 characters per 3 bytes, rounded up.
const MAX_ENCODED_LEN: usize = MAX_RAW_LEN.div_ceil(3) * 4;

type HmacSha256 = Hmac<Sha256>;

/// Why a cookie value was not accepted. Every one of them means "treat as no cookie"; the
/// distinction is for logs and for deciding whether it is a strike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CookieError {
    /// Not base64, the wrong length, an unknown version or an invalid room name.
    #[error("malformed visitor cookie")]
    Malformed,
    /// Signed under a key id that is neither the current nor a previous secret.
    #[error("visitor cookie signed under an unknown key")]
    UnknownKey,
    /// The key id is known but the MAC does not match: tampered or forged.
    #[error("visitor cookie has a bad signature")]
    BadSignature,
    /// Issued more than [`MAX_AGE`] ago.
    #[error("visitor cookie expired")]
    Expired,
    /// Issued more than [`CLOCK_SKEW`] in the future.
    #[error("visitor cookie issued in the future")]
    FromTheFuture,
}

/// What a verified cookie says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VisitorClaim {
    /// The visitor the cookie was issued to.
    pub visitor: VisitorId,
    /// The room the cookie is for.
    pub room: RoomName,
    /// Whole seconds: sub-second precision is dropped when the cookie is issued.
    pub issued_at: SystemTime,
}

/// The room a cookie names, held inline: a verified cookie costs no allocation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RoomName {
    len: u8,
    bytes: [u8; MAX_ROOM_LEN],
}

impl RoomName {
    /// `None` unless `bytes` is a valid room name (see [`is_valid_room`]).
    fn new(bytes: &[u8]) -> Option<RoomName> {
        let name = std::str::from_utf8(bytes)
            .ok()
            .filter(|r| is_valid_room(r))?;
        let mut room = RoomName {
            len: u8::try_from(name.len()).ok()?,
            bytes: [0; MAX_ROOM_LEN],
        };
        room.bytes[..name.len()].copy_from_slice(name.as_bytes());
        Some(room)
    }

    /// The room name as text.
    pub fn as_str(&self) -> &str {
        // Only `new` builds one, from a checked `str`.
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }
}

impl PartialEq<&str> for RoomName {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl fmt::Debug for RoomName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

struct Key {
    id: [u8; KEY_ID_LEN],
    mac: HmacSha256,
}

impl Key {
    fn new(secret: &[u8]) -> Self {
        let digest = Sha256::new()
            .chain_update(b"anteroom cookie key id\0")
            .chain_update(secret)
            .finalize();
        let mut id = [0u8; KEY_ID_LEN];
        id.copy_from_slice(&digest[..KEY_ID_LEN]);
        let mac = HmacSha256::new_from_slice(secret).expect("HMAC accepts keys of any length");
        Key { id, mac }
    }
}

/// The secrets cookies are signed and verified with: the current one signs, the current
/// and every previous one verify.
pub struct CookieKeys {
    /// `keys[0]` is the current secret.
    keys: Vec<Key>,
}

impl fmt::Debug for CookieKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print secrets; the key ids are harmless and help with rotation questions.
        let ids: Vec<String> = self.keys.iter().map(|k| hex::encode(k.id)).collect();
        f.debug_struct("CookieKeys").field("key_ids", &ids).finish()
    }
}

impl CookieKeys {
    /// Keys from the current secret and the previous ones still accepted. The length rule
    /// (≥ 32 bytes) is the config's to enforce.
    pub fn new<S: AsRef<[u8]>>(current: &[u8], previous: &[S]) -> Self {
        let mut keys = Vec::with_capacity(1 + previous.len());
        keys.push(Key::new(current));
        keys.extend(previous.iter().map(|s| Key::new(s.as_ref())));
        CookieKeys { keys }
    }

    /// The current key's id, hex (for logs).
    pub fn current_key_id(&self) -> String {
        hex::encode(self.keys[0].id)
    }

    /// A cookie value for `visitor` in `room`, signed under the current secret.
    ///
    /// # Panics
    ///
    /// If `room` is not a valid room name (see [`is_valid_room`]); the config validates
    /// room names, so this is a programming error.
    pub fn issue(&self, visitor: VisitorId, room: &str, issued_at: SystemTime) -> String {
        assert!(is_valid_room(room), "invalid room name {room:?}");
        let secs = issued_at
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let key = &self.keys[0];
        let mut raw = Vec::with_capacity(HEADER_LEN + room.len() + MAC_LEN);
        raw.push(VERSION);
        raw.extend_from_slice(&key.id);
        raw.extend_from_slice(&visitor.0);
        raw.extend_from_slice(&secs.to_be_bytes());
        raw.extend_from_slice(room.as_bytes());
        let mut mac = key.mac.clone();
        mac.update(&raw);
        raw.extend_from_slice(&mac.finalize().into_bytes());
        URL_SAFE_NO_PAD.encode(raw)
    }

    /// Checks a cookie value's signature and age. Any input is safe: garbage is an `Err`.
    pub fn verify(&self, value: &str, now: SystemTime) -> Result<VisitorClaim, CookieError> {
        if value.len() > MAX_ENCODED_LEN {
            return Err(CookieError::Malformed);
        }
        // Decoded on the stack: this runs on every request of every admitted visitor.
        let mut buf = [0u8; MAX_ENCODED_LEN / 4 * 3];
        let len = URL_SAFE_NO_PAD
            .decode_slice(value, &mut buf)
            .map_err(|_| CookieError::Malformed)?;
        let raw = &buf[..len];
        if raw.len() < MIN_RAW_LEN || raw.len() > MAX_RAW_LEN || raw[0] != VERSION {
            return Err(CookieError::Malformed);
        }
        let (signed, tag) = raw.split_at(raw.len() - MAC_LEN);
        let key_id = &signed[1..1 + KEY_ID_LEN];

        // Key ids are four bytes, so two secrets could share one: try each that matches.
        let mut known = false;
        let mut valid = false;
        for key in self.keys.iter().filter(|k| k.id == key_id) {
            known = true;
            let mut mac = key.mac.clone();
            mac.update(signed);
            if mac.verify_slice(tag).is_ok() {
                valid = true;
                break;
            }
        }
        if !known {
            return Err(CookieError::UnknownKey);
        }
        if !valid {
            return Err(CookieError::BadSignature);
        }

        let mut visitor = [0u8; 16];
        visitor.copy_from_slice(&signed[1 + KEY_ID_LEN..1 + KEY_ID_LEN + 16]);
        let mut secs = [0u8; 8];
        secs.copy_from_slice(&signed[1 + KEY_ID_LEN + 16..HEADER_LEN]);
        let secs = u64::from_be_bytes(secs);
        let room = RoomName::new(&signed[HEADER_LEN..]).ok_or(CookieError::Malformed)?;
        let issued_at = UNIX_EPOCH
            .checked_add(Duration::from_secs(secs))
            .ok_or(CookieError::FromTheFuture)?;

        match now.duration_since(issued_at) {
            Ok(age) if age > MAX_AGE => return Err(CookieError::Expired),
            Ok(_) => {}
            Err(ahead) if ahead.duration() > CLOCK_SKEW => {
                return Err(CookieError::FromTheFuture);
            }
            Err(_) => {}
        }

        Ok(VisitorClaim {
            visitor: VisitorId(visitor),
            room,
            issued_at,
        })
    }
}

/// A room name a cookie can carry: 1 to 64 characters of `[A-Za-z0-9_-]`.
pub fn is_valid_room(room: &str) -> bool {
    !room.is_empty()
        && room.len() <= MAX_ROOM_LEN
        && room
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The `Set-Cookie` header value for a cookie value from [`CookieKeys::issue`].
pub fn set_cookie(value: &str, secure: bool) -> HeaderValue {
    let mut s = format!(
        "{COOKIE_NAME}={value}; Path=/; Max-Age={}; HttpOnly; SameSite=Lax",
        MAX_AGE.as_secs()
    );
    if secure {
        s.push_str("; Secure");
    }
    HeaderValue::try_from(s).unwrap_or_else(|_| {
        // Only a caller passing something other than an issued value can get here.
        HeaderValue::from_static("ar_visitor=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax")
    })
}

/// Splits one `Cookie` header into `(name, value)` pairs, trimming whitespace.
fn cookie_pairs(header: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    header.split(|&b| b == b';').filter_map(|pair| {
        let pair = pair.trim_ascii();
        if pair.is_empty() {
            return None;
        }
        Some(match pair.iter().position(|&b| b == b'=') {
            Some(i) => (pair[..i].trim_ascii(), pair[i + 1..].trim_ascii()),
            None => (pair, &pair[pair.len()..]),
        })
    })
}

/// Every `ar_visitor` value in the `Cookie` headers, in the order the browser sent them;
/// a value that is not visible ASCII is skipped (the other cookies of its header are not).
///
/// A browser can hold more than one: its own (host-only, set by anteroom) and one set for
/// the parent domain by a sibling subdomain ("cookie tossing"), which it may send first.
/// The caller looks for the one that verifies, so a tossed cookie can neither take a
/// visitor's place from them nor get them struck while their own is there.
pub fn visitor_cookies(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(COOKIE)
        .iter()
        // Split on bytes, as `strip_cookie` does: another cookie's non-ASCII value in the
        // same header (a browser sends them all in one) must not hide ours.
        .flat_map(|v| cookie_pairs(v.as_bytes()))
        .filter(|(name, _)| *name == COOKIE_NAME.as_bytes())
        // Ours is visible ASCII; a value that is not is not ours.
        .filter(|(_, value)| value.iter().all(|b| b.is_ascii_graphic()))
        .filter_map(|(_, value)| std::str::from_utf8(value).ok())
}

/// The first `ar_visitor` value in any `Cookie` header (see [`visitor_cookies`]).
pub fn find_cookie(headers: &HeaderMap) -> Option<&str> {
    visitor_cookies(headers).next()
}

/// Removes `ar_visitor` from every `Cookie` header, keeping the other cookies in order.
/// A header left empty is dropped; a header without `ar_visitor` is left byte for byte.
/// Works on bytes, so the cookie is stripped even from headers that are not ASCII.
pub fn strip_cookie(headers: &mut HeaderMap) {
    let has_ours = |v: &HeaderValue| {
        cookie_pairs(v.as_bytes()).any(|(name, _)| name == COOKIE_NAME.as_bytes())
    };
    // One pass over what is there: whether ours is, and whether it is all there is.
    let (mut values, mut pairs, mut ours) = (0, 0, false);
    for value in headers.get_all(COOKIE) {
        values += 1;
        for (name, _) in cookie_pairs(value.as_bytes()) {
            pairs += 1;
            ours |= name == COOKIE_NAME.as_bytes();
        }
    }
    if !ours {
        return;
    }
    // The usual case, an admitted visitor whose only cookie is ours: no rebuilding.
    if values == 1 && pairs == 1 {
        headers.remove(COOKIE);
        return;
    }
    let values: Vec<HeaderValue> = headers.get_all(COOKIE).iter().cloned().collect();
    headers.remove(COOKIE);
    for value in values {
        if !has_ours(&value) {
            headers.append(COOKIE, value);
            continue;
        }
        let mut kept: Vec<u8> = Vec::with_capacity(value.len());
        for pair in value
            .as_bytes()
            .split(|&b| b == b';')
            .map(<[u8]>::trim_ascii)
            .filter(|p| !p.is_empty())
        {
            let name = match pair.iter().position(|&b| b == b'=') {
                Some(i) => pair[..i].trim_ascii(),
                None => pair,
            };
            if name == COOKIE_NAME.as_bytes() {
                continue;
            }
            if !kept.is_empty() {
                kept.extend_from_slice(b"; ");
            }
            kept.extend_from_slice(pair);
        }
        if kept.is_empty() {
            continue;
        }
        if let Ok(v) = HeaderValue::from_bytes(&kept) {
            headers.append(COOKIE, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET_A: &[u8] = b"0123456789abcdef0123456789abcdef-a";
    const SECRET_B: &[u8] = b"0123456789abcdef0123456789abcdef-b";
    const SECRET_C: &[u8] = b"0123456789abcdef0123456789abcdef-c";
    const NO_PREVIOUS: &[&[u8]] = &[];

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    const T0: u64 = 1_750_000_000;

    fn visitor() -> VisitorId {
        VisitorId([7u8; 16])
    }

    #[test]
    fn token_round_trip() {
        let keys = CookieKeys::new(SECRET_A, NO_PREVIOUS);
        let v = VisitorId::random();
        let value = keys.issue(v, "main-room_1", at(T0));
        assert!(value.len() < 120, "compact: {} chars", value.len());
        assert!(
            value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
            "cookie-safe characters only: {value}"
        );
        let claim = keys.verify(&value, at(T0 + 10)).unwrap();
        assert_eq!(
            claim,
            VisitorClaim {
                visitor: v,
                room: RoomName::new(b"main-room_1").unwrap(),
                issued_at: at(T0)
            }
        );
        // Sub-second precision is dropped.
        let value = keys.issue(v, "r", at(T0) + Duration::from_millis(900));
        assert_eq!(keys.verify(&value, at(T0)).unwrap().issued_at, at(T0));
    }

    #[test]
    fn token_longest_room() {
        let keys = CookieKeys::new(SECRET_A, NO_PREVIOUS);
        let room = "r".repeat(MAX_ROOM_LEN);
        let value = keys.issue(visitor(), &room, at(T0));
        assert!(value.len() <= MAX_ENCODED_LEN);
        assert_eq!(keys.verify(&value, at(T0)).unwrap().room.as_str(), room);
    }

    #[test]
    #[should_panic(expected = "invalid room name")]
    fn token_issue_rejects_bad_room() {
        CookieKeys::new(SECRET_A, NO_PREVIOUS).issue(visitor(), "bad room", at(T0));
    }

    #[test]
    fn token_rotation() {
        let old = CookieKeys::new(SECRET_A, NO_PREVIOUS);
        let value = old.issue(visitor(), "main", at(T0));

        let rotating = CookieKeys::new(SECRET_B, &[SECRET_C, SECRET_A]);
        assert_eq!(rotating.verify(&value, at(T0)).unwrap().visitor, visitor());
        // New cookies are signed under the new secret, which the old keys do not know.
        let fresh = rotating.issue(visitor(), "main", at(T0));
        assert_eq!(old.verify(&fresh, at(T0)), Err(CookieError::UnknownKey));

        let rotated = CookieKeys::new(SECRET_B, &[SECRET_C]);
        assert_eq!(rotated.verify(&value, at(T0)), Err(CookieError::UnknownKey));
        assert!(rotated.verify(&fresh, at(T0)).is_ok());

        // Owned secrets work too.
        let owned: Vec<Vec<u8>> = vec![SECRET_A.to_vec()];
        assert!(
            CookieKeys::new(SECRET_B, &owned)
                .verify(&value, at(T0))
                .is_ok()
        );
    }

    #[test]
    fn token_debug_hides_secrets() {
        let keys = CookieKeys::new(SECRET_A, &[SECRET_B]);
        let debug = format!("{keys:?}");
        assert!(!debug.contains("0123456789abcdef"), "{debug}");
        assert!(debug.contains(&keys.current_key_id()));
    }

    #[test]
    fn token_every_tampered_byte_rejected() {
        let keys = CookieKeys::new(SECRET_A, NO_PREVIOUS);
        let value = keys.issue(visitor(), "main", at(T0));
        let raw = URL_SAFE_NO_PAD.decode(&value).unwrap();
        for i in 0..raw.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut bad = raw.clone();
                bad[i] ^= flip;
                let bad = URL_SAFE_NO_PAD.encode(&bad);
                assert!(
                    keys.verify(&bad, at(T0)).is_err(),
                    "byte {i} ^ {flip:#x} accepted"
                );
            }
        }
        // Every single-character change of the encoded form too.
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        for i in 0..value.len() {
            for &c in alphabet {
                let mut bad = value.clone().into_bytes();
                if bad[i] == c {
                    continue;
                }
                bad[i] = c;
                let bad = String::from_utf8(bad).unwrap();
                // The decoder rejects non-canonical trailing bits, so even the last
                // character's spare bits cannot be flipped.
                assert!(
                    keys.verify(&bad, at(T0)).is_err(),
                    "char {i} -> {c} accepted"
                );
            }
        }
    }

    #[test]
    fn token_tampered_signature_is_bad_signature() {
        let keys = CookieKeys::new(SECRET_A, NO_PREVIOUS);
        let mut raw = URL_SAFE_NO_PAD
            .decode(keys.issue(visitor(), "main", at(T0)))
            .unwrap();
        raw[HEADER_LEN] ^= 1; // the room, under the MAC
        assert_eq!(
            keys.verify(&URL_SAFE_NO_PAD.encode(&raw), at(T0)),
            Err(CookieError::BadSignature)
        );
        // A forger who knows the format but not the secret.
        let forger = CookieKeys::new(SECRET_B, NO_PREVIOUS);
        let mut forged = URL_SAFE_NO_PAD
            .decode(forger.issue(visitor(), "main", at(T0)))
            .unwrap();
        forged[1..1 + KEY_ID_LEN].copy_from_slice(&keys.keys[0].id);
        assert_eq!(
            keys.verify(&URL_SAFE_NO_PAD.encode(&forged), at(T0)),
            Err(CookieError::BadSignature)
        );
    }

    #[test]
    fn token_expired() {
        let keys = CookieKeys::new(SECRET_A, NO_PREVIOUS);
        let value = keys.issue(visitor(), "main", at(T0));
        let max = MAX_AGE.as_secs();
        assert!(keys.verify(&value, at(T0 + max)).is_ok());
        assert_eq!(
            keys.verify(&value, at(T0 + max + 1)),
            Err(CookieError::Expired)
        );
        // Re-issuing slides the window.
        let again = keys.issue(visitor(), "main", at(T0 + max));
        assert!(keys.verify(&again, at(T0 + max + 1)).is_ok());
    }

    #[test]
    fn token_from_the_future() {
        let keys = CookieKeys::new(SECRET_A, NO_PREVIOUS);
        let value = keys.issue(visitor(), "main", at(T0 + CLOCK_SKEW.as_secs()));
        assert!(keys.verify(&value, at(T0)).is_ok(), "within the skew");
        let value = keys.issue(visitor(), "main", at(T0 + CLOCK_SKEW.as_secs() + 1));
        assert_eq!(keys.verify(&value, at(T0)), Err(CookieError::FromTheFuture));
        // The far future, where adding to the epoch would overflow.
        let value = keys.issue(
            visitor(),
            "main",
            UNIX_EPOCH + Duration::from_secs(u64::MAX / 2),
        );
        assert!(keys.verify(&value, at(T0)).is_err());
        // Before the epoch is clamped to the epoch, which is long expired.
        let value = keys.issue(visitor(), "main", UNIX_EPOCH - Duration::from_secs(5));
        assert_eq!(keys.verify(&value, at(T0)), Err(CookieError::Expired));
    }

    /// Builds a correctly signed raw cookie with arbitrary contents.
    fn sign_raw(keys: &CookieKeys, version: u8, room: &[u8]) -> String {
        let key = &keys.keys[0];
        let mut raw = vec![version];
        raw.extend_from_slice(&key.id);
        raw.extend_from_slice(&[7u8; 16]);
        raw.extend_from_slice(&T0.to_be_bytes());
        raw.extend_from_slice(room);
        let mut mac = key.mac.clone();
        mac.update(&raw);
        raw.extend_from_slice(&mac.finalize().into_bytes());
        URL_SAFE_NO_PAD.encode(raw)
    }

    #[test]
    fn token_garbage_inputs() {
        let keys = CookieKeys::new(SECRET_A, NO_PREVIOUS);
        let good = keys.issue(visitor(), "main", at(T0));
        let huge = "A".repeat(100 * 1024);
        let padded = format!("{good}=");
        let mut inputs: Vec<String> = vec![
            String::new(),
            " ".into(),
            "=".into(),
            "not base64!".into(),
            "ar_visitor".into(),
            "AAAA".into(),
            "é".repeat(40),
            huge,
            padded,
            format!(" {good}"),
            format!("{good}AA"),
            URL_SAFE_NO_PAD.encode([0u8; MAX_RAW_LEN + 1]),
            URL_SAFE_NO_PAD.encode([VERSION; MIN_RAW_LEN]),
            good.replace(|_: char| true, "+"),
        ];
        // Every truncation.
        for n in 0..good.len() {
            inputs.push(good[..n].to_owned());
        }
        for input in &inputs {
            assert!(keys.verify(input, at(T0)).is_err(), "accepted {input:?}");
        }
        // Correctly signed, but a wrong version or a bad room.
        for (version, room) in [
            (2u8, &b"main"[..]),
            (0, b"main"),
            (VERSION, b"bad room"),
            (VERSION, b"main/x"),
            (VERSION, "ma\u{e9}n".as_bytes()),
            (VERSION, &[0xff, 0xfe]),
            (VERSION, b""),
        ] {
            assert_eq!(
                keys.verify(&sign_raw(&keys, version, room), at(T0)),
                Err(CookieError::Malformed),
                "version {version} room {room:?}"
            );
        }
        assert!(
            keys.verify(&sign_raw(&keys, VERSION, b"ok_-9"), at(T0))
                .is_ok()
        );
    }

    #[test]
    fn token_room_names() {
        assert!(is_valid_room("a"));
        assert!(is_valid_room("Main_room-2"));
        assert!(is_valid_room(&"x".repeat(64)));
        assert!(!is_valid_room(&"x".repeat(65)));
        assert!(!is_valid_room(""));
        assert!(!is_valid_room("a.b"));
        assert!(!is_valid_room("a b"));
        assert!(!is_valid_room("é"));
    }

    #[test]
    fn token_set_cookie() {
        let v = set_cookie("abc_-1", false);
        assert_eq!(
            v.to_str().unwrap(),
            "ar_visitor=abc_-1; Path=/; Max-Age=86400; HttpOnly; SameSite=Lax"
        );
        let v = set_cookie("abc", true);
        assert!(
            v.to_str()
                .unwrap()
                .ends_with("; HttpOnly; SameSite=Lax; Secure")
        );
        // Nonsense never panics.
        let v = set_cookie("a\nb", true);
        assert!(v.to_str().unwrap().contains("Max-Age=0"));
    }

    fn cookie_headers(values: &[&[u8]]) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(http::header::HOST, HeaderValue::from_static("example.com"));
        for v in values {
            h.append(COOKIE, HeaderValue::from_bytes(v).unwrap());
        }
        h
    }

    fn cookies(h: &HeaderMap) -> Vec<&[u8]> {
        h.get_all(COOKIE).iter().map(|v| v.as_bytes()).collect()
    }

    #[test]
    fn token_find_cookie() {
        assert_eq!(find_cookie(&HeaderMap::new()), None);
        let h = cookie_headers(&[b"a=1; b=2", b"xar_visitor=evil;ar_visitor_x=no; c=3"]);
        assert_eq!(find_cookie(&h), None);
        let h = cookie_headers(&[
            b"a=1; b=2",
            b"xar_visitor=evil;   ar_visitor =  good ;c=3",
            b"ar_visitor=later",
        ]);
        assert_eq!(find_cookie(&h), Some("good"));
        let h = cookie_headers(&[b"ar_visitor=first", b"ar_visitor=second"]);
        assert_eq!(find_cookie(&h), Some("first"));
        // Every one, in order (a tossed cookie beside the visitor's own).
        let h = cookie_headers(&[
            b"ar_visitor=tossed; a=1; ar_visitor=own",
            b"ar_visitor=third",
        ]);
        assert_eq!(
            visitor_cookies(&h).collect::<Vec<_>>(),
            ["tossed", "own", "third"]
        );
        // A value of ours that is not ASCII is skipped; the next still counts.
        let h = cookie_headers(&[b"ar_visitor=\xe9\xe9", b"a=1;ar_visitor=ok"]);
        assert_eq!(find_cookie(&h), Some("ok"));
        // Another cookie's non-ASCII value (a tossed `x=\xe9`) does not hide ours in the
        // same header.
        let h = cookie_headers(&[b"x=\xe9; ar_visitor=own; y=\xff"]);
        assert_eq!(find_cookie(&h), Some("own"));
        // Odd shapes.
        let h = cookie_headers(&[b";;ar_visitor;", b" ; ar_visitor=v=w "]);
        assert_eq!(find_cookie(&h), Some(""));
        let h = cookie_headers(&[b" ; ar_visitor=v=w "]);
        assert_eq!(find_cookie(&h), Some("v=w"));
    }

    #[test]
    fn token_strip_cookie() {
        let mut h = cookie_headers(&[
            b"a=1; ar_visitor=x; b=2",
            b"ar_visitor=y",
            b"c=3;d=4",
            b"xar_visitor=keep;  ar_visitor = z ;e=5",
            b"ar_visitor=\xe9; f=6",
        ]);
        strip_cookie(&mut h);
        assert_eq!(
            cookies(&h),
            vec![
                &b"a=1; b=2"[..],
                b"c=3;d=4",
                b"xar_visitor=keep; e=5",
                b"f=6"
            ]
        );
        assert_eq!(find_cookie(&h), None);
        assert_eq!(h.get(http::header::HOST).unwrap(), "example.com");

        // Nothing of ours: untouched, byte for byte.
        let mut h = cookie_headers(&[b"a=1;  b=2", b"xar_visitor=1"]);
        strip_cookie(&mut h);
        assert_eq!(cookies(&h), vec![&b"a=1;  b=2"[..], b"xar_visitor=1"]);

        // Only ours: the header goes.
        let mut h = cookie_headers(&[b"ar_visitor=1", b" ar_visitor=2 ; "]);
        strip_cookie(&mut h);
        assert!(h.get(COOKIE).is_none());
        assert_eq!(h.len(), 1);
        for only in [&b"ar_visitor=1"[..], b" ar_visitor=1 ; "] {
            let mut h = cookie_headers(&[only]);
            strip_cookie(&mut h);
            assert!(h.get(COOKIE).is_none(), "{only:?}");
            assert_eq!(h.len(), 1);
        }
        // One header, ours and another: the other stays.
        let mut h = cookie_headers(&[b"ar_visitor=1; a=2"]);
        strip_cookie(&mut h);
        assert_eq!(cookies(&h), vec![&b"a=2"[..]]);

        let mut h = HeaderMap::new();
        strip_cookie(&mut h);
        assert!(h.is_empty());
    }

    #[test]
    fn token_find_then_verify() {
        let keys = CookieKeys::new(SECRET_A, NO_PREVIOUS);
        let value = keys.issue(visitor(), "main", at(T0));
        let set = set_cookie(&value, true);
        // What a browser sends back: the name=value part of Set-Cookie.
        let pair = set.to_str().unwrap().split(';').next().unwrap().to_owned();
        let h = cookie_headers(&[format!("theme=dark; {pair}").as_bytes()]);
        let found = find_cookie(&h).unwrap();
        assert_eq!(keys.verify(found, at(T0)).unwrap().room.as_str(), "main");
    }
}
