//! The record a pending attempt is held as: its [`SpanFacts`] without what its group already
//! names (trace id, request id), with the five counts packed and the facts few spans carry
//! boxed together, and its text facts and envelope shared with the attempts that repeat them.
//!
//! A request without `attempt_count` is held for `group_wait`, so a busy collector holds
//! spans/s × `group_wait` attempts; as `SpanFacts` each was 280 bytes inline plus its own copy
//! of the request id (BENCHMARKS.md, issue 18, seventeenth pass). Packing and unpacking give
//! back the same facts (a property test below), so rows do not depend on it.

use std::sync::Arc;

use super::GroupKey;
use crate::contract::{
    CapturedAttributes, EnvelopeFields, HttpFacts, PackedCounts, SdkFacts, SpanFacts, SpanId,
    SpanKind, Symbol, TraceId, UsageOrigin,
};

/// 72 bytes: one, two and three attempts take mimalloc's 80-, 160- and 224-byte classes.
/// Values that do not fit the narrow fields (a parent other than the group's first, a count past
/// `u32`, an index past `i16`) go to the boxed [`Rare`] facts.
#[derive(Debug)]
pub(super) struct PendingAttempt {
    span_id: SpanId,
    /// Shared: a stream repeats a few services, models, error types and envelopes, and their
    /// eight pointers were half of every held attempt.
    facets: Arc<Facets>,
    start_time_unix_nano: u64,
    end_time_unix_nano: u64,
    /// Input, cached input, cache write, output, output cap; all missing when they are
    /// [`WIDE_COUNTS`].
    counts: PackedCounts<5, u32>,
    /// Meaningful when `flags` has [`HAS_INDEX`] and not [`WIDE_INDEX`].
    attempt_index: i16,
    /// Meaningful when `flags` has [`HAS_COUNT`] and not [`WIDE_INDEX`].
    attempt_count: u16,
    rare: Option<Box<Rare>>,
    flags: u16,
    kind: SpanKind,
    usage_origin: UsageOrigin,
}

/// An attempt's text facts and envelope, as the reader shared them: one record for every
/// attempt that repeats them (see [`Facets::shared`]).
#[derive(Debug)]
struct Facets {
    service_name: Symbol,
    envelope: Arc<EnvelopeFields>,
    request_model: Option<Symbol>,
    response_model: Option<Symbol>,
    provider: Option<Symbol>,
    model_family: Option<Symbol>,
    error_type: Option<Symbol>,
    scope: Option<Symbol>,
}

/// Facets a thread remembers, by the hash of their addresses: direct-mapped, so a stream of
/// ever-new values costs one record each (as before they were shared) and never a growing table.
const FACETS_PER_THREAD: usize = 256;

/// The addresses of a record's texts and envelope (0 for none), which name it in the cache.
type Addresses = [usize; 8];

/// A thread's places, each empty or holding a record and the addresses that name it.
type FacetsCache = Vec<Option<(Addresses, Arc<Facets>)>>;

thread_local! {
    static FACETS: std::cell::RefCell<FacetsCache> =
        std::cell::RefCell::new(vec![None; FACETS_PER_THREAD]);
}

impl Facets {
    /// The record of these facets this thread made last, when it holds the same values (the
    /// same shared text and envelope, by address); else a new one, remembered in its place.
    fn shared(self) -> Arc<Facets> {
        // The cache keeps what its records name alive: a text that is not permanent (longer
        // than a symbol may be, or read past the permanent budget) leaves with its attempts.
        // Envelopes are shared by the reader's own table, which keeps up to 1,024 a thread.
        if !self.texts_are_permanent() {
            return Arc::new(self);
        }
        let addresses = self.addresses();
        // Addresses are the process's own, not a client's choice: a multiply-rotate mix is
        // enough.
        let hash = addresses.iter().fold(0u64, |hash, &address| {
            (hash ^ address as u64)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .rotate_left(29)
        });
        let slot = (hash >> 56) as usize % FACETS_PER_THREAD;
        FACETS.with(|cache| {
            let mut cache = cache.borrow_mut();
            let Some(place) = cache.get_mut(slot) else {
                return Arc::new(self);
            };
            match place {
                Some((known, facets)) if *known == addresses => Arc::clone(facets),
                _ => Arc::clone(&place.insert((addresses, Arc::new(self))).1),
            }
        })
    }

