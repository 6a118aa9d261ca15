//! `serve`'s side of "Attempts inferred from plain instrumentation" (SPEC §2): what inference
//! needs is held per trace for `group_wait` after the trace's latest span (model spans, call
//! spans and HTTP tries in full, every other span's parent link), then [`infer_trace`] makes
//! requests of it exactly as `replay` does for its whole input. A trace inferred once is
//! remembered, within bounds, so its late spans are judged as SPEC §2 says.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use smallvec::SmallVec;

use super::infer::{infer_trace, EarlierTrace, Link, TraceSpans};
use super::seq_ring::{SeqIndex, SeqRing};
use super::ticks::Ticks;
use super::{FastMap, FastSet, Origins, Ready};
use crate::contract::{HttpTry, SpanFacts, SpanId, SpanKind, TraceId};

/// What one held HTTP try costs: the compact facts, its map slots and id.
const TRY_BYTES: usize = std::mem::size_of::<HttpTry>() + 64;
/// One span's link while held, and while remembered.
const LINK_BYTES: usize = std::mem::size_of::<Link>() + 24;
const TRACE_OVERHEAD_BYTES: usize = 256;

/// One trace's spans waiting for inference.
#[derive(Debug)]
struct Held {
    /// Every span's parent link, in arrival order. Inline up to a logical span and three
    /// attempts: every trace gets an entry, most are of declared spans, and a vector was one
    /// more allocation (80 bytes) for each.
    links: SmallVec<[Link; INLINE_LINKS]>,
    /// Boxed: most traces are of declared spans, whose links are all they need held.
    plain: Option<Box<HeldPlain>>,
    /// In [`Ticks`].
    last_seen: u64,
}

const INLINE_LINKS: usize = 4;

/// A trace's model spans, call spans and tries.
#[derive(Debug, Default)]
struct HeldPlain {
    /// Their links are in [`Held`]'s.
    spans: TraceSpans,
    /// Ids of the model spans, call spans and tries held, so a re-sent copy is known.
    ids: FastSet<SpanId>,
    /// Where the plain spans came from: inference consumes them all at once.
    origins: Option<Origins>,
    /// Estimated bytes of the spans held in full, beside their links.
    bytes: usize,
}

impl Held {
    fn inferable(&self) -> bool {
        self.plain.as_ref().is_some_and(|p| p.spans.inferable())
    }

    /// Estimated bytes the trace holds: derived, not kept, as every trace has a slot.
    fn bytes(&self) -> usize {
        TRACE_OVERHEAD_BYTES
            + self.links.len() * LINK_BYTES
            + self.plain.as_ref().map_or(0, |plain| plain.bytes)
    }
}

/// What is remembered of a trace after inference.
#[derive(Debug, Default)]
struct Finished {
    earlier: EarlierTrace,
    /// Ids of its model spans, call spans and tries: a re-sent copy is a duplicate.
    ids: FastSet<SpanId>,
    bytes: usize,
}

/// What became of a span offered for inference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PlainOffer {
    /// Held in full until its trace is inferred.
    Held,
    /// Seen before: ignored.
    Duplicate,
}

/// The traces held, in the order they come due: a queue that is its own storage.
///
/// Every trace gets an entry (declared spans note their links), and nearly every trace leaves
/// from the front, by time or by the byte budget. A keyed map made each arrival and each
/// departure a probe of a table gone cold (BENCHMARKS.md, issue 18, thirteenth pass). Here a
/// trace leaves by popping the front, and the index forgets it lazily (see [`SeqRing`]): its
/// stale entries are swept once they outnumber a quarter of the live ones.
#[derive(Debug, Default)]
struct HeldTraces {
    /// One slot per held trace, by the time it was queued (its first span, or its latest when
    /// it came due and was requeued).
    queue: SeqRing<Slot>,
    /// By the hash of the trace id: one live entry per queued trace, the rest stale.
    index: SeqIndex,
    hasher: ahash::RandomState,
}

#[derive(Debug)]
struct Slot {
    trace_id: TraceId,
    /// In [`Ticks`].
    queued: u64,
    held: Held,
}

/// Stale index entries are swept past a quarter of the live ones plus this many: the index
/// then stays within the table size the live ones need (8 bytes an entry).
const STALE_SWEPT: usize = 1024;

impl HeldTraces {
    /// The sequence number of the trace's slot.
    fn find(&self, hash: u64, trace_id: &TraceId) -> Option<u64> {
        self.index
            .find(hash, &self.queue, |slot| slot.trace_id == *trace_id)
    }

