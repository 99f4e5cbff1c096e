use std::collections::HashMap;
use std::time::{Duration, UNIX_EPOCH};

use super::*;

const SECRET: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const TOKEN: &str = "abcdefghijklmnop";

/// The SPEC §2 example, with real secrets. Line numbers matter to the tests below.
fn spec_example() -> String {
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

#[test]
fn spec_example_parses_with_its_values() {
    let c = parse(&spec_example()).unwrap();
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

// ---- precedence: flag > env > file > default ----

fn file_with_rate(rate: &str, listen: &str) -> tempfile::NamedTempFile {
    write_file(&format!(
        "listen: \"{listen}\"\ncookie_secret: \"{SECRET}\"\nadmin_token: \"{TOKEN}\"\nrooms:\n  main:\n    origin: http://127.0.0.1:3000\n    rate: {rate}\n"
    ))
}

#[test]
fn precedence_levels() {
    let f = file_with_rate("10", "127.0.0.1:1000");
    let with_file = Overrides {
        config: Some(f.path().to_path_buf()),
        ..Overrides::default()
    };
    // file beats default
    let c = load(&with_file, &no_env).unwrap().config;
    assert_eq!(c.rooms[0].rate, 10.0);
    assert_eq!(c.listen.to_string(), "127.0.0.1:1000");
    assert_eq!(c.rooms[0].max_active, 500, "default where nothing is given");
    // env beats file
    let env = env_map(&[
        ("ANTEROOM_RATE", "20"),
        ("ANTEROOM_LISTEN", "127.0.0.1:2000"),
        ("ANTEROOM_MAX_ACTIVE", "7"),
        ("ANTEROOM_REDIS_URL", "redis://env:6379"),
        ("ANTEROOM_DATA_DIR", "/env/data"),
        ("ANTEROOM_FAIL_OPEN", "true"),
        ("ANTEROOM_ADMIN_TOKEN", "env-admin-token-0123"),
        ("ANTEROOM_ORIGIN", "http://env-origin:80"),
    ]);
    let loaded = load(&with_file, &env).unwrap();
    let c = loaded.config;
    assert_eq!(c.rooms[0].rate, 20.0);
    assert_eq!(c.rooms[0].max_active, 7);
    assert_eq!(c.listen.to_string(), "127.0.0.1:2000");
    assert_eq!(c.redis.url, "redis://env:6379");
    assert_eq!(c.data_dir, PathBuf::from("/env/data"));
    assert!(c.fail_open);
    assert_eq!(c.admin_token.as_str(), "env-admin-token-0123");
    assert_eq!(c.rooms[0].origin.host(), Some("env-origin"));
    assert_eq!(loaded.generated, Generated::default());
    // flag beats env
    let flags = Overrides {
        rate: Some(30.0),
        max_active: Some(8),
        listen: Some("127.0.0.1:3000".into()),
        redis: Some("rediss://flag:6380".into()),
        data_dir: Some("/flag/data".into()),
        origin: Some("http://flag-origin:81".into()),
        ..with_file.clone()
    };
    let c = load(&flags, &env).unwrap().config;
    assert_eq!(c.rooms[0].rate, 30.0);
    assert_eq!(c.rooms[0].max_active, 8);
    assert_eq!(c.listen.to_string(), "127.0.0.1:3000");
    assert_eq!(c.redis.url, "rediss://flag:6380");
    assert_eq!(c.data_dir, PathBuf::from("/flag/data"));
    assert_eq!(c.rooms[0].origin.host(), Some("flag-origin"));
}

#[test]
fn config_path_from_env_and_flag_wins() {
    let f1 = file_with_rate("11", ":1");
    let f2 = file_with_rate("22", ":2");
    let env = env_map(&[("ANTEROOM_CONFIG", f1.path().to_str().unwrap())]);
    let c = load(&Overrides::default(), &env).unwrap().config;
    assert_eq!(c.rooms[0].rate, 11.0);
    let ov = Overrides {
        config: Some(f2.path().to_path_buf()),
        ..Overrides::default()
    };
    assert_eq!(load(&ov, &env).unwrap().config.rooms[0].rate, 22.0);
}

#[test]
fn env_and_flag_errors_name_their_source() {
    let f = file_with_rate("10", ":8080");
    let ov = Overrides {
        config: Some(f.path().to_path_buf()),
        ..Overrides::default()
    };
    let e = load(&ov, &env_map(&[("ANTEROOM_RATE", "-1")]))
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "rooms.main.rate: must be a number greater than 0 (got -1) (set by ANTEROOM_RATE)"
    );
    let e = load(&ov, &env_map(&[("ANTEROOM_COOKIE_SECRET", "short")]))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("cookie_secret: must be at least 32 bytes"),
        "{e}"
    );
    assert!(
        e.contains("ANTEROOM_COOKIE_SECRET") && !e.contains("short)"),
        "{e}"
    );
    let e = load(
        &Overrides {
            listen: Some("bogus".into()),
            ..ov.clone()
        },
        &no_env,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("listen: ") && e.ends_with("(set by --listen)"),
        "{e}"
    );
}

