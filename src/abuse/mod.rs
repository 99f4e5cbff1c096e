//! The abuse registry: strikes, automatic and admin bans, the ban log, and the
//! in-memory ban check that every request meets first.
//!
//! The pieces, and who calls them once wired:
//!
//! - [`AbuseConfig`] — the `abuse:` section of the config file; [`AbuseConfig::validate`]
//!   turns it into an [`AbusePolicy`] or errors that name the key.
//! - [`AbuseRegistry`] — one per replica. [`AbuseRegistry::check`] is the request path's
//!   step (1): a lock-free read of an in-memory snapshot, never a store round trip.
//!   [`AbuseRegistry::strike`] records a [`StrikeReason`]; [`AbuseRegistry::hit_ban_path`]
//!   is step (3); [`AbuseRegistry::ban`], [`AbuseRegistry::unban`],
//!   [`AbuseRegistry::list`] and [`AbuseRegistry::log`] back the admin API;
//!   [`AbuseRegistry::tick`] (expiry, and with Redis the refresh) runs on a timer of at
//!   most a second; [`AbuseRegistry::persist`] runs with the queue's snapshots.
//! - [`AbuseEvent`] — every ban, unban and expiry, sent on a bounded channel
//!   ([`AbuseRegistry::take_events`]) for the audit log and Kafka to forward.
//!
//! Where the state lives: embedded, in this process (and `data_dir/abuse.json`); with
//! Redis, in Redis under the one hash tag `{abuse}` (so a Cluster keeps it in one slot),
//! with each replica holding the active bans in memory and refreshing them every tick.
//!
//! Memory: the embedded strike table holds at most `max_tracked` clients (least recently
//! struck forgotten first, O(log n) per strike); a client's count of earlier automatic
//! bans lives in its entry, so it is forgotten with it and is not kept across restarts.
//! In Redis a client's strikes expire with the window and its repeat count
//! `max_cooldown` after its last automatic ban ends, so Redis memory is bounded by the
//! strike rate, not by how many addresses ever attacked. Each counted strike's new total
//! also goes on a stream capped at about 100,000 entries, which every replica reads each
//! tick into a map of at most `max_tracked` clients (what the door's difficulty and
//! `shadow_after` read). The ban log keeps [`LOG_CAP`] entries in both.
//!
//! Outages: with Redis down, `check` keeps enforcing the last known bans, strikes are
//! not counted ([`StrikeOutcome::StoreDown`]), admin changes fail with
//! [`BanError::Store`], and a ban-path hit still bans on the replica that saw it.

mod config;
mod persist;
mod redis;
#[cfg(test)]
mod redis_tests;
mod registry;
mod tally;
#[cfg(test)]
mod tests;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use serde::{Deserialize, Serialize};

pub use config::{AbuseConfig, AbuseConfigError, AbusePolicy};
pub use persist::ABUSE_FILE;
pub use redis::RedisAbuse;
pub use registry::{AbuseRegistry, Judged, PathOutcome, StrikeOutcome};

/// Entries kept in the ban log (embedded and Redis alike); older ones are dropped.
pub const LOG_CAP: usize = 10_000;
/// Page size when the caller gives none, and the most one page holds.
pub const DEFAULT_PAGE: usize = 50;
/// The most entries one page of bans or ban log may hold, whatever the caller asks.
pub const MAX_PAGE: usize = 1_000;
/// Longest ban reason an admin may give, in characters.
pub const MAX_REASON_CHARS: usize = 500;

/// The longest ban with an end, in seconds (ten years); a longer one is a permanent ban.
pub const MAX_BAN_SECS: u64 = 10 * 365 * 24 * 60 * 60;

/// The broadest ranges an admin may ban.
pub const MIN_PREFIX_V4: u8 = 8;
/// The broadest IPv6 range an admin may ban (`/16`); see [`MIN_PREFIX_V4`].
pub const MIN_PREFIX_V6: u8 = 16;

