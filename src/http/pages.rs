//! Every response anteroom writes itself: the waiting page (HTML or JSON by `Accept`), the
//! holding and error pages, and `application/problem+json` errors. Each carries
//! `X-Anteroom-Status` where SPEC §5 asks for it and `Cache-Control: no-store`.
//!
//! The split-flap front-end plugs in here: today the plain server-rendered page is the only
//! one, and a build with the front-end will swap the template, not the request path.

use http::{HeaderValue, Response, StatusCode, header};
use minijinja::{Environment, context};
use serde::Serialize;

use super::body::{Body, full};
use crate::admission::Eta;

pub const STATUS_HEADER: &str = "x-anteroom-status";

/// Whether the animated front-end (`web/`) is compiled into this binary. Not yet: every
/// page is the plain server-rendered one, which works without JavaScript.
pub const FRONTEND_BUILT_IN: bool = false;

/// The value of `X-Anteroom-Status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum VisitorStatus {
    Waiting,
    Refused,
    Closed,
    Stalled,
    Banned,
}

impl VisitorStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            VisitorStatus::Waiting => "waiting",
            VisitorStatus::Refused => "refused",
            VisitorStatus::Closed => "closed",
            VisitorStatus::Stalled => "stalled",
            VisitorStatus::Banned => "banned",
        }
    }
}

/// Where a room is in its schedule (SPEC §7); `Queueing` for rooms without one. The store
/// decides it, from its own clock.
pub use crate::queue::Phase;

/// What a waiting (or held) visitor is shown, in HTML or JSON.
#[derive(Clone, Debug, Serialize)]
pub struct WaitingView {
    pub status: VisitorStatus,
    pub room: String,
    pub position: Option<u64>,
    pub waiting: u64,
    pub eta_secs: Eta,
    pub retry_after_secs: u64,
    pub phase: Phase,
    pub paused: bool,
}

/// Page text that comes from the room's config rather than the store.
pub struct RoomText<'a> {
    pub title: &'a str,
    pub message: &'a str,
}

pub struct Pages {
    env: Environment<'static>,
}

impl Default for Pages {
    fn default() -> Self {
        let mut env = Environment::new();
        env.add_template("waiting.html", include_str!("templates/waiting.html"))
            .expect("built-in waiting template parses");
        env.add_template("message.html", include_str!("templates/message.html"))
            .expect("built-in message template parses");
        env.add_template("schedule.html", include_str!("templates/schedule.html"))
            .expect("built-in schedule template parses");
        Pages { env }
    }
}

impl Pages {
    /// The waiting page, as HTML or JSON.
    pub fn waiting(
        &self,
        view: &WaitingView,
        text: &RoomText<'_>,
        status: StatusCode,
        json: bool,
    ) -> Response<Body> {
        let (content_type, body) = if json {
            (
                "application/json",
                serde_json::to_string(view).expect("a view always serializes"),
            )
        } else {
            let html = self
                .env
                .get_template("waiting.html")
                .and_then(|t| {
                    t.render(context! {
                        title => text.title,
                        message => text.message,
                        position => view.position,
                        waiting => view.waiting,
                        eta_text => eta_text(view.eta_secs),
                        paused => view.paused,
                        refresh_secs => view.retry_after_secs,
                    })
                })
                .unwrap_or_else(|e| {
                    tracing::error!(error = %e, "waiting page failed to render");
                    format!("You are number {:?} in line.", view.position)
                });
            ("text/html; charset=utf-8", html)
        };
        respond(
            status,
            view.status,
            content_type,
            body,
            Some(view.retry_after_secs),
        )
    }

    /// The page of a scheduled room before its doors (SPEC §5, §7): before the line opens,
    /// when it opens; during the draw, a countdown to the doors and how many have entered
    /// (and the visitor's position only when the draw is first come, first served). JSON
    /// clients get the same body as the waiting page.
    pub fn scheduled(
        &self,
        view: &WaitingView,
        text: &RoomText<'_>,
        status: StatusCode,
        json: bool,
        at: std::time::SystemTime,
        lottery: bool,
    ) -> Response<Body> {
        if json {
            return self.waiting(view, text, status, true);
        }
        let remaining = at
            .duration_since(std::time::SystemTime::now())
            .unwrap_or_default()
            .as_secs();
        let html = self
            .env
            .get_template("schedule.html")
            .and_then(|t| {
                t.render(context! {
                    title => text.title,
                    message => text.message,
                    phase => view.phase.as_str(),
                    position => view.position,
                    waiting => view.waiting,
                    lottery => lottery,
                    at => humantime::format_rfc3339_seconds(at).to_string(),
                    remaining_secs => remaining,
                    remaining_text => countdown_text(remaining),
                    refresh_secs => view.retry_after_secs,
                })
            })
            .unwrap_or_else(|e| {
                tracing::error!(error = %e, "schedule page failed to render");
                text.title.to_owned()
            });
        respond(
            status,
            view.status,
            "text/html; charset=utf-8",
            html,
            Some(view.retry_after_secs),
        )
    }

