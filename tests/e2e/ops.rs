//! Running a drop live, against the real binary: SIGHUP (through `anteroom reload`)
//! applying a changed config file (a rate, a token, rooms added and removed, audited; a
//! room removed and added back on Redis finding its line) and refusing a changed listen
//! address or a bad file;
//! SIGUSR1 reopening the access log; SIGUSR2 ignored and SIGQUIT draining; a secret read
//! from a file authorizing the API; and named admin tokens refused what their role does
//! not allow, with their name in the audit log.

use crate::common;

use std::ffi::OsStr;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{ADMIN_TOKEN, COOKIE_SECRET, Origin, admin_get, client, poll_until, status_header};
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
    assert_eq!(line["actor"], "reload");
    assert_eq!(line["new"]["settings"]["main"]["title"], "Reloaded drop");
    assert_eq!(line["new"]["settings"]["main"]["rate"], 9.0);
    assert_eq!(line["old"]["settings"]["main"]["max_inflight"], 0);

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

/// The file of the rooms tests: `top`, then `main` at `main.example`, then `rooms` (YAML,
/// indented).
fn rooms_yaml(
    listen: SocketAddr,
    dir: &Path,
    origin: &str,
    (top, rate): (&str, &str),
    rooms: &str,
) -> String {
    format!(
        "listen: \"{listen}\"\nadmit_interval: 100ms\ncookie_secret: \"{COOKIE_SECRET}\"\n\
         admin_token: \"{ADMIN_TOKEN}\"\ndata_dir: \"{data}\"\npid_file: \"{pid}\"\n{top}\
         access_log: \"{access}\"\nrooms:\n  main:\n    match_host: main.example\n    \
         origin: {origin}\n    rate: {rate}\n{rooms}",
        data = dir.join("data").display(),
        pid = dir.join("anteroom.pid").display(),
        access = dir.join("access.log").display(),
    )
}

/// The status of `GET /page` for `host`, and whether the origin answered it.
async fn by_host(listen: SocketAddr, host: &str) -> (u16, bool) {
    let response = client()
        .get(format!("http://{listen}/page"))
        .header("host", host)
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or_default();
    (status, body["origin"] == true)
}