/// What earned a strike, with its weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StrikeReason {
    /// A visitor cookie whose signature or key id fails verification.
    BadCookie,
    /// A wrong admin (or metrics) token.
    BadAdminToken,
    /// A join refused by the room's join limit.
    JoinLimit,
    /// A priority grant that fails verification.
    BadGrant,
}

impl StrikeReason {
    /// Every strike reason, for labelling metrics up front.
    pub const ALL: [StrikeReason; 4] = [
        StrikeReason::BadCookie,
        StrikeReason::BadAdminToken,
        StrikeReason::JoinLimit,
        StrikeReason::BadGrant,
    ];

    /// How many strikes this counts as toward `abuse.strikes`: 5 for forged credentials, 1 for the join limit.
    pub fn weight(self) -> u32 {
        match self {
            StrikeReason::BadCookie | StrikeReason::BadAdminToken | StrikeReason::BadGrant => 5,
            StrikeReason::JoinLimit => 1,
        }
    }

    /// The `reason` label of `anteroom_strikes_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            StrikeReason::BadCookie => "bad_cookie",
            StrikeReason::BadAdminToken => "bad_admin_token",
            StrikeReason::JoinLimit => "join_limit",
            StrikeReason::BadGrant => "bad_grant",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Who made a ban (the control room shows it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BanSource {
    /// Earned by strikes.
    Automatic,
    /// A request to one of `ban_paths`.
    BanPath,
    /// An operator through the admin API.
    Admin,
}

impl BanSource {
    /// The snake_case name, as serialized and shown in the control room.
    pub fn as_str(self) -> &'static str {
        match self {
            BanSource::Automatic => "automatic",
            BanSource::BanPath => "ban_path",
            BanSource::Admin => "admin",
        }
    }
}

/// One active ban.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ban {
    /// Position in the ban log (the `banned` entry); newest bans have the highest. Also
    /// the paging cursor of [`AbuseRegistry::list`].
    pub seq: u64,
    /// A client (`a.b.c.d/32`, `prefix::/64`) or a range.
    pub target: IpNet,
    /// Who made the ban.
    pub source: BanSource,
    /// Why: the operator's text, or a description of the strikes or path that earned it.
    pub reason: String,
    /// Unix ms when the ban began.
    pub since_ms: u64,
    /// Unix ms when it ends; `None` is permanent.
    pub until_ms: Option<u64>,
}

impl Ban {
    fn active_at(&self, now_ms: u64) -> bool {
        self.until_ms.is_none_or(|until| until > now_ms)
    }
}

/// The answer to a banned client (429 with `Retry-After`, or 403 when
/// permanent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BanVerdict {
    /// Time left; `None` is a permanent ban.
    pub retry_after: Option<Duration>,
    /// The ban that matched the client.
    pub ban: Arc<Ban>,
}

impl BanVerdict {
    /// Whether the ban never ends (answered with 403 rather than 429).
    pub fn is_permanent(&self) -> bool {
        self.retry_after.is_none()
    }

    /// `Retry-After` in whole seconds, rounded up (never 0 while banned).
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after
            .map(|d| d.as_secs() + u64::from(d.subsec_nanos() > 0))
    }
}

/// What happened, in the ban log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogAction {
    /// A ban began.
    Banned,
    /// An admin lifted a ban.
    Unbanned,
    /// A ban ran out.
    Expired,
    /// Removed before its end to make room for a newer ban at `abuse.max_bans`.
    Displaced,
}

/// One ban log entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogEntry {
    /// Increases by one per entry; the paging cursor of [`AbuseRegistry::log`].
    pub seq: u64,
    /// Unix ms when it happened.
    pub at_ms: u64,
    /// What happened to the ban.
    pub action: LogAction,
    /// The client or range the ban is on.
    pub target: IpNet,
    /// The source of the ban this entry is about.
    pub source: BanSource,
    /// The ban's reason.
    pub reason: String,
    /// The ban's end (for `banned`), `None` when permanent or not applicable.
    pub until_ms: Option<u64>,
}

