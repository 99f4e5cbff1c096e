//! The auditable lottery: the commitment to a room's salt, each entrant's draw
//! hash, places from the sorted list of hashes, the public document of
//! `GET /__anteroom/rooms/{room}/draw`, and the checks behind `anteroom verify-draw`.
//!
//! # Definitions (what anyone can recompute)
//!
//! - **salt**: the room's lottery salt, published as lowercase hex of its raw bytes (both
//!   stores keep 16 random bytes, set once per room).
//! - **commitment**: hex SHA-256(salt bytes), shown before the doors open.
//! - **draw hash** of a visitor: hex SHA-256(salt bytes ‖ the 16 bytes of the visitor id).
//! - **place**: 1 + the number of published hashes smaller than the visitor's (hashes
//!   compared as byte strings, which is the order of their hex too).
//!
//! Both stores order the draw by exactly this rule: the embedded store sorts the
//! entrants by their [`DrawHash`] at the doors; Redis keeps the first 52 bits as a ZSET
//! score (computed by the replica, which knows the salt: Redis Lua has no SHA-256) and
//! orders equal scores by the whole hash as the doors move them. The conformance suite
//! checks the doors' order against this module on every store.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::visitor::VisitorId;

/// Why a draw could not be checked (as opposed to a check that failed).
#[derive(Debug, thiserror::Error)]
pub enum DrawError {
    /// `--salt` or `--commitment` is not hex, or was not given and no document supplies it.
    #[error("{what} is not hex: {reason}")]
    NotHex {
        /// The input at fault, named by its command-line flag (e.g. `--salt`).
        what: &'static str,
        /// The hex decoder's error, or why it was missing and could not be taken from the
        /// document.
        reason: String,
    },
    /// `--visitor-id` is not 32 hex characters.
    #[error("visitor id must be 32 hex characters (16 bytes)")]
    VisitorId,
    /// The published draw (`--draw`) could not be read or fetched.
    #[error("cannot read the draw from {source_name}: {reason}")]
    Read {
        /// The `--draw` argument as given: a file path, `-` or a URL.
        source_name: String,
        /// What failed: I/O, the HTTP fetch, the size limit, or an `https://` URL.
        reason: String,
    },
    /// The published draw is not the JSON of a [`DrawDocument`]; holds the parser's error.
    #[error("the draw document is not valid JSON: {0}")]
    Document(String),
}

/// One entrant's draw hash: SHA-256(salt ‖ visitor id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DrawHash(pub [u8; 32]);

impl DrawHash {
    /// The hash of `visitor` under `salt`: SHA-256(salt bytes ‖ the id's 16 bytes).
    pub fn of(salt: &[u8], visitor: VisitorId) -> Self {
        let digest = Sha256::new()
            .chain_update(salt)
            .chain_update(visitor.0)
            .finalize();
        DrawHash(digest.into())
    }

    /// The first 8 bytes, big-endian: the embedded store's ordering score.
    pub fn score(&self) -> u64 {
        let mut first = [0u8; 8];
        first.copy_from_slice(&self.0[..8]);
        u64::from_be_bytes(first)
    }

    /// Lowercase hex, 64 characters: the form published and compared.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parses 64 hex characters (either case, surrounding space ignored); `None` otherwise.
    pub fn from_hex(s: &str) -> Option<Self> {
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(s.trim(), &mut bytes).ok()?;
        Some(DrawHash(bytes))
    }
}

impl Serialize for DrawHash {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for DrawHash {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        DrawHash::from_hex(&s)
            .ok_or_else(|| serde::de::Error::custom("a draw hash is 64 hex characters"))
    }
}

/// Hex SHA-256 of the salt: shown before the doors so the salt cannot change afterwards
/// unnoticed.
pub fn commitment(salt: &[u8]) -> String {
    hex::encode(Sha256::digest(salt))
}

/// A visitor's place (1-based) in a draw, given every entrant's hash sorted ascending;
/// `None` if their hash is not in the list.
pub fn place_in(sorted: &[DrawHash], hash: &DrawHash) -> Option<u64> {
    sorted.binary_search(hash).ok().map(|i| i as u64 + 1)
}

