//! Span builders: OTLP protobuf attributes and exports for spans written in code, and a seeded
//! generator of OTLP JSON lines for replay's golden test: every shape the span
//! contract reads (declared requests with and without `attempt_count` or a logical span,
//! grouping by parent, plain instrumentation with HTTP tries and sibling retries, spans that are
//! not ours), the JSON forms exporters use (enum names or numbers, `intValue` as string or
//! number, `doubleValue` as string), spans interleaved across requests, some arriving far
//! later than their request's others, and some re-sent.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans};
use serde_json::{json, Value};

/// An OTLP protobuf attribute.
pub fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

/// An OTLP protobuf string attribute.
pub fn kv_text(key: &str, value: &str) -> KeyValue {
    kv(key, any_value::Value::StringValue(value.into()))
}

/// An OTLP protobuf integer attribute.
pub fn kv_int(key: &str, value: i64) -> KeyValue {
    kv(key, any_value::Value::IntValue(value))
}

/// `spans` as one export of service `service`, in one scope.
pub fn export_of(
    service: &str,
    spans: Vec<opentelemetry_proto::tonic::trace::v1::Span>,
) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv_text("service.name", service)],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

pub const PRICING_SOURCE: &str = "https://aiwave.live/api/pricing";
pub const PRICING_VERSION: &str = "a42d372ccf0b5dd13ecf71203521f9d2";
pub const BASE_NANOS: u64 = 1_787_659_260_000_000_000;
pub const SECOND: u64 = 1_000_000_000;
const MODELS: [&str; 7] = [
    "deepseek-v4-flash",
    "deepseek-v4-pro",
    "kimi-k2.7-code",
    "kimi-k2.6",
    "glm-5",
    "qwen3.5-122b-a10b",
    "no-such-model",
];
const SERVICES: [&str; 3] = ["support-bot", "code-agent", "batch-extract"];
const ERRORS: [&str; 4] = ["rate_limited", "timeout", "server_error", "overloaded"];

/// xorshift64*: the same input on every run and every machine.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

pub fn hex_id(rng: &mut Rng, bytes: usize) -> String {
    (0..bytes)
        .map(|_| format!("{:02x}", rng.below(256)))
        .collect()
}

/// An attribute, writing integers as strings or numbers and doubles as numbers or strings, as
/// different exporters do.
pub fn s(key: &str, value: &str) -> Value {
    json!({"key": key, "value": {"stringValue": value}})
}
pub fn int(rng: &mut Rng, key: &str, value: i64) -> Value {
    if rng.chance(70) {
        json!({"key": key, "value": {"intValue": value.to_string()}})
    } else {
        json!({"key": key, "value": {"intValue": value}})
    }
}
pub fn double(rng: &mut Rng, key: &str, value: f64) -> Value {
    if rng.chance(80) {
        json!({"key": key, "value": {"doubleValue": value}})
    } else {
        json!({"key": key, "value": {"doubleValue": value.to_string()}})
    }
}
pub fn boolean(key: &str, value: bool) -> Value {
    json!({"key": key, "value": {"boolValue": value}})
}

struct Span {
    service: &'static str,
    json: Value,
}

struct SpanSpec<'a> {
    trace: &'a str,
    id: &'a str,
    parent: Option<&'a str>,
    name: &'a str,
    client: bool,
    start: u64,
    error: bool,
    attributes: Vec<Value>,
}

fn span(rng: &mut Rng, spec: SpanSpec<'_>) -> Value {
    let kind = match (spec.client, rng.chance(50)) {
        (true, true) => json!("SPAN_KIND_CLIENT"),
        (true, false) => json!(3),
        (false, true) => json!("SPAN_KIND_INTERNAL"),
        (false, false) => json!(1),
    };
    let mut span = json!({
        "traceId": spec.trace,
        "spanId": spec.id,
        "name": spec.name,
        "kind": kind,
        "startTimeUnixNano": spec.start.to_string(),
        "endTimeUnixNano": if rng.chance(50) { json!((spec.start + 2 * SECOND).to_string()) } else { json!(spec.start + 2 * SECOND) },
        "attributes": spec.attributes,
    });
    if let Some(parent) = spec.parent {
        span["parentSpanId"] = json!(parent);
    }
    if spec.error {
        span["status"] = if rng.chance(50) {
            json!({"code": "STATUS_CODE_ERROR", "message": "upstream error"})
        } else {
            json!({"code": 2})
        };
    } else if rng.chance(20) {
        span["status"] = json!({"code": 1});
    }
    if rng.chance(5) {
        span["events"] = json!([{"timeUnixNano": spec.start.to_string(), "name": "gen_ai.choice",
            "attributes": [{"key": "index", "value": {"intValue": "0"}}]}]);
    }
    span
}

