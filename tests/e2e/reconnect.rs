//! End to end: Redis (one node, or one node of a three-node Cluster) SIGKILLed under three
//! replicas of the real binary, each with two serving workers, and started again on the
//! same port. From the moment it answers again, no request on any worker of any replica is
//! answered `stalled`: every Redis connection (each worker's own and the shared one) is
//! mended when Redis is back, or repeats its call once (`queue::redis_client`). Twice per
//! test: a quiet outage (nobody asks during it, so every worker's connection is left broken
//! until Redis is back, as on a replica nobody visited; the outage is seen through each
//! replica's `anteroom_store_up`), then a busy one (visitors on every worker meet it).
//! Newcomers and visitors waiting in line (a room with `rate: 0.2`) both ask.
//!
//! Every worker is probed: each round opens [`BURST`] fresh connections to each replica at
//! once (connected together, they wait in the accept queue together, and the server's
//! hand-off spreads such a burst over its workers: `server::tests::
//! a_burst_of_connections_is_spread_over_the_workers`), and sends one request on each of
//! [`KEPT`] keep-alive connections per replica, opened the same way before the outage (a
//! kept connection stays on the worker that accepted it). With two workers, a worker
//! missing every one of a round's 24 connections to its replica would take the hand-off
//! failing; the test runs many rounds.

use crate::common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anteroom_fixtures::{RedisCluster, RedisServer};
use common::*;

/// Fresh connections to each replica per round, opened at once.
const BURST: usize = 16;
/// Keep-alive connections held to each replica through the outage.
const KEPT: usize = 8;
/// How long, after Redis is back, every worker is probed.
const PROBING: Duration = Duration::from_secs(4);

/// A low rate and one active visitor: a line forms, so visitors wait.
const ROOM: &str =
    "    rate: 0.2\n    max_active: 1\n    join_limit_per_ip: 0\nserver:\n  workers: 2\n";

/// One answer: its status code and `X-Anteroom-Status`.
#[derive(Debug)]
struct Answer {
    code: u16,
    status: Option<String>,
}

impl Answer {
    fn stalled(&self) -> bool {
        self.code == 503 || self.status.as_deref() == Some("stalled")
    }
}

/// A client with one connection of its own (none shared with any other probe).
fn own_client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(1)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

async fn ask(
    http: &reqwest::Client,
    addr: SocketAddr,
    cookie: Option<&str>,
) -> (Answer, Option<String>) {
    let mut req = http.get(format!("http://{addr}/"));
    if let Some(cookie) = cookie {
        req = req.visitor(cookie);
    }
    let response = req.send().await.expect("the replica answers");
    let cookie = visitor_cookie(&response);
    let answer = Answer {
        code: response.status().as_u16(),
        status: status_header(&response),
    };
    (answer, cookie)
}

/// One round on one replica: `BURST` fresh connections at once (newcomers, and the
/// waiting visitors in turn), and one request on each kept connection (alternately a
/// newcomer and a waiting visitor). Returns every answer.
async fn round(
    addr: SocketAddr,
    kept: &[reqwest::Client],
    waiting: &[String],
    n: usize,
) -> Vec<Answer> {
    let fresh = (0..BURST).map(|i| {
        let cookie = (i % 2 == 1).then(|| waiting[(n + i) % waiting.len()].clone());
        async move { ask(&own_client(), addr, cookie.as_deref()).await.0 }
    });
    let held = kept.iter().enumerate().map(|(i, http)| {
        let cookie = ((n + i) % 2 == 1).then(|| waiting[(n + i) % waiting.len()].clone());
        async move { ask(http, addr, cookie.as_deref()).await.0 }
    });
    let (mut a, b) = futures_util::future::join(
        futures_util::future::join_all(fresh),
        futures_util::future::join_all(held),
    )
    .await;
    a.extend(b);
    a
}

/// Three replicas on `url`; `down` SIGKILLs (part of) Redis, `up` starts it again and
/// returns once it answers (for a Cluster: every slot served again).
async fn no_stall_once_redis_answers(url: &str, down: impl Fn(), up: impl Fn()) {
    let origin = Origin::start().await;
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut replicas = Vec::new();
    for dir in &dirs {
        replicas.push(BinaryReplica::start(&origin.url(), url, dir.path(), ROOM).await);
    }
    // Visitors waiting in line on each replica (the first one in is admitted), and kept
    // connections opened in a burst.
    let mut waiting = Vec::new();
    let mut kept = Vec::new();
    for replica in &replicas {
        let mut mine = Vec::new();
        for _ in 0..6 {
            let (answer, cookie) = ask(&own_client(), replica.addr, None).await;
            assert!(!answer.stalled(), "before the outage: {answer:?}");
            if answer.status.as_deref() == Some("waiting") {
                mine.push(cookie.expect("a waiting visitor's cookie"));
            }
        }
        assert!(mine.len() >= 4, "a line forms: {mine:?}");
        let clients: Vec<reqwest::Client> = (0..KEPT).map(|_| own_client()).collect();
        let answers = round(replica.addr, &clients, &mine, 0).await;
        assert!(answers.iter().all(|a| !a.stalled()), "{answers:?}");
        waiting.push(mine);
        kept.push(clients);
    }

    // A quiet outage first (no visitor asks during it: each worker's Redis connection is
    // left broken, as on a replica nobody visited), then a busy one (visitors on every
    // worker meet it).
    for busy in [false, true] {
        down();
        outage_seen(&replicas, &kept, &waiting, busy).await;
        up();
        probe_every_worker(&replicas, &kept, &waiting).await;
    }
}