/// The audit log's lines written by reloads.
fn reload_audits(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("data/audit.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["actor"] == "reload")
        .collect()
}

#[tokio::test]
async fn sighup_adds_and_removes_rooms_and_changes_a_rate_in_one_go() {
    let (shop_origin, tickets_origin) = (Origin::start().await, Origin::start().await);
    let dir = tempfile::tempdir().unwrap();
    let listen = free_port();
    let config = dir.path().join("anteroom.yaml");
    let shop = format!(
        "  shop:\n    match_host: shop.example\n    origin: {}\n",
        shop_origin.url()
    );
    let tickets = format!(
        "  tickets:\n    match_host: tickets.example\n    origin: {}\n    rate: 7\n",
        tickets_origin.url()
    );
    let write = |at: SocketAddr, rate: &str, rooms: &str| {
        let text = rooms_yaml(at, dir.path(), &shop_origin.url(), ("", rate), rooms);
        std::fs::write(&config, text).unwrap();
    };
    write(listen, "5", &shop);
    let mut process = Process::start(&config, &[]);
    wait_ready(listen).await;
    poll_until(WITHIN, "the pid file", async || {
        dir.path().join("anteroom.pid").exists().then_some(())
    })
    .await;
    assert_eq!(by_host(listen, "shop.example").await, (200, true));
    assert_eq!(by_host(listen, "tickets.example").await.0, 404);
    let reload = || anteroom(&[arg("reload"), arg("--config"), config.as_os_str()]);

    // One file: `tickets` added, `shop` removed, `main`'s rate changed.
    write(listen, "9", &tickets);
    assert!(reload().status.success());
    poll_until(WITHIN, "the added room serving its origin", async || {
        (by_host(listen, "tickets.example").await == (200, true)).then_some(())
    })
    .await;
    assert_eq!(tickets_origin.hits(), 1, "the added room's own origin");
    let shop_hits = shop_origin.hits();
    assert_eq!(
        by_host(listen, "shop.example").await,
        (404, false),
        "the removed room's host is no longer served"
    );
    assert_eq!(shop_origin.hits(), shop_hits);
    assert_eq!(rate_of(listen, "main").await, Some(9.0));
    assert_eq!(
        rate_of(listen, "tickets").await,
        Some(7.0),
        "in the stats at once"
    );
    assert_eq!(
        rate_of(listen, "shop").await,
        None,
        "gone from the admin API"
    );
    let metrics = common::admin_metrics(&client(), listen).await;
    assert!(
        metrics.contains(r#"anteroom_waiting{room="tickets"}"#),
        "{metrics}"
    );
    // Its gauges go; its counters and histograms stay (a counter never vanishes).
    assert!(
        !metrics.contains(r#"anteroom_waiting{room="shop"}"#),
        "{metrics}"
    );
    poll_until(WITHIN, "the added room in the access log", async || {
        std::fs::read_to_string(dir.path().join("access.log"))
            .ok()
            .filter(|t| t.contains(r#""room":"tickets""#))
    })
    .await;
    let audits = reload_audits(dir.path());
    assert_eq!(audits.len(), 1, "{audits:?}");
    let applied = &audits[0];
    assert_eq!(applied["action"], "reload");
    assert_eq!(
        applied["new"]["rooms_added"],
        serde_json::json!(["tickets"])
    );
    assert_eq!(applied["new"]["rooms_removed"], serde_json::json!(["shop"]));
    assert_eq!(applied["new"]["settings"]["main"]["rate"], 9.0);
    assert_eq!(applied["old"]["settings"]["main"]["rate"], 5.0);
    assert!(applied.get("caller").is_none(), "{applied}");

    // A changed listen address is refused whole: the room it also adds is not served, the
    // rate stays, the refusal is logged and audited naming the key.
    let later = format!(
        "{tickets}  later:\n    match_host: later.example\n    origin: {}\n",
        shop_origin.url()
    );
    write(free_port(), "20", &later);
    assert!(reload().status.success());
    poll_until(WITHIN, "the refusal naming listen", async || {
        process
            .log()
            .lines()
            .find(|l| l.contains("config reload refused") && l.contains("listen"))
            .map(str::to_owned)
    })
    .await;
    let refused = poll_until(WITHIN, "the refusal's audit line", async || {
        reload_audits(dir.path()).into_iter().nth(1)
    })
    .await;
    assert_eq!(refused["action"], "reload_refused");
    assert_eq!(refused["new"]["keys"], serde_json::json!(["listen"]));
    assert_eq!(by_host(listen, "later.example").await.0, 404);
    assert_eq!(rate_of(listen, "main").await, Some(9.0));

    // `shop` added back is served again.
    write(listen, "9", &format!("{tickets}{shop}"));
    assert!(reload().status.success());
    poll_until(WITHIN, "the room added back", async || {
        (by_host(listen, "shop.example").await == (200, true)).then_some(())
    })
    .await;
    assert!(process.running());
}

/// A room's waiting count as the admin API shows it.
async fn waiting_in(addr: SocketAddr, room: &str) -> Option<u64> {
    let rooms = admin_get(&client(), addr, "rooms").await;
    rooms["rooms"]
        .as_array()?
        .iter()
        .find(|r| r["room"] == room)?["waiting"]
        .as_u64()
}

#[tokio::test]
async fn a_room_removed_by_a_reload_and_added_back_keeps_its_line_on_redis() {
    let redis = anteroom_fixtures::RedisServer::start();
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let listen = free_port();
    let config = dir.path().join("anteroom.yaml");
    let top = format!("redis:\n  url: \"{}\"\n", redis.url());
    let tickets = "  tickets:\n    match_host: tickets.example\n    origin: ORIGIN\n    \
                   rate: 1\n    max_active: 1\n"
        .replace("ORIGIN", &origin.url());
    let write = |rooms: &str| {
        let text = rooms_yaml(listen, dir.path(), &origin.url(), (&top, "5"), rooms);
        std::fs::write(&config, text).unwrap();
    };
    write("");
    let _process = Process::start(&config, &[]);
    wait_ready(listen).await;
    poll_until(WITHIN, "the pid file", async || {
        dir.path().join("anteroom.pid").exists().then_some(())
    })
    .await;
    let reload = || anteroom(&[arg("reload"), arg("--config"), config.as_os_str()]);
    let visit = async |cookie: Option<&str>| {
        let mut request = client()
            .get(format!("http://{listen}/page"))
            .header("host", "tickets.example");
        if let Some(cookie) = cookie {
            request = request.header("cookie", format!("ar_visitor={cookie}"));
        }
        request.send().await.unwrap()
    };

    // Added: the first visitor is let in, the second waits (max_active 1).
    write(&tickets);
    assert!(reload().status.success());
    poll_until(WITHIN, "the added room serving", async || {
        (by_host(listen, "tickets.example").await == (200, true)).then_some(())
    })
    .await;
    let second = visit(None).await;
    assert_eq!(status_header(&second).as_deref(), Some("waiting"));
    let cookie = common::visitor_cookie(&second).unwrap();
    poll_until(WITHIN, "one in line in the stats", async || {
        (waiting_in(listen, "tickets").await == Some(1)).then_some(())
    })
    .await;

    // Removed: the waiting visitor's next request finds no room.
    write("");
    assert!(reload().status.success());
    poll_until(WITHIN, "the removed room's 404", async || {
        (visit(Some(&cookie)).await.status() == 404).then_some(())
    })
    .await;

    // Added back: the line is where it was (one in it before anyone asks), the visitor
    // still in it.
    write(&tickets);
    assert!(reload().status.success());
    poll_until(WITHIN, "the room back with its line", async || {
        waiting_in(listen, "tickets")
            .await
            .map(|n| assert_eq!(n, 1, "the line kept"))
    })
    .await;
    let again = poll_until(WITHIN, "the room added back", async || {
        let r = visit(Some(&cookie)).await;
        (r.status() == 200).then_some(r)
    })
    .await;
    assert_eq!(status_header(&again).as_deref(), Some("waiting"));
    let renewed = common::visitor_cookie(&again).unwrap_or_else(|| cookie.clone());
    assert_eq!(
        common::reference_of(&renewed),
        common::reference_of(&cookie),
        "the same visitor"
    );
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
