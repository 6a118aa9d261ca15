use std::str::FromStr;
use std::sync::Arc;

use chrono::NaiveDate;
use rust_decimal::Decimal;

use super::*;
use crate::assemble::GroupKey;
use crate::contract::{parse_envelope_json, Count, EnvelopeFields, SpanKind};
use crate::pricing::Snapshot;
use crate::record::UnauditedReason as R;

const SNAPSHOT: &str = include_str!("../../config/pricing/2026-08-22-aiwave.json");
const VERSION: &str = "a42d372ccf0b5dd13ecf71203521f9d2";
const SOURCE: &str = "https://aiwave.live/api/pricing";
/// 2026-08-25T12:00:00Z, three days after the snapshot was checked.
const T0: u64 = 1_787_659_200_000_000_000;
const SECOND: u64 = 1_000_000_000;
const DAY: u64 = 86_400 * SECOND;

fn d(s: &str) -> Decimal {
    Decimal::from_str(s).unwrap()
}

fn book() -> PricingBook {
    let mut book = PricingBook::default();
    book.insert(Snapshot::from_bytes("aiwave.json".as_ref(), SNAPSHOT.as_bytes()).unwrap())
        .unwrap();
    book
}

/// The seed's policy, with room for two retries.
fn envelope() -> EnvelopeFields {
    EnvelopeFields {
        present: true,
        pricing_source: Some(SOURCE.into()),
        pricing_checked_at: NaiveDate::from_ymd_opt(2026, 8, 22),
        pricing_version: Some(VERSION.into()),
        billing_group: Some("vip".into()),
        max_incremental_usd: Some(d("0.015")),
        max_attempts_after_first: Some(2),
        allow_family_fallback: Some(true),
        allowed_fallback_families: Some(vec!["deepseek".into(), "glm".into(), "qwen".into()]),
        task_type: Some("support_summary".into()),
        ..Default::default()
    }
}

/// An attempt with the worked example's usage: 10,000 input (4,000 cached), cap 800, 300 out.
fn attempt(index: i32, model: &str) -> SpanFacts {
    SpanFacts {
        trace_id: [7; 16],
        span_id: [index as u8 + 1; 8],
        parent_span_id: Some([99; 8]),
        service_name: Arc::from("checkout"),
        start_time_unix_nano: T0 + index as u64 * SECOND,
        end_time_unix_nano: T0 + index as u64 * SECOND + 500_000_000,
        kind: SpanKind::Attempt,
        request_id: Some("req-1".into()),
        attempt_index: Some(index),
        attempt_count: None,
        envelope: EnvelopeFields::default(),
        envelope_json: None,
        request_model: Some(model.into()),
        response_model: None,
        provider: Some("aiwave".into()),
        model_family: None,
        input_tokens: Count::Value(10_000),
        cached_input_tokens: Count::Value(4_000),
        output_tokens: Count::Value(300),
        output_cap: Count::Value(800),
        output_reached_client: None,
        error_type: None,
        sdk_estimated_incremental_usd: None,
        sdk_remaining_envelope_usd: None,
        sdk_decision_reason: None,
    }
}

fn logical(env: EnvelopeFields) -> SpanFacts {
    SpanFacts {
        span_id: [99; 8],
        parent_span_id: None,
        kind: SpanKind::LogicalRequest,
        attempt_index: None,
        request_model: None,
        input_tokens: Count::Missing,
        cached_input_tokens: Count::Missing,
        output_tokens: Count::Missing,
        output_cap: Count::Missing,
        envelope: env,
        ..attempt(0, "")
    }
}

fn request_with(env: EnvelopeFields, attempts: Vec<SpanFacts>) -> Request {
    let key = GroupKey::RequestId {
        trace_id: [7; 16],
        request_id: "req-1".into(),
    };
    Request {
        key,
        logical: Some(logical(env)),
        attempts,
        evaluated: vec![],
        attempt_source: crate::record::AttemptSource::Declared,
    }
}

fn eval_with(env: EnvelopeFields, attempts: Vec<SpanFacts>) -> Vec<AttemptRow> {
    evaluate(
        &request_with(env, attempts),
        &book(),
        &RulesConfig::default(),
    )
}

