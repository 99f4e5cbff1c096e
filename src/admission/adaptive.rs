//! This replica's side of closed-loop admission ([`crate::fairness::adaptive`] holds the
//! arithmetic): the rooms with `adaptive:`, what this replica observed of their origin,
//! the once-a-second exchange through the store that merges every replica's observations
//! and lets one of them decide, and the configured against effective rate it shows.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use crate::fairness::adaptive::{
    AdaptiveConfig, AdaptiveController, AdaptiveState, OriginRecorder, Tuning,
};
use crate::queue::{StoreResult, VisitorId};

use super::Admission;

/// This replica's side of closed-loop admission; see [`crate::fairness::adaptive`].
pub(super) struct AdaptiveRooms {
    /// This replica's name among the room's reports: random per start, so a restarted
    /// replica's old report simply goes stale.
    replica: String,
    rooms: RwLock<HashMap<String, Arc<AdaptiveRoom>>>,
    tuning: RwLock<Tuning>,
}

impl AdaptiveRooms {
    pub(super) fn new() -> Self {
        AdaptiveRooms {
            replica: VisitorId::random().to_hex(),
            rooms: RwLock::default(),
            tuning: RwLock::new(Tuning::default()),
        }
    }
}

struct AdaptiveRoom {
    config: AdaptiveConfig,
    recorder: OriginRecorder,
    /// The room's state as last read from (or written to) the store.
    last: Mutex<Option<AdaptiveState>>,
}

/// Configured against effective rate, and why (room stats, metrics, the control room).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct RateView {
    /// What the pass uses now: the controller's rate, never above the configured one.
    pub effective_rate: f64,
    /// `configured`, `latency`, `errors` or `recovering` ([`crate::fairness::adaptive::Reason::code`]).
    pub rate_reason: &'static str,
    /// The reason as a sentence.
    pub explanation: String,
    /// What the last decision saw over its window, every replica's observations merged.
    pub origin_p95_ms: Option<u64>,
    /// Share of origin responses in that window that were 5xx (0 to 1).
    pub origin_error_ratio: f64,
    /// How many origin responses that window held.
    pub origin_samples: u64,
    /// The room's `adaptive:` limits, to show what the observations are held against.
    pub target_latency_ms: u64,
    /// The 5xx share above which the rate is lowered.
    pub max_error_ratio: f64,
}

impl RateView {
    fn of(state: &AdaptiveState, configured: f64, config: &AdaptiveConfig) -> RateView {
        let effective_rate = if state.effective_rate.is_finite() && state.effective_rate > 0.0 {
            state.effective_rate.min(configured)
        } else {
            configured
        };
        let below = effective_rate < configured;
        let explanation = if below {
            state.reason.to_string()
        } else {
            crate::fairness::adaptive::Reason::AtConfiguredRate.to_string()
        };
        RateView {
            effective_rate,
            rate_reason: state.reason.code(below),
            explanation,
            origin_p95_ms: state.p95_ms,
            origin_error_ratio: state.error_ratio,
            origin_samples: state.samples,
            target_latency_ms: config.target_latency.as_millis() as u64,
            max_error_ratio: config.max_error_ratio,
        }
    }
}

impl Admission {
    /// Turns closed-loop admission on (`Some`) or off for `room`. Off clears
    /// any effective rate a previous run left in the store, so the configured rate applies.
    pub async fn configure_adaptive(
        &self,
        room: &str,
        config: Option<AdaptiveConfig>,
    ) -> StoreResult<()> {
        {
            let mut rooms = self
                .adaptive
                .rooms
                .write()
                .unwrap_or_else(|p| p.into_inner());
            match config {
                Some(config) => {
                    rooms.insert(
                        room.to_owned(),
                        Arc::new(AdaptiveRoom {
                            config,
                            recorder: OriginRecorder::default(),
                            last: Mutex::new(None),
                        }),
                    );
                    return Ok(());
                }
                None => rooms.remove(room),
            };
        }
        self.observe(self.store.set_adaptive(room, None).await)
    }