/// One page, newest first. `next_cursor` goes into the next call's `cursor`; `None` when
/// this was the last page.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Page<T> {
    /// This page's entries, newest first.
    pub items: Vec<T>,
    /// The cursor of the next (older) page; `None` on the last page.
    pub next_cursor: Option<u64>,
}

/// For the audit log, metrics and Kafka (`client_banned` / `client_unbanned` with
/// `client` = the target, `reason`, `until`). Sent once, by the replica that made the
/// change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AbuseEvent {
    /// A new ban, automatic, by path or by an admin.
    Banned(Arc<Ban>),
    /// Lifted by an admin.
    Unbanned(Arc<Ban>),
    /// Ran out.
    Expired(Arc<Ban>),
    /// Removed to make room for a newer ban at `abuse.max_bans`.
    Displaced(Arc<Ban>),
}

impl AbuseEvent {
    /// The ban this event is about.
    pub fn ban(&self) -> &Ban {
        match self {
            AbuseEvent::Banned(b)
            | AbuseEvent::Unbanned(b)
            | AbuseEvent::Expired(b)
            | AbuseEvent::Displaced(b) => b,
        }
    }

    /// The Kafka event type: expiry and displacement are unbans too.
    pub fn kafka_type(&self) -> &'static str {
        match self {
            AbuseEvent::Banned(_) => "client_banned",
            AbuseEvent::Unbanned(_) | AbuseEvent::Expired(_) | AbuseEvent::Displaced(_) => {
                "client_unbanned"
            }
        }
    }

    /// The audit log / ban log action.
    pub fn action(&self) -> LogAction {
        match self {
            AbuseEvent::Banned(_) => LogAction::Banned,
            AbuseEvent::Unbanned(_) => LogAction::Unbanned,
            AbuseEvent::Expired(_) => LogAction::Expired,
            AbuseEvent::Displaced(_) => LogAction::Displaced,
        }
    }
}

/// Why an admin ban or unban was refused. The admin API maps `InvalidTarget`,
/// `TooBroad`, `Immune`, `InvalidDuration` and `ReasonTooLong` to 422, `NotFound` to 404,
/// `Full` to 409 and `Store` to 503.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BanError {
    /// The target is neither an address nor a CIDR range.
    #[error("target `{0}` is neither an IP address nor a CIDR range")]
    InvalidTarget(String),
    #[error(
        "target `{target}` is broader than /{min_prefix}, the broadest range that may be banned"
    )]
    /// The range is broader than [`MIN_PREFIX_V4`] / [`MIN_PREFIX_V6`] allow.
    TooBroad {
        /// The target as given.
        target: String,
        /// The shortest prefix allowed for its address family.
        min_prefix: u8,
    },
    /// The target is in `abuse.allow` or `trusted_proxies`, which are never banned.
    #[error("target `{0}` is in abuse.allow or trusted_proxies, which are never banned")]
    Immune(String),
    /// A duration of zero, or one past [`MAX_BAN_SECS`], was given.
    #[error(
        "duration_secs must be a whole number from 1 to {MAX_BAN_SECS} (ten years), or null for a permanent ban"
    )]
    InvalidDuration,
    /// The reason exceeds [`MAX_REASON_CHARS`].
    #[error("reason is longer than {MAX_REASON_CHARS} characters")]
    ReasonTooLong,
    /// No active ban on this exact target.
    #[error("no active ban on `{0}`")]
    NotFound(String),
    /// The embedded file or Redis failed; the message says how.
    #[error("the ban store is unavailable: {0}")]
    Store(String),
    /// `abuse.max_bans` (the number) active bans are all operator bans.
    #[error(
        "abuse.max_bans ({0}) bans are active and all are operator bans; lift some or raise abuse.max_bans"
    )]
    Full(usize),
}

