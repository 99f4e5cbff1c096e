//! Behaviour of the embedded registry under tokio's paused clock: exact and instant. The
//! Redis variant's tests are in `redis_tests`.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use tokio::sync::mpsc;

use super::*;
use crate::clock::Clock;

const T0: u64 = 1_760_000_000_000;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

fn config() -> AbuseConfig {
    AbuseConfig::default()
}

fn registry(c: AbuseConfig) -> (AbuseRegistry, mpsc::Receiver<AbuseEvent>) {
    registry_with(c, vec![])
}

fn registry_with(
    c: AbuseConfig,
    trusted: Vec<IpNet>,
) -> (AbuseRegistry, mpsc::Receiver<AbuseEvent>) {
    let r = AbuseRegistry::in_memory(c.validate().unwrap(), trusted, Clock::starting_at(T0));
    let events = r.take_events().unwrap();
    assert!(r.take_events().is_none());
    (r, events)
}

fn drain(events: &mut mpsc::Receiver<AbuseEvent>) -> Vec<AbuseEvent> {
    let mut out = Vec::new();
    while let Ok(e) = events.try_recv() {
        out.push(e);
    }
    out
}

async fn advance(secs: u64) {
    tokio::time::advance(Duration::from_secs(secs)).await;
}

fn banned(outcome: StrikeOutcome) -> Arc<Ban> {
    match outcome {
        StrikeOutcome::Banned(ban) => ban,
        other => panic!("expected a ban, got {other:?}"),
    }
}

#[test]
fn strike_weights_and_labels() {
    use StrikeReason::*;
    let w: Vec<(u32, &str)> = StrikeReason::ALL
        .iter()
        .map(|r| (r.weight(), r.as_str()))
        .collect();
    assert_eq!(
        w,
        [
            (5, "bad_cookie"),
            (5, "bad_admin_token"),
            (1, "join_limit"),
            (5, "bad_grant")
        ]
    );
    assert_eq!(
        BadCookie.weight() * 4,
        20,
        "4 forged cookies ban at the default"
    );
}

#[tokio::test(start_paused = true)]
async fn weights_add_up_to_a_ban() {
    let (r, mut events) = registry(config());
    let a = ip("198.51.100.7");
    for expected in [5, 10, 15] {
        assert_eq!(
            r.strike(a, StrikeReason::BadCookie).await,
            StrikeOutcome::Counted { total: expected }
        );
    }
    for expected in [16, 17, 18, 19] {
        assert_eq!(
            r.strike(a, StrikeReason::JoinLimit).await,
            StrikeOutcome::Counted { total: expected }
        );
    }
    assert!(r.check(a).is_none());
    let ban = banned(r.strike(a, StrikeReason::JoinLimit).await);
    assert_eq!(ban.target, net("198.51.100.7/32"));
    assert_eq!(ban.source, BanSource::Automatic);
    assert!(ban.reason.contains("join_limit"), "{}", ban.reason);
    let verdict = r.check(a).unwrap();
    assert_eq!(verdict.retry_after, Some(Duration::from_secs(60)));
    assert_eq!(verdict.retry_after_secs(), Some(60));
    assert!(!verdict.is_permanent());
    assert_eq!(r.banned_requests_total(), 1);
    assert_eq!(
        r.strike(a, StrikeReason::BadCookie).await,
        StrikeOutcome::AlreadyBanned
    );
    assert_eq!(r.strikes_total(StrikeReason::BadCookie), 3);
    assert_eq!(r.strikes_total(StrikeReason::JoinLimit), 5);
    assert_eq!(r.bans_active(), 1);
    let got = drain(&mut events);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].kafka_type(), "client_banned");
    assert_eq!(got[0].ban(), &*ban);
    // Another client is unaffected.
    assert!(r.check(ip("198.51.100.8")).is_none());
}

