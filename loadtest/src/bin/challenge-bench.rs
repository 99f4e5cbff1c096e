//! `challenge-bench`: the native side of the proof-of-work measurement (docs/challenge.md).
//!
//! Solves the same challenges as the browser harness (`web/bench/challenge-bench.mjs`) with
//! `threads` OS threads, as an attacker with a native solver would, and times the server's
//! verification of one solution. Prints one JSON object per line, which the browser
//! harness (or a person) reads.
//!
//! The puzzle, shared by both sides: challenge `i` of a run has the 16-byte prefix
//! `SHA-256("anteroom-bench/<function>/<difficulty>/<i>")[..16]`; a solution is the
//! smallest counter (u64, big-endian after the prefix) whose hash has at least
//! `difficulty` leading zero bits. The hash of `prefix || counter` is SHA-256, or Argon2id
//! / scrypt with the prefix as the salt.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use clap::{Parser, ValueEnum};
use sha2::{Digest, Sha256};

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum Function {
    Sha256,
    Argon2id,
    Scrypt,
}

impl Function {
    fn name(self) -> &'static str {
        match self {
            Function::Sha256 => "sha256",
            Function::Argon2id => "argon2id",
            Function::Scrypt => "scrypt",
        }
    }
}

#[derive(Parser, Debug)]
#[command(
    name = "challenge-bench",
    about = "native proof-of-work solver and verify cost"
)]
struct Cli {
    /// The work function.
    #[arg(long, value_enum)]
    function: Function,
    /// Leading zero bits a solution's hash must have (one or more, comma separated).
    #[arg(long, value_delimiter = ',')]
    difficulty: Vec<u32>,
    /// Challenges per difficulty.
    #[arg(long, default_value_t = 20)]
    count: u32,
    /// Solver threads (the attacker's cores).
    #[arg(long, default_value_t = 2)]
    threads: u32,
    /// Argon2id memory in KiB.
    #[arg(long, default_value_t = 1024)]
    argon2_m: u32,
    /// Argon2id passes.
    #[arg(long, default_value_t = 1)]
    argon2_t: u32,
    /// scrypt log2(N) (r = 8, p = 1).
    #[arg(long, default_value_t = 10)]
    scrypt_log_n: u8,
    /// Verifications timed for the verify cost (0: none).
    #[arg(long, default_value_t = 2000)]
    verifies: u32,
}

/// The work function with its parameters, ready to hash `prefix || counter`.
#[derive(Clone)]
enum Hasher {
    Sha256,
    Argon2(argon2::Argon2<'static>),
    Scrypt(scrypt::Params),
}

impl Hasher {
    fn new(cli: &Cli) -> Hasher {
        match cli.function {
            Function::Sha256 => Hasher::Sha256,
            Function::Argon2id => Hasher::Argon2(argon2::Argon2::new(
                argon2::Algorithm::Argon2id,
                argon2::Version::V0x13,
                argon2::Params::new(cli.argon2_m, cli.argon2_t, 1, Some(32))
                    .expect("argon2 params"),
            )),
            Function::Scrypt => {
                Hasher::Scrypt(scrypt::Params::new(cli.scrypt_log_n, 8, 1).expect("scrypt params"))
            }
        }
    }

    /// Hashes `prefix || counter` into `out`. `mem` is the reusable Argon2 block buffer.
    fn hash(
        &self,
        prefix: &[u8; 16],
        counter: u64,
        mem: &mut Vec<argon2::Block>,
        out: &mut [u8; 32],
    ) {
        let mut input = [0u8; 24];
        input[..16].copy_from_slice(prefix);
        input[16..].copy_from_slice(&counter.to_be_bytes());
        match self {
            Hasher::Sha256 => out.copy_from_slice(&Sha256::digest(input)),
            Hasher::Argon2(a) => {
                let blocks = a.params().block_count();
                if mem.len() != blocks {
                    mem.resize(blocks, argon2::Block::default());
                }
                a.hash_password_into_with_memory(&input, prefix, out, &mut mem[..])
                    .expect("argon2");
            }
            Hasher::Scrypt(p) => scrypt::scrypt(&input, prefix, p, out).expect("scrypt"),
        }
    }
}

fn leading_zero_bits(h: &[u8]) -> u32 {
    let mut n = 0;
    for b in h {
        if *b == 0 {
            n += 8;
        } else {
            return n + b.leading_zeros();
        }
    }
    n
}

fn prefix(function: Function, difficulty: u32, i: u32) -> [u8; 16] {
    let d = Sha256::digest(format!(
        "anteroom-bench/{}/{difficulty}/{i}",
        function.name()
    ));
    let mut p = [0u8; 16];
    p.copy_from_slice(&d[..16]);
    p
}

/// Solves one challenge with `threads` threads, each taking every `threads`-th counter.
/// Returns the counter found and the hashes tried.
fn solve(h: &Hasher, p: [u8; 16], difficulty: u32, threads: u32) -> (u64, u64) {
    let found = Arc::new(AtomicBool::new(false));
    let best = Arc::new(AtomicU64::new(u64::MAX));
    let tried = Arc::new(AtomicU64::new(0));
    std::thread::scope(|s| {
        for t in 0..threads {
            let (found, best, tried, h) = (found.clone(), best.clone(), tried.clone(), h.clone());
            s.spawn(move || {
                let mut mem = Vec::new();
                let mut out = [0u8; 32];
                let mut c = u64::from(t);
                let mut n = 0u64;
                while !found.load(Ordering::Relaxed) {
                    h.hash(&p, c, &mut mem, &mut out);
                    n += 1;
                    if leading_zero_bits(&out) >= difficulty {
                        best.fetch_min(c, Ordering::Relaxed);
                        found.store(true, Ordering::Relaxed);
                    }
                    c += u64::from(threads);
                }
                tried.fetch_add(n, Ordering::Relaxed);
            });
        }
    });
    (best.load(Ordering::Relaxed), tried.load(Ordering::Relaxed))
}

fn pct(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i]
}

