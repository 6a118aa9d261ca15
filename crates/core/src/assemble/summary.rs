//! Compact summaries of finished requests: what a late retry is judged with, in memory and on
//! disk.
//!
//! The rules read few facts of an earlier attempt: its order (index, start time, span id), its
//! model and family, its usage, its envelope, whether output reached the client, and what an
//! envelope policy matches on (service, captured attributes). [`ContextSpan`] keeps exactly
//! those, so the finished-request cache holds a fraction of a full [`SpanFacts`] per attempt,
//! and [`Encoded`] / [`decode`] write them to the file `serve` keeps beside its write-ahead log,
//! so that a late retry after a restart still finds its earlier attempts.
//!
//! File format, version 1 (integers little-endian; `varint` is unsigned LEB128, `zigzag` a
//! signed value folded into one):
//!
//! ```text
//! magic "RSFC" · version u16 · reserved u16
//! strings:   varint n, then n × (varint length, UTF-8 bytes)
//! envelopes: varint n, then n × envelope (fields as string indices, dates as days)
//! requests:  varint n, then n × request, oldest first
//! crc32 u32 of every byte before it
//! ```
//!
//! Service names, models, families and envelopes repeat across requests: each is written once
//! in a table and named by its index, which is what keeps a summary near 100 bytes.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{Datelike, NaiveDate};
use rust_decimal::Decimal;

use super::GroupKey;
use crate::contract::{
    CapturedAttributes, Count, EnvelopeFields, PackedCounts, SpanFacts, SpanId, SpanKind, Symbol,
    TraceId,
};

/// What an evaluated span must keep to be a later retry's earlier attempt (or, for a logical
/// request span, its envelope and request id). The rest only ever went into its own row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextSpan {
    pub span_id: SpanId,
    pub start_time_unix_nano: u64,
    pub attempt_index: Option<i32>,
    pub attempt_count: Option<u32>,
    pub service_name: Symbol,
    /// Kept for logical spans only: a request grouped under its parent takes its id from there.
    pub request_id: Option<Arc<str>>,
    pub envelope: Arc<EnvelopeFields>,
    pub envelope_json: Option<Arc<EnvelopeFields>>,
    pub request_model: Option<Symbol>,
    pub model_family: Option<Symbol>,
    /// Input, cached input, output, output cap (see [`ContextSpan::INPUT_TOKENS`] and on).
    pub counts: PackedCounts<4>,
    pub output_reached_client: Option<bool>,
    pub captured: CapturedAttributes,
}

impl ContextSpan {
    pub const INPUT_TOKENS: usize = 0;
    pub const CACHED_INPUT_TOKENS: usize = 1;
    pub const OUTPUT_TOKENS: usize = 2;
    pub const OUTPUT_CAP: usize = 3;

    /// The context of an evaluated attempt.
    pub fn of_attempt(span: SpanFacts) -> ContextSpan {
        ContextSpan::of(span, false)
    }

    /// The context of a logical request span.
    pub fn of_logical(span: SpanFacts) -> ContextSpan {
        ContextSpan::of(span, true)
    }

    fn of(span: SpanFacts, logical: bool) -> ContextSpan {
        ContextSpan {
            span_id: span.span_id,
            start_time_unix_nano: span.start_time_unix_nano,
            attempt_index: span.attempt_index,
            attempt_count: span.attempt_count,
            service_name: span.service_name,
            request_id: span.request_id.filter(|_| logical),
            envelope: span.envelope,
            envelope_json: span.envelope_json,
            request_model: span.request_model,
            model_family: span.model_family,
            counts: PackedCounts::new([
                span.input_tokens,
                span.cached_input_tokens,
                span.output_tokens,
                span.output_cap,
            ]),
            output_reached_client: span.output_reached_client,
            captured: span.captured,
        }
    }

