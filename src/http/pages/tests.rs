//! The pages' tests: content negotiation, the JSON view's fields, escaping, both waiting
//! pages rendered end to end, and the board's digits and countdown.

use super::*;

fn accept(s: &str) -> bool {
    prefers_json(Some(&HeaderValue::from_str(s).unwrap()))
}

#[test]
fn accept_ranking() {
    assert!(accept("application/json"));
    assert!(accept("application/json, text/html;q=0.9"));
    assert!(accept("text/html;q=0.5, application/json"));
    assert!(!accept(
        "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
    ));
    assert!(!accept("*/*"));
    assert!(!accept("application/json;q=0.5, text/html"));
    assert!(!accept("application/json, text/html"), "a tie is HTML");
    assert!(!accept("garbage;;;q=zz,,,"));
    assert!(!prefers_json(None));
}

#[test]
fn json_view_has_exactly_the_documented_fields() {
    let view = WaitingView {
        status: VisitorStatus::Waiting,
        room: "main".into(),
        position: Some(7),
        waiting: 42,
        eta_secs: Eta {
            min: 3,
            max: 5,
            estimating: false,
        },
        retry_after_secs: 5,
        phase: Phase::Queueing,
        paused: false,
        reference: None,
        phase_ends_at: None,
        receipt: None,
    };
    let json: serde_json::Value = serde_json::to_value(&view).unwrap();
    let mut keys: Vec<_> = json.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "eta_secs",
            "paused",
            "phase",
            "position",
            "retry_after_secs",
            "room",
            "status",
            "waiting"
        ]
    );
    assert_eq!(json["eta_secs"], serde_json::json!({"min": 3, "max": 5}));
    assert_eq!(json["phase"], "queueing");
    assert_eq!(json["status"], "waiting");
}

#[test]
fn html_escapes_operator_text() {
    let pages = Pages::default();
    let view = WaitingView {
        status: VisitorStatus::Waiting,
        room: "main".into(),
        position: Some(3),
        waiting: 3,
        eta_secs: Eta {
            min: 1,
            max: 2,
            estimating: false,
        },
        retry_after_secs: 5,
        phase: Phase::Queueing,
        paused: false,
        reference: None,
        phase_ends_at: None,
        receipt: None,
    };
    let text = RoomText {
        title: "<script>x</script>",
        message: "a & b",
    };
    let response = pages.waiting(&view, &text, StatusCode::OK, false, Lang::En);
    assert_eq!(response.headers()[STATUS_HEADER], "waiting");
    assert_eq!(response.headers()[header::CACHE_CONTROL], "no-store");
    assert_eq!(response.headers()[header::RETRY_AFTER], "5");
}

fn view(position: Option<u64>, waiting: u64, phase: Phase) -> WaitingView {
    WaitingView {
        status: VisitorStatus::Waiting,
        room: "main".into(),
        position,
        waiting,
        eta_secs: Eta {
            min: 120,
            max: 300,
            estimating: false,
        },
        retry_after_secs: 7,
        phase,
        paused: false,
        reference: None,
        phase_ends_at: None,
        receipt: None,
    }
}

async fn render(pages: &Pages, view: &WaitingView, title: &str, lang: Lang) -> String {
    use http_body_util::BodyExt;
    let text = RoomText {
        title,
        message: "<b>hi</b>",
    };
    let response = pages.waiting(view, &text, StatusCode::OK, false, lang);
    assert_eq!(
        response.headers()[header::CONTENT_TYPE],
        "text/html; charset=utf-8"
    );
    let body = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(body.to_vec()).unwrap()
}

