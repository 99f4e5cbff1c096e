//! The command line: what each subcommand parses to, and its errors.

use super::*;
use std::collections::HashMap;

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| map.get(k).cloned()
}

fn no_env(_: &str) -> Option<String> {
    None
}

#[test]
fn probe_asks_where_the_server_would_listen() {
    let probed = |args: &[&str], env: &dyn Fn(&str) -> Option<String>| match parse_from(args, env)
        .unwrap()
    {
        Command::Probe { addr, check, .. } => (addr.to_string(), check),
        other => panic!("{other:?}"),
    };
    let live = probe::Check::Live;
    assert_eq!(
        probed(&["anteroom", "probe"], &no_env),
        ("127.0.0.1:8080".into(), live)
    );
    let env = env_of(&[("ANTEROOM_LISTEN", "[::]:9090")]);
    assert_eq!(
        probed(&["anteroom", "probe", "--ready"], &env),
        ("[::1]:9090".into(), probe::Check::Ready)
    );
    assert_eq!(
        probed(
            &["anteroom", "--listen", "10.0.0.5:7000", "probe", "--live"],
            &env
        ),
        ("10.0.0.5:7000".into(), live)
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("anteroom.yaml");
    std::fs::write(
        &file,
        "listen: \":7443\"\nrooms:\n  main:\n    origin: http://127.0.0.1:3000\n",
    )
    .unwrap();
    let file = file.to_str().unwrap();
    // The secrets from the environment, as the server gets them in a container.
    let secrets = env_of(&[
        ("ANTEROOM_COOKIE_SECRET", &"ab".repeat(32)),
        ("ANTEROOM_ADMIN_TOKEN", "probe-test-admin-token-0123456789"),
        ("ANTEROOM_LISTEN", "127.0.0.1:1"),
    ]);
    assert_eq!(
        probed(&["anteroom", "probe", "--config", file], &secrets),
        ("127.0.0.1:1".into(), live),
        "the environment overrides the file, as for the server"
    );
    let secrets = env_of(&[
        ("ANTEROOM_COOKIE_SECRET", &"ab".repeat(32)),
        ("ANTEROOM_ADMIN_TOKEN", "probe-test-admin-token-0123456789"),
    ]);
    assert_eq!(
        probed(&["anteroom", "probe", "--config", file], &secrets),
        ("127.0.0.1:7443".into(), live)
    );
    assert!(parse_from(["anteroom", "probe", "--ready", "--live"], &no_env).is_err());
    let e = parse_from(
        ["anteroom", "probe"],
        &env_of(&[("ANTEROOM_LISTEN", "nope")]),
    );
    assert!(matches!(e, Err(CliError::Config(ref c)) if c.key() == Some("ANTEROOM_LISTEN")));
}

fn run(args: &[&str], env: &dyn Fn(&str) -> Option<String>) -> Result<Command, CliError> {
    let mut all = vec!["anteroom"];
    all.extend_from_slice(args);
    parse_from(all, env)
}

fn yaml_file(text: &str) -> tempfile::NamedTempFile {
    use std::io::Write;
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

const SECRET: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

#[test]
fn origin_only_mode() {
    let cmd = run(
        &[
            "--origin",
            "http://localhost:3000",
            "--rate",
            "7",
            "--max-active",
            "9",
        ],
        &no_env,
    )
    .unwrap();
    let Command::Run {
        config,
        options,
        generated,
        ..
    } = cmd
    else {
        panic!("expected Run")
    };
    assert_eq!(config.rooms.len(), 1);
    assert_eq!(config.rooms[0].name, "main");
    assert_eq!(config.rooms[0].rate, 7.0);
    assert_eq!(config.rooms[0].max_active, 9);
    assert!(generated.admin_token && generated.cookie_secret);
    assert_eq!(options.log_format, LogFormat::Text);
    assert_eq!(options.verbosity, 0);
    assert!(!options.reseed);
}

#[test]
fn options_and_flags() {
    let cmd = run(
        &[
            "--origin",
            "http://localhost:3000",
            "-vv",
            "--reseed",
            "--log-format",
            "json",
            "--listen",
            "127.0.0.1:9000",
            "--fail-open",
            "--data-dir",
            "/tmp/x",
            "--redis",
            "redis://localhost:6379/0",
        ],
        &no_env,
    )
    .unwrap();
    let Command::Run {
        config, options, ..
    } = cmd
    else {
        panic!("expected Run")
    };
    assert_eq!(
        options,
        RunOptions {
            reseed: true,
            log_format: LogFormat::Json,
            verbosity: 2
        }
    );
    assert_eq!(config.listen.to_string(), "127.0.0.1:9000");
    assert!(config.fail_open);
    assert_eq!(config.data_dir, PathBuf::from("/tmp/x"));
    assert_eq!(config.redis.url, "redis://localhost:6379/0");
}

#[test]
fn log_format_from_env_and_flag_beats_it() {
    let env = env_of(&[("ANTEROOM_LOG_FORMAT", "json")]);
    let Command::Demo { options } = run(&["demo"], &env).unwrap() else {
        panic!()
    };
    assert_eq!(options.log_format, LogFormat::Json);
    let Command::Demo { options } = run(&["demo", "--log-format", "text"], &env).unwrap() else {
        panic!()
    };
    assert_eq!(options.log_format, LogFormat::Text);
    let bad = env_of(&[("ANTEROOM_LOG_FORMAT", "xml")]);
    let err = run(&["demo"], &bad).unwrap_err();
    assert_eq!(err.exit_code(), 1);
    assert!(err.to_string().contains("ANTEROOM_LOG_FORMAT"), "{err}");
}

#[test]
fn version_init_demo() {
    assert!(matches!(
        run(&["--version"], &no_env).unwrap(),
        Command::Version
    ));
    assert!(matches!(run(&["-V"], &no_env).unwrap(), Command::Version));
    assert!(matches!(run(&["init"], &no_env).unwrap(), Command::Init));
    let Command::Demo { options } = run(&["demo", "-v"], &no_env).unwrap() else {
        panic!()
    };
    assert_eq!(options.verbosity, 1);
}

#[test]
fn verify_draw_needs_no_config() {
    let cmd = run(
        &[
            "verify-draw",
            "--salt",
            "00",
            "--commitment",
            "ab",
            "--visitor-id",
            "cd",
            "--draw",
            "draw.json",
        ],
        &no_env,
    )
    .unwrap();
    let Command::VerifyDraw(args) = cmd else {
        panic!("{cmd:?}")
    };
    assert_eq!(args.draw.as_deref(), Some("draw.json"));
    assert!(run(&["verify-draw", "--salt", "00"], &no_env).is_err());
}

#[test]
fn nothing_to_do_is_a_clear_error() {
    let err = run(&[], &no_env).unwrap_err();
    let msg = err.to_string();
    assert_eq!(err.exit_code(), 1);
    assert!(msg.contains("--origin") && msg.contains("--config") && msg.contains("demo"));
}

#[test]
fn usage_errors_are_clap_errors_with_code_2() {
    let err = run(&["--bogus"], &no_env).unwrap_err();
    assert!(matches!(err, CliError::Clap(_)));
    assert_eq!(err.exit_code(), 2);
    let err = run(&["--rate", "fast"], &no_env).unwrap_err();
    assert_eq!(err.exit_code(), 2);
    let err = run(&["--log-format", "xml"], &no_env).unwrap_err();
    assert_eq!(err.exit_code(), 2);
}

#[test]
fn check_needs_config_and_validates() {
    let err = run(&["check"], &no_env).unwrap_err();
    assert!(err.to_string().contains("--config"), "{err}");

    let f = yaml_file(&format!(
        "cookie_secret: \"{SECRET}\"\nadmin_token: \"abcdefghijklmnop\"\nrooms:\n  shop:\n    origin: http://127.0.0.1:3000\n"
    ));
    let path = f.path().to_str().unwrap();
    let Command::Check { config } = run(&["check", "--config", path], &no_env).unwrap() else {
        panic!()
    };
    assert_eq!(config.rooms[0].name, "shop");
    // ANTEROOM_CONFIG works too.
    let env = env_of(&[("ANTEROOM_CONFIG", path)]);
    assert!(matches!(
        run(&["check"], &env).unwrap(),
        Command::Check { .. }
    ));

    let bad = yaml_file(&format!(
        "cookie_secret: \"{SECRET}\"\nadmin_token: \"abcdefghijklmnop\"\nrooms:\n  shop:\n    origin: http://127.0.0.1:3000\n    rate: -5\n"
    ));
    let bad_path = bad.path().to_str().unwrap();
    let err = run(&["check", "--config", bad_path], &no_env).unwrap_err();
    assert_eq!(err.exit_code(), 1);
    assert_eq!(
        err.to_string(),
        format!("{bad_path}:6: rooms.shop.rate: must be a number greater than 0 (got -5)")
    );
}

#[test]
fn grant_mints_from_the_config_secret_and_names_what_is_missing() {
    let secret = "a priority secret of 32+ bytes, as written";
    let f = yaml_file(&format!(
        "cookie_secret: \"{SECRET}\"\nadmin_token: \"abcdefghijklmnop\"\npriority_secret: \"{secret}\"\nrooms:\n  shop:\n    origin: http://127.0.0.1:3000\n"
    ));
    let path = f.path().to_str().unwrap();
    let Command::Grant { config, room, ttl } = run(
        &["grant", "--config", path, "--room", "shop", "--ttl", "2h"],
        &no_env,
    )
    .unwrap() else {
        panic!()
    };
    assert_eq!((room.as_str(), ttl.as_secs()), ("shop", 7200));
    let now = 1_800_000_000;
    let grant = mint_grant(&config, &room, ttl, now).unwrap();
    let g = crate::priority::verify(secret.as_bytes(), &grant, "shop", now).unwrap();
    assert_eq!(g.expires_at, now + 7200);
    let e = mint_grant(&config, "nope", ttl, now)
        .unwrap_err()
        .to_string();
    assert!(e.contains("--room") && e.contains("shop"), "{e}");
    let e = mint_grant(
        &config,
        "shop",
        std::time::Duration::from_secs(30 * 86400),
        now,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("--ttl"), "{e}");
    // Defaults: room main, 10 minutes; no secret is an error naming the key.
    let plain = yaml_file(&format!(
        "cookie_secret: \"{SECRET}\"\nadmin_token: \"abcdefghijklmnop\"\nrooms:\n  main:\n    origin: http://127.0.0.1:3000\n"
    ));
    let Command::Grant { config, room, ttl } = run(
        &["grant", "--config", plain.path().to_str().unwrap()],
        &no_env,
    )
    .unwrap() else {
        panic!()
    };
    assert_eq!((room.as_str(), ttl.as_secs()), ("main", 600));
    let e = mint_grant(&config, &room, ttl, now)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("priority_secret: is not set"), "{e}");
    // The secret from the environment, never a flag.
    let env = env_of(&[("ANTEROOM_PRIORITY_SECRET", secret)]);
    let Command::Grant { config, .. } =
        run(&["grant", "--config", plain.path().to_str().unwrap()], &env).unwrap()
    else {
        panic!()
    };
    assert!(mint_grant(&config, "main", ttl, now).is_ok());
    assert!(run(&["grant", "--priority-secret", secret], &no_env).is_err());
    assert!(run(&["grant", "--ttl", "soon"], &no_env).is_err());
}

#[test]
fn negative_rate_flag_reaches_validation() {
    let err = run(&["--origin", "http://a:1", "--rate", "-5"], &no_env).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("rooms.main.rate") && msg.contains("--rate"),
        "{msg}"
    );
    let err = run(&["--origin", "http://a:1", "--max-active", "0"], &no_env).unwrap_err();
    assert!(err.to_string().contains("--max-active"), "{err}");
}