#[test]
fn room_flags_need_exactly_one_room() {
    let f = write_file(&minimal(
        "    match_host: a.example\n  b:\n    origin: http://127.0.0.1:3001\n",
    ));
    let ov = Overrides {
        config: Some(f.path().to_path_buf()),
        rate: Some(5.0),
        ..Overrides::default()
    };
    let e = load(&ov, &no_env).unwrap_err().to_string();
    assert!(e.starts_with("--rate: applies to a single room"), "{e}");
    assert!(e.contains("main, b"), "{e}");
    // Without the flag the file loads fine.
    let ov = Overrides { rate: None, ..ov };
    assert_eq!(load(&ov, &no_env).unwrap().config.rooms.len(), 2);
}

#[test]
fn origin_only_generates_secrets_unless_env_has_them() {
    let ov = Overrides {
        origin: Some("http://localhost:3000".into()),
        rate: Some(5.0),
        max_active: Some(3),
        ..Overrides::default()
    };
    let a = load(&ov, &no_env).unwrap();
    let b = load(&ov, &no_env).unwrap();
    assert_eq!(
        a.generated,
        Generated {
            admin_token: true,
            cookie_secret: true
        }
    );
    let r = &a.config.rooms[0];
    assert_eq!(r.name, "main");
    assert!(r.is_catch_all());
    assert_eq!((r.rate, r.max_active), (5.0, 3));
    assert_eq!(a.config.cookie_secret.len(), 32);
    assert!(a.config.admin_token.as_str().len() >= 16);
    assert_ne!(a.config.admin_token, b.config.admin_token);
    assert_ne!(a.config.cookie_secret, b.config.cookie_secret);

    let env = env_map(&[("ANTEROOM_ADMIN_TOKEN", "from-the-environment")]);
    let c = load(&ov, &env).unwrap();
    assert_eq!(
        c.generated,
        Generated {
            admin_token: false,
            cookie_secret: true
        }
    );
    assert_eq!(c.config.admin_token.as_str(), "from-the-environment");

    // ANTEROOM_ORIGIN alone is enough.
    let env = env_map(&[("ANTEROOM_ORIGIN", "http://localhost:4000")]);
    let c = load(&Overrides::default(), &env).unwrap().config;
    assert_eq!(c.rooms[0].origin.port_u16(), Some(4000));
}

#[test]
fn no_config_no_origin() {
    let e = load(&Overrides::default(), &no_env).unwrap_err();
    assert!(matches!(e, ConfigError::NoOrigin));
    let msg = e.to_string();
    assert!(msg.contains("--origin") && msg.contains("--config") && msg.contains("anteroom demo"));
}

#[test]
fn missing_file_is_a_read_error() {
    let ov = Overrides {
        config: Some("/nonexistent/anteroom.yaml".into()),
        ..Overrides::default()
    };
    let e = load(&ov, &no_env).unwrap_err().to_string();
    assert!(e.contains("/nonexistent/anteroom.yaml"), "{e}");
}

