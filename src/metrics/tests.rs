//! What the scrape says of this replica: its build and process, its listeners' open
//! connections and HTTP/2 streams, and the time in line of visitors a pass let out.

use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::{Listener, Metrics};
use crate::admission::Admission;
use crate::clock::Clock;
use crate::events::EventSink;
use crate::queue::conformance::{anyone, settings};
use crate::queue::{MemoryStore, QueueStore, RoomPolicy, SettingsPatch, VisitorId};
use crate::server::{ServerLimits, serve};

async fn metrics_on(store: Arc<MemoryStore>) -> (Arc<Admission>, Metrics) {
    let admission = Arc::new(Admission::new(store, None, EventSink::disabled()));
    let metrics = Metrics::new(admission.clone(), vec!["main".into()], false, None);
    (admission, metrics)
}

async fn room(rate: f64, max_active: u64) -> Arc<MemoryStore> {
    let store = Arc::new(MemoryStore::in_memory(Clock::starting_at(0)));
    store
        .open_room(
            "main",
            &settings(rate, max_active),
            &RoomPolicy::default(),
            false,
        )
        .await
        .unwrap();
    store
}

/// The value of the sample `series` (name and labels exactly as written) in `text`.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.trim().parse().unwrap())
}

#[tokio::test]
async fn the_build_and_the_process_are_in_the_scrape() {
    let (_, metrics) = metrics_on(room(1.0, 10).await).await;
    let text = metrics.render(0);
    let frontend = if crate::http::pages::FRONTEND_BUILT_IN {
        "built_in"
    } else {
        "plain"
    };
    let build = format!(
        "anteroom_build_info{{version=\"{}\",frontend=\"{frontend}\"}}",
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(value(&text, &build), Some(1.0), "{text}");
    assert!(text.contains("# TYPE anteroom_build_info gauge"));

    let open = value(&text, "process_open_fds").expect("open descriptors");
    let max = value(&text, "process_max_fds").expect("their limit");
    assert!(open >= 3.0 && open <= max, "{open} of {max}");
    let rss = value(&text, "process_resident_memory_bytes").unwrap();
    assert!(rss > 1e6, "a test binary holds more than a megabyte: {rss}");
    assert!(value(&text, "process_virtual_memory_bytes").unwrap() >= rss);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let started = value(&text, "process_start_time_seconds").unwrap();
    assert!(
        started <= now + 1.0 && started > now - 86_400.0,
        "started at {started}, now {now}"
    );
    // In ticks of 10 ms: a fresh test process may not have spent one yet.
    assert!(value(&text, "process_cpu_seconds_total").is_some_and(|s| s >= 0.0));
    // A descriptor opened now is counted by the next scrape.
    let files: Vec<_> = (0..20)
        .map(|_| std::fs::File::open("/proc/self/stat").unwrap())
        .collect();
    let more = value(&metrics.render(0), "process_open_fds").unwrap();
    assert!(
        more >= open + 20.0 - 5.0,
        "{more} after opening 20 more than {open}"
    );
    drop(files);
}

#[tokio::test(start_paused = true)]
async fn time_in_line_is_observed_when_a_pass_lets_a_visitor_out_of_the_line() {
    let store = room(1.0, 10).await;
    let (admission, metrics) = metrics_on(store.clone()).await;
    // The fast path (nobody waiting) is not a wait in line.
    let first = store.resolve("main", VisitorId::random(), anyone()).await;
    assert!(matches!(
        first,
        Ok(crate::queue::Resolution::Admitted { .. })
    ));
    store
        .update_settings("main", &SettingsPatch::pause())
        .await
        .unwrap();
    for _ in 0..3 {
        store
            .resolve("main", VisitorId::random(), anyone())
            .await
            .unwrap();
    }
    store
        .update_settings("main", &SettingsPatch::resume())
        .await
        .unwrap();
    let series = "anteroom_time_in_line_seconds_count{room=\"main\"}";
    assert_eq!(
        value(&metrics.render(0), series),
        None,
        "nobody let out yet"
    );
    tokio::time::advance(Duration::from_secs(5)).await;
    let report = admission.admit_pass("main").await.unwrap();
    assert_eq!(report.admitted.len(), 1, "one second's burst at 1 a second");
    let text = metrics.render(0);
    assert_eq!(value(&text, series), Some(1.0), "{text}");
    assert_eq!(
        value(&text, "anteroom_time_in_line_seconds_sum{room=\"main\"}"),
        Some(5.0)
    );
    let bucket = |le: &str| {
        value(
            &text,
            &format!("anteroom_time_in_line_seconds_bucket{{room=\"main\",le=\"{le}\"}}"),
        )
    };
    assert_eq!(bucket("4"), Some(0.0), "{text}");
    assert_eq!(bucket("8"), Some(1.0), "{text}");
    tokio::time::advance(Duration::from_secs(2)).await;
    admission.admit_pass("main").await.unwrap();
    let text = metrics.render(0);
    assert_eq!(value(&text, series), Some(2.0), "{text}");
    assert_eq!(
        value(&text, "anteroom_time_in_line_seconds_sum{room=\"main\"}"),
        Some(12.0),
        "waits of 5 s and 7 s"
    );
}

/// Polls `metrics` until `series` reads `want` (the accept loop runs on its own task).
async fn until(metrics: &Metrics, series: &str, want: f64) {
    for _ in 0..500 {
        if value(&metrics.render(0), series) == Some(want) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{series} never read {want}:\n{}", metrics.render(0));
}

#[tokio::test]
async fn listeners_count_their_open_connections_http2_streams_and_closes() {
    let (_, metrics) = metrics_on(room(1.0, 10).await).await;
    let metrics = Arc::new(metrics);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // Every answer waits until `release` is sent: its stream stays open until then.
    let (release, released) = watch::channel(false);
    let handler = move |_req: Request<hyper::body::Incoming>, _peer| {
        let mut released = released.clone();
        async move {
            let _ = released.wait_for(|&r| r).await;
            Response::new(crate::http::body::full("done"))
        }
    };
    let limits = ServerLimits {
        census: metrics.census(Listener::Public),
        ..ServerLimits::default()
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let served = tokio::spawn(serve(
        listener,
        limits,
        handler,
        stop.clone().cancelled_owned(),
    ));
    let connections = "anteroom_open_connections{listener=\"public\"}";
    let streams = "anteroom_open_http2_streams{listener=\"public\"}";
    until(&metrics, connections, 0.0).await;
    until(
        &metrics,
        "anteroom_open_connections{listener=\"admin\"}",
        0.0,
    )
    .await;

    let plain = tokio::net::TcpStream::connect(addr).await.unwrap();
    until(&metrics, connections, 1.0).await;
    let (mut sender, conn) = anteroom_fixtures::h2c_client(addr).await;
    let mut requests = Vec::new();
    for _ in 0..3 {
        let request = Request::get(format!("http://{addr}/"))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        requests.push(tokio::spawn(sender.send_request(request)));
    }
    until(&metrics, connections, 2.0).await;
    until(&metrics, streams, 3.0).await;
    assert_eq!(
        value(
            &metrics.render(0),
            "anteroom_open_http2_streams{listener=\"admin\"}"
        ),
        Some(0.0)
    );

    release.send(true).unwrap();
    for request in requests {
        let response = request.await.unwrap().unwrap();
        http_body_util::BodyExt::collect(response.into_body())
            .await
            .unwrap();
    }
    until(&metrics, streams, 0.0).await;
    drop(plain);
    drop(sender);
    let _ = conn.await;
    until(&metrics, connections, 0.0).await;
    // Both closed by their clients: no reason of the server's counted.
    let closed = |listener: &str, reason: &str| {
        format!("anteroom_connections_closed_total{{listener=\"{listener}\",reason=\"{reason}\"}}")
    };
    for listener in ["public", "admin"] {
        for reason in crate::server::Closed::ALL {
            let series = closed(listener, reason.as_str());
            assert_eq!(value(&metrics.render(0), &series), Some(0.0), "{series}");
        }
    }
    // A head over the limit is closed by the server, and counted on its listener.
    let mut big = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(64 * 1024)
    );
    let _ = tokio::io::AsyncWriteExt::write_all(&mut big, head.as_bytes()).await;
    until(&metrics, &closed("public", "head_too_large"), 1.0).await;
    assert_eq!(
        value(&metrics.render(0), &closed("admin", "head_too_large")),
        Some(0.0)
    );
    stop.cancel();
    served.await.unwrap().unwrap();
}