fn eval(attempts: Vec<SpanFacts>) -> Vec<AttemptRow> {
    eval_with(envelope(), attempts)
}

fn reason_of(env: EnvelopeFields, attempts: Vec<SpanFacts>) -> Option<R> {
    eval_with(env, attempts).last().unwrap().unaudited_reason
}

fn with(mut a: SpanFacts, f: impl FnOnce(&mut SpanFacts)) -> SpanFacts {
    f(&mut a);
    a
}

fn env_with(f: impl FnOnce(&mut EnvelopeFields)) -> EnvelopeFields {
    let mut e = envelope();
    f(&mut e);
    e
}

#[test]
fn worked_example_prices_planned_cost_exactly() {
    let rows = eval(vec![
        attempt(0, "deepseek-v4-flash"),
        attempt(1, "deepseek-v4-flash"),
    ]);
    assert_eq!(rows[0].planned_attempt_usd, Some(d("0.0028068")));
    assert_eq!(rows[1].planned_attempt_usd, Some(d("0.0028068")));
    // actual: 6000 * 0.319 + 4000 * 0.0318 + 300 * 0.957 = 2328.3 per million
    assert_eq!(rows[1].actual_attempt_usd, Some(d("0.0023283")));
    assert_eq!(rows[1].group_ratio, Some(d("1")));
}

#[test]
fn default_billing_group_triples_the_price() {
    let env = env_with(|e| e.billing_group = Some("default".into()));
    let rows = eval_with(
        env,
        vec![
            attempt(0, "deepseek-v4-flash"),
            attempt(1, "deepseek-v4-flash"),
        ],
    );
    assert_eq!(rows[1].planned_attempt_usd, Some(d("0.0084204")));
    assert_eq!(rows[1].group_ratio, Some(d("3")));
}

#[test]
fn first_attempt_is_base_with_zero_incremental_and_whole_envelope() {
    let rows = eval(vec![attempt(0, "glm-5")]);
    let first = &rows[0];
    assert_eq!(first.decision, Decision::FirstAttempt);
    assert_eq!(first.spend_class, SpendClass::Base);
    assert!(first.audited);
    assert_eq!(first.estimated_incremental_usd, Some(Decimal::ZERO));
    assert_eq!(first.cumulative_incremental_usd, Some(Decimal::ZERO));
    assert_eq!(first.remaining_envelope_usd, Some(d("0.015")));
    assert_eq!(first.violations, vec![]);
}

#[test]
fn retry_within_envelope_accumulates_incremental_spend() {
    let rows = eval(vec![attempt(0, "glm-5"), attempt(1, "glm-5")]);
    let retry = &rows[1];
    // 6000 * 0.775 + 4000 * 0.258065 + 800 * 2.48 = 7666.26 per million
    assert_eq!(retry.estimated_incremental_usd, Some(d("0.00766626")));
    assert_eq!(retry.cumulative_incremental_usd, Some(d("0.00766626")));
    assert_eq!(retry.remaining_envelope_usd, Some(d("0.00733374")));
    assert_eq!(retry.decision, Decision::WithinEnvelope);
    assert_eq!(retry.spend_class, SpendClass::Retry);
    assert_eq!(retry.original_model.as_deref(), Some("glm-5"));
    assert_eq!(retry.original_family.as_deref(), Some("glm"));
    assert!(retry.audited);
}

#[test]
fn second_retry_over_budget_is_over_envelope() {
    let rows = eval(vec![
        attempt(0, "glm-5"),
        attempt(1, "glm-5"),
        attempt(2, "glm-5"),
    ]);
    let second = &rows[2];
    assert_eq!(second.cumulative_incremental_usd, Some(d("0.01533252")));
    assert_eq!(second.remaining_envelope_usd, Some(d("-0.00033252")));
    assert_eq!(second.violations, vec![Violation::OverEnvelope]);
    assert_eq!(second.decision, Decision::OverEnvelope);
    assert_eq!(
        second.decision_reason,
        "retry 2 of glm-5 would bring incremental spend to 0.01533252 USD, over the 0.015 envelope"
    );
}

