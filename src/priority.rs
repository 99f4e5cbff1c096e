//! Priority grants: the text format `v1.<room>.<expiry>.<nonce>.<mac>`,
//! its verification against `priority_secret`, and minting (`anteroom grant`). That each
//! nonce works once is the store's part (`queue::QueueStore::spend_grant`), so it
//! holds across replicas; this module never touches the store and never reads the clock
//! (callers pass the time), so every rule here is a pure function.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The query parameter a grant may be carried in. Removed before the origin.
pub const GRANT_PARAM: &str = "ar_grant";
/// The header a grant may be carried in. Removed before the origin.
pub const GRANT_HEADER: http::HeaderName = http::HeaderName::from_static("x-anteroom-grant");

/// The only version of the format.
const VERSION: &str = "v1";

/// How far ahead a grant's expiry may lie. The store keeps each spent nonce until its
/// expiry, so an unbounded expiry would be memory (or Redis keys) kept for ever; a grant is
/// a fast lane for a visit soon, not a season ticket.
pub const MAX_GRANT_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// Nonce length bounds (characters of `[A-Za-z0-9_-]`), as the format fixes them.
pub const MIN_NONCE: usize = 16;
/// The longest nonce accepted, in characters.
pub const MAX_NONCE: usize = 64;

/// The longest grant text worth parsing: room (64) + expiry (20) + nonce (64) + mac (43)
/// + version and dots. Anything longer is refused before any work.
const MAX_GRANT_LEN: usize = 256;

/// A grant that verified: its signature, room and expiry are good. Whether its nonce is
/// still unspent is the store's to say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The room the grant admits to.
    pub room: String,
    /// Unix seconds.
    pub expires_at: u64,
    /// The grant's one-time id: the store remembers it as spent until `expires_at`.
    pub nonce: String,
}

impl Grant {
    /// The expiry in unix milliseconds, as the store keeps the spent nonce until then.
    pub fn expires_at_ms(&self) -> u64 {
        self.expires_at.saturating_mul(1000)
    }
}

/// Why a grant is refused (all are 403 on the request path; the reason goes to the log).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    /// Not `v1.<room>.<expiry>.<nonce>.<mac>`, or too long to be one.
    #[error("not a v1 grant (v1.<room>.<expiry>.<nonce>.<mac>)")]
    Malformed,
    /// The nonce's length or alphabet is wrong.
    #[error("the nonce must be 16 to 64 characters of [A-Za-z0-9_-]")]
    BadNonce,
    /// The MAC does not verify under `priority_secret`.
    #[error("the signature does not match priority_secret")]
    Forged,
    /// Signed for a different room than the one asked for.
    #[error("the grant is for another room")]
    WrongRoom,
    /// Its expiry has passed.
    #[error("the grant has expired")]
    Expired,
    /// Its expiry is more than [`MAX_GRANT_TTL`] ahead.
    #[error("the grant expires more than 7 days ahead")]
    TooFarAhead,
    /// Its nonce was already spent by another visitor.
    #[error("the grant was already used")]
    Replayed,
}

impl GrantError {
    /// A short machine-readable name, for logs and metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            GrantError::Malformed => "malformed",
            GrantError::BadNonce => "bad_nonce",
            GrantError::Forged => "forged",
            GrantError::WrongRoom => "wrong_room",
            GrantError::Expired => "expired",
            GrantError::TooFarAhead => "too_far_ahead",
            GrantError::Replayed => "replayed",
        }
    }
}

