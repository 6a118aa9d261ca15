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

/// An index of a [`SeqRing`]'s entries by hash, eight bytes an entry: the high half of the
/// entry's hash (kept, so the table can grow without the entry, which may have left) and the
/// low half of its sequence number (see [`full_seq`]). Every held trace and remembered request
/// has an entry; at sixteen bytes they were a tenth of what a pending request held.
#[derive(Debug, Default)]
pub(super) struct SeqIndex {
    table: HashTable<Named>,
}

#[derive(Debug, Clone, Copy)]
struct Named {
    hash: u32,
    seq: u32,
}

impl SeqIndex {
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.table.len()
    }

    pub(super) fn clear(&mut self) {
        self.table.clear();
    }

    /// The sequence number filed under `hash` of an entry of `ring` that `matches`.
    pub(super) fn find<T>(
        &self,
        hash: u64,
        ring: &SeqRing<T>,
        mut matches: impl FnMut(&T) -> bool,
    ) -> Option<u64> {
        let (high, head) = (high_half(hash), ring.head());
        self.table
            .find(filed(high), |named| {
                named.hash == high
                    && ring
                        .get(full_seq(named.seq, head))
                        .is_some_and(&mut matches)
            })
            .map(|named| full_seq(named.seq, head))
    }

    /// Files `seq` under `hash`.
    pub(super) fn insert(&mut self, hash: u64, seq: u64) {
        let high = high_half(hash);
        let named = Named {
            hash: high,
            // The low half: `full_seq` gives the rest back.
            seq: seq as u32,
        };
        self.table
            .insert_unique(filed(high), named, |named| filed(named.hash));
    }

    /// Drops every entry not in `ring` (behind its head: the entry has left) once there are
    /// more than `live` plus `allowed_stale`. Entries are tested against the ring's extent by
    /// their low halves alone, so an entry however far behind goes.
    pub(super) fn sweep<T>(&mut self, ring: &SeqRing<T>, live: usize, allowed_stale: usize) {
        if self.table.len() > live + allowed_stale {
            let (head, len) = (ring.head() as u32, ring.len());
            self.table
                .retain(|named| (named.seq.wrapping_sub(head) as usize) < len);
        }
    }
}

fn high_half(hash: u64) -> u32 {
    (hash >> 32) as u32
}

/// What the table files a half hash under: hashbrown takes its buckets from the low bits and
/// its tag from the top seven.
fn filed(high: u32) -> u64 {
    (u64::from(high) << 32) | u64::from(high)
}

/// A sequence number from its low 32 bits and the ring's head: exact from 2^31 behind the head
/// to 2^31 past it, so for every live entry (fewer than 2^31 past it: each holds memory). A
/// stale entry further behind may come back as another number; `find`'s check of the entry
/// there rejects it (or, if that entry is of the same key, rightly finds it).
fn full_seq(low: u32, head: u64) -> u64 {
    let offset = low.wrapping_sub(head as u32) as i32;
    head.wrapping_add_signed(i64::from(offset))
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

    fn every_seq(index: &SeqIndex, head: u64) -> Vec<u64> {
        let mut seqs: Vec<u64> = index
            .table
            .iter()
            .map(|named| full_seq(named.seq, head))
            .collect();
        seqs.sort_unstable();
        seqs
    }

    #[test]
    fn a_sweep_keeps_what_is_at_or_past_the_head_once_past_the_allowance() {
        for base in [0, u64::from(u32::MAX) - 5, 7 << 40] {
            let mut index = SeqIndex::default();
            for seq in base..base + 10 {
                index.insert(seq.wrapping_mul(0x9E37_79B9_7F4A_7C15), seq);
            }
            let ring: SeqRing<()> = SeqRing {
                items: VecDeque::from(vec![(); 4]),
                head: base + 6,
            };
            index.sweep(&ring, 4, 6);
            assert_eq!(index.len(), 10, "within the allowance");
            index.sweep(&ring, 4, 5);
            assert_eq!(
                every_seq(&index, base + 6),
                (base + 6..base + 10).collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn a_sweep_drops_entries_however_far_behind_the_head() {
        let head = (3 << 32) + 17;
        let ring: SeqRing<()> = SeqRing {
            items: VecDeque::from(vec![(); 3]),
            head,
        };
        let mut index = SeqIndex::default();
        // (Only an entry within the ring's length of a multiple of 2^32 behind would stay:
        // `find` checks the entry it names.)
        for behind in [1, (1 << 31) + 5, (1 << 32) - 5, (1 << 32) + 2, 3 << 31] {
            index.insert(behind, head - behind);
        }
        for seq in head..head + 3 {
            index.insert(seq, seq);
        }
        index.sweep(&ring, 3, 0);
        assert_eq!(
            every_seq(&index, head),
            (head..head + 3).collect::<Vec<_>>()
        );
    }

    #[test]
    fn sequence_numbers_come_back_whole_around_the_head() {
        for head in [
            0,
            1,
            u64::from(u32::MAX),
            1 << 32,
            (1 << 32) + 3,
            u64::MAX >> 1,
        ] {
            for seq in [head, head + 1, head + (1 << 31) - 1] {
                assert_eq!(full_seq(seq as u32, head), seq, "{seq} past {head}");
            }
            for behind in [1, 1000, 1 << 31] {
                if let Some(seq) = head.checked_sub(behind) {
                    assert_eq!(full_seq(seq as u32, head), seq, "{seq} behind {head}");
                }
            }
        }
    }

    #[test]
    fn entries_are_found_by_hash_and_match_across_the_low_halfs_wrap() {
        let hasher = ahash::RandomState::new();
        let mut ring = SeqRing {
            items: VecDeque::new(),
            head: u64::from(u32::MAX) - 100,
        };
        let mut index = SeqIndex::default();
        for n in 0..300u64 {
            let seq = ring.push_back(n);
            index.insert(hasher.hash_one(n), seq);
        }
        for _ in 0..50 {
            ring.pop_front();
        }
        for n in 0..300u64 {
            let found = index.find(hasher.hash_one(n), &ring, |&entry| entry == n);
            let expected = (n >= 50).then(|| u64::from(u32::MAX) - 100 + n);
            assert_eq!(found, expected, "{n}");
        }
    }
}
