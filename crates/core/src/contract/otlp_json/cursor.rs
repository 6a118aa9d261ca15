//! OTLP JSON read in one pass over the bytes, for the forms exporters write most.
//!
//! [`super::facts`] walks a line with serde's visitors; its profile is serde's machinery (key
//! buffers, visitor dispatch, `ignore_value`), not the facts. This reader is a cursor over the line
//! that knows the OTLP shape: keys are compared as borrowed slices, strings are scanned sixteen
//! bytes at a time ([`super::bytes`]) and borrowed unless they hold escapes, numbers are read where
//! they are needed and only checked where they are not.
//!
//! It reads exactly what [`super::facts`] reads, and gives up (`None`) on anything else:
//! escaped keys, surrogate escapes, duplicate fields, links, scope attributes, events other
//! than the plain ones, attribute values other than strings, bools, ints, doubles and arrays
//! of those, unusual
//! numbers (`-0`, out of range), and any malformed input. [`super::read_facts`] then asks the
//! serde reader, and after it the decoded path, so a line gives the same facts or the same
//! error as before; the tests compare this reader with the decoded path.

use std::borrow::Cow;

use self::keys::{KeyOrder, QuotedKey};
use super::bytes::{stops, stops16};
use super::facts::{
    hex_bytes, name_scope, span_reader, Resource, SPAN_KINDS, STATUS_CODES, STATUS_CODE_ERROR,
};
use crate::contract::{ArrayRef, AttributeKeys, SpanFacts, ValueRef};

/// Every span of one line, or `None` when the other readers must read it.
pub(super) fn read(bytes: &[u8], keys: &AttributeKeys) -> Option<Vec<SpanFacts>> {
    // Whole lines of hundreds of kilobytes: SIMD checks them several times faster than
    // `std::str::from_utf8`, with the same answer.
    let text = simdutf8::basic::from_utf8(bytes).ok()?;
    let mut cursor = Cursor {
        text,
        pos: 0,
        span_order: SPAN_ORDER.get(),
    };
    // A span of OTLP JSON with GenAI attributes is a kilobyte or more: sized for that, a
    // line's facts (hundreds of bytes each) are not copied at every doubling.
    let mut spans = Vec::with_capacity(bytes.len() / 1024);
    let read = cursor.request(keys, &mut spans);
    SPAN_ORDER.set(cursor.span_order);
    read?;
    cursor.ws();
    (cursor.pos == text.len()).then_some(spans)
}

/// A span's fields, as [`Cursor::span`] matches them.
static SPAN_KEYS: [QuotedKey; 16] = [
    QuotedKey::new("traceId"),
    QuotedKey::new("spanId"),
    QuotedKey::new("parentSpanId"),
    QuotedKey::new("traceState"),
    QuotedKey::new("flags"),
    QuotedKey::new("name"),
    QuotedKey::new("kind"),
    QuotedKey::new("startTimeUnixNano"),
    QuotedKey::new("endTimeUnixNano"),
    QuotedKey::new("attributes"),
    QuotedKey::new("droppedAttributesCount"),
    QuotedKey::new("events"),
    QuotedKey::new("droppedEventsCount"),
    QuotedKey::new("links"),
    QuotedKey::new("droppedLinksCount"),
    QuotedKey::new("status"),
];

/// [`SPAN_KEYS`]' index of a span key.
fn span_key_index(key: &str) -> Option<usize> {
    Some(match key {
        "traceId" => 0,
        "spanId" => 1,
        "parentSpanId" => 2,
        "traceState" => 3,
        "flags" => 4,
        "name" => 5,
        "kind" => 6,
        "startTimeUnixNano" => 7,
        "endTimeUnixNano" => 8,
        "attributes" => 9,
        "droppedAttributesCount" => 10,
        "events" => 11,
        "droppedEventsCount" => 12,
        "links" => 13,
        "droppedLinksCount" => 14,
        "status" => 15,
        _ => return None,
    })
}

type SpanKeyOrder = KeyOrder<{ SPAN_KEYS.len() }>;

