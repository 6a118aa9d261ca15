use std::str::FromStr;

use opentelemetry_proto::tonic::common::v1::ArrayValue;
use opentelemetry_proto::tonic::trace::v1::Status;

use super::*;

fn d(s: &str) -> Decimal {
    Decimal::from_str(s).unwrap()
}

fn s(v: &str) -> Value {
    Value::StringValue(v.into())
}

fn span(attributes: Vec<KeyValue>) -> Span {
    Span {
        trace_id: vec![1; 16],
        span_id: vec![2; 8],
        parent_span_id: vec![3; 8],
        attributes,
        ..Default::default()
    }
}

fn facts(attributes: Vec<KeyValue>) -> SpanFacts {
    SpanFacts::from_span(&span(attributes), &"svc".into())
}

#[test]
fn current_genai_names_are_read() {
    let f = facts(vec![
        kv(attr::SPAN_ROLE, s("attempt")),
        kv(attr::REQUEST_MODEL, s("glm-5")),
        kv(attr::RESPONSE_MODEL, s("glm-5-0801")),
        kv(attr::PROVIDER_NAME, s("aiwave")),
        kv(attr::INPUT_TOKENS, Value::IntValue(100)),
        kv(attr::CACHE_READ_INPUT_TOKENS, Value::IntValue(40)),
        kv(attr::OUTPUT_TOKENS, Value::IntValue(7)),
        kv(attr::REQUEST_MAX_TOKENS, Value::IntValue(800)),
    ]);
    assert_eq!(f.kind, SpanKind::Attempt);
    assert_eq!(f.request_model.as_deref(), Some("glm-5"));
    assert_eq!(f.response_model.as_deref(), Some("glm-5-0801"));
    assert_eq!(f.provider.as_deref(), Some("aiwave"));
    assert_eq!(
        (
            f.input_tokens,
            f.cached_input_tokens,
            f.output_tokens,
            f.output_cap
        ),
        (
            Count::Value(100),
            Count::Value(40),
            Count::Value(7),
            Count::Value(800)
        )
    );
}

#[test]
fn legacy_genai_names_fill_in_only_what_is_missing() {
    let f = facts(vec![
        kv(attr::REQUEST_MODEL, s("glm-5")),
        kv(attr::LEGACY_SYSTEM, s("openai")),
        kv(attr::LEGACY_PROMPT_TOKENS, Value::IntValue(100)),
        kv(attr::LEGACY_CACHE_READ_INPUT_TOKENS, Value::IntValue(10)),
        kv(attr::LEGACY_COMPLETION_TOKENS, Value::IntValue(5)),
        kv(attr::OUTPUT_TOKENS, Value::IntValue(6)),
    ]);
    assert_eq!(f.provider.as_deref(), Some("openai"));
    assert_eq!(f.input_tokens, Count::Value(100));
    assert_eq!(f.cached_input_tokens, Count::Value(10));
    assert_eq!(
        f.output_tokens,
        Count::Value(6),
        "the current name wins over the legacy one"
    );
}

#[test]
fn flat_envelope_attributes_are_read() {
    let f = facts(vec![
        kv(attr::PRICING_SOURCE, s("https://aiwave.live/api/pricing")),
        kv(attr::PRICING_CHECKED_AT, s("2026-08-22T18:30:00-08:00")),
        kv(attr::PRICING_VERSION, s("v1")),
        kv(attr::BILLING_GROUP, s("vip")),
        kv(attr::MAX_INCREMENTAL_USD, Value::DoubleValue(0.015)),
        kv(attr::MAX_ATTEMPTS_AFTER_FIRST, Value::IntValue(1)),
        kv(attr::ALLOW_FAMILY_FALLBACK, Value::BoolValue(true)),
        kv(
            attr::ALLOWED_FALLBACK_FAMILIES,
            Value::ArrayValue(ArrayValue {
                values: vec![AnyValue {
                    value: Some(s("qwen")),
                }],
            }),
        ),
        kv(attr::REPLAY_SAFE, Value::BoolValue(false)),
        kv(attr::TASK_TYPE, s("code_patch")),
    ]);
    let e = &f.envelope;
    assert!(e.present);
    // An RFC 3339 timestamp counts by its UTC date.
    assert_eq!(e.pricing_checked_at, NaiveDate::from_ymd_opt(2026, 8, 23));
    assert_eq!(e.max_incremental_usd, Some(d("0.015")));
    assert_eq!(e.max_incremental_usd.unwrap().to_string(), "0.015");
    assert_eq!(e.max_attempts_after_first, Some(1));
    assert_eq!(e.allow_family_fallback, Some(true));
    assert_eq!(e.allowed_fallback_families, Some(vec!["qwen".to_owned()]));
    assert_eq!(e.replay_safe, Some(false));
    assert_eq!(e.task_type.as_deref(), Some("code_patch"));
    assert_eq!(
        f.kind,
        SpanKind::Passthrough,
        "an envelope alone does not make a GenAI span"
    );
}

