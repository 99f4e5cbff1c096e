//! The admin listener (`admin_listen`): the same identify step and ban check as the public
//! listener, then only the control room, the admin API, `/metrics` and the health checks;
//! never the site. `admin_allow` is checked here for whichever listener serves the admin.

use std::net::SocketAddr;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;

use crate::admin;
use crate::http::body::Body;
use crate::http::pages;

use super::identify::Identity;
use super::{App, Class, GateError, Kind, classify};

impl App {
    /// The admin listener (`admin_listen`): the control room, the admin API, `/metrics`
    /// (the API's metrics at the path Prometheus expects), and the health checks; nothing
    /// else, and never the site.
    pub async fn handle_admin(&self, req: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
        let (identity, started) = self.identify_logged(&self.rooms.load(), &req, peer);
        let (response, class) = self.admin_identified(req, identity, peer).await;
        self.logged(started, class, response)
    }

    pub(super) async fn admin_identified(
        &self,
        mut req: Request<Incoming>,
        identity: Identity,
        peer: SocketAddr,
    ) -> (Response<Body>, &'static str) {
        if identity.bad_forwarded {
            return (
                self.error(Kind::BadForwardedFor, &identity),
                classify::INVALID_LABEL,
            );
        }
        // Bans apply here exactly as on the public listener, probes excepted.
        if let Some(verdict) = &identity.banned
            && classify::probe(&req).is_none()
        {
            let class = Class::Banned(verdict.clone());
            return (
                self.error(GateError::banned(verdict), &identity),
                class.label(),
            );
        }
        // Refused targets (absolute-form, CONNECT) stay refused, `/metrics` included: the
        // rewrite below would otherwise drop the authority that marks them.
        let no_ban_paths = crate::glob::GlobSet::default();
        let fetch = identity.fetch;
        if let Class::Refused(kind) = classify(&req, &no_ban_paths, None, fetch) {
            return (self.error(kind, &identity), classify::INVALID_LABEL);
        }
        if req.uri().path() == "/metrics" {
            *req.uri_mut() = http::Uri::from_static(admin::METRICS_PATH);
        }
        let class = classify(&req, &no_ban_paths, None, fetch);
        let label = class.label();
        let response = match class {
            Class::Healthz => pages::plain(StatusCode::OK, "ok\n"),
            Class::Readyz => self.readyz().await,
            Class::Admin => self.admin(req, &identity, peer).await,
            Class::Refused(kind) => self.error(kind, &identity),
            _ => return (self.error(Kind::NotFound, &identity), "reserved"),
        };
        (response, label)
    }

    /// Everything under `/__anteroom/admin`, on whichever listener serves it. `admin_allow`
    /// is checked against the client address as the rest of the request path sees it: the
    /// direct peer, or what a trusted proxy forwarded for (an untrusted peer cannot claim
    /// an allowed address with `X-Forwarded-For`).
    pub(super) async fn admin(
        &self,
        req: Request<Incoming>,
        identity: &Identity,
        peer: SocketAddr,
    ) -> Response<Body> {
        if !self.admin_allow.is_empty()
            && !self
                .admin_allow
                .iter()
                .any(|net| net.contains(&identity.client_ip))
        {
            return admin::forbidden("This address may not reach the admin (admin_allow).");
        }
        admin::handle(&self.admin_context(), req, identity.client_ip, peer).await
    }
}
