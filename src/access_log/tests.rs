//! The line's format, decisions, targets and the writer thread.

use super::*;
use crate::queue::VisitorId;

fn started(uri: &str) -> Started {
    Started {
        time: SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
        at: Instant::now(),
        request_id: HeaderValue::from_static("0123abcd"),
        client: "203.0.113.7".parse().unwrap(),
        peer: "10.0.0.2:51234".parse().unwrap(),
        method: Method::GET,
        host: Some("shop.example:8080".into()),
        path: path_of(&uri.parse().unwrap()),
        room: Some(1),
        reference: None,
        user_agent: Some(HeaderValue::from_static("Mozilla/5.0 (X11; Linux x86_64)")),
        referer: Some(HeaderValue::from_static(
            "https://shop.example/launch?ar_grant=v1.secret#top",
        )),
        version: Version::HTTP_2,
    }
}

fn line(entry: &Entry) -> serde_json::Value {
    let mut out = Vec::new();
    entry.write_json(&mut out, &["a".into(), "main".into()]);
    assert_eq!(out.last(), Some(&b'\n'));
    assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 1);
    serde_json::from_slice(&out).unwrap()
}

#[test]
fn a_line_is_one_json_object_with_every_field() {
    let visitor = VisitorId::random();
    let mut s = started("/checkout/pay?ar_grant=v1.secret&token=abc");
    s.reference = Some(visitor.reference());
    let entry = Entry {
        started: s,
        class: "page",
        decision: "admitted",
        status: 200,
        bytes: 1234,
        duration: Duration::from_micros(12_345),
        origin: Some(Duration::from_micros(9_876)),
        completed: true,
    };
    let v = line(&entry);
    assert_eq!(v["time"], "2023-11-14T22:13:20.123Z");
    assert_eq!(v["request_id"], "0123abcd");
    assert_eq!(v["client"], "203.0.113.7");
    assert_eq!(v["peer"], "10.0.0.2:51234");
    assert_eq!(v["method"], "GET");
    assert_eq!(v["host"], "shop.example:8080");
    assert_eq!(
        v["path"], "/checkout/pay",
        "the query never lands in the log"
    );
    assert_eq!(v["room"], "main");
    assert_eq!(v["class"], "page");
    assert_eq!(v["decision"], "admitted");
    assert_eq!(v["status"], 200);
    assert_eq!(v["bytes"], 1234);
    assert_eq!(v["duration_ms"], 12.345);
    assert_eq!(v["origin_ms"], 9.876);
    assert_eq!(v["protocol"], "HTTP/2");
    assert_eq!(v["user_agent"], "Mozilla/5.0 (X11; Linux x86_64)");
    assert_eq!(
        v["referer"], "https://shop.example/launch",
        "nor the referer's query or fragment"
    );
    assert_eq!(v["ref"], visitor.reference().as_str());
    assert_eq!(v["completed"], true);
    let text = v.to_string();
    assert!(!text.contains("secret") && !text.contains("token"));
    assert!(!text.contains(&visitor.to_hex()), "never the visitor id");
}

#[test]
fn missing_parts_are_null_and_paths_are_bounded_and_escaped() {
    let mut s = started("/");
    s.host = None;
    s.room = None;
    s.path = path_of(&format!("/{}", "a".repeat(5000)).parse().unwrap());
    assert_eq!(s.path.len(), MAX_PATH);
    s.path = "/\"quoted\"\\%0a".into();
    s.user_agent = None;
    s.referer = None;
    s.version = Version::HTTP_11;
    let entry = Entry {
        started: s,
        class: "invalid",
        decision: "error",
        status: 400,
        bytes: 0,
        duration: Duration::ZERO,
        origin: None,
        completed: false,
    };
    let v = line(&entry);
    assert!(v["host"].is_null() && v["room"].is_null() && v["ref"].is_null());
    assert!(v["origin_ms"].is_null(), "not proxied: no origin time");
    assert_eq!(v["path"], "/\"quoted\"\\%0a");
    assert_eq!(v["completed"], false);
    assert!(v["user_agent"].is_null() && v["referer"].is_null());
    assert_eq!(v["protocol"], "HTTP/1.1");
}

