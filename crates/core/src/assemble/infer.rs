//! Attempts inferred from plain instrumentation (SPEC §2).
//!
//! Today's instrumentations write GenAI spans and no `retry_spend.*` attributes, but retries
//! still show: HTTP tries under or beside a model span (an SDK's own retry loop), a resend count
//! on the model span itself, nests of model spans (a framework around an SDK), two
//! instrumentations of one call, Vercel AI SDK call spans around their tries, and runs of failed
//! calls under one parent (an application's retry loop, a router's fallback). [`infer_trace`]
//! applies §2's six steps to every span of one trace at once and returns [`Request`]s whose
//! attempts carry explicit indices, so the rules judge them like declared ones.
//!
//! The function is pure: `replay` gives it a whole input's trace, `serve` a trace once
//! `group_wait` has passed since its latest span, and both get the same requests.

use std::collections::HashMap;

use super::{FastMap, FastSet, GroupKey, Request};
use crate::contract::{attr, Count, HttpTry, SpanFacts, SpanId, SpanKind, TraceId, UsageOrigin};
use crate::record::AttemptSource;

/// One span's place in its trace: what inference needs of every span, whatever its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    pub span_id: SpanId,
    pub parent: Option<SpanId>,
    /// The span carries `retry_spend.span.role`, `request.id` or `attempt.index`.
    pub declared: bool,
}

impl Link {
    pub fn of(span: &SpanFacts) -> Link {
        Link {
            span_id: span.span_id,
            parent: span.parent_span_id,
            declared: span.declared,
        }
    }
}

/// Everything of one trace inference reads: its model spans, call spans and HTTP tries in
/// full, and every span's link.
#[derive(Debug, Clone, Default)]
pub struct TraceSpans {
    pub models: Vec<SpanFacts>,
    pub calls: Vec<SpanFacts>,
    pub tries: Vec<HttpTry>,
    pub links: Vec<Link>,
}

impl TraceSpans {
    /// Takes one span of the trace; a span id seen before is the caller's to filter.
    pub fn push(&mut self, span: SpanFacts) {
        self.links.push(Link::of(&span));
        self.push_unlinked(span);
    }

    /// [`TraceSpans::push`] for a caller that keeps the span's link itself.
    pub fn push_unlinked(&mut self, span: SpanFacts) {
        match span.kind {
            SpanKind::SingleAttempt => self.models.push(span),
            SpanKind::CallSpan => self.calls.push(span),
            SpanKind::HttpTry => {
                if let Some(t) = HttpTry::of(&span) {
                    self.tries.push(t);
                }
            }
            _ => {}
        }
    }

    /// Whether anything here can make a row: a trace of declared and other spans alone only
    /// needs its links kept.
    pub fn inferable(&self) -> bool {
        !self.models.is_empty()
    }
}

/// A call that made rows, as a later span of its trace is checked against (step 3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallSignature {
    pub parent: Option<SpanId>,
    pub model: Option<crate::contract::Symbol>,
    pub start: u64,
    pub end: u64,
    pub scope: Option<crate::contract::Symbol>,
}

impl CallSignature {
    fn of(span: &SpanFacts) -> CallSignature {
        CallSignature {
            parent: span.parent_span_id,
            model: span.request_model.clone(),
            start: span.start_time_unix_nano,
            end: span.end_time_unix_nano,
            scope: span.scope.clone(),
        }
    }

    /// Step 3: same parent, same requested model, overlapping windows, another scope.
    fn duplicates(&self, other: &CallSignature) -> bool {
        self.parent == other.parent
            && self.model == other.model
            && self.start <= other.end
            && other.start <= self.end
            && self.scope != other.scope
    }
}

/// What a trace inferred before tells the judgement of its late spans.
#[derive(Debug, Clone, Default)]
pub struct EarlierTrace {
    /// Links of the spans seen before, and which of them were model spans.
    pub links: FastMap<SpanId, (Link, bool)>,
    /// The calls that made rows.
    pub calls: Vec<CallSignature>,
}

