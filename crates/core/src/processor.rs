//! The one processor every driver runs: spans in, rows out.
//!
//! `serve`'s shards, `replay`'s streams, the decision service's consistency tests and the
//! benchmarks all offer span facts to a [`Processor`] and take rows from it, so a request gives
//! the same rows whichever way its spans arrived. A driver owns what is its own: the clock
//! (`now` is always passed in), the write-ahead log's bookkeeping, where rows go.

use std::collections::VecDeque;
use std::time::Instant;

use crate::assemble::{Assembler, AssemblyBounds, Offer, Origins, Ready, Request};
use crate::contract::{SpanFacts, SpanId, TraceId};
use crate::engine::Engine;
use crate::record::AttemptRow;

/// Where a span offered to the processor comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// Received now.
    Live,
    /// Replayed from the write-ahead log at start-up; no completed file holds its row.
    Replayed,
    /// Replayed from the log, and a completed file already holds its row: it completes its
    /// request as context, never as a row again.
    Written,
}

/// What a processor has done since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Spans offered.
    pub spans: u64,
    /// Attempt spans, declared or plain GenAI spans held for inference.
    pub attempts: u64,
    /// Logical request spans.
    pub logical: u64,
    /// Spans offered again (same trace and span id).
    pub duplicates: u64,
    /// Spans that are no attempt: passed through, and HTTP tries (most retry nothing).
    pub passthrough: u64,
    /// Requests evaluated.
    pub requests: u64,
    /// Rows made.
    pub rows: u64,
    /// Requests evaluated early because a pending bound was reached.
    pub evicted: u64,
}

impl Counts {
    /// Two processors' counts as one.
    pub fn add(&mut self, other: Counts) {
        self.spans += other.spans;
        self.attempts += other.attempts;
        self.logical += other.logical;
        self.duplicates += other.duplicates;
        self.passthrough += other.passthrough;
        self.requests += other.requests;
        self.rows += other.rows;
        self.evicted += other.evicted;
    }
}

/// What one [`Processor::evaluate`] call did.
#[derive(Debug, Default)]
pub struct Evaluated {
    pub requests: u64,
    /// Requests evaluated early because a pending bound was reached.
    pub evicted: u64,
    /// Plain GenAI spans that made no row: another instrumentation's span of the same call, or
    /// a late span of a call already written (SPEC §2).
    pub inferred_duplicates: u64,
    /// Attempts of requests some of whose attempts were evaluated before (late retries).
    pub late_attempts: u64,
    /// Model spans, call spans and HTTP tries no longer held (inferred from, or let go).
    pub consumed: Vec<(TraceId, SpanId)>,
    /// Where the spans of `consumed` came from (see [`Origins`]).
    pub consumed_origins: Option<Origins>,
    /// Requests are still ready: the call stopped at its row limit. Call again.
    pub more: bool,
}

/// The assembler and the rules of one stream of spans.
#[derive(Debug)]
pub struct Processor {
    engine: Engine,
    assembler: Assembler,
    /// What the assembler made ready since the last [`Processor::evaluate`].
    ready: Ready,
    /// Requests taken from `ready` and not evaluated yet, in the order they became ready. A
    /// call that stops at its row limit leaves the rest here where they lie: put back into a
    /// vector, every request behind the limit was copied again on each call, quadratic in a
    /// drain of thousands of held traces (BENCHMARKS.md, issue 18, sixteenth pass).
    queue: VecDeque<Request>,
    counts: Counts,
}

/// Past this many slots the ready queue's buffer is let go after a call, so that one burst
/// (a drain at shutdown, a budget evicting) does not hold its memory for good.
const KEPT_READY_CAPACITY: usize = 4096;

impl Processor {
    pub fn new(engine: Engine, assembler: Assembler) -> Processor {
        Processor {
            engine,
            assembler,
            ready: Ready::default(),
            queue: VecDeque::new(),
            counts: Counts::default(),
        }
    }

    /// Takes one span; the requests it makes ready wait for [`Processor::evaluate`].
    pub fn offer(&mut self, span: SpanFacts, now: Instant, arrival: Arrival) -> Offer {
        self.offer_from(span, now, arrival, None)
    }

    /// [`Processor::offer`] of a span from the driver's record `origin`: held with what is
    /// held, so [`Assembler::oldest_origin`], [`Request::origins`] and
    /// [`Evaluated::consumed_origins`] tell the driver which records it still needs.
    pub fn offer_from(
        &mut self,
        span: SpanFacts,
        now: Instant,
        arrival: Arrival,
        origin: Option<u64>,
    ) -> Offer {
        let ready = &mut self.ready;
        let offer = match arrival {
            Arrival::Live => self.assembler.offer_from(span, now, ready, origin),
            Arrival::Replayed => self.assembler.offer_replayed(span, now, ready, origin),
            Arrival::Written => self.assembler.offer_written(span, now, ready, origin),
        };
        let counts = &mut self.counts;
        counts.spans += 1;
        *match offer {
            Offer::Attempt(_) | Offer::Plain => &mut counts.attempts,
            Offer::Logical => &mut counts.logical,
            Offer::Duplicate => &mut counts.duplicates,
            Offer::Passthrough | Offer::HeldTry => &mut counts.passthrough,
        } += 1;
        offer
    }

