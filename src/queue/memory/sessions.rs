//! The admitted sessions of one embedded room: visitor → session, and the order of last
//! activity that reclaim takes the oldest from; and the lengths of the latest to end.
//!
//! Every admission starts a session, so this is on the pass's path a hundred times a
//! pass. It was a SipHash `HashMap` plus a `BTreeSet` of (last activity, visitor): the set
//! insert walked the tree's right edge comparing 24-byte keys, ~130 ns, most of a pass.
//! Now, as the line does it:
//! - sessions live in a slab of entries, freed entries reused;
//! - visitor → entry is a `hashbrown::HashTable` of 4-byte entry numbers, hashed by the
//!   keyed multiply of [`IdHash`] (the id is compared against the entry, not stored twice);
//! - the activity order is a doubly linked list through the entries. Sessions start and
//!   are touched at the store's now, which does not go back, so they append at the newest
//!   end in O(1) (an older time walks back to its place, so the order holds regardless);
//!   reclaim pops from the oldest end. Equal times keep the order they came in.

use std::collections::VecDeque;

use hashbrown::HashTable;

use super::IdHash;
use crate::queue::{ClientKey, EndedSessions, SESSIONS_KEPT, VisitorId};

/// No neighbour in the activity list.
const NIL: u32 = u32::MAX;
/// `prev` of a free entry.
const FREE: u32 = u32::MAX - 1;

/// An admitted session: when it started and was last active, and the distinct clients it
/// has been used from, the first of which its session share is charged to (empty until its
/// first request when admitted from the line, or after a restore).
#[derive(Debug, Default)]
pub struct Session {
    last_ms: u64,
    /// When it started; `None` after a restore (a snapshot keeps no starts) or when let in
    /// by the passthrough mode (no line to estimate for).
    pub started_ms: Option<u64>,
    pub clients: Vec<ClientKey>,
}

struct Entry {
    visitor: VisitorId,
    session: Session,
    /// Neighbours in activity order (`NIL` at the ends); `prev` is `FREE` on a free entry.
    prev: u32,
    next: u32,
}

/// The lengths of a room's latest [`SESSIONS_KEPT`] sessions to end, and their sum.
#[derive(Debug, Default)]
pub struct Lengths {
    latest: VecDeque<u64>,
    total_ms: u64,
}

impl Lengths {
    /// `session` ended at `now`: its length is kept unless its start is unknown.
    pub fn ended(&mut self, session: &Session, now: u64) {
        let Some(started) = session.started_ms else {
            return;
        };
        if self.latest.len() as u64 >= SESSIONS_KEPT
            && let Some(oldest) = self.latest.pop_front()
        {
            self.total_ms -= oldest;
        }
        let length = now.saturating_sub(started);
        self.latest.push_back(length);
        self.total_ms += length;
    }

    /// What room stats report of them.
    pub fn summary(&self) -> EndedSessions {
        EndedSessions {
            total_ms: self.total_ms,
            count: self.latest.len() as u64,
        }
    }
}

pub struct Sessions {
    entries: Vec<Entry>,
    /// Free entries, reused before the slab grows.
    free: Vec<u32>,
    index: HashTable<u32>,
    hash: IdHash,
    /// The ends of the activity list.
    oldest: u32,
    newest: u32,
}