thread_local! {
    /// The order of a span's keys as this thread last read them: lines from one exporter
    /// print them alike, and learning it again for every line cost more than it saved where
    /// lines hold a few spans each (the instrumentation recordings).
    static SPAN_ORDER: std::cell::Cell<SpanKeyOrder> =
        const { std::cell::Cell::new(KeyOrder::new(&SPAN_KEYS, span_key_index)) };
}

/// Skipped values nest at most this deep below the field that holds them; serde_json refuses
/// 128 levels in all, and the OTLP shape above a skipped value is far less than the rest.
const MAX_SKIP_DEPTH: usize = 64;

/// Marks fields seen in one object: a key seen twice is left to the other readers.
#[derive(Default)]
struct Seen(u32);

impl Seen {
    fn first(&mut self, bit: u32) -> Option<()> {
        if self.0 & (1 << bit) != 0 {
            return None;
        }
        self.0 |= 1 << bit;
        Some(())
    }
}

/// An attribute value as read.
enum Val<'a> {
    Str(Cow<'a, str>),
    Bool(bool),
    Int(i64),
    Double(f64),
    /// An array of scalars: its strings, or `None` when an item is not a string.
    Array(Option<Vec<Cow<'a, str>>>),
}

impl Val<'_> {
    /// Drops a value read, freeing only what it owns: most values own nothing, and the drop
    /// glue, out of line, was a call per attribute (0.8% of `replay`).
    #[inline(always)]
    fn release(value: Option<Self>) {
        match &value {
            None
            | Some(Val::Str(Cow::Borrowed(_)) | Val::Bool(_) | Val::Int(_) | Val::Double(_)) => {
                std::mem::forget(value)
            }
            Some(_) => drop(value),
        }
    }

    fn as_ref(&self) -> ValueRef<'_> {
        match self {
            Val::Str(s) => ValueRef::Str(s),
            Val::Bool(b) => ValueRef::Bool(*b),
            Val::Int(i) => ValueRef::Int(*i),
            Val::Double(d) => ValueRef::Double(*d),
            Val::Array(Some(items)) => ValueRef::Array(ArrayRef::Strings(items)),
            Val::Array(None) => ValueRef::Array(ArrayRef::NotStrings),
        }
    }
}

struct Cursor<'a> {
    text: &'a str,
    pos: usize,
    span_order: SpanKeyOrder,
}

/// The value of 1 to 19 ASCII digits, as `u64`'s parse gives it (19 digits cannot overflow);
/// `None` for any other text. A span's two times are such strings, and the parse's checked
/// arithmetic was 15 instructions a digit.
fn short_decimal(text: &str) -> Option<u64> {
    let digits = text.as_bytes();
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    let mut value = 0;
    let mut chunks = digits.chunks_exact(8);
    for chunk in &mut chunks {
        value = value * 100_000_000 + eight_digits(chunk)?;
    }
    for &byte in chunks.remainder() {
        let digit = byte.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        value = value * 10 + u64::from(digit);
    }
    Some(value)
}

/// The value of eight ASCII digits, `None` unless all eight are digits. A time's 19 digits
/// were 15 instructions a digit through `u64`'s parse, 4 one at a time; this takes 8 at once
/// with the multiply-and-shift steps of the SWAR decimal parse (as in `fast_float`).
fn eight_digits(chunk: &[u8]) -> Option<u64> {
    let bytes: [u8; 8] = chunk.try_into().ok()?;
    let word = u64::from_le_bytes(bytes);
    let values = word.wrapping_sub(0x3030_3030_3030_3030);
    // A byte below b'0' borrows into its top bit; one above b'9' carries into it once 0x46
    // (0x7f - b'9') is added.
    if (values | word.wrapping_add(0x4646_4646_4646_4646)) & 0x8080_8080_8080_8080 != 0 {
        return None;
    }
    // Pairs, then fours, then all eight: the first digit is the lowest byte.
    let pairs = values.wrapping_mul(10).wrapping_add(values >> 8);
    let low = pairs & 0x0000_00ff_0000_00ff;
    let high = (pairs >> 16) & 0x0000_00ff_0000_00ff;
    Some(
        (low.wrapping_mul(100 + (1_000_000 << 32)))
            .wrapping_add(high.wrapping_mul(1 + (10_000 << 32)))
            >> 32,
    )
}

