//! The Redis store: every room's line, bucket, sessions, settings and counters in Redis (or
//! Valkey, or a Redis Cluster), so any number of replicas share one queue, one rate and one
//! concurrency budget, and any replica can be restarted mid-spike.
//!
//! Every operation is one Lua script (the `.lua` files in `lua/`, each prefixed with
//! `common.lua` at build time) called by hash (EVALSHA, loaded on NOSCRIPT), so each is one
//! atomic step on one room. Time is the server's `TIME`, read once per script, never a
//! replica's clock. Every key of a room carries the hash tag `{room}`, so a room lives in one
//! Cluster slot; rooms spread over the shards.
//!
//! Keys of room `main` (see `lua/common.lua` for the fields):
//! `ar:{main}:conf` (runtime settings), `ar:{main}:state` (bucket, ticket counter, counters,
//! downtime bookkeeping), `ar:{main}:line` (ZSET id → ticket), `ar:{main}:seen` (ZSET id →
//! last heartbeat), `ar:{main}:active` (ZSET id → last activity), `ar:{main}:draw` (ZSET
//! id → lottery score, during a draw), `ar:{main}:joins:<client>` (one client's join-limit
//! window, expiring with it). Members are the raw 16-byte visitor ids.
//!
//! Outages: every connection, I/O or timeout error is [`StoreError::Unavailable`] (admission
//! fails closed). The single-node connection is a [`ConnectionManager`] with short timeouts
//! that reconnects in the background, so a dead Redis answers "unavailable" within a couple
//! of seconds and recovery needs no restart. Time the store was unreachable (or every replica
//! was down) is forgiven in the reaping clock, so an outage never abandons the line.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Script, Value};

use super::{
    ClientKey, PassReport, Phase, Place, QueueStore, Resolution, RoomPolicy, RoomSettings,
    RoomStats, Seeded, SettingsPatch, StoreError, StoreResult, VisitorId, VisitorState,
};
use crate::clock::ms;
use crate::queue::memory::REAP_BUDGET;

/// How long to wait for a connection or a reply before calling the store unavailable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(3);

macro_rules! script {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("lua/common.lua"),
                "\n",
                include_str!(concat!("lua/", $file))
            ))
        })
    };
}

static OPEN_ROOM: LazyLock<Script> = script!("open_room.lua");
static RESOLVE: LazyLock<Script> = script!("resolve.lua");
static HEARTBEAT: LazyLock<Script> = script!("heartbeat.lua");
static ADMIT_PASS: LazyLock<Script> = script!("admit_pass.lua");
static STATS: LazyLock<Script> = script!("stats.lua");
static UPDATE_SETTINGS: LazyLock<Script> = script!("update_settings.lua");
static FLUSH: LazyLock<Script> = script!("flush.lua");

/// One Redis node through a reconnecting manager, or a Cluster.
#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

pub struct RedisStore {
    conn: Conn,
    /// Added to the server's `TIME` in every script. Always 0 in production; tests move it
    /// forward because Redis time cannot be paused.
    offset_ms: AtomicU64,
    /// Tests only: `offset_ms` is a frozen absolute time instead of an offset, so time
    /// moves only when the test says (as tokio's paused clock does for the embedded store).
    frozen: AtomicBool,
    /// Set when a call failed as unavailable; the next successful pass forgives the time
    /// since the room's last pass as downtime.
    recovering: AtomicBool,
    /// For messages: the node list with passwords masked.
    describe: String,
}

fn unavailable(e: redis::RedisError) -> StoreError {
    StoreError::Unavailable(format!("redis: {e}"))
}

fn bad_reply(what: &str, detail: impl std::fmt::Debug) -> StoreError {
    StoreError::Unavailable(format!("redis: unexpected reply to {what}: {detail:?}"))
}

