//! Running a drop live, against the real binary: SIGHUP (through `anteroom reload`)
//! applying a changed config file and refusing a changed listen address or a bad file;
//! SIGUSR1 reopening the access log; SIGUSR2 ignored and SIGQUIT draining; a secret read
//! from a file authorizing the API; and named admin tokens refused what their role does
//! not allow, with their name in the audit log.

use crate::common;

use std::ffi::OsStr;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{ADMIN_TOKEN, COOKIE_SECRET, Origin, admin_get, client, poll_until};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_anteroom");
const WITHIN: Duration = Duration::from_secs(15);

/// The binary, killed when dropped; its log (stderr) goes to a file the test reads.
struct Process {
    child: Child,
    log: PathBuf,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Process {
    fn start(config: &Path, envs: &[(&str, String)]) -> Process {
        let log = config.with_file_name("stderr.log");
        let mut command = Command::new(BIN);
        command
            .arg("--config")
            .arg(config)
            .env_remove("ANTEROOM_ADMIN_TOKEN")
            .env_remove("ANTEROOM_COOKIE_SECRET")
            .env_remove("ANTEROOM_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        for (k, v) in envs {
            command.env(k, v);
        }
        Process {
            child: command.spawn().unwrap(),
            log,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn signal(&self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).unwrap();
        rustix::process::kill_process(pid, signal).unwrap();
    }

    fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

async fn wait_ready(addr: SocketAddr) {
    poll_until(WITHIN, "anteroom serving", async || {
        let r = client()
            .get(format!("http://{addr}/__anteroom/healthz"))
            .send()
            .await
            .ok()?;
        (r.status() == 200).then_some(())
    })
    .await;
}

/// `anteroom <args>` to completion.
fn anteroom(args: &[&OsStr]) -> std::process::Output {
    common::run_anteroom(args)
}

fn arg(s: &str) -> &OsStr {
    OsStr::new(s)
}

/// A room's `rate` as the admin API shows it.
async fn rate_of(addr: SocketAddr, room: &str) -> Option<f64> {
    let rooms: Value = client()
        .get(format!("http://{addr}/__anteroom/admin/api/rooms"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    rooms["rooms"]
        .as_array()?
        .iter()
        .find(|r| r["room"] == room)?["rate"]
        .as_f64()
}

fn yaml(listen: SocketAddr, dir: &Path, origin: &str, top: &str, rate: &str) -> String {
    format!(
        "listen: \"{listen}\"\nadmit_interval: 100ms\ncookie_secret: \"{COOKIE_SECRET}\"\n\
         admin_token: \"{ADMIN_TOKEN}\"\ndata_dir: \"{data}\"\npid_file: \"{pid}\"\n{top}\
         rooms:\n  main:\n    origin: {origin}\n    rate: {rate}\n",
        data = dir.join("data").display(),
        pid = dir.join("anteroom.pid").display(),
    )
}

#[tokio::test]
async fn sighup_applies_a_changed_file_and_refuses_what_needs_a_restart() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let listen = free_port();
    let config = dir.path().join("anteroom.yaml");
    let write = |top: &str, rate: &str, at: SocketAddr| {
        std::fs::write(&config, yaml(at, dir.path(), &origin.url(), top, rate)).unwrap();
    };
    write("", "5", listen);
    let mut process = Process::start(&config, &[]);
    wait_ready(listen).await;
    let pid_file = dir.path().join("anteroom.pid");
    poll_until(WITHIN, "the pid file", async || {
        pid_file.exists().then_some(())
    })
    .await;
    assert_eq!(rate_of(listen, "main").await, Some(5.0));
    let reload = || anteroom(&[arg("reload"), arg("--config"), config.as_os_str()]);

    // A changed rate, title and in-flight cap and a new named token apply live.
    let viewer = "reload-viewer-token-0123456789";
    write(
        &format!("admin_tokens:\n  - {{name: watcher, token: {viewer}, role: viewer}}\n"),
        "9\n    title: Reloaded drop\n    max_inflight: 4",
        listen,
    );
    let out = reload();
    assert!(out.status.success(), "{out:?}");
    poll_until(WITHIN, "the new rate", async || {
        (rate_of(listen, "main").await == Some(9.0)).then_some(())
    })
    .await;
    let status = client()
        .get(format!("http://{listen}/__anteroom/admin/api/status"))
        .bearer_auth(viewer)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 200, "the token added by the reload authorizes");
    let http = client();
    let settings = admin_get(&http, listen, "rooms/main/config").await;
    assert_eq!(settings["title"], "Reloaded drop");
    assert_eq!(settings["max_inflight"], 4);
    poll_until(WITHIN, "the reloaded in-flight cap in force", async || {
        let stats = admin_get(&http, listen, "rooms/main/stats").await;
        (stats["inflight"]["max"] == 4).then_some(())
    })
    .await;
    let audit = std::fs::read_to_string(dir.path().join("data/audit.log")).unwrap();
    let line: Value = audit
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|l| l["action"] == "reload")
        .expect("the reload is audited");
    assert_eq!(line["new"]["title"], "Reloaded drop");
    assert_eq!(line["new"]["rate"], 9.0);
    assert_eq!(line["old"]["max_inflight"], 0);

    // A changed listen address is refused with a line naming it, and nothing else of the
    // file applies (the rate stays 9).
    write("", "20", free_port());
    assert!(reload().status.success());
    poll_until(WITHIN, "the refusal naming listen", async || {
        process
            .log()
            .lines()
            .find(|l| l.contains("config reload refused") && l.contains("listen"))
            .map(str::to_owned)
    })
    .await;
    assert_eq!(rate_of(listen, "main").await, Some(9.0));

    // A bad file: `anteroom reload --config` refuses it without signalling; a SIGHUP
    // anyway (from the pid file alone) logs the reason and the old config keeps serving.
    write("", "-1", listen);
    let out = reload();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("rooms.main.rate"),
        "{out:?}"
    );
    let out = anteroom(&[arg("reload"), arg("--pid-file"), pid_file.as_os_str()]);
    assert!(out.status.success(), "{out:?}");
    poll_until(WITHIN, "the bad file's refusal", async || {
        process
            .log()
            .lines()
            .find(|l| l.contains("config file is refused") && l.contains("rooms.main.rate"))
            .map(str::to_owned)
    })
    .await;
    assert_eq!(rate_of(listen, "main").await, Some(9.0));
    assert!(process.running());
}

#[tokio::test]
async fn sigusr1_reopens_the_access_log_sigusr2_is_ignored_and_sigquit_drains() {
    use rustix::process::Signal;
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let listen = free_port();
    let config = dir.path().join("anteroom.yaml");
    let access = dir.path().join("access.log");
    let top = format!("access_log: \"{}\"\n", access.display());
    std::fs::write(&config, yaml(listen, dir.path(), &origin.url(), &top, "5")).unwrap();
    let mut process = Process::start(&config, &[]);
    wait_ready(listen).await;
    let get = async |path: &str| {
        let r = client()
            .get(format!("http://{listen}{path}"))
            .send()
            .await
            .unwrap();
        let status = r.status();
        r.bytes().await.unwrap();
        status
    };
    assert_eq!(get("/before").await, 200);
    poll_until(WITHIN, "the first line", async || {
        std::fs::read_to_string(&access)
            .ok()
            .filter(|t| t.contains("/before"))
    })
    .await;

    // logrotate: move the file away, then USR1 (as for nginx).
    std::fs::rename(&access, dir.path().join("access.log.1")).unwrap();
    process.signal(Signal::USR1);
    poll_until(WITHIN, "a line in a fresh file", async || {
        get("/after").await;
        std::fs::read_to_string(&access)
            .ok()
            .filter(|t| t.contains("/after"))
    })
    .await;
    assert!(process.running());

    // USR2: nothing but a log line.
    process.signal(Signal::USR2);
    poll_until(WITHIN, "the SIGUSR2 line", async || {
        process.log().contains("SIGUSR2: ignored").then_some(())
    })
    .await;
    assert_eq!(get("/still").await, 200);
    assert!(process.running());

    // QUIT: a drain and a clean exit, like TERM.
    process.signal(Signal::QUIT);
    let status = poll_until(WITHIN, "the exit after SIGQUIT", async || {
        process.child.try_wait().unwrap()
    })
    .await;
    assert_eq!(status.code(), Some(0), "{}", process.log());
    assert!(dir.path().join("data/queue.snapshot").exists());
}

#[tokio::test]
async fn an_admin_token_read_from_a_file_authorizes_the_api() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let listen = free_port();
    let token_file = dir.path().join("admin_token");
    let token = "file-admin-token-0123456789";
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let cookie_file = dir.path().join("cookie_secret");
    std::fs::write(&cookie_file, COOKIE_SECRET).unwrap();
    let config = dir.path().join("anteroom.yaml");
    std::fs::write(
        &config,
        format!(
            "listen: \"{listen}\"\ncookie_secret_file: \"{cookie}\"\ndata_dir: \"{data}\"\n\
             rooms:\n  main:\n    origin: {origin}\n",
            cookie = cookie_file.display(),
            data = dir.path().join("data").display(),
            origin = origin.url(),
        ),
    )
    .unwrap();

