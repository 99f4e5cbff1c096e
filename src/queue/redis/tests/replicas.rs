//! What one replica's pass hears of the others' (`ar:{room}:admitted`): the admissions of
//! other replicas' passes since its own previous pass, so its live streams and ETA ledger
//! need not wait for their heartbeat.

use super::*;
use crate::queue::PassReport;

/// `n` replicas on the harness's Redis, their clocks frozen at the first store's.
async fn replicas<const N: usize>(h: &RedisHarness) -> [RedisStore; N] {
    let mut stores = Vec::with_capacity(N);
    for _ in 0..N {
        let store = h.connect().await;
        store.freeze_clock_for_tests(h.store.clock_for_tests());
        stores.push(store);
    }
    stores.try_into().unwrap_or_else(|_| unreachable!())
}

/// Joins `who` to a paused room, resumes it and moves every clock a pass on, so the next
/// pass (of any replica) admits exactly them.
async fn line_up(stores: &[&RedisStore], who: &[VisitorId]) {
    let first = stores[0];
    first
        .update_settings("main", &SettingsPatch::pause())
        .await
        .unwrap();
    for &v in who {
        first.resolve("main", v, anyone()).await.unwrap();
    }
    first
        .update_settings("main", &SettingsPatch::resume())
        .await
        .unwrap();
    for store in stores {
        store.advance_clock_for_tests(Duration::from_millis(250));
    }
}

/// Opens room `main` on `store` with no limit in the way of a test's admissions.
async fn open_main(store: &RedisStore) {
    conformance::open_main(store, conformance::settings(1_000.0, 10_000)).await;
}

/// A Redis of its own with two replicas on it, room `main` open (no limit in the way) and
/// B's first pass made, so B hears whatever A's passes admit from now on.
async fn two_replicas() -> (RedisServer, RedisStore, RedisStore) {
    let server = RedisServer::start();
    let urls = [server.url()];
    let (a, b) = (frozen(&urls, None).await, frozen(&urls, None).await);
    open_main(&a).await;
    b.admit_pass("main").await.unwrap();
    (server, a, b)
}

/// What a pass of `store` hears of the other replicas' admissions.
async fn heard(store: &RedisStore) -> Vec<VisitorId> {
    store.admit_pass("main").await.unwrap().admitted_elsewhere
}

/// A plain connection to `server`, to write the stream as nothing of ours would.
async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

async fn a_pass_hears_the_others_admissions(h: RedisHarness) {
    let [a, b] = replicas::<2>(&h).await;
    open_main(&a).await;
    let ids = |n: usize| (0..n).map(|_| VisitorId::random()).collect::<Vec<_>>();

    let before = ids(2);
    line_up(&[&a, &b], &before).await;
    let pass = a.admit_pass("main").await.unwrap();
    assert_eq!(pass.admitted, before);
    assert!(pass.admitted_elsewhere.is_empty(), "its own, not another's");
    // B's first pass hears nothing from before it.
    assert_eq!(b.admit_pass("main").await.unwrap(), PassReport::default());

    let second = ids(3);
    line_up(&[&a, &b], &second).await;
    let pass = b.admit_pass("main").await.unwrap();
    assert_eq!(pass.admitted, second, "B's own pass");
    assert!(
        pass.admitted_elsewhere.is_empty(),
        "A admitted nobody since"
    );
    let pass = a.admit_pass("main").await.unwrap();
    assert!(pass.admitted.is_empty());
    assert_eq!(pass.admitted_elsewhere, second, "B's, heard by A");
    assert!(heard(&a).await.is_empty(), "once");
    assert!(heard(&b).await.is_empty(), "not its own");

    // Seventy passes of A admit one each while B passes none: B hears the last 64 (what is
    // kept), oldest first; a replica started after them hears none.
    let mut one_by_one = Vec::new();
    for _ in 0..70 {
        let v = VisitorId::random();
        line_up(&[&a, &b], &[v]).await;
        assert_eq!(a.admit_pass("main").await.unwrap().admitted, vec![v]);
        one_by_one.push(v);
    }
    let [c] = replicas::<1>(&h).await;
    c.advance_clock_for_tests(Duration::from_millis(250) * 75);
    assert!(heard(&c).await.is_empty());
    assert_eq!(heard(&b).await, one_by_one[6..]);
    assert!(heard(&b).await.is_empty());
}

#[tokio::test]
async fn a_pass_hears_what_other_replicas_passes_admitted() {
    a_pass_hears_the_others_admissions(RedisHarness::single().await).await;
}

/// The stream shares the room's slot: the same on a Cluster.
#[tokio::test]
async fn a_pass_hears_what_other_replicas_passes_admitted_on_a_cluster() {
    a_pass_hears_the_others_admissions(RedisHarness::cluster().await).await;
}

