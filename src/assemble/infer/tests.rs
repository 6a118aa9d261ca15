use std::sync::Arc;

use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind as OtlpSpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::{Span, Status};

use super::*;
use crate::contract::{attr, kv, TraceId, UsageOrigin};

const TRACE: [u8; 16] = [7; 16];
/// The application span the GenAI calls of most tests run under.
const APP: u8 = 0xa0;
const SECOND: u64 = 1_000_000_000;

fn id(n: u8) -> Vec<u8> {
    vec![0, 0, 0, 0, 0, 0, 0, n]
}

fn s(v: &str) -> Value {
    Value::StringValue(v.into())
}

fn i(v: i64) -> Value {
    Value::IntValue(v)
}

/// A plain GenAI span as OpenLLMetry writes one, starting at second `start`.
fn genai(n: u8, parent: Option<u8>, start: u64) -> Span {
    Span {
        trace_id: TRACE.to_vec(),
        span_id: id(n),
        parent_span_id: parent.map(id).unwrap_or_default(),
        kind: OtlpSpanKind::Client as i32,
        start_time_unix_nano: start * SECOND,
        end_time_unix_nano: (start + 1) * SECOND,
        attributes: vec![
            kv(attr::REQUEST_MODEL, s("glm-5")),
            kv(attr::RESPONSE_MODEL, s("glm-5")),
            kv(attr::LEGACY_SYSTEM, s("openai")),
            kv(attr::INPUT_TOKENS, i(1000)),
            kv(attr::CACHE_READ_INPUT_TOKENS, i(200)),
            kv(attr::OUTPUT_TOKENS, i(50)),
            kv(attr::REQUEST_MAX_TOKENS, i(800)),
        ],
        ..Default::default()
    }
}

fn errored(mut span: Span) -> Span {
    span.status = Some(Status {
        code: StatusCode::Error as i32,
        message: String::new(),
    });
    span
}

fn with(mut span: Span, key: &str, value: Value) -> Span {
    span.attributes.retain(|a| a.key != key);
    span.attributes.push(kv(key, value));
    span
}

/// An HTTP client try under span `parent`, at `start` nanoseconds into second `parent_start`.
fn http(n: u8, parent: u8, start: u64, attributes: Vec<(&str, Value)>) -> Span {
    let mut span = Span {
        trace_id: TRACE.to_vec(),
        span_id: id(n),
        parent_span_id: id(parent),
        kind: OtlpSpanKind::Client as i32,
        start_time_unix_nano: start,
        end_time_unix_nano: start + 10,
        attributes: vec![kv(attr::HTTP_REQUEST_METHOD, s("POST"))],
        ..Default::default()
    };
    for (key, value) in attributes {
        span.attributes.push(kv(key, value));
    }
    span
}

fn status(code: i64) -> (&'static str, Value) {
    (attr::HTTP_RESPONSE_STATUS_CODE, i(code))
}

fn resend(count: i64) -> (&'static str, Value) {
    (attr::HTTP_RESEND_COUNT, i(count))
}

/// Reads the spans as the collector does and infers their requests.
fn infer_spans(spans: &[Span]) -> Vec<Request> {
    let mut traces: std::collections::BTreeMap<TraceId, TraceSpans> = Default::default();
    for span in spans {
        let facts = SpanFacts::from_span(span, &Arc::from("svc"));
        traces.entry(facts.trace_id).or_default().push(facts);
    }
    let mut requests: Vec<Request> = traces
        .into_iter()
        .flat_map(|(trace_id, spans)| infer_trace(trace_id, spans, None).requests)
        .collect();
    requests.sort_by(|a, b| a.key.cmp(&b.key));
    requests
}

/// One request as (source, request id's last byte, [(span id's last byte, index, error type)]).
type Shape = (AttemptSource, u8, Vec<(u8, i32, Option<String>)>);

fn shape(request: &Request) -> Shape {
    let GroupKey::Single { span_id, .. } = request.key else {
        panic!("inferred requests are keyed by a span: {:?}", request.key);
    };
    let attempts = request
        .attempts
        .iter()
        .map(|a| {
            (
                a.span_id[7],
                a.attempt_index.unwrap_or(0),
                a.error_type.clone(),
            )
        })
        .collect();
    (request.attempt_source, span_id[7], attempts)
}

