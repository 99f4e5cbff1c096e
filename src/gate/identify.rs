//! Step 1 of the request path: who is asking — client address (trusted-proxy aware), the
//! [`ClientKey`] limits and bans count, the room by host, the verified visitor cookie, and
//! what they read (JSON or HTML, language).

use std::net::{IpAddr, SocketAddr};
use std::time::SystemTime;

use http::{HeaderMap, HeaderValue, Request, header};

use super::App;
use crate::abuse::{BanVerdict, StrikeReason};
use crate::http::i18n;
use crate::http::pages;
use crate::identity::{self, CanonicalHost, ClientKey, HostError};
use crate::queue::VisitorId;
use crate::token::CookieError;

/// Who is asking, established before anything else runs.
#[derive(Clone)]
pub struct Identity {
    /// Behind trusted proxies, the address they forwarded for; else the peer.
    pub client_ip: IpAddr,
    /// Set when a trusted proxy's `X-Forwarded-For` cannot be read: the request is refused
    /// with 400 before anything else (`client_ip` is then the peer, for the log only).
    pub bad_forwarded: bool,
    /// What the browser said about where the request comes from (`Sec-Fetch-*`).
    pub fetch: FetchSite,
    /// What the join limit and bans count: the IPv4 address or the IPv6 /64.
    pub client: ClientKey,
    /// The abuse registry's verdict, checked before the cookie is read.
    pub banned: Option<BanVerdict>,
    /// The request's one checked host (`None` if it names none, as HTTP/1.0 may).
    pub host: Option<CanonicalHost>,
    /// Set when the host is malformed or ambiguous: the request is refused with 400.
    pub bad_host: Option<HostError>,
    /// The direct peer.
    pub peer: SocketAddr,
    /// Whether the direct peer is a trusted proxy (whose forwarding headers we believe).
    pub trusted_peer: bool,
    /// `X-Forwarded-Proto` for the origin: a trusted proxy's `http`/`https`, else the
    /// configured `public_scheme`.
    pub proto: &'static str,
    /// `X-Request-Id`: a trusted proxy's (if sane), else a fresh one; forwarded and logged.
    pub request_id: HeaderValue,
    /// Index into the app's rooms, by host or the catch-all.
    pub room: Option<usize>,
    /// The verified visitor of this room, if the cookie verified.
    pub visitor: Option<VisitorId>,
    /// The client prefers JSON to HTML (`Accept`), so errors and the waiting view are JSON.
    pub wants_json: bool,
    /// The language of our pages, from `Accept-Language`.
    pub lang: i18n::Lang,
}

impl App {
    pub(super) fn identify<B>(
        &self,
        rooms: &super::RoomTable,
        req: &Request<B>,
        peer: SocketAddr,
    ) -> Identity {
        // An unreadable forwarding header names nobody: the request is refused (400) with
        // the peer as its address for the log, and is not judged as the peer's.
        let (client_ip, bad_forwarded) =
            match identity::client_ip(peer.ip(), req.headers(), &self.trusted) {
                Ok(ip) => (ip, false),
                Err(_) => (peer.ip().to_canonical(), true),
            };
        let fetch = FetchSite::of(req.headers());
        let (host, bad_host) = match identity::request_host(req) {
            Ok(host) => (host, None),
            Err(e) => (None, Some(e)),
        };
        // A refused host routes nowhere, not even to the catch-all.
        let room = match (&host, bad_host) {
            (_, Some(_)) => None,
            (Some(h), None) => rooms.route(Some(h.name())),
            (None, None) => rooms.route(None),
        };
        // The ban check comes first: a banned client's cookie is never even verified.
        let banned = (!bad_forwarded)
            .then(|| self.abuse.check(client_ip))
            .flatten();
        let visitor = room
            .filter(|_| banned.is_none() && !bad_forwarded)
            .and_then(|i| self.visitor(req, rooms.get(i), client_ip, fetch));
        let trusted_peer = self.trusted.contains(peer.ip());
        let proto = trusted_peer
            .then(|| forwarded_proto(req.headers()))
            .flatten()
            .unwrap_or(self.public_scheme);
        let request_id = trusted_peer
            .then(|| sane_request_id(req.headers()))
            .flatten()
            .unwrap_or_else(new_request_id);
        Identity {
            peer,
            trusted_peer,
            proto,
            request_id,
            host,
            bad_host,
            client_ip,
            bad_forwarded,
            fetch,
            client: ClientKey::from(client_ip),
            banned,
            room,
            visitor,
            wants_json: pages::prefers_json(req.headers().get(header::ACCEPT)),
            lang: i18n::negotiate(req.headers().get(header::ACCEPT_LANGUAGE)),
        }
    }

