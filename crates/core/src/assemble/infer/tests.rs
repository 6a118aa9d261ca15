use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind as OtlpSpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::{Span, Status};

use super::*;
use crate::contract::{attr, kv, SpanKind, TraceId, UsageOrigin};

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
        let facts = SpanFacts::from_span(span, &"svc".into());
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
                a.error_type.as_deref().map(str::to_owned),
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

use AttemptSource::{HttpRetry, ResendCount, SiblingRetry, Single};

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
    assert_eq!(&*request.key.request_id(), "0000000000000001");
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
                &*r.request_id,
                u64::from_be_bytes(r.span_id),
                r.attempt_index,
                r.output_tokens,
                r.error_type.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("0000000000000001", 0xb, 0, None, Some("429")),
            ("0000000000000001", 0xc, 1, Some(50), None::<&str>),
        ]
    );
}

// Helpers for the step-by-step tests of SPEC §2 "Attempts inferred from plain instrumentation".

/// A span of the application that is neither GenAI nor HTTP (an agent step, a retry loop).
fn plain(n: u8, parent: Option<u8>, start: u64) -> Span {
    Span {
        trace_id: TRACE.to_vec(),
        span_id: id(n),
        parent_span_id: parent.map(id).unwrap_or_default(),
        kind: OtlpSpanKind::Internal as i32,
        start_time_unix_nano: start * SECOND,
        end_time_unix_nano: (start + 1) * SECOND,
        ..Default::default()
    }
}

/// The span in the window [`start`, `end`], both in nanoseconds.
fn window(mut span: Span, start: u64, end: u64) -> Span {
    span.start_time_unix_nano = start;
    span.end_time_unix_nano = end;
    span
}

/// The span ending at second `end` instead of one second after its start.
fn until(mut span: Span, end: u64) -> Span {
    span.end_time_unix_nano = end * SECOND;
    span
}

fn without(mut span: Span, keys: &[&str]) -> Span {
    span.attributes.retain(|a| !keys.contains(&a.key.as_str()));
    span
}

/// A GenAI span that reports no usage (a failed call seldom does).
fn no_usage(span: Span) -> Span {
    without(
        span,
        &[
            attr::INPUT_TOKENS,
            attr::CACHE_READ_INPUT_TOKENS,
            attr::OUTPUT_TOKENS,
        ],
    )
}

fn usage(span: Span, input: i64, cached: i64, cache_write: i64) -> Span {
    let span = with(span, attr::INPUT_TOKENS, i(input));
    let span = with(span, attr::CACHE_READ_INPUT_TOKENS, i(cached));
    with(span, attr::CACHE_CREATION_INPUT_TOKENS, i(cache_write))
}

fn model(span: Span, name: &str) -> Span {
    with(span, attr::REQUEST_MODEL, s(name))
}

fn operation(span: Span, name: &str) -> Span {
    with(span, attr::OPERATION_NAME, s(name))
}

fn role(span: Span, name: &str) -> Span {
    with(span, attr::SPAN_ROLE, s(name))
}

/// A Vercel AI SDK `ai.generateText` call span from second `start` to second `end`.
fn vercel(n: u8, parent: Option<u8>, start: u64, end: u64) -> Span {
    until(
        with(
            plain(n, parent, start),
            attr::AI_OPERATION_ID,
            s("ai.generateText"),
        ),
        end,
    )
}

/// One try of a Vercel AI SDK call: its `ai.generateText.doGenerate` model span.
fn do_generate(n: u8, parent: u8, start: u64) -> Span {
    with(
        genai(n, Some(parent), start),
        attr::AI_OPERATION_ID,
        s("ai.generateText.doGenerate"),
    )
}

/// A try beside a call (the call's sibling) at `start` nanoseconds.
fn beside(n: u8, parent: u8, start: u64, attributes: Vec<(&str, Value)>) -> Span {
    http(n, parent, start, attributes)
}

fn read(span: &Span) -> SpanFacts {
    SpanFacts::from_span(span, &"svc".into())
}

/// The span as an instrumentation scope of that name emits it.
fn scoped(span: &Span, scope: &str) -> SpanFacts {
    let mut facts = read(span);
    facts.scope = Some(scope.into());
    facts
}

fn infer_facts(facts: &[SpanFacts], earlier: Option<&EarlierTrace>) -> Inferred {
    let mut spans = TraceSpans::default();
    for f in facts {
        spans.push(f.clone());
    }
    infer_trace(TRACE, spans, earlier)
}

fn shapes_of(inferred: &Inferred) -> Vec<Shape> {
    inferred.requests.iter().map(shape).collect()
}

/// What the collector remembers of a trace once it inferred `facts`.
fn earlier_of(facts: &[SpanFacts]) -> EarlierTrace {
    EarlierTrace {
        links: facts
            .iter()
            .map(|f| (f.span_id, (Link::of(f), f.kind == SpanKind::SingleAttempt)))
            .collect(),
        calls: infer_facts(facts, None).calls,
    }
}

/// The attempts of the one request the spans make.
fn attempts_of(spans: &[Span]) -> Vec<SpanFacts> {
    let requests = infer_spans(spans);
    let [request] = requests.as_slice() else {
        panic!("one request: {requests:?}");
    };
    request.attempts.clone()
}

fn models_of(attempts: &[SpanFacts]) -> Vec<(Option<&str>, Option<&str>, Count)> {
    attempts
        .iter()
        .map(|a| {
            (
                a.request_model.as_deref(),
                a.provider.as_deref(),
                a.output_cap,
            )
        })
        .collect()
}

fn usages_of(attempts: &[SpanFacts]) -> Vec<(Count, Count, Count, UsageOrigin)> {
    attempts
        .iter()
        .map(|a| {
            (
                a.input_tokens,
                a.cached_input_tokens,
                a.cache_write_input_tokens,
                a.usage_origin,
            )
        })
        .collect()
}

fn outcomes_of(attempts: &[SpanFacts]) -> Vec<(Count, Option<&str>)> {
    attempts
        .iter()
        .map(|a| (a.output_tokens, a.response_model.as_deref()))
        .collect()
}

fn single(n: u8) -> Shape {
    (Single, n, vec![(n, 0, None)])
}

