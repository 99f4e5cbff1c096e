//! Step 2 of the request path: what a request is for, from its method, target, path and
//! whether it carries a priority grant (no store, no cookie, no signature check), as one
//! [`Class`] in one fixed order.
//!
//! The classes, in order (each is a variant here and an arm of the one `match` in
//! [`super::App::handle`]):
//! 1. banned client — first, from the in-memory ban set, before the cookie is read
//!    ([`Class::Banned`], from [`super::identify::Identity::banned`]: the caller puts it
//!    ahead of [`classify`]);
//! 2. reserved `/__anteroom/…` ([`Class::Healthz`] … [`Class::UnknownReserved`]), and
//!    `OPTIONS *` ([`Class::OptionsAny`]), which is about the server, not a page;
//! 3. [`Class::BanPath`] (`abuse.ban_paths`, on the [`normalized_path`]);
//! 4. [`Class::Bypass`] (`bypass_paths`) and [`Class::Preflight`] (CORS preflights);
//! 5. [`Class::Embedded`] (another site's page embedding the shop) and [`Class::Asset`]
//!    (`asset_paths`); 6. [`Class::Stream`] (WebSocket upgrade or
//!    `Accept: text/event-stream`); 7. a priority grant: [`Class::Grant`] (verified and
//!    spent in `decide`);
//! 8. the page: [`Class::Site`], decided by the queue.

use http::{Method, Request};

use super::error::Kind;
use super::identify::FetchSite;
use crate::config::RoomConfig;
use crate::glob::GlobSet;

/// Everything under this prefix is anteroom's own and never proxied.
pub const RESERVED_PREFIX: &str = "/__anteroom/";

/// What a request is for.
#[derive(Debug, PartialEq, Eq)]
pub enum Class {
    /// The client is banned (checked first, from [`super::identify::Identity::banned`]).
    Banned(crate::abuse::BanVerdict),
    /// Refused before anything routes on it (absolute-form target, CONNECT).
    Refused(Kind),
    /// `/__anteroom/healthz`: liveness, 200 while the process serves.
    Healthz,
    /// `/__anteroom/readyz`: readiness, 503 while draining or while the store is down without fail-open.
    Readyz,
    /// `/__anteroom/events`: the waiting page's live stream (SSE or WebSocket).
    Events,
    /// `/__anteroom/admin` and everything below it: [`crate::admin::handle`].
    Admin,
    /// A built-in front-end file, `/__anteroom/static/{name}`.
    Static(String),
    /// A built-in file of the proof of work, `/__anteroom/assets/{name}` (the challenge
    /// page's script and its worker), in every build.
    BuiltIn(String),
    /// `POST /__anteroom/challenge`: a newcomer's solution; joins them when it holds.
    ChallengeAnswer,
    /// `GET /__anteroom/challenge/wait`: the no-JavaScript time lock; joins them once it
    /// opens.
    ChallengeWait,
    /// `GET /__anteroom/admission-key`: the public key of the admission token.
    AdmissionKey,
    /// `GET /__anteroom/rooms/{room}/draw`: the room's public lottery document,
    /// whatever the host.
    Draw(String),
    /// Under `/__anteroom/` but nothing we serve.
    UnknownReserved,
    /// `OPTIONS *`: answered by anteroom; creates nothing.
    OptionsAny,
    /// Under `abuse.ban_paths`: the first request bans the client.
    BanPath,
    /// Under the room's `bypass_paths`: straight to the origin, no queue, no cookie.
    Bypass,
    /// A CORS preflight (`OPTIONS` with `Access-Control-Request-Method`): it carries no
    /// cookie by design, so it is passed through like a bypass path.
    Preflight,
    /// Under the room's `asset_paths`: never joins the line, never gets the page.
    Asset,
    /// Another site's page embedding the shop (`Sec-Fetch-Site: cross-site`, not a
    /// top-level navigation), outside `asset_paths`: not the visitor's act, so it never
    /// joins the line or takes a slot; answered like an asset, under a label of its own in
    /// the access log.
    Embedded,
    /// A WebSocket upgrade or an event stream to the origin: admitted sessions only.
    Stream,
    /// The site with a priority grant (`ar_grant` or `X-Anteroom-Grant`, step 7): the
    /// grant is checked, then the queue decides with the visitor at position 1.
    Grant,
    /// The site: the queue decides.
    Site,
}

