//! Decides whether the animated front-end is built into this binary.
//!
//! `web/` is built by `npm run build` into `web/dist/` with a Vite manifest. When that
//! manifest exists, rust-embed embeds `web/dist/` and the `anteroom_frontend` cfg is set,
//! which turns on `FRONTEND_BUILT_IN` and the split-flap page. Without it (no Node on the
//! machine, a plain `cargo install`) the binary serves the plain server-rendered page.
//! `ANTEROOM_FRONTEND=off` builds the plain page even when `web/dist/` exists (`make test`
//! uses it to test both).

use std::path::Path;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(anteroom_frontend)");
    println!("cargo::rerun-if-env-changed=ANTEROOM_FRONTEND");
    println!("cargo::rerun-if-changed=build.rs");
    let manifest = Path::new("web/dist/.vite/manifest.json");
    let off = std::env::var("ANTEROOM_FRONTEND").is_ok_and(|v| v == "off" || v == "0");
    if manifest.is_file() {
        // Vite rewrites the manifest on every build, so this catches every change to dist/.
        println!("cargo::rerun-if-changed=web/dist/.vite/manifest.json");
        if !off {
            println!("cargo::rustc-cfg=anteroom_frontend");
        }
    } else if Path::new("web/dist").is_dir() {
        println!("cargo::rerun-if-changed=web/dist");
    } else if Path::new("web").is_dir() {
        // Notices `web/dist` appearing. (A path that does not exist would rerun this
        // script, and rebuild the crate, on every build.)
        println!("cargo::rerun-if-changed=web");
    }
}
