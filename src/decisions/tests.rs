use std::collections::BTreeSet;
use std::path::PathBuf;

use chrono::TimeZone;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

use super::json::{request_from_json, response_to_json};
use super::proto::{Attempt, Envelope, ProposedAttempt};
use super::*;
use crate::contract::{attr, kv};
use crate::policy::PolicySet;
use crate::pricing::{PricingBook, Snapshot};
use crate::processor::Processor;
use crate::record::{UnauditedReason, Violation};
use crate::rules::RulesConfig;

const SNAPSHOT: &str = include_str!("../../config/pricing/2026-08-22-aiwave.json");
const VERSION: &str = "a42d372ccf0b5dd13ecf71203521f9d2";
const SOURCE: &str = "https://aiwave.live/api/pricing";
/// Three days after the snapshot was checked: fresh.
const FRESH: &str = "2026-08-25T12:00:00Z";

/// Policies as a reviewer writes them. The first names an attribute, which a question cannot
/// carry: it must never match here, although it comes first and matches the service.
const POLICIES: &str = r#"
[[policy]]
name = "prod-support"
match.service = "support-*"
match.attributes = { "deployment.environment.name" = "prod" }
[policy.envelope]
pricing_version = "a42d372ccf0b5dd13ecf71203521f9d2"
pricing_checked_at = "2026-08-22"
pricing_source = "https://aiwave.live/api/pricing"
billing_group = "vip"
max_incremental_usd = "9"
max_attempts_after_first = 9

[[policy]]
name = "support-summaries"
match.service = "support-*"
match.task_type = "support_summary"
match.model = "deepseek-*"
[policy.envelope]
pricing_version = "a42d372ccf0b5dd13ecf71203521f9d2"
pricing_checked_at = "2026-08-22"
pricing_source = "https://aiwave.live/api/pricing"
billing_group = "vip"
max_incremental_usd = "0.015"
max_attempts_after_first = 1
allow_family_fallback = true
allowed_fallback_families = ["deepseek", "qwen", "glm"]

[[policy]]
name = "batch-latest"
match.service = "batch-*"
[policy.envelope]
pricing_version = "latest"
billing_group = "default"
max_incremental_usd = "0.05"
max_attempts_after_first = 2
allow_family_fallback = false
"#;

fn engine() -> Engine {
    let mut book = PricingBook::default();
    book.insert(Snapshot::from_bytes("aiwave.json".as_ref(), SNAPSHOT.as_bytes()).unwrap())
        .unwrap();
    Engine {
        book,
        rules: RulesConfig::default(),
        policies: PolicySet::parse([(PathBuf::from("policies.toml"), POLICIES.to_owned())])
            .unwrap(),
    }
}

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 8, 25, 12, 0, 0).unwrap()
}

/// The seed's envelope.
fn seed_envelope() -> Envelope {
    Envelope {
        pricing_source: SOURCE.into(),
        pricing_checked_at: "2026-08-22".into(),
        pricing_version: VERSION.into(),
        billing_group: "vip".into(),
        max_incremental_usd: "0.015".into(),
        max_attempts_after_first: Some(1),
        allow_family_fallback: Some(true),
        allowed_fallback_families: vec!["deepseek".into(), "qwen".into(), "glm".into()],
        replay_safe: None,
        task_type: String::new(),
        ..Default::default()
    }
}

/// An attempt with the worked example's usage: 10,000 input (4,000 cached), cap 800.
fn made(model: &str) -> Attempt {
    Attempt {
        model: model.into(),
        input_tokens: Some(10_000),
        cached_input_tokens: Some(4_000),
        output_cap: Some(800),
        output_reached_client: None,
        error_type: String::new(),
        ..Default::default()
    }
}

fn proposed(model: &str) -> ProposedAttempt {
    ProposedAttempt {
        model: model.into(),
        input_tokens: Some(10_000),
        cached_input_tokens: Some(4_000),
        output_cap: Some(800),
        ..Default::default()
    }
}

fn question(envelope: Option<Envelope>, attempts: Vec<Attempt>, next: &str) -> DecideRequest {
    DecideRequest {
        envelope,
        service: "checkout".into(),
        task_type: String::new(),
        attempts,
        next: Some(proposed(next)),
        at: FRESH.into(),
    }
}

fn answer(question: DecideRequest, allow_unaudited: bool) -> DecideResponse {
    let (row, question) = judge(&engine(), question, now()).unwrap();
    let allow = allowed(row.decision, allow_unaudited);
    respond(row, &question, allow)
}

fn malformed(question: DecideRequest) -> Malformed {
    match judge(&engine(), question, now()) {
        Err(DecideError::Malformed(m)) => m,
        other => panic!("expected a malformed question, got {other:?}"),
    }
}

