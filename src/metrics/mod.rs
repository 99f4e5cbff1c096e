//! Prometheus metrics, served at `GET /__anteroom/admin/api/metrics` in the
//! Prometheus text format (0.0.4), from this process's own registry (no global one).
//!
//! Room counters and gauges are read at scrape time from the one-second statistics cache
//! ([`Admission::cached_stats`]), so a scrape costs no store round trip and keeps reporting
//! the last known values through a store outage (`anteroom_stats_age_seconds` says how old
//! they are). What only this replica sees (proxied request durations, open streams) is
//! recorded here as it happens; what it is and has open (its build, process, listeners'
//! connections and streams) is read at scrape time too (`replica.rs`, `process.rs`).
//!
//! The time in line (`anteroom_time_in_line_seconds`) is kept by [`Admission`], the one
//! place that knows when a visitor let out of the line had joined it; it is only
//! registered here.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http::{Response, StatusCode};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::time::Instant;

use crate::abuse::{AbuseRegistry, StrikeReason};
use crate::admission::{Admission, RoomLabel};
use crate::http::body::Body;
use crate::queue::RoomPhase;
use crate::server::Census;

mod challenge;
mod process;
mod replica;
#[cfg(test)]
mod tests;

pub use challenge::{ChallengeMetrics, DoorSeries, MAX_SOLVE_MS};
pub use replica::Listener;

/// The `Content-Type` of the `/metrics` exposition (Prometheus text format).
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProxyLabels {
    room: String,
    /// `1xx` (WebSocket upgrades), `2xx`, `3xx`, `4xx`, `5xx` (anteroom's own 502/504 included), or `other`.
    /// Not `class`, which in the access log is the traffic class (page, asset, …).
    status_class: &'static str,
}

/// The status classes of `anteroom_proxy_request_duration_seconds`, by `status / 100 − 1`.
const STATUS_CLASSES: [&str; 6] = ["1xx", "2xx", "3xx", "4xx", "5xx", "other"];

type HistogramFamily = Family<ProxyLabels, Histogram, fn() -> Histogram>;

/// This process's registry and the metrics recorded as they happen.
pub struct Metrics {
    registry: Registry,
    /// The configured rooms, whose statistics each scrape encodes.
    rooms: Arc<arc_swap::ArcSwap<Vec<String>>>,
    proxied: HistogramFamily,
    /// Each configured room's histograms by status class, looked up without building a
    /// label (a `String`) or taking the family's lock on every proxied request; a series
    /// still appears only once it has an observation.
    proxied_by_room: HashMap<String, [OnceLock<Histogram>; STATUS_CLASSES.len()]>,
    open_streams: Gauge,
    bypass: Family<RoomLabel, prometheus_client::metrics::counter::Counter>,
    inflight: Family<RoomLabel, Gauge>,
    inflight_rejected: Family<RoomLabel, prometheus_client::metrics::counter::Counter>,
    /// Each listener's census, in [`Listener::ALL`]'s order.
    censuses: [Census; 2],
    /// The proof of work at the door and the shadow line.
    pub challenges: ChallengeMetrics,
}

