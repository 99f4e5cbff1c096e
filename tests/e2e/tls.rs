//! TLS as a client, end to end: a real anteroom in front of an `https://` origin
//! on loopback (tokio-rustls with a throwaway CA's certificate), trusted through
//! `origin_ca_file`, and refused (502, a clear log line, no hang) with the wrong CA; a
//! WebSocket through an `https://` origin; a real anteroom on a TLS-only `redis-server`
//! through `redis.url: rediss://…` and `redis.ca_file`; and `anteroom check`-time errors
//! for bad CA files and Kafka properties, with secrets never shown.

use crate::common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anteroom::config::{Config, Overrides, from_yaml_str, load};
use anteroom_fixtures::{RedisServer, TestCa};
use common::*;
use futures_util::{SinkExt, StreamExt};
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// The warnings the gate logs (origin failures among them) in this test process, so a test
/// can look for the one it expects. The subscriber is process-wide: every end-to-end test
/// shares it once installed, so it keeps only those warnings, not everyone's every line.
fn logs() -> &'static Mutex<Vec<u8>> {
    static LOGS: OnceLock<&'static Mutex<Vec<u8>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buffer: &'static Mutex<Vec<u8>> = Box::leak(Box::new(Mutex::new(Vec::new())));
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("anteroom::gate=warn"))
            .with_ansi(false)
            .with_writer(move || Writer(buffer))
            .finish();
        let _ = tracing::subscriber::set_global_default(subscriber);
        buffer
    })
}

