//! Queue events for a side channel (SPEC §9): JSON to Kafka, strictly best effort.
//!
//! Admission and pages hand events to an [`EventSink`], which only ever does a `try_send`
//! on a bounded channel: a full channel, a slow broker or a dead one drops events (counted,
//! logged at most every 10 s) and never blocks or slows a visitor. With no brokers
//! configured there is no channel and no producer at all.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::log_limiter::LogLimiter;
use crate::queue::VisitorId;

/// Events buffered in-process before new ones are dropped.
pub const CHANNEL_CAPACITY: usize = 65_536;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    VisitorJoined,
    VisitorAdmitted,
    VisitorAbandoned,
    SessionExpired,
    ConfigChanged,
}

/// One event as published.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub kind: EventKind,
    pub room: String,
    pub visitor_id: Option<VisitorId>,
    pub ts: SystemTime,
    /// Extra fields (a config change's old and new values).
    pub detail: Option<serde_json::Value>,
}

impl Event {
    pub fn visitor(kind: EventKind, room: &str, visitor: VisitorId) -> Event {
        Event {
            kind,
            room: room.to_owned(),
            visitor_id: Some(visitor),
            ts: SystemTime::now(),
            detail: None,
        }
    }

    pub fn config_changed(room: &str, detail: serde_json::Value) -> Event {
        Event {
            kind: EventKind::ConfigChanged,
            room: room.to_owned(),
            visitor_id: None,
            ts: SystemTime::now(),
            detail: Some(detail),
        }
    }

    /// The message key, `room:visitor_id` (or just the room), so one visitor's events stay
    /// in order on one partition.
    pub fn key(&self) -> String {
        match self.visitor_id {
            Some(v) => format!("{}:{v}", self.room),
            None => self.room.clone(),
        }
    }

    /// The JSON body: `type`, `room`, `visitor_id` where there is one, `ts` in RFC 3339 with
    /// milliseconds, and any detail fields.
    pub fn to_json(&self) -> String {
        let mut body = serde_json::json!({
            "type": self.kind,
            "room": self.room,
            "ts": humantime::format_rfc3339_millis(self.ts).to_string(),
        });
        if let Some(v) = self.visitor_id {
            body["visitor_id"] = v.to_hex().into();
        }
        if let Some(serde_json::Value::Object(detail)) = &self.detail {
            for (k, v) in detail {
                body[k] = v.clone();
            }
        }
        body.to_string()
    }
}

/// Where the rest of anteroom hands events. Cheap to clone; never blocks.
#[derive(Clone, Default)]
pub struct EventSink {
    tx: Option<std::sync::mpsc::SyncSender<Event>>,
    stats: Arc<SinkStats>,
}

pub struct SinkStats {
    published: AtomicU64,
    dropped: AtomicU64,
    drop_log: LogLimiter,
}

impl Default for SinkStats {
    fn default() -> Self {
        SinkStats {
            published: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            drop_log: LogLimiter::new(Duration::from_secs(10)),
        }
    }
}

impl SinkStats {
    /// Counts `n` events lost, logging at most every 10 s.
    pub fn record_dropped(&self, n: u64, why: &str) {
        let total = self.dropped.fetch_add(n, Ordering::Relaxed) + n;
        if self.drop_log.allow() {
            tracing::warn!(
                total_dropped = total,
                reason = why,
                "queue events dropped (the side channel is behind or its broker is down)"
            );
        }
    }

    pub fn record_published(&self, n: u64) {
        self.published.fetch_add(n, Ordering::Relaxed);
    }
}

impl EventSink {
    /// A sink that publishes nowhere: no brokers configured.
    pub fn disabled() -> Self {
        EventSink::default()
    }

    /// A sink feeding a bounded channel; the returned receiver belongs to a publisher.
    pub fn channel(capacity: usize) -> (Self, std::sync::mpsc::Receiver<Event>) {
        let (tx, rx) = std::sync::mpsc::sync_channel(capacity);
        (
            EventSink {
                tx: Some(tx),
                stats: Arc::default(),
            },
            rx,
        )
    }

    pub fn is_enabled(&self) -> bool {
        self.tx.is_some()
    }

    /// Hands one event over without waiting; drops it (counted) if the channel is full.
    pub fn publish(&self, event: Event) {
        let Some(tx) = &self.tx else { return };
        if let Err(e) = tx.try_send(event) {
            let why = match e {
                std::sync::mpsc::TrySendError::Full(_) => "buffer full",
                std::sync::mpsc::TrySendError::Disconnected(_) => "publisher stopped",
            };
            self.stats.record_dropped(1, why);
        }
    }

    /// Events dropped so far (buffer full, broker unreachable, delivery failed).
    pub fn dropped(&self) -> u64 {
        self.stats.dropped.load(Ordering::Relaxed)
    }

    /// Events the broker acknowledged.
    pub fn published(&self) -> u64 {
        self.stats.published.load(Ordering::Relaxed)
    }

    pub fn stats(&self) -> Arc<SinkStats> {
        self.stats.clone()
    }
}

/// Starts the Kafka publisher for `config`, or a disabled sink when no brokers are set.
pub fn start(config: &crate::config::KafkaConfig) -> anyhow::Result<EventSink> {
    if config.brokers.is_empty() {
        return Ok(EventSink::disabled());
    }
    #[cfg(feature = "kafka")]
    {
        kafka::start(config)
    }
    #[cfg(not(feature = "kafka"))]
    {
        anyhow::bail!("kafka.brokers: this binary was built without the `kafka` feature")
    }
}

