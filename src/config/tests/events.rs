use super::*;
use serde_json::json;

fn room() -> RoomConfig {
    let yaml = format!(
        "listen: 127.0.0.1:0\ncookie_secret: {}\nadmin_token: events-test-admin-token-0123\nrooms:\n  main:\n    origin: http://127.0.0.1:9/base\n",
        "ab".repeat(32)
    );
    super::super::from_yaml_str(&yaml, "t.yaml")
        .unwrap()
        .rooms
        .remove(0)
}

fn at(s: &str) -> SystemTime {
    humantime::parse_rfc3339(s).unwrap()
}

fn ms(s: &str) -> u64 {
    unix_ms(at(s))
}

fn event(id: &str, opens: &str, admits: &str, closes: Option<&str>) -> Event {
    parse_body(
        id,
        &json!({"queue_opens_at": opens, "admits_at": admits, "closes_at": closes}),
        &room(),
    )
    .unwrap()
}

#[test]
fn the_current_event_is_the_first_not_closed_else_the_last() {
    let a = event(
        "ev-a",
        "2030-01-01T10:00:00Z",
        "2030-01-01T10:05:00Z",
        Some("2030-01-01T11:00:00Z"),
    );
    let b = event(
        "ev-b",
        "2030-01-02T10:00:00Z",
        "2030-01-02T10:00:00Z",
        Some("2030-01-02T12:00:00Z"),
    );
    let events = [a.clone(), b.clone()];
    let id = |now: &str| current(&events, ms(now)).map(|e| e.id.clone());
    assert_eq!(id("2029-12-31T00:00:00Z").as_deref(), Some("ev-a"));
    assert_eq!(id("2030-01-01T10:59:59Z").as_deref(), Some("ev-a"));
    assert_eq!(id("2030-01-01T11:00:00Z").as_deref(), Some("ev-b"));
    assert_eq!(id("2030-01-03T00:00:00Z").as_deref(), Some("ev-b"));
    assert_eq!(current(&[], 0), None);
    let now = ms("2030-01-01T11:30:00Z");
    assert_eq!(a.state(Some("ev-b"), now), EventState::Over);
    assert_eq!(b.state(Some("ev-b"), now), EventState::Current);
    assert_eq!(
        a.state(Some("ev-b"), ms("2030-01-01T10:30:00Z")),
        EventState::Upcoming
    );
}

#[test]
fn events_ride_in_the_changes_sorted_and_apart_from_settings() {
    let a = event(
        "ev-2",
        "2030-01-01T10:00:00Z",
        "2030-01-01T10:05:00Z",
        Some("2030-01-01T11:00:00Z"),
    );
    let b = event("ev-1", "2030-01-02T10:00:00Z", "2030-01-02T10:05:00Z", None);
    let mut changes = RoomChanges::default();
    for e in [&b, &a] {
        changes.0.insert(e.key(), e.to_json());
    }
    changes.0.insert("title".into(), json!("Drop"));
    changes.0.insert("eventual".into(), json!(1));
    changes.0.insert(APPLIED_KEY.into(), a.to_json());
    let mut revised = SettingsPatch::default();
    over_revision(&mut revised, &changes);
    assert_eq!(revised.expect, Some((REVISION_KEY.to_owned(), Value::Null)));
    changes.0.extend(revised.changes.0);
    assert!(is_event_key(REVISION_KEY));
    assert_eq!(events_of(&changes), [a.clone(), b]);
    assert_eq!(applied_of(&changes), Some(a));
    // The room's effective config ignores them.
    changes.0.remove("eventual");
    assert_eq!(effective(&room(), &changes).unwrap().title, "Drop");
}

#[test]
fn applying_writes_the_times_the_overrides_and_the_marker_once() {
    let e = parse_body(
        "ev-x",
        &json!({
            "name": "Spring drop", "queue_opens_at": "2030-01-01T10:00:00.250Z",
            "admits_at": "2030-01-01T12:05:00+02:00", "rate": 5, "max_active": 9,
            "title": "Spring", "lottery": true,
        }),
        &room(),
    )
    .unwrap();
    let patch = apply_patch(Some(&e), None).unwrap();
    assert_eq!((patch.rate, patch.max_active), (Some(5.0), Some(9)));
    let c = &patch.changes;
    assert_eq!(
        c.get("schedule"),
        Some(
            &json!({"queue_opens_at": "2030-01-01T10:00:00.250Z", "admits_at": "2030-01-01T10:05:00Z"})
        )
    );
    assert_eq!(c.get("title"), Some(&json!("Spring")));
    assert_eq!(c.get("lottery"), Some(&json!(true)));
    assert_eq!(c.get("message"), None);
    // Applied: nothing more to do, until it changes or goes.
    let applied = applied_of(c).unwrap();
    assert_eq!(applied, e);
    assert_eq!(apply_patch(Some(&e), Some(&applied)), None);
    let edited = Event {
        rate: Some(6.0),
        ..e.clone()
    };
    assert_eq!(
        apply_patch(Some(&edited), Some(&applied)).unwrap().rate,
        Some(6.0)
    );
    let gone = apply_patch(None, Some(&applied)).unwrap();
    assert_eq!(gone.changes.0.get("schedule"), Some(&Value::Null));
    assert_eq!(gone.changes.0.get(APPLIED_KEY), Some(&Value::Null));
    assert_eq!(apply_patch(None, None), None);
}

