//! Time and memory bounds for `serve`: when a group is ready to evaluate.
//!
//! A group is ready once its logical span's `attempt_count` attempts have arrived, or when
//! `group_wait` has passed since its latest span, or — to bound memory — when it is the oldest
//! and the pending cap is hit. No clock is read here: callers pass `now`, which keeps this
//! testable without sleeps.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::plain::{PlainHold, PlainOffer};
use super::ticks::Ticks;
use super::{Grouper, Offer, Origins, Place, Request, Summary};
use crate::contract::{SpanFacts, SpanId, SpanKind, TraceId};

/// The bounds of every assembler of a process together (`[processors.retry_spend]`); each of
/// `shards` assemblers holds its share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AssemblyBounds {
    /// How long a request waits for missing spans after its latest span arrived.
    pub group_wait: Duration,
    /// Requests buffered while waiting.
    pub max_pending_requests: usize,
    /// Recently evaluated requests remembered so a late duplicate span is not a new request.
    pub finished_cache_requests: usize,
    /// Estimated bytes of pending requests, waiting logical spans and the finished-request
    /// cache together. Over it, the finished cache gives up its oldest entries first (down to a
    /// quarter of the budget), then the oldest pending requests are evaluated early.
    pub max_pending_bytes: u64,
}

impl Default for AssemblyBounds {
    fn default() -> Self {
        AssemblyBounds {
            group_wait: Duration::from_secs(10),
            max_pending_requests: 100_000,
            finished_cache_requests: 50_000,
            max_pending_bytes: 32 << 20,
        }
    }
}

/// One assembler's share of the [`AssemblyBounds`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ShardBounds {
    group_wait: Duration,
    max_pending_requests: usize,
    finished_cache_requests: usize,
    max_pending_bytes: usize,
}

impl ShardBounds {
    fn of(bounds: &AssemblyBounds, shards: usize) -> ShardBounds {
        let shards = shards.max(1);
        ShardBounds {
            group_wait: bounds.group_wait,
            max_pending_requests: bounds.max_pending_requests.div_ceil(shards),
            finished_cache_requests: bounds.finished_cache_requests.div_ceil(shards),
            max_pending_bytes: usize::try_from(bounds.max_pending_bytes / shards as u64)
                .unwrap_or(usize::MAX),
        }
    }
}

/// When a pending group's wait ends (see [`Assembler`]'s `deadlines`).
#[derive(Debug)]
struct Deadline {
    /// A [`Ticks`] time: nearly every request queues one, and an `Instant` is twice as large.
    at: u64,
    seq: u64,
    /// Where the group was; its sequence number says whether it still is.
    place: Place,
}

/// Stale deadline entries tolerated beyond four per pending group before a sweep.
const STALE_DEADLINES_SWEPT: usize = 1024;

/// Requests ready for the rules, and why.
#[derive(Debug, Default)]
pub struct Ready {
    pub requests: Vec<Request>,
    /// How many of them were evaluated early because the pending cap was hit.
    pub evicted: u64,
    /// Model spans, call spans and HTTP tries no longer held (inferred, or let go): those that
    /// made no row are forwarded as they are.
    pub consumed: Vec<(TraceId, SpanId)>,
    /// Model spans that made no row: another instrumentation's span of the same call, or a late
    /// span of a call already written (SPEC §2).
    pub duplicates: u64,
    /// Where the spans in `consumed` came from (see [`Origins`]).
    pub consumed_origins: Option<Origins>,
}

#[derive(Debug)]
pub struct Assembler {
    grouper: Grouper,
    /// Plain GenAI spans and HTTP tries waiting for inference.
    plain: PlainHold,
    options: ShardBounds,
    /// Pending groups in the order their wait ends. Every span that touches a group appends
    /// an entry (`now` never goes back and `group_wait` is fixed, so appending keeps the order),
    /// unless the last entry names the same group at the same time and takes the new sequence
    /// number instead; an entry whose sequence number is no longer its group's latest is stale
    /// and skipped. A queue, not an ordered map: touching a group is one push, not a removal
    /// and an insert.
    deadlines: VecDeque<Deadline>,
    /// Logical spans in arrival order, so ones whose attempts never come are let go.
    logical_arrivals: VecDeque<(u64, TraceId, SpanId)>,
    sequence: u64,
    ticks: Ticks,
}

