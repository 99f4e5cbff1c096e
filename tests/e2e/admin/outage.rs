//! A store outage, a streamed body over the cap, readiness through an outage and a drain.

use super::*;

/// The embedded store behind a switch: while `down`, every operation is `Unavailable`.
struct Switchable {
    inner: anteroom::queue::MemoryStore,
    down: std::sync::atomic::AtomicBool,
}

impl Switchable {
    fn check(&self) -> anteroom::queue::StoreResult<()> {
        if self.down.load(std::sync::atomic::Ordering::SeqCst) {
            Err(anteroom::queue::StoreError::Unavailable(
                "switched off by the test".into(),
            ))
        } else {
            Ok(())
        }
    }
}

#[async_trait::async_trait]
impl anteroom::queue::QueueStore for Switchable {
    async fn open_room(
        &self,
        room: &str,
        seed: &anteroom::queue::RoomSettings,
        policy: &anteroom::queue::RoomPolicy,
        reseed: bool,
    ) -> anteroom::queue::StoreResult<anteroom::queue::Seeded> {
        self.check()?;
        self.inner.open_room(room, seed, policy, reseed).await
    }
    async fn resolve_with(
        &self,
        room: &str,
        visitor: anteroom::queue::VisitorId,
        client: anteroom::queue::ClientKey,
        join: anteroom::queue::Join,
    ) -> anteroom::queue::StoreResult<anteroom::queue::Resolution> {
        self.check()?;
        self.inner.resolve_with(room, visitor, client, join).await
    }
    async fn queue(
        &self,
        room: &str,
        query: anteroom::queue::QueueQuery,
    ) -> anteroom::queue::StoreResult<Vec<anteroom::queue::WaitingEntry>> {
        self.check()?;
        self.inner.queue(room, query).await
    }
    async fn move_to_front(
        &self,
        room: &str,
        reference: anteroom::queue::VisitorRef,
    ) -> anteroom::queue::StoreResult<anteroom::queue::Place> {
        self.check()?;
        self.inner.move_to_front(room, reference).await
    }
    async fn end_session(
        &self,
        room: &str,
        visitor: anteroom::queue::VisitorId,
    ) -> anteroom::queue::StoreResult<bool> {
        self.check()?;
        self.inner.end_session(room, visitor).await
    }
    async fn spend_grant(
        &self,
        room: &str,
        nonce: &str,
        visitor: anteroom::queue::VisitorId,
        expires_at_ms: u64,
    ) -> anteroom::queue::StoreResult<anteroom::queue::GrantUse> {
        self.check()?;
        self.inner
            .spend_grant(room, nonce, visitor, expires_at_ms)
            .await
    }
    async fn release_grant(
        &self,
        room: &str,
        nonce: &str,
        visitor: anteroom::queue::VisitorId,
    ) -> anteroom::queue::StoreResult<()> {
        self.check()?;
        self.inner.release_grant(room, nonce, visitor).await
    }
    async fn resolve_spending(
        &self,
        room: &str,
        visitor: anteroom::queue::VisitorId,
        client: anteroom::queue::ClientKey,
        challenge: anteroom::queue::ChallengeSpend<'_>,
    ) -> anteroom::queue::StoreResult<anteroom::queue::Spent> {
        self.check()?;
        self.inner
            .resolve_spending(room, visitor, client, challenge)
            .await
    }
    async fn touch_sessions(
        &self,
        room: &str,
        visitors: &[anteroom::queue::VisitorId],
    ) -> anteroom::queue::StoreResult<Vec<bool>> {
        self.check()?;
        self.inner.touch_sessions(room, visitors).await
    }
    async fn heartbeat(
        &self,
        room: &str,
        visitors: &[anteroom::queue::VisitorId],
    ) -> anteroom::queue::StoreResult<Vec<anteroom::queue::VisitorState>> {
        self.check()?;
        self.inner.heartbeat(room, visitors).await
    }
    async fn admit_pass(
        &self,
        room: &str,
    ) -> anteroom::queue::StoreResult<anteroom::queue::PassReport> {
        self.check()?;
        self.inner.admit_pass(room).await
    }
    async fn stats(&self, room: &str) -> anteroom::queue::StoreResult<anteroom::queue::RoomStats> {
        self.check()?;
        self.inner.stats(room).await
    }
    async fn draw(
        &self,
        room: &str,
        hashes: bool,
    ) -> anteroom::queue::StoreResult<anteroom::queue::DrawRecord> {
        self.check()?;
        self.inner.draw(room, hashes).await
    }
    async fn update_settings(
        &self,
        room: &str,
        patch: &anteroom::queue::SettingsPatch,
    ) -> anteroom::queue::StoreResult<anteroom::queue::RoomSettings> {
        self.check()?;
        self.inner.update_settings(room, patch).await
    }
    async fn flush(&self, room: &str) -> anteroom::queue::StoreResult<u64> {
        self.check()?;
        self.inner.flush(room).await
    }
    async fn ping(&self) -> anteroom::queue::StoreResult<()> {
        self.check()
    }
    async fn persist(&self) -> anteroom::queue::StoreResult<()> {
        Ok(())
    }
}

