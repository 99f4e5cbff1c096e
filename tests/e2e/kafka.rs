//! Events to a real Kafka-protocol broker (tansu, memory storage) started by the test, read
//! back with a real Kafka client; and the broker killed mid-run without slowing a join.
#![cfg(feature = "kafka")]

use crate::common;

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use common::kafka::{Broker, TOPIC, read_events, tansu_binary};
use common::{Origin, client, config, start};

fn kafka_config(
    origin: &str,
    dir: &std::path::Path,
    broker: SocketAddr,
    room: &str,
) -> anteroom::config::Config {
    let mut config = config(origin, dir, room);
    config.kafka.brokers = vec![broker.to_string()];
    config.kafka.topic = TOPIC.to_owned();
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_reach_the_broker_with_their_fields() {
    let broker = Broker::start();
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    // One admitted on the spot, then a line; a short abandon_after so one is abandoned.
    let ar = start(&kafka_config(
        &origin.url(),
        dir.path(),
        broker.addr,
        "    rate: 0.01\n    max_active: 100\n    abandon_after: 1s",
    ))
    .await;
    let http = client();
    let url = format!("http://{}/", ar.addr);
    http.get(&url).send().await.unwrap();
    for _ in 0..3 {
        http.get(&url).send().await.unwrap();
    }
    let changed = http
        .put(format!(
            "http://{}/__anteroom/admin/api/rooms/main/config",
            ar.addr
        ))
        .bearer_auth(common::ADMIN_TOKEN)
        .body(r#"{"max_active": 50}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(changed.status(), 200);
    let broker_addr = broker.addr;
    let events = tokio::task::spawn_blocking(move || {
        read_events(broker_addr, Duration::from_secs(30), |seen| {
            let count = |t: &str| seen.iter().filter(|e| e["type"] == t).count();
            count("visitor_admitted") >= 1
                && count("visitor_joined") >= 3
                && count("visitor_abandoned") >= 3
        })
    })
    .await
    .unwrap();
    let count = |t: &str| events.iter().filter(|(_, e)| e["type"] == t).count();
    assert_eq!(count("visitor_admitted"), 1, "{events:?}");
    assert_eq!(count("visitor_joined"), 3, "{events:?}");
    assert_eq!(count("visitor_abandoned"), 3, "{events:?}");
    assert_eq!(count("config_changed"), 1, "{events:?}");
    for (key, event) in &events {
        assert_eq!(event["room"], "main");
        let ts = event["ts"].as_str().unwrap();
        assert!(
            humantime::parse_rfc3339(ts).is_ok() && ts.len() == "2026-01-01T00:00:00.000Z".len(),
            "ts {ts}"
        );
        if event["type"] == "config_changed" {
            assert_eq!(key, "main");
            assert!(event.get("visitor_id").is_none());
            assert_eq!(event["new"]["max_active"], 50, "{event}");
            continue;
        }
        let visitor = event["visitor_id"]
            .as_str()
            .expect("visitor events name the visitor");
        assert_eq!(visitor.len(), 32);
        assert_eq!(key, &format!("main:{visitor}"));
        let ts = event["ts"].as_str().unwrap();
        assert!(
            humantime::parse_rfc3339(ts).is_ok() && ts.len() == "2026-01-01T00:00:00.000Z".len(),
            "ts {ts}"
        );
    }
    ar.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_broker_drops_events_and_never_slows_a_join() {
    let broker = Broker::start();
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ar = start(&kafka_config(
        &origin.url(),
        dir.path(),
        broker.addr,
        // 200 joins from one address: over the default join limit.
        "    rate: 0.01\n    max_active: 100\n    join_limit_per_ip: 0\n    max_places_per_client: 0",
    ))
    .await;
    let http = client();
    let url = format!("http://{}/", ar.addr);
    http.get(&url).send().await.unwrap();
    drop(broker);
    let sink = ar.app.admission.events().clone();
    for i in 0..200 {
        let response = http
            .get(&url)
            .header("accept", "application/json")
            .send()
            .await
            .unwrap();
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(
            body["position"],
            i + 1,
            "joins carry on with the broker gone"
        );
    }
    // Undeliverable events are counted once rdkafka gives up on them.
    let deadline = Instant::now() + Duration::from_secs(30);
    while sink.dropped() < 200 {
        assert!(
            Instant::now() < deadline,
            "dropped events not counted: {}",
            sink.dropped()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        ar.app
            .admission
            .store_for_tests()
            .stats("main")
            .await
            .unwrap()
            .total_joined,
        200
    );
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn anteroom_starts_with_the_broker_down_from_the_start() {
    let nothing = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ar = start(&kafka_config(&origin.url(), dir.path(), nothing, "")).await;
    let response = client()
        .get(format!("http://{}/", ar.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    ar.shutdown().await.unwrap();
}

/// `kafka.properties` reach librdkafka: with SASL/SCRAM-SHA-512 set there, the producer
/// authenticates before sending. The memory-only tansu used here lists SCRAM-SHA-512 but
/// refuses the SASL handshake (and cannot serve TLS), so a real SASL or TLS delivery cannot
/// be shown with it; what this shows is that the settings are in force: the same broker that
/// takes plain events (above) gets none from a producer told to authenticate, and the
/// failure is a counted drop that never blocks a visitor. `check`-time validation of the
/// properties is in tests/e2e/tls.rs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_properties_reach_librdkafka() {
    let broker = Broker::start();
    let url = format!("tcp://{}", broker.addr);
    let created = Command::new(tansu_binary())
        .args([
            "user",
            "create",
            "--broker",
            &url,
            "--mechanism",
            "scram512",
        ])
        .args(["anteroom", "s3cret-pw"])
        .output()
        .unwrap();
    assert!(
        created.status.success(),
        "user create: {}",
        String::from_utf8_lossy(&created.stderr)
    );
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = kafka_config(&origin.url(), dir.path(), broker.addr, "");
    config.kafka.properties.0 = [
        ("security.protocol", "SASL_PLAINTEXT"),
        ("sasl.mechanism", "SCRAM-SHA-512"),
        ("sasl.username", "anteroom"),
        ("sasl.password", "s3cret-pw"),
        // anteroom's own default (10 s), overridden: undeliverable events drop sooner.
        ("message.timeout.ms", "1500"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let ar = start(&config).await;
    let started = Instant::now();
    let response = client()
        .get(format!("http://{}/", ar.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "never blocks a visitor"
    );
    let events = ar.app.admission.events().clone();
    let deadline = Instant::now() + Duration::from_secs(15);
    while events.dropped() == 0 {
        assert!(
            Instant::now() < deadline,
            "an event was not dropped: published {}",
            events.published()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(events.published(), 0, "nothing got past the SASL handshake");
    ar.shutdown().await.unwrap();
}
