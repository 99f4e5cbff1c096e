//! The sizes of a run (full, or `--smoke`), and `all`: every scenario in turn, written out
//! as `BENCHMARKS.md` (the generated tables above the [`KEEP`] line, the hand-written
//! sections below it kept as they were).

use std::path::PathBuf;

use crate::report::{self, Row};
use crate::scenarios::Store;
use crate::{costs, flood, infra, micro, pass, proxy, scenarios, sitebound};

/// The sizes of a run.
#[derive(Clone, Debug)]
pub(crate) struct Sizes {
    pub(crate) fill_n: u64,
    pub(crate) conns: usize,
    pub(crate) depths: Vec<u64>,
    pub(crate) drain_rate: f64,
    pub(crate) drain_secs: f64,
    pub(crate) replicas_rate: f64,
    pub(crate) replicas_secs: f64,
    pub(crate) streams: usize,
    pub(crate) loads: u64,
    pub(crate) proxy_secs: u64,
    pub(crate) proxy_rounds: usize,
    pub(crate) pass_depths: Vec<u64>,
    pub(crate) passes: usize,
    pub(crate) costs_secs: u64,
    pub(crate) costs_rounds: usize,
    pub(crate) bans: usize,
    pub(crate) strikes: u64,
    pub(crate) max_tracked: Option<usize>,
    pub(crate) flood_api: usize,
    pub(crate) flood_paths: usize,
    pub(crate) flood_rate: f64,
    pub(crate) flood_max_bans: usize,
}

impl Sizes {
    pub(crate) fn get(smoke: bool) -> Sizes {
        if smoke {
            Sizes {
                fill_n: 20_000,
                conns: 64,
                depths: vec![10_000, 50_000],
                drain_rate: 2_000.0,
                drain_secs: 2.0,
                replicas_rate: 1_000.0,
                replicas_secs: 3.0,
                streams: 2_000,
                loads: 2_000,
                proxy_secs: 3,
                proxy_rounds: 1,
                pass_depths: vec![1_000, 100_000],
                passes: 100,
                costs_secs: 3,
                costs_rounds: 2,
                bans: 1_000,
                strikes: 30_000,
                max_tracked: Some(10_000),
                flood_api: 20_000,
                flood_paths: 20_000,
                flood_rate: 4_000.0,
                flood_max_bans: 30_000,
            }
        } else {
            Sizes {
                fill_n: 200_000,
                conns: 64,
                depths: vec![100_000, 1_000_000],
                drain_rate: 10_000.0,
                drain_secs: 10.0,
                replicas_rate: 1_000.0,
                replicas_secs: 20.0,
                streams: 50_000,
                // Enough to span several ticks (2 s) at ~10k loads/s, so the tick's
                // fan-out to every held stream is in the sample.
                loads: 40_000,
                proxy_secs: 10,
                proxy_rounds: 3,
                pass_depths: vec![1_000, 1_000_000],
                passes: 300,
                costs_secs: 10,
                costs_rounds: 3,
                bans: 10_000,
                strikes: 1_000_000,
                max_tracked: None,
                flood_api: 100_000,
                flood_paths: 100_000,
                flood_rate: 2_000.0,
                flood_max_bans: 150_000,
            }
        }
    }
}

/// Passes run this often in drain and replicas: a pause lands between two passes, so the
/// window count is quantised to a pass; 10 ms keeps that small (the product default is
/// 250 ms).
pub(crate) const DRAIN_INTERVAL: &str = "10ms";
pub(crate) const REPLICAS_INTERVAL: &str = "50ms";
/// The strikes scenario stops sending after this long, however many are left.
pub(crate) const STRIKES_LIMIT: std::time::Duration = std::time::Duration::from_secs(600);

/// Everything in the output file from this line on is copied into the regenerated file.
const KEEP: &str =
    "<!-- `make bench` keeps everything from this line on: hand-written sections go below it. -->";