const MISSING: Count = Count::Missing;

fn n(v: i64) -> Count {
    Count::Value(v)
}

// Scope.

#[test]
fn scope_a_model_span_below_a_logical_request_or_attempt_span_makes_no_row() {
    let spans = [
        role(plain(5, Some(APP), 10), attr::ROLE_LOGICAL_REQUEST),
        genai(1, Some(5), 10),
        role(plain(6, Some(5), 12), attr::ROLE_ATTEMPT),
        plain(7, Some(6), 12),
        genai(2, Some(7), 12),
    ];
    assert_eq!(shapes(&spans), []);
}

#[test]
fn scope_a_model_span_with_a_declared_span_below_it_is_no_call() {
    // A framework's GenAI spans around an SDK that declares its attempts.
    let spans = [
        genai(1, Some(APP), 10),
        genai(2, Some(1), 10),
        with(genai(3, Some(2), 10), attr::ATTEMPT_INDEX, i(0)),
    ];
    assert_eq!(shapes(&spans), []);
}

#[test]
fn scope_an_http_span_below_a_declared_span_is_no_try() {
    let spans = [
        role(plain(5, Some(APP), 10), attr::ROLE_LOGICAL_REQUEST),
        genai(1, Some(5), 10),
        http(11, 1, 10 * SECOND + 1, vec![status(429)]),
        http(12, 1, 10 * SECOND + 2, vec![status(200)]),
        beside(13, 5, 10 * SECOND + 3, vec![status(500)]),
        // The model span beside them is in scope; the tries under the declared span are not its.
        genai(2, Some(APP), 10),
        beside(14, APP, 10 * SECOND + 4, vec![status(500)]),
    ];
    assert_eq!(shapes(&spans), [single(2)]);
}

#[test]
fn scope_genai_spans_of_other_operations_make_no_row_and_never_nest() {
    let spans = [
        // An agent around a chat: the chat is a call of its own.
        operation(until(genai(5, Some(APP), 10), 20), "invoke_agent"),
        genai(1, Some(5), 11),
        // Embeddings are no call: a failed one starts no run.
        errored(operation(genai(6, Some(APP), 21), "embeddings")),
        genai(2, Some(APP), 22),
    ];
    assert_eq!(shapes(&spans), [single(1), single(2)]);
}

#[test]
fn scope_model_spans_have_no_operation_or_chat_text_completion_or_generate_content() {
    let spans = [
        genai(1, Some(APP), 10),
        operation(genai(2, Some(APP), 11), "chat"),
        operation(genai(3, Some(APP), 12), "text_completion"),
        operation(genai(4, Some(APP), 13), "generate_content"),
    ];
    assert_eq!(shapes(&spans), [single(1), single(2), single(3), single(4)]);
}

#[test]
fn an_http_try_is_a_client_span_with_an_http_method_that_is_no_genai_span() {
    let legacy = with(
        without(
            http(11, 1, 10 * SECOND + 1, vec![status(500)]),
            &[attr::HTTP_REQUEST_METHOD],
        ),
        attr::LEGACY_HTTP_METHOD,
        s("POST"),
    );
    let internal = Span {
        kind: OtlpSpanKind::Internal as i32,
        ..http(12, 1, 10 * SECOND + 2, vec![])
    };
    let spans = [
        genai(1, Some(APP), 10),
        legacy,
        internal,
        http(13, 1, 10 * SECOND + 3, vec![]),
    ];
    assert_eq!(
        shapes(&spans),
        [(HttpRetry, 1, vec![(11, 0, err("500")), (13, 1, None)])]
    );
}

// Step 1: nests.

#[test]
fn nest_inner_model_spans_make_no_row_the_outer_span_makes_the_call_row() {
    let spans = [
        genai(1, Some(APP), 10),
        genai(2, Some(1), 10),
        genai(3, Some(2), 10),
    ];
    assert_eq!(shapes(&spans), [single(1)]);
    let inferred = infer_facts(&spans.iter().map(read).collect::<Vec<_>>(), None);
    assert_eq!(inferred.duplicates, 0, "inner spans are no duplicates");
}

#[test]
fn nest_reaches_through_an_intermediate_non_model_span() {
    let spans = [
        genai(1, Some(APP), 10),
        plain(5, Some(1), 10),
        errored(genai(2, Some(5), 10)),
    ];
    assert_eq!(shapes(&spans), [single(1)]);
}

#[test]
fn nest_each_try_takes_the_model_of_the_innermost_span_whose_window_contains_its_start() {
    // pydantic-ai: `chat glm-5` around `model request attempt deepseek`, the HTTP tries being
    // children of the chat span; two start inside the attempt span's window, one after it.
    let chat = until(genai(1, Some(APP), 10), 20);
    let attempt = window(
        with(
            with(
                model(genai(2, Some(1), 10), "deepseek-v4-pro"),
                attr::PROVIDER_NAME,
                s("deepseek"),
            ),
            attr::REQUEST_MAX_TOKENS,
            i(400),
        ),
        10 * SECOND + 100,
        10 * SECOND + 1000,
    );
    let spans = [
        chat,
        attempt,
        http(11, 1, 10 * SECOND + 200, vec![status(500)]),
        http(12, 1, 10 * SECOND + 1000, vec![status(500)]),
        http(13, 1, 10 * SECOND + 2000, vec![status(200)]),
    ];
    let attempts = attempts_of(&spans);
    assert_eq!(
        models_of(&attempts),
        [
            (Some("deepseek-v4-pro"), Some("deepseek"), n(400)),
            (Some("deepseek-v4-pro"), Some("deepseek"), n(400)),
            (Some("glm-5"), Some("openai"), n(800)),
        ]
    );
}

#[test]
fn nest_a_try_takes_the_cap_of_its_span_else_of_the_nearest_enclosing_nest_span_stating_one() {
    let spans = [
        until(genai(1, Some(APP), 10), 20),
        with(
            until(genai(2, Some(1), 10), 20),
            attr::REQUEST_MAX_TOKENS,
            i(600),
        ),
        without(
            until(genai(3, Some(2), 10), 20),
            &[attr::REQUEST_MAX_TOKENS],
        ),
        http(11, 1, 10 * SECOND + 1, vec![status(500)]),
        http(12, 1, 10 * SECOND + 2, vec![status(200)]),
    ];
    let caps: Vec<Count> = attempts_of(&spans).iter().map(|a| a.output_cap).collect();
    assert_eq!(caps, [n(600), n(600)]);
}

