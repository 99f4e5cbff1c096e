//! The admitted path's throughput: the origin direct, nginx as a plain reverse proxy and
//! anteroom, driven by the same `wrk` (the tool and its output's parser live here).

use std::process::Command;

use anyhow::{Context, bail};

use crate::client::Conn;
use crate::infra::{Anteroom, AnteroomSpec, CpuTime, Nginx, cpu_time};
use crate::report::Row;
use crate::scenarios::say;

/// Requests/s and latency from one wrk run.
#[derive(Clone, Debug)]
pub struct Wrk {
    pub rps: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Responses other than 2xx or 3xx.
    pub errors: u64,
    /// Requests completed in the run.
    pub requests: u64,
}

pub fn wrk(
    url: &str,
    threads: usize,
    conns: usize,
    secs: u64,
    headers: &[&str],
) -> anyhow::Result<Wrk> {
    let mut cmd = Command::new("wrk");
    cmd.arg(format!("-t{threads}"))
        .arg(format!("-c{conns}"))
        .arg(format!("-d{secs}s"))
        .arg("--latency");
    for h in headers {
        cmd.arg("-H").arg(h);
    }
    let out = cmd
        .arg(url)
        .output()
        .context("wrk is required (apt-get install wrk)")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!("wrk failed: {text}{}", String::from_utf8_lossy(&out.stderr));
    }
    let field = |prefix: &str| -> Option<String> {
        text.lines()
            .map(str::trim)
            .find(|l| l.starts_with(prefix))
            .map(|l| l[prefix.len()..].trim().to_owned())
    };
    let latency = |pct: &str| -> anyhow::Result<f64> {
        let v = field(pct).with_context(|| format!("no {pct} in wrk output: {text}"))?;
        parse_duration_ms(&v)
    };
    let rps: f64 = field("Requests/sec:")
        .context("no Requests/sec in wrk output")?
        .parse()?;
    let mut errors = 0;
    if let Some(v) = field("Non-2xx or 3xx responses:") {
        errors += v.parse::<u64>().unwrap_or(0);
    }
    let requests = text
        .lines()
        .find(|l| l.contains(" requests in "))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .context("no request count in wrk output")?;
    Ok(Wrk {
        rps,
        p50_ms: latency("50%")?,
        p99_ms: latency("99%")?,
        errors,
        requests,
    })
}

fn parse_duration_ms(v: &str) -> anyhow::Result<f64> {
    let split = v
        .find(|c: char| c.is_ascii_alphabetic())
        .context("no unit")?;
    let (n, unit) = v.split_at(split);
    let n: f64 = n.parse()?;
    Ok(match unit {
        "us" => n / 1000.0,
        "ms" => n,
        "s" => n * 1000.0,
        "m" => n * 60_000.0,
        _ => bail!("unknown unit {unit}"),
    })
}

