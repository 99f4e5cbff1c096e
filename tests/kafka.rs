//! Events to a real Kafka-protocol broker (tansu, memory storage) started by the test, read
//! back with a real Kafka client; and the broker killed mid-run without slowing a join.
#![cfg(feature = "kafka")]

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Origin, client, config, start};
use rdkafka::Message;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

const TOPIC: &str = "anteroom.events";

fn tansu_binary() -> PathBuf {
    let path = std::env::var_os("ANTEROOM_TANSU")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/test-tools/tansu")
        });
    assert!(
        path.exists(),
        "the Kafka-protocol broker tansu is not at {} — run scripts/test-tools.sh (make test does)",
        path.display()
    );
    path
}

struct Broker {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_broker() -> Broker {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let url = format!("tcp://{addr}");
    let child = Command::new(tansu_binary())
        .args([
            "broker",
            "--listener-url",
            &url,
            "--advertised-listener-url",
            &url,
        ])
        .args(["--storage-engine", "memory://tansu/"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "tansu did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let created = Command::new(tansu_binary())
        .args([
            "topic",
            "create",
            TOPIC,
            "--broker",
            &url,
            "--partitions",
            "1",
        ])
        .output()
        .unwrap();
    assert!(
        created.status.success(),
        "topic create: {}",
        String::from_utf8_lossy(&created.stderr)
    );
    Broker { child, addr }
}

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

/// Reads every event on the topic until `done` says enough, or the limit passes.
fn read_events(
    broker: SocketAddr,
    limit: Duration,
    done: impl Fn(&[serde_json::Value]) -> bool,
) -> Vec<(String, serde_json::Value)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.to_string())
        .set("group.id", format!("test-{}", std::process::id()))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    consumer.subscribe(&[TOPIC]).unwrap();
    let deadline = Instant::now() + limit;
    let mut events = Vec::new();
    let mut bodies = Vec::new();
    while Instant::now() < deadline && !done(&bodies) {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(200)) {
            let key = String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned();
            let body: serde_json::Value =
                serde_json::from_slice(message.payload().unwrap()).unwrap();
            bodies.push(body.clone());
            events.push((key, body));
        }
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_reach_the_broker_with_their_fields() {
    let broker = start_broker();
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
    let broker = start_broker();
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ar = start(&kafka_config(
        &origin.url(),
        dir.path(),
        broker.addr,
        // 200 joins from one address: over the default join limit.
        "    rate: 0.01\n    max_active: 100\n    join_limit_per_ip: 0",
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
            .store()
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