/// What inference made of one trace.
#[derive(Debug, Default)]
pub struct Inferred {
    pub requests: Vec<Request>,
    /// Model spans that make no row: duplicates of another instrumentation's span of the same
    /// call, or late spans of a nest or of a call that made rows.
    pub duplicates: usize,
    /// The calls whose attempts are in `requests`, for late spans of the trace.
    pub calls: Vec<CallSignature>,
}

/// The tries step 2 found for a call.
#[derive(Debug, Clone)]
enum Tries {
    /// Fewer than two: the call is one attempt.
    None,
    /// Step 2a or 2b: two or more HTTP tries (indices into `TraceSpans::tries`).
    Spans(Vec<usize>),
    /// Step 2c: `resend_count` + 1 tries, all but the last without a span of their own.
    Resent(u32),
}

impl Tries {
    fn two_or_more(&self) -> bool {
        !matches!(self, Tries::None)
    }
}

/// One call: a nest of model spans (indices into `TraceSpans::models`) under its outer span.
#[derive(Debug)]
struct Call {
    outer: usize,
    /// Every span of the nest with its depth below the outer span (the outer span at 0), in
    /// outermost-first order.
    nest: Vec<(usize, u32)>,
    /// For each span of the nest, the nest spans enclosing it, nearest first.
    enclosing: FastMap<usize, Vec<usize>>,
    tries: Tries,
}

/// An element of a run (step 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Element {
    Call(usize),
    CallSpan(usize),
}

