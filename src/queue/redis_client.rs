//! The one place a `redis.url` becomes a Redis client, used both by `anteroom check`
//! (config validation) and by the server ([`super::RedisStore::connect_with`]), so the two
//! accept exactly the same URLs.
//!
//! Building a client parses and checks every node URL but connects to nothing, which is
//! what lets `check` run it without a reachable Redis.
//!
//! - `redis://host:port[/db]`: plain TCP.
//! - `rediss://host:port[/db]`: TLS with rustls (see [`crate::tls`]): the platform's CA
//!   store, or only `redis.ca_file`'s certificates when it is set. The server's certificate
//!   must name the host of the URL (SNI and verification use it).
//! - several comma-separated nodes: a Cluster, all `redis://` or all `rediss://` (a Cluster
//!   speaks one or the other on its client ports, and the client uses the first node's
//!   choice for every node it discovers).
//! - `#insecure` (the Redis crate's switch to skip certificate checks) is refused:
//!   certificate checks are never off; trust a private CA with `redis.ca_file` instead.
//!
//! Broken connections, for every user of these connections (the queue store, the abuse
//! registry):
//! - a call whose connection turns out broken is sent once more before it fails
//!   (`once_more!`), if its [`Repeat`] allows: a single-node
//!   [`ConnectionManager`] that meets a broken connection starts its reconnect before it
//!   returns the error, so the second attempt waits for the new connection; a Cluster
//!   connection reconnects the node the same way. A response timeout is not repeated: the
//!   connection is not known broken, and a second wait would double what the request waits;
//! - each connection is PINGed every [`KEEP_ALIVE_EVERY`] by a small task on its own
//!   runtime ([`KeepAlive`]), so one left broken by an outage is found and reconnected when
//!   Redis answers again, not by the first request that uses it. One PING a connection
//!   every half second is nothing next to the traffic, and it never waits in a request's
//!   way (the connection is multiplexed). The task ends with its [`KeepAlive`].

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, TlsCertificates, Value};
use tokio_util::sync::CancellationToken;

use crate::invalid::Invalid;
use crate::tls::CaFile;

/// A client for one node or for a Cluster, not yet connected.
// Made once per start and consumed at once: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub enum RedisClient {
    /// A single Redis node (`redis://` or `rediss://` URL).
    Single(redis::Client),
    /// A Redis Cluster, seeded by one or more node URLs.
    Cluster(ClusterClientBuilder),
}

/// How a connection gives up and retries. The queue store and the abuse registry each
/// choose their own: both must fail fast when Redis is away, so no request waits on it.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// How long to wait for a new connection to be established.
    pub connect: Duration,
    /// How long to wait for the reply to one command before failing it.
    pub response: Duration,
    /// How many times to retry a failed connection before giving up.
    pub retries: usize,
    /// Upper bound of the exponential backoff between reconnection attempts.
    pub max_retry_delay: Duration,
}

impl RedisClient {
    /// Connects: a reconnecting manager for one node (it fails fast and reconnects in the
    /// background), or a Cluster connection.
    pub async fn connect(self, timeouts: Timeouts) -> Result<RedisConn, RedisError> {
        self.connector(timeouts)?.connect().await
    }

    /// What makes connections to these nodes with these timeouts, as often as asked.
    pub fn connector(self, timeouts: Timeouts) -> Result<Connector, RedisError> {
        Ok(match self {
            RedisClient::Single(client) => Connector::Single(client, timeouts),
            RedisClient::Cluster(builder) => {
                let max_wait_ms =
                    u64::try_from(timeouts.max_retry_delay.as_millis()).unwrap_or(u64::MAX);
                Connector::Cluster(
                    builder
                        .connection_timeout(timeouts.connect)
                        .response_timeout(timeouts.response)
                        .retries(u32::try_from(timeouts.retries).unwrap_or(u32::MAX))
                        .max_retry_wait(max_wait_ms)
                        .build()?,
                )
            }
        })
    }
}

/// Makes connections (see [`RedisClient::connector`]): the queue store makes one per
/// serving worker, so each lives on the runtime of the thread that uses it.
#[derive(Clone)]
pub enum Connector {
    /// One node: its client, and the timeouts each new manager uses.
    Single(redis::Client, Timeouts),
    /// A Cluster client, timeouts already built in.
    Cluster(ClusterClient),
}

impl Connector {
    /// One more connection, its background task on the current runtime.
    pub async fn connect(&self) -> Result<RedisConn, RedisError> {
        Ok(match self {
            Connector::Single(client, timeouts) => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(timeouts.connect))
                    .set_response_timeout(Some(timeouts.response))
                    .set_number_of_retries(timeouts.retries)
                    .set_max_delay(timeouts.max_retry_delay);
                RedisConn::Single(ConnectionManager::new_with_config(client.clone(), config).await?)
            }
            Connector::Cluster(client) => RedisConn::Cluster(client.get_async_connection().await?),
        })
    }
}

