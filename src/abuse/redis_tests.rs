//! The Redis-shared registry against a real `redis-server` (and a real Cluster): two
//! registries stand for two replicas. Redis time cannot be paused, so these use the
//! system clock and short, bounded real waits.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::*;
use crate::clock::Clock;
use anteroom_fixtures::{RedisCluster, RedisServer};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

async fn replica(urls: &[String]) -> (Arc<AbuseRegistry>, mpsc::Receiver<AbuseEvent>) {
    replica_with(urls, AbuseConfig::default().max_bans).await
}

async fn replica_with(
    urls: &[String],
    max_bans: usize,
) -> (Arc<AbuseRegistry>, mpsc::Receiver<AbuseEvent>) {
    replica_clocked(urls, max_bans, Clock::system()).await
}

async fn replica_clocked(
    urls: &[String],
    max_bans: usize,
    clock: Clock,
) -> (Arc<AbuseRegistry>, mpsc::Receiver<AbuseEvent>) {
    let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
    let redis = RedisAbuse::connect(&nodes, None).await.unwrap();
    let r = AbuseRegistry::with_redis(
        AbuseConfig {
            strikes: 20,
            cooldown: Duration::from_secs(60),
            max_cooldown: Duration::from_secs(300),
            ban_paths: vec!["/.env".into()],
            max_bans,
            ..AbuseConfig::default()
        }
        .validate()
        .unwrap(),
        vec![],
        clock,
        redis,
    )
    .await
    .unwrap();
    let events = r.take_events().unwrap();
    (Arc::new(r), events)
}

fn drain(events: &mut mpsc::Receiver<AbuseEvent>) -> Vec<AbuseEvent> {
    let mut out = Vec::new();
    while let Ok(e) = events.try_recv() {
        out.push(e);
    }
    out
}

/// Waits (real time, at most `limit`) until `f` holds.
async fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    f()
}

#[tokio::test]
async fn a_ban_earned_on_one_replica_applies_on_the_other_within_two_seconds() {
    let server = RedisServer::start();
    let (a, mut a_events) = replica(&[server.url()]).await;
    let (b, mut b_events) = replica(&[server.url()]).await;
    let _ticker = b.spawn_ticker(Duration::from_millis(500));
    let bot = ip("198.51.100.66");

    // Strikes are shared: two forged cookies through each replica make 20.
    assert_eq!(
        a.strike(bot, StrikeReason::BadCookie).await,
        StrikeOutcome::Counted { total: 5 }
    );
    assert_eq!(
        b.strike(bot, StrikeReason::BadCookie).await,
        StrikeOutcome::Counted { total: 10 }
    );
    assert_eq!(
        a.strike(bot, StrikeReason::BadCookie).await,
        StrikeOutcome::Counted { total: 15 }
    );
    let StrikeOutcome::Banned(ban) = a.strike(bot, StrikeReason::BadCookie).await else {
        panic!("the fourth forged cookie bans");
    };
    assert_eq!(ban.source, BanSource::Automatic);
    assert_eq!(ban.until_ms.unwrap() - ban.since_ms, 60_000);
    assert!(a.check(bot).is_some(), "at once on the replica that banned");
    let start = std::time::Instant::now();
    assert!(eventually(Duration::from_secs(2), || b.check(bot).is_some()).await);
    eprintln!("propagated in {:?}", start.elapsed());
    assert_eq!(drain(&mut a_events), [AbuseEvent::Banned(ban.clone())]);
    assert!(
        drain(&mut b_events).is_empty(),
        "one event per ban, from its replica"
    );
    assert_eq!(
        b.strike(bot, StrikeReason::BadCookie).await,
        StrikeOutcome::AlreadyBanned
    );

    // An admin ban of a /24 through A answers on B; lifting it propagates too.
    let range = a
        .ban(
            "203.0.113.0/24",
            Some(Duration::from_secs(600)),
            "drop-day bots",
        )
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(2), || b
            .check(ip("203.0.113.9"))
            .is_some())
        .await
    );
    assert_eq!(b.list(None, None).items[0], range);
    a.unban("203.0.113.0/24").await.unwrap();
    assert!(a.check(ip("203.0.113.9")).is_none());
    assert!(
        eventually(Duration::from_secs(2), || b
            .check(ip("203.0.113.9"))
            .is_none())
        .await
    );
    assert_eq!(
        b.unban("203.0.113.0/24").await,
        Err(BanError::NotFound("203.0.113.0/24".into()))
    );

    // The log is shared and pages newest first.
    let log = b.log(Some(2), None).await.unwrap();
    assert_eq!(
        log.items.iter().map(|e| e.action).collect::<Vec<_>>(),
        [LogAction::Unbanned, LogAction::Banned]
    );
    assert_eq!(log.items[0].reason, "drop-day bots");
    let rest = b.log(Some(10), log.next_cursor).await.unwrap();
    assert_eq!(rest.items.len(), 1);
    assert_eq!(rest.items[0].target, ban.target);
    assert_eq!(rest.next_cursor, None);
    assert_eq!(
        log.items
            .iter()
            .chain(&rest.items)
            .map(|e| e.seq)
            .collect::<Vec<_>>(),
        [3, 2, 1]
    );
}