#[test]
fn worked_example_fallback_to_glm_is_within_the_envelope_with_the_rule_tests_money() {
    let response = answer(
        question(
            Some(seed_envelope()),
            vec![made("deepseek-v4-flash")],
            "glm-5",
        ),
        false,
    );
    let digest = Snapshot::from_bytes("x".as_ref(), SNAPSHOT.as_bytes())
        .unwrap()
        .digest;
    assert_eq!(
        response,
        DecideResponse {
            allow: true,
            decision: "within_envelope".into(),
            violations: vec![],
            unaudited_reason: None,
            attempt_index: 1,
            estimated_incremental_usd: Some("0.00766626".into()),
            cumulative_incremental_usd: Some("0.00766626".into()),
            remaining_envelope_usd: Some("0.00733374".into()),
            pricing_version: Some(VERSION.into()),
            pricing_checked_at: Some("2026-08-22".into()),
            pricing_digest: Some(digest.to_string()),
            envelope_source: Some("request".into()),
            decision_reason: "retry 1 of glm-5 brings incremental spend to 0.00766626 USD, \
                              within the 0.015 envelope (0.00733374 USD left)"
                .into(),
        }
    );
}

#[test]
fn second_retry_over_the_attempt_limit_is_refused() {
    let response = answer(
        question(
            Some(seed_envelope()),
            vec![made("deepseek-v4-flash"), made("glm-5")],
            "glm-5",
        ),
        false,
    );
    assert!(!response.allow);
    assert_eq!(response.decision, "over_attempts");
    assert_eq!(response.attempt_index, 2);
    // 2 × 0.00766626 = 0.01533252, over 0.015 as well.
    assert_eq!(response.violations, ["over_attempts", "over_envelope"]);
    assert_eq!(
        response.remaining_envelope_usd.as_deref(),
        Some("-0.00033252")
    );
}

#[test]
fn unaudited_is_refused_unless_configured_to_fail_open() {
    let no_envelope = || question(None, vec![made("glm-5")], "glm-5");
    let closed = answer(no_envelope(), false);
    assert_eq!(closed.decision, "unaudited");
    assert_eq!(closed.unaudited_reason.as_deref(), Some("no_envelope"));
    assert_eq!(closed.envelope_source, None);
    assert!(!closed.allow);
    assert!(answer(no_envelope(), true).allow);
    // Failing open never allows what the envelope forbids.
    let mut over = question(
        Some(seed_envelope()),
        vec![made("glm-5"), made("glm-5")],
        "glm-5",
    );
    over.envelope.as_mut().unwrap().max_attempts_after_first = Some(5);
    assert_eq!(answer(over, true).decision, "over_envelope");
}

#[test]
fn without_an_envelope_the_first_matching_policy_gives_one_but_never_an_attribute_policy() {
    let mut q = question(None, vec![made("deepseek-v4-flash")], "glm-5");
    q.service = "support-bot".into();
    q.task_type = "support_summary".into();
    let response = answer(q, false);
    assert_eq!(
        response.envelope_source.as_deref(),
        Some("policy:support-summaries")
    );
    assert_eq!(response.decision, "within_envelope");
}

#[test]
fn policies_match_attempt_zero_model_not_the_proposed_one() {
    let mut q = question(None, vec![made("glm-5")], "deepseek-v4-flash");
    q.service = "support-bot".into();
    q.task_type = "support_summary".into();
    assert_eq!(answer(q, false).envelope_source, None);
}

#[test]
fn a_latest_policy_pins_the_newest_snapshot_checked_by_at() {
    let mut q = question(None, vec![made("glm-5")], "glm-5");
    q.service = "batch-7".into();
    let response = answer(q.clone(), false);
    assert_eq!(
        response.envelope_source.as_deref(),
        Some("policy:batch-latest")
    );
    assert_eq!(response.pricing_version.as_deref(), Some(VERSION));
    assert_eq!(response.pricing_checked_at.as_deref(), Some("2026-08-22"));
    // default group, ratio 3: 3 × 0.00766626
    assert_eq!(
        response.estimated_incremental_usd.as_deref(),
        Some("0.02299878")
    );

    q.at = "2026-08-01T00:00:00Z".into();
    let before = answer(q, false);
    assert_eq!(before.pricing_version.as_deref(), Some("latest"));
    assert_eq!(
        before.unaudited_reason.as_deref(),
        Some("unknown_pricing_version")
    );
}

#[test]
fn at_decides_staleness() {
    let mut q = question(Some(seed_envelope()), vec![made("glm-5")], "glm-5");
    q.at = "2026-10-01T09:30:00+02:00".into();
    assert_eq!(
        answer(q.clone(), false).unaudited_reason.as_deref(),
        Some("pricing_stale")
    );
    // Without `at`, now (three days after the check) is used.
    q.at = String::new();
    assert_eq!(answer(q, false).decision, "within_envelope");
}

