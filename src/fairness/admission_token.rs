//! The admission token: the Ed25519 key from `admission_key`, its public half as
//! served at `GET /__anteroom/admission-key`, and the compact `X-Anteroom-Admission` header
//! that proves to the origin a request came through the queue.
//!
//! # Formats
//!
//! - **Private key in the config** (`admission_key`): either the 32-byte Ed25519 seed in
//!   base64url without padding (43 characters; what `anteroom init` writes, because it fits
//!   on one YAML line and in an environment variable), or a PKCS#8 PEM block
//!   (`-----BEGIN PRIVATE KEY-----`, what `openssl genpkey -algorithm ed25519` writes).
//! - **Public key**: JSON `{"alg":"Ed25519","kid":…,"public_key":<base64url of the 32
//!   bytes>,"public_key_pem":<SPKI PEM>}`; the PEM loads as-is in Node's `crypto` and
//!   Python's `cryptography`.
//! - **Key id** (`kid`): base64url of the first 8 bytes of SHA-256(public key), so an origin
//!   holding several keys (rotation) knows which one to try.
//! - **Token**: `v1.<payload>.<signature>`, both parts base64url without padding. The payload
//!   is JSON `{"kid","room","ref","admitted_at","exp"}` (times in unix seconds); the
//!   signature is Ed25519 over the ASCII bytes `v1.<payload>`, so the version is signed too.
//!   JSON rather than fixed fields because an origin reads it with its standard library.
//!
//! # Cost
//!
//! One signature is tens of microseconds (`anteroom-loadtest micro` measures it), too much to pay
//! on every proxied request of a busy site, so [`AdmissionSigner`] keeps each session's
//! token and re-signs only when half its lifetime is gone: a visitor costs about one
//! signature per half lifetime, not one per request.

use std::collections::HashMap;
use std::sync::Mutex;

use http::HeaderValue;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey};
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::visitor::VisitorId;

/// The request header that carries the token to the origin.
pub const ADMISSION_HEADER: http::HeaderName =
    http::HeaderName::from_static("x-anteroom-admission");
/// The response header by which the origin ends the visitor's session (stripped before the
/// visitor sees the response).
pub const END_SESSION_HEADER: http::HeaderName =
    http::HeaderName::from_static("x-anteroom-end-session");
/// The only token version this code writes and reads.
const VERSION: &str = "v1";
/// Longer than any token we issue (room names are at most 64 characters); anything longer
/// is refused before any decoding, so junk headers cost nothing.
const MAX_TOKEN_LEN: usize = 1024;

/// Why a configured key could not be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    /// The text is empty or only whitespace.
    #[error("admission_key is empty")]
    Empty,
    /// Not a valid key as base64url of 32 bytes or PEM, or PEM encoding failed; holds why.
    #[error(
        "admission_key must be base64url of a 32-byte Ed25519 seed (43 characters) or a PKCS#8 PEM private key: {0}"
    )]
    Malformed(String),
    /// The OS random generator failed while generating a key; holds its error.
    #[error("the operating system's random generator failed: {0}")]
    Random(String),
}

/// Why a token was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    /// Not `v1.<payload>.<signature>` in base64url, a signature of the wrong length, or a
    /// payload that is not the claims' JSON.
    #[error("token is not of the form v1.<payload>.<signature>")]
    Malformed,
    /// Over 1024 bytes: refused before any decoding.
    #[error("token is longer than {MAX_TOKEN_LEN} bytes")]
    TooLong,
    /// A version prefix other than `v1`; holds at most its first 8 characters.
    #[error("token version {0:?} is not supported")]
    Version(String),
    /// Well-formed, but the signature does not verify (strictly) against this key.
    #[error("token signature does not verify")]
    BadSignature,
    /// The signature verifies, but the payload names another key id; holds that `kid`.
    #[error("token was signed by key {0:?}, not this one")]
    WrongKey(String),
    /// The verification time is at or past the token's `exp`.
    #[error("token expired at {expired_at} (now {now})")]
    Expired {
        /// The token's `exp`, unix seconds.
        expired_at: u64,
        /// The time `verify` was given, unix seconds.
        now: u64,
    },
}