    /// The span as the rules read it again; what was not kept is absent.
    pub fn to_facts(&self, trace_id: TraceId, kind: SpanKind) -> SpanFacts {
        SpanFacts {
            trace_id,
            span_id: self.span_id,
            start_time_unix_nano: self.start_time_unix_nano,
            end_time_unix_nano: self.start_time_unix_nano,
            kind,
            request_id: self.request_id.clone(),
            attempt_index: self.attempt_index,
            attempt_count: self.attempt_count,
            envelope: Arc::clone(&self.envelope),
            envelope_json: self.envelope_json.clone(),
            request_model: self.request_model.clone(),
            model_family: self.model_family.clone(),
            input_tokens: self.counts.get(ContextSpan::INPUT_TOKENS),
            cached_input_tokens: self.counts.get(ContextSpan::CACHED_INPUT_TOKENS),
            output_tokens: self.counts.get(ContextSpan::OUTPUT_TOKENS),
            output_cap: self.counts.get(ContextSpan::OUTPUT_CAP),
            output_reached_client: self.output_reached_client,
            captured: self.captured.clone(),
            // The rest as a freshly read span of this service has them; `SpanFacts::default()`
            // would allocate a service name only to drop it.
            ..SpanFacts::blank(self.service_name.clone())
        }
    }

    /// Estimated bytes this context keeps alive, counted as [`SpanFacts::retained_bytes`] does.
    pub fn retained_bytes(&self) -> usize {
        // At their length, as when each context owned a copy: the facts no longer count the
        // symbols they share, but a finished cache bounded as before is the safer estimate.
        fn text(s: Option<&str>) -> usize {
            s.map_or(0, str::len)
        }
        std::mem::size_of::<ContextSpan>()
            + text(self.request_id.as_deref())
            + text(self.request_model.as_deref())
            + text(self.model_family.as_deref())
            + EnvelopeFields::retained_bytes(&self.envelope)
            + self
                .envelope_json
                .as_ref()
                .map_or(0, EnvelopeFields::retained_bytes)
            + self.captured.heap_bytes()
    }
}

/// One finished request as saved: its key, logical span and earlier attempts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub key: GroupKey,
    pub logical: Option<ContextSpan>,
    pub attempts: Vec<ContextSpan>,
    /// Ids of attempts seen but not kept as context (past [`super::MAX_ATTEMPTS_PER_REQUEST`]):
    /// still duplicates when re-sent.
    pub other_span_ids: Vec<SpanId>,
}

/// A summaries file as its three parts, in file order.
#[derive(Debug)]
pub struct Encoded {
    head: Vec<u8>,
    requests: Vec<u8>,
    crc: [u8; 4],
}

impl Encoded {
    pub fn parts(&self) -> [&[u8]; 3] {
        [&self.head, &self.requests, &self.crc]
    }

    pub fn to_vec(&self) -> Vec<u8> {
        self.parts().concat()
    }
}

/// Why a summaries file was not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SummaryError {
    #[error("not a finished-request summaries file (bad magic)")]
    NotSummaries,
    #[error("unknown summaries format version {0} (this build reads version {VERSION})")]
    UnknownVersion(u16),
    #[error("checksum mismatch: the file is corrupt or was cut short")]
    Checksum,
    #[error("malformed summaries: {0}")]
    Malformed(&'static str),
}

const MAGIC: &[u8; 4] = b"RSFC";
pub const VERSION: u16 = 1;
const HEADER_BYTES: usize = 8;
const CRC_BYTES: usize = 4;

/// Builds one summaries file: the tables are filled while requests are written.
#[derive(Default)]
pub struct Encoder<'a> {
    strings: Vec<&'a str>,
    string_index: Index<&'a str>,
    envelopes: Vec<&'a EnvelopeFields>,
    envelope_index: Index<&'a EnvelopeFields>,
    /// Envelopes by address: spans share interned envelopes, and hashing every field of one
    /// for each span was most of a save (BENCHMARKS.md, issue 18, twentieth pass).
    envelope_at: Index<*const EnvelopeFields>,
    /// Strings by address and length, likewise: most are shared symbols.
    string_at: Index<(*const u8, usize)>,
    requests: Vec<u8>,
    count: u64,
}

/// The tables' indexes: ahash, as a save hashes a string or envelope for every span held.
type Index<K> = HashMap<K, u32, ahash::RandomState>;

