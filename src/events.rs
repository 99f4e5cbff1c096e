//! Queue events for a side channel: JSON to Kafka, strictly best effort.
//!
//! Admission and pages hand events to an [`EventSink`], which only ever does a `try_send`
//! on a bounded channel: a full channel, a slow broker or a dead one drops events (counted,
//! logged at most every 10 s) and never blocks or slows a visitor. With no brokers
//! configured there is no channel and no producer at all.
//!
//! `kafka.properties` passes librdkafka settings through, so a managed Kafka with
//! SASL and TLS works (`security.protocol`, `sasl.mechanism`, `sasl.username`,
//! `ssl.ca.location`, …); `ANTEROOM_KAFKA_SASL_PASSWORD` supplies `sasl.password`. Secrets
//! are never printed: [`KafkaProperties`]'s `Debug` and every error message mask them.
//!
//! The one connection not on rustls: librdkafka does its TLS with OpenSSL and cannot use
//! rustls, so this connection uses OpenSSL, built from source into the binary
//! (rdkafka's `ssl-vendored`, so building needs no libssl-dev). SASL PLAIN and SCRAM come
//! with it; GSSAPI/Kerberos (libsasl2) is not built in. Because that OpenSSL does not know
//! the distribution's CA directory, anteroom sets `ssl.ca.location: probe` (librdkafka looks
//! in the usual system places) for TLS connections unless `ssl.ca.location` or `ssl.ca.pem`
//! is given.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::log_limiter::LogLimiter;
use crate::queue::VisitorId;

/// `kafka.properties`: librdkafka settings (name → value), applied after anteroom's own so
/// they may override them (see [`ANTEROOM_DEFAULTS`]), except the broker list, which only
/// `kafka.brokers` sets.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct KafkaProperties(pub std::collections::BTreeMap<String, String>);

/// Settings anteroom gives the producer before `kafka.properties`; each may be overridden.
pub const ANTEROOM_DEFAULTS: [(&str, &str); 4] = [
    ("client.id", "anteroom"),
    // Bounded in rdkafka too: beyond this, sends fail fast and count as dropped.
    ("queue.buffering.max.messages", "100000"),
    ("message.timeout.ms", "10000"),
    ("linger.ms", "20"),
];

/// Properties `kafka.properties` may not set: the brokers come from `kafka.brokers`, so
/// there is one place that says where events go.
pub const RESERVED_PROPERTIES: [&str; 2] = ["bootstrap.servers", "metadata.broker.list"];

impl KafkaProperties {
    /// Whether a property's value is a secret (passwords, private keys, OAuth secrets):
    /// such values are shown as `***` everywhere.
    pub fn is_secret(name: &str) -> bool {
        let n = name.to_ascii_lowercase();
        n.contains("password")
            || n.contains("secret")
            || n == "ssl.key.pem"
            || n == "sasl.oauthbearer.config"
    }

    /// `text` with every secret value in it replaced by `***`.
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for (k, v) in &self.0 {
            if Self::is_secret(k) && !v.is_empty() {
                out = out.replace(v.as_str(), "***");
            }
        }
        out
    }

    /// `name=value` pairs for display, secrets masked.
    pub fn shown(&self) -> Vec<String> {
        self.0
            .iter()
            .map(|(k, v)| {
                let v = if Self::is_secret(k) {
                    "***"
                } else {
                    v.as_str()
                };
                format!("{k}={v}")
            })
            .collect()
    }
}

impl std::fmt::Debug for KafkaProperties {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.shown()).finish()
    }
}

/// Event publishing. No brokers: events are not published.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KafkaConfig {
    /// `kafka.brokers` (`host:port`); empty: events are not published.
    pub brokers: Vec<String>,
    /// `kafka.topic`.
    pub topic: String,
    /// `kafka.properties`, with `sasl.password` from `ANTEROOM_KAFKA_SASL_PASSWORD`.
    pub properties: KafkaProperties,
}

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig {
            brokers: Vec::new(),
            topic: "anteroom.events".to_string(),
            properties: Default::default(),
        }
    }
}

