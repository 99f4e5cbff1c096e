//! Test fixtures shared by the unit tests and the end-to-end tests: a real `redis-server`
//! on a free loopback port, and a real three-node Redis Cluster, each in its own temporary
//! directory and killed when dropped. Not part of the product's interface.
//!
//! TLS variants ([`TestCa`], [`RedisServer::start_tls`], [`RedisCluster::start_tls`]): a
//! throwaway CA and a server certificate for `localhost` and `127.0.0.1`, made per test
//! with the `openssl` command (so these fixtures need no crate the product does not), and
//! servers listening with TLS only (`--port 0`).
//!
//! Also [`xorshift`], the deterministic generator the in-process model tests draw from,
//! and [`h2c_client`], an HTTP/2 client connection for the tests that count streams.
//!
//! A missing `redis-server` is a test failure with a clear message, never a silent pass:
//! `.ci/run` installs it.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A private temporary directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "anteroom-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("cannot create a temporary directory");
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A throwaway certificate authority and one server certificate it signed, valid for
/// `localhost` and `127.0.0.1` (server and client use, so a Redis Cluster's bus can use it
/// both ways), in a temporary directory removed on drop.
pub struct TestCa {
    dir: TempDir,
}

impl TestCa {
    pub fn new() -> TestCa {
        let dir = TempDir::new("ca");
        let unique = dir.0.file_name().map(|n| n.to_string_lossy().into_owned());
        let unique = unique.unwrap_or_default();
        let run = |args: &[&str]| {
            let output = Command::new("openssl")
                .args(args)
                .current_dir(&dir.0)
                .output()
                .expect("the openssl command is not installed (apt-get install openssl)");
            assert!(
                output.status.success(),
                "openssl {args:?} failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ];
        run(&[
            &["req", "-x509"][..],
            &ec,
            &["-keyout", "ca.key", "-out", "ca.crt", "-days", "2"],
            // A name of its own: two test CAs must not look like one to a verifier.
            &["-subj", &format!("/CN=anteroom test CA {}", unique)],
            &["-addext", "basicConstraints=critical,CA:TRUE"],
            &["-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        ]
        .concat());
        run(&[
            &["req"][..],
            &ec,
            &["-keyout", "server.key", "-out", "server.csr"],
            &["-subj", "/CN=localhost"],
        ]
        .concat());
        std::fs::write(
            dir.0.join("server.ext"),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\n\
             basicConstraints=CA:FALSE\n\
             keyUsage=critical,digitalSignature\n\
             extendedKeyUsage=serverAuth,clientAuth\n",
        )
        .unwrap();
        run(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ]);
        TestCa { dir }
    }

    /// The CA certificate's file (PEM): what a client is told to trust.
    pub fn ca_path(&self) -> PathBuf {
        self.dir.0.join("ca.crt")
    }

    /// The CA certificate (PEM).
    pub fn cert_pem(&self) -> String {
        std::fs::read_to_string(self.ca_path()).unwrap()
    }

    /// The server certificate (PEM), for `localhost` and `127.0.0.1`.
    pub fn server_cert_path(&self) -> PathBuf {
        self.dir.0.join("server.crt")
    }

    /// The server's private key (PKCS#8 PEM).
    pub fn server_key_path(&self) -> PathBuf {
        self.dir.0.join("server.key")
    }
}

impl Default for TestCa {
    fn default() -> Self {
        TestCa::new()
    }
}

/// A loopback port free now (and, for a cluster node, its bus port too).
fn free_port(with_bus: bool) -> u16 {
    for _ in 0..1_000 {
        let Ok(listener) = TcpListener::bind("127.0.0.1:0") else {
            continue;
        };
        let port = listener.local_addr().unwrap().port();
        if !with_bus {
            return port;
        }
        if port < 55_000
            && let Ok(bus) = TcpListener::bind(("127.0.0.1", port + 10_000))
        {
            drop(bus);
            return port;
        }
    }
    panic!("no free loopback port");
}

fn redis_server_binary() -> &'static str {
    let found = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "redis-server is not installed: the Redis store's tests need it \
         (apt-get install redis-server redis-tools; .ci/run does this)"
    );
    "redis-server"
}

/// Waits until a server on `port` answers PING (through `redis-cli` when it speaks TLS).
fn wait_for_ping(port: u16, child: &mut Child, tls: Option<&TestCa>) {
    use std::io::{Read, Write};
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("redis-server on port {port} exited at start: {status}");
        }
        if tls.is_some() {
            if cli(port, tls, &["PING"]).starts_with("PONG") {
                return;
            }
        } else if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
            let mut reply = [0u8; 64];
            if stream.write_all(b"PING\r\n").is_ok()
                && let Ok(n) = stream.read(&mut reply)
                && reply[..n].starts_with(b"+PONG")
            {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("redis-server on port {port} did not answer within 10 s");
}

/// One `redis-server` on a free loopback port, killed (SIGKILL) when dropped.
pub struct RedisServer {
    port: u16,
    dir: TempDir,
    aof: bool,
    extra: Vec<String>,
    /// Listens with TLS only (`--port 0 --tls-port`), with this CA's server certificate.
    tls: Option<Arc<TestCa>>,
    child: Option<Child>,
}

impl RedisServer {
    /// No persistence: `--save "" --appendonly no`.
    pub fn start() -> RedisServer {
        Self::start_with(false, &[])
    }

    /// With the append-only file on and fsynced on every write, so a SIGKILL loses nothing.
    pub fn start_durable() -> RedisServer {
        Self::start_with(true, &[])
    }