/// What an entrant's page (and its JSON, as `receipt`) shows of the draw: enough to run
/// `anteroom verify-draw --visitor-id … ` against the published document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Receipt {
    /// The visitor's reference as their page shows it ([`VisitorId::reference`]).
    #[serde(rename = "ref")]
    pub visitor_ref: String,
    /// The visitor's own id, hex: the input of `verify-draw --visitor-id`. Shown only to
    /// them (on their page); it admits nobody without their signed cookie.
    pub visitor_id: String,
    /// SHA-256(room salt ‖ visitor id): the same before and after the doors.
    pub draw_hash: DrawHash,
    /// `None` before the doors (nobody has a place yet).
    pub place: Option<u64>,
}

impl Receipt {
    /// The receipt of `visitor` under `salt`, with its place in `sorted` (every entrant's
    /// hash, ascending) when given.
    pub fn new(salt: &[u8], visitor: VisitorId, sorted: Option<&[DrawHash]>) -> Self {
        let draw_hash = DrawHash::of(salt, visitor);
        Receipt {
            visitor_ref: visitor.reference().as_str().to_owned(),
            visitor_id: visitor.to_hex(),
            draw_hash,
            place: sorted.and_then(|s| place_in(s, &draw_hash)),
        }
    }
}

/// The public body of `GET /__anteroom/rooms/{room}/draw`. Before the doors: the
/// commitment and how many have entered. After: the salt and every entrant's hash, sorted
/// (never their ids).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrawDocument {
    /// The room's name.
    pub room: String,
    /// `"collecting"` before the doors, `"drawn"` after.
    pub status: DrawStatus,
    /// Hex SHA-256 of the salt.
    pub commitment: String,
    /// When the doors open (`admits_at`), RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opens_at: Option<String>,
    /// How many have entered; after the doors, the length of `hashes`.
    pub entrants: u64,
    /// Hex of the salt, once the doors have opened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub salt: Option<String>,
    /// Every entrant's draw hash, ascending (so index + 1 is the place), after the doors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hashes: Option<Vec<DrawHash>>,
}

/// Whether the draw has been made: the `status` of a [`DrawDocument`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DrawStatus {
    /// Before the doors: entrants are collected, the salt is secret.
    Collecting,
    /// The doors have opened: the salt and the sorted hashes are published.
    Drawn,
}

impl DrawDocument {
    /// Before the doors: the salt stays secret, only its commitment is shown.
    pub fn before_doors(
        room: &str,
        salt: &[u8],
        entrants: u64,
        opens_at: Option<SystemTime>,
    ) -> Self {
        DrawDocument {
            room: room.to_owned(),
            status: DrawStatus::Collecting,
            commitment: commitment(salt),
            opens_at: opens_at.map(rfc3339),
            entrants,
            salt: None,
            hashes: None,
        }
    }

    /// After the doors: the salt and every entrant's hash (sorted here, whatever order the
    /// store hands them in).
    pub fn after_doors(
        room: &str,
        salt: &[u8],
        mut hashes: Vec<DrawHash>,
        opens_at: Option<SystemTime>,
    ) -> Self {
        hashes.sort_unstable();
        DrawDocument {
            room: room.to_owned(),
            status: DrawStatus::Drawn,
            commitment: commitment(salt),
            opens_at: opens_at.map(rfc3339),
            entrants: hashes.len() as u64,
            salt: Some(hex::encode(salt)),
            hashes: Some(hashes),
        }
    }

    /// The draw hashes of `entrants` under `salt`, as the stores would list them.
    pub fn hashes_of(salt: &[u8], entrants: impl IntoIterator<Item = VisitorId>) -> Vec<DrawHash> {
        entrants
            .into_iter()
            .map(|v| DrawHash::of(salt, v))
            .collect()
    }

    /// Parses a saved or fetched draw document; [`DrawError::Document`] if it is not one.
    pub fn from_json(bytes: &[u8]) -> Result<Self, DrawError> {
        serde_json::from_slice(bytes).map_err(|e| DrawError::Document(e.to_string()))
    }
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// The inputs of `anteroom verify-draw`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyInput {
    /// The salt's raw bytes (from hex, any length).
    pub salt: Vec<u8>,
    /// The commitment to check against, lowercase hex, 64 characters.
    pub commitment: String,
    /// The visitor whose hash and place are recomputed.
    pub visitor: VisitorId,
}