#[test]
fn nest_usage_comes_from_the_outermost_nest_span_reporting_input_to_every_try() {
    let spans = [
        no_usage(until(genai(1, Some(APP), 10), 20)),
        usage(until(genai(2, Some(1), 10), 20), 700, 100, 50),
        usage(until(genai(3, Some(2), 10), 20), 999, 0, 0),
        http(11, 1, 10 * SECOND + 1, vec![status(500)]),
        http(12, 1, 10 * SECOND + 2, vec![status(200)]),
    ];
    let call = (n(700), n(100), n(50), UsageOrigin::Call);
    assert_eq!(usages_of(&attempts_of(&spans)), [call, call]);
}

#[test]
fn nest_output_tokens_and_response_model_go_to_the_last_attempt_from_the_outermost_span_stating_them(
) {
    let spans = [
        without(
            until(genai(1, Some(APP), 10), 20),
            &[attr::OUTPUT_TOKENS, attr::RESPONSE_MODEL],
        ),
        with(
            with(until(genai(2, Some(1), 10), 20), attr::OUTPUT_TOKENS, i(42)),
            attr::RESPONSE_MODEL,
            s("glm-5-0414"),
        ),
        with(
            with(until(genai(3, Some(2), 10), 20), attr::OUTPUT_TOKENS, i(99)),
            attr::RESPONSE_MODEL,
            s("glm-5-inner"),
        ),
        http(11, 1, 10 * SECOND + 1, vec![status(500)]),
        http(12, 1, 10 * SECOND + 2, vec![status(500)]),
        http(13, 1, 10 * SECOND + 3, vec![status(200)]),
    ];
    assert_eq!(
        outcomes_of(&attempts_of(&spans)),
        [
            (MISSING, None),
            (MISSING, None),
            (n(42), Some("glm-5-0414"))
        ]
    );
}

#[test]
fn nest_one_attempt_call_takes_the_deepest_cap_and_usage_source_call_from_an_inner_count() {
    let spans = [
        no_usage(genai(1, Some(APP), 10)),
        with(
            model(genai(2, Some(1), 10), "deepseek-v4-pro"),
            attr::REQUEST_MAX_TOKENS,
            i(300),
        ),
        without(genai(3, Some(2), 10), &[attr::REQUEST_MAX_TOKENS]),
    ];
    let attempts = attempts_of(&spans);
    assert_eq!(
        models_of(&attempts),
        [(Some("glm-5"), Some("openai"), n(300))]
    );
    assert_eq!(
        usages_of(&attempts),
        [(n(1000), n(200), MISSING, UsageOrigin::Call)]
    );
    // When the outer span reports the count itself, it is the span's.
    let own = attempts_of(&[genai(1, Some(APP), 10), genai(2, Some(1), 10)]);
    assert_eq!(usages_of(&own)[0].3, UsageOrigin::Span);
}

#[test]
fn nest_innermost_among_spans_at_one_depth_is_the_latest_start_then_the_higher_span_id() {
    let inner = |n: u8, name: &str, start: u64| {
        window(
            model(genai(n, Some(1), 10), name),
            start,
            10 * SECOND + 1000,
        )
    };
    let spans = [
        until(genai(1, Some(APP), 10), 20),
        inner(2, "early", 10 * SECOND),
        inner(3, "late", 10 * SECOND + 50),
        inner(4, "late-lower-id", 10 * SECOND + 60),
        inner(5, "late-higher-id", 10 * SECOND + 60),
        http(11, 1, 10 * SECOND + 55, vec![status(500)]),
        http(12, 1, 10 * SECOND + 100, vec![]),
    ];
    let attempts = attempts_of(&spans);
    let models: Vec<Option<&str>> = attempts
        .iter()
        .map(|a| a.request_model.as_deref())
        .collect();
    assert_eq!(models, [Some("late"), Some("late-higher-id")]);
}

#[test]
fn nest_outermost_among_spans_at_one_depth_is_the_earliest_start_then_the_lower_span_id() {
    let spans = [
        no_usage(until(genai(1, Some(APP), 10), 20)),
        usage(until(genai(3, Some(1), 11), 20), 300, 0, 0),
        usage(until(genai(4, Some(1), 10), 20), 400, 0, 0),
        usage(until(genai(2, Some(1), 10), 20), 200, 0, 0),
        http(11, 1, 10 * SECOND + 1, vec![status(500)]),
        http(12, 1, 10 * SECOND + 2, vec![]),
    ];
    let inputs: Vec<Count> = attempts_of(&spans).iter().map(|a| a.input_tokens).collect();
    assert_eq!(inputs, [n(200), n(200)]);
}

// Step 2: tries of a call.

#[test]
fn tries_2a_are_the_http_children_of_any_span_of_the_nest() {
    let spans = [
        until(genai(1, Some(APP), 10), 20),
        until(genai(2, Some(1), 10), 20),
        http(11, 1, 10 * SECOND + 1, vec![status(500)]),
        http(12, 2, 10 * SECOND + 2, vec![status(200)]),
    ];
    assert_eq!(
        shapes(&spans),
        [(HttpRetry, 1, vec![(11, 0, err("500")), (12, 1, None)])]
    );
}

#[test]
fn tries_2b_beside_share_the_outer_span_parent_and_start_inside_its_window() {
    let spans = [
        genai(1, Some(APP), 10),
        beside(11, APP, 10 * SECOND, vec![status(529)]),
        beside(12, APP, 11 * SECOND, vec![status(200)]),
        // After the window, and under another parent.
        beside(13, APP, 11 * SECOND + 1, vec![]),
        beside(14, APP + 1, 10 * SECOND + 5, vec![]),
    ];
    assert_eq!(
        shapes(&spans),
        [(HttpRetry, 1, vec![(11, 0, err("529")), (12, 1, None)])]
    );
}

