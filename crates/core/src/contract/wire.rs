//! Reading an OTLP `ExportTraceServiceRequest` straight from its protobuf bytes into
//! [`SpanFacts`], without building the decoded message tree first.
//!
//! The collector needs about twenty attributes of each span; the full tree costs an allocation
//! for every key, string, event and link of every span. This reader walks the wire format once,
//! reads the contract's fields through the same [`FactsReader`] the decoded path uses (so both
//! interpret the contract identically), and skips everything else without allocating. When
//! spans are forwarded it also notes where each span, resource and scope lie in the bytes, so
//! the forwarder can decode just those with prost.
//!
//! Wire semantics follow protobuf (and prost): a repeated scalar field's last value wins,
//! repeated message fields merge, unknown fields are skipped. A malformed message is an error
//! for the whole request, as it is for prost. Strings this reader does not look at (span names,
//! event text) are skipped without checking their UTF-8; an attribute key that is one the
//! contract reads is recognised by its bytes, which are then valid UTF-8 by construction.

use std::ops::Range;

use bytes::Bytes;

use super::{
    attr, known_key, string_form_of, symbol, unknown_service, ArrayRef, AttributeKeys, FactsReader,
    SpanFacts, Symbol, ValueRef,
};

/// Why a request could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid OTLP protobuf: {0}")]
pub struct WireError(&'static str);

/// Where a span came from in the request, for forwarding it under its own resource and scope.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OriginRanges {
    /// The encoded `Resource` messages (several occurrences merge).
    pub resource: Vec<Range<usize>>,
    pub resource_schema_url: Option<Range<usize>>,
    /// The encoded `InstrumentationScope` messages.
    pub scope: Vec<Range<usize>>,
    pub scope_schema_url: Option<Range<usize>>,
}

/// A request read into facts.
#[derive(Debug, Default)]
pub struct WireExport {
    pub spans: Vec<SpanFacts>,
    /// With `keep_raw`: for each span, its origin (an index into `origins`) and its bytes.
    pub raw: Vec<(u32, Range<usize>)>,
    pub origins: Vec<OriginRanges>,
}

/// Reads every span of an encoded export request. `keep_raw` records where each span, resource
/// and scope lie in `bytes`; the values of `keys` (policies' `match.attributes`) among a span's
/// and its resource's attributes are captured.
pub fn read_export(
    bytes: &Bytes,
    keep_raw: bool,
    keys: &AttributeKeys,
) -> Result<WireExport, WireError> {
    read_export_into(bytes, keep_raw, keys, Vec::new())
}

/// [`read_export`] into `spans`' room (a buffer an earlier export was read into and emptied),
/// so that a steady stream of exports does not fault fresh memory in for each.
pub fn read_export_into(
    bytes: &Bytes,
    keep_raw: bool,
    keys: &AttributeKeys,
    mut spans: Vec<SpanFacts>,
) -> Result<WireExport, WireError> {
    spans.clear();
    let mut out = WireExport {
        spans,
        ..WireExport::default()
    };
    let mut r = Reader::new(bytes, 0);
    while let Some((field, wire_type)) = r.key()? {
        match (field, wire_type) {
            (1, LEN) => {
                let range = r.len_delimited()?;
                read_resource_spans(bytes, range, keep_raw, keys, &mut out)?;
            }
            _ => r.skip(wire_type)?,
        }
    }
    Ok(out)
}

