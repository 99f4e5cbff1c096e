//! The validated configuration every other module reads.
//!
//! Sources, highest precedence first: command-line flags, `ANTEROOM_*` environment
//! variables, the YAML file, built-in defaults. [`load()`] merges them and validates
//! the result into a [`Config`]; every error names the offending key as a dotted path
//! (`rooms.main.rate`) and, when the value came from the file, its line.
//!
//! Validation calls into the modules that own a format (`queue::redis` for Redis
//! URLs, `events` for Kafka properties, `tls` for CA files, `fairness` for the admission
//! key, `abuse` for its section), and those modules read their part of [`Config`]. That
//! back-and-forth is on purpose: `anteroom check` and the server then accept exactly the
//! same inputs, parsed by the same code, instead of a second, drifting copy of each rule
//! here. It is the only two-way dependency between modules; none of those modules import
//! `gate` or the request path.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::queue::{RoomPolicy, RoomSettings};

mod describe;
pub mod events;
mod file;
mod init;
pub mod live;
mod load;
mod secrets;
mod sections;
mod validate;
mod values;

pub use crate::events::KafkaConfig;
pub use crate::http::pages::{PageFile, WaitingPageConfig};
pub use crate::identity::normalize_host;
pub use crate::queue::Schedule;
pub use describe::redact_url;
pub use init::init_yaml;
pub use load::{Generated, Loaded, Overrides, from_yaml_str, load};
pub use secrets::ADMIN_TOKEN_NAME;
pub use values::{MAX_DURATION, TimeError, parse_listen, parse_rfc3339};

/// The whole validated configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// Address to listen on. `:8080` in the file means `0.0.0.0:8080`.
    pub listen: SocketAddr,
    /// How often an admission pass runs per room (≥ 10 ms).
    pub admit_interval: Duration,
    /// HMAC key for the visitor cookie (≥ 32 bytes).
    pub cookie_secret: Secret,
    /// Older cookie keys still accepted while rotating.
    pub previous_cookie_secrets: Vec<Secret>,
    /// Bearer token for the admin API (≥ 16 characters).
    pub admin_token: Secret,
    /// Signs `X-Anteroom-Admission` for the origin; `None`: no header.
    pub admission_key: Option<std::sync::Arc<crate::fairness::admission_token::AdmissionKey>>,
    /// Signs priority grants; the key is the text's UTF-8 bytes as
    /// written (at least 32), so a site can mint grants without decoding anything.
    /// `None`: grants are refused.
    pub priority_secret: Option<Secret>,
    /// Mark the visitor cookie `Secure`.
    pub secure_cookies: bool,
    /// `X-Forwarded-Proto` when no trusted proxy sent one: `"http"` or `"https"`.
    pub public_scheme: &'static str,
    /// Peers whose `X-Forwarded-For` is believed.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// Embedded store snapshots, bans, audit log.
    pub data_dir: PathBuf,
    /// The operator's own waiting page template and stylesheet, if any.
    pub waiting_page: WaitingPageConfig,
    /// Proxy everyone through after `fail_open_after` of continuous store outage.
    pub fail_open: bool,
    /// How long the store must be continuously unreachable before `fail_open` takes effect.
    pub fail_open_after: Duration,
    /// `origin_ca_file`: the only CAs trusted for `https://` origins (else the system's).
    pub origin_ca_file: Option<crate::tls::CaFile>,
    /// A second listener serving only the control room, the admin API and `/metrics`;
    /// `None`: they are served on the public listener.
    pub admin_listen: Option<SocketAddr>,
    /// Who may reach the admin at all (client address, trusted-proxy aware); empty: anyone.
    pub admin_allow: Vec<ipnet::IpNet>,
    /// A bearer token that may only read the metrics.
    pub metrics_token: Option<Secret>,
    /// `admin_tokens`: named admin API tokens, each with a role, besides `admin_token`
    /// (which is the token named `admin`, role admin).
    pub admin_tokens: Vec<AdminToken>,
    /// `pid_file`: where the process writes its id while it runs (`anteroom reload`
    /// reads it); `None`: no pid file.
    pub pid_file: Option<PathBuf>,
    /// `access_log`: where one JSON line per request goes; off by default.
    pub access_log: crate::access_log::Target,
    /// `redis:`: the shared store's URL and CA file; an empty URL means the embedded store.
    pub redis: RedisConfig,
    /// `kafka:`: the optional queue-event side channel.
    pub kafka: KafkaConfig,
    /// `server:`: connection limits, timeouts, serving workers and shutdown timing.
    pub server: ServerConfig,
    /// `abuse:`, validated for the abuse registry.
    pub abuse: crate::abuse::AbusePolicy,
    /// In file order; never empty.
    pub rooms: Vec<RoomConfig>,
}

