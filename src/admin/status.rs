//! `GET …/api/status`: what an operator checks first. The queue store's health and
//! fail-open state (from the store health tracker, so it answers while the store is down),
//! the audit log's, the version, whether the front-end is built in, the rooms and the open
//! live streams.

use http::Response;
use serde_json::json;

use crate::http::body::Body;
use crate::http::pages::FRONTEND_BUILT_IN;

use super::AdminContext;
use super::problem::ok;

/// The status document.
pub(super) fn status(app: &AdminContext<'_>) -> Response<Body> {
    let health = app.admission.health();
    let audit_error = app.admin.audit.last_error();
    ok(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "frontend_built_in": FRONTEND_BUILT_IN,
        "store": {
            "kind": app.admin.store_kind,
            "up": health.is_up(),
            "down_for_secs": health.down_for().map(|d| d.as_secs_f64()),
        },
        "fail_open": {
            "enabled": app.admin.fail_open_after.is_some(),
            "after_secs": app.admin.fail_open_after.map(|d| d.as_secs_f64()),
            "active": health.failing_open(),
        },
        "audit_log": {
            "path": app.admin.audit.path(),
            "ok": audit_error.is_none(),
            "last_error": audit_error,
        },
        "rooms": app.rooms,
        "open_streams": app.live.open_streams(),
    }))
}