/// Applies SPEC §2's steps to the spans of one trace. `earlier`, when the trace was inferred
/// before, makes every call here a late one: judged alone by steps 2a and 2c, never part of a
/// run, and making no row when it lies in a nest seen before or duplicates a call that made
/// rows.
pub fn infer_trace(
    trace_id: TraceId,
    spans: TraceSpans,
    earlier: Option<&EarlierTrace>,
) -> Inferred {
    let TraceSpans {
        models,
        calls: call_spans,
        tries,
        links,
    } = spans;
    let mut out = Inferred::default();
    if models.is_empty() {
        return out;
    }
    let graph = Graph::new(&links, earlier);
    let model_index: FastMap<SpanId, usize> = models
        .iter()
        .enumerate()
        .map(|(i, m)| (m.span_id, i))
        .collect();

    // Scope: declared spans, everything below them, and model spans above them stay out.
    let above_declared = graph.above_declared();
    let takes_part: Vec<bool> = models
        .iter()
        .map(|m| !graph.at_or_below_declared(m.span_id) && !above_declared.contains(&m.span_id))
        .collect();

    // Step 1: nests. A late model span above or below a model span seen before lies in a nest
    // whose call was inferred then: it makes no row.
    let above_old_model = graph.above_earlier_models();
    let mut nests: FastMap<usize, Vec<(usize, u32, Vec<usize>)>> = FastMap::default();
    let mut late_in_old_nest = 0;
    for (i, m) in models.iter().enumerate() {
        if !takes_part[i] {
            continue;
        }
        let mut outer = (i, 0u32);
        let mut enclosing = Vec::new();
        let mut in_old_nest = above_old_model.contains(&m.span_id);
        for (depth, ancestor) in graph.ancestors(m.span_id).enumerate() {
            let depth = u32::try_from(depth + 1).unwrap_or(u32::MAX);
            match model_index.get(&ancestor) {
                Some(&a) if takes_part[a] => {
                    outer = (a, depth);
                    enclosing.push(a);
                }
                _ => in_old_nest |= graph.was_model(ancestor),
            }
        }
        if in_old_nest {
            late_in_old_nest += 1;
            continue;
        }
        nests
            .entry(outer.0)
            .or_default()
            .push((i, outer.1, enclosing));
    }
    let mut calls: Vec<Call> = nests
        .into_iter()
        .map(|(outer, members)| {
            let mut nest = Vec::with_capacity(members.len());
            let mut enclosing = FastMap::default();
            for (i, depth, above) in members {
                nest.push((i, depth));
                enclosing.insert(i, above);
            }
            nest.sort_by_key(|&(i, depth)| {
                (depth, models[i].start_time_unix_nano, models[i].span_id)
            });
            Call {
                outer,
                nest,
                enclosing,
                tries: Tries::None,
            }
        })
        .collect();
    calls.sort_by_key(|c| {
        (
            models[c.outer].start_time_unix_nano,
            models[c.outer].span_id,
        )
    });
    // Spans of an old nest make no row, nor do their nests' inner spans here.
    out.duplicates += late_in_old_nest;

    // Step 2: tries of every call, duplicates included.
    let usable_try: Vec<bool> = tries
        .iter()
        .map(|t| !graph.at_or_below_declared(t.span_id))
        .collect();
    let mut children: FastMap<SpanId, Vec<usize>> = FastMap::default();
    for (i, t) in tries.iter().enumerate() {
        if let (true, Some(parent)) = (usable_try[i], t.parent_span_id) {
            children.entry(parent).or_default().push(i);
        }
    }
    let beside = if earlier.is_some() {
        HashMap::new()
    } else {
        tries_beside(&models, &calls, &tries, &usable_try)
    };
    for (c, call) in calls.iter_mut().enumerate() {
        let under: Vec<usize> = call
            .nest
            .iter()
            .flat_map(|&(i, _)| children.get(&models[i].span_id).into_iter().flatten())
            .copied()
            .collect();
        call.tries = if under.len() >= 2 {
            Tries::Spans(under)
        } else if let Some(b) = beside.get(&c).filter(|b| b.len() >= 2) {
            Tries::Spans(b.clone())
        } else {
            let resent = std::iter::once(call.outer)
                .chain(call.nest.iter().map(|&(i, _)| i))
                .find_map(|i| models[i].resend_count)
                .and_then(|n| u32::try_from(n).ok())
                .filter(|&n| n >= 1);
            resent.map_or(Tries::None, Tries::Resent)
        };
    }

    // Step 3: duplicates.
    let kept = kept_calls(&models, &calls);
    let mut dropped = 0;
    for (c, call) in calls.iter().enumerate() {
        if !kept[c] {
            dropped += call.nest.len();
        }
    }
    out.duplicates += dropped;

    if let Some(earlier) = earlier {
        // Late calls: alone, unless they duplicate a call that made rows.
        for (c, call) in calls.iter().enumerate() {
            if !kept[c] {
                continue;
            }
            let outer = &models[call.outer];
            let signature = CallSignature::of(outer);
            if earlier.calls.iter().any(|old| old.duplicates(&signature)) {
                out.duplicates += call.nest.len();
                continue;
            }
            out.calls.push(signature);
            out.requests
                .push(alone_request(trace_id, call, &models, &tries));
        }
        finish(&mut out);
        return out;
    }

    // Step 4: call spans that are elements (outside nests, with a model span below them).
    // Every span of a nest takes part, so "inside a nest" is "below a model span taking part".
    let model_ids: FastSet<SpanId> = models
        .iter()
        .enumerate()
        .filter(|&(i, _)| takes_part[i])
        .map(|(_, m)| m.span_id)
        .collect();
    let mut with_model_below: FastSet<SpanId> = FastSet::default();
    for id in &model_ids {
        for ancestor in graph.ancestors(*id) {
            if !with_model_below.insert(ancestor) {
                break;
            }
        }
    }
    let element_call_spans: Vec<usize> = call_spans
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            with_model_below.contains(&s.span_id)
                && !graph.at_or_below_declared(s.span_id)
                && !graph.ancestors(s.span_id).any(|a| model_ids.contains(&a))
        })
        .map(|(i, _)| i)
        .collect();

    // Step 5: runs under every parent.
    let mut by_parent: FastMap<SpanId, Vec<Element>> = FastMap::default();
    let mut roots: Vec<Element> = Vec::new();
    let start_of = |e: Element| match e {
        Element::Call(c) => (
            models[calls[c].outer].start_time_unix_nano,
            models[calls[c].outer].span_id,
        ),
        Element::CallSpan(s) => (call_spans[s].start_time_unix_nano, call_spans[s].span_id),
    };
    let parent_of = |e: Element| match e {
        Element::Call(c) => models[calls[c].outer].parent_span_id,
        Element::CallSpan(s) => call_spans[s].parent_span_id,
    };
    let elements = (0..calls.len())
        .filter(|&c| kept[c])
        .map(Element::Call)
        .chain(element_call_spans.iter().map(|&s| Element::CallSpan(s)));
    for e in elements {
        match parent_of(e) {
            Some(p) => by_parent.entry(p).or_default().push(e),
            None => roots.push(e),
        }
    }
    let failed = |e: Element| match e {
        Element::Call(c) => models[calls[c].outer].failed,
        Element::CallSpan(s) => call_spans[s].status_error,
    };
    let mut runs: FastMap<SpanId, Vec<Vec<Element>>> = FastMap::default();
    for (parent, mut elements) in by_parent {
        elements.sort_by_key(|&e| start_of(e));
        let mut list: Vec<Vec<Element>> = Vec::new();
        let mut previous_failed = false;
        for e in elements {
            match list.last_mut() {
                Some(run) if previous_failed => run.push(e),
                _ => list.push(vec![e]),
            }
            previous_failed = failed(e);
        }
        runs.insert(parent, list);
    }
    roots.sort_by_key(|&e| start_of(e));

    // A call span in a run of two or more contributes its last run of children, which then
    // makes no request of its own; so does every call span inside a run contributed so.
    let mut absorbed: FastSet<SpanId> = FastSet::default();
    let mut stack: Vec<SpanId> = Vec::new();
    for list in runs.values() {
        for run in list.iter().filter(|r| r.len() >= 2) {
            for e in run {
                if let Element::CallSpan(s) = e {
                    stack.push(call_spans[*s].span_id);
                }
            }
        }
    }
    while let Some(id) = stack.pop() {
        if !absorbed.insert(id) {
            continue;
        }
        if let Some(last) = runs.get(&id).and_then(|l| l.last()) {
            for e in last {
                if let Element::CallSpan(s) = e {
                    stack.push(call_spans[*s].span_id);
                }
            }
        }
    }

    let builder = Builder {
        trace_id,
        models: &models,
        calls: &calls,
        call_spans: &call_spans,
        tries: &tries,
        runs: &runs,
    };
    let mut standing: Vec<&Vec<Element>> = Vec::new();
    let root_runs: Vec<Vec<Element>> = roots.into_iter().map(|e| vec![e]).collect();
    for (parent, list) in &runs {
        for (i, run) in list.iter().enumerate() {
            let is_last = i + 1 == list.len();
            if is_last && absorbed.contains(parent) {
                continue;
            }
            standing.push(run);
        }
    }
    standing.extend(root_runs.iter());
    for run in standing {
        if let Some(request) = builder.request_of_run(run) {
            out.requests.push(request);
        }
    }
    out.calls = calls
        .iter()
        .enumerate()
        .filter(|&(c, _)| kept[c])
        .map(|(_, call)| CallSignature::of(&models[call.outer]))
        .collect();
    finish(&mut out);
    out
}