impl RedisStore {
    /// Connects to one node (`redis://…`) or, with several node URLs, to a Cluster.
    /// `rediss://` is refused: this build carries no TLS client.
    pub async fn connect(nodes: &[&str]) -> StoreResult<Self> {
        if nodes.is_empty() {
            return Err(StoreError::Invalid {
                field: "redis.url",
                reason: "no Redis node given".to_owned(),
            });
        }
        if let Some(tls) = nodes.iter().find(|n| n.starts_with("rediss://")) {
            return Err(StoreError::Invalid {
                field: "redis.url",
                reason: format!(
                    "{}: rediss:// (TLS) is not supported by this build; use redis:// on a \
                     private network or a TLS-terminating sidecar such as stunnel",
                    crate::config::redact_url(tls)
                ),
            });
        }
        let describe = nodes
            .iter()
            .map(|n| crate::config::redact_url(n))
            .collect::<Vec<_>>()
            .join(",");
        let fail = |e: redis::RedisError| {
            StoreError::Unavailable(format!("redis: cannot connect to {describe}: {e}"))
        };
        let conn = if nodes.len() == 1 {
            let client = redis::Client::open(nodes[0]).map_err(|e| StoreError::Invalid {
                field: "redis.url",
                reason: e.to_string(),
            })?;
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(CONNECT_TIMEOUT))
                .set_response_timeout(Some(RESPONSE_TIMEOUT))
                .set_number_of_retries(2)
                .set_max_delay(Duration::from_secs(1));
            Conn::Single(
                ConnectionManager::new_with_config(client, config)
                    .await
                    .map_err(fail)?,
            )
        } else {
            let client = redis::cluster::ClusterClientBuilder::new(nodes.to_vec())
                .connection_timeout(CONNECT_TIMEOUT)
                .response_timeout(RESPONSE_TIMEOUT)
                .retries(2)
                .max_retry_wait(500)
                .build()
                .map_err(|e| StoreError::Invalid {
                    field: "redis.url",
                    reason: e.to_string(),
                })?;
            Conn::Cluster(client.get_async_connection().await.map_err(fail)?)
        };
        Ok(RedisStore {
            conn,
            offset_ms: AtomicU64::new(0),
            frozen: AtomicBool::new(false),
            recovering: AtomicBool::new(false),
            describe,
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

    fn keys(room: &str) -> [String; 6] {
        ["conf", "state", "line", "seen", "active", "draw"].map(|k| format!("ar:{{{room}}}:{k}"))
    }

    /// The key of one client's join-limit window in `room` (same slot as the room).
    fn joins_key(room: &str, client: ClientKey) -> String {
        format!("ar:{{{room}}}:joins:{client}")
    }

    /// Runs one script on `room` with `args` after the clock offset.
    async fn call(
        &self,
        script: &Script,
        room: &str,
        args: impl FnOnce(&mut redis::ScriptInvocation<'_>),
    ) -> StoreResult<Value> {
        self.call_with(script, room, None, args).await
    }

    /// [`RedisStore::call`] with one more key after the room's.
    async fn call_with(
        &self,
        script: &Script,
        room: &str,
        extra_key: Option<String>,
        args: impl FnOnce(&mut redis::ScriptInvocation<'_>),
    ) -> StoreResult<Value> {
        let mut invocation = script.prepare_invoke();
        for key in Self::keys(room).into_iter().chain(extra_key) {
            invocation.key(key);
        }
        invocation.arg(self.clock_arg());
        args(&mut invocation);
        let mut conn = self.conn.clone();
        match invocation.invoke_async::<Value>(&mut conn).await {
            Ok(value) => {
                if let Value::Array(items) = &value
                    && let [Value::Int(-1)] = items.as_slice()
                {
                    return Err(StoreError::UnknownRoom(room.to_owned()));
                }
                Ok(value)
            }
            Err(e) => {
                self.recovering.store(true, Ordering::SeqCst);
                Err(unavailable(e))
            }
        }
    }
}

fn ints(what: &str, value: Value) -> StoreResult<Vec<i64>> {
    redis::from_redis_value::<Vec<i64>>(value.clone()).map_err(|_| bad_reply(what, value))
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
                    .arg(&salt[..]);
            })
            .await?;
        match ints("open_room", reply)?.as_slice() {
            [0] => Ok(Seeded::Fresh),
            [1] => Ok(Seeded::Unchanged),
            [2] => Ok(Seeded::KeptLive(self.stats(room).await?.settings)),
            [3] => Ok(Seeded::Reseeded),
            other => Err(bad_reply("open_room", other)),
        }
    }

    async fn resolve(
        &self,
        room: &str,
        visitor: VisitorId,
        client: ClientKey,
    ) -> StoreResult<Resolution> {
        let reply = self
            .call_with(&RESOLVE, room, Some(Self::joins_key(room, client)), |inv| {
                inv.arg(&visitor.0[..]);
            })
            .await?;
        match ints("resolve", reply)?.as_slice() {
            &[1, newly] => Ok(Resolution::Admitted { newly: newly == 1 }),
            &[2, position, waiting, paused, joined, phase] => Ok(Resolution::Waiting {
                place: place(position, waiting, paused, phase)?,
                joined: joined == 1,
            }),
            &[3, retry_after_ms] => Ok(Resolution::Refused {
                retry_after: Duration::from_millis(retry_after_ms.max(1) as u64),
            }),
            [4] => Ok(Resolution::NotOpen),
            [5] => Ok(Resolution::Closed),
            other => Err(bad_reply("resolve", other)),
        }
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
        let Ok::<[Value; 3], _>([admitted, abandoned, expired]) = parts.try_into() else {
            return Err(bad_reply("admit_pass", "not three lists"));
        };
        Ok(PassReport {
            admitted: ids("the admitted list", admitted)?,
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

    async fn ping(&self) -> StoreResult<()> {
        let mut conn = self.conn.clone();
        match redis::cmd("PING").query_async::<String>(&mut conn).await {
            Ok(_) => Ok(()),
            Err(e) => {
                self.recovering.store(true, Ordering::SeqCst);
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
    use crate::testing::{RedisCluster, RedisServer};
    use std::sync::Arc;

    /// A Redis (single node or cluster) started for one test, and a store on it.
    struct RedisHarness {
        store: Arc<RedisStore>,
        urls: Vec<String>,
        _server: Option<RedisServer>,
        _cluster: Option<RedisCluster>,
    }

    impl RedisHarness {
        async fn single() -> Self {
            let server = RedisServer::start();
            let urls = vec![server.url()];
            let store = Arc::new(frozen(&urls).await);
            RedisHarness {
                store,
                urls,
                _server: Some(server),
                _cluster: None,
            }
        }

        async fn cluster() -> Self {
            let cluster = RedisCluster::start();
            let urls = cluster.urls();
            let store = Arc::new(frozen(&urls).await);
            RedisHarness {
                store,
                urls,
                _server: None,
                _cluster: Some(cluster),
            }
        }
    }

    /// A store whose clock stands still until the test advances it.
    async fn frozen(urls: &[String]) -> RedisStore {
        let store = connect(urls).await;
        store.freeze_clock_for_tests(conformance::START_MS);
        store
    }

    async fn connect(urls: &[String]) -> RedisStore {
        let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
        RedisStore::connect(&nodes).await.unwrap()
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
        async fn reopen(&mut self, downtime: Duration) {
            let at = self.store.clock_for_tests() + ms(downtime);
            let store = connect(&self.urls).await;
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

    #[tokio::test]
    async fn rediss_is_refused_clearly() {
        let err = RedisStore::connect(&["rediss://:secret@example:6380"])
            .await
            .err()
            .unwrap();
        let text = err.to_string();
        assert!(text.contains("rediss:// (TLS) is not supported"), "{text}");
        assert!(!text.contains("secret"), "the password is masked: {text}");
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
        server.cli(&["ZADD", "ar:{main}:line", "1", "short"]);
        server.cli(&["HSET", "ar:{main}:conf", "max_active", "10"]);
        let err = store.admit_pass("main").await.unwrap_err();
        assert!(err.to_string().contains("16"), "{err}");
    }
}