    /// A page anteroom answers itself instead of the site: HTML for browsers,
    /// `application/problem+json` for clients that prefer JSON.
    pub fn message(
        &self,
        status: StatusCode,
        visitor_status: Option<VisitorStatus>,
        title: &str,
        detail: &str,
        retry_after: Option<u64>,
        json: bool,
    ) -> Response<Body> {
        let (content_type, body) = if json {
            let problem = serde_json::json!({
                "type": "about:blank",
                "title": title,
                "status": status.as_u16(),
                "detail": detail,
            });
            ("application/problem+json", problem.to_string())
        } else {
            let html = self
                .env
                .get_template("message.html")
                .and_then(|t| {
                    t.render(
                        context! { title => title, detail => detail, refresh_secs => retry_after },
                    )
                })
                .unwrap_or_else(|_| title.to_owned());
            ("text/html; charset=utf-8", html)
        };
        let mut response = respond_raw(status, content_type, body, retry_after);
        if let Some(s) = visitor_status {
            response
                .headers_mut()
                .insert(STATUS_HEADER, HeaderValue::from_static(s.as_str()));
        }
        response
    }
}

/// `h:mm:ss` (or `m:ss` under an hour), as the page's script counts it down.
fn countdown_text(secs: u64) -> String {
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

fn eta_text(eta: Eta) -> String {
    fn fmt(secs: u64) -> String {
        if secs < 90 {
            format!("{} s", secs.max(1))
        } else {
            format!("{} min", (secs + 30) / 60)
        }
    }
    if eta.max == 0 {
        "less than a minute".to_owned()
    } else if eta.min == eta.max {
        fmt(eta.max)
    } else {
        format!("{} – {}", fmt(eta.min), fmt(eta.max))
    }
}

fn respond(
    status: StatusCode,
    visitor_status: VisitorStatus,
    content_type: &'static str,
    body: String,
    retry_after: Option<u64>,
) -> Response<Body> {
    let mut response = respond_raw(status, content_type, body, retry_after);
    response.headers_mut().insert(
        STATUS_HEADER,
        HeaderValue::from_static(visitor_status.as_str()),
    );
    response
}

fn respond_raw(
    status: StatusCode,
    content_type: &'static str,
    body: String,
    retry_after: Option<u64>,
) -> Response<Body> {
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some(secs) = retry_after {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

/// A small plain-text response (health checks).
pub fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    respond_raw(status, "text/plain; charset=utf-8", text.to_owned(), None)
}

/// Whether the client's `Accept` ranks JSON above HTML (SPEC §5). A tie, `*/*` alone, or
/// no header means HTML.
pub fn prefers_json(accept: Option<&HeaderValue>) -> bool {
    let Some(accept) = accept.and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let (mut json_q, mut html_q) = (0.0f32, 0.0f32);
    let (mut json_specific, mut html_specific) = (false, false);
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.trim().strip_prefix("q="))
            .find_map(|q| q.trim().parse::<f32>().ok())
            .unwrap_or(1.0)
            .clamp(0.0, 1.0);
        match media.as_str() {
            "application/json" | "application/problem+json" => {
                json_q = if json_specific { json_q.max(q) } else { q };
                json_specific = true;
            }
            "text/html" | "application/xhtml+xml" => {
                html_q = if html_specific { html_q.max(q) } else { q };
                html_specific = true;
            }
            "application/*" if !json_specific => json_q = json_q.max(q),
            "text/*" if !html_specific => html_q = html_q.max(q),
            "*/*" => {
                if !json_specific {
                    json_q = json_q.max(q);
                }
                if !html_specific {
                    html_q = html_q.max(q);
                }
            }
            _ => {}
        }
    }
    json_q > html_q
}

#[cfg(test)]
mod tests {
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
    fn json_view_has_exactly_the_spec_fields() {
        let view = WaitingView {
            status: VisitorStatus::Waiting,
            room: "main".into(),
            position: Some(7),
            waiting: 42,
            eta_secs: Eta { min: 3, max: 5 },
            retry_after_secs: 5,
            phase: Phase::Queueing,
            paused: false,
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
            eta_secs: Eta { min: 1, max: 2 },
            retry_after_secs: 5,
            phase: Phase::Queueing,
            paused: false,
        };
        let text = RoomText {
            title: "<script>x</script>",
            message: "a & b",
        };
        let response = pages.waiting(&view, &text, StatusCode::OK, false);
        assert_eq!(response.headers()[STATUS_HEADER], "waiting");
        assert_eq!(response.headers()[header::CACHE_CONTROL], "no-store");
        assert_eq!(response.headers()[header::RETRY_AFTER], "5");
    }
}
