//! The waiting line of one embedded room: both lanes (the line, and the front lane ahead of
//! it), the visitor → place index, and the order in which waiters were last heard from.
//!
//! Layout (see the module doc of `memory` for why):
//! - A **lane** is a run of consecutive tickets cut into chunks of [`CHUNK`] slots. A slot
//!   is a fixed 40-byte [`Slot`] (visitor id, last seen, joined, client, two links) at
//!   `ticket − first ticket of its chunk`; a bitmap beside the slots says which are live.
//!   Leaving the line clears a bit (a tombstone); a chunk whose tickets have all left gives
//!   its slots back, and dead chunks at the head are dropped, so memory follows the live
//!   line, not every ticket ever issued.
//! - **Ranks**: a Fenwick tree counts live tickets per chunk (a few KiB at a million
//!   waiting); a position is that prefix sum plus a popcount inside the chunk, O(log n).
//! - **Index**: visitor → place is a hash table of 4-byte handles (lane bit + the ticket's
//!   low 31 bits); the key is not stored twice, the table compares against the slot. The
//!   heads a pass takes from the line lane leave their entries behind (stale: a lookup
//!   checks the slot, and a taken line ticket is never handed out again); joins sweep them
//!   out in one sequential pass over the table once they are an eighth of it. Removing them
//!   one by one cost a cache miss each at depth (a random bucket of a table of millions),
//!   which made a pass at a million waiting dearer than at a thousand.
//! - **Seen order**: every waiter is on one doubly linked list, oldest heartbeat first,
//!   threaded through the slots (`prev`/`next` are handles). Joins and heartbeats happen
//!   at the store's now, which only moves forward, so they append at the newest end;
//!   leaving unlinks in O(1); abandonment pops from the oldest end. No ordered map.

use std::collections::VecDeque;

use hashbrown::HashTable;

use super::{ClientRef, IdHash};
use crate::queue::VisitorId;
use crate::queue::fenwick::RankIndex;

const CHUNK_BITS: u32 = 10;
/// Tickets per chunk: 40 KiB of slots, small next to a cache, large enough that the chunk
/// bookkeeping (the deque entry, bitmap and Fenwick count) is ~0.2 byte per ticket.
pub const CHUNK: usize = 1 << CHUNK_BITS;
const WORDS: usize = CHUNK / 64;
const OFFSET: u64 = CHUNK as u64 - 1;

/// A handle names a live place: bit 31 the lane, the rest the ticket's low 31 bits. Enough
/// while a lane spans fewer than 2^31 tickets from its oldest live chunk to its newest
/// ticket (tens of GiB of line before that could happen).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handle(u32);

const LANE_BIT: u32 = 1 << 31;
const LOW: u64 = (LANE_BIT - 1) as u64;

/// Which lane a place is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaneKind {
    /// The line, in ticket order: head first.
    Line = 0,
    /// The front lane (moved to the front, priority joins): the newest is position 1.
    Front = 1,
}

impl Handle {
    fn new(lane: LaneKind, ticket: u64) -> Handle {
        let bit = if lane == LaneKind::Front { LANE_BIT } else { 0 };
        Handle(bit | (ticket & LOW) as u32)
    }

    fn lane(self) -> usize {
        (self.0 >> 31) as usize
    }

    pub fn lane_kind(self) -> LaneKind {
        if self.lane() == 1 {
            LaneKind::Front
        } else {
            LaneKind::Line
        }
    }
}

/// Unix milliseconds in 48 bits (good until the year 10889), so a slot stays 40 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Ms48([u16; 3]);

impl Ms48 {
    fn new(ms: u64) -> Ms48 {
        let ms = ms.min((1 << 48) - 1);
        Ms48([ms as u16, (ms >> 16) as u16, (ms >> 32) as u16])
    }

    fn get(self) -> u64 {
        u64::from(self.0[0]) | u64::from(self.0[1]) << 16 | u64::from(self.0[2]) << 32
    }
}

/// One place in a lane.
#[derive(Clone, Copy, Debug)]
pub struct Slot {
    pub visitor: VisitorId,
    seen: Ms48,
    joined: Ms48,
    pub client: ClientRef,
    /// The neighbours in seen order; a slot's own handle where it has none.
    prev: Handle,
    next: Handle,
}

const _: () = assert!(std::mem::size_of::<Slot>() == 40);

impl Slot {
    const DEAD: Slot = Slot {
        visitor: VisitorId([0; 16]),
        seen: Ms48([0; 3]),
        joined: Ms48([0; 3]),
        client: ClientRef::NONE,
        prev: Handle(0),
        next: Handle(0),
    };

