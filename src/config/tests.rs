//! The config file: every section and value parsed, the defaults, and each error naming
//! its key, line and source. Where values come from is in `tests/sources.rs`; the keys of
//! each feature in `tests/sections.rs`.

use std::collections::HashMap;
use std::time::{Duration, UNIX_EPOCH};

use super::*;

const SECRET: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const TOKEN: &str = "abcdefghijklmnop";

/// The documented example file, with real secrets. Line numbers matter to the tests below.
fn example_file() -> String {
    format!(
        r#"listen: ":8080"
admit_interval: 250ms
cookie_secret: "{SECRET}"
admin_token: "{TOKEN}"
secure_cookies: false
trusted_proxies: []          # CIDRs whose X-Forwarded-For is believed
data_dir: ./anteroom-data    # embedded store snapshots, bans, audit log
fail_open: false
fail_open_after: 30s
redis:
  url: ""                    # empty: embedded store; redis://host:6379/0, rediss://, or several cluster nodes
kafka:
  brokers: []
  topic: anteroom.events
rooms:
  main:
    match_host: ""           # empty: catch-all
    origin: http://127.0.0.1:3000
    rate: 50                 # visitors admitted per second
    max_active: 500          # visitors on the site at once
    session_ttl: 5m
    abandon_after: 60s
    join_limit_per_ip: 120
    join_limit_window: 1m
    title: "You're in line"
    message: ""
    preserve_host: false
    lottery: false
    schedule: {{}}             # queue_opens_at, admits_at, closes_at (RFC 3339)
"#
    )
}

/// A minimal valid file followed by `rooms_tail` under `rooms:` (room `main` starts on
/// line 4, its `origin` is line 5, so the first extra line is line 6).
fn minimal(rooms_tail: &str) -> String {
    format!(
        "cookie_secret: \"{SECRET}\"\nadmin_token: \"{TOKEN}\"\nrooms:\n  main:\n    origin: http://127.0.0.1:3000\n{rooms_tail}"
    )
}

fn parse(text: &str) -> Result<Config, ConfigError> {
    from_yaml_str(text, "anteroom.yaml")
}

fn err(text: &str) -> String {
    parse(text)
        .expect_err("expected a config error")
        .to_string()
}

fn no_env(_: &str) -> Option<String> {
    None
}

fn env_map(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| map.get(k).cloned()
}