#[test]
fn file_errors_use_the_path_given() {
    let f = write_file(&minimal("    rate: -5\n"));
    let ov = Overrides {
        config: Some(f.path().to_path_buf()),
        ..Overrides::default()
    };
    let e = load(&ov, &no_env).unwrap_err();
    assert_eq!(e.key(), Some("rooms.main.rate"));
    assert_eq!(e.line(), Some(6));
    assert_eq!(
        e.to_string(),
        format!(
            "{}:6: rooms.main.rate: must be a number greater than 0 (got -5)",
            f.path().display()
        )
    );
}

#[test]
fn admission_key_is_optional_checked_and_named() {
    let base = format!(
        "cookie_secret: \"{SECRET}\"\nadmin_token: \"{TOKEN}\"\nrooms:\n  main:\n    origin: http://127.0.0.1:3000\n"
    );
    assert!(parse(&base).unwrap().admission_key.is_none());
    assert!(
        parse(&format!("admission_key: \"\"\n{base}"))
            .unwrap()
            .admission_key
            .is_none()
    );
    let e = parse(&format!("admission_key: \"not-a-key\"\n{base}"))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("anteroom.yaml:1: admission_key: "), "{e}");
    let key = crate::fairness::admission_token::AdmissionKey::generate().unwrap();
    let c = parse(&format!(
        "admission_key: \"{}\"\n{base}",
        &*key.to_config_text()
    ))
    .unwrap();
    assert_eq!(c.admission_key.unwrap().public().kid(), key.public().kid());
}

