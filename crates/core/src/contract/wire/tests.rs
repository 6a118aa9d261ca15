use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    any_value::Value, AnyValue, ArrayValue, InstrumentationScope, KeyValue,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{
    status::StatusCode, ResourceSpans, ScopeSpans, Span, Status,
};
use proptest::prelude::*;
use prost::Message;

use super::*;
use crate::contract::{kv, AttributeKeys, SpanFacts};

/// What the decoded path reads: the reference the wire reader must agree with.
fn decoded_facts(request: &ExportTraceServiceRequest, keys: &AttributeKeys) -> Vec<SpanFacts> {
    crate::contract::span_facts_with(request, keys).collect()
}

fn wire_facts_with(request: &ExportTraceServiceRequest, keys: &AttributeKeys) -> Vec<SpanFacts> {
    let bytes = Bytes::from(request.encode_to_vec());
    read_export(&bytes, false, keys)
        .expect("valid protobuf")
        .spans
}

fn wire_facts(request: &ExportTraceServiceRequest) -> Vec<SpanFacts> {
    wire_facts_with(request, &AttributeKeys::NONE)
}

const KEYS: &[&str] = &[
    attr::SPAN_ROLE,
    attr::REQUEST_ID,
    attr::ATTEMPT_INDEX,
    attr::ATTEMPT_COUNT,
    attr::ATTEMPT_MODEL_FAMILY,
    attr::OUTPUT_REACHED_CLIENT,
    attr::PRICING_SOURCE,
    attr::PRICING_CHECKED_AT,
    attr::PRICING_VERSION,
    attr::BILLING_GROUP,
    attr::MAX_INCREMENTAL_USD,
    attr::MAX_ATTEMPTS_AFTER_FIRST,
    attr::ALLOW_FAMILY_FALLBACK,
    attr::ALLOWED_FALLBACK_FAMILIES,
    attr::REPLAY_SAFE,
    attr::TASK_TYPE,
    attr::ENVELOPE_JSON,
    attr::SDK_ESTIMATED_INCREMENTAL_USD,
    attr::SDK_REMAINING_ENVELOPE_USD,
    attr::SDK_DECISION_REASON,
    attr::REQUEST_MODEL,
    attr::RESPONSE_MODEL,
    attr::PROVIDER_NAME,
    attr::LEGACY_SYSTEM,
    attr::INPUT_TOKENS,
    attr::LEGACY_PROMPT_TOKENS,
    attr::CACHE_READ_INPUT_TOKENS,
    attr::LEGACY_CACHE_READ_INPUT_TOKENS,
    attr::OUTPUT_TOKENS,
    attr::LEGACY_COMPLETION_TOKENS,
    attr::REQUEST_MAX_TOKENS,
    attr::ERROR_TYPE,
    "http.request.method",
    "unrelated.key",
];

fn value() -> impl Strategy<Value = Option<Value>> {
    let text = prop_oneof![
        Just(String::new()),
        Just("attempt".to_owned()),
        Just("logical_request".to_owned()),
        Just("glm-5".to_owned()),
        Just("0.0150".to_owned()),
        Just("2026-08-22".to_owned()),
        Just("1e-3".to_owned()),
        Just(r#"{"retry_spend_envelope":{"max_incremental_usd":0.015,"max_attempts_after_first":1}}"#.to_owned()),
        Just("{not json".to_owned()),
        "[a-z0-9.-]{0,12}",
    ];
    let leaf = prop_oneof![
        text.clone().prop_map(Value::StringValue),
        any::<bool>().prop_map(Value::BoolValue),
        prop_oneof![
            Just(-1i64),
            Just(0),
            Just(3),
            Just(800),
            Just(i64::MAX),
            any::<i64>()
        ]
        .prop_map(Value::IntValue),
        prop_oneof![
            Just(0.015f64),
            Just(2.0),
            Just(f64::NAN),
            Just(-0.5),
            any::<f64>()
        ]
        .prop_map(Value::DoubleValue),
        Just(Value::BytesValue(vec![1, 2, 3])),
    ];
    let array = proptest::collection::vec(
        prop_oneof![
            text.prop_map(|s| Some(Value::StringValue(s))),
            Just(Some(Value::IntValue(1))),
            Just(None),
        ],
        0..4,
    )
    .prop_map(|items| {
        Value::ArrayValue(ArrayValue {
            values: items.into_iter().map(|value| AnyValue { value }).collect(),
        })
    });
    proptest::option::weighted(0.9, prop_oneof![4 => leaf, 1 => array])
}

fn attribute() -> impl Strategy<Value = KeyValue> {
    (proptest::sample::select(KEYS), value()).prop_map(|(key, value)| KeyValue {
        key: key.to_owned(),
        value: value.map(|value| AnyValue { value: Some(value) }),
        ..Default::default()
    })
}

fn id(len: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => proptest::collection::vec(any::<u8>(), len),
        1 => Just(Vec::new()),
        1 => proptest::collection::vec(any::<u8>(), 0..20),
    ]
}

