//! Grouping spans into logical requests (SPEC §2, "Grouping").
//!
//! [`Grouper`] holds spans until their request is complete; `replay` feeds it a whole input and
//! drains everything, `serve` drains by time and attempt count. Both produce the same
//! [`Request`]s, which is what makes their rows agree.

use std::collections::{HashMap, HashSet};

use crate::contract::{SpanFacts, SpanId, SpanKind, TraceId};

/// What ties the attempts of one logical request together.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GroupKey {
    /// Attempts carrying `retry_spend.request.id`.
    RequestId {
        trace_id: TraceId,
        request_id: String,
    },
    /// Attempts without a request id, grouped under their parent span (none: the whole trace).
    Parent {
        trace_id: TraceId,
        parent_span_id: Option<SpanId>,
    },
    /// A GenAI client span with no contract attributes: a request of one attempt.
    Single { trace_id: TraceId, span_id: SpanId },
}

impl GroupKey {
    /// The group key of an attempt-like span; `None` for logical and passthrough spans.
    pub fn of(span: &SpanFacts) -> Option<GroupKey> {
        match span.kind {
            SpanKind::Attempt => Some(match &span.request_id {
                Some(id) => GroupKey::RequestId {
                    trace_id: span.trace_id,
                    request_id: id.clone(),
                },
                None => GroupKey::Parent {
                    trace_id: span.trace_id,
                    parent_span_id: span.parent_span_id,
                },
            }),
            SpanKind::SingleAttempt => Some(GroupKey::Single {
                trace_id: span.trace_id,
                span_id: span.span_id,
            }),
            SpanKind::LogicalRequest | SpanKind::Passthrough => None,
        }
    }

    /// The `request_id` column: the request id, else the parent span id (else the trace id when
    /// parentless attempts share a trace, else the span's own id for a single GenAI span).
    pub fn request_id(&self) -> String {
        match self {
            GroupKey::RequestId { request_id, .. } => request_id.clone(),
            GroupKey::Parent {
                parent_span_id: Some(parent),
                ..
            } => hex::encode(parent),
            GroupKey::Parent {
                trace_id,
                parent_span_id: None,
            } => hex::encode(trace_id),
            GroupKey::Single { span_id, .. } => hex::encode(span_id),
        }
    }

    pub fn trace_id(&self) -> &TraceId {
        match self {
            GroupKey::RequestId { trace_id, .. }
            | GroupKey::Parent { trace_id, .. }
            | GroupKey::Single { trace_id, .. } => trace_id,
        }
    }
}

/// One logical request: its attempts and, when it arrived, its logical request span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub key: GroupKey,
    pub logical: Option<SpanFacts>,
    pub attempts: Vec<SpanFacts>,
}

impl Request {
    /// Attempts the logical span says were made; the request is complete once they are here.
    pub fn expected_attempts(&self) -> Option<u32> {
        self.logical.as_ref().and_then(|l| l.attempt_count)
    }
}

/// Spans waiting for their request to be evaluated.
#[derive(Debug, Default)]
pub struct Grouper {
    seen: HashSet<(TraceId, SpanId)>,
    groups: HashMap<GroupKey, Vec<SpanFacts>>,
    logical_by_span: HashMap<(TraceId, SpanId), SpanFacts>,
    logical_by_request: HashMap<(TraceId, String), (TraceId, SpanId)>,
}

/// What happened to a span offered to the [`Grouper`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Offer {
    /// Held as an attempt of this group.
    Attempt(GroupKey),
    /// Held as a logical request span.
    Logical,
    /// Already seen (an exporter re-sent its batch): ignored.
    Duplicate,
    /// Not part of the contract.
    Passthrough,
}

impl Grouper {
    pub fn offer(&mut self, span: SpanFacts) -> Offer {
        if span.kind == SpanKind::Passthrough {
            return Offer::Passthrough;
        }
        if !self.seen.insert((span.trace_id, span.span_id)) {
            return Offer::Duplicate;
        }
        if span.kind == SpanKind::LogicalRequest {
            if let Some(id) = &span.request_id {
                self.logical_by_request
                    .insert((span.trace_id, id.clone()), (span.trace_id, span.span_id));
            }
            self.logical_by_span
                .insert((span.trace_id, span.span_id), span);
            return Offer::Logical;
        }
        let Some(key) = GroupKey::of(&span) else {
            return Offer::Passthrough;
        };
        self.groups.entry(key.clone()).or_default().push(span);
        Offer::Attempt(key)
    }

    /// The logical request span of a group, if it has arrived, without taking it.
    pub fn logical_for(&self, key: &GroupKey, attempts: &[SpanFacts]) -> Option<&SpanFacts> {
        self.logical_key(key, attempts)
            .and_then(|k| self.logical_by_span.get(&k))
    }

    fn logical_key(&self, key: &GroupKey, attempts: &[SpanFacts]) -> Option<(TraceId, SpanId)> {
        let by_parent = || {
            attempts
                .iter()
                .find_map(|a| a.parent_span_id)
                .map(|parent| (*key.trace_id(), parent))
                .filter(|k| self.logical_by_span.contains_key(k))
        };
        match key {
            GroupKey::RequestId {
                trace_id,
                request_id,
            } => self
                .logical_by_request
                .get(&(*trace_id, request_id.clone()))
                .copied()
                .filter(|k| self.logical_by_span.contains_key(k))
                .or_else(by_parent),
            GroupKey::Parent { .. } => by_parent(),
            GroupKey::Single { .. } => None,
        }
    }

    pub fn attempts(&self, key: &GroupKey) -> &[SpanFacts] {
        self.groups.get(key).map_or(&[], Vec::as_slice)
    }

    /// Whether the logical span has arrived and named an attempt count that is now reached.
    pub fn is_complete(&self, key: &GroupKey) -> bool {
        let attempts = self.attempts(key);
        self.logical_for(key, attempts)
            .and_then(|l| l.attempt_count)
            .is_some_and(|n| attempts.len() >= n as usize)
    }

    /// Removes a group and returns it as a request. The logical span is taken with it.
    pub fn take(&mut self, key: &GroupKey) -> Option<Request> {
        let attempts = self.groups.remove(key)?;
        let logical = self
            .logical_key(key, &attempts)
            .and_then(|k| self.logical_by_span.remove(&k));
        if let Some(id) = logical.as_ref().and_then(|l| l.request_id.as_ref()) {
            self.logical_by_request
                .remove(&(*key.trace_id(), id.clone()));
        }
        Some(Request {
            key: key.clone(),
            logical,
            attempts,
        })
    }

    /// Every group, in key order so output is deterministic whatever the arrival order.
    pub fn drain_all(&mut self) -> Vec<Request> {
        let mut keys: Vec<GroupKey> = self.groups.keys().cloned().collect();
        keys.sort();
        keys.iter().filter_map(|k| self.take(k)).collect()
    }

    pub fn pending_groups(&self) -> usize {
        self.groups.len()
    }

    /// Forgets which span ids were seen, e.g. once `replay` is done with its input.
    pub fn clear_seen(&mut self) {
        self.seen.clear();
    }
}