#[test]
fn cumulative_is_the_sum_of_incrementals_across_models() {
    let rows = eval(vec![
        attempt(0, "glm-5"),
        attempt(1, "deepseek-v4-flash"),
        attempt(2, "qwen3.5-122b-a10b"),
    ]);
    // qwen has no cached price: 10000 * 0.246575 + 800 * 1.862 = 3955.35 per million
    assert_eq!(rows[2].estimated_incremental_usd, Some(d("0.00395535")));
    assert_eq!(
        rows[2].cumulative_incremental_usd,
        Some(d("0.0028068") + d("0.00395535"))
    );
}

#[test]
fn retry_after_partial_stream_is_replay_unsafe() {
    let first = with(attempt(0, "glm-5"), |a| {
        a.output_reached_client = Some(true)
    });
    let rows = eval(vec![first, attempt(1, "glm-5")]);
    assert_eq!(rows[1].violations, vec![Violation::ReplayUnsafe]);
    assert_eq!(rows[1].decision, Decision::ReplayUnsafe);
}

#[test]
fn replay_safe_envelope_allows_retry_after_partial_stream() {
    let first = with(attempt(0, "glm-5"), |a| {
        a.output_reached_client = Some(true)
    });
    let env = env_with(|e| e.replay_safe = Some(true));
    let rows = eval_with(env, vec![first, attempt(1, "glm-5")]);
    assert_eq!(rows[1].decision, Decision::WithinEnvelope);
}

#[test]
fn partial_output_of_the_retry_itself_does_not_make_it_unsafe() {
    let retry = with(attempt(1, "glm-5"), |a| {
        a.output_reached_client = Some(true)
    });
    let rows = eval(vec![attempt(0, "glm-5"), retry]);
    assert_eq!(rows[1].decision, Decision::WithinEnvelope);
}

#[test]
fn retry_beyond_attempt_limit_is_over_attempts() {
    let env = env_with(|e| e.max_attempts_after_first = Some(1));
    let rows = eval_with(
        env,
        vec![
            attempt(0, "deepseek-v4-flash"),
            attempt(1, "deepseek-v4-flash"),
            attempt(2, "deepseek-v4-flash"),
        ],
    );
    assert_eq!(rows[1].decision, Decision::WithinEnvelope);
    assert_eq!(rows[2].violations, vec![Violation::OverAttempts]);
    assert_eq!(rows[2].decision, Decision::OverAttempts);
}

#[test]
fn fallback_to_an_allowed_family_is_a_fallback() {
    let rows = eval(vec![attempt(0, "glm-5"), attempt(1, "deepseek-v4-flash")]);
    assert_eq!(rows[1].violations, vec![]);
    assert_eq!(rows[1].spend_class, SpendClass::Fallback);
    assert_eq!(rows[1].retry_family.as_deref(), Some("deepseek"));
}

#[test]
fn fallback_to_a_family_not_allowed_is_routing_drift() {
    let rows = eval(vec![attempt(0, "glm-5"), attempt(1, "kimi-k2.6")]);
    assert_eq!(rows[1].violations, vec![Violation::RoutingDrift]);
    assert_eq!(rows[1].decision, Decision::RoutingDrift);
    assert_eq!(rows[1].spend_class, SpendClass::Drift);
}

#[test]
fn family_change_without_allow_family_fallback_is_routing_drift() {
    let env = env_with(|e| e.allow_family_fallback = None);
    let rows = eval_with(
        env,
        vec![attempt(0, "glm-5"), attempt(1, "deepseek-v4-flash")],
    );
    assert_eq!(rows[1].decision, Decision::RoutingDrift);
}

#[test]
fn family_attribute_overrides_the_snapshot_family() {
    let retry = with(attempt(1, "deepseek-v4-flash"), |a| {
        a.model_family = Some("glm".into())
    });
    let env = env_with(|e| e.allow_family_fallback = Some(false));
    let rows = eval_with(env, vec![attempt(0, "glm-5"), retry]);
    assert_eq!(rows[1].decision, Decision::WithinEnvelope);
    assert_eq!(rows[1].spend_class, SpendClass::Fallback);
}

#[test]
fn gateway_serving_another_model_is_routing_drift_even_on_the_first_attempt() {
    let first = with(attempt(0, "gpt-4o"), |a| {
        a.response_model = Some("openai/gpt-4o".into())
    });
    let rows = eval_with(EnvelopeFields::default(), vec![first]);
    assert_eq!(rows[0].violations, vec![Violation::RoutingDrift]);
    assert_eq!(rows[0].decision, Decision::FirstAttempt);
}