#[test]
fn tries_2b_with_server_address_on_the_outer_span_match_the_try_host() {
    let host = |n: u8, key: &'static str, value: &str| {
        beside(n, APP, 10 * SECOND + u64::from(n), vec![(key, s(value))])
    };
    let spans = [
        with(genai(1, Some(APP), 10), attr::SERVER_ADDRESS, s("api.z.ai")),
        host(11, attr::SERVER_ADDRESS, "api.z.ai"),
        host(12, attr::URL_FULL, "https://api.z.ai/v1/chat/completions"),
        host(13, attr::LEGACY_HTTP_URL, "https://api.z.ai:443/v1/chat"),
        host(14, attr::SERVER_ADDRESS, "api.openai.com"),
        // A try with neither does not match.
        beside(15, APP, 10 * SECOND + 15, vec![]),
    ];
    assert_eq!(
        shapes(&spans),
        [(
            HttpRetry,
            1,
            vec![(11, 0, None), (12, 1, None), (13, 2, None)]
        )]
    );
}

#[test]
fn tries_2b_without_server_address_on_the_outer_span_any_host_matches() {
    let spans = [
        genai(1, Some(APP), 10),
        beside(
            11,
            APP,
            10 * SECOND + 1,
            vec![(attr::SERVER_ADDRESS, s("api.z.ai"))],
        ),
        beside(
            12,
            APP,
            10 * SECOND + 2,
            vec![(attr::URL_FULL, s("https://api.openai.com/v1"))],
        ),
        beside(13, APP, 10 * SECOND + 3, vec![]),
    ];
    assert_eq!(
        shapes(&spans),
        [(
            HttpRetry,
            1,
            vec![(11, 0, None), (12, 1, None), (13, 2, None)]
        )]
    );
}

#[test]
fn tries_2b_a_try_qualifying_for_two_calls_goes_to_the_one_that_started_last() {
    let spans = [
        until(genai(1, Some(APP), 10), 20),
        until(genai(2, Some(APP), 12), 20),
        beside(11, APP, 11 * SECOND, vec![]),
        beside(12, APP, 13 * SECOND, vec![status(500)]),
        beside(13, APP, 14 * SECOND, vec![]),
    ];
    assert_eq!(
        shapes(&spans),
        [
            single(1),
            (HttpRetry, 2, vec![(12, 0, err("500")), (13, 1, None)])
        ]
    );
}

#[test]
fn tries_2b_a_root_call_has_no_tries_beside_it() {
    let root_try = |n: u8, start: u64| {
        let mut span = http(n, 0, start, vec![]);
        span.parent_span_id = Vec::new();
        span
    };
    let spans = [
        genai(1, None, 10),
        root_try(11, 10 * SECOND + 1),
        root_try(12, 10 * SECOND + 2),
    ];
    assert_eq!(shapes(&spans), [single(1)]);
}

#[test]
fn tries_2a_wins_when_it_finds_two_or_more() {
    let spans = [
        genai(1, Some(APP), 10),
        http(11, 1, 10 * SECOND + 1, vec![status(500)]),
        http(12, 1, 10 * SECOND + 2, vec![]),
        beside(21, APP, 10 * SECOND + 3, vec![]),
        beside(22, APP, 10 * SECOND + 4, vec![]),
        beside(23, APP, 10 * SECOND + 5, vec![]),
    ];
    assert_eq!(
        shapes(&spans),
        [(HttpRetry, 1, vec![(11, 0, err("500")), (12, 1, None)])]
    );
}

#[test]
fn tries_2b_only_when_2a_found_fewer_than_two() {
    let spans = [
        genai(1, Some(APP), 10),
        http(11, 1, 10 * SECOND + 1, vec![]),
        beside(21, APP, 10 * SECOND + 3, vec![status(500)]),
        beside(22, APP, 10 * SECOND + 4, vec![]),
    ];
    assert_eq!(
        shapes(&spans),
        [(HttpRetry, 1, vec![(21, 0, err("500")), (22, 1, None)])]
    );
}

#[test]
fn tries_one_try_found_by_2a_or_2b_is_not_an_attempt() {
    let spans = [
        genai(1, Some(APP), 10),
        http(11, 1, 10 * SECOND + 1, vec![status(500)]),
        beside(21, APP, 10 * SECOND + 3, vec![status(500)]),
    ];
    assert_eq!(shapes(&spans), [single(1)]);
}

#[test]
fn tries_2c_resend_count_n_makes_n_plus_one_attempts_the_first_n_without_a_span() {
    let call = with(genai(1, Some(APP), 10), attr::HTTP_RESEND_COUNT, i(2));
    let spans = [with(call, attr::ERROR_TYPE, s("overloaded_error"))];
    assert_eq!(
        shapes(&spans),
        [(
            ResendCount,
            1,
            vec![
                (1, 0, err("_OTHER")),
                (1, 1, err("_OTHER")),
                (1, 2, err("overloaded_error"))
            ]
        )]
    );
    let attempts = attempts_of(&spans);
    let times: Vec<(u64, u64)> = attempts
        .iter()
        .map(|a| (a.start_time_unix_nano, a.end_time_unix_nano))
        .collect();
    assert_eq!(
        times,
        [
            (10 * SECOND, 10 * SECOND),
            (10 * SECOND, 10 * SECOND),
            (10 * SECOND, 11 * SECOND)
        ]
    );
    let call_usage = (n(1000), n(200), MISSING, UsageOrigin::Call);
    assert_eq!(usages_of(&attempts), [call_usage; 3]);
    assert_eq!(
        outcomes_of(&attempts),
        [(MISSING, None), (MISSING, None), (n(50), Some("glm-5"))]
    );
}

#[test]
fn tries_2c_reads_the_outermost_nest_span_with_a_resend_count_and_the_outer_span_model() {
    let spans = [
        genai(1, Some(APP), 10),
        with(
            model(genai(2, Some(1), 10), "deepseek-v4-pro"),
            attr::HTTP_RESEND_COUNT,
            i(1),
        ),
        with(genai(3, Some(2), 10), attr::HTTP_RESEND_COUNT, i(4)),
    ];
    assert_eq!(
        shapes(&spans),
        [(ResendCount, 1, vec![(1, 0, err("_OTHER")), (1, 1, None)])]
    );
    let attempts = attempts_of(&spans);
    let models: Vec<Option<&str>> = attempts
        .iter()
        .map(|a| a.request_model.as_deref())
        .collect();
    assert_eq!(models, [Some("glm-5"), Some("glm-5")]);
}