/// One Redis node through a reconnecting manager, or a Cluster: what every Redis user in
/// anteroom (the queue store, the abuse registry) sends its scripts through.
#[derive(Clone)]
pub enum RedisConn {
    /// One node through a reconnecting connection manager.
    Single(ConnectionManager),
    /// A Redis Cluster connection, routing each key to its slot's node.
    Cluster(ClusterConnection),
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RedisConn::Single(c) => c.req_packed_command(cmd),
            RedisConn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RedisConn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            RedisConn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisConn::Single(c) => c.get_db(),
            RedisConn::Cluster(c) => c.get_db(),
        }
    }
}

/// Whether a call may be sent again after its connection failed (see `once_more!`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repeat {
    /// Running it twice does what running it once does: repeated whenever the connection
    /// broke, even if the first attempt may have run.
    Safe,
    /// Repeated only when the error proves it never reached Redis (the connection was
    /// refused, or a Cluster had no connection for its slot).
    IfUnsent,
}

impl Repeat {
    /// Whether a call that failed with `e` is sent once more.
    pub fn allows(self, e: &RedisError) -> bool {
        match self {
            Repeat::Safe => broken(e),
            Repeat::IfUnsent => never_sent(e),
        }
    }
}

/// Whether `e` is the connection failing (refused, reset, closed, a dead connection task),
/// so that a new connection may do better; not a reply of Redis, and not a timeout.
pub fn broken(e: &RedisError) -> bool {
    !e.is_timeout()
        && (e.is_io_error()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.kind() == ErrorKind::ClusterConnectionNotFound)
}

/// Whether `e` proves the command was never written: the connection was refused (a
/// reconnect that failed, the only kind a request meets once the [`KeepAlive`] has seen
/// the outage), or a Cluster had no connection for the slot. A reset or closed connection
/// does not prove it: the command may have been written, and run, before the connection
/// died.
pub fn never_sent(e: &RedisError) -> bool {
    e.is_connection_refusal() || e.kind() == ErrorKind::ClusterConnectionNotFound
}

/// How often [`KeepAlive`] PINGs its connection.
pub const KEEP_ALIVE_EVERY: Duration = Duration::from_millis(500);

/// A task PINGing one connection every [`KEEP_ALIVE_EVERY`] on the runtime it was started
/// on (the connection's), so a connection broken by an outage reconnects as soon as Redis
/// answers again. A failed PING is followed at once by a second one, which waits for the
/// reconnect the failure started. Stops when dropped.
#[derive(Debug)]
pub struct KeepAlive(CancellationToken);