/// The access log's `class` of a request refused before it could be classified (a bad
/// host or path, an absolute-form target, CONNECT).
pub const INVALID_LABEL: &str = "invalid";

impl Class {
    /// The access log's `class`: `page`, `grant`, `asset`, `embedded`, `bypass`,
    /// `preflight`, `stream`, `events`, `admin`, `health`, `static`, `admission_key`,
    /// `draw`, `challenge`, `reserved`, `options`, `ban_path`, `banned` (a banned client's request is not
    /// classified further) or `invalid`.
    pub fn label(&self) -> &'static str {
        match self {
            Class::Banned(_) => "banned",
            Class::Refused(_) => INVALID_LABEL,
            Class::Healthz | Class::Readyz => "health",
            Class::Events => "events",
            Class::Admin => "admin",
            Class::Static(_) | Class::BuiltIn(_) => "static",
            Class::ChallengeAnswer | Class::ChallengeWait => "challenge",
            Class::AdmissionKey => "admission_key",
            Class::Draw(_) => "draw",
            Class::UnknownReserved => "reserved",
            Class::OptionsAny => "options",
            Class::BanPath => "ban_path",
            Class::Bypass => "bypass",
            Class::Preflight => "preflight",
            Class::Asset => "asset",
            Class::Embedded => "embedded",
            Class::Stream => "stream",
            Class::Grant => "grant",
            Class::Site => "page",
        }
    }
}

/// A room's path classes, parsed once (the config checked every pattern).
#[derive(Clone, Debug, Default)]
pub struct RoomPaths {
    /// `bypass_paths`: proxied straight through, no queue and no cookie.
    pub bypass: GlobSet,
    /// `asset_paths`: never join the line nor get the waiting page.
    pub assets: GlobSet,
}

impl RoomPaths {
    /// The room's `bypass_paths` and `asset_paths`, parsed.
    pub fn of(room: &RoomConfig) -> RoomPaths {
        // Validation parsed these very patterns; a failure here cannot happen, and an
        // empty set (nothing matches) is the safe reading if it ever did.
        RoomPaths {
            bypass: GlobSet::new(&room.bypass_paths).unwrap_or_default(),
            assets: GlobSet::new(&room.asset_paths).unwrap_or_default(),
        }
    }
}

/// Classifies `req`; `ban_paths` are `abuse.ban_paths` (every host's), `paths` the
/// classes of the request's room, if it has one.
/// `fetch` is what the browser said of the request's origin ([`FetchSite`]): another
/// site's embedded request is an asset, and a grant counts only where
/// [`FetchSite::grant_honoured`].
pub fn classify<B>(
    req: &Request<B>,
    ban_paths: &GlobSet,
    paths: Option<&RoomPaths>,
    fetch: FetchSite,
) -> Class {
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
        // `/%2eenv` or `/a/../.env` must not dodge `/.env`.
        if !ban_paths.is_empty() && ban_paths.is_match(&normalized_path(path)) {
            return Class::BanPath;
        }
        return site_class(req, path, paths, fetch);
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
        (&Method::GET | &Method::HEAD, p) if p.starts_with("assets/") => {
            Class::BuiltIn(p["assets/".len()..].to_owned())
        }
        (&Method::POST, "challenge") => Class::ChallengeAnswer,
        (&Method::GET | &Method::HEAD, "challenge/wait") => Class::ChallengeWait,
        (&Method::GET | &Method::HEAD, p) if draw_room(p).is_some() => {
            Class::Draw(draw_room(p).unwrap_or_default().to_owned())
        }
        _ => Class::UnknownReserved,
    }
}

/// [`Class::Healthz`] or [`Class::Readyz`] if `req` is a probe: they answer every client,
/// banned or not.
pub fn probe<B>(req: &Request<B>) -> Option<Class> {
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        return None;
    }
    match req.uri().path().strip_prefix(RESERVED_PREFIX)? {
        "healthz" => Some(Class::Healthz),
        "readyz" => Some(Class::Readyz),
        _ => None,
    }
}