/// What the token asserts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdmissionClaims {
    /// The signing key's id.
    pub kid: String,
    /// The name of the room the visitor was admitted to.
    pub room: String,
    /// The visitor's reference ([`VisitorId::reference`]): the same 8 characters their
    /// waiting page shows and the access log's `ref`, so an origin's log line, a visitor's
    /// report and anteroom's own lines name a visitor alike. Never their id (40 of its 128
    /// bits, which admit nobody without the signed cookie).
    #[serde(rename = "ref")]
    pub visitor_ref: String,
    /// When the visitor was admitted, unix seconds.
    pub admitted_at: u64,
    /// The token is refused from this time on, unix seconds.
    pub exp: u64,
}

/// The Ed25519 private key from `admission_key`.
#[derive(Clone)]
pub struct AdmissionKey {
    signing: SigningKey,
    public: AdmissionPublicKey,
}

impl std::fmt::Debug for AdmissionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret, even in a debug dump of the config.
        write!(f, "AdmissionKey(kid {})", self.public.kid)
    }
}

impl AdmissionKey {
    /// A fresh key from the operating system's generator (for `anteroom init`).
    pub fn generate() -> Result<Self, KeyError> {
        let mut seed = zeroize::Zeroizing::new([0u8; 32]);
        getrandom::fill(&mut seed[..]).map_err(|e| KeyError::Random(e.to_string()))?;
        Ok(Self::from_seed(&seed))
    }

    fn from_seed(seed: &[u8; 32]) -> Self {
        let signing = SigningKey::from_bytes(seed);
        let public = AdmissionPublicKey::new(signing.verifying_key());
        AdmissionKey { signing, public }
    }

    /// Reads `admission_key` as written in the config: base64url of the 32-byte seed
    /// (padding and surrounding whitespace tolerated) or a PKCS#8 PEM private key.
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(KeyError::Empty);
        }
        if text.starts_with("-----BEGIN") {
            let signing = SigningKey::from_pkcs8_pem(text)
                .map_err(|e| KeyError::Malformed(format!("PEM: {e}")))?;
            let public = AdmissionPublicKey::new(signing.verifying_key());
            return Ok(AdmissionKey { signing, public });
        }
        let bytes = zeroize::Zeroizing::new(
            URL_SAFE_NO_PAD
                .decode(text.trim_end_matches('='))
                .map_err(|e| KeyError::Malformed(format!("base64url: {e}")))?,
        );
        let seed: &[u8; 32] = bytes.as_slice().try_into().map_err(|_| {
            KeyError::Malformed(format!("decodes to {} bytes, not 32", bytes.len()))
        })?;
        Ok(Self::from_seed(seed))
    }

    /// The key as `anteroom init` writes it into the config: base64url of the seed.
    pub fn to_config_text(&self) -> zeroize::Zeroizing<String> {
        zeroize::Zeroizing::new(URL_SAFE_NO_PAD.encode(self.signing.to_bytes()))
    }

    /// The key as a PKCS#8 PEM private key, for operators who keep keys as files.
    pub fn to_pkcs8_pem(&self) -> Result<zeroize::Zeroizing<String>, KeyError> {
        self.signing
            .to_pkcs8_pem(Default::default())
            .map_err(|e| KeyError::Malformed(e.to_string()))
    }

    /// The public half and its key id, to serve or to verify tokens with.
    pub fn public(&self) -> &AdmissionPublicKey {
        &self.public
    }

    /// Signs `claims` into a token. `claims.kid` is overwritten with this key's id, so a
    /// token can never name a key that did not sign it.
    pub fn sign(&self, claims: &AdmissionClaims) -> String {
        let claims = AdmissionClaims {
            kid: self.public.kid.clone(),
            ..claims.clone()
        };
        // Serialising a struct of strings and integers cannot fail; the fallback keeps
        // this function total anyway (an empty payload never verifies as claims).
        let payload = serde_json::to_vec(&claims).unwrap_or_default();
        let mut token = String::with_capacity(160);
        token.push_str(VERSION);
        token.push('.');
        URL_SAFE_NO_PAD.encode_string(payload, &mut token);
        let signature = self.signing.sign(token.as_bytes());
        token.push('.');
        URL_SAFE_NO_PAD.encode_string(signature.to_bytes(), &mut token);
        token
    }
}

/// The public half: what the origin needs to verify tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdmissionPublicKey {
    verifying: VerifyingKey,
    kid: String,
}

/// The body of `GET /__anteroom/admission-key`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicKeyDocument {
    /// The signature algorithm: always `Ed25519`.
    pub alg: String,
    /// The key id tokens carry: base64url of the first 8 bytes of SHA-256(public key).
    pub kid: String,
    /// base64url (no padding) of the 32-byte Ed25519 public key.
    pub public_key: String,
    /// The same key as an SPKI PEM block.
    pub public_key_pem: String,
}

