//! Writes the committed seed corpora: every line of `examples/retries.jsonl` as JSON and as
//! protobuf, hostile variations of it, and pricing snapshots around the shipped one.
//!
//! `cargo run --manifest-path fuzz/Cargo.toml --example make_corpus` (from the repository root).

use std::fs;
use std::path::{Path, PathBuf};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    any_value::Value, AnyValue, ArrayValue, KeyValue, KeyValueList,
};
use prost::Message;
use retry_spend_collector::contract::{attr, kv};

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let corpus = root.join("corpus");
    let json_dir = corpus.join("otlp_json_line");
    let proto_dir = corpus.join("otlp_protobuf");
    let pricing_dir = corpus.join("pricing_snapshot");
    for dir in [&json_dir, &proto_dir, &pricing_dir] {
        fs::create_dir_all(dir).expect("corpus directory");
    }

    let lines = fs::read_to_string(root.join("../examples/retries.jsonl")).expect("examples");
    let mut requests = Vec::new();
    for line in lines.lines().filter(|l| !l.trim().is_empty()) {
        requests.push(serde_json::from_str::<ExportTraceServiceRequest>(line).expect("example"));
    }
    let mut all = requests.clone();
    for (i, request) in requests.iter().enumerate() {
        all.push(hostile_values(request.clone(), i));
    }
    all.push(wrong_length_ids(requests[0].clone()));
    all.push(without_indices(requests[0].clone()));
    all.push(nested_values(requests[0].clone()));
    let mut whole = ExportTraceServiceRequest::default();
    for request in &requests {
        whole.resource_spans.extend(request.resource_spans.clone());
    }
    all.push(whole);

    for (i, request) in all.iter().enumerate() {
        write(
            &proto_dir,
            &format!("seed-{i:02}.pb"),
            &request.encode_to_vec(),
        );
        let json = serde_json::to_string(request).expect("serialises");
        write(&json_dir, &format!("seed-{i:02}.json"), json.as_bytes());
    }
    for (i, line) in lines.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        write(&json_dir, &format!("example-{i:02}.json"), line.as_bytes());
    }

    let shipped = fs::read_to_string(root.join("../config/pricing/2026-08-22-aiwave.json"))
        .expect("shipped snapshot");
    write(&pricing_dir, "shipped.json", shipped.as_bytes());
    let variations = [
        (
            "numbers.json",
            shipped.replace("\"0.319\"", "0.319").replace("\"3\"", "3"),
        ),
        (
            "scientific.json",
            shipped.replace("\"0.957\"", "\"9.57e-1\""),
        ),
        (
            "ten-places.json",
            shipped.replace("\"0.319\"", "\"0.3190000001\""),
        ),
        (
            "padded-zeros.json",
            shipped.replace("\"0.319\"", "\"0.3190000000000000000000000\""),
        ),
        (
            "eleven-places.json",
            shipped.replace("\"0.319\"", "\"0.31900000001\""),
        ),
        ("negative.json", shipped.replace("\"0.319\"", "\"-0.319\"")),
        ("negative-zero.json", shipped.replace("\"0.319\"", "\"-0\"")),
        ("ratio-places.json", shipped.replace("\"3\"", "\"1.505\"")),
        ("euro.json", shipped.replace("\"USD\"", "\"EUR\"")),
        (
            "rfc3339.json",
            shipped.replace("\"2026-08-22\"", "\"2026-08-22T23:30:00-02:00\""),
        ),
        (
            "huge.json",
            shipped.replace("\"0.319\"", "\"79228162514264337593543950335\""),
        ),
        (
            "no-models.json",
            shipped.replace("\"models\"", "\"modelz\""),
        ),
    ];
    for (name, text) in variations {
        write(&pricing_dir, name, text.as_bytes());
    }
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    let path: PathBuf = dir.join(name);
    fs::write(&path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

fn spans_mut(
    request: &mut ExportTraceServiceRequest,
) -> impl Iterator<Item = &mut opentelemetry_proto::tonic::trace::v1::Span> {
    request
        .resource_spans
        .iter_mut()
        .flat_map(|r| r.scope_spans.iter_mut())
        .flat_map(|s| s.spans.iter_mut())
}

/// Money and counts as NaN, infinities, huge and negative numbers and decimal strings.
fn hostile_values(
    mut request: ExportTraceServiceRequest,
    seed: usize,
) -> ExportTraceServiceRequest {
    let values = [
        Value::DoubleValue(f64::NAN),
        Value::DoubleValue(f64::INFINITY),
        Value::DoubleValue(f64::NEG_INFINITY),
        Value::DoubleValue(1e300),
        Value::DoubleValue(-1e-300),
        Value::IntValue(i64::MAX),
        Value::IntValue(i64::MIN),
        Value::IntValue((1 << 53) + 1),
        Value::IntValue(-1),
        Value::StringValue("79228162514264337593543950336".into()),
        Value::StringValue("1e-40".into()),
        Value::StringValue("0.0150".into()),
    ];
    let keys = [
        attr::INPUT_TOKENS,
        attr::CACHE_READ_INPUT_TOKENS,
        attr::OUTPUT_TOKENS,
        attr::REQUEST_MAX_TOKENS,
        attr::ATTEMPT_INDEX,
        attr::ATTEMPT_COUNT,
        attr::MAX_INCREMENTAL_USD,
        attr::MAX_ATTEMPTS_AFTER_FIRST,
        attr::SDK_ESTIMATED_INCREMENTAL_USD,
        attr::SDK_REMAINING_ENVELOPE_USD,
    ];
    for (n, span) in spans_mut(&mut request).enumerate() {
        let key = keys[(seed + n) % keys.len()];
        let value = values[(seed * 7 + n) % values.len()].clone();
        span.attributes.retain(|a| a.key != key);
        span.attributes.push(kv(key, value));
    }
    request
}

fn wrong_length_ids(mut request: ExportTraceServiceRequest) -> ExportTraceServiceRequest {
    let lengths = [0, 7, 17, 33];
    for (n, span) in spans_mut(&mut request).enumerate() {
        span.span_id = vec![n as u8; lengths[n % lengths.len()]];
        span.trace_id = vec![1; lengths[(n + 1) % lengths.len()]];
        span.parent_span_id = vec![2; lengths[(n + 2) % lengths.len()]];
    }
    request
}

fn without_indices(mut request: ExportTraceServiceRequest) -> ExportTraceServiceRequest {
    for span in spans_mut(&mut request) {
        span.attributes.retain(|a| a.key != attr::ATTEMPT_INDEX);
    }
    request
}

fn nested_values(mut request: ExportTraceServiceRequest) -> ExportTraceServiceRequest {
    let mut value = Value::StringValue("leaf".into());
    for depth in 0..20 {
        value = if depth % 2 == 0 {
            Value::ArrayValue(ArrayValue {
                values: vec![AnyValue { value: Some(value) }],
            })
        } else {
            Value::KvlistValue(KeyValueList {
                values: vec![KeyValue {
                    key: "k".into(),
                    value: Some(AnyValue { value: Some(value) }),
                    ..Default::default()
                }],
            })
        };
    }
    for span in spans_mut(&mut request) {
        span.attributes.push(kv(attr::ENVELOPE_JSON, value.clone()));
        span.attributes
            .push(kv(attr::ALLOWED_FALLBACK_FAMILIES, value.clone()));
    }
    request
}
