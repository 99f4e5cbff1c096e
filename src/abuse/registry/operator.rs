//! What the admin API asks of the registry: ban, unban, the list of active bans and the ban
//! log, each a page at a time.

use std::sync::Arc;
use std::time::Duration;

use crate::abuse::redis::BanReply;
use crate::abuse::{
    AbuseError, AbuseEvent, Ban, BanError, BanSource, DEFAULT_PAGE, LogAction, LogEntry,
    MAX_BAN_SECS, MAX_PAGE, MAX_REASON_CHARS, Page, parse_target,
};
use crate::clock::ms;

use super::{AbuseRegistry, Backend, Full, lock};

impl AbuseRegistry {
    /// `POST /__anteroom/admin/api/bans`: bans an address (its client: /32 or /64) or a
    /// range (no broader than /8 or /16) for `duration`, or permanently with `None`.
    /// Replaces any ban on the same target.
    pub async fn ban(
        &self,
        target: &str,
        duration: Option<Duration>,
        reason: &str,
    ) -> Result<Arc<Ban>, BanError> {
        let net = parse_target(target)?;
        if duration.is_some_and(|d| d < Duration::from_secs(1) || d.as_secs() > MAX_BAN_SECS) {
            return Err(BanError::InvalidDuration);
        }
        if reason.chars().count() > MAX_REASON_CHARS {
            return Err(BanError::ReasonTooLong);
        }
        if self.net_is_immune(&net) {
            return Err(BanError::Immune(net.to_string()));
        }
        let now = self.clock.now_ms();
        let ban = Ban {
            seq: 0,
            target: net,
            source: BanSource::Admin,
            reason: reason.trim().to_owned(),
            since_ms: now,
            until_ms: duration.map(|d| now.saturating_add(ms(d))),
        };
        match &self.backend {
            Backend::Local { state, .. } => {
                let mut st = lock(state);
                let displaced = match st.make_room(&ban.target, self.policy.max_bans, now) {
                    Ok(displaced) => displaced,
                    Err(Full) => return Err(BanError::Full(self.policy.max_bans)),
                };
                let ban = st.add_ban(ban, now);
                self.publish_local(&st);
                drop(st);
                self.emit_displaced(displaced);
                self.emit(AbuseEvent::Banned(ban.clone()));
                Ok(ban)
            }
            Backend::Redis { redis, .. } => {
                match redis
                    .ban(&ban, now, true, self.policy.max_bans)
                    .await
                    .map_err(|e| BanError::Store(e.to_string()))?
                {
                    BanReply::Stored(stored, displaced) => {
                        Ok(self.shared_stored(stored, displaced))
                    }
                    BanReply::Full => Err(BanError::Full(self.policy.max_bans)),
                    BanReply::Kept => Err(BanError::Store("the ban was not stored".into())),
                }
            }
        }
    }

    /// `DELETE /__anteroom/admin/api/bans/{target}`: lifts the ban on exactly `target`
    /// (normalised as for [`AbuseRegistry::ban`]).
    pub async fn unban(&self, target: &str) -> Result<Arc<Ban>, BanError> {
        let net = match parse_target(target) {
            Ok(net) => net,
            Err(BanError::TooBroad { target, .. }) => return Err(BanError::NotFound(target)),
            Err(e) => return Err(e),
        };
        let now = self.clock.now_ms();
        let ban = match &self.backend {
            Backend::Local { state, .. } => {
                let mut st = lock(state);
                // An ended ban not yet swept is no ban: the sweep logs its expiry.
                if !st.bans.get(&net).is_some_and(|b| b.active_at(now)) {
                    return Err(BanError::NotFound(net.to_string()));
                }
                let ban = st
                    .take(&net)
                    .ok_or_else(|| BanError::NotFound(net.to_string()))?;
                st.record(LogAction::Unbanned, &ban, now);
                self.publish_local(&st);
                ban
            }
            Backend::Redis { redis, .. } => {
                let ban = redis
                    .unban(net, now)
                    .await
                    .map_err(|e| BanError::Store(e.to_string()))?;
                // Lifted here at once even if Redis had no record (a local-only ban made
                // during an outage).
                let local = self.publish_one_removed(net);
                match ban.map(Arc::new).or(local) {
                    Some(ban) => ban,
                    None => return Err(BanError::NotFound(net.to_string())),
                }
            }
        };
        self.emit(AbuseEvent::Unbanned(ban.clone()));
        Ok(ban)
    }

    /// `GET /__anteroom/admin/api/bans`: active bans, newest first. `cursor` is the
    /// previous page's `next_cursor`. From this replica's snapshot (no store round trip).
    pub fn list(&self, limit: Option<usize>, cursor: Option<u64>) -> Page<Arc<Ban>> {
        let now = self.clock.now_ms();
        let set = self.bans.load();
        let mut bans: Vec<&Arc<Ban>> = set
            .iter()
            .filter(|b| b.active_at(now) && cursor.is_none_or(|c| b.seq < c))
            .collect();
        bans.sort_by_key(|b| std::cmp::Reverse(b.seq));
        page(bans.into_iter().cloned(), limit, |b| b.seq)
    }

    /// `GET /__anteroom/admin/api/bans/log`: every ban, unban and expiry, newest first.
    pub async fn log(
        &self,
        limit: Option<usize>,
        cursor: Option<u64>,
    ) -> Result<Page<LogEntry>, AbuseError> {
        match &self.backend {
            Backend::Local { state, .. } => {
                let st = lock(state);
                let entries = st
                    .log
                    .iter()
                    .filter(|e| cursor.is_none_or(|c| e.seq < c))
                    .cloned();
                Ok(page(entries, limit, |e| e.seq))
            }
            Backend::Redis { redis, .. } => {
                let limit = clamp_limit(limit);
                let mut items = redis.log_page(cursor, limit + 1).await?;
                let next_cursor = if items.len() > limit {
                    items.truncate(limit);
                    items.last().map(|e| e.seq)
                } else {
                    None
                };
                Ok(Page { items, next_cursor })
            }
        }
    }
}

fn clamp_limit(limit: Option<usize>) -> usize {
    limit.unwrap_or(DEFAULT_PAGE).clamp(1, MAX_PAGE)
}

/// The first `limit` of `items` (already newest first and past the cursor).
fn page<T>(
    items: impl Iterator<Item = T>,
    limit: Option<usize>,
    seq: impl Fn(&T) -> u64,
) -> Page<T> {
    let limit = clamp_limit(limit);
    let mut items: Vec<T> = items.take(limit + 1).collect();
    let next_cursor = if items.len() > limit {
        items.truncate(limit);
        items.last().map(&seq)
    } else {
        None
    };
    Page { items, next_cursor }
}
