//! Every response anteroom writes itself: the waiting page (HTML or JSON by `Accept`), the
//! holding and error pages, and `application/problem+json` errors. Each carries
//! `X-Anteroom-Status` when it is about a visitor, and `Cache-Control: no-store`.
//!
//! Two waiting pages: with the front-end built in (`web/`, see [`super::assets`]) the
//! split-flap board (`templates/board.html` plus the embedded script and stylesheet);
//! without it the plain page (`templates/waiting.html`, an inline script). Both are
//! complete without JavaScript (a `<noscript>` meta refresh), and both speak the visitor's
//! language ([`super::i18n`]).
//!
//! The operator's template (`waiting_template`), when set, renders every state's page,
//! the holding and error pages included, with a `state` variable to branch on
//! ([`states`]); a template that fails falls back to the built-in page.

use std::sync::OnceLock;
use std::time::SystemTime;

use http::{HeaderValue, Response, StatusCode, header};
use minijinja::{Environment, Value, context};
use serde::Serialize;

use super::assets::{self, Entry};
use super::body::{Body, full};
use super::i18n::{self, Catalog, Lang};
use crate::fairness::eta::Eta;
use crate::log_limiter::LogLimiter;

mod challenge;
mod states;

pub use challenge::{ANSWER_PATH, ChallengeView, WAIT_PATH};

use states::{OPERATOR_TEMPLATE, PageState};

/// The name of the `X-Anteroom-Status` header, which carries a [`VisitorStatus`].
pub const STATUS_HEADER: &str = "x-anteroom-status";

/// Whether the animated front-end (`web/dist`) is compiled into this binary: set by
/// `build.rs` when Vite's manifest was there to embed. Without it every page is the plain
/// server-rendered one.
pub const FRONTEND_BUILT_IN: bool = cfg!(anteroom_frontend);

/// The value of `X-Anteroom-Status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum VisitorStatus {
    /// In line (or in the draw, or before the queue opens).
    Waiting,
    /// Turned away by the join limit or a per-client share; may retry later.
    Refused,
    /// The room is past `closes_at` and admits nobody new.
    Closed,
    /// The store is unreachable; the holding page keeps retrying.
    Stalled,
    /// The client is banned by the abuse registry.
    Banned,
    /// The queue breaker (`max_waiting`) turned a newcomer away.
    Full,
    /// The room is sold out (its sold-out mode): nobody else gets in.
    #[serde(rename = "sold_out")]
    SoldOut,
    /// A newcomer asked for the proof of work before joining (no place yet).
    Challenge,
}

impl VisitorStatus {
    /// The header value: the lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            VisitorStatus::Waiting => "waiting",
            VisitorStatus::Refused => "refused",
            VisitorStatus::Closed => "closed",
            VisitorStatus::Stalled => "stalled",
            VisitorStatus::Banned => "banned",
            VisitorStatus::Full => "full",
            VisitorStatus::SoldOut => "sold_out",
            VisitorStatus::Challenge => "challenge",
        }
    }
}

/// Where a room is in its schedule; `Queueing` for rooms without one. The store
/// decides it, from its own clock.
pub use crate::queue::Phase;

/// What a waiting (or held) visitor is shown, in HTML or JSON.
#[derive(Clone, Debug, Serialize)]
pub struct WaitingView {
    /// Which of the visitor statuses this view is; also sent as `X-Anteroom-Status`.
    pub status: VisitorStatus,
    /// The room's name.
    pub room: String,
    /// 1 for the head of the line; `None` during a lottery draw or when not in line.
    pub position: Option<u64>,
    /// Everyone in line (during the draw: everyone entered).
    pub waiting: u64,
    /// The estimated wait, as a range in seconds.
    pub eta_secs: Eta,
    /// How soon to poll again, in seconds: the `Retry-After` header and the no-script refresh.
    pub retry_after_secs: u64,
    /// Where the room is in its schedule.
    pub phase: Phase,
    /// Whether the room is paused.
    pub paused: bool,
    /// The visitor's 8-character reference, for support; `ref` in JSON.
    #[serde(rename = "ref", skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// When the current phase ends (`before_open`: the queue opens; `draw`: the doors
    /// open), for the page's countdown. Not part of the JSON body.
    #[serde(skip)]
    pub phase_ends_at: Option<SystemTime>,
    /// A lottery entrant's receipt: their draw hash, and their place once the
    /// doors opened; `receipt` in JSON, absent for anyone else.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receipt: Option<crate::fairness::draw::Receipt>,
}