impl Sessions {
    pub fn new() -> Sessions {
        Sessions {
            entries: Vec::new(),
            free: Vec::new(),
            index: HashTable::new(),
            hash: IdHash::random(),
            oldest: NIL,
            newest: NIL,
        }
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    fn find(&self, visitor: &VisitorId) -> Option<u32> {
        let entries = &self.entries;
        self.index
            .find(self.hash.of(visitor), |&i| {
                entries[i as usize].visitor == *visitor
            })
            .copied()
    }

    pub fn contains(&self, visitor: &VisitorId) -> bool {
        self.find(visitor).is_some()
    }

    pub fn get_mut(&mut self, visitor: &VisitorId) -> Option<&mut Session> {
        let i = self.find(visitor)?;
        Some(&mut self.entries[i as usize].session)
    }

    /// Starts a session at `now`, its start kept if `timed`; `false` (and nothing
    /// changes) if `visitor` has one.
    pub fn insert(
        &mut self,
        visitor: VisitorId,
        now: u64,
        clients: Vec<ClientKey>,
        timed: bool,
    ) -> bool {
        // The entry it will take: the last freed, else a new one at the end.
        let i = match self.free.last() {
            Some(&i) => i,
            None => u32::try_from(self.entries.len())
                .ok()
                .filter(|&i| i < FREE)
                .expect("fewer than 2^32 - 2 sessions"),
        };
        // One probe both checks and inserts: at depth the table's bucket is the one cache
        // miss of a session start, so it is paid once.
        let (entries, h) = (&self.entries, &self.hash);
        match self.index.entry(
            h.of(&visitor),
            |&j| entries[j as usize].visitor == visitor,
            |&j| h.of(&entries[j as usize].visitor),
        ) {
            hashbrown::hash_table::Entry::Occupied(_) => return false,
            hashbrown::hash_table::Entry::Vacant(slot) => {
                slot.insert(i);
            }
        }
        let entry = Entry {
            visitor,
            session: Session {
                last_ms: now,
                started_ms: timed.then_some(now),
                clients,
            },
            prev: NIL,
            next: NIL,
        };
        if self.free.pop().is_some() {
            self.entries[i as usize] = entry;
        } else {
            self.entries.push(entry);
        }
        self.link(i);
        true
    }

    /// Ends a session.
    pub fn remove(&mut self, visitor: &VisitorId) -> Option<Session> {
        let entries = &self.entries;
        let entry = self
            .index
            .find_entry(self.hash.of(visitor), |&i| {
                entries[i as usize].visitor == *visitor
            })
            .ok()?;
        let (i, _) = entry.remove();
        Some(self.release(i))
    }

    /// Records activity at `now` (at most once per `granularity`: reclaim is measured in
    /// seconds). `false` if there is no such session.
    pub fn touch(&mut self, visitor: &VisitorId, now: u64, granularity: u64) -> bool {
        let Some(i) = self.find(visitor) else {
            return false;
        };
        let last = self.entries[i as usize].session.last_ms;
        if now >= last.saturating_add(granularity) {
            self.unlink(i);
            self.entries[i as usize].session.last_ms = now;
            self.link(i);
        }
        true
    }

    /// Ends the least recently active session if its last activity plus `after` has come
    /// by `now`.
    pub fn pop_due(&mut self, after: u64, now: u64) -> Option<(VisitorId, Session)> {
        let i = self.oldest;
        let entry = self.entries.get(i as usize)?;
        if entry.session.last_ms.saturating_add(after) > now {
            return None;
        }
        let visitor = entry.visitor;
        let hash = self.hash.of(&visitor);
        if let Ok(found) = self.index.find_entry(hash, |&x| x == i) {
            found.remove();
        }
        Some((visitor, self.release(i)))
    }

    /// Every session's visitor, in no particular order.
    pub fn ids(&self) -> Ids<'_> {
        Ids {
            entries: self.entries.iter(),
            left: self.len(),
        }
    }

    /// Takes entry `i` (already out of the index) off the list and frees it.
    fn release(&mut self, i: u32) -> Session {
        self.unlink(i);
        let entry = &mut self.entries[i as usize];
        entry.prev = FREE;
        let session = std::mem::take(&mut entry.session);
        if self.index.is_empty() {
            // No session left: give the slab and the index back.
            *self = Sessions {
                hash: self.hash,
                ..Sessions::new()
            };
        } else {
            self.free.push(i);
        }
        session
    }

    /// Links entry `i` after the newest entry active no later than it.
    fn link(&mut self, i: u32) {
        let at = self.entries[i as usize].session.last_ms;
        let mut before = self.newest;
        while before != NIL && self.entries[before as usize].session.last_ms > at {
            before = self.entries[before as usize].prev;
        }
        let after = match before {
            NIL => self.oldest,
            b => self.entries[b as usize].next,
        };
        let entry = &mut self.entries[i as usize];
        entry.prev = before;
        entry.next = after;
        match before {
            NIL => self.oldest = i,
            b => self.entries[b as usize].next = i,
        }
        match after {
            NIL => self.newest = i,
            a => self.entries[a as usize].prev = i,
        }
    }

    fn unlink(&mut self, i: u32) {
        let Entry { prev, next, .. } = self.entries[i as usize];
        match prev {
            NIL => self.oldest = next,
            p => self.entries[p as usize].next = next,
        }
        match next {
            NIL => self.newest = prev,
            n => self.entries[n as usize].prev = prev,
        }
    }