#[test]
fn priority_secret_is_optional_checked_named_and_never_shown() {
    let base = minimal("");
    assert!(parse(&base).unwrap().priority_secret.is_none());
    assert!(
        parse(&format!("priority_secret: \"\"\n{base}"))
            .unwrap()
            .priority_secret
            .is_none()
    );
    let e = err(&format!("{base}priority_secret: \"too short a secret\"\n"));
    assert!(
        e.starts_with("anteroom.yaml:6: priority_secret: must be at least 32 bytes (got 18"),
        "{e}"
    );
    assert!(!e.contains("too short a secret"), "never echoed: {e}");
    let long = "a priority secret of 32+ bytes, as written";
    let c = parse(&format!("priority_secret: \"{long}\"\n{base}")).unwrap();
    assert_eq!(
        c.priority_secret.as_ref().unwrap().expose(),
        long.as_bytes()
    );
    let described = c.describe();
    assert!(described.contains("priority grants:  on"), "{described}");
    assert!(!described.contains(long), "{described}");
    assert!(
        parse(&base)
            .unwrap()
            .describe()
            .contains("priority grants:  off")
    );

    // From the environment, with the variable named on error (and the value not shown).
    let f = file_with_rate("10", ":8080");
    let ov = Overrides {
        config: Some(f.path().to_path_buf()),
        ..Overrides::default()
    };
    let e = load(
        &ov,
        &env_map(&[("ANTEROOM_PRIORITY_SECRET", "shortsecret")]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("priority_secret: must be at least 32 bytes"),
        "{e}"
    );
    assert!(
        e.contains("ANTEROOM_PRIORITY_SECRET") && !e.contains("shortsecret"),
        "{e}"
    );
    let c = load(&ov, &env_map(&[("ANTEROOM_PRIORITY_SECRET", long)])).unwrap();
    assert_eq!(c.config.priority_secret.unwrap().expose(), long.as_bytes());
}

#[test]
fn init_yaml_round_trips_with_fresh_secrets() {
    let a = init_yaml();
    let b = init_yaml();
    let ca = parse(&a).unwrap();
    let cb = parse(&b).unwrap();
    assert_ne!(ca.cookie_secret, cb.cookie_secret);
    assert_ne!(ca.admin_token, cb.admin_token);
    // A fresh admission key each time, which the config reads back.
    let (ka, kb) = (
        ca.admission_key.as_ref().unwrap(),
        cb.admission_key.as_ref().unwrap(),
    );
    assert_ne!(ka.public().kid(), kb.public().kid());
    assert_eq!(
        ca.cookie_secret.len(),
        32,
        "64 hex chars decode to 32 bytes"
    );
    assert_eq!(ca.rooms[0].name, "main");
    assert_eq!(ca.rooms[0].rate, 50.0);
    assert_eq!(ca.server, ServerConfig::default());
    // Every SPEC §2 key is present, each with a comment line before or beside it.
    let lines: Vec<&str> = a.lines().collect();
    for key in [
        "listen",
        "admit_interval",
        "cookie_secret",
        "previous_cookie_secrets",
        "admin_token",
        "admission_key",
        "secure_cookies",
        "public_scheme",
        "trusted_proxies",
        "data_dir",
        "fail_open",
        "fail_open_after",
        "admin_listen",
        "admin_allow",
        "metrics_token",
        "access_log",
        "url",
        "brokers",
        "topic",
        "match_host",
        "origin",
        "rate",
        "max_active",
        "session_ttl",
        "abandon_after",
        "join_limit_per_ip",
        "max_sessions_per_client",
        "max_places_per_client",
        "session_clients",
        "join_limit_window",
        "title",
        "message",
        "preserve_host",
        "lottery",
        "schedule",
    ] {
        let i = lines
            .iter()
            .position(|l| l.trim_start().starts_with(&format!("{key}:")))
            .unwrap_or_else(|| panic!("{key} missing from init_yaml"));
        let commented = lines[i].contains(" # ") || lines[i - 1].trim_start().starts_with('#');
        assert!(commented, "{key} has no comment");
    }
    // The commented server section parses when uncommented.
    let uncommented: String = a
        .lines()
        .map(|l| {
            l.strip_prefix("# server:")
                .map(|_| "server:".to_string())
                .or_else(|| l.strip_prefix("# abuse:").map(|_| "abuse:".to_string()))
                .or_else(|| l.strip_prefix("#   ").map(|r| format!("  {r}")))
                .unwrap_or_else(|| l.to_string())
        })
        .collect::<Vec<_>>()
        .join("\n");
    let uncommented = parse(&uncommented).unwrap();
    assert_eq!(uncommented.server, ServerConfig::default());
    // The commented abuse section is SPEC §10's defaults.
    assert!(
        uncommented
            .describe()
            .contains("ban after 20 strikes in 1m")
    );
    // priority_secret is written commented out (grants off), with a fresh secret that
    // works once uncommented.
    assert!(ca.priority_secret.is_none());
    let enabled = a.replace("# priority_secret:", "priority_secret:");
    assert_eq!(
        parse(&enabled).unwrap().priority_secret.unwrap().len(),
        64,
        "64 hex characters, used as written"
    );
}

#[test]
fn abuse_section_parses_and_its_errors_name_key_and_line() {
    let ok = parse(&format!(
        "abuse:\n  strikes: 4\n  window: 30s\n  allow: [10.0.0.0/8]\n  ban_paths: [/.env, '/.git/**']\n{}",
        minimal("")
    ))
    .unwrap();
    assert_eq!(ok.abuse.strikes, 4);
    assert_eq!(ok.abuse.window, Duration::from_secs(30));
    assert!(ok.abuse.ban_paths.is_match("/.git/config"));
    assert!(ok.describe().contains("ban paths:      /.env, /.git/**"));
    // Absent: the defaults.
    assert_eq!(parse(&minimal("")).unwrap().abuse.strikes, 20);
    let e = err(&format!(
        "abuse:\n  allow:\n    - 10.0.0.0/8\n    - nonsense\n{}",
        minimal("")
    ));
    assert!(
        e.contains("abuse.allow[1]") && e.contains(":4:") && e.contains("nonsense"),
        "{e}"
    );
    let e = err(&format!("abuse:\n  ban_paths: ['/a//b']\n{}", minimal("")));
    assert!(e.contains("abuse.ban_paths[0]") && e.contains(":2:"), "{e}");
    let e = err(&format!("abuse:\n  strikes: 0\n{}", minimal("")));
    assert!(e.contains("abuse.strikes") && e.contains(":2:"), "{e}");
    let e = err(&format!("abuse:\n  window: soon\n{}", minimal("")));
    assert!(e.contains("abuse.window") && e.contains(":2:"), "{e}");
    let e = err(&format!("abuse:\n  strike: 3\n{}", minimal("")));
    assert!(e.contains("strike") && e.contains(":2:"), "{e}");
}

#[test]
fn rfc3339_parsing() {
    assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(UNIX_EPOCH));
    for s in [
        "2030-01-01T10:00:00Z",
        "2000-02-29T23:59:59Z",
        "1999-12-31T00:00:00.250Z",
        "2024-06-01T12:34:56.123456789Z",
    ] {
        assert_eq!(
            parse_rfc3339(s),
            Some(humantime::parse_rfc3339(s).unwrap()),
            "{s}"
        );
    }
    assert_eq!(
        parse_rfc3339("2030-01-01T12:00:00+02:00"),
        parse_rfc3339("2030-01-01T10:00:00Z")
    );
    assert_eq!(
        parse_rfc3339("2030-01-01T00:00:00-05:30"),
        parse_rfc3339("2030-01-01T05:30:00Z")
    );
    for bad in [
        "2030-02-30T00:00:00Z",
        "2030-01-01",
        "2030-01-01T25:00:00Z",
        "tomorrow",
        "2030-01-01T00:00:00",
    ] {
        assert_eq!(parse_rfc3339(bad), None, "{bad}");
    }
}