/// Checks `kafka.properties` the way the producer will use them, for `anteroom check`:
/// librdkafka itself is handed the settings, so a misspelt name or a bad value is refused
/// here, not at the first event. Returns the property at fault (or `""`) and why, secrets
/// masked.
pub fn check_properties(config: &KafkaConfig) -> Result<(), (String, String)> {
    for name in config.properties.0.keys() {
        if RESERVED_PROPERTIES.contains(&name.as_str()) {
            return Err((
                name.clone(),
                "cannot be set here; list the brokers under kafka.brokers".to_owned(),
            ));
        }
    }
    #[cfg(feature = "kafka")]
    {
        kafka::check(config)
    }
    #[cfg(not(feature = "kafka"))]
    {
        Ok(())
    }
}

/// Events buffered in-process before new ones are dropped.
pub const CHANNEL_CAPACITY: usize = 65_536;

/// What an [`Event`] reports; published as its snake_case `type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A visitor took a place in line (or entered the draw).
    VisitorJoined,
    /// A visitor was let onto the site, from the line or by the fast path.
    VisitorAdmitted,
    /// A waiting visitor stopped sending heartbeats and left the line.
    VisitorAbandoned,
    /// An admitted session idled past `session_ttl` and gave its slot back.
    SessionExpired,
    /// An operator changed a room's runtime settings; `detail` has the old and new values.
    ConfigChanged,
    /// A client (address or range) was banned; `client`, `reason`, `until`.
    ClientBanned,
    /// Its ban was lifted or ran out.
    ClientUnbanned,
    /// A waiting visitor put at position 1: moved by an admin, or by a
    /// priority grant.
    VisitorPrioritized,
}

/// One event as published.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// The room it happened in; empty for events about a client rather than a room.
    pub room: String,
    /// The visitor concerned, for visitor events.
    pub visitor_id: Option<VisitorId>,
    /// When the event was created on this replica.
    pub ts: SystemTime,
    /// Extra fields (a config change's old and new values).
    pub detail: Option<serde_json::Value>,
}

impl Event {
    /// An event of `kind` about one visitor of `room`, stamped now.
    pub fn visitor(kind: EventKind, room: &str, visitor: VisitorId) -> Event {
        Event {
            kind,
            room: room.to_owned(),
            visitor_id: Some(visitor),
            ts: SystemTime::now(),
            detail: None,
        }
    }

    /// A settings change in `room`, with its old and new values as `detail`, stamped now.
    pub fn config_changed(room: &str, detail: serde_json::Value) -> Event {
        Event {
            kind: EventKind::ConfigChanged,
            room: room.to_owned(),
            visitor_id: None,
            ts: SystemTime::now(),
            detail: Some(detail),
        }
    }