/// Whatever else the stream holds (an entry written by hand, another version's) is passed
/// over: the pass itself never fails over it, and good entries around it are heard. And a
/// pass reads at most 20,000 ids of it, the newest.
#[tokio::test]
async fn a_foreign_entry_is_passed_over_and_a_pass_reads_at_most_20_000_ids() {
    let (server, a, b) = two_replicas().await;
    let (first, second) = (VisitorId::random(), VisitorId::random());
    line_up(&[&a, &b], &[first]).await;
    assert_eq!(a.admit_pass("main").await.unwrap().admitted, vec![first]);
    for entry in [["v", "seventeen bytes!!"], ["x", "y"]] {
        let mut args = vec!["XADD", "ar:{main}:admitted", "*"];
        args.extend_from_slice(&entry);
        server.cli(&args);
    }
    line_up(&[&a, &b], &[second]).await;
    assert_eq!(a.admit_pass("main").await.unwrap().admitted, vec![second]);
    assert_eq!(heard(&b).await, vec![first, second]);

    // Three passes of 8,000 each (as in passthrough) while B was away: B reads the newest
    // that fit in 20,000 ids, the last two, oldest first.
    let mut raw = raw(&server).await;
    let big: Vec<Vec<VisitorId>> = (0..3)
        .map(|_| (0..8_000).map(|_| VisitorId::random()).collect())
        .collect();
    for pass in &big {
        let packed: Vec<u8> = pass.iter().flat_map(|v| v.0).collect();
        let _: String = redis::cmd("XADD")
            .arg("ar:{main}:admitted")
            .arg("*")
            .arg("v")
            .arg(packed)
            .query_async(&mut raw)
            .await
            .unwrap();
    }
    let heard = heard(&b).await;
    assert_eq!(heard.len(), 16_000);
    assert!(heard[..8_000] == big[1] && heard[8_000..] == big[2]);
}

/// The stream lost and begun again behind a replica's cursor (a flush, a Redis restarted
/// without its data and with its clock behind) is heard from its start; a key of another
/// type where the stream should be fails no pass.
#[tokio::test]
async fn a_stream_begun_again_is_heard_and_a_broken_one_fails_no_pass() {
    let (server, a, b) = two_replicas().await;
    let first = VisitorId::random();
    line_up(&[&a, &b], &[first]).await;
    assert_eq!(a.admit_pass("main").await.unwrap().admitted, vec![first]);
    assert_eq!(heard(&b).await, vec![first]);

    // Begun again with ids far behind B's cursor.
    let mut raw = raw(&server).await;
    let again = VisitorId::random();
    let _: () = redis::pipe()
        .cmd("DEL")
        .arg("ar:{main}:admitted")
        .ignore()
        .cmd("XADD")
        .arg("ar:{main}:admitted")
        .arg("1-1")
        .arg("v")
        .arg(&again.0[..])
        .ignore()
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(heard(&b).await, vec![again]);

    // A string where the stream should be: every pass still admits, hearing nothing.
    server.cli(&["SET", "ar:{main}:admitted", "not a stream"]);
    let (second, third) = (VisitorId::random(), VisitorId::random());
    line_up(&[&a, &b], &[second]).await;
    assert_eq!(a.admit_pass("main").await.unwrap().admitted, vec![second]);
    assert!(heard(&b).await.is_empty());
    // Gone again: the stream starts anew and is heard.
    server.cli(&["DEL", "ar:{main}:admitted"]);
    b.admit_pass("main").await.unwrap();
    line_up(&[&a, &b], &[third]).await;
    assert_eq!(a.admit_pass("main").await.unwrap().admitted, vec![third]);
    assert_eq!(heard(&b).await, vec![third]);
}

/// A replica whose last pass is more than ten seconds old (cut off from Redis, or the room
/// removed and added back) reads from the stream's end, not what was admitted meanwhile:
/// by then the heartbeat has told those visitors, and some may be waiting again.
#[tokio::test]
async fn an_old_cursor_reads_from_the_end() {
    let (_server, a, b) = two_replicas().await;
    let (meanwhile, after) = (VisitorId::random(), VisitorId::random());
    line_up(&[&a, &b], &[meanwhile]).await;
    assert_eq!(
        a.admit_pass("main").await.unwrap().admitted,
        vec![meanwhile]
    );
    b.age_admitted_cursors_for_tests(Duration::from_secs(11));
    assert!(heard(&b).await.is_empty());
    line_up(&[&a, &b], &[after]).await;
    assert_eq!(a.admit_pass("main").await.unwrap().admitted, vec![after]);
    assert_eq!(heard(&b).await, vec![after]);
}