fn envelope(rng: &mut Rng) -> Vec<Value> {
    let mut attributes = vec![
        s("retry_spend.pricing.source", PRICING_SOURCE),
        s("retry_spend.pricing.checked_at", "2026-08-22"),
        s("retry_spend.pricing.version", PRICING_VERSION),
        s(
            "retry_spend.billing_group",
            rng.pick(&["vip", "default", "nosuchgroup"]),
        ),
    ];
    let max = rng.pick(&[0.015, 0.05, 0.002]);
    attributes.push(double(rng, "retry_spend.envelope.max_incremental_usd", max));
    let after = rng.below(3) as i64;
    attributes.push(int(
        rng,
        "retry_spend.envelope.max_attempts_after_first",
        after,
    ));
    attributes.push(boolean(
        "retry_spend.envelope.allow_family_fallback",
        rng.chance(70),
    ));
    attributes.push(json!({"key": "retry_spend.envelope.allowed_fallback_families",
        "value": {"arrayValue": {"values": [{"stringValue": "deepseek"}, {"stringValue": "glm"}, {"stringValue": "qwen"}]}}}));
    attributes.push(s(
        "retry_spend.task.type",
        rng.pick(&["support_summary", "chat"]),
    ));
    if rng.chance(20) {
        attributes.push(boolean("retry_spend.envelope.replay_safe", rng.chance(50)));
    }
    attributes
}

fn gen_ai(rng: &mut Rng, model: &str, failed: bool, legacy: bool) -> Vec<Value> {
    let input = 2_000 + 1_000 * rng.below(20) as i64;
    let mut attributes = vec![
        s("gen_ai.operation.name", "chat"),
        s("gen_ai.request.model", model),
        s("gen_ai.response.model", model),
    ];
    attributes.push(s(
        if legacy {
            "gen_ai.system"
        } else {
            "gen_ai.provider.name"
        },
        "aiwave",
    ));
    if !rng.chance(3) {
        attributes.push(int(rng, "gen_ai.request.max_tokens", 800));
    }
    let (input_key, cached_key, output_key) = if legacy {
        (
            "gen_ai.usage.prompt_tokens",
            "gen_ai.usage.cache_read_input_tokens",
            "gen_ai.usage.completion_tokens",
        )
    } else {
        (
            "gen_ai.usage.input_tokens",
            "gen_ai.usage.cache_read.input_tokens",
            "gen_ai.usage.output_tokens",
        )
    };
    if !rng.chance(3) {
        attributes.push(int(rng, input_key, input));
    }
    let cached = 500 * rng.below(4) as i64;
    attributes.push(int(rng, cached_key, cached));
    if !failed {
        let output = 100 + rng.below(700) as i64;
        attributes.push(int(rng, output_key, output));
    } else {
        let error = rng.pick(&ERRORS);
        attributes.push(s("error.type", error));
        if rng.chance(10) {
            attributes.push(boolean("retry_spend.attempt.output_reached_client", true));
        }
    }
    attributes
}