impl Assembler {
    /// The assembler of one of `shards` pipeline shards, each holding its share of `bounds`.
    pub fn new(bounds: &AssemblyBounds, shards: usize) -> Assembler {
        let options = ShardBounds::of(bounds, shards);
        Assembler {
            grouper: Grouper::with_finished_capacity(options.finished_cache_requests),
            plain: PlainHold::new(options.group_wait, options.finished_cache_requests),
            options,
            deadlines: VecDeque::new(),
            logical_arrivals: VecDeque::new(),
            sequence: 0,
            ticks: Ticks::default(),
        }
    }

    /// Takes one span; returns what became of it and any requests it made ready.
    pub fn offer(&mut self, span: SpanFacts, now: Instant, ready: &mut Ready) -> Offer {
        self.offer_as(span, now, ready, false, None)
    }

    /// [`Assembler::offer`] of a span from the driver's record `origin` (see [`Origins`]).
    pub fn offer_from(
        &mut self,
        span: SpanFacts,
        now: Instant,
        ready: &mut Ready,
        origin: Option<u64>,
    ) -> Offer {
        self.offer_as(span, now, ready, false, origin)
    }

    /// [`Assembler::offer_from`] for an attempt replayed from the write-ahead log whose row a
    /// completed file already holds: it completes its request as context, never as a row.
    pub fn offer_written(
        &mut self,
        span: SpanFacts,
        now: Instant,
        ready: &mut Ready,
        origin: Option<u64>,
    ) -> Offer {
        self.offer_as(span, now, ready, true, origin)
    }

    fn offer_as(
        &mut self,
        span: SpanFacts,
        now: Instant,
        ready: &mut Ready,
        written: bool,
        origin: Option<u64>,
    ) -> Offer {
        // A row written before a restart is recognised by the worker, which drops it when
        // inference makes it again; inference itself needs every span of the trace.
        match span.kind {
            SpanKind::SingleAttempt | SpanKind::CallSpan | SpanKind::HttpTry => {
                // A try with no parent can be no call's: nothing to infer from it.
                if span.kind == SpanKind::HttpTry && span.parent_span_id.is_none() {
                    self.plain.note_link(&span, now);
                    return Offer::Passthrough;
                }
                let model = span.kind == SpanKind::SingleAttempt;
                let offer = self.plain.offer(span, now, origin);
                self.enforce_cap(ready);
                return match offer {
                    PlainOffer::Duplicate => Offer::Duplicate,
                    PlainOffer::Held if model => Offer::Plain,
                    PlainOffer::Held => Offer::HeldTry,
                };
            }
            _ => self.plain.note_link(&span, now),
        }
        let logical_keys = (span.kind == SpanKind::LogicalRequest).then(|| {
            (
                Grouper::keys_for_logical(&span),
                span.trace_id,
                span.span_id,
            )
        });
        // An attempt's group takes this deadline in the same lookup that adds the attempt.
        let seq = self.sequence + 1;
        let offered = if written {
            self.grouper.offer_written_touching(span, origin, Some(seq))
        } else {
            self.grouper.offer_touching(span, origin, Some(seq))
        };
        match (&offered.offer, offered.place) {
            (Offer::Attempt(_), Some(place)) => {
                self.sequence = seq;
                if offered.complete {
                    // Taken now: its deadline would only be a stale entry, looked up in vain
                    // (a cold miss) when it came due.
                    self.take(place, ready);
                } else {
                    self.push_deadline(place, seq, now);
                }
                self.enforce_cap(ready);
            }
            (Offer::Attempt(_), None) => self.enforce_cap(ready),
            (Offer::Logical, _) => {
                if let Some((keys, trace_id, span_id)) = logical_keys {
                    if offered.waiting {
                        let arrived = self.ticks.of(now);
                        self.logical_arrivals
                            .push_back((arrived, trace_id, span_id));
                    }
                    for key in keys.iter() {
                        if let Some(place) = self.grouper.place_of(key) {
                            self.touch(place, now);
                            self.take_if_complete(place, ready);
                        }
                    }
                }
                self.enforce_cap(ready);
            }
            (Offer::Duplicate | Offer::Passthrough | Offer::Plain | Offer::HeldTry, _) => {}
        }
        offered.offer
    }

