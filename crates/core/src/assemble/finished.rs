//! The memory of evaluated requests, oldest first (see [`super::Grouper`]).
//!
//! A ring of entries in the order they were made, and two indexes of sequence numbers into
//! it: by group key, and by the ids of the logical spans an entry holds. Only the oldest entry
//! is ever forgotten, so forgetting advances the ring and leaves the indexes alone: an index
//! entry whose sequence number is behind the ring's head is stale, never matches, and goes at
//! the next sweep. Under load every evaluated request evicts one; removing it from keyed maps
//! was two hash-table removals in tables gone cold since the insert (BENCHMARKS.md, issue 18).

use super::seq_ring::{SeqIndex, SeqRing};
use super::{ContextSpan, GroupKey, SpanIds};
use crate::contract::{SpanId, TraceId};

/// Stale index entries are swept once they outnumber the live ones by this many more than
/// double, so a sweep's cost is spread over at least as many inserts as it scans.
const SWEEP_SLACK: usize = 1024;

/// What is remembered of an evaluated request: compact context, not whole spans.
#[derive(Debug, Default)]
pub(super) struct Finished {
    /// Boxed: most finished requests are looked up again never.
    pub(super) logical: Option<Box<ContextSpan>>,
    pub(super) attempts: Vec<ContextSpan>,
    pub(super) span_ids: SpanIds,
    pub(super) bytes: usize,
    /// The ids of the logical spans taken with this request (almost always one, that of
    /// `logical`): a copy of any of them sent again is a duplicate.
    first_logical_id: Option<SpanId>,
    more_logical_ids: Vec<SpanId>,
}

impl Finished {
    fn holds_logical(&self, id: &SpanId) -> bool {
        self.first_logical_id.as_ref() == Some(id) || self.more_logical_ids.contains(id)
    }

    fn logical_ids(&self) -> usize {
        usize::from(self.first_logical_id.is_some()) + self.more_logical_ids.len()
    }
}

#[derive(Debug)]
struct Slot {
    key: GroupKey,
    finished: Finished,
}

/// An entry's place in the ring, valid until the entry is evicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Seq(u64);

#[derive(Debug)]
pub(super) struct FinishedCache {
    capacity: usize,
    ring: SeqRing<Slot>,
    /// By the hash of the key.
    by_key: SeqIndex,
    /// By the hash of the trace and span ids, every logical span id held.
    by_logical: SeqIndex,
    live_logical: usize,
    hasher: ahash::RandomState,
}

impl Default for FinishedCache {
    fn default() -> Self {
        FinishedCache::with_capacity(0)
    }
}

impl FinishedCache {
    /// A cache of at most `capacity` requests (0: off).
    pub(super) fn with_capacity(capacity: usize) -> FinishedCache {
        FinishedCache {
            capacity,
            ring: SeqRing::default(),
            by_key: SeqIndex::default(),
            by_logical: SeqIndex::default(),
            live_logical: 0,
            hasher: ahash::RandomState::new(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.ring.len()
    }

    fn slot(&self, seq: u64) -> Option<&Slot> {
        self.ring.get(seq)
    }

    fn find(&self, hash: u64, key: &GroupKey) -> Option<u64> {
        self.by_key.find(hash, &self.ring, |s| s.key == *key)
    }

    /// The hash of `key` in this cache's indexes (and the pending groups', which share it).
    pub(super) fn hash(&self, key: &GroupKey) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The entry of a key whose [`FinishedCache::hash`] is `hash`.
    pub(super) fn get_hashed(&self, hash: u64, key: &GroupKey) -> Option<&Finished> {
        if self.ring.is_empty() {
            return None;
        }
        self.slot(self.find(hash, key)?).map(|s| &s.finished)
    }

    #[cfg(test)]
    fn contains(&self, key: &GroupKey) -> bool {
        self.seq_of(key).is_some()
    }

    pub(super) fn seq_of(&self, key: &GroupKey) -> Option<Seq> {
        self.find(self.hasher.hash_one(key), key).map(Seq)
    }

    pub(super) fn get_mut(&mut self, key: &GroupKey) -> Option<(Seq, &mut Finished)> {
        let seq = self.seq_of(key)?;
        Some((seq, self.at(seq)?))
    }

    /// The entry at `seq`; `None` once it has been evicted.
    pub(super) fn at(&mut self, seq: Seq) -> Option<&mut Finished> {
        self.ring.get_mut(seq.0).map(|s| &mut s.finished)
    }

    /// The entry of `key`, and whether it is new; `None` when the cache is off. A new entry
    /// evicts the oldest ones past the capacity, each handed to `forget`.
    pub(super) fn entry(
        &mut self,
        key: &GroupKey,
        mut forget: impl FnMut(Finished),
    ) -> Option<(Seq, bool)> {
        if self.capacity == 0 {
            return None;
        }
        let hash = self.hasher.hash_one(key);
        if let Some(seq) = self.find(hash, key) {
            return Some((Seq(seq), false));
        }
        while self.ring.len() >= self.capacity {
            match self.evict_oldest() {
                Some(gone) => forget(gone),
                None => break,
            }
        }
        let seq = self.ring.push_back(Slot {
            key: key.clone(),
            finished: Finished::default(),
        });
        let live = self.ring.len();
        self.by_key.sweep(&self.ring, live, live + SWEEP_SLACK);
        self.by_key.insert(hash, seq);
        Some((Seq(seq), true))
    }

    /// Forgets the oldest request.
    pub(super) fn evict_oldest(&mut self) -> Option<Finished> {
        let slot = self.ring.pop_front()?;
        self.live_logical -= slot.finished.logical_ids();
        Some(slot.finished)
    }

    /// Records that the entry at `seq` holds the logical span `id`, so a copy of it sent
    /// again is known ([`FinishedCache::holds_logical`]).
    pub(super) fn add_logical_id(&mut self, seq: Seq, id: SpanId) {
        let Some(slot) = self.ring.get_mut(seq.0) else {
            return;
        };
        let finished = &mut slot.finished;
        if finished.holds_logical(&id) {
            return;
        }
        match finished.first_logical_id {
            None => finished.first_logical_id = Some(id),
            Some(_) => finished.more_logical_ids.push(id),
        }
        let hash = self.hasher.hash_one((slot.key.trace_id(), &id));
        self.live_logical += 1;
        let live = self.live_logical;
        self.by_logical.sweep(&self.ring, live, live + SWEEP_SLACK);
        self.by_logical.insert(hash, seq.0);
    }

    /// Whether an entry holds the logical span `(trace_id, span_id)`.
    pub(super) fn holds_logical(&self, trace_id: &TraceId, span_id: &SpanId) -> bool {
        if self.live_logical == 0 {
            return false;
        }
        let hash = self.hasher.hash_one((trace_id, span_id));
        self.by_logical
            .find(hash, &self.ring, |s| {
                s.key.trace_id() == trace_id && s.finished.holds_logical(span_id)
            })
            .is_some()
    }

    /// Every entry, oldest first.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&GroupKey, &Finished)> {
        self.ring.iter().map(|s| (&s.key, &s.finished))
    }
}

#[cfg(test)]
mod tests;