    fn texts_are_permanent(&self) -> bool {
        let permanent = |text: &Option<Symbol>| text.as_ref().is_none_or(Symbol::is_static);
        Symbol::is_static(&self.service_name)
            && permanent(&self.request_model)
            && permanent(&self.response_model)
            && permanent(&self.provider)
            && permanent(&self.model_family)
            && permanent(&self.error_type)
            && permanent(&self.scope)
    }

    fn addresses(&self) -> Addresses {
        fn text(symbol: &Option<Symbol>) -> usize {
            symbol.as_ref().map_or(0, |s| s.as_ptr() as usize)
        }
        [
            self.service_name.as_ptr() as usize,
            Arc::as_ptr(&self.envelope) as usize,
            text(&self.request_model),
            text(&self.response_model),
            text(&self.provider),
            text(&self.model_family),
            text(&self.error_type),
            text(&self.scope),
        ]
    }
}

/// What few attempts carry: boxed once for all of it, absent for the rest.
#[derive(Debug, Default)]
struct Rare {
    /// Kept only where the group key does not hold it (a request named by one span).
    request_id: Option<Arc<str>>,
    /// `retry_spend.envelope` as JSON on an attempt: envelopes are stated on logical spans as
    /// a rule, and this field took a pending attempt past 160 bytes.
    envelope_json: Option<Arc<EnvelopeFields>>,
    sdk: Option<Box<SdkFacts>>,
    captured: CapturedAttributes,
    http: Option<Box<HttpFacts>>,
    server_address: Option<Symbol>,
    resend_count: Option<i32>,
    /// A parent other than the group's first attempt's.
    parent_span_id: Option<SpanId>,
    /// Counts when one does not fit a `u32`.
    wide_counts: Option<PackedCounts<5>>,
    /// `(attempt_index, attempt_count)` when one does not fit 16 bits.
    wide_index: Option<(i32, u32)>,
}

impl Rare {
    fn is_empty(&self) -> bool {
        self.request_id.is_none()
            && self.parent_span_id.is_none()
            && self.wide_counts.is_none()
            && self.wide_index.is_none()
            && self.envelope_json.is_none()
            && self.sdk.is_none()
            && self.captured.is_empty()
            && self.http.is_none()
            && self.server_address.is_none()
            && self.resend_count.is_none()
    }
}

const HAS_PARENT: u16 = 1;
const HAS_INDEX: u16 = 1 << 1;
const HAS_COUNT: u16 = 1 << 2;
const REACHED_KNOWN: u16 = 1 << 3;
const REACHED: u16 = 1 << 4;
const FAILED: u16 = 1 << 5;
const STATUS_ERROR: u16 = 1 << 6;
const DECLARED: u16 = 1 << 7;
/// The counts are in [`Rare`].
const WIDE_COUNTS: u16 = 1 << 9;
/// The attempt index and count are in [`Rare`].
const WIDE_INDEX: u16 = 1 << 10;

fn flag(on: bool, bit: u16) -> u16 {
    if on {
        bit
    } else {
        0
    }
}

