//! End to end: `replay` over what today's plain instrumentations export (SPEC §2, "Attempts
//! inferred from plain instrumentation"), recorded by examples/record_instrumented.py with
//! openai-python, the httpx instrumentation and OpenLLMetry or OpenInference.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use common::replay::Replay;
use common::spans::kv_text;
use common::{usd, Row};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use retry_spend_collector::contract::otlp_json::parse_request;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/instrumented");

/// What a service might stamp on its GenAI spans (a span processor, say): 0.005 USD and two
/// retries, falling back to glm or qwen allowed. A try of glm-5 plans
/// (800 × 0.775 + 400 × 0.258065 + 800 × 2.48) / 1e6 = 0.002707226 USD.
const ENVELOPE: &str = r#"{"retry_spend_envelope": {"pricing_source": "https://aiwave.live/api/pricing", "pricing_checked_at": "2026-08-22", "pricing_version": "a42d372ccf0b5dd13ecf71203521f9d2", "billing_group": "vip", "max_incremental_usd": "0.005", "max_attempts_after_first": 2, "allow_family_fallback": true, "allowed_fallback_families": ["glm", "qwen"], "task_type": "support_summary"}}"#;

/// A span of a recording, by kind and start order: the request ids and span ids differ with
/// every recording, the shape does not.
#[derive(Debug, Clone, Copy)]
enum Recorded {
    /// The n-th GenAI span (`gen_ai.request.model`).
    GenAi(usize),
    /// The n-th HTTP client try.
    Http(usize),
}
use Recorded::{GenAi, Http};

/// (span, error_type, input, output tokens, retry_model, response_model, decision,
///  spend_class, unaudited_reason, cumulative USD, actual USD); attempt k is row k, and every
/// row's request_id is the first GenAI span's id.
type Expected<'a> = (
    Recorded,
    &'a str,
    &'a str,
    &'a str,
    &'a str,
    &'a str,
    &'a str,
    &'a str,
    &'a str,
    &'a str,
    &'a str,
);

const SDK_RETRIES: &[Expected<'_>] = &[
    (
        Http(0),
        "429",
        "1200",
        "NULL",
        "glm-5",
        "NULL",
        "first_attempt",
        "base",
        "no_envelope",
        "0",
        "NULL",
    ),
    (
        Http(1),
        "500",
        "1200",
        "NULL",
        "glm-5",
        "NULL",
        "unaudited",
        "retry",
        "no_envelope",
        "NULL",
        "NULL",
    ),
    (
        Http(2),
        "NULL",
        "1200",
        "85",
        "glm-5",
        "glm-5",
        "unaudited",
        "retry",
        "no_envelope",
        "NULL",
        "NULL",
    ),
];

const SDK_RETRIES_WITH_ENVELOPE: &[Expected<'_>] = &[
    (
        Http(0),
        "429",
        "1200",
        "NULL",
        "glm-5",
        "NULL",
        "first_attempt",
        "base",
        "NULL",
        "0",
        "NULL",
    ),
    (
        Http(1),
        "500",
        "1200",
        "NULL",
        "glm-5",
        "NULL",
        "within_envelope",
        "retry",
        "NULL",
        "0.002707226",
        "NULL",
    ),
    (
        Http(2),
        "NULL",
        "1200",
        "85",
        "glm-5",
        "glm-5",
        "over_envelope",
        "retry",
        "NULL",
        "0.005414452",
        // (800 × 0.775 + 400 × 0.258065 + 85 × 2.48) / 1e6
        "0.000934026",
    ),
];

/// `{error}`: how the instrumentation names the failed call's error. The failed call reports
/// no usage: it borrows the fallback's input counts (SPEC §2 step 6), since it sent the same
/// prompt, and is priced with them.
fn fallback(error: &str, envelope: bool) -> Vec<Expected<'_>> {
    let (decision, reason, cumulative) = if envelope {
        ("within_envelope", "NULL", "0.002707226")
    } else {
        ("unaudited", "no_envelope", "NULL")
    };
    let first_reason = if envelope { "NULL" } else { "no_envelope" };
    vec![
        (
            GenAi(0),
            error,
            "1200",
            "NULL",
            "deepseek-v4-pro",
            "NULL",
            "first_attempt",
            "base",
            first_reason,
            "0",
            "NULL",
        ),
        (
            GenAi(1),
            "NULL",
            "1200",
            "85",
            "glm-5",
            "glm-5",
            decision,
            "fallback",
            reason,
            cumulative,
            if envelope { "0.000934026" } else { "NULL" },
        ),
    ]
}

