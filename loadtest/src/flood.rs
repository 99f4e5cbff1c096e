//! A ban flood. Operator bans made through the admin API, then bans
//! earned through a ban path from as many distinct addresses, each phase at a steady pace
//! (so the machine is not saturated and the page's latency shows what the bans cost, not
//! what the load generator costs). Measured: anteroom's CPU per ban for each 10,000 (a
//! change must cost the same at 100,000 bans as at none), an admitted visitor's page
//! latency before and during the flood, and whether the operator's own entries (pauses,
//! resumes, every API ban) are all still in the audit log afterwards.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use hyper::{Method, StatusCode};

use crate::client::{Admin, Conn, histogram};
use crate::costs::{admitted_cookie, load_row, proxy_spec};
use crate::infra::{self, ADMIN_TOKEN, Anteroom, Nginx};
use crate::report::{Row, fmt_value};
use crate::scenarios::say;

/// Bans per CPU sample.
const CHUNK: usize = 10_000;
/// Concurrent connections of each phase.
const WORKERS: usize = 8;

/// One request of a phase.
struct Req {
    method: Method,
    path: String,
    headers: Vec<(String, String)>,
    body: Option<String>,
}

/// The `i`-th operator ban's address: 10.0.0.0 upwards.
fn api_addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::from(0x0A00_0000u32 + i as u32)
}

/// The `i`-th ban-path client: 10.128.0.0 upwards (never an API ban's address).
fn path_addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::from(0x0A80_0000u32 + i as u32)
}

fn api_ban(i: usize) -> Req {
    Req {
        method: Method::POST,
        path: "/__anteroom/admin/api/bans".into(),
        headers: vec![
            ("authorization".into(), format!("Bearer {ADMIN_TOKEN}")),
            ("content-type".into(), "application/json".into()),
        ],
        body: Some(format!(
            r#"{{"target":"{}","duration_secs":86400,"reason":"flood"}}"#,
            api_addr(i)
        )),
    }
}

fn path_ban(i: usize) -> Req {
    Req {
        method: Method::GET,
        path: "/.env".into(),
        headers: vec![("x-forwarded-for".into(), path_addr(i).to_string())],
        body: None,
    }
}