    /// The visitor `room`'s cookie names: the first `ar_visitor` value that verifies for
    /// this room, of at most [`MAX_VISITOR_COOKIES`] (see `token::visitor_cookies` for why
    /// there can be several). A forged one (bad signature, unknown key) is a strike only
    /// when every value was read and none verifies, and never for a cross-site request
    /// (another site's page chose to send it); an expired one is no strike.
    fn visitor<B>(
        &self,
        req: &Request<B>,
        room: &super::Room,
        client_ip: IpAddr,
        fetch: FetchSite,
    ) -> Option<VisitorId> {
        let now = SystemTime::now();
        let mut verified_any = false;
        let mut forged = false;
        let mut values = crate::token::visitor_cookies(req.headers());
        for value in values.by_ref().take(MAX_VISITOR_COOKIES) {
            match self.cookies.verify(value, now) {
                Ok(claim) if claim.room.as_str() == room.name => return Some(claim.visitor),
                Ok(_) => verified_any = true,
                Err(e) => {
                    tracing::debug!(%client_ip, error = %e, "visitor cookie rejected");
                    forged |= matches!(e, CookieError::BadSignature | CookieError::UnknownKey);
                }
            }
        }
        // Values left unread may hold the visitor's own: no strike then.
        let all_read = values.next().is_none();
        if forged && !verified_any && all_read && !fetch.cross_site {
            self.strike(client_ip, StrikeReason::BadCookie);
        }
        None
    }
}

/// The most `ar_visitor` values of one request checked. A browser sends its own and what
/// sibling subdomains set, those for longer paths first, so a sibling can push the
/// visitor's own back by tossing one per path; each checked value may cost an HMAC
/// (about 0.3 µs), so a header stuffed with hundreds costs no more than this many. A
/// request with more is never struck (the unread ones may hold the visitor's own).
const MAX_VISITOR_COOKIES: usize = 32;

/// A browser's fetch metadata (`Sec-Fetch-Site`, `Sec-Fetch-Dest`): whether another site's
/// page made the request, and whether it is a top-level navigation. Browsers set these
/// headers themselves and a page cannot forge them, which is what lets the abuse registry
/// tell a visitor's own acts from what another site makes their browser do
/// (strikes only from the client's own acts). A client that sends none (an API client,
/// an old browser) is judged on its own acts, as before.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FetchSite {
    /// `Sec-Fetch-Site: cross-site`: a page on another site sent it. Never a strike,
    /// never a ban path, never spends or refuses a grant.
    pub cross_site: bool,
    /// `Sec-Fetch-Dest: document`: a top-level navigation.
    pub document: bool,
    /// Whether any `Sec-Fetch-*` header came at all.
    pub present: bool,
}

/// `Sec-Fetch-Site` (no constant in the `http` crate).
const SEC_FETCH_SITE: &str = "sec-fetch-site";
/// `Sec-Fetch-Dest`.
const SEC_FETCH_DEST: &str = "sec-fetch-dest";
/// `Sec-Fetch-Mode`.
const SEC_FETCH_MODE: &str = "sec-fetch-mode";

impl FetchSite {
    /// Reads the request's fetch metadata.
    pub fn of(headers: &HeaderMap) -> FetchSite {
        let site = headers.get(SEC_FETCH_SITE);
        let dest = headers.get(SEC_FETCH_DEST);
        FetchSite {
            cross_site: site.is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"cross-site")),
            document: dest.is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"document")),
            present: site.is_some() || dest.is_some() || headers.contains_key(SEC_FETCH_MODE),
        }
    }

    /// A request another site's page embedded (an image, a script, a frame, a fetch): it
    /// never joins the line or takes a slot ([`super::classify::Class::Embedded`]).
    pub fn embedded_cross_site(self) -> bool {
        self.cross_site && !self.document
    }

    /// Whether a priority grant on this request counts: on a top-level navigation of
    /// the visitor's own (not from another site), or from a client that sends no fetch
    /// metadata at all (an API client).
    pub fn grant_honoured(self) -> bool {
        !self.present || (self.document && !self.cross_site)
    }
}

/// A trusted proxy's `X-Forwarded-Proto`, if it is `http` or `https` (the first of a list).
fn forwarded_proto(headers: &HeaderMap) -> Option<&'static str> {
    let value = headers
        .get(crate::proxy::X_FORWARDED_PROTO)?
        .to_str()
        .ok()?;
    match value.split(',').next()?.trim() {
        p if p.eq_ignore_ascii_case("https") => Some("https"),
        p if p.eq_ignore_ascii_case("http") => Some("http"),
        _ => None,
    }
}

