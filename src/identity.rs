//! Who is asking, independent of any listener or store: the client address behind trusted
//! proxies, the [`ClientKey`] per-address limits and bans use (IPv6 grouped by
//! /64), and the host a request names, normalised as rooms match it.
//!
//! Both the request path (`gate`) and the store layer (`queue`) import
//! this module; it imports neither.

use std::borrow::Cow;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue, Request, header};
use ipnet::IpNet;

/// The `X-Forwarded-For` header name.
pub const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The peers whose `X-Forwarded-For` is believed (`trusted_proxies`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    nets: Vec<IpNet>,
}

impl TrustedProxies {
    /// Trusts these networks.
    pub fn new(nets: Vec<IpNet>) -> Self {
        TrustedProxies { nets }
    }

    /// Whether `ip` (an IPv4-mapped IPv6 address counts as IPv4) is a trusted proxy.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.nets.iter().any(|net| net.contains(&ip))
    }

    /// Whether no proxy is trusted (`X-Forwarded-For` is never believed).
    pub fn is_empty(&self) -> bool {
        self.nets.is_empty()
    }

    /// The trusted networks, as configured.
    pub fn nets(&self) -> &[IpNet] {
        &self.nets
    }
}

impl From<Vec<IpNet>> for TrustedProxies {
    fn from(nets: Vec<IpNet>) -> Self {
        TrustedProxies::new(nets)
    }
}

/// One warning about `X-Forwarded-For` from an untrusted peer a minute, for the whole
/// process.
static UNTRUSTED_XFF_WARNING: crate::log_limiter::LogLimiter =
    crate::log_limiter::LogLimiter::new(Duration::from_secs(60));

/// A trusted proxy's `X-Forwarded-For` that cannot be read: a value with bytes that are
/// not visible ASCII, or an entry that is not an address. The request has no client we
/// can name, and it is never taken for the proxy's own: the caller answers 400.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("X-Forwarded-For from a trusted proxy cannot be read")]
pub struct UnreadableForwardedFor;

/// The client's address. An untrusted peer is the client, whatever its `X-Forwarded-For`
/// says. From a trusted peer, the `X-Forwarded-For` chain (every such header, in order) is
/// walked from the right, past trusted proxies, to the first untrusted address. If every
/// hop is trusted, the leftmost one is the answer. IPv4-mapped IPv6 addresses come back
/// as IPv4.
///
/// Every entry of the chain must be readable, the ones left of the answer too: a proxy
/// such as nginx (`$proxy_add_x_forwarded_for`) appends the real address to whatever the
/// client sent, so a walk that stopped at a bad byte and fell back to the peer would let
/// any client become the proxy, and one that skipped it would read a value nobody
/// checked. Either way the answer is [`UnreadableForwardedFor`].
pub fn client_ip(
    peer: IpAddr,
    headers: &HeaderMap,
    trusted: &TrustedProxies,
) -> Result<IpAddr, UnreadableForwardedFor> {
    let peer = peer.to_canonical();
    if !trusted.contains(peer) {
        if headers.contains_key(&X_FORWARDED_FOR) && UNTRUSTED_XFF_WARNING.allow() {
            tracing::warn!(
                %peer,
                "ignoring X-Forwarded-For from a peer that is not in trusted_proxies \
                 (add it there if it is your proxy); further warnings suppressed for a minute"
            );
        }
        return Ok(peer);
    }
    let mut answer = None;
    // Newest hop last: the last header's last entry is the closest to us.
    for value in headers.get_all(&X_FORWARDED_FOR).iter().rev() {
        let value = value.to_str().map_err(|_| UnreadableForwardedFor)?;
        for entry in value.rsplit(',') {
            let entry = entry.trim();
            if entry.is_empty() {
                continue;
            }
            let ip = parse_forwarded_ip(entry).ok_or(UnreadableForwardedFor)?;
            if answer.is_none_or(|found: (IpAddr, bool)| found.1) {
                answer = Some((ip, trusted.contains(ip)));
            }
        }
    }
    Ok(answer.map_or(peer, |(ip, _)| ip))
}