fn write_file(text: &str) -> tempfile::NamedTempFile {
    use std::io::Write;
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

/// A file with one room `main` at `rate`, listening on `listen`.
fn file_with_rate(rate: &str, listen: &str) -> tempfile::NamedTempFile {
    write_file(&format!(
        "listen: \"{listen}\"\ncookie_secret: \"{SECRET}\"\nadmin_token: \"{TOKEN}\"\nrooms:\n  main:\n    origin: http://127.0.0.1:3000\n    rate: {rate}\n"
    ))
}

#[test]
fn the_example_file_parses_with_its_values() {
    let c = parse(&example_file()).unwrap();
    assert_eq!(c.listen.to_string(), "0.0.0.0:8080");
    assert_eq!(c.admit_interval, Duration::from_millis(250));
    assert_eq!(c.cookie_secret.expose(), hex::decode(SECRET).unwrap());
    assert_eq!(c.cookie_secret.len(), 32);
    assert_eq!(c.admin_token.as_str(), TOKEN);
    assert!(!c.secure_cookies);
    assert!(c.trusted_proxies.is_empty());
    assert_eq!(c.data_dir, PathBuf::from("./anteroom-data"));
    assert!(!c.fail_open);
    assert_eq!(c.fail_open_after, Duration::from_secs(30));
    assert!(c.redis.is_embedded());
    assert!(c.kafka.brokers.is_empty());
    assert_eq!(c.kafka.topic, "anteroom.events");
    assert_eq!(c.server, ServerConfig::default());
    assert_eq!(c.rooms.len(), 1);
    let r = c.room("main").unwrap();
    assert_eq!(r.match_host, None);
    assert_eq!(r.origin.to_string(), "http://127.0.0.1:3000/");
    assert_eq!(r.rate, 50.0);
    assert_eq!(r.max_active, 500);
    assert_eq!(r.session_ttl, Duration::from_secs(300));
    assert_eq!(r.abandon_after, Duration::from_secs(60));
    assert_eq!(r.mode, crate::queue::Mode::Queue);
    assert_eq!(r.join_limit_per_ip, 120);
    assert_eq!(r.join_limit_window, Duration::from_secs(60));
    assert_eq!(r.title, "You're in line");
    assert_eq!(r.message, "");
    assert!(!r.preserve_host && !r.lottery);
    assert_eq!(r.queue_status_code, 200);
    assert!(r.schedule.is_empty());
    assert!(c.room("nope").is_none());
}

#[test]
fn defaults_fill_everything_not_given() {
    let c = parse(&minimal("")).unwrap();
    assert_eq!(c.listen.to_string(), "0.0.0.0:8080");
    assert_eq!(c.admit_interval, Duration::from_millis(250));
    assert_eq!(c.data_dir, PathBuf::from("./anteroom-data"));
    assert_eq!(c.fail_open_after, Duration::from_secs(30));
    assert!(c.previous_cookie_secrets.is_empty());
    assert_eq!(c.redis.url, "");
    assert_eq!(c.kafka, KafkaConfig::default());
    let s = &c.server;
    assert_eq!(s.header_read_timeout, Duration::from_secs(10));
    assert_eq!(s.idle_timeout, Duration::from_secs(60));
    assert_eq!(s.origin_connect_timeout, Duration::from_secs(5));
    assert_eq!(s.origin_timeout, Duration::from_secs(30));
    assert_eq!(s.max_connections, 10_000);
    assert_eq!(s.shutdown_grace, Duration::from_secs(30));
    assert_eq!(s.drain_delay, Duration::ZERO);
    assert_eq!(c.admin_listen, None);
    assert!(c.admin_allow.is_empty() && c.metrics_token.is_none());
    let r = &c.rooms[0];
    assert_eq!(
        (
            r.rate,
            r.max_active,
            r.join_limit_per_ip,
            r.queue_status_code
        ),
        (50.0, 500, 120, 200)
    );
    assert_eq!(r.session_ttl, Duration::from_secs(300));
    assert_eq!(r.title, "You're in line");
    assert!(r.is_catch_all());
}

#[test]
fn full_file_with_every_section() {
    let text = format!(
        r#"listen: "127.0.0.1:9000"
admit_interval: 100ms
cookie_secret: "{SECRET}"
previous_cookie_secrets: ["this is an old raw secret of 32+ bytes!"]
admin_token: "{TOKEN}"
secure_cookies: true
trusted_proxies: ["10.0.0.0/8", "192.168.1.7", "fd00::/8"]
data_dir: /var/lib/anteroom
fail_open: true
fail_open_after: 45s
redis:
  url: "redis://:hunter2@r1:6379/0,redis://:hunter2@r2:6379/0"
kafka:
  brokers: ["k1:9092", "k2:9092"]
  topic: drops
server:
  header_read_timeout: 5s
  idle_timeout: 2m
  origin_connect_timeout: 1s
  origin_timeout: 10s
  max_connections: 50
  shutdown_grace: 0s
  drain_delay: 5s
admin_listen: "127.0.0.1:9090"
admin_allow: [10.1.0.0/16, "::1"]
metrics_token: "prometheus-reads-metrics"
rooms:
  shop:
    match_host: Shop.Example.COM:443
    origin: http://10.0.0.5:8080/store
    rate: 2.5
    max_active: 10
    lottery: true
    preserve_host: true
    queue_status_code: 503
    title: Sneakers
    message: Be patient
    schedule:
      queue_opens_at: 2030-01-01T10:00:00Z
      admits_at: 2030-01-01T12:00:00+02:00
      closes_at: 2030-01-02T00:00:00Z
  rest:
    origin: http://10.0.0.6
    join_limit_per_ip: 0
"#
    );
    let c = parse(&text).unwrap();
    assert_eq!(c.listen.to_string(), "127.0.0.1:9000");
    assert_eq!(c.previous_cookie_secrets.len(), 1);
    assert_eq!(
        c.previous_cookie_secrets[0].expose(),
        b"this is an old raw secret of 32+ bytes!"
    );
    assert!(c.secure_cookies && c.fail_open);
    let nets: Vec<String> = c.trusted_proxies.iter().map(|n| n.to_string()).collect();
    assert_eq!(nets, ["10.0.0.0/8", "192.168.1.7/32", "fd00::/8"]);
    assert_eq!(
        c.redis.nodes(),
        ["redis://:hunter2@r1:6379/0", "redis://:hunter2@r2:6379/0"]
    );
    assert_eq!(c.kafka.brokers, ["k1:9092", "k2:9092"]);
    assert_eq!(c.kafka.topic, "drops");
    assert_eq!(c.server.idle_timeout, Duration::from_secs(120));
    assert_eq!(c.server.max_connections, 50);
    assert_eq!(c.server.shutdown_grace, Duration::ZERO);
    assert_eq!(c.server.drain_delay, Duration::from_secs(5));
    assert_eq!(c.admin_listen, Some("127.0.0.1:9090".parse().unwrap()));
    let allow: Vec<String> = c.admin_allow.iter().map(|n| n.to_string()).collect();
    assert_eq!(allow, ["10.1.0.0/16", "::1/128"]);
    assert!(
        c.metrics_token
            .as_ref()
            .unwrap()
            .ct_eq(b"prometheus-reads-metrics")
    );
    let names: Vec<&str> = c.rooms.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["shop", "rest"], "file order is kept");
    let shop = c.room("shop").unwrap();
    assert_eq!(shop.match_host.as_deref(), Some("shop.example.com"));
    assert_eq!(shop.origin.path(), "/store");
    assert_eq!(shop.rate, 2.5);
    assert!(shop.lottery && shop.preserve_host);
    assert_eq!(shop.queue_status_code, 503);
    assert_eq!(shop.title, "Sneakers");
    let opens = UNIX_EPOCH + Duration::from_secs(1_893_492_000);
    assert_eq!(shop.schedule.queue_opens_at, Some(opens));
    assert_eq!(
        shop.schedule.admits_at,
        Some(opens),
        "12:00+02:00 is 10:00Z"
    );
    assert_eq!(c.room("rest").unwrap().join_limit_per_ip, 0);
    assert_eq!(
        c.room_for_host("SHOP.example.com:8080").unwrap().name,
        "shop"
    );
    assert_eq!(c.room_for_host("other.example").unwrap().name, "rest");

    let d = c.describe();
    assert!(d.contains("127.0.0.1:9000"), "{d}");
    assert!(
        d.contains("redis redis://:***@r1:6379/0,redis://:***@r2:6379/0"),
        "{d}"
    );
    assert!(!d.contains("hunter2"), "{d}");
    assert!(!d.contains(SECRET) && !d.contains(TOKEN), "{d}");
    assert!(d.contains("room shop (host shop.example.com)"), "{d}");
    assert!(d.contains("room rest (catch-all)"), "{d}");
    assert!(d.contains("2.5 per second, at most 10"), "{d}");
}