impl<'a> Encoder<'a> {
    /// An encoder sized for about `requests` requests (~140 bytes each), so its buffer is not
    /// regrown and copied while a large cache is written.
    pub fn with_capacity(requests: usize) -> Encoder<'a> {
        Encoder {
            requests: Vec::with_capacity(requests.saturating_mul(160)),
            ..Encoder::default()
        }
    }

    /// Adds one finished request; `other_span_ids` are ids seen but not among `attempts`.
    pub fn push(
        &mut self,
        key: &'a GroupKey,
        logical: Option<&'a ContextSpan>,
        attempts: &'a [ContextSpan],
        other_span_ids: &[SpanId],
    ) {
        let mut out = std::mem::take(&mut self.requests);
        match key {
            GroupKey::RequestId {
                trace_id,
                request_id,
            } => {
                out.push(KEY_REQUEST_ID);
                out.extend_from_slice(trace_id);
                put_bytes(&mut out, request_id.as_bytes());
            }
            GroupKey::Parent {
                trace_id,
                parent_span_id: Some(parent),
            } => {
                out.push(KEY_PARENT);
                out.extend_from_slice(trace_id);
                out.extend_from_slice(parent);
            }
            GroupKey::Parent {
                trace_id,
                parent_span_id: None,
            } => {
                out.push(KEY_TRACE);
                out.extend_from_slice(trace_id);
            }
            GroupKey::Single { trace_id, span_id } => {
                out.push(KEY_SINGLE);
                out.extend_from_slice(trace_id);
                out.extend_from_slice(span_id);
            }
        }
        out.push(u8::from(logical.is_some()));
        if let Some(logical) = logical {
            self.span(&mut out, logical);
        }
        put_varint(&mut out, attempts.len() as u64);
        for attempt in attempts {
            self.span(&mut out, attempt);
        }
        put_varint(&mut out, other_span_ids.len() as u64);
        for id in other_span_ids {
            out.extend_from_slice(id);
        }
        self.requests = out;
        self.count += 1;
    }

    /// The file in parts, written one after the other: the requests are most of it and are
    /// not copied again behind the header (a cache of 50,000 requests is ~7 MB).
    pub fn finish(self) -> Encoded {
        let mut head = Vec::with_capacity(256);
        head.extend_from_slice(MAGIC);
        head.extend_from_slice(&VERSION.to_le_bytes());
        head.extend_from_slice(&0u16.to_le_bytes());
        put_varint(&mut head, self.strings.len() as u64);
        for s in &self.strings {
            put_bytes(&mut head, s.as_bytes());
        }
        put_varint(&mut head, self.envelopes.len() as u64);
        for envelope in &self.envelopes {
            put_envelope(&mut head, envelope, &self.string_index);
        }
        put_varint(&mut head, self.count);
        let mut crc = crc32fast::Hasher::new();
        crc.update(&head);
        crc.update(&self.requests);
        Encoded {
            head,
            requests: self.requests,
            crc: crc.finalize().to_le_bytes(),
        }
    }

    fn string(&mut self, s: &'a str) -> u32 {
        let address = (s.as_ptr(), s.len());
        if let Some(&i) = self.string_at.get(&address) {
            return i;
        }
        let i = self.string_index_of(s);
        self.string_at.insert(address, i);
        i
    }

    fn string_index_of(&mut self, s: &'a str) -> u32 {
        if let Some(&i) = self.string_index.get(s) {
            return i;
        }
        let i = self.strings.len() as u32;
        self.strings.push(s);
        self.string_index.insert(s, i);
        i
    }

    fn envelope(&mut self, envelope: &'a EnvelopeFields) -> u32 {
        let address: *const EnvelopeFields = envelope;
        if let Some(&i) = self.envelope_at.get(&address) {
            return i;
        }
        let i = self.envelope_index_of(envelope);
        self.envelope_at.insert(address, i);
        i
    }

    fn envelope_index_of(&mut self, envelope: &'a EnvelopeFields) -> u32 {
        if let Some(&i) = self.envelope_index.get(envelope) {
            return i;
        }
        // Its strings go in the table now, so that the envelope table can name them.
        for s in envelope_strings(envelope) {
            self.string(s);
        }
        let i = self.envelopes.len() as u32;
        self.envelopes.push(envelope);
        self.envelope_index.insert(envelope, i);
        i
    }

    fn span(&mut self, out: &mut Vec<u8>, span: &'a ContextSpan) {
        out.extend_from_slice(&span.span_id);
        out.extend_from_slice(&span.start_time_unix_nano.to_le_bytes());
        let mut flags = 0u16;
        let mut flag = |bit: u16, on: bool| {
            if on {
                flags |= bit;
            }
        };
        flag(SPAN_INDEX, span.attempt_index.is_some());
        flag(SPAN_COUNT, span.attempt_count.is_some());
        flag(SPAN_REQUEST_ID, span.request_id.is_some());
        flag(SPAN_ENVELOPE_JSON, span.envelope_json.is_some());
        flag(SPAN_MODEL, span.request_model.is_some());
        flag(SPAN_FAMILY, span.model_family.is_some());
        flag(SPAN_REACHED_KNOWN, span.output_reached_client.is_some());
        flag(SPAN_REACHED, span.output_reached_client == Some(true));
        flag(SPAN_CAPTURED, !span.captured.is_empty());
        out.extend_from_slice(&flags.to_le_bytes());
        let service = self.string(&span.service_name);
        put_varint(out, u64::from(service));
        let envelope = self.envelope(&span.envelope);
        put_varint(out, u64::from(envelope));
        if let Some(index) = span.attempt_index {
            put_varint(out, zigzag(i64::from(index)));
        }
        if let Some(count) = span.attempt_count {
            put_varint(out, u64::from(count));
        }
        if let Some(id) = &span.request_id {
            put_bytes(out, id.as_bytes());
        }
        if let Some(json) = &span.envelope_json {
            let i = self.envelope(json);
            put_varint(out, u64::from(i));
        }
        for text in [&span.request_model, &span.model_family]
            .into_iter()
            .flatten()
        {
            let i = self.string(text);
            put_varint(out, u64::from(i));
        }
        let counts = span.counts.all();
        let tags = counts
            .iter()
            .enumerate()
            .fold(0u8, |tags, (i, c)| tags | (count_tag(*c) << (2 * i)));
        out.push(tags);
        for count in counts {
            if let Count::Value(v) = count {
                put_varint(out, zigzag(v));
            }
        }
        if !span.captured.is_empty() {
            put_varint(out, span.captured.iter().count() as u64);
            for (key, value) in span.captured.iter() {
                let k = self.string(key);
                let v = self.string(value);
                put_varint(out, u64::from(k));
                put_varint(out, u64::from(v));
            }
        }
    }
}

