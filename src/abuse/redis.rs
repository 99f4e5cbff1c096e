//! The abuse registry's Redis side: strikes, bans and the ban log shared by every replica,
//! through one script (`abuse.lua`) whose keys all carry the hash tag `{abuse}`.
//!
//! Broken connections are handled as for the queue store (see
//! [`crate::queue::redis_client`]): the connection is PINGed by a [`KeepAlive`], and a call
//! that meets a broken one is sent once more when that is safe ([`Repeat`]): reads (`log`,
//! the version, the ban set) after any broken connection; `strike`, `ban`, `unban` and
//! `sweep` only when nothing was sent (a second strike, ban log entry or sweep report must
//! not come of one call, and a strike or a sweep lost to an outage is only a strike or a
//! tick).

use std::net::IpAddr;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ipnet::IpNet;
use redis::{Script, Value};

use super::{AbuseError, AbusePolicy, Ban, BanSource, LOG_CAP, LogEntry, client_ip};
use crate::clock::ms;
use crate::queue::redis_client::{self, KeepAlive, RedisConn, Repeat, Timeouts, once_more};
use crate::tls::CaFile;

static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("abuse.lua")));

const K_BANS: &str = "ar:{abuse}:bans";
const K_EXPIRY: &str = "ar:{abuse}:expiry";
const K_LOG: &str = "ar:{abuse}:log";
const K_SEQ: &str = "ar:{abuse}:seq";
const K_VER: &str = "ar:{abuse}:ver";
const K_EVICT: &str = "ar:{abuse}:evict";
/// The stream of counted strikes (client, new total, time) every replica reads each tick.
const K_STRUCK: &str = "ar:{abuse}:struck";

/// Entries the struck stream keeps (trimmed approximately): enough for a replica to catch
/// up after a few seconds' outage under a heavy attack; a replica further behind only
/// misses totals, which its own next strike of the client brings back.
const STRUCK_CAP: usize = 100_000;
/// Entries read per call of [`RedisAbuse::struck_after`].
const STRUCK_PAGE: usize = 1_000;

/// Short timeouts: a strike or a refresh must fail fast when Redis is away, and the
/// request path never waits on either.
const TIMEOUTS: Timeouts = Timeouts {
    connect: Duration::from_secs(1),
    response: Duration::from_secs(1),
    retries: 1,
    max_retry_delay: Duration::from_millis(300),
};
/// Expired bans removed per tick; more wait for the next one.
const SWEEP_BUDGET: usize = 500;

/// What the strike script did.
#[derive(Debug)]
pub(super) enum StrikeReply {
    Counted(u64),
    AlreadyBanned,
    /// The new ban, and the bans it displaced at `abuse.max_bans`.
    Banned(Ban, Vec<Ban>),
    /// `abuse.max_bans` operator bans leave no room.
    Full,
}

/// One counted strike as the struck stream tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Struck {
    /// The client struck (its address: `client_ip`).
    pub client: IpAddr,
    /// The client's strike weight within the window, that strike included.
    pub total: u64,
    /// When (unix ms, the striking replica's clock).
    pub at: u64,
}

/// One read of the struck stream.
#[derive(Debug, Default)]
pub(super) struct StruckPage {
    /// The strikes read, oldest first.
    pub strikes: Vec<Struck>,
    /// The id of the last entry read (readable or not): where the next read starts
    /// after. `None` when nothing was new.
    pub last: Option<String>,
    /// Whether the page was full, so more may wait.
    pub more: bool,
}

/// What the ban script did.
#[derive(Debug)]
pub(super) enum BanReply {
    /// Stored, displacing these at `abuse.max_bans`.
    Stored(Ban, Vec<Ban>),
    /// A longer ban on the target is kept (`extend` only).
    Kept,
    /// `abuse.max_bans` operator bans leave no room.
    Full,
}

/// The connection to the shared abuse state (one node or a Cluster).
#[derive(Clone)]
pub struct RedisAbuse {
    conn: RedisConn,
    /// PINGs `conn` while any clone of this lives.
    _keep_alive: std::sync::Arc<KeepAlive>,
    /// Unique per process, so two replicas' strikes in the same millisecond stay distinct.
    nonce_prefix: u64,
    nonce: std::sync::Arc<AtomicU64>,
}

fn redis_err(e: redis::RedisError) -> AbuseError {
    AbuseError::Redis(e.to_string())
}

fn bad(what: &str, detail: impl std::fmt::Debug) -> AbuseError {
    AbuseError::Redis(format!("unexpected reply to {what}: {detail:?}"))
}

fn parse<T: serde::de::DeserializeOwned>(what: &str, json: &str) -> Result<T, AbuseError> {
    serde_json::from_str(json).map_err(|e| bad(what, format!("{e} in {json}")))
}

