//! The span contract (SPEC §2): attribute names, and reading one OTLP span into typed facts.
//!
//! Reading never fails: a value of the wrong type or out of range is kept as "missing" or
//! "invalid" here, and the rules turn it into the row's `unaudited_reason`.

pub mod otlp_json;
pub mod wire;

use std::collections::BTreeSet;
use std::str::FromStr;
use std::sync::Arc;

use chrono::NaiveDate;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::span::SpanKind as OtlpSpanKind;
use opentelemetry_proto::tonic::trace::v1::{status::StatusCode, Span};
use rust_decimal::{Decimal, RoundingStrategy};
use serde_json::value::RawValue;

use crate::pricing::parse_date;
pub use crate::symbol::{symbol, Symbol};

/// Attribute names, one constant each.
pub mod attr {
    pub const SPAN_ROLE: &str = "retry_spend.span.role";
    pub const REQUEST_ID: &str = "retry_spend.request.id";
    pub const ATTEMPT_INDEX: &str = "retry_spend.attempt.index";
    pub const ATTEMPT_COUNT: &str = "retry_spend.attempt_count";
    pub const ATTEMPT_MODEL_FAMILY: &str = "retry_spend.attempt.model_family";
    pub const OUTPUT_REACHED_CLIENT: &str = "retry_spend.attempt.output_reached_client";

    pub const PRICING_SOURCE: &str = "retry_spend.pricing.source";
    pub const PRICING_CHECKED_AT: &str = "retry_spend.pricing.checked_at";
    pub const PRICING_VERSION: &str = "retry_spend.pricing.version";
    pub const BILLING_GROUP: &str = "retry_spend.billing_group";
    pub const MAX_INCREMENTAL_USD: &str = "retry_spend.envelope.max_incremental_usd";
    pub const MAX_ATTEMPTS_AFTER_FIRST: &str = "retry_spend.envelope.max_attempts_after_first";
    pub const ALLOW_FAMILY_FALLBACK: &str = "retry_spend.envelope.allow_family_fallback";
    pub const ALLOWED_FALLBACK_FAMILIES: &str = "retry_spend.envelope.allowed_fallback_families";
    pub const REPLAY_SAFE: &str = "retry_spend.envelope.replay_safe";
    pub const TASK_TYPE: &str = "retry_spend.task.type";
    pub const ENVELOPE_JSON: &str = "retry_spend.envelope";

    pub const SDK_ESTIMATED_INCREMENTAL_USD: &str = "retry_spend.sdk.estimated_incremental_usd";
    pub const SDK_REMAINING_ENVELOPE_USD: &str = "retry_spend.sdk.remaining_envelope_usd";
    pub const SDK_DECISION_REASON: &str = "retry_spend.sdk.decision_reason";

    pub const REQUEST_MODEL: &str = "gen_ai.request.model";
    pub const RESPONSE_MODEL: &str = "gen_ai.response.model";
    pub const PROVIDER_NAME: &str = "gen_ai.provider.name";
    pub const LEGACY_SYSTEM: &str = "gen_ai.system";
    pub const INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
    pub const LEGACY_PROMPT_TOKENS: &str = "gen_ai.usage.prompt_tokens";
    pub const CACHE_READ_INPUT_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";
    pub const LEGACY_CACHE_READ_INPUT_TOKENS: &str = "gen_ai.usage.cache_read_input_tokens";
    pub const OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
    pub const LEGACY_COMPLETION_TOKENS: &str = "gen_ai.usage.completion_tokens";
    pub const REQUEST_MAX_TOKENS: &str = "gen_ai.request.max_tokens";
    pub const CACHE_CREATION_INPUT_TOKENS: &str = "gen_ai.usage.cache_creation.input_tokens";
    pub const LEGACY_CACHE_CREATION_INPUT_TOKENS: &str = "gen_ai.usage.cache_creation_input_tokens";
    /// The Vercel AI SDK's cached input counts.
    pub const AI_CACHED_INPUT_TOKENS: &str = "ai.usage.cachedInputTokens";
    pub const AI_CACHE_READ_TOKENS: &str = "ai.usage.inputTokenDetails.cacheReadTokens";
    /// The Vercel AI SDK's operation id: its call spans are `ai.generateText` and kin.
    pub const AI_OPERATION_ID: &str = "ai.operationId";
    pub const OPERATION_NAME: &str = "gen_ai.operation.name";
    pub const SERVER_ADDRESS: &str = "server.address";
    pub const URL_FULL: &str = "url.full";
    pub const LEGACY_HTTP_URL: &str = "http.url";
    pub const ASSUMED_OUTPUT_CAP: &str = "retry_spend.envelope.assumed_output_cap";
    pub const ERROR_TYPE: &str = "error.type";
    pub const SERVICE_NAME: &str = "service.name";

    pub const HTTP_REQUEST_METHOD: &str = "http.request.method";
    pub const LEGACY_HTTP_METHOD: &str = "http.method";
    pub const HTTP_RESEND_COUNT: &str = "http.request.resend_count";
    pub const HTTP_RESPONSE_STATUS_CODE: &str = "http.response.status_code";
    pub const LEGACY_HTTP_STATUS_CODE: &str = "http.status_code";

    /// Every attribute key the contract reads, for `known_key`.
    pub const KEYS: [&str; 48] = [
        SPAN_ROLE,
        REQUEST_ID,
        ATTEMPT_INDEX,
        ATTEMPT_COUNT,
        ATTEMPT_MODEL_FAMILY,
        OUTPUT_REACHED_CLIENT,
        PRICING_SOURCE,
        PRICING_CHECKED_AT,
        PRICING_VERSION,
        BILLING_GROUP,
        MAX_INCREMENTAL_USD,
        MAX_ATTEMPTS_AFTER_FIRST,
        ALLOW_FAMILY_FALLBACK,
        ALLOWED_FALLBACK_FAMILIES,
        REPLAY_SAFE,
        TASK_TYPE,
        ENVELOPE_JSON,
        SDK_ESTIMATED_INCREMENTAL_USD,
        SDK_REMAINING_ENVELOPE_USD,
        SDK_DECISION_REASON,
        REQUEST_MODEL,
        RESPONSE_MODEL,
        PROVIDER_NAME,
        LEGACY_SYSTEM,
        INPUT_TOKENS,
        LEGACY_PROMPT_TOKENS,
        CACHE_READ_INPUT_TOKENS,
        LEGACY_CACHE_READ_INPUT_TOKENS,
        OUTPUT_TOKENS,
        LEGACY_COMPLETION_TOKENS,
        REQUEST_MAX_TOKENS,
        CACHE_CREATION_INPUT_TOKENS,
        LEGACY_CACHE_CREATION_INPUT_TOKENS,
        AI_CACHED_INPUT_TOKENS,
        AI_CACHE_READ_TOKENS,
        AI_OPERATION_ID,
        OPERATION_NAME,
        SERVER_ADDRESS,
        URL_FULL,
        LEGACY_HTTP_URL,
        ASSUMED_OUTPUT_CAP,
        ERROR_TYPE,
        SERVICE_NAME,
        HTTP_REQUEST_METHOD,
        LEGACY_HTTP_METHOD,
        HTTP_RESEND_COUNT,
        HTTP_RESPONSE_STATUS_CODE,
        LEGACY_HTTP_STATUS_CODE,
    ];

    /// `gen_ai.operation.name` values of a model span (absent counts too).
    pub const MODEL_OPERATIONS: [&str; 3] = ["chat", "text_completion", "generate_content"];
    /// `ai.operationId` values of a Vercel AI SDK call span.
    pub const CALL_OPERATIONS: [&str; 4] = [
        "ai.generateText",
        "ai.streamText",
        "ai.generateObject",
        "ai.streamObject",
    ];

