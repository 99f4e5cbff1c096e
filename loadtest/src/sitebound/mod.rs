//! The honest ETA when the site is the limit (docs/fairness.md): a crowd against a real slow
//! origin with few workers, measured from the visitors' side.
//!
//! The site is PHP-FPM (Debian's) with `pm = static`, four children and a page that sleeps
//! 200 ms, behind nginx (Debian's) over FastCGI: at most 20 pages a second, a request beyond
//! the four children waiting in the pool's listen backlog. anteroom (the release binary,
//! embedded store) is in front of nginx; with `--replicas N`, N of them share one Redis
//! (`redis-server`, Debian's), and each visitor holds its live stream on another replica
//! than the one serving its pages, as behind a load balancer that spreads requests.
//! Everything is on 127.0.0.1 and is stopped when its case ends.
//!
//! Each visitor behaves like a person whose waiting page speaks JSON ([`visitor`](mod@visitor)).
//!
//! The measurement is the visitors' own, independent of anteroom's ledger: waited =
//! admitted_at − first_shown_at; within = round(waited) ∈ [min, max]; error = |waited −
//! (min + max) / 2|. admitted_at is when the stream says `admitted`, as a real page learns
//! it (positions come at anteroom's 2 s ticks, an admission at once). The product's own
//! figure (`eta` in `GET …/rooms/main/stats`) is read at the end for comparison.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::bail;
use tokio::time::Instant;

use crate::client::Admin;
use crate::infra::{Anteroom, AnteroomSpec, Nginx, PhpFpm};
use crate::report::Row;
use crate::scenarios::say;

mod visitor;

use visitor::{Shown, Tally, visitor};

/// PHP-FPM children (`pm.max_children`, `pm = static`).
pub const PHP_WORKERS: usize = 4;
/// How long the origin's page takes (`usleep`).
pub const PAGE_MS: u64 = 200;
/// The within-range share anteroom is held to.
pub const TARGET: f64 = 0.90;

/// One of the five cases: what anteroom is configured with and how the crowd behaves.
#[derive(Clone, Debug)]
pub struct Case {
    /// 1 to 5, as `--case` and the report number them.
    pub number: u8,
    /// What bounds admission, in a few words.
    pub name: &'static str,
    /// Visitors in the crowd.
    pub visitors: usize,
    /// They arrive evenly spaced over this long.
    pub arrive_over: Duration,
    /// `rate` of the room (visitors admitted per second).
    pub rate: f64,
    /// `max_active` of the room.
    pub max_active: u64,
    /// `max_inflight` of the room, if any.
    pub max_inflight: Option<u64>,
    /// `adaptive: {target_latency: …}` of the room, if any.
    pub adaptive: Option<&'static str>,
    /// `session_ttl` of the room: how long after a visitor's last page their slot is
    /// given back.
    pub session_ttl: &'static str,
    /// When this share of the crowd has been admitted, the rate is halved through
    /// `PUT …/rooms/main/config`.
    pub halve_at: Option<f64>,
    /// Pages each admitted visitor loads, the first being the reload on admission.
    pub pages: usize,
    /// Think time between two pages.
    pub think: Duration,
    /// The case fails if the crowd has not been through within this long.
    pub limit: Duration,
    /// anteroom replicas: 1 on the embedded store, more on one Redis.
    pub replicas: usize,
    /// What the run prints beside its results, and how its replicas start.
    pub diagnostics: Diagnostics,
}

/// How a run can be looked into: a trace of the room, and the second replica's timers
/// moved against the first's.
#[derive(Clone, Debug, Default)]
pub struct Diagnostics {
    /// Print the room's counters once a second, then every waiting visitor's first range
    /// and wait, on standard error.
    pub trace: bool,
    /// Start each replica after the first this much later: its admission passes, counters
    /// and live ticks keep that phase against the first's.
    pub stagger: Duration,
}