    /// The trace's entry, queued at `now` with `make` when it has none.
    fn get_or_insert(
        &mut self,
        trace_id: TraceId,
        now: u64,
        make: impl FnOnce() -> Held,
    ) -> &mut Held {
        let hash = self.hasher.hash_one(trace_id);
        let seq = match self.find(hash, &trace_id) {
            Some(seq) => seq,
            None => self.push(hash, trace_id, now, make()),
        };
        match self.queue.get_mut(seq) {
            Some(slot) => &mut slot.held,
            // `find` and `push` return entries in the queue.
            None => unreachable!("a held trace's slot is in the queue"),
        }
    }

    fn push(&mut self, hash: u64, trace_id: TraceId, queued: u64, held: Held) -> u64 {
        let live = self.queue.len();
        self.index.sweep(&self.queue, live, live / 4 + STALE_SWEPT);
        let seq = self.queue.push_back(Slot {
            trace_id,
            queued,
            held,
        });
        self.index.insert(hash, seq);
        seq
    }

    fn front(&self) -> Option<&Slot> {
        self.queue.front()
    }

    fn pop_front(&mut self) -> Option<Slot> {
        self.queue.pop_front()
    }

    /// Queues a trace that came due having received spans since, by its latest.
    fn requeue(&mut self, slot: Slot) {
        let hash = self.hasher.hash_one(slot.trace_id);
        let queued = slot.held.last_seen;
        self.push(hash, slot.trace_id, queued, slot.held);
    }

    /// Every held trace, taken out.
    fn drain(&mut self) -> Vec<Slot> {
        self.index.clear();
        self.queue.drain()
    }

    fn iter(&self) -> impl Iterator<Item = &Held> {
        self.queue.iter().map(|slot| &slot.held)
    }
}

#[derive(Debug)]
pub(super) struct PlainHold {
    /// In [`Ticks`].
    group_wait: u64,
    ticks: Ticks,
    /// Every trace gets an entry (declared spans note their links): what a trace of declared
    /// spans alone needs is inline, the rest boxed, so the slots stay small.
    traces: HeldTraces,
    finished: FastMap<TraceId, Finished>,
    finished_order: VecDeque<TraceId>,
    finished_capacity: usize,
    bytes: usize,
    finished_bytes: usize,
    /// Held traces with a model span, counted as they change (the gauge reads it per export).
    with_models: usize,
}

impl PlainHold {
    pub(super) fn new(group_wait: Duration, finished_capacity: usize) -> PlainHold {
        PlainHold {
            group_wait: Ticks::nanos(group_wait),
            ticks: Ticks::default(),
            traces: HeldTraces::default(),
            finished: FastMap::default(),
            finished_order: VecDeque::new(),
            finished_capacity,
            bytes: 0,
            finished_bytes: 0,
            with_models: 0,
        }
    }

    /// Holds a model span, call span or HTTP try in full.
    pub(super) fn offer(
        &mut self,
        span: SpanFacts,
        now: Instant,
        origin: Option<u64>,
    ) -> PlainOffer {
        let trace_id = span.trace_id;
        if self
            .finished
            .get(&trace_id)
            .is_some_and(|f| f.ids.contains(&span.span_id))
        {
            return PlainOffer::Duplicate;
        }
        let held = self.held(trace_id, now);
        let plain = held.plain.get_or_insert_with(Box::default);
        if !plain.ids.insert(span.span_id) {
            return PlainOffer::Duplicate;
        }
        let bytes = match span.kind {
            SpanKind::HttpTry => TRY_BYTES,
            _ => span.retained_bytes(),
        } + 16;
        plain.bytes += bytes;
        plain.origins = Origins::widen_optional(plain.origins, origin.map(Origins::single));
        let first_model = span.kind == SpanKind::SingleAttempt && !plain.spans.inferable();
        held.links.push(Link::of(&span));
        plain.spans.push_unlinked(span);
        self.bytes += bytes + LINK_BYTES;
        if first_model {
            self.with_models += 1;
        }
        PlainOffer::Held
    }

    /// Notes the parent link of a span inference does not hold in full (declared, and every
    /// other kind): nests and the scope of declared spans follow links through any span.
    pub(super) fn note_link(&mut self, span: &SpanFacts, now: Instant) {
        let held = self.held(span.trace_id, now);
        held.links.push(Link::of(span));
        self.bytes += LINK_BYTES;
    }