/// Page text that comes from the room's config rather than the store.
pub struct RoomText<'a> {
    /// The room's title (empty for the translated default).
    pub title: &'a str,
    /// The operator's message for the page, shown as given.
    pub message: &'a str,
}

/// The page renderer: the built-in templates, the front-end entry when built in, and the operator's template and stylesheet.
pub struct Pages {
    env: Environment<'static>,
    /// The split-flap board's script and stylesheets, when the front-end is built in.
    board: Option<Entry>,
    /// The operator's template replaces ours when set (`waiting_template`).
    custom_template: bool,
    /// The operator's stylesheet, added to our pages (`waiting_stylesheet`).
    custom_css: Option<String>,
    /// Rations the log lines of an operator's template that fails to render.
    template_errors: LogLimiter,
}

impl Default for Pages {
    /// The board when it is built in, else the plain page.
    fn default() -> Self {
        Pages::new(assets::entry(assets::WAITING_ENTRY))
    }
}

/// An operator-supplied file: where it came from and what it said when loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageFile {
    /// Where it was read from (for messages).
    pub path: std::path::PathBuf,
    /// Its contents when the config was loaded.
    pub text: String,
}

/// The waiting page as the operator wants it: a minijinja template replacing the
/// built-in one (same context variables), and a stylesheet added to the built-in pages.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WaitingPageConfig {
    /// `waiting_template`: replaces the built-in page.
    pub template: Option<PageFile>,
    /// `waiting_stylesheet`: added to the built-in pages.
    pub stylesheet: Option<PageFile>,
}

impl Pages {
    /// The built-in pages with the operator's template and stylesheet, if configured (both
    /// were read and checked when the config was loaded).
    pub fn with_operator_page(mut self, page: &WaitingPageConfig) -> Self {
        if let Some(template) = &page.template {
            match self
                .env
                .add_template_owned(OPERATOR_TEMPLATE, template.text.clone())
            {
                Ok(()) => self.custom_template = true,
                Err(e) => {
                    tracing::error!(path = %template.path.display(), error = %e, "waiting_template does not parse; using the built-in page")
                }
            }
        }
        self.custom_css = page.stylesheet.as_ref().map(|css| css.text.clone());
        self
    }
}

/// The data blob the board's script starts from (`<script type="application/json">`):
/// `{"strings": <the language's catalog>, …these fields}`. The catalog's part is made once
/// per language ([`catalog_json`]); it used to be serialized through the template engine
/// on every waiting page, a fifth of a join's CPU time.
#[derive(Serialize)]
struct BoardData {
    /// Only in the `data` object an operator's own template gets; the built-in pages get
    /// `data_json`, where [`board_data`] puts the catalog in from its cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    strings: Option<&'static Catalog>,
    position: Option<u64>,
    waiting: u64,
    eta_secs: Eta,
    phase: Phase,
    paused: bool,
    server_now_ms: u64,
    countdown_to_ms: Option<u64>,
}

/// `value` as JSON safe inside a `<script>` element and an HTML attribute: what
/// minijinja's `tojson` filter writes (`<`, `>`, `&` and `'` as `\u` escapes).
fn script_json(value: &impl Serialize) -> String {
    let json = serde_json::to_string(value).expect("page data always serializes");
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\'' => out.push_str("\\u0027"),
            _ => out.push(c),
        }
    }
    out
}

/// Each language's catalog as [`script_json`], made once.
fn catalog_json(lang: Lang) -> &'static str {
    static JSON: OnceLock<Vec<String>> = OnceLock::new();
    let all = JSON.get_or_init(|| Lang::ALL.iter().map(|l| script_json(l.catalog())).collect());
    &all[lang_index(lang)]
}