    pub const ROLE_LOGICAL_REQUEST: &str = "logical_request";
    pub const ROLE_ATTEMPT: &str = "attempt";
    /// `error.type` when the span status is ERROR and names no type.
    pub const ERROR_TYPE_OTHER: &str = "_OTHER";
    pub const UNKNOWN_SERVICE: &str = "unknown_service";
}

/// Token counts above 2^53 cannot come from a real request; they are flagged as invalid usage.
pub const MAX_TOKEN_COUNT: i64 = 1 << 53;

/// The key `bytes` spell when it is one the contract reads ([`attr::KEYS`]), as static text:
/// such a key read from the wire needs no UTF-8 check, and checking every key was 3.8% of
/// `serve`'s instructions (BENCHMARKS.md, issue 18, twentieth pass). Any other key is checked
/// as before.
pub(crate) fn known_key(bytes: &[u8]) -> Option<&'static str> {
    // Keys of one length share their prefix (`retry_spend.`, `gen_ai.`) and differ near the
    // end: their last eight bytes pick the candidate, one comparison confirms it.
    static BY_LENGTH: std::sync::OnceLock<Vec<Vec<(u64, &'static str)>>> =
        std::sync::OnceLock::new();
    let by_length = BY_LENGTH.get_or_init(|| {
        let mut table: Vec<Vec<(u64, &'static str)>> = Vec::new();
        for key in attr::KEYS {
            if table.len() <= key.len() {
                table.resize(key.len() + 1, Vec::new());
            }
            if let Some(same_length) = table.get_mut(key.len()) {
                same_length.push((key_tail(key.as_bytes()), key));
            }
        }
        table
    });
    let tail = key_tail(bytes);
    by_length
        .get(bytes.len())?
        .iter()
        .find(|(t, key)| *t == tail && same_head(key.as_bytes(), bytes))
        .map(|&(_, key)| key)
}

/// Whether keys of one length whose tails ([`key_tail`]) are equal are equal: their whole
/// eight-byte words are compared inline (the tail covers the rest), where a call to `memcmp`
/// per key was 1.3% of `serve`.
fn same_head(a: &[u8], b: &[u8]) -> bool {
    let word = |chunk: &[u8]| chunk.try_into().map(u64::from_le_bytes).ok();
    a.len() == b.len()
        && a.chunks_exact(8)
            .zip(b.chunks_exact(8))
            .all(|(x, y)| word(x) == word(y))
}

/// The last eight bytes of a key (fewer, zero-padded, for a shorter one).
fn key_tail(bytes: &[u8]) -> u64 {
    let from = bytes.len().saturating_sub(8);
    let mut tail = [0u8; 8];
    if let (Some(end), Some(into)) = (bytes.get(from..), tail.get_mut(..bytes.len() - from)) {
        into.copy_from_slice(end);
    }
    u64::from_le_bytes(tail)
}

pub type TraceId = [u8; 16];
pub type SpanId = [u8; 8];

/// An integer attribute as read: absent or unparseable values are `Missing`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Count {
    #[default]
    Missing,
    Value(i64),
    /// A number that does not fit an i64 at all.
    OutOfRange,
}

impl Count {
    pub fn value(self) -> Option<i64> {
        match self {
            Count::Value(v) => Some(v),
            _ => None,
        }
    }

    /// Negative, absurdly large, or beyond i64: not a usage a provider bills.
    pub fn is_invalid_usage(self) -> bool {
        match self {
            Count::Value(v) => !(0..=MAX_TOKEN_COUNT).contains(&v),
            Count::OutOfRange => true,
            Count::Missing => false,
        }
    }
}

/// What role a span plays in the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    LogicalRequest,
    Attempt,
    /// A model span (a GenAI span of a model operation) with no role, index or request id: a
    /// request of one attempt, unless inference (SPEC §2, "Attempts inferred from plain
    /// instrumentation") makes it part of a larger one.
    SingleAttempt,
    /// A Vercel AI SDK call span (`ai.operationId` `ai.generateText` and kin): it wraps the
    /// tries of one call; inference reads its status and envelope, it makes no row itself.
    CallSpan,
    /// A GenAI span whose `retry_spend.span.role` or `retry_spend.request.id` cannot group it (an
    /// unknown role, a request id of another type): a request of one attempt that inference
    /// leaves alone, since declared attempts always win.
    DeclaredSingle,
    /// An HTTP client span (kind CLIENT, an HTTP method) that is no GenAI span: passed through,
    /// unless inference makes it an attempt of the GenAI span above it. See [`HttpTry`].
    HttpTry,
    /// Not ours (a GenAI span of another operation included): forwarded untouched, never a row.
    Passthrough,
}

/// `N` counts in 8 bytes each (or narrower values, `V`) and two bits more: a [`Count`] alone
/// takes 16, and held spans keep four or five of them (BENCHMARKS.md, issue 18, seventeenth
/// pass). Aligned to 4 bytes, so the two bytes of kinds share a word with the holder's small
/// fields: a [`ContextSpan`](crate::assemble::summary::ContextSpan) takes 136 bytes, not 144. A
/// pending attempt keeps its counts as `u32`s (`PackedCounts<5, u32>`, 24 bytes), the rare
/// wider ones as `i64`s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(C, packed(4))]
pub struct PackedCounts<const N: usize, V = i64> {
    values: [V; N],
    /// Two bits a count: [`PackedCounts::MISSING`], `VALUE` or `OUT_OF_RANGE`.
    kinds: u16,
}

impl<const N: usize, V: Copy + Default> Default for PackedCounts<N, V> {
    fn default() -> Self {
        // Every count missing.
        PackedCounts {
            values: [V::default(); N],
            kinds: 0,
        }
    }
}

impl<const N: usize, V: Copy + Default + TryFrom<i64> + Into<i64>> PackedCounts<N, V> {
    const MISSING: u16 = 0;
    const VALUE: u16 = 1;
    const OUT_OF_RANGE: u16 = 2;

    /// `counts` packed; `None` when a value does not fit `V`.
    pub fn try_new(counts: [Count; N]) -> Option<PackedCounts<N, V>> {
        // Two bits a count in a `u16`.
        const { assert!(N <= 8) };
        let mut packed = PackedCounts::default();
        for (i, count) in counts.into_iter().enumerate() {
            packed.try_set(i, count)?;
        }
        Some(packed)
    }

    /// Count `i`; `Missing` past the last.
    pub fn get(&self, i: usize) -> Count {
        // Fields of a packed struct are read by copy, never by reference.
        let values = self.values;
        match (self.kinds >> (2 * i)) & 0b11 {
            Self::VALUE => values
                .get(i)
                .map_or(Count::Missing, |&v| Count::Value(v.into())),
            Self::OUT_OF_RANGE => Count::OutOfRange,
            _ => Count::Missing,
        }
    }

    /// Sets count `i` (past the last, nothing); `None`, setting nothing, when its value does
    /// not fit `V`.
    pub fn try_set(&mut self, i: usize, count: Count) -> Option<()> {
        let mut values = self.values;
        let Some(value) = values.get_mut(i) else {
            return Some(());
        };
        let (v, kind) = match count {
            Count::Missing => (V::default(), Self::MISSING),
            Count::Value(v) => (V::try_from(v).ok()?, Self::VALUE),
            Count::OutOfRange => (V::default(), Self::OUT_OF_RANGE),
        };
        *value = v;
        self.values = values;
        self.kinds = (self.kinds & !(0b11 << (2 * i))) | (kind << (2 * i));
        Some(())
    }

    pub fn all(&self) -> [Count; N] {
        std::array::from_fn(|i| self.get(i))
    }
}

impl<const N: usize> PackedCounts<N> {
    pub fn new(counts: [Count; N]) -> PackedCounts<N> {
        // Two bits a count in a `u16`.
        const { assert!(N <= 8) };
        let mut packed = PackedCounts::default();
        for (i, count) in counts.into_iter().enumerate() {
            packed.set(i, count);
        }
        packed
    }

