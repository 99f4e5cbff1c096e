//! The command line: run (default), `init`, `check`, `demo`, `verify-draw`,
//! `grant`, `probe` (a health check of a running instance, [`probe`]),
//! `--version`.
//!
//! Flags are parsed with clap; the environment is read through an injectable lookup so
//! tests never touch the process environment. Clap's own errors (unknown flag, bad value)
//! are usage errors (exit 2); configuration errors are returned for the caller to print
//! (exit 1).

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{ArgAction, Parser, Subcommand, ValueEnum};

use crate::config::{self, Config, ConfigError, Generated, Overrides};

pub mod probe;

/// What the process should do.
#[derive(Debug)]
pub enum Command {
    /// Serve. `generated` says which secrets were made up (print a generated admin token).
    Run {
        /// The validated configuration.
        config: Config,
        /// Log format, verbosity and `--reseed`.
        options: RunOptions,
        /// Which secrets were made up for this run.
        generated: Generated,
        /// The flags, when a config file is named: SIGHUP rereads it with them.
        reload_from: Option<Overrides>,
    },
    /// `reload`: send SIGHUP to the process whose id is in `pid_file` (the config, when
    /// named, was validated first).
    Reload {
        /// The running process's pid file.
        pid_file: PathBuf,
    },
    /// Print [`config::init_yaml`].
    Init,
    /// The validated config; the caller prints [`Config::describe`].
    Check {
        /// The configuration that passed validation.
        config: Config,
    },
    /// The built-in demo origin plus a room in front of it.
    Demo {
        /// Log format, verbosity and `--reseed`.
        options: RunOptions,
    },
    /// Print the version (and whether the front-end is built in).
    Version,
    /// `verify-draw`: check a lottery draw without any config.
    VerifyDraw(VerifyDrawArgs),
    /// `grant`: print a priority grant for `room`, minted by [`mint_grant`].
    Grant {
        /// The configuration holding the room and the priority secret.
        config: Config,
        /// The room the grant admits to.
        room: String,
        /// How long the grant stays valid.
        ttl: std::time::Duration,
    },
    /// `probe`: ask the instance at `addr` for `check`'s endpoint within `timeout`
    /// ([`probe::probe`]).
    Probe {
        /// The instance to ask.
        addr: std::net::SocketAddr,
        /// Which endpoint to ask for.
        check: probe::Check,
        /// How long to wait for the whole exchange.
        timeout: std::time::Duration,
    },
}

/// The arguments of `anteroom verify-draw`, checked by
/// [`crate::fairness::draw::verify_command`].
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub struct VerifyDrawArgs {
    /// The room's lottery salt, hex, as published when the doors opened (default: the
    /// one in --draw)
    #[arg(long, value_name = "HEX")]
    pub salt: Option<String>,
    /// The commitment (hex SHA-256 of the salt) as shown before the doors opened
    /// (default: the one in --draw, which then only checks the document against itself)
    #[arg(long, value_name = "HEX")]
    pub commitment: Option<String>,
    /// Your visitor id (32 hex characters, shown on your receipt)
    #[arg(long, value_name = "HEX")]
    pub visitor_id: String,
    /// The published draw as served by GET /__anteroom/rooms/{room}/draw: a saved JSON
    /// file, `-` for standard input, or an http:// URL. Without it only the salt and your
    /// hash are checked.
    #[arg(long, visible_alias = "document", value_name = "FILE_OR_URL")]
    pub draw: Option<String>,
}

/// Process-wide options that are not part of the config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunOptions {
    /// `--reseed`: the file's runtime settings win over the ones stored.
    pub reseed: bool,
    /// How diagnostic log lines are written.
    pub log_format: LogFormat,
    /// Number of `-v` given.
    pub verbosity: u8,
}

/// The format of the diagnostic log (`--log-format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// A command line that could not be turned into a [`Command`].
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad usage, `--help`: print with `err.print()` / `err.exit()`.
    #[error("{0}")]
    Clap(#[from] clap::Error),
    /// The configuration (file, environment or flags) is invalid.
    #[error("{0}")]
    Config(#[from] ConfigError),
}

impl CliError {
    /// 2 for usage errors (0 for `--help`), 1 for configuration errors.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Clap(e) => e.exit_code(),
            CliError::Config(_) => 1,
        }
    }
}

#[derive(Debug, Parser)]
#[command(
    name = "anteroom",
    about = "A self-hosted virtual waiting room: a reverse proxy that queues visitors fairly \
             in front of an origin.",
    disable_version_flag = true,
    after_help = "Examples:\n  anteroom --origin http://localhost:3000 --rate 50\n  \
                  anteroom init > anteroom.yaml && anteroom --config anteroom.yaml\n  \
                  anteroom demo"
)]
struct Args {
    #[command(subcommand)]
    command: Option<Sub>,

    /// Config file (YAML; `anteroom init` writes one) [env: ANTEROOM_CONFIG]
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,

    /// URL of the site to protect, with no config file [env: ANTEROOM_ORIGIN]
    #[arg(long, value_name = "URL")]
    origin: Option<String>,

