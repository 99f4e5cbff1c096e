//! The registry's upkeep: the once-a-second tick that expires ended bans and, with Redis,
//! reloads the shared set and reads the strikes other replicas recorded; persistence of
//! the embedded state to `data_dir`; and the counts the metrics read.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::abuse::persist::{self};
use crate::abuse::{AbuseError, AbuseEvent, LogAction, StrikeReason};

use super::{AbuseRegistry, Backend, BanSet, lock};

/// Logs when a recurring Redis read starts failing (`failed`, a warning with the error) or
/// answers again (`recovered`), once per change rather than every tick; `failing` keeps
/// which it was last time.
fn log_change(
    failing: &AtomicBool,
    result: &Result<(), AbuseError>,
    failed: &str,
    recovered: &str,
) {
    match (result, failing.swap(result.is_err(), Ordering::Relaxed)) {
        (Err(e), false) => tracing::warn!(error = %e, "{failed}"),
        (Ok(()), true) => tracing::info!("{recovered}"),
        _ => {}
    }
}

/// How long one tick may spend reading the struck stream (a page of a thousand strikes
/// is a millisecond or two), so a replica far behind never holds up the next refresh of
/// the bans.
const STRUCK_READ_BUDGET: Duration = Duration::from_millis(200);

impl AbuseRegistry {
    /// Expires ended bans (one `expired` log entry and event each, from exactly one
    /// replica) and, with Redis, reloads the shared ban set if it changed, then reads the
    /// struck stream (within [`STRUCK_READ_BUDGET`]). Run at least once a second. On a
    /// Redis error the last known bans stay enforced; the error returned is the bans'
    /// (one reading the strikes is logged, and the read resumes where it stopped).
    pub async fn tick(&self) -> Result<(), AbuseError> {
        let now = self.clock.now_ms();
        match &self.backend {
            Backend::Local { state, .. } => {
                let mut st = lock(state);
                let mut expired = Vec::new();
                // Soonest first: only the bans that ended are visited.
                while let Some(&(until, net)) = st.ending.first()
                    && until <= now
                {
                    match st.take(&net) {
                        Some(ban) => {
                            st.record(LogAction::Expired, &ban, now);
                            expired.push(ban);
                        }
                        None => {
                            st.ending.pop_first();
                        }
                    }
                }
                if expired.is_empty() {
                    return Ok(());
                }
                self.publish_local(&st);
                drop(st);
                for ban in expired {
                    self.emit(AbuseEvent::Expired(ban));
                }
                Ok(())
            }
            Backend::Redis { redis, .. } => {
                let result = async {
                    for ban in redis.sweep(now).await? {
                        self.emit(AbuseEvent::Expired(Arc::new(ban)));
                    }
                    self.refresh().await
                }
                .await;
                log_change(
                    &self.refresh_failing,
                    &result,
                    "cannot refresh the shared bans; the last known bans stay enforced",
                    "shared bans refreshed again",
                );
                self.learn_strikes_logged().await;
                result
            }
        }
    }

    /// Reloads the Redis ban set if its version moved. A version gone back (Redis flushed,
    /// or another Redis) also starts the struck stream's read afresh.
    pub(super) async fn refresh(&self) -> Result<(), AbuseError> {
        let Backend::Redis {
            redis,
            version,
            update,
            struck_read,
        } = &self.backend
        else {
            return Ok(());
        };
        let current = redis.version().await?;
        let loaded = version.load(Ordering::Acquire);
        if current == loaded {
            return Ok(());
        }
        if current < loaded && loaded != u64::MAX {
            *lock(struck_read) = None;
        }
        let bans = redis.all_bans().await?;
        let _guard = lock(update);
        self.bans
            .store(Arc::new(BanSet::from_bans(bans.into_iter().map(Arc::new))));
        version.store(current, Ordering::Release);
        Ok(())
    }

    /// [`AbuseRegistry::learn_strikes`], logging when reading starts or stops failing.
    pub(super) async fn learn_strikes_logged(&self) {
        log_change(
            &self.struck_failing,
            &self.learn_strikes().await,
            "cannot read the strikes other replicas recorded; this replica's own still count",
            "strikes from other replicas read again",
        );
    }

