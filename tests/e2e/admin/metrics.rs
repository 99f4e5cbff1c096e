//! The Prometheus text and the honest-ETA report, as a scraper and the stats read them.

use super::*;

/// One sample of the Prometheus text format.
#[derive(Debug)]
pub(super) struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A small parser for the Prometheus text exposition format (0.0.4): `# HELP` and `# TYPE`
/// lines, then `name{label="value",...} value` samples. Panics on anything malformed.
pub(super) fn parse_prometheus(text: &str) -> (BTreeMap<String, String>, Vec<Sample>) {
    fn is_name(s: &str) -> bool {
        let mut chars = s.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    }
    let mut types = BTreeMap::new();
    let mut samples = Vec::new();
    for line in text.lines() {
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            assert!(is_name(name), "{line}");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "{line}"
            );
            assert!(
                types.insert(name.to_owned(), kind.to_owned()).is_none(),
                "one TYPE per family: {line}"
            );
            continue;
        }
        if line.starts_with("# HELP ") || line == "# EOF" {
            continue;
        }
        assert!(!line.starts_with('#'), "unknown comment {line}");
        let (series, value) = line.rsplit_once(' ').expect("a sample has a value");
        let value = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("value in {line}")),
        };
        let (name, labels) = match series.split_once('{') {
            None => (series, BTreeMap::new()),
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').expect("labels end with }");
                let mut labels = BTreeMap::new();
                let mut rest = body;
                while !rest.is_empty() {
                    let (key, after) = rest.split_once("=\"").expect("label=\"value\"");
                    assert!(is_name(key), "label name {key} in {line}");
                    let mut value = String::new();
                    let mut chars = after.char_indices();
                    let end = loop {
                        match chars.next().expect("closing quote") {
                            (i, '"') => break i,
                            (_, '\\') => match chars.next().unwrap().1 {
                                'n' => value.push('\n'),
                                c => value.push(c),
                            },
                            (_, c) => value.push(c),
                        }
                    };
                    labels.insert(key.to_owned(), value);
                    rest = after[end + 1..].trim_start_matches(',');
                }
                (name, labels)
            }
        };
        assert!(is_name(name), "{line}");
        samples.push(Sample {
            name: name.to_owned(),
            labels,
            value,
        });
    }
    // Every sample belongs to a declared family.
    for s in &samples {
        let family = [&s.name[..]]
            .into_iter()
            .chain(
                ["_bucket", "_sum", "_count"]
                    .iter()
                    .filter_map(|suffix| s.name.strip_suffix(suffix)),
            )
            .find(|n| types.contains_key(*n));
        assert!(family.is_some(), "{} has no TYPE", s.name);
    }
    (types, samples)
}

pub(super) fn sample(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let want: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    samples
        .iter()
        .find(|s| s.name == name && s.labels == want)
        .map(|s| s.value)
}

