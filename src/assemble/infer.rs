//! Attempts inferred from plain instrumentation (SPEC §2).
//!
//! Today's instrumentations write one GenAI span per logical call and no `retry_spend.*`
//! attributes. Retries still show in two shapes: HTTP tries under that span (an SDK's own retry
//! loop, rule 1 `http_retry`) and failed sibling calls under one parent (an application's retry
//! loop or a router's fallback, rule 2 `sibling_retry`). [`infer`] turns both into [`Request`]s
//! whose attempts carry explicit indices, so the rules judge them like declared ones.

use std::collections::{HashMap, HashSet};

use super::{GroupKey, Request};
use crate::contract::{Count, HttpTry, SpanFacts, SpanId, TraceId};
use crate::record::AttemptSource;

/// Turns plain GenAI spans and HTTP tries into requests, each with its attempt source.
///
/// The contract, the same for `replay` (its whole input at once) and `serve` (one `(trace,
/// parent)` once its `group_wait` has passed, or a whole trace):
/// - `genai` are plain GenAI spans ([`crate::contract::SpanKind::SingleAttempt`]), each given
///   once: the caller drops spans seen before. Runs of failed siblings are formed among the spans
///   given with the same trace and parent, so give every GenAI span of a `(trace, parent)`
///   together. Root spans never form runs; `serve` may give them one by one.
/// - `tries` are HTTP client tries ([`HttpTry::read`]). Those whose parent is one of `genai`
///   become its attempts when it has two or more; the others are ignored here (they pass
///   through untouched), so `serve` can give just the tries held under those span ids.
/// - Every span of `genai` ends up in exactly one request: as an attempt, or replaced by its
///   tries. Requests are keyed [`GroupKey::Single`] by the span whose id is their `request_id`,
///   carry no logical span and no earlier context, and their attempts have explicit indices, so
///   [`crate::rules::evaluate`] judges them like declared ones.
/// - A GenAI span given alone gets rule 1 only: `http_retry` with two or more tries, else
///   `single` (a late sibling of an evaluated run).
/// - The result does not depend on the order of either input; requests come sorted by key.
pub fn infer(genai: Vec<SpanFacts>, tries: Vec<HttpTry>) -> Vec<Request> {
    let wanted: HashSet<(TraceId, SpanId)> =
        genai.iter().map(|g| (g.trace_id, g.span_id)).collect();
    let mut children: HashMap<(TraceId, SpanId), Vec<HttpTry>> = HashMap::new();
    for t in tries {
        if let Some(parent) = t.parent_span_id {
            if wanted.contains(&(t.trace_id, parent)) {
                children.entry((t.trace_id, parent)).or_default().push(t);
            }
        }
    }

    let mut requests = Vec::new();
    let mut families: HashMap<(TraceId, SpanId), Vec<SpanFacts>> = HashMap::new();
    for span in genai {
        match span.parent_span_id {
            Some(parent) => families
                .entry((span.trace_id, parent))
                .or_default()
                .push(span),
            None => requests.push(alone(span, &mut children)),
        }
    }
    for mut siblings in families.into_values() {
        siblings.sort_by_key(|s| (s.start_time_unix_nano, s.span_id));
        for run in runs(siblings) {
            requests.push(request_of_run(run, &mut children));
        }
    }
    requests.sort_by(|a, b| a.key.cmp(&b.key));
    requests
}

/// Plain GenAI spans and HTTP tries held until inference, each span counted once: what `replay`
/// holds for its whole input, and what `serve` can hold per trace.
#[derive(Debug, Default)]
pub struct PlainSpans {
    genai: Vec<SpanFacts>,
    tries: Vec<HttpTry>,
    seen: HashSet<(TraceId, SpanId)>,
}

impl PlainSpans {
    /// Holds a plain GenAI span; false when this span was seen before (an exporter re-sent it).
    pub fn offer_genai(&mut self, span: SpanFacts) -> bool {
        let new = self.seen.insert((span.trace_id, span.span_id));
        if new {
            self.genai.push(span);
        }
        new
    }

    /// Holds an HTTP try; false when this span was seen before.
    pub fn offer_try(&mut self, try_: HttpTry) -> bool {
        let new = self.seen.insert((try_.trace_id, try_.span_id));
        if new {
            self.tries.push(try_);
        }
        new
    }

    /// Everything held, as requests (see [`infer`]).
    pub fn infer(self) -> Vec<Request> {
        infer(self.genai, self.tries)
    }
}

/// Siblings in (start time, span id) order, split into runs: a run continues while the previous
/// call failed and starts afresh after one that succeeded.
fn runs(siblings: Vec<SpanFacts>) -> Vec<Vec<SpanFacts>> {
    let mut runs: Vec<Vec<SpanFacts>> = Vec::new();
    let mut previous_failed = false;
    for span in siblings {
        let failed = span.error_type.is_some();
        match runs.last_mut() {
            Some(run) if previous_failed => run.push(span),
            _ => runs.push(vec![span]),
        }
        previous_failed = failed;
    }
    runs
}