/// Each language's catalog as a template value, converted once (values share their data).
fn catalog_value(lang: Lang) -> Value {
    static VALUES: OnceLock<Vec<Value>> = OnceLock::new();
    VALUES.get_or_init(|| {
        Lang::ALL
            .iter()
            .map(|l| Value::from_serialize(l.catalog()))
            .collect()
    })[lang_index(lang)]
    .clone()
}

fn lang_index(lang: Lang) -> usize {
    Lang::ALL
        .iter()
        .position(|l| *l == lang)
        .expect("every language is in Lang::ALL")
}

/// The board's data blob: `{"strings":…,` then `data`'s own fields (`data.strings` is
/// `None`).
fn board_data(lang: Lang, data: &BoardData) -> String {
    let fields = script_json(data);
    let fields = fields
        .strip_prefix('{')
        .expect("a struct serializes to an object");
    let strings = catalog_json(lang);
    let mut out = String::with_capacity(strings.len() + fields.len() + 16);
    out.push_str("{\"strings\":");
    out.push_str(strings);
    if fields != "}" {
        out.push(',');
    }
    out.push_str(fields);
    out
}

/// One digit of the server-rendered board.
#[derive(Serialize)]
struct Digit {
    d: char,
    lead: bool,
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `position` zero-padded to the digits of `waiting` (the board's starting width), each
/// digit marked when it is a leading zero.
fn board_digits(position: u64, waiting: u64) -> Vec<Digit> {
    let width = waiting.max(position).to_string().len();
    let text = format!("{position:0width$}");
    let last = text.len() - 1;
    let mut leading = true;
    text.chars()
        .enumerate()
        .map(|(i, d)| {
            leading = leading && d == '0' && i < last;
            Digit { d, lead: leading }
        })
        .collect()
}

/// `1 d 02:03:04`, `02:03:04` or `03:04`, as the script's countdown shows it.
fn countdown_text(secs: u64, catalog: &Catalog) -> String {
    let (days, h, m, s) = (
        secs / 86_400,
        secs % 86_400 / 3600,
        secs % 3600 / 60,
        secs % 60,
    );
    let clock = if days > 0 || h > 0 {
        format!("{h:02}:{m:02}:{s:02}")
    } else {
        format!("{m:02}:{s:02}")
    };
    if days > 0 {
        format!("{} {clock}", catalog.days.replace("{n}", &days.to_string()))
    } else {
        clock
    }
}

/// The plain waiting page's one inline script, exactly as rendered (it holds no template
/// tags: the refresh interval is read from its `data-refresh`), so its hash can be allowed.
fn plain_script() -> &'static str {
    let template = include_str!("templates/waiting.html");
    let start = template
        .find("<script data-refresh=")
        .and_then(|i| template[i..].find('>').map(|j| i + j + 1))
        .expect("the plain page has its inline script");
    let end = start
        + template[start..]
            .find("</script>")
            .expect("the inline script is closed");
    &template[start..end]
}

/// The Content-Security-Policy of every response anteroom produces itself: only
/// our own files (and the plain page's one inline script, by hash) run, nothing may frame
/// the page, forms and `<base>` cannot point elsewhere. Inline styles stay allowed for the
/// operator's `waiting_stylesheet`. Workers come from our own files only, and WebAssembly
/// may be compiled (`'wasm-unsafe-eval'`, not `eval`): the challenge's worker hashes with
/// it (the worker's own response carries this policy too).
pub fn content_security_policy() -> &'static str {
    static CSP: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        use base64::Engine;
        use sha2::Digest;
        let hash = base64::engine::general_purpose::STANDARD
            .encode(sha2::Sha256::digest(plain_script().as_bytes()));
        format!(
            "default-src 'none'; script-src 'self' 'sha256-{hash}' 'wasm-unsafe-eval'; \
             worker-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; \
             connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; \
             frame-ancestors 'none'"
        )
    });
    &CSP
}

/// Adds the security headers to a response anteroom produced itself: the CSP
/// (unless the response set a stricter one of its own, as the control room does),
/// `nosniff`, `X-Frame-Options: DENY` and `X-Robots-Tag: noindex`.
pub fn add_security_headers(headers: &mut http::HeaderMap) {
    use http::header::{self, HeaderValue};
    headers
        .entry(header::CONTENT_SECURITY_POLICY)
        .or_insert_with(|| {
            HeaderValue::from_str(content_security_policy()).expect("the CSP is ASCII")
        });
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert("x-robots-tag", HeaderValue::from_static("noindex"));
}

