//! The keys of one feature each: the admission key, priority grants, `abuse:`, timestamps,
//! hosts, duration bounds, the connection budget, traffic classes, the access log and
//! `adaptive:`; each parses, and each bad value names its key and line.

use super::*;

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
    assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Ok(UNIX_EPOCH));
    for s in [
        "2030-01-01T10:00:00Z",
        "2000-02-29T23:59:59Z",
        "1999-12-31T00:00:00.250Z",
        "2024-06-01T12:34:56.123456789Z",
    ] {
        assert_eq!(
            parse_rfc3339(s),
            Ok(humantime::parse_rfc3339(s).unwrap()),
            "{s}"
        );
    }
    for (with_offset, utc) in [
        ("2030-01-01T12:00:00+02:00", "2030-01-01T10:00:00Z"),
        ("2030-01-01T00:00:00-05:30", "2030-01-01T05:30:00Z"),
        // RFC 3339 allows a space and lower case.
        ("2030-01-01 10:00:00z", "2030-01-01T10:00:00Z"),
        (" 2030-01-01t10:00:00.5+00:00 ", "2030-01-01T10:00:00.5Z"),
    ] {
        assert_eq!(
            parse_rfc3339(with_offset),
            parse_rfc3339(utc),
            "{with_offset}"
        );
        assert!(parse_rfc3339(utc).is_ok(), "{utc}");
    }
    for bad in [
        "2030-02-30T00:00:00Z",
        "2030-01-01",
        "2030-01-01T25:00:00Z",
        "tomorrow",
        "",
        // No offset: a different moment in every replica's zone.
        "2030-01-01T00:00:00",
        // A zone jiff would take and ignore (it has no zone database here): refused, so
        // an operator's zone never silently means nothing.
        "2030-01-01T10:00:00Z[Europe/Paris]",
        "2030-01-01T10:00:00+01:00[Bogus/Zone]",
    ] {
        assert_eq!(parse_rfc3339(bad), Err(TimeError::Format), "{bad}");
    }
    // Before 1970 is a time, but not one the store can keep: said so, not clamped.
    for early in [
        "1969-12-31T23:59:59Z",
        "1969-12-31T23:59:59.5Z",
        "0001-01-01T00:00:00Z",
    ] {
        assert_eq!(parse_rfc3339(early), Err(TimeError::BeforeEpoch), "{early}");
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
         max_streams_per_client: 4\n  http2_max_streams: 16\n  body_timeout: 5s\n  \
         max_header_bytes: 32768\n{}",
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
            s.body_timeout,
            s.max_header_bytes
        ),
        (8, 30, 4, 16, Duration::from_secs(5), 32768)
    );
    assert_eq!(parse(&minimal("")).unwrap().server.max_header_bytes, 16384);
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
        ("max_header_bytes", "4096"),
        ("max_header_bytes", "2000000"),
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

#[test]
fn challenge_and_shadow_after_parse_default_off_and_name_bad_values() {
    use crate::challenge::ChallengeMode;
    let room = parse(&minimal("")).unwrap().rooms.remove(0);
    assert_eq!(room.challenge.mode, ChallengeMode::Off);
    assert_eq!(room.challenge.difficulty, 0);
    assert_eq!(room.challenge.no_js_wait, Duration::from_secs(20));
    assert_eq!(room.shadow_after, 0);
    let room = parse(&minimal(
        "    challenge:\n      mode: under_load\n      difficulty: 2\n      no_js_wait: 45s\n    shadow_after: 10\n",
    ))
    .unwrap()
    .rooms
    .remove(0);
    assert_eq!(room.challenge.mode, ChallengeMode::UnderLoad);
    assert_eq!(room.challenge.difficulty, 2);
    assert_eq!(room.challenge.no_js_wait, Duration::from_secs(45));
    assert_eq!(room.shadow_after, 10);
    let always = parse(&minimal("    challenge: {mode: always}\n"))
        .unwrap()
        .rooms
        .remove(0);
    assert_eq!(always.challenge.mode, ChallengeMode::Always);
    for (tail, want) in [
        (
            "    challenge:\n      mode: on\n",
            "anteroom.yaml:7: rooms.main.challenge.mode: must be one of off, under_load, always (got \"on\")",
        ),
        (
            "    challenge:\n      difficulty: 16\n",
            "anteroom.yaml:7: rooms.main.challenge.difficulty: must be a whole number of extra bits from 0 to 15",
        ),
        (
            "    challenge:\n      no_js_wait: 500ms\n",
            "anteroom.yaml:7: rooms.main.challenge.no_js_wait: must be from 1s to 4m",
        ),
        (
            "    challenge:\n      no_js_wait: 5m\n",
            "anteroom.yaml:7: rooms.main.challenge.no_js_wait: must be from 1s to 4m",
        ),
        (
            "    challenge:\n      bits: 3\n",
            "anteroom.yaml:7: rooms.main.challenge",
        ),
        (
            "    shadow_after: -1\n",
            "anteroom.yaml:6: rooms.main.shadow_after: must be a whole number of strikes",
        ),
    ] {
        let e = err(&minimal(tail));
        assert!(e.starts_with(want), "{tail:?}: {e}");
    }
}

#[test]
fn check_describes_the_door_only_when_it_is_on() {
    assert!(!parse(&minimal("")).unwrap().describe().contains("door:"));
    let c = parse(&minimal(
        "    challenge: {mode: under_load, difficulty: 1}\n    shadow_after: 10\n",
    ))
    .unwrap();
    let described = c.describe();
    assert!(
        described.contains(
            "door:         proof of work under_load at 18 bits (+1 per strike), 20s without JavaScript; shadow line at 10 strikes"
        ),
        "{described}"
    );
}
