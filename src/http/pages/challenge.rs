//! The challenge page: what a newcomer gets instead of a place while the room asks for the
//! proof of work — HTML with the element the built-in script solves from (and a
//! no-JavaScript refresh to the time lock), or the challenge as JSON.
//!
//! The page is rendered by the operator's template in state `challenge` when there is
//! one, else by `templates/challenge.html`. Its Content-Security-Policy is the product's,
//! which allows `'wasm-unsafe-eval'` for the worker's WebAssembly hash and
//! `worker-src 'self'`.

use http::{Response, StatusCode};
use minijinja::{Value, context};
use serde::Serialize;

use super::i18n::{self, Lang};
use super::states::{self, PageState};
use super::{Pages, RoomText, VisitorStatus, catalog_value, respond, respond_raw};
use crate::http::body::Body;

/// Where a solution is posted (JSON or a form).
pub const ANSWER_PATH: &str = "/__anteroom/challenge";
/// The no-JavaScript time lock: `?c=<challenge>&r=<return path>`.
pub const WAIT_PATH: &str = "/__anteroom/challenge/wait";
/// The built-in script that starts the worker.
pub const SCRIPT_PATH: &str = "/__anteroom/assets/challenge.js";

/// One challenge as it is handed to a newcomer.
#[derive(Clone, Debug)]
pub struct ChallengeView<'a> {
    /// The signed challenge text.
    pub challenge: &'a str,
    /// The leading zero bits it asks for.
    pub bits: u8,
    /// The same-site path to go on to once joined.
    pub return_to: &'a str,
    /// Seconds until the no-JavaScript time lock opens.
    pub no_js_secs: u64,
    /// Seconds until the challenge expires.
    pub expires_in_secs: u64,
}

/// The `challenge` object of the JSON answers (`{"status":"challenge","challenge":…}` and
/// a refusal's fresh one).
#[derive(Serialize)]
pub struct ChallengeJson<'a> {
    challenge: &'a str,
    bits: u8,
    answer: &'static str,
    expires_in_secs: u64,
}

impl<'a> ChallengeView<'a> {
    /// The view's JSON object.
    pub fn json(&self) -> ChallengeJson<'a> {
        ChallengeJson {
            challenge: self.challenge,
            bits: self.bits,
            answer: ANSWER_PATH,
            expires_in_secs: self.expires_in_secs,
        }
    }

    /// The time lock's URL for this challenge: `c` as it is (base64url and dots), `r`
    /// percent-encoded.
    pub fn wait_url(&self) -> String {
        format!(
            "{WAIT_PATH}?c={}&r={}",
            self.challenge,
            crate::http::form::encode(self.return_to)
        )
    }
}

/// `text` escaped for an HTML attribute (`&`, `<`, `>`, `"`, `'`), slashes left as they
/// are so the paths read as written.
fn attr(text: &str) -> Value {
    let mut out = String::with_capacity(text.len() + 8);
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    Value::from_safe_string(out)
}

impl Pages {
    /// The challenge for a newcomer, as HTML (in `lang`) or JSON, with `status` (the
    /// room's `queue_status_code`) and `X-Anteroom-Status: challenge`.
    pub fn challenge(
        &self,
        view: &ChallengeView<'_>,
        text: &RoomText<'_>,
        status: StatusCode,
        json: bool,
        lang: Lang,
    ) -> Response<Body> {
        if json {
            let body = serde_json::json!({
                "status": VisitorStatus::Challenge.as_str(),
                "challenge": view.json(),
            });
            return respond(
                status,
                VisitorStatus::Challenge,
                "application/json",
                body.to_string(),
                None,
            );
        }
        let t = lang.catalog();
        let c = lang.challenge();
        // The room's own title stays; the default one (in whichever language the config
        // wrote it) becomes this page's heading.
        let room_title = i18n::title(text.title, t);
        let title = if room_title == t.title_default {
            c.title
        } else {
            room_title
        };
        let ctx = context! {
            state => PageState::Challenge.as_str(),
            status_code => status.as_u16(),
            t => catalog_value(lang),
            c => Value::from_serialize(c),
            title => title,
            message => text.message,
            challenge => attr(view.challenge),
            bits => view.bits,
            answer => attr(ANSWER_PATH),
            return_to => attr(view.return_to),
            wait_url => attr(&view.wait_url()),
            no_js_secs => view.no_js_secs,
            no_js_text => c.no_js_in(view.no_js_secs),
            script => attr(SCRIPT_PATH),
            // What the script shows, as JSON already escaped for the attribute.
            script_strings => Value::from_safe_string(
                i18n::ChallengeText::script_json(lang).to_owned(),
            ),
            custom_css => self.custom_css.clone().map(Value::from_safe_string),
        };
        let operator = self
            .custom_template
            .then(|| {
                states::render_operator(
                    &self.env,
                    &self.template_errors,
                    PageState::Challenge,
                    ctx.clone(),
                )
            })
            .flatten();
        let html = operator.unwrap_or_else(|| {
            self.env
                .get_template("challenge.html")
                .and_then(|tpl| tpl.render(ctx))
                .unwrap_or_else(|e| {
                    tracing::error!(error = %e, "challenge page failed to render");
                    c.checking.to_owned()
                })
        });
        // The product's policy (added with the other security headers) already allows the
        // worker and its WebAssembly: the worker's own response carries it too, and a
        // worker runs under its own response's policy.
        respond(
            status,
            VisitorStatus::Challenge,
            "text/html; charset=utf-8",
            html,
            None,
        )
    }