fn nonce_ok(nonce: &str) -> bool {
    (MIN_NONCE..=MAX_NONCE).contains(&nonce.len())
        && nonce
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn mac_of(secret: &[u8], payload: &str) -> Hmac<Sha256> {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
    mac.update(payload.as_bytes());
    mac
}

/// Checks `text` as a grant for `room` at `now` (unix seconds) with `secret`: format, nonce,
/// signature (constant time), room, expiry. The signature is checked before the room, so a
/// forged grant is "forged" whatever room it names.
pub fn verify(secret: &[u8], text: &str, room: &str, now: u64) -> Result<Grant, GrantError> {
    let text = text.trim();
    if text.len() > MAX_GRANT_LEN {
        return Err(GrantError::Malformed);
    }
    let mut parts = text.split('.');
    let (Some(version), Some(g_room), Some(expiry), Some(nonce), Some(mac), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return Err(GrantError::Malformed);
    };
    if version != VERSION || g_room.is_empty() {
        return Err(GrantError::Malformed);
    }
    // Digits only: no sign, no spaces, no `+`, so one expiry has one spelling.
    if expiry.is_empty() || expiry.len() > 20 || !expiry.bytes().all(|b| b.is_ascii_digit()) {
        return Err(GrantError::Malformed);
    }
    let expires_at: u64 = expiry.parse().map_err(|_| GrantError::Malformed)?;
    if !nonce_ok(nonce) {
        return Err(GrantError::BadNonce);
    }
    let mac_bytes = URL_SAFE_NO_PAD
        .decode(mac)
        .map_err(|_| GrantError::Forged)?;
    let payload = &text[..text.len() - mac.len() - 1];
    mac_of(secret, payload)
        .verify_slice(&mac_bytes)
        .map_err(|_| GrantError::Forged)?;
    if g_room != room {
        return Err(GrantError::WrongRoom);
    }
    if expires_at <= now {
        return Err(GrantError::Expired);
    }
    if expires_at - now > MAX_GRANT_TTL.as_secs() {
        return Err(GrantError::TooFarAhead);
    }
    Ok(Grant {
        room: g_room.to_owned(),
        expires_at,
        nonce: nonce.to_owned(),
    })
}

/// The grant text for `room`, expiring at `expires_at` (unix seconds), with `nonce`.
pub fn mint(secret: &[u8], room: &str, expires_at: u64, nonce: &str) -> String {
    let payload = format!("{VERSION}.{room}.{expires_at}.{nonce}");
    let mac = URL_SAFE_NO_PAD.encode(mac_of(secret, &payload).finalize().into_bytes());
    format!("{payload}.{mac}")
}

/// A fresh nonce: 16 random bytes, base64url (22 characters of `[A-Za-z0-9_-]`).
pub fn random_nonce() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the operating system's random generator failed");
    URL_SAFE_NO_PAD.encode(bytes)
}

/// `anteroom grant --room R --ttl T`: a grant for `room` valid for `ttl` from `now` (unix
/// seconds), with a fresh nonce. `ttl` must be between 1 s and [`MAX_GRANT_TTL`].
pub fn mint_for(
    secret: &[u8],
    room: &str,
    ttl: Duration,
    now: u64,
) -> Result<String, crate::invalid::Invalid> {
    if ttl < Duration::from_secs(1) || ttl > MAX_GRANT_TTL {
        return Err(crate::invalid::Invalid(format!(
            "--ttl must be between 1s and 7d (got {})",
            humantime::format_duration(ttl)
        )));
    }
    Ok(mint(secret, room, now + ttl.as_secs(), &random_nonce()))
}

/// The grant a request carries: the `X-Anteroom-Grant` header, else the `ar_grant` query
/// parameter (percent-decoded; a grant has no characters that need encoding, but a client
/// may encode them anyway). `None` when neither is present.
pub fn carried<B>(req: &http::Request<B>) -> Option<String> {
    if let Some(v) = req.headers().get(&GRANT_HEADER) {
        return Some(String::from_utf8_lossy(v.as_bytes()).into_owned());
    }
    let query = req.uri().query()?;
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == GRANT_PARAM).then(|| percent_decode(v))
    })
}

