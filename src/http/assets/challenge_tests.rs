//! The challenge's browser files as served: every build has the three, the worker loads
//! hash-wasm from next to itself, and the vectors the worker's unit tests solve
//! (`web/src/challenge/vectors.json`) are the server's own answers.

use base64::Engine;
use http::header;
use serde::Deserialize;

use super::serve_built_in;
use crate::challenge::{NONCE_LEN, solve, work};

const FILES: [&str; 3] = [
    "challenge.js",
    "challenge-worker.js",
    "hash-wasm-sha256.umd.min.js",
];

#[test]
fn every_build_serves_the_three_files() {
    for name in FILES {
        let response = serve_built_in(name, false).expect(name);
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "text/javascript; charset=utf-8"
        );
        let head = serve_built_in(name, true).unwrap();
        assert!(head.headers().contains_key(header::CONTENT_LENGTH));
    }
    for bad in ["", "challenge", "../challenge.js", "vectors.json"] {
        assert!(serve_built_in(bad, false).is_none(), "{bad}");
    }
}

#[test]
fn the_worker_loads_hash_wasm_from_next_to_itself() {
    let worker = include_str!("../../../web/challenge/challenge-worker.js");
    assert!(worker.contains("importScripts('hash-wasm-sha256.umd.min.js')"));
    let lib = include_str!("../../../web/challenge/hash-wasm-sha256.umd.min.js");
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

#[test]
fn the_workers_vectors_are_the_servers_answers() {
    let vectors: Vec<Vector> =
        serde_json::from_str(include_str!("../../../web/src/challenge/vectors.json")).unwrap();
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