    /// Reads the struck stream from where the last read ended (at first, from a window
    /// ago), page by page for at most [`STRUCK_READ_BUDGET`]: each strike's total becomes
    /// this replica's view of its client ([`AbuseRegistry::strikes`]). A replica further
    /// behind catches up over the next ticks.
    async fn learn_strikes(&self) -> Result<(), AbuseError> {
        let Backend::Redis {
            redis, struck_read, ..
        } = &self.backend
        else {
            return Ok(());
        };
        let mut after = lock(struck_read).clone().unwrap_or_else(|| {
            let since = self
                .clock
                .now_ms()
                .saturating_sub(crate::clock::ms(self.policy.window));
            format!("{since}-0")
        });
        let until = tokio::time::Instant::now() + STRUCK_READ_BUDGET;
        loop {
            let page = redis.struck_after(&after).await?;
            self.learn_totals(page.strikes.iter().map(|s| (s.client, s.total, s.at)));
            if let Some(last) = page.last {
                after = last;
                *lock(struck_read) = Some(after.clone());
            }
            if !page.more || tokio::time::Instant::now() >= until {
                return Ok(());
            }
        }
    }

    /// Runs [`AbuseRegistry::tick`] every `every` (≤ 1 s keeps a ban's propagation to the
    /// other replicas within 2 s) until the registry is dropped elsewhere and this is the
    /// last handle.
    pub fn spawn_ticker(self: &Arc<Self>, every: Duration) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(every);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                interval.tick().await;
                let Some(registry) = weak.upgrade() else {
                    return;
                };
                let _ = registry.tick().await;
            }
        })
    }

    /// Writes `data_dir/abuse.json` (embedded with a data dir; otherwise nothing). Call it
    /// with the queue's snapshots, after admin changes and at shutdown.
    pub async fn persist(&self) -> Result<(), AbuseError> {
        let Backend::Local {
            state,
            data_dir: Some(dir),
        } = &self.backend
        else {
            return Ok(());
        };
        let saved = lock(state).saved();
        let dir = dir.clone();
        tokio::task::spawn_blocking(move || persist::save(&dir, &saved))
            .await
            .map_err(|e| AbuseError::File {
                path: persist::ABUSE_FILE.into(),
                reason: format!("the write task failed: {e}"),
            })?
    }

    /// Clients whose strikes are remembered (embedded; 0 with Redis, where strike keys
    /// expire with the window).
    pub fn tracked(&self) -> usize {
        match &self.backend {
            Backend::Local { state, .. } => lock(state).tracked.len(),
            Backend::Redis { .. } => 0,
        }
    }

    /// `anteroom_bans_active`.
    pub fn bans_active(&self) -> usize {
        let now = self.clock.now_ms();
        let set = self.bans.load();
        set.iter().filter(|b| b.active_at(now)).count()
    }

    /// `anteroom_strikes_total{reason}`.
    pub fn strikes_total(&self, reason: StrikeReason) -> u64 {
        self.strikes_total[reason.index()].load(Ordering::Relaxed)
    }

    /// `anteroom_banned_requests_total`.
    pub fn banned_requests_total(&self) -> u64 {
        self.banned_requests.load(Ordering::Relaxed)
    }

    /// `anteroom_bans_displaced_total`: bans displaced by newer ones at `abuse.max_bans`.
    pub fn bans_displaced_total(&self) -> u64 {
        self.bans_displaced.load(Ordering::Relaxed)
    }

    /// `anteroom_bans_refused_total`: automatic bans not made because `abuse.max_bans`
    /// operator bans are active.
    pub fn bans_refused_total(&self) -> u64 {
        self.bans_refused.load(Ordering::Relaxed)
    }

    /// Events dropped because nobody read them fast enough.
    pub fn events_dropped(&self) -> u64 {
        self.events_dropped.load(Ordering::Relaxed)
    }
}
