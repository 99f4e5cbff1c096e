//! anteroom: a self-hosted virtual waiting room in front of an origin.
//!
//! The map, in the order a request meets it:
//!
//! - [`config`]   — the YAML file, `ANTEROOM_*` environment and flags, merged and validated.
//! - [`cli`]      — the command line: run, `init`, `check`, `demo`, `--version`.
//! - [`server`]   — the accept loop: connection cap, header-read timeout, graceful drain.
//! - [`http`]     — the one request path (identify, classify, decide, respond), the proxy,
//!   the waiting page and its live stream.
//! - [`token`]    — the signed visitor cookie.
//! - [`admission`] — the per-replica side of admission: pass driver, session cache,
//!   statistics cache and ETA.
//! - [`queue`]    — the store boundary: one small trait, the embedded store behind it, and
//!   the conformance suite every store must pass.
//! - [`events`]   — queue events to Kafka, strictly a side channel.
//! - [`log_limiter`] — "at most once every N" for warnings that can repeat per request.
//! - [`clock`]    — wall time that tokio's paused clock can drive in tests.
//! - [`audit`]    — the audit log of admin changes (JSON lines, rotated by size).
//! - [`run`]      — wiring: store, rooms, background loops, serve, drain, snapshot.
//! - [`demo`]     — the built-in demo origin.
#![forbid(unsafe_code)]

pub mod admission;
pub mod audit;
pub mod cli;
pub mod clock;
pub mod config;
pub mod demo;
pub mod events;
pub mod http;
pub mod log_limiter;
pub mod queue;
pub mod run;
pub mod server;
#[doc(hidden)]
pub mod testing;
pub mod token;