fn main() {
    let cli = Cli::parse();
    let h = Hasher::new(&cli);
    let params = match cli.function {
        Function::Sha256 => String::new(),
        Function::Argon2id => format!("m={}KiB,t={},p=1", cli.argon2_m, cli.argon2_t),
        Function::Scrypt => format!("N=2^{},r=8,p=1", cli.scrypt_log_n),
    };
    for &d in &cli.difficulty {
        let mut ms = Vec::new();
        let mut counters = Vec::new();
        let mut hashes = 0u64;
        for i in 0..cli.count {
            let p = prefix(cli.function, d, i);
            let t0 = Instant::now();
            let (c, n) = solve(&h, p, d, cli.threads);
            ms.push(t0.elapsed().as_secs_f64() * 1e3);
            counters.push(c);
            hashes += n;
        }
        let total_ms: f64 = ms.iter().sum();
        let mut sorted = ms.clone();
        sorted.sort_by(f64::total_cmp);
        println!(
            "{}",
            serde_json::json!({
                "side": "native", "function": cli.function.name(), "params": params,
                "difficulty": d, "threads": cli.threads, "count": cli.count,
                "p50_ms": pct(&sorted, 0.5), "p95_ms": pct(&sorted, 0.95),
                "mean_ms": total_ms / f64::from(cli.count),
                "hashes_per_s": hashes as f64 / (total_ms / 1e3),
                "counters": counters,
            })
        );
    }
    if cli.verifies > 0 && cli.function == Function::Sha256 {
        // The whole check of anteroom's challenge module, as a join will run it: parse,
        // HMAC of the text, HMAC of the client tag, one SHA-256 (the store's spent-id
        // check is not included).
        use anteroom::challenge::{ChallengeKey, Expected, solve as solve_one};
        let key = ChallengeKey::new(b"challenge-bench secret of 32 bytes or more");
        let client = [7u8; 16];
        let now_ms = 1_700_000_000_000;
        let ch = key.issue("main", &client, 12, now_ms, [9u8; 16]);
        let counter = solve_one(&ch.nonce, ch.bits);
        let expected = Expected {
            room: "main",
            client,
            now_ms,
            ttl: std::time::Duration::from_secs(120),
        };
        let t0 = Instant::now();
        let mut ok = 0u32;
        for _ in 0..cli.verifies {
            ok += u32::from(
                key.verify(std::hint::black_box(&ch.text), counter, &expected)
                    .is_ok(),
            );
        }
        let verify_us = t0.elapsed().as_secs_f64() * 1e6 / f64::from(cli.verifies);
        let t0 = Instant::now();
        for i in 0..cli.verifies {
            std::hint::black_box(key.issue("main", &client, 17, now_ms, [i as u8; 16]));
        }
        let issue_us = t0.elapsed().as_secs_f64() * 1e6 / f64::from(cli.verifies);
        println!(
            "{}",
            serde_json::json!({
                "side": "module", "function": "sha256", "params": "anteroom::challenge",
                "verify_us": verify_us, "issue_us": issue_us, "verifies": cli.verifies, "ok": ok,
            })
        );
    }
    if cli.verifies > 0 {
        // The server's side: one hash of the submitted counter and the zero-bit check, on
        // one thread, over a spread of challenges.
        let mut mem = Vec::new();
        let mut out = [0u8; 32];
        let mut ok = 0u32;
        let t0 = Instant::now();
        for i in 0..cli.verifies {
            let p = prefix(cli.function, 0, i);
            h.hash(&p, u64::from(i), &mut mem, &mut out);
            ok += u32::from(leading_zero_bits(&out) >= 1);
        }
        let us = t0.elapsed().as_secs_f64() * 1e6 / f64::from(cli.verifies);
        println!(
            "{}",
            serde_json::json!({
                "side": "verify", "function": cli.function.name(), "params": params,
                "verify_us": us, "verifies": cli.verifies, "ok": ok,
            })
        );
    }
}