fn read_resource_spans(
    bytes: &Bytes,
    range: Range<usize>,
    keep_raw: bool,
    keys: &AttributeKeys,
    out: &mut WireExport,
) -> Result<(), WireError> {
    // The resource may come after the spans on the wire, so spans are read once it is known.
    let mut resources = Vec::new();
    let mut scopes = Vec::new();
    let mut schema_url = None;
    let mut r = Reader::sub(bytes, range);
    while let Some((field, wire_type)) = r.key()? {
        match (field, wire_type) {
            (1, LEN) => resources.push(r.len_delimited()?),
            (2, LEN) => scopes.push(r.len_delimited()?),
            (3, LEN) => schema_url = Some(r.len_delimited()?),
            _ => r.skip(wire_type)?,
        }
    }
    let (service, resource_captures) = read_resource(bytes, &resources, keys)?;
    for scope_range in scopes {
        let origin = u32::try_from(out.origins.len()).map_err(|_| WireError("too many scopes"))?;
        let mut scope = Vec::new();
        let mut scope_schema_url = None;
        let mut spans = Vec::new();
        let mut r = Reader::sub(bytes, scope_range);
        while let Some((field, wire_type)) = r.key()? {
            match (field, wire_type) {
                (1, LEN) => scope.push(r.len_delimited()?),
                (2, LEN) => spans.push(r.len_delimited()?),
                (3, LEN) => scope_schema_url = Some(r.len_delimited()?),
                _ => r.skip(wire_type)?,
            }
        }
        out.spans.reserve(spans.len());
        if keep_raw {
            out.raw.reserve(spans.len());
        }
        let scope_name = read_scope_name(bytes, &scope)?;
        for span in spans {
            let mut facts = read_span(bytes, span.clone(), &service, keys)?;
            facts.scope = scope_name.clone();
            for (key, value) in &resource_captures {
                facts
                    .captured
                    .capture_one(key, Some(ValueRef::Str(value)), keys);
            }
            out.spans.push(facts);
            if keep_raw {
                out.raw.push((origin, span));
            }
        }
        if keep_raw {
            out.origins.push(OriginRanges {
                resource: resources.clone(),
                resource_schema_url: schema_url.clone(),
                scope,
                scope_schema_url,
            });
        }
    }
    Ok(())
}

/// The `name` of the scope's `InstrumentationScope` (the last one, as prost merges them).
fn read_scope_name(bytes: &Bytes, scopes: &[Range<usize>]) -> Result<Option<Symbol>, WireError> {
    let mut name = None;
    for range in scopes {
        let mut r = Reader::sub(bytes, range.clone());
        while let Some((field, wire_type)) = r.key()? {
            match (field, wire_type) {
                (1, LEN) => name = Some(utf8(r.slice()?)?),
                _ => r.skip(wire_type)?,
            }
        }
    }
    Ok(crate::contract::scope_name(name))
}

/// (key, value in string form) of the attributes policies name.
type Captured = Vec<(String, String)>;

/// One pass over the resource's attributes: `service.name` of the first attribute with that key
/// (as the decoded path reads it), and the attributes that policies name, in string form.
fn read_resource(
    bytes: &Bytes,
    resources: &[Range<usize>],
    keys: &AttributeKeys,
) -> Result<(Symbol, Captured), WireError> {
    let mut service: Option<Symbol> = None;
    let mut captured = Vec::new();
    for range in resources {
        let mut r = Reader::sub(bytes, range.clone());
        while let Some((field, wire_type)) = r.key()? {
            match (field, wire_type) {
                (1, LEN) => {
                    let kv = r.len_delimited()?;
                    let mut name = "";
                    let (_, value) = read_key_value(bytes, kv, |key| {
                        name = key;
                        (key == attr::SERVICE_NAME && service.is_none()) || keys.contains(key)
                    })?;
                    if name == attr::SERVICE_NAME && service.is_none() {
                        let found = match value {
                            Some(ValueRef::Str(name)) if !name.is_empty() => symbol(name),
                            _ => unknown_service(),
                        };
                        if keys.is_empty() {
                            // No policy names a resource attribute: the service is all we need.
                            return Ok((found, captured));
                        }
                        service = Some(found);
                    }
                    if keys.contains(name) {
                        if let Some(text) = value.and_then(string_form_of) {
                            captured.push((name.to_owned(), text));
                        }
                    }
                }
                _ => r.skip(wire_type)?,
            }
        }
    }
    Ok((service.unwrap_or_else(unknown_service), captured))
}