fn shapes(spans: &[Span]) -> Vec<Shape> {
    infer_spans(spans).iter().map(shape).collect()
}

fn err(text: &str) -> Option<String> {
    Some(text.to_owned())
}

use AttemptSource::{HttpRetry, SiblingRetry, Single};

#[test]
fn http_retry_each_http_try_under_a_genai_span_is_an_attempt_of_it() {
    let spans = [
        genai(1, Some(APP), 10),
        http(11, 1, 10 * SECOND + 1, vec![status(429)]),
        http(12, 1, 10 * SECOND + 2, vec![status(500)]),
        http(13, 1, 10 * SECOND + 3, vec![status(200)]),
    ];
    assert_eq!(
        shapes(&spans),
        [(
            HttpRetry,
            1,
            vec![(11, 0, err("429")), (12, 1, err("500")), (13, 2, None)]
        )]
    );
}

#[test]
fn http_retry_attempts_share_the_request_and_only_the_last_has_the_outcome() {
    let spans = [
        with(
            genai(1, Some(APP), 10),
            attr::OUTPUT_REACHED_CLIENT,
            Value::BoolValue(true),
        ),
        http(11, 1, 10 * SECOND + 1, vec![status(429)]),
        http(12, 1, 10 * SECOND + 5, vec![status(200)]),
    ];
    let requests = infer_spans(&spans);
    let [request] = requests.as_slice() else {
        panic!("one request: {requests:?}");
    };
    assert_eq!(request.key.request_id(), "0000000000000001");
    let [first, last] = request.attempts.as_slice() else {
        panic!("two attempts");
    };
    for a in [first, last] {
        assert_eq!(a.request_model.as_deref(), Some("glm-5"));
        assert_eq!(a.provider.as_deref(), Some("openai"));
        assert_eq!(
            (a.input_tokens, a.cached_input_tokens, a.output_cap),
            (Count::Value(1000), Count::Value(200), Count::Value(800))
        );
        assert_eq!(a.parent_span_id, Some([0, 0, 0, 0, 0, 0, 0, 1]));
    }
    assert_eq!(
        (first.output_tokens, first.response_model.as_deref()),
        (Count::Missing, None)
    );
    assert_eq!(first.output_reached_client, None);
    assert_eq!(
        (last.output_tokens, last.response_model.as_deref()),
        (Count::Value(50), Some("glm-5"))
    );
    assert_eq!(last.output_reached_client, Some(true));
    // Times are the tries' own.
    assert_eq!(
        (first.start_time_unix_nano, first.end_time_unix_nano),
        (10 * SECOND + 1, 10 * SECOND + 11)
    );
    assert_eq!(last.start_time_unix_nano, 10 * SECOND + 5);
}

#[test]
fn http_retry_needs_two_tries_one_try_leaves_the_genai_span_single() {
    let spans = [
        genai(1, Some(APP), 10),
        http(11, 1, 10 * SECOND + 1, vec![status(200)]),
    ];
    assert_eq!(shapes(&spans), [(Single, 1, vec![(1, 0, None)])]);
    let requests = infer_spans(&spans);
    assert_eq!(requests[0].attempts[0].output_tokens, Count::Value(50));
}

#[test]
fn http_retry_indexes_by_resend_count_when_distinct() {
    // The first try omits the count (it means 0); the clock disagrees with the counts.
    let spans = [
        genai(1, None, 10),
        http(11, 1, 10 * SECOND + 9, vec![status(429)]),
        http(12, 1, 10 * SECOND + 5, vec![resend(1), status(500)]),
        http(13, 1, 10 * SECOND + 1, vec![resend(2), status(200)]),
    ];
    assert_eq!(
        shapes(&spans),
        [(
            HttpRetry,
            1,
            vec![(11, 0, err("429")), (12, 1, err("500")), (13, 2, None)]
        )]
    );
    // The last attempt by index carries the outcome.
    assert_eq!(
        infer_spans(&spans)[0].attempts[2].output_tokens,
        Count::Value(50)
    );
}