/// A retry of deepseek-v4-pro plans (800 × 0.957 + 400 × 0.0333 + 800 × 2.871) / 1e6 =
/// 0.00307572 USD with the borrowed counts; the fallback to glm-5 then brings the cumulative
/// to 0.005782946, over the 0.005 envelope.
fn fallback_after_sdk_retries(envelope: bool) -> Vec<Expected<'static>> {
    let (first, retry, answer) = if envelope {
        ("NULL", "NULL", "NULL")
    } else {
        ("no_envelope", "no_envelope", "no_envelope")
    };
    let (retry_decision, answer_decision) = if envelope {
        ("within_envelope", "over_envelope")
    } else {
        ("unaudited", "unaudited")
    };
    vec![
        (
            Http(0),
            "500",
            "1200",
            "NULL",
            "deepseek-v4-pro",
            "NULL",
            "first_attempt",
            "base",
            first,
            "0",
            "NULL",
        ),
        (
            Http(1),
            "500",
            "1200",
            "NULL",
            "deepseek-v4-pro",
            "NULL",
            retry_decision,
            "retry",
            retry,
            if envelope { "0.00307572" } else { "NULL" },
            "NULL",
        ),
        (
            GenAi(1),
            "NULL",
            "1200",
            "85",
            "glm-5",
            "glm-5",
            answer_decision,
            "fallback",
            answer,
            if envelope { "0.005782946" } else { "NULL" },
            if envelope { "0.000934026" } else { "NULL" },
        ),
    ]
}

/// A recording's spans: (span id, start, end) of its GenAI spans and HTTP tries in start order,
/// the times as the table holds them (microseconds).
#[derive(Debug, Default)]
struct Spans {
    genai: Vec<(String, String, String)>,
    http: Vec<(String, String, String)>,
}

impl Spans {
    fn of(&self, span: Recorded) -> &(String, String, String) {
        match span {
            GenAi(n) => &self.genai[n],
            Http(n) => &self.http[n],
        }
    }
}

fn fixture(name: &str) -> PathBuf {
    Path::new(FIXTURES).join(format!("{name}.jsonl"))
}

fn exports(name: &str) -> Vec<ExportTraceServiceRequest> {
    std::fs::read_to_string(fixture(name))
        .unwrap()
        .lines()
        .map(|line| parse_request(line.as_bytes()).unwrap())
        .collect()
}

fn has(attributes: &[KeyValue], key: &str) -> bool {
    attributes.iter().any(|kv| kv.key == key)
}

