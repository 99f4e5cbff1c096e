//! The proof of work's cost at the door: cookieless joins into a paused room with
//! `challenge: {mode: always}`, answered with solutions found beforehand, beside the same
//! joins without the challenge (`GET /` as a JSON client, which gets the same waiting JSON
//! back as an accepted answer does), in alternating rounds on fresh embedded
//! instances. The challenges are fetched and solved before the timed part (a native
//! solver on this machine's cores), so what is timed is the door's own work per join: the
//! answer's parse, the challenge's check, the spend and the join. What handing out a
//! challenge costs (the `GET` that returns one) is measured apart, over the fetch.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use base64::Engine as _;
use hyper::Method;

use crate::client::{self, Admin, Conn};
use crate::infra::{Anteroom, AnteroomSpec, cpu_secs};
use crate::report::Row;

/// What one instance measured.
struct Run {
    rate: f64,
    cpu_us: f64,
    issue_cpu_us: Option<f64>,
}

/// `rounds` alternating pairs of `n` joins from `conns` connections; the medians.
pub async fn challenge_join(n: u64, conns: usize, rounds: usize) -> anyhow::Result<Vec<Row>> {
    let (mut plain, mut with) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        let p = run(false, n, conns).await?;
        let c = run(true, n, conns).await?;
        crate::scenarios::say(format!(
            "challenge-join round {round}: without {:.0}/s {:.1} µs, with {:.0}/s {:.1} µs (+ {:.1} µs to issue)",
            p.rate,
            p.cpu_us,
            c.rate,
            c.cpu_us,
            c.issue_cpu_us.unwrap_or(0.0)
        ));
        plain.push(p);
        with.push(c);
    }
    let median = |runs: &[Run], f: fn(&Run) -> f64| {
        let mut v: Vec<f64> = runs.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (rate_plain, rate_with) = (median(&plain, |r| r.rate), median(&with, |r| r.rate));
    let (cpu_plain, cpu_with) = (median(&plain, |r| r.cpu_us), median(&with, |r| r.cpu_us));
    let issue = median(&with, |r| r.issue_cpu_us.unwrap_or(0.0));
    let ratio = rate_with / rate_plain.max(f64::MIN_POSITIVE);
    Ok(vec![
        Row::new(
            "challenge-join",
            format!("joins/s without the challenge ({n} joins, {conns} conns, median of {rounds})"),
            rate_plain,
            "/s",
        ),
        Row::new(
            "challenge-join",
            "joins/s with challenge: always, solved beforehand (same)",
            rate_with,
            "/s",
        )
        .target("within 10 % of without", ratio >= 0.9)
        .why(
            "the answer's request costs more anteroom CPU than a plain JSON join (see the CPU \
             row); on this shared 2-core machine the rates also swing with other load",
        ),
        Row {
            ours: format!("{cpu_plain:.1} / {cpu_with:.1} µs"),
            ..Row::new(
                "challenge-join",
                "anteroom CPU per join without / with the challenge's answer",
                cpu_with,
                "µs",
            )
        },
        Row::new(
            "challenge-join",
            "anteroom CPU per challenge handed out (the JSON answer to a newcomer's GET)",
            issue,
            "µs",
        ),
    ])
}

/// One fresh instance: warm up, then (with the challenge) fetch and solve `n` challenges,
/// then `n` timed joins.
async fn run(challenge: bool, n: u64, conns: usize) -> anyhow::Result<Run> {
    let mut spec = AnteroomSpec::new(None);
    if challenge {
        spec.room_extra = "    challenge: {mode: always}\n".into();
    }
    let ant = Anteroom::start(&spec)?;
    Admin::connect(ant.addr).await?.pause().await?;
    client::load(ant.addr, conns, 2_000, Duration::from_secs(60), None, false).await?;
    let (bodies, issue_cpu_us) = if challenge {
        let before = cpu_secs(ant.pid())?;
        let texts = fetch(ant.addr, conns, n).await?;
        let issue = (cpu_secs(ant.pid())? - before) * 1e6 / n as f64;
        (Some(solve_all(texts)?), Some(issue))
    } else {
        (None, None)
    };
    let before = cpu_secs(ant.pid())?;
    let (ok, errors, elapsed) = match bodies {
        Some(bodies) => post_all(ant.addr, conns, bodies).await?,
        None => {
            // A JSON newcomer's join, as the challenge's answer is one: the same waiting
            // JSON back, so the difference is the door's work.
            let accept = vec![("accept", "application/json".to_owned())];
            let load =
                client::load_with(ant.addr, conns, n, Duration::from_secs(300), accept, false)
                    .await?;
            (load.ok, load.errors, load.elapsed)
        }
    };
    let cpu_us = (cpu_secs(ant.pid())? - before) * 1e6 / n as f64;
    if errors > 0 || ok != n {
        bail!("challenge-join: {ok} joins, {errors} errors of {n}");
    }
    Ok(Run {
        rate: ok as f64 / elapsed.as_secs_f64(),
        cpu_us,
        issue_cpu_us,
    })
}

