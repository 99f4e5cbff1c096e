//! What reaping a flood of abandoned places costs Redis: `depth` waiters join at one
//! moment and never come back, the store's clock moves past `abandon_after`, and admission
//! passes run until the line is empty. Each pass's time (the script runs in one piece, so
//! this is close to how long it holds Redis: timed from here, it includes the round trip
//! and reading the reaped ids) and what it reaped are reported: what sizes the Redis
//! store's reap budget (`queue::REAP_BUDGET`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anteroom::queue::{QueueStore, RedisStore, Resolution, RoomPolicy, SettingsPatch, VisitorId};
use anyhow::bail;
use futures_util::StreamExt;

use crate::report::Row;
use crate::scenarios::{Store, say};

/// Fills a paused room with `depth` waiters, lets every one of them go quiet for longer
/// than `abandon_after`, and times the passes that reap them.
pub async fn reap(depth: u64) -> anyhow::Result<Vec<Row>> {
    let redis = Store::Redis.start().expect("a Redis for the Redis store");
    let store = Arc::new(RedisStore::connect(&[redis.url().as_str()]).await?);
    let room = "reap";
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as u64;
    store.freeze_clock_for_tests(now);
    let seed = anteroom::queue::RoomSettings {
        abandon_after: Duration::from_secs(10),
        ..crate::pass::room_seed()
    };
    store
        .open_room(room, &seed, &RoomPolicy::default(), true)
        .await?;
    store.update_settings(room, &SettingsPatch::pause()).await?;
    say(format!("reap: {depth} waiters join"));
    let redis_pid = redis.pid().expect("a Redis started here");
    let redis_cpu = || crate::infra::threads_cpu_secs(redis_pid);
    let before_joins = redis_cpu()?;
    let joined: Vec<_> = futures_util::stream::iter(0..depth)
        .map(|_| {
            let store = store.clone();
            async move {
                store
                    .resolve(room, VisitorId::random(), crate::pass::bench_client())
                    .await
            }
        })
        .buffer_unordered(256)
        .collect()
        .await;
    for r in joined {
        if let Resolution::Admitted { .. } = r? {
            bail!("admitted while filling");
        }
    }
    let join_us = (redis_cpu()? - before_joins) * 1e6 / depth as f64;
    store.advance_clock_for_tests(Duration::from_secs(11));
    let before_reaps = redis_cpu()?;
    let mut passes = Vec::new();
    let mut reaped = 0u64;
    while reaped < depth {
        store.advance_clock_for_tests(Duration::from_millis(250));
        let started = Instant::now();
        let report = store.admit_pass(room).await?;
        let took = started.elapsed();
        let n = report.abandoned.len() as u64;
        say(format!(
            "reap: pass {} reaped {n} in {took:.2?}",
            passes.len() + 1
        ));
        if n == 0 {
            bail!("a pass reaped nothing with {} still due", depth - reaped);
        }
        reaped += n;
        passes.push((n, took));
    }
    let reap_us = (redis_cpu()? - before_reaps) * 1e6 / reaped as f64;
    let longest = passes.iter().map(|(_, t)| *t).max().unwrap_or_default();
    let per_waiter_us =
        passes.iter().map(|(_, t)| t.as_secs_f64()).sum::<f64>() * 1e6 / reaped as f64;
    Ok(vec![
        Row::new(
            "reap",
            format!("passes to reap {depth} abandoned places, Redis (a pass every 250 ms)"),
            passes.len() as f64,
            "",
        ),
        Row::new(
            "reap",
            "the longest of those passes (Redis is held for it)".to_owned(),
            longest.as_secs_f64() * 1e3,
            " ms",
        ),
        Row::new(
            "reap",
            "pass time per place reaped".to_owned(),
            per_waiter_us,
            " µs",
        ),
        Row {
            ours: format!("{join_us:.1} / {reap_us:.1} µs"),
            ..Row::new(
                "reap",
                "Redis CPU per join, and per place reaped",
                join_us,
                " µs",
            )
        },
    ])
}