#[test]
fn tries_2c_only_when_2a_and_2b_find_fewer_than_two() {
    let spans = [
        with(genai(1, Some(APP), 10), attr::HTTP_RESEND_COUNT, i(3)),
        http(11, 1, 10 * SECOND + 1, vec![status(500)]),
        http(12, 1, 10 * SECOND + 2, vec![]),
    ];
    assert_eq!(
        shapes(&spans),
        [(HttpRetry, 1, vec![(11, 0, err("500")), (12, 1, None)])]
    );
}

#[test]
fn error_type_of_a_one_attempt_call_follows_the_try_rule() {
    let spans = [
        with(
            with(genai(1, None, 10), attr::ERROR_TYPE, s("timeout")),
            attr::HTTP_RESPONSE_STATUS_CODE,
            i(504),
        ),
        with(genai(2, None, 11), attr::HTTP_RESPONSE_STATUS_CODE, i(429)),
        errored(genai(3, None, 12)),
        with(genai(4, None, 13), attr::HTTP_RESPONSE_STATUS_CODE, i(200)),
    ];
    assert_eq!(
        shapes(&spans),
        [
            (Single, 1, vec![(1, 0, err("timeout"))]),
            (Single, 2, vec![(2, 0, err("429"))]),
            (Single, 3, vec![(3, 0, err("_OTHER"))]),
            single(4),
        ]
    );
}

#[test]
fn tries_2c_needs_a_resend_count_of_at_least_one() {
    let spans = [with(genai(1, Some(APP), 10), attr::HTTP_RESEND_COUNT, i(0))];
    assert_eq!(shapes(&spans), [single(1)]);
}

#[test]
fn tries_2b_a_try_of_two_calls_starting_together_goes_to_the_higher_span_id() {
    let spans = [
        model(genai(1, Some(APP), 10), "glm-4.6"),
        genai(2, Some(APP), 10),
        beside(11, APP, 10 * SECOND + 1, vec![]),
        beside(12, APP, 10 * SECOND + 2, vec![]),
    ];
    assert_eq!(
        shapes(&spans),
        [
            single(1),
            (HttpRetry, 2, vec![(11, 0, None), (12, 1, None)])
        ]
    );
}

#[test]
fn tries_2c_when_2a_and_2b_found_one_try_each() {
    let spans = [
        with(genai(1, Some(APP), 10), attr::HTTP_RESEND_COUNT, i(1)),
        http(11, 1, 10 * SECOND + 1, vec![]),
        beside(21, APP, 10 * SECOND + 2, vec![]),
    ];
    assert_eq!(
        shapes(&spans),
        [(ResendCount, 1, vec![(1, 0, err("_OTHER")), (1, 1, None)])]
    );
}

// Step 3: duplicates.

/// The Anthropic SDK's own tracing and OpenLLMetry, both around one SDK call.
const SDK: &str = "anthropic";
const OPENLLMETRY: &str = "opentelemetry.instrumentation.anthropic";

#[test]
fn duplicates_two_instrumentations_of_one_call_make_one_row() {
    let facts = [
        scoped(&genai(2, Some(APP), 10), OPENLLMETRY),
        scoped(
            &window(genai(1, Some(APP), 10), 10 * SECOND + 5, 11 * SECOND),
            SDK,
        ),
    ];
    let inferred = infer_facts(&facts, None);
    assert_eq!(shapes_of(&inferred), [single(2)]);
    assert_eq!(inferred.duplicates, 1);
}

#[test]
fn duplicates_keep_the_call_with_two_or_more_tries() {
    let facts = [
        scoped(&genai(1, Some(APP), 10), SDK),
        scoped(&genai(2, Some(APP), 10), OPENLLMETRY),
        read(&http(11, 2, 10 * SECOND + 1, vec![status(529)])),
        read(&http(12, 2, 10 * SECOND + 2, vec![])),
    ];
    let inferred = infer_facts(&facts, None);
    assert_eq!(
        shapes_of(&inferred),
        [(HttpRetry, 2, vec![(11, 0, err("529")), (12, 1, None)])]
    );
    assert_eq!(inferred.duplicates, 1);
}

#[test]
fn duplicates_without_tries_keep_the_earliest_start_then_the_lower_span_id() {
    let facts = [
        scoped(&genai(3, Some(APP), 10), SDK),
        scoped(&genai(2, Some(APP), 10), OPENLLMETRY),
    ];
    assert_eq!(shapes_of(&infer_facts(&facts, None)), [single(2)]);
}

#[test]
fn duplicates_need_different_scope_names() {
    let facts = [
        scoped(&genai(1, Some(APP), 10), SDK),
        scoped(&genai(2, Some(APP), 10), SDK),
    ];
    let inferred = infer_facts(&facts, None);
    assert_eq!(shapes_of(&inferred), [single(1), single(2)]);
    assert_eq!(inferred.duplicates, 0);
}

#[test]
fn duplicates_need_the_same_parent_model_and_overlapping_windows() {
    let cases = [
        ("another parent", genai(2, Some(APP + 1), 10)),
        ("another model", model(genai(2, Some(APP), 10), "glm-4.6")),
        ("disjoint windows", genai(2, Some(APP), 12)),
    ];
    for (case, other) in cases {
        let facts = [
            scoped(&genai(1, Some(APP), 10), SDK),
            scoped(&other, OPENLLMETRY),
        ];
        let inferred = infer_facts(&facts, None);
        assert_eq!(shapes_of(&inferred), [single(1), single(2)], "{case}");
        assert_eq!(inferred.duplicates, 0, "{case}");
    }
}