/// A named admin API token (`admin_tokens`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdminToken {
    /// Its name, as the audit log records it.
    pub name: String,
    /// The bearer token.
    pub token: Secret,
    /// What it may do.
    pub role: Role,
}

/// What an admin token may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Reads only (`GET`).
    Viewer,
    /// Reads, and changes to rooms and their lines; not bans.
    Operator,
    /// Everything.
    Admin,
}

impl Role {
    /// The role's name as the config writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }
}

/// `redis:`: empty `url` means the embedded store.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RedisConfig {
    /// `""`, `redis://…`, `rediss://…`, or several cluster nodes separated by commas.
    pub url: String,
    /// `redis.ca_file`: the only CAs trusted for `rediss://` (else the system's).
    pub ca_file: Option<crate::tls::CaFile>,
    /// `redis.username`: the ACL user (needs `password`); `None`: the default user.
    pub username: Option<String>,
    /// `redis.password`: kept apart from the URL so the URL holds no secret.
    pub password: Option<Secret>,
}

impl RedisConfig {
    /// Whether the embedded store is used (no Redis URL).
    pub fn is_embedded(&self) -> bool {
        self.url.is_empty()
    }

    /// The individual node URLs (one unless a cluster is given comma-separated), without
    /// the credentials of `username` and `password`: for showing.
    pub fn nodes(&self) -> Vec<&str> {
        self.url
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect()
    }

    /// The node URLs to connect with: [`RedisConfig::nodes`] with `username` and
    /// `password` in each. They hold the password: never log them (`redact_url` masks it).
    pub fn connect_urls(&self) -> Vec<String> {
        let Some(password) = &self.password else {
            return self.nodes().into_iter().map(str::to_owned).collect();
        };
        let user = self
            .username
            .as_deref()
            .map(secrets::userinfo_encode)
            .unwrap_or_default();
        let userinfo = format!("{user}:{}@", secrets::userinfo_encode(password.as_str()));
        self.nodes()
            .into_iter()
            .map(|node| match node.split_once("://") {
                Some((scheme, rest)) => format!("{scheme}://{userinfo}{rest}"),
                None => node.to_owned(),
            })
            .collect()
    }
}

