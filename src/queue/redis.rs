//! The Redis store: every room's line, bucket, sessions, settings and counters in Redis (or
//! Valkey, or a Redis Cluster), so any number of replicas share one queue, one rate and one
//! concurrency budget, and any replica can be restarted mid-spike.
//!
//! Every operation is one Lua script (the `.lua` files in `lua/`, sharing `common.lua`), so
//! each is one atomic step on one room. They run as one Redis Functions library (see
//! [`Library`]): loaded once (`FUNCTION LOAD`, again whenever a call finds it missing) and
//! called with `FCALL`, so the shared code's functions are made once, at load, rather than
//! on every call as an `EVAL` script's are (8–10 µs of Redis time a join, a quarter of the
//! join script's cost). Where Functions are refused (a server or a user without them), each
//! script runs instead as its own `EVALSHA` script, `common.lua` first. Time is the server's
//! `TIME`, read once per script, never a replica's clock. Every key of a room carries the hash tag `{room}`, so a room lives in one
//! Cluster slot; rooms spread over the shards.
//!
//! Keys of room `main` (see `lua/common.lua` for the fields):
//! `ar:{main}:conf` (runtime settings), `ar:{main}:state` (bucket, counters, the line's
//! bookkeeping, downtime bookkeeping), the line (below), `ar:{main}:active` (ZSET id → last
//! activity), `ar:{main}:draw` (ZSET id → lottery score, during a draw) and
//! `ar:{main}:dseen` (ZSET id → last heartbeat of a draw entrant), `ar:{main}:drawh` (id →
//! draw hash: the draw's entrants, fixed from the doors on, SPEC §14), `ar:{main}:places`
//! (client → its visitors' ids, while `max_places_per_client` is set), `ar:{main}:sess`
//! (session → the clients it was used from) and `ar:{main}:scount` (client → sessions),
//! while a session cap is set, `ar:{main}:joins:<client>` (one client's join-limit window,
//! expiring with it), `ar:{main}:origin` (closed-loop admission: each replica's latest
//! report of the origin's latency and errors, SPEC §14, expiring with its last writer).
//! Members are the raw 16-byte visitor ids; clients are [`ClientKey::to_bytes`].
//!
//! The line, and why: the goal is ≤ 120 B of Redis memory per waiting visitor. The first
//! layout kept each waiter in two big sorted sets (`line`: id → ticket, `seen`: id → last
//! heartbeat), ~257 B a waiter: a big ZSET costs ~130 B a member (dict entry, key string,
//! skiplist node, bucket), whatever the member. Small hashes and sorted sets are stored as
//! listpacks (a flat array, ~20–30 B an entry) below `*-max-listpack-entries` (128), so the
//! line is many small structures instead (~70 B a waiter, measured at 100,000):
//! - every waiter has an ordinal (1, 2, 3, … at the back; −1, −2, … in the front lane, the
//!   newest first), and ordinals are grouped in chunks of 128: `ar:{main}:c:<chunk>` is a
//!   ZSET id → `slot · 2⁴⁴ + last heartbeat in ms` (exact in a double). The slot orders
//!   the chunk; the heartbeat rides in the same score (rewritten in place at most once a
//!   second, as the heartbeat always was; nobody moves), so abandonment needs no second
//!   structure per waiter;
//! - `ar:{main}:i:<bucket>` (HASH id → ordinal and join time, 10 bytes) finds a waiter's
//!   chunk; buckets are a linear-hashing table on the id's first 4 bytes, split one at a time
//!   as the line grows so each stays a listpack;
//! - position is O(log n): a Fenwick tree of the chunks' counts (`ar:{main}:fen`) gives how
//!   many wait in the chunks before, plus the rank inside the chunk. The chunk at the back
//!   enters the tree when the back moves past it, so a join writes no tree;
//! - `ar:{main}:chunks` lists the non-empty chunks in order (admission pops the first), and
//!   `ar:{main}:cseen` holds a lower bound of each chunk's oldest heartbeat: a pass reads only
//!   chunks that may hold someone not heard for `abandon_after`, drops exactly those, when
//!   they are due (the model test of SPEC §3 holds it to the millisecond), and tightens the
//!   bound.
//!   Bounded per pass ([`REAP_BUDGET`] waiters, twice that over 128 chunks read), catching up.
//!
//! Upgrade from the first layout: `open_room` finds `ar:{room}:line` / `ar:{room}:seen`
//! and moves them into this layout in one script, in order, with heartbeats and join times
//! (about 5 µs of Redis time a waiter). Old and new replicas must not share a room: stop
//! the old ones first.
//!
//! Outages: every connection, I/O or timeout error is [`StoreError::Unavailable`] (admission
//! fails closed). The single-node connection is a [`ConnectionManager`] with short timeouts
//! that reconnects in the background, so a dead Redis answers "unavailable" within a couple
//! of seconds and recovery needs no restart. Time the store was unreachable (or every replica
//! was down) is forgiven in the reaping clock, so an outage never abandons the line.
//!
//! After an outage: every connection (the shared one and each serving worker's) is PINGed
//! every half second by a [`KeepAlive`] on its own runtime, so it is reconnected when Redis
//! answers again rather than by the first visitor who uses it; and a call that meets a
//! broken connection anyway (between Redis's return and the next PING) is sent once more
//! before it is answered as unavailable (`redis_client::once_more!`), when that is safe.
//! Whether a call may be repeated ([`Repeat`]) depends on what running it twice does, for a
//! reset or closed connection cannot tell whether the script ran before the connection died
//! (a refused connection can: nothing was sent, and every call may then be repeated):
//! - repeated after any broken connection ([`Repeat::Safe`]), since a second run does what
//!   the first did: `heartbeat` (heartbeats are times, set again to now; doors open by the
//!   clock), `stats`, `queue` and `draw` (reads, and the doors), `grant` (`SET NX` with the
//!   visitor: a second run by the same visitor answers "spent by you", which admits as
//!   "fresh" does), `session touch` (activity times), `update_settings` (absolute values;
//!   a resume's empty bucket only on the first), `adaptive` (a replica's report replaces
//!   its own; a repeated exchange finds the claim taken, by itself, and skips one decision),
//!   and `resolve`, made safe by telling the script it repeats (`ARGV[7]`): a visitor the
//!   first attempt admitted or placed is in `active` or in line and is answered as such
//!   (never a second admission, token or place; only the reply's `newly` / `joined` flag is
//!   then false, so at most one admitted or joined event is missed, never doubled), and a
//!   repeat counts no refusal, in the join-limit window or in `total_refused` (at worst one
//!   goes uncounted);
//! - repeated only when nothing was sent ([`Repeat::IfUnsent`]): `admit_pass` (a second pass
//!   would report only its own admissions, and the first's would never be published; the
//!   admission loop comes back within a tick anyway), `flush` (would also flush who joined
//!   in between), `front` (an admin's move, answered to the admin), `session end` (a second
//!   run answers "there was none"), `open_room` (at start, which retries itself).
//!
//! A response timeout is never repeated: the connection is not known broken, and a second
//! wait would double a visitor's. Below all this, a Cluster connection (redis-rs) follows
//! redirections and, after reconnecting a node, sends a request again by itself, whatever
//! the operation (it is not told which are safe; the repeat flag of `resolve` is not set
//! then).

use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use redis::{Script, Value};

use super::redis_client::{Connector, KeepAlive, RedisConn, Repeat, Timeouts, once_more};
use super::{
    AdaptiveState, ClientKey, GrantUse, Join, OriginExchange, OriginReport, PassReport, Phase,
    Place, QueueQuery, QueueStore, RefusedReason, Resolution, RoomPolicy, RoomSettings, RoomStats,
    SHARE_RETRY_AFTER, Seeded, SettingsPatch, StoreError, StoreResult, VisitorId, VisitorRef,
    VisitorState, WaitingEntry,
};
use crate::clock::ms;
use crate::fairness::draw::DrawHash;
use crate::queue::{DrawRecord, REAP_BUDGET};

/// How long to wait for a connection or a reply before calling the store unavailable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(3);

const TIMEOUTS: Timeouts = Timeouts {
    connect: CONNECT_TIMEOUT,
    response: RESPONSE_TIMEOUT,
    retries: 2,
    max_retry_delay: Duration::from_millis(500),
};

const COMMON: &str = include_str!("lua/common.lua");

/// One operation: a script of `lua/`, a function of the [`Library`] or, without Functions,
/// an `EVAL` script of its own.
struct Op {
    name: &'static str,
    body: &'static str,
    /// Function flags: `no-writes` for a script that only reads, so it still runs when
    /// Redis is out of memory, as a read-only `EVAL` script does.
    read_only: bool,
    /// Whether a call that met a broken connection is sent again (see the module doc).
    repeat: Repeat,
    /// Whether the script takes one more argument, `1` on a repeat and `0` on a first
    /// attempt (`resolve`, which counts no refusal on a repeat).
    marks_repeat: bool,
    eval: LazyLock<Script>,
    /// Its function's name in the [`Library`].
    function: LazyLock<String>,
}

