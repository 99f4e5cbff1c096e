//! Wiring for a running anteroom: open the store and its rooms, start the admission driver,
//! the live-stream ticker and the snapshot loop, act on signals ([`crate::signals`]), serve
//! until a drain is asked for, then drain and snapshot. `main` and the end-to-end tests both start the product through here.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::abuse::{AbuseEvent, AbuseRegistry, RedisAbuse};
use crate::admission::Admission;
use crate::clock::Clock;
use crate::config::Config;
use crate::gate::App;
use crate::metrics::Listener;
use crate::queue::{
    MemoryStore, QueueStore, RedisStore, RoomPolicy, RoomSettings, Seeded, StoreError,
};
use crate::server::{self, ServerLimits};

/// Why an instance could not start or did not stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The Redis store could not be reached or set up.
    #[error("redis.url: {0}")]
    Redis(#[source] StoreError),
    /// The embedded store could not open its snapshot in `data_dir`.
    #[error("data_dir: cannot open {path}: {source}")]
    DataDir {
        /// The data directory.
        path: std::path::PathBuf,
        /// What the store reported.
        #[source]
        source: StoreError,
    },
    /// The store refused to open a room (its message names what).
    #[error("{source}")]
    OpenRoom {
        /// The room that could not be opened.
        room: String,
        /// What the store reported.
        #[source]
        source: StoreError,
    },
    /// The Kafka publisher could not start.
    #[error(transparent)]
    Events(#[from] crate::events::StartError),
    /// The request handler could not be built from the config.
    #[error(transparent)]
    App(#[from] crate::gate::AppError),
    /// The public listener could not be bound.
    #[error("{0}")]
    Listener(#[source] std::io::Error),
    /// The separate admin listener could not be bound.
    #[error("admin_listen: cannot bind {addr}: {source}")]
    AdminListener {
        /// The `admin_listen` address.
        addr: SocketAddr,
        /// Why binding failed.
        #[source]
        source: std::io::Error,
    },
    /// Serving failed after start.
    #[error("server failed: {0}")]
    Server(#[source] std::io::Error),
    /// The embedded store's snapshot at shutdown could not be written.
    #[error("final snapshot failed: {0}")]
    Snapshot(#[source] StoreError),
    /// The abuse registry's state could not be loaded or its store reached.
    #[error("abuse registry: {0}")]
    Abuse(#[from] crate::abuse::AbuseError),
    /// A serving task panicked or was cancelled.
    #[error("server task panicked: {0}")]
    Panicked(#[from] tokio::task::JoinError),
}

/// How often the embedded store is snapshotted; a crash loses at most this much.
pub const SNAPSHOT_INTERVAL: Duration = Duration::from_secs(5);

/// A started instance: where it listens and how to stop it.
pub struct Running {
    /// The public listener's bound address (the real port when `:0` was asked for).
    pub addr: SocketAddr,
    /// Where the admin listener listens, when `admin_listen` is set.
    pub admin_addr: Option<SocketAddr>,
    /// The request handler, shared with every listener (tests reach its parts through it).
    pub app: Arc<App>,
    stop: CancellationToken,
    reloader: Arc<std::sync::OnceLock<crate::reload::Reloader>>,
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

    /// A token that starts the shutdown when cancelled, as [`Running::shutdown`] does.
    pub fn stop_handle(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// From now on SIGHUP rereads the config through `reloader` (the binary sets it when
    /// it was started with a config file). Only the first call has an effect.
    pub fn reload_with(&self, reloader: crate::reload::Reloader) {
        let _ = self.reloader.set(reloader);
    }
}

/// Opens the store the config asks for: Redis when `redis.url` is set (one node, or a
/// Cluster given as several comma-separated node URLs), else the embedded store.
pub async fn open_store(config: &Config) -> Result<Arc<dyn QueueStore>, RunError> {
    if !config.redis.is_embedded() {
        let urls = config.redis.connect_urls();
        let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
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
    for room in &config.rooms {
        admission
            .configure_adaptive(&room.name, room.adaptive.clone())
            .await
            .map_err(|source| RunError::OpenRoom {
                room: room.name.clone(),
                source,
            })?;
    }
    let abuse = Arc::new(open_abuse(config).await?);
    let abuse_events = abuse.take_events();
    let app = Arc::new(App::new(config, admission.clone(), abuse.clone())?);
    // Scheduled events applied to their rooms are audited with the operators' changes.
    admission.set_audit(app.admin_state().audit().clone());
    let rooms = app.room_names();
    admission.refresh_stats(&rooms).await;

    let addr = listener.local_addr().map_err(RunError::Listener)?;
    let admin_listener =
        match config.admin_listen {
            Some(admin_addr) => Some(TcpListener::bind(admin_addr).await.map_err(|source| {
                RunError::AdminListener {
                    addr: admin_addr,
                    source,
                }
            })?),
            None => None,
        };
    let admin_addr = match &admin_listener {
        Some(l) => Some(l.local_addr().map_err(RunError::Listener)?),
        None => None,
    };
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
    // The abuse registry: expiry (and with Redis the shared bans) every second; a banned
    // client's streams and sessions ended by the sweep; its events to the audit log and
    // Kafka; its state saved with the queue's snapshots.
    let abuse_ticker = abuse.spawn_ticker(ABUSE_TICK);
    tokio::spawn(abuse_loop(app.clone(), abuse_events, background.clone()));
    tokio::spawn(stream_touch_loop(app.clone(), background.clone()));
    // Installed before `start` returns, so from then on no common signal takes its default
    // action (ending the process).
    let reloader = Arc::new(std::sync::OnceLock::new());
    tokio::spawn(crate::signals::run(
        app.clone(),
        crate::signals::Signals::install(),
        reloader.clone(),
        stop.clone(),
        background.clone(),
    ));

    let limits = ServerLimits {
        header_read_timeout: config.server.header_read_timeout,
        idle_timeout: config.server.idle_timeout,
        max_connections: config.server.max_connections,
        max_connections_per_client: config.server.max_connections_per_client,
        trusted_proxies: config.trusted_proxies.clone().into(),
        http2_max_streams: config.server.http2_max_streams,
        max_header_bytes: config.server.max_header_bytes,
        shutdown_grace: config.server.shutdown_grace,
        census: app.metrics.census(Listener::Public),
    };
    let drain_delay = config.server.drain_delay;
    let workers = config.server.workers;
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
            // Cancelled once the drain delay is over: both listeners stop accepting.
            let closing = CancellationToken::new();
            {
                let app = app.clone();
                let stop = stop.clone();
                let closing = closing.clone();
                tokio::spawn(async move {
                    stop.cancelled().await;
                    // Readiness turns 503 at once; the listeners keep serving for the
                    // drain delay so a load balancer takes this replica out first.
                    app.start_draining();
                    if !drain_delay.is_zero() {
                        tracing::info!(
                            ?drain_delay,
                            "draining: readyz is 503; still serving for the drain delay"
                        );
                        tokio::time::sleep(drain_delay).await;
                    }
                    closing.cancel();
                });
            }
            let admin_served = admin_listener.map(|admin_listener| {
                let app = app.clone();
                let closing = closing.clone();
                let limits = ServerLimits {
                    census: app.metrics.census(Listener::Admin),
                    ..limits.clone()
                };
                tokio::spawn(async move {
                    let handler = move |req, peer| {
                        let app = app.clone();
                        async move { app.handle_admin(req, peer).await }
                    };
                    server::serve(admin_listener, limits, handler, closing.cancelled_owned()).await
                })
            });
            let shutdown = CancellationToken::new();
            {
                let app = app.clone();
                let shutdown = shutdown.clone();
                tokio::spawn(async move {
                    closing.cancelled().await;
                    // Streams would hold the drain open; end them so pages reload on
                    // their jittered timers.
                    app.live.close_all();
                    shutdown.cancel();
                });
            }
            let served =
                server::serve_on_workers(listener, workers, limits, handler, shutdown).await;
            let admin_served = match admin_served {
                Some(task) => task.await?,
                None => Ok(()),
            };
            background.cancel();
            let persisted = store.persist().await;
            abuse_ticker.abort();
            if let Err(e) = app.abuse.persist().await {
                tracing::error!(error = %e, "saving the bans failed");
            }
            served.map_err(RunError::Server)?;
            admin_served.map_err(RunError::Server)?;
            persisted.map_err(RunError::Snapshot)?;
            tracing::info!("stopped");
            Ok(())
        })
    };
    Ok(Running {
        addr,
        admin_addr,
        app,
        stop,
        reloader,
        done,
    })
}

/// How often bans expire, the Redis ban set is re-read and banned clients are swept.
pub const ABUSE_TICK: Duration = Duration::from_secs(1);

/// The abuse registry of this replica: embedded (restoring `data_dir/abuse.json`) or
/// shared through the same Redis as the queue.
pub async fn open_abuse(config: &Config) -> Result<AbuseRegistry, RunError> {
    let policy = config.abuse.clone();
    let trusted = config.trusted_proxies.clone();
    if !config.redis.is_embedded() {
        let urls = config.redis.connect_urls();
        let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
        let redis = RedisAbuse::connect(&nodes, config.redis.ca_file.as_ref()).await?;
        return Ok(AbuseRegistry::with_redis(policy, trusted, Clock::system(), redis).await?);
    }
    Ok(AbuseRegistry::open(
        policy,
        trusted,
        Clock::system(),
        &config.data_dir,
    )?)
}

async fn abuse_loop(
    app: Arc<App>,
    events: Option<tokio::sync::mpsc::Receiver<AbuseEvent>>,
    stop: CancellationToken,
) {
    let mut events = events;
    let mut sweep = tokio::time::interval(ABUSE_TICK);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut persist = tokio::time::interval(SNAPSHOT_INTERVAL);
    persist.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let failures = crate::log_limiter::LogLimiter::new(Duration::from_secs(60));
    loop {
        let next_event = async {
            match events.as_mut() {
                Some(rx) => rx.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = sweep.tick() => app.sweep_banned().await,
            _ = persist.tick() => {
                if let Err(e) = app.abuse.persist().await
                    && failures.allow()
                {
                    tracing::error!(error = %e, "saving the bans failed");
                }
            }
            event = next_event => match event {
                Some(event) => forward_abuse_event(&app, &event).await,
                None => events = None,
            },
        }
    }
}

/// A ban, unban, expiry or displacement: to the log and Kafka. Not to the audit log: that
/// is the operators' record (the admin API audits their bans and unbans with their
/// address), and a flood of automatic bans must not rotate it away. Every ban stays in
/// the ban log (`GET /__anteroom/admin/api/bans/log`), Kafka and the metrics.
async fn forward_abuse_event(app: &App, event: &AbuseEvent) {
    let ban = event.ban();
    tracing::info!(action = ?event.action(), target = %ban.target, source = ban.source.as_str(), reason = %ban.reason, until_ms = ?ban.until_ms, "abuse registry");
    app.admission
        .events()
        .publish(crate::events::Event::abuse(event));
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

/// Keeps the sessions of visitors with an open stream to the origin alive: one
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