/// One `X-Forwarded-For` entry: an address, optionally with a port (`1.2.3.4:5678`,
/// `[2001:db8::1]:443`) or in brackets (`[2001:db8::1]`).
fn parse_forwarded_ip(entry: &str) -> Option<IpAddr> {
    if entry.len() > 64 {
        return None;
    }
    let ip = if let Ok(ip) = entry.parse::<IpAddr>() {
        ip
    } else if let Ok(sock) = entry.parse::<SocketAddr>() {
        sock.ip()
    } else {
        entry
            .strip_prefix('[')?
            .strip_suffix(']')?
            .parse::<Ipv6Addr>()
            .ok()?
            .into()
    };
    Some(ip.to_canonical())
}

/// The identity per-address limits and bans use: an IPv4 address, or an IPv6 /64 (one
/// subscriber usually holds a whole /64). IPv4-mapped IPv6 addresses are IPv4.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientKey(IpAddr);

impl ClientKey {
    /// The key's address: the IPv4 address, or the /64's network address.
    pub fn ip(&self) -> IpAddr {
        self.0
    }

    /// The key as 16 bytes: the IPv4-mapped IPv6 address, or the /64 prefix followed by
    /// zeros. Distinct keys have distinct bytes.
    pub fn to_bytes(&self) -> [u8; 16] {
        match self.0 {
            IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
            IpAddr::V6(v6) => v6.octets(),
        }
    }

    /// The key as a network: `a.b.c.d/32` or `prefix::/64`.
    pub fn net(&self) -> IpNet {
        let prefix = if self.0.is_ipv4() { 32 } else { 64 };
        IpNet::new(self.0, prefix).expect("32 and 64 are valid prefix lengths")
    }
}

impl From<IpAddr> for ClientKey {
    fn from(ip: IpAddr) -> Self {
        match ip.to_canonical() {
            IpAddr::V4(v4) => ClientKey(IpAddr::V4(v4)),
            IpAddr::V6(v6) => {
                let masked = u128::from(v6) & !(u128::MAX >> 64);
                ClientKey(IpAddr::V6(Ipv6Addr::from(masked)))
            }
        }
    }
}

impl From<Ipv4Addr> for ClientKey {
    fn from(ip: Ipv4Addr) -> Self {
        ClientKey::from(IpAddr::V4(ip))
    }
}

impl From<Ipv6Addr> for ClientKey {
    fn from(ip: Ipv6Addr) -> Self {
        ClientKey::from(IpAddr::V6(ip))
    }
}

impl fmt::Display for ClientKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            IpAddr::V4(v4) => write!(f, "{v4}"),
            IpAddr::V6(v6) => write!(f, "{v6}/64"),
        }
    }
}

impl fmt::Debug for ClientKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClientKey({self})")
    }
}

/// Host as rooms match it: trimmed, lowercased, port and brackets and a trailing dot
/// removed (`Shop.Example.com:443` → `shop.example.com`, `[::1]:8080` → `::1`).
pub fn normalize_host(host: &str) -> String {
    let h = host.trim();
    let h = if let Some(rest) = h.strip_prefix('[') {
        rest.split(']').next().unwrap_or(rest)
    } else if h.matches(':').count() == 1 {
        h.split(':').next().unwrap_or(h)
    } else {
        h
    };
    h.trim_end_matches('.').to_ascii_lowercase()
}

/// Why a request's host was refused (400).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostError {
    /// Anything but a DNS name or an IP literal with an optional numeric port.
    Malformed,
    /// HTTP/2: a `Host` header that disagrees with `:authority` (RFC 9113 §8.3.1).
    Mismatch,
    /// HTTP/1.1 without a `Host` header (RFC 9112 §3.2).
    Missing,
    /// More than one `Host` header (RFC 9112 §3.2).
    Duplicate,
}

