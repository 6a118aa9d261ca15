//! `serve`'s side of "Attempts inferred from plain instrumentation" (SPEC §2): plain GenAI
//! spans wait by `(trace, parent)` for `group_wait` after the latest of them (or of their HTTP
//! tries), HTTP tries wait by trace for their GenAI parent, and [`infer`] then makes requests of
//! them exactly as `replay` does for its whole input.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use super::infer::infer;
use super::{FastMap, FastSet, Ready};
use crate::contract::{HttpTry, SpanFacts, SpanId, TraceId};

/// Plain GenAI spans of one trace and parent form runs among themselves.
type RunKey = (TraceId, Option<SpanId>);

/// What one held HTTP try costs: the compact facts, map slots and its id in the seen set.
const TRY_BYTES: usize = std::mem::size_of::<HttpTry>() + 64;
const RUN_OVERHEAD_BYTES: usize = 192;

#[derive(Debug)]
struct Run {
    spans: Vec<SpanFacts>,
    slot: (Instant, u64),
    bytes: usize,
}

#[derive(Debug, Default)]
struct TraceTries {
    by_parent: FastMap<SpanId, Vec<HttpTry>>,
    last_seen: Option<Instant>,
    count: usize,
}

#[derive(Debug)]
pub(super) struct PlainHold {
    group_wait: Duration,
    runs: FastMap<RunKey, Run>,
    deadlines: BTreeMap<(Instant, u64), RunKey>,
    /// The run each held GenAI span waits in, so its tries can extend that run's wait.
    run_of: FastMap<(TraceId, SpanId), RunKey>,
    tries: FastMap<TraceId, TraceTries>,
    /// When each trace last received a try, oldest first (entries may be stale).
    try_arrivals: VecDeque<(Instant, TraceId)>,
    /// Plain spans held or already inferred: a re-sent copy is a duplicate. Bounded: the oldest
    /// are forgotten first.
    seen: FastSet<(TraceId, SpanId)>,
    seen_order: VecDeque<(TraceId, SpanId)>,
    seen_capacity: usize,
    sequence: u64,
    bytes: usize,
}

impl PlainHold {
    pub(super) fn new(group_wait: Duration, seen_capacity: usize) -> PlainHold {
        PlainHold {
            group_wait,
            runs: FastMap::default(),
            deadlines: BTreeMap::new(),
            run_of: FastMap::default(),
            tries: FastMap::default(),
            try_arrivals: VecDeque::new(),
            seen: FastSet::default(),
            seen_order: VecDeque::new(),
            seen_capacity: seen_capacity.max(1),
            sequence: 0,
            bytes: 0,
        }
    }

    /// Holds a plain GenAI span; false when it was seen before.
    pub(super) fn offer_genai(&mut self, span: SpanFacts, now: Instant) -> bool {
        let id = (span.trace_id, span.span_id);
        if !self.remember(id) {
            return false;
        }
        let key = (span.trace_id, span.parent_span_id);
        let bytes = span.retained_bytes();
        self.bytes += bytes;
        self.run_of.insert(id, key);
        let slot = self.next_slot(now);
        match self.runs.get_mut(&key) {
            Some(run) => {
                self.deadlines.remove(&run.slot);
                run.slot = slot;
                run.bytes += bytes;
                run.spans.push(span);
            }
            None => {
                self.bytes += RUN_OVERHEAD_BYTES;
                self.runs.insert(
                    key,
                    Run {
                        spans: vec![span],
                        slot,
                        bytes: bytes + RUN_OVERHEAD_BYTES,
                    },
                );
            }
        }
        self.deadlines.insert(slot, key);
        true
    }

    /// Holds an HTTP try's facts for its GenAI parent. False when nothing is held: the try was
    /// seen before, or it has no parent (no GenAI span can be above it), so the caller has no
    /// log record to keep for it.
    pub(super) fn offer_try(&mut self, try_: HttpTry, now: Instant) -> bool {
        let id = (try_.trace_id, try_.span_id);
        if !self.remember(id) {
            return false;
        }
        // A try under a GenAI span that is waiting keeps that span's run waiting too.
        if let Some(parent) = try_.parent_span_id {
            if let Some(key) = self.run_of.get(&(try_.trace_id, parent)).copied() {
                let slot = self.next_slot(now);
                if let Some(run) = self.runs.get_mut(&key) {
                    self.deadlines.remove(&run.slot);
                    run.slot = slot;
                    self.deadlines.insert(slot, key);
                }
            }
        }
        let trace = self.tries.entry(try_.trace_id).or_default();
        trace.last_seen = Some(now);
        trace.count += 1;
        self.try_arrivals.push_back((now, try_.trace_id));
        let Some(parent) = try_.parent_span_id else {
            // A try with no parent has no GenAI span above it: nothing to infer from it.
            trace.count -= 1;
            return false;
        };
        trace.by_parent.entry(parent).or_default().push(try_);
        self.bytes += TRY_BYTES;
        true
    }

