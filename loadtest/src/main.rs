//! `anteroom-loadtest`: the benchmark harness of anteroom (`make bench`). One subcommand per
//! scenario, and `all`, which runs every scenario and writes `BENCHMARKS.md`.
//!
//! Everything runs on loopback and is started here: the release binary of anteroom as its own
//! process (so its RSS is its own), `redis-server` on a free port, nginx (Debian) with a
//! generated config, and `wrk` for the proxy comparison. Joins and SSE holds are driven by
//! the harness's own hyper client, latencies into HDR histograms. Every loop is bounded in
//! count and time, and every process started is killed when its scenario ends.
#![forbid(unsafe_code)]

mod all;
mod challenge_join;
mod client;
mod costs;
mod door;
mod flood;
mod infra;
mod micro;
mod pass;
mod proxy;
mod reap;
mod report;
mod scenarios;
mod sitebound;
mod soak;

use std::path::PathBuf;

use all::{DRAIN_INTERVAL, REPLICAS_INTERVAL, STRIKES_LIMIT, Sizes, all};
use clap::{Parser, Subcommand};
use scenarios::Store;

#[derive(Parser)]
#[command(
    name = "anteroom-loadtest",
    about = "anteroom's benchmark harness (loopback only)"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Joins with `challenge: always` (solved beforehand) beside the same joins without it:
    /// joins/s and anteroom's CPU per join, alternating rounds on fresh instances
    /// (embedded, or each with its own Redis).
    ChallengeJoin {
        #[arg(long, default_value_t = 6_000)]
        n: u64,
        #[arg(long, default_value_t = 64)]
        conns: usize,
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Pin anteroom to these CPUs (`taskset -c` syntax, e.g. `0`).
        #[arg(long)]
        server_cpus: Option<String>,
        /// Pin the harness to these CPUs (e.g. `1`) once the challenges are solved.
        #[arg(long)]
        client_cpus: Option<String>,
        /// Both kinds of request carry the headers a browser's `fetch` sends.
        #[arg(long)]
        browser: bool,
        /// The queue store: each instance gets a fresh Redis with `redis`.
        #[arg(long, value_enum, default_value = "memory")]
        store: Store,
    },
    /// N cookieless joins into a paused room from W connections → joins/s, p50, p99.
    Fill {
        #[arg(long, value_enum, default_value = "memory")]
        store: Store,
        #[arg(long)]
        n: Option<u64>,
        #[arg(long)]
        conns: Option<usize>,
        #[arg(long)]
        smoke: bool,
    },
    /// anteroom RSS (and Redis used_memory) at each depth, filled over HTTP.
    Depth {
        #[arg(long, value_enum, default_value = "memory")]
        store: Store,
        /// Depths, comma-separated, ascending.
        #[arg(long, value_delimiter = ',')]
        sizes: Option<Vec<u64>>,
        #[arg(long)]
        conns: Option<usize>,
        #[arg(long)]
        smoke: bool,
    },
    /// Admit at RATE for SECS (and 2×SECS) → admitted (stats API) vs drop in depth.
    Drain {
        #[arg(long, value_enum, default_value = "memory")]
        store: Store,
        #[arg(long)]
        rate: Option<f64>,
        #[arg(long)]
        secs: Option<f64>,
        #[arg(long)]
        smoke: bool,
    },
    /// Three replicas on one Redis at RATE → observed per second.
    Replicas {
        #[arg(long)]
        rate: Option<f64>,
        #[arg(long)]
        secs: Option<f64>,
        #[arg(long)]
        smoke: bool,
    },
    /// S SSE streams held → RSS per stream, page-load p99 while holding.
    Hold {
        #[arg(long, value_enum, default_value = "memory")]
        store: Store,
        #[arg(long)]
        streams: Option<usize>,
        /// Fresh page loads measured while holding.
        #[arg(long)]
        loads: Option<u64>,
        #[arg(long)]
        smoke: bool,
    },
    /// wrk against the origin direct, nginx as a reverse proxy, and anteroom (admitted).
    Proxy {
        #[arg(long)]
        secs: Option<u64>,
        #[arg(long, default_value_t = 64)]
        conns: usize,
        #[arg(long, default_value_t = 2)]
        threads: usize,
        #[arg(long)]
        rounds: Option<usize>,
        #[arg(long)]
        smoke: bool,
    },
    /// What features cost: the admitted-visitor proxy with the access log off vs to a file,
    /// and max_inflight unset vs above the connections; wrk alternating between them.
    Costs {
        #[arg(long)]
        secs: Option<u64>,
        #[arg(long, default_value_t = 64)]
        conns: usize,
        #[arg(long, default_value_t = 2)]
        threads: usize,
        #[arg(long)]
        rounds: Option<usize>,
        #[arg(long)]
        smoke: bool,
    },
    /// What bans cost: a banned client's 429s vs an admitted visitor's proxied requests, with
    /// BANS bans made through the admin API.
    Banned {
        #[arg(long)]
        secs: Option<u64>,
        #[arg(long, default_value_t = 64)]
        conns: usize,
        #[arg(long, default_value_t = 2)]
        threads: usize,
        #[arg(long)]
        rounds: Option<usize>,
        #[arg(long)]
        bans: Option<usize>,
        #[arg(long)]
        smoke: bool,
    },
    /// What strikes cost in memory: RSS before and after N strikes from N distinct addresses.
    Strikes {
        #[arg(long)]
        n: Option<u64>,
        #[arg(long, default_value_t = 64)]
        conns: usize,
        /// abuse.max_tracked (default: the product's, 100,000; 10,000 with --smoke).
        #[arg(long)]
        max_tracked: Option<usize>,
        #[arg(long)]
        smoke: bool,
    },
    /// A ban flood: API bans, then ban-path bans from distinct addresses, paced: CPU per ban
    /// by 10,000, page p99 before and during, the audit log's operator entries after.
    BanFlood {
        /// Bans made through the admin API.
        #[arg(long)]
        api: Option<usize>,
        /// Bans earned through a ban path, one distinct address each.
        #[arg(long)]
        paths: Option<usize>,
        /// Bans a second in each phase.
        #[arg(long)]
        rate: Option<f64>,
        /// abuse.max_bans.
        #[arg(long)]
        max_bans: Option<usize>,
        #[arg(long)]
        smoke: bool,
    },
    /// admit_pass time at each depth (store called directly).
    Pass {
        #[arg(long, value_enum, default_value = "memory")]
        store: Store,
        #[arg(long, value_delimiter = ',')]
        depths: Option<Vec<u64>>,
        #[arg(long)]
        passes: Option<usize>,
        #[arg(long)]
        smoke: bool,
    },
    /// A flood of abandoned places reaped by the Redis store's passes: each pass's time
    /// and count (not part of `all`).
    Reap {
        #[arg(long, default_value_t = 200_000)]
        depth: u64,
    },
    /// Joins, admissions and held waiting pages for SECS → RSS and fds at start and end
    /// (a leak check; not part of `all`).
    Soak {
        #[arg(long, value_enum, default_value = "memory")]
        store: Store,
        #[arg(long, default_value_t = 120)]
        secs: u64,
        /// Cookieless joins a second.
        #[arg(long, default_value_t = 200)]
        joins: u64,
        /// Admissions a second.
        #[arg(long, default_value_t = 50.0)]
        rate: f64,
        /// Waiting pages held open on the events stream.
        #[arg(long, default_value_t = 500)]
        held: usize,
    },
    /// The honest ETA when the site is the limit: a crowd through anteroom to a real slow
    /// site (PHP-FPM, 4 children, 200 ms pages, behind nginx) in five cases → the share
    /// admitted within the first wait range shown, measured by the visitors, beside the
    /// product's own ledger.
    SiteBound {
        /// Only these cases (1 to 5, comma-separated); default: all five.
        #[arg(long, value_delimiter = ',')]
        case: Vec<u8>,
        /// Visitors in each case, instead of the case's own number.
        #[arg(long)]
        visitors: Option<usize>,
        /// Also write the results as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// About a third of the visitors in each case.
        #[arg(long)]
        smoke: bool,
        /// anteroom replicas sharing one Redis, each visitor's stream held by another
        /// replica than its pages (1: one on the embedded store).
        #[arg(long, default_value_t = 1)]
        replicas: usize,
        /// Print the room's counters once a second, and each waiting visitor's first range
        /// and wait, on standard error.
        #[arg(long)]
        trace: bool,
        /// Start each replica after the first this many milliseconds later, setting the
        /// phase of its timers (admission passes, counters, live ticks) against the first's.
        #[arg(long, default_value_t = 0)]
        stagger_ms: u64,
    },
    /// Closed-loop admission in front of a real slow site (PHP-FPM, 4 children,
    /// 200 ms pages, behind nginx) whose `max_inflight` door is saturated, then cleared →
    /// how soon the effective rate falls and rises again (`loadtest/tests/adaptive_door.rs`
    /// judges it).
    AdaptiveDoor {
        /// Also write the result as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Single-thread costs of the admission token and the ban-path globs, called directly.
    Micro {
        #[arg(long)]
        smoke: bool,
    },
    /// Every scenario, both stores; prints the table and writes BENCHMARKS.md
    /// (BENCHMARKS-smoke.md with --smoke).
    All {
        #[arg(long)]
        smoke: bool,
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let rows = match cli.cmd {
        Cmd::ChallengeJoin {
            n,
            conns,
            rounds,
            server_cpus,
            client_cpus,
            browser,
            store,
        } => {
            challenge_join::challenge_join(
                n,
                conns,
                rounds,
                server_cpus,
                client_cpus,
                browser,
                store,
            )
            .await?
        }
        Cmd::Fill {
            store,
            n,
            conns,
            smoke,
        } => {
            let s = Sizes::get(smoke);
            scenarios::fill(store, n.unwrap_or(s.fill_n), conns.unwrap_or(s.conns)).await?
        }
        Cmd::Depth {
            store,
            sizes,
            conns,
            smoke,
        } => {
            let s = Sizes::get(smoke);
            scenarios::depth(store, &sizes.unwrap_or(s.depths), conns.unwrap_or(s.conns)).await?
        }
        Cmd::Drain {
            store,
            rate,
            secs,
            smoke,
        } => {
            let s = Sizes::get(smoke);
            scenarios::drain(
                store,
                rate.unwrap_or(s.drain_rate),
                secs.unwrap_or(s.drain_secs),
                DRAIN_INTERVAL,
            )
            .await?
        }
        Cmd::Replicas { rate, secs, smoke } => {
            let s = Sizes::get(smoke);
            scenarios::replicas(
                rate.unwrap_or(s.replicas_rate),
                secs.unwrap_or(s.replicas_secs),
                REPLICAS_INTERVAL,
            )
            .await?
        }
        Cmd::Hold {
            store,
            streams,
            loads,
            smoke,
        } => {
            let s = Sizes::get(smoke);
            scenarios::hold(
                store,
                streams.unwrap_or(s.streams),
                loads.unwrap_or(s.loads),
            )
            .await?
        }
        Cmd::Proxy {
            secs,
            conns,
            threads,
            rounds,
            smoke,
        } => {
            let s = Sizes::get(smoke);
            proxy::proxy(
                secs.unwrap_or(s.proxy_secs),
                conns,
                threads,
                rounds.unwrap_or(s.proxy_rounds),
            )
            .await?
        }
        Cmd::Reap { depth } => reap::reap(depth).await?,
        Cmd::Pass {
            store,
            depths,
            passes,
            smoke,
        } => {
            let s = Sizes::get(smoke);
            pass::pass(
                store,
                &depths.unwrap_or(s.pass_depths),
                passes.unwrap_or(s.passes),
            )
            .await?
        }
        Cmd::Costs {
            secs,
            conns,
            threads,
            rounds,
            smoke,
        } => {
            let s = Sizes::get(smoke);
            costs::costs(
                secs.unwrap_or(s.costs_secs),
                conns,
                threads,
                rounds.unwrap_or(s.costs_rounds),
            )
            .await?
        }
        Cmd::Micro { smoke } => micro::micro(smoke)?,
        Cmd::Banned {
            secs,
            conns,
            threads,
            rounds,
            bans,
            smoke,
        } => {
            let s = Sizes::get(smoke);
            costs::banned(
                secs.unwrap_or(s.costs_secs),
                conns,
                threads,
                rounds.unwrap_or(s.costs_rounds),
                bans.unwrap_or(s.bans),
            )
            .await?
        }
        Cmd::Strikes {
            n,
            conns,
            max_tracked,
            smoke,
        } => {
            let s = Sizes::get(smoke);
            costs::strikes(
                n.unwrap_or(s.strikes),
                conns,
                max_tracked.or(s.max_tracked),
                STRIKES_LIMIT,
            )
            .await?
        }
        Cmd::BanFlood {
            api,
            paths,
            rate,
            max_bans,
            smoke,
        } => {
            let s = Sizes::get(smoke);
            flood::ban_flood(
                api.unwrap_or(s.flood_api),
                paths.unwrap_or(s.flood_paths),
                rate.unwrap_or(s.flood_rate),
                max_bans.unwrap_or(s.flood_max_bans),
            )
            .await?
        }
        Cmd::Soak {
            store,
            secs,
            joins,
            rate,
            held,
        } => soak::soak(store, secs, joins, rate, held).await?,
        Cmd::SiteBound {
            case,
            visitors,
            json,
            smoke,
            replicas,
            trace,
            stagger_ms,
        } => {
            let load = infra::load_average();
            let diagnostics = sitebound::Diagnostics {
                trace,
                stagger: std::time::Duration::from_millis(stagger_ms),
            };
            let results =
                sitebound::site_bound(smoke, &case, visitors, replicas, &diagnostics).await?;
            println!("{}", sitebound::table(&results));
            println!(
                "load average (1, 5, 15 min) {load} → {}",
                infra::load_average()
            );
            if let Some(path) = json {
                std::fs::write(&path, sitebound::to_json(&results).to_string())?;
            }
            return Ok(());
        }
        Cmd::AdaptiveDoor { json } => {
            let result = door::adaptive_door().await?;
            println!("{}", serde_json::to_string_pretty(&result.to_json())?);
            if let Some(path) = json {
                std::fs::write(&path, result.to_json().to_string())?;
            }
            return Ok(());
        }
        Cmd::All { smoke, out } => {
            let out = out.unwrap_or_else(|| {
                PathBuf::from(if smoke {
                    "BENCHMARKS-smoke.md"
                } else {
                    "BENCHMARKS.md"
                })
            });
            return all(smoke, out).await;
        }
    };
    println!("{}", report::table(&rows));
    print!("{}", report::misses(&rows));
    Ok(())
}
