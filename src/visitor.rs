//! Who a visitor is to the queue: [`VisitorId`], the random identity their cookie carries,
//! and [`VisitorRef`], the short reference shown to them and typed by support. A leaf: the
//! stores, the cookie, the draw and the logs all name visitors by these.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A visitor's random 128-bit identity, carried in the signed cookie. Stored as 16 raw
/// bytes (not 32 hex characters) because the line may hold millions of them.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct VisitorId(pub [u8; 16]);

impl VisitorId {
    /// A fresh, unguessable id: from this thread's cryptographically secure generator
    /// (ChaCha12, seeded and periodically reseeded from the operating system), which spares
    /// every newcomer's join a system call.
    pub fn random() -> Self {
        let mut bytes = [0u8; 16];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut bytes);
        VisitorId(bytes)
    }

    /// The id as 32 lowercase hex characters (the form on receipts and in `verify-draw`).
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parses 32 hex characters; `None` for anything else.
    pub fn from_hex(s: &str) -> Option<Self> {
        let mut bytes = [0u8; 16];
        hex::decode_to_slice(s, &mut bytes).ok()?;
        Some(VisitorId(bytes))
    }

    /// The visitor's short reference for support, computed from the
    /// id alone so pages and JSON show it with no store call.
    pub fn reference(&self) -> VisitorRef {
        VisitorRef::of(self)
    }
}

/// The 8-character reference of a visitor: Crockford base32 of the first 40 bits of the id.
/// Crockford's alphabet has no I, L, O or U, so a reference read over the phone cannot be
/// misheard as another; 40 bits make two visitors of one line share a reference only in a
/// line of about a million (birthday bound), and then the admin sees the first match.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct VisitorRef([u8; 8]);

const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

impl VisitorRef {
    fn of(id: &VisitorId) -> Self {
        let bits = id.0[..5]
            .iter()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
        let mut out = [0u8; 8];
        for (i, c) in out.iter_mut().enumerate() {
            *c = CROCKFORD[((bits >> (35 - 5 * i)) & 31) as usize];
        }
        VisitorRef(out)
    }

    /// Reads a reference as a person typed it: case-insensitive, with Crockford's
    /// substitutions (O → 0, I and L → 1) and hyphens ignored. `None` unless it is exactly
    /// 8 symbols.
    pub fn parse(s: &str) -> Option<Self> {
        let mut out = [0u8; 8];
        let mut n = 0;
        for c in s.chars().filter(|&c| c != '-') {
            let c = match c.to_ascii_uppercase() {
                'O' => '0',
                'I' | 'L' => '1',
                c => c,
            };
            if !c.is_ascii() || !CROCKFORD.contains(&(c as u8)) || n == 8 {
                return None;
            }
            out[n] = c as u8;
            n += 1;
        }
        (n == 8).then_some(VisitorRef(out))
    }

    /// The 5 id bytes the reference stands for: what a store compares ids against.
    pub fn prefix(&self) -> [u8; 5] {
        let bits = self.0.iter().fold(0u64, |acc, &c| {
            let v = CROCKFORD.iter().position(|&a| a == c).unwrap_or(0) as u64;
            (acc << 5) | v
        });
        let b = bits.to_be_bytes();
        [b[3], b[4], b[5], b[6], b[7]]
    }

    /// Whether `id` has this reference.
    pub fn matches(&self, id: &VisitorId) -> bool {
        id.0[..5] == self.prefix()
    }

    /// The reference as its 8 characters.
    pub fn as_str(&self) -> &str {
        // Only ever built from the ASCII alphabet above.
        std::str::from_utf8(&self.0).unwrap_or("????????")
    }
}

impl fmt::Display for VisitorRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for VisitorRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VisitorRef({})", self.as_str())
    }
}

impl Serialize for VisitorRef {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl fmt::Debug for VisitorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VisitorId({})", self.to_hex())
    }
}

impl fmt::Display for VisitorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}