fn read_span(
    bytes: &Bytes,
    range: Range<usize>,
    service: &Symbol,
    keys: &AttributeKeys,
) -> Result<SpanFacts, WireError> {
    let mut facts = FactsReader::new(service.clone());
    let mut status_code = 0i32;
    let mut r = Reader::sub(bytes, range);
    while let Some((field, wire_type)) = r.key()? {
        match (field, wire_type) {
            (1, LEN) => facts.trace_id(r.slice()?),
            (2, LEN) => facts.span_id(r.slice()?),
            (4, LEN) => facts.parent_span_id(r.slice()?),
            // prost keeps an enum's 32 low bits.
            (6, VARINT) => facts.otlp_kind(r.varint()? as i32),
            (7, I64) => facts.start_time(r.fixed64()?),
            (8, I64) => facts.end_time(r.fixed64()?),
            (9, LEN) => {
                let kv = r.len_delimited()?;
                let mut key_text = None;
                let (_, value) = read_key_value(bytes, kv, |key| {
                    key_text = Some(key);
                    true
                })?;
                // A key-value without a key: the decoded path sees the empty key.
                let key = key_text.unwrap_or("");
                if !keys.is_empty() {
                    facts.captured().capture_one(key, value, keys);
                }
                facts.attribute(key, value);
            }
            (15, LEN) => {
                let status = r.len_delimited()?;
                let mut s = Reader::sub(bytes, status);
                while let Some((field, wire_type)) = s.key()? {
                    match (field, wire_type) {
                        // prost keeps an enum's 32 low bits.
                        (3, VARINT) => status_code = s.varint()? as i32,
                        _ => s.skip(wire_type)?,
                    }
                }
            }
            _ => r.skip(wire_type)?,
        }
    }
    Ok(facts.finish(status_code == STATUS_CODE_ERROR))
}

const STATUS_CODE_ERROR: i32 = 2;

/// Reads a `KeyValue`; `wanted` sees the key and says whether the value is worth reading.
/// Returns whether it was wanted, and its value (`None`: no value, as the decoded path sees it).
fn read_key_value<'a>(
    bytes: &'a Bytes,
    range: Range<usize>,
    mut wanted: impl FnMut(&'a str) -> bool,
) -> Result<(bool, Option<ValueRef<'a>>), WireError> {
    let mut key: &'a str = "";
    let mut value = None;
    let mut r = Reader::sub(bytes, range);
    while let Some((field, wire_type)) = r.key()? {
        match (field, wire_type) {
            (1, LEN) => {
                let bytes = r.slice()?;
                key = match known_key(bytes) {
                    Some(known) => known,
                    None => utf8(bytes)?,
                };
            }
            (2, LEN) => value = Some(r.len_delimited()?),
            _ => r.skip(wire_type)?,
        }
    }
    if !wanted(key) {
        return Ok((false, None));
    }
    let value = match value {
        Some(range) => read_any_value(bytes, range)?,
        None => None,
    };
    Ok((true, value))
}

/// An `AnyValue`: the last oneof field wins; none set is no value.
fn read_any_value(bytes: &Bytes, range: Range<usize>) -> Result<Option<ValueRef<'_>>, WireError> {
    let mut value = None;
    let mut r = Reader::sub(bytes, range);
    while let Some((field, wire_type)) = r.key()? {
        value = Some(match (field, wire_type) {
            (1, LEN) => ValueRef::Str(utf8(r.slice()?)?),
            (2, VARINT) => ValueRef::Bool(r.varint()? != 0),
            (3, VARINT) => ValueRef::Int(r.varint()? as i64),
            (4, I64) => ValueRef::Double(f64::from_bits(r.fixed64()?)),
            (5, LEN) => ValueRef::Array(ArrayRef::Wire(r.slice()?)),
            (6, LEN) | (7, LEN) => {
                r.skip(LEN)?;
                ValueRef::Other
            }
            (8, VARINT) => {
                r.varint()?;
                ValueRef::Other
            }
            (1..=8, _) => return Err(WireError("AnyValue field of the wrong wire type")),
            _ => {
                r.skip(wire_type)?;
                continue;
            }
        });
    }
    Ok(value)
}