#[tokio::test(start_paused = true)]
async fn the_window_slides() {
    let (r, _events) = registry(AbuseConfig {
        strikes: 10,
        ..config()
    });
    let a = ip("198.51.100.7");
    assert_eq!(
        r.strike(a, StrikeReason::BadCookie).await,
        StrikeOutcome::Counted { total: 5 }
    );
    advance(40).await;
    for _ in 0..4 {
        r.strike(a, StrikeReason::JoinLimit).await;
    }
    // At exactly 60 s the first strike leaves the window.
    advance(20).await;
    assert_eq!(
        r.strike(a, StrikeReason::JoinLimit).await,
        StrikeOutcome::Counted { total: 5 }
    );
    advance(40).await;
    assert_eq!(
        r.strike(a, StrikeReason::JoinLimit).await,
        StrikeOutcome::Counted { total: 2 }
    );
    assert!(r.check(a).is_none());
}

#[tokio::test(start_paused = true)]
async fn cooldowns_double_and_cap_and_expire() {
    let (r, mut events) = registry(AbuseConfig {
        strikes: 5,
        cooldown: Duration::from_secs(60),
        max_cooldown: Duration::from_secs(300),
        ..config()
    });
    let a = ip("203.0.113.9");
    let mut seen = Vec::new();
    for _ in 0..5 {
        let ban = banned(r.strike(a, StrikeReason::BadAdminToken).await);
        let left = r.check(a).unwrap().retry_after.unwrap();
        seen.push(left.as_secs());
        // Still banned one second before the end; free at the end, even before a tick.
        advance(left.as_secs() - 1).await;
        assert!(r.check(a).is_some());
        advance(1).await;
        assert!(r.check(a).is_none());
        assert_eq!(r.bans_active(), 0);
        r.tick().await.unwrap();
        let got = drain(&mut events);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0], AbuseEvent::Banned(ban.clone()));
        assert_eq!(got[1], AbuseEvent::Expired(ban));
        assert_eq!(got[1].kafka_type(), "client_unbanned");
    }
    assert_eq!(seen, [60, 120, 240, 300, 300]);
    let log = r.log(None, None).await.unwrap();
    assert_eq!(log.items.len(), 10);
    assert_eq!(log.items[0].action, LogAction::Expired);
    assert_eq!(log.items[1].action, LogAction::Banned);
    assert_eq!(log.items[1].until_ms, Some(T0 + 1_020_000));
}

#[tokio::test(start_paused = true)]
async fn allow_and_trusted_proxies_are_never_struck_or_banned() {
    let (r, mut events) = registry_with(
        AbuseConfig {
            strikes: 5,
            allow: vec!["10.0.0.0/8".into(), "2001:db8:aa::/48".into()],
            ban_paths: vec!["/.env".into()],
            ..config()
        },
        vec![net("192.0.2.1/32")],
    );
    for who in [
        "10.1.2.3",
        "192.0.2.1",
        "2001:db8:aa:1::9",
        "::ffff:10.9.9.9",
    ] {
        let who = ip(who);
        for _ in 0..3 {
            assert_eq!(
                r.strike(who, StrikeReason::BadCookie).await,
                StrikeOutcome::Immune
            );
        }
        assert_eq!(r.hit_ban_path(who, "/.env").await, PathOutcome::Immune);
        assert!(r.check(who).is_none());
    }
    assert_eq!(r.tracked(), 0);
    assert_eq!(r.strikes_total(StrikeReason::BadCookie), 0);
    assert!(matches!(
        r.ban("10.1.2.3", None, "x").await,
        Err(BanError::Immune(_))
    ));
    assert!(matches!(
        r.ban("192.0.2.1", None, "x").await,
        Err(BanError::Immune(_))
    ));
    assert!(matches!(
        r.ban("10.20.0.0/16", None, "x").await,
        Err(BanError::Immune(_))
    ));
    // A range around an allowed address may be banned, but never applies to it.
    r.ban("192.0.2.0/24", None, "range").await.unwrap();
    assert!(r.check(ip("192.0.2.1")).is_none());
    assert!(r.check(ip("192.0.2.2")).unwrap().is_permanent());
    r.ban("10.0.0.0/7", None, "x").await.unwrap_err();
    assert_eq!(drain(&mut events).len(), 1);
}