#[test]
fn host_normalization() {
    assert_eq!(normalize_host("Shop.Example.COM:443"), "shop.example.com");
    assert_eq!(normalize_host("shop.example.com."), "shop.example.com");
    assert_eq!(normalize_host("[::1]:8080"), "::1");
    assert_eq!(normalize_host("::1"), "::1");
}

#[test]
fn durations_are_bounded_so_no_deadline_overflows() {
    let e = err(&minimal("    session_ttl: 1000000000y\n"));
    assert!(e.contains("rooms.main.session_ttl"), "{e}");
    assert!(e.contains("at most 365 days"), "{e}");
    assert!(e.contains(":6"), "names the line: {e}");
    let e = err(&format!(
        "server:\n  idle_timeout: 400days\n{}",
        minimal("")
    ));
    assert!(e.contains("server.idle_timeout"), "{e}");
    assert!(e.contains("at most 365 days"), "{e}");
}

#[test]
fn connection_budget_keys_parse_and_are_checked() {
    let c = parse(&format!(
        "server:\n  max_connections: 100\n  max_connections_per_client: 8\n  max_streams: 30\n  \
         max_streams_per_client: 4\n  http2_max_streams: 16\n  body_timeout: 5s\n{}",
        minimal("")
    ))
    .unwrap();
    let s = &c.server;
    assert_eq!(
        (
            s.max_connections_per_client,
            s.max_streams,
            s.max_streams_per_client,
            s.http2_max_streams,
            s.body_timeout
        ),
        (8, 30, 4, 16, Duration::from_secs(5))
    );
    // max_streams defaults to half of max_connections.
    let c = parse(&format!("server:\n  max_connections: 40\n{}", minimal(""))).unwrap();
    assert_eq!(c.server.max_streams, 20);
    // Streams must leave connections for admitted visitors.
    let e = err(&format!(
        "server:\n  max_connections: 40\n  max_streams: 40\n{}",
        minimal("")
    ));
    assert!(
        e.starts_with("anteroom.yaml:3: server.max_streams: must be below server.max_connections"),
        "{e}"
    );
    for (key, value) in [
        ("max_connections_per_client", "0"),
        ("max_streams_per_client", "0"),
        ("http2_max_streams", "0"),
        ("http2_max_streams", "99999999999"),
        ("body_timeout", "0s"),
    ] {
        let e = err(&format!("server:\n  {key}: {value}\n{}", minimal("")));
        assert!(
            e.starts_with(&format!("anteroom.yaml:2: server.{key}: ")),
            "{e}"
        );
    }
}

