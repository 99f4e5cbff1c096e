//! What single features cost on the request path, each measured as a ratio within one run
//! (so the shared machine's load cancels out): the access log and the in-flight cap
//! against the same proxy without them (`costs`), a banned client's refusals against an
//! admitted visitor's proxied requests with 10,000 bans in place (`banned`), and the memory
//! a million struck addresses leave behind (`strikes`).
//!
//! The variants run side by side, each its own anteroom process in front of one nginx
//! origin, and wrk visits them in turn (a, b, c, a, b, c, …) so that drift in the
//! machine's load lands on every variant alike. Everything is on loopback and bounded.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anteroom::abuse::{AbuseConfig, AbuseRegistry, StrikeReason};
use anteroom::clock::Clock;
use anteroom::queue::VisitorId;
use anyhow::{Context, bail};
use hyper::{Method, StatusCode};

use crate::client::{Admin, Conn};
use crate::infra::{self, Anteroom, AnteroomSpec, Nginx, Scratch};
use crate::proxy::{Wrk, wrk};
use crate::report::{Row, fmt_value};
use crate::scenarios::say;

const MIB: f64 = 1024.0 * 1024.0;

/// An anteroom in front of `origin` that admits everyone at once (the `proxy` scenario's
/// configuration), plus `top` and `room` lines.
pub(crate) fn proxy_spec(origin: SocketAddr, top: &str, room: &str) -> AnteroomSpec {
    let mut spec = AnteroomSpec::new(None);
    spec.origin = format!("http://{origin}");
    spec.rate = 1_000_000.0;
    spec.max_active = 1_000_000;
    spec.top_extra = top.to_owned();
    spec.room_extra = room.to_owned();
    spec
}

/// An admitted visitor's cookie (`ar_visitor=…`): the first request joins and is let in at
/// once, the second must reach the origin.
pub(crate) async fn admitted_cookie(
    addr: SocketAddr,
    headers: &[(&str, &str)],
) -> anyhow::Result<String> {
    let mut conn = Conn::connect(addr).await?;
    let first = conn.get("/", headers).await?;
    let cookie = first.set_cookie.context("anteroom set no cookie")?;
    let mut with = headers.to_vec();
    with.push(("cookie", cookie.as_str()));
    let check = conn.get("/", &with).await?;
    if !check.body.starts_with(b"hello from the origin") {
        bail!(
            "the admitted visitor did not reach the origin: {} {:?}",
            check.status,
            String::from_utf8_lossy(&check.body[..check.body.len().min(80)])
        );
    }
    Ok(cookie)
}

struct Target {
    label: String,
    url: String,
    headers: Vec<String>,
}