/// One logical request's spans, in the order its SDK would export them.
fn request(rng: &mut Rng, number: u64) -> Vec<Span> {
    let service = rng.pick(&SERVICES);
    let trace = hex_id(rng, 16);
    let start = BASE_NANOS + number * 5 * SECOND + rng.below(SECOND);
    let mut out = Vec::new();
    let mut push = |json| out.push(Span { service, json });
    let shape = rng.below(20);
    match shape {
        // Declared attempts under a logical span, grouped by request id or by parent, with or
        // without attempt_count and attempt indices.
        0..=10 => {
            let logical_id = hex_id(rng, 8);
            let request_id = format!("req-{number:06}");
            let by_request_id = shape < 8;
            let attempts = 1 + rng.below(3);
            let indexed = !rng.chance(15);
            let count = match rng.below(10) {
                0..=5 => Some(attempts as i64),
                6 => Some(attempts as i64 + 1),
                _ => None,
            };
            let legacy = rng.chance(10);
            let first_model = rng.pick(&MODELS[..6]);
            for i in 0..attempts {
                let last = i + 1 == attempts;
                let model = if i > 0 && rng.chance(30) {
                    rng.pick(&MODELS)
                } else {
                    first_model
                };
                let mut attributes = Vec::new();
                if !rng.chance(10) {
                    attributes.push(s("retry_spend.span.role", "attempt"));
                }
                if by_request_id {
                    attributes.push(s("retry_spend.request.id", &request_id));
                }
                if indexed || (!by_request_id && rng.chance(50)) {
                    attributes.push(int(rng, "retry_spend.attempt.index", i as i64));
                }
                attributes.extend(gen_ai(rng, model, !last, legacy));
                if i > 0 && rng.chance(20) {
                    attributes.push(double(
                        rng,
                        "retry_spend.sdk.estimated_incremental_usd",
                        0.004,
                    ));
                }
                let id = hex_id(rng, 8);
                let json = span(
                    rng,
                    SpanSpec {
                        trace: &trace,
                        id: &id,
                        parent: Some(&logical_id),
                        name: "chat",
                        client: true,
                        start: start + i * 3 * SECOND,
                        error: !last,
                        attributes,
                    },
                );
                push(json);
            }
            if rng.chance(92) {
                let mut attributes = vec![s("retry_spend.span.role", "logical_request")];
                if by_request_id {
                    attributes.push(s("retry_spend.request.id", &request_id));
                }
                if let Some(count) = count {
                    attributes.push(int(rng, "retry_spend.attempt_count", count));
                }
                match rng.below(10) {
                    0 => {}
                    1 => attributes.push(s(
                        "retry_spend.envelope",
                        r#"{"retry_spend_envelope":{"pricing_source":"https://aiwave.live/api/pricing","pricing_checked_at":"2026-08-22","pricing_version":"a42d372ccf0b5dd13ecf71203521f9d2","billing_group":"vip","max_incremental_usd":0.015,"max_attempts_after_first":1,"allow_family_fallback":true,"allowed_fallback_families":["deepseek","glm"]}}"#,
                    )),
                    _ => attributes.extend(envelope(rng)),
                }
                let json = span(
                    rng,
                    SpanSpec {
                        trace: &trace,
                        id: &logical_id,
                        parent: None,
                        name: "llm.request",
                        client: false,
                        start,
                        error: false,
                        attributes,
                    },
                );
                push(json);
            }
        }
        // Plain instrumentation: a GenAI span with its SDK's HTTP tries under it.
        11..=13 => {
            let genai_id = hex_id(rng, 8);
            let parent = hex_id(rng, 8);
            let tries = 1 + rng.below(3);
            for t in 0..tries {
                let last = t + 1 == tries;
                let mut attributes = vec![s("http.request.method", "POST")];
                if t > 0 && rng.chance(80) {
                    attributes.push(int(rng, "http.request.resend_count", t as i64));
                }
                let status_key = if rng.chance(80) {
                    "http.response.status_code"
                } else {
                    "http.status_code"
                };
                attributes.push(int(rng, status_key, if last { 200 } else { 429 }));
                let id = hex_id(rng, 8);
                let json = span(
                    rng,
                    SpanSpec {
                        trace: &trace,
                        id: &id,
                        parent: Some(&genai_id),
                        name: "POST",
                        client: true,
                        start: start + t * SECOND,
                        error: !last,
                        attributes,
                    },
                );
                push(json);
            }
            let model = rng.pick(&MODELS[..6]);
            let attributes = gen_ai(rng, model, false, false);
            let json = span(
                rng,
                SpanSpec {
                    trace: &trace,
                    id: &genai_id,
                    parent: Some(&parent),
                    name: "chat",
                    client: true,
                    start,
                    error: false,
                    attributes,
                },
            );
            push(json);
        }
        // Plain instrumentation: failed sibling calls under one parent (a fallback loop).
        14..=16 => {
            let parent = hex_id(rng, 8);
            let calls = 1 + rng.below(3);
            for c in 0..calls {
                let last = c + 1 == calls;
                let model = rng.pick(&MODELS[..6]);
                let attributes = gen_ai(rng, model, !last, false);
                let id = hex_id(rng, 8);
                let json = span(
                    rng,
                    SpanSpec {
                        trace: &trace,
                        id: &id,
                        parent: Some(&parent),
                        name: "chat",
                        client: true,
                        start: start + c * 2 * SECOND,
                        error: !last,
                        attributes,
                    },
                );
                push(json);
            }
            let attributes = vec![s("app.step", "answer")];
            let json = span(
                rng,
                SpanSpec {
                    trace: &trace,
                    id: &parent,
                    parent: None,
                    name: "answer",
                    client: false,
                    start,
                    error: false,
                    attributes,
                },
            );
            push(json);
        }
        // A root GenAI span alone, and an HTTP call that is no LLM call.
        17 => {
            let model = rng.pick(&MODELS);
            let failed = rng.chance(20);
            let attributes = gen_ai(rng, model, failed, false);
            let id = hex_id(rng, 8);
            let json = span(
                rng,
                SpanSpec {
                    trace: &trace,
                    id: &id,
                    parent: None,
                    name: "chat",
                    client: true,
                    start,
                    error: false,
                    attributes,
                },
            );
            push(json);
            let child = hex_id(rng, 8);
            let parent = hex_id(rng, 8);
            let json = span(
                rng,
                SpanSpec {
                    trace: &trace,
                    id: &child,
                    parent: Some(&parent),
                    name: "GET",
                    client: true,
                    start,
                    error: false,
                    attributes: vec![s("http.request.method", "GET")],
                },
            );
            push(json);
        }
        // Spans that are not ours.
        _ => {
            let id = hex_id(rng, 8);
            let (client, error) = (rng.chance(50), rng.chance(10));
            let json = span(
                rng,
                SpanSpec {
                    trace: &trace,
                    id: &id,
                    parent: None,
                    name: "db.query",
                    client,
                    start,
                    error,
                    attributes: vec![s("db.system", "postgresql")],
                },
            );
            push(json);
        }
    }
    out
}