impl PendingAttempt {
    /// `span` as its group `key` holds it; `key` is the span's own ([`GroupKey::of`]), and
    /// `group_parent` the group's first attempt's parent, this one's included.
    pub(super) fn pack(
        span: SpanFacts,
        key: &GroupKey,
        group_parent: Option<SpanId>,
    ) -> PendingAttempt {
        // Every field by name: a fact added to `SpanFacts` must be given a place here.
        let SpanFacts {
            trace_id: _,
            span_id,
            parent_span_id,
            service_name,
            start_time_unix_nano,
            end_time_unix_nano,
            kind,
            request_id,
            attempt_index,
            attempt_count,
            envelope,
            envelope_json,
            request_model,
            response_model,
            provider,
            model_family,
            input_tokens,
            cached_input_tokens,
            cache_write_input_tokens,
            output_tokens,
            output_cap,
            output_reached_client,
            error_type,
            failed,
            status_error,
            sdk,
            captured,
            http,
            declared,
            scope,
            server_address,
            resend_count,
            usage_origin,
        } = span;
        let counts = [
            input_tokens,
            cached_input_tokens,
            cache_write_input_tokens,
            output_tokens,
            output_cap,
        ];
        let narrow_counts = PackedCounts::<5, u32>::try_new(counts);
        let narrow_index = match (
            attempt_index.map(i16::try_from),
            attempt_count.map(u16::try_from),
        ) {
            (Some(Err(_)), _) | (_, Some(Err(_))) => None,
            (index, count) => Some((
                index.and_then(Result::ok).unwrap_or_default(),
                count.and_then(Result::ok).unwrap_or_default(),
            )),
        };
        let rare = Rare {
            // A request id grouped the span by it: the key holds the same text.
            request_id: request_id.filter(|_| !matches!(key, GroupKey::RequestId { .. })),
            envelope_json,
            sdk,
            captured,
            http,
            server_address,
            resend_count,
            parent_span_id: parent_span_id.filter(|&parent| Some(parent) != group_parent),
            wide_counts: narrow_counts.is_none().then(|| PackedCounts::new(counts)),
            wide_index: narrow_index.is_none().then(|| {
                (
                    attempt_index.unwrap_or_default(),
                    attempt_count.unwrap_or_default(),
                )
            }),
        };
        let (narrow_attempt_index, narrow_attempt_count) = narrow_index.unwrap_or_default();
        let facets = Facets {
            service_name,
            envelope,
            request_model,
            response_model,
            provider,
            model_family,
            error_type,
            scope,
        };
        PendingAttempt {
            span_id,
            facets: facets.shared(),
            start_time_unix_nano,
            end_time_unix_nano,
            counts: narrow_counts.unwrap_or_default(),
            attempt_index: narrow_attempt_index,
            attempt_count: narrow_attempt_count,
            rare: (!rare.is_empty()).then(|| Box::new(rare)),
            flags: flag(parent_span_id.is_some(), HAS_PARENT)
                | flag(attempt_index.is_some(), HAS_INDEX)
                | flag(attempt_count.is_some(), HAS_COUNT)
                | flag(output_reached_client.is_some(), REACHED_KNOWN)
                | flag(output_reached_client == Some(true), REACHED)
                | flag(failed, FAILED)
                | flag(status_error, STATUS_ERROR)
                | flag(declared, DECLARED)
                | flag(narrow_counts.is_none(), WIDE_COUNTS)
                | flag(narrow_index.is_none(), WIDE_INDEX),
            kind,
            usage_origin,
        }
    }

