//! Step 2 of the request path: what a request is for, from its method, target and path
//! alone (no store, no cookie), as one [`Class`] in SPEC §10's fixed order.
//!
//! The §10 classes, in order (each is a variant here and an arm of the one `match` in
//! [`super::App::handle`]):
//! 1. banned client — first, from the in-memory ban set, before the cookie is read
//!    (`Class::Banned`, fed by `crate::abuse`, lands with the bans branch: it goes at the
//!    top of [`classify`], before the reserved paths);
//! 2. reserved `/__anteroom/…` ([`Class::Healthz`] … [`Class::UnknownReserved`]), and
//!    `OPTIONS *` ([`Class::OptionsAny`]), which is about the server, not a page;
//! 3. ban paths (`Class::BanPath`, with the bans branch: right after the reserved paths);
//! 4. [`Class::Bypass`] (`bypass_paths`) and [`Class::Preflight`] (CORS preflights);
//! 5. [`Class::Asset`] (`asset_paths`); 6. [`Class::Stream`] (WebSocket upgrade or
//!    `Accept: text/event-stream`); 7. priority grant (with the grants work: a `Class::Grant`
//!    before the page);
//! 8. the page: [`Class::Site`], decided by the queue.

use http::{Method, Request};

use super::error::Kind;
use crate::config::RoomConfig;
use crate::glob::GlobSet;

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
    /// `OPTIONS *`: answered by anteroom; creates nothing.
    OptionsAny,
    /// Under the room's `bypass_paths`: straight to the origin, no queue, no cookie.
    Bypass,
    /// A CORS preflight (`OPTIONS` with `Access-Control-Request-Method`): it carries no
    /// cookie by design, so it is passed through like a bypass path.
    Preflight,
    /// Under the room's `asset_paths`: never joins the line, never gets the page.
    Asset,
    /// A WebSocket upgrade or an event stream to the origin: admitted sessions only.
    Stream,
    /// The site: the queue decides.
    Site,
}

/// A room's path classes, parsed once (the config checked every pattern).
#[derive(Clone, Debug, Default)]
pub struct RoomPaths {
    pub bypass: GlobSet,
    pub assets: GlobSet,
}

impl RoomPaths {
    pub fn of(room: &RoomConfig) -> RoomPaths {
        // Validation parsed these very patterns; a failure here cannot happen, and an
        // empty set (nothing matches) is the safe reading if it ever did.
        RoomPaths {
            bypass: GlobSet::new(&room.bypass_paths).unwrap_or_default(),
            assets: GlobSet::new(&room.asset_paths).unwrap_or_default(),
        }
    }
}

/// Classifies `req`; `paths` are the classes of the request's room, if it has one.
pub fn classify<B>(req: &Request<B>, paths: Option<&RoomPaths>) -> Class {
    // Absolute-form targets name a host of the client's choosing; a reverse proxy never
    // needs them, so they are refused before anything can route on them.
    if is_absolute_form(req) {
        return Class::Refused(Kind::AbsoluteForm);
    }
    if req.method() == Method::CONNECT {
        return Class::Refused(Kind::Connect);
    }
    if req.method() == Method::OPTIONS && req.uri().path() == "*" {
        return Class::OptionsAny;
    }
    let path = req.uri().path();
    let Some(reserved) = path.strip_prefix(RESERVED_PREFIX) else {
        // `/__anteroom` without the slash is reserved too.
        if path == "/__anteroom" {
            return Class::UnknownReserved;
        }
        return site_class(req, path, paths);
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

/// SPEC §10 steps 4 to 8 for a path of the site.
fn site_class<B>(req: &Request<B>, path: &str, paths: Option<&RoomPaths>) -> Class {
    if paths.is_some_and(|p| p.bypass.is_match(path)) {
        return Class::Bypass;
    }
    if req.method() == Method::OPTIONS
        && req
            .headers()
            .contains_key(http::header::ACCESS_CONTROL_REQUEST_METHOD)
    {
        return Class::Preflight;
    }
    if paths.is_some_and(|p| p.assets.is_match(path)) {
        return Class::Asset;
    }
    if crate::proxy::is_upgrade(req) || crate::proxy::is_event_stream(req) {
        return Class::Stream;
    }
    Class::Site
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

    fn classify(req: &Request<()>) -> Class {
        super::classify(req, None)
    }

    fn paths(bypass: &[&str], assets: &[&str]) -> RoomPaths {
        RoomPaths {
            bypass: GlobSet::new(bypass).unwrap(),
            assets: GlobSet::new(assets).unwrap(),
        }
    }

    #[test]
    fn the_site_classes_in_spec_order() {
        let p = paths(
            &["/webhooks/**", "/__anteroom/**"],
            &["*.css", "/webhooks/*.css"],
        );
        let c = |req: Request<()>| super::classify(&req, Some(&p));
        assert_eq!(c(get("/webhooks/pay")), Class::Bypass);
        // Bypass before assets; reserved paths before everything of the room.
        assert_eq!(c(get("/webhooks/a.css")), Class::Bypass);
        assert_eq!(c(get("/__anteroom/healthz")), Class::Healthz);
        assert_eq!(c(get("/static/app.css")), Class::Asset);
        assert_eq!(c(get("/static/app.css?v=2")), Class::Asset);
        assert_eq!(c(get("/app.cssx")), Class::Site);
        let preflight = Request::options("/api/cart")
            .header("access-control-request-method", "POST")
            .body(())
            .unwrap();
        assert_eq!(c(preflight), Class::Preflight);
        // A plain OPTIONS (no preflight header) is a page request like any other.
        assert_eq!(
            c(Request::options("/api/cart").body(()).unwrap()),
            Class::Site
        );
        assert_eq!(
            c(Request::options("*").body(()).unwrap()),
            Class::OptionsAny
        );
        let ws = Request::get("/socket")
            .header("connection", "Upgrade")
            .header("upgrade", "websocket")
            .body(())
            .unwrap();
        assert_eq!(c(ws), Class::Stream);
        let sse = Request::get("/feed")
            .header("accept", "text/event-stream")
            .body(())
            .unwrap();
        assert_eq!(c(sse), Class::Stream);
        assert_eq!(c(get("/shop")), Class::Site);
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
        assert_eq!(
            classify(&get("http://elsewhere/")),
            Class::Refused(Kind::AbsoluteForm)
        );
    }
}