/// The items of an encoded `ArrayValue`, when every one is a string.
pub fn array_strings(array: &[u8]) -> Option<Vec<String>> {
    let bytes = Bytes::copy_from_slice(array);
    let mut items = Vec::new();
    let mut r = Reader::new(&bytes, 0);
    while let Some((field, wire_type)) = r.key().ok()? {
        match (field, wire_type) {
            (1, LEN) => {
                let item = r.len_delimited().ok()?;
                match read_any_value(&bytes, item).ok()? {
                    Some(ValueRef::Str(s)) => items.push(s.to_owned()),
                    _ => return None,
                }
            }
            _ => r.skip(wire_type).ok()?,
        }
    }
    Some(items)
}

/// Checks the array values of a request are well-formed, as prost would when decoding it.
fn utf8(bytes: &[u8]) -> Result<&str, WireError> {
    std::str::from_utf8(bytes).map_err(|_| WireError("a string is not valid UTF-8"))
}

const VARINT: u8 = 0;
const I64: u8 = 1;
const LEN: u8 = 2;
const I32: u8 = 5;

/// A cursor over one message's bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    end: usize,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a Bytes, pos: usize) -> Reader<'a> {
        Reader {
            bytes,
            pos,
            end: bytes.len(),
        }
    }

    fn sub(bytes: &'a Bytes, range: Range<usize>) -> Reader<'a> {
        Reader {
            bytes,
            pos: range.start,
            end: range.end,
        }
    }

    /// The next field's number and wire type, `None` at the end of the message.
    ///
    /// Inlined over [`Reader::varint`]'s one-byte fast path: every field OTLP defines has a
    /// number below 16, so its key is one byte.
    #[inline(always)]
    fn key(&mut self) -> Result<Option<(u32, u8)>, WireError> {
        if self.pos >= self.end {
            return Ok(None);
        }
        // The two paths meet on the whole key, split only after: when each built the pair, the
        // one-byte path stored its field and wire type apart and the join loaded them as one
        // word, a store-forwarding stall on every key (two thirds of this reader's own time).
        let key = self.varint()?;
        let wire_type = (key & 7) as u8;
        let field = u32::try_from(key >> 3).map_err(|_| WireError("field number too large"))?;
        if field == 0 {
            return Err(WireError("field number 0"));
        }
        Ok(Some((field, wire_type)))
    }

    /// With a one-byte fast path: lengths and small integers.
    #[inline(always)]
    fn varint(&mut self) -> Result<u64, WireError> {
        match self.bytes.get(self.pos) {
            Some(&byte) if byte < 0x80 && self.pos < self.end => {
                self.pos += 1;
                Ok(u64::from(byte))
            }
            _ => self.long_varint(),
        }
    }

    #[inline(never)]
    fn long_varint(&mut self) -> Result<u64, WireError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let Some(&byte) = self.bytes[..self.end].get(self.pos) else {
                return Err(WireError("truncated varint"));
            };
            self.pos += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Ok(value);
            }
        }
        Err(WireError("varint longer than ten bytes"))
    }

    #[inline]
    fn fixed64(&mut self) -> Result<u64, WireError> {
        let bytes = self.take(8)?;
        let array: [u8; 8] = bytes
            .try_into()
            .map_err(|_| WireError("truncated fixed64"))?;
        Ok(u64::from_le_bytes(array))
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|end| *end <= self.end)
            .ok_or(WireError("field runs past the end of its message"))?;
        let slice = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(slice)
    }

    #[inline]
    fn len_delimited(&mut self) -> Result<Range<usize>, WireError> {
        let len = usize::try_from(self.varint()?).map_err(|_| WireError("length too large"))?;
        let start = self.pos;
        self.take(len)?;
        Ok(start..self.pos)
    }

    #[inline]
    fn slice(&mut self) -> Result<&'a [u8], WireError> {
        let range = self.len_delimited()?;
        Ok(&self.bytes[range])
    }

    fn skip(&mut self, wire_type: u8) -> Result<(), WireError> {
        match wire_type {
            VARINT => self.varint().map(drop),
            I64 => self.take(8).map(drop),
            LEN => self.len_delimited().map(drop),
            I32 => self.take(4).map(drop),
            // Groups (3, 4) are not used by OTLP; prost rejects them in these messages too.
            _ => Err(WireError("unsupported wire type")),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