impl Case {
    /// The five cases at full size (`small`: case sizes for a quick run, about a third).
    pub fn all(small: bool) -> Vec<Case> {
        let n = |full: usize| if small { full / 3 } else { full };
        let base = Case {
            number: 0,
            name: "",
            visitors: 0,
            arrive_over: Duration::from_secs(10),
            rate: 3.0,
            max_active: 1_000,
            max_inflight: None,
            adaptive: None,
            session_ttl: "5s",
            halve_at: None,
            pages: 4,
            think: Duration::from_millis(500),
            limit: Duration::from_secs(180),
            replicas: 1,
            diagnostics: Diagnostics::default(),
        };
        vec![
            Case {
                number: 1,
                name: "steady rate (3/s, the site could take 5 visitors/s)",
                visitors: n(200),
                ..base.clone()
            },
            Case {
                number: 2,
                name: "rate halved mid-drop (3/s → 1.5/s at half admitted)",
                visitors: n(200),
                halve_at: Some(0.5),
                ..base.clone()
            },
            Case {
                number: 3,
                name: "bound by max_active (20, rate 50, 2 s think time)",
                visitors: n(150),
                rate: 50.0,
                max_active: 20,
                think: Duration::from_secs(2),
                ..base.clone()
            },
            Case {
                number: 4,
                name: "bound by max_inflight (4, rate 15, max_active 40)",
                visitors: n(300),
                rate: 15.0,
                max_active: 40,
                max_inflight: Some(4),
                ..base.clone()
            },
            Case {
                number: 5,
                name: "as 4, with adaptive (target_latency 400ms)",
                visitors: n(300),
                rate: 15.0,
                max_active: 40,
                max_inflight: Some(4),
                adaptive: Some("400ms"),
                ..base
            },
        ]
    }

    /// The room's YAML lines beyond what [`AnteroomSpec`] writes.
    fn room_extra(&self) -> String {
        let mut extra = String::new();
        if let Some(n) = self.max_inflight {
            extra.push_str(&format!("    max_inflight: {n}\n"));
        }
        if let Some(latency) = self.adaptive {
            extra.push_str(&format!("    adaptive:\n      target_latency: {latency}\n"));
        }
        extra
    }

    /// The configuration, in one line, for the report.
    pub fn config_text(&self) -> String {
        let mut s = format!(
            "rate {}, max_active {}, session_ttl {}",
            self.rate, self.max_active, self.session_ttl
        );
        if let Some(n) = self.max_inflight {
            s.push_str(&format!(", max_inflight {n}"));
        }
        if let Some(l) = self.adaptive {
            s.push_str(&format!(", adaptive target_latency {l}"));
        }
        if let Some(at) = self.halve_at {
            s.push_str(&format!(
                ", rate → {} once {:.0} % are admitted",
                self.rate / 2.0,
                at * 100.0
            ));
        }
        if self.replicas > 1 {
            s.push_str(&format!(
                "; {} replicas on Redis, each visitor's stream on another than its pages",
                self.replicas
            ));
        }
        s.push_str(&format!(
            "; {} visitors over {} s, {} pages each, {} ms think time",
            self.visitors,
            self.arrive_over.as_secs_f64(),
            self.pages,
            self.think.as_millis()
        ));
        s
    }
}

