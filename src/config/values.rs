//! Reading one value: durations, counts, booleans, addresses, networks, origins, URLs,
//! timestamps and page files, each refused with a message that says what was expected and
//! what was given, through [`super::validate::Ctx`] so the error names its key and line.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::validate::{Ctx, V};
use super::{ConfigError, PageFile};
use crate::invalid::Invalid;

pub use crate::clock::MAX_DURATION;

/// More serving threads than this is a typo, not a machine.
pub(super) const MAX_WORKERS: usize = 1024;
/// Longest `server.drain_delay` accepted.
pub(super) const MAX_DRAIN_DELAY: Duration = Duration::from_secs(300);
/// Smallest `server.max_header_bytes`: hyper's smallest HTTP/1 read buffer.
pub(super) const MIN_HEADER_BYTES: usize = 8 * 1024;
/// Largest `server.max_header_bytes`: past this a head is an attack, not a cookie jar.
pub(super) const MAX_HEADER_BYTES: usize = 1024 * 1024;

pub(super) fn duration(cx: &Ctx<'_>, key: &str, v: &V) -> Result<Duration, ConfigError> {
    let d = humantime::parse_duration(v.text.trim()).map_err(|e| {
        cx.fail(
            key,
            v,
            format!(
                "invalid duration {:?} ({e}); write it like 250ms, 60s or 5m",
                v.text
            ),
        )
    })?;
    if d > MAX_DURATION {
        return Err(cx.fail(
            key,
            v,
            format!("must be at most 365 days (got {})", v.text.trim()),
        ));
    }
    Ok(d)
}

/// A whole number of at least `min`.
pub(super) fn count(cx: &Ctx<'_>, key: &str, v: &V, min: usize) -> Result<usize, ConfigError> {
    match v.text.trim().parse::<usize>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(cx.fail(
            key,
            v,
            format!("must be a whole number of at least {min} (got {})", v.text),
        )),
    }
}

pub(super) fn positive_duration(cx: &Ctx<'_>, key: &str, v: &V) -> Result<Duration, ConfigError> {
    let d = duration(cx, key, v)?;
    if d.is_zero() {
        return Err(cx.fail(key, v, "must be longer than 0"));
    }
    Ok(d)
}

pub(super) fn at_least_1s(cx: &Ctx<'_>, key: &str, v: &V) -> Result<Duration, ConfigError> {
    let d = duration(cx, key, v)?;
    if d < Duration::from_secs(1) {
        return Err(cx.fail(
            key,
            v,
            format!("must be at least 1s (got {})", v.text.trim()),
        ));
    }
    Ok(d)
}

/// An operator's page file: read now (so a missing or bad file stops the start, naming the
/// key) and checked by `check`. Empty means none.
pub(super) fn page_file(
    cx: &Ctx<'_>,
    key: &str,
    v: &Option<V>,
    check: impl Fn(&str) -> Result<(), Invalid>,
) -> Result<Option<PageFile>, ConfigError> {
    const MAX_BYTES: u64 = 256 * 1024;
    let Some(v) = v.as_ref().filter(|v| !v.text.trim().is_empty()) else {
        return Ok(None);
    };
    let path = PathBuf::from(v.text.trim());
    let too_big = std::fs::metadata(&path).is_ok_and(|m| m.len() > MAX_BYTES);
    if too_big {
        return Err(cx.fail(key, v, format!("{} is larger than 256 KiB", path.display())));
    }
    let text = std::fs::read_to_string(&path)
        .map_err(|e| cx.fail(key, v, format!("cannot read {}: {e}", path.display())))?;
    check(&text).map_err(|m| cx.fail(key, v, m))?;
    Ok(Some(PageFile { path, text }))
}

pub(super) fn boolean(cx: &Ctx<'_>, key: &str, v: &V) -> Result<bool, ConfigError> {
    match v.text.trim() {
        "true" | "True" | "TRUE" | "1" | "yes" | "on" => Ok(true),
        "false" | "False" | "FALSE" | "0" | "no" | "off" => Ok(false),
        other => Err(cx.fail(key, v, format!("must be true or false (got {other:?})"))),
    }
}

/// `:8080`, `8080`, `127.0.0.1:8080`, `[::1]:8080`, `localhost:8080`.
pub fn parse_listen(text: &str) -> Result<SocketAddr, Invalid> {
    let t = text.trim();
    let bad = || {
        Invalid(format!(
            "must be an address like :8080, 127.0.0.1:8080 or [::1]:8080 (got {t:?})"
        ))
    };
    if let Some(port) = t.strip_prefix(':') {
        let port: u16 = port.parse().map_err(|_| bad())?;
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port));
    }
    if let Ok(port) = t.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port));
    }
    if let Ok(addr) = t.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if let Some(port) = t.strip_prefix("localhost:") {
        let port: u16 = port.parse().map_err(|_| bad())?;
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    if let Some(port) = t.strip_prefix("[::]:") {
        let port: u16 = port.parse().map_err(|_| bad())?;
        return Ok(SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port));
    }
    Err(bad())
}

