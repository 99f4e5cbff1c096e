//! Shared pieces of the end-to-end tests: a real origin on loopback that reports what it
//! received, and a real anteroom started in front of it.
#![allow(dead_code)]

#[cfg(feature = "kafka")]
pub mod kafka;
mod nginx;

pub use nginx::Nginx;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anteroom::config::{Config, from_yaml_str};
use anteroom::http::body::{Body, full};
use anteroom::run::{self, Running};
use http::{Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

pub const COOKIE_SECRET: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789";

/// A real HTTP origin on loopback. Every response is JSON describing the request it got:
/// method, path and query, headers and body length. `hits` counts requests.
pub struct Origin {
    pub addr: SocketAddr,
    pub hits: Arc<AtomicU64>,
}

impl Origin {
    pub async fn start() -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let hits = Arc::new(AtomicU64::new(0));
        let counter = hits.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let counter = counter.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let counter = counter.clone();
                        async move {
                            counter.fetch_add(1, Ordering::SeqCst);
                            Ok::<_, std::convert::Infallible>(echo(req).await)
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection_with_upgrades(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Origin { addr, hits }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::SeqCst)
    }
}

async fn echo(req: Request<Incoming>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let len = body
        .collect()
        .await
        .map(|b| b.to_bytes().len())
        .unwrap_or(0);
    let headers: serde_json::Map<String, serde_json::Value> = parts
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                serde_json::Value::from(v.to_str().unwrap_or("<binary>")),
            )
        })
        .collect();
    let report = serde_json::json!({
        "origin": true,
        "method": parts.method.as_str(),
        "uri": parts.uri.to_string(),
        "headers": headers,
        "body_len": len,
    });
    let mut response = Response::new(full(report.to_string()));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// A config for one catch-all room in front of `origin`; `room_extra` is added to the
/// room's YAML (indented by the caller's string as written).
pub fn config(origin: &str, data_dir: &std::path::Path, room_extra: &str) -> Config {
    config_with(origin, data_dir, "", room_extra)
}

/// [`config`] with `top_extra` added at the top level (e.g. an `abuse:` block).
pub fn config_with(
    origin: &str,
    data_dir: &std::path::Path,
    top_extra: &str,
    room_extra: &str,
) -> Config {
    let yaml = format!(
        r#"listen: "127.0.0.1:0"
admit_interval: 100ms
cookie_secret: "{COOKIE_SECRET}"
admin_token: "{ADMIN_TOKEN}"
data_dir: "{dir}"
{top_extra}
rooms:
  main:
    origin: {origin}
{room_extra}
"#,
        dir = data_dir.display()
    );
    from_yaml_str(&yaml, "test.yaml").unwrap_or_else(|e| panic!("test config: {e}\n{yaml}"))
}

/// A running anteroom on a free loopback port.
pub async fn start(config: &Config) -> Running {
    let store = run::open_store(config).await.unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    run::start(config, store, listener, false).await.unwrap()
}

/// A running anteroom on the embedded store `store`, e.g. one whose clock the test drives.
#[allow(dead_code)]
pub async fn start_with_store(
    config: &Config,
    store: std::sync::Arc<dyn anteroom::queue::QueueStore>,
) -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    run::start(config, store, listener, false).await.unwrap()
}