#[test]
fn describe_embedded_store() {
    let c = parse(&minimal("")).unwrap();
    let d = c.describe();
    assert!(d.contains("embedded (data dir ./anteroom-data)"), "{d}");
    assert!(d.contains("0.0.0.0:8080"), "{d}");
    assert!(d.contains("http://127.0.0.1:3000"), "{d}");
    assert!(!d.contains(SECRET) && !d.contains(TOKEN), "{d}");
}

#[test]
fn listen_forms() {
    let listen =
        |s: &str| parse(&format!("listen: \"{s}\"\n{}", minimal(""))).map(|c| c.listen.to_string());
    assert_eq!(listen(":8080").unwrap(), "0.0.0.0:8080");
    assert_eq!(listen("127.0.0.1:9000").unwrap(), "127.0.0.1:9000");
    assert_eq!(listen("[::1]:8080").unwrap(), "[::1]:8080");
    let e = listen("nowhere").unwrap_err().to_string();
    assert!(e.starts_with("anteroom.yaml:1: listen: "), "{e}");
}

#[test]
fn unknown_keys_name_key_and_line() {
    let e = err(&minimal("    rat: 5\n"));
    assert!(
        e.starts_with("anteroom.yaml:6: rooms.main.rat: unknown key"),
        "{e}"
    );
    assert!(e.contains("rate"), "lists the valid keys: {e}");
    let e = err(&format!("lisen: \":80\"\n{}", minimal("")));
    assert!(e.starts_with("anteroom.yaml:1: lisen: unknown key"), "{e}");
    let e = err(&minimal(
        "    schedule: {admits_at: 2030-01-01T00:00:00Z, opens: x}\n",
    ));
    assert!(
        e.starts_with("anteroom.yaml:6: rooms.main.schedule.opens: unknown key"),
        "{e}"
    );
    let e = err(&format!("server:\n  idle: 5s\n{}", minimal("")));
    assert!(
        e.starts_with("anteroom.yaml:2: server.idle: unknown key"),
        "{e}"
    );
}