#[tokio::test]
async fn repeat_bans_double_across_replicas_and_ban_paths_share() {
    let server = RedisServer::start();
    let (a, _ae) = replica(&[server.url()]).await;
    let (b, _be) = replica(&[server.url()]).await;
    let bot = ip("2001:db8:7:7::1");
    for _ in 0..4 {
        a.strike(bot, StrikeReason::BadAdminToken).await;
    }
    assert!(a.check(bot).is_some());
    // Lift it and earn another through B: twice the cooldown.
    a.unban("2001:db8:7:7::/64").await.unwrap();
    b.tick().await.unwrap();
    assert!(b.check(ip("2001:db8:7:7::99")).is_none());
    let mut last = None;
    for _ in 0..4 {
        last = Some(
            b.strike(ip("2001:db8:7:7::2"), StrikeReason::BadAdminToken)
                .await,
        );
    }
    let Some(StrikeOutcome::Banned(second)) = last else {
        panic!("{last:?}");
    };
    assert_eq!(second.until_ms.unwrap() - second.since_ms, 120_000);

    let PathOutcome::Banned(p) = a.hit_ban_path(ip("192.0.2.50"), "/.env").await else {
        panic!("no ban");
    };
    assert_eq!(p.source, BanSource::BanPath);
    b.tick().await.unwrap();
    assert!(b.check(ip("192.0.2.50")).is_some());
    // A second hit through B never shortens the ban (it may extend it by the time since).
    let PathOutcome::Banned(again) = b.hit_ban_path(ip("192.0.2.50"), "/.env").await else {
        panic!("no ban");
    };
    assert_eq!(again.source, BanSource::BanPath);
    assert!(again.until_ms >= p.until_ms);
}

#[tokio::test]
async fn a_strike_on_one_replica_counts_on_every_replica_by_the_next_tick() {
    let server = RedisServer::start();
    let (a, _ae) = replica(&[server.url()]).await;
    let (b, _be) = replica(&[server.url()]).await;
    let bot = ip("198.51.100.70");
    let bot6 = ip("2001:db8:7:7::1");
    a.strike(bot, StrikeReason::BadCookie).await;
    a.strike(bot, StrikeReason::JoinLimit).await;
    a.strike(bot6, StrikeReason::JoinLimit).await;
    assert_eq!(a.strikes(bot), 6, "the striking replica knows at once");
    assert_eq!(b.strikes(bot), 0, "the other one only from its tick");
    b.tick().await.unwrap();
    assert_eq!(b.strikes(bot), 6);
    // An IPv6 client is its /64, on every replica.
    assert_eq!(b.strikes(ip("2001:db8:7:7::2")), 1);
    assert_eq!(b.strikes(ip("192.0.2.1")), 0, "nobody else");

    // B's own later strike and A's stream entries agree on the newest total, whichever
    // arrives last.
    b.strike(bot, StrikeReason::JoinLimit).await;
    a.tick().await.unwrap();
    b.tick().await.unwrap();
    assert_eq!((a.strikes(bot), b.strikes(bot)), (7, 7));

    // A replica started later learns the strikes within the window at its first refresh.
    let (c, _ce) = replica(&[server.url()]).await;
    assert_eq!(c.strikes(bot), 7);
    assert_eq!(c.strikes(bot6), 1);

    // More strikes than one read's page reach the other replica over its ticks.
    for i in 0..1_200u32 {
        let client = IpAddr::from([203, 0, (i / 250) as u8, (i % 250) as u8]);
        a.strike(client, StrikeReason::JoinLimit).await;
    }
    b.tick().await.unwrap();
    assert_eq!(b.strikes(ip("203.0.0.0")), 1);
    assert_eq!(b.strikes(ip("203.0.4.199")), 1, "the last of 1,200");
}