impl Pages {
    /// Pages with the board's assets (`Some`) or the plain page (`None`).
    pub fn new(board: Option<Entry>) -> Self {
        let mut env = Environment::new();
        env.add_template("waiting.html", include_str!("templates/waiting.html"))
            .expect("built-in waiting template parses");
        env.add_template("board.html", include_str!("templates/board.html"))
            .expect("built-in board template parses");
        env.add_template("message.html", include_str!("templates/message.html"))
            .expect("built-in message template parses");
        env.add_template("challenge.html", include_str!("templates/challenge.html"))
            .expect("built-in challenge template parses");
        Pages {
            env,
            board,
            custom_template: false,
            custom_css: None,
            template_errors: LogLimiter::new(states::LOG_EVERY),
        }
    }

    /// The plain page, whatever this binary was built with.
    pub fn plain() -> Self {
        Pages::new(None)
    }

    /// Whether waiting visitors get the split-flap board.
    pub fn has_board(&self) -> bool {
        self.board.is_some()
    }

    /// The waiting page, as HTML (in `lang`) or JSON.
    pub fn waiting(
        &self,
        view: &WaitingView,
        text: &RoomText<'_>,
        status: StatusCode,
        json: bool,
        lang: Lang,
    ) -> Response<Body> {
        let (content_type, body) = if json {
            (
                "application/json",
                serde_json::to_string(view).expect("a view always serializes"),
            )
        } else {
            let t = lang.catalog();
            let now = SystemTime::now();
            let countdown_secs = view
                .phase_ends_at
                .and_then(|end| end.duration_since(now).ok())
                .map_or(0, |d| d.as_secs_f64().ceil() as u64);
            let title = i18n::title(text.title, t);
            let data = BoardData {
                strings: None,
                position: view.position,
                waiting: view.waiting,
                eta_secs: view.eta_secs,
                phase: view.phase,
                paused: view.paused,
                server_now_ms: unix_ms(now),
                countdown_to_ms: view.phase_ends_at.map(unix_ms),
            };
            let state = PageState::of_waiting(view);
            let ctx = context! {
                state => state.as_str(),
                status_code => status.as_u16(),
                t => catalog_value(lang),
                title => title,
                message => text.message,
                position => view.position,
                waiting => view.waiting,
                eta_text => if view.eta_secs.estimating {
                    t.eta_estimating.to_owned()
                } else {
                    t.eta(view.eta_secs.min, view.eta_secs.max)
                },
                announce => view.position.map(|p| t.announce(p)),
                paused => view.paused,
                reference => view.reference,
                receipt => view.receipt,
                phase => view.phase.as_str(),
                custom_css => self.custom_css.clone().map(Value::from_safe_string),
                refresh_secs => view.retry_after_secs,
                countdown_text => countdown_text(countdown_secs, t),
                digits => board_digits(view.position.unwrap_or(0), view.waiting),
                // Our own build's URLs (from the embedded manifest), written as they are.
                script => self.board.as_ref().map(|b| Value::from_safe_string(b.script.clone())),
                styles => self.board.as_ref().map(|b| {
                    b.styles.iter().cloned().map(Value::from_safe_string).collect::<Vec<_>>()
                }),
                data_json => Value::from_safe_string(board_data(lang, &data)),
                data => self.custom_template.then_some(BoardData { strings: Some(t), ..data }),
            };
            let operator = self
                .custom_template
                .then(|| {
                    states::render_operator(&self.env, &self.template_errors, state, ctx.clone())
                })
                .flatten();
            let built_in = if self.board.is_some() {
                "board.html"
            } else {
                "waiting.html"
            };
            let html = operator.unwrap_or_else(|| {
                self.env
                    .get_template(built_in)
                    .and_then(|t| t.render(ctx))
                    .unwrap_or_else(|e| {
                        tracing::error!(error = %e, "waiting page failed to render");
                        format!("You are number {:?} in line.", view.position)
                    })
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

    /// The page for a visitor over the join limit, in their language, with the status the
    /// request path decided (429).
    pub fn refused(
        &self,
        lang: Lang,
        status: StatusCode,
        retry_after: u64,
        json: bool,
    ) -> Response<Body> {
        let t = lang.catalog();
        self.message_in(
            lang,
            status,
            Some(VisitorStatus::Refused),
            t.refused_title,
            t.refused_detail,
            Some(retry_after),
            json,
        )
    }

    /// A client banned by the abuse registry, in their language, with the status the
    /// request path decided (429 with `Retry-After`, the ban's time left, or 403 when
    /// permanent). JSON clients get `{"status":"banned","retry_after_secs":N|null}`.
    pub fn banned(
        &self,
        lang: Lang,
        status: StatusCode,
        retry_after: Option<u64>,
        json: bool,
    ) -> Response<Body> {
        if json {
            let body = serde_json::json!({
                "status": VisitorStatus::Banned.as_str(),
                "retry_after_secs": retry_after,
            });
            let mut response =
                respond_raw(status, "application/json", body.to_string(), retry_after);
            response.headers_mut().insert(
                STATUS_HEADER,
                HeaderValue::from_static(VisitorStatus::Banned.as_str()),
            );
            return response;
        }
        let t = lang.catalog();
        self.message_in(
            lang,
            status,
            Some(VisitorStatus::Banned),
            t.banned_title,
            t.banned_detail,
            retry_after,
            false,
        )
    }

    /// The page for a newcomer turned away by the queue breaker, with the status the
    /// request path decided (503).
    pub fn full(
        &self,
        lang: Lang,
        status: StatusCode,
        retry_after: u64,
        json: bool,
    ) -> Response<Body> {
        let t = lang.catalog();
        self.message_in(
            lang,
            status,
            Some(VisitorStatus::Full),
            t.full_title,
            t.full_detail,
            Some(retry_after),
            json,
        )
    }

    /// The page for a room whose line is closed, in the visitor's language.
    pub fn closed(&self, lang: Lang, status: StatusCode, json: bool) -> Response<Body> {
        let t = lang.catalog();
        self.message_in(
            lang,
            status,
            Some(VisitorStatus::Closed),
            t.closed_title,
            t.closed_detail,
            None,
            json,
        )
    }

    /// The sold-out page, in the visitor's language; `message` (the operator's, may be
    /// empty) replaces the built-in detail.
    pub fn sold_out(
        &self,
        lang: Lang,
        status: StatusCode,
        message: &str,
        json: bool,
    ) -> Response<Body> {
        let t = lang.catalog();
        let detail = if message.is_empty() {
            t.sold_out_detail
        } else {
            message
        };
        self.message_in(
            lang,
            status,
            Some(VisitorStatus::SoldOut),
            t.sold_out_title,
            detail,
            None,
            json,
        )
    }

    /// A page anteroom answers itself instead of the site, in `lang` (the page's `lang`
    /// and `dir`; the caller passes the catalog's text): HTML for browsers,
    /// `application/problem+json` for clients that prefer JSON.
    #[allow(clippy::too_many_arguments)]
    pub fn message_in(
        &self,
        lang: Lang,
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
            let state = PageState::of_message(visitor_status);
            let operator = self
                .custom_template
                .then(|| {
                    let ctx = context! {
                        state => state.as_str(),
                        status_code => status.as_u16(),
                        t => catalog_value(lang),
                        title => title,
                        detail => detail,
                        refresh_secs => retry_after,
                        custom_css => self.custom_css.clone().map(Value::from_safe_string),
                    };
                    states::render_operator(&self.env, &self.template_errors, state, ctx)
                })
                .flatten();
            let html = operator.unwrap_or_else(|| {
                self.env
                    .get_template("message.html")
                    .and_then(|t| {
                        t.render(context! {
                            t => lang.catalog(),
                            title => title,
                            detail => detail,
                            refresh_secs => retry_after,
                        })
                    })
                    .unwrap_or_else(|_| title.to_owned())
            });
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

/// Whether the client's `Accept` ranks JSON above HTML. A tie, `*/*` alone, or
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
mod tests;