#[tokio::test]
async fn metrics_parse_as_prometheus_text_with_the_room_counters() {
    let h = Harness::start(ONE_THEN_QUEUE).await;
    h.fill(3).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    let (types, samples, text) = loop {
        let response = h
            .api(reqwest::Method::GET, "/metrics")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(
            response.headers()["content-type"],
            "text/plain; version=0.0.4; charset=utf-8"
        );
        let text = response.text().await.unwrap();
        let (types, samples) = parse_prometheus(&text);
        if sample(&samples, "anteroom_waiting", &[("room", "main")]) == Some(3.0) {
            break (types, samples, text);
        }
        assert!(Instant::now() < deadline, "never 3 waiting:\n{text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        text.contains("anteroom_waiting{room=\"main\"} 3\n"),
        "{text}"
    );
    let main = [("room", "main")];
    let expect = [
        ("anteroom_active", &main[..], 1.0),
        ("anteroom_max_active", &main[..], 1000.0),
        ("anteroom_rate", &main[..], 0.01),
        ("anteroom_paused", &main[..], 0.0),
        ("anteroom_joined_total", &main[..], 3.0),
        ("anteroom_admitted_total", &main[..], 1.0),
        ("anteroom_expired_total", &main[..], 0.0),
        ("anteroom_abandoned_total", &main[..], 0.0),
        ("anteroom_refused_total", &main[..], 0.0),
        ("anteroom_session_ttl_seconds", &main[..], 300.0),
        ("anteroom_store_up", &[][..], 1.0),
        ("anteroom_events_dropped_total", &[][..], 0.0),
        ("anteroom_events_published_total", &[][..], 0.0),
        ("anteroom_fail_open", &[][..], 0.0),
        ("anteroom_fail_open_enabled", &[][..], 0.0),
        ("anteroom_sse_streams", &[][..], 0.0),
        (
            "anteroom_proxy_request_duration_seconds_count",
            &[("room", "main"), ("status_class", "2xx")][..],
            1.0,
        ),
    ];
    for (name, labels, value) in expect {
        assert_eq!(
            sample(&samples, name, labels),
            Some(value),
            "{name}{labels:?} in\n{text}"
        );
    }
    assert_eq!(types["anteroom_joined_total"], "counter");
    assert_eq!(types["anteroom_waiting"], "gauge");
    assert_eq!(
        types["anteroom_proxy_request_duration_seconds"],
        "histogram"
    );
    assert!(
        sample(&samples, "anteroom_admission_pass_seconds", &main).is_some(),
        "the last pass's duration"
    );
    // Histogram buckets are cumulative and end at +Inf = count.
    let buckets: Vec<f64> = samples
        .iter()
        .filter(|s| {
            s.name == "anteroom_proxy_request_duration_seconds_bucket"
                && s.labels.get("status_class").map(String::as_str) == Some("2xx")
        })
        .map(|s| s.value)
        .collect();
    assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");
    assert_eq!(buckets.last(), Some(&1.0));
    // What operators watch of the replica, in the same text: its build, its process, what
    // its listener has open (this scrape's own connection at least).
    assert_eq!(
        types["anteroom_build_info"], "gauge",
        "the build's labels, value 1"
    );
    assert!(
        samples
            .iter()
            .any(|s| s.name == "anteroom_build_info" && s.value == 1.0),
        "{text}"
    );
    let public = [("listener", "public")];
    assert!(sample(&samples, "anteroom_open_connections", &public).is_some_and(|n| n >= 1.0));
    assert_eq!(
        sample(&samples, "anteroom_open_http2_streams", &public),
        Some(0.0)
    );
    let fds = sample(&samples, "process_open_fds", &[]).unwrap();
    assert!(fds > 0.0 && fds < sample(&samples, "process_max_fds", &[]).unwrap());
    h.ar.shutdown().await.unwrap();
}

/// The honest ETA end to end: `eta` in the room's stats and in each room of the list, with the
/// fields the OpenAPI document gives (both ways), and the `anteroom_eta_*` metrics, before
/// anyone shown a range is admitted and after some are. Forty join a paused room at 4 a
/// second: nothing has been seen of the line, so everyone is told "estimating" (no
/// promise). After the resume the room sees its line move; once it has seen enough it
/// promises ranges, the visitors still waiting are shown one when they ask again, and their
/// admissions are what the report and the metrics count.
#[tokio::test]
async fn eta_is_in_the_stats_and_the_metrics() {
    let h = Harness::start("    rate: 4\n    max_active: 100000\n    abandon_after: 1h").await;
    assert_eq!(h.post("/rooms/main/pause").await.status(), 200);
    let mut cookies = Vec::new();
    for _ in 0..40 {
        let (body, cookie) = h.visit(None).await;
        assert_eq!(body["status"], "waiting", "{body}");
        cookies.push(cookie.unwrap());
    }
    h.post("/rooms/main/resume").await;
    h.cache_refreshed().await;
    let (body, _) = h.visit(Some(&cookies[39])).await;
    assert_eq!(
        body["eta_secs"]["estimating"], true,
        "nothing seen yet: {body}"
    );
    assert_eq!(h.stats().await["estimating"], true);
    let metrics = || async {
        let response = h
            .api(reqwest::Method::GET, "/metrics")
            .send()
            .await
            .unwrap();
        let text = response.text().await.unwrap();
        let (types, samples) = parse_prometheus(&text);
        (types, samples, text)
    };
    let main = [("room", "main")];
    let stats = h.stats().await;
    assert_eq!(
        stats["eta"],
        json!({"admitted": 0, "within_range": null, "median_error_secs": null})
    );
    assert_eq!(stats["eta_revised"], 0);
    let (_, samples, text) = metrics().await;
    assert_eq!(
        sample(&samples, "anteroom_eta_admitted", &main),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        sample(&samples, "anteroom_eta_forgotten_total", &main),
        Some(0.0),
        "{text}"
    );
    assert!(
        !text.contains("anteroom_eta_within_range_ratio{"),
        "nobody yet:\n{text}"
    );

    // The stats carry exactly the fields the document describes, and `eta` its own.
    let doc: Value = serde_json::from_str(admin::openapi_json()).unwrap();
    let schema = &doc["components"]["schemas"];
    let keys = |v: &Value| {
        v.as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect::<BTreeSet<_>>()
    };
    assert_eq!(keys(&stats), keys(&schema["RoomStats"]["properties"]));
    assert_eq!(
        keys(&stats["eta"]),
        keys(&schema["EtaReport"]["properties"])
    );
    assert_eq!(
        schema["RoomStats"]["properties"]["eta"]["$ref"],
        "#/components/schemas/EtaReport"
    );

    // 10 admissions over 5 s of a waiting line: the room promises ranges, and those still
    // waiting get one when they next ask.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut promised = 0;
    while promised == 0 {
        assert!(Instant::now() < deadline, "the room stopped estimating");
        tokio::time::sleep(Duration::from_millis(200)).await;
        for cookie in &cookies {
            let (body, _) = h.visit(Some(cookie)).await;
            if body["status"] == "waiting" && body["eta_secs"]["estimating"].is_null() {
                let (min, max) = (&body["eta_secs"]["min"], &body["eta_secs"]["max"]);
                assert!(min.as_u64().unwrap() <= max.as_u64().unwrap(), "{body}");
                promised += 1;
            }
        }
    }
    let stats = h
        .stats_until_within(
            Duration::from_secs(15),
            "those promised are admitted",
            |s| s["eta"]["admitted"] == promised && s["waiting"] == 0,
        )
        .await;
    assert_eq!(stats["estimating"], false, "{stats}");
    let within = stats["eta"]["within_range"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&within), "{stats}");
    let median = stats["eta"]["median_error_secs"].as_f64().unwrap();
    let rooms = h.get("/rooms").await;
    assert_eq!(rooms["rooms"][0]["eta"], stats["eta"]);

    let (types, samples, text) = metrics().await;
    assert_eq!(
        sample(&samples, "anteroom_eta_admitted", &main),
        Some(promised as f64),
        "{text}"
    );
    // The stats' JSON and the metrics' text print the ratio each their own way: equal to
    // the last digit or so.
    assert!(
        sample(&samples, "anteroom_eta_within_range_ratio", &main)
            .is_some_and(|r| (r - within).abs() < 1e-9),
        "{within} in the stats: {text}"
    );
    assert_eq!(
        sample(&samples, "anteroom_eta_median_error_seconds", &main),
        Some(median),
        "{text}"
    );
    for name in [
        "anteroom_eta_admitted",
        "anteroom_eta_within_range_ratio",
        "anteroom_eta_median_error_seconds",
    ] {
        assert_eq!(types[name], "gauge", "{name}");
    }
    assert_eq!(types["anteroom_eta_forgotten_total"], "counter");
    assert_eq!(types["anteroom_eta_revised_total"], "counter");
    h.ar.shutdown().await.unwrap();
}