    /// A refused answer for a JSON client (the page's script): `{"status":
    /// "challenge_refused","reason":…,"challenge":{…a fresh one…}}` with `status`.
    pub fn challenge_refused_json(
        &self,
        reason: &'static str,
        fresh: &ChallengeView<'_>,
        status: StatusCode,
    ) -> Response<Body> {
        let body = serde_json::json!({
            "status": "challenge_refused",
            "reason": reason,
            "challenge": fresh.json(),
        });
        respond_raw(status, "application/json", body.to_string(), None)
    }
}

#[cfg(test)]
mod tests {
    use http::header;

    use super::*;

    fn view() -> ChallengeView<'static> {
        ChallengeView {
            challenge: "c1.main.1733300000.17.AAECAwQFBgcICQoLDA0ODw.tag-tag-tag-tag.mac",
            bits: 17,
            return_to: "/shop?item=1&x=é",
            no_js_secs: 20,
            expires_in_secs: 300,
        }
    }

    async fn body(r: Response<Body>) -> String {
        use http_body_util::BodyExt;
        String::from_utf8(r.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
    }

    #[tokio::test]
    async fn the_page_carries_the_element_the_script_solves_from_and_the_no_js_refresh() {
        // The default title as a config holds it (in English): the page's own heading, in
        // the visitor's language.
        let text = RoomText {
            title: "You're in line",
            message: "",
        };
        let r = Pages::plain().challenge(&view(), &text, StatusCode::OK, false, Lang::De);
        assert_eq!(r.headers()[super::super::STATUS_HEADER], "challenge");
        assert_eq!(r.headers()[header::CACHE_CONTROL], "no-store");
        let csp = super::super::content_security_policy();
        assert!(csp.contains("'wasm-unsafe-eval'") && csp.contains("worker-src 'self'"));
        let html = body(r).await;
        for needle in [
            r#"id="anteroom-challenge""#,
            r#"data-challenge="c1.main.1733300000.17.AAECAwQFBgcICQoLDA0ODw.tag-tag-tag-tag.mac""#,
            r#"data-bits="17""#,
            r#"data-answer="/__anteroom/challenge""#,
            r#"data-return="/shop?item=1&amp;x=é""#,
            r#"role="status" aria-live="polite">Ihr Browser wird geprüft…"#,
            r#"<progress id="anteroom-challenge-progress" max="100""#,
            r#"content="20;url=/__anteroom/challenge/wait?c=c1.main.1733300000.17.AAECAwQFBgcICQoLDA0ODw.tag-tag-tag-tag.mac&amp;r=%2Fshop%3Fitem%3D1%26x%3D%C3%A9""#,
            r#"<script src="/__anteroom/assets/challenge.js"></script>"#,
            "in 20 Sekunden",
            "<title>Einen Moment…</title>",
            r#"data-wait-secs="20""#,
            "data-strings=\"{&quot;progress&quot;:&quot;Ihr Browser wird geprüft… {n} %&quot;",
            r#"lang="de""#,
        ] {
            assert!(html.contains(needle), "{needle} in {html}");
        }
    }

    #[tokio::test]
    async fn the_operators_template_renders_the_challenge_state() {
        let page = crate::http::pages::WaitingPageConfig {
            template: Some(crate::http::pages::PageFile {
                path: "custom.html".into(),
                text: r#"{% if state == "challenge" %}<div id="anteroom-challenge" data-challenge="{{ challenge }}" data-bits="{{ bits }}">{{ c.checking }}</div><noscript><meta http-equiv="refresh" content="{{ no_js_secs }};url={{ wait_url }}"></noscript>{% endif %}"#.into(),
            }),
            stylesheet: None,
        };
        let pages = Pages::plain().with_operator_page(&page);
        let text = RoomText {
            title: "",
            message: "",
        };
        let html = body(pages.challenge(&view(), &text, StatusCode::OK, false, Lang::Fr)).await;
        assert!(
            html.starts_with(r#"<div id="anteroom-challenge" data-challenge="c1.main."#),
            "{html}"
        );
        assert!(html.contains("Vérification de votre navigateur…"), "{html}");
        assert!(
            html.contains(r#"content="20;url=/__anteroom/challenge/wait?c=c1.main."#),
            "{html}"
        );
    }

    #[tokio::test]
    async fn json_clients_get_the_challenge_and_no_place() {
        let text = RoomText {
            title: "",
            message: "",
        };
        let r = Pages::plain().challenge(&view(), &text, StatusCode::ACCEPTED, true, Lang::En);
        assert_eq!(r.status(), StatusCode::ACCEPTED);
        let json: serde_json::Value = serde_json::from_str(&body(r).await).unwrap();
        assert_eq!(json["status"], "challenge");
        assert_eq!(json["challenge"]["bits"], 17);
        assert_eq!(json["challenge"]["answer"], "/__anteroom/challenge");
        assert_eq!(json["challenge"]["expires_in_secs"], 300);
        assert!(json.get("position").is_none());
    }
}
