//! What a room counts per client, for the per-client shares: places in line and sessions
//! on the site ([`ClientCounts`], numbering the clients that hold something so a place
//! carries 4 bytes, not an address), and the join limit's windows ([`JoinWindows`]). Both
//! hold only clients that hold something or tried recently, so memory is bounded whatever
//! the number of distinct clients that ever came.

use std::collections::{HashMap, VecDeque};

use crate::queue::ClientKey;

/// A client as a place in line holds it: 4 bytes instead of an address, numbered by the
/// room's `ClientCounts`. `NONE` for places with no client (restored from a snapshot,
/// which does not keep clients).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ClientRef(u32);

impl ClientRef {
    pub(crate) const NONE: ClientRef = ClientRef(0);
}

/// Per-client counts (places in line, sessions on the site), each client numbered while it
/// holds something; an entry is removed when its count drops to zero (and its number is
/// reused), so the map holds only clients that hold something.
#[derive(Default)]
pub(super) struct ClientCounts {
    numbers: HashMap<ClientKey, ClientRef>,
    /// By number − 1: the client and its count (0: a free number).
    entries: Vec<(ClientKey, u32)>,
    free: Vec<ClientRef>,
}

impl ClientCounts {
    pub(super) fn get(&self, client: ClientKey) -> u32 {
        self.numbers
            .get(&client)
            .map_or(0, |r| self.entries[r.0 as usize - 1].1)
    }

    /// Clients holding something.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.numbers.len()
    }

    /// Counts one more for `client` and returns its number.
    pub(super) fn add(&mut self, client: Option<ClientKey>) -> ClientRef {
        let Some(client) = client else {
            return ClientRef::NONE;
        };
        if let Some(&r) = self.numbers.get(&client) {
            self.entries[r.0 as usize - 1].1 += 1;
            return r;
        }
        let r = match self.free.pop() {
            Some(r) => {
                self.entries[r.0 as usize - 1] = (client, 1);
                r
            }
            None => {
                self.entries.push((client, 1));
                ClientRef(self.entries.len() as u32)
            }
        };
        self.numbers.insert(client, r);
        r
    }

    /// Counts one less for the client numbered `r`.
    pub(super) fn release(&mut self, r: ClientRef) {
        let Some(entry) = (r.0 as usize)
            .checked_sub(1)
            .and_then(|i| self.entries.get_mut(i))
        else {
            return;
        };
        if entry.1 == 0 {
            return;
        }
        entry.1 -= 1;
        if entry.1 == 0 {
            let client = entry.0;
            self.numbers.remove(&client);
            self.free.push(r);
        }
    }

    pub(super) fn remove(&mut self, client: Option<ClientKey>) {
        if let Some(&r) = client.as_ref().and_then(|c| self.numbers.get(c)) {
            self.release(r);
        }
    }

    pub(super) fn clear(&mut self) {
        *self = ClientCounts::default();
    }
}

/// The join limit's fixed windows, one per client key that tried to join recently.
/// Bounded: an entry lives one window, and passes prune expired ones oldest first, so
/// the map never holds more than the keys seen in the last window.
#[derive(Default)]
pub(super) struct JoinWindows {
    /// Client → (window start, attempts in it, refusals included).
    windows: HashMap<ClientKey, (u64, u32)>,
    /// (window start, client) in start order, for pruning.
    starts: VecDeque<(u64, ClientKey)>,
}

impl JoinWindows {
    /// Charges one attempt to `client`'s window: `Err(ms left in the window)` when it is
    /// over `limit`.
    pub(super) fn charge(
        &mut self,
        client: ClientKey,
        now: u64,
        limit: u32,
        window: u64,
    ) -> Result<(), u64> {
        let entry = self.windows.entry(client).or_insert((now, 0));
        if entry.1 == 0 || now >= entry.0 + window {
            *entry = (now, 0);
            self.starts.push_back((now, client));
        }
        entry.1 = entry.1.saturating_add(1);
        if entry.1 > limit {
            Err((entry.0 + window).saturating_sub(now).max(1))
        } else {
            Ok(())
        }
    }

    /// Forgets windows that are over, at most `budget` of them.
    pub(super) fn prune(&mut self, now: u64, window: u64, budget: usize) {
        for _ in 0..budget {
            match self.starts.front() {
                Some(&(start, client)) if start + window <= now => {
                    self.starts.pop_front();
                    if self.windows.get(&client).is_some_and(|w| w.0 == start) {
                        self.windows.remove(&client);
                    }
                }
                _ => break,
            }
        }
    }
}
