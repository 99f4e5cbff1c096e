//! Where values come from: flags over the environment over the file over defaults, the
//! config path, errors naming the flag or variable that set a value, the origin-only start
//! that generates its secrets, and `anteroom init`'s file.

use super::*;

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
    // Every documented key is present, each with a comment line before or beside it.
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
    // The commented abuse section is the defaults.
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