    /// Sets count `i`; past the last, nothing.
    pub fn set(&mut self, i: usize, count: Count) {
        // Every count's value fits an `i64`.
        let _ = self.try_set(i, count);
    }
}

/// Envelope fields as one source (a span's flat attributes, or its JSON policy) gives them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct EnvelopeFields {
    /// Any envelope attribute other than `task.type` was there, parseable or not.
    pub present: bool,
    /// The JSON form was there but did not parse as an object.
    pub json_invalid: bool,
    /// Text fields are shared: every row of the request copies them into its own.
    pub pricing_source: Option<Symbol>,
    pub pricing_checked_at: Option<NaiveDate>,
    pub pricing_version: Option<Symbol>,
    pub billing_group: Option<Symbol>,
    pub max_incremental_usd: Option<Decimal>,
    pub max_attempts_after_first: Option<i32>,
    pub allow_family_fallback: Option<bool>,
    pub allowed_fallback_families: Option<Vec<String>>,
    pub replay_safe: Option<bool>,
    /// The output cap to plan with for attempts that state none (SPEC §4). Like `task_type`, it
    /// does not make an envelope present by itself.
    pub assumed_output_cap: Option<i64>,
    pub task_type: Option<Symbol>,
}

/// Distinct envelopes each reading thread remembers. A service states the same few envelopes
/// on every request (they come from its policy), so one copy serves thousands of held spans;
/// past this many the memory starts afresh rather than grow with hostile input.
const INTERNED_ENVELOPES: usize = 1024;

/// One reading thread's shared copies of values it has read before (envelopes, symbols).
type Interned<T> = std::cell::RefCell<std::collections::HashSet<Arc<T>, ahash::RandomState>>;

thread_local! {
    static ENVELOPES: Interned<EnvelopeFields> = Interned::default();
    /// The envelope this thread read last: requests of one service state the same one in
    /// turn, and comparing with it is cheaper than hashing every field to find it. Weak, so
    /// sharing counts (which the byte estimates read) are those of the table alone; and the
    /// table is only ever cleared to take a new envelope, which then becomes the last, so the
    /// last one is always in the table.
    static LAST_ENVELOPE: std::cell::RefCell<std::sync::Weak<EnvelopeFields>> =
        const { std::cell::RefCell::new(std::sync::Weak::new()) };
}

/// The shared copy of `value` if `table` holds one, else a new one it then holds. Past `limit`
/// values the table starts afresh rather than grow with hostile input.
fn intern<T, V>(table: &Interned<T>, value: V, limit: usize) -> Arc<T>
where
    T: ?Sized + Eq + std::hash::Hash,
    V: std::borrow::Borrow<T> + Into<Arc<T>>,
{
    let mut known = table.borrow_mut();
    if let Some(shared) = known.get(value.borrow()) {
        return Arc::clone(shared);
    }
    if known.len() >= limit {
        known.clear();
    }
    let shared: Arc<T> = value.into();
    known.insert(Arc::clone(&shared));
    shared
}

/// The shared copy of an envelope this thread has read before, else a new one.
fn intern_envelope(env: EnvelopeFields) -> Arc<EnvelopeFields> {
    LAST_ENVELOPE.with(|last| {
        let mut last = last.borrow_mut();
        if let Some(shared) = last.upgrade().filter(|shared| **shared == env) {
            return shared;
        }
        let shared = ENVELOPES.with(|table| intern(table, env, INTERNED_ENVELOPES));
        *last = Arc::downgrade(&shared);
        shared
    })
}

impl EnvelopeFields {
    /// Whether nothing was read: `== EnvelopeFields::default()` without building and dropping
    /// one for every span read.
    pub fn is_unstated(&self) -> bool {
        // Every field by name: a field added must be given its test here.
        let EnvelopeFields {
            present,
            json_invalid,
            pricing_source,
            pricing_checked_at,
            pricing_version,
            billing_group,
            max_incremental_usd,
            max_attempts_after_first,
            allow_family_fallback,
            allowed_fallback_families,
            replay_safe,
            assumed_output_cap,
            task_type,
        } = self;
        !present
            && !json_invalid
            && pricing_source.is_none()
            && pricing_checked_at.is_none()
            && pricing_version.is_none()
            && billing_group.is_none()
            && max_incremental_usd.is_none()
            && max_attempts_after_first.is_none()
            && allow_family_fallback.is_none()
            && allowed_fallback_families.is_none()
            && replay_safe.is_none()
            && assumed_output_cap.is_none()
            && task_type.is_none()
    }

    /// Estimated bytes a holder of `envelope` keeps alive: an envelope many spans share
    /// (interned) is paid for once, so only one held by at most two is counted.
    pub fn retained_bytes(envelope: &Arc<EnvelopeFields>) -> usize {
        if (envelope.present || envelope.task_type.is_some()) && Arc::strong_count(envelope) <= 2 {
            std::mem::size_of::<EnvelopeFields>() + 64
        } else {
            0
        }
    }

    /// The shared value of a span that states no envelope.
    pub fn empty() -> Arc<EnvelopeFields> {
        static EMPTY: std::sync::LazyLock<Arc<EnvelopeFields>> =
            std::sync::LazyLock::new(Arc::default);
        Arc::clone(&EMPTY)
    }
}

/// Where an attempt's input count came from (the `usage_source` column, SPEC §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UsageOrigin {
    /// The attempt's own span reports it.
    #[default]
    Span,
    /// The call's nest reports it for every try (an inner span, or the outer one for its tries).
    Call,
    /// Borrowed from another attempt of the request (step 6).
    Borrowed,
}

/// What the rules need from one span, read once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanFacts {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    pub parent_span_id: Option<SpanId>,
    pub service_name: Symbol,
    pub start_time_unix_nano: u64,
    pub end_time_unix_nano: u64,
    pub kind: SpanKind,
    /// Unique per request, but shared by its group key, its maps and its rows.
    pub request_id: Option<Arc<str>>,
    /// `None` when absent, negative or not an int32: the group is then indexed by start time.
    pub attempt_index: Option<i32>,
    pub attempt_count: Option<u32>,
    /// Behind an `Arc`: most attempts state no envelope and share one empty value, and a
    /// request's spans are held for seconds, so the 160 bytes inline would dominate them.
    pub envelope: Arc<EnvelopeFields>,
    /// The `retry_spend.envelope` JSON policy, when the span carries one.
    pub envelope_json: Option<Arc<EnvelopeFields>>,
    pub request_model: Option<Symbol>,
    pub response_model: Option<Symbol>,
    pub provider: Option<Symbol>,
    pub model_family: Option<Symbol>,
    pub input_tokens: Count,
    pub cached_input_tokens: Count,
    /// Tokens written to a provider cache: a subset of `input_tokens`.
    pub cache_write_input_tokens: Count,
    pub output_tokens: Count,
    pub output_cap: Count,
    pub output_reached_client: Option<bool>,
    /// Declared attempts: `error.type`, else `_OTHER` when the status is ERROR. Model spans:
    /// the try rule of SPEC §2 (an HTTP status of 400 or more before `_OTHER`).
    pub error_type: Option<Symbol>,
    /// The span has `error.type` or status ERROR (inference's "failed").
    pub failed: bool,
    /// The span status is ERROR (a call span's "failed").
    pub status_error: bool,
    /// What the retry-spend SDK stated; boxed, as most spans state none of it and every
    /// pending span would carry its 64 bytes inline.
    pub sdk: Option<Box<SdkFacts>>,
    /// Span and resource attributes an envelope policy matches on; empty unless read with
    /// [`SpanFacts::from_span_with`] and keys.
    pub captured: CapturedAttributes,
    /// What an HTTP client try ([`SpanKind::HttpTry`]) tells inference; `None` on other spans.
    pub http: Option<Box<HttpFacts>>,
    /// The span carries `retry_spend.span.role`, `retry_spend.request.id` or
    /// `retry_spend.attempt.index`: it and everything below it take no part in inference.
    pub declared: bool,
    /// The name of the instrumentation scope that emitted the span.
    pub scope: Option<Symbol>,
    /// `server.address`.
    pub server_address: Option<Symbol>,
    /// `http.request.resend_count`; `None` when absent or not a non-negative int32.
    pub resend_count: Option<i32>,
    /// Set by inference: where `input_tokens` came from.
    pub usage_origin: UsageOrigin,
}