/// The room of a reserved `rooms/{room}/draw` path (after the prefix): one non-empty
/// segment.
fn draw_room(reserved: &str) -> Option<&str> {
    reserved
        .strip_prefix("rooms/")
        .and_then(|r| r.strip_suffix("/draw"))
        .filter(|room| !room.is_empty() && !room.contains('/'))
}

/// The path as ban paths see it: percent-encoded unreserved characters decoded (so
/// `%2e` is `.`, RFC 3986 §6.2.2.2), dot segments removed (§5.2.4), repeated slashes
/// merged (as nginx and most servers do) and ASCII letters lower-cased (the ban paths are
/// too: a probe for `/.ENV` finds the same file on a case-insensitive disk), so
/// `/%2eenv`, `/x/../.env`, `//.env` and `/.ENV` all match `/.env`. Other escapes stay as
/// they are.
pub fn normalized_path(path: &str) -> std::borrow::Cow<'_, str> {
    use std::borrow::Cow;
    if !path.contains('%')
        && !path.contains("//")
        && !path.bytes().any(|b| b.is_ascii_uppercase())
        && !path.split('/').any(|s| s == "." || s == "..")
    {
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
        decoded.push(ch.to_ascii_lowercase());
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
            // An empty segment is a repeated slash, but for the last (a trailing one).
            "" if n != last => {}
            s => out.push(s),
        }
    }
    Cow::Owned(format!("/{}", out.join("/")))
}