#[test]
fn task_type_alone_is_not_an_envelope() {
    assert!(!facts(vec![kv(attr::TASK_TYPE, s("x"))]).envelope.present);
}

#[test]
fn money_as_double_int_or_decimal_string() {
    let read = |v: Value| {
        facts(vec![kv(attr::MAX_INCREMENTAL_USD, v)])
            .envelope
            .max_incremental_usd
    };
    assert_eq!(read(Value::DoubleValue(0.015)), Some(d("0.015")));
    assert_eq!(read(s("0.0150")), Some(d("0.015")));
    assert_eq!(read(s("1.5e-2")), Some(d("0.015")));
    assert_eq!(read(Value::IntValue(2)), Some(d("2")));
    assert_eq!(
        read(Value::DoubleValue(0.1 + 0.2)),
        Some(d("0.30000000000000004"))
    );
    assert_eq!(
        read(s("0.1234567890123456785")),
        Some(d("0.123456789012345678")),
        "half-even"
    );
    assert_eq!(read(Value::DoubleValue(f64::NAN)), None);
    assert_eq!(read(Value::DoubleValue(f64::INFINITY)), None);
    assert_eq!(read(Value::DoubleValue(1e300)), None);
    assert_eq!(read(s("lots")), None);
    assert_eq!(read(Value::BoolValue(true)), None);
}

#[test]
fn counts_accept_integral_doubles_and_strings_only() {
    let read = |v: Value| facts(vec![kv(attr::INPUT_TOKENS, v)]).input_tokens;
    assert_eq!(read(Value::DoubleValue(1000.0)), Count::Value(1000));
    assert_eq!(read(s("1000")), Count::Value(1000));
    assert_eq!(read(Value::DoubleValue(10.5)), Count::Missing);
    assert_eq!(read(Value::DoubleValue(f64::NAN)), Count::Missing);
    assert_eq!(read(Value::DoubleValue(1e25)), Count::OutOfRange);
    assert_eq!(read(Value::IntValue(-3)), Count::Value(-3));
    assert!(read(Value::IntValue(-3)).is_invalid_usage());
    assert_eq!(read(Value::BytesValue(vec![1, 2])), Count::Missing);
}

#[test]
fn booleans_and_arrays_only_in_native_form() {
    let f = facts(vec![
        kv(attr::REPLAY_SAFE, s("true")),
        kv(attr::ALLOWED_FALLBACK_FAMILIES, s("qwen,glm")),
    ]);
    assert_eq!(f.envelope.replay_safe, None);
    assert_eq!(f.envelope.allowed_fallback_families, None);
    assert!(
        f.envelope.present,
        "a wrongly typed envelope attribute still makes one present"
    );
}

#[test]
fn json_envelope_as_in_the_seed() {
    let json = r#"{
      "retry_spend_envelope": {
        "pricing_source": "https://aiwave.live/api/pricing",
        "pricing_checked_at": "2026-08-22",
        "pricing_version": "a42d372ccf0b5dd13ecf71203521f9d2",
        "billing_group": "vip",
        "max_incremental_usd": 0.015,
        "max_attempts_after_first": 1,
        "allow_family_fallback": true,
        "allowed_fallback_families": ["deepseek", "qwen", "glm"]
      }
    }"#;
    let f = facts(vec![kv(attr::ENVELOPE_JSON, s(json))]);
    let e = f.envelope_json.expect("json envelope");
    assert!(e.present && !e.json_invalid);
    assert_eq!(e.max_incremental_usd, Some(d("0.015")));
    assert_eq!(e.max_attempts_after_first, Some(1));
    assert_eq!(e.billing_group.as_deref(), Some("vip"));
    assert_eq!(e.allowed_fallback_families.as_ref().map(Vec::len), Some(3));
    assert!(!f.envelope.present && facts(vec![kv(attr::ENVELOPE_JSON, s(json))]).has_envelope());
}

#[test]
fn json_envelope_inner_object_and_exact_numbers() {
    let e = parse_envelope_json(
        r#"{"max_incremental_usd": 0.12345678901234567891, "max_attempts_after_first": "2", "replay_safe": true}"#,
    );
    assert_eq!(e.max_incremental_usd, Some(d("0.123456789012345679")));
    assert_eq!(e.max_attempts_after_first, Some(2));
    assert_eq!(e.replay_safe, Some(true));
}