impl AdmissionPublicKey {
    fn new(verifying: VerifyingKey) -> Self {
        let digest = Sha256::digest(verifying.as_bytes());
        let kid = URL_SAFE_NO_PAD.encode(&digest[..8]);
        AdmissionPublicKey { verifying, kid }
    }

    /// The key id, 11 characters: base64url of the first 8 bytes of SHA-256(public key).
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// base64url of the raw 32 bytes.
    pub fn to_base64url(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.verifying.as_bytes())
    }

    /// An SPKI PEM block (`-----BEGIN PUBLIC KEY-----`).
    pub fn to_pem(&self) -> String {
        // Encoding a valid 32-byte key as SPKI cannot fail; an empty string is the
        // total fallback.
        self.verifying
            .to_public_key_pem(Default::default())
            .unwrap_or_default()
    }

    /// The JSON body served at `GET /__anteroom/admission-key`.
    pub fn document(&self) -> PublicKeyDocument {
        PublicKeyDocument {
            alg: "Ed25519".to_owned(),
            kid: self.kid.clone(),
            public_key: self.to_base64url(),
            public_key_pem: self.to_pem(),
        }
    }

    /// Reads a public key as base64url of 32 bytes or an SPKI PEM block.
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(KeyError::Empty);
        }
        let verifying = if text.starts_with("-----BEGIN") {
            VerifyingKey::from_public_key_pem(text)
                .map_err(|e| KeyError::Malformed(format!("PEM: {e}")))?
        } else {
            let bytes = URL_SAFE_NO_PAD
                .decode(text.trim_end_matches('='))
                .map_err(|e| KeyError::Malformed(format!("base64url: {e}")))?;
            let raw: &[u8; 32] = bytes.as_slice().try_into().map_err(|_| {
                KeyError::Malformed(format!("decodes to {} bytes, not 32", bytes.len()))
            })?;
            VerifyingKey::from_bytes(raw).map_err(|e| KeyError::Malformed(e.to_string()))?
        };
        Ok(Self::new(verifying))
    }

    /// Verifies `token` and returns its claims if it was signed by this key and has not
    /// expired at `now` (unix seconds). The signature is checked before the payload is
    /// parsed, so nothing unauthenticated is ever interpreted beyond its framing.
    pub fn verify(&self, token: &str, now: u64) -> Result<AdmissionClaims, TokenError> {
        if token.len() > MAX_TOKEN_LEN {
            return Err(TokenError::TooLong);
        }
        let (signed, signature) = token.rsplit_once('.').ok_or(TokenError::Malformed)?;
        let (version, payload) = signed.split_once('.').ok_or(TokenError::Malformed)?;
        if version != VERSION {
            return Err(TokenError::Version(version.chars().take(8).collect()));
        }
        let signature = URL_SAFE_NO_PAD
            .decode(signature)
            .map_err(|_| TokenError::Malformed)?;
        let signature = Signature::from_slice(&signature).map_err(|_| TokenError::Malformed)?;
        // verify_strict refuses the malleable and small-order edge cases of Ed25519.
        self.verifying
            .verify_strict(signed.as_bytes(), &signature)
            .map_err(|_| TokenError::BadSignature)?;
        let payload = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| TokenError::Malformed)?;
        let claims: AdmissionClaims =
            serde_json::from_slice(&payload).map_err(|_| TokenError::Malformed)?;
        if claims.kid != self.kid {
            return Err(TokenError::WrongKey(claims.kid));
        }
        if now >= claims.exp {
            return Err(TokenError::Expired {
                expired_at: claims.exp,
                now,
            });
        }
        Ok(claims)
    }
}

/// Signs tokens for the request path, reusing each session's token until half its
/// lifetime is gone (a visitor's token changes only when re-issued). Memory is bounded by
/// `capacity` sessions: when full, expired entries go first, and if that is not enough the
/// cache starts over (costing one signature per active session, never correctness).
pub struct AdmissionSigner {
    key: AdmissionKey,
    lifetime_secs: u64,
    capacity: usize,
    cache: Mutex<HashMap<(String, VisitorId), CachedToken>>,
}

#[derive(Clone)]
struct CachedToken {
    /// Ready to send: a cache hit costs a reference-count increment, not a copy.
    token: HeaderValue,
    admitted_at: u64,
    exp: u64,
}