macro_rules! op {
    ($name:literal, $repeat:expr) => {
        op!($name, $repeat, read_only: false, marks_repeat: false)
    };
    ($name:literal, $repeat:expr, read_only: $read_only:expr, marks_repeat: $marks:expr) => {
        Op {
            name: $name,
            body: include_str!(concat!("lua/", $name, ".lua")),
            read_only: $read_only,
            repeat: $repeat,
            marks_repeat: $marks,
            eval: LazyLock::new(|| {
                Script::new(concat!(
                    include_str!("lua/common.lua"),
                    "\nbegin(KEYS, ARGV)\n",
                    include_str!(concat!("lua/", $name, ".lua"))
                ))
            }),
            function: LazyLock::new(|| format!("{}{}", LIBRARY.prefix, $name)),
        }
    };
}

// Which calls are repeated after a broken connection, and why each is safe: the module doc.
static OPEN_ROOM: Op = op!("open_room", Repeat::IfUnsent);
static RESOLVE: Op = op!("resolve", Repeat::Safe, read_only: false, marks_repeat: true);
static HEARTBEAT: Op = op!("heartbeat", Repeat::Safe);
static ADMIT_PASS: Op = op!("admit_pass", Repeat::IfUnsent);
static STATS: Op = op!("stats", Repeat::Safe, read_only: true, marks_repeat: false);
static UPDATE_SETTINGS: Op = op!("update_settings", Repeat::Safe);
static FLUSH: Op = op!("flush", Repeat::IfUnsent);
static QUEUE: Op = op!("queue", Repeat::Safe);
static FRONT: Op = op!("front", Repeat::IfUnsent);
/// `touch` is safe to repeat; `end` is called as [`Repeat::IfUnsent`].
static SESSION: Op = op!("session", Repeat::Safe);
static GRANT: Op = op!("grant", Repeat::Safe);
static DRAW: Op = op!("draw", Repeat::Safe);
static ADAPTIVE: Op = op!("adaptive", Repeat::Safe);

static OPS: [&Op; 13] = [
    &OPEN_ROOM,
    &RESOLVE,
    &HEARTBEAT,
    &ADMIT_PASS,
    &STATS,
    &UPDATE_SETTINGS,
    &FLUSH,
    &QUEUE,
    &FRONT,
    &SESSION,
    &GRANT,
    &DRAW,
    &ADAPTIVE,
];

/// Every script as one Functions library: `common.lua` once, then each script as the body
/// of a function that first runs `begin(KEYS, ARGV)`. Its name and its functions' carry a
/// hash of the code, so replicas of different versions sharing a Redis (a rolling upgrade)
/// each call their own; a library is never replaced by different code. An older version's
/// library stays loaded until removed (`FUNCTION DELETE anteroom_<hash>`), a few hundred KB.
struct Library {
    /// `FUNCTION LOAD`'s argument.
    source: String,
    /// `anteroom_<hash>_`: an operation's function is this and its name.
    prefix: String,
}

static LIBRARY: LazyLock<Library> = LazyLock::new(|| {
    use sha2::Digest;
    let mut hash = sha2::Sha256::new();
    hash.update(COMMON);
    for op in OPS {
        hash.update([0, u8::from(op.read_only)]);
        hash.update(op.name);
        hash.update([0]);
        hash.update(op.body);
    }
    let name = format!("anteroom_{}", &hex::encode(hash.finalize())[..16]);
    let prefix = format!("{name}_");
    let mut source = format!("#!lua name={name}\n{COMMON}\n");
    for op in OPS {
        let flags = if op.read_only { "{'no-writes'}" } else { "{}" };
        // The body is a whole chunk; as a function body it means the same (its `return`s
        // end the call), and it sees its keys and arguments as KEYS and ARGV as before.
        source.push_str(&format!(
            "redis.register_function{{function_name = '{prefix}{name}', flags = {flags}, \
             callback = function(KEYS, ARGV)\nbegin(KEYS, ARGV)\n{body}\nend}}\n",
            name = op.name,
            body = op.body,
        ));
    }
    Library { source, prefix }
});

/// A script's arguments after the clock offset, as [`redis::ScriptInvocation::arg`] takes
/// them.
#[derive(Default)]
struct Args(Vec<Vec<u8>>);

impl Args {
    fn arg<T: redis::ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        arg.write_redis_args(&mut self.0);
        self
    }
}

/// Whether FCALL failed because the library is not loaded (never loaded, a `FUNCTION
/// FLUSH`, a restart without persistence, a new Cluster node).
fn function_missing(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError)
        && e.detail()
            .is_some_and(|d| d.starts_with("Function not found"))
}

/// How many fields of a draw's record one `HSCAN` step asks for: a draw of any size is
/// read in steps of well under a millisecond of Redis time each.
const DRAW_SCAN_STEP: usize = 1_000;

/// How many of the line one step of a search by reference reads: a few milliseconds of
/// Redis time, so an admin's search never blocks the room's admissions for long.
const FIND_STEP: usize = 20_000;

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

fn unavailable(e: redis::RedisError) -> StoreError {
    StoreError::Unavailable(format!("redis: {e}"))
}

