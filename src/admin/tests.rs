//! Unit tests of the admin module's parsers and matcher; the API end to end is
//! `tests/e2e/admin/`.

use std::time::Duration;

use super::routes::{Captures, find};
use super::*;
use crate::queue::{QueueQuery, RoomSettings, StoreError};

/// The captures of `path`'s routes, or `None` when no route has it.
fn captured(path: &str) -> Option<Captures<'_>> {
    find(path).map(|f| f.captures)
}

#[test]
fn the_router_captures_the_segments_of_a_path() {
    assert_eq!(
        captured("/__anteroom/admin/api/rooms/main/stats"),
        Some(Captures {
            room: Some("main"),
            ..Captures::default()
        })
    );
    assert_eq!(
        captured("/__anteroom/admin/api/rooms/main/visitors/ABCD1234/front"),
        Some(Captures {
            room: Some("main"),
            reference: Some("ABCD1234"),
            ..Captures::default()
        })
    );
    assert_eq!(
        captured("/__anteroom/admin/api/rooms/main/events/ev-0a1b2c3d"),
        Some(Captures {
            room: Some("main"),
            id: Some("ev-0a1b2c3d"),
            ..Captures::default()
        })
    );
    assert_eq!(
        captured("/__anteroom/admin/api/bans/10.0.0.0%2F24"),
        Some(Captures {
            target: Some("10.0.0.0%2F24"),
            ..Captures::default()
        })
    );
    assert_eq!(
        captured("/__anteroom/admin/api/rooms/main/visitors//front"),
        None
    );
    assert_eq!(captured("/__anteroom/admin/api/rooms//stats"), None);
    assert_eq!(captured("/__anteroom/admin/api/rooms/main/stats/x"), None);
    assert_eq!(
        captured("/__anteroom/admin/api/rooms"),
        Some(Captures::default())
    );
    assert_eq!(captured("/__anteroom/admin/api/rooms/"), None);
    assert_eq!(captured("/__anteroom/admin/api/nope"), None);
}

#[test]
fn the_router_finds_every_method_of_a_path_and_prefers_a_literal_segment() {
    let methods = |path: &str| -> Vec<String> {
        find(path)
            .unwrap()
            .routes
            .iter()
            .map(|r| r.method.to_string())
            .collect()
    };
    assert_eq!(methods("/__anteroom/admin/api/bans"), ["GET", "POST"]);
    // `log` is the ban log's literal segment, not a `{target}`.
    assert_eq!(methods("/__anteroom/admin/api/bans/log"), ["GET"]);
    assert_eq!(
        captured("/__anteroom/admin/api/bans/log"),
        Some(Captures::default())
    );
    assert_eq!(methods("/__anteroom/admin/api/bans/192.0.2.1"), ["DELETE"]);
    // Every route of the table is found by its own pattern.
    for route in routes() {
        let found = find(route.path).expect(route.path);
        assert!(
            found.routes.iter().any(|r| std::ptr::eq(*r, route)),
            "{}",
            route.path
        );
    }
}

#[test]
fn queue_queries_name_the_parameter_at_fault() {
    let field = |q: &str| parse_queue_query(q).unwrap_err().field;
    assert_eq!(
        parse_queue_query(""),
        Ok(QueueQuery::Head {
            limit: QUEUE_DEFAULT_LIMIT
        })
    );
    assert_eq!(
        parse_queue_query("limit=1000"),
        Ok(QueueQuery::Head { limit: 1000 })
    );
    for bad in [
        "limit=0",
        "limit=1001",
        "limit=-1",
        "limit=x",
        "limit=",
        "limit",
    ] {
        assert_eq!(field(bad), "limit", "{bad}");
    }
    assert_eq!(field("ref=nope"), "ref");
    assert_eq!(field("limit=5&sort=asc"), "sort");
    let r = crate::queue::VisitorRef::parse("abcd1234").unwrap();
    assert_eq!(
        parse_queue_query("limit=5&ref=abcd-1234"),
        Ok(QueueQuery::Ref(r))
    );
}

