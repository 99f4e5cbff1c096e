//! What a running anteroom does on each common signal. None of them ends the process
//! without a drain:
//!
//! - `SIGHUP` (`systemctl reload`, `anteroom reload`): the config file is read again and
//!   what can change live is applied ([`crate::reload`]); without a config file there is
//!   nothing to reread, and the signal is only logged.
//! - `SIGUSR1` (logrotate's `postrotate`, as for nginx): the access log and the audit log
//!   are reopened at their paths.
//! - `SIGUSR2`: logged and otherwise ignored.
//! - `SIGQUIT`: a drain, as `SIGTERM` and `SIGINT` (`run::shutdown_signal`).
//!
//! The handlers are installed before `run::start` returns, so from then on no
//! such signal takes its default action (ending the process, or a core dump for `SIGQUIT`).

use std::sync::{Arc, OnceLock};

use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio_util::sync::CancellationToken;

use crate::gate::App;
use crate::reload::Reloader;

/// The installed signal streams; a kind that cannot be installed is `None` (and logged).
pub struct Signals {
    hangup: Option<Signal>,
    user1: Option<Signal>,
    user2: Option<Signal>,
    quit: Option<Signal>,
}

impl Signals {
    /// Installs the handlers for SIGHUP, SIGUSR1, SIGUSR2 and SIGQUIT.
    pub fn install() -> Signals {
        let one = |kind: SignalKind, name: &str| match signal(kind) {
            Ok(signal) => Some(signal),
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for {name}; it keeps its default action");
                None
            }
        };
        Signals {
            hangup: one(SignalKind::hangup(), "SIGHUP"),
            user1: one(SignalKind::user_defined1(), "SIGUSR1"),
            user2: one(SignalKind::user_defined2(), "SIGUSR2"),
            quit: one(SignalKind::quit(), "SIGQUIT"),
        }
    }
}

/// One signal of `signal`, or never when it could not be installed.
async fn next(signal: &mut Option<Signal>) {
    match signal {
        Some(s) => {
            if s.recv().await.is_none() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}

/// Acts on every signal until `stop` (the background tasks' token). `drain` starts the
/// drain (SIGQUIT); `reloader` is set when there is a config file to reread.
pub async fn run(
    app: Arc<App>,
    mut signals: Signals,
    reloader: Arc<OnceLock<Reloader>>,
    drain: CancellationToken,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = next(&mut signals.hangup) => match reloader.get() {
                Some(reloader) => {
                    tracing::info!("SIGHUP: rereading the config file");
                    reloader.reload(&app).await;
                }
                None => tracing::info!(
                    "SIGHUP: started without a config file, so there is nothing to reload"
                ),
            },
            _ = next(&mut signals.user1) => {
                tracing::info!("SIGUSR1: reopening the access log and the audit log");
                app.admin_state().audit().reopen();
                if !app.reopen_access_log() {
                    tracing::debug!("access_log is off: no access log to reopen");
                }
            }
            _ = next(&mut signals.user2) => {
                tracing::info!("SIGUSR2: ignored (SIGHUP reloads the config, SIGUSR1 reopens the logs)");
            }
            _ = next(&mut signals.quit) => {
                tracing::info!("SIGQUIT: draining (up to the shutdown grace), then snapshotting");
                drain.cancel();
            }
        }
    }
}