impl Default for SpanFacts {
    /// A passthrough span of no service with nothing read: a base for tests and tools.
    fn default() -> Self {
        SpanFacts::blank(unknown_service())
    }
}

impl SpanFacts {
    /// A passthrough span of `service_name` with nothing read: what a reader starts from.
    pub fn blank(service_name: Symbol) -> SpanFacts {
        SpanFacts {
            trace_id: [0; 16],
            span_id: [0; 8],
            parent_span_id: None,
            service_name,
            start_time_unix_nano: 0,
            end_time_unix_nano: 0,
            kind: SpanKind::Passthrough,
            request_id: None,
            attempt_index: None,
            attempt_count: None,
            envelope: EnvelopeFields::empty(),
            envelope_json: None,
            request_model: None,
            response_model: None,
            provider: None,
            model_family: None,
            input_tokens: Count::Missing,
            cached_input_tokens: Count::Missing,
            cache_write_input_tokens: Count::Missing,
            output_tokens: Count::Missing,
            output_cap: Count::Missing,
            output_reached_client: None,
            error_type: None,
            failed: false,
            status_error: false,
            sdk: None,
            captured: CapturedAttributes::default(),
            http: None,
            declared: false,
            scope: None,
            server_address: None,
            resend_count: None,
            usage_origin: UsageOrigin::Span,
        }
    }
}

/// The `retry_spend.sdk.*` attributes: what the SDK estimated and decided before the retry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SdkFacts {
    pub estimated_incremental_usd: Option<Decimal>,
    pub remaining_envelope_usd: Option<Decimal>,
    pub decision_reason: Option<String>,
}

/// The HTTP attributes of a client try, read with the rest of the span.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpFacts {
    /// `server.address`, else the host of `url.full` (legacy `http.url`).
    pub host: Option<String>,
    /// `http.response.status_code`, else the legacy `http.status_code`.
    pub status_code: Option<i64>,
    /// The `error.type` attribute itself (the span's `error_type` may be `_OTHER` from status).
    pub error_type: Option<Symbol>,
    pub status_error: bool,
}

/// The attribute keys envelope policies name in `match.attributes`: the span reader keeps the
/// values of these keys, and of no others.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AttributeKeys(BTreeSet<String>);

impl AttributeKeys {
    /// No keys: nothing is captured.
    pub const NONE: AttributeKeys = AttributeKeys(BTreeSet::new());

    pub fn new(keys: impl IntoIterator<Item = String>) -> AttributeKeys {
        AttributeKeys(keys.into_iter().collect())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn contains(&self, key: &str) -> bool {
        self.0.contains(key)
    }
}

/// The attribute keys the loaded policies name, shared by the receivers (which read spans) and
/// the collector (which replaces them when policies are reloaded).
#[derive(Debug, Default)]
pub struct SharedAttributeKeys(std::sync::RwLock<Arc<AttributeKeys>>);

impl SharedAttributeKeys {
    pub fn new(keys: AttributeKeys) -> Arc<SharedAttributeKeys> {
        Arc::new(SharedAttributeKeys(std::sync::RwLock::new(Arc::new(keys))))
    }

    pub fn get(&self) -> Arc<AttributeKeys> {
        // A poisoned lock still holds the last keys set, which are valid.
        Arc::clone(&self.0.read().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn set(&self, keys: AttributeKeys) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(keys);
    }
}

/// (key, value in string form) pairs of a span's and its resource's attributes whose key is one
/// of the [`AttributeKeys`]. Empty (and unallocated) when no policy names an attribute; boxed, so
/// the usual empty one costs a span one pointer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
// The box is the point: a pointer inline, where a `Vec` is three words on every held span.
#[allow(clippy::box_collection)]
pub struct CapturedAttributes(Option<Box<Vec<(String, String)>>>);

impl CapturedAttributes {
    /// Whether the span or its resource has `key` with this value in string form.
    pub fn has(&self, key: &str, value: &str) -> bool {
        self.iter().any(|(k, v)| k == key && v == value)
    }

    pub fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|pairs| pairs.is_empty())
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0
            .iter()
            .flat_map(|pairs| pairs.iter())
            .map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Values read back from a saved summary of a finished request.
    pub fn from_pairs(pairs: Vec<(String, String)>) -> CapturedAttributes {
        CapturedAttributes((!pairs.is_empty()).then(|| Box::new(pairs)))
    }

    /// Estimated heap bytes of the kept values.
    pub fn heap_bytes(&self) -> usize {
        self.0.as_ref().map_or(0, |pairs| {
            std::mem::size_of::<Vec<(String, String)>>()
                + pairs.capacity() * std::mem::size_of::<(String, String)>()
                + pairs
                    .iter()
                    .map(|(k, v)| k.capacity() + v.capacity())
                    .sum::<usize>()
        })
    }

    /// Keeps one attribute's value if a policy names its key.
    pub fn capture_one(&mut self, key: &str, value: Option<ValueRef<'_>>, keys: &AttributeKeys) {
        if keys.contains(key) {
            if let Some(text) = value.and_then(string_form_of) {
                self.push(key.to_owned(), text);
            }
        }
    }

    fn capture(&mut self, attributes: &[KeyValue], keys: &AttributeKeys) {
        for KeyValue { key, value, .. } in attributes {
            if !keys.contains(key) {
                continue;
            }
            if let Some(text) = value
                .as_ref()
                .and_then(|v| v.value.as_ref())
                .and_then(string_form)
            {
                self.push(key.clone(), text);
            }
        }
    }

