//! A real Kafka-protocol broker (tansu, memory storage) for the end-to-end tests, and a
//! real Kafka client reading its topic back.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::Message;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

pub const TOPIC: &str = "anteroom.events";

pub fn tansu_binary() -> PathBuf {
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

/// tansu on a loopback port with [`TOPIC`] created; SIGKILLed when dropped. Memory storage:
/// a broker restarted on the same address starts empty.
pub struct Broker {
    child: Child,
    pub addr: SocketAddr,
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill(); // SIGKILL
        let _ = self.child.wait();
    }
}

impl Broker {
    /// A broker on a free port.
    pub fn start() -> Broker {
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        Broker::start_at(addr)
    }

    /// A broker on `addr` (to bring one back where producers expect it).
    pub fn start_at(addr: SocketAddr) -> Broker {
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
        // Owned from here, so a failed start below still kills it.
        let broker = Broker { child, addr };
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
        broker
    }
}

/// Reads every event (key, JSON body) on [`TOPIC`] from the start until `done` says enough
/// about the bodies read so far, or `limit` passes.
pub fn read_events(
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