/// Waits (bounded) until every replica has seen the outage: through its
/// `anteroom_store_up` gauge (the admission loop's failed pass; no visitor asks) when
/// `busy` is false, else through visitors on every kept connection and fresh ones until one
/// is answered `stalled`.
async fn outage_seen(
    replicas: &[BinaryReplica],
    kept: &[Vec<reqwest::Client>],
    waiting: &[Vec<String>],
    busy: bool,
) {
    let http = client();
    let deadline = Instant::now() + Duration::from_secs(30);
    for (i, replica) in replicas.iter().enumerate() {
        let mut n = 1;
        loop {
            let seen = if busy {
                let answers = round(replica.addr, &kept[i], &waiting[i], n).await;
                answers.iter().any(Answer::stalled)
            } else {
                let metrics = admin_metrics(&http, replica.addr).await;
                metrics.lines().any(|l| l == "anteroom_store_up 0")
            };
            if seen {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "replica {i} never saw the outage"
            );
            n += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// From now (Redis answers again) for [`PROBING`]: rounds on every replica, none of whose
/// answers may be `stalled`.
async fn probe_every_worker(
    replicas: &[BinaryReplica],
    kept: &[Vec<reqwest::Client>],
    waiting: &[Vec<String>],
) {
    let back = Instant::now();
    let mut probes = 0usize;
    let mut n = 0usize;
    while back.elapsed() < PROBING {
        n += 1;
        let rounds = replicas
            .iter()
            .enumerate()
            .map(|(i, r)| round(r.addr, &kept[i], &waiting[i], n));
        for (i, answers) in futures_util::future::join_all(rounds)
            .await
            .into_iter()
            .enumerate()
        {
            probes += answers.len();
            let stalled: Vec<&Answer> = answers.iter().filter(|a| a.stalled()).collect();
            assert!(
                stalled.is_empty(),
                "replica {i}, round {n}, {:?} after Redis answered: {} of {} stalled: {stalled:?}",
                back.elapsed(),
                stalled.len(),
                answers.len()
            );
        }
    }
    assert!(n >= 5, "only {n} rounds in {PROBING:?}");
    eprintln!("{probes} probes in {n} rounds, none stalled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_worker_answers_stalled_once_a_restarted_redis_answers() {
    let redis = std::sync::Mutex::new(RedisServer::start_durable());
    let url = redis.lock().unwrap().url();
    no_stall_once_redis_answers(
        &url,
        || redis.lock().unwrap().kill(),
        || redis.lock().unwrap().restart(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_worker_answers_stalled_once_a_cluster_regains_a_node() {
    let cluster = std::sync::Mutex::new(RedisCluster::start_durable());
    let url = cluster.lock().unwrap().urls().join(",");
    // The node holding room `main`'s slot: its outage stops the room.
    let holder = {
        let c = cluster.lock().unwrap();
        let slot: u16 = c.nodes()[0]
            .cli(&["CLUSTER", "KEYSLOT", "ar:{main}:conf"])
            .trim()
            .parse()
            .unwrap();
        (0..3)
            .find(|&i| {
                let nodes = c.nodes()[i].cli(&["CLUSTER", "NODES"]);
                let me = nodes.lines().find(|l| l.contains("myself")).unwrap_or("");
                me.split_whitespace().skip(8).any(|range| {
                    let (a, b) = range.split_once('-').unwrap_or((range, range));
                    matches!((a.parse::<u16>(), b.parse::<u16>()), (Ok(a), Ok(b)) if a <= slot && slot <= b)
                })
            })
            .expect("a node holds the slot")
    };
    no_stall_once_redis_answers(
        &url,
        || cluster.lock().unwrap().node_mut(holder).kill(),
        || {
            let mut c = cluster.lock().unwrap();
            c.node_mut(holder).restart();
            // Back when every node says the cluster is whole again.
            let deadline = Instant::now() + Duration::from_secs(30);
            for i in 0..3 {
                while !c
                    .node_mut(i)
                    .cli(&["CLUSTER", "INFO"])
                    .contains("cluster_state:ok")
                {
                    assert!(Instant::now() < deadline, "the cluster did not recover");
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        },
    )
    .await;
}