/// A client that keeps no cookies of its own: tests pass cookies explicitly.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// A replica's metrics, as Prometheus text, through the admin API.
pub async fn admin_metrics(http: &reqwest::Client, addr: SocketAddr) -> String {
    http.get(format!("http://{addr}/__anteroom/admin/api/metrics"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The value of a metric line `name{labels}` in Prometheus text, 0 when absent.
pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The `ar_visitor` cookie value a response set.
pub fn visitor_cookie(response: &reqwest::Response) -> Option<String> {
    response
        .headers()
        .get_all(http::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| v.strip_prefix("ar_visitor="))
        .map(|v| v.split(';').next().unwrap_or("").to_owned())
}

/// The reference of the visitor a cookie names: what their waiting page shows, the access
/// log's `ref` and the admission token's `ref`.
pub fn reference_of(cookie: &str) -> String {
    let secret = hex::decode(COOKIE_SECRET).unwrap();
    let keys = anteroom::token::CookieKeys::new(&secret, &[] as &[&[u8]]);
    let claim = keys.verify(cookie, std::time::SystemTime::now()).unwrap();
    claim.visitor.reference().as_str().to_owned()
}

pub fn status_header(response: &reqwest::Response) -> Option<String> {
    response
        .headers()
        .get("x-anteroom-status")
        .map(|v| v.to_str().unwrap().to_owned())
}

/// An origin, a data directory and an anteroom with one catch-all room in front of it;
/// keep the directory alive as long as the instance.
pub async fn front(room_extra: &str) -> (Origin, tempfile::TempDir, Running) {
    front_with("", room_extra).await
}

/// [`front`] with `top_extra` added at the top level of the config.
pub async fn front_with(top_extra: &str, room_extra: &str) -> (Origin, tempfile::TempDir, Running) {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ar = start(&config_with(
        &origin.url(),
        dir.path(),
        top_extra,
        room_extra,
    ))
    .await;
    (origin, dir, ar)
}

/// Requests made as a visitor holding an `ar_visitor` cookie.
pub trait AsVisitor {
    fn visitor(self, cookie: &str) -> Self;
}

impl AsVisitor for reqwest::RequestBuilder {
    fn visitor(self, cookie: &str) -> Self {
        self.header("cookie", format!("ar_visitor={cookie}"))
    }
}

/// The YAML of one room on a Redis store, listening on `listen` (`127.0.0.1:0` for an
/// in-process instance, a fixed address for a binary that has to be found again).
fn redis_yaml(
    listen: &str,
    origin: &str,
    redis_url: &str,
    data_dir: &std::path::Path,
    room: &str,
) -> String {
    format!(
        r#"listen: "{listen}"
admit_interval: 100ms
cookie_secret: "{COOKIE_SECRET}"
admin_token: "{ADMIN_TOKEN}"
data_dir: "{dir}"
redis:
  url: "{redis_url}"
rooms:
  main:
    origin: {origin}
{room}
"#,
        dir = data_dir.display()
    )
}

/// A config whose room `main` is on the Redis at `redis_url`, with `room` appended.
pub fn redis_config(
    origin: &str,
    redis_url: &str,
    data_dir: &std::path::Path,
    room: &str,
) -> Config {
    let yaml = redis_yaml("127.0.0.1:0", origin, redis_url, data_dir, room);
    from_yaml_str(&yaml, "test.yaml").unwrap_or_else(|e| panic!("test config: {e}\n{yaml}"))
}

/// The Redis store itself, for a test to look behind the replicas.
pub async fn redis_store(url: &str) -> Arc<anteroom::queue::RedisStore> {
    Arc::new(anteroom::queue::RedisStore::connect(&[url]).await.unwrap())
}

/// [`redis_store`] with `config`'s first room opened on it as a replica opens it, so a test
/// can set the room up (pause it, fill its line) before any replica starts.
pub async fn seeded_redis_store(url: &str, config: &Config) -> Arc<anteroom::queue::RedisStore> {
    use anteroom::queue::{QueueStore, RoomPolicy, RoomSettings};
    let store = redis_store(url).await;
    store
        .open_room(
            &config.rooms[0].name,
            &RoomSettings::seed(&config.rooms[0]),
            &RoomPolicy::default(),
            false,
        )
        .await
        .unwrap();
    store
}

/// A real `anteroom` binary on a Redis store, as a replica a test can SIGKILL.
pub struct BinaryReplica {
    child: std::process::Child,
    pub addr: SocketAddr,
}

impl BinaryReplica {
    /// Writes the config into `dir`, starts the binary and waits for its `healthz`.
    pub async fn start(
        origin: &str,
        redis_url: &str,
        dir: &std::path::Path,
        room: &str,
    ) -> BinaryReplica {
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let config_path = dir.join("anteroom.yaml");
        let yaml = redis_yaml(
            &addr.to_string(),
            origin,
            redis_url,
            &dir.join("data"),
            room,
        );
        std::fs::write(&config_path, yaml).unwrap();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_anteroom"))
            .arg("--config")
            .arg(&config_path)
            .env_remove("ANTEROOM_ADMIN_TOKEN")
            .env_remove("ANTEROOM_COOKIE_SECRET")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let replica = BinaryReplica { child, addr };
        let http = client();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while http
            .get(format!("http://{addr}/__anteroom/healthz"))
            .send()
            .await
            .is_err()
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the replica did not start"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        replica
    }

    /// SIGKILL: no drain, no last words.
    pub fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

/// Two replicas of the real binary, each with its own data directory, sharing one real
/// Redis in front of one origin: the set-up of every "changed through one replica, seen
/// on the other" test. The replicas are declared first, so they stop before Redis does.
pub struct RedisPair {
    /// The replica a change is made through.
    pub a: BinaryReplica,
    /// The other replica.
    pub b: BinaryReplica,
    /// The store both share.
    pub redis: anteroom_fixtures::RedisServer,
    /// The origin both front.
    pub origin: Origin,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

impl RedisPair {
    /// Redis, an origin and two replicas whose room `main` has `room`'s keys.
    pub async fn start(room: &str) -> RedisPair {
        let redis = anteroom_fixtures::RedisServer::start();
        let origin = Origin::start().await;
        let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let a = BinaryReplica::start(&origin.url(), &redis.url(), dirs.0.path(), room).await;
        let b = BinaryReplica::start(&origin.url(), &redis.url(), dirs.1.path(), room).await;
        RedisPair {
            a,
            b,
            redis,
            origin,
            _dirs: dirs,
        }
    }

    /// Kills replica A (SIGKILL) and starts it again on its own data directory.
    pub async fn restart_a(&mut self, room: &str) {
        self.a.kill();
        self.a = BinaryReplica::start(
            &self.origin.url(),
            &self.redis.url(),
            self._dirs.0.path(),
            room,
        )
        .await;
    }
}

impl Drop for BinaryReplica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Asks `check` every 20 ms until it answers `Some`, for at most `within` (real time), and
/// returns the answer; panics naming `what` if it never comes. For a test waiting on an
/// effect (an admission, a closed connection, a line written) instead of sleeping a fixed
/// time and hoping it happened.
pub async fn poll_until<T>(
    within: std::time::Duration,
    what: &str,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(answer) = check().await {
            return answer;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within {within:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Panics in this test process so far outside the tests' own code: in the server, a
/// connection task included (a panic inside a spawned task would otherwise vanish into a
/// `JoinError` nobody reads), or in a library. Every end-to-end test shares this process,
/// so a failing assertion in another test (a panic in `tests/`) is not counted here; that
/// test reports its own failure. The first call installs the counting hook; count from
/// then on.
pub fn panics() -> u64 {
    static PANICS: AtomicU64 = AtomicU64::new(0);
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let in_tests = info
                .location()
                .is_some_and(|l| l.file().starts_with("tests/"));
            if !in_tests {
                PANICS.fetch_add(1, Ordering::SeqCst);
            }
            previous(info);
        }));
    });
    PANICS.load(Ordering::SeqCst)
}

/// For a test that observes the whole process (its open descriptors, say), which other
/// tests running at once in this binary would disturb: runs `test` (in `module`, as
/// `module_path!()` gives it) alone in a child process of this test binary and checks it
/// passed. Returns `false` then, and the caller returns; in that child it returns `true`
/// and the caller runs the test itself.
pub fn run_alone(module: &str, test: &str) -> bool {
    const CHILD: &str = "ANTEROOM_E2E_ALONE";
    // `e2e::slowloris` → `slowloris::name`, as the test harness names it.
    let module = module.split_once("::").map_or("", |(_, m)| m);
    let name = format!("{module}::{test}");
    if std::env::var_os(CHILD).is_some_and(|v| v == name.as_str()) {
        return true;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name.as_str(), "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, &name)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Through the harness's capture: shown if this test fails, or with --nocapture.
    println!("{stdout}");
    println!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{name} failed in its own process");
    assert!(
        stdout.contains("test result: ok. 1 passed"),
        "{name} did not run in its own process"
    );
    false
}

/// Opens a WebSocket through the anteroom at `addr` and checks three messages come back
/// as sent (the test origin echoes).
pub async fn assert_websocket_echoes(addr: SocketAddr) {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let (mut ws, response) = tokio_tungstenite::connect_async(format!("ws://{addr}/socket"))
        .await
        .expect("upgrade through anteroom");
    assert_eq!(response.status(), 101);
    for i in 0..3 {
        ws.send(Message::text(format!("hello {i}"))).await.unwrap();
        let echoed = ws.next().await.unwrap().unwrap();
        assert_eq!(echoed.into_text().unwrap().as_str(), format!("hello {i}"));
    }
    ws.close(None).await.unwrap();
}

/// `anteroom <args>` (the binary under test) run to completion, without the environment's
/// admin token, cookie secret and config path, so only `args` and the files they name decide.
pub fn run_anteroom<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_anteroom"))
        .args(args)
        .env_remove("ANTEROOM_ADMIN_TOKEN")
        .env_remove("ANTEROOM_COOKIE_SECRET")
        .env_remove("ANTEROOM_CONFIG")
        .output()
        .unwrap()
}

/// `GET /__anteroom/admin/api/<path>` on `addr` with the admin token, as JSON.
pub async fn admin_get(http: &reqwest::Client, addr: SocketAddr, path: &str) -> serde_json::Value {
    http.get(format!("http://{addr}/__anteroom/admin/api/{path}"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// A client whose connections come from `ip` (a loopback address of its own, so it is a
/// client of its own to anteroom), keeping no cookies and following no redirect.
pub fn from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(ip.parse::<std::net::IpAddr>().unwrap())
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// The phases `anteroom_room_phase` says the room is in (exactly one when all is well).
pub fn phases_in(metrics: &str) -> Vec<String> {
    metrics
        .lines()
        .filter(|l| l.starts_with("anteroom_room_phase{") && l.ends_with(" 1"))
        .filter_map(|l| l.split("phase=\"").nth(1)?.split('"').next())
        .map(str::to_owned)
        .collect()
}

/// A JSON client's request to `url`, with the visitor cookie `cookie` if given.
pub async fn visit_json(
    http: &reqwest::Client,
    url: &str,
    cookie: Option<&str>,
) -> reqwest::Response {
    let mut request = http.get(url).header("accept", "application/json");
    if let Some(c) = cookie {
        request = request.visitor(c);
    }
    request.send().await.unwrap()
}

/// Server-sent events as they arrive: `(event name, data)` pairs.
pub struct Events {
    stream:
        std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buffer: String,
}

impl Events {
    pub fn new(response: reqwest::Response) -> Self {
        Events {
            stream: Box::pin(response.bytes_stream()),
            buffer: String::new(),
        }
    }

    /// The next event, within `limit`.
    pub async fn next(&mut self, limit: std::time::Duration) -> (String, serde_json::Value) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let name = block.lines().find_map(|l| l.strip_prefix("event: "));
                let data = block.lines().find_map(|l| l.strip_prefix("data: "));
                if let (Some(name), Some(data)) = (name, data) {
                    return (name.to_owned(), serde_json::from_str(data).unwrap());
                }
            }
            let chunk =
                tokio::time::timeout_at(deadline, futures_util::StreamExt::next(&mut self.stream))
                    .await
                    .expect("events arrive in time")
                    .expect("stream stays open")
                    .unwrap();
            self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }
}