    // Both forms of one key are refused, naming it.
    let out = Command::new(BIN)
        .args(["check", "--config", config.to_str().unwrap()])
        .env("ANTEROOM_ADMIN_TOKEN", token)
        .env("ANTEROOM_ADMIN_TOKEN_FILE", &token_file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ANTEROOM_ADMIN_TOKEN_FILE"), "{stderr}");

    let _process = Process::start(
        &config,
        &[(
            "ANTEROOM_ADMIN_TOKEN_FILE",
            token_file.display().to_string(),
        )],
    );
    wait_ready(listen).await;
    let status = async |bearer: &str| {
        client()
            .get(format!("http://{listen}/__anteroom/admin/api/status"))
            .bearer_auth(bearer)
            .send()
            .await
            .unwrap()
            .status()
    };
    assert_eq!(
        status(token).await,
        200,
        "the token from the file, newline trimmed"
    );
    assert_eq!(status(&format!("{token}\n").replace('\n', "x")).await, 401);
}

const VIEWER: &str = "viewer-token-0123456789";
const OPERATOR: &str = "operator-token-0123456789";

/// A route's path with its captures filled in.
fn concrete(path: &str) -> String {
    path.replace("{room}", "main")
        .replace("{ref}", "ABCDEFGH")
        .replace("{target}", "192.0.2.1")
}

#[tokio::test]
async fn roles_limit_named_tokens_and_the_audit_log_names_them() {
    let top = format!(
        "admin_tokens:\n  - name: watcher\n    token: {VIEWER}\n    role: viewer\n  \
         - name: ops\n    token: {OPERATOR}\n    role: operator\n"
    );
    let (_origin, dir, ar) = common::front_with(&top, "").await;
    let base = format!("http://{}", ar.addr);
    let http = client();
    let send = async |method: &http::Method, path: &str, token: &str| {
        let mut req = http
            .request(method.clone(), format!("{base}{}", concrete(path)))
            .bearer_auth(token);
        if *method == http::Method::PUT {
            req = req.json(&serde_json::json!({ "rate": 3 }));
        } else if *method == http::Method::POST && path.ends_with("/bans") {
            req = req.json(&serde_json::json!({ "target": "192.0.2.1", "reason": "test" }));
        }
        let r = req.send().await.unwrap();
        let status = r.status();
        let content_type = r
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned());
        (status, content_type, r.text().await.unwrap())
    };