    pub fn seen_ms(&self) -> u64 {
        self.seen.get()
    }

    pub fn joined_ms(&self) -> u64 {
        self.joined.get()
    }
}

struct Chunk {
    /// `slots[i]` is ticket `chunk << CHUNK_BITS | i`; empty once every ticket of a
    /// complete chunk has left.
    slots: Vec<Slot>,
    live: [u64; WORDS],
    count: u32,
}

impl Chunk {
    fn empty() -> Chunk {
        Chunk {
            slots: Vec::new(),
            live: [0; WORDS],
            count: 0,
        }
    }

    fn is_live(&self, offset: usize) -> bool {
        self.live[offset / 64] & (1 << (offset % 64)) != 0
    }

    /// The lowest live offset.
    fn first_live(&self) -> Option<usize> {
        self.live
            .iter()
            .enumerate()
            .find(|(_, w)| **w != 0)
            .map(|(i, w)| i * 64 + w.trailing_zeros() as usize)
    }

    /// The highest live offset.
    fn last_live(&self) -> Option<usize> {
        self.live
            .iter()
            .enumerate()
            .rev()
            .find(|(_, w)| **w != 0)
            .map(|(i, w)| i * 64 + 63 - w.leading_zeros() as usize)
    }

    /// Live offsets after `offset`.
    fn live_after(&self, offset: usize) -> u32 {
        let word = offset / 64;
        let bit = offset % 64;
        let partial = if bit == 63 {
            0
        } else {
            (self.live[word] >> (bit + 1)).count_ones()
        };
        partial
            + self.live[word + 1..]
                .iter()
                .map(|w| w.count_ones())
                .sum::<u32>()
    }

    /// Live offsets, ascending.
    fn offsets(&self) -> impl DoubleEndedIterator<Item = usize> + '_ {
        (0..CHUNK).filter(|&o| self.is_live(o))
    }
}

/// One lane: consecutive tickets in chunks, with their ranks.
struct Lane {
    /// The chunk number of `chunks[0]`.
    first: u64,
    chunks: VecDeque<Chunk>,
    /// The ticket the next push gets.
    next: u64,
    len: usize,
    /// Live tickets per chunk number.
    ranks: RankIndex,
}

impl Lane {
    fn new(next: u64) -> Lane {
        Lane {
            first: next >> CHUNK_BITS,
            chunks: VecDeque::new(),
            next,
            len: 0,
            ranks: RankIndex::starting_at(next >> CHUNK_BITS),
        }
    }

    /// The ticket a handle's low bits stand for: the one at or after the lane's first
    /// chunk.
    fn ticket(&self, low: u32) -> u64 {
        let base = self.first << CHUNK_BITS;
        base + ((u64::from(low).wrapping_sub(base)) & LOW)
    }

    fn chunk(&self, ticket: u64) -> Option<&Chunk> {
        let c = (ticket >> CHUNK_BITS).checked_sub(self.first)?;
        self.chunks.get(usize::try_from(c).ok()?)
    }

    fn chunk_mut(&mut self, ticket: u64) -> Option<&mut Chunk> {
        let c = (ticket >> CHUNK_BITS).checked_sub(self.first)?;
        self.chunks.get_mut(usize::try_from(c).ok()?)
    }

    fn get(&self, ticket: u64) -> Option<&Slot> {
        let chunk = self.chunk(ticket)?;
        let o = (ticket & OFFSET) as usize;
        chunk.is_live(o).then(|| &chunk.slots[o])
    }

    fn get_mut(&mut self, ticket: u64) -> Option<&mut Slot> {
        let chunk = self.chunk_mut(ticket)?;
        let o = (ticket & OFFSET) as usize;
        if chunk.is_live(o) {
            Some(&mut chunk.slots[o])
        } else {
            None
        }
    }

    fn push(&mut self, slot: Slot) -> u64 {
        let ticket = self.next;
        self.next += 1;
        let c = ticket >> CHUNK_BITS;
        let o = (ticket & OFFSET) as usize;
        if self.chunks.is_empty() {
            self.first = c;
        }
        while self.first + (self.chunks.len() as u64) <= c {
            self.chunks.push_back(Chunk::empty());
        }
        let chunk = &mut self.chunks[(c - self.first) as usize];
        if chunk.slots.capacity() == 0 {
            chunk.slots.reserve_exact(CHUNK);
        }
        // Only a restored or reset lane starts mid-chunk; a stack lane may have rewound.
        chunk.slots.truncate(o);
        chunk.slots.resize(o, Slot::DEAD);
        chunk.slots.push(slot);
        chunk.live[o / 64] |= 1 << (o % 64);
        chunk.count += 1;
        self.len += 1;
        self.ranks.add(c, 1);
        ticket
    }

