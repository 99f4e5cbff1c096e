//! The registry: the hot-path ban check against a snapshot of the bans, strikes and the
//! bans they earn, embedded or shared between replicas through Redis. Its parts: the
//! snapshot's structure (`ban_set`), the embedded state (`local`), what the admin API
//! asks of it (`operator`), its timers, persistence and counts (`upkeep`), and with Redis
//! the bound on the totals remembered (`reported`); the bound on strikes in flight is a
//! semaphore here ([`MAX_PENDING_STRIKES`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use arc_swap::ArcSwap;
use ipnet::IpNet;
use tokio::sync::mpsc;

use super::persist;
use super::redis::{BanReply, RedisAbuse, StrikeReply};
use super::tally::Tally;
use super::{
    AbuseError, AbuseEvent, AbusePolicy, Ban, BanSource, BanVerdict, LOG_CAP, LogAction,
    StrikeReason, client_ip, client_net,
};
use crate::clock::{Clock, ms};

mod ban_set;
mod local;
mod operator;
mod reported;
mod upkeep;

use ban_set::{BanSet, lasts_longer};
use local::{Full, Local};
/// The most strikes recorded in the background at once (with Redis): at a round trip of
/// a millisecond, a thousand strikes a second each; with Redis away, what a second of a
/// flood would pile up.
pub const MAX_PENDING_STRIKES: usize = 1024;
use reported::make_room;

/// Events waiting for the forwarder; beyond this they are dropped and counted, because
/// the audit log and Kafka are side channels that must never slow a ban down.
pub const EVENT_BUFFER: usize = if cfg!(test) { 64 } else { 4096 };

enum Backend {
    Local {
        /// Boxed: the ban indexes make it several times the Redis variant's size.
        state: Box<Mutex<Local>>,
        data_dir: Option<PathBuf>,
    },
    Redis {
        redis: RedisAbuse,
        /// The Redis ban-set version last loaded (`u64::MAX`: never).
        version: AtomicU64,
        /// Serialises local updates of the snapshot against refreshes.
        update: Mutex<()>,
        /// The struck stream's id read up to (`None`: not yet read, so the first read
        /// starts a window ago).
        struck_read: Mutex<Option<String>>,
    },
}

/// What [`AbuseRegistry::strike`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StrikeOutcome {
    /// The client is in `abuse.allow` or a trusted proxy: nothing counted.
    Immune,
    /// Already banned: nothing more counted.
    AlreadyBanned,
    /// Counted; the client's weight within the window is now `total`.
    Counted {
        /// The client's strike weight within the window, this strike included.
        total: u64,
    },
    /// This strike reached `abuse.strikes`.
    Banned(Arc<Ban>),
    /// Redis did not answer; the strike was lost (bans already known stay enforced).
    StoreDown,
    /// This strike reached `abuse.strikes`, but `abuse.max_bans` operator bans leave no
    /// room: counted in `anteroom_bans_refused_total`, nobody banned.
    Full,
}

/// What [`AbuseRegistry::judge`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Judged<T> {
    /// The check passed.
    Passed(T),
    /// The check failed and was struck (embedded: at once; with Redis in the background).
    Failed,
    /// Not checked: this client's failed checks within the window reach `abuse.strikes`
    /// already (its ban is made or on its way).
    Withheld,
}

/// What [`AbuseRegistry::hit_ban_path`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathOutcome {
    /// The path is not one of `ban_paths`.
    NotBanPath,
    /// It is, but the client is never banned; the caller answers 404 without the origin.
    Immune,
    /// The client is now banned (or already was, for at least this long).
    Banned(Arc<Ban>),
    /// It is, but `abuse.max_bans` operator bans leave no room; the caller answers 404
    /// without the origin, as for an immune client.
    Full,
}