#[tokio::test(start_paused = true)]
async fn admin_targets_are_normalised_and_limited_in_breadth() {
    assert_eq!(parse_target("10.0.0.0/8").unwrap(), net("10.0.0.0/8"));
    assert_eq!(parse_target("10.1.2.3/8").unwrap(), net("10.0.0.0/8"));
    assert_eq!(
        parse_target("10.0.0.0/7").unwrap_err(),
        BanError::TooBroad {
            target: "10.0.0.0/7".into(),
            min_prefix: 8
        }
    );
    assert!(
        parse_target("0.0.0.0/0")
            .unwrap_err()
            .to_string()
            .contains("/8")
    );
    assert_eq!(parse_target("2001::/16").unwrap(), net("2001::/16"));
    assert_eq!(
        parse_target("2000::/15").unwrap_err(),
        BanError::TooBroad {
            target: "2000::/15".into(),
            min_prefix: 16
        }
    );
    assert_eq!(parse_target(" 192.0.2.5 ").unwrap(), net("192.0.2.5/32"));
    assert_eq!(
        parse_target("2001:db8:1:2:3:4:5:6").unwrap(),
        net("2001:db8:1:2::/64")
    );
    assert_eq!(
        parse_target("2001:db8:1:2::/96").unwrap(),
        net("2001:db8:1:2::/64")
    );
    assert_eq!(
        parse_target("::ffff:192.0.2.5").unwrap(),
        net("192.0.2.5/32")
    );
    assert_eq!(
        parse_target("::ffff:192.0.2.0/120").unwrap(),
        net("192.0.2.0/24")
    );
    // IPv6 ranges covering the IPv4-mapped block would ban every IPv4 client: judged as
    // the IPv4 they cover (all of it), they are too broad, however they are written.
    for covers_ipv4 in ["::/16", "::/64", "::/95", "::ffff:0:0/96", "::ffff:0:0/80"] {
        assert_eq!(
            parse_target(covers_ipv4),
            Err(BanError::TooBroad {
                target: covers_ipv4.into(),
                min_prefix: 8
            }),
            "{covers_ipv4}"
        );
    }
    // Next to it, ranges that miss it are fine.
    assert_eq!(parse_target("1::/16").unwrap(), net("1::/16"));
    assert_eq!(parse_target("0:0:0:1::/80").unwrap(), net("0:0:0:1::/64"));
    assert!(matches!(
        parse_target("example.com"),
        Err(BanError::InvalidTarget(_))
    ));
    assert!(matches!(parse_target(""), Err(BanError::InvalidTarget(_))));

    let (r, _events) = registry(config());
    assert_eq!(
        r.ban("192.0.2.5", Some(Duration::ZERO), "x").await,
        Err(BanError::InvalidDuration)
    );
    assert_eq!(
        r.ban(
            "192.0.2.5",
            Some(Duration::from_secs(MAX_BAN_SECS + 1)),
            "x"
        )
        .await,
        Err(BanError::InvalidDuration)
    );
    assert_eq!(
        r.ban("192.0.2.5", None, &"x".repeat(MAX_REASON_CHARS + 1))
            .await,
        Err(BanError::ReasonTooLong)
    );
    assert!(matches!(
        r.ban("1.0.0.0/7", None, "x").await,
        Err(BanError::TooBroad { min_prefix: 8, .. })
    ));
    assert!(matches!(
        r.ban("2001::/12", None, "x").await,
        Err(BanError::TooBroad { min_prefix: 16, .. })
    ));
    assert_eq!(r.bans_active(), 0);
    // The longest ban with an end is accepted.
    assert!(
        r.ban("192.0.2.5", Some(Duration::from_secs(MAX_BAN_SECS)), "x")
            .await
            .is_ok()
    );
}

