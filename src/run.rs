//! Wiring for a running anteroom: open the store and its rooms, start the admission driver,
//! the live-stream ticker and the snapshot loop, serve until a signal, then drain and
//! snapshot. `main` and the end-to-end tests both start the product through here.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::admission::Admission;
use crate::clock::Clock;
use crate::config::Config;
use crate::gate::App;
use crate::queue::{
    MemoryStore, QueueStore, RedisStore, RoomPolicy, RoomSettings, Seeded, StoreError,
};
use crate::server::{self, ServerLimits};

/// Why an instance could not start or did not stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("redis.url: {0}")]
    Redis(#[source] StoreError),
    #[error("data_dir: cannot open {path}: {source}")]
    DataDir {
        path: std::path::PathBuf,
        #[source]
        source: StoreError,
    },
    /// The store refused to open a room (its message names what).
    #[error("{source}")]
    OpenRoom {
        room: String,
        #[source]
        source: StoreError,
    },
    #[error(transparent)]
    Events(#[from] crate::events::StartError),
    #[error(transparent)]
    App(#[from] crate::gate::AppError),
    #[error("{0}")]
    Listener(#[source] std::io::Error),
    #[error("server failed: {0}")]
    Server(#[source] std::io::Error),
    #[error("final snapshot failed: {0}")]
    Snapshot(#[source] StoreError),
    #[error("server task panicked: {0}")]
    Panicked(#[from] tokio::task::JoinError),
}

/// How often the embedded store is snapshotted; a crash loses at most this much.
pub const SNAPSHOT_INTERVAL: Duration = Duration::from_secs(5);

/// A started instance: where it listens and how to stop it.
pub struct Running {
    pub addr: SocketAddr,
    pub app: Arc<App>,
    stop: CancellationToken,
    done: tokio::task::JoinHandle<Result<(), RunError>>,
}

impl Running {
    /// Stops accepting, drains, snapshots, and waits for all of it.
    pub async fn shutdown(self) -> Result<(), RunError> {
        self.stop.cancel();
        self.done.await?
    }

    /// Waits until the instance stops by itself (after [`Running::stop_handle`] is used).
    pub async fn wait(self) -> Result<(), RunError> {
        self.done.await?
    }

    pub fn stop_handle(&self) -> CancellationToken {
        self.stop.clone()
    }
}

/// Opens the store the config asks for: Redis when `redis.url` is set (one node, or a
/// Cluster given as several comma-separated node URLs), else the embedded store.
pub async fn open_store(config: &Config) -> Result<Arc<dyn QueueStore>, RunError> {
    if !config.redis.is_embedded() {
        let nodes = config.redis.nodes();
        let store = RedisStore::connect_with(&nodes, config.redis.ca_file.as_ref())
            .await
            .map_err(RunError::Redis)?;
        tracing::info!(redis = store.describe(), "queue store: Redis");
        return Ok(Arc::new(store));
    }
    let store = MemoryStore::open(Clock::system(), &config.data_dir).map_err(|source| {
        RunError::DataDir {
            path: config.data_dir.clone(),
            source,
        }
    })?;
    Ok(Arc::new(store))
}

/// Starts anteroom on `listener` with `store`.
pub async fn start(
    config: &Config,
    store: Arc<dyn QueueStore>,
    listener: TcpListener,
    reseed: bool,
) -> Result<Running, RunError> {
    for room in &config.rooms {
        let seed = RoomSettings::seed(room);
        let policy = RoomPolicy::of(room);
        let seeded = store
            .open_room(&room.name, &seed, &policy, reseed)
            .await
            .map_err(|source| RunError::OpenRoom {
                room: room.name.clone(),
                source,
            })?;
        match seeded {
            Seeded::KeptLive(live) => tracing::warn!(
                room = %room.name,
                file = ?seed,
                live = ?live,
                "the config file's settings differ from the live ones kept in the store; the live ones stay (use --reseed to make the file win)"
            ),
            Seeded::Reseeded => {
                tracing::warn!(room = %room.name, "--reseed: the config file's settings replaced the live ones")
            }
            Seeded::Fresh | Seeded::Unchanged => {}
        }
    }

    let fail_open_after = config.fail_open.then_some(config.fail_open_after);
    let events = crate::events::start(&config.kafka)?;
    let admission = Arc::new(Admission::new(store.clone(), fail_open_after, events));
    let app = Arc::new(App::new(config, admission.clone())?);
    let rooms = app.room_names();
    admission.refresh_stats(&rooms).await;

    let addr = listener.local_addr().map_err(RunError::Listener)?;
    let stop = CancellationToken::new();
    let background = CancellationToken::new();

    tokio::spawn(
        admission
            .clone()
            .run(rooms, config.admit_interval, background.clone()),
    );
    {
        let app = app.clone();
        let background = background.clone();
        tokio::spawn(async move { app.live.run(&app.admission, background).await });
    }
    tokio::spawn(snapshot_loop(store.clone(), background.clone()));
    tokio::spawn(stream_touch_loop(app.clone(), background.clone()));

    let limits = ServerLimits {
        header_read_timeout: config.server.header_read_timeout,
        idle_timeout: config.server.idle_timeout,
        max_connections: config.server.max_connections,
        max_connections_per_client: config.server.max_connections_per_client,
        trusted_proxies: config.trusted_proxies.clone().into(),
        http2_max_streams: config.server.http2_max_streams,
        shutdown_grace: config.server.shutdown_grace,
    };
    let done = {
        let app = app.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let handler = {
                let app = app.clone();
                move |req, peer| {
                    let app = app.clone();
                    async move { app.handle(req, peer).await }
                }
            };
            let shutdown = {
                let app = app.clone();
                let stop = stop.clone();
                async move {
                    stop.cancelled().await;
                    // Streams would hold the drain open; end them so pages reload on
                    // their jittered timers.
                    app.live.close_all();
                }
            };
            let served = server::serve(listener, limits, handler, shutdown).await;
            background.cancel();
            let persisted = store.persist().await;
            served.map_err(RunError::Server)?;
            persisted.map_err(RunError::Snapshot)?;
            tracing::info!("stopped");
            Ok(())
        })
    };
    Ok(Running {
        addr,
        app,
        stop,
        done,
    })
}

async fn snapshot_loop(store: Arc<dyn QueueStore>, stop: CancellationToken) {
    let mut ticks = tokio::time::interval(SNAPSHOT_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    let failures = crate::log_limiter::LogLimiter::new(Duration::from_secs(60));
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticks.tick() => {
                if let Err(e) = store.persist().await
                    && failures.allow()
                {
                    tracing::error!(error = %e, "snapshot failed; the queue is only in memory until it succeeds");
                }
            }
        }
    }
}

/// Keeps the sessions of visitors with an open stream to the origin alive (SPEC §10): one
/// batched store call per room with streams, every [`STREAM_TOUCH`]. The shortest
/// `session_ttl` is 1 s and a session is reaped only after a whole ttl without activity,
/// so a touch each half second never lets an open stream's session lapse.
async fn stream_touch_loop(app: Arc<App>, stop: CancellationToken) {
    let mut ticks = tokio::time::interval(STREAM_TOUCH);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticks.tick() => app.touch_streams().await,
        }
    }
}

/// How often open streams' sessions are touched.
const STREAM_TOUCH: Duration = Duration::from_millis(500);

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("signal received: draining (up to the shutdown grace), then snapshotting");
}