/// Step 6 for every request, then requests in key order: the output does not depend on the
/// order spans came in.
fn finish(out: &mut Inferred) {
    for request in &mut out.requests {
        borrow_usage(&mut request.attempts);
    }
    out.requests.sort_by(|a, b| a.key.cmp(&b.key));
}

/// Step 2b: HTTP tries beside each call's outer span, each given to the call that qualifies
/// and started last.
fn tries_beside(
    models: &[SpanFacts],
    calls: &[Call],
    tries: &[HttpTry],
    usable: &[bool],
) -> HashMap<usize, Vec<usize>> {
    let mut by_parent: FastMap<SpanId, Vec<usize>> = FastMap::default();
    for (c, call) in calls.iter().enumerate() {
        if let Some(parent) = models[call.outer].parent_span_id {
            by_parent.entry(parent).or_default().push(c);
        }
    }
    let mut found: HashMap<usize, Vec<usize>> = HashMap::new();
    for (t, try_) in tries.iter().enumerate() {
        if !usable[t] {
            continue;
        }
        let Some(candidates) = try_.parent_span_id.and_then(|p| by_parent.get(&p)) else {
            continue;
        };
        let winner = candidates
            .iter()
            .copied()
            .filter(|&c| {
                let outer = &models[calls[c].outer];
                let inside = outer.start_time_unix_nano <= try_.start_time_unix_nano
                    && try_.start_time_unix_nano <= outer.end_time_unix_nano;
                let same_host = match &outer.server_address {
                    Some(address) => try_.host.as_deref() == Some(&**address),
                    None => true,
                };
                inside && same_host
            })
            .max_by_key(|&c| {
                let outer = &models[calls[c].outer];
                (outer.start_time_unix_nano, outer.span_id)
            });
        if let Some(c) = winner {
            found.entry(c).or_default().push(t);
        }
    }
    found
}