    fn remove(&mut self, ticket: u64) -> Option<Slot> {
        let next = self.next;
        let chunk = self.chunk_mut(ticket)?;
        let o = (ticket & OFFSET) as usize;
        if !chunk.is_live(o) {
            return None;
        }
        let slot = chunk.slots[o];
        chunk.live[o / 64] &= !(1 << (o % 64));
        chunk.count -= 1;
        let c = ticket >> CHUNK_BITS;
        if chunk.count == 0 && (c + 1) << CHUNK_BITS <= next {
            // Complete and empty: nothing will ever live here again.
            chunk.slots = Vec::new();
        }
        self.len -= 1;
        self.ranks.add(c, -1);
        // Dead chunks at the head go; the chunk the next ticket lands in stays.
        while self.chunks.len() > 1 && self.chunks[0].count == 0 {
            self.chunks.pop_front();
            self.first += 1;
        }
        Some(slot)
    }

    /// For a lane used as a stack (the front lane, whose head is its newest ticket): gives
    /// back the tickets after the newest live one, so the head is always `next − 1`.
    /// Nothing refers to a dead ticket, so handing it out again is safe. Amortized O(1):
    /// every ticket rewound over left once.
    fn rewind(&mut self) {
        while self.len > 0 {
            let last = self.first + self.chunks.len() as u64 - 1;
            let Some(chunk) = self.chunks.back_mut() else {
                break;
            };
            match chunk.last_live() {
                None => {
                    self.chunks.pop_back();
                    self.next = last << CHUNK_BITS;
                }
                Some(o) => {
                    chunk.slots.truncate(o + 1);
                    self.next = (last << CHUNK_BITS) + o as u64 + 1;
                    break;
                }
            }
        }
    }

    fn first_live(&self) -> Option<u64> {
        self.chunks.iter().enumerate().find_map(|(i, c)| {
            c.first_live()
                .map(|o| ((self.first + i as u64) << CHUNK_BITS) + o as u64)
        })
    }

    /// How many live tickets are `<= ticket`.
    fn rank(&self, ticket: u64) -> u64 {
        let within = self
            .chunk(ticket)
            .map_or(0, |c| c.live_after((ticket & OFFSET) as usize));
        self.ranks.rank(ticket >> CHUNK_BITS) - u64::from(within)
    }

    /// Live tickets ascending.
    fn iter(&self) -> impl DoubleEndedIterator<Item = (u64, &Slot)> + '_ {
        self.chunks.iter().enumerate().flat_map(move |(i, c)| {
            let base = (self.first + i as u64) << CHUNK_BITS;
            c.offsets().map(move |o| (base + o as u64, &c.slots[o]))
        })
    }

    fn clear(&mut self) {
        *self = Lane::new(self.next);
    }
}

/// Both lanes, the index and the seen order. See the module doc.
pub struct WaitingLine {
    lanes: [Lane; 2],
    index: HashTable<Handle>,
    /// Keys the index's hash: per room, random.
    keys: IdHash,
    /// The ends of the seen list: oldest heartbeat, newest.
    oldest: Option<Handle>,
    newest: Option<Handle>,
    /// Index entries of line heads taken by [`WaitingLine::take_heads`] and not yet swept
    /// (see [`WaitingLine::sweep_stale`]): all line tickets in `[stale_from, first live)`.
    stale: usize,
    stale_from: u64,
}

/// A sweep decodes a line handle's 31 ticket bits relative to `stale_from`, so it must run
/// before the line lane has issued this many tickets past it (never, in practice: the
/// table fills long before).
const STALE_SPAN: u64 = 1 << 30;

/// A place being filled: who, last seen, joined, client.
pub struct NewPlace {
    pub visitor: VisitorId,
    pub seen_ms: u64,
    pub joined_ms: u64,
    pub client: ClientRef,
}

impl WaitingLine {
    pub fn new() -> WaitingLine {
        WaitingLine {
            lanes: [Lane::new(0), Lane::new(0)],
            index: HashTable::new(),
            keys: IdHash::random(),
            oldest: None,
            newest: None,
            stale: 0,
            stale_from: 0,
        }
    }