/// Admitted-visitor throughput: the origin direct, nginx as a plain reverse proxy, and
/// anteroom, each driven by the same wrk with the same connections, `rounds` times in turn.
pub async fn proxy(
    secs: u64,
    conns: usize,
    threads: usize,
    rounds: usize,
) -> anyhow::Result<Vec<Row>> {
    let origin = Nginx::origin()?;
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2);
    let nginx = Nginx::reverse_proxy(origin.addr, workers)?;
    let mut spec = AnteroomSpec::new(None);
    spec.origin = format!("http://{}", origin.addr);
    spec.rate = 1_000_000.0;
    spec.max_active = 1_000_000;
    let ant = Anteroom::start(&spec)?;
    let mut conn = Conn::connect(ant.addr).await?;
    let first = conn.get("/", &[]).await?;
    let cookie = first.set_cookie.context("anteroom set no cookie")?;
    let check = conn.get("/", &[("cookie", &cookie)]).await?;
    if !check.body.starts_with(b"hello from the origin") {
        bail!(
            "the admitted visitor did not reach the origin: {:?}",
            check.body
        );
    }
    let header = format!("Cookie: {cookie}");
    // The same anteroom on one shared multi-thread runtime: what the per-CPU workers buy.
    let mut shared_spec = AnteroomSpec::new(None);
    shared_spec.origin = spec.origin.clone();
    shared_spec.rate = spec.rate;
    shared_spec.max_active = spec.max_active;
    shared_spec.server_extra = "  workers: 1\n".into();
    let shared = Anteroom::start(&shared_spec)?;
    let shared_cookie = Conn::connect(shared.addr)
        .await?
        .get("/", &[])
        .await?
        .set_cookie
        .context("anteroom (workers: 1) set no cookie")?;
    let shared_header = format!("Cookie: {shared_cookie}");
    let targets = [
        (
            "origin direct (nginx)",
            format!("http://{}/", origin.addr),
            None,
            None,
        ),
        (
            "nginx reverse proxy",
            format!("http://{}/", nginx.addr),
            None,
            Some(nginx.pid()),
        ),
        (
            "anteroom, admitted visitor",
            format!("http://{}/", ant.addr),
            Some(header.as_str()),
            Some(ant.pid()),
        ),
        (
            "anteroom, workers: 1",
            format!("http://{}/", shared.addr),
            Some(shared_header.as_str()),
            Some(shared.pid()),
        ),
    ];
    let mut runs: Vec<Vec<Wrk>> = vec![Vec::new(); targets.len()];
    // The proxy's own CPU time per request, summed over the rounds: unlike req/s it hardly
    // moves when other work shares the cores, so it is the figure to compare changes by.
    let mut cpu: Vec<(CpuTime, u64)> = vec![(CpuTime::default(), 0); targets.len()];
    for round in 0..rounds {
        for (i, (label, url, h, pid)) in targets.iter().enumerate() {
            say(format!("proxy: round {} of {rounds}: {label}", round + 1));
            let headers: Vec<&str> = h.iter().copied().collect();
            let before = pid.map(cpu_time).transpose()?;
            let r = tokio::task::block_in_place(|| wrk(url, threads, conns, secs, &headers))?;
            if let (Some(pid), Some(before)) = (pid, before) {
                cpu[i].0 += cpu_time(*pid)?.since(before);
                cpu[i].1 += r.requests;
            }
            if r.errors > 0 {
                say(format!("proxy: {label}: {} non-2xx", r.errors));
            }
            runs[i].push(r);
        }
    }
    // The median round by throughput, per target.
    let median: Vec<Wrk> = runs
        .into_iter()
        .map(|mut v| {
            v.sort_by(|a, b| a.rps.total_cmp(&b.rps));
            v[v.len() / 2].clone()
        })
        .collect();
    let mut rows = Vec::new();
    for ((label, _, _, _), r) in targets.iter().zip(&median) {
        rows.push(Row::new("proxy", format!("{label}: req/s"), r.rps, "/s"));
        rows.push(Row {
            ours: format!("{:.2} / {:.2} ms", r.p50_ms, r.p99_ms),
            ..Row::new("proxy", format!("{label}: p50 / p99"), r.p99_ms, "")
        });
    }
    let per_request = |(time, requests): (CpuTime, u64)| CpuTime {
        user: time.user * 1e6 / requests.max(1) as f64,
        system: time.system * 1e6 / requests.max(1) as f64,
    };
    let (nginx_cpu, ant_cpu) = (per_request(cpu[1]), per_request(cpu[2]));
    // Split, because the two answer different questions: system time is the same system
    // calls nginx makes (and being scheduled), user time is the proxy's own code.
    for (label, split) in [
        ("nginx reverse proxy", nginx_cpu),
        ("anteroom, admitted visitor", ant_cpu),
    ] {
        rows.push(Row {
            ours: format!("{:.1} / {:.1} µs", split.user, split.system),
            ..Row::new(
                "proxy",
                format!("{label}: user / system CPU per request"),
                split.total(),
                "",
            )
        });
    }
    let (nginx_cpu, ant_cpu) = (nginx_cpu.total(), ant_cpu.total());
    rows.push(Row::new(
        "proxy",
        "nginx reverse proxy: CPU per request",
        nginx_cpu,
        "µs",
    ));
    rows.push(Row::new(
        "proxy",
        "anteroom, admitted visitor: CPU per request",
        ant_cpu,
        "µs",
    ));
    rows.push(Row::new(
        "proxy",
        "anteroom ÷ nginx, CPU per request",
        ant_cpu / nginx_cpu,
        "",
    ));
    rows.push(Row::new(
        "proxy",
        "anteroom, workers: 1: CPU per request",
        per_request(cpu[3]).total(),
        "µs",
    ));
    rows.push(Row::new(
        "proxy",
        "anteroom ÷ anteroom with workers: 1, req/s",
        median[2].rps / median[3].rps,
        "",
    ));
    let (origin_r, nginx_r, ant_r) = (&median[0], &median[1], &median[2]);
    let tput = ant_r.rps / nginx_r.rps;
    let p99 = ant_r.p99_ms / nginx_r.p99_ms;
    rows.push(
        Row::new("proxy", "anteroom ÷ nginx, req/s", tput, "")
            .target("≥ 1.00", tput >= 1.0)
            .why(
                "on 2 shared cores the cheaper proxy wins the closed loop: anteroom spends \
                  about 1.8 to 1.9 times nginx's CPU per request (rows above). Its system \
                  time alone (the same 4 system calls a request as nginx's, and more \
                  preemption) is about nginx's whole CPU per request, and its user time is \
                  about 3 times nginx's: hyper, tokio and the header map alone take more \
                  than nginx's whole user time, with no one frame above 4 % (perf, \
                  BENCHMARKS.md notes)",
            ),
    );
    rows.push(
        Row::new("proxy", "anteroom ÷ nginx, p99", p99, "")
            .target("≤ 1.00", p99 <= 1.0)
            .why("follows from the throughput gap at equal connections (closed loop)"),
    );
    rows.push(Row::new(
        "proxy",
        "anteroom ÷ origin direct, req/s",
        ant_r.rps / origin_r.rps,
        "",
    ));
    rows.push(Row::new(
        "proxy",
        "nginx ÷ origin direct, req/s",
        nginx_r.rps / origin_r.rps,
        "",
    ));
    Ok(rows)
}
