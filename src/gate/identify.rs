//! Step 1 of the request path: who is asking — client address (trusted-proxy aware), the
//! [`ClientKey`] limits and bans count, the room by host, the verified visitor cookie, and
//! what they read (JSON or HTML, language).

use std::net::{IpAddr, SocketAddr};
use std::time::SystemTime;

use http::{Request, header};

use super::App;
use crate::abuse::{BanVerdict, StrikeReason};
use crate::http::i18n;
use crate::http::pages;
use crate::identity::{self, ClientKey};
use crate::queue::VisitorId;
use crate::token::CookieError;

/// Who is asking, established before anything else runs.
pub struct Identity {
    /// Behind trusted proxies, the address they forwarded for; else the peer.
    pub client_ip: IpAddr,
    /// What the join limit and bans count: the IPv4 address or the IPv6 /64.
    pub client: ClientKey,
    /// The abuse registry's verdict, checked before the cookie is read (SPEC §10 step 1).
    pub banned: Option<BanVerdict>,
    /// Index into the app's rooms, by host or the catch-all.
    pub room: Option<usize>,
    /// The verified visitor of this room, if the cookie verified.
    pub visitor: Option<VisitorId>,
    pub wants_json: bool,
    /// The language of our pages, from `Accept-Language`.
    pub lang: i18n::Lang,
}

impl App {
    pub(super) fn identify<B>(&self, req: &Request<B>, peer: SocketAddr) -> Identity {
        let client_ip = identity::client_ip(peer.ip(), req.headers(), &self.trusted);
        let room = identity::request_host(req)
            .and_then(|host| self.hosts.get(&host).copied())
            .or(self.catch_all);
        // The ban check comes first: a banned client's cookie is never even verified.
        let banned = self.abuse.check(client_ip);
        let visitor = room.filter(|_| banned.is_none()).and_then(|i| {
            let value = crate::token::find_cookie(req.headers())?;
            match self.cookies.verify(value, SystemTime::now()) {
                Ok(claim) if claim.room == self.rooms[i].config.name => Some(claim.visitor),
                Ok(_) => None,
                Err(e) => {
                    tracing::debug!(%client_ip, error = %e, "visitor cookie rejected");
                    // A forged cookie is a strike (SPEC §10); an expired one is not.
                    if matches!(e, CookieError::BadSignature | CookieError::UnknownKey) {
                        self.strike(client_ip, StrikeReason::BadCookie);
                    }
                    None
                }
            }
        });
        Identity {
            client_ip,
            client: ClientKey::from(client_ip),
            banned,
            room,
            visitor,
            wants_json: pages::prefers_json(req.headers().get(header::ACCEPT)),
            lang: i18n::negotiate(req.headers().get(header::ACCEPT_LANGUAGE)),
        }
    }
}
