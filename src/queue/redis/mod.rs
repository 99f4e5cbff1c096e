//! The Redis store: every room's line, bucket, sessions, settings and counters in Redis (or
//! Valkey, or a Redis Cluster), so any number of replicas share one queue, one rate and one
//! concurrency budget, and any replica can be restarted mid-spike.
//!
//! Every operation is one Lua script (the `.lua` files in `src/queue/lua/`, sharing
//! `common.lua`), so each is one atomic step on one room. They run as one Redis Functions
//! library (see [`scripts`]): loaded once (`FUNCTION LOAD`, again whenever a call finds it
//! missing) and called with `FCALL`, so the shared code's functions are made once, at load,
//! rather than on every call as an `EVAL` script's are (8–10 µs of Redis time a join, a
//! quarter of the join script's cost). Where Functions are refused (a server or a user
//! without them), each script runs instead as its own `EVALSHA` script, `common.lua` first.
//! Time is the server's `TIME`, read once per script, never a replica's clock. Every key of
//! a room carries the hash tag `{room}`, so a room lives in one Cluster slot; rooms spread
//! over the shards.
//!
//! This file owns [`RedisStore`] itself: its connections, its clock offset for tests, and
//! connecting. The rest, by concern:
//! - [`keys`]: a room's keys and the layout of its line in them (≤ 120 B a waiter);
//! - [`scripts`]: the Lua scripts as one Functions library, the `EVALSHA` fallback, and
//!   whether each operation may be sent again;
//! - [`calls`]: which connection a call takes, and the one repeat after a broken
//!   connection (outages, and why each repeat is safe);
//! - [`reply`]: reading the scripts' replies;
//! - `store`: the [`QueueStore`](super::QueueStore) operations on top of all this;
//! - `reads`: what is read outside the scripts, in short steps (the lottery salt, the
//!   draw's hashes, a search of the line by reference);
//! - `tests`: the conformance suite on every deployment shape, and Redis's own cases.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use super::redis_client::{Connector, KeepAlive, RedisConn, Timeouts};
use super::{StoreError, StoreResult};

mod calls;
mod keys;
mod reads;
mod reply;
mod scripts;
mod store;
#[cfg(test)]
mod tests;

/// How long to wait for a connection or a reply before calling the store unavailable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long to wait for a command's reply before calling the store unavailable.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(3);

const TIMEOUTS: Timeouts = Timeouts {
    connect: CONNECT_TIMEOUT,
    response: RESPONSE_TIMEOUT,
    retries: 2,
    max_retry_delay: Duration::from_millis(500),
};

/// The queue store in Redis: every operation is one Lua script on the room's keys, so replicas share one line.
pub struct RedisStore {
    /// The shared connection (on the runtime that connected): background loops, tests, and
    /// a serving worker until its own is ready (see [`RedisStore::conn`]).
    conn: RedisConn,
    /// Makes each serving worker's own connection.
    connector: Connector,
    /// PINGs the shared connection (each worker's has its own, in [`Local::Ready`]).
    _keep_alive: KeepAlive,
    /// The serving workers' own connections, by runtime.
    local: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<tokio::runtime::Id, Local>>>,
    /// Each room's keys, formatted once (a call sends all twelve).
    room_keys: std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<[String; 12]>>>,
    /// Added to the server's `TIME` in every script. Always 0 in production; tests move it
    /// forward because Redis time cannot be paused.
    offset_ms: AtomicU64,
    /// Tests only: `offset_ms` is a frozen absolute time instead of an offset, so time
    /// moves only when the test says (as tokio's paused clock does for the embedded store).
    frozen: AtomicBool,
    /// Set when a call failed as unavailable; the next successful pass forgives the time
    /// since the room's last pass as downtime.
    recovering: AtomicBool,
    /// Set once Redis refused the Functions library (no Functions, or not for this user):
    /// every call is then an `EVALSHA` script.
    eval_only: AtomicBool,
    /// For messages: the node list with passwords masked.
    describe: String,
    /// Each room's lottery salt, read once: it is set when the room is first opened and
    /// never changes, and every entrant's draw hash is computed here from it (Redis Lua
    /// has no SHA-256).
    salts: std::sync::Mutex<std::collections::HashMap<String, Vec<u8>>>,
    /// Each room's policy as this replica's file gave it at open: what a policy setting
    /// the operator gives back to the file returns to.
    file_policies: std::sync::Mutex<std::collections::HashMap<String, crate::queue::RoomPolicy>>,
    /// Each room's cursor in its admissions stream (`ar:{room}:admitted`): the last entry
    /// this replica's passes have read or written, so the next pass reads only what other
    /// replicas' passes admitted since, and when that pass was. Absent before this
    /// replica's first pass of the room.
    admitted_cursors:
        std::sync::Mutex<std::collections::HashMap<String, (String, std::time::Instant)>>,
}