#[test]
fn duplicates_a_call_joins_the_first_earlier_group_all_of_whose_members_it_duplicates() {
    let facts = [
        // {1, 2} duplicate each other; 3 duplicates 2 but shares 1's scope, so starts a group
        // of its own, which 4 joins.
        scoped(&until(genai(1, Some(APP), 10), 12), "a"),
        scoped(
            &window(genai(2, Some(APP), 10), 10 * SECOND + 5, 13 * SECOND),
            "b",
        ),
        scoped(
            &window(genai(3, Some(APP), 12), 12 * SECOND + 5, 14 * SECOND),
            "a",
        ),
        scoped(
            &window(genai(4, Some(APP), 13), 13 * SECOND + 5, 15 * SECOND),
            "c",
        ),
    ];
    let inferred = infer_facts(&facts, None);
    assert_eq!(shapes_of(&inferred), [single(1), single(3)]);
    assert_eq!(inferred.duplicates, 2);
}

#[test]
fn duplicates_the_kept_call_decides_failure_for_runs() {
    // The dropped span failed, the kept one did not: no run with the next call.
    let facts = [
        scoped(&genai(1, Some(APP), 10), SDK),
        scoped(&errored(genai(2, Some(APP), 10)), OPENLLMETRY),
        read(&genai(3, Some(APP), 12)),
    ];
    assert_eq!(
        shapes_of(&infer_facts(&facts, None)),
        [single(1), single(3)]
    );
}

#[test]
fn duplicates_both_roots_duplicate_each_other() {
    let facts = [
        scoped(&genai(1, None, 10), SDK),
        scoped(&genai(2, None, 10), OPENLLMETRY),
    ];
    let inferred = infer_facts(&facts, None);
    assert_eq!(shapes_of(&inferred), [single(1)]);
    assert_eq!(inferred.duplicates, 1);
}

#[test]
fn duplicates_with_several_having_tries_keep_the_one_that_starts_first() {
    let facts = [
        scoped(
            &window(genai(1, Some(APP), 10), 10 * SECOND + 5, 11 * SECOND),
            SDK,
        ),
        read(&http(11, 1, 10 * SECOND + 6, vec![status(500)])),
        read(&http(12, 1, 10 * SECOND + 7, vec![])),
        scoped(&genai(2, Some(APP), 10), OPENLLMETRY),
        read(&http(21, 2, 10 * SECOND + 6, vec![status(500)])),
        read(&http(22, 2, 10 * SECOND + 7, vec![])),
    ];
    let inferred = infer_facts(&facts, None);
    assert_eq!(
        shapes_of(&inferred),
        [(HttpRetry, 2, vec![(21, 0, err("500")), (22, 1, None)])]
    );
}

// Step 4: call spans.

#[test]
fn call_span_tries_as_do_generate_children_form_a_run_under_it() {
    let spans = [
        vercel(5, Some(APP), 10, 20),
        errored(do_generate(1, 5, 10)),
        with(
            do_generate(2, 5, 11),
            attr::ERROR_TYPE,
            s("AI_APICallError"),
        ),
        do_generate(3, 5, 12),
    ];
    assert_eq!(
        shapes(&spans),
        [(
            SiblingRetry,
            1,
            vec![
                (1, 0, err("_OTHER")),
                (2, 1, err("AI_APICallError")),
                (3, 2, None)
            ]
        )]
    );
}

#[test]
fn call_span_two_under_one_parent_the_first_failed_form_one_request_of_their_last_runs() {
    let spans = [
        errored(vercel(5, Some(APP), 10, 13)),
        do_generate(1, 5, 10),
        errored(do_generate(2, 5, 11)),
        errored(do_generate(3, 5, 12)),
        vercel(6, Some(APP), 14, 16),
        errored(do_generate(4, 6, 14)),
        do_generate(7, 6, 15),
    ];
    assert_eq!(
        shapes(&spans),
        [
            // The first call's earlier, successful step stands.
            single(1),
            (
                SiblingRetry,
                5,
                vec![
                    (2, 0, err("_OTHER")),
                    (3, 1, err("_OTHER")),
                    (4, 2, err("_OTHER")),
                    (7, 3, None)
                ]
            ),
        ]
    );
}

#[test]
fn call_span_multi_step_earlier_successful_steps_stand_as_requests_of_their_own() {
    let spans = [
        vercel(5, Some(APP), 10, 20),
        do_generate(1, 5, 10),
        do_generate(2, 5, 11),
        errored(do_generate(3, 5, 12)),
        do_generate(4, 5, 13),
    ];
    assert_eq!(
        shapes(&spans),
        [
            single(1),
            single(2),
            (SiblingRetry, 3, vec![(3, 0, err("_OTHER")), (4, 1, None)]),
        ]
    );
}

#[test]
fn call_span_with_no_model_span_below_it_is_no_element() {
    let spans = [
        errored(genai(1, Some(APP), 10)),
        errored(vercel(5, Some(APP), 11, 12)),
        genai(2, Some(APP), 13),
    ];
    assert_eq!(
        shapes(&spans),
        [(SiblingRetry, 1, vec![(1, 0, err("_OTHER")), (2, 1, None)])]
    );
}

#[test]
fn call_span_inside_a_nest_is_an_ordinary_span() {
    let spans = [
        until(genai(1, Some(APP), 10), 20),
        vercel(5, Some(1), 10, 20),
        errored(do_generate(2, 5, 10)),
        do_generate(3, 5, 11),
    ];
    assert_eq!(shapes(&spans), [single(1)]);
}

#[test]
fn call_span_failed_only_when_its_status_is_error() {
    let spans = [
        with(
            vercel(5, Some(APP), 10, 12),
            attr::ERROR_TYPE,
            s("AI_RetryError"),
        ),
        errored(do_generate(1, 5, 10)),
        vercel(6, Some(APP), 13, 15),
        do_generate(2, 6, 13),
    ];
    assert_eq!(
        shapes(&spans),
        [(Single, 1, vec![(1, 0, err("_OTHER"))]), single(2)]
    );
}

#[test]
fn call_span_at_the_root_forms_no_run_its_children_runs_stand() {
    let spans = [
        errored(vercel(5, None, 10, 12)),
        errored(do_generate(1, 5, 10)),
        do_generate(2, 5, 11),
        vercel(6, None, 13, 15),
        do_generate(3, 6, 13),
    ];
    assert_eq!(
        shapes(&spans),
        [
            (SiblingRetry, 1, vec![(1, 0, err("_OTHER")), (2, 1, None)]),
            single(3)
        ]
    );
}