    /// Groups whose wait has passed; logical spans that waited as long for attempts in vain are
    /// let go.
    pub fn expire(&mut self, now: Instant, ready: &mut Ready) {
        self.plain.expire(now, ready);
        let now_ticks = self.ticks.peek(now);
        let wait = Ticks::nanos(self.options.group_wait);
        // Stale entries at the front go too, due or not, so the next deadline is a live one.
        while let Some(front) = self.deadlines.front() {
            let live = self.grouper.is_deadline_of(front.place, front.seq);
            if live && front.at > now_ticks {
                break;
            }
            if let Some(due) = self.deadlines.pop_front() {
                if live {
                    self.take(due.place, ready);
                }
            }
        }
        while let Some(&(arrived, trace_id, span_id)) = self.logical_arrivals.front() {
            if arrived.saturating_add(wait) > now_ticks {
                break;
            }
            self.logical_arrivals.pop_front();
            let waited_for = self.grouper.keys_for_logical_ids(trace_id, span_id);
            if !waited_for.iter().any(|k| self.grouper.has_group(k)) {
                self.grouper.forget_logical(trace_id, span_id);
            }
        }
    }

    /// Every pending group and held plain span, e.g. at shutdown.
    pub fn drain_all(&mut self) -> Ready {
        self.deadlines.clear();
        self.logical_arrivals.clear();
        let mut ready = Ready {
            requests: self.grouper.drain_all(),
            ..Ready::default()
        };
        self.plain.drain_all(&mut ready);
        ready
    }

    /// Remembers an evaluated request for late retries and re-sent spans (see
    /// [`Grouper::finish`]).
    pub fn finish(&mut self, request: Request) {
        // Inferred requests are remembered by trace (see [`PlainHold`]): no late attempt joins
        // them through the grouper.
        if request.attempt_source == crate::record::AttemptSource::Declared {
            self.grouper.finish(request);
        }
        // The finished caches keep at most half the budget even when nothing is pending: with
        // `attempt_count` set nothing waits, and a cache filling the whole budget was most of
        // the process's memory; the other half stays for requests that do wait.
        while self.finished_bytes() > self.options.max_pending_bytes / 2 && self.evict_finished() {}
    }

    /// [`Assembler::offer`] for a span replayed from the write-ahead log whose row no
    /// completed file holds: an attempt restored as finished context needs its row again.
    pub fn offer_replayed(
        &mut self,
        span: SpanFacts,
        now: Instant,
        ready: &mut Ready,
        origin: Option<u64>,
    ) -> Offer {
        self.grouper.unfinish_restored(&span);
        self.offer_from(span, now, ready, origin)
    }

