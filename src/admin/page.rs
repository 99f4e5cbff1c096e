//! The control room's page at `/__anteroom/admin/`: the shell of the built-in front-end
//! (`templates/control.html`, which loads the `web/src/control/` entry; the token is typed
//! into it and kept in the tab's `sessionStorage`), or, when the front-end is not built
//! in, a placeholder listing the API with `curl` examples (`templates/admin.html`). Either
//! way it holds no secret and needs no token.

use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use minijinja::{Environment, context};
use serde_json::{Value, json};

use crate::http::assets::Entry;
use crate::http::body::Body;

use super::problem::respond;
use super::{AdminContext, AdminError, Op, routes};

/// The page's templates, parsed once when the [`super::Admin`] is made.
pub(super) fn templates() -> Environment<'static> {
    let mut pages = Environment::new();
    pages
        .add_template("admin.html", include_str!("templates/admin.html"))
        .expect("built-in admin template parses");
    pages
        .add_template("control.html", include_str!("templates/control.html"))
        .expect("built-in control room template parses");
    pages
}

/// What the control room's shell may load: its own scripts and stylesheets, and the API.
/// No inline script or style, no framing (the page has buttons worth clickjacking).
const CONTROL_CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// `GET /__anteroom/admin/`: the control room's shell when the front-end is built in,
/// else a page listing the API.
pub(super) fn page(app: &AdminContext<'_>, req: &Request<Incoming>) -> Response<Body> {
    if let Some(control) = &app.admin.control {
        return control_page(app, control);
    }
    // Only echoed back to whoever sent it, and escaped by the template.
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost:8080");
    let base = format!("http://{host}");
    let first_room = app.rooms.first().map(String::as_str);
    let endpoints: Vec<Value> = routes()
        .iter()
        .map(|r| {
            let path = r.path.replace("{room}", first_room.unwrap_or("main"));
            let mut curl = String::from("curl -s");
            if r.method != Method::GET {
                curl.push_str(&format!(" -X {}", r.method));
            }
            if r.auth {
                curl.push_str(" -H \"Authorization: Bearer $ANTEROOM_ADMIN_TOKEN\"");
            }
            if r.op == Op::RoomConfig {
                curl.push_str(" -H 'Content-Type: application/json' -d '{\"rate\": 20}'");
            }
            curl.push_str(&format!(" {base}{path}"));
            json!({
                "method": r.method.as_str(),
                "path": r.path,
                "summary": r.summary,
                "auth": r.auth,
                "curl": curl,
            })
        })
        .collect();
    let html = app
        .admin
        .pages
        .get_template("admin.html")
        .and_then(|t| {
            t.render(context! {
                endpoints => endpoints,
                rooms => app.rooms,
                version => env!("CARGO_PKG_VERSION"),
            })
        })
        .unwrap_or_else(|e| {
            tracing::error!(error = %e, "admin page failed to render");
            "The control room front-end is not built in; see /__anteroom/admin/api/openapi.json."
                .to_owned()
        });
    respond(StatusCode::OK, "text/html; charset=utf-8", html)
}

/// The control room's HTML shell: the entry's stylesheets and module script, and a
/// `<noscript>` pointing at the API. Everything else is drawn by the script.
fn control_page(app: &AdminContext<'_>, control: &Entry) -> Response<Body> {
    let rendered = app.admin.pages.get_template("control.html").and_then(|t| {
        t.render(context! {
            script => minijinja::Value::from_safe_string(control.script.clone()),
            styles => control
                .styles
                .iter()
                .cloned()
                .map(minijinja::Value::from_safe_string)
                .collect::<Vec<_>>(),
            version => env!("CARGO_PKG_VERSION"),
        })
    });
    let html = match rendered {
        Ok(html) => html,
        Err(e) => {
            tracing::error!(error = %e, "control room page failed to render");
            return AdminError::PageUnavailable.into_response();
        }
    };
    let mut response = respond(StatusCode::OK, "text/html; charset=utf-8", html);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTROL_CSP),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    response
}