    fn push(&mut self, key: String, value: String) {
        self.0.get_or_insert_with(Box::default).push((key, value));
    }
}

/// An attribute value as a policy compares it: strings as they are, ints in decimal, doubles in
/// their shortest round-trip form, bools `true`/`false`; arrays, maps and bytes have none.
pub fn string_form(value: &Value) -> Option<String> {
    string_form_of(ValueRef::from(value))
}

pub fn string_form_of(value: ValueRef<'_>) -> Option<String> {
    match value {
        ValueRef::Str(s) => Some(s.to_owned()),
        ValueRef::Int(i) => Some(i.to_string()),
        ValueRef::Double(d) => Some(d.to_string()),
        ValueRef::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

impl SpanFacts {
    /// Reads one span like [`SpanFacts::from_span`], and also keeps the values of `keys` found
    /// among its attributes and its resource's (for envelope policies' `match.attributes`).
    pub fn from_span_with(
        span: &Span,
        service_name: &Symbol,
        resource_attributes: &[KeyValue],
        keys: &AttributeKeys,
    ) -> SpanFacts {
        let mut facts = SpanFacts::from_span(span, service_name);
        if !keys.is_empty() {
            facts.captured.capture(&span.attributes, keys);
            facts.captured.capture(resource_attributes, keys);
        }
        facts
    }

    /// Reads one decoded span. `service_name` comes from the span's resource.
    pub fn from_span(span: &Span, service_name: &Symbol) -> SpanFacts {
        let mut reader = FactsReader::new(service_name.clone());
        reader.ids(&span.trace_id, &span.span_id, &span.parent_span_id);
        reader.times(span.start_time_unix_nano, span.end_time_unix_nano);
        reader.otlp_kind(span.kind);
        for KeyValue { key, value, .. } in &span.attributes {
            let value = value.as_ref().and_then(|v| v.value.as_ref());
            reader.attribute(key, value.map(ValueRef::from));
        }
        let status_error = span
            .status
            .as_ref()
            .is_some_and(|s| s.code == StatusCode::Error as i32);
        reader.finish(status_error)
    }

    /// Estimated bytes this span keeps alive while held: itself, its strings, and an envelope
    /// of its own (the shared empty one costs nothing).
    pub fn retained_bytes(&self) -> usize {
        fn text(s: &Option<String>) -> usize {
            s.as_ref().map_or(0, String::capacity)
        }
        // Symbols are shared with every span naming the same model; a request id is its own.
        fn shared(s: &Option<Arc<str>>) -> usize {
            s.as_ref().map_or(0, |s| s.len() + 16)
        }
        std::mem::size_of::<SpanFacts>()
            + shared(&self.request_id)
            + self.sdk.as_ref().map_or(0, |sdk| {
                std::mem::size_of::<SdkFacts>() + text(&sdk.decision_reason)
            })
            + EnvelopeFields::retained_bytes(&self.envelope)
            + self
                .envelope_json
                .as_ref()
                .map_or(0, EnvelopeFields::retained_bytes)
    }

    pub fn sdk_estimated_incremental_usd(&self) -> Option<Decimal> {
        self.sdk.as_ref().and_then(|s| s.estimated_incremental_usd)
    }

    pub fn sdk_remaining_envelope_usd(&self) -> Option<Decimal> {
        self.sdk.as_ref().and_then(|s| s.remaining_envelope_usd)
    }

    pub fn sdk_decision_reason(&self) -> Option<&str> {
        self.sdk.as_ref().and_then(|s| s.decision_reason.as_deref())
    }

    /// Sets one of the SDK's facts; they are made when a value is there (a later copy of an
    /// attribute still replaces an earlier one).
    fn set_sdk<T>(
        &mut self,
        value: Option<T>,
        field: impl FnOnce(&mut SdkFacts) -> &mut Option<T>,
    ) {
        if value.is_some() || self.sdk.is_some() {
            *field(self.sdk.get_or_insert_with(Box::default)) = value;
        }
    }

    /// Whether any source on this span names an envelope.
    pub fn has_envelope(&self) -> bool {
        self.envelope.present || self.envelope_json.as_ref().is_some_and(|j| j.present)
    }
}

/// The compact facts of one HTTP client try ([`SpanKind::HttpTry`]): all that inference needs
/// to make it an attempt of the GenAI span above it, so `serve` can hold many of them cheaply
/// while it waits for that span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpTry {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    pub parent_span_id: Option<SpanId>,
    pub start_time_unix_nano: u64,
    pub end_time_unix_nano: u64,
    /// `http.request.resend_count`; `None` when absent or not a non-negative int32 (the
    /// conventions omit it on the first try).
    pub resend_count: Option<i32>,
    /// `http.response.status_code`, else the legacy `http.status_code`.
    pub status_code: Option<i64>,
    /// The `error.type` attribute itself.
    pub error_type: Option<Symbol>,
    /// The span status is ERROR.
    pub status_error: bool,
    /// `server.address`, else the host of `url.full` (legacy `http.url`).
    pub host: Option<String>,
}

impl HttpTry {
    /// The HTTP try `facts` describe; `None` unless it is one. (`span` is the span they were
    /// read from; the reader already kept its HTTP attributes.)
    pub fn read(_span: &Span, facts: &SpanFacts) -> Option<HttpTry> {
        HttpTry::of(facts)
    }

    /// The HTTP try of a span read by either reader; `None` unless it is one.
    pub fn of(facts: &SpanFacts) -> Option<HttpTry> {
        let http = facts
            .http
            .as_deref()
            .filter(|_| facts.kind == SpanKind::HttpTry)?;
        Some(HttpTry {
            trace_id: facts.trace_id,
            span_id: facts.span_id,
            parent_span_id: facts.parent_span_id,
            start_time_unix_nano: facts.start_time_unix_nano,
            end_time_unix_nano: facts.end_time_unix_nano,
            resend_count: facts.resend_count,
            status_code: http.status_code,
            error_type: http.error_type.clone(),
            status_error: http.status_error,
            host: http.host.clone(),
        })
    }

    /// The attempt's `error_type` (the try rule of SPEC §2).
    pub fn attempt_error_type(&self) -> Option<Symbol> {
        try_error_type(self.error_type.clone(), self.status_code, self.status_error)
    }
}

/// The try rule of SPEC §2: `error.type`, else an HTTP status of 400 or more, else `_OTHER`
/// when the span status is ERROR.
pub fn try_error_type(
    error_type: Option<Symbol>,
    status_code: Option<i64>,
    status_error: bool,
) -> Option<Symbol> {
    error_type
        .or_else(|| {
            status_code
                .filter(|code| *code >= 400)
                .map(|code| symbol(&code.to_string()))
        })
        .or_else(|| status_error.then(|| symbol(attr::ERROR_TYPE_OTHER)))
}

/// The host of a URL (`https://api.example.com:443/v1` → `api.example.com`), without parsing
/// more than that.
fn url_host(url: &str) -> Option<String> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next()?;
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = host_port.strip_prefix('[') {
        v6.split_once(']').map(|(h, _)| h)?
    } else {
        host_port.split(':').next()?
    };
    (!host.is_empty()).then(|| host.to_owned())
}

/// An instrumentation scope's name as spans share it; `None` when empty.
pub fn scope_name(name: Option<&str>) -> Option<Symbol> {
    name.filter(|n| !n.is_empty()).map(symbol)
}

/// The service of spans whose resource names none.
pub fn unknown_service() -> Symbol {
    arcstr::literal!(attr::UNKNOWN_SERVICE)
}

/// Lower-case hex of an id, as rows hold them. `hex::encode` goes through a char iterator, a
/// visible share of evaluation when every row has two ids.
pub fn id_hex<const N: usize>(id: &[u8; N]) -> String {
    id_hex_in(id, &mut [0u8; 32]).to_owned()
}

/// [`id_hex`] written into `buffer`, for callers that copy it on (a Parquet column) and need no
/// `String` of their own.
pub fn id_hex_in<'b, const N: usize>(id: &[u8; N], buffer: &'b mut [u8; 32]) -> &'b str {
    // Trace ids, the longest, are 16 bytes: every id fits the buffer.
    const { assert!(N <= 16) };
    // Two digits a byte from a table: the `hex` crate's encoder was about 100 instructions a
    // trace id, and every row writes two ids.
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    const PAIRS: [[u8; 2]; 256] = {
        let mut pairs = [[0u8; 2]; 256];
        let mut i = 0;
        while i < 256 {
            pairs[i] = [DIGITS[i >> 4], DIGITS[i & 0xf]];
            i += 1;
        }
        pairs
    };
    let digits = &mut buffer[..N * 2];
    for (pair, byte) in digits.chunks_exact_mut(2).zip(id) {
        pair.copy_from_slice(&PAIRS[usize::from(*byte)]);
    }
    // Cannot fail: only hex digits, ASCII, were written.
    std::str::from_utf8(digits).unwrap_or_default()
}

/// An id from its hex (a row's column, a test's literal).
pub fn id_from_hex<const N: usize>(hex: &str) -> Option<[u8; N]> {
    let mut id = [0u8; N];
    hex::decode_to_slice(hex, &mut id).ok()?;
    Some(id)
}

/// The service name of a resource's attributes, `unknown_service` when it has none.
pub fn service_name(resource_attributes: &[KeyValue]) -> Symbol {
    resource_attributes
        .iter()
        .find(|kv| kv.key == attr::SERVICE_NAME)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
        .and_then(|value| text(ValueRef::from(value)))
        .map_or_else(unknown_service, symbol)
}

fn is_envelope_key(key: &str) -> bool {
    matches!(
        key,
        attr::PRICING_SOURCE
            | attr::PRICING_CHECKED_AT
            | attr::PRICING_VERSION
            | attr::BILLING_GROUP
            | attr::MAX_INCREMENTAL_USD
            | attr::MAX_ATTEMPTS_AFTER_FIRST
            | attr::ALLOW_FAMILY_FALLBACK
            | attr::ALLOWED_FALLBACK_FAMILIES
            | attr::REPLAY_SAFE
            | attr::ENVELOPE_JSON
    )
}