impl VerifyInput {
    /// Parses the command line's hex strings (case and surrounding space ignored).
    pub fn parse(salt: &str, commitment: &str, visitor: &str) -> Result<Self, DrawError> {
        let salt = hex::decode(salt.trim()).map_err(|e| DrawError::NotHex {
            what: "--salt",
            reason: e.to_string(),
        })?;
        let commitment = commitment.trim().to_ascii_lowercase();
        let mut raw = [0u8; 32];
        hex::decode_to_slice(&commitment, &mut raw).map_err(|e| DrawError::NotHex {
            what: "--commitment (64 hex characters)",
            reason: e.to_string(),
        })?;
        let visitor = VisitorId::from_hex(visitor.trim()).ok_or(DrawError::VisitorId)?;
        Ok(VerifyInput {
            salt,
            commitment,
            visitor,
        })
    }
}

/// What `verify-draw` found. `ok()` is the exit status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Verification {
    /// The visitor's hash, recomputed from the salt and their id.
    pub draw_hash: DrawHash,
    /// SHA-256(salt) equals the commitment given.
    pub salt_matches_commitment: bool,
    /// Problems with the published document (its commitment or salt differ from the ones
    /// given, its list is not sorted or not the size it claims, the draw is not over).
    pub document_problems: Vec<String>,
    /// The visitor's place in the published list, if a list was given and holds them.
    pub place: Option<u64>,
    /// How many hashes the document lists, if it lists any.
    pub entrants: Option<u64>,
    /// Whether a list was checked at all.
    pub list_checked: bool,
    /// The commitment was taken from the document itself (no `--commitment`): compare it
    /// with the one shown before the doors.
    pub commitment_from_document: bool,
}

impl Verification {
    /// True when the salt matches the commitment and, if a document was given, it agrees
    /// and holds the visitor.
    pub fn ok(&self) -> bool {
        self.salt_matches_commitment
            && self.document_problems.is_empty()
            && (!self.list_checked || self.place.is_some())
    }

    /// The human report the CLI prints.
    pub fn report(&self) -> String {
        let mut out = String::new();
        let mark = |ok: bool| if ok { "OK  " } else { "FAIL" };
        out.push_str(&format!(
            "{} salt matches the commitment: {}\n",
            mark(self.salt_matches_commitment),
            if self.salt_matches_commitment {
                "the salt was fixed before the doors opened"
            } else {
                "SHA-256(salt) differs: this is not the salt that was committed to"
            }
        ));
        if self.commitment_from_document {
            out.push_str(
                "     (the commitment is the document's own: compare it with the one shown before the doors opened, or pass --commitment)\n",
            );
        }
        out.push_str(&format!("     draw hash: {}\n", self.draw_hash.to_hex()));
        for problem in &self.document_problems {
            out.push_str(&format!("FAIL {problem}\n"));
        }
        if self.list_checked {
            match (self.place, self.entrants) {
                (Some(place), Some(n)) => out.push_str(&format!(
                    "OK   place {place} of {n} (1 + the number of published hashes below this one)\n"
                )),
                _ => out.push_str(
                    "FAIL this visitor's draw hash is not in the published list of entrants\n",
                ),
            }
        } else {
            out.push_str("     no published draw given (--draw): place not checked\n");
        }
        out.push_str(if self.ok() {
            "verified\n"
        } else {
            "NOT verified\n"
        });
        out
    }
}

/// Recomputes the visitor's hash and place and checks them against the commitment and,
/// if given, the published document.
pub fn verify(input: &VerifyInput, document: Option<&DrawDocument>) -> Verification {
    let draw_hash = DrawHash::of(&input.salt, input.visitor);
    let salt_matches_commitment = commitment(&input.salt) == input.commitment;
    let mut problems = Vec::new();
    let (mut place, mut entrants, mut list_checked) = (None, None, false);
    if let Some(doc) = document {
        if doc.commitment.to_ascii_lowercase() != input.commitment {
            problems.push(format!(
                "the published commitment {} is not the one given",
                doc.commitment
            ));
        }
        match &doc.salt {
            Some(salt) if salt.to_ascii_lowercase() != hex::encode(&input.salt) => {
                problems.push("the published salt is not the one given".to_owned());
            }
            Some(_) => {}
            None => problems.push(
                "the draw has not been made yet (no salt published): check again after the doors open".to_owned(),
            ),
        }
        if let Some(hashes) = &doc.hashes {
            list_checked = true;
            if hashes.windows(2).any(|w| w[0] >= w[1]) {
                problems.push(
                    "the published hashes are not strictly ascending (sorted, no repeats)"
                        .to_owned(),
                );
            }
            if hashes.len() as u64 != doc.entrants {
                problems.push(format!(
                    "the document claims {} entrants but lists {} hashes",
                    doc.entrants,
                    hashes.len()
                ));
            }
            // A linear count, not a binary search: it stays right even on a list that
            // fails the order check above.
            if hashes.contains(&draw_hash) {
                place = Some(hashes.iter().filter(|h| **h < draw_hash).count() as u64 + 1);
            }
            entrants = Some(hashes.len() as u64);
        }
    }
    Verification {
        draw_hash,
        salt_matches_commitment,
        document_problems: problems,
        place,
        entrants,
        list_checked,
        commitment_from_document: false,
    }
}