/// Removes every `ar_grant` parameter from the query and the `X-Anteroom-Grant` header, so
/// the origin never sees a grant (it could be replayed from the origin's logs otherwise).
pub fn strip<B>(req: &mut http::Request<B>) {
    req.headers_mut().remove(GRANT_HEADER);
    let Some(query) = req.uri().query() else {
        return;
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| pair.split_once('=').map_or(*pair, |(k, _)| k) != GRANT_PARAM)
        .collect();
    if kept.len() == query.split('&').count() {
        return;
    }
    let path = req.uri().path();
    let path_and_query = if kept.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{}", kept.join("&"))
    };
    let mut parts = req.uri().clone().into_parts();
    match path_and_query.parse() {
        Ok(pq) => parts.path_and_query = Some(pq),
        // Unreachable: built from pieces of a valid URI. Leave the request unforwardable
        // rather than leak the grant.
        Err(_) => parts.path_and_query = Some(http::uri::PathAndQuery::from_static("/")),
    }
    if let Ok(uri) = http::Uri::from_parts(parts) {
        *req.uri_mut() = uri;
    }
}

/// `%XX` escapes decoded; anything else (a stray `%`) kept as it is.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match escaped {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"a priority secret of at least 32 bytes!!";
    const NOW: u64 = 1_800_000_000;

    fn good() -> String {
        mint(SECRET, "main", NOW + 600, "abcdefghijklmnop_-12")
    }

    #[test]
    fn a_minted_grant_verifies() {
        let g = verify(SECRET, &good(), "main", NOW).unwrap();
        assert_eq!(
            g,
            Grant {
                room: "main".into(),
                expires_at: NOW + 600,
                nonce: "abcdefghijklmnop_-12".into()
            }
        );
        assert_eq!(g.expires_at_ms(), (NOW + 600) * 1000);
        let fresh = mint_for(SECRET, "main", Duration::from_secs(600), NOW).unwrap();
        let g = verify(SECRET, &fresh, "main", NOW).unwrap();
        assert_eq!(g.nonce.len(), 22);
        assert_ne!(
            mint_for(SECRET, "main", Duration::from_secs(600), NOW).unwrap(),
            fresh,
            "every grant gets its own nonce"
        );
    }

    /// The format exactly as documented, computed independently of `mint`.
    #[test]
    fn the_mac_is_base64url_hmac_sha256_of_the_payload() {
        let payload = format!("v1.main.{}.abcdefghijklmnop_-12", NOW + 600);
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(SECRET).unwrap();
        mac.update(payload.as_bytes());
        let expect = format!(
            "{payload}.{}",
            URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
        );
        assert_eq!(good(), expect);
        assert!(!good().contains('='), "no padding");
    }

    #[test]
    fn a_forged_mac_is_refused() {
        let g = good();
        let (head, mac) = g.rsplit_once('.').unwrap();
        let mut flipped = mac.to_owned().into_bytes();
        flipped[0] = if flipped[0] == b'A' { b'B' } else { b'A' };
        let forged = format!("{head}.{}", String::from_utf8(flipped).unwrap());
        assert_eq!(
            verify(SECRET, &forged, "main", NOW),
            Err(GrantError::Forged)
        );
        assert_eq!(
            verify(b"another secret of at least 32 bytes!!!!", &g, "main", NOW),
            Err(GrantError::Forged)
        );
        // A changed expiry (or room, or nonce) breaks the signature.
        let later = g.replace(&(NOW + 600).to_string(), &(NOW + 6000).to_string());
        assert_eq!(verify(SECRET, &later, "main", NOW), Err(GrantError::Forged));
        assert_eq!(
            verify(SECRET, &format!("{head}.!!!"), "main", NOW),
            Err(GrantError::Forged)
        );
        assert_eq!(
            verify(SECRET, &format!("{head}."), "main", NOW),
            Err(GrantError::Forged)
        );
    }

    #[test]
    fn a_grant_for_another_room_is_refused() {
        let other = mint(SECRET, "shop", NOW + 600, "abcdefghijklmnop");
        assert_eq!(
            verify(SECRET, &other, "main", NOW),
            Err(GrantError::WrongRoom)
        );
        assert!(verify(SECRET, &other, "shop", NOW).is_ok());
    }

    #[test]
    fn an_expired_grant_is_refused() {
        let g = good();
        assert!(verify(SECRET, &g, "main", NOW + 599).is_ok());
        assert_eq!(
            verify(SECRET, &g, "main", NOW + 600),
            Err(GrantError::Expired)
        );
        assert_eq!(
            verify(SECRET, &g, "main", NOW + 10_000),
            Err(GrantError::Expired)
        );
        let far = mint(SECRET, "main", NOW + 8 * 24 * 3600, "abcdefghijklmnop");
        assert_eq!(
            verify(SECRET, &far, "main", NOW),
            Err(GrantError::TooFarAhead)
        );
        assert!(mint_for(SECRET, "main", Duration::from_secs(8 * 24 * 3600), NOW).is_err());
        assert!(mint_for(SECRET, "main", Duration::ZERO, NOW).is_err());
    }

    #[test]
    fn nonces_need_16_to_64_characters_of_the_alphabet() {
        for bad in [
            "short",
            "fifteen-chars-x",
            "has space in it..",
            "has+plus+in+it+xx",
            "has/slash/in/it/x",
            "ünïcödé-nonce-xxxx",
            &"x".repeat(65),
        ] {
            let g = mint(SECRET, "main", NOW + 600, bad);
            // A dot in the nonce makes it another shape entirely.
            let e = verify(SECRET, &g, "main", NOW).unwrap_err();
            assert!(
                matches!(e, GrantError::BadNonce | GrantError::Malformed),
                "{bad:?}: {e:?}"
            );
        }
        for ok in ["0123456789abcdef", &"Z".repeat(64), "AZaz09_-AZaz09_-"] {
            assert!(
                verify(SECRET, &mint(SECRET, "main", NOW + 600, ok), "main", NOW).is_ok(),
                "{ok}"
            );
        }
    }

    #[test]
    fn malformed_text_is_refused_without_panicking() {
        for bad in [
            "",
            ".",
            "....",
            "v1",
            "v2.main.1.abcdefghijklmnop.x",
            "v1..1800000600.abcdefghijklmnop.x",
            "v1.main.-5.abcdefghijklmnop.x",
            "v1.main.+5.abcdefghijklmnop.x",
            "v1.main.99999999999999999999999.abcdefghijklmnop.x",
            "v1.main.1800000600.abcdefghijklmnop.x.y",
            &"v1.".repeat(200),
        ] {
            assert_eq!(
                verify(SECRET, bad, "main", NOW),
                Err(GrantError::Malformed),
                "{bad:?}"
            );
        }
    }

    /// Verification is pure: replay is the store's to catch (`spend_grant`, tested by the
    /// conformance suite on both stores); the same text verifies each time it is asked.
    #[test]
    fn replay_is_left_to_the_store() {
        assert!(verify(SECRET, &good(), "main", NOW).is_ok());
        assert!(verify(SECRET, &good(), "main", NOW).is_ok());
        assert_eq!(GrantError::Replayed.as_str(), "replayed");
    }

    #[test]
    fn grants_are_found_and_stripped_in_query_and_header() {
        let req = http::Request::get("/shop?a=1&ar_grant=v1.x%2Ey&b=2")
            .body(())
            .unwrap();
        assert_eq!(carried(&req).as_deref(), Some("v1.x.y"));
        let mut req = req;
        strip(&mut req);
        assert_eq!(req.uri().to_string(), "/shop?a=1&b=2");
        let mut only = http::Request::get("/?ar_grant=g").body(()).unwrap();
        strip(&mut only);
        assert_eq!(only.uri().to_string(), "/");
        let mut header = http::Request::get("/p?q=ar_grant")
            .header("X-Anteroom-Grant", "g2")
            .body(())
            .unwrap();
        assert_eq!(carried(&header).as_deref(), Some("g2"));
        strip(&mut header);
        assert!(header.headers().get(&GRANT_HEADER).is_none());
        assert_eq!(
            header.uri().to_string(),
            "/p?q=ar_grant",
            "values untouched"
        );
        let none = http::Request::get("/p?x=1").body(()).unwrap();
        assert_eq!(carried(&none), None);
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
    }
}