#[test]
fn dated_variant_of_the_requested_model_is_not_drift() {
    for served in ["gpt-4o-2024-08-06", "gpt-4o-mini", "gpt-4o"] {
        let first = with(attempt(0, "gpt-4o"), |a| {
            a.response_model = Some(served.into())
        });
        assert_eq!(eval(vec![first])[0].violations, vec![], "{served}");
    }
    let first = with(attempt(0, "gpt-4o"), |a| {
        a.response_model = Some("GPT-4o".into())
    });
    assert_eq!(
        eval(vec![first])[0].violations,
        vec![Violation::RoutingDrift]
    );
}

#[test]
fn without_an_envelope_only_served_model_drift_applies() {
    let first = with(attempt(0, "glm-5"), |a| {
        a.output_reached_client = Some(true)
    });
    let rows = eval_with(
        EnvelopeFields::default(),
        vec![first, attempt(1, "kimi-k2.6"), attempt(2, "glm-5")],
    );
    assert_eq!(rows[1].violations, vec![]);
    assert_eq!(rows[1].decision, Decision::Unaudited);
    assert_eq!(rows[1].unaudited_reason, Some(R::NoEnvelope));
    let served = with(attempt(1, "glm-5"), |a| {
        a.response_model = Some("kimi-k2.6".into())
    });
    let rows = eval_with(EnvelopeFields::default(), vec![attempt(0, "glm-5"), served]);
    assert_eq!(rows[1].decision, Decision::RoutingDrift);
}

#[test]
fn sdk_estimate_far_from_ours_is_flagged_not_decided() {
    let retry = with(attempt(1, "deepseek-v4-flash"), |a| {
        a.sdk_estimated_incremental_usd = Some(d("0.0028080"))
    });
    let rows = eval(vec![attempt(0, "deepseek-v4-flash"), retry]);
    assert_eq!(rows[1].violations, vec![Violation::SdkEstimateMismatch]);
    assert_eq!(rows[1].decision, Decision::WithinEnvelope);
}

#[test]
fn sdk_estimate_within_a_micro_dollar_is_not_flagged() {
    let retry = with(attempt(1, "deepseek-v4-flash"), |a| {
        a.sdk_estimated_incremental_usd = Some(d("0.0028078"))
    });
    assert_eq!(
        eval(vec![attempt(0, "deepseek-v4-flash"), retry])[1].violations,
        vec![]
    );
}

#[test]
fn no_envelope() {
    assert_eq!(
        reason_of(EnvelopeFields::default(), vec![attempt(0, "glm-5")]),
        Some(R::NoEnvelope)
    );
}

#[test]
fn envelope_incomplete_without_budget_or_attempt_limit() {
    let env = env_with(|e| e.max_incremental_usd = None);
    assert_eq!(
        reason_of(env, vec![attempt(0, "glm-5")]),
        Some(R::EnvelopeIncomplete)
    );
    let env = env_with(|e| e.max_attempts_after_first = None);
    assert_eq!(
        reason_of(env, vec![attempt(0, "glm-5")]),
        Some(R::EnvelopeIncomplete)
    );
}

#[test]
fn envelope_incomplete_when_the_json_policy_does_not_parse() {
    let mut first = attempt(0, "glm-5");
    first.envelope_json = Some(parse_envelope_json("{not json"));
    assert_eq!(
        reason_of(EnvelopeFields::default(), vec![first]),
        Some(R::EnvelopeIncomplete)
    );
}

#[test]
fn pricing_version_missing() {
    let env = env_with(|e| e.pricing_version = None);
    assert_eq!(
        reason_of(env, vec![attempt(0, "glm-5")]),
        Some(R::PricingVersionMissing)
    );
}

#[test]
fn pricing_source_missing() {
    let env = env_with(|e| e.pricing_source = None);
    assert_eq!(
        reason_of(env, vec![attempt(0, "glm-5")]),
        Some(R::PricingSourceMissing)
    );
}