/// wrk against each target in turn, `rounds` times; `runs[target][round]`.
fn alternate(
    tag: &str,
    targets: &[Target],
    rounds: usize,
    threads: usize,
    conns: usize,
    secs: u64,
) -> anyhow::Result<Vec<Vec<Wrk>>> {
    let mut runs: Vec<Vec<Wrk>> = vec![Vec::new(); targets.len()];
    for round in 0..rounds {
        for (i, t) in targets.iter().enumerate() {
            say(format!(
                "{tag}: round {} of {rounds}: {} (load {})",
                round + 1,
                t.label,
                infra::load_average()
            ));
            let headers: Vec<&str> = t.headers.iter().map(String::as_str).collect();
            runs[i].push(wrk(&t.url, threads, conns, secs, &headers)?);
        }
    }
    Ok(runs)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The medians over rounds of one target: (req/s, p50, p99).
fn medians(runs: &[Wrk]) -> (f64, f64, f64) {
    (
        median(runs.iter().map(|r| r.rps).collect()),
        median(runs.iter().map(|r| r.p50_ms).collect()),
        median(runs.iter().map(|r| r.p99_ms).collect()),
    )
}

/// Rows for one target: req/s and p50 / p99, the medians over its rounds.
fn target_rows(scenario: &'static str, label: &str, runs: &[Wrk]) -> Vec<Row> {
    let (rps, p50, p99) = medians(runs);
    let each: Vec<String> = runs.iter().map(|r| fmt_value(r.rps, "")).collect();
    vec![
        Row {
            ours: format!("{} /s (rounds: {})", fmt_value(rps, ""), each.join(", ")),
            ..Row::new(scenario, format!("{label}: req/s, median"), rps, "/s")
        },
        Row {
            ours: format!("{p50:.2} / {p99:.2} ms"),
            ..Row::new(scenario, format!("{label}: p50 / p99, median"), p99, "")
        },
    ]
}

/// `variant ÷ base` for req/s and p99: the ratio of the medians, with each round's ratio
/// beside it (rounds are adjacent in time, so their spread shows the noise).
fn ratio_rows(
    scenario: &'static str,
    what: &str,
    base: &[Wrk],
    variant: &[Wrk],
    goal: Option<(f64, &str, &str)>,
) -> Vec<Row> {
    let (b_rps, _, b_p99) = medians(base);
    let (v_rps, _, v_p99) = medians(variant);
    let tput = v_rps / b_rps;
    let each: Vec<String> = base
        .iter()
        .zip(variant)
        .map(|(b, v)| format!("{:.3}", v.rps / b.rps))
        .collect();
    let mut row = Row {
        ours: format!("{tput:.3} (rounds: {})", each.join(", ")),
        ..Row::new(scenario, format!("{what}, req/s"), tput, "")
    };
    if let Some((min, text, why)) = goal {
        row = row.target(text, tput >= min).why(why);
    }
    let p99 = v_p99 / b_p99;
    let each99: Vec<String> = base
        .iter()
        .zip(variant)
        .map(|(b, v)| format!("{:.2}", v.p99_ms / b.p99_ms))
        .collect();
    vec![
        row,
        Row {
            ours: format!("{p99:.2} (rounds: {})", each99.join(", ")),
            ..Row::new(scenario, format!("{what}, p99"), p99, "")
        },
    ]
}

pub(crate) fn load_row(scenario: &'static str, start: &str) -> Row {
    Row {
        ours: format!("{start} → {}", infra::load_average()),
        ..Row::new(
            scenario,
            "load average (1, 5, 15 min) at start → end",
            0.0,
            "",
        )
    }
}

/// The admitted-visitor proxy with `access_log` off, to a file, and with
/// `max_inflight: 256` (above the connections, so nobody waits: only its bookkeeping).
pub async fn costs(
    secs: u64,
    conns: usize,
    threads: usize,
    rounds: usize,
) -> anyhow::Result<Vec<Row>> {
    let start_load = infra::load_average();
    let origin = Nginx::origin()?;
    let logdir = Scratch::new("accesslog")?;
    let logfile = logdir.0.join("access.log");
    let cap = conns * 4;
    let base = Anteroom::start(&proxy_spec(origin.addr, "", ""))?;
    let logged = Anteroom::start(&proxy_spec(
        origin.addr,
        &format!("access_log: \"{}\"\n", logfile.display()),
        "",
    ))?;
    let capped = Anteroom::start(&proxy_spec(
        origin.addr,
        "",
        &format!("    max_inflight: {cap}\n"),
    ))?;
    let mut targets = Vec::new();
    for (label, ant) in [
        ("access_log off, max_inflight unset", &base),
        ("access_log to a file", &logged),
        ("max_inflight set", &capped),
    ] {
        let cookie = admitted_cookie(ant.addr, &[]).await?;
        targets.push(Target {
            label: label.to_owned(),
            url: format!("http://{}/", ant.addr),
            headers: vec![format!("Cookie: {cookie}")],
        });
    }
    targets[2].label = format!("max_inflight: {cap}");
    let runs =
        tokio::task::block_in_place(|| alternate("costs", &targets, rounds, threads, conns, secs))?;
    for (t, r) in targets.iter().zip(&runs) {
        let bad: u64 = r.iter().map(|w| w.errors).sum();
        if bad > 0 {
            say(format!("costs: {}: {bad} non-2xx", t.label));
        }
    }
    // Every request to the logged process should be a line (or counted as dropped).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let answered: u64 = runs[1].iter().map(|w| w.requests).sum::<u64>() + 2;
    let lines = count_lines(&logfile)?;
    let dropped = Admin::connect(logged.addr)
        .await?
        .metric("anteroom_access_log_dropped_total", "")
        .await
        .unwrap_or_else(|e| {
            say(format!("costs: {e:#}"));
            f64::NAN
        });
    let mut rows = vec![load_row("costs", &start_load)];
    for (t, r) in targets.iter().zip(&runs) {
        rows.extend(target_rows("costs", &t.label, r));
    }
    rows.extend(ratio_rows(
        "costs",
        "access log to a file ÷ off",
        &runs[0],
        &runs[1],
        Some((
            0.90,
            "≥ 0.90 (< 10 % cost)",
            "every request formats a JSON line and hands it to the log's writer thread, \
             which competes for the same two cores as anteroom, wrk and the origin",
        )),
    ));
    rows.push(Row {
        ours: format!(
            "{} lines / {} requests, {dropped} dropped",
            fmt_value(lines as f64, ""),
            fmt_value(answered as f64, "")
        ),
        ..Row::new(
            "costs",
            "access log lines written / requests answered (anteroom_access_log_dropped_total)",
            lines as f64,
            "",
        )
    });
    rows.extend(ratio_rows(
        "costs",
        &format!("max_inflight: {cap} ÷ unset"),
        &runs[0],
        &runs[2],
        Some((
            0.95,
            "≥ 0.95 (< 5 % cost)",
            "each admitted request takes and returns a permit of a fair semaphore and \
             wraps its response body to return it at the end",
        )),
    ));
    Ok(rows)
}

fn count_lines(path: &std::path::Path) -> anyhow::Result<u64> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).with_context(|| format!("{}", path.display()))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let k = f.read(&mut buf)?;
        if k == 0 {
            return Ok(n);
        }
        n += buf[..k].iter().filter(|&&b| b == b'\n').count() as u64;
    }
}