/// Reads a flat envelope attribute; returns whether `key` is one (present even if unparseable).
fn read_flat_envelope_field(env: &mut EnvelopeFields, key: &str, value: ValueRef<'_>) -> bool {
    match key {
        attr::PRICING_SOURCE => env.pricing_source = symbol_value(value),
        attr::PRICING_CHECKED_AT => env.pricing_checked_at = text(value).and_then(parse_date),
        attr::PRICING_VERSION => env.pricing_version = symbol_value(value),
        attr::BILLING_GROUP => env.billing_group = symbol_value(value),
        attr::MAX_INCREMENTAL_USD => env.max_incremental_usd = money(value),
        attr::MAX_ATTEMPTS_AFTER_FIRST => env.max_attempts_after_first = small_int(int(value)),
        attr::ALLOW_FAMILY_FALLBACK => env.allow_family_fallback = boolean(value),
        attr::ALLOWED_FALLBACK_FAMILIES => env.allowed_fallback_families = string_array(value),
        attr::REPLAY_SAFE => env.replay_safe = boolean(value),
        _ => return false,
    }
    true
}

fn id_or_zero<const N: usize>(bytes: &[u8]) -> [u8; N] {
    <[u8; N]>::try_from(bytes).unwrap_or([0; N])
}

/// An attribute value as either reader sees it: borrowed from a decoded span, or straight from
/// the protobuf bytes, so both readers share one interpretation of the contract.
#[derive(Debug, Clone, Copy)]
pub enum ValueRef<'a> {
    Str(&'a str),
    Bool(bool),
    Int(i64),
    Double(f64),
    Array(ArrayRef<'a>),
    /// Bytes, key-value lists, or a value of no known kind.
    Other,
}

/// The items of an array value, not yet read.
#[derive(Debug, Clone, Copy)]
pub enum ArrayRef<'a> {
    Decoded(&'a [AnyValue]),
    /// The encoded `ArrayValue` message.
    Wire(&'a [u8]),
    /// Every item a string value, as the JSON cursor reads them.
    Strings(&'a [std::borrow::Cow<'a, str>]),
    /// Scalars, one at least not a string, as the JSON cursor reads them.
    NotStrings,
}

impl<'a> From<&'a Value> for ValueRef<'a> {
    fn from(value: &'a Value) -> Self {
        match value {
            Value::StringValue(s) => ValueRef::Str(s),
            Value::BoolValue(b) => ValueRef::Bool(*b),
            Value::IntValue(i) => ValueRef::Int(*i),
            Value::DoubleValue(d) => ValueRef::Double(*d),
            Value::ArrayValue(a) => ValueRef::Array(ArrayRef::Decoded(&a.values)),
            _ => ValueRef::Other,
        }
    }
}

/// Builds [`SpanFacts`] one field at a time, in whatever order the fields come.
pub struct FactsReader {
    facts: SpanFacts,
    /// The kind `retry_spend.span.role` names, when it names one (read as the span is, so no
    /// span copies the text).
    role: Option<SpanKind>,
    has_role: bool,
    has_request_id: bool,
    has_index: bool,
    has_http_method: bool,
    otlp_kind: i32,
    http: HttpFacts,
    legacy_status_code: Option<i64>,
    env: EnvelopeFields,
    // Legacy names only fill in what the current name left empty, whatever the order.
    legacy_system: Option<Symbol>,
    legacy_input: Count,
    legacy_cached: Count,
    legacy_output: Count,
    legacy_cache_write: Count,
    ai_cached: Count,
    ai_cache_read: Count,
    /// `url.full`, else the legacy `http.url`: a try's host when it has no `server.address`.
    url: Option<String>,
    /// `gen_ai.operation.name`, when a string: whether it names a model operation (a GenAI
    /// span without one is a model span).
    operation: Option<bool>,
    /// `ai.operationId` names a Vercel AI SDK call.
    call_operation: bool,
}

impl FactsReader {
    pub fn new(service_name: Symbol) -> FactsReader {
        FactsReader {
            facts: SpanFacts::blank(service_name),
            role: None,
            has_role: false,
            has_request_id: false,
            has_index: false,
            has_http_method: false,
            otlp_kind: 0,
            http: HttpFacts::default(),
            legacy_status_code: None,
            env: EnvelopeFields::default(),
            legacy_system: None,
            legacy_input: Count::Missing,
            legacy_cached: Count::Missing,
            legacy_output: Count::Missing,
            legacy_cache_write: Count::Missing,
            ai_cached: Count::Missing,
            ai_cache_read: Count::Missing,
            url: None,
            operation: None,
            call_operation: false,
        }
    }

    pub fn ids(&mut self, trace_id: &[u8], span_id: &[u8], parent_span_id: &[u8]) {
        self.trace_id(trace_id);
        self.span_id(span_id);
        self.parent_span_id(parent_span_id);
    }

    pub fn trace_id(&mut self, id: &[u8]) {
        self.facts.trace_id = id_or_zero(id);
    }

    pub fn span_id(&mut self, id: &[u8]) {
        self.facts.span_id = id_or_zero(id);
    }

    pub fn parent_span_id(&mut self, id: &[u8]) {
        self.facts.parent_span_id = (id.len() == 8)
            .then(|| id_or_zero(id))
            .filter(|id| *id != [0; 8]);
    }

    /// The OTLP span kind (CLIENT is 3).
    pub fn otlp_kind(&mut self, kind: i32) {
        self.otlp_kind = kind;
    }

    pub fn times(&mut self, start: u64, end: u64) {
        self.start_time(start);
        self.end_time(end);
    }

    pub fn start_time(&mut self, nanos: u64) {
        self.facts.start_time_unix_nano = nanos;
    }

    pub fn end_time(&mut self, nanos: u64) {
        self.facts.end_time_unix_nano = nanos;
    }

