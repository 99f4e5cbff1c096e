//! The `anteroom` binary as an operator runs it: config errors, `init`, `check`,
//! `--version`, SIGTERM with a snapshot, surviving file-descriptor exhaustion, and the request
//! id on the log lines about a request.

use crate::common;

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{ADMIN_TOKEN, AsVisitor, COOKIE_SECRET, Origin, client, visitor_cookie};

const BIN: &str = env!("CARGO_BIN_EXE_anteroom");

fn anteroom(args: &[&str]) -> std::process::Output {
    common::run_anteroom(args)
}

fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

fn write_config(
    dir: &Path,
    listen: SocketAddr,
    origin: &str,
    room_extra: &str,
) -> std::path::PathBuf {
    let path = dir.join("anteroom.yaml");
    std::fs::write(
        &path,
        format!(
            "listen: \"{listen}\"\nadmit_interval: 100ms\ncookie_secret: \"{COOKIE_SECRET}\"\nadmin_token: \"{ADMIN_TOKEN}\"\ndata_dir: \"{data}\"\nrooms:\n  main:\n    origin: {origin}\n{room_extra}\n",
            data = dir.join("data").display()
        ),
    )
    .unwrap();
    path
}

#[test]
fn malformed_configs_name_the_key_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "rooms:\n  main:\n    origin: http://127.0.0.1:1\n    rate: -5\n",
            "rooms.main.rate",
            4,
        ),
        (
            "rooms:\n  main:\n    origin: http://127.0.0.1:1\n    max_active: 0\n",
            "rooms.main.max_active",
            4,
        ),
        (
            "rooms:\n  main:\n    origin: http://127.0.0.1:1\n    session_ttl: 5 parsecs\n",
            "rooms.main.session_ttl",
            4,
        ),
        (
            "rooms:\n  main:\n    origin: not a url\n",
            "rooms.main.origin",
            3,
        ),
        (
            "bogus_key: 1\nrooms:\n  main:\n    origin: http://127.0.0.1:1\n",
            "bogus_key",
            1,
        ),
        (
            "cookie_secret: short\nrooms:\n  main:\n    origin: http://127.0.0.1:1\n",
            "cookie_secret",
            1,
        ),
    ];
    for (body, key, line) in cases {
        let path = dir.path().join("bad.yaml");
        // Valid secrets first so each case fails on its own key.
        let text = if body.starts_with("cookie_secret") {
            format!("admin_token: \"{ADMIN_TOKEN}\"\n{body}")
        } else {
            format!("cookie_secret: \"{COOKIE_SECRET}\"\nadmin_token: \"{ADMIN_TOKEN}\"\n{body}")
        };
        let line = if body.starts_with("cookie_secret") {
            line + 1
        } else {
            line + 2
        };
        std::fs::write(&path, text).unwrap();
        let out = anteroom(&["check", "--config", path.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{key}: {stderr}");
        assert!(stderr.contains(key), "{key} not named: {stderr}");
        assert!(
            stderr.contains(&format!("bad.yaml:{line}:")),
            "line {line} not named for {key}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    // A template that does not parse is named too.
    let template = dir.path().join("broken.html");
    std::fs::write(&template, "{% if %}").unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(
        &path,
        format!(
            "cookie_secret: \"{COOKIE_SECRET}\"\nadmin_token: \"{ADMIN_TOKEN}\"\nwaiting_template: {}\nrooms:\n  main:\n    origin: http://127.0.0.1:1\n",
            template.display()
        ),
    )
    .unwrap();
    let out = anteroom(&["check", "--config", path.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.contains("bad.yaml:3: waiting_template: is not a valid template"),
        "{stderr}"
    );

    let missing = anteroom(&["check", "--config", "/nonexistent/anteroom.yaml"]);
    assert_eq!(missing.status.code(), Some(1));
    let nothing = anteroom(&[]);
    assert_eq!(
        nothing.status.code(),
        Some(1),
        "no origin and no config is an error"
    );
    assert!(String::from_utf8_lossy(&nothing.stderr).contains("--origin"));
}

#[test]
fn init_writes_a_config_that_checks() {
    let first = anteroom(&["init"]);
    assert!(first.status.success());
    let second = anteroom(&["init"]);
    assert_ne!(first.stdout, second.stdout, "fresh secrets every time");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("anteroom.yaml");
    std::fs::write(&path, &first.stdout).unwrap();
    let check = anteroom(&["check", "--config", path.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(stdout.contains("room main"), "{stdout}");
    let text = String::from_utf8_lossy(&first.stdout);
    let token = text
        .lines()
        .find_map(|l| l.strip_prefix("admin_token: "))
        .unwrap()
        .trim_matches('"');
    assert!(!stdout.contains(token), "check never prints secrets");
}

#[test]
fn version_says_whether_the_front_end_is_built_in() {
    let out = anteroom(&["--version"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(stdout.starts_with(&format!("anteroom {}", env!("CARGO_PKG_VERSION"))));
    assert!(stdout.contains("front-end"), "{stdout}");
}

/// A running binary; killed if the test fails before it exits by itself.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(shell: Option<&str>, config: &Path) -> Process {
    let mut command = match shell {
        // `ulimit` needs a shell; `exec` keeps the pid ours.
        Some(prefix) => {
            let mut c = Command::new("sh");
            c.arg("-c")
                .arg(format!("{prefix}; exec \"$0\" --config \"$1\""))
                .arg(BIN)
                .arg(config);
            c
        }
        None => {
            let mut c = Command::new(BIN);
            c.arg("--config").arg(config);
            c
        }
    };
    command
        .env("ANTEROOM_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    Process(command.spawn().unwrap())
}

/// The process's log (stderr), line by line, once it exits.
fn log_lines(process: &mut Process) -> std::thread::JoinHandle<Vec<String>> {
    let stderr = process.0.stderr.take().unwrap();
    std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .collect()
    })
}

async fn wait_ready(addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(r) = client()
            .get(format!("http://{addr}/__anteroom/healthz"))
            .send()
            .await
            && r.status() == 200
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "anteroom did not start on {addr}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn sigterm(process: &Process) {
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(process.0.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
}

fn wait_exit(process: &mut Process, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = process.0.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "did not exit within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An origin and the binary in front of it with `room_extra` in its config, serving.
struct Serving {
    _origin: Origin,
    dir: tempfile::TempDir,
    listen: SocketAddr,
    config: std::path::PathBuf,
    process: Process,
}

async fn serving(room_extra: &str) -> Serving {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let listen = free_port();
    let config = write_config(dir.path(), listen, &origin.url(), room_extra);
    let process = spawn(None, &config);
    wait_ready(listen).await;
    Serving {
        _origin: origin,
        dir,
        listen,
        config,
        process,
    }
}

#[tokio::test]
async fn sigterm_drains_snapshots_and_exits_zero() {
    let Serving {
        _origin,
        dir,
        listen,
        config,
        mut process,
    } = serving("    rate: 0.01\n    max_active: 1000").await;
    let http = client();
    let url = format!("http://{listen}/");
    http.get(&url).send().await.unwrap();
    let mut cookies = Vec::new();
    for _ in 0..10 {
        cookies.push(visitor_cookie(&http.get(&url).send().await.unwrap()).unwrap());
    }
    sigterm(&process);
    let status = wait_exit(&mut process, Duration::from_secs(15));
    assert_eq!(status.code(), Some(0), "graceful shutdown exits 0");
    let snapshot = dir.path().join("data/queue.snapshot");
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&snapshot)
            .expect("a snapshot at shutdown")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    let _process = spawn(None, &config);
    wait_ready(listen).await;
    for (i, cookie) in cookies.iter().enumerate() {
        let body: serde_json::Value = http
            .get(&url)
            .visitor(cookie)
            .header("accept", "application/json")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(body["position"], i as u64 + 1);
    }
}

#[tokio::test]
async fn running_out_of_file_descriptors_is_survived() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let listen = free_port();
    let config = write_config(dir.path(), listen, &origin.url(), "");
    let mut process = spawn(Some("ulimit -n 64"), &config);
    let log = log_lines(&mut process);
    wait_ready(listen).await;
    // Far more connections than descriptors: the accept loop hits EMFILE.
    let mut held = Vec::new();
    for _ in 0..150 {
        if let Ok(Ok(s)) = tokio::time::timeout(
            Duration::from_millis(200),
            tokio::net::TcpStream::connect(listen),
        )
        .await
        {
            held.push(s);
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(held);
    // Once they are gone it serves again, without a restart.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let served = client().get(format!("http://{listen}/x")).send().await;
        if let Ok(r) = served
            && r.status() == 200
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still not serving after descriptors were freed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        process.0.try_wait().unwrap().is_none(),
        "the process is still running"
    );
    sigterm(&process);
    assert_eq!(
        wait_exit(&mut process, Duration::from_secs(40)).code(),
        Some(0)
    );
    let log = log.join().unwrap().join("\n");
    assert!(
        log.contains("accept failed"),
        "the exhaustion was logged: {log}"
    );
    assert!(log.contains("resource_exhaustion=true"), "{log}");
}

#[tokio::test]
async fn sigterm_turns_readyz_503_within_100ms_and_serves_for_the_drain_delay() {
    let mut s = serving("server:\n  drain_delay: 1500ms").await;
    let (listen, process) = (s.listen, &mut s.process);
    let readyz = format!("http://{listen}/__anteroom/readyz");
    assert_eq!(client().get(&readyz).send().await.unwrap().status(), 200);

    let signalled = Instant::now();
    sigterm(process);
    loop {
        let status = client().get(&readyz).send().await.unwrap().status();
        if status == 503 {
            break;
        }
        assert!(
            signalled.elapsed() < Duration::from_millis(100),
            "readyz still {status} 100 ms after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let page = client()
        .get(format!("http://{listen}/"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200, "still serving during the drain delay");
    assert!(signalled.elapsed() < Duration::from_millis(1500));
    let status = wait_exit(process, Duration::from_secs(15));
    assert_eq!(status.code(), Some(0));
    assert!(signalled.elapsed() >= Duration::from_millis(1500));
}

#[tokio::test]
async fn a_log_line_about_a_request_carries_its_request_id() {
    // An origin that refuses connections: the admitted visitor's request fails and says so.
    let dead_origin = free_port();
    let dir = tempfile::tempdir().unwrap();
    let listen = free_port();
    let path = dir.path().join("anteroom.yaml");
    std::fs::write(
        &path,
        format!(
            "listen: \"{listen}\"\nadmit_interval: 100ms\ncookie_secret: \"{COOKIE_SECRET}\"\nadmin_token: \"{ADMIN_TOKEN}\"\ndata_dir: \"{data}\"\ntrusted_proxies: [127.0.0.1]\nrooms:\n  main:\n    origin: http://{dead_origin}\n",
            data = dir.path().join("data").display()
        ),
    )
    .unwrap();
    let mut process = spawn(None, &path);
    let log = log_lines(&mut process);
    wait_ready(listen).await;
    let url = format!("http://{listen}/page");
    // From a trusted proxy, its request id is the request's.
    let first = client()
        .get(&url)
        .header("x-request-id", "e2e-request-7")
        .send()
        .await
        .unwrap();
    let cookie = visitor_cookie(&first).expect("a visitor cookie");
    let mut status = first.status();
    let deadline = Instant::now() + Duration::from_secs(15);
    while status != 502 {
        assert!(Instant::now() < deadline, "never admitted: {status}");
        tokio::time::sleep(Duration::from_millis(100)).await;
        status = client()
            .get(&url)
            .visitor(&cookie)
            .header("x-request-id", "e2e-request-7")
            .send()
            .await
            .unwrap()
            .status();
    }
    sigterm(&process);
    assert_eq!(
        wait_exit(&mut process, Duration::from_secs(40)).code(),
        Some(0)
    );
    let log = log.join().unwrap();
    let failed: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("origin request failed"))
        .collect();
    assert!(!failed.is_empty(), "the failure was logged: {log:#?}");
    for line in failed {
        assert!(line.ends_with("request_id=e2e-request-7"), "{line}");
    }
    // Lines about no request carry no id.
    let listening = log.iter().find(|l| l.contains("anteroom is listening"));
    assert!(
        listening.is_some_and(|l| !l.contains("request_id")),
        "{log:#?}"
    );
}

/// `anteroom probe ARGS`: its exit code and its one line of output (stdout or stderr).
fn probe(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(BIN)
        .arg("probe")
        .args(args)
        .env_remove("ANTEROOM_CONFIG")
        .env_remove("ANTEROOM_LISTEN")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(text.trim_end().lines().count(), 1, "one line: {text:?}");
    (out.status.code(), text.trim_end().to_owned())
}

#[tokio::test]
async fn probe_answers_for_a_healthy_a_draining_and_a_missing_instance() {
    // Nothing listening: a one-line reason naming the address, non-zero.
    let nobody = free_port().to_string();
    let (code, line) = probe(&["--address", &nobody]);
    assert_eq!(code, Some(1), "{line}");
    assert!(
        line.contains(&nobody) && line.contains("cannot connect"),
        "{line}"
    );

    // Healthy: the address comes from the config file, as the container's check uses it.
    let mut s = serving("server:\n  drain_delay: 3s").await;
    let config = s.config.to_str().unwrap().to_owned();
    let (config, process) = (config.as_str(), &mut s.process);
    let (code, line) = probe(&["--config", config]);
    assert_eq!(code, Some(0), "{line}");
    assert!(
        line.contains("/__anteroom/healthz"),
        "live by default: {line}"
    );
    let (code, line) = probe(&["--config", config, "--ready"]);
    assert_eq!((code, line.contains("ready")), (Some(0), true), "{line}");

    // Draining: not ready (with the reason), still alive, until it stops.
    sigterm(process);
    let deadline = Instant::now() + Duration::from_secs(2);
    let line = loop {
        let (code, line) = probe(&["--config", config, "--ready"]);
        if code == Some(1) {
            break line;
        }
        assert!(
            Instant::now() < deadline,
            "still ready after SIGTERM: {line}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(line.contains("503") && line.contains("draining"), "{line}");
    let (code, line) = probe(&["--config", config, "--live"]);
    assert_eq!(code, Some(0), "alive while draining: {line}");
    assert_eq!(wait_exit(process, Duration::from_secs(15)).code(), Some(0));
    let (code, line) = probe(&["--config", config]);
    assert_eq!(code, Some(1), "stopped: {line}");
}
