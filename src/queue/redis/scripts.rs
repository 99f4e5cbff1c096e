//! The operations as Lua scripts, and how one runs: every operation is one script of
//! `src/queue/lua/` (sharing `common.lua`), one atomic step on one room. They run as one
//! Redis Functions library ([`Library`]), loaded once and called with `FCALL`; where
//! Functions are refused, each script runs as its own `EVALSHA` script instead
//! ([`RedisStore::eval`]). Each operation also says whether a call of it may be sent again
//! after a broken connection ([`Op::repeat`]; why each is safe: [`super::calls`]).

use std::sync::LazyLock;
use std::sync::atomic::Ordering;

use redis::{Script, Value};

use super::RedisStore;
use crate::queue::redis_client::{RedisConn, Repeat};

const COMMON: &str = include_str!("../lua/common.lua");

/// One operation: a script of `lua/`, a function of the [`Library`] or, without Functions,
/// an `EVAL` script of its own.
pub(super) struct Op {
    name: &'static str,
    body: &'static str,
    /// Function flags: `no-writes` for a script that only reads, so it still runs when
    /// Redis is out of memory, as a read-only `EVAL` script does.
    read_only: bool,
    /// Whether a call that met a broken connection is sent again (see [`super::calls`]).
    pub(super) repeat: Repeat,
    /// Whether the script takes one more argument, `1` on a repeat and `0` on a first
    /// attempt (`resolve`, which counts no refusal on a repeat).
    pub(super) marks_repeat: bool,
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
            body: include_str!(concat!("../lua/", $name, ".lua")),
            read_only: $read_only,
            repeat: $repeat,
            marks_repeat: $marks,
            eval: LazyLock::new(|| {
                Script::new(concat!(
                    include_str!("../lua/common.lua"),
                    "\nbegin(KEYS, ARGV)\n",
                    include_str!(concat!("../lua/", $name, ".lua"))
                ))
            }),
            function: LazyLock::new(|| format!("{}{}", LIBRARY.prefix, $name)),
        }
    };
}

// Which calls are repeated after a broken connection, and why each is safe: [`super::calls`].
pub(super) static OPEN_ROOM: Op = op!("open_room", Repeat::IfUnsent);
pub(super) static RESOLVE: Op = op!("resolve", Repeat::Safe, read_only: false, marks_repeat: true);
pub(super) static HEARTBEAT: Op = op!("heartbeat", Repeat::Safe);
pub(super) static ADMIT_PASS: Op = op!("admit_pass", Repeat::IfUnsent);
pub(super) static STATS: Op = op!("stats", Repeat::Safe, read_only: true, marks_repeat: false);
pub(super) static UPDATE_SETTINGS: Op = op!("update_settings", Repeat::Safe);
pub(super) static FLUSH: Op = op!("flush", Repeat::IfUnsent);
pub(super) static QUEUE: Op = op!("queue", Repeat::Safe);
pub(super) static FRONT: Op = op!("front", Repeat::IfUnsent);
/// `touch` is safe to repeat; `end` is called as [`Repeat::IfUnsent`].
pub(super) static SESSION: Op = op!("session", Repeat::Safe);
pub(super) static GRANT: Op = op!("grant", Repeat::Safe);
pub(super) static DRAW: Op = op!("draw", Repeat::Safe);
pub(super) static ADAPTIVE: Op = op!("adaptive", Repeat::Safe);

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
pub(super) struct Library {
    /// `FUNCTION LOAD`'s argument.
    source: String,
    /// `anteroom_<hash>_`: an operation's function is this and its name.
    pub(super) prefix: String,
}

pub(super) static LIBRARY: LazyLock<Library> = LazyLock::new(|| {
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
pub(super) struct Args(Vec<Vec<u8>>);

impl Args {
    pub(super) fn arg<T: redis::ToRedisArgs>(&mut self, arg: T) -> &mut Self {
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

impl RedisStore {
    /// `op` as its own `EVALSHA` script (loaded on NOSCRIPT), `mark` its last argument.
    pub(super) async fn eval(
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
    pub(super) async fn fcall(
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