    /// Runs whose wait has passed become requests; tries whose trace has been quiet for as
    /// long are let go (they passed through when they arrived).
    pub(super) fn expire(&mut self, now: Instant, ready: &mut Ready) {
        while let Some((&(deadline, seq), _)) = self.deadlines.first_key_value() {
            if deadline > now {
                break;
            }
            if let Some(key) = self.deadlines.remove(&(deadline, seq)) {
                self.infer_run(key, ready);
            }
        }
        while let Some(&(arrived, trace)) = self.try_arrivals.front() {
            if arrived + self.group_wait > now {
                break;
            }
            self.try_arrivals.pop_front();
            let quiet = self
                .tries
                .get(&trace)
                .is_some_and(|t| t.last_seen.is_none_or(|last| last + self.group_wait <= now));
            if quiet {
                if let Some(gone) = self.tries.remove(&trace) {
                    self.forget_tries(gone, ready);
                }
            }
        }
    }

    /// Every run, now (shutdown); tries left without a parent are let go.
    pub(super) fn drain_all(&mut self, ready: &mut Ready) {
        let keys: Vec<RunKey> = self.deadlines.values().copied().collect();
        for key in keys {
            self.infer_run(key, ready);
        }
        self.deadlines.clear();
        for (_, gone) in std::mem::take(&mut self.tries) {
            self.forget_tries(gone, ready);
        }
        self.try_arrivals.clear();
    }

    /// Infers the run that has waited longest, early (the byte budget); false when none waits.
    pub(super) fn evict_oldest(&mut self, ready: &mut Ready) -> bool {
        let Some((_, key)) = self.deadlines.pop_first() else {
            return false;
        };
        self.infer_run(key, ready);
        ready.evicted += 1;
        true
    }

    /// Lets go of the tries of the trace that received one longest ago, early (the byte budget,
    /// when no run is left to infer); false when none is held. A GenAI span of that trace
    /// arriving later is judged without them.
    pub(super) fn evict_oldest_tries(&mut self, ready: &mut Ready) -> bool {
        while let Some((_, trace)) = self.try_arrivals.pop_front() {
            if let Some(gone) = self.tries.remove(&trace) {
                self.forget_tries(gone, ready);
                return true;
            }
        }
        false
    }

    /// Estimated bytes of the runs and tries held (the seen ids apart: they are bounded by
    /// count and cannot be let go early).
    pub(super) fn held_bytes(&self) -> usize {
        self.bytes
    }

    pub(super) fn pending_runs(&self) -> usize {
        self.runs.len()
    }

    pub(super) fn bytes(&self) -> usize {
        self.bytes + self.seen_order.len() * SPAN_ID_SLOT
    }

    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first_key_value().map(|(&(d, _), _)| d)
    }

    fn infer_run(&mut self, key: RunKey, ready: &mut Ready) {
        let Some(run) = self.runs.remove(&key) else {
            return;
        };
        self.deadlines.remove(&run.slot);
        self.bytes = self.bytes.saturating_sub(run.bytes);
        let mut tries = Vec::new();
        let mut trace = self.tries.get_mut(&key.0);
        for span in &run.spans {
            self.run_of.remove(&(span.trace_id, span.span_id));
            ready.consumed.push((span.trace_id, span.span_id));
            if let Some(t) = trace.as_deref_mut() {
                if let Some(under) = t.by_parent.remove(&span.span_id) {
                    t.count -= under.len();
                    self.bytes = self.bytes.saturating_sub(under.len() * TRY_BYTES);
                    ready
                        .consumed
                        .extend(under.iter().map(|t| (t.trace_id, t.span_id)));
                    tries.extend(under);
                }
            }
        }
        if trace.is_some_and(|t| t.count == 0) {
            self.tries.remove(&key.0);
        }
        ready.requests.extend(infer(run.spans, tries));
    }

    fn forget_tries(&mut self, gone: TraceTries, ready: &mut Ready) {
        for (_, under) in gone.by_parent {
            self.bytes = self.bytes.saturating_sub(under.len() * TRY_BYTES);
            ready
                .consumed
                .extend(under.iter().map(|t| (t.trace_id, t.span_id)));
        }
    }

    fn next_slot(&mut self, now: Instant) -> (Instant, u64) {
        self.sequence += 1;
        (now + self.group_wait, self.sequence)
    }

    /// Notes a span id; false when it is already known.
    fn remember(&mut self, id: (TraceId, SpanId)) -> bool {
        if !self.seen.insert(id) {
            return false;
        }
        self.seen_order.push_back(id);
        while self.seen_order.len() > self.seen_capacity {
            if let Some(old) = self.seen_order.pop_front() {
                self.seen.remove(&old);
            }
        }
        true
    }
}

/// A span id in the seen set: its slot and its place in the eviction order.
const SPAN_ID_SLOT: usize = 48;
