//! OTLP JSON read straight into [`SpanFacts`], without a `serde_json::Value` or a prost tree.
//!
//! `replay` spends most of its time reading JSON; the decoded path builds a `Value` (on the
//! alternative forms), then a prost `Span` with every key, name and event, then reads facts
//! from it. This reader walks the JSON once with serde's visitors, borrows strings from the line
//! where it can, hands the contract's attributes to the same [`FactsReader`] the other readers
//! use, and skips the rest.
//!
//! It reads the forms exporters write: hex ids, enum names or numbers for `kind` and
//! `status.code`, `intValue` as a string or a number, `doubleValue` as a number or a string,
//! times as strings or numbers. Anything it is not sure to read exactly as the decoded path does
//! (duplicate keys, ids of unusual length, an attribute value with two kinds, bytes or
//! key-value-list values, a malformed line) makes it give up, and [`super::read_facts`] falls
//! back to the decoded path, so a line gives the same facts or the same error as before. Fields
//! it does not need are still checked like the decoded path checks them (the events and links
//! as prost types, strings as strings, counts as integers), so it never accepts a line the
//! decoded path refuses.

use std::borrow::Cow;
use std::fmt;

use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, EntityRef, InstrumentationScope,
};
use opentelemetry_proto::tonic::trace::v1::span::{Event, Link};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use crate::contract::{
    attr, string_form_of, ArrayRef, AttributeKeys, FactsReader, SpanFacts, Symbol, ValueRef,
};

/// Every span of one line, or `None` when the decoded path must read it.
pub(super) fn read(bytes: &[u8], keys: &AttributeKeys) -> Option<Vec<SpanFacts>> {
    // One check of the whole line, then a reader that trusts it: checking every string as it
    // is read was a twentieth of replay. A line that is not UTF-8 is the decoded path's to
    // refuse, with its own error.
    let text = std::str::from_utf8(bytes).ok()?;
    let mut spans = Vec::new();
    let mut de = serde_json::Deserializer::from_str(text);
    Request {
        keys,
        out: &mut spans,
    }
    .deserialize(&mut de)
    .ok()?;
    de.end().ok()?;
    Some(spans)
}

/// Marks fields seen in one object: a key seen twice is left to the decoded path.
#[derive(Default)]
struct Seen(u32);

impl Seen {
    fn first<E: de::Error>(&mut self, bit: u32) -> Result<(), E> {
        if self.0 & (1 << bit) != 0 {
            return Err(E::custom("duplicate field"));
        }
        self.0 |= 1 << bit;
        Ok(())
    }
}

/// A string borrowed from the line, or owned when it had escapes.
struct Str<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Str<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// A string the reader does not keep (span names, trace state): checked, never copied.
struct AnyStr;

impl<'de> Deserialize<'de> for AnyStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = AnyStr;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<AnyStr, E> {
                Ok(AnyStr)
            }
        }
        d.deserialize_str(V)
    }
}

/// A time: a u64 as a number or a decimal string (as the decoded path reads it).
struct Nanos(u64);