#[test]
fn traffic_class_keys_parse_and_bad_ones_name_key_and_line() {
    let c = parse(&minimal(
        "    bypass_paths: [\"/webhooks/**\", \"/health\"]\n    asset_paths:\n      - \"*.css\"\n      - /static/**\n    stream_cap: 10\n    max_inflight: 4\n    inflight_wait: 250ms\n    max_waiting: 1000\n",
    ))
    .unwrap();
    let r = &c.rooms[0];
    assert_eq!(r.bypass_paths, ["/webhooks/**", "/health"]);
    assert_eq!(r.asset_paths, ["*.css", "/static/**"]);
    assert_eq!((r.stream_cap, r.max_inflight, r.max_waiting), (10, 4, 1000));
    assert_eq!(r.inflight_wait, Duration::from_millis(250));
    assert_eq!(crate::queue::RoomPolicy::of(r).max_waiting, 1000);
    let described = c.describe();
    assert!(
        described.contains("bypass:       /webhooks/** /health")
            && described.contains("4 in flight (wait 250ms), 10 streams, 1000 in line"),
        "{described}"
    );
    // Defaults: everything off, a 5 s wait.
    let d = parse(&minimal("")).unwrap();
    let r = &d.rooms[0];
    assert!(r.bypass_paths.is_empty() && r.asset_paths.is_empty());
    assert_eq!((r.stream_cap, r.max_inflight, r.max_waiting), (0, 0, 0));
    assert_eq!(r.inflight_wait, Duration::from_secs(5));
    assert!(d.priority_secret.is_none());

    let e = err(&minimal(
        "    asset_paths:\n      - \"*.css\"\n      - \"/a**/b\"\n",
    ));
    assert!(
        e.starts_with("anteroom.yaml:8: rooms.main.asset_paths[1]: is not a valid path glob"),
        "{e}"
    );
    let e = err(&minimal("    bypass_paths: [\"/x?y\"]\n"));
    assert!(
        e.starts_with("anteroom.yaml:6: rooms.main.bypass_paths[0]:"),
        "{e}"
    );
    for (line, key) in [
        ("    stream_cap: -1\n", "stream_cap"),
        ("    max_inflight: lots\n", "max_inflight"),
        ("    max_waiting: 1.5\n", "max_waiting"),
        ("    inflight_wait: soon\n", "inflight_wait"),
    ] {
        let e = err(&minimal(line));
        assert!(
            e.starts_with(&format!("anteroom.yaml:6: rooms.main.{key}: ")),
            "{e}"
        );
    }
    let short = format!("priority_secret: \"too-short\"\n{}", minimal(""));
    let e = err(&short);
    assert!(
        e.starts_with("anteroom.yaml:1: priority_secret: must be at least 32 bytes"),
        "{e}"
    );
    assert!(!e.contains("too-short"), "secrets are not echoed: {e}");
    let ok = format!("priority_secret: \"{}\"\n{}", "p".repeat(32), minimal(""));
    assert!(parse(&ok).unwrap().priority_secret.is_some());
}

