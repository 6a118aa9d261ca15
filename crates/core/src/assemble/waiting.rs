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
use crate::contract::{CapturedAttributes, EnvelopeFields, PackedCounts, SpanId, Symbol, TraceId};

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

/// 88 bytes: what a waiting logical span holds as a rule, the rest boxed when it has any (see
/// [`Rest`]). The indexes' hashes are computed again where they are needed (a table that grows,
/// a span that leaves) rather than kept, and no origin is [`NO_ORIGIN`], not an `Option`'s
/// sixteen bytes. As a [`ContextSpan`] beside its trace id it took 160.
#[derive(Debug)]
pub(super) struct Entry {
    trace_id: TraceId,
    pub(super) span_id: SpanId,
    start_time_unix_nano: u64,
    origin: u64,
    pub(super) request_id: Option<Arc<str>>,
    service_name: Symbol,
    envelope: Arc<EnvelopeFields>,
    pub(super) attempt_count: Option<u32>,
    rest: Option<Box<Rest>>,
}

/// What a logical span carries less often: tokens, models and the output flag are its
/// attempts' as a rule.
#[derive(Debug, Default, PartialEq)]
struct Rest {
    attempt_index: Option<i32>,
    envelope_json: Option<Arc<EnvelopeFields>>,
    request_model: Option<Symbol>,
    model_family: Option<Symbol>,
    counts: PackedCounts<4>,
    output_reached_client: Option<bool>,
    captured: CapturedAttributes,
}

/// Origins are record numbers, which never reach it.
const NO_ORIGIN: u64 = u64::MAX;

impl Entry {
    fn new(trace_id: TraceId, logical: WaitingLogical) -> Entry {
        // Every field by name: a fact added to `ContextSpan` must be given a place here.
        let WaitingLogical {
            span:
                ContextSpan {
                    span_id,
                    start_time_unix_nano,
                    attempt_index,
                    attempt_count,
                    service_name,
                    request_id,
                    envelope,
                    envelope_json,
                    request_model,
                    model_family,
                    counts,
                    output_reached_client,
                    captured,
                },
            origin,
        } = logical;
        let rest = Rest {
            attempt_index,
            envelope_json,
            request_model,
            model_family,
            counts,
            output_reached_client,
            captured,
        };
        Entry {
            trace_id,
            span_id,
            start_time_unix_nano,
            origin: origin.unwrap_or(NO_ORIGIN),
            request_id,
            service_name,
            envelope,
            attempt_count,
            rest: (rest != Rest::default()).then(|| Box::new(rest)),
        }
    }

    /// The logical span [`Entry::new`] was given.
    fn into_logical(self) -> WaitingLogical {
        let origin = self.origin();
        let Rest {
            attempt_index,
            envelope_json,
            request_model,
            model_family,
            counts,
            output_reached_client,
            captured,
        } = self.rest.map(|rest| *rest).unwrap_or_default();
        WaitingLogical {
            span: ContextSpan {
                span_id: self.span_id,
                start_time_unix_nano: self.start_time_unix_nano,
                attempt_index,
                attempt_count: self.attempt_count,
                service_name: self.service_name,
                request_id: self.request_id,
                envelope: self.envelope,
                envelope_json,
                request_model,
                model_family,
                counts,
                output_reached_client,
                captured,
            },
            origin,
        }
    }

    fn is_request(&self, trace_id: &TraceId, request_id: &str) -> bool {
        self.trace_id == *trace_id && self.request_id.as_deref() == Some(request_id)
    }

    fn origin(&self) -> Option<u64> {
        (self.origin != NO_ORIGIN).then_some(self.origin)
    }

    /// The hash `by_span` files it under.
    fn span_hash(&self, hasher: &ahash::RandomState) -> u64 {
        span_hash(hasher, &self.trace_id, &self.span_id)
    }