#[test]
fn type_errors_name_key_and_line() {
    let e = err(&minimal("    rate: [1, 2]\n"));
    assert!(e.starts_with("anteroom.yaml:6: rooms.main.rate: "), "{e}");
    let e = err("rooms: [a, b]\n");
    assert!(e.starts_with("anteroom.yaml:1: rooms: "), "{e}");
}

#[test]
fn yaml_syntax_error_has_line() {
    let e = parse("listen: \":8080\"\nrooms: {a: [\n").unwrap_err();
    assert!(e.line().is_some(), "{e}");
    assert!(e.to_string().starts_with("anteroom.yaml:"), "{e}");
}

#[test]
fn semantic_errors_name_key_and_line() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "    rate: -5\n",
            "anteroom.yaml:6: rooms.main.rate: must be a number greater than 0 (got -5)",
            "",
        ),
        ("    rate: .nan\n", "anteroom.yaml:6: rooms.main.rate: ", ""),
        ("    rate: 0\n", "anteroom.yaml:6: rooms.main.rate: ", ""),
        (
            "    max_active: 0\n",
            "anteroom.yaml:6: rooms.main.max_active: must be a whole number of at least 1 (got 0)",
            "",
        ),
        (
            "    session_ttl: 5 parsecs\n",
            "anteroom.yaml:6: rooms.main.session_ttl: invalid duration",
            "5m",
        ),
        (
            "    abandon_after: 10ms\n",
            "anteroom.yaml:6: rooms.main.abandon_after: must be at least 1s",
            "",
        ),
        (
            "    queue_status_code: 404\n",
            "anteroom.yaml:6: rooms.main.queue_status_code: must be 200, 202, 429 or 503",
            "",
        ),
        (
            "    lottery: maybe\n",
            "anteroom.yaml:6: rooms.main.lottery: must be true or false",
            "",
        ),
        (
            "    mode: closed\n",
            "anteroom.yaml:6: rooms.main.mode: must be one of queue, passthrough, sold_out (got \"closed\")",
            "",
        ),
        (
            "    join_limit_per_ip: -1\n",
            "anteroom.yaml:6: rooms.main.join_limit_per_ip: ",
            "",
        ),
        (
            "    match_host: http://shop.example.com\n",
            "anteroom.yaml:6: rooms.main.match_host: must be a host name",
            "",
        ),
        (
            "    schedule:\n      queue_opens_at: 2030-01-02T00:00:00Z\n      admits_at: 2030-01-01T00:00:00Z\n",
            "anteroom.yaml:8: rooms.main.schedule.admits_at: must not be before schedule.queue_opens_at",
            "",
        ),
        (
            "    schedule:\n      admits_at: 2030-01-02T00:00:00Z\n      closes_at: 2030-01-01T00:00:00Z\n",
            "anteroom.yaml:8: rooms.main.schedule.closes_at: must be after schedule.admits_at",
            "",
        ),
        (
            "    schedule:\n      queue_opens_at: 1969-07-20T20:17:00Z\n",
            "anteroom.yaml:7: rooms.main.schedule.queue_opens_at: must be 1970-01-01T00:00:00Z or later",
            "",
        ),
        (
            "    schedule:\n      queue_opens_at: next tuesday\n",
            "anteroom.yaml:7: rooms.main.schedule.queue_opens_at: must be an RFC 3339 time",
            "",
        ),
        (
            "  second:\n    origin: http://127.0.0.1:3001\n",
            "anteroom.yaml:6: rooms.second.match_host: only one room may be the catch-all",
            "`main`",
        ),
        (
            "  bad.name:\n    origin: http://127.0.0.1:3001\n",
            "anteroom.yaml:6: rooms.bad.name: invalid room name",
            "",
        ),
        (
            "  other:\n    origin: http://127.0.0.1:3001\n",
            "anteroom.yaml:6: rooms.other.match_host: only one room may be the catch-all",
            "",
        ),
    ];
    for (tail, want, also) in cases {
        let e = err(&minimal(tail));
        assert!(e.starts_with(want), "for {tail:?}\n got: {e}\nwant: {want}");
        assert!(e.contains(also), "for {tail:?}: {e} should mention {also}");
    }
}