    #[cfg(test)]
    fn check(&self) {
        let mut n = 0;
        let (mut cursor, mut prev, mut last) = (self.oldest, NIL, 0);
        while cursor != NIL {
            let e = &self.entries[cursor as usize];
            assert_eq!(e.prev, prev, "back link");
            assert!(e.session.last_ms >= last, "activity order");
            assert_eq!(self.find(&e.visitor), Some(cursor));
            last = e.session.last_ms;
            prev = cursor;
            cursor = e.next;
            n += 1;
        }
        assert_eq!(prev, self.newest);
        assert_eq!(n, self.len());
        assert_eq!(self.ids().count(), self.len());
        assert_eq!(self.entries.len(), self.len() + self.free.len());
    }
}

/// The visitors of [`Sessions::ids`], with their exact count (the snapshot writes it first).
#[derive(Clone)]
pub struct Ids<'a> {
    entries: std::slice::Iter<'a, Entry>,
    left: usize,
}

impl<'a> Iterator for Ids<'a> {
    type Item = &'a VisitorId;

    fn next(&mut self) -> Option<&'a VisitorId> {
        let entry = self.entries.find(|e| e.prev != FREE)?;
        self.left -= 1;
        Some(&entry.visitor)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Ids<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Starts, touches, ends and reclaims at random, against a plain model.
    #[test]
    fn agrees_with_a_simple_model() {
        let mut sessions = Sessions::new();
        // Visitor → last activity.
        let mut model: BTreeMap<VisitorId, u64> = BTreeMap::new();
        let mut known: Vec<VisitorId> = Vec::new();
        let mut now = 0u64;
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for step in 0..50_000u64 {
            anteroom_fixtures::xorshift(&mut state);
            now += state % 3;
            let pick = |known: &Vec<VisitorId>| known[(state as usize / 16) % known.len()];
            match state % 8 {
                0..=2 => {
                    // Sometimes someone who had a session before.
                    let v = if state.is_multiple_of(5) && !known.is_empty() {
                        pick(&known)
                    } else {
                        VisitorId::random()
                    };
                    let fresh = !model.contains_key(&v);
                    assert_eq!(sessions.insert(v, now, Vec::new(), true), fresh);
                    model.entry(v).or_insert(now);
                    known.push(v);
                }
                3 | 4 if !known.is_empty() => {
                    let v = pick(&known);
                    assert_eq!(sessions.touch(&v, now, 2), model.contains_key(&v));
                    if let Some(last) = model.get_mut(&v)
                        && now >= *last + 2
                    {
                        *last = now;
                    }
                }
                5 if !known.is_empty() => {
                    let v = pick(&known);
                    assert_eq!(sessions.remove(&v).is_some(), model.remove(&v).is_some());
                }
                _ => {
                    // Reclaim everyone idle for 100 ms, oldest first.
                    let mut last = 0;
                    while let Some((v, s)) = sessions.pop_due(100, now) {
                        assert!(s.last_ms >= last);
                        last = s.last_ms;
                        assert_eq!(model.remove(&v), Some(s.last_ms));
                    }
                    assert!(model.values().all(|&at| at + 100 > now));
                }
            }
            assert_eq!(sessions.len(), model.len());
            if step % 97 == 0 {
                sessions.check();
                let mut ids: Vec<VisitorId> = sessions.ids().copied().collect();
                ids.sort();
                assert_eq!(ids, model.keys().copied().collect::<Vec<_>>());
            }
        }
    }

    /// A time older than the newest (not the store's way, but the order must hold) is
    /// placed by it.
    #[test]
    fn an_older_time_takes_its_place_in_the_order() {
        let mut sessions = Sessions::new();
        let (a, b, c) = (
            VisitorId::random(),
            VisitorId::random(),
            VisitorId::random(),
        );
        sessions.insert(a, 10, Vec::new(), true);
        sessions.insert(b, 30, Vec::new(), true);
        sessions.insert(c, 20, Vec::new(), true);
        sessions.check();
        let order: Vec<VisitorId> = std::iter::from_fn(|| sessions.pop_due(0, 100))
            .map(|(v, _)| v)
            .collect();
        assert_eq!(order, vec![a, c, b]);
        assert_eq!((sessions.len(), sessions.entries.len()), (0, 0));
    }
}