/// Connection-level limits and timeouts (optional `server:` section).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerConfig {
    /// Time allowed for a client to send the request headers.
    pub header_read_timeout: Duration,
    /// Keep-alive idle timeout.
    pub idle_timeout: Duration,
    /// Time allowed to connect to an origin.
    pub origin_connect_timeout: Duration,
    /// Time allowed for an origin's response headers.
    pub origin_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
    /// Open connections from one direct peer that is not a trusted proxy.
    pub max_connections_per_client: usize,
    /// Open waiting-page streams (`/__anteroom/events`) at once, below `max_connections`
    /// so streams can never take the connections admitted visitors need.
    pub max_streams: usize,
    /// Open waiting-page streams plus upgraded tunnels of one client (its ClientKey).
    pub max_streams_per_client: usize,
    /// Concurrent streams one HTTP/2 connection may carry.
    pub http2_max_streams: u32,
    /// Largest request head: an HTTP/1 request line and headers, or an HTTP/2 header list
    /// as RFC 9113 counts it (each field 32 bytes more); larger gets a 431.
    pub max_header_bytes: usize,
    /// Threads serving the public listener, each its own runtime and origin pool
    /// (default: one per CPU the process may use).
    pub workers: usize,
    /// A request body must have arrived in full within this long of its head.
    pub body_timeout: Duration,
    /// How long in-flight requests may finish at shutdown.
    pub shutdown_grace: Duration,
    /// After SIGTERM/SIGINT, readiness is 503 for this long before the listener closes,
    /// so a load balancer stops sending new visitors first.
    pub drain_delay: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            origin_connect_timeout: Duration::from_secs(5),
            origin_timeout: Duration::from_secs(30),
            max_connections: 10_000,
            max_connections_per_client: 512,
            max_streams: 5_000,
            max_streams_per_client: 64,
            http2_max_streams: 100,
            max_header_bytes: 16 * 1024,
            workers: default_workers(),
            body_timeout: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(30),
            drain_delay: Duration::ZERO,
        }
    }
}

/// One serving worker per CPU this process may run on (its affinity mask and cgroup
/// quota, as the standard library reads them); one if that cannot be told.
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// One room: a host, the origin behind it, and its admission limits.
#[derive(Clone, Debug)]
pub struct RoomConfig {
    /// `[A-Za-z0-9_-]{1,64}`.
    pub name: String,
    /// Normalized with [`normalize_host`]; `None` is the catch-all room.
    pub match_host: Option<String>,
    /// Absolute `http://` URL; may carry a path prefix.
    pub origin: http::Uri,
    /// Visitors admitted per second (> 0, finite).
    pub rate: f64,
    /// Visitors on the site at once (≥ 1).
    pub max_active: u64,
    /// An admitted session with no request for this long gives its slot back (seeds the live setting).
    pub session_ttl: Duration,
    /// A waiting visitor with no heartbeat for this long leaves the line (seeds the live setting).
    pub abandon_after: Duration,
    /// Joins per client address per window; 0 disables the limit.
    pub join_limit_per_ip: u32,
    /// The fixed window `join_limit_per_ip` counts over, from a client's first attempt.
    pub join_limit_window: Duration,
    /// Sessions on the site at once from one client; 0: no cap.
    pub max_sessions_per_client: u32,
    /// Places in line at once from one client; 0: no cap.
    pub max_places_per_client: u32,
    /// Distinct clients one admitted cookie may be used from; 0: no cap.
    pub session_clients: u32,
    /// The waiting page's heading; the translated default when left at it.
    pub title: String,
    /// The operator's note on the waiting page, shown as written; may be empty.
    pub message: String,
    /// Send the checked request host to the origin as `Host` instead of the origin's own authority.
    pub preserve_host: bool,
    /// Place visitors who arrive before `admits_at` by a random draw rather than arrival order.
    pub lottery: bool,
    /// 200, 202, 429 or 503.
    pub queue_status_code: u16,
    /// Globs (checked by [`crate::glob`]) proxied straight through: no queue, no cookie.
    pub bypass_paths: Vec<String>,
    /// Globs of stylesheets, scripts, images: never join the line, never get the page.
    pub asset_paths: Vec<String>,
    /// WebSocket / SSE streams to the origin open at once in this room; 0: no cap.
    pub stream_cap: u64,
    /// Requests in flight to the origin at once on this replica; 0: no cap.
    pub max_inflight: u64,
    /// How long a request waits for an in-flight slot before a 503.
    pub inflight_wait: Duration,
    /// The queue breaker: at most this many in line; 0: no limit.
    pub max_waiting: u64,
    /// When the line opens, admission starts and the room closes; empty for an ordinary room.
    pub schedule: Schedule,
    /// The room's mode (seeds the live setting): queue, passthrough or sold out.
    pub mode: crate::queue::Mode,
    /// `adaptive:`: lower the rate actually used while the origin struggles.
    pub adaptive: Option<crate::fairness::adaptive::AdaptiveConfig>,
    /// `challenge:`: the proof of work asked of newcomers, and when.
    pub challenge: crate::challenge::ChallengeConfig,
    /// Strikes (by weight, within `abuse.window`) that park a client in the shadow line;
    /// 0: never.
    pub shadow_after: u32,
}