#[test]
fn http_retry_duplicate_resend_counts_fall_back_to_time_then_span_id() {
    let spans = [
        genai(1, None, 10),
        http(13, 1, 10 * SECOND + 1, vec![resend(1)]),
        http(12, 1, 10 * SECOND + 1, vec![resend(1)]),
        http(11, 1, 10 * SECOND + 5, vec![]),
    ];
    assert_eq!(
        shapes(&spans),
        [(
            HttpRetry,
            1,
            vec![(12, 0, None), (13, 1, None), (11, 2, None)]
        )]
    );
}

#[test]
fn http_retry_error_type_is_error_type_then_status_code_from_400_then_other() {
    let spans = [
        genai(1, None, 10),
        http(
            11,
            1,
            10 * SECOND + 1,
            vec![(attr::ERROR_TYPE, s("timeout")), status(504)],
        ),
        http(12, 1, 10 * SECOND + 2, vec![status(503)]),
        errored(http(13, 1, 10 * SECOND + 3, vec![])),
        http(
            14,
            1,
            10 * SECOND + 4,
            vec![(attr::LEGACY_HTTP_STATUS_CODE, i(429))],
        ),
        http(15, 1, 10 * SECOND + 5, vec![status(200)]),
    ];
    assert_eq!(
        shapes(&spans),
        [(
            HttpRetry,
            1,
            vec![
                (11, 0, err("timeout")),
                (12, 1, err("503")),
                (13, 2, err("_OTHER")),
                (14, 3, err("429")),
                (15, 4, None),
            ]
        )]
    );
}

#[test]
fn http_tries_under_other_spans_are_not_attempts() {
    let spans = [
        genai(1, None, 10),
        http(11, 2, 10 * SECOND + 1, vec![]),
        http(12, 2, 10 * SECOND + 2, vec![]),
    ];
    assert_eq!(shapes(&spans), [(Single, 1, vec![(1, 0, None)])]);
}

#[test]
fn sibling_retry_failed_calls_under_one_parent_form_a_run() {
    let spans = [
        errored(genai(1, Some(APP), 10)),
        with(genai(2, Some(APP), 11), attr::ERROR_TYPE, s("rate_limited")),
        genai(3, Some(APP), 12),
    ];
    assert_eq!(
        shapes(&spans),
        [(
            SiblingRetry,
            1,
            vec![
                (1, 0, err("_OTHER")),
                (2, 1, err("rate_limited")),
                (3, 2, None)
            ]
        )]
    );
}

#[test]
fn sibling_retry_a_success_ends_the_run_and_the_next_call_starts_afresh() {
    let spans = [
        errored(genai(1, Some(APP), 10)),
        genai(2, Some(APP), 11),
        genai(3, Some(APP), 12),
        errored(genai(4, Some(APP), 13)),
        genai(5, Some(APP), 14),
        errored(genai(6, Some(APP), 15)),
    ];
    assert_eq!(
        shapes(&spans),
        [
            (SiblingRetry, 1, vec![(1, 0, err("_OTHER")), (2, 1, None)]),
            (Single, 3, vec![(3, 0, None)]),
            (SiblingRetry, 4, vec![(4, 0, err("_OTHER")), (5, 1, None)]),
            // A failure nobody retried is a request of one attempt.
            (Single, 6, vec![(6, 0, err("_OTHER"))]),
        ]
    );
}

#[test]
fn sibling_retry_agent_loop_of_successes_stays_single() {
    let spans: Vec<Span> = (1..=4).map(|n| genai(n, Some(APP), u64::from(n))).collect();
    let expected: Vec<Shape> = (1..=4).map(|n| (Single, n, vec![(n, 0, None)])).collect();
    assert_eq!(shapes(&spans), expected);
}

#[test]
fn sibling_retry_root_spans_never_form_runs() {
    let spans = [errored(genai(1, None, 10)), genai(2, None, 11)];
    assert_eq!(
        shapes(&spans),
        [
            (Single, 1, vec![(1, 0, err("_OTHER"))]),
            (Single, 2, vec![(2, 0, None)]),
        ]
    );
}

