//! `anteroom-loadtest soak`, a leak check: joins, admissions and held waiting pages against the
//! release binary for a set time, with anteroom's RSS and open descriptors sampled at the
//! start, every 10 s, and at the end. Short sessions and a short `abandon_after` keep the
//! room in a steady state (as many leave as join), so growth is a leak, not data.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use anteroom_fixtures::RedisServer;
use tokio::net::TcpStream;

use crate::client::{self, Admin};
use crate::infra::{Anteroom, AnteroomSpec};
use crate::report::Row;
use crate::scenarios::Store;

const MIB: f64 = 1024.0 * 1024.0;

/// Bounds the soak holds itself to: RSS at the end within this much of the start
/// (allocator arenas and caches settle in the first minute), descriptors within this many.
const RSS_GROWTH_BOUND: f64 = 0.25;
const RSS_SLACK_MIB: f64 = 16.0;
const FD_SLACK: i64 = 16;

/// Open descriptors of a process (`/proc/<pid>/fd`).
fn fds(pid: u32) -> anyhow::Result<i64> {
    Ok(std::fs::read_dir(format!("/proc/{pid}/fd"))?.count() as i64)
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    at: f64,
    rss: u64,
    fds: i64,
    streams: usize,
}

fn say(msg: impl AsRef<str>) {
    eprintln!("[loadtest] {}", msg.as_ref());
}