/// Sends `make(i)` for every `i` in `from..to` from [`WORKERS`] keep-alive connections,
/// request `i` not before `i / rate` seconds after the start; each answer must satisfy
/// `ok`.
async fn paced(
    addr: SocketAddr,
    from: usize,
    to: usize,
    rate: f64,
    make: fn(usize) -> Req,
    ok: fn(StatusCode) -> bool,
) -> anyhow::Result<()> {
    let next = Arc::new(AtomicU64::new(from as u64));
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..WORKERS {
        let next = next.clone();
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::connect(addr).await?;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= to {
                    return anyhow::Ok(());
                }
                let due = start + Duration::from_secs_f64((i - from) as f64 / rate);
                tokio::time::sleep_until(due).await;
                let req = make(i);
                let headers: Vec<(&str, &str)> = req
                    .headers
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                let reply = conn.send(req.method, &req.path, &headers, req.body).await?;
                if !ok(reply.status) {
                    bail!(
                        "{} #{i}: {} {}",
                        req.path,
                        reply.status,
                        String::from_utf8_lossy(&reply.body)
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

/// One phase in chunks of [`CHUNK`]: anteroom's CPU seconds per ban of each chunk.
async fn phase(
    ant: &Anteroom,
    n: usize,
    rate: f64,
    make: fn(usize) -> Req,
    ok: fn(StatusCode) -> bool,
) -> anyhow::Result<Vec<f64>> {
    let mut per_ban = Vec::new();
    let mut done = 0;
    while done < n {
        let end = (done + CHUNK).min(n);
        let before = infra::cpu_secs(ant.pid())?;
        paced(ant.addr, done, end, rate, make, ok).await?;
        let used = infra::cpu_secs(ant.pid())? - before;
        per_ban.push(used / (end - done) as f64);
        done = end;
    }
    Ok(per_ban)
}

/// An admitted visitor's page, one request at a time until `stop`: the latencies' p50
/// and p99 in ms.
async fn sample_page(
    addr: SocketAddr,
    cookie: String,
    visitor: &'static str,
    stop: Arc<AtomicBool>,
    at_least: usize,
) -> anyhow::Result<(f64, f64, u64)> {
    let mut conn = Conn::connect(addr).await?;
    let mut hist = histogram();
    let mut n = 0usize;
    while n < at_least || !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        let reply = conn
            .get("/", &[("cookie", &cookie), ("x-forwarded-for", visitor)])
            .await?;
        if !reply.body.starts_with(b"hello from the origin") {
            bail!("the admitted visitor was not served: {}", reply.status);
        }
        hist.record((t.elapsed().as_micros() as u64).max(1))?;
        n += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok((
        hist.value_at_quantile(0.5) as f64 / 1000.0,
        hist.value_at_quantile(0.99) as f64 / 1000.0,
        hist.len(),
    ))
}

/// The audit log's entries (the current file and every rotated one) with `action`.
fn audit_count(data: &std::path::Path, action: &str) -> anyhow::Result<usize> {
    let needle = format!("\"action\":\"{action}\"");
    let mut n = 0;
    for entry in std::fs::read_dir(data)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with(anteroom::audit::AUDIT_FILE) {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            n += text.lines().filter(|l| l.contains(&needle)).count();
        }
    }
    Ok(n)
}

/// The flood: `api` operator bans, then `paths` ban-path bans, each phase at `rate` a
/// second, with `abuse.max_bans: max_bans`.
pub async fn ban_flood(
    api: usize,
    paths: usize,
    rate: f64,
    max_bans: usize,
) -> anyhow::Result<Vec<Row>> {
    let start_load = infra::load_average();
    let origin = Nginx::origin()?;
    let top = format!(
        "trusted_proxies: [\"127.0.0.1/32\"]\nabuse:\n  ban_paths: [\"/.env\"]\n  max_bans: {max_bans}\n"
    );
    let ant = Anteroom::start(&proxy_spec(origin.addr, &top, ""))?;
    let visitor = "10.200.0.1";
    let cookie = admitted_cookie(ant.addr, &[("x-forwarded-for", visitor)]).await?;
    let mut admin = Admin::connect(ant.addr).await?;
    admin.pause().await?;
    admin.resume().await?;

    let idle = Arc::new(AtomicBool::new(true));
    let before = sample_page(ant.addr, cookie.clone(), visitor, idle, 2_000).await?;

    say(format!(
        "ban-flood: {api} API bans, then {paths} ban-path bans, {rate}/s each"
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = tokio::spawn(sample_page(ant.addr, cookie, visitor, stop.clone(), 0));
    let api_cpu = phase(&ant, api, rate, api_ban, |s| s == StatusCode::CREATED).await?;
    let path_cpu = phase(&ant, paths, rate, path_ban, |s| {
        s == StatusCode::TOO_MANY_REQUESTS || s == StatusCode::FORBIDDEN
    })
    .await?;
    stop.store(true, Ordering::Relaxed);
    let during = sampler.await??;

    admin.pause().await?;
    admin.resume().await?;
    let active = admin.metric("anteroom_bans_active", "").await?;
    let displaced = admin.metric("anteroom_bans_displaced_total", "").await?;
    let data = ant.data_dir();
    let audited = (
        audit_count(&data, "pause")?,
        audit_count(&data, "resume")?,
        audit_count(&data, "ban")?,
    );

    let mut rows = vec![load_row("ban-flood", &start_load)];
    for (what, cpu) in [("API bans", &api_cpu), ("ban-path bans", &path_cpu)] {
        let (first, last) = (cpu[0], cpu[cpu.len() - 1]);
        let ratio = last / first;
        rows.push(Row {
            ours: format!(
                "{:.0} µs → {:.0} µs per ban ({} chunks of {CHUNK}: {})",
                first * 1e6,
                last * 1e6,
                cpu.len(),
                cpu.iter()
                    .map(|c| format!("{:.0}", c * 1e6))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            ..Row::new(
                "ban-flood",
                format!("{what}: anteroom CPU per ban, last {CHUNK} ÷ first"),
                ratio,
                "",
            )
            .target("≤ 1.5", ratio <= 1.5)
            .why("a ban change costs more as bans accumulate")
        });
    }
    let p99_ratio = during.1 / before.1;
    rows.push(Row {
        ours: format!(
            "p99 {:.2} ms → {:.2} ms (p50 {:.2} → {:.2}; {} and {} samples)",
            before.1, during.1, before.0, during.0, before.2, during.2
        ),
        ..Row::new(
            "ban-flood",
            "admitted visitor's page p99, during the flood ÷ before",
            p99_ratio,
            "",
        )
        .target("≤ 2", p99_ratio <= 2.0)
        .why("the flood slows the pages of visitors who are not banned")
    });
    let all_there = audited == (2, 2, api);
    rows.push(Row {
        ours: format!(
            "pause {}, resume {}, ban {} of 2, 2, {}; bans active {} (max_bans {}), displaced {}",
            audited.0,
            audited.1,
            audited.2,
            fmt_value(api as f64, ""),
            fmt_value(active, ""),
            fmt_value(max_bans as f64, ""),
            fmt_value(displaced, "")
        ),
        ..Row::new(
            "ban-flood",
            "operator entries in the audit log afterwards",
            audited.2 as f64,
            "",
        )
        .target("all", all_there)
        .why("automatic bans rotated the operator's entries away")
    });
    Ok(rows)
}