/// The classes of a path of the site, after the reserved routes and the ban paths.
fn site_class<B>(
    req: &Request<B>,
    path: &str,
    paths: Option<&RoomPaths>,
    fetch: FetchSite,
) -> Class {
    if paths.is_some_and(|p| p.bypass.is_match(path)) {
        return Class::Bypass;
    }
    // A preflight is a browser's, and a browser always sends `Origin` with one; without
    // it, the `OPTIONS` is a page request like any other and waits its turn.
    if req.method() == Method::OPTIONS
        && req
            .headers()
            .contains_key(http::header::ACCESS_CONTROL_REQUEST_METHOD)
        && req.headers().contains_key(http::header::ORIGIN)
    {
        return Class::Preflight;
    }
    if paths.is_some_and(|p| p.assets.is_match(path)) {
        return Class::Asset;
    }
    // Another site's page embedding the shop (an image, a script, a frame) is not the
    // visitor's act: it never joins the line or takes a slot.
    if fetch.embedded_cross_site() {
        return Class::Embedded;
    }
    if crate::proxy::is_upgrade(req) || crate::proxy::is_event_stream(req) {
        return Class::Stream;
    }
    if fetch.grant_honoured() && crate::priority::carried(req).is_some() {
        return Class::Grant;
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
        super::classify(req, &GlobSet::default(), None, FetchSite::default())
    }

    fn paths(bypass: &[&str], assets: &[&str]) -> RoomPaths {
        RoomPaths {
            bypass: GlobSet::new(bypass).unwrap(),
            assets: GlobSet::new(assets).unwrap(),
        }
    }

    #[test]
    fn ban_paths_come_after_the_reserved_paths_and_before_the_room() {
        let ban = GlobSet::new(&["/.env", "/.git/**", "/__anteroom/**"]).unwrap();
        let p = paths(&["/.git/**"], &["*.env"]);
        let c = |uri: &str| super::classify(&get(uri), &ban, Some(&p), FetchSite::default());
        assert_eq!(c("/.env"), Class::BanPath);
        assert_eq!(c("/%2eenv"), Class::BanPath);
        assert_eq!(c("/a/../.env"), Class::BanPath);
        // Ahead of the room's bypass and asset paths (ban paths come first).
        assert_eq!(c("/.git/config"), Class::BanPath);
        assert_eq!(c("/x.env"), Class::Asset);
        // The reserved paths are anteroom's own: never a ban path.
        assert_eq!(c("/__anteroom/healthz"), Class::Healthz);
        // With no room (an unknown host), a ban path is still a ban path.
        assert_eq!(
            super::classify(&get("/.env"), &ban, None, FetchSite::default()),
            Class::BanPath
        );
        assert_eq!(
            super::classify(&get("/shop"), &ban, None, FetchSite::default()),
            Class::Site
        );
    }

    #[test]
    fn the_site_classes_in_their_fixed_order() {
        let p = paths(
            &["/webhooks/**", "/__anteroom/**"],
            &["*.css", "/webhooks/*.css"],
        );
        let c = |req: Request<()>| {
            super::classify(&req, &GlobSet::default(), Some(&p), FetchSite::default())
        };
        assert_eq!(c(get("/webhooks/pay")), Class::Bypass);
        // Bypass before assets; reserved paths before everything of the room.
        assert_eq!(c(get("/webhooks/a.css")), Class::Bypass);
        assert_eq!(c(get("/__anteroom/healthz")), Class::Healthz);
        assert_eq!(c(get("/static/app.css")), Class::Asset);
        assert_eq!(c(get("/static/app.css?v=2")), Class::Asset);
        assert_eq!(c(get("/app.cssx")), Class::Site);
        let preflight = Request::options("/api/cart")
            .header("access-control-request-method", "POST")
            .header("origin", "https://app.example")
            .body(())
            .unwrap();
        assert_eq!(c(preflight), Class::Preflight);
        // Without `Origin` it is no browser's preflight: a page request, queued.
        let no_origin = Request::options("/api/cart")
            .header("access-control-request-method", "POST")
            .body(())
            .unwrap();
        assert_eq!(c(no_origin), Class::Site);
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
    fn another_sites_embeds_are_assets_and_grants_need_a_navigation_of_ones_own() {
        let fetch = |site: Option<&str>, dest: Option<&str>| {
            let mut req = Request::get("/shop?ar_grant=v1.x");
            if let Some(site) = site {
                req = req.header("sec-fetch-site", site);
            }
            if let Some(dest) = dest {
                req = req.header("sec-fetch-dest", dest);
            }
            let req = req.body(()).unwrap();
            let fetch = FetchSite::of(req.headers());
            super::classify(&req, &GlobSet::default(), None, fetch)
        };
        for dest in ["image", "script", "iframe", "empty", "style"] {
            assert_eq!(
                fetch(Some("cross-site"), Some(dest)),
                Class::Embedded,
                "{dest}"
            );
            // The visitor's own page loading the same: a grant is not for it.
            assert_eq!(
                fetch(Some("same-origin"), Some(dest)),
                Class::Site,
                "{dest}"
            );
        }
        // A link from another site queues as usual, but spends no grant.
        assert_eq!(fetch(Some("cross-site"), Some("document")), Class::Site);
        // The visitor's own navigations and API clients (no fetch metadata) do.
        assert_eq!(fetch(Some("none"), Some("document")), Class::Grant);
        assert_eq!(fetch(Some("same-origin"), Some("document")), Class::Grant);
        assert_eq!(fetch(None, None), Class::Grant);
        // Case does not hide a cross-site request.
        assert_eq!(fetch(Some("Cross-Site"), Some("IMAGE")), Class::Embedded);
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
            classify(&get("/__anteroom/assets/challenge.js")),
            Class::BuiltIn("challenge.js".into())
        );
        assert_eq!(
            classify(&get("/__anteroom/admission-key")),
            Class::AdmissionKey
        );
        assert_eq!(
            classify(&get("/__anteroom/rooms/drop/draw")),
            Class::Draw("drop".to_owned())
        );
        for not_a_draw in [
            "/__anteroom/rooms//draw",
            "/__anteroom/rooms/a/b/draw",
            "/__anteroom/rooms/drop",
            "/__anteroom/rooms/drop/draw/x",
        ] {
            assert_eq!(
                classify(&get(not_a_draw)),
                Class::UnknownReserved,
                "{not_a_draw}"
            );
        }
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
            ("/a%2Fb", "/a%2fb"),
            ("/caf%C3%A9", "/caf%c3%a9"),
            ("/%", "/%"),
            ("/%2", "/%2"),
            ("//.env", "/.env"),
            ("/a///b//", "/a/b/"),
            ("/.ENV", "/.env"),
            ("/X.PhP", "/x.php"),
            ("/caf%C3%A9/CAFÉ", "/caf%c3%a9/cafÉ"),
            ("/", "/"),
        ] {
            assert_eq!(normalized_path(raw), norm, "{raw}");
        }
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