    /// Makes ready what has waited long enough at `now`.
    pub fn expire(&mut self, now: Instant) {
        self.assembler.expire(now, &mut self.ready);
    }

    /// Makes ready everything pending and held, e.g. at the end of the input or at shutdown.
    pub fn drain_all(&mut self) {
        let drained = self.assembler.drain_all();
        let ready = &mut self.ready;
        // In the order they became ready: what was ready before the drain goes first.
        self.queue.extend(ready.requests.drain(..));
        self.queue.extend(drained.requests);
        ready.evicted += drained.evicted;
        ready.consumed.extend(drained.consumed);
        ready.consumed_origins =
            Origins::widen_optional(ready.consumed_origins, drained.consumed_origins);
        ready.duplicates += drained.duplicates;
    }

    /// Evaluates ready requests in the order they became ready, appending their rows to `rows`,
    /// until none is left or the next request's rows would take `rows` past `row_limit` (a
    /// request alone in `rows` is always taken). A driver that sizes `rows` to `row_limit` then
    /// writes bounded batches into a vector that never grows; [`Evaluated::more`] says to write
    /// the batch and call again. `each` sees every request with the
    /// rows it made (from the index given) before the request is remembered as finished.
    pub fn evaluate(
        &mut self,
        rows: &mut Vec<AttemptRow>,
        row_limit: usize,
        mut each: impl FnMut(&Request, &mut Vec<AttemptRow>, usize),
    ) -> Evaluated {
        let ready = &mut self.ready;
        let mut done = Evaluated {
            evicted: std::mem::take(&mut ready.evicted),
            inferred_duplicates: std::mem::take(&mut ready.duplicates),
            consumed: std::mem::take(&mut ready.consumed),
            consumed_origins: ready.consumed_origins.take(),
            ..Evaluated::default()
        };
        // Both buffers are kept for the next calls: made afresh, they grew by doubling (copying
        // requests of hundreds of bytes) after every call.
        self.queue.extend(ready.requests.drain(..));
        if ready.requests.capacity() > KEPT_READY_CAPACITY {
            ready.requests = Vec::new();
        }
        while let Some(next) = self.queue.front() {
            if !rows.is_empty() && rows.len() + next.attempts.len() > row_limit {
                break;
            }
            let Some(request) = self.queue.pop_front() else {
                break;
            };
            if !request.evaluated.is_empty() {
                done.late_attempts += request.attempts.len() as u64;
            }
            let start = rows.len();
            self.engine.evaluate_into(&request, rows);
            each(&request, rows, start);
            self.counts.rows += (rows.len() - start) as u64;
            done.requests += 1;
            self.assembler.finish(request);
        }
        // Whatever is left stays first in line.
        done.more = !self.queue.is_empty();
        if !done.more && self.queue.capacity() > KEPT_READY_CAPACITY {
            self.queue = VecDeque::new();
        }
        self.counts.requests += done.requests;
        self.counts.evicted += done.evicted;
        done
    }

    /// Whether requests wait for [`Processor::evaluate`].
    pub fn has_ready(&self) -> bool {
        !self.queue.is_empty()
            || !self.ready.requests.is_empty()
            || !self.ready.consumed.is_empty()
            || self.ready.evicted > 0
            || self.ready.duplicates > 0
    }

    /// The rows of a whole input, as a replay of it makes them: every span offered at one
    /// instant, then everything drained. `each` sees every request as it is evaluated.
    pub fn rows_of(
        engine: Engine,
        spans: impl IntoIterator<Item = SpanFacts>,
        now: Instant,
        each: impl FnMut(&Request, &mut Vec<AttemptRow>, usize),
    ) -> Vec<AttemptRow> {
        let mut processor = Processor::new(engine, Assembler::new(&AssemblyBounds::default(), 1));
        for span in spans {
            processor.offer(span, now, Arrival::Live);
        }
        processor.drain_all();
        let mut rows = Vec::new();
        processor.evaluate(&mut rows, usize::MAX, each);
        rows
    }

    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// New pricing and policies: requests evaluated from now on use them.
    pub fn set_engine(&mut self, engine: Engine) {
        self.engine = engine;
    }

    pub fn assembler(&self) -> &Assembler {
        &self.assembler
    }