/// Step 3: which calls are kept (`false`: a duplicate of another instrumentation's span).
/// `calls` are in (start, span id) order.
fn kept_calls(models: &[SpanFacts], calls: &[Call]) -> Vec<bool> {
    let signatures: Vec<CallSignature> = calls
        .iter()
        .map(|c| CallSignature::of(&models[c.outer]))
        .collect();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for c in 0..calls.len() {
        let joined = groups.iter_mut().find(|group| {
            group
                .iter()
                .all(|&member| signatures[member].duplicates(&signatures[c]))
        });
        match joined {
            Some(group) => group.push(c),
            None => groups.push(vec![c]),
        }
    }
    let mut kept = vec![false; calls.len()];
    for group in groups {
        let with_tries: Vec<usize> = group
            .iter()
            .copied()
            .filter(|&c| calls[c].tries.two_or_more())
            .collect();
        // Members are in (start, span id) order: the first is the one that starts first.
        let keep = match with_tries.as_slice() {
            [only] => *only,
            _ => group[0],
        };
        kept[keep] = true;
    }
    kept
}

/// The parent links of a trace, with the spans of an earlier inference of it.
struct Graph<'a> {
    parent: FastMap<SpanId, Option<SpanId>>,
    declared: FastSet<SpanId>,
    earlier: Option<&'a EarlierTrace>,
}

impl<'a> Graph<'a> {
    fn new(links: &[Link], earlier: Option<&'a EarlierTrace>) -> Graph<'a> {
        let mut parent = FastMap::default();
        let mut declared = FastSet::default();
        for link in links {
            parent.entry(link.span_id).or_insert(link.parent);
            if link.declared {
                declared.insert(link.span_id);
            }
        }
        Graph {
            parent,
            declared,
            earlier,
        }
    }

    fn link(&self, id: SpanId) -> Option<(Option<SpanId>, bool)> {
        if let Some(&parent) = self.parent.get(&id) {
            return Some((parent, self.declared.contains(&id)));
        }
        let (link, _) = self.earlier?.links.get(&id)?;
        Some((link.parent, link.declared))
    }

    /// A span seen by an earlier inference of the trace as a model span.
    fn was_model(&self, id: SpanId) -> bool {
        self.earlier
            .and_then(|e| e.links.get(&id))
            .is_some_and(|&(_, model)| model)
    }

    /// The known ancestors of a span, nearest first; stops at a span not seen, and at a cycle
    /// (a client can send any ids).
    fn ancestors(&self, id: SpanId) -> impl Iterator<Item = SpanId> + '_ {
        let limit = self.parent.len() + self.earlier.map_or(0, |e| e.links.len()) + 1;
        let mut current = self.link(id).and_then(|(p, _)| p);
        let mut steps = 0;
        std::iter::from_fn(move || {
            let next = current?;
            steps += 1;
            if steps > limit || next == id {
                return None;
            }
            let id = next;
            current = self.link(id).and_then(|(p, _)| p);
            Some(id)
        })
    }