/// The abuse registry of one replica. See the module documentation for who calls what.
pub struct AbuseRegistry {
    policy: AbusePolicy,
    trusted: Vec<IpNet>,
    clock: Clock,
    bans: ArcSwap<BanSet>,
    backend: Backend,
    strikes_total: [AtomicU64; 4],
    banned_requests: AtomicU64,
    events_dropped: AtomicU64,
    events_tx: mpsc::Sender<AbuseEvent>,
    events_rx: Mutex<Option<mpsc::Receiver<AbuseEvent>>>,
    /// Whether the last Redis refresh failed (to log transitions, not every tick).
    refresh_failing: AtomicBool,
    /// Whether the last read of the struck stream failed (the same, for strikes).
    struck_failing: AtomicBool,
    /// Failed checks per client, taken with the check ([`AbuseRegistry::judge`]).
    tally: Mutex<Tally>,
    /// Bans displaced to keep within `abuse.max_bans`.
    bans_displaced: AtomicU64,
    /// Automatic bans refused because `abuse.max_bans` operator bans are active.
    bans_refused: AtomicU64,
    /// At most one warning a minute about refused bans.
    full_warning: crate::log_limiter::LogLimiter,
    /// With Redis: strikes recorded in the background and not yet answered (see
    /// [`MAX_PENDING_STRIKES`]).
    pending_strikes: Arc<tokio::sync::Semaphore>,
    /// At most one warning a minute about strikes dropped at that bound.
    dropped_warning: crate::log_limiter::LogLimiter,
    /// With Redis: the latest total the shared strike table reported for each client
    /// struck within the window (by this replica's strikes' answers, and by the struck
    /// stream every tick for other replicas' strikes), and when, so
    /// [`AbuseRegistry::strikes`] needs no round trip. At most `abuse.max_tracked`.
    reported: Mutex<HashMap<IpAddr, (u64, u64)>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere while holding the lock must not take the ban check down with it:
    // the state is still consistent at every await-free step.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl AbuseRegistry {
    fn build(policy: AbusePolicy, trusted: Vec<IpNet>, clock: Clock, backend: Backend) -> Self {
        let (events_tx, events_rx) = mpsc::channel(EVENT_BUFFER);
        AbuseRegistry {
            policy,
            trusted: trusted.into_iter().map(|n| n.trunc()).collect(),
            clock,
            bans: ArcSwap::from_pointee(BanSet::default()),
            backend,
            strikes_total: Default::default(),
            banned_requests: AtomicU64::new(0),
            events_dropped: AtomicU64::new(0),
            events_tx,
            events_rx: Mutex::new(Some(events_rx)),
            refresh_failing: AtomicBool::new(false),
            struck_failing: AtomicBool::new(false),
            tally: Mutex::new(Tally::default()),
            bans_displaced: AtomicU64::new(0),
            bans_refused: AtomicU64::new(0),
            full_warning: crate::log_limiter::LogLimiter::new(Duration::from_secs(60)),
            pending_strikes: Arc::new(tokio::sync::Semaphore::new(MAX_PENDING_STRIKES)),
            dropped_warning: crate::log_limiter::LogLimiter::new(Duration::from_secs(60)),
            reported: Mutex::default(),
        }
    }

    /// Embedded, nothing on disk (tests, the demo).
    pub fn in_memory(policy: AbusePolicy, trusted: Vec<IpNet>, clock: Clock) -> Self {
        Self::build(
            policy,
            trusted,
            clock,
            Backend::Local {
                state: Box::new(Mutex::new(Local::default())),
                data_dir: None,
            },
        )
    }

