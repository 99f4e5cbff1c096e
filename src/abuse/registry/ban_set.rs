//! The active bans as the request path reads them, in a persistent structure: a snapshot
//! costs nothing to take or keep, and a change copies only the path to it.

use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;

use crate::abuse::{Ban, client_bits, is_client_net};

/// A persistent map: cloning shares every node, and a change copies only the O(log n)
/// nodes on its path, so a snapshot costs nothing to take and nothing to keep.
type SharedMap = imbl::HashMap<u128, Arc<Ban>>;

/// The active bans as the request path reads them: single clients in a hash map, ranges
/// in a short list of maps. Readers hold an immutable snapshot (never a lock); a change
/// is made on the master copy and published as a new snapshot, both O(log n).
#[derive(Clone, Debug, Default)]
pub(super) struct BanSet {
    exact: SharedMap,
    /// Range bans grouped by mask (IPv4 in its IPv4-mapped IPv6 form): network bits →
    /// ban. A lookup is one hash probe per distinct prefix length in use (at most 57),
    /// however many ranges are banned.
    nets: Vec<(u128, SharedMap)>,
}

/// A range as (network bits, mask) in the IPv4-mapped IPv6 space.
fn net_bits(net: &IpNet) -> (u128, u128) {
    let (addr, prefix) = match net {
        IpNet::V4(n) => (
            u128::from(n.network().to_ipv6_mapped()),
            96 + u32::from(n.prefix_len()),
        ),
        IpNet::V6(n) => (u128::from(n.network()), u32::from(n.prefix_len())),
    };
    let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
    (addr & mask, mask)
}

impl BanSet {
    pub(super) fn from_bans(bans: impl IntoIterator<Item = Arc<Ban>>) -> Self {
        let mut set = BanSet::default();
        for ban in bans {
            set.insert(ban);
        }
        set
    }

    /// Adds `ban`, returning the one it replaces on the same target.
    pub(super) fn insert(&mut self, ban: Arc<Ban>) -> Option<Arc<Ban>> {
        if is_client_net(&ban.target) {
            return self.exact.insert(client_bits(ban.target.addr()), ban);
        }
        let (bits, mask) = net_bits(&ban.target);
        match self.nets.iter_mut().find(|(m, _)| *m == mask) {
            Some((_, by_net)) => by_net.insert(bits, ban),
            None => {
                self.nets.push((mask, SharedMap::unit(bits, ban)));
                None
            }
        }
    }

    /// Removes the ban on exactly `target`.
    pub(super) fn remove(&mut self, target: &IpNet) -> Option<Arc<Ban>> {
        if is_client_net(target) {
            return self.exact.remove(&client_bits(target.addr()));
        }
        let (bits, mask) = net_bits(target);
        let i = self.nets.iter().position(|(m, _)| *m == mask)?;
        let removed = self.nets[i].1.remove(&bits);
        if self.nets[i].1.is_empty() {
            self.nets.swap_remove(i);
        }
        removed
    }

    /// The ban on exactly `target` (not one of a covering range).
    pub(super) fn get(&self, target: &IpNet) -> Option<&Arc<Ban>> {
        let found = if is_client_net(target) {
            self.exact.get(&client_bits(target.addr()))
        } else {
            let (bits, mask) = net_bits(target);
            self.nets
                .iter()
                .find(|(m, _)| *m == mask)
                .and_then(|(_, by_net)| by_net.get(&bits))
        };
        found.filter(|b| b.target == *target)
    }

    pub(super) fn len(&self) -> usize {
        self.exact.len() + self.nets.iter().map(|(_, n)| n.len()).sum::<usize>()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.nets.is_empty()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &Arc<Ban>> {
        self.exact
            .values()
            .chain(self.nets.iter().flat_map(|(_, by_net)| by_net.values()))
    }

    /// The longest-lasting ban active at `now` that covers `ip`.
    pub(super) fn lookup(&self, ip: IpAddr, now: u64) -> Option<&Arc<Ban>> {
        let bits = client_bits(ip);
        let mut best: Option<&Arc<Ban>> = None;
        // Ranges are never narrower than a client (see `parse_target`), so testing the
        // client's bits is testing the address.
        let ranges = self
            .nets
            .iter()
            .filter_map(|(mask, by_net)| by_net.get(&(bits & mask)));
        for ban in self.exact.get(&bits).into_iter().chain(ranges) {
            if !ban.active_at(now) {
                continue;
            }
            best = match best {
                Some(b) if lasts_longer(b, ban) => Some(b),
                _ => Some(ban),
            };
        }
        best
    }
}

/// Whether `a` ends no earlier than `b` (permanent is forever).
pub(super) fn lasts_longer(a: &Ban, b: &Ban) -> bool {
    match (a.until_ms, b.until_ms) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(x), Some(y)) => x >= y,
    }
}