    fn at_or_below_declared(&self, id: SpanId) -> bool {
        self.link(id).is_some_and(|(_, declared)| declared)
            || self
                .ancestors(id)
                .any(|a| self.link(a).is_some_and(|(_, declared)| declared))
    }

    /// Every span with a model span of the earlier inference below it.
    fn above_earlier_models(&self) -> FastSet<SpanId> {
        let mut above = FastSet::default();
        let Some(earlier) = self.earlier else {
            return above;
        };
        for (id, _) in earlier.links.iter().filter(|(_, &(_, model))| model) {
            for ancestor in self.ancestors(*id) {
                if !above.insert(ancestor) {
                    break;
                }
            }
        }
        above
    }

    /// Every span with a declared span below it.
    fn above_declared(&self) -> FastSet<SpanId> {
        let mut above = FastSet::default();
        for id in &self.declared {
            for ancestor in self.ancestors(*id) {
                if !above.insert(ancestor) {
                    break;
                }
            }
        }
        above
    }
}

/// Makes requests of runs; borrows the trace's spans.
struct Builder<'a> {
    trace_id: TraceId,
    models: &'a [SpanFacts],
    calls: &'a [Call],
    call_spans: &'a [SpanFacts],
    tries: &'a [HttpTry],
    runs: &'a FastMap<SpanId, Vec<Vec<Element>>>,
}

impl Builder<'_> {
    /// The request a standing run makes, if any (step 5).
    fn request_of_run(&self, run: &[Element]) -> Option<Request> {
        match run {
            [] => None,
            [Element::CallSpan(_)] => None,
            [Element::Call(c)] => Some(alone_request(
                self.trace_id,
                &self.calls[*c],
                self.models,
                self.tries,
            )),
            _ => {
                let first = match run[0] {
                    Element::Call(c) => self.models[self.calls[c].outer].span_id,
                    Element::CallSpan(s) => self.call_spans[s].span_id,
                };
                let mut attempts = Vec::new();
                let mut sources = Vec::new();
                for &e in run {
                    self.attempts_of(e, &mut attempts, &mut sources, 0);
                }
                if attempts.is_empty() {
                    return None;
                }
                index(&mut attempts);
                Some(request(
                    (self.trace_id, first),
                    attempts,
                    sources,
                    AttemptSource::SiblingRetry,
                ))
            }
        }
    }

    /// An element's attempts in order: a call's (its tries, or itself), a call span's last run
    /// of children's.
    fn attempts_of(
        &self,
        e: Element,
        attempts: &mut Vec<SpanFacts>,
        sources: &mut Vec<SpanFacts>,
        depth: usize,
    ) {
        match e {
            Element::Call(c) => {
                let call = &self.calls[c];
                attempts.extend(call_attempts(call, self.models, self.tries));
                sources.extend(call.nest.iter().map(|&(i, _)| self.models[i].clone()));
            }
            Element::CallSpan(s) => {
                let span = &self.call_spans[s];
                sources.push(span.clone());
                // Call spans nest no deeper than their trace; the bound only stops a cycle.
                if depth > self.call_spans.len() {
                    return;
                }
                if let Some(last) = self.runs.get(&span.span_id).and_then(|l| l.last()) {
                    for &child in last {
                        self.attempts_of(child, attempts, sources, depth + 1);
                    }
                }
            }
        }
    }
}

/// A call judged alone: `http_retry` or `resend_count` with two or more tries, else `single`.
fn alone_request(
    trace_id: TraceId,
    call: &Call,
    models: &[SpanFacts],
    tries: &[HttpTry],
) -> Request {
    let outer = &models[call.outer];
    let source = match call.tries {
        Tries::None => AttemptSource::Single,
        Tries::Spans(_) => AttemptSource::HttpRetry,
        Tries::Resent(_) => AttemptSource::ResendCount,
    };
    let mut attempts = call_attempts(call, models, tries);
    index(&mut attempts);
    let sources = call.nest.iter().map(|&(i, _)| models[i].clone()).collect();
    request((trace_id, outer.span_id), attempts, sources, source)
}