/// `n` challenges, asked for as a JSON newcomer over `conns` connections.
async fn fetch(addr: SocketAddr, conns: usize, n: u64) -> anyhow::Result<Vec<String>> {
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let next = next.clone();
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::connect(addr).await?;
            let mut out = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < n {
                let reply = conn.get("/", &[("accept", "application/json")]).await?;
                let json: serde_json::Value = serde_json::from_slice(&reply.body)?;
                let text = json["challenge"]["challenge"]
                    .as_str()
                    .context("no challenge in the answer")?;
                out.push(text.to_owned());
            }
            anyhow::Ok(out)
        }));
    }
    let mut texts = Vec::with_capacity(n as usize);
    for task in tasks {
        texts.extend(task.await??);
    }
    Ok(texts)
}

/// Every challenge's answer body, solved natively on every core.
fn solve_all(texts: Vec<String>) -> anyhow::Result<Vec<String>> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let started = Instant::now();
    let chunks: Vec<Vec<String>> = texts
        .chunks(texts.len().div_ceil(threads).max(1))
        .map(<[String]>::to_vec)
        .collect();
    let bodies = std::thread::scope(|s| {
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                s.spawn(move || {
                    chunk
                        .into_iter()
                        .map(|text| {
                            let fields: Vec<&str> = text.split('.').collect();
                            let bits: u8 = fields[3].parse()?;
                            let nonce: [u8; 16] = base64::engine::general_purpose::URL_SAFE_NO_PAD
                                .decode(fields[4])?
                                .try_into()
                                .map_err(|_| anyhow::anyhow!("a nonce of 16 bytes"))?;
                            let solution = anteroom::challenge::solve(&nonce, bits);
                            anyhow::Ok(
                                serde_json::json!({"challenge": text, "solution": solution})
                                    .to_string(),
                            )
                        })
                        .collect::<anyhow::Result<Vec<String>>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a solver thread"))
            .collect::<anyhow::Result<Vec<Vec<String>>>>()
    })?;
    crate::scenarios::say(format!(
        "challenge-join: {} challenges solved in {:.1} s on {threads} threads",
        texts.len(),
        started.elapsed().as_secs_f64()
    ));
    Ok(bodies.into_iter().flatten().collect())
}

/// Posts every body once over `conns` keep-alive connections: (joined, errors, elapsed).
async fn post_all(
    addr: SocketAddr,
    conns: usize,
    bodies: Vec<String>,
) -> anyhow::Result<(u64, u64, Duration)> {
    let bodies = Arc::new(bodies);
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let (bodies, next) = (bodies.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::connect(addr).await?;
            let (mut ok, mut errors) = (0u64, 0u64);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                let Some(body) = bodies.get(i) else { break };
                let reply = conn
                    .send(
                        Method::POST,
                        "/__anteroom/challenge",
                        &[("content-type", "application/json")],
                        Some(body.clone()),
                    )
                    .await?;
                if reply.status.is_success() && reply.set_cookie.is_some() {
                    ok += 1;
                } else {
                    errors += 1;
                }
            }
            anyhow::Ok((ok, errors))
        }));
    }
    let (mut ok, mut errors) = (0, 0);
    for task in tasks {
        let (o, e) = task.await??;
        ok += o;
        errors += e;
    }
    Ok((ok, errors, started.elapsed()))
}