pub(crate) async fn all(smoke: bool, out: PathBuf) -> anyhow::Result<()> {
    let s = Sizes::get(smoke);
    let started = std::time::Instant::now();
    let date = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let mut rows: Vec<Row> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    macro_rules! run {
        ($name:expr, $fut:expr) => {
            match $fut.await {
                Ok(r) => rows.extend(r),
                Err(e) => {
                    eprintln!("[loadtest] {} failed: {e:#}", $name);
                    failures.push(format!("{}: {e:#}", $name));
                }
            }
        };
    }
    for store in [Store::Memory, Store::Redis] {
        run!("fill", scenarios::fill(store, s.fill_n, s.conns));
    }
    for store in [Store::Memory, Store::Redis] {
        run!("depth", scenarios::depth(store, &s.depths, s.conns));
    }
    for store in [Store::Memory, Store::Redis] {
        run!(
            "drain",
            scenarios::drain(store, s.drain_rate, s.drain_secs, DRAIN_INTERVAL)
        );
    }
    run!(
        "replicas",
        scenarios::replicas(s.replicas_rate, s.replicas_secs, REPLICAS_INTERVAL)
    );
    run!("hold", scenarios::hold(Store::Memory, s.streams, s.loads));
    run!("proxy", proxy::proxy(s.proxy_secs, 64, 2, s.proxy_rounds));
    for store in [Store::Memory, Store::Redis] {
        run!("pass", pass::pass(store, &s.pass_depths, s.passes));
    }
    run!("micro", async { micro::micro(smoke) });
    run!("costs", costs::costs(s.costs_secs, 64, 2, s.costs_rounds));
    run!(
        "banned",
        costs::banned(s.costs_secs, 64, 2, s.costs_rounds, s.bans)
    );
    run!(
        "strikes",
        costs::strikes(s.strikes, 64, s.max_tracked, STRIKES_LIMIT)
    );
    run!(
        "ban-flood",
        flood::ban_flood(s.flood_api, s.flood_paths, s.flood_rate, s.flood_max_bans)
    );
    let load = infra::load_average();
    let mut site_bound = String::new();
    match sitebound::site_bound(smoke, &[], None, 1, &Default::default()).await {
        Ok(results) => {
            rows.extend(sitebound::rows(&results));
            site_bound = format!(
                "{}
Load average (1, 5, 15 min) {load} → {}.\n",
                sitebound::table(&results),
                infra::load_average()
            );
        }
        Err(e) => {
            eprintln!("[loadtest] site-bound failed: {e:#}");
            failures.push(format!("site-bound: {e:#}"));
        }
    }
    let table = report::table(&rows);
    println!("{table}");
    print!("{}", report::misses(&rows));
    let doc = document(
        smoke,
        &date,
        &s,
        Tables {
            results: &table,
            site_bound: &site_bound,
        },
        &rows,
        &failures,
        started.elapsed(),
    );
    // Hand-written sections below the marker survive a regeneration.
    let kept = std::fs::read_to_string(&out)
        .ok()
        .and_then(|old| old.find(KEEP).map(|i| old[i..].to_owned()));
    let doc = match kept {
        Some(kept) => format!("{doc}\n{kept}"),
        None => format!("{doc}\n{KEEP}\n"),
    };
    std::fs::write(&out, doc)?;
    eprintln!("[loadtest] wrote {}", out.display());
    if !failures.is_empty() {
        anyhow::bail!(
            "{} scenario(s) failed: {}",
            failures.len(),
            failures.join("; ")
        );
    }
    Ok(())
}

/// The two tables of the document: every scenario's rows, and site-bound's own.
struct Tables<'a> {
    results: &'a str,
    site_bound: &'a str,
}