    fn held(&mut self, trace_id: TraceId, now: Instant) -> &mut Held {
        let now = self.ticks.of(now);
        let bytes = &mut self.bytes;
        let held = self.traces.get_or_insert(trace_id, now, || {
            *bytes += TRACE_OVERHEAD_BYTES;
            Held {
                links: SmallVec::new(),
                plain: None,
                last_seen: now,
            }
        });
        held.last_seen = held.last_seen.max(now);
        held
    }

    /// Traces quiet for `group_wait` are inferred.
    pub(super) fn expire(&mut self, now: Instant, ready: &mut Ready) {
        let now = self.ticks.peek(now);
        while let Some(front) = self.traces.front() {
            if front.queued.saturating_add(self.group_wait) > now {
                break;
            }
            let Some(slot) = self.traces.pop_front() else {
                break;
            };
            if slot.held.last_seen.saturating_add(self.group_wait) > now {
                self.traces.requeue(slot);
                continue;
            }
            self.infer(slot.trace_id, slot.held, ready);
        }
    }

    /// Every held trace, now (shutdown, or the end of `replay`'s input).
    pub(super) fn drain_all(&mut self, ready: &mut Ready) {
        let mut slots = self.traces.drain();
        // Traces of declared spans alone infer nothing and are most of them (every trace has a
        // slot): let them go before ordering the rest.
        let bytes = &mut self.bytes;
        slots.retain(|slot| {
            let plain = slot.held.plain.is_some();
            if !plain {
                *bytes = bytes.saturating_sub(slot.held.bytes());
            }
            plain
        });
        slots.sort_unstable_by_key(|slot| slot.trace_id);
        // About a request a trace: grown by doubling, the vector copied every request again.
        ready.requests.reserve(slots.len());
        for slot in slots {
            self.infer(slot.trace_id, slot.held, ready);
        }
    }

    /// Infers the trace that has waited longest, early (the byte budget); false when none is
    /// held.
    pub(super) fn evict_oldest(&mut self, ready: &mut Ready) -> bool {
        let Some(slot) = self.traces.pop_front() else {
            return false;
        };
        if slot.held.inferable() {
            ready.evicted += 1;
        }
        self.infer(slot.trace_id, slot.held, ready);
        true
    }

    /// Forgets the oldest inferred trace; false when none is remembered. Its late spans are
    /// then judged as a new trace's.
    pub(super) fn evict_finished(&mut self) -> bool {
        while let Some(trace_id) = self.finished_order.pop_front() {
            if let Some(gone) = self.finished.remove(&trace_id) {
                self.finished_bytes = self.finished_bytes.saturating_sub(gone.bytes);
                return true;
            }
        }
        false
    }

    /// Estimated bytes of the traces held for inference.
    pub(super) fn held_bytes(&self) -> usize {
        self.bytes
    }

    /// Estimated bytes of the inferred traces remembered.
    pub(super) fn finished_bytes(&self) -> usize {
        self.finished_bytes
    }

    /// Held traces with a model span: requests to come.
    pub(super) fn pending_traces(&self) -> usize {
        self.with_models
    }

    /// The oldest record (see [`Origins`]) a held span came from.
    pub(super) fn oldest_origin(&self) -> Option<u64> {
        self.traces
            .iter()
            .filter_map(|held| held.plain.as_ref()?.origins.map(|o| o.min))
            .min()
    }

    pub(super) fn next_deadline(&self) -> Option<Instant> {
        let front = self.traces.front()?;
        self.ticks
            .instant(front.queued.saturating_add(self.group_wait))
    }