/// A checked host: a lower-cased DNS name (no trailing dot)
/// or IP literal, and the port if one was given. The one value rooms are matched on and
/// the origin receives, so that nothing downstream can read the request's host differently.
///
/// Held as the header value the origin receives (`name[:port]`, IPv6 in brackets) with the
/// name's place in it: a `Host` header that is already canonical (the usual case) is kept
/// as it arrived, a slice of the connection's read buffer, so checking it and forwarding
/// it allocate nothing.
#[derive(Clone, PartialEq, Eq)]
pub struct CanonicalHost {
    authority: HeaderValue,
    /// Where the name (IPv6 without brackets) sits in `authority`; the port, if any, is
    /// what follows it.
    name: std::ops::Range<usize>,
}

impl CanonicalHost {
    /// Parses a `Host` header value or an HTTP/2 `:authority`: a DNS name or an IP literal
    /// with an optional numeric port; anything else (`a:80:80`, `x@host`, a backslash,
    /// spaces) is refused, because origins and rooms would read it differently.
    pub fn parse(raw: &str) -> Result<CanonicalHost, HostError> {
        Self::parse_keeping(raw, None)
    }

    /// [`CanonicalHost::parse`] of `value`'s text, keeping `value` itself when the text is
    /// already canonical.
    fn parse_header(value: &HeaderValue) -> Result<CanonicalHost, HostError> {
        let text = value.to_str().map_err(|_| HostError::Malformed)?;
        Self::parse_keeping(text, Some(value))
    }

    fn parse_keeping(raw: &str, value: Option<&HeaderValue>) -> Result<CanonicalHost, HostError> {
        let (name, bracketed, port_text) = if let Some(rest) = raw.strip_prefix('[') {
            let (v6, after) = rest.split_once(']').ok_or(HostError::Malformed)?;
            let ip: Ipv6Addr = v6.parse().map_err(|_| HostError::Malformed)?;
            let port = match after {
                "" => None,
                p => Some(p.strip_prefix(':').ok_or(HostError::Malformed)?),
            };
            let canonical = ip.to_string();
            let name = if canonical == v6 {
                Cow::Borrowed(v6)
            } else {
                Cow::Owned(canonical)
            };
            (name, true, port)
        } else {
            let (name, port) = match raw.split_once(':') {
                Some((name, p)) => (name, Some(p)),
                None => (raw, None),
            };
            (dns_name_or_ipv4(name)?, false, port)
        };
        let port = port_text.map(parse_port).transpose()?;
        // The text as given is canonical when the name needed no change and the port has
        // no leading zero (`:080` is forwarded as `:80`).
        let canonical_port = port_text.is_none_or(|p| p.len() == 1 || !p.starts_with('0'));
        let start = usize::from(bracketed);
        let name_range = start..start + name.len();
        if let (Cow::Borrowed(_), true, Some(value)) = (&name, canonical_port, value) {
            return Ok(CanonicalHost {
                authority: value.clone(),
                name: name_range,
            });
        }
        let mut text = String::with_capacity(name.len() + 8);
        if bracketed {
            text.push('[');
            text.push_str(&name);
            text.push(']');
        } else {
            text.push_str(&name);
        }
        if let Some(port) = port {
            text.push(':');
            push_decimal(&mut text, port);
        }
        let authority = HeaderValue::from_maybe_shared(bytes::Bytes::from(text))
            .map_err(|_| HostError::Malformed)?;
        Ok(CanonicalHost {
            authority,
            name: name_range,
        })
    }

    /// The host as rooms match it (see [`normalize_host`]).
    pub fn name(&self) -> &str {
        // Checked ASCII when parsed, so the conversion cannot fail.
        std::str::from_utf8(&self.authority.as_bytes()[self.name.clone()]).unwrap_or_default()
    }

    /// The host as the origin receives it: `name[:port]`, IPv6 in brackets.
    pub fn authority(&self) -> &str {
        self.authority.to_str().unwrap_or_default()
    }

    /// [`CanonicalHost::authority`] as a header value (a clone shares its bytes).
    pub fn header_value(&self) -> &HeaderValue {
        &self.authority
    }
}

impl fmt::Debug for CanonicalHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CanonicalHost({})", self.authority())
    }
}