/// What one case measured.
#[derive(Clone, Debug)]
pub struct CaseResult {
    /// The case run.
    pub case: Case,
    /// Visitors who were shown a range and then admitted.
    pub waited: usize,
    /// Visitors let in on arrival, never shown a range.
    pub fast_path: usize,
    /// Share of `waited` admitted within the first range shown.
    pub within_range: f64,
    /// Median |waited − middle of the first range shown|, seconds.
    pub median_error_secs: f64,
    /// Median wait of those who waited, seconds.
    pub median_wait_secs: f64,
    /// Median of the first range shown: (min, max), seconds.
    pub median_range: (u64, u64),
    /// Answers with a 5xx status, from joins, polls and pages.
    pub status_5xx: u64,
    /// Admitted visitors answered by anteroom instead of the site.
    pub sent_back: u64,
    /// Live streams that ended before `admitted`.
    pub stream_drops: u64,
    /// The site's pages a second, from the first page to the last.
    pub origin_pages_per_sec: f64,
    /// Pages the site served.
    pub origin_pages: usize,
    /// The product's own `eta` from room stats at the end (the first replica's ledger,
    /// with several: each replica counts the visitors it showed a range to).
    pub product: serde_json::Value,
    /// Every replica's `eta`, in order (one with the embedded store).
    pub product_by_replica: Vec<serde_json::Value>,
    /// The within-range share split by where the first range came from (`page`: the join's
    /// answer; `stream`: the live stream, the page having shown none), and (`stream_first`)
    /// as the stream's replica would count it: against the first range the stream showed,
    /// for everyone it showed one. Each is `[visitors, share]`. With several replicas each
    /// ledger counts the first range it showed, which for the stream's replica is the
    /// latter.
    pub by_source: serde_json::Value,
    /// How long the crowd took, from the first arrival to the last visitor leaving.
    pub took: Duration,
    /// The lowest `effective_rate` of room stats during the run, every `rate_reason` seen
    /// and, under `adaptive`, the highest `origin_p95_ms` (sampled once a second).
    pub effective_rate: String,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Runs one case: starts PHP-FPM, nginx and anteroom, sends the crowd, measures.
pub async fn run_case(case: &Case) -> anyhow::Result<CaseResult> {
    let php = PhpFpm::start(PHP_WORKERS, PAGE_MS)?;
    let nginx = Nginx::fastcgi(&php, 1)?;
    let redis = (case.replicas > 1).then(anteroom_fixtures::RedisServer::start);
    let mut spec = AnteroomSpec::new(redis.as_ref().map(anteroom_fixtures::RedisServer::url));
    // Replicas accept each other's cookies.
    spec.cookie_secret = Some(crate::infra::random_secret());
    spec.origin = format!("http://{}", nginx.addr);
    spec.rate = case.rate;
    spec.max_active = case.max_active;
    spec.session_ttl = case.session_ttl;
    spec.server_extra =
        "  max_connections_per_client: 8192\n  max_streams_per_client: 8192\n".into();
    spec.room_extra = case.room_extra();
    let replicas = (0..case.replicas.max(1))
        .map(|i| {
            if i > 0 {
                // Sets the phase of this replica's timers against the first one's.
                std::thread::sleep(case.diagnostics.stagger);
            }
            Anteroom::start(&spec)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let addrs: Vec<SocketAddr> = replicas.iter().map(|r| r.addr).collect();
    let ant = &replicas[0];
    say(format!(
        "site-bound case {}: {} ({})",
        case.number,
        case.name,
        case.config_text()
    ));

    let tally = Arc::new(Tally::default());
    let rates = Arc::new(std::sync::Mutex::new(String::new()));
    let shared = Arc::new(case.clone());
    let start = Instant::now() + Duration::from_millis(200);
    let gap = case.arrive_over.as_secs_f64() / case.visitors.max(1) as f64;
    let mut tasks = Vec::with_capacity(case.visitors);
    for i in 0..case.visitors {
        let arrive = start + Duration::from_secs_f64(i as f64 * gap);
        tasks.push(tokio::spawn(visitor(
            (addrs[i % addrs.len()], addrs[(i + 1) % addrs.len()]),
            shared.clone(),
            arrive,
            i as u64,
            tally.clone(),
        )));
    }
    // The operator's change, halfway through.
    let halver = case.halve_at.map(|at| {
        let tally = tally.clone();
        let addr = ant.addr;
        let want = ((case.visitors as f64) * at).ceil() as usize;
        let rate = case.rate / 2.0;
        tokio::spawn(async move {
            while tally.admitted.load(Ordering::Relaxed) < want {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let mut admin = Admin::connect(addr).await?;
            admin.config(serde_json::json!({ "rate": rate })).await?;
            let _ = tally.moved.set(Instant::now());
            say(format!("site-bound: rate set to {rate}/s"));
            anyhow::Ok(())
        })
    });
    // The rate the room actually used (adaptive lowers it), sampled once a second.
    let sampler = {
        let addr = ant.addr;
        let trace = case.diagnostics.trace;
        let rates = rates.clone();
        tokio::spawn(async move {
            let Ok(mut admin) = Admin::connect(addr).await else {
                return;
            };
            let mut lowest = f64::INFINITY;
            let mut p95 = 0.0f64;
            let mut reasons: Vec<String> = Vec::new();
            loop {
                if let Ok(stats) = admin.stats_json().await {
                    if trace {
                        eprintln!(
                            "trace {:6.2} active {} waiting {} admitted {} observed {} estimating {}",
                            start.elapsed().as_secs_f64(),
                            stats["active"],
                            stats["waiting"],
                            stats["total_admitted"],
                            stats["observed_rate"],
                            stats["estimating"]
                        );
                    }
                    if let Some(rate) = stats["effective_rate"].as_f64() {
                        lowest = lowest.min(rate);
                    }
                    if let Some(ms) = stats["adaptive"]["origin_p95_ms"].as_f64() {
                        p95 = p95.max(ms);
                    }
                    if let Some(reason) = stats["rate_reason"].as_str()
                        && !reasons.iter().any(|r| r == reason)
                    {
                        reasons.push(reason.to_owned());
                    }
                }
                let mut text = format!("lowest {lowest}/s; {}", reasons.join(", "));
                if p95 > 0.0 {
                    text.push_str(&format!("; highest origin p95 {p95:.0} ms"));
                }
                *rates.lock().expect("rates") = text;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };
    let deadline = start + case.limit;
    let mut outcomes = Vec::with_capacity(case.visitors);
    let mut failures = Vec::new();
    for (i, task) in tasks.iter_mut().enumerate() {
        match tokio::time::timeout_at(deadline, task).await {
            Ok(Ok(Ok(o))) => outcomes.push((o, (i + 1) % addrs.len())),
            Ok(Ok(Err(e))) => failures.push(format!("{e:#}")),
            Ok(Err(e)) => failures.push(format!("{e}")),
            Err(_) => break,
        }
    }
    let took = start.elapsed();
    sampler.abort();
    let effective_rate = rates.lock().expect("rates").clone();
    if outcomes.len() + failures.len() < case.visitors {
        for t in &tasks {
            t.abort();
        }
        if let Some(h) = &halver {
            h.abort();
        }
        bail!(
            "case {} did not drain within {} s: {} of {} visitors admitted, {} done",
            case.number,
            case.limit.as_secs(),
            tally.admitted.load(Ordering::Relaxed),
            case.visitors,
            tally.done.load(Ordering::Relaxed)
        );
    }
    if let Some(h) = halver {
        h.await??;
    }
    if !failures.is_empty() {
        bail!(
            "case {}: {} visitor(s) failed, e.g. {}",
            case.number,
            failures.len(),
            failures[0]
        );
    }

    let mut within = 0usize;
    let mut errors = Vec::new();
    let mut waits = Vec::new();
    let (mut mins, mut maxs) = (Vec::new(), Vec::new());
    let mut fast_path = 0;
    if case.diagnostics.trace {
        for (o, replica) in &outcomes {
            if let (Some(sh), Some(adm)) = (&o.shown, o.admitted) {
                eprintln!(
                    "visitor replica {replica} shown {:6.2} range {}-{} admitted {:6.2} waited {:5.1} held {}",
                    sh.at.saturating_duration_since(start).as_secs_f64(),
                    sh.min,
                    sh.max,
                    adm.saturating_duration_since(start).as_secs_f64(),
                    sh.waited(adm),
                    sh.held(adm)
                );
            }
        }
    }
    for (o, _) in &outcomes {
        if o.fast_path {
            fast_path += 1;
            continue;
        }
        let (Some(shown), Some(admitted)) = (o.shown, o.admitted) else {
            continue;
        };
        within += usize::from(shown.held(admitted));
        errors.push(shown.off_middle(admitted).abs());
        waits.push(shown.waited(admitted));
        mins.push(shown.min as f64);
        maxs.push(shown.max as f64);
    }
    let waited = errors.len();
    let by_source = {
        let share = |pairs: Vec<(Shown, Instant)>| {
            let n = pairs.len();
            let hit = pairs.iter().filter(|(s, a)| s.held(*a)).count();
            serde_json::json!([n, if n == 0 { 0.0 } else { hit as f64 / n as f64 }])
        };
        let waiting = || outcomes.iter().map(|(o, _)| o).filter(|o| !o.fast_path);
        let first = |from_stream: bool| {
            waiting()
                .filter_map(|o| Some((o.shown?, o.admitted?, o.shown == o.stream_shown)))
                .filter(|&(_, _, s)| s == from_stream)
                .map(|(s, a, _)| (s, a))
                .collect::<Vec<_>>()
        };
        serde_json::json!({
            "page": share(first(false)),
            "stream": share(first(true)),
            "stream_first": share(
                waiting()
                    .filter_map(|o| Some((o.stream_shown?, o.admitted?)))
                    .collect()
            ),
            // Per replica holding the stream: [visitors, share, median of waited − the
            // middle of their first range, seconds (negative: sooner than promised)].
            "by_stream_replica": (0..addrs.len()).map(|r| {
                let mut n = 0;
                let mut hit = 0;
                let mut bias = Vec::new();
                for (o, _) in outcomes.iter().filter(|(o, at)| *at == r && !o.fast_path) {
                    let (Some(shown), Some(admitted)) = (o.shown, o.admitted) else {
                        continue;
                    };
                    n += 1;
                    hit += usize::from(shown.held(admitted));
                    bias.push(shown.off_middle(admitted));
                }
                let share = if n == 0 { 0.0 } else { hit as f64 / n as f64 };
                serde_json::json!([n, share, median(bias)])
            }).collect::<Vec<_>>(),
        })
    };
    let mut times: Vec<Instant> = outcomes
        .iter()
        .flat_map(|(o, _)| o.page_times.iter().copied())
        .collect();
    times.sort();
    let origin_pages = times.len();
    let origin_pages_per_sec = match (times.first(), times.last()) {
        (Some(a), Some(b)) if b > a => (origin_pages - 1) as f64 / (*b - *a).as_secs_f64(),
        _ => 0.0,
    };
    // With several replicas each ledger counts only the visitors it showed a range to:
    // the first one's is read as it stands.
    let counted = if case.replicas > 1 { 0 } else { waited };
    let product = product_eta(ant.addr, counted).await?;
    let mut product_by_replica = vec![product.clone()];
    for r in &replicas[1..] {
        product_by_replica.push(product_eta(r.addr, 0).await?);
    }
    Ok(CaseResult {
        case: case.clone(),
        waited,
        fast_path,
        within_range: if waited == 0 {
            0.0
        } else {
            within as f64 / waited as f64
        },
        median_error_secs: median(errors),
        median_wait_secs: median(waits),
        median_range: (median(mins) as u64, median(maxs) as u64),
        status_5xx: tally.status_5xx.load(Ordering::Relaxed),
        sent_back: tally.sent_back.load(Ordering::Relaxed),
        stream_drops: tally.stream_drops.load(Ordering::Relaxed),
        origin_pages_per_sec,
        origin_pages,
        product,
        product_by_replica,
        by_source,
        took,
        effective_rate,
    })
}

/// The product's `eta` from room stats, once it counts at least `waited` admissions or
/// after 10 s (its ledger may see a visitor admitted later than the visitor did).
async fn product_eta(addr: SocketAddr, waited: usize) -> anyhow::Result<serde_json::Value> {
    let mut admin = Admin::connect(addr).await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stats = admin.stats_json().await?;
        let eta = stats["eta"].clone();
        if eta["admitted"].as_u64().unwrap_or(0) as usize >= waited || Instant::now() > deadline {
            return Ok(eta);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The compact table: one line per case.
pub fn table(results: &[CaseResult]) -> String {
    let mut out = String::from(
        "| case | visitors (waited / let straight in) | within range | median error | median wait (median range) | product's within range (admitted) | product's median error | 5xx | origin pages/s | effective rate (reasons) |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in results {
        let p = &r.product;
        let product_within = p["within_range"]
            .as_f64()
            .map_or("—".into(), |w| format!("{w:.2}"));
        let product_error = p["median_error_secs"]
            .as_f64()
            .map_or("—".into(), |e| format!("{e:.1} s"));
        out.push_str(&format!(
            "| {}. {} | {} ({} / {}) | {:.2} | {:.1} s | {:.1} s ({}–{} s) | {} ({}) | {} | {} | {:.1} | {} |\n",
            r.case.number,
            r.case.name,
            r.case.visitors,
            r.waited,
            r.fast_path,
            r.within_range,
            r.median_error_secs,
            r.median_wait_secs,
            r.median_range.0,
            r.median_range.1,
            product_within,
            p["admitted"].as_u64().unwrap_or(0),
            product_error,
            r.status_5xx,
            r.origin_pages_per_sec,
            r.effective_rate,
        ));
    }
    out
}

/// The results as JSON (for the test, and anyone who wants them).
pub fn to_json(results: &[CaseResult]) -> serde_json::Value {
    serde_json::Value::Array(
        results
            .iter()
            .map(|r| {
                serde_json::json!({
                    "case": r.case.number,
                    "replicas": r.case.replicas,
                    "name": r.case.name,
                    "config": r.case.config_text(),
                    "visitors": r.case.visitors,
                    "waited": r.waited,
                    "fast_path": r.fast_path,
                    "within_range": r.within_range,
                    "median_error_secs": r.median_error_secs,
                    "median_wait_secs": r.median_wait_secs,
                    "status_5xx": r.status_5xx,
                    "sent_back": r.sent_back,
                    "stream_drops": r.stream_drops,
                    "origin_pages": r.origin_pages,
                    "origin_pages_per_sec": r.origin_pages_per_sec,
                    "product_eta": r.product,
                    "product_eta_by_replica": r.product_by_replica,
                    "within_range_by_source": r.by_source,
                    "took_secs": r.took.as_secs_f64(),
                    "effective_rate": r.effective_rate,
                })
            })
            .collect(),
    )
}

/// Report rows, one per case (the crate's table style).
pub fn rows(results: &[CaseResult]) -> Vec<Row> {
    results
        .iter()
        .map(|r| {
            let p = &r.product;
            let met = r.within_range >= TARGET && r.status_5xx == 0;
            Row {
                ours: format!(
                    "{:.2} of {} waited (median error {:.1} s; median wait {:.1} s, range {}–{} s); product's ledger {} of {} (median error {}); 5xx {}; origin {:.1} pages/s; effective rate {}; {:.0} s",
                    r.within_range,
                    r.waited,
                    r.median_error_secs,
                    r.median_wait_secs,
                    r.median_range.0,
                    r.median_range.1,
                    p["within_range"]
                        .as_f64()
                        .map_or("—".into(), |w| format!("{w:.2}")),
                    p["admitted"].as_u64().unwrap_or(0),
                    p["median_error_secs"]
                        .as_f64()
                        .map_or("—".into(), |e| format!("{e:.1} s")),
                    r.status_5xx,
                    r.origin_pages_per_sec,
                    r.effective_rate,
                    r.took.as_secs_f64(),
                ),
                ..Row::new(
                    "site-bound",
                    format!(
                        "case {}, {}: admitted within the first range shown ({})",
                        r.case.number,
                        r.case.name,
                        r.case.config_text()
                    ),
                    r.within_range,
                    "",
                )
                .target("≥ 0.90 and no 5xx", met)
                .why(
                    "the range shown is position ÷ the observed admission rate; when the \
                     site, not the rate, is the limit, that rate is not the one the line \
                     moves at (docs/fairness.md, \"Honest ETA\")",
                )
            }
        })
        .collect()
}

/// Every case asked for (`only`: their numbers; empty: all five), one after another, each
/// with `replicas` anteroom replicas (more than one: on Redis).
pub async fn site_bound(
    small: bool,
    only: &[u8],
    visitors: Option<usize>,
    replicas: usize,
    diagnostics: &Diagnostics,
) -> anyhow::Result<Vec<CaseResult>> {
    let mut results = Vec::new();
    for mut case in Case::all(small) {
        if !only.is_empty() && !only.contains(&case.number) {
            continue;
        }
        if let Some(n) = visitors {
            case.visitors = n;
        }
        case.replicas = replicas.max(1);
        case.diagnostics = diagnostics.clone();
        let r = run_case(&case).await?;
        say(format!(
            "site-bound case {}: within {:.2} of {}, median error {:.1} s, 5xx {}, product {}",
            case.number,
            r.within_range,
            r.waited,
            r.median_error_secs,
            r.status_5xx,
            serde_json::Value::from(r.product_by_replica.clone())
        ));
        results.push(r);
    }
    if results.is_empty() {
        bail!("no such case: {only:?} (1 to 5)");
    }
    Ok(results)
}