    /// Embedded, restoring `data_dir/abuse.json` if present (expired bans are dropped with
    /// an `expired` log entry and event). [`AbuseRegistry::persist`] writes it back.
    pub fn open(
        policy: AbusePolicy,
        trusted: Vec<IpNet>,
        clock: Clock,
        data_dir: &Path,
    ) -> Result<Self, AbuseError> {
        let saved = persist::load(data_dir)?;
        let now = clock.now_ms();
        let mut local = Local::default();
        let mut expired = Vec::new();
        if let Some(saved) = saved {
            local.next_seq = saved.next_seq;
            local.log = saved.log.into_iter().take(LOG_CAP).collect();
            let top = local.log.front().map_or(0, |e| e.seq);
            local.next_seq = local.next_seq.max(top + 1);
            for ban in saved.bans {
                if ban.active_at(now) {
                    local.put(Arc::new(ban));
                } else {
                    local.record(LogAction::Expired, &ban, now);
                    expired.push(Arc::new(ban));
                }
            }
        }
        let registry = Self::build(
            policy,
            trusted,
            clock,
            Backend::Local {
                state: Box::new(Mutex::new(local)),
                data_dir: Some(data_dir.to_owned()),
            },
        );
        if let Backend::Local { state, .. } = &registry.backend {
            registry.publish_local(&lock(state));
        }
        for ban in expired {
            registry.emit(AbuseEvent::Expired(ban));
        }
        Ok(registry)
    }

    /// Shared through Redis; loads the current bans (and the strikes of the last window)
    /// once before returning, so a replica starts enforcing at once (an unreachable Redis
    /// is an error here; later outages keep the last known bans).
    pub async fn with_redis(
        policy: AbusePolicy,
        trusted: Vec<IpNet>,
        clock: Clock,
        redis: RedisAbuse,
    ) -> Result<Self, AbuseError> {
        let registry = Self::build(
            policy,
            trusted,
            clock,
            Backend::Redis {
                redis,
                version: AtomicU64::new(u64::MAX),
                update: Mutex::new(()),
                struck_read: Mutex::new(None),
            },
        );
        registry.refresh().await?;
        registry.learn_strikes_logged().await;
        Ok(registry)
    }

    /// The events channel (once; later calls get `None`). Forward each to the audit log,
    /// Kafka and metrics. Unread events beyond [`EVENT_BUFFER`] are dropped and counted.
    pub fn take_events(&self) -> Option<mpsc::Receiver<AbuseEvent>> {
        lock(&self.events_rx).take()
    }

    /// The validated `abuse:` policy this registry enforces.
    pub fn policy(&self) -> &AbusePolicy {
        &self.policy
    }