#[tokio::test]
async fn through_a_store_outage_status_and_metrics_answer_and_changes_are_refused() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&origin.url(), dir.path(), ONE_THEN_QUEUE);
    cfg.fail_open = true;
    cfg.fail_open_after = Duration::from_millis(600);
    let store = std::sync::Arc::new(Switchable {
        inner: anteroom::queue::MemoryStore::in_memory(anteroom::clock::Clock::system()),
        down: false.into(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ar = anteroom::run::start(&cfg, store.clone(), listener, false)
        .await
        .unwrap();
    let h = Harness {
        _origin: origin,
        dir,
        ar,
        http: client(),
    };
    h.fill(2).await;
    h.stats_until("two waiting", |s| s["waiting"] == 2).await;

    store.down.store(true, std::sync::atomic::Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        let status = h.get("/status").await;
        if status["fail_open"]["active"] == true {
            break status;
        }
        assert!(Instant::now() < deadline, "never failed open: {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status["store"]["up"], false);
    assert!(status["store"]["down_for_secs"].as_f64().unwrap() >= 0.6);
    assert_eq!(status["fail_open"]["enabled"], true);

    // The last known counters, from the cache.
    let stats = h.stats().await;
    assert_eq!(stats["waiting"], 2);
    let metrics = h
        .api(reqwest::Method::GET, "/metrics")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let (_, samples) = parse_prometheus(&metrics);
    let main = [("room", "main")];
    assert_eq!(sample(&samples, "anteroom_waiting", &main), Some(2.0));
    assert_eq!(sample(&samples, "anteroom_store_up", &[]), Some(0.0));
    assert_eq!(sample(&samples, "anteroom_fail_open", &[]), Some(1.0));
    assert!(sample(&samples, "anteroom_store_down_seconds", &[]).unwrap() >= 0.6);

    // Changes cannot reach the store: 503, stalled, nothing audited.
    for response in [
        h.post("/rooms/main/pause").await,
        h.post("/rooms/main/flush").await,
        h.put_config(r#"{"rate": 3}"#).await,
    ] {
        assert_eq!(response.status(), 503);
        assert_eq!(status_header(&response).as_deref(), Some("stalled"));
        problem(response).await;
    }
    assert!(h.audit_lines().is_empty());

    // Back up: health recovers, nothing was changed.
    store.down.store(false, std::sync::atomic::Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(5);
    while h.get("/status").await["store"]["up"] != true {
        assert!(Instant::now() < deadline, "store never came back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let settings = h.store_settings().await;
    assert!(!settings.paused);
    assert_eq!(settings.rate, 0.01);
    h.ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_streamed_body_over_the_cap_is_refused() {
    let h = Harness::start("").await;
    let before = h.store_settings().await;
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        std::iter::once(Ok(b"{\"rate\": 5, \"pad\": \"".to_vec()))
            .chain((0..80).map(|_| Ok(vec![b'x'; 1024])))
            .chain(std::iter::once(Ok(b"\"}".to_vec())))
            .collect();
    let body = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
    let response = h.put_config(body).await;
    assert_eq!(response.status(), 413);
    // The rest of the body is not read: the connection is not offered for reuse.
    assert_eq!(response.headers()["connection"], "close");
    assert_eq!(problem(response).await["field"], "body");
    assert_eq!(h.store_settings().await, before);
    h.ar.shutdown().await.unwrap();
}

impl Harness {
    async fn readyz(&self) -> u16 {
        self.http
            .get(self.url("/__anteroom/readyz"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }

    /// Polls readiness until it answers `status`, within a second and a half: one ping of
    /// the store answers for `PING_REUSE`.
    async fn readyz_becomes(&self, status: u16) {
        let what = format!("readyz {status}");
        poll_until(Duration::from_millis(1500), &what, async || {
            (self.readyz().await == status).then_some(())
        })
        .await;
    }
}

/// How long the [`Switchable`] store's outage lasts before failing open, when it does.
const FAIL_OPEN_AFTER: Duration = Duration::from_secs(2);

/// An anteroom on a [`Switchable`] store, failing open after [`FAIL_OPEN_AFTER`] when
/// `fail_open`.
async fn on_switchable(fail_open: bool) -> (Harness, std::sync::Arc<Switchable>) {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&origin.url(), dir.path(), ONE_THEN_QUEUE);
    cfg.fail_open = fail_open;
    cfg.fail_open_after = FAIL_OPEN_AFTER;
    let store = std::sync::Arc::new(Switchable {
        inner: anteroom::queue::MemoryStore::in_memory(anteroom::clock::Clock::system()),
        down: false.into(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ar = anteroom::run::start(&cfg, store.clone(), listener, false)
        .await
        .unwrap();
    let h = Harness {
        _origin: origin,
        dir,
        ar,
        http: client(),
    };
    (h, store)
}

#[tokio::test]
async fn readyz_through_an_outage_with_fail_open_is_503_only_until_failing_open() {
    let (h, store) = on_switchable(true).await;
    assert_eq!(h.readyz().await, 200);
    let down_at = Instant::now();
    store.down.store(true, std::sync::atomic::Ordering::SeqCst);
    // Down but not yet failing open: out of rotation as soon as a ping tells (one answers
    // for `PING_REUSE`).
    h.readyz_becomes(503).await;
    assert!(
        down_at.elapsed() < FAIL_OPEN_AFTER,
        "503 before failing open"
    );
    // Failing open on purpose: every replica sees the same outage, so all stay in.
    let deadline = Instant::now() + Duration::from_secs(5);
    while h.readyz().await != 200 {
        assert!(
            Instant::now() < deadline,
            "readyz never recovered while failing open"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(down_at.elapsed() >= FAIL_OPEN_AFTER);
    assert_eq!(h.get("/status").await["fail_open"]["active"], true);
    // Visitors are proxied meanwhile.
    let response = h.http.get(h.url("/")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    store.down.store(false, std::sync::atomic::Ordering::SeqCst);
    h.readyz_becomes(200).await;
    h.ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn readyz_through_an_outage_without_fail_open_stays_503() {
    let (h, store) = on_switchable(false).await;
    assert_eq!(h.readyz().await, 200);
    let down_at = Instant::now();
    store.down.store(true, std::sync::atomic::Ordering::SeqCst);
    h.readyz_becomes(503).await;
    // Well past what fail_open_after would be: still 503, since nobody is let through.
    while down_at.elapsed() < FAIL_OPEN_AFTER + Duration::from_millis(500) {
        assert_eq!(h.readyz().await, 503);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(h.http.get(h.url("/")).send().await.unwrap().status(), 503);
    store.down.store(false, std::sync::atomic::Ordering::SeqCst);
    h.readyz_becomes(200).await;
    h.ar.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_drain_turns_readyz_503_at_once_and_serves_for_the_drain_delay() {
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&origin.url(), dir.path(), "");
    cfg.server.drain_delay = Duration::from_millis(800);
    let ar = start(&cfg).await;
    let addr = ar.addr;
    let http = client();
    let url = |p: &str| format!("http://{addr}{p}");
    assert_eq!(
        http.get(url("/__anteroom/readyz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );

    let stop = ar.stop_handle();
    let draining_at = Instant::now();
    stop.cancel();
    let done = tokio::spawn(ar.wait());
    // Readiness is 503 at once (a fresh connection, so it is the listener that answers).
    let fresh = client();
    let ready = fresh.get(url("/__anteroom/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    assert_eq!(ready.text().await.unwrap(), "draining\n");
    assert!(draining_at.elapsed() < Duration::from_millis(100));
    // ...while the site is still served, on new connections too, for the delay.
    let before = origin.hits();
    let page = client().get(url("/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(origin.hits(), before + 1);
    assert!(draining_at.elapsed() < Duration::from_millis(800));
    // After the delay the listener closes and the instance stops.
    done.await.unwrap().unwrap();
    assert!(draining_at.elapsed() >= Duration::from_millis(800));
    assert!(
        client().get(url("/")).send().await.is_err(),
        "listener closed"
    );
}