#[test]
fn json_envelope_that_does_not_parse_is_present_but_invalid() {
    for broken in ["{", "[1,2]", "\"x\"", r#"{"retry_spend_envelope": 5}"#] {
        let e = parse_envelope_json(broken);
        assert!(e.present && e.json_invalid, "{broken}");
    }
}

#[test]
fn roles_decide_the_span_kind() {
    let kind = |attrs| facts(attrs).kind;
    assert_eq!(
        kind(vec![
            kv(attr::SPAN_ROLE, s("logical_request")),
            kv(attr::REQUEST_MODEL, s("m"))
        ]),
        SpanKind::LogicalRequest
    );
    assert_eq!(
        kind(vec![kv(attr::ATTEMPT_INDEX, Value::IntValue(1))]),
        SpanKind::Attempt
    );
    assert_eq!(
        kind(vec![
            kv(attr::REQUEST_MODEL, s("m")),
            kv(attr::REQUEST_ID, s("r"))
        ]),
        SpanKind::Attempt
    );
    assert_eq!(
        kind(vec![kv(attr::REQUEST_MODEL, s("m"))]),
        SpanKind::SingleAttempt
    );
    assert_eq!(
        kind(vec![kv("http.method", s("GET"))]),
        SpanKind::Passthrough
    );
}

fn client_span(attributes: Vec<KeyValue>) -> Span {
    Span {
        kind: OtlpSpanKind::Client as i32,
        ..span(attributes)
    }
}

#[test]
fn http_client_spans_that_are_no_genai_spans_are_tries() {
    let method = || kv(attr::HTTP_REQUEST_METHOD, s("POST"));
    let cases = [
        (
            "current method name",
            client_span(vec![method()]),
            SpanKind::HttpTry,
        ),
        (
            "legacy method name",
            client_span(vec![kv(attr::LEGACY_HTTP_METHOD, s("POST"))]),
            SpanKind::HttpTry,
        ),
        (
            "not of kind CLIENT",
            span(vec![method()]),
            SpanKind::Passthrough,
        ),
        (
            "no HTTP method",
            client_span(vec![kv("url.full", s("http://x"))]),
            SpanKind::Passthrough,
        ),
        (
            "a GenAI span is never a try",
            client_span(vec![method(), kv(attr::REQUEST_MODEL, s("m"))]),
            SpanKind::SingleAttempt,
        ),
        (
            "a declared attempt is never a try",
            client_span(vec![method(), kv(attr::SPAN_ROLE, s("attempt"))]),
            SpanKind::Attempt,
        ),
    ];
    for (case, sp, kind) in cases {
        assert_eq!(
            SpanFacts::from_span(&sp, &"svc".into()).kind,
            kind,
            "{case}"
        );
    }
}

#[test]
fn genai_span_with_an_unusable_role_or_request_id_is_a_declared_single() {
    let model = || kv(attr::REQUEST_MODEL, s("m"));
    for attrs in [
        vec![model(), kv(attr::SPAN_ROLE, s("retry"))],
        vec![model(), kv(attr::SPAN_ROLE, s(""))],
        vec![model(), kv(attr::REQUEST_ID, Value::BoolValue(true))],
    ] {
        assert_eq!(
            facts(attrs.clone()).kind,
            SpanKind::DeclaredSingle,
            "{attrs:?}"
        );
    }
}

fn http_try(attributes: Vec<KeyValue>, status_error: bool) -> HttpTry {
    let mut sp = client_span(attributes);
    sp.attributes.push(kv(attr::HTTP_REQUEST_METHOD, s("POST")));
    if status_error {
        sp.status = Some(Status {
            code: StatusCode::Error as i32,
            message: String::new(),
        });
    }
    let f = SpanFacts::from_span(&sp, &"svc".into());
    HttpTry::read(&sp, &f).expect("an HTTP try")
}

#[test]
fn http_try_reads_resend_count_and_status_code_current_name_first() {
    let cases = [
        (vec![], None, None),
        (
            vec![kv(attr::HTTP_RESEND_COUNT, Value::IntValue(2))],
            Some(2),
            None,
        ),
        (
            vec![kv(attr::HTTP_RESEND_COUNT, Value::IntValue(-1))],
            None,
            None,
        ),
        (
            vec![kv(attr::HTTP_RESEND_COUNT, Value::IntValue(i64::MAX))],
            None,
            None,
        ),
        (
            vec![kv(attr::LEGACY_HTTP_STATUS_CODE, Value::IntValue(500))],
            None,
            Some(500),
        ),
        (
            vec![
                kv(attr::LEGACY_HTTP_STATUS_CODE, Value::IntValue(500)),
                kv(attr::HTTP_RESPONSE_STATUS_CODE, s("429")),
            ],
            None,
            Some(429),
        ),
    ];
    for (attrs, resend_count, status_code) in cases {
        let t = http_try(attrs.clone(), false);
        assert_eq!(
            (t.resend_count, t.status_code),
            (resend_count, status_code),
            "{attrs:?}"
        );
    }
}