/// `anteroom verify-draw`: loads the published draw if given (a file saved from
/// `GET /__anteroom/rooms/{room}/draw`, `-`, or an `http://` URL), parses the inputs and
/// checks. Without `salt` or `commitment` the document's own are used (a document is then
/// required); a commitment taken from the document only checks it against itself, and the
/// report says so. An `Err` means the check could not be made (bad input, unreadable
/// document); a failed check is an `Ok` whose [`Verification::ok`] is false.
pub async fn verify_command(
    salt: Option<&str>,
    commitment: Option<&str>,
    visitor_id: &str,
    draw: Option<&str>,
) -> Result<Verification, DrawError> {
    let document = match draw {
        Some(source) => Some(load_document(source).await?),
        None => None,
    };
    let missing = |what: &'static str| DrawError::NotHex {
        what,
        reason: "not given, and no published draw (--draw) to take it from".to_owned(),
    };
    let salt = match (salt, &document) {
        (Some(salt), _) => salt.to_owned(),
        (None, Some(doc)) => doc.salt.clone().ok_or_else(|| DrawError::NotHex {
            what: "--salt",
            reason: "not given, and the document publishes none yet (the doors are not open)"
                .to_owned(),
        })?,
        (None, None) => return Err(missing("--salt")),
    };
    let (commitment, from_document) = match (commitment, &document) {
        (Some(c), _) => (c.to_owned(), false),
        (None, Some(doc)) => (doc.commitment.clone(), true),
        (None, None) => return Err(missing("--commitment")),
    };
    let input = VerifyInput::parse(&salt, &commitment, visitor_id)?;
    let mut verification = verify(&input, document.as_ref());
    verification.commitment_from_document = from_document;
    Ok(verification)
}

/// The most a published draw may weigh when fetched or read (a million entrants is about
/// 67 MB of JSON).
pub const MAX_DOCUMENT_BYTES: usize = 256 * 1024 * 1024;

/// Reads a draw document from a file path, `-` (standard input) or an `http://` URL.
pub async fn load_document(source: &str) -> Result<DrawDocument, DrawError> {
    let read_err = |reason: String| DrawError::Read {
        source_name: source.to_owned(),
        reason,
    };
    let bytes = if source.starts_with("http://") {
        fetch(source).await.map_err(read_err)?
    } else if source.starts_with("https://") {
        return Err(read_err(
            "https is not built into anteroom; save it first (curl -o draw.json URL) and pass the file".to_owned(),
        ));
    } else if source == "-" {
        use tokio::io::AsyncReadExt;
        let mut buf = Vec::new();
        tokio::io::stdin()
            .take(MAX_DOCUMENT_BYTES as u64 + 1)
            .read_to_end(&mut buf)
            .await
            .map_err(|e| read_err(e.to_string()))?;
        buf
    } else {
        let meta = tokio::fs::metadata(source)
            .await
            .map_err(|e| read_err(e.to_string()))?;
        if meta.len() > MAX_DOCUMENT_BYTES as u64 {
            return Err(read_err(format!("larger than {MAX_DOCUMENT_BYTES} bytes")));
        }
        tokio::fs::read(source)
            .await
            .map_err(|e| read_err(e.to_string()))?
    };
    if bytes.len() > MAX_DOCUMENT_BYTES {
        return Err(read_err(format!("larger than {MAX_DOCUMENT_BYTES} bytes")));
    }
    DrawDocument::from_json(&bytes)
}

