//! `serve`'s side of "Attempts inferred from plain instrumentation" (SPEC §2): what inference
//! needs is held per trace for `group_wait` after the trace's latest span (model spans, call
//! spans and HTTP tries in full, every other span's parent link), then [`infer_trace`] makes
//! requests of it exactly as `replay` does for its whole input. A trace inferred once is
//! remembered, within bounds, so its late spans are judged as SPEC §2 says.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::infer::{infer_trace, EarlierTrace, Link, TraceSpans};
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
    /// Every span's parent link, in arrival order.
    links: Vec<Link>,
    /// Boxed: most traces are of declared spans, whose links are all they need held.
    plain: Option<Box<HeldPlain>>,
    /// Where the plain spans came from: inference consumes them all at once.
    origins: Option<Origins>,
    last_seen: Instant,
    bytes: usize,
}

/// A trace's model spans, call spans and tries.
#[derive(Debug, Default)]
struct HeldPlain {
    /// Their links are in [`Held`]'s.
    spans: TraceSpans,
    /// Ids of the model spans, call spans and tries held, so a re-sent copy is known.
    ids: FastSet<SpanId>,
}

impl Held {
    fn inferable(&self) -> bool {
        self.plain.as_ref().is_some_and(|p| p.spans.inferable())
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

#[derive(Debug)]
pub(super) struct PlainHold {
    group_wait: Duration,
    /// Every trace gets an entry (declared spans note their links): what a trace of declared
    /// spans alone needs is inline, the rest boxed, so the slots stay small (a map of ~200-byte
    /// values carries that much for each of its empty slots too: 26 MB of a 125 MB heap).
    traces: FastMap<TraceId, Held>,
    /// Held traces by the time they last received a span; one entry each, requeued when it
    /// comes due and the trace received spans since.
    queue: VecDeque<(Instant, TraceId)>,
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
            group_wait,
            traces: FastMap::default(),
            queue: VecDeque::new(),
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
        } + LINK_BYTES
            + 16;
        held.bytes += bytes;
        held.origins = Origins::widen_optional(held.origins, origin.map(Origins::single));
        let first_model = span.kind == SpanKind::SingleAttempt && !plain.spans.inferable();
        held.links.push(Link::of(&span));
        plain.spans.push_unlinked(span);
        self.bytes += bytes;
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
        held.bytes += LINK_BYTES;
        self.bytes += LINK_BYTES;
    }

    fn held(&mut self, trace_id: TraceId, now: Instant) -> &mut Held {
        let queue = &mut self.queue;
        let bytes = &mut self.bytes;
        let held = self.traces.entry(trace_id).or_insert_with(|| {
            queue.push_back((now, trace_id));
            *bytes += TRACE_OVERHEAD_BYTES;
            Held {
                links: Vec::new(),
                plain: None,
                origins: None,
                last_seen: now,
                bytes: TRACE_OVERHEAD_BYTES,
            }
        });
        held.last_seen = held.last_seen.max(now);
        held
    }

    /// Traces quiet for `group_wait` are inferred.
    pub(super) fn expire(&mut self, now: Instant, ready: &mut Ready) {
        while let Some(&(queued, trace_id)) = self.queue.front() {
            if queued + self.group_wait > now {
                break;
            }
            self.queue.pop_front();
            let Some(held) = self.traces.get(&trace_id) else {
                continue;
            };
            if held.last_seen + self.group_wait > now {
                self.queue.push_back((held.last_seen, trace_id));
                continue;
            }
            self.infer(trace_id, ready);
        }
    }

    /// Every held trace, now (shutdown, or the end of `replay`'s input).
    pub(super) fn drain_all(&mut self, ready: &mut Ready) {
        let mut ids: Vec<TraceId> = self.traces.keys().copied().collect();
        ids.sort_unstable();
        for trace_id in ids {
            self.infer(trace_id, ready);
        }
        self.queue.clear();
    }

    /// Infers the trace that has waited longest, early (the byte budget); false when none is
    /// held.
    pub(super) fn evict_oldest(&mut self, ready: &mut Ready) -> bool {
        while let Some((_, trace_id)) = self.queue.pop_front() {
            if let Some(held) = self.traces.get(&trace_id) {
                if held.inferable() {
                    ready.evicted += 1;
                }
                self.infer(trace_id, ready);
                return true;
            }
        }
        false
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
            .values()
            .filter_map(|held| held.origins.map(|o| o.min))
            .min()
    }

    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.queue
            .front()
            .map(|&(queued, _)| queued + self.group_wait)
    }

    fn infer(&mut self, trace_id: TraceId, ready: &mut Ready) {
        let Some(held) = self.traces.remove(&trace_id) else {
            return;
        };
        self.bytes = self.bytes.saturating_sub(held.bytes);
        let Held {
            links,
            plain,
            origins,
            ..
        } = held;
        ready.consumed_origins = Origins::widen_optional(ready.consumed_origins, origins);
        let HeldPlain { mut spans, ids } = plain.map(|p| *p).unwrap_or_default();
        spans.links = links;
        ready
            .consumed
            .extend(ids.iter().map(|&span_id| (trace_id, span_id)));
        if !spans.inferable() {
            return;
        }
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