    /// The facts [`PendingAttempt::pack`] was given, under the same `key` and `group_parent`.
    pub(super) fn unpack(self, key: &GroupKey, group_parent: Option<SpanId>) -> SpanFacts {
        let has = |bit: u16| self.flags & bit != 0;
        let Rare {
            request_id,
            envelope_json,
            sdk,
            captured,
            http,
            server_address,
            resend_count,
            parent_span_id,
            wide_counts,
            wide_index,
        } = self.rare.map(|rare| *rare).unwrap_or_default();
        let [input_tokens, cached_input_tokens, cache_write_input_tokens, output_tokens, output_cap] =
            match wide_counts {
                Some(wide) => wide.all(),
                None => self.counts.all(),
            };
        let (attempt_index, attempt_count) =
            wide_index.unwrap_or((i32::from(self.attempt_index), u32::from(self.attempt_count)));
        let request_id = match key {
            GroupKey::RequestId { request_id, .. } => Some(Arc::clone(request_id)),
            GroupKey::Parent { .. } | GroupKey::Single { .. } => request_id,
        };
        let trace_id: TraceId = *key.trace_id();
        let Facets {
            service_name,
            envelope,
            request_model,
            response_model,
            provider,
            model_family,
            error_type,
            scope,
        } = &*self.facets;
        SpanFacts {
            trace_id,
            span_id: self.span_id,
            parent_span_id: has(HAS_PARENT)
                .then(|| parent_span_id.or(group_parent))
                .flatten(),
            service_name: service_name.clone(),
            start_time_unix_nano: self.start_time_unix_nano,
            end_time_unix_nano: self.end_time_unix_nano,
            kind: self.kind,
            request_id,
            attempt_index: has(HAS_INDEX).then_some(attempt_index),
            attempt_count: has(HAS_COUNT).then_some(attempt_count),
            envelope: envelope.clone(),
            envelope_json,
            request_model: request_model.clone(),
            response_model: response_model.clone(),
            provider: provider.clone(),
            model_family: model_family.clone(),
            input_tokens,
            cached_input_tokens,
            cache_write_input_tokens,
            output_tokens,
            output_cap,
            output_reached_client: has(REACHED_KNOWN).then_some(has(REACHED)),
            error_type: error_type.clone(),
            failed: has(FAILED),
            status_error: has(STATUS_ERROR),
            sdk,
            captured,
            http,
            declared: has(DECLARED),
            scope: scope.clone(),
            server_address,
            resend_count,
            usage_origin: self.usage_origin,
        }
    }

    pub(super) fn span_id(&self) -> SpanId {
        self.span_id
    }