#[tokio::test]
async fn the_newest_total_wins_whatever_the_replicas_clocks_say_and_a_ban_spends_it() {
    let server = RedisServer::start();
    let max_bans = AbuseConfig::default().max_bans;
    // A's clock runs 50 s ahead of the others'.
    let ahead = Clock::starting_at(Clock::system().now_ms() + 50_000);
    let (a, _ae) = replica_clocked(&[server.url()], max_bans, ahead).await;
    let (b, _be) = replica(&[server.url()]).await;
    let (c, _ce) = replica(&[server.url()]).await;
    let bot = ip("198.51.100.71");
    a.strike(bot, StrikeReason::BadCookie).await;
    b.strike(bot, StrikeReason::JoinLimit).await;
    a.tick().await.unwrap();
    c.tick().await.unwrap();
    assert_eq!(
        (a.strikes(bot), b.strikes(bot), c.strikes(bot)),
        (6, 6, 6),
        "B's strike came after A's, whatever A's clock said"
    );
    // Reaching abuse.strikes (20) spends the strikes on a ban, on every replica's view.
    for _ in 0..2 {
        b.strike(bot, StrikeReason::BadCookie).await;
    }
    for _ in 0..3 {
        b.strike(bot, StrikeReason::JoinLimit).await;
    }
    c.tick().await.unwrap();
    assert_eq!(c.strikes(bot), 19);
    assert!(matches!(
        b.strike(bot, StrikeReason::JoinLimit).await,
        StrikeOutcome::Banned(_)
    ));
    assert_eq!(b.strikes(bot), 0);
    a.tick().await.unwrap();
    c.tick().await.unwrap();
    assert_eq!((a.strikes(bot), c.strikes(bot)), (0, 0));
    assert!(c.check(bot).is_some());
}

#[tokio::test]
async fn expiry_is_reported_once_and_lifts_everywhere() {
    let server = RedisServer::start();
    let (a, mut ae) = replica(&[server.url()]).await;
    let (b, mut be) = replica(&[server.url()]).await;
    let ban = a
        .ban("192.0.2.77", Some(Duration::from_secs(1)), "brief")
        .await
        .unwrap();
    b.tick().await.unwrap();
    assert!(b.check(ip("192.0.2.77")).is_some());
    // Ended bans stop applying at once, before any sweep (no tick until both have let go).
    assert!(
        eventually(Duration::from_secs(3), || a
            .check(ip("192.0.2.77"))
            .is_none()
            && b.check(ip("192.0.2.77")).is_none())
        .await,
        "the ban never ended"
    );
    a.tick().await.unwrap();
    b.tick().await.unwrap();
    let a_events = drain(&mut ae);
    assert_eq!(
        a_events,
        [AbuseEvent::Banned(ban.clone()), AbuseEvent::Expired(ban)]
    );
    assert!(drain(&mut be).is_empty());
    assert_eq!(b.bans_active(), 0);
    let log = b.log(None, None).await.unwrap();
    assert_eq!(log.items[0].action, LogAction::Expired);
}