    /// One attribute; `None` when the attribute has no value.
    pub fn attribute(&mut self, key: &str, value: Option<ValueRef<'_>>) {
        let Some(value) = value else {
            if is_envelope_key(key) {
                self.env.present = true;
            }
            return;
        };
        let facts = &mut self.facts;
        let env = &mut self.env;
        match key {
            attr::SPAN_ROLE => {
                self.has_role = true;
                self.role = match text(value) {
                    Some(attr::ROLE_LOGICAL_REQUEST) => Some(SpanKind::LogicalRequest),
                    Some(attr::ROLE_ATTEMPT) => Some(SpanKind::Attempt),
                    _ => None,
                };
            }
            attr::REQUEST_ID => {
                self.has_request_id = true;
                facts.request_id = request_id(value);
            }
            attr::HTTP_REQUEST_METHOD | attr::LEGACY_HTTP_METHOD => self.has_http_method = true,
            attr::HTTP_RESEND_COUNT => {
                facts.resend_count = int(value)
                    .value()
                    .and_then(|c| i32::try_from(c).ok())
                    .filter(|c| *c >= 0);
            }
            attr::HTTP_RESPONSE_STATUS_CODE => self.http.status_code = int(value).value(),
            attr::LEGACY_HTTP_STATUS_CODE => self.legacy_status_code = int(value).value(),
            attr::SERVER_ADDRESS => facts.server_address = symbol_value(value),
            attr::URL_FULL => self.url = string(value),
            attr::LEGACY_HTTP_URL => {
                if self.url.is_none() {
                    self.url = string(value);
                }
            }
            attr::OPERATION_NAME => {
                self.operation = text(value).map(|op| attr::MODEL_OPERATIONS.contains(&op));
            }
            attr::AI_OPERATION_ID => {
                self.call_operation =
                    text(value).is_some_and(|op| attr::CALL_OPERATIONS.contains(&op));
            }
            attr::CACHE_CREATION_INPUT_TOKENS => facts.cache_write_input_tokens = int(value),
            attr::LEGACY_CACHE_CREATION_INPUT_TOKENS => self.legacy_cache_write = int(value),
            attr::AI_CACHED_INPUT_TOKENS => self.ai_cached = int(value),
            attr::AI_CACHE_READ_TOKENS => self.ai_cache_read = int(value),
            attr::ASSUMED_OUTPUT_CAP => env.assumed_output_cap = int(value).value(),
            attr::ATTEMPT_INDEX => {
                self.has_index = true;
                facts.attempt_index = int(value)
                    .value()
                    .and_then(|i| i32::try_from(i).ok())
                    .filter(|i| *i >= 0);
            }
            attr::ATTEMPT_COUNT => {
                facts.attempt_count = int(value)
                    .value()
                    .and_then(|c| u32::try_from(c).ok())
                    .filter(|c| *c > 0);
            }
            attr::ATTEMPT_MODEL_FAMILY => facts.model_family = symbol_value(value),
            attr::OUTPUT_REACHED_CLIENT => facts.output_reached_client = boolean(value),
            attr::REQUEST_MODEL => facts.request_model = symbol_value(value),
            attr::RESPONSE_MODEL => facts.response_model = symbol_value(value),
            attr::PROVIDER_NAME => facts.provider = symbol_value(value),
            attr::LEGACY_SYSTEM => self.legacy_system = symbol_value(value),
            attr::INPUT_TOKENS => facts.input_tokens = int(value),
            attr::LEGACY_PROMPT_TOKENS => self.legacy_input = int(value),
            attr::CACHE_READ_INPUT_TOKENS => facts.cached_input_tokens = int(value),
            attr::LEGACY_CACHE_READ_INPUT_TOKENS => self.legacy_cached = int(value),
            attr::OUTPUT_TOKENS => facts.output_tokens = int(value),
            attr::LEGACY_COMPLETION_TOKENS => self.legacy_output = int(value),
            attr::REQUEST_MAX_TOKENS => facts.output_cap = int(value),
            attr::ERROR_TYPE => facts.error_type = symbol_value(value),
            attr::SDK_ESTIMATED_INCREMENTAL_USD => {
                facts.set_sdk(money(value), |s| &mut s.estimated_incremental_usd)
            }
            attr::SDK_REMAINING_ENVELOPE_USD => {
                facts.set_sdk(money(value), |s| &mut s.remaining_envelope_usd)
            }
            attr::SDK_DECISION_REASON => facts.set_sdk(string(value), |s| &mut s.decision_reason),
            attr::TASK_TYPE => env.task_type = symbol_value(value),
            attr::ENVELOPE_JSON => {
                facts.envelope_json = Some(Arc::new(match value {
                    ValueRef::Str(json) => parse_envelope_json(json),
                    _ => EnvelopeFields {
                        present: true,
                        json_invalid: true,
                        ..Default::default()
                    },
                }));
            }
            key => {
                if read_flat_envelope_field(env, key, value) {
                    env.present = true;
                }
            }
        }
    }

    /// Policy attributes of the span and its resource (see [`CapturedAttributes`]).
    pub fn captured(&mut self) -> &mut CapturedAttributes {
        &mut self.facts.captured
    }

    pub fn finish(self, status_error: bool) -> SpanFacts {
        let FactsReader {
            mut facts,
            role,
            has_role,
            has_request_id,
            has_index,
            has_http_method,
            otlp_kind,
            mut http,
            legacy_status_code,
            env,
            legacy_system,
            legacy_input,
            legacy_cached,
            legacy_output,
            legacy_cache_write,
            ai_cached,
            ai_cache_read,
            url,
            operation,
            call_operation,
        } = self;
        if !env.is_unstated() {
            facts.envelope = intern_envelope(env);
        }
        facts.provider = facts.provider.or(legacy_system);
        if facts.input_tokens == Count::Missing {
            facts.input_tokens = legacy_input;
        }
        for fallback in [legacy_cached, ai_cached, ai_cache_read] {
            if facts.cached_input_tokens == Count::Missing {
                facts.cached_input_tokens = fallback;
            }
        }
        if facts.cache_write_input_tokens == Count::Missing {
            facts.cache_write_input_tokens = legacy_cache_write;
        }
        if facts.output_tokens == Count::Missing {
            facts.output_tokens = legacy_output;
        }
        let error_type_attribute = facts.error_type.clone();
        facts.failed = error_type_attribute.is_some() || status_error;
        facts.status_error = status_error;
        facts.declared = has_role || has_request_id || has_index;
        let status_code = http.status_code.or(legacy_status_code);
        let genai = facts.request_model.is_some();
        let model_operation = operation.unwrap_or(true);
        facts.kind = match role {
            Some(kind) => kind,
            _ if has_index => SpanKind::Attempt,
            _ if genai && facts.request_id.is_some() => SpanKind::Attempt,
            _ if genai && (has_role || has_request_id) => SpanKind::DeclaredSingle,
            _ if facts.declared => SpanKind::Passthrough,
            _ if call_operation => SpanKind::CallSpan,
            _ if genai && model_operation => SpanKind::SingleAttempt,
            _ if genai => SpanKind::Passthrough,
            _ if has_http_method && otlp_kind == OtlpSpanKind::Client as i32 => SpanKind::HttpTry,
            _ => SpanKind::Passthrough,
        };
        facts.error_type = match facts.kind {
            // Inference's try rule, applied to the outer span of a call.
            SpanKind::SingleAttempt | SpanKind::CallSpan => {
                try_error_type(error_type_attribute.clone(), status_code, status_error)
            }
            _ => error_type_attribute
                .clone()
                .or_else(|| status_error.then(|| symbol(attr::ERROR_TYPE_OTHER))),
        };
        if facts.kind == SpanKind::HttpTry {
            http.status_code = status_code;
            http.status_error = status_error;
            http.error_type = error_type_attribute;
            http.host = facts
                .server_address
                .as_deref()
                .map(str::to_owned)
                .or_else(|| url.as_deref().and_then(url_host));
            facts.http = Some(Box::new(http));
        }
        facts
    }
}

/// A non-empty string value; other types count as missing.
fn text(value: ValueRef<'_>) -> Option<&str> {
    match value {
        ValueRef::Str(s) if !s.is_empty() => Some(s),
        _ => None,
    }
}

/// [`text`], owned.
fn string(value: ValueRef<'_>) -> Option<String> {
    text(value).map(str::to_owned)
}

/// [`text`] as a shared [`Symbol`].
fn symbol_value(value: ValueRef<'_>) -> Option<Symbol> {
    text(value).map(symbol)
}

/// Request ids are strings, but an SDK that writes an integer id means the same thing.
fn request_id(value: ValueRef<'_>) -> Option<Arc<str>> {
    match value {
        ValueRef::Int(i) => Some(shared_request_id(&i.to_string())),
        other => text(other).map(shared_request_id),
    }
}

/// Request ids a reading thread read last, one per slot by hash.
const RECENT_REQUEST_IDS: usize = 256;

thread_local! {
    static RECENT_IDS: std::cell::RefCell<(ahash::RandomState, Vec<Option<Arc<str>>>)> =
        std::cell::RefCell::new((ahash::RandomState::new(), vec![None; RECENT_REQUEST_IDS]));
}

/// The copy of `text` this thread read last, else a new one: the attempts and the logical span
/// of a request come in one export as a rule, and then share one copy of their id (the group
/// key and the waiting logical span each held their own: BENCHMARKS.md, issue 18, seventeenth
/// pass). Unlike [`symbol`], a table of recent ids only: every request brings a new one.
fn shared_request_id(text: &str) -> Arc<str> {
    RECENT_IDS.with(|recent| {
        let (hasher, slots) = &mut *recent.borrow_mut();
        let slot = hasher.hash_one(text) as usize % RECENT_REQUEST_IDS;
        match &mut slots[slot] {
            Some(id) if **id == *text => Arc::clone(id),
            other => {
                let id: Arc<str> = Arc::from(text);
                *other = Some(Arc::clone(&id));
                id
            }
        }
    })
}

