//! The `anteroom` binary: parse the command line, set up logging, and hand over to
//! [`anteroom::run`]. Everything of substance lives in the library.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use anteroom::cli::{self, Command, RunOptions};
use anteroom::config::Config;
use anteroom::{demo, run};
use anyhow::Context;
use tokio::net::TcpListener;

fn main() -> ExitCode {
    let command = match cli::parse() {
        Ok(command) => command,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    match command {
        Command::Version => {
            println!(
                "anteroom {} (front-end: {})",
                env!("CARGO_PKG_VERSION"),
                if anteroom::http::pages::FRONTEND_BUILT_IN {
                    "built in"
                } else {
                    "not built in; plain pages"
                }
            );
            ExitCode::SUCCESS
        }
        Command::Init => {
            print!("{}", anteroom::config::init_yaml());
            ExitCode::SUCCESS
        }
        Command::Check { config } => {
            println!("configuration is valid\n\n{}", config.describe());
            ExitCode::SUCCESS
        }
        Command::Run {
            config,
            options,
            generated,
            reload_from,
        } => {
            init_logging(&options);
            if generated.admin_token {
                println!(
                    "admin token (generated for this run; set ANTEROOM_ADMIN_TOKEN to keep one): {}",
                    config.admin_token.as_str()
                );
            }
            if generated.cookie_secret {
                tracing::warn!(
                    "cookie_secret was generated for this run: visitors' places will not survive a restart unless ANTEROOM_COOKIE_SECRET is set"
                );
            }
            exit(serve(config, options.reseed, reload_from))
        }
        Command::Reload { pid_file } => reload(&pid_file),
        Command::Demo { options } => {
            init_logging(&options);
            exit(serve_demo())
        }
        Command::VerifyDraw(args) => verify_draw(&args),
        Command::Probe {
            addr,
            check,
            timeout,
        } => probe(addr, check, timeout),
        Command::Grant { config, room, ttl } => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs();
            match cli::mint_grant(&config, &room, ttl, now) {
                Ok(grant) => {
                    println!("{grant}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(1)
                }
            }
        }
    }
}

/// `anteroom reload`: SIGHUP to the pid in `pid_file`; 0 when sent, 1 with the reason.
fn reload(pid_file: &std::path::Path) -> ExitCode {
    match anteroom::reload::signal_reload(pid_file) {
        Ok(pid) => {
            println!("sent SIGHUP to {pid}; its log says what the reload changed");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("anteroom reload: {e}");
            ExitCode::from(1)
        }
    }
}

/// `anteroom probe`: 0 on a 200, 1 with the reason on one line otherwise.
fn probe(
    addr: std::net::SocketAddr,
    check: cli::probe::Check,
    timeout: std::time::Duration,
) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("anteroom probe: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(cli::probe::probe(addr, check, timeout)) {
        Ok(reason) => {
            println!("ok: {} {reason}", check.path());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("anteroom probe: {e}");
            ExitCode::from(1)
        }
    }
}

/// `anteroom verify-draw`: 0 verified, 1 not verified, 2 could not check.
fn verify_draw(args: &cli::VerifyDrawArgs) -> ExitCode {
    let checked = runtime().map_err(|e| e.to_string()).and_then(|rt| {
        rt.block_on(anteroom::fairness::draw::verify_command(
            args.salt.as_deref(),
            args.commitment.as_deref(),
            &args.visitor_id,
            args.draw.as_deref(),
        ))
        .map_err(|e| e.to_string())
    });
    match checked {
        Ok(verification) => {
            print!("{}", verification.report());
            if verification.ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn exit(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn init_logging(options: &RunOptions) {
    let default = match options.verbosity {
        0 => "info",
        1 => "anteroom=debug,info",
        _ => "debug",
    };
    anteroom::logging::init(default, options.log_format);
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

fn serve(
    config: Config,
    reseed: bool,
    reload_from: Option<anteroom::config::Overrides>,
) -> anyhow::Result<()> {
    runtime()?.block_on(serve_until_signal(config, reseed, None, reload_from))
}

async fn serve_until_signal(
    config: Config,
    reseed: bool,
    banner: Option<String>,
    reload_from: Option<anteroom::config::Overrides>,
) -> anyhow::Result<()> {
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("listen: cannot bind {}", config.listen))?;
    let store = run::open_store(&config).await?;
    let running = run::start(&config, store, listener, reseed).await?;
    tracing::info!(addr = %running.addr, rooms = config.rooms.len(), "anteroom is listening");
    if let Some(admin) = running.admin_addr {
        tracing::info!(addr = %admin, "admin listener (control room, admin API, /metrics)");
    }
    if let Some(overrides) = reload_from {
        running.reload_with(anteroom::reload::Reloader::new(overrides, config.clone()));
    }
    let pid_file = match &config.pid_file {
        Some(path) => Some(anteroom::reload::PidFile::write(path)?),
        None => None,
    };
    if let Some(banner) = banner {
        println!("{banner}");
    }
    let stop = running.stop_handle();
    tokio::spawn(async move {
        run::shutdown_signal().await;
        stop.cancel();
    });
    let result = running.wait().await;
    drop(pid_file);
    Ok(result?)
}

fn serve_demo() -> anyhow::Result<()> {
    runtime()?.block_on(async {
        let origin = TcpListener::bind("127.0.0.1:0")
            .await
            .context("demo origin: cannot bind")?;
        let origin_addr = origin.local_addr()?;
        tokio::spawn(demo::serve_origin(origin));
        // A fresh private directory (0700, created exclusively under a random name) for the
        // demo's snapshots, so every demo starts with an empty line and no other local user
        // can plant files or links in it beforehand.
        let data_dir = anteroom::fsutil::fresh_private_dir(&std::env::temp_dir(), "anteroom-demo-")
            .context("demo: cannot create a private data directory")?;
        let config = demo::config(origin_addr, &data_dir)?;
        let banner = demo::banner(config.listen);
        let result = serve_until_signal(config, false, Some(banner), None).await;
        let _ = std::fs::remove_dir_all(&data_dir);
        result
    })
}