fn index(attempts: &mut [SpanFacts]) {
    for (position, attempt) in attempts.iter_mut().enumerate() {
        attempt.attempt_index = Some(i32::try_from(position).unwrap_or(i32::MAX));
    }
}

fn request(
    (trace_id, span_id): (TraceId, SpanId),
    attempts: Vec<SpanFacts>,
    sources: Vec<SpanFacts>,
    attempt_source: AttemptSource,
) -> Request {
    Request {
        key: GroupKey::Single { trace_id, span_id },
        logical: None,
        attempts,
        evaluated: Vec::new(),
        attempt_source,
        sources,
        origins: None,
    }
}

/// The attempts of one call (SPEC §2, "The attempts of a call with tries").
fn call_attempts(call: &Call, models: &[SpanFacts], tries: &[HttpTry]) -> Vec<SpanFacts> {
    let nest = Nest { call, models };
    let outer = &models[call.outer];
    let usage = nest.outermost(|s| s.input_tokens != Count::Missing);
    let output = nest.outermost(|s| s.output_tokens != Count::Missing);
    let served = nest.outermost(|s| s.response_model.is_some());
    let mut attempts = match &call.tries {
        Tries::None => {
            let mut attempt = outer.clone();
            attempt.output_cap = nest
                .innermost(|s| s.output_cap != Count::Missing)
                .map_or(Count::Missing, |i| models[i].output_cap);
            apply_usage(&mut attempt, usage);
            attempt.usage_origin = match usage {
                Some(u) if u.span_id != outer.span_id => UsageOrigin::Call,
                _ => UsageOrigin::Span,
            };
            return vec![with_outcome(attempt, output, served)];
        }
        Tries::Spans(list) => {
            let mut ordered: Vec<&HttpTry> = list.iter().map(|&t| &tries[t]).collect();
            let mut seen = FastSet::default();
            ordered.retain(|t| seen.insert(t.span_id));
            ordered.sort_by_key(|t| (t.start_time_unix_nano, t.span_id));
            let resends: Vec<i32> = ordered
                .iter()
                .map(|t| t.resend_count.unwrap_or(0))
                .collect();
            let distinct = resends.iter().collect::<FastSet<_>>().len() == resends.len();
            if distinct {
                // A stable sort keeps (start, span id) among equal counts, of which there are none.
                ordered.sort_by_key(|t| t.resend_count.unwrap_or(0));
            }
            ordered
                .into_iter()
                .map(|t| {
                    let at = nest
                        .innermost(|s| {
                            s.start_time_unix_nano <= t.start_time_unix_nano
                                && t.start_time_unix_nano <= s.end_time_unix_nano
                        })
                        .unwrap_or(call.outer);
                    let mut attempt = models[at].clone();
                    attempt.output_cap = nest.cap_at(at);
                    attempt.span_id = t.span_id;
                    attempt.parent_span_id = t.parent_span_id;
                    attempt.start_time_unix_nano = t.start_time_unix_nano;
                    attempt.end_time_unix_nano = t.end_time_unix_nano;
                    attempt.error_type = t.attempt_error_type();
                    attempt
                })
                .collect::<Vec<_>>()
        }
        Tries::Resent(n) => {
            let cap = nest.cap_at(call.outer);
            let mut list: Vec<SpanFacts> = (0..*n)
                .map(|_| {
                    let mut attempt = outer.clone();
                    attempt.output_cap = cap;
                    attempt.end_time_unix_nano = outer.start_time_unix_nano;
                    attempt.error_type = Some(crate::contract::symbol(attr::ERROR_TYPE_OTHER));
                    attempt
                })
                .collect();
            let mut own = outer.clone();
            own.output_cap = cap;
            list.push(own);
            list
        }
    };
    let last = attempts.len().saturating_sub(1);
    for (i, attempt) in attempts.iter_mut().enumerate() {
        apply_usage(attempt, usage);
        attempt.usage_origin = UsageOrigin::Call;
        if i == last {
            let outcome = with_outcome(std::mem::take(attempt), output, served);
            *attempt = outcome;
            attempt.output_reached_client = outer.output_reached_client;
            attempt.sdk = outer.sdk.clone();
        } else {
            attempt.output_tokens = Count::Missing;
            attempt.response_model = None;
            attempt.output_reached_client = None;
            attempt.sdk = None;
        }
    }
    attempts
}