#[test]
fn pricing_checked_at_missing() {
    let env = env_with(|e| e.pricing_checked_at = None);
    assert_eq!(
        reason_of(env, vec![attempt(0, "glm-5")]),
        Some(R::PricingCheckedAtMissing)
    );
}

#[test]
fn unknown_pricing_version_leaves_money_null() {
    let env = env_with(|e| e.pricing_version = Some("nope".into()));
    let rows = eval_with(env, vec![attempt(0, "glm-5"), attempt(1, "glm-5")]);
    assert_eq!(rows[1].unaudited_reason, Some(R::UnknownPricingVersion));
    assert_eq!(rows[1].decision, Decision::Unaudited);
    assert_eq!(rows[1].planned_attempt_usd, None);
    assert_eq!(rows[1].pricing_digest, None);
}

#[test]
fn pricing_metadata_mismatch_on_source_or_date() {
    let env = env_with(|e| e.pricing_source = Some("https://example.com/prices".into()));
    assert_eq!(
        reason_of(env, vec![attempt(0, "glm-5")]),
        Some(R::PricingMetadataMismatch)
    );
    let env = env_with(|e| e.pricing_checked_at = NaiveDate::from_ymd_opt(2026, 8, 21));
    let rows = eval_with(env, vec![attempt(0, "glm-5"), attempt(1, "glm-5")]);
    assert_eq!(rows[1].unaudited_reason, Some(R::PricingMetadataMismatch));
    // Figures are filled in whenever their inputs are known, audited or not.
    assert_eq!(rows[1].planned_attempt_usd, Some(d("0.00766626")));
}

#[test]
fn pricing_stale_after_max_age_whole_days() {
    let at_limit = with(attempt(0, "glm-5"), |a| {
        a.start_time_unix_nano = T0 + 27 * DAY
    });
    assert_eq!(reason_of(envelope(), vec![at_limit]), None);
    let past_limit = with(attempt(0, "glm-5"), |a| {
        a.start_time_unix_nano = T0 + 28 * DAY
    });
    assert_eq!(
        reason_of(envelope(), vec![past_limit]),
        Some(R::PricingStale)
    );
}

#[test]
fn unknown_billing_group_leaves_money_null() {
    let env = env_with(|e| e.billing_group = Some("platinum".into()));
    let rows = eval_with(env, vec![attempt(0, "glm-5"), attempt(1, "glm-5")]);
    assert_eq!(rows[1].unaudited_reason, Some(R::UnknownBillingGroup));
    assert_eq!(rows[1].planned_attempt_usd, None);
    assert_eq!(rows[1].cumulative_incremental_usd, None);
    let env = env_with(|e| e.billing_group = None);
    assert_eq!(
        reason_of(env, vec![attempt(0, "glm-5")]),
        Some(R::UnknownBillingGroup)
    );
}

#[test]
fn model_not_in_pricing() {
    assert_eq!(
        reason_of(envelope(), vec![attempt(0, "gpt-9")]),
        Some(R::ModelNotInPricing)
    );
    let nameless = with(attempt(0, "glm-5"), |a| a.request_model = None);
    assert_eq!(
        reason_of(envelope(), vec![nameless]),
        Some(R::ModelNotInPricing)
    );
}

#[test]
fn output_cap_missing() {
    let a = with(attempt(0, "glm-5"), |a| a.output_cap = Count::Missing);
    assert_eq!(reason_of(envelope(), vec![a]), Some(R::OutputCapMissing));
}

#[test]
fn input_tokens_missing() {
    let a = with(attempt(0, "glm-5"), |a| a.input_tokens = Count::Missing);
    assert_eq!(reason_of(envelope(), vec![a]), Some(R::InputTokensMissing));
}

#[test]
fn absent_cached_tokens_count_as_zero() {
    let a = with(attempt(1, "deepseek-v4-flash"), |a| {
        a.cached_input_tokens = Count::Missing
    });
    let rows = eval(vec![attempt(0, "glm-5"), a]);
    // 10000 * 0.319 + 800 * 0.957 = 3955.6 per million
    assert_eq!(rows[1].planned_attempt_usd, Some(d("0.0039556")));
    assert!(rows[1].audited);
}