// Step 5: runs.

#[test]
fn runs_a_call_failed_when_its_outer_span_failed_whatever_its_tries_show() {
    // Call 1 succeeded after failed tries: call 2 starts afresh. Call 3 failed after a
    // successful try: call 4 continues its run.
    let spans = [
        genai(1, Some(APP), 10),
        http(11, 1, 10 * SECOND + 1, vec![status(500)]),
        http(12, 1, 10 * SECOND + 2, vec![status(500)]),
        genai(2, Some(APP), 12),
        errored(genai(3, Some(APP), 14)),
        genai(4, Some(APP), 15),
    ];
    assert_eq!(
        shapes(&spans),
        [
            (HttpRetry, 1, vec![(11, 0, err("500")), (12, 1, err("500"))]),
            single(2),
            (SiblingRetry, 3, vec![(3, 0, err("_OTHER")), (4, 1, None)]),
        ]
    );
}

#[test]
fn runs_form_under_a_parent_span_that_never_arrives() {
    // APP is never among the spans.
    let spans = [errored(genai(1, Some(APP), 10)), genai(2, Some(APP), 11)];
    assert_eq!(
        shapes(&spans),
        [(SiblingRetry, 1, vec![(1, 0, err("_OTHER")), (2, 1, None)])]
    );
}

#[test]
fn runs_take_calls_and_call_spans_of_one_parent_together() {
    let spans = [
        errored(genai(1, Some(APP), 10)),
        vercel(5, Some(APP), 11, 13),
        errored(do_generate(2, 5, 11)),
        do_generate(3, 5, 12),
    ];
    assert_eq!(
        shapes(&spans),
        [(
            SiblingRetry,
            1,
            vec![(1, 0, err("_OTHER")), (2, 1, err("_OTHER")), (3, 2, None)]
        )]
    );
}

#[test]
fn runs_a_call_span_contributes_the_tries_of_a_call_in_its_last_run_as_consecutive_attempts() {
    let spans = [
        errored(vercel(5, Some(APP), 10, 12)),
        errored(do_generate(1, 5, 10)),
        http(11, 1, 10 * SECOND + 1, vec![status(500)]),
        http(12, 1, 10 * SECOND + 2, vec![status(500)]),
        vercel(6, Some(APP), 13, 15),
        do_generate(2, 6, 13),
    ];
    assert_eq!(
        shapes(&spans),
        [(
            SiblingRetry,
            5,
            vec![(11, 0, err("500")), (12, 1, err("500")), (2, 2, None)]
        )]
    );
}

#[test]
fn runs_a_status_code_alone_does_not_make_a_call_failed() {
    // The row shows the code as its error type, but only `error.type` or status ERROR fail a
    // span.
    let spans = [
        with(
            genai(1, Some(APP), 10),
            attr::HTTP_RESPONSE_STATUS_CODE,
            i(429),
        ),
        genai(2, Some(APP), 11),
    ];
    assert_eq!(
        shapes(&spans),
        [(Single, 1, vec![(1, 0, err("429"))]), single(2)]
    );
}

// Step 6: usage of failed attempts.

#[test]
fn borrowed_usage_comes_from_the_nearest_later_attempt_whose_count_is_not_borrowed() {
    let spans = [
        no_usage(errored(genai(1, Some(APP), 10))),
        no_usage(errored(genai(2, Some(APP), 11))),
        usage(genai(3, Some(APP), 12), 900, 300, 40),
        usage(genai(4, Some(APP), 13), 111, 0, 0),
    ];
    let borrowed = (n(900), n(300), n(40), UsageOrigin::Borrowed);
    assert_eq!(
        usages_of(&infer_spans(&spans)[0].attempts),
        [
            borrowed,
            borrowed,
            (n(900), n(300), n(40), UsageOrigin::Span)
        ]
    );
}

#[test]
fn borrowed_usage_falls_back_to_the_nearest_earlier_attempt() {
    let spans = [
        usage(errored(genai(1, Some(APP), 10)), 700, 0, 0),
        usage(errored(genai(2, Some(APP), 11)), 800, 100, 10),
        no_usage(errored(genai(3, Some(APP), 12))),
        no_usage(errored(genai(4, Some(APP), 13))),
    ];
    let borrowed = (n(800), n(100), n(10), UsageOrigin::Borrowed);
    assert_eq!(
        usages_of(&attempts_of(&spans)),
        [
            (n(700), n(0), n(0), UsageOrigin::Span),
            (n(800), n(100), n(10), UsageOrigin::Span),
            borrowed,
            borrowed
        ]
    );
}

#[test]
fn borrowed_usage_reaches_the_tries_of_a_call_whose_nest_reports_none() {
    let spans = [
        no_usage(errored(genai(1, Some(APP), 10))),
        http(11, 1, 10 * SECOND + 1, vec![status(500)]),
        http(12, 1, 10 * SECOND + 2, vec![status(500)]),
        usage(genai(2, Some(APP), 12), 900, 300, 40),
    ];
    let borrowed = (n(900), n(300), n(40), UsageOrigin::Borrowed);
    assert_eq!(
        usages_of(&attempts_of(&spans)),
        [
            borrowed,
            borrowed,
            (n(900), n(300), n(40), UsageOrigin::Span)
        ]
    );
}

// Late spans: a trace inferred before.

#[test]
fn late_model_span_in_a_nest_seen_before_makes_no_row() {
    let before = [
        read(&until(genai(1, Some(9), 10), 20)),
        read(&until(genai(2, Some(1), 10), 20)),
    ];
    let earlier = earlier_of(&before);
    let cases = [
        ("below an earlier model span", genai(3, Some(2), 11)),
        (
            "above an earlier model span",
            until(genai(9, Some(APP), 10), 20),
        ),
    ];
    for (case, late) in cases {
        let inferred = infer_facts(&[read(&late)], Some(&earlier));
        assert_eq!(shapes_of(&inferred), [], "{case}");
        assert_eq!(inferred.duplicates, 1, "{case}");
    }
}

