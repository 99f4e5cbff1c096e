//! Single-thread costs of pieces of the request path, called directly (no HTTP): what an
//! admission-token signature, its verification and the cached header cost, and
//! what matching a path against a realistic `ban_paths` list costs, with the two patterns
//! a naive glob matcher would take exponential time on. These used to be timed assertions
//! in unit tests; speed is measured here, the tests assert behaviour.
//!
//! Thread CPU time (Linux schedstat), so other work sharing the cores hardly moves them.

use std::hint::black_box;

use anteroom::fairness::admission_token::{AdmissionClaims, AdmissionKey, AdmissionSigner};
use anteroom::glob::{Glob, GlobSet};
use anteroom::queue::VisitorId;

use crate::report::Row;

/// CPU time this thread has run, in ns.
fn thread_cpu_ns() -> anyhow::Result<u128> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat")?;
    Ok(stat
        .split_whitespace()
        .next()
        .ok_or_else(|| anyhow::anyhow!("empty schedstat"))?
        .parse()?)
}

/// ns of thread CPU time per call of `f`, over `n` calls (choose `n` so they take at least
/// a few hundred milliseconds).
fn per_call(n: u32, mut f: impl FnMut(u32)) -> anyhow::Result<f64> {
    let started = thread_cpu_ns()?;
    for i in 0..n {
        f(i);
    }
    Ok((thread_cpu_ns()? - started) as f64 / f64::from(n))
}

pub fn micro(smoke: bool) -> anyhow::Result<Vec<Row>> {
    let scale = if smoke { 10 } else { 1 };
    let mut rows = Vec::new();

    let key = AdmissionKey::generate()?;
    let claims = |admitted_at: u64| AdmissionClaims {
        kid: String::new(),
        room: "main".to_owned(),
        visitor_ref: "7KQ2M9XD".to_owned(),
        admitted_at,
        exp: 1_700_000_600,
    };
    let sign = per_call(20_000 / scale, |i| {
        black_box(key.sign(&claims(1_700_000_000 + u64::from(i))));
    })?;
    let token = key.sign(&claims(1_700_000_000));
    let verify = per_call(20_000 / scale, |_| {
        black_box(key.public().verify(&token, 0).ok());
    })?;
    let signer = AdmissionSigner::new(key, std::time::Duration::from_secs(600), 10_000);
    let visitor = VisitorId([9; 16]);
    signer.header_for("main", visitor, 1, 1);
    let cached = per_call(2_000_000 / scale, |_| {
        black_box(signer.header_for("main", visitor, 1, 2));
    })?;
    rows.push(Row::new(
        "micro",
        "admission token: sign",
        sign / 1000.0,
        "µs",
    ));
    rows.push(Row::new(
        "micro",
        "admission token: verify",
        verify / 1000.0,
        "µs",
    ));
    rows.push(Row::new(
        "micro",
        "admission token: cached header",
        cached,
        "ns",
    ));

    let set = GlobSet::new(&[
        "/.env",
        "/.git/**",
        "/wp-login.php",
        "/wp-admin/**",
        "*.php",
        "/cgi-bin/**",
        "/.aws/**",
        "/config.json",
        "/**/.DS_Store",
        "/phpmyadmin*",
    ])?;
    for (label, path) in [
        ("a shop path", "/shop/products/sneaker-42?color=red"),
        ("a banned path", "/.git/config"),
    ] {
        let per = per_call(2_000_000 / scale, |_| {
            black_box(black_box(&set).is_match(black_box(path)));
        })?;
        rows.push(Row::new(
            "micro",
            format!("ban_paths (10 globs) against {label}"),
            per,
            "ns",
        ));
    }
    let stars = Glob::parse(&format!("/{}b", "*a".repeat(30)))?;
    let long = format!("/{}", "a".repeat(1000));
    let deep = Glob::parse("/**/a/**/a/**/a/**/b")?;
    let nested = "/a".repeat(500);
    // Enough calls to span many scheduler ticks: schedstat's CPU time advances at ticks
    // and switches, so a few milliseconds' worth can read as nothing.
    let pathological = per_call(5_000 / scale, |_| {
        black_box(stars.matches(black_box(&long)));
        black_box(deep.matches(black_box(&nested)));
    })?;
    rows.push(Row::new(
        "micro",
        "two pathological globs (30 stars on 1,000 bytes; 4 globstars on 500 segments)",
        pathological / 1000.0,
        "µs",
    ));
    Ok(rows)
}