    /// Estimated bytes this record keeps alive: itself, what it boxes, and an envelope of its
    /// own (see [`SpanFacts::retained_bytes`]).
    pub(super) fn retained_bytes(&self) -> usize {
        let rare = self.rare.as_deref().map_or(0, |rare| {
            std::mem::size_of::<Rare>()
                + rare.request_id.as_ref().map_or(0, |id| id.len() + 16)
                + rare
                    .envelope_json
                    .as_ref()
                    .map_or(0, EnvelopeFields::retained_bytes)
                + rare.sdk.as_ref().map_or(0, |sdk| {
                    std::mem::size_of::<SdkFacts>()
                        + sdk.decision_reason.as_ref().map_or(0, String::capacity)
                })
                + rare.captured.heap_bytes()
                + rare.http.as_ref().map_or(0, |http| {
                    std::mem::size_of::<HttpFacts>()
                        + http.host.as_ref().map_or(0, String::capacity)
                })
        });
        // The first attempt to hold a record counts it (the thread's cache holds the other). An
        // estimate: if that attempt leaves first, the record stays uncounted while others hold
        // it (one record, 80 bytes, for each of a thread's 256 places at most).
        let facets = if Arc::strong_count(&self.facets) <= 2 {
            std::mem::size_of::<Facets>()
                + 16
                + EnvelopeFields::retained_bytes(&self.facets.envelope)
        } else {
            0
        };
        std::mem::size_of::<PendingAttempt>() + rare + facets
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::contract::Count;

    #[test]
    fn attempts_fit_the_allocators_size_classes() {
        // mimalloc's classes run ..., 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448,
        // 512, 640: at 176 bytes an attempt one took 192, two 384 and three 640; at 128, three
        // took 384; at 72, three take 224.
        assert!(std::mem::size_of::<PendingAttempt>() <= 72);
    }

    fn count() -> impl Strategy<Value = Count> {
        prop_oneof![
            Just(Count::Missing),
            Just(Count::OutOfRange),
            any::<i64>().prop_map(Count::Value),
            // Most counts fit the narrow field; its edges too.
            (0..=i64::from(u32::MAX)).prop_map(Count::Value),
            Just(Count::Value(i64::from(u32::MAX) + 1)),
        ]
    }

    fn index_count() -> impl Strategy<Value = (Option<i32>, Option<u32>, Option<i32>)> {
        prop_oneof![
            any::<(Option<i32>, Option<u32>, Option<i32>)>(),
            (
                prop::option::of(-2..=i32::from(i16::MAX) + 1),
                prop::option::of(0..=u32::from(u16::MAX) + 1),
                any::<Option<i32>>(),
            ),
        ]
    }

    fn symbol() -> impl Strategy<Value = Option<Symbol>> {
        prop::option::of("[a-z0-9.-]{0,12}".prop_map(|s| Symbol::from(s.as_str())))
    }

    fn kind() -> impl Strategy<Value = SpanKind> {
        prop_oneof![
            Just(SpanKind::Attempt),
            Just(SpanKind::SingleAttempt),
            Just(SpanKind::DeclaredSingle),
        ]
    }

    prop_compose! {
        fn facts()(
            ids in any::<([u8; 16], [u8; 8], Option<[u8; 8]>)>(),
            times in any::<(u64, u64)>(),
            kind in kind(),
            request_id in prop::option::of("[a-z0-9-]{0,8}"),
            index_count in index_count(),
            counts in [count(), count(), count(), count(), count()],
            flags in any::<(Option<bool>, bool, bool, bool)>(),
            symbols in [symbol(), symbol(), symbol(), symbol(), symbol(), symbol(), symbol()],
            sdk in prop::option::of(prop::option::of("[a-z ]{0,8}")),
            http in prop::option::of((prop::option::of("[a-z.]{1,8}"), any::<Option<i64>>())),
            captured in prop::collection::vec(("[a-z.]{1,6}", "[a-z]{0,6}"), 0..3),
            envelope_json in any::<bool>(),
            usage in prop_oneof![
                Just(UsageOrigin::Span),
                Just(UsageOrigin::Call),
                Just(UsageOrigin::Borrowed)
            ],
        ) -> SpanFacts {
            let [request_model, response_model, provider, model_family, error_type, scope, server_address] =
                symbols;
            let [input_tokens, cached_input_tokens, cache_write_input_tokens, output_tokens, output_cap] =
                counts;
            let mut span = SpanFacts::blank("svc".into());
            span.trace_id = ids.0;
            span.span_id = ids.1;
            span.parent_span_id = ids.2;
            (span.start_time_unix_nano, span.end_time_unix_nano) = times;
            span.kind = kind;
            span.request_id = request_id.map(Arc::from);
            (span.attempt_index, span.attempt_count, span.resend_count) = index_count;
            span.input_tokens = input_tokens;
            span.cached_input_tokens = cached_input_tokens;
            span.cache_write_input_tokens = cache_write_input_tokens;
            span.output_tokens = output_tokens;
            span.output_cap = output_cap;
            (span.output_reached_client, span.failed, span.status_error, span.declared) = flags;
            span.request_model = request_model;
            span.response_model = response_model;
            span.provider = provider;
            span.model_family = model_family;
            span.error_type = error_type;
            span.scope = scope;
            span.server_address = server_address;
            span.sdk = sdk.map(|reason| Box::new(SdkFacts {
                decision_reason: reason,
                ..SdkFacts::default()
            }));
            span.http = http.map(|(host, status_code)| Box::new(HttpFacts {
                host,
                status_code,
                ..HttpFacts::default()
            }));
            span.captured = CapturedAttributes::from_pairs(captured);
            if envelope_json {
                span.envelope_json = Some(Arc::new(EnvelopeFields {
                    present: true,
                    ..EnvelopeFields::default()
                }));
            }
            span.usage_origin = usage;
            span
        }
    }

    proptest! {
        #[test]
        fn an_attempt_unpacks_to_the_facts_it_was_packed_from(
            span in facts(),
            group_parent in any::<Option<[u8; 8]>>(),
            groups_own in any::<bool>(),
        ) {
            let Some(key) = GroupKey::of(&span) else {
                return Err(TestCaseError::fail("an attempt kind has a key"));
            };
            // As a rule the attempt's parent is its group's.
            let group_parent = if groups_own { span.parent_span_id } else { group_parent };
            let packed = PendingAttempt::pack(span.clone(), &key, group_parent);
            prop_assert_eq!(packed.unpack(&key, group_parent), span);
        }
    }

    #[test]
    fn a_plain_declared_attempt_is_held_without_a_box() {
        let mut span = SpanFacts::blank("svc".into());
        span.kind = SpanKind::Attempt;
        span.request_id = Some(Arc::from("req-1"));
        span.request_model = Some("gpt-4o".into());
        span.input_tokens = Count::Value(1200);
        let key = GroupKey::of(&span).expect("an attempt has a key");
        let parent = Some([7; 8]);
        span.parent_span_id = parent;
        let packed = PendingAttempt::pack(span, &key, parent);
        assert!(packed.rare.is_none());
        assert!(std::mem::size_of::<PendingAttempt>() < std::mem::size_of::<SpanFacts>());
    }

    fn declared_attempt(error_type: Option<&str>) -> (SpanFacts, GroupKey) {
        let mut span = SpanFacts::blank(crate::symbol::symbol("svc"));
        span.kind = SpanKind::Attempt;
        span.request_id = Some(Arc::from("req-1"));
        span.request_model = Some(crate::symbol::symbol("gpt-4o"));
        span.provider = Some(crate::symbol::symbol("openai"));
        span.error_type = error_type.map(crate::symbol::symbol);
        let key = GroupKey::of(&span).expect("an attempt has a key");
        (span, key)
    }

    #[test]
    fn attempts_that_repeat_their_facets_share_one_record_and_count_it_once() {
        let (first, key) = declared_attempt(Some("rate_limit"));
        let (second, _) = declared_attempt(Some("rate_limit"));
        let (answer, _) = declared_attempt(None);
        // The byte budget counts a record with the first attempt holding it, not the second
        // (counted as each is packed: a later record may take the first's place in the cache).
        let (alone, shared) = (
            std::mem::size_of::<PendingAttempt>(),
            std::mem::size_of::<Facets>() + 16,
        );
        let a = PendingAttempt::pack(first.clone(), &key, None);
        assert_eq!(a.retained_bytes(), alone + shared);
        let b = PendingAttempt::pack(second.clone(), &key, None);
        assert_eq!(b.retained_bytes(), alone);
        let c = PendingAttempt::pack(answer.clone(), &key, None);
        assert_eq!(c.retained_bytes(), alone + shared);
        assert!(Arc::ptr_eq(&a.facets, &b.facets));
        assert!(!Arc::ptr_eq(&a.facets, &c.facets));
        assert_eq!(a.unpack(&key, None), first);
        assert_eq!(b.unpack(&key, None), second);
        assert_eq!(c.unpack(&key, None), answer);
    }

    #[test]
    fn texts_that_are_not_permanent_are_not_kept_by_the_cache() {
        // Longer than a symbol may be: counted, not permanent, so no cache place may keep it.
        let long = Symbol::from("e".repeat(300));
        assert!(!Symbol::is_static(&long));
        let (mut span, key) = declared_attempt(None);
        span.error_type = Some(long.clone());
        let a = PendingAttempt::pack(span.clone(), &key, None);
        let b = PendingAttempt::pack(span.clone(), &key, None);
        assert!(!Arc::ptr_eq(&a.facets, &b.facets));
        assert_eq!(Arc::strong_count(&a.facets), 1);
        assert_eq!(a.unpack(&key, None), span);
        drop((b, span));
        assert_eq!(
            Symbol::strong_count(&long),
            Some(1),
            "only the test holds it now"
        );
    }

    #[test]
    fn facets_past_the_threads_cache_each_unpack_to_their_own() {
        // More distinct values than the cache has places: records are replaced, never mixed up.
        let spans: Vec<(SpanFacts, GroupKey)> = (0..FACETS_PER_THREAD * 4)
            .map(|n| declared_attempt(Some(&format!("error-{n}"))))
            .collect();
        let packed: Vec<PendingAttempt> = spans
            .iter()
            .map(|(span, key)| PendingAttempt::pack(span.clone(), key, None))
            .collect();
        for ((span, key), attempt) in spans.into_iter().zip(packed) {
            assert_eq!(attempt.unpack(&key, None), span);
        }
    }
}