#[tokio::test(start_paused = true)]
async fn ranges_match_ipv4_and_ipv6_clients() {
    let (r, _events) = registry(config());
    r.ban("203.0.113.0/24", Some(Duration::from_secs(600)), "scan")
        .await
        .unwrap();
    assert!(r.check(ip("203.0.113.77")).is_some());
    assert!(r.check(ip("::ffff:203.0.113.77")).is_some());
    assert!(r.check(ip("203.0.114.1")).is_none());
    // A /64 client inside a /48 ban.
    r.ban("2001:db8:1::/48", None, "bots").await.unwrap();
    assert!(r.check(ip("2001:db8:1:2::5")).unwrap().is_permanent());
    assert!(r.check(ip("2001:db8:2::5")).is_none());
    // One IPv6 address bans its whole /64 (the client), nothing beyond.
    let ban = r.ban("2001:db8:9::1", None, "one").await.unwrap();
    assert_eq!(ban.target, net("2001:db8:9::/64"));
    assert!(r.check(ip("2001:db8:9::ffff")).is_some());
    assert!(r.check(ip("2001:db8:9:1::1")).is_none());
    // Overlapping bans: the verdict is the one that lasts longest.
    r.ban("203.0.113.77", Some(Duration::from_secs(60)), "short")
        .await
        .unwrap();
    assert_eq!(
        r.check(ip("203.0.113.77")).unwrap().retry_after,
        Some(Duration::from_secs(600))
    );
    assert_eq!(r.bans_active(), 4);
}

#[tokio::test(start_paused = true)]
async fn admin_bans_lift_and_expire() {
    let (r, mut events) = registry(config());
    assert_eq!(
        r.unban("192.0.2.9").await,
        Err(BanError::NotFound("192.0.2.9/32".into()))
    );
    assert!(matches!(
        r.unban("nope").await,
        Err(BanError::InvalidTarget(_))
    ));
    assert!(matches!(
        r.unban("0.0.0.0/0").await,
        Err(BanError::NotFound(_))
    ));
    let ban = r
        .ban("192.0.2.9", Some(Duration::from_secs(10)), " spam ")
        .await
        .unwrap();
    assert_eq!(ban.reason, "spam");
    assert_eq!(ban.source, BanSource::Admin);
    assert_eq!(ban.until_ms, Some(T0 + 10_000));
    assert_eq!(
        r.check(ip("192.0.2.9")).unwrap().retry_after,
        Some(Duration::from_secs(10))
    );
    tokio::time::advance(Duration::from_millis(9_500)).await;
    assert_eq!(
        r.check(ip("192.0.2.9")).unwrap().retry_after_secs(),
        Some(1)
    );
    let lifted = r.unban("192.0.2.9/32").await.unwrap();
    assert_eq!(lifted, ban);
    assert!(r.check(ip("192.0.2.9")).is_none());
    assert_eq!(
        drain(&mut events),
        [AbuseEvent::Banned(ban.clone()), AbuseEvent::Unbanned(ban)]
    );

    let ban = r
        .ban("192.0.2.10", Some(Duration::from_secs(5)), "")
        .await
        .unwrap();
    advance(5).await;
    assert!(r.check(ip("192.0.2.10")).is_none());
    // An ended ban is no ban, even before the sweep has logged its expiry.
    assert!(matches!(
        r.unban("192.0.2.10").await,
        Err(BanError::NotFound(_))
    ));
    r.tick().await.unwrap();
    let got = drain(&mut events);
    assert!(got.contains(&AbuseEvent::Expired(ban)), "{got:?}");
    let log = r.log(None, None).await.unwrap();
    let actions: Vec<LogAction> = log.items.iter().map(|e| e.action).collect();
    assert_eq!(
        actions,
        [
            LogAction::Expired,
            LogAction::Banned,
            LogAction::Unbanned,
            LogAction::Banned
        ]
    );
    assert_eq!(r.bans_active(), 0);
}

