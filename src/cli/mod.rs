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
mod tests;