    /// The oldest record (see [`Origins`]) anything still held came from: pending groups,
    /// waiting logical spans and spans held for inference.
    pub fn oldest_origin(&self) -> Option<u64> {
        match (self.grouper.oldest_origin(), self.plain.oldest_origin()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Takes back finished requests saved before a restart, oldest first, before the log is
    /// replayed. Over the byte budget the oldest are forgotten, as they would have been.
    pub fn restore(&mut self, summaries: Vec<Summary>) {
        for summary in summaries {
            self.grouper.restore(summary);
            while self.over_budget() && self.grouper.evict_finished() {}
        }
    }

    /// The write-ahead log has been replayed (see [`Grouper::end_recovery`]).
    pub fn end_recovery(&mut self) {
        self.grouper.end_recovery();
    }

    /// How many times the finished cache has changed (see [`Grouper::finished_changes`]).
    pub fn finished_changes(&self) -> u64 {
        self.grouper.finished_changes()
    }

    /// The finished cache as a summaries file (see [`Grouper::encode_finished`]).
    pub fn encode_finished(&self) -> crate::assemble::summary::Encoded {
        self.grouper.encode_finished()
    }

    /// Whether this logical span is still waiting for its attempts.
    pub fn holds_logical(&self, trace_id: TraceId, span_id: SpanId) -> bool {
        self.grouper.holds_logical(trace_id, span_id)
    }

    pub fn pending_requests(&self) -> usize {
        self.grouper.pending_groups() + self.plain.pending_traces()
    }

    /// The earliest time a pending group or plain run becomes ready by waiting. It may be
    /// early (a group taken since leaves its entry until then), never late.
    pub fn next_deadline(&self) -> Option<Instant> {
        let groups = self
            .deadlines
            .front()
            .and_then(|d| self.ticks.instant(d.at));
        match (groups, self.plain.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn touch(&mut self, place: Place, now: Instant) {
        self.sequence += 1;
        self.grouper.set_deadline_seq(place, self.sequence);
        self.push_deadline(place, self.sequence, now);
    }

    /// Queues the deadline `seq` of the pending group at `place`, whose wait starts `now`.
    fn push_deadline(&mut self, place: Place, seq: u64, now: Instant) {
        // A caller whose clock went back would break the order: its deadline waits for the
        // latest one instead.
        let at = self
            .ticks
            .of(now)
            .saturating_add(Ticks::nanos(self.options.group_wait));
        let at = self.deadlines.back().map_or(at, |last| last.at.max(at));
        if let Some(last) = self.deadlines.back_mut() {
            if last.place == place && last.at == at {
                // The same group touched again at the same time (the attempts and logical span
                // of one request in one export): the entry pushed would come due with the last
                // and leave it stale, so the last takes its sequence number instead.
                last.seq = seq;
                return;
            }
        }
        self.deadlines.push_back(Deadline { at, seq, place });
        // Stale entries leave from the front as time passes; `replay`'s time stands still, so
        // past four times the live ones they are swept here: at most about one lookup per push.
        if self.deadlines.len() > 4 * self.grouper.pending_groups() + STALE_DEADLINES_SWEPT {
            let grouper = &self.grouper;
            self.deadlines
                .retain(|d| grouper.is_deadline_of(d.place, d.seq));
        }
    }

    /// The group whose wait ends first, no longer waiting.
    fn pop_oldest(&mut self) -> Option<Place> {
        while let Some(entry) = self.deadlines.pop_front() {
            if self.grouper.is_deadline_of(entry.place, entry.seq) {
                return Some(entry.place);
            }
        }
        None
    }

    fn take_if_complete(&mut self, place: Place, ready: &mut Ready) {
        if self.grouper.is_complete_at(place) {
            self.take(place, ready);
        }
    }

    fn take(&mut self, place: Place, ready: &mut Ready) {
        if let Some(request) = self.grouper.take_at(place) {
            ready.requests.push(request);
        }
    }

    fn over_budget(&self) -> bool {
        self.held_bytes() > self.options.max_pending_bytes
    }

    /// Estimated bytes held: pending requests, waiting logical spans and held plain spans, and
    /// the finished-request cache.
    pub fn held_bytes(&self) -> usize {
        self.grouper.pending_bytes()
            + self.grouper.finished_bytes()
            + self.plain.held_bytes()
            + self.plain.finished_bytes()
    }

    fn finished_bytes(&self) -> usize {
        self.grouper.finished_bytes() + self.plain.finished_bytes()
    }

    /// Estimated bytes of what waits: pending requests, waiting logical spans, held plain spans.
    fn pending_part(&self) -> usize {
        self.grouper.pending_bytes() + self.plain.held_bytes()
    }

    /// Forgets the oldest finished request, or inferred trace, whichever cache is larger.
    fn evict_finished(&mut self) -> bool {
        let plain_first = self.plain.finished_bytes() > self.grouper.finished_bytes();
        (plain_first && self.plain.evict_finished())
            || self.grouper.evict_finished()
            || self.plain.evict_finished()
    }

    /// Lets go of the logical span that arrived first and is still waiting for attempts; false
    /// when none waits. Its attempts, if they come, are judged without it.
    fn forget_oldest_logical(&mut self) -> bool {
        while let Some((_, trace_id, span_id)) = self.logical_arrivals.pop_front() {
            if self.grouper.forget_logical(trace_id, span_id) {
                return true;
            }
        }
        false
    }

    fn enforce_cap(&mut self, ready: &mut Ready) {
        loop {
            let over_count = self.grouper.pending_groups() > self.options.max_pending_requests;
            let over_total = self.over_budget();
            // Requests waiting get three quarters of the budget whatever the finished cache
            // holds. Against the budget left beside the cache, a request evaluated early made
            // room only until its finished entry, about as large as the pending request once
            // pending requests were packed, took that room back: each took more early, and the
            // first crossing of the budget evaluated thousands at once (BENCHMARKS.md, issue
            // 18, seventeenth pass).
            let over_pending = self.pending_part() > self.options.max_pending_bytes / 4 * 3;
            if !over_count && !over_total && !over_pending {
                break;
            }
            // Forgetting finished requests costs only late retries their context; evaluating
            // pending ones early can cost a request its later attempts. Forget first.
            if !over_count
                && over_total
                && self.finished_bytes() > self.options.max_pending_bytes / 4
                && self.evict_finished()
            {
                continue;
            }
            if !over_count
                && self.plain.held_bytes() > self.grouper.pending_bytes()
                && self.plain.evict_oldest(ready)
            {
                continue;
            }
            let Some(place) = self.pop_oldest() else {
                // Nothing pending to evaluate: what is left is held for inference, or logical
                // spans whose attempts have not come (`replay` never lets time pass, so only
                // the budget lets them go).
                if self.plain.evict_oldest(ready) || (!over_count && self.forget_oldest_logical()) {
                    continue;
                }
                break;
            };
            if let Some(request) = self.grouper.take_at(place) {
                ready.requests.push(request);
                ready.evicted += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests;
