//! The admission pass's cost by the depth of the line, on each store, measured in
//! process (no HTTP).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anteroom::clock::Clock;
use anteroom::queue::{
    MemoryStore, QueueStore, RedisStore, Resolution, RoomPolicy, RoomSettings, SettingsPatch,
    VisitorId,
};
use anyhow::bail;
use futures_util::StreamExt;

use crate::report::{Row, fmt_value};
use crate::scenarios::{Store, say};

/// Admission-pass time at several depths, calling `admit_pass` directly: each pass admits
/// 100 (rate 10,000/s, the store clock advanced 10 ms per pass), and the line is topped up
/// after each pass (untimed) so the depth stays put.
pub async fn pass(store: Store, depths: &[u64], passes: usize) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    let mut p50s = Vec::new();
    let redis = store.start();
    for &depth in depths {
        say(format!("pass: {} store at depth {depth}", store.name()));
        let times = match &redis {
            None => tokio::task::spawn_blocking(move || pass_memory(depth, passes)).await??,
            Some(r) => pass_redis(&r.url(), depth, passes).await?,
        };
        // Nanoseconds, 1 ns to 60 s.
        let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)
            .expect("histogram bounds");
        for t in &times {
            h.saturating_record(*t);
        }
        // Timed in nanoseconds: a pass is a few microseconds, and whole microseconds made
        // the ratio step by a sixth.
        let p50 = h.value_at_quantile(0.5) as f64 / 1e6;
        let p99 = h.value_at_quantile(0.99) as f64 / 1e6;
        p50s.push(p50);
        rows.push(Row {
            ours: format!("{p50:.3} / {p99:.3} ms"),
            ..Row::new(
                "pass",
                format!(
                    "pass p50 / p99 at depth {}, {} (100 admitted per pass)",
                    fmt_value(depth as f64, ""),
                    store.name()
                ),
                p50,
                "",
            )
        });
    }
    if p50s.len() >= 2 {
        let ratio = p50s[p50s.len() - 1] / p50s[0];
        rows.push(
            Row::new(
                "pass",
                format!(
                    "pass p50 at {} ÷ at {}, {}",
                    fmt_value(*depths.last().unwrap() as f64, ""),
                    fmt_value(depths[0] as f64, ""),
                    store.name()
                ),
                ratio,
                "",
            )
            .target("flat (≤ 1.5)", ratio <= 1.5)
            .why(
                "embedded: the heads are taken in one batch from the slot chunks and their \
                  index entries left stale, swept later in one walk, so a pass touches no \
                  memory that grows with the line; Redis: the pass reads the first chunk and \
                  the Fenwick tree of chunk counts",
            ),
        );
    }
    Ok(rows)
}

pub(crate) fn room_seed() -> RoomSettings {
    RoomSettings {
        rate: 10_000.0,
        max_active: 1_000_000_000,
        session_ttl: Duration::from_secs(3_600),
        abandon_after: Duration::from_secs(36_000),
        paused: true,
        mode: anteroom::queue::Mode::Queue,
        changes: Default::default(),
    }
}

fn pass_memory(depth: u64, passes: usize) -> anyhow::Result<Vec<u64>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()?;
    rt.block_on(async {
        let store = MemoryStore::in_memory(Clock::system());
        store
            .open_room("main", &room_seed(), &RoomPolicy::default(), true)
            .await?;
        // A store keeps `paused` as an incident control, not a seed value: set it.
        store
            .update_settings("main", &SettingsPatch::pause())
            .await?;
        let join = async |n: u64| -> anyhow::Result<()> {
            for _ in 0..n {
                if let Resolution::Admitted { .. } = store
                    .resolve("main", VisitorId::random(), bench_client())
                    .await?
                {
                    bail!("admitted while filling");
                }
            }
            Ok(())
        };
        join(depth).await?;
        store
            .update_settings("main", &SettingsPatch::resume())
            .await?;
        // Spend the initial burst so every timed pass admits one refill's worth.
        for _ in 0..1_000 {
            tokio::time::advance(Duration::from_millis(10)).await;
            let warm = store.admit_pass("main").await?.admitted.len() as u64;
            store
                .update_settings("main", &SettingsPatch::pause())
                .await?;
            join(warm).await?;
            store
                .update_settings("main", &SettingsPatch::resume())
                .await?;
            if warm <= 100 {
                break;
            }
        }
        let mut times = Vec::with_capacity(passes);
        for _ in 0..passes {
            tokio::time::advance(Duration::from_millis(10)).await;
            let t = Instant::now();
            let admitted = store.admit_pass("main").await?.admitted.len() as u64;
            times.push(t.elapsed().as_nanos() as u64);
            store
                .update_settings("main", &SettingsPatch::pause())
                .await?;
            join(admitted).await?;
            store
                .update_settings("main", &SettingsPatch::resume())
                .await?;
        }
        Ok(times)
    })
}

async fn pass_redis(url: &str, depth: u64, passes: usize) -> anyhow::Result<Vec<u64>> {
    let store = Arc::new(RedisStore::connect(&[url]).await?);
    let room = format!("d{depth}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as u64;
    store.freeze_clock_for_tests(now);
    store
        .open_room(&room, &room_seed(), &RoomPolicy::default(), true)
        .await?;
    // A store keeps `paused` as an incident control, not a seed value: set it.
    store
        .update_settings(&room, &SettingsPatch::pause())
        .await?;
    let join = async |n: u64| -> anyhow::Result<()> {
        let results: Vec<_> = futures_util::stream::iter(0..n)
            .map(|_| {
                let store = store.clone();
                let room = room.clone();
                async move {
                    store
                        .resolve(&room, VisitorId::random(), bench_client())
                        .await
                }
            })
            .buffer_unordered(256)
            .collect()
            .await;
        for r in results {
            if let Resolution::Admitted { .. } = r? {
                bail!("admitted while filling");
            }
        }
        Ok(())
    };
    join(depth).await?;
    store
        .update_settings(&room, &SettingsPatch::resume())
        .await?;
    for _ in 0..1_000 {
        store.advance_clock_for_tests(Duration::from_millis(10));
        let warm = store.admit_pass(&room).await?.admitted.len() as u64;
        store
            .update_settings(&room, &SettingsPatch::pause())
            .await?;
        join(warm).await?;
        store
            .update_settings(&room, &SettingsPatch::resume())
            .await?;
        if warm <= 100 {
            break;
        }
    }
    let mut times = Vec::with_capacity(passes);
    for _ in 0..passes {
        store.advance_clock_for_tests(Duration::from_millis(10));
        let t = Instant::now();
        let admitted = store.admit_pass(&room).await?.admitted.len() as u64;
        times.push(t.elapsed().as_nanos() as u64);
        store
            .update_settings(&room, &SettingsPatch::pause())
            .await?;
        join(admitted).await?;
        store
            .update_settings(&room, &SettingsPatch::resume())
            .await?;
    }
    Ok(times)
}

/// The one client address the pass benchmarks join from (their rooms set no join limit).
pub(crate) fn bench_client() -> anteroom::queue::ClientKey {
    anteroom::queue::ClientKey::from(std::net::Ipv4Addr::LOCALHOST)
}