impl Metrics {
    /// The registry: gauges read from `admission` and the abuse registry (when given), series for the configured `rooms`, and whether `fail_open` is configured.
    pub fn new(
        admission: Arc<Admission>,
        rooms: Vec<String>,
        fail_open: bool,
        abuse: Option<Arc<AbuseRegistry>>,
    ) -> Metrics {
        let mut registry = Registry::default();
        let proxied: HistogramFamily = Family::new_with_constructor(|| {
            // 1 ms to about 33 s.
            Histogram::new(exponential_buckets(0.001, 2.0, 16))
        });
        registry.register(
            "anteroom_proxy_request_duration_seconds",
            "Time from forwarding a request to the origin to having its response headers, by room and status class",
            proxied.clone(),
        );
        let open_streams = Gauge::default();
        registry.register(
            "anteroom_sse_streams",
            "Waiting pages' live streams (Server-Sent Events) open on this replica",
            open_streams.clone(),
        );
        let bypass = Family::default();
        registry.register(
            "anteroom_bypass_requests",
            "Requests proxied straight through under bypass_paths (and CORS preflights), by room",
            bypass.clone(),
        );
        let inflight = Family::default();
        registry.register(
            "anteroom_origin_inflight",
            "Requests in flight to the origin under max_inflight on this replica, by room",
            inflight.clone(),
        );
        let inflight_rejected = Family::default();
        registry.register(
            "anteroom_inflight_rejected",
            "Requests answered 503 after waiting inflight_wait for an in-flight slot, by room",
            inflight_rejected.clone(),
        );
        registry.register(
            "anteroom_time_in_line_seconds",
            "Time from joining the line to being admitted out of it by an admission pass, by room (observed by the replica whose pass admitted the visitor)",
            admission.time_in_line().clone(),
        );
        let challenges = ChallengeMetrics::register(&mut registry);
        let censuses = [Census::default(), Census::default()];
        registry.register_collector(Box::new(replica::ReplicaCollector {
            censuses: censuses.clone(),
        }));
        registry.register_collector(Box::new(process::ProcessCollector));
        let proxied_by_room = rooms
            .iter()
            .map(|room| (room.clone(), std::array::from_fn(|_| OnceLock::new())))
            .collect();
        let rooms = Arc::new(arc_swap::ArcSwap::from_pointee(rooms));
        registry.register_collector(Box::new(CacheCollector {
            admission,
            rooms: rooms.clone(),
            fail_open,
        }));
        if let Some(abuse) = abuse {
            registry.register_collector(Box::new(AbuseCollector(abuse)));
        }
        Metrics {
            registry,
            rooms,
            proxied,
            proxied_by_room,
            open_streams,
            bypass,
            inflight,
            inflight_rejected,
            censuses,
            challenges,
        }
    }

    /// The configured rooms from the next scrape on (a reload added or removed some). A
    /// room added has no per-status fast path for its proxy histograms: it takes the
    /// family's, which is the same series.
    pub fn set_rooms(&self, rooms: Vec<String>) {
        self.rooms.store(Arc::new(rooms));
    }

    /// Where `listener` counts its open connections and streams (its
    /// [`crate::server::ServerLimits::census`]).
    pub fn census(&self, listener: Listener) -> Census {
        let index = Listener::ALL
            .iter()
            .position(|&l| l == listener)
            .unwrap_or(0);
        self.censuses[index].clone()
    }

    /// One request passed straight through (`bypass_paths`, a CORS preflight).
    pub fn count_bypass(&self, room: &str) {
        self.bypass.get_or_create(&label(room)).inc();
    }

    /// The gauge of requests in flight to `room`'s origin under `max_inflight`.
    pub fn inflight_gauge(&self, room: &str) -> Gauge {
        self.inflight.get_or_create(&label(room)).clone()
    }

    /// One request refused after waiting `inflight_wait`.
    pub fn count_inflight_rejected(&self, room: &str) {
        self.inflight_rejected.get_or_create(&label(room)).inc();
    }

    /// The counter of access-log lines dropped because the writer was behind (registered
    /// only when `access_log` is on).
    pub fn access_log_dropped(&mut self) -> prometheus_client::metrics::counter::Counter {
        let dropped = prometheus_client::metrics::counter::Counter::default();
        self.registry.register(
            "anteroom_access_log_dropped",
            "Access log lines dropped because the writer fell behind (the request was served)",
            dropped.clone(),
        );
        dropped
    }

    /// The counter of a banned client's access-log lines not written beyond its 10 a
    /// second (registered only when `access_log` is on).
    pub fn access_log_suppressed(&mut self) -> prometheus_client::metrics::counter::Counter {
        let suppressed = prometheus_client::metrics::counter::Counter::default();
        self.registry.register(
            "anteroom_access_log_suppressed",
            "Access log lines of banned clients not written beyond 10 a second per client",
            suppressed.clone(),
        );
        suppressed
    }