/// `n` in decimal, without the formatting machinery.
fn push_decimal(text: &mut String, n: u16) {
    let mut digits = [0u8; 5];
    let mut rest = n;
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    for &digit in &digits[start..] {
        text.push(char::from(digit));
    }
}

fn parse_port(p: &str) -> Result<u16, HostError> {
    if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
        return Err(HostError::Malformed);
    }
    p.parse().map_err(|_| HostError::Malformed)
}

/// A DNS name (letters, digits, `-`, `_`, dot-separated labels of 1–63 bytes, at most 253
/// bytes, one trailing dot allowed and dropped, so `shop.example.` is `shop.example`) or a
/// dotted IPv4 address, lower-cased; borrowed when `name` is already all of that.
fn dns_name_or_ipv4(name: &str) -> Result<Cow<'_, str>, HostError> {
    let trimmed = name.strip_suffix('.').unwrap_or(name);
    if trimmed.is_empty() || trimmed.len() > 253 {
        return Err(HostError::Malformed);
    }
    let as_given = |text: &str| -> Cow<'_, str> {
        if text.len() == name.len() && !text.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Borrowed(&name[..text.len()])
        } else {
            Cow::Owned(text.to_ascii_lowercase())
        }
    };
    // The standard parser takes only four decimal octets without leading zeros, so an
    // address it accepts is already written the one way it prints.
    if trimmed.parse::<Ipv4Addr>().is_ok() {
        return Ok(as_given(trimmed));
    }
    for label in trimmed.split('.') {
        let ok = !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !ok {
            return Err(HostError::Malformed);
        }
    }
    // All-numeric last labels that are not a valid IPv4 (`1.2.3.999`) are read differently
    // by different resolvers; refuse rather than guess.
    if trimmed
        .rsplit('.')
        .next()
        .is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(HostError::Malformed);
    }
    Ok(as_given(trimmed))
}