/// Reads a summaries file written by [`Encoder`]: every request in it, oldest first.
pub fn decode(bytes: &[u8]) -> Result<Vec<Summary>, SummaryError> {
    if bytes.len() < HEADER_BYTES || &bytes[..4] != MAGIC {
        return Err(SummaryError::NotSummaries);
    }
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    if version != VERSION {
        return Err(SummaryError::UnknownVersion(version));
    }
    let Some(body_end) = bytes
        .len()
        .checked_sub(CRC_BYTES)
        .filter(|&e| e >= HEADER_BYTES)
    else {
        return Err(SummaryError::Checksum);
    };
    let (body, crc) = bytes.split_at(body_end);
    let crc = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
    if crc32fast::hash(body) != crc {
        return Err(SummaryError::Checksum);
    }
    let mut r = Reader {
        bytes: &body[HEADER_BYTES..],
    };
    let n = r.len()?;
    let mut strings: Vec<Symbol> = Vec::with_capacity(n);
    for _ in 0..n {
        let text = std::str::from_utf8(r.bytes_prefixed()?)
            .map_err(|_| SummaryError::Malformed("a string is not UTF-8"))?;
        strings.push(Symbol::from(text));
    }
    let n = r.len()?;
    let mut envelopes = Vec::with_capacity(n);
    let empty = EnvelopeFields::empty();
    for _ in 0..n {
        let envelope = r.envelope(&strings)?;
        // The shared empty value, so a restored span costs no envelope of its own.
        envelopes.push(if envelope == *empty {
            Arc::clone(&empty)
        } else {
            Arc::new(envelope)
        });
    }
    let tables = Tables { strings, envelopes };
    let n = r.len()?;
    let mut requests = Vec::with_capacity(n);
    for _ in 0..n {
        requests.push(r.request(&tables)?);
    }
    if !r.bytes.is_empty() {
        return Err(SummaryError::Malformed("bytes after the last request"));
    }
    Ok(requests)
}

const KEY_REQUEST_ID: u8 = 0;
const KEY_PARENT: u8 = 1;
const KEY_TRACE: u8 = 2;
const KEY_SINGLE: u8 = 3;

