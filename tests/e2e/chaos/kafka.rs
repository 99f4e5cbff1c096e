//! The Kafka broker (tansu, memory storage) killed for longer than the producer's message
//! timeout, then started again on the same address.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::{percentile, visitor_of};
use crate::common::kafka::{Broker, TOPIC, read_events};
use crate::common::{Origin, client, config, start, visitor_cookie};

/// The `visitor_joined` events on the topic, until all of `want` are seen or `limit`.
fn joined_visitors(
    broker: SocketAddr,
    want: &std::collections::HashSet<String>,
    limit: Duration,
) -> Vec<String> {
    let joined = |body: &serde_json::Value| body["type"] == "visitor_joined";
    read_events(broker, limit, |bodies| {
        want.iter().all(|v| {
            bodies
                .iter()
                .any(|b| joined(b) && b["visitor_id"].as_str() == Some(v.as_str()))
        })
    })
    .into_iter()
    .filter(|(_, body)| joined(body))
    .filter_map(|(_, body)| body["visitor_id"].as_str().map(str::to_owned))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_killed_and_restarted_never_slows_a_join_and_events_resume() {
    let _turn = super::ONE_AT_A_TIME.lock().await;
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let broker = Broker::start_at(addr);
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(
        &origin.url(),
        dir.path(),
        // Every join from 127.0.0.1: the per-client places share is off too.
        "    rate: 0.01\n    max_active: 100\n    join_limit_per_ip: 0\n    max_places_per_client: 0",
    );
    config.kafka.brokers = vec![addr.to_string()];
    config.kafka.topic = TOPIC.to_owned();
    let ar = start(&config).await;
    let sink = ar.app.admission.events().clone();
    let http = client();
    let url = format!("http://{}/", ar.addr);
    // Joins at ~20/s; each returns its position, which must go up by one every time.
    let mut position = 0u64;
    let mut requests = 0u64;
    let mut join = async |phase: &mut Vec<Duration>| -> String {
        let t = Instant::now();
        let response = http
            .get(&url)
            .header("accept", "application/json")
            .send()
            .await
            .unwrap();
        phase.push(t.elapsed());
        requests += 1;
        let cookie = visitor_cookie(&response).unwrap();
        let body: serde_json::Value = response.json().await.unwrap();
        if let Some(p) = body["position"].as_u64() {
            assert_eq!(p, position + 1, "joins go on in order");
            position = p;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        cookie
    };
    let mut before = Vec::new();
    while before.len() < 60 {
        join(&mut before).await;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while sink.published() < 60 {
        assert!(
            Instant::now() < deadline,
            "events published before the kill"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(broker); // SIGKILL
    let killed_at = Instant::now();
    // Longer than the producer's message timeout (10 s): what was queued is dropped.
    let mut during = Vec::new();
    while killed_at.elapsed() < Duration::from_secs(12) {
        join(&mut during).await;
    }
    let dropped_at_restart = sink.dropped();
    let _broker = Broker::start_at(addr);
    let restarted_at = Instant::now();
    let mut after = Vec::new();
    let mut after_ids = Vec::new();
    while after.len() < 40 {
        after_ids.push(visitor_of(&join(&mut after).await).to_hex());
    }
    let want: std::collections::HashSet<String> = after_ids.iter().cloned().collect();
    let wanted = want.clone();
    let read = tokio::task::spawn_blocking(move || {
        joined_visitors(addr, &wanted, Duration::from_secs(25))
    });
    // Every event is accounted for: acknowledged or counted as dropped.
    let deadline = Instant::now() + Duration::from_secs(30);
    while sink.published() + sink.dropped() < requests {
        assert!(
            Instant::now() < deadline,
            "events unaccounted for: {} published + {} dropped of {requests}",
            sink.published(),
            sink.dropped()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let seen = read.await.unwrap();
    let resumed = seen.iter().filter(|v| want.contains(*v)).count();
    let (b50, b99) = (
        percentile(before.clone(), 0.5),
        percentile(before.clone(), 0.99),
    );
    let (d50, d99) = (
        percentile(during.clone(), 0.5),
        percentile(during.clone(), 0.99),
    );
    let (a50, a99) = (
        percentile(after.clone(), 0.5),
        percentile(after.clone(), 0.99),
    );
    println!(
        "kafka broker SIGKILL: {} joins before (p50 {b50:?}, p99 {b99:?}), {} during the \
         12 s outage (p50 {d50:?}, p99 {d99:?}, max {:?}), {} after the restart (p50 \
         {a50:?}, p99 {a99:?}); events: {requests} made, {} published, {} dropped \
         ({dropped_at_restart} of them counted by the time of the restart); {resumed} of {} joins after the restart \
         read back from the new broker (within {:?})",
        before.len(),
        during.len(),
        during.iter().max().unwrap(),
        after.len(),
        sink.published(),
        sink.dropped(),
        after_ids.len(),
        restarted_at.elapsed(),
    );
    assert_eq!(sink.published() + sink.dropped(), requests);
    assert!(
        sink.dropped() > 0,
        "the outage outlived the message timeout"
    );
    assert_eq!(resumed, after_ids.len(), "events resume after the restart");
    // Joins keep their latency: the broker is off the request path.
    assert!(
        d99 <= b99 * 3 + Duration::from_millis(100),
        "join p99 {d99:?} during the outage vs {b99:?} before"
    );
    assert!(during.len() > 100);
    ar.shutdown().await.unwrap();
}