#[test]
fn hostile_header_values_are_cut_and_escaped_never_breaking_the_line() {
    let mut s = started("/");
    // What HTTP lets through in a header value: tabs, quotes, backslashes, bytes that are
    // not UTF-8; and far more of it than anyone needs.
    let mut hostile = b"evil\t\"\\\xff\xfe".to_vec();
    hostile.extend(std::iter::repeat_n(b'A', 10_000));
    s.user_agent = Some(HeaderValue::from_bytes(&hostile).unwrap());
    s.referer = Some(HeaderValue::from_bytes(b"x\"}{\"status\":1\t").unwrap());
    let entry = Entry {
        started: s,
        class: "page",
        decision: "waiting",
        status: 200,
        bytes: 0,
        duration: Duration::ZERO,
        origin: None,
        completed: true,
    };
    let v = line(&entry);
    let ua = v["user_agent"].as_str().unwrap();
    assert!(ua.starts_with("evil\t\"\\\u{fffd}\u{fffd}AAA"), "{ua:?}");
    assert!(ua.len() <= MAX_HEADER + 6, "bounded: {} bytes", ua.len());
    assert_eq!(v["referer"], "x\"}{\"status\":1\t");
    assert_eq!(v["status"], 200, "a value cannot forge another field");
    let mut out = Vec::new();
    entry.write_json(&mut out, &[]);
    assert!(
        out[..out.len() - 1].iter().all(|&b| b >= 0x20),
        "no raw control character in the line"
    );
}

#[test]
fn decisions_come_from_the_answer() {
    let ok = StatusCode::OK;
    let hv = HeaderValue::from_static;
    assert_eq!(decision_of("page", true, None, None, ok), "admitted");
    assert_eq!(decision_of("bypass", true, None, None, ok), "passed");
    assert_eq!(decision_of("preflight", true, None, None, ok), "passed");
    // The origin's own X-Anteroom-Status means nothing: it was proxied.
    let banned = hv("banned");
    assert_eq!(
        decision_of("page", true, None, Some(&banned), ok),
        "admitted"
    );
    assert_eq!(
        decision_of("page", true, Some(Noted::FAIL_OPEN), None, ok),
        "fail_open"
    );
    let busy = StatusCode::SERVICE_UNAVAILABLE;
    assert_eq!(
        decision_of("asset", false, Some(Noted::BUSY), None, busy),
        "busy"
    );
    for s in VISITOR_STATUSES {
        let v = hv(s.as_str());
        assert_eq!(decision_of("page", false, None, Some(&v), ok), s.as_str());
    }
    let odd = hv("odd");
    assert_eq!(decision_of("page", false, None, Some(&odd), ok), "served");
    assert_eq!(decision_of("health", false, None, None, ok), "served");
    let not_found = StatusCode::NOT_FOUND;
    assert_eq!(
        decision_of("reserved", false, None, None, not_found),
        "error"
    );
}

#[test]
fn targets_parse_and_bad_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(Target::parse("off").unwrap(), Target::Off);
    assert_eq!(Target::parse("").unwrap(), Target::Off);
    assert_eq!(Target::parse(" stdout ").unwrap(), Target::Stdout);
    let path = dir.path().join("access.log");
    assert_eq!(
        Target::parse(path.to_str().unwrap()).unwrap(),
        Target::File(path.clone())
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let e = Target::parse(dir.path().to_str().unwrap()).unwrap_err();
    assert!(e.0.contains("is a directory"), "{e}");
    let e = Target::parse(dir.path().join("no/such/dir/x.log").to_str().unwrap()).unwrap_err();
    assert!(e.0.contains("cannot open"), "{e}");
    let link = dir.path().join("link.log");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    let e = Target::parse(link.to_str().unwrap()).unwrap_err();
    assert!(e.0.contains("symbolic link"), "{e}");
}