#[test]
fn http_try_error_type_is_error_type_then_status_code_from_400_then_other() {
    let code = |c| kv(attr::HTTP_RESPONSE_STATUS_CODE, Value::IntValue(c));
    let cases = [
        (
            "error.type wins",
            vec![kv(attr::ERROR_TYPE, s("timeout")), code(503)],
            true,
            Some("timeout"),
        ),
        ("status code from 400", vec![code(429)], false, Some("429")),
        (
            "status code over ERROR status",
            vec![code(500)],
            true,
            Some("500"),
        ),
        ("a 3xx is no error", vec![code(307)], false, None),
        ("ERROR status alone", vec![code(200)], true, Some("_OTHER")),
        ("a success", vec![code(200)], false, None),
    ];
    for (case, attrs, status_error, expected) in cases {
        let t = http_try(attrs, status_error);
        assert_eq!(t.attempt_error_type().as_deref(), expected, "{case}");
    }
}

#[test]
fn only_http_tries_have_http_facts() {
    let sp = span(vec![kv(attr::REQUEST_MODEL, s("m"))]);
    let f = SpanFacts::from_span(&sp, &"svc".into());
    assert_eq!(HttpTry::read(&sp, &f), None);
}

#[test]
fn bad_index_and_count_values_are_missing_not_panics() {
    for bad in [
        Value::IntValue(-1),
        Value::IntValue(i64::MAX),
        s("first"),
        Value::DoubleValue(0.5),
    ] {
        let f = facts(vec![
            kv(attr::ATTEMPT_INDEX, bad.clone()),
            kv(attr::ATTEMPT_COUNT, bad),
        ]);
        assert_eq!(f.attempt_index, None);
        assert_eq!(f.attempt_count, None);
        assert_eq!(f.kind, SpanKind::Attempt);
    }
}

#[test]
fn error_status_without_error_type_is_other() {
    let mut sp = span(vec![kv(attr::REQUEST_MODEL, s("m"))]);
    sp.status = Some(Status {
        code: StatusCode::Error as i32,
        message: "boom".into(),
    });
    assert_eq!(
        SpanFacts::from_span(&sp, &"svc".into())
            .error_type
            .as_deref(),
        Some("_OTHER")
    );
    sp.attributes.push(kv(attr::ERROR_TYPE, s("timeout")));
    assert_eq!(
        SpanFacts::from_span(&sp, &"svc".into())
            .error_type
            .as_deref(),
        Some("timeout")
    );
}

#[test]
fn ids_of_the_wrong_length_do_not_panic() {
    let mut sp = span(vec![kv(attr::REQUEST_MODEL, s("m"))]);
    sp.trace_id = vec![1, 2, 3];
    sp.span_id = vec![];
    sp.parent_span_id = vec![9; 20];
    let f = SpanFacts::from_span(&sp, &"svc".into());
    assert_eq!(f.trace_id, [0; 16]);
    assert_eq!(f.parent_span_id, None);
}

#[test]
fn service_name_defaults_to_unknown_service() {
    assert_eq!(&*service_name(&[]), "unknown_service");
    assert_eq!(
        &*service_name(&[kv(attr::SERVICE_NAME, s("billing"))]),
        "billing"
    );
}