    /// `client_banned` / `client_unbanned`: not about one room, so `room` is
    /// empty; `client` is the banned address or range, `until` RFC 3339 or null.
    pub fn abuse(event: &crate::abuse::AbuseEvent) -> Event {
        let ban = event.ban();
        let kind = match event {
            crate::abuse::AbuseEvent::Banned(_) => EventKind::ClientBanned,
            _ => EventKind::ClientUnbanned,
        };
        let until = ban.until_ms.map(|ms| {
            humantime::format_rfc3339_millis(
                std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms),
            )
            .to_string()
        });
        Event {
            kind,
            room: String::new(),
            visitor_id: None,
            ts: SystemTime::now(),
            detail: Some(serde_json::json!({
                "client": ban.target.to_string(),
                "reason": ban.reason,
                "source": ban.source.as_str(),
                "action": event.action(),
                "until": until,
            })),
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

    /// The JSON body: `type`, `room`, `visitor_id` and its `ref` (the reference the visitor's
    /// page shows, which support is given) where there is one, `ts` in RFC 3339 with
    /// milliseconds, and any detail fields.
    pub fn to_json(&self) -> String {
        let mut body = serde_json::json!({
            "type": self.kind,
            "room": self.room,
            "ts": humantime::format_rfc3339_millis(self.ts).to_string(),
        });
        if let Some(v) = self.visitor_id {
            body["visitor_id"] = v.to_hex().into();
            body["ref"] = v.reference().as_str().into();
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

/// Counters of the side channel, shared by the sink and its publisher: events published and dropped.
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

    /// Counts `n` events acknowledged by the broker.
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

    /// Whether events go anywhere (brokers are configured).
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

    /// The counters, for the publisher to update.
    pub fn stats(&self) -> Arc<SinkStats> {
        self.stats.clone()
    }
}

/// Why the Kafka publisher could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Brokers are configured, but the binary was built without Kafka support.
    #[error("kafka.brokers: this binary was built without the `kafka` feature")]
    NotBuiltIn,
    /// librdkafka refused to create the producer; the message has any secret of
    /// `kafka.properties` masked.
    #[error("kafka: {0}")]
    Kafka(String),
    /// The producer's thread could not be spawned.
    #[error("kafka: cannot start the producer thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// Starts the Kafka publisher for `config`, or a disabled sink when no brokers are set.
pub fn start(config: &KafkaConfig) -> Result<EventSink, StartError> {
    if config.brokers.is_empty() {
        return Ok(EventSink::disabled());
    }
    #[cfg(feature = "kafka")]
    {
        kafka::start(config)
    }
    #[cfg(not(feature = "kafka"))]
    {
        Err(StartError::NotBuiltIn)
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

    use super::{ANTEROOM_DEFAULTS, CHANNEL_CAPACITY, EventSink, KafkaConfig, SinkStats};
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

    /// The producer's settings: the brokers, anteroom's defaults, then `kafka.properties`.
    pub fn client_config(config: &KafkaConfig) -> ClientConfig {
        let mut client = ClientConfig::new();
        client.set("bootstrap.servers", config.brokers.join(","));
        for (k, v) in ANTEROOM_DEFAULTS {
            client.set(k, v);
        }
        let props = &config.properties.0;
        let tls = props
            .get("security.protocol")
            .is_some_and(|p| p.to_ascii_lowercase().contains("ssl"));
        if tls && !props.contains_key("ssl.ca.location") && !props.contains_key("ssl.ca.pem") {
            // The vendored OpenSSL's default CA path is not the distribution's.
            client.set("ssl.ca.location", "probe");
        }
        for (k, v) in props {
            client.set(k, v);
        }
        client
    }

    /// Creates (and drops) a producer with `config`'s settings: librdkafka refuses unknown
    /// names and bad values when they are set, and checks the rest (SASL mechanism, CA
    /// files, keys) when the client is created. Nothing is sent; the producer is dropped
    /// before it can matter.
    pub fn check(config: &KafkaConfig) -> Result<(), (String, String)> {
        if config.properties.0.is_empty() {
            return Ok(());
        }
        let props = &config.properties;
        let client = client_config(config);
        let blame = |message: &str| -> String {
            // librdkafka's messages name the property; find which of ours it is.
            props
                .0
                .keys()
                .filter(|k| message.contains(k.as_str()))
                .max_by_key(|k| k.len())
                .cloned()
                .unwrap_or_default()
        };
        match client.create::<BaseProducer>() {
            Ok(_producer) => Ok(()),
            Err(KafkaError::ClientConfig(_, description, key, _value)) => {
                // The value is left out: it may be a secret.
                Err((key, props.redact(&description)))
            }
            Err(KafkaError::ClientCreation(message)) => {
                Err((blame(&message), props.redact(&message)))
            }
            Err(other) => {
                let message = other.to_string();
                Err((blame(&message), props.redact(&message)))
            }
        }
    }

    pub fn start(config: &KafkaConfig) -> Result<EventSink, super::StartError> {
        let (sink, rx) = EventSink::channel(CHANNEL_CAPACITY);
        let producer: BaseProducer<Reports> = client_config(config)
            .create_with_context(Reports(
                sink.stats(),
                LogLimiter::new(std::time::Duration::from_secs(10)),
            ))
            .map_err(|e| super::StartError::Kafka(config.properties.redact(&e.to_string())))?;
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
    fn json_has_the_documented_fields() {
        let v = VisitorId([0xab; 16]);
        let mut event = Event::visitor(EventKind::VisitorJoined, "main", v);
        event.ts = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        let json: serde_json::Value = serde_json::from_str(&event.to_json()).unwrap();
        assert_eq!(json["type"], "visitor_joined");
        assert_eq!(json["room"], "main");
        assert_eq!(json["visitor_id"], "ab".repeat(16));
        assert_eq!(json["ref"], v.reference().as_str());
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