fn boolean(value: ValueRef<'_>) -> Option<bool> {
    match value {
        ValueRef::Bool(b) => Some(b),
        _ => None,
    }
}

/// A string array, as a sorted set: `["qwen","glm"]` and `["glm","qwen"]` are one policy.
fn string_array(value: ValueRef<'_>) -> Option<Vec<String>> {
    let items: Option<Vec<String>> = match value {
        ValueRef::Array(ArrayRef::Decoded(values)) => values
            .iter()
            .map(|v| match &v.value {
                Some(Value::StringValue(s)) => Some(s.clone()),
                _ => None,
            })
            .collect(),
        ValueRef::Array(ArrayRef::Wire(bytes)) => wire::array_strings(bytes),
        ValueRef::Array(ArrayRef::Strings(items)) => {
            Some(items.iter().map(|s| String::from(&**s)).collect())
        }
        ValueRef::Array(ArrayRef::NotStrings) => None,
        _ => None,
    };
    items.map(as_set)
}

fn as_set(mut items: Vec<String>) -> Vec<String> {
    items.sort();
    items.dedup();
    items
}

fn small_int(count: Count) -> Option<i32> {
    count.value().and_then(|v| i32::try_from(v).ok())
}

/// An integer from an int, an integral double, or an integral decimal string.
pub fn int(value: ValueRef<'_>) -> Count {
    match value {
        ValueRef::Int(i) => Count::Value(i),
        ValueRef::Double(d) => int_from_decimal(double_to_decimal(d)),
        ValueRef::Str(s) => int_from_decimal(parse_lenient_decimal(s)),
        _ => Count::Missing,
    }
}

fn int_from_decimal(d: Option<Decimal>) -> Count {
    match d {
        Some(d) if d.fract().is_zero() => i64::try_from(d).map_or(Count::OutOfRange, Count::Value),
        _ => Count::Missing,
    }
}

/// Money from an int, a double (through its shortest decimal form), or a decimal string,
/// rounded half-even to the 18 places the Parquet columns hold.
pub fn money(value: ValueRef<'_>) -> Option<Decimal> {
    let d = match value {
        ValueRef::Int(i) => Some(Decimal::from(i)),
        ValueRef::Double(d) => double_to_decimal(d),
        ValueRef::Str(s) => parse_lenient_decimal(s),
        _ => None,
    }?;
    Some(round_money(d))
}

pub fn round_money(d: Decimal) -> Decimal {
    d.round_dp_with_strategy(18, RoundingStrategy::MidpointNearestEven)
}

fn double_to_decimal(d: f64) -> Option<Decimal> {
    if !d.is_finite() {
        return None;
    }
    // A service states the same few amounts on every request, and printing a double is about
    // a thousand instructions: each thread remembers the last one it read.
    thread_local! {
        static LAST: std::cell::Cell<Option<(u64, Option<Decimal>)>> =
            const { std::cell::Cell::new(None) };
    }
    let bits = d.to_bits();
    if let Some((last, value)) = LAST.get() {
        if last == bits {
            return value;
        }
    }
    // Display prints the shortest representation that round-trips, so 0.015 reads as 0.015.
    let value = parse_lenient_decimal(&d.to_string());
    LAST.set(Some((bits, value)));
    value
}

/// A decimal in plain or scientific notation; excess fractional digits are rounded.
fn parse_lenient_decimal(text: &str) -> Option<Decimal> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    if text.contains(['e', 'E']) {
        Decimal::from_scientific(text).ok()
    } else {
        Decimal::from_str(text).ok()
    }
}

/// Reads the seed's JSON policy: `{"retry_spend_envelope": {...}}` or the inner object.
pub fn parse_envelope_json(json: &str) -> EnvelopeFields {
    let invalid = EnvelopeFields {
        present: true,
        json_invalid: true,
        ..Default::default()
    };
    type Object<'a> = std::collections::HashMap<String, &'a RawValue>;
    let Ok(outer) = serde_json::from_str::<Object<'_>>(json) else {
        return invalid;
    };
    let inner_raw = outer.get("retry_spend_envelope").map(|raw| raw.get());
    let object = match inner_raw {
        Some(inner) => match serde_json::from_str::<Object<'_>>(inner) {
            Ok(inner) => inner,
            Err(_) => return invalid,
        },
        None => outer,
    };

    let mut env = EnvelopeFields {
        present: true,
        ..Default::default()
    };
    let text = |key: &str| {
        object
            .get(key)
            .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
            .filter(|s| !s.is_empty())
            .map(|s| symbol(&s))
    };
    let number = |key: &str| object.get(key).and_then(|raw| json_number(raw));
    let flag = |key: &str| {
        object
            .get(key)
            .and_then(|raw| serde_json::from_str::<bool>(raw.get()).ok())
    };

    env.pricing_source = text("pricing_source");
    env.pricing_checked_at = text("pricing_checked_at").as_deref().and_then(parse_date);
    env.pricing_version = text("pricing_version");
    env.billing_group = text("billing_group");
    env.max_incremental_usd = number("max_incremental_usd").map(round_money);
    env.max_attempts_after_first = number("max_attempts_after_first")
        .filter(|d| d.fract().is_zero())
        .and_then(|d| i32::try_from(d).ok());
    env.allow_family_fallback = flag("allow_family_fallback");
    env.allowed_fallback_families = object
        .get("allowed_fallback_families")
        .and_then(|raw| serde_json::from_str::<Vec<String>>(raw.get()).ok())
        .map(as_set);
    env.replay_safe = flag("replay_safe");
    env.assumed_output_cap = number("assumed_output_cap")
        .filter(|d| d.fract().is_zero())
        .and_then(|d| i64::try_from(d).ok());
    env.task_type = text("task_type");
    env
}

/// A JSON number read from its literal text (exact), or a decimal string.
fn json_number(raw: &RawValue) -> Option<Decimal> {
    let text = raw.get();
    if text.starts_with('"') {
        serde_json::from_str::<String>(text)
            .ok()
            .as_deref()
            .and_then(parse_lenient_decimal)
    } else if text.starts_with(['-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9']) {
        parse_lenient_decimal(text)
    } else {
        None
    }
}

/// Helper for tests and tools: an OTLP attribute.
pub fn kv(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

/// Spans read for no policy keep no attributes.
pub static NO_KEYS: AttributeKeys = AttributeKeys::NONE;

/// Every span of an export request with its resource's service name, read into facts.
pub fn span_facts(request: &ExportTraceServiceRequest) -> impl Iterator<Item = SpanFacts> + '_ {
    span_facts_with(request, &NO_KEYS)
}

/// [`span_facts`], keeping the values of `keys` for envelope policies.
pub fn span_facts_with<'a>(
    request: &'a ExportTraceServiceRequest,
    keys: &'a AttributeKeys,
) -> impl Iterator<Item = SpanFacts> + 'a {
    request
        .resource_spans
        .iter()
        .flat_map(move |resource_spans| {
            let resource = resource_spans
                .resource
                .as_ref()
                .map_or(&[][..], |r| r.attributes.as_slice());
            let service = service_name(resource);
            resource_spans
                .scope_spans
                .iter()
                .flat_map(move |scope_spans| {
                    let scope = scope_name(scope_spans.scope.as_ref().map(|s| s.name.as_str()));
                    let service = service.clone();
                    scope_spans.spans.iter().map(move |span| {
                        let mut facts = SpanFacts::from_span_with(span, &service, resource, keys);
                        facts.scope = scope.clone();
                        facts
                    })
                })
        })
}

#[cfg(test)]
mod tests;