    /// For recovery: restoring saved finished requests and ending recovery.
    pub fn assembler_mut(&mut self) -> &mut Assembler {
        &mut self.assembler
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::SpanKind;

    /// Attempt `index` of the request in trace `trace`, a child of its logical span.
    fn attempt(trace: u8, index: u8) -> SpanFacts {
        SpanFacts {
            trace_id: [trace; 16],
            span_id: [index + 1; 8],
            parent_span_id: Some([0; 8]),
            kind: SpanKind::Attempt,
            attempt_index: Some(i32::from(index)),
            ..SpanFacts::default()
        }
    }

    /// The logical span of the request in trace `trace`, naming how many attempts it made.
    fn logical(trace: u8, attempts: u32) -> SpanFacts {
        SpanFacts {
            trace_id: [trace; 16],
            span_id: [0; 8],
            kind: SpanKind::LogicalRequest,
            attempt_count: Some(attempts),
            ..SpanFacts::default()
        }
    }

    fn processor() -> Processor {
        Processor::new(
            Engine::default(),
            Assembler::new(&AssemblyBounds::default(), 1),
        )
    }

    fn trace_of(request: &Request) -> u8 {
        request.key.trace_id()[0]
    }

    #[test]
    fn counts_what_it_is_offered_and_evaluates_complete_requests() {
        let mut p = processor();
        let now = Instant::now();
        p.offer(logical(1, 2), now, Arrival::Live);
        p.offer(attempt(1, 0), now, Arrival::Live);
        assert!(!p.has_ready(), "one of two attempts: the request waits");
        p.offer(attempt(1, 1), now, Arrival::Live);
        assert!(p.has_ready());
        p.offer(attempt(1, 1), now, Arrival::Live);
        let mut rows = Vec::new();
        let done = p.evaluate(&mut rows, usize::MAX, |_, _, _| {});
        assert_eq!((done.requests, rows.len(), done.more), (1, 2, false));
        let c = p.counts();
        assert_eq!((c.spans, c.logical, c.attempts, c.duplicates), (4, 1, 2, 1));
        assert_eq!((c.requests, c.rows), (1, 2));
    }

    /// Offers the requests of `traces`, one attempt each and complete on arrival.
    fn offer_complete(p: &mut Processor, traces: std::ops::RangeInclusive<u8>, now: Instant) {
        for trace in traces {
            p.offer(logical(trace, 1), now, Arrival::Live);
            p.offer(attempt(trace, 0), now, Arrival::Live);
        }
    }

    #[test]
    fn stops_at_its_row_limit_and_keeps_the_rest_first_in_line() {
        let mut p = processor();
        let now = Instant::now();
        offer_complete(&mut p, 1..=3, now);
        let mut rows = Vec::new();
        let mut seen = Vec::new();
        let first = p.evaluate(&mut rows, 2, |r, _, _| seen.push(trace_of(r)));
        assert_eq!((first.requests, first.more), (2, true));
        offer_complete(&mut p, 4..=4, now);
        rows.clear();
        let second = p.evaluate(&mut rows, usize::MAX, |r, _, _| seen.push(trace_of(r)));
        assert_eq!((second.requests, second.more), (2, false));
        assert_eq!(seen, [1, 2, 3, 4]);
        assert_eq!(p.counts().requests, 4);
    }

    #[test]
    fn a_drain_queues_behind_what_a_row_limit_left() {
        let mut p = processor();
        let now = Instant::now();
        offer_complete(&mut p, 1..=3, now);
        // Waits for a second attempt that never comes, until the drain.
        p.offer(logical(5, 2), now, Arrival::Live);
        p.offer(attempt(5, 0), now, Arrival::Live);
        let mut rows = Vec::new();
        let mut seen = Vec::new();
        let first = p.evaluate(&mut rows, 1, |r, _, _| seen.push(trace_of(r)));
        assert_eq!((first.requests, first.more), (1, true));
        p.drain_all();
        assert!(p.has_ready());
        let mut calls = 0;
        loop {
            rows.clear();
            calls += 1;
            if !p
                .evaluate(&mut rows, 1, |r, _, _| seen.push(trace_of(r)))
                .more
            {
                break;
            }
        }
        assert_eq!(seen, [1, 2, 3, 5]);
        assert_eq!(calls, 3, "one request a call at a limit of one row");
        assert!(!p.has_ready());
    }

    #[test]
    fn drain_all_makes_every_waiting_request_ready() {
        let now = Instant::now();
        let rows = Processor::rows_of(Engine::default(), [attempt(1, 0)], now, |r, rows, start| {
            assert_eq!((trace_of(r), rows.len() - start), (1, 1));
        });
        assert_eq!(rows.len(), 1);
    }
}