#[test]
fn invalid_usage_for_negative_absurd_or_inconsistent_counts() {
    for broken in [
        with(attempt(0, "glm-5"), |a| a.input_tokens = Count::Value(-1)),
        with(attempt(0, "glm-5"), |a| a.output_tokens = Count::Value(-5)),
        with(attempt(0, "glm-5"), |a| {
            a.cached_input_tokens = Count::Value(10_001)
        }),
        with(attempt(0, "glm-5"), |a| {
            a.input_tokens = Count::Value(crate::contract::MAX_TOKEN_COUNT + 1)
        }),
        with(attempt(0, "glm-5"), |a| a.output_cap = Count::OutOfRange),
    ] {
        let rows = eval(vec![broken]);
        assert_eq!(rows[0].unaudited_reason, Some(R::InvalidUsage));
        assert_eq!(rows[0].planned_attempt_usd, None);
    }
}

#[test]
fn first_attempt_missing() {
    let rows = eval(vec![attempt(1, "glm-5")]);
    assert_eq!(rows[0].unaudited_reason, Some(R::FirstAttemptMissing));
    assert_eq!(rows[0].decision, Decision::Unaudited);
    assert_eq!(rows[0].spend_class, SpendClass::Unknown);
    assert_eq!(rows[0].original_model, None);
    // Its own cost is still known.
    assert_eq!(rows[0].cumulative_incremental_usd, Some(d("0.00766626")));
}

#[test]
fn earlier_attempt_missing() {
    let rows = eval(vec![attempt(0, "glm-5"), attempt(2, "glm-5")]);
    assert_eq!(rows[1].unaudited_reason, Some(R::EarlierAttemptMissing));
    assert_eq!(rows[1].cumulative_incremental_usd, None);
    assert_eq!(rows[1].remaining_envelope_usd, None);
}

#[test]
fn earlier_attempt_unpriced() {
    let unpriced = with(attempt(1, "glm-5"), |a| a.output_cap = Count::Missing);
    let rows = eval(vec![attempt(0, "glm-5"), unpriced, attempt(2, "glm-5")]);
    assert_eq!(rows[1].unaudited_reason, Some(R::OutputCapMissing));
    assert_eq!(rows[2].unaudited_reason, Some(R::EarlierAttemptUnpriced));
    assert_eq!(rows[2].cumulative_incremental_usd, None);
    assert_eq!(rows[2].planned_attempt_usd, Some(d("0.00766626")));
}

#[test]
fn envelope_conflict_takes_figures_from_the_logical_span() {
    let retry = with(attempt(1, "glm-5"), |a| {
        a.envelope = EnvelopeFields {
            present: true,
            max_incremental_usd: Some(d("0.5")),
            ..Default::default()
        };
    });
    let rows = eval(vec![attempt(0, "glm-5"), retry]);
    assert!(rows
        .iter()
        .all(|r| r.unaudited_reason == Some(R::EnvelopeConflict)));
    assert_eq!(rows[1].max_incremental_usd, Some(d("0.015")));
    assert_eq!(rows[1].decision, Decision::Unaudited);
}

#[test]
fn equal_values_written_differently_do_not_conflict() {
    let retry = with(attempt(1, "glm-5"), |a| {
        a.envelope = EnvelopeFields {
            present: true,
            max_incremental_usd: Some(d("0.0150")),
            ..Default::default()
        };
    });
    assert!(eval(vec![attempt(0, "glm-5"), retry])[1].audited);
}

#[test]
fn decision_precedence_follows_the_spec_order() {
    // Every violation at once: replay_unsafe wins, then over_attempts, then routing_drift.
    let env = env_with(|e| {
        e.max_attempts_after_first = Some(0);
        e.max_incremental_usd = Some(d("0.001"));
    });
    let first = with(attempt(0, "glm-5"), |a| {
        a.output_reached_client = Some(true)
    });
    let rows = eval_with(env.clone(), vec![first, attempt(1, "kimi-k2.6")]);
    assert_eq!(
        rows[1].violations,
        vec![
            Violation::ReplayUnsafe,
            Violation::OverAttempts,
            Violation::RoutingDrift,
            Violation::OverEnvelope
        ]
    );
    assert_eq!(rows[1].decision, Decision::ReplayUnsafe);

    let rows = eval_with(
        env.clone(),
        vec![attempt(0, "glm-5"), attempt(1, "kimi-k2.6")],
    );
    assert_eq!(rows[1].decision, Decision::OverAttempts);

    let env = env_with(|e| e.max_incremental_usd = Some(d("0.001")));
    let rows = eval_with(
        env.clone(),
        vec![attempt(0, "glm-5"), attempt(1, "kimi-k2.6")],
    );
    assert_eq!(rows[1].decision, Decision::RoutingDrift);

    // Unaudited beats over_envelope, which is only judged when audited.
    let unaudited = with(attempt(1, "glm-5"), |a| a.output_cap = Count::Missing);
    let rows = eval_with(env.clone(), vec![attempt(0, "glm-5"), unaudited]);
    assert_eq!(rows[1].decision, Decision::Unaudited);
    assert_eq!(rows[1].violations, vec![]);

    let rows = eval_with(env, vec![attempt(0, "glm-5"), attempt(1, "glm-5")]);
    assert_eq!(rows[1].decision, Decision::OverEnvelope);
}

