//! The built-in scripts every build serves under `/__anteroom/assets/`, with the front-end
//! built in or not: the challenge page's script, its Web Worker, and hash-wasm's SHA-256
//! that the worker loads.
//!
//! They are part of the request path's contract, not of the optional board: a room that
//! challenges newcomers needs them even in a binary built without Node. So they are plain
//! files in `web/challenge/`, compiled in with `include_str!` (no bundler); hash-wasm's is
//! the pinned npm package's own file (its WebAssembly inline), checked by the front-end's
//! unit tests. Their names are fixed (the page names them), so they are cached briefly
//! rather than forever.

use http::{HeaderValue, Response, StatusCode, header};

use super::body::{Body, full};

/// Where the built-in scripts are served.
pub const ASSETS_PREFIX: &str = "/__anteroom/assets/";

/// How long a browser may keep a script without asking again: a new release's is picked
/// up within this.
const CACHE_CONTROL: &str = "public, max-age=600";

/// The built-in script called `name`, if there is one.
pub fn script(name: &str) -> Option<&'static str> {
    match name {
        "challenge.js" => Some(include_str!("../../web/challenge/challenge.js")),
        "challenge-worker.js" => Some(include_str!("../../web/challenge/challenge-worker.js")),
        "hash-wasm-sha256.umd.min.js" => Some(include_str!(
            "../../web/challenge/hash-wasm-sha256.umd.min.js"
        )),
        _ => None,
    }
}

/// `GET /__anteroom/assets/{name}`: the script, or `None` (the caller answers 404).
pub fn serve(name: &str, head: bool) -> Option<Response<Body>> {
    let text = script(name)?;
    let mut response = Response::new(if head {
        full(bytes::Bytes::new())
    } else {
        full(bytes::Bytes::from_static(text.as_bytes()))
    });
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/javascript; charset=utf-8"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(CACHE_CONTROL),
    );
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    if head {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(text.len()));
    }
    Some(response)
}

#[cfg(test)]
mod tests {
    use base64::Engine;
    use serde::Deserialize;

    use super::*;
    use crate::challenge::NONCE_LEN;
    use crate::challenge::{solve, work};

    #[test]
    fn serves_the_scripts_and_nothing_else() {
        for name in [
            "challenge.js",
            "challenge-worker.js",
            "hash-wasm-sha256.umd.min.js",
        ] {
            let response = serve(name, false).expect(name);
            assert_eq!(
                response.headers()[header::CONTENT_TYPE],
                "text/javascript; charset=utf-8"
            );
            assert_eq!(response.headers()[header::CACHE_CONTROL], CACHE_CONTROL);
            let head = serve(name, true).unwrap();
            assert_eq!(
                head.headers()[header::CONTENT_LENGTH],
                script(name).unwrap().len().to_string().as_str()
            );
        }
        for bad in [
            "",
            "challenge",
            "../challenge.js",
            "waiting.js",
            "vectors.json",
        ] {
            assert!(serve(bad, false).is_none(), "{bad}");
        }
    }

    /// The worker loads the WebAssembly SHA-256 it calls from next to itself.
    #[test]
    fn the_worker_loads_hash_wasm_from_next_to_itself() {
        let worker = script("challenge-worker.js").unwrap();
        assert!(worker.contains("importScripts('hash-wasm-sha256.umd.min.js')"));
        let lib = script("hash-wasm-sha256.umd.min.js").unwrap();
        assert!(lib.contains("createSHA256"));
        assert!(
            lib.contains("@license MIT"),
            "hash-wasm's licence notice is kept"
        );
    }

    #[derive(Deserialize)]
    struct Vector {
        nonce: String,
        bits: u8,
        solution: u64,
        hash: String,
    }

    /// The vectors the worker's unit tests solve (`web/src/challenge/vectors.json`) are
    /// what the server's own solver and work function say.
    #[test]
    fn the_workers_vectors_are_the_servers_answers() {
        let vectors: Vec<Vector> =
            serde_json::from_str(include_str!("../../web/src/challenge/vectors.json")).unwrap();
        assert!(
            vectors
                .iter()
                .any(|v| v.bits >= crate::challenge::DEFAULT_BITS)
        );
        for v in vectors {
            let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(&v.nonce)
                .unwrap();
            let nonce: [u8; NONCE_LEN] = bytes.try_into().unwrap();
            assert_eq!(solve(&nonce, v.bits), v.solution, "{}", v.nonce);
            let hash: String = work(&nonce, v.solution)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(hash, v.hash, "{}", v.nonce);
        }
    }
}