impl RoomConfig {
    /// Whether this is the catch-all room (no `match_host`).
    pub fn is_catch_all(&self) -> bool {
        self.match_host.is_none()
    }
}

impl Config {
    /// The room with this name.
    pub fn room(&self, name: &str) -> Option<&RoomConfig> {
        self.rooms.iter().find(|r| r.name == name)
    }

    /// The room serving `host` (a `Host` header value; case and port are ignored), falling
    /// back to the catch-all room. `None` means no room serves it.
    pub fn room_for_host(&self, host: &str) -> Option<&RoomConfig> {
        let host = normalize_host(host);
        self.rooms
            .iter()
            .find(|r| r.match_host.as_deref() == Some(host.as_str()))
            .or_else(|| self.rooms.iter().find(|r| r.is_catch_all()))
    }
}

/// A secret value. Its `Debug` never shows it and it has no `Display`.
///
/// `as_str` is the text it was written as (the admin token, or the hex of a cookie secret);
/// `expose` is the key material (for a hex cookie secret: the decoded bytes).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    text: String,
    bytes: Vec<u8>,
}

impl Secret {
    /// A secret whose key material is the UTF-8 bytes of `text` (e.g. the admin token).
    pub fn from_text(text: impl Into<String>) -> Secret {
        let text = text.into();
        let bytes = text.as_bytes().to_vec();
        Secret { text, bytes }
    }

    /// A secret from raw key bytes. `as_str` is their hex encoding.
    pub fn from_bytes(bytes: Vec<u8>) -> Secret {
        Secret {
            text: hex::encode(&bytes),
            bytes,
        }
    }

    /// A cookie key as written in config: 64 or more hex characters (even count) are
    /// decoded; any other text is taken as raw bytes. Either way the key must be at least
    /// 32 bytes.
    pub fn cookie_key(text: &str) -> Result<Secret, crate::invalid::Invalid> {
        let is_hex = text.len() >= 64
            && text.len().is_multiple_of(2)
            && text.bytes().all(|b| b.is_ascii_hexdigit());
        let bytes = if is_hex {
            hex::decode(text).map_err(|e| crate::invalid::Invalid(e.to_string()))?
        } else {
            text.as_bytes().to_vec()
        };
        if bytes.len() < 32 {
            return Err(crate::invalid::Invalid(format!(
                "must be at least 32 bytes (64 hex characters); got {} bytes \
                 (`anteroom init` generates one)",
                bytes.len()
            )));
        }
        Ok(Secret {
            text: text.to_string(),
            bytes,
        })
    }

    /// `n_bytes` fresh random bytes from the operating system, hex-encoded. The secret's
    /// text and key material are the hex string (use [`Secret::cookie_key`] on
    /// `as_str()` to get the decoded bytes instead).
    pub fn generate_hex(n_bytes: usize) -> Secret {
        let mut bytes = vec![0u8; n_bytes];
        getrandom::fill(&mut bytes).expect("the operating system's random generator failed");
        Secret::from_text(hex::encode(bytes))
    }

    /// The key material.
    pub fn expose(&self) -> &[u8] {
        &self.bytes
    }