#[test]
fn access_log_is_off_stdout_or_a_file_that_opens() {
    use crate::access_log::Target;
    assert_eq!(parse(&minimal("")).unwrap().access_log, Target::Off);
    let with = |v: &str| format!("access_log: {v}\n{}", minimal(""));
    assert_eq!(parse(&with("off")).unwrap().access_log, Target::Off);
    assert_eq!(parse(&with("\"\"")).unwrap().access_log, Target::Off);
    let c = parse(&with("stdout")).unwrap();
    assert_eq!(c.access_log, Target::Stdout);
    assert!(
        c.describe().contains("access log:       stdout"),
        "{}",
        c.describe()
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("access.log");
    let c = parse(&with(&format!("\"{}\"", file.display()))).unwrap();
    assert_eq!(c.access_log, Target::File(file.clone()));
    assert!(
        file.exists(),
        "opened (created) at load, as the writer opens it"
    );
    assert!(
        c.describe().contains("(reopened on SIGHUP)"),
        "{}",
        c.describe()
    );
    // A directory or a path that cannot be opened names the key and the line.
    let e = err(&with(&format!("\"{}\"", dir.path().display())));
    assert!(
        e.starts_with("anteroom.yaml:1: access_log: ") && e.contains("is a directory"),
        "{e}"
    );
    let missing = dir.path().join("no/such/dir/access.log");
    let e = err(&with(&format!("\"{}\"", missing.display())));
    assert!(
        e.starts_with("anteroom.yaml:1: access_log: cannot open"),
        "{e}"
    );
    // ANTEROOM_ACCESS_LOG overrides the file, and its errors say so.
    let f = write_file(&with("off"));
    let ov = Overrides {
        config: Some(f.path().to_path_buf()),
        ..Overrides::default()
    };
    let c = load(&ov, &env_map(&[("ANTEROOM_ACCESS_LOG", "stdout")]))
        .unwrap()
        .config;
    assert_eq!(c.access_log, Target::Stdout);
    let bad = dir.path().display().to_string();
    let e = load(&ov, &env_map(&[("ANTEROOM_ACCESS_LOG", bad.as_str())]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("access_log: ") && e.contains("(set by ANTEROOM_ACCESS_LOG)"),
        "{e}"
    );
}

#[test]
fn adaptive_block_parses_in_both_styles_and_errors_name_key_and_line() {
    // Absent: off.
    assert_eq!(parse(&minimal("")).unwrap().rooms[0].adaptive, None);
    let flow = parse(&minimal(
        "    rate: 20\n    adaptive: {target_latency: 800ms, max_error_ratio: 0.1, min_rate: 2}\n",
    ))
    .unwrap();
    let a = flow.rooms[0].adaptive.clone().unwrap();
    assert_eq!(a.target_latency, Duration::from_millis(800));
    assert_eq!((a.max_error_ratio, a.min_rate), (0.1, 2.0));
    let block = parse(&minimal("    adaptive:\n      target_latency: 1.5s\n")).unwrap();
    let a = block.rooms[0].adaptive.clone().unwrap();
    assert_eq!(a.target_latency, Duration::from_millis(1_500));
    assert_eq!((a.max_error_ratio, a.min_rate), (0.05, 1.0), "defaults");
    assert!(
        block.describe().contains(
            "adaptive:     lowered while origin p95 > 1s 500ms or 5xx > 5%; at least 1/s"
        ),
        "{}",
        block.describe()
    );

    assert_eq!(
        err(&minimal("    adaptive:\n      target_latency: soon\n")),
        "anteroom.yaml:7: rooms.main.adaptive.target_latency: must be a duration like 800ms \
         or 1.5s (got \"soon\")"
    );
    assert_eq!(
        err(&minimal(
            "    adaptive:\n      target_latency: 1s\n      max_error_ratio: 2\n"
        )),
        "anteroom.yaml:8: rooms.main.adaptive.max_error_ratio: must be between 0 and 1"
    );
    assert_eq!(
        err(&minimal(
            "    rate: 5\n    adaptive:\n      target_latency: 1s\n      min_rate: 10\n"
        )),
        "anteroom.yaml:9: rooms.main.adaptive.min_rate: must not exceed the room's rate (5)"
    );
    assert_eq!(
        err(&minimal("    adaptive:\n      min_rate: 1\n")),
        "anteroom.yaml:6: rooms.main.adaptive: target_latency is required: the origin's p95 \
         time to response headers above which the rate is lowered, e.g. `adaptive: \
         {target_latency: 800ms}`"
    );
    let unknown = err(&minimal(
        "    adaptive:\n      target_latency: 1s\n      p99: 2s\n",
    ));
    assert!(
        unknown.starts_with("anteroom.yaml:8: rooms.main.adaptive.p99: unknown key"),
        "{unknown}"
    );
    // `anteroom init` writes it, commented, and its file still loads.
    let init = init_yaml();
    assert!(
        init.contains("# adaptive: {target_latency: 800ms"),
        "{init}"
    );
}