    /// Shorter controller windows and steps, for end-to-end tests that must finish in
    /// seconds. Not user-facing.
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn set_adaptive_tuning_for_tests(&self, tuning: Tuning) {
        *self
            .adaptive
            .tuning
            .write()
            .unwrap_or_else(|p| p.into_inner()) = tuning;
    }

    /// Records one proxied response of an admitted visitor: its time to response headers
    /// and status, for closed-loop admission. A no-op in rooms without `adaptive:`.
    pub fn observe_origin(&self, room: &str, took: Duration, status: u16) {
        let rooms = self
            .adaptive
            .rooms
            .read()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(r) = rooms.get(room) {
            r.recorder.record(self.clock.now_ms(), took, status);
        }
    }

    /// One closed-loop step per adaptive room (once a second, from the pass driver):
    /// publish this replica's observations, and when this replica claimed the decision,
    /// decide on every replica's and store the result.
    pub async fn adapt(&self) {
        let rooms: Vec<(String, Arc<AdaptiveRoom>)> = self
            .adaptive
            .rooms
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(name, r)| (name.clone(), r.clone()))
            .collect();
        let tuning = *self
            .adaptive
            .tuning
            .read()
            .unwrap_or_else(|p| p.into_inner());
        for (room, r) in rooms {
            let report = r.recorder.report(self.clock.now_ms());
            let exchange = match self.observe(
                self.store
                    .exchange_origin(&room, &self.adaptive.replica, &report)
                    .await,
            ) {
                Ok(exchange) => exchange,
                // Logged by the pass that fails alike; the stored rate stays as it was.
                Err(_) => continue,
            };
            let mut state = exchange.state.clone();
            if exchange.decide {
                let before = state
                    .as_ref()
                    .map(|s| s.effective_rate.min(exchange.configured_rate));
                let mut controller = AdaptiveController::restore(
                    r.config.clone(),
                    exchange.configured_rate,
                    state.as_ref(),
                )
                .with_tuning(tuning);
                let decision = controller.decide(&exchange.fleet_window(), exchange.now_ms);
                let next = controller.state(exchange.now_ms);
                if self
                    .observe(self.store.set_adaptive(&room, Some(&next)).await)
                    .is_err()
                {
                    continue;
                }
                let after = decision.effective_rate;
                match before {
                    Some(b) if after < b => tracing::warn!(
                        room,
                        configured = decision.configured_rate,
                        effective = after,
                        "closed-loop admission lowered the rate: {}",
                        decision.explanation
                    ),
                    Some(b) if after > b && after >= decision.configured_rate => tracing::info!(
                        room,
                        rate = after,
                        "closed-loop admission is back at the configured rate"
                    ),
                    _ => {}
                }
                state = Some(next);
            }
            *r.last.lock().unwrap_or_else(|p| p.into_inner()) = state;
        }
    }

    /// The configured against effective rate of an adaptive room; `None` for a room
    /// without `adaptive:` (its effective rate is the configured one).
    pub fn rate_view(&self, room: &str, configured: f64) -> Option<RateView> {
        let rooms = self
            .adaptive
            .rooms
            .read()
            .unwrap_or_else(|p| p.into_inner());
        let r = rooms.get(room)?;
        let last = r.last.lock().unwrap_or_else(|p| p.into_inner());
        Some(match last.as_ref() {
            Some(state) => RateView::of(state, configured, &r.config),
            None => RateView {
                effective_rate: configured,
                rate_reason: "configured",
                explanation: crate::fairness::adaptive::Reason::AtConfiguredRate.to_string(),
                origin_p95_ms: None,
                origin_error_ratio: 0.0,
                origin_samples: 0,
                target_latency_ms: r.config.target_latency.as_millis() as u64,
                max_error_ratio: r.config.max_error_ratio,
            },
        })
    }
}