    /// Runs `proxy` and records how long it took to produce a response, by status class.
    pub async fn time_proxy(
        &self,
        room: &str,
        proxy: impl Future<Output = Response<Body>>,
    ) -> Response<Body> {
        let started = Instant::now();
        let response = proxy.await;
        self.observe_proxy(room, response.status(), started.elapsed());
        response
    }

    /// Records one proxied request of `room`: its status class and how long it took.
    pub fn observe_proxy(&self, room: &str, status: StatusCode, took: Duration) {
        let class = match status.as_u16() / 100 {
            n @ 1..=5 => usize::from(n) - 1,
            _ => STATUS_CLASSES.len() - 1,
        };
        let series = || {
            self.proxied
                .get_or_create(&ProxyLabels {
                    room: room.to_owned(),
                    status_class: STATUS_CLASSES[class],
                })
                .clone()
        };
        let took = took.as_secs_f64();
        match self.proxied_by_room.get(room) {
            Some(classes) => classes[class].get_or_init(series).observe(took),
            None => series().observe(took),
        }
    }

    /// The whole registry in the Prometheus text format.
    pub fn render(&self, open_streams: usize) -> String {
        self.open_streams
            .set(i64::try_from(open_streams).unwrap_or(i64::MAX));
        let mut out = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

/// The abuse registry's counters, read at scrape time.
struct AbuseCollector(Arc<AbuseRegistry>);

impl std::fmt::Debug for AbuseCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AbuseCollector")
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

impl Collector for AbuseCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let abuse = &self.0;
        gauge(
            &mut encoder,
            "anteroom_bans_active",
            "Bans in force (addresses and ranges), as this replica enforces them.",
            i64::try_from(abuse.bans_active()).unwrap_or(i64::MAX),
        )?;
        for (name, help, value) in [
            (
                "anteroom_banned_requests",
                "Requests this replica refused because their client is banned.",
                abuse.banned_requests_total(),
            ),
            (
                "anteroom_bans_displaced",
                "Automatic and ban-path bans removed early to make room for newer ones at abuse.max_bans.",
                abuse.bans_displaced_total(),
            ),
            (
                "anteroom_bans_refused",
                "Automatic bans not made because abuse.max_bans operator bans are active.",
                abuse.bans_refused_total(),
            ),
        ] {
            let counter = ConstCounter::new(value);
            let metric = encoder.encode_descriptor(name, help, None, counter.metric_type())?;
            counter.encode(metric)?;
        }
        let mut family = encoder.encode_descriptor(
            "anteroom_strikes",
            "Strikes recorded against clients by this replica, by reason.",
            None,
            MetricType::Counter,
        )?;
        for reason in StrikeReason::ALL {
            let counter = ConstCounter::new(abuse.strikes_total(reason));
            let labels = ReasonLabel {
                reason: reason.as_str(),
            };
            counter.encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

/// Encodes the cached room statistics and store health on each scrape.
struct CacheCollector {
    admission: Arc<Admission>,
    rooms: Arc<arc_swap::ArcSwap<Vec<String>>>,
    fail_open: bool,
}

impl std::fmt::Debug for CacheCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheCollector")
            .field("rooms", &self.rooms)
            .finish_non_exhaustive()
    }
}

enum Value {
    Gauge(i64),
    Float(f64),
    Counter(u64),
}

/// Encodes one gauge without labels: `name`, its `help` and `value`.
fn gauge<N>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: N,
) -> Result<(), std::fmt::Error>
where
    ConstGauge<N>: EncodeMetric,
{
    let gauge = ConstGauge::new(value);
    let metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
    gauge.encode(metric)
}

fn label(room: &str) -> RoomLabel {
    RoomLabel {
        room: room.to_owned(),
    }
}

fn int(n: u64) -> Option<Value> {
    Some(Value::Gauge(i64::try_from(n).unwrap_or(i64::MAX)))
}

