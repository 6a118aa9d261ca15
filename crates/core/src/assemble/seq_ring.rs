//! A queue whose entries are named by sequence numbers, and the lazily cleaned indexes that
//! name them: what the finished cache and the plain hold keep their entries in. Entries leave
//! only from the front, so an index entry behind the front is stale, never matches, and goes
//! at a sweep instead of costing a probe of a table gone cold when its entry leaves
//! (BENCHMARKS.md, issue 18).

use std::collections::VecDeque;

use hashbrown::HashTable;

#[derive(Debug)]
pub(super) struct SeqRing<T> {
    items: VecDeque<T>,
    /// The sequence number of `items[0]`.
    head: u64,
}

impl<T> Default for SeqRing<T> {
    fn default() -> Self {
        SeqRing {
            items: VecDeque::new(),
            head: 0,
        }
    }
}

impl<T> SeqRing<T> {
    pub(super) fn len(&self) -> usize {
        self.items.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The sequence number of the front; index entries below it are stale.
    pub(super) fn head(&self) -> u64 {
        self.head
    }

    fn position(&self, seq: u64) -> Option<usize> {
        usize::try_from(seq.checked_sub(self.head)?)
            .ok()
            .filter(|&i| i < self.items.len())
    }

    /// The entry `seq`; `None` once it has left (or never was).
    pub(super) fn get(&self, seq: u64) -> Option<&T> {
        self.items.get(self.position(seq)?)
    }

    pub(super) fn get_mut(&mut self, seq: u64) -> Option<&mut T> {
        let i = self.position(seq)?;
        self.items.get_mut(i)
    }

    /// Appends `item`; returns its sequence number.
    pub(super) fn push_back(&mut self, item: T) -> u64 {
        let seq = self.head + self.items.len() as u64;
        self.items.push_back(item);
        seq
    }

    pub(super) fn front(&self) -> Option<&T> {
        self.items.front()
    }

    pub(super) fn pop_front(&mut self) -> Option<T> {
        let item = self.items.pop_front()?;
        self.head += 1;
        Some(item)
    }

    /// Every entry, oldest first, taken out: the indexes name none of them any more.
    pub(super) fn drain(&mut self) -> Vec<T> {
        self.head += self.items.len() as u64;
        self.items.drain(..).collect()
    }

    /// Every entry, oldest first.
    pub(super) fn iter(&self) -> impl Iterator<Item = &T> {
        self.items.iter()
    }
}

/// Drops an index's entries behind `head` once the index holds more than `live` plus
/// `allowed_stale` of them.
pub(super) fn sweep(
    index: &mut HashTable<(u64, u64)>,
    head: u64,
    live: usize,
    allowed_stale: usize,
) {
    if index.len() > live + allowed_stale {
        index.retain(|&mut (_, seq)| seq >= head);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_name_entries_until_they_leave_the_front() {
        let mut ring = SeqRing::default();
        assert_eq!(ring.push_back('a'), 0);
        assert_eq!(ring.push_back('b'), 1);
        assert_eq!(ring.pop_front(), Some('a'));
        assert_eq!(ring.push_back('c'), 2);
        assert_eq!((ring.head(), ring.len()), (1, 2));
        assert_eq!(ring.get(0), None);
        assert_eq!(ring.get(1), Some(&'b'));
        if let Some(c) = ring.get_mut(2) {
            *c = 'C';
        }
        assert_eq!(ring.get(3), None);
        assert_eq!(ring.drain(), ['b', 'C']);
        assert!(ring.is_empty());
        assert_eq!(ring.get(2), None);
        assert_eq!(ring.push_back('d'), 3);
        assert_eq!(ring.front(), Some(&'d'));
    }

    #[test]
    fn a_sweep_keeps_what_is_at_or_past_the_head_once_past_the_allowance() {
        let mut index = HashTable::new();
        for seq in 0..10u64 {
            index.insert_unique(seq, (seq, seq), |&(h, _)| h);
        }
        sweep(&mut index, 6, 4, 6);
        assert_eq!(index.len(), 10, "within the allowance");
        sweep(&mut index, 6, 4, 5);
        let mut left: Vec<u64> = index.iter().map(|&(_, seq)| seq).collect();
        left.sort_unstable();
        assert_eq!(left, [6, 7, 8, 9]);
    }
}
