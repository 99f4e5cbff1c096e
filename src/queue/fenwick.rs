//! Order statistics over tickets: a waiting visitor's position is the number of live
//! tickets at or before theirs, answered in O(log n) by a Fenwick tree.
//!
//! Tickets only grow, so the tree covers a sliding window `[base, base + len)`. When a new
//! ticket falls past the window, the tree is rebuilt in O(len) starting from the first live
//! ticket with room for twice the live span; that happens after at least as many joins as
//! the rebuild costs, so joins stay O(log n) amortized and admission passes never rebuild.
//!
//! The keys need not be single tickets: the embedded line counts live tickets per chunk of
//! tickets ([`RankIndex::add`] with the chunk number), which keeps this tree a few KiB
//! even for a line of millions.

/// A Fenwick tree counting live tickets (or chunks) in a sliding window, for positions in O(log n).
#[derive(Clone, Debug)]
pub struct RankIndex {
    /// The ticket at slot 0.
    base: u64,
    /// 1-based Fenwick tree; `tree[0]` unused.
    tree: Vec<u32>,
}

const MIN_SLOTS: usize = 1024;

impl Default for RankIndex {
    fn default() -> Self {
        Self::starting_at(0)
    }
}

impl RankIndex {
    /// An empty index whose window starts at ticket `base`.
    pub fn starting_at(base: u64) -> Self {
        RankIndex {
            base,
            tree: vec![0; MIN_SLOTS + 1],
        }
    }

    fn slots(&self) -> usize {
        self.tree.len() - 1
    }

    /// Adds a ticket. Tickets below the window's base are a caller bug and are ignored.
    pub fn insert(&mut self, ticket: u64) {
        self.add(ticket, 1);
    }

    /// Removes a ticket that was inserted.
    pub fn remove(&mut self, ticket: u64) {
        self.add(ticket, -1);
    }

    /// Adds `delta` to the count at `key`. Growing a key below the window's base is a
    /// caller bug and is ignored; so is shrinking one the window no longer covers.
    pub fn add(&mut self, key: u64, delta: i32) {
        if key < self.base {
            debug_assert!(delta < 0, "key {key} below base {}", self.base);
            return;
        }
        if key - self.base >= self.slots() as u64 {
            if delta < 0 {
                return;
            }
            self.regrow(key);
        }
        self.add_slot((key - self.base) as usize + 1, delta);
    }

    /// How many live tickets are `<= ticket` (the sum of the counts at keys `<= ticket`).
    pub fn rank(&self, ticket: u64) -> u64 {
        if ticket < self.base {
            return 0;
        }
        let mut i = ((ticket - self.base) as usize + 1).min(self.slots());
        let mut sum = 0u64;
        while i > 0 {
            sum += u64::from(self.tree[i]);
            i &= i - 1;
        }
        sum
    }

    /// Forgets every ticket; the next window starts at `next_ticket`.
    pub fn clear(&mut self, next_ticket: u64) {
        *self = Self::starting_at(next_ticket);
    }

    /// Heap bytes, for memory accounting.
    pub fn heap_bytes(&self) -> usize {
        self.tree.capacity() * std::mem::size_of::<u32>()
    }

    fn add_slot(&mut self, mut i: usize, delta: i32) {
        while i < self.tree.len() {
            self.tree[i] = self.tree[i].wrapping_add_signed(delta);
            i += i & i.wrapping_neg();
        }
    }

    /// The per-slot counts (0 or 1), undoing the Fenwick sums in O(len).
    fn counts(&self) -> Vec<u32> {
        let mut counts = self.tree.clone();
        for i in (1..counts.len()).rev() {
            let parent = i + (i & i.wrapping_neg());
            if parent < counts.len() {
                counts[parent] -= counts[i];
            }
        }
        counts
    }

    /// Rebuilds the window from the first live ticket with room for `ticket` and as many
    /// tickets again beyond it.
    fn regrow(&mut self, ticket: u64) {
        let counts = self.counts();
        let first_live = counts[1..].iter().position(|&c| c > 0);
        let new_base = match first_live {
            Some(slot) => self.base + slot as u64,
            None => ticket,
        };
        let span = (ticket - new_base + 1) as usize;
        let slots = (span * 2).max(MIN_SLOTS).next_power_of_two();
        let mut tree = vec![0u32; slots + 1];
        if let Some(first) = first_live {
            for (slot, &count) in counts[1..].iter().enumerate().skip(first) {
                tree[slot - first + 1] = count;
            }
        }
        // Linear-time Fenwick construction: push each node's sum into its parent.
        for i in 1..tree.len() {
            let parent = i + (i & i.wrapping_neg());
            if parent < tree.len() {
                tree[parent] += tree[i];
            }
        }
        self.base = new_base;
        self.tree = tree;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn rank_matches_a_sorted_set_through_many_regrowths() {
        let mut index = RankIndex::default();
        let mut reference = BTreeSet::new();
        let mut next = 0u64;
        // A deterministic mix of joins and removals from the head and the middle.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for step in 0..20_000u64 {
            anteroom_fixtures::xorshift(&mut state);
            if !state.is_multiple_of(3) || reference.is_empty() {
                index.insert(next);
                reference.insert(next);
                next += 1;
            } else if state.is_multiple_of(2) {
                let head = *reference.iter().next().unwrap();
                reference.remove(&head);
                index.remove(head);
            } else {
                let victim = *reference
                    .iter()
                    .nth((state as usize) % reference.len())
                    .unwrap();
                reference.remove(&victim);
                index.remove(victim);
            }
            if step % 997 == 0 {
                for &t in reference.iter().step_by(37) {
                    let expected = reference.range(..=t).count() as u64;
                    assert_eq!(index.rank(t), expected, "rank of {t} at step {step}");
                }
            }
        }
    }

    #[test]
    fn window_slides_with_the_head_and_stays_small() {
        let mut index = RankIndex::default();
        // A line that never holds more than 100 but sees a million tickets go by.
        for t in 0..1_000_000u64 {
            index.insert(t);
            if t >= 100 {
                index.remove(t - 100);
            }
        }
        assert_eq!(index.rank(999_999), 100);
        assert_eq!(index.rank(999_900), 1);
        assert!(
            index.slots() <= MIN_SLOTS,
            "window grew to {}",
            index.slots()
        );
    }
}