#[test]
fn fallback_families_are_a_set() {
    let families = |values: &[&str]| {
        let array = ArrayValue {
            values: values
                .iter()
                .map(|v| AnyValue { value: Some(s(v)) })
                .collect(),
        };
        facts(vec![kv(
            attr::ALLOWED_FALLBACK_FAMILIES,
            Value::ArrayValue(array),
        )])
        .envelope
        .allowed_fallback_families
        .clone()
    };
    assert_eq!(
        families(&["qwen", "glm", "qwen"]),
        families(&["glm", "qwen"])
    );
    let json = parse_envelope_json(r#"{"allowed_fallback_families": ["qwen", "glm"]}"#);
    assert_eq!(json.allowed_fallback_families, families(&["glm", "qwen"]));
}

mod hostile {
    //! Values no SDK writes, that a broken or hostile exporter can: read without panicking,
    //! into "missing" or "invalid", never into a figure.

    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::KeyValueList;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans};
    use prost::Message;

    use super::*;

    const MONEY_KEYS: [&str; 3] = [
        attr::MAX_INCREMENTAL_USD,
        attr::SDK_ESTIMATED_INCREMENTAL_USD,
        attr::SDK_REMAINING_ENVELOPE_USD,
    ];
    const COUNT_KEYS: [&str; 10] = [
        attr::INPUT_TOKENS,
        attr::LEGACY_PROMPT_TOKENS,
        attr::CACHE_READ_INPUT_TOKENS,
        attr::LEGACY_CACHE_READ_INPUT_TOKENS,
        attr::OUTPUT_TOKENS,
        attr::LEGACY_COMPLETION_TOKENS,
        attr::REQUEST_MAX_TOKENS,
        attr::ATTEMPT_INDEX,
        attr::ATTEMPT_COUNT,
        attr::MAX_ATTEMPTS_AFTER_FIRST,
    ];

    fn money_of(f: &SpanFacts, key: &str) -> Option<Decimal> {
        match key {
            attr::MAX_INCREMENTAL_USD => f.envelope.max_incremental_usd,
            attr::SDK_ESTIMATED_INCREMENTAL_USD => f.sdk_estimated_incremental_usd(),
            _ => f.sdk_remaining_envelope_usd(),
        }
    }

    /// Every count-like field, as an i64 where one was read.
    fn counts_of(f: &SpanFacts) -> Vec<Option<i64>> {
        vec![
            f.input_tokens.value(),
            f.cached_input_tokens.value(),
            f.output_tokens.value(),
            f.output_cap.value(),
            f.attempt_index.map(i64::from),
            f.attempt_count.map(i64::from),
            f.envelope.max_attempts_after_first.map(i64::from),
        ]
    }

    fn nested(depth: usize) -> Value {
        let mut value = s("leaf");
        for level in 0..depth {
            let inner = AnyValue { value: Some(value) };
            value = if level % 2 == 0 {
                Value::ArrayValue(ArrayValue {
                    values: vec![inner],
                })
            } else {
                Value::KvlistValue(KeyValueList {
                    values: vec![KeyValue {
                        key: "k".into(),
                        value: Some(inner),
                        ..Default::default()
                    }],
                })
            };
        }
        value
    }

    fn export(spans: Vec<Span>) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    #[test]
    fn nan_and_infinite_doubles_are_missing_for_every_money_and_count_attribute() {
        for double in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -f64::NAN] {
            for key in MONEY_KEYS {
                let f = facts(vec![kv(key, Value::DoubleValue(double))]);
                assert_eq!(money_of(&f, key), None, "{key} = {double}");
            }
            for key in COUNT_KEYS {
                let f = facts(vec![kv(key, Value::DoubleValue(double))]);
                assert!(
                    counts_of(&f).iter().all(Option::is_none),
                    "{key} = {double}"
                );
            }
        }
        let f = facts(vec![kv(
            attr::MAX_INCREMENTAL_USD,
            Value::DoubleValue(f64::NAN),
        )]);
        assert!(
            f.envelope.present,
            "an unreadable envelope value still names an envelope"
        );
    }

    #[test]
    fn finite_doubles_beyond_a_decimal_are_missing_not_rounded() {
        for double in [f64::MAX, -f64::MAX, 1e300, 1e29] {
            for key in MONEY_KEYS {
                let f = facts(vec![kv(key, Value::DoubleValue(double))]);
                assert_eq!(money_of(&f, key), None, "{key} = {double}");
            }
        }
        let tiny = facts(vec![kv(
            attr::SDK_ESTIMATED_INCREMENTAL_USD,
            Value::DoubleValue(f64::MIN_POSITIVE),
        )]);
        assert_eq!(tiny.sdk_estimated_incremental_usd(), Some(Decimal::ZERO));
    }

    #[test]
    fn token_counts_past_two_to_the_53_or_negative_are_invalid_usage() {
        let past = MAX_TOKEN_COUNT + 1;
        for value in [
            Value::IntValue(past),
            Value::IntValue(i64::MAX),
            Value::IntValue(-1),
            Value::IntValue(i64::MIN),
            Value::DoubleValue(-3.0),
            Value::DoubleValue(2f64.powi(60)),
            s("9007199254740993"),
            s("-12"),
        ] {
            for key in [
                attr::INPUT_TOKENS,
                attr::CACHE_READ_INPUT_TOKENS,
                attr::OUTPUT_TOKENS,
                attr::REQUEST_MAX_TOKENS,
            ] {
                let f = facts(vec![kv(key, value.clone())]);
                let count = [
                    f.input_tokens,
                    f.cached_input_tokens,
                    f.output_tokens,
                    f.output_cap,
                ]
                .into_iter()
                .find(|c| *c != Count::Missing)
                .unwrap_or_else(|| panic!("{key} = {value:?} was dropped"));
                assert!(count.is_invalid_usage(), "{key} = {value:?}");
            }
        }
        assert!(!Count::Value(MAX_TOKEN_COUNT).is_invalid_usage());
        let f = facts(vec![kv(attr::INPUT_TOKENS, Value::DoubleValue(1e30))]);
        assert!(f.input_tokens.value().is_none());
    }

    #[test]
    fn ids_of_every_wrong_length_read_as_zero() {
        for len in [0, 7, 17, 33] {
            let mut sp = span(vec![kv(attr::REQUEST_MODEL, s("glm-5"))]);
            sp.trace_id = vec![0xab; len];
            sp.span_id = vec![0xcd; len];
            sp.parent_span_id = vec![0xef; len];
            let f = SpanFacts::from_span(&sp, &"svc".into());
            assert_eq!(f.trace_id, [0; 16], "{len} bytes");
            assert_eq!(f.span_id, [0; 8], "{len} bytes");
            assert_eq!(f.parent_span_id, None, "{len} bytes");
        }
    }

    #[test]
    fn deeply_nested_values_are_not_strings_numbers_or_arrays_of_strings() {
        let deep = nested(64);
        let f = facts(vec![
            kv(attr::SPAN_ROLE, s(attr::ROLE_ATTEMPT)),
            kv(attr::REQUEST_MODEL, deep.clone()),
            kv(attr::INPUT_TOKENS, deep.clone()),
            kv(attr::MAX_INCREMENTAL_USD, deep.clone()),
            kv(attr::ALLOWED_FALLBACK_FAMILIES, deep.clone()),
            kv(attr::ENVELOPE_JSON, deep),
        ]);
        assert_eq!(f.request_model, None);
        assert_eq!(f.input_tokens, Count::Missing);
        assert_eq!(f.envelope.max_incremental_usd, None);
        assert_eq!(f.envelope.allowed_fallback_families, None);
        assert!(f.envelope.present);
        assert!(f.envelope_json.as_ref().is_some_and(|j| j.json_invalid));
    }

    #[test]
    fn nesting_past_the_decoders_limits_is_an_error_not_a_stack_overflow() {
        let deep = export(vec![span(vec![kv(attr::REQUEST_MODEL, nested(200))])]);
        assert!(ExportTraceServiceRequest::decode(deep.encode_to_vec().as_slice()).is_err());

        let depth = 200;
        let json = format!(
            r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{{"attributes":[{{"key":"k","value":{}{}{}}}]}}]}}]}}]}}"#,
            r#"{"arrayValue":{"values":["#.repeat(depth),
            r#"{"stringValue":"x"}"#,
            "]}}".repeat(depth),
        );
        assert!(serde_json::from_str::<ExportTraceServiceRequest>(&json).is_err());
    }

    #[test]
    fn a_one_mebibyte_string_attribute_is_read_like_any_other() {
        let huge = "9".repeat(1 << 20);
        let f = facts(vec![
            kv(attr::REQUEST_MODEL, s(&huge)),
            kv(attr::MAX_INCREMENTAL_USD, s(&huge)),
            kv(attr::INPUT_TOKENS, s(&huge)),
            kv(attr::ENVELOPE_JSON, s(&"[".repeat(1 << 20))),
            kv(attr::SDK_ESTIMATED_INCREMENTAL_USD, s(&format!("0.{huge}"))),
        ]);
        assert_eq!(f.request_model.as_deref().map(str::len), Some(1 << 20));
        assert_eq!(f.envelope.max_incremental_usd, None);
        assert_eq!(f.input_tokens, Count::Missing);
        assert!(f.envelope_json.as_ref().is_some_and(|j| j.json_invalid));
        assert_eq!(f.sdk_estimated_incremental_usd(), Some(Decimal::ONE));
    }

    #[test]
    fn invalid_utf8_in_a_string_field_fails_to_decode() {
        let mut sp = span(vec![kv("AAAAAAAA", s("BBBBBBBB"))]);
        sp.name = "CCCCCCCC".into();
        let bytes = export(vec![sp]).encode_to_vec();
        assert!(ExportTraceServiceRequest::decode(bytes.as_slice()).is_ok());
        for marker in [b"AAAAAAAA", b"BBBBBBBB", b"CCCCCCCC"] {
            let at = bytes
                .windows(marker.len())
                .position(|w| w == marker)
                .expect("marker is in the encoding");
            let mut broken = bytes.clone();
            broken[at..at + 2].copy_from_slice(&[0xff, 0xfe]);
            assert!(
                ExportTraceServiceRequest::decode(broken.as_slice()).is_err(),
                "{}",
                String::from_utf8_lossy(marker)
            );
        }
    }
}

