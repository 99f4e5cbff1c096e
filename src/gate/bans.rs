//! The gate's side of the abuse registry: a request to a ban path bans its client, strikes
//! are recorded without holding a request, and a banned client stops holding anything. For
//! that last part this replica keeps who it admitted recently, by client address, so the
//! once-a-second sweep can end a banned client's sessions at once instead of leaving them
//! to `session_ttl`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http::{Request, Response};
use hyper::body::Incoming;

use crate::abuse::{PathOutcome, StrikeReason};
use crate::http::body::Body;
use crate::queue::VisitorId;

use super::identify::Identity;
use super::{App, GateError, Kind, classify};

/// Clients this replica kept as recently admitted, over all its workers together (beyond
/// it, an arbitrary one is forgotten and its sessions end by `session_ttl` instead of at
/// once).
pub const RECENT_CLIENTS: usize = 65_536;
/// Visitors kept per client (a client behind one address with more tabs or browsers than
/// this has its oldest forgotten).
pub const RECENT_PER_CLIENT: usize = 8;

/// Client address → (room index, visitor) admitted recently through this replica. Bounded
/// by [`RECENT_CLIENTS`] × [`RECENT_PER_CLIENT`] entries (about 12 MB at most).
pub(super) struct RecentVisitors {
    by_client: HashMap<IpAddr, Vec<(usize, VisitorId)>>,
    /// Clients in every worker's table together, held under `max_clients`: a worker may
    /// be serving nearly all of them (one proxy's few connections), so the bound is on the
    /// sum, not a share each.
    clients: Arc<AtomicUsize>,
    max_clients: usize,
}

impl RecentVisitors {
    pub(super) fn new(clients: Arc<AtomicUsize>, max_clients: usize) -> Self {
        RecentVisitors {
            by_client: HashMap::new(),
            clients,
            max_clients: max_clients.max(1),
        }
    }

    pub(super) fn record(&mut self, client: IpAddr, room: usize, visitor: VisitorId) {
        // A client seen before (every request after its first) costs one lookup.
        if let Some(list) = self.by_client.get_mut(&client) {
            if list.contains(&(room, visitor)) {
                return;
            }
            if list.len() >= RECENT_PER_CLIENT {
                list.remove(0);
            }
            list.push((room, visitor));
            return;
        }
        // At the bound, one of this table's own goes (a table with none of its own adds
        // one anyway: the sum stays within one per worker of the bound).
        if self.clients.load(Ordering::Relaxed) >= self.max_clients
            && let Some(evict) = self.by_client.keys().next().copied()
        {
            self.by_client.remove(&evict);
            self.clients.fetch_sub(1, Ordering::Relaxed);
        }
        self.by_client.insert(client, vec![(room, visitor)]);
        self.clients.fetch_add(1, Ordering::Relaxed);
    }

    /// Removes and returns the visitors of clients for which `banned` is true.
    pub(super) fn take_where(
        &mut self,
        banned: impl Fn(IpAddr) -> bool,
    ) -> Vec<(usize, VisitorId)> {
        let clients: Vec<IpAddr> = self
            .by_client
            .keys()
            .copied()
            .filter(|ip| banned(*ip))
            .collect();
        self.clients.fetch_sub(clients.len(), Ordering::Relaxed);
        clients
            .into_iter()
            .flat_map(|ip| self.by_client.remove(&ip).unwrap_or_default())
            .collect()
    }
}

impl App {
    /// A request to one of `abuse.ban_paths` bans its client at once;
    /// nothing is proxied. A client in `abuse.allow` (or a trusted proxy) is not banned and
    /// gets a 404, and so does a cross-site request: another site's page can make a
    /// browser ask for `/.env`, and that must not ban the visitor.
    pub(super) async fn ban_path(
        &self,
        req: &Request<Incoming>,
        identity: &Identity,
    ) -> Response<Body> {
        if identity.fetch.cross_site {
            return self.error(Kind::NotFound, identity);
        }
        let path = classify::normalized_path(req.uri().path());
        match self.abuse.hit_ban_path(identity.client_ip, &path).await {
            PathOutcome::Banned(ban) => {
                tracing::warn!(client = %identity.client_ip, path = %path, until_ms = ?ban.until_ms, "ban path requested; client banned");
                let verdict =
                    self.abuse
                        .check(identity.client_ip)
                        .unwrap_or(crate::abuse::BanVerdict {
                            retry_after: Some(self.abuse.policy().cooldown),
                            ban,
                        });
                self.error(GateError::banned(&verdict), identity)
            }
            // `NotBanPath` cannot follow `Class::BanPath` (one glob set decides both); the
            // safe answer is the same.
            PathOutcome::Immune | PathOutcome::NotBanPath | PathOutcome::Full => {
                self.error(Kind::NotFound, identity)
            }
        }
    }

