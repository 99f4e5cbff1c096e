//! The headers of a forwarded exchange: what is dropped both ways (hop-by-hop fields and
//! whatever `Connection` names), what a visitor may not tell the origin (`Forwarded`,
//! `X-Anteroom-*`, and from an untrusted peer `X-Real-IP` and `X-Forwarded-*`), the
//! forwarding headers anteroom sets, HTTP/2 cookie fields joined for HTTP/1.1, and how a
//! request is recognised as a WebSocket upgrade or an event stream.

use std::net::IpAddr;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Version};

/// Headers that describe one connection, not the message; never forwarded either way.
pub const HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// `X-Forwarded-Proto`: the scheme the visitor used.
pub(crate) const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
/// `X-Forwarded-Host`: the request's one checked host.
pub(super) const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const FORWARDED: HeaderName = HeaderName::from_static("forwarded");
const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");
/// The request id header, forwarded to the origin and logged.
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Removes what a visitor may not tell the origin : `Forwarded` always (nobody
/// vouches for its parts), every `X-Anteroom-*` header always (the origin may trust them as
/// ours), and from a peer that is not a trusted proxy `X-Real-IP` and every
/// `X-Forwarded-*` (the ones we set are set again afterwards). Allocates only when one is
/// present.
pub(super) fn scrub_forgeable(headers: &mut HeaderMap, trusted_peer: bool) {
    headers.remove(FORWARDED);
    if !trusted_peer {
        headers.remove(X_REAL_IP);
    }
    let doomed: Vec<HeaderName> = headers
        .keys()
        .filter(|name| {
            let name = name.as_str();
            name.starts_with("x-anteroom-") || (!trusted_peer && name.starts_with("x-forwarded-"))
        })
        .cloned()
        .collect();
    for name in doomed {
        headers.remove(name);
    }
}

/// `ip` as header text (`X-Forwarded-For`).
pub(super) fn ip_header(ip: IpAddr) -> HeaderValue {
    // Every request carries one; an IPv4 address is written without the formatting
    // machinery (2 % of an admitted request's instructions under callgrind).
    let value = match ip {
        IpAddr::V4(v4) => {
            let mut text = [0u8; 15];
            let mut len = 0;
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    text[len] = b'.';
                    len += 1;
                }
                if octet >= 100 {
                    text[len] = b'0' + octet / 100;
                    len += 1;
                }
                if octet >= 10 {
                    text[len] = b'0' + octet / 10 % 10;
                    len += 1;
                }
                text[len] = b'0' + octet % 10;
                len += 1;
            }
            crate::http::scratch::header_value(&text[..len])
        }
        IpAddr::V6(_) => crate::http::scratch::header_value(ip.to_string().as_bytes()),
    };
    value.expect("an ip address is a valid header value")
}

/// Removes hop-by-hop headers: [`HOP_BY_HOP`] and every header `Connection` names.
/// One pass over the names first finds which are there: most requests carry none, most
/// responses only `Connection: keep-alive`, and nine removals are nine hash lookups on
/// every request and every response.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let present = headers
        .keys()
        .filter_map(|name| HOP_BY_HOP.iter().position(|hop| hop == name))
        .fold(0u16, |mask, i| mask | 1 << i);
    if present == 0 {
        return;
    }
    // `Connection` first: its values are taken out whole, so the names it lists can be
    // removed as text (no header name is built for them).
    // Almost always one value (an origin's `keep-alive`): kept aside without a list.
    let (mut first, mut more) = (None, Vec::new());
    if let header::Entry::Occupied(entry) = headers.entry(header::CONNECTION) {
        for value in entry.remove_entry_mult().1 {
            match first {
                None => first = Some(value),
                Some(_) => more.push(value),
            }
        }
    }
    for value in first.iter().chain(&more) {
        let Ok(text) = value.to_str() else { continue };
        for token in text.split(',').map(str::trim) {
            if !token.is_empty() {
                headers.remove(token);
            }
        }
    }
    for (i, name) in HOP_BY_HOP.iter().enumerate() {
        if present & 1 << i != 0 {
            headers.remove(name);
        }
    }
}

/// HTTP/2 may split `Cookie` over several fields; HTTP/1.1 needs one, joined with `"; "`.
pub(super) fn join_cookies(headers: &mut HeaderMap) {
    if headers.get_all(header::COOKIE).iter().count() < 2 {
        return;
    }
    let joined: Vec<u8> = headers
        .get_all(header::COOKIE)
        .iter()
        .map(HeaderValue::as_bytes)
        .collect::<Vec<_>>()
        .join(&b"; "[..]);
    if let Ok(value) = HeaderValue::from_bytes(&joined) {
        headers.insert(header::COOKIE, value);
    }
}

fn has_token(headers: &HeaderMap, name: HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// A WebSocket upgrade request (`Connection: upgrade` and `Upgrade: websocket`, HTTP/1.1).
pub fn is_upgrade<B>(req: &Request<B>) -> bool {
    req.version() == Version::HTTP_11
        && has_token(req.headers(), header::CONNECTION, "upgrade")
        && has_token(req.headers(), header::UPGRADE, "websocket")
}

/// A request for a server-sent event stream (`Accept: text/event-stream`).
pub fn is_event_stream<B>(req: &Request<B>) -> bool {
    req.headers()
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|range| {
            range
                .split(';')
                .next()
                .is_some_and(|m| m.trim().eq_ignore_ascii_case("text/event-stream"))
        })
}