/// Errors of the store underneath (files, Redis).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AbuseError {
    /// The embedded store's file could not be read or written.
    #[error("abuse state in {path}: {reason}")]
    File {
        /// The state file's path.
        path: String,
        /// What went wrong reading, parsing or writing it.
        reason: String,
    },
    /// A Redis command or script failed.
    #[error("redis (abuse): {0}")]
    Redis(String),
}

/// The client a ban applies to: an IPv4 address, or an IPv6 /64 (its network address).
/// IPv4-mapped IPv6 is IPv4. The same grouping as the request path's `ClientKey`, kept
/// here so this module does not depend on where that type lives.
pub fn client_ip(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !(u128::MAX >> 64))),
    }
}

/// The client's network: `a.b.c.d/32` or `prefix::/64`.
pub fn client_net(ip: IpAddr) -> IpNet {
    match client_ip(ip) {
        IpAddr::V4(v4) => IpNet::V4(Ipv4Net::from(v4)),
        IpAddr::V6(v6) => IpNet::V6(Ipv6Net::new_assert(v6, 64)),
    }
}

/// An admin's target, normalised: an address becomes its client (/32 or /64); a range
/// loses its host bits; IPv4-mapped IPv6 ranges become IPv4; an IPv6 range narrower than
/// /64 widens to its /64, because a client is a whole /64 and a narrower ban could never
/// match one. Ranges broader than /8 (IPv4) or /16 (IPv6) are refused.
pub fn parse_target(target: &str) -> Result<IpNet, BanError> {
    let t = target.trim();
    let net = if let Ok(ip) = t.parse::<IpAddr>() {
        return Ok(client_net(ip));
    } else if let Ok(net) = t.parse::<IpNet>() {
        net.trunc()
    } else {
        return Err(BanError::InvalidTarget(target.chars().take(100).collect()));
    };
    let net = match net {
        IpNet::V6(v6) if v6.prefix_len() >= 96 && v6.addr().to_ipv4_mapped().is_some() => {
            let v4: Ipv4Addr = v6.addr().to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED);
            IpNet::V4(Ipv4Net::new_assert(v4, v6.prefix_len() - 96))
        }
        IpNet::V6(v6) if v6.prefix_len() > 64 => client_net(IpAddr::V6(v6.addr())),
        other => other,
    };
    // An IPv6 range that covers the IPv4-mapped block (`::ffff:0:0/96`) covers every IPv4
    // client, which are kept in that form: it is judged as the IPv4 range it covers (all
    // of it), so the /8 rule for IPv4 holds.
    if let IpNet::V6(v6) = net
        && v6.contains(&IPV4_MAPPED)
    {
        return Err(BanError::TooBroad {
            target: t.to_owned(),
            min_prefix: MIN_PREFIX_V4,
        });
    }
    let min_prefix = match net {
        IpNet::V4(_) => MIN_PREFIX_V4,
        IpNet::V6(_) => MIN_PREFIX_V6,
    };
    if net.prefix_len() < min_prefix {
        return Err(BanError::TooBroad {
            target: t.to_owned(),
            min_prefix,
        });
    }
    Ok(net)
}

/// `::ffff:0:0/96`, where IPv4 clients live as IPv6 (RFC 4291 §2.5.5.2).
const IPV4_MAPPED: Ipv6Net = Ipv6Net::new_assert(Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0), 96);

/// Whether `net` is a single client (goes in the exact-match table).
fn is_client_net(net: &IpNet) -> bool {
    matches!(net, IpNet::V4(n) if n.prefix_len() == 32)
        || matches!(net, IpNet::V6(n) if n.prefix_len() == 64)
}

/// The client as one number for the exact-match table (IPv4 as its mapped IPv6 form).
fn client_bits(ip: IpAddr) -> u128 {
    match client_ip(ip) {
        IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => u128::from(v6),
    }
}