#[test]
fn from_span_with_keeps_the_named_span_and_resource_attributes_in_string_form() {
    let span = Span {
        attributes: vec![
            kv(attr::REQUEST_MODEL, Value::StringValue("glm-5".into())),
            kv(
                "deployment.environment.name",
                Value::StringValue("prod".into()),
            ),
            kv("tenant.tier", Value::IntValue(3)),
            kv("sample.rate", Value::DoubleValue(0.25)),
            kv("canary", Value::BoolValue(false)),
            kv("blob", Value::BytesValue(vec![1, 2])),
            kv("not.named", Value::StringValue("x".into())),
        ],
        ..Default::default()
    };
    let resource = [kv("cloud.region", Value::StringValue("eu-west-1".into()))];
    let keys = AttributeKeys::new(
        [
            "deployment.environment.name",
            "tenant.tier",
            "sample.rate",
            "canary",
            "blob",
            "cloud.region",
        ]
        .map(String::from),
    );
    let service: Symbol = "svc".into();
    let facts = SpanFacts::from_span_with(&span, &service, &resource, &keys);
    let captured: Vec<(&str, &str)> = facts.captured.iter().collect();
    assert_eq!(
        captured,
        [
            ("deployment.environment.name", "prod"),
            ("tenant.tier", "3"),
            ("sample.rate", "0.25"),
            ("canary", "false"),
            ("cloud.region", "eu-west-1"),
        ]
    );
    assert!(facts.captured.has("tenant.tier", "3"));
    assert!(!facts.captured.has("not.named", "x"));
    // Without keys nothing is kept, and the rest of the facts are the same.
    let plain = SpanFacts::from_span_with(&span, &service, &resource, &AttributeKeys::NONE);
    assert!(plain.captured.is_empty());
    assert_eq!(
        SpanFacts {
            captured: Default::default(),
            http: None,
            ..facts
        },
        plain
    );
}