/// The page a binary built without the front-end serves: the position, self-refreshing,
/// translated.
#[tokio::test]
async fn the_plain_page_shows_the_position_and_refreshes_itself() {
    let pages = Pages::plain();
    assert!(!pages.has_board());
    let html = render(
        &pages,
        &view(Some(42), 130, Phase::Queueing),
        "You're in line",
        Lang::En,
    )
    .await;
    assert!(html.contains(r#"<html lang="en" dir="ltr">"#), "{html}");
    assert!(
        html.contains(r#"id="ar-position" aria-hidden="true">42<"#),
        "{html}"
    );
    assert!(html.contains(r#"<meta http-equiv="refresh" content="7">"#));
    assert!(html.contains("You are number 42 in line."));
    assert!(html.contains("2 min – 5 min"));
    assert!(html.contains("&lt;b&gt;hi&lt;"), "operator text is escaped");
    assert!(html.contains(r#"new EventSource("/__anteroom/events")"#));
    assert!(!html.contains("/__anteroom/static/"));
    let de = render(
        &pages,
        &view(Some(42), 130, Phase::Queueing),
        "You're in line",
        Lang::De,
    )
    .await;
    assert!(de.contains(r#"<html lang="de" dir="ltr">"#));
    assert!(de.contains("<title>Sie sind in der Warteschlange</title>"));
    assert!(de.contains("Ihr Platz in der Warteschlange"));
    assert!(de.contains("2 Min. – 5 Min."));
}

/// The visitor's reference, small and labelled in the page's language, on the
/// plain page and on the board alike (with or without the board's script); nothing
/// without one.
#[tokio::test]
async fn the_plain_page_and_the_board_show_the_visitor_reference() {
    let board = Pages::new(Some(Entry {
        script: "/__anteroom/static/waiting-abc.js".into(),
        styles: vec!["/__anteroom/static/waiting-def.css".into()],
    }));
    let mut with_ref = view(Some(3), 9, Phase::Queueing);
    with_ref.reference = Some("K7QX2M9D".into());
    for (pages, code) in [(Pages::plain(), "ref-code"), (board, "ar-ref-code")] {
        for (lang, label) in [
            (Lang::En, "Your reference"),
            (Lang::De, "Ihre Referenz"),
            (Lang::Es, "Tu referencia"),
            (Lang::Fr, "Votre référence"),
            (Lang::Ar, "رقمك المرجعي"),
        ] {
            let html = render(&pages, &with_ref, "Drop", lang).await;
            let shown = format!(
                r#"id="ar-ref">{label}: <span class="{code}" dir="ltr">K7QX2M9D</span></p>"#
            );
            assert!(html.contains(&shown), "{lang:?}: {html}");
        }
        let html = render(&pages, &view(Some(3), 9, Phase::Queueing), "Drop", Lang::En).await;
        assert!(!html.contains("ar-ref"), "{html}");
    }
}

/// The CSP allows the plain page's inline script by hash: the script as rendered (not
/// only as written in the template) must hash to it, or browsers refuse to run it.
#[tokio::test]
async fn the_plain_pages_inline_script_is_allowed_by_the_csp() {
    use base64::Engine;
    use sha2::Digest;
    let html = render(
        &Pages::plain(),
        &view(Some(3), 9, Phase::Queueing),
        "You're in line",
        Lang::Fr,
    )
    .await;
    let open = html
        .find("<script data-refresh=")
        .expect("the inline script");
    let start = open + html[open..].find('>').unwrap() + 1;
    let end = start + html[start..].find("</script>").unwrap();
    let hash = base64::engine::general_purpose::STANDARD
        .encode(sha2::Sha256::digest(&html.as_bytes()[start..end]));
    let csp = content_security_policy();
    assert!(csp.contains(&format!("'sha256-{hash}'")), "{csp}");
    assert!(html[open..start].contains(r#"data-refresh="7""#));
}

#[tokio::test]
async fn the_board_page_loads_its_assets_and_renders_the_number() {
    let pages = Pages::new(Some(Entry {
        script: "/__anteroom/static/waiting-abc.js".into(),
        styles: vec!["/__anteroom/static/waiting-def.css".into()],
    }));
    let html = render(
        &pages,
        &view(Some(7), 120, Phase::Queueing),
        "Drop",
        Lang::Ar,
    )
    .await;
    assert!(html.contains(r#"<html lang="ar" dir="rtl">"#), "{html}");
    assert!(html.contains(r#"<script type="module" src="/__anteroom/static/waiting-abc.js">"#));
    assert!(html.contains(r#"<link rel="stylesheet" href="/__anteroom/static/waiting-def.css">"#));
    assert!(html.contains(r#"<noscript><meta http-equiv="refresh" content="7"></noscript>"#));
    assert!(html.contains(r#"aria-live="polite""#));
    assert!(
        html.contains("<title>Drop</title>"),
        "the operator's title as given"
    );
    // 007: padded to the line's width, the leading zeros marked.
    let digits: Vec<&str> = html
        .match_indices("data-digit=\"")
        .map(|(i, _)| &html[i + 12..i + 13])
        .collect();
    assert_eq!(digits, ["0", "0", "7"]);
    assert_eq!(html.matches("ar-flap ar-lead").count(), 2);
    // The script's data: strings in the page's language, the server's clock.
    let blob = html
        .split(r#"<script type="application/json" id="ar-data">"#)
        .nth(1)
        .unwrap();
    let blob = blob.split("</script>").next().unwrap();
    let data: serde_json::Value = serde_json::from_str(blob).unwrap();
    assert_eq!(data["strings"]["code"], "ar");
    assert_eq!(data["position"], 7);
    assert_eq!(data["phase"], "queueing");
    assert!(data["server_now_ms"].as_u64().unwrap() > 1_600_000_000_000);
    assert!(data["countdown_to_ms"].is_null());
}

#[tokio::test]
async fn the_draw_shows_a_countdown_and_no_position() {
    let pages = Pages::new(Some(Entry {
        script: "/s.js".into(),
        styles: vec![],
    }));
    let mut v = view(None, 5000, Phase::Draw);
    v.phase_ends_at = Some(SystemTime::now() + std::time::Duration::from_secs(3723));
    let html = render(&pages, &v, "Drop", Lang::En).await;
    assert!(html.contains("Doors open in"));
    assert!(html.contains("01:02:0"), "{html}");
    assert!(html.contains(r#"<section id="ar-queue" aria-labelledby="ar-place-label" hidden>"#));
    assert!(html.contains(r#"id="ar-entered">5000<"#));
}

#[test]
fn countdown_and_digits() {
    assert_eq!(countdown_text(90, Lang::En.catalog()), "01:30");
    assert_eq!(countdown_text(90_061, Lang::De.catalog()), "1 T 01:01:01");
    let d: String = board_digits(5, 1234).iter().map(|d| d.d).collect();
    assert_eq!(d, "0005");
    let d: String = board_digits(0, 0).iter().map(|d| d.d).collect();
    assert_eq!(d, "0");
}

fn operator_pages(text: &str) -> Pages {
    Pages::plain().with_operator_page(&WaitingPageConfig {
        template: Some(PageFile {
            path: "op.html".into(),
            text: text.to_owned(),
        }),
        stylesheet: None,
    })
}

async fn body_of(response: Response<Body>) -> String {
    use http_body_util::BodyExt;
    let body = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(body.to_vec()).unwrap()
}

/// One operator template renders every state, each with its translated text and status.
#[tokio::test]
async fn the_operator_template_renders_every_state() {
    let pages = operator_pages(
        "<p>{{ state }} {{ status_code }} {{ title }}{% if state == 'waiting' %} #{{ position }}{% else %}: {{ detail }}{% endif %}</p>",
    );
    let html = render(&pages, &view(Some(4), 9, Phase::Queueing), "Drop", Lang::En).await;
    assert!(html.contains("<p>waiting 200 Drop #4</p>"), "{html}");
    let html = render(&pages, &view(None, 9, Phase::Draw), "Drop", Lang::En).await;
    assert!(html.contains("<p>draw 200 Drop: </p>"), "{html}");
    let de = Lang::De.catalog();
    for (response, expected) in [
        (
            pages.full(Lang::De, StatusCode::SERVICE_UNAVAILABLE, 30, false),
            format!("full 503 {}: {}", de.full_title, de.full_detail),
        ),
        (
            pages.closed(Lang::De, StatusCode::SERVICE_UNAVAILABLE, false),
            format!("closed 503 {}: {}", de.closed_title, de.closed_detail),
        ),
        (
            pages.sold_out(Lang::De, StatusCode::OK, "Restock Friday", false),
            format!("sold_out 200 {}: Restock Friday", de.sold_out_title),
        ),
        (
            pages.banned(Lang::De, StatusCode::FORBIDDEN, None, false),
            format!("banned 403 {}: {}", de.banned_title, de.banned_detail),
        ),
        (
            pages.message_in(
                Lang::De,
                StatusCode::NOT_FOUND,
                None,
                "Nicht gefunden",
                "Hier gibt es nichts.",
                None,
                false,
            ),
            "error 404 Nicht gefunden: Hier gibt es nichts.".to_owned(),
        ),
    ] {
        let html = body_of(response).await;
        assert!(html.contains(&format!("<p>{expected}</p>")), "{html}");
    }
}

/// A template that fails to render costs the visitor nothing: the built-in page instead.
#[tokio::test]
async fn a_failing_operator_template_falls_back_to_the_built_in_page() {
    let pages = operator_pages("{{ 1 / 0 }}{{ nope() }}");
    let html = render(&pages, &view(Some(4), 9, Phase::Queueing), "Drop", Lang::Fr).await;
    assert!(html.contains(Lang::Fr.catalog().your_place), "{html}");
    let response = pages.closed(Lang::Fr, StatusCode::SERVICE_UNAVAILABLE, false);
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let html = body_of(response).await;
    assert!(html.contains(Lang::Fr.catalog().closed_title), "{html}");
}