#[test]
fn a_bad_body_names_its_field() {
    let file = room();
    let ok = json!({"queue_opens_at": "2030-01-01T10:00:00Z", "admits_at": "2030-01-01T10:05:00Z"});
    let with = |k: &str, v: Value| {
        let mut b = ok.clone();
        b[k] = v;
        b
    };
    for (body, field) in [
        (json!([]), "body"),
        (
            json!({"admits_at": "2030-01-01T10:05:00Z"}),
            "queue_opens_at",
        ),
        (
            with("admits_at", json!("2030-01-01T09:00:00Z")),
            "admits_at",
        ),
        (with("admits_at", json!("soon")), "admits_at"),
        (
            with("closes_at", json!("2030-01-01T10:05:00Z")),
            "closes_at",
        ),
        (with("rate", json!(0)), "rate"),
        (with("max_active", json!(0)), "max_active"),
        (with("title", json!(5)), "title"),
        (with("title", json!("x".repeat(201))), "title"),
        (with("message", json!("x".repeat(2001))), "message"),
        (with("lottery", json!("yes")), "lottery"),
        (with("name", json!("x".repeat(101))), "name"),
        (with("colour", json!("red")), "colour"),
    ] {
        let e = parse_body("ev-1", &body, &file).unwrap_err();
        assert_eq!(e.field, field, "{body}: {e}");
    }
    // A time before 1970 is said to be one, not clamped to 1970 and refused for an order
    // it never had.
    let early =
        json!({"queue_opens_at": "1969-12-31T10:00:00Z", "admits_at": "1969-12-31T11:00:00Z"});
    let e = parse_body("ev-1", &early, &file).unwrap_err();
    assert_eq!(e.field, "queue_opens_at");
    assert!(
        e.reason
            .starts_with("must be 1970-01-01T00:00:00Z or later"),
        "{e}"
    );
}

#[test]
fn events_of_a_room_do_not_overlap_and_only_the_last_stays_open() {
    let a = event(
        "ev-a",
        "2030-01-01T10:00:00Z",
        "2030-01-01T10:05:00Z",
        Some("2030-01-01T11:00:00Z"),
    );
    let b = event("ev-b", "2030-01-01T11:00:00Z", "2030-01-01T11:00:00Z", None);
    assert_eq!(check_set(&[b.clone(), a.clone()]), Ok(()));
    let overlapping = event(
        "ev-c",
        "2030-01-01T10:30:00Z",
        "2030-01-01T10:40:00Z",
        Some("2030-01-01T10:50:00Z"),
    );
    let e = check_set(&[a.clone(), overlapping]).unwrap_err();
    assert_eq!(e.field, "queue_opens_at");
    assert!(e.reason.contains("ev-a"), "{e}");
    let open = event("ev-d", "2030-01-01T09:00:00Z", "2030-01-01T09:00:00Z", None);
    assert_eq!(
        check_set(&[a.clone(), open]).unwrap_err().field,
        "closes_at"
    );
    let many: Vec<Event> = (0..=MAX_EVENTS as u64)
        .map(|i| Event {
            id: format!("ev-{i}"),
            queue_opens_at: at("2030-01-01T00:00:00Z") + std::time::Duration::from_secs(i * 10),
            admits_at: at("2030-01-01T00:00:00Z") + std::time::Duration::from_secs(i * 10),
            closes_at: Some(at("2030-01-01T00:00:05Z") + std::time::Duration::from_secs(i * 10)),
            ..a.clone()
        })
        .collect();
    assert_eq!(check_set(&many[1..]), Ok(()));
    assert!(check_set(&many).is_err());
    let id = new_id();
    assert!(id.starts_with("ev-") && id.len() == 11, "{id}");
}

#[test]
fn a_replica_behind_never_goes_back_to_an_event_about_to_close() {
    let a = event(
        "ev-a",
        "2030-01-01T10:00:00Z",
        "2030-01-01T10:05:00Z",
        Some("2030-01-01T11:00:00Z"),
    );
    let b = event("ev-b", "2030-01-01T11:00:00Z", "2030-01-01T11:00:00Z", None);
    let events = [a.clone(), b.clone()];
    let id = |applied: Option<&Event>, now: &str| {
        to_apply(&events, applied, ms(now)).map(|e| e.id.clone())
    };
    // Another replica, ahead, applied the next one a second early: this one keeps it.
    assert_eq!(
        id(Some(&b), "2030-01-01T10:59:59Z").as_deref(),
        Some("ev-b")
    );
    // Far from the close, an earlier event is the one (it was added after the later one).
    assert_eq!(
        id(Some(&b), "2030-01-01T10:30:00Z").as_deref(),
        Some("ev-a")
    );
    assert_eq!(id(None, "2030-01-01T10:59:59Z").as_deref(), Some("ev-a"));
    assert_eq!(
        id(Some(&a), "2030-01-01T11:00:00Z").as_deref(),
        Some("ev-b")
    );
    // The applied event deleted: the current one.
    let only_a = [a.clone()];
    assert_eq!(
        to_apply(&only_a, Some(&b), ms("2030-01-01T10:59:59Z")).map(|e| e.id.as_str()),
        Some("ev-a")
    );
}