fn document(
    smoke: bool,
    date: &str,
    s: &Sizes,
    tables: Tables<'_>,
    rows: &[Row],
    failures: &[String],
    took: std::time::Duration,
) -> String {
    let Tables {
        results: table,
        site_bound,
    } = tables;
    let scale = if smoke {
        "smoke (small scale; the targets are for the full sizes)"
    } else {
        "full"
    };
    let make = if smoke {
        "make bench-smoke"
    } else {
        "make bench"
    };
    let failed = if failures.is_empty() {
        String::new()
    } else {
        format!(
            "\n## Scenarios that failed in this run\n\n{}\n",
            failures
                .iter()
                .map(|f| format!("- {f}\n"))
                .collect::<String>()
        )
    };
    format!(
        r#"# Benchmarks

Generated by `{make}` (`anteroom-loadtest all{smoke_flag}`), {scale} run, on {date}; it took
{mins:.1} minutes.

**Machine:** {machine}. The machine is shared: other engineers compile in other worktrees
while this runs, so absolute figures move between runs. That is why every comparison that
matters is a ratio against a reference measured in the same run (nginx, the origin direct,
depth 1k) rather than against a number from another day.

The seed column is the Go waiting room's published table (one M1 laptop, 8 cores, 8 GB,
Redis 7.4 in Docker). "ours ÷ seed" compares our 2-core box with that 8-core one, so read
it as context, not as a verdict; what anteroom is held to is the target column.

## What was run

All traffic is on loopback. The harness starts everything itself and kills it at the end.

| scenario | what it does | sizes in this run |
|---|---|---|
| fill | `anteroom-loadtest fill --store memory\|redis`: cookieless `GET /` into a paused room (each request a new visitor, answered with the HTML waiting page) from keep-alive connections of the harness's own hyper client; joins/s over the run, p50/p99 from an HDR histogram. 2,000 untimed warm-up joins first. | {fill_n} joins, {conns} connections |
| depth | `anteroom-loadtest depth`: the release binary runs as its own process and is filled over HTTP the same way (no test hooks), paused; after each depth the harness waits 6 s (one snapshot cycle of the embedded store) and reads VmRSS/VmHWM from `/proc/<pid>/status`, and in Redis mode `INFO memory` `used_memory` minus the empty-room baseline. | depths {depths:?} |
| drain | `anteroom-loadtest drain`: fill, then resume for T s and pause, and again for 2T s; admitted = `total_admitted` delta from the admin stats API, drop = `waiting` delta; both read from a store read made after the pause. The steady rate is the slope between the two windows, which cancels whatever a resume or a pause adds once per window (a resume starts with an empty bucket, [docs/fairness.md](docs/fairness.md#how-admission-works), so that is only the cut at a whole pass). `admit_interval: {drain_interval}` so a pause cuts the count at a fine grain. | {drain_rate}/s, T = {drain_secs} s |
| replicas | `anteroom-loadtest replicas`: three anteroom processes on one `redis-server`, same config, same windows as drain, pause/resume through one of them; `admit_interval: {replicas_interval}`. | {replicas_rate}/s configured, T = {replicas_secs} s |
| hold | `anteroom-loadtest hold`: S waiting visitors join (cookies kept), then S `GET /__anteroom/events` streams are opened and read from 127.0.0.2, .3, … (20,000 per source address, under the ephemeral-port range); RLIMIT_NOFILE raised with `setrlimit` (the `rlimit` crate; anteroom inherits it), `server.max_connections` S + 2,000. RSS per stream = (RSS 5 s after all are open − RSS before) / S. Fresh page loads (cookieless joins, 8 connections) are measured before and while holding, each as three runs of a third of the loads; the median run's p99 is reported. | {streams} streams, {loads} page loads |
| proxy | `anteroom-loadtest proxy`: nginx (1 worker) as the origin returning a 22-byte body; nginx ({cores} workers, upstream keepalive) as a plain reverse proxy; anteroom (embedded store, an admitted visitor's cookie). `wrk -t2 -c64 -d{proxy_secs}s --latency` against each in turn, {rounds} round(s), the median round by req/s reported. | as stated |
| costs | `anteroom-loadtest costs`: the proxy scenario's anteroom (embedded, an admitted visitor's cookie, the same nginx origin) three times side by side: `access_log: off` and `max_inflight` unset; `access_log: <file in a temp dir>`; `max_inflight: 256` (above the 64 connections, so nobody waits). `wrk -t2 -c64 -d{costs_secs}s --latency` visits them in turn, {costs_rounds} round(s); medians, and the ratio to the first. | as stated |
| banned | `anteroom-loadtest banned`: two anteroom processes behind `trusted_proxies: [127.0.0.1/32]` (wrk cannot choose its source address, so `X-Forwarded-For` names the client), {bans} one-day bans of distinct /32s in 10.0.0.0/8 posted to one through `POST /__anteroom/admin/api/bans`; wrk in turn: an admitted visitor (10.200.0.1) on the process without bans, the same on the one with them, and a banned address on it (429 before the cookie is read). Same wrk and rounds as costs. | {bans} bans |
| strikes | `anteroom-loadtest strikes`: behind `trusted_proxies: [127.0.0.1/32]`, N requests with a forged cookie (a strike of 5; `abuse.window: 1h` so only the table's bound forgets), each from a distinct `X-Forwarded-For` address, 64 keep-alive connections of the harness's client, to an asset path of a paused room (nobody joins the line); RSS before and after against max_tracked × 240 B + 8 MiB; then 3 more strikes for the first and the last address show who is still remembered; then the same strikes on an in-process registry, whose `tracked()` is read. | {strikes} strikes, max_tracked {max_tracked} |
| ban-flood | `anteroom-loadtest ban-flood`: behind `trusted_proxies: [127.0.0.1/32]`, with `abuse.ban_paths: ["/.env"]` and `abuse.max_bans: {flood_max_bans}`; the operator pauses and resumes the room; then one-day bans of distinct /32s through `POST /__anteroom/admin/api/bans`, then `GET /.env` from as many distinct `X-Forwarded-For` addresses (each a ban-path ban; past the cap each displaces the soonest-ending one), 8 keep-alive connections, paced at {flood_rate}/s so the machine is not saturated; anteroom's CPU time (`/proc/<pid>/stat`) per 10,000 bans; an admitted visitor's `GET /` every 5 ms, 2,000 before and throughout the flood; the operator pauses and resumes again; then the audit log's files are counted. | {flood_api} API + {flood_paths} ban-path bans |
| site-bound | `anteroom-loadtest site-bound` (the honest ETA, [docs/fairness.md](docs/fairness.md#honest-eta)): a real slow site — PHP-FPM (Debian) with `pm = static`, `pm.max_children = {php_workers}`, a page that sleeps {page_ms} ms (at most {site_cap} pages/s), behind nginx over FastCGI — with anteroom (embedded store) in front; in each of five cases a crowd arrives evenly spaced, each visitor asking for `/` as JSON, holding the live stream with its cookie until `admitted`, then loading its pages with a think time and leaving (its session idles out after `session_ttl`). Measured by the visitors: round(admitted − first range shown) within that range, \|waited − its middle\|; beside the product's `eta` from room stats. See the section below the results. | as stated there |
| pass | `anteroom-loadtest pass`: the store called in-process: fill to depth, then time `admit_pass` with each pass admitting 100 (rate 10,000/s, the store's clock advanced 10 ms per pass: tokio's paused clock for the embedded store, the test clock offset for Redis), topping the line back up between passes (untimed). | depths {pass_depths:?}, {passes} passes each |

Run one scenario yourself, e.g. `cargo build --release --workspace && target/release/anteroom-loadtest fill --store redis --n 100000`. Every subcommand takes `--smoke`.

## Results

{table}
## Where a target is missed

{misses}{failed}
## Honest ETA when the site is the limit (`anteroom-loadtest site-bound`)

The target is that at least 90 % of visitors are admitted within the first wait range they
were shown ([docs/fairness.md](docs/fairness.md#honest-eta)). The site here is real and
slow: PHP-FPM with `pm = static`, {php_workers} children and a {page_ms} ms page, behind
nginx over FastCGI, so it serves at most {site_cap} pages a second. Each visitor is a
person with a JSON-speaking waiting page: it asks for `/` with `Accept: application/json`,
keeps the `ar_visitor` cookie, holds `GET /__anteroom/events` until `admitted` (asking for
`/` again after `retry_after_secs`, at most 2 s, if the stream ends), then loads its pages
one after another with a think time, and leaves; nothing ends its session but
`session_ttl` without a request, as when a person closes the tab. The first range shown is
the first `eta_secs` without `"estimating": true`. waited = admitted − shown (late by up
to one 2 s tick of the stream, as a real page is); within: round(waited) in [min, max];
error: \|waited − (min + max) / 2\|. "product's" is `eta` from `GET …/rooms/main/stats` at
the end, anteroom's own ledger. Visitors let straight in (nobody waiting on arrival) were
never shown a range and are not counted.

{cases}
{site_bound}"#,
        smoke_flag = if smoke { " --smoke" } else { "" },
        mins = took.as_secs_f64() / 60.0,
        machine = infra::machine(),
        fill_n = s.fill_n,
        conns = s.conns,
        depths = s.depths,
        drain_rate = s.drain_rate,
        drain_secs = s.drain_secs,
        drain_interval = DRAIN_INTERVAL,
        replicas_rate = s.replicas_rate,
        replicas_secs = s.replicas_secs,
        replicas_interval = REPLICAS_INTERVAL,
        streams = s.streams,
        loads = s.loads,
        cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2),
        proxy_secs = s.proxy_secs,
        rounds = s.proxy_rounds,
        pass_depths = s.pass_depths,
        passes = s.passes,
        costs_secs = s.costs_secs,
        costs_rounds = s.costs_rounds,
        bans = s.bans,
        strikes = s.strikes,
        max_tracked = s.max_tracked.unwrap_or(100_000),
        flood_max_bans = s.flood_max_bans,
        flood_rate = s.flood_rate,
        flood_api = s.flood_api,
        flood_paths = s.flood_paths,
        misses = report::misses(rows),
        php_workers = sitebound::PHP_WORKERS,
        page_ms = sitebound::PAGE_MS,
        site_cap = sitebound::PHP_WORKERS as u64 * 1000 / sitebound::PAGE_MS,
        cases = sitebound::Case::all(smoke)
            .iter()
            .map(|c| format!("- case {}, {}: {}\n", c.number, c.name, c.config_text()))
            .collect::<String>(),
    )
}