#[test]
fn a_task_type_that_disagrees_with_the_envelope_is_an_envelope_conflict() {
    let mut q = question(Some(seed_envelope()), vec![made("glm-5")], "glm-5");
    q.task_type = "support_summary".into();
    q.envelope.as_mut().unwrap().task_type = "code_patch".into();
    assert_eq!(
        answer(q.clone(), false).unaudited_reason.as_deref(),
        Some("envelope_conflict")
    );
    q.envelope.as_mut().unwrap().task_type = "support_summary".into();
    assert_eq!(answer(q, false).unaudited_reason, None);
}

#[test]
fn absent_counts_are_judged_not_refused() {
    let mut q = question(Some(seed_envelope()), vec![made("glm-5")], "glm-5");
    q.next.as_mut().unwrap().output_cap = None;
    let response = answer(q, false);
    assert_eq!(
        response.unaudited_reason.as_deref(),
        Some("output_cap_missing")
    );
    assert_eq!(response.estimated_incremental_usd, None);
    assert_eq!(response.cumulative_incremental_usd, None);
}

#[test]
fn questions_without_attempts_or_a_proposed_model_are_malformed() {
    let mut q = question(Some(seed_envelope()), vec![], "glm-5");
    assert_eq!(malformed(q.clone()).field, "attempts");
    q.attempts = vec![made("glm-5")];
    q.next = None;
    assert_eq!(malformed(q.clone()).field, "next.model");
    q.next = Some(proposed(""));
    assert_eq!(malformed(q).field, "next.model");
}

#[test]
fn unreadable_money_dates_and_times_are_malformed_naming_the_field() {
    let base = question(Some(seed_envelope()), vec![made("glm-5")], "glm-5");
    let mut q = base.clone();
    q.envelope.as_mut().unwrap().max_incremental_usd = "fifteen cents".into();
    assert_eq!(malformed(q).field, "envelope.max_incremental_usd");
    let mut q = base.clone();
    q.envelope.as_mut().unwrap().pricing_checked_at = "22/08/2026".into();
    assert_eq!(malformed(q).field, "envelope.pricing_checked_at");
    let mut q = base.clone();
    q.at = "yesterday".into();
    assert_eq!(malformed(q).field, "at");
    let mut q = base;
    q.at = "1969-12-31T23:59:59Z".into();
    assert_eq!(malformed(q).field, "at");
}

#[test]
fn money_is_read_as_spans_read_it() {
    let mut q = question(Some(seed_envelope()), vec![made("glm-5")], "glm-5");
    q.envelope.as_mut().unwrap().max_incremental_usd = "1.5e-2".into();
    let response = answer(q, false);
    assert_eq!(
        response.remaining_envelope_usd.as_deref(),
        Some("0.00733374")
    );
}

#[test]
fn decisions_are_counted_by_decision_and_allowed() {
    let metrics = Metrics::new();
    let decider = Decider::new(
        SharedEngine::new(engine()),
        &DecisionsConfig::default(),
        Arc::clone(&metrics),
    );
    for next in ["glm-5", "glm-5", "gpt-unknown"] {
        decider
            .decide(question(Some(seed_envelope()), vec![made("glm-5")], next))
            .unwrap();
    }
    let text = metrics.render();
    assert!(
        text.contains(
            r#"retry_spend_decisions_total{decision="within_envelope",allowed="true"} 2"#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#"retry_spend_decisions_total{decision="unaudited",allowed="false"} 1"#),
        "{text}"
    );
}

#[test]
fn a_reloaded_engine_answers_the_next_question() {
    let shared = SharedEngine::new(Engine::default());
    let decider = Decider::new(
        Arc::clone(&shared),
        &DecisionsConfig::default(),
        Metrics::new(),
    );
    let ask = || {
        decider
            .decide(question(
                Some(seed_envelope()),
                vec![made("glm-5")],
                "glm-5",
            ))
            .unwrap()
    };
    assert_eq!(
        ask().unaudited_reason.as_deref(),
        Some("unknown_pricing_version")
    );
    shared.set(engine());
    assert_eq!(ask().decision, "within_envelope");
}

// ---- JSON ----

#[test]
fn json_accepts_money_and_counts_as_strings_or_numbers_and_camel_case_names() {
    let body = br#"{
        "envelope": {"pricing_source": "https://aiwave.live/api/pricing",
                     "pricingCheckedAt": "2026-08-22", "pricing_version": "a42d372ccf0b5dd13ecf71203521f9d2",
                     "billing_group": "vip", "max_incremental_usd": 0.015,
                     "max_attempts_after_first": "1", "allow_family_fallback": true,
                     "allowed_fallback_families": ["deepseek", "qwen", "glm"], "replay_safe": null},
        "service": "checkout",
        "attempts": [{"model": "deepseek-v4-flash", "input_tokens": "10000",
                      "cachedInputTokens": 4000, "output_cap": 8e2, "error_type": "timeout"}],
        "next": {"model": "glm-5", "input_tokens": 10000.0, "cached_input_tokens": "4000",
                 "output_cap": 800},
        "at": "2026-08-25T12:00:00Z"
    }"#;
    let parsed = request_from_json(body).unwrap();
    let mut expected = question(
        Some(seed_envelope()),
        vec![made("deepseek-v4-flash")],
        "glm-5",
    );
    expected.attempts[0].error_type = "timeout".into();
    assert_eq!(parsed, expected);
}