#[test]
fn missing_indices_are_assigned_by_start_time() {
    let late = with(attempt(0, "deepseek-v4-flash"), |a| {
        a.attempt_index = None;
        a.start_time_unix_nano = T0 + 10 * SECOND;
    });
    let early = with(attempt(5, "glm-5"), |a| a.start_time_unix_nano = T0);
    let rows = eval(vec![late, early]);
    assert_eq!(rows[0].attempt_index, 0);
    assert_eq!(rows[0].retry_model.as_deref(), Some("glm-5"));
    assert_eq!(rows[1].attempt_index, 1);
    assert_eq!(rows[1].spend_class, SpendClass::Fallback);
}

#[test]
fn order_of_attempts_in_the_request_does_not_matter() {
    let attempts = vec![
        attempt(0, "glm-5"),
        attempt(1, "deepseek-v4-flash"),
        attempt(2, "glm-5"),
    ];
    let mut reversed = attempts.clone();
    reversed.reverse();
    assert_eq!(eval(attempts), eval(reversed));
}

#[test]
fn decision_reason_of_within_envelope_names_the_figures() {
    let rows = eval(vec![attempt(0, "glm-5"), attempt(1, "glm-5")]);
    assert_eq!(
        rows[1].decision_reason,
        "retry 1 of glm-5 brings incremental spend to 0.00766626 USD, within the 0.015 envelope (0.00733374 USD left)"
    );
}

#[test]
fn late_retry_is_judged_with_the_attempts_already_written() {
    let mut late = request_with(envelope(), vec![attempt(2, "glm-5")]);
    late.evaluated = vec![attempt(0, "glm-5"), attempt(1, "glm-5")];
    let rows = evaluate(&late, &book(), &RulesConfig::default());
    assert_eq!(rows.len(), 1, "only the late attempt gets a row");
    assert_eq!(rows[0].attempt_index, 2);
    assert_eq!(rows[0].cumulative_incremental_usd, Some(d("0.01533252")));
    assert_eq!(rows[0].decision, Decision::OverEnvelope);
}

#[test]
fn envelope_conflict_takes_each_figure_from_the_logical_span_else_the_lowest_index() {
    let partial = EnvelopeFields {
        present: true,
        billing_group: Some("default".into()),
        ..Default::default()
    };
    let full = |a: SpanFacts| with(a, |a| a.envelope = envelope());
    let rows = eval_with(
        partial,
        vec![full(attempt(0, "glm-5")), full(attempt(1, "glm-5"))],
    );
    assert_eq!(rows[1].unaudited_reason, Some(R::EnvelopeConflict));
    assert_eq!(rows[1].billing_group.as_deref(), Some("default"));
    assert_eq!(rows[1].max_incremental_usd, Some(d("0.015")));
    assert_eq!(rows[1].planned_attempt_usd, Some(d("0.02299878")));
}

#[test]
fn family_lists_in_another_order_do_not_conflict() {
    let retry = with(attempt(1, "glm-5"), |a| {
        a.envelope = EnvelopeFields {
            present: true,
            allowed_fallback_families: Some(vec!["deepseek".into(), "glm".into(), "qwen".into()]),
            ..Default::default()
        };
    });
    assert!(eval(vec![attempt(0, "glm-5"), retry])[1].audited);
}