impl KeepAlive {
    /// Starts PINGing `conn` on the current runtime.
    pub fn start(conn: &RedisConn) -> KeepAlive {
        let stop = CancellationToken::new();
        let (mut conn, stopped) = (conn.clone(), stop.clone());
        async fn ping(conn: &mut RedisConn) -> Result<Value, RedisError> {
            redis::cmd("PING").query_async::<Value>(conn).await
        }
        tokio::spawn(async move {
            stopped
                .run_until_cancelled(async move {
                    loop {
                        tokio::time::sleep(KEEP_ALIVE_EVERY).await;
                        if let Err(e) = ping(&mut conn).await
                            && broken(&e)
                        {
                            let _ = ping(&mut conn).await;
                        }
                    }
                })
                .await;
        });
        KeepAlive(stop)
    }
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// Evaluates `$call` (a future's `.await`, a `Result<_, RedisError>`) and, if it failed
/// because the connection broke and `$repeat` ([`Repeat`]) allows it, evaluates it once
/// more, with `$again` bound to `true` (`false` the first time), so a script can be told it
/// is a repeat. The second attempt goes through the same connection, which began
/// reconnecting when it met the failure (a [`ConnectionManager`] swaps in a reconnect
/// before it returns the error; a Cluster connection reconnects the node). The last
/// attempt's result is the value.
///
/// A macro rather than a function taking a closure: the call borrows the connection and
/// its arguments, and an async closure's future of a borrowed argument cannot be proven
/// `Send` for every lifetime, which the store's `async_trait` futures must be.
macro_rules! once_more {
    ($repeat:expr, |$again:ident| $call:expr) => {{
        let $again = false;
        match $call {
            Err(e) if $crate::queue::redis_client::Repeat::allows($repeat, &e) => {
                let $again = true;
                $call
            }
            done => done,
        }
    }};
}
pub(crate) use once_more;

/// Builds the client for `nodes` (each a URL), trusting `ca` for `rediss://` if given.
/// The error names the node (password masked) and what is wrong with it.
pub fn build(nodes: &[&str], ca: Option<&CaFile>) -> Result<RedisClient, Invalid> {
    let Some(first) = nodes.first() else {
        return Err(Invalid::new("no Redis node given"));
    };
    let tls = first.starts_with("rediss://");
    for node in nodes {
        let shown = redact_url(node);
        if node.starts_with("rediss://") != tls {
            return Err(Invalid(format!(
                "{shown}: every node must use the same scheme (all redis:// or all rediss://)"
            )));
        }
        if node.contains('#') {
            return Err(Invalid(format!(
                "{shown}: URL fragments such as #insecure are not accepted; certificate \
                 checks cannot be turned off (trust a private CA with redis.ca_file)"
            )));
        }
        // The Redis crate's own parser: what it refuses here it would refuse at connect.
        redis::IntoConnectionInfo::into_connection_info(*node)
            .map_err(|e| Invalid(format!("{shown}: {e}")))?;
    }
    if ca.is_some() && !tls {
        return Err(Invalid::new(
            "redis.ca_file is set but redis.url is not rediss:// (the CA file is only used \
             for TLS)",
        ));
    }
    if tls {
        crate::tls::install_crypto_provider();
    }
    let certs = || TlsCertificates {
        client_tls: None,
        root_cert: ca.map(|ca| ca.pem.clone()),
    };
    let shown = || redact_url(&nodes.join(","));
    if nodes.len() == 1 {
        let client = if tls {
            redis::Client::build_with_tls(*first, certs())
        } else {
            redis::Client::open(*first)
        }
        .map_err(|e| Invalid(format!("{}: {e}", shown())))?;
        return Ok(RedisClient::Single(client));
    }
    let builder = || {
        let builder = ClusterClientBuilder::new(nodes.to_vec());
        if tls { builder.certs(certs()) } else { builder }
    };
    // Built once here to have the crate check the node list as a whole; the caller adds
    // its timeouts to a fresh builder and builds that.
    let _: ClusterClient = builder()
        .build()
        .map_err(|e| Invalid(format!("{}: {e}", shown())))?;
    Ok(RedisClient::Cluster(builder()))
}

/// `redis://user:pass@host/0` → `redis://user:***@host/0` (each comma-separated node).
pub fn redact_url(url: &str) -> String {
    url.split(',')
        .map(|node| {
            let Some((scheme, rest)) = node.split_once("://") else {
                return node.to_string();
            };
            let (authority, path) = match rest.find('/') {
                Some(i) => rest.split_at(i),
                None => (rest, ""),
            };
            match authority.rsplit_once('@') {
                Some((userinfo, host)) => {
                    let user = userinfo.split(':').next().unwrap_or("");
                    let redacted = if userinfo.contains(':') {
                        format!("{user}:***")
                    } else {
                        "***".to_string()
                    };
                    format!("{scheme}://{redacted}@{host}{path}")
                }
                None => node.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(nodes: &[&str]) -> String {
        build(nodes, None).err().expect("refused").into()
    }

    #[test]
    fn accepts_what_the_server_can_use() {
        for nodes in [
            &["redis://localhost:6379"][..],
            &["rediss://:secret@redis.example:6380/2"],
            &["rediss://a:6380", "rediss://b:6380", "rediss://c:6380"],
            &["redis://a:7000", "redis://b:7000"],
        ] {
            assert!(build(nodes, None).is_ok(), "{nodes:?}");
        }
    }

    #[test]
    fn refuses_clearly_and_never_shows_the_password() {
        let e = err(&["rediss://:secret@a:6380#insecure"]);
        assert!(e.contains("#insecure"), "{e}");
        assert!(!e.contains("secret"), "{e}");
        let e = err(&["rediss://:secret@a:6380", "redis://b:6379"]);
        assert!(e.contains("same scheme"), "{e}");
        assert!(!e.contains("secret"), "{e}");
        let e = err(&["redis://:secret@a:notaport"]);
        assert!(e.contains("a:notaport"), "{e}");
        assert!(!e.contains("secret"), "{e}");
    }

    #[test]
    fn a_ca_file_needs_rediss() {
        let ca = anteroom_fixtures::TestCa::new();
        let ca = CaFile::read(&ca.ca_path()).unwrap();
        let e = build(&["redis://a:6379"], Some(&ca)).err().unwrap();
        assert!(e.0.contains("redis.ca_file"), "{e}");
        assert!(build(&["rediss://a:6380"], Some(&ca)).is_ok());
    }
}