#[test]
fn bad_origins() {
    let origin = |o: &str| {
        err(&format!(
            "cookie_secret: \"{SECRET}\"\nadmin_token: \"{TOKEN}\"\nrooms:\n  main:\n    origin: {o}\n"
        ))
    };
    for bad in ["not a url", "/relative/path", "ftp://x.example", "http://"] {
        let e = origin(bad);
        assert!(
            e.starts_with("anteroom.yaml:5: rooms.main.origin: "),
            "{bad}: {e}"
        );
    }
    // https origins are accepted (trusting the system's CAs, or origin_ca_file).
    assert!(parse(&minimal("").replace("http://127.0.0.1:3000", "https://secure.example")).is_ok());
    let e = err(&format!(
        "cookie_secret: \"{SECRET}\"\nadmin_token: \"{TOKEN}\"\nrooms:\n  main:\n    rate: 5\n"
    ));
    assert!(
        e.starts_with("anteroom.yaml:4: rooms.main.origin: required"),
        "{e}"
    );
}

#[test]
fn global_semantic_errors() {
    let e = err(&format!("admit_interval: 5ms\n{}", minimal("")));
    assert!(
        e.starts_with("anteroom.yaml:1: admit_interval: must be at least 10ms"),
        "{e}"
    );
    let e = err(&format!("admin_allow: [banana]\n{}", minimal("")));
    assert!(e.starts_with("anteroom.yaml:1: admin_allow[0]:"), "{e}");
    let e = err(&format!("admin_listen: nowhere\n{}", minimal("")));
    assert!(
        e.starts_with("anteroom.yaml:1: admin_listen: must be an address"),
        "{e}"
    );
    let e = err(&format!(
        "listen: \"127.0.0.1:9000\"\nadmin_listen: \"127.0.0.1:9000\"\n{}",
        minimal("")
    ));
    assert!(
        e.starts_with("anteroom.yaml:2: admin_listen: must differ from `listen`"),
        "{e}"
    );
    let e = err(&format!("metrics_token: short\n{}", minimal("")));
    assert!(
        e.starts_with("anteroom.yaml:1: metrics_token: must be at least 16 characters"),
        "{e}"
    );
    let e = err(&format!("metrics_token: \"{TOKEN}\"\n{}", minimal("")));
    assert!(
        e.starts_with("anteroom.yaml:1: metrics_token: must differ from admin_token"),
        "{e}"
    );
    let e = err(&format!("server:\n  drain_delay: 1h\n{}", minimal("")));
    assert!(
        e.starts_with("anteroom.yaml:2: server.drain_delay: must be at most 5m"),
        "{e}"
    );
    let e = err(&format!("fail_open_after: 5 parsecs\n{}", minimal("")));
    assert!(
        e.starts_with("anteroom.yaml:1: fail_open_after: invalid duration"),
        "{e}"
    );
    let e = err(&format!(
        "trusted_proxies:\n  - 10.0.0.0/8\n  - banana\n{}",
        minimal("")
    ));
    assert!(
        e.starts_with("anteroom.yaml:3: trusted_proxies[1]: "),
        "{e}"
    );
    let e = err(&format!("redis:\n  url: http://r:6379\n{}", minimal("")));
    assert!(
        e.starts_with("anteroom.yaml:2: redis.url: must start with redis://"),
        "{e}"
    );
    let e = err(&format!("server:\n  max_connections: 0\n{}", minimal("")));
    assert!(
        e.starts_with("anteroom.yaml:2: server.max_connections: "),
        "{e}"
    );
    let e = err("cookie_secret: \"x\"\n");
    assert!(e.starts_with("anteroom.yaml:1: cookie_secret: "), "{e}");
    let e = err(&format!("admin_token: \"{TOKEN}\"\nrooms: {{}}\n"));
    assert!(
        e.starts_with("anteroom.yaml: cookie_secret: required"),
        "{e}"
    );
    let e = err(&format!(
        "cookie_secret: \"{SECRET}\"\nadmin_token: \"{TOKEN}\"\nrooms: {{}}\n"
    ));
    assert!(
        e.starts_with("anteroom.yaml:3: rooms: at least one room"),
        "{e}"
    );
    let e = err("");
    assert!(e.contains("cookie_secret"), "{e}");
}

