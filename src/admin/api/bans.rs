//! The bans' bodies: a ban, the ban log, and what `POST …/bans` takes and answers.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::Audit;
use crate::abuse::{self, LogAction};

/// Who made a ban.
#[derive(Clone, Copy, Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BanSource {
    /// Earned by strikes.
    Automatic,
    /// A request to one of `ban_paths`.
    BanPath,
    /// An operator through the admin API.
    Admin,
}

impl From<abuse::BanSource> for BanSource {
    fn from(s: abuse::BanSource) -> BanSource {
        match s {
            abuse::BanSource::Automatic => BanSource::Automatic,
            abuse::BanSource::BanPath => BanSource::BanPath,
            abuse::BanSource::Admin => BanSource::Admin,
        }
    }
}

/// What happened to a ban, in the ban log.
#[derive(Clone, Copy, Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BanAction {
    /// A ban began.
    Banned,
    /// An operator lifted it.
    Unbanned,
    /// It ran out.
    Expired,
    /// It was removed before its end to make room for a newer ban at `abuse.max_bans`.
    Displaced,
}

impl From<LogAction> for BanAction {
    fn from(a: LogAction) -> BanAction {
        match a {
            LogAction::Banned => BanAction::Banned,
            LogAction::Unbanned => BanAction::Unbanned,
            LogAction::Expired => BanAction::Expired,
            LogAction::Displaced => BanAction::Displaced,
        }
    }
}

/// One active ban.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct Ban {
    /// The network banned, normalised: `192.0.2.7/32`, `2001:db8::/48`.
    pub target: String,
    /// Who made the ban.
    pub source: BanSource,
    /// Why.
    pub reason: String,
    /// When the ban was made.
    #[schema(format = DateTime)]
    pub since: String,
    /// When it ends; null when permanent.
    #[schema(format = DateTime)]
    #[schema(required = true)]
    pub until: Option<String>,
    /// Seconds left when the server answered (rounded up); null when permanent.
    #[schema(required = true)]
    pub remaining_secs: Option<u64>,
    /// Whether it never ends.
    pub permanent: bool,
    /// Its place in the list, for paging.
    pub cursor: u64,
}

/// One line of the ban log.
#[derive(Debug, Serialize, ToSchema)]
pub struct BanLogEntry {
    /// When it happened.
    #[schema(format = DateTime)]
    pub at: String,
    /// What happened.
    pub action: BanAction,
    /// The network the ban is on.
    pub target: String,
    /// Who made the ban.
    pub source: BanSource,
    /// The ban's reason.
    pub reason: String,
    /// The ban's end (for `banned`); null when permanent or not applicable.
    #[schema(format = DateTime)]
    #[schema(required = true)]
    pub until: Option<String>,
    /// Its place in the log, for paging.
    pub cursor: u64,
}

/// `GET …/bans`: one page of the active bans, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct BanList {
    /// The bans.
    pub bans: Vec<Ban>,
    /// The `cursor` of the next (older) page; null on the last page.
    #[schema(required = true)]
    pub next_cursor: Option<u64>,
}

/// `GET …/bans/log`: one page of the ban log, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct BanLog {
    /// The entries.
    pub log: Vec<BanLogEntry>,
    /// The `cursor` of the next (older) page; null on the last page.
    #[schema(required = true)]
    pub next_cursor: Option<u64>,
}

/// An IPv4 or IPv6 address (banned as its client: the address, or its IPv6 /64), or a
/// CIDR range no broader than /8 (IPv4) or /16 (IPv6). The pattern is the shape; the
/// server also refuses (422) an IPv6 text that does not parse, a range that covers every
/// IPv4 client (::ffff:0:0/96), and a target in abuse.allow or trusted_proxies.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(
    pattern = r"^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}(/([89]|[12][0-9]|3[0-2]))?|[0-9A-Fa-f]{0,4}(:[0-9A-Fa-f]{0,4}){2,7}(/([1-9][0-9]|1[01][0-9]|12[0-8]))?)$"
)]
#[allow(
    dead_code,
    reason = "describes a target bans::ban and bans::unban read"
)]
pub struct BanTarget(pub String);

/// The body of `POST …/bans`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code, reason = "describes the body bans::ban reads")]
pub struct BanRequest {
    /// The address or range to ban.
    pub target: BanTarget,
    /// Seconds, at most ten years; null or absent: permanent.
    #[schema(minimum = 1, maximum = 315_360_000)]
    pub duration_secs: Option<u64>,
    /// At most 500 characters; null or absent: "banned by an operator".
    #[schema(max_length = 500)]
    pub reason: Option<String>,
}

/// `POST …/bans`'s answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct BanCreated {
    /// The ban made.
    pub ban: Ban,
    /// Whether it was audited.
    pub audit: Audit,
}

/// `DELETE …/bans/{target}`'s answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct Unbanned {
    /// The ban lifted.
    pub unbanned: Ban,
    /// Whether it was audited.
    pub audit: Audit,
}