#[test]
fn json_errors_name_the_field() {
    let field = |body: &str| request_from_json(body.as_bytes()).unwrap_err().field;
    assert_eq!(
        field(r#"{"attempts": [{"model": "a"}, {"input_tokens": 1.5}]}"#),
        "attempts[1].input_tokens"
    );
    assert_eq!(
        field(r#"{"attempts": [{"model": "a", "output_reached_client": "yes"}]}"#),
        "attempts[0].output_reached_client"
    );
    assert_eq!(
        field(r#"{"envelope": {"max_attempts_after_first": true}}"#),
        "envelope.max_attempts_after_first"
    );
    assert_eq!(
        field(r#"{"envelope": {"max_attempts_after_first": 1e30}}"#),
        "envelope.max_attempts_after_first"
    );
    assert_eq!(field(r#"{"next": {"model": 7}}"#), "next.model");
    assert_eq!(
        field(r#"{"next": {"model": "glm-5", "error_type": 5}}"#),
        "next.error_type"
    );
    assert_eq!(field(r#"{"next": {"modle": "glm-5"}}"#), "next");
    assert_eq!(field(r#"{"attempts": {}}"#), "attempts");
    let unknown = request_from_json(br#"{"envelop": {}}"#).unwrap_err();
    assert_eq!(unknown.field, "request");
    assert!(
        unknown.problem.contains("unknown field `envelop`"),
        "{unknown}"
    );
    assert_eq!(field("[1, 2]"), "request");
    assert_eq!(field("{"), "request");
}

#[test]
fn json_next_may_carry_an_attempts_outcome_fields_which_mean_nothing_yet() {
    let parsed = request_from_json(
        br#"{"attempts": [{"model": "a"}],
             "next": {"model": "b", "output_reached_client": false, "error_type": ""}}"#,
    )
    .unwrap();
    assert_eq!(parsed.next.unwrap().model, "b");
}

#[test]
fn json_null_is_an_absent_value() {
    let parsed = request_from_json(
        br#"{"envelope": null, "service": null, "attempts": [{"model": "a", "input_tokens": null}],
             "next": {"model": "b", "output_cap": null}, "at": null}"#,
    )
    .unwrap();
    assert_eq!(parsed.envelope, None);
    assert_eq!(parsed.attempts[0].input_tokens, None);
    assert_eq!(parsed.next.unwrap().output_cap, None);
}

#[test]
fn json_response_carries_every_field_with_nulls_and_defaults() {
    let response = answer(question(None, vec![made("glm-5")], "glm-5"), false);
    let json: serde_json::Value = serde_json::from_slice(&response_to_json(&response)).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "allow": false,
            "decision": "unaudited",
            "violations": [],
            "unaudited_reason": "no_envelope",
            "attempt_index": 1,
            "estimated_incremental_usd": null,
            "cumulative_incremental_usd": null,
            "remaining_envelope_usd": null,
            "pricing_version": null,
            "pricing_checked_at": null,
            "pricing_digest": null,
            "envelope_source": null,
            "decision_reason": "retry 1 of glm-5 is unaudited: no_envelope",
        })
    );
}

// ---- Consistency with the audit ----

/// The spans an SDK writes for the question's attempts with `next` made as attempt k: a logical
/// request span with the envelope (JSON form) and task type, one attempt span per attempt, all
/// started at `at`. Counts go as ints or as decimal strings, which SPEC §2 reads alike.
fn as_spans(
    q: &DecideRequest,
    now: DateTime<Utc>,
    counts_as_strings: bool,
) -> ExportTraceServiceRequest {
    let start = if q.at.is_empty() {
        now
    } else {
        DateTime::parse_from_rfc3339(&q.at)
            .unwrap()
            .with_timezone(&Utc)
    };
    let start = u64::try_from(start.timestamp_nanos_opt().unwrap()).unwrap();
    let count = |n: i64| {
        if counts_as_strings {
            Value::StringValue(n.to_string())
        } else {
            Value::IntValue(n)
        }
    };
    let span = |id: u8, attributes| Span {
        trace_id: vec![3; 16],
        span_id: vec![id; 8],
        parent_span_id: if id == 0xff { vec![] } else { vec![0xff; 8] },
        name: "llm".into(),
        start_time_unix_nano: start,
        end_time_unix_nano: start,
        attributes,
        ..Default::default()
    };
    let mut logical = vec![
        kv(
            attr::SPAN_ROLE,
            Value::StringValue(attr::ROLE_LOGICAL_REQUEST.into()),
        ),
        kv(attr::REQUEST_ID, Value::StringValue("req".into())),
    ];
    if !q.task_type.is_empty() {
        logical.push(kv(attr::TASK_TYPE, Value::StringValue(q.task_type.clone())));
    }
    if let Some(e) = &q.envelope {
        let mut json = serde_json::Map::new();
        let mut text = |key: &str, value: &str| {
            if !value.is_empty() {
                json.insert(key.into(), value.into());
            }
        };
        text("pricing_source", &e.pricing_source);
        text("pricing_checked_at", &e.pricing_checked_at);
        text("pricing_version", &e.pricing_version);
        text("billing_group", &e.billing_group);
        text("max_incremental_usd", &e.max_incremental_usd);
        text("task_type", &e.task_type);
        if let Some(n) = e.max_attempts_after_first {
            json.insert("max_attempts_after_first".into(), n.into());
        }
        if let Some(b) = e.allow_family_fallback {
            json.insert("allow_family_fallback".into(), b.into());
        }
        if !e.allowed_fallback_families.is_empty() {
            json.insert(
                "allowed_fallback_families".into(),
                e.allowed_fallback_families.clone().into(),
            );
        }
        if let Some(b) = e.replay_safe {
            json.insert("replay_safe".into(), b.into());
        }
        let json = serde_json::json!({ "retry_spend_envelope": json }).to_string();
        logical.push(kv(attr::ENVELOPE_JSON, Value::StringValue(json)));
    }
    let mut spans = vec![span(0xff, logical)];
    let next = q.next.clone().unwrap();
    let made = q.attempts.iter().map(|a| {
        (
            a.model.clone(),
            [a.input_tokens, a.cached_input_tokens, a.output_cap],
            a.output_reached_client,
            a.error_type.clone(),
        )
    });
    let proposed = (
        next.model,
        [next.input_tokens, next.cached_input_tokens, next.output_cap],
        None,
        String::new(),
    );
    for (index, (model, [input, cached, cap], reached, error)) in made.chain([proposed]).enumerate()
    {
        let mut attributes = vec![
            kv(
                attr::SPAN_ROLE,
                Value::StringValue(attr::ROLE_ATTEMPT.into()),
            ),
            kv(attr::REQUEST_ID, Value::StringValue("req".into())),
            kv(attr::ATTEMPT_INDEX, Value::IntValue(index as i64)),
        ];
        if !model.is_empty() {
            attributes.push(kv(attr::REQUEST_MODEL, Value::StringValue(model)));
        }
        for (key, value) in [
            (attr::INPUT_TOKENS, input),
            (attr::CACHE_READ_INPUT_TOKENS, cached),
            (attr::REQUEST_MAX_TOKENS, cap),
        ] {
            if let Some(n) = value {
                attributes.push(kv(key, count(n)));
            }
        }
        if let Some(reached) = reached {
            attributes.push(kv(attr::OUTPUT_REACHED_CLIENT, Value::BoolValue(reached)));
        }
        if !error.is_empty() {
            attributes.push(kv(attr::ERROR_TYPE, Value::StringValue(error)));
        }
        spans.push(span(index as u8 + 1, attributes));
    }
    let resource = (!q.service.is_empty()).then(|| Resource {
        attributes: vec![kv(
            attr::SERVICE_NAME,
            Value::StringValue(q.service.clone()),
        )],
        ..Default::default()
    });
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource,
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// The row the audit writes for attempt k when the spans arrive, through the processor `replay`
/// and `serve` run, with the same engine.
fn audited_row(engine: &Engine, spans: &ExportTraceServiceRequest, k: i32) -> AttemptRow {
    let facts = crate::engine::span_facts_with(spans, engine.policies.attribute_keys());
    let rows = Processor::rows_of(
        engine.clone(),
        facts,
        std::time::Instant::now(),
        |_, _, _| {},
    );
    assert_eq!(rows.len() as i32, k + 1, "one row per attempt: {rows:#?}");
    rows.into_iter()
        .find(|row| row.attempt_index == k)
        .expect("a row for attempt k")
}

fn pick<T: Clone + std::fmt::Debug + 'static>(weighted: Vec<(u32, T)>) -> impl Strategy<Value = T> {
    prop::strategy::Union::new_weighted(
        weighted
            .into_iter()
            .map(|(w, v)| (w, Just(v).boxed()))
            .collect(),
    )
}

fn text(weighted: &[(u32, &str)]) -> impl Strategy<Value = String> {
    pick(weighted.iter().map(|&(w, s)| (w, s.to_owned())).collect())
}

const MODELS: &[(u32, &str)] = &[
    (4, "deepseek-v4-flash"),
    (2, "deepseek-v4-pro"),
    (4, "glm-5"),
    (2, "kimi-k2.6"),
    (2, "qwen3.5-122b-a10b"),
    (1, "gpt-unknown"),
];

fn count(usual: i64, range: std::ops::Range<i64>) -> impl Strategy<Value = Option<i64>> {
    prop_oneof![
        6 => Just(Some(usual)),
        3 => range.prop_map(Some),
        1 => Just(None),
        1 => Just(Some(-5)),
    ]
}

fn cached_count() -> impl Strategy<Value = Option<i64>> {
    prop_oneof![
        3 => Just(None),
        4 => (0i64..=5_000).prop_map(Some),
        1 => Just(Some(50_000)),
    ]
}

fn envelope_strategy() -> impl Strategy<Value = Envelope> {
    (
        (
            text(&[(8, SOURCE), (1, "https://example.com/pricing"), (1, "")]),
            text(&[
                (7, "2026-08-22"),
                (1, "2026-08-22T10:00:00Z"),
                (1, "2026-08-20"),
                (1, ""),
            ]),
            text(&[(8, VERSION), (1, "deadbeef"), (1, "")]),
            text(&[(5, "vip"), (3, "default"), (1, "gold"), (1, "")]),
            text(&[
                (3, "0.015"),
                (2, "0.005"),
                (2, "0.5"),
                (1, "1.5e-2"),
                (1, "0"),
                (1, ""),
            ]),
        ),
        (
            prop_oneof![
                6 => (0i64..=3).prop_map(Some),
                1 => Just(None),
                1 => Just(Some(5_000_000_000)),
            ],
            prop::option::of(any::<bool>()),
            prop::sample::subsequence(vec!["deepseek", "glm", "qwen", "kimi"], 0..=4),
            prop::option::of(any::<bool>()),
            text(&[(8, ""), (1, "support_summary"), (1, "code_patch")]),
        ),
    )
        .prop_map(
            |(
                (source, checked_at, version, group, max_usd),
                (max_attempts, allow_family, families, replay_safe, task_type),
            )| Envelope {
                pricing_source: source,
                pricing_checked_at: checked_at,
                pricing_version: version,
                billing_group: group,
                max_incremental_usd: max_usd,
                max_attempts_after_first: max_attempts,
                allow_family_fallback: allow_family,
                allowed_fallback_families: families.into_iter().map(str::to_owned).collect(),
                replay_safe,
                task_type,
                ..Default::default()
            },
        )
}

fn attempt_strategy() -> impl Strategy<Value = Attempt> {
    (
        prop_oneof![8 => text(MODELS), 1 => Just(String::new())],
        count(10_000, 0..200_000),
        cached_count(),
        count(800, 0..100_000),
        prop_oneof![4 => Just(None), 2 => Just(Some(false)), 1 => Just(Some(true))],
        text(&[(3, ""), (1, "timeout")]),
    )
        .prop_map(|(model, input, cached, cap, reached, error)| Attempt {
            model,
            input_tokens: input,
            cached_input_tokens: cached,
            output_cap: cap,
            output_reached_client: reached,
            error_type: error,
            ..Default::default()
        })
}

fn question_strategy() -> impl Strategy<Value = DecideRequest> {
    (
        prop_oneof![3 => envelope_strategy().prop_map(Some), 1 => Just(None)],
        text(&[(2, "checkout"), (2, "support-bot"), (1, "batch-1"), (1, "")]),
        text(&[(2, ""), (2, "support_summary"), (1, "code_patch")]),
        prop::collection::vec(attempt_strategy(), 1..=4),
        (
            text(MODELS),
            count(10_000, 0..200_000),
            cached_count(),
            count(800, 0..100_000),
        ),
        text(&[
            (6, FRESH),
            (2, "2026-10-01T00:00:00Z"),
            (1, "2026-08-01T00:00:00Z"),
            (1, ""),
        ]),
    )
        .prop_map(
            |(envelope, service, task_type, attempts, (model, input, cached, cap), at)| {
                DecideRequest {
                    envelope,
                    service,
                    task_type,
                    attempts,
                    next: Some(ProposedAttempt {
                        model,
                        input_tokens: input,
                        cached_input_tokens: cached,
                        output_cap: cap,
                        ..Default::default()
                    }),
                    at,
                }
            },
        )
}

/// The answer the audit's row gives, as the service words it.
fn expected_answer(row: AttemptRow, envelope_in_request: bool) -> DecideResponse {
    DecideResponse {
        allow: row.decision == Decision::WithinEnvelope,
        decision: row.decision.as_str().into(),
        violations: row.violations.iter().map(|v| v.as_str().into()).collect(),
        unaudited_reason: row.unaudited_reason.map(|r| r.as_str().into()),
        attempt_index: row.attempt_index,
        estimated_incremental_usd: row
            .estimated_incremental_usd
            .map(|d| d.normalize().to_string()),
        cumulative_incremental_usd: row
            .cumulative_incremental_usd
            .map(|d| d.normalize().to_string()),
        remaining_envelope_usd: row
            .remaining_envelope_usd
            .map(|d| d.normalize().to_string()),
        pricing_version: row.pricing_version.as_deref().map(str::to_owned),
        pricing_checked_at: row
            .pricing_checked_at
            .map(|d| d.format("%Y-%m-%d").to_string()),
        pricing_digest: row.pricing_digest.as_deref().map(str::to_owned),
        envelope_source: match row.envelope_source.as_deref() {
            Some("span") if envelope_in_request => Some("request".into()),
            other => other.map(str::to_owned),
        },
        decision_reason: row.decision_reason,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    /// SPEC §7's promise: the answer for `next` is the row the audit writes for attempt k when
    /// the same attempts, with `next` made as attempt k, arrive as spans with the same envelope
    /// and start date.
    #[test]
    fn the_answer_is_the_row_the_audit_writes(
        q in question_strategy(),
        counts_as_strings in any::<bool>(),
    ) {
        let engine = engine();
        let k = q.attempts.len() as i32;
        let spans = as_spans(&q, now(), counts_as_strings);
        let in_request = q.envelope.is_some();
        let (row, question) = judge(&engine, q, now()).unwrap();
        let allow = allowed(row.decision, false);
        let response = respond(row, &question, allow);
        let expected = expected_answer(audited_row(&engine, &spans, k), in_request);
        prop_assert_eq!(response, expected);
    }
}

/// The random questions reach every decision, unaudited reason and violation a question can
/// reach. A question always has attempt 0 and every index up to k−1, names no SDK estimate and
/// no served model: so never `first_attempt`, `first_attempt_missing`, `earlier_attempt_missing`
/// or `sdk_estimate_mismatch`.
#[test]
fn random_questions_cover_every_reachable_outcome() {
    let engine = engine();
    let strategy = question_strategy();
    let mut runner = TestRunner::deterministic();
    let (mut decisions, mut reasons, mut violations) =
        (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    for _ in 0..4_000 {
        let q = strategy.new_tree(&mut runner).unwrap().current();
        let (row, _) = judge(&engine, q, now()).unwrap();
        decisions.insert(row.decision);
        reasons.extend(row.unaudited_reason);
        violations.extend(row.violations);
    }
    let unreachable_reasons = [
        UnauditedReason::FirstAttemptMissing,
        UnauditedReason::EarlierAttemptMissing,
    ];
    assert_eq!(
        decisions,
        Decision::ALL
            .iter()
            .copied()
            .filter(|d| *d != Decision::FirstAttempt)
            .collect()
    );
    assert_eq!(
        reasons,
        UnauditedReason::ALL
            .iter()
            .copied()
            .filter(|r| !unreachable_reasons.contains(r))
            .collect()
    );
    assert_eq!(
        violations,
        Violation::ALL
            .iter()
            .copied()
            .filter(|v| *v != Violation::SdkEstimateMismatch)
            .collect()
    );
}

fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[ -~]{0,12}",
        text(MODELS),
        Just(VERSION.to_owned()),
        Just("2026-08-22".to_owned()),
        Just("-1e30".to_owned()),
    ]
}

fn any_count() -> impl Strategy<Value = Option<i64>> {
    prop_oneof![
        Just(None),
        any::<i64>().prop_map(Some),
        (0i64..100_000).prop_map(Some)
    ]
}

fn hostile_question() -> impl Strategy<Value = DecideRequest> {
    let envelope = (
        (any_text(), any_text(), any_text(), any_text(), any_text()),
        (
            any_count(),
            prop::option::of(any::<bool>()),
            prop::collection::vec(any_text(), 0..3),
            prop::option::of(any::<bool>()),
            any_text(),
        ),
    )
        .prop_map(|((a, b, c, d, e), (f, g, h, i, j))| Envelope {
            pricing_source: a,
            pricing_checked_at: b,
            pricing_version: c,
            billing_group: d,
            max_incremental_usd: e,
            max_attempts_after_first: f,
            allow_family_fallback: g,
            allowed_fallback_families: h,
            replay_safe: i,
            task_type: j,
            ..Default::default()
        });
    let attempt = (
        any_text(),
        any_count(),
        any_count(),
        any_count(),
        prop::option::of(any::<bool>()),
        any_text(),
    )
        .prop_map(|(model, input, cached, cap, reached, error)| Attempt {
            model,
            input_tokens: input,
            cached_input_tokens: cached,
            output_cap: cap,
            output_reached_client: reached,
            error_type: error,
            ..Default::default()
        });
    let next = (any_text(), any_count(), any_count(), any_count()).prop_map(
        |(model, input, cached, cap)| ProposedAttempt {
            model,
            input_tokens: input,
            cached_input_tokens: cached,
            output_cap: cap,
            ..Default::default()
        },
    );
    (
        prop::option::of(envelope),
        any_text(),
        any_text(),
        prop::collection::vec(attempt, 0..4),
        prop::option::of(next),
        prop_oneof![
            any_text(),
            Just(FRESH.to_owned()),
            Just("9999-12-31T23:59:59Z".to_owned())
        ],
    )
        .prop_map(
            |(envelope, service, task_type, attempts, next, at)| DecideRequest {
                envelope,
                service,
                task_type,
                attempts,
                next,
                at,
            },
        )
}

proptest! {
    /// Whatever a caller sends, the answer is an answer or a refusal naming a field: no panic,
    /// and the attempt judged is always attempt k.
    #[test]
    fn any_question_is_answered_or_refused_naming_a_field(q in hostile_question()) {
        let k = q.attempts.len() as i32;
        match judge(&engine(), q, now()) {
            Ok((row, _)) => prop_assert_eq!(row.attempt_index, k),
            Err(DecideError::Malformed(m)) => prop_assert!(!m.field.is_empty()),
            Err(e) => prop_assert!(false, "{e}"),
        }
    }

    /// Any body, JSON or not, is read or refused; never a panic.
    #[test]
    fn any_body_is_read_or_refused(body in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = request_from_json(&body);
    }

    /// JSON of the right shape with values of any type is read or refused naming a field.
    #[test]
    fn any_json_values_are_read_or_refused_naming_a_field(
        values in prop::collection::vec(
            prop_oneof![
                Just("null".to_owned()), Just("true".to_owned()), Just("[]".to_owned()),
                Just("{}".to_owned()), Just("1e999".to_owned()), Just("-0".to_owned()),
                "-?[1-9][0-9]{0,24}(\\.[0-9]{1,5})?".prop_map(|s| s),
                r#""[ !#-\[\]-~]{0,8}""#.prop_map(|s| s),
            ],
            8,
        ),
    ) {
        let body = format!(
            r#"{{"envelope": {{"max_incremental_usd": {}, "max_attempts_after_first": {}}},
                "service": {}, "attempts": [{{"model": {}, "input_tokens": {}}}],
                "next": {{"model": {}, "output_cap": {}}}, "at": {}}}"#,
            values[0], values[1], values[2], values[3], values[4], values[5], values[6], values[7]
        );
        if let Err(m) = request_from_json(body.as_bytes()) {
            prop_assert!(!m.field.is_empty() && m.field != "request", "{}: {}", body, m);
        }
    }
}

#[test]
fn a_proposed_attempt_without_a_cap_is_planned_with_the_envelopes_assumed_cap() {
    let mut envelope = seed_envelope();
    envelope.assumed_output_cap = Some(1_000);
    let mut q = question(Some(envelope), vec![made("deepseek-v4-flash")], "glm-5");
    if let Some(next) = q.next.as_mut() {
        next.output_cap = None;
    }
    let response = answer(q, false);
    // (6,000 × 0.775 + 4,000 × 0.258065 + 1,000 × 2.48) / 1e6
    assert_eq!(
        response.estimated_incremental_usd.as_deref(),
        Some("0.00816226")
    );
    assert_eq!(response.decision, "within_envelope");
}

#[test]
fn cache_write_tokens_count_toward_invalid_usage_as_on_spans() {
    let mut q = question(
        Some(seed_envelope()),
        vec![made("deepseek-v4-flash")],
        "glm-5",
    );
    if let Some(next) = q.next.as_mut() {
        next.cache_write_input_tokens = Some(7_000);
    }
    let response = answer(q, false);
    assert_eq!(response.unaudited_reason.as_deref(), Some("invalid_usage"));
    assert!(!response.allow);
}