#[tokio::test]
async fn a_redis_outage_keeps_the_last_known_bans_enforced() {
    let mut server = RedisServer::start();
    let (a, _ae) = replica(&[server.url()]).await;
    let (b, _be) = replica(&[server.url()]).await;
    a.ban("192.0.2.1", None, "known").await.unwrap();
    b.tick().await.unwrap();
    server.kill();
    assert!(b.tick().await.is_err());
    assert!(b.check(ip("192.0.2.1")).unwrap().is_permanent());
    assert_eq!(
        a.strike(ip("192.0.2.2"), StrikeReason::BadCookie).await,
        StrikeOutcome::StoreDown
    );
    assert!(matches!(
        a.ban("192.0.2.3", None, "x").await,
        Err(BanError::Store(_))
    ));
    assert!(a.log(None, None).await.is_err());
    // A ban path still bans on this replica while Redis is away.
    assert!(matches!(
        a.hit_ban_path(ip("192.0.2.4"), "/.env").await,
        PathOutcome::Banned(_)
    ));
    assert!(a.check(ip("192.0.2.4")).is_some());
    assert!(b.check(ip("192.0.2.1")).is_some());
    // Redis comes back (empty: it kept nothing): the replicas follow it again.
    server.restart();
    let mut ok = false;
    for _ in 0..50 {
        if b.tick().await.is_ok() {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ok, "the refresh recovers once Redis answers");
}

/// With Redis away every strike waits out its timeout: a flood of them keeps at most
/// `MAX_PENDING_STRIKES` in flight, and they drain once answered.
#[tokio::test]
async fn strikes_waiting_for_an_absent_redis_are_bounded() {
    let mut server = RedisServer::start();
    let (a, _events) = replica(&[server.url()]).await;
    server.kill();
    for i in 0..(3 * registry::MAX_PENDING_STRIKES as u32) {
        let ip = IpAddr::from((0x0a00_0000u32 + i).to_be_bytes());
        a.strike_soon(ip, StrikeReason::BadCookie);
        assert!(a.pending_strikes() <= registry::MAX_PENDING_STRIKES);
    }
    assert!(a.pending_strikes() > 0, "the strikes are in flight");
    assert!(
        eventually(Duration::from_secs(30), || a.pending_strikes() == 0).await,
        "{} strikes still waiting",
        a.pending_strikes()
    );
}

#[tokio::test]
async fn max_bans_is_shared_and_displaces_automatic_bans_first() {
    let server = RedisServer::start();
    let (a, mut a_events) = replica_with(&[server.url()], 2).await;
    let (b, _b_events) = replica_with(&[server.url()], 2).await;
    let PathOutcome::Banned(first) = a.hit_ban_path(ip("192.0.2.1"), "/.env").await else {
        panic!("a ban path bans");
    };
    b.ban("198.51.100.1", None, "op").await.unwrap();
    // The cap counts the shared set: a third ban, through either replica, displaces the
    // ban-path ban, never the operator's.
    let PathOutcome::Banned(_) = a.hit_ban_path(ip("192.0.2.2"), "/.env").await else {
        panic!("a ban path at the cap displaces an automatic ban");
    };
    assert!(a.check(ip("192.0.2.1")).is_none(), "displaced at once here");
    assert_eq!(a.bans_displaced_total(), 1);
    let got = drain(&mut a_events);
    assert!(
        got.iter()
            .any(|e| matches!(e, AbuseEvent::Displaced(d) if d.target == first.target)),
        "{got:?}"
    );
    let log = a.log(None, None).await.unwrap();
    assert_eq!(log.items[1].action, LogAction::Displaced);
    b.tick().await.unwrap();
    assert!(b.check(ip("192.0.2.1")).is_none() && b.check(ip("192.0.2.2")).is_some());
    // Only operator bans: automatic bans are refused, operator bans are a clear error.
    b.ban("198.51.100.2", None, "op").await.unwrap();
    assert_eq!(
        a.hit_ban_path(ip("192.0.2.3"), "/.env").await,
        PathOutcome::Full
    );
    assert_eq!(a.bans_refused_total(), 1);
    assert_eq!(
        a.ban("198.51.100.3", None, "op").await.unwrap_err(),
        BanError::Full(2)
    );
    a.tick().await.unwrap();
    assert_eq!(a.bans_active(), 2);
}

#[tokio::test]
async fn works_on_a_redis_cluster() {
    let cluster = RedisCluster::start();
    let (a, _ae) = replica(&cluster.urls()).await;
    let (b, _be) = replica(&cluster.urls()).await;
    let bot = ip("198.51.100.200");
    for _ in 0..4 {
        b.strike(bot, StrikeReason::BadGrant).await;
    }
    a.tick().await.unwrap();
    assert!(a.check(bot).is_some());
    a.ban("10.0.0.0/8", None, "whole net").await.unwrap();
    b.tick().await.unwrap();
    assert!(b.check(ip("10.9.8.7")).unwrap().is_permanent());
    assert_eq!(b.log(None, None).await.unwrap().items.len(), 2);
}