impl<'de> Deserialize<'de> for Nanos {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Nanos;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a u64 as a number or a string")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Nanos, E> {
                Ok(Nanos(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Nanos, E> {
                u64::try_from(v).map(Nanos).map_err(E::custom)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Nanos, E> {
                v.parse().map(Nanos).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// `intValue`: an i64 as a number or a decimal string.
struct IntValue(i64);

impl<'de> Deserialize<'de> for IntValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = IntValue;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an i64 as a number or a string")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<IntValue, E> {
                Ok(IntValue(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<IntValue, E> {
                i64::try_from(v).map(IntValue).map_err(E::custom)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<IntValue, E> {
                v.parse().map(IntValue).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// `doubleValue`: a number, or a string the decoded path rewrites (`"0.5"`, `"NaN"`); `None`
/// when it is not a finite number, as the decoded path drops those.
struct DoubleValue(Option<f64>);

impl<'de> Deserialize<'de> for DoubleValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = DoubleValue;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number or a string")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<DoubleValue, E> {
                Ok(DoubleValue(Some(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<DoubleValue, E> {
                Ok(DoubleValue(Some(v as f64)))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<DoubleValue, E> {
                Ok(DoubleValue(Some(v as f64)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<DoubleValue, E> {
                Ok(DoubleValue(
                    v.trim().parse::<f64>().ok().filter(|d| d.is_finite()),
                ))
            }
        }
        d.deserialize_any(V)
    }
}

pub(super) const SPAN_KINDS: [&str; 6] = [
    "SPAN_KIND_UNSPECIFIED",
    "SPAN_KIND_INTERNAL",
    "SPAN_KIND_SERVER",
    "SPAN_KIND_CLIENT",
    "SPAN_KIND_PRODUCER",
    "SPAN_KIND_CONSUMER",
];
pub(super) const STATUS_CODES: [&str; 3] =
    ["STATUS_CODE_UNSET", "STATUS_CODE_OK", "STATUS_CODE_ERROR"];

struct EnumSeed(&'static [&'static str]);

impl<'de> DeserializeSeed<'de> for EnumSeed {
    type Value = i32;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<i32, D::Error> {
        d.deserialize_any(self)
    }
}

impl Visitor<'_> for EnumSeed {
    type Value = i32;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an enum number or name")
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<i32, E> {
        i32::try_from(v).map_err(E::custom)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<i32, E> {
        i32::try_from(v).map_err(E::custom)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<i32, E> {
        self.0
            .iter()
            .position(|name| *name == v)
            .and_then(|i| i32::try_from(i).ok())
            .ok_or_else(|| E::custom("unknown enum name"))
    }
}

/// An attribute value as read; `Array` holds prost values because the array reader of
/// [`FactsReader`] takes those.
enum Val<'de> {
    Str(Str<'de>),
    Bool(bool),
    Int(i64),
    Double(f64),
    Array(Vec<AnyValue>),
}

impl Val<'_> {
    fn as_ref(&self) -> ValueRef<'_> {
        match self {
            Val::Str(s) => ValueRef::Str(&s.0),
            Val::Bool(b) => ValueRef::Bool(*b),
            Val::Int(i) => ValueRef::Int(*i),
            Val::Double(d) => ValueRef::Double(*d),
            Val::Array(items) => ValueRef::Array(ArrayRef::Decoded(items)),
        }
    }
}

/// An `AnyValue` object; `None` when it holds no value (or a non-finite double).
struct AnyVal<'de>(Option<Val<'de>>);

impl<'de> Deserialize<'de> for AnyVal<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = AnyVal<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an AnyValue object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AnyVal<'de>, A::Error> {
                let mut value = None;
                let mut kinds = 0;
                while let Some(key) = map.next_key::<Str<'de>>()? {
                    let read = match &*key.0 {
                        "stringValue" => map.next_value::<Option<Str<'de>>>()?.map(Val::Str),
                        "boolValue" => map.next_value::<Option<bool>>()?.map(Val::Bool),
                        "intValue" => map.next_value::<Option<IntValue>>()?.map(|i| Val::Int(i.0)),
                        "doubleValue" => map
                            .next_value::<Option<DoubleValue>>()?
                            .and_then(|d| d.0)
                            .map(Val::Double),
                        "arrayValue" => map
                            .next_value::<Option<ArrayValue>>()?
                            .map(|a| Val::Array(a.values)),
                        // Rare here, and read differently by each path: left to the decoded one.
                        // Unknown fields too: the decoded path buffers them as values, which
                        // refuses what a skip lets pass (`1e400`).
                        _ => return Err(de::Error::custom("left to the decoded path")),
                    };
                    // Two kinds in one value: which wins differs between the decoded path's
                    // direct read and its rewrite, so it decides.
                    kinds += 1;
                    if kinds > 1 {
                        return Err(de::Error::custom("two kinds in one value"));
                    }
                    value = read;
                }
                Ok(AnyVal(value))
            }
        }
        d.deserialize_map(V)
    }
}

/// A `KeyValue`: its key and value (`None`: no value).
struct Attribute<'de> {
    key: Str<'de>,
    value: Option<Val<'de>>,
}

impl<'de> Deserialize<'de> for Attribute<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Attribute<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a KeyValue object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Attribute<'de>, A::Error> {
                let mut seen = Seen::default();
                let mut key = None;
                let mut value = None;
                while let Some(field) = map.next_key::<Str<'de>>()? {
                    match &*field.0 {
                        "key" => {
                            seen.first(0)?;
                            key = Some(map.next_value::<Str<'de>>()?);
                        }
                        "value" => {
                            seen.first(1)?;
                            value = map.next_value::<Option<AnyVal<'de>>>()?.and_then(|v| v.0);
                        }
                        "keyStrindex" => {
                            seen.first(2)?;
                            map.next_value::<i32>()?;
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                let key = key.ok_or_else(|| de::Error::missing_field("key"))?;
                Ok(Attribute { key, value })
            }
        }
        d.deserialize_map(V)
    }
}

/// Runs `visit_map` over an object, leaving other JSON types to fail.
macro_rules! object_seed {
    ($name:ident) => {
        impl<'de> DeserializeSeed<'de> for $name<'_, '_> {
            type Value = ();
            fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
                d.deserialize_map(self)
            }
        }
    };
}

/// An array whose items are read by the seed `$item`, which shares `out`.
macro_rules! array_seed {
    ($name:ident, $item:ident, $target:ty) => {
        struct $name<'a, 'k> {
            keys: &'k AttributeKeys,
            out: &'a mut $target,
        }

        impl<'de> DeserializeSeed<'de> for $name<'_, '_> {
            type Value = ();
            fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
                d.deserialize_seq(self)
            }
        }

        impl<'de> Visitor<'de> for $name<'_, '_> {
            type Value = ();
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
                while seq
                    .next_element_seed($item {
                        keys: self.keys,
                        out: &mut *self.out,
                    })?
                    .is_some()
                {}
                Ok(())
            }
        }
    };
}