/// Polls `path` until it has `n` lines (the writer is another thread).
fn lines(path: &std::path::Path, n: usize) -> Vec<serde_json::Value> {
    for _ in 0..500 {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.lines().count() >= n {
            return text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("{} never had {n} lines", path.display());
}

/// Logs one request whose body is `body`, read to the end as hyper would.
fn logged(log: &AccessLog, uri: &str, body: &'static str) {
    let response = Response::new(crate::http::body::full(body));
    let response = log.finish(started(uri), "page", "served", response);
    assert_eq!(drain(response.into_body()), body.len());
}

/// Polls `body` to its end (a `Full` body is ready at once, so no runtime is needed)
/// and drops it; returns the bytes it gave.
fn drain(mut body: Body) -> usize {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let mut n = 0;
    loop {
        match std::pin::Pin::new(&mut body).poll_frame(&mut cx) {
            std::task::Poll::Ready(Some(Ok(frame))) => {
                n += frame.data_ref().map_or(0, |d| d.len());
            }
            std::task::Poll::Ready(_) => return n,
            std::task::Poll::Pending => unreachable!("a full body is ready"),
        }
        // hyper stops here, without polling for the end.
        if body.is_end_stream() {
            return n;
        }
    }
}

#[test]
fn lines_are_written_by_the_thread_and_a_reopen_starts_a_fresh_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("access.log");
    let dropped = Counter::default();
    let log = AccessLog::open(
        &Target::File(path.clone()),
        Arc::new(arc_swap::ArcSwap::from_pointee(vec![
            "a".into(),
            "main".into(),
        ])),
        dropped.clone(),
        Counter::default(),
    )
    .unwrap()
    .unwrap();
    logged(&log, "/one?q=1", "hello");
    let first = lines(&path, 1);
    assert_eq!(first[0]["path"], "/one");
    assert_eq!(first[0]["bytes"], 5);
    assert_eq!(first[0]["completed"], true);

    // logrotate: move the file away, then SIGHUP (which calls this).
    let rotated = dir.path().join("access.log.1");
    std::fs::rename(&path, &rotated).unwrap();
    log.reopen();
    // Until the writer has reopened, a line may still land in the moved file; keep
    // logging until one reaches the fresh file.
    for _ in 0..500 {
        logged(&log, "/two", "hi");
        if std::fs::read_to_string(&path).is_ok_and(|t| !t.is_empty()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let fresh = lines(&path, 1);
    assert_eq!(fresh[0]["path"], "/two");
    assert_eq!(lines(&rotated, 1)[0]["path"], "/one");
    assert_eq!(dropped.get(), 0);
}

#[test]
fn a_body_dropped_early_is_logged_as_not_completed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("access.log");
    let log = AccessLog::open(
        &Target::File(path.clone()),
        Arc::default(),
        Counter::default(),
        Counter::default(),
    )
    .unwrap()
    .unwrap();
    let response = Response::new(crate::http::body::full("never sent"));
    drop(log.finish(started("/gone"), "page", "admitted", response));
    let mut head = started("/head");
    head.method = Method::HEAD;
    let response = Response::new(crate::http::body::full("not sent for HEAD"));
    drop(log.finish(head, "page", "admitted", response));
    let v = lines(&path, 2);
    assert_eq!(
        (v[0]["completed"].clone(), v[0]["bytes"].clone()),
        (false.into(), 0.into())
    );
    assert_eq!(v[1]["completed"], true, "a HEAD answer has no body to send");
}

#[test]
fn a_long_lived_line_keeps_bounded_copies_of_the_header_values() {
    let mut s = started("/__anteroom/events");
    let long = "U".repeat(MAX_HEADER * 4);
    s.user_agent = Some(HeaderValue::from_str(&long).unwrap());
    s.own_headers();
    let ua = s.user_agent.as_ref().unwrap();
    assert_eq!(ua.as_bytes(), &long.as_bytes()[..MAX_HEADER]);
    assert_eq!(
        s.referer.as_ref().unwrap().as_bytes(),
        b"https://shop.example/launch?ar_grant=v1.secret#top",
        "a short value is copied whole (its query is cut when written)"
    );
    let entry = Entry {
        started: s,
        class: "events",
        decision: "served",
        status: 200,
        bytes: 0,
        duration: Duration::ZERO,
        origin: None,
        completed: true,
    };
    assert_eq!(line(&entry)["referer"], "https://shop.example/launch");
}