#[test]
fn config_flag_with_overrides() {
    let f = yaml_file(&format!(
        "cookie_secret: \"{SECRET}\"\nadmin_token: \"abcdefghijklmnop\"\nrooms:\n  shop:\n    origin: http://127.0.0.1:3000\n    rate: 10\n"
    ));
    let path = f.path().to_str().unwrap();
    let Command::Run {
        config, generated, ..
    } = run(&["--config", path, "--rate", "99"], &no_env).unwrap()
    else {
        panic!()
    };
    assert_eq!(config.rooms[0].rate, 99.0);
    assert_eq!(generated, Generated::default());
}

#[test]
fn reload_finds_the_pid_file_and_validates_the_config_first() {
    let good = yaml_file(
        "cookie_secret: \"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"\n\
         admin_token: \"reload-cli-admin-token\"\npid_file: /run/anteroom-test.pid\n\
         rooms:\n  main:\n    origin: http://127.0.0.1:3000\n",
    );
    let path = good.path().to_str().unwrap();
    let Command::Reload { pid_file } = run(&["reload", "--config", path], &no_env).unwrap() else {
        panic!("expected Reload")
    };
    assert_eq!(pid_file, PathBuf::from("/run/anteroom-test.pid"));
    let Command::Reload { pid_file } = run(
        &["reload", "--config", path, "--pid-file", "/tmp/other.pid"],
        &no_env,
    )
    .unwrap() else {
        panic!("expected Reload")
    };
    assert_eq!(pid_file, PathBuf::from("/tmp/other.pid"));

    let Err(CliError::Config(e)) = run(&["reload"], &no_env) else {
        panic!("a reload with no pid file is refused")
    };
    assert!(e.to_string().contains("--pid-file"), "{e}");
    let bad = yaml_file(&format!(
        "cookie_secret: \"{SECRET}\"\nadmin_token: \"reload-cli-admin-token\"\n\
         rooms:\n  main:\n    origin: http://127.0.0.1:3000\n    rate: -1\n"
    ));
    let Err(CliError::Config(e)) = run(
        &[
            "reload",
            "--config",
            bad.path().to_str().unwrap(),
            "--pid-file",
            "/tmp/x.pid",
        ],
        &no_env,
    ) else {
        panic!("a bad file is refused before any signal")
    };
    assert!(e.to_string().contains("rooms.main.rate"), "{e}");
}