#[tokio::test(start_paused = true)]
async fn lists_and_the_log_page_newest_first() {
    let (r, _events) = registry(config());
    for i in 1..=7 {
        r.ban(&format!("192.0.2.{i}"), None, &format!("ban {i}"))
            .await
            .unwrap();
        advance(1).await;
    }
    r.unban("192.0.2.3").await.unwrap();
    let mut reasons = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let page = r.list(Some(2), cursor);
        pages += 1;
        assert!(page.items.len() <= 2);
        reasons.extend(page.items.iter().map(|b| b.reason.clone()));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(
        reasons,
        ["ban 7", "ban 6", "ban 5", "ban 4", "ban 2", "ban 1"]
    );
    assert_eq!(pages, 3);

    let first = r.log(Some(3), None).await.unwrap();
    assert_eq!(
        first.items.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [8, 7, 6]
    );
    assert_eq!(first.items[0].action, LogAction::Unbanned);
    assert_eq!(first.next_cursor, Some(6));
    let second = r.log(Some(3), first.next_cursor).await.unwrap();
    assert_eq!(
        second.items.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [5, 4, 3]
    );
    let rest = r.log(Some(100), second.next_cursor).await.unwrap();
    assert_eq!(rest.items.iter().map(|e| e.seq).collect::<Vec<_>>(), [2, 1]);
    assert_eq!(rest.next_cursor, None);
    // Limits are clamped to 1..=1000.
    assert_eq!(r.log(Some(0), None).await.unwrap().items.len(), 1);
    assert_eq!(r.list(Some(0), None).items.len(), 1);
    assert_eq!(r.list(Some(5_000), None).items.len(), 6);
}

#[tokio::test(start_paused = true)]
async fn ban_paths_ban_on_the_first_hit_without_doubling() {
    let (r, mut events) = registry(AbuseConfig {
        strikes: 5,
        ban_paths: vec!["/.env".into(), "/.git/**".into(), "wp-login.php".into()],
        ..config()
    });
    let a = ip("198.51.100.1");
    assert_eq!(
        r.hit_ban_path(a, "/index.html").await,
        PathOutcome::NotBanPath
    );
    assert!(r.is_ban_path("/.git/config"));
    assert!(!r.is_ban_path("/.gitignore"));
    let PathOutcome::Banned(ban) = r.hit_ban_path(a, "/.env?debug=1").await else {
        panic!("no ban")
    };
    assert_eq!(ban.source, BanSource::BanPath);
    assert!(ban.reason.contains("/.env"));
    assert_eq!(
        r.check(a).unwrap().retry_after,
        Some(Duration::from_secs(60))
    );
    // A second hit keeps the ban it has rather than making a new one.
    let PathOutcome::Banned(again) = r.hit_ban_path(a, "/blog/wp-login.php").await else {
        panic!("no ban")
    };
    assert_eq!(again, ban);
    advance(60).await;
    r.tick().await.unwrap();
    // Not an automatic ban: the first strike ban is still the base cooldown.
    banned(r.strike(a, StrikeReason::BadCookie).await);
    assert_eq!(
        r.check(a).unwrap().retry_after,
        Some(Duration::from_secs(60))
    );
    assert_eq!(drain(&mut events).len(), 3);
}

