//! `GET …/status`: what an operator checks first. The queue store's health and
//! fail-open state (from the store health tracker, so it answers while the store is down),
//! the audit log's, the version, whether the front-end is built in, the rooms and the open
//! live streams. And `GET …/metrics`, every room in Prometheus text format.

use http::{Response, StatusCode};

use crate::http::body::Body;
use crate::http::pages::FRONTEND_BUILT_IN;

use super::AdminContext;
use super::api::{AuditLogStatus, FailOpenStatus, Status, StoreStatus};
use super::openapi::Guarded;
use super::problem::{ok, respond};

/// Queue-store health, fail-open state, version; answers while the store is down
#[utoipa::path(
    get,
    path = "/__anteroom/admin/api/status",
    operation_id = "status",
    responses(
        (status = 200, description = "Status", body = Status),
        Guarded,
    )
)]
pub(super) fn status(app: &AdminContext<'_>) -> Response<Body> {
    let health = app.admission.health();
    let audit_error = app.admin.audit.last_error();
    ok(&Status {
        version: env!("CARGO_PKG_VERSION"),
        frontend_built_in: FRONTEND_BUILT_IN,
        store: StoreStatus {
            kind: app.admin.store_kind,
            up: health.is_up(),
            down_for_secs: health.down_for().map(|d| d.as_secs_f64()),
        },
        fail_open: FailOpenStatus {
            enabled: app.admin.fail_open_after.is_some(),
            after_secs: app.admin.fail_open_after.map(|d| d.as_secs_f64()),
            active: health.failing_open(),
        },
        audit_log: AuditLogStatus {
            path: app.admin.audit.path().to_string_lossy().into_owned(),
            ok: audit_error.is_none(),
            last_error: audit_error,
        },
        rooms: app.rooms.to_vec(),
        open_streams: app.live.open_streams() as u64,
    })
}

/// Every room in Prometheus text format (0.0.4), from the statistics cache
#[utoipa::path(
    get,
    path = "/__anteroom/admin/api/metrics",
    operation_id = "metrics",
    responses(
        (status = 200, description = "Metrics", body = String,
            content_type = "text/plain; version=0.0.4; charset=utf-8"),
        Guarded,
    )
)]
pub(super) fn metrics(app: &AdminContext<'_>) -> Response<Body> {
    respond(
        StatusCode::OK,
        crate::metrics::CONTENT_TYPE,
        app.metrics.render(app.live.open_streams()),
    )
}