    fn infer(&mut self, trace_id: TraceId, held: Held, ready: &mut Ready) {
        self.bytes = self.bytes.saturating_sub(held.bytes());
        let Held { links, plain, .. } = held;
        // A trace of declared spans alone: nothing to infer, nothing consumed.
        let Some(plain) = plain else {
            return;
        };
        let HeldPlain {
            mut spans,
            ids,
            origins,
            ..
        } = *plain;
        ready.consumed_origins = Origins::widen_optional(ready.consumed_origins, origins);
        ready
            .consumed
            .extend(ids.iter().map(|&span_id| (trace_id, span_id)));
        if !spans.inferable() {
            return;
        }
        spans.links = links.into_vec();
        self.with_models -= 1;
        let model_ids: FastSet<SpanId> = spans.models.iter().map(|m| m.span_id).collect();
        let links = spans.links.clone();
        let earlier = self.finished.get(&trace_id).map(|f| &f.earlier);
        let inferred = infer_trace(trace_id, spans, earlier);
        ready.requests.extend(inferred.requests);
        ready.duplicates += inferred.duplicates as u64;
        if self.finished_capacity == 0 {
            return;
        }
        if !self.finished.contains_key(&trace_id) {
            while self.finished.len() >= self.finished_capacity && self.evict_finished() {}
            self.finished_order.push_back(trace_id);
        }
        let finished = self.finished.entry(trace_id).or_default();
        let mut bytes = 0;
        for link in links {
            let model = model_ids.contains(&link.span_id);
            if finished
                .earlier
                .links
                .insert(link.span_id, (link, model))
                .is_none()
            {
                bytes += LINK_BYTES;
            }
        }
        for id in ids {
            if finished.ids.insert(id) {
                bytes += 16;
            }
        }
        bytes += inferred.calls.len() * std::mem::size_of::<super::infer::CallSignature>();
        finished.earlier.calls.extend(inferred.calls);
        finished.bytes += bytes;
        self.finished_bytes += bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(now: u64) -> Held {
        Held {
            links: SmallVec::new(),
            plain: None,
            last_seen: now,
        }
    }

    fn trace(n: u32) -> TraceId {
        let mut id = [0; 16];
        id[..4].copy_from_slice(&n.to_be_bytes());
        id
    }

    /// How many spans the trace's slot has taken (see [`add`]).
    fn spans_of(traces: &HeldTraces, n: u32) -> Option<usize> {
        let id = trace(n);
        let seq = traces.find(traces.hasher.hash_one(id), &id)?;
        Some(traces.queue.get(seq)?.held.links.len())
    }

    fn add(traces: &mut HeldTraces, n: u32, now: u64) {
        traces
            .get_or_insert(trace(n), now, || held(now))
            .links
            .push(Link {
                span_id: [0; 8],
                parent: None,
                declared: false,
            });
    }

    #[test]
    fn a_slot_of_declared_spans_is_its_id_times_and_four_links_inline() {
        // Every trace gets a slot: 16 + 8 + 8 + 8 bytes and the links (four of 18 bytes).
        assert!(std::mem::size_of::<Slot>() <= 120);
    }

    #[test]
    fn a_trace_is_one_entry_found_until_it_leaves_from_the_front() {
        let mut traces = HeldTraces::default();
        let now = 7;
        let total = 3 * STALE_SWEPT as u32;
        for n in 0..total {
            add(&mut traces, n, now);
            add(&mut traces, n, now);
        }
        for n in 0..total - 10 {
            assert_eq!(traces.pop_front().map(|slot| slot.trace_id), Some(trace(n)));
        }
        for n in 0..total {
            let expected = (n >= total - 10).then_some(2);
            assert_eq!(spans_of(&traces, n), expected, "trace {n}");
        }
        // A trace that left and comes again is a new entry, at the back.
        add(&mut traces, 0, now);
        assert_eq!(spans_of(&traces, 0), Some(1));
        assert_eq!(
            traces.queue.iter().last().map(|slot| slot.trace_id),
            Some(trace(0))
        );
        // The stale entries were swept when they outnumbered the live ones.
        assert!(traces.index.len() <= traces.queue.len() * 5 / 4 + STALE_SWEPT + 1);
    }

    #[test]
    fn a_requeued_trace_moves_to_the_back_by_its_latest_span_and_drain_takes_all() {
        let mut traces = HeldTraces::default();
        let t0 = 7;
        let later = t0 + 5_000_000_000;
        for n in 0..3 {
            add(&mut traces, n, t0);
        }
        traces
            .get_or_insert(trace(0), later, || held(later))
            .last_seen = later;
        let first = traces.pop_front();
        assert_eq!(first.as_ref().map(|slot| slot.trace_id), Some(trace(0)));
        if let Some(slot) = first {
            traces.requeue(slot);
        }
        let order: Vec<TraceId> = traces.queue.iter().map(|slot| slot.trace_id).collect();
        assert_eq!(order, [trace(1), trace(2), trace(0)]);
        assert_eq!(
            traces.queue.iter().last().map(|slot| slot.queued),
            Some(later)
        );
        assert_eq!(spans_of(&traces, 0), Some(1));
        let drained: Vec<TraceId> = traces.drain().iter().map(|slot| slot.trace_id).collect();
        assert_eq!(drained, [trace(1), trace(2), trace(0)]);
        assert!((0..3).all(|n| spans_of(&traces, n).is_none()));
        add(&mut traces, 2, t0);
        assert_eq!(spans_of(&traces, 2), Some(1));
        assert_eq!(traces.front().map(|slot| slot.trace_id), Some(trace(2)));
    }
}