    let routes = anteroom::admin::routes();
    for route in routes.iter().filter(|r| r.auth) {
        let (status, content_type, body) = send(&route.method, route.path, VIEWER).await;
        if route.method == http::Method::GET {
            assert_ne!(
                status, 403,
                "viewer reads {} {}: {body}",
                route.method, route.path
            );
        } else {
            assert_eq!(
                status, 403,
                "viewer on {} {}: {body}",
                route.method, route.path
            );
            assert_eq!(content_type.as_deref(), Some("application/problem+json"));
            assert!(body.contains("viewer"), "{body}");
        }
    }
    for route in routes
        .iter()
        .filter(|r| matches!(r.op, anteroom::admin::Op::Ban | anteroom::admin::Op::Unban))
    {
        let (status, _, body) = send(&route.method, route.path, OPERATOR).await;
        assert_eq!(
            status, 403,
            "operator on {} {}: {body}",
            route.method, route.path
        );
    }
    // The operator may pause; the audit line names the token.
    let (status, _, body) = send(
        &http::Method::POST,
        "/__anteroom/admin/api/rooms/{room}/pause",
        OPERATOR,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, _, body) = send(
        &http::Method::POST,
        "/__anteroom/admin/api/rooms/{room}/resume",
        ADMIN_TOKEN,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let audit = std::fs::read_to_string(dir.path().join("audit.log")).unwrap();
    let lines: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let pause = lines.iter().find(|l| l["action"] == "pause").unwrap();
    assert_eq!(pause["token"], "ops");
    let resume = lines.iter().find(|l| l["action"] == "resume").unwrap();
    assert_eq!(resume["token"], "admin");
    assert!(!audit.contains(OPERATOR) && !audit.contains(ADMIN_TOKEN));
    ar.shutdown().await.unwrap();
}