/// A serving worker's own connection (see [`RedisStore::conn`]).
enum Local {
    /// Being made; calls use the shared one meanwhile.
    Connecting,
    /// Made, and PINGed by its [`KeepAlive`] on the worker's runtime until the store goes.
    Ready {
        conn: RedisConn,
        _keep_alive: KeepAlive,
    },
}

impl RedisStore {
    /// Connects to one node (`redis://…`, `rediss://…`) or, with several node URLs, to a
    /// Cluster, trusting the platform's CA store for TLS.
    pub async fn connect(nodes: &[&str]) -> StoreResult<Self> {
        Self::connect_with(nodes, None).await
    }

    /// As [`RedisStore::connect`], trusting only `ca`'s certificates for `rediss://` when
    /// given (`redis.ca_file`). URLs are checked by [`super::redis_client::build`], the same
    /// function `anteroom check` runs.
    pub async fn connect_with(
        nodes: &[&str],
        ca: Option<&crate::tls::CaFile>,
    ) -> StoreResult<Self> {
        let client = super::redis_client::build(nodes, ca).map_err(|e| StoreError::Invalid {
            field: "redis.url",
            reason: e.into(),
        })?;
        let describe = nodes
            .iter()
            .map(|n| super::redis_client::redact_url(n))
            .collect::<Vec<_>>()
            .join(",");
        let fail = |e: redis::RedisError| {
            StoreError::Unavailable(format!("redis: cannot connect to {describe}: {e}"))
        };
        let connector = client.connector(TIMEOUTS).map_err(fail)?;
        let conn = connector.connect().await.map_err(fail)?;
        Ok(RedisStore {
            _keep_alive: KeepAlive::start(&conn),
            conn,
            connector,
            local: Default::default(),
            room_keys: Default::default(),
            offset_ms: AtomicU64::new(0),
            frozen: AtomicBool::new(false),
            recovering: AtomicBool::new(false),
            eval_only: AtomicBool::new(false),
            describe,
            salts: std::sync::Mutex::default(),
            file_policies: std::sync::Mutex::default(),
            admitted_cursors: std::sync::Mutex::default(),
        })
    }

    /// Moves this store's view of time forward (tests only: Redis `TIME` cannot be paused).
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn advance_clock_for_tests(&self, by: Duration) {
        self.offset_ms
            .fetch_add(crate::clock::ms(by), Ordering::SeqCst);
    }

    /// Freezes this store's clock at `unix_ms` (tests only); it then moves only through
    /// [`RedisStore::advance_clock_for_tests`].
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn freeze_clock_for_tests(&self, unix_ms: u64) {
        self.offset_ms.store(unix_ms, Ordering::SeqCst);
        self.frozen.store(true, Ordering::SeqCst);
    }

    /// The clock offset, or the frozen time (tests only).
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn clock_for_tests(&self) -> u64 {
        self.offset_ms.load(Ordering::SeqCst)
    }

    fn clock_arg(&self) -> String {
        let value = self.offset_ms.load(Ordering::SeqCst);
        if self.frozen.load(Ordering::SeqCst) {
            format!("@{value}")
        } else {
            value.to_string()
        }
    }

    /// The nodes this store talks to, passwords masked.
    pub fn describe(&self) -> &str {
        &self.describe
    }

    /// Tests only: runs every operation as an `EVALSHA` script, as when Redis refuses the
    /// Functions library.
    #[cfg(test)]
    pub fn use_eval_for_tests(&self) {
        self.eval_only.store(true, Ordering::SeqCst);
    }

    /// Whether operations run as `EVALSHA` scripts rather than library functions.
    #[doc(hidden)]
    pub fn eval_only(&self) -> bool {
        self.eval_only.load(Ordering::SeqCst)
    }
}