    /// Everyone in both lanes.
    pub fn len(&self) -> usize {
        self.lanes[0].len + self.lanes[1].len
    }

    /// The ticket the next line join gets (kept in the snapshot).
    pub fn next_ticket(&self) -> u64 {
        self.lanes[0].next
    }

    fn slot_in(lanes: &[Lane; 2], h: Handle) -> Option<&Slot> {
        let lane = &lanes[h.lane()];
        lane.get(lane.ticket(h.0 & LOW as u32))
    }

    fn slot(&self, h: Handle) -> &Slot {
        Self::slot_in(&self.lanes, h).expect("a handle in the line names a live slot")
    }

    fn slot_mut(&mut self, h: Handle) -> &mut Slot {
        let lane = &mut self.lanes[h.lane()];
        let t = lane.ticket(h.0 & LOW as u32);
        lane.get_mut(t)
            .expect("a handle in the line names a live slot")
    }

    /// The place of a waiting visitor.
    pub fn find(&self, visitor: VisitorId) -> Option<(Handle, &Slot)> {
        let hash = self.keys.of(&visitor);
        let lanes = &self.lanes;
        let &h = self.index.find(hash, |&h| {
            Self::slot_in(lanes, h).is_some_and(|s| s.visitor == visitor)
        })?;
        Some((h, self.slot(h)))
    }

    #[cfg(test)]
    pub fn get(&self, h: Handle) -> &Slot {
        self.slot(h)
    }

    /// Adds a visitor to a lane (after everyone in it) and returns their place. The seen
    /// order takes them at `seen_ms`: at the newest end unless someone was heard from
    /// later (only when the doors open on a draw, see [`WaitingLine::join_all`]).
    pub fn join(&mut self, lane: LaneKind, place: NewPlace) -> Handle {
        let h = self.push(lane, place);
        let cursor = self.newest;
        self.link_before_newer(cursor, h);
        h
    }

    /// Adds many visitors to a lane in the given order; each takes their place in the
    /// seen order by their own `seen_ms`. O(places log places + the waiters heard from
    /// after the oldest of them).
    pub fn join_all(&mut self, lane: LaneKind, places: Vec<NewPlace>) {
        let mut handles: Vec<(u64, Handle)> = places
            .into_iter()
            .map(|p| (p.seen_ms, self.push(lane, p)))
            .collect();
        // Newest first, so one walk from the newest end places them all.
        handles.sort_by_key(|&(seen, _)| std::cmp::Reverse(seen));
        let mut cursor = self.newest;
        for (_, h) in handles {
            cursor = self.link_before_newer(cursor, h);
        }
    }

    /// Pushes into a lane and the index, not yet linked in the seen order.
    fn push(&mut self, lane: LaneKind, place: NewPlace) -> Handle {
        // An insert into a full table rehashes every entry through the hasher below, which
        // reads the visitor from the slot: stale entries have none, so they go first (a
        // table with room left, `len < capacity`, never rehashes on insert). Before that,
        // they go once they are an eighth of the table: a sweep costs the table's size, so
        // that is ~9 buckets looked at per stale entry, and it keeps them from crowding the
        // table, where erasing leaves tombstones that end in a rehash or a growth.
        if self.stale > 0
            && (self.stale >= self.index.capacity() / 8
                || self.index.len() >= self.index.capacity()
                || self.lanes[0].next - self.stale_from >= STALE_SPAN)
        {
            self.sweep_stale();
        }
        let ticket = self.lanes[lane as usize].push(Slot {
            visitor: place.visitor,
            seen: Ms48::new(place.seen_ms),
            joined: Ms48::new(place.joined_ms),
            client: place.client,
            prev: Handle(0),
            next: Handle(0),
        });
        let h = Handle::new(lane, ticket);
        let hash = self.keys.of(&place.visitor);
        let (lanes, keys) = (&self.lanes, &self.keys);
        self.index.insert_unique(hash, h, |&h| {
            keys.of(&Self::slot_in(lanes, h).expect("indexed").visitor)
        });
        h
    }