#[test]
fn short_secrets_are_rejected_without_echoing_them() {
    let text = format!(
        "cookie_secret: \"tooshortsecret\"\nadmin_token: \"{TOKEN}\"\nrooms:\n  main:\n    origin: http://127.0.0.1:3000\n"
    );
    let e = err(&text);
    assert!(
        e.starts_with("anteroom.yaml:1: cookie_secret: must be at least 32 bytes"),
        "{e}"
    );
    assert!(!e.contains("tooshortsecret"), "{e}");
    let text = format!(
        "cookie_secret: \"{SECRET}\"\nadmin_token: \"short\"\nrooms:\n  main:\n    origin: http://127.0.0.1:3000\n"
    );
    let e = err(&text);
    assert!(
        e.starts_with("anteroom.yaml:2: admin_token: must be at least 16 characters"),
        "{e}"
    );
    let e = err(&format!(
        "previous_cookie_secrets:\n  - abc\n{}",
        minimal("")
    ));
    assert!(
        e.starts_with("anteroom.yaml:2: previous_cookie_secrets[0]: "),
        "{e}"
    );
}

#[test]
fn cookie_secret_forms() {
    // 64 hex characters decode to 32 bytes; raw text of >= 32 bytes is used as is.
    assert_eq!(Secret::cookie_key(SECRET).unwrap().len(), 32);
    let raw = "correct horse battery staple, 32b";
    assert_eq!(Secret::cookie_key(raw).unwrap().expose(), raw.as_bytes());
    // 62 hex characters are not a hex key, but 62 raw bytes are long enough.
    assert_eq!(Secret::cookie_key(&SECRET[..62]).unwrap().len(), 62);
    assert!(Secret::cookie_key(&SECRET[..31]).is_err(), "31 bytes");
    // 66 hex characters decode to 33 bytes.
    assert_eq!(
        Secret::cookie_key(&format!("{SECRET}ab")).unwrap().len(),
        33
    );
    assert!(Secret::cookie_key("").is_err());
}

#[test]
fn secrets_never_in_debug() {
    let c = parse(&minimal("")).unwrap();
    let dbg = format!("{c:?}");
    assert!(!dbg.contains(SECRET) && !dbg.contains(TOKEN), "{dbg}");
    assert!(dbg.contains("Secret(***)"));
    assert_eq!(
        format!("{:?}", Secret::from_text("hunter2hunter2hunter2")),
        "Secret(***)"
    );
    let g1 = Secret::generate_hex(16);
    let g2 = Secret::generate_hex(16);
    assert_eq!(g1.as_str().len(), 32);
    assert_ne!(g1, g2);
    assert!(g1.ct_eq(g1.as_str().as_bytes()));
    assert!(!g1.ct_eq(g2.as_str().as_bytes()));
}

#[test]
fn duplicate_hosts_are_errors() {
    let text = minimal(
        "    match_host: a.example\n  b:\n    match_host: A.EXAMPLE:8443\n    origin: http://127.0.0.1:3001\n",
    );
    let e = err(&text);
    assert!(
        e.starts_with("anteroom.yaml:8: rooms.b.match_host: host `a.example`"),
        "{e}"
    );
    assert!(e.contains("`main`"), "{e}");
}

mod secrets;
mod sections;
mod sources;