/// `secs` of: `joins` cookieless joins a second (8 connections), admissions at `rate`, and
/// `held` waiting pages kept open on the events stream, a tenth of them replaced by fresh
/// visitors every 2 s (so streams open and close all along).
pub async fn soak(
    store: Store,
    secs: u64,
    joins: u64,
    rate: f64,
    held: usize,
) -> anyhow::Result<Vec<Row>> {
    let redis = (store == Store::Redis).then(RedisServer::start);
    let mut spec = AnteroomSpec::new(redis.as_ref().map(RedisServer::url));
    spec.rate = rate;
    spec.admit_interval = "250ms";
    spec.session_ttl = "10s";
    spec.abandon_after = "10s";
    spec.max_connections = held + 2_000;
    // Every page comes from 127.0.0.1: lift the per-client caps past `held`.
    spec.server_extra = format!(
        "  max_streams: {}\n  max_streams_per_client: {}\n  max_connections_per_client: {}\n",
        held + 1_000,
        held + 1_000,
        held + 2_000
    );
    let ant = Anteroom::start(&spec)?;
    let pid = ant.pid();
    let mut admin = Admin::connect(ant.addr).await?;
    let started = Instant::now();
    let sample = |streams: usize| -> anyhow::Result<Sample> {
        Ok(Sample {
            at: started.elapsed().as_secs_f64(),
            rss: ant.rss()?.0,
            fds: fds(pid)?,
            streams,
        })
    };
    let first = sample(0)?;
    say(format!(
        "soak: {secs} s, {joins} joins/s, rate {rate}/s, {held} held pages, {} store; \
         start RSS {:.1} MiB, {} fds",
        store.name(),
        first.rss as f64 / MIB,
        first.fds
    ));

    let mut streams: VecDeque<TcpStream> = VecDeque::new();
    let mut samples = vec![first];
    let (mut joined, mut join_errors, mut opened, mut open_errors) = (0u64, 0u64, 0u64, 0u64);
    let mut worst_p99 = 0f64;
    let mut next_sample = 10.0;
    let mut tick = 0u64;
    let end = started + Duration::from_secs(secs);
    let source = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
    while Instant::now() < end {
        let second = Instant::now();
        // Up to 0.9 s of joins (closed loop, bounded), keeping cookies to hold pages with.
        let load = client::load(ant.addr, 8, joins, Duration::from_millis(900), None, true).await?;
        joined += load.ok;
        join_errors += load.errors;
        worst_p99 = worst_p99.max(load.p99_ms());
        // Every other second: drop the oldest tenth of the held pages and open fresh ones,
        // topping up to `held`.
        if tick.is_multiple_of(2) {
            for _ in 0..(held / 10).min(streams.len()) {
                streams.pop_front();
            }
            let mut cookies = load.cookies.into_iter();
            while streams.len() < held {
                let Some(cookie) = cookies.next() else { break };
                match client::open_stream(ant.addr, source, &cookie).await {
                    Ok(s) => {
                        streams.push_back(s);
                        opened += 1;
                    }
                    Err(_) => open_errors += 1,
                }
            }
        }
        tick += 1;
        // Drain what the held streams were sent, without blocking.
        for s in &streams {
            let mut buf = [0u8; 4096];
            while let Ok(n) = s.try_read(&mut buf) {
                if n == 0 {
                    break;
                }
            }
        }
        if started.elapsed().as_secs_f64() >= next_sample {
            let s = sample(streams.len())?;
            say(format!(
                "soak: {:>5.0} s  RSS {:.1} MiB  {} fds  {} held  {joined} joined",
                s.at,
                s.rss as f64 / MIB,
                s.fds,
                s.streams
            ));
            samples.push(s);
            next_sample += 10.0;
        }
        if let Some(rest) = Duration::from_secs(1).checked_sub(second.elapsed()) {
            tokio::time::sleep(rest).await;
        }
    }
    let stats = admin.stats_after(Instant::now()).await?;
    let last_held = sample(streams.len())?;
    // Close every held page and let anteroom notice: the descriptors must come back.
    let held_at_end = streams.len();
    streams.clear();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let last = sample(0)?;
    samples.push(last);
    let peak = samples.iter().map(|s| s.rss).max().unwrap_or(last.rss);
    // The baseline: the first sample with the held pages open (a minute of warm-up when the
    // run is long enough), against the end with them still open.
    let warm = samples
        .iter()
        .find(|s| s.at >= 60.0_f64.min(secs as f64 / 2.0) && s.streams > 0)
        .copied()
        .unwrap_or(last_held);
    let rss_growth = last_held.rss as f64 / warm.rss.max(1) as f64 - 1.0;
    let rss_ok = (last_held.rss as f64 - warm.rss as f64) / MIB
        <= RSS_SLACK_MIB + RSS_GROWTH_BOUND * warm.rss as f64 / MIB;
    let fd_ok = last.fds <= first.fds + FD_SLACK && last_held.fds <= warm.fds + FD_SLACK;
    say(format!(
        "soak: {joined} joins ({join_errors} errors, worst p99 {worst_p99:.1} ms), {} \
         admitted, {} waiting at the end, {} abandoned; {opened} pages held in turn \
         ({open_errors} refused); RSS {:.1} → {:.1} MiB at {:.0} s → {:.1} MiB at the end \
         (peak {:.1}), fds {} → {} at {:.0} s → {} with {held_at_end} held → {} after closing \
         them",
        stats.total_admitted,
        stats.waiting,
        stats.total_abandoned,
        first.rss as f64 / MIB,
        warm.rss as f64 / MIB,
        warm.at,
        last_held.rss as f64 / MIB,
        peak as f64 / MIB,
        first.fds,
        warm.fds,
        warm.at,
        last_held.fds,
        last.fds,
    ));
    let s = store.name();
    let bound = format!(
        "≤ +{:.0} % + {RSS_SLACK_MIB:.0} MiB after warm-up",
        RSS_GROWTH_BOUND * 100.0
    );
    Ok(vec![
        Row::new("soak", format!("duration, {s}"), secs as f64, "s"),
        Row::new("soak", format!("joins, {s}"), joined as f64, ""),
        Row::new(
            "soak",
            format!("admitted, {s}"),
            stats.total_admitted as f64,
            "",
        ),
        Row::new(
            "soak",
            format!("held pages opened in turn, {s}"),
            opened as f64,
            "",
        ),
        Row::new(
            "soak",
            format!("join p99, worst second, {s}"),
            worst_p99,
            "ms",
        ),
        Row::new(
            "soak",
            format!("RSS at start, {s}"),
            first.rss as f64 / MIB,
            "MiB",
        ),
        Row::new(
            "soak",
            format!("RSS after warm-up ({:.0} s), {s}", warm.at),
            warm.rss as f64 / MIB,
            "MiB",
        ),
        Row::new(
            "soak",
            format!("RSS at end (pages held), {s}"),
            last_held.rss as f64 / MIB,
            "MiB",
        ),
        Row::new(
            "soak",
            format!("RSS growth after warm-up, {s}"),
            rss_growth * 100.0,
            "%",
        )
        .target(&bound, rss_ok)
        .why("RSS kept growing in a steady state: a leak to find (heap profile)"),
        Row::new("soak", format!("fds at start, {s}"), first.fds as f64, ""),
        Row::new(
            "soak",
            format!("fds at end with {held_at_end} pages held, {s}"),
            last_held.fds as f64,
            "",
        ),
        Row::new(
            "soak",
            format!("fds after closing them, {s}"),
            last.fds as f64,
            "",
        )
        .target(&format!("≤ start + {FD_SLACK}"), fd_ok)
        .why("descriptors not given back: a connection or file leak"),
    ])
}
