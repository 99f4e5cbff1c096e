//! anteroom: a self-hosted virtual waiting room in front of an origin.
//!
//! The map, in the order a request meets it:
//!
//! - [`config`]   — the YAML file, `ANTEROOM_*` environment and flags, merged and validated.
//! - [`cli`]      — the command line: run, `init`, `check`, `demo`, `probe`, `--version`.
//! - [`server`]   — the accept loop: connection cap, header-read timeout, graceful drain.
//! - [`gate`]     — the one request path: identify, classify (one fixed order), decide,
//!   respond, and its one error type.
//! - [`identity`] — who is asking: client address behind trusted proxies, [`identity::ClientKey`],
//!   host normalising; used by both [`gate`] and [`queue`].
//! - [`token`]    — the signed visitor cookie.
//! - [`visitor`]  — the visitor's id and the short reference shown to them.
//! - [`worker`]   — which serving worker a thread is, and one value per worker.
//! - [`admission`] — the per-replica side of admission and the only door to the store:
//!   pass driver, session cache, statistics cache, ETA, store health.
//! - [`queue`]    — the store boundary: one small trait, the embedded and Redis stores
//!   behind it, and the conformance suite every store must pass.
//! - [`priority`] — priority grants: format, verification, minting.
//! - [`proxy`]    — forwarding to the origin.
//! - [`admin`]    — the admin API and control-room page, given an [`admin::AdminContext`].
//! - [`live`]     — the waiting page's live streams and their one ticker.
//! - [`metrics`]  — the Prometheus registry.
//! - [`http`]     — what every listener shares: body type, pages, i18n, built-in assets,
//!   the scratch buffer per-request header values are cut from.
//! - [`events`]   — queue events to Kafka, strictly a side channel.
//! - [`abuse`]    — the abuse registry: strikes, bans (embedded or shared through
//!   Redis), the ban log; checked first on every request from an in-memory set.
//! - [`glob`]     — the path globs of `ban_paths`, `bypass_paths` and `asset_paths`.
//! - [`fairness`] — admission token, auditable draw, honest ETA, adaptive rate.
//! - [`tls`]      — TLS as a client: whom anteroom trusts toward Redis and origins.
//! - [`log_limiter`] — "at most once every N" for warnings that can repeat per request.
//! - [`logging`]  — the diagnostic log (text or JSON) and the request id on its lines.
//! - [`clock`]    — wall time that tokio's paused clock can drive in tests.
//! - [`audit`]    — the audit log of admin changes (JSON lines, rotated by size).
//! - [`access_log`] — one JSON line per request (off, stdout or a file; SIGUSR1 reopens it).
//! - [`fsutil`]   — private `data_dir`, exclusive no-follow temp files, atomic writes.
//! - [`run`]      — wiring: store, rooms, background loops, serve, drain, snapshot.
//! - [`signals`]  — what each common signal does to a running process (none ends it
//!   without a drain).
//! - [`reload`]   — SIGHUP: the config file reread, what can change live applied, the
//!   rest refused whole.
//! - [`demo`]     — the built-in demo origin.
//!
//! Imports point one way, from the wiring down to the leaves: the layers are listed in
//! docs/architecture.md and enforced by `tests/layers.rs` (no import against them, no cycle
//! between these modules). Leaves ([`clock`], [`identity`], [`visitor`], [`worker`], …),
//! then formats ([`tls`], [`token`], [`fairness`], …), the stores ([`queue`], [`abuse`]),
//! [`http`], the side channels and sockets, [`config`] (the one place that builds the
//! others' types from the file), the per-replica parts ([`admission`], [`proxy`], …), the
//! listeners ([`admin`], [`gate`]) and the wiring ([`run`]).
#![forbid(unsafe_code)]
#![warn(missing_docs)]
// The docs are read with `--document-private-items` (this is a product, not a library): a
// module's map links the private items it is made of.
#![allow(rustdoc::private_intra_doc_links)]

pub mod abuse;
pub mod access_log;
pub mod admin;
pub mod admission;
pub mod audit;
pub mod challenge;
pub mod cli;
pub mod clock;
pub mod config;
pub mod demo;
pub mod events;
pub mod fairness;
pub mod fsutil;
pub mod gate;
pub mod glob;
pub mod http;
pub mod identity;
pub mod invalid;
pub mod live;
pub mod log_limiter;
pub mod logging;
pub mod metrics;
pub mod priority;
pub mod proxy;
pub mod queue;
pub mod reload;
pub mod run;
pub mod server;
pub mod signals;
pub mod tls;
pub mod token;
pub mod visitor;
pub mod worker;