#[cfg(feature = "kafka")]
mod kafka {
    //! The producer thread: drains the channel into rdkafka's own bounded queue and polls
    //! for delivery reports. A thread, not a task, because rdkafka's poll is blocking.

    use std::sync::Arc;
    use std::time::Duration;

    use rdkafka::ClientContext;
    use rdkafka::config::ClientConfig;
    use rdkafka::error::KafkaError;
    use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
    use rdkafka::types::RDKafkaErrorCode;

    use super::{CHANNEL_CAPACITY, EventSink, SinkStats};
    use crate::log_limiter::LogLimiter;

    struct Reports(Arc<SinkStats>, LogLimiter);

    impl ClientContext for Reports {
        fn error(&self, error: KafkaError, reason: &str) {
            // "All brokers down" repeats every few seconds for as long as the broker is
            // gone; once every 10 s is enough to know.
            if let Some(suppressed) = self.1.allow_counted() {
                tracing::warn!(%error, reason, suppressed, "Kafka producer error; events are dropped while it lasts");
            }
        }

        fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
            // librdkafka repeats broker-down messages every few seconds; keep them at debug
            // so the drop counter's rate-limited warning is the one loud signal.
            tracing::debug!(?level, fac, "{log_message}");
        }
    }

    impl ProducerContext for Reports {
        type DeliveryOpaque = ();
        fn delivery(&self, result: &DeliveryResult<'_>, _: Self::DeliveryOpaque) {
            match result {
                Ok(_) => self.0.record_published(1),
                Err((e, _)) => self.0.record_dropped(1, &format!("delivery failed: {e}")),
            }
        }
    }

    pub fn start(config: &crate::config::KafkaConfig) -> anyhow::Result<EventSink> {
        let (sink, rx) = EventSink::channel(CHANNEL_CAPACITY);
        let producer: BaseProducer<Reports> = ClientConfig::new()
            .set("bootstrap.servers", config.brokers.join(","))
            .set("client.id", "anteroom")
            // Bounded in rdkafka too: beyond this, sends fail fast and count as dropped.
            .set("queue.buffering.max.messages", "100000")
            .set("message.timeout.ms", "10000")
            .set("linger.ms", "20")
            .create_with_context(Reports(
                sink.stats(),
                LogLimiter::new(std::time::Duration::from_secs(10)),
            ))?;
        let topic = config.topic.clone();
        let stats = sink.stats();
        std::thread::Builder::new()
            .name("anteroom-events".into())
            .spawn(move || {
                loop {
                    match rx.recv_timeout(Duration::from_millis(100)) {
                        Ok(event) => {
                            let key = event.key();
                            let payload = event.to_json();
                            let record = BaseRecord::to(&topic).key(&key).payload(&payload);
                            if let Err((e, _)) = producer.send(record) {
                                let why = match e {
                                    KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull) => {
                                        "producer queue full".to_owned()
                                    }
                                    other => other.to_string(),
                                };
                                stats.record_dropped(1, &why);
                            }
                        }
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                    }
                    producer.poll(Duration::ZERO);
                }
                // Give what is in flight a moment at shutdown, without holding it up.
                let _ = producer.flush(Duration::from_secs(2));
            })?;
        Ok(sink)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_the_spec_fields() {
        let v = VisitorId([0xab; 16]);
        let mut event = Event::visitor(EventKind::VisitorJoined, "main", v);
        event.ts = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        let json: serde_json::Value = serde_json::from_str(&event.to_json()).unwrap();
        assert_eq!(json["type"], "visitor_joined");
        assert_eq!(json["room"], "main");
        assert_eq!(json["visitor_id"], "ab".repeat(16));
        assert_eq!(json["ts"], "2023-11-14T22:13:20.123Z");
        assert_eq!(event.key(), format!("main:{}", "ab".repeat(16)));
        let changed = Event::config_changed(
            "main",
            serde_json::json!({"field": "rate", "old": 1, "new": 2}),
        );
        let json: serde_json::Value = serde_json::from_str(&changed.to_json()).unwrap();
        assert_eq!(json["type"], "config_changed");
        assert!(json.get("visitor_id").is_none());
        assert_eq!(json["new"], 2);
    }

    #[test]
    fn a_full_channel_drops_and_counts_without_blocking() {
        let (sink, rx) = EventSink::channel(2);
        for _ in 0..5 {
            sink.publish(Event::visitor(
                EventKind::VisitorJoined,
                "main",
                VisitorId::random(),
            ));
        }
        assert_eq!(sink.dropped(), 3);
        drop(rx);
        sink.publish(Event::visitor(
            EventKind::VisitorJoined,
            "main",
            VisitorId::random(),
        ));
        assert_eq!(
            sink.dropped(),
            4,
            "a stopped publisher also counts as dropped"
        );
        let disabled = EventSink::disabled();
        disabled.publish(Event::visitor(
            EventKind::VisitorJoined,
            "main",
            VisitorId::random(),
        ));
        assert_eq!(disabled.dropped(), 0, "no brokers: nothing to drop");
    }
}
