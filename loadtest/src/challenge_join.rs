//! The proof of work's cost at the door: cookieless joins into a paused room with
//! `challenge: {mode: always}`, answered with solutions found beforehand, beside the same
//! joins without the challenge (`GET /` as a JSON client, which gets the same waiting JSON
//! back as an accepted answer does), in alternating rounds on fresh embedded instances.
//!
//! The challenges are fetched once, from an instance of their own (which measures what
//! handing one out costs), and solved once before anything is timed (a native solver on
//! this machine's cores). Every instance shares one cookie secret, so each challenged
//! round answers the same challenges on a fresh instance whose store has spent none of
//! them: rounds cost no new solving, and there can be many of them. What is timed is the
//! door's own work per join: the answer's parse, the challenge's check, the spend and the
//! join.
//!
//! With `--server-cpus` and `--client-cpus`, anteroom and the harness (once the solving is
//! done) are pinned apart: the rate is then the server's, not a share of two cores the
//! scheduler splits differently from one round to the next. The CPU time is each server
//! thread's own (`schedstat`, to the nanosecond).
//!
//! With `--store redis` every instance has a fresh Redis of its own (pinned beside anteroom
//! when anteroom is pinned): the join and the spend are then one script in Redis, as with
//! several replicas, and Redis's CPU per join is measured beside anteroom's.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use base64::Engine as _;
use hyper::Method;

use crate::client::{self, Admin, Conn};
use anteroom_fixtures::RedisServer;

use crate::infra::{Anteroom, AnteroomSpec, pin, pin_self, random_secret, threads_cpu_secs};
use crate::report::Row;
use crate::scenarios::Store;

/// Joins (or answers) before the timed ones, on the path the timed ones take.
const WARM_UP: u64 = 2_000;

/// What one instance measured.
struct Run {
    rate: f64,
    /// anteroom's CPU per join, µs.
    cpu_us: f64,
    /// Redis's CPU per join, µs (0 on the embedded store).
    redis_us: f64,
}

/// How the instances of one run are set up.
struct Setup {
    /// Shared by every instance, so the challenges fetched once are good on each.
    secret: String,
    /// Where anteroom runs (`taskset -c`), if pinned.
    cpus: Option<String>,
    /// Whether both kinds of request carry what a browser's `fetch` from the waiting page
    /// sends ([`BROWSER`]), rather than only what they need.
    browser: bool,
    /// The queue store of every instance.
    store: Store,
}