/// A CIDR, or a bare address meaning /32 or /128.
/// The rules every bearer token shares (`admin_token`, `metrics_token`): long enough not
/// to be guessed, and nothing an `Authorization` header cannot carry.
pub(super) fn bearer_token(cx: &Ctx<'_>, key: &str, v: &V) -> Result<(), ConfigError> {
    let n = v.text.chars().count();
    if n < 16 {
        return Err(cx.fail(key, v, format!("must be at least 16 characters (got {n})")));
    }
    if v.text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(cx.fail(
            key,
            v,
            "must not contain spaces or control characters (it is sent in an Authorization \
             header)",
        ));
    }
    Ok(())
}

pub(super) fn parse_net(text: &str) -> Result<ipnet::IpNet, Invalid> {
    let t = text.trim();
    if let Ok(net) = t.parse::<ipnet::IpNet>() {
        return Ok(net.trunc());
    }
    if let Ok(ip) = t.parse::<IpAddr>() {
        return Ok(ipnet::IpNet::from(ip));
    }
    Err(Invalid(format!(
        "must be a CIDR like 10.0.0.0/8 or an IP address (got {t:?})"
    )))
}

pub(super) fn parse_origin(text: &str) -> Result<http::Uri, Invalid> {
    let t = text.trim();
    let uri: http::Uri = t.parse().map_err(|e| {
        Invalid(format!(
            "is not a valid URL ({e}); expected e.g. http://127.0.0.1:3000 (got {t:?})"
        ))
    })?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        Some(other) => {
            return Err(Invalid(format!(
                "must be an http:// or https:// URL, not {other}:// (got {t:?})"
            )));
        }
        None => {
            return Err(Invalid(format!(
                "must be an absolute URL like http://127.0.0.1:3000 (got {t:?})"
            )));
        }
    }
    match uri.authority() {
        Some(a) if !a.host().is_empty() => {
            if a.as_str().contains('@') {
                return Err(Invalid(format!("must not contain credentials (got {t:?})")));
            }
        }
        _ => return Err(Invalid(format!("must include a host (got {t:?})"))),
    }
    if uri.query().is_some() {
        return Err(Invalid(format!("must not have a query string (got {t:?})")));
    }
    Ok(uri)
}

/// A CA file key (`redis.ca_file`, `origin_ca_file`): read and checked now, so a bad path
/// or PEM is a config error naming the key, never a failure at the first connection.
pub(super) fn ca_file(
    cx: &Ctx<'_>,
    key: &str,
    v: &Option<V>,
) -> Result<Option<crate::tls::CaFile>, ConfigError> {
    let Some(v) = v.as_ref().filter(|v| !v.text.trim().is_empty()) else {
        return Ok(None);
    };
    crate::tls::CaFile::read(std::path::Path::new(v.text.trim()))
        .map(Some)
        .map_err(|m| cx.fail(key, v, m.to_string()))
}

pub(super) fn validate_redis_url(url: &str) -> Result<(), Invalid> {
    if url.is_empty() {
        return Ok(());
    }
    for node in url.split(',').map(str::trim) {
        let rest = node
            .strip_prefix("redis://")
            .or_else(|| node.strip_prefix("rediss://"))
            .ok_or_else(|| {
                Invalid(format!(
                    "must start with redis:// or rediss:// (got {:?}); leave empty for the \
                     embedded store",
                    super::describe::redact_url(node)
                ))
            })?;
        let authority = rest.split('/').next().unwrap_or("");
        let host = authority.rsplit('@').next().unwrap_or("");
        if host.is_empty() || host.starts_with(':') {
            return Err(Invalid(format!(
                "must include a host, e.g. redis://localhost:6379 (got {:?})",
                super::describe::redact_url(node)
            )));
        }
    }
    Ok(())
}

/// Why a configured time was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    /// Not a time with a date, a time of day and an offset (and no zone annotation).
    #[error("must be an RFC 3339 time like 2030-06-01T10:00:00Z or 2030-06-01T12:00:00+02:00")]
    Format,
    /// Before 1970: the store keeps times as unix milliseconds, which start there.
    #[error("must be 1970-01-01T00:00:00Z or later")]
    BeforeEpoch,
}

/// RFC 3339 (`2025-06-01T10:00:00Z`, `2025-06-01T12:00:00.5+02:00`, a space or a lower-case
/// `t` or `z` as RFC 3339 allows) to `SystemTime`, through `jiff`'s timestamp parser, which
/// also takes ISO 8601's other forms with an offset (`20250601T100000Z`, `…T10:00+02`).
/// Refused: a time without an offset (a different moment in every replica's zone), and a
/// time zone annotation (`…Z[Europe/Paris]`), which jiff would take and ignore, so that
/// the zone an operator wrote never silently means nothing.
pub fn parse_rfc3339(text: &str) -> Result<SystemTime, TimeError> {
    let text = text.trim();
    if text.contains('[') {
        return Err(TimeError::Format);
    }
    let at: jiff::Timestamp = text.parse().map_err(|_| TimeError::Format)?;
    let (secs, nanos) = (at.as_second(), at.subsec_nanosecond());
    let (Ok(secs), Ok(nanos)) = (u64::try_from(secs), u32::try_from(nanos)) else {
        return Err(TimeError::BeforeEpoch);
    };
    Ok(UNIX_EPOCH + Duration::new(secs, nanos))
}