#[tokio::test(start_paused = true)]
async fn memory_is_bounded_by_max_tracked() {
    let (r, _events) = registry(AbuseConfig {
        strikes: 3,
        max_tracked: 2,
        ..config()
    });
    let (a, b, c) = (ip("192.0.2.1"), ip("192.0.2.2"), ip("192.0.2.3"));
    r.strike(a, StrikeReason::JoinLimit).await;
    r.strike(b, StrikeReason::JoinLimit).await;
    r.strike(a, StrikeReason::JoinLimit).await;
    r.strike(c, StrikeReason::JoinLimit).await;
    assert_eq!(r.tracked(), 2);
    // b was the least recently struck and is forgotten; a keeps counting.
    banned(r.strike(a, StrikeReason::JoinLimit).await);
    assert_eq!(
        r.strike(b, StrikeReason::JoinLimit).await,
        StrikeOutcome::Counted { total: 1 }
    );
    assert_eq!(r.tracked(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_million_distinct_attackers_stay_within_max_tracked() {
    let (r, _events) = registry(config());
    let max = r.policy().max_tracked;
    for i in 0u32..1_000_000 {
        // Alternate IPv4 and distinct IPv6 /64s.
        let who = if i % 2 == 0 {
            IpAddr::from(std::net::Ipv4Addr::from(0x0B00_0000 + i))
        } else {
            IpAddr::from(std::net::Ipv6Addr::from(
                (0x2001_0db8u128 << 96) | (u128::from(i) << 64) | 1,
            ))
        };
        r.strike(who, StrikeReason::JoinLimit).await;
        if i % 100_000 == 0 {
            assert!(r.tracked() <= max);
        }
    }
    assert_eq!(r.tracked(), max);
}

#[tokio::test(start_paused = true)]
async fn max_bans_displaces_the_soonest_ending_automatic_ban_never_an_operators() {
    let (r, mut events) = registry(AbuseConfig {
        strikes: 1,
        max_bans: 3,
        ban_paths: vec!["/.env".into()],
        ..config()
    });
    // Two operator bans: one permanent, one ending in a second.
    r.ban("198.51.100.1", None, "op").await.unwrap();
    r.ban("198.51.100.2", Some(Duration::from_secs(1)), "op")
        .await
        .unwrap();
    advance(1).await;
    // One automatic ban (60 s), and the cap is reached.
    let first = banned(r.strike(ip("192.0.2.1"), StrikeReason::JoinLimit).await);
    advance(1).await;
    r.tick().await.unwrap();
    // The short operator ban ended and was expired by the tick: room again.
    assert_eq!(r.bans_active(), 2);
    let second = banned(r.strike(ip("192.0.2.2"), StrikeReason::JoinLimit).await);
    assert_eq!(r.bans_active(), 3);
    // At the cap, a ban-path ban displaces the automatic ban that ends soonest (the
    // first), never the operator's permanent one.
    let PathOutcome::Banned(third) = r.hit_ban_path(ip("192.0.2.3"), "/.env").await else {
        panic!("a ban-path ban at the cap is made by displacing one");
    };
    assert_eq!(r.bans_active(), 3);
    assert!(
        r.check(ip("192.0.2.1")).is_none(),
        "the soonest-ending went"
    );
    assert!(r.check(ip("192.0.2.2")).is_some());
    assert!(r.check(ip("198.51.100.1")).is_some(), "operator bans stay");
    assert_eq!(r.bans_displaced_total(), 1);
    let got = drain(&mut events);
    assert!(
        got.contains(&AbuseEvent::Displaced(first.clone())),
        "{got:?}"
    );
    assert!(got.contains(&AbuseEvent::Banned(third.clone())));
    let log = r.log(None, None).await.unwrap();
    assert_eq!(log.items[1].action, LogAction::Displaced);
    assert_eq!(log.items[1].target, first.target);
    // An operator ban at the cap displaces likewise (the second automatic ban).
    r.ban("198.51.100.3", None, "op").await.unwrap();
    assert!(r.check(ip("192.0.2.2")).is_none());
    assert!(r.check(ip("192.0.2.3")).is_some());
    r.ban("198.51.100.4", None, "op").await.unwrap();
    assert!(r.check(ip("192.0.2.3")).is_none());
    assert_eq!(r.bans_active(), 3);
    drop(second);
    // Only operator bans left: an automatic ban is refused and counted, a ban path
    // answers Full (the gate's 404), an operator ban is a clear error, a replacement of
    // an existing target is still fine.
    assert_eq!(
        r.strike(ip("192.0.2.9"), StrikeReason::JoinLimit).await,
        StrikeOutcome::Full
    );
    assert_eq!(
        r.hit_ban_path(ip("192.0.2.10"), "/.env").await,
        PathOutcome::Full
    );
    assert_eq!(r.bans_refused_total(), 2);
    assert!(r.check(ip("192.0.2.9")).is_none());
    assert_eq!(
        r.ban("198.51.100.5", None, "op").await.unwrap_err(),
        BanError::Full(3)
    );
    r.ban("198.51.100.4", Some(Duration::from_secs(60)), "longer")
        .await
        .unwrap();
    assert_eq!(r.bans_active(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_tick_expires_only_what_ended_in_the_order_it_ended() {
    let (r, mut events) = registry(config());
    for (i, secs) in [(1, 30u64), (2, 10), (3, 20)] {
        r.ban(&format!("192.0.2.{i}"), Some(Duration::from_secs(secs)), "")
            .await
            .unwrap();
    }
    r.ban("192.0.2.4", None, "").await.unwrap();
    // Replacing a ban moves its end: the old end must not expire the new ban.
    r.ban("192.0.2.3", Some(Duration::from_secs(100)), "")
        .await
        .unwrap();
    drain(&mut events);
    advance(25).await;
    r.tick().await.unwrap();
    let ended: Vec<String> = drain(&mut events)
        .iter()
        .map(|e| e.ban().target.to_string())
        .collect();
    assert_eq!(ended, ["192.0.2.2/32"]);
    advance(10).await;
    r.tick().await.unwrap();
    assert_eq!(drain(&mut events).len(), 1);
    assert!(r.check(ip("192.0.2.3")).is_some());
    assert!(r.check(ip("192.0.2.4")).is_some());
    assert_eq!(r.bans_active(), 2);
}

#[tokio::test(start_paused = true)]
async fn events_beyond_the_buffer_are_dropped_and_counted() {
    let (r, _events) = registry(config());
    for i in 0..(registry::EVENT_BUFFER as u32 + 10) {
        let who = IpAddr::from(std::net::Ipv4Addr::from(0x0C00_0000 + i));
        r.ban(&who.to_string(), None, "").await.unwrap();
    }
    assert_eq!(r.events_dropped(), 10);
}

mod persistence;

/// The cost of the ban check: 10,000 single-client bans and 100 ranges, a banned and an
/// unbanned client. Prints ns per lookup; the assertion is only a loose sanity bound so
/// a slow debug build on a busy machine never fails it.
#[tokio::test(start_paused = true)]
async fn check_cost() {
    let (r, _events) = registry(config());
    let ban = |seq: u64, target: IpNet| Ban {
        seq,
        target,
        source: BanSource::Admin,
        reason: String::new(),
        since_ms: T0,
        until_ms: None,
    };
    let mut bans: Vec<Ban> = (0..10_000u32)
        .map(|i| {
            ban(
                u64::from(i),
                client_net(IpAddr::from(std::net::Ipv4Addr::from(0x0D00_0000 + i))),
            )
        })
        .collect();
    bans.extend((0..100u64).map(|i| ban(20_000 + i, net(&format!("100.{i}.0.0/16")))));
    r.replace_bans_for_tests(bans);
    assert_eq!(r.bans_active(), 10_100);
    let banned_ip = ip("13.0.0.5");
    let free_ip = ip("192.0.2.200");
    // Debug builds are ~100× slower; the figure worth quoting comes from `--release`.
    let n: u32 = if cfg!(debug_assertions) {
        100_000
    } else {
        10_000_000
    };
    for (name, who) in [("unbanned", free_ip), ("banned", banned_ip)] {
        let start = std::time::Instant::now();
        let mut hits = 0u32;
        for _ in 0..n {
            hits += u32::from(std::hint::black_box(r.check(std::hint::black_box(who))).is_some());
        }
        let per = start.elapsed().as_nanos() / u128::from(n);
        eprintln!("check() {name}: {per} ns/lookup (10,000 exact + 100 range bans)");
        assert!(per < 100_000);
        assert_eq!(hits > 0, name == "banned");
    }
}

/// `strikes` reads a client's weight within the window without recording anything: it
/// grows with each strike, ages out with the window, and is 0 for immune clients.
#[tokio::test(start_paused = true)]
async fn strikes_are_read_within_the_window() {
    let (r, _events) = registry(AbuseConfig {
        strikes: 100,
        window: Duration::from_secs(60),
        allow: vec!["10.9.0.0/16".into()],
        ..config()
    });
    let who = ip("192.0.2.7");
    assert_eq!(r.strikes(who), 0);
    r.strike(who, StrikeReason::JoinLimit).await;
    r.strike(who, StrikeReason::BadCookie).await;
    assert_eq!(r.strikes(who), 6);
    assert_eq!(r.strikes(who), 6, "reading records nothing");
    assert_eq!(r.strikes(ip("192.0.2.8")), 0);
    advance(30).await;
    r.strike(who, StrikeReason::JoinLimit).await;
    advance(31).await;
    assert_eq!(r.strikes(who), 1, "the first two aged out");
    r.strike(ip("10.9.1.1"), StrikeReason::BadCookie).await;
    assert_eq!(r.strikes(ip("10.9.1.1")), 0, "immune");
}
