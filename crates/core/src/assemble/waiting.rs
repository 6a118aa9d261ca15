//! Logical spans waiting for their attempts (see [`super::Grouper`]): a slab, indexed by the
//! span's ids and by its request id.
//!
//! Two keyed maps held them: one by `(trace, span)` owning the span, one by `(trace, request
//! id)` naming its ids. Every attempt asking whether its request was complete looked up both,
//! and taking a request removed from both, hashing and comparing the request id's text each
//! time. Here the request index names the slab place itself, and an entry leaves both indexes
//! by the hashes it was filed under (BENCHMARKS.md, issue 18, twelfth pass).

use std::sync::Arc;

use hashbrown::HashTable;

use super::slab::Slab;
use super::ContextSpan;
use crate::contract::{SpanId, TraceId};

/// A logical span waiting for its attempts, held as the finished cache holds one, as context:
/// the rules read its envelope, policy attributes and request id, not the rest of its 344 bytes.
#[derive(Debug)]
pub(super) struct WaitingLogical {
    pub(super) span: ContextSpan,
    pub(super) origin: Option<u64>,
}

/// A waiting logical span's place in the slab, valid until it leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LogicalPlace(u32);

/// 160 bytes: the indexes' hashes are computed again where they are needed (a table that
/// grows, a span that leaves) rather than kept, and no origin is [`NO_ORIGIN`], not an
/// `Option`'s sixteen bytes.
#[derive(Debug)]
struct Entry {
    trace_id: TraceId,
    span: ContextSpan,
    origin: u64,
}

/// Origins are record numbers, which never reach it.
const NO_ORIGIN: u64 = u64::MAX;

impl Entry {
    fn is_request(&self, trace_id: &TraceId, request_id: &str) -> bool {
        self.trace_id == *trace_id && self.span.request_id.as_deref() == Some(request_id)
    }

    fn origin(&self) -> Option<u64> {
        (self.origin != NO_ORIGIN).then_some(self.origin)
    }

    /// The hash `by_span` files it under.
    fn span_hash(&self, hasher: &ahash::RandomState) -> u64 {
        span_hash(hasher, &self.trace_id, &self.span.span_id)
    }

    /// The hash `by_request` files it under, when it has a request id.
    fn request_hash(&self, hasher: &ahash::RandomState) -> Option<u64> {
        let id = self.span.request_id.as_deref()?;
        Some(request_hash(hasher, &self.trace_id, id))
    }
}

#[derive(Debug, Default)]
pub(super) struct WaitingLogicals {
    /// Places by the hash of `(trace, span id)`. Both indexes hold places alone (four bytes,
    /// not sixteen): what they are keyed by is in the slab's entries, and every place indexed
    /// is held.
    by_span: HashTable<u32>,
    /// The place of the latest logical span filed under each request id, by the hash of
    /// `(trace, request id)`: when one of that id leaves, so does the entry, whichever it names.
    by_request: HashTable<u32>,
    slab: Slab<Entry>,
    hasher: ahash::RandomState,
    /// Waiting spans that name an attempt count. SDKs rarely set one: while none waits, no
    /// pending group can be complete by count, and an attempt needs no lookup to know it.
    counted: usize,
}

fn span_hash(hasher: &ahash::RandomState, trace_id: &TraceId, span_id: &SpanId) -> u64 {
    hasher.hash_one((trace_id, span_id))
}

fn request_hash(hasher: &ahash::RandomState, trace_id: &TraceId, request_id: &str) -> u64 {
    hasher.hash_one((trace_id, request_id))
}

impl WaitingLogicals {
    pub(super) fn len(&self) -> usize {
        self.by_span.len()
    }

    /// Whether any waiting logical span names an attempt count.
    pub(super) fn any_counted(&self) -> bool {
        self.counted > 0
    }

    fn entry(&self, place: u32) -> Option<&Entry> {
        self.slab.get(place)
    }

    /// Where the logical span `(trace_id, span_id)` waits.
    pub(super) fn place_of(&self, trace_id: &TraceId, span_id: &SpanId) -> Option<LogicalPlace> {
        let hash = span_hash(&self.hasher, trace_id, span_id);
        self.by_span
            .find(hash, |&place| {
                self.entry(place)
                    .is_some_and(|e| e.span.span_id == *span_id && e.trace_id == *trace_id)
            })
            .map(|&place| LogicalPlace(place))
    }