    /// Records a strike: embedded, before the next request is judged; with Redis in the
    /// background, since it is a store round trip no request waits for.
    pub(crate) fn strike(&self, ip: IpAddr, reason: StrikeReason) {
        self.abuse.strike_soon(ip, reason);
    }

    /// Remembers that `client` was admitted as `visitor` in room `room` (for [`App::sweep_banned`]).
    pub(super) fn record_admitted(&self, client: IpAddr, room: usize, visitor: VisitorId) {
        self.recent
            .get()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .record(crate::abuse::client_ip(client), room, visitor);
    }

    /// A banned client's visitors stop holding anything: their live streams
    /// close (so heartbeats stop and waiting visitors are abandoned after `abandon_after`),
    /// their streams and tunnels to the origin close, and the sessions this replica
    /// admitted them to end now. Runs every second; costs nothing while no ban is active.
    pub async fn sweep_banned(&self) {
        if self.abuse.bans_active() == 0 {
            return;
        }
        let abuse = &self.abuse;
        let closed = self.live.close_where(|ip| abuse.is_banned(ip));
        let rooms = self.rooms.load_full();
        let origin_streams: usize = (rooms.all().iter())
            .map(|room| room.streams.end_where(|ip| abuse.is_banned(ip)))
            .sum();
        let ended: Vec<(usize, VisitorId)> = (self.recent.all())
            .flat_map(|recent| {
                (recent.lock().unwrap_or_else(|p| p.into_inner()))
                    .take_where(|ip| abuse.is_banned(ip))
            })
            .collect();
        let mut sessions = 0;
        for (room, visitor) in ended {
            if let Ok(true) = self
                .admission
                .end_session(&rooms.get(room).name, visitor)
                .await
            {
                sessions += 1;
            }
        }
        if closed > 0 || sessions > 0 || origin_streams > 0 {
            tracing::info!(
                streams = closed,
                origin_streams,
                sessions,
                "banned clients' streams closed and sessions ended"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_visitors_are_bounded_per_client_and_per_table() {
        let clients = Arc::new(AtomicUsize::new(0));
        let mut recent = RecentVisitors::new(clients.clone(), 2);
        let (a, b, c): (IpAddr, IpAddr, IpAddr) = (
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            "10.0.0.3".parse().unwrap(),
        );
        let visitors: Vec<VisitorId> = (0..=RECENT_PER_CLIENT)
            .map(|_| VisitorId::random())
            .collect();
        // The same visitor again is not a second entry.
        recent.record(a, 0, visitors[0]);
        recent.record(a, 0, visitors[0]);
        assert_eq!(recent.by_client[&a], vec![(0, visitors[0])]);
        // One more than a client keeps: its oldest is forgotten.
        for v in &visitors[1..] {
            recent.record(a, 0, *v);
        }
        let kept: Vec<VisitorId> = recent.by_client[&a].iter().map(|e| e.1).collect();
        assert_eq!(kept, visitors[1..]);
        // A third client in a table of two forgets one of the others.
        recent.record(b, 1, visitors[0]);
        recent.record(c, 1, visitors[0]);
        assert_eq!(recent.by_client.len(), 2);
        assert!(recent.by_client.contains_key(&c));
        // The bound is on every worker's table together: another table at the bound
        // evicts from itself, and one with none of its own adds one anyway.
        let mut other = RecentVisitors::new(clients.clone(), 2);
        other.record(a, 0, visitors[0]);
        assert_eq!(clients.load(Ordering::Relaxed), 3);
        let d: IpAddr = "10.0.0.4".parse().unwrap();
        other.record(d, 0, visitors[0]);
        assert_eq!(other.by_client.len(), 1);
        assert_eq!(clients.load(Ordering::Relaxed), 3);
        drop(other.take_where(|_| true));
        assert_eq!(clients.load(Ordering::Relaxed), 2);
        // A ban takes its client's visitors out.
        let taken = recent.take_where(|ip| ip == c);
        assert_eq!(taken, vec![(1, visitors[0])]);
        assert!(!recent.by_client.contains_key(&c));
        assert_eq!(recent.by_client.len(), 1);
    }
}