array_seed!(ResourceSpansArray, ResourceSpans, Vec<SpanFacts>);
array_seed!(ScopeSpansArray, ScopeSpans, Vec<SpanFacts>);
array_seed!(SpanArray, Span, Vec<SpanFacts>);
array_seed!(AttributeArray, SpanAttribute, FactsReader);

struct Request<'a, 'k> {
    keys: &'k AttributeKeys,
    out: &'a mut Vec<SpanFacts>,
}
object_seed!(Request);

impl<'de> Visitor<'de> for Request<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an ExportTraceServiceRequest object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = Seen::default();
        while let Some(key) = map.next_key::<Str<'de>>()? {
            match &*key.0 {
                "resourceSpans" => {
                    seen.first(0)?;
                    map.next_value_seed(ResourceSpansArray {
                        keys: self.keys,
                        out: &mut *self.out,
                    })?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

struct ResourceSpans<'a, 'k> {
    keys: &'k AttributeKeys,
    out: &'a mut Vec<SpanFacts>,
}
object_seed!(ResourceSpans);

impl<'de> Visitor<'de> for ResourceSpans<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a ResourceSpans object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = Seen::default();
        // The resource may come after its spans: they are read first and given its service
        // name and captured attributes at the end.
        let first = self.out.len();
        let mut resource = Resource::default();
        while let Some(key) = map.next_key::<Str<'de>>()? {
            match &*key.0 {
                "resource" => {
                    seen.first(0)?;
                    map.next_value_seed(ResourceSeed {
                        keys: self.keys,
                        resource: &mut resource,
                    })?;
                }
                "scopeSpans" => {
                    seen.first(1)?;
                    map.next_value_seed(ScopeSpansArray {
                        keys: self.keys,
                        out: &mut *self.out,
                    })?;
                }
                "schemaUrl" => {
                    seen.first(2)?;
                    map.next_value::<AnyStr>()?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        resource.apply(&mut self.out[first..], self.keys);
        Ok(())
    }
}

/// What the spans need from their resource (both direct readers build one).
#[derive(Default)]
pub(super) struct Resource {
    /// From the first `service.name` attribute (`unknown_service` when it is not a non-empty
    /// string), as [`crate::contract::service_name`] reads it.
    service: Option<Symbol>,
    captured: Vec<(String, String)>,
}

impl Resource {
    /// Takes one resource attribute: the first `service.name` names the service, and values of
    /// the policies' keys are kept.
    pub(super) fn attribute(
        &mut self,
        key: &str,
        value: Option<ValueRef<'_>>,
        keys: &AttributeKeys,
    ) {
        if key == attr::SERVICE_NAME && self.service.is_none() {
            self.service = Some(match value {
                Some(ValueRef::Str(name)) if !name.is_empty() => crate::contract::symbol(name),
                _ => crate::contract::unknown_service(),
            });
        }
        if keys.contains(key) {
            if let Some(text) = value.and_then(string_form_of) {
                self.captured.push((key.to_owned(), text));
            }
        }
    }

    /// Gives the resource's spans, read before it may have been, its service name and its
    /// captured attributes.
    pub(super) fn apply(self, spans: &mut [SpanFacts], keys: &AttributeKeys) {
        let service = self
            .service
            .unwrap_or_else(crate::contract::unknown_service);
        for facts in spans {
            facts.service_name = service.clone();
            for (key, value) in &self.captured {
                facts
                    .captured
                    .capture_one(key, Some(ValueRef::Str(value)), keys);
            }
        }
    }
}

/// Gives a scope's spans, read before it may have been, its name.
pub(super) fn name_scope(spans: &mut [SpanFacts], name: Option<&str>) {
    let name = crate::contract::scope_name(name);
    if name.is_some() {
        for facts in spans {
            facts.scope = name.clone();
        }
    }
}

/// The reader of one span, its service name set once the resource is known.
pub(super) fn span_reader() -> FactsReader {
    // A static literal: no count to touch for a name every span replaces.
    FactsReader::new(crate::contract::unknown_service())
}

struct ResourceSeed<'a, 'k> {
    keys: &'k AttributeKeys,
    resource: &'a mut Resource,
}

impl<'de> DeserializeSeed<'de> for ResourceSeed<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for ResourceSeed<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Resource object or null")
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = Seen::default();
        while let Some(key) = map.next_key::<Str<'de>>()? {
            match &*key.0 {
                "attributes" => {
                    seen.first(0)?;
                    for attribute in map.next_value::<Vec<Attribute<'de>>>()? {
                        let value = attribute.value.as_ref().map(Val::as_ref);
                        self.resource.attribute(&attribute.key.0, value, self.keys);
                    }
                }
                "droppedAttributesCount" => {
                    seen.first(1)?;
                    map.next_value::<u32>()?;
                }
                "entityRefs" => {
                    seen.first(2)?;
                    map.next_value::<Vec<EntityRef>>()?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

struct ScopeSpans<'a, 'k> {
    keys: &'k AttributeKeys,
    out: &'a mut Vec<SpanFacts>,
}
object_seed!(ScopeSpans);

impl<'de> Visitor<'de> for ScopeSpans<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a ScopeSpans object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = Seen::default();
        // The scope may come after its spans: they are given its name at the end.
        let first = self.out.len();
        let mut scope = None;
        while let Some(key) = map.next_key::<Str<'de>>()? {
            match &*key.0 {
                "scope" => {
                    seen.first(0)?;
                    scope = map.next_value::<Option<InstrumentationScope>>()?;
                }
                "spans" => {
                    seen.first(1)?;
                    map.next_value_seed(SpanArray {
                        keys: self.keys,
                        out: &mut *self.out,
                    })?;
                }
                "schemaUrl" => {
                    seen.first(2)?;
                    map.next_value::<AnyStr>()?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        name_scope(
            &mut self.out[first..],
            scope.as_ref().map(|s| s.name.as_str()),
        );
        Ok(())
    }
}

struct Span<'a, 'k> {
    keys: &'k AttributeKeys,
    out: &'a mut Vec<SpanFacts>,
}
object_seed!(Span);

/// A hex id of exactly `N` bytes, or none for the empty string; other forms (another length,
/// a `0x` prefix) are left to the decoded path.
fn hex_id<const N: usize, E: de::Error>(text: &str) -> Result<Option<[u8; N]>, E> {
    hex_bytes(text).ok_or_else(|| E::custom("not a hex id of the expected length"))
}

impl<'de> Visitor<'de> for Span<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Span object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut reader = span_reader();
        let mut seen = Seen::default();
        let mut status_code = 0;
        while let Some(key) = map.next_key::<Str<'de>>()? {
            match &*key.0 {
                "traceId" => {
                    seen.first(0)?;
                    let id = hex_id::<16, _>(&map.next_value::<Str<'de>>()?.0)?;
                    reader.trace_id(id.as_ref().map_or(&[], |id| &id[..]));
                }
                "spanId" => {
                    seen.first(1)?;
                    let id = hex_id::<8, _>(&map.next_value::<Str<'de>>()?.0)?;
                    reader.span_id(id.as_ref().map_or(&[], |id| &id[..]));
                }
                "parentSpanId" => {
                    seen.first(2)?;
                    let id = hex_id::<8, _>(&map.next_value::<Str<'de>>()?.0)?;
                    reader.parent_span_id(id.as_ref().map_or(&[], |id| &id[..]));
                }
                "traceState" => {
                    seen.first(3)?;
                    map.next_value::<AnyStr>()?;
                }
                "flags" => {
                    seen.first(4)?;
                    map.next_value::<u32>()?;
                }
                "name" => {
                    seen.first(5)?;
                    map.next_value::<AnyStr>()?;
                }
                "kind" => {
                    seen.first(6)?;
                    reader.otlp_kind(map.next_value_seed(EnumSeed(&SPAN_KINDS))?);
                }
                "startTimeUnixNano" => {
                    seen.first(7)?;
                    reader.start_time(map.next_value::<Nanos>()?.0);
                }
                "endTimeUnixNano" => {
                    seen.first(8)?;
                    reader.end_time(map.next_value::<Nanos>()?.0);
                }
                "attributes" => {
                    seen.first(9)?;
                    map.next_value_seed(AttributeArray {
                        keys: self.keys,
                        out: &mut reader,
                    })?;
                }
                "droppedAttributesCount" => {
                    seen.first(10)?;
                    map.next_value::<u32>()?;
                }
                "events" => {
                    seen.first(11)?;
                    map.next_value::<Vec<Event>>()?;
                }
                "droppedEventsCount" => {
                    seen.first(12)?;
                    map.next_value::<u32>()?;
                }
                "links" => {
                    seen.first(13)?;
                    map.next_value::<Vec<Link>>()?;
                }
                "droppedLinksCount" => {
                    seen.first(14)?;
                    map.next_value::<u32>()?;
                }
                "status" => {
                    seen.first(15)?;
                    if let Some(code) = map.next_value_seed(StatusSeed)? {
                        status_code = code;
                    }
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        self.out
            .push(reader.finish(status_code == STATUS_CODE_ERROR));
        Ok(())
    }
}

pub(super) const STATUS_CODE_ERROR: i32 = 2;

/// One span attribute, handed to the reader (and captured for policies) as it is read.
struct SpanAttribute<'a, 'k> {
    keys: &'k AttributeKeys,
    out: &'a mut FactsReader,
}

impl<'de> DeserializeSeed<'de> for SpanAttribute<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        let attribute = Attribute::deserialize(d)?;
        let value = attribute.value.as_ref().map(Val::as_ref);
        let key = &*attribute.key.0;
        if !self.keys.is_empty() {
            self.out.captured().capture_one(key, value, self.keys);
        }
        self.out.attribute(key, value);
        Ok(())
    }
}

/// A span's `status`: its code (`None` for a null status).
struct StatusSeed;

impl<'de> DeserializeSeed<'de> for StatusSeed {
    type Value = Option<i32>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<i32>, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for StatusSeed {
    type Value = Option<i32>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Status object or null")
    }
    fn visit_none<E: de::Error>(self) -> Result<Option<i32>, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<i32>, E> {
        Ok(None)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Option<i32>, D::Error> {
        d.deserialize_map(self)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<i32>, A::Error> {
        let mut seen = Seen::default();
        let mut code = 0;
        while let Some(key) = map.next_key::<Str<'de>>()? {
            match &*key.0 {
                "message" => {
                    seen.first(0)?;
                    map.next_value::<AnyStr>()?;
                }
                "code" => {
                    seen.first(1)?;
                    code = map.next_value_seed(EnumSeed(&STATUS_CODES))?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Some(code))
    }
}

/// A hex id of exactly `N` bytes, or none for the empty string; other forms are left to the
/// decoded path (both direct readers read ids with it). Reads what `hex::decode_to_slice` reads
/// (either case), sixteen digits at a time ([`super::bytes::hex16`]): digit by digit it was a
/// twelfth of the reading, and by table still 1.4% of `replay`.
pub(super) fn hex_bytes<const N: usize>(text: &str) -> Option<Option<[u8; N]>> {
    if text.is_empty() {
        return Some(None);
    }
    if text.len() != 2 * N {
        return None;
    }
    let mut id = [0u8; N];
    let mut digits = text.as_bytes().chunks_exact(16);
    let mut bytes = id.chunks_exact_mut(8);
    for (out, chunk) in (&mut bytes).zip(&mut digits) {
        out.copy_from_slice(&super::bytes::hex16(chunk.try_into().ok()?)?);
    }
    super::bytes::hex_pairs(bytes.into_remainder(), digits.remainder())?;
    Some(Some(id))
}

#[cfg(test)]
pub(super) mod tests;