struct Writer(&'static Mutex<Vec<u8>>);

impl std::io::Write for Writer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn acceptor(ca: &TestCa) -> TlsAcceptor {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(ca.server_cert_path())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(ca.server_key_path()).unwrap();
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    TlsAcceptor::from(Arc::new(config))
}

/// An `https://` origin answering like [`common::Origin`] (JSON describing the request);
/// `sni` collects the server name each TLS client asked for.
struct TlsOrigin {
    addr: SocketAddr,
    sni: Arc<Mutex<Vec<Option<String>>>>,
}

async fn tls_origin(ca: &TestCa) -> TlsOrigin {
    tls_origin_on(ca, "127.0.0.1").await
}

async fn tls_origin_on(ca: &TestCa, ip: &str) -> TlsOrigin {
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = acceptor(ca);
    let sni = Arc::new(Mutex::new(Vec::new()));
    let seen = sni.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (acceptor, seen) = (acceptor.clone(), seen.clone());
            tokio::spawn(async move {
                // A client that does not trust us aborts here; that is the point of some tests.
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                seen.lock()
                    .unwrap()
                    .push(tls.get_ref().1.server_name().map(str::to_owned));
                let service = hyper::service::service_fn(|req: Request<Incoming>| async move {
                    Ok::<_, std::convert::Infallible>(describe(req))
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection_with_upgrades(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    TlsOrigin { addr, sni }
}

fn describe(req: Request<Incoming>) -> Response<anteroom::http::body::Body> {
    let headers: serde_json::Map<String, serde_json::Value> = req
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").into()))
        .collect();
    let report = serde_json::json!({"uri": req.uri().to_string(), "headers": headers});
    Response::new(anteroom::http::body::full(report.to_string()))
}

fn https_config(origin: &str, ca: Option<&std::path::Path>, dir: &std::path::Path) -> Config {
    let ca_line = ca
        .map(|p| format!("origin_ca_file: \"{}\"\n", p.display()))
        .unwrap_or_default();
    let yaml = format!(
        r#"listen: "127.0.0.1:0"
cookie_secret: "{COOKIE_SECRET}"
admin_token: "{ADMIN_TOKEN}"
data_dir: "{dir}"
{ca_line}rooms:
  main:
    origin: {origin}
    rate: 1000
    max_active: 1000
"#,
        dir = dir.display()
    );
    from_yaml_str(&yaml, "test.yaml").unwrap_or_else(|e| panic!("test config: {e}\n{yaml}"))
}

#[tokio::test]
async fn an_https_origin_with_origin_ca_file() {
    let ca = TestCa::new();
    let origin = tls_origin(&ca).await;
    let dir = tempfile::tempdir().unwrap();
    // By name: SNI and the certificate check use `localhost`, as does `Host`.
    let url = format!("https://localhost:{}/base", origin.addr.port());
    let ar = start(&https_config(&url, Some(&ca.ca_path()), dir.path())).await;
    let http = client();
    for _ in 0..3 {
        let response = http
            .get(format!("http://{}/page?x=1", ar.addr))
            .header("host", "shop.example")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let seen: serde_json::Value = response.json().await.unwrap();
        assert_eq!(seen["uri"], "/base/page?x=1");
        assert_eq!(
            seen["headers"]["host"],
            format!("localhost:{}", origin.addr.port())
        );
        assert_eq!(seen["headers"]["x-forwarded-host"], "shop.example");
    }
    let sni = origin.sni.lock().unwrap().clone();
    assert!(!sni.is_empty());
    assert!(
        sni.iter().all(|s| s.as_deref() == Some("localhost")),
        "{sni:?}"
    );
    assert_eq!(sni.len(), 1, "one pooled connection serves every request");
    ar.shutdown().await.unwrap();

    // By address: the certificate's IP entry is what is checked (no SNI for an IP).
    let url = format!("https://127.0.0.1:{}", origin.addr.port());
    let ar = start(&https_config(&url, Some(&ca.ca_path()), dir.path())).await;
    let response = http
        .get(format!("http://{}/", ar.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn preserve_host_changes_host_but_not_the_tls_name() {
    let ca = TestCa::new();
    let origin = tls_origin(&ca).await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("https://localhost:{}", origin.addr.port());
    let mut config = https_config(&url, Some(&ca.ca_path()), dir.path());
    config.rooms[0].preserve_host = true;
    let ar = start(&config).await;
    let response = client()
        .get(format!("http://{}/", ar.addr))
        .header("host", "shop.example")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let seen: serde_json::Value = response.json().await.unwrap();
    assert_eq!(seen["headers"]["host"], "shop.example");
    assert_eq!(
        origin.sni.lock().unwrap().clone(),
        vec![Some("localhost".to_owned())]
    );
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_wrong_ca_is_a_502_with_a_clear_log_line() {
    let logs = logs();
    let server_ca = TestCa::new();
    let other_ca = TestCa::new();
    let origin = tls_origin(&server_ca).await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("https://localhost:{}", origin.addr.port());
    let ar = start(&https_config(&url, Some(&other_ca.ca_path()), dir.path())).await;
    let started = Instant::now();
    let response = client()
        .get(format!("http://{}/", ar.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 502);
    assert!(started.elapsed() < Duration::from_secs(5), "no hang");
    let text = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    // The log capture is shared by every test in this process, and they run at once: look
    // for this test's line (the unknown issuer), not the first certificate error logged
    // (another test's certificate names another host).
    let line = text
        .lines()
        .find(|l| l.contains("origin request failed") && l.contains("UnknownIssuer"))
        .unwrap_or_else(|| panic!("no unknown-issuer error logged:\n{text}"));
    assert!(line.contains("invalid peer certificate"), "{line}");
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_certificate_for_another_name_is_refused() {
    let ca = TestCa::new();
    // Loopback too, but an address the certificate (localhost, 127.0.0.1) does not name.
    let origin = tls_origin_on(&ca, "127.0.0.2").await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("https://127.0.0.2:{}", origin.addr.port());
    let ar = start(&https_config(&url, Some(&ca.ca_path()), dir.path())).await;
    let response = client()
        .get(format!("http://{}/", ar.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 502);
    assert_eq!(
        origin.sni.lock().unwrap().len(),
        0,
        "no handshake completed"
    );
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_stalled_tls_handshake_is_a_timeout_not_a_hang() {
    // Accepts TCP, never answers the ClientHello.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let ca = TestCa::new();
    let dir = tempfile::tempdir().unwrap();
    let mut config = https_config(
        &format!("https://localhost:{}", addr.port()),
        Some(&ca.ca_path()),
        dir.path(),
    );
    config.server.origin_connect_timeout = Duration::from_millis(300);
    let ar = start(&config).await;
    let started = Instant::now();
    let response = client()
        .get(format!("http://{}/", ar.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 504);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_websocket_through_an_https_origin() {
    let ca = TestCa::new();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = acceptor(&ca);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let mut ws = tokio_tungstenite::accept_async(tls).await.unwrap();
                while let Some(Ok(msg)) = ws.next().await {
                    if msg.is_text() || msg.is_binary() {
                        ws.send(msg).await.unwrap();
                    }
                }
            });
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let url = format!("https://localhost:{}", addr.port());
    let ar = start(&https_config(&url, Some(&ca.ca_path()), dir.path())).await;
    common::assert_websocket_echoes(ar.addr).await;
    ar.shutdown().await.unwrap();
}

/// The whole product on a TLS-only Redis: `redis.url: rediss://…` with `redis.ca_file`.
#[tokio::test]
async fn anteroom_on_a_tls_redis() {
    let ca = Arc::new(TestCa::new());
    let redis = RedisServer::start_tls(ca.clone());
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        r#"listen: "127.0.0.1:0"
cookie_secret: "{COOKIE_SECRET}"
admin_token: "{ADMIN_TOKEN}"
data_dir: "{dir}"
redis:
  url: "{url}"
  ca_file: "{ca}"
rooms:
  main:
    origin: {origin}
"#,
        dir = dir.path().display(),
        url = redis.url(),
        ca = ca.ca_path().display(),
        origin = origin.url(),
    );
    let config = from_yaml_str(&yaml, "test.yaml").unwrap();
    assert!(config.redis.url.starts_with("rediss://"));
    let ar = start(&config).await;
    let response = client()
        .get(format!("http://{}/", ar.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(origin.hits(), 1);
    // The room's keys really are in that Redis.
    assert!(redis.cli(&["EXISTS", "ar:{main}:conf"]).starts_with('1'));
    ar.shutdown().await.unwrap();
}

fn check_error(yaml: &str) -> String {
    match from_yaml_str(yaml, "test.yaml") {
        Ok(_) => panic!("accepted:\n{yaml}"),
        Err(e) => e.to_string(),
    }
}

const BASE: &str =
    "cookie_secret: \"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"
admin_token: \"test-admin-token-0123456789\"
rooms:
  main:
    origin: https://localhost:8443
";

#[test]
fn check_refuses_bad_ca_files_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pem");
    let e = check_error(&format!(
        "{BASE}origin_ca_file: \"{}\"\n",
        missing.display()
    ));
    assert!(e.contains("origin_ca_file"), "{e}");
    assert!(e.contains("cannot read"), "{e}");

    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "hello").unwrap();
    let e = check_error(&format!(
        "{BASE}redis:\n  url: rediss://localhost:6380\n  ca_file: \"{}\"\n",
        not_pem.display()
    ));
    assert!(e.contains("redis.ca_file"), "{e}");
    assert!(e.contains("no certificate"), "{e}");

    let ca = TestCa::new();
    let e = check_error(&format!(
        "{BASE}redis:\n  url: redis://localhost:6379\n  ca_file: \"{}\"\n",
        ca.ca_path().display()
    ));
    assert!(e.contains("not rediss://"), "{e}");
    let e = check_error(&format!(
        "{BASE}redis:\n  url: \"rediss://:hunter2@localhost:6380/#insecure\"\n"
    ));
    assert!(e.contains("redis.url") && e.contains("#insecure"), "{e}");
    assert!(!e.contains("hunter2"), "{e}");

    // And what check accepts, the server uses: rediss:// with a CA file, https origins.
    let ok = from_yaml_str(
        &format!(
            "{BASE}origin_ca_file: \"{ca}\"\nredis:\n  url: rediss://localhost:6380\n  ca_file: \"{ca}\"\n",
            ca = ca.ca_path().display()
        ),
        "test.yaml",
    )
    .unwrap();
    assert_eq!(ok.redis.ca_file.as_ref().unwrap().certificates, 1);
    assert_eq!(ok.origin_ca_file.as_ref().unwrap().certificates, 1);
}

#[cfg(feature = "kafka")]
#[test]
fn check_refuses_unknown_kafka_properties_naming_them() {
    let e = check_error(&format!(
        "{BASE}kafka:\n  brokers: [127.0.0.1:9]\n  properties:\n    sasl.mechanisms: PLAIN\n    sasl.usernme: anteroom\n"
    ));
    assert!(e.contains("kafka.properties.sasl.usernme"), "{e}");
    assert!(e.contains("No such configuration property"), "{e}");
    let e = check_error(&format!(
        "{BASE}kafka:\n  properties:\n    security.protocol: carrier-pigeon\n"
    ));
    assert!(e.contains("kafka.properties.security.protocol"), "{e}");
    let e = check_error(&format!(
        "{BASE}kafka:\n  properties:\n    bootstrap.servers: elsewhere:9092\n"
    ));
    assert!(
        e.contains("kafka.properties.bootstrap.servers") && e.contains("kafka.brokers"),
        "{e}"
    );
    // A CA file librdkafka cannot read is caught when the (unconnected) producer is made.
    let e = check_error(&format!(
        "{BASE}kafka:\n  brokers: [127.0.0.1:9]\n  properties:\n    security.protocol: SSL\n    ssl.ca.location: /nonexistent/ca.pem\n"
    ));
    assert!(e.contains("kafka.properties"), "{e}");
    // SASL over TLS as a managed Kafka wants it is accepted.
    from_yaml_str(
        &format!(
            "{BASE}kafka:\n  brokers: [127.0.0.1:9]\n  properties:\n    security.protocol: SASL_SSL\n    sasl.mechanism: SCRAM-SHA-512\n    sasl.username: anteroom\n    sasl.password: in-the-file\n    linger.ms: 5\n"
        ),
        "test.yaml",
    )
    .unwrap();
}

/// `ANTEROOM_KAFKA_SASL_PASSWORD` becomes `sasl.password`, and neither `check`'s summary,
/// nor `Debug`, nor an error message ever shows it.
#[test]
fn the_kafka_password_comes_from_the_environment_and_is_never_shown() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("anteroom.yaml");
    let write = |extra: &str| {
        std::fs::write(
            &path,
            format!(
                "{BASE}kafka:\n  brokers: [127.0.0.1:9]\n  properties:\n    security.protocol: SASL_PLAINTEXT\n    sasl.mechanism: PLAIN\n    sasl.username: anteroom\n{extra}"
            ),
        )
        .unwrap();
    };
    let overrides = Overrides {
        config: Some(path.clone()),
        ..Overrides::default()
    };
    const PASSWORD: &str = "pa55-w0rd-from-env";
    let env = |k: &str| (k == "ANTEROOM_KAFKA_SASL_PASSWORD").then(|| PASSWORD.to_owned());

    write("");
    let loaded = load(&overrides, &env).unwrap();
    let kafka = &loaded.config.kafka;
    assert_eq!(
        kafka.properties.0.get("sasl.password").map(String::as_str),
        Some(PASSWORD)
    );
    let summary = loaded.config.describe();
    assert!(summary.contains("sasl.password=***"), "{summary}");
    assert!(summary.contains("sasl.username=anteroom"), "{summary}");
    assert!(!summary.contains(PASSWORD), "{summary}");
    let debug = format!("{:?}", loaded.config);
    assert!(!debug.contains(PASSWORD), "{debug}");

    // The environment wins over the file; a misspelt neighbour's error hides it too.
    write("    sasl.password: from-the-file\n    ssl.key.password: x\n    sasl.pasword: oops\n");
    let e = load(&overrides, &env).err().unwrap().to_string();
    assert!(e.contains("kafka.properties.sasl.pasword"), "{e}");
    assert!(!e.contains(PASSWORD) && !e.contains("from-the-file"), "{e}");
}