/// A string `intValue` as `i64`'s parse reads it, plain digits summed by [`short_decimal`].
fn int64_text(text: &str) -> Option<i64> {
    match short_decimal(text) {
        Some(value) => i64::try_from(value).ok(),
        // A sign, or 20 digits and more.
        None => text.parse().ok(),
    }
}

impl<'a> Cursor<'a> {
    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    #[inline]
    fn ws(&mut self) {
        // Exporters print compact JSON: one compare passes the next byte, at every token.
        let bytes = self.bytes();
        if bytes.get(self.pos).is_some_and(|&b| b > b' ') {
            return;
        }
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = bytes.get(self.pos) {
            self.pos += 1;
        }
    }

    /// The next byte after whitespace, not consumed.
    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.bytes().get(self.pos).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.pos += 1)
    }

    /// `null`, consumed, if it comes next.
    fn null(&mut self) -> Option<bool> {
        Some(self.peek()? == b'n' && self.expect(b"null").is_some())
    }

    /// An object, each field handed to `field` with its (unescaped) key.
    fn object(&mut self, field: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.fields(
            |c| {
                let key = c.key()?;
                c.eat(b':')?;
                Some(key)
            },
            field,
        )
    }

    /// [`Cursor::object`] of an object whose keys `order` lists: each key is first checked
    /// against the one that followed the previous key last time (see [`keys`]).
    fn object_in_order<const K: usize>(
        &mut self,
        order: &mut KeyOrder<K>,
        field: impl FnMut(&mut Self, &'a str) -> Option<()>,
    ) -> Option<()> {
        let mut previous = None;
        self.fields(
            |c| {
                c.ws();
                let guessed = order.guess(previous).filter(|(_, quoted)| {
                    c.bytes()
                        .get(c.pos..)
                        .and_then(|rest| rest.first_chunk::<{ keys::SPAN }>())
                        .is_some_and(|next| quoted.starts(next))
                });
                Some(match guessed {
                    Some((index, quoted)) => {
                        c.pos += quoted.len;
                        previous = Some(index);
                        quoted.name
                    }
                    None => {
                        let key = c.key()?;
                        c.eat(b':')?;
                        previous = Some(order.learn(previous, key));
                        key
                    }
                })
            },
            field,
        )
    }

    /// An object's braces and commas: each field's key read by `key` (through its colon), its
    /// value by `field`.
    #[inline(always)]
    fn fields(
        &mut self,
        mut key: impl FnMut(&mut Self) -> Option<&'a str>,
        mut field: impl FnMut(&mut Self, &'a str) -> Option<()>,
    ) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.pos += 1;
            return Some(());
        }
        loop {
            let name = key(self)?;
            field(self, name)?;
            match self.peek()? {
                b',' => self.pos += 1,
                b'}' => {
                    self.pos += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// An array, each item read by `item`.
    fn array(&mut self, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        if self.peek()? == b']' {
            self.pos += 1;
            return Some(());
        }
        loop {
            item(self)?;
            match self.peek()? {
                b',' => self.pos += 1,
                b']' => {
                    self.pos += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// `[]`, the only form of a field this reader does not read.
    fn empty_array(&mut self) -> Option<()> {
        self.array(|_| None)
    }

    fn key(&mut self) -> Option<&'a str> {
        // Not through `string`: a key is read for every field, and building and matching its
        // `Cow` cost more than the scan. An escaped key is left to the other readers.
        self.eat(b'"')?;
        self.plain_body()?.ok()
    }

    /// A string, borrowed unless it has escapes.
    fn string(&mut self) -> Option<Cow<'a, str>> {
        self.eat(b'"')?;
        self.string_body()
    }

    /// Consumes `prefix` if the input continues with it, byte for byte. One copy per length:
    /// the comparison is then of a known size, a few word compares inline rather than a call
    /// to `memcmp` (1.2% of `replay`'s samples, for prefixes of 1 to 15 bytes).
    #[inline]
    fn expect<const N: usize>(&mut self, prefix: &[u8; N]) -> Option<()> {
        let found = self
            .bytes()
            .get(self.pos..self.pos.checked_add(N)?)
            .is_some_and(|next| next == prefix);
        found.then(|| self.pos += N)
    }

    /// The rest of a string whose opening quote is consumed.
    #[inline]
    fn string_body(&mut self) -> Option<Cow<'a, str>> {
        let start = self.pos;
        match self.plain_body()? {
            Ok(text) => Some(Cow::Borrowed(text)),
            Err(escape) => self.escaped_body(start, escape),
        }
    }

    /// The rest of a string from `start` whose first escape is at `end`. Out of line: escapes
    /// are rare, and their loop's setup cost every plain string more than the scan.
    #[inline(never)]
    fn escaped_body(&mut self, start: usize, end: usize) -> Option<Cow<'a, str>> {
        let mut owned = String::from(self.text.get(start..end)?);
        self.pos = end;
        loop {
            match *self.bytes().get(self.pos)? {
                b'"' => {
                    self.pos += 1;
                    return Some(Cow::Owned(owned));
                }
                b'\\' => {
                    let escape = *self.bytes().get(self.pos + 1)?;
                    self.pos += 2;
                    owned.push(match escape {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => self.unicode_escape()?,
                        _ => return None,
                    });
                }
                _ => {
                    let run = self.pos;
                    let end = self.plain_run()?;
                    owned.push_str(self.text.get(run..end)?);
                    self.pos = end;
                }
            }
        }
    }

    /// The rest of a string whose opening quote is consumed, when it holds no escape: its
    /// text, the closing quote consumed. `Err` with the position of the first backslash, the
    /// cursor left where it was; `None` at a raw control character or the end of the line.
    fn plain_body(&mut self) -> Option<Result<&'a str, usize>> {
        let start = self.pos;
        let end = self.plain_run()?;
        if self.bytes().get(end) != Some(&b'"') {
            return Some(Err(end));
        }
        let text = self.text.get(start..end)?;
        self.pos = end + 1;
        Some(Ok(text))
    }

    /// The four hex digits of a `\u` escape outside the surrogates, which are left to the
    /// other readers.
    fn unicode_escape(&mut self) -> Option<char> {
        let digits = self.text.get(self.pos..self.pos + 4)?;
        if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let code = u32::from_str_radix(digits, 16).ok()?;
        self.pos += 4;
        char::from_u32(code)
    }

    /// The position of the next `"`, `\` or control character from `pos` (`None`: a control
    /// character, which JSON strings may not hold raw, or the end of the line).
    // Not inlined: once the SSE2 step made it small, inlining it into its callers cost 2.6% more
    // instructions in `replay`, not fewer.
    #[inline(never)]
    fn plain_run(&self) -> Option<usize> {
        let bytes = self.bytes();
        let mut i = self.pos;
        // Sixteen bytes a step (most strings are ids, times, names and attribute keys of 16 to
        // 40 bytes), then eight; the first byte flagged is exact, and the loop below tells a
        // quote or backslash from a control character.
        'scan: {
            while let Some(chunk) = bytes.get(i..i + 16) {
                let found = stops16(chunk.try_into().ok()?);
                if found != 0 {
                    i += found.trailing_zeros() as usize;
                    break 'scan;
                }
                i += 16;
            }
            if let Some(chunk) = bytes.get(i..i + 8) {
                let found = stops(u64::from_le_bytes(chunk.try_into().ok()?));
                i += match found {
                    0 => 8,
                    _ => (found.trailing_zeros() / 8) as usize,
                };
            }
        }
        loop {
            match *bytes.get(i)? {
                b'"' | b'\\' => return Some(i),
                0..=0x1f => return None,
                _ => i += 1,
            }
        }
    }

    /// A number's text, checked against JSON's grammar.
    fn number(&mut self) -> Option<&'a str> {
        self.ws();
        let bytes = self.bytes();
        let start = self.pos;
        let mut i = start;
        let digits = |i: &mut usize| {
            let from = *i;
            while bytes.get(*i).is_some_and(u8::is_ascii_digit) {
                *i += 1;
            }
            *i > from
        };
        if bytes.get(i) == Some(&b'-') {
            i += 1;
        }
        match bytes.get(i)? {
            b'0' => i += 1,
            b'1'..=b'9' => {
                digits(&mut i);
            }
            _ => return None,
        }
        if bytes.get(i) == Some(&b'.') {
            i += 1;
            if !digits(&mut i) {
                return None;
            }
        }
        if let Some(b'e' | b'E') = bytes.get(i) {
            i += 1;
            if let Some(b'+' | b'-') = bytes.get(i) {
                i += 1;
            }
            if !digits(&mut i) {
                return None;
            }
        }
        self.pos = i;
        self.text.get(start..i)
    }

    /// An integer as serde_json reads one: a token without fraction or exponent, `-0` aside
    /// (which it reads as a float), within i64 when negative and u64 when not.
    fn integer(&mut self) -> Option<i128> {
        let token = self.number()?;
        let (negative, digits) = match token.strip_prefix('-') {
            Some(digits) => (true, digits),
            None => (false, token),
        };
        // Nearly every integer is short: `kind`, `flags`, the dropped counts.
        let magnitude = match short_decimal(digits) {
            Some(magnitude) => magnitude,
            None if digits.bytes().all(|b| b.is_ascii_digit()) => digits.parse().ok()?,
            None => return None,
        };
        if negative {
            (magnitude != 0 && magnitude <= 1 << 63).then(|| -i128::from(magnitude))
        } else {
            Some(i128::from(magnitude))
        }
    }

    fn u32(&mut self) -> Option<()> {
        u32::try_from(self.integer()?).ok().map(drop)
    }

    fn bool(&mut self) -> Option<bool> {
        if self.peek()? == b't' && self.expect(b"true").is_some() {
            Some(true)
        } else if self.expect(b"false").is_some() {
            Some(false)
        } else {
            None
        }
    }

    /// An enum as a number or a name.
    fn enumeration(&mut self, names: &[&str]) -> Option<i32> {
        if self.peek()? == b'"' {
            let name = self.string()?;
            return names
                .iter()
                .position(|n| *n == name)
                .and_then(|i| i32::try_from(i).ok());
        }
        i32::try_from(self.integer()?).ok()
    }

    /// A time: a u64 as a number or a decimal string.
    fn nanos(&mut self) -> Option<u64> {
        if self.peek()? == b'"' {
            let start = self.pos;
            self.pos += 1;
            if let Some(nanos) = self
                .plain_body()
                .and_then(Result::ok)
                .and_then(short_decimal)
            {
                return Some(nanos);
            }
            // A sign, an escape, 20 digits or more: `u64`'s own parse decides.
            self.pos = start;
            return self.string()?.parse().ok();
        }
        u64::try_from(self.integer()?).ok()
    }

    /// Any JSON value, checked and dropped.
    fn skip(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_SKIP_DEPTH {
            return None;
        }
        match self.peek()? {
            b'{' => {
                self.eat(b'{')?;
                if self.peek()? == b'}' {
                    self.pos += 1;
                    return Some(());
                }
                loop {
                    self.string()?;
                    self.eat(b':')?;
                    self.skip(depth + 1)?;
                    match self.peek()? {
                        b',' => self.pos += 1,
                        b'}' => {
                            self.pos += 1;
                            return Some(());
                        }
                        _ => return None,
                    }
                }
            }
            b'[' => self.array(|c| c.skip(depth + 1)),
            b'"' => self.string().map(drop),
            b't' | b'f' => self.bool().map(drop),
            b'n' => self.expect(b"null"),
            _ => self.number().map(drop),
        }
    }

    fn request(&mut self, keys: &AttributeKeys, out: &mut Vec<SpanFacts>) -> Option<()> {
        let mut seen = Seen::default();
        self.object(|c, key| match key {
            "resourceSpans" => {
                seen.first(0)?;
                c.array(|c| c.resource_spans(keys, out))
            }
            _ => c.skip(0),
        })
    }

    fn resource_spans(&mut self, keys: &AttributeKeys, out: &mut Vec<SpanFacts>) -> Option<()> {
        let mut seen = Seen::default();
        // The resource may come after its spans: they are read first and given its service
        // name and captured attributes at the end.
        let first = out.len();
        let mut resource = Resource::default();
        self.object(|c, key| match key {
            "resource" => {
                seen.first(0)?;
                if c.null()? {
                    return Some(());
                }
                c.resource(keys, &mut resource)
            }
            "scopeSpans" => {
                seen.first(1)?;
                c.array(|c| c.scope_spans(keys, out))
            }
            "schemaUrl" => {
                seen.first(2)?;
                c.string().map(drop)
            }
            _ => c.skip(0),
        })?;
        resource.apply(&mut out[first..], keys);
        Some(())
    }

    fn resource(&mut self, keys: &AttributeKeys, resource: &mut Resource) -> Option<()> {
        let mut seen = Seen::default();
        self.object(|c, key| match key {
            "attributes" => {
                seen.first(0)?;
                c.array(|c| {
                    let (key, value) = c.attribute()?;
                    resource.attribute(&key, value.as_ref().map(Val::as_ref), keys);
                    Val::release(value);
                    Some(())
                })
            }
            "droppedAttributesCount" => {
                seen.first(1)?;
                c.u32()
            }
            "entityRefs" => {
                seen.first(2)?;
                c.empty_array()
            }
            _ => c.skip(0),
        })
    }

    fn scope_spans(&mut self, keys: &AttributeKeys, out: &mut Vec<SpanFacts>) -> Option<()> {
        let mut seen = Seen::default();
        // The scope may come after its spans: they are given its name at the end.
        let first = out.len();
        let mut scope = None;
        self.object(|c, key| match key {
            "scope" => {
                seen.first(0)?;
                if c.null()? {
                    return Some(());
                }
                scope = Some(c.scope()?);
                Some(())
            }
            "spans" => {
                seen.first(1)?;
                let mut order = c.span_order;
                let read = c.array(|c| c.span(keys, &mut order, out));
                c.span_order = order;
                read
            }
            "schemaUrl" => {
                seen.first(2)?;
                c.string().map(drop)
            }
            _ => c.skip(0),
        })?;
        name_scope(&mut out[first..], scope.as_deref());
        Some(())
    }

    /// An `InstrumentationScope`: its name (empty when absent).
    fn scope(&mut self) -> Option<Cow<'a, str>> {
        let mut seen = Seen::default();
        let mut name = Cow::Borrowed("");
        self.object(|c, key| match key {
            "name" => {
                seen.first(0)?;
                name = c.string()?;
                Some(())
            }
            "version" => {
                seen.first(1)?;
                c.string().map(drop)
            }
            "attributes" => {
                seen.first(2)?;
                c.empty_array()
            }
            "droppedAttributesCount" => {
                seen.first(3)?;
                c.u32()
            }
            _ => c.skip(0),
        })?;
        Some(name)
    }

    fn span(
        &mut self,
        keys: &AttributeKeys,
        order: &mut SpanKeyOrder,
        out: &mut Vec<SpanFacts>,
    ) -> Option<()> {
        let mut reader = span_reader();
        let mut seen = Seen::default();
        let mut status_code = 0;
        self.object_in_order(order, |c, key| {
            match key {
                "traceId" => {
                    seen.first(0)?;
                    let id = hex_bytes::<16>(&c.string()?)?;
                    reader.trace_id(id.as_ref().map_or(&[], |id| &id[..]));
                }
                "spanId" => {
                    seen.first(1)?;
                    let id = hex_bytes::<8>(&c.string()?)?;
                    reader.span_id(id.as_ref().map_or(&[], |id| &id[..]));
                }
                "parentSpanId" => {
                    seen.first(2)?;
                    let id = hex_bytes::<8>(&c.string()?)?;
                    reader.parent_span_id(id.as_ref().map_or(&[], |id| &id[..]));
                }
                "traceState" => {
                    seen.first(3)?;
                    c.string()?;
                }
                "flags" => {
                    seen.first(4)?;
                    c.u32()?;
                }
                "name" => {
                    seen.first(5)?;
                    c.string()?;
                }
                "kind" => {
                    seen.first(6)?;
                    reader.otlp_kind(c.enumeration(&SPAN_KINDS)?);
                }
                "startTimeUnixNano" => {
                    seen.first(7)?;
                    reader.start_time(c.nanos()?);
                }
                "endTimeUnixNano" => {
                    seen.first(8)?;
                    reader.end_time(c.nanos()?);
                }
                "attributes" => {
                    seen.first(9)?;
                    c.array(|c| {
                        let (key, read) = c.attribute()?;
                        let (key, value) = (&*key, read.as_ref().map(Val::as_ref));
                        if !keys.is_empty() {
                            reader.captured().capture_one(key, value, keys);
                        }
                        reader.attribute(key, value);
                        Val::release(read);
                        Some(())
                    })?;
                }
                "droppedAttributesCount" => {
                    seen.first(10)?;
                    c.u32()?;
                }
                "events" => {
                    seen.first(11)?;
                    c.array(Self::event)?;
                }
                "droppedEventsCount" => {
                    seen.first(12)?;
                    c.u32()?;
                }
                "links" => {
                    seen.first(13)?;
                    c.empty_array()?;
                }
                "droppedLinksCount" => {
                    seen.first(14)?;
                    c.u32()?;
                }
                "status" => {
                    seen.first(15)?;
                    if !c.null()? {
                        status_code = c.status()?;
                    }
                }
                _ => c.skip(0)?,
            }
            Some(())
        })?;
        out.push(reader.finish(status_code == STATUS_CODE_ERROR));
        Some(())
    }

    /// An event, checked: the contract reads none, but a line with one the decoded path
    /// refuses must be refused. Only the plain form exporters write is taken (exceptions, first
    /// chunks); anything else is left to the others.
    fn event(&mut self) -> Option<()> {
        let mut seen = Seen::default();
        self.object(|c, key| match key {
            "timeUnixNano" => {
                seen.first(0)?;
                c.nanos().map(drop)
            }
            "name" => {
                seen.first(1)?;
                c.string().map(drop)
            }
            "attributes" => {
                seen.first(2)?;
                c.array(Self::plain_attribute)
            }
            "droppedAttributesCount" => {
                seen.first(3)?;
                c.u32()
            }
            _ => None,
        })
    }

    /// `{"key": …, "value": {one scalar}}`, the attribute form every reader takes alike.
    fn plain_attribute(&mut self) -> Option<()> {
        let mut seen = Seen::default();
        self.object(|c, key| match key {
            "key" => {
                seen.first(0)?;
                c.string().map(drop)
            }
            "value" => {
                seen.first(1)?;
                c.scalar().map(drop)
            }
            _ => None,
        })?;
        (seen.0 & 1 != 0).then_some(())
    }

    fn status(&mut self) -> Option<i32> {
        let mut seen = Seen::default();
        let mut code = 0;
        self.object(|c, key| match key {
            "message" => {
                seen.first(0)?;
                c.string().map(drop)
            }
            "code" => {
                seen.first(1)?;
                code = c.enumeration(&STATUS_CODES)?;
                Some(())
            }
            _ => c.skip(0),
        })?;
        Some(code)
    }

    /// A `KeyValue`: its key and value (`None`: no value).
    fn attribute(&mut self) -> Option<(Cow<'a, str>, Option<Val<'a>>)> {
        self.ws();
        let start = self.pos;
        if let Some(read) = self.compact_attribute() {
            return Some(read);
        }
        self.pos = start;
        let mut seen = Seen::default();
        let mut key = None;
        let mut value = None;
        self.object(|c, field| match field {
            "key" => {
                seen.first(0)?;
                key = Some(c.string()?);
                Some(())
            }
            "value" => {
                seen.first(1)?;
                if !c.null()? {
                    value = c.any_value()?;
                }
                Some(())
            }
            "keyStrindex" => {
                seen.first(2)?;
                i32::try_from(c.integer()?).ok().map(drop)
            }
            _ => c.skip(0),
        })?;
        Some((key?, value))
    }

    /// `{"key":"…","value":{"<kind>":…}}` with no space, as exporters print an attribute: read
    /// with prefix checks instead of the walk of any object, a fifth of the reading. `None` for
    /// any other layout; the caller rewinds and reads it the general way, to the same result.
    fn compact_attribute(&mut self) -> Option<(Cow<'a, str>, Option<Val<'a>>)> {
        self.expect(br#"{"key":""#)?;
        let key = self.string_body()?;
        self.expect(br#","value":{""#)?;
        let value = match *self.bytes().get(self.pos)? {
            b's' => {
                self.expect(br#"stringValue":""#)?;
                Val::Str(self.string_body()?)
            }
            b'i' => {
                self.expect(br#"intValue":"#)?;
                if self.expect(b"\"").is_some() {
                    Val::Int(int64_text(&self.string_body()?)?)
                } else {
                    Val::Int(i64::try_from(self.integer()?).ok()?)
                }
            }
            b'b' => {
                self.expect(br#"boolValue":"#)?;
                Val::Bool(self.bool()?)
            }
            b'd' => {
                // A string double may be no value at all (`"NaN"`): the general way reads it.
                self.expect(br#"doubleValue":"#)?;
                Val::Double(serde_json::from_str(self.number()?).ok()?)
            }
            b'a' => {
                self.expect(br#"arrayValue":"#)?;
                Val::Array(self.array_value()?)
            }
            _ => return None,
        };
        self.expect(b"}}")?;
        Some((key, Some(value)))
    }

    /// An `AnyValue` object; `None` when it holds no value (or a non-finite double).
    fn any_value(&mut self) -> Option<Option<Val<'a>>> {
        let mut value = None;
        let mut kinds = 0;
        self.object(|c, key| {
            let read = match key {
                "stringValue" => {
                    if c.null()? {
                        None
                    } else {
                        Some(Val::Str(c.string()?))
                    }
                }
                "boolValue" => {
                    if c.null()? {
                        None
                    } else {
                        Some(Val::Bool(c.bool()?))
                    }
                }
                "intValue" => {
                    if c.null()? {
                        None
                    } else if c.peek()? == b'"' {
                        Some(Val::Int(int64_text(&c.string()?)?))
                    } else {
                        Some(Val::Int(i64::try_from(c.integer()?).ok()?))
                    }
                }
                "doubleValue" => {
                    if c.null()? {
                        None
                    } else if c.peek()? == b'"' {
                        c.string()?
                            .trim()
                            .parse::<f64>()
                            .ok()
                            .filter(|d| d.is_finite())
                            .map(Val::Double)
                    } else {
                        // serde_json's own parser, so the double is the one the other readers
                        // read, to the last bit.
                        Some(Val::Double(serde_json::from_str(c.number()?).ok()?))
                    }
                }
                "arrayValue" => {
                    if c.null()? {
                        None
                    } else {
                        Some(Val::Array(c.array_value()?))
                    }
                }
                // Rare here, and read differently by each path: left to the others. Unknown
                // fields too: the decoded path buffers them as values, which refuses what a
                // skip lets pass (`1e400`).
                _ => return None,
            };
            // Two kinds in one value: which wins differs between the decoded path's direct
            // read and its rewrite, so it decides.
            kinds += 1;
            if kinds > 1 {
                return None;
            }
            value = read;
            Some(())
        })?;
        Some(value)
    }

    /// An `ArrayValue` of scalar values: its strings, or `None` when an item is another
    /// scalar (the contract reads arrays of strings only). Other items are left to the others.
    fn array_value(&mut self) -> Option<Option<Vec<Cow<'a, str>>>> {
        let mut items = Some(Vec::new());
        let mut seen = Seen::default();
        self.object(|c, key| match key {
            "values" => {
                seen.first(0)?;
                c.array(|c| {
                    match (c.scalar()?, &mut items) {
                        (Some(item), Some(items)) => items.push(item),
                        (None, _) => items = None,
                        (Some(_), None) => {}
                    }
                    Some(())
                })
            }
            _ => None,
        })?;
        // `{}` is an empty array to the decoded path, but rare: left to it.
        (seen.0 != 0).then_some(items)
    }

    /// `{one scalar}`, the value form every reader takes alike: its string, if a string.
    fn scalar(&mut self) -> Option<Option<Cow<'a, str>>> {
        let mut kinds = Seen::default();
        let mut string = None;
        self.object(|c, kind| {
            kinds.first(0)?;
            match kind {
                "stringValue" => string = Some(c.string()?),
                "boolValue" => drop(c.bool()?),
                "intValue" if c.peek()? == b'"' => drop(int64_text(&c.string()?)?),
                "intValue" => drop(i64::try_from(c.integer()?).ok()?),
                "doubleValue" => drop(serde_json::from_str::<f64>(c.number()?).ok()?),
                _ => return None,
            }
            Some(())
        })?;
        // `{}` is an item with no value: no string, as the decoded path reads it.
        Some(string)
    }
}

mod keys;
#[cfg(test)]
mod tests;