#[test]
fn late_model_span_duplicating_a_call_that_made_rows_makes_no_row() {
    let earlier = earlier_of(&[scoped(&genai(1, Some(APP), 10), SDK)]);
    let late = [scoped(&genai(2, Some(APP), 10), OPENLLMETRY)];
    let inferred = infer_facts(&late, Some(&earlier));
    assert_eq!(shapes_of(&inferred), []);
    assert_eq!(inferred.duplicates, 1);
}

#[test]
fn late_model_span_is_a_call_of_its_own_by_2a_and_2c_never_a_run() {
    let earlier = earlier_of(&[read(&errored(genai(1, Some(APP), 10)))]);
    let late = [
        // It would continue the failed call's run.
        genai(2, Some(APP), 11),
        // 2a.
        genai(3, Some(APP), 13),
        http(31, 3, 13 * SECOND + 1, vec![status(500)]),
        http(32, 3, 13 * SECOND + 2, vec![]),
        // 2b is not taken.
        genai(4, Some(APP), 15),
        beside(41, APP, 15 * SECOND + 1, vec![status(500)]),
        beside(42, APP, 15 * SECOND + 2, vec![]),
        // 2c.
        with(genai(5, Some(APP), 17), attr::HTTP_RESEND_COUNT, i(1)),
    ];
    let facts: Vec<SpanFacts> = late.iter().map(read).collect();
    assert_eq!(
        shapes_of(&infer_facts(&facts, Some(&earlier))),
        [
            single(2),
            (HttpRetry, 3, vec![(31, 0, err("500")), (32, 1, None)]),
            single(4),
            (ResendCount, 5, vec![(5, 0, err("_OTHER")), (5, 1, None)]),
        ]
    );
}

// Through the assembler.

/// A trace with every shape at once: a pydantic-ai nest, tries beside, a run, a Vercel AI SDK
/// call and two instrumentations of one call.
fn every_shape() -> Vec<SpanFacts> {
    let spans = [
        until(genai(1, Some(APP), 10), 20),
        window(
            model(genai(2, Some(1), 10), "deepseek-v4-pro"),
            10 * SECOND + 100,
            10 * SECOND + 1000,
        ),
        http(11, 1, 10 * SECOND + 200, vec![status(500)]),
        http(12, 1, 10 * SECOND + 2000, vec![]),
        errored(genai(3, Some(APP), 21)),
        beside(31, APP, 21 * SECOND + 1, vec![status(529)]),
        beside(32, APP, 21 * SECOND + 2, vec![status(529)]),
        genai(4, Some(APP), 23),
        vercel(5, Some(APP + 1), 10, 20),
        errored(do_generate(6, 5, 10)),
        do_generate(7, 5, 11),
    ];
    let mut facts: Vec<SpanFacts> = spans.iter().map(read).collect();
    facts.push(scoped(&genai(8, Some(APP + 2), 10), SDK));
    facts.push(scoped(&genai(9, Some(APP + 2), 10), OPENLLMETRY));
    facts
}

fn assembled(batches: &[Vec<SpanFacts>]) -> Vec<Shape> {
    use crate::assemble::{Assembler, Ready};
    let config = crate::assemble::AssemblyBounds {
        group_wait: std::time::Duration::from_secs(10),
        ..Default::default()
    };
    let mut assembler = Assembler::new(&config, 1);
    let start = std::time::Instant::now();
    let mut ready = Ready::default();
    let mut now = start;
    for batch in batches {
        for span in batch {
            assembler.offer(span.clone(), now, &mut ready);
        }
        now += std::time::Duration::from_secs(4);
    }
    assembler.expire(now + config.group_wait, &mut ready);
    let mut requests = ready.requests;
    requests.sort_by(|a, b| a.key.cmp(&b.key));
    requests.iter().map(shape).collect()
}

#[test]
fn assembler_gives_the_requests_of_infer_trace_whatever_the_order_and_split_of_the_spans() {
    let whole = every_shape();
    let expected = shapes_of(&infer_facts(&whole, None));
    assert_eq!(expected.len(), 4, "{expected:?}");
    let mut reversed = whole.clone();
    reversed.reverse();
    let odd: Vec<SpanFacts> = whole.iter().skip(1).step_by(2).cloned().collect();
    let even: Vec<SpanFacts> = whole.iter().step_by(2).cloned().collect();
    let one_by_one: Vec<Vec<SpanFacts>> = reversed.iter().map(|f| vec![f.clone()]).collect();
    let cases: [(&str, Vec<Vec<SpanFacts>>); 4] = [
        ("in order", vec![whole.clone()]),
        ("reversed", vec![reversed.clone()]),
        ("odd then even", vec![odd, even]),
        ("one export each, reversed", one_by_one),
    ];
    for (case, batches) in cases {
        assert_eq!(assembled(&batches), expected, "{case}");
    }
}

#[test]
fn assembler_judges_a_late_model_span_as_infer_trace_does_with_the_earlier_trace() {
    use crate::assemble::{Assembler, Ready};
    let config = crate::assemble::AssemblyBounds {
        group_wait: std::time::Duration::from_secs(10),
        ..Default::default()
    };
    let before = [
        read(&errored(genai(1, Some(APP), 10))),
        read(&genai(2, Some(1), 10)),
    ];
    let late = [read(&genai(3, Some(APP), 11)), read(&genai(4, Some(2), 10))];
    let expected = shapes_of(&infer_facts(&late, Some(&earlier_of(&before))));
    assert_eq!(expected, [single(3)]);

    let mut assembler = Assembler::new(&config, 1);
    let start = std::time::Instant::now();
    let mut ready = Ready::default();
    for span in &before {
        assembler.offer(span.clone(), start, &mut ready);
    }
    assembler.expire(start + config.group_wait, &mut ready);
    let mut ready = Ready::default();
    let now = start + config.group_wait * 2;
    for span in &late {
        assembler.offer(span.clone(), now, &mut ready);
    }
    assembler.expire(now + config.group_wait, &mut ready);
    let got: Vec<Shape> = ready.requests.iter().map(shape).collect();
    assert_eq!(got, expected);
    assert_eq!(ready.duplicates, 1, "the late span of the nest");
}