#[test]
fn parent_grouped_attempts_take_the_request_id_of_their_logical_span() {
    let mut request = request_with(envelope(), vec![attempt(0, "glm-5")]);
    request.key = GroupKey::Parent {
        trace_id: [7; 16],
        parent_span_id: Some([99; 8]),
    };
    request.attempts[0].request_id = None;
    if let Some(l) = request.logical.as_mut() {
        l.request_id = Some("req-from-logical".into());
    }
    let rows = evaluate(&request, &book(), &RulesConfig::default());
    assert_eq!(rows[0].request_id, "req-from-logical");
}

#[test]
fn a_request_of_a_hundred_thousand_attempts_is_evaluated_in_linear_time() {
    const ATTEMPTS: i32 = 100_000;
    let numbered = |i: i32| {
        with(attempt(0, "glm-5"), |a| {
            a.attempt_index = Some(i);
            a.span_id = (u64::from(i.unsigned_abs()) + 1).to_be_bytes();
        })
    };
    let mut request = request_with(envelope(), (ATTEMPTS / 2..ATTEMPTS).map(numbered).collect());
    request.evaluated = (0..ATTEMPTS / 2).map(numbered).collect();
    // A scan per attempt made this take minutes; linear, it takes about a second in debug.
    let rows = evaluate(&request, &book(), &RulesConfig::default());
    assert_eq!(rows.len(), (ATTEMPTS / 2) as usize);
    assert_eq!(rows[0].attempt_index, ATTEMPTS / 2);
    assert_eq!(rows[0].decision, Decision::OverAttempts);
}

/// The shipped snapshot under another version, with `glm-5` priced at `input` per million.
fn book_pricing_glm_input_at(input: &str) -> (PricingBook, EnvelopeFields) {
    let text = SNAPSHOT.replace(VERSION, "dear").replace(
        r#""input": "0.775", "output": "2.480""#,
        &format!(r#""input": "{input}", "output": "0""#),
    );
    let mut book = book();
    book.insert(Snapshot::from_bytes("dear.json".as_ref(), text.as_bytes()).unwrap())
        .unwrap();
    (book, env_with(|e| e.pricing_version = Some("dear".into())))
}

#[test]
fn usage_too_large_to_price_exactly_is_invalid_usage() {
    let (book, env) = book_pricing_glm_input_at("79228162514264337593543950335");
    let request = request_with(env, vec![attempt(0, "glm-5"), attempt(1, "glm-5")]);
    let rows = evaluate(&request, &book, &RulesConfig::default());
    for row in &rows {
        assert_eq!(row.unaudited_reason, Some(R::InvalidUsage));
        assert_eq!(row.planned_attempt_usd, None);
    }
    assert_eq!(rows[1].decision, Decision::Unaudited);
}

#[test]
fn a_cumulative_too_large_to_hold_exactly_leaves_the_retries_unaudited() {
    // Each retry plans 5e15 * 1000.0000000001 / 1e6 = 5000000000000.5 USD: a decimal holds
    // one exactly at 16 places, but not the sum of two.
    let (book, env) = book_pricing_glm_input_at("1000.0000000001");
    let huge = |index| {
        with(attempt(index, "glm-5"), |a| {
            a.input_tokens = Count::Value(5_000_000_000_000_000);
            a.cached_input_tokens = Count::Value(0);
            a.output_cap = Count::Value(0);
        })
    };
    let request = request_with(env, vec![huge(0), huge(1), huge(2), huge(3)]);
    let rows = evaluate(&request, &book, &RulesConfig::default());
    assert_eq!(rows[1].planned_attempt_usd, Some(d("5000000000000.5")));
    assert!(rows[1].audited);
    assert_eq!(rows[1].decision, Decision::OverEnvelope);
    assert_eq!(rows[2].planned_attempt_usd, Some(d("5000000000000.5")));
    assert_eq!(rows[2].cumulative_incremental_usd, None);
    assert_eq!(rows[2].unaudited_reason, Some(R::InvalidUsage));
    assert_eq!(rows[2].decision, Decision::Unaudited);
    assert_eq!(rows[3].cumulative_incremental_usd, None);
    assert_eq!(rows[3].unaudited_reason, Some(R::EarlierAttemptUnpriced));
}