const SPAN_INDEX: u16 = 1;
const SPAN_COUNT: u16 = 1 << 1;
const SPAN_REQUEST_ID: u16 = 1 << 2;
const SPAN_ENVELOPE_JSON: u16 = 1 << 3;
const SPAN_MODEL: u16 = 1 << 4;
const SPAN_FAMILY: u16 = 1 << 5;
const SPAN_REACHED_KNOWN: u16 = 1 << 6;
const SPAN_REACHED: u16 = 1 << 7;
const SPAN_CAPTURED: u16 = 1 << 8;

const ENV_PRESENT: u16 = 1;
const ENV_JSON_INVALID: u16 = 1 << 1;
const ENV_SOURCE: u16 = 1 << 2;
const ENV_CHECKED_AT: u16 = 1 << 3;
const ENV_VERSION: u16 = 1 << 4;
const ENV_GROUP: u16 = 1 << 5;
const ENV_MAX_USD: u16 = 1 << 6;
const ENV_MAX_ATTEMPTS: u16 = 1 << 7;
const ENV_FALLBACK_KNOWN: u16 = 1 << 8;
const ENV_FALLBACK: u16 = 1 << 9;
const ENV_FAMILIES: u16 = 1 << 10;
const ENV_REPLAY_KNOWN: u16 = 1 << 11;
const ENV_REPLAY: u16 = 1 << 12;
const ENV_TASK: u16 = 1 << 13;

const COUNT_MISSING: u8 = 0;
const COUNT_VALUE: u8 = 1;
const COUNT_OUT_OF_RANGE: u8 = 2;

fn count_tag(count: Count) -> u8 {
    match count {
        Count::Missing => COUNT_MISSING,
        Count::Value(_) => COUNT_VALUE,
        Count::OutOfRange => COUNT_OUT_OF_RANGE,
    }
}

/// The strings an envelope names, in the order [`put_envelope`] writes them. The decimal is
/// kept as its exact text: parsing it back gives the same value and scale.
fn envelope_strings(e: &EnvelopeFields) -> Vec<&str> {
    let mut all: Vec<&str> = [&e.pricing_source, &e.pricing_version, &e.billing_group]
        .into_iter()
        .flatten()
        .map(|s| &**s)
        .collect();
    all.extend(
        e.allowed_fallback_families
            .iter()
            .flatten()
            .map(String::as_str),
    );
    all.extend(e.task_type.as_deref());
    all
}

