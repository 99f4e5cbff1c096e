//! The front-end built from `web/` (Vite), embedded into the binary when it was built
//! (see `build.rs`), and served under `/__anteroom/static/`.
//!
//! Vite fingerprints every file name, so a name never changes meaning and is cached for a
//! year (`immutable`). The Vite manifest (`.vite/manifest.json`, not served) tells the page
//! templates which script and stylesheets belong to an entry.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::LazyLock;

use http::{HeaderValue, Response, StatusCode, header};
use serde::Deserialize;

use super::body::{Body, full};

/// Where the assets are served; Vite's `base` says the same (`web/vite.config.ts`).
pub const STATIC_PREFIX: &str = "/__anteroom/static/";

/// The waiting page's entry in `web/vite.config.ts`.
pub const WAITING_ENTRY: &str = "src/waiting/main.ts";

/// The control room's entry in `web/vite.config.ts`.
pub const CONTROL_ENTRY: &str = "src/control/main.tsx";

#[cfg(anteroom_frontend)]
#[derive(rust_embed::RustEmbed)]
#[folder = "web/dist/"]
#[allow_missing = true]
struct Dist;

#[cfg(anteroom_frontend)]
fn embedded(path: &str) -> Option<Cow<'static, [u8]>> {
    Dist::get(path).map(|f| f.data)
}

#[cfg(not(anteroom_frontend))]
fn embedded(_path: &str) -> Option<Cow<'static, [u8]>> {
    None
}

/// Where the proof of work's browser files are served (the challenge page's script, its
/// worker and what the worker loads), in every build, front-end or not.
pub const BUILT_IN_PREFIX: &str = "/__anteroom/assets/";

/// The challenge's browser files: plain files of `web/challenge/`, not fingerprinted.
#[derive(rust_embed::RustEmbed)]
#[folder = "web/challenge/"]
#[allow_missing = true]
struct ChallengeFiles;

/// `GET /__anteroom/assets/{name}`: one of the challenge's browser files, revalidated on
/// every use (`no-cache`: the names do not change with the contents), or `None`.
pub fn serve_built_in(name: &str, head: bool) -> Option<Response<Body>> {
    if !servable(name) {
        return None;
    }
    let data = ChallengeFiles::get(name)?.data;
    let mut response = body_of(name, data, head);
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Some(response)
}

/// A 200 with `data` (none for `HEAD`, with its length) and `name`'s content type.
fn body_of(name: &str, data: Cow<'static, [u8]>, head: bool) -> Response<Body> {
    let len = data.len();
    let mut response = Response::new(if head {
        full(bytes::Bytes::new())
    } else {
        full(bytes::Bytes::from(data.into_owned()))
    });
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(name)),
    );
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    if head {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    }
    response
}

/// One entry of Vite's manifest.
#[derive(Clone, Debug, Deserialize)]
struct ManifestEntry {
    file: String,
    #[serde(default)]
    css: Vec<String>,
}

/// What a page needs to load one front-end entry: its module script and stylesheets, as
/// URLs under [`STATIC_PREFIX`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// URL of the entry's module script.
    pub script: String,
    /// URLs of the entry's stylesheets, in manifest order.
    pub styles: Vec<String>,
}

static MANIFEST: LazyLock<HashMap<String, ManifestEntry>> = LazyLock::new(|| {
    embedded(".vite/manifest.json")
        .and_then(|bytes| match serde_json::from_slice(&bytes) {
            Ok(manifest) => Some(manifest),
            Err(e) => {
                tracing::error!(error = %e, "embedded front-end manifest does not parse");
                None
            }
        })
        .unwrap_or_default()
});

/// The built-in entry named `name` (a key of Vite's `input`), if the front-end is built in.
pub fn entry(name: &str) -> Option<Entry> {
    let e = MANIFEST.get(name)?;
    Some(Entry {
        script: format!("{STATIC_PREFIX}{}", e.file),
        styles: e
            .css
            .iter()
            .map(|c| format!("{STATIC_PREFIX}{c}"))
            .collect(),
    })
}

/// The raw bytes of a built-in asset (for the size budget test).
pub fn bytes(name: &str) -> Option<Cow<'static, [u8]>> {
    servable(name).then(|| embedded(name)).flatten()
}

/// Only the fingerprinted build output is served: no manifest, no dot files, no paths.
fn servable(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn content_type(name: &str) -> &'static str {
    match name.rsplit_once('.').map(|(_, ext)| ext) {
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("wasm") => "application/wasm",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("woff2") => "font/woff2",
        Some("json" | "map") => "application/json",
        Some("ico") => "image/x-icon",
        _ => "application/octet-stream",
    }
}

/// `GET /__anteroom/static/{name}`: the asset with a one-year immutable cache, or `None`
/// (the caller answers 404).
pub fn serve(name: &str, head: bool) -> Option<Response<Body>> {
    let data = bytes(name)?;
    let mut response = body_of(name, data, head);
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=31536000, immutable"),
    );
    Some(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_build_output_is_servable() {
        assert!(servable("waiting-H4OruCbc.js"));
        for bad in [
            "",
            ".vite",
            ".vite/manifest.json",
            "../Cargo.toml",
            "a/b.js",
            "%2e",
        ] {
            assert!(!servable(bad), "{bad}");
            assert!(serve(bad, false).is_none(), "{bad}");
        }
        assert!(serve("nope-123.js", false).is_none());
        assert!(serve_built_in("../Cargo.toml", false).is_none());
        assert!(serve_built_in("nope-123.js", false).is_none());
        assert_eq!(content_type("a.wasm"), "application/wasm");
    }

    #[test]
    fn content_types() {
        assert_eq!(content_type("a.js"), "text/javascript; charset=utf-8");
        assert_eq!(content_type("a.css"), "text/css; charset=utf-8");
        assert_eq!(content_type("a"), "application/octet-stream");
    }

    /// The cfg and the embedded files agree: built in exactly when the manifest is there.
    #[test]
    fn built_in_exactly_when_embedded() {
        let waiting = entry(WAITING_ENTRY);
        assert_eq!(waiting.is_some(), super::super::pages::FRONTEND_BUILT_IN);
        if let Some(waiting) = waiting {
            let name = waiting.script.strip_prefix(STATIC_PREFIX).unwrap();
            let response = serve(name, false).expect("the entry's script is served");
            assert_eq!(
                response.headers()[header::CACHE_CONTROL],
                "public, max-age=31536000, immutable"
            );
            assert!(!waiting.styles.is_empty(), "the board has a stylesheet");
        }
        let control = entry(CONTROL_ENTRY);
        assert_eq!(control.is_some(), super::super::pages::FRONTEND_BUILT_IN);
        if let Some(control) = control {
            let name = control.script.strip_prefix(STATIC_PREFIX).unwrap();
            assert!(
                serve(name, false).is_some(),
                "the control room's script is served"
            );
            assert!(
                !control.styles.is_empty(),
                "the control room has a stylesheet"
            );
        }
    }
}