impl RedisAbuse {
    /// Connects to one node or, with several URLs, to a Cluster; the URLs (`rediss://`
    /// with `ca` included) are read by [`crate::queue::redis_client::build`], exactly as
    /// for the queue store.
    pub async fn connect(nodes: &[&str], ca: Option<&CaFile>) -> Result<Self, AbuseError> {
        let conn = redis_client::build(nodes, ca)
            .map_err(|e| AbuseError::Redis(e.into()))?
            .connect(TIMEOUTS)
            .await
            .map_err(redis_err)?;
        let mut seed = [0u8; 8];
        let _ = getrandom::fill(&mut seed);
        Ok(RedisAbuse {
            _keep_alive: std::sync::Arc::new(KeepAlive::start(&conn)),
            conn,
            nonce_prefix: u64::from_le_bytes(seed),
            nonce: Default::default(),
        })
    }

    async fn call(
        &self,
        repeat: Repeat,
        op: &str,
        now: u64,
        extra_keys: &[String],
        args: &[String],
    ) -> Result<Value, AbuseError> {
        let mut inv = SCRIPT.prepare_invoke();
        for key in [K_BANS, K_EXPIRY, K_LOG, K_SEQ, K_VER, K_EVICT] {
            inv.key(key);
        }
        for key in extra_keys {
            inv.key(key.as_str());
        }
        inv.arg(op).arg(now.to_string()).arg(LOG_CAP.to_string());
        for a in args {
            inv.arg(a.as_str());
        }
        let mut conn = self.conn.clone();
        once_more!(repeat, |_again| inv.invoke_async::<Value>(&mut conn).await).map_err(redis_err)
    }

    pub(super) async fn strike(
        &self,
        policy: &AbusePolicy,
        target: IpNet,
        weight: u32,
        reason: &str,
        now: u64,
    ) -> Result<StrikeReply, AbuseError> {
        let t = target.to_string();
        let keys = [
            format!("ar:{{abuse}}:strikes:{t}"),
            format!("ar:{{abuse}}:repeat:{t}"),
            K_STRUCK.to_owned(),
        ];
        let nonce = format!(
            "{:x}-{:x}",
            self.nonce_prefix,
            self.nonce.fetch_add(1, Ordering::Relaxed)
        );
        let args = [
            t,
            weight.to_string(),
            ms(policy.window).to_string(),
            policy.strikes.to_string(),
            ms(policy.cooldown).to_string(),
            ms(policy.max_cooldown).to_string(),
            json_string(reason),
            nonce,
            policy.max_bans.to_string(),
            STRUCK_CAP.to_string(),
        ];
        let reply = self
            .call(Repeat::IfUnsent, "strike", now, &keys, &args)
            .await?;
        let Value::Array(items) = &reply else {
            return Err(bad("strike", reply));
        };
        match items.as_slice() {
            [Value::Int(1)] => Ok(StrikeReply::AlreadyBanned),
            [Value::Int(0), Value::Int(total)] => {
                Ok(StrikeReply::Counted(u64::try_from(*total).unwrap_or(0)))
            }
            [Value::Int(2), json, displaced @ ..] => Ok(StrikeReply::Banned(
                parse("strike", &text(json)?)?,
                bans("strike", displaced)?,
            )),
            [Value::Int(3)] => Ok(StrikeReply::Full),
            _ => Err(bad("strike", reply)),
        }
    }

    /// Stores `ban` (its seq is assigned here) within `max_bans`. `replace`: an admin's,
    /// replacing any ban on the target; otherwise a longer active ban is kept.
    pub(super) async fn ban(
        &self,
        ban: &Ban,
        now: u64,
        replace: bool,
        max_bans: usize,
    ) -> Result<BanReply, AbuseError> {
        let args = [
            ban.target.to_string(),
            source_str(ban.source).to_owned(),
            json_string(&ban.reason),
            ban.until_ms.map(|u| u.to_string()).unwrap_or_default(),
            if replace { "replace" } else { "extend" }.to_owned(),
            max_bans.to_string(),
        ];
        let reply = self.call(Repeat::IfUnsent, "ban", now, &[], &args).await?;
        let Value::Array(items) = &reply else {
            return Err(bad("ban", reply));
        };
        match items.as_slice() {
            [Value::Int(0)] => Ok(BanReply::Kept),
            [Value::Int(3)] => Ok(BanReply::Full),
            [Value::Int(1), json, displaced @ ..] => Ok(BanReply::Stored(
                parse("ban", &text(json)?)?,
                bans("ban", displaced)?,
            )),
            _ => Err(bad("ban", reply)),
        }
    }

    pub(super) async fn unban(&self, target: IpNet, now: u64) -> Result<Option<Ban>, AbuseError> {
        match self
            .call(Repeat::IfUnsent, "unban", now, &[], &[target.to_string()])
            .await?
        {
            Value::Nil => Ok(None),
            other => Ok(Some(parse("unban", &text(&other)?)?)),
        }
    }