fn bad_reply(what: &str, detail: impl std::fmt::Debug) -> StoreError {
    StoreError::Unavailable(format!("redis: unexpected reply to {what}: {detail:?}"))
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
        })
    }

    /// Moves this store's view of time forward (tests only: Redis `TIME` cannot be paused).
    #[doc(hidden)]
    pub fn advance_clock_for_tests(&self, by: Duration) {
        self.offset_ms.fetch_add(ms(by), Ordering::SeqCst);
    }

    /// Freezes this store's clock at `unix_ms` (tests only); it then moves only through
    /// [`RedisStore::advance_clock_for_tests`].
    #[doc(hidden)]
    pub fn freeze_clock_for_tests(&self, unix_ms: u64) {
        self.offset_ms.store(unix_ms, Ordering::SeqCst);
        self.frozen.store(true, Ordering::SeqCst);
    }

    /// The clock offset, or the frozen time (tests only).
    #[doc(hidden)]
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

    fn keys(room: &str) -> [String; 12] {
        [
            "conf", "state", "chunks", "dseen", "active", "draw", "places", "sess", "scount",
            "drawh", "cseen", "fen",
        ]
        .map(|k| format!("ar:{{{room}}}:{k}"))
    }

    /// [`RedisStore::keys`], kept for the rooms called so far (at most a few thousand: a
    /// name that is no room, say from an admin's typo, costs one formatting a call beyond).
    fn room_keys(&self, room: &str) -> std::sync::Arc<[String; 12]> {
        const KEPT: usize = 4_096;
        let mut kept = self.room_keys.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(keys) = kept.get(room) {
            return keys.clone();
        }
        let keys = std::sync::Arc::new(Self::keys(room));
        if kept.len() < KEPT {
            kept.insert(room.to_owned(), keys.clone());
        }
        keys
    }

    /// The key of one spent priority-grant nonce in `room` (same slot as the room). The
    /// nonce is `[A-Za-z0-9_-]` only (checked before the store is asked), so it is safe in
    /// a key.
    fn grant_key(room: &str, nonce: &str) -> String {
        format!("ar:{{{room}}}:grant:{nonce}")
    }

    /// The key of the origin reports of `room`'s replicas (same slot as the room).
    fn origin_key(room: &str) -> String {
        format!("ar:{{{room}}}:origin")
    }

    /// The key of one client's join-limit window in `room` (same slot as the room).
    fn joins_key(room: &str, client: ClientKey) -> String {
        format!("ar:{{{room}}}:joins:{client}")
    }

    /// The room's lottery salt: cached, else read from the store (and cached once there).
    /// Empty when the room was never opened.
    async fn salt(&self, room: &str) -> StoreResult<Vec<u8>> {
        if let Some(salt) = self
            .salts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(room)
        {
            return Ok(salt.clone());
        }
        let mut conn = self.conn.clone();
        let key = format!("ar:{{{room}}}:state");
        let salt: Option<Vec<u8>> = once_more!(Repeat::Safe, |_again| {
            redis::cmd("HGET")
                .arg(&key)
                .arg("salt")
                .query_async(&mut conn)
                .await
        })
        .map_err(|e| {
            self.recovering.store(true, Ordering::SeqCst);
            unavailable(e)
        })?;
        let salt = salt.unwrap_or_default();
        if !salt.is_empty() {
            self.salts
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(room.to_owned(), salt.clone());
        }
        Ok(salt)
    }

    /// Every field of the draw's record (`ar:{room}:drawh`), read in `HSCAN` steps of
    /// [`DRAW_SCAN_STEP`]; the record no longer changes once the doors are open, so the
    /// scan sees all of it. Sorted, without the repeats a scan may return.
    async fn drawn_hashes(&self, room: &str) -> StoreResult<Vec<DrawHash>> {
        let key = format!("ar:{{{room}}}:drawh");
        let mut conn = self.conn.clone();
        let mut cursor = 0u64;
        let mut hashes = Vec::new();
        loop {
            let (next, pairs): (u64, Vec<Vec<u8>>) = once_more!(Repeat::Safe, |_again| {
                redis::cmd("HSCAN")
                    .arg(&key)
                    .arg(cursor)
                    .arg("COUNT")
                    .arg(DRAW_SCAN_STEP)
                    .query_async(&mut conn)
                    .await
            })
            .map_err(|e| {
                self.recovering.store(true, Ordering::SeqCst);
                unavailable(e)
            })?;
            for value in pairs.chunks_exact(2).map(|pair| &pair[1]) {
                let bytes = <[u8; 32]>::try_from(value.as_slice()).map_err(|_| {
                    StoreError::Unavailable(format!(
                        "redis: bad data: a draw hash of {} bytes in {key} (expected 32)",
                        value.len()
                    ))
                })?;
                hashes.push(DrawHash(bytes));
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        hashes.sort_unstable();
        hashes.dedup();
        Ok(hashes)
    }

    /// Tests only: runs every operation as an `EVALSHA` script, as when Redis refuses the
    /// Functions library.
    #[doc(hidden)]
    pub fn use_eval_for_tests(&self) {
        self.eval_only.store(true, Ordering::SeqCst);
    }

    /// Whether operations run as `EVALSHA` scripts rather than library functions.
    #[doc(hidden)]
    pub fn eval_only(&self) -> bool {
        self.eval_only.load(Ordering::SeqCst)
    }

    /// The connection for a call. On a serving worker, its own, made on its runtime: the
    /// shared one's task runs on the main runtime's threads, so each call through it woke a
    /// thread there to send, and was woken back with the reply, two thread switches a call
    /// on a box where the load, Redis and anteroom share two cores. Elsewhere (background
    /// loops, tests), and while a worker's own is being made (in the background, so no
    /// request waits on a connect, even with Redis down), the shared one. A worker's own
    /// connection is kept through outages: it reconnects itself, PINGed by its
    /// [`KeepAlive`].
    fn conn(&self) -> RedisConn {
        if !crate::worker::on_serving_worker() {
            return self.conn.clone();
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return self.conn.clone();
        };
        let id = runtime.id();
        let mut local = self.local.lock().unwrap_or_else(|p| p.into_inner());
        match local.get(&id) {
            Some(Local::Ready { conn, .. }) => return conn.clone(),
            Some(Local::Connecting) => return self.conn.clone(),
            None => {}
        }
        local.insert(id, Local::Connecting);
        drop(local);
        let (connector, local) = (self.connector.clone(), self.local.clone());
        runtime.spawn(async move {
            let made = connector.connect().await;
            let mut local = local.lock().unwrap_or_else(|p| p.into_inner());
            match made {
                Ok(conn) => {
                    let _keep_alive = KeepAlive::start(&conn);
                    local.insert(id, Local::Ready { conn, _keep_alive });
                }
                // The next call on this worker tries again; the shared one serves meanwhile.
                Err(_) => {
                    local.remove(&id);
                }
            }
        });
        self.conn.clone()
    }

    /// A call failed as unavailable (after its repeat, if any): the next successful pass
    /// forgives the time since the room's last one as downtime.
    fn failed(&self) {
        self.recovering.store(true, Ordering::SeqCst);
    }

    /// Runs one script on `room` with `args` after the clock offset.
    async fn call(&self, op: &Op, room: &str, args: impl FnOnce(&mut Args)) -> StoreResult<Value> {
        self.call_as(op, op.repeat, room, None, args).await
    }

    /// [`RedisStore::call`] with one more key after the room's.
    async fn call_with(
        &self,
        op: &Op,
        room: &str,
        extra_key: Option<String>,
        args: impl FnOnce(&mut Args),
    ) -> StoreResult<Value> {
        self.call_as(op, op.repeat, room, extra_key, args).await
    }

    /// [`RedisStore::call_with`], repeated after a broken connection as `repeat` says
    /// (rather than as the operation's default).
    async fn call_as(
        &self,
        op: &Op,
        repeat: Repeat,
        room: &str,
        extra_key: Option<String>,
        args: impl FnOnce(&mut Args),
    ) -> StoreResult<Value> {
        let room_keys = self.room_keys(room);
        let keys: Vec<&str> = room_keys
            .iter()
            .map(String::as_str)
            .chain(extra_key.as_deref())
            .collect();
        let mut rest = Args::default();
        rest.arg(self.clock_arg());
        args(&mut rest);
        let mut conn = self.conn();
        let result = once_more!(repeat, |again| {
            let mark = op.marks_repeat.then_some(if again { "1" } else { "0" });
            if self.eval_only.load(Ordering::Relaxed) {
                Self::eval(op, &keys, &rest, mark, &mut conn).await
            } else {
                self.fcall(op, &keys, &rest, mark, &mut conn).await
            }
        });
        match result {
            Ok(value) => {
                if let Value::Array(items) = &value
                    && let [Value::Int(-1)] = items.as_slice()
                {
                    return Err(StoreError::UnknownRoom(room.to_owned()));
                }
                Ok(value)
            }
            Err(e) => {
                self.failed();
                Err(unavailable(e))
            }
        }
    }

    /// `op` as its own `EVALSHA` script (loaded on NOSCRIPT), `mark` its last argument.
    async fn eval(
        op: &Op,
        keys: &[&str],
        args: &Args,
        mark: Option<&str>,
        conn: &mut RedisConn,
    ) -> redis::RedisResult<Value> {
        let mut invocation = op.eval.prepare_invoke();
        for key in keys {
            invocation.key(key);
        }
        for arg in &args.0 {
            invocation.arg(&arg[..]);
        }
        if let Some(mark) = mark {
            invocation.arg(mark);
        }
        invocation.invoke_async(conn).await
    }

    /// `op` as a function of the [`Library`]: loaded and called again when it is missing;
    /// when Redis refuses to load it, this call and every later one is [`RedisStore::eval`].
    async fn fcall(
        &self,
        op: &Op,
        keys: &[&str],
        args: &Args,
        mark: Option<&str>,
        conn: &mut RedisConn,
    ) -> redis::RedisResult<Value> {
        let mut fcall = redis::cmd("FCALL");
        fcall.arg(op.function.as_str()).arg(keys.len()).arg(keys);
        for arg in &args.0 {
            fcall.arg(&arg[..]);
        }
        if let Some(mark) = mark {
            fcall.arg(mark);
        }
        match fcall.query_async(conn).await {
            Err(e) if function_missing(&e) => {}
            other => return other,
        }
        let load = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(&LIBRARY.source)
            .query_async::<Value>(conn)
            .await;
        match load {
            Ok(_) => fcall.query_async(conn).await,
            // A server error (no FUNCTION command, NOPERM): Functions are not for us here.
            // Anything else (the connection) is the store being unavailable, as usual.
            Err(e) if matches!(e.kind(), redis::ErrorKind::Server(_)) => {
                if !self.eval_only.swap(true, Ordering::SeqCst) {
                    tracing::warn!(
                        error = %e,
                        "redis: cannot load the Functions library; running each operation as an \
                         EVAL script instead (more Redis CPU a call)"
                    );
                }
                Self::eval(op, keys, args, mark, conn).await
            }
            Err(e) => Err(e),
        }
    }
}

fn ints(what: &str, value: Value) -> StoreResult<Vec<i64>> {
    redis::from_redis_value_ref::<Vec<i64>>(&value).map_err(|_| bad_reply(what, value))
}

fn ids(what: &str, value: Value) -> StoreResult<Vec<VisitorId>> {
    let raw: Vec<Vec<u8>> =
        redis::from_redis_value(value.clone()).map_err(|_| bad_reply(what, &value))?;
    raw.into_iter()
        .map(|bytes| {
            <[u8; 16]>::try_from(bytes.as_slice())
                .map(VisitorId)
                .map_err(|_| {
                    StoreError::Unavailable(format!(
                        "redis: bad data: a visitor id of {} bytes in {what} (expected 16)",
                        bytes.len()
                    ))
                })
        })
        .collect()
}

/// A place from a script's reply; position 0 is none (a lottery draw before the doors).
fn place(position: i64, waiting: i64, paused: i64, phase: i64) -> StoreResult<Place> {
    let phase = match phase {
        0 => Phase::Queueing,
        1 => Phase::BeforeOpen,
        2 => Phase::Draw,
        3 => Phase::Closed,
        other => return Err(bad_reply("a phase", other)),
    };
    Ok(Place {
        position: (position > 0).then_some(position as u64),
        waiting: waiting.max(0) as u64,
        paused: paused == 1,
        phase,
    })
}

/// One waiting visitor from a `queue.lua` reply: id, position, joined ms (0: unknown),
/// last seen ms.
fn waiting_entry(fields: &[Value]) -> StoreResult<WaitingEntry> {
    let [id, position, joined, seen] = fields else {
        return Err(bad_reply("queue", fields));
    };
    let int = |v: &Value| -> StoreResult<i64> {
        redis::from_redis_value::<i64>(v.clone()).map_err(|_| bad_reply("queue", v))
    };
    let visitor = ids("queue", Value::Array(vec![id.clone()]))?
        .pop()
        .ok_or_else(|| bad_reply("queue", id))?;
    let position = int(position)?;
    let joined = int(joined)?;
    Ok(WaitingEntry {
        visitor,
        reference: visitor.reference(),
        position: (position > 0).then_some(position as u64),
        joined_at_ms: (joined > 0).then_some(joined as u64),
        last_seen_ms: int(seen)?.max(0) as u64,
    })
}

impl RedisStore {
    /// The waiting visitor with `reference`: the line from its head, then the draw, in
    /// steps of [`FIND_STEP`] (each one script, so Redis is never blocked for long; a
    /// visitor moving between steps may be missed, and the admin simply searches again).
    /// Chosen over an index by reference, which would cost memory per waiting visitor
    /// against the ≤ 120 B goal for a rare admin search.
    async fn find(&self, room: &str, reference: VisitorRef) -> StoreResult<WaitingEntry> {
        let prefix = reference.prefix();
        for key in ["line", "draw"] {
            let mut first = 0i64;
            loop {
                let reply = self
                    .call(&QUEUE, room, |inv| {
                        inv.arg("find")
                            .arg(key)
                            .arg(first)
                            .arg(FIND_STEP)
                            .arg(&prefix[..]);
                    })
                    .await?;
                let Value::Array(items) = reply else {
                    return Err(bad_reply("queue", reply));
                };
                match items.split_first() {
                    Some((Value::Int(1), entry)) => return waiting_entry(entry),
                    Some((Value::Int(0), [Value::Int(next)])) if *next > first => first = *next,
                    Some((Value::Int(2), [])) => break,
                    _ => return Err(bad_reply("queue", items)),
                }
            }
        }
        Err(StoreError::NotWaiting(reference))
    }
}

fn parse<T: std::str::FromStr>(field: &str, s: &str) -> StoreResult<T> {
    s.parse().map_err(|_| {
        StoreError::Unavailable(format!("redis: bad data: {field} is {s:?} in the store"))
    })
}

#[async_trait]
impl QueueStore for RedisStore {
    async fn open_room(
        &self,
        room: &str,
        seed: &RoomSettings,
        policy: &RoomPolicy,
        reseed: bool,
    ) -> StoreResult<Seeded> {
        seed.validate()?;
        let mut salt = [0u8; 16];
        getrandom::fill(&mut salt).expect("the operating system's random generator failed");
        let time = |t: Option<u64>| t.map(|t| t.to_string()).unwrap_or_default();
        let [opens, admits, closes] = policy.schedule_ms();
        let reply = self
            .call(&OPEN_ROOM, room, |inv| {
                inv.arg(seed.rate.to_string())
                    .arg(seed.max_active)
                    .arg(ms(seed.session_ttl))
                    .arg(ms(seed.abandon_after))
                    .arg(if reseed { "1" } else { "0" })
                    .arg(policy.join_limit_per_ip)
                    .arg(ms(policy.join_limit_window))
                    .arg(time(opens))
                    .arg(time(admits))
                    .arg(time(closes))
                    .arg(if policy.lottery { "1" } else { "0" })
                    .arg(&salt[..])
                    .arg(policy.max_places_per_client)
                    .arg(policy.max_sessions_per_client)
                    .arg(policy.session_clients)
                    .arg(policy.max_waiting);
            })
            .await?;
        // The salt in the store is the one that counts (another replica may have set it).
        self.salts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(room);
        self.salt(room).await?;
        match ints("open_room", reply)?.as_slice() {
            [0] => Ok(Seeded::Fresh),
            [1] => Ok(Seeded::Unchanged),
            [2] => Ok(Seeded::KeptLive(self.stats(room).await?.settings)),
            [3] => Ok(Seeded::Reseeded),
            other => Err(bad_reply("open_room", other)),
        }
    }

    async fn resolve_with(
        &self,
        room: &str,
        visitor: VisitorId,
        client: ClientKey,
        join: Join,
    ) -> StoreResult<Resolution> {
        // The lottery's order, by the published rule: the draw hash (SHA-256(salt ‖ id))
        // and its first 52 bits as the score, exact in a ZSET's double.
        let salt = self.salt(room).await?;
        let hash = DrawHash::of(&salt, visitor);
        let score = hash.score() >> 12;
        let reply = self
            .call_with(&RESOLVE, room, Some(Self::joins_key(room, client)), |inv| {
                inv.arg(&visitor.0[..])
                    .arg(&client.to_bytes()[..])
                    .arg(if join == Join::Front { "1" } else { "0" })
                    .arg(score.to_string())
                    .arg(&hash.0[..]);
            })
            .await?;
        match ints("resolve", reply)?.as_slice() {
            &[1, newly] => Ok(Resolution::Admitted { newly: newly == 1 }),
            &[2, position, waiting, paused, joined, phase] => Ok(Resolution::Waiting {
                place: place(position, waiting, paused, phase)?,
                joined: joined == 1,
            }),
            &[3, retry_after_ms, 0] => Ok(Resolution::Refused {
                reason: RefusedReason::JoinLimit,
                retry_after: Duration::from_millis(retry_after_ms.max(1) as u64),
            }),
            &[3, _, reason @ 1..=3] => Ok(Resolution::Refused {
                reason: match reason {
                    1 => RefusedReason::PlacesPerClient,
                    2 => RefusedReason::SessionsPerClient,
                    _ => RefusedReason::SessionClients,
                },
                retry_after: SHARE_RETRY_AFTER,
            }),
            [4] => Ok(Resolution::NotOpen),
            [5] => Ok(Resolution::Closed),
            [6] => Ok(Resolution::Full),
            other => Err(bad_reply("resolve", other)),
        }
    }

    async fn queue(&self, room: &str, query: QueueQuery) -> StoreResult<Vec<WaitingEntry>> {
        match query {
            QueueQuery::Head { limit } => {
                let limit = limit.min(QueueQuery::MAX_LIMIT);
                let reply = self
                    .call(&QUEUE, room, |inv| {
                        inv.arg("head").arg(limit);
                    })
                    .await?;
                let Value::Array(items) = reply else {
                    return Err(bad_reply("queue", reply));
                };
                items.chunks(4).map(waiting_entry).collect()
            }
            QueueQuery::Ref(reference) => Ok(vec![self.find(room, reference).await?]),
        }
    }

    async fn move_to_front(&self, room: &str, reference: VisitorRef) -> StoreResult<Place> {
        let visitor = self.find(room, reference).await?.visitor;
        let reply = self
            .call(&FRONT, room, |inv| {
                inv.arg(&visitor.0[..]);
            })
            .await?;
        match ints("front", reply)?.as_slice() {
            [0] => Err(StoreError::NotWaiting(reference)),
            &[1, position, waiting, paused, phase] => place(position, waiting, paused, phase),
            other => Err(bad_reply("front", other)),
        }
    }

    async fn spend_grant(
        &self,
        room: &str,
        nonce: &str,
        visitor: VisitorId,
        expires_at_ms: u64,
    ) -> StoreResult<GrantUse> {
        let reply = self
            .call_with(&GRANT, room, Some(Self::grant_key(room, nonce)), |inv| {
                inv.arg(&visitor.0[..]).arg(expires_at_ms);
            })
            .await?;
        match ints("grant", reply)?.as_slice() {
            [1] => Ok(GrantUse::Fresh),
            [2] => Ok(GrantUse::Again),
            [0] => Ok(GrantUse::Taken),
            other => Err(bad_reply("grant", other)),
        }
    }

    async fn end_session(&self, room: &str, visitor: VisitorId) -> StoreResult<bool> {
        let reply = self
            .call_as(&SESSION, Repeat::IfUnsent, room, None, |inv| {
                inv.arg("end").arg(&visitor.0[..]);
            })
            .await?;
        match ints("end_session", reply)?.as_slice() {
            [0] => Ok(false),
            [1] => Ok(true),
            other => Err(bad_reply("end_session", other)),
        }
    }

    async fn touch_sessions(&self, room: &str, visitors: &[VisitorId]) -> StoreResult<Vec<bool>> {
        if visitors.is_empty() {
            // Still answers whether the room exists, like every other operation.
            self.call(&STATS, room, |_| {}).await?;
            return Ok(Vec::new());
        }
        let reply = self
            .call(&SESSION, room, |inv| {
                inv.arg("touch");
                for v in visitors {
                    inv.arg(&v.0[..]);
                }
            })
            .await?;
        let on = ints("touch_sessions", reply)?;
        if on.len() != visitors.len() {
            return Err(bad_reply("touch_sessions", on));
        }
        Ok(on.into_iter().map(|n| n == 1).collect())
    }

    async fn heartbeat(
        &self,
        room: &str,
        visitors: &[VisitorId],
    ) -> StoreResult<Vec<VisitorState>> {
        let reply = self
            .call(&HEARTBEAT, room, |inv| {
                for v in visitors {
                    inv.arg(&v.0[..]);
                }
            })
            .await?;
        let reply = ints("heartbeat", reply)?;
        let Some((&[waiting, paused, phase], states)) = reply.split_first_chunk::<3>() else {
            return Err(bad_reply("heartbeat", &reply));
        };
        if states.len() != visitors.len() * 2 {
            return Err(bad_reply("heartbeat", &reply));
        }
        states
            .chunks_exact(2)
            .map(|pair| match *pair {
                [0, _] => Ok(VisitorState::Unknown),
                [1, _] => Ok(VisitorState::Admitted),
                [2, position] => Ok(VisitorState::Waiting(place(
                    position, waiting, paused, phase,
                )?)),
                _ => Err(bad_reply("heartbeat", pair)),
            })
            .collect()
    }

    async fn admit_pass(&self, room: &str) -> StoreResult<PassReport> {
        let forgive = self.recovering.swap(false, Ordering::SeqCst);
        let result = self
            .call(&ADMIT_PASS, room, |inv| {
                inv.arg(REAP_BUDGET).arg(if forgive { "1" } else { "0" });
            })
            .await;
        let reply = match result {
            Ok(reply) => reply,
            Err(e) => {
                if forgive {
                    self.recovering.store(true, Ordering::SeqCst);
                }
                return Err(e);
            }
        };
        let Value::Array(parts) = reply else {
            return Err(bad_reply("admit_pass", reply));
        };
        let Ok::<[Value; 4], _>([admitted, abandoned, expired, joined]) = parts.try_into() else {
            return Err(bad_reply("admit_pass", "not four lists"));
        };
        let joined_ms = match joined {
            Value::Array(times) => times
                .into_iter()
                .map(|t| match t {
                    Value::Int(ms) if ms > 0 => Ok(Some(ms as u64)),
                    Value::Int(_) => Ok(None),
                    other => Err(bad_reply("the admitted's join times", other)),
                })
                .collect::<StoreResult<Vec<_>>>()?,
            other => return Err(bad_reply("the admitted's join times", other)),
        };
        Ok(PassReport {
            admitted: ids("the admitted list", admitted)?,
            joined_ms,
            abandoned: ids("the abandoned list", abandoned)?,
            expired: ids("the expired list", expired)?,
        })
    }

    async fn stats(&self, room: &str) -> StoreResult<RoomStats> {
        let reply = self.call(&STATS, room, |_| {}).await?;
        let fields: Vec<String> =
            redis::from_redis_value(reply.clone()).map_err(|_| bad_reply("stats", &reply))?;
        let [
            waiting,
            active,
            joined,
            admitted,
            expired,
            abandoned,
            refused,
            rate,
            max_active,
            ttl,
            abandon,
            paused,
        ] = fields.as_slice()
        else {
            return Err(bad_reply("stats", &fields));
        };
        Ok(RoomStats {
            waiting: parse("waiting", waiting)?,
            active: parse("active", active)?,
            total_joined: parse("total_joined", joined)?,
            total_admitted: parse("total_admitted", admitted)?,
            total_expired: parse("total_expired", expired)?,
            total_abandoned: parse("total_abandoned", abandoned)?,
            total_refused: parse("total_refused", refused)?,
            settings: RoomSettings {
                rate: parse("rate", rate)?,
                max_active: parse("max_active", max_active)?,
                session_ttl: Duration::from_millis(parse("session_ttl_ms", ttl)?),
                abandon_after: Duration::from_millis(parse("abandon_after_ms", abandon)?),
                paused: paused == "1",
            },
        })
    }

    async fn draw(&self, room: &str, hashes: bool) -> StoreResult<DrawRecord> {
        let reply = self.call(&DRAW, room, |_| {}).await?;
        let Value::Array(parts) = &reply else {
            return Err(bad_reply("draw", reply));
        };
        let (phase, salt, entrants) = match parts.as_slice() {
            [Value::Int(phase), salt, Value::Int(entrants)] => {
                let salt: Vec<u8> =
                    redis::from_redis_value(salt.clone()).map_err(|_| bad_reply("draw", salt))?;
                (*phase, salt, (*entrants).max(0) as u64)
            }
            _ => return Err(bad_reply("draw", parts)),
        };
        let phase = place(0, 0, 0, phase)?.phase;
        let mut record = DrawRecord {
            salt,
            phase,
            entrants,
            hashes: None,
        };
        if hashes && record.doors_open() {
            let list = self.drawn_hashes(room).await?;
            record.entrants = list.len() as u64;
            record.hashes = Some(list);
        }
        Ok(record)
    }

    async fn update_settings(
        &self,
        room: &str,
        patch: &SettingsPatch,
    ) -> StoreResult<RoomSettings> {
        // Every rule is about one field, so checking the patch over any valid settings names
        // the same first bad field as checking it over the live ones.
        RoomSettings {
            rate: 1.0,
            max_active: 1,
            session_ttl: Duration::from_secs(1),
            abandon_after: Duration::from_secs(1),
            paused: false,
        }
        .patched(patch)?;
        let opt = |v: Option<String>| v.unwrap_or_default();
        let reply = self
            .call(&UPDATE_SETTINGS, room, |inv| {
                inv.arg(opt(patch.rate.map(|r| r.to_string())))
                    .arg(opt(patch.max_active.map(|m| m.to_string())))
                    .arg(opt(patch.session_ttl.map(|d| ms(d).to_string())))
                    .arg(opt(patch.abandon_after.map(|d| ms(d).to_string())))
                    .arg(opt(patch
                        .paused
                        .map(|p| if p { "1" } else { "0" }.to_owned())));
            })
            .await?;
        match ints("update_settings", reply)?.as_slice() {
            [1] => Ok(self.stats(room).await?.settings),
            other => Err(bad_reply("update_settings", other)),
        }
    }

    async fn flush(&self, room: &str) -> StoreResult<u64> {
        let reply = self.call(&FLUSH, room, |_| {}).await?;
        match ints("flush", reply)?.as_slice() {
            &[n] if n >= 0 => Ok(n as u64),
            other => Err(bad_reply("flush", other)),
        }
    }

    async fn exchange_origin(
        &self,
        room: &str,
        replica: &str,
        report: &OriginReport,
    ) -> StoreResult<OriginExchange> {
        use crate::fairness::adaptive::{CLAIM_EVERY_MS, REPORT_STALE_MS};
        let json = serde_json::to_string(report)
            .map_err(|e| StoreError::Unavailable(format!("cannot encode a report: {e}")))?;
        let reply = self
            .call_with(&ADAPTIVE, room, Some(Self::origin_key(room)), |inv| {
                inv.arg("x")
                    .arg(replica)
                    .arg(json)
                    .arg(REPORT_STALE_MS)
                    .arg(CLAIM_EVERY_MS);
            })
            .await?;
        let fields: Vec<String> = redis::from_redis_value(reply.clone())
            .map_err(|_| bad_reply("exchange_origin", &reply))?;
        let [now, rate, claimed, state, reports @ ..] = fields.as_slice() else {
            return Err(bad_reply("exchange_origin", &fields));
        };
        // Another replica's bad JSON (a different version, say) is skipped, not fatal:
        // the decision is made on what can be read.
        let state = (!state.is_empty())
            .then(|| serde_json::from_str::<AdaptiveState>(state).ok())
            .flatten();
        let reports = reports
            .iter()
            .filter_map(|v| {
                let (at, json) = v.split_once(' ')?;
                Some((at.parse().ok()?, serde_json::from_str(json).ok()?))
            })
            .collect();
        Ok(OriginExchange {
            now_ms: parse("now", now)?,
            configured_rate: parse("rate", rate)?,
            decide: claimed == "1",
            state,
            reports,
        })
    }

    async fn set_adaptive(&self, room: &str, state: Option<&AdaptiveState>) -> StoreResult<()> {
        let (rate, json) = match state {
            Some(s) => (
                format!("{:.17}", s.effective_rate.max(0.0)),
                serde_json::to_string(s)
                    .map_err(|e| StoreError::Unavailable(format!("cannot encode a state: {e}")))?,
            ),
            None => (String::new(), String::new()),
        };
        let reply = self
            .call_with(&ADAPTIVE, room, Some(Self::origin_key(room)), |inv| {
                inv.arg("s").arg(rate).arg(json);
            })
            .await?;
        match ints("set_adaptive", reply)?.as_slice() {
            [1] => Ok(()),
            other => Err(bad_reply("set_adaptive", other)),
        }
    }

    async fn ping(&self) -> StoreResult<()> {
        let mut conn = self.conn();
        let pong = once_more!(Repeat::Safe, |_again| {
            redis::cmd("PING").query_async::<String>(&mut conn).await
        });
        match pong {
            Ok(_) => Ok(()),
            Err(e) => {
                self.failed();
                Err(unavailable(e))
            }
        }
    }

    async fn persist(&self) -> StoreResult<()> {
        // Redis is durable by itself (as configured by its operator).
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::conformance::{self, Harness, anyone};
    use crate::testing::{RedisCluster, RedisServer, TestCa};
    use crate::tls::CaFile;
    use std::sync::Arc;

    /// A Redis (single node or cluster, plain or TLS) started for one test, and a store on
    /// it.
    struct RedisHarness {
        store: Arc<RedisStore>,
        urls: Vec<String>,
        /// For TLS: the test CA, as `redis.ca_file` would give it.
        ca: Option<CaFile>,
        /// Every store runs its operations as `EVALSHA` scripts (the fallback without
        /// Functions).
        eval: bool,
        _server: Option<RedisServer>,
        _cluster: Option<RedisCluster>,
        _test_ca: Option<Arc<TestCa>>,
    }

    impl RedisHarness {
        async fn single() -> Self {
            let server = RedisServer::start();
            Self::on_server(server, None).await
        }

        /// A TLS-only server (`--port 0 --tls-port`) and a `rediss://` store trusting the
        /// test CA through `redis.ca_file`'s path.
        async fn single_tls() -> Self {
            let test_ca = Arc::new(TestCa::new());
            let server = RedisServer::start_tls(test_ca.clone());
            Self::on_server(server, Some(test_ca)).await
        }

        async fn on_server(server: RedisServer, test_ca: Option<Arc<TestCa>>) -> Self {
            let urls = vec![server.url()];
            let ca = test_ca
                .as_ref()
                .map(|t| CaFile::read(&t.ca_path()).unwrap());
            let store = Arc::new(frozen(&urls, ca.as_ref()).await);
            RedisHarness {
                store,
                urls,
                ca,
                eval: false,
                _server: Some(server),
                _cluster: None,
                _test_ca: test_ca,
            }
        }

        async fn cluster() -> Self {
            Self::on_cluster(RedisCluster::start(), None).await
        }

        /// One node, every store running its operations as `EVALSHA` scripts.
        async fn single_eval() -> Self {
            let mut harness = Self::single().await;
            harness.eval = true;
            harness.store.use_eval_for_tests();
            harness
        }

        async fn connect(&self) -> RedisStore {
            let store = connect_ca(&self.urls, self.ca.as_ref()).await;
            if self.eval {
                store.use_eval_for_tests();
            }
            store
        }

        /// Three TLS-only nodes with TLS on the cluster bus (`--tls-cluster yes`).
        async fn cluster_tls() -> Self {
            let test_ca = Arc::new(TestCa::new());
            Self::on_cluster(RedisCluster::start_tls(test_ca.clone()), Some(test_ca)).await
        }

        async fn on_cluster(cluster: RedisCluster, test_ca: Option<Arc<TestCa>>) -> Self {
            let urls = cluster.urls();
            let ca = test_ca
                .as_ref()
                .map(|t| CaFile::read(&t.ca_path()).unwrap());
            let store = Arc::new(frozen(&urls, ca.as_ref()).await);
            RedisHarness {
                store,
                urls,
                ca,
                eval: false,
                _server: None,
                _cluster: Some(cluster),
                _test_ca: test_ca,
            }
        }
    }

    /// A store whose clock stands still until the test advances it.
    async fn frozen(urls: &[String], ca: Option<&CaFile>) -> RedisStore {
        let store = connect_ca(urls, ca).await;
        store.freeze_clock_for_tests(conformance::START_MS);
        store
    }

    async fn connect(urls: &[String]) -> RedisStore {
        connect_ca(urls, None).await
    }

    async fn connect_ca(urls: &[String], ca: Option<&CaFile>) -> RedisStore {
        let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
        RedisStore::connect_with(&nodes, ca).await.unwrap()
    }

    #[async_trait]
    impl Harness for RedisHarness {
        type Store = RedisStore;
        fn store(&self) -> Arc<RedisStore> {
            self.store.clone()
        }
        async fn advance(&self, by: Duration) {
            self.store.advance_clock_for_tests(by);
        }
        fn lottery_entrants(&self) -> usize {
            // Two chunks of the doors' move; 100k joins over the network is slow in debug.
            20_000
        }
        async fn replica(&self) -> Option<Arc<RedisStore>> {
            let store = self.connect().await;
            store.freeze_clock_for_tests(self.store.clock_for_tests());
            Some(Arc::new(store))
        }
        async fn reopen(&mut self, downtime: Duration) {
            let at = self.store.clock_for_tests() + ms(downtime);
            let store = self.connect().await;
            store.freeze_clock_for_tests(at);
            self.store = Arc::new(store);
        }
    }

    mod single {
        use super::*;
        conformance::suite!(unpaused: RedisHarness::single().await);
    }

    mod cluster {
        use super::*;
        conformance::suite!(unpaused: RedisHarness::cluster().await);
    }

    /// The whole conformance suite again over `rediss://` to a TLS-only `redis-server`.
    mod single_tls {
        use super::*;
        conformance::suite!(unpaused: RedisHarness::single_tls().await);
    }

    /// And to a three-node Cluster whose nodes and bus speak only TLS.
    mod cluster_tls {
        use super::*;
        conformance::suite!(unpaused: RedisHarness::cluster_tls().await);
    }

    /// The whole suite again with every operation as its own `EVALSHA` script, as where
    /// Redis refuses the Functions library.
    mod single_eval {
        use super::*;
        conformance::suite!(unpaused: RedisHarness::single_eval().await);
    }

    /// Runs `body` as a serving worker does: on a thread marked as one, on a runtime of its
    /// own, with a store connected to `urls` whose room `main` is open at `rate`.
    fn on_a_serving_worker<F: std::future::Future<Output = ()>>(
        urls: &[String],
        rate: f64,
        body: impl FnOnce(RedisStore) -> F + Send,
    ) {
        std::thread::scope(|scope| {
            scope.spawn(|| {
                crate::worker::serve_here_for_tests();
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async {
                    let store = connect(urls).await;
                    let seed = conformance::settings(rate, 100);
                    store
                        .open_room("main", &seed, &RoomPolicy::default(), false)
                        .await
                        .unwrap();
                    body(store).await;
                });
            });
        });
    }

    /// Whether the calling worker's connection of its own is ready (the only one made).
    fn has_its_own_connection(store: &RedisStore) -> bool {
        let local = store.local.lock().unwrap();
        matches!(
            local.values().collect::<Vec<_>>()[..],
            [Local::Ready { .. }]
        )
    }

    /// Polls (with calls that make the worker ask for it) until the worker's own connection
    /// is ready, for at most 5 s.
    async fn until_it_has_its_own_connection(store: &RedisStore) {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !has_its_own_connection(store) {
            assert!(
                std::time::Instant::now() < deadline,
                "no connection of the worker's own"
            );
            store.stats("main").await.unwrap();
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// A serving worker's calls go through a connection of its own, made in the background
    /// on its runtime while the shared one serves.
    #[test]
    fn a_serving_worker_gets_its_own_connection() {
        let server = RedisServer::start();
        on_a_serving_worker(&[server.url()], 1.0, |store| async move {
            until_it_has_its_own_connection(&store).await;
            let joined = store
                .resolve("main", VisitorId::random(), anyone())
                .await
                .unwrap();
            assert!(
                matches!(joined, Resolution::Admitted { newly: true }),
                "{joined:?}"
            );
            assert_eq!(store.stats("main").await.unwrap().active, 1);
        });
    }

    /// A loopback proxy in front of a Redis that, when told, passes the next command on
    /// but closes the client's connection instead of passing its reply back: the command
    /// ran, and the client sees its connection reset, as when Redis or the network fails
    /// after the write.
    struct ReplyDropper {
        url: String,
        drop_next: Arc<AtomicBool>,
    }

    impl ReplyDropper {
        async fn start(upstream: u16) -> ReplyDropper {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("redis://{}", listener.local_addr().unwrap());
            let drop_next = Arc::new(AtomicBool::new(false));
            let dropping = drop_next.clone();
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let dropping = dropping.clone();
                    tokio::spawn(async move {
                        let Ok(server) =
                            tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                        else {
                            return;
                        };
                        let (mut cr, mut cw) = client.into_split();
                        let (mut sr, mut sw) = server.into_split();
                        let up = async {
                            let mut buf = vec![0u8; 65536];
                            while let Ok(n @ 1..) = cr.read(&mut buf).await {
                                if sw.write_all(&buf[..n]).await.is_err() {
                                    break;
                                }
                            }
                        };
                        let down = async {
                            let mut buf = vec![0u8; 65536];
                            while let Ok(n @ 1..) = sr.read(&mut buf).await {
                                // A keep-alive's PONG is not the reply meant.
                                if !buf[..n].starts_with(b"+PONG")
                                    && dropping.swap(false, Ordering::SeqCst)
                                {
                                    break;
                                }
                                if cw.write_all(&buf[..n]).await.is_err() {
                                    break;
                                }
                            }
                        };
                        // Either way ends both: the client's socket is closed whole.
                        tokio::select! {
                            () = up => {}
                            () = down => {}
                        }
                    });
                }
            });
            ReplyDropper { url, drop_next }
        }

        /// The next reply from Redis is dropped and its connection closed.
        fn drop_next_reply(&self) {
            self.drop_next.store(true, Ordering::SeqCst);
        }
    }

    /// Redis SIGKILLed and started again: the first call on the shared connection and the
    /// first on a serving worker's own succeed, with no call in between and no wait after
    /// Redis answers PING (a broken connection is repeated once, or was already mended by
    /// its keep-alive).
    #[test]
    fn the_first_call_after_redis_restarts_succeeds() {
        let server = std::sync::Mutex::new(RedisServer::start_durable());
        let urls = vec![server.lock().unwrap().url()];
        on_a_serving_worker(&urls, 1_000.0, |store| async move {
            until_it_has_its_own_connection(&store).await;
            for round in 0..3 {
                server.lock().unwrap().kill();
                // The outage seen (or not: round 0 restarts at once).
                if round > 0 {
                    assert!(store.stats("main").await.is_err());
                }
                server.lock().unwrap().restart();
                // The worker's own connection, then the shared one (a pass).
                let joined = store.resolve("main", VisitorId::random(), anyone()).await;
                assert!(
                    matches!(joined, Ok(Resolution::Admitted { newly: true })),
                    "round {round}: {joined:?}"
                );
                assert!(
                    has_its_own_connection(&store),
                    "round {round}: the worker kept its connection"
                );
            }
            assert_eq!(store.stats("main").await.unwrap().active, 3);
        });
    }

    /// The same on the shared connection (background loops, and calls off the workers).
    #[tokio::test]
    async fn the_first_call_on_the_shared_connection_after_a_restart_succeeds() {
        let mut server = RedisServer::start_durable();
        let store = connect(&[server.url()]).await;
        let seed = conformance::settings(1_000.0, 100);
        store
            .open_room("main", &seed, &RoomPolicy::default(), false)
            .await
            .unwrap();
        for round in 0..3 {
            server.kill();
            if round > 0 {
                assert!(store.admit_pass("main").await.is_err());
            }
            server.restart();
            let stats = store.stats("main").await;
            assert!(stats.is_ok(), "round {round}: {stats:?}");
            store.admit_pass("main").await.unwrap();
            store.ping().await.unwrap();
        }
    }

    /// A call repeated after its connection broke: one that may not be repeated is not
    /// run twice (the counter says once, and the caller is told it failed); one that may
    /// is run again even though the first ran (why only idempotent calls may).
    #[tokio::test]
    async fn only_calls_safe_to_repeat_are_repeated_when_the_first_may_have_run() {
        use super::super::redis_client::build;
        let server = RedisServer::start();
        let proxy = ReplyDropper::start(server.port()).await;
        let mut conn = build(&[&proxy.url], None)
            .unwrap()
            .connect(TIMEOUTS)
            .await
            .unwrap();
        let incr = redis::cmd("INCR").arg("n").clone();
        let count = || server.cli(&["GET", "n"]).trim().to_owned();
        proxy.drop_next_reply();
        let once: redis::RedisResult<i64> =
            once_more!(Repeat::IfUnsent, |_again| incr.query_async(&mut conn).await);
        assert!(once.is_err(), "{once:?}");
        assert_eq!(count(), "1", "ran once, not repeated");
        // Reconnected before the next reply is dropped (not the new connection's setup's).
        let _: () = once_more!(Repeat::Safe, |_again| {
            redis::cmd("PING").query_async::<String>(&mut conn).await
        })
        .map(drop)
        .unwrap();
        proxy.drop_next_reply();
        let twice: redis::RedisResult<i64> =
            once_more!(Repeat::Safe, |_again| incr.query_async(&mut conn).await);
        assert_eq!(twice.unwrap(), 3, "repeated on the new connection");
        assert_eq!(count(), "3");
        // With nothing broken, one run.
        let once: redis::RedisResult<i64> =
            once_more!(Repeat::Safe, |_again| incr.query_async(&mut conn).await);
        assert_eq!(once.unwrap(), 4);
    }

    /// `resolve` is repeated after a reset connection, and a repeat whose first attempt
    /// ran admits or places nobody twice and counts no refusal twice (the store's state
    /// says so), on a single node and through the `EVALSHA` fallback.
    #[tokio::test]
    async fn a_repeated_resolve_applies_once() {
        for eval in [false, true] {
            let server = RedisServer::start();
            let proxy = ReplyDropper::start(server.port()).await;
            let store = frozen(std::slice::from_ref(&proxy.url), None).await;
            if eval {
                store.use_eval_for_tests();
            }
            let policy = RoomPolicy {
                join_limit_per_ip: 2,
                join_limit_window: Duration::from_secs(60),
                ..Default::default()
            };
            store
                .open_room("main", &conformance::settings(1.0, 1), &policy, false)
                .await
                .unwrap();
            // Every script loaded first (the `EVALSHA` fallback loads one on its first
            // call): the reply dropped is the script's, not a `NOSCRIPT`.
            store
                .open_room("warm", &conformance::settings(1.0, 1), &policy, false)
                .await
                .unwrap();
            store
                .resolve("warm", VisitorId::random(), anyone())
                .await
                .unwrap();
            store.stats("warm").await.unwrap();
            let stats = || async { store.stats("main").await.unwrap() };
            // Admitted on the spot by the first attempt: the repeat finds them on the site.
            proxy.drop_next_reply();
            let first = VisitorId::random();
            let admitted = store.resolve("main", first, anyone()).await.unwrap();
            assert!(
                matches!(admitted, Resolution::Admitted { .. }),
                "{admitted:?}"
            );
            let s = stats().await;
            assert_eq!((s.active, s.total_admitted, s.waiting), (1, 1, 0));
            // Placed by the first attempt: the repeat finds them in line.
            proxy.drop_next_reply();
            let second = VisitorId::random();
            let placed = store.resolve("main", second, anyone()).await.unwrap();
            assert!(
                matches!(placed, Resolution::Waiting { ref place, .. } if place.position == Some(1)),
                "{placed:?}"
            );
            let s = stats().await;
            assert_eq!((s.waiting, s.total_joined), (1, 1));
            // Refused by the join limit (the third join of this client): counted once.
            proxy.drop_next_reply();
            let refused = store
                .resolve("main", VisitorId::random(), anyone())
                .await
                .unwrap();
            assert!(
                matches!(
                    refused,
                    Resolution::Refused {
                        reason: RefusedReason::JoinLimit,
                        ..
                    }
                ),
                "{refused:?}"
            );
            assert_eq!(stats().await.total_refused, 1);
            let key = format!("ar:{{main}}:joins:{}", anyone());
            assert_eq!(server.cli(&["HGET", &key, "n"]).trim(), "3");
            assert_eq!(stats().await.waiting, 1);
        }
    }

    /// On Redis 7 the operations run as the Functions library, not the fallback; a library
    /// gone from the server (FUNCTION FLUSH, a restart without persistence) is loaded again
    /// by the next call, on a single node and on every node of a Cluster.
    #[tokio::test]
    async fn operations_run_as_functions_and_a_lost_library_is_reloaded() {
        for harness in [RedisHarness::single().await, RedisHarness::cluster().await] {
            let store = harness.store();
            let seed = conformance::settings(1.0, 100);
            for room in ["a", "b", "c", "d"] {
                store
                    .open_room(room, &seed, &RoomPolicy::default(), false)
                    .await
                    .unwrap();
            }
            assert!(
                !store.eval_only(),
                "Functions refused on {:?}",
                harness.urls
            );
            let mut conn = store.conn.clone();
            let libraries: Value = redis::cmd("FUNCTION")
                .arg("LIST")
                .query_async(&mut conn)
                .await
                .unwrap();
            let listed = format!("{libraries:?}");
            let name = LIBRARY.prefix.trim_end_matches('_');
            assert!(listed.contains(name), "{name} not in {listed}");
            let () = redis::cmd("FUNCTION")
                .arg("FLUSH")
                .query_async(&mut conn)
                .await
                .unwrap();
            for room in ["a", "b", "c", "d"] {
                let joined = store
                    .resolve(room, VisitorId::random(), anyone())
                    .await
                    .unwrap();
                assert!(
                    matches!(joined, Resolution::Admitted { newly: true }),
                    "{joined:?}"
                );
                assert_eq!(store.stats(room).await.unwrap().active, 1);
            }
            assert!(!store.eval_only());
        }
    }

    /// The per-client maps hold only clients that hold something: once every place and
    /// session is gone, passes leave nothing behind (bounded memory whatever the number of
    /// distinct clients that ever came).
    #[tokio::test]
    async fn client_counts_are_forgotten_at_zero() {
        let server = RedisServer::start();
        let store = frozen(&[server.url()], None).await;
        conformance::fill_client_counts(&store).await;
        let hlen = |key: &str| -> u64 {
            server
                .cli(&["HLEN", &format!("ar:{{main}}:{key}")])
                .trim()
                .parse()
                .unwrap()
        };
        assert_eq!(
            (hlen("places"), hlen("sess"), hlen("scount")),
            (300, 20, 20)
        );
        store.advance_clock_for_tests(Duration::from_secs(61));
        for _ in 0..10 {
            store.admit_pass("main").await.unwrap();
        }
        let stats = store.stats("main").await.unwrap();
        assert_eq!((stats.waiting, stats.active), (0, 0));
        assert_eq!((hlen("places"), hlen("sess"), hlen("scount")), (0, 0, 0));
    }

    /// A server whose certificate the client does not trust is unavailable (a clear
    /// certificate error, quickly), never a hang and never a silent plain-text fallback.
    /// Equal 52-bit lottery scores are ordered by the whole draw hash (the published
    /// rule), not by id. A tie is far too rare to meet by chance, so the test makes some.
    #[tokio::test]
    async fn equal_lottery_scores_follow_the_whole_draw_hash() {
        let server = RedisServer::start();
        let store = frozen(&[server.url()], None).await;
        let at = |secs: u64| {
            std::time::UNIX_EPOCH + Duration::from_millis(conformance::START_MS + secs * 1_000)
        };
        let policy = RoomPolicy {
            lottery: true,
            schedule: crate::queue::Schedule {
                queue_opens_at: Some(at(0)),
                admits_at: Some(at(60)),
                closes_at: None,
            },
            ..Default::default()
        };
        store
            .open_room(
                "main",
                &conformance::settings(1_000.0, 1_000),
                &policy,
                false,
            )
            .await
            .unwrap();
        let entrants: Vec<VisitorId> = (0..12).map(|_| VisitorId::random()).collect();
        for &v in &entrants {
            store.resolve("main", v, anyone()).await.unwrap();
        }
        let mut conn = store.conn.clone();
        for (i, v) in entrants.iter().enumerate() {
            let score = if i < 3 { 3 } else { 7 };
            let changed: i64 = redis::cmd("ZADD")
                .arg("ar:{main}:draw")
                .arg("XX")
                .arg("CH")
                .arg(score)
                .arg(&v.0[..])
                .query_async(&mut conn)
                .await
                .unwrap();
            assert_eq!(changed, 1);
        }
        store.advance_clock_for_tests(Duration::from_secs(61));
        let salt = store.draw("main", false).await.unwrap().salt;
        let mut admitted = Vec::new();
        for _ in 0..3 {
            store.advance_clock_for_tests(Duration::from_secs(1));
            admitted.extend(store.admit_pass("main").await.unwrap().admitted);
        }
        let by_hash = |vs: &[VisitorId]| {
            let mut v: Vec<(DrawHash, VisitorId)> =
                vs.iter().map(|&v| (DrawHash::of(&salt, v), v)).collect();
            v.sort_unstable();
            v.into_iter().map(|(_, v)| v).collect::<Vec<_>>()
        };
        let mut want = by_hash(&entrants[..3]);
        want.extend(by_hash(&entrants[3..]));
        assert_eq!(admitted, want);
    }

    #[tokio::test]
    async fn rediss_with_an_untrusted_ca_fails_clearly() {
        let server_ca = Arc::new(TestCa::new());
        let server = RedisServer::start_tls(server_ca);
        let other = TestCa::new();
        let other = CaFile::read(&other.ca_path()).unwrap();
        let started = std::time::Instant::now();
        let url = server.url().replace("rediss://", "rediss://:secret@");
        let err = RedisStore::connect_with(&[&url], Some(&other))
            .await
            .err()
            .expect("an untrusted certificate is refused");
        let text = err.to_string();
        assert!(matches!(err, StoreError::Unavailable(_)), "{text}");
        assert!(text.to_lowercase().contains("certificate"), "{text}");
        assert!(!text.contains("secret"), "the password is masked: {text}");
        assert!(started.elapsed() < Duration::from_secs(10), "fails fast");
        // Without the CA file, the platform store does not know the test CA either.
        assert!(RedisStore::connect(&[&server.url()]).await.is_err());
    }

    /// `rediss://` to a node that only speaks plain Redis is an error, not a hang.
    #[tokio::test]
    async fn rediss_to_a_plain_server_fails_fast() {
        let server = RedisServer::start();
        let url = server.url().replace("redis://", "rediss://");
        let started = std::time::Instant::now();
        assert!(RedisStore::connect(&[&url]).await.is_err());
        assert!(started.elapsed() < Duration::from_secs(10), "fails fast");
    }

    #[tokio::test]
    async fn a_dead_redis_is_unavailable_quickly() {
        let server = RedisServer::start();
        let store = connect(&[server.url()]).await;
        store
            .open_room(
                "main",
                &conformance::settings(1.0, 1),
                &RoomPolicy::default(),
                false,
            )
            .await
            .unwrap();
        drop(server);
        let started = std::time::Instant::now();
        let err = store
            .resolve("main", VisitorId::random(), anyone())
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5), "failed fast");
        assert!(matches!(
            store.ping().await,
            Err(StoreError::Unavailable(_))
        ));
    }

    /// A room left by a version that kept the line in `line` (id → ticket) and `seen` (id →
    /// last heartbeat) is moved into the chunked layout by the next `open_room`, in order.
    #[tokio::test]
    async fn the_first_layout_is_upgraded_on_open() {
        let server = RedisServer::start();
        let store = frozen(&[server.url()], None).await;
        let seed = conformance::settings(1.0, 100);
        let policy = RoomPolicy::default();
        store
            .open_room("main", &seed, &policy, false)
            .await
            .unwrap();
        store
            .update_settings(
                "main",
                &SettingsPatch {
                    paused: Some(true),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let line: Vec<VisitorId> = (0..300).map(|_| VisitorId::random()).collect();
        let mut conn = store.conn.clone();
        for (i, v) in line.iter().enumerate() {
            // Old tickets: a priority join (negative) first, then join time ms × 1024.
            let ticket = if i == 0 {
                -((conformance::START_MS as i64) * 1024)
            } else {
                (conformance::START_MS as i64 + i as i64) * 1024
            };
            let _: () = redis::pipe()
                .cmd("ZADD")
                .arg("ar:{main}:line")
                .arg(ticket)
                .arg(&v.0[..])
                .cmd("ZADD")
                .arg("ar:{main}:seen")
                .arg(conformance::START_MS)
                .arg(&v.0[..])
                .query_async(&mut conn)
                .await
                .unwrap();
        }
        store
            .open_room("main", &seed, &policy, false)
            .await
            .unwrap();
        assert_eq!(server.cli(&["EXISTS", "ar:{main}:line"]).trim(), "0");
        assert_eq!(server.cli(&["EXISTS", "ar:{main}:seen"]).trim(), "0");
        let states = store.heartbeat("main", &line).await.unwrap();
        for (i, state) in states.iter().enumerate() {
            assert!(
                matches!(state, VisitorState::Waiting(p) if p.position == Some(i as u64 + 1)),
                "visitor {i}: {state:?}"
            );
        }
        assert_eq!(store.stats("main").await.unwrap().waiting, 300);
        let head = store
            .queue("main", QueueQuery::Head { limit: 2 })
            .await
            .unwrap();
        assert_eq!(head[1].joined_at_ms, Some(conformance::START_MS + 1));
        let late = VisitorId::random();
        match store.resolve("main", late, anyone()).await.unwrap() {
            Resolution::Waiting { place, .. } => assert_eq!(place.position, Some(301)),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn bad_data_is_an_error_not_a_panic() {
        let server = RedisServer::start();
        let store = connect(&[server.url()]).await;
        store
            .open_room(
                "main",
                &conformance::settings(1.0, 1),
                &RoomPolicy::default(),
                false,
            )
            .await
            .unwrap();
        server.cli(&["HSET", "ar:{main}:conf", "max_active", "lots"]);
        assert!(matches!(
            store.stats("main").await,
            Err(StoreError::Unavailable(_))
        ));
        // A member that is not a 16-byte id at the head of the line (chunk 0, slot 1).
        server.cli(&["ZADD", "ar:{main}:c:0", "4294967296", "short"]);
        server.cli(&["ZADD", "ar:{main}:chunks", "0", "0"]);
        server.cli(&["HSET", "ar:{main}:state", "n", "1", "ord", "1"]);
        server.cli(&["HSET", "ar:{main}:conf", "max_active", "10"]);
        let err = store.admit_pass("main").await.unwrap_err();
        assert!(err.to_string().contains("16"), "{err}");
    }
}