fn span() -> impl Strategy<Value = Span> {
    (
        id(16),
        id(8),
        id(8),
        any::<u64>(),
        any::<u64>(),
        proptest::collection::vec(attribute(), 0..12),
        proptest::option::of(0..4i32),
    )
        .prop_map(
            |(trace_id, span_id, parent_span_id, start, end, attributes, status)| Span {
                trace_id,
                span_id,
                parent_span_id,
                name: "chat glm-5".into(),
                start_time_unix_nano: start,
                end_time_unix_nano: end,
                attributes,
                status: status.map(|code| Status {
                    code,
                    message: "m".into(),
                }),
                ..Default::default()
            },
        )
}

pub(crate) fn request() -> impl Strategy<Value = ExportTraceServiceRequest> {
    let resource = proptest::option::of(proptest::collection::vec(
        prop_oneof![
            Just(kv(attr::SERVICE_NAME, Value::StringValue("svc".into()))),
            Just(kv(attr::SERVICE_NAME, Value::StringValue(String::new()))),
            Just(kv(attr::SERVICE_NAME, Value::IntValue(3))),
            Just(kv("host.name", Value::StringValue("h".into()))),
        ],
        0..3,
    ));
    proptest::collection::vec(
        (
            resource,
            proptest::collection::vec(proptest::collection::vec(span(), 0..4), 0..3),
        ),
        0..3,
    )
    .prop_map(|resources| ExportTraceServiceRequest {
        resource_spans: resources
            .into_iter()
            .map(|(attributes, scopes)| ResourceSpans {
                resource: attributes.map(|attributes| Resource {
                    attributes,
                    ..Default::default()
                }),
                scope_spans: scopes
                    .into_iter()
                    .map(|spans| ScopeSpans {
                        scope: Some(InstrumentationScope {
                            name: "openai".into(),
                            ..Default::default()
                        }),
                        spans,
                        schema_url: String::new(),
                    })
                    .collect(),
                schema_url: "https://opentelemetry.io/schemas/1.26.0".into(),
            })
            .collect(),
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_wire_reader_reads_what_the_decoded_path_reads(request in request()) {
        prop_assert_eq!(wire_facts(&request), decoded_facts(&request, &AttributeKeys::NONE));
    }

    #[test]
    fn the_wire_reader_captures_what_policies_match_on(request in request()) {
        let keys = AttributeKeys::new(
            ["unrelated.key", attr::TASK_TYPE, "host.name", attr::REQUEST_MODEL].map(String::from),
        );
        prop_assert_eq!(wire_facts_with(&request, &keys), decoded_facts(&request, &keys));
    }

    #[test]
    fn a_reused_buffer_reads_what_a_fresh_one_does(first in request(), second in request()) {
        let read = |request: &ExportTraceServiceRequest, spans| {
            let bytes = Bytes::from(request.encode_to_vec());
            read_export_into(&bytes, false, &AttributeKeys::NONE, spans).map(|e| e.spans)
        };
        let used = read(&first, Vec::new()).expect("a whole request reads");
        prop_assert_eq!(read(&second, used), Ok(wire_facts(&second)));
    }

    #[test]
    fn truncated_or_mangled_requests_are_errors_or_facts_never_panics(
        request in request(),
        cut in any::<prop::sample::Index>(),
        flip in any::<prop::sample::Index>(),
    ) {
        let mut bytes = request.encode_to_vec();
        if !bytes.is_empty() {
            let i = flip.index(bytes.len());
            bytes[i] ^= 0x5a;
            bytes.truncate(cut.index(bytes.len()));
        }
        let _ = read_export(&Bytes::from(bytes), true, &AttributeKeys::NONE);
    }
}

#[test]
fn raw_ranges_give_back_each_span_under_its_resource_and_scope() {
    let span = |n: u8| Span {
        trace_id: vec![n; 16],
        span_id: vec![n; 8],
        name: format!("s{n}"),
        ..Default::default()
    };
    let request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv(attr::SERVICE_NAME, Value::StringValue("svc".into()))],
                ..Default::default()
            }),
            scope_spans: vec![
                ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "a".into(),
                        ..Default::default()
                    }),
                    spans: vec![span(1), span(2)],
                    schema_url: "u".into(),
                },
                ScopeSpans {
                    scope: None,
                    spans: vec![span(3)],
                    schema_url: String::new(),
                },
            ],
            schema_url: "r".into(),
        }],
    };
    let bytes = Bytes::from(request.encode_to_vec());
    let read = read_export(&bytes, true, &AttributeKeys::NONE).unwrap();
    assert_eq!(read.spans.len(), 3);
    assert_eq!(&*read.spans[0].service_name, "svc");
    let decoded: Vec<Span> = read
        .raw
        .iter()
        .map(|(_, range)| Span::decode(&bytes[range.clone()]).unwrap())
        .collect();
    assert_eq!(decoded, vec![span(1), span(2), span(3)]);
    assert_eq!(
        read.raw.iter().map(|(o, _)| *o).collect::<Vec<_>>(),
        [0, 0, 1]
    );
    let scope = &read.origins[0].scope;
    assert_eq!(
        InstrumentationScope::decode(&bytes[scope[0].clone()])
            .unwrap()
            .name,
        "a"
    );
    assert!(read.origins[1].scope.is_empty());
}

