//! The pages anteroom writes itself, end to end: every state's page and the error pages
//! in the visitor's language (from `Accept-Language`), and the operator's one template
//! rendering every state.

use crate::common;

use std::time::{Duration, SystemTime};

use anteroom::run::Running;
use common::*;

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// A room whose line closed a minute ago.
fn closed_room() -> String {
    format!(
        "    schedule:\n      closes_at: \"{}\"\n",
        rfc3339(SystemTime::now() - Duration::from_secs(60))
    )
}

async fn page(http: &reqwest::Client, url: &str, lang: &str) -> (u16, String) {
    let response = http
        .get(url)
        .header("accept-language", lang)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test]
async fn the_closed_page_and_the_error_pages_speak_the_visitors_language() {
    let (_origin, _dir, ar) = front(&closed_room()).await;
    let http = client();
    let site = format!("http://{}/", ar.addr);
    let reserved = format!("http://{}/__anteroom/no-such-thing", ar.addr);
    for (lang, closed, not_found) in [
        (
            "de-DE,de;q=0.9,en;q=0.5",
            "Die Warteschlange ist geschlossen",
            "Nicht gefunden",
        ),
        ("fr", "La file est fermée", "Introuvable"),
        ("ja", "The line is closed", "Not found"),
    ] {
        let (status, html) = page(&http, &site, lang).await;
        assert_eq!(status, 503, "{lang}");
        assert!(html.contains(closed), "{lang}: {html}");
        let (status, html) = page(&http, &reserved, lang).await;
        assert_eq!(status, 404, "{lang}");
        assert!(html.contains(not_found), "{lang}: {html}");
    }
    let (_, html) = page(&http, &reserved, "fr").await;
    assert!(html.contains(r#"<html lang="fr""#), "{html}");
    assert!(!html.contains("nothing here"), "no English left: {html}");
    ar.shutdown().await.unwrap();
}

/// A first visitor goes straight in, everyone after waits; the per-address limits are off
/// (every visitor comes from loopback).
const ONE_THEN_QUEUE: &str = "    rate: 0.01\n    max_active: 1000\n    join_limit_per_ip: 0\n    max_places_per_client: 0\n    max_sessions_per_client: 0\n";

const TEMPLATE: &str = r#"<!doctype html><html lang="{{ t.code }}"><p id="op">{{ state }}|{{ status_code }}|{{ title }}|{% if state == "waiting" %}{{ position }}{% else %}{{ detail }}{% endif %}</p>"#;

/// An anteroom whose room (`room_extra`) renders every page with [`TEMPLATE`].
async fn with_template(room_extra: &str) -> (Origin, tempfile::TempDir, Running) {
    let template = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(template.path(), TEMPLATE).unwrap();
    let top = format!("waiting_template: \"{}\"", template.path().display());
    // The file is read when the config loads.
    front_with(&top, room_extra).await
}

#[tokio::test]
async fn the_operators_template_renders_waiting_closed_sold_out_and_error_pages() {
    let http = client();

    let (_origin, _dir, ar) = with_template(ONE_THEN_QUEUE).await;
    let site = format!("http://{}/", ar.addr);
    let first = http.get(&site).send().await.unwrap();
    assert_eq!(first.status(), 200);
    let (status, html) = page(&http, &site, "en").await;
    assert_eq!(status, 200);
    assert!(html.contains(r#"<p id="op">waiting|200|"#), "{html}");
    assert!(html.contains("|1</p>"), "position 1: {html}");
    let (status, html) = page(&http, &format!("{site}__anteroom/nope"), "de").await;
    assert_eq!(status, 404);
    assert!(
        html.contains(r#"<p id="op">error|404|Nicht gefunden|Hier gibt es nichts.</p>"#),
        "{html}"
    );
    ar.shutdown().await.unwrap();

    let (_origin, _dir, ar) = with_template(&closed_room()).await;
    let (status, html) = page(&http, &format!("http://{}/", ar.addr), "es").await;
    assert_eq!(status, 503);
    assert!(
        html.contains(r#"<p id="op">closed|503|La fila está cerrada|"#),
        "{html}"
    );
    ar.shutdown().await.unwrap();

    let room = format!("{ONE_THEN_QUEUE}    mode: sold_out\n    message: \"Restock on Friday.\"\n");
    let (_origin, _dir, ar) = with_template(&room).await;
    let (status, html) = page(&http, &format!("http://{}/", ar.addr), "fr").await;
    assert_eq!(status, 200);
    assert!(
        html.contains(r#"<p id="op">sold_out|200|Épuisé|Restock on Friday.</p>"#),
        "{html}"
    );
    ar.shutdown().await.unwrap();
}