    /// The hash `by_request` files it under, when it has a request id.
    fn request_hash(&self, hasher: &ahash::RandomState) -> Option<u64> {
        let id = self.request_id.as_deref()?;
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
                    .is_some_and(|e| e.span_id == *span_id && e.trace_id == *trace_id)
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

    pub(super) fn at(&self, place: LogicalPlace) -> Option<&Entry> {
        self.entry(place.0)
    }

    pub(super) fn get(&self, trace_id: &TraceId, span_id: &SpanId) -> Option<&Entry> {
        self.at(self.place_of(trace_id, span_id)?)
    }

    /// Files a logical span not waiting yet; it becomes the one its request id names.
    pub(super) fn insert(&mut self, trace_id: TraceId, logical: WaitingLogical) {
        let entry = Entry::new(trace_id, logical);
        self.counted += usize::from(entry.attempt_count.is_some());
        let hasher = &self.hasher;
        let request_id: Option<Arc<str>> = entry.request_id.clone();
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
        self.counted -= usize::from(entry.attempt_count.is_some());
        let hasher = &self.hasher;
        if let Ok(found) = self
            .by_span
            .find_entry(entry.span_hash(hasher), |&p| p == place.0)
        {
            found.remove();
        }
        if let (Some(hash), Some(id)) = (entry.request_hash(hasher), entry.request_id.as_deref()) {
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
        Some(entry.into_logical())
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
        assert!(std::mem::size_of::<Entry>() <= 88);
    }

    #[test]
    fn a_waiting_span_leaves_as_it_came_with_or_without_its_rest() {
        let plain = logical(1, Some("r"));
        let mut full = logical(2, None);
        full.span.attempt_index = Some(-1);
        full.span.attempt_count = Some(3);
        full.span.envelope_json = Some(Arc::new(EnvelopeFields {
            present: true,
            ..EnvelopeFields::default()
        }));
        full.span.request_model = Some("gpt-4o".into());
        full.span.model_family = Some("gpt".into());
        full.span.counts = PackedCounts::new([
            crate::contract::Count::Value(7),
            crate::contract::Count::OutOfRange,
            crate::contract::Count::Missing,
            crate::contract::Count::Value(u32::MAX.into()),
        ]);
        full.span.output_reached_client = Some(false);
        full.span.captured = CapturedAttributes::from_pairs(vec![("a".into(), "b".into())]);
        let mut logicals = WaitingLogicals::default();
        for waiting in [plain, full] {
            let expected = (waiting.span.clone(), waiting.origin);
            let id = waiting.span.span_id;
            logicals.insert(TRACE, waiting);
            let entry = logicals.get(&TRACE, &id).expect("it waits");
            assert_eq!(
                entry.rest.is_some(),
                id == [2; 8],
                "only the second has a rest"
            );
            let back = logicals.remove(&TRACE, &id).expect("it waits");
            assert_eq!((back.span, back.origin), expected);
        }
        // Each of the rest's facts alone makes a rest.
        for set in 0..7 {
            let mut waiting = logical(3, None);
            let span = &mut waiting.span;
            match set {
                0 => span.attempt_index = Some(0),
                1 => span.envelope_json = Some(Arc::default()),
                2 => span.request_model = Some("m".into()),
                3 => span.model_family = Some("f".into()),
                4 => {
                    span.counts = PackedCounts::new([
                        crate::contract::Count::Missing,
                        crate::contract::Count::Value(0),
                        crate::contract::Count::Missing,
                        crate::contract::Count::Missing,
                    ])
                }
                5 => span.output_reached_client = Some(true),
                _ => {
                    span.captured =
                        CapturedAttributes::from_pairs(vec![("k".into(), String::new())])
                }
            }
            let expected = waiting.span.clone();
            logicals.insert(TRACE, waiting);
            assert!(
                logicals
                    .get(&TRACE, &[3; 8])
                    .is_some_and(|e| e.rest.is_some()),
                "fact {set}"
            );
            let back = logicals.remove(&TRACE, &[3; 8]).map(|w| w.span);
            assert_eq!(back, Some(expected), "fact {set}");
        }
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