/// What Chromium's `fetch` from the waiting page sends besides the request's own
/// headers, for a newcomer (no cookie yet): on the plain join and on the answer alike.
const BROWSER: &[(&str, &str)] = &[
    ("sec-ch-ua", r#""Chromium";v="131", "Not_A Brand";v="24""#),
    ("sec-ch-ua-mobile", "?0"),
    ("sec-ch-ua-platform", r#""Linux""#),
    ("accept-language", "en-GB,en;q=0.9,fr;q=0.8"),
    ("accept-encoding", "gzip, deflate, br, zstd"),
    ("sec-fetch-site", "same-origin"),
    ("sec-fetch-mode", "cors"),
    ("sec-fetch-dest", "empty"),
];

/// One instance of anteroom and, with `--store redis`, its own fresh Redis.
struct Instance {
    ant: Anteroom,
    redis: Option<RedisServer>,
}

impl Instance {
    /// CPU seconds used so far by anteroom and by its Redis (0 without one).
    fn cpu_secs(&self) -> anyhow::Result<(f64, f64)> {
        let redis = match self.redis.as_ref().and_then(RedisServer::pid) {
            Some(pid) => threads_cpu_secs(pid)?,
            None => 0.0,
        };
        Ok((threads_cpu_secs(self.ant.pid())?, redis))
    }
}

impl Setup {
    /// A fresh instance, its room paused so every join waits.
    async fn start(&self, challenge: bool) -> anyhow::Result<Instance> {
        let redis = (self.store == Store::Redis).then(RedisServer::start);
        if let (Some(redis), Some(cpus)) = (&redis, &self.cpus) {
            pin(redis.pid().context("the Redis server's pid")?, cpus)?;
        }
        let mut spec = AnteroomSpec::new(redis.as_ref().map(RedisServer::url));
        spec.cookie_secret = Some(self.secret.clone());
        spec.cpus = self.cpus.clone();
        if challenge {
            spec.room_extra = "    challenge: {mode: always}\n".into();
        }
        let ant = Anteroom::start(&spec)?;
        Admin::connect(ant.addr).await?.pause().await?;
        Ok(Instance { ant, redis })
    }
}

/// `rounds` alternating pairs of `n` joins from `conns` connections; the medians.
pub async fn challenge_join(
    n: u64,
    conns: usize,
    rounds: usize,
    server_cpus: Option<String>,
    client_cpus: Option<String>,
    browser: bool,
    store: Store,
) -> anyhow::Result<Vec<Row>> {
    let setup = Setup {
        secret: random_secret(),
        cpus: server_cpus.clone(),
        browser,
        store,
    };
    let (texts, issue_cpu_us) = {
        let instance = setup.start(true).await?;
        let addr = instance.ant.addr;
        // The warm-up's challenges are the answers' warm-up too.
        let mut texts = fetch(addr, conns, WARM_UP).await?;
        let (before, _) = instance.cpu_secs()?;
        texts.extend(fetch(addr, conns, n).await?);
        (texts, (instance.cpu_secs()?.0 - before) * 1e6 / n as f64)
    };
    let fetched = Instant::now();
    let bodies = Arc::new(solve_all(texts)?);
    if let Some(cpus) = &client_cpus {
        pin_self(cpus)?;
    }
    let (mut plain, mut with) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        // Every answer has to reach the last instance before its challenge expires.
        if fetched.elapsed() + Duration::from_secs(30) > anteroom::challenge::TTL {
            bail!(
                "challenge-join: the challenges expire before round {round}; ask for fewer \
                 rounds or joins"
            );
        }
        let p = run(&setup, None, n, conns).await?;
        let c = run(&setup, Some(bodies.clone()), n, conns).await?;
        crate::scenarios::say(format!(
            "challenge-join round {round}: without {:.0}/s {:.1} µs (Redis {:.1} µs), with \
             {:.0}/s {:.1} µs (Redis {:.1} µs)",
            p.rate, p.cpu_us, p.redis_us, c.rate, c.cpu_us, c.redis_us,
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
    let (redis_plain, redis_with) = (
        median(&plain, |r| r.redis_us),
        median(&with, |r| r.redis_us),
    );
    let ratio = rate_with / rate_plain.max(f64::MIN_POSITIVE);
    let shape = if browser {
        ", browser-shaped requests"
    } else {
        ", minimal requests"
    };
    let pinned = match (&server_cpus, &client_cpus) {
        (Some(s), Some(c)) => format!(", anteroom on CPU {s}, the load on {c}"),
        (Some(s), None) => format!(", anteroom on CPU {s}"),
        _ => String::new(),
    };
    let store_name = store.name();
    let mut rows = vec![
        Row::new(
            "challenge-join",
            format!(
                "joins/s without the challenge ({store_name} store, {n} joins, {conns} conns, \
                 median of {rounds}{shape}{pinned})"
            ),
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
             row); unpinned on this shared 2-core machine the rates also swing with where the \
             scheduler puts the server beside the load",
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
            issue_cpu_us,
            "µs",
        ),
    ];
    if store == Store::Redis {
        rows.push(Row {
            ours: format!("{redis_plain:.1} / {redis_with:.1} µs"),
            ..Row::new(
                "challenge-join",
                "Redis CPU per join without / with the challenge's answer",
                redis_with,
                "µs",
            )
        });
    }
    Ok(rows)
}

/// One fresh instance: [`WARM_UP`] joins, then `n` timed ones, each answering one of
/// `bodies` (the challenge is on) or as a plain JSON newcomer (it is off).
async fn run(
    setup: &Setup,
    bodies: Option<Arc<Vec<String>>>,
    n: u64,
    conns: usize,
) -> anyhow::Result<Run> {
    let instance = setup.start(bodies.is_some()).await?;
    let addr = instance.ant.addr;
    // A JSON newcomer's join, as the challenge's answer is one: the same waiting JSON
    // back, so the difference is the door's work.
    let mut accept = vec![("accept", "application/json".to_owned())];
    // The answer as the page's script posts it.
    let mut answer = vec![("content-type", "application/json".to_owned())];
    if setup.browser {
        let browser = BROWSER.iter().map(|(k, v)| (*k, (*v).to_owned()));
        accept.extend(browser.clone());
        answer.extend(browser);
        answer.push(("accept", "*/*".to_owned()));
        answer.push(("origin", format!("http://{addr}")));
    }
    let join = |n: u64, skip: u64| {
        let (bodies, accept, answer) = (bodies.clone(), accept.clone(), answer.clone());
        async move {
            match bodies {
                Some(bodies) => post_all(addr, conns, bodies, answer, skip, n).await,
                None => {
                    let load =
                        client::load_with(addr, conns, n, Duration::from_secs(300), accept, false)
                            .await?;
                    Ok((load.ok, load.errors, load.elapsed))
                }
            }
        }
    };
    join(WARM_UP, 0).await?;
    let before = instance.cpu_secs()?;
    let (ok, errors, elapsed) = join(n, WARM_UP).await?;
    let after = instance.cpu_secs()?;
    if errors > 0 || ok != n {
        bail!("challenge-join: {ok} joins, {errors} errors of {n}");
    }
    Ok(Run {
        rate: ok as f64 / elapsed.as_secs_f64(),
        cpu_us: (after.0 - before.0) * 1e6 / n as f64,
        redis_us: (after.1 - before.1) * 1e6 / n as f64,
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
                                // As the waiting page sends it, with its solve time.
                                serde_json::json!({
                                    "challenge": text,
                                    "solution": solution,
                                    "solve_ms": 412,
                                })
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

/// Posts `n` bodies from the `skip`th on, once each, over `conns` keep-alive connections:
/// (joined, errors, elapsed).
async fn post_all(
    addr: SocketAddr,
    conns: usize,
    bodies: Arc<Vec<String>>,
    headers: Vec<(&'static str, String)>,
    skip: u64,
    n: u64,
) -> anyhow::Result<(u64, u64, Duration)> {
    let headers = Arc::new(headers);
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let (bodies, next, headers) = (bodies.clone(), next.clone(), headers.clone());
        tasks.push(tokio::spawn(async move {
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let mut conn = Conn::connect(addr).await?;
            let (mut ok, mut errors) = (0u64, 0u64);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let Some(body) = bodies.get((skip + i) as usize) else {
                    break;
                };
                let reply = conn
                    .send(
                        Method::POST,
                        "/__anteroom/challenge",
                        &headers,
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
