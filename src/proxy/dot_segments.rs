//! Dot segments in a request path (`.`, `..`, also percent-encoded or behind a backslash),
//! resolved before the origin's prefix is joined so a path can never climb out of it, and
//! the encodings origins decode differently (`..%2f`) refused.

use http::Request;
use http::Uri;
use http::uri::PathAndQuery;

/// Why a request path was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    /// A segment hides a separator or a dot segment behind percent-encoding
    /// (`..%2f`, `%5c..`), which origins decode differently.
    EncodedSeparator,
    /// Not an origin-form path (`*`).
    NotAbsolute,
}

/// Resolves dot segments per RFC 3986 §5.2.4 before the origin's prefix is joined, so a
/// path can never climb out of it. `.` and `..` count also when percent-encoded
/// (`%2e`), a backslash is a separator (several servers treat it so), and `..` at the top
/// stays at the top. A segment that still holds an encoded `/` or `\` next to dots is
/// refused. Returns `None` when nothing needed changing, so the common path allocates
/// nothing and a resolved path resolves to `None` again.
pub fn resolve_dot_segments(path: &str) -> Result<Option<String>, PathError> {
    if !path.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    if !needs_resolution(path) {
        return Ok(None);
    }
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path[1..].split(['/', '\\']).collect();
    let last = segments.len() - 1;
    for (i, seg) in segments.iter().enumerate() {
        match dot_kind(seg) {
            Some(1) => {
                if i == last {
                    out.push("");
                }
            }
            Some(_) => {
                out.pop();
                if i == last {
                    out.push("");
                }
            }
            None => {
                if hides_separator(seg) {
                    return Err(PathError::EncodedSeparator);
                }
                out.push(seg);
            }
        }
    }
    let mut resolved = String::with_capacity(path.len());
    for seg in &out {
        resolved.push('/');
        resolved.push_str(seg);
    }
    if resolved.is_empty() {
        resolved.push('/');
    }
    // The pre-check is coarse (`/.well-known`, `a%2Fb`): a path it flags may need nothing,
    // and `None` is what says a path is final (the proxy's last check relies on it).
    Ok((resolved != path).then_some(resolved))
}

/// Cheap pre-check: only a path with a dot-ish segment, a backslash or a `%2e`/`%2f`/`%5c`
/// escape needs the full walk.
fn needs_resolution(path: &str) -> bool {
    let b = path.as_bytes();
    if b.contains(&b'\\') {
        return true;
    }
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'.' if b[i - 1] == b'/' => return true,
            b'%' if i + 2 < b.len() => {
                let esc = [b[i + 1].to_ascii_lowercase(), b[i + 2].to_ascii_lowercase()];
                if matches!(&esc, b"2e" | b"2f" | b"5c") {
                    return true;
                }
            }
            _ => {}
        }
    }
    false
}

/// `Some(1)` for `.`, `Some(2)` for `..`, literal or percent-encoded; else `None`.
fn dot_kind(seg: &str) -> Option<u8> {
    let mut dots = 0u8;
    let b = seg.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'.' {
            i += 1;
        } else if b[i] == b'%' && b.len() >= i + 3 && b[i + 1] == b'2' && (b[i + 2] | 0x20) == b'e'
        {
            i += 3;
        } else {
            return None;
        }
        dots += 1;
        if dots > 2 {
            return None;
        }
    }
    (dots > 0).then_some(dots)
}

/// Whether a segment hides a dot segment behind an encoded `/` or `\` (`..%2f`, `%5c..`):
/// an origin that decodes it once would climb out of the prefix. An encoded slash between
/// ordinary names (`a%2Fb`) is left alone.
fn hides_separator(seg: &str) -> bool {
    let lower = seg.to_ascii_lowercase();
    if !lower.contains("%2f") && !lower.contains("%5c") {
        return false;
    }
    lower
        .replace("%5c", "%2f")
        .split("%2f")
        .any(|part| dot_kind(part).is_some())
}

/// Rewrites `req`'s path with its dot segments resolved (see [`resolve_dot_segments`]),
/// keeping the query; a no-op (and no allocation) for an ordinary path. Paths that are not
/// origin-form (`OPTIONS *`) are left alone for the caller to judge.
pub fn resolve_request_path<B>(req: &mut Request<B>) -> Result<(), PathError> {
    let path = req.uri().path();
    if !path.starts_with('/') {
        return Ok(());
    }
    let Some(resolved) = resolve_dot_segments(path)? else {
        return Ok(());
    };
    let pq = match req.uri().query() {
        Some(q) => format!("{resolved}?{q}"),
        None => resolved,
    };
    let mut parts = req.uri().clone().into_parts();
    parts.path_and_query = Some(PathAndQuery::try_from(pq).map_err(|_| PathError::NotAbsolute)?);
    *req.uri_mut() = Uri::from_parts(parts).map_err(|_| PathError::NotAbsolute)?;
    Ok(())
}