fn spans_of(exports: &[ExportTraceServiceRequest]) -> Spans {
    let mut genai = Vec::new();
    let mut http = Vec::new();
    for span in exports
        .iter()
        .flat_map(|e| &e.resource_spans)
        .flat_map(|rs| &rs.scope_spans)
        .flat_map(|ss| &ss.spans)
    {
        let entry = (
            span.start_time_unix_nano,
            hex(&span.span_id),
            // The table's microseconds: the span's nanoseconds truncated.
            (span.start_time_unix_nano / 1000).to_string(),
            (span.end_time_unix_nano / 1000).to_string(),
        );
        if has(&span.attributes, "gen_ai.request.model") {
            genai.push(entry);
        } else if has(&span.attributes, "http.request.method")
            || has(&span.attributes, "http.method")
        {
            http.push(entry);
        }
    }
    genai.sort();
    http.sort();
    let strip = |v: Vec<(u64, String, String, String)>| {
        v.into_iter().map(|(_, id, s, e)| (id, s, e)).collect()
    };
    Spans {
        genai: strip(genai),
        http: strip(http),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Stamps the JSON envelope on every GenAI span.
fn with_envelope(mut exports: Vec<ExportTraceServiceRequest>) -> Vec<ExportTraceServiceRequest> {
    for span in exports
        .iter_mut()
        .flat_map(|e| &mut e.resource_spans)
        .flat_map(|rs| &mut rs.scope_spans)
        .flat_map(|ss| &mut ss.spans)
    {
        if has(&span.attributes, "gen_ai.request.model") {
            span.attributes
                .push(kv_text("retry_spend.envelope", ENVELOPE));
        }
    }
    exports
}

/// Replays `exports` written one per line and returns the rows in attempt order.
fn replay(exports: &[ExportTraceServiceRequest]) -> Vec<Row> {
    let mut rows = Replay::new().exports(exports).rows();
    rows.sort_by_key(|r| r["attempt_index"].parse::<i32>().unwrap());
    rows
}

fn assert_rows(name: &str, rows: &[Row], spans: &Spans, expected: &[Expected<'_>]) {
    assert_eq!(rows.len(), expected.len(), "{name}: {rows:#?}");
    let request_id = &spans.genai[0].0;
    for (k, (row, expect)) in rows.iter().zip(expected).enumerate() {
        let &(span, error, input, output, model, served, decision, class, reason, cum, actual) =
            expect;
        let (span_id, start, end) = spans.of(span);
        let got = [
            ("request_id", row["request_id"].clone()),
            ("span_id", row["span_id"].clone()),
            ("attempt_index", row["attempt_index"].clone()),
            ("event_time", row["event_time"].clone()),
            ("end_time", row["end_time"].clone()),
            ("error_type", row["error_type"].clone()),
            ("input_tokens", row["input_tokens"].clone()),
            ("output_tokens", row["output_tokens"].clone()),
            ("output_cap", row["output_cap"].clone()),
            ("retry_model", row["retry_model"].clone()),
            ("response_model", row["response_model"].clone()),
            ("decision", row["decision"].clone()),
            ("spend_class", row["spend_class"].clone()),
            ("unaudited_reason", row["unaudited_reason"].clone()),
            ("audited", row["audited"].clone()),
            ("cumulative", usd(&row["cumulative_incremental_usd"])),
            ("actual", usd(&row["actual_attempt_usd"])),
            ("service_name", row["service_name"].clone()),
        ];
        let want = [
            ("request_id", request_id.clone()),
            ("span_id", span_id.clone()),
            ("attempt_index", k.to_string()),
            ("event_time", start.clone()),
            ("end_time", end.clone()),
            ("error_type", error.to_owned()),
            ("input_tokens", input.to_owned()),
            ("output_tokens", output.to_owned()),
            ("output_cap", "800".to_owned()),
            ("retry_model", model.to_owned()),
            ("response_model", served.to_owned()),
            ("decision", decision.to_owned()),
            ("spend_class", class.to_owned()),
            ("unaudited_reason", reason.to_owned()),
            ("audited", (reason == "NULL").to_string()),
            ("cumulative", cum.to_owned()),
            ("actual", actual.to_owned()),
            ("service_name", "support-bot".to_owned()),
        ];
        assert_eq!(got, want, "{name}, attempt {k}");
    }
}

fn check(name: &str, envelope: bool, expected: &[Expected<'_>]) {
    let mut recorded = exports(name);
    let spans = spans_of(&recorded);
    if envelope {
        recorded = with_envelope(recorded);
    }
    let label = format!("{name} (envelope: {envelope})");
    assert_rows(&label, &replay(&recorded), &spans, expected);
}

const SDK_RETRY_RECORDINGS: &[&str] = &[
    "openllmetry-sdk-retries",
    "openllmetry-sdk-retries-stable-http",
    "openinference-sdk-retries",
];

#[test]
fn http_retry_sdk_retry_loop_gives_a_row_per_http_try_and_none_for_the_genai_span() {
    for name in SDK_RETRY_RECORDINGS {
        check(name, false, SDK_RETRIES);
    }
}

#[test]
fn http_retry_sdk_retry_loop_with_an_envelope_prices_every_try_with_the_output_cap() {
    for name in SDK_RETRY_RECORDINGS {
        check(name, true, SDK_RETRIES_WITH_ENVELOPE);
    }
}

#[test]
fn sibling_retry_application_fallback_after_a_failed_call_is_one_request() {
    // OpenLLMetry names the exception; OpenInference only sets the ERROR status.
    for (name, error) in [
        ("openllmetry-fallback", "InternalServerError"),
        ("openinference-fallback", "_OTHER"),
    ] {
        check(name, false, &fallback(error, false));
        check(name, true, &fallback(error, true));
    }
}

#[test]
fn sibling_retry_a_failed_call_with_sdk_retries_contributes_its_http_tries() {
    for name in [
        "openllmetry-fallback-after-sdk-retries",
        "openinference-fallback-after-sdk-retries",
    ] {
        check(name, false, &fallback_after_sdk_retries(false));
        check(name, true, &fallback_after_sdk_retries(true));
    }
}

/// Every span in its own export request, last span first.
fn one_span_per_export_reversed(
    exports: &[ExportTraceServiceRequest],
) -> Vec<ExportTraceServiceRequest> {
    let mut split = Vec::new();
    for e in exports {
        for rs in &e.resource_spans {
            for ss in &rs.scope_spans {
                for span in &ss.spans {
                    let mut scope = ss.clone();
                    scope.spans = vec![span.clone()];
                    let mut resource = rs.clone();
                    resource.scope_spans = vec![scope];
                    split.push(ExportTraceServiceRequest {
                        resource_spans: vec![resource],
                    });
                }
            }
        }
    }
    split.reverse();
    split
}

#[test]
fn inferred_rows_do_not_depend_on_how_spans_are_split_ordered_or_resent() {
    let names = [
        SDK_RETRY_RECORDINGS,
        &["openllmetry-fallback-after-sdk-retries"],
    ]
    .concat();
    for name in names {
        let recorded = with_envelope(exports(name));
        let whole = replay(&recorded);
        let mut split = one_span_per_export_reversed(&recorded);
        split.extend(recorded.iter().cloned());
        let by_span: HashMap<String, Row> = replay(&split)
            .into_iter()
            .map(|r| (r["span_id"].clone(), r))
            .collect();
        assert_eq!(by_span.len(), whole.len(), "{name}");
        for row in &whole {
            assert_eq!(Some(row), by_span.get(&row["span_id"]), "{name}");
        }
    }
}