#[test]
fn invalid_utf8_in_a_read_string_is_an_error() {
    let request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: vec![Span {
                    attributes: vec![kv(attr::REQUEST_MODEL, Value::StringValue("glm-5".into()))],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let mut bytes = request.encode_to_vec();
    let at = bytes.windows(5).position(|w| w == b"glm-5").unwrap();
    bytes[at] = 0xff;
    assert!(read_export(&Bytes::from(bytes), false, &AttributeKeys::NONE).is_err());
}

/// A key the contract reads is taken as its static text, any other is checked: either way a key
/// with an invalid byte is refused (a known key with one changed byte is no longer known).
#[test]
fn an_attribute_key_with_invalid_utf8_is_an_error_whether_known_or_not() {
    for key in [attr::REQUEST_MODEL, "tenant.name"] {
        let request = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: vec![Span {
                        attributes: vec![kv(key, Value::StringValue("glm-5".into()))],
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let bytes = request.encode_to_vec();
        let read = read_export(&Bytes::from(bytes.clone()), false, &AttributeKeys::NONE);
        let model = read.expect("valid").spans[0].request_model.clone();
        assert_eq!(
            model.as_deref(),
            (key == attr::REQUEST_MODEL).then_some("glm-5"),
            "{key}"
        );
        let at = bytes
            .windows(key.len())
            .position(|w| w == key.as_bytes())
            .expect("the key is in the encoding");
        let mut broken = bytes;
        broken[at + 1] = 0xff;
        assert!(
            read_export(&Bytes::from(broken), false, &AttributeKeys::NONE).is_err(),
            "{key}"
        );
    }
}

#[test]
fn every_key_the_contract_reads_is_known_and_nothing_else() {
    for key in attr::KEYS {
        assert_eq!(crate::contract::known_key(key.as_bytes()), Some(key));
        let mut other = key.as_bytes().to_vec();
        other.push(b'x');
        assert_eq!(crate::contract::known_key(&other), None, "{key}x");
        assert_eq!(crate::contract::known_key(&other[1..key.len()]), None);
        // Same length, one byte changed at either end: the tail or the whole key differs.
        for at in [0, key.len() - 1] {
            let mut changed = key.as_bytes().to_vec();
            changed[at] ^= 0x20;
            assert_eq!(crate::contract::known_key(&changed), None, "{key} at {at}");
        }
    }
    assert_eq!(crate::contract::known_key(b""), None);
    assert_eq!(crate::contract::known_key(&[0xff; 300]), None);
}

#[test]
fn status_error_without_error_type_reads_as_other() {
    let request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: vec![Span {
                    status: Some(Status {
                        code: StatusCode::Error as i32,
                        message: String::new(),
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    assert_eq!(
        wire_facts(&request)[0].error_type.as_deref(),
        Some(attr::ERROR_TYPE_OTHER)
    );
}