#[test]
fn string_form_of_doubles_is_the_shortest_round_trip() {
    let cases = [
        (Value::DoubleValue(1.0), Some("1")),
        (Value::DoubleValue(0.1), Some("0.1")),
        (Value::DoubleValue(-2.5), Some("-2.5")),
        (Value::IntValue(-7), Some("-7")),
        (Value::BoolValue(true), Some("true")),
        (Value::StringValue(String::new()), Some("")),
        (Value::BytesValue(vec![1]), None),
    ];
    for (value, expected) in cases {
        assert_eq!(string_form(&value).as_deref(), expected, "{value:?}");
    }
}

#[test]
fn spans_of_one_request_read_on_one_thread_share_its_id() {
    let attempt = facts(vec![kv(attr::REQUEST_ID, s("req-shared-1"))]);
    let logical = facts(vec![
        kv(attr::SPAN_ROLE, s("logical_request")),
        kv(attr::REQUEST_ID, s("req-shared-1")),
    ]);
    let other = facts(vec![kv(attr::REQUEST_ID, s("req-shared-2"))]);
    let number = facts(vec![kv(attr::REQUEST_ID, Value::IntValue(42))]);
    let (Some(a), Some(l), Some(o), Some(n)) = (
        attempt.request_id,
        logical.request_id,
        other.request_id,
        number.request_id,
    ) else {
        panic!("every span names a request id");
    };
    assert!(Arc::ptr_eq(&a, &l));
    assert_eq!((&*a, &*o, &*n), ("req-shared-1", "req-shared-2", "42"));
}

/// Envelopes read in turn are shared, the last one read or an earlier one, and a span holds
/// its envelope as often as the interning table alone would make it.
#[test]
fn envelopes_read_on_one_thread_are_shared_whichever_came_last() {
    let envelope = |group: &str| {
        facts(vec![
            kv(attr::SPAN_ROLE, s("logical_request")),
            kv(attr::BILLING_GROUP, s(group)),
        ])
        .envelope
    };
    let first = envelope("envelope-sharing-a");
    let again = envelope("envelope-sharing-a");
    let other = envelope("envelope-sharing-b");
    let back = envelope("envelope-sharing-a");
    assert!(Arc::ptr_eq(&first, &again));
    assert!(Arc::ptr_eq(&first, &back));
    assert!(!Arc::ptr_eq(&first, &other));
    assert_eq!(other.billing_group.as_deref(), Some("envelope-sharing-b"));
    // The table's copy and these three.
    assert_eq!(Arc::strong_count(&first), 4);
    assert_eq!(Arc::strong_count(&other), 2);
}