/// The request's one host: `:authority` for HTTP/2 (a `Host` header next to it must agree),
/// else the `Host` header. `Ok(None)` when the request names none (HTTP/1.0).
pub fn request_host<B>(req: &Request<B>) -> Result<Option<CanonicalHost>, HostError> {
    let mut hosts = req.headers().get_all(header::HOST).iter();
    let header = match (hosts.next(), hosts.next()) {
        // RFC 9112 §3.2: more than one Host is a 400; so is none on HTTP/1.1.
        (Some(_), Some(_)) => return Err(HostError::Duplicate),
        (Some(value), None) => Some(CanonicalHost::parse_header(value)?),
        (None, _) => None,
    };
    let authority = match req.uri().authority() {
        Some(a) if req.version() == http::Version::HTTP_2 => {
            Some(CanonicalHost::parse(a.as_str())?)
        }
        _ => None,
    };
    match (authority, header) {
        (Some(a), Some(h)) if a != h => Err(HostError::Mismatch),
        (Some(a), _) => Ok(Some(a)),
        (None, None) if req.version() == http::Version::HTTP_11 => Err(HostError::Missing),
        (None, h) => Ok(h),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn trusted(nets: &[&str]) -> TrustedProxies {
        TrustedProxies::new(nets.iter().map(|n| n.parse().unwrap()).collect())
    }

    fn xff(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(&X_FORWARDED_FOR, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn untrusted_peer_ignores_forged_xff() {
        let t = trusted(&["10.0.0.0/8"]);
        let peer = ip("203.0.113.9");
        assert_eq!(client_ip(peer, &xff(&["1.2.3.4"]), &t), Ok(peer));
        assert_eq!(client_ip(peer, &xff(&["10.0.0.1, 1.2.3.4"]), &t), Ok(peer));
        assert_eq!(client_ip(peer, &HeaderMap::new(), &t), Ok(peer));
        // Nothing trusted at all.
        assert_eq!(
            client_ip(peer, &xff(&["1.2.3.4"]), &TrustedProxies::default()),
            Ok(peer)
        );
    }

    #[test]
    fn trusted_peer_rightmost_untrusted() {
        let t = trusted(&["10.0.0.0/8"]);
        let peer = ip("10.0.0.2");
        // The client forged the leftmost entry; the proxy appended the real one.
        let h = xff(&["6.6.6.6, 198.51.100.7"]);
        assert_eq!(client_ip(peer, &h, &t), Ok(ip("198.51.100.7")));
        // No header: the peer itself.
        assert_eq!(client_ip(peer, &HeaderMap::new(), &t), Ok(peer));
    }

    #[test]
    fn chain_through_two_trusted_proxies() {
        let t = trusted(&["10.0.0.0/8", "2001:db8:ffff::/48"]);
        let peer = ip("10.0.0.2");
        let h = xff(&["6.6.6.6, 198.51.100.7, 2001:db8:ffff::1", "10.1.1.1"]);
        assert_eq!(client_ip(peer, &h, &t), Ok(ip("198.51.100.7")));
        let h = xff(&["6.6.6.6,198.51.100.7,10.9.9.9,10.1.1.1"]);
        assert_eq!(client_ip(peer, &h, &t), Ok(ip("198.51.100.7")));
        // Every hop trusted: the leftmost.
        let h = xff(&["10.3.3.3, 10.2.2.2", "10.1.1.1"]);
        assert_eq!(client_ip(peer, &h, &t), Ok(ip("10.3.3.3")));
    }

    #[test]
    fn unreadable_xff_is_nobody_not_the_proxy() {
        let t = trusted(&["10.0.0.0/8"]);
        let peer = ip("10.0.0.2");
        let bad = Err(UnreadableForwardedFor);
        for garbage in [
            "garbage",
            "unknown",
            "1.2.3",
            "1.2.3.4.5",
            "::g",
            "[1.2.3.4]",
            "1.2.3.4:99999",
            "[2001:db8::1",
            "😀",
        ] {
            assert_eq!(client_ip(peer, &xff(&[garbage]), &t), bad, "{garbage:?}");
        }
        // What nginx's `$proxy_add_x_forwarded_for` makes of a client's garbage: the
        // client's value, then the real address. Left of the client or right of it, an
        // unreadable entry is never skipped and never falls back to the proxy.
        for chain in [
            "nonsense, 198.51.100.7",
            "1.2.3.4, nonsense, 10.1.1.1",
            "198.51.100.7, nonsense",
        ] {
            assert_eq!(client_ip(peer, &xff(&[chain]), &t), bad, "{chain:?}");
        }
        for bytes in [
            &b"\xff"[..],
            b"\xc3\xa9",
            b"1.2.3.4\x80",
            b"\xff, 198.51.100.7",
        ] {
            let mut h = HeaderMap::new();
            h.append(&X_FORWARDED_FOR, HeaderValue::from_bytes(bytes).unwrap());
            assert_eq!(client_ip(peer, &h, &t), bad, "{bytes:?}");
            // In a header of its own, before or after a good one.
            let mut h = xff(&["198.51.100.7"]);
            h.append(&X_FORWARDED_FOR, HeaderValue::from_bytes(bytes).unwrap());
            assert_eq!(client_ip(peer, &h, &t), bad, "{bytes:?}");
            let mut h = HeaderMap::new();
            h.append(&X_FORWARDED_FOR, HeaderValue::from_bytes(bytes).unwrap());
            h.append(&X_FORWARDED_FOR, HeaderValue::from_static("198.51.100.7"));
            assert_eq!(client_ip(peer, &h, &t), bad, "{bytes:?}");
        }
        // An untrusted peer's garbage is ignored like the rest of its header: it is the
        // client.
        let outsider = ip("203.0.113.9");
        let mut h = HeaderMap::new();
        h.append(&X_FORWARDED_FOR, HeaderValue::from_bytes(b"\xff").unwrap());
        assert_eq!(client_ip(outsider, &h, &t), Ok(outsider));
        // Empty entries are skipped; a header with none names no client (the proxy's
        // own request).
        let h = xff(&["198.51.100.7,, 10.1.1.1,"]);
        assert_eq!(client_ip(peer, &h, &t), Ok(ip("198.51.100.7")));
        for empty in ["", " ", ","] {
            assert_eq!(client_ip(peer, &xff(&[empty]), &t), Ok(peer), "{empty:?}");
        }
        // A huge header of good entries is fine; one over-long entry is unreadable.
        let huge = ",10.1.1.1".repeat(10_000);
        assert_eq!(client_ip(peer, &xff(&[&huge]), &t), Ok(ip("10.1.1.1")));
        let long = "x".repeat(10_000) + ",10.1.1.1";
        assert_eq!(client_ip(peer, &xff(&[&long]), &t), bad);
    }

    #[test]
    fn ports_and_brackets() {
        let t = trusted(&["10.0.0.0/8"]);
        let peer = ip("10.0.0.2");
        assert_eq!(
            client_ip(peer, &xff(&["1.2.3.4:5678"]), &t),
            Ok(ip("1.2.3.4"))
        );
        assert_eq!(
            client_ip(peer, &xff(&["[2001:db8::1]:443"]), &t),
            Ok(ip("2001:db8::1"))
        );
        assert_eq!(
            client_ip(peer, &xff(&["[2001:db8::1]"]), &t),
            Ok(ip("2001:db8::1"))
        );
        assert_eq!(
            client_ip(peer, &xff(&["2001:db8::1"]), &t),
            Ok(ip("2001:db8::1"))
        );
    }

    #[test]
    fn mapped_ipv4_is_ipv4() {
        let t = trusted(&["10.0.0.0/8"]);
        // A trusted IPv4 proxy seen on a dual-stack socket.
        let peer = ip("::ffff:10.0.0.2");
        let h = xff(&["::ffff:198.51.100.7"]);
        assert_eq!(client_ip(peer, &h, &t), Ok(ip("198.51.100.7")));
        // A mapped trusted hop is skipped like its IPv4 self.
        let h = xff(&["198.51.100.7, ::ffff:10.1.1.1"]);
        assert_eq!(client_ip(peer, &h, &t), Ok(ip("198.51.100.7")));
        // An untrusted mapped peer comes back as IPv4.
        assert_eq!(
            client_ip(ip("::ffff:203.0.113.9"), &HeaderMap::new(), &t),
            Ok(ip("203.0.113.9"))
        );
        assert_eq!(
            ClientKey::from(ip("::ffff:1.2.3.4")),
            ClientKey::from(ip("1.2.3.4"))
        );
    }

    #[test]
    fn ipv6_grouped_by_64() {
        let a = ClientKey::from(ip("2001:db8:1:2:aaaa::1"));
        let b = ClientKey::from(ip("2001:db8:1:2:ffff:ffff:ffff:ffff"));
        let c = ClientKey::from(ip("2001:db8:1:3::1"));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.to_string(), "2001:db8:1:2::/64");
        assert_eq!(a.ip(), ip("2001:db8:1:2::"));
        assert_eq!(a.net(), "2001:db8:1:2::/64".parse::<IpNet>().unwrap());
        assert!(a.net().contains(&ip("2001:db8:1:2::9")));

        let v4 = ClientKey::from(ip("1.2.3.4"));
        assert_ne!(v4, ClientKey::from(ip("1.2.3.5")));
        assert_eq!(v4.to_string(), "1.2.3.4");
        assert_eq!(v4.net(), "1.2.3.4/32".parse::<IpNet>().unwrap());
        assert_eq!(format!("{v4:?}"), "ClientKey(1.2.3.4)");

        let mut set = std::collections::HashSet::new();
        set.insert(a);
        set.insert(b);
        set.insert(c);
        set.insert(v4);
        assert_eq!(set.len(), 3);
    }

    fn host(s: &str) -> Result<(String, Option<u16>), HostError> {
        CanonicalHost::parse(s).map(|h| {
            let after_name = h.authority()[h.name.end..].trim_start_matches(']');
            let port = after_name.strip_prefix(':').map(|p| p.parse().unwrap());
            (h.name().to_owned(), port)
        })
    }

    #[test]
    fn hosts() {
        assert_eq!(host("Shop.Example").unwrap(), ("shop.example".into(), None));
        assert_eq!(
            host("shop.example:8080").unwrap(),
            ("shop.example".into(), Some(8080))
        );
        assert_eq!(
            host("shop.example.").unwrap(),
            ("shop.example".into(), None)
        );
        assert_eq!(
            host("127.0.0.1:80").unwrap(),
            ("127.0.0.1".into(), Some(80))
        );
        assert_eq!(host("[::1]:80").unwrap(), ("::1".into(), Some(80)));
        assert_eq!(host("[0:0::1]").unwrap(), ("::1".into(), None));
        assert_eq!(
            CanonicalHost::parse("[::1]:80").unwrap().authority(),
            "[::1]:80"
        );
        assert_eq!(
            CanonicalHost::parse("Shop.Example.").unwrap().authority(),
            "shop.example"
        );
        for port in ["0", "7", "80", "443", "8080", "65535"] {
            assert_eq!(
                CanonicalHost::parse(&format!("a.example:{port}"))
                    .unwrap()
                    .authority(),
                format!("a.example:{port}")
            );
        }
        for bad in [
            "",
            "shop.example:80:80",
            "x@shop.example",
            "shop.example\\",
            "shop example",
            "shop.example:",
            "shop.example:99999",
            "shop.example:+80",
            "[::1",
            "::1",
            "[::1]x",
            "a..b",
            ".",
            "1.2.3.999",
            "shop.example/",
            "shop.example?",
            "shop.example#",
            "%73hop.example",
            "shop.example..",
        ] {
            assert!(host(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_canonical_host_header_is_forwarded_as_it_arrived() {
        let parsed = |text: &str| {
            let value = HeaderValue::from_str(text).unwrap();
            let host = CanonicalHost::parse_header(&value).unwrap();
            let kept = host.header_value().as_bytes().as_ptr() == value.as_bytes().as_ptr();
            (host, kept)
        };
        for text in [
            "shop.example",
            "shop.example:8080",
            "127.0.0.1:80",
            "[::1]:443",
        ] {
            let (host, kept) = parsed(text);
            assert!(kept, "{text} was copied");
            assert_eq!(host.authority(), text);
        }
        for (text, canonical, name) in [
            ("Shop.Example", "shop.example", "shop.example"),
            ("shop.example.:8080", "shop.example:8080", "shop.example"),
            ("shop.example:080", "shop.example:80", "shop.example"),
            ("[0:0::1]:443", "[::1]:443", "::1"),
            ("127.0.0.1.", "127.0.0.1", "127.0.0.1"),
        ] {
            let (host, kept) = parsed(text);
            assert!(!kept, "{text} was kept");
            assert_eq!(host.authority(), canonical);
            assert_eq!(host.header_value(), canonical);
            assert_eq!(host.name(), name);
        }
        // Equal hosts compare equal however they were written.
        assert_eq!(parsed("Shop.Example:80").0, parsed("shop.example:80").0);
        assert_ne!(parsed("shop.example:80").0, parsed("shop.example").0);
    }

    #[test]
    fn h2_host_must_agree_with_authority() {
        let req = |auth: &str, host: Option<&str>| {
            let mut b = Request::get(format!("http://{auth}/")).version(http::Version::HTTP_2);
            if let Some(h) = host {
                b = b.header(header::HOST, h);
            }
            request_host(&b.body(()).unwrap())
        };
        assert_eq!(
            req("shop.example", None).unwrap().unwrap().name(),
            "shop.example"
        );
        assert!(req("Shop.Example", Some("shop.example.")).is_ok());
        assert_eq!(
            req("other.example", Some("shop.example")),
            Err(HostError::Mismatch)
        );
    }

    #[test]
    fn trusted_proxies_contains() {
        let t = trusted(&["10.0.0.0/8", "2001:db8::/32"]);
        assert!(t.contains(ip("10.255.0.1")));
        assert!(t.contains(ip("::ffff:10.0.0.1")));
        assert!(t.contains(ip("2001:db8::5")));
        assert!(!t.contains(ip("11.0.0.1")));
        assert!(!t.contains(ip("2001:db9::5")));
        assert!(!t.is_empty());
        assert!(TrustedProxies::default().is_empty());
    }
}