    /// Where the latest logical span of `request_id` waits.
    pub(super) fn place_of_request(
        &self,
        trace_id: &TraceId,
        request_id: &str,
    ) -> Option<LogicalPlace> {
        let hash = request_hash(&self.hasher, trace_id, request_id);
        self.by_request
            .find(hash, |&place| {
                self.entry(place)
                    .is_some_and(|e| e.is_request(trace_id, request_id))
            })
            .map(|&place| LogicalPlace(place))
    }

    pub(super) fn at(&self, place: LogicalPlace) -> Option<&ContextSpan> {
        self.entry(place.0).map(|e| &e.span)
    }

    pub(super) fn get(&self, trace_id: &TraceId, span_id: &SpanId) -> Option<&ContextSpan> {
        self.at(self.place_of(trace_id, span_id)?)
    }

    /// Files a logical span not waiting yet; it becomes the one its request id names.
    pub(super) fn insert(&mut self, trace_id: TraceId, logical: WaitingLogical) {
        let WaitingLogical { span, origin } = logical;
        self.counted += usize::from(span.attempt_count.is_some());
        let hasher = &self.hasher;
        let request_id: Option<Arc<str>> = span.request_id.clone();
        let entry = Entry {
            trace_id,
            span,
            origin: origin.unwrap_or(NO_ORIGIN),
        };
        let (by_span, by_request) = (entry.span_hash(hasher), entry.request_hash(hasher));
        let (place, _) = self.slab.insert(entry);
        let slab = &self.slab;
        self.by_span.insert_unique(by_span, place, |&p| {
            slab.get(p).map_or(0, |e| e.span_hash(hasher))
        });
        if let (Some(hash), Some(id)) = (by_request, request_id.as_deref()) {
            let found = self.by_request.find_mut(hash, |&p| {
                slab.get(p).is_some_and(|e| e.is_request(&trace_id, id))
            });
            match found {
                Some(named) => *named = place,
                None => {
                    // Only spans with a request id are filed here.
                    self.by_request.insert_unique(hash, place, |&p| {
                        slab.get(p)
                            .and_then(|e| e.request_hash(hasher))
                            .unwrap_or(0)
                    });
                }
            }
        }
    }

    /// Takes the logical span at `place` out of the slab and both indexes.
    pub(super) fn remove_at(&mut self, place: LogicalPlace) -> Option<WaitingLogical> {
        let entry = self.slab.remove(place.0)?;
        self.counted -= usize::from(entry.span.attempt_count.is_some());
        let hasher = &self.hasher;
        if let Ok(found) = self
            .by_span
            .find_entry(entry.span_hash(hasher), |&p| p == place.0)
        {
            found.remove();
        }
        if let (Some(hash), Some(id)) =
            (entry.request_hash(hasher), entry.span.request_id.as_deref())
        {
            let slab = &self.slab;
            let named = self.by_request.find_entry(hash, |&p| {
                p == place.0
                    || slab
                        .get(p)
                        .is_some_and(|e| e.is_request(&entry.trace_id, id))
            });
            if let Ok(named) = named {
                named.remove();
            }
        }
        let origin = entry.origin();
        Some(WaitingLogical {
            span: entry.span,
            origin,
        })
    }

    pub(super) fn remove(
        &mut self,
        trace_id: &TraceId,
        span_id: &SpanId,
    ) -> Option<WaitingLogical> {
        let place = self.place_of(trace_id, span_id)?;
        self.remove_at(place)
    }

    /// The origins of the logical spans waiting.
    pub(super) fn origins(&self) -> impl Iterator<Item = u64> + '_ {
        self.slab.iter().filter_map(|(_, e)| e.origin())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{SpanFacts, SpanKind};

    fn logical(span_id: u8, request_id: Option<&str>) -> WaitingLogical {
        let span = SpanFacts {
            trace_id: [1; 16],
            span_id: [span_id; 8],
            kind: SpanKind::LogicalRequest,
            request_id: request_id.map(Arc::from),
            ..SpanFacts::default()
        };
        WaitingLogical {
            span: ContextSpan::of_logical(span),
            origin: Some(u64::from(span_id)),
        }
    }

    fn span_at(logicals: &WaitingLogicals, place: Option<LogicalPlace>) -> Option<u8> {
        Some(logicals.at(place?)?.span_id[0])
    }

    const TRACE: TraceId = [1; 16];

    #[test]
    fn an_entry_keeps_no_hashes_and_no_option_of_its_origin() {
        assert!(std::mem::size_of::<Entry>() <= std::mem::size_of::<ContextSpan>() + 24);
    }