/// About `spans` spans as OTLP JSON lines: requests interleaved with their neighbours, a few
/// spans arriving thousands of requests late, a few sent twice.
pub fn jsonl(seed: u64, spans: usize) -> String {
    let mut rng = Rng::new(seed);
    // (arrival order key, tie-break, span)
    let mut placed: Vec<(u64, u64, Span)> = Vec::new();
    let mut number = 0;
    while placed.len() < spans {
        for span in request(&mut rng, number) {
            let at = if rng.chance(1) {
                number + 1_000 + rng.below(5_000)
            } else {
                number + rng.below(6)
            };
            placed.push((at, rng.next(), span));
            if rng.chance(1) {
                let again = Span {
                    service: placed[placed.len() - 1].2.service,
                    json: placed[placed.len() - 1].2.json.clone(),
                };
                placed.push((number + rng.below(3_000), rng.next(), again));
            }
        }
        number += 1;
    }
    placed.sort_by_key(|(at, tie, _)| (*at, *tie));

    let mut out = String::new();
    let mut spans = placed.into_iter().map(|(_, _, span)| span).peekable();
    while spans.peek().is_some() {
        let take = 1 + rng.below(60) as usize;
        let mut resources: Vec<(&str, Vec<Value>)> = Vec::new();
        for span in spans.by_ref().take(take) {
            match resources.iter_mut().find(|(s, _)| *s == span.service) {
                Some((_, list)) => list.push(span.json),
                None => resources.push((span.service, vec![span.json])),
            }
        }
        let resource_spans: Vec<Value> = resources
            .into_iter()
            .map(|(service, spans)| {
                json!({
                    "resource": {"attributes": [s("service.name", service), s("host.name", "h1")]},
                    "scopeSpans": [{"scope": {"name": "openai", "version": "1.2.3"}, "spans": spans}],
                })
            })
            .collect();
        out.push_str(&json!({ "resourceSpans": resource_spans }).to_string());
        out.push('\n');
    }
    out
}