#[test]
fn sibling_retry_needs_the_same_parent_and_trace() {
    let mut other_trace = genai(3, Some(APP), 11);
    other_trace.trace_id = vec![8; 16];
    let spans = [
        errored(genai(1, Some(APP), 10)),
        genai(2, Some(APP + 1), 11),
        other_trace,
    ];
    let got: Vec<AttemptSource> = infer_spans(&spans)
        .iter()
        .map(|r| r.attempt_source)
        .collect();
    assert_eq!(got, [Single, Single, Single]);
}

#[test]
fn sibling_retry_orders_by_start_time_then_span_id_whatever_the_arrival_order() {
    let spans = [
        genai(3, Some(APP), 11),
        errored(genai(2, Some(APP), 10)),
        errored(genai(1, Some(APP), 10)),
    ];
    let expected = [(
        SiblingRetry,
        1,
        vec![(1, 0, err("_OTHER")), (2, 1, err("_OTHER")), (3, 2, None)],
    )];
    assert_eq!(shapes(&spans), expected);
    let mut reversed = spans.to_vec();
    reversed.reverse();
    assert_eq!(shapes(&reversed), expected);
}

#[test]
fn a_failed_call_without_usage_borrows_the_input_counts_of_the_next_attempt() {
    let failed = errored(genai(1, Some(APP), 10));
    let failed = Span {
        attributes: vec![
            kv(attr::REQUEST_MODEL, s("deepseek-v4-pro")),
            kv(attr::REQUEST_MAX_TOKENS, i(800)),
        ],
        ..failed
    };
    let requests = infer_spans(&[failed, genai(2, Some(APP), 11)]);
    let attempts = &requests[0].attempts;
    assert_eq!(
        attempts
            .iter()
            .map(|a| (
                a.request_model.as_deref(),
                a.input_tokens,
                a.cached_input_tokens,
                a.output_tokens,
                a.usage_origin
            ))
            .collect::<Vec<_>>(),
        [
            (
                Some("deepseek-v4-pro"),
                Count::Value(1000),
                Count::Value(200),
                Count::Missing,
                UsageOrigin::Borrowed
            ),
            (
                Some("glm-5"),
                Count::Value(1000),
                Count::Value(200),
                Count::Value(50),
                UsageOrigin::Span
            ),
        ]
    );
}

#[test]
fn sibling_retry_a_sibling_with_http_tries_contributes_them_as_consecutive_attempts() {
    let spans = [
        errored(genai(1, Some(APP), 10)),
        http(11, 1, 10 * SECOND + 1, vec![status(500)]),
        http(12, 1, 10 * SECOND + 2, vec![status(500)]),
        genai(2, Some(APP), 11),
        http(21, 2, 11 * SECOND + 1, vec![status(200)]),
    ];
    assert_eq!(
        shapes(&spans),
        [(
            SiblingRetry,
            1,
            vec![(11, 0, err("500")), (12, 1, err("500")), (2, 2, None)]
        )]
    );
}

#[test]
fn inferred_rows_carry_the_request_id_the_try_span_ids_and_null_output_on_earlier_tries() {
    let spans = [
        genai(1, None, 10),
        http(11, 1, 10 * SECOND + 1, vec![status(429)]),
        http(12, 1, 10 * SECOND + 2, vec![status(200)]),
    ];
    let requests = infer_spans(&spans);
    let rows = crate::rules::evaluate(
        &requests[0],
        &crate::pricing::PricingBook::default(),
        &crate::rules::RulesConfig::default(),
    );
    let got: Vec<_> = rows
        .iter()
        .map(|r| {
            (
                r.request_id.as_str(),
                r.span_id.as_str(),
                r.attempt_index,
                r.output_tokens,
                r.error_type.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("0000000000000001", "000000000000000b", 0, None, Some("429")),
            (
                "0000000000000001",
                "000000000000000c",
                1,
                Some(50),
                None::<&str>
            ),
        ]
    );
}