    /// Removes the bans that ended by `now`; returns those this call removed.
    pub(super) async fn sweep(&self, now: u64) -> Result<Vec<Ban>, AbuseError> {
        let reply = self
            .call(
                Repeat::IfUnsent,
                "sweep",
                now,
                &[],
                &[SWEEP_BUDGET.to_string()],
            )
            .await?;
        list(&reply)?.iter().map(|j| parse("sweep", j)).collect()
    }

    pub(super) async fn log_page(
        &self,
        cursor: Option<u64>,
        count: usize,
    ) -> Result<Vec<LogEntry>, AbuseError> {
        let args = [
            cursor.map(|c| c.to_string()).unwrap_or_default(),
            count.to_string(),
        ];
        // `now` is unused by this op; 0 keeps the argument list uniform.
        let reply = self.call(Repeat::Safe, "log", 0, &[], &args).await?;
        list(&reply)?.iter().map(|j| parse("log", j)).collect()
    }

    /// Up to [`STRUCK_PAGE`] counted strikes recorded after stream id `after` (any
    /// replica's), oldest first. `after` may be `<unix ms>-0` for "since then". An entry
    /// this version cannot read (a newer replica's) is passed over, not an error.
    pub(super) async fn struck_after(&self, after: &str) -> Result<StruckPage, AbuseError> {
        let mut conn = self.conn.clone();
        let reply: Value = once_more!(Repeat::Safe, |_again| {
            redis::cmd("XRANGE")
                .arg(K_STRUCK)
                .arg(format!("({after}"))
                .arg("+")
                .arg("COUNT")
                .arg(STRUCK_PAGE)
                .query_async(&mut conn)
                .await
        })
        .map_err(redis_err)?;
        let Value::Array(entries) = &reply else {
            return Err(bad("XRANGE", reply));
        };
        let mut page = StruckPage {
            more: entries.len() >= STRUCK_PAGE,
            ..StruckPage::default()
        };
        for entry in entries {
            // An entry of another shape is passed over (it still moves the cursor when it
            // has an id), so one odd entry cannot stop every later read.
            let Value::Array(parts) = entry else { continue };
            let Some(id) = parts.first().and_then(|id| text(id).ok()) else {
                continue;
            };
            page.last = Some(id);
            if let Some(Value::Array(fields)) = parts.get(1)
                && let Some(struck) = struck(fields)
            {
                page.strikes.push(struck);
            }
        }
        Ok(page)
    }

    /// The shared ban set's version (0 before the first ban ever).
    pub(super) async fn version(&self) -> Result<u64, AbuseError> {
        let mut conn = self.conn.clone();
        let v: Option<u64> = once_more!(Repeat::Safe, |_again| {
            redis::cmd("GET").arg(K_VER).query_async(&mut conn).await
        })
        .map_err(redis_err)?;
        Ok(v.unwrap_or(0))
    }

    pub(super) async fn all_bans(&self) -> Result<Vec<Ban>, AbuseError> {
        let mut conn = self.conn.clone();
        let all: Vec<(String, String)> = once_more!(Repeat::Safe, |_again| {
            redis::cmd("HGETALL")
                .arg(K_BANS)
                .query_async(&mut conn)
                .await
        })
        .map_err(redis_err)?;
        // One unreadable entry (a newer replica's format) must not drop every other ban.
        Ok(all
            .into_iter()
            .filter_map(|(_, json)| serde_json::from_str(&json).ok())
            .collect())
    }
}

/// A struck entry's fields (`c`, `t`, `at`, in any order); `None` when one is missing or
/// unreadable.
fn struck(fields: &[Value]) -> Option<Struck> {
    let (mut client, mut total, mut at) = (None, None, None);
    for pair in fields.chunks_exact(2) {
        let value = text(&pair[1]).ok()?;
        match text(&pair[0]).ok()?.as_str() {
            "c" => client = value.parse::<IpNet>().ok().map(|n| client_ip(n.addr())),
            "t" => total = value.parse().ok(),
            "at" => at = value.parse().ok(),
            _ => {}
        }
    }
    Some(Struck {
        client: client?,
        total: total?,
        at: at?,
    })
}

fn source_str(source: BanSource) -> &'static str {
    source.as_str()
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

fn text(v: &Value) -> Result<String, AbuseError> {
    match v {
        Value::BulkString(b) => Ok(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Ok(s.clone()),
        other => Err(bad("script", other)),
    }
}

fn bans(what: &str, items: &[Value]) -> Result<Vec<Ban>, AbuseError> {
    items.iter().map(|j| parse(what, &text(j)?)).collect()
}

fn list(v: &Value) -> Result<Vec<String>, AbuseError> {
    match v {
        Value::Array(items) => items.iter().map(text).collect(),
        Value::Nil => Ok(Vec::new()),
        other => Err(bad("script", other)),
    }
}
