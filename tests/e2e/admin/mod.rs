//! The admin API end to end: a real anteroom on loopback in front of a real origin, driven
//! by a real HTTP client with and without the admin token.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anteroom::admin;
use anteroom::run::Running;
use common::*;
use serde_json::{Value, json};

mod api;
mod listener;
mod metrics;
mod openapi;
mod outage;

use metrics::{parse_prometheus, sample};

/// A room that lets exactly one visitor in (the fast path) and then nobody for 100 s.
const ONE_THEN_QUEUE: &str = "    rate: 0.01\n    max_active: 1000";
const API: &str = "/__anteroom/admin/api";

struct Harness {
    _origin: Origin,
    dir: tempfile::TempDir,
    ar: Running,
    http: reqwest::Client,
}

impl Harness {
    async fn start(room_extra: &str) -> Harness {
        let origin = Origin::start().await;
        let dir = tempfile::tempdir().unwrap();
        let ar = start(&config(&origin.url(), dir.path(), room_extra)).await;
        Harness {
            _origin: origin,
            dir,
            ar,
            http: client(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.ar.addr)
    }

    fn api(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, self.url(&format!("{API}{path}")))
            .bearer_auth(ADMIN_TOKEN)
    }

    async fn get(&self, path: &str) -> Value {
        let response = self.api(reqwest::Method::GET, path).send().await.unwrap();
        assert_eq!(response.status(), 200, "GET {path}");
        assert_eq!(response.headers()["content-type"], "application/json");
        response.json().await.unwrap()
    }

    async fn post(&self, path: &str) -> reqwest::Response {
        self.api(reqwest::Method::POST, path).send().await.unwrap()
    }

    async fn put_config(&self, body: impl Into<reqwest::Body>) -> reqwest::Response {
        self.api(reqwest::Method::PUT, "/rooms/main/config")
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap()
    }

    async fn stats(&self) -> Value {
        self.get("/rooms/main/stats").await
    }

    /// Polls the room's cached stats until `ok` holds (or panics after a few seconds).
    async fn stats_until(&self, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
        self.stats_until_within(Duration::from_secs(5), what, ok)
            .await
    }

    /// [`Harness::stats_until`], panicking after `bound`.
    async fn stats_until_within(
        &self,
        bound: Duration,
        what: &str,
        ok: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + bound;
        loop {
            let stats = self.stats().await;
            if ok(&stats) {
                return stats;
            }
            assert!(Instant::now() < deadline, "{what}: last stats {stats}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the statistics cache has been read from the store again.
    async fn cache_refreshed(&self) {
        let cached = || self.ar.app.admission.cached_stats("main").unwrap().read_at;
        let before = cached();
        let deadline = Instant::now() + Duration::from_secs(5);
        while cached() == before {
            assert!(Instant::now() < deadline, "the statistics cache refreshes");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A visitor's request to the site, as a JSON client.
    async fn visit(&self, cookie: Option<&str>) -> (Value, Option<String>) {
        let mut request = self
            .http
            .get(self.url("/"))
            .header("accept", "application/json");
        if let Some(cookie) = cookie {
            request = request.header("cookie", format!("ar_visitor={cookie}"));
        }
        let response = request.send().await.unwrap();
        let cookie = visitor_cookie(&response);
        (response.json().await.unwrap(), cookie)
    }

    /// One visitor let in by the fast path, then `waiting` more in line.
    async fn fill(&self, waiting: u64) -> String {
        let (body, cookie) = self.visit(None).await;
        assert_eq!(body["origin"], true, "the first visitor is let straight in");
        for _ in 0..waiting {
            let (body, _) = self.visit(None).await;
            assert_eq!(body["status"], "waiting");
        }
        cookie.unwrap()
    }

    fn audit_lines(&self) -> Vec<Value> {
        match std::fs::read_to_string(self.dir.path().join("audit.log")) {
            Ok(text) => text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => panic!("{e}"),
        }
    }

    async fn store_settings(&self) -> anteroom::queue::RoomSettings {
        self.ar
            .app
            .admission
            .store_for_tests()
            .stats("main")
            .await
            .unwrap()
            .settings
    }
}

async fn problem(response: reqwest::Response) -> Value {
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    response.json().await.unwrap()
}