fn apply_usage(attempt: &mut SpanFacts, usage: Option<&SpanFacts>) {
    match usage {
        Some(u) => {
            attempt.input_tokens = u.input_tokens;
            attempt.cached_input_tokens = u.cached_input_tokens;
            attempt.cache_write_input_tokens = u.cache_write_input_tokens;
        }
        None => {
            attempt.input_tokens = Count::Missing;
            attempt.cached_input_tokens = Count::Missing;
            attempt.cache_write_input_tokens = Count::Missing;
        }
    }
}

/// The call's outcome on its last attempt: output tokens and the served model, each from the
/// outermost nest span that reports it.
fn with_outcome(
    mut attempt: SpanFacts,
    output: Option<&SpanFacts>,
    served: Option<&SpanFacts>,
) -> SpanFacts {
    attempt.output_tokens = output.map_or(Count::Missing, |s| s.output_tokens);
    attempt.response_model = served.and_then(|s| s.response_model.clone());
    attempt
}

/// The spans of one call's nest, for the choices of "innermost" and "outermost".
struct Nest<'a> {
    call: &'a Call,
    models: &'a [SpanFacts],
}

impl<'a> Nest<'a> {
    /// Outermost = shallowest, then earliest start, then lower span id: the nest's order.
    fn outermost(&self, wanted: impl Fn(&SpanFacts) -> bool) -> Option<&'a SpanFacts> {
        self.call
            .nest
            .iter()
            .map(|&(i, _)| &self.models[i])
            .find(|s| wanted(s))
    }

    /// Innermost = deepest, then latest start, then higher span id.
    fn innermost(&self, wanted: impl Fn(&SpanFacts) -> bool) -> Option<usize> {
        self.call
            .nest
            .iter()
            .filter(|&&(i, _)| wanted(&self.models[i]))
            .max_by_key(|&&(i, depth)| {
                (
                    depth,
                    self.models[i].start_time_unix_nano,
                    self.models[i].span_id,
                )
            })
            .map(|&(i, _)| i)
    }

    /// The output cap of nest span `at`, else of the nearest enclosing span of the nest that
    /// states one.
    fn cap_at(&self, at: usize) -> Count {
        std::iter::once(at)
            .chain(self.call.enclosing.get(&at).into_iter().flatten().copied())
            .map(|i| self.models[i].output_cap)
            .find(|cap| *cap != Count::Missing)
            .unwrap_or(Count::Missing)
    }
}

/// Step 6: an attempt without input tokens takes the counts of the nearest later attempt whose
/// input count is its own or its call's, else of the nearest earlier one.
fn borrow_usage(attempts: &mut [SpanFacts]) {
    let lenders: Vec<Option<(Count, Count, Count)>> = attempts
        .iter()
        .map(|a| {
            (a.input_tokens != Count::Missing && a.usage_origin != UsageOrigin::Borrowed).then_some(
                (
                    a.input_tokens,
                    a.cached_input_tokens,
                    a.cache_write_input_tokens,
                ),
            )
        })
        .collect();
    for i in 0..attempts.len() {
        if attempts[i].input_tokens != Count::Missing {
            continue;
        }
        let later = lenders[i + 1..].iter().flatten().next();
        let earlier = lenders[..i].iter().rev().flatten().next();
        if let Some(&(input, cached, cache_write)) = later.or(earlier) {
            let attempt = &mut attempts[i];
            attempt.input_tokens = input;
            attempt.cached_input_tokens = cached;
            attempt.cache_write_input_tokens = cache_write;
            attempt.usage_origin = UsageOrigin::Borrowed;
        }
    }
}

#[cfg(test)]
mod tests;