impl Collector for CacheCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let health = self.admission.health();
        gauge(
            &mut encoder,
            "anteroom_store_up",
            "1 when the queue store answered its last operation, 0 during an outage.",
            i64::from(health.is_up()),
        )?;
        gauge(
            &mut encoder,
            "anteroom_fail_open_enabled",
            "1 when fail_open is configured.",
            i64::from(self.fail_open),
        )?;
        gauge(
            &mut encoder,
            "anteroom_fail_open",
            "1 while failing open: the store has been down past fail_open_after and every visitor is proxied unqueued.",
            i64::from(health.failing_open()),
        )?;
        gauge(
            &mut encoder,
            "anteroom_store_down_seconds",
            "How long the queue store has been unreachable (0 while it answers).",
            health.down_for().map_or(0.0, |d| d.as_secs_f64()),
        )?;

        for (name, help, n) in [
            (
                "anteroom_events_published",
                "Queue events the Kafka broker acknowledged",
                self.admission.events().published(),
            ),
            (
                "anteroom_events_dropped",
                "Queue events dropped: buffer full, broker unreachable or delivery failed",
                self.admission.events().dropped(),
            ),
        ] {
            let counter = prometheus_client::metrics::counter::ConstCounter::new(n);
            let metric = encoder.encode_descriptor(name, help, None, counter.metric_type())?;
            counter.encode(metric)?;
        }

        let rooms = self.rooms.load();
        let cached: Vec<_> = rooms
            .iter()
            .filter_map(|room| Some((room.as_str(), self.admission.cached_stats(room)?)))
            .collect();
        type Extract = fn(&crate::admission::CachedStats) -> Option<Value>;
        let families: [(&str, &str, Extract); 23] = [
            ("anteroom_waiting", "Visitors in line", |c| {
                int(c.stats.waiting)
            }),
            (
                "anteroom_active",
                "Visitors on the site (admitted sessions)",
                |c| int(c.stats.active),
            ),
            ("anteroom_max_active", "Configured concurrency limit", |c| {
                int(c.stats.settings.max_active)
            }),
            ("anteroom_rate", "Configured admissions per second", |c| {
                Some(Value::Float(c.stats.settings.rate))
            }),
            // Closed-loop admission: the rate passes actually use (the configured
            // one without `adaptive:`), and the origin's p95 the last decision saw.
            (
                "anteroom_effective_rate",
                "Admissions per second actually used: the configured rate, or lower while closed-loop admission holds it down",
                |c| Some(Value::Float(c.effective_rate())),
            ),
            (
                "anteroom_origin_p95_seconds",
                "Origin p95 time to response headers over the closed-loop window, every replica's observations merged",
                |c| {
                    c.adaptive
                        .as_ref()
                        .and_then(|a| a.origin_p95_ms)
                        .map(|ms| Value::Float(ms as f64 / 1000.0))
                },
            ),
            ("anteroom_paused", "1 while the room is paused", |c| {
                int(u64::from(c.stats.settings.paused))
            }),
            (
                "anteroom_session_ttl_seconds",
                "Idle time after which an admitted session gives its slot back",
                |c| Some(Value::Float(c.stats.settings.session_ttl.as_secs_f64())),
            ),
            (
                "anteroom_abandon_after_seconds",
                "Heartbeat silence after which a waiting visitor leaves the line",
                |c| Some(Value::Float(c.stats.settings.abandon_after.as_secs_f64())),
            ),
            (
                "anteroom_observed_admission_rate",
                "Admissions per second observed over the last minute",
                |c| Some(Value::Float(c.observed_rate().unwrap_or(0.0))),
            ),
            (
                "anteroom_admission_pass_seconds",
                "Duration of this replica's last admission pass",
                |c| c.last_pass.map(|d| Value::Float(d.as_secs_f64())),
            ),
            (
                "anteroom_stats_age_seconds",
                "Age of the cached statistics these metrics come from (grows during a store outage)",
                |c| Some(Value::Float(c.read_at.elapsed().as_secs_f64())),
            ),
            ("anteroom_joined", "Entries into the line", |c| {
                Some(Value::Counter(c.stats.total_joined))
            }),
            (
                "anteroom_admitted",
                "Visitors admitted (from the line or by the fast path)",
                |c| Some(Value::Counter(c.stats.total_admitted)),
            ),
            (
                "anteroom_expired",
                "Sessions reclaimed after session_ttl",
                |c| Some(Value::Counter(c.stats.total_expired)),
            ),
            (
                "anteroom_abandoned",
                "Waiting visitors dropped after abandon_after",
                |c| Some(Value::Counter(c.stats.total_abandoned)),
            ),
            ("anteroom_refused", "Visitors refused (join limit)", |c| {
                Some(Value::Counter(c.stats.total_refused))
            }),
            (
                "anteroom_passed_through",
                "Visitors admitted by the passthrough mode, whatever the limits (in anteroom_admitted too)",
                |c| Some(Value::Counter(c.stats.total_passed_through)),
            ),
            // The honest ETA, as this replica saw it over the last hour: the two
            // ratios are absent while nobody shown a range has been admitted.
            (
                "anteroom_eta_admitted",
                "Visitors admitted in the last hour after this replica showed them a range",
                |c| int(c.eta.admitted),
            ),
            (
                "anteroom_eta_within_range_ratio",
                "Share of them admitted within the range first shown, over the last hour",
                |c| c.eta.within_range.map(Value::Float),
            ),
            (
                "anteroom_eta_median_error_seconds",
                "Median distance between their wait and the middle of the range first shown, over the last hour",
                |c| c.eta.median_error_secs.map(Value::Float),
            ),
            (
                "anteroom_eta_forgotten",
                "Waiting visitors whose first range this replica forgot before they were admitted (its cap, or waiting over 12 hours)",
                |c| Some(Value::Counter(c.eta_forgotten)),
            ),
            (
                "anteroom_eta_revised",
                "Waiting visitors whose promised range was made again because the room's limits moved by more than its margin",
                |c| Some(Value::Counter(c.eta_revised)),
            ),
        ];
        for (name, help, extract) in &families {
            let values: Vec<(&str, Value)> = cached
                .iter()
                .filter_map(|(room, c)| Some((*room, extract(c)?)))
                .collect();
            let Some((_, first)) = values.first() else {
                continue;
            };
            let metric_type = match first {
                Value::Gauge(_) | Value::Float(_) => MetricType::Gauge,
                Value::Counter(_) => MetricType::Counter,
            };
            let help = format!("{help}.");
            let mut family = encoder.encode_descriptor(name, &help, None, metric_type)?;
            for (room, value) in &values {
                let labels = [("room", *room)];
                let metric = family.encode_family(&labels)?;
                match value {
                    Value::Gauge(v) => ConstGauge::new(*v).encode(metric)?,
                    Value::Float(v) => ConstGauge::new(*v).encode(metric)?,
                    Value::Counter(v) => ConstCounter::new(*v).encode(metric)?,
                }
            }
        }
        if !cached.is_empty() {
            // One series per phase, 1 for the room's current one: an alert can ask
            // `anteroom_room_phase{phase="queueing"} == 1` without knowing the others.
            let mut family = encoder.encode_descriptor(
                "anteroom_room_phase",
                "1 for the room's current phase (idle, pre_queue, draw, queueing, paused, passthrough, sold_out, closed), 0 for the others.",
                None,
                MetricType::Gauge,
            )?;
            for (room, c) in &cached {
                let now = c.stats.phase();
                for phase in RoomPhase::ALL {
                    let labels = [("room", *room), ("phase", phase.as_str())];
                    let metric = family.encode_family(&labels)?;
                    ConstGauge::new(i64::from(phase == now)).encode(metric)?;
                }
            }
        }
        Ok(())
    }
}
