//! Step 2 of the request path: what a request is for, from its method, target, path and
//! whether it carries a priority grant (no store, no cookie, no signature check), as one
//! [`Class`] in SPEC §10's fixed order.
//!
//! Where the §10 classes go, in order (each is a variant here and an arm of the one
//! `match` in [`super::App::handle`]):
//! 1. banned client — first, from the in-memory ban set, before the cookie is read
//!    (`Class::Banned`, fed by `crate::abuse`; needs the [`super::identify::Identity`]);
//! 2. reserved `/__anteroom/…` — below ([`Class::Healthz`] … [`Class::UnknownReserved`]);
//! 3. ban paths, 4. bypass (+ CORS preflight), 5. assets, 6. streams — between the
//!    reserved paths and [`Class::Grant`], each from the room's config;
//! 7. a priority grant: [`Class::Grant`] (verified and spent in `decide`);
//! 8. the page: [`Class::Site`], decided by the queue.

use http::{Method, Request};

use super::error::Kind;

/// Everything under this prefix is anteroom's own and never proxied.
pub const RESERVED_PREFIX: &str = "/__anteroom/";

/// What a request is for.
#[derive(Debug, PartialEq, Eq)]
pub enum Class {
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
    /// The site with a priority grant (`ar_grant` or `X-Anteroom-Grant`, step 7): the
    /// grant is checked, then the queue decides with the visitor at position 1.
    Grant,
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
        if crate::priority::carried(req).is_some() {
            return Class::Grant;
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
        assert_eq!(classify(&get("/shop?ar_grant=v1.x")), Class::Grant);
        assert_eq!(classify(&get("/shop?ar_grantx=1")), Class::Site);
        let header = Request::get("/")
            .header("x-anteroom-grant", "v1.x")
            .body(())
            .unwrap();
        assert_eq!(classify(&header), Class::Grant);
        // Reserved paths come first: a grant there is nothing.
        assert_eq!(
            classify(&get("/__anteroom/healthz?ar_grant=v1.x")),
            Class::Healthz
        );
        assert_eq!(
            classify(&get("http://elsewhere/")),
            Class::Refused(Kind::AbsoluteForm)
        );
    }
}
