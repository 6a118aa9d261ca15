//! OTLP/JSON as real exporters write it, read into the protobuf types.
//!
//! The generated serde mapping takes the common form. A few forms that the OTLP/JSON and
//! proto3 JSON mappings also allow are rewritten first, and only when the direct read fails, so
//! the common path costs nothing extra: `doubleValue` as a string (`"NaN"`, `"Infinity"`,
//! `"0.5"`; non-finite values are dropped, which makes the attribute count as missing), and
//! enum names (`"SPAN_KIND_CLIENT"`, `"STATUS_CODE_ERROR"`) instead of their numbers.

mod bytes;
mod cursor;
mod facts;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use serde_json::{Map, Number, Value};

use super::{AttributeKeys, SpanFacts};

/// Deeply nested input is refused rather than recursed into without bound.
const MAX_DEPTH: usize = 128;

pub fn parse_request(bytes: &[u8]) -> Result<ExportTraceServiceRequest, serde_json::Error> {
    match serde_json::from_slice(bytes) {
        Ok(request) => Ok(request),
        Err(direct) => {
            let Ok(mut value) = serde_json::from_slice::<Value>(bytes) else {
                return Err(direct);
            };
            if !normalize(&mut value, 0) {
                return Err(direct);
            }
            serde_json::from_value(value)
        }
    }
}

/// Every span of one line read into facts, as [`parse_request`] and
/// [`crate::contract::span_facts_with`] read them: by the direct JSON reader when it can, else
/// (an unusual form, or an error to report) by the decoded path, whose error is the one given.
pub fn read_facts(bytes: &[u8], keys: &AttributeKeys) -> Result<Vec<SpanFacts>, serde_json::Error> {
    if let Some(spans) = cursor::read(bytes, keys) {
        return Ok(spans);
    }
    match facts::read(bytes, keys) {
        Some(spans) => Ok(spans),
        None => read_decoded(bytes, keys),
    }
}

/// The decoded path alone: the reference [`read_facts`] agrees with.
pub fn read_decoded(
    bytes: &[u8],
    keys: &AttributeKeys,
) -> Result<Vec<SpanFacts>, serde_json::Error> {
    parse_request(bytes).map(|request| crate::contract::span_facts_with(&request, keys).collect())
}

/// The serde reader alone; `None` where it leaves the line to the decoded path.
pub fn read_direct(bytes: &[u8], keys: &AttributeKeys) -> Option<Vec<SpanFacts>> {
    facts::read(bytes, keys)
}

/// The cursor alone; `None` where it leaves the line to the serde reader.
pub fn read_cursor(bytes: &[u8], keys: &AttributeKeys) -> Option<Vec<SpanFacts>> {
    cursor::read(bytes, keys)
}

/// Rewrites the alternative forms in place; false if the input is nested too deeply.
fn normalize(value: &mut Value, depth: usize) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    match value {
        Value::Object(object) => {
            normalize_object(object);
            object.values_mut().all(|v| normalize(v, depth + 1))
        }
        Value::Array(items) => items.iter_mut().all(|v| normalize(v, depth + 1)),
        _ => true,
    }
}

fn normalize_object(object: &mut Map<String, Value>) {
    if let Some(Value::String(text)) = object.get("doubleValue") {
        match text
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|d| d.is_finite())
            .and_then(Number::from_f64)
        {
            Some(number) => {
                object.insert("doubleValue".into(), Value::Number(number));
            }
            None => {
                object.remove("doubleValue");
            }
        }
    }
    if let Some(Value::String(name)) = object.get("kind") {
        let kind = match name.as_str() {
            "SPAN_KIND_UNSPECIFIED" => Some(0),
            "SPAN_KIND_INTERNAL" => Some(1),
            "SPAN_KIND_SERVER" => Some(2),
            "SPAN_KIND_CLIENT" => Some(3),
            "SPAN_KIND_PRODUCER" => Some(4),
            "SPAN_KIND_CONSUMER" => Some(5),
            _ => None,
        };
        if let Some(kind) = kind {
            object.insert("kind".into(), Value::from(kind));
        }
    }
    if let Some(Value::String(name)) = object.get("code") {
        let code = match name.as_str() {
            "STATUS_CODE_UNSET" => Some(0),
            "STATUS_CODE_OK" => Some(1),
            "STATUS_CODE_ERROR" => Some(2),
            _ => None,
        };
        if let Some(code) = code {
            object.insert("code".into(), Value::from(code));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::common::v1::any_value;

    fn attribute_values(request: &ExportTraceServiceRequest) -> Vec<Option<any_value::Value>> {
        request.resource_spans[0].scope_spans[0].spans[0]
            .attributes
            .iter()
            .map(|kv| kv.value.as_ref().and_then(|v| v.value.clone()))
            .collect()
    }

    const LINE: &str = r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708","kind":"SPAN_KIND_CLIENT","status":{"code":"STATUS_CODE_ERROR"},"attributes":[
        {"key":"a","value":{"doubleValue":"NaN"}},
        {"key":"b","value":{"doubleValue":"-Infinity"}},
        {"key":"c","value":{"doubleValue":"0.5"}},
        {"key":"d","value":{"doubleValue":0.25}}]}]}]}]}"#;

    #[test]
    fn non_finite_and_string_doubles_are_read() {
        let request = parse_request(LINE.as_bytes()).unwrap();
        assert_eq!(
            attribute_values(&request),
            vec![
                None,
                None,
                Some(any_value::Value::DoubleValue(0.5)),
                Some(any_value::Value::DoubleValue(0.25))
            ]
        );
        let span = &request.resource_spans[0].scope_spans[0].spans[0];
        assert_eq!(span.kind, 3);
        assert_eq!(span.status.as_ref().unwrap().code, 2);
    }

    #[test]
    fn malformed_json_keeps_the_direct_error() {
        let error = parse_request(b"{\"resourceSpans\": [").unwrap_err();
        assert!(error.to_string().contains("EOF"), "{error}");
    }

    #[test]
    fn absurd_nesting_is_refused_not_recursed() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(parse_request(deep.as_bytes()).is_err());
    }
}