impl AdmissionSigner {
    /// `lifetime` is how long each token is valid (at least 2 s, so half of it is a real
    /// reuse window); `capacity` bounds the sessions remembered (at least 1).
    pub fn new(key: AdmissionKey, lifetime: std::time::Duration, capacity: usize) -> Self {
        AdmissionSigner {
            key,
            lifetime_secs: lifetime.as_secs().max(2),
            capacity: capacity.max(1),
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The public half of the key tokens are signed with.
    pub fn public(&self) -> &AdmissionPublicKey {
        self.key.public()
    }

    /// The header value for `visitor` of `room`, admitted at `admitted_at`, at `now`
    /// (unix seconds). `None` only if a token were not a valid header value, which base64url
    /// and dots always are.
    pub fn header_for(
        &self,
        room: &str,
        visitor: VisitorId,
        admitted_at: u64,
        now: u64,
    ) -> Option<HeaderValue> {
        let key = (room.to_owned(), visitor);
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(cached) = cache.get(&key)
            && cached.admitted_at == admitted_at
            && cached.exp.saturating_sub(now) > self.lifetime_secs / 2
        {
            return Some(cached.token.clone());
        }
        let exp = now.saturating_add(self.lifetime_secs);
        let token = self.key.sign(&AdmissionClaims {
            kid: String::new(),
            room: room.to_owned(),
            visitor_ref: visitor.reference().as_str().to_owned(),
            admitted_at,
            exp,
        });
        let token = HeaderValue::from_str(&token).ok()?;
        if cache.len() >= self.capacity && !cache.contains_key(&key) {
            cache.retain(|_, c| c.exp > now);
            if cache.len() >= self.capacity {
                cache.clear();
            }
        }
        cache.insert(
            key,
            CachedToken {
                token: token.clone(),
                admitted_at,
                exp,
            },
        );
        Some(token)
    }

    /// Forgets a session (ended by the origin, expired, or flushed).
    pub fn forget(&self, room: &str, visitor: VisitorId) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache.remove(&(room.to_owned(), visitor));
    }

    /// Sessions currently cached.
    pub fn cached(&self) -> usize {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// Whether the origin's response asks to end the session (`X-Anteroom-End-Session: 1`).
pub fn ends_session(value: Option<&http::HeaderValue>) -> bool {
    value.is_some_and(|v| v.as_bytes().trim_ascii() == b"1")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims() -> AdmissionClaims {
        AdmissionClaims {
            kid: String::new(),
            room: "main".to_owned(),
            visitor_ref: "7KQ2M9XD".to_owned(),
            admitted_at: 1_700_000_000,
            exp: 1_700_000_600,
        }
    }

    #[test]
    fn round_trip() {
        let key = AdmissionKey::generate().unwrap();
        let token = key.sign(&claims());
        assert!(token.starts_with("v1."));
        assert_eq!(token.split('.').count(), 3);
        let got = key.public().verify(&token, 1_700_000_001).unwrap();
        assert_eq!(got.room, "main");
        assert_eq!(got.kid, key.public().kid());
        assert_eq!(got.admitted_at, 1_700_000_000);
    }

    #[test]
    fn config_text_and_pem_round_trip() {
        let key = AdmissionKey::generate().unwrap();
        let text = key.to_config_text();
        assert_eq!(text.len(), 43);
        let again = AdmissionKey::parse(&format!("  {}\n", text.as_str())).unwrap();
        assert_eq!(again.public(), key.public());
        let pem = key.to_pkcs8_pem().unwrap();
        assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----"));
        assert_eq!(AdmissionKey::parse(&pem).unwrap().public(), key.public());
        let public = key.public();
        assert_eq!(
            &AdmissionPublicKey::parse(&public.to_pem()).unwrap(),
            public
        );
        assert_eq!(
            &AdmissionPublicKey::parse(&public.to_base64url()).unwrap(),
            public
        );
        let doc = serde_json::to_value(public.document()).unwrap();
        assert_eq!(doc["alg"], "Ed25519");
        assert_eq!(doc["kid"], public.kid());
        // Never leak the secret through Debug.
        assert!(!format!("{key:?}").contains(text.as_str()));
    }

    #[test]
    fn bad_keys_are_typed_errors() {
        assert_eq!(AdmissionKey::parse("  ").unwrap_err(), KeyError::Empty);
        assert!(matches!(
            AdmissionKey::parse("not base64 !!"),
            Err(KeyError::Malformed(_))
        ));
        assert!(matches!(
            AdmissionKey::parse("AAAA"),
            Err(KeyError::Malformed(m)) if m.contains("3 bytes")
        ));
        assert!(matches!(
            AdmissionKey::parse("-----BEGIN PRIVATE KEY-----\nxx\n-----END PRIVATE KEY-----"),
            Err(KeyError::Malformed(_))
        ));
        assert!(AdmissionPublicKey::parse("AAAA").is_err());
    }

    #[test]
    fn tampering_is_refused() {
        let key = AdmissionKey::generate().unwrap();
        let token = key.sign(&claims());
        let (signed, sig) = token.rsplit_once('.').unwrap();
        let (_, payload) = signed.split_once('.').unwrap();
        // Another room, same signature.
        let forged = serde_json::to_vec(&AdmissionClaims {
            room: "vip".to_owned(),
            kid: key.public().kid().to_owned(),
            ..claims()
        })
        .unwrap();
        let forged = format!("v1.{}.{sig}", URL_SAFE_NO_PAD.encode(forged));
        assert_eq!(
            key.public().verify(&forged, 0),
            Err(TokenError::BadSignature)
        );
        // A flipped signature byte.
        let mut raw = URL_SAFE_NO_PAD.decode(sig).unwrap();
        raw[0] ^= 1;
        let flipped = format!("{signed}.{}", URL_SAFE_NO_PAD.encode(raw));
        assert_eq!(
            key.public().verify(&flipped, 0),
            Err(TokenError::BadSignature)
        );
        // Another version label over the same parts.
        assert!(matches!(
            key.public().verify(&format!("v2.{payload}.{sig}"), 0),
            Err(TokenError::Version(_))
        ));
        for junk in ["", ".", "v1", "v1..", "v1.x.y", "v1.é.ü", &"a".repeat(5000)] {
            assert!(key.public().verify(junk, 0).is_err(), "{junk:?}");
        }
    }

    #[test]
    fn wrong_key_is_refused() {
        let key = AdmissionKey::generate().unwrap();
        let other = AdmissionKey::generate().unwrap();
        let token = key.sign(&claims());
        assert_eq!(
            other.public().verify(&token, 0),
            Err(TokenError::BadSignature)
        );
    }

    #[test]
    fn expiry() {
        let key = AdmissionKey::generate().unwrap();
        let token = key.sign(&claims());
        assert!(key.public().verify(&token, 1_700_000_599).is_ok());
        assert_eq!(
            key.public().verify(&token, 1_700_000_600),
            Err(TokenError::Expired {
                expired_at: 1_700_000_600,
                now: 1_700_000_600
            })
        );
    }

    #[test]
    fn signer_reuses_a_session_token_until_half_its_life() {
        let key = AdmissionKey::generate().unwrap();
        let public = key.public().clone();
        let signer = AdmissionSigner::new(key, std::time::Duration::from_secs(600), 2);
        let v = VisitorId([1; 16]);
        let first = signer.header_for("main", v, 100, 1_000).unwrap();
        assert_eq!(signer.header_for("main", v, 100, 1_299).unwrap(), first);
        let renewed = signer.header_for("main", v, 100, 1_300).unwrap();
        assert_ne!(renewed, first);
        let claims = public.verify(renewed.to_str().unwrap(), 1_300).unwrap();
        assert_eq!(claims.exp, 1_900);
        assert_eq!(claims.visitor_ref, v.reference().as_str());
        // A re-admission (new admitted_at) never reuses the old token.
        assert_ne!(signer.header_for("main", v, 200, 1_301).unwrap(), renewed);
        // Bounded: a third session in a cache of two starts it over.
        signer.header_for("main", VisitorId([2; 16]), 1, 1_301);
        signer.header_for("main", VisitorId([3; 16]), 1, 1_301);
        assert!(signer.cached() <= 2);
        signer.forget("main", VisitorId([3; 16]));
        assert!(signer.cached() <= 1);
    }

    #[test]
    fn end_session_header() {
        assert!(ends_session(Some(&http::HeaderValue::from_static("1"))));
        assert!(ends_session(Some(&http::HeaderValue::from_static(" 1 "))));
        assert!(!ends_session(Some(&http::HeaderValue::from_static("0"))));
        assert!(!ends_session(None));
    }
}