    /// The text the secret was written as.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Length of the key material in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether there is no key material.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Constant-time comparison of the key material against `candidate`.
    pub fn ct_eq(&self, candidate: &[u8]) -> bool {
        use subtle::ConstantTimeEq;
        self.bytes.len() == candidate.len() && bool::from(self.bytes.ct_eq(candidate))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// A configuration error. `Display` reads like
/// `anteroom.yaml:12: rooms.main.rate: must be a number greater than 0 (got -5)`.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A bad, missing or unknown key.
    #[error("{}", located(file.as_deref(), *line, Some(key), message))]
    Invalid {
        /// The config file, when the problem is in (or missing from) it.
        file: Option<String>,
        /// 1-based line in `file`, when known.
        line: Option<u64>,
        /// Dotted path (`rooms.main.rate`), or the flag / variable at fault.
        key: String,
        /// What is wrong, for the operator.
        message: String,
    },
    /// YAML that does not parse at all.
    #[error("{}", located(Some(file), *line, None, message))]
    Syntax {
        /// The file that failed to parse.
        file: String,
        /// 1-based line of the error, when the parser knows it.
        line: Option<u64>,
        /// The parser's description of the error.
        message: String,
    },
    /// The config file could not be read.
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        /// The file that was asked for.
        path: PathBuf,
        /// Why reading it failed.
        #[source]
        source: std::io::Error,
    },
    #[error(
        "nothing to protect: pass --origin URL (e.g. `anteroom --origin http://localhost:3000`), \
         --config FILE (`anteroom init > anteroom.yaml` writes one), or run `anteroom demo`"
    )]
    /// Neither an origin nor a config file was given, so there is nothing to protect.
    NoOrigin,
    /// A command used without what it needs (e.g. `check` without a config file).
    #[error("{0}")]
    Usage(String),
}

impl ConfigError {
    /// The dotted key at fault, if any.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { key, .. } => Some(key),
            _ => None,
        }
    }

    /// The file line at fault, if any.
    pub fn line(&self) -> Option<u64> {
        match self {
            ConfigError::Invalid { line, .. } | ConfigError::Syntax { line, .. } => *line,
            _ => None,
        }
    }
}

fn located(file: Option<&str>, line: Option<u64>, key: Option<&str>, message: &str) -> String {
    let mut out = String::new();
    if let Some(file) = file {
        out.push_str(file);
        if let Some(line) = line {
            out.push_str(&format!(":{line}"));
        }
        out.push_str(": ");
    }
    if let Some(key) = key {
        out.push_str(key);
        out.push_str(": ");
    }
    out.push_str(message);
    out
}

#[cfg(test)]
mod tests;

// The store's domain types are built from the config here, the one place that knows both
// (the stores never see the file's types).
impl RoomSettings {
    /// The runtime settings a room's config seeds into the store.
    pub fn seed(room: &RoomConfig) -> RoomSettings {
        RoomSettings {
            rate: room.rate,
            max_active: room.max_active,
            session_ttl: room.session_ttl,
            abandon_after: room.abandon_after,
            paused: false,
            mode: room.mode,
            changes: Default::default(),
        }
    }
}

impl RoomPolicy {
    /// The static policy a room's config hands the store on every start.
    pub fn of(room: &RoomConfig) -> RoomPolicy {
        RoomPolicy {
            join_limit_per_ip: room.join_limit_per_ip,
            join_limit_window: room.join_limit_window,
            schedule: room.schedule.clone(),
            lottery: room.lottery,
            max_places_per_client: room.max_places_per_client,
            max_sessions_per_client: room.max_sessions_per_client,
            session_clients: room.session_clients,
            max_waiting: room.max_waiting,
        }
    }
}

/// The rustls configuration the origin client gets for `config`: trust from
/// `origin_ca_file` or the platform when some room's origin is `https://`; none otherwise
/// (no `https://` origin, so nothing to trust, and no need for a system CA store). Both
/// `anteroom check` and the server call this, so a missing system store is caught by
/// `check` too. The error names the key to fix.
pub fn origins_tls_config(config: &Config) -> Result<rustls::ClientConfig, crate::tls::TlsError> {
    let any_https = config
        .rooms
        .iter()
        .any(|r| r.origin.scheme_str() == Some("https"));
    if !any_https {
        return Ok(crate::tls::no_trust());
    }
    crate::tls::origin_tls_config(config.origin_ca_file.as_ref())
}