/// Longest `X-Request-Id` kept from a trusted proxy.
const MAX_REQUEST_ID: usize = 128;

/// A trusted proxy's `X-Request-Id`, if it is 1–128 visible ASCII characters: anything else
/// could corrupt log lines or the origin's parsing, so a fresh id replaces it.
fn sane_request_id(headers: &HeaderMap) -> Option<HeaderValue> {
    let value = headers.get(crate::proxy::X_REQUEST_ID)?;
    let bytes = value.as_bytes();
    let sane = !bytes.is_empty()
        && bytes.len() <= MAX_REQUEST_ID
        && bytes.iter().all(|b| b.is_ascii_graphic());
    sane.then(|| value.clone())
}

/// A fresh request id: 128 bits in hex, unique (not secret: it is logged and sent to the
/// origin, and nothing is decided by it). Drawn from a per-thread generator seeded once
/// from the operating system, because a `getrandom` call per request was a measurable
/// share of the admitted path (a system call for every proxied request).
fn new_request_id() -> HeaderValue {
    let id = REQUEST_IDS.with(RequestIds::next);
    let mut hex = [0u8; 32];
    for (i, byte) in id.to_be_bytes().iter().enumerate() {
        hex[2 * i] = HEX[usize::from(byte >> 4)];
        hex[2 * i + 1] = HEX[usize::from(byte & 0x0f)];
    }
    crate::http::scratch::header_value(&hex).expect("hex is a valid header value")
}

const HEX: &[u8; 16] = b"0123456789abcdef";

thread_local! {
    static REQUEST_IDS: RequestIds = RequestIds::seeded();
}

/// A thread's request ids: a random 128-bit key and a counter, mixed (the SplitMix64
/// finalizer on each half) so consecutive ids share no visible prefix. Distinct threads and processes
/// differ by their random keys; within a thread the counter never repeats.
struct RequestIds {
    key: (u64, u64),
    counter: std::cell::Cell<u64>,
}

impl RequestIds {
    fn seeded() -> Self {
        let mut seed = [0u8; 16];
        getrandom::fill(&mut seed).expect("the operating system's random generator failed");
        let (hi, lo) = seed.split_at(8);
        RequestIds {
            key: (
                u64::from_le_bytes(hi.try_into().expect("8 bytes")),
                u64::from_le_bytes(lo.try_into().expect("8 bytes")),
            ),
            counter: std::cell::Cell::new(0),
        }
    }

    fn next(&self) -> u128 {
        let n = self.counter.get();
        self.counter.set(n.wrapping_add(1));
        // `splitmix64` is a bijection on u64, so the low half alone never repeats within
        // a thread (until 2^64 ids).
        let hi = splitmix64(self.key.0 ^ n);
        let lo = splitmix64(self.key.1.wrapping_add(n));
        (u128::from(hi) << 64) | u128::from(lo)
    }
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_from_a_proxy_are_bounded_visible_ascii() {
        let with = |v: &[u8]| {
            let mut h = HeaderMap::new();
            h.insert(
                crate::proxy::X_REQUEST_ID,
                HeaderValue::from_bytes(v).unwrap(),
            );
            sane_request_id(&h)
        };
        assert_eq!(with(b"abc-123").unwrap(), "abc-123");
        assert!(with(b"").is_none());
        assert!(with(b"a b").is_none());
        assert!(with(b"\xe9").is_none());
        assert!(with(&[b'a'; 129]).is_none());
        assert_eq!(new_request_id().len(), 32);
        assert_ne!(new_request_id(), new_request_id());
    }

    #[test]
    fn request_ids_are_lowercase_hex_and_never_repeat_across_threads() {
        let ids = || (0..20_000).map(|_| new_request_id()).collect::<Vec<_>>();
        let other = std::thread::spawn(ids).join().unwrap();
        let all: Vec<HeaderValue> = ids().into_iter().chain(other).collect();
        assert!(all.iter().all(|id| {
            id.len() == 32
                && id
                    .as_bytes()
                    .iter()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
        }));
        let distinct: std::collections::HashSet<&[u8]> =
            all.iter().map(|id| id.as_bytes()).collect();
        assert_eq!(distinct.len(), all.len());
        // Consecutive ids share no prefix a reader could mistake for a sequence.
        assert_ne!(all[0].as_bytes()[..8], all[1].as_bytes()[..8]);
    }

    #[test]
    fn proto_only_http_or_https() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert("x-forwarded-proto", HeaderValue::from_str(v).unwrap());
            forwarded_proto(&h)
        };
        assert_eq!(with("https"), Some("https"));
        assert_eq!(with("HTTP, https"), Some("http"));
        assert_eq!(with("gopher"), None);
    }
}
