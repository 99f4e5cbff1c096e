//! What this replica is and what its listeners have open: `anteroom_build_info` (always 1,
//! its labels say which build is running, so a rollout shows as two series and a
//! dashboard can join on it) and, per listener, the open client connections and HTTP/2
//! streams, and the connections the server closed by reason ([`Census`], counted by the
//! accept loop and only read here).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use crate::server::{Census, Closed};

/// A listener of this replica, as the `listener` label names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listener {
    /// `listen`: the site and the waiting room.
    Public,
    /// `admin_listen`: the control room, the admin API and the metrics (when set apart).
    Admin,
}

impl Listener {
    /// Every listener, in the order [`ReplicaCollector`] keeps their censuses.
    pub const ALL: [Listener; 2] = [Listener::Public, Listener::Admin];

    /// The `listener` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Listener::Public => "public",
            Listener::Admin => "admin",
        }
    }
}

/// Encodes the build and the listeners' open connections and streams on each scrape.
#[derive(Debug)]
pub(super) struct ReplicaCollector {
    /// One census per listener, in [`Listener::ALL`]'s order.
    pub(super) censuses: [Census; 2],
}

impl Collector for ReplicaCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        {
            let mut build = encoder.encode_descriptor(
                "anteroom_build_info",
                "Always 1; its labels name the build: version, and whether the waiting page's front-end is built in.",
                None,
                MetricType::Gauge,
            )?;
            let labels = [
                ("version", env!("CARGO_PKG_VERSION")),
                (
                    "frontend",
                    if crate::http::pages::FRONTEND_BUILT_IN {
                        "built_in"
                    } else {
                        "plain"
                    },
                ),
            ];
            ConstGauge::new(1i64).encode(build.encode_family(&labels)?)?;
        }
        type Read = fn(&Census) -> u64;
        let families: [(&str, &str, Read); 2] = [
            (
                "anteroom_open_connections",
                "Client connections open on this replica, by listener (upgraded tunnels and held waiting-page streams included).",
                Census::connections,
            ),
            (
                "anteroom_open_http2_streams",
                "HTTP/2 streams (requests in flight on HTTP/2 connections) open on this replica, by listener.",
                Census::http2_streams,
            ),
        ];
        for (name, help, read) in families {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (listener, census) in Listener::ALL.iter().zip(&self.censuses) {
                let value = i64::try_from(read(census)).unwrap_or(i64::MAX);
                let labels = [("listener", listener.as_str())];
                ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
            }
        }
        let mut closed = encoder.encode_descriptor(
            "anteroom_connections_closed",
            "Client connections the server closed before or between requests, by listener and reason: head_timeout, idle_timeout, made_room (at max_connections), head_too_large (431 or 414), malformed (400), over_client_cap (at accept).",
            None,
            MetricType::Counter,
        )?;
        for (listener, census) in Listener::ALL.iter().zip(&self.censuses) {
            // Every reason from the start, at 0, so a rate over the first ones is right.
            for reason in Closed::ALL {
                let labels = [("listener", listener.as_str()), ("reason", reason.as_str())];
                ConstCounter::new(census.closed(reason)).encode(closed.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}