    #[test]
    fn the_request_id_names_the_latest_and_leaves_with_any_span_of_that_id() {
        let mut logicals = WaitingLogicals::default();
        logicals.insert(TRACE, logical(1, Some("r")));
        logicals.insert(TRACE, logical(2, Some("r")));
        logicals.insert(TRACE, logical(3, Some("other")));
        assert_eq!(
            span_at(&logicals, logicals.place_of_request(&TRACE, "r")),
            Some(2)
        );
        assert!(logicals.remove(&TRACE, &[1; 8]).is_some());
        assert_eq!(logicals.place_of_request(&TRACE, "r"), None);
        assert_eq!(
            span_at(&logicals, logicals.place_of(&TRACE, &[2; 8])),
            Some(2)
        );
        assert_eq!(
            span_at(&logicals, logicals.place_of_request(&TRACE, "other")),
            Some(3)
        );
        assert_eq!(logicals.place_of_request(&[2; 16], "other"), None);
        assert_eq!(logicals.len(), 2);
    }

    #[test]
    fn both_indexes_find_every_span_after_their_tables_grow_and_spans_leave() {
        // The tables rehash from the slab (no hash is kept): grow them well past their first
        // size, take every other span out, and look every one up.
        let mut logicals = WaitingLogicals::default();
        let trace = |n: u32| {
            let mut id = [0; 16];
            id[..4].copy_from_slice(&n.to_be_bytes());
            id
        };
        let request = |n: u32| format!("req-{n}");
        for n in 0..2000u32 {
            let mut waiting = logical(0, Some(&request(n)));
            waiting.span.span_id = [(n % 251) as u8; 8];
            logicals.insert(trace(n), waiting);
        }
        for n in (0..2000u32).step_by(2) {
            assert!(logicals.remove(&trace(n), &[(n % 251) as u8; 8]).is_some());
        }
        for n in 0..2000u32 {
            let held = n % 2 == 1;
            let by_span = logicals.place_of(&trace(n), &[(n % 251) as u8; 8]);
            let by_request = logicals.place_of_request(&trace(n), &request(n));
            assert_eq!(by_span.is_some(), held, "span of {n}");
            assert_eq!(by_request, by_span, "request of {n}");
        }
        assert_eq!(logicals.len(), 1000);
    }

    #[test]
    fn a_freed_place_is_reused_and_the_indexes_name_only_what_is_there() {
        let mut logicals = WaitingLogicals::default();
        logicals.insert(TRACE, logical(1, Some("r")));
        logicals.insert(TRACE, logical(2, None));
        let first = logicals.place_of(&TRACE, &[1; 8]);
        let taken = first.and_then(|place| logicals.remove_at(place));
        assert_eq!(taken.map(|l| l.span.span_id), Some([1; 8]));
        assert_eq!(
            first
                .and_then(|place| logicals.remove_at(place))
                .map(|_| ()),
            None
        );
        logicals.insert(TRACE, logical(3, Some("s")));
        assert_eq!(
            logicals.place_of(&TRACE, &[3; 8]),
            first,
            "the place is reused"
        );
        assert_eq!(logicals.place_of(&TRACE, &[1; 8]), None);
        assert_eq!(logicals.place_of_request(&TRACE, "r"), None);
        assert_eq!(
            span_at(&logicals, logicals.place_of_request(&TRACE, "s")),
            Some(3)
        );
        assert_eq!(
            span_at(&logicals, logicals.place_of(&TRACE, &[2; 8])),
            Some(2)
        );
        let mut origins: Vec<u64> = logicals.origins().collect();
        origins.sort_unstable();
        assert_eq!(origins, [2, 3]);
    }

    /// The count that lets an attempt skip the lookup of its logical span: it names a counted
    /// span exactly while one waits, whichever way the span leaves.
    #[test]
    fn any_counted_follows_the_spans_that_name_an_attempt_count() {
        let counted = |span_id: u8| {
            let mut waiting = logical(span_id, None);
            waiting.span.attempt_count = Some(2);
            waiting
        };
        let mut logicals = WaitingLogicals::default();
        logicals.insert(TRACE, logical(1, Some("r")));
        assert!(!logicals.any_counted());
        logicals.insert(TRACE, counted(2));
        logicals.insert(TRACE, counted(3));
        assert!(logicals.any_counted());
        assert!(logicals.remove(&TRACE, &[2; 8]).is_some());
        assert!(logicals.remove(&TRACE, &[2; 8]).is_none(), "already gone");
        assert!(logicals.any_counted(), "span 3 still waits");
        let place = logicals.place_of(&TRACE, &[3; 8]);
        assert!(place.and_then(|p| logicals.remove_at(p)).is_some());
        assert!(!logicals.any_counted());
        assert!(logicals.remove(&TRACE, &[1; 8]).is_some());
        assert_eq!(logicals.len(), 0);
    }
}