/// A double read again, right after itself or after others, is the decimal its printed form
/// gives, whatever was read before it.
#[test]
fn doubles_read_in_any_order_give_their_printed_decimal() {
    let doubles = [
        0.015, 0.015, 0.05, 0.015, -0.0, 0.0, -0.0, 1e21, 1e21, 5e-324, 0.1, 0.3, 0.1, -2.5, -2.5,
        1e-7,
    ];
    for d in doubles {
        assert_eq!(
            super::double_to_decimal(d),
            super::parse_lenient_decimal(&d.to_string()),
            "{d:?}"
        );
    }
    assert_eq!(super::double_to_decimal(f64::NAN), None);
    assert_eq!(super::double_to_decimal(f64::INFINITY), None);
}

/// `is_unstated` is `== default()`: true for the default, false with any one field set.
#[test]
fn an_envelope_is_unstated_only_when_it_is_the_default() {
    let default = EnvelopeFields::default;
    assert!(default().is_unstated());
    let one_field_each = [
        EnvelopeFields {
            present: true,
            ..default()
        },
        EnvelopeFields {
            json_invalid: true,
            ..default()
        },
        EnvelopeFields {
            pricing_source: Some(symbol("s")),
            ..default()
        },
        EnvelopeFields {
            pricing_checked_at: chrono::NaiveDate::from_ymd_opt(2026, 8, 1),
            ..default()
        },
        EnvelopeFields {
            pricing_version: Some(symbol("v")),
            ..default()
        },
        EnvelopeFields {
            billing_group: Some(symbol("g")),
            ..default()
        },
        EnvelopeFields {
            max_incremental_usd: Some(Decimal::ZERO),
            ..default()
        },
        EnvelopeFields {
            max_attempts_after_first: Some(0),
            ..default()
        },
        EnvelopeFields {
            allow_family_fallback: Some(false),
            ..default()
        },
        EnvelopeFields {
            allowed_fallback_families: Some(Vec::new()),
            ..default()
        },
        EnvelopeFields {
            replay_safe: Some(false),
            ..default()
        },
        EnvelopeFields {
            assumed_output_cap: Some(0),
            ..default()
        },
        EnvelopeFields {
            task_type: Some(symbol("t")),
            ..default()
        },
    ];
    for envelope in one_field_each {
        assert_ne!(envelope, default());
        assert!(!envelope.is_unstated(), "{envelope:?}");
    }
}

#[test]
fn packed_counts_give_back_what_was_set_last() {
    let mut counts = PackedCounts::new([Count::Value(-1), Count::OutOfRange, Count::Missing]);
    assert_eq!(
        counts.all(),
        [Count::Value(-1), Count::OutOfRange, Count::Missing]
    );
    counts.set(0, Count::Missing);
    counts.set(1, Count::Value(i64::MIN));
    counts.set(2, Count::OutOfRange);
    counts.set(3, Count::Value(7));
    assert_eq!(
        counts.all(),
        [Count::Missing, Count::Value(i64::MIN), Count::OutOfRange]
    );
    assert_eq!(counts.get(3), Count::Missing, "past the last");
    assert!(std::mem::size_of::<PackedCounts<4>>() < 4 * std::mem::size_of::<Count>());
}

#[test]
fn narrow_packed_counts_take_what_fits_their_values_and_refuse_the_rest() {
    let fits = [
        Count::Value(0),
        Count::Value(i64::from(u32::MAX)),
        Count::OutOfRange,
        Count::Missing,
    ];
    let narrow = PackedCounts::<4, u32>::try_new(fits);
    assert_eq!(narrow.map(|c| c.all()), Some(fits));
    for wide in [Count::Value(-1), Count::Value(i64::from(u32::MAX) + 1)] {
        assert_eq!(
            PackedCounts::<4, u32>::try_new([Count::Missing, wide, Count::Missing, Count::Missing]),
            None
        );
    }
    let mut counts = PackedCounts::<2, u32>::default();
    assert_eq!(counts.try_set(0, Count::Value(-1)), None);
    assert_eq!(counts.all(), [Count::Missing; 2], "nothing set");
    assert!(std::mem::size_of::<PackedCounts<5, u32>>() <= 24);
}

/// Ids are written as the `hex` crate writes them: every byte value, at every place of a span
/// and a trace id.
#[test]
fn ids_are_written_in_lowercase_hex_as_the_hex_crate_writes_them() {
    for byte in 0..=u8::MAX {
        for place in 0..16 {
            let mut trace = [0x5a; 16];
            trace[place] = byte;
            assert_eq!(id_hex(&trace), hex::encode(trace));
            let mut span = [0xa5; 8];
            span[place % 8] = byte;
            assert_eq!(id_hex(&span), hex::encode(span));
        }
    }
}