/// The `i`-th banned address: 10.0.0.0, 10.0.0.1, … (distinct /32s).
fn banned_addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::from(0x0A00_0000u32 + i as u32)
}

/// Posts `n` bans of distinct /32s through the admin API, from `workers` keep-alive
/// connections.
async fn post_bans(addr: SocketAddr, n: usize, workers: usize) -> anyhow::Result<()> {
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let next = next.clone();
        tasks.push(tokio::spawn(async move {
            let admin = Admin::connect(addr).await?;
            let mut conn = None;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= n {
                    return anyhow::Ok(());
                }
                let body = format!(
                    r#"{{"target":"{}","duration_secs":86400,"reason":"benchmark"}}"#,
                    banned_addr(i)
                );
                let (status, reply) = admin
                    .raw(
                        &mut conn,
                        Method::POST,
                        "/__anteroom/admin/api/bans",
                        Some(body),
                    )
                    .await?;
                if status != StatusCode::CREATED {
                    bail!(
                        "ban {}: {status} {}",
                        banned_addr(i),
                        String::from_utf8_lossy(&reply)
                    );
                }
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

/// With `bans` bans in place (distinct /32s, made through the admin API), a
/// banned client's requests (429 before the cookie is read) against an admitted visitor's
/// proxied ones, on the same process; and the admitted visitor on a process without bans.
/// wrk cannot choose its source address, so both anteroom processes trust 127.0.0.1 as a
/// proxy and the client is named by `X-Forwarded-For`.
pub async fn banned(
    secs: u64,
    conns: usize,
    threads: usize,
    rounds: usize,
    bans: usize,
) -> anyhow::Result<Vec<Row>> {
    let start_load = infra::load_average();
    let origin = Nginx::origin()?;
    let trusted = "trusted_proxies: [\"127.0.0.1/32\"]\n";
    let clean = Anteroom::start(&proxy_spec(origin.addr, trusted, ""))?;
    let banning = Anteroom::start(&proxy_spec(origin.addr, trusted, ""))?;
    say(format!("banned: posting {bans} bans through the admin API"));
    let t = Instant::now();
    post_bans(banning.addr, bans, 8).await?;
    let took = t.elapsed().as_secs_f64();
    let admin = Admin::connect(banning.addr).await?;
    let active = admin.metric("anteroom_bans_active", "").await?;
    if active as usize != bans {
        bail!("{active} bans active, {bans} posted");
    }
    let visitor = "10.200.0.1";
    let bad = banned_addr(bans / 2).to_string();
    // The banned client is refused before anything else.
    let mut conn = Conn::connect(banning.addr).await?;
    let refused = conn.get("/", &[("x-forwarded-for", bad.as_str())]).await?;
    if refused.status != StatusCode::TOO_MANY_REQUESTS && refused.status != StatusCode::FORBIDDEN {
        bail!("a banned client got {}", refused.status);
    }
    let mut targets = Vec::new();
    for (label, ant) in [
        ("admitted visitor, no bans", &clean),
        ("admitted visitor, with the bans", &banning),
    ] {
        let cookie = admitted_cookie(ant.addr, &[("x-forwarded-for", visitor)]).await?;
        targets.push(Target {
            label: label.to_owned(),
            url: format!("http://{}/", ant.addr),
            headers: vec![
                format!("Cookie: {cookie}"),
                format!("X-Forwarded-For: {visitor}"),
            ],
        });
    }
    targets.push(Target {
        label: format!("banned client ({}), with the bans", refused.status.as_u16()),
        url: format!("http://{}/", banning.addr),
        headers: vec![format!("X-Forwarded-For: {bad}")],
    });
    let runs = tokio::task::block_in_place(|| {
        alternate("banned", &targets, rounds, threads, conns, secs)
    })?;
    for (t, r) in targets.iter().zip(&runs).take(2) {
        let bad: u64 = r.iter().map(|w| w.errors).sum();
        if bad > 0 {
            say(format!("banned: {}: {bad} non-2xx", t.label));
        }
    }
    let refusals: u64 = runs[2].iter().map(|w| w.errors).sum();
    let sent: u64 = runs[2].iter().map(|w| w.requests).sum();
    let counted = admin
        .metric("anteroom_banned_requests_total", "")
        .await
        .unwrap_or(f64::NAN);
    let mut rows = vec![
        load_row("banned", &start_load),
        Row {
            ours: format!(
                "{} bans in {took:.1} s (8 connections); anteroom_bans_active {active}",
                fmt_value(bans as f64, "")
            ),
            ..Row::new("banned", "bans made through the admin API", 0.0, "")
        },
    ];
    for (t, r) in targets.iter().zip(&runs) {
        rows.extend(target_rows("banned", &t.label, r));
    }
    rows.push(Row {
        ours: format!(
            "{} of {} (anteroom_banned_requests_total {counted})",
            fmt_value(refusals as f64, ""),
            fmt_value(sent as f64, "")
        ),
        ..Row::new(
            "banned",
            "banned client: refusals / requests",
            refusals as f64,
            "",
        )
    });
    rows.extend(ratio_rows(
        "banned",
        "banned client's refusals ÷ admitted visitor's proxied requests (same process)",
        &runs[1],
        &runs[2],
        None,
    ));
    rows.extend(ratio_rows(
        "banned",
        &format!(
            "admitted visitor with {} bans ÷ with none",
            fmt_value(bans as f64, "")
        ),
        &runs[0],
        &runs[1],
        None,
    ));
    Ok(rows)
}

/// What one remembered client costs in the embedded strike table, from the code
/// (`src/abuse/registry.rs`, 64-bit): the `HashMap<IpAddr, Tracked>` slot is 80 B
/// (`IpAddr` 17 B + `Tracked` 56 B: a `VecDeque` header, the sum, the ban count and the
/// recency stamp, padded) plus a control byte, at a load of 100,000 / 131,072 buckets
/// ≈ 107 B per entry; the first strike allocates the deque's buffer, 4 × 16 B + the
/// allocator's 16 B = 80 B; the recency `BTreeMap<u64, IpAddr>` holds 25 B per entry in
/// leaves of 11 slots (≈ 290 B) that appends leave about 60 % full ≈ 45 B. Together
/// ≈ 232 B, which the in-process registry confirms (+22.8 MiB for the first 100,000:
/// 239 B). Evicting the least recently struck then leaves about 10 MiB of allocator slack
/// once (freed deque buffers and B-tree leaves the allocator keeps), measured flat from
/// 250,000 to 1,000,000 strikes: so the stated bound is 350 B per tracked client.
const TRACKED_ENTRY_BYTES: f64 = 350.0;
/// Allowed on top of the table: the connections' buffers, the spawned strike tasks in
/// flight and the allocator's slack.
const STRIKE_SLACK_MIB: f64 = 8.0;

/// `n` strikes (a forged cookie each, weight 5: none reaches a ban) from `n`
/// distinct addresses named by `X-Forwarded-For` through a trusted 127.0.0.1, against an
/// asset path of a paused room (so nobody joins the line and the origin is not asked):
/// the anteroom process's RSS before and after, against `max_tracked` × the table's
/// per-entry cost. Then the same strikes on an in-process registry, whose `tracked()` is
/// readable. `max_tracked: None` keeps the default (100,000).
pub async fn strikes(
    n: u64,
    conns: usize,
    max_tracked: Option<usize>,
    limit: Duration,
) -> anyhow::Result<Vec<Row>> {
    let start_load = infra::load_average();
    let cap = max_tracked.unwrap_or(AbuseConfig::default().max_tracked);
    let mut spec = AnteroomSpec::new(None);
    // A window of an hour, so that only the table's bound (not the window) forgets.
    spec.top_extra = "trusted_proxies: [\"127.0.0.1/32\"]\nabuse:\n  window: 1h\n".into();
    if let Some(m) = max_tracked {
        spec.top_extra.push_str(&format!("  max_tracked: {m}\n"));
    }
    spec.room_extra = "    asset_paths: [\"/asset/**\"]\n".into();
    let ant = Anteroom::start(&spec)?;
    let mut admin = Admin::connect(ant.addr).await?;
    admin.pause().await?;
    // A cookie signed under a secret anteroom does not know: UnknownKey, a strike of 5.
    let forged = format!(
        "{}={}",
        anteroom::token::COOKIE_NAME,
        anteroom::token::CookieKeys::new(&[0x5a; 32], &[] as &[Vec<u8>]).issue(
            VisitorId::random(),
            "main",
            SystemTime::now()
        )
    );
    let addr = ant.addr;
    let struck = |i: u64| Ipv4Addr::from(0x0B00_0000u32 + i as u32);
    // Warm up: a few strikes from an address outside the run's range.
    {
        let mut conn = Conn::connect(addr).await?;
        for _ in 0..3 {
            conn.get(
                "/asset/a.css",
                &[("x-forwarded-for", "12.0.0.1"), ("cookie", &forged)],
            )
            .await?;
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rss0, _) = ant.rss()?;
    say(format!(
        "strikes: {n} distinct addresses, one forged cookie each, {conns} connections"
    ));
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + limit;
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let next = next.clone();
        let forged = forged.clone();
        tasks.push(tokio::spawn(async move {
            let (mut sent, mut other, mut errors) = (0u64, 0u64, 0u64);
            let mut conn: Option<Conn> = None;
            while Instant::now() < deadline {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                if conn.is_none() {
                    match Conn::connect(addr).await {
                        Ok(c) => conn = Some(c),
                        Err(_) => {
                            errors += 1;
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    }
                }
                let ip = struck(i).to_string();
                let c = conn.as_mut().expect("connected above");
                match c
                    .get(
                        "/asset/a.css",
                        &[
                            ("x-forwarded-for", ip.as_str()),
                            ("cookie", forged.as_str()),
                        ],
                    )
                    .await
                {
                    // The paused room's small 503 for an asset nobody is admitted to.
                    Ok(r) if r.status == StatusCode::SERVICE_UNAVAILABLE => sent += 1,
                    Ok(_) => {
                        sent += 1;
                        other += 1;
                    }
                    Err(_) => {
                        errors += 1;
                        conn = None;
                    }
                }
            }
            (sent, other, errors)
        }));
    }
    let (mut sent, mut other, mut errors) = (0u64, 0u64, 0u64);
    for t in tasks {
        let (s, o, e) = t.await?;
        sent += s;
        other += o;
        errors += e;
    }
    let took = started.elapsed().as_secs_f64();
    if other > 0 || errors > 0 {
        say(format!(
            "strikes: {other} answers other than 503, {errors} errors"
        ));
    }
    // Strikes are recorded by spawned tasks: let them finish.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (rss1, hwm) = ant.rss()?;
    let counted = admin
        .metric("anteroom_strikes_total", "reason=\"bad_cookie\"")
        .await?;
    // Who is still remembered: three more forged cookies make 20 (a ban) only for a
    // client whose first strike was not forgotten.
    let remembered = |i: u64| {
        let forged = forged.clone();
        async move {
            let ip = struck(i).to_string();
            let mut conn = Conn::connect(addr).await?;
            for _ in 0..3 {
                conn.get(
                    "/asset/a.css",
                    &[
                        ("x-forwarded-for", ip.as_str()),
                        ("cookie", forged.as_str()),
                    ],
                )
                .await?;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            let r = conn
                .get("/asset/a.css", &[("x-forwarded-for", ip.as_str())])
                .await?;
            anyhow::Ok(r.status == StatusCode::TOO_MANY_REQUESTS)
        }
    };
    let first_kept = remembered(0).await?;
    let last_kept = remembered(sent.saturating_sub(1)).await?;
    drop(ant);

    // The same strikes on a registry in this process, where `tracked()` can be read.
    say(format!("strikes: {sent} strikes on an in-process registry"));
    let policy = AbuseConfig {
        max_tracked: cap,
        window: Duration::from_secs(3_600),
        ..AbuseConfig::default()
    }
    .validate()
    .map_err(|e| anyhow::anyhow!("abuse config: {e:?}"))?;
    let me = std::process::id();
    let (own0, _) = infra::rss(me)?;
    let registry = AbuseRegistry::in_memory(policy, Vec::new(), Clock::system());
    // RSS at a few points on the way: flat once the table is full means bounded.
    let marks = [sent / 10, sent / 4, sent / 2, sent];
    let mut seen = Vec::new();
    let mut done = 0;
    for &mark in &marks {
        for i in done..mark {
            registry
                .strike(IpAddr::V4(struck(i)), StrikeReason::BadCookie)
                .await;
        }
        done = mark;
        let (own, _) = infra::rss(me)?;
        seen.push(format!(
            "{}: +{:.1}",
            fmt_value(mark as f64, ""),
            own.saturating_sub(own0) as f64 / MIB
        ));
    }
    let (own1, _) = infra::rss(me)?;
    let tracked = registry.tracked();
    drop(registry);

    let growth = rss1.saturating_sub(rss0) as f64 / MIB;
    let bound = cap as f64 * TRACKED_ENTRY_BYTES / MIB + STRIKE_SLACK_MIB;
    let s = fmt_value(sent as f64, "");
    let c = fmt_value(cap as f64, "");
    let unbounded = sent as f64 * TRACKED_ENTRY_BYTES / MIB;
    let yes_no = |b: bool| if b { "yes" } else { "no" };
    Ok(vec![
        load_row("strikes", &start_load),
        Row {
            ours: format!(
                "{s} in {took:.1} s ({} /s); anteroom_strikes_total{{reason=\"bad_cookie\"}} {counted}",
                fmt_value(sent as f64 / took, "")
            ),
            ..Row::new(
                "strikes",
                format!("forged cookies from distinct addresses (max_tracked {c})"),
                sent as f64,
                "",
            )
        },
        Row {
            ours: format!("{:.1} → {:.1} MiB", rss0 as f64 / MIB, rss1 as f64 / MIB),
            ..Row::new("strikes", format!("anteroom RSS before → after {s} strikes"), rss1 as f64 / MIB, "")
        },
        Row::new(
            "strikes",
            format!("anteroom RSS growth over {s} strikes"),
            growth,
            "MiB",
        )
        .target(
            &format!(
                "≤ {bound:.1} MiB ({c} × {TRACKED_ENTRY_BYTES:.0} B + {STRIKE_SLACK_MIB:.0} MiB; unbounded: {unbounded:.0} MiB)"
            ),
            growth <= bound,
        )
        .why(
            "the table fills at about the computed cost per client, but once it is full \
             every new client evicts one, and that churn (a deque buffer freed and another \
             allocated, B-tree nodes emptied on the left and split on the right, the hash \
             table rehashed in place) leaves allocator slack the per-entry figure does not \
             count; the in-process row shows whether the growth stays flat once full",
        ),
        Row::new(
            "strikes",
            format!("anteroom peak RSS (VmHWM) by {s} strikes"),
            hwm as f64 / MIB,
            "MiB",
        ),
        Row {
            ours: format!(
                "first struck: {}; last struck: {}",
                yes_no(first_kept),
                yes_no(last_kept)
            ),
            ..Row::new(
                "strikes",
                "still remembered (3 more strikes ban it)",
                0.0,
                "",
            )
        }
        .target(
            "first no, last yes",
            (sent <= cap as u64 || !first_kept) && last_kept,
        )
        .why("the least recently struck client was not the one forgotten"),
        Row {
            ours: format!(
                "{} tracked; RSS +{:.1} MiB ({:.0} B per tracked client); RSS growth (MiB) after {}",
                fmt_value(tracked as f64, ""),
                own1.saturating_sub(own0) as f64 / MIB,
                own1.saturating_sub(own0) as f64 / tracked.max(1) as f64,
                seen.join(", ")
            ),
            ..Row::new(
                "strikes",
                format!("in-process registry after the same {s} strikes"),
                tracked as f64,
                "",
            )
        }
        .target(&format!("tracked = {c}"), tracked == cap.min(sent as usize))
        .why("the registry kept more or fewer clients than max_tracked"),
    ])
}