    fn emit(&self, event: AbuseEvent) {
        if self.events_tx.try_send(event).is_err() {
            self.events_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether `ip` is never struck or banned (`abuse.allow`, `trusted_proxies`).
    pub fn is_immune(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.policy
            .allow
            .iter()
            .chain(&self.trusted)
            .any(|net| net.contains(&ip))
    }

    fn net_is_immune(&self, target: &IpNet) -> bool {
        self.policy
            .allow
            .iter()
            .chain(&self.trusted)
            .any(|net| net.contains(target))
    }

    // ---- the request path ----

    /// Step (1) of every request: is this client banned? An in-memory lookup of the
    /// current snapshot (one atomic load, one hash lookup, a scan of the range bans);
    /// never a store round trip, never a lock. Counts `anteroom_banned_requests_total`.
    pub fn check(&self, ip: IpAddr) -> Option<BanVerdict> {
        let set = self.bans.load();
        if set.is_empty() {
            return None;
        }
        let now = self.clock.now_ms();
        let ban = set.lookup(ip, now)?;
        // Rare path only: a ban matched, so the allow list costs nothing otherwise.
        if self.is_immune(ip) {
            return None;
        }
        self.banned_requests.fetch_add(1, Ordering::Relaxed);
        Some(BanVerdict {
            retry_after: ban
                .until_ms
                .map(|until| Duration::from_millis(until.saturating_sub(now))),
            ban: ban.clone(),
        })
    }

    /// Whether `path` (query ignored) is one of `ban_paths`, without banning anyone.
    pub fn is_ban_path(&self, path: &str) -> bool {
        self.policy.ban_paths.is_match(path)
    }

    /// Step (3): if `path` is one of `ban_paths`, ban the client for `cooldown` (an
    /// existing longer ban is kept). Ban-path bans do not count toward the doubling.
    pub async fn hit_ban_path(&self, ip: IpAddr, path: &str) -> PathOutcome {
        let Some(glob) = self.policy.ban_paths.first_match(path) else {
            return PathOutcome::NotBanPath;
        };
        if self.is_immune(ip) {
            return PathOutcome::Immune;
        }
        let now = self.clock.now_ms();
        let ban = Ban {
            seq: 0,
            target: client_net(ip),
            source: BanSource::BanPath,
            reason: format!("requested a ban path ({})", glob.as_str()),
            since_ms: now,
            until_ms: Some(now.saturating_add(ms(self.policy.cooldown))),
        };
        match &self.backend {
            Backend::Local { state, .. } => {
                let mut st = lock(state);
                if let Some(existing) = st.bans.get(&ban.target)
                    && existing.active_at(now)
                    && lasts_longer(existing, &ban)
                {
                    return PathOutcome::Banned(existing.clone());
                }
                let Some(displaced) = self.make_room(&mut st, &ban.target, now) else {
                    return PathOutcome::Full;
                };
                let ban = st.add_ban(ban, now);
                self.publish_local(&st);
                drop(st);
                self.emit_displaced(displaced);
                self.emit(AbuseEvent::Banned(ban.clone()));
                PathOutcome::Banned(ban)
            }
            Backend::Redis { redis, .. } => {
                match redis.ban(&ban, now, false, self.policy.max_bans).await {
                    Ok(BanReply::Stored(stored, displaced)) => {
                        PathOutcome::Banned(self.shared_stored(stored, displaced))
                    }
                    Ok(BanReply::Full) => {
                        self.refuse();
                        PathOutcome::Full
                    }
                    Ok(BanReply::Kept) => match self.check(ip) {
                        Some(v) => PathOutcome::Banned(v.ban),
                        None => PathOutcome::Banned(Arc::new(ban)),
                    },
                    Err(e) => {
                        // Redis is down: enforce here at least; the next refresh after Redis
                        // returns replaces this local-only ban with the shared set.
                        tracing::warn!(error = %e, "cannot share a ban-path ban; enforcing it on this replica only");
                        let ban = Arc::new(ban);
                        self.publish_one(ban.clone());
                        PathOutcome::Banned(ban)
                    }
                }
            }
        }
    }

    /// Runs `check` for `ip` (a token comparison: cheap and synchronous) unless the
    /// client's failed checks within `abuse.window` already weigh `abuse.strikes`; a
    /// failure (`None`) is a strike of `reason`. Deciding to check, checking and counting
    /// the failure happen under one lock, so at most `ceil(strikes / weight)` failing
    /// checks are ever made for one client on this replica, whatever the concurrency.
    /// Immune clients are always checked and never struck.
    pub fn judge<T>(
        self: &Arc<Self>,
        ip: IpAddr,
        reason: StrikeReason,
        check: impl FnOnce() -> Option<T>,
    ) -> Judged<T> {
        if self.is_immune(ip) {
            return check().map_or(Judged::Failed, Judged::Passed);
        }
        let key = client_ip(ip);
        let now = self.clock.now_ms();
        let window = ms(self.policy.window);
        {
            let mut tally = lock(&self.tally);
            if tally.weight(key, now, window) >= u64::from(self.policy.strikes) {
                return Judged::Withheld;
            }
            if let Some(passed) = check() {
                return Judged::Passed(passed);
            }
            tally.add(key, reason.weight(), now, window, self.policy.max_tracked);
        }
        self.strike_soon(ip, reason);
        Judged::Failed
    }

    /// Records a strike before the next request is judged where that needs no round trip
    /// (embedded: at once); with Redis it is recorded in the background, since no request
    /// may wait on the store for it.
    pub fn strike_soon(self: &Arc<Self>, ip: IpAddr, reason: StrikeReason) {
        if self.strike_now(ip, reason).is_none() {
            self.strike_later(ip, reason);
        }
    }

    /// [`AbuseRegistry::strike`] in the background (with Redis, a round trip), at most
    /// [`MAX_PENDING_STRIKES`] at once: with Redis away each waits out its timeout, and a
    /// flood of bad requests would otherwise pile up tasks that cannot count anyway.
    fn strike_later(self: &Arc<Self>, ip: IpAddr, reason: StrikeReason) {
        let Ok(pending) = self.pending_strikes.clone().try_acquire_owned() else {
            if let Some(more) = self.dropped_warning.allow_counted() {
                tracing::warn!(
                    pending = MAX_PENDING_STRIKES,
                    more_dropped = more,
                    "strikes dropped: too many are waiting for Redis"
                );
            }
            return;
        };
        let me = self.clone();
        tokio::spawn(async move {
            me.strike(ip, reason).await;
            drop(pending);
        });
    }

    /// Background strikes not yet answered (for tests).
    #[cfg(test)]
    pub(super) fn pending_strikes(&self) -> usize {
        MAX_PENDING_STRIKES - self.pending_strikes.available_permits()
    }

    /// The embedded strike, synchronously; `None` with Redis (the caller spawns
    /// [`AbuseRegistry::strike`]).
    fn strike_now(&self, ip: IpAddr, reason: StrikeReason) -> Option<StrikeOutcome> {
        let Backend::Local { state, .. } = &self.backend else {
            return None;
        };
        if self.is_immune(ip) {
            return Some(StrikeOutcome::Immune);
        }
        if self.check_quiet(ip) {
            return Some(StrikeOutcome::AlreadyBanned);
        }
        self.strikes_total[reason.index()].fetch_add(1, Ordering::Relaxed);
        let now = self.clock.now_ms();
        let mut st = lock(state);
        let (outcome, displaced) = self.strike_local(&mut st, client_ip(ip), reason, now);
        if let StrikeOutcome::Banned(ban) = &outcome {
            self.publish_local(&st);
            drop(st);
            self.emit_displaced(displaced);
            self.emit(AbuseEvent::Banned(ban.clone()));
        }
        Some(outcome)
    }

    /// Records a strike. Counted within `abuse.window`; reaching `abuse.strikes` bans the
    /// client for `cooldown × 2^(earlier automatic bans)`, capped at `max_cooldown`.
    /// With Redis this is one script call (callers on the request path may spawn it).
    pub async fn strike(&self, ip: IpAddr, reason: StrikeReason) -> StrikeOutcome {
        if let Some(outcome) = self.strike_now(ip, reason) {
            return outcome;
        }
        if self.is_immune(ip) {
            return StrikeOutcome::Immune;
        }
        if self.check_quiet(ip) {
            return StrikeOutcome::AlreadyBanned;
        }
        self.strikes_total[reason.index()].fetch_add(1, Ordering::Relaxed);
        let now = self.clock.now_ms();
        match &self.backend {
            Backend::Local { .. } => unreachable!("strike_now records embedded strikes"),
            Backend::Redis { redis, .. } => {
                let reason_text = self.auto_reason(reason);
                match redis
                    .strike(
                        &self.policy,
                        client_net(ip),
                        reason.weight(),
                        &reason_text,
                        now,
                    )
                    .await
                {
                    Ok(StrikeReply::Counted(total)) => {
                        self.learn_totals([(client_ip(ip), total, now)]);
                        StrikeOutcome::Counted { total }
                    }
                    Ok(StrikeReply::AlreadyBanned) => StrikeOutcome::AlreadyBanned,
                    Ok(StrikeReply::Banned(ban, displaced)) => {
                        // The strikes were spent on the ban, as embedded.
                        self.learn_totals([(client_ip(ip), 0, now)]);
                        StrikeOutcome::Banned(self.shared_stored(ban, displaced))
                    }
                    Ok(StrikeReply::Full) => {
                        self.learn_totals([(client_ip(ip), 0, now)]);
                        self.refuse();
                        StrikeOutcome::Full
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "strike not recorded: redis unavailable");
                        StrikeOutcome::StoreDown
                    }
                }
            }
        }
    }

    fn auto_reason(&self, last: StrikeReason) -> String {
        format!(
            "{} strikes within {} (last: {})",
            self.policy.strikes,
            humantime::format_duration(self.policy.window),
            last.as_str()
        )
    }

    /// The weight of `ip`'s strikes within `abuse.window`, without a round trip: what the
    /// proof of work at the door adds bits for and `shadow_after` compares with. Embedded,
    /// the strike table itself; with Redis, the shared table's total after the client's
    /// latest strike, on any replica (another replica's strikes show here by the next
    /// tick, within a second). Immune clients have none.
    pub fn strikes(&self, ip: IpAddr) -> u64 {
        if self.is_immune(ip) {
            return 0;
        }
        let key = client_ip(ip);
        let now = self.clock.now_ms();
        let window = ms(self.policy.window);
        match &self.backend {
            Backend::Local { state, .. } => lock(state).tracked.get(&key).map_or(0, |t| {
                t.hits
                    .iter()
                    .filter(|&&(at, _)| at.saturating_add(window) > now)
                    .map(|&(_, w)| u64::from(w))
                    .sum()
            }),
            Backend::Redis { .. } => lock(&self.reported)
                .get(&key)
                .filter(|&&(_, at)| at.saturating_add(window) > now)
                .map_or(0, |&(total, _)| total),
        }
    }

    /// Keeps the shared table's totals, each `(client, total, at)` with `at` the unix ms
    /// of the strike, in the order the table made them: a later one replaces an earlier
    /// one whatever the striking replicas' clocks said (`at` only ages it out, and never
    /// counts as later than now). Bounded by `abuse.max_tracked` ([`make_room`]).
    fn learn_totals(&self, totals: impl IntoIterator<Item = (IpAddr, u64, u64)>) {
        let now = self.clock.now_ms();
        let window = ms(self.policy.window);
        let cap = self.policy.max_tracked.max(1);
        let mut reported = lock(&self.reported);
        for (client, total, at) in totals {
            let at = at.min(now);
            if at.saturating_add(window) <= now {
                continue;
            }
            if !reported.contains_key(&client) {
                make_room(&mut reported, cap, now, window);
            }
            reported.insert(client, (total, at));
        }
    }

    /// Whether `ip` is banned now, without counting a banned request (the sweep that ends
    /// a banned client's sessions and streams).
    pub fn is_banned(&self, ip: IpAddr) -> bool {
        self.check_quiet(ip) && !self.is_immune(ip)
    }

    /// Whether a ban covers `ip`, without counting a banned request.
    fn check_quiet(&self, ip: IpAddr) -> bool {
        let set = self.bans.load();
        !set.is_empty() && set.lookup(ip, self.clock.now_ms()).is_some()
    }

    fn strike_local(
        &self,
        st: &mut Local,
        key: IpAddr,
        reason: StrikeReason,
        now: u64,
    ) -> (StrikeOutcome, Vec<Arc<Ban>>) {
        let window = ms(self.policy.window);
        if !st.tracked.contains_key(&key) {
            // Bounded memory: forget the least recently struck before adding one more.
            while st.tracked.len() >= self.policy.max_tracked {
                let Some((_, oldest)) = st.lru.pop_first() else {
                    break;
                };
                st.tracked.remove(&oldest);
            }
        }
        st.touch += 1;
        let touch = st.touch;
        let entry = st.tracked.entry(key).or_default();
        let previous = std::mem::replace(&mut entry.touched, touch);
        while let Some(&(at, w)) = entry.hits.front() {
            if at.saturating_add(window) > now {
                break;
            }
            entry.hits.pop_front();
            entry.sum -= u64::from(w);
        }
        entry.hits.push_back((now, reason.weight()));
        entry.sum += u64::from(reason.weight());
        let total = entry.sum;
        let banned = total >= u64::from(self.policy.strikes);
        let earlier = entry.auto_bans;
        if banned {
            entry.hits.clear();
            entry.sum = 0;
            entry.auto_bans = entry.auto_bans.saturating_add(1);
        }
        if previous != 0 {
            st.lru.remove(&previous);
        }
        st.lru.insert(touch, key);
        if !banned {
            return (StrikeOutcome::Counted { total }, Vec::new());
        }
        let Some(displaced) = self.make_room(st, &client_net(key), now) else {
            return (StrikeOutcome::Full, Vec::new());
        };
        let cooldown = self.policy.cooldown_after(earlier);
        let ban = Ban {
            seq: 0,
            target: client_net(key),
            source: BanSource::Automatic,
            reason: self.auto_reason(reason),
            since_ms: now,
            until_ms: Some(now.saturating_add(ms(cooldown))),
        };
        (StrikeOutcome::Banned(st.add_ban(ban, now)), displaced)
    }

    /// [`Local::make_room`] for an automatic or ban-path ban; `None` (counted) when
    /// there is no room.
    fn make_room(&self, st: &mut Local, target: &IpNet, now: u64) -> Option<Vec<Arc<Ban>>> {
        match st.make_room(target, self.policy.max_bans, now) {
            Ok(displaced) => Some(displaced),
            Err(Full) => {
                self.refuse();
                None
            }
        }
    }

    /// Counts an automatic ban refused at `abuse.max_bans`, warning at most once a minute
    /// (a flood at the cap would otherwise log a line per refusal).
    fn refuse(&self) {
        self.bans_refused.fetch_add(1, Ordering::Relaxed);
        if self.full_warning.allow() {
            tracing::warn!(
                max_bans = self.policy.max_bans,
                "abuse.max_bans operator bans are active: automatic bans are refused until some end or are lifted"
            );
        }
    }

    /// Counts and reports bans displaced at `abuse.max_bans` (after the lock is let go).
    fn emit_displaced(&self, displaced: Vec<Arc<Ban>>) {
        self.bans_displaced
            .fetch_add(displaced.len() as u64, Ordering::Relaxed);
        for ban in displaced {
            self.emit(AbuseEvent::Displaced(ban));
        }
    }

    /// A ban Redis stored: into this replica's snapshot at once (the displaced ones out),
    /// reported, and returned.
    fn shared_stored(&self, ban: Ban, displaced: Vec<Ban>) -> Arc<Ban> {
        let displaced: Vec<Arc<Ban>> = displaced.into_iter().map(Arc::new).collect();
        for old in &displaced {
            self.publish_one_removed(old.target);
        }
        let ban = Arc::new(ban);
        self.publish_one(ban.clone());
        self.emit_displaced(displaced);
        self.emit(AbuseEvent::Banned(ban.clone()));
        ban
    }

    /// Installs `bans` as the snapshot directly (benchmarks of the check).
    #[cfg(test)]
    pub(super) fn replace_bans_for_tests(&self, bans: Vec<Ban>) {
        self.bans
            .store(Arc::new(BanSet::from_bans(bans.into_iter().map(Arc::new))));
    }

    /// Hands readers the master copy's current state (a clone of persistent maps: O(1)).
    fn publish_local(&self, st: &Local) {
        self.bans.store(Arc::new(st.bans.clone()));
    }

    /// Adds (or replaces) one ban in the snapshot (Redis mode: our own change, before the
    /// next refresh brings it back from Redis). O(log n): the new snapshot shares the rest.
    fn publish_one(&self, ban: Arc<Ban>) {
        let _guard = self.update_guard();
        let mut next = BanSet::clone(&self.bans.load());
        next.insert(ban);
        self.bans.store(Arc::new(next));
    }

    /// Removes the ban on `net` from the snapshot, returning it.
    fn publish_one_removed(&self, net: IpNet) -> Option<Arc<Ban>> {
        let _guard = self.update_guard();
        let mut next = BanSet::clone(&self.bans.load());
        let removed = next.remove(&net)?;
        self.bans.store(Arc::new(next));
        Some(removed)
    }

    fn update_guard(&self) -> Option<MutexGuard<'_, ()>> {
        match &self.backend {
            Backend::Redis { update, .. } => Some(lock(update)),
            Backend::Local { .. } => None,
        }
    }
}
