//! Step 2 of the request path: what a request is for, from its method, target and path
//! alone (no store, no cookie), as one [`Class`] in SPEC §10's fixed order.
//!
//! Where the §10 classes go, in order (each is a variant here and an arm of the one
//! `match` in [`super::App::handle`]):
//! 1. banned client — first, from the in-memory ban set, before the cookie is read
//!    (`Class::Banned`, fed by `crate::abuse`; needs the [`super::identify::Identity`]);
//! 2. reserved `/__anteroom/…` — below ([`Class::Healthz`] … [`Class::UnknownReserved`]);
//! 3. ban paths, 4. bypass (+ CORS preflight), 5. assets, 6. streams, 7. priority grant —
//!    between the reserved paths and [`Class::Site`], each from the room's config;
//! 8. the page: [`Class::Site`], decided by the queue.

use http::{Method, Request};

use super::error::Kind;

/// Everything under this prefix is anteroom's own and never proxied.
pub const RESERVED_PREFIX: &str = "/__anteroom/";

/// What a request is for.
#[derive(Debug, PartialEq, Eq)]
pub enum Class {
    /// The client is banned (SPEC §10 step 1, from [`super::identify::Identity::banned`]).
    Banned(crate::abuse::BanVerdict),
    /// Refused before anything routes on it (absolute-form target, CONNECT).
    Refused(Kind),
    Healthz,
    Readyz,
    Events,
    /// `/__anteroom/admin` and everything below it: [`crate::admin::handle`].
    Admin,
    /// A built-in front-end file, `/__anteroom/static/{name}`.
    Static(String),
    /// `GET /__anteroom/admission-key`: the public key of the admission token (SPEC §14).
    AdmissionKey,
    /// Under `/__anteroom/` but nothing we serve.
    UnknownReserved,
    /// The site: the queue decides.
    Site,
}

pub fn classify<B>(req: &Request<B>) -> Class {
    // Absolute-form targets name a host of the client's choosing; a reverse proxy never
    // needs them, so they are refused before anything can route on them.
    if is_absolute_form(req) {
        return Class::Refused(Kind::AbsoluteForm);
    }
    if req.method() == Method::CONNECT {
        return Class::Refused(Kind::Connect);
    }
    let path = req.uri().path();
    let Some(reserved) = path.strip_prefix(RESERVED_PREFIX) else {
        // `/__anteroom` without the slash is reserved too.
        if path == "/__anteroom" {
            return Class::UnknownReserved;
        }
        return Class::Site;
    };
    match (req.method(), reserved) {
        (&Method::GET | &Method::HEAD, "healthz") => Class::Healthz,
        (&Method::GET | &Method::HEAD, "readyz") => Class::Readyz,
        (&Method::GET, "events") => Class::Events,
        (&Method::GET | &Method::HEAD, "admission-key") => Class::AdmissionKey,
        (_, p) if p == "admin" || p.starts_with("admin/") => Class::Admin,
        (&Method::GET | &Method::HEAD, p) if p.starts_with("static/") => {
            Class::Static(p["static/".len()..].to_owned())
        }
        _ => Class::UnknownReserved,
    }
}

/// The path as ban paths see it: percent-encoded unreserved characters decoded (so
/// `%2e` is `.`, RFC 3986 §6.2.2.2) and dot segments removed (§5.2.4), so `/%2eenv`,
/// `/x/../.env` and `/./.env` all match `/.env`. Other escapes stay as they are.
pub fn normalized_path(path: &str) -> std::borrow::Cow<'_, str> {
    use std::borrow::Cow;
    if !path.contains('%') && !path.split('/').any(|s| s == "." || s == "..") {
        return Cow::Borrowed(path);
    }
    let bytes = path.as_bytes();
    let mut decoded = String::with_capacity(path.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (
                (bytes[i + 1] as char).to_digit(16),
                (bytes[i + 2] as char).to_digit(16),
            )
        {
            let c = (h * 16 + l) as u8;
            if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~') {
                decoded.push(c as char);
                i += 3;
                continue;
            }
        }
        // Copy one whole character (the path may hold UTF-8).
        let ch = path[i..].chars().next().unwrap_or('/');
        decoded.push(ch);
        i += ch.len_utf8();
    }
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = decoded.split('/').skip(1).collect();
    let last = segments.len().saturating_sub(1);
    for (n, seg) in segments.iter().enumerate() {
        match *seg {
            "." => {
                if n == last {
                    out.push("");
                }
            }
            ".." => {
                out.pop();
                if n == last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    Cow::Owned(format!("/{}", out.join("/")))
}

/// An HTTP/1 request whose target names a host (`GET http://elsewhere/ HTTP/1.1`).
fn is_absolute_form<B>(req: &Request<B>) -> bool {
    req.version() < http::Version::HTTP_2 && req.uri().authority().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(uri: &str) -> Request<()> {
        Request::get(uri).body(()).unwrap()
    }

    #[test]
    fn reserved_paths_and_the_site() {
        assert_eq!(classify(&get("/__anteroom/healthz")), Class::Healthz);
        assert_eq!(classify(&get("/__anteroom/readyz")), Class::Readyz);
        assert_eq!(classify(&get("/__anteroom/events")), Class::Events);
        assert_eq!(classify(&get("/__anteroom/admin/api/status")), Class::Admin);
        assert_eq!(
            classify(&get("/__anteroom/static/a.js")),
            Class::Static("a.js".into())
        );
        assert_eq!(
            classify(&get("/__anteroom/admission-key")),
            Class::AdmissionKey
        );
        assert_eq!(classify(&get("/__anteroom")), Class::UnknownReserved);
        assert_eq!(classify(&get("/__anteroom/nope")), Class::UnknownReserved);
        assert_eq!(classify(&get("/shop")), Class::Site);
        for (raw, norm) in [
            ("/.env", "/.env"),
            ("/%2eenv", "/.env"),
            ("/%2Eenv", "/.env"),
            ("/a/../.env", "/.env"),
            ("/./.env", "/.env"),
            ("/../../.env", "/.env"),
            ("/a/./b/.", "/a/b/"),
            ("/a/%2e%2e/.git/config", "/.git/config"),
            ("/a%2Fb", "/a%2Fb"),
            ("/caf%C3%A9", "/caf%C3%A9"),
            ("/%", "/%"),
            ("/%2", "/%2"),
        ] {
            assert_eq!(normalized_path(raw), norm, "{raw}");
        }
        assert_eq!(
            classify(&get("http://elsewhere/")),
            Class::Refused(Kind::AbsoluteForm)
        );
    }
}