async fn fetch(url: &str) -> Result<Vec<u8>, String> {
    use http_body_util::{BodyExt, Empty, Limited};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    let uri: http::Uri = url.parse().map_err(|e| format!("bad URL: {e}"))?;
    let client: Client<_, Empty<bytes::Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let request = http::Request::get(uri)
        .header(http::header::ACCEPT, "application/json")
        .body(Empty::new())
        .map_err(|e| e.to_string())?;
    let response =
        tokio::time::timeout(std::time::Duration::from_secs(30), client.request(request))
            .await
            .map_err(|_| "no answer within 30 s".to_owned())?
            .map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("HTTP {}", response.status()));
    }
    let body = Limited::new(response.into_body(), MAX_DOCUMENT_BYTES)
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    Ok(body.to_bytes().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SALT: [u8; 16] = [0x5a; 16];

    fn entrants(n: u8) -> Vec<VisitorId> {
        (0..n).map(|i| VisitorId([i; 16])).collect()
    }

    #[test]
    fn commitment_and_hash_are_plain_sha256() {
        // Recomputable with any tool: sha256 of the salt bytes, and of salt ‖ id.
        assert_eq!(
            commitment(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let v = VisitorId([1; 16]);
        let mut both = SALT.to_vec();
        both.extend_from_slice(&v.0);
        assert_eq!(
            DrawHash::of(&SALT, v).to_hex(),
            hex::encode(Sha256::digest(&both))
        );
    }

    #[test]
    fn places_follow_the_sorted_hashes() {
        let doc = DrawDocument::after_doors(
            "main",
            &SALT,
            DrawDocument::hashes_of(&SALT, entrants(20)),
            None,
        );
        let hashes = doc.hashes.clone().unwrap();
        assert_eq!(doc.entrants, 20);
        let mut places: Vec<u64> = entrants(20)
            .into_iter()
            .map(|v| place_in(&hashes, &DrawHash::of(&SALT, v)).unwrap())
            .collect();
        places.sort_unstable();
        assert_eq!(places, (1..=20).collect::<Vec<_>>());
        assert_eq!(place_in(&hashes, &DrawHash([0; 32])), None);
        let receipt = Receipt::new(&SALT, VisitorId([3; 16]), Some(&hashes));
        assert!(receipt.place.is_some());
        assert_eq!(Receipt::new(&SALT, VisitorId([3; 16]), None).place, None);
    }

    #[test]
    fn documents_before_and_after_the_doors() {
        let opens = humantime::parse_rfc3339("2026-12-01T10:00:00Z").unwrap();
        let before = DrawDocument::before_doors("main", &SALT, 7, Some(opens));
        let json = serde_json::to_value(&before).unwrap();
        assert_eq!(json["status"], "collecting");
        assert_eq!(json["commitment"], commitment(&SALT));
        assert_eq!(json["entrants"], 7);
        assert_eq!(json["opens_at"], "2026-12-01T10:00:00Z");
        assert!(json.get("salt").is_none() && json.get("hashes").is_none());
        let after = DrawDocument::after_doors(
            "main",
            &SALT,
            DrawDocument::hashes_of(&SALT, entrants(3)),
            Some(opens),
        );
        let text = serde_json::to_vec(&after).unwrap();
        assert_eq!(DrawDocument::from_json(&text).unwrap(), after);
        let json: serde_json::Value = serde_json::from_slice(&text).unwrap();
        assert_eq!(json["salt"], hex::encode(SALT));
        assert_eq!(json["hashes"].as_array().unwrap().len(), 3);
        // Never the ids.
        for v in entrants(3) {
            assert!(!String::from_utf8_lossy(&text).contains(&v.to_hex()));
        }
    }

    #[test]
    fn verify_finds_the_place_and_flags_every_mismatch() {
        let me = VisitorId([4; 16]);
        let doc = DrawDocument::after_doors(
            "main",
            &SALT,
            DrawDocument::hashes_of(&SALT, entrants(10)),
            None,
        );
        let input = VerifyInput::parse(
            &hex::encode(SALT),
            &commitment(&SALT).to_uppercase(),
            &me.to_hex(),
        )
        .unwrap();
        let good = verify(&input, Some(&doc));
        assert!(good.ok(), "{}", good.report());
        assert_eq!(
            good.place,
            place_in(doc.hashes.as_ref().unwrap(), &DrawHash::of(&SALT, me))
        );
        assert!(good.report().contains("verified"));

        // Another salt than the committed one.
        let wrong_salt = VerifyInput {
            salt: vec![1; 16],
            ..input.clone()
        };
        let v = verify(&wrong_salt, None);
        assert!(!v.salt_matches_commitment && !v.ok());
        assert!(v.report().contains("NOT verified"));

        // A visitor who was moved out of the list.
        let mut moved = doc.clone();
        let mine = DrawHash::of(&SALT, me);
        moved.hashes.as_mut().unwrap().retain(|h| *h != mine);
        moved.entrants -= 1;
        assert!(!verify(&input, Some(&moved)).ok());

        // A list out of order, or a count that lies.
        let mut shuffled = doc.clone();
        shuffled.hashes.as_mut().unwrap().reverse();
        assert!(!verify(&input, Some(&shuffled)).ok());
        let mut lying = doc.clone();
        lying.entrants = 11;
        assert!(!verify(&input, Some(&lying)).ok());

        // A document whose commitment differs from the one given.
        let other = DrawDocument::after_doors("main", &[9; 16], vec![mine], None);
        let v = verify(&input, Some(&other));
        assert!(!v.ok());
        assert_eq!(v.document_problems.len(), 2, "{:?}", v.document_problems);

        // Before the doors there is nothing to place.
        let early = DrawDocument::before_doors("main", &SALT, 10, None);
        assert!(!verify(&input, Some(&early)).ok());
    }

    #[test]
    fn bad_inputs_are_typed_errors() {
        let c = commitment(&SALT);
        let v = VisitorId([1; 16]).to_hex();
        assert!(matches!(
            VerifyInput::parse("zz", &c, &v),
            Err(DrawError::NotHex { .. })
        ));
        assert!(VerifyInput::parse("00", "abc", &v).is_err());
        assert!(matches!(
            VerifyInput::parse("00", &c, "1234"),
            Err(DrawError::VisitorId)
        ));
        assert!(DrawDocument::from_json(b"{").is_err());
        assert!(
            DrawDocument::from_json(
                br#"{"room":"r","status":"drawn","commitment":"","entrants":1,"hashes":["xx"]}"#
            )
            .is_err()
        );
    }

    #[tokio::test]
    async fn verify_command_reads_the_salt_and_commitment_from_a_saved_document() {
        let me = VisitorId([4; 16]);
        let save = |doc: &DrawDocument| {
            let file = tempfile::NamedTempFile::new().unwrap();
            std::fs::write(file.path(), serde_json::to_vec(doc).unwrap()).unwrap();
            file
        };
        let after = save(&DrawDocument::after_doors(
            "main",
            &SALT,
            DrawDocument::hashes_of(&SALT, entrants(10)),
            None,
        ));
        let path = after.path().to_str().unwrap();
        let v = verify_command(None, None, &me.to_hex(), Some(path))
            .await
            .unwrap();
        assert!(v.ok() && v.commitment_from_document, "{}", v.report());
        assert!(v.report().contains("the document's own"));
        // The commitment seen before the doors, given: checked against it.
        let v = verify_command(None, Some(&commitment(&SALT)), &me.to_hex(), Some(path))
            .await
            .unwrap();
        assert!(v.ok() && !v.commitment_from_document);
        let v = verify_command(None, Some(&commitment(&[1; 16])), &me.to_hex(), Some(path))
            .await
            .unwrap();
        assert!(!v.ok());
        // Nothing to take the salt from.
        assert!(
            verify_command(None, None, &me.to_hex(), None)
                .await
                .is_err()
        );
        let before = save(&DrawDocument::before_doors("main", &SALT, 10, None));
        let before = before.path().to_str().unwrap();
        assert!(
            verify_command(None, None, &me.to_hex(), Some(before))
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn load_document_from_a_file_and_refuses_https() {
        let doc = DrawDocument::after_doors("main", &SALT, vec![], None);
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), serde_json::to_vec(&doc).unwrap()).unwrap();
        let loaded = load_document(file.path().to_str().unwrap()).await.unwrap();
        assert_eq!(loaded, doc);
        assert!(load_document("https://example.invalid/draw").await.is_err());
        assert!(load_document("/nonexistent/draw.json").await.is_err());
    }
}