/// A run of two or more siblings is one `sibling_retry` request indexed by position, a sibling
/// of an SDK loop contributing its tries; a run of one is judged alone.
fn request_of_run(
    mut run: Vec<SpanFacts>,
    children: &mut HashMap<(TraceId, SpanId), Vec<HttpTry>>,
) -> Request {
    if run.len() == 1 {
        if let Some(span) = run.pop() {
            return alone(span, children);
        }
    }
    let first = run
        .first()
        .map(|s| (s.trace_id, s.span_id))
        .unwrap_or_default();
    let mut attempts = Vec::with_capacity(run.len());
    for span in run {
        match http_attempts(&span, children) {
            Some(tries) => attempts.extend(tries),
            None => attempts.push(span),
        }
    }
    for (position, attempt) in attempts.iter_mut().enumerate() {
        attempt.attempt_index = Some(i32::try_from(position).unwrap_or(i32::MAX));
    }
    request(first, attempts, AttemptSource::SiblingRetry)
}

/// A GenAI span outside any run: an `http_retry` request when it has two or more HTTP tries,
/// else a `single` one.
fn alone(span: SpanFacts, children: &mut HashMap<(TraceId, SpanId), Vec<HttpTry>>) -> Request {
    let id = (span.trace_id, span.span_id);
    match http_attempts(&span, children) {
        Some(attempts) => request(id, attempts, AttemptSource::HttpRetry),
        None => request(id, vec![span], AttemptSource::Single),
    }
}

fn request(
    (trace_id, span_id): (TraceId, SpanId),
    attempts: Vec<SpanFacts>,
    attempt_source: AttemptSource,
) -> Request {
    Request {
        key: GroupKey::Single { trace_id, span_id },
        logical: None,
        attempts,
        evaluated: Vec::new(),
        attempt_source,
    }
}

/// Rule 1: the HTTP tries of `genai` as its attempts, in index order; `None` with fewer than two.
///
/// Tries are indexed by `http.request.resend_count` (absent counts as 0) when that gives
/// distinct indexes, else 0, 1, … by (start time, span id).
fn http_attempts(
    genai: &SpanFacts,
    children: &mut HashMap<(TraceId, SpanId), Vec<HttpTry>>,
) -> Option<Vec<SpanFacts>> {
    let mut tries = children.remove(&(genai.trace_id, genai.span_id))?;
    let mut seen = HashSet::with_capacity(tries.len());
    tries.retain(|t| seen.insert(t.span_id));
    if tries.len() < 2 {
        return None;
    }
    tries.sort_by_key(|t| (t.start_time_unix_nano, t.span_id));
    let by_resend: Vec<i32> = tries.iter().map(|t| t.resend_count.unwrap_or(0)).collect();
    let distinct = by_resend.iter().collect::<HashSet<_>>().len() == by_resend.len();
    let mut indexed: Vec<(i32, HttpTry)> = if distinct {
        by_resend.into_iter().zip(tries).collect()
    } else {
        (0..)
            .map(|i: usize| i32::try_from(i).unwrap_or(i32::MAX))
            .zip(tries)
            .collect()
    };
    indexed.sort_by_key(|(index, _)| *index);
    let last = indexed.len() - 1;
    Some(
        indexed
            .into_iter()
            .enumerate()
            .map(|(position, (index, t))| attempt_of_try(genai, t, index, position == last))
            .collect(),
    )
}

/// One try as an attempt. A retry re-sends the same body, so every try takes the GenAI span's
/// model, provider, input and cached tokens, output cap and envelope; what describes the call's
/// outcome (output tokens, the served model, output that reached the client, the SDK's own
/// figures) belongs to the last try only.
fn attempt_of_try(genai: &SpanFacts, t: HttpTry, index: i32, last: bool) -> SpanFacts {
    let mut attempt = genai.clone();
    attempt.span_id = t.span_id;
    attempt.parent_span_id = t.parent_span_id;
    attempt.start_time_unix_nano = t.start_time_unix_nano;
    attempt.end_time_unix_nano = t.end_time_unix_nano;
    attempt.attempt_index = Some(index);
    attempt.error_type = t.attempt_error_type();
    if !last {
        attempt.output_tokens = Count::Missing;
        attempt.response_model = None;
        attempt.output_reached_client = None;
        attempt.sdk_estimated_incremental_usd = None;
        attempt.sdk_remaining_envelope_usd = None;
        attempt.sdk_decision_reason = None;
    }
    attempt
}

#[cfg(test)]
mod tests;