    /// TLS only: no plain port, the certificate of `ca`; clients are not asked for one.
    pub fn start_tls(ca: Arc<TestCa>) -> RedisServer {
        Self::start_with_tls(false, &[], Some(ca))
    }

    fn start_with(aof: bool, extra: &[&str]) -> RedisServer {
        Self::start_with_tls(aof, extra, None)
    }

    fn start_with_tls(aof: bool, extra: &[&str], tls: Option<Arc<TestCa>>) -> RedisServer {
        let mut server = RedisServer {
            port: free_port(!extra.is_empty()),
            dir: TempDir::new("redis"),
            aof,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            tls,
            child: None,
        };
        server.restart();
        server
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `redis://127.0.0.1:port`, or `rediss://` for a TLS server.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    pub fn dir(&self) -> &Path {
        &self.dir.0
    }

    /// Kills the server with SIGKILL (no shutdown save).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and directory (killing it first if it
    /// still runs).
    pub fn restart(&mut self) {
        self.kill();
        let binary = redis_server_binary();
        let port = self.port.to_string();
        let (plain_port, tls_args) = match &self.tls {
            None => (port, vec![]),
            Some(ca) => (
                "0".to_owned(),
                vec![
                    "--tls-port".to_owned(),
                    port,
                    "--tls-cert-file".to_owned(),
                    ca.server_cert_path().display().to_string(),
                    "--tls-key-file".to_owned(),
                    ca.server_key_path().display().to_string(),
                    "--tls-ca-cert-file".to_owned(),
                    ca.ca_path().display().to_string(),
                    "--tls-auth-clients".to_owned(),
                    "no".to_owned(),
                ],
            ),
        };
        let mut args: Vec<String> = vec![
            "--port".into(),
            plain_port,
            "--bind".into(),
            "127.0.0.1".into(),
            "--dir".into(),
            self.dir.0.display().to_string(),
            "--save".into(),
            "".into(),
            "--daemonize".into(),
            "no".into(),
            "--logfile".into(),
            "redis.log".into(),
        ];
        if self.aof {
            args.extend(["--appendonly", "yes", "--appendfsync", "always"].map(String::from));
        } else {
            args.extend(["--appendonly", "no"].map(String::from));
        }
        args.extend(tls_args);
        args.extend(self.extra.iter().cloned());
        let mut child = Command::new(binary)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("cannot start redis-server");
        wait_for_ping(self.port, &mut child, self.tls.as_deref());
        self.child = Some(child);
    }

    /// Runs `redis-cli` against this server and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        cli(self.port, self.tls.as_deref(), args)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn cli(port: u16, tls: Option<&TestCa>, args: &[&str]) -> String {
    let mut command = Command::new("redis-cli");
    command.args(["-h", "127.0.0.1", "-p", &port.to_string()]);
    if let Some(ca) = tls {
        command.arg("--tls").arg("--cacert").arg(ca.ca_path());
    }
    let output = command
        .args(args)
        .output()
        .expect("redis-cli is not installed (apt-get install redis-tools)");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A real three-node Redis Cluster (three masters, no replicas) on loopback.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start() -> RedisCluster {
        Self::start_with_tls(None)
    }

    /// With each node's append-only file on and fsynced on every write, so a node
    /// SIGKILLed and restarted ([`RedisCluster::node_mut`]) comes back with its data.
    pub fn start_durable() -> RedisCluster {
        Self::start_with(true, None)
    }

    /// One node, to kill and restart.
    pub fn node_mut(&mut self, index: usize) -> &mut RedisServer {
        &mut self.nodes[index]
    }

    /// Every node TLS only, the cluster bus too (`--tls-cluster yes`), so nodes announce
    /// their TLS ports to clients.
    pub fn start_tls(ca: Arc<TestCa>) -> RedisCluster {
        Self::start_with_tls(Some(ca))
    }

    fn start_with_tls(tls: Option<Arc<TestCa>>) -> RedisCluster {
        Self::start_with(false, tls)
    }

    fn start_with(aof: bool, tls: Option<Arc<TestCa>>) -> RedisCluster {
        let mut extra = vec![
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "5000",
        ];
        if tls.is_some() {
            extra.extend(["--tls-cluster", "yes"]);
        }
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| RedisServer::start_with_tls(aof, &extra, tls.clone()))
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let mut command = Command::new("redis-cli");
        if let Some(ca) = &tls {
            command.arg("--tls").arg("--cacert").arg(ca.ca_path());
        }
        let output = command
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli is not installed (apt-get install redis-tools)");
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        for node in &nodes {
            loop {
                let info = node.cli(&["CLUSTER", "INFO"]);
                if info.contains("cluster_state:ok") {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "the cluster did not reach cluster_state:ok: {info}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        RedisCluster { nodes }
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }
}

/// One step of a 64-bit xorshift generator: the next of a deterministic sequence for the
/// model tests (start `state` at any non-zero value).
pub fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// An HTTP/2 client connection without TLS (h2c, prior knowledge) to `addr`, and the task
/// driving it (it ends when the sender is dropped and the server closes).
pub async fn h2c_client(
    addr: std::net::SocketAddr,
) -> (
    hyper::client::conn::http2::SendRequest<http_body_util::Empty<bytes::Bytes>>,
    tokio::task::JoinHandle<hyper::Result<()>>,
) {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connect for HTTP/2");
    let (sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .expect("an HTTP/2 handshake");
    (sender, tokio::spawn(connection))
}