fn put_envelope(out: &mut Vec<u8>, e: &EnvelopeFields, strings: &Index<&str>) {
    let mut flags = 0u16;
    for (bit, on) in [
        (ENV_PRESENT, e.present),
        (ENV_JSON_INVALID, e.json_invalid),
        (ENV_SOURCE, e.pricing_source.is_some()),
        (ENV_CHECKED_AT, e.pricing_checked_at.is_some()),
        (ENV_VERSION, e.pricing_version.is_some()),
        (ENV_GROUP, e.billing_group.is_some()),
        (ENV_MAX_USD, e.max_incremental_usd.is_some()),
        (ENV_MAX_ATTEMPTS, e.max_attempts_after_first.is_some()),
        (ENV_FALLBACK_KNOWN, e.allow_family_fallback.is_some()),
        (ENV_FALLBACK, e.allow_family_fallback == Some(true)),
        (ENV_FAMILIES, e.allowed_fallback_families.is_some()),
        (ENV_REPLAY_KNOWN, e.replay_safe.is_some()),
        (ENV_REPLAY, e.replay_safe == Some(true)),
        (ENV_TASK, e.task_type.is_some()),
    ] {
        if on {
            flags |= bit;
        }
    }
    out.extend_from_slice(&flags.to_le_bytes());
    // Every string was put in the table by `Encoder::envelope`.
    let index = |s: &str| u64::from(strings.get(s).copied().unwrap_or(0));
    if let Some(s) = &e.pricing_source {
        put_varint(out, index(s));
    }
    if let Some(date) = e.pricing_checked_at {
        put_varint(out, zigzag(i64::from(date.num_days_from_ce())));
    }
    for s in [&e.pricing_version, &e.billing_group].into_iter().flatten() {
        put_varint(out, index(s));
    }
    if let Some(max) = e.max_incremental_usd {
        put_bytes(out, max.to_string().as_bytes());
    }
    if let Some(max) = e.max_attempts_after_first {
        put_varint(out, zigzag(i64::from(max)));
    }
    if let Some(families) = &e.allowed_fallback_families {
        put_varint(out, families.len() as u64);
        for family in families {
            put_varint(out, index(family));
        }
    }
    if let Some(task) = &e.task_type {
        put_varint(out, index(task));
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

struct Tables {
    strings: Vec<Symbol>,
    envelopes: Vec<Arc<EnvelopeFields>>,
}

/// A cursor over checksummed bytes: every read is bounds-checked, since a file that passes
/// its checksum may still come from a build with a bug.
struct Reader<'a> {
    bytes: &'a [u8],
}

const TRUNCATED: SummaryError = SummaryError::Malformed("a value runs past the end");

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], SummaryError> {
        if n > self.bytes.len() {
            return Err(TRUNCATED);
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], SummaryError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, SummaryError> {
        Ok(self.array::<1>()?[0])
    }

    fn varint(&mut self) -> Result<u64, SummaryError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.u8()?;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(SummaryError::Malformed("a number is too long"))
    }

    /// A count of items that follow, each at least one byte: never more than the bytes left,
    /// so a bad count cannot make a large allocation.
    fn len(&mut self) -> Result<usize, SummaryError> {
        usize::try_from(self.varint()?)
            .ok()
            .filter(|&n| n <= self.bytes.len())
            .ok_or(TRUNCATED)
    }

    fn bytes_prefixed(&mut self) -> Result<&'a [u8], SummaryError> {
        let n = self.len()?;
        self.take(n)
    }

    fn i32(&mut self) -> Result<i32, SummaryError> {
        i32::try_from(unzigzag(self.varint()?))
            .map_err(|_| SummaryError::Malformed("a number is out of range"))
    }

    fn index<T: Clone>(&mut self, table: &[T]) -> Result<T, SummaryError> {
        usize::try_from(self.varint()?)
            .ok()
            .and_then(|i| table.get(i))
            .cloned()
            .ok_or(SummaryError::Malformed("an index past its table"))
    }

    fn string(&mut self, strings: &[Symbol]) -> Result<String, SummaryError> {
        Ok(self.index(strings)?.to_string())
    }

    fn envelope(&mut self, strings: &[Symbol]) -> Result<EnvelopeFields, SummaryError> {
        let flags = u16::from_le_bytes(self.array()?);
        let has = |bit: u16| flags & bit != 0;
        let mut e = EnvelopeFields {
            present: has(ENV_PRESENT),
            json_invalid: has(ENV_JSON_INVALID),
            ..EnvelopeFields::default()
        };
        if has(ENV_SOURCE) {
            e.pricing_source = Some(self.index(strings)?);
        }
        if has(ENV_CHECKED_AT) {
            e.pricing_checked_at = Some(
                NaiveDate::from_num_days_from_ce_opt(self.i32()?)
                    .ok_or(SummaryError::Malformed("a date is out of range"))?,
            );
        }
        if has(ENV_VERSION) {
            e.pricing_version = Some(self.index(strings)?);
        }
        if has(ENV_GROUP) {
            e.billing_group = Some(self.index(strings)?);
        }
        if has(ENV_MAX_USD) {
            let text = std::str::from_utf8(self.bytes_prefixed()?)
                .map_err(|_| SummaryError::Malformed("an amount is not UTF-8"))?;
            e.max_incremental_usd = Some(
                Decimal::from_str_exact(text)
                    .map_err(|_| SummaryError::Malformed("an amount is not a decimal"))?,
            );
        }
        if has(ENV_MAX_ATTEMPTS) {
            e.max_attempts_after_first = Some(self.i32()?);
        }
        if has(ENV_FALLBACK_KNOWN) {
            e.allow_family_fallback = Some(has(ENV_FALLBACK));
        }
        if has(ENV_FAMILIES) {
            let n = self.len()?;
            let mut families = Vec::with_capacity(n);
            for _ in 0..n {
                families.push(self.string(strings)?);
            }
            e.allowed_fallback_families = Some(families);
        }
        if has(ENV_REPLAY_KNOWN) {
            e.replay_safe = Some(has(ENV_REPLAY));
        }
        if has(ENV_TASK) {
            e.task_type = Some(self.index(strings)?);
        }
        Ok(e)
    }

    fn request(&mut self, tables: &Tables) -> Result<Summary, SummaryError> {
        let tag = self.u8()?;
        let trace_id: TraceId = self.array()?;
        let key = match tag {
            KEY_REQUEST_ID => {
                let id = std::str::from_utf8(self.bytes_prefixed()?)
                    .map_err(|_| SummaryError::Malformed("a request id is not UTF-8"))?;
                GroupKey::RequestId {
                    trace_id,
                    request_id: Arc::from(id),
                }
            }
            KEY_PARENT => GroupKey::Parent {
                trace_id,
                parent_span_id: Some(self.array()?),
            },
            KEY_TRACE => GroupKey::Parent {
                trace_id,
                parent_span_id: None,
            },
            KEY_SINGLE => GroupKey::Single {
                trace_id,
                span_id: self.array()?,
            },
            _ => return Err(SummaryError::Malformed("unknown request key kind")),
        };
        let logical = match self.u8()? {
            0 => None,
            1 => Some(self.span(tables)?),
            _ => return Err(SummaryError::Malformed("bad logical span marker")),
        };
        let n = self.len()?;
        let mut attempts = Vec::with_capacity(n);
        for _ in 0..n {
            attempts.push(self.span(tables)?);
        }
        let n = self.len()?;
        let mut other_span_ids = Vec::with_capacity(n);
        for _ in 0..n {
            other_span_ids.push(self.array()?);
        }
        Ok(Summary {
            key,
            logical,
            attempts,
            other_span_ids,
        })
    }

    fn span(&mut self, tables: &Tables) -> Result<ContextSpan, SummaryError> {
        let span_id = self.array()?;
        let start_time_unix_nano = u64::from_le_bytes(self.array()?);
        let flags = u16::from_le_bytes(self.array()?);
        let has = |bit: u16| flags & bit != 0;
        let service_name = self.index(&tables.strings)?;
        let envelope = self.index(&tables.envelopes)?;
        let attempt_index = has(SPAN_INDEX).then(|| self.i32()).transpose()?;
        let attempt_count = has(SPAN_COUNT)
            .then(|| {
                u32::try_from(self.varint()?)
                    .map_err(|_| SummaryError::Malformed("an attempt count is out of range"))
            })
            .transpose()?;
        let request_id = if has(SPAN_REQUEST_ID) {
            let id = std::str::from_utf8(self.bytes_prefixed()?)
                .map_err(|_| SummaryError::Malformed("a request id is not UTF-8"))?;
            Some(Arc::from(id))
        } else {
            None
        };
        let envelope_json = has(SPAN_ENVELOPE_JSON)
            .then(|| self.index(&tables.envelopes))
            .transpose()?;
        let mut shared = |on: bool| -> Result<Option<Symbol>, SummaryError> {
            on.then(|| self.index(&tables.strings)).transpose()
        };
        let request_model = shared(has(SPAN_MODEL))?;
        let model_family = shared(has(SPAN_FAMILY))?;
        let tags = self.u8()?;
        let mut counts = [Count::Missing; 4];
        for (i, count) in counts.iter_mut().enumerate() {
            *count = match (tags >> (2 * i)) & 0b11 {
                COUNT_MISSING => Count::Missing,
                COUNT_VALUE => Count::Value(unzigzag(self.varint()?)),
                COUNT_OUT_OF_RANGE => Count::OutOfRange,
                _ => return Err(SummaryError::Malformed("unknown count kind")),
            };
        }
        let captured = if has(SPAN_CAPTURED) {
            let n = self.len()?;
            let mut pairs = Vec::with_capacity(n);
            for _ in 0..n {
                pairs.push((self.string(&tables.strings)?, self.string(&tables.strings)?));
            }
            CapturedAttributes::from_pairs(pairs)
        } else {
            CapturedAttributes::default()
        };
        Ok(ContextSpan {
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
            counts: PackedCounts::new(counts),
            output_reached_client: has(SPAN_REACHED_KNOWN).then_some(has(SPAN_REACHED)),
            captured,
        })
    }
}

#[cfg(test)]
mod tests;