#[test]
fn patches_name_the_field_at_fault() {
    let field = |body: &str| parse_patch(body.as_bytes()).unwrap_err().field;
    assert_eq!(field(r#"{"rate": "fast"}"#), "rate");
    assert_eq!(field(r#"{"ratee": 5}"#), "ratee");
    assert_eq!(field(r#"{"max_active": -1}"#), "max_active");
    assert_eq!(field(r#"{"max_active": 1.5}"#), "max_active");
    assert_eq!(field(r#"{"session_ttl_secs": -3}"#), "session_ttl_secs");
    assert_eq!(
        field(r#"{"abandon_after_secs": null}"#),
        "abandon_after_secs"
    );
    assert_eq!(field("{"), "body");
    assert_eq!(field("[1]"), "body");
    assert_eq!(field("{}"), "body");
    assert_eq!(field(r#"{"mode": "closed"}"#), "mode");
    assert_eq!(field(r#"{"mode": "SOLD_OUT"}"#), "mode");
    assert_eq!(field(r#"{"mode": 1}"#), "mode");
    let patch = parse_patch(br#"{"mode": "sold_out"}"#).unwrap();
    assert_eq!(patch.mode, Some(crate::queue::Mode::SoldOut));
    assert_eq!(patch.rate, None);
    let patch = parse_patch(br#"{"rate": 2.5, "max_active": 7, "session_ttl_secs": 90}"#).unwrap();
    assert_eq!(patch.rate, Some(2.5));
    assert_eq!(patch.max_active, Some(7));
    assert_eq!(patch.session_ttl, Some(Duration::from_secs(90)));
    assert_eq!(patch.abandon_after, None);
    assert_eq!(patch.paused, None);
    // A whole number written with a fraction is one, as the document's JSON Schema says.
    let patch = parse_patch(br#"{"max_active": 28982.0}"#).unwrap();
    assert_eq!(patch.max_active, Some(28982));
}

#[test]
fn negative_rates_and_zero_max_active_are_refused_by_validation() {
    let settings = RoomSettings {
        rate: 5.0,
        max_active: 10,
        session_ttl: Duration::from_secs(60),
        abandon_after: Duration::from_secs(60),
        paused: false,
        mode: crate::queue::Mode::Queue,
        changes: Default::default(),
    };
    for (body, expected) in [
        (r#"{"rate": -1}"#, "rate"),
        (r#"{"rate": 0}"#, "rate"),
        (r#"{"max_active": 0}"#, "max_active"),
        (r#"{"session_ttl_secs": 0}"#, "session_ttl"),
    ] {
        let patch = parse_patch(body.as_bytes()).unwrap();
        match settings.patched(&patch) {
            Err(StoreError::Invalid { field, .. }) => assert_eq!(field, expected, "{body}"),
            other => panic!("{body}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn refusals_render_as_problem_json_with_their_status_and_field() {
    use crate::abuse::BanError;
    use http_body_util::BodyExt;
    use serde_json::Value;

    let invalid = StoreError::Invalid {
        field: "session_ttl",
        reason: "must be positive".to_owned(),
    };
    let cases = [
        (
            AdminError::from(invalid),
            400,
            Some("session_ttl_secs"),
            "session_ttl_secs: must be positive; nothing was changed",
        ),
        (
            AdminError::from(StoreError::Unavailable("down".to_owned())),
            503,
            None,
            "Nothing was changed: down",
        ),
        (
            AdminError::from(BanError::InvalidDuration),
            422,
            Some("duration_secs"),
            "duration_secs: duration_secs must be a whole number from 1 to 315360000 (ten \
             years), or null for a permanent ban; nothing was changed",
        ),
        (
            AdminError::from(BanError::NotFound("192.0.2.1".to_owned())),
            404,
            Some("target"),
            "no active ban on `192.0.2.1`",
        ),
        (
            AdminError::Unprocessable(FieldError::new("limit", "too big")),
            422,
            Some("limit"),
            "limit: too big",
        ),
        (
            AdminError::BodyTooLarge,
            413,
            Some("body"),
            "The request body may be at most 65536 bytes.",
        ),
    ];
    for (error, status, field, detail) in cases {
        assert_eq!(error.status().as_u16(), status, "{error:?}");
        let stalled = matches!(error, AdminError::StoreUnavailable(_));
        let response = error.into_response();
        assert_eq!(response.status().as_u16(), status);
        assert_eq!(
            response.headers()[http::header::CONTENT_TYPE],
            "application/problem+json"
        );
        assert_eq!(
            response
                .headers()
                .get(crate::http::pages::STATUS_HEADER)
                .is_some(),
            stalled
        );
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let body: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(body["type"], "about:blank");
        assert_eq!(body["status"], status);
        assert_eq!(body["detail"], detail);
        assert_eq!(body.get("field").and_then(Value::as_str), field);
    }
}