    /// Visitors admitted per second [env: ANTEROOM_RATE]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    rate: Option<f64>,

    /// Visitors on the site at once [env: ANTEROOM_MAX_ACTIVE]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    max_active: Option<i64>,

    /// Address to listen on, e.g. :8080 or 127.0.0.1:8080 [default: :8080] [env: ANTEROOM_LISTEN]
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,

    /// Redis URL for a shared queue (redis://host:6379/0) [env: ANTEROOM_REDIS_URL]
    #[arg(long, value_name = "URL")]
    redis: Option<String>,

    /// Directory for the embedded store [default: ./anteroom-data] [env: ANTEROOM_DATA_DIR]
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,

    /// Make the file's runtime settings (rate, max_active, ...) win over the stored ones
    #[arg(long, global = true)]
    reseed: bool,

    /// Let everyone through when the queue store has been down for fail_open_after [env: ANTEROOM_FAIL_OPEN]
    #[arg(long)]
    fail_open: bool,

    /// Log format [default: text] [env: ANTEROOM_LOG_FORMAT]
    #[arg(long, value_enum, global = true, value_name = "FORMAT")]
    log_format: Option<LogFormat>,

    /// More logging (repeat for more)
    #[arg(short = 'v', action = ArgAction::Count, global = true)]
    verbose: u8,

    /// Print the version
    #[arg(short = 'V', long = "version", action = ArgAction::SetTrue)]
    version: bool,
}

#[derive(Debug, Subcommand)]
enum Sub {
    /// Print a commented config file with freshly generated secrets
    Init,
    /// Validate a config (--config FILE) and print what it would run
    Check,
    /// Run a built-in demo origin behind a waiting room on http://localhost:8080
    Demo,
    /// Check a lottery draw: the salt against its commitment, your draw hash and place
    /// (exit 0 verified, 1 not verified, 2 could not check)
    VerifyDraw(VerifyDrawArgs),
    /// Print a single-use priority grant for a room, signed with the config's
    /// priority_secret (--config FILE or ANTEROOM_PRIORITY_SECRET)
    Grant {
        /// The room the grant is for
        #[arg(long, value_name = "ROOM", default_value = "main")]
        room: String,
        /// How long the grant is valid (e.g. 10m, 2h; at most 7d)
        #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = humantime::parse_duration)]
        ttl: std::time::Duration,
    },
    /// Make a running instance reread its config file (SIGHUP to the pid in --pid-file or
    /// the config's pid_file), after validating the file (--config FILE) so a bad file is
    /// refused here. Under systemd, `systemctl reload anteroom` does the same
    Reload {
        /// The running instance's pid file [default: the config's pid_file]
        #[arg(long, value_name = "FILE")]
        pid_file: Option<PathBuf>,
    },
    /// Ask a running instance for its liveness (default) or readiness, at the config's
    /// listen address (--config FILE, the environment, or :8080): exit 0 on 200, 1 with
    /// the reason otherwise. For container health checks; needs no curl
    Probe {
        /// Readiness (/__anteroom/readyz): 503 while draining or the store is down
        #[arg(long, conflicts_with = "live")]
        ready: bool,
        /// Liveness (/__anteroom/healthz), the default
        #[arg(long)]
        live: bool,
        /// Probe this address instead of the config's listen address
        #[arg(long, value_name = "ADDR")]
        address: Option<std::net::SocketAddr>,
        /// Give up after this long (e.g. 2s, 500ms)
        #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = humantime::parse_duration)]
        timeout: std::time::Duration,
    },
}

/// `anteroom grant`: a fresh grant for `room` valid for `ttl` from `now` (unix seconds).
/// The room must be configured and `priority_secret` set; errors name what is missing.
pub fn mint_grant(
    config: &Config,
    room: &str,
    ttl: std::time::Duration,
    now: u64,
) -> Result<String, ConfigError> {
    if !config.rooms.iter().any(|r| r.name == room) {
        let names: Vec<&str> = config.rooms.iter().map(|r| r.name.as_str()).collect();
        return Err(ConfigError::Usage(format!(
            "--room: there is no room named {room:?} (rooms: {})",
            names.join(", ")
        )));
    }
    let Some(secret) = &config.priority_secret else {
        return Err(ConfigError::Invalid {
            file: None,
            line: None,
            key: "priority_secret".to_string(),
            message: "is not set: add it to the config file or set ANTEROOM_PRIORITY_SECRET \
                      (`anteroom init` writes one, commented out)"
                .to_string(),
        });
    };
    crate::priority::mint_for(secret.expose(), room, ttl, now)
        .map_err(|e| ConfigError::Usage(e.into()))
}

/// Whether a config file is named (`--config` or `ANTEROOM_CONFIG`).
fn has_config_file(overrides: &Overrides, env: &dyn Fn(&str) -> Option<String>) -> bool {
    overrides.config.is_some() || env("ANTEROOM_CONFIG").is_some_and(|v| !v.is_empty())
}