    /// Links `h` into the seen order after the newest waiter at or before `cursor` heard
    /// from no later than `h`; returns where it went (the next cursor for an older one).
    fn link_before_newer(&mut self, mut cursor: Option<Handle>, h: Handle) -> Option<Handle> {
        let seen = self.slot(h).seen;
        while let Some(c) = cursor {
            let s = self.slot(c);
            if s.seen.get() <= seen.get() {
                break;
            }
            cursor = (s.prev != c).then_some(s.prev);
        }
        // Insert after `cursor` (at the oldest end when `None`).
        let after = match cursor {
            Some(c) => {
                let n = self.slot(c).next;
                (n != c).then_some(n)
            }
            None => self.oldest,
        };
        {
            let slot = self.slot_mut(h);
            slot.prev = cursor.unwrap_or(h);
            slot.next = after.unwrap_or(h);
        }
        match cursor {
            Some(c) => self.slot_mut(c).next = h,
            None => self.oldest = Some(h),
        }
        match after {
            Some(a) => self.slot_mut(a).prev = h,
            None => self.newest = Some(h),
        }
        Some(h)
    }

    fn unlink(&mut self, h: Handle) {
        let (prev, next) = {
            let s = self.slot(h);
            (
                (s.prev != h).then_some(s.prev),
                (s.next != h).then_some(s.next),
            )
        };
        match prev {
            Some(p) => self.slot_mut(p).next = next.unwrap_or(p),
            None => self.oldest = next,
        }
        match next {
            Some(n) => self.slot_mut(n).prev = prev.unwrap_or(n),
            None => self.newest = prev,
        }
    }

    /// Records that a waiter was heard from at `now` (at most once per `granularity`: a
    /// newer time moves them to the newest end of the seen order). `now` is the store's
    /// time, never behind any recorded one.
    pub fn touch(&mut self, visitor: VisitorId, now: u64, granularity: u64) -> Option<Handle> {
        let (h, slot) = self.find(visitor)?;
        if now >= slot.seen.get() + granularity {
            self.unlink(h);
            self.slot_mut(h).seen = Ms48::new(now);
            let cursor = self.newest;
            self.link_before_newer(cursor, h);
        }
        Some(h)
    }

    /// Takes a visitor out of the line.
    pub fn leave(&mut self, visitor: VisitorId) -> Option<Slot> {
        let (h, _) = self.find(visitor)?;
        Some(self.remove(h))
    }

    /// Takes a place out of the line: index, seen order, lane.
    pub fn remove(&mut self, h: Handle) -> Slot {
        let visitor = self.slot(h).visitor;
        let hash = self.keys.of(&visitor);
        if let Ok(entry) = self.index.find_entry(hash, |&x| x == h) {
            entry.remove();
        }
        self.unlink(h);
        let lane = &mut self.lanes[h.lane()];
        let t = lane.ticket(h.0 & LOW as u32);
        let slot = lane
            .remove(t)
            .expect("a handle in the line names a live slot");
        if h.lane_kind() == LaneKind::Front {
            lane.rewind();
        }
        self.release_drained_index();
        slot
    }

    /// Takes the first `n` of the line (head first), as admission does.
    ///
    /// The lanes and the seen order are touched only at the head, where the memory is
    /// warm. The index is not touched for heads of the line lane: their entries stay as
    /// stale ones (see [`WaitingLine::sweep_stale`]), so a pass costs the same at a million
    /// waiting as at a thousand instead of a cache miss per head into a table of millions.
    /// Front lane tickets are reused (the lane is a stack), so its heads leave the index
    /// at once, in one tight loop where their misses overlap.
    pub fn take_heads(&mut self, n: usize) -> Vec<Slot> {
        let mut taken = Vec::with_capacity(n.min(self.len()));
        let mut front = Vec::new();
        while taken.len() < n {
            let Some(h) = self.head() else {
                break;
            };
            self.unlink(h);
            let lane = &mut self.lanes[h.lane()];
            let t = lane.ticket(h.0 & LOW as u32);
            let slot = lane.remove(t).expect("the head is live");
            match h.lane_kind() {
                LaneKind::Front => {
                    lane.rewind();
                    front.push((h, slot.visitor));
                }
                LaneKind::Line => {
                    if self.stale == 0 {
                        self.stale_from = t;
                    }
                    self.stale += 1;
                }
            }
            taken.push(slot);
        }
        let keys = self.keys;
        for (h, visitor) in front {
            let hash = keys.of(&visitor);
            if let Ok(entry) = self.index.find_entry(hash, |&x| x == h) {
                entry.remove();
            }
        }
        self.release_drained_index();
        taken
    }