/// The address the server would listen on: the config file's `listen` as the server
/// loads it (file, environment, flags); without a file, `--listen`, `ANTEROOM_LISTEN` or
/// the default `:8080`, so a probe needs no origin or room to know where to ask.
fn listen_of(
    overrides: &Overrides,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<std::net::SocketAddr, ConfigError> {
    if has_config_file(overrides, env) {
        return Ok(config::load(overrides, env)?.config.listen);
    }
    let (key, text) = match (
        &overrides.listen,
        env("ANTEROOM_LISTEN").filter(|v| !v.is_empty()),
    ) {
        (Some(flag), _) => ("--listen", flag.clone()),
        (None, Some(var)) => ("ANTEROOM_LISTEN", var),
        (None, None) => ("--listen", ":8080".to_owned()),
    };
    config::parse_listen(&text).map_err(|e| ConfigError::Invalid {
        file: None,
        line: None,
        key: key.to_owned(),
        message: e.0,
    })
}

/// Parse `std::env::args` and the process environment. Usage errors and `--help` print
/// clap's message and exit (code 2, or 0 for help); configuration errors are returned.
pub fn parse() -> Result<Command, ConfigError> {
    let env = |k: &str| std::env::var(k).ok();
    match parse_from(std::env::args_os(), &env) {
        Ok(cmd) => Ok(cmd),
        Err(CliError::Clap(e)) => e.exit(),
        Err(CliError::Config(e)) => Err(e),
    }
}

/// Parse `args` (including the program name) with `env` looking up environment variables.
pub fn parse_from<I, T>(args: I, env: &dyn Fn(&str) -> Option<String>) -> Result<Command, CliError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args = Args::try_parse_from(args)?;
    if args.version {
        return Ok(Command::Version);
    }
    let log_format = match args.log_format {
        Some(f) => f,
        None => match env("ANTEROOM_LOG_FORMAT").filter(|v| !v.is_empty()) {
            None => LogFormat::Text,
            Some(v) => LogFormat::from_str(&v, true).map_err(|_| ConfigError::Invalid {
                file: None,
                line: None,
                key: "ANTEROOM_LOG_FORMAT".to_string(),
                message: format!("must be text or json (got {v:?})"),
            })?,
        },
    };
    let options = RunOptions {
        reseed: args.reseed,
        log_format,
        verbosity: args.verbose,
    };
    let max_active = match args.max_active {
        None => None,
        Some(n) if n >= 1 => Some(n as u64),
        Some(n) => {
            return Err(ConfigError::Invalid {
                file: None,
                line: None,
                key: "--max-active".to_string(),
                message: format!("must be a whole number of at least 1 (got {n})"),
            }
            .into());
        }
    };
    let overrides = Overrides {
        config: args.config,
        origin: args.origin,
        rate: args.rate,
        max_active,
        listen: args.listen,
        redis: args.redis,
        data_dir: args.data_dir,
        fail_open: args.fail_open,
    };
    match args.command {
        Some(Sub::Init) => Ok(Command::Init),
        Some(Sub::Demo) => Ok(Command::Demo { options }),
        Some(Sub::VerifyDraw(verify)) => Ok(Command::VerifyDraw(verify)),
        Some(Sub::Grant { room, ttl }) => {
            let loaded = config::load(&overrides, env)?;
            Ok(Command::Grant {
                config: loaded.config,
                room,
                ttl,
            })
        }
        Some(Sub::Probe {
            ready,
            live: _,
            address,
            timeout,
        }) => {
            let addr = match address {
                Some(addr) => addr,
                None => probe::probe_address(listen_of(&overrides, env)?),
            };
            let check = if ready {
                probe::Check::Ready
            } else {
                probe::Check::Live
            };
            Ok(Command::Probe {
                addr,
                check,
                timeout,
            })
        }
        Some(Sub::Check) => {
            if !has_config_file(&overrides, env) {
                return Err(ConfigError::Usage(
                    "check needs a config file: anteroom check --config FILE".to_string(),
                )
                .into());
            }
            let loaded = config::load(&overrides, env)?;
            Ok(Command::Check {
                config: loaded.config,
            })
        }
        Some(Sub::Reload { pid_file }) => {
            let configured = if has_config_file(&overrides, env) {
                config::load(&overrides, env)?.config.pid_file
            } else {
                None
            };
            let pid_file = pid_file.or(configured).ok_or_else(|| {
                ConfigError::Usage(
                    "reload needs the running instance's pid file: --pid-file FILE, or                      --config FILE with pid_file set"
                        .to_string(),
                )
            })?;
            Ok(Command::Reload { pid_file })
        }
        None => {
            let reload_from = has_config_file(&overrides, env).then(|| overrides.clone());
            let loaded = config::load(&overrides, env)?;
            Ok(Command::Run {
                config: loaded.config,
                options,
                generated: loaded.generated,
                reload_from,
            })
        }
    }
}

#[cfg(test)]
mod tests {
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
        let probed =
            |args: &[&str], env: &dyn Fn(&str) -> Option<String>| match parse_from(args, env)
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
        let Command::Demo { options } = run(&["demo", "--log-format", "text"], &env).unwrap()
        else {
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
}