    /// Drops the index entries of line heads taken since the last sweep: one sequential
    /// walk over the table, with no slot read (a line handle is stale exactly when its
    /// ticket is below the line lane's first live one). O(table), run once the stale are
    /// an eighth of it (see [`WaitingLine::push`]), so O(1) per taken head amortized, and
    /// sequential, against a cache miss each when removed one by one at depth.
    fn sweep_stale(&mut self) {
        let lane = &self.lanes[0];
        let floor = lane.first_live().unwrap_or(lane.next);
        let from = self.stale_from;
        // Every line ticket in the index is in `[from, from + 2^31)` (`STALE_SPAN`), so its
        // low 31 bits name it.
        debug_assert!(lane.next - from < STALE_SPAN << 1);
        self.index.retain(|h| {
            h.lane_kind() == LaneKind::Front
                || from + (u64::from(h.0 & LOW as u32).wrapping_sub(from) & LOW) >= floor
        });
        self.stale = 0;
    }

    fn release_drained_index(&mut self) {
        if self.len() > 0 {
            return;
        }
        if self.index.capacity() > CHUNK {
            // A drained line gives its index back.
            self.index = HashTable::new();
        } else if self.stale > 0 {
            // Whatever is left is stale.
            self.index.clear();
        }
        self.stale = 0;
    }

    /// The waiter heard from longest ago.
    pub fn oldest_seen(&self) -> Option<(Handle, &Slot)> {
        self.oldest.map(|h| (h, self.slot(h)))
    }

    /// The head of the line: the newest of the front lane, else the first ticket.
    pub fn head(&self) -> Option<Handle> {
        let front = &self.lanes[1];
        if front.len > 0 {
            return Some(Handle::new(LaneKind::Front, front.next - 1));
        }
        self.lanes[0]
            .first_live()
            .map(|t| Handle::new(LaneKind::Line, t))
    }

    /// A place's position: the front lane (newest first), then the line.
    pub fn position(&self, h: Handle) -> u64 {
        let front = self.lanes[1].len as u64;
        let lane = &self.lanes[h.lane()];
        let t = lane.ticket(h.0 & LOW as u32);
        match h.lane_kind() {
            LaneKind::Front => (front + 1).saturating_sub(lane.rank(t)),
            LaneKind::Line => front + lane.rank(t),
        }
    }

    /// Everyone, head first.
    pub fn in_order(&self) -> impl Iterator<Item = (Handle, &Slot)> + '_ {
        let front = self.lanes[1]
            .iter()
            .rev()
            .map(|(t, s)| (Handle::new(LaneKind::Front, t), s));
        let line = self.lanes[0]
            .iter()
            .map(|(t, s)| (Handle::new(LaneKind::Line, t), s));
        front.chain(line)
    }

    /// The front lane oldest first, then the line, with each lane's ticket: the order and
    /// numbering of the snapshot.
    pub fn by_ticket(&self) -> impl Iterator<Item = (LaneKind, u64, &Slot)> + '_ {
        let front = self.lanes[1].iter().map(|(t, s)| (LaneKind::Front, t, s));
        let line = self.lanes[0].iter().map(|(t, s)| (LaneKind::Line, t, s));
        front.chain(line)
    }

    /// Empties both lanes; tickets keep counting from where they were.
    pub fn clear(&mut self) {
        for lane in &mut self.lanes {
            lane.clear();
        }
        self.index = HashTable::new();
        self.stale = 0;
        self.oldest = None;
        self.newest = None;
    }

    /// Starts the line lane at `ticket` (only while both lanes are empty: a restore).
    pub fn start_at(&mut self, ticket: u64) {
        debug_assert_eq!(self.len(), 0);
        self.lanes[0] = Lane::new(ticket);
    }

    #[cfg(test)]
    fn check(&self) {
        // The seen list holds everyone once, oldest first, and agrees with the index.
        let mut n = 0;
        let mut cursor = self.oldest;
        let mut last = 0;
        let mut prev: Option<Handle> = None;
        while let Some(h) = cursor {
            let s = self.slot(h);
            assert!(s.seen.get() >= last, "seen order");
            assert_eq!((s.prev != h).then_some(s.prev), prev, "back link");
            last = s.seen.get();
            assert_eq!(self.find(s.visitor).map(|(x, _)| x), Some(h));
            n += 1;
            prev = Some(h);
            cursor = (s.next != h).then_some(s.next);
        }
        assert_eq!(prev, self.newest);
        assert_eq!(n, self.len());
        assert_eq!(self.index.len(), self.len() + self.stale);
        for (i, (h, _)) in self.in_order().enumerate() {
            assert_eq!(self.position(h), i as u64 + 1);
        }
    }
}

#[cfg(test)]
mod tests;
